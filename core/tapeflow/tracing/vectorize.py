"""``tf.vectorized_map``: run a per-example function once, on the whole batch.

``vectorized_map(fn, elems)`` computes ``stack([fn(e) for e in unstack(elems)])``
without the loop, as TensorFlow's ``pfor`` does it: ``fn`` is traced once on the first
example (trace by execution, as ``tf.function`` traces; the ops it runs are recorded,
tensors from outside become constants, Variables are read), then every recorded op
that reads a value depending on the example runs once on the batch through its
*batching rule* (``OpDef.batch``): batched values carry the batch as dimension 0,
values that do not depend on the example stay as they are. A rule is

* :class:`~tapeflow.runtime.registry.Broadcasting`: the op maps over leading
  dimensions and broadcasts them (elementwise ops, linear algebra of the last two
  dimensions): batched inputs get the batch in front, aligned by size-1 dimensions;
* a function ``rule(ctx, *inputs)`` (:class:`~tapeflow.runtime.registry.BatchContext`)
  that rewrites the op: shifts its axes, folds the batch into another dimension,
  prepends it to a shape attribute (the rules of the built-in ops:
  :mod:`tapeflow.ops.batching`);
* none: the op runs once per example in a loop, with a warning naming it once per
  process (:data:`FALLBACK_OPS` lists those that did).

Random ops draw different numbers for every example (as in TensorFlow). A function
that needs tensor values in Python (``if x > 0:``), or assigns a Variable, cannot be
traced this way: it runs once per example in a loop (``fallback_to_while_loop=True``,
with a warning) or raises. Ops run through the dispatcher, so tapes, accumulators and
an enclosing ``tf.function`` trace record the batched ops: ``vectorized_map`` is
differentiable and traces. ``GradientTape.jacobian``/``batch_jacobian`` use it
(``experimental_use_pfor=True``, the default) to compute all rows of a Jacobian in one
batched backward pass.

>>> import tapeflow as tf
>>> x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
>>> print(tf.vectorized_map(lambda row: tf.reduce_sum(row * row), x))
tf.Tensor([ 5. 25. 61.], shape=(3,), dtype=float32)
"""

from __future__ import annotations

import contextlib
import functools
import warnings

from .. import ops as _ops
from ..runtime import context as _ctx
from ..runtime import devices as _devs
from .. import nest
from ..runtime.context import tracing as _tracing
from ..runtime.dispatch import convert_to_tensor, copy_to_device, execute
from ..errors import InvalidArgumentError
from ..runtime.registry import BatchContext, Broadcasting
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from .graph import Graph, _fresh_random_attrs, _skeleton
from .tracer import TracingError, _current, _tl, _Tracer

__all__ = ["vectorized_map", "FALLBACK_OPS", "VectorizationWarning", "recording_fallbacks"]

#: the ops (and Python/control-flow nodes) that ran once per example in this process
FALLBACK_OPS: set = set()

_scopes = _devs.active_scopes


class VectorizationWarning(UserWarning):
    """``tf.vectorized_map`` ran a part of the function once per example."""


_collectors: list = []


@contextlib.contextmanager
def recording_fallbacks():
    """``with recording_fallbacks() as parts:``: ``parts`` collects what ran once per
    example in the block (``"op Where"``, ``"the function"``), warned or not (the
    conformance suite uses it)."""
    parts: set = set()
    _collectors.append(parts)
    try:
        yield parts
    finally:
        _collectors.remove(parts)


