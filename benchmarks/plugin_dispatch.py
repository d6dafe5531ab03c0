#!/usr/bin/env python
"""Dispatch cost of a plugin op against a built-in op of the same kind, on the CPU.

The plugin ops are declared with ``tapeflow.plugins.Library`` (the decorator form a
third party uses) and registered in-process; each gets **the built-in's own kernel
function** (``get_op("Tanh").kernels["cpu"].fn`` ...), so both sides do identical
kernel work and the ratio is the dispatch path alone. Cases:

``unary``      ``plugin::tanh(x)`` vs ``tf.tanh(x)``, float32 shape (1,)
``unary_attr`` ``plugin::leaky_relu(x, alpha=0.1)`` vs ``tf.nn.leaky_relu(x, alpha=0.1)``
``binary``     ``plugin::add(a, b)`` vs ``tf.add(a, b)``
``taped``      ``unary`` while a GradientTape watching ``x`` records it (64 calls a tape)
``gelu``       the example plugin's ``gelu`` (plugins/gelu) vs ``tf.nn.relu`` (a built-in
               activation; different kernels, shown for scale, no target) and vs its own
               kernel called directly (the dispatch overhead in microseconds)
``torch``      for reference, when PyTorch is installed: a ``torch.library.custom_op``
               wrapping ``torch.tanh`` vs ``torch.tanh`` (the peer's plugin-op cost)

Method (as ``compare.py``, tighter for a busy machine): each sample runs ``n`` calls
in a plain loop (``n`` calibrated to ~5 ms; ``--quick``: ~2 ms); a round takes four
samples in ABBA order (the side that goes first alternates), so a linear drift of the
machine hits both sides alike; the ratio is the median over 41 rounds (``--quick``: 9)
of the per-round ratio, and "best" the ratio of the two sides' fastest samples.
Target: plugin / built-in <= 1.1 for ``unary``, ``unary_attr``, ``binary`` and
``taped`` (``--check`` makes a miss the exit status).

    python benchmarks/plugin_dispatch.py            # about 30 s
    python benchmarks/plugin_dispatch.py --quick    # a few seconds, noisier
    python benchmarks/plugin_dispatch.py --json out.json --check
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time

import numpy as np

TARGET = 1.1


def _loop(f, *args, **kwargs):
    def run(n):
        for _ in range(n):
            f(*args, **kwargs)
    return run


def _taped(f, x, per_tape=64):
    """``n`` recorded calls, ``per_tape`` to a GradientTape (a tape growing to millions
    of records would time the garbage collector's walks over it instead)."""
    import tapeflow as tf
    inner = range(per_tape)

    def run(n):
        for _ in range(max(1, n // per_tape)):
            with tf.GradientTape() as tape:
                tape.watch(x)
                for _ in inner:
                    f(x)
    return run


def build_cases():
    """``[(key, title, {side: run(n)}, target or None)]``; the sides are checked to
    compute the same values first."""
    import tapeflow as tf
    from tapeflow.plugins import Library, get_op, register

    lib = Library("dispatch_bench")

    @lib.op()
    def tanh(x, name=None):
        """tf.tanh's kernel as a plugin op"""

    @lib.op()
    def leaky_relu(features, alpha=0.2, name=None):
        """tf.nn.leaky_relu's kernel as a plugin op"""

    @lib.op()
    def add(x, y, name=None):
        """tf.add's kernel as a plugin op"""

    for handle, builtin in ((tanh, "Tanh"), (leaky_relu, "LeakyRelu"), (add, "Add")):
        k = get_op(builtin).kernels["cpu"]
        lib.kernel(handle, "cpu", dtypes=None if k.dtypes is None else
                   [d.name for d in k.dtypes])(k.fn)
    register(lib)

    x = tf.constant(np.array([0.5], np.float32))
    y = tf.constant(np.array([-1.5], np.float32))
    for a, b in ((tanh(x), tf.tanh(x)), (add(x, y), tf.add(x, y)),
                 (leaky_relu(y, alpha=0.1), tf.nn.leaky_relu(y, alpha=0.1))):
        assert np.array_equal(a.numpy(), b.numpy()), (a, b)
    cases = [
        ("unary", "tanh(x), float32 (1,)",
         {"plugin": _loop(tanh, x), "built-in": _loop(tf.tanh, x)}, TARGET),
        ("unary_attr", "leaky_relu(x, alpha=0.1), float32 (1,)",
         {"plugin": _loop(leaky_relu, y, alpha=0.1),
          "built-in": _loop(tf.nn.leaky_relu, y, alpha=0.1)}, TARGET),
        ("binary", "add(a, b), float32 (1,)",
         {"plugin": _loop(add, x, y), "built-in": _loop(tf.add, x, y)}, TARGET),
        ("taped", "tanh(x) recorded by a GradientTape, 64 calls per tape",
         {"plugin": _taped(tanh, x), "built-in": _taped(tf.tanh, x)}, TARGET),
    ]
    try:
        from tapeflow_gelu import gelu, k_cpu
    except ImportError as e:
        print(f"(gelu case skipped: the example plugin is not installed: {e})")
    else:
        assert np.allclose(gelu(x).numpy(), k_cpu.gelu(x.numpy()))
        cases.append(("gelu", "example plugin gelu(x) vs built-in relu(x), float32 (1,)",
                      {"plugin": _loop(gelu, x), "built-in": _loop(tf.nn.relu, x)}, None))
        cases.append(("gelu_kernel", "gelu(x) vs its CPU kernel called on the ndarray",
                      {"plugin": _loop(gelu, x), "built-in": _loop(k_cpu.gelu, x.numpy())},
                      None))
    try:
        import torch
    except Exception as e:
        print(f"(torch case skipped: `import torch` failed: {type(e).__name__}: {e})")
    else:
        def _ctanh(t):
            return torch.tanh(t)
        ctanh = torch.library.custom_op("dispatch_bench::tanh", _ctanh, mutates_args=(),
                                        schema="(Tensor t) -> Tensor")
        tx = torch.tensor([0.5])
        assert torch.equal(ctanh(tx), torch.tanh(tx))
        cases.append(("torch", f"PyTorch {torch.__version__}: custom_op tanh vs torch.tanh",
                      {"plugin": _loop(ctanh, tx), "built-in": _loop(torch.tanh, tx)}, None))
    return cases


def _sample(run, n):
    gc.collect()
    t0 = time.perf_counter()
    run(n)
    return (time.perf_counter() - t0) / n


def _calibrate(run, sample_s):
    n = 1
    while True:
        t = time.perf_counter()
        run(n)
        dt = time.perf_counter() - t
        if dt >= sample_s / 4 or n >= 1 << 22:
            return max(1, int(n * sample_s / max(dt, 1e-9)))
        n *= 4


def measure(cases, rounds, sample_s):
    results = []
    for key, title, sides, target in cases:
        names = list(sides)
        ns = {s: _calibrate(sides[s], sample_s) for s in names}
        times = {s: [] for s in names}
        ratios = []
        for r in range(rounds):
            a, b = names if r % 2 == 0 else names[::-1]
            got = {a: 0.0, b: 0.0}
            for s in (a, b, b, a):            # ABBA: a linear drift hits both sides alike
                t = _sample(sides[s], ns[s])
                got[s] += t / 2
                times[s].append(t)
            ratios.append(got["plugin"] / got["built-in"])
        best = {s: min(v) for s, v in times.items()}
        results.append({"case": key, "title": title, "target": target,
                        "ratio": statistics.median(ratios),
                        "best_ratio": best["plugin"] / best["built-in"],
                        "median_s": {s: statistics.median(v) for s, v in times.items()},
                        "best_s": best, "ratios": ratios, "calls_per_sample": ns})
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter samples")
    ap.add_argument("--json", metavar="FILE", help="write every sample to FILE")
    ap.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = ap.parse_args(argv)
    import tapeflow as tf
    print(f"tapeflow {tf.__version__}, numpy {np.__version__}, python "
          f"{platform.python_version()} on {platform.machine()}")
    rounds, sample_s = (9, 0.002) if args.quick else (41, 0.005)
    results = measure(build_cases(), rounds, sample_s)
    print(f"\n{'case':<12} {'plugin':>10} {'built-in':>10} {'ratio':>7} {'best':>7}  target"
          "    what")
    missed = []
    for r in results:
        ok = r["target"] is None or r["ratio"] <= r["target"]
        if not ok:
            missed.append(r["case"])
        tgt = "-" if r["target"] is None else f"<={r['target']:g} {'ok' if ok else 'MISS'}"
        print(f"{r['case']:<12} {r['median_s']['plugin'] * 1e6:>8.3f}us "
              f"{r['median_s']['built-in'] * 1e6:>8.3f}us {r['ratio']:>6.3f}x "
              f"{r['best_ratio']:>6.3f}x  {tgt:<9} "
              f"{r['title']}")
    print(f"\nmedian per-call times over {rounds} rounds of interleaved samples (ABBA); ratio = "
          "median of the per-round plugin/built-in ratios; best = ratio of the fastest samples")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if missed:
        print(f"missed target: {', '.join(missed)}")
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
