"""Conformance specs of the ops that pick, move and order elements (``tapeflow.array``):
selection and gather/scatter (``where`` (select and indices), ``boolean_mask``,
``clip_by_value``, ``clip_by_norm``, ``clip_by_global_norm``, ``gather``,
``gather_nd``, ``scatter_nd``, ``unsorted_segment_sum``), then sorting, scans and
search (``searchsorted``, ``unique_all``, ``nonzero``, ``cumsum``, ``cumprod``,
``argsort``, ``sort``), then issue 47's composites (``tensor_scatter_nd_*``, ``unique``,
``unique_with_counts``, ``reverse``, ``roll``, ``reverse_sequence``, ``bitcast``,
``meshgrid``).

Gather/scatter samples repeat indices (so gradients must add up) and use int32 and
int64 indices. Error samples pin the TensorFlow-style messages (``indices[0] = 3081
is not in [0, 128)``...). Gradients (float64) are checked to second order w.r.t. the
float arguments; index arguments are never differentiated. Sort samples hold distinct
values (so the order, and ``argsort``'s indices, are unique); ``searchsorted``
samples are sorted in the case dtype; scans run along every axis, exclusive and
reversed; every op gets a size-0 sample.
"""

from __future__ import annotations

import numpy as np

import tapeflow as tf

from . import (_F32, FLOATS, ErrorSample, OpSpec, Sample, _err, _i32, _npd, _scalar_of,
               _vals)


# --- selection, gather and scatter --------------------------------------------------------

def _select_samples(dtype, rng):
    def c(*s):
        return rng.random(s) < 0.5
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((c(2, 3), v(2, 3), v(2, 3)), name="typical"),
            Sample((c(3, 1), v(1, 4), v()), name="broadcast"),
            Sample((c(2, 3), v(2, 3), _scalar_of(dtype)), name="python_scalar"),
            Sample((c(), v(), v()), name="scalar"),
            Sample((c(0, 3), v(0, 3), v(1, 3)), name="empty")]


def _where1_samples(dtype, rng):
    a = _vals(rng, (3, 4), dtype, -1, 1)
    return [Sample((a,), name="typical"),
            Sample((_vals(rng, (2, 2, 2), dtype, -1, 1),), name="rank3"),
            Sample((_vals(rng, (), dtype, 1, 1),), name="scalar"),
            Sample((_vals(rng, (0, 3), dtype),), name="empty")]


def _where1_ref(c):
    return np.argwhere(c).astype(np.int64)


def _boolean_mask_samples(dtype, rng):
    x = _vals(rng, (3, 4), dtype)
    return [Sample((x, np.array([True, False, True])), name="rows"),
            Sample((x, rng.random((3, 4)) < 0.5), name="elements"),
            Sample((x, np.array([False, True, True, False])), {"axis": 1}, name="axis1"),
            Sample((x, np.zeros(3, bool)), name="none"),
            Sample((_vals(rng, (0, 2), dtype), np.zeros(0, bool)), name="empty")]


def _boolean_mask_ref(x, mask, axis=None):
    a = 0 if axis is None else axis
    return x[(slice(None),) * a + (mask,)]


def _clip_samples(dtype, rng):
    d = _npd(dtype)
    if d.kind == "f":
        def v(*s):
            # keep away from the bounds (-1, 1): finite differences must not cross a kink
            a = rng.uniform(-3, 3, s)
            a = np.where(np.abs(np.abs(a) - 1) < 0.2, a * 1.5, a)
            return a.astype(d)
        lo, hi = -1.0, 1.0
        lo_arr = np.full((3, 4), -1.0, d) + rng.uniform(-0.05, 0.05, (3, 4)).astype(d)
        hi_row = np.full((1, 4), 1.0, d)
    else:
        def v(*s):
            return _vals(rng, s, dtype, 0 if d.kind == "u" else -3, 3)
        lo, hi = (1, 2) if d.kind == "u" else (-1, 2)
        lo_arr = np.full((3, 4), lo, d)
        hi_row = np.full((1, 4), hi, d)
    return [Sample((v(3, 4), lo, hi), name="typical"),
            Sample((v(3, 4), lo_arr, hi_row), name="array_bounds"),
            Sample((v(), lo, hi), name="scalar"),
            Sample((v(0, 4), lo, hi), name="empty")]


