"""Code generation: a :class:`~tapeflow.tracing.graph.Graph` compiled to straight-line
Python that calls each kernel directly (no dispatch, no tape).

:func:`_compile` writes one line per node; what the line says is up to the node
kind's *emitter* in :data:`EMITTERS` (one small function per kind, the table a pass
or a new node kind extends). An emitter gets the node, its index, the generated
names of its inputs and outputs, the graph, and the namespace of the generated
function, where it puts the objects the line refers to (kernels, constants,
Variables) under names suffixed with the node's index.

With a buffer plan (:mod:`tapeflow.tracing.memory_plan`), a planned node's line passes
its slot's buffer: ``v7 = K6(v5, v6, out=b2, **A6)``; the buffers come in as the third
argument (``_pool``). The *first* program of a plan passes no ``out`` and keeps the
result of each slot's first writer as that slot's buffer (``_pool[:] = ...`` before it
returns), so buffers are made by the kernels themselves, on any backend.
"""

from __future__ import annotations

from ..ops import random as _random_mod
from ..errors import InvalidArgumentError
from ..runtime.tensor import wrap
from .graph import Graph

__all__ = ["EMITTERS"]


def _fresh_random_attrs(attrs):
    """``f() -> attrs`` with the next counter of the op's key (see tapeflow.random)."""
    _next_counter = _random_mod.next_counter
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
                "tapeflow.tracing.codegen.EMITTERS")
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
