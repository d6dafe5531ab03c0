"""An op's rules -- gradient, JVP, batching rule, shape inference -- are attached one
way (issue 36): ``OpDef.def_grad/def_jvp/def_batch/def_infer`` and ``Library.gradient/
jvp/batch/infer`` all go through ``registry.set_rule``, with the same conflict check
(a second rule names both sources unless ``override=True``), the plugin's record, and
the rollback of a plugin that fails halfway; the built-in ops keep every rule they had
when their rules moved next to their definitions."""

import subprocess
import sys
import textwrap
import warnings

import pytest

import tapeflow as tf
import tapeflow.ops.batching as batching
from tapeflow.errors import PluginConflictError
from tapeflow.ops.library import LIB
from tapeflow.plugins import (Broadcasting, Library, Linear, Multilinear, OpDef, get_op,
                              register)
from tapeflow.runtime import registry


@pytest.fixture(autouse=True)
def _on_cpu():
    with tf.device("cpu:0"):
        yield


def _double_library(ns, **kw):
    """A Library with one op, ``double(x) = 2 x``, with a CPU kernel and a gradient."""
    lib = Library(ns)

    @lib.op(**kw)
    def double(x, name=None):
        """2 x"""

    lib.kernel(double, "cpu")(lambda x: x * 2)
    lib.gradient(double)(lambda ctx, dy: dy * 2.0)
    return lib, double


def _jvp_rule(ctx, t):
    return t * 2.0


def _batch_rule(ctx, x):
    return tf.multiply(x, 2.0)


# --- OpDef.def_* ----------------------------------------------------------------------

def test_def_jvp_and_def_batch_take_a_function_or_a_rule_object_and_return_it():
    op = OpDef("rules_t::f", inputs=("a", "b"))
    ml = Multilinear()
    assert op.def_jvp(ml) is ml and op.jvp is ml
    bc = Broadcasting()
    assert op.def_batch(bc) is bc and op.batch is bc

    op2 = OpDef("rules_t::g")

    @op2.def_jvp
    def g_jvp(ctx, t):
        return t

    @op2.def_batch
    def g_batch(ctx, x):
        return x

    @op2.def_infer
    def g_infer(shapes, dtypes, attrs):
        return [(shapes[0], dtypes[0])]

    assert (op2.jvp, op2.batch, op2.infer) == (g_jvp, g_batch, g_infer)
    assert g_jvp.__name__ == "g_jvp"                 # the decorator returns the rule


@pytest.mark.parametrize("rule,method", [("grad", "def_grad"), ("jvp", "def_jvp"),
                                         ("batch", "def_batch"), ("infer", "def_infer")])
def test_a_second_rule_conflicts_naming_both_sources_unless_override(rule, method):
    op = OpDef("rules_t::h", source="first_project")

    def first(*a):
        return None

    def second(*a):
        return None

    getattr(op, method)(first)
    if rule in registry.LENIENT_UNTIL_0_4:
        # 0.2's def_grad/def_infer replaced silently: 0.3 warns, 0.4 refuses (the plugin
        # API's deprecation rule, docs/plugins.md section 5)
        with pytest.warns(DeprecationWarning, match="tapeflow 0.4 raises") as w:
            getattr(op, method)(second, source="second_project")
        msg = str(w[0].message)
        assert getattr(op, rule) is second
        getattr(op, method)(first, override=True)
        # strict everywhere else: the plugin Registry (Library.gradient) raised in 0.2
        with pytest.raises(PluginConflictError):
            registry.set_rule(op, rule, second, "second_project")
    else:
        with pytest.raises(PluginConflictError) as e:
            getattr(op, method)(second, source="second_project")
        msg = str(e.value)
    assert "rules_t::h already has a" in msg and registry.RULES[rule] in msg
    assert "'first_project'" in msg and "'second_project'" in msg and "override=True" in msg
    assert "first" in msg and "second" in msg
    assert getattr(op, rule) is first                 # unchanged
    assert getattr(op, method)(second, override=True, source="second_project") is second
    assert getattr(op, rule) is second
    assert op.rule_sources[rule] == "second_project"
    getattr(op, method)(second)                      # the same rule again: no conflict


