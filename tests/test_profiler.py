"""tapeflow.profiler: per-op events with shapes, dtypes and times, a summary table, a
Chrome trace, and nothing left behind when it stops (zero cost when off)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.runtime import registry


def _kernels():
    return {(name, dt): (e.fn, dict(op.fast.get(dt, {})))
            for name, op in registry.OPS.items() for dt, e in op.kernels.items()}


def test_profile_records_ops_with_shapes_dtypes_and_times(tmp_path):
    x = tf.constant(np.ones((8, 4), np.float32))
    w = tf.Variable(np.ones((4, 3), np.float32))
    with tf.profiler.profile() as prof:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)) * 2.0)
        (g,) = tape.gradient(loss, [w])
    names = [e.name for e in prof.events]
    assert {"MatMul", "Relu", "Mul", "Sum"} <= set(names)
    assert "ReluGrad" in names                              # the backward ops too
    mm = next(e for e in prof.events if e.name == "MatMul")
    assert mm.device == "cpu" and mm.shapes == ((8, 4), (4, 3))
    assert mm.dtypes == ("float32", "float32") and mm.end_ns >= mm.start_ns
    rows = {r.name: r for r in prof.key_averages()}
    assert rows["MatMul"].calls == names.count("MatMul") >= 2      # forward + gradient
    table = prof.key_averages().table(sort_by="total")
    assert table.splitlines()[0].split()[:3] == ["op", "device", "calls"]
    assert "float32[8,4], float32[4,3]" in table
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    trace = json.load(open(path))
    assert len(trace["traceEvents"]) == len(prof.events)
    assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(trace["traceEvents"][0])
    np.testing.assert_allclose(g.numpy(), np.full((4, 3), 16.0))


def test_profiling_leaves_nothing_behind():
    before = _kernels()
    with tf.profiler.profile():
        during = _kernels()
        assert any(during[k][0] is not before[k][0] for k in before)
    after = _kernels()
    assert all(after[k][0] is before[k][0] for k in before)
    assert all(after[k][1] == before[k][1] for k in before)
    x = tf.constant([1.0, 2.0])
    assert (x + x).numpy().tolist() == [2.0, 4.0]


def test_start_stop_and_errors(tmp_path):
    tf.profiler.experimental.start(str(tmp_path))
    try:
        with pytest.raises(tf.errors.FailedPreconditionError, match="already running"):
            tf.profiler.experimental.start()
        tf.exp(tf.constant([1.0]))
    finally:
        prof = tf.profiler.experimental.stop()
    assert [e.name for e in prof.events] == ["Exp"]
    assert len(list(tmp_path.glob("trace-*.json"))) == 1
    with pytest.raises(tf.errors.FailedPreconditionError, match="no profile is running"):
        tf.profiler.experimental.stop()
    with pytest.raises(tf.errors.FailedPreconditionError, match="sort_by"):
        prof.key_averages().table(sort_by="name")


def test_profile_on_opencl_waits_for_the_device():
    try:
        dev = tf.runtime.devices.get_device("opencl:0")
    except tf.errors.TapeflowError as e:
        pytest.skip(f"no opencl:0: {e}")
    with tf.device(dev.name):
        x = tf.ones([32, 32])
    with tf.profiler.profile() as prof:
        tf.matmul(x, x)
    (e,) = [e for e in prof.events if e.name == "MatMul"]
    assert e.device == "opencl" and e.duration_us > 0


def test_export_chrome_trace_follows_no_planted_temp_file(tmp_path):
    # the temp file had a predictable name (<path>.tmp<pid>) opened with open(): a
    # symlink planted there made the export write through it into the user's file
    user = tmp_path / "important.txt"
    user.write_text("keep me")
    (tmp_path / f"trace.json.tmp{os.getpid()}").symlink_to(user)
    with tf.profiler.profile() as prof:
        tf.add(1.0, 2.0)
    path = prof.export_chrome_trace(tmp_path / "trace.json")
    assert user.read_text() == "keep me"
    assert json.load(open(path))["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "important.txt", "trace.json", f"trace.json.tmp{os.getpid()}"]
