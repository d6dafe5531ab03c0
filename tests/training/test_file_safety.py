"""Files tapeflow reads but did not write (issue 13): paths read from a checkpoint's
state file or index never lead outside its directory, and only regular files of the
declared size are read -- a FIFO, /dev/zero or a gzip bomb gives a clear error,
never a hang or an out-of-memory. Each test failed on the code before the fix.

Cases that used to hang run in a subprocess with a timeout, so a regression fails
instead of hanging the suite."""

import gzip
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs (POSIX)")


def _victim(tmp_path):
    d = tmp_path / "victim"
    d.mkdir()
    (d / "ckpt-1.index.json").write_text("precious")
    (d / "ckpt-1.safetensors").write_text("precious data")
    (d / "notes.txt").write_text("precious notes")
    return d


def _saved(tmp_path, name="ckpts"):
    d = tmp_path / name
    v = tf.Variable([1.0, 2.0])
    ckpt = tf.train.Checkpoint(v=v)
    path = ckpt.save(str(d / "ckpt"))
    return d, ckpt, v, path


def _assert_untouched(victim):
    assert (victim / "ckpt-1.index.json").read_text() == "precious"
    assert (victim / "ckpt-1.safetensors").read_text() == "precious data"
    assert (victim / "notes.txt").read_text() == "precious notes"


def test_state_file_escaping_the_directory_is_refused_and_nothing_deleted(tmp_path):
    victim = _victim(tmp_path)
    d = tmp_path / "ckpts"
    d.mkdir()
    (d / "checkpoint").write_text('model_checkpoint_path: "../victim/ckpt-1"\n'
                                  'all_model_checkpoint_paths: "../victim/ckpt-1"\n')
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    with pytest.raises(errors.PermissionDeniedError) as info:
        manager = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
        manager.save()
        manager.save()
    msg = str(info.value)
    assert "../victim/ckpt-1" in msg and "checkpoint" in msg and "outside" in msg
    _assert_untouched(victim)
    with pytest.raises(errors.PermissionDeniedError):
        tf.train.latest_checkpoint(str(d))


def test_absolute_state_path_elsewhere_is_refused(tmp_path):
    victim = _victim(tmp_path)
    d = tmp_path / "ckpts"
    d.mkdir()
    (d / "checkpoint").write_text(
        f'model_checkpoint_path: {json.dumps(str(victim / "ckpt-1"))}\n')
    with pytest.raises(errors.PermissionDeniedError, match="outside"):
        tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(d))
    _assert_untouched(victim)


def test_symlink_in_the_directory_pointing_outside_is_refused(tmp_path):
    victim = _victim(tmp_path)
    d = tmp_path / "ckpts"
    d.mkdir()
    os.symlink(victim / "ckpt-1.index.json", d / "ckpt-1.index.json")
    (d / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n'
                                  'all_model_checkpoint_paths: "ckpt-1"\n')
    # resolved, ckpt-1 is outside: the manager refuses it
    os.symlink(victim, d / "link")
    (d / "checkpoint").write_text('model_checkpoint_path: "link/ckpt-1"\n'
                                  'all_model_checkpoint_paths: "link/ckpt-1"\n')
    with pytest.raises(errors.PermissionDeniedError, match="outside"):
        m = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(d),
                                       max_to_keep=1)
        m.save()
        m.save()
    _assert_untouched(victim)


def test_index_naming_a_data_file_elsewhere_is_never_deleted(tmp_path):
    victim = _victim(tmp_path)
    d, ckpt, v, path = _saved(tmp_path)
    # the next save of the same prefix deletes the old index's data file: point it out
    for name in ("../victim/notes.txt", str(victim / "notes.txt"), "..", ""):
        idx = json.loads(open(path + ".index.json").read())
        idx["data_file"] = name
        with open(path + ".index.json", "w") as f:
            json.dump(idx, f)
        with pytest.raises((errors.PermissionDeniedError, errors.DataLossError)):
            ckpt.write(path)
        _assert_untouched(victim)


def test_index_data_file_symlinked_outside_is_never_deleted_or_read(tmp_path):
    victim = _victim(tmp_path)
    d, ckpt, v, path = _saved(tmp_path)
    idx = json.loads(open(path + ".index.json").read())
    os.symlink(victim / "notes.txt", d / "evil.safetensors")
    idx["data_file"] = "evil.safetensors"
    with open(path + ".index.json", "w") as f:
        json.dump(idx, f)
    with pytest.raises(errors.PermissionDeniedError, match="outside"):
        ckpt.restore(path)
    with pytest.raises(errors.PermissionDeniedError):
        ckpt.write(path)
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    with pytest.raises(errors.PermissionDeniedError):
        m.save()
    _assert_untouched(victim)


