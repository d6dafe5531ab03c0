"""Neural-network ops (``tf.nn.*``): activations, softmax and losses, convolution,
pooling, dropout and normalisation.

Gradients are written with tapeflow ops, so they are differentiable again. Where
TensorFlow has a dedicated backward op (``ReluGrad``, ``Conv2DBackpropInput``,
``MaxPoolGrad`` ...) so do we: the backward pass costs one kernel call, and the
backward op's own gradient is again a forward or backward op (the gradient of
``Conv2DBackpropInput`` w.r.t. its ``out_backprop`` is ``conv2d``).

Attribute conventions (what kernels receive): ``strides``, ``dilations`` and
``ksize`` are 2-tuples ``(h, w)`` of positive ints; ``padding`` is ``"SAME"``,
``"VALID"`` or explicit ``((top, bottom), (left, right))``; ``data_format`` is
``"NHWC"`` or ``"NCHW"``; ``axis`` a non-negative int.

>>> import tapeflow as tf
>>> print(tf.nn.relu([-1., 2.]))
tf.Tensor([0. 2.], shape=(2,), dtype=float32)
>>> print(tf.nn.softmax([0., 0.]))
tf.Tensor([0.5 0.5], shape=(2,), dtype=float32)
"""

# Long file: the tf.nn namespace -- activations, softmax and losses, convolution, pooling,
# dropout -- each op one declaration block (with its backward op's) beside its public
# function; the sections are independent and can become modules of an ops/nn/ package.

from __future__ import annotations

import functools

import numpy as np

from ..runtime import devices as _devs
from ..runtime import shapes as _shapes
from .library import (BROADCASTING, batch_axis, batch_one_axis, defop, flag, real_number,
                       rerun)
from ..errors import InvalidArgumentError
from ..runtime.dispatch import convert_like, convert_to_tensor, execute
from ..runtime.registry import Linear, Multilinear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import math as _m
from .array_creation import one_hot
from .array_shape import reshape
from . import batching as _b
from . import reductions as _red
from . import random as _r

__all__ = [
    "relu", "relu6", "leaky_relu", "elu", "softmax", "log_softmax", "bias_add", "l2_loss",
    "moments", "batch_normalization", "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "sparse_softmax_cross_entropy_with_logits",
    "sigmoid_cross_entropy_with_logits", "conv2d", "conv2d_backprop_input",
    "conv2d_backprop_filter", "conv2d_transpose", "max_pool2d", "max_pool", "avg_pool2d",
    "avg_pool", "dropout", "sigmoid", "tanh", "softplus",
]

#: nothing from tf.nn is also a top-level name
TOP_LEVEL: list = []


def _t(x):
    return x if type(x) is Tensor else convert_to_tensor(x)


