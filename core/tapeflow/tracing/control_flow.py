"""The nodes of a traced function that run Python at every call: control flow
(``tapeflow.cond``, ``tapeflow.while_loop``) and Python itself (``tapeflow.py_function``,
``tapeflow.print``, a ``custom_gradient`` function inside a trace), and
:func:`record_node_gradient`, which makes each of them differentiable by the tapes
recording while it is traced.

``cond`` and ``while_loop``: control flow that :func:`tapeflow.function` can trace.

Eagerly they are plain Python (``true_fn() if pred else false_fn()``; a ``while`` loop),
differentiable because the ops they run are recorded by active tapes. Inside a traced
function, when the predicate depends on the function's arguments or state, each branch
(or the loop's condition and body) is traced into a sub-graph, and the graph gets one
``cond`` / ``while`` node that picks the branch or runs the loop at every call. Tensors
from the enclosing function are captured as the sub-graphs' inputs, Variables (captured
ones and the function's Variable arguments) are read when the sub-graph runs, and
Variables assigned in a branch or body are assigned only when it runs. At trace time
both branches run once (to trace them): the untaken one first, and the Variables it
assigned are put back; ``tf.print`` in the untaken branch or in the loop body does not
print while tracing (the loop then runs for real, with the compiled sub-graphs, for the
trace's own values). A tape recording while the node is traced (inside the function, or
around its first call) gets one record whose gradient re-runs the node eagerly under a
tape (:func:`record_node_gradient`), with the Variables it reads and assigns held at
their values from before the node (the re-run assigns nothing, and a gradient taken
after a later assignment sees what the node saw), so both are differentiable to any
order, traced or not, assignments or not.
Traced loop variables keep their dtype and shape (``shape_invariants`` that let a
shape change are honoured eagerly only); ``maximum_iterations`` bounds the loop.

:func:`py_function` runs eager Python ``func(*inp)`` at every call (an escape hatch
for code that cannot be traced), :func:`print_` (``tf.print``) prints at every call
(Python's ``print`` runs only while tracing), and :func:`opaque_call` traces a
``custom_gradient`` function as one ``py`` node that re-runs it with each call's values
and keeps what its tapes record. :func:`host_next` reads a Python-side source (a
``tf.data`` iterator) at every call.

Long file: every node kind here (cond, while, py, print, an iterator's next) is built
with the same sub-trace, node emission and gradient machinery (``_subtrace``,
``_emit``, :func:`record_node_gradient`), and ``tf.print``'s formatting belongs with
its node.

>>> import tapeflow as tf
>>> @tf.function
... def collatz(a):
...     def body(a, n):
...         a = tf.cond(tf.equal(a % 2, 0), lambda: a // 2, lambda: 3 * a + 1)
...         return a, n + 1
...     return tf.while_loop(lambda a, n: tf.not_equal(a, 1), body, [a, tf.constant(0)])[1]
>>> int(collatz(tf.constant(6))), int(collatz(tf.constant(27)))
(8, 111)
"""

from __future__ import annotations

import sys

import numpy as np

from ..autodiff.tape import GradientTape
from ..ops import math as _m
from ..ops.array_values import identity as _identity
from ..runtime import context as _ctx
from .. import dtypes as _dt
from ..runtime.dispatch import convert_to_tensor
from .. import nest
from ..errors import InvalidArgumentError, InvalidTypeError, OutOfRangeError
from ..runtime.registry import OpDef
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from .concrete import ConcreteFunction, reading
from .graph import Graph, Node, _skeleton
from .tracer import _current, _tl, _Tracer

__all__ = ["cond", "while_loop", "py_function", "host_next", "opaque_call", "print_",
           "record_node_gradient"]


# --- control flow: cond and while_loop ------------------------------------------------

