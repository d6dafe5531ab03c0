"""tf.function replayed as one captured CUDA graph (tapeflow.tracing.capture).

Without a GPU: the eligibility analysis on real traced graphs, the buffer plan, input
copying, output copies, in-place Variable updates, recapture and the fallback run on
the CPU, whose backend is given a *recording capturer* for the test (below): it keeps
CUDA-graph semantics where they matter — a capture runs nothing observable (its
in-place writes are dropped), the captured program reads the buffers it was given at
capture, and every launch rewrites the same static output buffers. The CUDA
capturer's calls into CuPy are checked against tests/backends/fake_cupy; the last
tests need a real GPU (skipped without one) and compare training with capture on and
off.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.tracing import capture as cap


class RecordingCapturer:
    """A capturer for the CPU: ``capture`` records the program (runs it with writes
    dropped, to learn its output buffers); ``launch`` runs it and copies its results
    into those buffers, as a CUDA graph writes the addresses it captured."""

    def __init__(self):
        self.supports_random = False
        self.refuse = {}
        self.events = []
        self.dry = False
        self.fail_capture = None

    def op_unsupported(self, name):
        return self.refuse.get(name)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def copy(self, a):
        return np.array(a, copy=True)

    def copy_into(self, dst, src):
        if not self.dry:
            np.copyto(dst, src)

    def device_counter(self):
        return _Word()

    def set_counter(self, counter, value):
        self.events.append("set_counter")
        counter.value = value

    def warmup(self, fn):
        self.events.append("warmup")
        return fn()

    def capture(self, fn):
        self.events.append("capture")
        if self.fail_capture:
            raise RuntimeError(self.fail_capture)
        self.dry = True
        try:        # (NumPy kernels may return 0-d results as scalars: buffers here)
            outs = tuple(np.array(o) for o in fn())
        finally:
            self.dry = False
        return _Graph(fn, outs), outs

    def launch(self, graph):
        self.events.append("launch")
        for o, r in zip(graph.outs, graph.fn()):
            np.copyto(o, r)


class _Graph:
    def __init__(self, fn, outs):
        self.fn, self.outs = fn, outs


class _Word:
    """A counter "in device memory": the CPU's random kernels read it when they run
    (``__index__``), as the CUDA kernel reads its word at each launch."""

    value = -1

    def __index__(self):
        return self.value


@pytest.fixture
def capturer(monkeypatch):
    """The CPU backend can capture (with a RecordingCapturer), and the switch is on."""
    rec = RecordingCapturer()
    backend = tf.runtime.devices.get_device("cpu:0").backend
    monkeypatch.setattr(backend, "graph_capture", lambda device: rec, raising=False)
    was = tf.config.experimental.cuda_graphs_enabled()
    tf.config.experimental.enable_cuda_graphs(True)
    yield rec
    tf.config.experimental.enable_cuda_graphs(was)


def _c(x):
    return tf.constant(np.asarray(x, dtype=np.float32), device="cpu:0")


def _info(f, *args):
    return f.get_concrete_function(*args).cuda_graph_info


# --- the switch ------------------------------------------------------------------------------

def test_switch_is_off_by_default_and_changes_nothing_when_off():
    assert tf.config.experimental.cuda_graphs_enabled() is (
        os.environ.get("TAPEFLOW_CUDA_GRAPHS", "") not in ("", "0"))
    if tf.config.experimental.cuda_graphs_enabled():
        pytest.skip("TAPEFLOW_CUDA_GRAPHS is set")

    @tf.function
    def f(x):
        return x * 2.0 + 1.0
    x = _c([1.0, 2.0])
    assert f(x).numpy().tolist() == [3.0, 5.0]
    cf = f.get_concrete_function(x)
    assert cf.cuda_graph_info is None
    assert not isinstance(cf._run, cap.CapturedRun)


def test_switch_round_trip_and_environment_variable():
    was = tf.config.experimental.cuda_graphs_enabled()
    try:
        tf.config.experimental.enable_cuda_graphs(True)
        assert tf.config.experimental.cuda_graphs_enabled() is True
        tf.config.experimental.enable_cuda_graphs(False)
        assert tf.config.experimental.cuda_graphs_enabled() is False
    finally:
        tf.config.experimental.enable_cuda_graphs(was)
    code = "import tapeflow as tf; print(tf.config.experimental.cuda_graphs_enabled())"
    for value, expect in (("1", "True"), ("0", "False")):
        env = dict(os.environ, TAPEFLOW_CUDA_GRAPHS=value)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.stdout.strip().endswith(expect), out.stdout + out.stderr


def test_no_capture_on_a_backend_without_it_and_no_warning():
    was = tf.config.experimental.cuda_graphs_enabled()
    tf.config.experimental.enable_cuda_graphs(True)
    try:
        @tf.function
        def f(x):
            return x + 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert f(_c([1.0])).numpy().tolist() == [2.0]
            assert f(_c([2.0])).numpy().tolist() == [3.0]
        info = _info(f, _c([1.0]))
        assert info.state == "fallback" and "cannot capture" in info.reason
    finally:
        tf.config.experimental.enable_cuda_graphs(was)


# --- eligibility -----------------------------------------------------------------------------

def _reason(f, *args, capturer):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f(*args)
    info = _info(f, *args)
    return info, [str(x.message) for x in w if issubclass(x.category, RuntimeWarning)]


@pytest.mark.parametrize("body, needle", [
    (lambda x: tf.py_function(lambda t: t * 2.0, [x], tf.float32), "py_function"),
    (lambda x: (tf.print(x), x + 1.0)[1], "tf.print"),
    (lambda x: tf.cond(tf.reduce_sum(x) > 0, lambda: x + 1.0, lambda: x - 1.0), "tf.cond"),
    (lambda x: tf.while_loop(lambda i: tf.reduce_sum(i) < 10.0, lambda i: i + 1.0, [x]),
     "tf.while_loop"),
    (lambda x: tf.where(x > 0.5), "shape depends on the values"),
    (lambda x: tf.boolean_mask(x, x > 0.5), "shape depends on the values"),
    (lambda x: tf.unique_all(tf.cast(x, tf.int32))[0], "UniqueAll"),
    (lambda x: x + tf.random.uniform([3]), "Philox counter"),
])
def test_ineligible_graphs_say_why_once(capturer, body, needle):
    f = tf.function(body)
    x = _c([0.0, 1.0, 2.0])
    info, warned = _reason(f, x, capturer=capturer)
    assert info.state == "fallback" and needle in info.reason, info
    assert len(warned) == 1 and needle in warned[0], warned
    # later calls: plain replay, no more warnings, nothing captured
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(x)
        f(x)
    assert capturer.events == []


def test_random_ops_are_eligible_when_the_capturer_advances_the_counter(capturer):
    capturer.supports_random = True

    @tf.function
    def f(x):
        return x + tf.random.uniform([3])
    f(_c([0.0, 1.0, 2.0]))
    assert _info(f, _c([0.0, 1.0, 2.0])).state == "pending"


def test_captured_random_ops_draw_the_plain_replays_numbers(capturer):
    """Each random node reads its Philox counter from a word set before every launch:
    call after call, the same numbers as the plain replay (and a new draw each call)."""
    capturer.supports_random = True
    x = _c([0.0, 1.0, 2.0])

    def run(on):
        tf.config.experimental.enable_cuda_graphs(on)
        tf.random.set_seed(7)

        @tf.function
        def f(x):
            return x + tf.random.uniform([3]), tf.random.normal([2]) * 2.0
        return f, [[t.numpy() for t in f(x)] for _ in range(5)]
    _, plain = run(False)
    f, captured = run(True)
    info = _info(f, x)
    assert info.state == "captured" and len(info.plan.counters) == 2, info
    assert capturer.events.count("launch") == 3
    for got, want in zip(captured, plain):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert not np.array_equal(captured[3][0], captured[4][0])


def test_an_op_the_capturer_refuses(capturer):
    capturer.refuse["MatMul"] = "its kernel synchronises"

    @tf.function
    def f(a):
        return tf.matmul(a, a)
    info, warned = _reason(f, _c(np.eye(2)), capturer=capturer)
    assert info.reason == "op MatMul: its kernel synchronises" and len(warned) == 1


def test_a_variable_read_after_it_is_assigned_reads_the_value_assigned(capturer):
    v = tf.Variable(np.zeros(2, np.float32))
    w = tf.Variable(np.ones(2, np.float32))

    @tf.function
    def f(x):
        v.assign(x)
        w.assign(x)
        return v.read_value() + w.read_value()
    info, _ = _reason(f, _c([1.0, 2.0]), capturer=capturer)
    # the graph reads both Variables again after assigning them (read nodes, for the
    # tapes); the captured program reads the values assigned
    assert info.state == "pending", info
    assert [n.kind for n in f.get_concrete_function(_c([1.0, 2.0])).graph.nodes].count(
        "read") == 2


def test_eligibility_is_pure_and_reports_the_device(capturer):
    @tf.function
    def f(x):
        return tf.nn.relu(x) * 2.0
    f(_c([1.0, -1.0]))
    g = f.get_concrete_function(_c([1.0, -1.0])).graph
    dev, c, reason = cap.eligibility(g)
    assert reason is None and c is capturer and str(dev) == "cpu:0"
    assert capturer.events == []


def test_copies_between_devices_are_ineligible(capturer):
    other = [d for d in tf.config.list_devices() if d != "cpu:0"]
    if not other:
        pytest.skip("needs a second device (OpenCL) for a copy")

    @tf.function
    def f(x):
        return tf.identity(x.to(other[0])) + 1.0
    try:
        info, warned = _reason(f, _c([1.0]), capturer=capturer)
    except Exception as e:  # a device that cannot run the op
        pytest.skip(f"{other[0]}: {e}")
    assert info.state == "fallback" and "copies a tensor" in info.reason


# --- buffer plan, replay, copies --------------------------------------------------------------

def _sgd_model():
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32), name="w")
    b = tf.Variable(np.zeros(3, np.float32), name="b")

    def step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y,
                                                                          logits=logits))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss
    return w, b, step


def _batches(n):
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        x = rng.standard_normal((5, 4)).astype(np.float32)
        y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 5)]
        out.append((_c(x), _c(y)))
    return out


def test_training_step_with_capture_matches_plain_replay(capturer):
    data = _batches(6)
    tf.config.experimental.enable_cuda_graphs(False)
    w0, b0, step0 = _sgd_model()
    f0 = tf.function(step0)
    plain = [float(f0(x, y)) for x, y in data]
    tf.config.experimental.enable_cuda_graphs(True)
    w, b, step = _sgd_model()
    f = tf.function(step)
    got = [float(f(x, y)) for x, y in data]
    np.testing.assert_allclose(got, plain, rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), w0.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0.numpy(), rtol=1e-6)
    # call 1 traces, call 2 warms up and captures, calls 3.. launch
    assert capturer.events == ["warmup", "capture"] + ["launch"] * 4
    info = _info(f, *data[0])
    assert info.state == "captured" and info.captures == 1 and info.launches == 4


def test_buffer_plan(capturer):
    w, b, step = _sgd_model()
    f = tf.function(step)
    x, y = _batches(1)[0]
    f(x, y)
    plan = _info(f, x, y).plan
    assert [(p, s, d) for p, s, d in plan.inputs] == [(0, (5, 4), np.float32),
                                                      (1, (5, 3), np.float32)]
    modes = {ref.name: (shape, mode) for ref, shape, _, mode in plan.variables}
    assert modes == {"w:0": ((4, 3), "read+write"), "b:0": ((3,), "read+write")}
    assert plan.outputs == [((), np.float32)] and plan.snapshots == []


def test_returned_variable_value_is_snapshotted_before_the_update(capturer):
    v = tf.Variable(np.array([1.0, 2.0], np.float32))

    @tf.function
    def f(x):
        old = v.read_value()
        v.assign_add(x)
        return old
    x = _c([10.0, 10.0])
    assert f(x).numpy().tolist() == [1.0, 2.0]          # traced
    assert f(x).numpy().tolist() == [11.0, 12.0]        # warm-up + capture
    assert f(x).numpy().tolist() == [21.0, 22.0]        # launch
    assert v.numpy().tolist() == [31.0, 32.0]
    assert [why for why, _, _ in _info(f, x).plan.snapshots] == ["output"]


def test_inputs_are_copied_into_static_buffers(capturer):
    @tf.function
    def f(x):
        return x * 3.0
    outs = [f(_c([float(i), 1.0])).numpy().tolist() for i in range(5)]
    assert outs == [[3.0 * i, 3.0] for i in range(5)]
    run = f.get_concrete_function(_c([0.0, 0.0]))._run
    assert isinstance(run, cap.CapturedRun)
    assert run.static_in[0].tolist() == [4.0, 1.0]       # the last call's argument


def test_results_kept_across_calls_are_not_overwritten(capturer):
    @tf.function
    def f(x):
        return x + 1.0, tf.reduce_sum(x)
    kept = [f(_c([float(i)])) for i in range(4)]
    assert [(a.numpy().tolist(), float(s)) for a, s in kept] == [
        ([float(i) + 1.0], float(i)) for i in range(4)]
    assert capturer.events.count("launch") == 2


def test_variables_are_updated_in_place_and_user_tensors_are_not(capturer):
    init = _c([0.0, 0.0])
    v = tf.Variable(init)

    @tf.function
    def f(x):
        v.assign_add(x)
        return v.read_value() * 1.0
    one = _c([1.0, 1.0])
    f(one)
    f(one)
    buf = v._value._data
    for _ in range(3):
        f(one)
        assert v._value._data is buf                    # written in place
    assert v.numpy().tolist() == [5.0, 5.0]
    assert init.numpy().tolist() == [0.0, 0.0]          # the initial value is untouched


def test_a_variable_replaced_outside_the_function_is_captured_again(capturer):
    v = tf.Variable(np.array([1.0], np.float32))

    @tf.function
    def f(x):
        v.assign_add(x)
        return v.read_value() * 2.0
    one = _c([1.0])
    assert [float(f(one)) for _ in range(3)] == [4.0, 6.0, 8.0]
    mine = _c([100.0])
    v.assign(mine)                                       # replaces the buffer
    assert float(f(one)) == 202.0
    assert float(f(one)) == 204.0
    info = _info(f, one)
    assert info.captures == 2 and capturer.events.count("capture") == 2
    assert mine.numpy().tolist() == [100.0]              # the user's tensor is not written


def test_variable_arguments(capturer):
    @tf.function
    def f(var, x):
        var.assign_add(x)
        return var.read_value() + 0.0
    a = tf.Variable(np.zeros(2, np.float32))
    x = _c([1.0, 2.0])
    for _ in range(4):
        f(a, x)
    assert a.numpy().tolist() == [4.0, 8.0]
    b = tf.Variable(np.zeros(2, np.float32))
    f(b, x)                                              # another Variable: captured again
    assert b.numpy().tolist() == [1.0, 2.0] and a.numpy().tolist() == [4.0, 8.0]


def test_capture_failure_falls_back_with_one_warning(capturer):
    capturer.fail_capture = "cudaErrorStreamCaptureUnsupported: operation not permitted"
    v = tf.Variable(np.array([0.0], np.float32))

    @tf.function
    def f(x):
        v.assign_add(x)
        return v.read_value() + x
    one = _c([1.0])
    f(one)
    with pytest.warns(RuntimeWarning, match="cudaErrorStreamCaptureUnsupported"):
        assert float(f(one)) == 3.0                      # the warm-up's result
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(f(one)) == 4.0                      # plain replay from now on
    assert v.numpy().tolist() == [3.0]
    info = _info(f, one)
    assert info.state == "fallback" and "capture raised RuntimeError" in info.reason


def test_a_failing_warm_up_raises_the_plain_error(capturer):
    @tf.function
    def f(x):
        return x + 1.0
    f(_c([1.0]))
    capturer.warmup = lambda fn: (_ for _ in ()).throw(RuntimeError("boom"))
    with pytest.warns(RuntimeWarning, match="warm-up run raised RuntimeError: boom"):
        assert f(_c([2.0])).numpy().tolist() == [3.0]


def test_turning_the_switch_off_replays_plainly(capturer):
    @tf.function
    def f(x):
        return x - 1.0
    for i in range(3):
        f(_c([float(i)]))
    tf.config.experimental.enable_cuda_graphs(False)
    assert f(_c([7.0])).numpy().tolist() == [6.0]
    assert _info(f, _c([0.0])).state == "off"
    assert capturer.events == ["warmup", "capture", "launch"]


def test_under_a_tape_the_call_is_recorded_as_before(capturer):
    v = tf.Variable(np.array([2.0], np.float32))

    @tf.function
    def f(x):
        return v.read_value() * x
    x = _c([3.0])
    for _ in range(3):
        f(x)
    with tf.GradientTape() as tape:
        y = f(x)
    assert tape.gradient(y, v).numpy().tolist() == [3.0]


# --- the CUDA capturer against the NumPy stand-in for CuPy ------------------------------------

def test_cuda_capturer_calls_on_the_numpy_stand_in():
    """The CuPy calls of tapeflow_cuda_cupy.cuda_graphs, run in a subprocess with
    tests/backends/fake_cupy first on the path (the fake records the calls; it
    cannot replay kernels, so the values after a launch are not checked there)."""
    code = r"""
