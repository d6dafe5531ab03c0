#!/usr/bin/env python
"""tapeflow on cuda:0 against raw CuPy and PyTorch CUDA, in one process, interleaved.

Cases (each implementation written the way a good engineer would in that framework):

* ``matmul``  4096x4096 @ 4096x4096 float32
* ``conv``    conv2d, batch 64, 56x56x64 -> 64 channels, 3x3, SAME, float32
  (tapeflow: NHWC, cuDNN when enabled else im2col + GEMM; raw CuPy: im2col + GEMM by
  hand; PyTorch: cuDNN, channels_last)
* ``convbwd`` the same conv2d forward + backward (input and filter gradients through
  GradientTape / autograd), the issue's figure: at most 1.1x PyTorch's time
* ``cnn32``   one Adam training step of the seeds' CNN (Conv2D(16,3x3,relu) x2,
  GlobalAveragePooling2D, Dense(10)) on 28x28x1, batch 32: tapeflow vs PyTorch
  (channels_last), from the same weights, and tapeflow on ``cpu:0`` (the row
  ``tapeflow-cpu``: the GPU must beat it)
* ``add``     per-op overhead: ``a + b`` on 1,000 float32 elements, 1,000 calls
* ``mlp64`` / ``mlp1024``  an MLP 784-256-256-10 SGD step (forward, softmax
  cross-entropy, backward, update): tapeflow with GradientTape, PyTorch autograd,
  raw CuPy with the backward pass written by hand

Every timed run ends with a device synchronisation (``cudaDeviceSynchronize``) before
the clock stops. Each round times every implementation once, in a rotating order, so
drifts (clocks, other load) hit all of them alike; the ratio shown is the median over
rounds of the per-round ratio ``other / tapeflow`` (> 1: tapeflow is faster). Before
timing, each case checks that its implementations compute the same thing.

TF32 is disabled in PyTorch (``allow_tf32 = False`` for cuBLAS and cuDNN) so all three
compute in full float32, as CuPy does, and tapeflow runs with its default strict float32
(``--tf32`` turns TF32 on in tapeflow *and* PyTorch). tapeflow's convolutions use cuDNN
only when enabled (opt-in: ``--cudnn``, or ``TAPEFLOW_CUDNN=1``); the report says which
path and engine each conv op took, and at which precision. Without a GPU the script
prints why and the conv path it would take, and exits 0.

    python benchmarks/gpu_compare.py            # about a minute
    python benchmarks/gpu_compare.py --cudnn --cases conv,convbwd,cnn32
    python benchmarks/gpu_compare.py --quick    # a few seconds, noisier
    python benchmarks/gpu_compare.py --cases matmul,add --json out.json
    python benchmarks/gpu_compare.py --tiny --json out.json   # tiny shapes: the script's
                                                              # own check (CuPy stand-in)

``--json FILE`` writes, per case, the raw times, the per-round ratios, the errors and
the median seconds per framework, plus ``_meta`` (device, versions, the conv path and
the float32 precision); ``scripts/gpu_check.py`` reads it for its summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

import common
from common import fmt_time, guard, load_torch, measure


class NoGPU(Exception):
    """Why the GPU rows cannot run here."""


def _load(tf32=False):
    import tapeflow as tf
    try:
        import cupy as cp
    except Exception as e:
        raise NoGPU(f"CuPy is not importable ({type(e).__name__}: {e}); "
                    "pip install -e 'backends/cuda_cupy[cuda13]'") from None
    if not any(d.type == "cuda" for d in tf.list_devices()):
        from tapeflow.runtime.devices import table
        raise NoGPU("tapeflow has no cuda device: "
                    f"{_table.unavailable.get('cupy', 'tapeflow-cuda-cupy not loaded')}")
    torch, why = load_torch(cuda=True, tf32=tf32)
    return tf, cp, torch, why


def conv_path_lines(tf):
    """Which path tapeflow's conv ops take on cuda (cuDNN engine or im2col and why),
    and the float32 precision."""
    try:
        from tapeflow_cuda_cupy import cudnn_conv
    except ImportError as e:
        return [f"conv path: tapeflow-cuda-cupy not importable ({e})"]
    lines = [f"conv path on cuda: {cudnn_conv.describe()}"]
    conv = cudnn_conv.ACTIVE[0]
    for op, last in sorted((conv.last if conv is not None else {}).items()):
        if last[0] == "cudnn":
            lines.append(f"  {op}: cuDNN engine {last[1]}, {last[2]}")
        else:
            lines.append(f"  {op}: im2col ({last[1]})")
    prec = "TF32" if tf.config.experimental.tensor_float_32_execution_enabled() \
        else "strict float32"
    lines.append(f"tapeflow float32 precision: {prec} (PyTorch allow_tf32 set to match)")
    return lines


#: where tapeflow runs (tests of this script may point it elsewhere)
DEVICE = "gpu:0"

#: the cases' sizes; ``--tiny`` shrinks them (a run in seconds on the CuPy stand-in, to
#: check the script itself, e.g. ``scripts/gpu_check.py check --dry-run``)
SIZES = {"matmul": 4096, "conv": (64, 56, 56, 64, 64), "cnn": None, "add": 1000}
TINY_SIZES = {"matmul": 64, "conv": (2, 8, 8, 4, 4), "cnn": (2, 8), "add": 100}


class Case:
    def __init__(self, key, title, unit, per_run):
        self.key, self.title, self.unit, self.per_run = key, title, unit, per_run
        self.impls = {}       # framework -> run(n)
        self.errors = {}
        self.times = {}       # framework -> [seconds per unit]
        self.ratios = {}      # framework -> [other / tapeflow per round]


# --- cases ------------------------------------------------------------------------------

def case_matmul(tf, cp, torch):
    n = SIZES["matmul"]
    c = Case("matmul", f"matmul {n}x{n} float32", "call", 5)
    rng = np.random.default_rng(0)
    an = rng.standard_normal((n, n), dtype=np.float32)
    bn = rng.standard_normal((n, n), dtype=np.float32)
    ref = cp.asnumpy(cp.asarray(an) @ cp.asarray(bn))

    def build_tf():
        with tf.device(DEVICE):
            a, b = tf.constant(an), tf.constant(bn)
        np.testing.assert_allclose(tf.matmul(a, b).numpy(), ref, rtol=1e-3, atol=1e-2)

        def run(k):
            for _ in range(k):
                tf.matmul(a, b)
        return run

    def build_cp():
        a, b = cp.asarray(an), cp.asarray(bn)

        def run(k):
            for _ in range(k):
                a @ b
        return run

    def build_torch():
        a, b = torch.from_numpy(an).cuda(), torch.from_numpy(bn).cuda()
        np.testing.assert_allclose((a @ b).cpu().numpy(), ref, rtol=1e-3, atol=1e-2)

        def run(k):
            for _ in range(k):
                a @ b
        return run

    guard(c, "tapeflow", build_tf)
    guard(c, "cupy", build_cp)
    if torch is not None:
        guard(c, "torch", build_torch)
    return c


def _im2col_conv(cp, x, w):
    """The raw-CuPy reference: NHWC, 3x3, stride 1, SAME, by im2col + one GEMM."""
    n, h, wd, ci = x.shape
    kh, kw, _, co = w.shape
    xp = cp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    s0, s1, s2, s3 = xp.strides
    win = cp.lib.stride_tricks.as_strided(xp, (n, h, wd, kh, kw, ci), (s0, s1, s2, s1, s2, s3))
    cols = win.reshape(n * h * wd, kh * kw * ci)
    return (cols @ w.reshape(kh * kw * ci, co)).reshape(n, h, wd, co)


def case_conv(tf, cp, torch):
    b, h, w_, ci, co = SIZES["conv"]
    c = Case("conv", f"conv2d {b}x{h}x{w_}x{ci} -> {co}, 3x3 SAME, float32", "call", 5)
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((b, h, w_, ci), dtype=np.float32)
    wn = (rng.standard_normal((3, 3, ci, co)) * 0.05).astype(np.float32)
    ref = cp.asnumpy(_im2col_conv(cp, cp.asarray(xn), cp.asarray(wn)))

    def build_tf():
        with tf.device(DEVICE):
            x, w = tf.constant(xn), tf.constant(wn)
        y = tf.nn.conv2d(x, w, strides=1, padding="SAME")
        np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-3)

        def run(k):
            for _ in range(k):
                tf.nn.conv2d(x, w, strides=1, padding="SAME")
        return run

    def build_cp():
        x, w = cp.asarray(xn), cp.asarray(wn)

        def run(k):
            for _ in range(k):
                _im2col_conv(cp, x, w)
        return run

    def build_torch():
        f = torch.nn.functional
        x, w = _torch_channels_last(torch, xn, wn)
        y = f.conv2d(x, w, padding=1)
        np.testing.assert_allclose(y.permute(0, 2, 3, 1).cpu().numpy(), ref, rtol=1e-3,
                                   atol=1e-3)

        def run(k):
            for _ in range(k):
                f.conv2d(x, w, padding=1)
        return run

    guard(c, "tapeflow", build_tf)
    guard(c, "cupy", build_cp)
    if torch is not None:
        guard(c, "torch", build_torch)
    return c


def _torch_channels_last(torch, x_nhwc, w_hwio=None):
    """NHWC images (and an HWIO filter) as PyTorch CUDA tensors in channels_last memory:
    the same bytes order as tapeflow's NHWC, so both libraries run their NHWC kernels."""
    cl = torch.channels_last
    out = [torch.from_numpy(x_nhwc).cuda().permute(0, 3, 1, 2).contiguous(memory_format=cl)]
    if w_hwio is not None:
        out.append(torch.from_numpy(w_hwio).cuda().permute(3, 2, 0, 1)
                   .contiguous(memory_format=cl))
    return out


