"""tf.distribute.MultiWorkerMirroredStrategy under a real MPI launcher: every check in one
launch (each launch costs seconds), run by tests/test_distribute_mpi.py as

    .venv/bin/mpiexec -n 2 .venv/bin/python tests/distribute_mpi_script.py OUT_DIR
    .venv/bin/mpiexec -n 3 .venv/bin/python tests/distribute_mpi_script.py OUT_DIR

Each rank checks with plain asserts (a failing rank aborts the whole job, its traceback
on stderr) and prints ``ok <check>`` lines; rank 0 writes OUT_DIR/results.json (the
figures the test compares with one process) and the checkpoint OUT_DIR/ckpt-1.
The reference, one process training on the same global batches, runs inside every
rank (no strategy, plain tapeflow), so no extra launch is needed.
"""

import json
import os
import pathlib
import sys

import numpy as np

import tapeflow as tf
from test_distribute_keras import check_loss_scaling_and_sum_under   # (tests/, on sys.path)

R = tf.distribute.ReduceOp
N_EXAMPLES, GLOBAL_BATCH = 28, 12          # global batches of 12, 12, 4 (4 = 2+1+1 on 3)


def data():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((N_EXAMPLES, 5)).astype(np.float32)
    y = rng.integers(0, 3, N_EXAMPLES).astype(np.int64)
    return x, y


def make_model():
    return tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu", input_shape=(5,)),
                                tf.keras.layers.Dense(3)])


class Seen(tf.keras.layers.Layer):
    """An identity layer that records the batch sizes it sees: each replica's slice."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.sizes = []

    def call(self, x):
        self.sizes.append(int(x.shape[0]))
        return x


def say(rank, what):
    print(f"ok {what} (rank {rank})", flush=True)


def check_collectives(strategy, rank, n):
    assert strategy.num_replicas_in_sync == n
    r = strategy.cluster_resolver
    assert (r.task_type, r.task_id) == ("worker", rank), (r.task_type, r.task_id)
    per = strategy.run(lambda: tf.constant([float(rank + 1), 1.0]))
    local = strategy.experimental_local_results(per)
    assert len(local) == 1 and local[0].numpy().tolist() == [rank + 1.0, 1.0]
    total = n * (n + 1) / 2
    np.testing.assert_allclose(strategy.reduce(R.SUM, per, axis=None).numpy(), [total, n])
    np.testing.assert_allclose(strategy.reduce(R.MEAN, per, axis=None).numpy(),
                               [total / n, 1.0])
    np.testing.assert_allclose(strategy.reduce(R.SUM, per, axis=0).numpy(), total + n)
    gathered = strategy.gather(per, axis=0).numpy()
    np.testing.assert_allclose(gathered, np.ravel([[i + 1.0, 1.0] for i in range(n)]))
    col = strategy.run(lambda: tf.constant([[float(rank)], [float(rank)]]))
    np.testing.assert_allclose(strategy.gather(col, axis=1).numpy(),
                               [list(range(n)), list(range(n))])

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        assert ctx.replica_id_in_sync_group == rank and ctx.num_replicas_in_sync == n
        return ctx.all_reduce(R.SUM, tf.constant(float(rank + 1)))
    out = strategy.experimental_local_results(strategy.run(replica_fn))[0]
    assert float(out) == total, float(out)
    # a resolver describing this job is accepted; one that does not is refused
    CR = tf.distribute.cluster_resolver
    spec = CR.ClusterSpec({"worker": [f"host{i}:2222" for i in range(n)]})
    again = tf.distribute.MultiWorkerMirroredStrategy(
        CR.SimpleClusterResolver(spec, task_type="worker", task_id=rank))
    assert again.num_replicas_in_sync == n and again.extended.worker_index == rank
    wrong = CR.ClusterSpec({"worker": [f"host{i}:2222" for i in range(n + 1)]})
    try:
        tf.distribute.MultiWorkerMirroredStrategy(CR.SimpleClusterResolver(wrong))
        raise AssertionError("a cluster of n + 1 workers was accepted in a job of n")
    except tf.errors.FailedPreconditionError as e:
        assert f"has {n + 1} worker" in str(e), e
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["h0:1"] * (n + 1)},
                                          "task": {"type": "worker", "index": 0}})
    try:
        tf.distribute.MultiWorkerMirroredStrategy()
        raise AssertionError("a TF_CONFIG of n + 1 workers was accepted in a job of n")
    except tf.errors.FailedPreconditionError as e:
        assert f"has {n + 1} worker" in str(e), e
    finally:
        del os.environ["TF_CONFIG"]
    say(rank, "collectives")


def check_dataset(strategy, rank, n):
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    dist = strategy.experimental_distribute_dataset(ds)
    seen = []
    for xb, _ in dist:
        mine = strategy.experimental_local_results(xb)[0].numpy()
        seen.append(mine.shape[0])
    splits = [np.array_split(np.arange(b), n)[rank].size
              for b in (GLOBAL_BATCH, GLOBAL_BATCH, N_EXAMPLES - 2 * GLOBAL_BATCH)]
    assert seen == splits, (seen, splits)

    def dataset_fn(ctx):
        assert (ctx.num_input_pipelines, ctx.input_pipeline_id) == (n, rank)
        assert ctx.num_replicas_in_sync == n and ctx.get_per_replica_batch_size(6 * n) == 6
        return tf.data.Dataset.from_tensor_slices(x).shard(n, rank).batch(6)
    first = next(iter(strategy.distribute_datasets_from_function(dataset_fn)))
    np.testing.assert_array_equal(strategy.experimental_local_results(first)[0].numpy(),
                                  x[rank::n][:6])
    say(rank, "dataset")


def train_custom(model, opt, strategy, x, y):
    """The custom loop of TensorFlow's guide: strategy.run + compute_average_loss."""
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    losses = []
    for epoch in range(2):
        for xb, yb, gbs in zip_sizes(strategy.experimental_distribute_dataset(ds)):
            def step_fn(xr, yr):
                with tf.GradientTape() as tape:
                    logits = model(xr, training=True)
                    per_ex = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yr,
                                                                            logits=logits)
                    loss = tf.nn.compute_average_loss(per_ex, global_batch_size=gbs)
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply_gradients(zip(grads, model.trainable_variables))
                return loss
            per = strategy.run(step_fn, args=(xb, yb))
            losses.append(float(strategy.reduce(R.SUM, per, axis=None)))
    return losses