def _clip_ref(t, lo, hi):
    return np.minimum(np.maximum(t, lo), hi)


def _clip_by_norm_samples(dtype, rng):
    d = _npd(dtype)
    x = rng.uniform(-2, 2, (3, 4)).astype(d)
    return [Sample((x, 1.0), name="clipped"),
            Sample((x, 100.0), name="unclipped"),
            Sample((x, 1.0), {"axes": [1]}, name="axes"),
            Sample((x, 1.0), {"axes": -2}, name="negative_axis"),
            Sample((np.zeros((2, 2), d), 1.0), grad_argnums=(), name="zero"),
            Sample((np.zeros((0, 3), d), 1.0), name="empty")]


def _clip_by_norm_ref(t, clip_norm, axes=None):
    ax = tuple(axes) if isinstance(axes, list) else axes
    l2 = np.sqrt(np.sum(t.astype(np.float64) ** 2, axis=ax, keepdims=True))
    return (t * clip_norm / np.maximum(l2, clip_norm)).astype(t.dtype)


def _global_norm_samples(dtype, rng):
    d = _npd(dtype)
    a = rng.uniform(-2, 2, (3,)).astype(d)
    b = rng.uniform(-2, 2, (2, 2)).astype(d)
    return [Sample((a, b), {"clip_norm": 1.0}, name="clipped"),
            Sample((a, b), {"clip_norm": 50.0}, name="unclipped"),
            Sample((a,), {"clip_norm": 0.5}, name="single")]


def _global_norm_fn(*ts, clip_norm):
    clipped, norm = tf.clip_by_global_norm(list(ts), clip_norm)
    return tuple(clipped) + (norm,)


def _global_norm_ref(*ts, clip_norm):
    norm = np.sqrt(sum(np.sum(t.astype(np.float64) ** 2) for t in ts))
    scale = clip_norm / max(norm, clip_norm)
    return tuple((t * scale).astype(t.dtype) for t in ts) + (np.asarray(norm, ts[0].dtype),)


def _gather_samples(dtype, rng):
    p = _vals(rng, (5, 3), dtype)
    p3 = _vals(rng, (2, 3, 4), dtype)
    return [Sample((p, _i32([4, 0, 2, 2])), name="repeated"),
            Sample((p, np.array([[1, 0], [2, 2]], np.int64)), {"axis": 1}, name="axis1_int64"),
            Sample((p, np.array(3, np.int32)), name="scalar_index"),
            Sample((p, _i32([2, 1])), {"axis": -1}, name="negative_axis"),
            Sample((p, np.zeros((0,), np.int32)), name="empty_indices"),
            Sample((p3, np.array([[0, 3, 3], [1, 1, 2]], np.int32)), {"axis": 2, "batch_dims": 1},
                   name="batch_dims"),
            Sample((p3, np.array([[2], [0]], np.int64)), {"axis": 1, "batch_dims": -1},
                   name="batch_dims_negative"),
            Sample((_vals(rng, (0, 2), dtype), np.zeros((0,), np.int32)), name="empty")]


def _gather_ref(p, idx, axis=None, batch_dims=0):
    b = batch_dims % idx.ndim if batch_dims < 0 else batch_dims
    a = b if axis is None else axis % p.ndim
    if b == 0:
        return np.take(p, idx, axis=a)
    bs = p.shape[:b]
    outs = [np.take(p[i], idx[i], axis=a - b) for i in np.ndindex(*bs)]
    return np.stack(outs).reshape(bs + outs[0].shape)


