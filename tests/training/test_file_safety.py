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
    # (issue 30: the save goes on, and deletes nothing that is not its own)
    for name in ("../victim/notes.txt", str(victim / "notes.txt"), "..", ""):
        idx = json.loads(open(path + ".index.json").read())
        idx["data_file"] = name
        with open(path + ".index.json", "w") as f:
            json.dump(idx, f)
        ckpt.write(path)
        _assert_untouched(victim)
        _assert_restores(ckpt, v, path)


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
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    m.save()                          # rotates ckpt-1 out: its index names the link
    assert os.path.islink(d / "evil.safetensors")
    _assert_untouched(victim)
    ckpt.write(path)
    assert os.path.islink(d / "evil.safetensors")
    _assert_untouched(victim)
    _assert_restores(ckpt, v, path)


def _assert_restores(ckpt, v, path):
    """``path`` holds ``v``'s current value and restores it."""
    want = v.numpy().copy()
    v.assign(np.full(want.shape, -7.0, want.dtype))
    ckpt.restore(path)
    np.testing.assert_array_equal(v.numpy(), want)


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
    from tapeflow.train.checkpoint import file_format as ck
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


# --- a checkpoint deletes only its own files (issue 30) ------------------------------------
#
# A stale or planted ``<prefix>.index.json`` names a file as "the previous data file";
# re-saving the prefix, CheckpointManager rotation and Saver rotation used to delete
# whatever it named inside the directory. Now they delete only files the checkpoint
# wrote: by name (derived from its prefix) and by content (its own header). Each test
# failed before: the file was deleted (or replaced), or the save raised.

def _plant(index_path, data_file):
    """Make the index at ``index_path`` name ``data_file`` (keeping its format)."""
    idx = json.loads(open(index_path).read())
    idx["data_file"] = data_file
    with open(index_path, "w") as f:
        json.dump(idx, f)


def _user_dir(tmp_path):
    d = tmp_path / "work"
    d.mkdir()
    (d / "important.txt").write_text("the user's data")
    return d


def _one_ckpt(d, value=(1.0, 2.0)):
    v = tf.Variable(list(value))
    return tf.train.Checkpoint(v=v), v


def test_rewrite_keeps_a_sibling_a_planted_index_names(tmp_path):
    # the case: before, important.txt was deleted as "the previous data file"
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    path = ckpt.write(str(d / "ckpt"))
    _plant(path + ".index.json", "important.txt")
    v.assign([3.0, 4.0])
    ckpt.write(path)
    assert (d / "important.txt").read_text() == "the user's data"
    _assert_restores(ckpt, v, path)
    # a planted index written from scratch, with no checkpoint there before
    (d / "fresh.index.json").write_text(json.dumps(
        {"format": "tapeflow-checkpoint", "version": 1, "data_file": "important.txt"}))
    ckpt.write(str(d / "fresh"))
    assert (d / "important.txt").read_text() == "the user's data"
    _assert_restores(ckpt, v, str(d / "fresh"))


@pytest.mark.parametrize("named", ["..", "../x", "absolute", "sub", "."])
def test_rewrite_keeps_parents_escapes_and_absolute_paths(tmp_path, named):
    d = _user_dir(tmp_path)
    (tmp_path / "x").write_text("outside")
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text("inner")
    ckpt, v = _one_ckpt(d)
    path = ckpt.write(str(d / "ckpt"))
    _plant(path + ".index.json", str(d / "important.txt") if named == "absolute" else named)
    ckpt.write(path)                      # before: PermissionDeniedError / DataLossError
    assert (d / "important.txt").read_text() == "the user's data"
    assert (tmp_path / "x").read_text() == "outside"
    assert (d / "sub" / "inner.txt").read_text() == "inner"
    _assert_restores(ckpt, v, path)


