"""Per-call overhead of small eager ops, next to raw NumPy in the same process.

    TAPEFLOW_PLUGINS=cpu_numpy .venv/bin/python benchmarks/dispatch_overhead.py

To compare two commits, run it once per checkout, interleaved, the other one through a
worktree on PYTHONPATH (the editable install points at this checkout):

    git worktree add /tmp/base <commit>
    PYTHONPATH=/tmp/base/core:/tmp/base/backends/cpu_numpy \\
        TAPEFLOW_PLUGINS=cpu_numpy .venv/bin/python benchmarks/dispatch_overhead.py

Best of 7 repeats of 20,000 calls each, in microseconds. asv_bench/ tracks the same
kind of figure per commit (bench_dispatch.py); this script is for a quick look.
"""

import timeit

import numpy as np

import tapeflow as tf

x = tf.constant(np.ones((4,), np.float32))
y = tf.constant(np.ones((4,), np.float32))
m = tf.constant(np.ones((4, 4), np.float32))
v = tf.Variable(np.ones((4,), np.float32))
an = np.ones((4,), np.float32)

CASES = {
    "a + b": lambda: x + y,
    "tf.add(a, b)": lambda: tf.add(x, y),
    "a * 2.0": lambda: x * 2.0,
    "tf.exp(a)": lambda: tf.exp(x),
    "reduce_sum(m, axis=0)": lambda: tf.reduce_sum(m, axis=0),
    "reshape(m, [16])": lambda: tf.reshape(m, [16]),
    "constant([1., 2.])": lambda: tf.constant([1.0, 2.0]),
    "v + a (Variable read)": lambda: v + x,
    "v.assign_add(array)": lambda: v.assign_add(an),
    "tf.zeros([4])": lambda: tf.zeros([4]),
    "NumPy a + b": lambda: an + an,
}

if __name__ == "__main__":
    for name, fn in CASES.items():
        best = min(timeit.repeat(fn, number=20000, repeat=7)) / 20000 * 1e6
        print(f"{name:24s} {best:7.3f} us")
