"""Fused ops: what would be several ops as one op, one kernel -- a 2-d convolution with
its bias and activation (TensorFlow's ``_FusedConv2D``, docs/fused-ops.md), each
optimizer's update of a variable and its slots (TensorFlow's ``ResourceApplyAdam``
family, below), and the recurrent layers' LSTM and GRU over a whole sequence
(``FusedLSTM``, ``FusedGRU`` and their backpropagation through time, at the end:
:func:`lstm_cell`, :func:`lstm_sequence`, :func:`gru_cell`, :func:`gru_sequence`).
Their kernels are :mod:`tapeflow.kernels.nn_fused` and :mod:`tapeflow.kernels.optim`.

Long file: the fused ops share their declaration pattern (a ``defop`` with a composite
of the unfused ops, an analytic gradient, JVP and batching rule) and docs/fused-ops.md.

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

import numpy as np

from ..runtime.dispatch import constant, convert_like, convert_to_tensor, execute
from ..errors import InvalidArgumentError, NotDifferentiableError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .array_creation import zeros_like as _zeros_like
from . import math as _m
from . import nn as _nn
from . import reductions as _red
from . import array_gather as _ag
from . import array_shape as _ash
from . import linalg as _la
from .library import defop, flag, real_number
from . import batching as _b

__all__ = ["fused_conv2d", "lstm_cell", "lstm_sequence", "gru_cell", "gru_sequence",
           "ACTIVATIONS", "APPLY_GRADIENT_DESCENT", "APPLY_MOMENTUM", "APPLY_ADAM",
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


# --- fused recurrent ops (issue 45): LSTM and GRU sequences ---------------------------
#
# One op runs a whole sequence (``FusedLSTM``, ``FusedGRU``: the input projection of all
# steps as one GEMM, then per step one GEMM and one fused elementwise step); its
# gradient is one op too (``FusedLSTMGrad``, ``FusedGRUGrad``: backpropagation through
# time, one GEMM per step, the weight gradients as one GEMM over all steps). The ops
# keep, as hidden outputs, what the backward pass needs (the gate activations and, for
# the LSTM, the cell states). Inside the ops the gates are in a canonical order
# (``"ifoc"``: the three sigmoid gates, then the candidate; GRU ``"zrh"``); the
# ``gate_order`` attr says how the user's kernel columns are laid out.

#: the gate order of the hidden ``gates`` outputs (and of the kernels' work arrays)
LSTM_CANONICAL, GRU_CANONICAL = "ifoc", "zrh"


def gate_perm(order, canonical):
    """``idx`` with ``canonical``'s k-th gate = ``order``'s block ``idx[k]``."""
    return tuple(order.index(g) for g in canonical)


def _blocks(w, idx, n):
    """``w``'s last-axis blocks of ``n`` columns in the order ``idx`` (tapeflow ops)."""
    if idx == tuple(range(len(idx))):
        return w
    return _ag.concat([w[..., k * n:(k + 1) * n] for k in idx], axis=-1)


def _unblocks(w, idx, n):
    """The inverse of :func:`_blocks`."""
    inv = tuple(idx.index(k) for k in range(len(idx)))
    return _blocks(w, inv, n)


def _steps(t, reverse):
    return range(t - 1, -1, -1) if reverse else range(t)


# The composites take leading batch dimensions too (``x [..., T, B, I]``, weights
# ``[..., I, kH]``...): the batching rules run them on per-example weights.

def _at(a, t):
    """Step ``t`` of ``a [..., T, B, N]``."""
    return a[..., t, :, :]


def _prev_states(outs, h0, reverse):
    """The state each step started from: ``[h0, outs[0..T-2]]`` (``outs[1..], h0``
    reversed), as one [..., T, B, H] tensor."""
    if int(outs.shape[-3]) == 0:
        return outs
    h0 = _ash.expand_dims(h0, -3)
    if reverse:
        return _ag.concat([outs[..., 1:, :, :], h0], axis=-3)
    return _ag.concat([h0, outs[..., :-1, :, :]], axis=-3)


def _feature_major(a):
    """``[..., T, B, N]`` <-> ``[..., T, N, B]``: the layout of the hidden outputs (the
    kernels keep each gate a contiguous block of rows)."""
    r = len(a.shape)
    return _ash.transpose(a, tuple(range(r - 2)) + (r - 1, r - 2))


def _flat(x):
    s = tuple(x.shape)
    return _ash.reshape(x, s[:-3] + (s[-3] * s[-2], s[-1]))


def _time_gemm(x, w):
    """``x [..., T, B, I] @ w [..., I, N]`` as one GEMM -> [..., T, B, N]."""
    s = tuple(x.shape)
    return _ash.reshape(_la.matmul(_flat(x), w), s[:-1] + (int(w.shape[-1]),))


def _plus_bias(xw, b):
    """``xw [..., T, B, N] + b [..., N]``."""
    s = tuple(b.shape)
    return _m.add(xw, _ash.reshape(b, s[:-1] + (1, 1, s[-1])))


