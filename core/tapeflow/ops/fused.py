"""Fused ops: what would be several ops as one op, one kernel -- a 2-d convolution with
its bias and activation (TensorFlow's ``_FusedConv2D``, docs/fused-ops.md), and each
optimizer's update of a variable and its slots (TensorFlow's ``ResourceApplyAdam``
family, below). Their kernels are :mod:`tapeflow.kernels.nn_fused` and
:mod:`tapeflow.kernels.optim`.

``_FusedConv2D(input, filter, bias)`` computes ``act(conv2d(input, filter) + bias)``
with the bias along the channel axis. Its attrs are Conv2D's (``strides``,
``padding``, ``data_format``, ``dilations``) and TensorFlow's: ``fused_ops``
(``("BiasAdd",)`` or ``("BiasAdd", act)``, ``act`` one of :data:`ACTIVATIONS`),
``num_args`` (1: the bias) and ``leakyrelu_alpha``. A backend without a kernel for it
runs the unfused ops (the op's ``composite``).

Its gradient is the unfused one: ``dz = act'(z) * dy`` then Conv2D's and BiasAdd's
rules on ``dz``. ``act'`` is read from the op's output ``y`` where it determines it
(Relu, Relu6, Elu, LeakyRelu with ``alpha >= 0``: ``ReluGrad(dy, y)`` ...); Gelu and a
negative ``alpha`` need the pre-activation ``z``, which the gradient recomputes (one
Conv2D and BiasAdd more in the backward pass, no second output kept alive).

``keras.layers.Conv2D`` with a bias and one of these activations calls it, and the
``tf.function`` pass ``conv`` (:func:`tapeflow.tracing.graph_fusion.fuse_conv`) forms
it from the unfused ops.

>>> import tapeflow as tf
>>> from tapeflow.ops.fused import fused_conv2d
>>> x = tf.ones([1, 3, 3, 1])
>>> y = fused_conv2d(x, tf.ones([2, 2, 1, 1]), [-5.0], padding="VALID", activation="Relu")
>>> print(y[0, :, :, 0])
tf.Tensor(
[[0. 0.]
 [0. 0.]], shape=(2, 2), dtype=float32)

The fused optimizer updates: one op per optimizer and variable, used by
``Optimizer.apply_gradients`` (:mod:`tapeflow.train.optimizers`) on every device that
has their kernel.

Each op takes the variable's value, its slots' values, the gradient and the step's
coefficients (0-d tensors of the variable's dtype), and returns the new variable and
slots in the order it took them; the hyperparameters fixed for an optimizer
(``beta1``, ``momentum``...) are attrs. The ops have no gradient. Their kernels
(:class:`tapeflow.kernels.optim.OptimKernels`) also take ``inplace``: True only when the
optimizer has checked, under the Variables' locks, that nobody else can see the
buffers (docs/decisions.md, "Fused optimizer updates"); called as an op the update is
functional and the inputs are left unchanged.

>>> import tapeflow as tf
>>> from tapeflow.ops import fused
>>> var, g, lr = tf.constant([1.0, 2.0]), tf.constant([2.0, 2.0]), tf.constant(0.5)
>>> print(fused.APPLY_GRADIENT_DESCENT(var, g, lr))
tf.Tensor([0. 1.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

import math as _pymath

from ..runtime.dispatch import convert_like, convert_to_tensor, execute
from ..errors import InvalidArgumentError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .array_creation import zeros_like as _zeros_like
from . import math as _m
from . import nn as _nn
from . import reductions as _red
from .library import defop, real_number
from . import batching as _b

__all__ = ["fused_conv2d", "ACTIVATIONS", "APPLY_GRADIENT_DESCENT", "APPLY_MOMENTUM", "APPLY_ADAM",
           "APPLY_RMS_PROP", "APPLY_CENTERED_RMS_PROP", "APPLY_KERAS_RMS_PROP",
           "APPLY_KERAS_CENTERED_RMS_PROP", "APPLY_ADAGRAD"]

#: the activations ``_FusedConv2D`` takes (``fused_ops[1]``), TensorFlow's names
#: (``GeluExact``/``GeluApproximate``: tapeflow's ``gelu(x, approximate=...)``)
ACTIVATIONS = ("Relu", "Relu6", "LeakyRelu", "Elu", "GeluExact", "GeluApproximate")

#: lower-case spellings accepted by :func:`fused_conv2d`
_ALIASES = {"relu": "Relu", "relu6": "Relu6", "leaky_relu": "LeakyRelu", "elu": "Elu",
            "gelu": "GeluExact", "gelu_exact": "GeluExact",
            "gelu_approximate": "GeluApproximate"}

_SQRT_2_PI = _pymath.sqrt(2.0 / _pymath.pi)


def _conv_attrs(attrs):
    return {k: attrs[k] for k in ("strides", "padding", "data_format", "dilations")}


def activation_of(attrs):
    """The activation of a ``_FusedConv2D``'s attrs (``None``: bias only)."""
    ops = attrs["fused_ops"]
    return ops[1] if len(ops) > 1 else None


