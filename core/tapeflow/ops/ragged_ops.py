"""``tf.ragged`` -- the functions of TensorFlow's ``tf.ragged`` namespace -- and the
handlers that let the ordinary ``tf.*`` functions take a :class:`~tapeflow.ops.ragged.RaggedTensor`
(``tf.reduce_sum``, ``tf.concat``, ``tf.gather``, ``tf.shape`` ...).

Long file: the ragged versions of about thirty TensorFlow functions, each a composition of
dense ops on a ragged tensor's components (one module per TensorFlow namespace).

Everything here is a composition of dense tapeflow ops on a ragged tensor's flat values
and row partitions, so it runs on every backend and gradients flow through the flat
values. Index computations use only the static sizes of the components (the number of
rows and of values), so functions that keep the number of values -- reductions along a
ragged axis, ``concat``, ``stack``, ``reverse``, ``where`` -- also run inside
``tf.function``; those whose result size depends on the values (``tf.ragged.range``,
``gather``, ``tile`` along a ragged axis, reductions along axis 0) read that size on the
host, eagerly. docs/ragged.md ("tf.ragged and the tf.* functions on ragged tensors") lists
what each takes and the differences from TensorFlow.

>>> import tapeflow as tf
>>> rt = tf.ragged.constant([[3, 1, 4], [], [1, 5]])
>>> print(tf.reduce_sum(rt, axis=1))
tf.Tensor([8 0 6], shape=(3,), dtype=int32)
>>> print(tf.concat([rt, rt], axis=1))
<tf.RaggedTensor [[3, 1, 4, 3, 1, 4], [], [1, 5, 1, 5]]>
>>> print(tf.ragged.range([3, 0, 2]))
<tf.RaggedTensor [[0, 1, 2], [], [0, 1]]>
"""

from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..runtime import context as _ctx
from ..runtime.dispatch import convert_to_tensor as _convert
from ..runtime.tensor import Tensor
from . import math as _m
from . import reductions as _r
from . import array_creation as _ac
from . import array_shape as _as
from . import array_gather as _ag
from . import array_slice as _sl
from . import array_sort as _so
from . import array_values as _av
from . import nn as _nn
from . import composite as _composite
from .ragged import RaggedTensor, constant, run_check as _run_check

__all__ = ["constant", "range", "row_splits_to_segment_ids", "segment_ids_to_row_splits",
           "map_flat_values", "boolean_mask", "stack", "stack_dynamic_partitions",
           "RowPartition", "DynamicRaggedShape"]

_RT = RaggedTensor

#: how errors name this module's public functions (tapeflow.errors)
PUBLIC_NAMES = {n: f"tf.ragged.{n}" for n in __all__}


# --- small helpers on components ------------------------------------------------------------

def _is_rt(x):
    return isinstance(x, RaggedTensor)


def _outer(x):
    """The static size of the outer dimension (rows of a ragged tensor)."""
    return int(x.row_splits.shape[0]) - 1 if _is_rt(x) else int(x.shape[0])


def _rank(x):
    return x.shape.rank if _is_rt(x) else len(x.shape)


def _host_int(t, what="a size"):
    try:
        v = np.asarray(t.numpy() if isinstance(t, Tensor) else t)
        if v.shape != () or v.dtype.kind not in "iub":
            raise TypeError
        return int(v)
    except (TypeError, ValueError):
        raise InvalidTypeError(f"{what} must be an integer scalar, got "
                               f"{type(t).__name__} {t!r:.60}") from None


def _tracing():
    return bool(_ctx.tracing[0])


def _lengths(splits):
    return splits[1:] - splits[:-1]


def _splits_from_lengths(lengths, dtype):
    lengths = _m.cast(lengths, dtype)
    return _ag.concat([_ac.zeros([1], dtype), _so.cumsum(lengths)], 0)


def _rowids(splits, nvals):
    """The row of each of ``nvals`` values of the row partition ``splits`` (ops only)."""
    dt = splits.dtype
    if nvals == 0:
        return _ac.zeros([0], dt)
    return _m.cast(_so.searchsorted(splits[1:], _ac.range(nvals, dtype=dt), side="right"), dt)


def _from_splits(values, splits):
    return RaggedTensor.from_row_splits(values, splits, validate=False)


def _with_values(rt, values):
    return rt.with_values(values)


def _uniform_splits(nrows, width, dtype):
    return _ac.range(0, nrows * width + 1, builtins.max(width, 1), dtype=dtype) if width else \
        _ac.zeros([nrows + 1], dtype)


def _from_dense(t, ragged_rank, splits_dtype=_dt.int64):
    """A dense tensor as a RaggedTensor of ``ragged_rank`` (uniform row lengths)."""
    t = _convert(t)
    if ragged_rank < 1 or len(t.shape) <= ragged_rank:
        raise InvalidArgumentError(
            f"a dense tensor of shape {list(t.shape)} cannot take part in a ragged operation "
            f"with ragged_rank {ragged_rank}: it needs rank > {ragged_rank}")
    dims = [int(d) for d in t.shape]
    flat = _as.reshape(t, [int(np.prod(dims[:ragged_rank + 1], dtype=np.int64)),
                           *dims[ragged_rank + 1:]])
    out = flat
    for level in builtins.range(ragged_rank, 0, -1):
        nrows = int(np.prod(dims[:level], dtype=np.int64))
        out = _from_splits(out, _uniform_splits(nrows, dims[level], splits_dtype))
    return out


def _to_ragged(x, ragged_rank, like=None):
    """``x`` (RaggedTensor, Tensor or Python list) as a RaggedTensor of at least
    ``ragged_rank`` (a dense part becomes ragged with uniform rows)."""
    if _is_rt(x):
        if x.ragged_rank >= ragged_rank:
            return x
        extra = _from_dense(x.flat_values, ragged_rank - x.ragged_rank, x.row_splits.dtype)
        return RaggedTensor.from_nested_row_splits(
            extra.flat_values, (*x.nested_row_splits, *extra.nested_row_splits), validate=False)
    dtype = like.dtype if like is not None and not isinstance(x, Tensor) else None
    t = _convert(x, dtype=dtype)
    sd = like.row_splits.dtype if like is not None else _dt.int64
    return _from_dense(t, ragged_rank, sd)


def _check_same_dtype(items, fn):
    dts = {x.dtype for x in items}
    if len(dts) > 1:
        raise InvalidTypeError(
            f"tf.{fn}: the inputs have different dtypes "
            f"({', '.join(sorted(str(d.name) for d in dts))}); "
            "cast them to one dtype first (tf.cast)")
    sds = {x.row_splits.dtype for x in items if _is_rt(x)}
    if len(sds) > 1:
        raise InvalidTypeError(
            f"tf.{fn}: the ragged inputs have row_splits of different dtypes (int32 and int64); "
            "convert them with RaggedTensor.with_row_splits_dtype first")


def _norm_axis(axis, rank, fn):
    if isinstance(axis, Tensor):
        axis = _host_int(axis)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise InvalidTypeError(f"tf.{fn}: axis must be an int, got {axis!r}")
    a = int(axis)
    if not -rank <= a < rank:
        raise InvalidArgumentError(
            f"tf.{fn}: axis={a} out of bounds for a ragged tensor of rank {rank}: expected "
            f"{-rank} <= axis < {rank}")
    return a + rank if a < 0 else a


def _common_rank(items, fn):
    ranks = {_rank(x) for x in items}
    if len(ranks) > 1:
        raise InvalidArgumentError(
            f"tf.{fn}: the inputs have different ranks ({sorted(ranks)}); all must have the "
            "same rank")
    return ranks.pop()


def _check_splits_equal(a, b, fn):
    """That two row partitions are the same (at every call of a traced function too)."""
    if a is b:
        return

    def check(x, y):
        if x.shape != y.shape or not np.array_equal(x, y):
            raise InvalidArgumentError(
                f"tf.{fn}: the ragged inputs have different row partitions ({x.tolist()} "
                f"vs {y.tolist()}); they must have the same row lengths here")
    _run_check(check, [a, b], "same_row_partitions")


# --- row gathering, concatenation --------------------------------------------------------------

def _gather_rows(x, idx, total=None):
    """The rows ``idx`` (1-D, in range) of ``x`` (a Tensor or RaggedTensor).
    ``total``: the number of values of the result when known statically (a permutation
    of the rows keeps it); else it is read on the host."""
    if not _is_rt(x):
        return _ag.gather(x, idx)
    splits = x.row_splits
    dt = splits.dtype
    idx = _m.cast(idx, dt)
    out_splits = _splits_from_lengths(_ag.gather(_lengths(splits), idx), dt)
    permutation = total is not None
    n = total if permutation else _host_int(out_splits[-1])
    orow = _rowids(out_splits, n)
    src = (_ag.gather(splits, _ag.gather(idx, orow)) + _ac.range(n, dtype=dt)
           - _ag.gather(out_splits, orow))
    values = _gather_rows(x.values, src, _outer(x.values) if permutation else None)
    return _from_splits(values, out_splits)