def _in_subprocess(code, tmp_path, timeout=60):
    """Run ``code`` in a fresh interpreter; a hang fails the test instead of the suite."""
    script = tmp_path / "case.py"
    script.write_text(textwrap.dedent(code))
    try:
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=timeout, cwd=str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {timeout} s")
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@posix_only
@pytest.mark.parametrize("which", ["index", "data", "state"])
def test_fifo_in_place_of_a_file_is_an_error_not_a_hang(tmp_path, which):
    out = _in_subprocess(f"""
        import os, tapeflow as tf
        v = tf.Variable([1.0, 2.0])
        ckpt = tf.train.Checkpoint(v=v)
        path = ckpt.save(os.path.join("ckpts", "ckpt"))
        target = {{"index": path + ".index.json", "data": path + ".safetensors",
                   "state": os.path.join("ckpts", "checkpoint")}}["{which}"]
        os.unlink(target)
        os.mkfifo(target)
        try:
            ckpt.restore(tf.train.latest_checkpoint("ckpts") or path)
        except tf.errors.DataLossError as e:
            print("refused:", e)
        print(v.numpy().tolist())
    """, tmp_path)
    assert "refused:" in out and "FIFO" in out
    assert "[1.0, 2.0]" in out


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_data_file_symlinked_to_dev_zero_is_refused_before_reading(tmp_path):
    out = _in_subprocess("""
        import json, os, resource, tapeflow as tf
        # a read of /dev/zero would run into this limit instead of the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        # on the host: with a GPU default device (TAPEFLOW_DEFAULT_DEVICE=cuda:0) the
        # CUDA context needs far more address space than this limit (cudaMalloc fails
        # with cudaErrorDevicesUnavailable); what is tested is the file check, on the host
        with tf.device("cpu:0"):
            v = tf.Variable([1.0])
        ckpt = tf.train.Checkpoint(v=v)
        path = ckpt.save(os.path.join("ckpts", "ckpt"))
        data = path + ".safetensors"
        os.unlink(data)
        os.symlink("/dev/zero", data)
        try:
            ckpt.restore(path)
        except (tf.errors.DataLossError, tf.errors.PermissionDeniedError) as e:
            print("refused:", type(e).__name__, e)
    """, tmp_path)
    assert "refused:" in out


def test_oversized_data_file_is_refused_by_size_before_reading(tmp_path):
    d, ckpt, v, path = _saved(tmp_path)
    with open(path + ".safetensors", "ab") as f:
        f.write(b"\0" * 1000)
    with pytest.raises(errors.DataLossError, match="bytes"):
        ckpt.restore(path)


def test_oversized_index_is_refused(tmp_path, monkeypatch):
    from tapeflow.train import checkpoint as ck
    d, ckpt, v, path = _saved(tmp_path)
    monkeypatch.setattr(ck, "MAX_INDEX_BYTES", 64)
    with pytest.raises(errors.DataLossError, match="more than the 64"):
        ckpt.restore(path)


# --- IDX files -------------------------------------------------------------------------

def _idx_header(shape, code=0x08):
    return bytes([0, 0, code, len(shape)]) + b"".join(d.to_bytes(4, "big") for d in shape)


def test_gzip_bomb_idx_stops_at_the_declared_size(tmp_path):
    p = tmp_path / "bomb-idx3-ubyte.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(_idx_header((1, 2, 2)) + b"\1\2\3\4")
        chunk = b"\0" * (1 << 20)
        for _ in range(256):                 # 256 MiB inflated, ~250 KiB on disk
            f.write(chunk)
    assert p.stat().st_size < 2 << 20
    with pytest.raises(errors.DataLossError, match="declares shape"):
        tf.datasets.read_idx(p)


def test_idx_declaring_a_huge_shape_is_refused_before_reading(tmp_path):
    p = tmp_path / "huge-idx3-ubyte"
    p.write_bytes(_idx_header((60000, 50000, 50000)) + b"\0" * 16)
    with pytest.raises(errors.DataLossError, match="more than the"):
        tf.datasets.read_idx(p)


def test_idx_truncated_or_padded_is_refused(tmp_path):
    p = tmp_path / "x-idx1-ubyte"
    p.write_bytes(_idx_header((4,)) + b"\1\2")
    with pytest.raises(errors.DataLossError, match="has 2 bytes"):
        tf.datasets.read_idx(p)
    p.write_bytes(_idx_header((4,)) + b"\1\2\3\4\5")
    with pytest.raises(errors.DataLossError, match="more bytes"):
        tf.datasets.read_idx(p)


def test_idx_still_reads_valid_files(tmp_path):
    p = tmp_path / "ok-idx3-ubyte.gz"
    with gzip.open(p, "wb") as f:
        f.write(_idx_header((2, 2, 2), 0x0C) + np.arange(8, dtype=">i4").tobytes())
    a = tf.datasets.read_idx(p)
    assert a.shape == (2, 2, 2) and a.dtype == np.int32
    np.testing.assert_array_equal(a.reshape(-1), np.arange(8))


@posix_only
def test_idx_fifo_is_refused(tmp_path):
    out = _in_subprocess("""
        import os, tapeflow as tf
        os.mkfifo("f-idx1-ubyte")
        try:
            tf.datasets.read_idx("f-idx1-ubyte")
        except tf.errors.DataLossError as e:
            print("refused:", e)
    """, tmp_path)
    assert "refused:" in out and "FIFO" in out
