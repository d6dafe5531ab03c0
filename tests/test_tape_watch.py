"""What a tape watches and records, as the C tape (runtime/_c/tape.c: a watch bit per
tape slot on the tensor, 64 slots, an id dict past them) and the Python reference
(autodiff/tape.py _PyTape) must both behave: the same tests run in the pure-Python lane."""

import gc
import threading
import weakref

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.autodiff.tape import TapeRecord
from tapeflow.runtime import context as _ctx
from tapeflow.runtime.tensor import speedups


def test_more_live_tapes_than_watch_slots():
    # 70 persistent tapes alive at once: the ones past the 64 slots watch by id
    x = tf.constant([1.0, 2.0])
    tapes = []
    for i in range(70):
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = x * float(i + 1)
            z = y * y                             # an output watched in turn
        tapes.append((t, y, z))
    for i, (t, y, z) in enumerate(tapes):
        k = float(i + 1)
        np.testing.assert_allclose(t.gradient(y, x).numpy(), [k, k])
        np.testing.assert_allclose(t.gradient(z, x).numpy(), 2 * k * k * np.array([1.0, 2.0]))
        assert len(t._records) == 2


def test_a_new_tape_does_not_inherit_what_a_freed_one_watched():
    x = tf.constant([1.0, 2.0])
    for _ in range(150):                          # every slot freed and taken again
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = x * 2.0
        del t
    with tf.GradientTape() as t2:
        z = x * 2.0
        w = y * 2.0
    assert t2._records == []
    assert t2.gradient([z, w], [x, y]) == [None, None]


def test_reset_and_release_forget_the_watched_tensors():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * 2.0
        t.reset()
        y * 3.0
        x * 3.0
    assert t._records == [] and t._watched == {}
    with tf.GradientTape() as t1:
        t1.watch(x)
        y = x * 2.0
        t1.gradient(y, x)                         # frees the records, still recording
        y * 3.0
        x * 3.0
        assert t1._records == []


def test_binary_records_read_as_tape_records():
    a, b = tf.constant([1.0]), tf.constant([2.0])
    with tf.GradientTape() as t:
        t.watch(a)
        c = a + b
        d = tf.reduce_sum(c, axis=0)
    first, second = (TapeRecord._make(r) for r in t._records)
    assert first.op.name == "Add" and first.inputs == (a, b) and first.outputs == (c,)
    assert first.attrs == {} and first.grad_fn is None
    assert second.inputs == (c,) and second.outputs == (d,) and second.attrs["axis"] == (0,)
    assert set(t._watched) == {id(a), id(c), id(d)}


def test_watching_does_not_leak_between_threads():
    x = tf.constant([1.0, 2.0])
    both_open = threading.Barrier(2)
    both_ran = threading.Barrier(2)
    out = {}

    def watching():
        with tf.GradientTape() as t:
            t.watch(x)
            both_open.wait(10)
            y = x * x
            both_ran.wait(10)
        out["watching"] = t.gradient(y, x).numpy().tolist()

    def not_watching():
        with tf.GradientTape() as t:
            both_open.wait(10)
            z = x * 3.0
            both_ran.wait(10)
        out["not_watching"] = (len(t._records), t.gradient(z, x))

    threads = [threading.Thread(target=f) for f in (watching, not_watching)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert out == {"watching": [2.0, 4.0], "not_watching": (0, None)}


def test_a_tape_held_by_its_own_gradient_function_is_collected():
    x = tf.constant(2.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * 1.0
        # a record whose gradient function refers back to the tape: a reference cycle
        _ctx.record(tf.ops.tapeflow.Identity, (x,), (y,), {}, lambda ctx, dy: (dy, t))
    ref = weakref.ref(t)
    del t
    gc.collect()
    assert ref() is None


def test_gradients_of_two_paths_are_summed_and_recorded_by_an_outer_tape():
    x = tf.constant([1.0, 3.0])
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(x * x + x * 2.0 + tf.cast(x, tf.float64) * 0.0)
        g = inner.gradient(y, x)                  # 2x + 2: three paths summed
    np.testing.assert_allclose(g.numpy(), [4.0, 8.0])
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), [2.0, 2.0])


@pytest.mark.skipif(speedups is None, reason="the Python tape's records hold every result")
def test_a_dropped_result_of_a_taped_operator_is_freed():
    # the C tape holds a binary record's result weakly: a result nobody holds is on no
    # path to a target, and a new tensor at its address is not taken for it
    a, b = tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(a)
        ref = weakref.ref(a + b)
        kept = a * b
        for _ in range(50):                       # reuse the freed tensors' memory
            fresh = b * 2.0
        y = kept + fresh
    assert ref() is None
    assert [r[0].name for r in t._records] == ["Mul", "Add"]
    np.testing.assert_allclose(t.gradient(y, a).numpy(), [3.0, 4.0])
    assert t.gradient(fresh, a) is None


def test_an_op_declared_non_differentiable_while_taping_is_no_longer_recorded():
    from tapeflow.runtime.registry import get_op
    add = get_op("Add")
    a, b = tf.constant([1.0]), tf.constant([2.0])
    with tf.GradientTape() as t:
        t.watch(a)
        c = a + b
        add.differentiable = False
        try:
            d = a + b
        finally:
            add.differentiable = True
        e = a + b
    outs = [r[2][0] for r in t._records]
    assert len(outs) == 2 and outs[0] is c and outs[1] is e and d is not None


def test_a_thread_that_ends_with_a_tape_recording_no_longer_counts_it():
    # (else every op after it would look for tapes: tf.function replays recorded, ...)
    before = _ctx.tapes_active[0]
    ended = threading.Thread(target=lambda: tf.GradientTape().__enter__())
    ended.start()
    ended.join(30)
    gc.collect()
    assert _ctx.tapes_active[0] == before


def test_a_none_target_names_the_likely_cause():
    """gradient(None, x) -- the unconnected inner gradient of a second-order program --
    named a Const op the user never called (found by the differential test)."""
    x, y = tf.constant(2.0), tf.constant(3.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            z = y * y
        g = inner.gradient(z, x)
    assert g is None
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="target is None.*unconnected_gradients='zero'"):
        outer.gradient(g, x)
