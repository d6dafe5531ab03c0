"""Bad input through every public op, property-based (issue 13): whatever the bad
argument -- a string, None, a complex number, a ragged list, a huge or negative size,
a float or a duplicate where an axis goes, a Variable as input -- the call either
returns or raises a tapeflow.errors class; it never raises a bare NumPy/Python
exception, never accepts a value it cannot represent, and never changes a Variable.

Seeded (``derandomize=True``) and bounded: the same examples run on every machine.
The generator and the outcome rules are ``tapeflow.testing.fuzz``'s, shared with
``scripts/fuzz.py`` (the large runs) and the conformance suite's bad-input section.
"""

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tapeflow.testing import fuzz

TARGETS = fuzz.targets()


def _check(call, device="cpu:0"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fuzz.run_call(call, device)
    assert out.kind not in fuzz.BUGS, f"{call.describe()}: {out.kind}: {out.detail}"


@settings(derandomize=True, max_examples=1500, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, len(TARGETS) - 1), st.integers(0, 2 ** 32 - 1))
def test_any_bad_call_raises_a_tapeflow_error_or_returns(index, seed):
    _check(fuzz.call_for(index, seed, tgts=TARGETS))


@pytest.mark.parametrize("seed", range(4))
def test_every_public_op_with_bad_input(seed):
    # every target at least four times, whatever hypothesis drew
    for call in fuzz.generate(seed=100 + seed, n=len(TARGETS)):
        _check(call)


def test_the_fuzzer_sees_every_op_and_public_function():
    import tapeflow as tf

    names = {t[0] for t in TARGETS}
    assert {"op:MatMul", "op:Fill", "op:Sum", "op:RandomUniformInt"} <= names
    fns = {id(t[1]) for t in TARGETS}
    for fn in (tf.reduce_sum, tf.nn.dropout, tf.linalg.inv, tf.random.uniform, tf.einsum,
               tf.tensordot, tf.nn.bias_add, tf.nn.conv2d, tf.gather, tf.split, tf.constant):
        assert id(fn) in fns, fn.__name__
    assert len(TARGETS) > 200
    for fn in (tf.saved_model.load, tf.keras.models.load_model, tf.train.load_checkpoint,
               tf.train.list_variables):                 # the loaders of saved files
        assert id(fn) in fns, fn.__name__


def test_the_fuzzer_classifies_what_it_sees():
    # the instrument itself: a bare exception, a silent coercion and a changed
    # Variable are each reported (not only the happy outcome)
    import numpy as np

    import tapeflow as tf

    rep = fuzz.Report()
    call = fuzz.Call("tf.reduce_sum", [("T", np.ones((2, 2), np.float32))], {"axis": [0, 0]},
                     bad="axis", poison=True, bad_value="[0, 0]")
    assert fuzz.run_call(call).kind == "error"           # fixed: duplicate axes refused
    ok = fuzz.Call("tf.reduce_sum", [("T", np.ones((2, 2), np.float32))], {"axis": 0},
                   bad="axis", poison=True, bad_value="0")
    assert fuzz.run_call(ok).kind == "coercion"          # a returned "poison" call
    rep.add("foreign", "t", "TypeError: x", "e.g.")
    assert rep.top(1)[0][:3] == (1, "foreign", "t")
    assert tf.errors.TapeflowError  # the family exists


def test_complex_results_compare_within_a_tolerance_across_devices():
    """Complex results agree across devices within the float tolerance, not bit for bit:
    CUDA's complex tanh/asin/acosh and cuFFT differ from NumPy by an ulp (the H100 run's
    8 'disagreements' with both devices returning)."""
    import numpy as np
    a = np.array([1 + 2j, 0.5 - 1j], np.complex64)
    b = a * np.complex64(1 + 1e-7)
    assert not np.array_equal(a, b)
    assert fuzz._same(a, b)
    assert fuzz._same(np.array([complex("nan+1j")]), np.array([complex("nan+1j")]))
    assert not fuzz._same(a, a * np.complex64(1.01))
    assert not fuzz._same(a, a.astype(np.complex128))


