"""``tf.losses``: TensorFlow 1's loss functions, and Keras's loss classes.

TensorFlow 1 functions (``tf.losses.*``) take ``(labels, predictions/logits,
weights=1.0, ..., reduction=Reduction.SUM_BY_NONZERO_WEIGHTS)`` and return a scalar:
the weighted sum divided by the number of non-zero weights, i.e. the mean when
``weights`` is 1 (seed: ``tf.losses.sparse_softmax_cross_entropy(labels, logits)``).

>>> import tapeflow as tf
>>> round(float(tf.losses.sparse_softmax_cross_entropy([1, 0], [[0., 0.], [0., 0.]])), 4)
0.6931
>>> float(tf.losses.mean_squared_error([1., 2.], [2., 4.]))
2.5
>>> float(tf.losses.huber_loss([0., 0.], [0.5, 3.0]))
1.3125

Keras (``tf.keras.losses`` re-exports these): the classes ``SparseCategoricalCrossentropy``,
``CategoricalCrossentropy``, ``BinaryCrossentropy``, ``MeanSquaredError``,
``MeanAbsoluteError``, ``Huber`` (``loss(y_true, y_pred, sample_weight=None)``, mean
over the batch), the per-sample functions ``sparse_categorical_crossentropy``,
``categorical_crossentropy``, ``binary_crossentropy``, ``mse``, ``mae``, ``huber``
(Keras's ``mean_squared_error`` is ``mse`` here: ``tf.losses.mean_squared_error`` is
TensorFlow 1's), and ``get("sparse_categorical_crossentropy")`` for ``Model.compile``.
"""

from __future__ import annotations

from . import ops as _a
from .ops import math as _m
from .ops import nn as _nn
from .ops import reductions as _r
from .errors import InvalidArgumentError, InvalidTypeError
from .runtime.dispatch import convert_to_tensor
from .runtime.tensor import Tensor
from .runtime.variable import Variable
from .runtime import dispatch as _dispatch_mod
from .layers.naming import from_config

__all__ = ["Reduction", "KerasReduction", "compute_weighted_loss", "sparse_softmax_cross_entropy",
           "softmax_cross_entropy", "sigmoid_cross_entropy", "mean_squared_error",
           "absolute_difference", "huber_loss", "log_loss",
           "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "MeanSquaredError", "MeanAbsoluteError", "Huber",
           "sparse_categorical_crossentropy", "categorical_crossentropy",
           "binary_crossentropy", "mse", "mae", "huber", "get"]


class Reduction:
    """How a loss reduces its per-element values (TensorFlow 1 names)."""

    NONE = "none"
    SUM = "weighted_sum"
    MEAN = "weighted_mean"
    SUM_OVER_BATCH_SIZE = "weighted_sum_over_batch_size"
    SUM_BY_NONZERO_WEIGHTS = "weighted_sum_by_nonzero_weights"
    SUM_OVER_NONZERO_WEIGHTS = SUM_BY_NONZERO_WEIGHTS
    AUTO = "auto"     # Keras: SUM_OVER_BATCH_SIZE

    @classmethod
    def all(cls):
        return (cls.NONE, cls.SUM, cls.MEAN, cls.SUM_OVER_BATCH_SIZE,
                cls.SUM_BY_NONZERO_WEIGHTS, cls.AUTO)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise InvalidArgumentError(f"Invalid Reduction Key {key!r}; one of {cls.all()}")


class KerasReduction:
    """``tf.keras.losses.Reduction``: Keras's names of a loss's reduction (``reduction=tf.keras.losses.Reduction.NONE``
    keeps one value per example, as a custom loop under ``tf.distribute`` wants).

    >>> import tapeflow as tf
    >>> loss = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.NONE)
    >>> print(loss([[1.], [2.]], [[1.], [4.]]))
    tf.Tensor([0. 4.], shape=(2,), dtype=float32)
    """

    AUTO = "auto"
    NONE = "none"
    SUM = "sum"
    SUM_OVER_BATCH_SIZE = "sum_over_batch_size"

    @classmethod
    def all(cls):
        return (cls.AUTO, cls.NONE, cls.SUM, cls.SUM_OVER_BATCH_SIZE)

    @classmethod
    def validate(cls, key):
        if key not in cls.all():
            raise InvalidArgumentError(f"Invalid Reduction key {key!r}: expected one of "
                                       f"{cls.all()}")


