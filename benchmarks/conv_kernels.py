#!/usr/bin/env python
"""Per-kernel GFLOP/s of the CNN cases' convolution and dense layers: tapeflow's NumPy
path, tapeflow's native kernels on each ISA variant, PyTorch and (optional) oneDNN.

The layers are those of ``compare.py``'s CNN cases (``common.CNN_ARCHS``: ``cnn32`` is
the "small" arch, ``example``, ``tutorial``) at batch 32 on 28x28x1 images. For each
convolution: forward, input gradient (not for a first layer: nothing needs the image's
gradient) and filter gradient; for each dense layer of at least 100k weights: forward
``x @ W``, input gradient ``dy @ W.T`` and weight gradient ``x.T @ dy``.

    .venv/bin/python benchmarks/conv_kernels.py                  # 1 thread, ~30 s
    .venv/bin/python benchmarks/conv_kernels.py --threads 2 --json k2.json
    .venv/bin/python benchmarks/conv_kernels.py --arch tutorial --ops fwd --quick

Columns (each skipped, with the reason printed, when unavailable):

- ``np``: ``tapeflow.kernels.nn.NNKernels(numpy)`` (im2col + BLAS / Winograd; NumPy's
  BLAS limited to ``--threads`` by threadpoolctl when it is installed);
- ``tf:nat``: the same kernels built with the native service,
  ``NNKernels(numpy, native=tapeflow_cpu_numpy.native)``, on the best ISA: what tapeflow
  runs (the native call and its glue: the input gradient's flipped filter, fallbacks);
- ``nat:<isa>``: ``tapeflow_cpu_numpy.native`` with each of ``native.isas()`` forced by
  ``native.set_isa`` (its input gradient is ``native.conv2d_backprop_input`` when the
  module has one, else the forward kernel on the padded ``dy`` and the flipped filter,
  the flip counted in the time);
- ``torch``: ``torch.nn.functional.conv2d`` / ``torch.nn.grad.conv2d_input`` /
  ``conv2d_weight`` in NCHW (PyTorch's layout; ``F.linear`` and ``torch.mm`` for dense),
  ``torch.set_num_threads(--threads)``;
- ``dnnl``, ``dnnl*``, ``dnnl*c``: oneDNN through ``onednn_probe.py`` when the library
  is found (``TAPEFLOW_ONEDNN_LIB``; not a dependency of tapeflow): primitives created
  once per shape and reused; ``dnnl`` computes in the user's NHWC/HWIO layouts, ``dnnl*``
  in the layouts oneDNN picks with the reorders from and to NHWC/HWIO in the time, and
  ``dnnl*c`` the same without the reorders (a backend that kept tensors blocked).

Every implementation's result is first checked against the NumPy path (relative error
< 1e-3); a mismatch shows as ``ERR``. Timing follows ``common.measure``: interleaved
rounds in rotating order, each implementation calibrated on its own, medians. The clock
is the process's CPU time on one thread (robust on a shared machine: waiting for the
cores does not count) and wall time on more (CPU time would count every thread);
``--clock`` overrides. Two-thread wall times are only worth reading on an idle machine:
the thread pools of the libraries timed one after the other spin for a while after each
call (``--settle`` sleeps before each sample; ``--best`` adds a table of the fastest
samples). Last, ``kernel ms/step`` adds up each column's medians per CNN.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import onednn_probe  # noqa: E402
from tapeflow.kernels.nn import NNKernels  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:         # optional: NumPy's BLAS then runs with its own thread count
    threadpool_limits = None

ARCHS = {"cnn32": "small", "example": "example", "tutorial": "tutorial"}
OPS = ("fwd", "dx", "dw")
BATCH, HW = 32, 28
MIN_DENSE_WEIGHTS = 100_000


# --- the layers -------------------------------------------------------------------------

def layers(arch_names, batch=BATCH, hw=HW):
    """``[dict]``: each conv / dense layer of the named archs with its shapes; convs:
    ``x`` (N, H, W, C), ``w`` (kh, kw, C, O), ``pads`` (pt, pb, pl, pr), ``first``."""
    out = []
    for name in arch_names:
        h = w = hw
        c, flat, nconv, ndense = 1, None, 0, 0
        for spec in common.CNN_ARCHS[ARCHS[name]]:
            kind = spec[0]
            if kind == "conv":
                k, o = spec[2], spec[1]
                p = (k - 1) // 2
                pads = (p, k - 1 - p, p, k - 1 - p) if spec[3] == "same" else (0, 0, 0, 0)
                nconv += 1
                out.append({"name": f"{name}.conv{nconv}", "kind": "conv", "x": (batch, h, w, c),
                            "w": (k, k, c, o), "pads": pads, "padding": spec[3].upper(),
                            "first": nconv == 1})
                h, w, c = h + pads[0] + pads[1] - k + 1, w + pads[2] + pads[3] - k + 1, o
            elif kind == "pool":
                h, w = h // spec[1], w // spec[1]
            elif kind == "gap":
                flat = c
            elif kind == "flatten":
                flat = h * w * c
            else:
                ndense += 1
                fan_in = flat
                if fan_in * spec[1] >= MIN_DENSE_WEIGHTS:
                    out.append({"name": f"{name}.dense{ndense}", "kind": "dense",
                                "mkn": (batch, fan_in, spec[1]), "first": False})
                flat = spec[1]
    return out


def flops(layer):
    """Multiply-adds x 2 of one pass (forward, input or filter gradient: the same)."""
    if layer["kind"] == "dense":
        m, k, n = layer["mkn"]
        return 2 * m * k * n
    n, h, w, c = layer["x"]
    kh, kw, _, o = layer["w"]
    pt, pb, pl, pr = layer["pads"]
    return 2 * n * (h + pt + pb - kh + 1) * (w + pl + pr - kw + 1) * kh * kw * c * o


def data(layer, seed=0):
    """NHWC / HWIO float32 operands of a layer: ``{"x", "w", "dy"}``."""
    rng = np.random.default_rng(seed)
    if layer["kind"] == "dense":
        m, k, n = layer["mkn"]
        return {"x": rng.standard_normal((m, k), dtype=np.float32),
                "w": (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32),
                "dy": rng.standard_normal((m, n), dtype=np.float32)}
    x = rng.standard_normal(layer["x"], dtype=np.float32)
    w = (rng.standard_normal(layer["w"]) / np.sqrt(np.prod(layer["w"][:3]))).astype(np.float32)
    n, h, wd, _ = layer["x"]
    kh, kw, _, o = layer["w"]
    pt, pb, pl, pr = layer["pads"]
    dy = rng.standard_normal((n, h + pt + pb - kh + 1, wd + pl + pr - kw + 1, o),
                             dtype=np.float32)
    return {"x": x, "w": w, "dy": dy}


# --- the implementations: {op: fn() -> result} per framework ------------------------------

def numpy_impl(layer, d, k=None):
    """``NNKernels`` ``k`` (default: NumPy's path only) on a convolution; NumPy's ``@``
    on a dense layer (``{}`` when ``k`` is given: the MatMul kernel is elsewhere)."""
    if layer["kind"] == "dense":
        x, w, dy = d["x"], d["w"], d["dy"]
        if k is not None:
            return {}
        return {"fwd": lambda: x @ w, "dx": lambda: dy @ w.T, "dw": lambda: x.T @ dy}
    k = k or NNKernels(np)
    x, w, dy, pad = d["x"], d["w"], d["dy"], layer["padding"]
    s = dil = (1, 1)
    return {"fwd": lambda: k.conv2d(x, w, s, pad, "NHWC", dil),
            "dx": lambda: k.conv2d_backprop_input(w, dy, x.shape, s, pad, "NHWC", dil),
            "dw": lambda: k.conv2d_backprop_filter(x, dy, w.shape, s, pad, "NHWC", dil)}


def native_impl(native, isa, layer, d):
    """Calls of ``tapeflow_cpu_numpy.native`` with ``isa`` forced around each call."""
    def on_isa(fn):
        def run():
            native.set_isa(isa)
            return fn()
        return run

    x, w, dy = d["x"], d["w"], d["dy"]
    if layer["kind"] == "dense":
        return {"fwd": on_isa(lambda: native.matmul(x, w)),
                "dx": on_isa(lambda: native.matmul(dy, w, transpose_b=True)),
                "dw": on_isa(lambda: native.matmul(x, dy, transpose_a=True))}
    s = dil = (1, 1)
    pads = layer["pads"]
    kh, kw = layer["w"][:2]
    bpi = getattr(native, "conv2d_backprop_input", None)
    if bpi is not None:
        def dx():
            return bpi(w, dy, x.shape, s, pads, dil)
    else:
        # stride 1: the correlation of dy padded by k-1-p with the flipped, transposed w
        tpads = (kh - 1 - pads[0], kh - 1 - pads[1], kw - 1 - pads[2], kw - 1 - pads[3])

        def dx():
            wf = np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))
            return native.conv2d(dy, wf, s, tpads, dil)
    return {"fwd": on_isa(lambda: native.conv2d(x, w, s, pads, dil)), "dx": on_isa(dx),
            "dw": on_isa(lambda: native.conv2d_backprop_filter(x, dy, (kh, kw), s, pads, dil))}


def torch_impl(torch, layer, d):
    """PyTorch in its own layouts (NCHW / OIHW, Linear's (out, in)); results converted
    to NHWC / HWIO only for the check, never in the timed calls."""
    F = torch.nn.functional
    if layer["kind"] == "dense":
        x = torch.from_numpy(d["x"])
        W = torch.from_numpy(np.ascontiguousarray(d["w"].T))      # (out, in)
        dy = torch.from_numpy(d["dy"])
        return {"fwd": lambda: F.linear(x, W), "dx": lambda: torch.mm(dy, W),
                "dw": lambda: torch.mm(dy.t(), x)}, \
            {"fwd": lambda r: r.numpy(), "dx": lambda r: r.numpy(),
             "dw": lambda r: r.numpy().T}
    x = torch.from_numpy(np.ascontiguousarray(d["x"].transpose(0, 3, 1, 2)))
    w = torch.from_numpy(np.ascontiguousarray(d["w"].transpose(3, 2, 0, 1)))
    dy = torch.from_numpy(np.ascontiguousarray(d["dy"].transpose(0, 3, 1, 2)))
    pt, pb, pl, pr = layer["pads"]
    if pt != pb or pl != pr:
        raise ValueError("asymmetric padding")
    p = (pt, pl)
    grad = torch.nn.grad
    return {"fwd": lambda: F.conv2d(x, w, padding=p),
            "dx": lambda: grad.conv2d_input(x.shape, w, dy, padding=p),
            "dw": lambda: grad.conv2d_weight(x, w.shape, dy, padding=p)}, \
        {"fwd": lambda r: r.numpy().transpose(0, 2, 3, 1),
         "dx": lambda r: r.numpy().transpose(0, 2, 3, 1),
         "dw": lambda r: r.numpy().transpose(2, 3, 1, 0)}


def onednn_impls(dnnl, layer, d, ops):
    """``{column: {op: fn}}`` and ``{op: {layout: (impl, layouts)}}`` for the report."""
    x, w, dy = d["x"], d["w"], d["dy"]
    cols = {"dnnl": {}, "dnnl*": {}, "dnnl*c": {}}
    info = {}
    for layout, col in (("user", "dnnl"), ("any", "dnnl*")):
        for op in ops:
            if layer["kind"] == "dense":
                m, k, n = layer["mkn"]
                if layout == "any":
                    continue
                prim, args = {"fwd": (dnnl.matmul(m, k, n), (x, w)),
                              "dx": (dnnl.matmul(m, n, k, transpose_b=True), (dy, w)),
                              "dw": (dnnl.matmul(k, m, n, transpose_a=True), (x, dy))}[op]
            else:
                make = {"fwd": dnnl.conv_forward, "dx": dnnl.conv_backward_data,
                        "dw": dnnl.conv_backward_weights}[op]
                prim = make(layer["x"], layer["w"], (1, 1), layer["pads"], layout)
                args = {"fwd": (x, w), "dx": (w, dy), "dw": (x, dy)}[op]
            info.setdefault(op, {})[layout] = (prim.impl, prim.layouts, prim.reorders)
            out = np.empty(prim.out_shapes[next(iter(prim.out_shapes))], np.float32)
            cols[col][op] = (lambda p=prim, a=args, o=out: p(*a, out=o))
            if layout == "any":
                cols["dnnl*c"][op] = (lambda p=prim, a=args, o=out: p(*a, out=o,
                                                                        compute_only=True))
    return {c: v for c, v in cols.items() if v}, info


# --- timing -------------------------------------------------------------------------------

def rel_err(got, want):
    return float(np.abs(np.asarray(got, np.float64) - want).max() / max(1.0, np.abs(want).max()))


def run_case(layer, op, impls, convert, args):
    """Check every implementation against ``np``, then time them interleaved:
    ``{column: (GFLOP/s median, seconds median) or "ERR ..."}``."""
    want = np.asarray(impls["np"](), np.float64)
    errors, ok = {}, {}
    for col, fn in impls.items():
        try:
            got = fn()
            if got is None:
                errors[col] = "returned None (not handled)"
                continue
            got = convert.get(col, np.asarray)(got)
            e = rel_err(got, want) if got.shape == want.shape else float("inf")
            if not e < 1e-3:
                errors[col] = f"ERR: rel. error {e:.1e} (shape {got.shape} vs {want.shape})"
                continue
        except Exception as e:          # noqa: BLE001 (reported in the table)
            errors[col] = f"ERR: {type(e).__name__}: {e}".splitlines()[0][:160]
            continue
        ok[col] = common.loop(fn)
    case = SimpleNamespace(impls=ok, ratios={}, times={})
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    common.measure(case, rounds=args.rounds, min_time=args.min_time, calibrate="each",
                   clock=clock, errors=errors, settle_s=args.settle)
    f = flops(layer)
    res = {}
    for col in impls:
        if col in case.times and case.times[col]:
            t = statistics.median(case.times[col])
            best = min(case.times[col])
            res[col] = {"gflops": f / t / 1e9, "ms": t * 1e3, "best_gflops": f / best / 1e9,
                        "samples": case.times[col]}
        else:
            res[col] = {"error": errors.get(col, "not timed")}
    return res


def machine(args, torch, native, dnnl):
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "cpus": os.cpu_count(), "threads": args.threads, "clock": args.clock,
            "cpu": platform.processor() or platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in f
                               if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if torch is not None:
        info["torch"] = f"{torch.__version__} ({torch.get_num_threads()} threads)"
    if native is not None:
        info["native"] = f"isas {native.isas()}, best {native.isa()}"
    if dnnl is not None:
        info["onednn"] = f"{dnnl.version} ({dnnl.runtime}) from {dnnl.path}"
    return info


def load_native():
    """``(module, None)`` or ``(None, why)``."""
    try:
        from tapeflow_cpu_numpy import native
    except ImportError as e:
        return None, f"tapeflow_cpu_numpy.native not importable ({e})"
    if not native.available():
        return None, f"native kernels unavailable: {native.reason()}"
    return native, None


def set_threads(n, torch, native, dnnl):
    if torch is not None:
        torch.set_num_threads(n)
    if native is not None:
        native.set_num_threads(n)
    if dnnl is not None:
        dnnl.set_num_threads(n)
    if threadpool_limits is not None:
        return threadpool_limits(limits=n)
    return None


def print_table(results, cols, stat="median"):
    w = 8
    key = "gflops" if stat == "median" else "best_gflops"
    print(f"\n{'layer':16} {'op':3} {'shape':28} {'MFLOP':>7} " +
          " ".join(c.rjust(w) for c in cols) + f"   (GFLOP/s, {stat})")
    for r in results:
        cells = []
        for c in cols:
            v = r["res"].get(c)
            if v is None:
                cells.append("-".rjust(w))
            elif key in v:
                cells.append(f"{v[key]:.1f}".rjust(w))
            else:
                cells.append(("ERR" if v["error"].startswith("ERR") else "n/a").rjust(w))
        print(f"{r['layer']:16} {r['op']:3} {r['shape']:28} {r['mflop']:7.1f} " + " ".join(cells))
    notes = {(c, v["error"]) for r in results for c, v in r["res"].items() if "error" in v}
    for c, e in sorted(notes):
        print(f"  {c}: {e}")


def print_totals(results, cols, fallback):
    """Per arch and column, the milliseconds of all the timed kernels of one step (a
    column without a dense figure borrows ``fallback[column]``'s)."""
    archs = list(dict.fromkeys(r["layer"].split(".")[0] for r in results))
    print(f"\n{'kernel ms/step':16} " + " ".join(c.rjust(8) for c in cols) +
          "   (sum of the medians above; dnnl*/tf:nat dense: " +
          ", ".join(f"{k}<-{v}" for k, v in fallback.items()) + ")")
    for a in archs:
        cells = []
        for c in cols:
            total = 0.0
            for r in results:
                if r["layer"].split(".")[0] != a:
                    continue
                v = r["res"].get(c) or r["res"].get(fallback.get(c, ""), {})
                if "ms" not in v:
                    total = None
                    break
                total += v["ms"]
            cells.append(("-" if total is None else f"{total:.2f}").rjust(8))
        print(f"{a:16} " + " ".join(cells))


def print_onednn(dnnl_info):
    """Which implementation oneDNN picked per layer and op, in the user's layouts and in
    its own (with the reorders that needs)."""
    if not dnnl_info:
        return
    print("\noneDNN implementations (user NHWC/HWIO layouts | oneDNN's choice):")
    for name, per_op in dnnl_info.items():
        for op, by in per_op.items():
            u = by.get("user", ("-",))[0]
            a = by.get("any")
            any_s = f"{a[0]} ({a[2]} reorders: {a[1]})" if a else "-"
            print(f"  {name:16} {op:3} {u:20} | {any_s}")


def shape_str(layer, op):
    if layer["kind"] == "dense":
        m, k, n = layer["mkn"]
        return {"fwd": f"({m}x{k})@({k}x{n})", "dx": f"({m}x{n})@({n}x{k})",
                "dw": f"({k}x{m})@({m}x{n})"}[op]
    n, h, w, c = layer["x"]
    kh, kw, _, o = layer["w"]
    return f"{n}x{h}x{w}x{c} k{kh}x{kw}->{o} p{layer['pads'][0]}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="threads of every library (1)")
    ap.add_argument("--arch", default="cnn32,example,tutorial",
                    help="comma-separated subset of " + ",".join(ARCHS))
    ap.add_argument("--ops", default=",".join(OPS), help="subset of fwd,dx,dw")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.01, help="seconds per sample")
    ap.add_argument("--settle", type=float, default=None,
                    help="sleep before each sample so the thread pools of the library "
                         "timed before are idle (OpenBLAS's workers spin ~0.1 s after a "
                         "call), seconds; default 0 on one thread, 0.02 on more")
    ap.add_argument("--clock", choices=("cpu", "wall"), default=None,
                    help="default: cpu on one thread, wall on more")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 5 ms samples")
    ap.add_argument("--best", action="store_true",
                    help="also print the best (fastest) sample's GFLOP/s: on a loaded "
                         "machine the least disturbed figure")
    ap.add_argument("--isas", help="the native ISA variants to time (default: all of "
                    "native.isas(); the portable one is slow: e.g. --isas avx512,avx2)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-native", action="store_true")
    ap.add_argument("--no-onednn", action="store_true")
    ap.add_argument("--onednn-lib", help="libdnnl.so.3 (default: $TAPEFLOW_ONEDNN_LIB, ...)")
    ap.add_argument("--json", help="write every sample and the machine to this file")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.min_time = 3, 0.005
    args.clock = args.clock or ("cpu" if args.threads == 1 else "wall")
    if args.settle is None:
        args.settle = 0.0 if args.threads == 1 else 0.02
    archs = [a for a in args.arch.split(",") if a]
    ops = [o for o in args.ops.split(",") if o]
    bad = [a for a in archs if a not in ARCHS] + [o for o in ops if o not in OPS]
    if bad:
        ap.error(f"unknown arch/op {bad}")

    torch, why_torch = common.load_torch(args.no_torch)
    native, why_native = (None, "disabled with --no-native") if args.no_native else load_native()
    dnnl, why_dnnl = ((None, "disabled with --no-onednn") if args.no_onednn
                      else onednn_probe.load(args.onednn_lib))
    limits = set_threads(args.threads, torch, native, dnnl)
    info = machine(args, torch, native, dnnl)
    for k, v in info.items():
        print(f"{k}: {v}")
    for who, why in (("torch", why_torch), ("native", why_native), ("onednn", why_dnnl)):
        if why:
            print(f"{who}: skipped: {why}")
    if threadpool_limits is None:
        print("numpy: threadpoolctl not installed: NumPy's BLAS runs its default threads")

    tf_native = None
    if native:
        try:    # the kernels as tapeflow builds them with the native service (best ISA)
            tf_native = NNKernels(np, native=native)
        except TypeError:
            print("tf:nat: skipped: this NNKernels takes no native service")
    isas = [i for i in (native.isas() if native else [])
            if args.isas is None or i in args.isas.split(",")]
    cols = ["np"] + (["tf:nat"] if tf_native else []) + [f"nat:{i}" for i in isas] + \
        (["torch"] if torch else []) + (["dnnl", "dnnl*", "dnnl*c"] if dnnl else [])
    results, dnnl_info = [], {}
    t_start = time.perf_counter()
    for layer in layers(archs):
        d = data(layer)
        impl = {"np": numpy_impl(layer, d)}
        convert = {}
        if tf_native is not None:      # on the best ISA (the nat:<isa> columns force one)
            impl["tf:nat"] = {op: (lambda f=f: (native.set_isa(None), f())[1])
                              for op, f in numpy_impl(layer, d, tf_native).items()}
        for isa in isas:
            impl[f"nat:{isa}"] = native_impl(native, isa, layer, d)
        if torch:
            impl["torch"], tconv = torch_impl(torch, layer, d)
        want_ops = [o for o in ops if not (o == "dx" and layer["first"])]
        if dnnl:
            try:
                dcols, dnnl_info[layer["name"]] = onednn_impls(dnnl, layer, d, want_ops)
                impl.update(dcols)
            except RuntimeError as e:
                print(f"onednn: {layer['name']}: {e}")
        for op in want_ops:
            fns = {c: v[op] for c, v in impl.items() if op in v}
            if torch:
                convert["torch"] = tconv[op]
            res = run_case(layer, op, fns, convert, args)
            results.append({"layer": layer["name"], "op": op, "shape": shape_str(layer, op),
                            "mflop": flops(layer) / 1e6, "res": res})
            best = max((v["gflops"], c) for c, v in res.items() if "gflops" in v)
            print(f"  {layer['name']:16} {op:3} done (best {best[1]} {best[0]:.1f} GFLOP/s)",
                  flush=True)
    if native:
        native.set_isa(None)
    print_table(results, cols)
    fallback = {"dnnl*": "dnnl", "dnnl*c": "dnnl"}
    if native:
        fallback["tf:nat"] = f"nat:{native.isa()}"
    if set(ops) == set(OPS):
        print_totals(results, cols, {k: v for k, v in fallback.items() if k in cols})
    if args.best:
        print_table(results, cols, "best")
    print_onednn(dnnl_info)
    print(f"\n{time.perf_counter() - t_start:.0f} s; clock: {args.clock} time; "
          f"threads: {args.threads}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "args": vars(args), "results": results,
                       "onednn": {k: {op: {lay: list(v) for lay, v in by.items()}
                                      for op, by in per.items()}
                                  for k, per in dnnl_info.items()}}, f, indent=1)
    del limits
    return 0


if __name__ == "__main__":
    sys.exit(main())