import numpy as np, cupy, tapeflow as tf
from tapeflow.tracing import capture as cap
tf.config.experimental.enable_cuda_graphs(True)
d = tf.runtime.devices.get_device("cuda:0")
c = d.backend.graph_capture(d)
assert c is not None and c.op_unsupported("GatherV2") and c.supports_random
v = tf.Variable(np.zeros(3, np.float32), device="cuda:0")
@tf.function
def f(x):
    v.assign_add(x)
    return tf.reduce_sum(v.read_value() * 2.0)
x = tf.constant(np.ones(3, np.float32), device="cuda:0")
assert float(f(x)) == 6.0
assert float(f(x)) == 12.0 and v.numpy().tolist() == [2.0, 2.0, 2.0]
info = f.get_concrete_function(x).cuda_graph_info
assert info.state == "captured", info
f(x); f(x)
kinds = [k for k, _ in cupy.calls]
assert kinds.count("begin_capture") == 1 and kinds.count("end_capture") == 1, kinds
assert kinds.count("launch") == 2 and info.launches == 2, kinds
stream = [s for k, s in cupy.calls if k == "begin_capture"][0]
assert stream.non_blocking and not stream.is_null
assert any(k.startswith("copyto (captured") for k in kinds), kinds
allocs = [a for k, a in cupy.calls if k == "using_allocator"]
assert len(allocs) == 2 and all(a is not None for a in allocs)
@tf.function
def g(p, i):
    return tf.gather(p, i)
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    g(x, tf.constant([0, 1], device="cuda:0"))
info = g.get_concrete_function(x, tf.constant([0, 1], device="cuda:0")).cuda_graph_info
assert info.state == "fallback" and "GatherV2" in info.reason, info
assert any("GatherV2" in str(m.message) for m in w)
# random ops: the Philox kernel that reads its counter from a device word is captured,
# and every launch writes the next counter into that word first
@tf.function
def r(x):
    return x + tf.random.uniform([3])
