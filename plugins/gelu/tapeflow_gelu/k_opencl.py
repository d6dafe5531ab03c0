"""PyOpenCL kernels (device type ``opencl``): one ``ElementwiseKernel`` launch per call.

Native arrays are ``pyopencl.array.Array``; each kernel runs on its input's queue.
The same formulas and clamps as :mod:`.k_cpu`, in OpenCL C, compiled once per
(context, dtype, kernel): ``float16`` is read and written with ``vload_half`` /
``vstore_half`` and computed in ``float`` (no ``cl_khr_fp16`` needed), ``float64``
needs a device with ``cl_khr_fp64``. PyOpenCL is imported on the first call only.
Elementwise kernels walk the buffer, so strided inputs are copied first
(``tapeflow_opencl.kernel_input``). :func:`build` is the kernel table
(``build(ctx) -> {op name: KernelSpec}``).
"""

from __future__ import annotations

import numpy as np

from tapeflow.errors import UnimplementedError
from tapeflow.plugins import KernelSpec

from .k_cpu import FLOATS, tanh_form

#: OpenCL C for one compute type ``A`` (``float`` or ``double``)
PREAMBLE = r"""
#define A {A}
inline A gelu_sigmoid(A z) {{
    A e = exp(-fabs(z));
    return z >= (A)0 ? (A)1 / ((A)1 + e) : e / ((A)1 + e);
}}
inline A gelu_fwd(A x, int approximate) {{
    if (!approximate) {{
        A xl = x < (A)-50 ? (A)-50 : x;
        return (A)0.5 * xl * erfc(xl * (A)-0.7071067811865476);
    }}
    A xl = x < (A)-25 ? (A)-25 : x;
    A xc = xl > (A)25 ? (A)25 : xl;
    A z = (A)1.5957691216057308 * xc * ((A)1 + (A)0.044715 * xc * xc);
    return xl * gelu_sigmoid(z);
}}
inline A gelu_bwd(A dy, A x, int approximate) {{
    if (!approximate) {{
        A xc = x < (A)-50 ? (A)-50 : (x > (A)50 ? (A)50 : x);
        A cdf = (A)0.5 * erfc(xc * (A)-0.7071067811865476);
        A pdf = (A)0.3989422804014327 * exp((A)-0.5 * xc * xc);
        return dy * (cdf + xc * pdf);
    }}
    A xc = x < (A)-25 ? (A)-25 : (x > (A)25 ? (A)25 : x);
    A x2 = xc * xc;
    A z = (A)1.5957691216057308 * xc * ((A)1 + (A)0.044715 * x2);
    A s = gelu_sigmoid(z), sc = gelu_sigmoid(-z);
    return dy * (s + (A)1.5957691216057308 * xc * ((A)1 + (A)0.134145 * x2) * s * sc);
}}
"""

_CTYPE = {np.dtype(np.float16): "half", np.dtype(np.float32): "float",
          np.dtype(np.float64): "double"}


def source(name, dtype):
    """``(arguments, operation, preamble)`` of kernel ``name`` for ``dtype``."""
    dtype = np.dtype(dtype)
    t = _CTYPE[dtype]
    half = t == "half"
    if half:       # PyOpenCL has no C name for float16: pass the bits, read them as half
        t = "ushort"
        load = lambda v: f"vload_half(i, (__global const half *){v})"  # noqa: E731
        store = lambda v, e: f"vstore_half({e}, i, (__global half *){v})"  # noqa: E731
    else:
        load = lambda v: f"{v}[i]"  # noqa: E731
        store = lambda v, e: f"{v}[i] = {e}"  # noqa: E731
    if name == "gelu":
        args = f"{t} *y, const {t} *x, int approximate"
        op = store("y", f"gelu_fwd({load('x')}, approximate)")
    else:
        args = f"{t} *dx, const {t} *dy, const {t} *x, int approximate"
        op = store("dx", f"gelu_bwd({load('dy')}, {load('x')}, approximate)")
    return args, op, PREAMBLE.format(A="double" if t == "double" else "float")


_kernels: dict = {}


def _kernel(name, x):
    key = (name, x.context, x.dtype)
    k = _kernels.get(key)
    if k is None:
        from pyopencl.elementwise import ElementwiseKernel
        if x.dtype == np.float64 and "cl_khr_fp64" not in x.queue.device.extensions:
            raise UnimplementedError(f"the OpenCL device {x.queue.device.name!r} has no "
                                     "float64 support (cl_khr_fp64)")
        args, op, preamble = source(name, x.dtype)
        k = _kernels[key] = ElementwiseKernel(x.context, args, op, f"tapeflow_{name}",
                                              preamble=preamble)
    return k


def _contiguous(*arrays):
    """The inputs as arrays a kernel can index from element 0: tapeflow passes strided
    views (transposes, slices with an offset, broadcasts) to kernels;
    ``tapeflow_opencl.kernel_input`` copies those (and returns the others as they are)."""
    from tapeflow_opencl import kernel_input
    return [kernel_input(a) for a in arrays]


def gelu(x, approximate=False):
    import pyopencl.array as cla
    x, = _contiguous(x)
    y = cla.empty_like(x)
    if x.size:
        _kernel("gelu", x)(y, x, int(tanh_form(approximate)), queue=x.queue)
    return y


def gelu_grad(dy, x, approximate=False):
    import pyopencl.array as cla
    if dy.shape != x.shape:     # the dispatcher then reports the op's shape rule
        raise ValueError(f"shapes {dy.shape} and {x.shape} differ")
    dy, x = _contiguous(dy, x)
    dx = cla.empty_like(x)
    if x.size:
        _kernel("gelu_grad", x)(dx, dy, x, int(tanh_form(approximate)), queue=x.queue)
    return dx


def build(ctx):
    """``{op name: KernelSpec}``: the gelu ops' PyOpenCL kernels (compiled per context
    and dtype on their first call)."""
    return {"gelu::gelu": KernelSpec(gelu, FLOATS),
            "gelu::gelu_grad": KernelSpec(gelu_grad, FLOATS)}
