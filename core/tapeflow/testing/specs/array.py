"""Conformance specs of the shape ops (``tapeflow.array``): reshaping, joining and
splitting, tiling and padding, slicing (``slice``, ``strided_slice``, ``[]``),
``shape``/``size``/``rank``, ``identity`` and ``stop_gradient``. The creation ops are
in ``specs/creation.py``, selection and gather/scatter in ``specs/selection.py``,
sorting and scans in ``specs/sorting.py``.

Every op gets a typical sample, a 0-d one where the op accepts scalars, a size-0
one and negative axes. Error samples pin the TensorFlow-style messages (``slice
index 5 of dimension 0 out of bounds``...). Gradients (float64) are checked to
second order w.r.t. the float arguments; index arguments are never differentiated.
"""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.testing.opinfo import OpSpec, Sample

from ._values import _F32, _err, _npd, _scalar_of, _vals


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


def _identity_samples(dtype, rng):
    return [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
            Sample((_vals(rng, (), dtype),), name="scalar"),
            Sample((_vals(rng, (0, 2), dtype),), name="empty")]


SPECS = [
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
    OpSpec(name="identity", fn=tf.identity, ref=np.copy, op="Identity",
           samples=_identity_samples),
    OpSpec(name="stop_gradient", fn=tf.stop_gradient, ref=np.copy, op="StopGradient",
           samples=_identity_samples, grad_order=0),
]
