"""The data structure ``tf.function`` builds: a :class:`Graph` of :class:`Node` s.

Tracing (:mod:`tapeflow.tracing.trace`) fills it, the passes
(:mod:`tapeflow.tracing.graph_passes`, :mod:`tapeflow.tracing.graph_fusion`)
rewrite it, and a compiled function replays it.
"""

from __future__ import annotations

import itertools

import numpy as np

__all__ = ["Graph", "Node"]


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
