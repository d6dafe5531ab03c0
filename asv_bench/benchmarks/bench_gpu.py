"""The two opt-in CUDA paths, tracked on ``cuda:0`` (n/a on a machine without a GPU):

* ``tf.function`` replayed as one captured CUDA graph
  (``tf.config.experimental.enable_cuda_graphs``) against the plain replay, on the
  MLP SGD step (batch 64; one-hot labels: the sparse cross-entropy's host-side label
  check makes a graph impossible, docs/backends.md) and the 10-op elementwise chain on
  16M floats (bytes/s is what matters there: it must not regress);
* ``Conv2D`` forward + both gradients through cuDNN
  (``tf.config.experimental.enable_cudnn_convolutions``) against im2col, on the
  ``gpu_compare`` case (batch 64, 56x56x64 -> 64, 3x3, SAME), strict float32.

Each ``setup`` checks that the path it times is the one that runs (the capture state,
the cuDNN plan) and that its result equals the other path's.
"""

import numpy as np

import tapeflow as tf

from .bench_function import chain10
from .common import DEVICES, LR, MLP, device, rand, sync, warm


def _cuda(name):
    """The device ``name`` when it is a CUDA device, else NotImplementedError (asv: n/a;
    the classes take every device first, as the rest of the suite does)."""
    if not name.startswith("cuda"):
        raise NotImplementedError(f"{name}: CUDA only")
    return device(name)


class OneHotMLP(MLP):
    """:class:`~.common.MLP` with one-hot labels (softmax_cross_entropy_with_logits)."""

    def __init__(self, dev, batch):
        super().__init__(dev, batch)
        with tf.device(dev.name):
            self.y1 = tf.one_hot(self.y, 10)

    def sgd_step(self):
        with tf.GradientTape() as tape:
            W1, b1, W2, b2, W3, b3 = self.params
            h1 = tf.nn.relu(tf.matmul(self.x, W1) + b1)
            h2 = tf.nn.relu(tf.matmul(h1, W2) + b2)
            logits = tf.matmul(h2, W3) + b3
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(
                labels=self.y1, logits=logits))
        grads = tape.gradient(loss, self.params)
        for p, g in zip(self.params, grads):
            p.assign_sub(LR * g)
        return loss


class CudaGraphFunction:
    """A tf.function replayed plainly vs captured as a CUDA graph."""

    params = [DEVICES, ["mlp_sgd_b64", "chain10_16M"]]
    param_names = ["device", "workload"]

    def setup(self, name, workload):
        self.dev = dev = _cuda(name)
        fns = {}
        for captured in (False, True):
            tf.config.experimental.enable_cuda_graphs(captured)
            if workload == "mlp_sgd_b64":
                model = OneHotMLP(dev, 64)
                fn = tf.function(model.sgd_step)
                args = ()
            else:
                with tf.device(name):
                    args = (tf.constant(rand(1 << 24, "float32", seed=1)),
                            tf.constant(rand(1 << 24, "float32", seed=2)))
                fn = tf.function(chain10)
            first = [float(np.asarray(fn(*args).numpy()).ravel()[0]) for _ in range(4)]
            fns[captured] = (fn, args, first)
        tf.config.experimental.enable_cuda_graphs(True)
        fn, args, got = fns[True]
        info = fn.get_concrete_function(*args).cuda_graph_info
        if info is None or info.state != "captured":
            raise AssertionError(f"the function was not captured: {info}")
        want = fns[False][2]
        if not np.allclose(got, want, rtol=1e-4):
            raise AssertionError(f"captured results {got} != plain replay {want}")
        self.plain, self.captured = fns[False], fns[True]
        warm(dev, lambda: self.plain[0](*self.plain[1]))
        warm(dev, lambda: self.captured[0](*self.captured[1]))

    def teardown(self, name, workload):
        tf.config.experimental.enable_cuda_graphs(False)

    def time_plain_replay(self, name, workload):
        self.plain[0](*self.plain[1])        # (traced with the switch off: no capture)
        sync(self.dev)

    def time_cuda_graph(self, name, workload):
        self.captured[0](*self.captured[1])
        sync(self.dev)


class CudnnConv2D:
    """conv2d forward + input and filter gradients: cuDNN vs im2col (strict float32)."""

    params = [DEVICES, ["im2col", "cudnn"]]
    param_names = ["device", "path"]

    def setup(self, name, path):
        self.dev = dev = _cuda(name)
        tf.config.experimental.enable_tensor_float_32_execution(False)
        with tf.device(name):
            self.x = tf.constant(rand((64, 56, 56, 64), "float32", seed=1))
            self.w = tf.constant(rand((3, 3, 64, 64), "float32", seed=2) * 0.05)
        outs = {}
        for p in ("im2col", "cudnn"):
            tf.config.experimental.enable_cudnn_convolutions(p == "cudnn")
            outs[p] = [t.numpy() for t in self._step()]
        for a, b in zip(outs["cudnn"], outs["im2col"]):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
        tf.config.experimental.enable_cudnn_convolutions(path == "cudnn")
        warm(dev, self._step)

    def teardown(self, name, path):
        tf.config.experimental.enable_cudnn_convolutions(None)

    def _step(self):
        with tf.GradientTape() as tape:
            tape.watch([self.x, self.w])
            y = tf.nn.conv2d(self.x, self.w, strides=1, padding="SAME")
            loss = tf.reduce_sum(y * y)
        return (y, *tape.gradient(loss, [self.x, self.w]))

    def time_forward_backward(self, name, path):
        self._step()
        sync(self.dev)
