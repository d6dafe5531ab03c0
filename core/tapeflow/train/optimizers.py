"""Optimizers with TensorFlow 1's names and update rules, and the global step.

``apply_gradients(grads_and_vars, global_step=None)`` updates each Variable in place
(``var.assign_sub(...)``, buffer donation when nobody else holds the old value) with
tapeflow ops, under ``stop_all_recording()`` so no tape records the update. A ``None``
gradient is skipped with a warning naming the variable. All or nothing: every
(gradient, variable) pair is validated first -- a floating-point Variable, a gradient
of its dtype and shape (copied to its device), its slots created -- and no Variable
changes unless every pair passed; the error names the pair and says so. One
``apply_gradients`` runs at a time per optimizer (a lock: its per-step state is shared).
Slots (Adam's ``m``/``v``,
Momentum's accumulator...) are made lazily, one per variable, on that variable's
device; ``variables()`` lists them with the non-slot state (Adam's beta powers).

>>> import tapeflow as tf
>>> w = tf.Variable([1.0, 2.0])
>>> opt = tf.train.GradientDescentOptimizer(learning_rate=0.5)
>>> opt.apply_gradients([(tf.constant([2.0, 2.0]), w)])
>>> print(w.numpy())
[0. 1.]

The update rules are TensorFlow 1's kernels (``training_ops.cc``):

* GradientDescent: ``var -= lr * g``
* Momentum: ``accum = accum * momentum + g``; ``var -= lr * accum``, or with
  ``use_nesterov``: ``var -= lr * g + lr * momentum * accum``
* Adam: ``m += (g - m) * (1 - beta1)``; ``v += (g*g - v) * (1 - beta2)``;
  ``var -= lr_t * m / (sqrt(v) + epsilon)`` with
  ``lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)``; the beta powers are
  Variables multiplied by beta1/beta2 after every step.
* RMSProp: ``ms += (g*g - ms) * (1 - decay)`` (``ms`` starts at 1);
  ``mom = mom * momentum + lr * g / sqrt(ms + epsilon)``; ``var -= mom``; centered:
  ``mg += (g - mg) * (1 - decay)`` and ``sqrt(ms - mg*mg + epsilon)``.
* Adagrad: ``accum += g*g`` (starts at ``initial_accumulator_value``);
  ``var -= lr * g / sqrt(accum)``.

Each update is one fused kernel per variable (``ApplyAdam``..., :mod:`.fused_update`)
on a device that has it, bitwise the op-by-op update on NumPy; ``opt.fused = False``.

The Keras names ``SGD``, ``Adam``, ``RMSprop`` (``learning_rate=``, ``beta_1=``...)
are thin subclasses with Keras's defaults, re-exported by ``tf.keras.optimizers``.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from ..runtime import devices as _devs
from ..runtime import dtypes as _dt
from ..ops import math as _m
from ..ops.array import fill as _fill
from ..runtime.errors import (FailedPreconditionError, InvalidArgumentError, InvalidTypeError,
                              TapeflowError)
from ..runtime.dispatch import convert_to_tensor as _convert
from ..runtime.dispatch import copy_to_device as _copy_to_device
from ..autodiff.tape import GradientTape
from ..runtime.context import stop_all_recording
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..layers.naming import from_config
from ..ops import optim as _optim
from . import checkpoint as _checkpoint_mod
from .fused_update import FUSED_DEFAULT, apply_fused, scalar_coefficient

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "RMSPropOptimizer", "AdagradOptimizer", "SGD", "Adam", "RMSprop", "Adagrad",
           "get_or_create_global_step", "get_global_step", "create_global_step",
           "reset_global_step", "get", "get_optimizer"]


def _base_name(var):
    """``'dense/kernel:0'`` -> ``'dense/kernel'`` (TensorFlow's op name of a variable)."""
    name = var.name
    head, sep, tail = name.rpartition(":")
    return head if sep and tail.isdigit() else name


def _short(v):
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


def _restore_deferred(obj):
    restore_deferred = _checkpoint_mod.restore_deferred
    restore_deferred(obj)


class Optimizer:
    """Base class: subclasses declare ``_slot_specs`` (``(slot name, initial value)``
    in creation order) and implement ``_apply_dense(grad, var, slots)``.

    Checkpointing (``tf.train.Checkpoint``): ``_trackable_children()`` returns the
    non-slot variables (``beta1_power``...); slots are saved next to the variable
    they belong to (``model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m``) through
    ``_checkpoint_slots()``, so they restore by the variable's path even when the
    optimizer has not created them yet (``_defer_slot_restoration``).
    """

    _slot_specs: tuple = ()          # ((slot name, initial fill value), ...)
    _default_name = "Optimizer"
    #: one fused kernel per variable and step where the device has it (train/fused_update.py)
    fused = FUSED_DEFAULT

    def __init__(self, learning_rate, use_locking=False, name=None):
        if learning_rate is None:
            raise InvalidArgumentError("learning_rate must be given")
        self._learning_rate = learning_rate
        self._use_locking = use_locking
        self._name = name or self._default_name
        self._state: dict = {}         # id(var) -> (var, slot Variable, ...)
        self._non_slot: dict = {}      # name -> Variable (created on first apply)
        self._deferred_slots: dict = {}  # id(var) -> (var, {slot: (array, on_used)})
        self._non_slot_ready = False
        self._apply_lock = threading.RLock()   # one apply_gradients at a time

    # --- hyperparameters -------------------------------------------------------------
    @property
    def learning_rate(self):
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._learning_rate = value

    lr = learning_rate

    def _lr(self):
        lr = self._learning_rate
        if callable(lr) and not isinstance(lr, (Tensor, Variable)):
            lr = lr()
        if isinstance(lr, Variable):
            lr = lr.read_value()
        return lr

    def get_name(self):
        return self._name

    # --- slots -----------------------------------------------------------------------
    def get_slot_names(self):
        return [s for s, _ in self._slot_specs]

    def get_slot(self, var, name):
        """The slot Variable ``name`` of ``var`` (None if not created yet)."""
        st = self._state.get(id(var))
        if st is None:
            return None
        for i, (s, _) in enumerate(self._slot_specs):
            if s == name:
                return st[i + 1]
        return None

    def _slot_var_name(self, var, i):
        return _base_name(var) + "/" + self._name + (f"_{i}" if i else "")

    def _create_slots(self, var):
        pending = None
        if self._deferred_slots:
            entry = self._deferred_slots.pop(id(var), None)
            if entry is not None and entry[0] is var:
                pending = entry[1]
        slots = []
        dev = var._device
        with _devs.device(dev):
            for i, (sname, init) in enumerate(self._slot_specs):
                value = None
                if pending and sname in pending:
                    value, on_used = pending.pop(sname)
                    on_used()
                if value is None:
                    value = _fill(list(var.shape), init, dtype=var.dtype)
                slots.append(Variable(value, trainable=False, dtype=var.dtype,
                                      name=self._slot_var_name(var, i), device=dev))
        st = (var, *slots)
        self._state[id(var)] = st
        return st

    def _checkpoint_slots(self):
        """``[(variable, slot name, slot Variable), ...]`` for tf.train.Checkpoint."""
        out = []
        for st in self._state.values():
            var = st[0]
            for i, (sname, _) in enumerate(self._slot_specs):
                out.append((var, sname, st[i + 1]))
        return out

    def _defer_slot_restoration(self, var, slot_name, array, on_used=lambda: None):
        """Keep a checkpointed slot value until the slot is created (then ``on_used()``)."""
        entry = self._deferred_slots.get(id(var))
        if entry is None or entry[0] is not var:
            entry = self._deferred_slots[id(var)] = (var, {})
        entry[1][slot_name] = (array, on_used)

    # --- non-slot state --------------------------------------------------------------
    def _non_slot_specs(self):
        """``[(name, initial value), ...]`` of the optimizer-wide Variables."""
        return []

    def _create_non_slot(self, pairs):
        first = min((v for _, v in pairs), key=lambda v: v.name)
        for name, init in self._non_slot_specs():
            if name not in self._non_slot:
                self._non_slot[name] = self._make_non_slot(name, init, first)
        _restore_deferred(self)

    def _make_non_slot(self, name, init, first):
        return Variable(init, trainable=False, name=name, dtype=first.dtype,
                        device=first._device)

    def _trackable_children(self):
        return dict(self._non_slot)

    def variables(self):
        """The optimizer's state: non-slot Variables, then the slots (creation order)."""
        out = list(self._non_slot.values())
        for st in self._state.values():
            out.extend(st[1:])
        return out

    # --- the update ------------------------------------------------------------------
    def _prepare(self):
        """Per-step coefficients, computed once per ``apply_gradients`` (the learning
        rate, and a cache of it cast per variable dtype/device). Adam overrides it."""
        self._lr_now = self._checked_lr()
        self._cache = {}

    def _checked_lr(self):
        """The learning rate of this step: a real number or a floating-point scalar
        Tensor (checked before any Variable is updated)."""
        lr = self._lr()
        if isinstance(lr, Tensor):
            ok = lr.dtype.is_floating and lr.shape.num_elements() == 1
        else:
            ok = (isinstance(lr, (int, float, np.integer, np.floating))
                  and not isinstance(lr, bool))
        if not ok:
            raise InvalidArgumentError(
                f"{type(self).__name__}: the learning rate must be a real number or a "
                f"floating-point scalar tensor, got {lr!r}. No variable was updated.")
        # (a NumPy scalar acts as the Python number: np.float64(0.1) on a float32 variable)
        return lr.item() if isinstance(lr, (np.integer, np.floating)) else lr

    def _finish(self):
        """After every variable was updated (Adam's beta powers)."""

    def _apply_dense(self, grad, var, slots):
        raise NotImplementedError

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Apply ``[(gradient, variable), ...]``; a ``None`` gradient is skipped with a
        warning naming the variable. Increments ``global_step`` by one when given.

        All or nothing: every pair is checked (and its slots created) before the first
        Variable changes; a bad pair raises InvalidArgumentError naming it, and then no
        variable, slot, iteration counter or ``global_step`` has changed."""
        pairs = []
        skipped = []
        for i, pair in enumerate(grads_and_vars):
            try:
                g, v = pair
            except (TypeError, ValueError):
                raise InvalidTypeError("apply_gradients expects (gradient, variable) pairs, got "
                                       f"{pair!r} at position {i}. No variable was "
                                       "updated.") from None
            if not isinstance(v, Variable):
                raise InvalidTypeError(
                    f"apply_gradients: {v!r} (position {i}) is not a tf.Variable (the pair is "
                    "(gradient, variable), in that order). No variable was updated.")
            if g is None:
                skipped.append(v)
                continue
            pairs.append((g, v, i))
        for v in skipped:
            warnings.warn(
                f"{type(self).__name__}: the gradient of Variable '{v.name}' is None; it is not "
                "updated (the loss does not depend on it, or the path is not differentiable).",
                UserWarning, stacklevel=2)
        if not pairs:
            names = [v.name for v in skipped]
            raise InvalidArgumentError(
                f"No gradients provided for any variable: {names}. Check that the loss "
                "depends on the variables (read inside the tape).")
        if global_step is not None and not (isinstance(global_step, Variable)
                                            and not global_step.dtype.is_bool):
            raise InvalidTypeError(
                f"apply_gradients: global_step must be a numeric tf.Variable (e.g. "
                f"tf.train.get_or_create_global_step()), got {global_step!r}. No variable "
                "was updated.")
        with self._apply_lock, stop_all_recording():
            # 1. validate every pair and make what the update needs; nothing changes yet
            checked = [(self._checked_gradient(g, v, i), v) for g, v, i in pairs]
            if not self._non_slot_ready:
                if len(self._non_slot) < len(self._non_slot_specs()):
                    self._create_non_slot([(g, v) for g, v in checked])
                self._non_slot_ready = True
            state = self._state
            work = []
            for g, v in checked:
                st = state.get(id(v))
                if st is None or st[0] is not v:
                    st = self._create_slots(v)
                work.append((g, v, st))
            self._prepare()
            # 2. update (only validated tensors from here on)
            for g, v, st in work:
                self._apply_dense(g, v, st)
            del work, checked
            self._finish()
            if global_step is not None:
                global_step.assign_add(1)
        return None

    def _checked_gradient(self, g, v, i):
        """The gradient of pair ``i`` as a Tensor of ``v``'s dtype, shape and device, or
        InvalidArgumentError naming the pair (nothing has been updated yet)."""
        where = (f"{type(self).__name__}.apply_gradients: pair {i} (Variable '{v.name}', "
                 f"{v.dtype.name}, shape {tuple(v.shape)} on {v._device})")
        if not v.dtype.is_floating:
            raise InvalidArgumentError(
                f"{where}: cannot optimize a Variable of dtype {v.dtype.name}: only floating "
                "point variables can be optimized. No variable was updated.")
        if type(g) is not Tensor:
            try:
                g = _convert(g, dtype=v.dtype)
            except (TapeflowError, TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"{where}: the gradient {_short(g)} is not a {v.dtype.name} tensor: "
                    f"{getattr(e, 'message', e)} No variable was updated.") from None
        if g.dtype != v.dtype:
            raise InvalidArgumentError(
                f"{where}: the gradient has dtype {g.dtype.name}, the variable "
                f"{v.dtype.name}; tf.cast it first. No variable was updated.")
        if g.shape != v.shape:
            raise InvalidArgumentError(
                f"{where}: the gradient has shape {tuple(g.shape)}, the variable "
                f"{tuple(v.shape)}; they must be equal. No variable was updated.")
        if g._device is not v._device:
            try:
                g = _copy_to_device(g, v._device)
            except (TapeflowError, TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"{where}: the gradient on {g._device} cannot be copied to the variable's "
                    f"device: {getattr(e, 'message', e)} No variable was updated.") from None
        return g

    def compute_gradients(self, loss, var_list=None, gate_gradients=None,
                          aggregation_method=None, colocate_gradients_with_ops=False,
                          grad_loss=None, tape=None):
        """``[(gradient, variable), ...]`` of the callable ``loss`` (run under a tape)
        with respect to ``var_list`` (default: the trainable Variables it reads)."""
        if tape is not None and not callable(loss):
            loss_value = loss
        else:
            if not callable(loss):
                raise FailedPreconditionError(
                    "`loss` passed to minimize/compute_gradients must be a function when eager "
                    "execution is enabled (e.g. optimizer.minimize(lambda: loss(model, x, y)))")
            if callable(var_list):
                var_list = var_list()
            with GradientTape() as tape:
                if var_list is not None:
                    tape.watch(list(var_list))
                loss_value = loss()
        if callable(var_list):
            var_list = var_list()
        if var_list is None:
            var_list = tape.watched_variables()
        var_list = list(var_list)
        if not var_list:
            raise InvalidArgumentError(
                "No variables to optimize: the loss read no trainable tf.Variable")
        grads = tape.gradient(loss_value, var_list, output_gradients=grad_loss)
        return list(zip(grads, var_list))

    def minimize(self, loss, global_step=None, var_list=None, gate_gradients=None,
                 aggregation_method=None, colocate_gradients_with_ops=False, name=None,
                 grad_loss=None):
        """Compute the gradients of the callable ``loss`` and apply them (seed:
        ``optimizer.minimize(lambda: loss_function(model, x, y))``)."""
        gv = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss)
        if all(g is None for g, _ in gv):
            raise InvalidArgumentError("No gradients provided for any variable: "
                             f"{[v.name for _, v in gv]}")
        return self.apply_gradients(gv, global_step=global_step)

    def _fused(self, op, grad, var, slots, coefs, **attrs):
        """The fused update ``op`` of ``var`` and its ``slots`` (train/fused_update.py):
        False when off or without a kernel (the caller runs the op-by-op update).
        ``coefs``: ``(name, value)`` pairs, made 0-d Tensors of the variable's dtype."""
        return self.fused and apply_fused(op, var, slots, grad, coefs, attrs, self._cache)

    def _coef(self, value, var, cache):
        """``value`` (a per-step Tensor) on ``var``'s device and in its dtype (cached)."""
        return scalar_coefficient(value, var, cache, None, reshape=False)


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * gradient``."""

    _default_name = "GradientDescent"

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(learning_rate, use_locking, name)

    def _apply_dense(self, grad, var, slots):
        lr = self._lr_now
        if self._fused(_optim.APPLY_GRADIENT_DESCENT, grad, var, (), (("lr", lr),)):
            return
        if isinstance(lr, Tensor):
            lr = self._coef(lr, var, self._cache)
        var.assign_sub(grad * lr)


class MomentumOptimizer(Optimizer):
    """``accum = accum * momentum + g``; ``var -= lr * accum`` (Nesterov:
    ``var -= lr * g + lr * momentum * accum``). Slot: ``momentum``."""

    _default_name = "Momentum"
    _slot_specs = (("momentum", 0.0),)

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False):
        super().__init__(learning_rate, use_locking, name)
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)

    def _apply_dense(self, grad, var, slots):
        accum = slots[1]
        lr = self._lr_now
        mom = self._momentum
        if self.fused and self._fused_momentum(grad, var, accum, lr, mom):
            return
        if isinstance(lr, Tensor):
            lr = self._coef(lr, var, self._cache)
        # (read_value(): Tensor-Tensor ops take the C fast path; the temporaries are gone
        # before each assign, so the update can still reuse the buffer in place)
        accum.assign(accum.read_value() * mom + grad)
        if self._use_nesterov:
            var.assign_sub(grad * lr + accum.read_value() * (mom * lr))
        else:
            var.assign_sub(accum.read_value() * lr)

    def _fused_momentum(self, grad, var, accum, lr, mom):
        # (mom * lr as the op-by-op update: in Python, or a tensor op for a Tensor lr)
        if isinstance(lr, Tensor):
            lr = scalar_coefficient(lr, var, self._cache, "lr")
        return self._fused(_optim.APPLY_MOMENTUM, grad, var, (accum,),
                           (("lr", lr), ("mom_lr", mom * lr)), momentum=mom,
                           use_nesterov=self._use_nesterov)


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba) exactly as TensorFlow 1: bias correction through the
    ``beta1_power``/``beta2_power`` Variables. Slots: ``m``, ``v``."""

    _default_name = "Adam"
    _slot_specs = (("m", 0.0), ("v", 0.0))

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam"):
        super().__init__(learning_rate, use_locking, name)
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon

    def _non_slot_specs(self):
        return [("beta1_power", self._beta1), ("beta2_power", self._beta2)]

    def _prepare(self):
        b1p = self._non_slot["beta1_power"]
        b2p = self._non_slot["beta2_power"]
        lr = self._checked_lr()
        self._lr_t = lr * _m.sqrt(1 - b2p.read_value()) / (1 - b1p.read_value())
        self._cache = {}

    def _apply_dense(self, grad, var, slots):
        _, m, v = slots
        if self._fused(_optim.APPLY_ADAM, grad, var, (m, v), (("lr_t", self._lr_t),),
                       beta1=self._beta1, beta2=self._beta2, epsilon=self._epsilon):
            return
        lr_t = self._coef(self._lr_t, var, self._cache)
        m.assign_add((grad - m.read_value()) * (1 - self._beta1))
        v.assign_add((grad * grad - v.read_value()) * (1 - self._beta2))
        var.assign_sub(m.read_value() * lr_t / (_m.sqrt(v.read_value()) + self._epsilon))

    def _finish(self):
        b1p = self._non_slot["beta1_power"]
        b2p = self._non_slot["beta2_power"]
        b1p.assign(b1p.read_value() * self._beta1)
        b2p.assign(b2p.read_value() * self._beta2)


class RMSPropOptimizer(Optimizer):
    """RMSProp as TensorFlow 1 (``rms`` starts at 1, epsilon inside the root).
    Slots: ``rms``, ``momentum`` and, when ``centered``, ``mg``."""

    _default_name = "RMSProp"

    def __init__(self, learning_rate, decay=0.9, momentum=0.0, epsilon=1e-10,
                 use_locking=False, centered=False, name="RMSProp"):
        super().__init__(learning_rate, use_locking, name)
        self._decay = decay
        self._momentum = momentum
        self._epsilon = epsilon
        self._centered = bool(centered)
        self._slot_specs = ((("rms", self._rms_init), ("momentum", 0.0))
                            + ((("mg", 0.0),) if self._centered else ()))

    _rms_init = 1.0

    def _apply_dense(self, grad, var, slots):
        ms, mom = slots[1], slots[2]
        lr = self._lr_now
        c = self._centered
        if self._fused(_optim.APPLY_CENTERED_RMS_PROP if c else _optim.APPLY_RMS_PROP, grad,
                       var, (slots[3], ms, mom) if c else (ms, mom), (("lr", lr),),
                       rho=self._decay, momentum=self._momentum, epsilon=self._epsilon):
            return
        if isinstance(lr, Tensor):
            lr = self._coef(lr, var, self._cache)
        one_minus = 1 - self._decay
        ms.assign_add((grad * grad - ms.read_value()) * one_minus)
        if self._centered:
            mg = slots[3]
            mg.assign_add((grad - mg.read_value()) * one_minus)
            mgv = mg.read_value()
            denom = ms.read_value() - mgv * mgv + self._epsilon
            del mgv
        else:
            denom = ms.read_value() + self._epsilon
        step = grad * lr / _m.sqrt(denom)
        del denom
        if self._momentum:
            step = mom.read_value() * self._momentum + step
        mom.assign(step)      # (momentum 0: mom * 0 + step == step for finite values)
        del step
        var.assign_sub(mom.read_value())


class AdagradOptimizer(Optimizer):
    """``accum += g*g``; ``var -= lr * g / sqrt(accum)``. Slot: ``accumulator``."""

    _default_name = "Adagrad"

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
                 name="Adagrad"):
        if initial_accumulator_value <= 0.0:
            raise InvalidArgumentError("initial_accumulator_value must be positive: "
                             f"{initial_accumulator_value}")
        super().__init__(learning_rate, use_locking, name)
        self._slot_specs = (("accumulator", initial_accumulator_value),)

    def _apply_dense(self, grad, var, slots):
        acc = slots[1]
        lr = self._lr_now
        if self._fused(_optim.APPLY_ADAGRAD, grad, var, (acc,), (("lr", lr),)):
            return
        if isinstance(lr, Tensor):
            lr = self._coef(lr, var, self._cache)
        acc.assign_add(grad * grad)
        var.assign_sub(grad * lr / _m.sqrt(acc.read_value()))


