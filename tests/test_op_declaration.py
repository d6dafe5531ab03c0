"""A built-in op and a plugin op are declared and run through the same code path:
both are a ``Library``'s ops (the core's is the Library ``tapeflow``), registered by
pluggy hooks, found by namespace, their typed attrs validated at the signature --
eagerly and under tf.function alike -- traced the same way, and, declared
elementwise, fused with their neighbours by tf.function on the NumPy backend."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import tapeflow as tf
from tapeflow.ops.library import LIB
from tapeflow.plugins import Library


def test_the_builtin_ops_are_a_library_registered_like_a_plugin():
    assert isinstance(LIB, Library) and LIB.namespace == "tapeflow"
    names = {op.name for op in LIB.ops}
    assert {"MatMul", "Add", "Sum", "Conv2D"} <= names
    info = {p.name: p for p in tf.plugins.plugin_report()}["tapeflow-builtin-ops"]
    assert info.status == "loaded" and "MatMul" in info.ops
    # the core's namespace: short names and tapeflow:: names are the same op
    assert tf.plugins.get_op("tapeflow::MatMul") is tf.plugins.get_op("MatMul")
    assert tf.ops.tapeflow.MatMul is tf.plugins.get_op("MatMul")
    assert "MatMul" in dir(tf.ops.tapeflow)


SAME_PATH = textwrap.dedent("""
    import numpy as np
    import tapeflow as tf
    from tapeflow.ops.library import LIB
    from tapeflow.plugins import Library, register
    from tapeflow.tracing import TracingError

    def kernel(x, k):
        return x * np.asarray(k, x.dtype)

    # one op in the core's library (as a new built-in is written) ...
    builtin = LIB.define("TestOnlyScale", inputs=("x",), attrs={"k": 2},
                         attr_types={"k": "int"}, elementwise=True)
    class Kernels:          # (a built-in's kernels come from the backends' hooks)
        @tf.plugins.hookimpl
        def tapeflow_register_kernels(self, registry):
            registry.add_kernel("TestOnlyScale", "cpu", kernel)
    register(Kernels())

    # ... and the same op in a plugin's library, declared by signature
    lib = Library("testplug")
    @lib.op(elementwise=True)
    def scale(x, k=2, name=None):
        '''x * k'''
    @lib.kernel(scale, "cpu")
    def _scale(x, k):
        return kernel(x, k)
    register(lib)

    x = tf.constant([1.0, 2.0])
    for op_call in (lambda x, k: builtin(x, k=k), lambda x, k: scale(x, k=k)):
        assert op_call(x, 3).numpy().tolist() == [3.0, 6.0]
        for bad in (tf.constant(3), 1.5, "3"):
            try:
                op_call(x, bad)
            except tf.errors.InvalidArgumentError as e:
                assert "attr 'k'" in str(e), e
            else:
                raise AssertionError(f"attr k={bad!r} was accepted")
        f = tf.function(lambda x: op_call(x, tf.constant(3)))
        try:
            f(x)
        except tf.errors.InvalidArgumentError as e:
            assert "attr 'k'" in str(e) and not isinstance(e, TracingError), e
        else:
            raise AssertionError("a tensor attr was accepted under tf.function")
        g = tf.function(lambda x: tf.exp(op_call(x, 4) * 0.0) + 1.0)
        assert g(x).numpy().tolist() == [2.0, 2.0]
        graph = g.get_concrete_function(x).graph
        print(graph.ops())           # traced, then fused with its elementwise neighbours
    print("ok")
""")


def test_a_builtin_op_and_a_plugin_op_take_the_same_path():
    r = subprocess.run([sys.executable, "-c", SAME_PATH], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.split("\n")
    assert lines[:3] == ["['Fused[TestOnlyScale,Mul,Exp,Add]']",
                         "['Fused[testplug::scale,Mul,Exp,Add]']", "ok"], r.stdout
