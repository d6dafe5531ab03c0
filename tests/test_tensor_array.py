"""``tf.TensorArray`` (issue 46): reading and writing eagerly, inside ``tf.function``
(Python loops unroll) and as a loop variable of a traced ``tf.while_loop``; gradients
through write/read/stack/unstack; the errors for bad indices, dtypes and shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors


def _close(a, b, tol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# --- eager ----------------------------------------------------------------------------------

def test_write_read_stack_size_and_properties():
    ta = tf.TensorArray(tf.float32, size=3)
    assert ta.dtype == tf.float32 and not ta.dynamic_size and ta.element_shape is None
    for i in range(3):
        ta = ta.write(i, tf.constant([1.0, 2.0]) * float(i))
    assert list(ta.element_shape) == [2]
    _close(ta.stack(), [[0, 0], [1, 2], [2, 4]])
    assert int(ta.size()) == 3 and ta.size().dtype == tf.int32
    _close(ta.read(1), [1.0, 2.0])


def test_write_changes_the_array_and_returns_it():
    ta = tf.TensorArray(tf.int32, size=2)
    assert ta.write(0, 5) is ta
    _close(ta.stack(), [5, 0])


def test_unwritten_elements_are_zeros():
    ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
    ta = ta.write(1, [1.0, 1.0])
    _close(ta.stack(), [[0, 0], [1, 1], [0, 0]])
    _close(ta.read(2), [0, 0])


def test_dynamic_size_grows():
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    ta = ta.write(4, 1.0)
    assert int(ta.size()) == 5
    _close(ta.stack(), [0, 0, 0, 0, 1])


def test_unstack_gather_scatter_concat_split():
    ta = tf.TensorArray(tf.int32, size=3, clear_after_read=False)
    ta = ta.unstack([[1, 2], [3, 4], [5, 6]])
    _close(ta.read(1), [3, 4])
    _close(ta.gather([2, 0]), [[5, 6], [1, 2]])
    _close(ta.concat(), [1, 2, 3, 4, 5, 6])
    sc = tf.TensorArray(tf.float32, size=3).scatter([2, 0], [[1.0], [2.0]])
    _close(sc.stack(), [[2.0], [0.0], [1.0]])
    sp = tf.TensorArray(tf.float32, size=2, clear_after_read=False).split([1.0, 2.0, 3.0], [1, 2])
    _close(sp.read(0), [1.0])
    _close(sp.read(1), [2.0, 3.0])
    _close(sp.concat(), [1.0, 2.0, 3.0])


def test_tensor_indices_and_size():
    ta = tf.TensorArray(tf.float32, size=tf.constant(2))
    ta = ta.write(tf.constant(1), 3.0)
    _close(ta.read(tf.constant(1)), 3.0)


# --- errors ---------------------------------------------------------------------------------

def test_read_past_the_size_is_out_of_range():
    ta = tf.TensorArray(tf.float32, size=3)
    with pytest.raises(errors.OutOfRangeError, match="read from index 5.*size is 3"):
        ta.read(5)
    with pytest.raises(errors.OutOfRangeError, match="write to index 5.*not resizeable"):
        ta.write(5, 1.0)
    with pytest.raises(errors.OutOfRangeError, match="negative"):
        ta.read(-1)


def test_dtype_mismatch():
    ta = tf.TensorArray(tf.float32, size=2)
    with pytest.raises(errors.InvalidArgumentError, match="dtype is float32.*int32.*tf.cast"):
        ta.write(0, tf.constant(1))


def test_element_shape_mismatch():
    ta = tf.TensorArray(tf.float32, size=2).write(0, [1.0, 2.0])
    with pytest.raises(errors.InvalidArgumentError, match=r"incompatible shape.*\(3,\).*\(2,\)"):
        ta.write(1, [1.0, 2.0, 3.0])
    given = tf.TensorArray(tf.float32, size=2, element_shape=[2])
    with pytest.raises(errors.InvalidArgumentError, match="incompatible shape"):
        given.write(0, [1.0, 2.0, 3.0])


def test_read_twice_after_clear():
    ta = tf.TensorArray(tf.float32, size=1).write(0, 3.0)
    ta.read(0)
    with pytest.raises(errors.InvalidArgumentError, match="twice.*clear_after_read=False"):
        ta.read(0)
    keep = tf.TensorArray(tf.float32, size=1, clear_after_read=False).write(0, 3.0)
    keep.read(0)
    _close(keep.read(0), 3.0)


def test_unstack_too_many_and_bad_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="unstack 3 tensors.*static size 2"):
        tf.TensorArray(tf.int32, size=2).unstack([1, 2, 3])
    with pytest.raises(errors.InvalidTypeError):
        tf.TensorArray("not a dtype", size=2)
    with pytest.raises(errors.InvalidTypeError):
        tf.TensorArray(tf.float32, size="3")
    with pytest.raises(errors.InvalidArgumentError):
        tf.TensorArray(tf.float32, size=-1)
    with pytest.raises(errors.InvalidTypeError):
        tf.TensorArray(tf.float32, size=2).read(1.5)
    with pytest.raises(errors.InvalidArgumentError, match="integer scalar"):
        tf.TensorArray(tf.float32, size=2).read(tf.constant([0, 1]))
    with pytest.raises(errors.InvalidArgumentError, match="lengths"):
        tf.TensorArray(tf.float32, size=2).split([1.0, 2.0], [1, 2])


def test_stack_without_element_shape_is_a_clear_error():
    with pytest.raises(errors.InvalidArgumentError, match="element_shape"):
        tf.TensorArray(tf.float32, size=2).stack()


# --- gradients ------------------------------------------------------------------------------

def test_gradients_through_unstack_and_read():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as g:
        g.watch(x)
        t = tf.TensorArray(tf.float32, size=3).unstack(x)
        y = t.read(0) * 2.0 + t.read(2) * 3.0
    _close(g.gradient(y, x), [2.0, 0.0, 3.0])


def test_gradients_through_write_and_stack():
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as g:
        g.watch(x)
        t = tf.TensorArray(tf.float32, size=3)
        for i in range(3):
            t = t.write(i, x[i] * x[i])
        y = tf.reduce_sum(t.stack())
    _close(g.gradient(y, x), [2.0, 4.0, 6.0])


# --- inside tf.function ---------------------------------------------------------------------

def test_python_loop_in_a_traced_function_unrolls():
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3)
        for i in range(3):
            ta = ta.write(i, x * float(i))
        return ta.stack()
    _close(f(tf.constant(2.0)), [0.0, 2.0, 4.0])
    _close(f(tf.constant(3.0)), [0.0, 3.0, 6.0])


def test_while_loop_carries_a_tensor_array_when_traced():
    @tf.function
    def squares(n):
        ta = tf.TensorArray(tf.int32, size=5)

        def body(i, ta):
            return i + 1, ta.write(i, i * i)
        _, ta = tf.while_loop(lambda i, ta: i < n, body, [0, ta])
        return ta.stack(), ta.size()
    s, n = squares(tf.constant(4))
    _close(s, [0, 1, 4, 9, 0])
    assert int(n) == 5
    _close(squares(tf.constant(2))[0], [0, 1, 0, 0, 0])
    assert squares.experimental_get_tracing_count() == 1


def test_while_loop_with_a_tensor_array_eagerly():
    def body(i, ta):
        return i + 1, ta.write(i, tf.cast(i, tf.float32) * 2.0)
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    _, ta = tf.while_loop(lambda i, ta: i < 4, body, (tf.constant(0), ta))
    _close(ta.stack(), [0.0, 2.0, 4.0, 6.0])


def _rnn(inputs, state):
    # [batch, time, features] -> [time, batch, features]; the element shape of the
    # TensorArray is learnt from what the body writes
    xs = tf.transpose(inputs, [1, 0, 2])
    steps = xs.shape[0]
    states = tf.TensorArray(tf.float32, size=steps)

    def body(i, state, states):
        state = tf.gather(xs, i) + state
        return i + 1, state, states.write(i, state)
    _, state, states = tf.while_loop(lambda i, s, t: i < steps, body,
                                     (tf.constant(0), state, states))
    return tf.transpose(states.stack(), [1, 0, 2])


def test_rnn_with_while_loop_and_tensor_array_traced_and_eager():
    x = tf.random.uniform([2, 3, 4], seed=1)
    h0 = tf.zeros([2, 4])
    want = np.cumsum(x.numpy(), axis=1)
    _close(_rnn(x, h0), want)
    f = tf.function(_rnn)
    _close(f(x, h0), want)
    x2 = x * 2.0
    _close(f(x2, h0), np.cumsum(x2.numpy(), axis=1))


@pytest.mark.parametrize("traced", [False, True])
def test_gradient_through_a_loop_with_a_tensor_array(traced):
    x = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 10.0)
    fn = tf.function(_rnn) if traced else _rnn
    weights = tf.constant([0.0, 1.0, 2.0])[None, :, None]
    for _ in range(2):
        with tf.GradientTape() as g:
            g.watch(x)
            y = tf.reduce_sum(fn(x, tf.zeros([2, 4])) * weights)
        # d/dx[t] of sum_s w_s * cumsum(x)_s = sum_{s >= t} w_s
        _close(g.gradient(y, x), np.broadcast_to(np.array([3.0, 3.0, 2.0])[None, :, None],
                                                  (2, 3, 4)))


def test_nested_loop_variables():
    def body(state):
        i, (ta, acc) = state["i"], state["rest"]
        return {"i": i + 1, "rest": (ta.write(i, acc), acc * 2.0)}
    init = {"i": tf.constant(0), "rest": (tf.TensorArray(tf.float32, size=3), tf.constant(1.0))}

    def run():
        out = tf.while_loop(lambda s: s["i"] < 3, body, init)
        return out["rest"][0].stack(), out["rest"][1]

    @tf.function
    def traced():
        return run()
    for got in (run(), traced()):
        _close(got[0], [1.0, 2.0, 4.0])
        _close(got[1], 8.0)


def test_growing_inside_a_traced_loop_is_a_clear_error():
    @tf.function
    def f(n):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[])
        _, ta = tf.while_loop(lambda i, t: i < n, lambda i, t: (i + 1, t.write(i, 1.0)),
                              [0, ta])
        return ta.stack()
    with pytest.raises(errors.OutOfRangeError, match="size= "):
        f(tf.constant(3))


def test_body_returning_a_tensor_for_a_tensor_array_is_a_clear_error():
    ta = tf.TensorArray(tf.float32, size=2, element_shape=[])

    @tf.function
    def f(n):
        return tf.while_loop(lambda i, t: i < n, lambda i, t: (i + 1, 1.0), [0, ta])
    with pytest.raises(errors.InvalidArgumentError, match="TensorArray"):
        f(tf.constant(1))


def test_a_tensor_array_read_with_a_traced_index_inside_a_loop():
    @tf.function
    def f(x):
        src = tf.TensorArray(tf.float32, size=3, clear_after_read=False).unstack(x)
        out = tf.TensorArray(tf.float32, size=3)

        def body(i, out):
            return i + 1, out.write(i, src.read(i) * 10.0)
        return tf.while_loop(lambda i, o: i < 3, body, [0, out])[1].stack()
    _close(f(tf.constant([1.0, 2.0, 3.0])), [10.0, 20.0, 30.0])
    _close(f(tf.constant([4.0, 5.0, 6.0])), [40.0, 50.0, 60.0])


def test_a_tensor_array_through_a_traced_cond_inside_a_loop():
    @tf.function
    def evens_doubled(n):
        ta = tf.TensorArray(tf.int32, size=6, element_shape=[])

        def body(i, ta):
            ta = tf.cond(i % 2 == 0, lambda: ta.write(i, i * 2), lambda: ta)
            return i + 1, ta
        return tf.while_loop(lambda i, t: i < n, body, [0, ta])[1].stack()
    _close(evens_doubled(tf.constant(6)), [0, 0, 4, 0, 8, 0])
    _close(evens_doubled(tf.constant(3)), [0, 0, 4, 0, 0, 0])

    @tf.function
    def pick(flag):
        a = tf.TensorArray(tf.float32, size=2).unstack([1.0, 2.0])
        b = tf.TensorArray(tf.float32, size=2).unstack([3.0, 4.0])
        return tf.cond(flag, lambda: a, lambda: b).stack()
    _close(pick(tf.constant(True)), [1.0, 2.0])
    _close(pick(tf.constant(False)), [3.0, 4.0])


def test_gradient_tape_inside_the_traced_function():
    @tf.function
    def grad_of_squares(x):
        with tf.GradientTape() as t:
            t.watch(x)
            ta = tf.TensorArray(tf.float32, size=3)

            def body(i, ta):
                return i + 1, ta.write(i, tf.gather(x, i) ** 2)
            ta = tf.while_loop(lambda i, t: i < 3, body, [0, ta])[1]
            y = tf.reduce_sum(ta.stack())
        return t.gradient(y, x)
    _close(grad_of_squares(tf.constant([1.0, 2.0, 3.0])), [2.0, 4.0, 6.0])
    _close(grad_of_squares(tf.constant([4.0, 5.0, 6.0])), [8.0, 10.0, 12.0])


def test_a_size_from_the_arguments_shapes_specialises_a_relaxed_trace_per_shape():
    """``size=tf.shape(x)[0]`` is read on the host while tracing: with ``input_signature``
    (None dimensions) the trace holds for the traced shape only, so another shape is
    traced again instead of replaying a graph with the old size baked in."""
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(x):
        ta = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        for i in tf.range(tf.shape(x)[0]):
            ta = ta.write(i, x[i] * 2.0)
        return ta.stack()

    for n in (3, 5, 1, 3):
        x = tf.range(float(n))
        np.testing.assert_array_equal(double(x).numpy(), 2.0 * np.arange(n, dtype=np.float32))


def test_a_size_from_the_arguments_data_is_a_tracing_error_not_a_baked_value():
    @tf.function
    def f(x):
        return tf.TensorArray(tf.float32, size=tf.cast(tf.reduce_sum(x), tf.int32)).size()

    with pytest.raises(tf.errors.TapeflowError, match=r"TensorArray\(size=...\)"):
        f(tf.constant([1.0, 2.0]))
