"""The data structure ``tf.function`` builds, a :class:`Graph` of :class:`Node` s, and
its compilation to straight-line Python that calls each kernel directly (no dispatch,
no tape).

Tracing (:mod:`tapeflow.tracing.tracer`) fills a graph, the passes
(:mod:`tapeflow.tracing.graph_passes`, :mod:`tapeflow.tracing.graph_fusion`) rewrite
it, and :func:`_compile` turns it into the function a
:class:`~tapeflow.tracing.concrete.ConcreteFunction` replays. A graph's inputs are the
leaves of a call's arguments (:func:`_flatten_args`, by :mod:`tapeflow.nest`'s rules:
namedtuples and dicts in key order kept), its results are packed into
``Graph.structure`` (:func:`_skeleton`).

Code generation: :func:`_compile` writes one line per node; what the line says is up to
the node kind's *emitter* in :data:`EMITTERS` (one small function per kind, the table a
pass or a new node kind extends). An emitter gets the node, its index, the generated
names of its inputs and outputs, the graph, and the namespace of the generated
function, where it puts the objects the line refers to (kernels, constants,
Variables) under names suffixed with the node's index.

With a buffer plan (:mod:`tapeflow.tracing.concrete`), a planned node's line passes
its slot's buffer: ``v7 = K6(v5, v6, out=b2, **A6)``; the buffers come in as the third
argument (``_pool``). The *first* program of a plan passes no ``out`` and keeps the
result of each slot's first writer as that slot's buffer (``_pool[:] = ...`` before it
returns), so buffers are made by the kernels themselves, on any backend.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import nest
from ..errors import InvalidArgumentError
from ..ops import random as _random_mod
from ..runtime.tensor import wrap
from .signatures import graph_def

__all__ = ["Graph", "Node", "EMITTERS"]


class Node:
    """One step of a :class:`Graph`.

    ``kind``: ``"op"`` (``op``, ``fn`` = the kernel resolved at trace time, ``device``,
    ``attrs``), ``"read"`` / ``"assign"`` (``var``: a captured Variable, or an int: the
    position of a Variable argument), ``"const"`` (``value``: a native array),
    ``"copy"`` (to ``device``), ``"py"`` (``fn``: a Python callable on Tensors),
    ``"print"``, ``"cond"`` / ``"while"`` (``attrs`` hold sub-graphs), ``"fused"``
    (``fn``: a fused elementwise kernel made by a pass). ``inputs``/``outputs`` are
    value ids.
    """

    __slots__ = ("kind", "op", "inputs", "outputs", "attrs", "fn", "device", "var", "value",
                 "needs_device", "stateful", "label")

    def __init__(self, kind, inputs=(), outputs=(), op=None, attrs=None, fn=None, device=None,
                 var=None, value=None, needs_device=False, stateful=False, label=None):
        self.kind = kind
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = attrs if attrs is not None else {}
        self.fn = fn
        self.device = device
        self.var = var
        self.value = value
        self.needs_device = needs_device
        self.stateful = stateful
        self.label = label

    @property
    def name(self):
        if self.kind == "op":
            return self.op.name
        return self.label or self.kind

    def __repr__(self):
        return f"<Node {self.kind} {self.name} {self.inputs}->{self.outputs}>"


class Graph:
    """A traced function: ``nodes`` in execution order over SSA value ids.

    ``args``: value ids of the tensor arguments (in flattened order); ``var_args``:
    positions (in ``args``' numbering of the flattened arguments) that are Variables;
    ``meta[vid] = (shape, numpy dtype, Device)``; ``outputs``: the value ids the
    function returns, and ``structure`` how to pack them (the result with None leaves,
    for :func:`tapeflow.nest.pack_sequence_as`; None: one leaf).
    """

    def __init__(self, name="f"):
        self.name = name
        self.nodes: list[Node] = []
        self.args: list[int] = []
        self.arg_names: list[str] = []
        self.meta: dict = {}
        self.outputs: list[int] = []
        self.structure = None
        self._next = itertools.count()

    def new_value(self, shape, dtype, device):
        vid = next(self._next)
        self.meta[vid] = (tuple(shape), np.dtype(dtype), device)
        return vid

    # a readable dump --------------------------------------------------------------
    def __str__(self):
        def ty(v):
            shape, dt, dev = self.meta[v]
            return f"{dt.name}[{','.join(str(s) for s in shape)}] {dev}"
        head = ", ".join(f"{n}: {ty(v)}" for n, v in zip(self.arg_names, self.args))
        lines = [f"graph {self.name}({head}):"]
        for n in self.nodes:
            outs = ", ".join(f"%{o}" for o in n.outputs)
            ins = ", ".join(f"%{i}" for i in n.inputs)
            if n.kind == "op" or n.kind == "fused":
                attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
                a = (" {" + ", ".join(f"{k}={_short(v)}" for k, v in attrs.items()) + "}"
                     if attrs else "")
                lines.append(f"  {outs} = {n.name}({ins}){a}")
            elif n.kind == "const":
                lines.append(f"  {outs} = const {_const_repr(n.value, n.device)}")
            elif n.kind == "read":
                lines.append(f"  {outs} = read {_var_name(n.var)}")
            elif n.kind == "assign":
                lines.append(f"  assign {_var_name(n.var)} <- {ins}")
            elif n.kind == "copy":
                lines.append(f"  {outs} = copy({ins}) to {n.device}")
            else:
                lines.append(f"  {outs + ' = ' if outs else ''}{n.name}({ins})")
        lines.append("  return " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)

    def ops(self):
        """Names of the op nodes, in order (for tests and inspection)."""
        return [n.name for n in self.nodes if n.kind in ("op", "fused")]

    def as_graph_def(self):
        """TensorFlow's GraphDef view (``.node``: name, op, input) of this graph."""
        return graph_def(self)


def _const_repr(value, device):
    shape = tuple(getattr(value, "shape", ()))
    if len(shape) == 0 or (len(shape) == 1 and shape[0] <= 4):
        host = value if device.is_host else device.backend.to_host(value, device)
        return np.array2string(np.asarray(host), separator=", ")
    return f"{np.dtype(value.dtype).name}{list(shape)}"


def _short(v):
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _var_name(var):
    return f"arg{var}" if isinstance(var, int) else repr(getattr(var, "name", var))


# --- a call's arguments as leaves, and the structure results are packed into ----------

def _none(_):
    return None


def _skeleton(x):
    """``x`` with None for every leaf: the structure a graph keeps to pack its results
    (never the traced values themselves)."""
    return nest.map_structure(_none, x)


def _path_str(path):
    return "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path)


def _flatten_args(args, kwargs):
    """The leaves of a call's ``(args, kwargs)`` (:func:`tapeflow.nest.flatten`)
    and their paths, ``"[0][1]"`` for ``args[1]`` and ``"[1]['k']"`` for ``kwargs['k']``
    (for :func:`tapeflow.tracing.function_cache._pretty_path`)."""
    pairs = nest.flatten_with_paths((args, kwargs))
    return [x for _, x in pairs], [_path_str(p) for p, _ in pairs]


# --- code generation: a Graph to straight-line Python ------------------------------

def _fresh_random_attrs(attrs):
    """``f() -> attrs`` with the next counter of the op's key (see tapeflow.random)."""
    _next_counter = _random_mod.STATE.next_counter
    key = attrs["key"]

    def fresh():
        return {**attrs, "counter": _next_counter(key)}
    return fresh


def _emit_op(n, i, ins, outs, graph, ns):
    """An op or a fused kernel: ``K<i>(inputs, device=, **attrs)``."""
    ns[f"K{i}"] = n.fn
    args = [ins] if ins else []
    if n.needs_device:
        ns[f"D{i}"] = n.device
        args.append(f"device=D{i}")
    if n.stateful and "counter" in n.attrs and "key" in n.attrs:
        # a random op: a fresh counter for its key at every call (the stream goes on)
        ns[f"R{i}"] = _fresh_random_attrs(n.attrs)
        args.append(f"**R{i}()")
    elif any(not k.startswith("_") for k in n.attrs):
        # ("_"-keys are the passes' bookkeeping, not kernel attributes)
        ns[f"A{i}"] = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
        args.append(f"**A{i}")
    if len(n.outputs) == 1 and n.kind == "op" and n.op is not None and n.op.num_outputs != 1:
        outs += ","              # an op of a variable number of outputs, one this time
    return f"    {outs} = K{i}({', '.join(args)})"


def _emit_const(n, i, ins, outs, graph, ns):
    ns[f"C{i}"] = n.value
    return f"    {outs} = C{i}"


def _variable(n, i, ns):
    """The expression of a read/assign node's Variable: an argument by position, or a
    captured Variable."""
    if isinstance(n.var, int):
        return f"_vargs[{n.var}]"
    ns[f"V{i}"] = n.var
    return f"V{i}"


def _emit_read(n, i, ins, outs, graph, ns):
    return f"    {outs} = {_variable(n, i, ns)}._value._data"


def _emit_assign(n, i, ins, outs, graph, ns):
    var = _variable(n, i, ns)
    return f"    {var}._value = _wrap({ins}, {var}._value._device)"


def _emit_copy(n, i, ins, outs, graph, ns):
    ns[f"D{i}"] = n.device
    ns[f"S{i}"] = graph.meta[n.inputs[0]][2]
    return (f"    {outs} = D{i}.backend.copy_from({ins}, S{i}, D{i}) if S{i}.backend is "
            f"D{i}.backend or not D{i}.is_host else S{i}.backend.to_host({ins}, S{i})")


def _emit_python(n, i, ins, outs, graph, ns):
    """A node that runs Python (``py``, ``print``) or control flow (``cond``,
    ``while``): ``P<i>(inputs)`` returning a tuple of arrays."""
    ns[f"P{i}"] = n.fn
    if n.attrs.get("_vargs"):           # control flow: sub-graphs read Variable args
        ins = "_vargs" + (", " + ins if ins else "")
    if len(n.outputs) == 1:
        return f"    {outs}, = P{i}({ins})"
    if n.outputs:
        return f"    {outs} = P{i}({ins})"
    return f"    P{i}({ins})"


#: node kind -> emitter ``(node, index, inputs, outputs, graph, namespace) -> line``
EMITTERS = {
    "op": _emit_op,
    "fused": _emit_op,
    "const": _emit_const,
    "read": _emit_read,
    "assign": _emit_assign,
    "copy": _emit_copy,
    "py": _emit_python,
    "print": _emit_python,
    "cond": _emit_python,
    "while": _emit_python,
}


def _last_uses(graph):
    """{node index: [value ids whose last use it is]}, arguments and outputs excepted."""
    keep = set(graph.outputs) | set(graph.args)
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.outputs:
            last.setdefault(v, i)
        for v in n.inputs:
            last[v] = i
    dels = {}
    for v, i in last.items():
        if v not in keep:
            dels.setdefault(i, []).append(v)
    return dels


def _emit_planned(n, i, ins, outs, ns, plan, first, first_writer):
    """A planned op node: its kernel with ``out=`` its slot's buffer; in the first
    program, without, keeping the result when the node is its slot's first writer."""
    ns[f"K{i}"] = plan.kernels[i]
    slots = plan.node_slot[i]
    out = f"b{slots[0]}" if len(slots) == 1 else "(" + "".join(f"b{j}, " for j in slots) + ")"
    args = [ins] if first else [ins, f"out={out}"]
    if n.kind == "op" and any(not k.startswith("_") for k in n.attrs):
        ns[f"A{i}"] = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
        args.append(f"**A{i}")
    line = f"    {outs} = K{i}({', '.join(args)})"
    for j, o in zip(slots, n.outputs):
        if first and first_writer.get(j) == i:
            line += f"; b{j} = v{o}"
    return line


def _ident(name):
    return "".join(c if c.isalnum() else "_" for c in name) or "f"


def _compile(graph: Graph, plan=None, first=False):
    """Straight-line Python for ``graph``: ``run(arrays, vars) -> output arrays``
    (with a buffer ``plan``: ``run(arrays, vars, buffers)``, ``first``: the program of
    the plan's first call). Returns ``(run, source, {line number: node index}, file
    name)``."""
    ns = {"_wrap": wrap}
    planned = plan.node_slot if plan is not None else {}
    first_writer = plan.first_writers() if plan is not None else {}
    nslots = len(plan.slots) if plan is not None else 0
    pool = "".join(f"b{j}, " for j in range(nslots))
    lines = [f"def run_{_ident(graph.name)}(_args, _vargs{', _pool' if plan else ''}):"]
    if plan is not None and not first:
        lines.append(f"    {pool}= _pool")
    if graph.args:
        lines.append("    " + "".join(f"v{a}, " for a in graph.args) + "= _args")
    linemap = {}
    # free each intermediate after its last use (as eager code would): replaying a long
    # chain must not keep every buffer alive, and buffer reuse sees fewer references
    dels = _last_uses(graph)
    for i, n in enumerate(graph.nodes):
        emit = EMITTERS.get(n.kind)
        if emit is None:
            raise InvalidArgumentError(
                f"tf.function {graph.name!r}: node {i} ({n.name}) has kind {n.kind!r}, which "
                f"code generation does not know (known: {', '.join(sorted(EMITTERS))}); "
                "a pass that makes a new kind of node must add its emitter to "
                "tapeflow.tracing.graph.EMITTERS")
        outs = ", ".join(f"v{o}" for o in n.outputs)
        ins = ", ".join(f"v{x}" for x in n.inputs)
        linemap[len(lines) + 1] = i
        if i in planned:
            lines.append(_emit_planned(n, i, ins, outs, ns, plan, first, first_writer))
        else:
            lines.append(emit(n, i, ins, outs, graph, ns))
        if i in dels:
            lines.append("    del " + ", ".join(f"v{v}" for v in sorted(dels[i])))
    if plan is not None and first:
        lines.append(f"    _pool[:] = ({pool})")
    lines.append("    return (" + "".join(f"v{o}, " for o in graph.outputs) + ")")
    src = "\n".join(lines) + "\n"
    tag = "" if plan is None else " (first call of its buffer plan)" if first else \
        " (buffer plan)"
    filename = f"<tapeflow.function {graph.name}{tag}>"
    exec(compile(src, filename, "exec"), ns)
    fn = ns[f"run_{_ident(graph.name)}"]
    return fn, src, linemap, filename