def _as_tensor(x):
    return convert_to_tensor(x)


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``true_fn()`` if ``pred`` else ``false_fn()``. Inside :func:`tapeflow.function`,
    when ``pred`` depends on the arguments or state, both branches are traced and must
    return the same structure of tensors with the same dtypes and shapes.

    >>> import tapeflow as tf
    >>> print(tf.cond(tf.constant(3) > 2, lambda: tf.constant(1.0), lambda: tf.constant(-1.0)))
    tf.Tensor(1.0, shape=(), dtype=float32)
    """
    if not callable(true_fn) or not callable(false_fn):
        raise InvalidArgumentError("cond needs both true_fn and false_fn (callables)")
    tr = _current()
    if tr is None or not _is_dynamic(tr, pred):
        return true_fn() if _truth(pred) else false_fn()
    p = pred.read_value() if isinstance(pred, Variable) else _as_tensor(pred)
    if p._data.size != 1:
        raise InvalidArgumentError(f"cond: pred must be a scalar boolean; got shape "
                                   f"{tuple(p.shape)}")
    taken = bool(np.asarray(p._device.backend.to_host(p._data, p._device)).reshape(()))
    # the untaken branch first (its assignments are put back), then the taken one, so
    # each branch sees the Variables as they were before the cond
    first, second = (false_fn, true_fn) if taken else (true_fn, false_fn)
    first, second = _Expanded(first), _Expanded(second)
    sub_u, _ = _subtrace(tr, first, (), "cond_false" if taken else "cond_true",
                         restore=True)
    sub_k, out_k = _subtrace(tr, second, (), "cond_true" if taken else "cond_false",
                             restore=False)
    sub_t, sub_f = (sub_k, sub_u) if taken else (sub_u, sub_k)
    _same_signature(sub_t, sub_f, "cond: true_fn and false_fn")
    caps = _union(sub_t.capture_tensors, sub_f.capture_tensors)
    idx_t = [caps.index_of(t) for t in sub_t.capture_tensors]
    idx_f = [caps.index_of(t) for t in sub_f.capture_tensors]
    cf_t, cf_f = sub_t.concrete, sub_f.concrete

    def run(vargs, pred_a, *cap_arrays):
        cf, idx = (cf_t, idx_t) if bool(pred_a) else (cf_f, idx_f)
        return cf._run([cap_arrays[i] for i in idx], vargs)

    def eager(vargs, pred_t, *cap_ts):
        cf, idx = (cf_t, idx_t) if bool(pred_t) else (cf_f, idx_f)
        return cf._eager([cap_ts[i] for i in idx], vargs)

    out = _emit(tr, "cond", [p] + caps.tensors, run, eager, out_k, (sub_t, sub_f),
                sub_t.stateful or sub_f.stateful, sub_k.var_before)
    return second.pack(nest.pack_sequence_as(sub_k.structure, out))


class _Expanded:
    """A ``cond`` branch whose result may hold composite values (TensorArrays): it
    returns them as tuples of their tensors, and :meth:`pack` rebuilds them."""

    def __init__(self, fn):
        self.fn = fn
        self.out = self.leaves = None

    def __call__(self):
        out = self.fn()
        leaves = nest.flatten(out)
        if not any(_is_composite(x) for x in leaves):
            return out
        self.out, self.leaves = out, leaves
        return nest.pack_sequence_as(out, [tuple(x._components()) if _is_composite(x) else x
                                           for x in leaves])

    def pack(self, res):
        if self.leaves is None:
            return res
        return nest.pack_sequence_as(self.out, _with_components(self.leaves, nest.flatten(res)))


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, maximum_iterations=None, name=None,
               _traced=False):
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` (and fewer
    than ``maximum_iterations`` iterations ran); returns the final loop variables in
    the structure of ``loop_vars`` (nested lists, tuples, dicts and namedtuples of
    tensors and ``tf.TensorArray`` s). Inside :func:`tapeflow.function` the loop
    variables must keep their dtypes and shapes across iterations.

    >>> import tapeflow as tf
    >>> i, s = tf.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s + i), [0, 0])
    >>> int(i), int(s)
    (5, 10)
    """
    lv = _LoopVars(loop_vars, shape_invariants)
    limit = None if maximum_iterations is None else int(maximum_iterations)
    tr = _current()
    items = lv.items
    # (_traced: a traced loop even when nothing in it depends on the arguments -- AutoGraph's
    # `for` over a tensor, as TensorFlow: one body in the graph, not one per iteration)
    dyn = tr is not None and (_traced or any(_is_dynamic(tr, v)
                                             for v in lv.plain_and_parts(items))
                              or _cond_is_dynamic(cond, lv.args(items)))
    if not dyn:
        i = 0
        while (limit is None or i < limit) and _truth(cond(*lv.args(items))):
            items = lv.check_eager(body(*lv.args(items)), items)
            i += 1
        return lv.result(items)
    # traced: the condition and the body become sub-graphs over the flat loop variables
    lv.learn_shapes(tr, body, items)
    vals = lv.flatten(items)
    invs = lv.flat_invariants(items)
    specs = [(v._data.shape, v._data.dtype, v._device) for v in vals]
    sub_c, _ = _subtrace(tr, lambda *f: cond(*lv.args(lv.pack(f))), vals, "while_cond",
                         restore=True)
    sub_b, _ = _subtrace(tr, lambda *f: _body_outputs(
        lv.flatten(lv.outputs(body(*lv.args(lv.pack(f))))), f, invs, check_shapes=True),
        vals, "while_body", restore=True)
    if len(sub_c.graph.outputs) != 1 or sub_c.graph.meta[sub_c.graph.outputs[0]][0] not in (
            (), (1,)):
        raise InvalidArgumentError("while_loop: cond must return one scalar boolean")
    caps = _union(sub_c.capture_tensors, sub_b.capture_tensors)
    idx_c = [caps.index_of(t) for t in sub_c.capture_tensors]
    idx_b = [caps.index_of(t) for t in sub_b.capture_tensors]
    cf_c, cf_b = sub_c.concrete, sub_b.concrete
    n = len(vals)

    def run(vargs, *arrays):
        cur, cap = list(arrays[:n]), arrays[n:]
        cc = [cap[i] for i in idx_c]
        cb = [cap[i] for i in idx_b]
        k = 0
        while (limit is None or k < limit) and bool(cf_c._run(cur + cc, vargs)[0]):
            cur = list(cf_b._run(cur + cb, vargs))
            k += 1
        return tuple(cur)

    def eager(vargs, *ts):
        cur, cap = list(ts[:n]), ts[n:]
        cc = [cap[i] for i in idx_c]
        cb = [cap[i] for i in idx_b]
        k = 0
        while (limit is None or k < limit) and bool(cf_c._eager(cur + cc, vargs)[0]):
            cur = list(cf_b._eager(cur + cb, vargs))
            k += 1
        return cur

    # the trace's own values: run the loop now with the compiled sub-graphs (this also
    # makes the Variable assignments of the body happen, as they will at every call)
    before = {id(v): v._value for v in sub_c.assigned_vars + sub_b.assigned_vars}
    _tl.tracer = None           # (Python nodes in the loop run eagerly, untraced)
    try:
        res = run(tr.vargs, *[v._data for v in vals], *[t._data for t in caps.tensors])
    finally:
        _tl.tracer = tr
    result = [wrap(a, s[2]) for a, s in zip(res, specs)]
    out = _emit(tr, "while", vals + caps.tensors, run, eager, result, (sub_c, sub_b),
                sub_c.stateful or sub_b.stateful, before)
    return lv.result(lv.pack(out))


