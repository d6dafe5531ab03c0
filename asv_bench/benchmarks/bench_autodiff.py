"""Automatic differentiation: the gradient of a small function (dispatch- and
tape-bound), the backward pass alone of the MLP and of the CNN (forward recorded once
on a persistent tape in setup), and the peak memory of a persistent tape against a
non-persistent one."""

import numpy as np

import tapeflow as tf

from .common import CNN, DEVICES, MLP, device, rand, sync, warm


class SmallGradient:
    """``tf.gradients_function`` of ``reduce_sum(sin(x) * x)``, x float32 (10,)."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        with tf.device(name):
            self.x = tf.constant(np.linspace(-1.0, 2.0, 10, dtype=np.float32))
        self.grad = tf.gradients_function(lambda x: tf.reduce_sum(tf.sin(x) * x))
        warm(dev, lambda: self.grad(self.x))

    def time_gradients_function(self, name):
        self.grad(self.x)
        sync(self.dev)


class Backward:
    """``tape.gradient`` of the recorded loss with respect to every trainable
    variable: MLP batch 64, the seeds' CNN batch 8."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        self.mlp = MLP(dev, 64)
        self.cnn = CNN(dev, 8)
        with tf.device(name):
            with tf.GradientTape(persistent=True) as self.mlp_tape:
                self.mlp_loss = self.mlp.loss()
            with tf.GradientTape(persistent=True) as self.cnn_tape:
                self.cnn_loss = self.cnn.loss()
        self.cnn_vars = self.cnn.model.trainable_variables
        warm(dev, lambda: self.mlp_tape.gradient(self.mlp_loss, self.mlp.params))
        warm(dev, lambda: self.cnn_tape.gradient(self.cnn_loss, self.cnn_vars))

    def time_mlp_backward(self, name):
        self.mlp_tape.gradient(self.mlp_loss, self.mlp.params)
        sync(self.dev)

    def time_cnn_backward(self, name):
        self.cnn_tape.gradient(self.cnn_loss, self.cnn_vars)
        sync(self.dev)


class TapeMemory:
    """Peak resident memory of forward + gradient of a 16-op chain on a 512x512
    float32 matrix (1 MiB per intermediate). A persistent tape keeps every
    intermediate until it is dropped and is asked for two gradients; a non-persistent
    one for one. (asv's peakmem is the whole process's peak: imports and setup are in
    both, the difference is the tape.) On devices whose memory is not the host's,
    this tracks the host side only."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = device(name)
        with tf.device(name):
            self.x = tf.constant(rand((512, 512), "float32"))
        warm(self.dev, lambda: self._run(False))

    def _run(self, persistent):
        with tf.GradientTape(persistent=persistent) as tape:
            tape.watch(self.x)
            y = self.x
            for _ in range(8):
                y = tf.tanh(y) * 1.01
            loss = tf.reduce_sum(y)
        g = tape.gradient(loss, self.x)
        if persistent:
            g = g + tape.gradient(loss, self.x)
        sync(self.dev)
        return g

    def peakmem_persistent_tape(self, name):
        self._run(True)

    def peakmem_non_persistent_tape(self, name):
        self._run(False)


class Jacobian:
    """``tape.jacobian`` of a 100->100 tanh layer (a 100x100 Jacobian): all rows in one
    vectorised backward pass (the default) against the row-by-row loop."""

    params = [DEVICES, [True, False]]
    param_names = ["device", "vectorized"]

    def setup(self, name, vectorized):
        self.dev = dev = device(name)
        with tf.device(name):
            w = tf.constant(rand((100, 100)) * 0.1)
            b = tf.constant(rand((100,)))
            self.x = x = tf.constant(rand((100,)))
            with tf.GradientTape(persistent=True) as self.tape:
                self.tape.watch(x)
                self.y = tf.tanh(tf.reshape(tf.matmul(x[None], w), (100,)) + b)
        warm(dev, lambda: self.tape.jacobian(self.y, self.x, experimental_use_pfor=vectorized))

    def time_jacobian(self, name, vectorized):
        self.tape.jacobian(self.y, self.x, experimental_use_pfor=vectorized)
        sync(self.dev)


class PerExampleGradients:
    """Gradients of the MLP's loss for each of 64 examples (``tf.vectorized_map`` over a
    per-example ``GradientTape``), against one gradient of the batch."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        self.mlp = MLP(dev, 64)
        mlp = self.mlp

        def one(e):
            with tf.GradientTape() as tape:
                loss = mlp.loss_of(e[0][None], e[1][None])
            return tape.gradient(loss, mlp.params)
        self.one = one
        warm(dev, self.per_example)

    def per_example(self):
        with tf.device(self.dev.name):
            return tf.vectorized_map(self.one, (self.mlp.x, self.mlp.y))

    def time_per_example(self, name):
        self.per_example()
        sync(self.dev)
