"""Buffer reuse in eager steps and traced replays (issue 48, item 2).

A Variable's update writes into the Variable's own buffer only when nobody else can
see that buffer (docs/decisions.md section 10; docs/native.md, "Buffer reuse"): eagerly
in ``Variable.assign_add/assign_sub`` and the fused optimizers, and in a ``tf.function``
replay (``graph_passes.donate_variables``). These tests hold it to the rule that no
result ever aliases a value the user holds -- a tensor read before the update, a view,
a ``numpy()`` array, a tape's record, a tensor kept in a list, a replay's result --, and
compare the in-place paths with their fresh-array twins on random sequences of updates.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.tracing import graph_passes

NO_DONATE = tuple(p for p in graph_passes.PASSES if p != "donate")


def _buf(v):
    return v._value._data


def _f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --- eager: Variable.assign_sub / assign_add ----------------------------------------------

def test_eager_update_is_in_place_when_nobody_sees_the_buffer():
    v = tf.Variable(_f32(6, 5))
    g = tf.constant(_f32(6, 5, seed=1))
    before = weakref.ref(_buf(v))
    expect = v.numpy() - 0.1 * g.numpy()
    v.assign_sub(0.1 * g)
    assert _buf(v) is before()
    np.testing.assert_array_equal(v.numpy(), expect)


@pytest.mark.parametrize("holder", ["read_value", "view", "list", "assigned", "tape",
                                    "value_op"])
def test_eager_update_never_writes_a_value_someone_holds(holder):
    v = tf.Variable(_f32(4, 3))
    d = tf.constant(_f32(4, 3, seed=2))
    old = v.numpy()
    held = []
    tape = None
    if holder == "read_value":
        held.append(v.read_value())
    elif holder == "view":
        held.append(np.asarray(v))                 # a read-only view of the buffer
    elif holder == "list":
        keep = [v.value()]
        held.append(keep)
    elif holder == "assigned":                     # the Variable took a user's tensor
        t = tf.constant(old)
        v.assign(t)
        held.append(t)
    elif holder == "tape":
        tape = tf.GradientTape()
        tape.__enter__()
        y = tf.reduce_sum(v * v)
    elif holder == "value_op":
        held.append(v + 0.0)                       # a result, not the buffer: donates
    v.assign_add(d)
    v.assign_sub(2.0 * d)
    if tape is not None:
        tape.__exit__(None, None, None)
        np.testing.assert_allclose(tape.gradient(y, v).numpy(), 2 * old, rtol=1e-6)
    for h in held:
        arr = np.asarray(h[0] if isinstance(h, list) else h)
        np.testing.assert_array_equal(arr, old if holder != "value_op" else old + 0.0)
    np.testing.assert_allclose(v.numpy(), old + d.numpy() - 2.0 * d.numpy(), rtol=1e-6)


def test_eager_updates_match_fresh_arrays_on_random_sequences():
    """The slow twin: the same random updates on NumPy arrays (fresh results), with
    readers kept at random points; every kept value keeps its numbers."""
    rng = np.random.default_rng(48)
    for trial in range(6):
        shape = tuple(int(s) for s in rng.integers(1, 7, rng.integers(1, 3)))
        start = rng.standard_normal(shape).astype(np.float32)
        v, ref = tf.Variable(start), start.copy()
        kept = []
        for step in range(25):
            d = rng.standard_normal(shape).astype(np.float32)
            how = rng.integers(0, 5)
            if how == 0:
                v.assign_add(d)
                ref = ref + d
            elif how == 1:
                v.assign_sub(tf.constant(d) * 0.5)
                ref = ref - d * np.float32(0.5)
            elif how == 2:
                v.assign(d)
                ref = d.copy()
            elif how == 3:
                kept.append((v.read_value(), ref.copy()))
            else:
                kept.append((np.asarray(v), ref.copy()))
            if kept and rng.random() < 0.3:
                kept.pop(int(rng.integers(0, len(kept))))
            np.testing.assert_array_equal(v.numpy(), ref, err_msg=f"trial {trial} step {step}")
            for val, snap in kept:
                np.testing.assert_array_equal(np.asarray(val), snap)


# --- traced replays ------------------------------------------------------------------------

def _sgd_step(v, x, lr=0.1):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x, v) ** 2)
    v.assign_sub(lr * tape.gradient(loss, v))
    return loss


def test_replay_updates_variables_in_place():
    v = tf.Variable(_f32(5, 4))
    x = tf.constant(_f32(3, 5, seed=1))
    f = tf.function(lambda: _sgd_step(v, x))
    f()
    cf = f.get_concrete_function()
    assert dict(cf.passes_run)["donate"] == 1
    before = weakref.ref(_buf(v))
    f()
    f()
    assert _buf(v) is before()


def test_replay_matches_the_fresh_replay_bitwise():
    x = tf.constant(_f32(3, 5, seed=1))
    v1, v2, v3 = (tf.Variable(_f32(5, 4)) for _ in range(3))
    on = tf.function(lambda: _sgd_step(v1, x))
    off = tf.function(lambda: _sgd_step(v2, x), passes=NO_DONATE)
    for _ in range(4):
        on(), off(), _sgd_step(v3, x)
        np.testing.assert_array_equal(v1.numpy(), v2.numpy())
        np.testing.assert_array_equal(v1.numpy(), v3.numpy())


def test_replay_never_writes_a_value_read_before_the_call():
    v = tf.Variable(_f32(5, 4))
    x = tf.constant(_f32(3, 5, seed=1))
    f = tf.function(lambda: _sgd_step(v, x))
    f()
    held, view, kept = v.read_value(), np.asarray(v), [v.value()]
    snap = held.numpy()
    f()
    for h in (held, view, kept[0]):
        np.testing.assert_array_equal(np.asarray(h), snap)
    assert not np.array_equal(v.numpy(), snap)
    del held, view, kept
    before = weakref.ref(_buf(v))
    f()                                            # nobody holds it now: in place
    assert _buf(v) is before()


def test_replay_returning_the_old_or_new_value():
    v = tf.Variable(np.arange(6, dtype=np.float32))

    @tf.function
    def old_then_update(g):
        old = v.read_value()
        v.assign_sub(g * 2.0)
        return old

    @tf.function
    def update_then_new(g):
        v.assign_add(g)
        return v.read_value()

    g = tf.constant(np.ones(6, np.float32))
    outs = [old_then_update(g) for _ in range(3)]
    np.testing.assert_array_equal(outs[0].numpy(), np.arange(6))
    np.testing.assert_array_equal(outs[2].numpy(), np.arange(6) - 4)
    news = [update_then_new(g) for _ in range(3)]
    base = np.arange(6, dtype=np.float32) - 6
    for k, t in enumerate(news):
        np.testing.assert_array_equal(t.numpy(), base + k + 1)


def test_replay_under_a_tape_and_with_a_variable_argument():
    x = tf.constant(_f32(3, 5, seed=1))

    @tf.function
    def step(w, lr):
        w.assign_sub(lr * w)
        return tf.reduce_sum(tf.matmul(x, w))

    w = tf.Variable(_f32(5, 4))
    ref = w.numpy()
    for _ in range(3):
        step(w, tf.constant(0.25))
        ref = ref - np.float32(0.25) * ref
    np.testing.assert_array_equal(w.numpy(), ref)
    u = tf.Variable(ref)
    with tf.GradientTape() as tape:                # the taped replay (op by op)
        tape.watch(u)
        y = step(w, tf.constant(0.0))
        held = w.read_value()
    snap = held.numpy()
    step(w, tf.constant(0.5))
    np.testing.assert_array_equal(held.numpy(), snap)
    assert tape.gradient(y, w) is not None


def test_a_variable_made_from_a_user_tensor_leaves_it_alone():
    t = tf.constant(_f32(5, 4))
    snap = t.numpy()
    v = tf.Variable(t)
    f = tf.function(lambda: v.assign_sub(v * 0.5))
    for _ in range(3):
        f()
    np.testing.assert_array_equal(t.numpy(), snap)
    np.testing.assert_array_equal(v.numpy(), snap * np.float32(0.5) ** 3)


@pytest.mark.parametrize("make", [lambda: tf.keras.optimizers.SGD(0.1),
                                  lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9),
                                  lambda: tf.keras.optimizers.Adam(0.01)],
                         ids=["sgd", "momentum", "adam"])
def test_traced_optimizer_updates_in_place_and_match_eager(make):
    x = tf.constant(_f32(3, 5, seed=1))
    w1, w2 = tf.Variable(_f32(5, 4)), tf.Variable(_f32(5, 4))
    o1, o2 = make(), make()

    def body(w, opt):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])

    f = tf.function(lambda: body(w1, o1))
    for _ in range(2):
        f(), body(w2, o2)
    assert dict(f.get_concrete_function().passes_run)["donate"] == 1
    held = w1.read_value()                         # this call must allocate
    snap = held.numpy()
    f(), body(w2, o2)
    np.testing.assert_array_equal(held.numpy(), snap)
    assert _buf(w1) is not held._data
    del held
    kept = weakref.ref(_buf(w1))
    f(), body(w2, o2)
    f(), body(w2, o2)
    assert _buf(w1) is kept()                      # nobody holds it: in place again
    np.testing.assert_array_equal(w1.numpy(), w2.numpy())


def test_replays_match_fresh_replays_on_random_programs():
    """The slow twin of the traced path: random update programs traced twice, with and
    without the ``donate`` pass, replayed with readers kept at random points."""
    rng = np.random.default_rng(7)
    donated = 0
    for trial in range(4):
        shape = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        start = rng.standard_normal(shape).astype(np.float32)
        ops = [int(o) for o in rng.integers(0, 4, 5)]

        def program(v, g):
            for o in ops:
                if o == 0:
                    v.assign_sub(g * 0.5)
                elif o == 1:
                    v.assign_add(g)
                elif o == 2:
                    v.assign(v * 0.75)
                else:
                    v.assign(tf.maximum(v, g))
            return tf.reduce_sum(v)

        va, vb = tf.Variable(start), tf.Variable(start)
        fa = tf.function(lambda g: program(va, g))
        fb = tf.function(lambda g: program(vb, g), passes=NO_DONATE)
        kept = []
        for step in range(6):
            g = tf.constant(rng.standard_normal(shape).astype(np.float32))
            ra, rb = fa(g), fb(g)
            if step == 0:
                donated += dict(fa.get_concrete_function(g).passes_run)["donate"]
            np.testing.assert_array_equal(ra.numpy(), rb.numpy())
            np.testing.assert_array_equal(va.numpy(), vb.numpy(),
                                          err_msg=f"trial {trial} ops {ops} step {step}")
            if rng.random() < 0.5:
                kept.append((va.read_value(), va.numpy()))
            for val, snap in kept:
                np.testing.assert_array_equal(val.numpy(), snap)
    assert donated >= 4


def test_readers_in_other_threads_see_whole_values_during_replays():
    n = 200_000
    v = tf.Variable(np.zeros(n, np.float32))
    one = tf.constant(np.ones(n, np.float32))
    f = tf.function(lambda: v.assign_add(one * 1.0))
    f()
    assert dict(f.get_concrete_function().passes_run)["donate"] == 1
    done = threading.Event()
    torn = []

    def reader():
        while not done.is_set():
            a = v.read_value().numpy()
            if a[0] != a[-1] or a[n // 2] != a[0]:
                torn.append((a[0], a[n // 2], a[-1]))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(60):
            f()
    finally:
        done.set()
        t.join()
    assert not torn, torn[:3]
    assert v.numpy()[0] == v.numpy()[-1] == 61.0


@pytest.fixture
def switch_often():
    """Thread switches every microsecond (as tests/test_concurrency.py)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


