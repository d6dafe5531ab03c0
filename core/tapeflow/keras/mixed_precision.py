"""``tf.keras.mixed_precision``: dtype policies (:mod:`tapeflow.layers.base`) and the
``LossScaleOptimizer`` for float16 training, as in TensorFlow.

float16 has 5 exponent bits: gradients below ~6e-8 flush to zero. Loss scaling
multiplies the loss by a large factor before differentiating and divides the
gradients by it before the update; the dynamic scale halves whenever a gradient
overflows (that step is skipped) and doubles after ``dynamic_growth_steps`` finite
steps in a row. bfloat16 has float32's exponent range and needs no scaling.

>>> import tapeflow as tf
>>> opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1),
...                                                   initial_scale=8.0)
>>> x = tf.Variable(1.0)
>>> with tf.GradientTape() as tape:
...     loss = opt.get_scaled_loss(x * x)        # 8 * x**2
>>> grads = opt.get_unscaled_gradients(tape.gradient(loss, [x]))
>>> float(grads[0])
2.0
>>> opt.apply_gradients(zip(grads, [x])); round(float(x), 4)
0.8
>>> opt.apply_gradients([(tf.constant(float("inf")), x)])   # skipped, scale halved
>>> round(float(x), 4), float(opt.loss_scale)
(0.8, 4.0)
"""

from __future__ import annotations

from ..layers.base import POLICY_NAMES, Policy, global_policy, set_global_policy
from ..ops import math as _m
from ..ops import reductions as _r
from .. import dtypes as _dt
from ..runtime.context import HOOKS as _HOOKS
from ..runtime.context import stop_all_recording
from ..runtime.dispatch import convert_to_tensor
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..train.optimizers import aggregation_hooks

__all__ = ["Policy", "global_policy", "set_global_policy", "LossScaleOptimizer",
           "POLICY_NAMES"]


