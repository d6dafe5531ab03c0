#!/usr/bin/env python
"""tapeflow against raw NumPy and PyTorch eager on the CPU, in one process, interleaved.

Every case has one implementation per framework, written the way a good engineer
would write it in that framework. Each round times every implementation once, in a
rotating order, so slow drifts of the machine (frequency, other load) hit all of them
alike; the headline ratio of a case is the median over rounds of the per-round ratio
(paired samples), and the table also shows each implementation's median and best
per-call time. Before timing, each case checks that the implementations compute the
same thing (a benchmark of a wrong answer is worthless).

    python benchmarks/compare.py             # full run (about a minute on 2 cores)
    python benchmarks/compare.py --quick     # a few seconds, noisier
    python benchmarks/compare.py --json out.json --cases add,grad,mlp64
    python benchmarks/compare.py --quick --cases mlp64,mlp64_traced,collatz,collatz_while

The ``*_traced`` / ``*_while`` cases time a ``tapeflow.function`` (traced once, then
replayed) in the tapeflow column, and the same computation in eager tapeflow in an
extra ``tf eager`` column (``tf/eager`` is their paired ratio): the gain of tracing.

PyTorch columns appear when ``import torch`` works (``pip install torch==2.13.0``);
otherwise they are skipped and the output says so. Targets (from the performance
issue) are checked and shown in the last column; ``--check`` makes a missed target
(or an error) the exit status.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

import common
from common import fmt_time, guard, load_torch

FRAMEWORKS = ("tapeflow", "numpy", "torch", "tapeflow_eager")
SHORT = {"tapeflow": "tf", "numpy": "np", "torch": "torch", "tapeflow_eager": "tf eager"}


# --- the cases ----------------------------------------------------------------------------

@dataclass
class Impl:
    run: callable            # run(n): do the measured thing n times
    per_run: int = 1         # units (calls, iterations) that one `run(1)` counts


@dataclass
class Case:
    key: str
    title: str
    unit: str                                    # "call", "iteration", "step"
    target: tuple | None     # ("ratio", 1.5) vs NumPy, ("torch", 0.3) vs PyTorch, ("abs", 25e-6) s
    impls: dict = field(default_factory=dict)    # framework -> Impl
    errors: dict = field(default_factory=dict)   # framework -> message
    notes: list = field(default_factory=list)
    heavy: bool = False                          # long per-call time: fewer rounds


def case_add(tf, torch, taped):
    key = "add_tape" if taped else "add"
    title = "a + b, float32 (1,)" + (", GradientTape watching a" if taped else ", no tape")
    # (issue 33's targets: the C core)
    case = Case(key, title, "call", ("ratio", 1.6 if taped else 1.15))
    an = np.ones(1, np.float32)
    bn = np.full(1, 2.0, np.float32)

    def build_tf():
        a, b = tf.constant(an), tf.constant(bn)
        if taped:
            with tf.GradientTape() as tape:
                tape.watch(a)
                c = a + b
            np.testing.assert_array_equal(np.asarray(tape.gradient(c, a)), [1.0])

            def run(n):
                with tf.GradientTape() as tape:
                    tape.watch(a)
                    for _ in range(n):
                        a + b
        else:
            c = a + b

            def run(n):
                for _ in range(n):
                    a + b
        np.testing.assert_array_equal(np.asarray(c), an + bn)
        return Impl(run)

    def build_np():
        a, b = an.copy(), bn.copy()

        def run(n):
            for _ in range(n):
                a + b
        return Impl(run)

    def build_torch():
        a, b = torch.from_numpy(an.copy()), torch.from_numpy(bn.copy())
        if taped:
            a.requires_grad_(True)
        np.testing.assert_array_equal((a + b).detach().numpy(), an + bn)

        def run(n):
            for _ in range(n):
                a + b
        return Impl(run)

    guard(case, "tapeflow", build_tf)
    guard(case, "numpy", build_np)
    if torch is not None:
        guard(case, "torch", build_torch)
    if taped:
        case.notes.append("add_tape: the NumPy column is the same untaped `a + b`; torch's `a` "
                          "has requires_grad=True")
    return case


def case_grad(tf, torch):
    case = Case("grad", "gradient of reduce_sum(x * x), x float32 (10,)", "call",
                ("ratio", 8.0))
    xn = np.linspace(-1.0, 2.0, 10, dtype=np.float32)
    expect = 2 * xn

    def build_tf():
        x = tf.constant(xn)
        np.testing.assert_allclose(common.taped_square_grad(tf, x)().numpy(), expect,
                                   rtol=1e-6)

        def run(n):
            for _ in range(n):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = tf.reduce_sum(x * x)
                tape.gradient(y, x)
        return Impl(run)

    def build_np():
        x = xn.copy()

        def run(n):  # forward value and the hand-written gradient
            for _ in range(n):
                (x * x).sum()
                2 * x
        return Impl(run)

    def build_torch():
        x = torch.from_numpy(xn.copy()).requires_grad_(True)
        y = (x * x).sum()
        y.backward()
        np.testing.assert_allclose(x.grad.numpy(), expect, rtol=1e-6)
        x.grad = None

        def run(n):
            for _ in range(n):
                y = (x * x).sum()
                y.backward()
                x.grad = None
        return Impl(run)

    guard(case, "tapeflow", build_tf)
    guard(case, "numpy", build_np)
    if torch is not None:
        guard(case, "torch", build_torch)
    case.notes.append("grad: NumPy computes sum(x*x) and the hand-written gradient 2*x; "
                      "torch runs autograd's backward()")
    return case


COLLATZ_START = 27


def _collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def case_collatz(tf, torch):
    case = Case("collatz", f"Collatz loop from {COLLATZ_START} (seed 000), scalar tensors",
                "iteration", ("ratio", 1.6))
    steps = _collatz_steps(COLLATZ_START)

    # The seed's loop, written once per framework with that framework's names.
    def build_tf():
        def collatz():
            a = tf.constant(COLLATZ_START)
            k = 0
            while not tf.equal(a, 1):
                if tf.equal(a % 2, 0):
                    a = a / 2
                else:
                    a = 3 * a + 1
                k += 1
            return a, k
        a, k = collatz()
        assert k == steps and float(a) == 1.0

        def run(n):
            for _ in range(n):
                a = tf.constant(COLLATZ_START)
                while not tf.equal(a, 1):
                    if tf.equal(a % 2, 0):
                        a = a / 2
                    else:
                        a = 3 * a + 1
        return Impl(run, per_run=steps)

    def build_np():
        def run(n):
            for _ in range(n):
                a = np.array(COLLATZ_START, dtype=np.int32)
                while not np.equal(a, 1):
                    if np.equal(a % 2, 0):
                        a = a / 2
                    else:
                        a = 3 * a + 1
        return Impl(run, per_run=steps)

    def build_torch():
        def run(n):
            for _ in range(n):
                a = torch.tensor(COLLATZ_START, dtype=torch.int32)
                while not torch.eq(a, 1):
                    if torch.eq(a % 2, 0):
                        a = a / 2
                    else:
                        a = 3 * a + 1
        return Impl(run, per_run=steps)

    guard(case, "tapeflow", build_tf)
    guard(case, "numpy", build_np)
    if torch is not None:
        guard(case, "torch", build_torch)
    case.notes.append(f"collatz: {steps} iterations per run; NumPy starts from a 0-d int32 "
                      "array (its ops then return NumPy scalars, as NumPy code does)")
    return case


def _tf_collatz_eager(tf):
    """The seed's eager loop (as in case_collatz), with floor division so the value
    stays int32 as in the traced version."""
    a = tf.constant(COLLATZ_START)
    while not tf.equal(a, 1):
        if tf.equal(a % 2, 0):
            a = a // 2
        else:
            a = 3 * a + 1
    return a


def case_collatz_while(tf, torch):
    """The Collatz loop written with tf.while_loop (and tf.cond) inside a tf.function,
    against the same loop in eager tapeflow (Python ``while``/``if`` on tensor values)
    and in NumPy, per iteration."""
    case = Case("collatz_while", f"Collatz from {COLLATZ_START}: tf.while_loop + tf.cond in "
                "tf.function", "iteration", None)
    steps = _collatz_steps(COLLATZ_START)

    def build_tf():
        def body(a, k):
            a = tf.cond(tf.equal(a % 2, 0), lambda: a // 2, lambda: 3 * a + 1)
            return a, k + 1

        @tf.function
        def collatz(a0):
            return tf.while_loop(lambda a, k: tf.not_equal(a, 1), body,
                                 [a0, tf.constant(0)])

        start = tf.constant(COLLATZ_START)
        for _ in range(2):          # the tracing call, then a replay
            a, k = collatz(start)
            assert int(k) == steps and int(a) == 1, (int(a), int(k), steps)
        assert collatz.experimental_get_tracing_count() == 1

        def run(n):
            for _ in range(n):
                collatz(start)
        return Impl(run, per_run=steps)

    def build_tf_eager():
        assert int(_tf_collatz_eager(tf)) == 1

        def run(n):
            for _ in range(n):
                _tf_collatz_eager(tf)
        return Impl(run, per_run=steps)

    def build_np():
        def run(n):
            for _ in range(n):
                a = np.array(COLLATZ_START, dtype=np.int32)
                while not np.equal(a, 1):
                    if np.equal(a % 2, 0):
                        a = a // 2
                    else:
                        a = 3 * a + 1
        return Impl(run, per_run=steps)

    guard(case, "tapeflow", build_tf)
    guard(case, "tapeflow_eager", build_tf_eager)
    guard(case, "numpy", build_np)
    case.notes.append(f"collatz_while: {steps} iterations per call; the tapeflow column is one "
                      "call of the traced function (a replay), tf eager the Python loop on "
                      "scalar tensors (// keeps int32), NumPy the same loop on a 0-d array")
    return case


MLP_SIZES = (784, 256, 256, 10)
LR = 0.01


def _mlp_init(batch, seed=0):
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        w = (rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)).astype(np.float32)
        params += [w, np.zeros(fan_out, np.float32)]
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(np.float32)
    y = rng.integers(0, MLP_SIZES[-1], batch).astype(np.int64)
    return params, x, y


def _np_mlp_step(params, x, y, rows, lr=LR):
    """One SGD step of the 784-256-256-10 ReLU MLP with mean softmax cross-entropy,
    forward and backward by hand (in place where it saves a temporary). Returns the loss."""
    W1, b1, W2, b2, W3, b3 = params
    batch = x.shape[0]
    h1 = x @ W1
    h1 += b1
    np.maximum(h1, 0, out=h1)
    h2 = h1 @ W2
    h2 += b2
    np.maximum(h2, 0, out=h2)
    z = h2 @ W3
    z += b3
    # softmax cross-entropy, numerically stable
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    s = p.sum(axis=1, keepdims=True)
    loss = float(np.log(s).sum() - z[rows, y].sum()) / batch
    p /= s
    p[rows, y] -= 1.0
    p *= 1.0 / batch                               # dL/dlogits
    gW3 = h2.T @ p
    gb3 = p.sum(axis=0)
    d2 = p @ W3.T
    d2 *= h2 > 0                                   # ReLU'
    gW2 = h1.T @ d2
    gb2 = d2.sum(axis=0)
    d1 = d2 @ W2.T
    d1 *= h1 > 0
    gW1 = x.T @ d1
    gb1 = d1.sum(axis=0)
    for prm, g in ((W1, gW1), (b1, gb1), (W2, gW2), (b2, gb2), (W3, gW3), (b3, gb3)):
        g *= lr
        prm -= g
    return loss


def _tf_xent(tf, labels, labels_onehot, logits):
    nn = tf.nn
    if hasattr(nn, "sparse_softmax_cross_entropy_with_logits"):
        return nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return nn.softmax_cross_entropy_with_logits(labels=labels_onehot, logits=logits)


def _tf_mlp_step(tf, params0, xn, yn):
    """``(Variables, step)``: the tapeflow MLP SGD step (eager) on fresh Variables."""
    params = [tf.Variable(p.copy()) for p in params0]
    W1, b1, W2, b2, W3, b3 = params
    x = tf.constant(xn)
    labels = tf.constant(yn)
    onehot = tf.constant(np.eye(MLP_SIZES[-1], dtype=np.float32)[yn])

    def step():
        with tf.GradientTape() as tape:
            h1 = tf.nn.relu(tf.matmul(x, W1) + b1)
            h2 = tf.nn.relu(tf.matmul(h1, W2) + b2)
            logits = tf.matmul(h2, W3) + b3
            loss = tf.reduce_mean(_tf_xent(tf, labels, onehot, logits))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(LR * g)
        return loss
    return params, step


def _torch_mlp_step(torch, params0, xn, yn):
    """``(parameters, step)``: the MLP SGD step in PyTorch eager on fresh parameters."""
    F = torch.nn.functional
    params = [torch.from_numpy(p.copy()).requires_grad_(True) for p in params0]
    W1, b1, W2, b2, W3, b3 = params
    x = torch.from_numpy(xn)
    y = torch.from_numpy(yn)

    def step():
        h1 = F.relu(x @ W1 + b1)
        h2 = F.relu(h1 @ W2 + b2)
        loss = F.cross_entropy(h2 @ W3 + b3, y)
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss.detach()
    return params, step


def case_mlp_traced(tf, torch, batch):
    """The MLP step of case_mlp as a tf.function (forward, tape gradient and the
    assignments traced into one graph) against the hand-written NumPy step and the
    same step in eager tapeflow."""
    case = Case(f"mlp{batch}_traced", f"MLP 784-256-256-10 SGD step, batch {batch}, float32, "
                "tf.function", "step", ("ratio", 0.8), heavy=True)     # issue 48
    params0, xn, yn = _mlp_init(batch)
    rows = np.arange(batch)
    ref_params = [p.copy() for p in params0]
    ref_loss = _np_mlp_step(ref_params, xn, yn, rows)

    def check(fw, loss, params):
        assert abs(loss - ref_loss) <= 1e-4 * max(1.0, abs(ref_loss)), \
            f"{fw} loss {loss} != NumPy's {ref_loss}"
        for i, (p, r) in enumerate(zip(params, ref_params)):
            np.testing.assert_allclose(p, r, rtol=1e-3, atol=1e-5,
                                       err_msg=f"{fw}: parameter {i} after one step")

    def build_tf():
        params, eager_step = _tf_mlp_step(tf, params0, xn, yn)
        step = tf.function(eager_step)
        check("tapeflow (tracing call)", float(step()), [p.numpy() for p in params])
        for p, p0 in zip(params, params0):          # back to the start: check a replay
            p.assign(p0)
        check("tapeflow (replay)", float(step()), [p.numpy() for p in params])
        assert step.experimental_get_tracing_count() == 1

        def run(n):
            for _ in range(n):
                step()
        return Impl(run)

    def build_tf_eager():
        params, step = _tf_mlp_step(tf, params0, xn, yn)
        check("tapeflow eager", float(step()), [p.numpy() for p in params])

        def run(n):
            for _ in range(n):
                step()
        return Impl(run)

    def build_np():
        params = [p.copy() for p in params0]
        check("numpy", _np_mlp_step(params, xn, yn, rows), params)

        def run(n):
            for _ in range(n):
                _np_mlp_step(params, xn, yn, rows)
        return Impl(run)

    guard(case, "tapeflow", build_tf)
    guard(case, "tapeflow_eager", build_tf_eager)
    guard(case, "numpy", build_np)
    return case


def case_mlp(tf, torch, batch):
    target = 1.15 if batch == 64 else 1.03      # issue 34's table
    case = Case(f"mlp{batch}", f"MLP 784-256-256-10 SGD step, batch {batch}, float32", "step",
                ("ratio", target), heavy=True)
    params0, xn, yn = _mlp_init(batch)
    rows = np.arange(batch)

    # The reference: one NumPy step from the initial weights.
    ref_params = [p.copy() for p in params0]
    ref_loss = _np_mlp_step(ref_params, xn, yn, rows)

    def check(fw, loss, params):
        assert abs(loss - ref_loss) <= 1e-4 * max(1.0, abs(ref_loss)), \
            f"{fw} loss {loss} != NumPy's {ref_loss}"
        for i, (p, r) in enumerate(zip(params, ref_params)):
            np.testing.assert_allclose(p, r, rtol=1e-3, atol=1e-5,
                                       err_msg=f"{fw}: parameter {i} after one step")

    def build_tf():
        nn = getattr(tf, "nn", None)
        if nn is None:
            raise AttributeError("module 'tapeflow' has no attribute 'nn'")
        variant = ("sparse_softmax_cross_entropy_with_logits"
                   if hasattr(nn, "sparse_softmax_cross_entropy_with_logits")
                   else "softmax_cross_entropy_with_logits (one-hot labels)")
        params, step = _tf_mlp_step(tf, params0, xn, yn)
        loss = float(step())
        check("tapeflow", loss, [p.numpy() for p in params])
        if batch == 64:
            case.notes.append(f"mlp: tapeflow's loss is tf.reduce_mean(tf.nn.{variant})")

        def run(n):
            for _ in range(n):
                step()
        return Impl(run)

    def build_np():
        params = [p.copy() for p in params0]
        loss = _np_mlp_step(params, xn, yn, rows)
        check("numpy", loss, params)

        def run(n):
            for _ in range(n):
                _np_mlp_step(params, xn, yn, rows)
        return Impl(run)

    def build_torch():
        params, step = _torch_mlp_step(torch, params0, xn, yn)
        loss = float(step())
        check("torch", loss, [p.detach().numpy() for p in params])

        def run(n):
            for _ in range(n):
                step()
        return Impl(run)

    guard(case, "tapeflow", build_tf)
    guard(case, "numpy", build_np)
    if torch is not None:
        guard(case, "torch", build_torch)
    return case


#: (title, target vs PyTorch) of each CNN case (issue 48's table: 0.8x each)
CNN_CASES = {
    "small": ("small CNN (the guide's: two 3x3 conv of 16, global average pool)", 0.8),
    "example": ("examples/train_cnn.py's CNN (3x3 conv 32, 64, pools, dense 128)", 0.8),
    "tutorial": ("MNIST tutorial CNN (5x5 conv 32, 64, pools, fc 1024)", 0.8),
}


def case_cnn(tf, torch, batch=32, arch="small"):
    """One Adam training step of a CNN of ``common.CNN_ARCHS`` on 28x28x1 images;
    tapeflow vs PyTorch eager, both starting from the same weights (checked: the same
    first-step loss)."""
    title, target = CNN_CASES[arch]
    key = f"cnn{batch}" if arch == "small" else f"cnn_{arch}"
    case = Case(key, f"{title} Adam step, batch {batch}, 28x28x1 float32",
                "step", ("torch", target), heavy=True)
    xn, yn = common.cnn_data(batch)
    state = {}

    def build_tf():
        model, step = common.tf_cnn_step(tf, xn, yn, arch=arch)
        state["weights"] = [v.numpy() for v in model.trainable_variables]
        state["tf_loss"] = float(step())
        return Impl(common.loop(step))

    def build_torch():
        step = common.torch_cnn_step(torch, state["weights"], xn, yn, arch=arch)
        common.same_loss(float(step()), state["tf_loss"], "torch")
        return Impl(common.loop(step))

    guard(case, "tapeflow", build_tf)
    if torch is not None and "weights" in state:
        guard(case, "torch", build_torch)
    if arch == "small":
        case.notes.append("cnn: no NumPy peer; compare the tf/torch column (PyTorch runs NCHW, "
                          "its native layout; tapeflow runs the seeds' NHWC)")
    return case


#: PTB "small" (Zaremba et al.'s config): vocabulary, units, layers, steps, batch
PTB_SMALL = {"vocab": 10_000, "units": 200, "layers": 2, "steps": 20, "batch": 20}


def _ptb_data(cfg, seed=0):
    """``(weights, tokens [T, B], targets [T, B])``: the embedding, each layer's
    ``(kernel [I, 4H], recurrent_kernel [H, 4H], bias [4H])`` (gates i, f, c, o: PyTorch's
    layout too), the softmax's ``(W [H, V], b [V])``, float32, uniform(-0.1, 0.1)."""
    rng = np.random.default_rng(seed)
    v, h, t, b = cfg["vocab"], cfg["units"], cfg["steps"], cfg["batch"]

    def u(*shape):
        return rng.uniform(-0.1, 0.1, shape).astype(np.float32)
    weights = [u(v, h)]
    for _ in range(cfg["layers"]):
        weights += [u(h, 4 * h), u(h, 4 * h), u(4 * h)]
    weights += [u(h, v), u(v)]
    tokens = rng.integers(0, v, (t, b)).astype(np.int32)
    targets = rng.integers(0, v, (t, b)).astype(np.int32)
    return weights, tokens, targets


