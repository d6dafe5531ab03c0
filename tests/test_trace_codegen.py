"""tracing split by concern: the table of emitters in tracing.graph, the one-call
path from the runtime's tracer hook to this thread's tracer, and the public names
``tapeflow.tracing`` keeps (those of the former ``tracing.trace``)."""

import sys

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.runtime import context as ctx
from tapeflow.errors import InvalidArgumentError
from tapeflow.runtime.registry import get_op
from tapeflow import tracing as trace
from tapeflow.tracing import graph as codegen, tracer
from tapeflow.tracing.graph import Graph, Node


def test_every_node_kind_the_tracer_makes_has_an_emitter():
    v = tf.Variable(1.0)

    @tf.function(optimize=False)
    def f(x):
        v.assign_add(x)
        tf.print("x", x, output_stream=sys.stderr)
        y = tf.cond(x > 0.0, lambda: x * 2.0, lambda: x)
        z = tf.py_function(lambda a: a + 1.0, [y], tf.float32)
        return v.read_value() + z + tf.constant([1.0])

    f(tf.constant(1.0))
    kinds = {n.kind for n in f.graph.nodes}
    assert {"op", "const", "read", "assign", "print", "cond", "py"} <= kinds
    assert kinds <= set(codegen.EMITTERS)
    assert set(codegen.EMITTERS) == {"op", "fused", "const", "read", "assign", "copy", "py",
                                     "print", "cond", "while"}


def test_unknown_node_kind_is_a_clear_error():
    g = Graph("mine")
    vid = g.new_value((), np.dtype("float32"), None)
    g.nodes.append(Node("teleport", (), (vid,), label="beam"))
    g.outputs.append(vid)
    with pytest.raises(InvalidArgumentError) as e:
        codegen._compile(g)
    msg = str(e.value)
    assert "'mine'" in msg and "'teleport'" in msg and "beam" in msg
    assert "EMITTERS" in msg and "copy" in msg


def test_generated_line_per_node_kind():
    @tf.function(optimize=False)
    def f(x):
        return tf.reduce_sum(x * 2.0, axis=0)

    cf = f.get_concrete_function(tf.constant([[1.0, 2.0]]))
    lines = cf.source.splitlines()
    assert lines[0] == "def run_f(_args, _vargs):"
    assert "    v0, = _args" in lines
    assert any(ln.startswith("    v") and "= C" in ln for ln in lines)     # the constant
    assert any("= K" in ln and "**A" in ln for ln in lines)                 # Sum's attrs
    assert lines[-1].startswith("    return (")
    np.testing.assert_allclose(f(tf.constant([[1.0, 2.0]])).numpy(), [2.0, 4.0])


def test_a_pass_may_add_an_emitter_for_a_new_kind():
    def emit_twice(n, i, ins, outs, graph, ns):
        return f"    {outs} = {ins} + {ins}"

    g = Graph("twice")
    a = g.new_value((2,), np.dtype("float32"), None)
    out = g.new_value((2,), np.dtype("float32"), None)
    g.args.append(a)
    g.nodes.append(Node("twice", (a,), (out,)))
    g.outputs.append(out)
    codegen.EMITTERS["twice"] = emit_twice
    try:
        run, src, linemap, _ = codegen._compile(g)
    finally:
        del codegen.EMITTERS["twice"]
    assert "v1 = v0 + v0" in src and linemap == {3: 0}
    np.testing.assert_allclose(run([np.array([1.0, 2.0], np.float32)], [])[0], [2.0, 4.0])


def test_a_traced_op_reaches_the_threads_tracer_in_one_call():
    # the dispatcher calls this thread's tracer's op itself (runtime.context.thread_tracer):
    # the first Python function the kernel's result reaches is the tracer's op, no hook
    # or lookup helper in between
    calls = []

    class Probe(tracer._Tracer):
        def op(self, *args):
            calls.append("op")
            return super().op(*args)

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.endswith(("tracing/__init__.py",
                                                                   "tracer.py")):
            calls.append(frame.f_code.co_name)

    probe = Probe(Graph("probe"))
    x = tf.constant([1.0], device="cpu:0")
    assert tracer._tl is ctx.thread_tracer
    scopes = tf.runtime.devices.active_scopes
    tracer._tl.tracer = probe
    ctx.tracing[0] += 1
    scopes[0] += 1                # (as a trace does: every op takes the slow path)
    try:
        sys.setprofile(prof)
        try:
            tf.add(x, x)
        finally:
            sys.setprofile(None)
    finally:
        scopes[0] -= 1
        ctx.tracing[0] -= 1
        tracer._tl.tracer = None
    assert calls[:2] == ["op", "op"], calls        # Probe.op, then _Tracer.op
    assert len(probe.graph.nodes) == 2          # x captured as a constant, then the op


def test_public_names_of_tracing_trace_still_import():
    for name in trace.__all__:
        assert getattr(trace, name) is not None
    assert trace.function is tf.function
    assert trace.TracingError is tf.tracing.TracingError
    assert isinstance(trace.RETRACE_WARN_AFTER, int)
    assert isinstance(ctx.HOOKS.tracer, trace._ContextTracer)
