"""Programs in the style of the seeds' example programs (TensorFlow 1 eager:
rnn_colorbot, rnn_ptb, gan), written for these tests, run end to end: their models
build, a few training steps lower the loss, and what they save restores (issue 45).
The upstream programs themselves are checked by a held-out run, not kept here."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf


@pytest.fixture(autouse=True)
def _tf1_program():
    tf.enable_eager_execution()        # what these programs call first
    yield
    tf.enable_v2_behavior()


class CharRegressor(tf.keras.Model):
    """Colorbot's shape: stacked BasicLSTMCells stepped by hand over one-hot characters,
    the state after each sequence's last real character, a ReLU regression head."""

    def __init__(self, sizes, outputs, keep_prob):
        super().__init__()
        self.keep_prob = keep_prob
        self.cells = tf.contrib.checkpoint.List([tf.nn.rnn_cell.BasicLSTMCell(n)
                                                 for n in sizes])
        self.head = tf.keras.layers.Dense(outputs, activation=tf.nn.relu)

    def call(self, inputs, training=False):
        chars, lengths = inputs
        seq = tf.transpose(chars, [1, 0, 2])
        batch = int(seq.shape[1])
        for cell in self.cells:
            state = cell.zero_state(batch, tf.float32)
            outs = []
            for x in tf.unstack(seq, axis=0):
                out, state = cell(x, state)
                outs.append(out)
            seq = tf.stack(outs, axis=0)
            if training:
                seq = tf.nn.dropout(seq, self.keep_prob)      # TF 1: keep_prob
        last = tf.stack([lengths - 1, list(range(batch))], axis=1)
        return self.head(tf.gather_nd(seq, last))


def _chars(rng, batch, steps):
    lengths = rng.integers(2, steps + 1, batch)
    codes = rng.integers(0, 32, (batch, steps))
    onehot = np.eye(32, dtype=np.float32)[codes] * (np.arange(steps)[None, :, None]
                                                    < lengths[:, None, None])
    target = np.stack([codes[i, :n].mean() / 32 for i, n in enumerate(lengths)])
    return onehot, lengths.astype(np.int64), np.repeat(target[:, None], 3, 1).astype(np.float32)


def test_a_colorbot_style_model_trains_and_restores(tmp_path):
    rng = np.random.default_rng(0)
    chars, lengths, labels = _chars(rng, 16, 6)
    model = CharRegressor([16, 8], 3, keep_prob=1.0)
    opt = tf.train.AdamOptimizer(0.02)
    losses = []
    for _ in range(25):
        with tf.GradientTape() as tape:
            pred = model((chars, lengths), training=True)
            loss = tf.reduce_mean(tf.squared_difference(pred, labels))
        grads = tape.gradient(loss, model.variables)
        assert all(g is not None for g in grads)
        opt.apply_gradients(zip(grads, model.variables))
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    # the cells' variables are tracked through the List and saved under it
    assert len(model.variables) == 2 * 2 + 2
    prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    other = CharRegressor([16, 8], 3, keep_prob=1.0)
    tf.train.Checkpoint(model=other).restore(prefix)
    np.testing.assert_allclose(other((chars, lengths)).numpy(),
                               model((chars, lengths)).numpy(), rtol=1e-5, atol=1e-6)


class WordLM(tf.keras.Model):
    """rnn_ptb's shape: an embedding layer of its own (add_variable, a TF 1 initializer,
    embedding_lookup), a static RNN of BasicLSTMCells, a dense layer to the vocabulary."""

    class Embedding(tf.keras.layers.Layer):
        def __init__(self, vocab, dim):
            super().__init__()
            self.vocab, self.dim = vocab, dim

        def build(self, _):
            self.table = self.add_variable(
                "embedding_kernel", shape=[self.vocab, self.dim], dtype=tf.float32,
                initializer=tf.random_uniform_initializer(-0.1, 0.1), trainable=True)

        def call(self, ids):
            return tf.nn.embedding_lookup(self.table, ids)

    def __init__(self, vocab, dim, layers, keep_prob):
        super().__init__()
        self.keep_prob = keep_prob
        self.embed = WordLM.Embedding(vocab, dim)
        self.cells = tf.contrib.checkpoint.List([tf.nn.rnn_cell.BasicLSTMCell(dim)
                                                 for _ in range(layers)])
        self.out = tf.keras.layers.Dense(vocab)

    def call(self, ids, training=False):
        seq = self.embed(ids)                                  # [T, B, D]
        for cell in self.cells:
            state = cell.zero_state(int(seq.shape[1]), tf.float32)
            outs = []
            for x in tf.unstack(seq, num=int(seq.shape[0].value), axis=0):
                out, state = cell(x, state)
                outs.append(out)
            seq = tf.stack(outs, axis=0)
            if training:
                seq = tf.nn.dropout(seq, self.keep_prob)
        t, b, d = seq.shape
        return tf.reshape(self.out(tf.reshape(seq, [-1, d])), [t, b, -1])