def _time_stack(parts):
    return _ag.stack(parts, axis=-3)


def lstm_unfused(x, h0, c0, kernel, recurrent_kernel, bias, *, forget_bias=0.0,
                 gate_order="ifco", reverse=False):
    """``FusedLSTM``'s composite: the sequence with tapeflow ops, step by step (what a
    backend without the op's kernel runs, and the reference). Returns ``(outputs,
    h_last, c_last, gates, cell_states)``, ``gates`` activated, in ``"ifoc"`` order; the
    hidden two feature-major, ``[T, 4H, B]`` and ``[T, H, B]``."""
    n = int(h0.shape[-1])
    idx = gate_perm(gate_order, LSTM_CANONICAL)
    w, u, b = _blocks(kernel, idx, n), _blocks(recurrent_kernel, idx, n), _blocks(bias, idx, n)
    xw = _plus_bias(_time_gemm(x, w), b)
    t_len = int(x.shape[-3])
    h, c = h0, c0
    outs, cs, gates = [None] * t_len, [None] * t_len, [None] * t_len
    for t in _steps(t_len, reverse):
        z = _m.add(_at(xw, t), _la.matmul(h, u))
        i = _m.sigmoid(z[..., :n])
        f = z[..., n:2 * n]
        f = _m.sigmoid(_m.add(f, forget_bias) if forget_bias else f)
        o = _m.sigmoid(z[..., 2 * n:3 * n])
        g = _m.tanh(z[..., 3 * n:])
        c = _m.add(_m.multiply(f, c), _m.multiply(i, g))
        h = _m.multiply(o, _m.tanh(c))
        outs[t], cs[t], gates[t] = h, c, _ag.concat([i, f, o, g], axis=-1)
    if not t_len:
        e = _zeros_like(xw[..., :n])
        return e, h0, c0, _feature_major(_zeros_like(xw)), _feature_major(e)
    return (_time_stack(outs), h, c, _feature_major(_time_stack(gates)),
            _feature_major(_time_stack(cs)))


def _lstm_cell_backprop(dh, dc, gate, c_new, c_prev, n):
    """One step's ``(dz, dc_prev)`` from the step's ``dh``, ``dc`` (tapeflow ops)."""
    i, f, o, g = gate[..., :n], gate[..., n:2 * n], gate[..., 2 * n:3 * n], gate[..., 3 * n:]
    tc = _m.tanh(c_new)
    do = _m.multiply(dh, tc)
    dc = _m.add(dc, _m.multiply(_m.multiply(dh, o), _m.subtract(1.0, _m.multiply(tc, tc))))
    s = gate[..., :3 * n]
    ds = _ag.concat([_m.multiply(dc, g), _m.multiply(dc, c_prev), do], axis=-1)
    dzs = _m.multiply(ds, _m.multiply(s, _m.subtract(1.0, s)))
    dzg = _m.multiply(_m.multiply(dc, i), _m.subtract(1.0, _m.multiply(g, g)))
    return _ag.concat([dzs, dzg], axis=-1), _m.multiply(dc, f)


def _weight_grads(x, h0, outputs, dxs, dhs, w, reverse, idx, n):
    """``dx, dkernel, drecurrent_kernel, dbias(, drecurrent_bias)`` from each step's
    ``dz`` (``dhs``: the GRU's recurrent side, else None), one GEMM each over all steps."""
    dxz = _flat(_time_stack(dxs))
    dhz = dxz if dhs is None else _flat(_time_stack(dhs))
    dx = _ash.reshape(_la.matmul(dxz, w, transpose_b=True), tuple(x.shape))
    dw = _la.matmul(_flat(x), dxz, transpose_a=True)
    du = _la.matmul(_flat(_prev_states(outputs, h0, reverse)), dhz, transpose_a=True)
    out = [dx, _unblocks(dw, idx, n), _unblocks(du, idx, n),
           _unblocks(_red.reduce_sum(dxz, axis=-2), idx, n)]
    if dhs is not None:
        out.append(_unblocks(_red.reduce_sum(dhz, axis=-2), idx, n))
    return out


def lstm_grad_unfused(x, h0, c0, kernel, recurrent_kernel, outputs, cell_states, gates,
                      d_outputs, d_h, d_c, *, forget_bias=0.0, gate_order="ifco",
                      reverse=False):
    """``FusedLSTMGrad``'s composite (tapeflow ops): backpropagation through time.
    Returns ``(dx, dh0, dc0, dkernel, drecurrent_kernel, dbias)``."""
    n = int(h0.shape[-1])
    idx = gate_perm(gate_order, LSTM_CANONICAL)
    w, u = _blocks(kernel, idx, n), _blocks(recurrent_kernel, idx, n)
    t_len = int(x.shape[-3])
    gates, cell_states = _feature_major(gates), _feature_major(cell_states)
    dzs = [None] * t_len
    dh, dc = d_h, d_c
    for t in _steps(t_len, not reverse):
        p = t + 1 if reverse else t - 1
        c_prev = _at(cell_states, p) if 0 <= p < t_len else c0
        dh = _m.add(dh, _at(d_outputs, t))
        dzs[t], dc = _lstm_cell_backprop(dh, dc, _at(gates, t), _at(cell_states, t), c_prev, n)
        dh = _la.matmul(dzs[t], u, transpose_b=True)
    if not t_len:
        return (_zeros_like(x), dh, dc, _zeros_like(kernel), _zeros_like(recurrent_kernel),
                _zeros_like(kernel[..., 0, :]))
    dx, dw, du, db = _weight_grads(x, h0, outputs, dzs, None, w, reverse, idx, n)
    return dx, dh, dc, dw, du, db


