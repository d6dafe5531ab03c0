"""tf.train.Example messages, tf.io.parse_example / parse_single_example and TFRecord
files (core/tapeflow/data/example.py)."""

import gzip
import struct
import tracemalloc
import zlib

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.data import example as ex_mod
from tapeflow.data import text as text_mod

pytest.importorskip("google.protobuf")

# Bytes TensorFlow 2.21 wrote (the reference): an Example with f: [1.5, -2.0],
# i: [3, -1, 300], s: [b"ab", b""] ...
TF_EXAMPLE = bytes.fromhex(
    "0a3a0a0d0a017312080a060a0261620a000a110a0166120c120a0a080000c03f000000c00a160a01691211"
    "1a0f0a0d03ffffffffffffffffff01ac02")
# ... and a TFRecord file holding the records b"hello" and b"".
TF_RECORDS = bytes.fromhex(
    "0500000000000000eab2043e68656c6c6fbb1f1c19000000000000000029039807d8ea82a2")


def _example(**feats):
    f = {}
    for k, v in feats.items():
        if isinstance(v[0] if v else 0, bytes):
            f[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
        elif v and isinstance(v[0], float):
            f[k] = tf.train.Feature(float_list=tf.train.FloatList(value=v))
        else:
            f[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=v))
    return tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString()


def test_messages_are_tensorflows():
    ex = tf.train.Example.FromString(TF_EXAMPLE)
    feat = ex.features.feature
    assert list(feat["i"].int64_list.value) == [3, -1, 300]
    assert list(feat["f"].float_list.value) == [1.5, -2.0]
    assert list(feat["s"].bytes_list.value) == [b"ab", b""]
    assert feat["i"].WhichOneof("kind") == "int64_list"
    assert tf.train.Example.DESCRIPTOR.full_name == "tensorflow.Example"
    again = tf.train.Example.FromString(ex.SerializeToString())
    assert again == ex
    seq = tf.train.SequenceExample()
    seq.feature_lists.feature_list["t"].feature.add().int64_list.value.append(4)
    assert tf.train.SequenceExample.FromString(seq.SerializeToString()) == seq
    with pytest.raises(AttributeError):
        tf.train.NoSuchMessage


def test_text_format_and_parse_ragged():
    text_format = pytest.importorskip("google.protobuf.text_format")
    b = text_format.Merge('features { feature { key: "c" value { bytes_list { value: '
                          '["red", "blue"] } } } }', tf.train.Example()).SerializeToString()
    out = tf.io.parse_example([b, _example(c=[b"x"])], {"c": tf.io.RaggedFeature(tf.string)})
    assert out["c"].to_list() == [[b"red", b"blue"], [b"x"]]
    assert out["c"].row_splits.dtype == tf.int32


def test_parse_example_outputs_as_tensorflow():
    spec = {"f": tf.io.FixedLenFeature([2], tf.float32, default_value=[0., 1.]),
            "i": tf.io.VarLenFeature(tf.int64), "s": tf.io.RaggedFeature(tf.string),
            "m": tf.io.FixedLenFeature([], tf.int64, default_value=7),
            "q": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)}
    out = tf.io.parse_example(tf.constant([TF_EXAMPLE, b""]), spec)
    assert list(out) == ["i", "f", "m", "q", "s"]         # TF's order: sparse, dense, ragged
    np.testing.assert_array_equal(out["f"].numpy(), [[1.5, -2.], [0., 1.]])
    np.testing.assert_array_equal(out["i"].indices.numpy(), [[0, 0], [0, 1], [0, 2]])
    np.testing.assert_array_equal(out["i"].values.numpy(), [3, -1, 300])
    np.testing.assert_array_equal(out["i"].dense_shape.numpy(), [2, 3])
    assert out["m"].numpy().tolist() == [7, 7] and out["m"].dtype == tf.int64
    assert out["q"].shape == (2, 0)
    assert out["s"].to_list() == [[b"ab", b""], []]
    one = tf.io.parse_single_example(TF_EXAMPLE, spec)
    assert one["s"].numpy().tolist() == [b"ab", b""]          # a dense vector
    np.testing.assert_array_equal(one["i"].indices.numpy(), [[0], [1], [2]])
    assert one["m"].numpy() == 7 and one["f"].shape == (2,)


