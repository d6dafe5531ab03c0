"""Sorting, scans and searches, and the ops whose result shape depends on the data:
``sort``, ``argsort``, ``cumsum``, ``cumprod``, ``searchsorted``, ``unique_all``,
``nonzero``; and the composites that deduplicate by sorting: ``unique``,
``unique_with_counts`` and the ``tensor_scatter_nd_*`` family (update, add, sub, min,
max). Top-level names, and names of :mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.cumsum([1, 2, 3]))
tf.Tensor([1 3 6], shape=(3,), dtype=int32)
"""

from __future__ import annotations

import builtins
import collections

import numpy as np

from .. import dtypes as _dt
from ..runtime import devices as _devs
from ..runtime import shapes as _shapes
from ..runtime.dispatch import constant, convert_to_tensor, execute
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.registry import Linear
from . import math as _m
from .library import batch_one_axis, defop, flag
from . import array_creation as _ac
from . import reductions as _r
from .array_creation import _tensor, ones
from .array_shape import reshape, transpose
from .array_values import identity, where
from .array_gather import gather, scatter_nd

__all__ = ['argsort', 'sort', 'cumsum', 'cumprod', 'searchsorted', 'unique_all', 'nonzero',
           'tensor_scatter_nd_update', 'tensor_scatter_nd_add', 'tensor_scatter_nd_sub',
           'tensor_scatter_nd_min', 'tensor_scatter_nd_max', 'unique', 'unique_with_counts']

# --- sorting and scans (issue 18) ---------------------------------------------------------

def _cumsum_grad(ctx, dy):
    a = ctx.attrs
    return execute(_CUMSUM, (dy,), {"axis": a["axis"], "exclusive": a["exclusive"],
                                    "reverse": not a["reverse"]})


def _check_axis_attrs(op, tensors, attrs, device):
    """Cumsum/Cumprod/ArgSort on every backend: an int axis of the input, bool flags."""
    shape = tuple(tensors[0]._data.shape)
    ax = attrs.get("axis")
    n = len(shape)
    if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)) or not -n <= ax < n:
        raise InvalidArgumentError(f"axis must be an int in [{-n}, {n}) for an input of shape "
                                   f"{list(shape)}, got {ax!r}", op=op.name, device=device)
    for flag in ("exclusive", "reverse", "descending"):
        if flag in attrs and not isinstance(attrs[flag], (bool, np.bool_)):
            raise InvalidTypeError(f"{flag} must be a bool, got {attrs[flag]!r}", op=op.name,
                                   device=device)


def _check_searchsorted(op, tensors, attrs, device):
    a, v = tensors
    if len(a._data.shape) != 1:
        raise InvalidArgumentError(f"sorted_sequence must be 1-D, got shape "
                                   f"{list(a._data.shape)}", op=op.name, device=device)
    side = attrs.get("side")
    if not isinstance(side, str) or side not in ("left", "right"):
        raise InvalidArgumentError(f"side must be 'left' or 'right', got {attrs.get('side')!r}",
                                   op=op.name, device=device)
    if a.dtype is not v.dtype:
        raise InvalidArgumentError(f"sorted_sequence ({a.dtype.name}) and values "
                                   f"({v.dtype.name}) must have one dtype", op=op.name,
                                   device=device)


_SCAN_ATTRS = {"axis": 0, "exclusive": False, "reverse": False}
_CUMSUM = defop("Cumsum", inputs=("x",), attrs=_SCAN_ATTRS, grad=_cumsum_grad,
                check=_check_axis_attrs, jvp=Linear(), batch=batch_one_axis)
def _cumprod_grad(ctx, dy):
    # TensorFlow's rule: the reversed cumulative sum of dy * y, over x (inputs with a
    # zero give inf/nan there, as in TensorFlow)
    x = ctx.inputs[0]
    if not x.dtype.is_inexact:
        return None
    a = ctx.attrs
    s = execute(_CUMSUM, (_m.multiply(dy, ctx.outputs[0]),),
                {"axis": a["axis"], "exclusive": a["exclusive"], "reverse": not a["reverse"]})
    return _m.divide(s, x)


_CUMPROD = defop("Cumprod", inputs=("x",), attrs=_SCAN_ATTRS, grad=_cumprod_grad,
                 check=_check_axis_attrs, batch=batch_one_axis)
_ARGSORT = defop("ArgSort", inputs=("x",), attrs={"axis": -1, "descending": False},
                 differentiable=False, check=_check_axis_attrs, batch=batch_one_axis)


