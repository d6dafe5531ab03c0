"""Reductions of an n x n matrix: the sum of everything, and the max of each row."""

import tapeflow as tf

from .common import DEVICES, check_dtype, device, rand, sync, warm


class Reductions:
    params = [DEVICES, ["float32"], [256, 2048]]
    param_names = ["device", "dtype", "n"]

    def setup(self, name, dtype, n):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        with tf.device(name):
            self.x = tf.constant(rand((n, n), dt))
        warm(dev, lambda: tf.reduce_sum(self.x))
        warm(dev, lambda: tf.reduce_max(self.x, axis=1))

    def time_reduce_sum_all(self, name, dtype, n):
        tf.reduce_sum(self.x)
        sync(self.dev)

    def time_reduce_max_rows(self, name, dtype, n):
        tf.reduce_max(self.x, axis=1)
        sync(self.dev)
