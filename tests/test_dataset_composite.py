"""tf.data with RaggedTensor and SparseTensor elements, element_spec and the dataset reprs,
and the transformations issue 47 added (ragged_batch, padded_batch, window, reduce,
interleave)."""

import numpy as np
import pytest

import tapeflow as tf


def _rows(ds):
    return [x.to_list() if isinstance(x, tf.RaggedTensor) else x.numpy().tolist() for x in ds]


def test_slices_of_a_ragged_tensor_batch_and_unbatch():
    rt = tf.ragged.constant([[1, 2], [3], [4, 5, 6]])
    ds = tf.data.Dataset.from_tensor_slices(rt)
    assert repr(ds) == ("<_TensorSliceDataset element_spec=RaggedTensorSpec("
                        "TensorShape([None]), tf.int32, 0, tf.int64)>")
    rows = list(ds)
    assert all(isinstance(r, tf.Tensor) for r in rows) and _rows(rows) == [[1, 2], [3], [4, 5, 6]]
    batched = ds.batch(2)
    assert repr(batched.element_spec) == "RaggedTensorSpec(TensorShape([None, None]), " \
                                         "tf.int32, 1, tf.int64)"
    b = list(batched)
    assert isinstance(b[0], tf.RaggedTensor) and _rows(b) == [[[1, 2], [3]], [[4, 5, 6]]]
    assert _rows(batched.unbatch()) == [[1, 2], [3], [4, 5, 6]]
    assert repr(tf.data.Dataset.from_tensors(rt).element_spec) == \
        "RaggedTensorSpec(TensorShape([3, None]), tf.int32, 1, tf.int64)"


def test_ragged_rank_two_and_dict_elements():
    rt = tf.ragged.constant([[[1], [2, 3]], [[4]], []])
    ds = tf.data.Dataset.from_tensor_slices(rt)
    assert _rows(ds) == [[[1], [2, 3]], [[4]], []]
    assert _rows(ds.batch(2)) == [[[[1], [2, 3]], [[4]]], [[]]]
    assert ds.batch(2).element_spec.ragged_rank == 2
    d = tf.data.Dataset.from_tensor_slices({"w": tf.ragged.constant([["a"], ["b", "c"]]),
                                            "n": [1, 2]})
    el = list(d.batch(2))[0]
    assert el["w"].to_list() == [[b"a"], [b"b", b"c"]] and el["n"].numpy().tolist() == [1, 2]


def test_ragged_batch_and_dense_to_ragged_batch():
    ds = tf.data.Dataset.from_tensor_slices([1, 5, 3]).map(tf.range)
    out = list(ds.apply(tf.data.experimental.dense_to_ragged_batch(2)))
    assert [r.to_list() for r in out] == [[[0], [0, 1, 2, 3, 4]], [[0, 1, 2]]]
    fixed = tf.data.Dataset.from_tensor_slices([[1, 2], [3, 4], [5, 6]]).ragged_batch(2)
    assert repr(fixed.element_spec) == "TensorSpec(shape=(None, 2), dtype=tf.int32, name=None)"
    grid = tf.data.Dataset.range(3).map(lambda x: tf.fill([x, 2], x)).ragged_batch(2)
    assert repr(grid.element_spec) == ("RaggedTensorSpec(TensorShape([None, None, 2]), "
                                       "tf.int64, 1, tf.int64)")
    assert [r.to_list() for r in grid] == [[[], [[1, 1]]], [[[2, 2], [2, 2]]]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="ragged_batch or padded_batch"):
        list(tf.data.Dataset.range(3).map(lambda x: tf.fill([x], x)).batch(2))


def test_map_returning_ragged():
    ds = tf.data.Dataset.from_tensor_slices({"n": tf.ragged.constant([[2], [1, 3]])})
    out = ds.map(lambda f: {"r": tf.ragged.range(f["n"]), "m": tf.reduce_sum(f["n"])})
    els = list(out)
    assert els[1]["r"].to_list() == [[0], [0, 1, 2]] and int(els[1]["m"]) == 4
    assert isinstance(out.element_spec["r"], tf.RaggedTensorSpec)


def test_sparse_elements():
    st = tf.SparseTensor([[0, 0], [1, 2], [3, 1]], [1.0, 2.0, 3.0], [4, 3])
    ds = tf.data.Dataset.from_tensor_slices(st)
    assert repr(ds.element_spec) == "SparseTensorSpec(TensorShape([3]), tf.float32)"
    rows = list(ds)
    assert [tf.sparse.to_dense(r).numpy().tolist() for r in rows] == \
        np.array([[1, 0, 0], [0, 0, 2], [0, 0, 0], [0, 3, 0]], np.float32).tolist()
    b = list(ds.batch(3))
    assert b[0].dense_shape.numpy().tolist() == [3, 3]
    assert b[0].indices.numpy().tolist() == [[0, 0], [1, 2]]
    assert b[1].indices.numpy().tolist() == [[0, 1]]
    assert [r.values.numpy().tolist() for r in ds.batch(3).unbatch()] == [[1.0], [2.0], [], [3.0]]
    doubled = [r.values.numpy().tolist() for r in ds.map(lambda x: x * 2.0)]
    assert doubled == [[2.0], [4.0], [], [6.0]]
    one = tf.data.Dataset.from_tensors(st)
    assert repr(one.element_spec) == "SparseTensorSpec(TensorShape([4, 3]), tf.float32)"
    assert one.element_spec.value_type is tf.SparseTensor


