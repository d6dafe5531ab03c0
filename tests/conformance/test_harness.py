"""The harness must be able to fail: each check is run on an op with a planted bug
and must raise, and on the same op without the bug must pass.

The ops live in an in-process plugin (``tapeflow.plugins.register``), namespaced
``testing::``, registered for this module only and removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import OpDef, hookimpl
from tapeflow.testing import ErrorSample, OpSpec, Sample, check_grads, conformance, opcheck

# --- the planted bugs ---------------------------------------------------------------------


def _square_grad(ctx, dy):                 # right: d(x^2) = 2x dy
    return dy * ctx.inputs[0] * 2.0


def _square_grad_wrong(ctx, dy):           # wrong factor
    return dy * ctx.inputs[0] * 3.0


def _square_grad_frozen(ctx, dy):          # right values, but the input is frozen into a
    x = tf.constant(ctx.inputs[0].numpy())  # constant: order 1 passes, order 2 must fail
    return dy * x * 2.0


GOOD = OpDef("testing::good_square", inputs=("x",), grad=_square_grad)
BAD_GRAD = OpDef("testing::bad", inputs=("x",), grad=_square_grad_wrong)
BAD_GRAD2 = OpDef("testing::bad_second_order", inputs=("x",), grad=_square_grad_frozen)
BAD_KERNEL = OpDef("testing::bad_kernel", inputs=("x",), grad=_square_grad)
BAD_STRIDES = OpDef("testing::bad_strides", inputs=("x",), grad=_square_grad)
BAD_DTYPE = OpDef("testing::bad_dtype", inputs=("x",), grad=_square_grad)
BAD_SHAPE = OpDef("testing::bad_shape", inputs=("x",), grad=_square_grad)
BAD_CACHE = OpDef("testing::bad_cache", inputs=("x",), grad=_square_grad)
BAD_SHARED_OUT = OpDef("testing::bad_shared_out", inputs=("x",), grad=_square_grad)
BAD_INPLACE = OpDef("testing::bad_inplace", inputs=("x",), grad=_square_grad)
OPS = (GOOD, BAD_GRAD, BAD_GRAD2, BAD_KERNEL, BAD_STRIDES, BAD_DTYPE, BAD_SHAPE, BAD_CACHE,
       BAD_SHARED_OUT, BAD_INPLACE)


def _k_square(x):
    return x * x


def _k_square_wrong(x):
    out = x * x
    if out.size:
        out.reshape(-1)[-1] += 1           # one wrong element
    return out


def _k_square_memory_order(x):
    # Reads the elements in memory order: right only when that is index order.
    flat = np.ravel(x, order="K")
    return (flat * flat).reshape(x.shape)


def _k_square_float64(x):
    return (x * x).astype(np.float64)


def _k_square_keepdims(x):
    return (x * x)[None]


_CACHE = {}


def _k_square_cached(x):
    # Caches its result by shape and dtype: right for the first values of each shape, stale
    # for any later ones (the forward samples all differ in shape, so forward passes).
    key = (x.shape, x.dtype)
    if key not in _CACHE:
        _CACHE[key] = x * x
    return _CACHE[key]


_BUFFERS = {}


def _k_square_shared_out(x):
    # Writes every result into one buffer per shape and returns it: each result is right
    # when returned, and overwritten by the next call of that shape.
    out = _BUFFERS.setdefault((x.shape, x.dtype), np.empty(x.shape, x.dtype))
    np.multiply(x, x, out=out)
    return out


def _k_square_inplace(x):
    # Squares its input in place (the result is right, the caller's tensor is not).
    np.multiply(x, x, out=x)
    return x


class _HarnessPlugin:
    @hookimpl
    def tapeflow_register_ops(self, registry):
        for op in OPS:
            registry.add_op(op)

    @hookimpl
    def tapeflow_register_kernels(self, registry):
        for op, fn in ((GOOD, _k_square), (BAD_GRAD, _k_square), (BAD_GRAD2, _k_square),
                       (BAD_KERNEL, _k_square_wrong), (BAD_STRIDES, _k_square_memory_order),
                       (BAD_DTYPE, _k_square_float64), (BAD_SHAPE, _k_square_keepdims),
                       (BAD_CACHE, _k_square_cached), (BAD_SHARED_OUT, _k_square_shared_out),
                       (BAD_INPLACE, _k_square_inplace)):
            registry.add_kernel(op, "cpu", fn, dtypes=("float16", "float32", "float64"))
        try:   # the correct op on every device: a real OpenCL kernel where that backend is
            from tapeflow_opencl import runtime as rt
        except ImportError:
            return
        registry.add_kernel(GOOD, "opencl", lambda x: rt.elementwise("x0 * x0", x.dtype, x),
                            dtypes=("float32", "float64"))


@pytest.fixture(scope="module", autouse=True)
def harness_plugin():
    from tapeflow.plugins import manager as pm
    from tapeflow.runtime.registry import OPS as REGISTRY
    obj = _HarnessPlugin()
    info = tf.plugins.register(obj, name="testing-harness")
    assert info.status == "loaded", info.reason
    yield obj
    for op in OPS:
        REGISTRY.pop(op.name, None)
    pm._manager.pm.unregister(obj)
    pm._manager.plugins.pop("testing-harness", None)


def _samples(dtype, rng):
    if not dtype.is_floating:
        return []
    return [
        Sample((rng.uniform(-2, 2, (3, 4)).astype(dtype.np),), name="matrix"),
        Sample((rng.uniform(-2, 2, (2, 3, 2)).astype(dtype.np),), name="rank3"),
        Sample((np.asarray(1.5, dtype.np),), name="scalar"),
    ]


def _spec(op, **kw):
    return OpSpec(name=op.name, fn=op, ref=np.square, samples=_samples, op=op.name, **kw)


X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])


# --- check_grads ---------------------------------------------------------------------------

def test_check_grads_passes_on_a_correct_gradient():
    check_grads(GOOD, (X,), order=2)


@pytest.fixture
def on_cpu():
    """The testing:: ops have CPU kernels only: pin cpu:0 whatever the default device
    (TAPEFLOW_DEFAULT_DEVICE, a GPU)."""
    with tf.device("cpu:0"):
        yield


def test_check_grads_catches_a_wrong_gradient(on_cpu):
    with pytest.raises(AssertionError) as ei:
        check_grads(BAD_GRAD, (X,), order=1)
    msg = str(ei.value)
    assert "order-1 gradient of testing::bad w.r.t. argument 0" in msg
    assert "finite differences" in msg and "max abs err" in msg
    # the full comparison shows both gradients: 3x dy vs 2x dy, elementwise ratio 1.5
    assert "d<u, f>/dx from the tape" in msg


def test_check_grads_catches_a_wrong_second_order_gradient(on_cpu):
    check_grads(BAD_GRAD2, (X,), order=1)              # the first order is right
    with pytest.raises(AssertionError, match="order-2 gradient of testing::bad_second_order"):
        check_grads(BAD_GRAD2, (X,), order=2)


def test_check_grads_handles_several_outputs_and_arguments(on_cpu):
    def f(x, y):
        return [tf.multiply(x, y), tf.reduce_sum(x * x, axis=0)]

    check_grads(f, (X, np.array([1.0, -2.0, 0.5])), order=2)

    def f_bad(x, y):
        return [tf.multiply(x, y), BAD_GRAD(tf.reduce_sum(x, axis=0))]

    with pytest.raises(AssertionError, match="argument 0"):
        check_grads(f_bad, (X, np.array([1.0, -2.0, 0.5])), order=1)


def test_check_grads_converts_to_float64_and_ignores_non_float_arguments():
    seen = []

    def f(x, axis):
        seen.append(x.dtype)
        return tf.reduce_sum(x * x, axis=axis)

    check_grads(f, (X.astype(np.float32), 1), order=1)
    assert seen and all(d == tf.float64 for d in seen)


# --- forward, non-contiguous, dtype, shape --------------------------------------------------

def test_forward_passes_on_a_correct_kernel():
    spec = _spec(GOOD)
    for dt in (tf.float16, tf.float32, tf.float64):
        assert conformance.check_forward(spec, "cpu:0", dt) == 3
        assert conformance.check_forward(spec, "cpu:0", dt, noncontiguous=True) == 2
    assert conformance.check_gradients(spec, "cpu:0") == 3


def test_forward_catches_a_wrong_kernel():
    with pytest.raises(AssertionError, match="differs from the NumPy reference") as ei:
        conformance.check_forward(_spec(BAD_KERNEL), "cpu:0", tf.float32)
    msg = str(ei.value)
    assert "testing::bad_kernel [float32] on cpu:0, sample 0 'matrix'" in msg
    assert "mismatched elements: 1 / 12" in msg


def test_noncontiguous_inputs_catch_a_kernel_that_assumes_contiguity():
    spec = _spec(BAD_STRIDES)
    conformance.check_forward(spec, "cpu:0", tf.float32)            # contiguous: right
    with pytest.raises(AssertionError, match=r"non-contiguous inputs"):
        conformance.check_forward(spec, "cpu:0", tf.float32, noncontiguous=True)


def test_noncontiguous_tensor_is_a_noncontiguous_view():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = conformance.noncontiguous_tensor(x, "cpu:0")
    np.testing.assert_array_equal(t.numpy(), x)
    data = t._data
    assert not data.flags.c_contiguous and not data.flags.f_contiguous
    # the path other devices take: strided slicing and tf.transpose
    t = conformance.noncontiguous_tensor(x, "cpu:0", via_ops=True)
    np.testing.assert_array_equal(t.numpy(), x)
    assert t.shape == x.shape and t.dtype == tf.float32 and t.device == "cpu:0"


def test_forward_catches_a_wrong_result_dtype_and_shape():
    with pytest.raises(AssertionError, match="result dtype float64 != reference dtype float32"):
        conformance.check_forward(_spec(BAD_DTYPE), "cpu:0", tf.float32)
    with pytest.raises(AssertionError, match=r"result shape \(1, 3, 4\) != reference shape"):
        conformance.check_forward(_spec(BAD_SHAPE), "cpu:0", tf.float32)


def test_gradient_case_catches_a_wrong_gradient():
    with pytest.raises(AssertionError, match="testing::bad on cpu:0, sample 0 'matrix'"):
        conformance.check_gradients(_spec(BAD_GRAD), "cpu:0")


def test_random_ops_are_validated_by_check():
    spec = OpSpec(name="uniform", fn=lambda shape: tf.random.uniform(shape), ref=None,
                  samples=lambda dt, rng: [Sample(((100,),))] if dt == tf.float32 else [],
                  check=lambda out, shape: out.shape == shape and bool(np.all(out < 1.0)))
    conformance.check_forward(spec, "cpu:0", tf.float32)
    spec.check = lambda out, shape: bool(np.all(out < 0.5))
    with pytest.raises(AssertionError, match="spec.check returned False"):
        conformance.check_forward(spec, "cpu:0", tf.float32)


# --- traced: the op inside tf.function -------------------------------------------------------

def test_traced_passes_on_a_correct_op_on_every_device():
    spec = _spec(GOOD)
    for d in tf.list_devices():
        if _has_kernel(GOOD, d):
            assert conformance.check_traced(spec, d.name, tf.float32) == 3
        else:
            with pytest.raises(conformance.SkipCase, match="no kernel for op"):
                conformance.check_traced(spec, d.name, tf.float32)


def test_traced_catches_a_kernel_whose_later_calls_are_stale():
    _CACHE.clear()
    spec = _spec(BAD_CACHE)
    conformance.check_forward(spec, "cpu:0", tf.float32)      # one call per shape: right
    _CACHE.clear()
    with pytest.raises(AssertionError, match=r"call 3 \(replay, other values of the same "
                                             r"signature\).*differs from the NumPy reference"):
        conformance.check_traced(spec, "cpu:0", tf.float32)


def test_traced_catches_a_replay_that_overwrites_an_earlier_result():
    spec = _spec(BAD_SHARED_OUT)
    conformance.check_forward(spec, "cpu:0", tf.float32)      # each result right when returned
    with pytest.raises(AssertionError, match=r"the result of call 1 \(tracing\) changed after "
                                             r"the later calls"):
        conformance.check_traced(spec, "cpu:0", tf.float32)


def test_traced_catches_a_kernel_that_writes_into_its_input():
    with pytest.raises(AssertionError, match=r"input 0 of call 1 \(tracing\) was modified"):
        conformance.check_traced(_spec(BAD_INPLACE), "cpu:0", tf.float32)


class _Factor:
    """A Python argument equal by value but unhashable: tf.function keys it by identity,
    so equal factors from two draws of the samples are two signatures."""

    __hash__ = None

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, _Factor) and other.v == self.v

    def __repr__(self):
        return f"_Factor({self.v})"


def test_traced_catches_a_call_that_traces_again():
    spec = OpSpec(name="scaled", fn=lambda x, k: x * k.v, ref=lambda x, k: x * k.v,
                  samples=lambda dt, rng: [Sample((rng.uniform(-1, 1, (4,)).astype(dt.np),
                                                   _Factor(2.0)))])
    with pytest.raises(AssertionError, match=r"call 3 .* the Python function ran again"):
        conformance.check_traced(spec, "cpu:0", tf.float32)
    spec.fn = lambda x, k: x * 2.0                            # right values, but
    spec.samples = lambda dt, rng: [Sample((rng.uniform(-1, 1, (4,)).astype(dt.np), 2.0))]
    spec.ref = lambda x, k: x * 3.0                           # a wrong reference
    with pytest.raises(AssertionError, match=r"call 1 \(tracing\).*differs"):
        conformance.check_traced(spec, "cpu:0", tf.float32)


def _host_square(x):
    return tf.constant(np.square(x.numpy()))                  # needs the value: untraceable


def test_traced_untraceable_specs_are_listed_with_the_reason(monkeypatch):
    spec = _spec(GOOD)
    spec.name = "testing::host_square"
    spec.fn = _host_square
    conformance.check_forward(spec, "cpu:0", tf.float32)      # eager: fine
    where = r"\(in test_harness.py:\d+ _host_square\)"
    with pytest.raises(AssertionError, match=rf"(?s)cannot be traced by tf.function {where}.*"
                                             r"UNTRACEABLE"):
        conformance.check_traced(spec, "cpu:0", tf.float32)
    monkeypatch.setitem(conformance.UNTRACEABLE, "testing::host_*", "reads its input on the host")
    with pytest.raises(conformance.SkipCase, match="reads its input on the host; TracingError "
                                                   "for sample 0 'matrix'"):
        conformance.check_traced(spec, "cpu:0", tf.float32)
    spec.fn = GOOD                                            # a stale entry fails
    with pytest.raises(AssertionError, match="listed in conformance.UNTRACEABLE"):
        conformance.check_traced(spec, "cpu:0", tf.float32)


def test_traced_random_ops_are_validated_by_check():
    spec = OpSpec(name="uniform", fn=lambda shape: tf.random.uniform(shape), ref=None,
                  samples=lambda dt, rng: [Sample(((100,),))] if dt == tf.float32 else [],
                  check=lambda out, shape: out.shape == shape and bool(np.all(out < 1.0)))
    conformance.check_traced(spec, "cpu:0", tf.float32)
    draws = []
    spec.check = lambda out, shape: draws.append(out) or True
    conformance.check_traced(spec, "cpu:0", tf.float32)
    assert len(draws) == 3 and not np.array_equal(draws[0], draws[1])   # a fresh draw per call
    spec.check = lambda out, shape: bool(np.all(out < 0.5))
    with pytest.raises(AssertionError, match=r"call 1 \(tracing\): spec.check returned False"):
        conformance.check_traced(spec, "cpu:0", tf.float32)


def test_traced_cases_one_dtype_per_spec_unless_asked(monkeypatch):
    spec = _spec(GOOD)
    cs = conformance.cases([spec], ["cpu:0", ("cuda:0", "no CUDA here")], "traced")
    assert [c.id for c in cs] == ["testing::good_square-float32-cpu:0", "cuda:0"]
    monkeypatch.setenv("TAPEFLOW_TRACED_DTYPES", "all")
    cs = conformance.cases([spec], ["cpu:0"], "traced")
    assert sorted(c.dtype.name for c in cs) == ["float16", "float32", "float64"]
    monkeypatch.setenv("TAPEFLOW_TRACED_DTYPES", "one")
    spec.dtypes = ("float64", "float16")                      # no float32: the first declared
    assert [c.dtype for c in conformance.cases([spec], ["cpu:0"], "traced")] == [tf.float64]
    assert "test_traced" in conformance.KINDS


# --- the error contract ------------------------------------------------------------------------

def _checked_square(x):
    if np.any(np.asarray(x) < 0):
        raise InvalidArgumentError("x must be non-negative")         # no op, no device
    return GOOD(x)


def _checked_square_op(x):
    if np.any(np.asarray(x) < 0):
        raise InvalidArgumentError("x must be non-negative", op="testing::good_square",
                                   device=tf.runtime.devices.get_device("cpu:0"))
    return GOOD(x)


NEG = np.array([-1.0, 2.0], np.float32)


def test_errors_pass_when_the_contract_holds():
    spec = _spec(GOOD, errors=[ErrorSample((NEG,), error=InvalidArgumentError,
                                           match="non-negative")])
    spec.fn = _checked_square_op
    assert conformance.check_errors(spec, "cpu:0") == 1


def test_errors_catch_a_message_without_op_and_device():
    spec = _spec(GOOD, errors=[ErrorSample((NEG,), error=InvalidArgumentError,
                                           match="non-negative")])
    spec.fn = _checked_square
    with pytest.raises(AssertionError, match=r"lacks \['\[Op:', 'cpu:0'\]"):
        conformance.check_errors(spec, "cpu:0")


def test_errors_catch_a_missing_error_and_a_wrong_type_or_message():
    spec = _spec(GOOD, errors=[ErrorSample((NEG,), error=InvalidArgumentError, match="x")])
    with pytest.raises(AssertionError, match="nothing was raised"):
        conformance.check_errors(spec, "cpu:0")
    spec.fn = _checked_square_op
    spec.errors = [ErrorSample((NEG,), error=TypeError)]
    with pytest.raises(AssertionError, match="expected TypeError, got InvalidArgumentError"):
        conformance.check_errors(spec, "cpu:0")
    spec.errors = [ErrorSample((NEG,), error=InvalidArgumentError, match="must be positive")]
    with pytest.raises(AssertionError, match="lacks \\['must be positive'\\]"):
        conformance.check_errors(spec, "cpu:0")


# --- opcheck and check_spec ---------------------------------------------------------------

def _has_kernel(op, dev):
    return dev.type in op.kernels


def test_opcheck_passes_a_correct_op_on_every_device():
    """Every available device whose type has a kernel passes; the others (cuda:0 on a GPU
    machine: GOOD has cpu and opencl kernels) are skipped naming the kernels there are."""
    report = opcheck(GOOD, _samples, ref=np.square, errors=[])
    skipped = dict(report["skipped"])
    for d in tf.list_devices():
        if _has_kernel(GOOD, d):
            assert f"forward[testing::good_square-float32-{d.name}]" in report["passed"]
            assert f"gradients[testing::good_square-{d.name}]" in report["passed"]
        else:
            why = skipped[f"forward[testing::good_square-{d.name}]"]
            assert f"no kernel for op testing::good_square on device type '{d.type}'" in why
            assert "registered kernels: device='cpu'" in why


def test_opcheck_skips_a_device_without_a_kernel_but_fails_one_it_was_asked_for():
    # BAD_GRAD: a right forward, cpu kernel only
    other = next((d.name for d in tf.list_devices() if not _has_kernel(BAD_GRAD, d)), None)
    if other is None:
        pytest.skip("needs a device type without the testing ops' kernels (opencl:0, cuda:0)")
    spec = _spec(BAD_GRAD)
    report = conformance.check_spec(spec, kinds=("forward",))
    assert "forward[testing::bad-float32-cpu:0]" in report["passed"]
    assert any(f"no kernel for op testing::bad on device type '{other.split(':')[0]}'" in why
               for _, why in report["skipped"])
    with pytest.raises(AssertionError, match="no kernel for op testing::bad"):
        conformance.check_spec(spec, devices=[other], kinds=("forward",))
    with pytest.raises(conformance.SkipCase, match="no kernel for op testing::bad"):
        conformance.check_traced(spec, other, tf.float32)


def test_opcheck_lists_every_failure():
    with pytest.raises(AssertionError) as ei:
        opcheck(BAD_GRAD, [Sample((X,))], ref=lambda x: np.square(x) + 1)
    msg = str(ei.value)
    assert "forward[testing::bad-float32-cpu:0]" in msg
    assert "gradients[testing::bad-cpu:0]" in msg


def test_cases_skip_undeclared_and_unavailable():
    spec = _spec(GOOD)
    spec.samples = lambda dt, rng: _samples(dt, rng) if dt != tf.float16 else []
    cs = conformance.cases([spec], ["cpu:0", ("cuda:0", "no CUDA here")], "forward")
    by_id = {c.id: c for c in cs}
    assert by_id["testing::good_square-float32-cpu:0"].skip is None
    assert "no samples for float16" in by_id["testing::good_square-float16-cpu:0"].skip
    assert "int32" not in " ".join(by_id)          # the kernel does not declare it
    assert by_id["cuda:0"].skip == "cuda:0 unavailable: no CUDA here"


# --- known gaps and the pytest plugin ------------------------------------------------------------

def test_gap_patterns_are_globs_with_literal_brackets():
    name = "test_forward[matmul-float16-opencl:0]"
    assert conformance.gap_matches("test_forward[matmul-float16-opencl:*]", name)
    assert conformance.gap_matches("matmul-float16-*", name)
    assert conformance.gap_matches("test_*[matmul-*]", name)
    assert not conformance.gap_matches("test_forward[matmul-float32-*]", name)
    assert not conformance.gap_matches("test_forward[m]", "test_forward[m-float32-cpu:0]")


_CONFTEST = '''
import tapeflow as tf
from tapeflow.plugins import hookimpl

class Gaps:
    @hookimpl
    def tapeflow_known_gaps(self):
        return {"test_forward[sq-float32-*]": "planted gap (fails)",
                "test_forward[sq-float64-*]": "planted gap (passes: a fixed gap)"}

tf.plugins.register(Gaps(), name="planted-gaps")
'''

_SUITE = '''
import numpy as np
import tapeflow as tf
from tapeflow.testing import conformance
from tapeflow.testing import OpSpec, Sample

def _ref(x):
    return np.square(x) + (x.dtype == np.float32)   # wrong for float32 only

SPECS = [OpSpec(name="sq", fn=tf.square, ref=_ref, op="Square",
                dtypes=("float32", "float64"),
                samples=lambda dt, rng: [Sample((np.ones((2, 2), dt.np),))])]

def pytest_generate_tests(metafunc):
    conformance.parametrize(metafunc, SPECS)

def test_forward(conformance_case):
    conformance_case.run()

def test_on_device(tf_device):
    assert tf.constant([1.0], device=tf_device).device == tf_device
'''


def _run_pytest(tmp_path, *args):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(_CONFTEST))
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(_SUITE))
    # (PYOPENCL_CTX selecting no device makes opencl:0 absent even where PoCL is installed)
    # (and TAPEFLOW_CUDA_DISABLE cuda:0, on a GPU machine)
    env = dict(os.environ, PYOPENCL_CTX="99", TAPEFLOW_CUDA_DISABLE="1")
    env.pop("TAPEFLOW_DEFAULT_DEVICE", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rsxX",
                        *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=env)
    return r.returncode, r.stdout + r.stderr


def test_pytest_plugin_devices_skips_and_known_gaps(tmp_path):
    rc, out = _run_pytest(tmp_path, "--tapeflow-device", "cpu:0",
                          "--tapeflow-device", "cuda:0,opencl:0")
    assert "tapeflow " in out and "testing on cpu:0" in out          # the report header
    assert "cuda:0 unavailable" in out and "opencl:0 unavailable" in out
    # float32: a known gap that fails -> xfailed; float64: a "fixed" gap -> strict XPASS fails
    assert "XFAIL" in out and "planted gap (fails)" in out
    assert "test_forward[sq-float64-cpu:0]" in out and "XPASS(strict)" in out
    assert "1 failed" in out and "1 xfailed" in out and "1 passed" in out, out
    assert "4 skipped" in out, out          # cuda:0 and opencl:0, for both test functions
    assert rc == 1


def test_a_missing_kernel_is_a_failure_not_a_silent_skip():
    op = OpDef("testing::no_kernel", inputs=("x",), grad=_square_grad)
    spec = OpSpec(name="no_kernel", fn=op, ref=np.square, samples=_samples, op=op.name)
    tf.runtime.registry.add_op(op)
    try:
        cs = conformance.cases([spec], ["cpu:0"], "forward")
        assert [c.id for c in cs] == ["no_kernel-cpu:0"]
        with pytest.raises(AssertionError, match="no kernel for op testing::no_kernel on device "
                                                 "type 'cpu'"):
            cs[0].check()
        assert conformance.cases([spec], ["cpu:0"], "noncontiguous") == []
        (g,) = conformance.cases([spec], ["cpu:0"], "gradients")
        with pytest.raises(tf.errors.NotFoundError):
            g.check()
    finally:
        tf.runtime.registry.OPS.pop(op.name, None)