r(x); r(x)
info = r.get_concrete_function(x).cuda_graph_info
assert info.state == "captured" and len(info.plan.counters) == 1, info
(_, word), = info.plan.counters
before = int(word)
r(x)
assert int(word) == before + 1 and info.launches == 1
print("OK")
"""
    _run_on_stand_in(code)


def _run_on_stand_in(code):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(here, "backends", "fake_cupy"), os.environ.get("PYTHONPATH", "")]),
        FAKE_CUPY_DEVICES="1", TAPEFLOW_CUDA_DISABLE="")
    env.pop("TAPEFLOW_DEFAULT_DEVICE", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300, cwd=here)
    assert r.returncode == 0 and r.stdout.strip().endswith("OK"), r.stdout + r.stderr


_MLP_ON_STAND_IN = r"""
import warnings
import numpy as np, cupy, tapeflow as tf
from tapeflow_cuda_cupy import capture_gemm
from tapeflow.tracing import graph_passes
del graph_passes.PASSES["fuse"]     # (the stand-in has no generated ElementwiseKernels)
tf.config.experimental.enable_cuda_graphs(True)
rng = np.random.default_rng(0)
with tf.device("cuda:0"):
    ws = [tf.Variable(rng.standard_normal(s).astype(np.float32) * 0.1)
          for s in ((20, 16), (16, 3))]
