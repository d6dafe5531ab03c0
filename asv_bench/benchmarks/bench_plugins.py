"""Plugin ops against built-in ops of the same kind, per device.

A plugin op (declared with ``tapeflow.plugins.Library``, registered in-process) with
the built-in's own kernel function dispatches through the same path as the
built-in, so ``time_plugin_*`` / ``time_builtin_*`` is the plugin dispatch ratio
(target <= 1.1; ``benchmarks/plugin_dispatch.py`` prints it from one interleaved
run). ``GeluPlugin`` times the example plugin (``plugins/gelu``) where it is
installed. Parameterised over devices: on a machine without a device (or without
the plugin), setup raises NotImplementedError and asv reports "n/a".
"""

import numpy as np

import tapeflow as tf

DEVICES = ["cpu:0", "gpu:0", "opencl:0"]
_LIB = None


def _require(device):
    available = {d.name for d in tf.list_devices()}
    if device in available or (device.startswith("gpu:") and int(device[4:]) < tf.num_gpus()):
        return device
    raise NotImplementedError(f"device {device} is not available here "
                              f"(have: {', '.join(sorted(available))})")


def _plugin_ops():
    """``{"tanh": fn, "add": fn}``: plugin ops whose kernels, on every device type, are
    the built-ins' (registered once per process)."""
    global _LIB
    if _LIB is None:
        from tapeflow.plugins import Library, get_op, register
        lib = Library("asv_plugins")

        @lib.op()
        def tanh(x, name=None):
            """Tanh's kernels as a plugin op"""

        @lib.op()
        def add(x, y, name=None):
            """Add's kernels as a plugin op"""

        for handle, builtin in ((tanh, "Tanh"), (add, "Add")):
            for dev_type, k in get_op(builtin).kernels.items():
                lib.kernel(handle, dev_type, needs_device=k.needs_device,
                           dtypes=None if k.dtypes is None else [d.name for d in k.dtypes])(k.fn)
        register(lib)
        _LIB = {"tanh": tanh, "add": add}
    return _LIB


class PluginDispatch:
    """One tiny op, plugin vs built-in: ``tanh(x)`` and ``add(a, b)``, float32 (1,)."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, device):
        _require(device)
        self.ops = _plugin_ops()
        with tf.device(device):
            self.a = tf.constant(np.full(1, 0.5, np.float32))
            self.b = tf.constant(np.full(1, 2.0, np.float32))
        for f in (self.ops["tanh"], tf.tanh):      # first calls: caches, lazy kernels
            f(self.a).numpy()
        for f in (self.ops["add"], tf.add):
            f(self.a, self.b).numpy()

    def time_plugin_unary(self, device):
        self.ops["tanh"](self.a)

    def time_builtin_unary(self, device):
        tf.tanh(self.a)

    def time_plugin_binary(self, device):
        self.ops["add"](self.a, self.b)

    def time_builtin_binary(self, device):
        tf.add(self.a, self.b)

    def time_plugin_unary_taped(self, device):
        with tf.GradientTape() as tape:
            tape.watch(self.a)
            self.ops["tanh"](self.a)

    def time_builtin_unary_taped(self, device):
        with tf.GradientTape() as tape:
            tape.watch(self.a)
            tf.tanh(self.a)


class GeluPlugin:
    """The example plugin's ``gelu`` (exact and tanh forms), forward and gradient, on
    float32 (1,) (dispatch-bound) and (1024, 1024) (kernel-bound), next to the
    built-in ``relu`` for scale."""

    params = [DEVICES, [(1,), (1024, 1024)]]
    param_names = ["device", "shape"]

    def setup(self, device, shape):
        _require(device)
        try:
            from tapeflow_gelu import gelu
        except ImportError as e:
            raise NotImplementedError(f"the example plugin is not installed: {e}") from None
        self.gelu = gelu
        rng = np.random.default_rng(0)
        with tf.device(device):
            self.x = tf.constant(rng.normal(size=shape).astype(np.float32))
        self.gelu(self.x).numpy()
        self.gelu(self.x, approximate=True).numpy()
        self._grad().numpy()

    def _grad(self):
        with tf.GradientTape() as tape:
            tape.watch(self.x)
            y = self.gelu(self.x)
        return tape.gradient(y, self.x)

    def time_gelu(self, device, shape):
        self.gelu(self.x).numpy()         # .numpy(): synchronise asynchronous devices

    def time_gelu_tanh(self, device, shape):
        self.gelu(self.x, approximate=True).numpy()

    def time_gelu_gradient(self, device, shape):
        self._grad().numpy()

    def time_builtin_relu(self, device, shape):
        tf.nn.relu(self.x).numpy()