def _warn(what, why, warn):
    if warn and what not in FALLBACK_OPS:
        warnings.warn(f"tf.vectorized_map: {what} {why}; it runs once per example in a loop "
                      "(correct, but not vectorised)", VectorizationWarning, stacklevel=4)
    FALLBACK_OPS.add(what)
    for c in _collectors:
        c.add(what)


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
    """``fn`` applied to each element of ``elems`` along dimension 0, vectorised.

    Args:
        fn: a function of one example: a Tensor (or the structure ``elems`` has,
            each leaf without its first dimension), returning a Tensor or a nested
            structure of Tensors.
        elems: a Tensor, or a nested structure of Tensors with the same first
            dimension (the batch).
        fallback_to_while_loop: when ``fn`` cannot be vectorised (Python control flow
            on tensor values, Variable assignments), run it once per example instead of
            raising.
        warn: warn (once per op) when a part runs once per example.

    Returns:
        ``fn``'s structure, each leaf with the batch as a new first dimension.

    Per-example gradients of a model, in one batched pass:

    >>> import tapeflow as tf
    >>> w = tf.Variable([[1.0], [2.0]])
    >>> xs = tf.constant([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> def grad_of(x):
    ...     with tf.GradientTape() as tape:
    ...         loss = tf.reduce_sum(tf.matmul(x[None], w) ** 2)
    ...     return tape.gradient(loss, w)
    >>> print(tf.reshape(tf.vectorized_map(grad_of, xs), (3, 2)))
    tf.Tensor(
    [[2. 0.]
     [0. 4.]
     [6. 6.]], shape=(3, 2), dtype=float32)
    """
    struct = _skeleton(elems)
    leaves = nest.flatten(elems)
    xs = []
    for i, x in enumerate(leaves):
        if isinstance(x, Variable):
            x = x.read_value()
        elif not isinstance(x, Tensor):
            x = convert_to_tensor(x)
        if len(x.shape) == 0:
            raise InvalidArgumentError(
                f"tf.vectorized_map: elems leaf {i} is a scalar; every leaf needs the batch "
                "as its first dimension")
        xs.append(x)
    if not xs:
        raise InvalidArgumentError("tf.vectorized_map: elems holds no tensor")
    sizes = {int(x.shape[0]) for x in xs}
    if len(sizes) > 1:
        raise InvalidArgumentError(
            "tf.vectorized_map: the leaves of elems have different first dimensions "
            f"{[int(x.shape[0]) for x in xs]}; they must all be the batch size")
    outs, out_struct = vectorize(lambda *ex: fn(nest.pack_sequence_as(struct, ex)), xs,
                                 fallback_to_while_loop, warn)
    return nest.pack_sequence_as(out_struct, outs)


def vectorize(f, xs, fallback=True, warn=True, examples=None):
    """``f(*examples)`` for every example of the tensors ``xs`` (batch in dimension 0),
    vectorised: ``(output leaves, their structure)``; a ``None`` leaf stays None.
    ``examples``: the tensors to trace ``f`` with (default: the first example)."""
    n = int(xs[0].shape[0])
    if examples is None:
        examples = [x[0] if n else _zeros(tuple(x.shape[1:]), x.dtype, x._device) for x in xs]
    g = Graph("vectorized_map")
    parent = _current()
    tr = _Tracer(g, parent)
    for e in examples:
        vid = g.new_value(e._data.shape, e._data.dtype, e._device)
        g.args.append(vid)
        g.arg_names.append(f"elems{len(g.args) - 1}")
        tr.bind(e, vid, True)
    _tl.tracer = tr
    _tracing[0] += 1
    _scopes[0] += 1
    why = None
    try:
        with _ctx.stop_all_recording():
            result = f(*examples)
    except TracingError:
        if not fallback:
            for key, var in tr.assigned.items():
                var._value = tr.var_before[key]
            raise
        why = "needs tensor values in Python (control flow or a host conversion)"
    finally:
        _scopes[0] -= 1
        _tracing[0] -= 1
        _tl.tracer = parent
    if why is None and tr.assigned:
        why = "assigns Variables"
    if why is not None:
        for key, var in tr.assigned.items():            # undo the trace's assignments
            var._value = tr.var_before[key]
        if not fallback:
            raise InvalidArgumentError(
                "tf.vectorized_map: the function assigns Variable(s) "
                f"{[v.name for v in tr.assigned.values()]}; assignments cannot be vectorised "
                "(pass fallback_to_while_loop=True to run it once per example)")
        _warn("the function", why, warn)
        return _loop(f, xs, n)
    out_struct = _skeleton(result)
    out_leaves = nest.flatten(result)
    outs = []
    for x in out_leaves:
        if isinstance(x, Variable):
            x = tr.read(x, x._value)
        if x is None:
            outs.append(None)
        else:
            if not isinstance(x, Tensor):
                x = convert_to_tensor(x)
            outs.append(tr.vid_of(x))
    return _run(g, tr, xs, n, outs, warn), out_struct