def _check(op, tensors, attrs, device):
    x, w, b = tensors
    ops = attrs["fused_ops"]
    if (not isinstance(ops, (tuple, list)) or not 1 <= len(ops) <= 2 or ops[0] != "BiasAdd"
            or (len(ops) == 2 and ops[1] not in ACTIVATIONS)):
        raise InvalidArgumentError(
            f"_FusedConv2D: fused_ops must be ('BiasAdd',) or ('BiasAdd', act) with act one "
            f"of {list(ACTIVATIONS)}; got {ops!r}")
    if attrs["num_args"] != 1:
        raise InvalidArgumentError(
            f"_FusedConv2D: num_args must be 1 (the bias), got {attrs['num_args']}")
    if x.dtype != w.dtype or b.dtype != x.dtype or not x.dtype.is_floating:
        raise InvalidArgumentError(
            f"_FusedConv2D: input, filter and bias must share one floating-point dtype; got "
            f"{x.dtype.name}, {w.dtype.name}, {b.dtype.name}")
    o = w._data.shape[3] if len(w._data.shape) == 4 else None
    if len(b._data.shape) != 1 or b._data.shape[0] != o:
        raise InvalidArgumentError(
            f"_FusedConv2D: the bias must be 1-d with one value per output channel (filter "
            f"shape {list(w._data.shape)}), got shape {list(b._data.shape)}")


# --- the activation's derivative ------------------------------------------------------

def _pre_activation(x, w, b, attrs):
    """``z = conv2d(x, w) + b``, recomputed (Gelu's and a negative alpha's gradient)."""
    z = execute(_nn._CONV2D, (x, w), _conv_attrs(attrs))
    return execute(_nn._BIAS_ADD, (z, b), {"data_format": attrs["data_format"]})


def _gelu_derivative(z, approximate):
    """``d gelu(z) / dz`` with tapeflow ops (differentiable again)."""
    if approximate:
        z2 = _m.multiply(z, z)
        inner = _m.multiply(_m.multiply(z, _m.add(_m.multiply(z2, 0.044715), 1.0)), _SQRT_2_PI)
        t = _m.tanh(inner)
        dinner = _m.multiply(_m.add(_m.multiply(z2, 3 * 0.044715), 1.0), _SQRT_2_PI)
        sech2 = _m.subtract(1.0, _m.multiply(t, t))
        return _m.add(_m.multiply(_m.add(t, 1.0), 0.5),
                      _m.multiply(_m.multiply(_m.multiply(z, 0.5), sech2), dinner))
    cdf = _m.multiply(_m.add(_m.erf(_m.multiply(z, 1.0 / _pymath.sqrt(2.0))), 1.0), 0.5)
    pdf = _m.multiply(_m.exp(_m.multiply(_m.multiply(z, z), -0.5)),
                      1.0 / _pymath.sqrt(2.0 * _pymath.pi))
    return _m.add(cdf, _m.multiply(z, pdf))