def test_element_spec_and_repr_of_dense_datasets():
    ds = tf.data.Dataset.from_tensor_slices(([1.0, 2.0], [[1, 2], [3, 4]]))
    assert repr(ds) == ("<_TensorSliceDataset element_spec=(TensorSpec(shape=(), "
                        "dtype=tf.float32, name=None), TensorSpec(shape=(2,), dtype=tf.int32, "
                        "name=None))>")
    z = tf.data.Dataset.zip((tf.data.Dataset.range(3), ds))
    assert repr(z).startswith("<_ZipDataset element_spec=(TensorSpec(shape=(), dtype=tf.int64")
    assert z.batch(2, drop_remainder=True).element_spec[0].shape == (2,)
    assert repr(z.batch(2)).startswith("<_BatchDataset element_spec=(TensorSpec(shape=(None,)")
    g = tf.data.Dataset.from_generator(lambda: iter([[1.0]]), output_types=tf.float32,
                                       output_shapes=(None,))
    assert repr(g) == ("<_FlatMapDataset element_spec=TensorSpec(shape=(None,), "
                       "dtype=tf.float32, name=None)>")
    assert tf.data.Dataset.range(2).shuffle(2).repeat().element_spec == \
        tf.TensorSpec((), tf.int64)


def test_padded_batch():
    ds = tf.data.Dataset.range(4).map(lambda x: tf.fill([x], x))
    assert [b.numpy().tolist() for b in ds.padded_batch(2)] == [[[0], [1]], [[2, 2, 0], [3, 3, 3]]]
    padded = ds.padded_batch(2, padded_shapes=[4], padding_values=tf.constant(-1, tf.int64))
    assert padded.element_spec.shape == (None, 4)
    assert list(padded)[1].numpy().tolist() == [[2, 2, -1, -1], [3, 3, 3, -1]]
    words = tf.data.Dataset.from_tensor_slices(["a", "b"]).map(lambda s: tf.stack([s] * 1))
    assert list(words.padded_batch(2, padded_shapes=[2]))[0].numpy().tolist() == [
        [b"a", b""], [b"b", b""]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="smaller"):
        list(ds.padded_batch(2, padded_shapes=[2]))


def test_window_reduce_interleave():
    w = tf.data.Dataset.range(7).window(3, shift=2)
    assert [[int(v) for v in sub] for sub in w] == [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
    assert repr(next(iter(w))) == ("<_VariantDataset element_spec=TensorSpec(shape=(), "
                                   "dtype=tf.int64, name=None)>")
    flat = w.flat_map(lambda sub: sub.batch(3, drop_remainder=True))
    assert [b.numpy().tolist() for b in flat] == [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    strided = tf.data.Dataset.range(10).window(2, shift=4, stride=3, drop_remainder=True)
    assert [[int(v) for v in sub] for sub in strided] == [[0, 3], [4, 7]]
    total = tf.data.Dataset.from_tensor_slices([8, 3, 0]).reduce(0, lambda s, v: s + v)
    assert int(total) == 11 and total.dtype == tf.int32
    counts = tf.data.Dataset.from_tensor_slices(([1, 0, 1], [1.0, 2.0, 3.0])).reduce(
        {"n": 0}, lambda s, el: {"n": s["n"] + el[0]})
    assert int(counts["n"]) == 2
    il = tf.data.Dataset.range(3).interleave(lambda x: tf.data.Dataset.range(x).map(
        lambda _: x), cycle_length=2)
    assert [int(v) for v in il] == [1, 2, 2]


def test_bad_arguments_of_the_new_transformations():
    ds = tf.data.Dataset.range(3)
    for call in (lambda: ds.padded_batch(None), lambda: ds.ragged_batch("2"),
                 lambda: ds.window(1.5), lambda: ds.batch([2]),
                 lambda: ds.reduce(0, "not a function"), lambda: ds.interleave(3)):
        with pytest.raises(tf.errors.InvalidTypeError):
            call()
    with pytest.raises(tf.errors.InvalidArgumentError, match="window"):
        ds.window(2, shift=0)
    with pytest.raises(tf.errors.InvalidTypeError, match="file_pattern"):
        tf.data.Dataset.list_files(3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="empty"):
        tf.data.Dataset.range(0).map(lambda x: x).element_spec