def tf_lstm_ptb_step(tf, weights, tokens, targets, lr=1.0):
    """``step()``: one SGD step of the PTB LSTM language model in tapeflow (embedding,
    ``tapeflow.ops.fused.lstm_sequence`` per layer from zero states, dense to the
    vocabulary, sparse softmax cross-entropy averaged over T*B), returning the loss."""
    lstm_sequence = tf.ops.fused.lstm_sequence
    vs = [tf.Variable(w) for w in weights]
    x, y = tf.constant(tokens), tf.constant(targets.reshape(-1))
    t, b = tokens.shape
    h = weights[1].shape[0]
    zeros = tf.zeros([b, h])
    opt = tf.train.GradientDescentOptimizer(lr)
    n_layers = (len(vs) - 3) // 3

    def step():
        with tf.GradientTape() as tape:
            seq = tf.gather(vs[0], x)
            for k in range(n_layers):
                seq, _, _ = lstm_sequence(seq, zeros, zeros, *vs[1 + 3 * k:4 + 3 * k])
            logits = tf.matmul(tf.reshape(seq, [t * b, h]), vs[-2]) + vs[-1]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=logits))
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        return loss
    return step


def tf_keras_lstm_ptb_step(tf, weights, tokens, targets, lr=1.0):
    """``step()``: the same SGD step written as a Keras user would: ``Embedding``, two
    ``LSTM(return_sequences=True, time_major=True)`` layers (each call one fused
    ``lstm_sequence`` op), ``Dense`` to the vocabulary, the same loss and optimizer."""
    kl = tf.keras.layers
    v, h = weights[0].shape
    n_layers = (len(weights) - 3) // 3
    emb = kl.Embedding(v, h)
    lstms = [kl.LSTM(h, return_sequences=True, time_major=True) for _ in range(n_layers)]
    dense = kl.Dense(v)
    x, y = tf.constant(tokens), tf.constant(targets.reshape(-1))
    t, b = tokens.shape

    def model(x):
        seq = emb(x)
        for layer in lstms:
            seq = layer(seq)
        return dense(tf.reshape(seq, [t * b, h]))
    model(x)
    layers = [emb, *lstms, dense]
    vs = [w for layer in layers for w in layer.trainable_variables]
    for var, w in zip(vs, weights):
        var.assign(w)
    opt = tf.train.GradientDescentOptimizer(lr)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y, logits=model(x)))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss
    return step


