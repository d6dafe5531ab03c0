"""Neural-network kernels: activations, bias_add, convolution and pooling.

* Activations and ``BiasAdd`` are expressions for :func:`runtime.elementwise`
  (``alpha`` travels as a cached 0-d device scalar, so one kernel serves every
  value; the NCHW bias is a broadcast view ``(C, 1, ..., 1)``). The expressions
  keep NumPy's NaN propagation of the ``cpu`` kernels (``maximum``/``minimum``, and
  ``dy * mask`` products rather than selects).
* Convolution is direct: no im2col buffer. Every 4-D operand is addressed through
  its element strides in logical NHWC order (an NCHW tensor, or any strided view,
  is just other strides), so no transposes are made (only the input gradient copies
  the small filter to have in_channels innermost). Channels are blocked in OpenCL
  vectors of ``OB`` lanes (8/4/2/1 for float32, 4/2/1 for float64: the widest that
  divides the channel count; ``vloadN``/``vstoreN`` where the stride is 1, gathers
  otherwise), which compiles to SIMD on CPUs whatever the driver's work-item
  vectorizer does. Kernels (2-D launches: dimension 0 the channel blocks,
  dimension 1 a flattened (image, row, column block) index):

  - ``conv_fwd``: one work item per (``OB`` output channels, ``PW`` output
    columns, one output row of one image): ``PW`` vector accumulators; the filter
    taps and input channels are the inner loops, one filter vector load serving
    ``PW`` columns. Taps whose ``PW`` columns are all inside the image skip the
    padding masks.
  - ``conv_bpi`` (input gradient): the same with the roles of input and output
    channels swapped: one work item per (``OB`` input channels, ``PW`` input
    columns, one input row) sums over the output positions whose window covers it
    (computed, not searched) and over the output channels. No atomics:
    deterministic.
  - ``conv_bpf`` (filter gradient): one work item per (``NV`` vectors of ``OB``
    output channels, ``CB`` input channels, one filter tap, one slice of the
    (image, output row) pairs); the valid output positions of each tap are computed,
    so the inner loop has no bounds checks. When the filter has few elements next to
    the batch the rows are split in ``S`` slices and ``sum_parts`` adds the ``S``
    partial filters in a fixed order (deterministic).

* Pooling: one work item per output (or input-gradient) element, the window loops
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
and attribute errors are raised there, before dispatch.
"""

from __future__ import annotations

import numpy as np

from . import runtime as rt
from .runtime import FLOATS

_I = np.int64


# --- geometry ------------------------------------------------------------------------------

