"""Optimisation passes over a traced :class:`~tapeflow.tracing.Graph`.

Each pass rewrites ``graph.nodes`` in place and can be turned off
(``tf.function(f, passes=(...))`` names the ones to run; ``optimize=False`` runs
none). Every pass keeps the results equal to the unoptimised replay (tested in
``tests/test_graph_passes.py``), and none changes what a ``GradientTape`` outside
the call sees: the taped replay (``ConcreteFunction._eager``) runs each op node
through the dispatcher by its ``op`` and ``attrs``, never by the ``fn`` a pass
installed, and the passes only remove ops whose gradient is the identity or that
compute from constants.

``simplify``
    drops ``Identity`` ops and ``Reshape`` / ``BroadcastTo`` to the shape the input
    already has (their uses read the input). ``StopGradient`` stays: the taped replay
    needs it.
``fold``
    constant folding: an op node that is not stateful (random ops, anything marked
    stateful) and whose inputs are all constants is run once, now, and becomes
    ``const`` nodes (results above :data:`FOLD_LIMIT_BYTES` are left to the replay).
    The gradient's seed chain (``Fill`` → ``Reshape`` → ``RealDiv`` → ``BroadcastTo``)
    and ``OneHot`` of constant labels disappear this way.
``cse``
    common-subexpression elimination: op nodes with the same op, kernel, device,
    inputs and attributes (compared by value, lists, dicts and NumPy arrays
    included) compute once; equal small host constants become one; two reads of the
    same Variable with no assignment (or ``py_function`` / control flow that may
    assign) between them are one value.
``dce``
    dead-code elimination: drops nodes whose outputs nothing uses, keeping
    side effects (Variable assignments, prints, ``py_function``, random ops --
    they advance the random stream --, control flow that assigns).
``conv``
    convolution-epilogue fusion (:func:`tapeflow.tracing.graph_fusion.fuse_conv`): ``Conv2D``,
    its bias and its activation become one ``_FusedConv2D`` op where the device has
    its kernel. Unlike the others this pass installs an op with a gradient of its own
    (the unfused ops' gradient, :mod:`tapeflow.ops.fused`), which is what the
    taped replay differentiates. Runs before ``fuse``.
``donate``
    Variable updates in place: the host ufunc (or fused optimizer update) that computes
    a Variable's new value from its value read in this call writes into the Variable's
    buffer when, at run time, nobody else can see that buffer
    (:func:`donate_variables`). Runs before ``fuse``.
``fuse``
    elementwise fusion (:func:`tapeflow.tracing.graph_fusion.fuse`).
``reuse``
    buffer reuse on the host (``cpu:0``, NumPy): an elementwise node whose input is
    a buffer the graph itself allocated, that dies at this node and that nothing
    else can see, writes its result into that buffer (``np.add(a, b, out=a)``)
    instead of allocating. See :func:`reuse_buffers` for the safety rules.

How the reuse is decided (the part that must never be wrong): a value is *owned* when
the op that made it is known to return a fresh array that shares memory with nothing (a
NumPy ufunc, or a kernel its backend registered with ``fresh=True``), and an owned value
stays reusable only while every node that reads it is also such a kernel (they neither
keep their inputs nor return views of them). Arguments, constants, Variable reads,
anything assigned to a Variable or returned, and anything passed to a view-making or
unknown op (``Reshape``, ``Transpose``, ``py_function``, a copy, control flow, a fused
kernel) is never written into. The rewritten kernel checks again when it runs: the
buffer must be a writeable, C-contiguous ``ndarray`` that owns its memory and that no
one but the replay references (``sys.getrefcount``), otherwise it allocates as before.

>>> import numpy as np, tapeflow as tf
>>> @tf.function(passes=("fold", "cse", "dce", "reuse"))
... def f(x):
...     y = tf.exp(x * 2.0) + 1.0          # exp's buffer is reused by the add
...     return tf.reduce_sum(y)
>>> float(f(tf.constant([0.0, 0.0])))
4.0
>>> [(name, n) for name, n in f.get_concrete_function(tf.constant([0.0, 0.0])).passes_run]
[('fold', 0), ('cse', 0), ('dce', 0), ('reuse', 2)]
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import InvalidArgumentError
from .graph import Node, donation_inputs
from .graph_fusion import fuse as _fuse, fuse_conv as _fuse_conv

__all__ = ["PASSES", "optimize", "dce", "simplify", "fold_constants", "cse", "reuse_buffers",
           "FOLD_LIMIT_BYTES"]

#: constant folding leaves results bigger than this (bytes) to the replay
FOLD_LIMIT_BYTES = 1 << 20

#: NumPy backend kernels (module ``tapeflow_cpu_numpy.*``, function name) known to
#: return a freshly allocated array that shares memory with none of their inputs

_EFFECT_KINDS = ("assign", "print", "py")
_OPAQUE_KINDS = ("py", "print", "cond", "while", "copy")


# --- helpers ---------------------------------------------------------------------------------

def _substitute(graph, mapping):
    """Make every use of a value id in ``mapping`` use its replacement instead."""
    if not mapping:
        return

    def res(v):
        seen = 0
        while v in mapping and seen < 1000:
            v = mapping[v]
            seen += 1
        return v
    for n in graph.nodes:
        n.inputs = [res(i) for i in n.inputs]
    graph.outputs[:] = [res(o) for o in graph.outputs]


def _pure_op(n):
    """An op node whose result depends on its inputs and attributes only."""
    return n.kind == "op" and not n.stateful and n.fn is not None


def _freeze(v):
    """A hashable key equal for equal attribute values (lists, dicts, NumPy arrays
    included); values it cannot compare are keyed by identity (never merged wrongly)."""
    try:
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return ("id", id(v))
            return ("nd", v.dtype.str, v.shape, v.tobytes())
        if isinstance(v, dict):
            return ("dict", tuple((_freeze(k), _freeze(x)) for k, x in v.items()))
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, tuple(_freeze(x) for x in v))
        if isinstance(v, (float, complex, np.floating, np.complexfloating)):
            return (type(v).__name__, repr(v))       # -0.0 != 0.0, nan == nan
        if isinstance(v, np.generic):
            return (type(v).__name__, repr(v))
        hash(v)
        return (type(v), v)
    except Exception:
        return ("id", id(v))


def _is_host_numpy(device):
    return device is not None and getattr(device, "is_host", False)


def _declared_fresh(n):
    """Whether op node ``n`` runs a kernel its backend registered with ``fresh=True``
    (new arrays sharing memory with nothing; no reference kept to the inputs)."""
    op = n.op
    if op is None or n.device is None:
        return False
    entry = op.kernels.get(n.device.type)
    return entry is not None and entry.fresh and entry.fn is n.fn


# --- simplify -------------------------------------------------------------------------------

def simplify(graph):
    """Remove ``Identity`` and no-op ``Reshape`` / ``BroadcastTo`` nodes; returns the
    number removed.

    >>> import tapeflow as tf
    >>> @tf.function(passes=("simplify",))
    ... def f(x):
    ...     return tf.reshape(tf.identity(x), [2]) * 2.0
    >>> f.get_concrete_function(tf.constant([1.0, 2.0])).graph.ops()
    ['Mul']
    """
    mapping = {}
    keep = []
    for n in graph.nodes:
        if (n.kind == "op" and len(n.inputs) == 1 and len(n.outputs) == 1
                and n.op is not None and is_noop(graph, n)):
            mapping[n.outputs[0]] = n.inputs[0]
            continue
        keep.append(n)
    removed = len(graph.nodes) - len(keep)
    graph.nodes[:] = keep
    _substitute(graph, mapping)
    return removed


def is_noop(graph, n):
    name = n.op.name
    src, dst = graph.meta[n.inputs[0]], graph.meta[n.outputs[0]]
    if src != dst:                       # shape, dtype and device all unchanged
        return False
    if name == "Identity":
        return True
    return name in ("Reshape", "BroadcastTo")


# --- constant folding -----------------------------------------------------------------------

def fold_constants(graph):
    """Evaluate pure op nodes whose inputs are all constants; returns the number folded.

    >>> import tapeflow as tf
    >>> @tf.function(passes=("fold", "dce"))
    ... def f(x):
    ...     return x * (tf.constant(2.0) + tf.constant(1.0))
    >>> print(f.get_concrete_function(tf.constant(1.0)).graph)
    graph f(x: float32[] cpu:0):
      %3 = const 3.
      %4 = Mul(%0, %3)
      return %4
    """
    consts = {}
    out = []
    folded = 0
    for n in graph.nodes:
        if n.kind == "const":
            consts[n.outputs[0]] = n.value
        elif (_pure_op(n) and n.outputs and all(i in consts for i in n.inputs)):
            vals = _evaluate(n, [consts[i] for i in n.inputs])
            if vals is not None:
                for o, v in zip(n.outputs, vals):
                    consts[o] = v
                    out.append(Node("const", (), (o,), value=v, device=n.device))
                folded += 1
                continue
        out.append(n)
    graph.nodes[:] = out
    return folded


def _evaluate(n, args):
    kw = dict(n.attrs)
    if n.needs_device:
        kw["device"] = n.device
    try:
        res = n.fn(*args, **kw)
    except Exception:            # leave it to the replay (which reports it properly)
        return None
    vals = tuple(res) if len(n.outputs) > 1 or n.op.num_outputs != 1 else (res,)
    if len(vals) != len(n.outputs):
        return None
    if any(int(getattr(v, "nbytes", 0)) > FOLD_LIMIT_BYTES for v in vals):
        return None
    if any(not hasattr(v, "shape") or not hasattr(v, "dtype") for v in vals):
        return None
    return vals


# --- common-subexpression elimination ----------------------------------------------------------

#: constants at most this many elements are compared by value (bigger: by identity)
_CSE_CONST_ELEMS = 256


def cse(graph):
    """Merge identical computations; returns the number of nodes removed.

    >>> import tapeflow as tf
    >>> @tf.function(passes=("cse",))
    ... def f(x):
    ...     return tf.exp(x) + tf.exp(x)
    >>> f.get_concrete_function(tf.constant(1.0)).graph.ops()
    ['Exp', 'Add']
    """
    mapping = {}
    seen = {}
    reads = {}
    keep = []

    def res(v):
        while v in mapping:
            v = mapping[v]
        return v
    for n in graph.nodes:
        n.inputs = [res(i) for i in n.inputs]
        key = None
        if n.kind == "const":
            key = _const_key(n)
        elif _pure_op(n):
            key = ("op", id(n.op), id(n.fn), id(n.device), n.needs_device, tuple(n.inputs),
                   _freeze(n.attrs))
        elif n.kind == "read":
            rk = ("arg", n.var) if isinstance(n.var, int) else ("var", id(n.var))
            prev = reads.get(rk)
            if prev is not None and graph.meta[prev.outputs[0]] == graph.meta[n.outputs[0]]:
                mapping[n.outputs[0]] = prev.outputs[0]
                continue
            reads[rk] = n
        elif n.kind == "assign" or n.kind in ("py", "cond", "while") or (
                n.kind == "op" and n.stateful):
            # may change a Variable (an argument and a capture may be the same one)
            reads.clear()
        if key is not None:
            prev = seen.get(key)
            if prev is not None and len(prev.outputs) == len(n.outputs) and all(
                    graph.meta[a] == graph.meta[b] for a, b in zip(prev.outputs, n.outputs)):
                for a, b in zip(n.outputs, prev.outputs):
                    mapping[a] = b
                continue
            seen[key] = n
        keep.append(n)
    removed = len(graph.nodes) - len(keep)
    graph.nodes[:] = keep
    _substitute(graph, mapping)
    return removed


def _const_key(n):
    v = n.value
    size = getattr(v, "size", None)
    if (_is_host_numpy(n.device) and isinstance(v, (np.ndarray, np.generic))
            and size is not None and size <= _CSE_CONST_ELEMS and not v.dtype.hasobject):
        return ("const", id(n.device), v.dtype.str, tuple(v.shape), v.tobytes())
    return ("const-id", id(v), id(n.device))


# --- dead-code elimination -------------------------------------------------------------------

def dce(graph):
    """Remove nodes whose outputs are unused and that have no side effects."""
    live = set(graph.outputs)
    keep = []
    for n in reversed(graph.nodes):
        effect = n.kind in _EFFECT_KINDS or n.stateful
        if effect or any(o in live for o in n.outputs):
            keep.append(n)
            live.update(n.inputs)
    keep.reverse()
    removed = len(graph.nodes) - len(keep)
    graph.nodes[:] = keep
    return removed


# --- buffer reuse ------------------------------------------------------------------------------

def _refcount_budget():
    """How many references the generated replay code holds to a buffer it passes to a
    kernel (its local variable, the kernel's parameter, ``sys.getrefcount``'s
    argument), measured with the same code shape :func:`tracing._compile` emits."""
    box = []

    def probe(a, b):
        box.append(sys.getrefcount(a))
        return a
    ns = {"K": probe, "np": np}
    exec("def run():\n    v0 = np.empty(3)\n    v1 = np.empty(3)\n    v2 = K(v0, v1)\n"
         "    return v2\n", ns)
    ns["run"]()
    return box[0]


_BUDGET = _refcount_budget()


def _fresh_producer(n, graph):
    """Does op node ``n`` return new host arrays that share memory with nothing?"""
    if n.kind not in ("op", "fused") or n.fn is None or not _is_host_numpy(n.device):
        return False
    fn = n.fn
    if getattr(fn, "_tapeflow_fresh", False):
        return True
    if n.kind != "op":
        return False
    if isinstance(fn, np.ufunc):
        return fn.nout == 1 and len(n.outputs) == 1
    return _declared_fresh(n) and len(n.outputs) == 1


def _clean_consumer(n):
    """Does node ``n`` read its inputs without keeping them or returning views?"""
    if n.kind not in ("op", "fused") or n.fn is None:
        return False
    if getattr(n.fn, "_tapeflow_inplace", False):
        return True
    if n.kind != "op":
        return False
    if isinstance(n.fn, np.ufunc):
        return True
    return _declared_fresh(n)


def _inplace_ufunc(ufunc, pos, nin, budget):
    """``ufunc`` writing into input ``pos`` when, at run time, it can."""
    getrc = sys.getrefcount
    ndarray = np.ndarray
    if nin == 1:
        def k(a):
            if (type(a) is ndarray and a.base is None and a.flags.writeable
                    and getrc(a) <= budget):
                return ufunc(a, out=a)
            return ufunc(a)
    elif pos == 0:
        def k(a, b):
            if (type(a) is ndarray and a.base is None and a.flags.writeable
                    and getrc(a) <= budget):
                return ufunc(a, b, out=a)
            return ufunc(a, b)
    else:
        def k(a, b):
            if (type(b) is ndarray and b.base is None and b.flags.writeable
                    and getrc(b) <= budget):
                return ufunc(a, b, out=b)
            return ufunc(a, b)
    k.__name__ = f"{ufunc.__name__}_inplace{pos}"
    k.__qualname__ = k.__name__
    return _mark_inplace(k, ufunc, pos)


def _mark_inplace(k, original, pos):
    """Flag ``k``, a rewritten kernel that may write into its input ``pos``, and keep
    the kernel it stands in for (:func:`without_inplace` puts it back)."""
    k._tapeflow_inplace = True          # keeps no input, returns no view (as fused kernels)
    k._tapeflow_writes = pos            # ... but may write into input ``pos``
    k._tapeflow_original = original
    return k


def written_input(n):
    """The position of the input node ``n``'s kernel may write into (a kernel the
    ``reuse`` pass installed), or None."""
    return getattr(n.fn, "_tapeflow_writes", None)


def without_inplace(nodes):
    """``nodes`` with every kernel the ``reuse`` pass made to write into an input
    replaced by the kernel it stood in for (copies of those nodes; the others as they
    are). For a program over the same nodes that keeps values alive the pass saw die:
    the forward program that saves intermediates for a backward pass."""
    out = []
    for n in nodes:
        original = getattr(n.fn, "_tapeflow_original", None)
        if original is not None:
            n = Node(n.kind, n.inputs, n.outputs, op=n.op, attrs=n.attrs, fn=original,
                     device=n.device, var=n.var, value=n.value, needs_device=n.needs_device,
                     stateful=n.stateful, label=n.label)
        out.append(n)
    return out


def _inplace_special(name, pos, budget, original):
    """In-place versions of NumPy backend kernels that are elementwise (writing into
    input ``pos``), or None."""
    getrc = sys.getrefcount
    ndarray = np.ndarray
    maximum, multiply = np.maximum, np.multiply
    greater = np.greater
    if name == "Relu" and pos == 0:
        def k(x):
            if (type(x) is ndarray and x.base is None and x.flags.writeable
                    and getrc(x) <= budget):
                return maximum(x, 0, out=x)
            return maximum(x, 0)
    elif name == "ReluGrad" and pos == 0:
        def k(dy, x):
            if (type(dy) is ndarray and dy.base is None and dy.flags.writeable
                    and getrc(dy) <= budget):
                return multiply(dy, greater(x, 0), out=dy)
            return multiply(dy, greater(x, 0))
    else:
        return None
    k.__name__ = f"{name}_inplace{pos}"
    k.__qualname__ = k.__name__
    return _mark_inplace(k, original, pos)


def reuse_buffers(graph):
    """Let host elementwise nodes write into a dead intermediate input; returns the
    number of nodes rewritten.

    A node ``n`` (a NumPy ufunc with one output and no attributes, or a ``fresh``
    host kernel of ``Relu`` / ``ReluGrad``) gets a kernel that writes into its input ``a``
    when all of these hold:

    * ``a`` was made by a fresh-producing node (a ufunc, a ``fresh`` kernel, or a
      node already rewritten to write into an owned buffer), on the host;
    * every node reading ``a`` reads it cleanly (ufuncs and ``fresh`` kernels keep
      no reference and make no view), ``n`` is the last of them and reads ``a`` once;
    * ``a`` is not returned, not assigned to a Variable, and has the exact shape and
      dtype of ``n``'s output (no broadcasting into it);
    * at run time ``a`` is a writeable ndarray that owns its memory and is referenced
      only by ``a``'s local of the replay (checked with ``sys.getrefcount`` against
      the references that local, the call and the check itself hold; the replay
      deletes every other local of the chain before ``n`` runs, so a buffer plan's
      pool or a program that keeps ``a`` alive makes ``n`` allocate).

    Arguments, constants and Variable reads are never fresh, so they are never written.
    The rewritten kernel keeps the one it replaces (:func:`without_inplace`): a program
    over the same nodes that keeps intermediates alive -- the forward program that
    saves values for a backward pass -- runs the originals.

    >>> import numpy as np, tapeflow as tf
    >>> @tf.function(passes=("reuse",))
    ... def f(x):
    ...     return tf.exp(x) * 2.0
    >>> cf = f.get_concrete_function(tf.constant(np.zeros(3, np.float32)))
    >>> [n.fn.__name__ for n in cf.graph.nodes if n.kind == "op"]
    ['exp', 'multiply_inplace0']
    >>> f(tf.constant(np.zeros(3, np.float32))).numpy()
    array([2., 2., 2.], dtype=float32)
    """
    nodes = graph.nodes
    last = {}
    consumers = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            last[v] = i
            consumers.setdefault(v, []).append(n)
    escaped = set(graph.outputs) | set(graph.args)
    for n in nodes:
        if n.kind in ("assign",) or n.kind in _OPAQUE_KINDS:
            escaped.update(n.inputs)
    owned = set()
    for n in nodes:
        if _fresh_producer(n, graph):
            for o in n.outputs:
                shape = graph.meta[o][0]
                if len(shape) >= 1:        # 0-d results may be NumPy scalars
                    owned.add(o)
    rewritten = 0
    for i, n in enumerate(nodes):
        if n.kind != "op" or n.fn is None or len(n.outputs) != 1 or n.needs_device:
            continue
        if not _is_host_numpy(n.device) or n.donate:
            continue
        out_meta = graph.meta[n.outputs[0]]
        fn = n.fn
        uf = fn if isinstance(fn, np.ufunc) else None
        special = n.op.name if uf is None and _declared_fresh(n) else None
        if uf is not None:
            if uf.nout != 1 or n.attrs or uf.nin != len(n.inputs) or uf.nin not in (1, 2):
                continue
        elif special not in ("Relu", "ReluGrad"):
            continue
        for pos, a in enumerate(n.inputs):
            if (a not in owned or a in escaped or last.get(a) != i
                    or n.inputs.count(a) != 1 or graph.meta[a] != out_meta
                    or not all(_clean_consumer(c) for c in consumers.get(a, ()))):
                continue
            # The generated replay deletes each local after its last use (codegen's
            # ``del``), so when ``n`` runs, the only local holding ``a``'s buffer is
            # ``a``'s own -- the buffers of the earlier links of an in-place chain
            # died at those links. One more reference (a buffer plan's pool, a
            # program that keeps ``a`` alive) and the kernel allocates.
            budget = _BUDGET
            if uf is not None:
                k = _inplace_ufunc(uf, pos, uf.nin, budget)
            else:
                k = _inplace_special(special, pos, budget, fn)
                if k is None:
                    continue
            n.fn = k
            owned.add(n.outputs[0])        # the same buffer, now owned by the output
            rewritten += 1
            break
    return rewritten


# --- softmax cross-entropy and its gradient's softmax ---------------------------------------

def combine_softmax_xent(graph):
    """On the host, compute ``SparseSoftmaxCrossEntropyWithLogits(z, labels)`` and the
    ``Softmax(z)`` its gradient recomputes in one kernel (one ``exp``, one reduction;
    bitwise the same results); returns the number of pairs combined. Constant labels
    are range-checked once, here, instead of at every call.

    >>> import numpy as np, tapeflow as tf
    >>> w = tf.Variable(np.ones((3, 4), np.float32))
    >>> @tf.function(passes=("dce", "xent"))
    ... def f(x, y):
    ...     with tf.GradientTape() as tape:
    ...         loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
    ...             labels=y, logits=tf.matmul(x, w)))
    ...     return loss, tape.gradient(loss, w)
    >>> args = tf.constant(np.eye(2, 3, dtype=np.float32)), tf.constant([1, 2])
    >>> "SoftmaxXent+Softmax" in f.get_concrete_function(*args).graph.ops()
    True
    """
    consts = {n.outputs[0]: n.value for n in graph.nodes if n.kind == "const"}
    xents = {}
    combined = 0
    out = []
    replace = {}
    for n in graph.nodes:
        if (n.kind == "op" and len(n.inputs) == 2 and _is_host_numpy(n.device)
                and n.op.name == "SparseSoftmaxCrossEntropyWithLogits"):
            z, lab = n.inputs
            zm = graph.meta[z]
            if zm[1] in (np.float32, np.float64) and len(zm[0]) >= 1 and \
                    len(graph.meta[lab][0]) == len(zm[0]) - 1:
                xents.setdefault(z, (len(out), n))
        elif (n.kind == "op" and len(n.inputs) == 1 and n.inputs[0] in xents
              and n.op.name == "Softmax" and n.device is xents[n.inputs[0]][1].device
              and n.attrs.get("axis") in (-1, len(graph.meta[n.inputs[0]][0]) - 1)):
            pos, x = xents.pop(n.inputs[0])
            k = _xent_softmax_kernel(x.fn, x.inputs[1] in consts and _labels_ok(
                consts[x.inputs[1]], graph.meta[x.inputs[0]][0][-1]))
            node = Node("fused", list(x.inputs), [x.outputs[0], n.outputs[0]], fn=k,
                        device=n.device, attrs={"_nodes": [x, n]}, label="SoftmaxXent+Softmax")
            replace[pos] = node
            combined += 1
            continue
        out.append(n)
    for pos, node in replace.items():
        out[pos] = node
    graph.nodes[:] = out
    return combined


def _labels_ok(labels, nc):
    labels = np.asarray(labels)
    return labels.size == 0 or (int(labels.min()) >= 0 and int(labels.max()) < nc)


def _xent_softmax_kernel(original, checked):
    """``(logits, labels) -> (loss, softmax)`` on the host: the ops
    SparseSoftmaxCrossEntropyWithLogits and Softmax sharing ``exp(z - max z)`` (same
    operations, same order)."""
    exp, log, take = np.exp, np.log, np.take_along_axis
    intp = np.intp
    rows: dict = {}                  # batch size -> arange (2-D logits: fancy indexing)

    def xent_softmax(z, labels, **_):
        if not checked and labels.size:
            nc = z.shape[-1]
            # one reduction: negative labels viewed as unsigned are huge
            u = labels.view(np.dtype(f"u{labels.dtype.itemsize}")) \
                if labels.dtype.kind == "i" else labels
            if int(u.max()) >= nc:
                original(z, labels)          # raises the kernel's own error
        s = z - z.max(axis=-1, keepdims=True)
        e = exp(s)
        tot = e.sum(axis=-1, keepdims=True)
        if s.ndim == 2:
            r = rows.get(s.shape[0])
            if r is None:
                r = rows[s.shape[0]] = np.arange(s.shape[0])
            picked = s[r, labels]
        else:
            picked = take(s, labels[..., None].astype(intp), axis=-1)[..., 0]
        loss = -(picked - log(tot)[..., 0])
        e /= tot
        return loss, e
    xent_softmax._tapeflow_fresh = True
    xent_softmax._tapeflow_inplace = True      # keeps no input, returns no view
    return xent_softmax


# --- Variable updates in place (buffer donation) ----------------------------------------------

def donate_variables(graph):
    """Mark the host nodes that compute Variables' new values from their values read in
    this call, so that the replay writes them into the Variables' own buffers; returns
    the number marked.

    The pattern (:func:`tapeflow.tracing.graph.donation_inputs`): an op node ``n`` followed
    by one ``assign`` per output, output ``j`` to the Variable that input ``r`` of ``n``
    reads (a ``read`` node of this call), read by ``n`` once and by nothing after it (not
    returned either), of the exact shape, dtype and device of that output. ``n`` is a
    NumPy ufunc with one output and no attributes (``v.assign_sub(lr * g)``'s ``Sub``,
    ``v.assign(v * 0.9)``'s ``Mul``; ``r`` any input) or a fused optimizer update
    (``ApplyAdam``... traced by ``Optimizer.apply_gradients``: input ``j`` for output
    ``j``, and a kernel that takes ``inplace=True``). The node gets ``donate = True``,
    which keeps it out of the ``fuse`` and ``reuse`` passes; code generation checks the
    pattern again on the program it writes (a program that also returns ``r``, the
    forward program saving values for a backward pass, donates nothing) and emits
    ``K(..., out=r) if <every buffer can be donated> else K(...)``.

    At run time a buffer is donated only when nobody else can see it
    (:func:`tapeflow.tracing.graph._donor`): the Variable's current value Tensor holds
    ``r``'s array and is referenced by the Variable alone, the array owns its memory, is
    writeable and is referenced by that Tensor and the replay's local only
    (``sys.getrefcount``), and a ufunc's other inputs have its dtype and broadcast to its
    shape. A replay that assigns a Variable holds its lock throughout (section 20 of
    docs/decisions.md), and every reader takes the buffer under that lock -- eager
    reads (``read_value()``, an op input, ``numpy()``), another replay's read node
    (:func:`tapeflow.tracing.graph._emit_read`) -- so no reader can take the buffer
    between that check and the end of the write. Whoever read the Variable before the
    call keeps the old numbers: the call then allocates, as without this pass.

    >>> import numpy as np, tapeflow as tf
    >>> v = tf.Variable(np.ones(3, np.float32))
    >>> @tf.function
    ... def step(g):
    ...     v.assign_sub(0.25 * g)
    >>> g = tf.constant(np.ones(3, np.float32))
    >>> step(g)                          # traced: Sub(read v, Mul) -> assign v, marked
    >>> before = v.read_value()          # a reader: the next call allocates
    >>> step(g)
    >>> before.numpy(), v.numpy()
    (array([0.75, 0.75, 0.75], dtype=float32), array([0.5, 0.5, 0.5], dtype=float32))
    >>> del before
    >>> step(g)                          # nobody else holds it: written in place
    >>> v.numpy()
    array([0.25, 0.25, 0.25], dtype=float32)
    """
    nodes = graph.nodes
    reads = {n.outputs[0]: n.var for n in nodes if n.kind == "read" and n.outputs}
    last = {v: i for i, n in enumerate(nodes) for v in n.inputs}
    marked = 0
    for i, n in enumerate(nodes[:-1]):
        if donation_inputs(nodes, i, reads, last, graph) is not None:
            n.donate = True
            marked += 1
    return marked


#: name -> pass, in the order :func:`optimize` runs them
PASSES = {"simplify": simplify, "fold": fold_constants, "cse": cse, "dce": dce}

PASSES["conv"] = _fuse_conv  # Conv2D + bias + activation -> _FusedConv2D: before "fuse"
PASSES["donate"] = donate_variables   # before "fuse", which would take the nodes it marks
PASSES["fuse"] = _fuse   # elementwise fusion: one kernel per chain, per backend

PASSES["xent"] = combine_softmax_xent
PASSES["reuse"] = reuse_buffers       # last: it rewrites the kernels the others read


def optimize(graph, passes=None):
    """Run ``passes`` (names; default: all of :data:`PASSES`) on ``graph``; returns
    ``[(name, result)]`` for each pass run."""
    names = list(PASSES) if passes is None else list(passes)
    unknown = [p for p in names if p not in PASSES]
    if unknown:
        raise InvalidArgumentError(f"unknown graph pass(es) {unknown}; known: {list(PASSES)}")
    return [(name, PASSES[name](graph)) for name in names]
