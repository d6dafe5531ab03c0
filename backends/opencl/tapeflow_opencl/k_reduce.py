"""Reduction kernels (:class:`ReduceKernels`): one generated OpenCL C kernel family for
every reduction.

A reduction is a :class:`Reducer`: an accumulator C type, its identity, how an
element becomes an accumulator (``load``) and how two accumulators combine
(``combine``, associative and commutative), and the final expression writing the
result. :func:`reduce` runs any reducer over any set of axes of any strided input:

* the layout is planned on the host: the kept dimensions (in order) and the reduced
  dimensions (ordered by decreasing stride) are each merged where the strides allow,
  so most reductions index one kept and one reduced dimension, whatever the input's
  strides (transposed views and broadcasts cost no copy);
* **one work item per output** (``red_t``) when the reduced extent is small, or when
  there are enough outputs to fill the device and their reads are coalesced (reduced
  axes outer), or always on CPU devices once there are enough outputs: a plain loop
  (nested loops over the reduced dimensions, no division per element);
* on CPU devices, **one work item per tile of 4-16 outputs** (``red_v``) when the
  outputs are contiguous in memory and the reduced axes are not (a column sum):
  each step reads a whole cache line into the tile's accumulators;
* **one work-group per output** (``red_g``) otherwise: its work items stride over the
  reduced extent, then a tree reduction in local memory;
* **two passes** when there are few outputs for a large extent (a full sum of a
  million elements): the extent is split into ``P`` chunks so that every compute
  unit gets work-groups, each writes a partial accumulator, and ``red_p`` combines
  the ``P`` partials of each output. On CPU devices a work item of a group reads a
  contiguous block rather than striding (one core runs a whole work-group).

Semantics follow NumPy/the ``cpu`` backend: the dtype is kept (integers wrap: they
accumulate in ``ulong``, whose wrap-around is defined, and are truncated at the
end), the integer mean truncates toward zero, ``max``/``min`` propagate NaN,
``argmax``/``argmin`` return the first NaN or the first extreme index, and
``logsumexp`` is one pass with an online (max, scaled sum) accumulator shifted by
the running maximum only where it is finite (so all ``-inf`` slices give ``-inf``).
"""

from __future__ import annotations

import math

import numpy as np

# the CPU backend's element count and empty-reduction error: one wording on every device
from tapeflow.kernels.reduce import count_reduced, empty_reduction
from tapeflow.plugins import KernelSpec

from . import cplx
from . import runtime as rt
from .runtime import FLOATS, NUMERIC

BOOL = ("bool",)

_SCALARS = set(rt.CTYPES.values())

#: C limits of each integer C type (identities of max and min)
_LIMITS = {"char": ("CHAR_MIN", "CHAR_MAX"), "uchar": ("0", "UCHAR_MAX"),
           "short": ("SHRT_MIN", "SHRT_MAX"), "ushort": ("0", "USHRT_MAX"),
           "int": ("INT_MIN", "INT_MAX"), "uint": ("0", "UINT_MAX"),
           "long": ("LONG_MIN", "LONG_MAX"), "ulong": ("0", "ULONG_MAX")}


class Reducer:
    """How a reduction folds elements; every field is OpenCL C text.

    ``acc``: the accumulator's C type (a scalar type, or a struct typedef'd in
    ``preamble``); ``init``: the identity; ``load``: an expression of the element
    ``v`` (the input's C type) and ``r`` (``long``, its position along the reduced
    extent: the index along the axis when one axis is reduced) giving an
    accumulator; ``combine``: an expression of accumulators ``a`` and ``b``
    (associative and commutative: work items combine in any order); ``final``: an
    expression of the accumulator ``a`` and ``n`` (``long``, the number of reduced
    elements) giving the result, converted to the output's C type; ``update``
    (optional): ``a`` combined with element ``v`` at ``r``, cheaper than
    ``combine(a, load)`` (the sequential loops use it); ``acc_size``: an upper bound
    of ``sizeof(acc)`` in bytes (partial-accumulator buffers of the two-pass
    scheme). ``key`` names the reducer in kernel caches (the source is the key).

    >>> # Reducer("double", "0", "(double)v * v", "a + b", "sqrt(a)")  a float64 norm
    """

    __slots__ = ("acc", "init", "load", "combine", "final", "update", "preamble", "acc_size")

    def __init__(self, acc, init, load, combine, final="a", update=None, preamble="",
                 acc_size=16):
        self.acc = acc
        self.init = init
        self.load = load
        self.combine = combine
        self.final = final
        self.update = update
        self.preamble = preamble
        self.acc_size = acc_size

    def c_functions(self):
        """``preamble`` plus the inline functions ``r_load``, ``r_comb``, ``r_upd``,
        ``r_init`` every generated kernel calls (``r_final`` takes the output type)."""
        A = self.acc
        upd = self.update or "r_comb(a, r_load(v, r))"
        init = self.init if A not in _SCALARS else f"({A})({self.init})"
        return (f"{self.preamble}\n"
                f"inline {A} r_init(void) {{ return {init}; }}\n"
                f"inline {A} r_load(T v, long r) {{ return {self.load}; }}\n"
                f"inline {A} r_comb({A} a, {A} b) {{ return {self.combine}; }}\n"
                f"inline {A} r_upd({A} a, T v, long r) {{ return {upd}; }}\n"
                f"inline O r_final({A} a, long n) {{ return (O)({self.final}); }}\n")


