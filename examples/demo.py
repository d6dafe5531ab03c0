"""A short tour of tapeflow on the CPU (the seeds' examples, run eagerly).

Run it with ``bash scripts/dev.sh demo`` (creates .venv/ and installs first) or,
once installed, ``.venv/bin/python examples/demo.py``.
"""

from __future__ import annotations

import time

import numpy as np

import tapeflow as tf

tfe = tf  # the seeds' `tfe.` spelling works too


def section(title):
    print(f"\n== {title} " + "=" * max(0, 60 - len(title)))


def main():
    t_start = time.perf_counter()
    print(f"tapeflow {tf.__version__} - executing eagerly: {tf.executing_eagerly()}")
    print("devices:", ", ".join(d.name for d in tf.list_devices()),
          f"(GPUs: {tf.num_gpus()})")

    section("ops run immediately")
    x = [[2.]]
    m = tf.matmul(x, x)
    print("tf.matmul([[2.]], [[2.]]) ->", m)
    a = tf.constant([[1, 2], [3, 4]])
    print("a * (a + 1) ->", a * tf.add(a, 1))
    print("np.multiply(a, a) ->", np.multiply(a, a).tolist(), "(NumPy accepts tensors)")

    section("Python control flow: Collatz from 12")
    a = tf.constant(12)
    steps = []
    while not tf.equal(a, 1):
        if tf.equal(a % 2, 0):
            a = a / 2
        else:
            a = 3 * a + 1
        steps.append(a)
    print(" -> ".join(str(int(s)) for s in steps), f"({len(steps)} steps)")
    print("last value:", steps[-1])

    section("gradients_function: derivatives of any order")

    def square(x):
        return tf.multiply(x, x)

    grad = tfe.gradients_function(square)
    gradgrad = tfe.gradients_function(lambda x: grad(x)[0])
    gradgradgrad = tfe.gradients_function(lambda x: gradgrad(x)[0])
    print("square(3.)       =", square(3.))
    print("d/dx   at 3.     =", grad(3.)[0])
    print("d2/dx2 at 3.     =", gradgrad(3.)[0])
    print("d3/dx3 at 3.     =", gradgradgrad(3.))

    section("GradientTape with a Variable")
    w = tf.Variable([[1.0]])
    with tf.GradientTape() as tape:
        loss = w * w
    print("d(w*w)/dw at w=1 ->", tape.gradient(loss, w))

    section("linear regression: fit y = 3x + 2 with GradientTape")
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(1000).astype(np.float32)
    ys = (3 * xs + 2 + rng.standard_normal(1000)).astype(np.float32)
    inputs, targets = tf.constant(xs), tf.constant(ys)
    W, B = tf.Variable(5.0, name="weight"), tf.Variable(10.0, name="bias")

    def mse():
        error = inputs * W + B - targets
        return tf.reduce_mean(tf.square(error))

    print(f"initial loss: {float(mse()):.3f}")
    for step in range(200):
        with tf.GradientTape() as tape:
            loss = mse()
        dW, dB = tape.gradient(loss, [W, B])
        W.assign_sub(0.05 * dW)
        B.assign_sub(0.05 * dB)
        if step % 50 == 0:
            print(f"  step {step:3d}: loss {float(loss):.3f}")
    print(f"final loss: {float(mse()):.3f}   W = {float(W):.3f}, B = {float(B):.3f}"
          "   (truth: W = 3, B = 2)")

    print(f"\ndemo finished in {time.perf_counter() - t_start:.2f} s")


if __name__ == "__main__":
    main()
