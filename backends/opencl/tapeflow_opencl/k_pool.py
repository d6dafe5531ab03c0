"""Pooling kernels on OpenCL (:class:`PoolKernels`): ``MaxPool``, ``AvgPool`` and their
gradients.

One work item per output (or input-gradient) element, the window loops
inside; window size and strides are compile-time constants. The max-pool
gradient routes each window's ``dy`` to its first maximum in row-major window
order, padded positions included as the lowest value (the ``cpu`` kernel's tie
rule; nothing when no value matches, e.g. NaN). Disjoint windows (strides >=
ksize, the usual 2x2/2): one kernel, each window writes its own positions.
Overlapping windows: ``max_argmax`` writes each window's argmax offset, then
every input position adds ``dy * (argmax == its offset)`` over the windows
covering it in window-offset order, the ``cpu`` kernel's summation order (so
NaN in ``dy`` spreads the same way). ``AvgPool`` divides by the count of
in-bounds positions (SAME and explicit padding), ``AvgPoolGrad`` adds
``dy / count`` in the same order.

Attributes arrive normalised by ``tapeflow.nn`` (see the ``cpu`` kernels): shape
and attribute errors are raised there, before dispatch. Layouts, geometry and
launches are :mod:`tapeflow_opencl.k_nn`'s.
"""

from __future__ import annotations

import numpy as np

from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .k_nn import _I, _geom, _launch2, _new, _nhwc
from .runtime import FLOATS