def _geom(size, k, s, d, padding, i):
    """(output size, pad before) of one spatial dimension (the ``cpu`` kernels' rule)."""
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max((out - 1) * s + eff - size, 0)
        return out, total // 2
    if padding == "VALID":
        return max((size - eff) // s + 1, 0), 0
    pb, pa = padding[i]
    return max((size + pb + pa - eff) // s + 1, 0), pb


def _nhwc(a, fmt):
    """``a``'s (N, H, W, C) sizes and element strides, and its element offset."""
    st, off = rt.layout(a)
    if fmt == "NHWC":
        return tuple(a.shape), st, off
    n, c, h, w = a.shape
    return (n, h, w, c), (st[0], st[2], st[3], st[1]), off


def _new(dev, nhwc_shape, dtype, fmt):
    """A new contiguous array of logical NHWC shape stored in ``fmt`` order, with its
    element strides in NHWC order."""
    n, h, w, c = nhwc_shape
    if fmt == "NHWC":
        out = rt.empty(dev, (n, h, w, c), dtype)
        return out, (h * w * c, w * c, c, 1)
    out = rt.empty(dev, (n, c, h, w), dtype)
    return out, (c * h * w, w, 1, h * w)


def _round(n, m):
    return -(-n // m) * m


def _launch2(dev, k, g0, g1, *args):
    """Launch ``k`` over ``g0 x g1`` work items (the kernel returns for ids past
    them) in work-groups of up to 256 (GPU) or 1024 (CPU) items: dimension 0 whole up
    to 64, dimension 1 the rest, keeping at least 4 groups per compute unit on a CPU
    (PoCL runs each group as one loop: many small groups cost more than the work)."""
    target = min(dev.max_wg, 256 if dev.is_gpu else 1024)
    l0 = g0 if g0 <= 64 else 64
    l1 = 1
    while l1 * 2 * l0 <= target and l1 < g1:
        l1 *= 2
    if not dev.is_gpu:
        while l1 > 1 and -(-g1 // l1) * -(-g0 // l0) < 4 * dev.compute_units:
            l1 //= 2
    rt.launch(dev, k, (_round(g0, l0), _round(g1, l1)), (l0, l1), *args)


# --- activations -----------------------------------------------------------------------------

def _ct(a):
    return rt.CTYPES[a.dtype]


#: activation expressions of ``x0`` (and ``x1``) for C type ``t``, result of ``x0``'s
#: dtype: the kernels below and :func:`expression` (elementwise fusion) share them
_ACTIVATIONS = {
    "Relu": (lambda t: f"x0 < ({t})0 ? ({t})0 : x0", FLOATS + ("int32", "int64")),
    "ReluGrad": (lambda t: f"x0 * (x1 > ({t})0 ? ({t})1 : ({t})0)", FLOATS),
    "Relu6": (lambda t: f"x0 < ({t})0 ? ({t})0 : (x0 > ({t})6 ? ({t})6 : x0)", FLOATS),
    "Relu6Grad": (lambda t: f"x0 * ((x1 > ({t})0 && x1 < ({t})6) ? ({t})1 : ({t})0)", FLOATS),
    "Elu": (lambda t: f"(x0 < ({t})0 ? ({t})0 : x0) + expm1(x0 > ({t})0 ? ({t})0 : x0)",
            FLOATS),
    "EluGrad": (lambda t: f"x0 * ((x1 > ({t})0 ? ({t})0 : x1) + ({t})1)", FLOATS),
}


def expression(op_name, dtypes, attrs=None):
    """``(OpenCL C expression of x0, x1.., result dtype, preamble)`` computing the
    activation ``op_name`` exactly as its kernel here does, or None (another op, or a
    dtype the kernel does not take). Used by elementwise fusion.

    >>> import numpy as np
    >>> expression("Relu", (np.dtype("float32"),))
    ('x0 < (float)0 ? (float)0 : x0', dtype('float32'), '')
    """
    entry = _ACTIVATIONS.get(op_name)
    if entry is None or not dtypes:
        return None
    make, allowed = entry
    dt = np.dtype(dtypes[0])
    if dt.name not in allowed or any(np.dtype(d) != dt for d in dtypes):
        return None
    return make(rt.CTYPES[dt]), dt, ""


def _act(name, *arrays):
    return rt.elementwise(_ACTIVATIONS[name][0](_ct(arrays[0])), arrays[0].dtype, *arrays)


def relu(x):
    return _act("Relu", x)


def relu_grad(dy, x):
    return _act("ReluGrad", dy, x)


def relu6(x):
    return _act("Relu6", x)


def relu6_grad(dy, x):
    return _act("Relu6Grad", dy, x)


def leaky_relu(x, alpha):
    dev = rt.device_of(x)
    a = rt.scalar(dev, alpha, x.dtype)
    # == max(x, alpha x) for 0 <= alpha <= 1, min(x, alpha x) for alpha > 1 (NaN stays NaN)
    return rt.elementwise("x0 > 0 ? x0 : x0 * x1", x.dtype, x, a)


def leaky_relu_grad(dy, x, alpha):
    if rt.broadcast_shape([dy.shape, x.shape]) != tuple(x.shape):
        # (the cpu kernel's in-place product: the gradient takes the features' shape)
        raise ValueError(f"gradients of shape {list(dy.shape)} do not broadcast to the "
                         f"features' shape {list(x.shape)}")
    dev = rt.device_of(dy)
    t = _ct(dy)
    one_minus = rt.scalar(dev, 1.0 - alpha, dy.dtype)
    a = rt.scalar(dev, alpha, dy.dtype)
    return rt.elementwise(f"((x1 > ({t})0 ? ({t})1 : ({t})0) * x2 + x3) * x0", dy.dtype,
                          dy, x, one_minus, a)


def elu(x):
    return _act("Elu", x)


def elu_grad(dy, y):
    return _act("EluGrad", dy, y)


def bias_add(x, b, data_format):
    if data_format == "NCHW" and x.ndim >= 3:
        (bs,), boff = rt.layout(b)
        b = rt.view(b, (b.shape[0],) + (1,) * (x.ndim - 2), (bs,) + (0,) * (x.ndim - 2), boff)
    return rt.elementwise("x0 + x1", x.dtype, x, b)


# --- convolution -----------------------------------------------------------------------------

# Vector helpers: ``VT`` is the OB-wide vector of T (T itself when OB is 1); LDV/STV load
# and store OB values spaced by a stride (vloadN/vstoreN when the stride is known to be 1).
_VEC = """
#define T {T}
#define VT {VT}
#define OB {OB}
#define PW {PW}
#define CB {CB}
#define ISTR {ISTR}
#define NV {NV}
{LDV}
{STV}
"""


def _vec_defs(ct, ob, unit_ld, unit_st):
    """The _VEC header for element type ``ct``, OB lanes, unit-stride loads/stores."""
    vt = ct if ob == 1 else f"{ct}{ob}"
    if ob == 1:
        ldv = "#define LDV(p, s) ((p)[0])"
        stv = "#define STV(v, p, s) ((p)[0] = (v))"
    else:
        if unit_ld:
            ldv = f"#define LDV(p, s) vload{ob}(0, (p))"
        else:
            ldv = (f"#define LDV(p, s) (({vt})(" +
                   ", ".join(f"(p)[{k} * (s)]" for k in range(ob)) + "))")
        if unit_st:
            stv = f"#define STV(v, p, s) vstore{ob}((v), 0, (p))"
        else:
            comps = "0123456789abcdef"
            stv = ("#define STV(v, p, s) do { " +
                   " ".join(f"(p)[{k} * (s)] = (v).s{comps[k]};" for k in range(ob)) +
                   " } while (0)")
    return vt, ldv, stv


_CONV_FWD = """
// y[n, oh, ow0 + p, o0 .. o0 + OB) for p < PW: one work item
__kernel void conv_fwd(__global T *y, __global const T *x, long xo, __global const T *w, long wo,
        long H, long W, long C, long OH, long OW, long O,
        long xsn, long xsh, long xsw, long xsc,
        long wsi, long wsj, long wsc, long wso,
        long ysn, long ysh, long ysw, long yso,
        long KH, long KW, long SH, long SW, long DH, long DW, long PT, long PL, long NR) {
    long o0 = get_global_id(0) * OB;
    long l = get_global_id(1), ncol = (OW + PW - 1) / PW;
    if (o0 >= O || l >= ncol * NR) return;
    long nh = l / ncol, ow0 = (l - nh * ncol) * PW;
    long n = nh / OH, oh = nh - n * OH;
    long r0 = oh * SH - PT;
    VT acc[PW];
    for (int p = 0; p < PW; p++) acc[p] = (VT)0;
    __global const T *xn = x + xo + n * xsn;
    for (long i = 0; i < KH; i++) {
        long r = r0 + i * DH;
        if (r < 0 || r >= H) continue;
        for (long j = 0; j < KW; j++) {
            __global const T *wp = w + wo + i * wsi + j * wsj + o0 * wso;
            long xoff[PW];
            T m[PW];
            int all = 1;
            for (int p = 0; p < PW; p++) {
                long ow = ow0 + p < OW ? ow0 + p : OW - 1;
                long q = ow * SW - PL + j * DW;
                int in = q >= 0 && q < W;
                all &= in;
                m[p] = in ? (T)1 : (T)0;
                xoff[p] = r * xsh + (in ? q : 0) * xsw;
            }
            if (all) {          // interior: no masks
                for (long c = 0; c < C; c++) {
                    VT wv = LDV(wp + c * wsc, wso);
                    for (int p = 0; p < PW; p++)
                        acc[p] += xn[xoff[p] + c * ISTR] * wv;
                }
            } else {
                for (long c = 0; c < C; c++) {
                    VT wv = LDV(wp + c * wsc, wso);
                    for (int p = 0; p < PW; p++)
                        acc[p] += (xn[xoff[p] + c * ISTR] * m[p]) * wv;
                }
            }
        }
    }
    __global T *yp = y + n * ysn + oh * ysh + o0 * yso;
    for (int p = 0; p < PW; p++) {
        if (ow0 + p >= OW) break;
        STV(acc[p], yp + (ow0 + p) * ysw, yso);
    }
}
"""

_CONV_BPI = """
// dx[n, h, x0 + p, c0 .. c0 + OB) for p < PW: the sum over the windows covering it
__kernel void conv_bpi(__global T *dx, __global const T *w, long wo, __global const T *dy,
        long dyo, long H, long W, long C, long OH, long OW, long O,
        long dsn, long dsh, long dsw, long dso,
        long wsi, long wsj, long wsc, long wso,
        long xsn, long xsh, long xsw, long xsc,
        long KH, long KW, long SH, long SW, long DH, long DW, long PT, long PL, long NR) {
    long c0 = get_global_id(0) * OB;
    long l = get_global_id(1), ncol = (W + PW - 1) / PW;
    if (c0 >= C || l >= ncol * NR) return;
    long nh = l / ncol, x0 = (l - nh * ncol) * PW;
    long n = nh / H, h = nh - n * H;
    VT acc[PW];
    for (int p = 0; p < PW; p++) acc[p] = (VT)0;
    __global const T *dyn = dy + dyo + n * dsn;
    for (long i = 0; i < KH; i++) {
        long t = h + PT - i * DH;
        if (t < 0) break;
        long a = t / SH;
        if (a * SH != t || a >= OH) continue;
        for (long j = 0; j < KW; j++) {
            __global const T *wp = w + wo + i * wsi + j * wsj + c0 * wsc;
            long doff[PW];
            T m[PW];
            int any = 0, all = 1;
            for (int p = 0; p < PW; p++) {
                long xc = x0 + p < W ? x0 + p : W - 1;
                long u = xc + PL - j * DW;
                long b = u / SW;
                int in = u >= 0 && b * SW == u && b < OW;
                any |= in;
                all &= in;
                m[p] = in ? (T)1 : (T)0;
                doff[p] = a * dsh + (in ? b : 0) * dsw;
            }
            if (all) {          // interior: no masks
                for (long o = 0; o < O; o++) {
                    VT wv = LDV(wp + o * wso, wsc);
                    for (int p = 0; p < PW; p++)
                        acc[p] += dyn[doff[p] + o * ISTR] * wv;
                }
            } else if (any) {
                for (long o = 0; o < O; o++) {
                    VT wv = LDV(wp + o * wso, wsc);
                    for (int p = 0; p < PW; p++)
                        acc[p] += (dyn[doff[p] + o * ISTR] * m[p]) * wv;
                }
            }
        }
    }
    __global T *xp = dx + n * xsn + h * xsh + c0 * xsc;
    for (int p = 0; p < PW; p++) {
        if (x0 + p >= W) break;
        STV(acc[p], xp + (x0 + p) * xsw, xsc);
    }
}
"""

_CONV_BPF = """
// the output positions a in [*lo, *hi) with 0 <= a * S + off < size
inline void span(long off, long S, long size, long n_out, long *lo, long *hi) {
    long a0 = off >= 0 ? 0 : (-off + S - 1) / S;
    long last = size - 1 - off;
    long a1 = last < 0 ? 0 : last / S + 1;
    *lo = a0;
    *hi = a1 < n_out ? a1 : n_out;
}
// dw[i, j, c0 .. c0 + CB, o0 .. o0 + NV * OB) summed over the rows (image, output row)
// of slice s: work item (o block, c block, tap * S + s)
__kernel void conv_bpf(__global T *dw, __global const T *x, long xo, __global const T *dy,
        long dyo, long N, long H, long W, long C, long OH, long OW, long O,
        long xsn, long xsh, long xsw, long xsc,
        long dsn, long dsh, long dsw, long dso,
        long KH, long KW, long SH, long SW, long DH, long DW, long PT, long PL,
        long S, long chunk) {
    long o0 = get_global_id(0) * (OB * NV);
    long l = get_global_id(1), ncb = (C + CB - 1) / CB;
    if (o0 >= O || l >= ncb * KH * KW * S) return;
    long ts = l / ncb, c0 = (l - ts * ncb) * CB;
    long s = ts % S, tap = ts / S;
    long i = tap / KW, j = tap - i * KW;
    long alo, ahi, blo, bhi;
    span(i * DH - PT, SH, H, OH, &alo, &ahi);
    span(j * DW - PL, SW, W, OW, &blo, &bhi);
    long coff[CB];
    for (int k = 0; k < CB; k++) coff[k] = (c0 + k < C ? c0 + k : C - 1) * xsc;
    VT acc[CB][NV];
    for (int k = 0; k < CB; k++) for (int v = 0; v < NV; v++) acc[k][v] = (VT)0;
    long rows_end = (s + 1) * chunk < N * OH ? (s + 1) * chunk : N * OH;
    long xstep = SW * xsw;
    for (long row = s * chunk; row < rows_end; row++) {
        long n = row / OH, a = row - n * OH;
        if (a < alo || a >= ahi) continue;
        long r = a * SH + i * DH - PT;
        __global const T *xp = x + xo + n * xsn + r * xsh + (blo * SW + j * DW - PL) * xsw;
        __global const T *gp = dy + dyo + n * dsn + a * dsh + blo * dsw + o0 * dso;
        for (long b = blo; b < bhi; b++) {
            VT g[NV];
            for (int v = 0; v < NV; v++) g[v] = LDV(gp + v * OB * dso, dso);
            for (int k = 0; k < CB; k++) {
                T xv = xp[coff[k]];
                for (int v = 0; v < NV; v++) acc[k][v] += xv * g[v];
            }
            xp += xstep;
            gp += dsw;
        }
    }
    __global T *out = dw + s * (KH * KW * C * O) + ((i * KW + j) * C + c0) * O + o0;
    for (int k = 0; k < CB; k++)
        if (c0 + k < C)
            for (int v = 0; v < NV; v++) STV(acc[k][v], out + k * O + v * OB, 1);
}
__kernel void sum_parts(__global T *out, __global const T *parts, long S, long n) {
    long e = get_global_id(0);
    if (e >= n) return;
    T acc = parts[e];
    for (long s = 1; s < S; s++) acc += parts[s * n + e];
    out[e] = acc;
}
"""

_SD_CONV = [None, None, _I, None, _I] + [_I] * 27
_SD_BPF = [None, None, _I, None, _I] + [_I] * 25

#: columns per work item of the forward and input-gradient kernels, input channels per
#: work item of the filter gradient
_PW = 8
_CB = 8
#: aim for at least this many work items in the filter gradient (split the batch rows)
_BPF_TARGET = 8192


def _lanes(dtype, nchan):
    """Vector width over channels: the widest of 8/4/2/1 (4/2/1 for float64) that
    divides ``nchan``. (16-wide vectors crash PoCL's LLVM at launch time: "Do not know
    how to scalarize this operator's operand".)"""
    ob = 8 if np.dtype(dtype) == np.float32 else 4
    while ob > 1 and nchan % ob:
        ob //= 2
    return ob


def _conv_src(body, dtype, ob, unit_ld, unit_st, cb=1, istr="1", nv=1):
    """The kernel ``body`` with its header: element type, OB lanes (vector loads where
    ``unit_ld``, stores where ``unit_st``), CB, and ISTR, the stride of the scalar
    operand's inner loop ("1" when known, else the name of the argument), NV vectors
    of OB per work item (filter gradient)."""
    ct = rt.CTYPES[np.dtype(dtype)]
    vt, ldv, stv = _vec_defs(ct, ob, unit_ld, unit_st)
    return _VEC.format(T=ct, VT=vt, OB=ob, PW=_PW, CB=cb, ISTR=istr, NV=nv, LDV=ldv,
                       STV=stv) + body


def _conv_geom(h, w, kh, kw, strides, padding, dilations):
    oh, pt = _geom(h, kh, strides[0], dilations[0], padding, 0)
    ow, pl = _geom(w, kw, strides[1], dilations[1], padding, 1)
    return oh, ow, pt, pl


def _geo_args(kh, kw, strides, dilations, pt, pl):
    return (kh, kw, strides[0], strides[1], dilations[0], dilations[1], pt, pl)


def conv2d(x, w, strides, padding, data_format, dilations):
    dev = rt.device_of(x)
    (n, h, wd, c), xst, xoff = _nhwc(x, data_format)
    kh, kw, _, o = w.shape
    oh, ow, pt, pl = _conv_geom(h, wd, kh, kw, strides, padding, dilations)
    y, yst = _new(dev, (n, oh, ow, o), x.dtype, data_format)
    if y.size == 0:
        return y
    wst, woff = rt.layout(w)
    ob = _lanes(x.dtype, o)
    src = _conv_src(_CONV_FWD, x.dtype, ob, wst[3] == 1, yst[3] == 1,
                    istr="1" if xst[3] == 1 else "xsc")
    k = rt.kernel(dev, src, "conv_fwd", _SD_CONV)
    _launch2(dev, k, o // ob, -(-ow // _PW) * n * oh,
             y.base_data, rt.buf(dev, x), xoff, rt.buf(dev, w), woff,
             h, wd, c, oh, ow, o, *xst, *wst, *yst,
             *_geo_args(kh, kw, strides, dilations, pt, pl), n * oh)
    return y


def conv2d_backprop_input(w, dy, input_sizes, strides, padding, data_format, dilations):
    dev = rt.device_of(dy)
    n, a, b, cc = input_sizes
    nhwc = (n, a, b, cc) if data_format == "NHWC" else (n, b, cc, a)
    _, h, wd, c = nhwc
    dx, xst = _new(dev, nhwc, dy.dtype, data_format)
    if dx.size == 0:
        return dx
    (_, oh, ow, o), dst, doff = _nhwc(dy, data_format)
    kh, kw = w.shape[0], w.shape[1]
    _, _, pt, pl = _conv_geom(h, wd, kh, kw, strides, padding, dilations)
    ob = _lanes(dy.dtype, c)
    wst, woff = rt.layout(w)
    if ob > 1 and wst[2] != 1 and w.size:
        # the filter with in_channels innermost (a small copy): vector loads over c
        wt = rt.contiguous(rt.view(w, (kh, kw, o, c), (wst[0], wst[1], wst[3], wst[2]), woff))
        (si, sj, so, sc), woff = rt.layout(wt)
        wst, w = (si, sj, sc, so), wt
    src = _conv_src(_CONV_BPI, dy.dtype, ob, wst[2] == 1, xst[3] == 1,
                    istr="1" if dst[3] == 1 else "dso")
    k = rt.kernel(dev, src, "conv_bpi", _SD_CONV)
    _launch2(dev, k, c // ob, -(-wd // _PW) * n * h,
             dx.base_data, rt.buf(dev, w), woff, rt.buf(dev, dy), doff,
             h, wd, c, oh, ow, o, *dst, *wst, *xst,
             *_geo_args(kh, kw, strides, dilations, pt, pl), n * h)
    return dx


def conv2d_backprop_filter(x, dy, filter_sizes, strides, padding, data_format, dilations):
    dev = rt.device_of(x)
    kh, kw, c, o = filter_sizes
    dw = rt.empty(dev, (kh, kw, c, o), x.dtype)
    if dw.size == 0:
        return dw
    (n, h, wd, _), xst, xoff = _nhwc(x, data_format)
    (_, oh, ow, _), dst, doff = _nhwc(dy, data_format)
    _, _, pt, pl = _conv_geom(h, wd, kh, kw, strides, padding, dilations)
    ob = _lanes(x.dtype, o)
    cb = min(_CB, c)
    nv = 4      # few input channels: more output vectors per work item (independent sums)
    while nv > 1 and (o % (ob * nv) or nv * cb > 8):
        nv //= 2
    items = (o // (ob * nv)) * -(-c // cb) * kh * kw
    rows = n * oh
    s = max(1, min(rows, _BPF_TARGET // items)) if rows else 1
    chunk = -(-rows // s) if rows else 0
    s = -(-rows // chunk) if rows else 1
    src = _conv_src(_CONV_BPF, x.dtype, ob, dst[3] == 1, True, cb, nv=nv)
    k = rt.kernel(dev, src, "conv_bpf", _SD_BPF)
    parts = dw if s == 1 else rt.empty(dev, (s, kh, kw, c, o), x.dtype)
    _launch2(dev, k, o // (ob * nv), -(-c // cb) * kh * kw * s,
             parts.base_data, rt.buf(dev, x), xoff, rt.buf(dev, dy), doff,
             n, h, wd, c, oh, ow, o, *xst, *dst,
             *_geo_args(kh, kw, strides, dilations, pt, pl), s, chunk)
    if s > 1:
        ks = rt.kernel(dev, src, "sum_parts", [None, None, _I, _I])
        rt.launch(dev, ks, (dw.size,), None, dw.base_data, parts.base_data, s, dw.size)
    return dw


# --- pooling -------------------------------------------------------------------------------

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
// each kernel: dim 0 channels, dim 1 columns, dim 2 (image, row)

__kernel void max_pool(__global T *y, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, long ysn, long ysh, long ysw, long ysc,
        POOL_ARGS) {{
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * OW) return;
    long nh = l / OW, b = l - nh * OW;
    long n = nh / OH, a = nh - n * OH;
    __global const T *xp = x + xo + n * xsn + c * xsc;
    T m = LOWEST;
    for (long i = 0; i < KH; i++) {{
        long r = a * SH - PT + i;
        if (r < 0 || r >= H) continue;
        for (long j = 0; j < KW; j++) {{
            long q = b * SW - PL + j;
            if (q < 0 || q >= W) continue;
            T v = xp[r * xsh + q * xsw];
#if ISF
            if (isnan(v) || v > m) m = v;
#else
            if (v > m) m = v;
#endif
        }}
    }}
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

__kernel void max_argmax(__global int *arg, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, __global const T *y, long yo,
        long ysn, long ysh, long ysw, long ysc, POOL_ARGS) {{
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * OW) return;
    long nh = l / OW, b = l - nh * OW;
    long n = nh / OH, a = nh - n * OH;
    T yv = y[yo + n * ysn + a * ysh + b * ysw + c * ysc];
    arg[((n * OH + a) * OW + b) * C + c] =
        argmax_at(x + xo + n * xsn + c * xsc, xsh, xsw, yv, a, b, H, W, C, OH, OW,
                  KH, KW, SH, SW, PT, PL, NR);
}}

// disjoint windows: each window writes dy (at its argmax) or 0 to its own positions
__kernel void max_pool_grad_disjoint(__global T *dx, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, __global const T *y, long yo,
        long ysn, long ysh, long ysw, long ysc, __global const T *dy, long dyo,
        long dsn, long dsh, long dsw, long dsc,
        long osn, long osh, long osw, long osc, POOL_ARGS) {{
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * OW) return;
    long nh = l / OW, b = l - nh * OW;
    long n = nh / OH, a = nh - n * OH;
    T yv = y[yo + n * ysn + a * ysh + b * ysw + c * ysc];
    T g = dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc];
    int am = argmax_at(x + xo + n * xsn + c * xsc, xsh, xsw, yv, a, b, H, W, C, OH, OW,
                       KH, KW, SH, SW, PT, PL, NR);
    __global T *op = dx + n * osn + c * osc;
    for (long i = 0; i < KH; i++) {{
        long r = a * SH - PT + i;
        if (r < 0 || r >= H) continue;
        for (long j = 0; j < KW; j++) {{
            long q = b * SW - PL + j;
            if (q < 0 || q >= W) continue;
            op[r * osh + q * osw] = g * (am == (int)(i * KW + j) ? (T)1 : (T)0);
        }}
    }}
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
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * W) return;
    long nh = l / W, w = l - nh * W;
    long n = nh / H, h = nh - n * H;
    T acc = (T)0;
    COVER_LOOP(
        T term = dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc]
                 * (arg[((n * OH + a) * OW + b) * C + c] == (int)(i * KW + j) ? (T)1 : (T)0);
        acc += term;
    )
    dx[n * xsn + h * xsh + w * xsw + c * xsc] = acc;
}}

__kernel void max_pool_grad_grad(__global T *out, __global const T *x, long xo,
        long xsn, long xsh, long xsw, long xsc, __global const T *y, long yo,
        long ysn, long ysh, long ysw, long ysc, __global const T *g, long go,
        long gsn, long gsh, long gsw, long gsc,
        long osn, long osh, long osw, long osc, POOL_ARGS) {{
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * OW) return;
    long nh = l / OW, b = l - nh * OW;
    long n = nh / OH, a = nh - n * OH;
    T yv = y[yo + n * ysn + a * ysh + b * ysw + c * ysc];
    int am = argmax_at(x + xo + n * xsn + c * xsc, xsh, xsw, yv, a, b, H, W, C, OH, OW,
                       KH, KW, SH, SW, PT, PL, NR);
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
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * OW) return;
    long nh = l / OW, b = l - nh * OW;
    long n = nh / OH, a = nh - n * OH;
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
    y[n * ysn + a * ysh + b * ysw + c * ysc] = s / pool_count(a, b, H, W, C, OH, OW,
                                                             KH, KW, SH, SW, PT, PL, NR);
}}

__kernel void avg_pool_grad(__global T *dx, __global const T *dy, long dyo,
        long dsn, long dsh, long dsw, long dsc, long xsn, long xsh, long xsw, long xsc,
        POOL_ARGS) {{
    long c = get_global_id(0), l = get_global_id(1);
    if (c >= C || l >= NR * W) return;
    long nh = l / W, w = l - nh * W;
    long n = nh / H, h = nh - n * H;
    T acc = (T)0;
    COVER_LOOP(
        acc += dy[dyo + n * dsn + a * dsh + b * dsw + c * dsc]
               / pool_count(a, b, H, W, C, OH, OW, KH, KW, SH, SW, PT, PL, NR);
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


def max_pool(x, ksize, strides, padding, data_format):
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    oh, ow, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    y, yst = _new(dev, (n, oh, ow, c), x.dtype, data_format)
    if y.size:
        _pool_launch(dev, "max_pool", x.dtype, ksize, strides, c, ow * n * oh,
                     y.base_data, rt.buf(dev, x), xoff, *xst, *yst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
    return y


def max_pool_grad(x, y, dy, ksize, strides, padding, data_format):
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    (_, oh, ow, _), yst, yoff = _nhwc(y, data_format)
    _, dst, doff = _nhwc(dy, data_format)
    _, _, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    dx, dxst = _new(dev, (n, h, w, c), dy.dtype, data_format)
    if dx.size == 0:
        return dx
    pargs = _pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh)
    if strides[0] >= ksize[0] and strides[1] >= ksize[1]:
        # disjoint windows: one launch, each window writes its own positions (zeros
        # first where some positions are in no window)
        if oh * strides[0] - pt < h or ow * strides[1] - pl < w or pt or pl or \
                strides[0] > ksize[0] or strides[1] > ksize[1] or not n * oh * ow * c:
            dx = rt.elementwise("0", dy.dtype, rt.scalar(dev, 0, dy.dtype), out_shape=dx.shape)
        if n * oh * ow * c:
            _pool_launch(dev, "max_pool_grad_disjoint", x.dtype, ksize, strides, c, ow * n * oh,
                         dx.base_data, rt.buf(dev, x), xoff, *xst, rt.buf(dev, y), yoff, *yst,
                         rt.buf(dev, dy), doff, *dst, *dxst, *pargs)
        return dx
    arg = rt.empty(dev, (max(n * oh * ow * c, 1),), np.int32)
    if n * oh * ow * c:
        _pool_launch(dev, "max_argmax", x.dtype, ksize, strides, c, ow * n * oh,
                     arg.base_data, rt.buf(dev, x), xoff, *xst, rt.buf(dev, y), yoff, *yst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
    _pool_launch(dev, "max_pool_grad", x.dtype, ksize, strides, c, w * n * h,
                 dx.base_data, arg.base_data, rt.buf(dev, dy), doff, *dst, *dxst,
                 *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * h))
    return dx


def max_pool_grad_grad(x, y, g, ksize, strides, padding, data_format):
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    (_, oh, ow, _), yst, yoff = _nhwc(y, data_format)
    _, gst, goff = _nhwc(g, data_format)
    _, _, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    out, ost = _new(dev, (n, oh, ow, c), g.dtype, data_format)
    if out.size:
        _pool_launch(dev, "max_pool_grad_grad", x.dtype, ksize, strides, c, ow * n * oh,
                     out.base_data, rt.buf(dev, x), xoff, *xst, rt.buf(dev, y), yoff, *yst,
                     rt.buf(dev, g), goff, *gst, *ost,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
    return out


def avg_pool(x, ksize, strides, padding, data_format):
    dev = rt.device_of(x)
    (n, h, w, c), xst, xoff = _nhwc(x, data_format)
    oh, ow, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    y, yst = _new(dev, (n, oh, ow, c), x.dtype, data_format)
    if y.size:
        _pool_launch(dev, "avg_pool", x.dtype, ksize, strides, c, ow * n * oh,
                     y.base_data, rt.buf(dev, x), xoff, *xst, *yst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * oh))
    return y


def avg_pool_grad(dy, orig_input_shape, ksize, strides, padding, data_format):
    dev = rt.device_of(dy)
    n, a, b, cc = orig_input_shape
    nhwc = (n, a, b, cc) if data_format == "NHWC" else (n, b, cc, a)
    _, h, w, c = nhwc
    (_, oh, ow, _), dst, doff = _nhwc(dy, data_format)
    _, _, pt, pl = _pool_geom(h, w, ksize, strides, padding)
    dx, dxst = _new(dev, nhwc, dy.dtype, data_format)
    if dx.size:
        _pool_launch(dev, "avg_pool_grad", dy.dtype, ksize, strides, c, w * n * h,
                     dx.base_data, rt.buf(dev, dy), doff, *dst, *dxst,
                     *_pool_args(h, w, c, oh, ow, ksize, strides, pt, pl, n * h))
    return dx


def build():
    f = FLOATS
    fi = FLOATS + ("int32", "int64")
    act = {name: dts for name, (_, dts) in _ACTIVATIONS.items()}
    return {
        "Relu": {"fn": relu, "dtypes": act["Relu"]},
        "ReluGrad": {"fn": relu_grad, "dtypes": act["ReluGrad"]},
        "Relu6": {"fn": relu6, "dtypes": act["Relu6"]},
        "Relu6Grad": {"fn": relu6_grad, "dtypes": act["Relu6Grad"]},
        "LeakyRelu": {"fn": leaky_relu, "dtypes": f},
        "LeakyReluGrad": {"fn": leaky_relu_grad, "dtypes": f},
        "Elu": {"fn": elu, "dtypes": act["Elu"]},
        "EluGrad": {"fn": elu_grad, "dtypes": act["EluGrad"]},
        "BiasAdd": {"fn": bias_add, "dtypes": fi},
        "Conv2D": {"fn": conv2d, "dtypes": f},
        "Conv2DBackpropInput": {"fn": conv2d_backprop_input, "dtypes": f},
        "Conv2DBackpropFilter": {"fn": conv2d_backprop_filter, "dtypes": f},
        "MaxPool": {"fn": max_pool, "dtypes": fi},
        "MaxPoolGrad": {"fn": max_pool_grad, "dtypes": f},
        "MaxPoolGradGrad": {"fn": max_pool_grad_grad, "dtypes": f},
        "AvgPool": {"fn": avg_pool, "dtypes": f},
        "AvgPoolGrad": {"fn": avg_pool_grad, "dtypes": f},
    }
