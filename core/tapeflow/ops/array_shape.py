"""Ops that change a tensor's shape, not its values, and shape queries: ``reshape``,
``transpose``, ``expand_dims``, ``squeeze``, ``shape``, ``size``, ``rank``.
``broadcast_to`` lives in :mod:`tapeflow.ops.reductions` (it and ``reduce_sum`` are each
other's gradient). Top-level names, and names of :mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.transpose(tf.reshape(tf.range(6), [2, 3])).shape)
(3, 2)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import execute
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.registry import Linear, REQUIRED
from .composite import COMPOSITE_TYPES, dispatch
from . import math as _m
from .library import batch_axis, batch_with_shape, defop, flag, rerun
from .array_creation import (_here, _ndim, _norm_axis1, _opindex, _prod, _range, _shape_tuple,
                             _tensor, zeros)

__all__ = ['reshape', 'transpose', 'expand_dims', 'squeeze', 'shape', 'size', 'rank']

# --- reshaping -----------------------------------------------------------------------

def _reshape_grad(ctx, dy):
    return execute(_RESHAPE, (dy,), {"shape": ctx.inputs[0]._data.shape})


def _reshape_infer(shapes, dtypes, attrs):
    s = tuple(shapes[0])
    new = tuple(attrs["shape"])
    n = _prod(s)
    if any(d < -1 for d in new) or new.count(-1) > 1:
        raise InvalidArgumentError(
            f"Cannot reshape a tensor of shape {s} to shape {new}: at most one dimension may "
            "be -1 and the others must be non-negative")
    known = _prod(d for d in new if d != -1)
    if -1 in new:
        if known == 0 or n % known:
            raise InvalidArgumentError(
                f"Input to reshape is a tensor of shape {s} with {n} values, but the requested "
                f"shape {new} needs a multiple of {known} values")
        new = tuple(n // known if d == -1 else d for d in new)
    elif known != n:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor of shape {s} with {n} values, but the requested "
            f"shape {new} has {known}")
    return [(new, dtypes[0])]


_RESHAPE = defop("Reshape", inputs=("x",), attrs={"shape": REQUIRED}, dtype_rule="none",
                 grad=_reshape_grad, infer=_reshape_infer,
                 attr_types={"shape": "reshape"}, jvp=Linear(), batch=batch_with_shape)


def reshape(tensor, shape, name=None):
    """Same values, new shape (one dimension may be -1).

    >>> import tapeflow as tf
    >>> tf.reshape([1, 2, 3, 4], [-1, 2]).shape
    TensorShape([2, 2])
    """
    if type(tensor) in COMPOSITE_TYPES or type(shape) in COMPOSITE_TYPES:
        return dispatch(reshape, tensor, shape, name)
    if type(shape) is tuple or type(shape) is list:
        try:
            s = tuple(map(_opindex, shape))       # (the builtin: this is hot)
        except TypeError:
            s = _shape_tuple(shape, "Reshape")
    else:
        s = _shape_tuple(shape, "Reshape")
    if len(s) > _shapes.MAX_RANK:
        _shapes.check_rank(s, "Reshape", _here(tensor))
    if s and min(s) < -1:
        raise InvalidArgumentError(
            f"Cannot reshape to {list(s)}: sizes must be non-negative, or -1 for one size "
            "inferred from the others", op="Reshape", device=_here(tensor))
    return execute(_RESHAPE, (tensor,), {"shape": s})


def _transpose_grad(ctx, dy):
    perm = ctx.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return execute(_TRANSPOSE, (dy,), {"perm": tuple(inv)})


_TRANSPOSE = defop("Transpose", inputs=("x",), attrs={"perm": None}, dtype_rule="none",
                   grad=_transpose_grad, jvp=Linear())


@_TRANSPOSE.def_batch
def _transpose_batch(ctx, x):
    perm = ctx.attrs["perm"]
    r = len(x.shape) - 1
    perm = tuple(_range(r))[::-1] if perm is None else perm
    return rerun(ctx, (x,), perm=(0,) + tuple(p + 1 for p in perm))


def transpose(a, perm=None, conjugate=False, name="transpose"):
    """Permute dimensions (``perm=None`` reverses them); ``conjugate=True`` also
    conjugates a complex tensor.

    >>> import tapeflow as tf
    >>> tf.transpose(tf.zeros([2, 3, 4]), [2, 0, 1]).shape
    TensorShape([4, 2, 3])
    """
    if conjugate is not False and flag(conjugate, "transpose: conjugate", "Transpose", a):
        return _m.conj(transpose(a, perm))
    nd = _ndim(a)
    if perm is None:
        p = tuple(_range(nd - 1, -1, -1))
    else:
        if not isinstance(perm, (list, tuple)) and len(getattr(perm, "shape", ())) != 1:
            raise InvalidTypeError(f"transpose: perm must be a list of {nd} dimensions, got "
                                   f"{_shapes.short_repr(perm)}", op="Transpose", device=_here(a))
        p = tuple(d + nd if d < 0 else d for d in
                  (_shapes.as_index(v, "perm", "Transpose", _here(a))
                   for v in (perm.numpy().tolist() if hasattr(perm, "numpy") else
                             np.asarray(perm).tolist() if hasattr(perm, "shape") else perm)))
        if sorted(p) != list(_range(nd)):
            raise InvalidArgumentError(
                f"transpose: perm {list(p)} is not a permutation of the {nd} dimensions of "
                "the input", op="Transpose", device=_here(a))
    return execute(_TRANSPOSE, (a,), {"perm": p})


def _as_input_shape(ctx, dy):
    return execute(_RESHAPE, (dy,), {"shape": ctx.inputs[0]._data.shape})


_EXPAND_DIMS = defop("ExpandDims", inputs=("x",), attrs={"axis": 0}, dtype_rule="none",
                     grad=_as_input_shape, attr_types={"axis": "axis+1"}, jvp=Linear())


@_EXPAND_DIMS.def_batch
def _expand_dims_batch(ctx, x):
    return rerun(ctx, (x,), axis=batch_axis(ctx.attrs["axis"], len(x.shape)))


def expand_dims(input, axis, name=None):
    """Insert a dimension of size 1 at ``axis`` (``-1`` appends).

    >>> import tapeflow as tf
    >>> tf.expand_dims([1, 2], -1).shape
    TensorShape([2, 1])
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(expand_dims, input, axis, name)
    a = _norm_axis1(axis, _ndim(input), "ExpandDims", input, 1)
    return execute(_EXPAND_DIMS, (input,), {"axis": a})