def activation_backprop(attrs, dy, y, inputs):
    """``act'(z) * dy`` for a ``_FusedConv2D`` with ``attrs``, output ``y`` and
    ``inputs`` ``(x, w, b)`` (used for the recomputed ``z`` where ``y`` does not
    determine ``act'(z)``). Also the JVP's rule: the activation's Jacobian is diagonal."""
    act = activation_of(attrs)
    if act is None:
        return dy
    if act == "Relu":
        return execute(_nn._RELU_GRAD, (dy, y))
    if act == "Relu6":
        return execute(_nn._RELU6_GRAD, (dy, y))
    if act == "Elu":
        return execute(_nn._ELU_GRAD, (dy, y))
    alpha = attrs["leakyrelu_alpha"]
    if act == "LeakyRelu" and alpha >= 0:
        # alpha > 0: y has z's sign; alpha == 0: y == 0 where z <= 0, and the slope is 0
        return execute(_nn._LEAKY_GRAD, (dy, y), {"alpha": float(alpha)})
    z = _pre_activation(*inputs, attrs)
    if act == "LeakyRelu":
        return execute(_nn._LEAKY_GRAD, (dy, z), {"alpha": float(alpha)})
    return _m.multiply(dy, _gelu_derivative(z, act == "GeluApproximate"))


def _fused_grad(ctx, dy):
    x, w, b = ctx.inputs
    a = _conv_attrs(ctx.attrs)
    dz = activation_backprop(ctx.attrs, dy, ctx.outputs[0], ctx.inputs)
    dx = execute(_nn._CONV_BP_INPUT, (w, dz), {"input_sizes": tuple(x._data.shape), **a}) \
        if _nn._need(ctx, 0) else None
    dw = execute(_nn._CONV_BP_FILTER, (x, dz), {"filter_sizes": tuple(w._data.shape), **a}) \
        if _nn._need(ctx, 1) else None
    db = None
    if _nn._need(ctx, 2):
        c = 3 if a["data_format"] == "NHWC" else 1
        db = _red.reduce_sum(dz, axis=tuple(i for i in range(4) if i != c))
    return dx, dw, db


def _fused_jvp(ctx, tx, tw, tb):
    x, w, b = ctx.inputs
    a = _conv_attrs(ctx.attrs)
    tz = None
    if tx is not None:
        tz = execute(_nn._CONV2D, (tx, w), a)
    if tw is not None:
        t = execute(_nn._CONV2D, (x, tw), a)
        tz = t if tz is None else _m.add(tz, t)
    if tb is not None:
        tz = execute(_nn._BIAS_ADD, (tz if tz is not None else _zeros_like(ctx.outputs[0]),
                                     tb), {"data_format": a["data_format"]})
    if tz is None:
        return None
    return activation_backprop(ctx.attrs, tz, ctx.outputs[0], ctx.inputs)


def _fused_batch(ctx, x, w, b):
    """(tf.vectorized_map) the batch joins the images' batch; a filter or bias per
    example is not covered (NotImplemented: one call per example)."""
    if ctx.batched[1] or ctx.batched[2]:
        return NotImplemented
    y = execute(ctx.op, (_b.batch_fold(x), w, b), ctx.attrs)
    return _b.batch_unfold(y, ctx.size)


def unfused(x, w, b, **attrs):
    """The unfused composition ``act(bias_add(conv2d(x, w), b))`` (the op's composite:
    what a backend without a ``_FusedConv2D`` kernel runs, and the reference)."""
    z = _pre_activation(x, w, b, attrs)
    act = activation_of(attrs)
    if act is None:
        return z
    if act == "Relu":
        return execute(_nn._RELU, (z,))
    if act == "Relu6":
        return execute(_nn._RELU6, (z,))
    if act == "Elu":
        return execute(_nn._ELU, (z,))
    if act == "LeakyRelu":
        return execute(_nn._LEAKY, (z,), {"alpha": float(attrs["leakyrelu_alpha"])})
    if act == "GeluApproximate":
        inner = _m.multiply(_m.add(z, _m.multiply(_m.pow(z, 3.0), 0.044715)), _SQRT_2_PI)
        return _m.multiply(_m.multiply(z, 0.5), _m.add(_m.tanh(inner), 1.0))
    return _m.multiply(_m.multiply(z, 0.5),
                       _m.add(_m.erf(_m.multiply(z, 1.0 / _pymath.sqrt(2.0))), 1.0))


