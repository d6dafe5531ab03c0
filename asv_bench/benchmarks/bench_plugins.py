"""Plugin ops against built-in ops, per device.

``PluginDispatch``: a plugin op declared with ``tapeflow.plugins.Library`` whose
kernels are the built-in ``Tanh``'s own kernel functions, so
``time_plugin_tanh`` / ``bench_dispatch.Dispatch.time_builtin_tanh`` is the pure
plugin-dispatch ratio (target <= 1.1; ``benchmarks/plugin_dispatch.py`` prints it
from one interleaved run). ``GeluPlugin``: the example plugin ``tapeflow-gelu``
(``tf.ops.gelu.gelu``), forward and gradient, kernel-bound (its dispatch cost is
``bench_dispatch.Dispatch.time_plugin_gelu``).
"""

import tapeflow as tf

from .common import DEVICES, check_dtype, device, rand, sync, warm

_LIB = None


def _plugin_tanh():
    """A plugin op with Tanh's kernels on every device type (registered once)."""
    global _LIB
    if _LIB is None:
        from tapeflow.plugins import Library, get_op, register
        lib = Library("asv_plugins")

        @lib.op()
        def tanh(x, name=None):
            """Tanh's kernels as a plugin op"""

        for dev_type, k in get_op("Tanh").kernels.items():
            lib.kernel(tanh, dev_type, needs_device=k.needs_device,
                       dtypes=None if k.dtypes is None else [d.name for d in k.dtypes])(k.fn)
        register(lib)
        _LIB = tanh
    return _LIB


class PluginDispatch:
    """``tanh(x)``, x float32 (1,), through a plugin op with the built-in's kernels."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        self.plugin_tanh = _plugin_tanh()
        with tf.device(name):
            self.x = tf.constant(rand(1, "float32"))
        warm(dev, lambda: self.plugin_tanh(self.x))

    def time_plugin_tanh(self, name):
        self.plugin_tanh(self.x)
        sync(self.dev)


class GeluPlugin:
    params = [DEVICES, ["float32"], [100_000]]
    param_names = ["device", "dtype", "size"]

    def setup(self, name, dtype, size):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        try:
            self.gelu = tf.ops.gelu.gelu
        except AttributeError as e:
            raise NotImplementedError(
                f"the example plugin tapeflow-gelu is not installed: {e}") from None
        with tf.device(name):
            self.x = tf.constant(rand(size, dt, low=-3, high=3))
        warm(dev, lambda: self.gelu(self.x))
        warm(dev, self._grad)

    def _grad(self):
        with tf.GradientTape() as tape:
            tape.watch(self.x)
            y = self.gelu(self.x)
        return tape.gradient(y, self.x)

    def time_gelu(self, name, dtype, size):
        self.gelu(self.x)
        sync(self.dev)

    def time_gelu_gradient(self, name, dtype, size):
        self._grad()
        sync(self.dev)
