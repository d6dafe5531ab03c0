"""dtypes and NumPy-2 promotion with weak Python scalars."""

import numpy as np
import pytest

import tapeflow as tf


def test_python_scalars_take_seed_defaults():
    assert tf.constant(3.0).dtype == tf.float32
    assert tf.constant(3).dtype == tf.int32
    assert tf.constant(True).dtype == tf.bool
    assert tf.constant(2**40).dtype == tf.int64
    assert tf.constant([1.5, 2]).dtype == tf.float32


def test_numpy_values_keep_their_dtype():
    assert tf.constant(np.array([1.0])).dtype == tf.float64
    assert tf.constant(np.int64(3)).dtype == tf.int64
    assert tf.constant(np.float16(1)).dtype == tf.float16


def test_weak_scalars_do_not_promote():
    x = tf.constant([1.0, 2.0], dtype=tf.float16)
    assert (x * 2.0).dtype == tf.float16
    assert (2 * x).dtype == tf.float16
    i = tf.constant([1, 2], dtype=tf.int8)
    assert (i + 1).dtype == tf.int8


def test_strong_promotion_follows_numpy():
    a = tf.constant(np.ones(2, np.float32))
    b = tf.constant(np.ones(2, np.float64))
    assert (a + b).dtype == tf.float64
    i = tf.constant([1, 2])
    assert (i / 2).dtype == tf.float64          # truediv of ints
    assert (i + 2.5).dtype == tf.float64        # NEP 50: int tensor with a weak float


def test_dtype_objects():
    assert tf.as_dtype("float32") is tf.float32
    assert tf.as_dtype(np.float64) is tf.float64
    assert tf.float32 == "float32" and tf.float32 == np.float32
    assert tf.float32 != tf.float64
    assert tf.float32.is_floating and tf.int32.is_integer and tf.bool.is_bool
    assert repr(tf.int64) == "tf.int64"
    assert tf.as_dtype("complex64") is tf.complex64 and tf.complex64.is_complex
    assert tf.complex128.real_dtype is tf.float64 and not tf.complex64.is_floating
    with pytest.raises(TypeError, match="supported"):
        tf.as_dtype("bfloat16")


def test_unsupported_values_are_clear():
    with pytest.raises(tf.errors.InvalidArgumentError, match="Cannot convert"):
        tf.constant(["a", "b"])
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.constant([[1, 2], [3]])


def test_cast():
    x = tf.cast([1.7, -1.7], tf.int32)
    assert x.dtype == tf.int32 and x.numpy().tolist() == [1, -1]
    y = tf.constant([1.0])
    assert tf.cast(y, tf.float32) is y