@posix_only
@pytest.mark.parametrize("target", ["file", "directory"])
@pytest.mark.parametrize("link_name", ["link", "ckpt.safetensors"])
def test_rewrite_keeps_symlinks_the_index_names(tmp_path, target, link_name):
    # before: a link inside the directory (to a file or a directory in it) was unlinked
    d = _user_dir(tmp_path)
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text("inner")
    ckpt, v = _one_ckpt(d)
    path = ckpt.write(str(d / "other"))          # (the prefix "ckpt" has no data file yet)
    path = str(d / "ckpt")
    os.replace(d / "other.index.json", path + ".index.json")
    os.replace(d / "other.safetensors", d / "kept.safetensors")
    os.symlink(d / ("important.txt" if target == "file" else "sub"), d / link_name)
    _plant(path + ".index.json", link_name)
    ckpt.write(path)
    assert os.path.islink(d / link_name)
    assert (d / "important.txt").read_text() == "the user's data"
    assert (d / "sub" / "inner.txt").read_text() == "inner"
    _assert_restores(ckpt, v, path)
    ckpt.write(path)                             # and once more: alternates around the link
    assert os.path.islink(d / link_name)
    _assert_restores(ckpt, v, path)


def test_a_file_with_the_data_name_but_foreign_content_is_kept(tmp_path):
    # before: an index naming ckpt.safetensors (the prefix's own data name) got it deleted
    # even when it held someone else's bytes; and with no index, the save replaced it
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    path = str(d / "ckpt")
    (d / "ckpt.safetensors").write_bytes(b"not a checkpoint: the user's bytes")
    ckpt.write(path)                             # no index yet: must not replace it
    assert (d / "ckpt.safetensors").read_bytes() == b"not a checkpoint: the user's bytes"
    _assert_restores(ckpt, v, path)
    _plant(path + ".index.json", "ckpt.safetensors")
    ckpt.write(path)
    assert (d / "ckpt.safetensors").read_bytes() == b"not a checkpoint: the user's bytes"
    _assert_restores(ckpt, v, path)


def test_another_prefixs_data_file_is_never_deleted_or_replaced(tmp_path):
    # a tapeflow data file of the prefix "ckpt.1" named by an index of the prefix "ckpt":
    # right format, wrong owner. Before, re-saving "ckpt" also wrote its second data file
    # over "ckpt.1.safetensors", the data of the checkpoint "ckpt.1"
    d = _user_dir(tmp_path)
    a, va = _one_ckpt(d, (1.0, 1.0))
    b, vb = _one_ckpt(d, (2.0, 2.0))
    pa, pb = a.write(str(d / "ckpt.1")), b.write(str(d / "ckpt"))
    b.write(pb)
    b.write(pb)
    _plant(pb + ".index.json", "ckpt.1.safetensors")
    b.write(pb)
    _assert_restores(a, va, pa)
    _assert_restores(b, vb, pb)


def test_a_users_file_at_the_index_name_is_refused_not_replaced(tmp_path):
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    (d / "ckpt.index.json").write_text("my notes, not JSON")
    with pytest.raises(errors.FailedPreconditionError, match="never replaces"):
        ckpt.write(str(d / "ckpt"))
    assert (d / "ckpt.index.json").read_text() == "my notes, not JSON"
    os.unlink(d / "ckpt.index.json")
    if hasattr(os, "symlink"):
        os.symlink(d / "important.txt", d / "ckpt.index.json")
        with pytest.raises(errors.FailedPreconditionError, match="symbolic link"):
            ckpt.write(str(d / "ckpt"))
        assert os.path.islink(d / "ckpt.index.json")
    assert (d / "important.txt").read_text() == "the user's data"
    assert sorted(os.listdir(d)) == ["ckpt.index.json", "important.txt"][
        0 if hasattr(os, "symlink") else 1:]


def test_a_users_file_named_checkpoint_is_refused_not_replaced(tmp_path):
    d = _user_dir(tmp_path)
    (d / "checkpoint").write_text("my notes about the run\n")
    ckpt, v = _one_ckpt(d)
    with pytest.raises(errors.FailedPreconditionError, match="checkpoint"):
        ckpt.save(str(d / "ckpt"))
    assert (d / "checkpoint").read_text() == "my notes about the run\n"
    assert int(ckpt.save_counter) == 0
    assert sorted(os.listdir(d)) == ["checkpoint", "important.txt"]