@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.matmul(x, ws[0]))
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
            labels=y, logits=tf.matmul(h, ws[1])))
    for v, g in zip(ws, tape.gradient(loss, ws)):
        v.assign_sub(0.1 * g)
    return loss
x = tf.constant(rng.standard_normal((8, 20)).astype(np.float32), device="cuda:0")
y = tf.constant(np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)], device="cuda:0")
# the stand-in refuses cuBLAS on a capturing stream exactly as CuPy does
s = cupy.cuda.Stream(non_blocking=True)
with s:
    s.begin_capture()
    try:
        cupy.matmul(cupy.ones((2, 2), np.float32), cupy.ones((2, 2), np.float32))
        raise AssertionError("not refused")
    except NotImplementedError as e:
        assert str(e) == "calling cuBLAS API during stream capture is currently unsupported"
    finally:
        s.end_capture()
assert cupy.cublas_refusals == ["matmul"]
del cupy.cublas_refusals[:]
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for _ in range(4):
        step(x, y)
info = step.get_concrete_function(x, y).cuda_graph_info
assert info.state == "captured" and info.launches >= 1, info
assert not cupy.cublas_refusals and not [m for m in w if "CUDA graph" in str(m.message)]
gemms = [n for k, n in cupy.calls if k == "raw kernel"]
assert gemms and all(n.startswith("tapeflow_gemm_f32_") for n in gemms), gemms
# the route CuPy refuses: MatMul through cupy.matmul (cuBLAS) inside the capture
capture_gemm.graph_mode = lambda: __import__("contextlib").nullcontext()
import tapeflow_cuda_cupy.cuda_graphs as cg
cg.capture_gemm = capture_gemm
@tf.function
def step2(x, y):
    return tf.reduce_sum(tf.matmul(x, ws[0]))
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    step2(x, y); step2(x, y)
info = step2.get_concrete_function(x, y).cuda_graph_info
assert info.state == "fallback" and "calling cuBLAS API during stream capture" in info.reason, info
assert cupy.cublas_refusals == ["matmul"], cupy.cublas_refusals
print("OK")
"""


def test_matmul_under_capture_takes_the_gemm_kernel_not_cublas_on_the_stand_in():
    """CuPy raises NotImplementedError for any cuBLAS call on a capturing stream (its
    cublas.setStream checks runtime.streamIsCapturing); the stand-in does the same. A
    training step with MatMuls (forward and gradients) captures: inside the warm-up and
    the capture MatMul launches capture_gemm's kernel, and nothing reaches cuBLAS;
    with the kernel switched off the capture falls back with CuPy's reason."""
    _run_on_stand_in(_MLP_ON_STAND_IN)


