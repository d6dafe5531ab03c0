"""Crafted files (issue 30, item 6): every reader of a file tapeflow writes or loads --
checkpoints (index, data, state file), TensorBoard event files, IDX and ``.npz`` data
sets -- raises ``DataLossError`` naming the file, before any large allocation, for a
file made to break it: JSON nested 100,000 deep (was ``RecursionError``), a record or
header declaring a huge length (was a plain ``MemoryError``), a gzip bomb. The tests
of those cases failed before the fix; the others (a nested safetensors header, a
truncated last record, small or real IDX/npz files) guard paths that already held.

The files are made in ``tmp_path`` without the memory or disk they declare: the gzip
bomb is one compressed 64 MiB member of zeros repeated (gzip streams concatenate), a
few MiB on disk for 4 GiB inflated. Cases that would allocate gigabytes on the old
code run in a subprocess under an address-space limit, so the old code failed with
``MemoryError`` instead of paging the machine.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors

DEEP = 100_000
has_rlimit = pytest.mark.skipif(sys.platform != "linux", reason="needs RLIMIT_AS (Linux)")


def _deep_json(n=DEEP):
    return ("[" * n + "]" * n).encode()


def _run_limited(code, tmp_path, limit_gib=3, timeout=120):
    """Run ``code`` in a fresh interpreter whose address space is capped; returns stdout."""
    script = tmp_path / "case.py"
    script.write_text("import resource\n"
                      f"resource.setrlimit(resource.RLIMIT_AS, ({limit_gib} << 30, "
                      f"{limit_gib} << 30))\n" + textwrap.dedent(code))
    env = dict(os.environ, TAPEFLOW_DEFAULT_DEVICE="cpu:0")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=timeout, cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# --- checkpoints ------------------------------------------------------------------------------

def _saved(tmp_path):
    v = tf.Variable([1.0, 2.0])
    ckpt = tf.train.Checkpoint(v=v)
    return ckpt, v, ckpt.write(str(tmp_path / "ckpt"))


def test_deeply_nested_index_is_data_loss_naming_the_file(tmp_path):
    ckpt, v, path = _saved(tmp_path)
    with open(path + ".index.json", "wb") as f:
        f.write(_deep_json())
    for read in (ckpt.restore, tf.train.list_variables, tf.train.load_checkpoint):
        with pytest.raises(errors.DataLossError, match="ckpt.index.json") as info:
            read(path)
        assert "nested" in str(info.value)
    assert v.numpy().tolist() == [1.0, 2.0]


def test_deeply_nested_index_blocks_no_later_write(tmp_path):
    # before: writing over it raised RecursionError; it is not a checkpoint index, so
    # the write refuses to replace it (and names it)
    ckpt, v, path = _saved(tmp_path)
    with open(path + ".index.json", "wb") as f:
        f.write(_deep_json())
    with pytest.raises(errors.FailedPreconditionError, match="ckpt.index.json"):
        ckpt.write(path)


def test_deeply_nested_safetensors_header_is_data_loss(tmp_path):
    # a data file whose size and SHA-256 the index agrees with, holding a header nested
    # 100,000 deep
    ckpt, v, path = _saved(tmp_path)
    header = _deep_json()
    blob = struct.pack("<Q", len(header)) + header
    data = path + ".safetensors"
    with open(data, "wb") as f:
        f.write(blob)
    idx = json.loads(open(path + ".index.json").read())
    idx.update(data_bytes=len(blob), data_sha256=hashlib.sha256(blob).hexdigest())
    with open(path + ".index.json", "w") as f:
        json.dump(idx, f)
    with pytest.raises(errors.DataLossError, match="ckpt.safetensors"):
        ckpt.restore(path)


# --- event files ------------------------------------------------------------------------------

def _masked(data):
    from tapeflow.summary import _records
    return _records.masked_crc32c(data)


def _record_header(length):
    head = struct.pack("<Q", length)
    return head + struct.pack("<I", _masked(head))


@pytest.mark.parametrize("length", [2 ** 62, 2 ** 40, 2 ** 31 + 5])
def test_event_record_declaring_a_huge_length_is_data_loss(tmp_path, length):
    pytest.importorskip("crc32c")
    writer = tf.summary.create_file_writer(str(tmp_path))
    writer.close()
    path = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path) if "tfevents" in f][0]
    good = list(tf.summary.read_records(path))
    with open(path, "ab") as f:
        f.write(_record_header(length) + b"\0" * 64)
    with pytest.raises(errors.DataLossError, match="tfevents") as info:
        list(tf.summary.read_records(path))
    assert str(length) in str(info.value)
    assert len(good) == 1


def test_event_record_length_is_checked_before_reading(tmp_path):
    # 2^62 with a valid length CRC: before, f.read(2**62 + 4) raised a plain MemoryError
    # (OverflowError on some builds); a length the file cannot hold is refused up front
    pytest.importorskip("crc32c")
    path = tmp_path / "events.out.tfevents.crafted"
    path.write_bytes(_record_header(2 ** 62) + b"\0" * 16)
    with pytest.raises(errors.DataLossError, match="events.out.tfevents.crafted"):
        list(tf.summary.read_records(str(path)))


def test_a_truncated_last_record_still_ends_quietly(tmp_path):
    # a writer that is still running: a plausible length with its data not all there yet
    pytest.importorskip("crc32c")
    writer = tf.summary.create_file_writer(str(tmp_path))
    writer.close()
    path = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path) if "tfevents" in f][0]
    with open(path, "ab") as f:
        f.write(_record_header(1000) + b"\0" * 10)
    assert len(list(tf.summary.read_records(path))) == 1


def test_corrupt_record_is_data_loss(tmp_path):
    pytest.importorskip("crc32c")
    path = tmp_path / "events.out.tfevents.bad"
    head = struct.pack("<Q", 4)
    path.write_bytes(head + struct.pack("<I", _masked(head) ^ 1) + b"abcd" + b"\0" * 4)
    with pytest.raises(errors.DataLossError, match="corrupt record length"):
        list(tf.summary.read_records(str(path)))


# --- IDX files --------------------------------------------------------------------------------

def _idx_header(shape, code=0x08):
    return bytes([0, 0, code, len(shape)]) + b"".join(d.to_bytes(4, "big") for d in shape)


def _gzip_bomb(path, header, inflated):
    """A gzip file of ``header`` then ``inflated`` zero bytes, built from one compressed
    64 MiB member of zeros repeated: a few MiB on disk, made in well under a second."""
    chunk = 64 << 20
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9) as g:
        g.write(b"\0" * chunk)
    member = buf.getvalue()
    with open(path, "wb") as f:
        f.write(gzip.compress(header))
        for _ in range(inflated // chunk):
            f.write(member)
        f.write(gzip.compress(b"\0" * (inflated % chunk)))


@has_rlimit
def test_idx_gzip_bomb_of_4_gib_is_data_loss_before_allocating(tmp_path):
    shape = (1, 65536, 65535)                       # 4 GiB - 64 KiB of uint8, under the cap
    nbytes = 65536 * 65535
    p = tmp_path / "bomb-idx3-ubyte.gz"
    _gzip_bomb(p, _idx_header(shape), nbytes)
    assert p.stat().st_size < 8 << 20
    out = _run_limited(f"""
        import tapeflow as tf
        try:
            tf.datasets.read_idx({str(p)!r})
        except tf.errors.DataLossError as e:
            print("refused:", e)
        """, tmp_path)
    assert "refused:" in out and "bomb-idx3-ubyte.gz" in out and "ratio" in out


def test_idx_gzip_declaring_far_more_than_it_holds_is_refused_unread(tmp_path):
    # a tiny gzip file whose header declares 3 GiB: refused from the sizes alone
    p = tmp_path / "small-idx3-ubyte.gz"
    p.write_bytes(gzip.compress(_idx_header((3, 1024, 1 << 20)) + b"\0" * 100))
    with pytest.raises(errors.DataLossError, match="small-idx3-ubyte.gz"):
        tf.datasets.read_idx(p)


def test_idx_plain_file_size_is_checked_before_reading(tmp_path):
    p = tmp_path / "plain-idx3-ubyte"
    p.write_bytes(_idx_header((2, 1 << 15, 1 << 15)) + b"\0" * 100)
    with pytest.raises(errors.DataLossError, match="plain-idx3-ubyte"):
        tf.datasets.read_idx(p)


def test_idx_real_files_still_read(tmp_path):
    # a compressible but real payload (a ratio of about 30) and a small all-zero file
    # (ratio ~500, but tiny) both read
    rng = np.random.default_rng(0)
    x = (rng.random((200, 28, 28)) < 0.03).astype(np.uint8) * 255
    p = tmp_path / "img-idx3-ubyte.gz"
    p.write_bytes(gzip.compress(_idx_header(x.shape) + x.tobytes()))
    np.testing.assert_array_equal(tf.datasets.read_idx(p), x)
    z = tmp_path / "labels-idx1-ubyte.gz"
    z.write_bytes(gzip.compress(_idx_header((60000,)) + bytes(60000)))
    assert tf.datasets.read_idx(z).shape == (60000,)


# --- .npz data sets ---------------------------------------------------------------------------

def _npy_header(shape, descr="|u1"):
    d = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)!r}, }}"
    head = d.encode("latin1")
    pad = 64 - (10 + len(head) + 1) % 64
    head += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head


@has_rlimit
def test_npz_declaring_a_huge_array_is_data_loss(tmp_path):
    # mnist.npz (Keras' file) whose x_train header declares 16 GiB: before, np.load
    # allocated it (MemoryError under the limit)
    p = tmp_path / "mnist.npz"
    small = {"y_train": np.zeros(3, np.uint8), "x_test": np.zeros((1, 2, 2), np.uint8),
             "y_test": np.zeros(1, np.uint8)}
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x_train.npy", _npy_header((4, 1 << 16, 1 << 16)) + b"\0" * 64)
        for k, a in small.items():
            buf = io.BytesIO()
            np.save(buf, a)
            z.writestr(k + ".npy", buf.getvalue())
    out = _run_limited(f"""
        import tapeflow as tf
        try:
            tf.datasets.mnist.load_data({str(p)!r})
        except tf.errors.DataLossError as e:
            print("refused:", e)
        """, tmp_path)
    assert "refused:" in out and "mnist.npz" in out and "x_train" in out


def test_npz_real_file_still_loads(tmp_path):
    p = tmp_path / "mnist.npz"
    arrays = {"x_train": np.arange(2 * 28 * 28, dtype=np.uint8).reshape(2, 28, 28),
              "y_train": np.array([3, 4], np.uint8),
              "x_test": np.ones((1, 28, 28), np.uint8), "y_test": np.array([7], np.uint8)}
    np.savez_compressed(p, **arrays)
    (x_train, y_train), (x_test, y_test) = tf.datasets.mnist.load_data(str(p))
    np.testing.assert_array_equal(x_train, arrays["x_train"])
    assert y_train.tolist() == [3, 4] and y_test.tolist() == [7] and x_test.shape == (1, 28, 28)


def test_npz_that_is_not_a_zip_is_data_loss(tmp_path):
    p = tmp_path / "mnist.npz"
    p.write_bytes(zlib.compress(b"nope"))
    with pytest.raises(errors.DataLossError, match="mnist.npz"):
        tf.datasets.mnist.load_data(str(p))
