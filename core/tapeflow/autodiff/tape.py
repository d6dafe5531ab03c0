"""The tape: records ops whose inputs it watches, plays them back for gradients.

The tape is plain data, as in TensorFlow's ``tape.h``, held by its core: the tensors
it watches (sources and recorded outputs, kept alive so ids are never reused while
recorded) and the recorded ops in creation order, which is a valid topological order,
so backprop is one reversed loop. The core is ``_speedups.Tape`` (``runtime/_c/tape.c``:
records are C structs, watching is a bit on the C tensor, the loop is C) or, without the
C core, :class:`_PyTape`, the reference it mirrors: ``_watched`` maps tensor ids to
tensors and ``_records`` lists tuples laid out as :class:`TapeRecord` ``(op, inputs,
outputs, attrs, grad_fn)`` (the C core lists its records so, and holds the result of a
Tensor operator such as ``a + b`` weakly: a result nobody holds is on no path to a
target, so it is freed as without a tape, and its record is neither played back nor
listed). Backprop makes a :class:`~tapeflow.runtime.registry.GradContext` only for the
records on the path to the target, when it calls their gradient.

Backprop has four steps, each its own function: seeding (:func:`_seed`: ones, or the
given output gradients), playback (:func:`_input_grads` per record), the checks of
what a gradient function returned (:func:`_accumulate`, with
:mod:`tapeflow.autodiff.grad_checks`) and the collection per source
(:meth:`GradientTape._collect`). Sources, targets and output gradients may be any
nested structure (:mod:`tapeflow.nest`): the result has the structure of
the sources.

With no tape active anywhere, dispatch does no tape work: it reads one
module-level counter (``context.tapes_active[0]``) and moves on.

>>> import tapeflow as tf
>>> w = tf.Variable([[1.0]])
>>> with tf.GradientTape() as tape:
...     loss = w * w
>>> print(tape.gradient(loss, w))
tf.Tensor([[2.]], shape=(1, 1), dtype=float32)
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, NamedTuple

import numpy as np

from .. import ops as _array
from ..ops import math as _math
from ..runtime import context as _ctx
from .. import nest
from ..runtime.context import stop_all_recording
from ..runtime.dispatch import run, scalar_like, constant, convert_to_tensor
from ..errors import (FailedPreconditionError, InvalidArgumentError,
                              NotDifferentiableError)
from ..runtime.registry import GradContext, get_op
from ..runtime.tensor import Tensor, speedups
from ..runtime.variable import Variable
from .grad_checks import checked_grad, grad_origin, short
from .recording import Recorder

__all__ = ["GradientTape", "TapeRecord", "stop_recording", "stop_all_recording"]

# (jacobian() and batch_jacobian() compute all rows at once with
# ``_ctx.HOOKS.vectorize_jacobian``, ``rows(f, seeds, first seed) -> [f's output
# leaves, each with the batch of seeds in front]``, which tapeflow.tracing.vectorize
# installs: None until tapeflow.tracing is imported)
stop_recording = stop_all_recording


class GradientTape(Recorder):
    """Record operations for automatic differentiation (TensorFlow semantics).

    Args:
        persistent: allow several ``gradient()`` calls; otherwise the tape frees
            its records after the first and refuses a second call.
        watch_accessed_variables: watch every trainable Variable read inside the
            ``with`` block automatically.

    Nested tapes give higher-order gradients: gradient computation runs through
    the dispatcher, so an outer tape records it.

    >>> import tapeflow as tf
    >>> x = tf.constant(3.0)
    >>> with tf.GradientTape() as t2:
    ...     t2.watch(x)
    ...     with tf.GradientTape() as t1:
    ...         t1.watch(x)
    ...         y = x * x * x
    ...     dy = t1.gradient(y, x)
    >>> float(dy), float(t2.gradient(dy, x))
    (27.0, 18.0)
    """

    def __init__(self, persistent=False, watch_accessed_variables=True):
        self._persistent = persistent
        self._watch_vars = watch_accessed_variables
        self._core = _Core()           # the records and the watched tensors
        self._recorder = self._core if speedups else (self._core._watched, self._core._records)
        self._variables: dict = {}     # id(var) -> var, in first-read order
        self._var_reads: dict = {}     # id(var) -> [value tensors read]
        self._used = False
        self._recording = False

    # --- context (entering, pausing, resuming: Recorder's) ------------------------
    def __exit__(self, *exc):
        self._pause()
        return False

    @contextlib.contextmanager
    def stop_recording(self):
        """Temporarily stop recording on this tape (seed/TF API)."""
        if not self._recording:
            raise FailedPreconditionError(
                "GradientTape.stop_recording() needs the tape to be recording "
                               "(use it inside the tape's `with` block)")
        self._pause()
        try:
            yield
        finally:
            self._resume()

    def reset(self):
        """Forget everything recorded so far (the tape keeps recording)."""
        self._core.reset()
        self._variables.clear()
        self._var_reads.clear()
        self._used = False

    # --- watching ------------------------------------------------------------
    def watch(self, tensor):
        """Watch tensors or Variables (nested lists/tuples/dicts accepted)."""
        if type(tensor) is Tensor:
            self._core.watch(tensor)
            return
        for t in nest.flatten(tensor):
            if isinstance(t, Variable):
                self._watch_var(t, t._value)
            elif isinstance(t, Tensor):
                self._core.watch(t)
            else:
                raise InvalidArgumentError(
                    f"GradientTape.watch expects Tensors or Variables, got {type(t).__name__} "
                    f"{t!r}; convert it with tf.constant first and use that tensor.")

    def _watch_var(self, var, value):
        key = id(var)
        if key not in self._variables:
            self._variables[key] = var
            self._var_reads[key] = [value]
        else:
            reads = self._var_reads[key]
            if reads[-1] is not value and all(r is not value for r in reads):
                reads.append(value)
        self._core.watch(value)

    def watched_variables(self):
        """Variables watched so far, in the order they were first read."""
        return tuple(self._variables.values())

    # --- gradients -----------------------------------------------------------
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients="none"):
        """d(target)/d(sources), shaped like ``sources`` (nested structures kept).

        ``target`` may be a tensor or a list (their gradients are summed);
        ``output_gradients`` seeds the backward pass (default: ones).
        Unconnected sources give ``None``, or zeros with
        ``unconnected_gradients="zero"``.
        """
        if unconnected_gradients not in ("none", "zero"):
            raise InvalidArgumentError("unconnected_gradients must be 'none' or 'zero', got "
                             f"{unconnected_gradients!r}")
        targets = [target] if type(target) is Tensor else nest.flatten(target)
        single = type(sources) is Tensor or isinstance(sources, Variable)
        flat_sources = [sources] if single else nest.flatten(sources)
        seeds = None
        if output_gradients is not None:
            seeds = nest.flatten(output_gradients)
            if len(seeds) != len(targets):
                raise InvalidArgumentError(
                    f"gradient(): {len(seeds)} output gradient(s) for {len(targets)} "
                    f"target(s) (output_gradients {short(output_gradients)}); give one per "
                    "target, in the targets' structure (None for the default of ones).")
        self._begin()
        try:
            result = self._backprop(targets, flat_sources, seeds, unconnected_gradients)
        finally:
            self._end()
        return result[0] if single else nest.pack_sequence_as(sources, result)

    def _begin(self):
        """Refuse a second playback of a non-persistent tape, and stop recording (a
        persistent tape that records goes on recording: the backward ops too)."""
        if self._used and not self._persistent:
            raise FailedPreconditionError(
                "A non-persistent GradientTape can only be used to compute one set of "
                "gradients (or jacobians); it freed its records after the first call. "
                "Create the tape with tf.GradientTape(persistent=True) to call gradient() "
                "several times.")
        if not self._persistent:
            self._pause()

    def _end(self):
        """After a playback: a non-persistent tape frees its records."""
        if not self._persistent:
            self._used = True
            self._core.reset()
            self._var_reads = {}

    #: the records (TapeRecord-ordered tuples) and ``{id(tensor): tensor}`` watched
    _records = property(lambda self: self._core._records)
    _watched = property(lambda self: self._core._watched)

    def _backprop(self, targets, sources, seeds, unconnected):
        """Gradients of ``targets`` (seeded with ``seeds``, default ones) for each of
        ``sources`` (flat lists): seeding, playback of the records, collection."""
        grads = _seed(targets, seeds)
        if not grads:
            return [None] * len(sources)
        self._core.backprop(grads)
        # a target that is a source gets its seed, watched or not (a Variable: its value)
        tids = {id(t._value if isinstance(t, Variable) else t) for t in targets}
        return self._collect(sources, grads, unconnected, tids)

    def _collect(self, sources, grads, unconnected, tids=()):
        """The gradient of each source: a Variable's is the sum over the values read from
        it; ``None`` (or zeros) where unconnected or for an integer source."""
        add = _math.add
        watches = self._core.watches
        out = []
        for s in sources:
            if isinstance(s, Variable):
                g = None
                reads = self._var_reads.get(id(s), ())
                if id(s._value) in tids and all(r is not s._value for r in reads):
                    reads = (*reads, s._value)
                for r in reads:
                    rg = grads.get(id(r))
                    if rg is not None:
                        g = rg if g is None else add(g, rg)
                ref = s._value
            elif isinstance(s, Tensor):
                g = grads.get(id(s)) if watches(s) or id(s) in tids else None
                ref = s
            else:
                raise InvalidArgumentError(
                    f"gradient() sources must be Tensors or Variables, got {type(s).__name__} "
                    f"{short(s)}; pass the tensors (or Variables) the target was computed "
                    "from, in any nested structure.")
            if g is not None and not ref.dtype.is_inexact:
                g = None
            if g is None and unconnected == "zero":
                g = _array.zeros_like(ref)
            out.append(g)
        return out

    def jacobian(self, target, sources, unconnected_gradients="none",
                 parallel_iterations=None, experimental_use_pfor=True):
        """Full Jacobian: shape ``target.shape + source.shape`` for each source."""
        self._begin()
        flat_sources = nest.flatten(sources)
        tshape = tuple(target.shape)
        n = math.prod(tshape)
        try:
            vectorize = _ctx.HOOKS.vectorize_jacobian
            if experimental_use_pfor and vectorize is not None and n:
                eye = np.eye(n, dtype=target.dtype.np).reshape((n,) + tshape)
                rows = vectorize(
                    lambda s: tuple(self._backprop([target], flat_sources, [s], "none")),
                    _const_like(eye, target), _const_like(eye[0], target))
            else:
                rows = self._jacobian_loop(target, flat_sources, tshape, n)
        finally:
            self._end()
        result = []
        for s, r in zip(flat_sources, rows):
            want = tshape + tuple(s.shape)
            if r is None:           # unconnected (or an empty target): None, or zeros
                result.append(_array.zeros(want, dtype=s.dtype)
                              if unconnected_gradients == "zero" or n == 0 else None)
            else:
                result.append(r if tuple(r.shape) == want else _array.reshape(r, want))
        return nest.pack_sequence_as(sources, result)

    def _jacobian_loop(self, target, flat_sources, tshape, n):
        """The rows of a Jacobian one backward pass at a time (stacked per source; None
        for a source no row reaches)."""
        rows = [[] for _ in flat_sources]
        for i in range(n):
            seed = np.zeros(n, dtype=target.dtype.np)
            seed[i] = 1
            seed = _array.reshape(_const_like(seed, target), tshape)
            gs = self._backprop([target], flat_sources, [seed], "none")
            for r, g in zip(rows, gs):
                r.append(g)
        return [None if all(g is None for g in r) else
                _array.stack([_array.zeros_like(s) if g is None else g for g in r])
                for s, r in zip(flat_sources, rows)]

    def batch_jacobian(self, target, source, unconnected_gradients="none",
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example Jacobian: ``target[b, ...]`` w.r.t. ``source[b, ...]``."""
        self._begin()
        tshape = tuple(target.shape)
        b = tshape[0]
        rest = tshape[1:]
        m = math.prod(rest)
        sshape = tuple(source.shape)
        try:
            vectorize = _ctx.HOOKS.vectorize_jacobian
            if experimental_use_pfor and vectorize is not None and m and b:
                eye = np.zeros((m, b, m), dtype=target.dtype.np)
                eye[np.arange(m), :, np.arange(m)] = 1
                eye = eye.reshape((m,) + tshape)
                (cols,) = vectorize(
                    lambda s: (self._backprop([target], [source], [s], "zero")[0],),
                    _const_like(eye, target), _const_like(eye[0], target))
                # (m, b, ...) -> (b, m, ...)
                out = _array.transpose(cols, (1, 0) + tuple(range(2, len(cols.shape))))
            else:
                cols = []
                for j in range(m):
                    seed = np.zeros((b, m), dtype=target.dtype.np)
                    seed[:, j] = 1
                    seed = _array.reshape(_const_like(seed, target), tshape)
                    (g,) = self._backprop([target], [source], [seed], "zero")
                    cols.append(g)
                out = _array.stack(cols, axis=1) if cols else _array.zeros(
                    (b, 0) + sshape[1:], dtype=source.dtype)
        finally:
            self._end()
        return _array.reshape(out, (b,) + rest + sshape[1:])


