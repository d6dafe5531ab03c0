"""``tapeflow.function``: traced (recorded once, replayed without the Python) against
eager, on every device: the MLP SGD step (batch 64), a chain of 10 elementwise ops
(where elementwise fusion shows), and the Collatz loop written with
``tf.while_loop`` + ``tf.cond`` against the same loop in eager Python.

Each ``setup`` traces the function (the first call), checks that the traced result
equals the eager one, and warms both: tracing costs are not what is tracked (asv
times steady-state calls); ``time_traced`` is a replay.
"""

import numpy as np

import tapeflow as tf

from .common import DEVICES, MLP, device, rand, sync, warm


class FunctionMLPStep:
    """One SGD step of the 784-256-256-10 MLP (forward, tape gradient, assign_sub of
    six Variables), eager and as a tf.function."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        # the same first step, eager and traced, from the same weights
        eager, traced = MLP(dev, 64), MLP(dev, 64)
        step = tf.function(traced.sgd_step)
        want, got = float(eager.sgd_step()), float(step())
        got2 = float(step())                                # a replay (second step)
        want2 = float(eager.sgd_step())
        if not np.allclose([got, got2], [want, want2], rtol=1e-4):
            raise AssertionError(f"traced MLP losses {got}, {got2} != eager {want}, {want2}")
        self.eager, self.step = eager.sgd_step, step
        warm(dev, self.eager)
        warm(dev, self.step)

    def time_eager(self, name):
        self.eager()
        sync(self.dev)

    def time_traced(self, name):
        self.step()
        sync(self.dev)


def chain10(a, b):
    """10 elementwise ops (two inputs, Python-scalar operands broadcast)."""
    return tf.abs((tf.tanh(tf.exp(-(a * a)) * b + 1.0) - a) * 0.5 + b)


class FunctionElementwiseChain:
    """:func:`chain10` on float32 tensors of ``size`` elements: eager is 10 kernels and
    10 intermediates; traced replays them (fused into fewer kernels where the graph
    passes fuse elementwise chains)."""

    params = [DEVICES, [1_000, 1_000_000]]
    param_names = ["device", "size"]

    def setup(self, name, size):
        self.dev = dev = device(name)
        with tf.device(name):
            self.a = tf.constant(rand(size, "float32", seed=1))
            self.b = tf.constant(rand(size, "float32", seed=2))
        self.traced = tf.function(chain10)
        want = chain10(self.a, self.b).numpy()
        for _ in range(2):                                  # the tracing call, a replay
            got = self.traced(self.a, self.b).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        warm(dev, lambda: chain10(self.a, self.b))
        warm(dev, lambda: self.traced(self.a, self.b))

    def time_eager(self, name, size):
        chain10(self.a, self.b)
        sync(self.dev)

    def time_traced(self, name, size):
        self.traced(self.a, self.b)
        sync(self.dev)


COLLATZ_START = 27
COLLATZ_STEPS = 111


def _collatz_body(a, k):
    a = tf.cond(tf.equal(a % 2, 0), lambda: a // 2, lambda: 3 * a + 1)
    return a, k + 1


@tf.function
def collatz_while(a0):
    """The Collatz loop as ``tf.while_loop`` (+ ``tf.cond``): ``(1, steps)``."""
    return tf.while_loop(lambda a, k: tf.not_equal(a, 1), _collatz_body, [a0, tf.constant(0)])


def collatz_eager(a):
    """The seeds' loop: Python ``while``/``if`` on scalar tensor values (eager only)."""
    k = 0
    while not tf.equal(a, 1):
        a = a // 2 if tf.equal(a % 2, 0) else 3 * a + 1
        k += 1
    return a, k


class FunctionCollatz:
    """The Collatz loop from 27 (111 iterations) per call: ``tf.while_loop`` in a
    tf.function vs the eager Python loop on scalar tensors."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        with tf.device(name):
            self.start = tf.constant(COLLATZ_START)
            a, k = collatz_eager(self.start)
            if int(a) != 1 or k != COLLATZ_STEPS:
                raise AssertionError(f"eager Collatz: {int(a)} after {k} steps")
            for _ in range(2):                              # the tracing call, a replay
                a, k = collatz_while(self.start)
                if int(a) != 1 or int(k) != COLLATZ_STEPS:
                    raise AssertionError(f"while_loop Collatz: {int(a)} after {int(k)} steps")
        warm(dev, lambda: collatz_while(self.start))

    def time_eager(self, name):
        with tf.device(self.dev.name):
            collatz_eager(self.start)
        sync(self.dev)

    def time_while_loop(self, name):
        with tf.device(self.dev.name):
            collatz_while(self.start)
        sync(self.dev)