class LossScaleOptimizer:
    """Wraps ``inner_optimizer`` with (dynamic) loss scaling.

    Args:
        inner_optimizer: the optimizer that applies the unscaled gradients.
        dynamic: adjust the scale (True) or keep ``initial_scale`` fixed.
        initial_scale: the first scale (default ``2**15``).
        dynamic_growth_steps: finite steps in a row after which the scale doubles.

    In a custom loop: ``scaled = opt.get_scaled_loss(loss)`` under the tape, then
    ``opt.apply_gradients(zip(opt.get_unscaled_gradients(tape.gradient(scaled, vars)),
    vars))``. ``Model.fit`` does this itself, and ``minimize`` too. ``apply_gradients``
    skips the whole step (no variable or slot changes) when any gradient holds an inf
    or NaN, halving the scale (never below 1). The scale and the count of good steps
    are Variables, saved and restored by ``tf.train.Checkpoint`` with the inner
    optimizer's state.

    Under a ``tf.distribute`` strategy with several replicas in sync (``fit``, or
    ``apply_gradients`` inside ``strategy.run``), the unscaled gradients are first summed
    over every replica and worker; finiteness is decided once on the sums, so an inf on
    one replica skips the step on all of them, and the scale changes once per step, as
    in one process.
    """

    def __init__(self, inner_optimizer, dynamic=True, initial_scale=2.0 ** 15,
                 dynamic_growth_steps=2000):
        if not hasattr(inner_optimizer, "apply_gradients"):
            raise InvalidTypeError(
                "LossScaleOptimizer: inner_optimizer must be an optimizer (with "
                f"apply_gradients), got {inner_optimizer!r}")
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise InvalidTypeError("LossScaleOptimizer: inner_optimizer is already a "
                                   "LossScaleOptimizer; wrap the optimizer only once")
        try:
            scale = float(initial_scale)
        except (TypeError, ValueError):
            scale = float("nan")
        if not scale >= 1.0 or scale == float("inf"):
            raise InvalidArgumentError(
                f"LossScaleOptimizer: initial_scale must be a finite number >= 1, got "
                f"{initial_scale!r}")
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, int) \
                or dynamic_growth_steps < 1:
            raise InvalidArgumentError(
                "LossScaleOptimizer: dynamic_growth_steps must be an int >= 1, got "
                f"{dynamic_growth_steps!r}")
        self._inner = inner_optimizer
        self._dynamic = bool(dynamic)
        self._growth_steps = dynamic_growth_steps
        self._initial_scale = scale
        self._scale = Variable(scale, trainable=False, name="loss_scale", dtype=_dt.float32,
                               device="cpu:0")
        self._good_steps = Variable(0, trainable=False, name="good_steps", dtype=_dt.int64,
                                    device="cpu:0")

    # --- what Keras exposes ------------------------------------------------------------
    @property
    def inner_optimizer(self):
        return self._inner

    @property
    def dynamic(self) -> bool:
        return self._dynamic

    @property
    def loss_scale(self) -> Tensor:
        """The current scale (a float32 scalar Tensor)."""
        return self._scale.read_value()

    @property
    def dynamic_counter(self) -> Tensor:
        """Finite steps since the scale last changed."""
        return self._good_steps.read_value()

    @property
    def initial_scale(self) -> float:
        return self._initial_scale

    @property
    def dynamic_growth_steps(self) -> int:
        return self._growth_steps

    def __getattr__(self, name):       # learning_rate, iterations, get_config...
        if name.startswith("__") or name in ("_inner",):
            raise AttributeError(name)
        return getattr(self._inner, name)

    # --- scaling -----------------------------------------------------------------------
    def get_scaled_loss(self, loss):
        """``loss * loss_scale`` (in the loss's dtype); a callable gives a callable."""
        if callable(loss) and not isinstance(loss, (Tensor, Variable)):
            return lambda: self.get_scaled_loss(loss())
        if not isinstance(loss, (Tensor, Variable)):
            raise InvalidTypeError(f"get_scaled_loss expects a loss Tensor, got {loss!r}")
        return loss * _m.cast(self._scale.read_value(), loss.dtype)

    def get_unscaled_gradients(self, grads):
        """Each gradient divided by the scale (``None`` stays ``None``), in its dtype."""
        inv = 1.0 / self._scale.read_value()
        return [None if g is None else g * _m.cast(inv, g.dtype) for g in grads]

    # --- the step ----------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        """Apply already unscaled gradients with the inner optimizer, unless one is not
        finite: then nothing is updated and the scale halves (dynamic scaling).

        Bad input (a pair, a gradient's shape or dtype, a hyperparameter of the inner
        optimizer) raises the inner optimizer's error before anything changes, the
        scale included, whether or not a gradient is finite."""
        if _HOOKS.tracer.current() is not None:
            # it decides in Python whether to skip the step and how to change the scale:
            # traced, that decision would be frozen into the graph
            raise UnimplementedError(
                "LossScaleOptimizer.apply_gradients cannot run inside tf.function yet: it "
                "decides on the host whether the gradients are finite (skip the step, halve "
                "the scale), which a traced graph would freeze at its first call. Compute "
                "the loss and gradients in a tf.function and call apply_gradients eagerly, "
                "or use the inner optimizer with a fixed loss scale inside tf.function.")
        pairs = list(grads_and_vars)
        step = kwargs["global_step"] if "global_step" in kwargs else args[0] if args else None
        validate = getattr(self._inner, "_validate_step", None)
        if validate is not None:        # (a tapeflow optimizer: everything it checks)
            validate(pairs, step)
        # under a tf.distribute strategy with several replicas in sync, its hook sums the
        # (unscaled) gradients over every replica and worker and calls this method once
        # with the sums: the step is kept or skipped, and the scale changed, once for all
        aggregate = kwargs.get("experimental_aggregate_gradients", True)
        for hook in aggregation_hooks:
            done = hook(self, pairs, step, aggregate)
            if done is not NotImplemented:
                return done
        with stop_all_recording():
            finite = all(bool(_r.reduce_all(_m.is_finite(g))) for g in _gradients(pairs)
                         if g.dtype.is_floating or g.dtype.is_complex)
        if not finite:
            if self._dynamic:
                self._scale.assign(max(float(self._scale) / 2.0, 1.0))
                self._good_steps.assign(0)
            return None
        out = self._inner.apply_gradients(pairs, *args, **kwargs)
        if self._dynamic:
            n = int(self._good_steps) + 1
            if n >= self._growth_steps:
                scale = float(self._scale) * 2.0
                if scale != float("inf"):
                    self._scale.assign(scale)
                n = 0
            self._good_steps.assign(n)
        return out

    def compute_gradients(self, loss, var_list=None, grad_loss=None, tape=None, **kwargs):
        """The inner optimizer's ``compute_gradients`` of the scaled loss, unscaled."""
        gv = self._inner.compute_gradients(self.get_scaled_loss(loss), var_list=var_list,
                                           grad_loss=grad_loss, tape=tape, **kwargs)
        grads = self.get_unscaled_gradients([g for g, _ in gv])
        return list(zip(grads, [v for _, v in gv]))

    def minimize(self, loss, var_list=None, grad_loss=None, name=None, tape=None,
                 global_step=None):
        gv = self.compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        kw = {} if global_step is None else {"global_step": global_step}
        return self.apply_gradients(gv, **kw)

    # --- checkpoints -------------------------------------------------------------------
    def _trackable_children(self):
        return {"inner_optimizer": self._inner, "loss_scale": self._scale,
                "good_steps": self._good_steps}

    def variables(self):
        return [self._scale, self._good_steps] + list(self._inner.variables())

    def get_config(self):
        return {"inner_optimizer": self._inner.get_config(), "dynamic": self._dynamic,
                "initial_scale": self._initial_scale, "dynamic_growth_steps": self._growth_steps}

    def __repr__(self):
        return (f"<LossScaleOptimizer({type(self._inner).__name__}) "
                f"loss_scale={float(self._scale):g}>")


def _gradients(pairs):
    """The gradients of ``pairs`` that are not None, as Tensors (a list or a NumPy array
    converted to its variable's dtype, as the optimizer converts it)."""
    for pair in pairs:
        g, v = pair
        if g is None:
            continue
        if not isinstance(g, (Tensor, Variable)):
            g = convert_to_tensor(g, dtype=getattr(v, "dtype", None))
        yield g
