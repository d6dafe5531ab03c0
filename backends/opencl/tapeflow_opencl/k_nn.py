"""Neural-network kernels (:class:`NNKernels`): activations, bias_add, convolution and
the fused convolution ``_FusedConv2D``.

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

* ``_FusedConv2D`` (Conv2D + BiasAdd + activation, issue 34): the direct convolution,
  then the bias and the activation as one elementwise kernel over its output (one
  launch, one read and one write of the output, where the unfused ops make two or
  three). The activations are the expressions above (``Relu``, ``Relu6``, ``Elu``,
  ``LeakyRelu``) and, for Gelu, the operations of tapeflow's ``gelu`` in their order
  (``erf``/``tanh`` of OpenCL C), so the result agrees with the unfused ops within float
  rounding. (Writing the epilogue inside ``conv_fwd``'s final store would save that
  pass too; it needs a hook in the kernel template.)

Pooling is :mod:`tapeflow_opencl.k_pool`.

Attributes arrive normalised by ``tapeflow.nn`` (see the ``cpu`` kernels): shape
and attribute errors are raised there, before dispatch.
"""

from __future__ import annotations

import math
import string

import numpy as np

from tapeflow.plugins import KernelSpec

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


#: the two direct convolutions, one template: ``conv_fwd`` (one work item per ``OB``
#: output channels x ``PW`` output columns of one output row: sums over the taps and
#: the input channels) and ``conv_bpi`` (the input gradient: one work item per ``OB``
#: input channels x ``PW`` input columns of one input row: sums over the windows
#: covering them and the output channels). ``$`` fields: :data:`_DIRECT_ROLES`.
_CONV_DIRECT = string.Template("""
// $out[n, $row, $col0 + p, $b0 .. $b0 + OB) for p < PW: $what
__kernel void $name(__global T *$out, __global const T *$p1, long $p1o, __global const T *$p2,
        long $p2o, long H, long W, long C, long OH, long OW, long O,
        long ${s2}sn, long ${s2}sh, long ${s2}sw, long ${s2}s$s2c,
        long wsi, long wsj, long wsc, long wso,
        long ${s3}sn, long ${s3}sh, long ${s3}sw, long ${s3}s$s3c,
        long KH, long KW, long SH, long SW, long DH, long DW, long PT, long PL, long NR) {
    long $b0 = get_global_id(0) * OB;
    long l = get_global_id(1), ncol = ($NC + PW - 1) / PW;
    if ($b0 >= $NB || l >= ncol * NR) return;
    long nh = l / ncol, $col0 = (l - nh * ncol) * PW;
    long n = nh / $NR, $row = nh - n * $NR;
$setup    VT acc[PW];
    for (int p = 0; p < PW; p++) acc[p] = (VT)0;
    __global const T *$src = $sarr + ${sarr}o + n * ${s2}sn;
    for (long i = 0; i < KH; i++) {
$rowtest
        for (long j = 0; j < KW; j++) {
            __global const T *wp = w + wo + i * wsi + j * wsj + $b0 * ws$bc;
            long $off[PW];
            T m[PW];
            int ${flags}all = 1;
            for (int p = 0; p < PW; p++) {
$coltest
                all &= in;
                m[p] = in ? (T)1 : (T)0;
                $off[p] = $offexpr;
            }
            if (all) {          // interior: no masks
                for (long $k = 0; $k < $K; $k++) {
                    VT wv = LDV(wp + $k * ws$kc, ws$bc);
                    for (int p = 0; p < PW; p++)
                        acc[p] += $src[$off[p] + $k * ISTR] * wv;
                }
            } ${masked}{
                for (long $k = 0; $k < $K; $k++) {
                    VT wv = LDV(wp + $k * ws$kc, ws$bc);
                    for (int p = 0; p < PW; p++)
                        acc[p] += ($src[$off[p] + $k * ISTR] * m[p]) * wv;
                }
            }
        }
    }
    __global T *$dst = $out + n * ${s3}sn + $row * ${s3}sh + $b0 * ${s3}s$bc;
    for (int p = 0; p < PW; p++) {
        if ($col0 + p >= $NC) break;
        STV(acc[p], $dst + ($col0 + p) * ${s3}sw, ${s3}s$bc);
    }
}
""")

