"""Keras under a tf.distribute strategy: ``Model.fit``/``evaluate``/``predict`` of a model
created inside ``strategy.scope()`` split each global batch over the replicas and give
the weights and History one process gives (to float tolerance); weights saved under a
strategy load into a one-process model; mixing strategies is refused.

``reference_fit`` is the one-process training these tests compare against; the MPI tests
(MultiWorkerMirroredStrategy under mpiexec) import this file and call
``check_keras_under(strategy)`` on every worker.
"""

import contextlib
import copy
import warnings

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import FailedPreconditionError

#: 21 rows in batches of 8: 8, 8, 5 -- the last global batch splits unevenly (3 + 2)
N_ROWS, BATCH, EPOCHS = 21, 8, 2


def reference_data(n=N_ROWS):
    """The inputs (n, 4) and targets (n, 2), float32, the same on every process."""
    rng = np.random.RandomState(7)
    x = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    y = np.stack([x[:, 0] - 2 * x[:, 1], x[:, 2] * x[:, 3]], axis=1).astype(np.float32)
    return x, y


def reference_weights():
    """Fixed starting weights for the model of ``reference_model`` (no RNG involved)."""
    rng = np.random.RandomState(3)
    return [rng.uniform(-0.5, 0.5, (4, 5)).astype(np.float32), np.zeros(5, np.float32),
            rng.uniform(-0.5, 0.5, (5, 2)).astype(np.float32), np.full(2, 0.1, np.float32)]


def reference_model(strategy=None):
    """A tiny Dense model (with an L2 regulariser and a momentum optimizer, so the
    regularisation scaling and the optimizer's slots are exercised), created and compiled
    inside ``strategy.scope()`` when a strategy is given."""
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(5, activation="tanh", input_shape=(4,),
                                  kernel_regularizer=tf.keras.regularizers.l2(0.01)),
            tf.keras.layers.Dense(2)])
        model.set_weights(reference_weights())
        model.compile(tf.keras.optimizers.SGD(0.1, momentum=0.9), "mse", metrics=["mae"])
    return model


def reference_fit(strategy=None, dataset=None):
    """Train ``reference_model(strategy)`` with ``fit`` for EPOCHS epochs over
    ``reference_data()`` in global batches of BATCH, unshuffled, validating on its first
    6 rows: from arrays, or with ``dataset="dataset"`` from a ``tf.data`` dataset
    (``"distributed"``: that dataset through ``strategy.experimental_distribute_dataset``).
    Returns ``(model, history dict, weights as NumPy arrays)``."""
    x, y = reference_data()
    model = reference_model(strategy)
    val = (x[:6], y[:6])
    if dataset:
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
        if dataset == "distributed":
            data = strategy.experimental_distribute_dataset(data)
        history = model.fit(data, epochs=EPOCHS, verbose=0, validation_data=val)
    else:
        history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                            validation_data=val)
    return model, history.history, [np.asarray(w) for w in model.get_weights()]


def assert_same_training(got, want, rtol=1e-5, atol=1e-6):
    """``reference_fit`` results (history dict, weights) agree to float tolerance."""
    (hist, weights), (ref_hist, ref_weights) = got, want
    assert sorted(hist) == sorted(ref_hist)
    for k in ref_hist:
        np.testing.assert_allclose(hist[k], ref_hist[k], rtol=rtol, atol=atol, err_msg=k)
    assert len(weights) == len(ref_weights)
    for w, r in zip(weights, ref_weights):
        np.testing.assert_allclose(w, r, rtol=rtol, atol=atol)


def _devices():
    return {d.name.lower().replace("/device:", "") for d in tf.config.list_logical_devices()}


needs_opencl = pytest.mark.skipif("opencl:0" not in _devices(), reason="no opencl:0 device")

STRATEGIES = {
    "cpu": lambda: tf.distribute.MirroredStrategy(["cpu:0"]),
    "cpu+opencl": lambda: tf.distribute.MirroredStrategy(["cpu:0", "opencl:0"]),
}


@pytest.fixture(scope="module")
def reference():
    _, hist, weights = reference_fit()
    return hist, weights


def _strategy(kind):
    if "opencl" in kind and "opencl:0" not in _devices():
        pytest.skip("no opencl:0 device")
    return STRATEGIES[kind]()


@pytest.mark.parametrize("kind", ["cpu", "cpu+opencl"])
def test_fit_matches_one_process(kind, reference):
    strategy = _strategy(kind)
    model, hist, weights = reference_fit(strategy)
    assert model.distribute_strategy is strategy
    assert_same_training((hist, weights), reference)


@needs_opencl
@pytest.mark.parametrize("dataset", ["dataset", "distributed"])
def test_fit_on_a_dataset_matches_one_process(dataset, reference):
    _, hist, weights = reference_fit(_strategy("cpu+opencl"), dataset=dataset)
    assert_same_training((hist, weights), reference)