def case_conv_backward(tf, cp, torch):
    """conv2d forward + backward (dL/dx and dL/dw for an upstream gradient dy)."""
    b, h, w_, ci, co = SIZES["conv"]
    c = Case("convbwd", f"conv2d {b}x{h}x{w_}x{ci} -> {co}, 3x3 SAME, forward + backward",
             "step", 3)
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((b, h, w_, ci), dtype=np.float32)
    wn = (rng.standard_normal((3, 3, ci, co)) * 0.05).astype(np.float32)
    dyn = rng.standard_normal((b, h, w_, co), dtype=np.float32)
    out = {}

    def build_tf():
        with tf.device(DEVICE):
            x, w, dy = tf.constant(xn), tf.constant(wn), tf.constant(dyn)

        def step():
            with tf.GradientTape() as tape:
                tape.watch([x, w])
                y = tf.nn.conv2d(x, w, strides=1, padding="SAME")
            return tape.gradient(y, [x, w], output_gradients=dy)
        out["tapeflow"] = [g.numpy() for g in step()]

        def run(k):
            for _ in range(k):
                step()
        return run

    def build_torch():
        f = torch.nn.functional
        x, w = _torch_channels_last(torch, xn, wn)
        dy = _torch_channels_last(torch, dyn)[0]
        x.requires_grad_(True)
        w.requires_grad_(True)

        def step():
            y = f.conv2d(x, w, padding=1)
            return torch.autograd.grad(y, [x, w], dy)
        gx, gw = step()
        out["torch"] = [gx.permute(0, 2, 3, 1).cpu().numpy(), gw.permute(2, 3, 1, 0).cpu().numpy()]

        def run(k):
            for _ in range(k):
                step()
        return run

    guard(c, "tapeflow", build_tf)
    if torch is not None:
        guard(c, "torch", build_torch)
    if "tapeflow" in out and "torch" in out:
        for name, a, b in zip(("dx", "dw"), out["tapeflow"], out["torch"]):
            scale = max(1.0, float(np.abs(b).max()))
            if not np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale):
                c.errors["torch"] = f"{name} differs from tapeflow's by " \
                                    f"{float(np.abs(a - b).max()):.3g}"
                c.impls.pop("torch", None)
    return c