def _on_device(fn):
    """Errors a public function raises before dispatch name the device the op would
    have run on (the scope's, else the first tensor argument's, else the default)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except InvalidArgumentError as e:
            if e.device is None:
                dev = _devs.current_device()
                if dev is None:
                    for a in (*args, *kwargs.values()):
                        d = getattr(a, "_device", None)
                        if d is not None:
                            dev = d
                            break
                e.with_context(e.op, dev or _devs.default_device())
            raise
    return wrapper


def _shape(x):
    return list(x._data.shape)


def _need(ctx, i):
    """Whether the tape needs the gradient of input ``i`` (``ctx.needs``, when the
    core provides it: a bool per input). Lets rules skip real work, e.g. the input
    gradient of a first conv layer or the gradient of constant labels."""
    needs = getattr(ctx, "needs", None)
    return needs is None or needs[i]


# --- activations ---------------------------------------------------------------------

def _relu_grad(ctx, dy):
    x = ctx.inputs[0]
    if not x.dtype.is_floating:
        return None
    return execute(_RELU_GRAD, (dy, x))


def _relu_grad_grad(ctx, ddx):
    # ReluGrad(dy, x) = dy * (x > 0): linear in dy, piecewise constant in x
    return execute(_RELU_GRAD, (ddx, ctx.inputs[1])), None


_RELU = defop("Relu", inputs=("features",), grad=_relu_grad, elementwise=True)
_RELU_GRAD = defop("ReluGrad", inputs=("gradients", "features"), grad=_relu_grad_grad,
                   elementwise=True)


def relu(features, name=None):
    """``max(features, 0)``.

    >>> import tapeflow as tf
    >>> print(tf.nn.relu([-2., 0., 3.]))
    tf.Tensor([0. 0. 3.], shape=(3,), dtype=float32)
    """
    return execute(_RELU, (features,))


def _relu6_grad(ctx, dy):
    x = ctx.inputs[0]
    if not x.dtype.is_floating:
        return None
    return execute(_RELU6_GRAD, (dy, x))


def _relu6_grad_grad(ctx, ddx):
    return execute(_RELU6_GRAD, (ddx, ctx.inputs[1])), None


_RELU6 = defop("Relu6", inputs=("features",), grad=_relu6_grad, elementwise=True)
_RELU6_GRAD = defop("Relu6Grad", inputs=("gradients", "features"), grad=_relu6_grad_grad,
                    elementwise=True)


def relu6(features, name=None):
    """``min(max(features, 0), 6)``."""
    return execute(_RELU6, (features,))


def _leaky_grad(ctx, dy):
    return execute(_LEAKY_GRAD, (dy, ctx.inputs[0]), ctx.attrs)


def _leaky_grad_grad(ctx, ddx):
    return execute(_LEAKY_GRAD, (ddx, ctx.inputs[1]), ctx.attrs), None


_LEAKY = defop("LeakyRelu", inputs=("features",), attrs={"alpha": 0.2}, grad=_leaky_grad,
               elementwise=True)


def _leaky_relu_grad_batch(ctx, dy, x):
    # the kernels give the result the features' shape (cpu:0 multiplies in place), so a
    # batch of gradients against one features tensor (GradientTape.jacobian) gives both
    # the batch first
    return execute(ctx.op, _b.batch_all(ctx, (dy, x)), ctx.attrs)


_LEAKY_GRAD = defop("LeakyReluGrad", inputs=("gradients", "features"), attrs={"alpha": 0.2},
                    grad=_leaky_grad_grad, elementwise=True, batch=_leaky_relu_grad_batch)


def leaky_relu(features, alpha=0.2, name=None):
    """``features`` where positive, ``alpha * features`` elsewhere."""
    alpha = real_number(alpha, "leaky_relu: alpha", "LeakyRelu", features)
    return execute(_LEAKY, (features,), {"alpha": float(alpha)})


def _elu_grad(ctx, dy):
    return execute(_ELU_GRAD, (dy, ctx.outputs[0]))


def _elu_grad_grad(ctx, ddx):
    dy, y = ctx.inputs
    # d/dy [dy * (y + 1)] = dy where y < 0, else 0;  ReluGrad(v, -y) = v * (y < 0)
    return (execute(_ELU_GRAD, (ddx, y)),
            execute(_RELU_GRAD, (_m.multiply(ddx, dy), _m.negative(y))))


_ELU = defop("Elu", inputs=("features",), grad=_elu_grad, elementwise=True)
_ELU_GRAD = defop("EluGrad", inputs=("gradients", "outputs"), grad=_elu_grad_grad,
                  elementwise=True)


def elu(features, name=None):
    """``features`` where positive, ``exp(features) - 1`` elsewhere."""
    return execute(_ELU, (features,))


def sigmoid(x, name=None):
    """``1 / (1 + exp(-x))`` (the same op as ``tf.sigmoid``)."""
    return _m.sigmoid(x)


def tanh(x, name=None):
    """Hyperbolic tangent (the same op as ``tf.tanh``)."""
    return _m.tanh(x)


def softplus(features, name=None):
    """``log(1 + exp(features))`` (the same op as ``tf.math.softplus``)."""
    return _m.softplus(features)


# --- softmax ---------------------------------------------------------------------------

def _axis(axis, ndim, opname):
    return _shapes.normalize_axis(axis, ndim, opname)


def _softmax_grad(ctx, dy):
    y = ctx.outputs[0]
    s = _red.reduce_sum(_m.multiply(dy, y), axis=ctx.attrs["axis"], keepdims=True)
    return _m.multiply(_m.subtract(dy, s), y)


def _log_softmax_grad(ctx, dy):
    sm = execute(_SOFTMAX, ctx.inputs, ctx.attrs)
    s = _red.reduce_sum(dy, axis=ctx.attrs["axis"], keepdims=True)
    return _m.subtract(dy, _m.multiply(sm, s))


_SOFTMAX = defop("Softmax", inputs=("logits",), attrs={"axis": -1}, grad=_softmax_grad,
                 jvp=_softmax_grad, batch=batch_one_axis)   # (J = diag(y) - y y^T: symmetric)
_LOG_SOFTMAX = defop("LogSoftmax", inputs=("logits",), attrs={"axis": -1},
                     grad=_log_softmax_grad, batch=batch_one_axis)


@_LOG_SOFTMAX.def_jvp
def _log_softmax_jvp(ctx, t):
    # d log_softmax(x) = t - sum(softmax(x) * t)  (its Jacobian is not symmetric)
    sm = _m.exp(ctx.outputs[0])
    return _m.subtract(t, _red.reduce_sum(_m.multiply(sm, t), axis=ctx.attrs["axis"],
                                        keepdims=True))


def _softmax_attrs(logits, axis, dim, opname):
    if dim is not None:
        axis = dim
    x = _t(logits)
    nd = x.ndim
    if nd == 0:
        raise InvalidArgumentError("logits must have rank >= 1, got a scalar", op=opname)
    if axis is None or (type(axis) is int and axis == -1):
        return x, {"axis": nd - 1}
    return x, {"axis": _axis(axis, nd, opname)}


@_on_device
def softmax(logits, axis=None, name=None, dim=None):
    """``exp(logits) / reduce_sum(exp(logits), axis)`` (last axis by default).

    >>> import tapeflow as tf
    >>> print(tf.nn.softmax([[1., 1.], [0., 0.]]))
    tf.Tensor(
    [[0.5 0.5]
     [0.5 0.5]], shape=(2, 2), dtype=float32)
    """
    x, attrs = _softmax_attrs(logits, axis, dim, "Softmax")
    return execute(_SOFTMAX, (x,), attrs)


@_on_device
def log_softmax(logits, axis=None, name=None, dim=None):
    """``logits - log(reduce_sum(exp(logits), axis))``, computed stably."""
    x, attrs = _softmax_attrs(logits, axis, dim, "LogSoftmax")
    return execute(_LOG_SOFTMAX, (x,), attrs)


# --- bias_add, l2_loss, moments, batch_normalization ---------------------------------

def _bias_add_grad(ctx, dy):
    nd = dy.ndim
    c = 1 if ctx.attrs["data_format"] == "NCHW" and nd >= 3 else nd - 1
    axes = tuple(i for i in range(nd) if i != c)
    return dy, _red.reduce_sum(dy, axis=axes) if axes else dy


def _bias_add_batch(ctx, value, bias):
    if not ctx.batched[1]:
        if ctx.attrs["data_format"] == "NHWC":
            return execute(ctx.op, (value, bias), ctx.attrs)     # bias on the last axis
        return _b.batch_unfold(execute(ctx.op, (_b.batch_fold(value), bias), ctx.attrs),
                               ctx.size)
    value = _b.batch_all(ctx, (value,))[0]
    r = len(value.shape) - 1
    c = int(bias.shape[1])
    shape = ((ctx.size,) + (1,) * (r - 1) + (c,) if ctx.attrs["data_format"] == "NHWC"
             else (ctx.size, 1, c) + (1,) * (r - 2))
    return _m.add(value, reshape(bias, shape))


_BIAS_ADD = defop("BiasAdd", inputs=("value", "bias"), attrs={"data_format": "NHWC"},
                  grad=_bias_add_grad, jvp=Linear(), batch=_bias_add_batch)


@_on_device
def bias_add(value, bias, data_format=None, name=None):
    """Add a 1-D ``bias`` along the channel dimension (last for NHWC, 1 for NCHW).

    >>> import tapeflow as tf
    >>> print(tf.nn.bias_add([[1., 2.]], [10., 20.]))
    tf.Tensor([[11. 22.]], shape=(1, 2), dtype=float32)
    """
    x = _t(value)
    b = convert_like(bias, x, dtype=None if isinstance(bias, (Tensor, Variable)) else x.dtype)
    fmt = "NHWC" if data_format is None else data_format
    if fmt in ("N...C", "NWC", "NDHWC"):
        fmt = "NHWC"
    elif fmt in ("NC...", "NCW", "NCDHW"):
        fmt = "NCHW"
    if fmt not in ("NHWC", "NCHW"):
        raise InvalidArgumentError(f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}",
                                   op="BiasAdd")
    nd = x.ndim
    if nd < 2:
        raise InvalidArgumentError(f"Input tensor must be at least 2D: {_shape(x)}", op="BiasAdd")
    c = 1 if fmt == "NCHW" and nd >= 3 else nd - 1
    if b.ndim != 1 or b._data.shape[0] != x._data.shape[c]:
        raise InvalidArgumentError(
            "Must provide as many biases as the channel dimension of the input tensor: "
            f"bias shape {_shape(b)} vs. value shape {_shape(x)} ({fmt})", op="BiasAdd")
    return execute(_BIAS_ADD, (x, b), {"data_format": fmt})


def _l2_loss_grad(ctx, dy):
    return _m.multiply(ctx.inputs[0], dy)


def _l2_loss_batch(ctx, x):
    r = len(x.shape) - 1
    return _m.multiply(_red.reduce_sum(_m.square(x), axis=tuple(range(1, r + 1))), 0.5)


_L2_LOSS = defop("L2Loss", inputs=("t",), grad=_l2_loss_grad, batch=_l2_loss_batch)


@_L2_LOSS.def_jvp
def _l2_loss_jvp(ctx, t):
    return _red.reduce_sum(_m.multiply(ctx.inputs[0], t))         # d sum(x^2) / 2


def l2_loss(t, name=None):
    """``sum(t ** 2) / 2``.

    >>> import tapeflow as tf
    >>> print(tf.nn.l2_loss([1., 2.]))
    tf.Tensor(2.5, shape=(), dtype=float32)
    """
    return execute(_L2_LOSS, (t,))


@_on_device
def moments(x, axes, shift=None, keepdims=False, name=None, keep_dims=None):
    """Mean and variance of ``x`` over ``axes`` (``tf.nn.moments``); float16 inputs are
    computed in float32. Both results are differentiable (to any order).

    >>> import tapeflow as tf
    >>> m, v = tf.nn.moments(tf.constant([1., 2., 3., 4.]), axes=[0])
    >>> float(m), float(v)
    (2.5, 1.25)
    """
    if keep_dims is not None:
        keepdims = keep_dims
    x = _t(x)
    keepdims = flag(keepdims, "moments: keepdims", "Moments", x)
    if shift is not None:                   # (not used, as in TensorFlow 2; still a number)
        try:
            kind = np.asarray(shift.numpy() if hasattr(shift, "numpy") else shift).dtype.kind
        except (TypeError, ValueError):
            kind = "O"
        if kind not in "biuf":
            raise InvalidArgumentError(
                f"moments: shift must be None or a real number or tensor, got "
                f"{_shapes.short_repr(shift)}", op="Moments", device=x._device)
    y = _m.cast(x, "float32") if x.dtype.name == "float16" else x
    ax = _red._norm_axis(axes, y.ndim, "Moments")
    shape = _shape(y)
    n = 1
    for i in (range(len(shape)) if ax is None else ax):
        n *= shape[i]
    inv = 1.0 / n if n else float("nan")
    mean_k = _m.multiply(_red.reduce_sum(y, axis=ax, keepdims=True), inv)
    d = _m.subtract(y, mean_k)
    var = _m.multiply(_red.reduce_sum(_m.multiply(d, d), axis=ax, keepdims=keepdims), inv)
    mean = mean_k if keepdims else reshape(mean_k, _shape(var))
    if y is not x:
        mean, var = _m.cast(mean, x.dtype), _m.cast(var, x.dtype)
    return mean, var


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``(x - mean) * scale / sqrt(variance + variance_epsilon) + offset``
    (``offset``/``scale`` may be None)."""
    if not isinstance(variance_epsilon, (Tensor, Variable)):
        variance_epsilon = real_number(variance_epsilon, "batch_normalization: variance_epsilon",
                                       "BatchNormalization", x)
    inv = _m.rsqrt(_m.add(variance, variance_epsilon))
    if scale is not None:
        inv = _m.multiply(inv, scale)
    shift = _m.negative(_m.multiply(mean, inv))
    if offset is not None:
        shift = _m.add(offset, shift)
    return _m.add(_m.multiply(x, inv), shift)


