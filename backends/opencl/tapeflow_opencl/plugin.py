"""The OpenCL backend plugin (entry point ``tapeflow = opencl``).

Loads on every machine: without PyOpenCL or an OpenCL driver the backend reports
``opencl`` unavailable with the reason. The kernel modules import nothing from
PyOpenCL at import time (kernels compile on first call), so the ``opencl`` kernel
coverage shows in ``python -m tapeflow info`` everywhere.

The kernel contract (docs/backends.md): each kernel module ``k_*.py`` holds one class
of kernels (``MathKernels``, ``NNKernels``...: one method per kernel, or per family of
kernels bound to their expression with ``runtime.bind``) and exposes
``build(ctx) -> {op name: KernelSpec}``, ``ctx`` being :func:`build_context`'s
:class:`~tapeflow.plugins.BuildContext` (``ctx.xp`` is None: the kernels are written
against ``ctx.runtime``, :mod:`tapeflow_opencl.runtime`, not an array module).
:func:`kernel_table` joins the modules' tables and declares bfloat16 and float16
(:func:`tapeflow_opencl.bf16.declare`: 16-bit storage, float32 compute) and complex
(:func:`tapeflow_opencl.cplx.declare`) on the kernels that take them, as further dtypes
and variants of their ``KernelSpec``; the plugin registers that table with one
``registry.add_kernels`` call.
"""

from __future__ import annotations

import importlib

from tapeflow.plugins import BuildContext, KernelSpec, hookimpl

from . import bf16, cplx
from . import runtime as rt
from .backend import BACKEND, OpenCLBackend

TAPEFLOW_PLUGIN_API = 1

__all__ = ["BACKEND", "OpenCLBackend", "unavailable_reason", "TAPEFLOW_PLUGIN_API",
           "KERNEL_MODULES", "SKIPPED", "build_context", "kernel_table"]

#: the kernel modules, in registration order (``tapeflow_opencl.<name>``)
KERNEL_MODULES = ("k_math", "k_reduce", "k_softmax", "k_linalg", "k_array", "k_index", "k_nn",
                  "k_pool", "k_random", "k_scan", "k_lapack", "k_fft", "k_rnn")

#: ops a kernel module defines that no loaded op declares (skipped, not fatal)
SKIPPED: list = []


def unavailable_reason():
    """Why ``opencl`` devices are unavailable here, or None."""
    return BACKEND.unavailable_reason()


def build_context():
    """What the kernel modules' ``build(ctx)`` receive: no array module, the device type
    ``"opencl"`` and the runtime (``ctx.runtime``)."""
    return BuildContext(None, "opencl", runtime=rt)


def kernel_table(ctx=None):
    """``{op name: KernelSpec}``: every OpenCL kernel, as registered (the modules' tables,
    bfloat16/float16 and complex declared). An op two modules define is an error."""
    ctx = build_context() if ctx is None else ctx
    table = {}
    for modname in KERNEL_MODULES:
        try:
            mod = importlib.import_module(f"tapeflow_opencl.{modname}")
        except ModuleNotFoundError as e:
            if e.name != f"tapeflow_opencl.{modname}":
                raise
            continue
        for op_name, spec in mod.build(ctx).items():
            if op_name in table:
                raise RuntimeError(f"tapeflow_opencl.{modname} defines a kernel for "
                                   f"{op_name}, which an earlier kernel module defines")
            table[op_name] = cplx.declare(op_name, bf16.declare(op_name, KernelSpec.of(spec)))
    return table


@hookimpl
def tapeflow_register_backends(registry):
    registry.add_backend(BACKEND)


@hookimpl
def tapeflow_register_kernels(registry):
    SKIPPED[:] = registry.add_kernels("opencl", kernel_table(), missing="skip")


#: ops with no OpenCL kernel (tests/backends/test_opencl.py: every other op has one here);
#: none since complex numbers and the Fourier transforms have kernels (``cplx``, ``k_fft``)
#: ops that run on OpenCL as their composites (the ops of the other kernels: correct, and
#: checked by the conformance suite on opencl:0, but one launch per filter tap or depth
#: slice where a kernel of their own would be one): a gap to close, not a failure
OPS_WITHOUT_KERNEL = frozenset({
    "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
    "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter"})


@hookimpl
def tapeflow_known_gaps():
    """No known gaps: every conformance spec passes on ``opencl``."""
    return {}