# --- Keras names (tf.keras.optimizers re-exports these) ------------------------------

class _KerasMixin:
    """Keras's optimizer surface: an ``iterations`` counter and
    ``minimize(loss, var_list, tape=None)`` (``loss`` may be a Tensor with ``tape``)."""

    def _keras_init(self, kwargs):
        if "lr" in kwargs:                       # Keras 2's old spelling
            self._learning_rate = kwargs.pop("lr")
        for k in ("decay", "clipnorm", "clipvalue", "global_clipnorm"):
            if kwargs.get(k) not in (None, 0, 0.0):
                raise NotImplementedError(f"{type(self).__name__}({k}=...) is not supported")
            kwargs.pop(k, None)
        if kwargs:
            raise InvalidTypeError(f"{type(self).__name__}: unexpected arguments {sorted(kwargs)}")

    def _non_slot_specs(self):
        return [("iter", _IterInit)] + super()._non_slot_specs()

    def _make_non_slot(self, name, init, first):
        if init is _IterInit:
            return Variable(0, trainable=False, name=name, dtype=_dt.int64, device="cpu:0")
        return super()._make_non_slot(name, init, first)

    @property
    def iterations(self):
        """Number of ``apply_gradients`` calls (an int64 Variable on the host)."""
        it = self._non_slot.get("iter")
        if it is None:
            it = self._non_slot["iter"] = self._make_non_slot("iter", _IterInit, None)
            _restore_deferred(self)
        return it

    def _finish(self):
        super()._finish()
        self._non_slot["iter"].assign_add(1)

    def minimize(self, loss, var_list=None, grad_loss=None, name=None, tape=None,
                 global_step=None):
        gv = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(gv, global_step=global_step)

    def get_config(self):
        return {"name": self._name, "learning_rate": self._learning_rate}