class _LoopVars:
    """The loop variables of a :func:`while_loop`: ``items`` (the top-level values, the
    positional arguments of ``cond`` and ``body``), nested structures of tensors and
    *composite* values -- objects with ``_components()`` (their tensors, e.g. a
    TensorArray's buffer) and ``_rebuilt(components)`` -- flattened to one list of
    tensors for a traced loop and packed back."""

    def __init__(self, loop_vars, shape_invariants):
        self.single = not isinstance(loop_vars, (list, tuple))
        self.typ = list if self.single else type(loop_vars)
        items = [loop_vars] if self.single else list(loop_vars)
        self.template = items
        leaves = nest.flatten(items)
        self.composite = [_is_composite(x) for x in leaves]
        self.items = nest.pack_sequence_as(items, [
            x if c else _loop_tensor(x) for x, c in zip(leaves, self.composite)])
        self.invs = None
        if shape_invariants is not None:
            invs = [shape_invariants] if self.single else list(shape_invariants)
            try:
                self.invs = nest.flatten_up_to(items, invs)
            except (ValueError, TypeError):
                raise InvalidArgumentError(
                    "while_loop: shape_invariants must have the structure of loop_vars "
                    "(one shape, or None, per loop variable)") from None

    def args(self, items):
        return items

    def result(self, items):
        return items[0] if self.single else _rebuild(self.typ, items)

    def outputs(self, out):
        """The body's result as a list of top-level items, its structure checked."""
        if self.single and not (isinstance(out, (list, tuple)) and len(out) == 1
                                and not isinstance(self.template[0], (list, tuple))):
            out = [out]
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(out) != len(self.template):
            raise InvalidArgumentError(f"while_loop: body returned {len(out)} values for "
                                       f"{len(self.template)} loop variables")
        try:
            leaves = nest.flatten_up_to(self.template, out)
        except (ValueError, TypeError) as e:
            raise InvalidArgumentError(f"while_loop: body must return the loop variables' "
                                       f"structure ({e})") from None
        for x, c in zip(leaves, self.composite):
            if c != _is_composite(x):
                raise InvalidArgumentError(
                    f"while_loop: body returned {type(x).__name__} for a loop variable that "
                    "entered as " + ("a TensorArray" if c else "a tensor"))
        return nest.pack_sequence_as(self.template, [
            x if c else _loop_tensor(x) for x, c in zip(leaves, self.composite)])

    def plain_and_parts(self, items):
        """Every tensor the loop variables hold now (without changing any)."""
        out = []
        for x, c in zip(nest.flatten(items), self.composite):
            out.extend(x._parts() if c else [x])
        return out

    def learn_shapes(self, tr, body, items):
        """Composite loop variables that cannot give their tensors yet (a TensorArray with
        nothing written and no element shape): run the body once more, speculatively, to
        learn them from what it returns."""
        leaves = nest.flatten(items)
        need = [j for j, (x, c) in enumerate(zip(leaves, self.composite))
                if c and x._needs_shape()]
        if not need:
            return
        probe = _Tracer(Graph("probe"), tr)
        probe.speculative = True
        copies = nest.pack_sequence_as(items, [x._copy() if c else x for x, c in
                                               zip(leaves, self.composite)])
        _tl.tracer = probe
        try:
            out = nest.flatten(self.outputs(body(*self.args(copies))))
        finally:
            _tl.tracer = tr
            for var in probe.assigned.values():
                var._value = probe.var_before[id(var)]
        for j in need:
            leaves[j]._learn_from(out[j])

    def flatten(self, items):
        out = []
        for x, c in zip(nest.flatten(items), self.composite):
            out.extend(x._components() if c else [x])
        return out

    def flat_invariants(self, items):
        if self.invs is None:
            return None
        out = []
        for x, c, inv in zip(nest.flatten(items), self.composite, self.invs):
            out.extend([None] * len(x._components()) if c else [inv])
        return out

    def pack(self, flat):
        return nest.pack_sequence_as(self.template, _with_components(
            nest.flatten(self.template), list(flat), self.composite))

    def check_eager(self, out, items):
        """An eager iteration's result: structure, dtypes and shapes checked."""
        new = self.outputs(out)
        nl, ol = nest.flatten(new), nest.flatten(items)
        plain = [j for j, c in enumerate(self.composite) if not c]
        invs = None if self.invs is None else [self.invs[j] for j in plain]
        _body_outputs([nl[j] for j in plain], [ol[j] for j in plain], invs, False)
        return new


def _is_composite(x):
    return hasattr(x, "_components") and hasattr(x, "_rebuilt")


def _loop_tensor(x):
    if isinstance(x, Variable):
        return x.read_value()
    if x is None:
        raise InvalidArgumentError("while_loop: a loop variable is None; loop variables are "
                                   "tensors (or TensorArrays)")
    return _as_tensor(x)


# --- helpers --------------------------------------------------------------------------------

def _rebuild(typ, vals):
    return typ(vals) if typ in (list, tuple) else typ(*vals)


