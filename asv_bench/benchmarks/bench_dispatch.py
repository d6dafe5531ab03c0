"""Dispatch overhead per device: the cost of one tiny op (float32, shape (1,)).

``a + b`` with no tape and while a tape records it, a built-in unary op next to the
example plugin's op (``tf.ops.gelu.gelu`` from ``plugins/gelu``, which dispatches
through the same path as the built-ins; ``bench_plugins.PluginDispatch`` times a
plugin op with Tanh's own kernels), and the raw NumPy peer as the denominator of the
ratios. Every timing includes one synchronisation (a no-op on ``cpu:0``), so on an
asynchronous device this is the latency of one small op, launch included.
"""

import numpy as np

import tapeflow as tf

from .common import DEVICES, device, rand, sync, warm


class Dispatch:
    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        with tf.device(name):
            self.a = tf.constant(rand(1, "float32", seed=1))
            self.b = tf.constant(rand(1, "float32", seed=2))
        try:
            self.gelu = tf.ops.gelu.gelu
        except AttributeError as e:
            raise NotImplementedError(
                f"the example plugin tapeflow-gelu is not installed: {e}") from None
        warm(dev, lambda: self.a + self.b)
        warm(dev, lambda: tf.tanh(self.a))
        warm(dev, lambda: self.gelu(self.a))
        warm(dev, lambda: self.time_add_recording_tape(name))

    def time_add_no_tape(self, name):
        self.a + self.b
        sync(self.dev)

    def time_add_recording_tape(self, name):
        with tf.GradientTape() as tape:
            tape.watch(self.a)
            self.a + self.b
        sync(self.dev)

    def time_builtin_tanh(self, name):
        tf.tanh(self.a)
        sync(self.dev)

    def time_plugin_gelu(self, name):
        self.gelu(self.a)
        sync(self.dev)


class NumpyPeer:
    """The same ``a + b`` in raw NumPy: the denominator of the dispatch ratio."""

    def setup(self):
        self.a = np.full(1, 0.5, np.float32)
        self.b = np.full(1, 2.0, np.float32)

    def time_numpy_add(self):
        self.a + self.b
