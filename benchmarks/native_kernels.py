"""GFLOP/s of the CPU backend's native kernels (``tapeflow_cpu_numpy.native``, issue 48)
on the layer shapes of ``benchmarks/compare.py``'s CNN cases at batch 32 (``cnn32``,
``cnn_example``, ``cnn_tutorial``) and their dense layers, per instruction-set variant,
beside today's NumPy path (``NNKernels(numpy)``: im2col + BLAS or Winograd) and
PyTorch (``torch.nn.functional.conv2d`` on NCHW tensors, ``torch.mm``).

Each library and thread count runs in its own process, with ``OPENBLAS_NUM_THREADS``/
``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` set before NumPy is imported (the BLAS's
thread count cannot change later without threadpoolctl), ``torch.set_num_threads(n)``
and ``native.set_num_threads(n)``. The figure is the best of ``--repeat`` timings of
``--number`` calls each (short: seconds for the whole table).

    python benchmarks/native_kernels.py                    # 1 and 2 threads, every case
    python benchmarks/native_kernels.py --threads 1 --cases cnn32 --no-torch
"""

import argparse
import os
import subprocess
import sys
import time

#: (case, op, kind, shapes): conv ("conv": x NHWC, w HWIO, strides, pads (t, b, l, r)),
#: its filter gradient ("fgrad": the same), and matmul ("mm": a, b, transpose_a/b)
CASES = [
    ("cnn32", "conv1 3x3 1->16 valid", "conv", ((32, 28, 28, 1), (3, 3, 1, 16), (0, 0, 0, 0))),
    ("cnn32", "conv2 3x3 16->16 valid", "conv", ((32, 26, 26, 16), (3, 3, 16, 16), (0, 0, 0, 0))),
    ("cnn32", "conv1 filter grad", "fgrad", ((32, 28, 28, 1), (3, 3, 1, 16), (0, 0, 0, 0))),
    ("cnn32", "conv2 filter grad", "fgrad", ((32, 26, 26, 16), (3, 3, 16, 16), (0, 0, 0, 0))),
    ("example", "conv1 3x3 1->32 same", "conv", ((32, 28, 28, 1), (3, 3, 1, 32), (1, 1, 1, 1))),
    ("example", "conv2 3x3 32->64 same", "conv", ((32, 14, 14, 32), (3, 3, 32, 64), (1, 1, 1, 1))),
    ("example", "conv1 filter grad", "fgrad", ((32, 28, 28, 1), (3, 3, 1, 32), (1, 1, 1, 1))),
    ("example", "conv2 filter grad", "fgrad", ((32, 14, 14, 32), (3, 3, 32, 64), (1, 1, 1, 1))),
    ("example", "dense 3136->128", "mm", ((32, 3136), (3136, 128), False, False)),
    ("tutorial", "conv1 5x5 1->32 same", "conv", ((32, 28, 28, 1), (5, 5, 1, 32), (2, 2, 2, 2))),
    ("tutorial", "conv2 5x5 32->64 same", "conv", ((32, 14, 14, 32), (5, 5, 32, 64), (2, 2, 2, 2))),
    ("tutorial", "conv1 filter grad", "fgrad", ((32, 28, 28, 1), (5, 5, 1, 32), (2, 2, 2, 2))),
    ("tutorial", "conv2 filter grad", "fgrad", ((32, 14, 14, 32), (5, 5, 32, 64), (2, 2, 2, 2))),
    ("tutorial", "dense 3136->1024", "mm", ((32, 3136), (3136, 1024), False, False)),
    ("tutorial", "dense dW = x^T dy", "mm", ((32, 3136), (32, 1024), True, False)),
    ("tutorial", "dense dx = dy W^T", "mm", ((32, 1024), (3136, 1024), False, True)),
    ("mlp64", "dense 784->256", "mm", ((64, 784), (784, 256), False, False)),
]


def flops(kind, spec):
    if kind in ("conv", "fgrad"):
        (n, h, w, c), (kh, kw, _, o), (pt, pb, pl, pr) = spec
        ho, wo = h + pt + pb - kh + 1, w + pl + pr - kw + 1
        return 2.0 * n * ho * wo * kh * kw * c * o
    a, b, ta, tb = spec
    m, k = a[::-1] if ta else a
    n = b[0] if tb else b[1]
    return 2.0 * m * k * n


