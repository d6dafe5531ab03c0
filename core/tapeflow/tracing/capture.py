"""A traced function replayed as one captured device graph (CUDA graphs).

With ``tf.config.experimental.enable_cuda_graphs(True)`` (experimental, off by
default, never yet run on a GPU), a :class:`~tapeflow.tracing.concrete.ConcreteFunction`
whose graph runs on one device whose backend can capture (``Backend.graph_capture``
returns a *capturer*; only the CUDA backend does) replays as one unit:

* call 1 traces (the Python function runs eagerly, as always);
* call 2 copies its tensor arguments into *static input buffers*, runs the
  *capture program* once for real (the warm-up: CuPy compiles its kernels, cuBLAS
  makes its workspaces) and then captures it: its kernel launches are recorded into
  a graph instead of running;
* later calls copy their arguments into the static input buffers, launch the graph,
  and return **copies** of its static output buffers (a result kept across calls is
  never overwritten by the next launch; one device copy per output is the price).

The capture program (:func:`capture_graph`) is the traced graph with three changes,
because a captured graph holds buffer addresses, not Python objects:

* Variables are inputs: the program reads the buffers the Variables hold when it
  is captured. An assignment becomes an in-place copy into the Variable's buffer
  (the write kernel is part of the graph), placed after every other node, so no
  node reads a buffer after it has been overwritten; values that may alias a
  Variable's buffer (a read, or a view of it made by an op not declared ``fresh``)
  and are returned or assigned are first copied (*snapshots*). A Variable written
  this way is first given a buffer of its own (one copy at capture), so the writes
  never reach a tensor the user holds. Tensors read from it earlier with
  ``read_value()`` are that buffer: they see later updates (as with PyTorch's
  in-place optimizers); ``.numpy()`` copies.
* Before every launch the Variables' buffers are compared (by identity) with the
  ones captured; a Variable whose value was replaced outside the function (an
  ``assign`` in eager code, a checkpoint restore) makes the next call capture again.
* Memory: every buffer the warm-up and the capture allocate comes from a memory pool
  owned by the capturer (one per compiled signature, PyTorch's "graph-private pool"),
  so the addresses a graph uses are never handed to other tensors while it lives.
  Nothing allocates during a launch; the output copies come from the default pool.

Capture is impossible — the function replays plainly, with the reason given once as
a ``RuntimeWarning`` and kept in ``ConcreteFunction.cuda_graph_info.reason`` — when
:func:`eligibility` finds a node that needs the host (``py_function``, ``tf.print``,
``tf.cond``, ``tf.while_loop``), a copy between devices, more than one device, an op
whose output shape depends on the values (:data:`DATA_DEPENDENT_SHAPES`, or an
OpDef with ``data_dependent_shape = True``), a random op when the capturer cannot
take its Philox counter from a device buffer (``supports_random`` False; the CUDA
capturer can: each random node of the program reads its counter from a one-word
device buffer that every call sets, before the launch, to the counter the plain
replay would have used — same stream, same numbers), an op the capturer refuses
(``op_unsupported``: the CUDA backend's kernels that check indices on the host), or when
the warm-up or the capture raises (e.g.
``cudaErrorStreamCaptureUnsupported`` from a kernel that synchronises).

What a capturer (returned by ``Backend.graph_capture(device)``) provides:

``supports_random`` (bool; when True also ``device_counter()`` -> an object the
backend's random kernels accept as ``counter`` and read on the device, and
``set_counter(c, value)``, an asynchronous write ordered before the next launch);
``op_unsupported(op_name) -> reason | None``;
``empty(shape, dtype)``; ``copy(a)`` (a new array, outside the private pool);
``copy_into(dst, src)`` (in place, a capturable kernel); ``warmup(fn)`` (run ``fn()``
for real with the private pool, ordered with the current stream's work, and return
its result); ``capture(fn) -> (graph, result)`` (record ``fn()``'s launches with the
private pool; ``result``: the buffers ``fn`` returned, which every launch rewrites);
``launch(graph)`` (on the current stream).
"""

from __future__ import annotations

import warnings

import numpy as np

