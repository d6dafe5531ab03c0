"""Tensors assembled from pieces of others: joining, splitting and repeating along an axis
(``concat``, ``stack``, ``unstack``, ``split``, ``tile``, and the batching helper
``batch_coords``), and indexing by index tensors (``boolean_mask``, ``gather``,
``gather_nd``, ``scatter_nd``, ``unsorted_segment_sum``; the gathers' batching rules
concatenate). Top-level names (``tf.concat``, ``tf.gather``), and names of
:mod:`tapeflow.ops`; ``unsorted_segment_sum`` is in ``tf.math`` too.

>>> import tapeflow as tf
>>> print(tf.stack([[1, 2], [3, 4]], axis=1))
tf.Tensor(
[[1 3]
 [2 4]], shape=(2, 2), dtype=int32)
>>> print(tf.gather([10, 20, 30], [2, 0]))
tf.Tensor([30 10], shape=(2,), dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ..runtime import context as _ctx
from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import as_tensor_list, constant, execute
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.registry import Linear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .composite import COMPOSITE_TYPES, any_composite, dispatch
from . import math as _m
from . import reductions as _r
from .library import batch_axis, batch_one_axis, defop, rerun
from .array_creation import (_here, _index, _ndim, _norm_axis1, _prod, _range, _scalar_arg,
                             _shape_tuple, _tensor, range, zeros, zeros_like)
from .array_shape import _RESHAPE, _TRANSPOSE, reshape, transpose
from .reductions import broadcast_to
from . import batching as _b
from .array_values import _WHERE, clip_by_value, identity, where

__all__ = ['concat', 'stack', 'unstack', 'split', 'tile', 'boolean_mask', 'gather', 'gather_nd',
           'scatter_nd', 'unsorted_segment_sum', 'reverse_sequence', 'roll', 'meshgrid']

# --- joining and splitting -------------------------------------------------------------

def _concat_grad(ctx, dy):
    axis = ctx.attrs["axis"]
    sizes = tuple(t._data.shape[axis] for t in ctx.inputs)
    return execute(_SPLIT, (dy,), {"size_splits": sizes, "axis": axis})


def _concat_infer(shapes, dtypes, attrs):
    axis = attrs["axis"]
    s0 = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        s = tuple(s)
        if len(s) != len(s0):
            raise InvalidArgumentError(
                f"ConcatOp : Ranks of all input tensors should match: shape[0] = {list(s0)} vs. "
                f"shape[{i}] = {list(s)}")
        for d, (a, b) in enumerate(zip(s0, s)):
            if d != axis and a != b:
                raise InvalidArgumentError(
                    f"ConcatOp : Dimension {d} in both shapes must be equal: shape[0] = "
                    f"{list(s0)} vs. shape[{i}] = {list(s)}")
    out = list(s0)
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), dtypes[0])]


_CONCAT = defop("ConcatV2", inputs=("*values",), attrs={"axis": 0}, grad=_concat_grad,
                infer=_concat_infer, jvp=Linear())


@_CONCAT.def_batch
def _concat_batch(ctx, *xs):
    return rerun(ctx, _b.batch_all(ctx, xs),
                 axis=batch_axis(ctx.attrs["axis"], len(xs[0].shape) - ctx.batched[0]))


def concat(values, axis, name="concat"):
    """Join tensors along an existing ``axis``.

    >>> import tapeflow as tf
    >>> print(tf.concat([[[1, 2]], [[3, 4]]], 0))
    tf.Tensor(
    [[1 2]
     [3 4]], shape=(2, 2), dtype=int32)
    """
    if any_composite(values):
        return dispatch(concat, values, axis, name)
    vals = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if not vals:
        raise InvalidArgumentError("concat needs at least one tensor", op="ConcatV2",
                                   device=_here())
    nd = _ndim(vals[0])
    a = _norm_axis1(axis, nd, "ConcatV2", vals[0])
    if len(vals) == 1:
        return identity(vals[0])
    return execute(_CONCAT, vals, {"axis": a})


def _stack_grad(ctx, dy):
    return execute(_UNSTACK, (dy,), {"num": len(ctx.inputs), "axis": ctx.attrs["axis"]})


def _stack_infer(shapes, dtypes, attrs):
    s0 = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s) != s0:
            raise InvalidArgumentError(
                f"Shapes of all inputs must match: values[0].shape = {list(s0)} != "
                f"values[{i}].shape = {list(s)}")
    out = list(s0)
    out.insert(attrs["axis"], len(shapes))
    return [(tuple(out), dtypes[0])]


_STACK = defop("Pack", inputs=("*values",), attrs={"axis": 0}, grad=_stack_grad,
               infer=_stack_infer, attr_types={"axis": "axis+1"}, jvp=Linear())


@_STACK.def_batch
def _stack_batch(ctx, *xs):
    r = len(xs[0].shape) - ctx.batched[0]
    return rerun(ctx, _b.batch_all(ctx, xs), axis=batch_axis(ctx.attrs["axis"], r + 1))


def stack(values, axis=0, name="stack"):
    """Stack tensors of one shape along a new ``axis``.

    >>> import tapeflow as tf
    >>> tf.stack([[1, 2], [3, 4], [5, 6]], axis=1).shape
    TensorShape([2, 3])
    """
    if any_composite(values):
        return dispatch(stack, values, axis, name)
    vals = as_tensor_list(values, "Pack", "stack's values")
    if not vals:
        raise InvalidArgumentError("stack needs at least one tensor", op="Pack", device=_here())
    a = _norm_axis1(axis, _ndim(vals[0]), "Pack", vals[0], 1)
    return execute(_STACK, vals, {"axis": a})


def _unstack_grad(ctx, *dys):
    return execute(_STACK, dys, {"axis": ctx.attrs["axis"]})


def _check_unstack(op, tensors, attrs, device):
    shape = tensors[0]._data.shape
    if not shape:
        raise InvalidArgumentError("Input must be at least rank 1 to unstack, got a scalar")
    if attrs["num"] != shape[attrs["axis"]]:
        raise InvalidArgumentError(
            f"num={attrs['num']} but the input has {shape[attrs['axis']]} elements along axis "
            f"{attrs['axis']} (shape {list(shape)})")


_UNSTACK = defop("Unpack", inputs=("x",), attrs={"num": None, "axis": 0}, dtype_rule="none",
                 check=_check_unstack,
                 num_outputs=lambda attrs, n: attrs["num"], grad=_unstack_grad,
                 jvp=Linear(), batch=batch_one_axis)


def unstack(value, num=None, axis=0, name="unstack"):
    """Split ``value`` along ``axis`` into a list of tensors of one rank less.

    >>> import tapeflow as tf
    >>> a, b = tf.unstack([[1, 2], [3, 4]], axis=1)
    >>> print(a)
    tf.Tensor([1 3], shape=(2,), dtype=int32)
    """
    x = _tensor(value)
    s = x._data.shape
    a = _norm_axis1(axis, len(s), "Unpack", x)
    n = s[a]
    if num is not None and _shapes.as_index(num, "num", "Unpack", x._device) != n:
        raise InvalidArgumentError(
            f"unstack: num={num} does not match dimension {a} of size {n}", op="Unpack",
            device=x._device)
    return list(execute(_UNSTACK, (x,), {"num": n, "axis": a}))


def _split_grad(ctx, *dys):
    return execute(_CONCAT, dys, {"axis": ctx.attrs["axis"]})


_SPLIT = defop("SplitV", inputs=("x",), attrs={"size_splits": None, "axis": 0},
               dtype_rule="none", num_outputs=lambda attrs, n: len(attrs["size_splits"]),
               grad=_split_grad, jvp=Linear(), batch=batch_one_axis)


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Split into ``num_or_size_splits`` equal parts, or parts of the given sizes
    (one size may be -1), along ``axis``.

    >>> import tapeflow as tf
    >>> [t.shape[1] for t in tf.split(tf.zeros([2, 10]), [2, -1, 3], axis=1)]
    [2, 5, 3]
    """
    if type(value) in COMPOSITE_TYPES:
        return dispatch(split, value, num_or_size_splits, axis, num, name)
    x = _tensor(value)
    s = x._data.shape
    dev = x._device
    a = _norm_axis1(axis, len(s), "SplitV", x)
    n = s[a]
    k = num_or_size_splits
    if num is not None:     # TF: the number of outputs when sizes are a tensor; must agree
        num = _shapes.as_index(num, "num", "SplitV", dev)
    if isinstance(k, (Tensor, Variable, np.ndarray)):
        k = np.asarray(k)
        k = k.item() if k.ndim == 0 else k.tolist()
    if isinstance(k, (list, tuple)):
        sizes = list(_shape_tuple(k, "SplitV"))
        if sizes.count(-1) > 1 or any(z < -1 for z in sizes):
            raise InvalidArgumentError(
                f"split: sizes {sizes} may contain at most one -1 and no other negative value",
                op="SplitV", device=dev)
        if -1 in sizes:
            rest = n - (sum(sizes) + 1)
            if rest < 0:
                raise InvalidArgumentError(
                    f"split: sizes {sizes} add up to more than dimension {a} of size {n}",
                    op="SplitV", device=dev)
            sizes[sizes.index(-1)] = rest
        if sum(sizes) != n:
            raise InvalidArgumentError(
                f"Determined shape must either match input shape along split_dim exactly if "
                f"fully specified, or be less than the size of the input along split_dim if "
                f"not fully specified.  Got: {sum(sizes)} vs. {n}", op="SplitV", device=dev)
    else:
        k = _index(k)
        if k <= 0 or n % k:
            raise InvalidArgumentError(
                f"Number of ways to split should evenly divide the split dimension, but got "
                f"split_dim {a} (size = {n}) and num_split {k}", op="SplitV", device=dev)
        sizes = [n // k] * k
    if num is not None and num != len(sizes):
        raise InvalidArgumentError(f"split: num={num} but the split makes {len(sizes)} parts",
                                   op="SplitV", device=dev)
    return list(execute(_SPLIT, (x,), {"size_splits": tuple(sizes), "axis": a}))


def _tile_grad(ctx, dy):
    m = ctx.attrs["multiples"]
    s = ctx.inputs[0]._data.shape
    if all(k == 1 for k in m):
        return dy
    inter = []
    for k, d in zip(m, s):
        inter += [k, d]
    g = execute(_RESHAPE, (dy,), {"shape": tuple(inter)})
    return _r.reduce_sum(g, axis=tuple(_range(0, 2 * len(s), 2)))


def _check_tile(op, tensors, attrs, device):
    """Tile's signature check: one multiple per dimension, and a result that fits."""
    x, m = tensors[0], attrs["multiples"]
    shape = x._data.shape
    if len(m) != len(shape):
        raise InvalidArgumentError(
            f"Expected multiples argument to be a vector of length {len(shape)} but got "
            f"length {len(m)} (input shape {list(shape)})")
    for i, k in enumerate(m):
        if k < 0:
            raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {k}")
    _shapes.check_allocation(tuple(d * k for d, k in zip(shape, m)), x.dtype, device, op.name)


_TILE = defop("Tile", inputs=("x",), attrs={"multiples": None}, dtype_rule="none",
              grad=_tile_grad, check=_check_tile, jvp=Linear())


@_TILE.def_batch
def _tile_batch(ctx, x):
    return rerun(ctx, (x,), multiples=(1,) + tuple(ctx.attrs["multiples"]))


def tile(input, multiples, name=None):
    """Repeat ``input`` ``multiples[i]`` times along each dimension ``i``.

    >>> import tapeflow as tf
    >>> print(tf.tile([[1, 2]], [2, 2]))
    tf.Tensor(
    [[1 2 1 2]
     [1 2 1 2]], shape=(2, 4), dtype=int32)
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(tile, input, multiples, name)
    return execute(_TILE, (input,), {"multiples": _shape_tuple(multiples, "Tile")})


def batch_coords(ctx, indices):
    """``indices`` (B, ..., K) with the example's index prepended: (B, ..., K+1)."""
    s = tuple(indices.shape)
    ids = np.arange(ctx.size, dtype=indices.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1))
    ids = constant(np.broadcast_to(ids, s[:-1] + (1,)).copy(), device=indices._device)
    return concat([ids, indices], axis=-1)


