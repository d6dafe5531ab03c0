"""What the benchmark scripts share: interleaved timing, peer set-up, the seeds' CNN, and
the formatting of times (``compare.py``, ``gpu_compare.py``, ``opencl_compare.py``,
``ratio_cases.py`` behind asv's ``bench_ratios`` and ``scripts/bench_check.py``).

:func:`measure` warms every implementation up, calibrates an inner repeat so one
sample lasts ``min_time``, then takes ``rounds`` rounds; each round times every
implementation once, in an order that rotates from round to round, with ``sync()``
(the device's queue drained) before the clock starts and before it stops. It fills
``case.times[impl]`` (seconds per unit) and ``case.ratios[other]`` (per-round
``other / ref`` time ratios: > 1 means ``ref`` is faster).

``calibrate``: ``"ref"`` (default) times every implementation with the repeat that makes
``ref``'s sample last ``min_time``; ``"each"`` calibrates each implementation on its own
(``compare.py``: its peers differ by orders of magnitude per call).

``settle_s`` (default 0): before each sample, sleep that long, so the thread pools of
the implementation timed just before (OpenBLAS and OpenMP workers spin for a while
after a call) are idle and do not steal the cores.

``clock`` (default ``time.perf_counter``, wall time): what the samples are read from.
The ratio benchmarks pass ``time.process_time`` for work that runs on this machine's
CPUs (cpu:0, OpenCL on a CPU): the process's CPU time, all its threads, does not count
the time the process waits while other jobs hold the cores, the largest noise on a
shared machine. Wall time stays right for a GPU (the host waits, the device works).

``errors``: a dict; an implementation that raises while it is calibrated or timed is
dropped from the case and its first error line stored there (without it, the error
propagates).
"""

from __future__ import annotations

import contextlib
import gc
import time

import numpy as np


def _nothing():
    pass


def measure(case, sync=_nothing, rounds=7, min_time=0.02, ref=None, per_run=1,
            max_repeat=1 << 14, settle_s=0.0, clock=time.perf_counter, calibrate="ref",
            errors=None, collect=False):
    """Time ``case.impls`` (``{name: run(n)}``, ``run(n)`` does ``n`` calls of
    ``per_run`` units each; ``per_run`` may be a ``{name: units}`` dict). ``collect``:
    ``gc.collect()`` before each sample. Returns ``{name: repeat}``."""
    units = per_run if isinstance(per_run, dict) else dict.fromkeys(case.impls, per_run)
    impls = list(case.impls)
    counts = {}

    def failed(name, e):
        if errors is None:
            raise e
        errors[name] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
        impls.remove(name)

    for name in list(impls):                # warm-up: compile kernels, fill caches
        try:
            case.impls[name](1)
            sync()
            if calibrate == "each":
                counts[name] = _repeat(case.impls[name], sync, min_time, max_repeat, clock)
        except Exception as e:      # noqa: BLE001 (stored in errors, or raised again)
            failed(name, e)
    if calibrate != "each" and impls:
        k = _repeat(case.impls[ref if ref in impls else impls[0]], sync, min_time,
                    max_repeat, clock)
        counts = dict.fromkeys(impls, k)
    case.times = {name: [] for name in impls}
    for r in range(rounds):
        order = impls[r % len(impls):] + impls[:r % len(impls)] if impls else []
        this = {}
        for name in order:
            if collect:
                gc.collect()
            if settle_s:
                time.sleep(settle_s)
            try:
                sync()
                t0 = clock()
                case.impls[name](counts[name])
                sync()
            except Exception as e:      # noqa: BLE001
                failed(name, e)
                case.times.pop(name)
                break
            this[name] = (clock() - t0) / (counts[name] * units[name])
            case.times[name].append(this[name])
        if ref in this:
            for name, v in this.items():
                if name != ref:
                    case.ratios.setdefault(name, []).append(v / this[ref])
    return counts


def _repeat(run, sync, min_time, max_repeat, clock):
    """The repeat ``k`` that makes ``run(k)`` last about ``min_time``: doubled until one
    sample lasts ``min_time / 4``, then scaled by the fastest of three samples of that
    ``k``. (One sample alone let a garbage collection or a preemption that fell into it
    cut ``k`` tenfold; where the time per call depends on ``k`` -- a tape recording ``k``
    ops -- that moved the ratio by 15%, a flapping gate.)"""
    k = 1
    while True:
        dt = _sample(run, k, sync, clock)
        if dt >= min_time / 4 or k >= max_repeat:
            dt = min(dt, _sample(run, k, sync, clock), _sample(run, k, sync, clock))
            return max(1, min(max_repeat, round(k * min_time / max(dt, 1e-9))))
        k *= 8 if dt < min_time / 50 else 2


