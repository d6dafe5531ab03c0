"""The CUDA backend plugin (entry point ``tapeflow = cuda_cupy``).

Loads on every machine: the backend reports itself unavailable with the reason when
CuPy or a CUDA driver/GPU is missing, and the kernels are registered lazily (nothing
here imports CuPy), so ``python -m tapeflow info`` shows the ``cuda`` coverage anyway.
"""

from __future__ import annotations

from tapeflow.errors import NotFoundError
from tapeflow.plugins import get_op, hookimpl

from .backend import BACKEND, CupyBackend
from .kernels import DEVICE_TYPE, LazyKernel, declared

TAPEFLOW_PLUGIN_API = 1

__all__ = ["BACKEND", "CupyBackend", "unavailable_reason", "TAPEFLOW_PLUGIN_API"]

#: ops declared by the CPU kernel modules that no loaded op defines (skipped, not fatal)
SKIPPED: list = []


def unavailable_reason():
    """Why ``cuda`` devices are unavailable here, or None."""
    return BACKEND.unavailable_reason()


@hookimpl
def tapeflow_register_backends(registry):
    registry.add_backend(BACKEND)


@hookimpl
def tapeflow_register_kernels(registry):
    SKIPPED.clear()
    for op_name, (dtypes, needs_device) in declared().items():
        try:
            get_op(op_name)
        except NotFoundError:
            SKIPPED.append(op_name)
            continue
        registry.add_kernel(op_name, DEVICE_TYPE, LazyKernel(op_name), dtypes=dtypes,
                            needs_device=needs_device)


@hookimpl
def tapeflow_known_gaps():
    return {}