def zip_sizes(dist):
    sizes = [GLOBAL_BATCH, GLOBAL_BATCH, N_EXAMPLES - 2 * GLOBAL_BATCH]
    for (xb, yb), gbs in zip(dist, sizes):
        yield xb, yb, gbs


def train_reference(weights, x, y):
    """One process, no strategy: the same global batches, the plain mean loss."""
    model = make_model()
    model.set_weights(weights)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    losses = []
    for epoch in range(2):
        for i in range(0, N_EXAMPLES, GLOBAL_BATCH):
            xb, yb = tf.constant(x[i:i + GLOBAL_BATCH]), tf.constant(y[i:i + GLOBAL_BATCH])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=yb, logits=model(xb, training=True)))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            losses.append(float(loss))
    return model, losses


def same_on_every_rank(arrays):
    """The largest difference between this rank's arrays and any other rank's."""
    flat = np.concatenate([np.ravel(a) for a in arrays]).astype(np.float32)
    every = tf.distributed.allgather(tf.constant(flat[None, :])).numpy()
    return float(np.abs(every - every[0]).max())


def check_custom_loop(strategy, rank, n, out):
    x, y = data()
    tf.random.set_seed(100 + rank)                 # different initial values per rank...
    with strategy.scope():
        model = make_model()
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    start = model.get_weights()
    assert same_on_every_rank(start) == 0.0        # ...but every rank starts from rank 0's
    losses = train_custom(model, opt, strategy, x, y)
    assert same_on_every_rank(model.get_weights()) == 0.0
    ref, ref_losses = train_reference(start, x, y)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), ref.get_weights()))
    assert diff < 1e-5, f"custom loop: weights differ from one process by {diff}"
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
    out["custom_loop_max_weight_diff"] = diff
    out["custom_loop_losses"] = losses
    say(rank, "custom loop == one process")
    return model, opt


