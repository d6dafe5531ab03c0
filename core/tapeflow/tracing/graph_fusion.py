"""Fusion: the graph passes that turn several ops into one kernel -- chains of
elementwise ops into one kernel the backend compiles (:func:`fuse`, the pass
``"fuse"``), and a convolution with its bias and activation into one ``_FusedConv2D``
op (:func:`fuse_conv`, the pass ``"conv"``, below).

Elementwise fusion: :func:`fuse` (the pass ``"fuse"`` of
:mod:`tapeflow.tracing.graph_passes`) walks a traced :class:`~tapeflow.tracing.Graph` in
order and groups *elementwise* op nodes (single output, NumPy broadcasting: ops declared
``elementwise=True``, built-in ones such as ``Add``, ``Mul``, ``Exp``, ``Cast``,
``SelectV2``, ``Relu`` as well as a plugin's) that feed each other on one device. Each
group of two or more nodes is described as an :class:`ElementwiseSpec` (an expression
DAG: inputs with their shapes and dtypes, steps in order, outputs) and handed to the
device's backend through the two fusion methods of the backend contract
(:class:`tapeflow.plugins.Backend`, docs/backends.md)::

    backend.fusible_op(op_name, in_dtypes, attrs) -> bool      (default: False)
    backend.fuse_elementwise(spec) -> callable(*arrays) -> array | tuple, or None

``fusible_op`` says which ops the backend can compile (so a group never holds one it
cannot); ``None`` from ``fuse_elementwise`` leaves the nodes as they are.
The group is replaced by one node of kind ``"fused"`` at the position of its last
member, with ``fn`` the backend's kernel, ``attrs["_nodes"]`` the original nodes (a
GradientTape outside the call replays those op by op), ``op=None``.

Rules that keep the rewrite valid (results equal to the unfused replay):

* every member has the group's output shape: broadcasting happens only where values
  enter the group (a ``[1000]`` bias added to a ``[64, 1000]`` tensor is fine; an
  intermediate of a smaller shape than the group's starts its own group);
* the group's outputs are the member values used outside the group or returned by
  the function (a value used both inside and outside is an extra output);
* every consumer outside the group of a member's value comes after the group's last
  member (so moving the whole group to that position breaks no dependency and no
  cycle through an outside node can form);
* random (stateful) ops are never fused; only nodes of kind ``"op"`` are.

>>> import tapeflow as tf
>>> @tf.function
... def f(x):
...     return tf.exp(x * 2.0 + 1.0)
>>> x = tf.constant([0.0, 1.0])
>>> g = f.get_concrete_function(x).graph
>>> g.ops()
['Fused[Mul,Add,Exp]']
>>> bool(tf.reduce_all(f(x) == tf.exp(x * 2.0 + 1.0)))
True

Convolution-epilogue fusion turns ``Conv2D -> BiasAdd -> act`` into one
``_FusedConv2D`` op (:mod:`tapeflow.ops.fused`, docs/fused-ops.md).

:func:`fuse_conv` (the pass ``"conv"`` of :mod:`tapeflow.tracing.graph_passes`, run
before the elementwise fusion ``"fuse"`` so that the two never claim the same
``Add``/``Relu``) looks for, in a traced graph:

* a ``Conv2D`` node whose output is read by one node only, which adds a bias:
  ``BiasAdd`` with the convolution's ``data_format``, or (NHWC) ``Add``/``AddV2`` of a
  1-d value with one element per output channel; same dtype, same device;
* optionally, the one activation that reads the biased value: ``Relu``, ``Relu6``,
  ``Elu`` or ``LeakyRelu``. Besides it the biased value ``z`` may be read only by the
  activation's gradient ops computed from ``z`` (``ReluGrad(dy, z)``,
  ``Relu6Grad(dy, z)``, ``LeakyReluGrad(dy, z)`` with ``alpha >= 0``, placed after
  the activation: a tape inside the function), which are rewritten to read the
  activation's output ``y`` instead -- the same mask, since ``y > 0`` exactly where
  ``z > 0`` (and ``0 < y < 6`` where ``0 < z < 6``). Gelu is many ops in a graph and is
  not matched (``layers.Conv2D`` emits the fused op for it directly).

The matched nodes become one ``"op"`` node of ``_FusedConv2D`` (its kernel resolved
for the device, as the tracer does) at the position of the last one, writing the last
one's value; the values in between must be read by nothing else and not be returned.
Only devices with a ``_FusedConv2D`` kernel for the dtype are rewritten. A
``GradientTape`` outside the call replays the node as the op ``_FusedConv2D``, whose
gradient is the unfused ops' (:mod:`tapeflow.ops.fused`).

>>> import tapeflow as tf
>>> w, b = tf.ones([3, 3, 1, 4]), tf.zeros([4])
>>> @tf.function
... def f(x):
...     return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
>>> f.get_concrete_function(tf.ones([1, 5, 5, 1])).graph.ops()
['_FusedConv2D']
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from ..ops.fused import FUSED_CONV2D
from .graph import Node

__all__ = ["fuse", "ElementwiseSpec", "Step", "MAX_GROUP", "fuse_conv", "ACTIVATION_OPS"]

#: at most this many ops per fused kernel (bounds the generated source)
MAX_GROUP = 64


@dataclass(frozen=True)
class Step:
    """One op of a fused group: ``op`` (the op's name), ``args`` (value numbers: ``j <
    len(spec.inputs)`` is input ``j``, ``len(spec.inputs) + k`` is step ``k``'s result),
    ``attrs`` (the op's attributes), the result's ``dtype`` and ``shape``."""

    op: str
    args: tuple
    attrs: dict
    dtype: np.dtype
    shape: tuple


@dataclass
class ElementwiseSpec:
    """A fused elementwise group as an expression DAG (what a backend compiles).

    ``inputs``: ``[(shape, dtype)]`` of the arrays the kernel is called with, in
    order; ``steps``: :class:`Step` s in evaluation order; ``outputs``: value numbers
    the kernel returns (one array when there is one, else a tuple, in this order);
    ``shape``: the shape of every step's result (inputs broadcast to it); ``device``.

    >>> import numpy as np
    >>> s = ElementwiseSpec([((3,), np.dtype("float32")), ((), np.dtype("float32"))],
    ...                     [Step("Mul", (0, 1), {}, np.dtype("float32"), (3,)),
    ...                      Step("Exp", (2,), {}, np.dtype("float32"), (3,))], [3], (3,))
    >>> print(s)
    fused(x0: float32[3], x1: float32[]) -> float32[3]:
      v2 = Mul(x0, x1)
      v3 = Exp(v2)
      return v3
    """

    inputs: list
    steps: list
    outputs: list
    shape: tuple
    device: object = None
    names: list = field(default_factory=list)    # op names, for labels

    def value_dtype(self, v):
        """The dtype of value number ``v``."""
        n = len(self.inputs)
        return np.dtype(self.inputs[v][1]) if v < n else self.steps[v - n].dtype

    def last_uses(self):
        """``{value: index of the last step that reads it}`` (outputs: ``len(steps)``)."""
        last = {}
        for k, s in enumerate(self.steps):
            for a in s.args:
                last[a] = k
        for o in self.outputs:
            last[o] = len(self.steps)
        return last

    def __str__(self):
        n = len(self.inputs)

        def name(v):
            return f"x{v}" if v < n else f"v{v}"

        def ty(shape, dt):
            return f"{np.dtype(dt).name}[{','.join(str(d) for d in shape)}]"
        outs = ", ".join(ty(self.shape, self.value_dtype(o)) for o in self.outputs)
        head = ", ".join(f"x{j}: {ty(s, d)}" for j, (s, d) in enumerate(self.inputs))
        lines = [f"fused({head}) -> {outs}:"]
        for k, s in enumerate(self.steps):
            a = (" {" + ", ".join(f"{key}={v!r}" for key, v in s.attrs.items()) + "}"
                 if s.attrs else "")
            lines.append(f"  v{n + k} = {s.op}({', '.join(name(x) for x in s.args)}){a}")
        lines.append("  return " + ", ".join(name(o) for o in self.outputs))
        return "\n".join(lines)


# --- elementwise fusion: the pass ---------------------------------------------------------

def _candidate(node, graph):
    if node.kind != "op" or node.stateful or len(node.outputs) != 1 or not node.inputs:
        return False
    if not node.op.elementwise or node.donate:     # (a Variable update in place)
        return False
    dev = node.device
    # every input on the node's device (copies are explicit nodes, so this always holds)
    if any(graph.meta[i][2] is not dev for i in node.inputs):
        return False
    dts = tuple(graph.meta[i][1] for i in node.inputs)
    return bool(dev.backend.fusible_op(node.op.name, dts, {
        k: v for k, v in node.attrs.items() if not k.startswith("_")}))


class _Group:
    __slots__ = ("members", "values", "device", "shape")

    def __init__(self, idx, node, shape):
        self.members = [idx]
        self.values = set(node.outputs)
        self.device = node.device
        self.shape = shape


def _groups(graph):
    """Greedy grouping in node order (see the module doc for the rules)."""
    nodes = graph.nodes
    users: dict = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            users.setdefault(v, []).append(i)
    group_of: dict = {}           # value id -> _Group producing it
    groups = []

    def legal(members, idx):
        inside = set(members)
        inside.add(idx)
        for m in members:
            for v in nodes[m].outputs:
                for u in users.get(v, ()):
                    if u not in inside and u < idx:
                        return False
        return True

    for idx, n in enumerate(nodes):
        if not _candidate(n, graph):
            continue
        shape = graph.meta[n.outputs[0]][0]
        cands = []
        for v in n.inputs:
            g = group_of.get(v)
            if (g is not None and g not in cands and g.device is n.device and g.shape == shape
                    and len(g.members) < MAX_GROUP):
                cands.append(g)
        target = None
        if cands:
            merged = [m for g in cands for m in g.members]
            if len(cands) > 1 and len(merged) < MAX_GROUP and legal(merged, idx):
                target = cands[0]
                for g in cands[1:]:
                    target.members += g.members
                    target.values |= g.values
                    for v in g.values:
                        group_of[v] = target
                    groups.remove(g)
                target.members.sort()
            else:
                for g in cands:
                    if legal(g.members, idx):
                        target = g
                        break
        if target is None:
            target = _Group(idx, n, shape)
            groups.append(target)
        else:
            target.members.append(idx)
            target.values.update(n.outputs)
        for v in n.outputs:
            group_of[v] = target
    return [g for g in groups if len(g.members) >= 2], users


def _spec(graph, g, users):
    """The :class:`ElementwiseSpec` of group ``g`` and the value ids of its inputs and
    outputs."""
    nodes = graph.nodes
    inside = set(g.members)
    number: dict = {}
    in_vids = []
    for m in g.members:
        for v in nodes[m].inputs:
            if v not in g.values and v not in number:
                number[v] = len(in_vids)
                in_vids.append(v)
    n_in = len(in_vids)
    steps = []
    for k, m in enumerate(g.members):
        n = nodes[m]
        number[n.outputs[0]] = n_in + k
        shape, dt, _ = graph.meta[n.outputs[0]]
        attrs = {a: v for a, v in n.attrs.items() if not a.startswith("_")}
        steps.append(Step(n.op.name, tuple(number[v] for v in n.inputs), attrs, np.dtype(dt),
                          tuple(shape)))
    graph_outs = set(graph.outputs)
    out_vids = []
    for m in g.members:
        v = nodes[m].outputs[0]
        if v in graph_outs or any(u not in inside for u in users.get(v, ())):
            out_vids.append(v)
    spec = ElementwiseSpec(
        inputs=[(tuple(graph.meta[v][0]), np.dtype(graph.meta[v][1])) for v in in_vids],
        steps=steps, outputs=[number[v] for v in out_vids], shape=tuple(g.shape),
        device=g.device, names=[s.op for s in steps])
    return spec, in_vids, out_vids


def _label(names):
    s = ",".join(names)
    if len(s) > 60:
        s = ",".join(names[:6]) + f",...{len(names) - 6} more"
    return f"Fused[{s}]"


def _tolerant(k):
    """``k`` accepting (and ignoring) keyword arguments: the compiled replay passes a
    node's attributes as keywords (``_nodes`` for a fused node)."""
    def fused(*arrays, **_attrs):
        return k(*arrays)
    fused.kernel = k
    # the buffer-reuse pass's flags (fresh outputs; inputs read, never kept), if set
    for flag in ("_tapeflow_fresh", "_tapeflow_inplace"):
        if getattr(k, flag, False):
            setattr(fused, flag, True)
    return fused


def fuse(graph):
    """Replace groups of elementwise nodes by one ``"fused"`` node each (a kernel from
    the device's backend); returns the number of nodes removed.

    >>> import tapeflow as tf
    >>> @tf.function(passes=("dce", "fuse"))
    ... def f(x, y):
    ...     t = x * y
    ...     return t + 1.0, tf.reduce_sum(t)    # t is used outside the group too
    >>> cf = f.get_concrete_function(tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0]))
    >>> cf.graph.ops()
    ['Fused[Mul,Add]', 'Sum']
    >>> [x.numpy().tolist() for x in f(tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0]))]
    [[4.0, 9.0], 11.0]
    """
    groups, users = _groups(graph)
    if not groups:
        return 0
    replace: dict = {}            # index of the last member -> the fused node
    drop: set = set()
    for g in groups:
        spec, in_vids, out_vids = _spec(graph, g, users)
        if not out_vids:
            continue
        try:
            k = g.device.backend.fuse_elementwise(spec)
        except Exception as e:    # a backend that cannot compile this group: leave it
            warnings.warn(f"elementwise fusion on {g.device} failed ({type(e).__name__}: "
                          f"{e}); the group runs unfused:\n{spec}", RuntimeWarning,
                          stacklevel=2)
            k = None
        if k is None:
            continue
        originals = [graph.nodes[m] for m in g.members]
        node = Node("fused", in_vids, out_vids, attrs={"_nodes": originals, "_spec": spec},
                    fn=_tolerant(k), device=g.device, label=_label(spec.names))
        replace[g.members[-1]] = node
        drop.update(g.members)
    if not replace:
        return 0
    new = []
    for i, n in enumerate(graph.nodes):
        if i in replace:
            new.append(replace[i])
        elif i not in drop:
            new.append(n)
    removed = len(graph.nodes) - len(new)
    graph.nodes[:] = new
    return removed


# --- convolution-epilogue fusion: Conv2D -> BiasAdd -> activation as _FusedConv2D ----

#: activation op -> its gradient op that may read the pre-activation (rewritten to
#: read the output)
ACTIVATION_OPS = {"Relu": "ReluGrad", "Relu6": "Relu6Grad", "Elu": None,
                  "LeakyRelu": "LeakyReluGrad"}


def _users(nodes):
    users: dict = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            users.setdefault(v, []).append(i)
    return users


def _op_node(n, *names):
    return n.kind == "op" and n.op is not None and n.op.name in names and not n.stateful


def _kernel(dev, dtype):
    """``(fn, needs_device)`` of the ``_FusedConv2D`` kernel of ``dev`` for ``dtype``,
    or None."""
    entry = FUSED_CONV2D.kernels.get(dev.type)
    if entry is None or (entry.np_dtypes is not None and dtype not in entry.np_dtypes):
        return None
    fn = entry.fn if entry.variants is None else entry.variants.get(dtype, entry.fn)
    return fn, entry.needs_device


def _bias(graph, conv, add):
    """The bias value id of the node ``add`` after the Conv2D node ``conv``, or None."""
    c = conv.outputs[0]
    shape, dt, dev = graph.meta[c]
    fmt = conv.attrs.get("data_format", "NHWC")
    if _op_node(add, "BiasAdd"):
        if add.inputs[0] != c or add.attrs.get("data_format", "NHWC") != fmt:
            return None
        b = add.inputs[1]
    elif _op_node(add, "Add", "AddV2") and fmt == "NHWC" and len(add.inputs) == 2:
        if add.inputs[0] == c and add.inputs[1] != c:
            b = add.inputs[1]
        elif add.inputs[1] == c and add.inputs[0] != c:
            b = add.inputs[0]
        else:
            return None
    else:
        return None
    bshape, bdt, bdev = graph.meta[b]
    o = shape[3] if fmt == "NHWC" else shape[1]
    if (tuple(bshape) != (o,) or bdt != dt or bdev is not dev
            or tuple(graph.meta[add.outputs[0]][0]) != tuple(shape)):
        return None
    return b


def _activation(graph, nodes, users, z, after):
    """``(index of the activation node, [(index, grad node) to rewrite])`` reading ``z``
    (made at node ``after``), or None."""
    idx = users.get(z, ())
    acts = [i for i in idx if _op_node(nodes[i], *ACTIVATION_OPS) and len(nodes[i].inputs) == 1]
    if len(acts) != 1 or acts[0] <= after:
        return None
    k = acts[0]
    act = nodes[k]
    grad_op = ACTIVATION_OPS[act.op.name]
    alpha = act.attrs.get("alpha", 0.2)
    rewrites = []
    for i in idx:
        if i == k:
            continue
        g = nodes[i]
        if (grad_op is None or not _op_node(g, grad_op) or i <= k or len(g.inputs) != 2
                or g.inputs[0] == z or g.inputs[1] != z
                or (grad_op == "LeakyReluGrad"
                    and (g.attrs.get("alpha", 0.2) != alpha or alpha < 0))):
            return None
        rewrites.append(i)
    return k, rewrites


def _match(graph, nodes, users, i, outputs):
    """The rewrite of the Conv2D node ``i``: ``(last index, fused node, grad nodes to
    rewrite, value they read instead, indices removed)`` or None."""
    conv = nodes[i]
    c = conv.outputs[0]
    if c in outputs or len(users.get(c, ())) != 1 or len(conv.inputs) != 2:
        return None
    j = users[c][0]
    add = nodes[j]
    b = _bias(graph, conv, add)
    if b is None:
        return None
    shape, dt, dev = graph.meta[c]
    k = _kernel(dev, dt)
    if k is None:
        return None
    z = add.outputs[0]
    attrs = {**{a: v for a, v in conv.attrs.items() if not a.startswith("_")},
             "fused_ops": ("BiasAdd",), "num_args": 1, "leakyrelu_alpha": 0.2}
    last, out, rewrites, removed = j, z, [], [i, j]
    act = None if z in outputs else _activation(graph, nodes, users, z, j)
    if act is not None:
        last, rewrites = act
        a = nodes[last]
        out = a.outputs[0]
        attrs["fused_ops"] = ("BiasAdd", a.op.name)
        if a.op.name == "LeakyRelu":
            attrs["leakyrelu_alpha"] = float(a.attrs.get("alpha", 0.2))
        removed.append(last)
    fused = Node("op", [*conv.inputs, b], [out], op=FUSED_CONV2D, attrs=attrs, fn=k[0],
                 device=dev, needs_device=k[1])
    return last, fused, rewrites, (z, out), removed


def fuse_conv(graph):
    """Replace each ``Conv2D -> bias -> activation`` chain by one ``_FusedConv2D`` node;
    returns the number of chains fused.

    >>> import tapeflow as tf
    >>> w, b = tf.ones([1, 1, 2, 2]), tf.constant([1.0, -9.0])
    >>> @tf.function(passes=("conv",))
    ... def f(x):
    ...     return tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID") + b)
    >>> print(f(tf.ones([1, 1, 1, 2]))[0, 0, 0])
    tf.Tensor([3. 0.], shape=(2,), dtype=float32)
    >>> f.get_concrete_function(tf.ones([1, 1, 1, 2])).passes_run
    [('conv', 1)]
    """
    nodes = graph.nodes
    if not any(_op_node(n, "Conv2D") for n in nodes):
        return 0
    users = _users(nodes)
    outputs = set(graph.outputs)
    replace: dict = {}
    drop: set = set()
    for i, n in enumerate(nodes):
        if not _op_node(n, "Conv2D") or i in drop:
            continue
        m = _match(graph, nodes, users, i, outputs)
        if m is None or drop.intersection(m[4]):
            continue
        last, fused, rewrites, (z, y), removed = m
        for r in rewrites:
            g = nodes[r]
            nodes[r] = Node(g.kind, [g.inputs[0], y], g.outputs, op=g.op, attrs=g.attrs,
                            fn=g.fn, device=g.device, needs_device=g.needs_device,
                            stateful=g.stateful, label=g.label)
        replace[last] = fused
        drop.update(removed)
    if not replace:
        return 0
    graph.nodes[:] = [replace[i] if i in replace else n for i, n in enumerate(nodes)
                      if i in replace or i not in drop]
    return len(replace)