_GEMM_ON_STAND_IN = r"""
import numpy as np, cupy
from tapeflow_cuda_cupy import capture_gemm, emulate
assert emulate.available() is None, emulate.available()
rng = np.random.default_rng(1)
mm = capture_gemm.wrap_matmul(cupy, lambda *a: (_ for _ in ()).throw(AssertionError("cuBLAS")))
def dev(a):
    return cupy.asarray(a)
cases = [((5, 7), (7, 3), False, False), ((33, 17), (33, 40), True, False),
         ((64, 784), (784, 256), False, False), ((64, 256), (10, 256), False, True),
         ((2, 3, 9, 5), (5, 11), False, False), ((4, 1, 6, 7), (3, 7, 2), False, False),
         ((3, 0), (0, 4), False, False), ((150, 20), (20, 130), False, False)]
with capture_gemm.graph_mode():
    for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12), (np.float16, 2e-3)):
        for sa, sb, ta, tb in cases:
            a = rng.standard_normal(sa).astype(dt)
            b = rng.standard_normal(sb).astype(dt)
            want = np.matmul(np.swapaxes(a, -1, -2) if ta else a,
                             np.swapaxes(b, -1, -2) if tb else b)
            got = np.asarray(mm(dev(a), dev(b), ta, tb))
            assert got.dtype == dt and got.shape == want.shape, (got.shape, want.shape)
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=tol, atol=tol * max(sa[-1], 1), err_msg=str((dt, sa, sb)))
assert {capture_gemm.pick_regs(1, 64, 256), capture_gemm.pick_regs(1, 784, 256),
        capture_gemm.pick_regs(1, 4096, 4096)} == {1, 2, 4}
# outside a capture MatMul is the shared kernel (cuBLAS)
seen = []
mm2 = capture_gemm.wrap_matmul(cupy, lambda *a: seen.append(1) or "shared")
assert mm2(dev(np.ones((2, 2), np.float32)), dev(np.ones((2, 2), np.float32)), False, False) == "shared"
print("OK")
"""


