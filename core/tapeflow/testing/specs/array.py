"""Conformance specs of the shape, creation and indexing ops (``tapeflow.array``).

Every op gets a typical sample, a 0-d one where the op accepts scalars, a size-0
one and negative axes; gather/scatter samples repeat indices (so gradients must
add up) and use int32 and int64 indices. Error samples pin the TensorFlow-style
messages (``indices[0] = 3081 is not in [0, 128)``, ``slice index 5 of dimension
0 out of bounds``...). Gradients (float64) are checked to second order w.r.t. the
float arguments; index arguments are never differentiated.
"""

from __future__ import annotations

import re

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.testing.opinfo import ErrorSample, OpSpec, Sample

FLOATS = ("float16", "float32", "float64")


# --- value generators -------------------------------------------------------------

def _npd(dtype):
    return np.dtype(getattr(dtype, "np", dtype))


def _vals(rng, shape, dtype, lo=-3.0, hi=3.0):
    """Random values of ``dtype`` in ``[lo, hi]`` (bool: coin flips)."""
    d = _npd(dtype)
    if d.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if d.kind == "f":
        return np.asarray(rng.uniform(lo, hi, shape).astype(d))
    info = np.iinfo(d)
    a = rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, shape)
    return np.asarray(a.astype(d))


def _scalar_of(dtype):
    """A Python value of the kind of ``dtype``."""
    d = _npd(dtype)
    return True if d.kind == "b" else 1.5 if d.kind == "f" else 7


def _i32(*a):
    return np.array(a if len(a) != 1 or not isinstance(a[0], list) else a[0], np.int32)


def _err(args, match, kwargs=None, name="", error=InvalidArgumentError):
    """An ErrorSample whose message contains ``match`` literally (escaped: ErrorSample.match
    is a regular expression)."""
    return ErrorSample(tuple(args), dict(kwargs or {}), error=error, match=re.escape(match),
                       name=name)


# --- creation ------------------------------------------------------------------------

