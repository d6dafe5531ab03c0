"""Optimizers with TensorFlow 1's names and update rules (the global step they increment
is :mod:`tapeflow.train`'s).

Long file: the optimizers share one all-or-nothing ``apply_gradients`` and its state
(slots, non-slot Variables, configs); each class is a short update rule over it.

``apply_gradients(grads_and_vars, global_step=None)`` updates each Variable in place
(``var.assign_sub(...)``, buffer donation when nobody else holds the old value) with
tapeflow ops, under ``stop_all_recording()`` so no tape records the update. A ``None``
gradient is skipped with a warning naming the variable. All or nothing: every
(gradient, variable) pair is validated first -- a floating-point Variable, a gradient
of its dtype and shape (copied to its device) -- and every hyperparameter of the step
(the learning rate, ``momentum``, the betas, ``epsilon``, ``decay``/``rho``: a real
number, a 0-d tensor or Variable, or a callable returning one; a tensor of any other
shape, a string, None, a complex number or a bool is refused naming the optimizer, the
hyperparameter and what it got); then the slots are created and every new value is
computed; only then is anything written. No Variable, slot, beta power, iteration
counter or ``global_step`` changes unless everything passed; the error says so (the
checks: :mod:`.optimizer_checks`). Inside a ``tf.function`` the hyperparameters other
than the learning rate are read at trace time (a Variable one is refused). One
``apply_gradients`` runs at a time per optimizer (a lock: its per-step state is shared).
Slots (Adam's ``m``/``v``, Momentum's accumulator...) are made lazily, one per
variable, on that variable's device; ``variables()`` lists them with the non-slot state
(Adam's beta powers).

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
Every optimizer has Keras's ``get_config``/``from_config`` and ``build(var_list)``
(its state made at once: a loaded model's optimizer state is assigned into it).
"""

from __future__ import annotations

import threading
import warnings

import numpy as np

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..ops import math as _m
from ..ops.array_creation import fill as _fill
from ..errors import (FailedPreconditionError, InvalidArgumentError, InvalidTypeError,
                              UnimplementedError)
from ..autodiff.tape import GradientTape
from ..runtime.context import stop_all_recording
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..layers.naming import from_config
from ..ops import fused as _optim
from . import checkpoint as _checkpoint_mod
from .fused_update import (FUSED_DEFAULT, kernel_for, prepare_fused, run_fused,
                           scalar_coefficient)
from .optimizer_checks import (check_step_args, checked_gradient,
                               checked_values, hyperparameter as _hyperparameter, short as _short,
                               unpack)

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "RMSPropOptimizer", "AdagradOptimizer", "SGD", "Adam", "RMSprop", "Adagrad",
           "get", "get_optimizer"]


#: functions ``hook(optimizer, grads_and_vars, global_step, aggregate)`` that
#: ``apply_gradients`` consults first (``tf.distribute`` adds one: inside
#: ``strategy.run`` it sums the gradients over the replicas and applies them once); a hook
#: returning something other than NotImplemented has done the step. Empty: no cost.
aggregation_hooks: list = []


def _base_name(var):
    """``'dense/kernel:0'`` -> ``'dense/kernel'`` (TensorFlow's op name of a variable)."""
    name = var.name
    head, sep, tail = name.rpartition(":")
    return head if sep and tail.isdigit() else name


def _restore_deferred(obj):
    restore_deferred = _checkpoint_mod.restore_deferred
    restore_deferred(obj)