class _IterInit:
    """Marker: Keras's ``iter`` counter (int64 on the host)."""


class SGD(_KerasMixin, MomentumOptimizer):
    """``tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.0, nesterov=False)``."""

    _default_name = "SGD"

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        MomentumOptimizer.__init__(self, learning_rate, momentum, name=name,
                                   use_nesterov=nesterov)
        self._keras_init(kwargs)
        if not momentum:
            self._slot_specs = ()

    def _apply_dense(self, grad, var, slots):
        # (plain SGD: GradientDescent's update, one kernel or assign_sub per variable)
        base = MomentumOptimizer if self._slot_specs else GradientDescentOptimizer
        base._apply_dense(self, grad, var, slots)


class Adam(_KerasMixin, AdamOptimizer):
    """``tf.keras.optimizers.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999,
    epsilon=1e-7)`` (the same update as AdamOptimizer)."""

    _default_name = "Adam"

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, name="Adam", **kwargs):
        if amsgrad:
            raise NotImplementedError("Adam(amsgrad=True) is not supported")
        AdamOptimizer.__init__(self, learning_rate, beta_1, beta_2, epsilon, name=name)
        self._keras_init(kwargs)


class RMSprop(_KerasMixin, RMSPropOptimizer):
    """``tf.keras.optimizers.RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0,
    epsilon=1e-7, centered=False)`` with Keras's rule: ``rms`` starts at 0 and, without
    momentum, ``var -= lr * g / (sqrt(rms) + epsilon)``."""

    _default_name = "RMSprop"
    _rms_init = 0.0

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                 centered=False, name="RMSprop", **kwargs):
        RMSPropOptimizer.__init__(self, learning_rate, rho, momentum, epsilon,
                                  centered=centered, name=name)
        self._keras_init(kwargs)

    def _apply_dense(self, grad, var, slots):
        if self._momentum:
            return RMSPropOptimizer._apply_dense(self, grad, var, slots)
        ms = slots[1]
        lr = self._lr_now
        c = self._centered
        if self._fused(_optim.APPLY_KERAS_CENTERED_RMS_PROP if c else _optim.APPLY_KERAS_RMS_PROP,
                       grad, var, (ms, slots[3]) if c else (ms,), (("lr", lr),),
                       rho=self._decay, epsilon=self._epsilon):
            return
        if isinstance(lr, Tensor):
            lr = self._coef(lr, var, self._cache)
        one_minus = 1 - self._decay
        ms.assign_add((grad * grad - ms.read_value()) * one_minus)
        if self._centered:
            mg = slots[3]
            mg.assign_add((grad - mg.read_value()) * one_minus)
            mgv = mg.read_value()
            denom = ms.read_value() - mgv * mgv
            del mgv
        else:
            denom = ms.read_value()
        step = grad * lr / (_m.sqrt(denom) + self._epsilon)
        del denom
        var.assign_sub(step)


