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
        tf.as_dtype("float8")


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


# --- bfloat16 (ml_dtypes storage) ---------------------------------------------------------

import ml_dtypes  # noqa: E402


@pytest.mark.parametrize("a, b, want", [
    ("bfloat16", "float16", "float32"),      # JAX / TF-numpy: neither holds the other
    ("bfloat16", "float32", "float32"),
    ("bfloat16", "float64", "float64"),
    ("bfloat16", "bfloat16", "bfloat16"),
    ("bfloat16", "int32", "bfloat16"),
    ("bfloat16", "uint8", "bfloat16"),
    ("bfloat16", "bool", "bfloat16"),
    ("bfloat16", "complex64", "complex64"),
])
def test_bfloat16_promotion_table(a, b, want):
    A, B = tf.as_dtype(a), tf.as_dtype(b)
    assert tf.dtypes.result_type(A, B) is tf.as_dtype(want)
    assert tf.dtypes.result_type(B, A) is tf.as_dtype(want)
    x = tf.ones([2], A) + tf.ones([2], B)
    assert x.dtype is tf.as_dtype(want)


def test_bfloat16_with_weak_python_scalars_stays_bfloat16():
    x = tf.constant([1.0, 2.0], dtype=tf.bfloat16)
    assert (x * 2.5).dtype is tf.bfloat16
    assert (x + 1).dtype is tf.bfloat16
    assert tf.dtypes.result_type(tf.bfloat16, 1.5) is tf.bfloat16
    assert tf.dtypes.result_type(tf.bfloat16, 1j) is tf.complex64


def test_bfloat16_dtype_properties():
    d = tf.bfloat16
    assert d.name == "bfloat16" and repr(d) == "tf.bfloat16"
    assert d.is_floating and d.is_inexact and not d.is_integer and d.size == 2
    assert d in tf.dtypes.FLOAT_DTYPES and d in tf.dtypes.ALL_DTYPES
    assert tf.as_dtype("bfloat16") is d and tf.as_dtype(ml_dtypes.bfloat16) is d
    assert d == "bfloat16" and d == np.dtype(ml_dtypes.bfloat16) and d != tf.float16
    assert float(d.max) == pytest.approx(3.3895e38, rel=1e-3)
    assert float(d.min) == -float(d.max)
    import pickle
    assert pickle.loads(pickle.dumps(d)) is d


def test_bfloat16_constant_numpy_and_rounding():
    x = tf.constant([1.0, 3.14159, 1 / 3], dtype=tf.bfloat16)
    a = x.numpy()
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)       # an ml_dtypes array, as in TF/JAX
    # 8 significant bits: round to nearest even
    np.testing.assert_array_equal(a.astype(np.float32), [1.0, 3.140625, 0.333984375])
    assert tf.constant(np.ones(3, ml_dtypes.bfloat16)).dtype is tf.bfloat16
    assert "dtype=bfloat16" in repr(x) and "3.14" in str(x)


def test_bfloat16_cast_round_trip_and_arithmetic():
    f = tf.constant([0.1, -2.5, 1e30, 65504.0 * 4], tf.float32)
    b = tf.cast(f, tf.bfloat16)
    assert b.dtype is tf.bfloat16
    back = tf.cast(b, tf.float32).numpy()
    np.testing.assert_allclose(back, f.numpy(), rtol=2 ** -8)
    assert np.isfinite(back).all()                 # float32's range: no overflow at 2.6e5
    assert not np.isfinite(tf.cast(f, tf.float16).numpy()[2])
    # accumulation in float32: a sum of 1000 ones is 1000 (bfloat16 steps are 4 there)
    assert float(tf.reduce_sum(tf.ones([1000], tf.bfloat16))) == 1000.0
    m = tf.matmul(tf.ones([2, 3], tf.bfloat16), tf.ones([3, 4], tf.bfloat16))
    assert m.dtype is tf.bfloat16 and float(m[0, 0]) == 3.0


def test_bfloat16_gradients_flow():
    x = tf.constant([1.0, 2.0, 3.0], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.exp(x) * x)
    g = tape.gradient(y, x)
    assert g.dtype is tf.bfloat16
    want = np.exp([1.0, 2.0, 3.0]) * (1 + np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(g.numpy().astype(np.float32), want, rtol=3e-2)


def test_bfloat16_bad_input_errors():
    with pytest.raises(TypeError, match="bfloat16"):      # the message lists it
        tf.as_dtype("bfloat61")
    with pytest.raises(tf.errors.NotFoundError, match=r"BitwiseAnd.*bfloat16"):
        tf.math.bitwise_and(tf.ones([2], tf.bfloat16), tf.ones([2], tf.bfloat16))