# --- indexing by index tensors: boolean_mask ----------------------------------------

def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """The elements (or slices) of ``tensor`` where ``mask`` is true; ``mask`` covers
    dimensions ``axis .. axis + mask.ndim`` of ``tensor``.

    >>> import tapeflow as tf
    >>> print(tf.boolean_mask([[1, 2], [3, 4], [5, 6]], [True, False, True]))
    tf.Tensor(
    [[1 2]
     [5 6]], shape=(2, 2), dtype=int32)
    """
    if type(tensor) in COMPOSITE_TYPES or type(mask) in COMPOSITE_TYPES:
        return dispatch(boolean_mask, tensor, mask, axis, name)
    x = _tensor(tensor)
    m = mask if isinstance(mask, (Tensor, Variable)) else constant(mask, dtype=_dt.bool_,
                                                                    device=x._device)
    s = x._data.shape
    ms = tuple(m.shape)
    a = 0 if axis is None else _norm_axis1(axis, len(s), "Where", x)
    k = len(ms)
    if k == 0 or tuple(s[a:a + k]) != ms:
        raise InvalidArgumentError(
            f"boolean_mask: mask of shape {list(ms)} must match dimensions {a}..{a + k - 1} of "
            f"the tensor of shape {list(s)}", op="Where", device=x._device)
    if not m.dtype.is_bool:
        raise InvalidArgumentError(f"boolean_mask: mask must be bool, got {m.dtype.name}",
                                   op="Where", device=x._device)
    if k > 1:
        x = reshape(x, s[:a] + (_prod(ms),) + s[a + k:])
        m = reshape(m, (-1,))
    idx = reshape(execute(_WHERE, (m,)), (-1,))
    return gather(x, idx, axis=a)


