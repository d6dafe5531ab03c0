"""Concrete functions: one traced signature of a
:class:`~tapeflow.tracing.function_cache.Function` (with TensorFlow's attributes:
``structured_input_signature``, ``structured_outputs``, ``function_type``,
``pretty_printed_signature()``; calls checked against the signature traced), its
graph optimised and compiled (:func:`tapeflow.tracing.graph._compile`), replayed fast, op by op under a recording
tape, or -- for a pure graph under a tape -- as one tape record whose gradient is a
traced backward function (see :mod:`tapeflow.tracing.function_cache`), with the
buffer plan its fast replay writes into.

Long file: a concrete function's replays (fast, op by op, recorded with a traced
backward), its TensorFlow attributes and its buffer plan share one object's state.

**Buffer plans**: a traced function's intermediates written into buffers it keeps.

After the graph passes, :func:`plan` looks at the nodes whose kernel declares the
``out=`` capability (``registry.add_kernel(..., out=True)``, docs/backends.md, "Output
buffers") and gives each of their results a *slot*: a buffer of the result's shape,
dtype and device that the concrete function keeps from one call to the next. A slot is
reused by a later result of the same shape, dtype and device once every reader of its
value has run (liveness, in node order), and an elementwise op whose input dies at it
writes over that input (in place). The replay (:func:`tapeflow.tracing.graph._compile`)
then calls ``K(a, b, out=buf)`` instead of ``K(a, b)``: a replay of the MLP step
allocates no intermediate array.

What a slot may never hold (the rules that keep results those of the unplanned replay):

* a value the caller or anything else can see: a returned value, a value assigned to a
  Variable, an argument, a constant, a Variable's buffer -- those are never made by a
  planned node and never written into (outputs are always fresh arrays, so returned
  tensors stay valid after the next call);
* a value read by a node that may keep it or return a view of it (``Reshape``,
  ``py_function``, a copy, control flow, a kernel that declares neither ``fresh`` nor
  ``out``): its producer allocates as before;
* a value whose shape may change between calls: one computed from an op with a
  data-dependent shape (``tf.where(c)``, ``Unique``), a Python node or control flow,
  or a captured Variable whose shape is not fixed; 0-d and empty values (NumPy returns
  scalars for those).

The buffers come from the first call (the fresh result of each slot's first writer);
calls after it pass them as ``out``. A replay that finds the plan in use by another
thread (or re-entered through a ``py_function``) runs the unplanned code, allocating as
before, so two replays never share a buffer. A GradientTape outside the call replays
op by op or through a separate program (:class:`ConcreteFunction`, above), never with
the plan: the values a tape keeps are always its own.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..autodiff.tape import GradientTape
from ..runtime import context as _ctx
from ..runtime import dispatch as _dispatch_mod
from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..ops.random import STATE as _RANDOM
from .. import nest
from ..runtime.dispatch import convert_to_tensor
from ..runtime.registry import OpDef
from ..runtime.tensor import Tensor, wrap
from ..runtime.variable import Variable
from . import graph_passes
from .graph import Graph, Node, _compile, _flatten_args
from .signatures import TensorSpec, expand_composites, has_composites, rebuild_composites
from ..errors import InvalidArgumentError
from .capture import DATA_DEPENDENT_SHAPES
from .graph_passes import _clean_consumer, written_input

__all__ = ["ConcreteFunction", "reading", "MemoryPlan", "PlannedRun", "plan"]

#: this thread's {id(Variable): Tensor} that op-by-op replays read instead (``reading``)
_held = threading.local()


@contextlib.contextmanager
def reading(variables, values):
    """Within, an op-by-op replay (:meth:`ConcreteFunction._eager`, the branches and
    bodies of ``tf.cond`` / ``tf.while_loop``) reads ``values`` for ``variables`` -- the
    values they had when a node ran forward, for its gradient computed later (after an
    assignment, maybe) -- and its assignments to them change only those values (the
    re-run has no side effects)."""
    prev = getattr(_held, "values", None)
    held = dict(prev or {})
    held.update({id(v): t for v, t in zip(variables, values)})
    _held.values = held
    try:
        yield
    finally:
        _held.values = prev


def _ordered_locks(variables):
    """The locks of ``variables`` (each once), ordered by creation of the Variable."""
    by_id = {}
    for var in variables:
        by_id[var._id] = var._lock
    return [by_id[k] for k in sorted(by_id)]


class ConcreteFunction:
    """One traced signature of a :class:`Function`: ``graph`` (the traced ops, printable)
    and its compiled replay. Call it with the same arguments as the Function.

    ``cuda_graph_info``: None when ``tf.config.experimental.enable_cuda_graphs`` was
    off when its Function traced it, else a :class:`tapeflow.tracing.capture.CaptureInfo`
    (whether it replays as a CUDA graph, and if not, why)."""

    cuda_graph_info = None

    #: plan the intermediates' buffers (:mod:`tapeflow.tracing.concrete`) when the
    #: graph is optimised; False: every replay allocates (for comparisons)
    buffer_plan = True
    #: the :class:`MemoryPlan` in use, or None
    memory_plan = None

    def __init__(self, graph, optimize=True, passes=None, trace=None):
        self.graph = graph
        # the decorator that traces the backward pass (tapeflow.function, passed in by
        # the Function that traced this; this module sits below it). None (the
        # sub-graphs of cond / while_loop): under a tape, replay op by op
        self._trace_backward = trace
        self.passes_run = []
        if optimize:
            self.passes_run = graph_passes.optimize(graph, passes)
        self._run, self.source, self._linemap, self._filename = _compile(graph)
        self._linemaps = {self._filename: self._linemap}
        if optimize and self.buffer_plan:
            self.memory_plan = plan(graph)
            if self.memory_plan is not None:
                self._run = PlannedRun(graph, self.memory_plan, self._run)
                self._linemaps.update(self._run.linemaps)

    #: the Variables the function writes (its own assignments and those of its
    #: tf.cond / tf.while_loop branches): a position in the Variable arguments, or a
    #: captured Variable. Empty: the replay takes no lock but each read's, to take the
    #: buffer (graph._emit_read).
    _writes = ()
    #: when it writes: those and the Variables it reads, whose locks the replay holds
    _locked_vars = ()
    _static_locks = None

    def _set_writes(self, tracer):
        """Record the Variables ``tracer`` saw assigned (Function._trace), and, when there
        are any, those it saw read: a replay that holds a lock never waits for another
        Variable's but in one global order, all taken first (no two replays wait on each
        other in a cycle)."""
        refs = []
        for var in list(tracer.assigned.values()) + (
                tracer.read_vars if tracer.assigned else []):
            ref = tracer.var_args.get(id(var), var)
            if not any(r is ref for r in refs):     # (_ordered_locks takes each lock once)
                refs.append(ref)
        self._writes = tuple(refs[:len(tracer.assigned)])
        self._locked_vars = tuple(refs)
        if all(not isinstance(r, int) for r in refs):
            self._static_locks = _ordered_locks(refs)

    def _locks(self, vargs):
        """The locks of the Variables this call writes or reads (when it writes), in one
        global order (the Variables' creation order), so two replays never wait on each
        other in a cycle."""
        locks = self._static_locks
        if locks is None:
            locks = _ordered_locks([vargs[r] if isinstance(r, int) else r
                                    for r in self._locked_vars])
        return locks

    def _replay(self, arrays, vargs):
        if self._writes:
            # A function that assigns Variables holds each written Variable's lock -- the
            # one eager assign/assign_add take -- from before its first read to after its
            # last write, so a concurrent eager update or another replay never falls
            # between them (docs/concurrency.md); and each read Variable's, so no update
            # writes a buffer in place while the replay reads it (graph._emit_read).
            locks = self._static_locks
            if locks is None:
                locks = self._locks(vargs)
            if len(locks) == 1:
                lock = locks[0]
                lock.acquire()
                try:
                    return self._run(arrays, vargs)
                except Exception as e:
                    raise self._error(e, arrays, vargs) from None
                finally:
                    lock.release()
            for lock in locks:
                lock.acquire()
            try:
                return self._run(arrays, vargs)
            except Exception as e:
                raise self._error(e, arrays, vargs) from None
            finally:
                for lock in reversed(locks):
                    lock.release()
        try:
            return self._run(arrays, vargs)
        except Exception as e:
            raise self._error(e, arrays, vargs) from None

    def _error(self, e, arrays, vargs):
        """Name the op that failed (its line in the generated code)."""
        tb = e.__traceback__
        node = None
        while tb is not None:
            linemap = self._linemaps.get(tb.tb_frame.f_code.co_filename)
            if linemap is not None:
                node = self.graph.nodes[linemap.get(tb.tb_lineno, 0)]
            tb = tb.tb_next
        if node is None or node.kind not in ("op", "fused") or node.op is None:
            return e
        _translate = _dispatch_mod.translate_error
        ins = [_Meta(self.graph.meta[i]) for i in node.inputs]
        return _translate(e, node.op, node.device, ins, node.attrs)

    def _eager(self, leaves, vargs=None, reads=None):
        """Replay op by op through the dispatcher (a GradientTape outside is recording).
        ``vargs``: the Variable arguments of the enclosing function (for sub-graphs);
        ``reads``: {read node: tensor} values to use instead of reading the Variables.
        A call that writes Variables holds their locks throughout, as the fast replay."""
        if self._writes and vargs is None:
            locks = self._locks([x for x in leaves if isinstance(x, (Tensor, Variable))])
            for lock in locks:
                lock.acquire()
            try:
                return self._eager_unlocked(leaves, vargs, reads)
            finally:
                for lock in reversed(locks):
                    lock.release()
        return self._eager_unlocked(leaves, vargs, reads)

    def _eager_unlocked(self, leaves, vargs=None, reads=None):
        copy_to_device = _dispatch_mod.copy_to_device
        execute = _dispatch_mod.execute
        g = self.graph
        env = {}
        tensors = [x for x in leaves if isinstance(x, (Tensor, Variable))]
        for a, leaf in zip(g.args, tensors):
            env[a] = leaf
        if vargs is None:
            vargs = tensors
        for n in g.nodes:
            k = n.kind
            if k == "op":
                attrs = n.attrs
                if n.stateful and "counter" in attrs and "key" in attrs:
                    # a random op: the next counter of its stream, as the fast replay
                    attrs = {**attrs, "counter": _RANDOM.next_counter(attrs["key"])}
                out = execute(n.op, tuple(env[i] for i in n.inputs), attrs)
                outs = out if isinstance(out, tuple) else (out,)
                for o, t in zip(n.outputs, outs):
                    env[o] = t
            elif k == "const":
                env[n.outputs[0]] = wrap(n.value, n.device)
            elif k == "read":
                if reads is not None and n in reads:
                    env[n.outputs[0]] = reads[n]
                    continue
                var = vargs[n.var] if isinstance(n.var, int) else n.var
                held = getattr(_held, "values", None)
                if held is not None and id(var) in held:
                    env[n.outputs[0]] = held[id(var)]
                    continue
                env[n.outputs[0]] = var.read_value()
            elif k == "assign":
                var = vargs[n.var] if isinstance(n.var, int) else n.var
                held = getattr(_held, "values", None)
                if held is not None and id(var) in held:     # a gradient's re-run
                    # the value assigned, read later as a read of the Variable (as in
                    # eager code): not connected to what was assigned, its gradient the
                    # Variable's (the value held for it)
                    new = env[n.inputs[0]]
                    out = wrap(new._data, new._device)
                    _ctx.record(_held_read_op(), (held[id(var)],), (out,), {},
                                _pass_gradient)
                    held[id(var)] = out
                    continue
                var.assign(env[n.inputs[0]])
            elif k == "copy":
                env[n.outputs[0]] = copy_to_device(env[n.inputs[0]], n.device)
            elif k == "fused":
                for sub in n.attrs["_nodes"]:       # the ops the fused kernel replaced
                    out = execute(sub.op, tuple(env[i] for i in sub.inputs), sub.attrs)
                    outs = out if isinstance(out, tuple) else (out,)
                    for o, t in zip(sub.outputs, outs):
                        env[o] = t
            else:
                ins = [env[i] for i in n.inputs]
                res = (n.attrs["_eager"](vargs, *ins) if n.attrs.get("_vargs")
                       else n.attrs["_eager"](*ins))
                for o, t in zip(n.outputs, res):
                    env[o] = t
        return [env[o] for o in g.outputs]

    #: the :class:`~tapeflow.tracing.signatures.FunctionSignature` of a Function's trace
    #: (None: a sub-graph of cond / while_loop, called with its flat inputs)
    signature = None
    #: a relaxed trace's ``call(leaves)``: its specialisation for the leaves' shapes
    _specialiser = None

    def __call__(self, *args, **kwargs):
        sig = self.signature
        if sig is None:
            return self._call_leaves(_flatten_args(args, kwargs)[0])
        # checked against the signature traced: specs (dtype, compatible shape) and the
        # Python values baked into the trace
        if has_composites((args, kwargs)):    # (traced by their components)
            args, kwargs = expand_composites((args, kwargs))
        leaves = sig.bind(args, kwargs, _convert)
        if self._specialiser is not None:
            return self._specialiser(leaves)
        return self._call_leaves(leaves)

    # --- TensorFlow's ConcreteFunction attributes ---------------------------------------
    @property
    def name(self):
        return self.graph.name

    @property
    def structured_input_signature(self):
        """``(args, kwargs)`` of the trace: a TensorSpec for each tensor, the value of
        each other argument."""
        return self._sig().structured

    @property
    def structured_outputs(self):
        """The output structure, a TensorSpec for each tensor (TensorFlow: the graph's
        symbolic tensors)."""
        return self._sig().outputs

    @property
    def inputs(self):
        """A TensorSpec for each tensor input (TensorFlow: the graph's placeholders)."""
        return [x for x in self._sig().leaves if isinstance(x, TensorSpec)]

    @property
    def outputs(self):
        """A TensorSpec for each tensor output, flat."""
        return [x for x in nest.flatten(self._sig().outputs) if isinstance(x, TensorSpec)]

    @property
    def function_type(self):
        """The parameters and output type, printed ``(a: TensorSpec(...)) -> ...``."""
        return self._sig().function_type()

    def pretty_printed_signature(self, verbose=True):
        """Input parameters, output type and captures, as TensorFlow prints them."""
        return self._sig().pretty()

    @property
    def inference_fn(self):
        """The callable that runs the graph (this concrete function)."""
        return self

    def _sig(self):
        sig = self.signature
        if sig is None:
            raise InvalidArgumentError(
                f"concrete function {self.graph.name!r} is a sub-graph of tf.cond or "
                "tf.while_loop: it has no Python signature")
        return sig

    def __str__(self):
        if self.signature is None:
            return object.__repr__(self)
        return "ConcreteFunction " + self.signature.pretty()

    def __repr__(self):
        if self.signature is None:
            return object.__repr__(self)
        return f"<ConcreteFunction {self.signature.function_type()} at 0x{id(self):X}>"

    def _call_leaves(self, leaves):
        g = self.graph
        _tapes_active = _ctx.tapes_active
        if _tapes_active[0]:
            outs = (self._call_recorded(leaves)
                    if self.traced_backward and self._trace_backward is not None
                    and self._pure() else self._eager(leaves))
        else:
            outs = self._call_fast(leaves)
        return _pack_outputs(g, outs)

    def _call_tensors(self, args):
        """The replay for Tensor arguments only (Function's hot path)."""
        g = self.graph
        res = self._replay([a._data for a in args], args)
        meta = g.meta
        outs = [wrap(a, meta[o][2]) for a, o in zip(res, g.outputs)]
        return _pack_outputs(g, outs)

    def _call_fast(self, leaves):
        arrays = []
        vargs = []
        for x in leaves:
            if isinstance(x, Variable):     # (read by the replay's read nodes)
                vargs.append(x)
                arrays.append(None)
            elif isinstance(x, Tensor):
                vargs.append(x)
                arrays.append(x._data)
        res = self._replay(arrays, vargs)
        g = self.graph
        return [wrap(a, g.meta[o][2]) for a, o in zip(res, g.outputs)]

    # --- the traced backward pass -----------------------------------------------------
    #: with a tape recording, replay fast and record the call as one tape record whose
    #: gradient is a traced backward function (False: replay op by op, as eager)
    traced_backward = True

    def _pure(self):
        """Whether the graph is a pure function of its inputs and Variable reads (no
        assignments, random ops, Python nodes or control flow): then its gradient may
        be computed by running it again."""
        p = getattr(self, "_is_pure", None)
        if p is None:
            p = self._is_pure = all(
                n.kind in ("op", "const", "read", "copy", "fused") and not n.stateful
                for n in self.graph.nodes)
        return p

    def _call_recorded(self, leaves):
        """Replay fast, keeping the intermediate values; record one tape record for the
        call. Its gradient function runs a traced backward (cached per signature):
        from the saved intermediates when no tape records the backward pass (first
        order), or, under tapes (higher orders), one that replays the forward from the
        record's inputs so the tapes see the gradient's dependence on them."""
        _tape = _ctx  # (the eager context holds the active tapes)
        g = self.graph
        tensors = [x for x in leaves if isinstance(x, (Tensor, Variable))]
        read_nodes = [n for n in g.nodes if n.kind == "read"]
        inputs = [x for x in tensors if not isinstance(x, Variable)]
        for n in read_nodes:        # the tapes watch these reads (trainable Variables)
            var = tensors[n.var] if isinstance(n.var, int) else n.var
            inputs.append(var.read_value())
        run, saved_vids, _ = self._saved_program()
        arrays = [None if isinstance(x, Variable) else x._data for x in tensors]
        try:
            res = run(arrays, tensors)
        except Exception:
            self._replay(arrays, tensors)        # raises the error naming the op
            raise
        k = len(g.outputs)
        outs = [wrap(a, g.meta[o][2]) for a, o in zip(res[:k], g.outputs)]
        if not outs:
            return outs
        saved = [wrap(a, g.meta[v][2]) for a, v in zip(res[k:], saved_vids)]
        n_in = len(inputs)
        float_outs = [i for i, o in enumerate(outs) if o.dtype.is_inexact]

        def backward(ctx, *dys):
            dys = [dys[i] for i in float_outs]
            if _tape.tapes_active[0]:
                grads = self._backward_function()(list(ctx.inputs), dys)
            else:
                grads = self._saved_backward_function()(saved, dys)
            return tuple(grads) + (None,) * (n_in - len(grads))
        if len(outs) == 1:
            _tape.record(_call_op(), tuple(inputs), tuple(outs), {}, backward)
            return outs
        # Several outputs: a tape fills the gradient of an output the target does not
        # reach with zeros, and 0 * inf (sqrt at 0, say) in its backward would be NaN
        # where eager code computes nothing. So one record per output collects its
        # gradient (None: not reached), and a record before them, reached through a
        # link value, runs the backward once with what they collected.
        got = [None] * len(outs)
        link = wrap(_LINK, _devs.get_device("cpu:0"))

        def collect(i):
            def grad(ctx, dy):
                got[i] = dy
                return (_link_grad(),)
            return grad

        def backward_all(ctx, _):
            dys = list(got)
            got[:] = [None] * len(outs)
            return backward(ctx, *dys)
        call_op = _call_op()
        _tape.record(call_op, tuple(inputs), (link,), {}, backward_all)
        for i, o in enumerate(outs):
            _tape.record(call_op, (link,), (o,), {}, collect(i))
        return outs

    def _saved_program(self):
        """The forward replay that also returns the values the backward pass needs:
        ``(run, saved value ids, nodes)`` (fused nodes expanded into their ops)."""
        prog = getattr(self, "_saved", None)
        if prog is None:
            g = self.graph
            nodes = []
            for n in g.nodes:
                nodes.extend(n.attrs["_nodes"] if n.kind == "fused" else [n])
            # this program returns every intermediate: none may be written in place
            # (the reuse pass decided its in-place kernels for a replay that lets
            # them die), or a value the backward pass reads is overwritten
            nodes = graph_passes.without_inplace(nodes)
            saved, seen = [], set()
            for n in nodes:
                if n.kind in ("op", "copy"):
                    for v in list(n.inputs) + list(n.outputs):
                        if v not in seen:
                            seen.add(v)
                            saved.append(v)
            for v in g.outputs:
                if v not in seen:
                    seen.add(v)
                    saved.append(v)
            fg = Graph(f"{g.name}_forward")
            fg.args, fg.meta, fg.nodes = g.args, g.meta, nodes
            fg.outputs = list(g.outputs) + saved
            prog = self._saved = (_compile(fg)[0], saved, nodes)
        return prog

    def _saved_backward_function(self):
        """``backward(saved values, dys) -> gradients`` (a traced function): the
        forward ops are put on a GradientTape as records over the saved values (no
        forward kernel runs again) and ``tape.gradient`` runs the ops' gradient
        functions, in the order the eager tape would."""
        bwd = getattr(self, "_bwd_saved", None)
        if bwd is not None:
            return bwd
        _COPY = _dispatch_mod.COPY
        g = self.graph
        _, saved_vids, nodes = self._saved_program()
        tensor_args = [a for i, a in enumerate(g.args) if not _is_var_slot(g, i)]
        sources = tensor_args + [n.outputs[0] for n in g.nodes if n.kind == "read"]

        def backward(vals, dys):
            _tape = _ctx  # (the eager context holds the active tapes)
            env = dict(zip(saved_vids, vals))
            srcs = [env.get(v) for v in sources]
            with GradientTape(watch_accessed_variables=False) as tape:
                for t in srcs:
                    if t is not None and t.dtype.is_inexact:
                        tape.watch(t)
                for n in nodes:
                    if n.kind == "op" and n.op.differentiable and n.inputs:
                        _tape.record(n.op, tuple(env[i] for i in n.inputs),
                                     tuple(env[o] for o in n.outputs), n.attrs)
                    elif n.kind == "copy":
                        _tape.record(_COPY, (env[n.inputs[0]],), (env[n.outputs[0]],), {},
                                     None)
            outs = [env[o] for o in g.outputs if env[o].dtype.is_inexact]
            live = [t for t in srcs if t is not None and t.dtype.is_inexact]
            gs = iter(_reached_gradient(tape, outs, live, dys))
            return [next(gs) if t is not None and t.dtype.is_inexact else None for t in srcs]
        self._bwd_saved = self._trace_backward(backward, name=f"{g.name}_backward")
        return self._bwd_saved

    def _backward_function(self):
        bwd = getattr(self, "_bwd", None)
        if bwd is not None:
            return bwd
        g = self.graph
        read_nodes = [n for n in g.nodes if n.kind == "read"]
        cf = self

        def backward(xs, dys):
            n_args = len(xs) - len(read_nodes)
            args, vals = list(xs[:n_args]), xs[n_args:]
            reads = dict(zip(read_nodes, vals))
            leaves = iter(args)
            # Variable arguments are read through ``reads``; stand-ins fill their slots
            stand_in = _stand_in()
            full = [stand_in if _is_var_slot(g, i) else next(leaves)
                    for i in range(len(g.args))]
            with GradientTape(watch_accessed_variables=False) as tape:
                for x in xs:
                    if x.dtype.is_inexact:
                        tape.watch(x)
                outs = cf._eager(full, vargs=full, reads=reads)
            outs = [o for o in outs if o.dtype.is_inexact]
            srcs = [x for x in xs if x.dtype.is_inexact]
            gs = iter(_reached_gradient(tape, outs, srcs, dys))
            return [next(gs) if x.dtype.is_inexact else None for x in xs]
        self._bwd = self._trace_backward(backward, name=f"{g.name}_backward_recompute")
        return self._bwd

    def pretty_printed_concrete_signatures(self):
        return str(self.graph).splitlines()[0]


def _convert(value, dtype):
    """A concrete function's argument made a tensor of ``dtype`` (NumPy arrays, lists)."""
    return convert_to_tensor(value, dtype=dtype)


def copy_graph(g):
    """A copy of graph ``g`` the passes may rewrite (its nodes and tables copied; the
    kernels, constants and Variables they refer to shared)."""
    new = Graph(g.name)
    new.__dict__.update(g.__dict__)
    new.nodes = [Node(n.kind, n.inputs, n.outputs, op=n.op, attrs=dict(n.attrs), fn=n.fn,
                      device=n.device, var=n.var, value=n.value, needs_device=n.needs_device,
                      stateful=n.stateful, label=n.label) for n in g.nodes]
    for name in ("args", "arg_names", "outputs", "py_outputs"):
        if name in g.__dict__:
            setattr(new, name, list(getattr(g, name)))
    new.meta = dict(g.meta)
    if hasattr(g, "var_arg_positions"):
        new.var_arg_positions = set(g.var_arg_positions)
    return new


_CALL_OP = []
#: the value linking a traced call's record to its outputs' records (_call_recorded)
_LINK = np.zeros((), np.float32)
_LINK_GRAD = []


def _link_grad():
    """The gradient an output's record gives the link (a 0-d zero on the host)."""
    if not _LINK_GRAD:
        _LINK_GRAD.append(wrap(np.zeros((), np.float32), _devs.get_device("cpu:0")))
    return _LINK_GRAD[0]
_HELD_READ_OP = []


def _held_read_op():
    """The OpDef of a held Variable's read after an assignment in a gradient's re-run
    (a tape record only: the value assigned, the gradient passed to the value held)."""
    if not _HELD_READ_OP:
        _HELD_READ_OP.append(OpDef("HeldVariableRead", inputs=("value",), dtype_rule="none"))
    return _HELD_READ_OP[0]


def _pass_gradient(ctx, dy):
    return (dy,)


def _call_op():
    """The OpDef of a traced call's tape record (created on first use)."""
    if not _CALL_OP:
        _CALL_OP.append(OpDef("TracedCall", inputs=("*inputs",), dtype_rule="none"))
    return _CALL_OP[0]


def _reached_gradient(tape, outs, sources, dys):
    """``tape.gradient(outs, sources, output_gradients=dys)`` over the outputs whose
    gradient is not None (None: the target does not reach that output)."""
    pairs = [(o, d) for o, d in zip(outs, dys) if d is not None]
    if not pairs:
        return [None] * len(sources)
    return tape.gradient([o for o, _ in pairs], sources,
                         output_gradients=[d for _, d in pairs])


def _stand_in():
    return convert_to_tensor(0.0)


def _is_var_slot(graph, i):
    return i in getattr(graph, "var_arg_positions", ())


class _Meta:
    """Stands in for an input Tensor in an error message (shape and dtype only)."""

    def __init__(self, meta):
        self._data = np.empty(0, meta[1])
        self.shape = meta[0]
        self.dtype = _dt.from_numpy(meta[1])
        self._device = meta[2]


def _pack_outputs(graph, outs):
    """The call's result: ``outs`` (the graph's output tensors) and the Python values
    the trace returned, packed into the traced result's structure."""
    py = graph.py_outputs
    if graph.structure is None:            # (one leaf)
        kind, v = py[0]
        return outs[v] if kind == "t" else _fresh(v)
    res = nest.pack_sequence_as(graph.structure,
                                [outs[v] if kind == "t" else _fresh(v) for kind, v in py])
    return rebuild_composites(res) if getattr(graph, "composite_outputs", False) else res


def _fresh(v):
    """A Python value the trace returned, for one call: a NumPy array is copied (the
    caller may write into it; the next call's must not change)."""
    return v.copy() if isinstance(v, np.ndarray) else v


# --- buffer plans (see the module doc) ---------------------------------------------------

_DYNAMIC_KINDS = ("py", "print", "cond", "while")


class MemoryPlan:
    """A graph's buffer plan: ``slots`` (``[(shape, numpy dtype, Device)]``, one buffer
    each), ``node_slot`` (``{node index: (slot of each output,)}``),
    ``kernels`` (``{node index: the kernel called with out=}``) and ``inplace`` (the
    node indices whose slot is that of an input dying there)."""

    def __init__(self):
        self.slots = []
        self.node_slot = {}
        self.kernels = {}
        self.inplace = set()

    def first_writers(self):
        """``{slot: index of the first node writing it}``."""
        first = {}
        for i in sorted(self.node_slot):
            for slot in self.node_slot[i]:
                first.setdefault(slot, i)
        return first

    def accepts(self, buffers):
        """Whether ``buffers`` (the first call's results, one per slot) can be the
        slots' buffers: each of the slot's shape and dtype (a C-contiguous writeable
        array, for NumPy)."""
        for buf, (shape, dt, _) in zip(buffers, self.slots):
            if tuple(getattr(buf, "shape", ())) != shape or getattr(buf, "dtype", None) != dt:
                return False
            if isinstance(buf, np.ndarray) and not (buf.flags.c_contiguous
                                                    and buf.flags.writeable):
                return False
        return len(buffers) == len(self.slots)

    def __repr__(self):
        return (f"<MemoryPlan {len(self.node_slot)} nodes into {len(self.slots)} buffers, "
                f"{len(self.inplace)} in place>")


def out_kernel(n, graph):
    """The kernel of op node ``n`` that takes ``out=``, or None: its backend registered
    it with ``out=True`` and the node runs it (not a dtype variant); a node the ``reuse``
    pass rewrote to write in place runs the registered kernel again (the plan decides),
    unless a variant serves one of its dtypes."""
    if n.kind == "fused":           # a backend's fused kernel (graph_fusion wraps it)
        k = getattr(n.fn, "kernel", None)
        return k if getattr(k, "_tapeflow_out", False) else None
    if n.kind != "op" or n.op is None or n.device is None or n.needs_device:
        return None
    entry = n.op.kernels.get(n.device.type)
    if entry is None or not entry.out:
        return None
    if n.fn is entry.fn:
        return entry.fn
    if written_input(n) is not None:
        variants = entry.variants or ()
        if not any(graph.meta[v][1] in variants for v in (*n.inputs, *n.outputs)):
            return entry.fn
    return None


def _clean(n, graph):
    """Node ``n`` reads its inputs without keeping them or returning views of them."""
    return out_kernel(n, graph) is not None or _clean_consumer(n)


def _dynamic_values(graph):
    """Values whose shape may differ from the traced one at a later call."""
    dyn = set()
    for n in graph.nodes:
        op = n.op
        if (n.kind in _DYNAMIC_KINDS
                or (op is not None and (op.name in DATA_DEPENDENT_SHAPES
                                        or getattr(op, "data_dependent_shape", False)))
                or (n.kind == "read" and not isinstance(n.var, int)
                    and not getattr(n.var, "_shape_fixed", True))
                or any(v in dyn for v in n.inputs)):
            dyn.update(n.outputs)
    return dyn


def candidates(graph, last):
    """``{node index: out kernel}`` of the nodes whose result may live in a slot.

    A node the ``reuse`` pass rewrote to write into an input and that gets no slot runs
    that kernel in the planned replay too: its result *is* the input's buffer, so that
    input is seen as far as the result is (a returned result: the input may not live in
    a slot either). Decided last node first, so every reader of a value is decided
    before its producer."""
    nodes = graph.nodes
    escaped = set(graph.outputs) | set(graph.args)
    for n in nodes:
        if not _clean(n, graph):
            escaped.update(n.inputs)
    dyn = _dynamic_values(graph)
    cands = {}
    for i in range(len(nodes) - 1, -1, -1):
        n = nodes[i]
        fn = out_kernel(n, graph)
        if (fn is not None and n.outputs and not any(v in dyn for v in n.inputs)
                and all(o not in escaped and o not in dyn and o in last and graph.meta[o][0]
                        and 0 not in graph.meta[o][0] for o in n.outputs)):
            cands[i] = fn
            continue
        pos = written_input(n)
        if pos is not None:
            escaped.add(n.inputs[pos])
    return dict(sorted(cands.items()))


def plan(graph):
    """The :class:`MemoryPlan` of ``graph`` (after its passes), or None when no node's
    result can live in a kept buffer.

    >>> import numpy as np, tapeflow as tf
    >>> @tf.function
    ... def f(x, w):
    ...     h = tf.matmul(x, w)                  # planned: read by Relu only
    ...     return tf.reduce_sum(tf.nn.relu(h))  # Relu writes over h (in place)
    >>> x = tf.constant(np.ones((4, 3), np.float32))
    >>> w = tf.constant(np.ones((3, 5), np.float32))
    >>> plan(f.get_concrete_function(x, w).graph)
    <MemoryPlan 2 nodes into 1 buffers, 1 in place>
    """
    nodes = graph.nodes
    last = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            last[v] = i
    cands = candidates(graph, last)
    if not cands:
        return None
    meta = graph.meta
    p = MemoryPlan()
    free: dict = {}                   # (shape, dtype, device) -> [slot]
    slot_of: dict = {}                # value id -> slot
    for i, n in enumerate(nodes):
        taken = ()
        if i in cands:
            taken = p.node_slot[i] = tuple(
                _take(p, n, i, o, slot_of, last, free, meta) for o in n.outputs)
            p.kernels[i] = cands[i]
        for a in set(n.inputs):       # inputs dying here give their slots back
            s = slot_of.get(a)
            if s is not None and last[a] == i and s not in taken:
                free.setdefault(meta[a], []).append(s)
    return p


def _take(p, n, i, o, slot_of, last, free, meta):
    """The slot of output ``o`` of node ``i``: an input dying there (in place: one
    output of an elementwise op, exactly the input's shape and dtype), else a free slot
    of its shape, dtype and device, else a new one."""
    key = meta[o]
    if n.kind == "op" and n.op.elementwise and len(n.outputs) == 1:
        for a in n.inputs:
            if a in slot_of and last[a] == i and meta[a] == key and n.inputs.count(a) == 1:
                p.inplace.add(i)
                slot_of[o] = slot_of[a]
                return slot_of[a]
    pool = free.get(key)
    if pool:
        slot = pool.pop()
    else:
        slot = len(p.slots)
        p.slots.append(key)
    slot_of[o] = slot
    return slot


class PlannedRun:
    """A concrete function's replay with its buffer plan: ``run(arrays, vargs)`` as the
    plain compiled replay (``plain``), which it stands in for. The first call makes the
    buffers; later calls pass them. A call that finds the plan in use (another thread,
    or a re-entrant call) runs ``plain`` and allocates: buffers are never shared by
    two replays. If the first call's results cannot serve as buffers (a kernel broke
    the ``out`` contract's shape, dtype or layout), the plan is dropped for good."""

    def __init__(self, graph, memory_plan, plain):
        self.plain = plain
        self.plan = memory_plan
        self.first, _, first_map, first_file = _compile(graph, memory_plan, first=True)
        self.steady, self.source, steady_map, steady_file = _compile(graph, memory_plan)
        #: {generated file name: {line: node index}} (for error messages)
        self.linemaps = {first_file: first_map, steady_file: steady_map}
        self.buffers = []
        self.calls_planned = 0
        self._lock = threading.Lock()

    def __call__(self, arrays, vargs):
        lock = self._lock
        if not lock.acquire(False):
            return self.plain(arrays, vargs)
        try:
            buffers = self.buffers
            if buffers:
                self.calls_planned += 1
                return self.steady(arrays, vargs, buffers)
            if self.plan is None:
                return self.plain(arrays, vargs)
            buffers = []
            res = self.first(arrays, vargs, buffers)
            if self.plan.accepts(buffers):
                self.buffers = buffers
            else:
                self.plan = None
            return res
        finally:
            lock.release()
