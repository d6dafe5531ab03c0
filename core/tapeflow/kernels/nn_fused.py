"""Fused convolution epilogues (issue 34): Conv2D + BiasAdd + activation as one kernel
(the op ``_FusedConv2D``, :mod:`tapeflow.ops.fused`, docs/fused-ops.md).

The convolution is :meth:`NNKernels._conv_nhwc <tapeflow.kernels.nn.NNKernels._conv_nhwc>`
(im2col GEMMs a block of images at a time on the host, Winograd where its cost rule
says so, one GEMM on a GPU); the bias and the activation run as its ``epilogue``, in
place on each output block right after the block's GEMM, while it is still in cache:
no second pass over the output and no temporary of its size (LeakyRelu, Elu and Gelu
use one temporary of a block's size). On CuPy (the CUDA backend's fallback when
cuDNN's fused path is off) the "block" is the whole batch.

The activations compute what the unfused kernels compute (``maximum(z, 0)``, ...), so
the fused result equals the unfused one up to the GEMM's own rounding; float16 runs in
float32 (as Conv2D does) and is rounded once at the end.

>>> import numpy as np
>>> k = FusedNNKernels(np)
>>> x, w = np.ones((1, 3, 3, 1)), np.ones((2, 2, 1, 1))
>>> k.fused_conv2d(x, w, np.array([-5.0]), (1, 1), "VALID", "NHWC", (1, 1),
...                ("BiasAdd", "Relu"), 1, 0.2)[0, :, :, 0]
array([[0., 0.],
       [0., 0.]])
"""

from __future__ import annotations

import math as _pymath

from ..plugins import KernelSpec
from .math import scipy_special
from .nn import FLOATS, NNKernels, back, compute_dtype, nhwc

#: the epilogue works on rows of up to this many elements (a whole image when it is
#: that small, else one image row): see :class:`Epilogue`
ROW_ELEMS = 1 << 14

_SQRT_HALF = 1.0 / _pymath.sqrt(2.0)
_SQRT_2_PI = _pymath.sqrt(2.0 / _pymath.pi)


class Epilogue:
    """``block += bias; block = act(block)`` in place, for one ``_FusedConv2D`` call
    (``act`` from ``fused_ops``; an instance is the ``epilogue`` given to
    ``_conv_nhwc``, called once per NHWC output block).

    A contiguous block is viewed as rows of whole pixels (a whole image when it has
    at most :data:`ROW_ELEMS` elements, else one image row), and the bias and the
    activations' constants (0, 6) are tiled to one row: NumPy then runs one SIMD inner
    loop per row. Broadcasting a ``(C,)`` bias runs one inner loop per pixel (C
    elements), and ``maximum(z, 0)`` with a scalar takes a loop 3x slower than with an
    array (NumPy 2.4, float32: 280 vs 80 us on the seeds' CNN's first output)."""

    def __init__(self, xp, bias, act, alpha, special=scipy_special):
        self.xp = xp
        self.special = special       # (SciPy's special functions for xp: GeluExact's erf)
        self.bias = bias
        self.alpha = alpha
        self.act = None if act is None else getattr(self, "_" + act.lower())
        self._rows = None      # (row length, bias row, zeros row, sixes row)

    def _consts(self, block):
        """``(block as rows, bias, 0, 6)``: tiled rows for a contiguous block, else the
        block itself with the (C,) bias and scalars."""
        n, ho, wo, o = block.shape
        if not block.flags.c_contiguous or block.size == 0:
            return block, self.bias, 0, 6
        per = ho * wo * o if ho * wo * o <= ROW_ELEMS else wo * o
        rows = self._rows
        if rows is None or rows[0] != per:
            xp = self.xp
            b = xp.tile(self.bias, per // o)
            rows = self._rows = (per, b, xp.zeros_like(b), xp.full_like(b, 6))
        return (block.reshape(-1, per),) + rows[1:]

    def __call__(self, block):
        z, bias, zero, six = self._consts(block)
        self.xp.add(z, bias, out=z)
        if self.act is not None:
            self.act(z, zero, six)

    def _relu(self, z, zero, six):
        self.xp.maximum(z, zero, out=z)

    def _relu6(self, z, zero, six):
        xp = self.xp
        xp.maximum(z, zero, out=z)
        xp.minimum(z, six, out=z)

    def _leakyrelu(self, z, zero, six):
        xp, a = self.xp, self.alpha
        t = xp.multiply(z, a)
        if 0.0 <= a <= 1.0:            # the unfused kernel's branch-free forms
            xp.maximum(z, t, out=z)
        elif a > 1.0:
            xp.minimum(z, t, out=z)
        else:
            xp.copyto(z, t, where=~(z > 0))

    def _elu(self, z, zero, six):
        xp = self.xp
        t = xp.minimum(z, zero)
        xp.expm1(t, out=t)
        xp.maximum(z, zero, out=z)
        xp.add(z, t, out=z)

    def _geluexact(self, z, zero, six):
        # 0.5 z (1 + erf(z / sqrt 2)), the unfused gelu's operations
        xp = self.xp
        t = xp.multiply(z, z.dtype.type(_SQRT_HALF))
        self.special("_FusedConv2D (GeluExact)").erf(t, out=t)
        t += 1
        xp.multiply(z, 0.5, out=z)
        xp.multiply(z, t, out=z)

    def _geluapproximate(self, z, zero, six):
        # 0.5 z (1 + tanh(sqrt(2 / pi) (z + 0.044715 z^3)))
        xp = self.xp
        t = xp.multiply(z, z)
        t *= z
        t *= z.dtype.type(0.044715)
        t += z
        t *= z.dtype.type(_SQRT_2_PI)
        xp.tanh(t, out=t)
        t += 1
        xp.multiply(z, 0.5, out=z)
        xp.multiply(z, t, out=z)


class FusedNNKernels:
    """The fused convolution kernels, written once against the array module ``xp``
    (``special``: as :class:`~tapeflow.kernels.math.MathKernels`')."""

    def __init__(self, xp, special=None):
        self.xp = xp
        self.special = scipy_special if special is None else special
        self.nn = NNKernels(xp)

    def table(self):
        """``{op name: KernelSpec}`` of this module (see :mod:`tapeflow.kernels`)."""
        return {"_FusedConv2D": KernelSpec(self.fused_conv2d, dtypes=FLOATS)}

    def fused_conv2d(self, x, w, b, strides, padding, data_format, dilations, fused_ops,
                     num_args=1, leakyrelu_alpha=0.2):
        """``act(conv2d(x, w) + b)`` (``act`` = ``fused_ops[1]``, if any), the bias and
        the activation applied to each output block right after its GEMM."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        act = fused_ops[1] if len(fused_ops) > 1 else None
        ep = Epilogue(self.xp, b.astype(cdt, copy=False), act, float(leakyrelu_alpha),
                      self.special)
        out = self.nn._conv_nhwc(nhwc(x, data_format).astype(cdt, copy=False),
                                 w.astype(cdt, copy=False), strides, padding, dilations,
                                 epilogue=ep)
        return back(out.astype(dt, copy=False), data_format)


def build(ctx):
    """The fused convolution kernels for ``ctx.xp`` (service ``special``):
    ``{op name: KernelSpec}``."""
    return FusedNNKernels(ctx.xp, ctx.get("special")).table()