def _gather_nd_samples(dtype, rng):
    p = _vals(rng, (3, 4), dtype)
    p3 = _vals(rng, (2, 3, 4), dtype)
    return [Sample((p, _i32([[0, 1], [2, 3], [0, 1]])), name="elements"),
            Sample((p, np.array([[1], [0], [1]], np.int64)), name="rows_int64"),
            Sample((p3, _i32([[[1, 2]], [[0, 0]]])), name="rank3"),
            Sample((p, _i32([2, 3])), name="single"),
            Sample((p3, _i32([[[1], [0]], [[2], [2]]])), {"batch_dims": 1}, name="batch_dims"),
            Sample((p, np.zeros((0, 2), np.int32)), name="empty")]


def _gather_nd_ref(p, idx, batch_dims=0):
    if batch_dims:
        return np.stack([_gather_nd_ref(p[i], idx[i]) for i in range(p.shape[0])])
    k = idx.shape[-1]
    return np.asarray(p[tuple(idx[..., i] for i in range(k)) + (Ellipsis,)])


def _scatter_nd_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype, 0, 3)  # noqa: E731
    return [Sample((_i32([[1], [3], [1]]), v(3), [5]), grad_argnums=(1,), name="duplicates"),
            Sample((np.array([[0, 1], [2, 3], [0, 1]], np.int64), v(3), (3, 4)),
                   grad_argnums=(1,), name="elements_int64"),
            Sample((_i32([[0], [2]]), v(2, 4), [3, 4]), grad_argnums=(1,), name="rows"),
            Sample((np.zeros((0, 1), np.int32), v(0, 4), [3, 4]), grad_argnums=(1,),
                   name="empty")]


def _scatter_nd_ref(idx, upd, shape):
    out = np.zeros(shape, upd.dtype)
    np.add.at(out, tuple(idx[..., i] for i in range(idx.shape[-1])), upd)
    return out


def _segment_sum_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype, 0, 3)  # noqa: E731
    return [Sample((v(5, 3), _i32([0, 2, 0, -1, 1]), 4), grad_argnums=(0,), name="negative_id"),
            Sample((v(2, 3, 2), np.array([[0, 1, 1], [2, 0, 0]], np.int64), 3),
                   grad_argnums=(0,), name="ids_2d_int64"),
            Sample((v(4), _i32([3, 3, 0, 1]), 5), grad_argnums=(0,), name="vector"),
            Sample((v(0, 3), np.zeros((0,), np.int32), 2), grad_argnums=(0,), name="empty")]


def _segment_sum_ref(data, ids, num_segments):
    out = np.zeros((num_segments,) + data.shape[ids.ndim:], data.dtype)
    flat = ids.reshape(-1)
    vals = data.reshape((-1,) + data.shape[ids.ndim:])
    keep = flat >= 0
    np.add.at(out, flat[keep], vals[keep])
    return out


