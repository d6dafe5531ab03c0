"""float32/float64 MatMul on an ``opencl`` device against NumPy, in one process.

    .venv/bin/python benchmarks/opencl_matmul.py                 # 1024^2 float32 on opencl:0
    .venv/bin/python benchmarks/opencl_matmul.py --n 512 --dtype float64 --repeat 15
    .venv/bin/python benchmarks/opencl_matmul.py --transpose-b   # B read through a transposed view

Each timing is the median of ``--repeat`` calls after warm-up; the OpenCL clock stops
after ``queue.finish()``. NumPy and OpenCL runs are interleaved so that load from other
processes hits both alike. Prints GFLOP/s of both and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import tapeflow as tf


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="opencl:0")
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--transpose-b", action="store_true")
    args = p.parse_args()
    n, dt = args.n, np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dt)
    b = rng.standard_normal((n, n)).astype(dt)
    dev = tf.runtime.devices.get_device(args.device)
    with tf.device(dev):
        ta, tb = tf.constant(a), tf.constant(b)
    queue = dev.handle.queue

    def run_cl():
        t0 = time.perf_counter()
        out = tf.matmul(ta, tb, transpose_b=args.transpose_b)
        queue.finish()
        return time.perf_counter() - t0, out

    def run_np():
        t0 = time.perf_counter()
        np.matmul(a, b.T if args.transpose_b else b)
        return time.perf_counter() - t0

    _, out = run_cl()
    ref = a @ (b.T if args.transpose_b else b)
    err = float(np.abs(out.numpy() - ref).max() / np.abs(ref).max())
    run_np()
    t_cl, t_np = [], []
    for _ in range(args.repeat):
        t_cl.append(run_cl()[0])
        t_np.append(run_np())
    flops = 2.0 * n ** 3
    g_cl = flops / statistics.median(t_cl) / 1e9
    g_np = flops / statistics.median(t_np) / 1e9
    print(f"{dev.name} ({dev.handle.describe()})")
    print(f"{n}x{n} {dt} matmul{' (B transposed view)' if args.transpose_b else ''}: "
          f"opencl {g_cl:.1f} GFLOP/s ({statistics.median(t_cl) * 1e3:.2f} ms), "
          f"numpy {g_np:.1f} GFLOP/s ({statistics.median(t_np) * 1e3:.2f} ms), "
          f"ratio {g_cl / g_np:.2f}; max rel. error {err:.1e}")


if __name__ == "__main__":
    main()
