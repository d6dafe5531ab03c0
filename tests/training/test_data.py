"""tf.data.Dataset / tfe.Iterator (TensorFlow's semantics) and tf.datasets loaders."""

from __future__ import annotations

import collections
import gc
import gzip
import os
import re
import threading
import time

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError

tfe = tf
Dataset = tf.data.Dataset


def values(ds):
    """Every element as NumPy (structures kept)."""
    return list(ds.as_numpy_iterator())


def ints(ds):
    return [int(x) for x in ds]


# --- the seeds ----------------------------------------------------------------------------------

def test_seed_002_iterator_map_shuffle_batch(capsys):
    # Create a source Dataset from in-memory numpy arrays.
    dataset = tf.data.Dataset.from_tensor_slices([1, 2, 3, 4, 5, 6])
    # Apply transformations, shuffling, batching etc.
    dataset = dataset.map(tf.square).shuffle(2).batch(2)
    # Use tfe.Iterator to iterate over the dataset.
    for x in tfe.Iterator(dataset):
        print(x)
    lines = capsys.readouterr().out.splitlines()
    # e.g. tf.Tensor([4 9], shape=(2,), dtype=int32) -- the order depends on the shuffle
    assert len(lines) == 3
    got = []
    for line in lines:
        m = re.fullmatch(r"tf\.Tensor\(\[ *(\d+) +(\d+)\], shape=\(2,\), "
                                       r"dtype=int32\)", line)
        assert m, line
        got += [int(m.group(1)), int(m.group(2))]
    assert sorted(got) == [1, 4, 9, 16, 25, 36]
    assert got[0] in (1, 4)          # a buffer of 2 holds only the first two elements


def test_seed_001_mnist_pipeline_and_take():
    rng = np.random.default_rng(0)
    mnist_images = rng.integers(0, 256, (100, 28, 28), dtype=np.uint8)   # load_data()'s layout
    mnist_labels = rng.integers(0, 10, 100, dtype=np.uint8)
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255, tf.float32),
         tf.cast(mnist_labels, tf.int64)))
    dataset = dataset.shuffle(1000).batch(32)
    batches = list(dataset)
    assert [b[0].shape.as_list() for b in batches] == [[32, 28, 28, 1]] * 3 + [[4, 28, 28, 1]]
    assert all(i.dtype == tf.float32 and l.dtype == tf.int64 for i, l in batches)
    assert all(i.device == "cpu:0" for i, _ in batches)
    # every (image, label) pair survives the shuffle intact
    images = np.concatenate([i.numpy() for i, _ in batches])[..., 0]
    labels = np.concatenate([l.numpy() for _, l in batches])
    order = np.argsort(labels * 1e6 + images.sum(axis=(1, 2)))
    ref = np.argsort(mnist_labels * 1e6 + (mnist_images / 255).astype(np.float32).sum(axis=(1, 2)))
    np.testing.assert_allclose(images[order], (mnist_images[ref] / 255).astype(np.float32))
    for images, labels in dataset.take(1):
        assert images[0:1].shape.as_list() == [1, 28, 28, 1]
    assert len(list(dataset.take(1))) == 1


def test_seed_000_iterator_training_loop_shape():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.int64)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    seen = []
    for (xb, yb) in tfe.Iterator(dataset):
        seen.append((xb.shape.as_list(), yb.numpy().tolist()))
    assert seen == [([4, 2], [0, 1, 2, 3]), ([2, 2], [4, 5])]


# --- sources ------------------------------------------------------------------------------------

def test_from_tensor_slices_kinds():
    # a list is ONE tensor (tapeflow's dtype rules: ints -> int32, floats -> float32)
    ds = Dataset.from_tensor_slices([[1, 2], [3, 4]])
    els = list(ds)
    assert [e.numpy().tolist() for e in els] == [[1, 2], [3, 4]]
    assert els[0].dtype == tf.int32 and isinstance(els[0], tf.Tensor)
    assert list(Dataset.from_tensor_slices([1.5, 2.0]))[0].dtype == tf.float32
    # NumPy arrays keep their dtype; Tensors and Variables are accepted
    assert list(Dataset.from_tensor_slices(np.arange(3.0)))[0].dtype == tf.float64
    assert ints(Dataset.from_tensor_slices(tf.constant([7, 8]))) == [7, 8]
    assert ints(Dataset.from_tensor_slices(tf.Variable([5, 6]))) == [5, 6]
    assert ints(Dataset.from_tensor_slices([tf.constant(1), tf.constant(2)])) == [1, 2]
    # nested tuples and dicts
    ds = Dataset.from_tensor_slices({"x": np.arange(3), "pair": (np.ones((3, 2)), [4, 5, 6])})
    first = next(iter(ds))
    assert set(first) == {"x", "pair"} and isinstance(first["pair"], tuple)
    assert first["pair"][0].shape.as_list() == [2] and int(first["pair"][1]) == 4
    Point = collections.namedtuple("Point", "x y")
    p = next(iter(Dataset.from_tensor_slices(Point(np.arange(2), np.arange(2) * 10))))
    assert isinstance(p, Point) and (int(p.x), int(p.y)) == (0, 0)


