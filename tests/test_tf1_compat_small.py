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
    with pytest.raises(TypeError, match=f"tf.{fn} updates a Variable.*Tensor"):
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
