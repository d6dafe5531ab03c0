"""The floor of compare.py's ``mlp64_traced`` target: how much of the hand-written NumPy
MLP step is its eight GEMMs, and how long they would take at the best float32 GEMM rate
this core reaches (tapeflow's MatMul and NumPy's on square shapes, the better of the two).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/mlp_floor.py

A traced step can be no faster than its GEMMs; whatever is left of a target's time after
them is the budget for the elementwise work, the loss and the updates.
"""

import time

import numpy as np

import tapeflow as tf
from compare import MLP_SIZES, _mlp_init, _np_mlp_step


def best_time(f, n, rounds=7):
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def main(batch=64):
    params, x, y = _mlp_init(batch)
    w1, _, w2, _, w3, _ = params
    h1 = np.maximum(x @ w1, 0)
    h2 = np.maximum(h1 @ w2, 0)
    d3 = np.random.default_rng(1).standard_normal((batch, MLP_SIZES[-1])).astype(np.float32)
    d2 = d3 @ w3.T
    d1 = d2 @ w2.T
    products = [(x, w1), (h1, w2), (h2, w3), (h2.T, d3), (d3, w3.T), (h1.T, d2), (d2, w2.T),
                (x.T, d1)]
    flop = sum(2 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in products)

    def gemms():
        for a, b in products:
            a @ b

    rows = np.arange(batch)
    step = best_time(lambda: _np_mlp_step([p.copy() for p in params], x, y, rows), 100)
    copies = best_time(lambda: [p.copy() for p in params], 100)
    step -= copies
    gemm = best_time(gemms, 100)
    a = np.random.default_rng(2).random((512, 512), dtype=np.float32)
    ta = tf.constant(a)
    peak = max(2 * 512 ** 3 / best_time(lambda: a @ a, 20),
               2 * 512 ** 3 / best_time(lambda: tf.matmul(ta, ta), 20))
    at_peak = flop / peak
    print(f"NumPy step {step * 1e6:.0f} us; its {len(products)} GEMMs ({flop / 1e6:.1f} MFLOP) "
          f"{gemm * 1e6:.0f} us = {gemm / step:.3f} of the step")
    print(f"best GEMM rate here {peak / 1e9:.1f} GFLOP/s: the GEMMs at that rate "
          f"{at_peak * 1e6:.0f} us = {at_peak / step:.3f}x the step")
    print(f"a 0.8x step ({0.8 * step * 1e6:.0f} us) leaves {(0.8 * step - at_peak) * 1e6:.0f} us "
          f"for everything else; the NumPy step spends {(step - gemm) * 1e6:.0f} us on it")


if __name__ == "__main__":
    main()