#: what differs between the two kernels of :data:`_CONV_DIRECT`
_DIRECT_ROLES = {
    "conv_fwd": dict(
        what="one work item", out="y", p1="x", p1o="xo", p2="w", p2o="wo", s2="x", s2c="c",
        s3="y", s3c="o", b0="o0", bc="o", NB="O", col0="ow0", NC="OW", row="oh", NR="OH",
        setup="    long r0 = oh * SH - PT;\n", src="xn", sarr="x", off="xoff", flags="",
        rowtest="        long r = r0 + i * DH;\n        if (r < 0 || r >= H) continue;",
        coltest="                long ow = ow0 + p < OW ? ow0 + p : OW - 1;\n"
                "                long q = ow * SW - PL + j * DW;\n"
                "                int in = q >= 0 && q < W;",
        offexpr="r * xsh + (in ? q : 0) * xsw", k="c", K="C", kc="c", masked="else ",
        dst="yp"),
    "conv_bpi": dict(
        what="the sum over the windows covering it", out="dx", p1="w", p1o="wo", p2="dy",
        p2o="dyo", s2="d", s2c="o", s3="x", s3c="c", b0="c0", bc="c", NB="C", col0="x0",
        NC="W", row="h", NR="H", setup="", src="dyn", sarr="dy", off="doff", flags="any = 0, ",
        rowtest="        long t = h + PT - i * DH;\n        if (t < 0) break;\n"
                "        long a = t / SH;\n        if (a * SH != t || a >= OH) continue;",
        coltest="                long xc = x0 + p < W ? x0 + p : W - 1;\n"
                "                long u = xc + PL - j * DW;\n"
                "                long b = u / SW;\n"
                "                int in = u >= 0 && b * SW == u && b < OW;\n"
                "                any |= in;",
        offexpr="a * dsh + (in ? b : 0) * dsw", k="o", K="O", kc="o", masked="else if (any) ",
        dst="xp"),
}
_DIRECT_SRC = {name: _CONV_DIRECT.substitute(name=name, **role)
               for name, role in _DIRECT_ROLES.items()}

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