_SELECTION_SPECS = [
    # selection
    OpSpec(name="where", fn=tf.where, ref=np.where, op="SelectV2", samples=_select_samples,
           errors=[_err((np.ones((2,), _F32), np.ones((2,), _F32), np.ones((2,), _F32)),
                        "condition must be a bool tensor", name="not_bool")]),
    OpSpec(name="where_indices", fn=tf.where, ref=_where1_ref, op="Where",
           samples=_where1_samples, grad_order=0),
    OpSpec(name="boolean_mask", fn=tf.boolean_mask, ref=_boolean_mask_ref, op="",
           samples=_boolean_mask_samples,
           errors=[_err((np.zeros((3, 4), _F32), np.ones((4,), bool)), "must match dimensions",
                        name="shape")]),
    OpSpec(name="clip_by_value", fn=tf.clip_by_value, ref=_clip_ref, op="ClipByValue",
           samples=_clip_samples),
    OpSpec(name="clip_by_norm", fn=tf.clip_by_norm, ref=_clip_by_norm_ref, op="",
           dtypes=FLOATS, samples=_clip_by_norm_samples, tol={"float16": (2e-2, 2e-2)}),
    OpSpec(name="clip_by_global_norm", fn=_global_norm_fn, ref=_global_norm_ref, op="",
           dtypes=FLOATS, samples=_global_norm_samples, tol={"float16": (2e-2, 2e-2)}),
    # gather / scatter
    OpSpec(name="gather", fn=tf.gather, ref=_gather_ref, op="GatherV2",
           samples=_gather_samples,
           errors=[_err((np.zeros((128,), _F32), _i32([3081, 1])),
                        "indices[0] = 3081 is not in [0, 128)", name="seed_embedding"),
                   _err((np.zeros((4, 2), _F32), _i32([0, -1])), "indices[1] = -1 is not in [0, 4)",
                        name="negative"),
                   _err((np.zeros((4, 2), _F32), _i32([[0, 1], [7, 0]])),
                        "indices[1,0] = 7 is not in [0, 4)", name="rank2"),
                   _err((np.zeros((4, 2), _F32), _i32([0, 2])), "indices[1] = 2 is not in [0, 2)",
                        {"axis": 1}, name="axis1")]),
    OpSpec(name="gather_nd", fn=tf.gather_nd, ref=_gather_nd_ref, op="GatherNd",
           samples=_gather_nd_samples,
           errors=[_err((np.zeros((3, 4), _F32), _i32([[0, 1], [0, 4]])),
                        "indices[1] = [0, 4] does not index into param shape [3,4]",
                        name="out_of_range")]),
    OpSpec(name="scatter_nd", fn=tf.scatter_nd, ref=_scatter_nd_ref, op="ScatterNd",
           samples=_scatter_nd_samples,
           errors=[_err((_i32([[1], [5]]), np.ones((2,), _F32), [5]),
                        "indices[1] = [5] does not index into shape [5]", name="out_of_range"),
                   _err((_i32([[1], [2]]), np.ones((3,), _F32), [5]), "updates must have shape",
                        name="updates_shape")]),
    OpSpec(name="unsorted_segment_sum", fn=tf.unsorted_segment_sum, ref=_segment_sum_ref,
           op="UnsortedSegmentSum", samples=_segment_sum_samples,
           errors=[_err((np.ones((2,), _F32), _i32([0, 5]), 3),
                        "segment_ids[1] = 5 is out of range [0, 3)", name="out_of_range")]),
]


# --- sorting, scans and search ------------------------------------------------------------

def _scan_samples(dtype, rng):
    return [Sample((_vals(rng, (5,), dtype),), name="vector"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": 1}, name="rows"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": 0, "exclusive": True}, name="exclusive"),
            Sample((_vals(rng, (2, 3, 2), dtype),), {"axis": 1, "reverse": True},
                   name="reverse"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": -1, "exclusive": True,
                                                  "reverse": True}, name="both"),
            Sample((_vals(rng, (0, 3), dtype),), {"axis": 0}, name="empty")]


def _ref_scan(fn, fill):
    def ref(x, axis=0, exclusive=False, reverse=False):
        axis %= x.ndim
        if reverse:
            x = np.flip(x, axis)
        out = fn(x, axis=axis, dtype=x.dtype)
        if exclusive and out.shape[axis]:
            first = np.full(out.shape[:axis] + (1,) + out.shape[axis + 1:], fill, out.dtype)
            out = np.concatenate([first, np.delete(out, -1, axis=axis)], axis=axis)
        return np.flip(out, axis) if reverse else out
    return ref


