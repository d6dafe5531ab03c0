#!/usr/bin/env python
"""tf.function replayed as one CUDA graph (``tf.config.experimental.enable_cuda_graphs``)
against eager tapeflow, plain tf.function and PyTorch (eager and CUDA graphs), on cuda:0.

Rows (median seconds per step over interleaved rounds; each round times every row
once, in a rotating order, with a device synchronisation before the clock starts and
before it stops):

* ``mlp64``: an MLP 784-256-256-10 SGD step at batch 64 (forward, softmax
  cross-entropy with one-hot labels, backward, update) — tapeflow eager, tf.function,
  tf.function + CUDA graph; PyTorch eager and PyTorch with the whole step captured
  in a ``torch.cuda.CUDAGraph`` (the peer to beat). One-hot labels: the CUDA kernel
  of the sparse cross-entropy checks its labels on the host, which a capture
  forbids (it falls back, see docs/backends.md).
* ``chain``: ten elementwise ops on 16M float32 under tf.function, with and without
  a CUDA graph, in GB/s (one read of the input and one write of the output per op
  chain: the fusion pass makes it one kernel).

On a machine without a CUDA GPU it says so and exits 0 (nothing to time).

    python benchmarks/cuda_graphs.py            # about a minute
    python benchmarks/cuda_graphs.py --quick
    python benchmarks/cuda_graphs.py --json out.json   # also the figures, machine-readable
    python benchmarks/cuda_graphs.py --tiny --json out.json   # tiny sizes, and runs on the
                                                  # CuPy stand-in: checks the script only

``--json FILE`` writes ``{"device", "mlp64": {row: seconds per step}, "mlp64_graph":
the capture's state, "chain": {row: {"seconds", "GBps"}}, "skipped": why or null}``;
``scripts/gpu_check.py`` reads it for its summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def _gpu(allow_stand_in=False):
    try:
        import cupy as cp
        if getattr(cp, "FAKE", False) and not allow_stand_in:
            return None, None, "CuPy is the NumPy stand-in (tests/backends/fake_cupy)"
        import tapeflow as tf
        if not any(d.startswith("cuda:") for d in tf.config.list_devices()):
            return None, None, "tapeflow has no cuda device"
        return tf, cp, None
    except Exception as e:
        return None, None, f"CuPy is not importable ({type(e).__name__}: {e})"


def _torch():
    try:
        import torch
        if not torch.cuda.is_available():
            return None
        torch.backends.cuda.matmul.allow_tf32 = False
        return torch
    except Exception:
        return None


def interleaved(rows, sync, rounds, inner):
    """``{name: median seconds per call}`` for ``rows = {name: fn}``."""
    names = list(rows)
    for n in names:                                  # warm-up (traces and captures too)
        for _ in range(3):
            rows[n]()
        sync()
    times = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            fn = rows[n]
            sync()
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            sync()
            times[n].append((time.perf_counter() - t0) / inner)
    return {n: statistics.median(v) for n, v in times.items()}


#: keyword arguments of every tf.function here (``--tiny`` on the stand-in drops the
#: fusion pass: the stand-in cannot run the fused kernels it writes)
FUNCTION_KW: dict = {}


class _Rows(dict):
    """``{name: fn}``, plus the CUDA-graph capture's info (``.info``)."""
    info = None


def mlp_rows(tf, torch, batch=64, lr=0.01, width=(784, 256, 10)):
    rng = np.random.default_rng(0)
    d_in, hidden, d_out = width
    shapes = ((d_in, hidden), (hidden, hidden), (hidden, d_out))
    ws = [rng.standard_normal(s).astype(np.float32) * 0.05 for s in shapes]
    bs = [np.zeros(s[1], np.float32) for s in shapes]
    xn = rng.standard_normal((batch, d_in)).astype(np.float32)
    yn = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    rows = _Rows()

    def tf_step_fn():
        with tf.device("cuda:0"):
            W = [tf.Variable(w) for w in ws]
            B = [tf.Variable(b) for b in bs]
        params = W + B

        def step(x, y):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, W[0]) + B[0])
                h = tf.nn.relu(tf.matmul(h, W[1]) + B[1])
                logits = tf.matmul(h, W[2]) + B[2]
                loss = tf.reduce_mean(
                    tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
            for p, g in zip(params, tape.gradient(loss, params)):
                p.assign_sub(lr * g)
            return loss
        return step

    x = tf.constant(xn, device="cuda:0")
    y = tf.constant(yn, device="cuda:0")
    eager = tf_step_fn()
    rows["tapeflow eager"] = lambda: eager(x, y)
    tf.config.experimental.enable_cuda_graphs(False)
    traced = tf.function(tf_step_fn(), **FUNCTION_KW)
    traced(x, y)                                   # traced with the switch off
    rows["tapeflow tf.function"] = lambda: traced(x, y)
    tf.config.experimental.enable_cuda_graphs(True)
    graphed = tf.function(tf_step_fn(), **FUNCTION_KW)
    graphed(x, y)
    graphed(x, y)                                  # captured
    info = graphed.get_concrete_function(x, y).cuda_graph_info
    print(f"  tf.function + CUDA graph: {info}")
    rows.info = info
    rows["tapeflow tf.function + CUDA graph"] = lambda: graphed(x, y)
    if torch is not None:
        dev = torch.device("cuda:0")

        def torch_model():
            m = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)).to(dev)
            with torch.no_grad():
                for lin, w, b in zip([m[0], m[2], m[4]], ws, bs):
                    lin.weight.copy_(torch.from_numpy(w.T))
                    lin.bias.copy_(torch.from_numpy(b))
            return m, torch.optim.SGD(m.parameters(), lr=lr)
        tx = torch.from_numpy(xn).to(dev)
        ty = torch.from_numpy(yn).to(dev)
        m, opt = torch_model()

        def t_step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(m(tx), ty)
            loss.backward()
            opt.step()
            return loss
        rows["pytorch eager"] = t_step
        gm, gopt = torch_model()
        sx, sy = tx.clone(), ty.clone()

        def g_body():
            gopt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(gm(sx), sy)
            loss.backward()
            gopt.step()
            return loss
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):                 # warm-up on a side stream, then capture
            for _ in range(3):
                g_body()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        gopt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            g_body()
        rows["pytorch CUDA graph"] = graph.replay
    return rows