# Keras's spellings
_KERAS_REDUCTION = {"auto": Reduction.SUM_OVER_BATCH_SIZE,
                    "sum_over_batch_size": Reduction.SUM_OVER_BATCH_SIZE,
                    "sum": Reduction.SUM, "none": Reduction.NONE}


def _t(x):
    if type(x) is Tensor:
        return x
    if isinstance(x, Variable):
        return x.read_value()
    return convert_to_tensor(x)


def _follow(labels, like):
    """Host labels follow the predictions to their device, as layers move host inputs
    to their variables' device (a dataset yields host tensors; the model may be on a GPU)."""
    if labels._device is not like._device and labels._device.is_host:
        copy_to_device = _dispatch_mod.copy_to_device
        labels = copy_to_device(labels, like._device)
    return labels


def _float(x, like=None):
    """``x`` as a floating tensor: ``like``'s dtype (and device) when given, else float32
    for ints."""
    t = _t(x)
    if like is not None:
        t = _follow(t, like)
        return _m.cast(t, like.dtype) if t.dtype != like.dtype else t
    return t if t.dtype.is_floating else _m.cast(t, "float32")


def _is_one(w):
    return isinstance(w, (int, float)) and not isinstance(w, bool) and w == 1


def _safe_div(num, den):
    zero = _m.equal(den, 0)
    return _a.where(zero, _a.zeros_like(num), num / _a.where(zero, _a.ones_like(den), den))


def _num_present(losses, weights):
    """Number of elements of ``losses`` whose (broadcast) weight is not zero."""
    present = _a.where(_m.equal(weights, 0), _a.zeros_like(weights), _a.ones_like(weights))
    present = _a.broadcast_to(present, list(losses.shape))
    return _r.reduce_sum(present)