# --- gather / scatter ---------------------------------------------------------------------

def _gather_grad(ctx, dy):
    params, indices = ctx.inputs
    if not params.dtype.is_inexact:
        return None, None
    axis = ctx.attrs["axis"]
    b = ctx.attrs["batch_dims"]
    ps = params._data.shape
    n = ps[axis]
    isz = _prod(indices._data.shape[b:])
    inner = ps[axis + 1:]
    rest = tuple(_range(3, 3 + len(inner)))
    if b == 0:
        ids = indices if indices.ndim == 1 else execute(_RESHAPE, (indices,), {"shape": (isz,)})
        if axis == 0:
            vals = execute(_RESHAPE, (dy,), {"shape": (isz,) + inner})
            return unsorted_segment_sum(vals, ids, n), None
        P = _prod(ps[:axis])
        vals = execute(_RESHAPE, (dy,), {"shape": (P, isz) + inner})
        vals = execute(_TRANSPOSE, (vals,), {"perm": (1, 0) + tuple(r - 1 for r in rest)})
        s = unsorted_segment_sum(vals, ids, n)
        s = execute(_TRANSPOSE, (s,), {"perm": (1, 0) + tuple(r - 1 for r in rest)})
        return execute(_RESHAPE, (s,), {"shape": ps}), None
    B = _prod(ps[:b])
    P = _prod(ps[b:axis])
    vals = execute(_RESHAPE, (dy,), {"shape": (B, P, isz) + inner})
    vals = execute(_TRANSPOSE, (vals,), {"perm": (0, 2, 1) + rest})
    vals = execute(_RESHAPE, (vals,), {"shape": (B * isz, P) + inner})
    with _devs.device(indices._device):
        offs = range(0, B * n, n, dtype=indices.dtype) if B else zeros((0,), indices.dtype)
    ids = _m.add(execute(_RESHAPE, (indices,), {"shape": (B, isz)}),
              execute(_RESHAPE, (offs,), {"shape": (B, 1)}))
    ids = execute(_RESHAPE, (ids,), {"shape": (B * isz,)})
    s = unsorted_segment_sum(vals, ids, B * n)
    s = execute(_RESHAPE, (s,), {"shape": (B, n, P) + inner})
    s = execute(_TRANSPOSE, (s,), {"perm": (0, 2, 1) + rest})
    return execute(_RESHAPE, (s,), {"shape": ps}), None