class Adagrad(_KerasMixin, AdagradOptimizer):
    """``tf.keras.optimizers.Adagrad(learning_rate=0.001, initial_accumulator_value=0.1)``."""

    _default_name = "Adagrad"

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7,
                 name="Adagrad", **kwargs):
        AdagradOptimizer.__init__(self, learning_rate, initial_accumulator_value, name=name)
        self._keras_init(kwargs)


#: the names ``get`` knows (case-insensitive): Keras's, built with Keras's defaults
_BY_NAME = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adagrad": Adagrad}


def _lookup(name, what):
    cls = _BY_NAME.get(name.lower())
    if cls is None:
        raise InvalidArgumentError(
            f"optimizers.get: Unknown optimizer {what}; known names (case-insensitive): "
            f"{', '.join(sorted(_BY_NAME))}. Pass one of them, an optimizer instance or "
            "a config dict {'class_name': 'Adam', 'config': {'learning_rate': 0.01}}.")
    return cls


def get(identifier):
    """An optimizer from ``identifier`` (``tf.keras.optimizers.get``):

    * a name, case-insensitive: ``"sgd"``, ``"adam"``, ``"rmsprop"``, ``"adagrad"`` (built
      with Keras's defaults);
    * a config dict ``{"class_name": "Adam", "config": {"learning_rate": 0.01}}``;
    * an optimizer object (an :class:`Optimizer`, or anything with ``apply_gradients``
      such as a ``LossScaleOptimizer``): returned as is.

    >>> import tapeflow as tf
    >>> type(tf.keras.optimizers.get("adam")).__name__
    'Adam'
    >>> sgd = tf.keras.optimizers.get({"class_name": "SGD", "config": {"learning_rate": 0.5}})
    >>> sgd.learning_rate
    0.5
    """
    if isinstance(identifier, Optimizer) or (
            not isinstance(identifier, (str, dict)) and hasattr(identifier, "apply_gradients")):
        return identifier
    if isinstance(identifier, str):
        return _lookup(identifier, repr(identifier))()
    if isinstance(identifier, dict):
        return from_config("optimizers.get", identifier, _lookup)
    raise InvalidTypeError(
        "optimizers.get: expected an optimizer name (such as 'adam'), a config dict or an "
        f"optimizer object, got {type(identifier).__name__} {identifier!r}")