def case_cnn(tf, cp, torch, batch=32):
    """One Adam step of the seeds' CNN: tapeflow on the GPU, tapeflow on cpu:0 and
    PyTorch, all from the same weights."""
    key = f"cnn{batch}"
    batch, hw = SIZES["cnn"] or (batch, 28)
    c = Case(key, f"seeds' CNN Adam step, batch {batch}, {hw}x{hw}x1", "step", 5)
    xn, yn = common.cnn_data(batch, hw)
    state = {}

    def build_tf():
        model, step = common.tf_cnn_step(tf, xn, yn, DEVICE)
        state["weights"] = [v.numpy() for v in model.trainable_variables]
        state["tf_loss"] = float(step())
        return common.loop(step)

    def build_tf_cpu():
        _, step = common.tf_cnn_step(tf, xn, yn, "cpu:0", state["weights"])
        common.same_loss(float(step()), state["tf_loss"], "cpu:0")
        return common.loop(step)

    def build_torch():
        step = common.torch_cnn_step(torch, state["weights"], xn, yn, cuda=True)
        common.same_loss(float(step()), state["tf_loss"], "torch")
        return common.loop(step)

    guard(c, "tapeflow", build_tf)
    if "weights" in state:
        guard(c, "tapeflow-cpu", build_tf_cpu)
    if torch is not None and "weights" in state:
        guard(c, "torch", build_torch)
    return c