from ..ops import random as _random_mod
from ..runtime import config as _config
from ..runtime.tensor import wrap
from .graph import Graph, Node
from .graph_passes import _declared_fresh

__all__ = ["DATA_DEPENDENT_SHAPES", "CaptureInfo", "eligibility", "capture_graph", "install"]

#: built-in ops whose kernels allocate an output whose shape depends on the values
DATA_DEPENDENT_SHAPES = {
    "Where": "tf.where(condition) / boolean_mask return as many rows as there are true "
             "elements",
    "NonZero": "its output has one row per non-zero element",
    "UniqueAll": "its outputs have one element per distinct value",
}

_HOST_NODES = {
    "py": "a Python function (tf.py_function / opaque_call) runs on the host at every call",
    "print": "tf.print reads its tensors on the host at every call",
    "cond": "tf.cond reads its predicate on the host at every call",
    "while": "tf.while_loop reads its condition on the host at every iteration",
}

#: after this many captures of one signature (Variables replaced outside the function
#: between calls), replay plainly
MAX_CAPTURES = 8


class CaptureInfo:
    """What became of graph capture for one traced signature
    (``ConcreteFunction.cuda_graph_info``).

    ``state``: ``"pending"`` (captures on its next call), ``"captured"``,
    ``"fallback"`` (plain replay; ``reason`` says why) or ``"off"`` (the switch was
    turned off after tracing); ``device``; ``captures`` and ``launches``: counts;
    ``plan``: the :class:`BufferPlan` (None until the capture program is built).
    """

    def __init__(self, state, reason=None, device=None):
        self.state = state
        self.reason = reason
        self.device = device
        self.captures = 0
        self.launches = 0
        self.plan = None

    def __repr__(self):
        why = f", reason={self.reason!r}" if self.reason else ""
        return (f"<cuda graph {self.state} on {self.device}: {self.captures} capture(s), "
                f"{self.launches} launch(es){why}>")


class BufferPlan:
    """The buffers of a capture program: ``inputs`` ``[(arg position, shape, dtype)]``
    (static input buffers), ``variables`` ``[(key, shape, dtype, "read" | "write" |
    "read+write")]`` (key: an int for a Variable argument, else the Variable),
    ``snapshots`` (the values copied because they may alias a Variable's buffer),
    ``outputs`` ``[(shape, dtype)]``, ``counters`` ``[(key, device counter)]`` (one
    per random node, in program order: set before every launch)."""

    def __init__(self):
        self.inputs = []
        self.variables = []
        self.snapshots = []
        self.outputs = []
        self.counters = []

    def __repr__(self):
        return (f"<BufferPlan {len(self.inputs)} input(s), {len(self.variables)} variable(s), "
                f"{len(self.snapshots)} snapshot(s), {len(self.outputs)} output(s), "
                f"{len(self.counters)} random counter(s)>")


# --- eligibility ----------------------------------------------------------------------------

def eligibility(graph):
    """``(device, capturer, reason)``: ``reason`` is None when ``graph`` may be
    captured; ``capturer`` is the backend's (None when no device of the graph has a
    backend that captures; it may be set next to a reason). Pure: it runs nothing."""
    nodes = graph.nodes
    devs = {m[2] for m in graph.meta.values()} | {n.device for n in nodes
                                                  if n.device is not None}
    if not devs:
        return None, None, "it has no tensors"
    dev = sorted(devs, key=str)[0]
    capturer = None
    for d in sorted(devs, key=str):
        capturer = d.backend.graph_capture(d)
        if capturer is not None:
            dev = d
            break
    for n in nodes:
        if n.kind in _HOST_NODES:
            return dev, capturer, f"node {n.name}: {_HOST_NODES[n.kind]}"
        if n.kind == "copy":
            src = graph.meta[n.inputs[0]][2]
            return dev, capturer, f"it copies a tensor from {src} to {n.device}"
    if len(devs) > 1:
        return dev, capturer, ("it uses several devices (" +
                               ", ".join(sorted(str(d) for d in devs)) + ")")
    if capturer is None:
        return dev, None, (f"{dev}: the {dev.backend.name} backend cannot capture graphs "
                           "(only CUDA can)")
    if not any(n.kind in ("op", "fused") for n in nodes):
        return dev, capturer, "it runs no kernel"
    for n in nodes:
        # (a read after an assignment reads the value assigned: capture_graph)
        if n.kind == "op":
            why = _op_reason(n, capturer)
            if why:
                return dev, capturer, f"op {n.name}: {why}"
    return dev, capturer, None


