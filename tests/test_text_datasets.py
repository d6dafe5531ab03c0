"""tf.data over text files: TextLineDataset, CsvDataset, make_csv_dataset, list_files, and
tf.io.decode_csv (issue 47)."""

import gzip
import io
import os
import tracemalloc
import zlib

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.data import text as text_mod


@pytest.fixture
def files(tmp_path):
    def write(name, data):
        p = tmp_path / name
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        return str(p)
    return write


def _lines(ds):
    return [x.numpy() for x in ds]


# --- TextLineDataset ------------------------------------------------------------------------

def test_lines_without_newlines_in_file_order(files):
    a = files("a.txt", "one\r\ntwo\n\nthree")
    b = files("b.txt", "four\n")
    ds = tf.data.TextLineDataset([a, b])
    assert _lines(ds) == [b"one", b"two", b"", b"three", b"four"]
    assert repr(ds) == ("<TextLineDatasetV2 element_spec=TensorSpec(shape=(), "
                        "dtype=tf.string, name=None)>")
    line = next(iter(ds))
    assert line.dtype == tf.string and line.shape == ()
    # a string tensor of names, and a Dataset of them, read the same files
    assert _lines(tf.data.TextLineDataset(tf.constant([b]))) == [b"four"]
    names = tf.data.Dataset.from_tensor_slices([b, a])
    assert _lines(tf.data.TextLineDataset(names))[:2] == [b"four", b"one"]


def test_compressed_files_and_interleaved_reads(files):
    g = files("g.txt.gz", gzip.compress(b"g1\ng2\n"))
    z = files("z.txt.z", zlib.compress(b"z1\nz2\nz3"))
    assert _lines(tf.data.TextLineDataset(g, compression_type="GZIP")) == [b"g1", b"g2"]
    assert _lines(tf.data.TextLineDataset(z, compression_type="ZLIB")) == [b"z1", b"z2", b"z3"]
    a, b = files("a", "a1\na2\na3\n"), files("b", "b1\n")
    assert _lines(tf.data.TextLineDataset([a, b], num_parallel_reads=2)) == [
        b"a1", b"b1", b"a2", b"a3"]


def test_text_line_errors(files, tmp_path):
    later = tf.data.TextLineDataset(str(tmp_path / "nope.txt"))   # read when iterated, as TF
    with pytest.raises(tf.errors.NotFoundError, match="nope.txt: No such file"):
        next(iter(later))
    with pytest.raises(tf.errors.InvalidArgumentError, match="compression_type"):
        tf.data.TextLineDataset(files("a", "x"), compression_type="BZ2")
    with pytest.raises(tf.errors.InvalidTypeError, match="file name"):
        tf.data.TextLineDataset(3)
    with pytest.raises(tf.errors.UnimplementedError, match="local"):
        tf.data.TextLineDataset("gs://bucket/a.txt")
    with pytest.raises(tf.errors.InvalidArgumentError, match="GZIP"):
        list(tf.data.TextLineDataset(files("plain", "not gzip"), compression_type="GZIP"))


def test_text_line_iterator_checkpoint(files, tmp_path):
    path = files("a.txt", "".join(f"line{i}\n" for i in range(6)))
    it = iter(tf.data.TextLineDataset(path).skip(1))
    ckpt = tf.train.Checkpoint(it=it)
    assert next(it).numpy() == b"line1"
    saved = ckpt.save(str(tmp_path / "ck" / "c"))
    assert [next(it).numpy() for _ in range(2)] == [b"line2", b"line3"]
    ckpt.restore(saved)
    assert next(it).numpy() == b"line2"


# --- decode_csv -------------------------------------------------------------------------------

def test_decode_csv_types_defaults_and_quotes():
    n, x, s = tf.io.decode_csv(["1,2.5,a", '3,,"b, ""c"""', "5,7,"], [[0], [9.0], ["?"]])
    assert n.dtype == tf.int32 and n.numpy().tolist() == [1, 3, 5]
    assert x.dtype == tf.float32 and x.numpy().tolist() == [2.5, 9.0, 7.0]
    assert s.numpy().tolist() == [b"a", b'b, "c"', b"?"]
    # any shape of records; scalars give scalars; int64 / float64 / na_value / select_cols
    a, = tf.io.decode_csv([["1"], ["NA"]], [tf.constant([4], tf.int64)], na_value="NA")
    assert a.shape == (2, 1) and a.dtype == tf.int64 and a.numpy().ravel().tolist() == [1, 4]
    one = tf.io.decode_csv("x;2", [[""], tf.constant([0.0], tf.float64)], field_delim=";")
    assert one[0].shape == () and one[1].dtype == tf.float64
    picked = tf.io.decode_csv(["1,2,3"], [[0], [0]], select_cols=[0, 2])
    assert [int(t[0]) for t in picked] == [1, 3]
    # no quoting: quotes are kept as bytes
    q, = tf.io.decode_csv(['"a"'], [[""]], use_quote_delim=False)
    assert q.numpy().tolist() == [b'"a"']


