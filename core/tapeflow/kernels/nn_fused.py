"""Fused convolution epilogues (issue 34): Conv2D + BiasAdd + activation as one kernel
(the op ``_FusedConv2D``, :mod:`tapeflow.ops.fused`, docs/fused-ops.md); and the fused
recurrent kernels (issue 45): ``FusedLSTM``, ``FusedGRU`` and their gradients
(:class:`FusedNNKernels`' ``lstm``... methods).

The convolution is :meth:`NNKernels.conv_nhwc <tapeflow.kernels.nn.NNKernels.conv_nhwc>`.
With the build service ``native`` (the CPU backend's C kernels, docs/cpu-kernels.md) the
bias and the activation (Relu, Relu6, LeakyRelu, Elu) go to the native convolution,
which applies them in registers as it stores each output tile; otherwise (no native
library, float64, Gelu) they run as the :class:`Epilogue` of the NumPy convolution
(im2col GEMMs a block of images at a time on the host, Winograd where its cost rule
says so, one GEMM on a GPU), in place on each output block right after the block's
GEMM, while it is still in cache: no second pass over the output and no temporary of
its size (LeakyRelu, Elu and Gelu use one temporary of a block's size). On CuPy (the
CUDA backend's fallback when cuDNN's fused path is off) the "block" is the whole batch.

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
    ``conv_nhwc``, called once per NHWC output block). Its ``fused_args``,
    ``(bias, act, alpha)``, are what a native convolution takes instead.

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
        self.fused_args = (bias, act, alpha)
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


def _order(gate_order, canonical):
    """``idx``: the canonical order's k-th gate is the user's column block ``idx[k]``."""
    return tuple(gate_order.index(g) for g in canonical)


class FusedNNKernels:
    """The fused kernels, written once against the array module ``xp`` (``special``: as
    :class:`~tapeflow.kernels.math.MathKernels`'): the convolution's, and the recurrent
    ones (``lstm``, ``lstm_grad``, ``gru``, ``gru_grad``: ``FusedLSTM``, ``FusedGRU``
    and their gradients, :mod:`tapeflow.ops.fused`).

    The recurrent steps run *feature-major*: the state is kept as ``h^T [H, B]`` and a step's
    pre-activations as ``z^T [k*H, B]``, so that each gate is a contiguous block of
    rows and every elementwise call runs one SIMD loop over contiguous memory (a gate
    of a row-major ``[B, k*H]`` is a strided view: NumPy then loops per row, 5x slower
    at B = 20). Inside, the gates are in a canonical order (``"ifoc"``: the three sigmoid
    gates are one block; GRU ``"zrh"``). The input projection of all T steps is one GEMM
    with the user's kernel, transposed into place gate by gate by the bias add; each
    step is one GEMM (``U^T @ h^T``, ``U^T`` copied once per call in canonical order) and
    in-place ufunc calls on preallocated arrays; the backward pass one GEMM per step
    (``U @ dz^T``), and after the loop ``dz`` is written back in the user's gate order,
    so the weight gradients are one GEMM each over all steps with the user's weights (a
    cell, T = 1, copies no weights at all). The hidden outputs (``gates``, the LSTM's
    ``cell_states``, the GRU's ``hn``) are feature-major ``[T, k*H, B]``. float16 runs
    in float32."""

    def __init__(self, xp, special=None, native=None):
        self.xp = xp
        self.special = scipy_special if special is None else special
        self.nn = NNKernels(xp, native)

    def table(self):
        """``{op name: KernelSpec}`` of this module (see :mod:`tapeflow.kernels`)."""
        return {"_FusedConv2D": KernelSpec(self.fused_conv2d, dtypes=FLOATS),
                "FusedLSTM": KernelSpec(self.lstm, dtypes=FLOATS),
                "FusedLSTMGrad": KernelSpec(self.lstm_grad, dtypes=FLOATS),
                "FusedGRU": KernelSpec(self.gru, dtypes=FLOATS),
                "FusedGRUGrad": KernelSpec(self.gru_grad, dtypes=FLOATS)}

    def fused_conv2d(self, x, w, b, strides, padding, data_format, dilations, fused_ops,
                     num_args=1, leakyrelu_alpha=0.2):
        """``act(conv2d(x, w) + b)`` (``act`` = ``fused_ops[1]``, if any), the bias and
        the activation applied in the native convolution's store, or to each output
        block right after its GEMM (:class:`Epilogue`)."""
        dt = x.dtype
        cdt = compute_dtype(dt)
        act = fused_ops[1] if len(fused_ops) > 1 else None
        ep = Epilogue(self.xp, self.xp.ascontiguousarray(b.astype(cdt, copy=False)), act,
                      float(leakyrelu_alpha), self.special)
        out = self.nn.conv_nhwc(nhwc(x, data_format).astype(cdt, copy=False),
                                w.astype(cdt, copy=False), strides, padding, dilations,
                                epilogue=ep)
        return back(out.astype(dt, copy=False), data_format)

    # --- the recurrent kernels (issue 45) ----------------------------------------

    def _cols(self, w, idx, n, cdt):
        """``w`` (last axis: blocks of ``n``) in canonical order, as ``cdt``."""
        w = w.astype(cdt, copy=False)
        if idx == tuple(range(len(idx))):
            return w
        return self.xp.concatenate([w[..., k * n:(k + 1) * n] for k in idx], axis=-1)

    def _to_fm(self, src, idx, n, out, bias=None, add=False):
        """``out[..., canonical gate k, :] (+)= src[..., user block idx[k]]^T (+ bias)``:
        row-major user-order ``[..., B, kH]`` into feature-major canonical ``[..., kH, B]``,
        one (transposing) call per gate."""
        xp = self.xp
        for k, j in enumerate(idx):
            blk = xp.swapaxes(src[..., j * n:(j + 1) * n], -1, -2)
            o = out[..., k * n:(k + 1) * n, :]
            if bias is not None:
                xp.add(blk, bias[j * n:(j + 1) * n].reshape(n, 1), out=o)
            elif add:
                xp.add(o, blk, out=o)
            else:
                xp.copyto(o, blk)

    def _to_rm(self, src, idx, n, out):
        """The inverse of :meth:`_to_fm`: ``[..., kH, B]`` canonical into ``out [..., B,
        kH]`` in the user's order (the weight gradients' layout)."""
        xp = self.xp
        for k, j in enumerate(idx):
            xp.copyto(out[..., j * n:(j + 1) * n], xp.swapaxes(src[..., k * n:(k + 1) * n, :],
                                                                -1, -2))

    def _sigmoid(self, s):
        """``s = sigmoid(s)`` in place (as ``0.5 tanh(s/2) + 0.5``: no overflow)."""
        xp = self.xp
        xp.multiply(s, 0.5, out=s)
        xp.tanh(s, out=s)
        xp.multiply(s, 0.5, out=s)
        xp.add(s, 0.5, out=s)

    def _project(self, x, w, b, idx, n, cdt):
        """``x [T, B, I] @ w + b`` (user order) feature-major canonical: [T, kH, B], one
        GEMM, then the transposing bias add per gate (the weights are never copied)."""
        xp = self.xp
        t, bs, i = x.shape
        m = w.shape[1]
        z = xp.matmul(x.reshape(t * bs, i).astype(cdt, copy=False), w.astype(cdt, copy=False))
        out = xp.empty((t, m, bs), cdt)
        self._to_fm(z.reshape(t, bs, m), idx, n, out, b)
        return out

    def _recurrent(self, t_len, h0, u, idx, n, cdt):
        """``(U^T [kH, H] canonical contiguous, None)`` for a sequence; for one step (a
        cell) ``(None, (h0 @ u)^T)``: one GEMM, no copy of the weights."""
        if t_len > 1:
            return self.xp.ascontiguousarray(self._cols(u, idx, n, cdt).T), None
        rec = self.xp.empty((u.shape[1], h0.shape[0]), cdt)
        if t_len:
            z = self.xp.matmul(h0.astype(cdt, copy=False), u.astype(cdt, copy=False))
            self._to_fm(z, idx, n, rec)
        return None, rec

    def _fm(self, a, cdt, copy=False):
        """``a [..., B, H]`` feature-major ``[..., H, B]``, contiguous (a view where that
        already is, e.g. B = 1, unless ``copy``: the state the backward pass updates)."""
        t = self.xp.swapaxes(a, -1, -2).astype(cdt, copy=False)
        return t.copy() if copy else self.xp.ascontiguousarray(t)

    def _steps(self, t_len, reverse):
        return range(t_len - 1, -1, -1) if reverse else range(t_len)

    def lstm(self, x, h0, c0, kernel, recurrent_kernel, bias, forget_bias=0.0,
             gate_order="ifco", reverse=False):
        """``(outputs, h_last, c_last, gates, cell_states)``."""
        xp = self.xp
        dt = x.dtype
        cdt = compute_dtype(dt)
        t_len, bs, n = x.shape[0], h0.shape[0], h0.shape[1]
        idx = _order(gate_order, "ifoc")
        b = bias.astype(cdt, copy=bool(forget_bias))
        if forget_bias:
            f = gate_order.index("f")
            b[f * n:(f + 1) * n] += forget_bias
        gates = self._project(x, kernel, b, idx, n, cdt)
        ut, rec = self._recurrent(t_len, h0, recurrent_kernel, idx, n, cdt)
        rec = xp.empty((4 * n, bs), cdt) if rec is None else rec
        outs = xp.empty((t_len, n, bs), cdt)
        cs = xp.empty((t_len, n, bs), cdt)
        tmp = xp.empty((n, bs), cdt)
        h, c = self._fm(h0, cdt), self._fm(c0, cdt)
        for t in self._steps(t_len, reverse):
            g = gates[t]
            if ut is not None:
                xp.matmul(ut, h, out=rec)
            xp.add(g, rec, out=g)
            self._sigmoid(g[:3 * n])
            cand = g[3 * n:]
            xp.tanh(cand, out=cand)
            c_new, h_new = cs[t], outs[t]
            xp.multiply(g[n:2 * n], c, out=c_new)
            xp.multiply(g[:n], cand, out=tmp)
            xp.add(c_new, tmp, out=c_new)
            xp.tanh(c_new, out=tmp)
            xp.multiply(g[2 * n:3 * n], tmp, out=h_new)
            h, c = h_new, c_new
        res = (self._fm(outs, dt), self._fm(h, dt), self._fm(c, dt))
        return res + (gates.astype(dt, copy=False), cs.astype(dt, copy=False))

    def lstm_grad(self, x, h0, c0, kernel, recurrent_kernel, outputs, cell_states, gates,
                  d_outputs, d_h, d_c, forget_bias=0.0, gate_order="ifco", reverse=False):
        """``(dx, dh0, dc0, dkernel, drecurrent_kernel, dbias)``: backpropagation through
        time from the forward pass's saved ``gates`` and ``cell_states``. The last step
        (the first in time) leaves ``dh0`` to one GEMM with the user's weights after the
        loop, so a cell (T = 1) copies no weights."""
        xp = self.xp
        cdt = compute_dtype(x.dtype)
        t_len, bs, n = x.shape[0], h0.shape[0], h0.shape[1]
        idx = _order(gate_order, "ifoc")
        u = self._cols(recurrent_kernel, idx, n, cdt) if t_len > 1 else None
        gates, cs = gates.astype(cdt, copy=False), cell_states.astype(cdt, copy=False)
        c0, dout = self._fm(c0, cdt), self._fm(d_outputs, cdt)
        dz = xp.empty((t_len, 4 * n, bs), cdt)
        dh, dc = self._fm(d_h, cdt, copy=True), self._fm(d_c, cdt, copy=True)
        tc = xp.empty((n, bs), cdt)
        ds = xp.empty((3 * n, bs), cdt)
        for t in self._steps(t_len, not reverse):
            p = t + 1 if reverse else t - 1
            c_prev = cs[p] if 0 <= p < t_len else c0
            g, d = gates[t], dz[t]
            s, i, o, cand = g[:3 * n], g[:n], g[2 * n:3 * n], g[3 * n:]
            xp.add(dh, dout[t], out=dh)
            xp.tanh(cs[t], out=tc)
            xp.multiply(dh, tc, out=d[2 * n:3 * n])              # do (before sigmoid')
            xp.multiply(tc, tc, out=tc)                           # dc += dh o (1 - tanh^2 c)
            xp.subtract(1.0, tc, out=tc)
            xp.multiply(tc, o, out=tc)
            xp.multiply(tc, dh, out=tc)
            xp.add(dc, tc, out=dc)
            xp.multiply(dc, cand, out=d[:n])                      # di
            xp.multiply(dc, c_prev, out=d[n:2 * n])               # df
            xp.subtract(1.0, s, out=ds)                           # sigmoid' = s (1 - s)
            xp.multiply(ds, s, out=ds)
            xp.multiply(d[:3 * n], ds, out=d[:3 * n])
            dg = d[3 * n:]                                        # dc i (1 - g^2)
            xp.multiply(cand, cand, out=dg)
            xp.subtract(1.0, dg, out=dg)
            xp.multiply(dg, i, out=dg)
            xp.multiply(dg, dc, out=dg)
            xp.multiply(dc, g[n:2 * n], out=dc)
            if 0 <= p < t_len:
                xp.matmul(u, d, out=dh)
        fx = self._user_rows(dz, idx, n, cdt)
        grads = self._weight_grads(x, h0, outputs, fx, None, kernel, reverse)
        dh0 = self._first_dh(fx, recurrent_kernel, None, d_h, t_len, bs, reverse, cdt)
        return self._done(x.dtype, grads[0], dh0, self._fm(dc, cdt), *grads[1:])

    def _user_rows(self, dz, idx, n, cdt):
        """The feature-major canonical ``dz [T, kH, B]`` as ``[T*B, kH]`` rows in the
        user's gate order."""
        t_len, m, bs = dz.shape
        out = self.xp.empty((t_len, bs, m), cdt)
        self._to_rm(dz, idx, n, out)
        return out.reshape(t_len * bs, m)

    def _first_dh(self, fh, u, direct, d_h, t_len, bs, reverse, cdt):
        """``dh0``: the first step's ``dz @ U^T`` (user order: no copy of ``u``), plus the
        ``direct`` part (the GRU's ``dh z``, feature-major); ``d_h`` when T = 0."""
        if not t_len:
            return d_h.astype(cdt, copy=True)
        t0 = t_len - 1 if reverse else 0
        dh0 = self.xp.matmul(fh[t0 * bs:(t0 + 1) * bs], u.astype(cdt, copy=False).T)
        if direct is not None:
            self.xp.add(dh0, self.xp.swapaxes(direct, 0, 1), out=dh0)
        return dh0

    def _done(self, dt, *arrays):
        return tuple(a.astype(dt, copy=False) for a in arrays)

    def _weight_grads(self, x, h0, outputs, fx, fh, kernel, reverse):
        """``[dx, dkernel, drecurrent_kernel, dbias(, drecurrent_bias)]`` from the user-
        order rows ``fx`` (and ``fh``: the GRU's recurrent side; None: the same), one GEMM
        each over all steps."""
        xp = self.xp
        cdt = fx.dtype
        t_len, bs, i = x.shape
        n = outputs.shape[2]
        fh_ = fx if fh is None else fh
        dx = xp.matmul(fx, kernel.astype(cdt, copy=False).T).reshape(x.shape)
        dw = xp.matmul(x.reshape(t_len * bs, i).astype(cdt, copy=False).T, fx)
        hp = xp.empty((t_len, bs, n), cdt)
        if t_len:
            outputs = outputs.astype(cdt, copy=False)
            if reverse:
                hp[:-1] = outputs[1:]
                hp[-1] = h0
            else:
                hp[1:] = outputs[:-1]
                hp[0] = h0
        du = xp.matmul(hp.reshape(t_len * bs, n).T, fh_)
        grads = [dx, dw, du, fx.sum(axis=0)]
        if fh is not None:
            grads.append(fh.sum(axis=0))
        return grads

    def gru(self, x, h0, kernel, recurrent_kernel, bias, recurrent_bias, gate_order="zrh",
            reverse=False):
        """``(outputs, h_last, gates, hn)`` (``hn``: each step's ``h @ U_h + b_h``)."""
        xp = self.xp
        dt = x.dtype
        cdt = compute_dtype(dt)
        t_len, bs, n = x.shape[0], h0.shape[0], h0.shape[1]
        idx = _order(gate_order, "zrh")
        gates = self._project(x, kernel, bias.astype(cdt, copy=False), idx, n, cdt)
        ut, rec = self._recurrent(t_len, h0, recurrent_kernel, idx, n, cdt)
        rb = self._cols(recurrent_bias, idx, n, cdt).reshape(3 * n, 1)
        if rec is None:
            rec = xp.empty((3 * n, bs), cdt)
        else:
            xp.add(rec, rb, out=rec)
        outs = xp.empty((t_len, n, bs), cdt)
        hns = xp.empty((t_len, n, bs), cdt)
        tmp = xp.empty((n, bs), cdt)
        h = self._fm(h0, cdt)
        for t in self._steps(t_len, reverse):
            g = gates[t]
            if ut is not None:
                xp.matmul(ut, h, out=rec)
                xp.add(rec, rb, out=rec)
            zr = g[:2 * n]
            xp.add(zr, rec[:2 * n], out=zr)
            self._sigmoid(zr)
            hn, cand = hns[t], g[2 * n:]
            xp.copyto(hn, rec[2 * n:])
            xp.multiply(g[n:2 * n], hn, out=tmp)
            xp.add(cand, tmp, out=cand)
            xp.tanh(cand, out=cand)
            xp.subtract(h, cand, out=tmp)                 # h' = n + z (h - n)
            xp.multiply(tmp, g[:n], out=tmp)
            xp.add(cand, tmp, out=outs[t])
            h = outs[t]
        return (self._fm(outs, dt), self._fm(h, dt), gates.astype(dt, copy=False),
                hns.astype(dt, copy=False))

    def gru_grad(self, x, h0, kernel, recurrent_kernel, outputs, gates, hn, d_outputs, d_h,
                 gate_order="zrh", reverse=False):
        """``(dx, dh0, dkernel, drecurrent_kernel, dbias, drecurrent_bias)``."""
        xp = self.xp
        cdt = compute_dtype(x.dtype)
        t_len, bs, n = x.shape[0], h0.shape[0], h0.shape[1]
        idx = _order(gate_order, "zrh")
        u = self._cols(recurrent_kernel, idx, n, cdt) if t_len > 1 else None
        gates, hn = gates.astype(cdt, copy=False), hn.astype(cdt, copy=False)
        outs, h0f, dout = self._fm(outputs, cdt), self._fm(h0, cdt), self._fm(d_outputs, cdt)
        dxz = xp.empty((t_len, 3 * n, bs), cdt)
        dhz = xp.empty((t_len, 3 * n, bs), cdt)
        dh = self._fm(d_h, cdt, copy=True)
        tmp = xp.empty((n, bs), cdt)
        rec = xp.empty((n, bs), cdt)
        for t in self._steps(t_len, not reverse):
            p = t + 1 if reverse else t - 1
            h_prev = outs[p] if 0 <= p < t_len else h0f
            g, dx_, dh_ = gates[t], dxz[t], dhz[t]
            z, r, cand = g[:n], g[n:2 * n], g[2 * n:]
            dzz, drr, dnn = dx_[:n], dx_[n:2 * n], dx_[2 * n:]
            xp.add(dh, dout[t], out=dh)
            xp.subtract(h_prev, cand, out=dzz)            # dh (h - n) z (1 - z)
            xp.multiply(dzz, dh, out=dzz)
            xp.subtract(1.0, z, out=tmp)
            xp.multiply(tmp, z, out=rec)
            xp.multiply(dzz, rec, out=dzz)
            xp.multiply(dh, tmp, out=dnn)                 # dh (1 - z) (1 - n^2)
            xp.multiply(cand, cand, out=tmp)
            xp.subtract(1.0, tmp, out=tmp)
            xp.multiply(dnn, tmp, out=dnn)
            xp.subtract(1.0, r, out=tmp)                  # dn hn r (1 - r)
            xp.multiply(tmp, r, out=tmp)
            xp.multiply(dnn, hn[t], out=drr)
            xp.multiply(drr, tmp, out=drr)
            xp.copyto(dh_[:2 * n], dx_[:2 * n])
            xp.multiply(dnn, r, out=dh_[2 * n:])
            xp.multiply(dh, z, out=dh)
            if 0 <= p < t_len:
                xp.matmul(u, dh_, out=rec)
                xp.add(dh, rec, out=dh)
        fx, fh = self._user_rows(dxz, idx, n, cdt), self._user_rows(dhz, idx, n, cdt)
        grads = self._weight_grads(x, h0, outputs, fx, fh, kernel, reverse)
        dh0 = self._first_dh(fh, recurrent_kernel, dh, d_h, t_len, bs, reverse, cdt)
        return self._done(x.dtype, grads[0], dh0, *grads[1:])


def build(ctx):
    """The fused convolution kernels for ``ctx.xp`` (services ``special`` and
    ``native``): ``{op name: KernelSpec}``."""
    return FusedNNKernels(ctx.xp, ctx.get("special"), ctx.get("native")).table()