def test_a_rule_object_conflicts_like_a_function():
    op = OpDef("rules_t::k", jvp=Linear())
    with pytest.raises(PluginConflictError, match=r"already has a JVP rule .*Linear\(\).*"
                                                  r"Multilinear\(\)"):
        op.def_jvp(Multilinear())


def test_set_rule_refuses_an_unknown_rule():
    with pytest.raises(tf.errors.InvalidArgumentError, match="unknown rule 'vjp'"):
        registry.set_rule(OpDef("rules_t::u"), "vjp", lambda ctx: None)


# --- Library.jvp / Library.batch / Library.infer through the Registry --------------------

def test_library_jvp_and_batch_are_registered_recorded_and_used():
    lib, double = _double_library("rules_lib")
    assert lib.jvp(double, _jvp_rule) is _jvp_rule
    got = lib.batch(double)(_batch_rule)             # decorator form
    assert got is _batch_rule
    assert double.op.jvp is None                     # attached when the Library registers
    info = register(lib)
    assert double.op.jvp is _jvp_rule and double.op.batch is _batch_rule
    assert double.op.rule_sources["jvp"] == "<in-process rules_lib>"
    assert ("rules_lib::double", "jvp") in info.rules
    assert ("rules_lib::double", "batch") in info.rules
    assert ("rules_lib::double", "grad") in info.rules
    x = tf.constant([1.0, 2.0])
    with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 10.0])) as acc:
        y = double(x)
    assert acc.jvp(y).numpy().tolist() == [2.0, 20.0]
    with _no_vectorization_warning():
        out = tf.vectorized_map(double, tf.constant([[1.0, 2.0], [3.0, 4.0]]))
    assert out.numpy().tolist() == [[2.0, 4.0], [6.0, 8.0]]
    # declared after registration: takes effect at once, and is recorded
    lib.infer(double, lambda shapes, dtypes, attrs: [(shapes[0], dtypes[0])])
    assert double.op.infer is not None and ("rules_lib::double", "infer") in info.rules
    # a second one replaced silently in 0.2: it warns until 0.4 refuses it
    with pytest.warns(DeprecationWarning, match="tapeflow 0.4 raises PluginConflictError"):
        lib.infer(double, _second_infer)
    assert double.op.infer is _second_infer


def _second_infer(shapes, dtypes, attrs):
    return [(shapes[0], dtypes[0])]


class _no_vectorization_warning:
    """The op's own batching rule ran: vectorized_map did not fall back to a loop."""

    def __enter__(self):
        self._cm = warnings.catch_warnings(record=True)
        self._rec = self._cm.__enter__()
        warnings.simplefilter("always")

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        loops = [w for w in self._rec if "VectorizationWarning" in type(w.message).__name__]
        assert not loops, [str(w.message) for w in loops]


def test_library_rule_for_a_builtin_conflicts_then_overrides():
    matmul = get_op("MatMul")                  # its rules are written, not derived
    jvp, batch = matmul.jvp, matmul.batch
    assert "jvp" not in matmul.rule_sources and "batch" not in matmul.rule_sources
    lib = Library("rules_conflict")
    lib.jvp("MatMul", _jvp_rule)
    with pytest.raises(PluginConflictError) as e:
        register(lib)
    msg = str(e.value)
    assert "MatMul already has a JVP rule (from 'tapeflow'" in msg
    assert "rules_conflict" in msg and "override=True" in msg
    assert matmul.jvp is jvp

    lib2 = Library("rules_override")
    lib2.batch("MatMul", Broadcasting(), override=True)
    try:
        info = register(lib2)
        assert isinstance(matmul.batch, Broadcasting) and matmul.batch is not batch
        assert info.rules == [("MatMul", "batch")]
    finally:
        registry.set_rule(matmul, "batch", batch, "tapeflow", override=True)
        matmul.rule_sources.pop("batch", None)