def test_the_capture_gemm_kernel_matches_numpy_through_the_emulation():
    """capture_gemm's CUDA source, compiled for the host by tapeflow_cuda_cupy.emulate
    (one thread per CUDA thread, __syncthreads as a barrier): transposes, broadcast
    batch dimensions, edges that are not multiples of the tile, K = 0, each R."""
    from tapeflow_cuda_cupy import emulate
    if emulate.available() is not None:
        pytest.skip(emulate.available())
    _run_on_stand_in(_GEMM_ON_STAND_IN)


# --- on a GPU ----------------------------------------------------------------------------------

def _real_gpu():
    try:
        import cupy
    except ImportError:
        return False
    if getattr(cupy, "FAKE", False):
        return False
    return any(d.startswith("cuda:") for d in tf.config.list_devices())


needs_gpu = pytest.mark.skipif(not _real_gpu(), reason="needs a CUDA GPU (CuPy)")


def _mlp_run(enabled, steps=8):
    tf.config.experimental.enable_cuda_graphs(enabled)
    rng = np.random.default_rng(0)
    with tf.device("cuda:0"):
        ws = [tf.Variable(rng.standard_normal(s).astype(np.float32) * 0.05)
              for s in ((784, 256), (256, 256), (256, 10))]
        bs = [tf.Variable(np.zeros(s[1], np.float32)) for s in ((784, 256), (256, 256),
                                                                  (256, 10))]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i, (w, b) in enumerate(zip(ws, bs)):
                h = tf.matmul(h, w) + b
                if i < 2:
                    h = tf.nn.relu(h)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=h))
        grads = tape.gradient(loss, ws + bs)
        for var, g in zip(ws + bs, grads):
            var.assign_sub(0.05 * g)
        return loss
    losses = []
    for k in range(steps):
        x = tf.constant(rng.standard_normal((64, 784)).astype(np.float32), device="cuda:0")
        y = tf.constant(np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)], device="cuda:0")
        losses.append(step(x, y))              # kept across calls: copies, not overwritten
    info = step.get_concrete_function(x, y).cuda_graph_info
    return [float(v) for v in losses], [w.numpy() for w in ws], info


