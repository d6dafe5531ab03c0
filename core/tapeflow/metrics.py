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

from .ops import array as _a
from .runtime import dtypes as _dt
from .ops import math as _m
from .ops import reductions as _r
from .runtime.errors import InvalidArgumentError
from .runtime.dispatch import convert_to_tensor
from .runtime.context import stop_all_recording
from .runtime.tensor import Tensor
from .runtime.variable import Variable

__all__ = ["Metric", "Mean", "Sum", "Accuracy", "SparseCategoricalAccuracy", "SparseAccuracy",
           "CategoricalAccuracy", "BinaryAccuracy", "get"]


def _t(x):
    if type(x) is Tensor:
        return x
    if isinstance(x, Variable):
        return x.read_value()
    return convert_to_tensor(x)


def _snake(name):
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(c.lower())
    return "".join(out)


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
                                         name=f"{self._name}/{vname}", device=device)
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


_BY_NAME = {"mean": Mean, "sum": Sum, "accuracy": Accuracy,
            "sparse_categorical_accuracy": SparseCategoricalAccuracy,
            "categorical_accuracy": CategoricalAccuracy, "binary_accuracy": BinaryAccuracy}


def get(identifier, loss=None):
    """A metric from an instance or a name. ``"accuracy"``/``"acc"`` picks the accuracy
    that fits ``loss`` (as Keras's ``compile`` does): sparse categorical for a sparse
    cross entropy, categorical for a one-hot one, binary for a binary one, else
    element-wise equality."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            lname = loss if isinstance(loss, str) else getattr(loss, "name", "") or ""
            lname = lname.lower()
            if "sparse_categorical" in lname:
                return SparseCategoricalAccuracy(name="accuracy")
            if "categorical" in lname:
                return CategoricalAccuracy(name="accuracy")
            if "binary" in lname:
                return BinaryAccuracy(name="accuracy")
            return Accuracy(name="accuracy")
        cls = _BY_NAME.get(key)
        if cls is None:
            raise InvalidArgumentError(f"Unknown metric {identifier!r}; known: "
                             f"{sorted(_BY_NAME) + ['acc']}")
        return cls()
    if callable(identifier):
        return identifier
    raise InvalidArgumentError(f"Could not interpret metric identifier: {identifier!r}")