def gru_unfused(x, h0, kernel, recurrent_kernel, bias, recurrent_bias, *, gate_order="zrh",
                reverse=False):
    """``FusedGRU``'s composite (tapeflow ops; ``reset_after``: the reset gate scales
    ``h @ U_h + b_h``). Returns ``(outputs, h_last, gates, hn)``: ``gates`` the activated
    ``z, r, n`` in ``"zrh"`` order, ``hn`` each step's ``h @ U_h + recurrent_bias_h``, both
    feature-major (``[T, 3H, B]``, ``[T, H, B]``)."""
    n = int(h0.shape[-1])
    idx = gate_perm(gate_order, GRU_CANONICAL)
    w, u = _blocks(kernel, idx, n), _blocks(recurrent_kernel, idx, n)
    b, rb = _blocks(bias, idx, n), _blocks(recurrent_bias, idx, n)
    rb = _ash.expand_dims(rb, -2)
    xw = _plus_bias(_time_gemm(x, w), b)
    t_len = int(x.shape[-3])
    h = h0
    outs, gates, hns = [None] * t_len, [None] * t_len, [None] * t_len
    for t in _steps(t_len, reverse):
        hz = _m.add(_la.matmul(h, u), rb)
        xz = _at(xw, t)
        zr = _m.sigmoid(_m.add(xz[..., :2 * n], hz[..., :2 * n]))
        z, r = zr[..., :n], zr[..., n:]
        hn = hz[..., 2 * n:]
        cand = _m.tanh(_m.add(xz[..., 2 * n:], _m.multiply(r, hn)))
        h = _m.add(cand, _m.multiply(z, _m.subtract(h, cand)))
        outs[t], gates[t], hns[t] = h, _ag.concat([zr, cand], axis=-1), hn
    if not t_len:
        e = _zeros_like(xw[..., :n])
        return e, h0, _feature_major(_zeros_like(xw)), _feature_major(e)
    return (_time_stack(outs), h, _feature_major(_time_stack(gates)),
            _feature_major(_time_stack(hns)))


def _gru_cell_backprop(dh, gate, hn, h_prev, n):
    """One step's ``(dxz, dhz, dh_prev without the recurrent GEMM)`` (tapeflow ops)."""
    z, r, cand = gate[..., :n], gate[..., n:2 * n], gate[..., 2 * n:]
    dzz = _m.multiply(_m.multiply(dh, _m.subtract(h_prev, cand)),
                      _m.multiply(z, _m.subtract(1.0, z)))
    dnn = _m.multiply(_m.multiply(dh, _m.subtract(1.0, z)),
                      _m.subtract(1.0, _m.multiply(cand, cand)))
    drr = _m.multiply(_m.multiply(dnn, hn), _m.multiply(r, _m.subtract(1.0, r)))
    dxz = _ag.concat([dzz, drr, dnn], axis=-1)
    dhz = _ag.concat([dzz, drr, _m.multiply(dnn, r)], axis=-1)
    return dxz, dhz, _m.multiply(dh, z)


def gru_grad_unfused(x, h0, kernel, recurrent_kernel, outputs, gates, hn, d_outputs, d_h, *,
                     gate_order="zrh", reverse=False):
    """``FusedGRUGrad``'s composite (tapeflow ops). Returns ``(dx, dh0, dkernel,
    drecurrent_kernel, dbias, drecurrent_bias)``."""
    n = int(h0.shape[-1])
    idx = gate_perm(gate_order, GRU_CANONICAL)
    w, u = _blocks(kernel, idx, n), _blocks(recurrent_kernel, idx, n)
    t_len = int(x.shape[-3])
    gates, hn = _feature_major(gates), _feature_major(hn)
    dxs, dhs = [None] * t_len, [None] * t_len
    dh = d_h
    for t in _steps(t_len, not reverse):
        p = t + 1 if reverse else t - 1
        h_prev = _at(outputs, p) if 0 <= p < t_len else h0
        dh = _m.add(dh, _at(d_outputs, t))
        dxs[t], dhs[t], dh_direct = _gru_cell_backprop(dh, _at(gates, t), _at(hn, t), h_prev,
                                                       n)
        dh = _m.add(dh_direct, _la.matmul(dhs[t], u, transpose_b=True))
    if not t_len:
        zb = _zeros_like(kernel[..., 0, :])
        return (_zeros_like(x), dh, _zeros_like(kernel), _zeros_like(recurrent_kernel), zb, zb)
    dx, dw, du, db, drb = _weight_grads(x, h0, outputs, dxs, dhs, w, reverse, idx, n)
    return dx, dh, dw, du, db, drb


