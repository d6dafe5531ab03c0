"""Linear-algebra kernels (:class:`LinalgKernels`): MatMul, Einsum, and LU-based inverse,
solve and determinants.

MatMul (batched, NumPy-broadcast batch dimensions, any strides: transposes are
stride swaps, never copies) has three OpenCL C variants, picked per call:

* ``mm_direct`` — one work item per output element, strided reads. Integers, small
  products (where packing would cost more than it saves) and ``K == 0``.
* CPU devices (PoCL): *pack + register-blocked micro-kernel*, the BLIS scheme.
  ``pack`` copies A (read through its strides, so transposed views cost nothing
  extra) into row panels ``[batch][M/MR][K][MR]`` and B into column panels
  ``[batch][N/NR][K][NR]`` (zero padded; one launch for both), so the micro-kernel's inner loop
  reads both contiguously. Each work item computes an ``MR x NR`` block of C in
  ``MR * NV`` vector registers (``floatVW``/``doubleVW``): per k, ``NV`` vector loads
  of B, ``MR`` broadcasts of A and ``MR * NV`` fused multiply-adds — LLVM turns this
  into the classic AVX2/AVX-512 6x16 kernel (``vbroadcastss`` + ``vfmadd231ps``).
* GPUs: ``mm_tiled``, a local-memory tiled kernel (64x64 tiles, 16x16 work items of
  4x4 outputs each) reading A and B through their strides.

Einsum parses the (core-normalised, explicit ``"ab,bc->ac"``) equation and works on
views: a repeated label in one operand is a diagonal view (strides added), labels of
size 1 broadcast with stride 0, labels only one operand has (and the output lacks)
are summed out first (``sum_axes``), then operands are combined left to right: a
contraction is one batched MatMul of ``(batch, M, K) x (batch, K, N)`` views, a
product without contracted labels is one broadcasting elementwise kernel. A single
operand that is only transposed / diagonalised comes back as a view, like NumPy's.

MatrixInverse / MatrixSolve / MatrixDeterminant / LogMatrixDeterminant: ``lu_factor``
runs one work-group per matrix (LU with partial pivoting, LAPACK's pivot choice:
the first largest magnitude; rows updated in parallel, one barrier per step; a zero
pivot marks the matrix singular and the step is skipped, as getrf does) and writes
the determinant or (sign, log|det|); ``lu_solve`` then solves for every right-hand
side column in parallel (the inverse solves against the identity). A singular
matrix raises the CPU kernel's InvalidArgumentError after one small flag download.
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import cplx
from . import runtime as rt
from .runtime import FLOATS, NUMERIC

#: packed micro-kernel shapes per float dtype: (MR rows, NV vectors of VW lanes)
_MICRO = {np.dtype(np.float32): (6, 2, 8), np.dtype(np.float64): (6, 2, 4)}

#: products with fewer multiply-adds than this use ``mm_direct`` on CPU devices
_PACK_MIN_FLOPS = 1 << 18

#: variant override for tests and benchmarks: None (auto), "direct", "packed", "tiled"
FORCE_VARIANT = None

_I64 = np.int64


def _ct(dtype):
    return rt.CTYPES[np.dtype(dtype)]


def _acc_type(dtype):
    """Accumulator C type: the float (or complex pair) itself; unsigned (wrapping, no UB)
    for integers."""
    dt = np.dtype(dtype)
    if dt.kind in "fc":
        return _ct(dt)
    return "ulong" if dt.itemsize == 8 else "uint"


def _batch_src(nd, names):
    """Declarations and code computing ``off_<name>`` for batch index ``z`` over ``nd``
    batch dimensions (argument names of :func:`runtime.strided_args_decl`)."""
    if nd == 0:
        return [], ""
    code = "{ long i = z; " + rt.index_code(nd, names, "bd") + " }"
    return rt.strided_args_decl(nd, names, "bd"), code


def _batch_args(bshape, strides):
    """Kernel argument values for :func:`_batch_src` (shape, then each operand's strides)."""
    args = list(bshape[1:])
    for st in strides:
        args += list(st)
    return args


def _merge_batch(bshape, strides):
    """Merge batch dimensions (NumPy-broadcast strides, 0 where broadcast)."""
    shape, sts = rt.merge_dims(tuple(bshape), [list(s) for s in strides])
    return shape, sts


def _bstrides(a, bshape):
    """Element strides of ``a``'s batch dims (all but the last two) broadcast to ``bshape``."""
    st, off = rt.layout(a)
    st = st[:-2]
    pad = len(bshape) - len(st)
    out = [0] * len(bshape)
    for i, (s, n) in enumerate(zip(st, a.shape[:-2])):
        out[pad + i] = 0 if n == 1 else s
    return out, off


# --- MatMul ---------------------------------------------------------------------------------

def _madd(dtype, acc, a, b):
    """C: ``s`` plus the product of ``a`` and ``b`` (complex: the library's product)."""
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return f"s += cmul{cplx.PARTS[dt][1]}({a}, {b});"
    return f"s += ({acc}){a} * ({acc}){b};"


def _direct_src(dtype, nd):
    t, acc = _ct(dtype), _acc_type(dtype)
    pre = cplx.preamble(dtype) if np.dtype(dtype).kind == "c" else ""
    decl, bcode = _batch_src(nd, ["a", "b"])
    params = [f"__global {t} *c", f"__global const {t} *pa", "long o_a", f"__global const {t} *pb",
              "long o_b", "long M", "long N", "long K", "long sam", "long sak", "long sbk",
              "long sbn"] + decl
    return pre + f"""
__kernel void mm_direct({', '.join(params)}) {{
    long col = get_global_id(0), row = get_global_id(1), z = get_global_id(2);
    if (col >= N || row >= M) return;
    long off_a = o_a, off_b = o_b;
    {bcode}
    __global const {t} *ar = pa + off_a + row * sam;
    __global const {t} *bc = pb + off_b + col * sbn;
    {acc} s = ({acc})(0);
    for (long k = 0; k < K; k++) {_madd(dtype, acc, "ar[k * sak]", "bc[k * sbk]")}
    c[(z * M + row) * N + col] = ({t})s;
}}
"""


def _pack_copy(t, rows):
    """The copy of one panel row of ``pack``: ``rows`` elements, zero padded past ``R``."""
    return f"""
        if (r0 + {rows} <= R) {{
            for (int r = 0; r < {rows}; r++) dst[r] = src[(r0 + r) * sr];
        }} else {{
            for (int r = 0; r < {rows}; r++) dst[r] = (r0 + r < R) ? src[(r0 + r) * sr] : ({t})0;
        }}"""


def _pack_src(dtype, nd, mr, nr):
    """``pack``: A into row panels ``pa[z][M/MR][K][MR]`` (work items ``(k, panel < nib)``)
    and B into column panels ``pb[z][N/NR][K][NR]`` (the panels after), both read
    through their strides and zero padded past ``M``/``N``: one launch for both."""
    t = _ct(dtype)
    decl, bcode = _batch_src(nd, ["a", "b"])
    params = [f"__global {t} *pka", f"__global {t} *pkb", f"__global const {t} *pa", "long o_a",
              f"__global const {t} *pb", "long o_b", "long M", "long N", "long K", "long sam",
              "long sak", "long sbk", "long sbn", "long nib", "long njb"] + decl
    return f"""
__kernel void pack({', '.join(params)}) {{
    long k = get_global_id(0), pan = get_global_id(1), z = get_global_id(2);
    if (k >= K) return;
    long off_a = o_a, off_b = o_b;
    {bcode}
    if (pan < nib) {{
        __global const {t} *src = pa + off_a + k * sak;
        __global {t} *dst = pka + ((z * nib + pan) * K + k) * {mr};
        long r0 = pan * {mr}, R = M, sr = sam;{_pack_copy(t, mr)}
    }} else {{
        pan -= nib;
        __global const {t} *src = pb + off_b + k * sbk;
        __global {t} *dst = pkb + ((z * njb + pan) * K + k) * {nr};
        long r0 = pan * {nr}, R = N, sr = sbn;{_pack_copy(t, nr)}
    }}
}}
"""


def _micro_src(dtype, mr, nv, vw):
    t = _ct(dtype)
    v = f"{t}{vw}"
    nr = nv * vw
    lanes = "0123456789abcdef"
    rr, vv = range(mr), range(nv)
    acc = " ".join(f"{v} c{r}_{q} = 0;" for r in rr for q in vv)
    loads = " ".join(f"{v} b{q} = B[k * {nv} + {q}];" for q in vv)
    fmas = "\n        ".join(
        f"{{ {t} a = A[k * {mr} + {r}]; " + " ".join(
            f"c{r}_{q} = a * b{q} + c{r}_{q};" for q in vv) + " }" for r in rr)
    full = "\n        ".join(
        f"if (i0 + {r} < M) {{ " + " ".join(
            f"vstore{vw}(c{r}_{q}, 0, C + (i0 + {r}) * N + j0 + {q * vw});" for q in vv) + " }"
        for r in rr)
    edge = "\n        ".join(
        f"if (i0 + {r} < M) {{ " + " ".join(
            f"if (j0 + {q * vw + l} < N) C[(i0 + {r}) * N + j0 + {q * vw + l}] = "
            f"c{r}_{q}.s{lanes[l]};" for q in vv for l in range(vw)) + " }"
        for r in rr)
    return f"""
__kernel void mm_micro(__global {t} *c, __global const {t} *pa, __global const {t} *pb,
                       long M, long N, long K, long nib, long njb) {{
    long g = get_global_id(0), z = get_global_id(1);
    long ib = g % nib, jb = g / nib;
    __global const {t} *A = pa + (z * nib + ib) * K * {mr};
    __global const {v} *B = (__global const {v} *)(pb + (z * njb + jb) * K * {nr});
    {acc}
    for (long k = 0; k < K; k++) {{
        {loads}
        {fmas}
    }}
    long i0 = ib * {mr}, j0 = jb * {nr};
    __global {t} *C = c + z * M * N;
    if (j0 + {nr} <= N) {{
        {full}
    }} else {{
        {edge}
    }}
}}
"""


_TS, _TK, _WPT = 64, 16, 4      # tiled kernel: tile, k-step, outputs per work item per dim


def _tiled_src(dtype, nd):
    t = _ct(dtype)
    decl, bcode = _batch_src(nd, ["a", "b"])
    lw = _TS // _WPT
    params = [f"__global {t} *c", f"__global const {t} *pa", "long o_a", f"__global const {t} *pb",
              "long o_b", "long M", "long N", "long K", "long sam", "long sak", "long sbk",
              "long sbn"] + decl
    return f"""
__kernel __attribute__((reqd_work_group_size({lw}, {lw}, 1)))
void mm_tiled({', '.join(params)}) {{
    int tx = get_local_id(0), ty = get_local_id(1), tid = ty * {lw} + tx;
    long j0 = get_group_id(0) * {_TS}, i0 = get_group_id(1) * {_TS}, z = get_group_id(2);
    long off_a = o_a, off_b = o_b;
    {bcode}
    __local {t} As[{_TK}][{_TS} + 1];
    __local {t} Bs[{_TK}][{_TS} + 1];
    {t} acc[{_WPT}][{_WPT}];
    for (int r = 0; r < {_WPT}; r++) for (int q = 0; q < {_WPT}; q++) acc[r][q] = 0;
    for (long k0 = 0; k0 < K; k0 += {_TK}) {{
        for (int e = tid; e < {_TK * _TS}; e += {lw * lw}) {{
            int kk = e % {_TK}, ii = e / {_TK};
            long gi = i0 + ii, gk = k0 + kk;
            As[kk][ii] = (gi < M && gk < K) ? pa[off_a + gi * sam + gk * sak] : ({t})0;
            int jj = e % {_TS}, kb = e / {_TS};
            long gj = j0 + jj, gkb = k0 + kb;
            Bs[kb][jj] = (gj < N && gkb < K) ? pb[off_b + gkb * sbk + gj * sbn] : ({t})0;
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < {_TK}; kk++) {{
            {t} av[{_WPT}], bv[{_WPT}];
            for (int r = 0; r < {_WPT}; r++) av[r] = As[kk][ty + {lw} * r];
            for (int q = 0; q < {_WPT}; q++) bv[q] = Bs[kk][tx + {lw} * q];
            for (int r = 0; r < {_WPT}; r++)
                for (int q = 0; q < {_WPT}; q++) acc[r][q] += av[r] * bv[q];
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
    }}
    for (int r = 0; r < {_WPT}; r++) {{
        long gi = i0 + ty + {lw} * r;
        if (gi >= M) continue;
        for (int q = 0; q < {_WPT}; q++) {{
            long gj = j0 + tx + {lw} * q;
            if (gj < N) c[(z * M + gi) * N + gj] = acc[r][q];
        }}
    }}
}}
"""


def _variant(dev, dtype, m, n, k):
    if FORCE_VARIANT is not None:
        if FORCE_VARIANT == "direct" or np.dtype(dtype).kind != "f" or k == 0:
            return "direct"
        return FORCE_VARIANT
    if np.dtype(dtype).kind != "f" or k == 0:
        return "direct"
    if dev.is_gpu:
        if dev.max_wg >= (_TS // _WPT) ** 2 and m * n >= 1024:
            return "tiled"
        return "direct"
    if m * n * k >= _PACK_MIN_FLOPS and m >= 2 and n >= 4:
        return "packed"
    return "direct"


def matmul_views(a, b, out=None):
    """``a @ b`` for device arrays (views) of shapes ``[..., M, K]`` and ``[..., K, N]``
    with NumPy-broadcast batch dimensions: a new contiguous ``[batch..., M, N]`` array,
    or ``out`` (the buffer plan's: that shape, contiguous at offset 0, never an input)
    written. Shapes must already be validated."""
    dev = rt.device_of(a)
    dt = a.dtype
    m, k = a.shape[-2:]
    n = b.shape[-1]
    bshape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    if out is None:
        out = rt.empty(dev, bshape + (m, n), dt)
    elif out.offset or not rt.is_contiguous(out) or out.shape != bshape + (m, n):
        raise ValueError(f"matmul: out= must be a contiguous {bshape + (m, n)} array at "
                         f"offset 0, not {out.shape}")
    z = math.prod(bshape)
    if out.size == 0:
        return out
    sta, oa = _bstrides(a, bshape)
    stb, ob = _bstrides(b, bshape)
    mshape, (msa, msb) = _merge_batch(bshape, [sta, stb])
    nd = len(mshape)
    (sam, sak), (sbk, sbn) = rt.layout(a)[0][-2:], rt.layout(b)[0][-2:]
    variant = _variant(dev, dt, m, n, k)
    if variant == "packed":
        mr, nv, vw = _MICRO[dt]
        nr = nv * vw
        nib, njb = -(-m // mr), -(-n // nr)
        pa = rt.empty(dev, (z * nib * mr * k,), dt)
        pb = rt.empty(dev, (z * njb * nr * k,), dt)
        kern = rt.kernel(dev, _pack_src(dt, nd, mr, nr), "pack",
                         [None, None, None, _I64, None] + [_I64] * (10 + max(nd - 1, 0) + 2 * nd))
        rt.launch(dev, kern, (k, nib + njb, z), None, pa.base_data, pb.base_data, rt.buf(dev, a),
                  oa, rt.buf(dev, b), ob, m, n, k, sam, sak, sbk, sbn, nib, njb,
                  *_batch_args(mshape, [msa, msb]))
        kern = rt.kernel(dev, _micro_src(dt, mr, nv, vw), "mm_micro",
                         [None, None, None] + [_I64] * 5)
        rt.launch(dev, kern, (nib * njb, z), (1, 1), out.base_data, pa.base_data, pb.base_data,
                  m, n, k, nib, njb)
        return out
    scal = [None, None, _I64, None, _I64] + [_I64] * (7 + max(nd - 1, 0) + 2 * nd)
    args = [out.base_data, rt.buf(dev, a), oa, rt.buf(dev, b), ob, m, n, k, sam, sak, sbk, sbn,
            *_batch_args(mshape, [msa, msb])]
    if variant == "tiled":
        kern = rt.kernel(dev, _tiled_src(dt, nd), "mm_tiled", scal)
        lw = _TS // _WPT
        rt.launch(dev, kern, (-(-n // _TS) * lw, -(-m // _TS) * lw, z), (lw, lw, 1), *args)
    else:
        kern = rt.kernel(dev, _direct_src(dt, nd), "mm_direct", scal)
        rt.launch(dev, kern, (n, m, z), None, *args)
    return out


def _swap_last(a):
    """A view of ``a`` with its last two dimensions swapped."""
    st, off = rt.layout(a)
    shape = a.shape[:-2] + (a.shape[-1], a.shape[-2])
    return rt.view(a, shape, tuple(st[:-2]) + (st[-1], st[-2]), off)


# --- sums over axes (einsum) -------------------------------------------------------------------

def _sum_src(dtype, nk, nr):
    t, acc = _ct(dtype), (_ct(dtype) if np.dtype(dtype).kind in "fc" else _acc_type(dtype))
    kdecl = rt.strided_args_decl(nk, ["x"], "d") if nk else []
    rdecl = rt.strided_args_decl(nr, ["y"], "e") if nr else []
    kcode = ("{ long i = g; " + rt.index_code(nk, ["x"], "d") + " }") if nk else ""
    rcode = ("long i = t; " + rt.index_code(nr, ["y"], "e")) if nr else ""
    params = [f"__global {t} *out", f"__global const {t} *px", "long o_x", "long n",
              "long R"] + kdecl + rdecl
    return f"""
__kernel void sum_axes({', '.join(params)}) {{
    long g = get_global_id(0);
    if (g >= n) return;
    long off_x = o_x;
    {kcode}
    {acc} s = ({acc})(0);
    for (long t = 0; t < R; t++) {{
        long off_y = off_x;
        {rcode}
        s += ({acc})px[off_y];
    }}
    out[g] = ({t})s;
}}
"""


def sum_axes(x, axes):
    """Sum of the (view) array ``x`` over ``axes``: a new contiguous array of the other
    dimensions (in order), ``x``'s dtype (integers wrap like NumPy's)."""
    dev = rt.device_of(x)
    st, off = rt.layout(x)
    keep = [i for i in range(x.ndim) if i not in axes]
    kshape = tuple(x.shape[i] for i in keep)
    out = rt.empty(dev, kshape, x.dtype)
    if out.size == 0:
        return out
    ks, (kst,) = rt.merge_dims(kshape, [[st[i] for i in keep]])
    rshape = tuple(x.shape[i] for i in axes)
    rs, (rst,) = rt.merge_dims(rshape, [[st[i] for i in axes]])
    nk, nr = len(ks), len(rs)
    kern = rt.kernel(dev, _sum_src(x.dtype, nk, nr), "sum_axes",
                     [None, None] + [_I64] * (3 + max(nk - 1, 0) + nk + max(nr - 1, 0) + nr))
    args = [out.base_data, rt.buf(dev, x), off, out.size, math.prod(rshape)]
    args += list(ks[1:]) + list(kst) + list(rs[1:]) + list(rst)
    rt.launch(dev, kern, (out.size,), None, *args)
    return out


# --- Einsum ----------------------------------------------------------------------------------

class _Term:
    """An operand during einsum evaluation: a (view) array and one label per dimension
    (labels distinct)."""

    def __init__(self, arr, labels, fresh):
        self.arr, self.labels, self.fresh = arr, labels, fresh


def _permuted(arr, perm):
    st, off = rt.layout(arr)
    return rt.view(arr, tuple(arr.shape[p] for p in perm), tuple(st[p] for p in perm), off)


def _group(shape, strides):
    """(size, stride) of dimensions walkable as one, or None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    size = math.prod(shape)
    if not dims:
        return size, 0
    for (_, s0), (n1, s1) in zip(dims, dims[1:]):
        if s0 != s1 * n1:
            return None
    return size, dims[-1][1]


def _einsum_prepare(arr, labels, sizes):
    """Diagonal views for repeated labels, stride-0 broadcasts for size-1 labels."""
    st, off = rt.layout(arr)
    lab, shp, sts = [], [], []
    for c, n, s in zip(labels, arr.shape, st):
        if c in lab:                 # a diagonal: walk both dimensions at once
            if n != 1:
                sts[lab.index(c)] += s
            continue
        lab.append(c)
        if n == 1 and sizes[c] != 1:
            shp.append(sizes[c])
            sts.append(0)
        else:
            shp.append(n)
            sts.append(s)
    return rt.view(arr, tuple(shp), tuple(sts), off), "".join(lab)


def _sum_out(term, needed):
    drop = [i for i, c in enumerate(term.labels) if c not in needed]
    if not drop:
        return term
    arr = sum_axes(term.arr, drop)
    return _Term(arr, "".join(c for c in term.labels if c in needed), True)


def _contract(x, y, keep, sizes):
    """Combine two terms; ``keep``: labels needed afterwards."""
    batch = [c for c in x.labels if c in y.labels and c in keep]
    red = [c for c in x.labels if c in y.labels and c not in keep]
    xf = [c for c in x.labels if c not in y.labels]
    yf = [c for c in y.labels if c not in x.labels]
    if not red:      # a broadcasting product: one elementwise kernel
        out_labels = batch + xf + yf
        views = []
        for t in (x, y):
            st, off = rt.layout(t.arr)
            pos = {c: i for i, c in enumerate(t.labels)}
            views.append(rt.view(t.arr, tuple(sizes[c] for c in out_labels),
                                 tuple(st[pos[c]] if c in pos else 0 for c in out_labels), off))
        dt = x.arr.dtype
        if dt.kind == "c":
            expr, _, pre = cplx.expression("Mul", (dt, dt))
        else:
            expr, pre = "x0 * x1", ""
        arr = rt.elementwise(expr, dt, *views, preamble=pre,
                             out_shape=tuple(sizes[c] for c in out_labels))
        return _Term(arr, "".join(out_labels), True)
    ops = []
    for t, order in ((x, batch + xf + red), (y, batch + red + yf)):
        arr = _permuted(t.arr, [t.labels.index(c) for c in order])
        st, off = rt.layout(arr)
        nb = len(batch)
        nf = len(xf) if t is x else len(red)
        g1 = _group(arr.shape[nb:nb + nf], st[nb:nb + nf])
        g2 = _group(arr.shape[nb + nf:], st[nb + nf:])
        if g1 is None or g2 is None:
            arr = rt.contiguous(arr)
            st, off = rt.layout(arr)
            g1 = _group(arr.shape[nb:nb + nf], st[nb:nb + nf])
            g2 = _group(arr.shape[nb + nf:], st[nb + nf:])
        ops.append(rt.view(arr, arr.shape[:nb] + (g1[0], g2[0]),
                           tuple(st[:nb]) + (g1[1], g2[1]), off))
    res = matmul_views(*ops)
    out_labels = batch + xf + yf
    arr = rt.view(res, tuple(sizes[c] for c in out_labels))
    return _Term(arr, "".join(out_labels), True)


# --- LU: inverse, solve, determinants -----------------------------------------------------------

def _lu_factor_src(dtype, nd, mode):
    """``mode``: "lu" (factor only), "det" or "slogdet" (also write the determinant)."""
    t = _ct(dtype)
    decl, bcode = _batch_src(nd, ["a"])
    params = [f"__global const {t} *pa", "long o_a", "long sr", "long sc", f"__global {t} *w",
              "__global long *piv", "__global int *bad", f"__global {t} *out1",
              f"__global {t} *out2", "long n"] + decl
    if mode == "det":
        fin = f"out1[z] = sing ? ({t})0 : sgn * prod;"
    elif mode == "slogdet":
        fin = (f"out1[z] = sing ? ({t})0 : sgn; "
               f"out2[z] = sing ? -INFINITY : logabs;")
    else:
        fin = ""
    return f"""
__kernel void lu_factor({', '.join(params)}) {{
    long z = get_group_id(0);
    long lid = get_local_id(0), L = get_local_size(0);
    long off_a = o_a;
    {bcode}
    __global {t} *W = w + z * n * n;
    for (long e = lid; e < n * n; e += L) W[e] = pa[off_a + (e / n) * sr + (e % n) * sc];
    barrier(CLK_GLOBAL_MEM_FENCE);
    __local long pivot;
    for (long k = 0; k < n; k++) {{
        if (lid == 0) {{
            long p = k; {t} best = fabs(W[k * n + k]);
            for (long i = k + 1; i < n; i++) {{
                {t} v = fabs(W[i * n + k]);
                if (v > best) {{ best = v; p = i; }}
            }}
            piv[z * n + k] = p;
            pivot = p;
        }}
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        long p = pivot;
        if (p != k) {{
            for (long j = lid; j < n; j += L) {{
                {t} tmp = W[k * n + j]; W[k * n + j] = W[p * n + j]; W[p * n + j] = tmp;
            }}
        }}
        barrier(CLK_GLOBAL_MEM_FENCE);
        {t} d = W[k * n + k];
        if (d != ({t})0) {{
            for (long i = k + 1 + lid; i < n; i += L) {{
                {t} l = W[i * n + k] / d;
                W[i * n + k] = l;
                if (l != ({t})0)
                    for (long j = k + 1; j < n; j++) W[i * n + j] -= l * W[k * n + j];
            }}
        }}
        barrier(CLK_GLOBAL_MEM_FENCE);
    }}
    if (lid == 0) {{
        int sing = 0; {t} sgn = 1, prod = 1, logabs = 0;
        for (long k = 0; k < n; k++) {{
            {t} d = W[k * n + k];
            if (piv[z * n + k] != k) sgn = -sgn;
            if (d == ({t})0) sing = 1;
            if (d < ({t})0) sgn = -sgn;
            prod *= fabs(d);
            logabs += log(fabs(d));
        }}
        bad[z] = sing;
        {fin}
    }}
}}
"""


def _lu_solve_src(dtype, nd, identity):
    """Solve ``LU x = P b`` per right-hand side column (``identity``: b = I)."""
    t = _ct(dtype)
    decl, bcode = _batch_src(nd, ["b"])
    params = [f"__global const {t} *w", "__global const long *piv", f"__global {t} *x",
              f"__global const {t} *pb", "long o_b", "long sr", "long sc", "long n",
              "long nrhs"] + decl
    load = ("X[i * nrhs] = (i == col) ? 1 : 0;" if identity else
            "X[i * nrhs] = pb[off_b + i * sr + col * sc];")
    return f"""
__kernel void lu_solve({', '.join(params)}) {{
    long col = get_global_id(0), z = get_global_id(1);
    if (col >= nrhs) return;
    long off_b = o_b;
    {bcode}
    __global const {t} *W = w + z * n * n;
    __global const long *P = piv + z * n;
    __global {t} *X = x + z * n * nrhs + col;
    for (long i = 0; i < n; i++) {load}
    for (long k = 0; k < n; k++) {{
        long p = P[k];
        if (p != k) {{ {t} tmp = X[k * nrhs]; X[k * nrhs] = X[p * nrhs]; X[p * nrhs] = tmp; }}
    }}
    for (long i = 1; i < n; i++) {{
        {t} s = X[i * nrhs];
        for (long j = 0; j < i; j++) s -= W[i * n + j] * X[j * nrhs];
        X[i * nrhs] = s;
    }}
    for (long i = n - 1; i >= 0; i--) {{
        {t} s = X[i * nrhs];
        for (long j = i + 1; j < n; j++) s -= W[i * n + j] * X[j * nrhs];
        X[i * nrhs] = s / W[i * n + i];
    }}
}}
"""


def _lu(x, bshape, mode):
    """Factor every matrix of ``x`` (batch dims broadcast to ``bshape``): (W, piv, bad,
    out1, out2) device arrays (out1/out2: det or sign/logabs per matrix)."""
    dev = rt.device_of(x)
    dt = x.dtype
    n = x.shape[-1]
    z = math.prod(bshape)
    w = rt.empty(dev, (z, n, n), dt)
    piv = rt.empty(dev, (z, n), np.int64)
    bad = rt.empty(dev, (z,), np.int32)
    out1 = rt.empty(dev, bshape, dt)
    out2 = rt.empty(dev, bshape, dt)
    if z == 0:
        return w, piv, bad, out1, out2
    st, off = _bstrides(x, bshape)
    ms, (mst,) = _merge_batch(bshape, [st])
    nd = len(ms)
    sr, sc = rt.layout(x)[0][-2:]
    kern = rt.kernel(dev, _lu_factor_src(dt, nd, mode), "lu_factor",
                     [None, _I64, _I64, _I64, None, None, None, None, None, _I64]
                     + [_I64] * (max(nd - 1, 0) + nd), options=dev.exact_div)
    lw = 1
    while lw < min(n, 64 if not dev.is_gpu else 256, dev.max_wg):
        lw *= 2
    rt.launch(dev, kern, (z * lw,), (lw,), rt.buf(dev, x), off, sr, sc, rt.buf(dev, w),
              rt.buf(dev, piv), bad.base_data, rt.buf(dev, out1), rt.buf(dev, out2), n,
              *_batch_args(ms, [mst]))
    return w, piv, bad, out1, out2


def _raise_if_singular(bad, msg):
    if bad.size and rt.download(bad).any():
        raise InvalidArgumentError(msg)


def _solve_lu(w, piv, b, bshape, n, nrhs, dtype):
    dev = rt.device_of(w)
    z = math.prod(bshape)
    out = rt.empty(dev, bshape + (n, nrhs), dtype)
    if out.size == 0:
        return out
    if b is None:
        nd, off, sr, sc, bargs = 0, 0, 0, 0, []
        src = _lu_solve_src(dtype, 0, True)
        bbuf = w.base_data
    else:
        st, off = _bstrides(b, bshape)
        ms, (mst,) = _merge_batch(bshape, [st])
        nd = len(ms)
        sr, sc = rt.layout(b)[0][-2:]
        bargs = _batch_args(ms, [mst])
        src = _lu_solve_src(dtype, nd, False)
        bbuf = rt.buf(dev, b)
    kern = rt.kernel(dev, src, "lu_solve", [None, None, None, None] + [_I64] * (5 + (
        max(nd - 1, 0) + nd)), options=dev.exact_div)
    rt.launch(dev, kern, (nrhs, z), None, w.base_data, piv.base_data, out.base_data, bbuf, off,
              sr, sc, n, nrhs, *bargs)
    return out


class LinalgKernels:
    """The matrix-product, Einsum and LU kernels (one method each; :meth:`table` maps op
    names to them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def matmul(self, a, b, transpose_a=False, transpose_b=False, adjoint_a=False,
               adjoint_b=False, out=None):
        """MatMul: the (adjoint) operands as views, one product kernel."""
        # shape errors are ValueErrors: the core rewrites them with its shape inference's
        # message (as for NumPy's on ``cpu``)
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError("matmul needs inputs of rank >= 2")
        if transpose_a or adjoint_a:
            a = _swap_last(a)
        if transpose_b or adjoint_b:
            b = _swap_last(b)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
        return matmul_views(a, b, out)

    def inv(self, x, adjoint=False):
        """MatrixInverse: LU factorisation, then solve against the identity."""
        if adjoint:
            x = _swap_last(x)
        n = x.shape[-1]
        bshape = tuple(x.shape[:-2])
        if math.prod(x.shape) == 0:
            return self.rt.empty(self.rt.device_of(x), x.shape, x.dtype)
        w, piv, bad, _, _ = _lu(x, bshape, "lu")
        _raise_if_singular(bad, "Input is not invertible.")
        return _solve_lu(w, piv, None, bshape, n, n, x.dtype)

    def solve(self, a, b, adjoint=False):
        """MatrixSolve: LU factorisation of ``a``, then solve for ``b``'s columns."""
        if adjoint:
            a = _swap_last(a)
        n, nrhs = a.shape[-1], b.shape[-1]
        bshape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        if math.prod(bshape) * n * nrhs == 0:
            return self.rt.empty(self.rt.device_of(a), bshape + (n, nrhs), a.dtype)
        w, piv, bad, _, _ = _lu(a, bshape, "lu")
        _raise_if_singular(bad, "Input matrix is not invertible.")
        return _solve_lu(w, piv, b, bshape, n, nrhs, a.dtype)

    def det(self, x):
        """MatrixDeterminant: the product of the LU diagonal, with the pivots' sign."""
        return _lu(x, tuple(x.shape[:-2]), "det")[3]

    def slogdet(self, x):
        """LogMatrixDeterminant: sign and log of the absolute determinant."""
        _, _, _, sign, logabs = _lu(x, tuple(x.shape[:-2]), "slogdet")
        return sign, logabs

    def einsum(self, *operands, equation):
        """Einsum: Einstein summation of device arrays, ``equation`` in the core's explicit
        form (pairwise contractions as products, see the module doc)."""
        lhs, _, out = equation.partition("->")
        subs = lhs.split(",")
        if len(subs) != len(operands):
            raise InvalidArgumentError(f"einsum equation {equation!r}: {len(subs)} operand "
                                       f"subscript(s) for {len(operands)} operand(s)")
        sizes = {}
        for k, (s, x) in enumerate(zip(subs, operands)):
            if len(s) != x.ndim:
                raise InvalidArgumentError(f"einsum equation {equation!r}: subscripts {s!r} name "
                                           f"{len(s)} dimension(s) but the operand has rank "
                                           f"{x.ndim}")
            for c, d in zip(s, x.shape):
                prev = sizes.get(c)
                if prev is None or prev == 1:
                    sizes[c] = d
                elif d != prev and d != 1:
                    raise InvalidArgumentError(
                        f"einsum {equation!r}: label {c!r} has size {prev} in one operand and {d} "
                        f"in operand {k}")
        terms = []
        for s, x in zip(subs, operands):
            arr, lab = _einsum_prepare(x, s, sizes)
            terms.append(_Term(arr, lab, False))
        dt = operands[0].dtype
        dev = self.rt.device_of(operands[0])
        if any(sizes[c] == 0 for c in sizes):      # an empty product: zeros or nothing
            shape = tuple(sizes[c] for c in out)
            res = self.rt.empty(dev, shape, dt)
            if res.size:
                return self.rt.elementwise("x0", dt, self.rt.scalar(dev, 0, dt), out_shape=shape)
            return res
        cur = None
        for idx, t in enumerate(terms):
            later = out + "".join(u.labels for u in terms[idx + 1:])
            t = _sum_out(t, later + (cur.labels if cur is not None else ""))
            if cur is None:
                cur = t
                continue
            cur = _sum_out(cur, later + t.labels)
            cur = _contract(cur, t, later, sizes)
        cur = _sum_out(cur, out)
        res = _permuted(cur.arr, [cur.labels.index(c) for c in out])
        if cur.fresh and not self.rt.is_contiguous(res):
            res = self.rt.contiguous(res)
        return res

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {
            "MatMul": KernelSpec(self.matmul, dtypes=FLOATS + ("int32", "int64") + cplx.COMPLEX,
                                 out=True),
            "Einsum": KernelSpec(self.einsum, dtypes=NUMERIC + cplx.COMPLEX),
            "MatrixInverse": KernelSpec(self.inv, dtypes=FLOATS),
            "MatrixSolve": KernelSpec(self.solve, dtypes=FLOATS),
            "MatrixDeterminant": KernelSpec(self.det, dtypes=FLOATS),
            "LogMatrixDeterminant": KernelSpec(self.slogdet, dtypes=FLOATS),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return LinalgKernels(ctx).table()
