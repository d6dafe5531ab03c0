"""Gather and scatter kernels (:class:`IndexKernels`): ``GatherV2``, ``GatherNd``,
``ScatterNd``, ``UnsortedSegmentSum``, and ``SparseTensorDenseMatMul``
(``tf.sparse.sparse_dense_matmul``: the entries are sorted by output row on the host,
stably, into CSR row offsets and a permutation; one work item per output element walks
only its row's entries -- no atomics, deterministic, in the CPU kernel's entry order).

* **Gathers** are one generated kernel per (dtype, index dtype, rank, index depth):
  one work item per output element walks the output shape with the strides of
  ``params`` and ``indices`` (dimensions merged where both allow it, so a plain
  embedding lookup indexes linearly) and adds ``sum_c indices[..., c] *
  params_stride_c``. ``GatherV2`` is the depth-1 case with the gathered axis
  anywhere (``batch_dims`` are dimensions both operands walk).
* **Bounds checks** run on the device first: a kernel over the index vectors
  ``atomic_min``-s the flat position of every bad one into a 1-int flag, then one
  4-byte download. Only on failure are the bad index values downloaded, to raise
  the CPU backend's exact ``InvalidArgumentError`` message. The gather is enqueued
  after the check passed, so it never reads out of bounds.
* **Scatters** (``ScatterNd``, ``UnsortedSegmentSum``) are deterministic and
  atomic-free: a kernel turns each index vector into its output row (a 64-bit key,
  all ones for dropped negative segment ids) and checks it; :func:`stable_argsort_u64`
  sorts the keys stably; then one work item per output element binary-searches its
  row's run in the sorted keys and sums the run in update order. The sums are
  therefore bit for bit NumPy's ``add.at`` (the CPU backend), at the cost of a sort
  (one O(n^2) rank launch for short index lists, a bitonic network otherwise)
  where float atomics would take one launch with a run-to-run varying order.
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .runtime import NUMERIC

ALL = NUMERIC + ("bool",)

_I32_MAX = 2**31 - 1
#: index lists up to this long are sorted by one O(n^2) rank launch; longer ones by a
#: bitonic network of global-memory passes
_RANK_SORT_MAX = 2048


def _pos(flat, shape):
    """TF's SliceDebugString: '' for scalars, '[3]' or '[1,2]' (as on ``cpu``)."""
    if not shape:
        return ""
    return "[" + ",".join(str(int(i)) for i in np.unravel_index(int(flat), shape)) + "]"


def _int_indices(indices, what="indices"):
    if indices.dtype.kind not in "iu":
        raise InvalidArgumentError(f"{what} must be int32 or int64, got {indices.dtype}")


def _grid(dev, n):
    """Global size for ``n`` work items (the kernels bound-check ``i < n``)."""
    return (max(int(n), 1),)


# --- index vector checks ------------------------------------------------------------------

def _flag_type(n):
    return ("int", np.int32, _I32_MAX) if n < _I32_MAX else ("long", np.int64, 2**63 - 1)


def _check_source(ict, nd, k, neg_ok, ft):
    """Kernel ``chk``: flag = min position of an index vector outside its bounds."""
    params = [f"__global const {ict} *ix", "long o_i", "long n", "long sl"]
    params += [f"long b{c}" for c in range(k)]
    params.append(f"__global {ft} *flag")
    params += rt.strided_args_decl(nd, ["i"])
    lines = ["int bad = 0;"]
    for c in range(k):
        lines.append(f"{{ long v = (long)ix[off_i + {c} * sl]; "
                     + (f"bad |= (v >= b{c}); }}" if neg_ok else
                        f"bad |= (v < 0) | (v >= b{c}); }}"))
    atomic = "atomic_min" if ft == "int" else "atom_min"
    pragma = ("" if ft == "int" else
              "#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable\n")
    return (f"{pragma}__kernel void chk({', '.join(params)}) {{\n"
            "    long i = get_global_id(0);\n    if (i >= n) return;\n"
            "    long off_i = o_i;\n    " + rt.index_code(nd, ["i"]) + "\n    "
            + "\n    ".join(lines) + f"\n    if (bad) {atomic}(flag, ({ft})i);\n}}\n")


