"""``tfe.metrics``: object-oriented metrics (the seeds' ``tfe.metrics.Mean("loss")``).

Call a metric to accumulate (``m(values)``, or Keras's ``m.update_state(...)``), read
it with ``m.result()``, start again with ``m.reset_states()``. The state lives in
non-trainable Variables (``m.variables``, checkpointed with the model), made on the
device of the first values; updates are never recorded by a GradientTape. As in
``tf.contrib.eager.metrics`` the default dtype is float64.

>>> import tapeflow as tf
>>> tfe = tf
>>> m = tfe.metrics.Mean("loss")
>>> _ = m(0); _ = m(5)
>>> float(m.result())
2.5
>>> _ = m([8, 9])
>>> print(m.result())
tf.Tensor(5.5, shape=(), dtype=float64)
>>> acc = tf.metrics.SparseCategoricalAccuracy()
>>> acc.update_state([1, 0], [[0.1, 0.9], [0.2, 0.8]])
>>> float(acc.result())
0.5
"""

from __future__ import annotations

import sys

from . import ops as _a
from . import dtypes as _dt
from .ops import math as _m
from .ops import reductions as _r
from . import losses as _losses
from .layers.naming import from_config
from .errors import InvalidArgumentError, InvalidTypeError
from .runtime.dispatch import convert_to_tensor
from .runtime.context import stop_all_recording
from .runtime.tensor import Tensor
from .runtime.variable import Variable

__all__ = ["Metric", "Mean", "Sum", "Accuracy", "SparseCategoricalAccuracy", "SparseAccuracy",
           "CategoricalAccuracy", "BinaryAccuracy", "sparse_categorical_accuracy",
           "categorical_accuracy", "binary_accuracy", "accuracy", "acc", "accuracy_for_loss",
           "get", "get_function"]


def _t(x):
    if type(x) is Tensor:
        return x
    if isinstance(x, Variable):
        return x.read_value()
    return convert_to_tensor(x)


_snake = _losses._snake     # (default names: the losses' rule, "KLDivergence" -> "kldivergence")


class Metric:
    """Base class: subclasses implement ``call(...)`` with ``self._add(values, weights)``
    style updates and ``result()``."""

    _var_names: tuple = ()

    def __init__(self, name=None, dtype=_dt.float64):
        self._name = name or _snake(type(self).__name__)
        self._dtype = _dt.as_dtype(dtype)
        self._vars: dict = {}

    @property
    def name(self):
        return self._name

    @property
    def dtype(self):
        return self._dtype

    @property
    def variables(self):
        return list(self._vars.values())

    def _trackable_children(self):
        return dict(self._vars)

    def _build(self, device):
        for vname in self._var_names:
            self._vars[vname] = Variable(_a.zeros([], self._dtype), trainable=False,
                                         name=f"{self._name}/{vname}", device=device,
                                         aggregation="sum")     # (Keras's, for tf.distribute)
        ck = sys.modules.get("tapeflow.train.checkpoint")
        if ck is not None:                 # a Checkpoint.restore may be waiting for them
            ck.restore_deferred(self)

    def init_variables(self):
        """TensorFlow 1 API: nothing to do (eager)."""

    def __call__(self, *args, **kwargs):
        with stop_all_recording():
            return self.call(*args, **kwargs)

    def update_state(self, *args, **kwargs):
        """Keras spelling of ``metric(...)`` (returns None)."""
        with stop_all_recording():
            self.call(*args, **kwargs)

    def call(self, *args, **kwargs):
        raise NotImplementedError

    def result(self, write_summary=True):
        raise NotImplementedError

    def reset_states(self):
        """Start accumulating again from zero."""
        for v in self._vars.values():
            v.assign(_a.zeros([], self._dtype))

    reset_state = reset_states

    def __repr__(self):
        return f"<{type(self).__name__} name={self._name!r} dtype={self._dtype.name}>"