def _op_reason(n, capturer):
    op = n.op
    name = op.name if op is not None else n.name
    if name in DATA_DEPENDENT_SHAPES or getattr(op, "data_dependent_shape", False):
        return ("its output's shape depends on the values (" +
                DATA_DEPENDENT_SHAPES.get(name, "declared data_dependent_shape") + ")")
    if n.stateful:
        if "key" in n.attrs and "counter" in n.attrs:
            if not capturer.supports_random:
                return ("a random op's Philox counter is a host value, which a graph would "
                        "freeze (every launch would draw the same numbers)")
        else:
            return "a stateful op runs host code at every call"
    return capturer.op_unsupported(name)


def _var_key(var):
    return var if isinstance(var, int) else ("v", id(var))


def _var_label(var):
    return f"argument {var}" if isinstance(var, int) else repr(getattr(var, "name", var))


# --- the capture program --------------------------------------------------------------------

def capture_graph(graph, capturer):
    """``(program graph, plan, var_refs)``: the graph the capture records (see the
    module doc). Its arguments are the original arguments followed by one buffer per
    Variable (``var_refs[i]``: an int, the position of a Variable argument, or the
    Variable); it returns the outputs; no node touches a Variable object."""
    copy_into = capturer.copy_into
    copy = capturer.copy

    def write(dst, src):
        copy_into(dst, src)
        return dst

    g = Graph(graph.name + "_captured")
    g.meta = dict(graph.meta)
    g._next = iter(range(max(graph.meta, default=-1) + 1, 1 << 62))
    g.args = list(graph.args)
    g.arg_names = list(graph.arg_names)
    plan = BufferPlan()
    var_slots = getattr(graph, "var_arg_positions", set())
    for pos, vid in enumerate(graph.args):
        if pos not in var_slots:
            shape, dt, _ = graph.meta[vid]
            plan.inputs.append((pos, shape, dt))
    # Variables: one argument each (its buffer); reads become that argument
    var_vid, var_refs, modes = {}, [], {}
    rename = {}
    writes = {}                     # key -> the value id last assigned
    for n in graph.nodes:
        if n.kind in ("read", "assign"):
            key = _var_key(n.var)
            if key not in var_vid:
                ref = graph.meta[n.outputs[0]] if n.kind == "read" else graph.meta[n.inputs[0]]
                vid = g.new_value(ref[0], ref[1], ref[2])
                var_vid[key] = vid
                var_refs.append(n.var)
                g.args.append(vid)
                g.arg_names.append(f"var:{_var_label(n.var)}")
            m = modes.get(key, "")
            if n.kind == "read":
                # a read after an assignment in this graph reads the value assigned (the
                # Variable's buffer is written at the end)
                w = writes.get(key)
                rename[n.outputs[0]] = var_vid[key] if w is None else rename.get(w, w)
                modes[key] = "read" if not m else m
            else:
                writes[key] = n.inputs[0]
                modes[key] = "read+write" if m == "read" else "write"
    for key, ref in zip(var_vid, var_refs):
        shape, dt, _ = g.meta[var_vid[key]]
        plan.variables.append((ref, shape, dt, modes[key]))

    def r(v):
        return rename.get(v, v)
    # may-alias analysis: which Variables' buffers a value may share memory with
    alias = {vid: {key} for key, vid in var_vid.items()}
    body = []
    for n in graph.nodes:
        if n.kind in ("read", "assign"):
            continue
        attrs, stateful = n.attrs, n.stateful
        if n.kind == "op" and stateful and "key" in attrs and "counter" in attrs:
            # a random node: its counter comes from a device buffer set before each launch
            ctr = capturer.device_counter()
            plan.counters.append((attrs["key"], ctr))
            attrs, stateful = {**attrs, "counter": ctr}, False
        m = Node(n.kind, [r(i) for i in n.inputs], list(n.outputs), op=n.op, attrs=attrs,
                 fn=n.fn, device=n.device, var=n.var, value=n.value,
                 needs_device=n.needs_device, stateful=stateful, label=n.label)
        body.append(m)
        if n.kind == "op" and not _fresh(n):
            src = set()
            for i in m.inputs:
                src |= alias.get(i, set())
            if src:
                for o in m.outputs:
                    alias[o] = src

    written = set(writes)

    def snapshot(v, why):
        shape, dt, dev = g.meta[v]
        new = g.new_value(shape, dt, dev)
        body.append(Node("op", [v], [new], fn=copy, device=dev, label="snapshot"))
        plan.snapshots.append((why, shape, dt))
        return new
    outs = []
    for o in graph.outputs:
        o = r(o)
        if alias.get(o, set()) & written:
            o = snapshot(o, "output")
        outs.append(o)
    srcs = {}
    for key, v in writes.items():
        v = r(v)
        if alias.get(v):
            v = snapshot(v, f"assigned to {_var_label(var_refs[list(var_vid).index(key)])}")
        srcs[key] = v
    for key, v in srcs.items():
        dst = var_vid[key]
        shape, dt, dev = g.meta[dst]
        done = g.new_value(shape, dt, dev)
        body.append(Node("op", [dst, v], [done], fn=write, device=dev, label="assign_in_place"))
    g.nodes = body
    g.outputs = outs
    g.structure = graph.structure
    for o in outs:
        shape, dt, _ = g.meta[o]
        plan.outputs.append((shape, dt))
    return g, plan, var_refs


