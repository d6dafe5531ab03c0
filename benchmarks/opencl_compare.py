#!/usr/bin/env python
"""tapeflow on opencl:0 against tapeflow on cpu:0 and raw NumPy, in one process, interleaved.

The OpenCL backend's figures (issue 4):

* ``matmul``  1024x1024 @ 1024x1024 float32: GFLOP/s of ``tf.matmul`` on opencl:0,
  as a ratio to NumPy's ``a @ b`` (OpenBLAS/MKL) on the same CPU;
* ``add``     per-op overhead: ``a + b`` on a (1,) float32 tensor, on opencl:0 vs cpu:0;
* ``mlp64``   an MLP 784-256-256-10 SGD training step (forward, softmax cross-entropy,
  GradientTape backward, update), batch 64, on opencl:0 vs cpu:0;
* ``cnn32``   the seeds' CNN (the guide's: Conv2D(16, 3x3, relu) x2, global average
  pooling, Dense(10)) forward + backward + Adam, batch 32, on opencl:0 vs cpu:0;
* ``first_call``  cold vs warm first-call time: a fresh process runs ``a * 2.0 + 1.0``
  and a matmul on opencl:0 with an empty tapeflow cache directory (cold: every kernel
  compiles) and then again with the filled cache (warm).

Every timed run on opencl:0 ends with ``synchronize`` (the queue drains) before the
clock stops. Each round times every implementation once, in a rotating order; the ratio
is the median over rounds of the per-round ratio ``other / opencl`` (> 1: opencl faster).

    python benchmarks/opencl_compare.py            # about two minutes on 2 cores
    python benchmarks/opencl_compare.py --quick    # a smoke run
    python benchmarks/opencl_compare.py --cases matmul,add --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

import common
from common import fmt_time, guard, measure

DEVICE = "opencl:0"


class Case:
    def __init__(self, key, title, unit):
        self.key, self.title, self.unit = key, title, unit
        self.impls = {}
        self.times = {}
        self.ratios = {}
        self.errors = {}
        self.extra = {}


def case_matmul(tf, n=1024):
    c = Case("matmul", f"matmul {n}x{n} float32", "call")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a @ b

    def build_cl():
        with tf.device(DEVICE):
            ta, tb = tf.constant(a), tf.constant(b)
            got = tf.matmul(ta, tb).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)

        def run(k):
            with tf.device(DEVICE):
                for _ in range(k):
                    tf.matmul(ta, tb)
        return run

    def build_np():
        def run(k):
            for _ in range(k):
                np.matmul(a, b)
        return run

    guard(c, "opencl", build_cl)
    guard(c, "numpy", build_np)
    c.extra["flops"] = 2.0 * n ** 3
    return c


def case_add(tf):
    c = Case("add", "a + b, (1,) float32", "op")
    x = np.ones(1, np.float32)

    def build(dev):
        def b():
            with tf.device(dev):
                p, q = tf.constant(x), tf.constant(x)
            assert float((p + q)[0]) == 2.0

            def run(k):
                for _ in range(k):
                    p + q
            return run
        return b

    def build_np():
        p, q = x.copy(), x.copy()

        def run(k):
            for _ in range(k):
                p + q
        return run

    guard(c, "opencl", build(DEVICE))
    guard(c, "cpu", build("cpu:0"))
    guard(c, "numpy", build_np)
    return c


def case_mlp(tf, batch=64):
    c = Case(f"mlp{batch}", f"MLP 784-256-256-10 SGD step, batch {batch}", "step")
    rng = np.random.default_rng(2)
    sizes = [784, 256, 256, 10]
    ws = [(rng.standard_normal((i, o)) * np.sqrt(2.0 / i)).astype(np.float32)
          for i, o in zip(sizes[:-1], sizes[1:])]
    xn = rng.standard_normal((batch, 784)).astype(np.float32)
    yn = rng.integers(0, 10, batch).astype(np.int64)
    losses = {}

    def build(dev):
        def b():
            with tf.device(dev):
                W = [tf.Variable(w) for w in ws]
                B = [tf.Variable(np.zeros(w.shape[1], np.float32)) for w in ws]
                x, y = tf.constant(xn), tf.constant(yn)
            params = W + B

            def step():
                with tf.device(dev):
                    with tf.GradientTape() as tape:
                        h = tf.nn.relu(tf.matmul(x, W[0]) + B[0])
                        h = tf.nn.relu(tf.matmul(h, W[1]) + B[1])
                        logits = tf.matmul(h, W[2]) + B[2]
                        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                            labels=y, logits=logits))
                    grads = tape.gradient(loss, params)
                    for p, g in zip(params, grads):
                        p.assign_sub(0.01 * g)
                return loss
            losses[dev] = [float(step()) for _ in range(3)]

            def run(k):
                for _ in range(k):
                    step()
            return run
        return b

    guard(c, "opencl", build(DEVICE))
    guard(c, "cpu", build("cpu:0"))
    if DEVICE in losses and "cpu:0" in losses and not np.allclose(
            losses[DEVICE], losses["cpu:0"], rtol=1e-3):
        c.errors["opencl"] = f"losses differ: {losses[DEVICE]} vs cpu {losses['cpu:0']}"
        c.impls.pop("opencl", None)
    return c


def case_cnn(tf, batch=32):
    c = Case(f"cnn{batch}", f"seeds' CNN Adam step, batch {batch}", "step")
    xn, yn = common.cnn_data(batch, seed=3)

    def build(dev):
        def b():
            _, step = common.tf_cnn_step(tf, xn, yn, dev, seed=1)
            float(step())
            return common.loop(step)
        return b

    guard(c, "opencl", build(DEVICE))
    guard(c, "cpu", build("cpu:0"))
    return c


_FIRST_CALL = r"""
import time
t0 = time.perf_counter()
import numpy as np, tapeflow as tf
t1 = time.perf_counter()
with tf.device("opencl:0"):
    x = tf.constant(np.ones((64, 64), np.float32))
    (x * 2.0 + 1.0).numpy()
    t2 = time.perf_counter()
    tf.matmul(x, x).numpy()
    t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2)
