"""Planted bugs: for each graph pass, the buffer plan and the saved forward program, a
plausible wrong version (:data:`PLANTS`, context managers) that the differential test
must find (``tests/test_trace_differential.py``, ``scripts/trace_hunt.py --plants``)."""

from __future__ import annotations

import contextlib

import numpy as np

from tapeflow.tracing import graph_passes, memory_plan

#: the passes as tapeflow defines them (the plants wrap them)
_ORIGINAL = dict(graph_passes.PASSES)


# --- planted bugs ----------------------------------------------------------------------------
# Each is a context manager that installs a plausible wrong version of one part of
# tracing; the differential test must find it (tests/test_trace_differential.py).

@contextlib.contextmanager
def _patch(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _plant_pass(name, wrong):
    @contextlib.contextmanager
    def plant():
        with _patch(graph_passes, "PASSES", {**graph_passes.PASSES, name: wrong}):
            yield
    return plant


def _simplify_wrong(graph):
    # "a view op whose input and output have the same shape, dtype and device is a no-op"
    # (true of Reshape, false of Transpose)
    orig = graph_passes.is_noop
    try:
        graph_passes.is_noop = lambda g, n: (orig(g, n) or n.op.name in ("Transpose",)
                                             and g.meta[n.inputs[0]] == g.meta[n.outputs[0]])
        return graph_passes.simplify(graph)
    finally:
        graph_passes.is_noop = orig


def _fold_wrong(graph):
    # "a Variable read is a constant": captures the value at trace time
    for n in graph.nodes:
        if n.kind == "read" and not isinstance(n.var, int):
            n.kind, n.value = "const", np.array(n.var._value._data, copy=True)
    return graph_passes.fold_constants(graph)


def _cse_wrong(graph):
    # two reads of a Variable are one value, assignments between them or not
    mapping, first, keep = {}, {}, []
    for n in graph.nodes:
        n.inputs = [mapping.get(i, i) for i in n.inputs]
        if n.kind == "read":
            key = n.var if isinstance(n.var, int) else id(n.var)
            if key in first:
                mapping[n.outputs[0]] = first[key]
                continue
            first[key] = n.outputs[0]
        keep.append(n)
    graph.nodes[:] = keep
    graph.outputs[:] = [mapping.get(o, o) for o in graph.outputs]
    return graph_passes.cse(graph)


def _dce_wrong(graph):
    # an assignment's value is used by nothing: dead
    with _patch(graph_passes, "_EFFECT_KINDS", ("print", "py")):
        return _ORIGINAL["dce"](graph)


def _conv_wrong(graph):
    # the fused convolution forgets its bias
    res = _ORIGINAL["conv"](graph)
    for n in graph.nodes:
        if n.kind == "op" and n.op is not None and n.op.name == "_FusedConv2D" \
                and len(n.inputs) >= 3:
            fn = n.fn

            def k(x, w, b, *rest, _fn=fn, **kw):
                return _fn(x, w, b * 0, *rest, **kw)
            n.fn = k
    return res


def _fuse_wrong(graph):
    # the fused kernel writes its result into its first input of the same shape
    res = _ORIGINAL["fuse"](graph)
    for n in graph.nodes:
        if n.kind == "fused":
            fn = n.fn

            def k(*arrays, _fn=fn, **kw):
                out = _fn(*arrays, **kw)
                first = out[0] if isinstance(out, tuple) else out
                for a in arrays:
                    if (isinstance(a, np.ndarray) and a.shape == first.shape
                            and a.dtype == first.dtype and a.flags.writeable):
                        a[...] = first
                        break
                return out
            k._tapeflow_fresh = True
            k._tapeflow_inplace = True
            n.fn = k
    return res


def _xent_wrong(graph):
    # the combined kernel's softmax is not normalised
    res = _ORIGINAL["xent"](graph)
    for n in graph.nodes:
        if n.kind == "fused" and n.label == "SoftmaxXent+Softmax":
            fn = n.fn

            def k(z, labels, _fn=fn, **kw):
                loss, sm = _fn(z, labels, **kw)
                return loss, sm * 1.5
            n.fn = k
    return res


def _reuse_wrong(graph):
    # the pass forgets that returned values escape (writes into a buffer it returns)
    outs = list(graph.outputs)
    graph.outputs[:] = []
    try:
        return _ORIGINAL["reuse"](graph)
    finally:
        graph.outputs[:] = outs


@contextlib.contextmanager
def _plant_plan():
    # the buffer plan gives slots to returned values too
    def candidates(graph, last):
        outs = list(graph.outputs)
        graph.outputs[:] = []
        try:
            return orig(graph, last)
        finally:
            graph.outputs[:] = outs
    orig = memory_plan.candidates
    with _patch(memory_plan, "candidates", candidates):
        yield


@contextlib.contextmanager
def _plant_saved_program():
    # the saved forward program runs the reuse pass's in-place kernels
    with _patch(graph_passes, "without_inplace", lambda nodes: list(nodes)):
        yield



#: name -> context manager installing a plausible bug the differential test must find
PLANTS = {
    "simplify": _plant_pass("simplify", _simplify_wrong),
    "fold": _plant_pass("fold", _fold_wrong),
    "cse": _plant_pass("cse", _cse_wrong),
    "dce": _plant_pass("dce", _dce_wrong),
    "conv": _plant_pass("conv", _conv_wrong),
    "fuse": _plant_pass("fuse", _fuse_wrong),
    "xent": _plant_pass("xent", _xent_wrong),
    "reuse": _plant_pass("reuse", _reuse_wrong),
    "memory_plan": _plant_plan,
    "saved_program": _plant_saved_program,
}
