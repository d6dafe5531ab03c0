"""Where a CNN training step (compare.py's cnn cases) spends its time, per op: tapeflow's
profiler and PyTorch's (``torch.profiler``, CPU activities) on the same step from the
same weights, in the same run.

    .venv/bin/python benchmarks/profile_cnn.py [--arch small|example|tutorial] [--steps 20]
    .venv/bin/python benchmarks/profile_cnn.py --json after.json --compare before.json

``--json`` writes the per-op averages (ms per step); ``--compare`` reads such a file
(for example written at an older commit) and prints before/after per op. Times are wall
times on a shared machine: compare within one run, or runs made back to back.
"""

import argparse
import json
import os
import sys
import time

import tapeflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def wall_ms(step, steps):
    """Milliseconds per ``step()`` over ``steps`` calls, after three warm-up calls."""
    for _ in range(3):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t) / steps * 1e3


def tapeflow_profile(xn, yn, arch, steps):
    """``(wall ms per step, {op: ms per step}, calls per step, weights)``."""
    model, step = common.tf_cnn_step(tf, xn, yn, arch=arch)
    weights = [v.numpy() for v in model.trainable_variables]
    wall = wall_ms(step, steps)
    with tf.profiler.profile() as prof:
        for _ in range(steps):
            step()
    per_op = {}
    for e in prof.events:
        per_op[e.name] = per_op.get(e.name, 0.0) + e.duration_us / 1e3 / steps
    return wall, per_op, len(prof.events) // steps, weights


def torch_profile(torch, weights, xn, yn, arch, steps):
    """``(wall ms per step, {op: self CPU ms per step})`` of the same step in PyTorch."""
    step = common.torch_cnn_step(torch, weights, xn, yn, arch=arch)
    wall = wall_ms(step, steps)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    per_op = {}
    for ev in prof.key_averages():
        if ev.self_cpu_time_total > 0:
            per_op[ev.key] = ev.self_cpu_time_total / 1e3 / steps
    return wall, per_op


def table(title, per_op, rows):
    print(title)
    total = sum(per_op.values()) or 1.0
    for name, ms in sorted(per_op.items(), key=lambda kv: -kv[1])[:rows]:
        print(f"  {name:40s} {ms:8.3f} ms  {100 * ms / total:5.1f}%")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="small", choices=sorted(common.CNN_ARCHS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rows", type=int, default=15)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="write the per-op figures here")
    ap.add_argument("--compare", help="a --json file of an earlier run: print before/after")
    args = ap.parse_args(argv)

    xn, yn = common.cnn_data(args.batch)
    wall, per_op, calls, weights = tapeflow_profile(xn, yn, args.arch, args.steps)
    kernels = sum(per_op.values())
    print(f"{args.arch} CNN, batch {args.batch}: tapeflow step {wall:.2f} ms (unprofiled); "
          f"kernels {kernels:.2f} ms, {calls} kernel calls per step; the rest "
          f"({max(0.0, wall - kernels):.2f} ms) is dispatch, tape and Python")
    table("tapeflow, per op (ms per step):", per_op, args.rows)
    out = {"arch": args.arch, "batch": args.batch, "tapeflow": {"wall_ms": wall, "ops": per_op}}

    torch, reason = common.load_torch(args.no_torch)
    if torch is not None:
        twall, tops = torch_profile(torch, weights, xn, yn, args.arch, args.steps)
        print(f"\nPyTorch {torch.__version__}: step {twall:.2f} ms (unprofiled); "
              f"tapeflow/PyTorch {wall / twall:.2f}x")
        table("PyTorch, self CPU time per op (ms per step):", tops, args.rows)
        out["torch"] = {"wall_ms": twall, "ops": tops}
    else:
        print(f"\nPyTorch: {reason}")

    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)["tapeflow"]
        print(f"\nbefore -> after (tapeflow, ms per step): step {before['wall_ms']:.2f} -> "
              f"{wall:.2f}")
        names = sorted(set(before["ops"]) | set(per_op),
                       key=lambda n: -max(before["ops"].get(n, 0), per_op.get(n, 0)))
        for name in names[:args.rows + 5]:
            print(f"  {name:40s} {before['ops'].get(name, 0):8.3f} -> {per_op.get(name, 0):8.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