def _scan_axis(x, axis, what):
    n = len(x.shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise InvalidArgumentError(f"{what}: axis must be an int in [{-n}, {n}) for a tensor of "
                                   f"shape {list(x.shape)}, got {axis!r}")
    return int(axis) % n


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sums along ``axis`` (``exclusive``: each excludes its own element;
    ``reverse``: from the end), as ``tf.math.cumsum``.

    >>> import tapeflow as tf
    >>> print(tf.cumsum([1, 2, 3]), tf.cumsum([1, 2, 3], exclusive=True, reverse=True))
    tf.Tensor([1 3 6], shape=(3,), dtype=int32) tf.Tensor([5 3 0], shape=(3,), dtype=int32)
    """
    x = _tensor(x)
    return execute(_CUMSUM, (x,), {"axis": _scan_axis(x, axis, "cumsum"),
                                   "exclusive": flag(exclusive, "cumsum: exclusive", "Cumsum", x),
                                   "reverse": flag(reverse, "cumsum: reverse", "Cumsum", x)})


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running products along ``axis`` (not differentiable yet).

    >>> import tapeflow as tf
    >>> print(tf.cumprod([1, 2, 3]))
    tf.Tensor([1 2 6], shape=(3,), dtype=int32)
    """
    x = _tensor(x)
    return execute(_CUMPROD, (x,), {
        "axis": _scan_axis(x, axis, "cumprod"),
        "exclusive": flag(exclusive, "cumprod: exclusive", "Cumprod", x),
        "reverse": flag(reverse, "cumprod: reverse", "Cumprod", x)})


def argsort(values, axis=-1, direction="ASCENDING", stable=True, name=None):
    """The indices (int64) that sort ``values`` along ``axis``; always stable (equal
    elements keep their order, in both directions).

    >>> import tapeflow as tf
    >>> print(tf.argsort([3, 1, 2]), tf.argsort([1, 3, 3, 2], direction="DESCENDING"))
    tf.Tensor([1 2 0], shape=(3,), dtype=int64) tf.Tensor([1 2 3 0], shape=(4,), dtype=int64)
    """
    x = _tensor(values)
    flag(stable, "argsort: stable", "ArgSort", x)       # (always stable)
    if not isinstance(direction, str) or direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"argsort: direction must be 'ASCENDING' or 'DESCENDING', "
                                   f"got {_shapes.short_repr(direction)}", op="ArgSort",
                                   device=x._device)
    return execute(_ARGSORT, (x,), {"axis": _scan_axis(x, axis, "argsort"),
                                    "descending": direction == "DESCENDING"})


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``values`` sorted along ``axis`` (differentiable: a gather by :func:`argsort`).

    >>> import tapeflow as tf
    >>> print(tf.sort([3., 1., 2.], direction="DESCENDING"))
    tf.Tensor([3. 2. 1.], shape=(3,), dtype=float32)
    """
    x = _tensor(values)
    ax = _scan_axis(x, axis, "sort")
    idx = argsort(x, ax, direction)
    return gather(x, idx, axis=ax, batch_dims=ax) if ax == len(x.shape) - 1 else \
        transpose(sort(transpose(x, _swap_last(len(x.shape), ax)), -1, direction),
                  _swap_last(len(x.shape), ax))


def _swap_last(n, ax):
    perm = list(builtins.range(n))
    perm[ax], perm[-1] = perm[-1], perm[ax]
    return perm


# --- data-dependent shapes (not differentiable) ---------------------------------------------

_SEARCHSORTED = defop("SearchSorted", inputs=("sorted_sequence", "values"),
                      attrs={"side": "left"}, differentiable=False, check=_check_searchsorted)


@_SEARCHSORTED.def_batch
def _searchsorted_batch(ctx, seq, values):
    if ctx.batched[0]:          # the kernel takes one 1-D sequence: one per example
        return NotImplemented
    return execute(ctx.op, (seq, values), ctx.attrs)      # values of any shape
_UNIQUE = defop("UniqueAll", inputs=("x",), num_outputs=4, differentiable=False)
_NONZERO = defop("NonZero", inputs=("x",), differentiable=False)


def searchsorted(sorted_sequence, values, side="left", out_type=None, name=None):
    """Where ``values`` would go in the 1-D ascending ``sorted_sequence`` to keep it
    sorted (int64 indices); ``side="right"`` puts equal values after their equals.

    >>> import tapeflow as tf
    >>> print(tf.searchsorted([1., 2., 3.], [2., 0.5], side="right"))
    tf.Tensor([2 0], shape=(2,), dtype=int64)
    """
    a, v = _tensor(sorted_sequence), _tensor(values)
    if len(a.shape) != 1:
        raise InvalidArgumentError(f"searchsorted: sorted_sequence must be 1-D, got shape "
                                   f"{list(a.shape)}", op="SearchSorted")
    if not isinstance(side, str) or side not in ("left", "right"):
        raise InvalidArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}",
                                   op="SearchSorted")
    if v.dtype is not a.dtype:
        v = _m.cast(v, a.dtype)
    return execute(_SEARCHSORTED, (a, v), {"side": side})


def unique_all(x, name=None):
    """``(values, indices, inverse_indices, counts)`` of the flattened ``x``: the sorted
    distinct values, where each first occurs, each element's position among them
    (shaped like ``x``) and how often each occurs; every nan is distinct.

    >>> import tapeflow as tf
    >>> v, i, inv, c = tf.unique_all([3, 1, 3, 2])
    >>> print(v, c)
    tf.Tensor([1 2 3], shape=(3,), dtype=int32) tf.Tensor([1 1 2], shape=(3,), dtype=int64)
    """
    return execute(_UNIQUE, (_tensor(x),))


def nonzero(x, name=None):
    """The indices of the non-zero elements of ``x``: an int64 ``[count, rank]`` tensor,
    row-major order (``tf.where(x)`` in TensorFlow).

    >>> import tapeflow as tf
    >>> print(tf.nonzero([[0, 1], [2, 0]]))
    tf.Tensor(
    [[0 1]
     [1 0]], shape=(2, 2), dtype=int64)
    """
    return execute(_NONZERO, (_tensor(x),))


# --- tensor_scatter_nd_* and unique (issue 47): composites that deduplicate by sorting -----

def _scatter_args(tensor, indices, updates, fn, op):
    """``tensor``, ``indices`` (int64) and ``updates`` (``tensor``'s dtype) checked as
    TensorFlow checks them, and K, the length of an index."""
    t = _tensor(tensor)
    ind = _tensor(indices)
    if ind.dtype not in (_dt.int32, _dt.int64, _dt.int16, _dt.uint16):
        raise InvalidTypeError(f"{fn}: indices must be an integer tensor, got "
                               f"{ind.dtype.name}", op=op, device=t._device)
    u = convert_to_tensor(updates, dtype=t.dtype)
    ts, ins, us = tuple(t.shape), tuple(ind.shape), tuple(u.shape)
    k = ins[-1] if ins else 0
    if not ins or k > len(ts):
        raise InvalidArgumentError(
            f"{fn}: indices must have a last dimension of at most the tensor's rank "
            f"{len(ts)}, got indices of shape {list(ins)}", op=op, device=t._device)
    if us[:len(ins) - 1] != ins[:-1]:
        raise InvalidArgumentError(
            f"Outer dimensions of indices and update must match. Indices shape: "
            f"{list(ins)}, updates shape: {list(us)}", op=op, device=t._device)
    if us[len(ins) - 1:] != ts[k:]:
        raise InvalidArgumentError(
            f"Inner dimensions of output shape must match inner dimensions of updates "
            f"shape. Output: {list(ts)} updates: {list(us)}", op=op, device=t._device)
    return t, _m.cast(ind, _dt.int64), u, k


def _scatter_into(indices, values, shape, dtype):
    """ScatterNd for every dtype (bool through uint8)."""
    if dtype.is_bool:
        return _m.cast(scatter_nd(indices, _m.cast(values, _dt.uint8), shape), dtype)
    return scatter_nd(indices, values, shape)


def _scatter_hits(t, ind, k, op):
    """Bool, shaped to broadcast against ``t``: which slices ``ind`` addresses. Raises
    TensorFlow's error naming ``op`` for an index out of range."""
    with _devs.device(ind._device):
        one = ones(tuple(ind.shape[:-1]), _dt.int32)
    try:
        hits = scatter_nd(ind, one, tuple(t.shape[:k]))
    except InvalidArgumentError as e:
        raise InvalidArgumentError(e.message, op=op, device=e.device) from None
    return reshape(_m.greater(hits, 0), tuple(t.shape[:k]) + (1,) * (len(t.shape) - k))


def _rows(t, ind, u, k):
    """Indices as ``(n, k)``, updates as ``(n, *slice)`` and each index's row-major
    position among the ``tensor.shape[:k]`` slices (int64)."""
    n = int(np.prod(ind.shape[:-1], dtype=np.int64))
    dims = tuple(t.shape[:k])
    strides = np.array([int(np.prod(dims[i + 1:], dtype=np.int64)) for i in builtins.range(k)],
                       np.int64)
    ind2 = reshape(ind, (n, k))
    lin = _r.reduce_sum(_m.multiply(ind2, constant(strides, device=ind._device)), axis=1)
    return n, ind2, reshape(u, (n,) + tuple(t.shape[k:])), lin


def tensor_scatter_nd_update(tensor, indices, updates, name=None):
    """A copy of ``tensor`` with the slices at ``indices`` replaced by ``updates``
    (``updates.shape == indices.shape[:-1] + tensor.shape[indices.shape[-1]:]``); of
    duplicate indices the last one wins, as on TensorFlow's CPU. Differentiable in
    ``tensor`` (zero at the replaced slices) and ``updates`` (only the update that won
    gets a gradient; TensorFlow's gives every duplicate one). A composite (it sorts the
    indices to find the last of each), on every backend; string tensors are updated on
    the host.

    >>> import tapeflow as tf
    >>> print(tf.tensor_scatter_nd_update([1, 2, 3, 4], [[1], [3]], [9, 8]))
    tf.Tensor([1 9 3 8], shape=(4,), dtype=int32)
    """
    op = "TensorScatterUpdate"
    t, ind, u, k = _scatter_args(tensor, indices, updates, "tensor_scatter_nd_update", op)
    hits = _scatter_hits(t, ind, k, op)
    if t.dtype == _dt.string:           # strings live on the host: NumPy's assignment
        out = t.numpy().copy()
        rows = ind.numpy().reshape(-1, k)
        vals = u.numpy().reshape((len(rows),) + tuple(t.shape[k:]))
        for r, v in zip(rows.tolist(), vals):
            out[tuple(r)] = v
        return constant(out, dtype=_dt.string)
    n, ind2, u2, lin = _rows(t, ind, u, k)
    if n == 0:
        return identity(t)
    with _devs.device(ind._device):
        back = _ac.range(n - 1, -1, -1, dtype=_dt.int64)
    _, first, _, _ = unique_all(gather(lin, back))     # first of the reversed = last
    last = _m.subtract(n - 1, first)
    new = _scatter_into(gather(ind2, last), gather(u2, last), tuple(t.shape), t.dtype)
    return where(hits, new, t)


def tensor_scatter_nd_add(tensor, indices, updates, name=None):
    """``tensor`` plus ``updates`` added at ``indices`` (duplicates add up).

    >>> import tapeflow as tf
    >>> print(tf.tensor_scatter_nd_add([1, 2, 3], [[0], [0]], [10, 20]))
    tf.Tensor([31  2  3], shape=(3,), dtype=int32)
    """
    op = "TensorScatterAdd"
    t, ind, u, k = _scatter_args(tensor, indices, updates, "tensor_scatter_nd_add", op)
    _scatter_hits(t, ind, k, op)
    return _m.add(t, _scatter_into(ind, u, tuple(t.shape), t.dtype))


def tensor_scatter_nd_sub(tensor, indices, updates, name=None):
    """``tensor`` minus ``updates`` subtracted at ``indices`` (duplicates add up).

    >>> import tapeflow as tf
    >>> print(tf.tensor_scatter_nd_sub([1, 2, 3], [[2]], [3]))
    tf.Tensor([1 2 0], shape=(3,), dtype=int32)
    """
    op = "TensorScatterSub"
    t, ind, u, k = _scatter_args(tensor, indices, updates, "tensor_scatter_nd_sub", op)
    _scatter_hits(t, ind, k, op)
    return _m.subtract(t, _scatter_into(ind, u, tuple(t.shape), t.dtype))


def _scatter_extreme(tensor, indices, updates, take_max):
    fn = "tensor_scatter_nd_max" if take_max else "tensor_scatter_nd_min"
    op = "TensorScatterMax" if take_max else "TensorScatterMin"
    t, ind, u, k = _scatter_args(tensor, indices, updates, fn, op)
    if t.dtype.is_bool or t.dtype.is_complex or t.dtype == _dt.string:
        raise InvalidTypeError(f"{fn}: tensor must be a real number tensor, got "
                               f"{t.dtype.name}", op=op, device=t._device)
    hits = _scatter_hits(t, ind, k, op)
    if t.dtype.is_floating:             # TensorFlow's: a nan update loses to any value
        u = where(_m.is_nan(u), constant(-np.inf if take_max else np.inf, t.dtype,
                                         device=u._device), u)
    n, _, u2, lin = _rows(t, ind, u, k)
    s = int(np.prod(t.shape[k:], dtype=np.int64))
    if n == 0 or s == 0:
        return identity(t)
    with _devs.device(ind._device):
        inner = _ac.range(0, s, 1, dtype=_dt.int64)
    # each update element's row-major position in the tensor, and its value
    pos = reshape(_m.add(_m.multiply(reshape(lin, (n, 1)), s), inner), (n * s,))
    v = reshape(u2, (n * s,))
    by_value = argsort(v, direction="DESCENDING" if take_max else "ASCENDING")
    order = gather(by_value, argsort(gather(pos, by_value)))    # by position, then value
    where_at, first, _, _ = unique_all(gather(pos, order))      # each position's best first
    best = gather(v, gather(order, first))
    full = reshape(_scatter_into(reshape(where_at, (-1, 1)), best,
                                 (int(np.prod(t.shape, dtype=np.int64)),), t.dtype),
                   tuple(t.shape))
    return where(hits, (_m.maximum if take_max else _m.minimum)(t, full), t)


def tensor_scatter_nd_min(tensor, indices, updates, name=None):
    """``tensor`` with each element at ``indices`` the minimum of itself and the
    ``updates`` written there. The gradient goes to the element that is the minimum
    (TensorFlow splits it between tied ones; here the tensor's own value wins a tie with
    an update, and the first update a tie between updates). As in TensorFlow, a nan
    update is ignored (it loses to any value, whatever its order among the updates),
    while a nan already in ``tensor`` stays nan.

    >>> import tapeflow as tf
    >>> print(tf.tensor_scatter_nd_min([5, 5, 5], [[0], [0], [2]], [7, 3, 9]))
    tf.Tensor([3 5 5], shape=(3,), dtype=int32)
    """
    return _scatter_extreme(tensor, indices, updates, False)


def tensor_scatter_nd_max(tensor, indices, updates, name=None):
    """``tensor`` with each element at ``indices`` the maximum of itself and the
    ``updates`` written there (gradient: as :func:`tensor_scatter_nd_min`'s).

    >>> import tapeflow as tf
    >>> print(tf.tensor_scatter_nd_max([5, 5, 5], [[0], [0], [2]], [7, 3, 9]))
    tf.Tensor([7 5 9], shape=(3,), dtype=int32)
    """
    return _scatter_extreme(tensor, indices, updates, True)


#: ``tf.unique``'s and ``tf.unique_with_counts``' results (named as in TensorFlow)
Unique = collections.namedtuple("Unique", ["y", "idx"])
UniqueWithCounts = collections.namedtuple("UniqueWithCounts", ["y", "idx", "count"])


def _unique(x, out_idx, fn):
    x = _tensor(x)
    out_idx = _dt.as_dtype(out_idx)
    if out_idx not in (_dt.int32, _dt.int64):
        raise InvalidTypeError(f"{fn}: out_idx must be int32 or int64, got {out_idx.name}",
                               op="Unique", device=x._device)
    if len(x.shape) != 1:
        raise InvalidArgumentError(f"unique expects a 1D vector, got shape {list(x.shape)}",
                                   op="Unique", device=x._device)
    if x.dtype == _dt.string:           # strings live on the host: NumPy's unique
        values, first, inverse, counts = np.unique(x.numpy(), return_index=True,
                                                   return_inverse=True, return_counts=True)
        order = np.argsort(first, kind="stable")
        idx = np.argsort(order)[inverse.reshape(-1)]
        return (constant(values[order], dtype=_dt.string), constant(idx.astype(out_idx.np)),
                constant(counts[order].astype(out_idx.np)))
    values, first, inverse, counts = unique_all(x)
    order = argsort(first)              # the distinct values by first occurrence
    idx = gather(argsort(order), inverse)
    return gather(values, order), _m.cast(idx, out_idx), _m.cast(gather(counts, order), out_idx)


def unique(x, out_idx=_dt.int32, name=None):
    """The distinct elements of the 1-D ``x`` in order of first occurrence (``y``), and
    for each element of ``x`` the position of its value in ``y`` (``idx``). String
    tensors too (on the host: a vocabulary from tokens).

    >>> import tapeflow as tf
    >>> y, idx = tf.unique([4, 1, 4, 2])
    >>> print(y, idx)
    tf.Tensor([4 1 2], shape=(3,), dtype=int32) tf.Tensor([0 1 0 2], shape=(4,), dtype=int32)
    """
    y, idx, _ = _unique(x, out_idx, "unique")
    return Unique(y, idx)


def unique_with_counts(x, out_idx=_dt.int32, name=None):
    """:func:`unique`'s ``y`` and ``idx``, and how often each of ``y`` occurs (``count``).

    >>> import tapeflow as tf
    >>> print(tf.unique_with_counts([4, 1, 4, 2]).count)
    tf.Tensor([2 1 1], shape=(3,), dtype=int32)
    """
    return UniqueWithCounts(*_unique(x, out_idx, "unique_with_counts"))