FUSED_CONV2D = defop(
    "_FusedConv2D", inputs=("input", "filter", "bias"),
    attrs={**_nn._CONV_ATTRS, "fused_ops": ("BiasAdd",), "num_args": 1,
           "leakyrelu_alpha": 0.2},
    attr_types={"fused_ops": "any", "num_args": "int", "leakyrelu_alpha": "float"},
    grad=_fused_grad, jvp=_fused_jvp, batch=_fused_batch, check=_check, composite=unfused,
    dtype_rule="none")


def _like_dtype(v, x):
    """Python and NumPy values take the input's dtype (as ``bias_add``'s bias does)."""
    return None if isinstance(v, (Tensor, Variable)) else x.dtype


def _activation_name(activation):
    if activation is None:
        return None
    name = _ALIASES.get(activation, activation) if isinstance(activation, str) else None
    if name not in ACTIVATIONS:
        raise InvalidArgumentError(
            f"fused_conv2d: activation must be None or one of {list(ACTIVATIONS)} (or "
            f"{sorted(_ALIASES)}), got {activation!r}", op="_FusedConv2D")
    return name


@_nn._on_device
def fused_conv2d(input, filters, bias, strides=1, padding="VALID", data_format="NHWC",
                 dilations=None, activation=None, leakyrelu_alpha=0.2, name=None):
    """``activation(bias_add(conv2d(input, filters, ...), bias))`` as one op
    (``_FusedConv2D``): the arguments of :func:`tapeflow.nn.conv2d`, a 1-d ``bias``
    (one value per output channel) and ``activation`` (None, ``"Relu"``, ``"Relu6"``,
    ``"LeakyRelu"`` with ``leakyrelu_alpha``, ``"Elu"``, ``"GeluExact"``,
    ``"GeluApproximate"``, or their lower-case names; ``"gelu"`` is the exact one)."""
    x = input if type(input) is Tensor else convert_to_tensor(input)
    w = convert_like(filters, x, dtype=_like_dtype(filters, x))
    b = convert_like(bias, x, dtype=_like_dtype(bias, x))
    xs, ws = list(x._data.shape), list(w._data.shape)
    attrs = _nn._conv_attrs("_FusedConv2D", xs, ws, strides, padding, data_format, dilations)
    _nn._check_out("_FusedConv2D", xs, attrs["data_format"], ws[0], ws[1], attrs["strides"],
                   attrs["dilations"], attrs["padding"], "filter shape", ws)
    act = _activation_name(activation)
    attrs["fused_ops"] = ("BiasAdd",) if act is None else ("BiasAdd", act)
    attrs["num_args"] = 1
    alpha = real_number(leakyrelu_alpha, "fused_conv2d: leakyrelu_alpha", "_FusedConv2D", x)
    attrs["leakyrelu_alpha"] = float(alpha)
    return execute(FUSED_CONV2D, (x, w, b), attrs)


# --- the fused optimizer updates (Optimizer.apply_gradients) ---------------------------

_FLOAT_ATTRS = {"beta1": "float", "beta2": "float", "epsilon": "float", "rho": "float",
                "momentum": "float", "use_nesterov": "bool", "inplace": "bool"}