def test_a_library_rule_replaces_a_builtins_derived_rule_without_override():
    """Tanh's JVP and batching rule follow from its declaration (elementwise): they are
    no one's, so a plugin's explicit rule replaces them without ``override=True``."""
    tanh = get_op("Tanh")
    jvp = tanh.jvp
    assert tanh.rule_sources == {"jvp": "derived", "batch": "derived"}
    lib = Library("rules_derived")
    lib.jvp("Tanh", _jvp_rule)
    try:
        info = register(lib)
        assert tanh.jvp is _jvp_rule and info.rules == [("Tanh", "jvp")]
        assert tanh.rule_sources["jvp"] == "<in-process rules_derived>"
    finally:
        registry.set_rule(tanh, "jvp", jvp, override=True)
        tanh.rule_sources["jvp"] = registry.DERIVED


def test_a_plugin_failing_halfway_rolls_back_every_rule_it_set():
    lib, double = _double_library("rules_rollback")
    register(lib)
    g = double.op.grad
    add = get_op("Add")
    add_jvp, add_infer = add.jvp, add.infer
    bad = Library("rules_rollback2")
    bad.jvp(double, _jvp_rule)                        # accepted ...
    bad.infer("Add", lambda shapes, dtypes, attrs: [(shapes[0], dtypes[0])],
              override=True)                          # ... accepted ...
    bad.gradient(double, lambda ctx, dy: dy)          # ... conflicts: the plugin fails
    with pytest.raises(PluginConflictError, match="rules_rollback::double already has a "
                                                  "gradient"):
        register(bad)
    assert double.op.jvp is None and double.op.grad is g
    assert "jvp" not in double.op.rule_sources
    assert add.jvp is add_jvp and add.infer is add_infer and "infer" not in add.rule_sources
    info = {p.name: p for p in tf.plugins.plugin_report()}["rules_rollback2"]
    assert info.status == "failed" and info.rules == []


def test_non_differentiable_goes_through_the_same_path_and_rolls_back():
    lib, double = _double_library("rules_nodiff")
    register(lib)
    bad = Library("rules_nodiff2")
    bad.non_differentiable(double)
    bad.jvp("Add", _jvp_rule)                         # conflicts with Add's Linear()
    with pytest.raises(PluginConflictError):
        register(bad)
    assert double.op.differentiable and double.op.grad is not None


# --- the built-in ops ---------------------------------------------------------------------

#: before the rules moved next to their ops (``python -c "from tapeflow.runtime.registry
#: import OPS; import tapeflow; print(sum(o.jvp is not None for o in OPS.values()),
#: sum(o.batch is not None for o in OPS.values()))"`` gave 108 157: 166 built-in ops and the
#: gelu plugin's two, without rules): the
#: differentiable built-in ops without a JVP rule (their tangents come from the gradient)
_DIFFERENTIABLE_WITHOUT_JVP = {
    "AdjustContrastv2", "Cumprod", "Qr", "SigmoidCrossEntropyWithLogits",
    "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits",
    "SparseTensorDenseMatMul", "Svd"}
#: ...and the built-in ops without a batching rule: NO_RULE's and these, without inputs
_NO_INPUTS_WITHOUT_BATCH = {"Eye", "Fill", "LinSpace", "Range"}


def test_every_builtin_op_keeps_its_rules():
    ops = [op for op in LIB.ops if registry.OPS.get(op.name) is op]
    # (issue 34 added _FusedConv2D, with a JVP and a batching rule, and the eight fused
    # optimizer updates, Apply*, with a batching rule each)
    # (issue 45 added 14: FusedLSTM/FusedGRU and their gradients, Conv3D and depthwise
    # convolution with their backprop ops, LayerNorm and its gradient, DotProductAttention;
    # 13 with a JVP rule, all with a batching rule but Conv3D's three)
    # (issue 46 added the 4 string ops of tf.strings: non-differentiable, broadcasting)
    # (issue 47 added Bitcast and tf.image's AdjustContrastv2 (no gradient, as in TF),
    # each with a batching rule)
    # (issue 47 added 17 string ops (tf.strings, tf.io.decode_raw): non-differentiable; 11
    # with a batching rule, the 6 with ragged or whole-tensor outputs in batching.NO_RULE)
    # (issue 47 added SparseTensorDenseMatMul (tf.sparse.sparse_dense_matmul): a gradient
    # and a batching rule, its JVP from the gradient)
    # (issue 47 added the 5 stateless Philox ops, StatelessRandom*V2: non-differentiable,
    # each with a batching rule)
    assert len(ops) == 218         # the built-ins (OPS also holds the plugins' ops)
    assert sum(op.jvp is not None for op in ops) == 122
    assert sum(op.batch is not None for op in ops) == 202
    assert {op.name for op in ops if op.jvp is None and op.differentiable} \
        == _DIFFERENTIABLE_WITHOUT_JVP
    assert {op.name for op in ops if op.batch is None} == set(batching.NO_RULE) | _NO_INPUTS_WITHOUT_BATCH
    for op in ops:
        if op.elementwise and op.differentiable:
            assert op.jvp is not None, op.name       # derived by OpDef when not written
        if op.elementwise or op.broadcast:
            assert op.batch is not None, op.name
        for rule, derived in ((op.jvp, "jvp"), (op.batch, "batch")):
            if op.rule_sources.get(derived) == registry.DERIVED:
                assert rule is registry.BROADCASTING or rule.__name__ == f"{op.name}_jvp"