def test_from_tensor_slices_errors():
    with pytest.raises(InvalidArgumentError, match="same size in dimension 0.*6 .*5 "):
        Dataset.from_tensor_slices((np.arange(6), np.arange(5)))
    with pytest.raises(InvalidArgumentError, match="scalar"):
        Dataset.from_tensor_slices(3)
    with pytest.raises(InvalidArgumentError, match="dtype string"):   # text, or nothing
        list(Dataset.from_tensor_slices(np.array([object(), 1], dtype=object)))
    words = [w.numpy() for w in Dataset.from_tensor_slices(np.array(["a", "b"], dtype=object))]
    assert words == [b"a", b"b"]                                       # strings are tensors


def test_from_tensors_and_range():
    (el,) = list(Dataset.from_tensors(([1, 2], 3.0)))
    assert el[0].numpy().tolist() == [1, 2] and float(el[1]) == 3.0
    r = list(Dataset.range(3))
    assert [int(x) for x in r] == [0, 1, 2] and r[0].dtype == tf.int64 and r[0].shape == ()
    assert ints(Dataset.range(2, 10, 3)) == [2, 5, 8]
    assert ints(Dataset.range(5, 0, -2)) == [5, 3, 1]
    assert ints(Dataset.range(0)) == []
    assert list(Dataset.range(2, output_type=tf.int32))[0].dtype == tf.int32


def test_from_generator():
    def gen(n):
        for i in range(n):
            yield i, [float(i)] * 2

    ds = Dataset.from_generator(gen, (tf.int64, tf.float32), ((), (2,)), args=(3,))
    els = list(ds)
    assert [(int(a), b.numpy().tolist()) for a, b in els] == [(0, [0, 0]), (1, [1, 1]),
                                                             (2, [2, 2])]
    assert els[0][0].dtype == tf.int64 and els[0][1].dtype == tf.float32
    assert len(list(ds)) == 3                     # the generator is called again
    with pytest.raises(TypeError):
        ds.__len__()                              # unknown length
    bad = Dataset.from_generator(lambda: iter([[1, 2, 3]]), tf.int32, output_shapes=(2,))
    with pytest.raises(InvalidArgumentError, match=r"shape \(3,\).*shape \(2,\)"):
        list(bad)
    # None dimensions match anything
    ragged = Dataset.from_generator(lambda: iter([[1], [1, 2]]), tf.int32, output_shapes=[None])
    assert [x.shape.as_list() for x in ragged] == [[1], [2]]
    with pytest.raises(TypeError, match="output_types"):
        Dataset.from_generator(lambda: iter([]))


def test_zip_and_concatenate_and_enumerate():
    a, b = Dataset.range(3), Dataset.range(10, 20)
    assert [(int(x), int(y)) for x, y in Dataset.zip((a, b))] == [(0, 10), (1, 11), (2, 12)]
    d = list(Dataset.zip({"a": a, "b": b}))
    assert [int(e["b"]) for e in d] == [10, 11, 12]
    assert len(Dataset.zip((a, b))) == 3
    with pytest.raises(TypeError, match="tuple"):
        Dataset.zip(a)
    assert ints(a.concatenate(Dataset.range(7, 9))) == [0, 1, 2, 7, 8]
    assert [(int(i), int(x)) for i, x in Dataset.range(5, 7).enumerate(start=1)] == [(1, 5),
                                                                                     (2, 6)]


# --- transformations ----------------------------------------------------------------------------

def test_map_calling_convention_and_outputs():
    ds = Dataset.from_tensor_slices(([1, 2], [10, 20]))
    assert [int(s) for s in ds.map(lambda x, y: x + y)] == [11, 22]      # tuple unpacked
    swapped = ds.map(lambda x, y: [y, x])                                # list -> tuple
    assert [tuple(map(int, e)) for e in swapped] == [(10, 1), (20, 2)]
    d = Dataset.from_tensor_slices({"a": [1, 2]}).map(lambda e: {"a2": e["a"] * 2})
    assert [int(e["a2"]) for e in d] == [2, 4]
    # Python values returned by the function become tensors
    assert [float(x) for x in Dataset.range(2).map(lambda x: 0.5)] == [0.5, 0.5]
    seen = []
    Dataset.range(1).map(lambda x: seen.append(type(x)) or x).as_numpy_iterator().__next__()
    assert seen == [tf.Tensor]