# --- the ops: checks, gradients, batching ----------------------------------------------

#: op -> (public function, gates per unit, canonical gate order)
_RNN_INFO = {"FusedLSTM": ("lstm_sequence", 4, LSTM_CANONICAL),
             "FusedLSTMGrad": ("lstm_sequence's gradient", 4, LSTM_CANONICAL),
             "FusedGRU": ("gru_sequence", 3, GRU_CANONICAL),
             "FusedGRUGrad": ("gru_sequence's gradient", 3, GRU_CANONICAL)}


_DEFAULT_ORDER = {LSTM_CANONICAL: "ifco", GRU_CANONICAL: "zrh"}


def check_gate_order(order, canonical, op, fn, x=None):
    """Refuse a ``gate_order`` that is not a permutation of ``canonical``'s letters."""
    if not isinstance(order, str) or sorted(order) != sorted(canonical):
        default = _DEFAULT_ORDER[canonical]
        raise InvalidArgumentError(
            f"{fn}: gate_order must name each of the gates {', '.join(default)} once, in "
            f"the order of the kernel's column blocks (e.g. {default!r}); got {order!r}",
            op=op, device=getattr(x, "_device", None))


def _rnn_expected(t, b, i, h, k):
    """Each input's required shape, from x [T, B, I] and the state's [B, H]."""
    seq, state, gates, hidden = [t, b, h], [b, h], [t, k * h, b], [t, h, b]
    return {"x": [t, b, i], "h0": state, "c0": state, "kernel": [i, k * h],
            "recurrent_kernel": [h, k * h], "bias": [k * h], "recurrent_bias": [k * h],
            "outputs": seq, "cell_states": hidden, "gates": gates, "hn": hidden,
            "d_outputs": seq, "d_h": state, "d_c": state}


def _check_rnn(op, tensors, attrs, device):
    fn, k, canonical = _RNN_INFO[op.name]
    x = tensors[0]
    for name, t in zip(op.inputs, tensors):
        if t.dtype != x.dtype or not x.dtype.is_floating:
            raise InvalidArgumentError(
                f"{op.name} ({fn}): every input must have one floating-point dtype; got x "
                f"{x.dtype.name} and {name} {t.dtype.name}")
    check_gate_order(attrs["gate_order"], canonical, op.name, fn)
    shapes = {name: list(t.shape) for name, t in zip(op.inputs, tensors)}
    xs, hs = shapes["x"], shapes["h0"]
    if len(xs) != 3 or len(hs) != 2:
        raise InvalidArgumentError(
            f"{op.name} ({fn}): x must be 3-d [T, B, I] (time-major) and the initial state "
            f"2-d [B, H]; got x {xs} and h0 {hs}")
    want = _rnn_expected(*xs, hs[1], k)
    for name in op.inputs:
        if shapes[name] != want[name]:
            raise InvalidArgumentError(
                f"{op.name} ({fn}): {name} has shape {shapes[name]} but must be "
                f"{want[name]}: with x [T, B, I] = {xs} and h0 [B, H] = {hs}, the state is "
                f"[B, H], kernel [I, {k}H], recurrent_kernel [H, {k}H], the biases [{k}H]")


def _zero_if_none(g, like):
    return _zeros_like(like) if g is None else g


def _lstm_grad(ctx, d_out, d_h, d_c, d_gates, d_cs):
    # (the hidden outputs are saved for this rule: their gradients, zeros from the tape
    # since no public function returns them, are not used)
    x, h0, c0, w, u, _ = ctx.inputs
    outs, _, _, gates, cs = ctx.outputs
    return execute(FUSED_LSTM_GRAD, (x, h0, c0, w, u, outs, cs, gates,
                                     _zero_if_none(d_out, outs), _zero_if_none(d_h, h0),
                                     _zero_if_none(d_c, c0)), ctx.attrs)


def _gru_grad(ctx, d_out, d_h, d_gates, d_hn):
    x, h0, w, u, _, _ = ctx.inputs
    outs, _, gates, hn = ctx.outputs
    return execute(FUSED_GRU_GRAD, (x, h0, w, u, outs, gates, hn, _zero_if_none(d_out, outs),
                                    _zero_if_none(d_h, h0)), ctx.attrs)


def _no_second_order(ctx, *grads):
    raise NotDifferentiableError(
        f"{ctx.op.name}: second-order derivatives of the fused recurrent ops (a gradient of "
        "their gradient, or forward mode over it) are not implemented; differentiate the "
        "unfused step functions (tapeflow.ops.fused.lstm_unfused / gru_unfused) instead",
        op=ctx.op.name)