class TapeRecord(NamedTuple):
    """What a tape records for one op, in this field order (``runtime.context.record``
    appends plain tuples laid out so -- building this class per taped op would cost
    several times the tuple on dispatch's hot path -- and backprop and forward mode
    unpack them by these names; the C tape lists its records so)."""

    op: Any                    #: the OpDef that ran
    inputs: tuple              #: its input Tensors
    outputs: tuple             #: its output Tensors
    attrs: dict                #: its attrs
    grad_fn: Any               #: a custom gradient for this one call (or None: op.grad)


class _PyTape:
    """The core of a GradientTape without the C core, and the reference of
    ``_speedups.Tape`` (``runtime/_c/tape.c``): the same methods, the same results."""

    __slots__ = ("_watched", "_records")

    def __init__(self):
        self._watched: dict = {}       # id(tensor) -> tensor
        self._records: list = []       # TapeRecord-ordered tuples, in creation order

    def watch(self, t):
        self._watched[id(t)] = t

    def watches(self, t):
        return id(t) in self._watched

    def reset(self):
        self._watched.clear()
        self._records.clear()

    def backprop(self, grads):
        """Play the records back in reverse creation order, accumulating the gradients
        into ``grads`` ``{id(tensor): gradient}`` (nothing allocated for the records
        off the path to the targets)."""
        watched = self._watched
        for op, inputs, outputs, attrs, grad_fn in reversed(self._records):
            if len(outputs) == 1:
                g = grads.get(id(outputs[0]))
                if g is None:
                    continue
                dys = (g,)
            else:
                dys = _output_grads(outputs, grads)
                if dys is None:
                    continue
            fn = grad_fn or op.grad
            in_grads = _input_grads(op, inputs, outputs, attrs, grad_fn, fn, dys, watched)
            _accumulate(grads, watched, op, fn, inputs, in_grads)


