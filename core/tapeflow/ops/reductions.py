"""Reductions (``reduce_sum``, ``reduce_mean``, ``argmax`` ...): signatures, gradients and
public functions. They belong to the ``tf.math`` namespace (:mod:`tapeflow.ops` joins
``__all__`` to :mod:`tapeflow.ops.math`) and are also top-level names. ``broadcast_to``
(``tf.broadcast_to``, a name of :mod:`tapeflow.ops`) and ``unbroadcast`` are here too:
BroadcastTo's gradient is a sum and Sum's a broadcast, so the two ops are declared in
one module.

``axis`` reaches kernels normalised: ``None`` (all axes) or a tuple of
non-negative ints, sorted and unique; ``keepdims`` a bool. Every reduction also
accepts the TF1 spellings ``keep_dims=`` and ``reduction_indices=``.

>>> import tapeflow as tf
>>> print(tf.reduce_sum([[1., 2.], [3., 4.]], axis=0))
tf.Tensor([4. 6.], shape=(2,), dtype=float32)
>>> print(tf.reduce_max([[1, 5], [7, 2]], axis=-1, keepdims=True))
tf.Tensor(
[[5]
 [7]], shape=(2, 1), dtype=int32)
"""

from __future__ import annotations

from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from .composite import COMPOSITE_TYPES, dispatch
from .library import batch_axis, batch_one_axis, defop, flag, rerun
from ..errors import InvalidArgumentError
from ..runtime.dispatch import run, convert_to_tensor, execute
from ..runtime.registry import Linear
from ..runtime.tensor import Tensor
from . import math as _m
from .array_creation import _range, _scopes, _shape_tuple, ones_like
from .array_shape import _RESHAPE, reshape

__all__ = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
           "reduce_logsumexp", "reduce_any", "reduce_all", "argmax", "argmin",
           "count_nonzero", "reduce_euclidean_norm", "reduce_variance", "reduce_std"]


# --- broadcasting and its inverse: BroadcastTo's gradient is a sum, Sum's a broadcast ---