def _all_batched(ctx, inputs):
    return [x if b else _red.broadcast_to(x, (ctx.size,) + tuple(x.shape))
            for x, b in zip(inputs, ctx.batched)]


def _rnn_grad_batch(ctx, *inputs):
    """``tf.vectorized_map`` of the BPTT ops (per-example weight gradients: jacobians):
    the op's composite on the batched tensors, its matmuls batched over the examples."""
    return ctx.op.composite(*_all_batched(ctx, inputs), **ctx.attrs)


def _rnn_batch(ctx, *inputs):
    """``tf.vectorized_map``: with shared weights, the examples join the sequence's batch
    (x [N, T, B, I] -> [T, N*B, I], states [N, B, H] -> [N*B, H]: one op); with weights
    per example, the op's composite on the batched tensors (batched matmuls)."""
    n_state = 2 if ctx.op.name == "FusedLSTM" else 1
    if any(ctx.batched[1 + n_state:]):
        return _rnn_grad_batch(ctx, *inputs)
    size = ctx.size
    x = inputs[0] if ctx.batched[0] else _red.broadcast_to(inputs[0], (size,) + tuple(
        inputs[0].shape))
    s = tuple(x.shape)
    x = _ash.reshape(_ash.transpose(x, (1, 0, 2, 3)), (s[1], s[0] * s[2], s[3]))
    states = []
    for st, bat in zip(inputs[1:1 + n_state], ctx.batched[1:1 + n_state]):
        st = st if bat else _red.broadcast_to(st, (size,) + tuple(st.shape))
        states.append(_b.batch_fold(st))
    outs = execute(ctx.op, (x, *states, *inputs[1 + n_state:]), ctx.attrs)
    res = [_ash.transpose(_ash.reshape(outs[0], (s[1], size, s[2], int(outs[0].shape[-1]))),
                          (1, 0, 2, 3))]
    res += [_b.batch_unfold(o, size) for o in outs[1:1 + n_state]]
    for o in outs[1 + n_state:]:        # feature-major [T, m, N*B] -> [N, T, m, B]
        t, m, _ = tuple(o.shape)
        res.append(_ash.transpose(_ash.reshape(o, (t, m, size, s[2])), (2, 0, 1, 3)))
    return tuple(res)


def _tangents(ts, primals):
    """The tangents, zeros for those without one (None when none has one)."""
    if all(t is None for t in ts):
        return None
    return [_zeros_like(p) if t is None else t for t, p in zip(ts, primals)]


def _lstm_jvp(ctx, *tangents):
    """Forward mode: the tangent of every step from the saved activations, the
    non-recurrent terms of all steps as GEMMs over all steps."""
    ts = _tangents(tangents, ctx.inputs)
    if ts is None:
        return None
    x, h0, c0, w, u, b = ctx.inputs
    tx, th, tc, tw, tu, tb = ts
    outs, _, _, gates, cs = ctx.outputs
    n, t_len = int(h0.shape[-1]), int(x.shape[0])
    idx = gate_perm(ctx.attrs["gate_order"], LSTM_CANONICAL)
    w, u, tw, tu, tb = (_blocks(a, idx, n) for a in (w, u, tw, tu, tb))
    a = _m.add(_m.add(_time_gemm(tx, w), _time_gemm(x, tw)), tb)
    a = _m.add(a, _time_gemm(_prev_states(outs, h0, ctx.attrs["reverse"]), tu))
    gates, cs = _feature_major(gates), _feature_major(cs)
    touts, tcs, tgates = [None] * t_len, [None] * t_len, [None] * t_len
    for t in _steps(t_len, ctx.attrs["reverse"]):
        p = t - 1 if not ctx.attrs["reverse"] else t + 1
        c_prev = cs[p] if 0 <= p < t_len else c0
        tz = _m.add(a[t], _la.matmul(th, u))
        g = gates[t]
        s = g[:, :3 * n]
        ts_ = _m.multiply(_m.multiply(s, _m.subtract(1.0, s)), tz[:, :3 * n])
        cand = g[:, 3 * n:]
        tg = _m.multiply(_m.subtract(1.0, _m.multiply(cand, cand)), tz[:, 3 * n:])
        ti, tf_, to = ts_[:, :n], ts_[:, n:2 * n], ts_[:, 2 * n:]
        tc = _m.add(_m.add(_m.multiply(tf_, c_prev), _m.multiply(g[:, n:2 * n], tc)),
                    _m.add(_m.multiply(ti, cand), _m.multiply(g[:, :n], tg)))
        tanhc = _m.tanh(cs[t])
        th = _m.add(_m.multiply(to, tanhc), _m.multiply(
            _m.multiply(g[:, 2 * n:3 * n], _m.subtract(1.0, _m.multiply(tanhc, tanhc))), tc))
        touts[t], tcs[t], tgates[t] = th, tc, _ag.concat([ts_, tg], axis=1)
    if not t_len:
        return (_zeros_like(outs), th, tc, _zeros_like(ctx.outputs[3]),
                _zeros_like(ctx.outputs[4]))
    return (_ag.stack(touts), th, tc, _feature_major(_ag.stack(tgates)),
            _feature_major(_ag.stack(tcs)))


