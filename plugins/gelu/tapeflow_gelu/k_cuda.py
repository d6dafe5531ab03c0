"""CuPy kernels (device type ``cuda``): one fused ``ElementwiseKernel`` launch per call.

The same formulas and clamps as :mod:`.k_cpu`, in CUDA C++. One template serves
every dtype: ``float16`` and ``float32`` compute in ``float``, ``float64`` in
``double`` (``gelu_acc<T>``). CuPy is imported on the first call, never at import
time, so the plugin loads (and registers these kernels) on machines without it;
the kernels can only be called on a machine where the ``cuda`` backend has a device.
CuPy's elementwise kernels take strided (non-contiguous) arrays as they are.
:func:`build` is the kernel table (``build(ctx) -> {op name: KernelSpec}``).
"""

from __future__ import annotations

from tapeflow.plugins import KernelSpec

from .k_cpu import FLOATS, tanh_form

PREAMBLE = r"""
template <typename T> struct gelu_acc { typedef float type; };
template <> struct gelu_acc<double> { typedef double type; };

template <typename A> __device__ __forceinline__ A gelu_sigmoid(A z) {
    A e = exp(-fabs(z));                       // in (0, 1]: never overflows
    return z >= (A)0 ? (A)1 / ((A)1 + e) : e / ((A)1 + e);
}

template <typename T> __device__ __forceinline__ T gelu_fwd(T x_, bool approximate) {
    typedef typename gelu_acc<T>::type A;
    A x = (A)x_;
    if (!approximate) {
        A xl = x < (A)-50 ? (A)-50 : x;        // -inf -> -0; NaN stays NaN
        return (T)((A)0.5 * xl * erfc(xl * (A)-0.7071067811865476));
    }
    A xl = x < (A)-25 ? (A)-25 : x;
    A xc = xl > (A)25 ? (A)25 : xl;
    A z = (A)1.5957691216057308 * xc * ((A)1 + (A)0.044715 * xc * xc);
    return (T)(xl * gelu_sigmoid(z));
}

template <typename T> __device__ __forceinline__ T gelu_bwd(T dy_, T x_, bool approximate) {
    typedef typename gelu_acc<T>::type A;
    A dy = (A)dy_, x = (A)x_;
    if (!approximate) {
        A xc = x < (A)-50 ? (A)-50 : (x > (A)50 ? (A)50 : x);
        A cdf = (A)0.5 * erfc(xc * (A)-0.7071067811865476);
        A pdf = (A)0.3989422804014327 * exp((A)-0.5 * xc * xc);
        return (T)(dy * (cdf + xc * pdf));
    }
    A xc = x < (A)-25 ? (A)-25 : (x > (A)25 ? (A)25 : x);
    A x2 = xc * xc;
    A z = (A)1.5957691216057308 * xc * ((A)1 + (A)0.044715 * x2);
    A s = gelu_sigmoid(z), sc = gelu_sigmoid(-z);
    return (T)(dy * (s + (A)1.5957691216057308 * xc * ((A)1 + (A)0.134145 * x2) * s * sc));
}
"""

#: name -> (in_params, out_params, operation), as cupy.ElementwiseKernel takes them
ELEMENTWISE = {
    "gelu": ("T x, bool approximate", "T y", "y = gelu_fwd(x, approximate)"),
    "gelu_grad": ("T dy, T x, bool approximate", "T dx", "dx = gelu_bwd(dy, x, approximate)"),
}

_kernels: dict = {}


def _kernel(name):
    k = _kernels.get(name)
    if k is None:
        import cupy
        ins, outs, op = ELEMENTWISE[name]
        k = _kernels[name] = cupy.ElementwiseKernel(ins, outs, op, f"tapeflow_{name}",
                                                    preamble=PREAMBLE)
    return k


def gelu(x, approximate=False):
    with x.device:
        return _kernel("gelu")(x, tanh_form(approximate))


def gelu_grad(dy, x, approximate=False):
    # an ElementwiseKernel broadcasts (a 0-d dy would pass): check as k_cpu and k_opencl
    # do, so the dispatcher reports the op's shape rule on every device
    if dy.shape != x.shape:
        raise ValueError(f"shapes {dy.shape} and {x.shape} differ")
    with x.device:
        return _kernel("gelu_grad")(dy, x, tanh_form(approximate))


def build(ctx):
    """``{op name: KernelSpec}``: the gelu ops' CuPy kernels (compiled per dtype on
    their first call, so registering them needs no CuPy)."""
    return {"gelu::gelu": KernelSpec(gelu, FLOATS),
            "gelu::gelu_grad": KernelSpec(gelu_grad, FLOATS)}
