"""``tf.map_fn``, ``tf.scan``, ``tf.foldl``, ``tf.foldr`` (issue 47): nested elements and
results, output signatures (dtypes, ``TensorSpec``, ``RaggedTensorSpec``), eager and
inside ``tf.function``, gradients against finite differences, bad input."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.ops.ragged import RaggedTensor, RaggedTensorSpec
from tapeflow.testing.gradcheck import check_grads

M = np.array([[1.0, 2.0, 0.5], [3.0, -1.0, 2.0]])


def test_map_fn_applies_fn_to_each_row_and_stacks():
    out = tf.map_fn(lambda r: r * 2.0 + 1.0, tf.constant(M))
    np.testing.assert_allclose(out.numpy(), M * 2 + 1)
    sums = tf.map_fn(tf.reduce_sum, tf.constant(M))
    np.testing.assert_allclose(sums.numpy(), M.sum(1), rtol=1e-6)


def test_map_fn_nested_elements_and_results():
    x, y = tf.constant(M), tf.constant([10.0, 20.0], tf.float64)
    a, b = tf.map_fn(lambda t: (t[0] * t[1], tf.reduce_max(t[0])), (x, y),
                     fn_output_signature=(tf.float64, tf.float64))
    np.testing.assert_allclose(a.numpy(), M * [[10.0], [20.0]])
    np.testing.assert_allclose(b.numpy(), M.max(1))
    d = tf.map_fn(lambda e: {"s": e["u"] + e["v"]}, {"u": x, "v": x})
    np.testing.assert_allclose(d["s"].numpy(), 2 * M)


def test_map_fn_output_signatures():
    ints = tf.constant([1, 3, 2])
    spec = tf.TensorSpec([2], tf.float32)
    out = tf.map_fn(lambda n: tf.cast(tf.stack([n, n * n]), tf.float32), ints,
                    fn_output_signature=spec)
    assert out.dtype == tf.float32 and out.numpy().tolist() == [[1, 1], [3, 9], [2, 4]]
    with pytest.raises(errors.InvalidArgumentError, match="output signature says int64"):
        tf.map_fn(lambda n: n, ints, fn_output_signature=tf.int64)
    empty = tf.map_fn(lambda r: r, tf.zeros([0, 3]), fn_output_signature=spec)
    assert tuple(empty.shape) == (0, 2) and empty.dtype == tf.float32


def test_map_fn_ragged_results():
    r = tf.map_fn(lambda n: tf.range(n), tf.constant([1, 3, 2]),
                  fn_output_signature=RaggedTensorSpec(shape=[None], dtype=tf.int32))
    assert isinstance(r, RaggedTensor)
    assert r.to_list() == [[0], [0, 1, 2], [0, 1]]
    with pytest.raises(errors.InvalidArgumentError, match="different shapes"):
        tf.map_fn(lambda n: tf.range(n), tf.constant([1, 3]))


def test_scan_and_folds():
    x = tf.constant([1, 2, 3, 4])
    assert tf.scan(lambda a, v: a + v, x).numpy().tolist() == [1, 3, 6, 10]
    assert tf.scan(lambda a, v: a + v, x, reverse=True).numpy().tolist() == [10, 9, 7, 4]
    assert tf.scan(lambda a, v: a * v, x, initializer=2).numpy().tolist() == [2, 4, 12, 48]
    assert int(tf.foldl(lambda a, v: a * 10 + v, x)) == 1234
    assert int(tf.foldr(lambda a, v: a * 10 + v, x)) == 4321
    assert int(tf.foldl(lambda a, v: a - v, x, initializer=100)) == 90
    s, p = tf.scan(lambda a, v: (a[0] + v, a[1] * v), tf.constant([1.0, 2.0, 3.0]),
                   initializer=(tf.constant(0.0), tf.constant(1.0)))
    assert s.numpy().tolist() == [1, 3, 6] and p.numpy().tolist() == [1, 2, 6]
    empty = tf.scan(lambda a, v: a + v, tf.zeros([0]), initializer=0.0)
    assert tuple(empty.shape) == (0,)


def test_inside_tf_function_as_eagerly():
    def body(x):
        return (tf.map_fn(lambda r: tf.reduce_sum(r * r), x),
                tf.scan(lambda a, r: a + r, x),
                tf.foldr(lambda a, r: a * r, x, initializer=tf.ones([3], tf.float64)))
    x = tf.constant(M)
    for got, want in zip(tf.function(body)(x), body(x)):
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_gradients_match_finite_differences():
    def f(x, y):
        m = tf.map_fn(lambda t: tf.reduce_prod(t[0]) * t[1], (x, y))
        s = tf.scan(lambda a, r: a * tf.sin(r), x)
        return tf.reduce_sum(m) + tf.reduce_sum(s) + tf.reduce_sum(
            tf.foldl(lambda a, r: a * r + 1.0, x, initializer=tf.ones([3], tf.float64)))
    check_grads(f, (M, np.array([0.5, -2.0])), order=1)


@pytest.mark.parametrize("call, match", [
    (lambda: tf.map_fn(3, tf.zeros([2])), "must be callable"),
    (lambda: tf.map_fn(lambda v: v, tf.constant(1.0)), "at least 1-D"),
    (lambda: tf.map_fn(lambda v: v, (tf.zeros([2]), tf.zeros([3]))), "same size"),
    (lambda: tf.map_fn(lambda v: v, ()), "empty structure"),
    (lambda: tf.foldl(lambda a, v: a, tf.zeros([0])), "no initializer"),
    (lambda: tf.scan(lambda a, v: (a, a), tf.zeros([2])), "accumulator's structure"),
    (lambda: tf.map_fn(lambda v: v, tf.zeros([2]), fn_output_signature=(tf.float32,) * 2),
     "signature has 2"),
])
def test_bad_input_raises_tapeflow_errors(call, match):
    with pytest.raises(errors.TapeflowError, match=match):
        call()
