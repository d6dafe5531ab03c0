"""The CUDA backend plugin (entry point ``tapeflow = cuda_cupy``).

Loads on every machine: the backend reports itself unavailable with the reason when
CuPy or a CUDA driver/GPU is missing, and the kernels are registered as lazy kernel
specs (``KernelSpec.lazy``: nothing here imports CuPy, the first call builds them), so
``python -m tapeflow info`` shows the ``cuda`` coverage anyway.
"""

from __future__ import annotations

from tapeflow.plugins import hookimpl

from .backend import BACKEND, CupyBackend
from .kernels import DEVICE_TYPE, lazy_table

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
    SKIPPED[:] = registry.add_kernels(DEVICE_TYPE, lazy_table(), missing="skip")


@hookimpl
def tapeflow_known_gaps():
    return {}