def _body_outputs(out, vals, invs, check_shapes):
    """The body's result as a list of tensors, checked against the loop variables
    (``invs``: one shape invariant, or None, per loop variable)."""
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    if len(out) != len(vals):
        raise InvalidArgumentError(f"while_loop: body returned {len(out)} values for "
                                   f"{len(vals)} loop variables")
    out = [o.read_value() if isinstance(o, Variable) else _as_tensor(o) for o in out]
    for i, (o, v) in enumerate(zip(out, vals)):
        if o._data.dtype != v._data.dtype:
            raise InvalidArgumentError(
                f"while_loop: loop variable {i} enters the body as {v._data.dtype.name} and "
                f"leaves it as {o._data.dtype.name}; loop variables keep their dtype")
        so, sv = tuple(o._data.shape), tuple(v._data.shape)
        inv = None if invs is None or i >= len(invs) or invs[i] is None else invs[i]
        if inv is not None:
            inv = tuple(inv.as_list() if hasattr(inv, "as_list") else inv)
        if inv is not None and (len(inv) != len(so) or any(
                d is not None and d != s for d, s in zip(inv, so))):
            raise InvalidArgumentError(
                f"while_loop: loop variable {i} has shape {list(so)} after an iteration, "
                f"which does not match its shape invariant {list(inv)}")
        if check_shapes and so != sv:
            hint = (" (shape_invariants that allow it are honoured only outside "
                    "tf.function)" if inv is not None else
                    "; give shape_invariants and run the loop eagerly to let it change")
            raise InvalidArgumentError(
                f"while_loop: loop variable {i} enters the body with shape {list(sv)} and "
                f"leaves it with shape {list(so)}; inside tf.function loop variables keep "
                f"their shape{hint}")
        if inv is None and invs is None and so != sv and not check_shapes:
            raise InvalidArgumentError(
                f"while_loop: loop variable {i} enters the body with shape {list(sv)} and "
                f"leaves it with shape {list(so)}; pass shape_invariants (None for the "
                "dimensions that change) to allow it")
    return out


def _truth(pred):
    return bool(pred)


def _is_dynamic(tr, x):
    if isinstance(x, Variable):
        return True
    if not isinstance(x, Tensor):
        return False
    t = tr
    while t is not None:
        vid = t.ids.get(id(x))
        if vid is not None:
            return vid in t.dynamic
        t = t.parent
    return False


def _cond_is_dynamic(fn, vals):
    """Whether ``fn(*vals)`` depends on the traced function's arguments or state (it runs
    once under a throw-away tracer that captures from the enclosing one)."""
    tr = _current()
    probe = _Tracer(Graph("probe"), tr)
    _tl.tracer = probe
    try:
        out = fn(*vals)
    finally:
        _tl.tracer = tr
    for var in probe.assigned.values():
        var._value = probe.var_before[id(var)]
    if isinstance(out, Variable):
        return True
    vid = probe.ids.get(id(out)) if isinstance(out, Tensor) else None
    return vid is not None and vid in probe.dynamic


class _Sub:
    """A traced branch / loop part: ``graph``, ``concrete``, ``capture_tensors``,
    ``assigned`` (ids of the Variables it assigns), ``structure`` (of its outputs)."""


class _Caps:
    def __init__(self):
        self.tensors = []
        self._ids = {}

    def add(self, t):
        if id(t) not in self._ids:
            self._ids[id(t)] = len(self.tensors)
            self.tensors.append(t)

    def index_of(self, t):
        return self._ids[id(t)]


def _union(a, b):
    c = _Caps()
    for t in list(a) + list(b):
        c.add(t)
    return c


def _subtrace(parent, fn, init, name, restore):
    """Trace ``fn`` into a sub-graph of ``parent``'s trace. ``init``: tensors whose
    values stand in for the sub-graph's arguments while tracing (a while loop's
    variables). Returns a :class:`_Sub` and ``fn``'s flattened outputs (Tensors).
    ``restore``: put back the Variables ``fn`` assigned (a branch or loop body that
    only ran to be traced)."""
    g = Graph(name)
    tr = _Tracer(g, parent)
    tr.speculative = tr.speculative or restore
    args = []
    for v in init:
        vid = g.new_value(v._data.shape, v._data.dtype, v._device)
        g.args.append(vid)
        g.arg_names.append(f"x{len(args)}")
        t = wrap(v._data, v._device)
        tr.bind(t, vid, True)
        args.append(t)
    _tl.tracer = tr
    try:
        try:
            out = fn(*args)
            structure = _skeleton(out)
            outs = [_as_tensor_in(tr, o, name) for o in nest.flatten(out)]
        finally:
            _tl.tracer = parent
    except BaseException:
        for var in tr.assigned.values():      # leave the Variables as they were
            var._value = tr.var_before[id(var)]
        raise
    if restore:
        for var in tr.assigned.values():
            var._value = tr.var_before[id(var)]
    for var in tr.assigned.values():     # the enclosing trace restores them if it must
        parent.assigned.setdefault(id(var), var)
        parent.var_before.setdefault(id(var), tr.var_before[id(var)])
    for var in tr.vars:
        if not any(v is var for v in parent.vars):
            parent.vars.append(var)
    for var in tr.read_vars:
        if not any(v is var for v in parent.read_vars):
            parent.read_vars.append(var)
    g.structure = None
    g.py_outputs = []
    for o in outs:
        g.py_outputs.append(("t", len(g.outputs)))
        g.outputs.append(tr.vid_of(o))
    sub = _Sub()
    sub.graph = g
    sub.structure = structure
    sub.concrete = ConcreteFunction(g, optimize=True, passes=("dce",))
    sub.capture_tensors = tr.captures
    sub.assigned = set(tr.assigned)
    sub.assigned_vars = list(tr.assigned.values())
    sub.var_before = dict(tr.var_before)
    # the Variables it reads (captured or arguments): its gradient covers them
    sub.variables = list(tr.read_vars)
    # side effects (prints, Python, random ops, assignments) keep the node alive
    sub.stateful = any(n.stateful or n.kind in ("assign", "print", "py") for n in g.nodes)
    return sub, outs


def _as_tensor_in(tr, o, name):
    if isinstance(o, Variable):
        return tr.read(o, o._value)
    if isinstance(o, Tensor):
        return o
    if o is None:
        raise InvalidArgumentError(f"{name}: a branch or loop body returned None; inside "
                                   "tf.function it must return tensors")
    return _as_tensor(o)


