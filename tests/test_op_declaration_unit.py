"""One declaration unit (issue 44): an op's declaration says what follows from it, for the
core and plugins alike -- ``OpDef`` derives the batching rule ``Broadcasting()`` of an op
declared ``elementwise=True`` or ``broadcast=True``, and the diagonal JVP of an
elementwise differentiable op from its gradient rule (read when it runs) -- and each rule
is attached one way, ``op.def_grad/def_jvp/def_batch/def_infer`` (``Library.gradient/
jvp/batch/infer`` are the same, recorded for the plugin). A derived rule is no one's: an
explicit one replaces it without ``override=True``. The Registry's other spellings
(``add_op`` in a hook, ``set_gradient/set_jvp/set_batch/set_infer/set_rule``) still work
in 0.3 and warn (removed in 0.4, docs/plugins.md section 5); a Library never warns."""

from __future__ import annotations

import importlib
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.autodiff.forward import FALLBACK_OPS as JVP_FALLBACKS
from tapeflow.errors import NotDifferentiableError, PluginConflictError
from tapeflow.plugins import (Broadcasting, Library, Linear, OpDef, get_op, hookimpl,
                              register)
from tapeflow.runtime import registry
from tapeflow.testing import skeleton
from tapeflow.tracing.vectorize import recording_fallbacks

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


@pytest.fixture(autouse=True)
def _on_cpu():
    with tf.device("cpu:0"):
        yield


def _softsign_library(ns, elementwise=True, grad=True, calls=None):
    """A Library with one op, ``softsign(x) = x / (1 + |x|)``: a CPU kernel (recording
    the shapes it is called with in ``calls``) and, with ``grad``, a gradient."""
    lib = Library(ns)

    @lib.op(elementwise=elementwise)
    def softsign(x, name=None):
        """x / (1 + |x|)"""

    @lib.kernel(softsign, "cpu", dtypes=("float32", "float64"))
    def _kernel(x):
        if calls is not None:
            calls.append(x.shape)
        return x / (1 + np.abs(x))

    if grad:
        lib.gradient(softsign)(_softsign_grad)
    return lib, softsign


def _softsign_grad(ctx, dy):
    d = 1.0 + tf.abs(ctx.inputs[0])
    return dy / (d * d)


def _derived(op):
    """The op's rules that follow from its declaration."""
    return {rule for rule, src in op.rule_sources.items() if src == registry.DERIVED}


def _jvp(f, x, t):
    with tf.autodiff.ForwardAccumulator(x, t) as acc:
        y = f(x)
    return acc.jvp(y).numpy()


X = np.linspace(-2.0, 2.0, 15).reshape(5, 3) + 0.05           # (not 0: |x| has a kink)
T = np.cos(3 * X)


# --- what a plugin op declared elementwise gets ------------------------------------------

def test_an_elementwise_plugin_op_gets_the_rules_a_builtin_gets():
    calls = []
    lib, softsign = _softsign_library("unit_ew", calls=calls)
    twin_lib, twin = _softsign_library("unit_ew_twin", elementwise=False)  # no rules
    register(lib)
    register(twin_lib)
    op, sin = softsign.op, get_op("Sin")
    # exactly the built-ins' rules: the one shared Broadcasting, a derived diagonal JVP
    assert op.batch is registry.BROADCASTING is sin.batch is get_op("Add").batch
    assert _derived(op) == _derived(sin) == {"jvp", "batch"}
    assert op.jvp.__name__ == "unit_ew::softsign_jvp" and sin.jvp.__name__ == "Sin_jvp"
    assert (twin.op.jvp, twin.op.batch, _derived(twin.op)) == (None, None, set())

    # forward mode: the derived JVP equals the double-VJP of the twin and the numbers
    x, t = tf.constant(X), tf.constant(T)
    got = _jvp(softsign, x, t)
    assert "unit_ew::softsign" not in JVP_FALLBACKS
    double_vjp = _jvp(twin, x, t)
    assert "unit_ew_twin::softsign" in JVP_FALLBACKS
    eps = 1e-6
    numeric = ((X + eps * T) / (1 + np.abs(X + eps * T))
               - (X - eps * T) / (1 + np.abs(X - eps * T))) / (2 * eps)
    np.testing.assert_allclose(got, double_vjp, rtol=1e-12)
    np.testing.assert_allclose(got, numeric, rtol=1e-7)

    # vectorized_map: one kernel call on the whole batch, no per-example loop or warning
    calls.clear()
    with warnings.catch_warnings(record=True) as w, recording_fallbacks() as loops:
        warnings.simplefilter("always")
        out = tf.vectorized_map(lambda e: softsign(e) * 2.0, x)
    assert not loops and not [m for m in w if "Vectorization" in type(m.message).__name__]
    assert calls.count((5, 3)) == 1 and len(calls) <= 2, calls     # (+ the trace's example)
    np.testing.assert_allclose(out.numpy(), 2 * X / (1 + np.abs(X)), rtol=1e-12)
    with pytest.warns(UserWarning, match="has no batching rule"):
        tf.vectorized_map(twin, tf.constant(X + 1.0))                  # the twin loops


