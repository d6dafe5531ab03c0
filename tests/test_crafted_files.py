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


# --- .keras files (issue 46, item 4): a crafted file is refused, never runs code ---------------

def _keras_file(tmp_path, config=None, members=None, model=None):
    """A .keras file: a real one of a small model, with members replaced or added."""
    p = tmp_path / "m.keras"
    (model or tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])).save(p)
    with zipfile.ZipFile(p) as z:
        real = {n: z.read(n) for n in z.namelist()}
    if config is not None:
        real["config.json"] = json.dumps(config).encode()
    real.update(members or {})
    with zipfile.ZipFile(p, "w") as z:
        for n, blob in real.items():
            if blob is not None:
                z.writestr(n, blob)
    return p


def _index(p):
    with zipfile.ZipFile(p) as z:
        return json.loads(z.read("model.weights.json")), z.read("model.weights.bin")


def test_keras_file_that_is_not_a_zip_is_data_loss(tmp_path):
    p = tmp_path / "m.keras"
    p.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(errors.DataLossError, match="m.keras"):
        tf.keras.models.load_model(str(p))


def test_keras_file_without_config_is_data_loss(tmp_path):
    p = _keras_file(tmp_path, members={"config.json": None})
    with pytest.raises(errors.DataLossError, match="config.json"):
        tf.keras.models.load_model(str(p))


@pytest.mark.parametrize("blob", [b"{not json", _deep_json(), b"\xff\xfe", b"[1, 2]"])
def test_keras_file_with_a_bad_config_is_data_loss(tmp_path, blob):
    p = _keras_file(tmp_path, members={"config.json": blob})
    with pytest.raises(errors.DataLossError, match="m.keras"):
        tf.keras.models.load_model(str(p))


@pytest.mark.parametrize("spec", [
    {"module": "this", "class_name": "Zen", "config": {}},
    {"module": "os", "class_name": "system", "config": {"command": "echo hacked"}},
    {"module": "builtins", "class_name": "eval", "config": {}, "registered_name": "eval"},
    {"module": "subprocess", "class_name": "Popen", "config": {"args": ["true"]}},
])
def test_keras_file_naming_a_foreign_class_imports_and_runs_nothing(tmp_path, capfd, spec):
    p = _keras_file(tmp_path, config=spec)
    already = set(sys.modules)
    with pytest.raises(errors.InvalidArgumentError, match=f"unknown class '{spec['class_name']}'"):
        tf.keras.models.load_model(str(p))
    assert set(sys.modules) - already == set()      # nothing imported ("this" prints)
    assert capfd.readouterr().out == ""


def test_keras_file_naming_a_function_or_a_non_model(tmp_path):
    layer = {"module": "keras.layers", "class_name": "Dense",
             "config": {"units": 2, "activation": {"class_name": "function", "config": "print",
                                                   "registered_name": "print"}}}
    p = _keras_file(tmp_path, config={"class_name": "Sequential", "config": {"layers": [layer]}})
    with pytest.raises(errors.InvalidArgumentError, match="unknown function 'print'"):
        tf.keras.models.load_model(str(p))
    p = _keras_file(tmp_path, config={"class_name": "Adam", "config": {}})
    with pytest.raises(errors.InvalidArgumentError, match="not a model"):
        tf.keras.models.load_model(str(p))
    bad = {"class_name": "__numpy__", "config": {"value": [1], "dtype": "object"}}
    p = _keras_file(tmp_path, config={"class_name": "Sequential", "config": {
        "layers": [{"class_name": "Dense", "config": {"units": bad}}]}})
    with pytest.raises(errors.InvalidArgumentError, match="__numpy__"):
        tf.keras.models.load_model(str(p))


def test_keras_file_with_truncated_weights_is_data_loss(tmp_path):
    p = _keras_file(tmp_path)
    _, data = _index(p)
    p = _keras_file(tmp_path, members={"model.weights.bin": data[:-5]})
    with pytest.raises(errors.DataLossError, match=r"m\.keras.*truncated"):
        tf.keras.models.load_model(str(p))


@pytest.mark.parametrize("change", [
    {"offset": 1 << 40}, {"shape": [1 << 39, 1 << 39]}, {"dtype": "object"},
    {"nbytes": 3}, {"shape": "3"}])
def test_keras_file_with_a_bad_weights_index_is_data_loss(tmp_path, change):
    p = _keras_file(tmp_path)
    index, _ = _index(p)
    index["tensors"][0].update(change)
    p = _keras_file(tmp_path, members={"model.weights.json": json.dumps(index).encode()})
    with pytest.raises(errors.DataLossError, match="m.keras"):
        tf.keras.models.load_model(str(p))


def test_keras_file_with_a_corrupt_member_is_data_loss(tmp_path):
    p = _keras_file(tmp_path)
    raw = bytearray(p.read_bytes())
    at = raw.index(b'"format"')              # inside a stored JSON member: the CRC breaks
    raw[at + 1] ^= 0x20
    p.write_bytes(bytes(raw))
    with pytest.raises(errors.DataLossError, match="m.keras"):
        tf.keras.models.load_model(str(p))


def test_keras_file_with_a_zip_bomb_config_is_refused_before_inflating(tmp_path):
    p = tmp_path / "m.keras"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", b" " * (65 << 20))
    with pytest.raises(errors.DataLossError, match="config.json declares"):
        tf.keras.models.load_model(str(p))


# --- SavedModels (issue 46): a crafted directory is DataLossError, never code ---------------

