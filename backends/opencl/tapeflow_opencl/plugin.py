"""The OpenCL backend plugin (entry point ``tapeflow = opencl``).

Loads on every machine: without PyOpenCL or an OpenCL driver the backend reports
``opencl`` unavailable with the reason. The kernel modules import nothing from
PyOpenCL at import time (kernels compile on first call), so the ``opencl`` kernel
coverage shows in ``python -m tapeflow info`` everywhere.

Each kernel module ``k_*.py`` exposes ``build() -> {op name: spec}`` where a spec is
a callable or ``dict(fn=..., dtypes=..., needs_device=...)``, the CPU backend's
convention. bfloat16 is added to the kernels that declare float32 by
:func:`tapeflow_opencl.bf16.declare` (16-bit storage, float32 compute).
"""

from __future__ import annotations

import importlib

from tapeflow.errors import NotFoundError
from tapeflow.plugins import get_op, hookimpl

from . import bf16, cplx
from .backend import BACKEND, OpenCLBackend

TAPEFLOW_PLUGIN_API = 1

__all__ = ["BACKEND", "OpenCLBackend", "unavailable_reason", "TAPEFLOW_PLUGIN_API",
           "KERNEL_MODULES", "SKIPPED"]

KERNEL_MODULES = ("k_math", "k_reduce", "k_softmax", "k_linalg", "k_array", "k_index", "k_nn",
                  "k_pool", "k_random", "k_scan", "k_lapack", "k_fft", "k_optim", "k_fused_conv")

#: ops a kernel module defines that no loaded op declares (skipped, not fatal)
SKIPPED: list = []


def unavailable_reason():
    """Why ``opencl`` devices are unavailable here, or None."""
    return BACKEND.unavailable_reason()


def iter_kernels():
    for modname in KERNEL_MODULES:
        try:
            mod = importlib.import_module(f"tapeflow_opencl.{modname}")
        except ModuleNotFoundError as e:
            if e.name != f"tapeflow_opencl.{modname}":
                raise
            continue
        for op_name, spec in mod.build().items():
            if callable(spec):
                spec = {"fn": spec}
            yield op_name, cplx.declare(op_name, bf16.declare(op_name, spec))


@hookimpl
def tapeflow_register_backends(registry):
    registry.add_backend(BACKEND)


@hookimpl
def tapeflow_register_kernels(registry):
    SKIPPED.clear()
    for op_name, spec in iter_kernels():
        try:
            get_op(op_name)
        except NotFoundError:
            SKIPPED.append(op_name)
            continue
        registry.add_kernel(op_name, "opencl", spec["fn"], dtypes=spec.get("dtypes"),
                            needs_device=spec.get("needs_device", False),
                            variants=spec.get("variants"), out=spec.get("out", False))


#: ops with no OpenCL kernel (tests/backends/test_opencl.py: every other op has one here);
#: none since complex numbers and the Fourier transforms have kernels (``cplx``, ``k_fft``)
OPS_WITHOUT_KERNEL = frozenset()


@hookimpl
def tapeflow_known_gaps():
    """No known gaps: every conformance spec passes on ``opencl``."""
    return {}
