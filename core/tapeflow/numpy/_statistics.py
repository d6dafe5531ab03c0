"""``tapeflow.numpy``'s statistics, searching, sorting and scans, and the functions
with data-dependent shapes (``unique_*``, ``nonzero``)."""

from __future__ import annotations

import builtins as _builtins

import numpy as _np

from .. import ops as _ops
from .. import ops as _A
from ..ops import math as _M
from ..runtime.dispatch import constant as _constant
from ..errors import InvalidArgumentError
from ._elementwise import _as_dtype, _float_input, _pair, _t, int64, uint64
from ._arrays import _full, broadcast_to, concat, moveaxis, zeros_like


# --- statistics, sorting, searching, scans, data-dependent shapes ---------------------


def _axis(axis):
    if axis is None:
        return None
    return list(axis) if isinstance(axis, tuple) else axis


def _accumulator(dtype):
    """The dtype ``sum``, ``prod`` and the cumulative functions return by default: the
    default integer dtype (int64) for signed integers, its unsigned twin (uint64) for
    unsigned ones, as the standard says; None (the input's) otherwise."""
    if dtype.is_integer:
        return uint64 if dtype.is_unsigned else int64
    return None


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    x = _t(x)
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    return _ops.reductions.reduce_sum(x, axis=_axis(axis), keepdims=keepdims)


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    x = _t(x)
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    return _ops.reductions.reduce_prod(x, axis=_axis(axis), keepdims=keepdims)


def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _ops.reductions.reduce_max(_t(x), axis=_axis(axis), keepdims=keepdims)


def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _ops.reductions.reduce_min(_t(x), axis=_axis(axis), keepdims=keepdims)


def mean(x, /, *, axis=None, keepdims=False):
    return _ops.reductions.reduce_mean(_float_input(x), axis=_axis(axis), keepdims=keepdims)


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    x = _float_input(x)
    m = _ops.reductions.reduce_mean(x, axis=_axis(axis), keepdims=True)
    d = _M.subtract(x, m)
    sq = _M.real(_M.multiply(_M.conj(d), d)) if x.dtype.is_complex else _M.square(d)  # |d|^2
    ss = _ops.reductions.reduce_sum(sq, axis=_axis(axis), keepdims=keepdims)
    n = _np.prod([int(x.shape[a]) for a in (range(x.ndim) if axis is None else
                  ((axis,) if isinstance(axis, int) else axis))], dtype=_np.int64)
    return _M.divide(ss, _constant(_builtins.max(float(n) - correction, 0.0), dtype=ss.dtype,
                                   device=x.device))


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _M.sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    x = _t(x)
    b = x if x.dtype.is_bool else _M.not_equal(x, zeros_like(x))
    return _ops.reductions.reduce_all(b, axis=_axis(axis), keepdims=keepdims)


def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    x = _t(x)
    b = x if x.dtype.is_bool else _M.not_equal(x, zeros_like(x))
    return _ops.reductions.reduce_any(b, axis=_axis(axis), keepdims=keepdims)


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    x = _t(x)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat([_t(p) for p in parts], axis=axis)
    for _ in range(n):
        lo = [slice(None)] * x.ndim
        hi = [slice(None)] * x.ndim
        lo[axis], hi[axis] = slice(1, None), slice(None, -1)
        x = _M.subtract(x[tuple(lo)], x[tuple(hi)])
    return x


def _arg_reduce(fn, x, axis, keepdims):
    x = _t(x)
    if axis is None:
        r = fn(_A.reshape(x, [-1]), axis=0)
        return _A.reshape(r, [1] * x.ndim) if keepdims else r
    r = fn(x, axis=axis)
    return _A.expand_dims(r, axis) if keepdims else r