def _run(g: Graph, tr, xs, n, out_vids, warn):
    """Run graph ``g`` on the batch: batched values carry it as dimension 0."""
    env = {}
    # values that depend on neither the batch nor state were computed by the trace: reuse
    # them, unless a tape or accumulator must see the ops that make them
    known = {} if _ctx.tapes_active[0] else {
        vid: t for t in tr.keep if (vid := tr.ids.get(id(t))) not in tr.dynamic}
    k = len(xs)
    for vid, x in zip(g.args[:k], xs):
        env[vid] = (x, True)
    for vid, t in zip(g.args[k:], tr.captures):
        env[vid] = (t, False)
    for node in g.nodes:
        kind = node.kind
        if kind == "op":
            if known and node.outputs[0] in known:
                for o in node.outputs:
                    env[o] = (known[o], False)
                continue
            ins = [env[i] for i in node.inputs]
            tensors = tuple(t for t, _ in ins)
            flags = tuple(b for _, b in ins)
            if node.stateful or True in flags:
                outs, oflags = _batched_op(node, tensors, flags, n, g, warn)
            else:
                out = execute(node.op, tensors, node.attrs)
                outs = out if isinstance(out, tuple) else (out,)
                oflags = (False,) * len(outs)
            for o, t, b in zip(node.outputs, outs, oflags):
                env[o] = (t, b)
        elif kind == "const":
            env[node.outputs[0]] = (wrap(node.value, node.device), False)
        elif kind == "read":
            env[node.outputs[0]] = (node.var.read_value(), False)
        elif kind == "copy":
            t, b = env[node.inputs[0]]
            env[node.outputs[0]] = (copy_to_device(t, node.device), b)
        else:                                    # py, print, cond, while
            ins = [env[i] for i in node.inputs]
            call = node.attrs["_eager"]
            if node.attrs.get("_vargs"):         # control flow: reads Variable args (none here)
                call = functools.partial(call, [])
            if True not in (b for _, b in ins):
                res = call(*(t for t, _ in ins))
                for o, t in zip(node.outputs, res):
                    env[o] = (t, False)
                continue
            _warn(f"a {kind} node ({node.name})", "has no batching rule", warn)
            res = _loop_call(call, [t for t, _ in ins], [b for _, b in ins], n,
                             [g.meta[o] for o in node.outputs], f"a {kind} node")
            for o, t in zip(node.outputs, res):
                env[o] = (t, True)
    results = []
    for vid in out_vids:
        if vid is None:
            results.append(None)
            continue
        t, b = env[vid]
        results.append(t if b else _ops.broadcast_to(t, (n,) + tuple(t.shape)))
    return results


def _align(tensors, flags):
    """Broadcasting's rule: batched inputs padded with size-1 dimensions after the
    batch to the largest example rank, so that NumPy broadcasting lines them up."""
    rank = max(len(t.shape) - b for t, b in zip(tensors, flags))
    out = []
    for t, b in zip(tensors, flags):
        r = len(t.shape) - 1
        if b and r < rank:
            s = tuple(t.shape)
            t = _ops.reshape(t, s[:1] + (1,) * (rank - r) + s[1:])
        out.append(t)
    return tuple(out)