# --- backprop, one step at a time ------------------------------------------------------

def _seed(targets, seeds):
    """``{id(target): seed}``: the given output gradients, else ones (summed over a
    target given twice)."""
    grads: dict = {}
    add = _math.add
    for i, t in enumerate(targets):
        if type(t) is not Tensor:
            if t is None:       # (nest.flatten keeps None: a leaf)
                raise InvalidArgumentError(
                    "GradientTape.gradient(): the target is None -- an unconnected inner "
                    "gradient? Give the inner gradient() unconnected_gradients='zero'.")
            t = t._value if isinstance(t, Variable) else convert_to_tensor(t)
        if seeds is not None and seeds[i] is not None:
            s = convert_to_tensor(seeds[i], dtype=t.dtype)
        elif not t._data.shape:
            s = scalar_like(1, t)        # a scalar loss: the cached 0-d one
        else:
            s = run(_array.FILL, (), t._device,
                     {"shape": t._data.shape, "value": 1, "dtype": t.dtype})
        k = id(t)
        grads[k] = add(grads[k], s) if k in grads else s
    return grads


def _output_grads(outputs, grads):
    """The gradients of a multi-output op's outputs (zeros where one has none), or None
    when no output has one."""
    dys = [grads.get(id(o)) for o in outputs]
    return None if all(g is None for g in dys) else [
        _array.zeros_like(o) if g is None else g for o, g in zip(outputs, dys)]


