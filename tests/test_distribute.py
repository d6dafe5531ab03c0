"""tf.distribute (issue 49): the strategy API, MirroredStrategy over local devices, and the
done-when of the custom training loop: the same weights (to float tolerance) with no
strategy, with MirroredStrategy(["cpu:0"]) and with MirroredStrategy(["cpu:0", "opencl:0"])."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors

HAVE_OPENCL = "opencl:0" in [str(d) for d in tf.list_devices()]
needs_opencl = pytest.mark.skipif(not HAVE_OPENCL, reason="no opencl:0 device")

TWO = ["cpu:0", "opencl:0"] if HAVE_OPENCL else None


def _two():
    if TWO is None:
        pytest.skip("no opencl:0 device")
    return tf.distribute.MirroredStrategy(TWO)


# --- the custom training loop: same weights with and without a strategy -------------------

RNG = np.random.default_rng(0)
X = RNG.normal(size=(10, 3)).astype(np.float32)
Y = RNG.normal(size=(10, 1)).astype(np.float32)
GLOBAL_BATCH = 5
W0 = [RNG.normal(size=(3, 4)).astype(np.float32) * 0.5, np.zeros(4, np.float32),
      RNG.normal(size=(4, 1)).astype(np.float32) * 0.5, np.zeros(1, np.float32)]


def _model():
    m = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="tanh"),
                             tf.keras.layers.Dense(1)])
    m(tf.constant(X[:1]))
    for v, w in zip(m.trainable_variables, W0):
        v.assign(w)
    return m


def _train(strategy, make_opt, steps_per_epoch_batches=2, epochs=2, traced=False):
    """A custom loop as the distributed-training guide writes it; returns the weights."""
    ctx = strategy.scope() if strategy is not None else tf.distribute.get_strategy().scope()
    with ctx:
        model = _model()
        opt = make_opt()
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(GLOBAL_BATCH)

    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_sum((model(x) - y) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    s = strategy if strategy is not None else tf.distribute.get_strategy()

    def dist_step(batch):
        losses = s.run(step, args=batch)
        return s.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    if traced:
        dist_step = tf.function(dist_step)
    dist = s.experimental_distribute_dataset(ds) if strategy is not None else ds
    losses = []
    for _ in range(epochs):
        for batch in dist:
            losses.append(float(dist_step(batch)))
    return [v.numpy() for v in model.trainable_variables], losses, opt


OPTIMIZERS = {"sgd": lambda: tf.keras.optimizers.SGD(0.1),
              "adam": lambda: tf.keras.optimizers.Adam(0.05)}


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_custom_loop_same_weights_one_cpu_replica(opt):
    ref, ref_losses, _ = _train(None, OPTIMIZERS[opt])
    got, losses, _ = _train(tf.distribute.MirroredStrategy(["cpu:0"]), OPTIMIZERS[opt])
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref_losses, losses, rtol=1e-5)


@needs_opencl
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
@pytest.mark.parametrize("order", [1, -1], ids=["cpu-first", "opencl-first"])
def test_custom_loop_same_weights_cpu_and_opencl(opt, order):
    # opencl first: the variables live on a device the runtime does not copy from by
    # itself (as a GPU's): a replica on cpu:0 reads them through a copy
    ref, ref_losses, _ = _train(None, OPTIMIZERS[opt])
    got, losses, o = _train(tf.distribute.MirroredStrategy(TWO[::order]), OPTIMIZERS[opt])
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ref_losses, losses, rtol=1e-4)
    assert int(o.iterations.numpy()) == 4            # applied once per step, not per replica


@needs_opencl
def test_custom_loop_in_tf_function_same_weights():
    ref, _, _ = _train(None, OPTIMIZERS["sgd"])
    for devices in (TWO, TWO[::-1], ["opencl:0"]):
        got, _, _ = _train(tf.distribute.MirroredStrategy(devices), OPTIMIZERS["sgd"],
                           traced=True)
        for a, b in zip(ref, got):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_scope_makes_mirrored_variables_and_optimizer_slots():
    s = tf.distribute.MirroredStrategy(["cpu:0"])
    with s.scope():
        v = tf.Variable([1.0, 2.0])
        opt = tf.keras.optimizers.Adam(0.1)
        opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    assert isinstance(v, tf.distribute.MirroredVariable) and isinstance(v, tf.Variable)
    assert all(isinstance(x, tf.distribute.MirroredVariable) for x in opt.variables()
               if x.dtype == tf.float32)
    assert s.extended.variable_created_in_scope(v)
    assert not isinstance(tf.Variable(1.0), tf.distribute.MirroredVariable)
    assert "MirroredVariable:{" in repr(v)


@needs_opencl
def test_layer_built_lazily_inside_run_is_built_once():
    s = _two()
    with s.scope():
        layer = tf.keras.layers.Dense(2)
    out = s.run(lambda x: layer(x), args=(tf.ones([1, 3]),))
    assert len(layer.trainable_variables) == 2
    assert all(isinstance(v, tf.distribute.MirroredVariable) for v in layer.trainable_variables)
    a, b = s.experimental_local_results(out)
    assert a.device == "cpu:0" and b.device == "opencl:0"
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


# --- reductions and the replica context ------------------------------------------------------

@needs_opencl
def test_reduce_sum_mean_with_and_without_axis():
    s = _two()
    pr = s.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([1.0, 2.0, 3.0]) * float(ctx.replica_id_in_sync_group + 1))
    assert isinstance(pr, tf.distribute.PerReplica)
    R = tf.distribute.ReduceOp
    np.testing.assert_allclose(s.reduce(R.SUM, pr, axis=None).numpy(), [3, 6, 9])
    np.testing.assert_allclose(s.reduce(R.MEAN, pr, axis=None).numpy(), [1.5, 3, 4.5])
    assert float(s.reduce("SUM", pr, axis=0)) == 18.0
    assert float(s.reduce("MEAN", pr, axis=0)) == 3.0
    np.testing.assert_allclose(s.gather(pr, axis=0).numpy(), [1, 2, 3, 2, 4, 6])
    assert float(s.reduce("MEAN", 3.0, axis=None)) == 3.0
    with pytest.raises(errors.InvalidArgumentError, match="cannot be reduced with SUM"):
        s.reduce("SUM", 3.0, axis=None)
    with pytest.raises(errors.InvalidArgumentError, match="ReduceOp.SUM or"):
        s.reduce("MAX", pr, axis=None)


def test_reduce_on_one_replica_and_default_strategy():
    s = tf.distribute.MirroredStrategy(["cpu:0"])
    out = s.run(lambda: tf.constant([1.0, 2.0]))
    assert isinstance(out, tf.Tensor)                    # one replica in all: a plain value
    assert float(s.reduce("SUM", out, axis=0)) == 3.0
    d = tf.distribute.get_strategy()
    assert float(d.reduce("SUM", 1.0, axis=None)) == 1.0
    assert d.num_replicas_in_sync == 1 and not tf.distribute.has_strategy()


@needs_opencl
def test_all_reduce_all_gather_and_merge_call_inside_run():
    s = _two()

    def fn():
        ctx = tf.distribute.get_replica_context()
        rid = tf.cast(ctx.replica_id_in_sync_group, tf.float32)
        total = ctx.all_reduce(tf.distribute.ReduceOp.SUM, {"a": rid + 1.0, "b": [rid]})
        mean = ctx.all_reduce("MEAN", rid)
        gathered = ctx.all_gather(tf.reshape(rid, [1]), axis=0)
        merged = ctx.merge_call(lambda strategy, v: strategy.reduce("SUM", v, axis=None),
                                args=(rid * 10.0,))
        return total, mean, gathered, merged

    total, mean, gathered, merged = s.run(fn)
    assert [float(x) for x in s.experimental_local_results(total["a"])] == [3.0, 3.0]
    assert [float(x) for x in s.experimental_local_results(total["b"][0])] == [1.0, 1.0]
    assert [float(x) for x in s.experimental_local_results(mean)] == [0.5, 0.5]
    assert [x.numpy().tolist() for x in s.experimental_local_results(gathered)] == [[0, 1]] * 2
    assert float(merged) == 10.0                          # one object for every replica
    devs = [str(x.device) for x in s.experimental_local_results(total["a"])]
    assert devs[0].endswith("CPU:0") and devs[1].endswith("OPENCL:0")


def test_contexts():
    s = tf.distribute.MirroredStrategy(["cpu:0"])
    assert not tf.distribute.in_cross_replica_context()
    assert tf.distribute.get_replica_context() is not None
    with s.scope():
        assert tf.distribute.get_strategy() is s and tf.distribute.has_strategy()
        assert tf.distribute.in_cross_replica_context()
        assert tf.distribute.get_replica_context() is None
        with s.scope():                                   # the same strategy nests
            pass
        seen = s.run(lambda: (tf.distribute.in_cross_replica_context(),
                              tf.distribute.get_strategy() is s,
                              tf.distribute.get_replica_context().num_replicas_in_sync))
    assert seen == (False, True, 1)
    assert tf.distribute.get_strategy() is not s


# --- errors: nothing hangs -----------------------------------------------------------------------

@needs_opencl
def test_exception_in_one_replica_is_reraised_and_nothing_hangs():
    s = _two()
    before = threading.active_count()

    def fn():
        ctx = tf.distribute.get_replica_context()
        if int(ctx.replica_id_in_sync_group) == 1:
            raise ValueError("replica one failed")
        return ctx.all_reduce("SUM", 1.0)          # replica 0 waits here: woken, unwinds

    with pytest.raises(ValueError, match="replica one failed"):
        s.run(fn)

    def uneven():
        ctx = tf.distribute.get_replica_context()
        if int(ctx.replica_id_in_sync_group) == 0:
            return 1.0
        return ctx.all_reduce("SUM", 1.0)

    with pytest.raises(errors.FailedPreconditionError, match="same sync points"):
        s.run(uneven)
    # an error in the merge function (a gradient of the wrong shape): the caller gets it,
    # the variable is untouched, the replicas unwind
    with s.scope():
        w = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.SGD(0.1)
    with pytest.raises(errors.InvalidArgumentError, match="shape"):
        s.run(lambda: opt.apply_gradients([(tf.ones([3]), w)]))
    assert w.numpy().tolist() == [1.0, 2.0]
    assert threading.active_count() == before
    assert float(s.reduce("SUM", s.run(lambda: tf.constant(1.0)), axis=None)) == 2.0


def test_bad_devices_and_mixed_strategies():
    with pytest.raises(errors.InvalidArgumentError, match="unknown device 'foo:7'"):
        tf.distribute.MirroredStrategy(["cpu:0", "foo:7"])
    if not tf.num_gpus():
        # soft placement, as tf.device's (TensorFlow accepts the guide's ["/gpu:0", "/gpu:1"]
        # on a machine without GPUs): the replicas run on cpu:0; off, an error
        s = tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"])
        assert s.extended.local_devices == ("cpu:0", "cpu:0")
        assert s.reduce("SUM", s.run(lambda: tf.constant(1.0)), axis=None).numpy() == 2.0
        tf.config.set_soft_device_placement(False)
        try:
            with pytest.raises(errors.InvalidArgumentError, match="unknown device '/gpu:0'"):
                tf.distribute.MirroredStrategy(["/gpu:0"])
        finally:
            tf.config.set_soft_device_placement(True)
    with pytest.raises(errors.InvalidArgumentError, match="listed twice"):
        tf.distribute.MirroredStrategy(["cpu:0", "/device:CPU:0"])
    with pytest.raises(errors.InvalidTypeError, match="cross_device_ops"):
        tf.distribute.MirroredStrategy(["cpu:0"], cross_device_ops="nccl")
    s = tf.distribute.MirroredStrategy(["/cpu:0"],
                                       cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
    one = tf.distribute.OneDeviceStrategy("/device:CPU:0")
    with s.scope():
        with pytest.raises(errors.FailedPreconditionError, match="Mixing different"):
            with one.scope():
                pass
        with pytest.raises(errors.FailedPreconditionError, match="Mixing different"):
            one.run(lambda: 1)
    with pytest.raises(errors.FailedPreconditionError, match="inside strategy.run"):
        s.run(lambda: s.run(lambda: 1))
    with pytest.raises(errors.FailedPreconditionError, match="inside strategy.run"):
        s.run(lambda: s.reduce("SUM", 1.0, axis=None))
    with s.scope():
        with pytest.raises(errors.FailedPreconditionError, match="cross-replica"):
            tf.nn.compute_average_loss([1.0, 2.0])


def test_default_devices_and_one_device_strategy():
    s = tf.distribute.MirroredStrategy()
    gpus = [d.name for d in tf.list_devices() if d.is_gpu]
    assert s.extended.local_devices == tuple(gpus or [d.name for d in tf.list_devices()
                                                      if d.is_host])
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    with one.scope():
        v = tf.Variable(1.0)
    assert float(one.run(lambda: v * 2.0)) == 2.0      # read on cpu:0 wherever v lives
    central = tf.distribute.experimental.CentralStorageStrategy(["cpu:0"])
    with central.scope():
        w = tf.keras.layers.Dense(1)
        w.build([None, 2])
    assert central.variable_device == "cpu:0" and w.kernel.device == "cpu:0"


# --- input -------------------------------------------------------------------------------------

@needs_opencl
def test_distributed_dataset_splits_global_batches():
    s = _two()
    dd = s.experimental_distribute_dataset(tf.data.Dataset.range(10).batch(4))
    got = [[x.numpy().tolist() for x in b.values] for b in dd]
    assert got == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], [9]]]
    it = iter(dd)
    first = next(it)
    assert str(first.values[1].device).endswith("OPENCL:0")
    # a plain Python iterable of (x, y) batches; an uneven batch splits as np.array_split
    batches = [(np.arange(5.0, dtype=np.float32), np.arange(5) * 2)]
    (x, y), = list(s.experimental_distribute_dataset(batches))
    assert [v.numpy().tolist() for v in x.values] == [[0, 1, 2], [3, 4]]
    assert [v.numpy().tolist() for v in y.values] == [[0, 2, 4], [6, 8]]
    with pytest.raises(errors.InvalidArgumentError, match="batch the dataset"):
        list(s.experimental_distribute_dataset(tf.data.Dataset.range(3)))


@needs_opencl
def test_distribute_datasets_from_function():
    s = _two()
    seen = []

    def dataset_fn(ctx):
        seen.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return tf.data.Dataset.range(8).batch(ctx.get_per_replica_batch_size(4))

    dd = s.distribute_datasets_from_function(dataset_fn)
    got = [[x.numpy().tolist() for x in b.values] for b in dd]
    assert seen == [(1, 0, 2)]
    assert got == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]


# --- checkpoints and random generators ------------------------------------------------------------

@needs_opencl
def test_checkpoint_of_mirrored_variables_restores_into_one_process(tmp_path):
    s = _two()
    with s.scope():
        model = _model()
        opt = tf.keras.optimizers.Adam(0.1)
    x = tf.constant(X[:4])

    def step(xb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_sum(model(xb) ** 2, axis=1),
                                              global_batch_size=4)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))

    s.run(step, args=(next(iter(s.experimental_distribute_dataset([x]))),))
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    plain = _model()
    plain_opt = tf.keras.optimizers.Adam(0.1)
    tf.train.Checkpoint(model=plain, optimizer=plain_opt).restore(path)
    for a, b in zip(model.trainable_variables, plain.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert type(b) is tf.Variable
    # and back: a one-process checkpoint into a mirrored model
    for v in plain.trainable_variables:
        v.assign(v * 2.0)
    path2 = tf.train.Checkpoint(model=plain).save(str(tmp_path / "plain"))
    with s.scope():
        again = _model()
    tf.train.Checkpoint(model=again).restore(path2)
    for a, b in zip(again.trainable_variables, plain.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_random_generator_split_per_replica(two_cpus):
    s = two_cpus
    with s.scope():
        g = tf.random.Generator.from_seed(1)
        gens = g.split(s.num_replicas_in_sync)
    out = s.run(lambda: gens[tf.distribute.get_replica_context().replica_id_in_sync_group]
                .normal([2]))
    a, b = [v.numpy() for v in s.experimental_local_results(out)]
    assert not np.allclose(a, b)                    # each replica its own stream
    # TensorFlow 2.21's numbers: generators made in the scope mix each replica's id into
    # their key, split ones too (unlike the same split made outside any strategy)
    np.testing.assert_allclose(a, [1.2842705, -2.0218976], rtol=1e-6)
    np.testing.assert_allclose(b, [0.9637098, -1.1859208], rtol=1e-6)
    draws = s.run(lambda: g.normal([]))             # the guide's pattern: runs, one per replica
    assert len(s.experimental_local_results(draws)) == 2


@needs_opencl
def test_optimizer_sums_over_replicas_once_unless_told_not_to():
    s = _two()
    with s.scope():
        w = tf.Variable([1.0, 2.0])
        opt = tf.keras.optimizers.SGD(0.1)
    s.run(lambda: opt.apply_gradients([(tf.ones([2]), w)]))          # summed: 2 per element
    np.testing.assert_allclose(w.numpy(), [0.8, 1.8], rtol=1e-6)
    s.run(lambda: opt.apply_gradients([(tf.ones([2]), w)],           # already aggregated
                                      experimental_aggregate_gradients=False))
    np.testing.assert_allclose(w.numpy(), [0.7, 1.7], rtol=1e-6)
    assert int(opt.iterations.numpy()) == 2
    # the loss helpers divide by the replicas in sync inside run
    out = s.run(lambda: (tf.nn.compute_average_loss([1.0, 3.0]),
                         tf.nn.scale_regularization_loss(1.0)))
    assert [float(v) for v in s.experimental_local_results(out[0])] == [1.0, 1.0]  # 4 / (2 * 2)
    assert [float(v) for v in s.experimental_local_results(out[1])] == [0.5, 0.5]


@needs_opencl
def test_next_of_a_distributed_iterator_inside_tf_function():
    s = _two()
    dd = s.experimental_distribute_dataset(tf.data.Dataset.range(12).batch(4))
    it = iter(dd)

    @tf.function
    def step(it):
        batch = next(it)                   # a node: the next element at every call
        return s.reduce("SUM", s.run(lambda x: tf.reduce_sum(x), args=(batch,)), axis=None)

    assert [int(step(it)) for _ in range(3)] == [6, 22, 38]

    @tf.function
    def loop():
        n = 0
        for _ in dd:
            n += 1
        return n

    with pytest.raises(errors.UnimplementedError, match="loop outside the function"):
        loop()


# --- the runner never hangs; logical CPUs; what TensorFlow has and tapeflow refuses ----------

@pytest.fixture
def two_cpus():
    """A MirroredStrategy over two logical CPUs (cpu:0, cpu:1); the split undone after."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    yield tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])
    tf.config.set_logical_device_configuration(cpu, [])