class Mean(Metric):
    """The (weighted) mean of every value passed: ``m(values, weights=None)``."""

    _var_names = ("total", "count")

    def __init__(self, name=None, dtype=_dt.float64):
        super().__init__(name, dtype)

    def _add(self, values, weights=None):
        v = _t(values)
        if v.dtype != self._dtype:
            v = _m.cast(v, self._dtype)
        if not self._vars:
            self._build(v.device)
        total, count = self._vars["total"], self._vars["count"]
        if weights is None:
            total.assign_add(_r.reduce_sum(v))
            count.assign_add(float(v.size))
            return
        w = _t(weights)
        if w.dtype != self._dtype:
            w = _m.cast(w, self._dtype)
        if tuple(w.shape) != tuple(v.shape):
            w = _a.broadcast_to(w, list(v.shape))
        total.assign_add(_r.reduce_sum(v * w))
        count.assign_add(_r.reduce_sum(w))

    def call(self, values, weights=None):
        self._add(values, weights)
        return values if weights is None else (values, weights)

    def update_state(self, values, sample_weight=None):
        with stop_all_recording():
            self._add(values, sample_weight)

    def result(self, write_summary=True):
        """``total / count`` (0 before any value)."""
        if not self._vars:
            return _a.zeros([], self._dtype)
        total, count = self._vars["total"], self._vars["count"]
        zero = _m.equal(count, 0)
        return _a.where(zero, _a.zeros_like(total.read_value()),
                        total / _a.where(zero, _a.ones_like(count.read_value()), count))


class Sum(Metric):
    """The (weighted) sum of every value passed."""

    _var_names = ("total",)

    def call(self, values, weights=None):
        v = _t(values)
        if v.dtype != self._dtype:
            v = _m.cast(v, self._dtype)
        if not self._vars:
            self._build(v.device)
        if weights is not None:
            v = v * _m.cast(_t(weights), self._dtype)
        self._vars["total"].assign_add(_r.reduce_sum(v))
        return values if weights is None else (values, weights)

    def update_state(self, values, sample_weight=None):
        with stop_all_recording():
            self.call(values, sample_weight)

    def result(self, write_summary=True):
        if not self._vars:
            return _a.zeros([], self._dtype)
        return self._vars["total"].read_value()


def _check_same_shape(metric, labels, predictions):
    if tuple(labels.shape) != tuple(predictions.shape):
        raise InvalidArgumentError(
            f"{metric}: labels and predictions must have the same shape, got "
            f"{tuple(labels.shape)} and {tuple(predictions.shape)}")


class _MatchMean(Mean):
    """A Mean of 0/1 matches; ``call(labels, predictions, weights=None)``."""

    def _matches(self, labels, predictions):
        raise NotImplementedError

    def call(self, labels, predictions, weights=None):
        self._add(self._matches(_t(labels), _t(predictions)), weights)
        return (labels, predictions) if weights is None else (labels, predictions, weights)

    def update_state(self, y_true, y_pred, sample_weight=None):
        with stop_all_recording():
            self._add(self._matches(_t(y_true), _t(y_pred)), sample_weight)


class Accuracy(_MatchMean):
    """How often ``predictions`` (class ids) equal ``labels``."""

    def _matches(self, labels, predictions):
        _check_same_shape("Accuracy", labels, predictions)
        return _m.equal(labels, predictions)


class SparseCategoricalAccuracy(_MatchMean):
    """How often ``argmax(predictions, -1)`` equals the integer ``labels``
    (``labels`` of shape ``[N]`` or ``[N, 1]``, ``predictions`` ``[N, C]``)."""

    def _matches(self, labels, predictions):
        if labels.ndim == predictions.ndim and labels.ndim and labels.shape[-1] == 1:
            labels = _a.squeeze(labels, [-1])
        ids = _r.argmax(predictions, axis=-1)
        if ids.dtype != labels.dtype:
            ids = _m.cast(ids, labels.dtype)
        _check_same_shape("SparseCategoricalAccuracy", labels, ids)
        return _m.equal(labels, ids)


SparseAccuracy = SparseCategoricalAccuracy   # tf.contrib.eager.metrics name


class CategoricalAccuracy(_MatchMean):
    """How often ``argmax(predictions)`` equals ``argmax(labels)`` (one-hot labels)."""

    def _matches(self, labels, predictions):
        _check_same_shape("CategoricalAccuracy", labels, predictions)
        return _m.equal(_r.argmax(labels, axis=-1), _r.argmax(predictions, axis=-1))


