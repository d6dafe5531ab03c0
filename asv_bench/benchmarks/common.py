"""Shared helpers of the asv suite: devices, synchronisation, models.

Every benchmark class is parameterised by device first (``DEVICES``), then dtype and
size. ``setup`` calls :func:`device` (``NotImplementedError`` for a device this machine
lacks, so asv reports "n/a", not a failure) and :func:`check_dtype`, builds its inputs
on the device, and runs the measured thing once (:func:`warm`): the first call of an
op compiles kernels (OpenCL) and fills dispatch caches, which is not what we track. A
missing kernel raises tapeflow's ``UnimplementedError``, a ``NotImplementedError``
too, so a backend that lacks an op shows "n/a" for it; any other error fails the
benchmark.

Every ``time_`` method ends with :func:`sync`: asynchronous devices (OpenCL, CUDA)
return from an op before the kernel has run, and without it asv would time the
enqueueing only. On ``cpu:0`` it is a no-op method call (a few tens of ns).

This module has no ``time_``/``peakmem_``/``track_`` names, so asv finds no benchmark
in it (asv looks at every class a module holds, imported ones included, so a helper
class must never get a method with such a name).
"""

import math

import numpy as np

import tapeflow as tf

#: Device names every device-parameterised benchmark runs on; unavailable ones are n/a.
DEVICES = ["cpu:0", "opencl:0", "cuda:0"]


def device(name):
    """The :class:`tapeflow.runtime.devices.Device` called ``name``, or NotImplementedError
    (asv: skipped) naming what this machine has instead."""
    try:
        return tf.runtime.devices.get_device(name)
    except Exception as e:  # NotFoundError: not on this machine
        raise NotImplementedError(f"device {name} is not available here: {e}") from None


def check_dtype(dev, dtype):
    """NotImplementedError when ``dev`` cannot hold ``dtype`` (float64 on a device
    without fp64, say); returns the NumPy dtype."""
    dt = np.dtype(dtype)
    reason = dev.backend.dtype_unsupported(dev, dt)
    if reason:
        raise NotImplementedError(f"{dev.name} cannot hold {dt.name}: {reason}")
    return dt


def sync(dev):
    """Wait until everything queued on ``dev`` has run."""
    dev.backend.synchronize(dev)


def warm(dev, fn, times=2):
    """Run ``fn`` ``times`` times and synchronise (kernel compilation, caches)."""
    for _ in range(times):
        fn()
    sync(dev)


def rand(shape, dtype="float32", seed=0, low=-1.0, high=1.0):
    """A reproducible host array (uniform in [low, high))."""
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=shape).astype(dtype)


# --- models (the same as benchmarks/compare.py) ----------------------------------------------

MLP_SIZES = (784, 256, 256, 10)
LR = 0.01


class MLP:
    """The 784-256-256-10 ReLU MLP with mean sparse softmax cross-entropy, as plain
    Variables on ``dev`` (what a user writes without Keras)."""

    def __init__(self, dev, batch, dtype="float32", seed=0):
        rng = np.random.default_rng(seed)
        self.dev = dev
        with tf.device(dev.name):
            self.params = []
            for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
                w = rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)
                self.params += [tf.Variable(w.astype(dtype)),
                                tf.Variable(np.zeros(fan_out, dtype))]
            self.x = tf.constant(rng.standard_normal((batch, MLP_SIZES[0])).astype(dtype))
            self.y = tf.constant(rng.integers(0, MLP_SIZES[-1], batch).astype(np.int64))

    def loss(self):
        return self.loss_of(self.x, self.y)

    def loss_of(self, x, y):
        W1, b1, W2, b2, W3, b3 = self.params
        h1 = tf.nn.relu(tf.matmul(x, W1) + b1)
        h2 = tf.nn.relu(tf.matmul(h1, W2) + b2)
        logits = tf.matmul(h2, W3) + b3
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))

    def sgd_step(self):
        with tf.device(self.dev.name):
            with tf.GradientTape() as tape:
                loss = self.loss()
            grads = tape.gradient(loss, self.params)
            for p, g in zip(self.params, grads):
                p.assign_sub(LR * g)
        return loss


class CNN:
    """The seeds' CNN (guide): Conv2D(16, 3x3, relu) x2, GlobalAveragePooling2D,
    Dense(10), on 28x28x1 images, trained with Adam; built on ``dev``."""

    def __init__(self, dev, batch, dtype="float32", seed=0):
        rng = np.random.default_rng(seed)
        self.dev = dev
        tf.random.set_seed(seed)
        with tf.device(dev.name):
            self.model = tf.keras.Sequential([
                tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                tf.keras.layers.Conv2D(16, [3, 3], activation="relu"),
                tf.keras.layers.GlobalAveragePooling2D(),
                tf.keras.layers.Dense(10)])
            self.x = tf.constant(rng.random((batch, 28, 28, 1)).astype(dtype))
            self.y = tf.constant(rng.integers(0, 10, batch).astype(np.int64))
            self.model(self.x)
            self.opt = tf.train.AdamOptimizer()

    def loss(self):
        return tf.losses.sparse_softmax_cross_entropy(self.y, self.model(self.x, training=True))

    def adam_step(self):
        with tf.device(self.dev.name):
            with tf.GradientTape() as tape:
                loss = self.loss()
            variables = self.model.trainable_variables
            grads = tape.gradient(loss, variables)
            self.opt.apply_gradients(zip(grads, variables))
        return loss