def _with_components(leaves, flat, composite=None):
    """``leaves`` with their values from ``flat``: a composite leaf (a TensorArray) takes
    as many values as it has components, any other one value (``composite``: which
    leaves are composites, when known)."""
    out, k = [], 0
    for j, x in enumerate(leaves):
        if composite[j] if composite is not None else _is_composite(x):
            m = len(x._components())
            out.append(x._rebuilt(flat[k:k + m]))
            k += m
        else:
            out.append(flat[k])
            k += 1
    return out


def _same_structure(a, b):
    try:
        nest.assert_same_structure(a, b)
    except (ValueError, TypeError):
        return False
    return True


def _same_signature(a, b, what):
    ma = [a.graph.meta[o][:2] for o in a.graph.outputs]
    mb = [b.graph.meta[o][:2] for o in b.graph.outputs]
    if not _same_structure(a.structure, b.structure) or len(ma) != len(mb) or any(
            tuple(x[0]) != tuple(y[0]) or x[1] != y[1] for x, y in zip(ma, mb)):
        fa = ", ".join(f"{d.name}{list(s)}" for s, d in ma)
        fb = ", ".join(f"{d.name}{list(s)}" for s, d in mb)
        raise InvalidArgumentError(f"{what} must return the same structure of tensors with "
                                   f"the same dtypes and shapes inside tf.function; got ({fa}) "
                                   f"and ({fb})")


def _emit(tr, kind, inputs, run, eager, result, subs, stateful, before):
    """Append a ``cond``/``while`` node to ``tr``'s graph; returns aliases of ``result``
    bound to the node's outputs, differentiable by the tapes recording now
    (``subs``: the node's traced parts; ``before``: ``{id(Variable): value}`` of the
    Variables they assign, as they were before the node ran). The gradient re-runs the
    node with the Variables it reads and assigns held at their values from before it
    (so it neither sees a later assignment nor assigns anything)."""
    g = tr.graph
    ins = [tr.vid_of(t) for t in inputs]
    variables, assigned = [], []
    for sub in subs:
        for v in sub.variables:
            if not any(v is u for u in variables):
                variables.append(v)
        for v in sub.assigned_vars:
            if not any(v is u for u in assigned):
                assigned.append(v)
    assigned_ids = {id(v) for v in assigned}
    hold = variables + [v for v in assigned if not any(v is u for u in variables)]
    values = None
    if _ctx.tapes_active[0] and hold:
        # the held values, read before the node (read nodes ahead of it when needed)
        values = []
        for v in hold:
            t = tr.read(v, before.get(id(v), v._value))
            if v.trainable:
                _ctx.watch_variable_read(v, t)
            values.append(t)
    outs = []
    aliases = []
    for t in result:
        vid = g.new_value(t._data.shape, t._data.dtype, t._device)
        a = wrap(t._data, t._device)
        tr.bind(a, vid, True)
        outs.append(vid)
        aliases.append(a)
    g.nodes.append(Node(kind, ins, outs, fn=run, attrs={"_eager": eager, "_vargs": True},
                        stateful=bool(assigned_ids) or stateful, label=kind))
    for key in assigned_ids:
        tr.var_vid.pop(key, None)          # the next read reads the Variable again
    vargs = tr.vargs
    record_node_gradient(lambda *ts: eager(vargs, *ts), inputs, aliases, variables,
                         assigned, values)
    return aliases


# --- nodes that run Python: py_function, opaque_call (custom_gradient), tf.print ----

def py_function(func=None, inp=None, Tout=None, name=None):
    """Run eager Python ``func(*inp)`` and return its result as tensors of ``Tout``;
    inside :func:`function` it runs at every call (an escape hatch for code that
    cannot be traced). Differentiable when ``func`` uses tapeflow ops. Without ``inp``
    it wraps ``func`` (and without ``func`` it is a decorator):
    ``@tf.py_function(Tout=tf.float32)``.

    >>> import tapeflow as tf
    >>> print(tf.py_function(lambda x: x * 2.0, [tf.constant(3.0)], tf.float32))
    tf.Tensor(6.0, shape=(), dtype=float32)
    >>> @tf.py_function(Tout=tf.float32)
    ... def plus(x, y):
    ...     return x + y
    >>> print(plus(tf.constant(1.0), 2.0))
    tf.Tensor(3.0, shape=(), dtype=float32)
    """
    if func is None:
        return lambda f: py_function(f, inp, Tout, name)
    if not callable(func):
        raise InvalidTypeError(f"py_function: func must be callable, got "
                               f"{type(func).__name__} {func!r}")
    if Tout is None:
        raise InvalidArgumentError("py_function: Tout (the dtype, or list of dtypes, of the "
                                   "result) is required")
    if inp is None:
        def wrapper(*args):
            return py_function(func, list(args), Tout, name)
        wrapper.__name__ = getattr(func, "__name__", "py_function")
        wrapper.__doc__ = getattr(func, "__doc__", None)
        wrapper.__wrapped__ = func
        return wrapper
    if not isinstance(inp, (list, tuple)):
        inp = [inp]
    single = not isinstance(Tout, (list, tuple))
    touts = [Tout] if single else list(Tout)
    out = _py_call(func, list(inp), touts, single,
                   f"py_function[{getattr(func, '__name__', 'func')}]")
    return out[0] if single else out