_SQUEEZE = defop("Squeeze", inputs=("x",), attrs={"axis": None}, dtype_rule="none",
                 grad=_as_input_shape, jvp=Linear())


@_SQUEEZE.def_batch
def _squeeze_batch(ctx, x):
    axis = ctx.attrs["axis"]
    r = len(x.shape) - 1
    if axis is None:
        axis = tuple(i for i, d in enumerate(x.shape[1:]) if d == 1)
    return rerun(ctx, (x,), axis=tuple(batch_axis(a, r) for a in axis))


def squeeze(input, axis=None, name=None, squeeze_dims=None):
    """Remove dimensions of size 1 (all of them, or those in ``axis``).

    >>> import tapeflow as tf
    >>> tf.squeeze(tf.zeros([1, 2, 1])).shape, tf.squeeze(tf.zeros([1, 2, 1]), [-1]).shape
    (TensorShape([2]), TensorShape([1, 2]))
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(squeeze, input, axis, name, squeeze_dims)
    if axis is None:
        axis = squeeze_dims
    if axis is None:
        return execute(_SQUEEZE, (input,), {"axis": None})
    x = _tensor(input)
    s = x._data.shape
    axes = (axis,) if not isinstance(axis, (list, tuple)) else axis
    out = tuple(sorted({_norm_axis1(a, len(s), "Squeeze", x) for a in axes}))
    for a in out:
        if s[a] != 1:
            raise InvalidArgumentError(
                f"Can not squeeze dim[{a}], expected a dimension of 1, got {s[a]}",
                op="Squeeze", device=x._device)
    return execute(_SQUEEZE, (x,), {"axis": out})


# --- shape queries ------------------------------------------------------------------------

def _out_type(out_type, fn, x):
    """Shape's and Size's out_type: int32 or int64 (TensorFlow's; a float or complex
    count would be a silent conversion). The ops' attr type says the same to direct
    calls (its ``attr_types``)."""
    dt = _dt.as_dtype(out_type)
    if dt is not _dt.int32 and dt is not _dt.int64:
        raise InvalidTypeError(
            f"{fn}: out_type must be tf.int32 or tf.int64, got {dt.name}; tf.cast the "
            "result for another dtype", op=fn.capitalize(), device=_here(x))
    return {"out_type": dt}


def _shape_batch(ctx, x):
    """(tf.vectorized_map) Shape's, Size's and Rank's: one example's, not batched."""
    ctx.out_batched = (False,)
    return execute(ctx.op, (x[0] if ctx.size else zeros(tuple(x.shape[1:]), x.dtype),),
                   ctx.attrs)


# (out_type: a DType equals its name)
_SHAPE = defop("Shape", inputs=("x",), attrs={"out_type": _dt.int32}, dtype_rule="none",
               differentiable=False,
               attr_types={"out_type": "enum:int32|int64"}, batch=_shape_batch)
_SIZE = defop("Size", inputs=("x",), attrs={"out_type": _dt.int32}, dtype_rule="none",
              differentiable=False,
              attr_types={"out_type": "enum:int32|int64"}, batch=_shape_batch)
_RANK = defop("Rank", inputs=("x",), dtype_rule="none", differentiable=False,
              batch=_shape_batch)
_I32 = {"out_type": _dt.int32}


def shape(input, out_type=_dt.int32, name=None):
    """The shape of ``input`` as a 1-D int32 tensor (``out_type`` may be int64).

    >>> import tapeflow as tf
    >>> print(tf.shape(tf.zeros([2, 3])))
    tf.Tensor([2 3], shape=(2,), dtype=int32)
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(shape, input, out_type, name)
    return execute(_SHAPE, (input,), _I32 if out_type is _dt.int32 else
                   _out_type(out_type, "shape", input))


def size(input, out_type=_dt.int32, name=None):
    """The number of elements of ``input`` as a scalar tensor.

    >>> import tapeflow as tf
    >>> int(tf.size(tf.zeros([2, 3])))
    6
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(size, input, out_type, name)
    return execute(_SIZE, (input,), _I32 if out_type is _dt.int32 else
                   _out_type(out_type, "size", input))


def rank(input, name=None):
    """The number of dimensions of ``input`` as a scalar int32 tensor.

    >>> import tapeflow as tf
    >>> int(tf.rank(tf.zeros([2, 3])))
    2
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(rank, input, name)
    return execute(_RANK, (input,))