def compute_weighted_loss(losses, weights=1.0, scope=None, loss_collection=None,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``losses * weights`` reduced by ``reduction`` (``weights`` broadcasts to
    ``losses``)."""
    Reduction.validate(reduction)
    if reduction == Reduction.AUTO:
        reduction = Reduction.SUM_OVER_BATCH_SIZE
    losses = _t(losses)
    if not losses.dtype.is_floating:
        losses = _m.cast(losses, "float32")
    if _is_one(weights):
        # the common case, kept cheap: no weights to multiply or count
        if reduction == Reduction.NONE:
            return losses
        if reduction == Reduction.SUM:
            return _r.reduce_sum(losses)
        if losses.size == 0:
            return _a.zeros([], losses.dtype)
        return _r.reduce_mean(losses)
    w = _float(weights, losses)
    weighted = losses * w
    if reduction == Reduction.NONE:
        return weighted
    total = _r.reduce_sum(weighted)
    if reduction == Reduction.SUM:
        return total
    if reduction == Reduction.MEAN:
        return _safe_div(total, _r.reduce_sum(_a.ones_like(losses) * w))
    if reduction == Reduction.SUM_OVER_BATCH_SIZE:
        n = losses.size
        return total / n if n else _a.zeros([], losses.dtype)
    return _safe_div(total, _num_present(losses, w))


def _squeeze_labels(labels, logits):
    """Labels ``[N, 1]`` with logits ``[N, C]``: drop the labels' last axis (TF1 does)."""
    if labels.ndim == logits.ndim and labels.ndim and labels.shape[-1] == 1:
        return _a.squeeze(labels, [-1])
    return labels


def _same_shape(what, a, b):
    if tuple(a.shape) != tuple(b.shape):
        raise InvalidArgumentError(
            f"{what}: labels and predictions must have the same shape, got labels "
            f"{tuple(a.shape)} and predictions {tuple(b.shape)} (reshape one of them; "
            "broadcasting here would silently compare every pair)")


def sparse_softmax_cross_entropy(labels, logits, weights=1.0, scope=None,
                                 loss_collection=None,
                                 reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross entropy of ``softmax(logits)`` with integer class ``labels``, reduced
    (default: the mean over the examples)."""
    logits = _t(logits)
    labels = _squeeze_labels(_follow(_t(labels), logits), logits)
    losses = _nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return compute_weighted_loss(losses, weights, reduction=reduction)


def softmax_cross_entropy(onehot_labels, logits, weights=1.0, label_smoothing=0,
                          scope=None, loss_collection=None,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Cross entropy of ``softmax(logits)`` with one-hot (or probability) labels;
    ``label_smoothing`` moves labels towards ``1/num_classes``."""
    logits = _t(logits)
    labels = _float(onehot_labels, logits)
    _same_shape("softmax_cross_entropy", labels, logits)
    if label_smoothing:
        n = logits.shape[-1]
        labels = labels * (1.0 - label_smoothing) + label_smoothing / n
    losses = _nn.softmax_cross_entropy_with_logits(labels=_a.stop_gradient(labels),
                                                   logits=logits)
    return compute_weighted_loss(losses, weights, reduction=reduction)


def sigmoid_cross_entropy(multi_class_labels, logits, weights=1.0, label_smoothing=0,
                          scope=None, loss_collection=None,
                          reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Element-wise logistic loss of ``logits`` against 0/1 labels, reduced."""
    logits = _t(logits)
    labels = _float(multi_class_labels, logits)
    _same_shape("sigmoid_cross_entropy", labels, logits)
    if label_smoothing:
        labels = labels * (1.0 - label_smoothing) + 0.5 * label_smoothing
    losses = _nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return compute_weighted_loss(losses, weights, reduction=reduction)


def _pred_labels(what, labels, predictions):
    predictions = _float(predictions)
    labels = _float(labels, predictions)
    _same_shape(what, labels, predictions)
    return labels, predictions


def mean_squared_error(labels, predictions, weights=1.0, scope=None, loss_collection=None,
                       reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``(predictions - labels)**2``, reduced (default: the mean)."""
    labels, predictions = _pred_labels("mean_squared_error", labels, predictions)
    losses = _m.squared_difference(predictions, labels)
    return compute_weighted_loss(losses, weights, reduction=reduction)


def absolute_difference(labels, predictions, weights=1.0, scope=None, loss_collection=None,
                        reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``|predictions - labels|``, reduced (default: the mean)."""
    labels, predictions = _pred_labels("absolute_difference", labels, predictions)
    return compute_weighted_loss(_m.abs(predictions - labels), weights, reduction=reduction)


def _huber(error, delta):
    abs_error = _m.abs(error)
    quadratic = _m.minimum(abs_error, delta)
    linear = abs_error - quadratic
    return 0.5 * quadratic * quadratic + delta * linear


def huber_loss(labels, predictions, weights=1.0, delta=1.0, scope=None,
               loss_collection=None, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """Huber loss: ``0.5 * e**2`` where ``|e| <= delta``, else
    ``delta * |e| - 0.5 * delta**2`` (``e = predictions - labels``), reduced."""
    labels, predictions = _pred_labels("huber_loss", labels, predictions)
    return compute_weighted_loss(_huber(predictions - labels, delta), weights,
                                 reduction=reduction)


def log_loss(labels, predictions, weights=1.0, epsilon=1e-7, scope=None,
             loss_collection=None, reduction=Reduction.SUM_BY_NONZERO_WEIGHTS):
    """``-labels * log(p + eps) - (1 - labels) * log(1 - p + eps)``, reduced."""
    labels, predictions = _pred_labels("log_loss", labels, predictions)
    losses = (-labels * _m.log(predictions + epsilon)
              - (1 - labels) * _m.log(1 - predictions + epsilon))
    return compute_weighted_loss(losses, weights, reduction=reduction)


# --- Keras ---------------------------------------------------------------------------

_EPS = 1e-7


def _keras_true(y_true, y_pred):
    """Keras's ``y_true``: ``y_pred``'s dtype and device, plus a trailing axis when
    ``y_pred`` has one more (labels ``[N]`` with predictions ``[N, 1]``)."""
    y_true = _float(y_true, y_pred)
    if y_true.ndim == y_pred.ndim - 1:
        y_true = _a.expand_dims(y_true, -1)
    return y_true


def _sparse_labels(y_true, y_pred):
    y_true = _t(y_true)
    if y_true.ndim == y_pred.ndim and y_true.ndim and y_true.shape[-1] == 1:
        y_true = _a.squeeze(y_true, [-1])
    if y_true.dtype.name not in ("int32", "int64"):
        y_true = _m.cast(y_true, "int64")
    return y_true


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1):
    """Per-example cross entropy with integer labels; ``y_pred`` holds probabilities
    unless ``from_logits=True``."""
    y_pred = _float(y_pred)
    y_true = _sparse_labels(y_true, y_pred)
    if not from_logits:
        y_pred = _m.log(_a.clip_by_value(y_pred, _EPS, 1 - _EPS))
    return _nn.sparse_softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example cross entropy with one-hot labels (probabilities unless
    ``from_logits=True``)."""
    y_pred = _float(y_pred)
    y_true = _float(y_true, y_pred)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / y_pred.shape[-1]
    if from_logits:
        return _nn.softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred, axis=axis)
    p = y_pred / _r.reduce_sum(y_pred, axis=axis, keepdims=True)
    p = _a.clip_by_value(p, _EPS, 1 - _EPS)
    return -_r.reduce_sum(y_true * _m.log(p), axis=axis)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example binary cross entropy (mean over the last axis)."""
    y_pred = _float(y_pred)
    y_true = _keras_true(y_true, y_pred)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        losses = _nn.sigmoid_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    else:
        p = _a.clip_by_value(y_pred, _EPS, 1 - _EPS)
        losses = -(y_true * _m.log(p) + (1 - y_true) * _m.log(1 - p))
    return _r.reduce_mean(losses, axis=axis)


def mse(y_true, y_pred):
    """Keras's ``mean_squared_error``: per-example mean over the last axis."""
    y_pred = _float(y_pred)
    return _r.reduce_mean(_m.squared_difference(y_pred, _keras_true(y_true, y_pred)), axis=-1)


def mae(y_true, y_pred):
    """Keras's ``mean_absolute_error``: per-example mean over the last axis."""
    y_pred = _float(y_pred)
    return _r.reduce_mean(_m.abs(y_pred - _keras_true(y_true, y_pred)), axis=-1)


def huber(y_true, y_pred, delta=1.0):
    """Keras's ``huber``: per-example mean over the last axis."""
    y_pred = _float(y_pred)
    return _r.reduce_mean(_huber(y_pred - _keras_true(y_true, y_pred), delta), axis=-1)


class Loss:
    """Keras loss base: ``loss(y_true, y_pred, sample_weight=None)`` applies ``call``
    (per-example losses) then the reduction (default: the mean over the batch)."""

    def __init__(self, reduction="auto", name=None):
        r = _KERAS_REDUCTION.get(reduction, reduction)
        Reduction.validate(r)
        self.reduction = r
        self.name = name or _snake(type(self).__name__)

    def call(self, y_true, y_pred):
        raise NotImplementedError

    def __call__(self, y_true, y_pred, sample_weight=None):
        losses = self.call(y_true, y_pred)
        w = 1.0 if sample_weight is None else sample_weight
        if not _is_one(w):
            w = _float(w, losses)
            if w.ndim == losses.ndim + 1 and w.shape[-1] == 1:
                w = _a.squeeze(w, [-1])
        return compute_weighted_loss(losses, w, reduction=self.reduction)

    def get_config(self):
        return {"reduction": self.reduction, "name": self.name}


def _snake(name):
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i and not name[i - 1].isupper():
            out.append("_")
        out.append(c.lower())
    return "".join(out)


class SparseCategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, reduction="auto",
                 name="sparse_categorical_crossentropy"):
        super().__init__(reduction, name)
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        return sparse_categorical_crossentropy(y_true, y_pred, from_logits=self.from_logits)


class CategoricalCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="auto",
                 name="categorical_crossentropy"):
        super().__init__(reduction, name)
        self.from_logits = from_logits
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return categorical_crossentropy(y_true, y_pred, self.from_logits, self.label_smoothing)


class BinaryCrossentropy(Loss):
    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="auto",
                 name="binary_crossentropy"):
        super().__init__(reduction, name)
        self.from_logits = from_logits
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        return binary_crossentropy(y_true, y_pred, self.from_logits, self.label_smoothing)