# --- the reducers of the ops ------------------------------------------------------------

def _acc_type(ct):
    """Accumulator of sums/products: the float (or complex: float2/double2) type itself,
    ``ulong`` for integers."""
    return ct if ct in ("float", "double", "float2", "double2") else "ulong"


def _lse(ct):
    """Online log-sum-exp: (running max ``m``, its shift ``sh`` = ``m`` when finite
    else 0 (the ``cpu`` kernel's rule), sum ``s`` of ``exp(x - sh)``); an element
    not above the maximum costs one ``exp``."""
    S = f"lse_{ct}"
    pre = f"""
typedef struct {{ {ct} m; {ct} sh; {ct} s; }} {S};
inline {ct} {S}_shift({ct} m) {{ return isfinite(m) ? m : ({ct})0; }}
inline {ct} {S}_scale({ct} s, {ct} from, {ct} to) {{
    return (s == ({ct})0) ? ({ct})0 : s * exp(from - to); }}
inline {S} {S}_comb({S} a, {S} b) {{
    {S} c; c.m = (isnan(a.m) || a.m > b.m) ? a.m : b.m;
    c.sh = {S}_shift(c.m);
    c.s = {S}_scale(a.s, a.sh, c.sh) + {S}_scale(b.s, b.sh, c.sh);
    return c; }}
inline {S} {S}_load({ct} v) {{
    {S} c; c.m = v; c.sh = {S}_shift(v); c.s = exp(v - c.sh); return c; }}
inline {S} {S}_upd({S} a, {ct} v) {{
    if (!(v <= a.m)) {{            /* a new maximum, or a NaN */
        {ct} m = isnan(a.m) ? a.m : v;
        {ct} sh = {S}_shift(m);
        a.s = {S}_scale(a.s, a.sh, sh); a.m = m; a.sh = sh;
    }}
    a.s += exp(v - a.sh);
    return a; }}
inline {S} {S}_init(void) {{ {S} c; c.m = -INFINITY; c.sh = ({ct})0; c.s = ({ct})0; return c; }}
"""
    return Reducer(S, f"{S}_init()", f"{S}_load(v)", f"{S}_comb(a, b)",
                   "log(a.s) + a.sh", update=f"{S}_upd(a, v)", preamble=pre, acc_size=24)


def _arg(ct, largest):
    """(value, index) pairs: the extreme value, the first index on ties, the first
    NaN when there is one (NumPy's argmax/argmin)."""
    S = f"arg{'max' if largest else 'min'}_{ct}"
    better = "a.v > b.v" if largest else "a.v < b.v"
    worse = "b.v > a.v" if largest else "b.v < a.v"
    isf = ct in ("float", "double")
    nan = ("    int an = isnan(a.v), bn = isnan(b.v);\n"
           "    if (an || bn) { if (an && bn) return a.i <= b.i ? a : b; return an ? a : b; }\n"
           if isf else "")
    if isf:
        worst = "INFINITY" if not largest else "-INFINITY"
    else:
        worst = _LIMITS[ct][1] if not largest else _LIMITS[ct][0]
    pre = f"""
typedef struct {{ {ct} v; long i; }} {S};
inline {S} {S}_comb({S} a, {S} b) {{
{nan}    if ({better}) return a;
    if ({worse}) return b;
    return a.i <= b.i ? a : b; }}
inline {S} {S}_mk({ct} v, long i) {{ {S} c; c.v = v; c.i = i; return c; }}
"""
    return Reducer(S, f"{S}_mk(({ct}){worst}, LONG_MAX)", f"{S}_mk(v, r)", f"{S}_comb(a, b)",
                   "a.i", preamble=pre)


