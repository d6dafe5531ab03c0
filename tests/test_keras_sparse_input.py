"""Keras functional models with SparseTensor (and RaggedTensor) inputs:
``tf.keras.Input(sparse=True)``, ``Dense`` on a SparseTensor (a sparse-dense product plus
the bias), fit/predict with sparse batches from arrays and from tf.data."""

import numpy as np
import pytest

import tapeflow as tf


def _sparse():
    return tf.sparse.SparseTensor(indices=[(0, 0), (0, 1), (0, 2), (4, 3), (5, 0), (5, 1)],
                                  values=[1, 1, 1, 1, 1, 1], dense_shape=(6, 4))


def _model(units=3):
    tf.keras.backend.clear_session()
    x = tf.keras.Input(shape=(4,), sparse=True)
    y = tf.keras.layers.Dense(units)(x)
    return x, y, tf.keras.Model(x, y)


def test_sparse_input_dense_matches_dense_math():
    x, y, model = _model()
    assert x.sparse and not x.ragged and x.shape == (None, 4)
    assert "sparse=True" in repr(x)
    assert not y.sparse and y.shape == (None, 3)
    st = _sparse()
    out = model(st)                                 # int values cast to the Input's float32
    layer = model.layers[1]
    want = tf.sparse.to_dense(st).numpy().astype(np.float32) @ layer.kernel.numpy() \
        + layer.bias.numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(model.predict(st, batch_size=4).numpy(), want,
                               rtol=1e-6, atol=1e-6)
    assert model.layers[0].get_config()["sparse"] is True


def test_fit_with_sparse_arrays_and_dataset():
    _, _, model = _model(1)
    model.compile(optimizer="sgd", loss="mse")
    st = tf.cast(_sparse(), tf.float32)
    labels = tf.ones([6, 1])
    before = model.layers[1].kernel.numpy().copy()
    model.fit(st, labels, batch_size=4, epochs=1, verbose=0)      # shuffled sparse rows
    assert not np.allclose(before, model.layers[1].kernel.numpy())
    ds = tf.data.Dataset.from_tensor_slices((st, labels)).batch(4)
    hist = model.fit(ds, epochs=2, verbose=0)
    assert len(hist.history["loss"]) == 2
    assert model.predict(ds.map(lambda a, b: a)).shape == (6, 1)


def test_sparse_input_errors():
    _, _, model = _model()
    with pytest.raises(tf.errors.InvalidTypeError, match="SparseTensor"):
        model(tf.ones([2, 4]))
    bad = tf.sparse.SparseTensor([[0, 0]], [1.0], [2, 5])
    with pytest.raises(tf.errors.InvalidArgumentError, match="incompatible"):
        model(bad)
    with pytest.raises(tf.errors.InvalidArgumentError, match="both sparse and ragged"):
        tf.keras.Input(shape=(4,), sparse=True, ragged=True)
    x = tf.keras.Input(shape=(2,))
    m = tf.keras.Model(x, tf.keras.layers.Dense(1)(x))
    with pytest.raises(tf.errors.InvalidTypeError, match="dense tensor"):
        m(tf.sparse.SparseTensor([[0, 0]], [1.0], [1, 2]))


def test_ragged_input_through_a_lambda():
    tf.keras.backend.clear_session()
    x = tf.keras.Input(shape=[None], dtype=tf.int32, ragged=True)
    assert x.ragged and x.shape == (None, None)
    y = tf.keras.layers.Lambda(lambda r: tf.reduce_sum(r, axis=1))(x)
    model = tf.keras.Model(x, y)
    out = model(tf.ragged.constant([[1, 2], [3], [4, 5, 6]]))
    assert out.numpy().tolist() == [3, 3, 15]