def host_next(fetch, label="iterator_next", strict=True, peek=None):
    """The next value of a Python-side source (a ``tf.data`` iterator), read at every
    call of a traced function: ``fetch()`` returns a structure of tensors, or raises
    StopIteration at the end. Returns ``(has_more, element)``: a boolean tensor and the
    element (``None`` at the end when not traced).

    Outside a trace it calls ``fetch()`` now. Inside one it calls it now too (the
    trace's values are the first call's) and adds a stateful node that calls it again
    at every later call, so each call gets the next element. At the end, ``strict``
    raises :class:`~tapeflow.errors.OutOfRangeError` (``next(iterator)``); otherwise
    the node gives ``has_more`` False and zeros shaped like the element (for a loop
    that stops there: the hook for AutoGraph's ``for x in dataset``). Each call's
    element must have the shapes and dtypes of the traced one. ``peek()`` (the next
    value, not consumed) serves a trace that only records (a ``tf.while_loop`` body
    traced before the loop runs, a ``tf.cond`` branch): the node is recorded and no
    element is taken then.

    >>> import tapeflow as tf
    >>> it = iter(tf.data.Dataset.from_tensor_slices([1, 2, 3]))
    >>> @tf.function
    ... def take(it):
    ...     return tf.tracing.control_flow.host_next(lambda: next(it))[1]
    >>> [int(take(it)) for _ in range(3)]
    [1, 2, 3]
    """
    tr = _current()
    if tr is None:
        try:
            return convert_to_tensor(True), fetch()
        except StopIteration:
            if strict:
                raise
            return convert_to_tensor(False), None
    _tl.tracer = None
    try:
        # (StopIteration at the end: as it would be eagerly)
        el = peek() if tr.speculative and peek is not None else fetch()
    finally:
        _tl.tracer = tr
    structure = _skeleton(el)
    leaves = [convert_to_tensor(x) for x in nest.flatten(el)]
    specs = [(t._data.shape, t._data.dtype, t._device) for t in leaves]
    flag = convert_to_tensor(True)
    g = tr.graph
    outs, aliases = [], []
    for t in [flag] + leaves:
        vid = g.new_value(t._data.shape, t._data.dtype, t._device)
        a = wrap(t._data, t._device)
        tr.bind(a, vid, True)
        outs.append(vid)
        aliases.append(a)

    def run():
        prev = _tl.tracer
        _tl.tracer = None              # (the source's own ops run eagerly)
        try:
            got = [convert_to_tensor(x) for x in nest.flatten(fetch())]
        except StopIteration:
            if strict:
                raise OutOfRangeError(f"{label}: end of sequence (the iterator has no "
                                      "more elements)") from None
            return (np.asarray(False),) + tuple(np.zeros(s, d) for s, d, _ in specs)
        finally:
            _tl.tracer = prev
        if len(got) != len(specs) or any(
                t._data.shape != s or t._data.dtype != d for t, (s, d, _) in zip(got, specs)):
            raise InvalidArgumentError(
                f"{label}: an element of shapes/dtypes "
                f"{[(tuple(t.shape), t.dtype.name) for t in got]} where the function was "
                f"traced with {[(tuple(s), np.dtype(d).name) for s, d, _ in specs]}; inside "
                "tf.function every element must match the traced one (batch with "
                "drop_remainder=True, or call next() outside the function)")
        return (flag._data,) + tuple(t._data for t in got)

    g.nodes.append(Node("py", [], outs, fn=run, attrs={"_eager": lambda: [
        wrap(a, s[2]) for a, s in zip(run(), [(None, None, flag._device)] + specs)]},
        stateful=True, label=label))
    return aliases[0], nest.pack_sequence_as(structure, aliases[1:])


def opaque_call(func, args):
    """``func(*args)`` as one ``py`` node of the current trace: it runs eagerly at every
    call, with that call's values, and keeps whatever its tapes record (a
    ``custom_gradient`` function's gradient). Returns ``func``'s result (a tensor or a
    tuple/list of tensors). Outside a trace it just calls ``func``.

    >>> import tapeflow as tf
    >>> @tf.function
    ... def f(x):
    ...     return tf.tracing.opaque_call(lambda t: t + 1.0, [x]) * 2.0
    >>> print(f(tf.constant(1.0)))
    tf.Tensor(4.0, shape=(), dtype=float32)
    >>> print(f.graph.nodes[0].name)
    opaque[<lambda>]
    """
    if _current() is None:
        return func(*args)
    shape = []
    out = _py_call(func, list(args), None, None, f"opaque[{getattr(func, '__name__', 'f')}]",
                   shape)
    kind = shape[0]
    return out[0] if kind is None else kind(out)


def _py_call(func, inp, touts, single, label, kind_out=None):
    """The body of :func:`py_function` / :func:`opaque_call`: ``touts`` None keeps the
    result's dtypes (``kind_out`` receives the result's container type, None for one
    tensor)."""
    name = label

    def eager(*ts):
        res = func(*ts)
        if touts is None:
            if kind_out is not None and not kind_out:
                kind_out.append(type(res) if isinstance(res, (list, tuple)) else None)
            res = list(res) if isinstance(res, (list, tuple)) else [res]
            return [convert_to_tensor(r) for r in res]
        res = [res] if single or not isinstance(res, (list, tuple)) else list(res)
        if len(res) != len(touts):
            raise InvalidArgumentError(
                f"{name}: the function returned {len(res)} value(s), Tout names {len(touts)}")
        out = []
        for r, d in zip(res, touts):
            t = convert_to_tensor(r)
            if t.dtype != _dt.as_dtype(d):
                t = _m.cast(t, d)
            out.append(t)
        return out

    tr = _current()
    if tr is None:
        return eager(*inp)
    # traced: run it now (for the trace's values) and record a node that runs it again
    ts = [x if isinstance(x, Tensor) else convert_to_tensor(x) for x in inp]
    _tl.tracer = None
    read_vars = ()
    try:
        if _ctx.tapes_active[0]:
            # the Variables func reads: its gradient for the tapes recording now covers
            # them too (a gradient function that re-runs a branch reading a Variable)
            with GradientTape() as probe:
                out = eager(*ts)
            read_vars = probe.watched_variables()
        else:
            out = eager(*ts)
    finally:
        _tl.tracer = tr
    ins = [tr.vid_of(t) for t in ts]
    g = tr.graph
    ovids = []
    fresh = []
    for t in out:
        vid = g.new_value(t._data.shape, t._data.dtype, t._device)
        alias = wrap(t._data, t._device)
        tr.bind(alias, vid, True)
        ovids.append(vid)
        fresh.append(alias)
    metas = [g.meta[i][2] for i in ins]

    def run(*arrays):
        res = eager(*[wrap(a, d) for a, d in zip(arrays, metas)])
        return tuple(t._data for t in res)
    g.nodes.append(Node("py", ins, ovids, fn=run, attrs={"_eager": eager}, stateful=True,
                        label=label))
    record_node_gradient(eager, ts, fresh, read_vars)
    return fresh