def reducer(op, dtype, out_dtype=None):
    """The :class:`Reducer` of the named ``op`` for input ``dtype``: ``sum``,
    ``prod``, ``mean``, ``max``, ``min``, ``logsumexp``, ``norm`` (Euclidean),
    ``sumsq`` (sum of squares), ``any``, ``all``, ``argmax``, ``argmin``
    (``out_dtype``: the output's dtype, where it matters)."""
    ct = rt.CTYPES[np.dtype(dtype)]
    isf = ct in ("float", "double")
    if np.dtype(dtype).kind == "c":
        t, sfx = cplx.PARTS[np.dtype(dtype)]
        if op in ("sum", "mean"):
            return Reducer(ct, "0", "v", "a + b", f"a / ({t})n" if op == "mean" else "a")
        if op == "prod":        # (the library's complex product)
            return Reducer(ct, f"({t})1, ({t})0", "v", f"cmul{sfx}(a, b)",
                           preamble=cplx.preamble(dtype))
        raise ValueError(f"no complex reduction {op!r}")
    if op in ("sum", "mean", "sumsq", "norm"):
        A = _acc_type(ct)
        load = f"({A})v * ({A})v" if op in ("sumsq", "norm") else f"({A})v"
        final = "a"
        if op == "norm":
            final = "sqrt(a)"
        elif op == "mean":
            i = "ulong" if np.dtype(dtype).kind == "u" else "long"   # unsigned: divide so
            final = (f"a / ({A})n" if isf else
                     f"(n == 0) ? ({i})(O)a : (({i})(O)a) / n")
        return Reducer(A, "0", load, "a + b", final)
    if op == "prod":
        A = _acc_type(ct)
        return Reducer(A, "1", f"({A})v", "a * b")
    if op in ("max", "min"):
        gt = ">" if op == "max" else "<"
        if isf:
            init = "-INFINITY" if op == "max" else "INFINITY"
            comb = f"(isnan(a) || a {gt} b) ? a : b"
        else:
            init = _LIMITS[ct][0 if op == "max" else 1]
            comb = f"(a {gt} b) ? a : b"
        return Reducer(ct, init, "v", comb)
    if op == "logsumexp":
        return _lse(ct)
    if op in ("any", "all"):
        return Reducer("uchar", "0" if op == "any" else "1", "(uchar)(v != 0)",
                       "a | b" if op == "any" else "a & b")
    if op in ("argmax", "argmin"):
        return _arg(ct, op == "argmax")
    raise ValueError(f"unknown reduction {op!r}")


# --- layout planning ----------------------------------------------------------------------

def _merge(dims):
    """Merge (size, stride) pairs where the outer one strides over the inner one."""
    out = []
    for n, s in dims:
        if out and out[-1][1] == s * n:
            out[-1] = (out[-1][0] * n, s)
        else:
            out.append((n, s))
    return out


def plan(x, axes):
    """``(kept, reduced, offset)``: merged (size, element stride) lists of the kept
    dimensions (in order: the output's C order) and of the reduced ones (ordered by
    decreasing stride, so the innermost has the smallest), and the element offset.
    Size-1 dimensions are dropped; a reduction over zero elements has ``reduced ==
    [(0, 0)]``."""
    st, off = rt.layout(x)
    shape = x.shape
    axes = range(len(shape)) if axes is None else axes
    ax = set(axes)
    kept = [(n, s) for i, (n, s) in enumerate(zip(shape, st)) if i not in ax and n != 1]
    red = [(shape[i], st[i]) for i in sorted(ax) if shape[i] != 1]
    if any(n == 0 for n, _ in red):
        return _merge(kept), [(0, 0)], off
    red.sort(key=lambda d: -d[1])
    return _merge(kept), _merge(red), off


# --- kernel sources ----------------------------------------------------------------------

def _head(red, T, O):
    return f"#define T {T}\n#define O {O}\n{red.c_functions()}"


def _kept_params(nk, nr):
    return ([f"long kd{k}" for k in range(nk)] + [f"long ks{k}" for k in range(nk)]
            + [f"long rd{k}" for k in range(nr)] + [f"long rs{k}" for k in range(nr)])