_GATHER = defop("GatherV2", inputs=("params", "indices"), attrs={"axis": 0, "batch_dims": 0},
                dtype_rule="none", grad=_gather_grad, jvp=Linear((0,)))


@_GATHER.def_batch
def _gather_batch(ctx, params, indices):
    axis, bd = ctx.attrs["axis"], ctx.attrs["batch_dims"]
    if ctx.batched[0] and not ctx.batched[1] and bd == 0:
        return rerun(ctx, (params, indices), axis=axis + 1)
    if ctx.batched[1] and not ctx.batched[0] and bd == 0:
        # the batch of indices lands at dimension `axis`: move it to the front
        y = rerun(ctx, (params, indices))
        if axis == 0:
            return y
        r = len(y.shape)
        return transpose(y, (axis,) + tuple(i for i in _range(r) if i != axis))
    params, indices = _b.batch_all(ctx, (params, indices))
    return rerun(ctx, (params, indices), axis=axis + 1, batch_dims=bd + 1)
_GATHER_ATTRS0 = {"axis": 0, "batch_dims": 0}


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """Slices of ``params`` along ``axis`` at ``indices`` (an embedding lookup along 0).
    Indices outside ``[0, params.shape[axis])`` raise InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.gather([10., 20., 30.], [2, 0]))
    tf.Tensor([30. 10.], shape=(2,), dtype=float32)
    >>> print(tf.gather([[1, 2], [3, 4]], [1], axis=1))
    tf.Tensor(
    [[2]
     [4]], shape=(2, 1), dtype=int32)
    """
    if type(params) in COMPOSITE_TYPES or type(indices) in COMPOSITE_TYPES:
        return dispatch(gather, params, indices, validate_indices, axis, batch_dims, name)
    if (type(batch_dims) is int and not batch_dims and (axis is None or (type(axis) is int
                                                                        and axis == 0))
            and (type(params) is Tensor or type(params) is Variable) and params.ndim):
        return execute(_GATHER, (params, indices), _GATHER_ATTRS0)
    nd = _ndim(params)
    b = _index(batch_dims)
    if b < 0:
        b += _ndim(indices)
    a = b if axis is None else _norm_axis1(axis, nd, "GatherV2", params)
    if not 0 <= b <= a or b > _ndim(indices):
        raise InvalidArgumentError(
            f"batch_dims ({batch_dims}) must be non-negative, at most the rank of indices and "
            f"at most axis ({a})", op="GatherV2", device=_here(params))
    if nd == 0:
        raise InvalidArgumentError("params must be at least 1 dimensional", op="GatherV2",
                                   device=_here(params))
    return execute(_GATHER, (params, indices), {"axis": a, "batch_dims": b})