def best(fn, number, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def calls(kind, spec, rng, np):
    """{column: zero-argument callable} for one case."""
    from tapeflow.kernels.nn import NNKernels
    from tapeflow_cpu_numpy import native
    out = {}
    if kind in ("conv", "fgrad"):
        xs, ws, pads = spec
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        pad = [(pads[0], pads[1]), (pads[2], pads[3])]
        dy = native.conv2d(x, w, (1, 1), pads, (1, 1)) if native.available() else None
        nn = NNKernels(np)
        if kind == "conv":
            out["native"] = lambda: native.conv2d(x, w, (1, 1), pads, (1, 1), act="Relu")
            out["numpy"] = lambda: nn._conv_nhwc(x, w, (1, 1), pad, (1, 1))
        else:
            if dy is None:
                dy = nn._conv_nhwc(x, w, (1, 1), pad, (1, 1))
            out["native"] = lambda: native.conv2d_backprop_filter(x, dy, ws[:2], (1, 1), pads,
                                                                  (1, 1))
            out["numpy"] = lambda: nn.conv2d_backprop_filter(x, dy, ws, (1, 1), pad, "NHWC",
                                                             (1, 1))
        out["_torch"] = (x, w, dy, pads)
    else:
        a_s, b_s, ta, tb = spec
        a = rng.standard_normal(a_s).astype(np.float32)
        b = rng.standard_normal(b_s).astype(np.float32)
        out["native"] = lambda: native.matmul(a, b, ta, tb)
        out["numpy"] = lambda: (a.T if ta else a) @ (b.T if tb else b)
        out["_torch"] = (a, b, ta, tb)
    return out


def torch_call(torch, kind, args):
    if kind in ("conv", "fgrad"):
        x, w, dy, pads = args
        F = torch.nn.functional
        xt = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
        wt = torch.from_numpy(w.transpose(3, 2, 0, 1).copy())
        pad = (pads[0], pads[2])
        if pads[0] != pads[1] or pads[2] != pads[3]:
            return None
        if kind == "conv":
            return lambda: torch.relu(F.conv2d(xt, wt, padding=pad))
        dyt = torch.from_numpy(dy.transpose(0, 3, 1, 2).copy())
        return lambda: torch.nn.grad.conv2d_weight(xt, wt.shape, dyt, padding=pad)
    a, b, ta, tb = args
    at, bt = torch.from_numpy(a), torch.from_numpy(b)
    return lambda: torch.mm(at.t() if ta else at, bt.t() if tb else bt)


def run(threads, cases, number, repeat, lib):
    """Time one library (``native``, ``numpy`` or ``torch``) on every case, printing
    ``case|op|column|GFLOP/s`` lines (one process per library: a BLAS's or OpenMP's
    idle threads spin for a while after each call and would take the second core from
    the next library's threads)."""
    import numpy as np
    from tapeflow_cpu_numpy import native
    torch = None
    if lib == "torch":
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(threads)
    native.set_num_threads(threads)
    isas = native.isas() if native.available() else []
    rng = np.random.default_rng(0)
    for case, name, kind, spec in CASES:
        if cases and case not in cases:
            continue
        f = flops(kind, spec)
        fns = calls(kind, spec, rng, np)
        if lib == "native":
            for isa in isas:
                native.set_isa(isa)
                print(f"{case}|{name}|native {isa}|{f / best(fns['native'], number, repeat) / 1e9}",
                      flush=True)
            native.set_isa(None)
        elif lib == "numpy":
            print(f"{case}|{name}|numpy|{f / best(fns['numpy'], number, repeat) / 1e9}",
                  flush=True)
        else:
            tc = torch_call(torch, kind, fns["_torch"])
            print(f"{case}|{name}|torch|{f / best(tc, number, repeat) / 1e9 if tc else 0.0}",
                  flush=True)


def table(threads, lines, number, repeat):
    from tapeflow_cpu_numpy import native
    rows, cols = {}, []
    for line in lines:
        case, name, col, val = line.split("|")
        rows.setdefault((case, name), {})[col] = float(val)
        if col not in cols:
            cols.append(col)
    print(f"\n{threads} thread(s); GFLOP/s (best of {repeat}x{number}, one process per "
          f"library); native: {'available' if native.available() else native.reason()}")
    print(f"{'case':9s} {'op':26s} " + " ".join(f"{c:>15s}" for c in cols))
    for (case, name), vals in rows.items():
        print(f"{case:9s} {name:26s} "
              + " ".join(f"{vals.get(c, float('nan')):15.1f}" for c in cols), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--cases", default="", help="comma-separated: cnn32,example,tutorial,mlp64")
    p.add_argument("--number", type=int, default=5, help="calls per timing")
    p.add_argument("--repeat", type=int, default=3, help="timings (the best is shown)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    if args.child:
        threads, lib = args.child.split(":")
        run(int(threads), cases, args.number, args.repeat, lib)
        return
    libs = ["native", "numpy"] + ([] if args.no_torch else ["torch"])
    for t in (int(v) for v in args.threads.split(",")):
        env = dict(os.environ)
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(t)
        lines = []
        for lib in libs:
            cmd = [sys.executable, __file__, "--child", f"{t}:{lib}", "--number",
                   str(args.number), "--repeat", str(args.repeat), "--cases", args.cases]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            lines += [ln for ln in out.stdout.splitlines() if ln.count("|") == 3]
        table(t, lines, args.number, args.repeat)


if __name__ == "__main__":
    main()