def _kept_offset(nk, idx="o"):
    """C lines: ``base`` = the element offset of output ``idx``."""
    lines = ["long base = off;"]
    if nk:
        lines.append(f"long q = {idx};")
        lines += _unravel("base", "q", "kd", "ks", nk)
    return "\n    ".join(lines)


def _unravel(acc, q, dims, strides, n):
    """C statements adding to ``acc`` the element offset of the flat index ``q`` over
    ``n`` dims (sizes ``{dims}k``, strides ``{strides}k``, the last innermost);
    ``q`` is consumed."""
    return [f"{acc} += ({q} % {dims}{k}) * {strides}{k}; {q} /= {dims}{k};" if k
            else f"{acc} += {q} * {strides}0;" for k in range(n - 1, -1, -1)]


def _loop_params(nk, nr):
    """The parameters of the loop kernels ``red_t`` and ``red_v``."""
    return (["__global O *out", "__global const T *x", "long off", "long M", "long R"]
            + _kept_params(nk, nr))


def _loop_nest(nr, inner):
    """C loops over the ``nr`` reduced dims (``p{k}``: the element offset at depth
    ``k``) around the lines ``inner(offset)`` of the innermost offset's name."""
    loops, close = [], []
    prev = "base"
    for k in range(nr):
        ind = "    " * (k + 1)
        loops.append(f"{ind}for (long j{k} = 0; j{k} < rd{k}; j{k}++) {{ "
                     f"long p{k} = {prev} + j{k} * rs{k};")
        close.append(f"{ind}}}")
        prev = f"p{k}"
    ind = "    " * (nr + 1)
    return "\n".join(loops + [ind + line for line in inner(prev)] + close[::-1])


def _src_thread(red, T, O, nk, nr):
    """``red_t``: one work item per output, nested loops over the reduced dims."""
    params = _loop_params(nk, nr)
    body = _loop_nest(nr, lambda p: [f"a = r_upd(a, x[{p}], r); r++;"])
    return (f"{_head(red, T, O)}\n__kernel void red_t({', '.join(params)}) {{\n"
            f"    long o = get_global_id(0);\n    if (o >= M) return;\n"
            f"    {_kept_offset(nk)}\n"
            f"    {red.acc} a = r_init();\n    long r = 0;\n{body}\n"
            f"    out[o] = r_final(a, R);\n}}\n")


def _src_tile(red, T, O, nk, nr, tile):
    """``red_v``: one work item per ``tile`` consecutive outputs that are consecutive
    in memory (the kept innermost dimension has stride 1 and a multiple of ``tile``
    elements): the loops over the reduced dims read ``tile`` neighbours at a time
    into ``tile`` accumulators (CPU devices: cache lines used whole, SIMD)."""
    params = _loop_params(nk, nr)
    body = _loop_nest(nr, lambda p: [f"for (int t = 0; t < TILE; t++) "
                                     f"a[t] = r_upd(a[t], x[{p} + t], r);", "r++;"])
    return (f"{_head(red, T, O)}\n#define TILE {tile}\n"
            f"__kernel void red_v({', '.join(params)}) {{\n"
            f"    long o = get_global_id(0) * TILE;\n    if (o >= M) return;\n"
            f"    {_kept_offset(nk)}\n"
            f"    {red.acc} a[TILE];\n"
            f"    for (int t = 0; t < TILE; t++) a[t] = r_init();\n    long r = 0;\n{body}\n"
            f"    for (int t = 0; t < TILE; t++) out[o + t] = r_final(a[t], R);\n}}\n")


def _red_offset(nr):
    """C expression lines: ``p`` = element offset of reduced position ``r``."""
    if nr == 0:
        return "long p = base;"
    if nr == 1:
        return "long p = base + r * rs0;"
    return " ".join(["long p = base; long t = r;"] + _unravel("p", "t", "rd", "rs", nr))