def torch_lstm_ptb_step(torch, weights, tokens, targets, lr=1.0):
    """``step()``: the same SGD step with ``torch.nn.LSTM`` (time-major, two layers; the
    combined bias split into ``bias_ih`` and a zero ``bias_hh``)."""
    nn, F = torch.nn, torch.nn.functional
    v, h = weights[0].shape
    n_layers = (len(weights) - 3) // 3
    emb = nn.Embedding(v, h)
    lstm = nn.LSTM(h, h, num_layers=n_layers)
    dense = nn.Linear(h, v)
    with torch.no_grad():
        emb.weight.copy_(torch.from_numpy(weights[0]))
        for k in range(n_layers):
            w, u, bias = weights[1 + 3 * k:4 + 3 * k]
            getattr(lstm, f"weight_ih_l{k}").copy_(torch.from_numpy(w.T.copy()))
            getattr(lstm, f"weight_hh_l{k}").copy_(torch.from_numpy(u.T.copy()))
            getattr(lstm, f"bias_ih_l{k}").copy_(torch.from_numpy(bias))
            getattr(lstm, f"bias_hh_l{k}").zero_()
        dense.weight.copy_(torch.from_numpy(weights[-2].T.copy()))
        dense.bias.copy_(torch.from_numpy(weights[-1]))
    x = torch.from_numpy(tokens.astype(np.int64))
    y = torch.from_numpy(targets.reshape(-1).astype(np.int64))
    params = [*emb.parameters(), *lstm.parameters(), *dense.parameters()]
    opt = torch.optim.SGD(params, lr=lr)

    def step():
        seq, _ = lstm(emb(x))
        loss = F.cross_entropy(dense(seq.reshape(-1, h)), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def case_lstm_ptb(tf, torch):
    """One SGD training step of the PTB "small" LSTM language model (issue 45): tapeflow's
    fused ``lstm_sequence`` vs ``torch.nn.LSTM``, from the same weights (checked: the same
    first two losses, so the update is the same too)."""
    cfg = PTB_SMALL
    case = Case("lstm_ptb", f"PTB small LSTM LM SGD step ({cfg['layers']}x{cfg['units']} "
                f"units, {cfg['steps']} steps, batch {cfg['batch']}, vocab {cfg['vocab']})",
                "step", ("torch", 1.2), heavy=True)
    weights, tokens, targets = _ptb_data(cfg)
    state = {}

    def build_tf():
        step = tf_keras_lstm_ptb_step(tf, weights, tokens, targets)
        state["tf_loss"] = [float(step()), float(step())]
        ops_step = tf_lstm_ptb_step(tf, weights, tokens, targets)     # the ops, by hand
        for got, want in zip([float(ops_step()), float(ops_step())], state["tf_loss"]):
            common.same_loss(got, want, "tapeflow ops")
        return Impl(common.loop(step))

    def build_torch():
        step = torch_lstm_ptb_step(torch, weights, tokens, targets)
        for got, want in zip([float(step()), float(step())], state["tf_loss"]):
            common.same_loss(got, want, "torch")
        return Impl(common.loop(step))

    guard(case, "tapeflow", build_tf)
    if torch is not None and "tf_loss" in state:
        guard(case, "torch", build_torch)
    case.notes.append("lstm_ptb: no NumPy peer; tapeflow runs Keras Embedding, LSTM x2 (each "
                      "one fused lstm_sequence op) and Dense; PyTorch nn.Embedding, nn.LSTM, "
                      "nn.Linear")
    return case


#: the Transformer encoder block of issue 45: d_model, heads, feed-forward width, sequence, batch
TRANSFORMER = {"d_model": 128, "heads": 4, "ff": 512, "seq": 64, "batch": 32}


def _transformer_data(seed=0):
    t = TRANSFORMER
    rng = np.random.default_rng(seed)
    shape = (t["batch"], t["seq"], t["d_model"])
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.standard_normal(shape, dtype=np.float32))