@pytest.mark.parametrize("records, defaults, match", [
    (["1,2"], [[0], [0], [0]], "expected 3 fields but record 0 has 2"),
    (["a,2"], [[0], [0]], "field 0 in record 0 is not a valid int32: a"),
    (["99999999999"], [[0]], "not a valid int32"),
    (["1_0"], [[0.0]], "not a valid float32"),
    ([",2"], [[], [0]], "field 0 is required but missing in record 0"),
    (['a"b'], [[""]], "unquoted field cannot have quotes"),
    (['"ab'], [[""]], "closing quote"),
])
def test_decode_csv_bad_records(records, defaults, match):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        tf.io.decode_csv(records, defaults)


def test_decode_csv_bad_arguments():
    with pytest.raises(tf.errors.InvalidTypeError, match="dtype"):
        tf.io.decode_csv(["1"], [tf.int32])
    with pytest.raises(tf.errors.InvalidArgumentError, match="one character"):
        tf.io.decode_csv(["1"], [[0]], field_delim=",,")
    with pytest.raises(tf.errors.InvalidArgumentError, match="string tensor"):
        tf.io.decode_csv(tf.constant([1]), [[0]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="CSV columns are"):
        tf.io.decode_csv(["1"], [[True]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="select_cols has 2"):
        tf.io.decode_csv(["1,2"], [[0]], select_cols=[0, 1])
    with pytest.raises(tf.errors.InvalidTypeError, match="record_defaults"):
        tf.io.decode_csv(["1"], [])


def test_decode_csv_in_function_and_as_tf1_name():
    @tf.function
    def parse(lines):
        a, b = tf.io.decode_csv(lines, [[0], [""]])
        return a * 2, b

    a, b = parse(tf.constant(["1,x", "2,y"]))
    assert a.numpy().tolist() == [2, 4] and b.numpy().tolist() == [b"x", b"y"]
    a, _ = parse(tf.constant(["5,z", "6,w"]))
    assert a.numpy().tolist() == [10, 12]
    assert tf.decode_csv is tf.io.decode_csv


def test_text_lines_mapped_through_decode_csv_and_padded(files):
    """The TF 1 example programs' pipeline (rnn_colorbot: a CSV of color names)."""
    path = files("colors.csv", "name,r,g,b\nteal,0,128,128\nsky blue,135,206,235\nred,255,0,0\n")

    def parse(line):
        items = tf.io.decode_csv(line, [[""], [0.0], [0.0], [0.0]])
        return tf.stack(items[1:]) / 255.0, tf.strings.length(items[0])

    ds = tf.data.TextLineDataset(path).skip(1).map(parse).padded_batch(2, ([None], []))
    (rgb, n), (rgb2, n2) = list(ds)
    assert rgb.shape == (2, 3) and n.numpy().tolist() == [4, 8] and n2.numpy().tolist() == [3]
    np.testing.assert_allclose(rgb2.numpy(), [[1.0, 0.0, 0.0]])


# --- CsvDataset ---------------------------------------------------------------------------------

def test_csv_dataset(files):
    path = files("t.csv", 'a,b,c\n1,2.5,x\n3,,"y,z"\n')
    ds = tf.data.experimental.CsvDataset(path, [tf.int64, 0.0, "d"], header=True)
    assert [tuple(v.numpy() for v in row) for row in ds] == [(1, 2.5, b"x"), (3, 0.0, b"y,z")]
    assert repr(ds).startswith("<CsvDatasetV2 element_spec=(TensorSpec(shape=(), "
                               "dtype=tf.int64, name=None), ")
    required = tf.data.experimental.CsvDataset(path, [tf.int32, tf.float32, tf.string],
                                               header=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="field 1 is required"):
        list(required)
    sel = tf.data.experimental.CsvDataset(path, [0, ""], header=True, select_cols=[0, 2])
    assert [int(a) for a, _ in sel] == [1, 3]
    exc = tf.data.experimental.CsvDataset(path, [0, ""], header=True, exclude_cols=[1])
    assert [c.numpy() for _, c in exc] == [b"x", b"y,z"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="select_cols has 1"):
        tf.data.experimental.CsvDataset(path, [0, ""], select_cols=[0])


def test_csv_dataset_maps_to_stacked_rows(files):
    path = files("m.csv", "1,2,3,4\n,2,3,4\n1,2,,4\n")
    ds = tf.data.experimental.CsvDataset(path, [9] * 4).map(lambda *items: tf.stack(items))
    assert [r.numpy().tolist() for r in ds] == [[1, 2, 3, 4], [9, 2, 3, 4], [1, 2, 9, 4]]
    assert ds.element_spec == tf.TensorSpec((4,), tf.int32)


# --- make_csv_dataset, list_files ------------------------------------------------------------

def test_make_csv_dataset_infers_types_and_splits_the_label(files):
    path = files("t.csv", "n,x,s,big\n1,2,a,1\n3,4.5,,99999999999\n5,,c,2\n")
    ds = tf.data.experimental.make_csv_dataset(path, batch_size=2, label_name="n",
                                               shuffle=False, num_epochs=1)
    feats, label = next(iter(ds))
    assert list(feats) == ["x", "s", "big"]
    assert label.dtype == tf.int32 and label.numpy().tolist() == [1, 3]
    assert feats["x"].dtype == tf.float32 and feats["s"].numpy().tolist() == [b"a", b""]
    assert feats["big"].dtype == tf.int64
    assert repr(ds.element_spec[1]) == "TensorSpec(shape=(None,), dtype=tf.int32, name=None)"
    assert [b[1].shape[0] for b in ds] == [2, 1]
    # forever (num_epochs=None) drops the short batch; select_columns; defaults given
    ds = tf.data.experimental.make_csv_dataset(
        path, batch_size=2, select_columns=["n", "s"], column_defaults=[0, "?"],
        shuffle=True, shuffle_seed=3)
    feats = next(iter(ds))
    assert list(feats) == ["n", "s"] and feats["n"].shape == (2,)
    assert ds.element_spec["n"].shape == (2,)


def test_make_csv_dataset_errors(files, tmp_path):
    path = files("t.csv", "a,b\n1,2\n")
    with pytest.raises(tf.errors.InvalidArgumentError, match="label_name 'z'"):
        tf.data.experimental.make_csv_dataset(path, 2, label_name="z")
    with pytest.raises(tf.errors.NotFoundError, match="no files match"):
        tf.data.experimental.make_csv_dataset(str(tmp_path / "*.tsv"), 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="column_names"):
        tf.data.experimental.make_csv_dataset(path, 2, header=False)
    with pytest.raises(tf.errors.InvalidArgumentError, match="column_defaults has 1"):
        tf.data.experimental.make_csv_dataset(path, 2, column_defaults=[0])
    bad = files("bad.csv", "a,b\n1,2\nx,3\n4,5\n")
    ds = tf.data.experimental.make_csv_dataset(bad, 4, column_defaults=[0, 0], shuffle=False,
                                               num_epochs=1, ignore_errors=True)
    assert next(iter(ds))["a"].numpy().tolist() == [1, 4]


def test_list_files(files, tmp_path):
    for name in ("b.txt", "a.txt", "c.csv"):
        files(name, "x")
    pattern = str(tmp_path / "*.txt")
    ordered = tf.data.Dataset.list_files(pattern, shuffle=False)
    assert [os.path.basename(p.numpy().decode()) for p in ordered] == ["a.txt", "b.txt"]
    assert sorted(p.numpy() for p in tf.data.Dataset.list_files(pattern, seed=1)) == \
        [p.numpy() for p in ordered]
    with pytest.raises(tf.errors.NotFoundError, match="no files match"):
        tf.data.Dataset.list_files(str(tmp_path / "*.png"))


def test_zlib_and_gzip_text_is_inflated_as_it_is_read(files):
    # a first line, then 32 MiB of zeros that compress to ~32 KiB: reading the first line
    # must not inflate the whole file (a small file could otherwise need gigabytes)
    data = b"first\n" + bytes(32 << 20)
    for kind, packed in (("ZLIB", zlib.compress(data, 1)), ("GZIP", gzip.compress(data, 1))):
        lines = iter(tf.data.TextLineDataset(files("bomb." + kind, packed), compression_type=kind))
        tracemalloc.start()
        try:
            assert next(lines).numpy() == b"first"
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, (kind, peak)


def test_inflate_reader_streams_in_bounded_pieces():
    packed = zlib.compress(b"ab\n" * 100_000) + zlib.compress(b"tail")       # two streams
    raw = text_mod._Inflate(io.BytesIO(packed), 15)
    buf, got = bytearray(1000), []
    while n := raw.readinto(buf):
        assert n <= 1000
        got.append(bytes(buf[:n]))
    assert b"".join(got) == b"ab\n" * 100_000 + b"tail"
    assert text_mod._Inflate(io.BytesIO(b""), 15).read() == b""               # as TensorFlow
    with pytest.raises(EOFError, match="truncated"):
        text_mod._Inflate(io.BytesIO(packed[:40]), 15).read()


def test_compressed_text_line_errors(files, tmp_path, monkeypatch):
    with pytest.raises(tf.errors.InvalidArgumentError, match="ZLIB.*truncated"):
        list(tf.data.TextLineDataset(files("cut", zlib.compress(b"a\nb\n" * 99)[:-5]),
                                     compression_type="ZLIB"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="ZLIB"):
        list(tf.data.TextLineDataset(files("plain", "not zlib"), compression_type="ZLIB"))
    with pytest.raises(tf.errors.FailedPreconditionError, match="Is a directory"):
        list(tf.data.TextLineDataset(str(tmp_path)))                    # TensorFlow's class

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    path = files("a.txt", "x\n")
    monkeypatch.setattr(text_mod, "open", denied, raising=False)      # root reads anything
    with pytest.raises(tf.errors.PermissionDeniedError, match="permission denied"):
        list(tf.data.TextLineDataset(path))