class Optimizer:
    """Base class: subclasses declare ``_slot_specs`` (``(slot name, initial value)``
    in creation order) and ``_hyperparameters``, and implement the update twice, each
    without writing: ``_dense(grad, var, slot values)`` (the op-by-op update: the
    variable's delta and the new slot values) and ``_fused_op()``/``_fused_args(var,
    state)`` (the fused kernel's op, slots, coefficients and attrs). ``apply_gradients``
    validates, computes every update, then writes them all.

    Checkpointing (``tf.train.Checkpoint``): ``_trackable_children()`` returns the
    non-slot variables (``beta1_power``...); slots are saved next to the variable
    they belong to (``model/dense/kernel/.OPTIMIZER_SLOT/optimizer/m``) through
    ``_checkpoint_slots()``, so they restore by the variable's path even when the
    optimizer has not created them yet (``_defer_slot_restoration``).
    """

    _slot_specs: tuple = ()          # ((slot name, initial fill value), ...)
    _default_name = "Optimizer"
    #: the hyperparameters besides the learning rate, read once per step:
    #: ``((attribute, the name the user passed it as), ...)``
    _hyperparameters: tuple = ()
    #: one fused kernel per variable and step where the device has it (train/fused_update.py)
    fused = FUSED_DEFAULT

    def __init__(self, learning_rate, use_locking=False, name=None):
        if learning_rate is None:
            raise InvalidArgumentError(
                f"{type(self).__name__}: learning_rate must be given (a Python float or a 0-d "
                "tensor)")
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

    def get_name(self):
        return self._name

    # --- config (Keras serialization: tf.keras.optimizers.get, model.save) ---------------
    #: ``((constructor argument, attribute), ...)`` besides ``learning_rate`` and ``name``
    _config_keys: tuple = ()

    def get_config(self) -> dict:
        """The constructor's arguments that rebuild this optimizer (``from_config``): the
        name, the learning rate and the class's hyperparameters, a 0-d tensor or Variable
        as its current value (the state -- slots, step counters -- is not config: a
        ``.keras`` file saves it with the weights)."""
        cfg = {"name": self._name, "learning_rate": _config_value(self._learning_rate)}
        for public, attr in self._config_keys:
            cfg[public] = _config_value(getattr(self, attr))
        return cfg

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new optimizer (no state yet) from ``get_config()``'s dict."""
        return cls(**config)

    def build(self, var_list):
        """Create the state for ``var_list`` now (the optimizer-wide Variables and each
        variable's slots) instead of at the first ``apply_gradients``, as Keras's
        ``optimizer.build``; a loaded model's optimizer state is assigned into them."""
        var_list = [v for v in var_list if isinstance(v, Variable)]
        if not var_list:
            return
        with self._apply_lock, stop_all_recording():
            if len(self._non_slot) < len(self._non_slot_specs()):
                self._create_non_slot([(None, v) for v in var_list])
            self._non_slot_ready = True
            for v in var_list:
                st = self._state.get(id(v))
                if st is None or st[0] is not v:
                    self._create_slots(v)

    def non_slot_variables(self) -> dict:
        """``{name: Variable}`` of the optimizer-wide state (``iter``, ``beta1_power``)."""
        return dict(self._non_slot)

    def slot_variables(self) -> list:
        """``[(variable, slot name, slot Variable), ...]`` of the slots created so far."""
        return self._checkpoint_slots()

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
        vs = [v for _, v in pairs]
        first = min(vs, key=lambda v: v.name)
        # float32 at least -- in float16 or bfloat16 a beta power stops moving (0.999
        # rounds to 1) and every variable's update would use it -- and float64 where a
        # variable is double: not the dtype of whichever variable sorts first
        wide = any(v.dtype in (_dt.float64, _dt.complex128) for v in vs)
        dtype = _dt.float64 if wide else _dt.float32
        for name, init in self._non_slot_specs():
            if name not in self._non_slot:
                self._non_slot[name] = self._make_non_slot(name, init, first, dtype)
        _restore_deferred(self)

    def _make_non_slot(self, name, init, first, dtype):
        return Variable(init, trainable=False, name=name, dtype=dtype, device=first._device)

    def _trackable_children(self):
        return dict(self._non_slot)

    def variables(self):
        """The optimizer's state: non-slot Variables, then the slots (creation order)."""
        out = list(self._non_slot.values())
        for st in self._state.values():
            out.extend(st[1:])
        return out

    # --- the update ------------------------------------------------------------------
    def _check_hyperparameters(self):
        """Read and check every hyperparameter of this step, before anything is created
        or written: ``self._lr_now`` (a Python number or a 0-d floating-point Tensor)
        and ``self._h`` (attribute -> Python float: ``momentum``, the betas...)."""
        self._lr_now = self._checked_lr()
        h = {}
        for attr, public in self._hyperparameters:
            v = getattr(self, attr)
            h[attr] = v if type(v) is float else _hyperparameter(self, public, v, False)
        self._h = h

    def _prepare(self):
        """Per-step coefficients derived from the checked hyperparameters, once per
        ``apply_gradients`` after the slots exist, and the step's cache of them cast
        per variable dtype/device. Adam overrides it (``lr_t``)."""
        self._cache = {}

    def _checked_lr(self):
        """The learning rate of this step: a real number or a 0-d floating-point
        Tensor (checked before any Variable is updated)."""
        lr = self._learning_rate
        if type(lr) is float:
            return lr
        return _hyperparameter(self, "learning_rate", lr, True)

    def _finish_updates(self):
        """``[(Variable, method, value), ...]``: the writes after every variable's update
        (Adam's beta powers, Keras's ``iterations``), computed before anything is written."""
        return []

    def _fused_op(self):
        """The fused update op of this optimizer (``tapeflow.ops.fused``), or None."""
        return None

    def _fused_args(self, var, st):
        """``(slot Variables in the op's order, ((name, coefficient), ...), attrs)`` of
        the fused update of ``var`` (``st``: ``(var, *slots)``)."""
        raise NotImplementedError

    def _dense(self, grad, var, slots):
        """The op-by-op update, computed without writing: ``slots`` are the slots'
        current values (Tensors, in ``_slot_specs`` order); returns ``(delta, new slot
        values)``, the variable's new value being ``var - delta``."""
        raise NotImplementedError

    def apply_gradients(self, grads_and_vars, global_step=None, name=None,
                        experimental_aggregate_gradients=True):
        """Apply ``[(gradient, variable), ...]``; a ``None`` gradient is skipped with a
        warning naming the variable. Increments ``global_step`` by one when given.
        Inside a ``tf.distribute`` strategy's ``run`` the gradients are summed over the
        replicas first (not when ``experimental_aggregate_gradients`` is False) and
        applied once.

        All or nothing: every pair and every hyperparameter is checked, the slots are
        created and every new value computed before the first Variable changes; a bad
        pair or hyperparameter raises InvalidArgumentError (or InvalidTypeError) naming
        it, and then no variable, slot, iteration counter or ``global_step`` has
        changed."""
        for hook in aggregation_hooks:
            done = hook(self, grads_and_vars, global_step, experimental_aggregate_gradients)
            if done is not NotImplemented:
                return done
        pairs, skipped = unpack(self, grads_and_vars)
        for v in skipped:
            warnings.warn(
                f"{type(self).__name__}: the gradient of Variable '{v.name}' is None; it is not "
                "updated (the loss does not depend on it, or the path is not differentiable).",
                UserWarning, stacklevel=2)
        check_step_args(self, pairs, skipped, global_step)
        with self._apply_lock, stop_all_recording():
            # 1. validate every pair and every hyperparameter: nothing is created yet
            checked = [(checked_gradient(self, g, v, i), v) for g, v, i in pairs]
            self._check_hyperparameters()
            # 2. make what the update needs (new Variables only; no existing one changes)
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
            del checked
            self._prepare()
            # 3. compute every update (fused: the kernel and its coefficients; op-by-op:
            # the new slot values and the variable's delta); still nothing is written
            op = self._fused_op() if self.fused else None
            fused, deltas, pending = [], [], {}
            for g, v, st in work:
                fn = None if op is None else kernel_for(op, v)
                if fn is not None:
                    slots, coefs, attrs = self._fused_args(v, st)
                    fused.append((prepare_fused(op, v, coefs, attrs, self._cache, fn),
                                  v, slots, g))
                    continue
                entry = pending.get(id(v))         # (the same Variable twice: in order)
                if entry is None:
                    cur = [s.read_value() for s in st[1:]]
                    entry = pending[id(v)] = [st, cur, cur]
                cur = entry[2]
                delta, new = self._dense(g, v, cur)
                entry[2] = checked_values(self, v, g, delta, st, cur, new)
                deltas.append((v, delta))
            finish = self._finish_updates()
            del work
            # 4. write: the fused kernels, the op-by-op deltas (assign_sub: atomic per
            # Variable), the slots, the step's own state, global_step
            for plan, v, slots, g in fused:
                run_fused(op, plan, v, slots, g)
            for v, delta in deltas:
                v.assign_sub(delta)
            for st, old, new in pending.values():
                for s, a, b in zip(st[1:], old, new):
                    if a is not b:
                        s.assign(b)
            for v, method, value in finish:
                getattr(v, method)(value)
            if global_step is not None:
                global_step.assign_add(1)
        return None

    def _validate_step(self, grads_and_vars, global_step=None):
        """Check what ``apply_gradients(grads_and_vars, global_step)`` would check --
        every pair, every hyperparameter -- and raise its error; create and write
        nothing (``LossScaleOptimizer`` runs it before it decides to skip a step)."""
        pairs, skipped = unpack(self, grads_and_vars)
        check_step_args(self, pairs, skipped, global_step)
        with self._apply_lock, stop_all_recording():
            for g, v, i in pairs:
                checked_gradient(self, g, v, i)
            self._check_hyperparameters()

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

    def _lr_for(self, var):
        """The step's learning rate for the op-by-op update of ``var``: the Python
        number, or the 0-d Tensor cast to its dtype and moved to its device (cached)."""
        lr = self._lr_now
        if isinstance(lr, Tensor):
            lr = scalar_coefficient(lr, var, self._cache, "lr")
        return lr