"""


def first_call():
    """``{"cold": (import, elementwise, matmul), "warm": (...)}`` seconds."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TAPEFLOW_CACHE_DIR=d)
        env.pop("POCL_CACHE_DIR", None)
        for label in ("cold", "warm"):
            r = subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, capture_output=True,
                               text=True, timeout=600)
            if r.returncode:
                return {"error": r.stderr.strip().splitlines()[-1:]}
            out[label] = tuple(float(v) for v in r.stdout.split())
    return out


CASES = {"matmul": case_matmul, "add": case_add, "mlp64": case_mlp, "cnn32": case_cnn}


def report(cases, fc, out=sys.stdout):
    w = out.write
    w(f"{'case':<8} {'impl':<7} {'median':>12} {'best':>12} {'other/opencl':>13}  notes\n")
    w("-" * 72 + "\n")
    for c in cases:
        for fw in ("opencl", "cpu", "numpy"):
            if fw in c.times:
                ts = c.times[fw]
                med = statistics.median(ts)
                ratio = f"{statistics.median(c.ratios[fw]):12.3f}x" if fw in c.ratios else ""
                note = ""
                if "flops" in c.extra:
                    note = f"{c.extra['flops'] / med / 1e9:7.1f} GFLOP/s"
                w(f"{c.key:<8} {fw:<7} {fmt_time(med, 12)} {fmt_time(min(ts), 12)} {ratio:>13}  {note}\n")
            elif fw in c.errors:
                w(f"{c.key:<8} {fw:<7} ERROR: {c.errors[fw]}\n")
        w("\n")
    for c in cases:
        if c.key == "matmul" and "opencl" in c.times and "numpy" in c.times:
            r = statistics.median(c.times["numpy"]) / statistics.median(c.times["opencl"])
            w(f"matmul GFLOP/s, opencl:0 / NumPy: {r:.2f}x (issue 4 goal: >= 0.5)\n")
        if c.key == "add" and "opencl" in c.times and "cpu" in c.times:
            mo, mc = statistics.median(c.times["opencl"]), statistics.median(c.times["cpu"])
            w(f"per-op overhead, opencl:0 - cpu:0: {(mo - mc) * 1e6:.1f} us per op "
              f"({mo / mc:.1f}x)\n")
    if fc:
        if "error" in fc:
            w(f"first call: ERROR {fc['error']}\n")
        else:
            for label, (imp, ew, mm) in fc.items():
                w(f"first call ({label} cache): import {imp:.2f} s, first elementwise "
                  f"{ew:.2f} s, first matmul {mm:.2f} s\n")
    w("ratio = other's time / opencl:0's time, median over interleaved rounds "
      "(> 1: opencl:0 faster)\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    ap.add_argument("--cases", default=",".join(list(CASES) + ["first_call"]),
                    help="comma-separated: " + ", ".join(list(CASES) + ["first_call"]))
    ap.add_argument("--json", help="write the raw timings here")
    args = ap.parse_args(argv)
    import tapeflow as tf
    try:
        dev = tf.runtime.devices.get_device(DEVICE)
    except Exception as e:
        sys.exit(f"opencl_compare: {e}")
    print(f"tapeflow {tf.__version__}; {dev.name}: {dev.description}; NumPy {np.__version__}")

    def sync():
        dev.backend.synchronize(dev)

    rounds, min_time = (3, 0.05) if args.quick else (11, 0.3)
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    cases = []
    for key in keys:
        if key == "first_call":
            continue
        if key not in CASES:
            sys.exit(f"unknown case {key!r}; choose from {', '.join(CASES)}, first_call")
        c = CASES[key](tf)
        if c.impls:
            measure(c, sync, rounds, min_time, "opencl")
        cases.append(c)
    fc = first_call() if "first_call" in keys else None
    report(cases, fc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cases": {c.key: {"times": c.times, "ratios": c.ratios,
                                         "errors": c.errors} for c in cases},
                       "first_call": fc}, f, indent=1)
    return 1 if any(c.errors for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
