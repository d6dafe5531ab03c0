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
from .composite import any_composite as _any_composite, dispatch as _dispatch
from .library import (BROADCASTING, batch_axis, batch_one_axis, defop, flag, real_number,
                       rerun)
from ..errors import InvalidArgumentError
from ..runtime.dispatch import convert_like, convert_to_tensor, execute
from ..runtime.registry import Linear, Multilinear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import math as _m
from .array_creation import one_hot
from .array_shape import _TRANSPOSE, reshape
from .array_slice import _PAD
from .array_gather import _STACK
from .array_gather import concat as _concat
from .array_gather import gather as _gather
from .array_values import clip_by_norm as _clip_by_norm
from . import batching as _b
from . import reductions as _red
from . import random as _r
from .array_shape import transpose
from .array_values import where
from .linalg import matmul
from ..runtime import context as _ctx
from .. import dtypes as _dtypes

__all__ = [
    "relu", "relu6", "leaky_relu", "elu", "softmax", "log_softmax", "bias_add", "l2_loss",
    "moments", "batch_normalization", "layer_norm", "dot_product_attention",
    "softmax_cross_entropy_with_logits",
    "softmax_cross_entropy_with_logits_v2", "sparse_softmax_cross_entropy_with_logits",
    "sigmoid_cross_entropy_with_logits", "conv2d", "conv2d_backprop_input",
    "conv2d_backprop_filter", "conv2d_transpose", "max_pool2d", "max_pool", "avg_pool2d",
    "avg_pool", "dropout", "sigmoid", "tanh", "softplus", "embedding_lookup",
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


# --- layer normalisation (one op, one backward op) -------------------------------------

def _ln_param_shape(xshape, axes):
    return [int(xshape[a]) for a in axes]


def _ln_bshape(xshape, axes):
    """The parameters' shape broadcast against the input (1 on the other axes)."""
    return [int(d) if i in axes else 1 for i, d in enumerate(xshape)]


def _ln_check(op, tensors, attrs, device):
    """``LayerNorm(x, gamma, beta)`` / ``LayerNormGrad(dy, x, gamma)``: one floating dtype,
    the parameters shaped ``[x.shape[a] for a in axes]``."""
    x = tensors[0] if op.name == "LayerNorm" else tensors[1]
    if not x.dtype.is_floating:
        raise InvalidArgumentError(
            f"{op.name}: the input must be floating-point, got {x.dtype.name}; cast it with "
            "tf.cast(x, tf.float32)")
    axes = attrs["axes"]
    if not axes:
        raise InvalidArgumentError(f"{op.name}: axes must name at least one axis of the "
                                   f"input (shape {_shape(x)})")
    want = _ln_param_shape(x._data.shape, axes)
    params = tensors[1:] if op.name == "LayerNorm" else tensors[2:]
    for pname, p in zip(op.inputs[-len(params):], params):
        if list(p._data.shape) != want:
            raise InvalidArgumentError(
                f"{op.name}: {pname} must have shape {want} (the input's dimensions on axes "
                f"{list(axes)}; input shape {_shape(x)}), got {_shape(p)}")
    if op.name == "LayerNormGrad" and tensors[0]._data.shape != x._data.shape:
        raise InvalidArgumentError(f"{op.name}: dy has shape {_shape(tensors[0])}, x "
                                   f"{_shape(x)}: they must match")


def _ln_stats(x, axes, epsilon):
    """``(h, r)``: ``x`` normalised over ``axes`` and ``1 / sqrt(var + epsilon)`` (kept
    dims), with tapeflow ops (differentiable again)."""
    xc = _m.subtract(x, _red.reduce_mean(x, axis=axes, keepdims=True))
    var = _red.reduce_mean(_m.multiply(xc, xc), axis=axes, keepdims=True)
    r = _m.rsqrt(_m.add(var, epsilon))
    return _m.multiply(xc, r), r


def _ln_composite(x, gamma, beta, axes, epsilon):
    """``LayerNorm`` with ordinary ops (what a device without its kernel runs, and the
    reference of the fused kernel)."""
    h, _ = _ln_stats(x, list(axes), epsilon)
    bshape = _ln_bshape(x.shape, axes)
    return _m.add(_m.multiply(h, reshape(gamma, bshape)), reshape(beta, bshape))


def _ln_mean(v, axes):
    return _red.reduce_mean(v, axis=axes, keepdims=True)


def _ln_project(v, h, axes):
    """``v - mean(v) - h * mean(v * h)`` over ``axes`` (the normalisation's Jacobian,
    up to the factor ``r``; symmetric)."""
    return _m.subtract(_m.subtract(v, _ln_mean(v, axes)),
                       _m.multiply(h, _ln_mean(_m.multiply(v, h), axes)))


def _ln_param_sum(v, x, axes):
    """``v`` summed over the axes that are not normalised (a parameter's gradient)."""
    others = [i for i in range(len(x.shape)) if i not in axes]
    s = _red.reduce_sum(v, axis=others) if others else v
    return reshape(s, _ln_param_shape(x.shape, axes))


def _ln_grad_composite(dy, x, gamma, axes, epsilon):
    """``LayerNormGrad`` with ordinary ops: ``(dx, dgamma, dbeta)``."""
    axes = list(axes)
    h, r = _ln_stats(x, axes, epsilon)
    g = _m.multiply(dy, reshape(gamma, _ln_bshape(x.shape, axes)))
    dx = _m.multiply(r, _ln_project(g, h, axes))
    return (dx, _ln_param_sum(_m.multiply(dy, h), x, axes), _ln_param_sum(dy, x, axes))


def _ln_grad(ctx, dy):
    return tuple(execute(_LAYER_NORM_GRAD, (dy, ctx.inputs[0], ctx.inputs[1]), ctx.attrs))


def _ln_grad_grad(ctx, ddx, ddgamma, ddbeta):
    """Gradient of ``LayerNormGrad(dy, x, gamma)`` given the cotangents of its outputs
    ``(dx, dgamma, dbeta)``; with ``P(v) = v - mean(v) - h mean(v h)``, ``g = dy gamma``:
    d/d dy = ``gamma r P(A) + h B + C``; d/d gamma = ``sum(dy r P(A))``; d/dx =
    ``r P(dy B) - r mean(A dx) h - r^2 mean(g h) P(A) - r^2 mean(A h) P(g)``
    (``A, B, C``: the cotangents)."""
    dy, x, gamma = ctx.inputs
    axes = list(ctx.attrs["axes"])
    bshape = _ln_bshape(x.shape, axes)
    h, r = _ln_stats(x, axes, ctx.attrs["epsilon"])
    gb = reshape(gamma, bshape)
    g = _m.multiply(dy, gb)
    terms_dy, terms_x, d_gamma = [], [], None
    if ddx is not None:
        pa = _ln_project(ddx, h, axes)
        rpa = _m.multiply(r, pa)
        terms_dy.append(_m.multiply(gb, rpa))
        d_gamma = _ln_param_sum(_m.multiply(dy, rpa), x, axes)
        r2 = _m.multiply(r, r)
        terms_x.append(_m.negative(_m.multiply(_m.multiply(r, _ln_mean(
            _m.multiply(ddx, ctx.outputs[0]), axes)), h)))
        terms_x.append(_m.negative(_m.multiply(_m.multiply(r2, _ln_mean(
            _m.multiply(g, h), axes)), pa)))
        terms_x.append(_m.negative(_m.multiply(_m.multiply(r2, _ln_mean(
            _m.multiply(ddx, h), axes)), _ln_project(g, h, axes))))
    if ddgamma is not None:
        b = reshape(ddgamma, bshape)
        terms_dy.append(_m.multiply(h, b))
        terms_x.append(_m.multiply(r, _ln_project(_m.multiply(dy, b), h, axes)))
    if ddbeta is not None:
        terms_dy.append(_m.add(_m.multiply(dy, 0.0), reshape(ddbeta, bshape)))
    return _ln_sum(terms_dy), _ln_sum(terms_x), d_gamma


def _ln_sum(terms):
    terms = [t for t in terms if t is not None]
    if not terms:
        return None
    out = terms[0]
    for t in terms[1:]:
        out = _m.add(out, t)
    return out


def _ln_batch(ctx, x, gamma, beta):
    """(tf.vectorized_map) the batch is one more axis that is not normalised; parameters
    per example scale and shift the op's unit-parameter result."""
    axes = tuple(a + 1 for a in ctx.attrs["axes"])
    if not ctx.batched[0]:
        x = _red.broadcast_to(x, [ctx.size] + _shape(x))
    if not (ctx.batched[1] or ctx.batched[2]):
        return rerun(ctx, (x, gamma, beta), axes=axes)
    pshape = _ln_param_shape(x._data.shape, axes)
    y = rerun(ctx, (x, convert_like(np.ones(pshape), x, dtype=x.dtype),
                    convert_like(np.zeros(pshape), x, dtype=x.dtype)), axes=axes)
    bshape = _ln_bshape(x._data.shape, axes)
    for p, batched, op in ((gamma, ctx.batched[1], _m.multiply), (beta, ctx.batched[2], _m.add)):
        y = op(y, reshape(p, ([ctx.size] if batched else [1]) + bshape[1:]))
    return y


def _ln_jvp(ctx, tx, tgamma, tbeta):
    """Forward mode: ``r P(tx) gamma + h tgamma + tbeta``."""
    x, gamma, _ = ctx.inputs
    axes = list(ctx.attrs["axes"])
    bshape = _ln_bshape(x.shape, axes)
    h, r = _ln_stats(x, axes, ctx.attrs["epsilon"])
    terms = []
    if tx is not None:
        terms.append(_m.multiply(_m.multiply(r, _ln_project(tx, h, axes)),
                                 reshape(gamma, bshape)))
    if tgamma is not None:
        terms.append(_m.multiply(h, reshape(tgamma, bshape)))
    if tbeta is not None:
        terms.append(_m.add(_m.multiply(h, 0.0), reshape(tbeta, bshape)))
    return _ln_sum(terms)


def _ln_grad_jvp(ctx, tdy, tx, tgamma):
    """Forward mode of ``LayerNormGrad``: with ``dx = r P(g)``, ``g = dy gamma``,
    ``dh = r P(tx)``, ``dr = -r^2 mean(h tx)``: ``d dx = dr P(g) + r (P(dg) - mean(g dh) h
    - mean(g h) dh)``, ``d dgamma = sum(tdy h + dy dh)``, ``d dbeta = sum(tdy)``."""
    dy, x, gamma = ctx.inputs
    axes = list(ctx.attrs["axes"])
    bshape = _ln_bshape(x.shape, axes)
    h, r = _ln_stats(x, axes, ctx.attrs["epsilon"])
    gb = reshape(gamma, bshape)
    g = _m.multiply(dy, gb)
    dg = _ln_sum([_m.multiply(tdy, gb) if tdy is not None else None,
                  _m.multiply(dy, reshape(tgamma, bshape)) if tgamma is not None else None])
    ddx = None if dg is None else _m.multiply(r, _ln_project(dg, h, axes))
    ddgamma = None if tdy is None else _ln_param_sum(_m.multiply(tdy, h), x, axes)
    if tx is not None:
        dh = _m.multiply(r, _ln_project(tx, h, axes))
        dr = _m.negative(_m.multiply(_m.multiply(r, r), _ln_mean(_m.multiply(h, tx), axes)))
        inner = _m.add(_m.multiply(_ln_mean(_m.multiply(g, dh), axes), h),
                       _m.multiply(_ln_mean(_m.multiply(g, h), axes), dh))
        ddx = _ln_sum([ddx, _m.multiply(dr, _ln_project(g, h, axes)),
                       _m.negative(_m.multiply(r, inner))])
        ddgamma = _ln_sum([ddgamma, _ln_param_sum(_m.multiply(dy, dh), x, axes)])
    ddbeta = None if tdy is None else _ln_param_sum(tdy, x, axes)
    zero = _m.multiply(_ln_param_sum(dy, x, axes), 0.0)
    return (ddx if ddx is not None else _m.multiply(x, 0.0),
            ddgamma if ddgamma is not None else zero, ddbeta if ddbeta is not None else zero)


def _ln_grad_batch(ctx, dy, x, gamma):
    """(tf.vectorized_map) ``dx`` from the op on ``dy * gamma`` with unit parameters;
    the parameters' gradients summed per example."""
    axes = tuple(a + 1 for a in ctx.attrs["axes"])
    eps = ctx.attrs["epsilon"]
    shape = [ctx.size] + (_shape(x)[1:] if ctx.batched[1] else _shape(x))
    dy = dy if ctx.batched[0] else _red.broadcast_to(dy, shape)
    x = x if ctx.batched[1] else _red.broadcast_to(x, shape)
    bshape = _ln_bshape(shape, axes)
    g = reshape(gamma, ([ctx.size] if ctx.batched[2] else [1]) + bshape[1:])
    ones = convert_like(np.ones(_ln_param_shape(shape, axes)), x, dtype=x.dtype)
    dx = execute(_LAYER_NORM_GRAD, (_m.multiply(dy, g), x, ones), {"axes": axes,
                                                                  "epsilon": eps})[0]
    h, _ = _ln_stats(x, list(axes), eps)
    others = [i for i in range(1, len(shape)) if i not in axes]
    pshape = [ctx.size] + _ln_param_shape(shape, axes)

    def per_example(v):
        return reshape(_red.reduce_sum(v, axis=others) if others else v, pshape)
    return dx, per_example(_m.multiply(dy, h)), per_example(dy)


_LN_ATTRS = {"axes": (-1,), "epsilon": 1e-3}
_LN_TYPES = {"axes": "axes", "epsilon": "float"}
_LAYER_NORM = defop("LayerNorm", inputs=("x", "gamma", "beta"), attrs=_LN_ATTRS,
                    attr_types=_LN_TYPES, grad=_ln_grad, check=_ln_check,
                    composite=_ln_composite, batch=_ln_batch, jvp=_ln_jvp)
_LAYER_NORM_GRAD = defop("LayerNormGrad", inputs=("dy", "x", "gamma"), attrs=_LN_ATTRS,
                         attr_types=_LN_TYPES, num_outputs=3, grad=_ln_grad_grad,
                         check=_ln_check, composite=_ln_grad_composite,
                         batch=_ln_grad_batch, jvp=_ln_grad_jvp)


@_on_device
def layer_norm(x, gamma=None, beta=None, axis=-1, epsilon=1e-3, name=None):
    """Layer normalisation: ``(x - mean) / sqrt(var + epsilon) * gamma + beta`` with the
    mean and variance taken over ``axis`` (an int or a list of ints) for each position
    of the other axes; ``gamma``/``beta`` (default 1 and 0) have the shape of ``x`` on
    those axes. One fused op (``LayerNorm``) with one backward op (``LayerNormGrad``);
    ``tf.keras.layers.LayerNormalization`` calls it.

    >>> import tapeflow as tf
    >>> y = tf.nn.layer_norm(tf.constant([[1., 2., 3.], [2., 2., 8.]]), epsilon=0.0)
    >>> [[round(float(v), 3) for v in row] for row in y]
    [[-1.225, 0.0, 1.225], [-0.707, -0.707, 1.414]]
    """
    x = _t(x)
    nd = len(x._data.shape)
    ax = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    for a in ax:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -nd <= a < nd:
            raise InvalidArgumentError(
                f"layer_norm: axis {axis!r} is not a valid axis (or list of axes) of an input "
                f"of shape {_shape(x)}", op="LayerNorm")
    axes = tuple(sorted({int(a) % nd for a in ax}))
    if len(axes) != len(ax):
        raise InvalidArgumentError(
            f"layer_norm: axis {axis!r} names an axis twice (input shape {_shape(x)}); "
            "list each axis once", op="LayerNorm")
    eps = float(real_number(epsilon, "layer_norm: epsilon", "LayerNorm", x))
    pshape = _ln_param_shape(x._data.shape, axes)
    gamma = convert_like(np.ones(pshape) if gamma is None else gamma, x,
                         dtype=_like(gamma, x))
    beta = convert_like(np.zeros(pshape) if beta is None else beta, x, dtype=_like(beta, x))
    return execute(_LAYER_NORM, (x, gamma, beta), {"axes": axes, "epsilon": eps})


def _like(v, x):
    return None if isinstance(v, (Tensor, Variable)) else x.dtype


# --- dot-product attention (one op forward, one backward) ------------------------------

def _dpa_neg(dtype):
    """The score masked positions take (float16's lowest finite value where -1e9 does
    not fit)."""
    return -65504.0 if dtype.name == "float16" else -1e9


def _dpa_check(op, tensors, attrs, device):
    """``DotProductAttention(query, key, value, mask)``: query ``[B, T, H, K]``, key
    ``[B, S, H, K]``, value ``[B, S, H, V]`` of one floating dtype, a boolean mask that
    broadcasts to ``[B, H, T, S]`` (0-d: none). ``DotProductAttentionGrad(dout, query,
    key, value, weights, mask)`` also its output's gradient and weights."""
    grad = op.name == "DotProductAttentionGrad"
    q, k, v = tensors[2:5] if grad else tensors[:3]
    mask = tensors[-1]
    shapes = [list(t._data.shape) for t in (q, k, v)]
    if not q.dtype.is_floating or not q.dtype == k.dtype == v.dtype:
        raise InvalidArgumentError(
            f"{op.name}: query, key and value must share one floating-point dtype, got "
            f"{q.dtype.name}, {k.dtype.name}, {v.dtype.name}")
    qs, ks, vs = shapes
    if (any(len(s) != 4 for s in shapes) or ks[0] != qs[0] or vs[0] != qs[0]
            or ks[2] != qs[2] or vs[2] != qs[2] or ks[3] != qs[3] or vs[1] != ks[1]):
        raise InvalidArgumentError(
            f"{op.name}: query [batch, T, heads, K], key [batch, S, heads, K] and value "
            f"[batch, S, heads, V] do not fit: shapes {qs}, {ks}, {vs}")
    full = [qs[0], qs[2], qs[1], ks[1]]
    ms = list(mask._data.shape)
    if mask.dtype.name != "bool" or len(ms) > 4 or any(
            a not in (1, b) for a, b in zip(ms[::-1], full[::-1])):
        raise InvalidArgumentError(
            f"{op.name}: the mask must be boolean and broadcast to [batch, heads, T, S] = "
            f"{full}, got {mask.dtype.name}{ms}")
    if grad:
        if list(tensors[0]._data.shape) != qs[:3] + vs[3:] or any(
                list(tensors[i]._data.shape) != full for i in (1, 5)):
            raise InvalidArgumentError(
                f"{op.name}: dout must have shape {qs[:3] + vs[3:]}, dweights and weights "
                f"{full}")


def _heads_first(t):
    return transpose(t, [0, 2, 1, 3])


def _dpa_masked(t, mask, value):
    if len(mask.shape) == 0:
        return t
    return where(mask, t, _m.cast(value, t.dtype))


def _dpa_composite(query, key, value, mask, scale):
    """``DotProductAttention`` with ordinary ops: ``(out, weights)``."""
    s = _m.multiply(matmul(_heads_first(query), _heads_first(key), transpose_b=True), scale)
    p = execute(_SOFTMAX, (_dpa_masked(s, mask, _dpa_neg(s.dtype)),), {"axis": 3})
    return _heads_first(matmul(p, _heads_first(value))), p


def _dpa_backward(dout, query, key, value, weights, mask, scale, dweights=None):
    """``(dq, dk, dv)`` with ordinary ops (differentiable again)."""
    dt = _heads_first(dout)
    dv = matmul(weights, dt, transpose_a=True)
    dp = matmul(dt, _heads_first(value), transpose_b=True)
    if dweights is not None:
        dp = _m.add(dp, dweights)
    ds = _m.multiply(_m.subtract(dp, _red.reduce_sum(_m.multiply(dp, weights), axis=3,
                                                      keepdims=True)), weights)
    ds = _m.multiply(_dpa_masked(ds, mask, 0.0), scale)
    dq = matmul(ds, _heads_first(key))
    dk = matmul(ds, _heads_first(query), transpose_a=True)
    return _heads_first(dq), _heads_first(dk), _heads_first(dv)


def _dpa_grad_composite(dout, dweights, query, key, value, weights, mask, scale):
    return _dpa_backward(dout, query, key, value, weights, mask, scale, dweights)


def _dpa_grad(ctx, dout, dweights):
    q, k, v, mask = ctx.inputs
    out, p = ctx.outputs
    scale = ctx.attrs["scale"]
    if dout is None:
        dout = _m.multiply(out, 0.0)
    if not _ctx.active_tapes() and not _ctx.tracing[0]:
        # nothing records this backward pass: the one-kernel backward op
        dw = _m.multiply(p, 0.0) if dweights is None else dweights
        dq, dk, dv = execute(_DPA_GRAD, (dout, dw, q, k, v, p, mask), {"scale": scale})
    else:               # (a tape records it: ordinary ops, differentiable again)
        dq, dk, dv = _dpa_backward(dout, q, k, v, p, mask, scale, dweights)
    return dq, dk, dv, None


def _dpa_jvp(ctx, tq, tk, tv, tmask):
    """Forward mode: ``ds = scale (tq k^T + q tk^T)`` (0 where masked), ``dP = P (ds -
    sum(P ds))``, ``d out = dP v + P tv``; the tangents ``(d out, dP)``."""
    q, k, v, mask = ctx.inputs
    out, p = ctx.outputs
    scale = ctx.attrs["scale"]
    ds = _ln_sum([matmul(_heads_first(tq), _heads_first(k), transpose_b=True)
                  if tq is not None else None,
                  matmul(_heads_first(q), _heads_first(tk), transpose_b=True)
                  if tk is not None else None])
    d_out = None
    dp = _m.multiply(p, 0.0)
    if ds is not None:
        ds = _m.multiply(_dpa_masked(ds, mask, 0.0), scale)
        dp = _m.multiply(p, _m.subtract(ds, _red.reduce_sum(_m.multiply(p, ds), axis=3,
                                                            keepdims=True)))
        d_out = matmul(dp, _heads_first(v))
    if tv is not None:
        d_out = _ln_sum([d_out, matmul(p, _heads_first(tv))])
    d_out = _m.multiply(out, 0.0) if d_out is None else _heads_first(d_out)
    return d_out, dp


def _dpa_fold(ctx, tensors, n_mask, n_query):
    """(tf.vectorized_map) the batch of examples folded into the op's own batch."""
    size = ctx.size
    q, q_batched = tensors[n_query], ctx.batched[n_query]
    b = _shape(q)[1 if q_batched else 0]                   # the op's own batch size
    out = []
    for i, (t, batched) in enumerate(zip(tensors, ctx.batched)):
        shape = _shape(t)
        if i == n_mask and not batched and not shape:
            out.append(t)                       # (no mask: none per example either)
            continue
        if i == n_mask:
            ex = shape[1:] if batched else shape
            full = [1] * (4 - len(ex)) + ex
            t = reshape(t, ([size] if batched else [1]) + full)
            bshape = [size, b] + full[1:]
            t = reshape(_red.broadcast_to(t, bshape), [size * b] + full[1:])
            out.append(t)
            continue
        if not batched:
            t = _red.broadcast_to(t, [size] + shape)
            shape = [size] + shape
        out.append(reshape(t, [size * shape[1]] + shape[2:]))
    return out


def _dpa_batch(ctx, q, k, v, mask):
    """(tf.vectorized_map) fold the examples into the batch axis."""
    qf, kf, vf, mf = _dpa_fold(ctx, (q, k, v, mask), 3, 0)
    out, p = execute(ctx.op, (qf, kf, vf, mf), ctx.attrs)
    return (reshape(out, [ctx.size, -1] + _shape(out)[1:]),
            reshape(p, [ctx.size, -1] + _shape(p)[1:]))


def _dpa_grad_batch(ctx, dout, dweights, q, k, v, p, mask):
    folded = _dpa_fold(ctx, (dout, dweights, q, k, v, p, mask), 6, 2)
    return tuple(reshape(g, [ctx.size, -1] + _shape(g)[1:])
                 for g in execute(ctx.op, tuple(folded), ctx.attrs))


_DPA = defop("DotProductAttention", inputs=("query", "key", "value", "mask"),
             attrs={"scale": 1.0}, attr_types={"scale": "float"}, num_outputs=2,
             dtype_rule="none", grad=_dpa_grad, check=_dpa_check, composite=_dpa_composite,
             batch=_dpa_batch, jvp=_dpa_jvp)
_DPA_GRAD = defop("DotProductAttentionGrad",
                  inputs=("dout", "dweights", "query", "key", "value", "weights", "mask"),
                  attrs={"scale": 1.0}, attr_types={"scale": "float"}, num_outputs=3,
                  dtype_rule="none", differentiable=False, check=_dpa_check,
                  composite=_dpa_grad_composite, batch=_dpa_grad_batch)


@_on_device
def dot_product_attention(query, key, value, mask=None, scale=None, name=None):
    """Scaled dot-product attention of ``query`` ``[batch, T, heads, K]`` over ``key``
    ``[batch, S, heads, K]`` and ``value`` ``[batch, S, heads, V]``: returns ``(out
    [batch, T, heads, V], weights [batch, heads, T, S])`` with ``weights =
    softmax(scale * q . k)`` over S (``scale`` default ``1/sqrt(K)``) and ``mask``
    (booleans broadcasting to ``[batch, heads, T, S]``; False: not attended). One op
    forwards (``DotProductAttention``) and one backwards; the heads stay in the
    projections' layout (no transposed copies). ``tf.keras.layers.MultiHeadAttention``
    calls it.

    >>> import tapeflow as tf
    >>> out, w = tf.nn.dot_product_attention(tf.ones([1, 2, 1, 4]), tf.ones([1, 3, 1, 4]),
    ...                                      tf.ones([1, 3, 1, 5]))
    >>> out.shape, w.shape, round(float(w[0, 0, 0, 0]), 4)
    (TensorShape([1, 2, 1, 5]), TensorShape([1, 1, 2, 3]), 0.3333)
    """
    q = _t(query)
    k = convert_like(key, q, dtype=_like(key, q))
    v = convert_like(value, q, dtype=_like(value, q))
    kd = q._data.shape[-1] if len(q._data.shape) == 4 else 1
    s = 1.0 / float(np.sqrt(kd)) if scale is None else float(
        real_number(scale, "dot_product_attention: scale", "DotProductAttention", q))
    m = convert_like(True if mask is None else mask, q, dtype=_dtypes.bool_)
    return tuple(execute(_DPA, (q, k, v, m), {"scale": s}))


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


def _geom(size, k, s, d, padding, i=0):
    """(output size, pad before, pad after) of one spatial dimension (TF's rules)."""
    eff = (k - 1) * d + 1
    if padding == "SAME":
        out = -(-size // s)
        total = max((out - 1) * s + eff - size, 0)
        return out, total // 2, total - total // 2
    if padding == "VALID":
        return max((size - eff) // s + 1, 0), 0, 0
    pb, pa = padding[i]
    return max((size + pb + pa - eff) // s + 1, 0), pb, pa


def _spatial(shape, fmt):
    return (shape[1], shape[2]) if fmt == "NHWC" else (shape[2], shape[3])


def _check_out(opname, in_shape, fmt, kh, kw, strides, dil, padding, what, other_shape):
    h, w = _spatial(in_shape, fmt)
    oh = _geom(h, kh, strides[0], dil[0], padding, 0)[0]
    ow = _geom(w, kw, strides[1], dil[1], padding, 1)[0]
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


#: a convolution's forward, input-gradient and filter-gradient ops, by the name of each
#: (Conv2D's, and those :func:`_family` declares): their gradients are written with each other
_FAMILIES: dict = {}


def _conv_attrs_of(ctx, drop):
    return {k: v for k, v in ctx.attrs.items() if k != drop}


def _family_grad(ctx, dy):
    _, bpi, bpf = _FAMILIES[ctx.op.name]
    x, w = ctx.inputs
    a = ctx.attrs
    dx = execute(bpi, (w, dy), {"input_sizes": tuple(_shape(x)), **a}) \
        if _need(ctx, 0) else None
    dw = execute(bpf, (x, dy), {"filter_sizes": tuple(_shape(w)), **a}) \
        if _need(ctx, 1) else None
    return dx, dw


def _family_bpi_grad(ctx, ddx):
    # dx = B(w, dy) with <B(w, dy), u> = <dy, conv(u, w)>
    fwd, _, bpf = _FAMILIES[ctx.op.name]
    w, dy = ctx.inputs
    a = _conv_attrs_of(ctx, "input_sizes")
    g_w = execute(bpf, (ddx, dy), {"filter_sizes": tuple(_shape(w)), **a}) \
        if _need(ctx, 0) else None
    return g_w, execute(fwd, (ddx, w), a) if _need(ctx, 1) else None


def _family_bpf_grad(ctx, ddw):
    # dw = F(x, dy) with <F(x, dy), v> = <dy, conv(x, v)>
    fwd, bpi, _ = _FAMILIES[ctx.op.name]
    x, dy = ctx.inputs
    a = _conv_attrs_of(ctx, "filter_sizes")
    g_x = execute(bpi, (ddw, dy), {"input_sizes": tuple(_shape(x)), **a}) \
        if _need(ctx, 0) else None
    return g_x, execute(fwd, (x, ddw), a) if _need(ctx, 1) else None


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


_CONV2D = defop("Conv2D", inputs=("input", "filter"), attrs=_CONV_ATTRS, grad=_family_grad,
                jvp=Multilinear(), batch=_batch_fold_first)
_CONV_BP_INPUT = defop("Conv2DBackpropInput", inputs=("filter", "out_backprop"),
                       attrs={"input_sizes": (), **_CONV_ATTRS}, grad=_family_bpi_grad,
                       jvp=Multilinear(), batch=_conv_bp_input_batch)
_CONV_BP_FILTER = defop("Conv2DBackpropFilter", inputs=("input", "out_backprop"),
                        attrs={"filter_sizes": (), **_CONV_ATTRS}, grad=_family_bpf_grad,
                        jvp=Multilinear())
_FAMILIES.update(dict.fromkeys(("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"),
                              (_CONV2D, _CONV_BP_INPUT, _CONV_BP_FILTER)))


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
    if max(*k, *attrs["strides"]) > 2**31 - 1:
        raise InvalidArgumentError(f"ksize {list(k)} and strides {list(attrs['strides'])} must "
                                   "fit in an int32, as TensorFlow's", op=opname)
    if attrs["padding"] == "SAME":
        # (a window longer than twice the input covers all of it from every position: one
        # that long gives the same result, and a kernel need not walk 2**31 positions)
        hw = xs[1:3] if fmt == "NHWC" else xs[2:4]
        attrs["ksize"] = k = tuple(min(kk, 2 * n + st + 1)
                                   for kk, n, st in zip(k, hw, attrs["strides"]))
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


# --- 1-d, 3-d, depthwise and separable convolution; 1-d and 3-d pooling ---------------------
#
# conv1d, conv1d_transpose and the 1-d pools are their 2-d ops on an inserted axis of size
# 1 (as TensorFlow runs them); the 3-d pools are separable (a 2-d pool over (H, W), then a
# pool over D: the max, and the mean of the in-bounds values, of a box are those of its
# rows' maxima / means). Conv3D and DepthwiseConv2dNative are ops of their own with
# backward ops, kernels on the host (kernels/nn.py, shared by CuPy), and composites over
# the 2-d convolution ops (Conv3D: one 2-d convolution per depth tap) or elementwise ops
# (depthwise: one multiply-add per filter tap) that run on a device without a kernel.

_FMT1 = {None: "NHWC", "NWC": "NHWC", "NHWC": "NHWC", "NCW": "NCHW", "NCHW": "NCHW"}


def _fmt_1d(data_format, opname):
    """The 2-d data_format a 1-d op runs in (NWC -> NHWC, NCW -> NCHW)."""
    fmt = _FMT1.get(data_format) if data_format is None or isinstance(data_format, str) \
        else None
    if fmt is None:
        raise InvalidArgumentError(f"data_format must be 'NWC' or 'NCW', got {data_format!r}",
                                   op=opname)
    return fmt


def _fmt_3d(data_format, opname):
    if data_format is None:
        return "NDHWC"
    if data_format not in ("NDHWC", "NCDHW"):
        raise InvalidArgumentError(
            f"data_format must be 'NDHWC' or 'NCDHW', got {data_format!r}", op=opname)
    return data_format


def _ntuple(v, n, what, channels_last, opname, default=1):
    """An int, ``n`` ints, or ``n + 2`` ints in data_format order (batch and channel 1)
    -> an ``n``-tuple of positive ints (``strides``, ``dilations``, ``ksize``)."""
    if v is None:
        v = default
    if hasattr(v, "numpy"):
        v = v.numpy().tolist()
    if isinstance(v, np.ndarray):
        v = v.tolist()
    v = [_shapes.as_index(a, what, opname) for a in (v if isinstance(v, (list, tuple))
                                                      else [v])]
    if len(v) == 1:
        out = tuple(v) * n
    elif len(v) == n:
        out = tuple(v)
    elif len(v) == n + 2:
        outer = (v[0], v[-1]) if channels_last else (v[0], v[1])
        if outer != (1, 1):
            raise InvalidArgumentError(
                f"{what} in the batch and depth dimensions must be 1, got {v}", op=opname)
        out = tuple(v[1:-1]) if channels_last else tuple(v[2:])
    else:
        raise InvalidArgumentError(
            f"{what} must be an int or a list of 1, {n} or {n + 2} ints, got {v}", op=opname)
    if min(out) < 1:
        raise InvalidArgumentError(f"{what} must be positive, got {list(out)}", op=opname)
    return out


def _str_padding(padding, opname):
    """'SAME' or 'VALID' (ops without explicit padding)."""
    if not isinstance(padding, str) or padding.upper() not in ("SAME", "VALID"):
        raise InvalidArgumentError(
            f"padding must be 'SAME' or 'VALID', got {padding!r} (pad explicitly with tf.pad, "
            "then use 'VALID')", op=opname)
    return padding.upper()


def _check_out_n(opname, in_shape, spatial, ks, strides, dil, padding, fmt, what, other):
    outs = tuple(_geom(n, k, s, d, padding, i)[0]
                 for i, (n, k, s, d) in enumerate(zip(spatial, ks, strides, dil)))
    if min(outs) <= 0:
        raise InvalidArgumentError(
            f"Computed output size would be {'negative' if min(outs) < 0 else 'zero'}: "
            f"input shape {list(in_shape)} ({fmt}), {what} {list(other)}, strides "
            f"{list(strides)}, dilations {list(dil)}, padding {padding}", op=opname)
    return outs


def _swap(x, perm):
    return execute(_TRANSPOSE, (x,), {"perm": perm})


def _place(g, axis, start, step, size):
    """``g`` spread along ``axis`` with ``step - 1`` zeros between its entries and placed
    at ``start`` of a zero axis of ``size`` (the adjoint of ``x[start::step]``)."""
    shp = _shape(g)
    n = shp[axis]
    if step > 1 and n > 1:
        g = reshape(g, shp[:axis + 1] + [1] + shp[axis + 1:])
        pads = [(0, 0)] * (len(shp) + 1)
        pads[axis + 1] = (0, step - 1)
        g = execute(_PAD, (g,), {"paddings": tuple(pads), "constant_values": 0})
        g = reshape(g, shp[:axis] + [n * step] + shp[axis + 1:])
        n = (n - 1) * step + 1
        g = g[(slice(None),) * axis + (slice(0, n),)]
    pads = [(0, 0)] * len(shp)
    pads[axis] = (start, size - start - n)
    return execute(_PAD, (g,), {"paddings": tuple(pads), "constant_values": 0})


def _taps(x, ks, strides, dil, outs, axes):
    """``x[..., start::stride]`` along ``axes`` for one filter tap ``ks`` (its offsets)."""
    spec = [slice(None)] * x.ndim
    for ax, k, s, d, o in zip(axes, ks, strides, dil, outs):
        spec[ax] = slice(k * d, k * d + s * (o - 1) + 1, s)
    return x[tuple(spec)]


def _add(acc, t):
    return t if acc is None else _m.add(acc, t)


def _family_check(op, tensors, attrs, device):
    """Every op of a convolution family: floating inputs of the family's rank, and a
    size attr (``input_sizes``/``filter_sizes``) of that rank when the op has one."""
    rank = 5 if "3D" in op.name else 4
    shapes = [list(t.shape) for t in tensors]
    for t in tensors:
        if not t.dtype.is_floating:
            raise InvalidArgumentError(
                f"{op.name} takes floating point inputs, got {t.dtype.name} (input shapes "
                f"{shapes}); cast them (tf.cast)", op=op.name)
    if any(len(s) != rank for s in shapes):
        raise InvalidArgumentError(
            f"{op.name} takes inputs of rank {rank}, got shapes {shapes}", op=op.name)
    for key in ("input_sizes", "filter_sizes"):
        if key in attrs and len(attrs[key]) != rank:
            raise InvalidArgumentError(
                f"{op.name}: {key} must list {rank} sizes, got {list(attrs[key])}", op=op.name)


def _family(names, attrs, composites, batch):
    """The forward op, input-gradient op and filter-gradient op of a convolution, their
    gradients written with each other (as Conv2D's), with ``composites`` and ``batch``
    rules, one per op."""
    fwd = defop(names[0], inputs=("input", "filter"), attrs=attrs, grad=_family_grad,
                jvp=Multilinear(), batch=batch[0], composite=composites[0], check=_family_check)
    bpi = defop(names[1], inputs=("filter", "out_backprop"), attrs={"input_sizes": (), **attrs},
                grad=_family_bpi_grad, jvp=Multilinear(), batch=batch[1],
                composite=composites[1], check=_family_check)
    bpf = defop(names[2], inputs=("input", "out_backprop"), attrs={"filter_sizes": (), **attrs},
                grad=_family_bpf_grad, jvp=Multilinear(), batch=batch[2],
                composite=composites[2], check=_family_check)
    for name in names:
        _FAMILIES[name] = (fwd, bpi, bpf)
    return fwd, bpi, bpf


# (conv1d) -----------------------------------------------------------------------------------

def _padding_1d(padding, channels_last, opname):
    if isinstance(padding, str) or padding is None:
        return padding
    try:
        pads = [tuple(int(a) for a in p) for p in padding]
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"bad explicit padding {padding!r}", op=opname) from None
    if len(pads) == 3:
        outer = (pads[0], pads[2]) if channels_last else (pads[0], pads[1])
        if any(a for p in outer for a in p):
            raise InvalidArgumentError(
                f"explicit padding of the batch and depth dimensions must be 0, got {padding}",
                op=opname)
        pads = [pads[1] if channels_last else pads[2]]
    if len(pads) != 1:
        raise InvalidArgumentError(
            f"explicit 1-d padding must be [[left, right]] (or 3 pairs in data_format order), "
            f"got {padding}", op=opname)
    return [(0, 0), pads[0]]


def _as_2d(opname, xs, ws, last):
    """(input shape, filter shape) of the 1-d op's 2-d form (a height of 1)."""
    return ([xs[0], 1, xs[1], xs[2]] if last else [xs[0], xs[1], 1, xs[2]]), [1] + list(ws)


@_on_device
def conv1d(input=None, filters=None, stride=None, padding=None, data_format="NWC",
           dilations=None, name=None, value=None, filter=None, use_cudnn_on_gpu=None):
    """1-D convolution of a 3-D ``input`` (NWC, or NCW) with ``filters`` of shape
    ``[width, in_channels, out_channels]``: the 2-d convolution of the input with a
    height of 1. ``stride``/``dilations`` an int (or 1 or 3 ints); ``padding``
    ``"SAME"``, ``"VALID"`` or ``[[left, right]]``. (TF 1's ``value=``/``filter=``
    and ``data_format="NHWC"`` for NWC work too.)

    >>> import tapeflow as tf
    >>> y = tf.nn.conv1d(tf.ones([1, 5, 2]), tf.ones([3, 2, 4]), stride=2, padding="SAME")
    >>> y.shape, float(y[0, 0, 0]), float(y[0, 1, 0])
    (TensorShape([1, 3, 4]), 4.0, 6.0)
    """
    op = "Conv1D"
    x = _t(input if input is not None else value)
    w = _t(filters if filters is not None else filter)
    xs, ws = _shape(x), _shape(w)
    fmt = _fmt_1d(data_format, op)
    last = fmt == "NHWC"
    if len(xs) != 3 or len(ws) != 3:
        raise InvalidArgumentError(
            f"input must be 3-D ({'NWC' if last else 'NCW'}) and filters 3-D [width, "
            f"in_channels, out_channels]; got input shape {xs} and filters shape {ws}", op=op)
    s = _ntuple(stride, 1, "stride", last, op)
    d = _ntuple(dilations, 1, "dilations", last, op)
    c = xs[2] if last else xs[1]
    if c != ws[1]:
        raise InvalidArgumentError(
            f"input depth {c} does not match the filters' in_channels {ws[1]}: input shape "
            f"{xs} ({'NWC' if last else 'NCW'}), filters shape {ws} (WIO)", op=op)
    x4s, w4s = _as_2d(op, xs, ws, last)
    try:
        y = conv2d(reshape(x, x4s), reshape(w, w4s), (1, s[0]),
                   _padding_1d(padding, last, op), fmt, (1, d[0]))
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e.message} (conv1d of input shape {xs}, filters shape "
                                   f"{ws}, as a 2-d convolution)", op=op) from None
    ys = _shape(y)
    return reshape(y, [ys[0], ys[2], ys[3]] if last else [ys[0], ys[1], ys[3]])


@_on_device
def conv1d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NWC",
                     dilations=None, name=None):
    """The transpose (gradient) of :func:`conv1d` w.r.t. its input: ``filters`` is
    ``[width, output_channels, in_channels]``, ``output_shape`` the 3-d result shape.

    >>> import tapeflow as tf
    >>> tf.nn.conv1d_transpose(tf.ones([1, 3, 4]), tf.ones([3, 2, 4]), [1, 6, 2], 2).shape
    TensorShape([1, 6, 2])
    """
    op = "Conv1DTranspose"
    x, w = _t(input), _t(filters)
    xs, ws = _shape(x), _shape(w)
    fmt = _fmt_1d(data_format, op)
    last = fmt == "NHWC"
    out = list(_shapes.as_shape(output_shape, op))
    if len(xs) != 3 or len(ws) != 3 or len(out) != 3:
        raise InvalidArgumentError(
            f"input, output_shape ({'NWC' if last else 'NCW'}) and filters ([width, "
            f"output_channels, in_channels]) must be 3-D; got input shape {xs}, output_shape "
            f"{out}, filters shape {ws}", op=op)
    s = _ntuple(strides, 1, "strides", last, op)
    d = _ntuple(dilations, 1, "dilations", last, op)
    o4, w4 = _as_2d(op, out, ws, last)
    try:
        y = conv2d_backprop_input(o4, reshape(w, w4), reshape(x, _as_2d(op, xs, ws, last)[0]),
                                  (1, s[0]), _padding_1d(padding, last, op), fmt, (1, d[0]))
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{e.message} (conv1d_transpose of input shape {xs}, "
                                   f"filters shape {ws}, as a 2-d one)", op=op) from None
    return reshape(y, out)


# (Conv3D) -----------------------------------------------------------------------------------

def _ndhwc(x, fmt):
    return x if fmt == "NDHWC" else _swap(x, (0, 2, 3, 4, 1))


def _from_ndhwc(y, fmt):
    return y if fmt == "NDHWC" else _swap(y, (0, 4, 1, 2, 3))


def _hw_attrs(strides, padding, dilations):
    return {"strides": tuple(strides[1:]), "padding": padding, "data_format": "NHWC",
            "dilations": tuple(dilations[1:])}


def _depth_padded(x, kd, strides, padding, dilations):
    """(the NDHWC ``x`` padded in depth, output depth, pad before)."""
    od, pf, pb = _geom(_shape(x)[1], kd, strides[0], dilations[0], padding)
    if pf or pb:
        x = execute(_PAD, (x,), {"paddings": ((0, 0), (pf, pb), (0, 0), (0, 0), (0, 0)),
                                 "constant_values": 0})
    return x, od, pf


def _depth_tap(xp, i, od, strides, dilations):
    """Depth tap ``i`` of every output position: ``[N * OD, H, W, C]``."""
    xs = _taps(xp, (i,), strides[:1], dilations[:1], (od,), (1,))
    s = _shape(xs)
    return reshape(xs, [s[0] * s[1]] + s[2:])


def _conv3d_composite(x, w, strides, padding, data_format, dilations):
    """Conv3D as one Conv2D per depth tap of the filter, summed."""
    x = _ndhwc(x, data_format)
    xp, od, _ = _depth_padded(x, _shape(w)[0], strides, padding, dilations)
    a2 = _hw_attrs(strides, padding, dilations)
    acc = None
    for i in range(_shape(w)[0]):
        acc = _add(acc, execute(_CONV2D, (_depth_tap(xp, i, od, strides, dilations), w[i]), a2))
    s = _shape(acc)
    return _from_ndhwc(reshape(acc, [_shape(x)[0], od] + s[1:]), data_format)


def _conv3d_bpi_composite(w, dy, input_sizes, strides, padding, data_format, dilations):
    """Conv3DBackpropInputV2 as one Conv2DBackpropInput per depth tap, spread back."""
    n, d, h, wd, c = (input_sizes if data_format == "NDHWC" else
                      [input_sizes[i] for i in (0, 2, 3, 4, 1)])
    dy = _ndhwc(dy, data_format)
    _, od, oh, ow, o = _shape(dy)
    kd = _shape(w)[0]
    _, pf, pb = _geom(d, kd, strides[0], dilations[0], padding)
    dy2 = reshape(dy, [n * od, oh, ow, o])
    a2 = {"input_sizes": (n * od, h, wd, c), **_hw_attrs(strides, padding, dilations)}
    acc = None
    for i in range(kd):
        g = reshape(execute(_CONV_BP_INPUT, (w[i], dy2), a2), [n, od, h, wd, c])
        acc = _add(acc, _place(g, 1, i * dilations[0], strides[0], d + pf + pb))
    return _from_ndhwc(acc[:, pf:pf + d], data_format)


def _conv3d_bpf_composite(x, dy, filter_sizes, strides, padding, data_format, dilations):
    """Conv3DBackpropFilterV2 as one Conv2DBackpropFilter per depth tap, stacked."""
    kd, kh, kw, c, o = filter_sizes
    x, dy = _ndhwc(x, data_format), _ndhwc(dy, data_format)
    xp, od, _ = _depth_padded(x, kd, strides, padding, dilations)
    s = _shape(dy)
    dy2 = reshape(dy, [s[0] * s[1]] + s[2:])
    a2 = {"filter_sizes": (kh, kw, c, o), **_hw_attrs(strides, padding, dilations)}
    parts = [execute(_CONV_BP_FILTER, (_depth_tap(xp, i, od, strides, dilations), dy2), a2)
             for i in range(kd)]
    return execute(_STACK, tuple(parts), {"axis": 0})


_CONV3D_ATTRS = {"strides": (1, 1, 1), "padding": "VALID", "data_format": "NDHWC",
                 "dilations": (1, 1, 1)}
_CONV3D, _CONV3D_BP_INPUT, _CONV3D_BP_FILTER = _family(
    ("Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2"), _CONV3D_ATTRS,
    (_conv3d_composite, _conv3d_bpi_composite, _conv3d_bpf_composite),
    (_batch_fold_first, _conv_bp_input_batch, None))
# (tf.vectorized_map) as Conv2D's: a filter per example is a grouped convolution
_b.PARTIAL_RULE.update({"Conv3D": "a filter per example (as Conv2D)",
                        "Conv3DBackpropInputV2": "a filter per example (as Conv2D)"})
_b.NO_RULE["Conv3DBackpropFilterV2"] = "a filter per example (as Conv2DBackpropFilter)"


def _conv3d_attrs(opname, xs, ws, strides, padding, data_format, dilations):
    fmt = _fmt_3d(data_format, opname)
    if len(xs) != 5 or len(ws) != 5:
        raise InvalidArgumentError(
            f"input must be 5-D ({fmt}) and filter 5-D [depth, height, width, in_channels, "
            f"out_channels]; got input shape {list(xs)} and filter shape {list(ws)}", op=opname)
    last = fmt == "NDHWC"
    attrs = {"strides": _ntuple(strides, 3, "strides", last, opname),
             "padding": _str_padding(padding, opname), "data_format": fmt,
             "dilations": _ntuple(dilations, 3, "dilations", last, opname)}
    c = xs[4] if last else xs[1]
    if c != ws[3]:
        raise InvalidArgumentError(
            f"input depth {c} does not match the filter's in_channels {ws[3]}: input shape "
            f"{list(xs)} ({fmt}), filter shape {list(ws)} (DHWIO)", op=opname)
    spatial = xs[1:4] if last else xs[2:5]
    outs = _check_out_n(opname, xs, spatial, ws[:3], attrs["strides"], attrs["dilations"],
                        attrs["padding"], fmt, "filter shape", ws)
    return attrs, ([xs[0], *outs, ws[4]] if last else [xs[0], ws[4], *outs])


@_on_device
def conv3d(input, filters=None, strides=None, padding=None, data_format="NDHWC",
           dilations=None, name=None, filter=None):
    """3-D convolution of a 5-D ``input`` (NDHWC or NCDHW) with ``filters`` of shape
    ``[depth, height, width, in_channels, out_channels]``; ``strides``/``dilations``
    an int, 3 ints or 5 in ``data_format`` order; ``padding`` ``"SAME"`` or ``"VALID"``.

    >>> import tapeflow as tf
    >>> y = tf.nn.conv3d(tf.ones([1, 4, 4, 4, 1]), tf.ones([2, 2, 2, 1, 3]),
    ...                  strides=[1, 2, 2, 2, 1], padding="VALID")
    >>> y.shape, float(y[0, 0, 0, 0, 0])
    (TensorShape([1, 2, 2, 2, 3]), 8.0)
    """
    x = _t(input)
    w = _t(filters if filters is not None else filter)
    attrs, _ = _conv3d_attrs("Conv3D", _shape(x), _shape(w), strides, padding, data_format,
                             dilations)
    return execute(_CONV3D, (x, w), attrs)


def _bp_dy_check_n(opname, dy_shape, want, xs, ws, fmt):
    if list(dy_shape) != list(want):
        raise InvalidArgumentError(
            f"out_backprop shape {list(dy_shape)} does not match the convolution's output "
            f"shape {list(want)} (input {list(xs)}, filter {list(ws)}, {fmt})", op=opname)


def _backprop_input(op, opdef, attrs_of, input_sizes, filter, out_backprop, strides,
                    padding, data_format, dilations):
    """A convolution family's input-gradient op on checked attrs and shapes."""
    w, dy = _t(filter), _t(out_backprop)
    xs = list(_shapes.as_shape(input_sizes, op))
    attrs, want = attrs_of(op, xs, _shape(w), strides, padding, data_format, dilations)
    _bp_dy_check_n(op, _shape(dy), want, xs, _shape(w), attrs["data_format"])
    return execute(opdef, (w, dy), {"input_sizes": tuple(xs), **attrs})


def _backprop_filter(op, opdef, attrs_of, input, filter_sizes, out_backprop, strides,
                     padding, data_format, dilations):
    """A convolution family's filter-gradient op on checked attrs and shapes."""
    x, dy = _t(input), _t(out_backprop)
    ws = list(_shapes.as_shape(filter_sizes, op))
    attrs, want = attrs_of(op, _shape(x), ws, strides, padding, data_format, dilations)
    _bp_dy_check_n(op, _shape(dy), want, _shape(x), ws, attrs["data_format"])
    return execute(opdef, (x, dy), {"filter_sizes": tuple(ws), **attrs})


@_on_device
def conv3d_backprop_input_v2(input_sizes, filter, out_backprop, strides, padding,
                             data_format="NDHWC", dilations=None, name=None):
    """Gradient of :func:`conv3d` w.r.t. its input (of shape ``input_sizes``)."""
    return _backprop_input("Conv3DBackpropInputV2", _CONV3D_BP_INPUT, _conv3d_attrs,
                           input_sizes, filter, out_backprop, strides, padding, data_format,
                           dilations)


@_on_device
def conv3d_backprop_filter_v2(input, filter_sizes, out_backprop, strides, padding,
                              data_format="NDHWC", dilations=None, name=None):
    """Gradient of :func:`conv3d` w.r.t. its filter (of shape ``filter_sizes``)."""
    return _backprop_filter("Conv3DBackpropFilterV2", _CONV3D_BP_FILTER, _conv3d_attrs, input,
                            filter_sizes, out_backprop, strides, padding, data_format,
                            dilations)


def conv3d_transpose(input, filters=None, output_shape=None, strides=None, padding="SAME",
                     data_format="NDHWC", dilations=None, name=None, filter=None):
    """Transposed 3-D convolution (the gradient of :func:`conv3d` w.r.t. its input);
    ``filters`` is ``[depth, height, width, output_channels, in_channels]``.

    >>> import tapeflow as tf
    >>> tf.nn.conv3d_transpose(tf.ones([1, 2, 2, 2, 4]), tf.ones([3, 3, 3, 2, 4]),
    ...                        [1, 4, 4, 4, 2], strides=2).shape
    TensorShape([1, 4, 4, 4, 2])
    """
    if output_shape is None:
        raise InvalidArgumentError("output_shape is required: the shape of the result",
                                   op="Conv3DBackpropInputV2")
    return conv3d_backprop_input_v2(output_shape, filters if filters is not None else filter,
                                    input, strides, padding, data_format, dilations)


# (depthwise and separable) ------------------------------------------------------------------

def _nhwc_t(x, fmt):
    return x if fmt == "NHWC" else _swap(x, (0, 2, 3, 1))


def _from_nhwc_t(y, fmt):
    return y if fmt == "NHWC" else _swap(y, (0, 3, 1, 2))


def _dw_geom(h, wd, kh, kw, strides, padding, dilations):
    oh, pt, pb = _geom(h, kh, strides[0], dilations[0], padding, 0)
    ow, pl, pr = _geom(wd, kw, strides[1], dilations[1], padding, 1)
    return (oh, ow), (pt, pb, pl, pr)


def _dw_padded(x, pads):
    pt, pb, pl, pr = pads
    if pt or pb or pl or pr:
        x = execute(_PAD, (x,), {"paddings": ((0, 0), (pt, pb), (pl, pr), (0, 0)),
                                 "constant_values": 0})
    return x


def _depthwise_composite(x, w, strides, padding, data_format, dilations):
    """DepthwiseConv2dNative as one broadcast multiply-add per filter tap."""
    x = _nhwc_t(x, data_format)
    n, h, wd, c = _shape(x)
    kh, kw, _, m = _shape(w)
    outs, pads = _dw_geom(h, wd, kh, kw, strides, padding, dilations)
    xp = _dw_padded(x, pads)
    acc = None
    for i in range(kh):
        for j in range(kw):
            xs = _taps(xp, (i, j), strides, dilations, outs, (1, 2))
            acc = _add(acc, _m.multiply(reshape(xs, [n, *outs, c, 1]), w[i, j]))
    return _from_nhwc_t(reshape(acc, [n, *outs, c * m]), data_format)


def _depthwise_bpi_composite(w, dy, input_sizes, strides, padding, data_format, dilations):
    """DepthwiseConv2dNativeBackpropInput: each tap's products summed over the
    multiplier, spread back to the padded input and cropped."""
    n, h, wd, c = input_sizes if data_format == "NHWC" else [input_sizes[i] for i in
                                                             (0, 2, 3, 1)]
    kh, kw, _, m = _shape(w)
    outs, (pt, pb, pl, pr) = _dw_geom(h, wd, kh, kw, strides, padding, dilations)
    dy5 = reshape(_nhwc_t(dy, data_format), [n, *outs, c, m])
    acc = None
    for i in range(kh):
        for j in range(kw):
            g = _red.reduce_sum(_m.multiply(dy5, w[i, j]), axis=4)
            g = _place(g, 1, i * dilations[0], strides[0], h + pt + pb)
            acc = _add(acc, _place(g, 2, j * dilations[1], strides[1], wd + pl + pr))
    return _from_nhwc_t(acc[:, pt:pt + h, pl:pl + wd], data_format)


def _depthwise_bpf_composite(x, dy, filter_sizes, strides, padding, data_format, dilations):
    """DepthwiseConv2dNativeBackpropFilter: each tap's input window times the gradient,
    summed over the batch and the output positions."""
    kh, kw, c, m = filter_sizes
    x = _nhwc_t(x, data_format)
    n, h, wd, _ = _shape(x)
    outs, pads = _dw_geom(h, wd, kh, kw, strides, padding, dilations)
    xp = _dw_padded(x, pads)
    dy5 = reshape(_nhwc_t(dy, data_format), [n, *outs, c, m])
    parts = [_red.reduce_sum(_m.multiply(reshape(_taps(xp, (i, j), strides, dilations, outs,
                                                        (1, 2)), [n, *outs, c, 1]), dy5),
                             axis=(0, 1, 2))
             for i in range(kh) for j in range(kw)]
    return reshape(execute(_STACK, tuple(parts), {"axis": 0}), [kh, kw, c, m])


# (tf.vectorized_map) a filter per example is still a depthwise convolution: the batch
# joins the channels ((B, N, H, W, C) -> (N, H, W, B * C), filters (B, .., C, M) ->
# (.., B * C, M)); a batch of inputs alone joins the op's own batch dimension

def _chan_fold(t, fmt):
    b, n, *rest = _shape(t)
    if fmt == "NHWC":
        h, w, c = rest
        return reshape(_swap(t, (1, 2, 3, 0, 4)), [n, h, w, b * c])
    c, h, w = rest
    return reshape(_swap(t, (1, 0, 2, 3, 4)), [n, b * c, h, w])


def _chan_unfold(y, fmt, b):
    if fmt == "NHWC":
        n, h, w, bc = _shape(y)
        return _swap(reshape(y, [n, h, w, b, bc // b]), (3, 0, 1, 2, 4))
    n, bc, h, w = _shape(y)
    return _swap(reshape(y, [n, b, bc // b, h, w]), (1, 0, 2, 3, 4))


def _filt_fold(w):
    b, kh, kw, c, m = _shape(w)
    return reshape(_swap(w, (1, 2, 0, 3, 4)), [kh, kw, b * c, m])


def _depthwise_batch(ctx, x, w):
    if not ctx.batched[1]:
        return _batch_fold_first(ctx, x, w)
    x, w = _b.batch_all(ctx, (x, w))
    fmt = ctx.attrs["data_format"]
    return _chan_unfold(execute(ctx.op, (_chan_fold(x, fmt), _filt_fold(w)), ctx.attrs), fmt,
                        ctx.size)


def _depthwise_bpi_batch(ctx, w, dy):
    if not ctx.batched[0]:
        return _conv_bp_input_batch(ctx, w, dy)
    w, dy = _b.batch_all(ctx, (w, dy))
    fmt, b = ctx.attrs["data_format"], ctx.size
    n, a1, a2, a3 = ctx.attrs["input_sizes"]
    sizes = (n, a1, a2, b * a3) if fmt == "NHWC" else (n, b * a1, a2, a3)
    return _chan_unfold(rerun(ctx, (_filt_fold(w), _chan_fold(dy, fmt)), input_sizes=sizes),
                        fmt, b)


def _depthwise_bpf_batch(ctx, x, dy):
    x, dy = _b.batch_all(ctx, (x, dy))
    fmt, b = ctx.attrs["data_format"], ctx.size
    kh, kw, c, m = ctx.attrs["filter_sizes"]
    g = rerun(ctx, (_chan_fold(x, fmt), _chan_fold(dy, fmt)), filter_sizes=(kh, kw, b * c, m))
    return _swap(reshape(g, [kh, kw, b, c, m]), (2, 0, 1, 3, 4))


_DEPTHWISE, _DEPTHWISE_BP_INPUT, _DEPTHWISE_BP_FILTER = _family(
    ("DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput",
     "DepthwiseConv2dNativeBackpropFilter"), _CONV_ATTRS,
    (_depthwise_composite, _depthwise_bpi_composite, _depthwise_bpf_composite),
    (_depthwise_batch, _depthwise_bpi_batch, _depthwise_bpf_batch))


def _depthwise_attrs(opname, xs, ws, strides, padding, data_format, dilations):
    attrs = _conv_attrs(opname, xs, ws, strides, padding, data_format, dilations)
    if max(attrs["strides"]) > 1 and max(attrs["dilations"]) > 1:
        raise InvalidArgumentError(
            f"strides > 1 are not supported together with dilations > 1: strides "
            f"{list(attrs['strides'])}, dilations {list(attrs['dilations'])}; input shape "
            f"{list(xs)}, filter shape {list(ws)}", op=opname)
    fmt = attrs["data_format"]
    oh, ow = _check_out(opname, xs, fmt, ws[0], ws[1], attrs["strides"], attrs["dilations"],
                        attrs["padding"], "filter shape", ws)
    co = ws[2] * ws[3]
    return attrs, ([xs[0], oh, ow, co] if fmt == "NHWC" else [xs[0], co, oh, ow])


@_on_device
def depthwise_conv2d(input, filter, strides=None, padding=None, data_format=None,
                     dilations=None, name=None, rate=None):
    """Depthwise 2-D convolution: each input channel ``c`` is convolved with its own
    ``filter[:, :, c, :]`` (``filter``: ``[height, width, in_channels,
    channel_multiplier]``), giving ``in_channels * channel_multiplier`` channels, output
    channel ``c * channel_multiplier + m``. ``strides`` (int, 2 or 4 ints) and
    ``dilations`` (or TF 1's ``rate``) cannot both exceed 1.

    >>> import tapeflow as tf
    >>> y = tf.nn.depthwise_conv2d(tf.ones([1, 4, 4, 2]), tf.ones([3, 3, 2, 2]),
    ...                            strides=[1, 1, 1, 1], padding="VALID")
    >>> y.shape, float(y[0, 0, 0, 3])
    (TensorShape([1, 2, 2, 4]), 9.0)
    """
    x, w = _t(input), _t(filter)
    attrs, _ = _depthwise_attrs("DepthwiseConv2dNative", _shape(x), _shape(w), strides,
                                padding, data_format, dilations if dilations is not None
                                else rate)
    return execute(_DEPTHWISE, (x, w), attrs)


depthwise_conv2d_native = depthwise_conv2d


@_on_device
def depthwise_conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding,
                                    data_format="NHWC", dilations=None, name=None):
    """Gradient of :func:`depthwise_conv2d` w.r.t. its input (of shape ``input_sizes``)."""
    return _backprop_input("DepthwiseConv2dNativeBackpropInput", _DEPTHWISE_BP_INPUT,
                           _depthwise_attrs, input_sizes, filter, out_backprop, strides,
                           padding, data_format, dilations)


@_on_device
def depthwise_conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding,
                                     data_format="NHWC", dilations=None, name=None):
    """Gradient of :func:`depthwise_conv2d` w.r.t. its filter (of shape ``filter_sizes``)."""
    return _backprop_filter("DepthwiseConv2dNativeBackpropFilter", _DEPTHWISE_BP_FILTER,
                            _depthwise_attrs, input, filter_sizes, out_backprop, strides,
                            padding, data_format, dilations)


@_on_device
def separable_conv2d(input, depthwise_filter, pointwise_filter, strides=None, padding=None,
                     data_format=None, dilations=None, name=None, rate=None):
    """:func:`depthwise_conv2d` followed by a 1x1 :func:`conv2d` with
    ``pointwise_filter`` (``[1, 1, in_channels * channel_multiplier, out_channels]``).

    >>> import tapeflow as tf
    >>> y = tf.nn.separable_conv2d(tf.ones([1, 4, 4, 2]), tf.ones([3, 3, 2, 1]),
    ...                            tf.ones([1, 1, 2, 5]), strides=[1, 1, 1, 1], padding="SAME")
    >>> y.shape, float(y[0, 1, 1, 0])
    (TensorShape([1, 4, 4, 5]), 18.0)
    """
    dw, pw = _t(depthwise_filter), _t(pointwise_filter)
    ds, ps = _shape(dw), _shape(pw)
    if len(ds) != 4 or len(ps) != 4 or ps[:2] != [1, 1] or ps[2] != ds[2] * ds[3]:
        raise InvalidArgumentError(
            f"pointwise_filter must be [1, 1, in_channels * channel_multiplier, out_channels] "
            f"for a depthwise_filter [height, width, in_channels, channel_multiplier]; got "
            f"depthwise_filter shape {ds} and pointwise_filter shape {ps}", op="SeparableConv2D")
    y = depthwise_conv2d(input, dw, strides, padding, data_format, dilations, rate=rate)
    return conv2d(y, pw, 1, "VALID", data_format or "NHWC")


# (1-d and 3-d pooling) ----------------------------------------------------------------------

def _pool1d(op, opname, input, ksize, strides, padding, data_format):
    x = _t(input)
    xs = _shape(x)
    fmt = _fmt_1d(data_format, opname)
    last = fmt == "NHWC"
    if len(xs) != 3:
        raise InvalidArgumentError(f"input must be 3-D ({'NWC' if last else 'NCW'}), got shape "
                                   f"{xs}", op=opname)
    k = _ntuple(ksize, 1, "ksize", last, opname)
    s = _ntuple(strides, 1, "strides", last, opname, default=k)
    x4 = reshape(x, [xs[0], 1, xs[1], xs[2]] if last else [xs[0], xs[1], 1, xs[2]])
    attrs = _pool_attrs(opname, x4, (1, k[0]), (1, s[0]), _str_padding(padding, opname), fmt)
    y = execute(op, (x4,), attrs)
    ys = _shape(y)
    return reshape(y, [ys[0], ys[2], ys[3]] if last else [ys[0], ys[1], ys[3]])


@_on_device
def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    """Max over ``ksize`` windows of a 3-D ``input`` (NWC or NCW).

    >>> import tapeflow as tf
    >>> print(tf.nn.max_pool1d(tf.reshape(tf.range(6.), [1, 6, 1]), 2, 2, "VALID")[0, :, 0])
    tf.Tensor([1. 3. 5.], shape=(3,), dtype=float32)
    """
    return _pool1d(_MAX_POOL, "MaxPool", input, ksize, strides, padding, data_format)


@_on_device
def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):
    """Mean over ``ksize`` windows of a 3-D ``input`` (NWC or NCW); with SAME padding
    each window averages its in-bounds values."""
    return _pool1d(_AVG_POOL, "AvgPool", input, ksize, strides, padding, data_format)


def _pool3d(op, opname, input, ksize, strides, padding, data_format):
    x = _t(input)
    xs = _shape(x)
    fmt = _fmt_3d(data_format, opname)
    last = fmt == "NDHWC"
    if len(xs) != 5:
        raise InvalidArgumentError(f"input must be 5-D ({fmt}), got shape {xs}", op=opname)
    k = _ntuple(ksize, 3, "ksize", last, opname)
    s = _ntuple(strides, 3, "strides", last, opname, default=k)
    p = _str_padding(padding, opname)
    xn = _ndhwc(x, fmt)
    n, d, h, w, c = _shape(xn)
    od, oh, ow = _check_out_n(opname, xs, (d, h, w), k, s, (1, 1, 1), p, fmt, "ksize", k)
    y = execute(op, (reshape(xn, [n * d, h, w, c]),),
                {"ksize": k[1:], "strides": s[1:], "padding": p, "data_format": "NHWC"})
    y = execute(op, (reshape(y, [n, d, oh * ow, c]),),
                {"ksize": (k[0], 1), "strides": (s[0], 1), "padding": p, "data_format": "NHWC"})
    return _from_ndhwc(reshape(y, [n, od, oh, ow, c]), fmt)


@_on_device
def max_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):
    """Max over ``ksize`` boxes of a 5-D ``input`` (NDHWC or NCDHW).

    >>> import tapeflow as tf
    >>> y = tf.nn.max_pool3d(tf.reshape(tf.range(8.), [1, 2, 2, 2, 1]), 2, 2, "VALID")
    >>> y.shape, float(y[0, 0, 0, 0, 0])
    (TensorShape([1, 1, 1, 1, 1]), 7.0)
    """
    return _pool3d(_MAX_POOL, "MaxPool3D", input, ksize, strides, padding, data_format)


@_on_device
def avg_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):
    """Mean over ``ksize`` boxes of a 5-D ``input``; with SAME padding each box
    averages its in-bounds values."""
    return _pool3d(_AVG_POOL, "AvgPool3D", input, ksize, strides, padding, data_format)


__all__ += ["dropout_v1", "use_tf1_conventions"]
__all__ += ["conv1d", "conv1d_transpose", "conv3d", "conv3d_backprop_input_v2",
            "conv3d_backprop_filter_v2", "conv3d_transpose", "depthwise_conv2d",
            "depthwise_conv2d_native", "depthwise_conv2d_backprop_input",
            "depthwise_conv2d_backprop_filter", "separable_conv2d", "max_pool1d", "avg_pool1d",
            "max_pool3d", "avg_pool3d"]


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


def dropout_v1(x, keep_prob=None, noise_shape=None, seed=None, name=None, rate=None):
    """TF 1's ``tf.nn.dropout``, whose second argument is ``keep_prob`` (TF 2's is
    ``rate``): ``tf.nn.dropout`` after ``tf.enable_eager_execution()``, which only TF 1
    programs call (:func:`use_tf1_conventions`).

    >>> import tapeflow as tf
    >>> y = tf.nn.dropout_v1(tf.ones([1000]), 0.25, seed=1)    # keep a quarter
    >>> sorted(set(y.numpy().tolist()))
    [0.0, 4.0]
    """
    return _DROPOUT_V2(x, rate=rate, noise_shape=noise_shape, seed=seed, keep_prob=keep_prob)


_DROPOUT_V2 = dropout      # (the TF 2 function, whatever the name ``dropout`` is bound to)


def use_tf1_conventions(on=True):
    """Give the functions whose positional arguments TF 2 changed their TF 1 meaning
    (``tf.nn.dropout(x, keep_prob)``), process-wide as TF 1's eager mode was; ``False``
    restores TF 2's (``tf.enable_v2_behavior()``). Keyword calls mean the same in both."""
    globals()["dropout"] = dropout_v1 if on else _DROPOUT_V2


# --- embedding_lookup (TF 1's tf.nn.embedding_lookup) --------------------------------------

def _mod_rows(params, device):
    """The positions in ``concat(params)`` of rows 0, 1, 2 ... of the table the "mod"
    strategy shards: row ``i`` is row ``i // P`` of shard ``i % P``."""
    sizes = [int(p.shape[0]) for p in params]
    n, offsets = len(params), np.cumsum([0] + sizes[:-1])
    total = sum(sizes)
    rows = np.arange(total)
    perm = offsets[rows % n] + rows // n
    for p, size in enumerate(sizes):       # a "mod" table's shards hold ceil((total - p) / P)
        if size != -(-(total - p) // n):
            raise InvalidArgumentError(
                f"embedding_lookup: with partition_strategy='mod', shard {p} of {n} must have "
                f"{-(-(total - p) // n)} rows for a table of {total}, got {size} (shard sizes "
                f"{sizes}); use partition_strategy='div' for contiguous shards",
                op="embedding_lookup", device=device)
    return convert_to_tensor(perm.astype(np.int64))


def embedding_lookup(params, ids, partition_strategy="mod", name=None, validate_indices=True,
                     max_norm=None):
    """The rows of ``params`` at ``ids``: ``tf.gather(params, ids)`` with TF 1's options.

    ``params`` is a Tensor or Variable (``[vocabulary, ...]``), or a list of them that
    shard one table: with ``partition_strategy="mod"`` (the default) id ``i`` is row
    ``i // P`` of shard ``i % P``; with ``"div"`` the shards are consecutive blocks.
    ``max_norm``: each looked-up row with a larger L2 norm is scaled down to it. The
    result has shape ``ids.shape + params.shape[1:]``; the gradient with respect to
    ``params`` is Gather's (the rows' gradients added into a dense tensor). Ids outside
    the table raise InvalidArgumentError.

    >>> import tapeflow as tf
    >>> table = tf.constant([[0., 0.], [1., 1.], [2., 2.], [3., 3.]])
    >>> print(tf.nn.embedding_lookup(table, [[3, 1]]))
    tf.Tensor(
    [[[3. 3.]
      [1. 1.]]], shape=(1, 2, 2), dtype=float32)
    >>> shards = [tf.constant([[0.], [2.]]), tf.constant([[1.], [3.]])]   # "mod": 0 2 | 1 3
    >>> print(tf.nn.embedding_lookup(shards, [2, 3, 0]))
    tf.Tensor(
    [[2.]
     [3.]
     [0.]], shape=(3, 1), dtype=float32)
    """
    if _any_composite(ids):
        return _dispatch(embedding_lookup, params, ids, partition_strategy, name,
                         validate_indices, max_norm)
    if partition_strategy not in ("mod", "div"):
        raise InvalidArgumentError(f"embedding_lookup: partition_strategy must be 'mod' or "
                                   f"'div', got {partition_strategy!r}", op="embedding_lookup")
    shards = list(params) if isinstance(params, (list, tuple)) else [params]
    if not shards:
        raise InvalidArgumentError("embedding_lookup: params is an empty list; pass a tensor "
                                   "or a list of shards", op="embedding_lookup")
    shards = [p if isinstance(p, (Tensor, Variable)) else convert_to_tensor(p) for p in shards]
    ids = ids if isinstance(ids, Tensor) else convert_to_tensor(ids)
    if len(shards) == 1:
        out = _gather(shards[0], ids)
    else:
        tail = tuple(shards[0].shape[1:])
        bad = [tuple(p.shape) for p in shards if tuple(p.shape[1:]) != tail or p.ndim == 0]
        if bad:
            raise InvalidArgumentError(
                f"embedding_lookup: the shards must agree on every dimension but the first, "
                f"got shapes {[tuple(p.shape) for p in shards]}", op="embedding_lookup",
                device=shards[0].device)
        table = _concat([p.read_value() if isinstance(p, Variable) else p for p in shards], 0)
        if partition_strategy == "mod":
            ids = _gather(_mod_rows(shards, shards[0].device), ids)
        out = _gather(table, ids)
    if max_norm is not None:
        out = _clip_by_norm(out, max_norm, axes=list(range(ids.ndim, out.ndim)) or None)
    return out



# --- losses under a distribution strategy (tf.nn.compute_average_loss) ------------------

#: functions ``() -> int``: the number of replicas in sync where the caller runs
#: (``tf.distribute`` adds one; it raises in cross-replica context); none: one replica
replicas_in_sync_hooks: list = []


def _replicas_in_sync():
    for hook in replicas_in_sync_hooks:
        return int(hook())
    return 1


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """The sum of ``per_example_loss`` (times ``sample_weight``) divided by the global
    batch size: the per-replica loss whose gradients, summed over the replicas of a
    ``tf.distribute`` strategy, are the gradients of the mean over the whole batch.
    ``global_batch_size`` defaults to this replica's batch size (``shape[0]``) times the
    number of replicas in sync (0 gives 0, not NaN).

    >>> import tapeflow as tf
    >>> print(tf.nn.compute_average_loss([1.0, 2.0, 3.0], global_batch_size=6))
    tf.Tensor(1.0, shape=(), dtype=float32)
    >>> print(tf.nn.compute_average_loss([1.0, 3.0]))
    tf.Tensor(2.0, shape=(), dtype=float32)
    """
    loss = _t(per_example_loss)
    if sample_weight is not None:
        loss = _m.multiply(loss, _m.cast(_t(sample_weight), loss.dtype))
    if global_batch_size is None:
        n = int(loss.shape[0]) if loss.ndim else 1
        global_batch_size = n * _replicas_in_sync()
    elif (isinstance(global_batch_size, (Tensor, Variable))
          and not global_batch_size.dtype.is_integer):
        raise InvalidArgumentError(
            f"compute_average_loss: global_batch_size must be an integer, got a "
            f"{global_batch_size.dtype.name} tensor", op="compute_average_loss")
    total = _red.reduce_sum(loss)
    if isinstance(global_batch_size, (int, np.integer)):
        if global_batch_size == 0:
            return _m.multiply(total, 0)
        return _m.divide(total, _m.cast(_t(int(global_batch_size)), loss.dtype))
    gbs = _m.cast(_t(global_batch_size), loss.dtype)
    return where(_m.equal(gbs, 0), _m.multiply(total, 0), _m.divide(total, gbs))


def scale_regularization_loss(regularization_loss):
    """The sum of ``regularization_loss`` divided by the number of replicas in sync, so
    the replicas' gradients sum to the regularizer's once.

    >>> import tapeflow as tf
    >>> print(tf.nn.scale_regularization_loss([0.5, 0.25]))
    tf.Tensor(0.75, shape=(), dtype=float32)
    """
    total = _red.reduce_sum(_t(regularization_loss))
    n = _replicas_in_sync()
    return total if n == 1 else _m.divide(total, _m.cast(_t(n), total.dtype))


__all__ += ["compute_average_loss", "scale_regularization_loss"]
