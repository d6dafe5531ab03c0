"""Threads on the C paths (issue 33: "thread safety as documented in docs/concurrency.md
(two threads recording two tapes, and sharing Variables)").

docs/concurrency.md promises: a GradientTape records only the ops of the thread that
opened it; Variable updates are atomic per Variable (no update lost) and a read is the
value before or after an update, never a mix. Here two threads, with a thread switch
every microsecond, each open their own tape at the same moment (a barrier), run ops
that take the C paths (operators, ``tf.add``, ``tf.multiply``, ``bool()``, a Python
scalar operand) on their own tensors and on two shared Variables, update a shared
Variable with ``assign_add`` under ``stop_recording``, and check every gradient
exactly (small integers in float32); each then asks its own tape for the gradient of
a tensor the other thread computed from a Variable both tapes watch: ``None``, because
the other thread's ops are not on this tape.

A thread that ends with a tape still recording must free it, as the Python path does
(its tapes are in a threading.local; the C core drops its C thread-local recorders when
the thread's state is cleared).
"""

from __future__ import annotations

import gc
import sys
import threading
import weakref

import pytest

import tapeflow as tf
from tapeflow.runtime import dispatch

ROUNDS = 1000


@pytest.fixture
def switch_often():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run(target, n):
    """Run target(i) in n threads; re-raise what they raised."""
    errors = []

    def body(i):
        try:
            target(i)
        except BaseException as e:              # reported by the test, not lost
            errors.append(e)

    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_the_c_core_is_what_runs_here():
    if dispatch.speedups is None:
        pytest.skip("the C core is not in use: these tests run the pure-Python path")
    x = tf.constant([1.0])
    assert type(x + x) is tf.Tensor and tf.Tensor.__mro__[1] is dispatch.speedups.TensorBase


def test_two_threads_two_tapes_shared_variables(switch_often):
    w = tf.Variable(3.0)                         # read by both threads, never written
    v = tf.Variable(0.0)                         # read and updated by both threads
    start, middle = threading.Barrier(2), threading.Barrier(2)
    published = [None, None]                     # each thread's w * x, for the other
    results = [[], []]

    def body(i):
        for k in range(ROUNDS):
            xv = float(1 + i + 2 * (k % 7))
            x = tf.constant(xv)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(x)
                start.wait()                     # both tapes are open now
                vv = v.read_value()              # the value this round uses
                y = x * x + w * x                # operators: the C fast path
                z = tf.add(y, x * vv)            # tf.add: binary() in C
                if bool(z > 0.0):                # bool(): nb_bool in C
                    z = tf.multiply(z, 2.0)
                published[i] = w * x             # on this thread's tape only
                with tape.stop_recording():
                    v.assign_add(1.0)
                middle.wait()                    # the other thread's w * x exists
                theirs = published[1 - i]
            gx, gw, gv = tape.gradient(z, [x, w, v])
            g_theirs = tape.gradient(theirs, [w, x])
            vr = float(vv)
            results[i].append((
                tuple(None if g is None else float(g) for g in (gx, gw, gv)),
                (2 * (2 * xv + 3.0 + vr), 2 * xv, 2 * xv),
                g_theirs,
                float(z), 2 * (xv * xv + 3.0 * xv + xv * vr)))
            del tape

    _run(body, 2)
    bad = []
    for i in (0, 1):
        for k, (got, want, g_theirs, z, z_want) in enumerate(results[i]):
            if got != want or z != z_want:
                bad.append(f"thread {i} round {k}: gradients {got} (want {want}), "
                           f"z {z} (want {z_want})")
            if g_theirs != [None, None]:
                bad.append(f"thread {i} round {k}: its tape recorded the other thread's "
                           f"w * x (gradient {g_theirs})")
    assert not bad, "\n".join(bad[:10])
    assert float(v) == 2 * ROUNDS                # no update lost
    assert float(w) == 3.0


def test_one_thread_records_while_the_other_computes_untaped(switch_often):
    """The recording counter is process-wide (the C path checks it first); a thread with
    no tape must still record nothing and get its values, while another records."""
    shared = tf.constant([2.0, 3.0])
    counts = {}

    def body(i):
        if i == 0:
            n = 0
            for _ in range(2000):
                with tf.GradientTape() as tape:
                    tape.watch(shared)
                    y = shared * shared + 1.0
                g = tape.gradient(y, shared)
                n += g.numpy().tolist() == [4.0, 6.0]
            counts[0] = n
        else:
            n = 0
            for _ in range(4000):
                y = shared * shared + 1.0        # the same watched tensor, untaped here
                n += y.numpy().tolist() == [5.0, 10.0]
            counts[1] = n

    _run(body, 2)
    assert counts == {0: 2000, 1: 4000}


def test_a_thread_that_ends_with_a_tape_recording_frees_it():
    """(before tape.c's Cleaner in the thread state's dict, the C thread-local kept the
    tape's core, its records and its watched tensor alive after the thread ended)"""
    refs = {}

    def body():
        x = tf.constant([1.0, 2.0])
        tape = tf.GradientTape()
        tape.__enter__()                         # never exited: the thread ends with it
        tape.watch(x)
        y = x * x
        refs.update(x=weakref.ref(x), y=weakref.ref(y), tape=weakref.ref(tape))

    t = threading.Thread(target=body)
    t.start()
    t.join()
    gc.collect()
    alive = sorted(k for k, r in refs.items() if r() is not None)
    assert not alive, f"still alive after the thread ended: {alive}"
