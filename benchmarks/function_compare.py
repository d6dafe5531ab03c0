"""The MLP training step on ``cpu:0``: eager tapeflow vs ``tf.function`` vs NumPy.

The 784-256-256-10 ReLU MLP SGD step with batch 64 of ``benchmarks/compare.py``
(``case_mlp``; its data and hand-written NumPy step are reused). The traced variant
runs the whole step -- forward, ``GradientTape``, gradient, ``assign_sub`` -- inside
one ``tf.function``; ``--passes`` picks the graph passes (default: each set below).
Rounds are interleaved; the figure is the median of the per-round ratios to NumPy.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/function_compare.py --rounds 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import LR, _mlp_init, _np_mlp_step, _tf_xent  # noqa: E402


def build_tf(tf, params0, xn, yn, traced, passes=None, optimize=True):
    params = [tf.Variable(p.copy()) for p in params0]
    W1, b1, W2, b2, W3, b3 = params
    x = tf.constant(xn)
    labels = tf.constant(yn)

    def step():
        with tf.GradientTape() as tape:
            h1 = tf.nn.relu(tf.matmul(x, W1) + b1)
            h2 = tf.nn.relu(tf.matmul(h1, W2) + b2)
            logits = tf.matmul(h2, W3) + b3
            loss = tf.reduce_mean(_tf_xent(tf, labels, None, logits))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(LR * g)
        return loss
    fn = tf.function(step, optimize=optimize, passes=passes) if traced else step
    return fn, params


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--steps", type=int, default=100, help="steps per sample")
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args(argv)
    import tapeflow as tf
    from tapeflow.tracing import graph_passes

    params0, xn, yn = _mlp_init(args.batch)
    rows = np.arange(args.batch)
    # correctness: one step of each against NumPy's
    ref = [p.copy() for p in params0]
    ref_loss = _np_mlp_step(ref, xn, yn, rows)
    all_passes = tuple(graph_passes.PASSES)
    variants = {"eager": dict(traced=False),
                "traced (all passes)": dict(traced=True),
                "traced (no fuse)": dict(traced=True,
                                         passes=tuple(p for p in all_passes if p != "fuse")),
                "traced (dce only)": dict(traced=True, passes=("dce",)),
                "traced (no passes)": dict(traced=True, optimize=False)}
    impls = {}
    for name, kw in variants.items():
        fn, params = build_tf(tf, params0, xn, yn, **kw)
        loss = float(fn())
        assert abs(loss - ref_loss) <= 1e-4 * max(1.0, abs(ref_loss)), (name, loss, ref_loss)
        for p, r in zip(params, ref):
            np.testing.assert_allclose(p.numpy(), r, rtol=1e-3, atol=1e-5, err_msg=name)
        impls[name] = fn
    nparams = [p.copy() for p in params0]
    impls["numpy"] = lambda: _np_mlp_step(nparams, xn, yn, rows)
    for f in impls.values():       # warm-up
        for _ in range(3):
            f()
    samples = {k: [] for k in impls}
    names = list(impls)
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            f = impls[k]
            t = time.perf_counter()
            for _ in range(args.steps):
                f()
            samples[k].append((time.perf_counter() - t) / args.steps)
    print(f"MLP 784-256-256-10 SGD step, batch {args.batch}, cpu:0; {args.rounds} interleaved "
          f"rounds of {args.steps} steps; passes available: {', '.join(all_passes)}")
    for k in names:
        s = samples[k]
        ratio = statistics.median(a / b for a, b in zip(s, samples["numpy"]))
        print(f"  {k:22s} median {statistics.median(s) * 1e6:8.1f} us   "
              f"min {min(s) * 1e6:8.1f} us   ratio to NumPy (median of rounds) {ratio:.3f}x")


if __name__ == "__main__":
    main()
