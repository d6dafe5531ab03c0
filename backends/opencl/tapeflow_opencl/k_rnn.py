"""Fused recurrent kernels (:class:`RNNKernels`): ``FusedLSTM``, ``FusedGRU`` and their
gradients (``tapeflow.ops.fused``, docs/fused-ops.md).

The GEMMs are :func:`tapeflow_opencl.k_linalg.matmul_views` (the backend's matmul,
transposes as strided views): the input projection of all T steps is one GEMM
``x [T*B, I] @ kernel``; each step one GEMM ``h @ recurrent_kernel`` and one launch of
the fused elementwise step (below); the backward pass one GEMM per step
(``dz @ recurrent_kernel^T``) and, after the loop, ``dx``, ``dkernel`` and
``drecurrent_kernel`` one GEMM each over all steps and the bias gradients one column
sum each.

The elementwise steps are OpenCL C kernels with one work item per (batch row, unit):
they read the pre-activations in the user's gate layout (``gate_order``: the column
block of each gate is a kernel argument, so the weights are never reordered), write
the hidden outputs in the op's layout (activated gates in the canonical order
``"ifoc"`` / ``"zrh"``, feature-major ``[k*H, B]`` per step, the LSTM's cell states
and the GRU's ``hn`` ``[H, B]``), and write ``dz`` in the user's layout so that the
weight gradients come out in it. float16 and bfloat16 run in float32
(:mod:`tapeflow_opencl.bf16`).
"""

from __future__ import annotations

import numpy as np

from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .k_array import strided_copy
from .k_linalg import matmul_views, sum_axes
from .runtime import FLOATS

_I64 = np.int64

_HEAD = """#define T {t}
static inline T sig(T v) {{ return (T)1 / ((T)1 + exp(-v)); }}
"""

_LSTM_FWD = """
__kernel void lstm_fwd(__global const T *xw, long xo, __global const T *rec,
                       __global const T *bias, long bo,
                       __global const T *cp, long co, long cpb, long cpj,
                       __global T *gates, long go, __global T *cs, long cso,
                       __global T *hs, long ho, long B, long H,
                       long oi, long of, long oc, long oo, T fb) {
    long gid = get_global_id(0);
    if (gid >= B * H) return;
    long b = gid / H, j = gid % H, r = b * 4 * H;
    T i = sig(xw[xo + r + oi * H + j] + rec[r + oi * H + j] + bias[bo + oi * H + j]);
    T f = sig(xw[xo + r + of * H + j] + rec[r + of * H + j] + bias[bo + of * H + j] + fb);
    T o = sig(xw[xo + r + oo * H + j] + rec[r + oo * H + j] + bias[bo + oo * H + j]);
    T g = tanh(xw[xo + r + oc * H + j] + rec[r + oc * H + j] + bias[bo + oc * H + j]);
    T c = f * cp[co + b * cpb + j * cpj] + i * g;
    gates[go + j * B + b] = i;
    gates[go + (H + j) * B + b] = f;
    gates[go + (2 * H + j) * B + b] = o;
    gates[go + (3 * H + j) * B + b] = g;
    cs[cso + j * B + b] = c;
    hs[ho + b * H + j] = o * tanh(c);
}
"""

_LSTM_BWD = """
__kernel void lstm_bwd(__global const T *gates, long go, __global const T *cs, long cso,
                       __global const T *cp, long co, long cpb, long cpj,
                       __global const T *dh, long dho, __global const T *dout, long doo,
                       __global T *dc, __global T *dz, long dzo, long B, long H,
                       long oi, long of, long oc, long oo) {
    long gid = get_global_id(0);
    if (gid >= B * H) return;
    long b = gid / H, j = gid % H, r = dzo + b * 4 * H;
    T i = gates[go + j * B + b], f = gates[go + (H + j) * B + b];
    T o = gates[go + (2 * H + j) * B + b], g = gates[go + (3 * H + j) * B + b];
    T tc = tanh(cs[cso + j * B + b]);
    T dhv = dh[dho + b * H + j] + dout[doo + b * H + j];
    T dcv = dc[b * H + j] + dhv * o * ((T)1 - tc * tc);
    dz[r + oi * H + j] = dcv * g * i * ((T)1 - i);
    dz[r + of * H + j] = dcv * cp[co + b * cpb + j * cpj] * f * ((T)1 - f);
    dz[r + oo * H + j] = dhv * tc * o * ((T)1 - o);
    dz[r + oc * H + j] = dcv * i * ((T)1 - g * g);
    dc[b * H + j] = dcv * f;
}
"""