def test_the_elementwise_jvp_is_derived_when_the_op_is_defined():
    """OpDef derives it (no loop over the library that depends on import order), reads
    the gradient when it runs, and leaves an explicit rule alone; a subprocess keeps
    the test op out of this process's library."""
    code = textwrap.dedent("""
        import numpy as np
        import tapeflow as tf
        from tapeflow.ops.library import BROADCASTING, defop
        from tapeflow.plugins import Linear

        cube = defop("TestOnlyCube", inputs=("x",), elementwise=True,
                     grad=lambda ctx, dy: dy * 3.0 * ctx.inputs[0] * ctx.inputs[0])
        assert cube.jvp is not None and cube.batch is BROADCASTING
        lin = defop("TestOnlyLin", inputs=("x",), elementwise=True, grad=lambda ctx, dy: dy,
                    jvp=Linear())
        assert isinstance(lin.jvp, Linear)
        nodiff = defop("TestOnlyFloor", inputs=("x",), elementwise=True, differentiable=False)
        assert nodiff.jvp is None
        tf.plugins.register(type("K", (), {"tapeflow_register_kernels": tf.plugins.hookimpl(
            lambda self, registry: registry.add_kernel("TestOnlyCube", "cpu", lambda x: x ** 3))})())
        x = tf.constant([1.0, 2.0], device="cpu:0")
        with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0], device="cpu:0")) as acc:
            y = cube(x)
        assert acc.jvp(y).numpy().tolist() == [3.0, 12.0], acc.jvp(y)
        cube.def_grad(lambda ctx, dy: dy * 0.0, override=True)
        with tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 1.0], device="cpu:0")) as acc:
            y = cube(x)
        assert acc.jvp(y).numpy().tolist() == [0.0, 0.0], acc.jvp(y)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_the_builtin_rules_are_the_op_modules_not_a_table_by_name():
    """Every built-in rule that is a function is defined in an op module (its block),
    or derived by OpDef from the declaration, and ops/batching.py holds no rule."""
    mods = {f"tapeflow.ops.{m}" for m in (
        "math", "reductions", "array_creation", "array_shape", "array_values", "array_gather",
        "array_slice", "array_sort", "linalg", "nn", "random", "fused", "library", "sparse",
        "strings", "image")}
    for op in LIB.ops:
        for rule in (op.jvp, op.batch):
            if (op.rule_sources.get("jvp" if rule is op.jvp else "batch") == "derived"
                    or getattr(rule, "__qualname__", "").startswith("elementwise_jvp.")):
                continue                  # (derived, or made by the shared elementwise_jvp)
            if callable(rule) and not isinstance(rule, (Linear, Multilinear, Broadcasting)):
                assert rule.__module__ in mods, (op.name, rule)
    # (ops/batching.py may hold the helpers rules share, never a rule)
    assert not [op.name for op in LIB.ops for rule in (op.jvp, op.batch)
                if getattr(rule, "__module__", None) == batching.__name__]


def test_an_old_api_op_still_takes_def_grad_and_grad():
    op = OpDef("rules_t::old", grad=lambda ctx, dy: dy)
    assert op.grad is not None and op.differentiable
    op2 = OpDef("rules_t::old2")

    @op2.def_grad
    def _g(ctx, dy):
        return dy

    assert op2.grad is _g