def test_parse_partitions_sequences_and_raw_bytes():
    b1 = _example(v=[1, 2, 3, 4], n=[3, 1], q=[1., 2., 3., 4.])
    b2 = _example(v=[5], n=[0, 1], q=[5., 6.])
    out = tf.io.parse_example([b1, b2], {
        "v": tf.io.RaggedFeature(tf.int64, partitions=[tf.io.RaggedFeature.RowLengths("n")],
                                 row_splits_dtype=tf.int64),
        "q": tf.io.FixedLenSequenceFeature([2], tf.float32, default_value=-1.)})
    assert out["v"].to_list() == [[[1, 2, 3], [4]], [[], [5]]]
    np.testing.assert_array_equal(out["q"].numpy(), [[[1, 2], [3, 4]], [[5, 6], [-1, -1]]])
    # unpacked repeated int64 (wire type 0) and float (wire type 5) fields parse too
    def ld(tag, payload):                    # a length-delimited field (short payloads)
        return bytes([tag, len(payload)]) + payload

    ints = ld(0x1a, b"\x08\x05\x08\x7f\x08\x01")             # Feature{int64_list}
    floats = ld(0x12, b"\x0d" + struct.pack("<f", 1.0))          # Feature{float_list}
    raw = ld(0x0a, ld(0x0a, ld(0x0a, b"a") + ld(0x12, ints))
             + ld(0x0a, ld(0x0a, b"b") + ld(0x12, floats)))
    out = tf.io.parse_single_example(raw, {"a": tf.io.VarLenFeature(tf.int64),
                                           "b": tf.io.FixedLenFeature([1], tf.float32)})
    assert out["a"].values.numpy().tolist() == [5, 127, 1]
    assert out["b"].numpy().tolist() == [1.0]


