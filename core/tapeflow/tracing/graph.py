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

import inspect
import itertools
import sys

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
                 "needs_device", "stateful", "label", "donate")

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
        #: set by graph_passes.donate_variables: the replay may write this node's result
        #: into a Variable's buffer (then no other pass rewrites the node)
        self.donate = False

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
    """``v = V._value._data``, taken under the Variable's lock: every in-place update (an
    eager ``assign_add``, a fused optimizer step, a donating replay) holds that lock from
    its reference-count check to the end of its write, so a replay never takes a buffer
    half-written; once taken, the reference it holds keeps those updates off the buffer.
    A program that assigns Variables reads without: its replay holds the locks of every
    Variable it reads or writes throughout (``ConcreteFunction._replay``)."""
    var = _variable(n, i, ns)
    if ns["_locks_held"]:
        return f"    {outs} = {var}._value._data"
    if var.startswith("V"):                 # a captured Variable: its lock is known
        ns[f"LA{i}"], ns[f"LR{i}"] = n.var._lock.acquire, n.var._lock.release
        return f"    LA{i}(); {outs} = {var}._value._data; LR{i}()"
    return (f"    _l = {var}._lock; _l.acquire(); {outs} = {var}._value._data; "
            "_l.release()")


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


# --- Variable updates in place (graph_passes.donate_variables) -----------------------------

def donation_inputs(nodes, i, reads, last, graph):
    """The positions of the inputs of ``nodes[i]`` whose buffers the assigns right after
    it may take (see ``graph_passes.donate_variables``), one per output, or None.
    ``reads``: {value id: the Variable a read node made it from}; ``last``: {value id:
    index of its last reader}."""
    n = nodes[i]
    k = len(n.outputs)
    if (n.kind != "op" or k == 0 or i + k >= len(nodes) or n.needs_device or n.fn is None
            or not getattr(n.device, "is_host", False)):
        return None
    ufunc = isinstance(n.fn, np.ufunc)
    if ufunc:           # one output, no attributes: Sub of v.assign_sub(lr * g)
        if (k != 1 or n.fn.nout != 1 or n.fn.nin != len(n.inputs)
                or any(not a.startswith("_") for a in n.attrs)):
            return None
    elif not _takes_inplace(n):
        return None
    outputs = set(graph.outputs)
    found = []
    for j, o in enumerate(n.outputs):
        a = nodes[i + 1 + j]
        if a.kind != "assign" or a.inputs != [o]:
            return None
        cands = range(len(n.inputs)) if ufunc else (j,)
        for pos in cands:
            r = n.inputs[pos]
            var = reads.get(r, reads)
            if (var is reads or not (var is a.var or (isinstance(var, int) and var == a.var))
                    or n.inputs.count(r) != 1 or r in outputs or graph.meta[r] != graph.meta[o]
                    or len(graph.meta[o][0]) == 0 or last.get(r) != i):
                continue
            found.append(pos)
            break
        else:
            return None
    return tuple(found)


def _takes_inplace(n):
    """Node ``n`` runs a fused optimizer update (``ApplyAdam``...: an op with no gradient
    and an ``inplace`` attr, False here) whose kernel takes ``inplace=True``: then it
    writes its results into its first inputs (the variable and its slots)."""
    op = n.op
    if (op is None or op.differentiable or n.attrs.get("inplace", False) is not False
            or "inplace" not in (getattr(op, "attrs", None) or ())):
        return False
    try:
        return "inplace" in inspect.signature(n.fn).parameters
    except (TypeError, ValueError):
        return False


def _donations(graph):
    """{node index: input positions} of the nodes of ``graph`` marked by the ``donate``
    pass whose pattern holds in this program (a program that keeps the reads alive, the
    forward program that saves values for a backward pass, donates nothing)."""
    nodes = graph.nodes
    marked = [i for i, n in enumerate(nodes) if n.kind == "op" and n.donate]
    if not marked:
        return {}
    reads = {n.outputs[0]: n.var for n in nodes if n.kind == "read" and n.outputs}
    last = {v: i for i, n in enumerate(nodes) for v in n.inputs}
    found = {}
    for i in marked:
        pos = donation_inputs(nodes, i, reads, last, graph)
        if pos is not None:
            found[i] = pos
    return found