def _gather_nd_grad(ctx, dy):
    params, indices = ctx.inputs
    if not params.dtype.is_inexact:
        return None, None
    return execute(_SCATTER_ND, (indices, dy), {"shape": params._data.shape}), None


_GATHER_ND = defop("GatherNd", inputs=("params", "indices"), dtype_rule="none",
                   grad=_gather_nd_grad, jvp=Linear((0,)))


@_GATHER_ND.def_batch
def _gather_nd_batch(ctx, params, indices):
    if not ctx.batched[0]:
        return execute(ctx.op, (params, indices), ctx.attrs)    # (B, ..., K) indices
    if not ctx.batched[1]:
        indices = broadcast_to(indices, (ctx.size,) + tuple(indices.shape))
    return execute(ctx.op, (params, batch_coords(ctx, indices)), ctx.attrs)


def gather_nd(params, indices, batch_dims=0, name=None):
    """``params[indices[..., 0], indices[..., 1], ...]``: the innermost dimension of
    ``indices`` indexes the leading dimensions of ``params``.

    >>> import tapeflow as tf
    >>> print(tf.gather_nd([[1, 2], [3, 4]], [[0, 1], [1, 0]]))
    tf.Tensor([2 3], shape=(2,), dtype=int32)
    """
    if type(params) in COMPOSITE_TYPES or type(indices) in COMPOSITE_TYPES:
        return dispatch(gather_nd, params, indices, batch_dims, name)
    b = batch_dims if type(batch_dims) is int else _shapes.as_index(
        batch_dims, "batch_dims", "GatherNd", _here(params))
    if not b:
        return execute(_GATHER_ND, (params, indices))
    p = _tensor(params)
    ind = _tensor(indices)
    ps, ins = p._data.shape, ind._data.shape
    if b < 0 or b >= len(ins) or ps[:b] != ins[:b]:
        raise InvalidArgumentError(
            f"gather_nd: batch_dims={batch_dims} needs params.shape[:{b}] == "
            f"indices.shape[:{b}], got {list(ps)} and {list(ins)}", op="GatherNd",
            device=p._device)
    B = _prod(ps[:b])
    M = _prod(ins[b:-1])
    K = ins[-1]
    p2 = reshape(p, (B,) + ps[b:])
    i2 = reshape(ind, (B, M, K))
    with _devs.device(ind._device):
        bidx = broadcast_to(reshape(range(B, dtype=ind.dtype), (B, 1, 1)), (B, M, 1))
    out = gather_nd(p2, concat([bidx, i2], -1))
    return reshape(out, ins[:-1] + ps[b + K:])


