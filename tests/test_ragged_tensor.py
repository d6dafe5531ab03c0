"""tf.RaggedTensor itself (core/tapeflow/ops/ragged.py): construction and validation,
shape and printing, indexing, elementwise ops and broadcasting, dense conversions,
RaggedTensorSpec, gradients through the flat values, and the errors. The values are
TensorFlow 2.21's for the same calls."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError
from tapeflow.ops.ragged import constant as rc

R = tf.RaggedTensor


def test_constant_infers_dtype_rank_and_prints_as_tensorflow():
    rt = rc([[3, 1, 4, 1], [], [5, 9, 2], [6], []])
    assert str(rt) == repr(rt) == "<tf.RaggedTensor [[3, 1, 4, 1], [], [5, 9, 2], [6], []]>"
    assert rt.shape == (5, None) and repr(rt.shape) == "TensorShape([5, None])"
    assert str(rt.shape) == "(5, None)" and rt.dtype == tf.int32 and rt.ragged_rank == 1
    assert rt.row_splits.dtype == tf.int64 and rt.row_splits.numpy().tolist() == [0, 4, 4, 7, 8, 8]
    words = rc([["So", "long"], ["thanks"]])
    assert words.dtype == tf.string and str(words) == "<tf.RaggedTensor [[b'So', b'long'], [b'thanks']]>"
    assert rc([[1.5, 2], [3]]).to_list() == [[1.5, 2.0], [3.0]]
    assert rc([[], []]).dtype == tf.float32 and str(rc([[], []])) == "<tf.RaggedTensor [[], []]>"
    assert rc([[1, 2], [3]], row_splits_dtype=tf.int32).row_splits.dtype == tf.int32
    assert rc([[1, 2], [3]], dtype=tf.float64).to_list() == [[1.0, 2.0], [3.0]]
    deep = rc([[[1, 2], [3]], [[4, 5]]])
    assert deep.ragged_rank == 2 and deep.shape == (2, None, None)
    uniform = rc([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)
    assert uniform.shape == (2, None, 2)
    assert str(uniform) == "<tf.RaggedTensor [[[1, 2],\n  [3, 4]], [[5, 6]]]>"
    assert rc([[[1, 2]], []], inner_shape=(2,)).shape == (2, None, 2)
    dense = rc([[1, 2], [3, 4]], ragged_rank=0)
    assert isinstance(dense, tf.Tensor) and dense.shape == (2, 2)


@pytest.mark.parametrize("pylist, kw, message", [
    ([["one", "two"], [3, 4]], {}, "Can't convert Python sequence with mixed types to Tensor."),
    (["A", ["B", "C"]], {}, "all scalar values must have the same nesting depth"),
    ([[1, 2], [3]], {"ragged_rank": 2}, "requires scalar value depth greater than 2"),
    ([[[1, 2], [3]], [[5, 6]]], {"ragged_rank": 1}, "inner values have inconsistent shape"),
])
def test_constant_errors(pylist, kw, message):
    with pytest.raises(InvalidArgumentError) as e:
        rc(pylist, **kw)
    assert message in str(e.value)
    if not kw:                                   # (printed exactly as TensorFlow)
        assert str(e.value) == message


def test_numpy_and_to_list():
    rt = rc([[1, 2], [3, 4, 5], [], [7]])
    out = rt.numpy()
    assert out.dtype == object and [r.tolist() for r in out] == [[1, 2], [3, 4, 5], [], [7]]
    assert out[0].dtype == np.int32
    assert rc([[1], [2]]).numpy().tolist() == [[1], [2]]          # uniform rows: one array
    assert rt.to_list() == [[1, 2], [3, 4, 5], [], [7]]
    assert rc([["a"], []]).to_list() == [[b"a"], []]


def test_factories_agree():
    values = [3, 1, 4, 1, 5, 9, 2]
    want = [[3, 1, 4, 1], [], [5, 9], [2]]
    assert R.from_row_splits(values, [0, 4, 4, 6, 7]).to_list() == want
    assert R.from_row_lengths(values, [4, 0, 2, 1]).to_list() == want
    assert R.from_value_rowids(values, [0, 0, 0, 0, 2, 2, 3]).to_list() == want
    assert R.from_value_rowids(values, [0, 0, 0, 0, 2, 2, 3], nrows=6).to_list() == want + [[], []]
    assert R.from_row_starts(values, [0, 4, 4, 6]).to_list() == want
    assert R.from_row_limits(values, [4, 4, 6, 7]).to_list() == want
    nested = R.from_nested_row_splits(list(range(10, 20)), ([0, 1, 1, 5], [0, 3, 3, 5, 9, 10]))
    assert nested.to_list() == [[[10, 11, 12]], [], [[], [13, 14], [15, 16, 17, 18], [19]]]
    assert nested.shape == (3, None, None) and len(nested.nested_row_splits) == 2
    assert R.from_nested_row_lengths([1, 2, 3], [[1], [3]]).to_list() == [[[1, 2, 3]]]
    u = R.from_uniform_row_length(R.from_row_splits(list(range(10, 20)), [0, 3, 5, 9, 10]), 2)
    assert u.shape == (2, 2, None) and u.ragged_rank == 2
    assert str(u) == ("<tf.RaggedTensor [[[10, 11, 12], [13, 14]],\n"
                      " [[15, 16, 17, 18], [19]]]>")
    rt32 = R.from_row_splits([1, 2, 3], tf.constant([0, 3], tf.int32))
    assert rt32.row_splits.dtype == tf.int32
    assert R.from_row_splits(rt32, [0, 1]).row_splits.dtype == tf.int32


@pytest.mark.parametrize("call, message", [
    (lambda: R.from_row_splits([1, 2, 3], [1, 2, 3]), "valid RaggedTensor:zero"),
    (lambda: R.from_row_splits([1, 2, 3], [0, 2, 1, 3]), "valid RaggedTensor:monotonic"),
    (lambda: R.from_row_splits([1, 2, 3], [0, 2, 4]), "Condition x == y did not hold."),
    (lambda: R.from_row_lengths([1, 2, 3], [1, -1, 3]), "Condition x >= 0 did not hold"),
    (lambda: R.from_value_rowids([1, 2, 3], [0, 2, 1]), "valid RowPartition"),
    (lambda: R.from_value_rowids([1, 2, 3], [0, 1, 1], nrows=1), "Expected nrows >= "),
    (lambda: R.from_row_starts([1, 2, 3], [1, 2]), "valid RaggedTensor"),
    (lambda: R.from_row_splits([1, 2, 3], []), "may not be empty"),
    (lambda: R.from_row_splits([1, 2, 3], [[0, 3]]), "must have rank 1"),
    (lambda: R.from_row_splits([1, 2, 3], [0.0, 3.0]), "int32 or int64"),
    (lambda: R.from_row_splits(5, [0, 1]), "rank >= 1"),
    (lambda: R([1], [0, 1]), "constructor is private"),
])
def test_validation_errors(call, message):
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")):
        call()


def test_validate_false_skips_the_checks():
    assert R.from_row_splits([1, 2, 3], [0, 1, 3], validate=False).to_list() == [[1], [2, 3]]


def test_indexing():
    q = rc([["Who", "is", "Dan"], ["What", "is", "the", "weather"], ["Bye"]])
    assert q[1].numpy().tolist() == [b"What", b"is", b"the", b"weather"]
    assert q[1, 2].numpy() == b"the" and q[-1].numpy().tolist() == [b"Bye"]
    assert q[1:].to_list() == [[b"What", b"is", b"the", b"weather"], [b"Bye"]]
    assert q[:, :2].to_list() == [[b"Who", b"is"], [b"What", b"is"], [b"Bye"]]
    assert q[:, -2:].to_list() == [[b"is", b"Dan"], [b"the", b"weather"], [b"Bye"]]
    assert q[::2, ::-1].to_list() == [[b"Dan", b"is", b"Who"], [b"Bye"]]
    assert q[tf.constant(2)].numpy().tolist() == [b"Bye"] and q[np.int64(0)].shape == (3,)
    rt = rc([[[1, 2, 3], [4]], [[5], [], [6]], [[7]], [[8, 9], [10]]])
    assert rt[1].to_list() == [[5], [], [6]] and rt[3, 0].numpy().tolist() == [8, 9]
    assert rt[:, 1:3].to_list() == [[[4]], [[], [6]], [], [[10]]]
    assert rt[1, 2, 0].numpy() == 6
    u = rc([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)
    assert u[..., 0].to_list() == [[1, 3], [5]] and u[:, :, 1].to_list() == [[2, 4], [6]]
    assert rc([[1, 2], [3]])[tf.newaxis].shape == (1, 2, None)
    assert rc([[1, 2], [3]])[0:0].to_list() == []


@pytest.mark.parametrize("key, error, message", [
    ((slice(None), 0), InvalidArgumentError, "Cannot index into an inner ragged dimension."),
    ((Ellipsis, -1), InvalidArgumentError, "Cannot index into an inner ragged dimension."),
    (5, IndexError, "Row key 5 out of bounds"),
    (-3, InvalidArgumentError, "out of bounds"),
    ("a", InvalidTypeError, "are valid indices"),
    (1.0, InvalidTypeError, "are valid indices"),
])
def test_indexing_errors(key, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(")):
        rc([[1, 2], [3]])[key]


def test_elementwise_ops_and_operators():
    x = rc([[1, 2], [3]])
    y = rc([[1, 1], [2]])
    assert (x + y).to_list() == [[2, 3], [5]] and tf.add(x, 3).to_list() == [[4, 5], [6]]
    assert (3 - x).to_list() == [[2, 1], [0]] and (x * x).to_list() == [[1, 4], [9]]
    assert (x / 2).to_list() == [[0.5, 1.0], [1.5]] and (x // 2).to_list() == [[0, 1], [1]]
    assert (x % 2).to_list() == [[1, 0], [1]] and (x ** 2).to_list() == [[1, 4], [9]]
    assert (-x).to_list() == [[-1, -2], [-3]] and abs(-x).to_list() == [[1, 2], [3]]
    assert (x < 2).to_list() == [[True, False], [False]]
    assert (x == y).to_list() == [[True, False], [False]] and (x != 1).to_list() == [[False, True], [True]]
    assert (x == None) is False  # noqa: E711 - (as TensorFlow)
    b = x > 1
    assert (~b).to_list() == [[True, False], [False]] and (b & True).to_list() == b.to_list()
    assert (b | ~b).to_list() == [[True, True], [True]] and (b ^ b).to_list() == [[False, False], [False]]
    assert tf.cast(x, tf.float32).dtype == tf.float32
    assert np.allclose(tf.math.sqrt(tf.cast(x, tf.float32)).flat_values.numpy(), np.sqrt([1, 2, 3]))
    assert (tf.constant(10) + x).to_list() == [[11, 12], [13]]


def test_broadcasting_a_dense_operand():
    x = rc([[10, 87, 12], [19, 53], [12, 32]])
    assert (x + [[1000], [2000], [3000]]).to_list() == [[1010, 1087, 1012], [2019, 2053], [3012, 3032]]
    assert ([[1000], [2000], [3000]] + x).to_list()[1] == [2019, 2053]
    assert (x + [1]).to_list()[0] == [11, 88, 13]
    u = rc([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)
    assert (u + tf.constant([[10]])).to_list() == [[[11, 12], [13, 14]], [[15, 16]]]
    assert (u + [100, 200]).to_list() == [[[101, 202], [103, 204]], [[105, 206]]]
    deep = rc([[[[1], [2]], [], [[3]]], [[[5]]]], ragged_rank=2)
    assert (deep + tf.constant([10, 20])).to_list()[0][0] == [[11, 21], [12, 22]]


def test_mismatched_partitions_raise_as_tensorflow():
    with pytest.raises(InvalidArgumentError) as e:
        rc([[1, 2, 3], [4], [5, 6]]) + rc([[10, 20], [30, 40], [50]])
    assert str(e.value) == ("Condition x == y did not hold.\nIndices of first 2 different "
                            "values:\n[[1]\n [3]]\nCorresponding x values:\n[3 6]\n"
                            "Corresponding y values:\n[2 5]\nFirst 3 elements of x:\n"
                            "[0 3 4]\nFirst 3 elements of y:\n[0 2 4]")
    with pytest.raises(InvalidArgumentError) as e:
        rc([[1, 2], [3, 4, 5, 6], [7]]) + tf.constant([[1, 2, 3, 4]] * 3)
    assert "Corresponding x values:\n[ 4  8 12]\nCorresponding y values:\n[2 6 7]" in str(e.value)
    with pytest.raises(InvalidArgumentError, match="Condition x == y"):
        rc([[1, 2], [3]]) + rc([[1], [2], [3]])


def test_dense_conversions():
    x = rc([[1, 2], [3], []])
    assert x.to_tensor().numpy().tolist() == [[1, 2], [3, 0], [0, 0]]
    assert x.to_tensor(9).numpy().tolist() == [[1, 2], [3, 9], [9, 9]]
    assert x.to_tensor(shape=[2, 1]).numpy().tolist() == [[1], [3]]
    assert x.to_tensor(shape=[None, 3]).numpy().tolist() == [[1, 2, 0], [3, 0, 0], [0, 0, 0]]
    s = rc([["Hi"], ["Welcome", "to"]]).to_tensor(default_value="", shape=[None, 3])
    assert s.numpy().tolist() == [[b"Hi", b"", b""], [b"Welcome", b"to", b""]]
    u = rc([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)
    assert u.to_tensor(default_value=[8, 9]).numpy().tolist() == [[[1, 2], [3, 4]], [[5, 6], [8, 9]]]
    assert rc([[[1, 2], [3]], [[4]]]).to_tensor().shape == (2, 2, 2)
    assert R.from_tensor([[1, 3, -1], [2, -1, -1]], padding=-1).to_list() == [[1, 3], [2]]
    assert R.from_tensor([[1, 2, 0], [3, 0, 0]], lengths=[1, 3]).to_list() == [[1], [3, 0, 0]]
    assert R.from_tensor([["a", ""], ["", ""]], padding="").to_list() == [[b"a"], []]
    assert R.from_tensor([[1, 2]]).shape == (1, 2)
    assert R.from_tensor(tf.zeros([2, 2, 2]), ragged_rank=2, padding=0.0).to_list() == [[[], []], [[], []]]
    with pytest.raises(InvalidArgumentError, match="ragged_rank"):
        R.from_tensor([1, 2])


def test_row_partition_views():
    x = rc([[1, 2], [3], []])
    y = rc([[[1, 2], [3]], [[4]]])
    assert x.row_lengths().numpy().tolist() == [2, 1, 0] and x.nrows().numpy() == 3
    assert x.value_rowids().numpy().tolist() == [0, 0, 1]
    assert x.row_starts().numpy().tolist() == [0, 2, 3] and x.row_limits().numpy().tolist() == [2, 3, 3]
    assert y.row_lengths(axis=2).to_list() == [[2, 1], [1]]
    assert [t.numpy().tolist() for t in y.nested_row_lengths()] == [[2, 1], [2, 1, 1]]
    assert x.bounding_shape().numpy().tolist() == [3, 2] and y.bounding_shape(axis=1).numpy() == 2
    assert x.bounding_shape().dtype == tf.int64
    assert y.merge_dims(0, 1).to_list() == [[1, 2], [3], [4]]
    assert y.merge_dims(1, 2).to_list() == [[1, 2, 3], [4]]
    assert y.merge_dims(0, -1).numpy().tolist() == [1, 2, 3, 4]
    u = rc([[[1, 2], [3, 4]], [[5, 6]]], ragged_rank=1)
    assert u.merge_dims(1, 2).to_list() == [[1, 2, 3, 4], [5, 6]]
    assert x.with_values(tf.constant([1.0, 2.0, 3.0])).dtype == tf.float32
    assert y.with_flat_values(tf.constant([1.0, 2.0, 3.0, 4.0])).to_list() == [[[1, 2], [3]], [[4]]]
    assert x.with_row_splits_dtype(tf.int32).row_splits.dtype == tf.int32
    with pytest.raises(InvalidArgumentError):
        x.with_values([1, 2])


def test_sparse_round_trip():
    s = rc([["Hi"], ["Welcome", "to"], ["fun"]]).to_sparse()
    assert s.indices.numpy().tolist() == [[0, 0], [1, 0], [1, 1], [2, 0]]
    assert s.dense_shape.numpy().tolist() == [3, 2]
    st = tf.SparseTensor(indices=[[0, 0], [2, 0], [2, 1]], values=["a", "b", "c"], dense_shape=[3, 3])
    assert R.from_sparse(st).to_list() == [[b"a"], [], [b"b", b"c"]]


def test_type_spec():
    spec = tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)
    assert repr(spec) == "RaggedTensorSpec(TensorShape([None, None]), tf.int32, 1, tf.int64)"
    x = rc([[1, 2], [3]])
    assert repr(x._type_spec) == "RaggedTensorSpec(TensorShape([2, None]), tf.int32, 1, tf.int64)"
    assert spec.is_compatible_with(x) and not tf.RaggedTensorSpec([None, None], tf.int64).is_compatible_with(x)
    assert spec == tf.RaggedTensorSpec([None, None], tf.int32) and hash(spec) == hash(
        tf.RaggedTensorSpec([None, None], tf.int32))
    assert tf.RaggedTensorSpec([2, None, 3], tf.float32).ragged_rank == 2
    assert tf.RaggedTensorSpec(None, tf.float32, 2).shape is None
    y = rc([[[1, 2], [3]], [[4]]])
    parts = y._type_spec.to_components(y)
    assert len(parts) == 3 and y._type_spec.from_components(parts).to_list() == y.to_list()
    assert y._type_spec.component_specs() == (((None,), tf.int32), ((3,), tf.int64),
                                              ((None,), tf.int64))
    with pytest.raises(InvalidArgumentError, match="ragged_rank or a shape"):
        tf.RaggedTensorSpec()


def test_gradient_through_the_flat_values():
    v = tf.Variable([1.0, 2.0, 3.0])
    with tf.GradientTape() as g:
        rt = R.from_row_splits(v * 2, [0, 2, 3])
        loss = (tf.reduce_sum((rt * rt).flat_values) + tf.reduce_sum(rt[0])
                + tf.reduce_sum(rt.to_tensor()) + tf.reduce_sum(rt[:, :1].flat_values))
    assert g.gradient(loss, v).numpy().tolist() == [14.0, 20.0, 28.0]


def test_refusals():
    x = rc([[1, 2], [3]])
    with pytest.raises(TypeError, match="may not be used as a boolean"):
        bool(x)
    with pytest.raises(InvalidTypeError, match="to_tensor"):
        np.asarray(x)
    with pytest.raises(InvalidArgumentError, match="to_tensor"):
        tf.constant(x)
    with pytest.raises(InvalidTypeError, match="to_tensor"):
        tf.matmul(x, x)
    with pytest.raises(TypeError):
        hash(x)
    with pytest.raises(TypeError):
        len(x)
    assert [r.numpy().tolist() for r in x] == [[1, 2], [3]]


def test_other_device():
    if not any(d.type == "opencl" for d in tf.list_devices()):
        pytest.skip("no OpenCL device")
    with tf.device("opencl:0"):
        x = rc([[1.0, 2.0], [3.0]])
        y = x * 2 + x
        assert y.flat_values.device == "opencl:0" and y.to_list() == [[3.0, 6.0], [9.0]]
        assert x[:, 1:].to_list() == [[2.0], []] and x.to_tensor().numpy().tolist() == [[1, 2], [3, 0]]


@pytest.mark.parametrize("call", [
    lambda: rc([[1]], inner_shape="x"),
    lambda: R.from_row_splits([1, 2], [0, [2]]),
    lambda: R.from_uniform_row_length([1, 2], None),
    lambda: R.from_tensor([[1, 0]], lengths=["x"]),
    lambda: R.from_tensor([[1, 0]], padding=[1, 2, 3]),
    lambda: rc([[1, 2], [3]]).to_tensor(shape=1.5),
    lambda: rc([[1, 2], [3]]).merge_dims(None, 1),
    lambda: rc([[1, 2], [3]]).bounding_shape(axis="x"),
    lambda: rc([[1, 2], [3]]) + [1, [2]],
    lambda: tf.RaggedTensorSpec([[1]], tf.int32),
])
def test_bad_arguments_raise_tapeflow_errors(call):
    with pytest.raises(tf.errors.TapeflowError):
        call()


def test_uniform_row_length_must_cover_the_values():
    with pytest.raises(InvalidArgumentError, match="must equal nvals=3"):
        tf.RaggedTensor.from_uniform_row_length(tf.constant([1, 2, 3]), 0, nrows=2)
    with pytest.raises(InvalidArgumentError, match="must equal nvals=3"):
        tf.experimental.RowPartition.from_uniform_row_length(0, 3, nrows=2)
    ok = tf.RaggedTensor.from_uniform_row_length(tf.constant([], tf.int32), 0, nrows=2)
    assert ok.to_list() == [[], []]


@pytest.mark.parametrize("make", ["from_row_lengths", "from_row_starts", "from_row_limits"])
def test_row_partition_dtype_must_match_the_values(make):
    values = rc([[1, 2], [3], [4, 5]])                    # int64 splits
    arg = {"from_row_lengths": [2, 1], "from_row_starts": [0, 2],
           "from_row_limits": [2, 3]}[make]
    with pytest.raises(InvalidArgumentError, match="dtype mismatch"):
        getattr(tf.RaggedTensor, make)(values, tf.constant(arg, tf.int32))
    rt = getattr(tf.RaggedTensor, make)(values, tf.constant(arg, tf.int64))
    assert rt.to_list() == [[[1, 2], [3]], [[4, 5]]]


def test_ragged_rank_of_a_spec_is_capped():
    with pytest.raises(InvalidArgumentError, match="at most 64"):
        tf.RaggedTensorSpec(None, tf.float32, ragged_rank=10 ** 7)
    assert tf.RaggedTensorSpec(None, tf.float32, ragged_rank=3).ragged_rank == 3


def test_strings_ops_refuse_a_sparse_tensor_with_a_tapeflow_error():
    st = tf.sparse.SparseTensor([[0, 0]], ["ab"], [1, 2])
    with pytest.raises(InvalidTypeError, match="with_values"):
        tf.strings.upper(st)
    assert tf.strings.upper(rc([["a"], []])).to_list() == [[b"A"], []]