def argmax(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first maximum, of the flattened array when ``axis`` is None."""
    return _arg_reduce(_ops.reductions.argmax, x, axis, keepdims)


def argmin(x, /, *, axis=None, keepdims=False):
    """Index (int64) of the first minimum, of the flattened array when ``axis`` is None."""
    return _arg_reduce(_ops.reductions.argmin, x, axis, keepdims)


def count_nonzero(x, /, *, axis=None, keepdims=False):
    x = _t(x)
    b = _M.cast(_M.not_equal(x, zeros_like(x)), int64)
    return _ops.reductions.reduce_sum(b, axis=_axis(axis), keepdims=keepdims)


def where(condition, x1, x2, /):
    a, b = _pair(x1, x2)
    return _A.where(_t(condition), a, b)


def take(x, indices, /, *, axis=None):
    x = _t(x)
    if axis is None:
        if x.ndim != 1:
            raise InvalidArgumentError("take: axis is required for arrays of more than 1 "
                                       "dimension")
        axis = 0
    idx = _t(indices)
    if idx.dtype.is_integer and not idx.dtype.is_unsigned:
        # the standard's indices are in [-n, n): a negative one counts from the end
        n = int(x.shape[axis])
        wrap = _M.logical_and(_M.less(idx, 0), _M.greater_equal(idx, _t(-n, idx.dtype)))
        idx = _A.where(wrap, _M.add(idx, _t(n, idx.dtype)), idx)   # (below -n: the error)
    return _A.gather(x, idx, axis=axis)


def argsort(x, /, *, axis=-1, descending=False, stable=True):
    """Indices (int64) that sort ``x`` along ``axis``; always stable."""
    return _A.argsort(_t(x), axis, "DESCENDING" if descending else "ASCENDING")


def sort(x, /, *, axis=-1, descending=False, stable=True):
    """``x`` sorted along ``axis`` (differentiable)."""
    return _A.sort(_t(x), axis, "DESCENDING" if descending else "ASCENDING")


def take_along_axis(x, indices, /, *, axis=-1):
    """``x``'s elements at ``indices`` along ``axis`` (same rank; other axes broadcast)."""
    x, idx = _t(x), _t(indices)
    n = x.ndim
    if idx.ndim != n:
        raise InvalidArgumentError(f"take_along_axis: indices have rank {idx.ndim}, x has "
                                   f"rank {n}; they must match")
    ax = axis % n
    xs = [int(d) for d in x.shape]
    ishape = [int(d) for d in idx.shape]
    lead = [_builtins.max(a, b) for i, (a, b) in enumerate(zip(xs, ishape)) if i != ax]
    xt = moveaxis(x, ax, -1)
    it = moveaxis(idx, ax, -1)
    xt = broadcast_to(xt, tuple(lead) + (xs[ax],))
    it = broadcast_to(it, tuple(lead) + (ishape[ax],))
    rows = int(_np.prod(lead, dtype=_np.int64))
    it = _M.cast(_A.reshape(it, [rows, ishape[ax]]), int64)
    it = _M.add(_M.mod(it, xs[ax]), _constant((_np.arange(rows) * xs[ax])[:, None],
                                             dtype=int64, device=x.device))
    out = _A.gather(_A.reshape(xt, [-1]), it)
    return moveaxis(_A.reshape(out, lead + [ishape[ax]]), -1, ax)


def _cumulative(op, x, axis, dtype, include_initial, fill, name):
    x = _t(x)
    if axis is None:
        if x.ndim > 1:
            raise InvalidArgumentError(f"{name}: axis is required for arrays of more than 1 "
                                       "dimension")
        axis = 0
    dt = _as_dtype(dtype)
    if dt is None:
        dt = _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    out = op(x, axis)
    if include_initial:
        shape = [int(d) for d in x.shape]
        shape[axis] = 1
        out = _A.concat([_full(tuple(shape), fill, out.dtype, x.device), out], axis)
    return out


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running sums along ``axis`` (differentiable)."""
    return _cumulative(_A.cumsum, x, axis, dtype, include_initial, 0, "cumulative_sum")


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    """Running products along ``axis``."""
    return _cumulative(_A.cumprod, x, axis, dtype, include_initial, 1, "cumulative_prod")


# --- data-dependent shapes --------------------------------------------------------------------

class UniqueAllResult(tuple):
    """``(values, indices, inverse_indices, counts)``, also by name."""

    def __new__(cls, values, indices, inverse_indices, counts):
        return super().__new__(cls, (values, indices, inverse_indices, counts))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])
    inverse_indices = property(lambda self: self[2])
    counts = property(lambda self: self[3])


class UniqueCountsResult(tuple):
    def __new__(cls, values, counts):
        return super().__new__(cls, (values, counts))

    values = property(lambda self: self[0])
    counts = property(lambda self: self[1])


class UniqueInverseResult(tuple):
    def __new__(cls, values, inverse_indices):
        return super().__new__(cls, (values, inverse_indices))

    values = property(lambda self: self[0])
    inverse_indices = property(lambda self: self[1])


def unique_all(x, /):
    """Sorted distinct values of the flattened ``x``, their first indices, each
    element's index among them (shaped like ``x``) and their counts (nan: distinct)."""
    return UniqueAllResult(*_A.unique_all(_t(x)))


def unique_counts(x, /):
    r = unique_all(x)
    return UniqueCountsResult(r.values, r.counts)


def unique_inverse(x, /):
    r = unique_all(x)
    return UniqueInverseResult(r.values, r.inverse_indices)


def unique_values(x, /):
    return unique_all(x).values


def nonzero(x, /):
    """A tuple of int64 index arrays, one per axis, of the non-zero elements."""
    x = _t(x)
    if x.ndim == 0:
        raise InvalidArgumentError("nonzero: a 0-d array has no axes to index (the standard "
                                   "leaves it undefined); reshape it to (1,)")
    idx = _A.nonzero(x)
    return tuple(idx[:, i] for i in range(x.ndim))


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    """Insertion indices of ``x2`` into the 1-D ascending ``x1`` (``sorter``: indices
    that sort ``x1``)."""
    a, v = _pair(x1, x2)
    if sorter is not None:
        a = _A.gather(a, _t(sorter))
    return _A.searchsorted(a, v, side=side)


def isin(x1, x2, /, *, invert=False):
    """Whether each element of ``x1`` occurs in ``x2`` (compared elementwise: every
    backend, no sort)."""
    a, b = _pair(x1, x2)
    eq = _M.equal(_A.expand_dims(a, -1), _A.reshape(b, [-1]))
    out = _ops.reductions.reduce_any(eq, axis=-1)
    return _M.logical_not(out) if invert else out
