"""Hessian-vector products three ways (docs/autodiff.md), on an MLP loss with
n = 100 inputs: reverse-over-reverse (a tape over a tape), forward-over-reverse
(ForwardAccumulator over a tape) and reverse-over-forward (a tape over a
ForwardAccumulator). Prints the median time per HVP and checks the three agree.

    .venv/bin/python benchmarks/second_derivatives.py
"""

from __future__ import annotations

import time

import numpy as np

import tapeflow as tf

rng = np.random.default_rng(0)
W1 = tf.constant(rng.standard_normal((100, 64)) * 0.1)
W2 = tf.constant(rng.standard_normal((64, 1)) * 0.1)


def loss(x):
    h = tf.tanh(tf.matmul(tf.reshape(x, [1, 100]), W1))
    return tf.reduce_sum(tf.matmul(h, W2) ** 2)


def rev_rev(x, v):
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = loss(x)
        g = inner.gradient(y, x)
        gv = tf.reduce_sum(g * v)
    return outer.gradient(gv, x)


def fwd_rev(x, v):
    with tf.autodiff.ForwardAccumulator(x, v) as acc:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = loss(x)
        g = tape.gradient(y, x)
    return acc.jvp(g)


def rev_fwd(x, v):
    with tf.GradientTape() as tape:
        tape.watch(x)
        with tf.autodiff.ForwardAccumulator(x, v) as acc:
            y = loss(x)
        jv = acc.jvp(y)
    return tape.gradient(jv, x)


def median_us(fn, *args, reps=200):
    for _ in range(10):
        fn(*args)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*args)
        ts.append(time.perf_counter() - t0)
    return 1e6 * float(np.median(ts))


def main():
    x = tf.constant(rng.standard_normal(100))
    v = tf.constant(rng.standard_normal(100))
    ref = rev_rev(x, v).numpy()
    for name, fn in (("reverse-over-reverse", rev_rev), ("forward-over-reverse", fwd_rev),
                     ("reverse-over-forward", rev_fwd)):
        np.testing.assert_allclose(fn(x, v).numpy(), ref, rtol=1e-8, atol=1e-12)
        print(f"{name:22s} {median_us(fn, x, v):8.0f} us per Hessian-vector product")
    t_loss = median_us(loss, x)
    print(f"{'(the loss alone)':22s} {t_loss:8.0f} us")


if __name__ == "__main__":
    main()
