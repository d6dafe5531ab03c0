"""Predict data-parallel step time and efficiency beyond one machine with the alpha-beta
cost of a ring allreduce, checked against the 1-, 2- and 3-rank runs measured here.

    .venv/bin/python benchmarks/distributed_compare.py --json /tmp/dist.json
    .venv/bin/python benchmarks/scaling_model.py /tmp/dist.json

The model (Thakur, Rabenseifner and Gropp; Patarasuk and Yuan): a ring allreduce of
``b`` bytes over ``N`` ranks sends ``2(N-1)/N * b`` bytes per rank in ``2(N-1)`` steps,

    T_allreduce(N, b) = 2(N-1)/N * b / B  +  2(N-1) * alpha

with ``B`` the per-link bandwidth and ``alpha`` the per-message latency. A
data-parallel step without overlap is ``T_compute + T_allreduce(N, gradient bytes)``;
efficiency is ``T_compute / T_step``. ``alpha`` and ``B`` are fitted to the raw MPI
allreduce of 4 KB..16 MB measured at 2 ranks; the fit is then checked against the
measured 2- and 3-rank allreduce and step times. For clusters the table uses the
measured compute per rank (weak scaling: the per-rank batch of the 2-rank run stays
fixed as ranks are added) with two networks: this machine's shared memory (the fit),
and a 100 Gb/s InfiniBand-class link (B = 12.5 GB/s, alpha = 5 us; an assumption, not
a measurement: change it with --bandwidth/--latency).
"""

from __future__ import annotations

import argparse
import json
import pathlib

import numpy as np


def ring(n, nbytes, alpha, bandwidth):
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * alpha


def fit(sizes_us):
    """alpha (s) and B (bytes/s) from {bytes: us} at 2 ranks: T = b/B + 2 alpha."""
    b = np.array([float(k) for k in sizes_us])
    t = np.array([v * 1e-6 for v in sizes_us.values()])
    # relative least squares (rows divided by the time): the 4 KB point sets alpha as
    # much as the 16 MB one sets B
    A = np.stack([b, np.full_like(b, 2.0)], axis=1) / t[:, None]
    (inv_bw, alpha), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    return max(alpha, 0.0), 1.0 / inv_bw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="JSON written by distributed_compare.py --json")
    ap.add_argument("--bandwidth", type=float, default=12.5e9, help="cluster link, bytes/s")
    ap.add_argument("--latency", type=float, default=5e-6, help="cluster alpha, seconds")
    args = ap.parse_args()
    runs = {r["ranks"]: r for r in json.loads(pathlib.Path(args.results).read_text())}
    two = runs[2]
    alpha, bw = fit(two["allreduce_sizes_us"])
    grad_bytes = two["allreduce_mlp_grads"]["bytes"]
    cnn_bytes = (3 * 3 * 1 * 16 + 16 + 3 * 3 * 16 * 16 + 16 + 16 * 10 + 10) * 4
    print(f"fitted on this machine (2 ranks, shared memory): alpha = {alpha * 1e6:.1f} us, "
          f"B = {bw / 1e9:.2f} GB/s")
    print()
    print("check against the measured runs:")
    print(f"  {'what':<44} {'predicted':>10} {'measured':>10}")
    meas = two["allreduce_mlp_grads"]["mpi4py"]
    print(f"  {'raw allreduce of the MLP gradients, 2 ranks':<44} "
          f"{ring(2, grad_bytes, alpha, bw) * 1e6:>8.0f}us {meas:>8.0f}us")
    if 3 in runs and "allreduce_sizes_us" in runs[3]:
        m3 = runs[3]["allreduce_sizes_us"]["1048576"]
        print(f"  {'raw allreduce of 1 MiB, 3 ranks (2 cores)':<44} "
              f"{ring(3, 1 << 20, alpha, bw) * 1e6:>8.0f}us {m3:>8.0f}us")
    for n in sorted(runs):
        if n == 1:
            continue
        for model, nbytes in (("mlp", grad_bytes), ("cnn", cnn_bytes),
                              ("mlp_strategy", grad_bytes)):
            if f"{model}_step" not in runs[n]:
                continue
            r = runs[n][f"{model}_step"]
            pred = r["compute_us"] * 1e-6 + ring(n, nbytes, alpha, bw)
            label = (f"MLP step via MWMS, {n} ranks (compute + ring)" if model == "mlp_strategy"
                     else f"{model.upper()} step, {n} ranks (measured compute + ring)")
            print(f"  {label:<44} {pred * 1e3:>8.2f}ms {r['step_us'] / 1e3:>8.2f}ms")
    print()
    print("weak scaling (the 2-rank run's per-rank batch: MLP 128, CNN 32 per rank):")
    print(f"  {'model':<5} {'network':<28} " + "".join(f"{f'{n} ranks':>20}" for n in (8, 64, 512)))
    for model, nbytes in (("MLP", grad_bytes), ("CNN", cnn_bytes)):
        comp = two[f"{model.lower()}_step"]["compute_us"] * 1e-6
        for net, a, b in (("shared memory (fitted)", alpha, bw),
                          (f"{args.bandwidth * 8 / 1e9:.0f} Gb/s, alpha {args.latency * 1e6:.0f} us",
                           args.latency, args.bandwidth)):
            cells = []
            for n in (8, 64, 512):
                step = comp + ring(n, nbytes, a, b)
                cells.append(f"{step * 1e3:7.2f} ms {comp / step:5.0%}")
            print(f"  {model:<5} {net:<28} " + "".join(f"{c:>20}" for c in cells))
    print("  (each cell: predicted step time and efficiency = compute / step; no overlap of")
    print("   communication with the backward pass, which Horovod-style fusion leaves out too)")


if __name__ == "__main__":
    main()