def _fill_samples(dtype, rng):
    v = _scalar_of(dtype)
    out = [Sample(((2, 3), v), {"dtype": dtype}, name="typical"),
           Sample(((), v), {"dtype": dtype}, name="scalar"),
           Sample(((0, 4), v), {"dtype": dtype}, name="empty")]
    if dtype is tf.int32:
        out.append(Sample(((2,), 7), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample(((2, 1), 2.5), name="inferred_float32"))
    return out


def _fill_ref(dims, value, dtype=None):
    if dtype is None:
        dtype = np.float32 if isinstance(value, float) else np.int32
    return np.full(dims, value, dtype=_npd(dtype))


def _const_samples(dtype, rng):
    return [Sample(((2, 3),), {"dtype": dtype}, name="typical"),
            Sample(((),), {"dtype": dtype}, name="scalar"),
            Sample(([0, 4],), {"dtype": dtype}, name="empty")]


def _like_samples(dtype, rng):
    out = [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
           Sample((_vals(rng, (), dtype),), name="scalar"),
           Sample((_vals(rng, (0, 3), dtype),), name="empty")]
    if dtype is not tf.float64:
        out.append(Sample((_vals(rng, (2,), dtype),), {"dtype": tf.float64}, name="cast_dtype"))
    return out


def _like_ref(fill):
    def ref(x, dtype=None):
        return np.full(x.shape, fill, dtype=x.dtype if dtype is None else _npd(dtype))
    return ref


def _range_samples(dtype, rng):
    out = [Sample((0, 10, 3), {"dtype": dtype}, name="typical"),
           Sample((5, -2, -2), {"dtype": dtype}, name="negative_delta"),
           Sample((3, 3, 1), {"dtype": dtype}, name="empty"),
           Sample((7,), {"dtype": dtype}, name="limit_only")]
    if dtype.is_floating:
        out.append(Sample((0.5, 2.0, 0.25), {"dtype": dtype}, name="fractional"))
    if dtype is tf.int32:
        out.append(Sample((5,), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample((1, 2, 0.25), name="inferred_float32"))
    return out


def _range_ref(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        dtype = np.float32 if any(isinstance(v, float) for v in (start, limit, delta)) \
            else np.int32
    return np.arange(start, limit, delta, dtype=_npd(dtype))


def _eye_samples(dtype, rng):
    return [Sample((3,), {"dtype": dtype}, name="square"),
            Sample((2, 4), {"dtype": dtype}, name="wide"),
            Sample((3, 2, [2]), {"dtype": dtype}, name="batch"),
            Sample((0,), {"dtype": dtype}, name="empty")]


def _eye_ref(num_rows, num_columns=None, batch_shape=None, dtype=tf.float32):
    e = np.eye(num_rows, num_columns, dtype=_npd(dtype))
    return np.broadcast_to(e, tuple(batch_shape or ()) + e.shape)


def _linspace_samples(dtype, rng):
    d = _npd(dtype)
    return [Sample((np.asarray(0.0, d), 1.0, 5), name="typical"),
            Sample((np.asarray(2.0, d), -1.0, 4), name="decreasing"),
            Sample((np.asarray(1.5, d), 3.0, 1), name="one"),
            Sample((np.asarray(0.0, d), 1.0, 0), name="empty")]


def _linspace_ref(start, stop, num):
    return np.linspace(start, stop, num, dtype=start.dtype)


def _one_hot_samples(dtype, rng):
    d = _npd(dtype)
    on, off = ((True, False) if d.kind == "b" else (2.5, -1.0) if d.kind == "f" else (3, 1))
    ind = _i32([0, 2, -1, 5, 1])
    return [Sample((ind, 3), {"dtype": dtype}, name="typical"),
            Sample((ind.reshape(5, 1), 4), {"dtype": dtype, "on_value": on, "off_value": off,
                                            "axis": 0}, name="axis0"),
            Sample((ind.reshape(1, 5).astype(np.int64), 3),
                   {"dtype": dtype, "axis": 1}, name="axis1_int64"),
            Sample((np.array(1, np.int32), 3), {"dtype": dtype}, name="scalar"),
            Sample((np.zeros((0,), np.int32), 3), {"dtype": dtype}, name="empty")]


def _one_hot_ref(indices, depth, on_value=None, off_value=None, axis=None, dtype=None):
    d = _npd(dtype or np.float32)
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on).astype(d), np.asarray(off).astype(d)).astype(d)
    if axis not in (None, -1):
        out = np.moveaxis(out, -1, axis)
    return out


# --- shapes --------------------------------------------------------------------------

def _reshape_samples(dtype, rng):
    x = _vals(rng, (2, 3, 4), dtype)
    return [Sample((x, (6, 4)), name="merge"),
            Sample((x, [4, -1]), name="infer"),
            Sample((x[:1, :1, :1], ()), name="to_scalar"),
            Sample((_vals(rng, (), dtype), (1, 1)), name="from_scalar"),
            Sample((x[:0], (0, 5)), name="empty")]


def _transpose_samples(dtype, rng):
    x = _vals(rng, (2, 3, 4), dtype)
    return [Sample((x,), name="reverse"),
            Sample((x, (1, 0, 2)), name="perm"),
            Sample((x, [-1, 0, 1]), name="negative_perm"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3), dtype), (1, 0)), name="empty")]


def _transpose_ref(a, perm=None):
    return np.transpose(a, perm)


def _expand_dims_samples(dtype, rng):
    x = _vals(rng, (2, 3), dtype)
    return [Sample((x, 0), name="front"), Sample((x, -1), name="back"),
            Sample((x, 1), name="middle"), Sample((_vals(rng, (), dtype), 0), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype), -2), name="empty")]


def _squeeze_samples(dtype, rng):
    x = _vals(rng, (1, 3, 1, 2), dtype)
    return [Sample((x,), name="all"), Sample((x, 2), name="one"),
            Sample((x, [0, -2]), name="list_negative"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 1), dtype), 1), name="empty")]


def _squeeze_ref(x, axis=None):
    return np.squeeze(x, axis=tuple(axis) if isinstance(axis, list) else axis)


def _concat_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(2, 3), v(2, 1), v(2, 2)), {"axis": 1}, name="three"),
            Sample((v(1, 3), v(2, 3)), {"axis": -2}, name="negative_axis"),
            Sample((v(0, 3), v(2, 3)), {"axis": 0}, name="empty_piece"),
            Sample((v(4), v(2)), {"axis": 0}, name="vectors"),
            Sample((v(2, 2),), {"axis": 1}, name="single")]


def _concat_fn(*xs, axis):
    return tf.concat(list(xs), axis=axis)