def _fresh(n):
    """Whether op node ``n`` returns new buffers (no view of an input): a kernel
    declared ``fresh``, a NumPy ufunc, or an elementwise op of two or more inputs (their
    kernels compute into a new array on every backend)."""
    if _declared_fresh(n) or isinstance(n.fn, np.ufunc) or getattr(n.fn, "_tapeflow_fresh",
                                                                    False):
        return True
    op = n.op
    return op is not None and op.elementwise and len(n.inputs) >= 2


# --- the replay -----------------------------------------------------------------------------

class CapturedRun:
    """Stands in for a ConcreteFunction's compiled ``run(arrays, vargs)``: plain replay
    until captured, then static inputs, one launch and output copies."""

    def __init__(self, cf, device, capturer, compile_fn):
        self.plain = cf._run
        self.cf = cf
        self.capturer = capturer
        self.info = cf.cuda_graph_info
        g, plan, var_refs = capture_graph(cf.graph, capturer)
        self.info.plan = plan
        self.counters = plan.counters
        self.program = compile_fn(g)[0]
        self.var_refs = var_refs
        self.written = [m in ("write", "read+write") for _, _, _, m in plan.variables]
        self.in_pos = [p for p, _, _ in plan.inputs]
        self.n_args = len(cf.graph.args)
        self.static_in = None
        self.static_out = None
        self.bound = None
        self.graph = None
        self.own = {}               # position in var_refs -> the buffer given to the Variable
        self.device = device

    def __call__(self, arrays, vargs):
        info = self.info
        if not _config.cuda_graphs[0]:
            if info.state != "fallback":
                info.state = "off"
            return self.plain(arrays, vargs)
        graph = self.graph
        if graph is None:
            if info.state == "fallback":
                return self.plain(arrays, vargs)
            return self._capture_first(arrays, vargs)
        variables = self._variables(vargs)
        bound = self.bound
        for v, b in zip(variables, bound):
            if v._value._data is not b:
                return self._recapture(arrays, vargs, variables)
        return self._launch(arrays)

    # ---------------------------------------------------------------------------------
    def _variables(self, vargs):
        return [vargs[ref] if isinstance(ref, int) else ref for ref in self.var_refs]

    def _bind(self, variables):
        """The Variables' buffers; a written Variable first gets a buffer of its own."""
        c = self.capturer
        bufs = []
        for i, (v, w) in enumerate(zip(variables, self.written)):
            buf = v._value._data
            if w and self.own.get(i) is not buf:
                buf = c.copy(buf)
                v._value = wrap(buf, v._value._device)
                self.own[i] = buf
            bufs.append(buf)
        self.bound = bufs
        return bufs

    def _args(self, bufs):
        args = [None] * self.n_args
        for p, b in zip(self.in_pos, self.static_in):
            args[p] = b
        return args + bufs

    def _copy_in(self, arrays):
        copy_into = self.capturer.copy_into
        for p, b in zip(self.in_pos, self.static_in):
            a = arrays[p]
            if a is not b:
                copy_into(b, a)

    def _set_counters(self):
        """Each random node's next counter (drawn as the plain replay draws it, in
        program order) into its device buffer: right before the program runs."""
        if self.counters:
            next_counter = _random_mod.STATE.next_counter
            set_counter = self.capturer.set_counter
            for key, ctr in self.counters:
                set_counter(ctr, next_counter(key))

    def _launch(self, arrays):
        c = self.capturer
        self._copy_in(arrays)
        self._set_counters()
        c.launch(self.graph)
        self.info.launches += 1
        copy = c.copy
        return tuple(copy(o) for o in self.static_out)

    def _capture_first(self, arrays, vargs):
        c = self.capturer
        info = self.info
        plan = info.plan
        try:
            self.static_in = [c.empty(shape, dt) for _, shape, dt in plan.inputs]
            self._copy_in(arrays)
            args = self._args(self._bind(self._variables(vargs)))
            program = self.program
            self._set_counters()        # (if the warm-up fails, the plain replay draws
            res = c.warmup(lambda: program(args, ()))      # the next counters: a skip)
        except Exception as e:  # the assignments run last: the Variables are as they were
            self._fallback(f"the warm-up run raised {type(e).__name__}: {e}")
            return self.plain(arrays, vargs)
        out = tuple(c.copy(o) for o in res)
        del res
        self._capture(args)
        return out

    def _capture(self, args):
        c = self.capturer
        info = self.info
        program = self.program
        try:
            graph, res = c.capture(lambda: program(args, ()))
        except Exception as e:
            self._fallback(f"capture raised {type(e).__name__}: {e}")
            return False
        self.graph = graph
        self.static_out = tuple(res)
        info.state = "captured"
        info.captures += 1
        return True

    def _recapture(self, arrays, vargs, variables):
        info = self.info
        self.graph = None
        self.static_out = None          # (their memory goes back to the private pool)
        if info.captures >= MAX_CAPTURES:
            self._fallback(f"its Variables were replaced outside the function between calls "
                           f"{info.captures} times (each replacement needs a new capture)")
            return self.plain(arrays, vargs)
        args = self._args(self._bind(variables))
        if not self._capture(args):        # (records only: the launch copies the inputs)
            return self.plain(arrays, vargs)
        return self._launch(arrays)

    def _fallback(self, reason):
        info = self.info
        info.state = "fallback"
        info.reason = reason
        self.graph = None
        self.static_out = self.static_in = self.bound = None
        _warn(self.cf, reason)


def _warn(cf, reason):
    warnings.warn(f"tf.function {cf.graph.name!r} on {cf.cuda_graph_info.device} replays "
                  f"without a CUDA graph: {reason}", RuntimeWarning, stacklevel=4)


def install(cf, compile_fn):
    """Called by ConcreteFunction when the switch is on: set ``cf.cuda_graph_info``
    and, when the graph may be captured, replace ``cf._run`` by a :class:`CapturedRun`
    (``compile_fn``: the tracer's ``_compile``). When it may not, and one of its
    devices could capture, warn once (nothing is said for a function on the CPU)."""
    device, capturer, reason = eligibility(cf.graph)
    if reason is not None:
        cf.cuda_graph_info = CaptureInfo("fallback", reason, device)
        if capturer is not None:
            _warn(cf, reason)
        return
    cf.cuda_graph_info = CaptureInfo("pending", None, device)
    cf._run = CapturedRun(cf, device, capturer, compile_fn)