_POOL = """
#define T {T}
#define LOWEST {LOWEST}
#define ISF {ISF}
#define KH {KH}
#define KW {KW}
#define SH {SH}
#define SW {SW}
// (the window's size and strides are compile-time constants: unrolled loops, cheap
// divisions; the kernel arguments kh_ .. sw_ carry the same values)
#define POOL_ARGS long H, long W, long C, long OH, long OW, \\
        long kh_, long kw_, long sh_, long sw_, long PT, long PL, long NR
#define POOL_VALUES H, W, C, OH, OW, KH, KW, SH, SW, PT, PL, NR
// the input x and the pooled y, read through their offsets and strides
#define X_Y_ARGS __global const T *x, long xo, long xsn, long xsh, long xsw, long xsc, \\
        __global const T *y, long yo, long ysn, long ysh, long ysw, long ysc
// each kernel: dim 0 channels, dim 1 (image, row, column) of its output (OUT_POS:
// a pooled position (n, a, b); IN_POS: an input position (n, h, w)); c the channel
#define OUT_POS \\
    long c = get_global_id(0), l = get_global_id(1); \\
    if (c >= C || l >= NR * OW) return; \\
    long nh = l / OW, b = l - nh * OW; \\
    long n = nh / OH, a = nh - n * OH;
#define IN_POS \\
    long c = get_global_id(0), l = get_global_id(1); \\
    if (c >= C || l >= NR * W) return; \\
    long nh = l / W, w = l - nh * W; \\
    long n = nh / H, h = nh - n * H;
// BODY for each position (i, j) of the window of the pooled (a, b) that is inside the
// input (its row r, column q), in row-major window order
#define IN_WINDOW(BODY) \\
    for (long i = 0; i < KH; i++) {{ \\
        long r = a * SH - PT + i; \\
        if (r < 0 || r >= H) continue; \\
        for (long j = 0; j < KW; j++) {{ \\
            long q = b * SW - PL + j; \\
            if (q < 0 || q >= W) continue; \\
            BODY \\
        }} \\
    }}
// m = v where v is larger (floats: or NaN, which wins as in NumPy's maximum)
#if ISF
#define TAKE_MAX(m, v) if (isnan(v) || (v) > (m)) (m) = (v);
#else
#define TAKE_MAX(m, v) if ((v) > (m)) (m) = (v);
#endif
// am: the window offset of the first maximum of the pooled (n, a, b, c) (argmax_at)
#define WINDOW_ARGMAX \\
    T yv = y[yo + n * ysn + a * ysh + b * ysw + c * ysc]; \\
    int am = argmax_at(x + xo + n * xsn + c * xsc, xsh, xsw, yv, a, b, POOL_VALUES);

__kernel void max_pool(__global T *y, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, long ysn, long ysh, long ysw, long ysc,
        POOL_ARGS) {{
    OUT_POS
    __global const T *xp = x + xo + n * xsn + c * xsc;
    T m = LOWEST;
    IN_WINDOW(
        T v = xp[r * xsh + q * xsw];
        TAKE_MAX(m, v)
    )
    y[n * ysn + a * ysh + b * ysw + c * ysc] = m;
}}

// the window offset (i * KW + j) of the first value equal to the window's output
// (padded positions count as LOWEST), -1 when none is
inline int argmax_at(__global const T *xp, long xsh, long xsw, T yv, long a, long b,
                     POOL_ARGS) {{
    for (long i = 0; i < KH; i++) {{
        long r = a * SH - PT + i;
        for (long j = 0; j < KW; j++) {{
            long q = b * SW - PL + j;
            T v = (r < 0 || r >= H || q < 0 || q >= W) ? LOWEST : xp[r * xsh + q * xsw];
            if (v == yv) return (int)(i * KW + j);
        }}
    }}
    return -1;
}}

__kernel void max_argmax(__global int *arg, X_Y_ARGS, POOL_ARGS) {{
    OUT_POS
    WINDOW_ARGMAX
    arg[((n * OH + a) * OW + b) * C + c] = am;
}}

// disjoint windows: each window writes dy (at its argmax) or 0 to its own positions
__kernel void max_pool_grad_disjoint(__global T *dx, X_Y_ARGS,
        __global const T *dy, long dyo, long dsn, long dsh, long dsw, long dsc,
        long osn, long osh, long osw, long osc, POOL_ARGS) {{
    OUT_POS
    WINDOW_ARGMAX
    T g = dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc];
    __global T *op = dx + n * osn + c * osc;
    IN_WINDOW(
        op[r * osh + q * osw] = g * (am == (int)(i * KW + j) ? (T)1 : (T)0);
    )
}}

// the windows (a, b) covering the input position (h, w): a from ahi down to alo is the
// window offset i = h + PT - a * SH ascending
// the windows (a, b) covering the input position (h, w), in window-offset order
// (i = h + PT - a * SH ascending: a descending); at most one when they are disjoint
#if KH <= SH && KW <= SW
#define COVER_LOOP(BODY) \\
    long a = (h + PT) / SH, b = (w + PL) / SW; \\
    long i = h + PT - a * SH, j = w + PL - b * SW; \\
    if (i < KH && j < KW && a < OH && b < OW) {{ BODY }}
#else
#define COVER_LOOP(BODY) \\
    long ahi = (h + PT) / SH, bhi = (w + PL) / SW; \\
    long alo = h + PT - KH + 1, blo = w + PL - KW + 1; \\
    alo = alo <= 0 ? 0 : (alo + SH - 1) / SH; \\
    blo = blo <= 0 ? 0 : (blo + SW - 1) / SW; \\
    ahi = ahi < OH - 1 ? ahi : OH - 1; \\
    bhi = bhi < OW - 1 ? bhi : OW - 1; \\
    for (long a = ahi; a >= alo; a--) {{ \\
        long i = h + PT - a * SH; \\
        for (long b = bhi; b >= blo; b--) {{ \\
            long j = w + PL - b * SW; \\
            BODY \\
        }} \\
    }}
#endif

__kernel void max_pool_grad(__global T *dx, __global const int *arg,
        __global const T *dy, long dyo, long dsn, long dsh, long dsw, long dsc,
        long xsn, long xsh, long xsw, long xsc, POOL_ARGS) {{
    IN_POS
    T acc = (T)0;
    COVER_LOOP(
        T term = dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc]
                 * (arg[((n * OH + a) * OW + b) * C + c] == (int)(i * KW + j) ? (T)1 : (T)0);
        acc += term;
    )
    dx[n * xsn + h * xsh + w * xsw + c * xsc] = acc;
}}

__kernel void max_pool_grad_grad(__global T *out, X_Y_ARGS,
        __global const T *g, long go, long gsn, long gsh, long gsw, long gsc,
        long osn, long osh, long osw, long osc, POOL_ARGS) {{
    OUT_POS
    WINDOW_ARGMAX
    __global const T *gp = g + go + n * gsn + c * gsc;
    T acc = (T)0;
    for (long i = 0; i < KH; i++) {{
        long r = a * SH - PT + i;
        for (long j = 0; j < KW; j++) {{
            long q = b * SW - PL + j;
            T gv = (r < 0 || r >= H || q < 0 || q >= W) ? (T)0 : gp[r * gsh + q * gsw];
            acc += gv * (am == (int)(i * KW + j) ? (T)1 : (T)0);
        }}
    }}
    out[n * osn + a * osh + b * osw + c * osc] = acc;
}}

inline T pool_count(long a, long b, POOL_ARGS) {{
    long r0 = a * SH - PT, q0 = b * SW - PL;
    long r1 = r0 + KH < H ? r0 + KH : H, q1 = q0 + KW < W ? q0 + KW : W;
    r0 = r0 > 0 ? r0 : 0;
    q0 = q0 > 0 ? q0 : 0;
    return (T)((r1 - r0) * (q1 - q0));
}}

__kernel void avg_pool(__global T *y, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, long ysn, long ysh, long ysw, long ysc,
        POOL_ARGS) {{
    OUT_POS
    __global const T *xp = x + xo + n * xsn + c * xsc;
    T s = (T)0;
    int first = 1;
    for (long i = 0; i < KH; i++) {{
        long r = a * SH - PT + i;
        for (long j = 0; j < KW; j++) {{
            long q = b * SW - PL + j;
            T v = (r < 0 || r >= H || q < 0 || q >= W) ? (T)0 : xp[r * xsh + q * xsw];
            if (first) {{ s = v; first = 0; }} else s += v;
        }}
    }}
    y[n * ysn + a * ysh + b * ysw + c * ysc] = s / pool_count(a, b, POOL_VALUES);
}}

__kernel void avg_pool_grad(__global T *dx, __global const T *dy, long dyo,
        long dsn, long dsh, long dsw, long dsc, long xsn, long xsh, long xsw, long xsc,
        POOL_ARGS) {{
    IN_POS
    T acc = (T)0;
    COVER_LOOP(
        acc += dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc] / pool_count(a, b, POOL_VALUES);
    )
    dx[n * xsn + h * xsh + w * xsw + c * xsc] = acc;
}}
"""