def _scatter_nd_grad(ctx, dy):
    indices, updates = ctx.inputs
    if not updates.dtype.is_inexact:
        return None, None
    return None, execute(_GATHER_ND, (dy, indices))


_SCATTER_ND = defop("ScatterNd", inputs=("indices", "updates"), attrs={"shape": None},
                    dtype_rule="none", dtype_from=1, grad=_scatter_nd_grad, jvp=Linear((1,)))


@_SCATTER_ND.def_batch
def _scatter_nd_batch(ctx, indices, updates):
    indices, updates = _b.batch_all(ctx, (indices, updates))
    return rerun(ctx, (batch_coords(ctx, indices), updates),
                 shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


def scatter_nd(indices, updates, shape, name=None):
    """Zeros of ``shape`` with ``updates`` added at ``indices`` (duplicates sum up).

    >>> import tapeflow as tf
    >>> print(tf.scatter_nd([[1], [3], [1]], [1., 2., 3.], [5]))
    tf.Tensor([0. 4. 0. 2. 0.], shape=(5,), dtype=float32)
    """
    s = _shape_tuple(shape, "ScatterNd")
    if any(d < 0 for d in s):
        raise InvalidArgumentError(f"scatter_nd: shape must be non-negative, got {list(s)}",
                                   op="ScatterNd", device=_here(updates))
    return execute(_SCATTER_ND, (indices, updates), {"shape": s})


def _segment_sum_grad(ctx, dy):
    data, ids = ctx.inputs
    if not data.dtype.is_inexact:
        return None, None
    n = ctx.attrs["num_segments"]
    if n == 0:
        return zeros_like(data), None
    # gather, dropping negative ids (their data was dropped in the forward pass)
    g = gather(dy, clip_by_value(ids, 0, n - 1))
    keep = _m.cast(_m.add(clip_by_value(ids, -1, 0), 1), dy.dtype)
    keep = execute(_RESHAPE, (keep,), {"shape": ids._data.shape + (1,) * (dy.ndim - 1)})
    return _m.multiply(g, keep), None


_SEGMENT_SUM = defop("UnsortedSegmentSum", inputs=("data", "segment_ids"),
                     attrs={"num_segments": None}, dtype_rule="none", grad=_segment_sum_grad,
                     jvp=Linear((0,)))


@_SEGMENT_SUM.def_batch
def _segment_sum_batch(ctx, data, ids):
    data, ids = _b.batch_all(ctx, (data, ids))
    k = ctx.attrs["num_segments"]
    s = tuple(ids.shape)
    off = np.arange(ctx.size, dtype=ids.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1)) * k
    off = constant(np.broadcast_to(off, s).copy(), device=ids._device)
    # a negative id drops its row: keep it negative
    ids = where(_m.less(ids, 0), ids, _m.add(ids, off))
    y = rerun(ctx, (data, ids), num_segments=ctx.size * k)
    return reshape(y, (ctx.size, k) + tuple(y.shape[1:]))


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``out[i] = sum(data[j] for j where segment_ids[j] == i)`` for ``i < num_segments``
    (entries with a negative id are dropped).

    >>> import tapeflow as tf
    >>> print(tf.unsorted_segment_sum([1., 2., 3.], [1, 0, 1], 2))
    tf.Tensor([2. 4.], shape=(2,), dtype=float32)
    """
    n = _index(_scalar_arg(num_segments, "num_segments", "UnsortedSegmentSum"))
    if n < 0:
        raise InvalidArgumentError(f"num_segments must be non-negative, got {n}",
                                   op="UnsortedSegmentSum", device=_here(data))
    return execute(_SEGMENT_SUM, (data, segment_ids), {"num_segments": n})


# --- reverse_sequence and roll (issue 47): gathers by computed indices ---------------------

def _axis_list(axis, nd, fn, op, x):
    """``axis`` (a 1-D list/array/tensor of ints) as distinct non-negative axes of a
    rank-``nd`` tensor; TensorFlow's messages for the bad ones."""
    try:
        a = np.asarray(axis.numpy() if isinstance(axis, (Tensor, Variable)) else axis)
    except (ValueError, TypeError):         # (a ragged list)
        a = np.zeros((0, 0))
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu") or a.size > 1024:
        raise InvalidArgumentError(f"{fn}: 'axis' must be a 1-D list of ints, got "
                                   f"{_shapes.short_repr(axis)}", op=op, device=_here(x))
    out = []
    for i, v in enumerate(a.tolist()):
        if not -nd <= v < nd:
            raise InvalidArgumentError(f"'axis'[{i}] = {v} is out of valid range [0, {nd})",
                                       op=op, device=_here(x))
        if v % nd in out:
            raise InvalidArgumentError(f"axis {v % nd} specified more than once.", op=op,
                                       device=_here(x))
        out.append(v % nd)
    return out


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=0, name=None):  # noqa: A002
    """For each ``i`` along ``batch_axis``, the first ``seq_lengths[i]`` elements along
    ``seq_axis`` reversed (the rest kept). Differentiable in ``input``.

    >>> import tapeflow as tf
    >>> print(tf.reverse_sequence([[1, 2, 3], [4, 5, 6]], [2, 3], seq_axis=1))
    tf.Tensor(
    [[2 1 3]
     [6 5 4]], shape=(2, 3), dtype=int32)
    """
    x = _tensor(input)
    nd = len(x.shape)
    if seq_axis is None:
        raise InvalidArgumentError("reverse_sequence: seq_axis is required",
                                   op="ReverseSequence", device=x._device)
    sa, ba = _axis_list([seq_axis, batch_axis], nd, "reverse_sequence", "ReverseSequence", x)
    lens = _tensor(seq_lengths)
    if not lens.dtype.is_integer:
        raise InvalidTypeError(f"reverse_sequence: seq_lengths must be int32 or int64, got "
                               f"{lens.dtype.name}", op="ReverseSequence", device=x._device)
    lens = _m.cast(lens, _dt.int64)
    b, t = x.shape[ba], x.shape[sa]
    if tuple(lens.shape) != (b,):
        raise InvalidArgumentError(
            f"reverse_sequence: seq_lengths must be a vector of length {b} (the batch "
            f"dimension), got shape {list(lens.shape)}", op="ReverseSequence", device=x._device)
    if not _ctx.tracing[0]:             # (eager lengths: TensorFlow's checks)
        for i, n in enumerate(lens.numpy().tolist()):
            if not 0 <= n <= t:
                raise InvalidArgumentError(
                    f"seq_lens({i}) {'< 0' if n < 0 else f'> input.dims({sa})'}",
                    op="ReverseSequence", device=x._device)
    with _devs.device(x._device):
        pos = reshape(range(0, t, 1, _dt.int64), (1, t))
    lens = reshape(lens, (b, 1))
    src = where(_m.less(pos, lens), _m.subtract(_m.subtract(lens, 1), pos), pos)   # (b, t)
    perm = [ba, sa] + [i for i in _range(nd) if i not in (ba, sa)]
    moved = transpose(x, perm)
    out = gather(moved, src, axis=1, batch_dims=1)
    return transpose(out, [perm.index(i) for i in _range(nd)])