def _guarded(fn):
    """``fn()``'s result or exception, run in a daemon thread: a hang fails the test (the
    guard's join timeout) instead of stopping the suite."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout=120)
    assert not t.is_alive(), "strategy.run hung"
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_tf_functions_and_sync_points_inside_run_never_hang(two_cpus):
    s = two_cpus
    f = tf.function(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.)))
    # given to run itself: moved around the replicas, as TensorFlow does (it used to hang:
    # the first replica traced f holding its trace lock, waiting at the all_reduce for the
    # second, which waited for that lock)
    assert [float(t) for t in _guarded(lambda: s.run(f)).values] == [2.0, 2.0]
    with s.scope():
        v = tf.Variable(1.0)
        opt = tf.keras.optimizers.SGD(0.5)
    apply = tf.function(lambda: opt.apply_gradients([(tf.constant(1.0), v)]))
    _guarded(lambda: s.run(apply))
    assert float(v.numpy()) == 0.0            # TensorFlow's: both gradients, applied once
    # called deeper inside the replica function: its trace reaches the sync point in one
    # replica while the other waits for the trace: refused at once, nothing applied
    g = tf.function(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.)))
    with pytest.raises(errors.FailedPreconditionError,
                       match=r"ReplicaContext.all_reduce\) while tracing a tf.function"):
        _guarded(lambda: s.run(lambda: g()))
    apply2 = tf.function(lambda: opt.apply_gradients([(tf.constant(1.0), v)]))
    with pytest.raises(errors.FailedPreconditionError, match="Optimizer.apply_gradients"):
        _guarded(lambda: s.run(lambda: apply2()))
    assert float(v.numpy()) == 0.0
    with pytest.raises(errors.FailedPreconditionError, match="while tracing"):
        _guarded(tf.function(lambda: s.run(lambda: g())))      # (inside another, the same)
    # what works: the tf.function around strategy.run; one without sync points anywhere
    step = tf.function(lambda: s.run(
        lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.))))
    for _ in range(2):
        assert [float(t) for t in _guarded(step).values] == [2.0, 2.0]
    plain = tf.function(lambda x: x * 3.0)
    out = _guarded(lambda: s.run(lambda x: plain(x), args=(tf.constant(2.0),)))
    assert [float(t) for t in out.values] == [6.0, 6.0]
    assert float(g()) == 1.0            # the refused trace left the function usable


def test_a_replica_that_never_reaches_the_sync_point_is_a_clear_error(two_cpus):
    s = two_cpus
    s.replica_timeout_s = 0.5
    release = threading.Event()

    def fn():
        ctx = tf.distribute.get_replica_context()
        if int(ctx.replica_id_in_sync_group) == 1:
            release.wait()             # blocked on what no replica will set in its turn
        return ctx.all_reduce("SUM", 1.0)

    try:
        with pytest.raises(errors.DeadlineExceededError,
                           match=r"replica 1 neither returned nor reached .* replicas \[0\] "
                                 r"wait at sync point ReplicaContext.all_reduce"):
            _guarded(lambda: s.run(fn))
    finally:
        release.set()
    s.replica_timeout_s = None
    assert [float(t) for t in s.run(lambda: tf.constant(1.0)).values] == [1.0, 1.0]


def test_default_devices_are_every_logical_cpu_without_gpus(two_cpus):
    gpus = [d.name for d in tf.list_devices() if d.is_gpu]
    assert tf.distribute.MirroredStrategy().extended.local_devices == tuple(
        gpus or ["cpu:0", "cpu:1"])


def test_default_strategy_reduce_returns_a_plain_value_unchanged():
    d = tf.distribute.get_strategy()
    out = d.reduce("SUM", 1.0, axis=None)
    assert type(out) is float and out == 1.0
    assert float(d.reduce("MEAN", tf.constant([1.0, 3.0]), axis=0)) == 2.0
    with pytest.raises(errors.InvalidArgumentError, match="reduce_op"):
        d.reduce("MAX", 1.0)


@pytest.mark.parametrize("name", ["TPUStrategy", "experimental.TPUStrategy",
                                  "ParameterServerStrategy",
                                  "experimental.ParameterServerStrategy"])
def test_tpu_and_parameter_server_strategies_are_clear_errors(name):
    cls = tf.distribute
    for part in name.split("."):
        cls = getattr(cls, part)                    # the names exist, as TensorFlow's do
    with pytest.raises(errors.UnimplementedError,
                       match=r"not available in tapeflow: .*(use|synchronously with) "
                             r"tf.distribute.M"):
        cls(None)


# --- review fixes (issue 49): aggregation of updates inside run, devices, reduce ------------

@pytest.mark.parametrize("agg, add, assign", [
    (None, 3.0, 2.0), ("NONE", 3.0, 2.0), ("SUM", 6.0, 5.0), ("MEAN", 3.5, 2.5),
    ("ONLY_FIRST_REPLICA", 3.0, 2.0)])
def test_updates_inside_run_apply_once_by_the_variables_aggregation(two_cpus, agg, add, assign):
    # TensorFlow 2.21's numbers (its primary copy) with replica i passing i + 2
    s = two_cpus
    kw = {} if agg is None else {"aggregation": getattr(tf.VariableAggregation, agg)}
    with s.scope():
        v = tf.Variable(1.0, **kw)
    assert v.aggregation is getattr(tf.VariableAggregation, agg or "NONE")
    for op, want in [("assign_add", add), ("assign", assign), ("assign_sub", 2.0 - add)]:
        v.assign(1.0)                                   # cross-replica: applied as it is

        def f():
            ctx = tf.distribute.get_replica_context()
            getattr(v, op)(tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 2.0)
            return v.read_value()

        out = _guarded(lambda: s.run(f))
        assert float(v.numpy()) == want, (op, agg)
        assert [float(t) for t in out.values] == [want, want]
    with s.scope():
        w = tf.Variable(1, aggregation="mean")          # (Keras's lowercase names too)
        with pytest.raises(errors.InvalidArgumentError, match="aggregation"):
            tf.Variable(1.0, aggregation="max")
    with pytest.raises(errors.InvalidArgumentError, match="int32 variable cannot aggregate"):
        _guarded(lambda: s.run(lambda: w.assign_add(1)))
    with s.scope():
        a, b = [tf.Variable(0.0, aggregation="sum") for _ in range(2)]
        own = [tf.Variable(0.0) for _ in range(2)]
    # NONE is no sync point: a variable each replica updates alone moves with each
    _guarded(lambda: s.run(lambda: own[
        tf.distribute.get_replica_context().replica_id_in_sync_group].assign_add(5.0)))
    assert [float(v.numpy()) for v in own] == [5.0, 5.0]
    with pytest.raises(errors.FailedPreconditionError,
                       match=r"different sync points \(replica 0 at MirroredVariable.assign of "
                             r"'.+', replica 1 at MirroredVariable.assign of '.+'\)"):
        _guarded(lambda: s.run(lambda: (a if int(
            tf.distribute.get_replica_context().replica_id_in_sync_group) == 0 else b
        ).assign(1.0)))
    with pytest.raises(errors.FailedPreconditionError, match="same sync points"):
        _guarded(lambda: s.run(lambda: a.assign(1.0) if int(
            tf.distribute.get_replica_context().replica_id_in_sync_group) == 0 else None))


def test_metrics_and_batch_norm_statistics_update_once_per_step(two_cpus):
    s = two_cpus
    with s.scope():
        layer = tf.keras.layers.Dense(1)
        layer.build([None, 2])
        agg = layer.add_weight("acc", [], initializer="zeros", aggregation="sum", trainable=False)
        m = tf.keras.metrics.Mean()
        bn = tf.keras.layers.BatchNormalization(momentum=0.5)
        bn.build([None, 2])
    assert layer.kernel.aggregation is tf.VariableAggregation.NONE
    assert bn.moving_mean.aggregation is tf.VariableAggregation.ONLY_FIRST_REPLICA
    assert agg.aggregation is tf.VariableAggregation.SUM
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    ds = s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(4))
    for batch in ds:
        _guarded(lambda: s.run(lambda b: (m.update_state(b), bn(b, training=True),
                                          agg.assign_add(1.0)), args=(batch,)))
    assert float(m.result()) == 3.5 and float(agg.numpy()) == 2.0     # every replica counts
    # BatchNormalization's moving statistics: replica 0's batch, applied once (TF 2.21)
    assert np.allclose(bn.moving_mean.numpy(), 0.5 * x[:2].mean(axis=0))
    assert all(v.aggregation is tf.VariableAggregation.SUM for v in m.variables)


def test_bn_moving_statistics_under_fit_match_tensorflow(two_cpus):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(8, 3)) * 3 + 5).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    with two_cpus.scope():
        m = tf.keras.Sequential([tf.keras.layers.BatchNormalization(momentum=0.5),
                                 tf.keras.layers.Dense(1, kernel_initializer="ones")])
        m.compile(tf.keras.optimizers.SGD(0.1), "mse")
    m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    # TensorFlow 2.21's [2.600953, 2.3710122, 2.6273532] (it used to move twice: 3.32...)
    assert np.allclose(m.layers[0].moving_mean.numpy(), 0.5 * x[:4].mean(axis=0), atol=1e-5)


def test_devices_logical_device_objects_and_missing_logical_cpus():
    cpus = tf.config.list_logical_devices("CPU")
    s = tf.distribute.MirroredStrategy(cpus)
    assert s.extended.local_devices == tuple(d.name for d in tf.list_devices() if d.is_host)
    if [d.name for d in tf.list_devices() if d.is_host] == ["cpu:0"]:
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"'cpu:1' does not exist .*set_logical_device_configuration"):
            tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"])


def test_reduce_mean_of_integers_is_float64_and_bad_axes_are_clear(two_cpus):
    s = two_cpus
    pi = s.run(lambda: tf.constant([1, 2, 4]) * (
        tf.distribute.get_replica_context().replica_id_in_sync_group + 1))
    out = s.reduce("MEAN", pi, axis=None)
    assert out.dtype == tf.float64 and out.numpy().tolist() == [1.5, 3.0, 6.0]
    assert float(s.reduce("MEAN", pi, axis=0)) == 3.5
    assert s.reduce("SUM", pi, axis=None).dtype == tf.int32
    r = s.run(lambda: tf.distribute.get_replica_context().all_reduce("MEAN", tf.constant(3) * (
        tf.distribute.get_replica_context().replica_id_in_sync_group + 1)))
    assert [float(t) for t in r.values] == [4.5, 4.5]
    pr = s.run(lambda: tf.ones([2, 3]))
    for axis in (2, -3):
        with pytest.raises(errors.InvalidArgumentError,
                           match=rf"axis {axis} is out of range .* rank 2 \(shape \(2, 3\)\)"):
            s.reduce("SUM", pr, axis=axis)


@needs_opencl
def test_default_strategy_follows_the_default_device():
    d = tf.distribute.get_strategy()
    assert d.extended.local_devices == ("cpu:0",)
    tf.config.set_default_device("opencl:0")
    try:
        ds = d.experimental_distribute_dataset(tf.data.Dataset.range(4).batch(2))
        assert d.extended.local_devices == ("opencl:0",)
        assert next(iter(ds)).device.endswith("OPENCL:0")
    finally:
        tf.config.set_default_device(None)


def test_a_restore_deferred_to_a_lazy_build_inside_run_writes_the_values(two_cpus, tmp_path):
    # Checkpoint.restore before the first step builds the model/metric (TensorFlow's
    # usual pattern): the build, and so the restore, happens inside strategy.run; a
    # restore writes the value itself, never through the replicas' aggregated update
    s = two_cpus

    def mk():
        return tf.keras.Sequential([tf.keras.layers.Dense(2), tf.keras.layers.BatchNormalization()])
    src = mk()
    src(tf.ones([2, 3]))
    src.layers[1].moving_mean.assign([5.0, 6.0])
    msrc = tf.keras.metrics.Sum()
    msrc.update_state([1.0, 3.0])
    path = tf.train.Checkpoint(model=src, metric=msrc).save(str(tmp_path / "c"))
    with s.scope():
        model, met = mk(), tf.keras.metrics.Sum()
    tf.train.Checkpoint(model=model, metric=met).restore(path)
    dx = s.experimental_distribute_values_from_function(lambda ctx: tf.ones([2, 3]))
    _guarded(lambda: s.run(lambda a: model(a, training=False), args=(dx,)))
    assert model.layers[1].moving_mean.numpy().tolist() == [5.0, 6.0]
    for a, b in zip(model.weights, src.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    _guarded(lambda: s.run(lambda: met.update_state(tf.constant([2.0]))))
    assert float(met.result()) == 8.0        # the checkpoint's 4, then 2 from each replica


def test_a_deferred_restore_that_fails_stays_pending(tmp_path):
    src = tf.keras.layers.Dense(2)
    src.build([None, 3])
    path = tf.train.Checkpoint(layer=src).save(str(tmp_path / "c"))
    layer = tf.keras.layers.Dense(2)
    tf.train.Checkpoint(layer=layer).restore(path)
    with pytest.raises(errors.InvalidArgumentError, match="has shape"):
        layer(tf.ones([1, 4]))             # built with a (4, 2) kernel: the (3, 2) refused
    # not dropped: asked again, the pending values are tried again (not silently kept)
    with pytest.raises(errors.InvalidArgumentError, match="has shape"):
        tf.train.restore_deferred(layer)


def test_replicas_at_different_kinds_of_sync_point_are_a_clear_error(two_cpus):
    s = two_cpus
    with s.scope():
        a = tf.Variable([0.0, 0.0], aggregation="sum")
        w = tf.Variable(1.0)
        opt = tf.keras.optimizers.SGD(1.0)

    def rid():
        return int(tf.distribute.get_replica_context().replica_id_in_sync_group)

    def all_reduce():
        return tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.0))
    cases = [
        (lambda: (a.assign_add if rid() == 0 else a.assign_sub)([1.0, 1.0]),
         "replica 0 at MirroredVariable.assign_add of '.+', "
         "replica 1 at MirroredVariable.assign_sub of '.+'"),
        (lambda: all_reduce() if rid() == 0 else a.assign_add([1.0, 1.0]),
         "replica 0 at ReplicaContext.all_reduce, replica 1 at MirroredVariable.assign_add"),
        (lambda: opt.apply_gradients([(tf.constant(1.0), w)]) if rid() == 0 else
         a.assign([1.0, 1.0]),
         "replica 0 at Optimizer.apply_gradients, replica 1 at MirroredVariable.assign of"),
    ]
    for fn, what in cases:
        with pytest.raises(errors.FailedPreconditionError,
                           match=r"reached different sync points \(" + what):
            _guarded(lambda: s.run(fn))
    assert a.numpy().tolist() == [0.0, 0.0] and float(w.numpy()) == 1.0     # nothing applied
    _guarded(lambda: s.run(lambda: a.assign_add([1.0, 1.0])))               # still usable
    assert a.numpy().tolist() == [2.0, 2.0]


def test_gather_inside_run_is_refused_as_reduce_is(two_cpus):
    s = two_cpus

    def fn():
        return s.gather(tf.constant([1.0]), axis=0)
    with pytest.raises(errors.FailedPreconditionError,
                       match=r"gather called inside strategy.run: .*all_gather"):
        _guarded(lambda: s.run(fn))
    assert isinstance(errors.FailedPreconditionError("x"), RuntimeError)     # (TF's type)
    out = _guarded(lambda: s.run(lambda: tf.distribute.get_replica_context().all_gather(
        tf.constant([1.0]), axis=0)))
    assert [t.numpy().tolist() for t in out.values] == [[1.0, 1.0], [1.0, 1.0]]


def test_a_trace_is_replayed_only_in_the_context_it_was_made_in(two_cpus):
    s = two_cpus
    with s.scope():
        c = tf.Variable(0.0, aggregation="mean")
        own = tf.Variable(0.0)                  # NONE: replica 0's updates kept

    @tf.function
    def bump(x):
        c.assign_add(x)

    with s.scope():
        bump(tf.constant(1.0))                  # traced in cross-replica context: plain
    assert float(c.numpy()) == 1.0
    # inside run it is traced again, where the update is a sync point: refused at trace
    # time (not the cross-replica graph's plain assign, once per replica, unaggregated)
    with pytest.raises(errors.FailedPreconditionError, match="while tracing"):
        _guarded(lambda: s.run(lambda: bump(tf.constant(1.0))))
    assert float(c.numpy()) == 1.0
    bump(tf.constant(1.0))                      # and the plain call still replays
    assert float(c.numpy()) == 2.0

    @tf.function
    def tick():
        own.assign_add(1.0)
    for _ in range(3):
        _guarded(lambda: s.run(lambda: tick()))   # each replica's own trace: one update
    assert float(own.numpy()) == 3.0              # (TensorFlow's replica-0 copy: 3.0)
    tick()                                        # outside run: a trace of its own
    assert float(own.numpy()) == 4.0
    assert tick.experimental_get_tracing_count() == 3      # replica 0, replica 1, none
    assert not tf.tracing.function_cache.key_hooks         # (no strategy open: no cost)