def _no_gradient(op, outputs):
    raise NotDifferentiableError(
        f"No gradient is defined for op {op.name}. Define one (Library.gradient, see "
        "docs/plugins.md, or tapeflow.custom_gradient), declare the op "
        "non-differentiable, or wrap its use in tf.stop_gradient.",
        op=op.name, device=outputs[0]._device)


def _count_error(op, fn, got, n, outputs):
    raise InvalidArgumentError(
        f"{grad_origin(op, fn)} returned {got} gradient(s) but the op has {n} input(s); "
        "return one gradient (or None) per input.", op=op.name, device=outputs[0]._device)


def _input_grads(op, inputs, outputs, attrs, grad_fn, fn, dys, watched):
    """One record played back: the gradient function's result, one entry per input."""
    if fn is None:
        _no_gradient(op, outputs)
    ctx = GradContext(op, inputs, outputs, attrs, grad_fn)
    n = len(inputs)
    ctx.needs = tuple([id(i) in watched for i in inputs])
    in_grads = fn(ctx, *dys)
    if type(in_grads) is not tuple:
        in_grads = tuple(in_grads) if isinstance(in_grads, list) else (in_grads,)
    if len(in_grads) != n:
        _count_error(op, fn, len(in_grads), n, outputs)
    return in_grads


def _accumulate(grads, watched, op, fn, inputs, in_grads):
    """Add each watched input's gradient (checked) into ``grads``."""
    add = _math.add
    for i, (inp, g) in enumerate(zip(inputs, in_grads)):
        if g is None:
            continue
        k = id(inp)
        if k not in watched:
            continue
        if type(g) is not Tensor or g._data.shape != inp._data.shape or (
                g._data.dtype != inp._data.dtype):
            g = checked_grad(g, inp, i, op, fn)
        grads[k] = add(grads[k], g) if k in grads else g


def _const_like(np_value, like):
    return constant(np_value, device=like._device)


if speedups is not None:                     # the C tape: its records, its walk, its recorders
    _Core = speedups.tape_type()
    speedups.bind_backprop(GradContext, get_op, _math.add, _output_grads, _no_gradient,
                      _count_error, checked_grad)
    _ctx.set_recorders = speedups.set_recorders
else:
    _Core = _PyTape
