"""tf.vectorized_map's figures (issue 21), each against a peer measured in the same run.

1. Jacobian of a 100->100 MLP layer (``tanh(x @ W + b)``, x of shape (100,)) through
   ``GradientTape.jacobian``: vectorised (the default) vs the per-row loop
   (``experimental_use_pfor=False``, what jacobian did before), and vs PyTorch's
   ``torch.func.jacrev`` (which vmaps the backward pass) when torch is installed.
2. Per-example gradients of an MLP at batch 64 (``vectorized_map`` over a
   ``GradientTape`` per example) vs ONE batched gradient of the same batch, eagerly
   and both inside ``tf.function`` (where the per-example trace happens once), and vs
   ``torch.func.vmap(torch.func.grad(...))``; for two MLPs: the digits-sized
   64-128-10 and the 784-256-256-10 of benchmarks/compare.py.

NumPy's BLAS and torch both run one thread. Timings are medians of ``--rounds``
rounds (each the best of ``--repeat`` calls), the cases interleaved round by round so
machine noise hits them alike.

    .venv/bin/python benchmarks/vectorized_map.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

import tapeflow as tf

try:                         # one BLAS thread, as torch below: a fair comparison, and no
    import threadpoolctl      # OpenBLAS threads spinning against torch's on a small machine
    threadpoolctl.threadpool_limits(1)
except ImportError:
    pass

try:
    import torch
    import torch.func as tfunc
    torch.set_num_threads(1)
except ImportError:          # the torch column is left out
    torch = None


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _run(cases, rounds, repeat):
    for fn in cases.values():            # warm up (traces, caches, kernels)
        fn()
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            times[k].append(_best(fn, repeat))
    return {k: statistics.median(v) for k, v in times.items()}


def jacobian_cases():
    rng = np.random.default_rng(0)
    wn = (rng.standard_normal((100, 100)) * 0.1).astype(np.float32)
    bn = rng.standard_normal(100).astype(np.float32)
    xn = rng.standard_normal(100).astype(np.float32)
    w, b, x = tf.constant(wn), tf.constant(bn), tf.constant(xn)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.tanh(tf.reshape(tf.matmul(x[None], w), (100,)) + b)
    j = tape.jacobian(y, x).numpy()
    jl = tape.jacobian(y, x, experimental_use_pfor=False).numpy()
    np.testing.assert_allclose(j, jl, rtol=1e-5, atol=1e-6)
    cases = {"tapeflow vectorized": lambda: tape.jacobian(y, x),
             "tapeflow loop": lambda: tape.jacobian(y, x, experimental_use_pfor=False)}
    if torch is not None:
        wt, bt, xt = torch.from_numpy(wn), torch.from_numpy(bn), torch.from_numpy(xn)

        def f(v):
            return torch.tanh(v @ wt + bt)
        jt = tfunc.jacrev(f)(xt)
        np.testing.assert_allclose(j, jt.numpy(), rtol=1e-4, atol=1e-6)
        cases["torch.func.jacrev"] = lambda: tfunc.jacrev(f)(xt)
    return cases


def per_example_cases(sizes, batch=64):
    rng = np.random.default_rng(1)
    shapes = [(a, b) for a, b in zip(sizes[:-1], sizes[1:])]
    wn = [(rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in shapes]
    bn = [np.zeros(s[1], np.float32) for s in shapes]
    xn = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    yn = rng.integers(0, sizes[-1], batch).astype(np.int64)
    params = [tf.Variable(a) for pair in zip(wn, bn) for a in pair]
    x, y = tf.constant(xn), tf.constant(yn)

    def loss_fn(xb, yb):
        h = xb
        for i in range(len(shapes)):
            h = tf.matmul(h, params[2 * i]) + params[2 * i + 1]
            if i < len(shapes) - 1:
                h = tf.nn.relu(h)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb,
                                                                              logits=h))

    def batched():
        with tf.GradientTape() as tape:
            loss = loss_fn(x, y)
        return tape.gradient(loss, params)

    def one(e):
        with tf.GradientTape() as tape:
            loss = loss_fn(e[0][None], e[1][None])
        return tape.gradient(loss, params)

    def per_example():
        return tf.vectorized_map(one, (x, y))

    def loop():
        return [tf.stack(g) for g in zip(*[one((x[i], y[i])) for i in range(batch)])]
    pe = per_example()
    for g, b_ in zip(pe, batched()):
        np.testing.assert_allclose(g.numpy().mean(0), b_.numpy(), rtol=1e-4, atol=1e-5)
    pe_traced, b_traced = tf.function(per_example), tf.function(batched)
    for g, b_ in zip(pe_traced(), b_traced()):
        np.testing.assert_allclose(g.numpy().mean(0), b_.numpy(), rtol=1e-4, atol=1e-5)
    cases = {"tapeflow per-example (vectorized_map)": per_example,
             "tapeflow one batched gradient": batched,
             "tapeflow per-example, tf.function": pe_traced,
             "tapeflow one batched gradient, tf.function": b_traced,
             "tapeflow per-example (Python loop)": loop}
    if torch is not None:
        tp = [torch.from_numpy(a) for pair in zip(wn, bn) for a in pair]
        xt, yt = torch.from_numpy(xn), torch.from_numpy(yn)

        def tloss(ps, xb, yb):
            h = xb
            for i in range(len(shapes)):
                h = h @ ps[2 * i] + ps[2 * i + 1]
                if i < len(shapes) - 1:
                    h = torch.relu(h)
            return torch.nn.functional.cross_entropy(h, yb)
        g1 = tfunc.vmap(tfunc.grad(lambda ps, xb, yb: tloss(ps, xb[None], yb[None])),
                        in_dims=(None, 0, 0))
        tpg = [p.clone().requires_grad_() for p in tp]

        def torch_batched():
            for p in tpg:
                p.grad = None
            tloss(tpg, xt, yt).backward()
        cases["torch.func vmap(grad)"] = lambda: g1(tp, xt, yt)
        cases["torch one batched gradient"] = torch_batched
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    warnings.simplefilter("error", tf.tracing.vectorize.VectorizationWarning)
    print(f"tapeflow {tf.__version__}; torch {torch.__version__ if torch else 'absent'} "
          "(1 thread); medians of best-of-repeat, microseconds\n")
    t = _run(jacobian_cases(), args.rounds, args.repeat)
    print("Jacobian of a 100->100 tanh layer (100x100)")
    for k, v in t.items():
        print(f"  {k:40s} {v * 1e6:10.1f} us")
    print(f"  loop / vectorized: {t['tapeflow loop'] / t['tapeflow vectorized']:.1f}x faster")
    if torch is not None:
        print(f"  vectorized / torch.func.jacrev: "
              f"{t['tapeflow vectorized'] / t['torch.func.jacrev']:.2f}x")
    for sizes in ((64, 128, 10), (784, 256, 256, 10)):
        t = _run(per_example_cases(sizes), args.rounds, max(1, args.repeat // 2))
        print(f"\nPer-example gradients, MLP {'-'.join(map(str, sizes))}, batch 64")
        for k, v in t.items():
            print(f"  {k:40s} {v * 1e6:10.1f} us")
        pe, one = t["tapeflow per-example (vectorized_map)"], t["tapeflow one batched gradient"]
        pet, onet = (t["tapeflow per-example, tf.function"],
                     t["tapeflow one batched gradient, tf.function"])
        print(f"  per-example / one batched gradient: eager {pe / one:.2f}x, tf.function "
              f"{pet / onet:.2f}x; Python loop / vectorized: "
              f"{t['tapeflow per-example (Python loop)'] / pe:.1f}x")
        if torch is not None:
            tv, tb = t["torch.func vmap(grad)"], t["torch one batched gradient"]
            print(f"  torch: vmap(grad) / batched {tv / tb:.2f}x; tapeflow per-example / "
                  f"torch vmap(grad): {pe / tv:.2f}x")


if __name__ == "__main__":
    main()