def _concat_ref(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _stack_samples(dtype, rng):
    v = lambda *s: _vals(rng, s, dtype)  # noqa: E731
    return [Sample((v(2, 3), v(2, 3), v(2, 3)), {"axis": 0}, name="axis0"),
            Sample((v(2, 3), v(2, 3)), {"axis": -1}, name="last"),
            Sample((v(), v(), v()), {"axis": 0}, name="scalars"),
            Sample((v(0, 3), v(0, 3)), {"axis": 1}, name="empty")]


def _stack_fn(*xs, axis=0):
    return tf.stack(list(xs), axis=axis)


def _stack_ref(*xs, axis=0):
    return np.stack(xs, axis=axis)


def _unstack_samples(dtype, rng):
    return [Sample((_vals(rng, (3, 2), dtype),), name="axis0"),
            Sample((_vals(rng, (2, 3, 2), dtype),), {"axis": -1}, name="last"),
            Sample((_vals(rng, (4,), dtype),), name="to_scalars"),
            Sample((_vals(rng, (2, 0, 3), dtype),), {"axis": 1}, grad_argnums=(), name="empty")]


def _unstack_fn(x, axis=0):
    return tf.unstack(x, axis=axis)


def _unstack_ref(x, axis=0):
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


def _split_samples(dtype, rng):
    x = _vals(rng, (6, 4), dtype)
    return [Sample((x, 3), name="even"),
            Sample((x, [1, -1, 2]), name="sizes_infer"),
            Sample((x, [1, 3]), {"axis": -1}, name="negative_axis"),
            Sample((x, [0, 6]), name="empty_piece"),
            Sample((_vals(rng, (0, 4), dtype), 2, 1), name="empty")]


def _split_ref(x, n, axis=0):
    if isinstance(n, int):
        return list(np.split(x, n, axis))
    sizes = list(n)
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return list(np.split(x, np.cumsum(sizes)[:-1], axis))


def _tile_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype), [2, 1]), name="typical"),
            Sample((_vals(rng, (2, 1, 2), dtype), (1, 3, 2)), name="rank3"),
            Sample((_vals(rng, (), dtype), []), name="scalar"),
            Sample((_vals(rng, (2, 3), dtype), [1, 0]), name="empty")]


def _broadcast_to_samples(dtype, rng):
    return [Sample((_vals(rng, (3, 1), dtype), (2, 3, 4)), name="typical"),
            Sample((_vals(rng, (), dtype), [2, 2]), name="scalar"),
            Sample((_vals(rng, (1, 3), dtype), (0, 3)), name="empty")]


def _pad_samples(dtype, rng):
    cv = _scalar_of(dtype)
    return [Sample((_vals(rng, (2, 3), dtype), [[1, 0], [2, 1]]), name="typical"),
            Sample((_vals(rng, (2, 3), dtype), [[0, 1], [1, 1]]), {"constant_values": cv},
                   name="constant_values"),
            Sample((_vals(rng, (), dtype), np.zeros((0, 2), np.int32)), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype), [[1, 1], [0, 2]]), name="empty")]


def _pad_ref(x, paddings, mode="CONSTANT", constant_values=0):
    p = np.asarray(paddings).reshape(-1, 2)
    if x.ndim == 0:
        return x.copy()
    if mode.upper() == "CONSTANT":
        return np.pad(x, p, mode="constant", constant_values=constant_values)
    return np.pad(x, p, mode=mode.lower())


def _mirror_pad_samples(dtype, rng):
    out = []
    for mode in ("REFLECT", "SYMMETRIC"):
        out += [Sample((_vals(rng, (3, 4), dtype), [[1, 2], [3, 0]], mode), name=mode.lower()),
                Sample((_vals(rng, (2, 3, 4), dtype), [[0, 0], [2, 1], [1, 3]], mode.lower()),
                       name=mode.lower() + "_rank3"),
                Sample((_vals(rng, (0, 3), dtype), [[0, 0], [1, 1]], mode),
                       name=mode.lower() + "_empty")]
    return out


def _mirror_pad_fn(x, paddings, mode):
    return tf.pad(x, paddings, mode)


def _slice_samples(dtype, rng):
    x = _vals(rng, (3, 4), dtype)
    return [Sample((x, [1, 0], [2, -1]), name="typical"),
            Sample((x, (0, 3), (3, 1)), name="column"),
            Sample((_vals(rng, (), dtype), [], []), name="scalar"),
            Sample((x, [0, 0], [0, 4]), name="empty")]


def _slice_ref(x, begin, size):
    return x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]


