"""Composite tensors through tf.function (issue 47): a SparseTensor or RaggedTensor
argument traces per its TypeSpec (by its dense components), input_signature takes
tf.SparseTensorSpec / tf.RaggedTensorSpec, composites come back from a traced
function, and get_concrete_function takes them."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidTypeError


@pytest.fixture(autouse=True)
def _on_cpu():
    with tf.device("cpu:0"):
        yield


def _sp(values, rows=(0, 2)):
    return tf.SparseTensor([[r, 1] for r in rows], values, [3, 4])


def test_sparse_argument_traces_per_spec_not_per_entry_count():
    calls = []

    @tf.function
    def f(x, w):
        calls.append(1)
        return tf.sparse.sparse_dense_matmul(x, w)

    w = tf.ones([4, 2], tf.int32)
    assert f(_sp([1, 2]), w).numpy().tolist() == [[1, 1], [0, 0], [2, 2]]
    out = f(tf.SparseTensor([[0, 0], [1, 1], [2, 3]], [1, 2, 3], [3, 4]), w)
    assert out.numpy().tolist() == [[1, 1], [2, 2], [3, 3]]
    assert f.experimental_get_tracing_count() == 1
    f(_sp([1.0, 2.0]), tf.ones([4, 2]))                 # another dtype: another trace
    assert f.experimental_get_tracing_count() == 2


def test_sparse_result_and_input_signature():
    @tf.function(input_signature=[tf.SparseTensorSpec([3, 4], tf.int32)])
    def double(x):
        return x * 2

    r = double(_sp([5, 6]))
    assert isinstance(r, tf.SparseTensor) and r.values.numpy().tolist() == [10, 12]
    r = double(tf.SparseTensor([[1, 1]], [7], [3, 4]))
    assert r.values.numpy().tolist() == [14] and double.experimental_get_tracing_count() == 1
    with pytest.raises(InvalidTypeError):
        double(_sp([1.0, 2.0]))
    with pytest.raises(InvalidTypeError):
        double(tf.ones([3, 4], tf.int32))


def test_concrete_function_of_a_sparse_value():
    @tf.function
    def neg(x):
        return tf.negative(x)

    cf = neg.get_concrete_function(_sp([1, 2]))
    r = cf(tf.SparseTensor([[0, 0], [1, 1], [2, 2]], [1, 2, 3], [3, 4]))
    assert isinstance(r, tf.SparseTensor) and r.values.numpy().tolist() == [-1, -2, -3]


def test_ragged_argument_and_result():
    if not hasattr(tf, "ragged") or not hasattr(tf.ragged, "constant"):
        pytest.skip("tf.ragged is not there yet")

    @tf.function
    def inc(x):
        return x + 1

    rt = tf.ragged.constant([[1, 2], [3], [4, 5, 6]])
    assert inc(rt).to_list() == [[2, 3], [4], [5, 6, 7]]
    assert inc(tf.ragged.constant([[1], [2, 3, 4], []])).to_list() == [[2], [3, 4, 5], []]
    assert inc.experimental_get_tracing_count() == 1         # new row lengths: no retrace
    inc(tf.ragged.constant([[1.0], [2.0]]))
    assert inc.experimental_get_tracing_count() == 2         # another spec
    cf = inc.get_concrete_function(rt)
    assert cf(tf.ragged.constant([[9], [], [1, 2]])).to_list() == [[10], [], [2, 3]]

    @tf.function(input_signature=[tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)])
    def rows(x):
        return x * 2

    assert rows(rt).to_list() == [[2, 4], [6], [8, 10, 12]]
    assert rows(tf.ragged.constant([[1], [2, 3]])).to_list() == [[2], [4, 6]]
    assert rows.experimental_get_tracing_count() == 1


def test_ragged_operands_with_other_partitions_raise_inside_a_function():
    f = tf.function(lambda x, y: x + y)
    a = tf.ragged.constant([[1, 2], [3]])
    assert f(a, tf.ragged.constant([[10, 20], [30]])).to_list() == [[11, 22], [33]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        f(a, tf.ragged.constant([[10], [20, 30]]))       # same trace, other row lengths


def test_row_splits_are_validated_at_every_call():
    g = tf.function(lambda v, s: tf.RaggedTensor.from_row_splits(v, s))
    ok = g(tf.constant([1, 2, 3]), tf.constant([0, 1, 3], tf.int64))
    assert ok.to_list() == [[1], [2, 3]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        g(tf.constant([1, 2, 3]), tf.constant([0, 1, 2], tf.int64))


def test_ragged_signature_refuses_another_ragged_rank():
    spec = tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)
    r2 = tf.ragged.constant([[[1, 2], [3]], [[4]]])
    assert not spec.is_compatible_with(r2)
    assert spec.is_compatible_with(tf.ragged.constant([[1], [2, 3]]))
    assert not spec.is_compatible_with(tf.RaggedTensorSpec([None, None], tf.int32,
                                                           row_splits_dtype=tf.int32))
    f = tf.function(lambda x: tf.reduce_sum(x, axis=1), input_signature=[spec])
    with pytest.raises(InvalidTypeError):
        f(r2)