def test_the_jvp_reads_the_gradient_when_it_runs():
    """Declared elementwise before it has a gradient: forward mode fails as for any op
    without one; a gradient attached later (after registration, or replaced with
    override=True) gives the JVP at once."""
    lib, softsign = _softsign_library("unit_late", grad=False)
    register(lib)
    assert softsign.op.rule_sources["jvp"] == "derived"
    x, t = tf.constant(X), tf.constant(T)
    with pytest.raises(NotDifferentiableError, match=r"unit_late::softsign.*no gradient"):
        _jvp(softsign, x, t)
    lib.gradient(softsign, _softsign_grad)
    np.testing.assert_allclose(_jvp(softsign, x, t), T / (1 + np.abs(X)) ** 2, rtol=1e-12)
    lib.gradient(softsign, lambda ctx, dy: dy * 3.0, override=True)
    np.testing.assert_allclose(_jvp(softsign, x, t), 3.0 * T, rtol=1e-12)
    assert softsign.op.rule_sources["jvp"] == "derived"


def test_library_op_and_define_pass_the_declaration_through():
    lib = Library("unit_decl")
    ew = lib.define("ew", inputs=("x",), elementwise=True, grad=_softsign_grad)
    bc = lib.define("bc", inputs=("a", "b"), broadcast=True)
    lin = lib.define("lin", inputs=("x",), elementwise=True, jvp=Linear())
    nodiff = lib.define("nodiff", inputs=("x",), elementwise=True, differentiable=False)

    @lib.op(elementwise=True)
    def fn_op(x, name=None):
        """declared from a signature"""

    assert ew.elementwise and ew.rule_sources == {"jvp": "derived", "batch": "derived"}
    assert bc.batch is registry.BROADCASTING and bc.jvp is None
    assert bc.rule_sources == {"batch": "derived"}
    assert isinstance(lin.jvp, Linear) and lin.rule_sources == {"batch": "derived"}
    assert nodiff.jvp is None and nodiff.batch is registry.BROADCASTING
    assert fn_op.op.elementwise and fn_op.op.rule_sources["jvp"] == "derived"


# --- an explicit rule replaces a derived one; explicit ones conflict ---------------------

def _my_jvp(ctx, t):
    return t * 5.0


def _my_batch(ctx, x):
    return tf.multiply(x, 7.0)


def test_an_explicit_rule_replaces_a_derived_one_without_override():
    lib, softsign = _softsign_library("unit_replace")
    lib.jvp(softsign, _my_jvp)                       # before registration ...
    register(lib)
    assert softsign.op.jvp is _my_jvp
    assert softsign.op.rule_sources["jvp"] == "<in-process unit_replace>"
    lib.batch(softsign, _my_batch)                   # ... and after: no override needed
    assert softsign.op.batch is _my_batch
    np.testing.assert_allclose(_jvp(softsign, tf.constant(X), tf.constant(T)), 5.0 * T)
    # an explicit rule still conflicts, naming both sources
    other = Library("unit_replace2")
    other.jvp(softsign, lambda ctx, t: t)
    with pytest.raises(PluginConflictError, match=r"unit_replace::softsign already has a "
                                                  r"JVP rule \(from '<in-process unit_"
                                                  r"replace>': _my_jvp\)"):
        register(other)
    assert softsign.op.jvp is _my_jvp

    op = OpDef("unit_t::ew", elementwise=True, grad=_softsign_grad)   # op.def_*: the same
    assert op.def_batch(_my_batch) is _my_batch and op.rule_sources["batch"] == "tapeflow"
    with pytest.raises(PluginConflictError):
        op.def_batch(Broadcasting())
    op.def_jvp(Linear())
    assert isinstance(op.jvp, Linear)


