"""tf.losses (TensorFlow 1 functions and Keras classes) against NumPy, and tfe.metrics
(the seeds' Mean, Accuracy, SparseCategoricalAccuracy...) with result/reset_states."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf

tfe = tf

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((6, 4)).astype(np.float32)
LABELS = np.array([0, 3, 1, 2, 3, 0], np.int64)
ONEHOT = np.eye(4, dtype=np.float32)[LABELS]
W = np.array([1.0, 0.0, 2.0, 1.0, 0.0, 0.5], np.float32)


def _xent(logits, onehot):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -(onehot * logp).sum(-1)


def _close(t, want, rtol=1e-5):
    assert isinstance(t, tf.Tensor)
    np.testing.assert_allclose(t.numpy(), want, rtol=rtol, atol=1e-6)


# --- tf.losses -----------------------------------------------------------------------

def test_sparse_softmax_cross_entropy_mean_and_weights():
    per = _xent(LOGITS, ONEHOT)
    loss = tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS)
    assert loss.shape == () and loss.dtype == tf.float32
    _close(loss, per.mean())
    # default reduction: weighted sum / number of non-zero weights
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS, weights=W),
           (per * W).sum() / 4)
    R = tf.losses.Reduction
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS, weights=W, reduction=R.SUM),
           (per * W).sum())
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS, weights=W, reduction=R.MEAN),
           (per * W).sum() / W.sum())
    _close(tf.losses.sparse_softmax_cross_entropy(
        LABELS, LOGITS, weights=W, reduction=R.SUM_OVER_BATCH_SIZE), (per * W).sum() / 6)
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS, weights=W, reduction=R.NONE),
           per * W)
    # labels of shape [N, 1] are squeezed, as TF1 does
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS[:, None], LOGITS), per.mean())
    # all-zero weights: 0, not nan
    _close(tf.losses.sparse_softmax_cross_entropy(LABELS, LOGITS, weights=np.zeros(6)), 0.0)


def test_sparse_softmax_cross_entropy_gradient():
    logits = tf.Variable(LOGITS)
    with tf.GradientTape() as tape:
        loss = tf.losses.sparse_softmax_cross_entropy(tf.constant(LABELS), logits)
    g = tape.gradient(loss, logits).numpy()
    e = np.exp(LOGITS - LOGITS.max(-1, keepdims=True))
    np.testing.assert_allclose(g, (e / e.sum(-1, keepdims=True) - ONEHOT) / 6, rtol=1e-5,
                               atol=1e-6)


def test_softmax_cross_entropy_with_label_smoothing():
    _close(tf.losses.softmax_cross_entropy(ONEHOT, LOGITS), _xent(LOGITS, ONEHOT).mean())
    smooth = ONEHOT * 0.8 + 0.2 / 4
    _close(tf.losses.softmax_cross_entropy(ONEHOT, LOGITS, label_smoothing=0.2),
           _xent(LOGITS, smooth).mean())
    _close(tf.losses.softmax_cross_entropy(ONEHOT, LOGITS, weights=W),
           (_xent(LOGITS, ONEHOT) * W).sum() / 4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        tf.losses.softmax_cross_entropy(ONEHOT[:, :3], LOGITS)


def test_mean_squared_error_and_huber():
    labels = RNG.standard_normal((5, 2)).astype(np.float32)
    preds = labels + RNG.standard_normal((5, 2)).astype(np.float32) * 2
    _close(tf.losses.mean_squared_error(labels, preds), ((preds - labels) ** 2).mean())
    _close(tf.losses.mean_squared_error(labels, preds, weights=2.0),
           2 * ((preds - labels) ** 2).mean())
    for delta in (1.0, 0.5):
        e = np.abs(preds - labels)
        q = np.minimum(e, delta)
        want = (0.5 * q * q + delta * (e - q)).mean()
        _close(tf.losses.huber_loss(labels, preds, delta=delta), want)
    # the seed's Huber regression shape: both regimes
    _close(tf.losses.huber_loss([0., 0.], [0.5, 3.0]), (0.125 + 2.5) / 2)
    _close(tf.losses.absolute_difference(labels, preds), np.abs(preds - labels).mean())
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        tf.losses.mean_squared_error(labels[:, 0], preds)     # [5] vs [5, 2]: no broadcasting


def test_huber_loss_gradient_is_clipped():
    p = tf.Variable([0.5, 3.0, -4.0])
    with tf.GradientTape() as tape:
        loss = tf.losses.huber_loss([0., 0., 0.], p, reduction=tf.losses.Reduction.SUM)
    np.testing.assert_allclose(tape.gradient(loss, p).numpy(), [0.5, 1.0, -1.0])


def test_sigmoid_and_log_loss():
    z = (RNG.random((4, 3)) > 0.5).astype(np.float32)
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    want = np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))
    _close(tf.losses.sigmoid_cross_entropy(z, x), want.mean())
    p = 1 / (1 + np.exp(-x))
    _close(tf.losses.log_loss(z, p),
           (-z * np.log(p + 1e-7) - (1 - z) * np.log(1 - p + 1e-7)).mean(), rtol=1e-4)


def test_float64_losses_keep_their_dtype():
    loss = tf.losses.mean_squared_error(np.ones(3), np.zeros(3))
    assert loss.dtype == tf.float64 and float(loss) == 1.0


def test_keras_loss_classes():
    per = _xent(LOGITS, ONEHOT)
    _close(tf.losses.SparseCategoricalCrossentropy(from_logits=True)(LABELS, LOGITS), per.mean())
    probs = np.exp(LOGITS) / np.exp(LOGITS).sum(-1, keepdims=True)
    _close(tf.losses.SparseCategoricalCrossentropy()(LABELS.astype(np.float32)[:, None], probs),
           per.mean(), rtol=1e-4)
    _close(tf.losses.CategoricalCrossentropy(from_logits=True)(ONEHOT, LOGITS), per.mean())
    _close(tf.losses.CategoricalCrossentropy()(ONEHOT, probs), per.mean(), rtol=1e-4)
    _close(tf.losses.SparseCategoricalCrossentropy(from_logits=True)(
        LABELS, LOGITS, sample_weight=W), (per * W).sum() / 6)
    _close(tf.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")(
        LABELS, LOGITS), per)
    y = RNG.standard_normal((3, 2)).astype(np.float32)
    p = RNG.standard_normal((3, 2)).astype(np.float32)
    _close(tf.losses.MeanSquaredError()(y, p), ((p - y) ** 2).mean())
    _close(tf.losses.mse(y, p), ((p - y) ** 2).mean(-1))
    _close(tf.losses.MeanAbsoluteError()(y, p), np.abs(p - y).mean())
    e = np.abs(p - y)
    _close(tf.losses.Huber()(y, p), (0.5 * np.minimum(e, 1) ** 2 + (e - np.minimum(e, 1))).mean())
    zb = (RNG.random((3, 2)) > 0.5).astype(np.float32)
    _close(tf.losses.BinaryCrossentropy(from_logits=True)(zb, p),
           (np.maximum(p, 0) - p * zb + np.log1p(np.exp(-np.abs(p)))).mean())
    assert isinstance(tf.losses.get("sparse_categorical_crossentropy"),
                      tf.losses.SparseCategoricalCrossentropy)
    assert isinstance(tf.losses.get("mse"), tf.losses.MeanSquaredError)
    with pytest.raises(ValueError, match="Unknown loss"):
        tf.losses.get("nope")


# --- tfe.metrics ---------------------------------------------------------------------

def test_seed_001_metrics_mean():
    m = tfe.metrics.Mean("loss")
    m(0)
    m(5)
    assert m.result().numpy() == 2.5  # => 2.5
    m([8, 9])
    r = m.result()  # => 5.5
    assert r.numpy() == 5.5 and r.dtype == tf.float64 and r.shape == ()
    assert m.name == "loss"
    assert repr(r).startswith("<tf.Tensor: shape=(), dtype=float64")


def test_seed_002_metrics_mean_named():
    # Metrics are objects, which can be created and destroyed.
    my_mean = tfe.metrics.Mean(name='my_mean')
    # While a metric is active, you can call it as a function to accumulate into its
    # internal state.
    my_mean(0.0)
    my_mean(10.0)
    assert 5.0 == my_mean.result().numpy()


def test_mean_weights_reset_and_state():
    m = tf.metrics.Mean()
    assert float(m.result()) == 0.0                     # nothing yet: 0, not nan
    out = m([1.0, 2.0, 3.0], weights=[1.0, 0.0, 3.0])
    assert float(m.result()) == pytest.approx((1 + 9) / 4)
    assert isinstance(out, tuple)
    assert [v.name for v in m.variables] == ["mean/total:0", "mean/count:0"]
    assert all(not v.trainable for v in m.variables)
    m.reset_states()
    assert float(m.result()) == 0.0
    m(4)
    assert float(m.result()) == 4.0
    m.update_state([2.0], sample_weight=[3.0])
    assert float(m.result()) == pytest.approx((4 + 6) / 4)


def test_metric_updates_are_not_recorded_by_tapes():
    x = tf.Variable(2.0)
    m = tf.metrics.Mean()
    with tf.GradientTape() as tape:
        y = x * x
        m(y)
        n = len(tape._records)
        m(y)
        assert len(tape._records) == n
    assert float(tape.gradient(y, x)) == 4.0 and float(m.result()) == 4.0


def test_accuracy_metrics():
    acc = tfe.metrics.Accuracy()
    acc([1, 2, 3, 4], [1, 2, 0, 4])
    assert float(acc.result()) == 0.75 and acc.result().dtype == tf.float64
    acc([0], [1])
    assert float(acc.result()) == 0.6
    acc.reset_states()
    assert float(acc.result()) == 0.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        acc([1, 2], [1, 2, 3])

    sparse = tf.metrics.SparseCategoricalAccuracy()
    preds = np.eye(4, dtype=np.float32)[[0, 3, 2, 2, 3, 1]]
    sparse(tf.constant(LABELS), tf.constant(preds))
    assert float(sparse.result()) == pytest.approx(np.mean(LABELS == [0, 3, 2, 2, 3, 1]))
    sparse.update_state(LABELS.astype(np.float32)[:, None], preds)   # Keras-style labels
    assert float(sparse.result()) == pytest.approx(np.mean(LABELS == [0, 3, 2, 2, 3, 1]))
    assert tf.metrics.SparseAccuracy is tf.metrics.SparseCategoricalAccuracy

    cat = tf.metrics.CategoricalAccuracy()
    cat(ONEHOT, preds)
    assert float(cat.result()) == pytest.approx(np.mean(LABELS == [0, 3, 2, 2, 3, 1]))
    binary = tf.metrics.BinaryAccuracy()
    binary([1.0, 0.0, 1.0], [0.9, 0.6, 0.2])
    assert float(binary.result()) == pytest.approx(1 / 3)


def test_metric_state_is_checkpointed(tmp_path):
    m = tf.metrics.Mean("loss")
    m([1.0, 3.0])
    path = tf.train.Checkpoint(metric=m).save(str(tmp_path / "m"))
    m2 = tf.metrics.Mean("loss")
    tf.train.Checkpoint(metric=m2).restore(path)
    m2(5.0)                                # state made on first update, then restored
    assert float(m2.result()) == pytest.approx(3.0)


def test_metrics_get():
    assert isinstance(tf.metrics.get("accuracy", loss="sparse_categorical_crossentropy"),
                      tf.metrics.SparseCategoricalAccuracy)
    assert isinstance(tf.metrics.get("acc", loss="categorical_crossentropy"),
                      tf.metrics.CategoricalAccuracy)
    assert type(tf.metrics.get("accuracy")) is tf.metrics.Accuracy
    assert tf.metrics.get("accuracy").name == "accuracy"
    with pytest.raises(ValueError, match="Unknown metric"):
        tf.metrics.get("nope")
