#!/usr/bin/env python
"""Elementwise fusion: a chain of 10 elementwise ops, eager against ``tf.function``.

The issue's figure: on ``opencl:0``, a chain of 10 elementwise ops on a 1M-element
float32 tensor, traced and fused (one generated kernel) at least 3x faster than eager
(ten kernels, ten intermediate arrays). The same chain on ``cpu:0`` is reported too
(there the fused form is the in-place ufunc chain of ``tapeflow_cpu_numpy.fusion``),
with ``tf.function`` without the ``fuse`` pass as a third column, so the gain of
tracing alone and of fusion are told apart.

Two chains of 10 ops: ``arith`` (Mul, Add, Mul, Sub, Relu, Neg, Mul, Add, Minimum,
Abs: every op is one memory pass, which is what fusion removes: the issue's figure) and
``math`` (Mul, Add, Tanh, Mul, Sub, Relu, Neg, Exp, Mul, Add: on a CPU OpenCL device
such as PoCL, ``tanh`` and ``exp`` cost 10-40x an addition, so the chain is
compute-bound and fusion saves little; reported for the record). Every
timed run ends with ``dev.backend.synchronize(dev)`` before the clock stops; rounds
are interleaved (``interleave.measure``) and a ratio is the median of per-round
ratios ``other / fused`` (> 1: fused faster).

    python benchmarks/fusion_compare.py                 # both devices, both chains
    python benchmarks/fusion_compare.py --quick --devices opencl:0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import measure  # noqa: E402

N = 1 << 20


def chain_arith(tf, x):
    """10 arithmetic ops (memory-bound: what fusion saves is memory traffic)."""
    y = x * 1.5 + 0.5
    y = y * y - 0.25
    y = -tf.nn.relu(y)
    y = y * 0.9 + 0.1
    return tf.abs(tf.minimum(y, 1.0))


def chain_math(tf, x):
    """10 ops, two of them transcendental (tanh, exp: compute-bound on a CPU device)."""
    y = x * 1.5 + 0.5
    y = tf.tanh(y)
    y = y * y - 0.25
    y = tf.nn.relu(y)
    y = tf.exp(-y)
    return y * 0.9 + 0.1


CHAINS = {"arith": chain_arith, "math": chain_math}


def numexpr_chain(which):
    """The whole chain as one compiled numexpr expression (float32 constants), or None
    when numexpr is not installed: the "numexpr-style evaluation" the issue names,
    measured on cpu:0 for comparison (numexpr is not a dependency of tapeflow)."""
    try:
        import numexpr
    except ImportError:
        return None
    if which == "arith":
        ex = ("abs(where((-where((x*c15+c05)*(x*c15+c05)-c025 > 0, (x*c15+c05)*(x*c15+c05)"
              "-c025, 0))*c09+c01 < 1, (-where((x*c15+c05)*(x*c15+c05)-c025 > 0, "
              "(x*c15+c05)*(x*c15+c05)-c025, 0))*c09+c01, 1))")
    else:
        ex = ("exp(-where(tanh(x*c15+c05)**2-c025 > 0, tanh(x*c15+c05)**2-c025, 0))*c09+c01")
    consts = {k: np.float32(v) for k, v in
              dict(c15=1.5, c05=0.5, c025=0.25, c09=0.9, c01=0.1).items()}
    def run(xh):
        return numexpr.evaluate(ex, local_dict={"x": xh, **consts})
    return run


class Case:
    def __init__(self, key, title):
        self.key, self.title = key, title
        self.impls, self.times, self.ratios, self.errors = {}, {}, {}, {}


def build_case(tf, device, which):
    chain = CHAINS[which]
    case = Case(device, f"{which}: 10 elementwise ops on {N:,} float32, {device}")
    from tapeflow.runtime import devices as _devs
    dev = _devs.get_device(device)
    host = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    with tf.device(device):
        x = tf.constant(host)
    eager_ref = chain(tf, x).numpy()
    fused = tf.function(lambda t: chain(tf, t), passes=("dce", "fuse"))
    plain = tf.function(lambda t: chain(tf, t), passes=("dce",))
    got = fused(x).numpy()
    np.testing.assert_allclose(got, eager_ref, rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(plain(x).numpy(), eager_ref, rtol=2e-6, atol=1e-7)
    ops = fused.get_concrete_function(x).graph.ops()
    assert len(ops) == 1 and ops[0].startswith("Fused["), ops

    def runner(fn):
        def run(k):
            for _ in range(k):
                fn(x)
        return run
    case.impls = {"fused": runner(fused), "eager": runner(lambda t: chain(tf, t)),
                  "traced, unfused": runner(plain)}
    ne = numexpr_chain(which) if device == "cpu:0" else None
    if ne is not None:
        np.testing.assert_allclose(ne(host), eager_ref, rtol=2e-6, atol=1e-6)
        case.impls["numexpr"] = lambda k: [ne(host) for _ in range(k)]
    case.graph = str(fused.get_concrete_function(x).graph)
    return case, lambda: dev.backend.synchronize(dev)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="opencl:0,cpu:0")
    ap.add_argument("--chains", default="arith,math")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    import tapeflow as tf
    rounds, min_time = (5, 0.05) if args.quick else (15, 0.2)
    available = tf.config.list_devices()
    results = {}
    todo = [(d, c) for d in args.devices.split(",") for c in args.chains.split(",")]
    for device, which in todo:
        if device not in available:
            print(f"{device}: not available ({available}), skipped")
            continue
        case, sync = build_case(tf, device, which)
        measure(case, sync, rounds, min_time, "fused")
        print(f"\n{case.title}\n{case.graph}")
        for name, ts in case.times.items():
            med = statistics.median(ts)
            line = f"  {name:16s} median {med * 1e3:8.3f} ms   best {min(ts) * 1e3:8.3f} ms"
            if name in case.ratios:
                line += f"   {statistics.median(case.ratios[name]):5.2f}x the fused time"
            print(line)
        results[f"{which} {device}"] = {"times": case.times,
                           "ratios": {k: statistics.median(v) for k, v in case.ratios.items()}}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