def _sample(run, k, sync, clock):
    t0 = clock()
    run(k)
    sync()
    return clock() - t0


def guard(case, fw, build):
    """Run ``build()`` (set-up + correctness check) and store its result as
    ``case.impls[fw]``, or the first line of its error as ``case.errors[fw]``."""
    try:
        case.impls[fw] = build()
    except Exception as e:      # noqa: BLE001 (a peer that fails is reported, not fatal)
        case.errors[fw] = f"{type(e).__name__}: {e}".splitlines()[0][:200]


def fmt_time(t, width=0):
    """``1.5e-6`` -> ``"1.50 µs"`` (``width``: right-aligned to that many characters)."""
    if t is None:
        s = "-"
    elif t < 1e-6:
        s = f"{t * 1e9:.0f} ns"
    elif t < 1e-3:
        s = f"{t * 1e6:.2f} µs"
    else:
        s = f"{t * 1e3:.3f} ms"
    return s.rjust(width)


def load_torch(disabled=False, cuda=False, tf32=False):
    """``(torch, None)``, or ``(None, why)`` when PyTorch is disabled or cannot be used
    (not installed; ``cuda``: no CUDA device). On CUDA, TF32 is set to ``tf32`` (as
    tapeflow's precision) and cuDNN's autotuner is on."""
    if disabled:
        return None, "disabled with --no-torch"
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        return None, (f"`import torch` failed ({type(e).__name__}: {e}); "
                      "install it with: .venv/bin/pip install torch==2.13.0")
    if cuda:
        try:
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            torch.backends.cudnn.benchmark = True
        except Exception as e:      # noqa: BLE001
            return None, f"{type(e).__name__}: {e}"
    return torch, None


def loop(step):
    """``run(n)``: call ``step()`` ``n`` times."""
    def run(n):
        for _ in range(n):
            step()
    return run


# --- the CNNs: the seeds' (guide), examples/train_cnn.py's and the MNIST tutorial's -------

#: layer lists: ("conv", filters, kernel, padding, activation), ("pool", size),
#: ("gap",), ("flatten",), ("dense", units, activation or None)
CNN_ARCHS = {
    # the guide's CNN: Conv2D(16,[3,3],relu) x2, GlobalAveragePooling2D, Dense(10)
    "small": [("conv", 16, 3, "valid", "relu"), ("conv", 16, 3, "valid", "relu"), ("gap",),
              ("dense", 10, None)],
    # examples/train_cnn.py
    "example": [("conv", 32, 3, "same", "relu"), ("pool", 2), ("conv", 64, 3, "same", "relu"),
                ("pool", 2), ("flatten",), ("dense", 128, "relu"), ("dense", 10, None)],
    # TensorFlow's "Deep MNIST for experts" tutorial (without its dropout)
    "tutorial": [("conv", 32, 5, "same", "relu"), ("pool", 2), ("conv", 64, 5, "same", "relu"),
                 ("pool", 2), ("flatten",), ("dense", 1024, "relu"), ("dense", 10, None)],
}


def cnn_data(batch, hw=28, seed=0):
    """``(images (batch, hw, hw, 1) float32, labels (batch,) int64)``."""
    rng = np.random.default_rng(seed)
    return (rng.random((batch, hw, hw, 1), dtype=np.float32),
            rng.integers(0, 10, batch).astype(np.int64))


def _tf_layer(tf, spec):
    L = tf.keras.layers
    kind = spec[0]
    if kind == "conv":
        return L.Conv2D(spec[1], [spec[2], spec[2]], padding=spec[3], activation=spec[4])
    if kind == "pool":
        return L.MaxPooling2D((spec[1], spec[1]), (spec[1], spec[1]))
    if kind == "gap":
        return L.GlobalAveragePooling2D()
    if kind == "flatten":
        return L.Flatten()
    return L.Dense(spec[1], activation=spec[2])