def test_map_runs_on_cpu_and_is_not_recorded_by_tapes():
    with tf.device("cpu:0"):         # what a dataset function captures lives on the host
        w = tf.Variable(2.0)
    devices = []

    def scale(x):
        y = tf.cast(x, tf.float32) * w
        devices.append(y.device)
        return y

    ds = Dataset.range(3).map(scale)
    with tf.GradientTape() as tape:
        total = tf.add_n([x for x in ds])
    assert float(total) == 6.0 and devices == ["cpu:0"] * 3
    assert tape.gradient(total, w) is None       # dataset functions are not differentiated


def test_filter():
    assert ints(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]
    pairs = Dataset.from_tensor_slices(([1, 2, 3], [0, 1, 0])).filter(lambda x, y: y > 0)
    assert [(int(x), int(y)) for x, y in pairs] == [(2, 1)]
    with pytest.raises(InvalidArgumentError, match="scalar boolean"):
        list(Dataset.range(3).filter(lambda x: x))


def test_batch_semantics():
    ds = Dataset.range(7).batch(3)
    assert [x.numpy().tolist() for x in ds] == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(ds) == 3 and len(Dataset.range(7).batch(3, drop_remainder=True)) == 2
    assert [x.numpy().tolist() for x in Dataset.range(7).batch(3, drop_remainder=True)] == \
        [[0, 1, 2], [3, 4, 5]]
    nested = Dataset.from_tensor_slices({"x": np.zeros((5, 2, 2)), "y": np.arange(5)}).batch(2)
    first = next(iter(nested))
    assert first["x"].shape.as_list() == [2, 2, 2] and first["y"].numpy().tolist() == [0, 1]
    ragged = Dataset.from_generator(lambda: iter([[1, 2], [1, 2, 3]]), tf.int32,
                                    output_shapes=[None]).batch(2)
    with pytest.raises(InvalidArgumentError, match="different shapes in component 0.*"
                                                   r"\[2\].*element 1 had shape \[3\]"):
        list(ragged)
    assert [x.numpy().tolist() for x in Dataset.range(5).batch(2).unbatch()] == [0, 1, 2, 3, 4]
    with pytest.raises(InvalidArgumentError):
        Dataset.range(3).batch(0)


def test_repeat_take_skip():
    ds = Dataset.range(3)
    assert ints(ds.repeat(2)) == [0, 1, 2, 0, 1, 2]
    assert ints(ds.repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert ints(ds.repeat(0)) == []
    assert ints(Dataset.range(0).repeat()) == []                  # ends, as in TF
    assert ints(ds.take(-1)) == [0, 1, 2] and ints(ds.take(0)) == []
    assert ints(ds.take(10)) == [0, 1, 2]
    assert ints(ds.skip(1)) == [1, 2] and ints(ds.skip(5)) == [] and ints(ds.skip(-1)) == []
    assert len(ds.repeat(4)) == 12 and len(ds.skip(1)) == 2 and len(ds.repeat().take(5)) == 5
    with pytest.raises(TypeError, match="infinite"):
        len(ds.repeat())
    assert int(ds.repeat().cardinality()) == tf.data.INFINITE_CARDINALITY
    assert int(ds.filter(lambda x: True).cardinality()) == tf.data.UNKNOWN_CARDINALITY
    assert int(tf.data.experimental.cardinality(ds.batch(2))) == 2


def test_cache():
    calls = []
    ds = Dataset.range(3).map(lambda x: calls.append(1) or x).cache()
    assert ints(ds) == [0, 1, 2] and ints(ds) == [0, 1, 2]
    assert len(calls) == 3


# --- shuffle --------------------------------------------------------------------------------------

def test_shuffle_is_a_permutation_bounded_by_the_buffer():
    n, k = 200, 10
    out = ints(Dataset.range(n).shuffle(k, seed=1))
    assert sorted(out) == list(range(n))
    assert out != list(range(n))
    # TF's buffer: the i-th output is one of the first i + k input elements
    assert all(x < i + k for i, x in enumerate(out))
    assert ints(Dataset.range(20).shuffle(1)) == list(range(20))   # buffer 1: no shuffle


def test_shuffle_seeds_and_reshuffling():
    make = lambda **kw: Dataset.range(100).shuffle(100, **kw)
    a, b = make(seed=7), make(seed=7)
    first = ints(a)
    assert first == ints(b)                        # same seed, same order
    assert ints(a) != first                        # a new order each iteration ...
    assert ints(make(seed=7)) == first            # a new dataset starts over
    fixed = make(seed=7, reshuffle_each_iteration=False)
    assert ints(fixed) == ints(fixed)              # ... unless told not to
    unseeded = make(reshuffle_each_iteration=False)
    assert ints(unseeded) == ints(unseeded)
    assert ints(make(seed=8)) != first
    # the global seed makes unseeded shuffles reproducible (TF semantics)
    tf.set_random_seed(3)
    g1 = ints(make())
    tf.set_random_seed(3)
    g2 = ints(make())
    tf.set_random_seed(None)
    assert g1 == g2
    # repeat() reshuffles every epoch
    two = ints(Dataset.range(50).shuffle(50, seed=1).repeat(2))
    assert sorted(two[:50]) == sorted(two[50:]) == list(range(50)) and two[:50] != two[50:]


# --- prefetch -------------------------------------------------------------------------------------

def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "tapeflow-prefetch" and t.is_alive()]


