"""TF 1's program scaffolding (issue 45): tf.app.run / tf.flags, tf.gfile, the execution
modes, tf.contrib.checkpoint, shape entries as Dimensions, tf.nn.embedding_lookup, TF 1's
initializer names and the diagonal functions."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError

HAS_OPENCL = "opencl:0" in tf.config.list_devices()
needs_opencl = pytest.mark.skipif(not HAS_OPENCL, reason="no opencl:0 device (PoCL or a driver)")


# --- flags and app.run ------------------------------------------------------------------------

def _flags():
    fl = tf.flags.FlagValues()
    tf.flags.DEFINE_integer("steps", 10, "training steps", flag_values=fl)
    tf.flags.DEFINE_boolean("fast", True, "skip checks", flag_values=fl)
    tf.flags.DEFINE_float("lr", 0.1, "learning rate", flag_values=fl)
    tf.flags.DEFINE_string("name", "run", "a name", flag_values=fl)
    tf.flags.DEFINE_list("sizes", "1,2", "layer sizes", flag_values=fl)
    tf.flags.DEFINE_enum("mode", "a", ["a", "b"], "a choice", flag_values=fl)
    tf.flags.DEFINE_bool("verbose", False, "talk", flag_values=fl)
    tf.flags.DEFINE_multi_string("tag", [], "tags", flag_values=fl)
    return fl


def test_flags_parse_every_spelling():
    fl = _flags()
    rest = fl(["prog", "--steps=3", "--nofast", "--lr", "-0.5", "data.txt", "--sizes=4,5",
               "-mode=b", "-name", "x", "--verbose", "--tag", "a", "--tag=b", "--",
               "--steps=9"])
    assert rest == ["prog", "data.txt", "--steps=9"]
    assert (fl.steps, fl.fast, fl.lr, fl.name, fl.sizes, fl.mode, fl.verbose, fl.tag) == (
        3, False, -0.5, "x", ["4", "5"], "b", True, ["a", "b"])
    assert fl.is_parsed() and fl.flag_values_dict()["steps"] == 3


def test_boolean_flag_does_not_take_the_next_argument():
    fl = _flags()
    assert fl(["p", "--verbose", "file"]) == ["p", "file"] and fl.verbose is True
    fl(["p", "--verbose=false", "--fast=1"])
    assert fl.verbose is False and fl.fast is True


def test_defaults_and_assignment():
    fl = _flags()
    fl(["p"])
    assert (fl.steps, fl.fast, fl.sizes) == (10, True, ["1", "2"])
    fl.steps = "7"
    assert fl.steps == 7
    with pytest.raises(AttributeError, match="no flag --nope"):
        fl.nope = 1


def test_flag_errors_name_the_flag():
    fl = _flags()
    with pytest.raises(tf.flags.UnparsedFlagAccessError, match="--steps before the flags"):
        fl.steps
    with pytest.raises(tf.flags.UnrecognizedFlagError, match="--bogus=1"):
        fl(["p", "--bogus=1", "--steps=2"])
    assert not fl.is_parsed()                 # nothing applied
    with pytest.raises(tf.flags.IllegalFlagValueError, match="--steps='abc'"):
        fl(["p", "--steps=abc"])
    with pytest.raises(tf.flags.IllegalFlagValueError, match="must be one of a, b"):
        fl(["p", "--mode=c"])
    with pytest.raises(tf.flags.DuplicateFlagError, match="--steps is defined twice"):
        tf.flags.DEFINE_integer("steps", 1, "again", flag_values=fl)
    with pytest.raises(AttributeError, match="no flag --missing"):
        fl(["p"]) and fl.missing
    with pytest.raises(InvalidArgumentError, match="list of strings"):
        fl("--steps=1")
    assert fl(["p", "--bogus"], known_only=True) == ["p", "--bogus"]
    assert isinstance(tf.flags.UnrecognizedFlagError("x"), InvalidArgumentError)


def test_flag_namespaces_are_one():
    assert tf.app.flags is tf.flags and tf.app.flags.FLAGS is tf.flags.FLAGS
    assert tf.contrib.eager.run is tf.app.run is tf.run


_PROGRAM = textwrap.dedent('''
    import sys
    import tapeflow as tf
    tfe = tf.contrib.eager

    tf.flags.DEFINE_integer("steps", 1, "steps")
    tf.flags.DEFINE_boolean("fast", False, "fast")
    FLAGS = tf.flags.FLAGS

    def main(argv):
        print("argv", argv[1:], "steps", FLAGS.steps, "fast", FLAGS.fast)
        return int(FLAGS.steps) if FLAGS.steps < 100 else None

    if __name__ == "__main__":
        if sys.argv[1:2] == ["explicit"]:
            tfe.run(main=main, argv=[sys.argv[0], "--steps=4", "rest"])
        elif sys.argv[1:2] == ["early"]:
            print(FLAGS.steps)
        else:
            tf.app.run()
''')


def _run_program(tmp_path, *args):
    prog = tmp_path / "prog.py"
    prog.write_text(_PROGRAM)
    return subprocess.run([sys.executable, str(prog), *args], capture_output=True, text=True,
                          cwd=str(tmp_path), timeout=120,
                          env={**os.environ, "TAPEFLOW_DEFAULT_DEVICE": "cpu:0"})


def test_app_run_parses_calls_main_and_exits_with_its_value(tmp_path):
    r = _run_program(tmp_path, "--steps=5", "--fast", "input.txt", "--unknown=1")
    assert r.returncode == 5, r.stderr
    # as in TensorFlow 1, undefined flags are left to main
    assert "argv ['input.txt', '--unknown=1'] steps 5 fast True" in r.stdout
    r = _run_program(tmp_path, "--steps", "100")
    assert r.returncode == 0, r.stderr                   # main returned None
    r = _run_program(tmp_path, "explicit", "ignored")
    assert r.returncode == 4 and "argv ['rest'] steps 4" in r.stdout, r.stderr


def test_app_run_help_and_errors(tmp_path):
    r = _run_program(tmp_path, "--help")
    assert r.returncode == 0 and "--steps: steps" in r.stdout
    r = _run_program(tmp_path, "--steps=x")
    assert r.returncode != 0 and "IllegalFlagValueError" in r.stderr and "--steps='x'" in r.stderr
    r = _run_program(tmp_path, "early")
    assert r.returncode != 0 and "UnparsedFlagAccessError" in r.stderr


# --- gfile --------------------------------------------------------------------------------------

def test_gfile_text_and_binary_files(tmp_path):
    p = str(tmp_path / "d" / "a.txt")
    tf.gfile.MakeDirs(os.path.dirname(p))
    tf.io.gfile.makedirs(os.path.dirname(p))            # exists already: fine
    with tf.gfile.GFile(p, "w") as f:
        f.write("one\ntwo\n")
        f.write(b"three\n")                             # bytes into a text file: decoded
    with tf.gfile.Open(p) as f:
        assert [line for line in f] == ["one\n", "two\n", "three\n"]
    with tf.io.gfile.GFile(p, "r") as f:
        assert f.readline() == "one\n" and f.readlines() == ["two\n", "three\n"]
    assert tf.gfile.FastGFile(p, "rb").read() == b"one\ntwo\nthree\n"
    with tf.gfile.GFile(p, "a") as f:
        f.write("four")
    f = tf.gfile.GFile(p, "rb")
    assert f.size() == 18 and f.read(3) == b"one" and f.tell() == 3
    f.seek(0)
    assert f.read()[-4:] == b"four"
    f.close()
    assert f.closed
    with tf.gfile.GFile(str(tmp_path / "b.bin"), "wb") as g:
        g.write(np.arange(4, dtype=np.uint8).tobytes())
        g.write("x")                                    # str into a binary file: encoded
    assert tf.gfile.GFile(str(tmp_path / "b.bin"), "rb").read() == b"\x00\x01\x02\x03x"


def test_gfile_directory_functions(tmp_path):
    root = str(tmp_path)
    tf.gfile.MkDir(os.path.join(root, "sub"))
    for name in ("a.txt", "b.txt", "c.csv"):
        with tf.gfile.GFile(os.path.join(root, "sub", name), "w") as f:
            f.write(name)
    sub = os.path.join(root, "sub")
    assert tf.gfile.ListDirectory(sub) == ["a.txt", "b.txt", "c.csv"] == tf.io.gfile.listdir(sub)
    assert tf.gfile.Glob(os.path.join(sub, "*.txt")) == [os.path.join(sub, n)
                                                         for n in ("a.txt", "b.txt")]
    assert tf.gfile.IsDirectory(sub) and not tf.io.gfile.isdir(os.path.join(sub, "a.txt"))
    assert tf.gfile.Exists(os.path.join(sub, "a.txt")) and not tf.gfile.Exists(sub + "/zz")
    tf.gfile.Copy(os.path.join(sub, "a.txt"), os.path.join(sub, "d.txt"))
    tf.gfile.Rename(os.path.join(sub, "d.txt"), os.path.join(sub, "e.txt"))
    tf.io.gfile.copy(os.path.join(sub, "b.txt"), os.path.join(sub, "e.txt"), overwrite=True)
    assert tf.gfile.GFile(os.path.join(sub, "e.txt")).read() == "b.txt"
    st = tf.gfile.Stat(os.path.join(sub, "e.txt"))
    assert st.length == 5 and not st.is_directory and st.mtime_nsec > 0
    assert tf.io.gfile.stat(sub).is_directory
    walked = list(tf.gfile.Walk(root))
    assert walked[0][0] == root and walked[0][1] == ["sub"]
    assert sorted(walked[1][2]) == ["a.txt", "b.txt", "c.csv", "e.txt"]
    tf.gfile.Remove(os.path.join(sub, "e.txt"))
    tf.gfile.DeleteRecursively(sub)
    assert not tf.io.gfile.exists(sub)


def test_gfile_errors_are_tensorflows(tmp_path):
    missing = str(tmp_path / "missing.txt")
    for call in (lambda: tf.gfile.GFile(missing), lambda: tf.gfile.Remove(missing),
                 lambda: tf.gfile.Stat(missing), lambda: tf.gfile.ListDirectory(missing),
                 lambda: tf.gfile.DeleteRecursively(missing),
                 lambda: tf.gfile.Copy(missing, str(tmp_path / "x")),
                 lambda: tf.gfile.Rename(missing, str(tmp_path / "x")),
                 lambda: tf.gfile.MkDir(str(tmp_path / "no" / "parent"))):
        with pytest.raises(tf.errors.NotFoundError, match="missing.txt|parent"):
            call()
    with open(missing, "w"):
        pass
    with pytest.raises(tf.io.AlreadyExistsError, match="exists"):
        tf.gfile.MkDir(str(tmp_path))
    with pytest.raises(FailedPreconditionError, match="overwrite=True"):
        tf.gfile.Copy(missing, missing)
    with pytest.raises(FailedPreconditionError, match="overwrite=True"):
        tf.gfile.Rename(missing, missing)
    with pytest.raises(UnimplementedError, match="only local paths"):
        tf.gfile.Exists("gs://bucket/x")
    with pytest.raises(InvalidArgumentError, match="mode"):
        tf.gfile.GFile(missing, "q")
    with pytest.raises(InvalidArgumentError, match="expected a path"):
        tf.gfile.Exists(3)
    assert not hasattr(tf.io, "read_file")          # no string tensors yet


# --- execution modes ---------------------------------------------------------------------------

def test_execution_mode_is_per_thread_and_restored():
    assert tf.contrib.eager.SYNC == 0 and tf.ASYNC == 1
    assert tf.app.get_execution_mode() == tf.SYNC and not tf.app.executing_async()
    seen = []
    with tf.execution_mode(tf.ASYNC):
        assert tf.app.executing_async()
        t = threading.Thread(target=lambda: seen.append(tf.app.get_execution_mode()))
        t.start()
        t.join()
        with tf.execution_mode(tf.SYNC):
            assert not tf.app.executing_async()
        with tf.execution_mode(None):                   # None: keep the mode
            assert tf.app.executing_async()
    assert seen == [tf.SYNC] and tf.app.get_execution_mode() == tf.SYNC
    with pytest.raises(InvalidArgumentError, match="tf.SYNC"):
        with tf.execution_mode("async"):
            pass
    with pytest.raises(InvalidArgumentError, match="tf.SYNC"):
        with tf.execution_mode(True):
            pass


def test_async_cpu_gives_the_same_values_and_async_wait_returns():
    x = tf.constant(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    want = (tf.matmul(x, x, transpose_b=True) + 1.).numpy()
    with tf.execution_mode(tf.ASYNC):
        got = tf.matmul(x, x, transpose_b=True) + 1.
        tf.async_wait()
    np.testing.assert_array_equal(got.numpy(), want)
    with tf.experimental.async_scope():
        y = x * 2.
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)


def _deferred(message):
    return lambda: InvalidArgumentError(message, op="Test", device="cpu:0")


def test_deferred_errors_surface_at_async_wait_once():
    tf.app.defer_check(lambda: None)
    tf.app.defer_check(_deferred("first"))
    tf.app.defer_check(_deferred("second"))
    with pytest.raises(InvalidArgumentError, match=r"first \[Op:Test\] on cpu:0"):
        tf.async_wait()
    tf.async_wait()                                     # the error was consumed
    tf.app.defer_check(_deferred("dropped"))
    tf.async_clear_error()
    tf.async_wait()
    tf.app.defer_check(_deferred("at the end of the scope"))
    with pytest.raises(InvalidArgumentError, match="at the end of the scope"):
        with tf.experimental.async_scope():
            pass
    tf.app.defer_check(_deferred("forgotten"))
    with pytest.raises(KeyError):                       # the body's own error wins
        with tf.experimental.async_scope():
            raise KeyError("body")
    tf.async_wait()


@needs_opencl
def test_async_on_opencl_gives_the_same_values():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    ids = np.array([3, 0, 63, 5])

    def compute():
        with tf.device("opencl:0"):
            x = tf.constant(a)
            y = tf.nn.relu(tf.matmul(x, x)) * 0.5 + tf.reduce_sum(x, axis=0)
            return tf.gather(y, ids), tf.reduce_mean(y)

    sync = [t.numpy() for t in compute()]
    with tf.execution_mode(tf.ASYNC):
        out = compute()
        tf.async_wait()
    for s, o in zip(sync, out):
        np.testing.assert_allclose(o.numpy(), s, rtol=1e-5, atol=1e-5)


@needs_opencl
def test_opencl_flag_check_is_deferred_in_async_mode():
    from tapeflow_opencl import runtime as rt       # the backend's runtime (a flag read)
    handle = tf.runtime.devices.get_device("opencl:0").handle
    bad = rt.upload(handle, np.array([7], np.int64))

    def make_error(v):
        return InvalidArgumentError(f"indices[{int(v)}] is out of range", op="Gather",
                                    device="opencl:0")

    rt.check_flag(rt.upload(handle, np.array([-1], np.int64)), -1, make_error)   # fine
    with pytest.raises(InvalidArgumentError, match=r"indices\[7\]"):              # SYNC: now
        rt.check_flag(bad, -1, make_error)
    with tf.execution_mode(tf.ASYNC):
        rt.check_flag(bad, -1, make_error)             # ASYNC: not yet
        with pytest.raises(InvalidArgumentError,
                           match=r"indices\[7\] is out of range \[Op:Gather\] on opencl:0"):
            tf.async_wait()
    tf.async_wait()


# --- tf.contrib.checkpoint ------------------------------------------------------------------------

class _Stack(tf.keras.Model):
    def __init__(self, container="List"):
        super().__init__()
        if container == "List":
            self.cells = tf.contrib.checkpoint.List([tf.layers.Dense(3), tf.layers.Dense(2)])
        elif container == "Dict":
            self.cells = tf.contrib.checkpoint.Dict(first=tf.layers.Dense(3), notes="kept",
                                                    second=tf.layers.Dense(2))
        else:                                           # a plain list, tracked too
            self.cells = [tf.layers.Dense(3), tf.layers.Dense(2)]
        self.cache = tf.contrib.checkpoint.NoDependency([tf.layers.Dense(7)])

    def call(self, x):
        cells = self.cells.values() if isinstance(self.cells, dict) else self.cells
        for c in cells:
            if isinstance(c, tf.layers.Layer):
                x = c(x)
        return x


@pytest.mark.parametrize("container", ["List", "Dict", "plain"])
def test_tracked_containers_save_and_restore(tmp_path, container):
    x = tf.ones((1, 4))
    m = _Stack(container)
    want = m(x).numpy()
    assert len(m.variables) == 4 and isinstance(m.cache, list)
    path = tf.train.Checkpoint(model=m).save(str(tmp_path / "ckpt"))
    m2 = _Stack(container)
    m2(x)
    assert not np.allclose(m2(x).numpy(), want)
    tf.train.Checkpoint(model=m2).restore(path).assert_consumed()
    np.testing.assert_allclose(m2(x).numpy(), want, rtol=1e-6)
    m3 = _Stack(container)                             # not built yet: restored on build
    tf.train.Checkpoint(model=m3).restore(path)
    np.testing.assert_allclose(m3(x).numpy(), want, rtol=1e-6)


def test_list_follows_its_changes_and_holds_other_values(tmp_path):
    m = _Stack("List")
    m(tf.ones((1, 4)))
    m.cells.append(tf.layers.Dense(5))
    m.cells.append(7)                                  # not trackable: kept, not saved
    m(tf.ones((1, 4)))
    assert len(m.variables) == 6 and m.cells[-1] == 7
    del m.cells[0]
    assert len(m.variables) == 4
    assert repr(tf.contrib.checkpoint.List([1])) == "List([1])"
    v = tf.Variable([1., 2.])
    d = tf.contrib.checkpoint.Dict(w=v, n=3)
    ck = tf.train.Checkpoint(d=d, lst=tf.contrib.checkpoint.List([v, "x"]))
    path = ck.save(str(tmp_path / "c"))
    v.assign([5., 6.])
    ck.restore(path).assert_consumed()
    assert v.numpy().tolist() == [1., 2.]
    assert sorted(tf.train.list_variables(path))[1][0].startswith("d/w")  # ([0]: the graph)


def test_unique_name_tracker(tmp_path):
    tracker = tf.contrib.checkpoint.UniqueNameTracker()
    a, b, c = tf.Variable(1.), tf.Variable(2.), tf.Variable(3.)
    assert tracker.track(a, "v") is a
    tracker.track(b, "v")
    tracker.track(c, "w")
    assert list(tracker) == ["v", "v_1", "w"]
    path = tf.train.Checkpoint(t=tracker).save(str(tmp_path / "u"))
    b.assign(0.)
    tf.train.Checkpoint(t=tracker).restore(path).assert_consumed()
    assert float(b) == 2.
    with pytest.raises(InvalidArgumentError, match="trackable"):
        tracker.track(3, "x")
    with pytest.raises(InvalidArgumentError, match="base_name"):
        tracker.track(a, 3)


# --- Dimension ------------------------------------------------------------------------------------

def test_shape_entries_are_dimensions_that_behave_as_ints():
    x = tf.zeros((2, 3, 2000))
    s = x.shape
    d = s[1]
    assert d.value == 3 and s[0].value == 2 and s[2].value == 2000 and s[-1].value == 2000
    assert isinstance(d, int) and isinstance(d, tf.Dimension) and d == 3 and hash(d) == hash(3)
    assert type(d * 2) is int and d + 1 == 4 and list(range(d)) == [0, 1, 2]
    assert "%d-%s-%r" % (d, d, d) == "3-3-3" and f"{d}" == "3" and json.dumps([d]) == "[3]"
    assert np.zeros(d).shape == (3,) and np.arange(6).reshape(s[0], d).shape == (2, 3)
    assert pickle.loads(pickle.dumps(d)) == 3
    assert repr(s) == "TensorShape([2, 3, 2000])" and str(s) == "(2, 3, 2000)"
    assert s[1:] == (3, 2000) and isinstance(s[1:], tf.TensorShape)
    assert [dim.value for dim in s.dims] == [2, 3, 2000] and s.as_list() == [2, 3, 2000]
    assert s[0] is tf.zeros((2,)).shape[0]             # small sizes are shared


def test_dimensions_are_accepted_where_ints_are():
    x = tf.ones((2, 3))
    n, m = x.shape[0], x.shape[1]
    assert tf.zeros([n, m]).shape == (2, 3) and tf.reshape(x, [m, n]).shape == (3, 2)
    assert (x * m).dtype == tf.float32 and float((x / m)[0, 0]) == pytest.approx(1 / 3)
    assert tf.constant(n).dtype == tf.int32 and int(tf.constant(n)) == 2
    assert tf.one_hot([1], m).shape == (1, 3) and tf.range(m).numpy().tolist() == [0, 1, 2]
    assert len(tf.split(x, m, axis=1)) == 3 and tf.tile(x, [n, 1]).shape == (4, 3)
    assert tf.reduce_sum(x, axis=x.shape[0] - 1).shape == (2,)
    assert tf.layers.Dense(m)(x).shape == (2, 3)
    assert x[n - 1].shape == (3,)
    assert tf.random.uniform([n]).shape == (2,)


# --- embedding_lookup -------------------------------------------------------------------------------

def test_embedding_lookup_matches_numpy_and_its_gradient():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = np.array([[9, 0, 3], [3, 3, 1]])
    v = tf.Variable(table)
    np.testing.assert_array_equal(tf.nn.embedding_lookup(v, ids).numpy(), table[ids])
    np.testing.assert_array_equal(tf.nn.embedding_lookup(table, tf.constant(ids)).numpy(),
                                  table[ids])
    with tf.GradientTape() as g:
        y = tf.reduce_sum(tf.nn.embedding_lookup(v, ids) * 2.)
    want = np.zeros_like(table)
    np.add.at(want, ids, 2.)
    np.testing.assert_allclose(tf.convert_to_tensor(g.gradient(y, v)).numpy(), want)


@pytest.mark.parametrize("strategy", ["mod", "div"])
def test_embedding_lookup_on_shards(strategy):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((10, 3)).astype(np.float32)
    if strategy == "mod":
        shards = [table[p::3] for p in range(3)]        # id i: row i // 3 of shard i % 3
    else:
        shards = [table[:4], table[4:7], table[7:]]
    vs = [tf.Variable(s) for s in shards]
    ids = np.array([[9, 0], [4, 5], [7, 7]])
    got = tf.nn.embedding_lookup(vs, ids, partition_strategy=strategy)
    np.testing.assert_array_equal(got.numpy(), table[ids])
    with tf.GradientTape() as g:
        y = tf.reduce_sum(tf.nn.embedding_lookup(vs, ids, partition_strategy=strategy) * 3.)
    want = np.zeros_like(table)
    np.add.at(want, ids.ravel(), 3.)
    grads = [tf.convert_to_tensor(gr).numpy() for gr in g.gradient(y, vs)]
    want_shards = ([want[p::3] for p in range(3)] if strategy == "mod"
                   else [want[:4], want[4:7], want[7:]])
    for gr, w in zip(grads, want_shards):
        np.testing.assert_allclose(gr, w)


def test_embedding_lookup_max_norm_and_errors():
    table = np.array([[3., 4.], [0.3, 0.4], [0., 0.]], np.float32)
    got = tf.nn.embedding_lookup(table, [0, 1, 2], max_norm=1.0).numpy()
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.3, 0.4], [0., 0.]], rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"= 10 is not in \[0, 10\)"):
        tf.nn.embedding_lookup([np.ones((4, 2), np.float32), table, table], [10])
    with pytest.raises(InvalidArgumentError, match="partition_strategy"):
        tf.nn.embedding_lookup(table, [0], partition_strategy="x")
    with pytest.raises(InvalidArgumentError, match="every dimension but the first"):
        tf.nn.embedding_lookup([table, np.ones((2, 3), np.float32)], [0])
    with pytest.raises(InvalidArgumentError, match="shard 0 of 2 must have 2 rows"):
        tf.nn.embedding_lookup([table, np.ones((1, 2), np.float32)], [0])
    with pytest.raises(InvalidArgumentError, match="empty list"):
        tf.nn.embedding_lookup([], [0])


@needs_opencl
def test_embedding_lookup_on_opencl():
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    with tf.device("opencl:0"):
        got = tf.nn.embedding_lookup([tf.constant(table[p::2]) for p in range(2)], [9, 2, 5])
    assert got.device == "opencl:0"
    np.testing.assert_array_equal(got.numpy(), table[[9, 2, 5]])


# --- initializers ------------------------------------------------------------------------------------

def test_tf1_initializers():
    tf.random.set_seed(3)
    u = tf.random_uniform_initializer(-0.1, 0.1)([200, 5]).numpy()
    assert u.shape == (200, 5) and u.min() >= -0.1 and u.max() < 0.1 and u.std() > 0.03
    u = tf.random_uniform_initializer()([500]).numpy()      # TF 1's defaults: [0, 1)
    assert u.min() >= 0 and u.max() < 1 and u.max() > 0.9
    assert tf.random_uniform_initializer(0, 10, dtype=tf.int32)([50]).dtype == tf.int32
    n = tf.random_normal_initializer(1.0, 2.0)([20000]).numpy()
    assert abs(n.mean() - 1) < 0.1 and abs(n.std() - 2) < 0.1
    t = tf.truncated_normal_initializer(stddev=1.0)([20000]).numpy()
    assert np.abs(t).max() <= 2.0
    np.testing.assert_array_equal(tf.constant_initializer(2.5)([2, 2]).numpy(), np.full((2, 2), 2.5))
    np.testing.assert_array_equal(tf.constant_initializer([1, 2, 3, 4])([2, 2]).numpy(),
                                  [[1, 2], [3, 4]])
    assert tf.zeros_initializer()([3]).numpy().tolist() == [0, 0, 0]
    assert tf.ones_initializer(dtype=tf.float64)([2]).dtype == tf.float64
    assert tf.zeros_initializer()([2], dtype=tf.int32).dtype == tf.int32
    g = tf.glorot_uniform_initializer()([30, 20]).numpy()
    assert np.abs(g).max() <= (6 / 50) ** 0.5
    assert tf.glorot_normal_initializer(seed=1)([3, 3]).shape == (3, 3)
    assert tf.random_uniform_initializer(-1, 1).get_config()["dtype"] == "float32"
    dense = tf.layers.Dense(2, kernel_initializer=tf.constant_initializer(0.5),
                            bias_initializer=tf.zeros_initializer())
    assert dense(tf.ones((1, 3))).numpy().tolist() == [[1.5, 1.5]]


# --- diagonals ---------------------------------------------------------------------------------------

def test_diag_part_diag_and_set_diag():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(tf.linalg.diag_part(x).numpy(),
                                  np.diagonal(x, axis1=-2, axis2=-1))
    assert tf.diag_part([[1, 2], [3, 4]]).numpy().tolist() == [1, 4]
    assert tf.matrix_diag_part(x).shape == (2, 3)
    np.testing.assert_array_equal(tf.linalg.diag([1., 2.]).numpy(), np.diag([1., 2.]))
    assert tf.diag([1, 2]).numpy().tolist() == [[1, 0], [0, 2]]
    assert tf.matrix_diag([[1., 2.]]).shape == (1, 2, 2)
    d = rng.standard_normal((2, 3)).astype(np.float32)
    want = x.copy()
    want[:, np.arange(3), np.arange(3)] = d
    np.testing.assert_array_equal(tf.linalg.set_diag(x, d).numpy(), want)
    np.testing.assert_array_equal(tf.matrix_set_diag(x, d).numpy(), want)
    xv, dv = tf.Variable(x), tf.Variable(d)
    with tf.GradientTape() as g:
        y = tf.reduce_sum(tf.linalg.set_diag(xv, dv) * 3.) + tf.reduce_sum(
            tf.linalg.diag_part(xv) * 5.)
    gx, gd = g.gradient(y, [xv, dv])
    wx = np.full_like(x, 3.)
    wx[:, np.arange(3), np.arange(3)] = 5.
    np.testing.assert_array_equal(gx.numpy(), wx)
    np.testing.assert_array_equal(gd.numpy(), np.full_like(d, 3.))
    with pytest.raises(InvalidArgumentError, match="needs a matrix"):
        tf.linalg.diag_part([1., 2.])
    with pytest.raises(UnimplementedError, match="k=0"):
        tf.linalg.diag_part(x, k=1)
    with pytest.raises(InvalidArgumentError, match="diagonal shape"):
        tf.linalg.set_diag(x, d[:, :2])