def _vector_grid(indices, vectors):
    """(shape, merged shape, merged strides, offset, last stride) of the index vectors
    of ``indices``: its last dimension when ``vectors``, else every element is a
    1-vector (GatherV2's and the segment ids' case)."""
    st, off = rt.layout(indices)
    if vectors:
        shape, vst, sl = indices.shape[:-1], st[:-1], st[-1]
    else:
        shape, vst, sl = indices.shape, st, 0
    mshape, (mst,) = rt.merge_dims(shape, [list(vst)])
    return shape, mshape, mst, off, sl


def _first_bad(indices, k, bounds, neg_ok=False):
    """Flat position of the first index vector outside ``bounds`` (or None); one
    check launch and one 4-byte download."""
    dev = rt.device_of(indices)
    shape, mshape, mst, off, sl = _vector_grid(indices, bool(k))
    n = math.prod(shape)
    if n == 0:
        return None
    nd = len(mshape)
    ft, fdt, fmax = _flag_type(n)
    src = _check_source(rt.CTYPES[indices.dtype], nd, len(bounds), neg_ok, ft)
    sd = [None, np.int64, np.int64, np.int64] + [np.int64] * len(bounds) + [None]
    sd += [np.int64] * (nd - 1 + nd)
    k_ = rt.kernel(dev, src, "chk", sd)
    flag = rt.upload(dev, np.array([fmax], fdt))
    rt.launch(dev, k_, _grid(dev, n), None, rt.buf(dev, indices), off, n, sl,
              *[int(b) for b in bounds], flag.base_data, *mshape[1:], *mst)
    pos = int(rt.download(flag)[0])
    return None if pos == fmax else pos


def _vector_at(indices, k, pos):
    """The index vector at flat position ``pos`` (a tiny download, error path only)."""
    shape = indices.shape[:-1] if k else indices.shape
    st, off = rt.layout(indices)
    coords = np.unravel_index(pos, shape) if shape else ()
    o = off + sum(int(c) * s for c, s in zip(coords, st))
    if k:
        v = rt.view(indices, (k,), (st[-1],), o)
    else:
        v = rt.view(indices, (1,), (1,), o)
    return [int(x) for x in rt.download(v)]


def _check_range(indices, n, what="indices"):
    """Every index in [0, n), else the CPU backend's message for the first bad one."""
    pos = _first_bad(indices, 0, (n,))
    if pos is not None:
        v = _vector_at(indices, 0, pos)[0]
        raise InvalidArgumentError(f"{what}{_pos(pos, indices.shape)} = {v} is not in [0, {n})")


def _check_nd(indices, bound, what):
    """Index vectors (last dim of indices) inside ``bound`` (a shape)."""
    k = len(bound)
    if indices.size == 0 or k == 0:
        return
    pos = _first_bad(indices, k, bound)
    if pos is not None:
        vec = ", ".join(str(v) for v in _vector_at(indices, k, pos))
        raise InvalidArgumentError(
            f"indices{_pos(pos, indices.shape[:-1])} = [{vec}] does not index into {what} "
            f"[{','.join(str(b) for b in bound)}]")


# --- gathers -----------------------------------------------------------------------------------

def _gather_source(ct, ict, nd, k):
    """Kernel ``gather`` over a 2-d range: dimension 0 walks the innermost (merged)
    output dimension, dimension 1 the others (no division per element)."""
    params = [f"__global {ct} *out", f"__global const {ct} *p", "long o_p",
              f"__global const {ict} *ix", "long o_i", "long inner", "long outer", "long sl"]
    params += [f"long pk{c}" for c in range(k)]
    params += ["long sp_in", "long si_in"] + rt.strided_args_decl(nd - 1, ["p", "i"])
    terms = " + ".join(f"(long)ix[off_i + {c} * sl] * pk{c}" for c in range(k))
    return (f"__kernel void gather({', '.join(params)}) {{\n"
            "    long j = get_global_id(0), i = get_global_id(1);\n"
            "    if (j >= inner || i >= outer) return;\n"
            "    long off_p = o_p + j * sp_in, off_i = o_i + j * si_in;\n    "
            + rt.index_code(nd - 1, ["p", "i"]) + "\n"
            f"    off_p += {terms};\n    out[i * inner + j] = p[off_p];\n}}\n")