_NODE_OP = None


def record_node_gradient(eager_fn, inputs, outputs, variables=(), held=(), values=None):
    """Make a traced ``py`` / ``cond`` / ``while`` node differentiable by the tapes
    recording while it is traced (a tape inside the traced function, or outside
    around its first call).

    ``eager_fn(*inputs)`` runs the node eagerly through the dispatcher and returns
    its outputs; ``outputs`` are the tensors the trace gave for them; ``variables``:
    the Variables the node reads; ``held``: others it assigns; ``values``: the values
    of ``variables + held`` when the node started (default: read now). The tape
    record's gradient function is a :func:`py_function` that re-runs ``eager_fn``
    under a GradientTape -- graph replays inside it (branches, loop bodies) reading
    those values and assigning nothing (:func:`tapeflow.tracing.concrete.reading`),
    so a gradient computed after the node, or after an assignment, sees what the node
    saw -- and returns ``tape.gradient(outputs, inputs + trainable variables,
    output_gradients=dys)``: inside a trace it becomes a ``py`` node itself (so it
    runs at every call, with that call's values), and it is recorded the same way,
    so gradients of any order work.
    """
    _tapes_active = _ctx.tapes_active
    record = _ctx.record
    if not _tapes_active[0] or not outputs:
        return
    global _NODE_OP
    if _NODE_OP is None:
        _NODE_OP = OpDef("TracedNode", inputs=("*inputs",), dtype_rule="none")
    hold = []
    for v in list(variables) + list(held):
        if not any(v is u for u in hold):
            hold.append(v)
    if values is None:
        values = [v.read_value() for v in hold]      # the tapes watch these reads
    diffv = [j for j, v in enumerate(hold)
             if v.trainable and v.dtype.is_inexact and any(v is u for u in variables)]
    variables = [hold[j] for j in diffv]
    var_values = [values[j] for j in diffv]
    inputs = list(inputs)
    diff = [i for i, t in enumerate(inputs) if t.dtype.is_inexact]
    if not diff and not variables:
        return
    n = len(inputs)
    nh = len(hold)
    touts = [inputs[i].dtype for i in diff] + [v.dtype for v in variables]

    def grad_eager(*ts):
        # the node's inputs, the held Variables' values when it ran (its gradient may
        # run after an assignment), the output gradients
        xs, vals, dys = list(ts[:n]), list(ts[n:n + nh]), list(ts[n + nh:])
        # One tensor may come in twice: as two inputs (a value a branch captures twice),
        # or, replayed op by op, as an input and the very Tensor a Variable holds (a
        # read node's value), also passed here as a held value. A tape watching one
        # tensor twice would give each the gradient of both: all but its first use are
        # read through an Identity (recorded by the tapes outside: higher orders still
        # see the tensor).
        seen = {id(v._value) for v in hold}
        for i in diff:
            if id(xs[i]) in seen:
                xs[i] = _identity(xs[i])
            seen.add(id(xs[i]))
        vals = [_identity(t) if j in diffv else t for j, t in enumerate(vals)]
        dvals = [vals[j] for j in diffv]
        with GradientTape() as tape:
            for i in diff:
                tape.watch(xs[i])
            tape.watch(dvals)
            for v in variables:
                tape.watch(v)
            # graph replays (branches, loop bodies) read ``vals`` and assign nothing;
            # Python code (a py_function) reads the Variables: one of the two
            # gradients of a Variable is zero
            with reading(hold, vals):
                outs = eager_fn(*xs)
        gs = tape.gradient(list(outs), [xs[i] for i in diff] + dvals + list(variables),
                           output_gradients=dys, unconnected_gradients="zero")
        k, m = len(diff), len(variables)
        return list(gs[:k]) + [a + b for a, b in zip(gs[k:k + m], gs[k + m:])]

    def backward(ctx, *dys):
        gs = py_function(grad_eager, inputs + list(values) + list(dys), touts)
        res = [None] * n
        for k, i in enumerate(diff):
            res[i] = gs[k]
        return tuple(res) + tuple(gs[len(diff):])

    record(_NODE_OP, tuple(inputs) + tuple(var_values), tuple(outputs), {}, backward)