def _direct(dev, name, dtype, ob, unit, nb, ncols, rows, *args):
    """Compile and launch ``name`` of :data:`_CONV_DIRECT` over ``nb`` channel blocks x
    ``ncols`` columns (in blocks of ``PW``) x ``rows`` (image, row) pairs. ``unit``: the
    element strides of the filter's lanes, the output's lanes and the scalar operand's
    inner loop (vector loads / stores where 1; ``ISTR`` the literal 1 or the argument)."""
    role = _DIRECT_ROLES[name]
    istr = "1" if unit[2] == 1 else f"{role['s2']}s{role['s2c']}"
    src = _conv_src(_DIRECT_SRC[name], dtype, ob, unit[0] == 1, unit[1] == 1, istr=istr)
    k = rt.kernel(dev, src, name, _SD_CONV)
    _launch2(dev, k, nb, -(-ncols // _PW) * rows, *args, rows)


# --- the fused convolution -------------------------------------------------------------------

#: ``_FusedConv2D``'s activation -> OpenCL C body of ``fc_act(z, a)`` for C type ``t`` (the
#: expressions of :data:`_ACTIVATIONS`, and Gelu as tapeflow's ``gelu`` computes it)
_FUSED_BODIES = {
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


def _fused_preamble(act, t):
    return (f"static inline {t} fc_act({t} z, {t} a) {{ return {_FUSED_BODIES[act](t)}; }}\n")


class NNKernels:
    """The neural-network kernels on OpenCL: activations and ``BiasAdd`` (generated
    elementwise kernels), the direct convolution and its gradients, and the fused
    convolution ``_FusedConv2D``. :meth:`table` maps op names to them."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def relu(self, x):
        """Relu: ``max(x, 0)``."""
        return _act("Relu", x)

    def relu_grad(self, dy, x):
        """ReluGrad: ``dy`` where ``x > 0``."""
        return _act("ReluGrad", dy, x)

    def relu6(self, x):
        """Relu6: ``min(max(x, 0), 6)``."""
        return _act("Relu6", x)

    def relu6_grad(self, dy, x):
        """Relu6Grad: ``dy`` where ``0 < x < 6``."""
        return _act("Relu6Grad", dy, x)

    def leaky_relu(self, x, alpha):
        """LeakyRelu: ``x`` where ``x > 0``, else ``alpha x`` (``alpha`` a 0-d device
        scalar: one kernel serves every value)."""
        dev = self.rt.device_of(x)
        a = self.rt.scalar(dev, alpha, x.dtype)
        # == max(x, alpha x) for 0 <= alpha <= 1, min(x, alpha x) for alpha > 1 (NaN stays NaN)
        return self.rt.elementwise("x0 > 0 ? x0 : x0 * x1", x.dtype, x, a)

    def leaky_relu_grad(self, dy, x, alpha):
        """LeakyReluGrad: ``dy`` where ``x > 0``, else ``alpha dy``."""
        if self.rt.broadcast_shape([dy.shape, x.shape]) != tuple(x.shape):
            # (the cpu kernel's in-place product: the gradient takes the features' shape)
            raise ValueError(f"gradients of shape {list(dy.shape)} do not broadcast to the "
                             f"features' shape {list(x.shape)}")
        dev = self.rt.device_of(dy)
        t = _ct(dy)
        one_minus = self.rt.scalar(dev, 1.0 - alpha, dy.dtype)
        a = self.rt.scalar(dev, alpha, dy.dtype)
        return self.rt.elementwise(f"((x1 > ({t})0 ? ({t})1 : ({t})0) * x2 + x3) * x0", dy.dtype,
                                   dy, x, one_minus, a)

    def elu(self, x):
        """Elu: ``x`` where ``x > 0``, else ``expm1(x)``."""
        return _act("Elu", x)

    def elu_grad(self, dy, y):
        """EluGrad from the output ``y``: ``dy`` where ``y > 0``, else ``dy (y + 1)``."""
        return _act("EluGrad", dy, y)

    def bias_add(self, x, b, data_format):
        """BiasAdd: ``x + b`` over the channel axis (NCHW: ``b`` as a broadcast view)."""
        if data_format == "NCHW" and x.ndim >= 3:
            (bs,), boff = self.rt.layout(b)
            ones = (1,) * (x.ndim - 2)
            b = self.rt.view(b, (b.shape[0],) + ones, (bs,) + (0,) * (x.ndim - 2), boff)
        return self.rt.elementwise("x0 + x1", x.dtype, x, b)

    def conv2d(self, x, w, strides, padding, data_format, dilations):
        """Conv2D: the direct convolution ``conv_fwd`` (see the module doc)."""
        dev = self.rt.device_of(x)
        (n, h, wd, c), xst, xoff = _nhwc(x, data_format)
        kh, kw, _, o = w.shape
        oh, ow, pt, pl = _conv_geom(h, wd, kh, kw, strides, padding, dilations)
        y, yst = _new(dev, (n, oh, ow, o), x.dtype, data_format)
        if y.size == 0:
            return y
        wst, woff = self.rt.layout(w)
        ob = _lanes(x.dtype, o)
        _direct(dev, "conv_fwd", x.dtype, ob, (wst[3], yst[3], xst[3]), o // ob, ow, n * oh,
                y.base_data, self.rt.buf(dev, x), xoff, self.rt.buf(dev, w), woff,
                h, wd, c, oh, ow, o, *xst, *wst, *yst,
                *_geo_args(kh, kw, strides, dilations, pt, pl))
        return y

    def conv2d_backprop_input(self, w, dy, input_sizes, strides, padding, data_format,
                              dilations):
        """Conv2DBackpropInput: ``conv_bpi``, the input gradient."""
        dev = self.rt.device_of(dy)
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
        wst, woff = self.rt.layout(w)
        if ob > 1 and wst[2] != 1 and w.size:
            # the filter with in_channels innermost (a small copy): vector loads over c
            wt = self.rt.contiguous(
                self.rt.view(w, (kh, kw, o, c), (wst[0], wst[1], wst[3], wst[2]), woff))
            (si, sj, so, sc), woff = self.rt.layout(wt)
            wst, w = (si, sj, sc, so), wt
        _direct(dev, "conv_bpi", dy.dtype, ob, (wst[2], xst[3], dst[3]), c // ob, wd, n * h,
                dx.base_data, self.rt.buf(dev, w), woff, self.rt.buf(dev, dy), doff,
                h, wd, c, oh, ow, o, *dst, *wst, *xst,
                *_geo_args(kh, kw, strides, dilations, pt, pl))
        return dx

    def conv2d_backprop_filter(self, x, dy, filter_sizes, strides, padding, data_format,
                               dilations):
        """Conv2DBackpropFilter: ``conv_bpf``, the filter gradient (split over the
        batch rows and summed in a fixed order when the filter is small)."""
        dev = self.rt.device_of(x)
        kh, kw, c, o = filter_sizes
        dw = self.rt.empty(dev, (kh, kw, c, o), x.dtype)
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
        k = self.rt.kernel(dev, src, "conv_bpf", _SD_BPF)
        parts = dw if s == 1 else self.rt.empty(dev, (s, kh, kw, c, o), x.dtype)
        _launch2(dev, k, o // (ob * nv), -(-c // cb) * kh * kw * s,
                 parts.base_data, self.rt.buf(dev, x), xoff, self.rt.buf(dev, dy), doff,
                 n, h, wd, c, oh, ow, o, *xst, *dst,
                 *_geo_args(kh, kw, strides, dilations, pt, pl), s, chunk)
        if s > 1:
            ks = self.rt.kernel(dev, src, "sum_parts", [None, None, _I, _I])
            self.rt.launch(dev, ks, (dw.size,), None, dw.base_data, parts.base_data, s, dw.size)
        return dw

    def fused_conv2d(self, x, w, b, strides, padding, data_format, dilations, fused_ops,
                     num_args=1, leakyrelu_alpha=0.2):
        """``_FusedConv2D``: ``act(conv2d(x, w) + b)``, the direct convolution, then one
        epilogue kernel over its output (see the module doc)."""
        y = self.conv2d(x, w, strides, padding, data_format, dilations)
        if y.size == 0:
            return y
        dev = self.rt.device_of(x)
        if data_format == "NCHW":
            (bs,), boff = self.rt.layout(b)
            b = self.rt.view(b, (b.shape[0], 1, 1), (bs, 0, 0), boff)
        act = fused_ops[1] if len(fused_ops) > 1 else None
        t = self.rt.CTYPES[y.dtype]
        a = self.rt.scalar(dev, leakyrelu_alpha if act == "LeakyRelu" else 0.0, y.dtype)
        return self.rt.elementwise("fc_act(x0 + x1, x2)", y.dtype, y, b, a,
                                   preamble=_fused_preamble(act, t))

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        f = FLOATS
        fi = FLOATS + ("int32", "int64")
        act = {name: dts for name, (_, dts) in _ACTIVATIONS.items()}
        return {
            "Relu": KernelSpec(self.relu, dtypes=act["Relu"]),
            "ReluGrad": KernelSpec(self.relu_grad, dtypes=act["ReluGrad"]),
            "Relu6": KernelSpec(self.relu6, dtypes=act["Relu6"]),
            "Relu6Grad": KernelSpec(self.relu6_grad, dtypes=act["Relu6Grad"]),
            "LeakyRelu": KernelSpec(self.leaky_relu, dtypes=f),
            "LeakyReluGrad": KernelSpec(self.leaky_relu_grad, dtypes=f),
            "Elu": KernelSpec(self.elu, dtypes=act["Elu"]),
            "EluGrad": KernelSpec(self.elu_grad, dtypes=act["EluGrad"]),
            "BiasAdd": KernelSpec(self.bias_add, dtypes=fi),
            "Conv2D": KernelSpec(self.conv2d, dtypes=f),
            "Conv2DBackpropInput": KernelSpec(self.conv2d_backprop_input, dtypes=f),
            "Conv2DBackpropFilter": KernelSpec(self.conv2d_backprop_filter, dtypes=f),
            "_FusedConv2D": KernelSpec(self.fused_conv2d, dtypes=f),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return NNKernels(ctx).table()