@needs_gpu
def test_gpu_mlp_training_with_capture_matches_without():
    was = tf.config.experimental.cuda_graphs_enabled()
    try:
        off, w_off, info_off = _mlp_run(False)
        on, w_on, info = _mlp_run(True)
    finally:
        tf.config.experimental.enable_cuda_graphs(was)
    assert info_off is None
    assert info.state == "captured" and info.launches == 6, info
    np.testing.assert_allclose(on, off, rtol=1e-5, atol=1e-6)
    for a, b in zip(w_on, w_off):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_gpu_recapture_after_an_outside_assign():
    was = tf.config.experimental.cuda_graphs_enabled()
    tf.config.experimental.enable_cuda_graphs(True)
    try:
        with tf.device("cuda:0"):
            v = tf.Variable(np.ones(1000, np.float32))
            x = tf.constant(np.ones(1000, np.float32))

        @tf.function
        def f(x):
            v.assign_add(x)
            return tf.reduce_sum(v.read_value())
        assert [float(f(x)) for _ in range(3)] == [2000.0, 3000.0, 4000.0]
        with tf.device("cuda:0"):                   # (tf.zeros takes no device=)
            v.assign(tf.zeros([1000]))
        assert float(f(x)) == 1000.0
        info = f.get_concrete_function(x).cuda_graph_info
        assert info.state == "captured" and info.captures == 2, info
    finally:
        tf.config.experimental.enable_cuda_graphs(was)