def _tf_transformer_step(tf, xn, yn, lr=0.01):
    """A post-norm encoder block (MultiHeadAttention, residual, LayerNormalization,
    Dense relu, Dense, residual, LayerNormalization) and its SGD step on a squared error."""
    t = TRANSFORMER
    kl = tf.keras.layers
    mha = kl.MultiHeadAttention(t["heads"], t["d_model"] // t["heads"])
    ln1, ln2 = kl.LayerNormalization(epsilon=1e-5), kl.LayerNormalization(epsilon=1e-5)
    ff1, ff2 = kl.Dense(t["ff"], activation="relu"), kl.Dense(t["d_model"])
    x, y = tf.constant(xn), tf.constant(yn)
    opt = tf.keras.optimizers.SGD(lr)

    def block(x):
        h = ln1(x + mha(x, x))
        return ln2(h + ff2(ff1(h)))

    block(x)
    params = mha.trainable_variables + ln1.trainable_variables + ff1.trainable_variables + \
        ff2.trainable_variables + ln2.trainable_variables

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(block(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss
    return (mha, ln1, ff1, ff2, ln2), step


def _torch_transformer_step(torch, layers, xn, yn, lr=0.01):
    """``nn.TransformerEncoderLayer`` (post-norm, relu, no dropout) with tapeflow's weights."""
    t = TRANSFORMER
    d = t["d_model"]
    mha, ln1, ff1, ff2, ln2 = [[v.numpy() for v in layer.variables] for layer in layers]
    enc = torch.nn.TransformerEncoderLayer(d_model=d, nhead=t["heads"], dim_feedforward=t["ff"],
                                           dropout=0.0, batch_first=True)
    wq, bq, wk, bk, wv, bv, wo, bo = mha

    def T(a):
        return torch.from_numpy(np.ascontiguousarray(a))
    with torch.no_grad():
        enc.self_attn.in_proj_weight.copy_(T(np.concatenate(
            [w.reshape(d, -1).T for w in (wq, wk, wv)])))
        enc.self_attn.in_proj_bias.copy_(T(np.concatenate([b.reshape(-1) for b in (bq, bk, bv)])))
        enc.self_attn.out_proj.weight.copy_(T(wo.reshape(-1, d).T))
        enc.self_attn.out_proj.bias.copy_(T(bo))
        enc.linear1.weight.copy_(T(ff1[0].T))
        enc.linear1.bias.copy_(T(ff1[1]))
        enc.linear2.weight.copy_(T(ff2[0].T))
        enc.linear2.bias.copy_(T(ff2[1]))
        for norm, (g, b) in ((enc.norm1, ln1), (enc.norm2, ln2)):
            norm.weight.copy_(T(g))
            norm.bias.copy_(T(b))
    enc.train()
    x, y = torch.from_numpy(xn), torch.from_numpy(yn)
    opt = torch.optim.SGD(enc.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(enc(x), y)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def case_transformer(tf, torch):
    """One SGD step of a Transformer encoder block (issue 45), tapeflow's Keras layers
    against PyTorch's ``nn.TransformerEncoderLayer`` from the same weights (checked: the
    same first and second losses, so the gradients and the update agree too)."""
    t = TRANSFORMER
    case = Case("transformer_block",
                f"Transformer encoder block SGD step (MultiHeadAttention {t['heads']} heads, "
                f"d_model {t['d_model']}, LayerNormalization, feed-forward {t['ff']}), seq "
                f"{t['seq']}, batch {t['batch']}, float32", "step", ("torch", 1.2), heavy=True)
    xn, yn = _transformer_data()
    state = {}

    def build_tf():
        layers, step = _tf_transformer_step(tf, xn, yn)
        state["layers"] = layers
        state["weights"] = [[v.numpy() for v in layer.variables] for layer in layers]
        state["tf_loss"] = (float(step()), float(step()))
        for layer, ws in zip(layers, state["weights"]):       # back to the first weights
            layer.set_weights(ws)
        return Impl(common.loop(step))

    def build_torch():
        step = _torch_transformer_step(torch, state["layers"], xn, yn)
        for got, want in zip((float(step()), float(step())), state["tf_loss"]):
            common.same_loss(got, want, "torch")
        return Impl(common.loop(step))

    guard(case, "tapeflow", build_tf)
    if torch is not None and "weights" in state:
        guard(case, "torch", build_torch)
    return case


ALL_CASES = ("add", "add_tape", "grad", "collatz", "collatz_while", "mlp64", "mlp64_traced",
             "mlp1024", "cnn32", "cnn_example", "cnn_tutorial", "lstm_ptb",
             "transformer_block")


def build_cases(tf, torch, keys):
    makers = {
        "add": lambda: case_add(tf, torch, taped=False),
        "add_tape": lambda: case_add(tf, torch, taped=True),
        "grad": lambda: case_grad(tf, torch),
        "collatz": lambda: case_collatz(tf, torch),
        "collatz_while": lambda: case_collatz_while(tf, torch),
        "mlp64": lambda: case_mlp(tf, torch, 64),
        "mlp64_traced": lambda: case_mlp_traced(tf, torch, 64),
        "mlp1024": lambda: case_mlp(tf, torch, 1024),
        "cnn32": lambda: case_cnn(tf, torch, 32),
        "cnn_example": lambda: case_cnn(tf, torch, 32, "example"),
        "cnn_tutorial": lambda: case_cnn(tf, torch, 32, "tutorial"),
        "lstm_ptb": lambda: case_lstm_ptb(tf, torch),
        "transformer_block": lambda: case_transformer(tf, torch),
    }
    return [makers[k]() for k in keys]


# --- timing -------------------------------------------------------------------------------

def measure(case, rounds, sample_s, settle_s=0.0):
    """``(samples, counts)``: ``common.measure`` with each framework calibrated on its
    own (their per-call times differ by orders of magnitude), ``gc.collect()`` before
    each sample, a failing framework dropped into ``case.errors``."""
    fws = [fw for fw in FRAMEWORKS if fw in case.impls]
    timed = SimpleNamespace(impls={fw: case.impls[fw].run for fw in fws}, ratios={})
    counts = common.measure(timed, rounds=rounds, min_time=sample_s, settle_s=settle_s,
                            per_run={fw: case.impls[fw].per_run for fw in fws},
                            max_repeat=1 << 24, calibrate="each", errors=case.errors,
                            collect=True)
    return timed.times, counts


def summarize(case, samples, counts, rounds):
    res = {"key": case.key, "title": case.title, "unit": case.unit,
           "target": None if case.target is None else {"kind": case.target[0],
                                                      "value": case.target[1]},
           "errors": dict(case.errors), "notes": list(case.notes), "impls": {}, "ratios": {},
           "status": None}
    for fw, s in samples.items():
        res["impls"][fw] = {"median_s": statistics.median(s), "min_s": min(s),
                            "rounds": len(s), "repeat": counts[fw], "samples_s": s}
    # Paired per-round ratios (same round, adjacent in time).
    for a, b in (("tapeflow", "numpy"), ("torch", "numpy"), ("tapeflow", "torch"),
                 ("tapeflow", "tapeflow_eager")):
        if a in samples and b in samples:
            k = min(len(samples[a]), len(samples[b]))
            pr = [samples[a][i] / samples[b][i] for i in range(k)]
            res["ratios"][f"{a}/{b}"] = {"median": statistics.median(pr),
                                         "of_mins": min(samples[a]) / min(samples[b])}
    status = "n/a"
    if "tapeflow" in case.errors:
        status = "ERROR"
    elif case.target is not None:
        kind, value = case.target
        if kind == "ratio" and "tapeflow/numpy" in res["ratios"]:
            got = res["ratios"]["tapeflow/numpy"]["median"]
            status = "ok" if got <= value else "MISSED"
        elif kind == "torch" and "tapeflow/torch" in res["ratios"]:
            got = res["ratios"]["tapeflow/torch"]["median"]
            status = "ok" if got <= value else "MISSED"
        elif kind == "abs" and "tapeflow" in res["impls"]:
            got = res["impls"]["tapeflow"]["median_s"]
            status = "ok" if got <= value else "MISSED"
    res["status"] = status
    return res


# --- reporting ----------------------------------------------------------------------------

def fmt_target(target):
    if target is None:
        return "-"
    kind, value = target
    if kind == "torch":
        return f"tf/torch <= {value:g}x"
    return f"tf/np <= {value:g}x" if kind == "ratio" else f"tf <= {fmt_time(value)}"


def machine_info(torch, torch_reason):
    import tapeflow as tf
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "numpy": np.__version__,
        "tapeflow": getattr(tf, "__version__", "?"),
        "tapeflow_devices": [d.name for d in tf.list_devices()] if hasattr(tf, "list_devices")
        else None,
        "torch": None if torch is None else torch.__version__,
        "torch_threads": None if torch is None else torch.get_num_threads(),
        "torch_skipped_because": torch_reason,
        "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                           "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                           "MKL_NUM_THREADS", "TAPEFLOW_DEFAULT_DEVICE")
                if k in os.environ},
    }
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["numpy_blas"] = f"{blas.get('name')} {blas.get('version', '')}".strip()
    except Exception:
        info["numpy_blas"] = None
    try:
        from threadpoolctl import threadpool_info
        info["threadpools"] = [
            {k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture",
                                   "threading_layer", "filepath")}
            for p in threadpool_info()]
    except ImportError:
        info["threadpools"] = None
    return info