def _gather(params, indices, out_dims, k, pk, sl):
    """The generic gather: ``out_dims`` lists ``(size, params stride, indices stride)``
    per output dimension; the element read is ``params[o_p + walk + sum_c
    indices[o_i + walk + c * sl] * pk[c]]``."""
    dev = rt.device_of(params)
    shape = tuple(d[0] for d in out_dims)
    out = rt.empty(dev, shape, params.dtype)
    n = out.size
    if n == 0:
        return out
    _, op = rt.layout(params)
    _, oi = rt.layout(indices)
    mshape, (mp, mi) = rt.merge_dims(shape, [[d[1] for d in out_dims],
                                             [d[2] for d in out_dims]])
    if not mshape:
        mshape, mp, mi = (1,), [0], [0]
    nd = len(mshape)
    inner = mshape[-1]
    outer = n // inner
    src = _gather_source(rt.CTYPES[params.dtype], rt.CTYPES[indices.dtype], nd, k)
    sd = [None, None, np.int64, None, np.int64, np.int64, np.int64, np.int64] + [np.int64] * k
    sd += [np.int64] * (2 + (nd - 2 if nd > 1 else 0) + 2 * (nd - 1))
    kern = rt.kernel(dev, src, "gather", sd)
    rt.launch(dev, kern, (inner, outer), None, out.base_data, rt.buf(dev, params), op,
              rt.buf(dev, indices), oi, inner, outer, sl, *pk, mp[-1], mi[-1],
              *mshape[1:-1], *mp[:-1], *mi[:-1])
    return out


def gather_axis(params, indices, axis=0, batch_dims=0, check=True):
    """``GatherV2``'s kernel, public for other kernel modules (``check=False`` skips
    the bounds check for indices known to be valid, e.g. a permutation)."""
    n = params.shape[axis]
    if check:
        _check_range(indices, n)
    b = batch_dims
    pst, _ = rt.layout(params)
    ist, _ = rt.layout(indices)
    dims = []
    for d in range(b):
        dims.append((params.shape[d], pst[d], ist[d]))
    for d in range(b, axis):
        dims.append((params.shape[d], pst[d], 0))
    for d in range(b, indices.ndim):
        dims.append((indices.shape[d], 0, ist[d]))
    for d in range(axis + 1, params.ndim):
        dims.append((params.shape[d], pst[d], 0))
    return _gather(params, indices, dims, 1, (pst[axis],), 0)


# --- sorting -------------------------------------------------------------------------------------

_RANK_SRC = """
__kernel void rank_sort(__global const ulong *keys, long o_k, long n,
                        __global ulong *skeys, __global long *perm) {
    long i = get_global_id(0);
    if (i >= n) return;
    ulong ki = keys[o_k + i];
    long r = 0;
    for (long j = 0; j < n; ++j) {
        ulong kj = keys[o_k + j];
        r += (kj < ki) | ((kj == ki) & (j < i));
    }
    skeys[r] = ki;
    perm[r] = i;
}
"""

_BITONIC_SRC = """
#define GT(ka, va, kb, vb) (((ka) > (kb)) | (((ka) == (kb)) & ((va) > (vb))))

__kernel void bitonic_init(__global const ulong *keys, long o_k, long n, long npad,
                           __global ulong *K, __global long *V) {
    long i = get_global_id(0);
    if (i >= npad) return;
    K[i] = (i < n) ? keys[o_k + i] : (ulong)0xFFFFFFFFFFFFFFFFUL;
    V[i] = i;
}

/* one compare-exchange pass of the network in global memory (stride >= 2 W) */
__kernel void bitonic_step(__global ulong *K, __global long *V, long size, long stride) {
    long t = get_global_id(0);
    long i = (t / stride) * 2 * stride + (t % stride);
    long j = i + stride;
    ulong ki = K[i], kj = K[j];
    long vi = V[i], vj = V[j];
    if (GT(ki, vi, kj, vj) == ((i & size) == 0)) { K[i] = kj; K[j] = ki; V[i] = vj; V[j] = vi; }
}

/* the passes with stride < 2 W in local memory, each group owning 2 W elements:
   every size from 2 to `size` (first call, size = 2 W), or the strides below 2 W of
   one larger size */
__kernel void bitonic_local(__global ulong *K, __global long *V, long size, int all_sizes,
                            __local ulong *lk, __local long *lv) {
    const long w = get_local_size(0), l = get_local_id(0);
    const long base = get_group_id(0) * 2 * w;
    lk[l] = K[base + l]; lv[l] = V[base + l];
    lk[l + w] = K[base + l + w]; lv[l + w] = V[base + l + w];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long sz = all_sizes ? 2 : size; sz <= size; sz <<= 1) {
        for (long stride = (sz < 2 * w ? sz : 2 * w) / 2; stride >= 1; stride >>= 1) {
            long i = (l / stride) * 2 * stride + (l % stride), j = i + stride;
            ulong ki = lk[i], kj = lk[j];
            long vi = lv[i], vj = lv[j];
            if (GT(ki, vi, kj, vj) == (((base + i) & sz) == 0)) {
                lk[i] = kj; lk[j] = ki; lv[i] = vj; lv[j] = vi;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    K[base + l] = lk[l]; V[base + l] = lv[l];
    K[base + l + w] = lk[l + w]; V[base + l + w] = lv[l + w];
}
"""