#: the name ``tf.train`` exported before ``get`` (kept)
get_optimizer = get


# --- the global step -----------------------------------------------------------------

_global_step = None
_gs_lock = threading.Lock()


def get_global_step(graph=None):
    """The process's global step Variable, or None before it was created."""
    return _global_step


def create_global_step(graph=None):
    """Create the global step (an int64, non-trainable Variable named ``global_step``
    on the host, value 0); raises ValueError if it already exists."""
    global _global_step
    with _gs_lock:
        if _global_step is not None:
            raise InvalidArgumentError('"global_step" already exists.')
        _global_step = Variable(0, trainable=False, name="global_step", dtype=_dt.int64,
                                device="cpu:0")
        return _global_step


def get_or_create_global_step(graph=None):
    """The one global step of this process (created at 0 on first call).

    >>> import tapeflow as tf
    >>> tf.train.reset_global_step()
    >>> step = tf.train.get_or_create_global_step()
    >>> step is tf.train.get_or_create_global_step(), step.dtype, int(step)
    (True, tf.int64, 0)
    """
    gs = _global_step
    if gs is not None:
        return gs
    try:
        return create_global_step()
    except ValueError:
        return _global_step


def reset_global_step():
    """Forget the global step, so the next ``get_or_create_global_step()`` makes a new
    one at 0 (for tests, and for several independent runs in one process). Objects that
    already hold the old Variable keep it."""
    global _global_step
    with _gs_lock:
        _global_step = None