# --- cross entropies -------------------------------------------------------------------

def _expand_last(dy, axis, logits):
    """Reshape the per-example gradient ``dy`` to broadcast against ``logits``."""
    shape = _shape(dy)
    shape.insert(axis, 1)
    return reshape(dy, shape)


def _softmax_xent_grad(ctx, dy):
    logits, labels = ctx.inputs
    axis = ctx.attrs["axis"]
    dye = _expand_last(dy, axis, logits)
    g_logits = g_labels = None
    if _need(ctx, 0):
        sm = execute(_SOFTMAX, (logits,), ctx.attrs)
        g_logits = _m.multiply(_m.subtract(sm, labels), dye)
    if _need(ctx, 1):
        g_labels = _m.multiply(_m.negative(execute(_LOG_SOFTMAX, (logits,), ctx.attrs)), dye)
    return g_logits, g_labels


def _softmax_xent_batch(ctx, logits, labels):
    logits, labels = _b.batch_leading(ctx, (logits, labels), 0)
    return rerun(ctx, (logits, labels),
                 axis=batch_axis(ctx.attrs["axis"], len(logits.shape) - 1))


_SOFTMAX_XENT = defop("SoftmaxCrossEntropyWithLogits", inputs=("features", "labels"),
                      attrs={"axis": -1}, broadcast=True, grad=_softmax_xent_grad,
                      batch=_softmax_xent_batch)


