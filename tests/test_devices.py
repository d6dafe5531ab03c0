"""Device names, the device() scope, placement and the errors for missing devices."""

import threading

import pytest

import tapeflow as tf
from tapeflow.runtime.devices import canonical_name


@pytest.mark.parametrize("spec, want", [
    ("cpu:0", "cpu:0"), ("cpu", "cpu:0"), ("CPU:0", "cpu:0"), ("/cpu:0", "cpu:0"),
    ("/device:CPU:0", "cpu:0"), ("/job:localhost/replica:0/task:0/device:CPU:0", "cpu:0"),
    ("gpu:1", "gpu:1"), ("/gpu:0", "gpu:0"), ("/device:GPU:0", "gpu:0"), ("GPU", "gpu:0"),
    ("cuda:0", "cuda:0"), ("opencl:2", "opencl:2"), (" cpu:0 ", "cpu:0"),
])
def test_canonical_names(spec, want):
    assert canonical_name(spec) == want


@pytest.mark.parametrize("bad", ["", "cpu:x", "a:b:c", "/device:", "cpu:-1"])
def test_unparseable_names_are_clear_errors(bad):
    with pytest.raises(tf.errors.InvalidArgumentError, match="Cannot parse device name"):
        canonical_name(bad)


def test_cpu_device_exists_and_is_default():
    assert "cpu:0" in tf.config.list_devices()
    x = tf.constant([1.0])
    assert x.device == "cpu:0"
    assert tf.executing_eagerly() is True
    assert tf.enable_eager_execution() is None


@pytest.fixture
def strict_placement():
    tf.config.set_soft_device_placement(False)
    yield
    tf.config.set_soft_device_placement(True)


def test_missing_device_lists_what_exists(strict_placement):
    with pytest.raises(tf.errors.NotFoundError) as e:
        with tf.device("cpu:7"):
            pass
    msg = str(e.value)
    assert "cpu:7" in msg and "Available devices: " in msg and "cpu:0" in msg


def test_gpu_alias_without_gpus_is_clear(strict_placement):
    if tf.num_gpus():
        pytest.skip("a GPU exists here")
    with pytest.raises(tf.errors.NotFoundError, match="gpu:0"):
        tf.device("/gpu:0")
    assert tf.num_gpus() == 0


def test_soft_placement_runs_a_missing_device_on_the_cpu_and_says_so_once(caplog):
    """TensorFlow's default: ``with tf.device("GPU:0")`` without a GPU runs on the CPU."""
    assert tf.config.get_soft_device_placement() is True
    with caplog.at_level("WARNING", logger="tapeflow"):
        for _ in range(2):
            with tf.device("opencl:57") as d:
                y = tf.constant([1.0, 2.0]) * 2
            assert d.name == "cpu:0" and y.device == "cpu:0"
    said = [r for r in caplog.records if "opencl:57" in r.getMessage()]
    assert len(said) == 1 and "soft placement" in said[0].getMessage()
    with pytest.raises(tf.errors.InvalidArgumentError):    # a malformed name still raises
        tf.device("gpu:zero")
    for typo in ("banana", "gpuu:0"):                     # and a kind nobody makes
        with pytest.raises(tf.errors.NotFoundError, match="Available devices"):
            tf.device(typo)


def test_device_lists_are_tensorflow_shaped():
    phys = tf.config.list_physical_devices("CPU")
    assert phys[0] == ("/physical_device:CPU:0", "CPU") and phys[0].device_type == "CPU"
    logical = tf.config.list_logical_devices()
    assert [d.name for d in logical][0] == "/device:CPU:0"
    for d in logical:                                      # each name is accepted by tf.device
        with tf.device(d.name) as placed:
            assert placed.name.split(":")[0] in d.name.lower()
    assert len(tf.config.list_logical_devices("GPU")) == tf.num_gpus()


def test_scope_places_and_nests():
    with tf.device("/job:localhost/replica:0/task:0/device:CPU:0") as d:
        assert d.name == "cpu:0"
        with tf.device(None):
            x = tf.constant(1.0)
        y = tf.constant(2.0)
    assert x.device == y.device == "cpu:0"


def test_scope_is_thread_local():
    seen = []

    def worker():
        from tapeflow.runtime.devices import current_device
        seen.append(current_device())

    with tf.device("cpu:0"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == [None]


def test_tensor_moves():
    x = tf.constant([1.0, 2.0])
    assert x.cpu() is x
    assert x.to("cpu:0") is x
    if not tf.num_gpus():
        with pytest.raises(tf.errors.NotFoundError):
            x.gpu()


def test_default_device_override():
    tf.config.set_default_device("cpu:0")
    try:
        assert tf.config.get_default_device() == "cpu:0"
        with pytest.raises(tf.errors.NotFoundError):
            tf.config.set_default_device("opencl:9")
    finally:
        tf.config.set_default_device(None)


def test_device_policy_values():
    with pytest.raises(ValueError):
        tf.config.set_device_policy("sometimes")
    assert tf.config.get_device_policy() == "explicit"


def test_tensor_device_is_tensorflows_full_name_equal_to_its_short_spellings():
    x = tf.constant([1.0])
    assert str(x.device) == "/job:localhost/replica:0/task:0/device:CPU:0"
    assert x.device == "cpu:0" and "cpu:0" == x.device and x.device == "/cpu:0"
    assert x.device.endswith("CPU:0") and not (x.device != "cpu:0")
    assert x.device in {"cpu:0"} and hash(x.device) == hash("cpu:0")
    assert x.device != "banana:0" and x.device != "gpu:7" and x.device != 3
    assert tf.Variable(1.0).device == x.device
    with tf.device(x.device):                       # a device scope takes the full name
        assert tf.constant(2.0).device == "cpu:0"
