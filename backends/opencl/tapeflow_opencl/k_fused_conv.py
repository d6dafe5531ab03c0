"""The fused convolution ``_FusedConv2D`` (Conv2D + BiasAdd + activation, issue 34).

The convolution is :func:`tapeflow_opencl.k_nn.conv2d` (direct, no im2col); the bias
and the activation then run as one elementwise kernel over its output (one launch,
one read and one write of the output, where the unfused ops make two or three). The
activation expressions are those of :mod:`tapeflow_opencl.k_nn` (``Relu``, ``Relu6``,
``Elu``, ``LeakyRelu``) and, for Gelu, the operations of tapeflow's ``gelu`` in their
order (``erf``/``tanh`` of OpenCL C), so the result agrees with the unfused ops within
float rounding. (Writing the epilogue inside ``conv_fwd``'s final store would save
that pass too; it needs a hook in k_nn's kernel template.)
"""

from __future__ import annotations

import math

from . import k_nn
from . import runtime as rt
from .runtime import FLOATS

#: activation -> OpenCL C body of ``fc_act(z, a)`` for C type ``t``
_BODIES = {
    None: lambda t: "z",
    "Relu": lambda t: f"z < ({t})0 ? ({t})0 : z",
    "Relu6": lambda t: f"z < ({t})0 ? ({t})0 : (z > ({t})6 ? ({t})6 : z)",
    "Elu": lambda t: f"(z < ({t})0 ? ({t})0 : z) + expm1(z > ({t})0 ? ({t})0 : z)",
    "LeakyRelu": lambda t: "z > 0 ? z : z * a",
    "GeluExact": lambda t: (f"(z * ({t})0.5) * (erf(z * ({t}){1.0 / math.sqrt(2.0)!r}) "
                            f"+ ({t})1)"),
    "GeluApproximate": lambda t: (
        f"(z * ({t})0.5) * (tanh((z + (z * z * z) * ({t})0.044715) * "
        f"({t}){math.sqrt(2.0 / math.pi)!r}) + ({t})1)"),
}


def _preamble(act, t):
    return (f"static inline {t} fc_act({t} z, {t} a) {{ return {_BODIES[act](t)}; }}\n")


def fused_conv2d(x, w, b, strides, padding, data_format, dilations, fused_ops, num_args=1,
                 leakyrelu_alpha=0.2):
    """``act(conv2d(x, w) + b)``: the direct convolution, then one epilogue kernel."""
    y = k_nn.conv2d(x, w, strides, padding, data_format, dilations)
    if y.size == 0:
        return y
    dev = rt.device_of(x)
    if data_format == "NCHW":
        (bs,), boff = rt.layout(b)
        b = rt.view(b, (b.shape[0], 1, 1), (bs, 0, 0), boff)
    act = fused_ops[1] if len(fused_ops) > 1 else None
    t = rt.CTYPES[y.dtype]
    a = rt.scalar(dev, leakyrelu_alpha if act == "LeakyRelu" else 0.0, y.dtype)
    return rt.elementwise("fc_act(x0 + x1, x2)", y.dtype, y, b, a,
                          preamble=_preamble(act, t))


def build():
    return {"_FusedConv2D": {"fn": fused_conv2d, "dtypes": FLOATS}}