_LOWEST = {np.dtype(np.float32): "(-INFINITY)", np.dtype(np.float64): "(-INFINITY)",
           np.dtype(np.int32): "(-2147483647 - 1)",
           np.dtype(np.int64): "(-9223372036854775807L - 1)"}


def _pool_launch(dev, name, dtype, ksize, strides, g0, g1, *args):
    """Compile (once per dtype and window) and launch the pooling kernel ``name``;
    Python ints among ``args`` are ``long`` arguments, the rest buffers."""
    dtype = np.dtype(dtype)
    src = _POOL.format(T=rt.CTYPES[dtype], LOWEST=_LOWEST[dtype], ISF=int(dtype.kind == "f"),
                       KH=ksize[0], KW=ksize[1], SH=strides[0], SW=strides[1])
    sd = [_I if isinstance(v, (int, np.integer)) else None for v in args]
    _launch2(dev, rt.kernel(dev, src, name, sd), g0, g1, *args)


def _pool_geom(h, w, ksize, strides, padding):
    oh, pt = _geom(h, ksize[0], strides[0], 1, padding, 0)
    ow, pl = _geom(w, ksize[1], strides[1], 1, padding, 1)
    return oh, ow, pt, pl


def _pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, rows):
    return (h, w, c, oh, ow, ksize[0], ksize[1], strides[0], strides[1], pt, pl, rows)


