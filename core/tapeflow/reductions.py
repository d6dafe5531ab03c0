"""Reductions (``reduce_sum`` ...): signatures, gradients and public functions.

``axis`` reaches kernels normalised: ``None`` (all axes) or a tuple of
non-negative ints, sorted and unique; ``keepdims`` a bool.

>>> import tapeflow as tf
>>> print(tf.reduce_sum([[1., 2.], [3., 4.]], axis=0))
tf.Tensor([4. 6.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

from ._builtin import defop
from .errors import InvalidArgumentError
from .execute import convert_to_tensor, execute

__all__ = ["reduce_sum"]


def _norm_axis(axis, ndim, opname):
    """``None``/int/list/tensor -> None or a sorted tuple of non-negative axes."""
    if axis is None:
        return None
    if hasattr(axis, "numpy"):
        axis = axis.numpy().tolist()
    if isinstance(axis, int):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise InvalidArgumentError(
                f"axis {a} is out of range for a tensor of rank {ndim} "
                f"(valid: [{-ndim}, {ndim}))", op=opname)
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(set(out)))


def _reduced_shape(shape, axis):
    """Shape of the reduction's result with keepdims=True."""
    if axis is None:
        return (1,) * len(shape)
    return tuple(1 if i in axis else d for i, d in enumerate(shape))


def _sum_grad(ctx, dy):
    from . import array as _a
    x = ctx.inputs[0]
    axis = ctx.attrs["axis"]
    shape = tuple(x.shape)
    if not ctx.attrs["keepdims"]:
        dy = _a.reshape(dy, _reduced_shape(shape, axis))
    return _a.broadcast_to(dy, shape)


_SUM = defop("Sum", inputs=("x",), attrs={"axis": None, "keepdims": False}, grad=_sum_grad)


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None):
    """Sum over ``axis`` (all axes when None)."""
    x = convert_to_tensor(input_tensor)
    if keep_dims is not None:
        keepdims = keep_dims
    return execute(_SUM, (x,), {"axis": _norm_axis(axis, x.ndim, "Sum"), "keepdims": bool(keepdims)})