@pytest.mark.parametrize("writer", ["replay", "assign_add", "fused"])
def test_reading_replays_never_see_an_in_place_update_half_written(writer, switch_often):
    """A replay that only reads a Variable (captured, or passed as an argument) takes its
    buffer under the Variable's lock, which every in-place update holds from its
    reference-count check to the end of its write: before, such a replay could copy the
    buffer in the middle of a donating replay's write (the GIL released by the ufunc;
    torn in about a third of the reads here), of an eager in-place ``assign_add`` or of
    a fused optimizer step."""
    n = 1 << 20
    v = tf.Variable(np.zeros(n, np.float32))
    one = tf.constant(np.ones(n, np.float32))
    bump = tf.function(lambda: v.assign(v + 1.0))
    opt = tf.keras.optimizers.Adam(0.1)

    def spread_of(x):                  # 0 for every consistent value of the Variable
        x = x * 1.0
        return tf.reduce_max(x) - tf.reduce_min(x)
    spread = tf.function(lambda: spread_of(v))      # a captured Variable
    spread_arg = tf.function(spread_of)             # a Variable argument
    bump(), bump(), spread(), spread_arg(v)
    assert dict(bump.get_concrete_function().passes_run)["donate"] == 1
    done, started, errors = threading.Event(), threading.Event(), []

    def write():
        try:
            while not done.is_set():
                if writer == "replay":
                    bump()
                elif writer == "assign_add":
                    v.assign_add(one)
                else:
                    opt.apply_gradients([(one, v)])
                started.set()
        except Exception as e:         # (reported below)
            errors.append(e)
            started.set()

    t = threading.Thread(target=write)
    t.start()
    try:
        started.wait()
        torn = [k for k in range(200) if float(spread() if k % 2 else spread_arg(v)) != 0.0]
    finally:
        done.set()
        t.join()
    assert not errors, errors
    assert not torn, f"{len(torn)} of 200 reads saw a half-written buffer"
    kept = weakref.ref(_buf(v))
    bump()
    assert _buf(v) is kept()                        # alone, still in place