class MeanSquaredError(Loss):
    def __init__(self, reduction="auto", name="mean_squared_error"):
        super().__init__(reduction, name)

    def call(self, y_true, y_pred):
        return mse(y_true, y_pred)


class MeanAbsoluteError(Loss):
    def __init__(self, reduction="auto", name="mean_absolute_error"):
        super().__init__(reduction, name)

    def call(self, y_true, y_pred):
        return mae(y_true, y_pred)


class Huber(Loss):
    def __init__(self, delta=1.0, reduction="auto", name="huber_loss"):
        super().__init__(reduction, name)
        self.delta = delta

    def call(self, y_true, y_pred):
        return huber(y_true, y_pred, self.delta)


_CLASSES = (SparseCategoricalCrossentropy, CategoricalCrossentropy, BinaryCrossentropy,
            MeanSquaredError, MeanAbsoluteError, Huber)
#: the names ``get`` knows (case-insensitive): Keras's function names and aliases, and the
#: class names
_BY_NAME = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
    "huber": Huber, "huber_loss": Huber,
    **{cls.__name__.lower(): cls for cls in _CLASSES},
}


def _known_names():
    """The names of ``_BY_NAME`` as users write them: the function names, then the classes."""
    classes = {cls.__name__.lower(): cls.__name__ for cls in _CLASSES
               if cls.__name__.lower() != _snake(cls.__name__)}
    return sorted(n for n in _BY_NAME if n not in classes) + sorted(classes.values())