def case_add(tf, cp, torch):
    calls = SIZES["add"]
    c = Case("add", f"per-op overhead: a + b, float32 (1000,), {calls} calls", "call", calls)
    an = np.arange(1000, dtype=np.float32)
    bn = np.ones(1000, dtype=np.float32)

    def build_tf():
        with tf.device(DEVICE):
            a, b = tf.constant(an), tf.constant(bn)
        np.testing.assert_array_equal((a + b).numpy(), an + bn)

        def run(k):
            for _ in range(k):
                a + b
        return run

    def build_cp():
        a, b = cp.asarray(an), cp.asarray(bn)

        def run(k):
            for _ in range(k):
                a + b
        return run

    def build_torch():
        a, b = torch.from_numpy(an).cuda(), torch.from_numpy(bn).cuda()

        def run(k):
            for _ in range(k):
                a + b
        return run

    guard(c, "tapeflow", build_tf)
    guard(c, "cupy", build_cp)
    if torch is not None:
        guard(c, "torch", build_torch)
    return c


def _mlp_data(batch):
    rng = np.random.default_rng(2)
    sizes = [784, 256, 256, 10]
    ws = [(rng.standard_normal((i, o)) * np.sqrt(2.0 / i)).astype(np.float32)
          for i, o in zip(sizes[:-1], sizes[1:])]
    bs = [np.zeros(o, np.float32) for o in sizes[1:]]
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch).astype(np.int64)
    return ws, bs, x, y


