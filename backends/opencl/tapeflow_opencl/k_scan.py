"""Scans (``Cumsum``, ``Cumprod``), a stable sort (``ArgSort``), binary search
(``SearchSorted``) and the ops whose output size depends on the data (``NonZero``,
``UniqueAll``) on OpenCL (:class:`ScanKernels`).

One work-item per *row*: the elements along the op's axis for one position of the
other axes (``outer x inner`` rows of ``n`` elements, element ``j`` of row
``(o, i)`` at ``(o * n + j) * inner + i`` in the contiguous input). A row is scanned
sequentially, sorted by a bottom-up merge sort through a scratch buffer of indices
(stable: equal keys keep their order; descending compares the other way round and
is stable too), searched by bisection. Simple and exact; a work-group scan or a
bitonic/radix sort would be faster for long rows.

Float16 scans accumulate in float; NaN sorts last ascending and first descending
(the CPU kernel's order: NumPy's argsort of the flipped array).

``NonZero`` counts per chunk, scans the counts and writes each chunk's coordinates
from its offset (row-major order, NumPy's ``argwhere``). ``UniqueAll`` sorts the
flattened input (stable), marks where a run of equal values starts (NaN differs from
everything, so every NaN is its own value, as the standard says), numbers the runs
with a scan and scatters values, first indices, counts and the inverse. Both read
one number back to the host — the output's size — as CuPy's kernels do.
"""

from __future__ import annotations

import numpy as np

from tapeflow.plugins import KernelSpec

from . import cplx
from . import runtime as rt
from .runtime import NUMERIC

_SCAN = """{PRE}
__kernel void scan(__global {T} *out, __global const {T} *x, const long n, const long inner,
                   const int exclusive, const int reverse) {{
    const long r = get_global_id(0);
    const long o = r / inner, i = r % inner;
    {A} acc = {INIT};
    for (long k = 0; k < n; ++k) {{
        const long j = reverse ? n - 1 - k : k;
        const long at = (o * n + j) * inner + i;
        const {A} v = ({A})x[at];
        if (exclusive) {{ out[at] = ({T})acc; acc = {COMB}; }}
        else {{ acc = {COMB}; out[at] = ({T})acc; }}
    }}
}}
"""

_SORT = """
// a < b in the sort order; NaN after everything (ascending)
inline int before(const {T} a, const {T} b, const int desc) {{
    {NAN_RULE}
    return desc ? (a > b) : (a < b);
}}
__kernel void argsort(__global long *out, __global long *tmp, __global const {T} *x,
                      const long n, const long inner, const int desc) {{
    const long r = get_global_id(0);
    const long o = r / inner, i = r % inner;
    #define KEY(j) x[(o * n + (j)) * inner + i]
    __global long *a = out + r * n;           // row r's indices, then scratch
    __global long *b = tmp + r * n;
    for (long j = 0; j < n; ++j) a[j] = j;
    for (long w = 1; w < n; w *= 2) {{
        for (long lo = 0; lo < n; lo += 2 * w) {{
            long mid = min(lo + w, n), hi = min(lo + 2 * w, n);
            long p = lo, q = mid, k = lo;
            while (p < mid && q < hi) {{
                // take from the right run only when strictly before: stable
                if (before(KEY(a[q]), KEY(a[p]), desc)) b[k++] = a[q++];
                else b[k++] = a[p++];
            }}
            while (p < mid) b[k++] = a[p++];
            while (q < hi) b[k++] = a[q++];
        }}
        __global long *t = a; a = b; b = t;
    }}
    if (a != out + r * n)
        for (long j = 0; j < n; ++j) out[r * n + j] = a[j];
    #undef KEY
}}
"""

# LT: NumPy's order, NaN after everything (a sorted float array ends with its NaNs)
_SEARCH = """
{LT}
__kernel void search(__global long *out, __global const {T} *a, __global const {T} *v,
                     const long n, const int right) {{
    const long g = get_global_id(0);
    const {T} x = v[g];
    long lo = 0, hi = n;
    while (lo < hi) {{
        const long mid = (lo + hi) / 2;
        const int go = right ? !LT(x, a[mid]) : LT(a[mid], x);
        if (go) lo = mid + 1; else hi = mid;
    }}
    out[g] = lo;
}}
"""


_NONZERO = """
__kernel void count(__global long *counts, __global const {T} *x, const long size,
                    const long chunk) {{
    const long g = get_global_id(0);
    const long end = min(size, (g + 1) * chunk);
    long c = 0;
    for (long f = g * chunk; f < end; ++f) c += x[f] != 0;
    counts[g] = c;
}}
__kernel void coords(__global long *out, __global const long *incl,
                     __global const long *counts, __global const {T} *x,
                     __global const long *shape, const long size, const long chunk,
                     const int nd) {{
    const long g = get_global_id(0);
    const long end = min(size, (g + 1) * chunk);
    long pos = incl[g] - counts[g];
    for (long f = g * chunk; f < end; ++f) {{
        if (x[f] == 0) continue;
        long rest = f;
        for (int d = nd - 1; d >= 0; --d) {{
            out[pos * nd + d] = rest % shape[d];
            rest /= shape[d];
        }}
        ++pos;
    }}
}}
"""