def check_tf_function(strategy, rank, n):
    """TensorFlow's pattern: the distributed step inside a tf.function."""
    with strategy.scope():
        v = tf.Variable([1.0, 2.0])
        opt = tf.keras.optimizers.SGD(0.1)

    @tf.function
    def train_step(x):
        def step_fn(x):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(tf.reduce_sum(v * x, axis=1),
                                                  global_batch_size=2 * n)
            opt.apply_gradients([(tape.gradient(loss, v), v)])
            return loss
        return strategy.reduce(R.SUM, strategy.run(step_fn, args=(x,)), axis=None)

    want_v = np.array([1.0, 2.0])
    for _ in range(2):
        # replica r holds 2 rows of (r + 1): the global mean of v . x and its gradient
        ks = np.arange(1, n + 1)
        want_loss = 2 * float((ks * want_v.sum()).sum()) / (2 * n)
        loss = float(train_step(tf.ones([2, 2]) * (rank + 1)))
        want_v = want_v - 0.1 * 2 * ks.sum() / (2 * n)
        np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
        np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-6)
    # a trace is replayed only in the context it was made in: one made in cross-replica
    # context (plain updates) is traced again inside run (updates summed over workers),
    # and one made inside run (its allreduce) again where one worker alone calls it
    with strategy.scope():
        met = tf.keras.metrics.Sum()
        met.update_state(0.0)

    @tf.function
    def count(x):
        met.update_state(x)
    with strategy.scope():
        count(tf.constant(100.0))
    met.reset_state()
    strategy.run(lambda: count(tf.constant(float(rank + 1))))
    assert float(met.result()) == n * (n + 1) / 2, float(met.result())
    if rank == 0:
        count(tf.constant(1.0))          # (a replay of the in-run trace would wait forever)
    tf.distributed.barrier()
    assert float(met.result()) == n * (n + 1) / 2 + (rank == 0), float(met.result())
    say(rank, "tf.function")


def check_checkpoint(strategy, model, opt, rank, out_dir, out):
    """Worker 0 (the chief: strategy.extended.should_checkpoint) writes; every rank can
    read it back, into a model of one process."""
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    assert strategy.extended.should_checkpoint == (rank == 0)
    if strategy.extended.should_checkpoint:
        out["checkpoint"] = ckpt.save(str(out_dir / "ckpt"))
        out["weights"] = [w.tolist() for w in model.get_weights()]
    tf.distributed.barrier()
    plain = make_model()
    plain(tf.zeros([1, 5]))
    tf.train.Checkpoint(model=plain).restore(str(out_dir / "ckpt-1")).expect_partial()
    for a, b in zip(plain.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    # restored before the first step builds the model/metric (TF's usual pattern): the
    # build inside run restores the checkpoint's values, not summed over the workers
    src = tf.keras.metrics.Sum()
    src.update_state([1.0, 3.0])
    path = tf.train.Checkpoint(metric=src).write(str(out_dir / f"metric-{rank}" / "c"))
    with strategy.scope():
        lazy = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"),
                                    tf.keras.layers.Dense(3)])
        met = tf.keras.metrics.Sum()
    tf.train.Checkpoint(model=lazy).restore(str(out_dir / "ckpt-1")).expect_partial()
    tf.train.Checkpoint(metric=met).restore(path)
    assert not lazy.built
    strategy.run(lambda: (lazy(tf.zeros([1, 5])), met.update_state(tf.constant([0.0]))))
    assert float(met.result()) == 4.0, float(met.result())
    for a, b in zip(lazy.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    say(rank, "checkpoint")


def check_fit(strategy, rank, n, out):
    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    with strategy.scope():
        seen = Seen()
        model = tf.keras.Sequential([seen, *make_model().layers])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    start = model.get_weights()
    hist = model.fit(ds, epochs=2, verbose=0)
    per_replica = [np.array_split(np.arange(b), n)[rank].size
                   for b in (GLOBAL_BATCH, GLOBAL_BATCH, N_EXAMPLES - 2 * GLOBAL_BATCH)]
    assert seen.sizes[-3:] == per_replica, (seen.sizes, per_replica)   # fit split the batches
    assert same_on_every_rank(model.get_weights()) == 0.0
    ref = make_model()
    ref.set_weights(start)
    ref.compile(optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ref_hist = ref.fit(ds, epochs=2, verbose=0)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), ref.get_weights()))
    assert diff < 1e-5, f"fit: weights differ from one process by {diff}"
    np.testing.assert_allclose(hist.history["loss"], ref_hist.history["loss"], rtol=1e-5)
    out["fit_max_weight_diff"] = diff
    say(rank, "fit == one process")


