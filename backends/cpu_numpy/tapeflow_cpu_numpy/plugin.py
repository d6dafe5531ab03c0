"""The CPU backend plugin: one Backend (``cpu:0``) and the NumPy kernels."""

from __future__ import annotations

import importlib
import os

import numpy as np

from tapeflow.plugins import Backend, hookimpl

TAPEFLOW_PLUGIN_API = 1

#: kernel modules; each exposes ``build(xp) -> {op name: spec}`` where a spec is
#: a callable or a dict(fn=..., dtypes=..., needs_device=..., fresh=...)
KERNEL_MODULES = ("k_math", "k_reduce", "k_linalg", "k_array", "k_nn", "k_random")


class NumpyBackend(Backend):
    name = "numpy"
    device_type = "cpu"
    gpu_priority = 1000

    def list_devices(self):
        return [{"index": 0, "is_gpu": False,
                 "description": f"NumPy {np.__version__} on the host ({os.cpu_count()} cores)"}]

    def to_host(self, array, device):
        return np.asarray(array)

    def from_host(self, array, device):
        return array

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
    registry.add_backend(NumpyBackend())


def iter_kernels(xp=np):
    for modname in KERNEL_MODULES:
        try:
            mod = importlib.import_module(f"tapeflow_cpu_numpy.{modname}")
        except ModuleNotFoundError as e:
            if e.name != f"tapeflow_cpu_numpy.{modname}":
                raise
            continue
        for op_name, spec in mod.build(xp).items():
            if callable(spec):
                spec = {"fn": spec}
            yield op_name, spec


@hookimpl
def tapeflow_register_kernels(registry):
    for op_name, spec in iter_kernels(np):
        registry.add_kernel(op_name, "cpu", spec["fn"], dtypes=spec.get("dtypes"),
                            needs_device=spec.get("needs_device", False),
                            fresh=spec.get("fresh", False))
