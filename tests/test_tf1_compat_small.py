"""TF 1 names the seeds' example programs call that are small enough to test together:
the state ops ``tf.assign*`` and ``tf.contrib.summary.summary_test_util`` (issue 45)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError


def test_assign_ops_update_the_variable_and_return_its_new_value():
    v = tf.Variable([1.0, 2.0])
    np.testing.assert_array_equal(tf.assign_add(v, [1.0, 1.0]).numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(tf.assign_sub(v, [0.5, 0.5]).numpy(), [1.5, 2.5])
    out = tf.assign(v, [4.0, 5.0])
    assert isinstance(out, tf.Tensor) and not isinstance(out, tf.Variable)
    np.testing.assert_array_equal(v.numpy(), [4.0, 5.0])
    step = tf.train.get_or_create_global_step()
    before = int(step.numpy())
    tf.assign_add(step, 1)
    assert int(step.numpy()) == before + 1


@pytest.mark.parametrize("fn", ["assign", "assign_add", "assign_sub"])
def test_assign_ops_refuse_a_tensor_and_a_wrong_shape(fn):
    with pytest.raises(tf.errors.InvalidTypeError, match=f"tf.{fn} updates a Variable.*Tensor"):
        getattr(tf, fn)(tf.constant([1.0]), [1.0])
    v = tf.Variable([1.0, 2.0])
    with pytest.raises(Exception, match="shape"):
        getattr(tf, fn)(v, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])     # left unchanged


def _write(logdir, values):
    writer = tf.contrib.summary.create_file_writer(logdir, max_queue=0)
    with writer.as_default(), tf.contrib.summary.always_record_summaries():
        for step, value in enumerate(values):
            tf.contrib.summary.scalar("loss", value, step=step)
    writer.flush()


def test_events_read_back_what_the_writer_wrote(tmp_path):
    pytest.importorskip("tensorboardX")
    _write(str(tmp_path), [3.0, 2.0, 1.5])
    util = tf.contrib.summary.summary_test_util
    events = util.events_from_logdir(str(tmp_path))
    assert events[0].file_version.startswith("brain.Event")
    assert [(e.step, e.summary.value[0].tag, e.summary.value[0].simple_value)
            for e in events[1:]] == [(0, "loss", 3.0), (1, "loss", 2.0), (2, "loss", 1.5)]
    (path,) = os.listdir(tmp_path)
    assert len(util.events_from_file(str(tmp_path / path))) == 4


def test_events_from_logdir_wants_exactly_one_file(tmp_path):
    pytest.importorskip("tensorboardX")
    util = tf.contrib.summary.summary_test_util
    with pytest.raises(InvalidArgumentError, match="exactly one event file.*holds \\[\\]"):
        util.events_from_logdir(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="no directory"):
        util.events_from_logdir(str(tmp_path / "missing"))
    _write(str(tmp_path / "a"), [1.0])
    (tmp_path / "a" / "other").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        util.events_from_logdir(str(tmp_path / "a"))


def test_from_generator_flattens_as_deep_as_output_types():
    # spinn's generator yields a tuple of labels where output_types has one dtype
    def gen():
        yield ((1, 2, 3), [[1, 2], [3, 4]], 5)
    (labels, words, n), = list(tf.data.Dataset.from_generator(gen, (tf.int64,) * 3))
    assert labels.shape == (3,) and words.shape == (2, 2) and int(n) == 5

    def short():
        yield (1, 2)
    with pytest.raises(InvalidArgumentError, match="does not match output_types.*3 and 2"):
        list(tf.data.Dataset.from_generator(short, (tf.int64,) * 3))


def test_enable_eager_execution_gives_dropout_tf1s_keep_prob():
    x = tf.ones([2000])
    kept = lambda y: float(np.mean(y.numpy() != 0))      # noqa: E731
    assert kept(tf.nn.dropout(x, 0.8, seed=3)) < 0.3      # TF 2: rate 0.8
    with pytest.raises(InvalidArgumentError, match="range \\[0, 1\\), got 1.0"):
        tf.nn.dropout(x, 1.0)
    try:
        assert tf.enable_eager_execution() is None
        assert kept(tf.nn.dropout(x, 0.8, seed=3)) > 0.7  # TF 1: keep_prob 0.8
        np.testing.assert_array_equal(tf.nn.dropout(x, 1.0).numpy(), x.numpy())
        assert kept(tf.nn.dropout(x, rate=0.8, seed=3)) < 0.3     # keywords: the same
        assert kept(tf.nn.dropout(x, keep_prob=0.8, seed=3)) > 0.7
        assert tf.nn.dropout is tf.nn.dropout_v1
    finally:
        tf.enable_v2_behavior()
    assert kept(tf.nn.dropout(x, 0.8, seed=3)) < 0.3


def test_a_layer_takes_nested_lists_of_tensors_and_keeps_their_structure():
    # spinn's tracker is called with lists of lists of tensors
    seen = []

    class Probe(tf.keras.layers.Layer):
        def call(self, inputs):
            seen.append(inputs)
            buffers, stacks = inputs
            return buffers[0][1] + stacks[1]

    out = Probe()(([[tf.ones([1, 2]), tf.ones([1, 2]) * 2]], [tf.ones([1, 2]), [[3.0, 4.0]]]))
    np.testing.assert_array_equal(out.numpy(), [[5.0, 6.0]])
    buffers, stacks = seen[0]
    assert isinstance(buffers, list) and isinstance(buffers[0], list)
    assert isinstance(stacks[1], tf.Tensor) and stacks[1].shape == (1, 2)
    state = tf.nn.rnn_cell.LSTMStateTuple(tf.zeros([1, 2]), [[1.0, 1.0]])
    Probe.call = lambda self, inputs: (seen.append(inputs), inputs.c + inputs.h)[1]
    assert float(tf.reduce_sum(Probe()(state))) == 2.0
    assert type(seen[-1]).__name__ == "LSTMStateTuple" and isinstance(seen[-1].h, tf.Tensor)


def test_a_program_that_uses_tf_contrib_is_a_tf1_program():
    x = tf.ones([2000])
    try:
        assert tf.nn.dropout is not tf.nn.dropout_v1
        _ = tf.contrib.checkpoint.List([])           # rnn_ptb's first TF 1 name
        np.testing.assert_array_equal(tf.nn.dropout(x, 1.0).numpy(), x.numpy())
    finally:
        tf.enable_v2_behavior()
    assert tf.nn.dropout is not tf.nn.dropout_v1


@pytest.mark.parametrize("middle", ["Dense", "Dropout", "Activation", "BatchNormalization"])
def test_a_mask_passes_through_the_core_layers(middle):
    from tapeflow.layers.base import get_mask
    emb = tf.keras.layers.Embedding(10, 4, mask_zero=True)
    mid = {"Dense": lambda: tf.keras.layers.Dense(4), "Dropout": lambda: tf.keras.layers.Dropout(0.5),
           "Activation": lambda: tf.keras.layers.Activation("tanh"),
           "BatchNormalization": lambda: tf.keras.layers.BatchNormalization()}[middle]()
    lstm = tf.keras.layers.LSTM(3)
    x = tf.constant([[1, 2, 0, 0], [3, 0, 0, 0]])
    hidden = mid(emb(x))
    np.testing.assert_array_equal(get_mask(hidden).numpy(), x.numpy() != 0)
    masked = lstm(hidden)
    for row, n in ((0, 2), (1, 1)):                  # the padded steps change nothing
        np.testing.assert_allclose(masked[row].numpy(), lstm(hidden[row:row + 1, :n])[0].numpy(),
                                   rtol=1e-5, atol=1e-6)