def _sort_samples(dtype, rng):
    def distinct(shape):
        n = int(np.prod(shape))
        vals = rng.permutation(n).astype(np.float64) - (0 if dtype.is_unsigned else n // 2)
        return vals.reshape(shape).astype(dtype.np)
    return [Sample((distinct((6,)),), name="vector"),
            Sample((distinct((3, 4)),), {"axis": 0}, name="columns"),
            Sample((distinct((2, 3, 4)),), {"direction": "DESCENDING"}, name="descending"),
            Sample((distinct((0, 3)),), name="empty")]


def _ref_argsort(x, axis=-1, direction="ASCENDING"):
    if direction == "DESCENDING":
        return np.argsort(-x.astype(np.float64), axis=axis, kind="stable")
    return np.argsort(x, axis=axis, kind="stable")


def _ref_sort(x, axis=-1, direction="ASCENDING"):
    return np.take_along_axis(x, _ref_argsort(x, axis, direction), axis)


def _searchsorted_samples(dtype, rng):
    # sorted in the case dtype, after the cast: sorting first and casting -5..-1 to an
    # unsigned dtype wrapped them to its top and left the sequence unsorted, where
    # searchsorted is undefined (NumPy's and CuPy's binary searches then differ)
    a = np.sort(rng.integers(-5, 6, 7).astype(dtype.np))
    v = rng.integers(-7, 8, (2, 3)).astype(dtype.np)
    return [Sample((a, v), name="left"), Sample((a, v), {"side": "right"}, name="right"),
            Sample((a[:0], v), name="empty_sequence")]


def _unique_samples(dtype, rng):
    x = rng.integers(0, 4, (3, 4)).astype(dtype.np)
    out = [Sample((x,), name="typical"), Sample((x[:0],), name="empty")]
    if dtype.np.kind == "f":
        y = x.copy()
        y[0, :2] = np.nan
        out.append(Sample((y,), name="nans_distinct"))
    return out


def _ref_unique(x):
    vals, idx, inv, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                       return_counts=True, equal_nan=False)
    return vals, idx.astype(np.int64), inv.reshape(x.shape).astype(np.int64), \
        counts.astype(np.int64)


def _nonzero_samples(dtype, rng):
    x = (rng.integers(0, 3, (3, 4)) * (rng.random((3, 4)) > 0.4)).astype(dtype.np)
    return [Sample((x,), name="matrix"), Sample((x[0],), name="vector"),
            Sample((np.zeros((2, 0), dtype.np),), name="empty")]


_SORTING_SPECS = [
    OpSpec(name="searchsorted", fn=tf.searchsorted,
           ref=lambda a, v, side="left": np.searchsorted(a, v, side=side).astype(np.int64),
           op="SearchSorted", samples=_searchsorted_samples, grad_order=0, check_dtype=False),
    OpSpec(name="unique_all", fn=tf.unique_all, ref=_ref_unique, op="UniqueAll",
           samples=_unique_samples, grad_order=0, check_dtype=False),
    OpSpec(name="nonzero", fn=tf.nonzero, ref=lambda x: np.argwhere(x).astype(np.int64),
           op="NonZero", samples=_nonzero_samples, grad_order=0, check_dtype=False),
    OpSpec(name="cumsum", fn=tf.cumsum, ref=_ref_scan(np.cumsum, 0), op="Cumsum",
           samples=_scan_samples),
    OpSpec(name="cumprod", fn=tf.cumprod, ref=_ref_scan(np.cumprod, 1), op="Cumprod",
           samples=_scan_samples),
    OpSpec(name="argsort", fn=tf.argsort, ref=_ref_argsort, op="ArgSort", samples=_sort_samples,
           grad_order=0, check_dtype=False),
    OpSpec(name="sort", fn=tf.sort, ref=_ref_sort, op="ArgSort", samples=_sort_samples),
]



# --- issue 47: tensor_scatter_nd_*, unique, reverse, roll, reverse_sequence ---------------

def _tscatter_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype, -3, 3)  # noqa: E731
    return [Sample((v(5), _i32([[1], [3], [1]]), v(3)), grad_argnums=(0, 2), name="duplicates"),
            Sample((v(3, 4), np.array([[0, 1], [2, 3]], np.int64), v(2)), grad_argnums=(0, 2),
                   name="elements_int64"),
            Sample((v(3, 2), _i32([[2], [0]]), v(2, 2)), grad_argnums=(0, 2), name="rows"),
            Sample((v(3, 2), np.zeros((0, 1), np.int32), v(0, 2)), grad_argnums=(0, 2),
                   name="empty")]