def _strided_slice_samples(dtype, rng):
    x = _vals(rng, (3, 4, 5), dtype)
    s = slice
    return [
        Sample((x, [0, 1, 0], [2, 4, 5], [1, 2, 1]), ref_kwargs={"key": (s(0, 2), s(1, 4, 2))},
               name="steps"),
        Sample((x, [-1, 0, 4], [0, 0, 0], [-1, 1, -2]), {"begin_mask": 2, "end_mask": 2},
               ref_kwargs={"key": (s(-1, 0, -1), s(None), s(4, 0, -2))}, name="masks_negative"),
        Sample((x, [1, 0], [2, 0], [1, 1]), {"shrink_axis_mask": 1, "new_axis_mask": 2},
               ref_kwargs={"key": (1, None)}, name="shrink_newaxis"),
        Sample((x, [0, 2], [0, 3], [1, 1]), {"ellipsis_mask": 1},
               ref_kwargs={"key": (Ellipsis, s(2, 3))}, name="ellipsis"),
        Sample((x, [2], [2], [1]), ref_kwargs={"key": (s(2, 2),)}, name="empty"),
    ]


def _strided_slice_ref(x, begin, end, strides, key):
    return x[key]


def _getitem_fn(x, key):
    return x[key]


def _getitem_ref(x, key):
    return np.asarray(x[key])


def _getitem_samples(dtype, rng):
    x = _vals(rng, (3, 4, 5), dtype)
    s = slice
    keys = [("int", 1), ("negative_int", -1), ("ints", (2, -3)), ("scalar_element", (0, 1, 2)),
            ("slice", s(1, 3)), ("steps", (s(None, None, 2), s(3, 0, -2))),
            ("reverse", s(None, None, -1)), ("ellipsis", (Ellipsis, 1)),
            ("newaxis", (None, 0, None, s(1, 3))), ("mixed", (1, Ellipsis, s(0, 5, 3))),
            ("list", [2, 0, 2]), ("array_axis1", (s(None), np.array([[3, 0], [1, 1]]))),
            ("int_then_array", (0, [1, -1])), ("int_slice_array", (1, s(None), [4, 0])),
            ("bool_mask", np.array([True, False, True])),
            ("empty_slice", s(2, 2)), ("out_of_range_slice", s(1, 100))]
    out = [Sample((x, k), name=n) for n, k in keys]
    out.append(Sample((_vals(rng, (), dtype), ()), name="scalar_all"))
    out.append(Sample((_vals(rng, (0, 3), dtype), (s(None), 1)), name="empty"))
    return out


def _getitem_tensor_samples(dtype, rng):
    x = _vals(rng, (4, 3), dtype)
    return [Sample((x, np.array([3, 0, 3], np.int32)), name="int32"),
            Sample((x, np.array([[1], [2]], np.int64)), name="int64_2d"),
            Sample((x, np.array(2, np.int32)), name="scalar_tensor"),
            Sample((x, np.array([True, False, False, True])), name="bool_mask"),
            Sample((x, np.zeros((0,), np.int32)), name="empty")]


def _ssg_fn(dy, shape, spec):
    return tf.array._STRIDED_SLICE_GRAD(dy, shape=shape, spec=spec)


def _ssg_ref(dy, shape, spec):
    out = np.zeros(shape, dy.dtype)
    out[spec] = dy
    return out


def _ssg_samples(dtype, rng):
    s = slice
    return [Sample((_vals(rng, (2, 2), dtype), (3, 4), (s(0, 3, 2), s(3, 0, -2), Ellipsis)),
                   name="steps"),
            Sample((_vals(rng, (4,), dtype), (3, 4), (1, Ellipsis)), name="row"),
            Sample((_vals(rng, (), dtype), (2, 3), (1, 2, Ellipsis)), name="element"),
            Sample((_vals(rng, (0, 4), dtype), (3, 4), (s(1, 1), Ellipsis)), name="empty")]


def _shape_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3, 1), dtype),), {"out_type": tf.int64}, name="empty_int64")]


def _shape_ref(x, out_type=tf.int32):
    return np.array(x.shape, dtype=_npd(out_type))


def _size_ref(x, out_type=tf.int32):
    return np.array(x.size, dtype=_npd(out_type))


def _rank_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 3, 1), dtype),), name="empty")]


def _rank_ref(x):
    return np.array(x.ndim, dtype=np.int32)


# --- selection ------------------------------------------------------------------------

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


# --- gather / scatter ----------------------------------------------------------------------

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


def _identity_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype),), name="empty")]


# --- the specs ------------------------------------------------------------------------------

_F32 = np.float32

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