def chain_rows(tf, n=1 << 24):
    x = tf.constant(np.random.default_rng(0).standard_normal(n).astype(np.float32),
                    device="cuda:0")

    def chain(x):
        y = x * 1.5 + 0.5
        y = tf.maximum(y, 0.0) - 0.25
        y = y * y + 1.0
        y = tf.sqrt(y) * 2.0 - 1.0
        return tf.abs(y) + 0.125

    rows = {}
    tf.config.experimental.enable_cuda_graphs(False)
    plain = tf.function(chain, **FUNCTION_KW)
    plain(x)
    rows["chain tf.function"] = lambda: plain(x)
    tf.config.experimental.enable_cuda_graphs(True)
    graphed = tf.function(chain, **FUNCTION_KW)
    graphed(x)
    graphed(x)
    rows["chain tf.function + CUDA graph"] = lambda: graphed(x)
    return rows, 2 * n * 4


def _write(path, res):
    if path:
        with open(path, "w") as f:
            json.dump(res, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--tiny", action="store_true",
                    help="tiny sizes, two rounds, and allowed on the CuPy stand-in "
                         "(tests/backends/fake_cupy): checks the script, measures nothing")
    a = ap.parse_args(argv)
    res = {"device": None, "mlp64": {}, "mlp64_graph": None, "chain": {}, "skipped": None,
           "torch": None, "tiny": a.tiny}
    tf, cp, why = _gpu(allow_stand_in=a.tiny)
    if tf is None:
        print(f"cuda_graphs: no CUDA GPU here ({why}); the GPU rows are skipped.")
        res["skipped"] = f"no CUDA GPU here ({why})"
        _write(a.json, res)
        return 0
    torch = None if a.tiny else _torch()
    if torch is None:
        print("cuda_graphs: PyTorch with CUDA is not available; its rows are skipped.")
    else:
        res["torch"] = torch.__version__
    sync = cp.cuda.Device(0).synchronize
    rounds, inner = (5, 20) if a.quick else (21, 50)
    n = 1 << 24
    mlp_kw = {}
    if a.tiny:
        rounds, inner, n = 2, 2, 1 << 10
        mlp_kw = {"batch": 4, "width": (16, 8, 10)}
        if getattr(cp, "FAKE", False):
            from tapeflow.tracing import graph_passes
            FUNCTION_KW["passes"] = [p for p in graph_passes.PASSES if p != "fuse"]
    was = tf.config.experimental.cuda_graphs_enabled()
    try:
        res["device"] = tf.runtime.devices.get_device('cuda:0').description
        print(f"device: {res['device']}")
        d_in, hidden, d_out = mlp_kw.get("width", (784, 256, 10))
        print(f"MLP {d_in}-{hidden}-{hidden}-{d_out} SGD step, batch {mlp_kw.get('batch', 64)}:")
        rows = mlp_rows(tf, torch, **mlp_kw)
        res["mlp64_graph"] = str(rows.info)
        t = interleaved(rows, sync, rounds, inner)
        ref = t.get("pytorch eager")
        for name, s in t.items():
            ratio = f"  {s / ref:5.2f}x PyTorch eager" if ref else ""
            print(f"  {name:<36} {s * 1e6:9.1f} us{ratio}")
        res["mlp64"] = t
        _write(a.json, res)            # (kept if a time cap kills the run later)
        print(f"10-op elementwise chain, {n / (1 << 20):g}M float32, traced:")
        rows, nbytes = chain_rows(tf, n)
        t = interleaved(rows, sync, rounds, max(2, inner // 10))
        for name, s in t.items():
            print(f"  {name:<36} {s * 1e3:9.3f} ms  {nbytes / s / 1e9:8.1f} GB/s")
            res["chain"][name] = {"seconds": s, "GBps": nbytes / s / 1e9}
    finally:
        tf.config.experimental.enable_cuda_graphs(was)
        _write(a.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