class BinaryAccuracy(_MatchMean):
    """How often ``predictions > threshold`` equals the 0/1 ``labels``."""

    def __init__(self, name=None, dtype=_dt.float64, threshold=0.5):
        super().__init__(name, dtype)
        self.threshold = threshold

    def _matches(self, labels, predictions):
        _check_same_shape("BinaryAccuracy", labels, predictions)
        pred = _m.cast(_m.greater(predictions, self.threshold), labels.dtype)
        return _m.equal(labels, pred)


# --- Keras's metric functions: one value per example -----------------------------------

def sparse_categorical_accuracy(y_true, y_pred):
    """1.0 where the arg-max of ``y_pred`` is the integer label, else 0.0."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_true.ndim == y_pred.ndim and y_true.ndim >= 1 and y_true.shape[-1] == 1:
        y_true = _a.squeeze(y_true, axis=-1)
    pred = _m.argmax(y_pred, axis=-1)
    if y_true.dtype != pred.dtype:
        y_true = _m.cast(y_true, pred.dtype)
    return _m.cast(_m.equal(y_true, pred), "float32")


def categorical_accuracy(y_true, y_pred):
    """1.0 where the arg-maxes of one-hot ``y_true`` and ``y_pred`` agree."""
    return _m.cast(_m.equal(_m.argmax(_t(y_true), axis=-1), _m.argmax(_t(y_pred), axis=-1)),
                   "float32")


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """Mean over the last axis of ``(y_pred > threshold) == y_true``."""
    y_pred = _t(y_pred)
    y_true = _losses._keras_true(y_true, y_pred)
    hit = _m.equal(y_true, _m.cast(_m.greater(y_pred, threshold), y_pred.dtype))
    return _r.reduce_mean(_m.cast(hit, "float32"), axis=-1)


def accuracy(y_true, y_pred):
    """Element-wise equality of labels and predicted labels."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_true.dtype != y_pred.dtype:
        y_true = _m.cast(y_true, y_pred.dtype)
    return _m.cast(_m.equal(y_true, y_pred), "float32")


acc = accuracy


def _auto_accuracy(y_true, y_pred):
    """"accuracy" when the loss does not say which: by the shapes, as Keras does."""
    y_pred = _t(y_pred)
    y_true = _t(y_true)
    if y_pred.ndim >= 1 and y_pred.shape[-1] == 1:
        return binary_accuracy(y_true, y_pred)
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == y_pred.shape[-1]:
        return categorical_accuracy(y_true, y_pred)
    return sparse_categorical_accuracy(y_true, y_pred)


def _loss_name(loss):
    if loss is None:
        return ""
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", "")
               or type(loss).__name__)


def accuracy_for_loss(loss):
    """The accuracy function that goes with ``loss`` (a name, a Loss or a loss function):
    what Keras picks for ``compile(metrics=["accuracy"])`` -- sparse categorical for a
    sparse cross entropy, categorical for a one-hot one, binary for a binary one, else
    chosen by the shapes of each batch."""
    name = _loss_name(loss).lower()
    fn = getattr(loss, "_fn", None) or loss
    if "sparse_categorical" in name or fn is _losses.sparse_categorical_crossentropy:
        return sparse_categorical_accuracy
    if "categorical" in name or fn is _losses.categorical_crossentropy:
        return categorical_accuracy
    if "binary" in name or fn is _losses.binary_crossentropy:
        return binary_accuracy
    return _auto_accuracy


# --- name-to-metric lookup ---------------------------------------------------------------

_CLASSES = (Mean, Sum, Accuracy, SparseCategoricalAccuracy, CategoricalAccuracy, BinaryAccuracy)
#: metric objects by name (lower case; class names too): what :func:`get` builds
_BY_NAME = {"mean": Mean, "sum": Sum, "accuracy": Accuracy,
            "sparse_categorical_accuracy": SparseCategoricalAccuracy,
            "categorical_accuracy": CategoricalAccuracy, "binary_accuracy": BinaryAccuracy,
            **{cls.__name__.lower(): cls for cls in _CLASSES}}