def _batched_op(node, tensors, flags, n, g, warn):
    op = node.op
    rule = op.batch
    attrs = node.attrs
    if node.stateful and "key" in attrs:
        attrs = _fresh_random_attrs(attrs)()        # fresh numbers, as a replay draws
    if rule is None:
        _warn(f"op {op.name}", "has no batching rule", warn)
        return _loop_op(node, tensors, flags, n, g), (True,) * len(node.outputs)
    if type(rule) is Broadcasting:
        out = execute(op, _align(tensors, flags), attrs)
        outs = out if isinstance(out, tuple) else (out,)
        return outs, (True,) * len(outs)
    ctx = BatchContext(op, attrs, flags, n)
    out = rule(ctx, *tensors)
    if out is NotImplemented:               # a case the rule does not cover
        _warn(f"op {op.name}", "has no batching rule for these inputs", warn)
        return _loop_op(node, tensors, flags, n, g), (True,) * len(node.outputs)
    outs = out if isinstance(out, tuple) else (out,)
    return outs, ctx.out_batched or (True,) * len(outs)


def _loop_op(node, tensors, flags, n, g):
    op = node.op
    attrs = node.attrs
    fresh = _fresh_random_attrs(attrs) if node.stateful and "key" in attrs else None

    def call(*ts):
        out = execute(op, ts, fresh() if fresh is not None else attrs)
        return out if isinstance(out, tuple) else (out,)
    return _loop_call(call, tensors, flags, n, [g.meta[o] for o in node.outputs],
                      f"op {op.name}")


def _loop_call(call, tensors, flags, n, metas, what):
    """``call`` once per example (batched inputs unstacked), its outputs stacked."""
    cols = [_ops.unstack(t, num=n) if b else None for t, b in zip(tensors, flags)]
    rows = [call(*[t if c is None else c[i] for t, c in zip(tensors, cols)]) for i in range(n)]
    if not rows:
        return tuple(_zeros((0,) + shape, dt, dev) for shape, dt, dev in metas)
    return tuple(_stack(col, what) for col in zip(*rows))


def _stack(col, what):
    shapes = {tuple(t.shape) for t in col}
    if len(shapes) > 1:
        raise InvalidArgumentError(
            f"tf.vectorized_map: {what} gives results of different shapes for different "
            f"examples ({', '.join(str(list(s)) for s in sorted(shapes))}): a batch needs "
            "one shape; pad the results to one shape, or loop in Python")
    return _ops.stack(list(col))


def _zeros(shape, dt, dev):
    with _devs.device(dev.name):
        return _ops.zeros(shape, dtype=dt)


def _loop(f, xs, n):
    """The whole function once per example (what could not be vectorised)."""
    cols = [_ops.unstack(x, num=n) for x in xs]
    rows = []
    struct = None
    for i in range(n):
        res = f(*[c[i] for c in cols])
        struct, leaves = _skeleton(res), nest.flatten(res)
        rows.append([convert_to_tensor(x) if x is not None and not isinstance(x, Tensor)
                     else x for x in leaves])
    if not rows:
        raise InvalidArgumentError(
            "tf.vectorized_map: the function could not be vectorised and elems is empty, so "
            "the shapes of its results are unknown")
    outs = [None if col[0] is None else _stack(col, "the function") for col in zip(*rows)]
    return outs, struct


def _jacobian_rows(f, seeds, first):
    if _ctx.active_tapes() and _current() is None:
        # A tape of this thread records (the Jacobian is differentiated again): the
        # traced per-row function would capture the forward values as constants, so
        # the rows are computed one by one, eagerly, where the tape sees them
        cols = list(zip(*[f(seeds[i]) for i in range(int(seeds.shape[0]))]))
        out = []
        for col in cols:
            ref = next((g for g in col if g is not None), None)
            out.append(None if ref is None else _ops.stack(
                [_ops.zeros_like(ref) if g is None else g for g in col]))
        return tuple(out)
    outs, _ = vectorize(f, [seeds], fallback=True, warn=True, examples=[first])
    return outs


_ctx.install_vectorize_jacobian(_jacobian_rows)
