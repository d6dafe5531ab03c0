"""Name-to-object lookup (issue 35): ``losses.get``, ``metrics.get`` and
``train.optimizers.get`` live beside the objects they build; ``tf.keras.*.get`` are the same
functions; ``Model.compile`` resolves names through them (no import of the keras facade
from ``models``)."""

import ast
import pathlib

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors, losses, metrics
from tapeflow.train import optimizers

CORE = pathlib.Path(tf.__file__).parent


# --- losses.get --------------------------------------------------------------------------

@pytest.mark.parametrize("name, cls", [
    ("mse", losses.MeanSquaredError), ("mean_squared_error", losses.MeanSquaredError),
    ("MSE", losses.MeanSquaredError), ("MeanSquaredError", losses.MeanSquaredError),
    ("mae", losses.MeanAbsoluteError), ("mean_absolute_error", losses.MeanAbsoluteError),
    ("huber", losses.Huber), ("huber_loss", losses.Huber),
    ("sparse_categorical_crossentropy", losses.SparseCategoricalCrossentropy),
    ("categorical_crossentropy", losses.CategoricalCrossentropy),
    ("binary_crossentropy", losses.BinaryCrossentropy),
])
def test_losses_get_names_and_aliases(name, cls):
    assert type(losses.get(name)) is cls


def test_losses_get_config_dict_and_passthrough():
    bce = losses.get({"class_name": "BinaryCrossentropy", "config": {"from_logits": True}})
    assert type(bce) is losses.BinaryCrossentropy and bce.from_logits is True
    assert losses.get({"class_name": "huber", "config": {"delta": 2.0}}).delta == 2.0
    inst = losses.Huber(delta=3.0)
    assert losses.get(inst) is inst

    def my_loss(y_true, y_pred):
        return y_pred

    assert losses.get(my_loss) is my_loss


def test_losses_get_bad_input_is_a_clear_error():
    with pytest.raises(errors.InvalidArgumentError, match=r"losses.get: Unknown loss 'msq'"
                       r".*known names.*mean_squared_error, mse"):
        losses.get("msq")
    with pytest.raises(errors.InvalidArgumentError, match="Unknown loss class_name 'Nope'"):
        losses.get({"class_name": "Nope", "config": {}})
    with pytest.raises(errors.InvalidArgumentError, match="does not fit Huber"):
        losses.get({"class_name": "Huber", "config": {"nope": 1}})
    with pytest.raises(errors.InvalidArgumentError, match="needs 'class_name'"):
        losses.get({"config": {}})
    with pytest.raises(TypeError, match=r"losses.get: expected a loss name.*got int 3"):
        losses.get(3)


# --- train.optimizers.get ----------------------------------------------------------------

@pytest.mark.parametrize("name, cls", [
    ("adam", optimizers.Adam), ("Adam", optimizers.Adam), ("sgd", optimizers.SGD),
    ("SGD", optimizers.SGD), ("rmsprop", optimizers.RMSprop), ("RMSprop", optimizers.RMSprop),
    ("adagrad", optimizers.Adagrad),
])
def test_optimizers_get_names(name, cls):
    assert type(optimizers.get(name)) is cls


def test_optimizers_get_config_dict_and_passthrough():
    sgd = optimizers.get({"class_name": "SGD", "config": {"learning_rate": 0.5,
                                                          "momentum": 0.9}})
    assert type(sgd) is optimizers.SGD and sgd.learning_rate == 0.5
    opt = optimizers.GradientDescentOptimizer(0.1)
    assert optimizers.get(opt) is opt

    class Wrapper:                       # e.g. a LossScaleOptimizer: not an Optimizer subclass
        def apply_gradients(self, grads_and_vars):
            pass

    w = Wrapper()
    assert optimizers.get(w) is w
    assert tf.train.get_optimizer is optimizers.get       # the old name still works


def test_optimizers_get_bad_input_is_a_clear_error():
    with pytest.raises(errors.InvalidArgumentError, match=r"optimizers.get: Unknown "
                       r"optimizer 'adamw'.*adagrad, adam, rmsprop, sgd"):
        optimizers.get("adamw")
    with pytest.raises(errors.InvalidArgumentError, match="does not fit Adam"):
        optimizers.get({"class_name": "adam", "config": {"lr_typo": 1.0}})
    with pytest.raises(TypeError, match=r"optimizers.get: expected an optimizer name.*got float"):
        optimizers.get(0.1)


# --- metrics.get / get_function ------------------------------------------------------------