@needs_gpu
def test_gpu_captured_random_ops_draw_the_plain_replays_numbers():
    """Dropout-like random draws inside a captured graph: the counter word written
    before each launch gives the plain replay's numbers, call after call."""
    was = tf.config.experimental.cuda_graphs_enabled()
    x = tf.constant(np.arange(1000, dtype=np.float32), device="cuda:0")

    def run(on):
        tf.config.experimental.enable_cuda_graphs(on)
        tf.random.set_seed(11)

        @tf.function
        def f(x):
            keep = tf.cast(tf.random.uniform([1000]) > 0.5, tf.float32)
            return x * keep + tf.random.normal([1000])
        with tf.device("cuda:0"):       # the random ops have no input to place them by
            return f, [f(x).numpy() for _ in range(5)]
    try:
        _, plain = run(False)
        f, captured = run(True)
    finally:
        tf.config.experimental.enable_cuda_graphs(was)
    assert f.get_concrete_function(x).cuda_graph_info.state == "captured"
    for got, want in zip(captured, plain):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_captured_reads_after_assignments_equal_the_plain_replay(capturer):
    # reads after an assignment are read nodes now (a tape outside sees a Variable
    # read): the captured program reads the value assigned, call after call
    def run(on):
        tf.config.experimental.enable_cuda_graphs(on)
        v = tf.Variable(np.ones(3, np.float32))

        @tf.function
        def f(x):
            v.assign(v * 0.5 + x)
            a = v.read_value() * 2.0
            v.assign_add(a)
            return a, v.read_value() + 1.0
        out = [[t.numpy() for t in f(_c([1.0, 2.0, 3.0]))] for _ in range(5)]
        return f, out, v.numpy()
    try:
        _, plain, vp = run(False)
        f, captured, vc = run(True)
    finally:
        tf.config.experimental.enable_cuda_graphs(False)
    assert _info(f, _c([1.0, 2.0, 3.0])).state == "captured"
    for got, want in zip(captured, plain):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(vc, vp)