def test_manager_rotation_keeps_what_a_planted_index_names(tmp_path):
    # before: rotating ckpt-1 out deleted important.txt
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    first = m.save()
    _plant(first + ".index.json", "important.txt")
    second = m.save()
    assert not os.path.exists(first + ".index.json")
    assert (d / "important.txt").read_text() == "the user's data"
    _assert_restores(ckpt, v, second)


def test_manager_rotates_only_its_own_checkpoints(tmp_path):
    # a state file listing another checkpoint of the directory ("best", written by
    # Checkpoint.write): before, the manager's rotation deleted it
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    best = ckpt.write(str(d / "best"))
    (d / "checkpoint").write_text('model_checkpoint_path: "best"\n'
                                  'all_model_checkpoint_paths: "best"\n')
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    m.save()
    m.save()
    assert os.path.exists(best + ".index.json") and os.path.exists(best + ".safetensors")
    _assert_restores(ckpt, v, best)
    assert [os.path.basename(p) for p in m.checkpoints] == ["ckpt-2"]


def test_saver_rotation_keeps_what_a_planted_index_names(tmp_path):
    d = _user_dir(tmp_path)
    x = tf.Variable(1.0, name="x")
    saver = tf.Saver([x], max_to_keep=1)
    first = saver.save(str(d / "model"), global_step=1)
    _plant(first + ".index.json", "important.txt")
    second = saver.save(str(d / "model"), global_step=2)
    assert (d / "important.txt").read_text() == "the user's data"
    assert not os.path.exists(first + ".index.json")
    x.assign(5.0)
    saver.restore(second)
    assert float(x) == 1.0


def test_rotation_still_deletes_its_own_files(tmp_path):
    # the checks do not stop real clean-up: rotated and re-saved data files go away
    d = tmp_path / "run"
    ckpt, v = _one_ckpt(d)
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=2)
    for _ in range(4):
        m.save()
    path = str(d / "solo")
    for _ in range(3):
        ckpt.write(path)
    assert sorted(os.listdir(d)) == ["checkpoint", "ckpt-3.index.json", "ckpt-3.safetensors",
                                     "ckpt-4.index.json", "ckpt-4.safetensors",
                                     "solo.index.json", "solo.safetensors"]
    _assert_restores(ckpt, v, path)


def test_a_killed_saves_temp_file_is_not_deleted(tmp_path):
    # the temporary file of a killed save is left for the user (it could be anyone's)
    d = _user_dir(tmp_path)
    ckpt, v = _one_ckpt(d)
    tmp = d / ".ckpt-1.safetensors.99999.0badc0de.tmp"
    tmp.write_bytes(b"partial")
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    m.save()
    m.save()
    assert tmp.read_bytes() == b"partial"


def test_a_data_file_written_before_the_rule_is_kept_not_guessed(tmp_path):
    # a data file whose header does not name its prefix (tapeflow before issue 30)
    # cannot be told from a copy of someone else's: rotation removes the index, keeps it
    import hashlib
    import safetensors.numpy as st
    d = tmp_path / "run"
    ckpt, v = _one_ckpt(d)
    m = tf.train.CheckpointManager(ckpt, str(d), max_to_keep=1)
    first = m.save()
    blob = st.save(st.load_file(first + ".safetensors"),
                   metadata={"format": "tapeflow-checkpoint"})
    with open(first + ".safetensors", "wb") as f:
        f.write(blob)
    idx = json.loads(open(first + ".index.json").read())
    idx.update(data_bytes=len(blob), data_sha256=hashlib.sha256(blob).hexdigest())
    with open(first + ".index.json", "w") as f:
        json.dump(idx, f)
    _assert_restores(ckpt, v, first)             # still a readable checkpoint
    second = m.save()
    assert not os.path.exists(first + ".index.json")
    assert os.path.exists(first + ".safetensors")
    _assert_restores(ckpt, v, second)
