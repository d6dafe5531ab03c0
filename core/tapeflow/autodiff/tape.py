"""The tape: records ops whose inputs it watches, plays them back for gradients.

The tape is plain data, as in TensorFlow's ``tape.h``: ``watched`` maps tensor
ids to the tensors it tracks (sources and recorded outputs, kept alive so ids
are never reused while recorded), ``records`` is the list of recorded ops
(:class:`~tapeflow.runtime.registry.GradContext`) in creation order, which is a valid
topological order, so backprop is one reversed loop.

With no tape active anywhere, dispatch does no tape work: it reads one
module-level counter (``_tapes_active[0]``) and moves on.

>>> import tapeflow as tf
>>> w = tf.Variable([[1.0]])
>>> with tf.GradientTape() as tape:
...     loss = w * w
>>> print(tape.gradient(loss, w))
tf.Tensor([[2.]], shape=(1, 1), dtype=float32)
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..ops import array as _array
from ..ops import math as _math
from ..ops.array import unbroadcast as _unbroadcast
from ..runtime import context as _ctx
from ..runtime.context import stop_all_recording
from ..runtime.dispatch import _run, _scalar_like, constant, convert_to_tensor
from ..runtime.errors import (FailedPreconditionError, InvalidArgumentError,
                              NotDifferentiableError, TapeflowError)
from ..runtime.registry import GradContext
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["GradientTape", "stop_recording", "stop_all_recording"]

#: ``rows(f, seeds, first seed) -> [f's output leaves, each with the batch of seeds in
#: front]``:
#: tapeflow.tracing.vectorize installs tf.vectorized_map's runner here (it sits above
#: this module); jacobian() and batch_jacobian() use it for all rows at once
VECTORIZE = [None]

_new = object.__new__
#: (the per-thread tape stacks and the recorder live in the eager context)
_tapes_active = _ctx.tapes_active
stop_recording = stop_all_recording


def _nest_flatten(x, out):
    if isinstance(x, (list, tuple)):
        for v in x:
            _nest_flatten(v, out)
    elif isinstance(x, dict):
        for k in sorted(x):
            _nest_flatten(x[k], out)
    else:
        out.append(x)
    return out


def _nest_pack(structure, flat_iter):
    if isinstance(structure, (list, tuple)):
        vals = [_nest_pack(v, flat_iter) for v in structure]
        return type(structure)(vals) if isinstance(structure, list) else tuple(vals)
    if isinstance(structure, dict):
        return {k: _nest_pack(structure[k], flat_iter) for k in sorted(structure)}
    return next(flat_iter)


class GradientTape:
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
        self._watched: dict = {}
        self._records: list = []
        self._variables: dict = {}     # id(var) -> var, in first-read order
        self._var_reads: dict = {}     # id(var) -> [value tensors read]
        self._used = False
        self._recording = False

    # --- context -------------------------------------------------------------
    def __enter__(self):
        _ctx.push_tape(self)
        self._recording = True
        return self

    def __exit__(self, *exc):
        self._pause()
        return False

    def _pause(self):
        if self._recording:
            _ctx.pop_tape(self)
            self._recording = False

    def _resume(self):
        if not self._recording:
            _ctx.push_tape(self)
            self._recording = True

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
        self._watched.clear()
        self._records.clear()
        self._variables.clear()
        self._var_reads.clear()
        self._used = False

    # --- watching ------------------------------------------------------------
    def watch(self, tensor):
        """Watch tensors or Variables (nested lists/tuples/dicts accepted)."""
        if type(tensor) is Tensor:
            self._watched[id(tensor)] = tensor
            return
        for t in _nest_flatten(tensor, []):
            if isinstance(t, Variable):
                self._watch_var(t, t._value)
            elif isinstance(t, Tensor):
                self._watched[id(t)] = t
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
        self._watched[id(value)] = value

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
        if self._used and not self._persistent:
            raise FailedPreconditionError(
                "A non-persistent GradientTape can only be used to compute one set of "
                "gradients (or jacobians); it freed its records after the first call. "
                "Create the tape with tf.GradientTape(persistent=True) to call gradient() "
                "several times.")
        targets = [target] if type(target) is Tensor else _nest_flatten(target, [])
        single = type(sources) is Tensor or isinstance(sources, Variable)
        flat_sources = [sources] if single else _nest_flatten(sources, [])
        seeds = None if output_gradients is None else _nest_flatten(output_gradients, [])
        keep_recording = self._persistent and self._recording
        if not keep_recording:
            self._pause()
        try:
            result = self._backprop(targets, flat_sources, seeds, unconnected_gradients)
        finally:
            if not self._persistent:
                self._used = True
                self._release()
        return result[0] if single else _nest_pack(sources, iter(result))

    def _release(self):
        self._records = []
        self._watched = {}
        self._var_reads = {}
        if self._recording:
            _ctx.sync_recorders()

    def _backprop(self, targets, sources, seeds, unconnected):
        grads: dict = {}
        add = _math.add
        for i, t in enumerate(targets):
            if type(t) is not Tensor:
                t = t._value if isinstance(t, Variable) else convert_to_tensor(t)
            if seeds is not None and seeds[i] is not None:
                s = convert_to_tensor(seeds[i], dtype=t.dtype)
            elif not t._data.shape:
                s = _scalar_like(1, t)        # a scalar loss: the cached 0-d one
            else:
                s = _run(_array._FILL, (), t._device,
                         {"shape": t._data.shape, "value": 1, "dtype": t.dtype})
            k = id(t)
            grads[k] = add(grads[k], s) if k in grads else s
        if len(grads) == 0:
            return [None] * len(sources)
        watched = self._watched
        for rec in reversed(self._records):
            outs = rec[2]
            if len(outs) == 1:
                g = grads.get(id(outs[0]))
                if g is None:
                    continue
                dys = (g,)
            else:
                dys = [grads.get(id(o)) for o in outs]
                if all(g is None for g in dys):
                    continue
                dys = [_array.zeros_like(o) if g is None else g for o, g in zip(outs, dys)]
            op = rec[0]
            fn = rec[4] or op.grad
            if fn is None:
                raise NotDifferentiableError(
                    f"No gradient is defined for op {op.name}. Define one (OpDef.def_grad / "
                    "tapeflow.custom_gradient), declare the op non-differentiable, or wrap its "
                    "use in tf.stop_gradient.", op=op.name, device=outs[0]._device)
            inputs = rec[1]
            ctx = _new(GradContext)
            ctx.op = op
            ctx.inputs = inputs
            ctx.outputs = outs
            ctx.attrs = rec[3]
            ctx.grad_fn = rec[4]
            n = len(inputs)
            ctx.needs = ((id(inputs[0]) in watched,) if n == 1 else
                         (id(inputs[0]) in watched, id(inputs[1]) in watched) if n == 2 else
                         tuple([id(i) in watched for i in inputs]))
            in_grads = fn(ctx, *dys)
            if type(in_grads) is not tuple:
                in_grads = tuple(in_grads) if isinstance(in_grads, list) else (in_grads,)
            if len(in_grads) != len(inputs):
                raise InvalidArgumentError(
                    f"{_grad_origin(op, fn)} returned {len(in_grads)} gradient(s) but the op "
                    f"has {len(inputs)} input(s); return one gradient (or None) per input.",
                    op=op.name, device=outs[0]._device)
            for i, (inp, g) in enumerate(zip(inputs, in_grads)):
                if g is None:
                    continue
                k = id(inp)
                if k not in watched:
                    continue
                if type(g) is not Tensor:
                    g = _grad_tensor(g, inp, i, op, fn)
                gs, ishape = g._data.shape, inp._data.shape
                if gs != ishape:
                    if op.broadcast:
                        g = _unbroadcast(g, ishape)
                    else:
                        raise InvalidArgumentError(
                            f"{_grad_origin(op, fn)} returned a gradient of shape {tuple(gs)} "
                            f"for input {i} ({_input_name(op, i)}) of shape {tuple(ishape)}.",
                            op=op.name, device=inp._device)
                if g._data.dtype != inp._data.dtype:
                    raise InvalidArgumentError(
                        f"{_grad_origin(op, fn)} returned a {g.dtype.name} gradient for input "
                        f"{i} ({_input_name(op, i)}) of dtype {inp.dtype.name}.",
                        op=op.name, device=inp._device)
                grads[k] = add(grads[k], g) if k in grads else g
        out = []
        for s in sources:
            if isinstance(s, Variable):
                reads = self._var_reads.get(id(s), ())
                g = None
                for r in reads:
                    rg = grads.get(id(r))
                    if rg is not None:
                        g = rg if g is None else add(g, rg)
                ref = s._value
            elif isinstance(s, Tensor):
                g = grads.get(id(s)) if id(s) in watched else None
                ref = s
            else:
                raise InvalidArgumentError(
                    f"gradient() sources must be Tensors or Variables, got {type(s).__name__}")
            if g is not None and not ref.dtype.is_inexact:
                g = None
            if g is None and unconnected == "zero":
                g = _array.zeros_like(ref)
            out.append(g)
        return out

    def jacobian(self, target, sources, unconnected_gradients="none",
                 parallel_iterations=None, experimental_use_pfor=True):
        """Full Jacobian: shape ``target.shape + source.shape`` for each source."""
        if self._used and not self._persistent:
            raise FailedPreconditionError("A non-persistent GradientTape can only be used once; "
                               "use tf.GradientTape(persistent=True).")
        flat_sources = _nest_flatten(sources, [])
        if not self._persistent or not self._recording:
            self._pause()
        tshape = tuple(target.shape)
        n = 1
        for d in tshape:
            n *= d
        try:
            if experimental_use_pfor and VECTORIZE[0] is not None and n:
                eye = np.eye(n, dtype=target.dtype.np).reshape((n,) + tshape)
                rows = VECTORIZE[0](
                    lambda s: tuple(self._backprop([target], flat_sources, [s], "none")),
                    _const_like(eye, target), _const_like(eye[0], target))
            else:
                rows = self._jacobian_loop(target, flat_sources, tshape, n)
        finally:
            if not self._persistent:
                self._used = True
                self._release()
        result = []
        for s, r in zip(flat_sources, rows):
            sshape = tuple(s.shape)
            if r is None:
                # unconnected (or an empty target): None, or zeros when asked
                result.append(_array.zeros(tshape + sshape, dtype=s.dtype)
                              if unconnected_gradients == "zero" or n == 0 else None)
                continue
            want = tshape + sshape
            result.append(r if tuple(r.shape) == want else _array.reshape(r, want))
        return _nest_pack(sources, iter(result))

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
        out = []
        for s, r in zip(flat_sources, rows):
            if all(g is None for g in r):
                out.append(None)
            else:
                out.append(_array.stack([_array.zeros_like(s) if g is None else g for g in r]))
        return out

    def batch_jacobian(self, target, source, unconnected_gradients="none",
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example Jacobian: ``target[b, ...]`` w.r.t. ``source[b, ...]``."""
        if self._used and not self._persistent:
            raise FailedPreconditionError("A non-persistent GradientTape can only be used once; "
                               "use tf.GradientTape(persistent=True).")
        if not self._persistent or not self._recording:
            self._pause()
        tshape = tuple(target.shape)
        b = tshape[0]
        rest = tshape[1:]
        m = 1
        for d in rest:
            m *= d
        sshape = tuple(source.shape)
        try:
            if experimental_use_pfor and VECTORIZE[0] is not None and m and b:
                eye = np.zeros((m, b, m), dtype=target.dtype.np)
                eye[np.arange(m), :, np.arange(m)] = 1
                eye = eye.reshape((m,) + tshape)
                (cols,) = VECTORIZE[0](
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
            if not self._persistent:
                self._used = True
                self._release()
        return _array.reshape(out, (b,) + rest + sshape[1:])


def _const_like(np_value, like):
    return constant(np_value, device=like._device)


# --- errors of gradient functions ---------------------------------------------------

def _grad_origin(op, fn):
    """``The gradient function of op 'x::y' (registered by 'dist'; mod.func)``: names
    the op, where it came from and the function, so a plugin's bug points at it."""
    fn = getattr(fn, "__wrapped__", fn)
    where = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return (f"The gradient function of op '{op.name}' (registered by {op.source!r}; "
            f"{where}.{name})")


def _input_name(op, i):
    names = op.inputs
    if i < len(names) and not names[i].startswith("*"):
        return f"'{names[i]}'"
    return f"'{names[-1].lstrip('*')}[{i - len(names) + 1}]'" if names else "?"


def _grad_tensor(g, inp, i, op, fn):
    """A gradient that is not a Tensor: Variables are read, numbers and arrays are
    converted to the input's dtype; anything else (a string, a dict) is an error
    naming the op, its plugin and the input."""
    if isinstance(g, Variable):
        return g.read_value()
    if isinstance(g, Tensor):
        return g
    try:
        return convert_to_tensor(g, dtype=inp.dtype)
    except TapeflowError as e:
        raise InvalidArgumentError(
            f"{_grad_origin(op, fn)} returned {type(g).__name__} {_short(g)} for input {i} "
            f"({_input_name(op, i)}), which is not convertible to a {inp.dtype.name} tensor; "
            "a gradient function returns a Tensor (or None) per input.", op=op.name,
            device=inp._device) from e


def _short(v):
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."
