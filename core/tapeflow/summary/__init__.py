"""TensorBoard summaries (``tf.summary``, also reachable as ``tf.contrib.summary``).

Writes real TensorBoard event files (TFRecord-framed ``Event`` protobufs, encoded
here without TensorFlow or protobuf) that TensorBoard reads::

    writer = tf.contrib.summary.create_file_writer("./tb/")
    writer.set_as_default()
    for _ in range(10):
        global_step.assign_add(1)
        with tf.contrib.summary.record_summaries_every_n_global_steps(100):
            tf.contrib.summary.scalar("global_step", global_step)

As in ``tf.contrib.summary`` (seed 002), summary ops record only while a writer is
the default (``writer.as_default()`` / ``writer.set_as_default()``) AND a recording
policy is on: ``always_record_summaries()``,
``record_summaries_every_n_global_steps(n)`` (records when global_step % n == 0) or
``record_if(condition)``. The step is ``step=`` when given, else the step of the
``as_default(step=...)`` block or of :func:`set_step`, else the global step
(``tf.train.get_or_create_global_step()``).

>>> import glob, os, tempfile
>>> import tapeflow as tf
>>> logdir = tempfile.mkdtemp()
>>> writer = tf.summary.create_file_writer(logdir)
>>> with writer.as_default(), tf.summary.always_record_summaries():
...     for step in range(3):
...         _ = tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
>>> [os.path.basename(p).split(".")[:3] for p in glob.glob(logdir + "/*")]
[['events', 'out', 'tfevents']]
"""

from __future__ import annotations

import types as _types

from ._records import events_from_file, events_from_logdir, read_records
from .ops import (SummaryWriter, always_record_summaries, create_file_writer, create_noop_writer,
                  create_summary_file_writer, flush, get_default_writer, get_step, histogram,
                  image, never_record_summaries, record_if, record_summaries_every_n_global_steps,
                  scalar, set_step, should_record_summaries, trace_export, trace_off, trace_on)

#: ``tf.summary.experimental.set_step`` / ``get_step`` (TF 2 names)
experimental = _types.SimpleNamespace(set_step=set_step, get_step=get_step)

#: ``tf.contrib.summary.summary_test_util``: TensorFlow's helpers that read event files back
summary_test_util = _types.SimpleNamespace(events_from_file=events_from_file,
                                           events_from_logdir=events_from_logdir)

__all__ = ["SummaryWriter", "create_file_writer", "create_summary_file_writer",
           "create_noop_writer", "always_record_summaries", "never_record_summaries",
           "record_summaries_every_n_global_steps", "record_if", "should_record_summaries",
           "scalar", "histogram", "image", "flush", "set_step", "get_step",
           "get_default_writer", "read_records", "experimental", "events_from_file",
           "events_from_logdir", "summary_test_util", "trace_on", "trace_off", "trace_export"]
