"""What ``Optimizer.apply_gradients`` checks before it creates or writes anything
(issue 43): the (gradient, variable) pairs, ``global_step``, every hyperparameter of
the step, and -- a guard -- the op-by-op update's new values. Every error ends with
"No variable was updated." (all or nothing) and names the optimizer.

>>> import tapeflow as tf
>>> from tapeflow.train.optimizer_checks import hyperparameter
>>> opt = tf.train.AdamOptimizer(0.1)
>>> hyperparameter(opt, "beta1", tf.constant(0.5), False)
0.5
>>> try:
...     hyperparameter(opt, "learning_rate", tf.constant([0.1]), True)
... except tf.errors.InvalidArgumentError as e:
...     print(str(e).split(", got ")[0])
AdamOptimizer: the learning rate (learning_rate) must be a scalar
"""

from __future__ import annotations

import numpy as np

from ..runtime.context import tracing as _tracing
from ..runtime.dispatch import convert_to_tensor as _convert
from ..runtime.dispatch import copy_to_device as _copy_to_device
from ..errors import InvalidArgumentError, InvalidTypeError, TapeflowError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["NOTHING", "hyperparameter", "checked_values", "unpack", "check_step_args",
           "checked_gradient", "short"]


def short(v):
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


#: what every apply_gradients error ends with (all or nothing)
NOTHING = " No variable was updated."


def hyperparameter(opt, name, value, tensor_ok, when=NOTHING):
    """The value of hyperparameter ``name`` (``"learning_rate"``, ``"momentum"``...) of
    optimizer ``opt`` for one step, checked: a callable is called, a Variable read; a
    real number (Python or NumPy, not a bool) or a 0-d real array gives a Python float,
    a 0-d Tensor its value (``tensor_ok``, the learning rate: the 0-d floating-point
    Tensor itself, cast per variable later; otherwise a Python float). Anything else --
    a tensor or array of any other shape (``(1,)`` included: TensorFlow's kernels refuse
    it), a string, None, a complex number, a bool -- raises InvalidArgumentError (or
    InvalidTypeError, also a TypeError) naming the optimizer, the hyperparameter, what
    it got and what to pass; ``when`` ends the message."""
    what = (f"{type(opt).__name__}: the learning rate (learning_rate)" if name == "learning_rate"
            else f"{type(opt).__name__}: the hyperparameter {name}")
    v = value
    if callable(v) and not isinstance(v, (Tensor, Variable)):
        v = v()
        what += f" (returned by {short(value)})"
    kind = "tensor"
    if isinstance(v, Variable):
        kind = "Variable"
        if tensor_ok:
            v = v.read_value()
        elif _tracing[0]:
            # (the fused kernels take it as a number: read at trace time, a Variable's
            # later values would be ignored by every call of the function)
            raise InvalidArgumentError(
                f"{what} is a tf.Variable ({short(v)}): inside a tf.function it would be "
                f"read once, when the function is traced, and its later values ignored. "
                f"Pass a Python float (retrace to change it), or call apply_gradients "
                f"eagerly.{when}")
        else:
            v = v._current()
    if isinstance(v, Tensor):
        dt = v.dtype
        if len(v.shape):
            raise InvalidArgumentError(
                f"{what} must be a scalar, got a {dt.name} {kind} of shape "
                f"{tuple(v.shape)}. Pass a Python float or a 0-d tensor (tf.reshape(x, []) "
                f"makes a one-element tensor 0-d).{when}")
        if not (dt.is_floating or (dt.is_integer and not tensor_ok)):
            raise InvalidTypeError(
                f"{what} must be a real {'floating-point ' if tensor_ok else ''}number, got "
                f"a 0-d {dt.name} {kind}. Pass a Python float or a 0-d float tensor (tf.cast "
                f"it).{when}")
        if tensor_ok:
            return v
        try:
            return float(v)
        except (TapeflowError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"{what} must be a number known when the step runs, got a 0-d {dt.name} "
                f"tensor whose value cannot be read ({getattr(e, 'message', e)}). Pass a "
                f"Python float.{when}") from None
    if isinstance(v, np.ndarray):
        if v.ndim:
            raise InvalidArgumentError(
                f"{what} must be a scalar, got a NumPy array of shape {v.shape} and dtype "
                f"{v.dtype}. Pass a Python float or a 0-d tensor.{when}")
        v = v[()]
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
            v, (bool, np.bool_)):
        try:
            return float(v)
        except OverflowError:
            raise InvalidArgumentError(
                f"{what} {v} does not fit a float.{when}") from None
    raise InvalidTypeError(
        f"{what} must be a real number: a Python float or a 0-d tensor, got "
        f"{type(v).__name__} {short(v)}.{when}")