def case_mlp(tf, cp, torch, batch):
    c = Case(f"mlp{batch}", f"MLP 784-256-256-10 SGD step, batch {batch}", "step", 20)
    lr = 0.01
    ws, bs, xn, yn = _mlp_data(batch)
    losses = {}

    def build_tf():
        with tf.device(DEVICE):
            W = [tf.Variable(w) for w in ws]
            B = [tf.Variable(b) for b in bs]
            x, y = tf.constant(xn), tf.constant(yn)
        params = W + B

        def step():
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, W[0]) + B[0])
                h = tf.nn.relu(tf.matmul(h, W[1]) + B[1])
                logits = tf.matmul(h, W[2]) + B[2]
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, params)
            for p, g in zip(params, grads):
                p.assign_sub(lr * g)
            return loss
        losses["tapeflow"] = [float(step()) for _ in range(3)]

        def run(k):
            for _ in range(k):
                step()
        return run

    def build_cp():
        W = [cp.asarray(w) for w in ws]
        B = [cp.asarray(b) for b in bs]
        x, y = cp.asarray(xn), cp.asarray(yn)
        rows = cp.arange(batch)

        def step():   # forward, hand-written backward, SGD
            z1 = x @ W[0] + B[0]
            h1 = cp.maximum(z1, 0)
            z2 = h1 @ W[1] + B[1]
            h2 = cp.maximum(z2, 0)
            logits = h2 @ W[2] + B[2]
            m = logits.max(axis=1, keepdims=True)
            e = cp.exp(logits - m)
            s = e.sum(axis=1, keepdims=True)
            loss = (cp.log(s)[:, 0] + m[:, 0] - logits[rows, y]).mean()
            d = e / s
            d[rows, y] -= 1
            d /= batch
            g2 = h2.T @ d
            gb2 = d.sum(0)
            dh2 = (d @ W[2].T) * (z2 > 0)
            g1 = h1.T @ dh2
            gb1 = dh2.sum(0)
            dh1 = (dh2 @ W[1].T) * (z1 > 0)
            g0 = x.T @ dh1
            gb0 = dh1.sum(0)
            for p, g in zip(W + B, (g0, g1, g2, gb0, gb1, gb2)):
                p -= lr * g
            return loss
        losses["cupy"] = [float(step()) for _ in range(3)]

        def run(k):
            for _ in range(k):
                step()
        return run

    def build_torch():
        lin = [torch.nn.Linear(w.shape[0], w.shape[1]).cuda() for w in ws]
        with torch.no_grad():
            for layer, w, b in zip(lin, ws, bs):
                layer.weight.copy_(torch.from_numpy(w.T.copy()))
                layer.bias.copy_(torch.from_numpy(b))
        model = torch.nn.Sequential(lin[0], torch.nn.ReLU(), lin[1], torch.nn.ReLU(), lin[2])
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        x, y = torch.from_numpy(xn).cuda(), torch.from_numpy(yn).cuda()
        f = torch.nn.functional

        def step():
            opt.zero_grad(set_to_none=True)
            loss = f.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        losses["torch"] = [float(step()) for _ in range(3)]

        def run(k):
            for _ in range(k):
                step()
        return run

    guard(c, "tapeflow", build_tf)
    guard(c, "cupy", build_cp)
    if torch is not None:
        guard(c, "torch", build_torch)
    ref = losses.get("tapeflow")
    for fw, ls in losses.items():   # same start, same data: the same three losses
        if ref is not None and fw != "tapeflow" and not np.allclose(ls, ref, rtol=1e-3):
            c.errors[fw] = f"losses differ from tapeflow's: {ls} vs {ref}"
            c.impls.pop(fw, None)
    return c


CASES = {
    "matmul": case_matmul,
    "conv": case_conv,
    "convbwd": case_conv_backward,
    "cnn32": case_cnn,
    "add": case_add,
    "mlp64": lambda tf, cp, torch: case_mlp(tf, cp, torch, 64),
    "mlp1024": lambda tf, cp, torch: case_mlp(tf, cp, torch, 1024),
}


# --- timing ------------------------------------------------------------------------------

#: the report's rows per case, in order (``tapeflow-cpu``: tapeflow on cpu:0)
FRAMEWORKS = ("tapeflow", "tapeflow-cpu", "cupy", "torch")