_UNIQUE = """
__kernel void starts(__global long *flag, __global const {T} *x, __global const long *perm) {{
    const long i = get_global_id(0);
    flag[i] = i == 0 || x[perm[i]] != x[perm[i - 1]];
}}
__kernel void scatter(__global long *first, __global long *inverse,
                      __global const long *flag, __global const long *group,
                      __global const long *perm) {{
    const long i = get_global_id(0);
    if (flag[i]) first[group[i] - 1] = i;
    inverse[perm[i]] = group[i] - 1;
}}
__kernel void gather(__global {T} *values, __global long *index, __global long *counts,
                     __global const {T} *x, __global const long *perm,
                     __global const long *first, const long k, const long size) {{
    const long g = get_global_id(0);
    const long at = first[g];
    values[g] = x[perm[at]];
    index[g] = perm[at];
    counts[g] = (g + 1 < k ? first[g + 1] : size) - at;
}}
"""

#: elements per NonZero work-item at least (fewer, longer chunks than elements)
_NONZERO_CHUNK = 256


def _rows(shape, axis):
    n = shape[axis]
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return outer, n, inner


def _input(a):
    """``a`` contiguous from its buffer's first element (tapeflow_opencl.kernel_input)."""
    if a.offset == 0:
        c = rt.contiguous(a)
        if c.offset == 0:
            return c
    return rt.elementwise("x0", a.dtype, a, out_shape=a.shape)


def _scan(x, op, init, axis, exclusive, reverse):
    dev = rt.device_of(x)
    out = rt.empty(dev, x.shape, x.dtype)
    outer, n, inner = _rows(x.shape, axis)
    if out.size == 0:
        return out
    t = rt.CTYPES[np.dtype(x.dtype)]
    acc = "float" if t == "half" else t
    pre, comb = "", f"acc {op} v"
    if np.dtype(x.dtype).kind == "c":       # float2/double2: the complex library's product
        part, sfx = cplx.PARTS[np.dtype(x.dtype)]
        init = f"({t})(({part}){init}, ({part})0)"
        if op == "*":
            pre, comb = cplx.preamble(x.dtype), f"cmul{sfx}(acc, v)"
    src = _SCAN.format(T=t, A=acc, COMB=comb, INIT=init, PRE=pre)
    kern = rt.kernel(dev, src, "scan", [None, None, np.int64, np.int64, np.int32, np.int32])
    rt.launch(dev, kern, (outer * inner,), None, out.data, _input(x).data, n, inner,
              int(bool(exclusive)), int(bool(reverse)))
    return out


def _last(a):
    """The last element of the 1-D device array ``a``, on the host."""
    return int(rt.download(a[a.shape[0] - 1:])[0])


