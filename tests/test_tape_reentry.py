"""Entering a GradientTape (or a ForwardAccumulator) that is already recording (issue 43,
part 4). It pushed the tape a second time, so every op was recorded twice and the
gradient silently doubled, and the tape was left on the thread's stack after both
``with`` blocks ended (recording forever). TensorFlow raises ``ValueError: Tape is still
recording``; tapeflow raises InvalidArgumentError (a ValueError) at the inner
``__enter__``, before changing anything: the outer block goes on recording and gives
the right gradient.

What TensorFlow allows stays allowed: a second ``with`` block after the first ended
(the tape continues recording), and re-entering inside ``tape.stop_recording()`` (the
tape is paused there). Runs on the C core and, in tests/test_speedups.py's lane, with
``TAPEFLOW_PURE_PYTHON=1``.
"""

from __future__ import annotations

import threading

import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.runtime import context as _ctx


def _idle():
    """No tape left on this thread's stack or counted anywhere."""
    assert _ctx.active_tapes() == []
    assert _ctx.tapes_active[0] == 0


@pytest.fixture(autouse=True)
def _no_tape_before_or_after():
    _idle()
    yield
    _idle()


def _reentry(e, what="GradientTape"):
    msg = str(e)
    assert isinstance(e, ValueError) and isinstance(e, errors.InvalidArgumentError)
    assert f"This {what} is already recording" in msg, msg
    return msg


def test_reentering_a_recording_tape_raises_and_the_outer_block_still_works():
    x = tf.constant(3.0)
    t = tf.GradientTape()
    ran = []
    with t:
        t.watch(x)
        with pytest.raises(errors.InvalidArgumentError) as info:
            with t:
                ran.append(1)               # never runs: __enter__ raised
        msg = _reentry(info.value)
        assert "its `with` block is still open in this thread" in msg
        assert "would record every op twice" in msg
        assert "new tf.GradientTape()" in msg           # what to do
        assert _ctx.active_tapes() == [t]              # pushed once, still recording
        y = x * x
    assert ran == []
    assert len(t._records) == 1                       # recorded once, not twice
    assert float(t.gradient(y, x)) == 6.0             # not 12.0


def test_the_error_is_the_valueerror_tensorflow_raises():
    x = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        with pytest.raises(ValueError, match="already recording"):
            t.__enter__()
        y = x * x * x
    assert float(t.gradient(y, x)) == 12.0


def test_reentering_a_persistent_recording_tape_raises_too():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with pytest.raises(errors.InvalidArgumentError, match="already recording"):
            with t:
                pass
        y = x * x
    assert float(t.gradient(y, x)) == 6.0
    assert float(t.gradient(y, x)) == 6.0


def test_a_second_with_block_after_the_first_ended_continues_recording():
    # TensorFlow: a tape may be entered again once its block ended; it records on
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    _idle()
    with t:
        z = y * 2.0
    _idle()
    assert len(t._records) == 2
    assert float(t.gradient(z, x)) == 12.0            # d(2 x^2)/dx
    assert float(t.gradient(y, x)) == 6.0
    t2 = tf.GradientTape()                             # non-persistent alike
    with t2:
        t2.watch(x)
        y = x * x
    with t2:
        z = y * x
    assert float(t2.gradient(z, x)) == 27.0            # d(x^3)/dx


def test_reentering_inside_the_tapes_own_stop_recording_is_allowed():
    # (the tape is paused there; TensorFlow allows it too)
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        with t.stop_recording():
            u = x * x                                   # not recorded
            with t:
                v = x * 4.0                             # recorded
            w = x * x                                   # not recorded
        y = x * x                                       # recorded again
        assert _ctx.active_tapes() == [t]
    assert len(t._records) == 2
    assert t.gradient(u, x) is None and t.gradient(w, x) is None
    assert float(t.gradient(v, x)) == 4.0
    assert float(t.gradient(y, x)) == 6.0


def test_reentering_while_every_tape_is_paused_raises():
    # tf.autodiff.stop_recording() pauses every tape of the thread; they are still
    # active (TensorFlow's tape.stop_recording() alike: "Tape is still recording")
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.autodiff.stop_recording():
            with pytest.raises(errors.InvalidArgumentError) as info:
                with t:
                    pass
            assert _ctx.active_tapes() == []
        msg = _reentry(info.value)
        assert "paused (by tf.autodiff.stop_recording(), not ended)" in msg
        assert _ctx.active_tapes() == [t]
        y = x * x
    assert float(t.gradient(y, x)) == 6.0


def test_a_tape_recording_in_another_thread_cannot_be_entered():
    x = tf.constant(3.0)
    t = tf.GradientTape()
    entered, tried = threading.Event(), threading.Event()
    caught, results = [], []

    def owner():
        with t:
            t.watch(x)
            entered.set()
            tried.wait(30)
            y = x * x
        results.append(float(t.gradient(y, x)))
        results.append((list(_ctx.active_tapes()), _ctx.tapes_active[0]))

    th = threading.Thread(target=owner)
    th.start()
    assert entered.wait(30)
    try:
        with t:
            pass
    except Exception as e:      # noqa: BLE001 - checked below
        caught.append(e)
    finally:
        tried.set()
    th.join(30)
    assert len(caught) == 1, caught
    msg = _reentry(caught[0])
    assert "recording in another thread" in msg
    assert "one tape per thread" in msg
    assert _ctx.active_tapes() == []                   # nothing pushed here
    assert results == [6.0, ([], 0)]                   # the owner's gradient, not doubled


def test_a_tape_may_be_entered_in_another_thread_after_its_block_ended():
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    out = []

    def other():
        with t:
            out.append(y * x)
        out.append(_ctx.active_tapes() == [])

    th = threading.Thread(target=other)
    th.start()
    th.join(30)
    assert out[1] is True
    assert float(t.gradient(out[0], x)) == 27.0


def test_reentering_a_recording_forward_accumulator_raises():
    x = tf.constant([1.0, 2.0])
    acc = tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 0.0]))
    with acc:
        with pytest.raises(errors.InvalidArgumentError) as info:
            with acc:
                pass
        msg = _reentry(info.value, "ForwardAccumulator")
        assert "would record every op twice" in msg
        assert "new tf.autodiff.ForwardAccumulator" in msg
        assert _ctx.active_tapes() == [acc]
        y = tf.reduce_sum(x * x * x)
    assert len(acc._records) == 3                      # Mul, Mul, Sum (once each)
    assert float(acc.jvp(y)) == 3.0                    # not 6.0


def test_a_forward_accumulator_may_be_entered_again_after_its_block_ended():
    x = tf.constant([1.0, 2.0])
    acc = tf.autodiff.ForwardAccumulator(x, tf.constant([1.0, 0.0]))
    with acc:
        y = x * x
    with acc:
        z = tf.reduce_sum(y * x)
    assert float(acc.jvp(z)) == 3.0


def test_reentering_a_nested_inner_tape_raises_but_the_outer_tape_is_fine():
    x = tf.constant(3.0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            with pytest.raises(errors.InvalidArgumentError, match="already recording"):
                with outer:
                    pass
            assert _ctx.active_tapes() == [outer, inner]
            y = x * x * x
        dy = inner.gradient(y, x)
    assert float(dy) == 27.0
    assert float(outer.gradient(dy, x)) == 18.0
