"""Indexing by index tensors: ``boolean_mask``, ``gather``, ``gather_nd``, ``scatter_nd``,
``unsorted_segment_sum``. Re-exported by :mod:`tapeflow.ops.array`.

>>> import tapeflow as tf
>>> print(tf.gather([10, 20, 30], [2, 0]))
tf.Tensor([30 10], shape=(2,), dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import constant, execute
from ..errors import InvalidArgumentError
from ..runtime.registry import Linear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import math_ops as _m
from .library import defop, rerun
from ._array_common import (_here, _index, _ndim, _norm_axis1, _prod, _range, _scalar_arg,
                            _shape_tuple, _tensor)
from .array_creation import range, zeros, zeros_like
from .array_shape import _RESHAPE, _TRANSPOSE, reshape, transpose
from .reductions import broadcast_to
from .array_batching import batch_all
from .array_values import _WHERE, clip_by_value, where
from .array_join import batch_coords, concat

__all__ = ['boolean_mask', 'gather', 'gather_nd', 'scatter_nd', 'unsorted_segment_sum']

def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """The elements (or slices) of ``tensor`` where ``mask`` is true; ``mask`` covers
    dimensions ``axis .. axis + mask.ndim`` of ``tensor``.

    >>> import tapeflow as tf
    >>> print(tf.boolean_mask([[1, 2], [3, 4], [5, 6]], [True, False, True]))
    tf.Tensor(
    [[1 2]
     [5 6]], shape=(2, 2), dtype=int32)
    """
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
    params, indices = batch_all(ctx, (params, indices))
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
    indices, updates = batch_all(ctx, (indices, updates))
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
    data, ids = batch_all(ctx, (data, ids))
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
