"""Dispatch overhead per device: the cost of one tiny op, with and without a tape.

Parameterised over device names; on a machine without a device its setup raises
NotImplementedError, which asv reports as "n/a" (skipped), not as a failure.
Every timing here has a NumPy peer in the same suite (``time_numpy_add``), so a
ratio can be read off one run (DESIGN.md section 6).
"""

import numpy as np

import tapeflow as tf

DEVICES = ["cpu:0", "gpu:0", "opencl:0"]


def _require(device):
    """Canonical name of ``device`` when it is usable here, else NotImplementedError."""
    available = {d.name for d in tf.list_devices()}
    gpus = tf.num_gpus()
    if device in available or (device.startswith("gpu:") and int(device[4:]) < gpus):
        return device
    raise NotImplementedError(f"device {device} is not available here "
                              f"(have: {', '.join(sorted(available))})")


class Dispatch:
    """``a + b`` and ``tf.add(a, b)`` on float32 tensors of shape (1,)."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, device):
        _require(device)
        with tf.device(device):
            self.a = tf.constant(np.ones(1, np.float32))
            self.b = tf.constant(np.full(1, 2.0, np.float32))
        self.a + self.b  # first call: kernel lookup caches, lazy device initialisation

    def time_add_operator(self, device):
        self.a + self.b

    def time_add_function(self, device):
        tf.add(self.a, self.b)

    def time_add_while_taped(self, device):
        with tf.GradientTape() as tape:
            tape.watch(self.a)
            self.a + self.b


class ScalarGradient:
    """Gradient of ``reduce_sum(x * x)`` for x of shape (10,) through GradientTape."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, device):
        _require(device)
        with tf.device(device):
            self.x = tf.constant(np.linspace(-1.0, 2.0, 10, dtype=np.float32))

    def time_tape_gradient(self, device):
        with tf.GradientTape() as tape:
            tape.watch(self.x)
            y = tf.reduce_sum(self.x * self.x)
        tape.gradient(y, self.x)


class NumpyPeer:
    """The same work in raw NumPy: the denominator of every ratio above."""

    def setup(self):
        self.a = np.ones(1, np.float32)
        self.b = np.full(1, 2.0, np.float32)
        self.x = np.linspace(-1.0, 2.0, 10, dtype=np.float32)

    def time_numpy_add(self):
        self.a + self.b

    def time_numpy_hand_gradient(self):
        (self.x * self.x).sum()
        2 * self.x