def _like_logits(labels, logits):
    if isinstance(labels, Tensor) or hasattr(labels, "read_value"):
        lab = _t(labels)
        if lab.dtype is not logits.dtype:
            lab = _m.cast(lab, logits.dtype)
        return lab
    return convert_to_tensor(labels, dtype=logits.dtype)


@_on_device
def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None, dim=None):
    """Cross entropy between ``labels`` (a distribution) and ``softmax(logits)``
    along ``axis``, computed stably in one op. Differentiable w.r.t. both.

    >>> import tapeflow as tf
    >>> loss = tf.nn.softmax_cross_entropy_with_logits(labels=[[0., 1.]], logits=[[0., 0.]])
    >>> round(float(loss[0]), 4)
    0.6931
    """
    if labels is None or logits is None:
        raise InvalidArgumentError("Both labels= and logits= are required",
                                   op="SoftmaxCrossEntropyWithLogits")
    if dim is not None:
        axis = dim
    x = _t(logits)
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"logits must be floating point, got {x.dtype.name}",
                                   op="SoftmaxCrossEntropyWithLogits")
    lab = _like_logits(labels, x)
    xs, ls = _shape(x), _shape(lab)
    if xs != ls:
        try:
            bs = list(np.broadcast_shapes(tuple(xs), tuple(ls)))
        except ValueError:
            bs = None
        if bs is None or len(bs) != len(xs):
            raise InvalidArgumentError(
                f"logits and labels must be broadcastable: logits_size={xs} labels_size={ls}",
                op="SoftmaxCrossEntropyWithLogits")
    if x.ndim == 0:
        raise InvalidArgumentError("logits must have rank >= 1, got a scalar",
                                   op="SoftmaxCrossEntropyWithLogits")
    return execute(_SOFTMAX_XENT, (x, lab),
                   {"axis": _axis(axis, x.ndim, "SoftmaxCrossEntropyWithLogits")})


softmax_cross_entropy_with_logits_v2 = softmax_cross_entropy_with_logits


def _sparse_xent_grad(ctx, dy):
    logits, labels = ctx.inputs
    axis = logits.ndim - 1
    dye = _expand_last(dy, axis, logits)
    sm = execute(_SOFTMAX, (logits,), {"axis": axis})
    onehot = one_hot(labels, logits._data.shape[-1], dtype=logits.dtype)
    return _m.multiply(_m.subtract(sm, onehot), dye), None


def _check_sparse_xent(op, tensors, attrs, device):
    """The signature check of SparseSoftmaxCrossEntropyWithLogits (every backend):
    floating logits ``[..., classes]``, int32/int64 labels of shape ``[...]``."""
    x, lab = tensors
    op = op.name
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"logits must be floating point, got {x.dtype.name}", op=op)
    if lab.dtype.name not in ("int32", "int64"):
        raise InvalidArgumentError(
            f"labels must be int32 or int64 class indices, got {lab.dtype.name}; for "
            "one-hot/probability labels use softmax_cross_entropy_with_logits", op=op)
    xs, ls = _shape(x), _shape(lab)
    if len(ls) != len(xs) - 1:
        raise InvalidArgumentError(
            f"Rank mismatch: Rank of labels (received {len(ls)}) should equal rank of logits "
            f"minus 1 (received {len(xs)}); logits shape {xs}, labels shape {ls}", op=op)
    if ls != xs[:-1]:
        raise InvalidArgumentError(
            f"logits and labels must have the same first dimensions, got logits shape {xs} "
            f"and labels shape {ls}", op=op)


def _sparse_xent_batch(ctx, logits, labels):
    logits, labels = _b.batch_all(ctx, (logits, labels))
    if len(labels.shape) == 1:                      # one example: (C,) logits, () label
        return execute(ctx.op, (logits, labels), ctx.attrs)
    y = execute(ctx.op, (_b.batch_fold(logits), _b.batch_fold(labels)), ctx.attrs)
    return _b.batch_unfold(y, ctx.size)


_SPARSE_XENT = defop("SparseSoftmaxCrossEntropyWithLogits", inputs=("features", "labels"),
                     dtype_rule="none", grad=_sparse_xent_grad, check=_check_sparse_xent,
                     batch=_sparse_xent_batch)