def _fits(a, others):
    """Whether ``ufunc(*others, a, out=a)`` gives what ``ufunc(...)`` would: every
    other operand of ``a``'s dtype, broadcasting to ``a``'s shape."""
    shape, dt = a.shape, a.dtype
    for o in others:
        s = getattr(o, "shape", ())
        if getattr(o, "dtype", dt) != dt:
            return False
        if s != shape and (len(s) > len(shape) or any(
                d != 1 and d != e for d, e in zip(reversed(s), reversed(shape)))):
            return False
    return True


_ndarray = np.ndarray
_getrc = sys.getrefcount


def _donor(var, a, *others):
    """Whether the replay may write a Variable's new value into ``a``, the array it read
    from it: the Variable's value Tensor holds ``a`` and only the Variable holds that
    Tensor; ``a`` owns its memory, is writeable and is held by that Tensor and the
    replay's local alone (the budgets: :func:`_donor_budget`); ``others`` fit."""
    t = var._value
    return (type(a) is _ndarray and t._data is a and a.base is None and a.flags.writeable
            and _getrc(a) <= _BUDGET[0] and _getrc(t) <= _BUDGET[1] and _fits(a, others))


def _donor_probe(var, a, *others):
    """:func:`_donor`'s frame, recording the reference counts it would compare."""
    t = var._value
    _PROBED.append((_getrc(a), _getrc(t)))
    return False


def _donor_budget():
    """``[array, Tensor]`` reference counts :func:`_donor` sees when only the Variable
    and the generated line hold them, measured on the code shape :func:`_compile`
    emits (a stand-in Variable and Tensor holding them the way the real ones do)."""
    class _Value:
        __slots__ = ("_data",)

    class _Var:
        pass
    ns = {"_donor": _donor_probe, "K": np.negative}
    exec("def run(V):\n    v0 = V._value._data\n"
         "    v1 = K(v0, out=v0) if _donor(V, v0) else K(v0)\n    return v1\n", ns)
    var, value = _Var(), _Value()
    value._data = np.zeros(2)
    var._value = value
    del value
    ns["run"](var)
    return list(_PROBED.pop())


_PROBED: list = []
_BUDGET = _donor_budget()


def _emit_donating(n, i, ins, outs, graph, ns, positions):
    """``K(..., out=r) if _donor(V, r, others) else K(...)`` for a ufunc node whose
    result an assign of the Variable it read gives to that Variable, ``K(...,
    inplace=True) if _donor(V, r) and ... else K(...)`` for a fused update (graph_passes'
    ``donate`` pass)."""
    ns[f"K{i}"] = n.fn
    conds = []
    for j, pos in enumerate(positions):
        var = _variable(graph.nodes[i + 1 + j], i + 1 + j, ns)
        others = ("".join(f", v{x}" for q, x in enumerate(n.inputs) if q != pos)
                  if isinstance(n.fn, np.ufunc) else "")
        conds.append(f"_donor({var}, v{n.inputs[pos]}{others})")
    if isinstance(n.fn, np.ufunc):
        donated = f"K{i}({ins}, out=v{n.inputs[positions[0]]})"
        plain = f"K{i}({ins})"
    else:
        ns[f"A{i}"] = {k: v for k, v in n.attrs.items() if not k.startswith("_")
                       and k != "inplace"}
        donated = f"K{i}({ins}, inplace=True, **A{i})"
        plain = f"K{i}({ins}, **A{i})"
    if len(n.outputs) == 1 and n.op is not None and n.op.num_outputs != 1:
        outs += ","
    return f"    {outs} = {donated} if {' and '.join(conds)} else {plain}"


def _ident(name):
    return "".join(c if c.isalnum() else "_" for c in name) or "f"


def _compile(graph: Graph, plan=None, first=False):
    """Straight-line Python for ``graph``: ``run(arrays, vars) -> output arrays``
    (with a buffer ``plan``: ``run(arrays, vars, buffers)``, ``first``: the program of
    the plan's first call). Returns ``(run, source, {line number: node index}, file
    name)``."""
    # (a program that assigns Variables runs holding the locks: _emit_read)
    ns = {"_wrap": wrap, "_donor": _donor,
          "_locks_held": any(n.kind == "assign" for n in graph.nodes)}
    planned = plan.node_slot if plan is not None else {}
    donating = _donations(graph)
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
        elif i in donating:
            lines.append(_emit_donating(n, i, ins, outs, graph, ns, donating[i]))
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