def _wait_no_prefetch_threads(timeout=5.0):
    deadline = time.monotonic() + timeout
    while _prefetch_threads() and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return _prefetch_threads()


def test_prefetch_yields_everything_and_its_thread_ends():
    assert _wait_no_prefetch_threads() == []
    ds = Dataset.range(50).map(lambda x: x * 2).prefetch(3)
    assert ints(ds) == list(range(0, 100, 2))
    assert _wait_no_prefetch_threads() == []
    assert ints(Dataset.range(5).prefetch(tf.data.AUTOTUNE)) == list(range(5))
    assert ints(Dataset.range(5).prefetch(0)) == list(range(5))


def test_prefetch_runs_ahead_in_a_thread():
    producer_threads = []

    def record(x):
        producer_threads.append(threading.current_thread().name)
        return x

    it = iter(Dataset.range(100).map(record).prefetch(4))
    assert int(next(it)) == 0
    deadline = time.monotonic() + 5
    while len(producer_threads) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(producer_threads) == {"tapeflow-prefetch"}
    assert 5 <= len(producer_threads) <= 7        # 1 consumed + 4 buffered (+1 in hand)
    assert len(_prefetch_threads()) == 1


def test_prefetch_thread_ends_when_iteration_stops_early():
    it = iter(Dataset.range(10**9).prefetch(2))
    next(it)
    assert len(_prefetch_threads()) == 1
    del it
    assert _wait_no_prefetch_threads() == []
    for _ in Dataset.range(10**9).prefetch(2).take(3):      # take() closes upstream
        pass
    assert _wait_no_prefetch_threads() == []
    it = tfe.Iterator(Dataset.range(10**9).prefetch(2))
    next(it)
    it.close()
    assert _wait_no_prefetch_threads(timeout=2) == []
    with pytest.raises(StopIteration):
        next(it)


def test_prefetch_forwards_errors():
    def boom(x):
        if int(x) == 3:
            raise ValueError("bad element 3")
        return x

    seen = []
    with pytest.raises(ValueError, match="bad element 3"):
        for x in Dataset.range(10).map(boom).prefetch(2):
            seen.append(int(x))
    assert seen == [0, 1, 2]
    assert _wait_no_prefetch_threads() == []


# --- Iterator ------------------------------------------------------------------------------------

def test_iterator_protocol_and_device():
    it = tfe.Iterator(Dataset.range(2))
    assert it.device == "cpu:0"
    assert int(it.next()) == 0 and int(it.get_next()) == 1
    with pytest.raises(StopIteration):
        next(it)
    with tf.device("cpu:0"):
        it = tfe.Iterator(Dataset.range(1))
    assert it.device == "cpu:0"
    assert isinstance(Dataset.range(1).make_one_shot_iterator(), tfe.Iterator)
    with pytest.raises(TypeError, match="Dataset"):
        tfe.Iterator([1, 2, 3])


@pytest.mark.skipif(tf.num_gpus() == 0, reason="needs a GPU (tfe.Iterator places elements "
                                                "on the device it is created on)")
def test_iterator_created_on_a_gpu_places_elements_there():
    ds = Dataset.from_tensor_slices(np.arange(4.0)).batch(2)
    with tf.device("gpu:0"):
        it = tfe.Iterator(ds)
    assert all(x.device != "cpu:0" for x in it)
    assert all(x.device == "cpu:0" for x in ds)      # plain iteration stays on the host