def _concat0(items):
    """Concatenate along axis 0 tensors or ragged tensors of one ragged_rank."""
    if not _is_rt(items[0]):
        return _ag.concat(list(items), 0)
    dt = items[0].row_splits.dtype
    pieces, offset = [items[0].row_splits], 0
    for prev, x in zip(items, items[1:]):
        offset += _outer(prev.values)
        pieces.append(x.row_splits[1:] + _m.cast(offset, dt))
    return _from_splits(_concat0([x.values for x in items]), _ag.concat(pieces, 0))


def _stack_axis1(items, fn):
    """``tf.stack(items, axis=1)`` for ragged tensors of one ragged_rank and nrows."""
    n = _outer(items[0])
    if any(_outer(x) != n for x in items):
        raise InvalidArgumentError(
            f"tf.{fn}: the inputs have different numbers of rows "
            f"({[_outer(x) for x in items]}); axis 1 needs the same number")
    k = len(items)
    c = _concat0(items)
    idx = _as.reshape(_as.transpose(_as.reshape(_ac.range(k * n, dtype=_dt.int64), [k, n])),
                      [-1])
    g = _gather_rows(c, idx, _outer(c.values))
    return g, _uniform_splits(n, k, items[0].row_splits.dtype)


def _prepare(values, fn, min_ragged_rank=1):
    """The inputs of concat/stack as ragged tensors of one ragged_rank."""
    items = list(values)
    if not items:
        raise InvalidArgumentError(f"tf.{fn}: values is an empty list")
    like = next(x for x in items if _is_rt(x))
    rr = builtins.max([min_ragged_rank] + [x.ragged_rank for x in items if _is_rt(x)])
    out = [_to_ragged(x, rr, like) for x in items]
    _check_same_dtype(out, fn)
    return out


def _concat(values, axis, fn="concat"):
    items = list(values)
    rank = _common_rank([x if _is_rt(x) else _convert(x) for x in items], fn)
    a = _norm_axis(axis, rank, fn)
    if a == 0:
        return _concat0(_prepare(items, fn))
    items = _prepare(items, fn)
    if a == 1:
        g, _ = _stack_axis1(items, fn)
        return _from_splits(g.values, g.row_splits[::len(items)])
    for x in items[1:]:
        _check_splits_equal(items[0].row_splits, x.row_splits, fn)
    inner = [x.values for x in items]
    return _with_values(items[0], _concat(inner, a - 1, fn) if any(_is_rt(v) for v in inner)
                        else _ag.concat(inner, a - 1))


@_composite.dispatch_for_api(_ag.concat, {"values": _RT})
def _concat_handler(values, axis, name="concat"):
    return _concat(values, axis)


def _stack(values, axis=0, fn="stack"):
    items = list(values)
    dense = [_convert(x) if not _is_rt(x) else x for x in items]
    if all(not _is_rt(x) and len(x.shape) == 1 for x in dense):
        _check_same_dtype(dense, fn)
        if axis not in (0, -2):
            return _ag.stack(dense, axis)
        lengths = [int(x.shape[0]) for x in dense]
        return RaggedTensor.from_row_splits(_ag.concat(dense, 0),
                                            np.cumsum([0] + lengths).astype(np.int64),
                                            validate=False)
    rank = _common_rank(dense, fn)
    a = _norm_axis(axis, rank + 1, fn)
    items = _prepare(items, fn)
    if a == 0:
        c = _concat0(items)
        splits = np.cumsum([0] + [_outer(x) for x in items]).astype(
            items[0].row_splits.dtype.as_numpy_dtype)
        return _from_splits(c, _convert(splits))
    if a == 1:
        g, splits = _stack_axis1(items, fn)
        return _from_splits(g, splits)
    for x in items[1:]:
        _check_splits_equal(items[0].row_splits, x.row_splits, fn)
    return _with_values(items[0], _stack([x.values for x in items], a - 1, fn))


@_composite.dispatch_for_api(_ag.stack, {"values": _RT})
def _stack_handler(values, axis=0, name="stack"):
    return _stack(values, axis)


def stack(values, axis=0, name=None):
    """Stack a list of tensors or ragged tensors along a new ``axis`` into a ragged
    tensor: unlike ``tf.stack``, the inputs may have different lengths (1-D tensors of
    different sizes become the rows).

    >>> import tapeflow as tf
    >>> print(tf.ragged.stack([[1, 2], [3]]))
    <tf.RaggedTensor [[1, 2], [3]]>
    >>> print(tf.ragged.stack([tf.ragged.constant([[1], [2, 3]]), [[4]]]))
    <tf.RaggedTensor [[[1], [2, 3]], [[4]]]>
    """
    if not isinstance(values, (list, tuple)):
        raise InvalidTypeError(f"tf.ragged.stack: values must be a list of tensors or ragged "
                               f"tensors, got {type(values).__name__}")
    if any(_is_rt(x) for x in values):
        return _stack(values, axis, "ragged.stack")
    dense = [_convert(x) for x in values]
    if all(len(x.shape) == 1 for x in dense):
        return _stack(dense, axis, "ragged.stack")
    if dense and all(len(x.shape) >= 2 for x in dense):      # (ragged in all but the rows)
        return _stack([RaggedTensor.from_tensor(x, ragged_rank=len(x.shape) - 1)
                       for x in dense], axis, "ragged.stack")
    return _ag.stack(dense, axis)


# --- reductions ---------------------------------------------------------------------------------

_COMBINE = {"max": _m.maximum, "min": _m.minimum, "prod": _m.multiply}
_DENSE_REDUCE = {"sum": _r.reduce_sum, "max": _r.reduce_max, "min": _r.reduce_min,
                 "prod": _r.reduce_prod}


def _identity(kind, dtype):
    if kind == "prod":
        return 1
    if kind == "sum":
        return 0
    if dtype.is_floating:
        lim = np.finfo(dtype.as_numpy_dtype)
    else:
        lim = np.iinfo(dtype.as_numpy_dtype)
    v = lim.min if kind == "max" else lim.max
    return float(v) if dtype.is_floating else int(v)


def _segment_reduce(kind, data, ids, num, ids_sorted=False):
    """``out[s]`` = the ``kind`` reduction of the rows ``data[j]`` with ``ids[j] == s``
    (``s < num``; the identity for an empty segment): sums by unsorted_segment_sum, the
    others by a segmented scan (log2 steps of elementwise ops) over the rows sorted by id."""
    if kind == "sum":
        return _ag.unsorted_segment_sum(data, ids, num)
    k = _outer(data)
    inner = [int(d) for d in data.shape[1:]]
    ident = _identity(kind, data.dtype)
    if k == 0 or num == 0:
        return _ac.fill([num, *inner], _convert(ident, dtype=data.dtype))
    if not ids_sorted:
        perm = _so.argsort(ids)
        data, ids = _ag.gather(data, perm), _ag.gather(ids, perm)
    combine, x, shift = _COMBINE[kind], data, 1
    bshape = [k] + [1] * len(inner)
    while shift < k:
        prev = _ag.concat([_ac.fill([shift, *inner], _convert(ident, dtype=data.dtype)),
                           x[:-shift]], 0)
        same = _ag.concat([_ac.zeros([shift], _dt.bool_),
                           _m.equal(ids[shift:], ids[:-shift])], 0)
        x = _av.where(_as.reshape(same, bshape), combine(x, prev), x)
        shift *= 2
    counts = _ag.unsorted_segment_sum(_ac.ones([k], ids.dtype), ids, num)
    last = _av.clip_by_value(_so.cumsum(counts) - 1, 0, k - 1)
    return _av.where(_as.reshape(counts > 0, [num] + [1] * len(inner)), _ag.gather(x, last),
                     _convert(ident, dtype=data.dtype))


def _segment_reduce_any(kind, data, ids, num, ids_sorted=False):
    """:func:`_segment_reduce` for ragged ``data`` too (a row of the result is as long as
    the longest row of its segment; its values are reduced position by position)."""
    if not _is_rt(data):
        return _segment_reduce(kind, data, ids, num, ids_sorted)
    splits = data.row_splits
    dt = splits.dtype
    ids = _m.cast(ids, dt)
    out_len = _m.maximum(_segment_reduce("max", _lengths(splits), ids, num, ids_sorted),
                         _m.cast(0, dt))
    out_splits = _splits_from_lengths(out_len, dt)
    nv = _outer(data.values)
    parent = _rowids(splits, nv)
    pos = _ac.range(nv, dtype=dt) - _ag.gather(splits, parent)
    new_ids = _ag.gather(out_splits, _ag.gather(ids, parent)) + pos
    total = _host_int(out_splits[-1]) if num else 0
    return _from_splits(_segment_reduce_any(kind, data.values, new_ids, total), out_splits)