def roll(input, shift, axis, name=None):  # noqa: A002
    """``input`` with its elements shifted by ``shift`` along ``axis`` (both ints or 1-D
    lists; elements leaving one end come back at the other). Differentiable.

    >>> import tapeflow as tf
    >>> print(tf.roll([1, 2, 3, 4], shift=1, axis=0))
    tf.Tensor([4 1 2 3], shape=(4,), dtype=int32)
    """
    x = _tensor(input)

    def ints(v):            # (a ragged nested list is no array: refused below, not by NumPy)
        try:
            return np.atleast_1d(np.asarray(v.numpy() if isinstance(v, (Tensor, Variable))
                                            else v))
        except (ValueError, TypeError):
            return np.zeros((0, 0))

    shifts, axes_in = ints(shift), ints(axis)
    if shifts.shape != axes_in.shape or shifts.ndim != 1 or shifts.dtype.kind not in "iu":
        raise InvalidArgumentError(f"roll: shift and axis must be ints or 1-D lists of ints of "
                                   f"one length, got {_shapes.short_repr(shift)} and "
                                   f"{_shapes.short_repr(axis)}", op="Roll", device=_here(x))
    nd = len(x.shape)
    for s, a in zip(shifts.tolist(), axes_in.tolist()):
        if not isinstance(a, int) or not -nd <= a < nd:
            raise InvalidArgumentError(f"roll: axis {a} is out of range for a tensor of rank "
                                       f"{nd}", op="Roll", device=_here(x))
        n = x.shape[a % nd]
        if n:
            k = s % n
            if k:
                with _devs.device(x._device):
                    idx = _m.floormod(range(n - k, 2 * n - k, 1, _dt.int64), n)
                x = gather(x, idx, axis=a % nd)
    return x


def meshgrid(*args, **kwargs):
    """Coordinate grids from 1-D coordinate vectors (each input is flattened): with
    ``indexing="xy"`` (the default, Cartesian) the first two output dimensions are
    swapped, with ``"ij"`` (matrix) output ``i`` varies along dimension ``i``.

    >>> import tapeflow as tf
    >>> X, Y = tf.meshgrid([1, 2, 3], [4, 5])
    >>> print(X.shape, Y[:, 0])
    (2, 3) tf.Tensor([4 5], shape=(2,), dtype=int32)
    """
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise InvalidArgumentError(f"meshgrid: unknown keyword arguments {sorted(kwargs)}; it "
                                   "takes indexing= and name=")
    if not isinstance(indexing, str) or indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got "
                                   f"{_shapes.short_repr(indexing)}")
    ts = [reshape(_tensor(a), (-1,)) for a in args]
    shape = [t.shape[0] for t in ts]
    swap = indexing == "xy" and len(ts) > 1
    if swap:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        axis = 1 - i if swap and i < 2 else i
        view = [1] * len(ts)
        view[axis] = shape[axis]
        out.append(broadcast_to(reshape(t, tuple(view)), tuple(shape)))
    return out