def test_parse_errors_name_the_feature():
    b = TF_EXAMPLE
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature: x .*required"):
        tf.io.parse_example([b], {"x": tf.io.FixedLenFeature([], tf.int64)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="Key: s, Index: 0.*types don't"):
        tf.io.parse_example([b], {"s": tf.io.VarLenFeature(tf.int64)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="Key: f.*Values size: 2"):
        tf.io.parse_example([b], {"f": tf.io.FixedLenFeature([3], tf.float32)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a serialized"):
        tf.io.parse_example([b"\xff\x01"], {"s": tf.io.RaggedFeature(tf.int64)})
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32"):
        tf.io.FixedLenFeature([], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="scalar"):
        tf.io.parse_single_example([b], {"s": tf.io.VarLenFeature(tf.string)})
    with pytest.raises(tf.errors.InvalidTypeError):
        tf.io.parse_example([b], ["s"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="RowLengths.*n"):
        tf.io.parse_example([_example(v=[1], n=[2])], {"v": tf.io.RaggedFeature(
            tf.int64, partitions=[tf.io.RaggedFeature.RowLengths("n")])})


def test_tfrecord_files_are_tensorflows(tmp_path):
    p = str(tmp_path / "a.tfrecord")
    with tf.io.TFRecordWriter(p) as w:
        w.write(b"hello")
        w.write(b"")
    assert open(p, "rb").read() == TF_RECORDS
    ds = tf.data.TFRecordDataset([p])
    assert ds.element_spec == tf.TensorSpec((), tf.string)
    assert [r.numpy() for r in ds] == [b"hello", b""]
    assert list(tf.io.tf_record_iterator(p)) == [b"hello", b""]
    for kind in ("GZIP", "ZLIB"):
        q = str(tmp_path / kind)
        with tf.io.TFRecordWriter(q, tf.io.TFRecordOptions(kind)) as w:
            w.write(b"x" * 50)
            w.flush()
            w.write(TF_EXAMPLE)
        assert [r.numpy() for r in tf.data.TFRecordDataset(q, kind)] == [b"x" * 50, TF_EXAMPLE]
    with gzip.open(str(tmp_path / "g"), "wb") as f:                # any gzip writer's file
        f.write(TF_RECORDS)
    assert len(list(tf.data.TFRecordDataset(str(tmp_path / "g"), "GZIP"))) == 2


def test_tfrecord_map_parse(tmp_path):
    p = str(tmp_path / "e.tfrecord")
    with tf.io.TFRecordWriter(p) as w:
        for n in ([1, 2], [3]):
            w.write(_example(n=n, x=[float(len(n))]))
    spec = {"n": tf.io.VarLenFeature(tf.int64), "x": tf.io.FixedLenFeature([], tf.float32)}
    ds = tf.data.TFRecordDataset(p).map(lambda r: tf.io.parse_single_example(r, spec))
    got = [(el["n"].values.numpy().tolist(), float(el["x"])) for el in ds]
    assert got == [([1, 2], 2.0), ([3], 1.0)]

    @tf.function
    def parse(batch):
        out = tf.io.parse_example(batch, spec)
        return out["x"] * 2.0, out["n"].values

    x, n = parse(tf.constant([r.numpy() for r in tf.data.TFRecordDataset(p)]))
    assert x.numpy().tolist() == [4.0, 2.0] and n.numpy().tolist() == [1, 2, 3]


def test_corrupt_records_are_data_loss(tmp_path):
    good = tmp_path / "good"
    good.write_bytes(TF_RECORDS)
    bad = tmp_path / "bad"
    bad.write_bytes(TF_RECORDS[:-1] + b"x")
    with pytest.raises(tf.errors.DataLossError, match="corrupted record at 21"):
        list(tf.data.TFRecordDataset(str(bad)))
    short = tmp_path / "short"
    short.write_bytes(TF_RECORDS[:-3])
    with pytest.raises(tf.errors.DataLossError, match="truncated record at 21"):
        list(tf.data.TFRecordDataset(str(short)))
    huge = tmp_path / "huge"
    header = struct.pack("<Q", 1 << 62)
    huge.write_bytes(header + struct.pack("<I", ex_mod.masked_crc32c(header)))
    with pytest.raises(tf.errors.DataLossError, match="corrupted"):
        list(tf.data.TFRecordDataset(str(huge)))
    with pytest.raises(tf.errors.DataLossError, match="GZIP"):
        list(tf.data.TFRecordDataset(str(good), "GZIP"))
    with pytest.raises(tf.errors.NotFoundError):
        list(tf.data.TFRecordDataset(str(tmp_path / "missing")))
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.TFRecordWriter(str(tmp_path / "w"), "LZ4")


def test_crc32c_without_the_library(monkeypatch):
    monkeypatch.setattr(ex_mod, "_CRC_LIB", [None])
    assert ex_mod.crc32c(b"123456789") == 0xE3069283
    assert ex_mod.frame(b"hello") == TF_RECORDS[:21]


# A SequenceExample TensorFlow 2.21 wrote: context c: [4, 5]; feature lists f (float pairs
# [1, 2], [3, 4], [5, 6]) and g, w (bytes [a], [], [b, c]).
TF_SEQUENCE = bytes.fromhex(
    "0a0d0a0b0a016312061a040a02040512690a2f0a0166122a0a0c120a0a080000803f000000400a0c120a0a"
    "0800004040000080400a0c120a0a080000a0400000c0400a1a0a016712150a050a030a01610a020a000a08"
    "0a060a01620a01630a1a0a017712150a050a030a01610a020a000a080a060a01620a0163")


def test_parse_sequence_example():
    s2 = tf.train.SequenceExample()
    s2.feature_lists.feature_list["f"].feature.add().float_list.value.extend([7.0, 8.0])
    ctxf = {"c": tf.io.VarLenFeature(tf.int64),
            "d": tf.io.FixedLenFeature([], tf.int64, default_value=0)}
    seqf = {"f": tf.io.FixedLenSequenceFeature([2], tf.float32),
            "w": tf.io.VarLenFeature(tf.string), "r": tf.io.RaggedFeature(tf.string, "g")}
    ctx, lists, lengths = tf.io.parse_sequence_example(
        [TF_SEQUENCE, s2.SerializeToString()], ctxf, seqf)
    assert ctx["c"].values.numpy().tolist() == [4, 5] and ctx["d"].numpy().tolist() == [0, 0]
    np.testing.assert_array_equal(lists["f"].numpy(), [[[1, 2], [3, 4], [5, 6]],
                                                       [[7, 8], [0, 0], [0, 0]]])
    np.testing.assert_array_equal(lists["w"].indices.numpy(), [[0, 0, 0], [0, 2, 0], [0, 2, 1]])
    np.testing.assert_array_equal(lists["w"].dense_shape.numpy(), [2, 3, 2])
    assert lists["r"].to_list() == [[[b"a"], [], [b"b", b"c"]], []]
    assert list(lengths) == ["f"] and lengths["f"].numpy().tolist() == [3, 1]
    ctx, lists = tf.io.parse_single_sequence_example(TF_SEQUENCE, ctxf, seqf)
    assert lists["f"].shape == (3, 2) and lists["r"].to_list() == [[b"a"], [], [b"b", b"c"]]
    np.testing.assert_array_equal(lists["w"].indices.numpy(), [[0, 0], [2, 0], [2, 1]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Feature: x .*required"):
        tf.io.parse_sequence_example([TF_SEQUENCE], None,
                                     {"x": tf.io.FixedLenSequenceFeature([], tf.int64)})


def _ld(num, payload):
    """A length-delimited protobuf field (payloads < 128 bytes)."""
    return bytes([num << 3 | 2, len(payload)]) + payload


def _one_feature_example(feature):
    """An Example whose feature "k" is the serialized Feature message ``feature``."""
    return _ld(1, _ld(1, _ld(1, b"k") + _ld(2, feature)))


def test_a_feature_with_several_lists_keeps_its_first_as_tensorflow():
    # TensorFlow 2.21's parser reads the first list of a Feature message and ignores any
    # later one (protobuf itself would merge or replace it): [1] here, not [1, 2, 3]
    ints = _ld(3, _ld(1, bytes([1]))) + _ld(3, _ld(1, bytes([2, 3])))
    floats = _ld(2, _ld(1, struct.pack("<f", 1.0))) + _ld(2, _ld(1, struct.pack("<2f", 2, 3)))
    strs = _ld(1, _ld(1, b"a")) + _ld(1, _ld(1, b"b") + _ld(1, b"c"))
    mixed = _ld(3, _ld(1, bytes([7]))) + _ld(2, _ld(1, struct.pack("<f", 1.0)))
    for feature, dtype, want in ((ints, tf.int64, [1]), (floats, tf.float32, [1.0]),
                                 (strs, tf.string, [b"a"]), (mixed, tf.int64, [7]),
                                 (_ld(3, b"") + ints, tf.int64, [])):
        out = tf.io.parse_single_example(_one_feature_example(feature),
                                         {"k": tf.io.VarLenFeature(dtype)})
        assert out["k"].values.numpy().tolist() == want


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_compressed_records_are_inflated_as_they_are_read(tmp_path, kind):
    # a tiny record, then 32 MiB of zeros that compress to ~32 KiB (a "zlib bomb"): the
    # first record is read without inflating the rest, so memory (and the cost of each
    # read, which was a copy of all that was inflated) stays bounded
    p = tmp_path / "bomb"
    data = ex_mod.frame(b"hi") + bytes(32 << 20)
    p.write_bytes(gzip.compress(data, 1) if kind == "GZIP" else zlib.compress(data, 1))
    first = iter(tf.data.TFRecordDataset(str(p), kind))
    peak = _peak_bytes(lambda: next(first))
    assert peak < 4 << 20, peak                    # was 45 MB: all inflated at once
    assert next(iter(tf.data.TFRecordDataset(str(p), kind))).numpy() == b"hi"


def test_compressed_records_across_chunks_streams_and_ends(tmp_path):
    recs = [b"a" * n for n in (0, 1, 70_000, 5, 200_000, 3)]            # > the 64 KiB chunk
    framed = b"".join(ex_mod.frame(r) for r in recs)
    p = tmp_path / "two.gz"
    p.write_bytes(gzip.compress(framed[:100]) + gzip.compress(framed[100:]))   # 2 members
    assert list(tf.io.tf_record_iterator(str(p), "GZIP")) == recs
    z = tmp_path / "z"
    z.write_bytes(zlib.compress(framed))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(z), "ZLIB", buffer_size=7)] == recs
    cut = tmp_path / "cut"
    cut.write_bytes(zlib.compress(framed)[:-9])
    with pytest.raises(tf.errors.DataLossError, match="truncated"):
        list(tf.data.TFRecordDataset(str(cut), "ZLIB"))
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert list(tf.data.TFRecordDataset(str(empty), "GZIP")) == []         # as TensorFlow


def test_unreadable_record_files_are_tapeflow_errors(tmp_path, monkeypatch):
    with pytest.raises(tf.errors.FailedPreconditionError, match="Is a directory"):
        list(tf.data.TFRecordDataset(str(tmp_path)))                   # TensorFlow's class
    with pytest.raises(tf.errors.NotFoundError, match="No such file"):
        list(tf.io.tf_record_iterator(str(tmp_path / "missing")))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    p = tmp_path / "a"
    p.write_bytes(TF_RECORDS)
    monkeypatch.setattr(text_mod, "open", denied, raising=False)      # root reads anything
    with pytest.raises(tf.errors.PermissionDeniedError, match="permission denied"):
        list(tf.data.TFRecordDataset(str(p)))
