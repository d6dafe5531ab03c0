"""Convolution-epilogue fusion: a graph pass that turns ``Conv2D -> BiasAdd -> act``
into one ``_FusedConv2D`` op (:mod:`tapeflow.ops.nn_fused`, docs/fused-ops.md).

:func:`fuse_conv` (the pass ``"conv"`` of :mod:`tapeflow.graph_passes`, run before the
elementwise fusion ``"fuse"`` so that the two never claim the same ``Add``/``Relu``)
looks for, in a traced graph:

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
gradient is the unfused ops' (:mod:`tapeflow.ops.nn_fused`).

>>> import tapeflow as tf
>>> w, b = tf.ones([3, 3, 1, 4]), tf.zeros([4])
>>> @tf.function
... def f(x):
...     return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))
>>> f.get_concrete_function(tf.ones([1, 5, 5, 1])).graph.ops()
['_FusedConv2D']
"""

from __future__ import annotations

from ..ops.nn_fused import FUSED_CONV2D
from .graph import Node

__all__ = ["fuse_conv", "ACTIVATION_OPS"]

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