def test_one_replica_strategies_train_as_one_process(reference):
    _, hist, weights = reference_fit(tf.distribute.OneDeviceStrategy("cpu:0"))
    assert_same_training((hist, weights), reference)
    default = tf.distribute.get_strategy()
    with default.scope():           # the default strategy: no strategy at all
        model, hist, weights = reference_fit()
    assert model.distribute_strategy is None
    assert_same_training((hist, weights), reference)


class _Subclassed(tf.keras.Model):
    """Built lazily at the first call (the strategy builds it before the replicas run)."""

    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(5, activation="tanh")
        self.out = tf.keras.layers.Dense(2)

    def call(self, inputs, training=None):
        return self.out(self.hidden(inputs))


class _AbsError(tf.keras.metrics.Mean):
    """A metric object (its variables are mirrored; updated on the global batch)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        super().update_state(tf.abs(y_true - y_pred))


def _train_other_models(strategy):
    """A subclassed model (lazily built, a metric object) and a functional model with
    two outputs, each trained one epoch with shuffling (seeded); their histories."""
    x, y = reference_data()
    out = []
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        tf.random.set_seed(11)
        sub = _Subclassed()
        sub.compile("adam", "mse", metrics=[_AbsError(name="abs_error")])
        inp = tf.keras.Input((4,))
        h = tf.keras.layers.Dense(3, activation="relu")(inp)
        fun = tf.keras.Model(inp, [tf.keras.layers.Dense(2)(h), tf.keras.layers.Dense(2)(h)])
        fun.compile("sgd", "mse")
    for model, target in ((sub, y), (fun, [y, 2 * y])):
        assert model.distribute_strategy is strategy
        tf.random.set_seed(5)           # the same shuffles on every run
        hist = model.fit(x, target, batch_size=BATCH, epochs=1, verbose=0).history
        out.append((hist, [np.asarray(w) for w in model.get_weights()]))
    return out


def check_keras_under(strategy):
    """Every check of this file's one-process agreement under ``strategy`` (for the MPI
    scripts: MultiWorkerMirroredStrategy under mpiexec calls this on every worker):
    ``fit`` from arrays, a dataset and a distributed dataset, subclassed and functional
    models with (seeded) shuffles, ``evaluate`` and ``predict``."""
    want = reference_fit()[1:]
    for dataset in (None, "dataset", "distributed"):
        assert_same_training(reference_fit(strategy, dataset=dataset)[1:], want)
    for got, ref in zip(_train_other_models(strategy), _train_other_models(None)):
        assert_same_training(got, ref)
    x, y = reference_data()
    plain, dist = reference_model(), reference_model(strategy)
    np.testing.assert_allclose(dist.evaluate(x, y, batch_size=BATCH, verbose=0),
                               plain.evaluate(x, y, batch_size=BATCH, verbose=0), rtol=1e-5)
    np.testing.assert_allclose(dist.predict(x, batch_size=BATCH),
                               plain.predict(x, batch_size=BATCH), rtol=1e-5, atol=1e-6)


@needs_opencl
def test_subclassed_and_functional_models_match_one_process():
    for got, want in zip(_train_other_models(_strategy("cpu+opencl")),
                         _train_other_models(None)):
        assert_same_training(got, want)


@needs_opencl
def test_evaluate_predict_and_batch_methods_match_one_process():
    x, y = reference_data()
    plain, dist = reference_model(), reference_model(_strategy("cpu+opencl"))
    want = plain.evaluate(x, y, batch_size=BATCH, verbose=0)
    got = dist.evaluate(x, y, batch_size=BATCH, verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_allclose(dist.predict(x, batch_size=BATCH),
                               plain.predict(x, batch_size=BATCH), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dist.predict_on_batch(x[:5]), plain.predict_on_batch(x[:5]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(dist.test_on_batch(x[:5], y[:5])),
                               float(plain.test_on_batch(x[:5], y[:5])), rtol=1e-5)
    for rows in (slice(0, 7), slice(7, 8)):     # uneven, and fewer rows than replicas
        np.testing.assert_allclose(float(dist.train_on_batch(x[rows], y[rows])),
                                   float(plain.train_on_batch(x[rows], y[rows])), rtol=1e-5)
    for a, b in zip(dist.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


@needs_opencl
def test_weights_saved_under_a_strategy_load_into_one_process(tmp_path):
    model, _, weights = reference_fit(_strategy("cpu+opencl"))
    model.save_weights(str(tmp_path / "ckpt"))
    plain = reference_model()
    plain.fit(*reference_data(), batch_size=BATCH, epochs=1, verbose=0)   # (its slots)
    plain.save_weights(str(tmp_path / "plain"))
    # each variable (and optimizer slot) saved once, under one process's names
    assert tf.train.list_variables(str(tmp_path / "ckpt")) == tf.train.list_variables(
        str(tmp_path / "plain"))
    plain.load_weights(str(tmp_path / "ckpt"))
    for a, b in zip(plain.get_weights(), weights):
        np.testing.assert_array_equal(np.asarray(a), b)
    x, y = reference_data()
    np.testing.assert_allclose(plain.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-5, atol=1e-6)
    model.save(str(tmp_path / "m.keras"))              # loaded outside any scope: plain
    loaded = tf.keras.models.load_model(str(tmp_path / "m.keras"))
    assert loaded.distribute_strategy is None
    np.testing.assert_allclose(loaded.evaluate(x, y, verbose=0), model.evaluate(x, y, verbose=0),
                               rtol=1e-5)


def test_mixing_strategies_is_refused():
    one, other = (tf.distribute.MirroredStrategy(["cpu:0"]) for _ in range(2))
    model = reference_model(one)
    x, y = reference_data()
    with other.scope():
        with pytest.raises(FailedPreconditionError, match="another strategy"):
            model.fit(x, y, epochs=1, verbose=0)
        with pytest.raises(FailedPreconditionError, match="strategy.scope"):
            model.compile("sgd", "mse")
    plain = reference_model()
    with one.scope():
        with pytest.raises(FailedPreconditionError, match="outside any"):
            plain.evaluate(x, y, verbose=0)
    # outside any scope the model trains under the strategy it was created under
    assert model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0).history["loss"]
    with one.scope():
        fresh = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(4,))])
    assert copy.deepcopy(fresh).distribute_strategy is one      # copies share it


@needs_opencl
def test_an_error_in_a_replica_reaches_the_caller_and_fit_recovers():
    model = reference_model(_strategy("cpu+opencl"))
    x, y = reference_data()
    with pytest.raises(tf.errors.InvalidArgumentError, match="Incompatible shapes"):
        model.fit(x, np.ones((N_ROWS, 3), np.float32), batch_size=BATCH, verbose=0)
    assert np.isfinite(model.fit(x, y, batch_size=BATCH, verbose=0).history["loss"][0])


# --- loss scaling and summed losses under a strategy -----------------------------------------

def _loss_scaled_fit(strategy):
    """A Dense model trained with a dynamic LossScaleOptimizer (scale 8, doubling after 2
    finite steps) on one global batch of 4 rows: first with an inf in its last row (on the
    last replica only: that step is skipped everywhere), then twice finite. Returns the
    scale, the good-step count, the iterations and the weights."""
    x = np.ones((4, 2), np.float32)
    y = np.ones((4, 1), np.float32)
    bad = x.copy()
    bad[3, 0] = np.inf
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, kernel_initializer="ones",
                                                           input_shape=(2,))])
        opt = tf.keras.mixed_precision.LossScaleOptimizer(
            tf.keras.optimizers.SGD(0.01), initial_scale=8.0, dynamic_growth_steps=2)
        model.compile(opt, "mse")
    states = []
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # (inf * 0 in the matmul)
        for data in (bad, x, x):
            model.fit(data, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
            states.append((float(opt.loss_scale), int(opt.dynamic_counter),
                           int(opt.iterations)))
    return states, [np.asarray(w) for w in model.get_weights()]


def _summed_loss_fit(strategy):
    """``fit`` with ``MeanSquaredError(reduction="sum")`` (uneven last batch): history
    and weights."""
    x, y = reference_data()
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = tf.keras.Sequential([tf.keras.layers.Dense(2, kernel_initializer="ones",
                                                           input_shape=(4,))])
        model.compile(tf.keras.optimizers.SGD(0.01),
                      tf.keras.losses.MeanSquaredError(reduction="sum"))
    hist = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history
    return hist, [np.asarray(w) for w in model.get_weights()]


def check_loss_scaling_and_sum_under(strategy):
    """A LossScaleOptimizer (an inf gradient on one replica only skips the step on every
    replica; the scale changes once per step) and a summed loss train as one process
    (the MPI script calls this on every worker)."""
    (states, weights), (ref_states, ref_weights) = (_loss_scaled_fit(strategy),
                                                    _loss_scaled_fit(None))
    assert states == ref_states == [(4.0, 0, 0), (4.0, 1, 1), (8.0, 0, 2)], states
    for w, r in zip(weights, ref_weights):
        np.testing.assert_allclose(w, r, rtol=1e-6)
    assert_same_training(_summed_loss_fit(strategy), _summed_loss_fit(None))


def test_loss_scaling_and_summed_losses_match_one_process_on_two_cpu_replicas():
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    try:
        check_loss_scaling_and_sum_under(tf.distribute.MirroredStrategy(["cpu:0", "cpu:1"]))
    finally:
        tf.config.set_logical_device_configuration(cpu, [])
