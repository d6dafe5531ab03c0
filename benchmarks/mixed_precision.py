"""Mixed-precision training of the digits MLP: float32 vs mixed_bfloat16 vs
mixed_float16 (with a LossScaleOptimizer), same seed, data and epochs.

Prints the test accuracy of each and the mean training step time (median of the
epochs' per-step times; a benchmark, not a test). Issue 21 asks mixed precision to
come within 1 accuracy point of float32 on the CPU.

    .venv/bin/python benchmarks/mixed_precision.py [--epochs 30] [--device cpu:0]

On the NumPy backend bfloat16 and float16 are computed in float32 (NumPy has no
16-bit BLAS): the step time shows the cost of the casts, not a speed-up; on a GPU
with native 16-bit math the mixed policies are the faster ones.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tapeflow as tf


def build(policy, hidden):
    tf.keras.mixed_precision.set_global_policy(policy)
    try:
        return tf.keras.Sequential([
            tf.keras.layers.Dense(hidden, activation="relu", input_shape=(64,)),
            tf.keras.layers.Dense(hidden, activation="relu"),
            # the logits in float32: the softmax cross-entropy runs in float32 (Keras's advice)
            tf.keras.layers.Dense(10, dtype="float32"),
        ])
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def run(policy, data, args):
    (x_train, y_train), (x_test, y_test) = data
    tf.set_random_seed(args.seed)
    model = build(policy, args.hidden)
    opt = tf.keras.optimizers.Adam(args.learning_rate)
    if policy == "mixed_float16":
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    model.compile(optimizer=opt,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(args.seed)
    n = len(x_train)
    step_times = []
    for _ in range(args.epochs):
        order = rng.permutation(n)
        t0 = time.perf_counter()
        steps = 0
        for i in range(0, n, args.batch_size):
            idx = order[i:i + args.batch_size]
            loss = model.train_on_batch(x_train[idx], y_train[idx])
            steps += 1
        float(loss)         # waits for the device
        step_times.append((time.perf_counter() - t0) / steps)
    logits = model.predict_on_batch(x_test)
    acc = float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))
    kernel = model.layers[0].kernel
    return acc, statistics.median(step_times), kernel.dtype.name


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default=None, help="e.g. cpu:0, opencl:0, cuda:0")
    args = p.parse_args(argv)
    (x_train, y_train), (x_test, y_test) = tf.datasets.load_digits()
    def flat(x):
        return (np.asarray(x, np.float32) / 255.0).reshape(len(x), -1)
    data = ((flat(x_train), np.asarray(y_train, np.int32)),
            (flat(x_test), np.asarray(y_test, np.int32)))
    device = args.device or str(tf.config.get_default_device())
    print(f"digits MLP 64-{args.hidden}-{args.hidden}-10, {args.epochs} epochs, batch "
          f"{args.batch_size}, Adam({args.learning_rate}), seed {args.seed}, on {device}")
    results = {}
    # float16's first steps overflow at the initial loss scale 2**15 (by design: the
    # LossScaleOptimizer skips them and halves the scale); NumPy's warnings are muted
    with tf.device(device), np.errstate(over="ignore", invalid="ignore"):
        for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
            acc, step, vdt = run(policy, data, args)
            results[policy] = acc
            print(f"{policy:>15}: test accuracy {100 * acc:6.2f}%  step {1e3 * step:7.3f} ms"
                  f"  (variables {vdt})", flush=True)
    for policy in ("mixed_bfloat16", "mixed_float16"):
        gap = 100 * (results["float32"] - results[policy])
        print(f"{policy} vs float32: {gap:+.2f} accuracy points "
              f"({'within' if abs(gap) <= 1.0 else 'NOT within'} 1 point)")


if __name__ == "__main__":
    main()