def _src_group(red, T, O, nk, nr, wg, partial, blocked):
    """``red_g``: work-group ``g`` reduces chunk ``g % P`` of output ``g / P``; with
    ``partial`` it writes the accumulator (for ``red_p``), else the result. Its work
    items stride over the chunk (coalesced reads on GPUs), or with ``blocked`` each
    reads a contiguous block of it (CPU devices: one core runs a work-group)."""
    A = red.acc
    otype = A if partial else "O"
    params = [f"__global {otype} *out", "__global const T *x", "long off", "long M", "long R",
              "long P", "long chunk"]
    params += _kept_params(nk, nr)
    write = "out[g] = sh[0];" if partial else "out[o] = r_final(sh[0], R);"
    if blocked:
        loop = ("    long sub = (chunk + WG - 1) / WG;\n"
                "    long r0 = part * chunk + lid * sub;\n"
                "    long r1 = min(min(R, (part + 1) * chunk), r0 + sub);\n"
                "    for (long r = r0; r < r1; r++) {\n")
    else:
        loop = ("    long r1 = min(R, (part + 1) * chunk);\n"
                "    for (long r = part * chunk + lid; r < r1; r += WG) {\n")
    return (f"{_head(red, T, O)}\n#define WG {wg}\n"
            f"__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))\n"
            f"void red_g({', '.join(params)}) {{\n"
            f"    __local {A} sh[WG];\n"
            f"    long g = get_group_id(0);\n    long o = g / P;\n"
            f"    long part = g - o * P;\n    int lid = get_local_id(0);\n"
            f"    {_kept_offset(nk)}\n"
            f"    {A} a = r_init();\n"
            + loop +
            f"        {_red_offset(nr)}\n"
            f"        a = r_upd(a, x[p], r);\n    }}\n"
            f"    sh[lid] = a;\n    barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int s = WG / 2; s > 0; s >>= 1) {{\n"
            f"        if (lid < s) sh[lid] = r_comb(sh[lid], sh[lid + s]);\n"
            f"        barrier(CLK_LOCAL_MEM_FENCE);\n    }}\n"
            f"    if (lid == 0) {write}\n}}\n")


def _src_partials(red, T, O):
    """``red_p``: one work item per output combines its ``P`` partial accumulators."""
    A = red.acc
    return (f"{_head(red, T, O)}\n"
            f"__kernel void red_p(__global O *out, __global const {A} *part, long M, long P, "
            f"long R) {{\n"
            f"    long o = get_global_id(0);\n    if (o >= M) return;\n"
            f"    __global const {A} *q = part + o * P;\n"
            f"    {A} a = q[0];\n"
            f"    for (long i = 1; i < P; i++) a = r_comb(a, q[i]);\n"
            f"    out[o] = r_final(a, R);\n}}\n")


def _pow2_at_least(n):
    return 1 << max(0, int(n - 1).bit_length())