def _reduce_axis(kind, x, a):
    if not _is_rt(x):
        return _DENSE_REDUCE[kind](x, a)
    if a == 0:
        splits = x.row_splits
        dt = splits.dtype
        nv = _outer(x.values)
        pos = _ac.range(nv, dtype=dt) - _ag.gather(splits, _rowids(splits, nv))
        n = _outer(x)
        width = _host_int(_r.reduce_max(_lengths(splits))) if n else 0
        return _segment_reduce_any(kind, x.values, pos, width)
    if a == 1:
        return _segment_reduce_any(kind, x.values, _rowids(x.row_splits, _outer(x.values)),
                                   _outer(x), ids_sorted=True)
    return _with_values(x, _reduce_axis(kind, x.values, a - 1))


def _axes(axis, rank, fn):
    if axis is None:
        return list(builtins.range(rank))
    if isinstance(axis, Tensor):
        axis = np.asarray(axis.numpy()).tolist()
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    out = sorted({_norm_axis(a, rank, fn) for a in axes}, reverse=True)
    return out


def _reduce(kind, rt, axis, keepdims, fn):
    rank = rt.shape.rank
    if axis is None:
        out = _DENSE_REDUCE[kind](rt.flat_values)
        return _as.reshape(out, [1] * rank) if keepdims else out
    x = rt
    for a in _axes(axis, rank, fn):
        x = _reduce_axis(kind, x, a)
        if keepdims:
            x = _expand_dims(x, a)
    return x


def _cast_bool(rt, dtype):
    return rt.with_flat_values(_m.cast(rt.flat_values, dtype))


def _kw_keepdims(keepdims, keep_dims):
    return bool(keep_dims if keep_dims is not None else keepdims)


def _axis_of(axis, reduction_indices):
    return reduction_indices if axis is None and reduction_indices is not None else axis