def test_a_ptb_style_language_model_learns_a_repeating_text():
    vocab, steps, batch = 12, 8, 4
    text = np.tile(np.arange(vocab), 8)
    ids = np.stack([text[i:i + steps + 1] for i in range(0, 4 * batch, 4)], axis=1)
    x, y = ids[:-1].astype(np.int64), ids[1:].astype(np.int64)
    model = WordLM(vocab, 16, 2, keep_prob=0.9)
    opt = tf.train.AdamOptimizer(0.01)

    def loss_of(training):
        logits = model(x, training=training)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=logits))
    start = float(loss_of(False))
    for _ in range(60):
        with tf.GradientTape() as tape:
            loss = loss_of(True)
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, model.variables), 5.0)
        opt.apply_gradients(zip(grads, model.variables))
    assert float(loss_of(False)) < 0.5 * start
    # the same cell through the fused sequence op, in a traced function: the same outputs
    cell = model.cells[0]
    seq = model.embed(x)
    state = cell.zero_state(batch, tf.float32)
    by_hand = []
    for t in range(steps):
        out, state = cell(seq[t], state)
        by_hand.append(out)
    traced = tf.function(lambda s: tf.nn.dynamic_rnn(cell, s, time_major=True,
                                                     dtype=tf.float32)[0])
    np.testing.assert_allclose(traced(seq).numpy(), tf.stack(by_hand).numpy(),
                               rtol=1e-4, atol=1e-5)


def test_a_gan_style_step_with_transposed_convolutions():
    rng = np.random.default_rng(1)
    gen = tf.keras.Sequential([
        tf.keras.layers.Dense(7 * 7 * 8, activation="relu"),
        tf.keras.layers.Reshape((7, 7, 8)),
        tf.keras.layers.Conv2DTranspose(8, 5, strides=2, padding="same", activation="relu"),
        tf.keras.layers.Conv2DTranspose(1, 5, strides=2, padding="same", activation="tanh")])
    disc = tf.keras.Sequential([
        tf.keras.layers.Conv2D(8, 5, strides=2, padding="same", activation="relu"),
        tf.keras.layers.Flatten(), tf.keras.layers.Dense(1)])
    g_opt, d_opt = tf.train.AdamOptimizer(1e-3), tf.train.AdamOptimizer(1e-3)
    step = tf.Variable(0, dtype=tf.int64)
    real = tf.constant(rng.uniform(-1, 1, (4, 28, 28, 1)).astype(np.float32))
    xent = tf.nn.sigmoid_cross_entropy_with_logits
    for _ in range(2):
        noise = tf.random_uniform([4, 16], -1.0, 1.0)
        with tf.GradientTape(persistent=True) as tape:
            fake = gen(noise)
            assert fake.shape == (4, 28, 28, 1)
            d_real, d_fake = disc(real), disc(fake)
            d_loss = tf.reduce_mean(xent(labels=tf.ones_like(d_real), logits=d_real)) + \
                tf.reduce_mean(xent(labels=tf.zeros_like(d_fake), logits=d_fake))
            g_loss = tf.reduce_mean(xent(labels=tf.ones_like(d_fake), logits=d_fake))
        for loss, net, opt in ((d_loss, disc, d_opt), (g_loss, gen, g_opt)):
            grads = tape.gradient(loss, net.variables)
            assert all(g is not None for g in grads)
            opt.apply_gradients(zip(grads, net.variables))
        tf.assign_add(step, 1)
    assert int(step.numpy()) == 2
    assert gen.layers[2].kernel.shape == (5, 5, 8, 8)          # [kh, kw, out, in]
