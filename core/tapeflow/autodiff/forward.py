"""Forward-mode automatic differentiation: ``tf.autodiff.ForwardAccumulator``.

The accumulator records like a tape: while it is active the runtime appends every op
that reads a tensor it watches to its records, in execution order. Tangents are
computed when asked (:meth:`ForwardAccumulator.jvp`) by replaying the new records
forward, each op's JVP rule (``OpDef.jvp``, declared with ``OpDef.def_jvp`` or a
plugin's ``Library.jvp``) giving output tangents from input tangents:

* a function ``jvp(ctx, *input_tangents)`` (None for inputs without a tangent);
* :class:`~tapeflow.runtime.registry.Linear`: the op applied to the tangents;
* :class:`~tapeflow.runtime.registry.Multilinear`: ``op(da, b) + op(a, db)``;
* no rule: the double-VJP trick on the op's gradient, ``J t = d/du <J^T u, t>``
  (the gradient rule run under an inner tape; :data:`FALLBACK_OPS` lists the ops
  that went this way).

The replay happens at the latest when the ``with`` block ends (so tangents are those of
the values the ops saw, and enclosing tapes and accumulators, still active then, record
the tangent computations), each op on its own device. It nests both ways: ops that a
``GradientTape.gradient`` runs inside the accumulator are recorded too, so
forward-over-reverse gives Hessian-vector products; tangent ops run through the
dispatcher, so an outer ``GradientTape`` records them. Like a persistent tape, the
accumulator keeps what it recorded until it is garbage collected.

>>> import tapeflow as tf
>>> x = tf.constant([1.0, 2.0])
>>> with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 0.0])) as acc:
...     y = tf.reduce_sum(x * x * x)
>>> print(acc.jvp(y))
tf.Tensor(3.0, shape=(), dtype=float32)
"""

from __future__ import annotations

from ..ops.array_creation import zeros_like as _zeros_like
from ..ops import math as _math
from ..ops import reductions as _reductions
from ..ops.reductions import unbroadcast as _unbroadcast
from ..runtime import context as _ctx
from ..runtime import devices as _devs
from .. import nest
from ..runtime.dispatch import convert_to_tensor, execute
from ..errors import InvalidArgumentError, NotDifferentiableError
from ..runtime.registry import Multilinear, GradContext, Linear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .recording import Recorder
from .tape import GradientTape, TapeRecord

__all__ = ["ForwardAccumulator", "FALLBACK_OPS"]

#: ops whose tangents came from the double-VJP fallback in this process (no JVP rule)
FALLBACK_OPS: set = set()


def _zeros(t):
    return _zeros_like(t)


def _fit(t, like):
    """Tangent ``t`` of an output ``like``: broadcast to its shape (an elementwise op
    whose other input had the larger shape)."""
    if t is None:
        return None
    if type(t) is not Tensor:
        t = convert_to_tensor(t)
    if t._data.shape != like._data.shape:
        t = _reductions.broadcast_to(t, tuple(like._data.shape))
    if t.dtype is not like.dtype:
        t = _math.cast(t, like.dtype)
    return t