def check_updates(strategy, rank, n):
    """Updates of mirrored variables inside run combine over the workers by the variable's
    aggregation and are applied once: every worker holds the same value (a Keras metric
    in a custom loop reads the global figure; BatchNormalization's moving statistics,
    NONE, are global replica 0's batch's under fit); an integer MEAN is float64."""
    with strategy.scope():
        met = tf.keras.metrics.Mean()
        total = tf.Variable(0.0, aggregation=tf.VariableAggregation.SUM)
        mean = tf.Variable(0.0, aggregation="mean")
        first = tf.Variable(0.0, aggregation="only_first_replica")
        own = tf.Variable(0.0)          # NONE: each worker's own (TensorFlow's too)
    x = np.arange(4.0 * n, dtype=np.float32).reshape(4 * n, 1)
    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices(x).batch(4 * n))

    def step(b):
        met.update_state(b)
        s = tf.reduce_sum(b)
        total.assign_add(s)
        mean.assign(s)
        first.assign(s)
        own.assign(s)
    for b in dist:
        strategy.run(step, args=(b,))
    assert float(met.result()) == x.mean(), float(met.result())
    assert float(total.numpy()) == x.sum() and float(first.numpy()) == x[:4].sum()
    assert float(own.numpy()) == x[4 * rank:4 * rank + 4].sum()
    np.testing.assert_allclose(float(mean.numpy()), x.sum() / n)
    ints = strategy.run(lambda: tf.constant(rank + 1))
    m = strategy.reduce(R.MEAN, ints, axis=None)
    assert m.dtype == tf.float64 and float(m) == (n + 1) / 2, m
    rng = np.random.default_rng(0)
    xb = (rng.normal(size=(4 * n, 3)) * 3 + 5).astype(np.float32)
    yb = rng.normal(size=(4 * n, 1)).astype(np.float32)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.BatchNormalization(momentum=0.5),
                                     tf.keras.layers.Dense(1)])
        model.compile(tf.keras.optimizers.SGD(0.1), "mse")
    model.fit(xb, yb, batch_size=4 * n, epochs=1, shuffle=False, verbose=0)
    mm = model.layers[0].moving_mean.numpy()
    assert same_on_every_rank([mm] + model.get_weights()) == 0.0
    np.testing.assert_allclose(mm, 0.5 * xb[:4].mean(axis=0), rtol=1e-5)
    say(rank, "updates aggregated over workers")


def check_loss_scaling(strategy, rank):
    """A LossScaleOptimizer with an inf gradient on the last worker's rows only skips the
    step on every worker (none hangs in the gradient allreduce), the scale changes once
    per step; a reduction="sum" loss trains as one process."""
    check_loss_scaling_and_sum_under(strategy)
    say(rank, "loss scaling == one process")


def main():
    out_dir = pathlib.Path(sys.argv[1])
    checks = sys.argv[2:] or ["collectives", "dataset", "custom", "checkpoint", "function",
                             "fit", "lso", "updates"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=120))
    rank, n = tf.distributed.rank(), tf.distributed.size()
    out = {"ranks": n, "device": strategy.extended.worker_devices[0]}
    if "collectives" in checks:
        check_collectives(strategy, rank, n)
    if "dataset" in checks:
        check_dataset(strategy, rank, n)
    if "custom" in checks:
        model, opt = check_custom_loop(strategy, rank, n, out)
        if "checkpoint" in checks:
            check_checkpoint(strategy, model, opt, rank, out_dir, out)
    if "function" in checks:
        check_tf_function(strategy, rank, n)
    if "fit" in checks:
        check_fit(strategy, rank, n, out)
    if "lso" in checks:
        check_loss_scaling(strategy, rank)
    if "updates" in checks:
        check_updates(strategy, rank, n)
    if rank == 0:
        (out_dir / "results.json").write_text(json.dumps(out))
    tf.distributed.barrier()
    say(rank, "all")


if __name__ == "__main__":
    main()