def tf_cnn_step(tf, xn, yn, device=None, weights=None, seed=0, arch="small"):
    """``(model, step)``: the CNN ``arch`` (:data:`CNN_ARCHS`) built on ``device`` (the
    current one if None), its weights set to ``weights`` if given, and ``step()`` one
    Adam step returning the loss."""
    def on_device():
        return tf.device(device) if device else contextlib.nullcontext()

    with on_device():
        tf.random.set_seed(seed)
        model = tf.keras.Sequential([_tf_layer(tf, s) for s in CNN_ARCHS[arch]])
        opt = tf.train.AdamOptimizer()
        x, y = tf.constant(xn), tf.constant(yn)
        model(x)
        if weights is not None:
            for v, w in zip(model.trainable_variables, weights):
                v.assign(w)

    def step():
        with on_device():
            with tf.GradientTape() as tape:
                loss = tf.losses.sparse_softmax_cross_entropy(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return model, step


def _torch_layers(torch, arch, weights, hw, channels):
    """``[callable]``: the PyTorch layers of ``arch`` (NCHW) holding tapeflow's ``weights``
    (HWIO kernels -> OIHW, (in, out) dense -> (out, in); the first dense after a Flatten
    gets its rows reordered from NHWC's (h, w, c) to NCHW's (c, h, w))."""
    nn, F = torch.nn, torch.nn.functional
    ws = iter(weights)
    layers, modules = [], []
    h = w = hw
    c = channels
    flat = None
    for spec in arch:
        kind = spec[0]
        if kind == "conv":
            k = next(ws)
            m = nn.Conv2d(c, spec[1], spec[2], padding=spec[3])
            with torch.no_grad():
                m.weight.copy_(torch.from_numpy(k.transpose(3, 2, 0, 1).copy()))
                m.bias.copy_(torch.from_numpy(next(ws)))
            if spec[3] == "valid":
                h, w = h - spec[2] + 1, w - spec[2] + 1
            c = spec[1]
            layers += [m, F.relu] if spec[4] == "relu" else [m]
            modules.append(m)
        elif kind == "pool":
            layers.append(lambda t, s=spec[1]: F.max_pool2d(t, s))
            h, w = h // spec[1], w // spec[1]
        elif kind == "gap":
            layers.append(lambda t: t.mean(dim=(2, 3)))
        elif kind == "flatten":
            layers.append(lambda t: t.flatten(1))
            flat = (h, w, c)
        else:
            wt = next(ws)
            if flat is not None:
                fh, fw, fc = flat
                wt = wt.reshape(fh, fw, fc, -1).transpose(2, 0, 1, 3).reshape(fh * fw * fc, -1)
                flat = None
            m = nn.Linear(wt.shape[0], spec[1])
            with torch.no_grad():
                m.weight.copy_(torch.from_numpy(wt.T.copy()))
                m.bias.copy_(torch.from_numpy(next(ws)))
            layers += [m, F.relu] if spec[2] == "relu" else [m]
            modules.append(m)
    return layers, modules


def torch_cnn_step(torch, weights, xn, yn, cuda=False, arch="small"):
    """``step()``: one Adam step of the same CNN in PyTorch from tapeflow's ``weights``,
    returning the loss; NCHW on the CPU (PyTorch's layout), channels-last on CUDA."""
    F = torch.nn.functional
    layers, modules = _torch_layers(torch, CNN_ARCHS[arch], weights, xn.shape[1], xn.shape[3])
    if cuda:
        cl = torch.channels_last
        for m in modules:
            m.cuda().to(memory_format=cl)
        x = torch.from_numpy(xn).cuda().permute(0, 3, 1, 2).contiguous(memory_format=cl)
        y = torch.from_numpy(yn).cuda()
    else:
        x = torch.from_numpy(xn.transpose(0, 3, 1, 2).copy())   # NCHW, PyTorch's layout
        y = torch.from_numpy(yn)
    params = [p for m in modules for p in m.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3, eps=1e-8)

    def step():
        h = x
        for layer in layers:
            h = layer(h)
        loss = F.cross_entropy(h, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def same_loss(got, want, who):
    """Raise unless two first-step losses agree (the peers start from the same weights)."""
    if not abs(got - want) <= 1e-4 * max(1.0, abs(got)):
        raise AssertionError(f"{who} loss {got} != tapeflow's {want}")


def taped_square_grad(tf, x):
    """``once()``: the gradient of ``reduce_sum(x * x)`` by a GradientTape."""
    def once():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(x * x)
        return tape.gradient(y, x)
    return once
