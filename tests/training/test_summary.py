"""tf.summary / tf.contrib.summary: event files that TensorBoard itself reads.

The round-trip tests read our files with TensorBoard's own readers (the legacy
``EventAccumulator`` and the ``plugin_event_accumulator`` the TensorBoard UI uses);
they are skipped, with the reason, only when TensorBoard is not installed (it is in
the ``test`` extra). The framing tests check the TFRecord CRCs against published
CRC-32C test vectors and, when installed, TensorBoard's CRC implementation.
"""

from __future__ import annotations

import glob
import io
import os
import re
import socket
import struct

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.summary import _records

tfe = tf


@pytest.fixture
def tb():
    return pytest.importorskip(
        "tensorboard", reason="tensorboard is not installed (pip install tensorboard; it is "
                              "in tapeflow's [test] extra)")


def _accumulator(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(str(logdir), size_guidance={
        "scalars": 0, "histograms": 0, "images": 0, "compressedHistograms": 0, "tensors": 0})
    ea.Reload()
    return ea


def _event_files(logdir):
    return sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")))


# --- framing -----------------------------------------------------------------------------------

SUMMARY_WITHOUT = """
import sys
sys.modules[{lib!r}] = None              # as if the library were not installed
import numpy as np
import tapeflow as tf
try:
    w = tf.summary.create_file_writer({path!r})
    with w.as_default(), tf.summary.always_record_summaries():
        tf.summary.image("i", np.zeros((1, 2, 2, 1), np.uint8), step=1)
except tf.errors.FailedPreconditionError as e:
    print("FailedPreconditionError", "tapeflow[tensorboard]" in str(e))
"""


@pytest.mark.parametrize("lib", ["crc32c", "tensorboardX", "PIL"])
def test_without_the_extra_writing_summaries_names_it(tmp_path, lib):
    import subprocess
    import sys
    code = SUMMARY_WITHOUT.format(lib=lib, path=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "FailedPreconditionError True", r.stdout + r.stderr


def test_crc32c_known_vectors():
    # RFC 3720 (iSCSI) appendix B.4 and the standard "123456789" check value
    assert _records.crc32c(b"123456789") == 0xE3069283
    assert _records.crc32c(b"\x00" * 32) == 0x8A9136AA
    assert _records.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert _records.crc32c(bytes(range(32))) == 0x46DD794E
    assert _records.crc32c(b"") == 0


def test_masked_crc_matches_tensorboard(tb):
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
    rng = np.random.default_rng(0)
    for n in (0, 1, 8, 100, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert _records.masked_crc32c(data) == masked_crc32c(data)


def _raw_records(path):
    """(length, length_crc, data, data_crc) of each record, parsed independently."""
    blob = open(path, "rb").read()
    out, i = [], 0
    while i < len(blob):
        (length,) = struct.unpack_from("<Q", blob, i)
        (lcrc,) = struct.unpack_from("<I", blob, i + 8)
        data = blob[i + 12:i + 12 + length]
        (dcrc,) = struct.unpack_from("<I", blob, i + 12 + length)
        out.append((blob[i:i + 8], lcrc, data, dcrc))
        i += 12 + length + 4
    assert i == len(blob)
    return out


def test_event_file_framing_and_name(tmp_path):
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        tf.summary.scalar("loss", 0.5, step=7)
    files = _event_files(tmp_path)
    assert len(files) == 1
    name = os.path.basename(files[0])
    assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\." + re.escape(socket.gethostname())
                        + r"\.v2", name), name
    records = _raw_records(files[0])
    assert len(records) == 2
    for length_bytes, lcrc, data, dcrc in records:
        assert lcrc == _records.masked_crc32c(length_bytes)
        assert dcrc == _records.masked_crc32c(data)
        crc = _records.crc32c(data)    # the mask, spelled out once
        assert dcrc == ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)
    # the first record is Event{wall_time, file_version="brain.Event:2"}
    first = records[0][2]
    assert first[0] == 0x09 and b"\x1a\x0dbrain.Event:2" in first
    assert list(tf.summary.read_records(files[0])) == [r[2] for r in records]


def test_read_records_rejects_a_corrupt_file(tmp_path):
    writer = tf.summary.create_file_writer(tmp_path)
    writer.close()
    path = _event_files(tmp_path)[0]
    blob = bytearray(open(path, "rb").read())
    blob[-6] ^= 0xFF                      # flip a byte of the data
    open(path, "wb").write(bytes(blob))
    with pytest.raises(ValueError, match="corrupt record data"):
        list(tf.summary.read_records(path))


def test_events_decode_with_tensorboard_protos(tb, tmp_path):
    from tensorboard.compat.proto import event_pb2
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        tf.summary.scalar("a", -2.5, step=3)
        tf.summary.scalar("big_step", 1.0, step=2**40)
    events = [event_pb2.Event.FromString(r)
              for r in tf.summary.read_records(_event_files(tmp_path)[0])]
    assert events[0].file_version == "brain.Event:2"
    assert [(e.step, e.summary.value[0].tag, e.summary.value[0].simple_value)
            for e in events[1:]] == [(3, "a", -2.5), (2**40, "big_step", 1.0)]
    assert all(e.wall_time > 1.5e9 for e in events)


# --- TensorBoard round trip --------------------------------------------------------------------

def test_scalars_round_trip(tb, tmp_path):
    writer = tf.contrib.summary.create_file_writer(str(tmp_path))
    losses = [2.0, 1.5, 0.75, 0.5]
    with writer.as_default(), tf.contrib.summary.always_record_summaries():
        for step, loss in enumerate(losses):
            assert tf.contrib.summary.scalar("loss", tf.constant(loss), step=step) is True
            tf.contrib.summary.scalar("lr", tf.Variable(0.1), "train", step=step)   # family
    ea = _accumulator(tmp_path)
    assert sorted(ea.Tags()["scalars"]) == ["loss", "train/lr"]
    assert [(e.step, e.value) for e in ea.Scalars("loss")] == list(enumerate(losses))
    assert [e.step for e in ea.Scalars("train/lr")] == [0, 1, 2, 3]
    np.testing.assert_allclose([e.value for e in ea.Scalars("train/lr")], 0.1, rtol=1e-7)


def test_tensorboard_ui_reader_sees_scalars_histograms_images(tb, tmp_path):
    """plugin_event_accumulator is what the TensorBoard server uses (legacy values are
    migrated to the scalars / histograms / images plugins)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        tf.summary.scalar("loss", 0.25, step=5)
        tf.summary.histogram("w", np.arange(10.0), step=5)
        tf.summary.image("img", np.zeros((1, 4, 4, 3), np.uint8), max_images=1, step=5)
    acc = pea.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    plugins = {tag: acc.SummaryMetadata(tag).plugin_data.plugin_name
               for tag in acc.Tags()["tensors"]}
    assert plugins == {"loss": "scalars", "w": "histograms", "img/image": "images"}
    (loss,) = acc.Tensors("loss")
    assert loss.step == 5 and loss.tensor_proto.float_val == [0.25]


def test_histogram_round_trip(tb, tmp_path):
    values = np.random.default_rng(1).normal(size=(20, 50)).astype(np.float32)
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        tf.summary.histogram("weights", tf.constant(values), step=9)
        tf.summary.histogram("uniform", tf.constant([0.0, 1.0, 2.0, 3.0]), step=9, buckets=2)
    ea = _accumulator(tmp_path)
    (h,) = ea.Histograms("weights")
    hv = h.histogram_value
    v = values.astype(np.float64)
    assert h.step == 9 and hv.num == v.size
    assert hv.min == v.min() and hv.max == v.max()
    np.testing.assert_allclose(hv.sum, v.sum(), rtol=1e-10)
    np.testing.assert_allclose(hv.sum_squares, (v * v).sum(), rtol=1e-10)
    limits, counts = np.array(hv.bucket_limit), np.array(hv.bucket)
    assert counts.sum() == v.size and np.all(np.diff(limits) > 0)
    # every value lies in its bucket: previous limit <= x < limit (TF's exponential buckets)
    idx = np.searchsorted(limits, v.ravel(), side="right")
    np.testing.assert_array_equal(np.bincount(idx, minlength=len(limits)), counts)
    assert limits[-1] == np.finfo(np.float64).max
    (u,) = ea.Histograms("uniform")
    assert list(u.histogram_value.bucket_limit) == [1.5, 3.0]
    assert list(u.histogram_value.bucket) == [2.0, 2.0]


def _decode_png(data):
    """The pixels of a PNG as (height, width, channels), decoded by Pillow."""
    from PIL import Image
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    a = np.asarray(Image.open(io.BytesIO(data)))
    return a[:, :, None] if a.ndim == 2 else a


def test_images_round_trip(tb, tmp_path):
    rng = np.random.default_rng(2)
    grey = rng.random((4, 5, 7, 1)).astype(np.float32)          # [0, 1) floats
    rgb = rng.integers(0, 256, (1, 3, 2, 3), dtype=np.uint8)
    signed = np.array([[[[-1.0], [0.0]], [[0.5], [np.nan]]]], np.float32)
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        tf.summary.image("grey", tf.constant(grey), step=1)             # max_images=3
        tf.summary.image("rgb", rgb, max_images=1, step=2)
        tf.summary.image("signed", signed, max_outputs=1, step=3)
    ea = _accumulator(tmp_path)
    assert sorted(ea.Tags()["images"]) == ["grey/image/0", "grey/image/1", "grey/image/2",
                                           "rgb/image", "signed/image"]
    for i in range(3):
        (ev,) = ea.Images(f"grey/image/{i}")
        assert (ev.step, ev.width, ev.height) == (1, 7, 5)
        expected = (grey[i] * (255.0 / grey[i].max())).astype(np.uint8)   # TF's scaling
        np.testing.assert_array_equal(_decode_png(ev.encoded_image_string), expected)
    (ev,) = ea.Images("rgb/image")
    np.testing.assert_array_equal(_decode_png(ev.encoded_image_string), rgb[0])
    (ev,) = ea.Images("signed/image")
    # negative values: 128 + 127 * x / max|x|; NaN gets bad_color (red -> 255 in grey)
    np.testing.assert_array_equal(_decode_png(ev.encoded_image_string)[..., 0],
                                  [[1, 128], [191, 255]])


# --- recording policy and steps ----------------------------------------------------------------

def test_record_every_n_steps(tb, tmp_path):
    step = tf.Variable(0, dtype=tf.int64)
    writer = tf.contrib.summary.create_summary_file_writer(tmp_path)
    with writer.as_default():
        for _ in range(25):
            with tf.contrib.summary.record_summaries_every_n_global_steps(10, step):
                tf.contrib.summary.scalar("x", step * 2, step=step)
            step.assign_add(1)
    ea = _accumulator(tmp_path)
    assert [(e.step, e.value) for e in ea.Scalars("x")] == [(0, 0.0), (10, 20.0), (20, 40.0)]


def test_seed_001_global_step_every_100(tb, tmp_path, monkeypatch):
    """Seed 001, as written: ten steps with record_summaries_every_n_global_steps(100)
    record nothing (steps 1..10), yet `ls tb/` shows the event file."""
    monkeypatch.chdir(tmp_path)
    global_step = tf.train.get_or_create_global_step()
    global_step.assign(0)
    try:
        logdir = "./tb/"
        writer = tf.contrib.summary.create_file_writer(logdir)
        writer.set_as_default()

        for _ in range(10):
            global_step.assign_add(1)
            # Must include a record_summaries method
            with tf.contrib.summary.record_summaries_every_n_global_steps(100):
                # your model code goes here
                tf.contrib.summary.scalar('global_step', global_step)

        (name,) = os.listdir("tb")                 # !ls tb/
        assert re.fullmatch(r"events\.out\.tfevents\.\d{10}\..+\.v2", name)
        global_step.assign(100)
        with tf.contrib.summary.record_summaries_every_n_global_steps(100):
            tf.contrib.summary.scalar('global_step', global_step)   # step 100: recorded
        tf.contrib.summary.flush()
        ea = _accumulator(tmp_path / "tb")
        assert [(e.step, e.value) for e in ea.Scalars("global_step")] == [(100, 100.0)]
    finally:
        writer.close()
        global_step.assign(0)


def test_seed_002_writer_as_default_in_the_loop(tb, tmp_path):
    """Seed 002: the global step stays 0 here, so every iteration is recorded at step 0."""
    logdir = str(tmp_path)
    tf.train.get_or_create_global_step().assign(0)   # Ensuring the global step variable exists
    writer = tf.contrib.summary.create_summary_file_writer(logdir)

    for loss in (3.0, 2.0, 1.0):
        with writer.as_default():
            with tf.contrib.summary.record_summaries_every_n_global_steps(100):
                # your model code goes here
                tf.contrib.summary.scalar('loss', loss)
    writer.close()
    ea = _accumulator(tmp_path)
    assert [(e.step, e.value) for e in ea.Scalars("loss")] == [(0, 3.0), (0, 2.0), (0, 1.0)]


def test_nothing_recorded_without_writer_or_policy(tb, tmp_path):
    writer = tf.summary.create_file_writer(tmp_path)
    assert tf.summary.scalar("no_writer", 1.0, step=0) is False
    with tf.summary.always_record_summaries():
        assert tf.summary.should_record_summaries() is False
        assert tf.summary.scalar("no_writer", 1.0, step=0) is False
    with writer.as_default():
        assert tf.summary.scalar("no_policy", 1.0, step=0) is False     # seed 002
        with tf.summary.never_record_summaries():
            assert tf.summary.histogram("never", [1.0], step=0) is False
        with tf.summary.record_if(lambda: True):
            assert tf.summary.should_record_summaries() is True
            assert tf.summary.scalar("yes", 1.0, step=0) is True
    assert _accumulator(tmp_path).Tags()["scalars"] == ["yes"]


def test_steps_from_block_and_set_step(tb, tmp_path):
    writer = tf.summary.create_file_writer(tmp_path)
    with tf.summary.always_record_summaries():
        with writer.as_default(step=42):
            tf.summary.scalar("block", 1.0)
            tf.summary.scalar("tf2_positional_step", 2.0, 7)        # TF 2: (name, data, step)
        tf.summary.experimental.set_step(5)
        try:
            with writer.as_default():
                tf.summary.scalar("set_step", 3.0)
        finally:
            tf.summary.experimental.set_step(None)
    ea = _accumulator(tmp_path)
    assert [e.step for e in ea.Scalars("block")] == [42]
    assert [e.step for e in ea.Scalars("tf2_positional_step")] == [7]
    assert [e.step for e in ea.Scalars("set_step")] == [5]


def test_buffering_and_flush(tmp_path):
    writer = tf.summary.create_file_writer(tmp_path, max_queue=100)
    path = _event_files(tmp_path)[0]
    size0 = os.path.getsize(path)                   # the file_version record is written
    assert size0 > 0
    writer.set_as_default()
    try:
        with tf.summary.always_record_summaries():
            for i in range(5):
                tf.summary.scalar("x", i, step=i)
        assert os.path.getsize(path) == size0        # buffered
        tf.summary.flush()
        assert len(list(tf.summary.read_records(path))) == 6
        with tf.summary.always_record_summaries():
            tf.summary.scalar("x", 5, step=5)
    finally:
        writer.close()                               # close flushes
    assert len(list(tf.summary.read_records(path))) == 7
    assert tf.summary.get_default_writer() is None
    with pytest.raises(ValueError, match="closed"):
        with writer.as_default(), tf.summary.always_record_summaries():
            tf.summary.scalar("x", 1, step=0)


def test_max_queue_flushes(tmp_path):
    writer = tf.summary.create_file_writer(tmp_path, max_queue=3)
    path = writer.path
    with writer.as_default(), tf.summary.always_record_summaries():
        for i in range(3):
            tf.summary.scalar("x", i, step=i)
        assert len(list(tf.summary.read_records(path))) == 4     # version + 3 flushed
        writer.close()


def test_two_writers_two_files(tmp_path):
    a = tf.summary.create_file_writer(tmp_path)
    b = tf.summary.create_file_writer(tmp_path)
    assert a.path != b.path and len(_event_files(tmp_path)) == 2
    a.close()
    b.close()


def test_noop_writer(tmp_path):
    w = tf.summary.create_file_writer(None)
    with w.as_default(), tf.summary.always_record_summaries():
        assert tf.summary.scalar("x", 1.0, step=0) is True
    assert os.listdir(tmp_path) == []


def test_bad_inputs_are_clear_errors(tmp_path):
    writer = tf.summary.create_file_writer(tmp_path)
    with writer.as_default(), tf.summary.always_record_summaries():
        with pytest.raises(InvalidArgumentError, match="'loss'.*single value.*\\(3,\\)"):
            tf.summary.scalar("loss", [1.0, 2.0, 3.0], step=0)
        with pytest.raises(InvalidArgumentError, match="NaN or infinity"):
            tf.summary.histogram("h", [1.0, np.nan], step=0)
        with pytest.raises(InvalidArgumentError, match=r"\[k, height, width, channels\]"):
            tf.summary.image("img", np.zeros((4, 4)), step=0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tf.summary.record_summaries_every_n_global_steps(0)
