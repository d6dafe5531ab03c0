"""Neural-network ops: conv2d, max and average pooling, sparse softmax cross-entropy,
by device, dtype and batch size (NHWC, as the seeds)."""

import numpy as np

import tapeflow as tf

from .common import DEVICES, check_dtype, device, rand, sync, warm


class Conv2D:
    """3x3 convolution, 28x28x8 -> 28x28x16, stride 1, SAME padding."""

    params = [DEVICES, ["float32"], [1, 16]]
    param_names = ["device", "dtype", "batch"]

    def setup(self, name, dtype, batch):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        with tf.device(name):
            self.x = tf.constant(rand((batch, 28, 28, 8), dt, seed=1))
            self.w = tf.constant(rand((3, 3, 8, 16), dt, seed=2))
        warm(dev, self._conv)

    def _conv(self):
        return tf.nn.conv2d(self.x, self.w, strides=1, padding="SAME")

    def time_conv2d(self, name, dtype, batch):
        self._conv()
        sync(self.dev)


class Pooling:
    """2x2 pooling with stride 2 of batch x 28x28x16."""

    params = [DEVICES, ["float32"], [16]]
    param_names = ["device", "dtype", "batch"]

    def setup(self, name, dtype, batch):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        with tf.device(name):
            self.x = tf.constant(rand((batch, 28, 28, 16), dt))
        warm(dev, lambda: tf.nn.max_pool2d(self.x, 2, 2, "VALID"))
        warm(dev, lambda: tf.nn.avg_pool2d(self.x, 2, 2, "VALID"))

    def time_max_pool(self, name, dtype, batch):
        tf.nn.max_pool2d(self.x, 2, 2, "VALID")
        sync(self.dev)

    def time_avg_pool(self, name, dtype, batch):
        tf.nn.avg_pool2d(self.x, 2, 2, "VALID")
        sync(self.dev)


class SoftmaxCrossEntropy:
    """Mean sparse softmax cross-entropy of batch x 1000 logits (forward only)."""

    params = [DEVICES, ["float32"], [64, 1024]]
    param_names = ["device", "dtype", "batch"]

    def setup(self, name, dtype, batch):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        rng = np.random.default_rng(0)
        with tf.device(name):
            self.logits = tf.constant(rand((batch, 1000), dt, low=-5, high=5))
            self.labels = tf.constant(rng.integers(0, 1000, batch).astype(np.int64))
        warm(dev, self._xent)

    def _xent(self):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=self.labels, logits=self.logits))

    def time_sparse_softmax_cross_entropy(self, name, dtype, batch):
        self._xent()
        sync(self.dev)