def stable_argsort_u64(keys):
    """``(sorted keys, permutation)`` of a contiguous 1-d ``uint64`` device array:
    ``perm`` (int64) is NumPy's ``argsort(keys, kind="stable")``. Ties are broken by
    position, so any sorting network gives the stable order. Short arrays: one rank
    launch (O(n^2) work, one pass); longer: a bitonic network over ``(key, position)``
    padded to a power of two, the passes of strides below two work-groups' width done
    in local memory (one launch per merge size, plus one global pass per larger
    stride)."""
    dev = rt.device_of(keys)
    n = keys.size
    _, ok = rt.layout(keys)
    if n <= _RANK_SORT_MAX:
        skeys = rt.empty(dev, (n,), np.uint64)
        perm = rt.empty(dev, (n,), np.int64)
        if n:
            k = rt.kernel(dev, _RANK_SRC, "rank_sort", [None, np.int64, np.int64, None, None])
            rt.launch(dev, k, _grid(dev, n), None, keys.base_data, ok, n, skeys.base_data,
                      perm.base_data)
        return skeys, perm
    npad = 1 << (n - 1).bit_length()
    K = rt.empty(dev, (npad,), np.uint64)
    V = rt.empty(dev, (npad,), np.int64)
    init = rt.kernel(dev, _BITONIC_SRC, "bitonic_init",
                     [None, np.int64, np.int64, np.int64, None, None])
    step = rt.kernel(dev, _BITONIC_SRC, "bitonic_step", [None, None, np.int64, np.int64])
    local = rt.kernel(dev, _BITONIC_SRC, "bitonic_local",
                      [None, None, np.int64, np.int32, None, None])
    rt.launch(dev, init, (npad,), None, keys.base_data, ok, n, npad, K.base_data, V.base_data)
    w = min(256, dev.max_wg, npad // 2, max(dev.local_mem // 32, 1))
    w = 1 << (w.bit_length() - 1)
    lk, lv = rt.cl().LocalMemory(2 * w * 8), rt.cl().LocalMemory(2 * w * 8)
    half = npad // 2
    rt.launch(dev, local, (half,), (w,), K.base_data, V.base_data, 2 * w, 1, lk, lv)
    size = 4 * w
    while size <= npad:
        stride = size // 2
        while stride >= 2 * w:
            rt.launch(dev, step, (half,), None, K.base_data, V.base_data, size, stride)
            stride //= 2
        rt.launch(dev, local, (half,), (w,), K.base_data, V.base_data, size, 0, lk, lv)
        size *= 2
    return rt.view(K, (n,), (1,), 0), rt.view(V, (n,), (1,), 0)


# --- scatters ------------------------------------------------------------------------------------

_DROP = 0xFFFFFFFFFFFFFFFF


def _keys_source(ict, nd, k, segments, ft):
    """Kernel ``keys``: the output row of each index vector (all ones: dropped), and
    the flag of the first out-of-bounds one."""
    params = ["__global ulong *keys", f"__global const {ict} *ix", "long o_i", "long n",
              "long sl"]
    params += [f"long b{c}" for c in range(k)] + [f"long r{c}" for c in range(k)]
    params.append(f"__global {ft} *flag")
    params += rt.strided_args_decl(nd, ["i"])
    lines = ["int bad = 0, drop = 0;", "ulong key = 0;"]
    for c in range(k):
        lines.append(f"{{ long v = (long)ix[off_i + {c} * sl]; "
                     + ("drop |= (v < 0); bad |= (v >= b{c}); " if segments else
                        "bad |= (v < 0) | (v >= b{c}); ").format(c=c)
                     + f"key += (ulong)v * (ulong)r{c}; }}")
    atomic = "atomic_min" if ft == "int" else "atom_min"
    pragma = ("" if ft == "int" else
              "#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable\n")
    return (f"{pragma}__kernel void keys({', '.join(params)}) {{\n"
            "    long i = get_global_id(0);\n    if (i >= n) return;\n"
            "    long off_i = o_i;\n    " + rt.index_code(nd, ["i"]) + "\n    "
            + "\n    ".join(lines) + "\n"
            f"    if (bad) {atomic}(flag, ({ft})i);\n"
            "    keys[i] = (bad | drop) ? (ulong)0xFFFFFFFFFFFFFFFFUL : key;\n}\n")


def _row_keys(indices, k, bounds, segments):
    """(keys, first bad position or None) for the index vectors of ``indices``."""
    dev = rt.device_of(indices)
    shape, mshape, mst, off, sl = _vector_grid(indices, not segments)
    n = math.prod(shape)
    keys = rt.empty(dev, (n,), np.uint64)
    if n == 0:
        return keys, None
    nd = len(mshape)
    rows = [math.prod(bounds[c + 1:]) for c in range(len(bounds))]
    ft, fdt, fmax = _flag_type(n)
    src = _keys_source(rt.CTYPES[indices.dtype], nd, len(bounds), segments, ft)
    sd = [None, None, np.int64, np.int64, np.int64] + [np.int64] * (2 * len(bounds)) + [None]
    sd += [np.int64] * (nd - 1 + nd)
    kern = rt.kernel(dev, src, "keys", sd)
    flag = rt.upload(dev, np.array([fmax], fdt))
    rt.launch(dev, kern, _grid(dev, n), None, keys.base_data, rt.buf(dev, indices), off, n, sl,
              *[int(b) for b in bounds], *rows, flag.base_data, *mshape[1:], *mst)
    pos = int(rt.download(flag)[0])
    return keys, (None if pos == fmax else pos)


_SEGSUM_SRC = """
__kernel void segsum(__global T *out, __global const T *upd, long o_u,
                     __global const ulong *skeys, __global const long *perm,
                     long m, long q_n, long total) {
    long g = get_global_id(0);
    if (g >= total) return;
    long r = g / q_n, q = g - r * q_n;
    ulong key = (ulong)r;
    long lo = 0, hi = m;
    while (lo < hi) {
        long mid = (lo + hi) >> 1;
        if (skeys[mid] < key) lo = mid + 1; else hi = mid;
    }
    T acc = (T)0;
    for (long s = lo; s < m && skeys[s] == key; ++s)
        acc = (T)(acc + upd[o_u + perm[s] * q_n + q]);
    out[g] = acc;
}
"""


def _segment_reduce(keys, updates, out_shape):
    """``out`` (rows x Q) = the sums of the update rows per key, in update order."""
    dev = rt.device_of(updates)
    out = rt.empty(dev, out_shape, updates.dtype)
    total = out.size
    if total == 0:
        return out
    rows = out_shape[0] if out_shape else 1
    q_n = total // max(rows, 1)
    m = keys.size
    upd = rt.contiguous(updates)
    _, ou = rt.layout(upd)
    skeys, perm = stable_argsort_u64(keys)
    ct = rt.CTYPES[updates.dtype]
    src = f"#define T {ct}\n" + _SEGSUM_SRC
    kern = rt.kernel(dev, src, "segsum", [None, None, np.int64, None, None, np.int64,
                                          np.int64, np.int64])
    rt.launch(dev, kern, _grid(dev, total), None, out.base_data, rt.buf(dev, upd), ou,
              rt.buf(dev, skeys), rt.buf(dev, perm), m, q_n, total)
    return out


# --- ops -----------------------------------------------------------------------------------------

def _zeros(dev, shape, dtype):
    """A new zero-filled array (one fill command)."""
    out = rt.empty(dev, shape, dtype)
    if out.nbytes:
        rt.cl().enqueue_fill_buffer(dev.queue, out.base_data, np.uint8(0), 0, out.nbytes)
    return out


# --- SparseTensorDenseMatMul (tf.sparse.sparse_dense_matmul) -------------------------------

def _spmm_src(dtype):
    """One work item per output element: it walks its row's entries (``perm[off[row]]``
    to ``perm[off[row + 1] - 1]``, the entries sorted stably by row on the host) and adds
    them (atomic-free and deterministic; the CPU kernel's ``add.at`` sums in the same
    entry order). O(M * N * NNZ / M) work instead of O(M * N * NNZ)."""
    dt = np.dtype(dtype)
    t = rt.CTYPES[dt]
    acc = t if dt.kind == "f" else ("ulong" if dt.itemsize == 8 else "uint")
    params = [f"__global {t} *out", "__global const long *ix", "long o_i", "long s_e",
              "long s_r", "long s_c", f"__global const {t} *pv", "long o_v", "long s_v",
              f"__global const {t} *pb", "long o_b", "long sbk", "long sbn", "long M",
              "long N", "__global const long *off", "__global const long *perm"]
    return f"""
__kernel void spmm({', '.join(params)}) {{
    long col = get_global_id(0), row = get_global_id(1);
    if (col >= N || row >= M) return;
    {acc} s = ({acc})(0);
    for (long p = off[row]; p < off[row + 1]; p++) {{
        long e = perm[p];
        long c = ix[o_i + e * s_e + s_c];
        {t} p = pv[o_v + e * s_v] * pb[o_b + c * sbk + col * sbn];
        s += ({acc})p;
    }}
    out[row * N + col] = ({t})s;
}}
"""


_L = np.int64


def _sparse_dense_matmul(a_indices, a_values, b, a_shape, adjoint_a, adjoint_b):
    """SparseTensorDenseMatMul: the indices checked on the host (one small download),
    then the entries sorted stably by output row (CSR offsets and a permutation,
    uploaded) and :func:`_spmm_src`'s kernel over the output."""
    dev = rt.device_of(b)
    m, k = (int(d) for d in a_shape)
    ri, ci = (1, 0) if adjoint_a else (0, 1)
    if adjoint_a:
        m, k = k, m
    nnz = a_indices.shape[0]
    rows = np.zeros(0, _L)
    if nnz:
        ind = rt.download(a_indices)
        bad = (ind[:, ri] < 0) | (ind[:, ri] >= m) | (ind[:, ci] < 0) | (ind[:, ci] >= k)
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidArgumentError(
                f"a_indices[{i}] = [{int(ind[i, 0])}, {int(ind[i, 1])}] is out of bounds of "
                f"A's shape [{a_shape[0]}, {a_shape[1]}]")
        rows = ind[:, ri].astype(_L)
    bst, bo = rt.layout(b)
    sbk, sbn = (bst[1], bst[0]) if adjoint_b else (bst[0], bst[1])
    n = b.shape[0] if adjoint_b else b.shape[1]
    out = rt.empty(dev, (m, n), a_values.dtype)
    if out.size == 0:
        return out
    perm = np.argsort(rows, kind="stable").astype(_L)
    off = np.zeros(m + 1, _L)
    np.cumsum(np.bincount(rows, minlength=m), out=off[1:])
    perm_d = rt.upload(dev, perm)
    off_d = rt.upload(dev, off)
    ist, io = rt.layout(a_indices)
    vst, vo = rt.layout(a_values)
    kern = rt.kernel(dev, _spmm_src(a_values.dtype), "spmm",
                     [None, None] + [_L] * 4 + [None] + [_L] * 2 + [None] + [_L] * 5
                     + [None, None])
    rt.launch(dev, kern, (n, m), None, out.base_data, rt.buf(dev, a_indices), io, ist[0],
              ri * ist[1], ci * ist[1], rt.buf(dev, a_values), vo, vst[0] if vst else 0,
              rt.buf(dev, b), bo, sbk, sbn, m, n, rt.buf(dev, off_d), rt.buf(dev, perm_d))
    return out


class IndexKernels:
    """The gather and scatter kernels (one method each; :meth:`table` maps op names to
    them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def gather(self, params, indices, axis, batch_dims):
        """GatherV2 along ``axis`` after ``batch_dims`` batch dimensions (indices checked)."""
        _int_indices(indices)
        n = params.shape[axis]
        _check_range(indices, n)
        b = batch_dims
        if b:
            bshape = params.shape[:b]
            if indices.shape[:b] != bshape:
                raise InvalidArgumentError(
                    f"params.shape[:{b}] = {list(bshape)} should equal indices.shape[:{b}] = "
                    f"{list(indices.shape[:b])}")
        return gather_axis(params, indices, axis, b, check=False)

    def gather_nd(self, params, indices):
        """GatherNd: the slices of ``params`` at the index vectors (``indices``' last axis)."""
        _int_indices(indices)
        if indices.ndim == 0:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        if k > params.ndim:
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= params rank; saw: {k} vs. "
                f"{params.ndim}")
        pst, po = self.rt.layout(params)
        if k == 0:
            lead = indices.shape[:-1]
            return self.rt.view(params, lead + params.shape, (0,) * len(lead) + tuple(pst), po)
        _check_nd(indices, params.shape[:k], "param shape")
        ist, _ = self.rt.layout(indices)
        dims = [(indices.shape[d], 0, ist[d]) for d in range(indices.ndim - 1)]
        dims += [(params.shape[d], pst[d], 0) for d in range(k, params.ndim)]
        return _gather(params, indices, dims, k, tuple(pst[:k]), ist[-1])

    def scatter_nd(self, indices, updates, shape):
        """ScatterNd: ``updates`` summed into zeros of ``shape`` (sorted keys, segment sums)."""
        _int_indices(indices)
        if indices.ndim == 0:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        shape = tuple(int(s) for s in shape)
        if k > len(shape):
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= output rank; saw: {k} vs. "
                f"{len(shape)}")
        want = indices.shape[:-1] + shape[k:]
        if updates.shape != want:
            raise InvalidArgumentError(
                f"updates must have shape indices.shape[:-1] + shape[indices.shape[-1]:] = "
                f"{list(want)}, got {list(updates.shape)}")
        dev = self.rt.device_of(updates)
        rows = math.prod(shape[:k])
        q = math.prod(shape[k:])
        if updates.size == 0 or rows * q == 0:
            return _zeros(dev, shape, updates.dtype)
        keys, pos = _row_keys(indices, k, shape[:k], segments=False)
        if pos is not None:
            vec = ", ".join(str(v) for v in _vector_at(indices, k, pos))
            raise InvalidArgumentError(
                f"indices{_pos(pos, indices.shape[:-1])} = [{vec}] does not index into shape "
                f"[{','.join(str(b) for b in shape[:k])}]")
        out = _segment_reduce(keys, updates, (rows, q))
        return self.rt.view(out, shape)

    def unsorted_segment_sum(self, data, segment_ids, num_segments):
        """UnsortedSegmentSum: ``data``'s rows summed per segment id."""
        _int_indices(segment_ids, "segment_ids")
        k = segment_ids.ndim
        if data.shape[:k] != segment_ids.shape:
            raise InvalidArgumentError(
                f"data.shape = {list(data.shape)} does not start with segment_ids.shape = "
                f"{list(segment_ids.shape)}")
        dev = self.rt.device_of(data)
        inner = data.shape[k:]
        out_shape = (num_segments,) + inner
        q = math.prod(inner)
        if segment_ids.size == 0:
            return _zeros(dev, out_shape, data.dtype)
        keys, pos = _row_keys(segment_ids, 1, (num_segments,), segments=True)
        if pos is not None:
            v = _vector_at(segment_ids, 0, pos)[0]
            raise InvalidArgumentError(
                f"segment_ids{_pos(pos, segment_ids.shape)} = {v} is out of range "
                f"[0, {num_segments})")
        out = _segment_reduce(keys, data, (num_segments, q))
        return self.rt.view(out, out_shape)

    def sparse_dense_matmul(self, a_indices, a_values, b, a_shape, adjoint_a, adjoint_b):
        """SparseTensorDenseMatMul (:func:`_sparse_dense_matmul`)."""
        return _sparse_dense_matmul(a_indices, a_values, b, a_shape, adjoint_a, adjoint_b)

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {
            "GatherV2": KernelSpec(self.gather, dtypes=ALL),
            "GatherNd": KernelSpec(self.gather_nd, dtypes=ALL),
            "ScatterNd": KernelSpec(self.scatter_nd, dtypes=NUMERIC),
            "UnsortedSegmentSum": KernelSpec(self.unsorted_segment_sum, dtypes=NUMERIC),
            "SparseTensorDenseMatMul": KernelSpec(self.sparse_dense_matmul,
                                                  dtypes=("float32", "float64", "int32",
                                                          "int64")),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return IndexKernels(ctx).table()