SPECS = [
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
    # creation
    OpSpec(name="fill", fn=tf.fill, ref=_fill_ref, op="Fill", samples=_fill_samples,
           grad_order=0,
           errors=[_err(((2,), [1, 2]), "fill value must be a scalar", name="non_scalar")]),
    OpSpec(name="zeros", fn=tf.zeros, ref=lambda shape, dtype: np.zeros(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0,
           errors=[_err(((2, None),), "shape must be", name="bad_shape")]),
    OpSpec(name="ones", fn=tf.ones, ref=lambda shape, dtype: np.ones(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0),
    OpSpec(name="zeros_like", fn=tf.zeros_like, ref=_like_ref(0), op="ZerosLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="ones_like", fn=tf.ones_like, ref=_like_ref(1), op="OnesLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="range", fn=tf.range, ref=_range_ref, op="Range", samples=_range_samples,
           grad_order=0,
           errors=[_err((0, 5, 0), "Requires delta != 0", name="zero_delta"),
                   _err((5, 0, 1), "Requires start <= limit when delta > 0", name="direction")]),
    OpSpec(name="eye", fn=tf.eye, ref=_eye_ref, op="Eye", samples=_eye_samples, grad_order=0,
           errors=[_err((-1,), "non-negative", name="negative")]),
    OpSpec(name="linspace", fn=tf.linspace, ref=_linspace_ref, op="LinSpace",
           samples=_linspace_samples, grad_order=0,
           errors=[_err((0.0, 1.0, -1), "Requires num >= 0", name="negative_num")]),
    OpSpec(name="one_hot", fn=tf.one_hot, ref=_one_hot_ref, op="OneHot",
           samples=_one_hot_samples, grad_order=0,
           errors=[_err((_i32([0, 1]), 3), "axis 3 is out of range", {"axis": 3},
                        name="bad_axis")]),
    # shapes
    OpSpec(name="reshape", fn=tf.reshape, ref=np.reshape, op="Reshape",
           samples=_reshape_samples,
           errors=[_err((np.zeros((2, 3), _F32), (4, 2)),
                        "Input to reshape is a tensor of shape (2, 3) with 6 values, but the "
                        "requested shape (4, 2) has 8", name="size_mismatch"),
                   _err((np.zeros((2, 3), _F32), (-1, 4)), "needs a multiple of 4",
                        name="infer_mismatch"),
                   _err((np.zeros((2, 3), _F32), (-1, -1)), "at most one dimension may be -1",
                        name="two_unknowns")]),
    OpSpec(name="transpose", fn=tf.transpose, ref=_transpose_ref, op="Transpose",
           samples=_transpose_samples,
           errors=[_err((np.zeros((2, 3), _F32), [0, 0]), "is not a permutation",
                        name="bad_perm")]),
    OpSpec(name="expand_dims", fn=tf.expand_dims, ref=np.expand_dims, op="ExpandDims",
           samples=_expand_dims_samples,
           errors=[_err((np.zeros((2, 3), _F32), 3), "axis 3 is out of range",
                        name="bad_axis")]),
    OpSpec(name="squeeze", fn=tf.squeeze, ref=_squeeze_ref, op="Squeeze",
           samples=_squeeze_samples,
           errors=[_err((np.zeros((1, 3), _F32), 1),
                        "Can not squeeze dim[1], expected a dimension of 1, got 3",
                        name="not_one")]),
    OpSpec(name="concat", fn=_concat_fn, ref=_concat_ref, op="ConcatV2",
           samples=_concat_samples,
           errors=[_err((np.zeros((2, 3), _F32), np.zeros((2,), _F32)),
                        "ConcatOp : Ranks of all input tensors should match: shape[0] = [2, 3] "
                        "vs. shape[1] = [2]", {"axis": 0}, name="rank_mismatch"),
                   _err((np.zeros((2, 3), _F32), np.zeros((3, 3), _F32)),
                        "Dimension 0 in both shapes must be equal", {"axis": 1},
                        name="dim_mismatch")]),
    OpSpec(name="stack", fn=_stack_fn, ref=_stack_ref, op="Pack", samples=_stack_samples,
           errors=[_err((np.zeros((2,), _F32), np.zeros((3,), _F32)),
                        "Shapes of all inputs must match", name="shape_mismatch")]),
    OpSpec(name="unstack", fn=_unstack_fn, ref=_unstack_ref, op="Unpack",
           samples=_unstack_samples,
           errors=[_err((np.zeros((), _F32),), "out of range", name="scalar")]),
    OpSpec(name="split", fn=tf.split, ref=_split_ref, op="SplitV", samples=_split_samples,
           errors=[_err((np.zeros((5, 2), _F32), 2), "should evenly divide the split dimension",
                        name="uneven"),
                   _err((np.zeros((5, 2), _F32), [2, 2]), "Got: 4 vs. 5", name="sizes")]),
    OpSpec(name="tile", fn=tf.tile, ref=np.tile, op="Tile", samples=_tile_samples,
           errors=[_err((np.zeros((2, 3), _F32), [2]),
                        "Expected multiples argument to be a vector of length 2 but got length 1",
                        name="length")]),
    OpSpec(name="broadcast_to", fn=tf.broadcast_to, ref=np.broadcast_to, op="BroadcastTo",
           samples=_broadcast_to_samples,
           errors=[_err((np.zeros((2, 3), _F32), (3, 3)), "Unable to broadcast",
                        name="incompatible")]),
    OpSpec(name="pad", fn=tf.pad, ref=_pad_ref, op="PadV2", samples=_pad_samples,
           errors=[_err((np.zeros((2, 3), _F32), [[1, 1]]), "paddings must be an integer array "
                        "of shape [2, 2]", name="bad_paddings"),
                   _err((np.zeros((2,), _F32), [[1, 1]], "WRAP"), "mode must be",
                        name="bad_mode")]),
    OpSpec(name="pad_mirror", fn=_mirror_pad_fn, ref=_pad_ref, op="MirrorPad",
           samples=_mirror_pad_samples,
           errors=[_err((np.zeros((2, 3), _F32), [[2, 0], [0, 0]], "REFLECT"),
                        "paddings must be less than the dimension size: 2, 0 not less than 2",
                        name="too_wide")]),
    OpSpec(name="slice", fn=tf.slice, ref=_slice_ref, op="Slice", samples=_slice_samples,
           errors=[_err((np.zeros((3, 4), _F32), [1, 0], [3, 1]),
                        "Expected size[0] in [0, 2], but got 3", name="size")]),
    OpSpec(name="strided_slice", fn=tf.strided_slice, ref=_strided_slice_ref,
           op="StridedSlice", samples=_strided_slice_samples,
           errors=[_err((np.zeros((3,), _F32), [4], [5], [1]),
                        "slice index 4 of dimension 0 out of bounds", {"shrink_axis_mask": 1},
                        name="shrink_out_of_range")]),
    OpSpec(name="__getitem__", fn=_getitem_fn, ref=_getitem_ref, op="StridedSlice",
           samples=_getitem_samples,
           errors=[_err((np.zeros((3, 4), _F32), 5), "slice index 5 of dimension 0 out of bounds",
                        name="int"),
                   _err((np.zeros((3, 4), _F32), (0, -5)),
                        "slice index -5 of dimension 1 out of bounds", name="negative"),
                   _err((np.zeros((3, 4), _F32), (0, [1, 4])),
                        "slice index 4 of dimension 1 out of bounds", name="list"),
                   _err((np.zeros((3,), _F32), (0, 0)), "Index out of range", name="too_many"),
                   _err((np.zeros((3,), _F32), 1.5), "valid indices", name="float")]),
    OpSpec(name="__getitem__tensor_index", fn=_getitem_fn, ref=_getitem_ref, op="GatherV2",
           samples=_getitem_tensor_samples,
           errors=[_err((np.zeros((3, 4), _F32), np.array([0, 3], np.int32)),
                        "indices[1] = 3 is not in [0, 3)", name="out_of_range")]),
    OpSpec(name="strided_slice_grad", fn=_ssg_fn, ref=_ssg_ref, op="StridedSliceGrad",
           samples=_ssg_samples),
    OpSpec(name="shape", fn=tf.shape, ref=_shape_ref, op="Shape", samples=_shape_samples,
           grad_order=0),
    OpSpec(name="size", fn=tf.size, ref=_size_ref, op="Size", samples=_shape_samples,
           grad_order=0),
    OpSpec(name="rank", fn=tf.rank, ref=_rank_ref, op="Rank", samples=_rank_samples,
           grad_order=0),
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
    OpSpec(name="identity", fn=tf.identity, ref=np.copy, op="Identity",
           samples=_identity_samples),
    OpSpec(name="stop_gradient", fn=tf.stop_gradient, ref=np.copy, op="StopGradient",
           samples=_identity_samples, grad_order=0),
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
