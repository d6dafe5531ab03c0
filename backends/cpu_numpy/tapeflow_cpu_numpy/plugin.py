"""The CPU backend plugin: one Backend (``cpu:0``) and the NumPy kernels."""

from __future__ import annotations

import os

import numpy as np

from tapeflow import kernels
from tapeflow.plugins import Backend, BuildContext, hookimpl

from . import hostmem

TAPEFLOW_PLUGIN_API = 1


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
    """What the NumPy kernels are built with: ``numpy``, and bfloat16 computed in float32
    (the other services, SciPy's special functions and ``numpy.add.at``, are the
    defaults of :mod:`tapeflow.kernels`)."""
    return BuildContext(np, "cpu", bfloat16_variant=kernels.compute_in_float32)


@hookimpl
def tapeflow_register_kernels(registry):
    registry.add_kernels("cpu", kernels.build_all(build_context()))
