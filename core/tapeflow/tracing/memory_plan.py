"""Buffer plans: a traced function's intermediates written into buffers it keeps.

After the graph passes, :func:`plan` looks at the nodes whose kernel declares the
``out=`` capability (``registry.add_kernel(..., out=True)``, docs/backends.md, "Output
buffers") and gives each of their results a *slot*: a buffer of the result's shape,
dtype and device that the concrete function keeps from one call to the next. A slot
is reused by a later result of the same shape, dtype and device once every reader of
its value has run (liveness, in node order), and an elementwise op whose input dies at
it writes over that input (in place). The replay (:mod:`tapeflow.tracing.codegen`)
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
op by op or through a separate program (:mod:`tapeflow.tracing.concrete`), never with
the plan: the values a tape keeps are always its own.
"""

from __future__ import annotations

import threading

import numpy as np

from .capture import DATA_DEPENDENT_SHAPES
from .codegen import _compile
from .graph_passes import _clean_consumer, written_input

__all__ = ["MemoryPlan", "PlannedRun", "plan"]

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