def report(cases, torch_why, out=sys.stdout):
    w = out.write
    w(f"{'case':<10} {'framework':<12} {'median':>11} {'best':>11} {'other/tapeflow':>15}\n")
    w("-" * 65 + "\n")
    for c in cases:
        for fw in FRAMEWORKS:
            if fw in c.times:
                ts = c.times[fw]
                ratio = ""
                if fw in c.ratios:
                    ratio = f"{statistics.median(c.ratios[fw]):14.2f}x"
                w(f"{c.key:<10} {fw:<12} {fmt_time(statistics.median(ts), 11)} {fmt_time(min(ts), 11)} "
                  f"{ratio:>15}\n")
            elif fw in c.errors:
                w(f"{c.key:<10} {fw:<12} ERROR: {c.errors[fw]}\n")
        w("\n")
    if torch_why:
        w(f"PyTorch CUDA columns skipped: {torch_why}\n")
    for c in cases:
        if c.key == "add" and "tapeflow" in c.times and "cupy" in c.times:
            d = statistics.median(c.times["tapeflow"]) - statistics.median(c.times["cupy"])
            w(f"tapeflow dispatch overhead over raw CuPy: {d * 1e6:.2f} us per op\n")
    w("ratio = other framework's time / tapeflow's time, median over interleaved rounds "
      "(> 1: tapeflow faster)\n")


def _dump(args, tf, cp, torch, torch_why, dev, cases):
    res = {c.key: {"title": c.title, "unit": c.unit, "times": c.times,
                   "ratios": c.ratios, "errors": c.errors,
                   "median": {fw: statistics.median(ts) for fw, ts in c.times.items() if ts}}
           for c in cases}
    res["_meta"] = {
        "device": f"{dev.name} ({dev.description})", "tapeflow": tf.__version__,
        "cupy": cp.__version__, "torch": getattr(torch, "__version__", None),
        "torch_skipped": torch_why, "cudnn_switch": bool(args.cudnn),
        "tf32": bool(args.tf32), "tiny": bool(args.tiny),
        "conv_path": conv_path_lines(tf)}
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " +
                    ", ".join(CASES))
    ap.add_argument("--json", help="write the timings here (raw, medians, and _meta)")
    ap.add_argument("--tiny", action="store_true",
                    help="tiny shapes and two rounds: checks the script (e.g. on the CuPy "
                         "stand-in), measures nothing")
    ap.add_argument("--cudnn", action="store_true",
                    help="tapeflow convolutions through cuDNN (opt-in; else TAPEFLOW_CUDNN)")
    ap.add_argument("--tf32", action="store_true",
                    help="allow TF32 in tapeflow and PyTorch (default: strict float32)")
    args = ap.parse_args(argv)
    if args.tiny:
        SIZES.update(TINY_SIZES)
    import tapeflow
    if args.cudnn:
        tapeflow.config.experimental.enable_cudnn_convolutions(True)
    tapeflow.config.experimental.enable_tensor_float_32_execution(args.tf32)
    try:
        tf, cp, torch, torch_why = _load(args.tf32)
    except NoGPU as e:
        print(f"gpu_compare: every row skipped, no GPU here: {e}")
        print("\n".join(conv_path_lines(tapeflow)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"_meta": {"skipped": str(e),
                                     "conv_path": conv_path_lines(tapeflow)}}, f, indent=1)
        return 0
    dev = tf.runtime.devices.get_device(DEVICE)
    print(f"tapeflow {tf.__version__} on {dev.name} ({dev.description}); CuPy {cp.__version__}"
          + (f"; PyTorch {torch.__version__}" if torch is not None else ""))

    def sync():
        cp.cuda.runtime.deviceSynchronize()

    rounds, min_time = (5, 0.02) if args.quick else (15, 0.1)
    if args.tiny:
        rounds, min_time = 2, 0.0
    cases = []
    for key in args.cases.split(","):
        key = key.strip()
        if key not in CASES:
            sys.exit(f"unknown case {key!r}; choose from {', '.join(CASES)}")
        c = CASES[key](tf, cp, torch)
        if c.impls:
            measure(c, sync, rounds, min_time, "tapeflow", per_run=c.per_run,
                    max_repeat=1 << 12)
        cases.append(c)
        cp.get_default_memory_pool().free_all_blocks()
        if torch is not None:
            torch.cuda.empty_cache()
        if args.json:       # after every case: a run killed later keeps what it measured
            _dump(args, tf, cp, torch, torch_why, dev, cases)
    report(cases, torch_why)
    print("\n".join(conv_path_lines(tf)))
    failed = [f"{c.key}/{fw}" for c in cases for fw in c.errors]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