def print_machine(info):
    print("machine:", info["platform"], "|", info["processor"], "|",
          f"{info['usable_cpus'] or info['cpu_count']} usable CPU(s) of {info['cpu_count']}")
    print(f"python {info['python']} | numpy {info['numpy']} (BLAS: {info['numpy_blas']}) | "
          f"tapeflow {info['tapeflow']} on {', '.join(info['tapeflow_devices'] or ['?'])}")
    if info["torch"]:
        print(f"torch {info['torch']} ({info['torch_threads']} threads)")
    else:
        print(f"torch: skipped - {info['torch_skipped_because']}")
    if info["threadpools"]:
        for p in info["threadpools"]:
            print(f"threadpool: {p['internal_api']} {p['version']} "
                  f"threads={p['num_threads']} arch={p['architecture']}")
    else:
        print("threadpool: threadpoolctl not installed (optional: pip install threadpoolctl)")
    for k, v in info["env"].items():
        print(f"env: {k}={v}")


def print_table(results, have_torch):
    # the eager-tapeflow column (and tf/eager) only when a traced case is in the run
    eager = any("tapeflow_eager" in r["impls"] or "tapeflow_eager" in r["errors"]
                for r in results)
    cols = ["case", "unit", "tapeflow", "numpy"] + (["torch"] if have_torch else []) + \
        (["tf eager"] if eager else []) + ["tf/np"] + \
        (["torch/np", "tf/torch"] if have_torch else []) + (["tf/eager"] if eager else []) + \
        ["target", ""]
    rows = []
    for r in results:
        t = {fw: r["impls"].get(fw, {}).get("median_s") for fw in FRAMEWORKS}
        row = [r["key"], r["unit"]]
        for fw in ("tapeflow", "numpy") + (("torch",) if have_torch else ()) + \
                (("tapeflow_eager",) if eager else ()):
            row.append("ERROR" if fw in r["errors"] else fmt_time(t[fw]))
        pairs = ["tapeflow/numpy"] + (["torch/numpy", "tapeflow/torch"] if have_torch else []) \
            + (["tapeflow/tapeflow_eager"] if eager else [])
        for p in pairs:
            v = r["ratios"].get(p)
            row.append(f"{v['median']:.2f}x" if v else "-")
        kind_value = None if r["target"] is None else (r["target"]["kind"], r["target"]["value"])
        row += [fmt_target(kind_value), r["status"]]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(cols, *rows)]
    def line(cells):
        return "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(cols))
    print("-" * len(line(cols)))
    for row in rows:
        print(line(row))