def _gru_jvp(ctx, *tangents):
    """Forward mode of ``FusedGRU`` (as :func:`_lstm_jvp`)."""
    ts = _tangents(tangents, ctx.inputs)
    if ts is None:
        return None
    x, h0, w, u, b, rb = ctx.inputs
    tx, th, tw, tu, tb, trb = ts
    outs, _, gates, hn = ctx.outputs
    n, t_len, rev = int(h0.shape[-1]), int(x.shape[0]), ctx.attrs["reverse"]
    idx = gate_perm(ctx.attrs["gate_order"], GRU_CANONICAL)
    w, u, tw, tu, tb, trb = (_blocks(a, idx, n) for a in (w, u, tw, tu, tb, trb))
    ax = _m.add(_m.add(_time_gemm(tx, w), _time_gemm(x, tw)), tb)
    ah = _m.add(_time_gemm(_prev_states(outs, h0, rev), tu), trb)
    gates, hn = _feature_major(gates), _feature_major(hn)
    touts, tgates, thns = [None] * t_len, [None] * t_len, [None] * t_len
    for t in _steps(t_len, rev):
        p = t - 1 if not rev else t + 1
        h_prev = outs[p] if 0 <= p < t_len else h0
        thz = _m.add(ah[t], _la.matmul(th, u))
        g = gates[t]
        zr = g[:, :2 * n]
        tzr = _m.multiply(_m.multiply(zr, _m.subtract(1.0, zr)),
                          _m.add(ax[t][:, :2 * n], thz[:, :2 * n]))
        z, r, cand = g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
        thn = thz[:, 2 * n:]
        tn = _m.multiply(_m.subtract(1.0, _m.multiply(cand, cand)), _m.add(
            ax[t][:, 2 * n:], _m.add(_m.multiply(tzr[:, n:], hn[t]), _m.multiply(r, thn))))
        th = _m.add(_m.add(tn, _m.multiply(tzr[:, :n], _m.subtract(h_prev, cand))),
                    _m.multiply(z, _m.subtract(th, tn)))
        touts[t], tgates[t], thns[t] = th, _ag.concat([tzr, tn], axis=1), thn
    if not t_len:
        return (_zeros_like(outs), th, _zeros_like(ctx.outputs[2]), _zeros_like(ctx.outputs[3]))
    return (_ag.stack(touts), th, _feature_major(_ag.stack(tgates)),
            _feature_major(_ag.stack(thns)))


_RNN_ATTR_TYPES = {"forget_bias": "float", "gate_order": "str", "reverse": "bool"}

#: the LSTM over a sequence: (outputs, h_last, c_last, gates, cell_states)
FUSED_LSTM = defop(
    "FusedLSTM", inputs=("x", "h0", "c0", "kernel", "recurrent_kernel", "bias"),
    attrs={"forget_bias": 0.0, "gate_order": "ifco", "reverse": False}, num_outputs=5,
    attr_types=_RNN_ATTR_TYPES, grad=_lstm_grad, jvp=_lstm_jvp, batch=_rnn_batch,
    check=_check_rnn,
    composite=lstm_unfused, dtype_rule="none")

#: its backpropagation through time: (dx, dh0, dc0, dkernel, drecurrent_kernel, dbias)
FUSED_LSTM_GRAD = defop(
    "FusedLSTMGrad", inputs=("x", "h0", "c0", "kernel", "recurrent_kernel", "outputs",
                             "cell_states", "gates", "d_outputs", "d_h", "d_c"),
    attrs={"forget_bias": 0.0, "gate_order": "ifco", "reverse": False}, num_outputs=6,
    attr_types=_RNN_ATTR_TYPES, grad=_no_second_order, jvp=_no_second_order,
    batch=_rnn_grad_batch, check=_check_rnn, composite=lstm_grad_unfused, dtype_rule="none")

#: the GRU (reset_after) over a sequence: (outputs, h_last, gates, hn)
FUSED_GRU = defop(
    "FusedGRU", inputs=("x", "h0", "kernel", "recurrent_kernel", "bias", "recurrent_bias"),
    attrs={"gate_order": "zrh", "reverse": False}, num_outputs=4,
    attr_types={"gate_order": "str", "reverse": "bool"}, grad=_gru_grad, jvp=_gru_jvp,
    batch=_rnn_batch, check=_check_rnn, composite=gru_unfused, dtype_rule="none")

#: its backpropagation through time: (dx, dh0, dkernel, drecurrent_kernel, dbias,
#: drecurrent_bias)
FUSED_GRU_GRAD = defop(
    "FusedGRUGrad", inputs=("x", "h0", "kernel", "recurrent_kernel", "outputs", "gates", "hn",
                            "d_outputs", "d_h"),
    attrs={"gate_order": "zrh", "reverse": False}, num_outputs=6,
    attr_types={"gate_order": "str", "reverse": "bool"}, grad=_no_second_order,
    jvp=_no_second_order, batch=_rnn_grad_batch, check=_check_rnn,
    composite=gru_grad_unfused, dtype_rule="none")


