"""Sorting, scans and searches, and the ops whose result shape depends on the data:
``sort``, ``argsort``, ``cumsum``, ``cumprod``, ``searchsorted``, ``unique_all``,
``nonzero``. Top-level names, and names of :mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.cumsum([1, 2, 3]))
tf.Tensor([1 3 6], shape=(3,), dtype=int32)
"""

from __future__ import annotations

import builtins

import numpy as np

from ..runtime import shapes as _shapes
from ..runtime.dispatch import execute
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.registry import Linear
from . import math as _m
from .library import batch_one_axis, defop, flag
from .array_creation import _tensor
from .array_shape import transpose
from .array_gather import gather

__all__ = ['argsort', 'sort', 'cumsum', 'cumprod', 'searchsorted', 'unique_all', 'nonzero']

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
