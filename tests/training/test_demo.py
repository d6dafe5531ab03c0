"""examples/train_cnn.py, the README's demo: a short run in a subprocess writes
TensorBoard logs and a checkpoint, and a second run resumes from it."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import tapeflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "train_cnn.py")

pytest.importorskip("sklearn", reason="the demo trains on scikit-learn's digits")


def _run(tmp_path, *extra, timeout=300):
    env = dict(os.environ, TAPEFLOW_DEFAULT_DEVICE=os.environ.get("TAPEFLOW_DEFAULT_DEVICE",
                                                                  "cpu:0"))
    cmd = [sys.executable, DEMO, "--logdir", str(tmp_path / "logs"),
           "--ckpt-dir", str(tmp_path / "ckpt"), *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                       cwd=str(tmp_path))
    assert p.returncode == 0, f"demo failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    return p.stdout, p.stderr


def test_demo_short_run_logs_checkpoints_and_resumes(tmp_path):
    out, err = _run(tmp_path, "--epochs", "1", "--max-steps", "3")
    assert "resumed from" not in out
    assert "test accuracy:" in out and "after 1 epochs (3 steps)" in out
    try:
        import tqdm  # noqa: F401
        assert "epoch 1:" in err and "3/3" in err       # tqdm's bar on stderr, 3 steps
    except ImportError:
        assert "epoch 1:" in out                         # no tqdm: one line per epoch
    ckpt = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
    assert ckpt is not None
    assert len(glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))) == 1

    out, err = _run(tmp_path, "--epochs", "1", "--max-steps", "3", "--no-progress")
    assert "resumed from " + ckpt in out and "(epoch 1, step 3" in out
    assert "after 2 epochs (6 steps)" in out
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")) != ckpt

    files = glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))
    assert len(files) == 2
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        return
    ea = EventAccumulator(str(tmp_path / "logs"), size_guidance={"scalars": 0, "images": 0})
    ea.Reload()
    tags = ea.Tags()
    assert {"loss", "test_accuracy", "epoch_loss"} <= set(tags["scalars"])
    assert [e.step for e in ea.Scalars("test_accuracy")] == [3, 6]
    assert [e.step for e in ea.Scalars("loss")] == [0]          # every 10 steps, from 0
    assert len(tags["images"]) == 6 and tags["histograms"]


def test_demo_reports_a_missing_dataset(tmp_path):
    env = dict(os.environ, TAPEFLOW_DATA_DIR=str(tmp_path), HOME=str(tmp_path))
    p = subprocess.run([sys.executable, DEMO, "--dataset", "mnist", "--logdir",
                        str(tmp_path / "l"), "--ckpt-dir", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0
    assert "MNIST is not on this machine" in p.stderr and "Traceback" not in p.stderr


def test_demo_full_run_reaches_95_percent(tmp_path):
    """The default run (10 epochs on the digits) reaches the accuracy the README states."""
    out, _ = _run(tmp_path, "--no-progress")
    line = [l for l in out.splitlines() if l.startswith("test accuracy:")][-1]
    acc = float(line.split()[2].rstrip("%")) / 100
    assert acc >= 0.95, out
    assert "after 10 epochs (450 steps)" in line