# --- the public functions -----------------------------------------------------------------

def _rnn_args(fn, op, args, optional):
    """The arguments as tensors of one dtype on one device: Tensors and Variables as they
    are (read), other values converted to the dtype of the first tensor argument;
    ``optional`` names those that may be None (zeros of ``[k*H]``)."""
    ref = next((a for a in args.values() if isinstance(a, (Tensor, Variable))), None)
    if ref is None:
        ref = convert_to_tensor(args["x"])
    ref = convert_to_tensor(ref)
    dt = ref.dtype
    out = {}
    for name, v in args.items():
        if v is None and name in optional:
            continue
        if v is None:
            raise InvalidArgumentError(f"{fn}: {name} is required, got None", op=op,
                                       device=ref._device)
        out[name] = convert_like(v, ref, dtype=None if isinstance(v, (Tensor, Variable))
                                 else dt)
    return out


def _bias_or_zeros(args, name):
    """``args[name]``, or (None given) zeros of the kernel's column count."""
    b = args.get(name)
    if b is not None:
        return b
    w = args["kernel"]
    n = int(w.shape[-1]) if len(w.shape) else 0
    return constant(np.zeros(n, w.dtype.np), device=w._device)


def _check_cell_ranks(fn, op, x, states):
    if len(x.shape) != 2 or any(len(s.shape) != 2 for s in states):
        raise InvalidArgumentError(
            f"{fn}: x must be 2-d [B, I] and the state 2-d [B, H]; got x {list(x.shape)} and "
            f"state {[list(s.shape) for s in states]} (for sequences [T, B, I] use "
            f"{fn.replace('cell', 'sequence')})", op=op, device=x._device)


def _lstm_attrs(fn, forget_bias, gate_order, reverse, x):
    check_gate_order(gate_order, LSTM_CANONICAL, "FusedLSTM", fn, x)
    fb = real_number(forget_bias, f"{fn}: forget_bias", "FusedLSTM", x)
    return {"forget_bias": float(fb), "gate_order": gate_order,
            "reverse": flag(reverse, f"{fn}: reverse", "FusedLSTM", x)}


@_nn._on_device
def lstm_sequence(x, h0, c0, kernel, recurrent_kernel, bias=None, *, forget_bias=0.0,
                  gate_order="ifco", reverse=False):
    """An LSTM over a time-major sequence as one op (``FusedLSTM``): ``x [T, B, I]``,
    initial state ``h0, c0 [B, H]``, ``kernel [I, 4H]``, ``recurrent_kernel [H, 4H]``,
    ``bias [4H]`` (None: zeros). Returns ``(outputs [T, B, H], h_last, c_last)``.

    Each step computes ``z = x_t @ kernel + h @ recurrent_kernel + bias``, splits it into
    four blocks of H columns named by ``gate_order`` (``"ifco"``: Keras's and PyTorch's
    layout; ``"icfo"``: TF1's ``BasicLSTMCell``, i.e. i, j, f, o), and
    ``c = sigmoid(f + forget_bias) * c + sigmoid(i) * tanh(c_block)``,
    ``h = sigmoid(o) * tanh(c)``. ``reverse=True`` runs t = T-1 .. 0; ``outputs[t]`` is
    the state after step t in either case. Differentiable with respect to every input.

    >>> import tapeflow as tf
    >>> from tapeflow.ops.fused import lstm_sequence
    >>> x = tf.ones([3, 2, 4])
    >>> h0 = c0 = tf.zeros([2, 5])
    >>> out, h, c = lstm_sequence(x, h0, c0, tf.fill([4, 20], 0.1), tf.zeros([5, 20]))
    >>> out.shape, h.shape
    (TensorShape([3, 2, 5]), TensorShape([2, 5]))
    >>> print(round(float(h[0, 0]), 4))
    0.2502
    """
    a = _rnn_args("lstm_sequence", "FusedLSTM", {
        "x": x, "h0": h0, "c0": c0, "kernel": kernel, "recurrent_kernel": recurrent_kernel,
        "bias": bias}, ("bias",))
    attrs = _lstm_attrs("lstm_sequence", forget_bias, gate_order, reverse, a["x"])
    outs, h, c, _, _ = execute(FUSED_LSTM, (a["x"], a["h0"], a["c0"], a["kernel"],
                                            a["recurrent_kernel"], _bias_or_zeros(a, "bias")),
                               attrs)
    return outs, h, c