def _tscatter_ref(fn):
    def ref(t, idx, upd):
        out = t.copy()
        at = tuple(idx.reshape(-1, idx.shape[-1]).T)
        upd = upd.reshape((-1,) + t.shape[idx.shape[-1]:])
        if fn is None:                  # update: in order, so the last duplicate wins
            for j in range(upd.shape[0]):
                out[tuple(a[j] for a in at)] = upd[j]
        else:
            fn.at(out, at, upd)
        return out
    return ref


def _tscatter_spec(name, fn, ufunc, op):
    dts = ("float32", "float64", "int32", "int64") if ufunc not in (np.minimum, np.maximum) \
        else ("float32", "float64", "int32")
    return OpSpec(name=name, fn=fn, ref=_tscatter_ref(ufunc), op="", dtypes=dts,
                  samples=_tscatter_samples,
                  errors=[_err((np.zeros((3, 3), _F32), _i32([[5, 0]]), np.ones((1,), _F32)),
                               f"indices[0] = [5, 0] does not index into shape [3,3] [Op:{op}]",
                               name="out_of_range"),
                          _err((np.zeros((3,), _F32), _i32([[0]]), np.ones((2,), _F32)),
                               "Outer dimensions of indices and update must match",
                               name="updates_shape")])


def _unique_first_ref(x, counts=False):
    vals, first, inv, cnt = np.unique(x, return_index=True, return_inverse=True,
                                      return_counts=True)
    order = np.argsort(first, kind="stable")
    rank = np.argsort(order)
    out = (vals[order], rank[inv.reshape(-1)].astype(np.int32))
    return out + (cnt[order].astype(np.int32),) if counts else out


def _unique1_samples(dtype, rng):
    return [Sample((_vals(rng, (9,), dtype, 0, 4),), name="repeats"),
            Sample((_vals(rng, (0,), dtype),), name="empty")]


def _reverse_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(2, 3, 4), [0, 2]), name="two_axes"), Sample((v(5), [-1]), name="negative"),
            Sample((v(2, 3), []), name="none"), Sample((v(0, 2), [1]), name="empty")]


def _roll_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(5), 2, 0), name="vector"), Sample((v(3, 4), [1, -3], [0, 1]), name="two"),
            Sample((v(3, 4), 7, -1), name="wraps"), Sample((v(0, 3), 1, 1), name="empty")]


def _reverse_sequence_ref(x, lens, seq_axis, batch_axis=0):
    out = np.array(x, copy=True)
    for b, n in enumerate(lens):
        sl = [slice(None)] * x.ndim
        sl[batch_axis], sl[seq_axis] = b, slice(0, int(n))
        src = x[tuple(sl)]
        out[tuple(sl)] = np.flip(src, axis=seq_axis - (seq_axis > batch_axis))
    return out


def _reverse_sequence_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(3, 4), _i32([2, 4, 0])), {"seq_axis": 1}, name="rows"),
            Sample((v(4, 2, 3), np.array([3, 1], np.int64)), {"seq_axis": 0, "batch_axis": 1},
                   name="batch_axis_1")]


# --- issue 47: bitcast and meshgrid --------------------------------------------------------

_SAME_SIZE_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64, 16: np.int64}


def _bitcast_ref(x, to):
    to, a = np.dtype(to.np), x.dtype.itemsize
    x = np.ascontiguousarray(x).reshape(x.shape)
    if a > to.itemsize:
        return x.reshape(x.shape + (1,)).view(to)
    return x.view(to).reshape(x.shape[:-1]) if a < to.itemsize else x.view(to)


