"""Ops that pick or bound values elementwise: ``where``, ``identity``, ``stop_gradient``,
``clip_by_value``, ``clip_by_norm``, ``clip_by_global_norm``. Top-level names, and
names of :mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.clip_by_value([-2., 0.5, 3.], -1., 1.))
tf.Tensor([-1.   0.5  1. ], shape=(3,), dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ..runtime import shapes as _shapes
from ..runtime.dispatch import as_tensor_list, constant, execute
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.registry import Linear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .composite import any_composite, dispatch
from . import math as _m
from . import reductions as _r
from .library import BROADCASTING, defop, elementwise_jvp
from .array_creation import (_check_select, _here, _LIKE_NONE, _match_dtypes, _tensor, _ZEROS_LIKE,
                             ones_like)

__all__ = ['where', 'identity', 'stop_gradient', 'clip_by_value', 'clip_by_norm',
    'clip_by_global_norm']

# --- selection ------------------------------------------------------------------------------

def _select_grad(ctx, dy):
    c = ctx.inputs[0]
    z = execute(_ZEROS_LIKE, (dy,), _LIKE_NONE)
    return None, execute(_SELECT, (c, dy, z)), execute(_SELECT, (c, z, dy))


_SELECT = defop("SelectV2", inputs=("condition", "x", "y"), dtype_rule="none", dtype_from=1,
                broadcast=True, grad=_select_grad, check=_check_select,
                elementwise=True, jvp=Linear((1, 2)))
_WHERE = defop("Where", inputs=("condition",), dtype_rule="none", differentiable=False)


def where(condition, x=None, y=None, name=None):
    """With ``x`` and ``y``: elements of ``x`` where ``condition`` is true, else of ``y``
    (all three broadcast). Alone: the coordinates of the true (non-zero) elements of
    ``condition``, an int64 tensor of shape ``[n, rank]``.

    >>> import tapeflow as tf
    >>> print(tf.where([True, False, True], [1., 2., 3.], 0.))
    tf.Tensor([1. 0. 3.], shape=(3,), dtype=float32)
    >>> print(tf.where([[True, False], [False, True]]))
    tf.Tensor(
    [[0 0]
     [1 1]], shape=(2, 2), dtype=int64)
    """
    if any_composite(condition, x, y):
        return dispatch(where, condition, x, y, name)
    if x is None and y is None:
        return execute(_WHERE, (condition,))
    if x is None or y is None:
        raise InvalidArgumentError("where: x and y must both be given or both be None")
    c = _tensor(condition)
    if not c.dtype.is_bool:
        raise InvalidArgumentError(
            f"where: condition must be a bool tensor when x and y are given, got "
            f"{c.dtype.name}; compare first (e.g. tf.not_equal(c, 0))", op="SelectV2",
            device=c._device)
    if not (type(x) is Tensor and type(y) is Tensor and x._data.dtype == y._data.dtype):
        x, y = _match_dtypes(x, y)
    return execute(_SELECT, (c, x, y))


where_v2 = where


# --- values ----------------------------------------------------------------------------------

def _identity_grad(ctx, dy):
    return dy


_IDENTITY = defop("Identity", inputs=("x",), dtype_rule="none", grad=_identity_grad,
                  jvp=Linear(), batch=BROADCASTING)


def identity(input, name=None):
    """The same value as a new tensor (recorded, so gradients flow through).

    >>> import tapeflow as tf
    >>> print(tf.identity([1, 2]))
    tf.Tensor([1 2], shape=(2,), dtype=int32)
    """
    return execute(_IDENTITY, (input,))


_STOP_GRADIENT = defop("StopGradient", inputs=("x",), dtype_rule="none", differentiable=False,
                       batch=BROADCASTING)


def stop_gradient(input, name=None):
    """The same value, treated as a constant by gradient tapes.

    >>> import tapeflow as tf
    >>> x = tf.constant(3.)
    >>> with tf.GradientTape() as t:
    ...     t.watch(x)
    ...     y = x * tf.stop_gradient(x)
    >>> float(t.gradient(y, x))
    3.0
    """
    return execute(_STOP_GRADIENT, (input,))


def _clip_grad(ctx, dy):
    t, lo, hi = ctx.inputs
    if not t.dtype.is_floating:
        return None, None, None
    z = execute(_ZEROS_LIKE, (dy,), _LIKE_NONE)
    below = _m.less(t, lo)
    above = _m.greater(t, hi)
    inside = execute(_SELECT, (below, z, execute(_SELECT, (above, z, dy))))
    return inside, execute(_SELECT, (below, dy, z)), execute(_SELECT, (above, dy, z))


_CLIP = defop("ClipByValue", inputs=("t", "clip_value_min", "clip_value_max"), broadcast=True,
              grad=_clip_grad)
_CLIP.def_jvp(elementwise_jvp(_CLIP))        # (not fusable, but a diagonal Jacobian)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """``min(max(t, clip_value_min), clip_value_max)``; the gradient passes where
    ``t`` is inside the range.

    >>> import tapeflow as tf
    >>> print(tf.clip_by_value([-2., 0.5, 3.], -1., 1.))
    tf.Tensor([-1.   0.5  1. ], shape=(3,), dtype=float32)
    """
    for what, v in (("t", t), ("clip_value_min", clip_value_min),
                    ("clip_value_max", clip_value_max)):
        if _is_complex(v):
            raise InvalidTypeError(
                f"clip_by_value: {what} is complex ({_describe(v)}): complex numbers have no "
                "order; clip the real and imaginary parts (tf.math.real, tf.math.imag) or "
                "the magnitude (tf.clip_by_norm)", op="ClipByValue", device=_here(t))
    return execute(_CLIP, (t, clip_value_min, clip_value_max))


def _is_complex(v):
    """Whether ``v`` (a scalar, an array or a tensor) holds complex numbers."""
    d = getattr(v, "dtype", None)
    if d is not None:
        return getattr(d, "np", d).kind == "c"
    return isinstance(v, complex)


def _describe(v):
    d = getattr(v, "dtype", None)
    if d is None or not hasattr(v, "shape") or isinstance(v, np.generic):
        return _shapes.short_repr(v)
    return f"{type(v).__name__} of dtype {getattr(d, 'name', d)} and shape {list(v.shape)}"


def _real_norm(clip_norm, t, fn, op):
    """``clip_norm`` of clip_by_norm / clip_by_global_norm: refused when complex for a
    real ``t`` (casting it would drop its imaginary part)."""
    if _is_complex(clip_norm) and not (t is not None and t.dtype.is_complex):
        raise InvalidTypeError(
            f"{fn}: clip_norm must be a real number, got {_describe(clip_norm)}", op=op,
            device=_here(t))


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """Rescale ``t`` so its L2 norm (over ``axes``, all by default) is at most
    ``clip_norm``: ``t * clip_norm / max(norm(t), clip_norm)``.

    >>> import tapeflow as tf
    >>> print(tf.clip_by_norm([3., 4.], 1.))
    tf.Tensor([0.6 0.8], shape=(2,), dtype=float32)
    """
    t = _tensor(t)
    _real_norm(clip_norm, t, "clip_by_norm", "ClipByNorm")
    if isinstance(clip_norm, (Tensor, Variable)) and clip_norm.dtype is not t.dtype:
        clip_norm = _m.cast(clip_norm, t.dtype)
    l2sum = _r.reduce_sum(_m.multiply(t, t), axis=axes, keepdims=True)
    pred = _m.greater(l2sum, 0)
    l2sum_safe = where(pred, l2sum, ones_like(l2sum))
    l2norm = where(pred, _m.sqrt(l2sum_safe), l2sum)
    return _m.divide(_m.multiply(t, clip_norm), _m.maximum(l2norm, clip_norm))


def _global_norm(ts):
    dt = ts[0].dtype
    total = None
    for v in ts:
        if v.dtype is not dt:
            v = _m.cast(v, dt)
        s = _r.reduce_sum(_m.multiply(v, v))
        total = s if total is None else _m.add(total, s)
    return _m.sqrt(total)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of ``t_list`` by ``clip_norm / max(global_norm, clip_norm)``,
    where ``global_norm = sqrt(sum(||t||^2))``; returns ``(list, global_norm)``.
    ``None`` entries stay ``None``.

    >>> import tapeflow as tf
    >>> ts, n = tf.clip_by_global_norm([tf.constant([3.]), tf.constant([4.])], 1.)
    >>> float(n), [round(float(t[0]), 3) for t in ts]
    (5.0, [0.6, 0.8])
    """
    ts = [None if v is None else _tensor(v)
          for v in as_tensor_list(t_list, "ClipByGlobalNorm", "t_list")]
    present = [v for v in ts if v is not None]
    if use_norm is None:
        if not present:
            raise InvalidArgumentError("clip_by_global_norm: t_list has no tensors",
                                       op="ClipByGlobalNorm", device=_here())
        use_norm = _global_norm(present)
    else:
        use_norm = _tensor(use_norm)
    _real_norm(clip_norm, use_norm, "clip_by_global_norm", "ClipByGlobalNorm")
    dt = use_norm.dtype
    if not isinstance(clip_norm, (Tensor, Variable)):
        clip_norm = constant(clip_norm, dtype=dt, device=use_norm._device)
    elif clip_norm.dtype is not dt:
        clip_norm = _m.cast(clip_norm, dt)
    scale = _m.multiply(clip_norm, _m.minimum(_m.divide(1.0, use_norm),
                                              _m.divide(1.0, clip_norm)))
    # inf or nan norms give nan (as in TF) instead of silently zeroing everything
    scale = _m.add(scale, _m.subtract(use_norm, use_norm))
    out = [None if v is None else
           _m.multiply(v, scale if v.dtype is dt else _m.cast(scale, v.dtype)) for v in ts]
    return out, use_norm