_GRU_FWD = """
__kernel void gru_fwd(__global const T *xw, long xo, __global const T *rec,
                      __global const T *bias, long bo, __global const T *rb, long rbo,
                      __global const T *hp, long hpo, __global T *gates, long go,
                      __global T *hn, long hno, __global T *hs, long ho, long B, long H,
                      long oz, long orr, long oh) {
    long gid = get_global_id(0);
    if (gid >= B * H) return;
    long b = gid / H, j = gid % H, r = b * 3 * H;
    T z = sig(xw[xo + r + oz * H + j] + bias[bo + oz * H + j]
              + rec[r + oz * H + j] + rb[rbo + oz * H + j]);
    T rr = sig(xw[xo + r + orr * H + j] + bias[bo + orr * H + j]
               + rec[r + orr * H + j] + rb[rbo + orr * H + j]);
    T hh = rec[r + oh * H + j] + rb[rbo + oh * H + j];
    T n = tanh(xw[xo + r + oh * H + j] + bias[bo + oh * H + j] + rr * hh);
    gates[go + j * B + b] = z;
    gates[go + (H + j) * B + b] = rr;
    gates[go + (2 * H + j) * B + b] = n;
    hn[hno + j * B + b] = hh;
    hs[ho + b * H + j] = n + z * (hp[hpo + b * H + j] - n);
}
"""

_GRU_BWD = """
__kernel void gru_bwd(__global const T *gates, long go, __global const T *hn, long hno,
                      __global const T *hp, long hpo, __global const T *dh, long dho,
                      __global const T *dout, long doo, __global T *dxz, long dxo,
                      __global T *dhz, long dho2, __global T *dhd, long B, long H,
                      long oz, long orr, long oh) {
    long gid = get_global_id(0);
    if (gid >= B * H) return;
    long b = gid / H, j = gid % H, r = b * 3 * H;
    T z = gates[go + j * B + b], rr = gates[go + (H + j) * B + b];
    T n = gates[go + (2 * H + j) * B + b];
    T dhv = dh[dho + b * H + j] + dout[doo + b * H + j];
    T dzz = dhv * (hp[hpo + b * H + j] - n) * z * ((T)1 - z);
    T dnn = dhv * ((T)1 - z) * ((T)1 - n * n);
    T drr = dnn * hn[hno + j * B + b] * rr * ((T)1 - rr);
    dxz[dxo + r + oz * H + j] = dzz;
    dxz[dxo + r + orr * H + j] = drr;
    dxz[dxo + r + oh * H + j] = dnn;
    dhz[dho2 + r + oz * H + j] = dzz;
    dhz[dho2 + r + orr * H + j] = drr;
    dhz[dho2 + r + oh * H + j] = dnn * rr;
    dhd[b * H + j] = dhv * z;
}
"""


def _t(a):
    """A transposed view of the 2-d ``a``."""
    (s0, s1), off = rt.layout(a)
    return rt.view(a, (a.shape[1], a.shape[0]), (s1, s0), off)


def _rows(a, t, rows, cols):
    """The ``[rows, cols]`` block ``t`` of the contiguous ``a`` (a view)."""
    return rt.view(a, (rows, cols), None, rt.layout(a)[1] + t * rows * cols)


def _off(a):
    return rt.layout(a)[1]


def _steps(n, reverse):
    return range(n - 1, -1, -1) if reverse else range(n)


