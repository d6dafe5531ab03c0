"""Logical (virtual) CPU devices: ``tf.config.set_logical_device_configuration`` splits the
physical CPU into ``cpu:0`` ... ``cpu:N-1``, as TensorFlow does to run a MirroredStrategy
on one CPU (the random-numbers guide's first cell)."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import random_generator
from tapeflow.runtime.devices import get_device


@pytest.fixture
def cpu():
    cpu = tf.config.list_physical_devices("CPU")[0]
    yield cpu
    tf.config.set_logical_device_configuration(cpu, [])


def _split(cpu, n):
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def test_logical_cpus_are_listed_as_tensorflow_lists_them(cpu):
    assert tf.config.get_logical_device_configuration(cpu) in (None, [])
    assert tf.config.experimental.VirtualDeviceConfiguration is tf.config.LogicalDeviceConfiguration
    confs = [tf.config.experimental.VirtualDeviceConfiguration()] * 3
    tf.config.experimental.set_virtual_device_configuration(cpu, confs)
    assert [d.name for d in tf.config.list_logical_devices("CPU")] == [
        "/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert [d.name for d in tf.config.list_physical_devices("CPU")] == ["/physical_device:CPU:0"]
    assert tf.config.experimental.get_virtual_device_configuration(cpu) == confs
    assert {"cpu:1", "cpu:2"} <= set(tf.config.list_devices())


def test_ops_run_on_a_logical_cpu_and_move_between_them(cpu):
    _split(cpu, 3)
    with tf.device("cpu:1"):
        x = tf.constant(np.arange(6000, dtype=np.float32))
        v = tf.Variable([1.0, 2.0])
    assert x.device == "/job:localhost/replica:0/task:0/device:CPU:1"
    assert x.device == "cpu:1" and x.device != "cpu:0"
    assert v.device.endswith("CPU:1")
    with tf.device("/device:CPU:2"):
        y = x * 2.0                      # a host input in a device scope is copied there
        with tf.GradientTape() as tape:
            tape.watch(x)
            s = tf.reduce_sum(x * x)
    assert y.device == "cpu:2" and s.device == "cpu:2"
    np.testing.assert_array_equal(y.numpy(), np.arange(6000, dtype=np.float32) * 2)
    g = tape.gradient(s, x)
    assert g.device == "cpu:1"           # the gradient goes back to where x lives
    np.testing.assert_array_equal(g.numpy(), 2 * x.numpy())
    np.testing.assert_array_equal((v + 1.0).numpy(), [2.0, 3.0])


def test_large_tensors_of_two_logical_cpus_mix_outside_a_device_scope(cpu):
    # they share the host's memory: no DeviceMismatchError in the explicit policy, as
    # between a GPU and the CPU (TensorFlow copies between any devices by itself)
    _split(cpu, 2)
    assert tf.config.get_device_policy() == "explicit"
    a = tf.constant(np.ones(6000, np.float32))
    with tf.device("cpu:1"):
        b = tf.constant(np.full(6000, 2.0, np.float32))
    total = a + b
    assert total.device in ("cpu:0", "cpu:1")
    np.testing.assert_array_equal(total.numpy(), np.full(6000, 3.0, np.float32))


def test_reconfiguring_keeps_devices_and_drops_the_removed_ones(cpu):
    _split(cpu, 3)
    one, two = get_device("cpu:1"), get_device("cpu:2")
    with tf.device("cpu:2"):
        x = tf.constant([5.0])
    _split(cpu, 3)
    assert get_device("cpu:1") is one and get_device("cpu:2") is two
    _split(cpu, 2)
    assert get_device("cpu:1") is one
    tf.config.set_soft_device_placement(False)
    try:
        with pytest.raises(tf.errors.NotFoundError, match="cpu:2"):
            tf.device("cpu:2")
    finally:
        tf.config.set_soft_device_placement(True)
    assert x.numpy().tolist() == [5.0]   # a tensor on a removed device stays readable


def test_bad_configurations_are_clear_errors(cpu):
    with pytest.raises(tf.errors.InvalidArgumentError, match="memory_limit"):
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(memory_limit=64)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="LogicalDeviceConfiguration"):
        tf.config.set_logical_device_configuration(cpu, 2)
    _split(cpu, 2)
    with pytest.raises(tf.errors.UnimplementedError, match="only the physical CPU"):
        tf.config.set_logical_device_configuration("cpu:1", [])
    assert len(tf.config.list_logical_devices("CPU")) == 2


def test_a_mirrored_strategy_runs_one_replica_per_logical_cpu(cpu):
    _split(cpu, 2)
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        v = tf.Variable(1.0)
        opt = tf.keras.optimizers.SGD(0.1)
    xs = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))

    def step(x):
        with tf.GradientTape() as tape:
            loss = v * x
        opt.apply_gradients([(tape.gradient(loss, v), v)])
        return x * 10.0

    out = strategy.run(step, args=(xs,))
    assert [t.device for t in out.values] == ["cpu:0", "cpu:1"]
    assert [float(t.numpy()) for t in out.values] == [10.0, 20.0]
    assert float(v.numpy()) == pytest.approx(1.0 - 0.1 * 3.0)    # gradients summed, applied once
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)
    assert float(total.numpy()) == 30.0


_HOOKED = tf.distribute is not None and bool(getattr(random_generator, "distribute_hooks", None))


@pytest.mark.skipif(not _HOOKED, reason="tf.random.Generator has no tf.distribute hook yet "
                    "(/tmp/nb49/generator_replicas.diff)")
def test_generators_give_each_replica_tensorflows_stream(cpu):
    # TensorFlow 2.21's numbers (the random-numbers guide, two virtual CPUs)
    _split(cpu, 2)
    strategy = tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])

    def draws(per_replica):
        return [round(float(t.numpy()), 5) for t in per_replica.values]

    with strategy.scope():
        g = tf.random.Generator.from_seed(1)
        assert draws(strategy.run(lambda: g.normal([]))) == [-0.8793, 0.02066]
        assert draws(strategy.run(lambda: g.normal([]))) == [-1.58226, 0.77539]
    assert g.state.numpy().tolist() == [513, 0, 0]      # advanced once per step
    with strategy.scope():
        traced = tf.random.Generator.from_seed(1)
    f = tf.function(lambda: traced.normal([]))         # given to run: each replica runs
    assert draws(strategy.run(f)) == [-0.8793, 0.02066]  # its Python function, as TF
    shared = tf.random.Generator.from_seed(1)             # made outside: drawn in turn
    assert draws(strategy.run(lambda: shared.normal([]))) == [0.43842, 1.62724]

    def own():
        mine = tf.random.Generator.from_seed(1)
        return tf.stack([mine.normal([]), mine.normal([])])

    out = strategy.run(own)
    np.testing.assert_allclose([t.numpy() for t in out.values],
                               [[-0.87930447, -1.5822568], [0.020661574, 0.77539235]], rtol=1e-5)