def _check_update(op, tensors, attrs, device):
    """The variable, its slots and the gradient share one shape; the coefficients are
    scalars; all of one floating dtype."""
    n_arrays = len(op.inputs) - _N_SCALARS[op.name]
    var = tensors[0]
    for name, t in zip(op.inputs, tensors):
        if t.dtype != var.dtype or not var.dtype.is_floating:
            raise InvalidArgumentError(
                f"{op.name}: input '{name}' is {t.dtype.name}, the variable "
                f"{var.dtype.name}: every input must have the variable's floating-point dtype")
    for name, t in zip(op.inputs[:n_arrays], tensors[:n_arrays]):
        if t.shape != var.shape:
            raise InvalidArgumentError(
                f"{op.name}: input '{name}' has shape {tuple(t.shape)}, the variable "
                f"{tuple(var.shape)}: the slots and the gradient must have the variable's shape")
    for name, t in zip(op.inputs[n_arrays:], tensors[n_arrays:]):
        if len(t.shape):
            raise InvalidArgumentError(
                f"{op.name}: input '{name}' must be a scalar (0-d), got shape {tuple(t.shape)}")


def _update_batch(ctx, *inputs):
    """``tf.vectorized_map``: the update is elementwise in the variable, slots and
    gradient (an unbatched one is broadcast to the batch); a coefficient per example
    is not covered (NotImplemented: one update per example)."""
    n = len(ctx.op.inputs) - _N_SCALARS[ctx.op.name]
    if any(ctx.batched[n:]):
        return NotImplemented
    shape = next(x.shape for x, b in zip(inputs, ctx.batched) if b)
    arrays = [x if b else _red.broadcast_to(x, shape) for x, b in zip(inputs[:n], ctx.batched)]
    return execute(ctx.op, (*arrays, *inputs[n:]), ctx.attrs)


def _update_op(name, inputs, n_scalars, attrs):
    _N_SCALARS[name] = n_scalars
    attrs = dict(attrs, inplace=False)
    return defop(name, inputs=inputs, attrs=attrs, num_outputs=len(inputs) - n_scalars - 1,
                 differentiable=False, check=_check_update, dtype_rule="none", batch=_update_batch,
                 attr_types={a: _FLOAT_ATTRS[a] for a in attrs})


_N_SCALARS: dict = {}

#: ``var - grad * lr``
APPLY_GRADIENT_DESCENT = _update_op("ApplyGradientDescent", ("var", "grad", "lr"), 1, {})
#: ``(var, accum)`` of Momentum (``mom_lr``: momentum * lr, used by Nesterov)
APPLY_MOMENTUM = _update_op("ApplyMomentum", ("var", "accum", "grad", "lr", "mom_lr"), 2,
                            {"momentum": 0.0, "use_nesterov": False})
#: ``(var, m, v)`` of Adam (``lr_t``: the bias-corrected learning rate)
APPLY_ADAM = _update_op("ApplyAdam", ("var", "m", "v", "grad", "lr_t"), 1,
                        {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8})
#: ``(var, ms, mom)`` of TensorFlow 1's RMSProp
APPLY_RMS_PROP = _update_op("ApplyRMSProp", ("var", "ms", "mom", "grad", "lr"), 1,
                            {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10})
#: ``(var, mg, ms, mom)`` of the centered RMSProp
APPLY_CENTERED_RMS_PROP = _update_op("ApplyCenteredRMSProp",
                                     ("var", "mg", "ms", "mom", "grad", "lr"), 1,
                                     {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10})
#: ``(var, ms)`` of Keras's RMSprop without momentum (epsilon outside the root)
APPLY_KERAS_RMS_PROP = _update_op("ApplyKerasRMSProp", ("var", "ms", "grad", "lr"), 1,
                                  {"rho": 0.9, "epsilon": 1e-7})
#: ``(var, ms, mg)`` of Keras's centered RMSprop without momentum
APPLY_KERAS_CENTERED_RMS_PROP = _update_op("ApplyKerasCenteredRMSProp",
                                           ("var", "ms", "mg", "grad", "lr"), 1,
                                           {"rho": 0.9, "epsilon": 1e-7})
#: ``(var, accum)`` of Adagrad
APPLY_ADAGRAD = _update_op("ApplyAdagrad", ("var", "accum", "grad", "lr"), 1, {})