def print_(*inputs, sep=" ", end="\n", output_stream=None, summarize=3, name=None):
    """Print tensors (and Python values) at every call, also inside :func:`function`
    (where Python's ``print`` runs only while tracing): TensorFlow's ``tf.print``, with
    its format (``[1 2 3]``, floats to 9 significant digits, strings quoted, at most
    ``summarize`` items at each end of a dimension, -1: all) and its stream: standard
    error unless ``output_stream`` says otherwise (``sys.stdout``, any object with
    ``write``, a logging function such as ``logging.info``, or ``"file://path"``).

    >>> import sys
    >>> import tapeflow as tf
    >>> tf.print("x:", tf.constant([1, 2, 3]), output_stream=sys.stdout)
    x: [1 2 3]
    >>> tf.print(tf.range(10), {"a": tf.constant(0.5)}, summarize=2, output_stream=sys.stdout)
    [0 1 ... 8 9] {'a': 0.5}
    """
    if summarize is None:
        summarize = 3
    if not isinstance(summarize, (int, np.integer)) or isinstance(summarize, bool):
        raise InvalidTypeError(f"tf.print: summarize must be an int (-1: everything), got "
                               f"{type(summarize).__name__} {summarize!r}")
    _check_stream(output_stream)
    leaves = nest.flatten(list(inputs))
    tr = _current()
    if tr is None:
        _emit_text(_format_items(inputs, leaves, summarize, sep), end, output_stream)
        return None
    pos = [i for i, x in enumerate(leaves) if isinstance(x, (Tensor, Variable))]
    vals = [tr.read(leaves[i], leaves[i]._value) if isinstance(leaves[i], Variable)
            else leaves[i] for i in pos]
    ins = [tr.vid_of(x) for x in vals]
    metas = [tr.graph.meta[v][2] for v in ins]
    template = list(leaves)

    def run(*arrays):
        items = list(template)
        for p, a, d in zip(pos, arrays, metas):
            items[p] = wrap(a, d)
        _emit_text(_format_items(inputs, items, summarize, sep), end, output_stream)
        return ()

    def eager(*ts):
        run(*[t._data for t in ts])
        return ()
    tr.graph.nodes.append(Node("print", ins, (), fn=run, attrs={"_eager": eager},
                               stateful=True, label="print"))
    if not tr.speculative:
        # the trace is the first call's run: it prints once now (the graph prints at the
        # later calls)
        items = list(template)
        for p, v in zip(pos, vals):
            items[p] = v
        _emit_text(_format_items(inputs, items, summarize, sep), end, output_stream)
    return None


def _check_stream(stream):
    if stream is None or hasattr(stream, "write") or callable(stream) or (
            isinstance(stream, str) and stream.startswith("file://")):
        return
    raise InvalidTypeError(f"tf.print: output_stream must be sys.stdout, sys.stderr, a file "
                           f"object, a logging function or 'file://path', got "
                           f"{type(stream).__name__} {stream!r}")


def _emit_text(text, end, stream):
    if stream is None:
        stream = sys.stderr           # (looked up now: redirections apply)
    if isinstance(stream, str):
        with open(stream[len("file://"):], "a", encoding="utf-8") as f:
            f.write(text + end)
    elif hasattr(stream, "write"):
        stream.write(text + end)
        if hasattr(stream, "flush"):
            stream.flush()
    else:
        stream(text)                  # a logging function: one record


class _Shown:
    """A tensor inside a printed Python structure: its repr is its tf.print text."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def _format_items(inputs, leaves, summarize, sep):
    """The text of ``tf.print(*inputs)``, the leaves of ``inputs`` replaced by
    ``leaves`` (tensors with this call's values)."""
    shown = [_Shown(_format_tensor(x, summarize)) if isinstance(x, (Tensor, Variable)) else x
             for x in leaves]
    items = nest.pack_sequence_as(list(inputs), shown)
    out = []
    for x in items:
        if isinstance(x, _Shown):
            out.append(x.text)
        elif isinstance(x, dict):
            try:
                out.append(str({k: x[k] for k in sorted(x)}))
            except TypeError:
                out.append(str(x))
        else:
            out.append(str(x))
    return sep.join(out)


def _format_tensor(x, summarize):
    t = x._value if isinstance(x, Variable) else x
    a = np.asarray(t._device.backend.to_host(t._data, t._device))
    kind = a.dtype.kind
    if kind == "f" or a.dtype.name == "bfloat16":
        one = _float64_text if a.dtype.itemsize == 8 else _float32_text
    elif kind == "b":
        one = lambda v: "1" if v else "0"                    # noqa: E731
    elif kind in "iu":
        one = lambda v: str(int(v))                          # noqa: E731
    elif kind in "SUO":
        one = _quoted
    else:
        one = str
    if a.ndim == 0:
        return one(a.item() if kind not in "SUO" else a[()])
    return _format_array(a, 0, summarize, one)


def _float32_text(v):
    """TensorFlow's text of a float: 6 significant digits when they give the value
    back, else 9 (float16 and bfloat16 as float32)."""
    v = np.float32(v)
    text = "%.6g" % v
    return text if np.float32(text) == v or v != v else "%.9g" % v


def _float64_text(v):
    text = "%.15g" % v
    return text if float(text) == v or v != v else "%.17g" % v


def _format_array(a, depth, summarize, one):
    n = a.shape[0]
    if 0 <= summarize and n > 2 * summarize:
        idx = list(range(summarize)) + [None] + list(range(n - summarize, n))
    else:
        idx = range(n)
    if a.ndim == 1:
        return "[" + " ".join("..." if i is None else one(a[i]) for i in idx) + "]"
    gap = "\n" * (a.ndim - 1) + " " * (depth + 1)
    return "[" + gap.join("..." if i is None else _format_array(a[i], depth + 1, summarize, one)
                          for i in idx) + "]"


def _quoted(v):
    if isinstance(v, bytes):
        v = v.decode("utf-8", "backslashreplace")
    v = str(v)
    esc = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    return '"' + "".join(esc.get(c, c) for c in v) + '"'