class ScanKernels:
    """The scan, sort and search kernels: one method each (:meth:`scan` bound to its
    operator for Cumsum and Cumprod); :meth:`table` maps op names to them."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def scan(self, op, init, x, axis, exclusive, reverse):
        """Cumsum / Cumprod: the inclusive or exclusive scan of ``op`` along ``axis``."""
        return _scan(x, op, init, axis, exclusive, reverse)

    def argsort(self, x, axis, descending):
        """ArgSort along ``axis``: a stable merge sort per row (NaN last ascending)."""
        dev = self.rt.device_of(x)
        outer, n, inner = _rows(x.shape, axis)
        rows = outer * inner
        out = self.rt.empty(dev, (rows, n), np.int64)
        if rows * n == 0:
            return self.rt.empty(dev, x.shape, np.int64)
        tmp = self.rt.empty(dev, (rows, n), np.int64)
        t = self.rt.CTYPES[np.dtype(x.dtype)]
        nan_rule = ("if (isnan(a) || isnan(b)) return desc ? (isnan(a) && !isnan(b)) "
                    ": (!isnan(a) && isnan(b));") if np.dtype(x.dtype).kind == "f" else ""
        src = _SORT.format(T=t, NAN_RULE=nan_rule)
        kern = self.rt.kernel(dev, src, "argsort", [None, None, None, np.int64, np.int64, np.int32])
        self.rt.launch(dev, kern, (rows,), None, out.data, tmp.data, _input(x).data, n, inner,
                       int(bool(descending)))
        # rows are (outer, inner) with n along them: back to the input's layout
        res = out.reshape(outer, inner, n)
        perm = [0, 2, 1]
        moved = self.rt.contiguous(res.transpose(perm))            # (outer, n, inner)
        return moved.reshape(x.shape)

    def searchsorted(self, a, v, side):
        """SearchSorted: the insertion points of ``v`` in the sorted ``a``."""
        dev = self.rt.device_of(a)
        out = self.rt.empty(dev, v.shape, np.int64)
        if out.size == 0:
            return out
        t = self.rt.CTYPES[np.dtype(a.dtype)]
        lt = ("#define LT(p, q) ((p) < (q) || (!isnan(p) && isnan(q)))"
              if np.dtype(a.dtype).kind == "f" else "#define LT(p, q) ((p) < (q))")
        kern = self.rt.kernel(dev, _SEARCH.format(T=t, LT=lt), "search",
                              [None, None, None, np.int64, np.int32])
        self.rt.launch(dev, kern, (int(v.size),), None, out.data, _input(a).data, _input(v).data,
                       int(a.shape[0]), int(side == "right"))
        return out

    def nonzero(self, x):
        """NonZero: per-chunk counts, their scan, then each chunk writes its coordinates."""
        dev = self.rt.device_of(x)
        size, nd = int(x.size), x.ndim
        if size == 0:
            return self.rt.empty(dev, (0, nd), np.int64)
        t = self.rt.CTYPES[np.dtype(x.dtype)]
        chunk = max(_NONZERO_CHUNK, -(-size // 4096))
        groups = -(-size // chunk)
        flat = _input(x)
        counts = self.rt.empty(dev, (groups,), np.int64)
        src = _NONZERO.format(T=t)
        self.rt.launch(dev, self.rt.kernel(dev, src, "count", [None, None, np.int64, np.int64]),
                       (groups,), None, counts.data, flat.data, size, chunk)
        incl = _scan(counts, "+", "0", 0, False, False)
        out = self.rt.empty(dev, (_last(incl), nd), np.int64)
        if out.size:
            shape = self.rt.upload(dev, np.asarray(x.shape, np.int64))
            self.rt.launch(dev, self.rt.kernel(dev, src, "coords", [None, None, None, None, None,
                                                                    np.int64, np.int64, np.int32]),
                           (groups,), None, out.data, incl.data, counts.data, flat.data,
                           shape.data, size, chunk, nd)
        return out

    def unique_all(self, x):
        """UniqueAll: values, first indices, inverse and counts from one stable sort."""
        dev = self.rt.device_of(x)
        size = int(x.size)
        if size == 0:
            return (self.rt.empty(dev, (0,), x.dtype), self.rt.empty(dev, (0,), np.int64),
                    self.rt.empty(dev, x.shape, np.int64), self.rt.empty(dev, (0,), np.int64))
        flat = _input(x).reshape(size)
        perm = self.argsort(flat, 0, False)
        src = _UNIQUE.format(T=self.rt.CTYPES[np.dtype(x.dtype)])
        flag = self.rt.empty(dev, (size,), np.int64)
        self.rt.launch(dev, self.rt.kernel(dev, src, "starts"), (size,), None, flag.data, flat.data,
                       perm.data)
        group = _scan(flag, "+", "0", 0, False, False)            # 1-based run numbers
        k = _last(group)
        first = self.rt.empty(dev, (k,), np.int64)
        inverse = self.rt.empty(dev, (size,), np.int64)
        self.rt.launch(dev, self.rt.kernel(dev, src, "scatter"), (size,), None, first.data,
                       inverse.data, flag.data, group.data, perm.data)
        values = self.rt.empty(dev, (k,), x.dtype)
        index = self.rt.empty(dev, (k,), np.int64)
        counts = self.rt.empty(dev, (k,), np.int64)
        self.rt.launch(dev, self.rt.kernel(dev, src, "gather", [None] * 6 + [np.int64, np.int64]),
                       (k,), None, values.data, index.data, counts.data, flat.data, perm.data,
                       first.data, k, size)
        return values, index, inverse.reshape(x.shape), counts

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        ints = tuple(d for d in NUMERIC if not d.startswith("float"))
        floats = tuple(d for d in NUMERIC if d.startswith("float"))
        bind = self.rt.bind
        return {
            "Cumsum": KernelSpec(bind(self.scan, "cumsum", "+", "0"),
                                 dtypes=floats + ints + cplx.COMPLEX),
            "Cumprod": KernelSpec(bind(self.scan, "cumprod", "*", "1"),
                                  dtypes=floats + ints + cplx.COMPLEX),
            "ArgSort": KernelSpec(self.argsort, dtypes=floats + ints),
            "SearchSorted": KernelSpec(self.searchsorted, dtypes=floats + ints),
            "NonZero": KernelSpec(self.nonzero, dtypes=floats + ints + ("bool",)),
            "UniqueAll": KernelSpec(self.unique_all, dtypes=floats + ints + ("bool",)),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return ScanKernels(ctx).table()