#: metric functions by name: what :func:`get_function` returns (``Model.compile``)
_FUNCTIONS = {
    "sparse_categorical_accuracy": sparse_categorical_accuracy,
    "categorical_accuracy": categorical_accuracy, "binary_accuracy": binary_accuracy,
    "mse": _losses.mse, "mean_squared_error": _losses.mse,
    "mae": _losses.mae, "mean_absolute_error": _losses.mae,
    "sparse_categorical_crossentropy": _losses.sparse_categorical_crossentropy,
    "categorical_crossentropy": _losses.categorical_crossentropy,
    "binary_crossentropy": _losses.binary_crossentropy,
}


def _unknown(identifier):
    classes = {cls.__name__.lower(): cls.__name__ for cls in _CLASSES
               if cls.__name__.lower() != _snake(cls.__name__)}
    known = sorted((set(_BY_NAME) | set(_FUNCTIONS) | {"acc"}) - set(classes))
    known += sorted(classes.values())
    return InvalidArgumentError(
        f"metrics.get: Unknown metric {identifier!r}; known names (case-insensitive): "
        f"{', '.join(known)}. Pass one of them, a Metric instance, a callable "
        "metric(y_true, y_pred) or a config dict {'class_name': 'Mean', 'config': {}}.")


def _metric_class(name, what):
    cls = _BY_NAME.get(name.lower())
    if cls is None:
        raise _unknown(name)
    return cls


def _from_config(identifier):
    return from_config("metrics.get", identifier, _metric_class)


def _accuracy_object(loss):
    fn = accuracy_for_loss(loss)
    cls = {sparse_categorical_accuracy: SparseCategoricalAccuracy,
           categorical_accuracy: CategoricalAccuracy,
           binary_accuracy: BinaryAccuracy}.get(fn, Accuracy)
    return cls(name="accuracy")


def get(identifier, loss=None):
    """A metric from ``identifier``:

    * a name, case-insensitive: ``"mean"``, ``"sum"``, ``"sparse_categorical_accuracy"``,
      ... or a class name such as ``"BinaryAccuracy"`` -- a new metric object;
      ``"accuracy"``/``"acc"`` picks the accuracy that fits ``loss`` (a name or a loss
      object), as Keras's ``compile`` does: sparse categorical for a sparse cross
      entropy, categorical for a one-hot one, binary for a binary one, else element-wise
      equality; a metric function's name (``"mse"``, ``"binary_crossentropy"``) gives the
      function;
    * a config dict ``{"class_name": "Mean", "config": {"name": "loss"}}``;
    * a :class:`Metric` or any callable ``metric(y_true, y_pred)``: returned as is.

    >>> import tapeflow as tf
    >>> type(tf.metrics.get("acc", loss="sparse_categorical_crossentropy")).__name__
    'SparseCategoricalAccuracy'
    >>> tf.metrics.get({"class_name": "Mean", "config": {"name": "loss"}}).name
    'loss'
    """
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            if loss is None or accuracy_for_loss(loss) is _auto_accuracy:
                return Accuracy(name="accuracy")
            return _accuracy_object(loss)
        cls = _BY_NAME.get(key)
        if cls is not None:
            return cls()
        fn = _FUNCTIONS.get(key)
        if fn is None:
            raise _unknown(identifier)
        return fn
    if isinstance(identifier, dict):
        return _from_config(identifier)
    if callable(identifier):
        return identifier
    raise InvalidTypeError(
        "metrics.get: expected a metric name (such as 'accuracy'), a config dict, a Metric "
        f"or a callable metric(y_true, y_pred), got {type(identifier).__name__} "
        f"{identifier!r}")


def get_function(identifier, loss=None):
    """Keras's lookup (``tf.keras.metrics.get``, ``Model.compile``): a metric function's
    name gives the function (``"sparse_categorical_accuracy"``, ``"mse"``...), and
    ``"accuracy"``/``"acc"`` the accuracy function that fits ``loss``
    (:func:`accuracy_for_loss`; chosen by the shapes when ``loss`` is None); anything
    else as :func:`get` (``"mean"``, class names and config dicts give metric objects).

    >>> import tapeflow as tf
    >>> tf.keras.metrics.get("acc", loss="binary_crossentropy").__name__
    'binary_accuracy'
    """
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            return accuracy_for_loss(loss)
        fn = _FUNCTIONS.get(key)
        if fn is not None:
            return fn
    return get(identifier, loss)
