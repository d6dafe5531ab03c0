"""Square matmul, n x n by n x n: time per call and achieved GFLOP/s (``track_``)."""

import time

import tapeflow as tf

from .common import DEVICES, check_dtype, device, rand, sync, warm


class MatMul:
    params = [DEVICES, ["float32"], [64, 512]]
    param_names = ["device", "dtype", "n"]

    def setup(self, name, dtype, n):
        self.dev = dev = device(name)
        dt = check_dtype(dev, dtype)
        with tf.device(name):
            self.a = tf.constant(rand((n, n), dt, seed=1))
            self.b = tf.constant(rand((n, n), dt, seed=2))
        warm(dev, lambda: tf.matmul(self.a, self.b))

    def time_matmul(self, name, dtype, n):
        tf.matmul(self.a, self.b)
        sync(self.dev)

    def track_gflops(self, name, dtype, n):
        """2 n^3 flops per call over the best of a few timed batches of calls."""
        flops = 2.0 * n ** 3
        reps = max(1, int(2e8 // flops))     # about 0.2 GFLOP a batch
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                tf.matmul(self.a, self.b)
            sync(self.dev)
            best = min(best, (time.perf_counter() - t0) / reps)
        return flops / best / 1e9

    track_gflops.unit = "GFLOP/s"
