"""Shape, creation and indexing ops (``reshape``, ``zeros``, ``gather`` ...).

>>> import tapeflow as tf
>>> print(tf.reshape(tf.range(6), [2, 3]))
tf.Tensor(
[[0 1 2]
 [3 4 5]], shape=(2, 3), dtype=int32)
"""

from __future__ import annotations

from . import devices as _devs
from . import dtypes as _dt
from ._builtin import defop
from .execute import convert_to_tensor, execute

__all__ = ["identity", "reshape", "broadcast_to", "fill", "zeros", "ones", "zeros_like", "ones_like", "stack"]


def _shape_tuple(shape):
    if hasattr(shape, "numpy"):
        shape = shape.numpy().tolist()
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(s) for s in shape)


def _reshape_grad(ctx, dy):
    return reshape(dy, tuple(ctx.inputs[0].shape))


_RESHAPE = defop("Reshape", inputs=("x",), attrs={"shape": None}, dtype_rule="none",
                 grad=_reshape_grad)


def reshape(tensor, shape, name=None):
    """Same values, new shape (one dimension may be -1)."""
    return execute(_RESHAPE, (tensor,), {"shape": _shape_tuple(shape)})


def _broadcast_to_grad(ctx, dy):
    from .tape import _unbroadcast
    return _unbroadcast(dy, tuple(ctx.inputs[0].shape))


_BROADCAST_TO = defop("BroadcastTo", inputs=("x",), attrs={"shape": None}, dtype_rule="none",
                      grad=_broadcast_to_grad)


def broadcast_to(input, shape, name=None):
    """Broadcast ``input`` to ``shape`` (NumPy rules)."""
    return execute(_BROADCAST_TO, (input,), {"shape": _shape_tuple(shape)})


_FILL = defop("Fill", inputs=(), attrs={"shape": None, "value": 0, "dtype": None},
              dtype_from="dtype", differentiable=False)


def fill(dims, value, dtype=None, name=None):
    """A tensor of shape ``dims`` filled with ``value``."""
    if dtype is None:
        dtype = convert_to_tensor(value).dtype if not hasattr(value, "dtype") else value.dtype
    dt = _dt.as_dtype(dtype)
    if hasattr(value, "numpy"):
        value = value.numpy().item()
    return execute(_FILL, (), {"shape": _shape_tuple(dims), "value": value, "dtype": dt})


def zeros(shape, dtype=_dt.float32, name=None):
    """Zeros of ``shape`` (float32 by default).

    >>> import tapeflow as tf
    >>> tf.zeros([1, 1, 784]).shape
    TensorShape([1, 1, 784])
    """
    return execute(_FILL, (), {"shape": _shape_tuple(shape), "value": 0, "dtype": _dt.as_dtype(dtype)})


def ones(shape, dtype=_dt.float32, name=None):
    """Ones of ``shape`` (float32 by default)."""
    return execute(_FILL, (), {"shape": _shape_tuple(shape), "value": 1, "dtype": _dt.as_dtype(dtype)})


def _like(x, value, dtype):
    x = convert_to_tensor(x)
    dt = x.dtype if dtype is None else _dt.as_dtype(dtype)
    scope = _devs.current_device()
    dev = scope if scope is not None else x._device
    with _devs.device(dev):
        return execute(_FILL, (), {"shape": tuple(x.shape), "value": value, "dtype": dt})


def zeros_like(input, dtype=None, name=None):
    """Zeros with the shape (and dtype, device) of ``input``."""
    return _like(input, 0, dtype)


def ones_like(input, dtype=None, name=None):
    """Ones with the shape (and dtype, device) of ``input``."""
    return _like(input, 1, dtype)


def _stack_grad(ctx, dy):
    axis = ctx.attrs["axis"]
    idx = [slice(None)] * dy.ndim
    out = []
    for i in range(len(ctx.inputs)):
        idx[axis] = i
        out.append(dy[tuple(idx)])
    return tuple(out)


_STACK = defop("Pack", inputs=("*values",), attrs={"axis": 0}, grad=_stack_grad)


def stack(values, axis=0, name=None):
    """Stack tensors of one shape along a new ``axis``."""
    vals = tuple(values)
    if not vals:
        from .errors import InvalidArgumentError
        raise InvalidArgumentError("stack needs at least one tensor", op="Pack")
    nd = len(convert_to_tensor(vals[0]).shape) if not hasattr(vals[0], "shape") else len(vals[0].shape)
    if axis < 0:
        axis += nd + 1
    return execute(_STACK, vals, {"axis": axis})


def _identity_grad(ctx, dy):
    return dy


_IDENTITY = defop("Identity", inputs=("x",), dtype_rule="none", grad=_identity_grad)


def identity(input, name=None):
    """The same value as a new tensor (recorded, so gradients flow through)."""
    return execute(_IDENTITY, (input,))
