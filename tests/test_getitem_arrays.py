"""``x[i, j]`` with several integer arrays (and ints) picks points, as in NumPy and the
array API standard: the arrays broadcast together, and the broadcast dimensions go
where the first array was, or first when the advanced indices are separated."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf

XN = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
A = np.array([[0, 1], [2, 0]])
B = np.array([1, 3])
C = np.array([4, 0])

KEYS = {
    "two arrays": (A, B),
    "int then arrays": (0, A, B[:1]),
    "three arrays": (A, B, C),
    "slice then arrays": (slice(None), B, C),
    "separated by a slice": (A[0], slice(None), C),
    "array int array": (A, 1, B),
    "separated by a new axis": (A, None, B),
    "ellipsis then arrays": (Ellipsis, B, C),
    "the same array twice": (A, A),
    "array then int": (A, 2),
    "array slice array": (A, slice(1, 3), B),
    "negative indices": (np.array([-1, 0]), np.array([-4, 3])),
    "lists": ([0, 2], [1, 1]),
}


@pytest.mark.parametrize("key", list(KEYS.values()), ids=list(KEYS))
def test_several_integer_arrays_index_like_numpy(tf_device, key):
    x = tf.constant(XN)
    got = x[key].numpy()
    want = XN[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_integer_tensors_as_indices(tf_device):
    x = tf.constant(XN)
    got = x[tf.constant([0, 2]), tf.constant([1, 1], tf.int64)]
    np.testing.assert_array_equal(got.numpy(), XN[[0, 2], [1, 1]])


def test_the_gradient_scatters_into_the_picked_points():
    v = tf.Variable(XN)
    with tf.GradientTape() as t:
        y = tf.reduce_sum(v[A, B] * 2.0)
    want = np.zeros_like(XN)
    np.add.at(want, (A, B), 2.0)
    np.testing.assert_allclose(t.gradient(y, v).numpy(), want)


def test_arrays_that_do_not_broadcast_are_a_clear_error():
    x = tf.constant(XN)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"cannot be broadcast together: "
                       r"shapes \[\[2\], \[3\]\]"):
        x[np.array([0, 1]), np.array([0, 1, 2])]


def test_an_index_out_of_range_names_its_dimension():
    x = tf.constant(XN)
    with pytest.raises(tf.errors.InvalidArgumentError, match="index 4 of dimension 1"):
        x[np.array([0, 1]), np.array([0, 4])]


def test_a_traced_scalar_tensor_index_is_a_gather_not_a_host_read():
    """``x[i]`` with ``i`` an argument of a tf.function: TensorFlow's loops over
    ``tf.range`` index this way; the trace serves every ``i`` (no retrace per value)."""
    traces = []

    @tf.function
    def f(x, i):
        traces.append(1)
        return x[i] * 2, x[1:, i], x[i, 1:]

    x = tf.reshape(tf.range(12.0), [3, 4])
    for i in range(3):
        got = f(x, tf.constant(i))
        want = (x[i] * 2, x[1:, i], x[i, 1:])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert len(traces) == 1
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(f(x, tf.constant(2))[0])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(),
                                  np.array([[0.0] * 4, [0.0] * 4, [2.0] * 4], np.float32))