def test_the_generators_of_issue_30_are_drawn():
    # broadcast views, missing inputs, ragged lists, None inside lists, complex scalars,
    # rank > 64 and comparisons of the value types: each found bugs once
    import numpy as np

    calls = fuzz.generate(seed=0, n=4000)
    values = [v for c in calls for v in list(c.args) + list(c.kwargs.values())]
    assert any(isinstance(v, np.ndarray) and v.ndim and 0 in v.strides and v.size > 1 << 32
               for v in values)
    assert any(c.bad == "inputs" and c.poison for c in calls)
    assert any(v == [[1, 2], [3]] for v in values if isinstance(v, list))
    assert any(isinstance(v, list) and None in v and len(v) > 1 for v in values)
    assert any(c.complex_in for c in calls)
    assert any(isinstance(v, (list, tuple)) and len(v) > 64 for v in values)
    assert {c.target for c in calls if c.target.startswith("cmp:")} == {
        f"cmp:{t}" for t in fuzz.VALUE_TYPES}


def test_unnamed_errors_are_bugs():
    import tapeflow as tf

    err = tf.errors.InvalidArgumentError("bad value")
    assert not fuzz.is_named(err, "tf.reduce_sum") and not fuzz.is_named(err, "op:Sum")
    assert fuzz.is_named(tf.errors.InvalidArgumentError("bad", op="Sum"), "tf.reduce_sum")
    assert fuzz.is_named(tf.errors.InvalidArgumentError("reduce_sum: bad"), "tf.reduce_sum")
    assert not fuzz.is_named(tf.errors.InvalidArgumentError("reduce_summary"), "tf.reduce_sum")
    assert fuzz.is_named(tf.errors.InvalidArgumentError("in Shift"), "op:attrold::Shift")
    assert "unnamed" in fuzz.BUGS
    # a raised error is named from its traceback: the public function it came out of
    call = fuzz.Call("tf.zeros", [2], {"dtype": "not a dtype"}, bad="dtype", poison=True)
    out = fuzz.run_call(call)
    assert out.kind == "error", out.detail


def test_complex_values_dropped_to_reals_are_coercions():
    import numpy as np

    # a real float result from an input with an imaginary part, where the target does
    # not map complex numbers to reals (fill(dims, 1+2j) giving float32 did)
    call = fuzz.Call("tf.identity", [("T", np.ones(2, np.float32))], {}, bad="input",
                     complex_in=True)
    assert fuzz.run_call(call).kind == "coercion"
    call.target = "tf.math.real"        # (exempt: real, abs, angle, cast ...)
    assert fuzz.COMPLEX_TO_REAL.search("real")
    assert fuzz.run_call(fuzz.Call("tf.abs", [1 + 2j], {}, bad="x", complex_in=True)).kind == "ok"


def test_value_type_comparisons_are_checked():
    class BadNe:
        def __eq__(self, other):
            return False

        def __ne__(self, other):
            return False

    for kind in fuzz.VALUE_TYPES:
        for other in ["a,b", "cpu:²", None, fuzz.RaisingEq(), [fuzz.RaisingEq(), 2]]:
            out = fuzz.run_call(fuzz.Call(f"cmp:{kind}", [other], {"index": 3}))
            assert out.kind == "ok", (kind, other, out.detail)
    assert fuzz._compare(BadNe(), 1) == "__eq__ and __ne__ both returned False"


def test_the_script_is_a_ci_gate(tmp_path, capsys):
    # one line of table, and the exit status says whether a bug was found
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "scripts" / "fuzz.py"
    spec = importlib.util.spec_from_file_location("fuzz_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "r.json"
    rc = script.main(["--calls", "60", "--seed", "3", "--out", str(out), "--top", "0"])
    text = capsys.readouterr().out
    head, row = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert "plain exceptions" in head and "MemoryError" in head and "unnamed errors" in head
    cells = [int(c) for c in row.strip("|").split("|")]
    assert cells[0] == 60
    assert rc == (1 if sum(cells[1:]) else 0)
    assert out.exists()