def _config_value(v):
    """A hyperparameter as a config holds it: a 0-d tensor or Variable as its number."""
    if isinstance(v, (Tensor, Variable)) and not v.shape.as_list():
        return v.numpy().item()
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    return v


class GradientDescentOptimizer(Optimizer):
    """``var -= learning_rate * gradient``."""

    _default_name = "GradientDescent"

    def __init__(self, learning_rate, use_locking=False, name="GradientDescent"):
        super().__init__(learning_rate, use_locking, name)

    def _fused_op(self):
        return _optim.APPLY_GRADIENT_DESCENT

    def _fused_args(self, var, st):
        return (), (("lr", self._lr_now),), {}

    def _dense(self, grad, var, slots):
        return grad * self._lr_for(var), ()


class MomentumOptimizer(Optimizer):
    """``accum = accum * momentum + g``; ``var -= lr * accum`` (Nesterov:
    ``var -= lr * g + lr * momentum * accum``). Slot: ``momentum``."""

    _default_name = "Momentum"
    _slot_specs = (("momentum", 0.0),)
    _hyperparameters = (("_momentum", "momentum"),)
    _config_keys = (("momentum", "_momentum"), ("use_nesterov", "_use_nesterov"))

    def __init__(self, learning_rate, momentum, use_locking=False, name="Momentum",
                 use_nesterov=False):
        super().__init__(learning_rate, use_locking, name)
        self._momentum = momentum
        self._use_nesterov = bool(use_nesterov)

    def _fused_op(self):
        return _optim.APPLY_MOMENTUM

    def _fused_args(self, var, st):
        # (mom * lr as the op-by-op update: in Python, or a tensor op for a Tensor lr)
        mom = self._h["_momentum"]
        lr = self._lr_for(var)
        return (st[1],), (("lr", lr), ("mom_lr", mom * lr)), {
            "momentum": mom, "use_nesterov": self._use_nesterov}

    def _dense(self, grad, var, slots):
        lr = self._lr_for(var)
        mom = self._h["_momentum"]
        accum = slots[0] * mom + grad
        if self._use_nesterov:
            return grad * lr + accum * (mom * lr), (accum,)
        return accum * lr, (accum,)


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba) exactly as TensorFlow 1: bias correction through the
    ``beta1_power``/``beta2_power`` Variables. Slots: ``m``, ``v``."""

    _default_name = "Adam"
    _slot_specs = (("m", 0.0), ("v", 0.0))
    _hyperparameters = (("_beta1", "beta1"), ("_beta2", "beta2"), ("_epsilon", "epsilon"))
    _config_keys = (("beta1", "_beta1"), ("beta2", "_beta2"), ("epsilon", "_epsilon"))

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 use_locking=False, name="Adam"):
        super().__init__(learning_rate, use_locking, name)
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon

    def _non_slot_specs(self):
        # (the betas checked: a callable's or a Variable's value, a float)
        names = dict(self._hyperparameters)
        return [(p, _hyperparameter(self, names[a], getattr(self, a), False))
                for p, a in (("beta1_power", "_beta1"), ("beta2_power", "_beta2"))]

    def _prepare(self):
        b1p = self._non_slot["beta1_power"]
        b2p = self._non_slot["beta2_power"]
        self._lr_t = self._lr_now * _m.sqrt(1 - b2p.read_value()) / (1 - b1p.read_value())
        self._cache = {}

    def _fused_op(self):
        return _optim.APPLY_ADAM

    def _fused_args(self, var, st):
        h = self._h
        return st[1:], (("lr_t", self._lr_t),), {
            "beta1": h["_beta1"], "beta2": h["_beta2"], "epsilon": h["_epsilon"]}

    def _dense(self, grad, var, slots):
        h = self._h
        m, v = slots
        lr_t = scalar_coefficient(self._lr_t, var, self._cache, "lr_t")
        m = m + (grad - m) * (1 - h["_beta1"])
        v = v + (grad * grad - v) * (1 - h["_beta2"])
        return m * lr_t / (_m.sqrt(v) + h["_epsilon"]), (m, v)

    def _finish_updates(self):
        h = self._h
        b1p = self._non_slot["beta1_power"]
        b2p = self._non_slot["beta2_power"]
        return [(b1p, "assign", b1p.read_value() * h["_beta1"]),
                (b2p, "assign", b2p.read_value() * h["_beta2"])]


class RMSPropOptimizer(Optimizer):
    """RMSProp as TensorFlow 1 (``rms`` starts at 1, epsilon inside the root).
    Slots: ``rms``, ``momentum`` and, when ``centered``, ``mg``."""

    _default_name = "RMSProp"
    _hyperparameters = (("_decay", "decay"), ("_momentum", "momentum"),
                        ("_epsilon", "epsilon"))
    _config_keys = (("decay", "_decay"), ("momentum", "_momentum"), ("epsilon", "_epsilon"),
                    ("centered", "_centered"))

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

    def _fused_op(self):
        return _optim.APPLY_CENTERED_RMS_PROP if self._centered else _optim.APPLY_RMS_PROP

    def _fused_args(self, var, st):
        h = self._h
        return ((st[3], st[1], st[2]) if self._centered else st[1:3]), (
            ("lr", self._lr_now),), {"rho": h["_decay"], "momentum": h["_momentum"],
                                     "epsilon": h["_epsilon"]}

    def _dense(self, grad, var, slots):
        h = self._h
        lr = self._lr_for(var)
        ms, mom = slots[0], slots[1]
        one_minus = 1 - h["_decay"]
        ms = ms + (grad * grad - ms) * one_minus
        if self._centered:
            mg = slots[2]
            mg = mg + (grad - mg) * one_minus
            denom = ms - mg * mg + h["_epsilon"]
        else:
            denom = ms + h["_epsilon"]
        step = grad * lr / _m.sqrt(denom)
        del denom
        if h["_momentum"]:
            step = mom * h["_momentum"] + step
        # (momentum 0: the momentum slot is the step, as mom * 0 + step for finite values)
        return step, ((ms, step, mg) if self._centered else (ms, step))


class AdagradOptimizer(Optimizer):
    """``accum += g*g``; ``var -= lr * g / sqrt(accum)``. Slot: ``accumulator``."""

    _default_name = "Adagrad"
    _config_keys = (("initial_accumulator_value", "_initial_accumulator_value"),)

    def __init__(self, learning_rate, initial_accumulator_value=0.1, use_locking=False,
                 name="Adagrad"):
        init = _hyperparameter(self, "initial_accumulator_value", initial_accumulator_value,
                               False, when=".")
        if not init > 0.0:
            raise InvalidArgumentError(
                f"{type(self).__name__}: initial_accumulator_value must be positive, got "
                f"{initial_accumulator_value!r}")
        super().__init__(learning_rate, use_locking, name)
        self._slot_specs = (("accumulator", init),)
        self._initial_accumulator_value = init

    def _fused_op(self):
        return _optim.APPLY_ADAGRAD

    def _fused_args(self, var, st):
        return (st[1],), (("lr", self._lr_now),), {}

    def _dense(self, grad, var, slots):
        acc = slots[0] + grad * grad
        return grad * self._lr_for(var) / _m.sqrt(acc), (acc,)


# --- Keras names (tf.keras.optimizers re-exports these) ------------------------------

class _KerasMixin:
    """Keras's optimizer surface: an ``iterations`` counter and
    ``minimize(loss, var_list, tape=None)`` (``loss`` may be a Tensor with ``tape``)."""

    def _keras_init(self, kwargs):
        if "lr" in kwargs:                       # Keras 2's old spelling
            self._learning_rate = kwargs.pop("lr")
        for k in ("decay", "clipnorm", "clipvalue", "global_clipnorm"):
            v = kwargs.pop(k, None)
            if v is None or (isinstance(v, (int, float, np.integer, np.floating))
                             and not isinstance(v, (bool, np.bool_)) and v == 0):
                continue
            raise UnimplementedError(
                f"{type(self).__name__}({k}={_short(v)}) is not supported: leave {k} unset "
                "(clip the gradients yourself, e.g. with tf.clip_by_global_norm, before "
                "apply_gradients)")
        if kwargs:
            raise InvalidTypeError(f"{type(self).__name__}: unexpected arguments {sorted(kwargs)}")

    def _non_slot_specs(self):
        return [("iter", _IterInit)] + super()._non_slot_specs()

    def _make_non_slot(self, name, init, first, dtype=None):
        if init is _IterInit:
            return Variable(0, trainable=False, name=name, dtype=_dt.int64, device="cpu:0")
        return super()._make_non_slot(name, init, first, dtype)

    @property
    def iterations(self):
        """Number of ``apply_gradients`` calls (an int64 Variable on the host)."""
        it = self._non_slot.get("iter")
        if it is None:
            it = self._non_slot["iter"] = self._make_non_slot("iter", _IterInit, None, None)
            _restore_deferred(self)
        return it

    def _finish_updates(self):
        return super()._finish_updates() + [(self._non_slot["iter"], "assign_add", 1)]

    def minimize(self, loss, var_list=None, grad_loss=None, name=None, tape=None,
                 global_step=None):
        gv = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(gv, global_step=global_step)


class _IterInit:
    """Marker: Keras's ``iter`` counter (int64 on the host)."""