def _saved_model(tmp_path):
    class M:
        def __init__(self):
            self.v = tf.Variable([1.0, 2.0])

        @tf.function
        def __call__(self, x):
            return tf.reduce_sum(x * self.v) + 1.0
    m = M()
    m(tf.constant([1.0, 1.0]))
    path = str(tmp_path / "sm")
    tf.saved_model.save(m, path)
    return path, json.load(open(os.path.join(path, "saved_model.json")))


def _rewrite(path, manifest):
    with open(os.path.join(path, "saved_model.json"), "w") as f:
        json.dump(manifest, f)


def _first_node(m, kind):
    return next(n for f in m["functions"].values() for n in f["graph"]["nodes"]
                if n["kind"] == kind)


def _craft_unknown_op(m):
    _first_node(m, "op")["op"] = "os.system"


def _sum_node(m):
    return next(n for f in m["functions"].values() for n in f["graph"]["nodes"]
                if n.get("op") == "Sum")


def _craft_attr_kind(m):
    _sum_node(m)["attrs"]["keepdims"] = "yes"


def _craft_code_tag(m):
    _sum_node(m)["attrs"]["axis"] = {"$pickle": "cos\nsystem\n(S'echo hacked'\ntR."}


def _craft_bad_input(m):
    _first_node(m, "op")["in"] = [12345]


def _craft_const_shape(m):
    m["constants"]["entries"][0]["shape"] = [1000]


def _craft_newer(m):
    m["version"] = 99


def _craft_variable_ref(m):
    _first_node(m, "read")["variable"] = 0


def _craft_python_value(m):
    m["objects"][0]["children"]["x"] = 10 ** 6


@pytest.mark.parametrize("craft, words", [
    (_craft_unknown_op, "unknown op 'os.system'"),
    (_craft_attr_kind, "attribute 'keepdims' of op Sum is str"),
    (_craft_code_tag, "unknown value tag '\\$pickle'"),
    (_craft_bad_input, "bad input reference"),
    (_craft_const_shape, "constant 0"),
    (_craft_newer, "newer tapeflow"),
    (_craft_variable_ref, "is not a variable"),
    (_craft_python_value, "bad child reference"),
])
def test_crafted_saved_model_is_data_loss_naming_the_file(tmp_path, craft, words):
    path, m = _saved_model(tmp_path)
    craft(m)
    _rewrite(path, m)
    with pytest.raises(errors.DataLossError, match=words) as e:
        tf.saved_model.load(path)
    assert "saved_model.json" in str(e.value)


def test_saved_model_deeply_nested_or_truncated_manifest_is_data_loss(tmp_path):
    path, _ = _saved_model(tmp_path)
    mpath = os.path.join(path, "saved_model.json")
    raw = open(mpath, "rb").read()
    for bad in (raw[: len(raw) // 2], _deep_json()):
        with open(mpath, "wb") as f:
            f.write(bad)
        with pytest.raises(errors.DataLossError, match="saved_model.json"):
            tf.saved_model.load(path)


def test_saved_model_tampered_constants_or_variables_are_data_loss(tmp_path):
    path, _ = _saved_model(tmp_path)
    with open(os.path.join(path, "constants.bin"), "r+b") as f:
        f.write(b"\xff")
    with pytest.raises(errors.DataLossError, match="SHA-256"):
        tf.saved_model.load(path)
    path, _ = _saved_model(tmp_path / "again")
    data = os.path.join(path, "variables", "variables.safetensors")
    with open(data, "r+b") as f:
        f.seek(os.path.getsize(data) - 1)
        f.write(b"\x01")
    with pytest.raises(errors.DataLossError, match="variables"):
        tf.saved_model.load(path)
    os.remove(data)
    with pytest.raises(errors.DataLossError, match="missing"):
        tf.saved_model.load(path)


def test_weights_h5_that_is_not_hdf5_is_data_loss(tmp_path):
    pytest.importorskip("h5py")
    p = tmp_path / "w.weights.h5"
    p.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 40)
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    with pytest.raises(errors.DataLossError, match="w.weights.h5"):
        model.load_weights(str(p))


def test_weights_h5_holding_strings_is_data_loss(tmp_path):
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "w.weights.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("layers/dense/vars/0", data=[b"rm -rf /", b"x"])
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
    with pytest.raises(errors.DataLossError, match="not a weight"):
        model.load_weights(str(p))


@pytest.mark.parametrize("load", ["load_checkpoint", "list_variables"])
def test_a_checkpoint_path_with_a_nul_byte_is_a_clear_error(load):
    """(found by the fuzzer: the OS refused it with a bare ValueError)"""
    with pytest.raises(tf.errors.InvalidArgumentError, match="NUL byte"):
        getattr(tf.train, load)(b"ckpt\x00bad")


def test_a_keras_weights_entry_whose_size_overflows_int64_is_data_loss(tmp_path):
    """(found in review: np.prod overflowed to 0 bytes and passed the size check)"""
    import json
    import zipfile
    m = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    m(tf.ones([1, 3]))
    good, bad = tmp_path / "m.keras", tmp_path / "bad.keras"
    m.save(str(good))
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(bad, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "model.weights.json":
                index = json.loads(data)
                index["tensors"][0].update(dtype="int8", shape=[2 ** 32, 2 ** 32], nbytes=0)
                data = json.dumps(index).encode()
            zout.writestr(item, data)
    with pytest.raises(tf.errors.DataLossError, match="bad.keras"):
        tf.keras.models.load_model(str(bad))