def checked_values(opt, var, grad, delta, st, old, new):
    """``new`` (the op-by-op update's new slot values), after checking that ``delta`` is
    like ``grad`` (the validated gradient: the variable's dtype, shape and device) and
    each new slot value like the old one, so that no write of the step can fail
    part-way. A guard (the validated inputs make them so): native dtype and shape, no
    TensorShape or DType built."""
    for t, ref in zip((delta, *new), (grad, *old)):
        if t is not ref:
            a, b = t._data, ref._data
            if t._device is not ref._device or a.dtype != b.dtype or a.shape != b.shape:
                i = 1 + list(new).index(t) if t is not delta else 0
                v = st[i]
                raise InvalidArgumentError(
                    f"{type(opt).__name__}.apply_gradients: the update of '{v.name}' "
                    f"({v.dtype.name}, shape {tuple(v.shape)} on {v._device}) came out "
                    f"{t.dtype.name}, shape {tuple(t.shape)} on {t._device}: a bug in the "
                    f"optimizer; please report it.{NOTHING}")
    return new


def unpack(opt, grads_and_vars):
    """``([(gradient, variable, position), ...], [variables whose gradient is None])``
    of ``grads_and_vars``; InvalidTypeError for anything but (gradient, Variable)
    pairs."""
    pairs = []
    skipped = []
    try:
        items = list(grads_and_vars)
    except TypeError:
        raise InvalidTypeError(
            f"{type(opt).__name__}.apply_gradients expects an iterable of (gradient, "
            f"variable) pairs, got {short(grads_and_vars)}.{NOTHING}") from None
    for i, pair in enumerate(items):
        try:
            g, v = pair
        except (TypeError, ValueError):
            raise InvalidTypeError(
                f"{type(opt).__name__}.apply_gradients expects (gradient, variable) pairs, "
                f"got {short(pair)} at position {i}.{NOTHING}") from None
        if not isinstance(v, Variable):
            raise InvalidTypeError(
                f"{type(opt).__name__}.apply_gradients: {short(v)} (position {i}) is not "
                f"a tf.Variable (the pair is (gradient, variable), in that order).{NOTHING}")
        if g is None:
            skipped.append(v)
            continue
        pairs.append((g, v, i))
    return pairs, skipped

def check_step_args(opt, pairs, skipped, global_step):
    if not pairs:
        names = [v.name for v in skipped]
        raise InvalidArgumentError(
            f"{type(opt).__name__}: No gradients provided for any variable: {names}. Check "
            "that the loss depends on the variables (read inside the tape).")
    if global_step is not None and not (isinstance(global_step, Variable)
                                        and not global_step.dtype.is_bool):
        raise InvalidTypeError(
            f"{type(opt).__name__}.apply_gradients: global_step must be a numeric "
            f"tf.Variable (e.g. tf.train.get_or_create_global_step()), got "
            f"{short(global_step)}.{NOTHING}")


def checked_gradient(opt, g, v, i):
    """The gradient of pair ``i`` as a Tensor of ``v``'s dtype, shape and device, or
    InvalidArgumentError naming the pair (nothing has been updated yet)."""
    where = (f"{type(opt).__name__}.apply_gradients: pair {i} (Variable '{v.name}', "
             f"{v.dtype.name}, shape {tuple(v.shape)} on {v._device})")
    if not v.dtype.is_floating:
        raise InvalidArgumentError(
            f"{where}: cannot optimize a Variable of dtype {v.dtype.name}: only floating "
            f"point variables can be optimized.{NOTHING}")
    if type(g) is not Tensor:
        try:
            g = _convert(g, dtype=v.dtype)
        except (TapeflowError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"{where}: the gradient {short(g)} is not a {v.dtype.name} tensor: "
                f"{getattr(e, 'message', e)}{NOTHING}") from None
    if g.dtype != v.dtype:
        raise InvalidArgumentError(
            f"{where}: the gradient has dtype {g.dtype.name}, the variable "
            f"{v.dtype.name}; tf.cast it first.{NOTHING}")
    if g.shape != v.shape:
        raise InvalidArgumentError(
            f"{where}: the gradient has shape {tuple(g.shape)}, the variable "
            f"{tuple(v.shape)}; they must be equal.{NOTHING}")
    if g._device is not v._device:
        try:
            g = _copy_to_device(g, v._device)
        except (TapeflowError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"{where}: the gradient on {g._device} cannot be copied to the variable's "
                f"device: {getattr(e, 'message', e)}{NOTHING}") from None
    return g