def _round_up(n, m):
    return -(-n // m) * m


# --- the generic reduction ------------------------------------------------------------------

def reduce(x, axes, keepdims=False, op="sum", out_dtype=None):
    """Reduce the device array ``x`` over ``axes`` (None: all; else an iterable of
    non-negative axes) with ``op`` (a :func:`reducer` name or a :class:`Reducer`);
    a new contiguous array of ``out_dtype`` (default ``x.dtype``) shaped like
    ``x`` without the reduced axes (kept as 1 with ``keepdims``). ``x`` may be any
    strided view. Over zero elements the result is ``final(init, 0)``.

    >>> # reduce(x, (1,), op="max")                 row maxima of a matrix
    >>> # reduce(x, None, op="sum", out_dtype=np.float64)
    """
    dev = rt.device_of(x)
    out_dtype = np.dtype(x.dtype if out_dtype is None else out_dtype)
    red = op if isinstance(op, Reducer) else reducer(op, x.dtype, out_dtype)
    ax = tuple(range(x.ndim)) if axes is None else tuple(axes)
    if keepdims:
        out_shape = tuple(1 if i in ax else n for i, n in enumerate(x.shape))
    else:
        out_shape = tuple(n for i, n in enumerate(x.shape) if i not in ax)
    out = rt.empty(dev, out_shape, out_dtype)
    M = out.size
    if M == 0:
        return out
    kept, rdims, off = plan(x, ax)
    R = math.prod(n for n, _ in rdims)
    T, O = rt.CTYPES[x.dtype], rt.CTYPES[out_dtype]
    nk, nr = len(kept), len(rdims)
    kargs = [n for n, _ in kept] + [s for _, s in kept]
    rargs = [n for n, _ in rdims] + [s for _, s in rdims]
    xb = rt.buf(dev, x)

    inner_stride = rdims[-1][1] if rdims else 0
    if dev.is_gpu:
        enough = M >= dev.compute_units * 256 and inner_stride != 1
    else:
        enough = M >= dev.compute_units * 4
    tile = 0
    if not dev.is_gpu and kept and kept[-1][1] == 1 and inner_stride != 1:
        tile = next((t for t in (16, 8, 4) if kept[-1][0] % t == 0), 0)
        if M // max(tile, 1) < dev.compute_units * 2:
            tile = 0
    if tile:
        src = _src_tile(red, T, O, nk, nr, tile)
        k = rt.kernel(dev, src, "red_v", [None, None] + [np.int64] * (3 + 2 * (nk + nr)))
        rt.launch(dev, k, (M // tile,), None, out.base_data, xb, off, M, R, *kargs, *rargs)
        return out
    if R <= 32 or enough:
        src = _src_thread(red, T, O, nk, nr)
        k = rt.kernel(dev, src, "red_t", [None, None] + [np.int64] * (3 + 2 * (nk + nr)))
        rt.launch(dev, k, (M,), None, out.base_data, xb, off, M, R, *kargs, *rargs)
        return out

    # work-groups: enough of them to fill the device, P chunks per output
    target = dev.compute_units * (8 if dev.is_gpu else 4)
    maxwg = min(256 if dev.is_gpu else 64, dev.max_wg)
    maxwg = 1 << (maxwg.bit_length() - 1)
    P = max(1, min(-(-target // M), -(-R // (maxwg * 4))))
    chunk = -(-R // P)
    wg = min(maxwg, _pow2_at_least(chunk))
    chunk = _round_up(chunk, wg)
    P = -(-R // chunk)
    partial = P > 1
    src = _src_group(red, T, O, nk, nr, wg, partial, not dev.is_gpu)
    k = rt.kernel(dev, src, "red_g", [None, None] + [np.int64] * (5 + 2 * (nk + nr)))
    if partial:
        part = rt.empty(dev, (M * P * red.acc_size,), np.uint8)
        dst = part.base_data
    else:
        dst = out.base_data
    rt.launch(dev, k, (M * P * wg,), (wg,), dst, xb, off, M, R, P, chunk, *kargs, *rargs)
    if partial:
        k2 = rt.kernel(dev, _src_partials(red, T, O), "red_p",
                       [None, None, np.int64, np.int64, np.int64])
        rt.launch(dev, k2, (M,), None, out.base_data, part.base_data, M, P, R)
    return out


# --- the ops ----------------------------------------------------------------------------------



class ReduceKernels:
    """The reduction kernels: one method per family, bound to its reduction (``op``) by
    :meth:`table` with :func:`runtime.bind`."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def plain(self, op, x, axis, keepdims):
        """Sum, Prod, Mean, ReduceLogSumExp, EuclideanNorm, Any, All: ``op`` over ``axis``."""
        return reduce(x, axis, keepdims, op)

    def extreme(self, op, x, axis, keepdims):
        """Max or Min over ``axis``: an empty reduction has no identity and raises."""
        if count_reduced(x.shape, axis) == 0:
            raise empty_reduction(op, x, axis)
        return reduce(x, axis, keepdims, op)

    def arg(self, op, x, axis, output_type):
        """ArgMax or ArgMin along ``axis``, as ``output_type`` (an empty axis raises)."""
        if x.shape[axis] == 0:
            raise empty_reduction(op, x, (axis,))
        return reduce(x, (axis,), False, op, np.dtype(output_type.np))

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        num, flt, num_c = NUMERIC, FLOATS, NUMERIC + cplx.COMPLEX
        families = {   # op name: (family, reduction, dtypes)
            "Sum": (self.plain, "sum", num_c),
            "Prod": (self.plain, "prod", num_c),
            "Mean": (self.plain, "mean", num_c),
            "Max": (self.extreme, "max", num),
            "Min": (self.extreme, "min", num),
            "ReduceLogSumExp": (self.plain, "logsumexp", flt),
            "EuclideanNorm": (self.plain, "norm", flt),
            "Any": (self.plain, "any", BOOL),
            "All": (self.plain, "all", BOOL),
            "ArgMax": (self.arg, "argmax", num),
            "ArgMin": (self.arg, "argmin", num),
        }
        return {name: KernelSpec(self.rt.bind(family, name.lower(), op), dtypes=dtypes)
                for name, (family, op, dtypes) in families.items()}


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return ReduceKernels(ctx).table()