class RNNKernels:
    """The recurrent kernels of one OpenCL backend (``ctx.runtime``: the runtime)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def _kernel(self, dev, dtype, src, name):
        """The compiled kernel ``name`` of ``src`` for ``dtype`` (its scalar arguments'
        types read from the signature: ``long`` or ``T``)."""
        t = rt.CTYPES[np.dtype(dtype)]
        params = src[src.index("(") + 1:src.index(")")].split(",")
        sd = [None if "*" in p else _I64 if p.split()[0] == "long" else np.dtype(dtype).type
              for p in params]
        return rt.kernel(dev, _HEAD.format(t=t) + src, name, sd)

    def _prev_states(self, dev, outputs, h0, reverse):
        """``[T*B, H]``: the state each step started from."""
        t_len, bs, n = outputs.shape
        hp = rt.empty(dev, (t_len, bs, n), outputs.dtype)
        if t_len:
            step = bs * n
            first, rest = ((t_len - 1) * step, 0) if reverse else (0, step)
            strided_copy(dev, hp, first, (1,), h0, _off(h0), (1,), (step,))
            src = step if reverse else 0
            strided_copy(dev, hp, rest, (1,), outputs, _off(outputs) + src, (1,),
                         ((t_len - 1) * step,))
        return rt.view(hp, (t_len * bs, n))

    def _final(self, dev, a, fm):
        """A fresh ``[B, H]`` copy of the state ``a`` (``fm``: stored ``[H, B]``)."""
        return rt.contiguous(_t(a)) if fm else rt.elementwise("x0", a.dtype, a)

    def lstm(self, x, h0, c0, kernel, recurrent_kernel, bias, forget_bias=0.0,
             gate_order="ifco", reverse=False):
        """``(outputs, h_last, c_last, gates, cell_states)``."""
        dev = rt.device_of(x)
        dt = x.dtype
        t_len, bs, i_dim = x.shape
        n = h0.shape[1]
        x, h0, c0 = rt.contiguous(x), rt.contiguous(h0), rt.contiguous(c0)
        xw = matmul_views(rt.view(x, (t_len * bs, i_dim)), kernel)
        outs = rt.empty(dev, (t_len, bs, n), dt)
        gates = rt.empty(dev, (t_len, 4 * n, bs), dt)
        cs = rt.empty(dev, (t_len, n, bs), dt)
        if t_len == 0 or bs * n == 0:
            return (outs, self._final(dev, h0, False), self._final(dev, c0, False), gates, cs)
        k = self._kernel(dev, dt, _LSTM_FWD, "lstm_fwd")
        blocks = [gate_order.index(g) for g in "ifco"]
        (bst,), bo = rt.layout(bias)
        bias = bias if bst == 1 else rt.contiguous(bias)
        bo = _off(bias)
        h, cp, co, cpb, cpj = h0, c0, _off(c0), n, 1
        for t in _steps(t_len, reverse):
            rec = matmul_views(h, recurrent_kernel)
            rt.launch(dev, k, (bs * n,), None, xw.base_data, t * bs * 4 * n, rec.base_data,
                      rt.buf(dev, bias), bo, rt.buf(dev, cp), co, cpb, cpj, gates.base_data,
                      t * 4 * n * bs, cs.base_data, t * n * bs, outs.base_data, t * bs * n,
                      bs, n, *blocks, forget_bias)
            h = _rows(outs, t, bs, n)
            cp, co, cpb, cpj = cs, t * n * bs, 1, bs
        return (outs, self._final(dev, h, False), self._final(dev, _rows(cs, t, n, bs), True),
                gates, cs)

    def _weight_grads(self, dev, x, h0, outputs, kernel, dxz, dhz, states, reverse):
        """``(dx, *states, dkernel, drecurrent_kernel, dbias[, drecurrent_bias])``:
        one GEMM each over all steps (``dhz`` None: the LSTM, one bias)."""
        t_len, bs, i_dim = x.shape
        dx = matmul_views(dxz, _t(kernel))
        dw = matmul_views(_t(rt.view(x, (t_len * bs, i_dim))), dxz)
        hz = dxz if dhz is None else dhz
        du = matmul_views(_t(self._prev_states(dev, outputs, h0, reverse)), hz)
        grads = [rt.view(dx, x.shape), *states, dw, du, sum_axes(dxz, (0,))]
        if dhz is not None:
            grads.append(sum_axes(dhz, (0,)))
        return tuple(grads)

    def lstm_grad(self, x, h0, c0, kernel, recurrent_kernel, outputs, cell_states, gates,
                  d_outputs, d_h, d_c, forget_bias=0.0, gate_order="ifco", reverse=False):
        """``(dx, dh0, dc0, dkernel, drecurrent_kernel, dbias)``."""
        dev = rt.device_of(x)
        dt = x.dtype
        t_len, bs, _ = x.shape
        n = h0.shape[1]
        x, h0, c0, outputs = (rt.contiguous(a) for a in (x, h0, c0, outputs))
        gates, cs, dout = (rt.contiguous(a) for a in (gates, cell_states, d_outputs))
        dz = rt.empty(dev, (t_len * bs, 4 * n), dt)
        dh = rt.contiguous(d_h)
        dc = rt.elementwise("x0", dt, d_c)
        if t_len and bs * n:
            k = self._kernel(dev, dt, _LSTM_BWD, "lstm_bwd")
            blocks = [gate_order.index(g) for g in "ifco"]
            ut = _t(recurrent_kernel)
            for t in _steps(t_len, not reverse):
                p = t + 1 if reverse else t - 1
                if 0 <= p < t_len:
                    cp, co, cpb, cpj = cs, _off(cs) + p * n * bs, 1, bs
                else:
                    cp, co, cpb, cpj = c0, _off(c0), n, 1
                rt.launch(dev, k, (bs * n,), None, gates.base_data, _off(gates) + t * 4 * n * bs,
                          cs.base_data, _off(cs) + t * n * bs, rt.buf(dev, cp), co, cpb, cpj,
                          rt.buf(dev, dh), _off(dh), dout.base_data, _off(dout) + t * bs * n,
                          dc.base_data, dz.base_data, t * bs * 4 * n, bs, n, *blocks)
                dh = matmul_views(_rows(dz, t, bs, 4 * n), ut)
        else:
            dh = rt.elementwise("x0", dt, dh)
        return self._weight_grads(dev, x, h0, outputs, kernel, dz, None, (dh, dc), reverse)

    def gru(self, x, h0, kernel, recurrent_kernel, bias, recurrent_bias, gate_order="zrh",
            reverse=False):
        """``(outputs, h_last, gates, hn)``."""
        dev = rt.device_of(x)
        dt = x.dtype
        t_len, bs, i_dim = x.shape
        n = h0.shape[1]
        x, h0 = rt.contiguous(x), rt.contiguous(h0)
        bias, recurrent_bias = rt.contiguous(bias), rt.contiguous(recurrent_bias)
        xw = matmul_views(rt.view(x, (t_len * bs, i_dim)), kernel)
        outs = rt.empty(dev, (t_len, bs, n), dt)
        gates = rt.empty(dev, (t_len, 3 * n, bs), dt)
        hn = rt.empty(dev, (t_len, n, bs), dt)
        if t_len == 0 or bs * n == 0:
            return outs, self._final(dev, h0, False), gates, hn
        k = self._kernel(dev, dt, _GRU_FWD, "gru_fwd")
        blocks = [gate_order.index(g) for g in "zrh"]
        h = h0
        for t in _steps(t_len, reverse):
            rec = matmul_views(h, recurrent_kernel)
            rt.launch(dev, k, (bs * n,), None, xw.base_data, t * bs * 3 * n, rec.base_data,
                      bias.base_data, _off(bias), recurrent_bias.base_data,
                      _off(recurrent_bias), rt.buf(dev, h), _off(h), gates.base_data,
                      t * 3 * n * bs, hn.base_data, t * n * bs, outs.base_data, t * bs * n,
                      bs, n, *blocks)
            h = _rows(outs, t, bs, n)
        return outs, self._final(dev, h, False), gates, hn

    def gru_grad(self, x, h0, kernel, recurrent_kernel, outputs, gates, hn, d_outputs, d_h,
                 gate_order="zrh", reverse=False):
        """``(dx, dh0, dkernel, drecurrent_kernel, dbias, drecurrent_bias)``."""
        dev = rt.device_of(x)
        dt = x.dtype
        t_len, bs, _ = x.shape
        n = h0.shape[1]
        x, h0, outputs = (rt.contiguous(a) for a in (x, h0, outputs))
        gates, hn, dout = (rt.contiguous(a) for a in (gates, hn, d_outputs))
        dxz = rt.empty(dev, (t_len * bs, 3 * n), dt)
        dhz = rt.empty(dev, (t_len * bs, 3 * n), dt)
        dh = rt.elementwise("x0", dt, d_h)
        if t_len and bs * n:
            k = self._kernel(dev, dt, _GRU_BWD, "gru_bwd")
            blocks = [gate_order.index(g) for g in "zrh"]
            ut = _t(recurrent_kernel)
            for t in _steps(t_len, not reverse):
                p = t + 1 if reverse else t - 1
                hp, hpo = ((outputs, _off(outputs) + p * bs * n) if 0 <= p < t_len
                           else (h0, _off(h0)))
                dhd = rt.empty(dev, (bs, n), dt)
                rt.launch(dev, k, (bs * n,), None, gates.base_data, _off(gates) + t * 3 * n * bs,
                          hn.base_data, _off(hn) + t * n * bs, rt.buf(dev, hp), hpo,
                          rt.buf(dev, dh), _off(dh), dout.base_data, _off(dout) + t * bs * n,
                          dxz.base_data, t * bs * 3 * n, dhz.base_data, t * bs * 3 * n,
                          dhd.base_data, bs, n, *blocks)
                dh = rt.elementwise("x0 + x1", dt, dhd,
                                    matmul_views(_rows(dhz, t, bs, 3 * n), ut))
        return self._weight_grads(dev, x, h0, outputs, kernel, dxz, dhz, (dh,), reverse)

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {"FusedLSTM": KernelSpec(self.lstm, dtypes=FLOATS),
                "FusedLSTMGrad": KernelSpec(self.lstm_grad, dtypes=FLOATS),
                "FusedGRU": KernelSpec(self.gru, dtypes=FLOATS),
                "FusedGRUGrad": KernelSpec(self.gru_grad, dtypes=FLOATS)}


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return RNNKernels(ctx).table()