def test_replays_that_read_what_the_other_writes_do_not_deadlock(switch_often):
    """A replay that assigns Variables holds the locks of those it only reads as well,
    all taken first in one order: ``f`` (writes a, reads b) and ``g`` (writes b, reads
    a) in two threads, with a reader of both in a third, never wait on each other in a
    cycle (reads under a lock taken mid-replay would)."""
    a, b = tf.Variable(np.zeros(64, np.float32)), tf.Variable(np.zeros(64, np.float32))
    f = tf.function(lambda: a.assign_add(b * 0.0 + 1.0))
    g = tf.function(lambda: b.assign_add(a * 0.0 + 1.0))
    h = tf.function(lambda: a + b)
    work = {"f": f, "g": g, "h": h}
    for fn in work.values():
        fn()
    ts = [threading.Thread(target=lambda fn=fn: [fn() for _ in range(300)], daemon=True)
          for fn in work.values()]
    for t in ts:
        t.start()
    deadline = time.monotonic() + 30   # (a deadlock guard, not a timing threshold)
    for t in ts:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in ts), "the replays deadlocked"
    assert a.numpy()[0] == b.numpy()[0] == 301.0


def test_a_variable_argument_is_donated_as_a_captured_one():
    """A Variable passed as an argument is read by the replay's read node alone (its
    argument slot holds no reference to the buffer): its update is written in place
    when nobody else holds the buffer, and matches the fresh-array replay."""
    def step(var, g):
        var.assign_sub(g * 0.5)
        return tf.reduce_sum(var)
    va, vb = tf.Variable(_f32(5, 3)), tf.Variable(_f32(5, 3))
    fa, fb = tf.function(step), tf.function(step, passes=NO_DONATE)
    for k in range(4):
        g = tf.constant(_f32(5, 3, seed=k + 1))
        held = va.read_value() if k == 2 else None      # a reader: this call allocates
        snap = None if held is None else held.numpy()
        kept = weakref.ref(_buf(va))
        np.testing.assert_array_equal(fa(va, g).numpy(), fb(vb, g).numpy())
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
        if held is not None:
            np.testing.assert_array_equal(held.numpy(), snap)
            assert _buf(va) is not held._data
        elif k:
            assert _buf(va) is kept()
    assert dict(fa.get_concrete_function(va, g).passes_run)["donate"] == 1


# --- the C fast path: no temporary elision ---------------------------------------------------

def test_binary_ops_never_write_an_operand():
    """The C fast path allocates every result (docs/native.md, "Buffer reuse": no
    temporary elision): an operand only a C caller holds, as in NumPy's object-array
    reductions, keeps its numbers."""
    ts = [tf.constant(np.full((64, 64), float(k), np.float32)) for k in range(4)]
    snaps = [t.numpy() for t in ts]
    objs = np.empty(4, dtype=object)
    objs[:] = ts
    total = np.add.reduce(objs)                    # PyNumber_Add on borrowed elements
    np.testing.assert_array_equal(total.numpy(), np.full((64, 64), 6.0))
    acc = sum(ts[1:], ts[0])
    np.testing.assert_array_equal(acc.numpy(), np.full((64, 64), 6.0))
    for t, s in zip(ts, snaps):
        np.testing.assert_array_equal(t.numpy(), s)
    a = tf.constant(np.ones((64, 64), np.float32))
    r = (a + 1.0) * 2.0 - a                        # temporaries die in the chain
    np.testing.assert_array_equal(r.numpy(), np.full((64, 64), 3.0))
    np.testing.assert_array_equal(a.numpy(), np.ones((64, 64)))