def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (the inverse of NumPy broadcasting)."""
    gshape = g._data.shape
    shape = tuple(shape)
    lead = len(gshape) - len(shape)
    axes = list(_range(lead))
    for i, d in enumerate(shape):
        if d == 1 and gshape[lead + i] != 1:
            axes.append(lead + i)
    if axes:        # (sorted, distinct and in range: no normalisation to do)
        g = execute(_SUM, (g,), {"axis": tuple(axes), "keepdims": False})
    if g._data.shape != shape:
        g = reshape(g, shape)
    return g


def _broadcast(t, shape):
    """``broadcast_to(t, shape)`` for a ``shape`` known valid (a tuple of ints: an op
    input's, in the gradients): no argument conversion, and ``t`` itself when it has the
    shape already. What ``execute`` would do, without its layers (BroadcastTo has a
    ``check``, so it has no fast kernel): ``_run`` on ``t``'s device outside a device
    scope or tracer, ``execute`` inside one (placement, tracing)."""
    if t._data.shape == shape:
        return t
    if type(t) is Tensor and not _scopes[0]:
        return run(_BROADCAST_TO, (t,), t._device, {"shape": shape})
    return execute(_BROADCAST_TO, (t,), {"shape": shape})


def _broadcast_to_grad(ctx, dy):
    return unbroadcast(dy, ctx.inputs[0]._data.shape)


def _broadcast_to_infer(shapes, dtypes, attrs):
    s = tuple(shapes[0])
    new = tuple(attrs["shape"])
    ok = len(s) <= len(new) and all(a == b or a == 1 for a, b in zip(s[::-1], new[::-1]))
    if not ok:
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {s} to shape {new}")
    return [(new, dtypes[0])]


_BROADCAST_TO = defop("BroadcastTo", inputs=("x",), attrs={"shape": None}, dtype_rule="none",
                      grad=_broadcast_to_grad, infer=_broadcast_to_infer,
                      check=_shapes.check_shape_attr, jvp=Linear())


@_BROADCAST_TO.def_batch
def _broadcast_to_batch(ctx, x):
    shape = tuple(ctx.attrs["shape"])
    s = tuple(x.shape)
    x = reshape(x, s[:1] + (1,) * (len(shape) - len(s) + 1) + s[1:])
    return rerun(ctx, (x,), shape=(ctx.size,) + shape)


def broadcast_to(input, shape, name=None):
    """Broadcast ``input`` to ``shape`` (NumPy rules).

    >>> import tapeflow as tf
    >>> print(tf.broadcast_to([1, 2], [2, 2]))
    tf.Tensor(
    [[1 2]
     [1 2]], shape=(2, 2), dtype=int32)
    """
    if type(shape) in COMPOSITE_TYPES:
        return dispatch(broadcast_to, input, shape, name)
    return execute(_BROADCAST_TO, (input,), {"shape": _shape_tuple(shape, "BroadcastTo")})


def _norm_axis(axis, ndim, opname, device=None):
    """``None``/int/list/tensor -> None or a sorted tuple of distinct non-negative axes."""
    if type(axis) is int and -ndim <= axis < ndim:      # the common case, without allocation
        return (axis % ndim,)
    return _shapes.normalize_axes(axis, ndim, opname, device)


def _reduced_shape(shape, axis):
    """Shape of the reduction's result with keepdims=True."""
    if axis is None:
        return (1,) * len(shape)
    return tuple(1 if i in axis else d for i, d in enumerate(shape))


# the attrs of a reduction over all axes without keepdims (the defaults): one dict for
# every call that passes none (attrs are never mutated: records and traces share them)
_ALL_AXES = {"axis": None, "keepdims": False}


def _reduce(op, input_tensor, axis, keepdims, keep_dims, reduction_indices):
    """Convert, normalise ``axis``/``keepdims`` and run a reduction op."""
    if type(input_tensor) is Tensor and axis is None and keepdims is False and (
            keep_dims is None and reduction_indices is None):
        return execute(op, (input_tensor,), _ALL_AXES)     # the defaults: nothing to check
    x = input_tensor if type(input_tensor) is Tensor else convert_to_tensor(input_tensor)
    if reduction_indices is not None and axis is None:
        axis = reduction_indices
    if keep_dims is not None:
        keepdims = keep_dims
    if type(keepdims) is not bool:
        keepdims = flag(keepdims, "keepdims", op.name, x)
    axis = _norm_axis(axis, len(x._data.shape), op.name, x._device)
    return execute(op, (x,), {"axis": axis, "keepdims": keepdims})


def _keep(ctx, t):
    """``t`` (shaped like the op's output) reshaped to the keepdims=True shape, or as it
    is when it broadcasts against the input already (NumPy aligns trailing axes):
    keepdims, a full reduction's 0-d result, or a reduction of leading axes
    (``axis=(0,)``, ``(0, 1)``...: ``axis`` is sorted and distinct) or of none."""
    attrs = ctx.attrs
    axis = attrs["axis"]
    if attrs["keepdims"] or axis is None or not axis or axis[-1] == len(axis) - 1:
        return t
    # (execute, not tf.reshape: the shape is valid, nothing to convert or check)
    return execute(_RESHAPE, (t,), {"shape": _reduced_shape(ctx.inputs[0]._data.shape, axis)})


def _count(shape, axis):
    """Number of elements reduced into each output element."""
    n = 1
    for i, d in enumerate(shape):
        if axis is None or i in axis:
            n *= d
    return n


# --- gradients (tapeflow ops only, so they are differentiable again) ---------------

def _sum_grad(ctx, dy):
    # (over all axes: one BroadcastTo kernel call)
    if ctx.attrs["axis"] is not None:
        dy = _keep(ctx, dy)
    return _broadcast(dy, ctx.inputs[0]._data.shape)


def _mean_grad(ctx, dy):
    x = ctx.inputs[0]
    if not x.dtype.is_inexact:
        return None
    shape = x._data.shape
    n = _count(shape, ctx.attrs["axis"])
    return _broadcast(_m.divide(_keep(ctx, dy), float(max(n, 1))), shape)


def _minmax_grad(ctx, dy):
    """dy shared equally among the elements equal to the result (TF semantics)."""
    x = ctx.inputs[0]
    if not x.dtype.is_floating:
        return None
    mask = _m.cast(_m.equal(x, _keep(ctx, ctx.outputs[0])), x.dtype)
    count = execute(_SUM, (mask,), {"axis": ctx.attrs["axis"], "keepdims": True})
    return _m.multiply(_m.divide(mask, count), _keep(ctx, dy))


def _prod_grad(ctx, dy):
    """Product of the other elements; exact also for inputs containing zeros."""
    x = ctx.inputs[0]
    if not x.dtype.is_inexact:
        return None
    axis = ctx.attrs["axis"]
    dt = x.dtype
    zeros = _m.cast(_m.equal(x, 0), dt)                         # 1 where x == 0
    x1 = _m.add(x, zeros)                                       # zeros replaced by ones
    p1 = execute(_PROD, (x1,), {"axis": axis, "keepdims": True})  # product of nonzeros
    nz = reduce_sum(zeros, axis=axis, keepdims=True)            # zeros per slice
    no_zero = _m.cast(_m.equal(nz, 0), dt)
    one_zero = _m.cast(_m.equal(nz, 1), dt)
    g = _m.add(_m.multiply(no_zero, _m.divide(p1, x1)),
               _m.multiply(_m.multiply(one_zero, zeros), p1))
    return _m.multiply(g, _keep(ctx, dy))


def _logsumexp_grad(ctx, dy):
    x = ctx.inputs[0]
    return _m.multiply(_m.exp(_m.subtract(x, _keep(ctx, ctx.outputs[0]))), _keep(ctx, dy))


def _euclidean_norm_grad(ctx, dy):
    """x / ||x||, and 0 where the norm is 0 (a subgradient, no NaN)."""
    x = ctx.inputs[0]
    y = _keep(ctx, ctx.outputs[0])
    safe = _m.add(y, _m.cast(_m.equal(y, 0), x.dtype))
    return _m.multiply(_m.divide(x, safe), _keep(ctx, dy))


# --- forward-mode (JVP) and batching rules ----------------------------------------------
def _reduce_like(ctx, t):
    return reduce_sum(t, axis=ctx.attrs["axis"], keepdims=ctx.attrs["keepdims"])


def _minmax_jvp(ctx, t):
    # the tangent of the (tied) extreme elements, shared as the gradient shares dy
    x = ctx.inputs[0]
    mask = _m.cast(_m.equal(x, _keep(ctx, ctx.outputs[0])), x.dtype)
    return _m.divide(_reduce_like(ctx, _m.multiply(t, mask)), _reduce_like(ctx, mask))


def _logsumexp_jvp(ctx, t):
    w = _m.exp(_m.subtract(ctx.inputs[0], _keep(ctx, ctx.outputs[0])))     # softmax
    return _reduce_like(ctx, _m.multiply(w, t))


def _euclidean_norm_jvp(ctx, t):
    out = ctx.outputs[0]               # (0 at a zero norm, as the gradient's rule)
    safe = _m.add(out, _m.cast(_m.equal(out, 0), out.dtype))
    return _m.divide(_reduce_like(ctx, _m.multiply(ctx.inputs[0], t)), safe)


def _prod_jvp(ctx, t):
    # sum of t times the product of the other elements (zero-safe: the gradient rule's)
    others = _prod_grad(ctx, ones_like(ctx.outputs[0]))   # (the unconjugated real rule)
    return _reduce_like(ctx, _m.multiply(t, others))


def _batch_reduce(ctx, x):
    # (tf.vectorized_map) the reduced axes shift past the batch; None reduces an example
    r = len(x.shape) - 1
    axis = ctx.attrs["axis"]
    axes = tuple(range(1, r + 1)) if axis is None else tuple(sorted(batch_axis(a, r)
                                                                    for a in axis))
    return rerun(ctx, (x,), axis=axes)


_R = {"axis": None, "keepdims": False}
_SUM = defop("Sum", inputs=("x",), attrs=_R, grad=_sum_grad, jvp=Linear((0,)),
             batch=_batch_reduce)
_MEAN = defop("Mean", inputs=("x",), attrs=_R, grad=_mean_grad, jvp=Linear((0,)),
              batch=_batch_reduce)
_MAX = defop("Max", inputs=("x",), attrs=_R, grad=_minmax_grad, jvp=_minmax_jvp,
             batch=_batch_reduce)
_MIN = defop("Min", inputs=("x",), attrs=_R, grad=_minmax_grad, jvp=_minmax_jvp,
             batch=_batch_reduce)
_PROD = defop("Prod", inputs=("x",), attrs=_R, grad=_m._holomorphic(_prod_grad),
              jvp=_prod_jvp, batch=_batch_reduce)
_LSE = defop("ReduceLogSumExp", inputs=("x",), attrs=_R, grad=_logsumexp_grad,
             jvp=_logsumexp_jvp, batch=_batch_reduce)
_ENORM = defop("EuclideanNorm", inputs=("x",), attrs=_R, grad=_euclidean_norm_grad,
               jvp=_euclidean_norm_jvp, batch=_batch_reduce)
_ANY = defop("Any", inputs=("x",), attrs=_R, differentiable=False, batch=_batch_reduce)
_ALL = defop("All", inputs=("x",), attrs=_R, differentiable=False, batch=_batch_reduce)
_ARG = {"axis": 0, "output_type": _dt.int64}
_ARGMAX = defop("ArgMax", inputs=("x",), attrs=_ARG, differentiable=False,
                batch=batch_one_axis)
_ARGMIN = defop("ArgMin", inputs=("x",), attrs=_ARG, differentiable=False,
                batch=batch_one_axis)


# --- public functions ----------------------------------------------------------------

def reduce_sum(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
               reduction_indices=None):
    """Sum over ``axis`` (all axes when None); the dtype is kept (integers wrap).

    >>> import tapeflow as tf
    >>> print(tf.reduce_sum([[1, 2], [3, 4]], axis=[0, 1]))
    tf.Tensor(10, shape=(), dtype=int32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_sum, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    if type(input_tensor) is Tensor and axis is None and keepdims is False and (
            keep_dims is None and reduction_indices is None):
        return execute(_SUM, (input_tensor,), _ALL_AXES)    # (_reduce's, one call less)
    return _reduce(_SUM, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    """Mean over ``axis``. Integer inputs stay integers: the mean truncates toward
    zero, as in TF. A mean over zero elements is NaN (0 for integers).

    >>> import tapeflow as tf
    >>> print(tf.reduce_mean([[1., 2.], [3., 4.]], axis=1))
    tf.Tensor([1.5 3.5], shape=(2,), dtype=float32)
    >>> print(tf.reduce_mean([1, 2]))
    tf.Tensor(1, shape=(), dtype=int32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_mean, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    if type(input_tensor) is Tensor and axis is None and keepdims is False and (
            keep_dims is None and reduction_indices is None):
        return execute(_MEAN, (input_tensor,), _ALL_AXES)   # (_reduce's, one call less)
    return _reduce(_MEAN, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_max(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
               reduction_indices=None):
    """Maximum over ``axis``; the gradient is shared equally among tied maxima.
    Reducing over an axis of size 0 raises InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.reduce_max([[1., 5.], [7., 2.]], axis=0))
    tf.Tensor([7. 5.], shape=(2,), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_max, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_MAX, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_min(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
               reduction_indices=None):
    """Minimum over ``axis`` (see :func:`reduce_max`).

    >>> import tapeflow as tf
    >>> print(tf.reduce_min([[1., 5.], [7., 2.]], axis=1))
    tf.Tensor([1. 2.], shape=(2,), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_min, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_MIN, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_prod(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                reduction_indices=None):
    """Product over ``axis`` (1 over zero elements); the gradient is exact also
    where the input has zeros.

    >>> import tapeflow as tf
    >>> print(tf.reduce_prod([[1., 2.], [3., 4.]], axis=0))
    tf.Tensor([3. 8.], shape=(2,), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_prod, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_PROD, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
                     reduction_indices=None):
    """``log(sum(exp(x)))`` over ``axis``, computed stably (shifted by the maximum).

    >>> import tapeflow as tf
    >>> print(tf.reduce_logsumexp([1000., 1000.]))
    tf.Tensor(1000.6932, shape=(), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_logsumexp, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_LSE, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_euclidean_norm(input_tensor, axis=None, keepdims=False, name=None):
    """``sqrt(sum(x ** 2))`` over ``axis``; the gradient at 0 is 0.

    >>> import tapeflow as tf
    >>> print(tf.reduce_euclidean_norm([3., 4.]))
    tf.Tensor(5.0, shape=(), dtype=float32)
    """
    return _reduce(_ENORM, input_tensor, axis, keepdims, None, None)


def reduce_any(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
               reduction_indices=None):
    """Logical OR over ``axis`` (bool input).

    >>> import tapeflow as tf
    >>> print(tf.reduce_any([[True, False], [False, False]], axis=1))
    tf.Tensor([ True False], shape=(2,), dtype=bool)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_any, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_ANY, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_all(input_tensor, axis=None, keepdims=False, name=None, keep_dims=None,
               reduction_indices=None):
    """Logical AND over ``axis`` (bool input).

    >>> import tapeflow as tf
    >>> print(tf.reduce_all([[True, False], [True, True]], axis=1))
    tf.Tensor([False  True], shape=(2,), dtype=bool)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_all, input_tensor, axis, keepdims, name, keep_dims,
                        reduction_indices)
    return _reduce(_ALL, input_tensor, axis, keepdims, keep_dims, reduction_indices)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None):
    """Population variance over ``axis`` (mean of squared deviations), floats only.

    >>> import tapeflow as tf
    >>> print(tf.math.reduce_variance([[1., 2.], [3., 4.]], axis=0))
    tf.Tensor([1. 1.], shape=(2,), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_variance, input_tensor, axis, keepdims, name)
    x = input_tensor if type(input_tensor) is Tensor else convert_to_tensor(input_tensor)
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"reduce_variance needs a float input, got {x.dtype.name}",
                                   op="Mean", device=x._device)
    keepdims = flag(keepdims, "reduce_variance: keepdims", "Mean", x)
    dev = _m.subtract(x, reduce_mean(x, axis=axis, keepdims=True))
    return reduce_mean(_m.multiply(dev, dev), axis=axis, keepdims=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None):
    """Population standard deviation over ``axis`` (``sqrt(reduce_variance)``).

    >>> import tapeflow as tf
    >>> print(tf.math.reduce_std([1., 3.]))
    tf.Tensor(1.0, shape=(), dtype=float32)
    """
    if type(input_tensor) in COMPOSITE_TYPES:
        return dispatch(reduce_std, input_tensor, axis, keepdims, name)
    return _m.sqrt(reduce_variance(input_tensor, axis=axis, keepdims=keepdims))


def _arg(op, input, axis, output_type):
    x = input if type(input) is Tensor else convert_to_tensor(input)
    ndim = len(x._data.shape)
    if axis is None:
        axis = 0
    if hasattr(axis, "__len__") and not (hasattr(axis, "ndim") and axis.ndim == 0):
        raise InvalidArgumentError(f"{op.name} takes one axis (an int), got {axis!r}",
                                   op=op.name, device=x._device)
    axis = _shapes.normalize_axis(axis, ndim, op.name, x._device)
    ot = _dt.as_dtype(output_type)
    if ot is not _dt.int32 and ot is not _dt.int64:
        raise InvalidArgumentError(f"output_type must be int32 or int64, got {ot.name}",
                                   op=op.name, device=x._device)
    return execute(op, (x,), {"axis": axis, "output_type": ot})


def argmax(input, axis=None, output_type=_dt.int64, name=None, dimension=None):
    """Index of the largest value along ``axis`` (default 0; the first one on ties).
    Not differentiable.

    >>> import tapeflow as tf
    >>> print(tf.argmax([[1, 9], [7, 2]], axis=1))
    tf.Tensor([1 0], shape=(2,), dtype=int64)
    """
    return _arg(_ARGMAX, input, dimension if axis is None else axis, output_type)


def argmin(input, axis=None, output_type=_dt.int64, name=None, dimension=None):
    """Index of the smallest value along ``axis`` (default 0). Not differentiable.

    >>> import tapeflow as tf
    >>> print(tf.argmin([3., 1., 2.]))
    tf.Tensor(1, shape=(), dtype=int64)
    """
    return _arg(_ARGMIN, input, dimension if axis is None else axis, output_type)


def count_nonzero(input, axis=None, keepdims=None, dtype=_dt.int64, name=None,
                  reduction_indices=None, keep_dims=None):
    """Number of nonzero (True, NaN counts) elements along ``axis``.

    >>> import tapeflow as tf
    >>> print(tf.math.count_nonzero([[0, 1], [2, 3]], axis=0))
    tf.Tensor([1 2], shape=(2,), dtype=int64)
    """
    nonzero = _m.cast(input, _dt.bool_)
    keepdims = flag(keepdims, "count_nonzero: keepdims", "CountNonzero", input)
    return _reduce(_SUM, _m.cast(nonzero, dtype), axis, keepdims, keep_dims,
                   reduction_indices)