class ForwardAccumulator(Recorder):
    """Forward-mode derivatives (TensorFlow's ``tf.autodiff.ForwardAccumulator``):
    Jacobian-vector products of everything computed from ``primals`` inside the
    ``with`` block, along ``tangents``.

    Args:
        primals: a Tensor or Variable, or a nested structure of them.
        tangents: the same structure, one tangent per primal (same shape and dtype).

    Nest it with :class:`GradientTape` for Hessian-vector products
    (forward-over-reverse):

    >>> import tapeflow as tf
    >>> x = tf.constant([1.0, 2.0])
    >>> with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 0.0])) as acc:
    ...     with tf.GradientTape() as tape:
    ...         tape.watch(x)
    ...         y = tf.reduce_sum(x ** 3)
    ...     g = tape.gradient(y, x)
    >>> print(acc.jvp(g))                  # H @ v = diag(6 x) @ [1, 0]
    tf.Tensor([6. 0.], shape=(2,), dtype=float32)
    """

    def __init__(self, primals, tangents):
        ps = nest.flatten(primals)
        ts = nest.flatten(tangents)
        if len(ps) != len(ts):
            raise InvalidArgumentError(
                f"ForwardAccumulator: {len(ps)} primal(s) but {len(ts)} tangent(s); give one "
                "tangent per primal, in the same structure")
        self._watched: dict = {}
        self._records: list = []
        self._tangents: dict = {}          # id(tensor) -> tangent
        self._var_tangents: dict = {}      # id(Variable) -> tangent
        self._vars: list = []              # the Variable primals (their ids must stay valid;
                                           # tensors stay alive in _watched and the records)
        self._watch_vars = False           # the runtime calls _watch_var on reads if True
        self._done = 0
        self._recording = False
        for i, (p, t) in enumerate(zip(ps, ts)):
            var = p if isinstance(p, Variable) else None
            value = p._value if var is not None else p
            if type(value) is not Tensor:
                raise InvalidArgumentError(
                    f"ForwardAccumulator: primal {i} is a {type(p).__name__}; primals are "
                    "Tensors or Variables (convert values with tf.constant)")
            t = convert_to_tensor(t, dtype=value.dtype) if not isinstance(t, Tensor) else t
            if tuple(t.shape) != tuple(value.shape) or t.dtype is not value.dtype:
                raise InvalidArgumentError(
                    f"ForwardAccumulator: tangent {i} is {t.dtype.name}{list(t.shape)} but its "
                    f"primal is {value.dtype.name}{list(value.shape)}; they must match")
            if not value.dtype.is_inexact:
                raise InvalidArgumentError(
                    f"ForwardAccumulator: primal {i} has dtype {value.dtype.name}; only float "
                    "and complex tensors have tangents")
            if id(value) in self._tangents or (var is not None and id(var) in self._var_tangents):
                raise InvalidArgumentError(
                    f"ForwardAccumulator: primal {i} is given twice; list it once, with the "
                    "sum of its tangents")
            if var is not None:
                self._var_tangents[id(var)] = t
                self._vars.append(var)
                self._watch_vars = True
            self._watch(value, t)

    def _watch(self, value, tangent):
        self._watched[id(value)] = value
        self._tangents[id(value)] = tangent

    def _watch_var(self, var, value):
        t = self._var_tangents.get(id(var))
        if t is not None and id(value) not in self._tangents:
            self._watch(value, t)

    def __exit__(self, exc_type, *exc):   # (__enter__: Recorder's)
        self._pause()
        if exc_type is None:
            self._advance()            # while enclosing tapes/accumulators still record
        return False

    def jvp(self, primals, unconnected_gradients="none"):
        """The tangent of ``primals`` (a tensor or a nested structure): the directional
        derivative along the accumulator's tangents; ``None`` (or zeros with
        ``unconnected_gradients="zero"``) for tensors that do not depend on them."""
        if unconnected_gradients not in ("none", "zero"):
            raise InvalidArgumentError("unconnected_gradients must be 'none' or 'zero', got "
                                       f"{unconnected_gradients!r}")
        self._advance()
        single = isinstance(primals, (Tensor, Variable))
        flat = [primals] if single else nest.flatten(primals)
        out = []
        for p in flat:
            if isinstance(p, Variable) and id(p) in self._var_tangents:
                out.append(self._var_tangents[id(p)])
                continue
            v = p._value if isinstance(p, Variable) else p
            t = self._tangents.get(id(v)) if isinstance(v, Tensor) else None
            if t is None and unconnected_gradients == "zero" and isinstance(v, Tensor):
                t = _zeros(v)
            out.append(t)
        return out[0] if single else nest.pack_sequence_as(primals, out)

    # --- replay -------------------------------------------------------------------------
    def _advance(self):
        """Tangents for the records made since the last call (the accumulator does not
        record its own tangent computations)."""
        if self._done == len(self._records):
            return
        paused = self._recording
        if paused:
            _ctx.pop_tape(self)
        try:
            scoped = _devs.current_device() is not None
            while self._done < len(self._records):
                rec = TapeRecord._make(self._records[self._done])
                if scoped:                  # a device scope: run where the op ran
                    with _devs.device(rec.outputs[0]._device.name):
                        self._step(rec)
                else:                       # (no scope: ops follow their inputs anyway)
                    self._step(rec)
                self._done += 1             # (a record that failed is tried again)
        finally:
            if paused:
                _ctx.push_tape(self)

    def _step(self, rec):
        op, inputs, outputs, attrs, grad_fn = rec
        tin = [self._tangents.get(id(i)) for i in inputs]
        if all(t is None for t in tin):
            return
        rule = op.jvp if grad_fn is None else None
        if isinstance(rule, Linear):
            tout = self._linear(op, inputs, attrs, tin, rule)
        elif isinstance(rule, Multilinear):
            tout = self._multilinear(op, inputs, attrs, tin)
        elif rule is not None:
            ctx = GradContext(op, inputs, outputs, attrs)
            tout = rule(ctx, *tin)
        else:
            tout = self._double_vjp(op, inputs, outputs, attrs, grad_fn, tin)
        if type(tout) is not tuple:
            tout = tuple(tout) if isinstance(tout, list) else (tout,)
        for o, t in zip(outputs, tout):
            if t is not None and o.dtype.is_inexact:
                self._tangents[id(o)] = _fit(t, o)

    @staticmethod
    def _linear(op, inputs, attrs, tin, rule):
        pos = range(len(inputs)) if rule.positions is None else rule.positions
        if all(tin[i] is None for i in pos if i < len(tin)):
            return None
        args = list(inputs)
        for i in pos:
            if i < len(args):
                args[i] = tin[i] if tin[i] is not None else _zeros(inputs[i])
        return execute(op, tuple(args), {**attrs, **rule.attrs} if rule.attrs else attrs)

    @staticmethod
    def _multilinear(op, inputs, attrs, tin):
        out = None
        for i, t in enumerate(tin):
            if t is None:
                continue
            term = execute(op, tuple(inputs[:i]) + (t,) + tuple(inputs[i + 1:]), attrs)
            out = term if out is None else _math.add(out, term)
        return out

    @staticmethod
    def _double_vjp(op, inputs, outputs, attrs, grad_fn, tin):
        """``J t`` as the gradient w.r.t. ``u`` of ``<J^T u, t>`` (the op's gradient rule
        ``J^T u`` is linear in ``u``)."""
        fn = grad_fn or op.grad
        if fn is None or not op.differentiable:
            raise NotDifferentiableError(
                f"forward mode through op {op.name}: it has no JVP rule and no gradient; "
                "declare one (Library.jvp, see docs/plugins.md) or stop the tangent "
                "(tf.stop_gradient)", op=op.name)
        if any(t is not None and t.dtype.is_complex for t in tin):
            raise NotDifferentiableError(
                f"forward mode through op {op.name} with complex tangents: it has no JVP rule, "
                "and the double-VJP fallback does not hold under the conjugate gradient "
                "convention; declare one (Library.jvp, see docs/plugins.md)", op=op.name)
        FALLBACK_OPS.add(op.name)
        us = [_zeros(o) for o in outputs]
        ctx = GradContext(op, inputs, outputs, attrs, grad_fn)
        ctx.needs = tuple(t is not None for t in tin)
        with GradientTape() as inner:
            for u in us:
                inner.watch(u)
            gs = fn(ctx, *us)
            if type(gs) is not tuple:
                gs = tuple(gs) if isinstance(gs, list) else (gs,)
            dot = None
            for inp, g, t in zip(inputs, gs, tin):
                if g is None or t is None:
                    continue
                g = convert_to_tensor(g) if type(g) is not Tensor else g
                if g._data.shape != inp._data.shape and op.broadcast:
                    g = _unbroadcast(g, inp._data.shape)
                term = _reductions.reduce_sum(_math.multiply(g, t))
                dot = term if dot is None else _math.add(dot, term)
        if dot is None:
            return None
        res = inner.gradient(dot, us)
        return tuple(res)