def _lookup(name, what):
    cls = _BY_NAME.get(name.lower())
    if cls is None:
        raise InvalidArgumentError(
            f"losses.get: Unknown loss {what}; known names (case-insensitive): "
            f"{', '.join(_known_names())}. Pass one of them, a Loss instance, a callable "
            "loss(y_true, y_pred) or a config dict {'class_name': 'MeanSquaredError', "
            "'config': {}}.")
    return cls


def get(identifier):
    """A Keras loss from ``identifier`` (``tf.keras.losses.get``, what ``Model.compile``
    uses):

    * a name, case-insensitive: ``"sparse_categorical_crossentropy"``, ``"mse"`` /
      ``"mean_squared_error"``, ``"mae"``, ``"huber"``... or a class name such as
      ``"MeanSquaredError"`` -- an instance of the class, with its defaults;
    * a config dict ``{"class_name": "BinaryCrossentropy", "config": {"from_logits": True}}``;
    * a :class:`Loss` instance or any callable ``loss(y_true, y_pred)``: returned as is.

    >>> import tapeflow as tf
    >>> type(tf.keras.losses.get("mse")).__name__
    'MeanSquaredError'
    >>> tf.keras.losses.get({"class_name": "Huber", "config": {"delta": 2.0}}).delta
    2.0
    """
    if isinstance(identifier, str):
        return _lookup(identifier, repr(identifier))()
    if isinstance(identifier, dict):
        return from_config("losses.get", identifier, _lookup)
    if callable(identifier):
        return identifier
    raise InvalidTypeError(
        "losses.get: expected a loss name (such as 'mse'), a config dict, a Loss instance "
        f"or a callable loss(y_true, y_pred), got {type(identifier).__name__} {identifier!r}")