class SGD(_KerasMixin, MomentumOptimizer):
    """``tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.0, nesterov=False)``."""

    _default_name = "SGD"
    _config_keys = (("momentum", "_momentum"), ("nesterov", "_use_nesterov"))

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        MomentumOptimizer.__init__(self, learning_rate, momentum, name=name,
                                   use_nesterov=nesterov)
        self._keras_init(kwargs)
        # (plain SGD: GradientDescent's update, one kernel or assign_sub per variable; a
        # momentum that is not a plain number (a tensor, a callable) keeps the slot)
        if isinstance(momentum, (int, float)) and not isinstance(momentum, bool) \
                and not momentum:
            self._slot_specs = ()

    def _fused_op(self):
        return (MomentumOptimizer if self._slot_specs else GradientDescentOptimizer
                )._fused_op(self)

    def _fused_args(self, var, st):
        return (MomentumOptimizer if self._slot_specs else GradientDescentOptimizer
                )._fused_args(self, var, st)

    def _dense(self, grad, var, slots):
        return (MomentumOptimizer if self._slot_specs else GradientDescentOptimizer
                )._dense(self, grad, var, slots)


class Adam(_KerasMixin, AdamOptimizer):
    """``tf.keras.optimizers.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999,
    epsilon=1e-7)`` (the same update as AdamOptimizer)."""

    _default_name = "Adam"
    _hyperparameters = (("_beta1", "beta_1"), ("_beta2", "beta_2"), ("_epsilon", "epsilon"))
    _config_keys = (("beta_1", "_beta1"), ("beta_2", "_beta2"), ("epsilon", "_epsilon"))

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, name="Adam", **kwargs):
        if amsgrad:
            raise UnimplementedError("Adam(amsgrad=True) is not supported")
        AdamOptimizer.__init__(self, learning_rate, beta_1, beta_2, epsilon, name=name)
        self._keras_init(kwargs)


