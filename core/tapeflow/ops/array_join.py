"""Joining, splitting and repeating: ``concat``, ``stack``, ``unstack``, ``split``,
``tile`` (and the batching helper ``batch_coords``). Re-exported by
:mod:`tapeflow.ops.array`.

>>> import tapeflow as tf
>>> print(tf.stack([[1, 2], [3, 4]], axis=1))
tf.Tensor(
[[1 3]
 [2 4]], shape=(2, 2), dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ..runtime import shapes as _shapes
from ..runtime.dispatch import as_tensor_list, constant, execute
from ..errors import InvalidArgumentError
from ..runtime.registry import Linear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import reductions as _r
from .library import batch_axis, batch_one_axis, defop, rerun
from ._array_common import _here, _index, _ndim, _norm_axis1, _range, _shape_tuple, _tensor
from .array_shape import _RESHAPE
from .array_batching import batch_all
from .array_values import identity

__all__ = ['concat', 'stack', 'unstack', 'split', 'tile']

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
    return rerun(ctx, batch_all(ctx, xs),
                 axis=batch_axis(ctx.attrs["axis"], len(xs[0].shape) - ctx.batched[0]))


def concat(values, axis, name="concat"):
    """Join tensors along an existing ``axis``.

    >>> import tapeflow as tf
    >>> print(tf.concat([[[1, 2]], [[3, 4]]], 0))
    tf.Tensor(
    [[1 2]
     [3 4]], shape=(2, 2), dtype=int32)
    """
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
    return rerun(ctx, batch_all(ctx, xs), axis=batch_axis(ctx.attrs["axis"], r + 1))


def stack(values, axis=0, name="stack"):
    """Stack tensors of one shape along a new ``axis``.

    >>> import tapeflow as tf
    >>> tf.stack([[1, 2], [3, 4], [5, 6]], axis=1).shape
    TensorShape([2, 3])
    """
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
    return execute(_TILE, (input,), {"multiples": _shape_tuple(multiples, "Tile")})


def batch_coords(ctx, indices):
    """``indices`` (B, ..., K) with the example's index prepended: (B, ..., K+1)."""
    s = tuple(indices.shape)
    ids = np.arange(ctx.size, dtype=indices.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1))
    ids = constant(np.broadcast_to(ids, s[:-1] + (1,)).copy(), device=indices._device)
    return concat([ids, indices], axis=-1)