def _bitcast_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    size = _npd(dtype).itemsize
    same = tf.as_dtype(np.dtype(_SAME_SIZE_INT[min(size, 8)]))
    out = [Sample((v(2, 3), tf.uint8), name="to_bytes"),
           Sample((v(), tf.uint8), name="scalar_to_bytes"),
           Sample((v(0, 2), tf.uint8), name="empty")]
    if size <= 8 and not _npd(dtype).kind == "c":
        out.append(Sample((v(4), same), name="same_size"))
    if _npd(dtype).kind in "iu" and size < 8:     # (ints only: no NaN bit patterns)
        out.append(Sample((v(3, 8 // size), tf.int64), name="to_wider"))
    return out


def _meshgrid_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(3), v(2)), name="xy"),
            Sample((v(3), v(2, 2), v(2)), {"indexing": "ij"}, name="ij_flattened"),
            Sample((v(0), v(2)), name="empty")]


_ISSUE47_SPECS = [
    _tscatter_spec("tensor_scatter_nd_update", tf.tensor_scatter_nd_update, None,
                   "TensorScatterUpdate"),
    _tscatter_spec("tensor_scatter_nd_add", tf.tensor_scatter_nd_add, np.add, "TensorScatterAdd"),
    _tscatter_spec("tensor_scatter_nd_sub", tf.tensor_scatter_nd_sub, np.subtract,
                   "TensorScatterSub"),
    _tscatter_spec("tensor_scatter_nd_min", tf.tensor_scatter_nd_min, np.minimum,
                   "TensorScatterMin"),
    _tscatter_spec("tensor_scatter_nd_max", tf.tensor_scatter_nd_max, np.maximum,
                   "TensorScatterMax"),
    OpSpec(name="unique", fn=lambda x: tuple(tf.unique(x)), ref=_unique_first_ref,
           op="UniqueAll", samples=_unique1_samples, grad_order=0,
           errors=[_err((np.zeros((2, 2), _F32),), "unique expects a 1D vector",
                        name="not_1d")]),
    OpSpec(name="unique_with_counts", fn=lambda x: tuple(tf.unique_with_counts(x)),
           ref=lambda x: _unique_first_ref(x, True), op="UniqueAll", samples=_unique1_samples,
           grad_order=0),
    OpSpec(name="reverse", fn=tf.reverse, ref=lambda x, a: np.flip(x, tuple(a)),
           op="StridedSlice", samples=_reverse_samples,
           errors=[_err((np.zeros((2, 3), _F32), [2]), "'axis'[0] = 2 is out of valid range",
                        name="bad_axis"),
                   _err((np.zeros((2, 3), _F32), [0, -2]), "axis 0 specified more than once",
                        name="duplicate")]),
    OpSpec(name="roll", fn=tf.roll, ref=np.roll, op="GatherV2", samples=_roll_samples),
    OpSpec(name="reverse_sequence", fn=tf.reverse_sequence, ref=_reverse_sequence_ref,
           op="GatherV2", samples=_reverse_sequence_samples),
    OpSpec(name="bitcast", fn=tf.bitcast, ref=_bitcast_ref, op="Bitcast",
           samples=_bitcast_samples, grad_order=0,
           skip={"bfloat16": "samples are drawn in float32 for bfloat16, whose item size "
                             "differs (tests/test_scatter_unique_bitcast.py covers it)"},
           errors=[_err((np.zeros((3,), np.int16), tf.int32), "the last dimension must be 2",
                        name="bad_last_dim"),
                   ErrorSample((np.zeros((2,), _F32), tf.bool), error=TypeError,
                               match="cannot bitcast float32 to bool", name="to_bool")]),
    OpSpec(name="meshgrid", fn=lambda *a, **k: tuple(tf.meshgrid(*a, **k)),
           ref=lambda *a, **k: tuple(np.meshgrid(*a, **k)), op="BroadcastTo",
           samples=_meshgrid_samples),
]


SPECS = _SELECTION_SPECS + _SORTING_SPECS + _ISSUE47_SPECS
