"""The fused optimizer updates: one op per optimizer and variable (TensorFlow's
``ResourceApplyAdam`` family), used by ``Optimizer.apply_gradients``
(:mod:`tapeflow.train.optimizers`) on every device that has their kernel.

Each op takes the variable's value, its slots' values, the gradient and the step's
coefficients (0-d tensors of the variable's dtype), and returns the new variable and
slots in the order it took them; the hyperparameters fixed for an optimizer
(``beta1``, ``momentum``...) are attrs. The ops have no gradient. Their kernels
(:class:`tapeflow.kernels.optim.OptimKernels`) also take ``inplace``: True only when the
optimizer has checked, under the Variables' locks, that nobody else can see the
buffers (docs/decisions.md, "Fused optimizer updates"); called as an op the update is
functional and the inputs are left unchanged.

>>> import tapeflow as tf
>>> from tapeflow.ops import optim
>>> var, g, lr = tf.constant([1.0, 2.0]), tf.constant([2.0, 2.0]), tf.constant(0.5)
>>> print(optim.APPLY_GRADIENT_DESCENT(var, g, lr))
tf.Tensor([0. 1.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

from ..runtime.dispatch import execute
from ..errors import InvalidArgumentError
from .library import defop
from .reductions import broadcast_to

__all__ = ["APPLY_GRADIENT_DESCENT", "APPLY_MOMENTUM", "APPLY_ADAM", "APPLY_RMS_PROP",
           "APPLY_CENTERED_RMS_PROP", "APPLY_KERAS_RMS_PROP", "APPLY_KERAS_CENTERED_RMS_PROP",
           "APPLY_ADAGRAD"]

_FLOAT_ATTRS = {"beta1": "float", "beta2": "float", "epsilon": "float", "rho": "float",
                "momentum": "float", "use_nesterov": "bool", "inplace": "bool"}


def _check(op, tensors, attrs, device):
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


def _batch(ctx, *inputs):
    """``tf.vectorized_map``: the update is elementwise in the variable, slots and
    gradient (an unbatched one is broadcast to the batch); a coefficient per example
    is not covered (NotImplemented: one update per example)."""
    n = len(ctx.op.inputs) - _N_SCALARS[ctx.op.name]
    if any(ctx.batched[n:]):
        return NotImplemented
    shape = next(x.shape for x, b in zip(inputs, ctx.batched) if b)
    arrays = [x if b else broadcast_to(x, shape) for x, b in zip(inputs[:n], ctx.batched)]
    return execute(ctx.op, (*arrays, *inputs[n:]), ctx.attrs)


def _op(name, inputs, n_scalars, attrs):
    _N_SCALARS[name] = n_scalars
    attrs = dict(attrs, inplace=False)
    return defop(name, inputs=inputs, attrs=attrs, num_outputs=len(inputs) - n_scalars - 1,
                 differentiable=False, check=_check, dtype_rule="none", batch=_batch,
                 attr_types={a: _FLOAT_ATTRS[a] for a in attrs})


_N_SCALARS: dict = {}

#: ``var - grad * lr``
APPLY_GRADIENT_DESCENT = _op("ApplyGradientDescent", ("var", "grad", "lr"), 1, {})
#: ``(var, accum)`` of Momentum (``mom_lr``: momentum * lr, used by Nesterov)
APPLY_MOMENTUM = _op("ApplyMomentum", ("var", "accum", "grad", "lr", "mom_lr"), 2,
                     {"momentum": 0.0, "use_nesterov": False})
#: ``(var, m, v)`` of Adam (``lr_t``: the bias-corrected learning rate)
APPLY_ADAM = _op("ApplyAdam", ("var", "m", "v", "grad", "lr_t"), 1,
                 {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8})
#: ``(var, ms, mom)`` of TensorFlow 1's RMSProp
APPLY_RMS_PROP = _op("ApplyRMSProp", ("var", "ms", "mom", "grad", "lr"), 1,
                     {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10})
#: ``(var, mg, ms, mom)`` of the centered RMSProp
APPLY_CENTERED_RMS_PROP = _op("ApplyCenteredRMSProp", ("var", "mg", "ms", "mom", "grad", "lr"),
                              1, {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10})
#: ``(var, ms)`` of Keras's RMSprop without momentum (epsilon outside the root)
APPLY_KERAS_RMS_PROP = _op("ApplyKerasRMSProp", ("var", "ms", "grad", "lr"), 1,
                           {"rho": 0.9, "epsilon": 1e-7})
#: ``(var, ms, mg)`` of Keras's centered RMSprop without momentum
APPLY_KERAS_CENTERED_RMS_PROP = _op("ApplyKerasCenteredRMSProp",
                                    ("var", "ms", "mg", "grad", "lr"), 1,
                                    {"rho": 0.9, "epsilon": 1e-7})
#: ``(var, accum)`` of Adagrad
APPLY_ADAGRAD = _op("ApplyAdagrad", ("var", "accum", "grad", "lr"), 1, {})