# --- tf.datasets ---------------------------------------------------------------------------------

def test_digits_loader():
    pytest.importorskip("sklearn", reason="scikit-learn ships the digits data set")
    (x_train, y_train), (x_test, y_test) = tf.datasets.load_digits()
    assert x_train.shape == (1437, 8, 8) and x_test.shape == (360, 8, 8)
    assert y_train.shape == (1437,) and y_test.shape == (360,)
    assert x_train.dtype == np.uint8 and y_train.dtype == np.uint8
    assert x_train.min() == 0 and x_train.max() == 255
    assert set(np.unique(y_train)) == set(range(10)) == set(np.unique(y_test))
    # the split is fixed, disjoint and covers scikit-learn's 1797 images
    (x2, y2), _ = tf.datasets.digits.load_data()
    np.testing.assert_array_equal(x2, x_train)
    np.testing.assert_array_equal(y2, y_train)
    from sklearn.datasets import load_digits
    d = load_digits()
    ref = np.round(d.images * 255 / 16).astype(np.uint8).reshape(len(d.images), -1)
    ours = np.concatenate([x_train, x_test]).reshape(1797, -1)
    key = lambda a, y: sorted(zip(map(bytes, a), y.tolist()))
    assert key(ours, np.concatenate([y_train, y_test])) == key(ref, d.target.astype(np.uint8))


def _write_idx(path, array):
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _fake_idx_dir(directory, n_train=5, n_test=3):
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte.gz": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte.gz": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte.gz": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte.gz": rng.integers(0, 10, n_test),
    }
    os.makedirs(directory, exist_ok=True)
    for name, a in arrays.items():
        _write_idx(os.path.join(directory, name), a)
    return arrays


def test_fashion_mnist_from_data_dir(tmp_path, monkeypatch):
    arrays = _fake_idx_dir(tmp_path / "fashion-mnist")
    monkeypatch.setenv("TAPEFLOW_DATA_DIR", str(tmp_path))
    (x_train, y_train), (x_test, y_test) = tf.datasets.fashion_mnist.load_data()
    np.testing.assert_array_equal(x_train, arrays["train-images-idx3-ubyte.gz"])
    np.testing.assert_array_equal(y_test, arrays["t10k-labels-idx1-ubyte.gz"])
    assert x_train.dtype == np.uint8 and x_test.shape == (3, 28, 28)
    # the same files, found through an explicit path, and MNIST reads the same layout
    (x2, _), _ = tf.datasets.fashion_mnist.load_data(path=tmp_path / "fashion-mnist")
    np.testing.assert_array_equal(x2, x_train)
    (x3, _), _ = tf.datasets.mnist.load_data(path=tmp_path / "fashion-mnist")
    np.testing.assert_array_equal(x3, x_train)


def test_fashion_mnist_absent_message(tmp_path, monkeypatch):
    import tapeflow.datasets as tds
    monkeypatch.setenv("TAPEFLOW_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(tds, "DEBIAN_DATA_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as e:
        tf.datasets.fashion_mnist.load_data()
    msg = str(e.value)
    assert isinstance(e.value, tds.DatasetNotFoundError)
    assert "apt-get install dataset-fashion-mnist" in msg and "TAPEFLOW_DATA_DIR" in msg
    assert "never downloads" in msg and str(tmp_path) in msg


def test_mnist_absent_message_points_elsewhere(tmp_path, monkeypatch):
    import tapeflow.datasets as tds
    monkeypatch.setenv("TAPEFLOW_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(tds, "DEBIAN_DATA_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as e:
        tf.datasets.mnist.load_data()
    msg = str(e.value)
    with pytest.raises(FileNotFoundError, match="MNIST is not on this machine"):
        tf.keras.datasets.mnist.load_data()           # the seed's spelling
    assert "fashion_mnist.load_data()" in msg and "digits" in msg and "TAPEFLOW_DATA_DIR" in msg


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="Debian's dataset-fashion-mnist is not installed "
                           "(apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist_from_debian_package(monkeypatch):
    monkeypatch.delenv("TAPEFLOW_DATA_DIR", raising=False)
    (x_train, y_train), (x_test, y_test) = tf.datasets.fashion_mnist.load_data()
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert np.bincount(y_train).tolist() == [6000] * 10
    assert np.bincount(y_test).tolist() == [1000] * 10


def test_read_idx_rejects_garbage(tmp_path):
    p = tmp_path / "x.gz"
    with gzip.open(p, "wb") as f:
        f.write(b"not an idx file")
    with pytest.raises(ValueError, match="not an IDX file"):
        tf.datasets.read_idx(p)
