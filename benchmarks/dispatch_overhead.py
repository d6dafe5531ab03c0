"""Per-call overhead of small eager ops, next to raw NumPy in the same process.

    TAPEFLOW_PLUGINS=cpu_numpy .venv/bin/python benchmarks/dispatch_overhead.py

An interleaved A/B of two checkouts in the same run (``--ab``): rounds of one process
per checkout, alternating which goes first, the other checkout put first on PYTHONPATH
(the editable install points at this one); per case the median over rounds of the
per-round ratio of the times, each time first divided by NumPy's ``a + b`` in the same
process (the machine's speed drifts between processes: the ratio of ratios does not):

    git worktree add /tmp/base <commit>
    TAPEFLOW_PLUGINS=cpu_numpy .venv/bin/python benchmarks/dispatch_overhead.py --ab /tmp/base

Best of 7 repeats of 20,000 calls each, in microseconds. asv_bench/ tracks the same
kind of figure per commit (bench_dispatch.py); this script is for a quick look.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit

import numpy as np

import tapeflow as tf

x = tf.constant(np.ones((4,), np.float32))
y = tf.constant(np.ones((4,), np.float32))
m = tf.constant(np.ones((4, 4), np.float32))
v = tf.Variable(np.ones((4,), np.float32))
an = np.ones((4,), np.float32)


def _taped_add():
    with tf.GradientTape() as tape:
        tape.watch(x)
        x + y


def _gradient():
    with tf.GradientTape() as tape:
        tape.watch(x)
        s = tf.reduce_sum(x * x)
    return tape.gradient(s, x)


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
    "taped a + b": _taped_add,
    "gradient of sum(x*x)": _gradient,
    "NumPy a + b": lambda: an + an,
}


def run_all(number=20000, repeat=7):
    """``{case: best microseconds per call}``."""
    return {name: min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6
            for name, fn in CASES.items()}


def _child(tree):
    env = dict(os.environ)
    if tree:
        paths = [os.path.join(tree, "core"), os.path.join(tree, "backends", "cpu_numpy")]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--json-out"], env=env,
                       capture_output=True, text=True, timeout=600, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def ab(base, rounds):
    """Interleaved A/B of this checkout (``after``) against ``base`` (``before``)."""
    ratios = {name: [] for name in CASES}
    raw = {name: [] for name in CASES}
    files = {}
    for r in range(rounds):
        sides = [("after", None), ("before", base)]
        got = {}
        for label, tree in (sides if r % 2 == 0 else sides[::-1]):
            got[label] = _child(tree)
            files[label] = got[label].pop("__file__")
        for name in CASES:
            a = got["after"][name] / got["after"]["NumPy a + b"]
            b = got["before"][name] / got["before"]["NumPy a + b"]
            ratios[name].append(a / b)
            raw[name].append(got["after"][name] / got["before"][name])
        print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    print(f"after:  {files['after']}\nbefore: {files['before']}")
    print(f"{'case':24s} {'after/before':>13s} {'raw':>7s}  (median of {rounds} per-round "
          "ratios, each time over NumPy a + b in its process (raw: not divided); min, max)")
    for name, rs in ratios.items():
        if name != "NumPy a + b":
            print(f"{name:24s} {statistics.median(rs):13.3f} {statistics.median(raw[name]):7.3f}"
                  f"  ({min(rs):.3f}, {max(rs):.3f})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ab", metavar="CHECKOUT", help="interleaved A/B against this checkout")
    ap.add_argument("--rounds", type=int, default=6, help="A/B rounds (default 6)")
    ap.add_argument("--json-out", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.ab:
        ab(args.ab, args.rounds)
    elif args.json_out:
        out = run_all()
        out["__file__"] = tf.__file__
        print(json.dumps(out))
    else:
        for name, best in run_all().items():
            print(f"{name:24s} {best:7.3f} us")


if __name__ == "__main__":
    main()