@_on_device
def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Cross entropy of ``softmax(logits)`` with integer class ``labels``
    (``labels.shape == logits.shape[:-1]``, values in ``[0, num_classes)``).

    >>> import tapeflow as tf
    >>> loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[1], logits=[[0., 0.]])
    >>> round(float(loss[0]), 4)
    0.6931
    """
    op = "SparseSoftmaxCrossEntropyWithLogits"
    if labels is None or logits is None:
        raise InvalidArgumentError("Both labels= and logits= are required", op=op)
    x = _t(logits)
    lab = convert_like(labels, x)
    return execute(_SPARSE_XENT, (x, lab))


def _sigmoid_xent_grad(ctx, dy):
    x, z = ctx.inputs
    return (_m.multiply(_m.subtract(_m.sigmoid(x), z), dy) if _need(ctx, 0) else None,
            _m.multiply(_m.negative(x), dy) if _need(ctx, 1) else None)


_SIGMOID_XENT = defop("SigmoidCrossEntropyWithLogits", inputs=("logits", "labels"),
                      grad=_sigmoid_xent_grad, batch=BROADCASTING)


@_on_device
def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None, _sentinel=None):
    """Element-wise logistic loss ``max(x, 0) - x * z + log1p(exp(-|x|))`` with
    ``x = logits`` and ``z = labels`` (stable for any ``x``).

    >>> import tapeflow as tf
    >>> loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=[1.], logits=[0.])
    >>> round(float(loss[0]), 4)
    0.6931
    """
    op = "SigmoidCrossEntropyWithLogits"
    if labels is None or logits is None:
        raise InvalidArgumentError("Both labels= and logits= are required", op=op)
    x = _t(logits)
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"logits must be floating point, got {x.dtype.name}", op=op)
    z = _like_logits(labels, x)
    if _shape(z) != _shape(x):
        raise InvalidArgumentError(
            f"logits and labels must have the same shape ({_shape(x)} vs {_shape(z)})", op=op)
    return execute(_SIGMOID_XENT, (x, z))


# --- convolution -------------------------------------------------------------------------

def _data_format(data_format, opname):
    if data_format is None:
        return "NHWC"
    if data_format not in ("NHWC", "NCHW"):
        raise InvalidArgumentError(
            f"data_format must be 'NHWC' or 'NCHW', got {data_format!r}", op=opname)
    return data_format


def _hw(v, what, fmt, opname, default=1):
    """int, [h, w] or a 4-list in ``fmt`` order -> (h, w) of positive ints."""
    if v is None:
        v = default
    if hasattr(v, "numpy"):
        v = v.numpy().tolist()
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        v = _shapes.as_index(v, what, opname)
        out = (v, v)
    else:
        v = [_shapes.as_index(a, what, opname) for a in v]
        if len(v) == 1:
            out = (v[0], v[0])
        elif len(v) == 2:
            out = (v[0], v[1])
        elif len(v) == 4:
            n, c = (v[0], v[3]) if fmt == "NHWC" else (v[0], v[1])
            if n != 1 or c != 1:
                raise InvalidArgumentError(
                    f"{what} in the batch and depth dimensions must be 1, got {v} ({fmt})",
                    op=opname)
            out = (v[1], v[2]) if fmt == "NHWC" else (v[2], v[3])
        else:
            raise InvalidArgumentError(
                f"{what} must be an int or a list of 1, 2 or 4 ints, got {v}", op=opname)
    if out[0] < 1 or out[1] < 1:
        raise InvalidArgumentError(f"{what} must be positive, got {list(out)}", op=opname)
    return out


def _padding(padding, fmt, opname):
    if isinstance(padding, str):
        p = padding.upper()
        if p in ("SAME", "VALID"):
            return p
        raise InvalidArgumentError(
            f"padding must be 'SAME', 'VALID' or explicit [[top, bottom], [left, right]] "
            f"pads, got {padding!r}", op=opname)
    if padding is None:
        raise InvalidArgumentError("padding is required ('SAME' or 'VALID')", op=opname)
    try:
        pads = [tuple(int(a) for a in p) for p in padding]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"bad explicit padding {padding!r}", op=opname) from None
    if len(pads) == 4:
        outer = (pads[0], pads[3]) if fmt == "NHWC" else (pads[0], pads[1])
        if any(a != 0 for p in outer for a in p):
            raise InvalidArgumentError(
                f"explicit padding of the batch and depth dimensions must be 0, got {padding}",
                op=opname)
        pads = pads[1:3] if fmt == "NHWC" else pads[2:4]
    if len(pads) != 2 or any(len(p) != 2 or min(p) < 0 for p in pads):
        raise InvalidArgumentError(
            f"explicit padding must be [[top, bottom], [left, right]] of non-negative ints "
            f"(or 4 pairs in data_format order), got {padding}", op=opname)
    return (pads[0], pads[1])


def _out_size(size, k, s, d, padding, i):
    eff = (k - 1) * d + 1
    if padding == "SAME":
        return -(-size // s)
    if padding == "VALID":
        return (size - eff) // s + 1 if size >= eff else 0
    pb, pa = padding[i]
    return (size + pb + pa - eff) // s + 1 if size + pb + pa >= eff else 0


def _spatial(shape, fmt):
    return (shape[1], shape[2]) if fmt == "NHWC" else (shape[2], shape[3])


def _check_out(opname, in_shape, fmt, kh, kw, strides, dil, padding, what, other_shape):
    h, w = _spatial(in_shape, fmt)
    oh = _out_size(h, kh, strides[0], dil[0], padding, 0)
    ow = _out_size(w, kw, strides[1], dil[1], padding, 1)
    if oh <= 0 or ow <= 0:
        raise InvalidArgumentError(
            f"Computed output size would be {'negative' if min(oh, ow) < 0 else 'zero'}: "
            f"input shape {in_shape} ({fmt}), {what} {other_shape}, strides {list(strides)}, "
            f"dilations {list(dil)}, padding {padding}", op=opname)
    return oh, ow


def _conv_attrs(opname, x_shape, w_shape, strides, padding, data_format, dilations):
    try:
        fmt = _data_format(data_format, opname)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"{e.message}; input shape {list(x_shape)}, filter shape {list(w_shape)}",
            op=opname) from None
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise InvalidArgumentError(
            f"input must be 4-D ({fmt}) and filter 4-D [height, width, in_channels, "
            f"out_channels]; got input shape {x_shape} and filter shape {w_shape}", op=opname)
    try:
        attrs = {"strides": _hw(strides, "strides", fmt, opname),
                 "padding": _padding(padding, fmt, opname),
                 "data_format": fmt,
                 "dilations": _hw(dilations, "dilations", fmt, opname)}
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"{e.message}; input shape {list(x_shape)}, filter shape {list(w_shape)}",
            op=opname) from None
    c = x_shape[3] if fmt == "NHWC" else x_shape[1]
    if c != w_shape[2]:
        raise InvalidArgumentError(
            f"input depth {c} does not match the filter's in_channels {w_shape[2]}: input shape "
            f"{x_shape} ({fmt}), filter shape {w_shape} (HWIO)", op=opname)
    return attrs


def _conv_grad(ctx, dy):
    x, w = ctx.inputs
    a = ctx.attrs
    dx = execute(_CONV_BP_INPUT, (w, dy), {"input_sizes": tuple(_shape(x)), **a}) \
        if _need(ctx, 0) else None
    dw = execute(_CONV_BP_FILTER, (x, dy), {"filter_sizes": tuple(_shape(w)), **a}) \
        if _need(ctx, 1) else None
    return dx, dw


def _conv_attrs_of(ctx, drop):
    return {k: v for k, v in ctx.attrs.items() if k != drop}


def _conv_bp_input_grad(ctx, ddx):
    # dx = B(w, dy) with <B(w, dy), u> = <dy, conv(u, w)>
    w, dy = ctx.inputs
    a = _conv_attrs_of(ctx, "input_sizes")
    g_w = execute(_CONV_BP_FILTER, (ddx, dy), {"filter_sizes": tuple(_shape(w)), **a}) \
        if _need(ctx, 0) else None
    g_dy = execute(_CONV2D, (ddx, w), a) if _need(ctx, 1) else None
    return g_w, g_dy


def _conv_bp_filter_grad(ctx, ddw):
    # dw = F(x, dy) with <F(x, dy), v> = <dy, conv(x, v)>
    x, dy = ctx.inputs
    a = _conv_attrs_of(ctx, "filter_sizes")
    g_x = execute(_CONV_BP_INPUT, (ddw, dy), {"input_sizes": tuple(_shape(x)), **a}) \
        if _need(ctx, 0) else None
    g_dy = execute(_CONV2D, (x, ddw), a) if _need(ctx, 1) else None
    return g_x, g_dy


_CONV_ATTRS = {"strides": (1, 1), "padding": "VALID", "data_format": "NHWC",
               "dilations": (1, 1)}


def _batch_fold_first(ctx, *xs):
    """(tf.vectorized_map) Conv2D's and the pools': the batch joins the op's own batch
    dimension (a filter per example is a grouped convolution: NotImplemented)."""
    if len(xs) == 2 and ctx.batched[1]:
        return NotImplemented
    if len(xs) == 2:
        y = execute(ctx.op, (_b.batch_fold(xs[0]), xs[1]), ctx.attrs)
    else:
        y = execute(ctx.op, tuple(_b.batch_fold(x) for x in _b.batch_all(ctx, xs)), ctx.attrs)
    return _b.batch_unfold(y, ctx.size)


def _conv_bp_input_batch(ctx, filt, dy):
    if ctx.batched[0]:
        return NotImplemented
    shape = tuple(ctx.attrs["input_sizes"])
    y = rerun(ctx, (filt, _b.batch_fold(dy)), input_sizes=(ctx.size * shape[0],) + shape[1:])
    return _b.batch_unfold(y, ctx.size)


_CONV2D = defop("Conv2D", inputs=("input", "filter"), attrs=_CONV_ATTRS, grad=_conv_grad,
                jvp=Multilinear(), batch=_batch_fold_first)
_CONV_BP_INPUT = defop("Conv2DBackpropInput", inputs=("filter", "out_backprop"),
                       attrs={"input_sizes": (), **_CONV_ATTRS}, grad=_conv_bp_input_grad,
                       jvp=Multilinear(), batch=_conv_bp_input_batch)
_CONV_BP_FILTER = defop("Conv2DBackpropFilter", inputs=("input", "out_backprop"),
                        attrs={"filter_sizes": (), **_CONV_ATTRS}, grad=_conv_bp_filter_grad,
                        jvp=Multilinear())


@_on_device
def conv2d(input, filters=None, strides=None, padding=None, data_format="NHWC", dilations=None,
           name=None, filter=None, use_cudnn_on_gpu=True):
    """2-D convolution (cross-correlation, as in TF) of a 4-D ``input`` (NHWC or NCHW)
    with ``filters`` of shape ``[height, width, in_channels, out_channels]``.

    ``strides``/``dilations``: an int, ``[h, w]`` or a 4-list in ``data_format``
    order; ``padding``: ``"SAME"``, ``"VALID"`` or explicit pads.

    >>> import tapeflow as tf
    >>> x = tf.ones([1, 3, 3, 1])
    >>> print(tf.nn.conv2d(x, tf.ones([2, 2, 1, 1]), strides=1, padding="VALID")[0, :, :, 0])
    tf.Tensor(
    [[4. 4.]
     [4. 4.]], shape=(2, 2), dtype=float32)
    """
    if filters is None:
        filters = filter
    x = _t(input)
    w = _t(filters)
    xs, ws = _shape(x), _shape(w)
    attrs = _conv_attrs("Conv2D", xs, ws, strides, padding, data_format, dilations)
    _check_out("Conv2D", xs, attrs["data_format"], ws[0], ws[1], attrs["strides"],
               attrs["dilations"], attrs["padding"], "filter shape", ws)
    return execute(_CONV2D, (x, w), attrs)


def _bp_dy_check(opname, in_shape, w_shape, dy_shape, attrs):
    fmt = attrs["data_format"]
    oh, ow = _check_out(opname, in_shape, fmt, w_shape[0], w_shape[1], attrs["strides"],
                        attrs["dilations"], attrs["padding"], "filter shape", w_shape)
    n = in_shape[0]
    want = [n, oh, ow, w_shape[3]] if fmt == "NHWC" else [n, w_shape[3], oh, ow]
    if list(dy_shape) != want:
        raise InvalidArgumentError(
            f"out_backprop shape {list(dy_shape)} does not match the convolution's output "
            f"shape {want} (input {list(in_shape)}, filter {list(w_shape)}, {fmt})", op=opname)


@_on_device
def conv2d_backprop_input(input_sizes, filters=None, out_backprop=None, strides=None,
                          padding=None, data_format="NHWC", dilations=None, name=None,
                          filter=None, use_cudnn_on_gpu=True):
    """Gradient of :func:`conv2d` w.r.t. its input (``tf.nn.conv2d_backprop_input``)."""
    if filters is None:
        filters = filter
    w = _t(filters)
    dy = _t(out_backprop)
    if input_sizes is None:
        raise InvalidArgumentError("input_sizes (conv2d_transpose: output_shape) is required: "
                                   "the shape of the convolution's input", op="Conv2DBackpropInput")
    xs = list(_shapes.as_shape(input_sizes, "Conv2DBackpropInput"))
    ws = _shape(w)
    attrs = _conv_attrs("Conv2DBackpropInput", xs, ws, strides, padding, data_format, dilations)
    _bp_dy_check("Conv2DBackpropInput", xs, ws, _shape(dy), attrs)
    return execute(_CONV_BP_INPUT, (w, dy), {"input_sizes": tuple(xs), **attrs})


@_on_device
def conv2d_backprop_filter(input, filter_sizes, out_backprop, strides=None, padding=None,
                           data_format="NHWC", dilations=None, name=None,
                           use_cudnn_on_gpu=True):
    """Gradient of :func:`conv2d` w.r.t. its filter (``tf.nn.conv2d_backprop_filter``)."""
    x = _t(input)
    dy = _t(out_backprop)
    ws = list(_shapes.as_shape(filter_sizes, "Conv2DBackpropFilter"))
    xs = _shape(x)
    attrs = _conv_attrs("Conv2DBackpropFilter", xs, ws, strides, padding, data_format,
                        dilations)
    _bp_dy_check("Conv2DBackpropFilter", xs, ws, _shape(dy), attrs)
    return execute(_CONV_BP_FILTER, (x, dy), {"filter_sizes": tuple(ws), **attrs})


def conv2d_transpose(input, filters=None, output_shape=None, strides=None, padding="SAME",
                     data_format="NHWC", dilations=None, name=None, filter=None):
    """Transposed convolution (the gradient of :func:`conv2d` w.r.t. its input);
    ``filters`` is ``[height, width, output_channels, in_channels]``."""
    if filters is None:
        filters = filter
    return conv2d_backprop_input(output_shape, filters, input, strides=strides, padding=padding,
                                 data_format=data_format, dilations=dilations)


# --- pooling ------------------------------------------------------------------------------

def _pool_attrs(opname, x, ksize, strides, padding, data_format):
    xs = _shape(x)
    try:
        fmt = _data_format(data_format, opname)
        k = _hw(ksize, "ksize", fmt, opname)
        attrs = {"ksize": k, "strides": _hw(strides, "strides", fmt, opname, default=k),
                 "padding": _padding(padding, fmt, opname), "data_format": fmt}
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e.message}; input shape {xs}", op=opname) from None
    if len(xs) != 4:
        raise InvalidArgumentError(f"input must be 4-D ({fmt}), got shape {xs}", op=opname)
    if not isinstance(attrs["padding"], str):
        (t, b), (l, r) = attrs["padding"]
        if max(t, b) >= k[0] or max(l, r) >= k[1]:
            raise InvalidArgumentError(
                f"explicit pooling pads must be smaller than ksize {list(k)}, got "
                f"{attrs['padding']}", op=opname)
    _check_out(opname, xs, fmt, k[0], k[1], attrs["strides"], (1, 1), attrs["padding"],
               "ksize", list(k))
    return attrs


def _max_pool_grad(ctx, dy):
    return execute(_MAX_POOL_GRAD, (ctx.inputs[0], ctx.outputs[0], dy), ctx.attrs)


def _max_pool_grad_grad(ctx, ddx):
    # MaxPoolGrad routes dy to each window's (first) argmax: linear in dy, piecewise
    # constant in x and y. Its adjoint gathers ddx at those positions.
    x, y, _ = ctx.inputs
    return None, None, execute(_MAX_POOL_GRAD_GRAD, (x, y, ddx), ctx.attrs)


def _max_pool_grad_grad_grad(ctx, dd):
    x, y, _ = ctx.inputs
    return None, None, execute(_MAX_POOL_GRAD, (x, y, dd), ctx.attrs)


_POOL_ATTRS = {"ksize": (1, 1), "strides": (1, 1), "padding": "VALID", "data_format": "NHWC"}
_MAX_POOL = defop("MaxPool", inputs=("input",), attrs=_POOL_ATTRS, grad=_max_pool_grad,
                  batch=_batch_fold_first)


@_MAX_POOL.def_jvp
def _max_pool_jvp(ctx, t):
    # the tangent at each window's maximum: what MaxPoolGradGrad picks
    return execute(_MAX_POOL_GRAD_GRAD, (ctx.inputs[0], ctx.outputs[0], t), ctx.attrs)


# (MaxPoolGrad and MaxPoolGradGrad are piecewise linear in grad)
_MAX_POOL_GRAD = defop("MaxPoolGrad", inputs=("orig_input", "orig_output", "grad"),
                       attrs=_POOL_ATTRS, grad=_max_pool_grad_grad,
                       jvp=Linear((2,)), batch=_batch_fold_first)
_MAX_POOL_GRAD_GRAD = defop("MaxPoolGradGrad", inputs=("orig_input", "orig_output", "grad"),
                            attrs=_POOL_ATTRS, grad=_max_pool_grad_grad_grad,
                            jvp=Linear((2,)), batch=_batch_fold_first)


@_on_device
def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """Max over ``ksize`` windows of a 4-D ``input`` (NHWC or NCHW); padded positions
    never win (``tf.nn.max_pool2d``).

    >>> import tapeflow as tf
    >>> x = tf.reshape(tf.constant([1., 2., 3., 4.]), [1, 2, 2, 1])
    >>> print(tf.reshape(tf.nn.max_pool2d(x, 2, 2, "VALID"), [-1]))
    tf.Tensor([4.], shape=(1,), dtype=float32)
    """
    x = _t(input)
    return execute(_MAX_POOL, (x,), _pool_attrs("MaxPool", x, ksize, strides, padding,
                                                 data_format))


def max_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None):
    """TF1/TF2 ``tf.nn.max_pool`` (4-D only): see :func:`max_pool2d`."""
    return max_pool2d(value if value is not None else input, ksize, strides, padding,
                      data_format)


def _avg_pool_grad(ctx, dy):
    return execute(_AVG_POOL_GRAD, (dy,),
                   {"orig_input_shape": tuple(_shape(ctx.inputs[0])), **ctx.attrs})


def _avg_pool_grad_grad(ctx, ddx):
    a = {k: v for k, v in ctx.attrs.items() if k != "orig_input_shape"}
    return execute(_AVG_POOL, (ddx,), a)


_AVG_POOL = defop("AvgPool", inputs=("value",), attrs=_POOL_ATTRS, grad=_avg_pool_grad,
                  jvp=Linear(), batch=_batch_fold_first)


def _avg_pool_grad_batch(ctx, dy):
    shape = tuple(ctx.attrs["orig_input_shape"])
    y = rerun(ctx, (_b.batch_fold(dy),), orig_input_shape=(ctx.size * shape[0],) + shape[1:])
    return _b.batch_unfold(y, ctx.size)


_AVG_POOL_GRAD = defop("AvgPoolGrad", inputs=("grad",),
                       attrs={"orig_input_shape": (), **_POOL_ATTRS}, grad=_avg_pool_grad_grad,
                       jvp=Linear(), batch=_avg_pool_grad_batch)


@_on_device
def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """Mean over ``ksize`` windows of a 4-D ``input``; with SAME padding each window
    averages only its in-bounds values (as TF does)."""
    x = _t(input)
    return execute(_AVG_POOL, (x,), _pool_attrs("AvgPool", x, ksize, strides, padding,
                                                 data_format))


def avg_pool(value=None, ksize=None, strides=None, padding=None, data_format="NHWC", name=None,
             input=None):
    """TF1/TF2 ``tf.nn.avg_pool`` (4-D only): see :func:`avg_pool2d`."""
    return avg_pool2d(value if value is not None else input, ksize, strides, padding,
                      data_format)


# --- dropout ----------------------------------------------------------------------------

@_on_device
def dropout(x, rate=None, noise_shape=None, seed=None, name=None, keep_prob=None):
    """Zero each element with probability ``rate`` and scale the rest by
    ``1 / (1 - rate)`` (TF2 ``rate=``; TF1 ``keep_prob=``). ``noise_shape`` (broadcast
    against ``x``) shares one decision along dimensions of size 1. The gradient is
    the same scaled mask.

    >>> import tapeflow as tf
    >>> y = tf.nn.dropout(tf.ones([1000]), rate=0.5, seed=1)
    >>> sorted(set(y.numpy().tolist()))
    [0.0, 2.0]
    """
    if keep_prob is not None:
        if rate is not None:
            raise InvalidArgumentError("Cannot specify both keep_prob and rate", op="Dropout")
        rate = 1.0 - float(real_number(keep_prob, "dropout: keep_prob", "Dropout", x))
    if rate is None:
        raise InvalidArgumentError("dropout needs rate= (or TF1 keep_prob=)", op="Dropout")
    rate = float(real_number(rate, "dropout: rate", "Dropout", x))
    if not 0.0 <= rate < 1.0:
        raise InvalidArgumentError(
            f"rate must be a scalar tensor or a float in the range [0, 1), got {rate}",
            op="Dropout")
    x = _t(x)
    if not x.dtype.is_floating:
        raise InvalidArgumentError(
            f"x has to be a floating point tensor since it's going to be scaled; got a "
            f"{x.dtype.name} tensor instead", op="Dropout")
    if rate == 0.0:
        return x
    xs = _shape(x)
    if noise_shape is None:
        shape = xs
    else:
        if hasattr(noise_shape, "numpy"):
            noise_shape = noise_shape.numpy().tolist()
        shape = [xs[i] if d is None else int(d) for i, d in enumerate(noise_shape)] \
            if len(noise_shape) == len(xs) else [int(d) for d in noise_shape]
    if _devs.current_device() is None:          # the mask is drawn where x lives
        with _devs.device(x._device):
            u = _r.uniform(shape, dtype=x.dtype, seed=seed)
    else:
        u = _r.uniform(shape, dtype=x.dtype, seed=seed)
    keep = _m.cast(_m.greater_equal(u, rate), x.dtype)
    return _m.multiply(x, _m.multiply(keep, 1.0 / (1.0 - rate)))