def test_metrics_get_names_aliases_and_loss():
    assert type(metrics.get("mean")) is metrics.Mean
    assert type(metrics.get("Mean")) is metrics.Mean
    assert type(metrics.get("BinaryAccuracy")) is metrics.BinaryAccuracy
    assert type(metrics.get("acc")) is metrics.Accuracy
    got = metrics.get("acc", loss=losses.BinaryCrossentropy())
    assert type(got) is metrics.BinaryAccuracy and got.name == "accuracy"
    assert type(metrics.get("accuracy", loss=losses.sparse_categorical_crossentropy)) \
        is metrics.SparseCategoricalAccuracy
    assert metrics.get("mse") is losses.mse          # a metric function's name
    m = metrics.get({"class_name": "Mean", "config": {"name": "loss"}})
    assert type(m) is metrics.Mean and m.name == "loss"
    inst = metrics.Sum()
    assert metrics.get(inst) is inst
    assert metrics.get(np.mean) is np.mean


def test_metrics_get_function_is_keras_lookup():
    gf = metrics.get_function
    assert gf("accuracy", loss="sparse_categorical_crossentropy") \
        is metrics.sparse_categorical_accuracy
    assert gf("acc", loss=losses.CategoricalCrossentropy()) is metrics.categorical_accuracy
    assert gf("accuracy", loss=losses.binary_crossentropy) is metrics.binary_accuracy
    assert gf("sparse_categorical_accuracy") is metrics.sparse_categorical_accuracy
    assert gf("mean_squared_error") is losses.mse and gf("mae") is losses.mae
    # "accuracy" with no telling loss: chosen by the shapes of each batch
    auto = gf("accuracy")
    np.testing.assert_array_equal(auto([1, 0], [[0.2, 0.8], [0.3, 0.7]]).numpy(), [1, 0])
    np.testing.assert_array_equal(auto([[1.], [0.]], [[0.9], [0.8]]).numpy(), [1, 0])
    assert type(gf("mean")) is metrics.Mean              # not a function: as get


def test_metrics_get_bad_input_is_a_clear_error():
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"metrics.get: Unknown metric 'accuracyy'.*acc, accuracy"):
        metrics.get_function("accuracyy")
    with pytest.raises(errors.InvalidArgumentError, match="Unknown metric 'Nope'"):
        metrics.get({"class_name": "Nope"})
    with pytest.raises(TypeError, match=r"metrics.get: expected a metric name.*got int 7"):
        metrics.get(7)


# --- keras only re-exports; compile resolves names without it ------------------------------

def test_keras_get_functions_are_the_defining_modules():
    assert tf.keras.losses.get is losses.get
    assert tf.keras.optimizers.get is optimizers.get
    assert tf.keras.metrics.get is metrics.get_function
    assert tf.keras.metrics.sparse_categorical_accuracy is metrics.sparse_categorical_accuracy
    assert tf.keras.metrics.Mean is metrics.Mean


def _dict_tables(tree):
    return [t.id for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict) for t in node.targets
            if isinstance(t, ast.Name)]


def test_models_does_not_import_keras_and_keras_has_no_name_tables():
    tree = ast.parse((CORE / "models.py").read_text())
    keras_imports = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and (n.module or "").split(".")[0] == "keras"]
    assert keras_imports == []
    for name in ("losses.py", "metrics.py", "optimizers.py"):
        tree = ast.parse((CORE / "keras" / name).read_text())
        assert _dict_tables(tree) == [], f"keras/{name} keeps a name table of its own"


def test_compile_resolves_names_and_objects():
    x = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int64)
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    model.compile(optimizer="rmsprop", loss="SparseCategoricalCrossentropy",
                  metrics=["acc", "sparse_categorical_accuracy", "mean"])
    assert type(model.optimizer) is optimizers.RMSprop
    assert model.metrics_names == ["loss", "acc", "sparse_categorical_accuracy", "mean"]
    model.optimizer = {"class_name": "SGD", "config": {"learning_rate": 0.0}}
    assert type(model.optimizer) is optimizers.SGD
    with pytest.raises(errors.InvalidArgumentError, match="Unknown loss 'msq'"):
        model.compile(optimizer="adam", loss="msq")
    with pytest.raises(errors.InvalidArgumentError, match="Unknown optimizer 'adamw'"):
        model.compile(optimizer="adamw", loss="mse")
    model.compile(optimizer="sgd", loss="mse", metrics=["accuracy"])
    yy = np.eye(2, dtype=np.float32)[y]
    r = model.evaluate(x, yy, verbose=0, return_dict=True)
    assert set(r) == {"loss", "accuracy"} and 0.0 <= r["accuracy"] <= 1.0