# --- the guide's plugin and the generated template ------------------------------------------

def _guide_block(path):
    blocks = [b for b in re.findall(r"```python[^\n]*\n(.*?)```", DOC.read_text(), re.S)
              if b.startswith(f"# {path}\n")]
    assert len(blocks) == 1, path
    return blocks[0]


def _check_elementwise_plugin_op(f, derivative, x):
    op = f.op
    assert op.elementwise and _derived(op) == {"jvp", "batch"}
    xt = tf.constant(x)
    np.testing.assert_allclose(_jvp(f, xt, tf.constant(T)), derivative(x) * T, rtol=1e-10)
    assert op.name not in JVP_FALLBACKS
    with recording_fallbacks() as loops:
        tf.vectorized_map(f, xt)
    assert not loops


def test_a_plugin_written_as_the_guide_teaches():
    """docs/plugins.md's tutorial op (run in-process here, under another namespace; the
    installed tutorial runs in tests/test_plugin_docs.py): elementwise=True, a kernel, a
    gradient and an inference, no hand-written JVP or batching rule."""
    src = _guide_block("myproj/tapeflow_myproj/ops.py")
    assert "@lib.op(elementwise=True)" in src
    assert not re.search(r"lib\.(jvp|batch)\(|Broadcasting", src)
    ns: dict = {"__name__": "guide_unit_ops"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exec(compile(src.replace('Library("myproj")', 'Library("guide_unit")'), "ops.py",
                     "exec"), ns)
        register(ns["lib"])
    mish = ns["mish"]
    assert mish.op.name == "guide_unit::mish"

    def d_mish(x):
        t, s = np.tanh(np.logaddexp(0, x)), 1 / (1 + np.exp(-x))
        return t + x * (1 - t * t) * s
    _check_elementwise_plugin_op(mish, d_mish, X)


def test_the_generated_template_plugin(tmp_path, monkeypatch):
    """``python -m tapeflow new-plugin``'s op, imported from the files it writes (as
    tests/test_new_plugin.py's installed copy is, without pip): ``elementwise=True``, a
    kernel and a gradient; forward mode and vectorized_map follow."""
    name = "unit_tmpl"
    skeleton.write(name, tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / name))
    ops = importlib.import_module(f"tapeflow_{name}.ops")
    assert not re.search(r"lib\.(jvp|batch)\(", pathlib.Path(ops.__file__).read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        register(ops.lib)
    _check_elementwise_plugin_op(ops.cube, lambda x: 3 * x * x, X)


def test_the_builtins_keep_their_derived_rules():
    from tapeflow.ops import library
    assert library.BROADCASTING is registry.BROADCASTING
    assert library.elementwise_jvp is registry.elementwise_jvp
    sin, add, matmul = get_op("Sin"), get_op("Add"), get_op("MatMul")
    assert _derived(sin) == {"jvp", "batch"} and sin.jvp.__name__ == "Sin_jvp"
    assert add.batch is registry.BROADCASTING and _derived(add) == {"batch"}
    assert isinstance(add.jvp, Linear)                                  # written: explicit
    assert "jvp" not in matmul.rule_sources and "batch" not in matmul.rule_sources
    x = tf.constant([0.5, 1.0])
    np.testing.assert_allclose(_jvp(tf.sin, x, tf.ones_like(x)), np.cos([0.5, 1.0]), rtol=1e-6)
    assert "Sin" not in JVP_FALLBACKS


# --- the deprecated spellings: one warning each, naming the replacement; they still work --

class _HookPlugin:
    """A hook-form plugin calling one Registry method from ``tapeflow_register_kernels``."""

    def __init__(self, call):
        self.call = call

    @hookimpl
    def tapeflow_register_kernels(self, registry):
        self.call(registry)


def _deprecations(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    return [m for m in w if issubclass(m.category, DeprecationWarning)]


@pytest.mark.parametrize("method,rule,new", [
    ("set_gradient", "grad", "op.def_grad(fn) (in a Library: lib.gradient(op, fn))"),
    ("set_jvp", "jvp", "op.def_jvp(fn) (in a Library: lib.jvp(op, fn))"),
    ("set_batch", "batch", "op.def_batch(fn) (in a Library: lib.batch(op, fn))"),
    ("set_infer", "infer", "op.def_infer(fn) (in a Library: lib.infer(op, fn))"),
    ("set_rule", "jvp", "op.def_jvp(fn) (in a Library: lib.jvp(op, fn))"),
])
def test_each_deprecated_rule_spelling_warns_once_and_works(method, rule, new):
    ns = f"unit_dep_{method}"
    lib, f = _softsign_library(ns, elementwise=False, grad=False)
    register(lib)

    def rule_fn(*args):
        return args[1] if rule != "infer" else [(args[0][0], args[1][0])]

    def call(reg):
        args = (f.op, rule, rule_fn) if method == "set_rule" else (f.op, rule_fn)
        getattr(reg, method)(*args)

    found = _deprecations(lambda: register(_HookPlugin(call), name=f"{ns}_hooks"))
    assert len(found) == 1, [str(m.message) for m in found]
    msg = str(found[0].message)
    assert f"registry.{method}() is deprecated and removed in tapeflow 0.4" in msg
    assert new in msg and "docs/plugins.md, section 5" in msg
    assert found[0].filename == __file__                  # where the plugin calls it
    assert getattr(f.op, rule) is rule_fn                 # ... and it still works
    assert f.op.rule_sources[rule] == f"<in-process {ns}_hooks>"


def test_a_deprecated_rule_spelling_names_the_op_and_override():
    lib, f = _softsign_library("unit_dep_named")
    register(lib)

    def call(reg):
        reg.set_gradient("unit_dep_named::softsign", _softsign_grad, override=True)
    found = _deprecations(lambda: register(_HookPlugin(call), name="unit_dep_named_hooks"))
    assert len(found) == 1
    assert ("get_op('unit_dep_named::softsign').def_grad(fn, override=True)"
            in str(found[0].message))


def test_add_op_in_a_hook_warns_once_and_works():
    class Ops:
        @hookimpl
        def tapeflow_register_ops(self, registry):
            registry.add_op(OpDef("unit_dep::cube", grad=lambda ctx, dy: dy * 3.0))

        @hookimpl
        def tapeflow_register_kernels(self, registry):
            registry.add_kernel("unit_dep::cube", "cpu", lambda x: x ** 3)

    found = _deprecations(lambda: register(Ops(), name="unit_dep_ops"))
    assert len(found) == 1, [str(m.message) for m in found]
    msg = str(found[0].message)
    assert "registry.add_op(OpDef(...)) in a hook is deprecated and removed in tapeflow 0.4" \
        in msg and "tapeflow.plugins.Library" in msg and "lib.define(name, ...)" in msg
    assert found[0].filename == __file__
    assert get_op("unit_dep::cube")(tf.constant([2.0])).numpy().tolist() == [8.0]


def test_a_library_and_the_core_never_warn():
    """A Library replays through the Registry's internal path: declaring ops and every
    rule, before and after registration, warns nothing; nor does ``import tapeflow``."""
    def declare():
        lib, f = _softsign_library("unit_quiet")
        lib.jvp(f, _my_jvp)
        lib.batch(f, _my_batch)
        lib.infer(f, lambda shapes, dtypes, attrs: [(shapes[0], dtypes[0])])
        register(lib)
        lib.non_differentiable(lib.define("nd", inputs=("x",)))
        lib.gradient(f, _softsign_grad, override=True)
    assert _deprecations(declare) == []
    r = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                        "import tapeflow, tapeflow.plugins as p; p.ensure_loaded()"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "tapeflow 0.4" not in r.stderr, r.stderr