class RMSprop(_KerasMixin, RMSPropOptimizer):
    """``tf.keras.optimizers.RMSprop(learning_rate=0.001, rho=0.9, momentum=0.0,
    epsilon=1e-7, centered=False)`` with Keras's rule: ``rms`` starts at 0 and, without
    momentum, ``var -= lr * g / (sqrt(rms) + epsilon)``."""

    _default_name = "RMSprop"
    _rms_init = 0.0
    _hyperparameters = (("_decay", "rho"), ("_momentum", "momentum"), ("_epsilon", "epsilon"))
    _config_keys = (("rho", "_decay"), ("momentum", "_momentum"), ("epsilon", "_epsilon"),
                    ("centered", "_centered"))

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                 centered=False, name="RMSprop", **kwargs):
        RMSPropOptimizer.__init__(self, learning_rate, rho, momentum, epsilon,
                                  centered=centered, name=name)
        self._keras_init(kwargs)

    def _fused_op(self):
        if self._h["_momentum"]:
            return RMSPropOptimizer._fused_op(self)
        return (_optim.APPLY_KERAS_CENTERED_RMS_PROP if self._centered
                else _optim.APPLY_KERAS_RMS_PROP)

    def _fused_args(self, var, st):
        h = self._h
        if h["_momentum"]:
            return RMSPropOptimizer._fused_args(self, var, st)
        return ((st[1], st[3]) if self._centered else (st[1],)), (("lr", self._lr_now),), {
            "rho": h["_decay"], "epsilon": h["_epsilon"]}

    def _dense(self, grad, var, slots):
        h = self._h
        if h["_momentum"]:
            return RMSPropOptimizer._dense(self, grad, var, slots)
        lr = self._lr_for(var)
        ms = slots[0]
        one_minus = 1 - h["_decay"]
        ms = ms + (grad * grad - ms) * one_minus
        if self._centered:
            mg = slots[2]
            mg = mg + (grad - mg) * one_minus
            denom = ms - mg * mg
        else:
            denom = ms
        step = grad * lr / (_m.sqrt(denom) + h["_epsilon"])
        return step, ((ms, slots[1], mg) if self._centered else (ms, slots[1]))


class Adagrad(_KerasMixin, AdagradOptimizer):
    """``tf.keras.optimizers.Adagrad(learning_rate=0.001, initial_accumulator_value=0.1)``
    (TensorFlow 1's update: ``epsilon`` is accepted and not used)."""

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
