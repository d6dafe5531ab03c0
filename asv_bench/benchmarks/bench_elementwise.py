"""Elementwise chains: ``tanh(exp(-(a * a)) * b + 1) - a`` (6 ops, broadcasting
none), by device, dtype and number of elements. Small sizes measure per-op overhead,
large ones memory bandwidth and kernel quality."""

import tapeflow as tf

from .common import DEVICES, check_dtype, device, rand, sync, warm


class ElementwiseChain:
    params = [DEVICES, ["float32", "float64"], [1_000, 1_000_000]]
    param_names = ["device", "dtype", "size"]

    def setup(self, name, dtype, size):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        with tf.device(name):
            self.a = tf.constant(rand(size, dt, seed=1))
            self.b = tf.constant(rand(size, dt, seed=2))
        warm(dev, self._chain)

    def _chain(self):
        a, b = self.a, self.b
        return tf.tanh(tf.exp(-(a * a)) * b + 1.0) - a

    def time_chain(self, name, dtype, size):
        self._chain()
        sync(self.dev)
