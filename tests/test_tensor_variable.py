"""Tensor conversions/printing and Variable semantics."""

import numpy as np
import pytest

import tapeflow as tf


def test_printing_matches_the_seeds():
    assert str(tf.constant([[4.0]])) == "tf.Tensor([[4.]], shape=(1, 1), dtype=float32)"
    assert str(tf.constant(6.0)) == "tf.Tensor(6.0, shape=(), dtype=float32)"
    assert str(tf.constant([[1, 2], [3, 4]])) == (
        "tf.Tensor(\n[[1 2]\n [3 4]], shape=(2, 2), dtype=int32)")
    assert str(tf.constant(True)) == "tf.Tensor(True, shape=(), dtype=bool)"
    r = repr(tf.constant([1.0, 2.0]))
    assert r.startswith("<tf.Tensor: shape=(2,), dtype=float32, device=cpu:0, numpy=array(")
    v = tf.Variable([3.0, 4.0, 5.0, 6.0])
    assert repr(v) == ("<tf.Variable 'Variable:0' shape=(4,) dtype=float32, "
                       "numpy=array([3., 4., 5., 6.], dtype=float32)>")
    assert repr(tf.Variable(2.0)) == "<tf.Variable 'Variable:0' shape=() dtype=float32, numpy=2.0>"


def test_numpy_interop():
    a = tf.constant([[1, 2], [3, 4]])
    n = a.numpy()
    assert type(n) is np.ndarray and n.tolist() == [[1, 2], [3, 4]]
    n[0, 0] = 100                      # a copy: the tensor is untouched
    assert a.numpy()[0, 0] == 1
    c = np.multiply(a, a)
    assert isinstance(c, np.ndarray) and c.tolist() == [[1, 4], [9, 16]]
    arr = np.asarray(a)
    with pytest.raises(ValueError):
        arr[0, 0] = 5                  # NumPy cannot write into an immutable Tensor
    src = np.ones(3, np.float32)
    t = tf.constant(src)
    src[0] = 7
    assert t.numpy()[0] == 1.0         # constant() copies


def test_dlpack():
    t = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    back = np.from_dlpack(t)
    assert back.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_scalar_conversions():
    t = tf.constant(3)
    assert int(t) == 3 and float(t) == 3.0 and bool(t) is True
    assert [10, 20, 30, 40][t] == 40
    assert f"{tf.constant(2.5):.2f}" == "2.50"
    with pytest.raises(tf.errors.InvalidArgumentError, match="exactly one element"):
        bool(tf.constant([1, 2]))
    with pytest.raises(TypeError):
        [1, 2][tf.constant(1.0)]


def test_shape_api():
    t = tf.zeros([1, 1, 784])
    assert t.shape == (1, 1, 784) and t.shape == [1, 1, 784]
    assert t.shape.as_list() == [1, 1, 784] and t.ndim == 3
    assert str(t.shape) == "(1, 1, 784)"
    assert t.shape[1:] == (1, 784) and t.shape.num_elements() == 784
    assert len(tf.constant([1, 2, 3])) == 3
    with pytest.raises(TypeError):
        len(tf.constant(1))


def test_variable_assign_and_errors_leave_value():
    v = tf.Variable([1.0, 2.0], name="w")
    assert v.name == "w:0" and v.trainable
    v.assign([3.0, 4.0])
    assert v.numpy().tolist() == [3.0, 4.0]
    v.assign_add([1.0, 1.0])
    v.assign_sub([0.5, 0.5])
    assert v.numpy().tolist() == [3.5, 4.5]
    with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
        v.assign([1.0, 2.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32"):
        v.assign(tf.constant([1, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError):
        v.assign_add("nope")
    assert v.numpy().tolist() == [3.5, 4.5]


def test_variable_in_ops_and_reads():
    v = tf.Variable(2.0)
    assert float(v * 3.0) == 6.0 and float(3.0 * v) == 6.0 and float(v + v) == 4.0
    assert float(v.read_value()) == 2.0
    assert float(tf.convert_to_tensor(v)) == 2.0
    with pytest.raises(ValueError):
        tf.Variable(None)
    lazy = tf.Variable(lambda: tf.constant([1.0]))
    assert lazy.shape == (1,)


def test_assign_add_is_not_recorded():
    v = tf.Variable(1.0)
    with tf.GradientTape() as t:
        _ = v * 2.0
        v.assign_add(1.0)
    assert len(t._records) == 1


@pytest.mark.parametrize("key", [slice(-7, None, -2), slice(None, None, -1), slice(3, 0, -1),
                                 slice(2, 2), slice(5, None, -1), slice(-1, -5, -2),
                                 slice(10, 20), slice(-10, 1)])
def test_slices_match_numpy_including_empty_reversed_ones(key):
    # an empty slice with a negative step once became slice(-1, None, -2): the last
    # element instead of nothing
    x = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(tf.constant(x)[key].numpy(), x[key])
    np.testing.assert_array_equal(tf.constant(x)[:, key].numpy(), x[:, key])
