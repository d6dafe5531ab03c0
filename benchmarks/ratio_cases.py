#!/usr/bin/env python
"""Ratio benchmarks: tapeflow against a peer, in one process, interleaved, paired.

Absolute times on a shared 2-core machine swing by 2x within minutes; the ratio of two
implementations timed in alternation in the same process does not (both see the same
memory bandwidth, clock and neighbours). Every case here builds two implementations,
``tapeflow`` and ``peer``, checks that they compute the same thing, and times them with
:func:`common.measure` (the engine of ``gpu_compare.py`` and ``opencl_compare.py``):
each round times both once, in alternating order; the result is the list of per-round
``tapeflow / peer`` time ratios, whose median is the tracked figure (< 1: tapeflow is
faster than its peer). Where the device computes on this machine's CPUs (cpu:0, OpenCL
on a CPU) the samples are the process's CPU time (``time.process_time``), which does not
count the time other jobs hold the cores; on a GPU, wall time.

The same cases serve the asv suite (``asv_bench/benchmarks/bench_ratios.py``: one
``track_ratio`` per case, parameterised by device, ``unit = "ratio"``) and the
regression gate (``scripts/bench_check.py``, which runs this file as a script in
alternating processes against the working tree and the base commit).

==================  ===============================================  =====================
key                 tapeflow                                         peer
==================  ===============================================  =====================
dispatch_add        ``a + b``, float32 (1,), no tape                 the array library's ``a + b``
dispatch_add_tape   the same while a GradientTape watching ``a``     untaped ``a + b``
                    records it
dispatch_grad       gradient of ``reduce_sum(x * x)``, x (10,)       ``(x*x).sum()`` and ``2*x``
mlp_step            MLP 784-256-256-10 SGD step, batch 64 (eager)    the step by hand
cnn_step            the seeds' CNN Adam step, batch 32               PyTorch eager
transformer_block   a Transformer encoder block's SGD step (MHA 4    PyTorch eager
                    heads, d_model 128, LayerNormalization, FFN      TransformerEncoderLayer
                    512), seq 64, batch 32                           (cpu:0 only)
lstm_step           the PTB "small" LSTM language model's SGD step   PyTorch eager nn.LSTM
                    (2x200 units, 20 steps, batch 20, vocab 10k)     (cpu:0 only)
function_replay     the MLP step as a ``tf.function`` (replay)       the same step, eager tapeflow
plugin_op           the gelu plugin's op (``plugins/gelu``), (1,)    built-in ``tf.tanh``, (1,)
elementwise_chain   ``tanh(exp(-(a*a))*b + 1) - a``, 200,000 float32 the chain in NumPy (cpu:0),
                                                                     one hand-written PyOpenCL
                                                                     kernel (opencl:0), one CuPy
                                                                     ElementwiseKernel (cuda:0)
==================  ===============================================  =====================

"The array library" is NumPy on the host for ``cpu:0`` and ``opencl:0`` (on opencl:0
the ratio is the device's latency in units of a host NumPy op) and CuPy on ``cuda:0``;
the MLP "by hand" is ``compare.py``'s NumPy step (``gpu_compare.py``'s CuPy step on
cuda:0). ``cnn_step`` has no PyTorch peer on opencl:0 (n/a there). A device this
machine lacks, or a peer that is not installed (PyTorch, CuPy, PyOpenCL), raises
``NotImplementedError`` with the reason: asv shows "n/a", the gate prints it.

    python benchmarks/ratio_cases.py                       # every case on cpu:0
    python benchmarks/ratio_cases.py --devices cpu:0,opencl:0 --cases dispatch_add,plugin_op
    python benchmarks/ratio_cases.py --rounds 5 --json out.json --expect-root /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import compare
import common
from common import measure

DEVICES = ("cpu:0", "opencl:0", "cuda:0")

#: default timing: rounds per process and seconds per sample (calibrated)
ROUNDS = 21
MIN_TIME = 0.01


class RatioCase:
    """Two implementations (``impls["tapeflow"]``, ``impls["peer"]``: ``run(n)`` does n
    units) and how to time them (read by :func:`common.measure`)."""

    def __init__(self, key, device, peer):
        self.key, self.device, self.peer = key, device, peer
        self.impls = {}
        self.times = {}
        self.ratios = {}
        self.syncs = []
        self.settle_s = 0.0
        self.per_run = 1
        self.clock = time.perf_counter

    def sync(self):
        for s in self.syncs:
            s()


def _tf():
    import tapeflow as tf
    return tf


def device(tf, name):
    """The tapeflow device ``name``, or NotImplementedError saying what is here instead."""
    try:
        return tf.runtime.devices.get_device(name)
    except Exception as e:  # NotFoundError: not on this machine
        raise NotImplementedError(f"device {name} is not available here: {e}") from None


def _torch():
    try:
        import torch
    except Exception as e:
        raise NotImplementedError(
            f"PyTorch is not importable ({type(e).__name__}: {e}); "
            ".venv/bin/pip install torch==2.13.0") from None
    return torch


def _cupy():
    try:
        import cupy
    except Exception as e:
        raise NotImplementedError(f"CuPy is not importable ({type(e).__name__}: {e})") from None
    return cupy


def _xp(name):
    """The peer array library for per-op ratios on device ``name`` and its sync."""
    if name.startswith("cuda"):
        cp = _cupy()
        return cp, cp.cuda.Device().synchronize
    return np, None


def _on(tf, name, run):
    """``run`` inside ``with tf.device(name)``."""
    def r(n):
        with tf.device(name):
            run(n)
    return r


def runs_on_host_cpu(tf, name):
    """True when device ``name`` computes on this machine's CPUs: ``cpu:0``, or an
    OpenCL device of type CPU (Intel's runtime, PoCL)."""
    dev = device(tf, name)
    if dev.type == "cpu":
        return True
    if dev.type == "opencl":
        import pyopencl as cl
        import tapeflow_opencl
        with tf.device(name):
            probe = tf.constant([0.0])
        return bool(tapeflow_opencl.device_of(probe._data).cl_device.type & cl.device_type.CPU)
    return False


def _new(tf, key, name, peer):
    dev = device(tf, name)
    case = RatioCase(key, name, peer)
    case.syncs.append(lambda: dev.backend.synchronize(dev))
    # CPU time where the work runs on this machine's CPUs: the time the process waits
    # while other jobs hold the cores is not counted (the noise of a shared machine)
    case.clock = time.process_time if runs_on_host_cpu(tf, name) else time.perf_counter
    return case


def _from_peer_case(case, other, tf_key, peer_key, wrap=None):
    """Take ``tapeflow`` and ``peer`` from one of compare.py's / gpu_compare.py's cases
    (their errors become exceptions: a benchmark of a broken build is no figure)."""
    for fw in (tf_key, peer_key):
        if fw in other.errors or fw not in other.impls:
            raise RuntimeError(f"{case.key} on {case.device}: {fw} could not be built: "
                               f"{other.errors.get(fw, 'no implementation')}")
    runs = {k: getattr(v, "run", v) for k, v in other.impls.items()}
    case.impls["tapeflow"] = wrap(runs[tf_key]) if wrap else runs[tf_key]
    case.impls["peer"] = runs[peer_key]
    return case


# --- the cases ------------------------------------------------------------------------------

def case_dispatch_add(tf, name, taped=False):
    key = "dispatch_add_tape" if taped else "dispatch_add"
    xp, xsync = _xp(name)
    case = _new(tf, key, name, f"{xp.__name__} a + b")
    if xsync:
        case.syncs.append(xsync)
    an, bn = np.ones(1, np.float32), np.full(1, 2.0, np.float32)
    with tf.device(name):
        a, b = tf.constant(an), tf.constant(bn)
    np.testing.assert_array_equal((a + b).numpy(), an + bn)
    if taped:
        with tf.GradientTape() as tape:
            tape.watch(a)
            c = a + b
        np.testing.assert_array_equal(tape.gradient(c, a).numpy(), [1.0])

        def run(n):
            with tf.GradientTape() as tape:
                tape.watch(a)
                for _ in range(n):
                    a + b
    else:
        def run(n):
            for _ in range(n):
                a + b
    xa, xb = xp.asarray(an), xp.asarray(bn)

    def peer(n):
        for _ in range(n):
            xa + xb
    case.impls = {"tapeflow": _on(tf, name, run), "peer": peer}
    return case


def case_dispatch_add_tape(tf, name):
    return case_dispatch_add(tf, name, taped=True)


def case_dispatch_grad(tf, name):
    xp, xsync = _xp(name)
    case = _new(tf, "dispatch_grad", name, f"{xp.__name__} (x*x).sum(), 2*x")
    if xsync:
        case.syncs.append(xsync)
    xn = np.linspace(-1.0, 2.0, 10, dtype=np.float32)
    with tf.device(name):
        x = tf.constant(xn)
    once = common.taped_square_grad(tf, x)
    with tf.device(name):
        np.testing.assert_allclose(once().numpy(), 2 * xn, rtol=1e-6)

    def run(n):
        for _ in range(n):
            once()
    xx = xp.asarray(xn)

    def peer(n):
        for _ in range(n):
            (xx * xx).sum()
            2 * xx
    case.impls = {"tapeflow": _on(tf, name, run), "peer": peer}
    return case


def case_mlp_step(tf, name):
    if name.startswith("cuda"):
        import gpu_compare
        tf_, cp, _, _ = gpu_compare._load()
        gpu_compare.DEVICE = name
        case = _new(tf, "mlp_step", name, "CuPy step by hand")
        case.syncs.append(cp.cuda.Device().synchronize)
        return _from_peer_case(case, gpu_compare.case_mlp(tf, cp, None, 64), "tapeflow", "cupy")
    case = _new(tf, "mlp_step", name, "NumPy step by hand")
    case.settle_s = 0.01
    with tf.device(name):
        other = compare.case_mlp(tf, None, 64)
    return _from_peer_case(case, other, "tapeflow", "numpy", wrap=lambda r: _on(tf, name, r))


def case_cnn_step(tf, name):
    if name.startswith("opencl"):
        device(tf, name)
        raise NotImplementedError("PyTorch has no OpenCL device (the OpenCL CNN against "
                                  "tapeflow on cpu:0: benchmarks/opencl_compare.py cnn32)")
    torch = _torch()
    if name.startswith("cuda"):
        import gpu_compare
        tf_, cp, torch, why = gpu_compare._load()
        if torch is None:
            raise NotImplementedError(f"PyTorch CUDA is not usable: {why}")
        gpu_compare.DEVICE = name
        case = _new(tf, "cnn_step", name, "PyTorch CUDA eager")
        case.syncs.append(torch.cuda.synchronize)
        return _from_peer_case(case, gpu_compare.case_cnn(tf, cp, torch, 32), "tapeflow", "torch")
    case = _new(tf, "cnn_step", name, "PyTorch eager")
    case.settle_s = 0.01
    with tf.device(name):
        other = compare.case_cnn(tf, torch, 32)
    return _from_peer_case(case, other, "tapeflow", "torch", wrap=lambda r: _on(tf, name, r))


def case_transformer_block(tf, name):
    """compare.py's ``transformer_block`` (a Transformer encoder block's SGD step) against
    PyTorch's ``nn.TransformerEncoderLayer`` on the CPU."""
    if not name.startswith("cpu"):
        device(tf, name)
        raise NotImplementedError(f"transformer_block is measured on cpu:0 against PyTorch's "
                                  f"CPU nn.TransformerEncoderLayer (not on {name})")
    torch = _torch()
    case = _new(tf, "transformer_block", name, "PyTorch eager nn.TransformerEncoderLayer")
    case.settle_s = 0.01
    with tf.device(name):
        other = compare.case_transformer(tf, torch)
    return _from_peer_case(case, other, "tapeflow", "torch", wrap=lambda r: _on(tf, name, r))


def case_lstm_step(tf, name):
    """compare.py's ``lstm_ptb`` (the PTB "small" LSTM language model's SGD step, issue 45)
    against PyTorch's ``nn.LSTM`` on the CPU."""
    if not name.startswith("cpu"):
        device(tf, name)
        raise NotImplementedError(f"lstm_step is measured on cpu:0 against PyTorch's CPU "
                                  f"nn.LSTM (not on {name})")
    torch = _torch()
    case = _new(tf, "lstm_step", name, "PyTorch eager nn.LSTM")
    case.settle_s = 0.01
    with tf.device(name):
        other = compare.case_lstm_ptb(tf, torch)
    return _from_peer_case(case, other, "tapeflow", "torch", wrap=lambda r: _on(tf, name, r))


def case_function_replay(tf, name):
    case = _new(tf, "function_replay", name, "the same step, eager tapeflow")
    case.settle_s = 0.01
    with tf.device(name):
        other = compare.case_mlp_traced(tf, None, 64)
    wrap = (lambda r: _on(tf, name, r))
    _from_peer_case(case, other, "tapeflow", "tapeflow_eager")
    case.impls = {k: wrap(v) for k, v in case.impls.items()}
    return case


def case_plugin_op(tf, name):
    case = _new(tf, "plugin_op", name, "built-in tf.tanh")
    try:
        gelu = tf.ops.gelu.gelu
    except AttributeError as e:
        raise NotImplementedError(
            f"the example plugin tapeflow-gelu is not installed (pip install -e plugins/gelu): "
            f"{e}") from None
    xn = np.array([0.5], np.float32)
    with tf.device(name):
        x = tf.constant(xn)
        g, t = gelu(x).numpy(), tf.tanh(x).numpy()
    assert g.shape == t.shape == (1,) and np.isfinite(g).all(), (g, t)

    def run(n):
        for _ in range(n):
            gelu(x)

    def peer(n):
        for _ in range(n):
            tf.tanh(x)
    case.impls = {"tapeflow": _on(tf, name, run), "peer": _on(tf, name, peer)}
    return case


CHAIN_N = 200_000
_CL_CHAIN = """
__kernel void chain(__global const float *a, __global const float *b, __global float *out)
{
    size_t i = get_global_id(0);
    float x = a[i];
    out[i] = tanh(exp(-(x * x)) * b[i] + 1.0f) - x;
}
"""


def case_elementwise_chain(tf, name):
    rng = np.random.default_rng(1)
    an = rng.uniform(-1, 1, CHAIN_N).astype(np.float32)
    bn = rng.uniform(-1, 1, CHAIN_N).astype(np.float32)
    ref = np.tanh(np.exp(-(an * an)) * bn + 1) - an
    if name.startswith("opencl"):
        peer_name, build = "one hand-written PyOpenCL kernel", _opencl_chain
    elif name.startswith("cuda"):
        peer_name, build = "one CuPy ElementwiseKernel", _cupy_chain
    else:
        peer_name, build = "the NumPy expression", None
    case = _new(tf, "elementwise_chain", name, peer_name)
    with tf.device(name):
        a, b = tf.constant(an), tf.constant(bn)

    def chain():
        return tf.tanh(tf.exp(-(a * a)) * b + 1.0) - a
    with tf.device(name):
        np.testing.assert_allclose(chain().numpy(), ref, rtol=1e-5, atol=1e-6)

    def run(n):
        for _ in range(n):
            chain()
    if build is None:
        def peer(n):
            for _ in range(n):
                np.tanh(np.exp(-(an * an)) * bn + 1) - an
    else:
        peer = build(case, a, an, bn, ref)
    case.impls = {"tapeflow": _on(tf, name, run), "peer": peer}
    return case


def _opencl_chain(case, a, an, bn, ref):
    try:
        import pyopencl as cl
        import pyopencl.array as cla
        import tapeflow_opencl
    except Exception as e:
        raise NotImplementedError(f"PyOpenCL is not importable ({e})") from None
    handle = tapeflow_opencl.device_of(a._data)       # tapeflow's context and queue
    queue = handle.queue
    prg = cl.Program(handle.ctx, _CL_CHAIN).build()
    knl = prg.chain
    da, db = cla.to_device(queue, an), cla.to_device(queue, bn)
    out = cla.empty_like(da)
    knl(queue, (an.size,), None, da.data, db.data, out.data)
    np.testing.assert_allclose(out.get(), ref, rtol=1e-5, atol=1e-6)
    case.syncs.append(queue.finish)

    def peer(n):
        for _ in range(n):
            o = cla.empty(queue, an.shape, np.float32, allocator=handle.pool)  # as tapeflow
            knl(queue, (an.size,), None, da.data, db.data, o.data)
    return peer


def _cupy_chain(case, a, an, bn, ref):
    cp = _cupy()
    k = cp.ElementwiseKernel("float32 a, float32 b", "float32 out",
                             "out = tanhf(expf(-(a * a)) * b + 1.0f) - a", "tapeflow_chain")
    da, db = cp.asarray(an), cp.asarray(bn)
    np.testing.assert_allclose(cp.asnumpy(k(da, db)), ref, rtol=1e-5, atol=1e-6)
    case.syncs.append(cp.cuda.Device().synchronize)

    def peer(n):
        for _ in range(n):
            k(da, db)
    return peer


CASES = {
    "dispatch_add": case_dispatch_add,
    "dispatch_add_tape": case_dispatch_add_tape,
    "dispatch_grad": case_dispatch_grad,
    "mlp_step": case_mlp_step,
    "cnn_step": case_cnn_step,
    "transformer_block": case_transformer_block,
    "lstm_step": case_lstm_step,
    "function_replay": case_function_replay,
    "plugin_op": case_plugin_op,
    "elementwise_chain": case_elementwise_chain,
}


def build(key, name, tf=None):
    """The case ``key`` on device ``name``, checked; NotImplementedError (with the
    reason) where it cannot run here."""
    tf = tf or _tf()
    device(tf, name)
    try:
        return CASES[key](tf, name)
    except ImportError as e:
        raise NotImplementedError(f"{type(e).__name__}: {e}") from None
    except Exception as e:
        if type(e).__name__ == "NoGPU":          # gpu_compare: no CuPy / no CUDA device
            raise NotImplementedError(str(e)) from None
        raise


def ratios(case, rounds=ROUNDS, min_time=MIN_TIME):
    """Time ``case`` interleaved: the per-round ``tapeflow / peer`` time ratios.

    The repeat count is calibrated on tapeflow (``ref``), so a tapeflow sample lasts
    ``min_time`` and the peer's, when the peer is 40x faster, a fortieth of it -- not
    40x ``min_time``: short samples are fewer preemptions on a loaded machine, and the
    run's length does not grow with the ratio."""
    measure(case, case.sync, rounds, min_time, ref="tapeflow", per_run=case.per_run,
            settle_s=case.settle_s, clock=case.clock)
    return [1.0 / r for r in case.ratios["peer"]]


def median_ratio(key, name, rounds=ROUNDS, min_time=MIN_TIME):
    """The tracked figure: the median of the per-round ratios (asv's track_ratio)."""
    return statistics.median(ratios(build(key, name), rounds, min_time))


# --- script: one process of the gate, or a table by hand ------------------------------------

def origins():
    """Where each tapeflow distribution was imported from (the gate checks them)."""
    out = {}
    for mod in ("tapeflow", "tapeflow_cpu_numpy", "tapeflow_opencl", "tapeflow_gelu"):
        try:
            m = __import__(mod)
            out[mod] = os.path.dirname(os.path.dirname(os.path.abspath(m.__file__)))
        except Exception as e:
            out[mod] = f"not importable: {type(e).__name__}: {e}"
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--devices", default="cpu:0")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--min-time", type=float, default=MIN_TIME)
    ap.add_argument("--json", help="write {case@device: {ratios|skipped|error}} here")
    ap.add_argument("--expect-root", help="exit 3 unless tapeflow (core, backends, the gelu "
                    "plugin) is imported from this checkout")
    args = ap.parse_args(argv)
    tf = _tf()
    where = origins()
    if args.expect_root:
        root = os.path.realpath(args.expect_root)
        wrong = {m: p for m, p in where.items()
                 if not os.path.realpath(p).startswith(root + os.sep)}
        if wrong:
            print(f"tapeflow is not imported from {root}: {wrong}", file=sys.stderr)
            return 3
    results = {"_origins": where}
    for name in args.devices.split(","):
        for key in args.cases.split(","):
            label = f"{key}@{name}"
            t0 = time.perf_counter()
            try:
                case = build(key, name, tf)
                r = ratios(case, args.rounds, args.min_time)
                results[label] = {"ratios": r, "peer": case.peer}
                text = f"{statistics.median(r):7.3f}  (min {min(r):.3f}, max {max(r):.3f})"
            except NotImplementedError as e:
                results[label] = {"skipped": str(e)}
                text = f"    n/a  {e}"
            except Exception as e:
                results[label] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
                text = f"  ERROR  {results[label]['error']}"
            print(f"{label:30s} {text}  [{time.perf_counter() - t0:.1f} s]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