MEMORY_CODE = r"""
import resource, sys
sys.path.insert(0, {bench!r})
import numpy as np
import compare as C
fw = {fw!r}
params0, xn, yn = C._mlp_init(1024)
if fw == "tapeflow":
    import tapeflow as tf
    params, step = C._tf_mlp_step(tf, params0, xn, yn)
else:
    import torch
    params, step = C._torch_mlp_step(torch, params0, xn, yn)
import os
def status(key):  # /proc/self/status in bytes (Linux): VmRSS now, VmHWM the peak of this
    # image; ru_maxrss would also count the forked parent's image (Linux keeps it across exec)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(key)
def rss():
    return status("VmRSS")
try:                          # reset VmHWM to the current RSS (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    pass
before = rss()
for _ in range(5):
    step()
peak = status("VmHWM")
print(peak - before)
"""


#: peak-RSS growth of 5 MLP b1024 steps, tapeflow / PyTorch (issue 34's table)
MEMORY_TARGET = 0.6


def memory_row(torch_ok, runs=3):
    """Peak-RSS growth (bytes) over 5 MLP b1024 SGD steps: the peak resident size after
    them minus the resident size before (parameters and data are allocated first), tapeflow and PyTorch each in fresh
    processes, the median of ``runs``; the ratio's target is :data:`MEMORY_TARGET`."""
    import subprocess
    bench = os.path.dirname(os.path.abspath(__file__))
    out = {}
    for fw in ("tapeflow", "torch") if torch_ok else ("tapeflow",):
        vals = []
        for _ in range(runs):
            r = subprocess.run([sys.executable, "-c", MEMORY_CODE.format(bench=bench, fw=fw)],
                               capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                out[fw] = f"error: {r.stderr.strip().splitlines()[-1] if r.stderr else r.returncode}"
                break
            vals.append(int(r.stdout.strip().splitlines()[-1]))
        else:
            out[fw] = statistics.median(vals)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few short rounds (a smoke run)")
    ap.add_argument("--json", metavar="PATH", help="write all results (and samples) to PATH")
    ap.add_argument("--cases", default=",".join(ALL_CASES),
                    help=f"comma-separated subset of: {', '.join(ALL_CASES)}")
    ap.add_argument("--rounds", type=int, help="rounds per case (default 31; quick: 7)")
    ap.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a target is missed or tapeflow errors")
    ap.add_argument("--no-memory", action="store_true",
                    help="skip the peak-memory row (separate processes)")
    args = ap.parse_args(argv)

    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in ALL_CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; choose from {', '.join(ALL_CASES)}")

    import tapeflow as tf
    torch, torch_reason = load_torch(args.no_torch)
    info = machine_info(torch, torch_reason)
    print_machine(info)

    rounds = args.rounds or (7 if args.quick else 31)
    sample_s = 0.004 if args.quick else 0.02
    print(f"\n{rounds} interleaved rounds per case (heavy cases: {max(3, rounds // 2)}), "
          f"~{sample_s * 1e3:.0f} ms per sample; times are medians per unit, ratios are "
          "medians of per-round ratios\n")

    results = []
    for case in build_cases(tf, torch, keys):
        r = max(3, rounds // 2) if case.heavy else rounds
        print(f"  {case.key}: {case.title} ...", end="", flush=True)
        t0 = time.perf_counter()
        samples, counts = measure(case, r, sample_s * (2.5 if case.heavy else 1),
                                  settle_s=0.1 if case.heavy else 0.0)
        results.append(summarize(case, samples, counts, r))
        print(f" {time.perf_counter() - t0:.1f} s")
    print()
    print_table(results, torch is not None)

    notes = [n for r in results for n in r["notes"]]
    errors = [(r["key"], fw, msg) for r in results for fw, msg in r["errors"].items()]
    print()
    for r in results:
        for fw in FRAMEWORKS:
            if fw in r["impls"]:
                i = r["impls"][fw]
                r.setdefault("_best", []).append(f"{SHORT[fw]} {fmt_time(i['min_s'])}")
        if "_best" in r:
            print(f"best per {r['unit']:9s} {r['key']:13s} " + ", ".join(r.pop("_best")))
    for note in notes:
        print("note:", note)
    for key, fw, msg in errors:
        print(f"error: {key} / {fw}: {msg}")

    memory = None
    if not args.no_memory and not args.quick:
        memory = memory_row(torch is not None)
        tfm, thm = memory.get("tapeflow"), memory.get("torch")
        if isinstance(thm, str):
            print(f"memory: torch {thm}")
        line = (f"memory: peak-RSS growth over 5 MLP b1024 SGD steps (fresh processes, median "
                f"of 3): tapeflow {tfm / 2**20:.1f} MB" if isinstance(tfm, (int, float))
                else f"memory: tapeflow {tfm}")
        if isinstance(thm, (int, float)) and isinstance(tfm, (int, float)) and thm > 0:
            ratio = tfm / thm
            memory["tapeflow/torch"] = ratio
            memory["status"] = "ok" if ratio <= MEMORY_TARGET else "MISSED"
            line += (f", torch {thm / 2**20:.1f} MB: {ratio:.2f}x (target <= "
                     f"{MEMORY_TARGET}x: {memory['status']})")
        print(line)

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rounds": rounds, "sample_s": sample_s,
                       "results": results, "memory": memory}, f, indent=1)
        print(f"\nresults written to {args.json}")

    if args.check and (any(r["status"] in ("MISSED", "ERROR") for r in results)
                       or (memory or {}).get("status") == "MISSED"):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