@_composite.dispatch_for_api(_r.reduce_sum, {"input_tensor": _RT})
def _reduce_sum(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    return _reduce("sum", input_tensor, _axis_of(axis, reduction_indices),
                   _kw_keepdims(keepdims, keep_dims), "reduce_sum")


@_composite.dispatch_for_api(_r.reduce_prod, {"input_tensor": _RT})
def _reduce_prod(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                 reduction_indices=None):
    return _reduce("prod", input_tensor, _axis_of(axis, reduction_indices),
                   _kw_keepdims(keepdims, keep_dims), "reduce_prod")


@_composite.dispatch_for_api(_r.reduce_max, {"input_tensor": _RT})
def _reduce_max(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    return _reduce("max", input_tensor, _axis_of(axis, reduction_indices),
                   _kw_keepdims(keepdims, keep_dims), "reduce_max")


@_composite.dispatch_for_api(_r.reduce_min, {"input_tensor": _RT})
def _reduce_min(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    return _reduce("min", input_tensor, _axis_of(axis, reduction_indices),
                   _kw_keepdims(keepdims, keep_dims), "reduce_min")


def _reduce_bool(kind, rt, axis, keepdims, fn):
    if rt.dtype != _dt.bool_:
        raise InvalidTypeError(f"tf.{fn}: expects a bool ragged tensor, got {rt.dtype.name}")
    out = _reduce(kind, _cast_bool(rt, _dt.int32), axis, keepdims, fn)
    # (an empty row reduces to the identity, int32's min or max: any is False, all True)
    return out.with_flat_values(out.flat_values > 0) if _is_rt(out) else out > 0


@_composite.dispatch_for_api(_r.reduce_any, {"input_tensor": _RT})
def _reduce_any(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    return _reduce_bool("max", input_tensor, _axis_of(axis, reduction_indices),
                        _kw_keepdims(keepdims, keep_dims), "reduce_any")


@_composite.dispatch_for_api(_r.reduce_all, {"input_tensor": _RT})
def _reduce_all(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    return _reduce_bool("min", input_tensor, _axis_of(axis, reduction_indices),
                        _kw_keepdims(keepdims, keep_dims), "reduce_all")


def _mean(rt, axis, keepdims, fn="reduce_mean"):
    total = _reduce("sum", rt, axis, keepdims, fn)
    ones = rt.with_flat_values(_ac.ones_like(rt.flat_values, dtype=total.dtype))
    count = _reduce("sum", ones, axis, keepdims, fn)
    if _is_rt(total):
        return total.with_flat_values(_divide(total.flat_values, count.flat_values))
    return _divide(total, count)


def _divide(total, count):
    """``total / count``, NaN where ``count`` is 0 (without NumPy's warning)."""
    empty = _m.equal(count, _m.cast(0, count.dtype))
    q = _m.truediv(total, _av.where(empty, _m.cast(1, count.dtype), count))
    return _av.where(empty, _m.cast(float("nan"), q.dtype), q)


@_composite.dispatch_for_api(_r.reduce_mean, {"input_tensor": _RT})
def _reduce_mean(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                 reduction_indices=None):
    return _mean(input_tensor, _axis_of(axis, reduction_indices),
                 _kw_keepdims(keepdims, keep_dims))


@_composite.dispatch_for_api(_r.reduce_logsumexp, {"input_tensor": _RT})
def _reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                      reduction_indices=None):
    x, axis = input_tensor, _axis_of(axis, reduction_indices)
    keep = _kw_keepdims(keepdims, keep_dims)
    if not x.dtype.is_floating:
        raise InvalidTypeError(f"tf.reduce_logsumexp: expects a floating ragged tensor, got "
                               f"{x.dtype.name}")
    if axis is None:
        out = _r.reduce_logsumexp(x.flat_values)
        return _as.reshape(out, [1] * x.shape.rank) if keep else out
    axes = axis if isinstance(axis, (list, tuple)) else [axis]
    rank = x.shape.rank
    if [_norm_axis(a, rank, "reduce_logsumexp") for a in axes] != [rank - 1]:
        raise UnimplementedError("tf.reduce_logsumexp of a RaggedTensor reduces all axes or "
                                 "the last one only; convert with .to_tensor() first")
    fv = x.flat_values
    if len(fv.shape) > 1:                      # the last axis is uniform: the flat values'
        out = x.with_flat_values(_r.reduce_logsumexp(fv, -1, keepdims=keep))
        return out
    m = _reduce("max", x, [-1], False, "reduce_logsumexp")
    m_flat = _av.stop_gradient(m.flat_values if _is_rt(m) else m)
    rows = _rowids(x.nested_row_splits[-1], _outer(fv))
    shifted = x.with_flat_values(_m.exp(fv - _ag.gather(m_flat, rows)))
    total = _reduce("sum", shifted, [-1], False, "reduce_logsumexp")
    t_flat = total.flat_values if _is_rt(total) else total
    out_flat = _log(t_flat) + m_flat
    out = total.with_flat_values(out_flat) if _is_rt(total) else out_flat
    return _expand_dims(out, rank - 1) if keep else out


def _log(x):
    """``log(x)`` for ``x >= 0``: -inf at 0 (an empty row), without NumPy's warning."""
    zero = _m.equal(x, _m.cast(0, x.dtype))
    return _av.where(zero, _convert(-np.inf, dtype=x.dtype),
                     _m.log(_av.where(zero, _m.cast(1, x.dtype), x)))


def _variance(input_tensor, axis, keepdims, fn):
    if not input_tensor.dtype.is_floating:
        raise InvalidTypeError(f"tf.math.{fn}: expects a floating ragged tensor, got "
                               f"{input_tensor.dtype.name}")
    sq = input_tensor.with_flat_values(_m.square(input_tensor.flat_values))
    m2, m = _mean(sq, axis, keepdims, fn), _mean(input_tensor, axis, keepdims, fn)
    if _is_rt(m):
        return m.with_flat_values(_m.maximum(m2.flat_values - _m.square(m.flat_values), 0.0))
    return _m.maximum(m2 - _m.square(m), 0.0)


@_composite.dispatch_for_api(_r.reduce_variance, {"input_tensor": _RT})
def _reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    return _variance(input_tensor, axis, keepdims, "reduce_variance")


@_composite.dispatch_for_api(_r.reduce_std, {"input_tensor": _RT})
def _reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    v = _variance(input_tensor, axis, keepdims, "reduce_std")
    return v.with_flat_values(_m.sqrt(v.flat_values)) if _is_rt(v) else _m.sqrt(v)


# --- shape manipulation: expand_dims, tile, reverse ------------------------------------------

def _expand_dims(x, a):
    if not _is_rt(x):
        return _as.expand_dims(x, a)
    if a == 0:
        return RaggedTensor.from_uniform_row_length(x, _outer(x), nrows=1)
    if a == 1:
        return RaggedTensor.from_uniform_row_length(x, 1, nrows=_outer(x))
    return _with_values(x, _expand_dims(x.values, a - 1))


@_composite.dispatch_for_api(_as.expand_dims, {"input": _RT})
def _expand_dims_handler(input, axis, name=None):  # noqa: A002
    return _expand_dims(input, _norm_axis(axis, input.shape.rank + 1, "expand_dims"))


def _multiples(multiples, rank):
    m = multiples.numpy() if isinstance(multiples, Tensor) else multiples
    try:
        arr = np.asarray(m)
        if arr.dtype.kind not in "iu" and arr.size:
            raise TypeError
        m = [int(v) for v in arr.reshape(-1)]
    except (TypeError, ValueError):
        raise InvalidTypeError(f"tf.tile: multiples must be a list of ints, got {multiples!r}")
    if len(m) != rank or any(v < 0 for v in m):
        raise InvalidArgumentError(
            f"tf.tile: multiples must be {rank} non-negative ints (one per dimension of the "
            f"ragged tensor), got {m}")
    return m


def _tile(x, m):
    """``x`` (a ragged tensor) tiled by the ints ``m`` (one per dimension)."""
    values = x.values
    inner = m[2:]
    if any(v != 1 for v in inner):
        values = _tile(values, [1, *inner]) if _is_rt(values) else _ag.tile(values, [1, *inner])
    splits = x.row_splits
    dt = splits.dtype
    if m[1] != 1:
        lens = _lengths(splits)
        out_splits = _splits_from_lengths(lens * _m.cast(m[1], dt), dt)
        n = _outer(values) * m[1]
        orow = _rowids(out_splits, n)
        q = _ac.range(n, dtype=dt) - _ag.gather(out_splits, orow)
        src = _ag.gather(splits, orow) + _m.floormod(q, _m.maximum(_ag.gather(lens, orow),
                                                                   _m.cast(1, dt)))
        x = _from_splits(_gather_rows(values, src, None), out_splits)
    else:
        x = _with_values(x, values)
    if m[0] != 1:
        x = _concat0([x] * m[0]) if m[0] else _gather_rows(x, _ac.zeros([0], dt))
    return x


@_composite.dispatch_for_api(_ag.tile, {"input": _RT})
def _tile_handler(input, multiples, name=None):  # noqa: A002
    return _tile(input, _multiples(multiples, input.shape.rank))


def _reverse(x, axes):
    if not _is_rt(x):
        return _sl.reverse(x, axes) if axes else x
    splits = x.row_splits
    dt = splits.dtype
    if 0 in axes:
        n = _outer(x)
        x = _gather_rows(x, _ac.range(n - 1, -1, -1, dtype=dt), _outer(x.values))
        splits = x.row_splits
    values = x.values
    if 1 in axes:
        nv = _outer(values)
        rows = _rowids(splits, nv)
        src = (_ag.gather(splits[:-1], rows) + _ag.gather(splits[1:], rows) - 1
               - _ac.range(nv, dtype=dt))
        values = _gather_rows(values, src, _outer(values.values) if _is_rt(values) else nv)
    inner = [a - 1 for a in axes if a >= 2]
    if inner:
        values = _reverse(values, inner)
    return _from_splits(values, splits)


@_composite.dispatch_for_api(_sl.reverse, {"tensor": _RT})
def _reverse_handler(tensor, axis, name=None):
    axes = axis.numpy().tolist() if isinstance(axis, Tensor) else axis
    axes = axes if isinstance(axes, (list, tuple)) else [axes]
    rank = tensor.shape.rank
    return _reverse(tensor, sorted({_norm_axis(a, rank, "reverse") for a in axes}))


# --- gather, boolean_mask, where --------------------------------------------------------------

def _check_indices(idx, n, fn):
    if _tracing() or not idx.shape.num_elements():
        return
    v = np.asarray(idx.numpy())
    bad = v[(v < 0) | (v >= n)]
    if bad.size:
        raise InvalidArgumentError(
            f"tf.{fn}: indices {bad[:3].tolist()} are not in [0, {n}) (the rows of the ragged "
            "params); negative indices are not allowed for a ragged tensor")


def _gather(params, indices):
    if _is_rt(indices):
        g = _gather(params, indices.flat_values)
        if _is_rt(g):
            return RaggedTensor.from_nested_row_splits(
                g.flat_values, (*indices.nested_row_splits, *g.nested_row_splits),
                validate=False)
        return indices.with_flat_values(g)
    if not _is_rt(params):
        return _ag.gather(params, indices)
    idx = _convert(indices)
    if not idx.dtype.is_integer:
        raise InvalidTypeError(f"tf.gather: indices must be int32 or int64, got {idx.dtype.name}")
    _check_indices(idx, _outer(params), "gather")
    shape = [int(d) for d in idx.shape]
    g = _gather_rows(params, _as.reshape(idx, [-1]))
    if not shape:
        return g.values
    if len(shape) > 1:
        g = _to_ragged_outer(g, shape)
    return g


def _to_ragged_outer(g, shape):
    """Rows ``g`` (a ragged tensor with prod(shape) rows) grouped as ``shape`` (uniform)."""
    for level in builtins.range(len(shape) - 1, 0, -1):
        nrows = int(np.prod(shape[:level], dtype=np.int64))
        g = RaggedTensor.from_uniform_row_length(g, shape[level], nrows=nrows)
    return g


@_composite.dispatch_for_api(_ag.gather, {"params": _RT}, {"indices": _RT})
def _gather_handler(params, indices, validate_indices=None, axis=None, batch_dims=0,
                    name=None):
    if batch_dims == 1 and _is_rt(params) and _is_rt(indices) and axis in (None, 1, -1) \
            and params.ragged_rank == 1 and indices.ragged_rank == 1:
        flat = (_ag.gather(params.row_splits,
                           _rowids(indices.row_splits, _outer(indices.values)))
                + _m.cast(indices.values, params.row_splits.dtype))
        return indices.with_flat_values(_ag.gather(params.values, flat))
    if batch_dims not in (0, None) or axis not in (None, 0):
        raise UnimplementedError(
            f"tf.gather of a RaggedTensor supports axis=0 and batch_dims=0 (and batch_dims=1 "
            f"for ragged params and indices), got axis={axis}, batch_dims={batch_dims}: "
            "convert with .to_tensor() first")
    return _gather(params, indices)


@_composite.dispatch_for_api(_nn.embedding_lookup, {"ids": _RT})
def _embedding_lookup(params, ids, partition_strategy="mod", name=None,
                      validate_indices=True, max_norm=None):
    return ids.with_flat_values(_nn.embedding_lookup(
        params, ids.flat_values, partition_strategy=partition_strategy, max_norm=max_norm))


def _mask_rows(data, mask):
    idx = _as.reshape(_av.where(mask), [-1])
    return _gather_rows(data, idx) if _is_rt(data) else _ag.gather(data, idx)


def _boolean_mask(data, mask):
    k = _rank(mask)
    if k == 1:
        if _is_rt(mask):
            raise InvalidArgumentError("boolean_mask: a ragged mask has rank >= 2")
        return _mask_rows(data, mask)
    if not _is_rt(mask):
        mask = _from_dense(mask, k - 1, data.row_splits.dtype if _is_rt(data) else _dt.int64)
    if not _is_rt(data):
        data = _from_dense(data, k - 1, mask.row_splits.dtype)
    _check_splits_equal(data.row_splits, mask.row_splits, "ragged.boolean_mask")
    new_values = _boolean_mask(data.values, mask.values)
    if k > 2:
        return _with_values(data, new_values)
    splits = mask.row_splits
    dt = splits.dtype
    counts = _ag.unsorted_segment_sum(_m.cast(mask.values, dt),
                                      _rowids(splits, _outer(mask.values)), _outer(mask))
    return _from_splits(new_values, _splits_from_lengths(counts, dt))


def boolean_mask(data, mask, name=None):
    """The values of ``data`` where ``mask`` is True, keeping the dimensions of ``mask``
    (each row keeps its selected values, so the result is ragged where ``mask`` has rank
    >= 2). ``mask`` is a bool tensor or ragged tensor whose shape is a prefix of
    ``data``'s.

    >>> import tapeflow as tf
    >>> print(tf.ragged.boolean_mask([[1, 2, 3], [4, 5, 6]],
    ...                              [[True, False, True], [False, False, True]]))
    <tf.RaggedTensor [[1, 3], [6]]>
    >>> rt = tf.ragged.constant([[1, 5], [], [7, 2, 9]])
    >>> print(tf.ragged.boolean_mask(rt, rt > 4))
    <tf.RaggedTensor [[5], [], [7, 9]]>
    """
    if not _is_rt(data):
        data = _convert(data)
    if not _is_rt(mask):
        mask = _convert(mask)
    if mask.dtype != _dt.bool_:
        raise InvalidTypeError(f"tf.ragged.boolean_mask: mask must be bool, got "
                               f"{mask.dtype.name}")
    k, r = _rank(mask), _rank(data)
    if k == 0 or k > r:
        raise InvalidArgumentError(
            f"tf.ragged.boolean_mask: mask (rank {k}) must have rank >= 1 and no more than "
            f"data's rank ({r}); its shape is a prefix of data's")
    return _boolean_mask(data, mask)


@_composite.dispatch_for_api(_ag.boolean_mask, {"tensor": _RT}, {"mask": _RT})
def _boolean_mask_handler(tensor, mask, axis=None, name="boolean_mask"):
    if axis not in (None, 0):
        raise UnimplementedError(f"tf.boolean_mask of a RaggedTensor takes axis=0 only, got "
                                 f"axis={axis}")
    return boolean_mask(tensor, mask)


def _flat_like(ref, v, fn):
    if _is_rt(v):
        if v.ragged_rank != ref.ragged_rank:
            raise InvalidArgumentError(f"tf.{fn}: the ragged inputs have different ragged ranks")
        for a, b in zip(ref.nested_row_splits, v.nested_row_splits):
            _check_splits_equal(a, b, fn)
        return v.flat_values
    t = _convert(v, dtype=ref.dtype if not isinstance(v, Tensor) and fn != "where"
                          else None)
    if len(t.shape) == 0:
        return t
    raise InvalidArgumentError(
        f"tf.{fn}: a dense operand of shape {list(t.shape)} beside a ragged one: use a "
        "scalar or a RaggedTensor with the same row partitions (RaggedTensor.from_tensor)")


@_composite.dispatch_for_api(_av.where, {"condition": _RT}, {"x": _RT}, {"y": _RT})
def _where_handler(condition, x=None, y=None, name=None):
    if x is None and y is None:
        if not _is_rt(condition):
            return _av.where(condition)
        return _av.where(condition.to_tensor(default_value=False))
    if x is None or y is None:
        raise InvalidArgumentError("tf.where: give both x and y, or neither")
    ref = next(v for v in (condition, x, y) if _is_rt(v))
    c = _flat_like(ref, condition, "where")
    xv = _flat_like(ref, x, "where")
    yv = _flat_like(ref, y, "where")
    return ref.with_flat_values(_av.where(c, xv, yv))


# --- shape, size, rank --------------------------------------------------------------------

@_composite.dispatch_for_api(_as.size, {"input": _RT})
def _size(input, out_type=_dt.int32, name=None):  # noqa: A002
    return _m.cast(_as.size(input.flat_values, out_type=_dt.int64), out_type)


@_composite.dispatch_for_api(_as.rank, {"input": _RT})
def _rank_handler(input, name=None):  # noqa: A002
    return _convert(input.shape.rank, dtype=_dt.int32)


# --- tf.ragged.range, row partitions as segment ids, map_flat_values -------------------------

def _range_dtype(args, dtype):
    ts = [a if isinstance(a, Tensor) else None for a in args]
    if dtype is not None:
        dtype = _dt.as_dtype(dtype)
        return [_convert(a, dtype=dtype) if t is None else _m.cast(t, dtype)
                for a, t in zip(args, ts)], dtype
    conv = [t if t is not None else _convert(a) for a, t in zip(args, ts)]
    order = [_dt.int32, _dt.int64, _dt.float32, _dt.float64]
    known = [c.dtype for c in conv]
    for d in known:
        if d not in order:
            raise InvalidTypeError(f"tf.ragged.range: starts, limits and deltas must be int32, "
                                   f"int64, float32 or float64, got {d.name}")
    best = builtins.max(known, key=order.index)
    return [_m.cast(c, best) if c.dtype != best else c for c in conv], best


def range(starts, limits=None, deltas=1, dtype=None, name=None,  # noqa: A001
          row_splits_dtype=_dt.int64):
    """A ragged tensor whose row ``i`` is ``tf.range(starts[i], limits[i], deltas[i])``
    (each argument a scalar or a 1-D tensor; scalars apply to every row). With one
    argument, it is ``limits`` and the rows start at 0.

    >>> import tapeflow as tf
    >>> print(tf.ragged.range([1, 4], [4, 5]))
    <tf.RaggedTensor [[1, 2, 3], [4]]>
    >>> print(tf.ragged.range([0, 10], 3, -2))
    <tf.RaggedTensor [[], [10, 8, 6, 4]]>
    """
    if limits is None:
        starts, limits = 0, starts
    (s, l, d), dt = _range_dtype([starts, limits, deltas], dtype)
    for what, t in (("starts", s), ("limits", l), ("deltas", d)):
        if len(t.shape) > 1:
            raise InvalidArgumentError(f"tf.ragged.range: {what} must be a scalar or a 1-D "
                                       f"tensor, got shape {list(t.shape)}")
    sizes = {int(t.shape[0]) for t in (s, l, d) if len(t.shape) == 1}
    if len(sizes) > 1:
        raise InvalidArgumentError(f"tf.ragged.range: starts, limits and deltas have different "
                                   f"lengths {sorted(sizes)}")
    n = sizes.pop() if sizes else 1
    s, l, d = (_r.broadcast_to(t, [n]) for t in (s, l, d))
    if not _tracing() and n and bool(np.any(np.asarray(d.numpy()) == 0)):
        raise InvalidArgumentError("tf.ragged.range: Requires delta != 0 (a row with delta 0 "
                                   "never reaches its limit)")
    sd = _dt.as_dtype(row_splits_dtype)
    if dt.is_integer:
        span = _m.cast(l, _dt.int64) - _m.cast(s, _dt.int64)
        dd = _m.cast(d, _dt.int64)
        lens = _m.floordiv(span + dd - _m.sign(dd), dd)
    else:
        lens = _m.cast(_m.ceil((_m.cast(l, _dt.float64) - _m.cast(s, _dt.float64))
                               / _m.cast(d, _dt.float64)), _dt.int64)
    lens = _m.maximum(lens, _m.cast(0, lens.dtype))
    splits = _splits_from_lengths(lens, sd)
    total = _host_int(splits[-1]) if n else 0
    rows = _rowids(splits, total)
    pos = _m.cast(_ac.range(total, dtype=sd) - _ag.gather(splits, rows), dt)
    values = _ag.gather(s, rows) + pos * _ag.gather(d, rows)
    return _from_splits(values, splits)


def row_splits_to_segment_ids(splits, name=None, out_type=None):
    """The row of each value of the row partition ``splits`` (``out_type``: the dtype of
    ``splits`` by default).

    >>> import tapeflow as tf
    >>> print(tf.ragged.row_splits_to_segment_ids([0, 2, 2, 5]))
    tf.Tensor([0 0 2 2 2], shape=(5,), dtype=int64)
    """
    t = splits if isinstance(splits, Tensor) else _convert(
        splits, dtype=_dt.int64 if not isinstance(splits, Tensor) else None)
    if len(t.shape) != 1 or int(t.shape[0]) < 1 or not t.dtype.is_integer:
        raise InvalidArgumentError(
            f"tf.ragged.row_splits_to_segment_ids: splits must be a 1-D integer tensor with at "
            f"least one element, got shape {list(t.shape)} dtype {t.dtype.name}")
    if not _tracing():
        v = np.asarray(t.numpy())
        if v[0] != 0 or np.any(np.diff(v) < 0):
            raise InvalidArgumentError(
                f"tf.ragged.row_splits_to_segment_ids: splits must start at 0 and never "
                f"decrease, got {v.tolist()}")
    out = _rowids(t, _host_int(t[-1]))
    return _m.cast(out, _dt.as_dtype(out_type)) if out_type is not None else out


def segment_ids_to_row_splits(segment_ids, num_segments=None, out_type=None, name=None):
    """The row partition whose rows hold the runs of the sorted ``segment_ids``
    (``num_segments`` rows, by default ``max(segment_ids) + 1``; int64 unless
    ``out_type``).

    >>> import tapeflow as tf
    >>> print(tf.ragged.segment_ids_to_row_splits([0, 0, 2, 2, 2]))
    tf.Tensor([0 2 2 5], shape=(4,), dtype=int64)
    """
    ids = _convert(segment_ids, dtype=None if isinstance(segment_ids, Tensor)
                            else _dt.int64)
    if len(ids.shape) != 1 or not ids.dtype.is_integer:
        raise InvalidArgumentError(
            f"tf.ragged.segment_ids_to_row_splits: segment_ids must be a 1-D integer tensor, "
            f"got shape {list(ids.shape)} dtype {ids.dtype.name}")
    od = _dt.as_dtype(out_type) if out_type is not None else _dt.int64
    if num_segments is None:
        num_segments = _host_int(_r.reduce_max(ids)) + 1 if int(ids.shape[0]) else 0
    else:
        num_segments = _host_int(num_segments)
    counts = _ag.unsorted_segment_sum(_ac.ones([int(ids.shape[0])], od), ids, num_segments)
    return _splits_from_lengths(counts, od)


def _replace_ragged(value, found):
    if _is_rt(value):
        found.append(value)
        return value.flat_values
    if isinstance(value, (list, tuple)):
        return type(value)(_replace_ragged(v, found) for v in value)
    if isinstance(value, dict):
        return {k: _replace_ragged(v, found) for k, v in value.items()}
    return value


def map_flat_values(op, *args, **kwargs):
    """``op`` applied to the flat values of the ragged tensors among ``args`` and
    ``kwargs`` (also inside lists, tuples and dicts), the result given their row
    partitions. ``op`` must keep the number of values (an elementwise function, or one
    that maps each value to a row). Without ragged arguments it is ``op(*args, **kwargs)``.

    >>> import tapeflow as tf
    >>> rt = tf.ragged.constant([[1, 2], [], [3]])
    >>> print(tf.ragged.map_flat_values(lambda x: x * 10 + 1, rt))
    <tf.RaggedTensor [[11, 21], [], [31]]>
    >>> print(tf.ragged.map_flat_values(tf.add, rt, rt))
    <tf.RaggedTensor [[2, 4], [], [6]]>
    """
    if not callable(op):
        raise InvalidTypeError(f"tf.ragged.map_flat_values: op must be callable, got "
                               f"{type(op).__name__}")
    found = []
    args2 = _replace_ragged(list(args), found)
    kwargs2 = _replace_ragged(dict(kwargs), found)
    if not found:
        return op(*args, **kwargs)
    ref = found[0]
    sizes = {_outer(r.flat_values) for r in found}
    if len(sizes) > 1:
        raise InvalidArgumentError(
            f"tf.ragged.map_flat_values: the ragged arguments' flat_values have different "
            f"numbers of values {sorted(sizes)}; they must share the row partitions")
    for r in found[1:]:
        if r.ragged_rank != ref.ragged_rank:
            raise InvalidArgumentError("tf.ragged.map_flat_values: the ragged arguments have "
                                       "different ragged ranks")
        for a, b in zip(ref.nested_row_splits, r.nested_row_splits):
            _check_splits_equal(a, b, "ragged.map_flat_values")
    out = op(*args2, **kwargs2)
    if not isinstance(out, Tensor):
        out = _convert(out)
    if len(out.shape) == 0 or int(out.shape[0]) != sizes.pop():
        raise InvalidArgumentError(
            f"tf.ragged.map_flat_values: op must keep the number of values: its result has "
            f"shape {list(out.shape)}, the flat values {_outer(ref.flat_values)} rows")
    return ref.with_flat_values(out)


def stack_dynamic_partitions(data, partitions, num_partitions, name=None):
    """A ragged tensor whose row ``p`` holds, in order, the rows of ``data`` whose
    ``partitions`` entry is ``p`` (``0 <= p < num_partitions``).

    >>> import tapeflow as tf
    >>> print(tf.ragged.stack_dynamic_partitions(['a', 'b', 'c', 'd'], [1, 0, 1, 1], 3))
    <tf.RaggedTensor [[b'b'], [b'a', b'c', b'd'], []]>
    """
    data = _convert(data)
    parts = _convert(partitions)
    if not parts.dtype.is_integer or len(parts.shape) != 1 or len(data.shape) < 1 \
            or int(parts.shape[0]) != int(data.shape[0]):
        raise InvalidArgumentError(
            f"tf.ragged.stack_dynamic_partitions: partitions must be a 1-D integer tensor with "
            f"one entry per row of data (data shape {list(data.shape)}, partitions shape "
            f"{list(parts.shape)} dtype {parts.dtype.name})")
    n = _host_int(num_partitions)
    if not _tracing() and int(parts.shape[0]):
        v = np.asarray(parts.numpy())
        if v.min() < 0 or v.max() >= n:
            raise InvalidArgumentError(f"tf.ragged.stack_dynamic_partitions: partitions must "
                                       f"be in [0, {n}), got {v.tolist()}")
    order = _so.argsort(parts)
    counts = _ag.unsorted_segment_sum(_ac.ones([int(parts.shape[0])], _dt.int64), parts, n)
    return _from_splits(_ag.gather(data, order), _splits_from_lengths(counts, _dt.int64))


@_composite.dispatch_for_api(_ac.zeros_like, {"input": _RT})
def _zeros_like(input, dtype=None, name=None):  # noqa: A002
    return input.with_flat_values(_ac.zeros_like(input.flat_values, dtype=dtype))


@_composite.dispatch_for_api(_ac.ones_like, {"input": _RT})
def _ones_like(input, dtype=None, name=None):  # noqa: A002
    return input.with_flat_values(_ac.ones_like(input.flat_values, dtype=dtype))


# --- RowPartition, DynamicRaggedShape (tf.shape of a ragged tensor) ------------------------

class _TFMessageError(InvalidArgumentError):
    """An error whose message is TensorFlow's own, word for word (programs print it)."""

    def __str__(self):
        return self.message


def _index_tensor(x, what, fn, dtype=None):
    if isinstance(x, Tensor):
        t = x if dtype is None or x.dtype == dtype else _m.cast(x, dtype)
    else:
        try:
            t = _convert(np.asarray(x, dtype=np.int64), dtype=dtype or _dt.int64)
        except (TypeError, ValueError):
            raise InvalidTypeError(f"{fn}: {what} must be a 1-D list of ints, got {x!r}")
    if len(t.shape) != 1 or not t.dtype.is_integer:
        raise InvalidArgumentError(f"{fn}: {what} must be a 1-D integer tensor, got shape "
                                   f"{list(t.shape)} dtype {t.dtype.name}")
    return t


class RowPartition:
    """How the values of one ragged dimension are split into rows (``tf.experimental.
    RowPartition``): its ``row_splits``, or a uniform row length. Made with the
    ``from_*`` classmethods.

    >>> import tapeflow as tf
    >>> p = tf.experimental.RowPartition.from_row_lengths([2, 0, 3])
    >>> p
    tf.RowPartition(row_splits=[0 2 2 5])
    >>> print(p.nrows(), p.nvals())
    tf.Tensor(3, shape=(), dtype=int64) tf.Tensor(5, shape=(), dtype=int64)
    """

    def __init__(self, row_splits, uniform_row_length=None, internal=False):
        if internal is not True:
            raise InvalidArgumentError("RowPartition constructor is private; use one of the "
                                       "from_* classmethods (e.g. RowPartition.from_row_lengths)")
        self._splits = row_splits
        self._uniform = uniform_row_length

    @classmethod
    def from_row_splits(cls, row_splits, validate=True, dtype=None, dtype_hint=None):
        t = _index_tensor(row_splits, "row_splits", "RowPartition.from_row_splits", dtype)
        if validate:
            def check(v):
                if v.size == 0 or v[0] != 0 or np.any(np.diff(v) < 0):
                    raise InvalidArgumentError(
                        f"RowPartition.from_row_splits: row_splits must start at 0 and never "
                        f"decrease, got {v.tolist()}")
            _run_check(check, [t], "row_partition_check")
        return cls(t, None, internal=True)

    @classmethod
    def from_row_lengths(cls, row_lengths, validate=True, dtype=None, dtype_hint=None):
        t = _index_tensor(row_lengths, "row_lengths", "RowPartition.from_row_lengths", dtype)
        if validate and not _tracing() and bool(np.any(np.asarray(t.numpy()) < 0)):
            raise InvalidArgumentError("RowPartition.from_row_lengths: row_lengths must be "
                                       f">= 0, got {t.numpy().tolist()}")
        return cls(_splits_from_lengths(t, t.dtype), None, internal=True)

    @classmethod
    def from_value_rowids(cls, value_rowids, nrows=None, validate=True, dtype=None,
                          dtype_hint=None):
        ids = _index_tensor(value_rowids, "value_rowids", "RowPartition.from_value_rowids",
                            dtype)
        return cls(segment_ids_to_row_splits(ids, nrows, out_type=ids.dtype), None,
                   internal=True)

    @classmethod
    def from_uniform_row_length(cls, uniform_row_length, nvals, nrows=None, validate=True,
                                dtype=None, dtype_hint=None):
        k = _host_int(uniform_row_length, "RowPartition.from_uniform_row_length: "
                                          "uniform_row_length")
        nv = _host_int(nvals, "RowPartition.from_uniform_row_length: nvals")
        if k < 0 or (k and nv % k) or (k == 0 and nrows is None and nv):
            raise InvalidArgumentError(
                f"RowPartition.from_uniform_row_length: {nv} values do not split into rows of "
                f"{k} (give nrows when uniform_row_length is 0)")
        n = nv // k if k else _host_int(nrows if nrows is not None else 0)
        if n * k != nv:
            raise InvalidArgumentError(
                f"RowPartition.from_uniform_row_length: uniform_row_length={k} times "
                f"nrows={n} must equal nvals={nv}")
        dt = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
        return cls(_uniform_splits(n, k, dt), k, internal=True)

    def row_splits(self):
        return self._splits

    def row_lengths(self):
        return _lengths(self._splits)

    def row_starts(self):
        return self._splits[:-1]

    def row_limits(self):
        return self._splits[1:]

    def value_rowids(self):
        return _rowids(self._splits, self.static_nvals)

    def nrows(self):
        return _convert(self.static_nrows, dtype=self.dtype)

    def nvals(self):
        return self._splits[-1]

    def uniform_row_length(self):
        return None if self._uniform is None else _convert(self._uniform,
                                                                    dtype=self.dtype)

    def is_uniform(self):
        return self._uniform is not None

    @property
    def static_nrows(self):
        return int(self._splits.shape[0]) - 1

    @property
    def static_nvals(self):
        return _host_int(self._splits[-1])

    @property
    def static_uniform_row_length(self):
        return self._uniform

    @property
    def dtype(self):
        return self._splits.dtype

    def with_dtype(self, dtype):
        dtype = _dt.as_dtype(dtype)
        if dtype == self.dtype:
            return self
        return RowPartition(_m.cast(self._splits, dtype), self._uniform, internal=True)

    def __repr__(self):
        if self._uniform is not None:
            return (f"tf.RowPartition(nrows={self.static_nrows}, "
                    f"uniform_row_length={self._uniform})")
        return f"tf.RowPartition(row_splits={np.asarray(self._splits.numpy())})"


def _partitions_of(rt):
    out, x = [], rt
    while _is_rt(x):
        k = x.uniform_row_length
        out.append(RowPartition(x.row_splits, None if k is None else _host_int(k),
                                internal=True))
        x = x.values
    return out


class DynamicRaggedShape:
    """The shape of a ragged tensor with its row lengths (``tf.shape`` of a
    ``RaggedTensor``, ``tf.experimental.DynamicRaggedShape``): ``row_partitions`` (one
    :class:`RowPartition` per ragged dimension) and ``inner_shape`` (the shape of the flat
    values). ``tf.zeros``, ``tf.ones``, ``tf.fill`` and ``tf.reshape`` take it and make a
    ragged tensor of that shape.

    >>> import tapeflow as tf
    >>> s = tf.shape(tf.ragged.constant([[1], [2, 3, 4], []]))
    >>> s
    <DynamicRaggedShape lengths=[3, (1, 3, 0)] num_row_partitions=1>
    >>> print(s[0])
    tf.Tensor(3, shape=(), dtype=int32)
    >>> print(tf.ones(s))
    <tf.RaggedTensor [[1.0], [1.0, 1.0, 1.0], []]>
    """

    def __init__(self, row_partitions, inner_shape, dtype=None, validate=True,
                 static_inner_shape=None):
        parts = list(row_partitions) if isinstance(row_partitions, (list, tuple)) else [None]
        if any(not isinstance(p, RowPartition) for p in parts):
            raise InvalidTypeError("DynamicRaggedShape: row_partitions must be a list of "
                                   "tf.experimental.RowPartition")
        if dtype is None:
            dtype = parts[0].dtype if parts else (
                inner_shape.dtype if isinstance(inner_shape, Tensor) else _dt.int64)
        self._dtype = _dt.as_dtype(dtype)
        self._parts = tuple(p.with_dtype(self._dtype) for p in parts)
        inner = _index_tensor(inner_shape, "inner_shape", "DynamicRaggedShape", self._dtype)
        self._inner = [int(v) for v in np.asarray(inner.numpy()).tolist()]
        if parts and not self._inner:
            raise InvalidArgumentError("DynamicRaggedShape: inner_shape must not be empty when "
                                       "there are row partitions")
        if validate and parts and not _tracing():
            for a, b in zip(self._parts, self._parts[1:]):
                if a.static_nvals != b.static_nrows:
                    raise InvalidArgumentError("DynamicRaggedShape: the row partitions are not "
                                               "consistent (each nvals is the next nrows)")
            if self._parts[-1].static_nvals != self._inner[0]:
                raise InvalidArgumentError(
                    f"DynamicRaggedShape: the last row partition has "
                    f"{self._parts[-1].static_nvals} values but inner_shape[0] is "
                    f"{self._inner[0]}")

    @classmethod
    def from_tensor(cls, t, dtype=None):
        """The shape of ``t`` (a Tensor or RaggedTensor)."""
        dtype = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
        if _is_rt(t):
            return cls(_partitions_of(t), [int(d) for d in t.flat_values.shape], dtype)
        return cls([], [int(d) for d in _convert(t).shape], dtype)

    @classmethod
    def from_lengths(cls, lengths, num_row_partitions=None, dtype=_dt.int64):
        """The shape with these ``lengths``: an int per uniform dimension, a tuple of row
        lengths per ragged one (the first entry the number of rows)."""
        if not isinstance(lengths, (list, tuple)):
            raise InvalidTypeError(f"DynamicRaggedShape.from_lengths: lengths must be a list, "
                                   f"got {type(lengths).__name__}")
        lengths = [tuple(_host_int(e, "a row length") for e in v)
                   if isinstance(v, (list, tuple)) else _host_int(v, "a length")
                   for v in lengths]
        if not lengths or isinstance(lengths[0], (list, tuple)):
            raise InvalidArgumentError("DynamicRaggedShape.from_lengths: the first length "
                                       "(the number of rows) must be an int")
        ragged = [i for i, v in enumerate(lengths) if isinstance(v, (list, tuple))]
        k = num_row_partitions if num_row_partitions is not None else (
            ragged[-1] if ragged else 0)
        count, parts = int(lengths[0]), []
        for v in lengths[1:k + 1]:
            if isinstance(v, (list, tuple)):
                if len(v) != count:
                    raise _TFMessageError("Shape not consistent.")
                p = RowPartition.from_row_lengths(list(v), dtype=dtype)
                count = int(sum(v))
            else:
                p = RowPartition(_uniform_splits(count, int(v), _dt.as_dtype(dtype)), int(v),
                                 internal=True)
                count *= int(v)
            parts.append(p)
        if any(isinstance(v, (list, tuple)) for v in lengths[k + 1:]):
            raise InvalidArgumentError("DynamicRaggedShape.from_lengths: a ragged length after "
                                       "num_row_partitions")
        return cls(parts, [count, *[int(v) for v in lengths[k + 1:]]], dtype)

    @property
    def dtype(self):
        return self._dtype

    @property
    def row_partitions(self):
        return self._parts

    @property
    def num_row_partitions(self):
        return len(self._parts)

    @property
    def rank(self):
        return len(self._parts) + len(self._inner)

    @property
    def inner_shape(self):
        return _convert(np.asarray(self._inner, np.int64), dtype=self._dtype)

    def static_lengths(self, ragged_lengths=True):
        if not self._parts:
            return list(self._inner)
        out = [self._parts[0].static_nrows]
        for p in self._parts:
            if p.is_uniform():
                out.append(p.static_uniform_row_length)
            else:
                out.append(tuple(int(v) for v in np.asarray(p.row_lengths().numpy()))
                           if ragged_lengths else None)
        return out + list(self._inner[1:])

    def is_uniform(self, axis):
        a = _norm_axis(axis, self.rank, "DynamicRaggedShape.is_uniform")
        return a == 0 or a > len(self._parts) or self._parts[a - 1].is_uniform()

    def _dim(self, a):
        k = len(self._parts)
        if a == 0:
            return _convert(self._parts[0].static_nrows if k else self._inner[0],
                                     dtype=self._dtype)
        if a <= k:
            p = self._parts[a - 1]
            if not p.is_uniform():
                raise _TFMessageError(f"Index {a} is not uniform")
            return _convert(p.static_uniform_row_length, dtype=self._dtype)
        return _convert(self._inner[a - k], dtype=self._dtype)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self._slice(key)
        if isinstance(key, Tensor):
            key = _host_int(key)
        if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
            raise InvalidTypeError(f"DynamicRaggedShape: an index is an int or a slice, got "
                                   f"{key!r}")
        a = int(key) + self.rank if key < 0 else int(key)
        if not 0 <= a < self.rank:
            raise InvalidArgumentError(f"Index {key} out of range for a shape of rank "
                                       f"{self.rank}")
        return self._dim(a)

    def _slice(self, key):
        start, stop, step = key.indices(self.rank)
        if step != 1:
            raise InvalidArgumentError("DynamicRaggedShape: slices take step 1")
        stop = builtins.max(stop, start)
        k = len(self._parts)
        if start > 0:
            if any(not self.is_uniform(i) for i in builtins.range(0, stop)):
                raise _TFMessageError("All relevant dimensions must be uniform")
            dims = [_host_int(self._dim(i)) for i in builtins.range(start, stop)]
            return DynamicRaggedShape([], dims, self._dtype)
        if stop == 0:
            return DynamicRaggedShape([], [], self._dtype)
        if stop <= k:
            parts = self._parts[:stop - 1]
            inner = [parts[-1].static_nvals if parts else self._parts[0].static_nrows]
            return DynamicRaggedShape(parts, inner, self._dtype)
        return DynamicRaggedShape(self._parts, self._inner[:stop - k], self._dtype)

    def _nest(self, flat):
        """``flat`` (of shape ``inner_shape``) with this shape's row partitions."""
        out = flat
        for p in reversed(self._parts):
            if p.is_uniform():
                out = RaggedTensor.from_uniform_row_length(out, p.static_uniform_row_length,
                                                           nrows=p.static_nrows)
            else:
                out = _from_splits(out, p.row_splits())
        return out

    def __repr__(self):
        return (f"<DynamicRaggedShape lengths={self.static_lengths()} "
                f"num_row_partitions={len(self._parts)}>")

    def __eq__(self, other):
        if not isinstance(other, DynamicRaggedShape):
            return NotImplemented
        return self.static_lengths() == other.static_lengths() and \
            self.num_row_partitions == other.num_row_partitions

    def __hash__(self):
        return hash((tuple(map(str, self.static_lengths())), self.num_row_partitions))


_DRS = DynamicRaggedShape


@_composite.dispatch_for_api(_as.shape, {"input": _RT})
def _shape(input, out_type=_dt.int32, name=None):  # noqa: A002
    return DynamicRaggedShape.from_tensor(input, out_type)


@_composite.dispatch_for_api(_ac.zeros, {"shape": _DRS})
def _zeros(shape, dtype=_dt.float32, name=None):
    return shape._nest(_ac.zeros(shape._inner, dtype))


@_composite.dispatch_for_api(_ac.ones, {"shape": _DRS})
def _ones(shape, dtype=_dt.float32, name=None):
    return shape._nest(_ac.ones(shape._inner, dtype))


@_composite.dispatch_for_api(_ac.fill, {"dims": _DRS})
def _fill(dims, value, dtype=None, name=None):
    return dims._nest(_ac.fill(dims._inner, value, dtype))


@_composite.dispatch_for_api(_as.reshape, {"shape": _DRS}, {"tensor": _RT})
def _reshape(tensor, shape, name=None):
    t = tensor.flat_values if _is_rt(tensor) else tensor
    if isinstance(shape, DynamicRaggedShape):
        return shape._nest(_as.reshape(t, shape._inner))
    return _as.reshape(t, shape)


@_composite.dispatch_for_api(_r.broadcast_to, {"shape": _DRS})
def _broadcast_to(input, shape, name=None):  # noqa: A002
    if _is_rt(input):
        raise UnimplementedError("tf.broadcast_to: broadcasting a RaggedTensor to a "
                                 "DynamicRaggedShape is not supported; give a dense input")
    return shape._nest(_r.broadcast_to(input, shape._inner))


# --- gather_nd, squeeze, split --------------------------------------------------------------

def _check_below(idx, limit, fn):
    """Eagerly, that ``0 <= idx < limit`` elementwise (skipped while tracing)."""
    if _tracing() or not idx.shape.num_elements():
        return
    i, n = np.asarray(idx.numpy()), np.asarray(limit.numpy())
    bad = (i < 0) | (i >= n)
    if bad.any():
        raise InvalidArgumentError(f"tf.{fn}: index {int(i[bad][0])} is out of range for a row "
                                   f"of length {int(n[bad][0])}")


@_composite.dispatch_for_api(_ag.gather_nd, {"params": _RT})
def _gather_nd(params, indices, batch_dims=0, name=None):
    if batch_dims or _is_rt(indices):
        raise UnimplementedError("tf.gather_nd of a RaggedTensor takes dense indices and "
                                 "batch_dims=0; convert with .to_tensor() first")
    idx = _convert(indices)
    if not idx.dtype.is_integer or len(idx.shape) < 1 or not 1 <= int(idx.shape[-1]) <= \
            params.shape.rank:
        raise InvalidArgumentError(
            f"tf.gather_nd: indices must be an integer tensor whose last dimension (here "
            f"{list(idx.shape)}) is between 1 and the rank of params ({params.shape.rank})")
    batch, k = [int(d) for d in idx.shape[:-1]], int(idx.shape[-1])
    dt = params.row_splits.dtype
    flat = _m.cast(_as.reshape(idx, [-1, k]), dt)
    x, pos = params, flat[:, 0]
    _check_indices(pos, _outer(params), "gather_nd")
    for j in builtins.range(1, k):
        if not _is_rt(x):
            g = _ag.gather_nd(x, _ag.concat([_as.expand_dims(pos, 1), flat[:, j:]], 1))
            return _as.reshape(g, batch + [int(d) for d in g.shape[1:]])
        _check_below(flat[:, j], _ag.gather(_lengths(x.row_splits), pos), "gather_nd")
        pos = _ag.gather(x.row_splits, pos) + flat[:, j]
        x = x.values
    g = _gather_rows(x, pos)
    if not _is_rt(g):
        return _as.reshape(g, batch + [int(d) for d in g.shape[1:]])
    if not batch:
        return g.values
    return _to_ragged_outer(g, batch) if len(batch) > 1 else g


def _squeeze_axis(x, a, fn):
    rr = x.ragged_rank
    if a > rr:
        out = x.with_flat_values(_as.squeeze(x.flat_values, [a - rr]))
        return out
    splits = list(x.nested_row_splits)
    if a == 0:
        if _outer(x) != 1:
            raise InvalidArgumentError(f"tf.{fn}: axis 0 has {_outer(x)} rows, not 1: it cannot "
                                       "be squeezed")
        return x.values
    level = x
    for _ in builtins.range(a - 1):
        level = level.values
    if level.uniform_row_length is None and not _tracing():
        lens = np.diff(np.asarray(splits[a - 1].numpy()))
        if lens.size and not (lens == 1).all():
            raise InvalidArgumentError(f"tf.{fn}: the given axis (axis = {a}) is not "
                                       "squeezable: its rows do not all have length 1")
    rest = splits[:a - 1] + splits[a:]
    if not rest:
        return x.flat_values
    return RaggedTensor.from_nested_row_splits(x.flat_values, rest, validate=False)


@_composite.dispatch_for_api(_as.squeeze, {"input": _RT})
def _squeeze(input, axis=None, name=None, squeeze_dims=None):  # noqa: A002
    axis = squeeze_dims if axis is None else axis
    if axis is None:
        raise InvalidArgumentError("tf.squeeze of a RaggedTensor needs axis (the dimensions of "
                                   "size 1 to remove)")
    axes = axis.numpy().tolist() if isinstance(axis, Tensor) else axis
    axes = axes if isinstance(axes, (list, tuple)) else [axes]
    rank = input.shape.rank
    x = input
    for a in sorted({_norm_axis(v, rank, "squeeze") for v in axes}, reverse=True):
        x = _squeeze_axis(x, a, "squeeze") if _is_rt(x) else _as.squeeze(x, [a])
    return x


@_composite.dispatch_for_api(_ag.split, {"value": _RT})
def _split(value, num_or_size_splits, axis=0, num=None, name="split"):
    if _norm_axis(axis, value.shape.rank, "split") != 0:
        raise UnimplementedError("tf.split of a RaggedTensor splits along axis 0 only; "
                                 "convert with .to_tensor() first")
    n = _outer(value)
    if isinstance(num_or_size_splits, (int, np.integer)) and not isinstance(
            num_or_size_splits, bool):
        k = int(num_or_size_splits)
        if k <= 0 or n % k:
            raise InvalidArgumentError(f"tf.split: {n} rows do not split into {k} equal parts")
        sizes = [n // k] * k
    else:
        sizes = num_or_size_splits.numpy().tolist() if isinstance(
            num_or_size_splits, Tensor) else num_or_size_splits
        if not isinstance(sizes, (list, tuple)) or not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in sizes):
            raise InvalidTypeError(f"tf.split: num_or_size_splits must be an int or a list of "
                                   f"ints, got {num_or_size_splits!r}")
        sizes = [int(v) for v in sizes]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = n - (sum(sizes) + 1)
        if any(v < 0 for v in sizes) or sum(sizes) != n:
            raise InvalidArgumentError(f"tf.split: sizes {sizes} do not add up to the {n} rows")
    starts = np.cumsum([0] + sizes)
    return [value[int(a):int(b)] for a, b in zip(starts[:-1], starts[1:])]