@_nn._on_device
def lstm_cell(x, h, c, kernel, recurrent_kernel, bias=None, *, forget_bias=0.0,
              gate_order="ifco"):
    """One LSTM step (:func:`lstm_sequence` of one step): ``x [B, I]``, ``h, c [B, H]``;
    returns ``(h_new, c_new)``.

    >>> import tapeflow as tf
    >>> from tapeflow.ops.fused import lstm_cell
    >>> h, c = lstm_cell(tf.ones([1, 2]), tf.zeros([1, 1]), tf.zeros([1, 1]),
    ...                  tf.ones([2, 4]), tf.ones([1, 4]), gate_order="icfo")
    >>> print(round(float(h[0, 0]), 4), round(float(c[0, 0]), 4))
    0.6083 0.8491
    """
    a = _rnn_args("lstm_cell", "FusedLSTM", {
        "x": x, "h0": h, "c0": c, "kernel": kernel, "recurrent_kernel": recurrent_kernel,
        "bias": bias}, ("bias",))
    _check_cell_ranks("lstm_cell", "FusedLSTM", a["x"], (a["h0"], a["c0"]))
    attrs = _lstm_attrs("lstm_cell", forget_bias, gate_order, False, a["x"])
    _, h, c, _, _ = execute(FUSED_LSTM, (_ash.expand_dims(a["x"], 0), a["h0"], a["c0"],
                                         a["kernel"], a["recurrent_kernel"],
                                         _bias_or_zeros(a, "bias")), attrs)
    return h, c


def _gru_attrs(fn, gate_order, reverse, x):
    check_gate_order(gate_order, GRU_CANONICAL, "FusedGRU", fn, x)
    return {"gate_order": gate_order, "reverse": flag(reverse, f"{fn}: reverse", "FusedGRU", x)}


@_nn._on_device
def gru_sequence(x, h0, kernel, recurrent_kernel, bias=None, recurrent_bias=None, *,
                 gate_order="zrh", reverse=False):
    """A GRU over a time-major sequence as one op (``FusedGRU``), in the form with the
    reset gate applied after the recurrent product (Keras's ``reset_after=True``,
    cuDNN's): ``x [T, B, I]``, ``h0 [B, H]``, ``kernel [I, 3H]``, ``recurrent_kernel
    [H, 3H]``, ``bias``/``recurrent_bias`` ``[3H]`` (None: zeros). Returns ``(outputs
    [T, B, H], h_last)``.

    Each step: ``xz = x_t @ kernel + bias``, ``hz = h @ recurrent_kernel +
    recurrent_bias``, blocks of H columns named by ``gate_order`` (``"zrh"``: update,
    reset, candidate); ``z = sigmoid(xz_z + hz_z)``, ``r = sigmoid(xz_r + hz_r)``,
    ``n = tanh(xz_h + r * hz_h)``, ``h = z * h + (1 - z) * n``.

    >>> import tapeflow as tf
    >>> from tapeflow.ops.fused import gru_sequence
    >>> out, h = gru_sequence(tf.ones([3, 2, 4]), tf.zeros([2, 5]), tf.fill([4, 15], 0.1),
    ...                       tf.zeros([5, 15]))
    >>> out.shape, round(float(h[0, 0]), 4)
    (TensorShape([3, 2, 5]), 0.2984)
    """
    a = _rnn_args("gru_sequence", "FusedGRU", {
        "x": x, "h0": h0, "kernel": kernel, "recurrent_kernel": recurrent_kernel, "bias": bias,
        "recurrent_bias": recurrent_bias}, ("bias", "recurrent_bias"))
    attrs = _gru_attrs("gru_sequence", gate_order, reverse, a["x"])
    outs, h, _, _ = execute(FUSED_GRU, (a["x"], a["h0"], a["kernel"], a["recurrent_kernel"],
                                        _bias_or_zeros(a, "bias"),
                                        _bias_or_zeros(a, "recurrent_bias")), attrs)
    return outs, h


@_nn._on_device
def gru_cell(x, h, kernel, recurrent_kernel, bias=None, recurrent_bias=None, *,
             gate_order="zrh"):
    """One GRU step (:func:`gru_sequence` of one step): ``x [B, I]``, ``h [B, H]``;
    returns ``h_new``.

    >>> import tapeflow as tf
    >>> from tapeflow.ops.fused import gru_cell
    >>> h = gru_cell(tf.ones([1, 2]), tf.ones([1, 1]), tf.ones([2, 3]), tf.ones([1, 3]))
    >>> print(round(float(h[0, 0]), 4))
    0.9997
    """
    a = _rnn_args("gru_cell", "FusedGRU", {
        "x": x, "h0": h, "kernel": kernel, "recurrent_kernel": recurrent_kernel, "bias": bias,
        "recurrent_bias": recurrent_bias}, ("bias", "recurrent_bias"))
    _check_cell_ranks("gru_cell", "FusedGRU", a["x"], (a["h0"],))
    attrs = _gru_attrs("gru_cell", gate_order, False, a["x"])
    _, h, _, _ = execute(FUSED_GRU, (_ash.expand_dims(a["x"], 0), a["h0"], a["kernel"],
                                     a["recurrent_kernel"], _bias_or_zeros(a, "bias"),
                                     _bias_or_zeros(a, "recurrent_bias")), attrs)
    return h