def _pool(name, x, ksize, strides, padding, data_format):
    """MaxPool or AvgPool (kernel ``name``): one launch, one work item per output."""
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    oh, ow, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    y, yst = _new(dev, (n, oh, ow, c), x.dtype, data_format)
    if y.size:
        _pool_launch(dev, name, x.dtype, ksize, strides, c, ow * n * oh,
                     y.base_data, rt.buf(dev, x), xoff, *xst, *yst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
    return y


def _max_grad_operands(x, y, g, ksize, strides, padding, data_format):
    """What both max-pool gradients start from: the device, the geometry ``(n, h, w, c,
    oh, ow, pt, pl)``, the ``X_Y_ARGS`` values of ``x`` (input) and ``y`` (pooled), and
    ``g``'s buffer, offset and strides (``g``: ``dy``, or the gradient's gradient)."""
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    (_, oh, ow, _), yst, yoff = _nhwc(y, data_format)
    _, gst, goff = _nhwc(g, data_format)
    _, _, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    xy = (rt.buf(dev, x), xoff, *xst, rt.buf(dev, y), yoff, *yst)
    return dev, (n, h, w, c, oh, ow, pt, pl), xy, (rt.buf(dev, g), goff, *gst)


class PoolKernels:
    """The pooling kernels on OpenCL (see the module doc); :meth:`table` maps op names
    to them."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def max_pool(self, x, ksize, strides, padding, data_format):
        """MaxPool: the window's largest value (NaN wins), padding ignored."""
        return _pool("max_pool", x, ksize, strides, padding, data_format)

    def max_pool_grad(self, x, y, dy, ksize, strides, padding, data_format):
        """MaxPoolGrad: ``dy`` routed to each window's first maximum (see the module doc)."""
        dev, (n, h, w, c, oh, ow, pt, pl), xy, dys = _max_grad_operands(
            x, y, dy, ksize, strides, padding, data_format)
        dx, dxst = _new(dev, (n, h, w, c), dy.dtype, data_format)
        if dx.size == 0:
            return dx
        pargs = _pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh)
        if strides[0] >= ksize[0] and strides[1] >= ksize[1]:
            # disjoint windows: one launch, each window writes its own positions (zeros
            # first where some positions are in no window)
            if oh * strides[0] - pt < h or ow * strides[1] - pl < w or pt or pl or \
                    strides[0] > ksize[0] or strides[1] > ksize[1] or not n * oh * ow * c:
                zero = self.rt.scalar(dev, 0, dy.dtype)
                dx = self.rt.elementwise("0", dy.dtype, zero, out_shape=dx.shape)
            if n * oh * ow * c:
                _pool_launch(dev, "max_pool_grad_disjoint", x.dtype, ksize, strides, c, ow * n * oh,
                             dx.base_data, *xy, *dys, *dxst, *pargs)
            return dx
        arg = self.rt.empty(dev, (max(n * oh * ow * c, 1),), np.int32)
        if n * oh * ow * c:
            _pool_launch(dev, "max_argmax", x.dtype, ksize, strides, c, ow * n * oh,
                         arg.base_data, *xy, *pargs)
        _pool_launch(dev, "max_pool_grad", x.dtype, ksize, strides, c, w * n * h,
                     dx.base_data, arg.base_data, *dys, *dxst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * h))
        return dx

    def max_pool_grad_grad(self, x, y, g, ksize, strides, padding, data_format):
        """MaxPoolGradGrad: ``g`` at each window's first maximum, per window."""
        dev, (n, h, w, c, oh, ow, pt, pl), xy, gs = _max_grad_operands(
            x, y, g, ksize, strides, padding, data_format)
        out, ost = _new(dev, (n, oh, ow, c), g.dtype, data_format)
        if out.size:
            _pool_launch(dev, "max_pool_grad_grad", x.dtype, ksize, strides, c, ow * n * oh,
                         out.base_data, *xy, *gs, *ost,
                         *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
        return out

    def avg_pool(self, x, ksize, strides, padding, data_format):
        """AvgPool: the window's mean over its in-bounds positions."""
        return _pool("avg_pool", x, ksize, strides, padding, data_format)

    def avg_pool_grad(self, dy, orig_input_shape, ksize, strides, padding, data_format):
        """AvgPoolGrad: ``dy / count`` added to each in-bounds position of its windows."""
        dev = self.rt.device_of(dy)
        n, a, b, cc = orig_input_shape
        nhwc = (n, a, b, cc) if data_format == "NHWC" else (n, b, cc, a)
        _, h, w, c = nhwc
        (_, oh, ow, _), dst, doff = _nhwc(dy, data_format)
        _, _, pt, pl = _pool_geom(h, w, ksize, strides, padding)
        dx, dxst = _new(dev, nhwc, dy.dtype, data_format)
        if dx.size:
            _pool_launch(dev, "avg_pool_grad", dy.dtype, ksize, strides, c, w * n * h,
                         dx.base_data, self.rt.buf(dev, dy), doff, *dst, *dxst,
                         *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * h))
        return dx

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        f = FLOATS
        fi = FLOATS + ("int32", "int64")
        return {
            "MaxPool": KernelSpec(self.max_pool, dtypes=fi),
            "MaxPoolGrad": KernelSpec(self.max_pool_grad, dtypes=f),
            "MaxPoolGradGrad": KernelSpec(self.max_pool_grad_grad, dtypes=f),
            "AvgPool": KernelSpec(self.avg_pool, dtypes=f),
            "AvgPoolGrad": KernelSpec(self.avg_pool_grad, dtypes=f),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return PoolKernels(ctx).table()
