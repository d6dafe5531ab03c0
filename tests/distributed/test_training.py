"""Data-parallel training ends where training on the whole batch in one process ends:
each rank trains on its slice of every batch, and compares its weights with the
single-process run it computes itself (the data and initial weights are seeded)."""

import numpy as np
import pytest

import tapeflow as tf

D = tf.distributed
BATCH = 48           # divides by 1, 2 and 3 ranks
STEPS = 20


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * STEPS, 12)).astype(np.float32)
    y = rng.integers(0, 4, BATCH * STEPS).astype(np.int64)
    return x, y


def initial_weights():
    rng = np.random.default_rng(1)
    return [rng.standard_normal((12, 16)).astype(np.float32) * 0.3, np.zeros(16, np.float32),
            rng.standard_normal((16, 4)).astype(np.float32) * 0.3, np.zeros(4, np.float32)]


def loss_fn(params, x, y):
    w1, b1, w2, b2 = params
    logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def make_optimizer(kind):
    return (tf.train.GradientDescentOptimizer(0.1) if kind == "sgd"
            else tf.train.AdamOptimizer(0.01))


def train(kind, ranks, rank, distributed):
    """Weights after STEPS steps where this process sees rows ``rank::ranks`` of every
    batch (one process: ranks=1, rank=0 sees all)."""
    x, y = data()
    params = [tf.Variable(w) for w in initial_weights()]
    opt = make_optimizer(kind)
    if distributed:
        # start from different weights on purpose: the broadcast must fix it
        for p in params:
            p.assign_add(tf.constant(np.full(p.shape, 0.01 * rank, np.float32)))
        D.broadcast_variables(params, root_rank=0)
    per = BATCH // ranks
    for s in range(STEPS):
        lo = s * BATCH + rank * per
        xb, yb = tf.constant(x[lo:lo + per]), tf.constant(y[lo:lo + per])
        with tf.GradientTape() as tape:
            loss = loss_fn(params, xb, yb)
        if distributed:
            tape = D.DistributedGradientTape(tape)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
    return [p.numpy() for p in params]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_n_ranks_with_a_slice_each_end_like_one_process_with_the_whole_batch(kind):
    # contiguous slices: rank r gets rows [r*per, (r+1)*per) of each batch; the mean
    # of the slices' mean gradients is the whole batch's mean gradient
    got = train(kind, D.size(), D.rank(), distributed=True)
    ref = train(kind, 1, 0, distributed=False)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5)
    # and every rank holds the same weights, bit for bit
    for g in got:
        first = D.broadcast(tf.constant(g), root_rank=0).numpy()
        np.testing.assert_array_equal(g, first)


def test_distributed_optimizer_and_fit_callbacks():
    x, y = data()
    n, r = D.size(), D.rank()
    xs, ys = x[r::n], y[r::n]            # this rank's shard of the data
    tf.random.set_seed(100 + r)          # different initial weights per rank
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    opt = D.DistributedOptimizer(tf.keras.optimizers.Adam(0.01))
    assert isinstance(opt, tf.keras.optimizers.Adam)
    model.compile(optimizer=opt, loss=tf.keras.losses.SparseCategoricalCrossentropy(
        from_logits=True), metrics=["accuracy"])
    seen = []
    cb = tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(e))
    hist = model.fit(xs, ys, batch_size=16, epochs=2, shuffle=False, verbose=0,
                     callbacks=[D.BroadcastGlobalVariablesCallback(0),
                                D.MetricAverageCallback(), D.RankZeroOnly(cb)])
    for v in model.variables:
        np.testing.assert_array_equal(v.numpy(), D.broadcast(v.read_value(), 0).numpy())
    for v in opt.variables():
        np.testing.assert_array_equal(v.numpy(), D.broadcast(v.read_value(), 0).numpy())
    # the logged loss is the job's average: the same on every rank
    loss = hist.history["loss"][-1]
    assert float(D.broadcast(tf.constant(loss), 0)) == pytest.approx(loss)
    assert seen == ([0, 1] if r == 0 else [])


def test_broadcast_after_restore_on_the_root(tmp_path_factory):
    r = D.rank()
    params = [tf.Variable(w) for w in initial_weights()]
    opt = tf.train.AdamOptimizer(0.01)
    x, y = data()
    # one step everywhere (different data per rank): slots and step counts exist
    with tf.GradientTape() as tape:
        loss = loss_fn(params, tf.constant(x[r * 8:(r + 1) * 8]), tf.constant(y[r * 8:(r + 1) * 8]))
    opt.apply_gradients(zip(tape.gradient(loss, params), params))
    path = D.broadcast(tf.constant(np.frombuffer(
        str(tmp_path_factory.mktemp("ckpt") / "model").ljust(400).encode(), np.uint8)), 0)
    prefix = bytes(path.numpy()).decode().strip()
    if r == 0:
        saved = tf.train.Checkpoint(params=params, optimizer=opt).save(prefix)
    else:
        saved = None
    D.barrier()
    # a fresh job: rank 0 restores, the others start from scratch
    fresh = [tf.Variable(np.zeros_like(w)) for w in initial_weights()]
    opt2 = tf.train.AdamOptimizer(0.01)
    if r == 0:
        tf.train.Checkpoint(params=fresh, optimizer=opt2).restore(saved)
    D.broadcast_variables(fresh, 0)
    D.broadcast_optimizer_state(opt2, fresh, 0)
    for a, b in zip(fresh, D.grouped_allreduce(fresh, op=D.Max)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())    # identical on all ranks
    if r == 0:
        for a, b in zip(fresh, params):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    state = opt2.variables()
    assert state and all(np.array_equal(v.numpy(), D.broadcast(v.read_value(), 0).numpy())
                         for v in state)
