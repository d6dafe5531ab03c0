"""The CPU backend plugin: one Backend (``cpu:0``) and the NumPy kernels, with the
native C kernels (:mod:`.native`) as their build service ``native`` where they are
built and enabled, and the thread setting applied to them and to the BLAS
(:mod:`.threads`). docs/cpu-kernels.md says which path runs what and how to check."""

from __future__ import annotations

import os

import numpy as np

from tapeflow import kernels
from tapeflow.plugins import Backend, BuildContext, hookimpl

from . import hostmem, native, threads

TAPEFLOW_PLUGIN_API = 1


def native_routing(isa, forced):
    """Whether the CPU backend routes work to the native variant ``isa`` (``forced``:
    chosen by the user, ``set_isa(name)`` or ``TAPEFLOW_CPU_ISA``): not to
    ``"portable"`` (plain C, 4-8 GFLOP/s, 5-15x slower than NumPy's BLAS) unless forced,
    so a CPU without AVX2 (or an arm64 one) keeps NumPy's speed.

    >>> native_routing("avx2", forced=False), native_routing("portable", forced=False)
    (True, False)
    >>> native_routing("portable", forced=True)
    True
    """
    return isa != "portable" or bool(forced)


class NativeService:
    """The native kernel library ``lib`` as the kernels' build service ``native``: its
    ``conv2d``, ``conv2d_backprop_filter``, ``matmul`` and ``get_num_threads``, and
    ``available()``, which is also False while :func:`use_native` has switched it off
    or while the variant in use is an unforced ``"portable"`` (:func:`native_routing`;
    the kernels ask at each call, so either takes effect at the next op)."""

    def __init__(self, lib):
        self.lib = lib
        self.enabled = True
        self.conv2d = lib.conv2d
        self.conv2d_backprop_filter = lib.conv2d_backprop_filter
        self.matmul = lib.matmul
        self.max_pool, self.max_pool_grad = lib.max_pool, lib.max_pool_grad  # pooling.c
        self.avg_pool, self.avg_pool_grad = lib.avg_pool, lib.avg_pool_grad
        self.relu_grad = lib.relu_grad          # (optim.c's one-pass engine)
        self.get_num_threads = lib.get_num_threads
        for name in lib.OPTIMIZER_UPDATES:     # the fused optimizer updates (optim.c)
            setattr(self, name, getattr(lib, name))

    def available(self):
        lib = self.lib
        return self.enabled and lib.available() and native_routing(lib.isa(), lib.isa_forced())


_service = []       # [NativeService or None], made once by native_service()


def native_service():
    """The :class:`NativeService` the kernels are built with, or None when the native
    library is not available (not compiled, ``TAPEFLOW_CPU_NATIVE=0``: ``native.reason()``)."""
    if not _service:
        _service.append(NativeService(native) if native.available() else None)
    return _service[0]


def use_native(enabled=True):
    """Run the CPU backend's float32 convolutions, matmuls, pooling, ReLU gradients and
    optimizer updates through the native kernels (True: the default where they are available) or through
    NumPy (False: the path of ``TAPEFLOW_CPU_NATIVE=0``), from the next op on, without
    restarting; returns the previous setting (False where the native kernels are not
    available, which this cannot change). For tests and benchmarks that compare the two
    paths; each ISA variant is ``native.set_isa(name)``.

    >>> from tapeflow_cpu_numpy import plugin
    >>> before = plugin.use_native(False)      # NumPy's path from here on
    >>> plugin.use_native(before) is False
    True
    """
    svc = native_service()
    if svc is None:
        return False
    before = svc.enabled
    svc.enabled = bool(enabled)
    return before


def native_notes():
    """The lines ``python -m tapeflow info`` shows about the CPU kernels: whether the
    native kernels are in use, which ISA variant, or why not; and the thread counts."""
    svc = native_service()
    forced = " (forced)" if native.isa_forced() else ""
    if svc is not None and svc.available():
        line = (f"native CPU kernels: in use, ISA {native.isa()}{forced} (this CPU runs: "
                f"{', '.join(native.isas())}; TAPEFLOW_CPU_ISA forces one)")
    elif svc is not None and svc.enabled:
        line = (f"native CPU kernels: not in use: the best variant this CPU runs is "
                f"{native.isa()!r} (plain C, slower than NumPy's BLAS; "
                "TAPEFLOW_CPU_ISA=portable forces it)")
    elif svc is not None:
        line = ("native CPU kernels: not in use: switched off by "
                "tapeflow_cpu_numpy.plugin.use_native(False)")
    else:
        line = f"native CPU kernels: not in use: {native.reason() or 'not available'}"
    how = ("" if svc is not None and svc.available() else
           "; convolutions run as Winograd / im2col + NumPy's BLAS")
    return [line + how, threads.describe()]


class NumpyBackend(Backend):
    name = "numpy"
    device_type = "cpu"
    gpu_priority = 1000

    def list_devices(self):
        return [{"index": 0, "is_gpu": False,
                 "description": f"NumPy {np.__version__} on the host ({os.cpu_count()} cores); "
                                f"host memory: {hostmem.tune()}"}]

    def to_host(self, array, device):
        return np.asarray(array)

    def from_host(self, array, device):
        return array

    def from_dlpack(self, obj, device):
        return np.from_dlpack(obj)          # host memory (NumPy, PyTorch on CPU...): no copy

    def copy_from(self, array, src, dst):
        if src.backend is self:
            return array   # one host device: tensors are immutable, sharing is safe
        return np.array(src.backend.to_host(array, src), copy=True)

    def fusible_op(self, op_name, in_dtypes, attrs):
        """Whether :meth:`fuse_elementwise` compiles this op (see :mod:`.fusion`)."""
        from .fusion import fusible_op
        return fusible_op(op_name, in_dtypes, attrs)

    def fuse_elementwise(self, spec):
        """One function for a group of elementwise ops (the graph pass ``fuse``): the
        same ufuncs in order, writing into reused buffers (:mod:`.fusion`)."""
        from .fusion import compile_spec
        return compile_spec(spec)

    def info_notes(self):
        """``python -m tapeflow info``'s lines about the native kernels and threads."""
        return native_notes()

    def memory_info(self, device):
        try:
            import resource
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except Exception:
            peak = None
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            total = None
        return {"peak": peak, "total": total}


@hookimpl
def tapeflow_register_backends(registry):
    hostmem.tune()
    registry.add_backend(NumpyBackend())


def build_context():
    """What the NumPy kernels are built with: ``numpy``, bfloat16 computed in float32,
    and the native kernels (:func:`native_service`, None where they are not available);
    the other services, SciPy's special functions and ``numpy.add.at``, are the
    defaults of :mod:`tapeflow.kernels`."""
    return BuildContext(np, "cpu", bfloat16_variant=kernels.compute_in_float32,
                        native=native_service())


@hookimpl
def tapeflow_register_kernels(registry):
    registry.add_kernels("cpu", kernels.build_all(build_context()))
    threads.install(native if native_service() is not None else None)
