"""Models: ``Model`` (subclass it), ``Network`` (the seeds' ``tfe.Network``) and
``Sequential``; Keras's ``compile`` / ``fit`` / ``evaluate`` / ``predict`` loop.

A Model is a Layer that holds layers: every Layer or Variable assigned to an
attribute is tracked (nesting works to any depth), so ``model.variables`` and
``model.trainable_variables`` list them in creation order. The main training path
is a custom loop with ``tf.GradientTape``; ``fit`` is that loop with batching, a
progress bar (tqdm when it is installed, else a one-line printer) and a History.
``save``/``save_weights``/``load_weights`` and ``tf.keras.models.load_model`` reach the
``.keras`` format of :mod:`tapeflow.keras.saving` (docs/keras-saving.md).

Long file: Keras's Model -- the training loop, its data and progress plumbing, saving's
entry points and Sequential -- one class hierarchy a reader follows in one place.

>>> import tapeflow as tf
>>> model = tf.keras.Sequential([
...     tf.keras.layers.Dense(10, input_shape=(784,)),   # must declare input shape
...     tf.keras.layers.Dense(10)
... ])
>>> [v.shape.as_list() for v in model.variables]
[[784, 10], [10], [10, 10], [10]]
>>> model(tf.zeros([3, 784])).shape
TensorShape([3, 10])
"""

from __future__ import annotations

import functools as _functools
import importlib as _importlib
import math as _pymath
import sys
import time

import numpy as np

from .errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from . import ops as _a
from .runtime import devices as _devs
from .ops import math as _m
from .ops import random as _random
from .ops import reductions as _r
from .ops import sparse as _sparse
from .ops.composite import CompositeTensor
from .runtime.dispatch import convert_to_tensor
from .layers.base import Layer, bump_name_counter
from .autodiff.tape import GradientTape
from .runtime.tensor import Tensor
from .runtime.variable import Variable
from . import losses as _losses
from . import metrics as _metrics
from .train import optimizers as _optimizers

__all__ = ["Model", "Network", "Sequential", "History", "load_model", "save_model",
           "register_saving", "deserialize_layer", "strategy_hooks"]

#: functions returning the active ``tf.distribute`` strategy (or None); tapeflow.distribute
#: appends its own at import, so this module never imports the layer above it
strategy_hooks: list = []


def _active_strategy():
    for hook in strategy_hooks:
        strategy = hook()
        if strategy is not None:
            return strategy
    return None

# --- saving (the .keras format lives in tapeflow.keras.saving, which registers itself) ----

_SAVING: dict = {}


def register_saving(**functions):
    """Called by :mod:`tapeflow.keras.saving` when it loads: ``save_model``,
    ``load_model``, ``save_weights``, ``load_weights`` and ``deserialize_layer`` (what
    ``Sequential.from_config`` makes each layer with)."""
    _SAVING.update(functions)


def _saving(name):
    if name not in _SAVING:          # tapeflow.keras (and its saving module) not loaded yet
        _importlib.import_module("tapeflow.keras")
    return _SAVING[name]


def deserialize_layer(config, custom_objects=None):
    """The layer a serialized config (``{"class_name", "config", ...}``) describes, its
    class found among the built-in and registered ones (what a model's ``from_config``
    makes each of its layers with; :func:`tapeflow.keras.saving.deserialize_keras_object`)."""
    return _saving("deserialize_layer")(config, custom_objects)


def save_model(model, filepath, overwrite=True, **kwargs):
    """``tf.keras.models.save_model``: ``model.save(filepath)`` (a ``.keras`` file)."""
    return _saving("save_model")(model, filepath, overwrite=overwrite, **kwargs)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):  # noqa: A002
    """``tf.keras.models.load_model``: the model of a ``.keras`` file, rebuilt, its weights
    (and, compiled, its optimizer's state) restored (:mod:`tapeflow.keras.saving`)."""
    return _saving("load_model")(filepath, custom_objects=custom_objects, compile=compile,
                                 safe_mode=safe_mode)



# --- the functional API (tapeflow.functional, which imports this module, registers it) ----

_FUNCTIONAL: dict = {}


def register_functional(**parts):
    """Called by :mod:`tapeflow.functional` when it loads: ``Functional`` (the class
    ``Model(inputs, outputs)`` makes), ``InputLayer`` and ``summary`` (model.summary's
    table)."""
    _FUNCTIONAL.update(parts)


def _functional(name):
    if name not in _FUNCTIONAL:          # tapeflow.keras (and tapeflow.functional) not loaded
        _importlib.import_module("tapeflow.keras")
    return _FUNCTIONAL[name]


def _functional_args(args, kwargs):
    return bool(args) or "inputs" in kwargs or "outputs" in kwargs


# --- Model -------------------------------------------------------------------------------

class _Shared:
    """A value every copy of a model shares (``copy.deepcopy`` keeps it): the strategy
    the model was created under is not part of the model's state."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __deepcopy__(self, memo):
        return self


def _under_strategy(method):
    """A Model method run inside the scope of the strategy the model was created under
    (variables it makes are mirrored); an error when another strategy's scope is active
    (TensorFlow refuses to mix strategies)."""
    what = method.__name__ + "()"

    @_functools.wraps(method)
    def run(self, *args, **kwargs):
        own = self._strategy
        if own is None and not strategy_hooks:
            return method(self, *args, **kwargs)
        active = _active_strategy()
        if active is own:
            return method(self, *args, **kwargs)
        if active is not None:
            raise FailedPreconditionError(
                f"{what}: the model {self.name!r} was created "
                + ("outside any tf.distribute strategy's scope" if own is None else
                   f"under another strategy ({type(own).__name__})")
                + f", but a {type(active).__name__}'s scope is active: create the model "
                "(and compile it) inside `with strategy.scope():` of the strategy that "
                "trains it; strategies cannot be mixed")
        with own.scope():
            return method(self, *args, **kwargs)
    return run


class Model(Layer):
    """A layer made of layers (``tf.keras.Model``). Subclass it: create layers (and
    Variables) in ``__init__``, compute in ``call(inputs[, training])``.

    ``compile(optimizer, loss, metrics)`` then ``fit``/``evaluate``/``predict`` give
    Keras's loop; a custom loop with ``tf.GradientTape`` works on any Model. A model
    created inside a ``tf.distribute`` strategy's ``scope()`` trains under it: each
    global batch is split over the replicas, with the numbers one process gives.
    """

    _TF_MODULE_IGNORED_PROPERTIES = Layer._TF_MODULE_IGNORED_PROPERTIES | {"_strategy_box"}

    def __new__(cls, *args, **kwargs):
        # Model(inputs, outputs): the functional API's model (tapeflow.functional)
        if cls is Model and _functional_args(args, kwargs):
            cls = _functional("Functional")
        new = super().__new__
        obj = new(cls) if new is object.__new__ else new(cls, *args, **kwargs)
        # the tf.distribute strategy whose scope is active: the model trains under it
        strategy = _active_strategy() if strategy_hooks else None
        if strategy is not None:
            obj.__dict__["_strategy_box"] = _Shared(strategy)
        return obj

    @property
    def _strategy(self):
        box = self.__dict__.get("_strategy_box")
        return None if box is None else box.value

    def __init__(self, *args, **kwargs):
        if _functional_args(args, kwargs):
            # a subclass of Model whose __init__ passes inputs and outputs up: it becomes
            # a functional model (Keras 3's "subclassed functional" models)
            functional = _functional("Functional")
            if not isinstance(self, functional):
                self.__class__ = type(type(self).__name__, (type(self), functional),
                                      {"__module__": type(self).__module__})
            functional.__init__(self, *args, **kwargs)
            return
        super().__init__(**kwargs)
        d = self.__dict__
        d["_compiled"] = None
        d["stop_training"] = False
        d["history"] = None

    def call(self, inputs, training=None):
        raise NotImplementedError(f"{type(self).__name__} must implement call(inputs)")

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A model from ``get_config()``'s dict: a functional model's graph (``layers``,
        ``input_layers``, ``output_layers``) makes a functional model; any other config
        holds the constructor's keyword arguments."""
        if not isinstance(config, dict):
            raise InvalidTypeError(f"{cls.__name__}.from_config: the config must be a dict "
                                   f"(get_config()'s), got {type(config).__name__}")
        if "input_layers" in config and "layers" in config:
            return _functional("Functional").from_config(config,
                                                         custom_objects=custom_objects)
        return cls(**config)

    def build(self, input_shape=None):
        """Create the variables. Called with a shape by the user (``model.build((None,
        784))``), it runs the model once on zeros of that shape (None -> 1)."""
        if self._in_call_build or input_shape is None:
            self.__dict__["built"] = True
            return
        shape = [1 if d is None else int(d) for d in input_shape]
        self(_a.zeros(shape, dtype=self.dtype))

    @property
    def layers(self) -> list:
        """The layers directly inside this model, in the order they were tracked."""
        out, seen = [], set()
        for _, obj in self._child_items():
            if isinstance(obj, Layer) and id(obj) not in seen:
                seen.add(id(obj))
                out.append(obj)
        return out

    def get_layer(self, name=None, index=None):
        """The layer called ``name``, or at position ``index`` of ``model.layers``."""
        layers = self.layers
        if index is not None:
            if name is not None:
                raise InvalidArgumentError("get_layer(): pass either name or index, not both")
            if isinstance(index, bool) or not isinstance(index, int) or not (
                    -len(layers) <= index < len(layers)):
                raise InvalidArgumentError(
                    f"get_layer(index={index!r}): the model {self.name!r} has {len(layers)} "
                    "layers")
            return layers[index]
        if name is None:
            raise InvalidArgumentError("get_layer(): pass a layer name or an index")
        for layer in layers:
            if layer.name == name:
                return layer
        raise InvalidArgumentError(f"No such layer: {name!r}; layers: {[l.name for l in layers]}")

    def summary(self, line_length=None, positions=None, print_fn=None, expand_nested=False,
                show_trainable=False, layer_range=None):
        """Print a table of the layers -- name (type), output shape, parameter count --
        and the totals, as Keras does (:func:`tapeflow.functional.print_summary`)."""
        _functional("summary")(self, line_length=line_length, positions=positions,
                               print_fn=print_fn, expand_nested=expand_nested,
                               show_trainable=show_trainable, layer_range=layer_range)

    # --- Keras's training loop -----------------------------------------------------------
    @_under_strategy
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=None, **kwargs):
        """Set the optimizer (an instance or ``"sgd"``/``"adam"``/``"rmsprop"``), the loss
        (a callable ``loss(y_true, y_pred)`` or a name such as
        ``"sparse_categorical_crossentropy"``, ``"categorical_crossentropy"``, ``"mse"``)
        and metrics (``"accuracy"``, names, callables, or metric objects with
        ``update_state``/``result``/``reset_states``) for ``fit``/``evaluate``."""
        if loss is None:
            raise InvalidArgumentError("compile() needs a loss")
        if loss_weights is not None or weighted_metrics:
            raise NotImplementedError("loss_weights and weighted_metrics are not supported")
        loss_fn = _losses.get(loss)
        mets = [_Metric.make(m, loss_fn) for m in metrics or []]
        self.__dict__["_compiled"] = {"optimizer": _optimizers.get(optimizer), "loss": loss_fn,
                                      "metrics": mets, "args": {"loss": loss,
                                                                "metrics": metrics}}

    @property
    def distribute_strategy(self):
        """The ``tf.distribute`` strategy whose ``scope()`` was active when the model was
        created (None outside any): ``compile``/``fit``/``evaluate``/``predict`` run under
        it, each global batch split over its replicas (docs/distributed.md).

        >>> import tapeflow as tf
        >>> strategy = tf.distribute.MirroredStrategy(["cpu:0"])
        >>> with strategy.scope():
        ...     model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
        ...     model.compile("sgd", "mse")
        >>> model.distribute_strategy is strategy
        True
        >>> model.fit(tf.ones([4, 2]), tf.ones([4, 1]), batch_size=2, verbose=0).epoch
        [0]
        """
        return self._strategy

    def _replicas(self):
        """The model's strategy when it has more than one replica in sync, else None."""
        own = self._strategy
        return own if own is not None and own.num_replicas_in_sync > 1 else None

    def get_compile_config(self):
        """The arguments of ``compile`` (``optimizer`` the optimizer object, ``loss`` and
        ``metrics`` as given), what a ``.keras`` file saves; None if not compiled."""
        c = self._compiled
        if c is None:
            return None
        return {"optimizer": c["optimizer"], "loss": c["args"]["loss"],
                "metrics": c["args"]["metrics"], "loss_weights": None,
                "weighted_metrics": None, "run_eagerly": False, "steps_per_execution": 1,
                "jit_compile": False}

    # --- saving ----------------------------------------------------------------------------
    def save(self, filepath, overwrite=True, **kwargs):
        """Save the model to a ``.keras`` file: its config, weights and, compiled, its
        compile arguments and optimizer state (``tf.keras.models.load_model`` reads it;
        docs/keras-saving.md)."""
        return _saving("save_model")(self, filepath, overwrite=overwrite, **kwargs)

    def save_weights(self, filepath, overwrite=True, save_format=None, options=None):
        """Save the weights: ``"x.weights.h5"`` writes HDF5 in Keras 3's layout (needs
        h5py: ``tapeflow[h5]``); any other path is a checkpoint prefix
        (``tf.train.Checkpoint`` files: TF 2's Keras 2 form, kept for TF 1-style programs)."""
        return _saving("save_weights")(self, filepath, overwrite=overwrite,
                                       save_format=save_format, options=options)

    def load_weights(self, filepath, skip_mismatch=False, by_name=False, options=None):
        """Load weights saved by ``save_weights`` (``.weights.h5`` or a checkpoint prefix)
        or ``save`` (a ``.keras`` file); every array is checked first."""
        return _saving("load_weights")(self, filepath, skip_mismatch=skip_mismatch,
                                       by_name=by_name, options=options)

    @property
    def optimizer(self):
        c = self._compiled
        return None if c is None else c["optimizer"]

    @optimizer.setter
    def optimizer(self, value):
        self._need_compiled("setting model.optimizer")["optimizer"] = _optimizers.get(value)

    @property
    def metrics_names(self) -> list:
        c = self._compiled
        return ["loss"] + ([m.name for m in c["metrics"]] if c else [])

    def _need_compiled(self, what):
        if self._compiled is None:
            raise FailedPreconditionError(
                f"{what}: call model.compile(optimizer, loss, metrics) first")
        return self._compiled

    def _loss(self, loss_fn, y, pred, share=None):
        """The compiled loss: the outputs' mean losses plus the regularisation losses. A
        replica's step under a strategy passes ``share`` = (rows in the global batch,
        replicas in sync): its mean loss is weighted by its rows' share of the global
        batch (a loss with ``reduction="sum"`` is kept: the replicas' sums add up to the
        global batch's) and the regularisation divided over the replicas, so the
        replicas' losses and gradients sum to one process's."""
        if isinstance(pred, (list, tuple, dict)):     # several outputs: the sum of losses
            keys = list(pred) if isinstance(pred, dict) else range(len(pred))
            parts = [self._output_loss(loss_fn, y[k], pred[k]) for k in keys]
            value = _m.add_n(parts) if len(parts) > 1 else parts[0]
        else:
            value = self._output_loss(loss_fn, y, pred)
        if share is not None:
            value = _replica_share(value, pred, share[0],
                                   getattr(loss_fn, "reduction", None) == _losses.Reduction.SUM)
        reg = self.losses
        if reg:
            reg = _m.add_n(reg) if len(reg) > 1 else reg[0]
            value = value + (reg if share is None else reg / float(share[1]))
        return value

    def _output_loss(self, loss_fn, y, pred):
        if isinstance(pred, Tensor) and pred.dtype.is_floating and pred.dtype.size == 2:
            pred = _m.cast(pred, "float32")     # losses compute in float32, as in Keras
        value = loss_fn(y, pred)
        if value.ndim:
            value = _r.reduce_mean(value)
        return value

    @_under_strategy
    def train_on_batch(self, x, y):
        """One optimizer step on one batch; returns the loss (a scalar Tensor)."""
        c = self._need_compiled("train_on_batch")
        x, y = _tensor(x, self), _tensor(y, None, _ios(self, "_flat_outputs"))
        strategy = self._replicas()
        if strategy is not None:
            return self._replicas_train_step(strategy, c, x, y)[0]
        return self._train_step(c, x, y)[0]

    def _train_step(self, c, x, y, share=None):
        opt = c["optimizer"]
        scaled = getattr(opt, "get_scaled_loss", None)     # a LossScaleOptimizer
        with GradientTape() as tape:
            pred = self(x, training=True)
            y = _follow(y, pred)
            loss = self._loss(c["loss"], y, pred, share)
            if scaled is not None:
                scaled = scaled(loss)
        tvars = self.trainable_variables
        if scaled is not None:
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, tvars))
        else:
            grads = tape.gradient(loss, tvars)
        opt.apply_gradients(zip(grads, tvars))      # under a strategy: summed over replicas
        return loss, y, pred

    def _replicas_train_step(self, strategy, c, x, y):
        """``_train_step`` of a global batch under ``strategy``: each replica steps on its
        slice (the optimizer sums the gradients and updates once); returns the global
        batch's loss, labels and (gathered) predictions, as one process's step does."""
        xs, ys, y, n = _distribute(strategy, x, y)
        _build(self, strategy.experimental_local_results(xs)[0])
        share = (n, strategy.num_replicas_in_sync)
        loss, pred = strategy.run(lambda xr, yr: self._train_step(c, xr, yr, share)[::2],
                                  args=(xs, ys))
        pred = _gather(strategy, pred)
        return strategy.reduce("SUM", loss, axis=None), _follow(y, pred), pred

    def _replicas_forward(self, strategy, x, y=None):
        """The model's outputs for a global batch in inference mode under ``strategy``:
        each replica's slice's, gathered in order; and the global batch's labels."""
        xs, _, y, _ = _distribute(strategy, x, y)
        _build(self, strategy.experimental_local_results(xs)[0])
        return _gather(strategy, strategy.run(lambda xr: self(xr, training=False),
                                              args=(xs,))), y

    def _predict_batch(self, x, y=None):
        strategy = self._replicas()
        if strategy is None:
            return self(x, training=False), y
        return self._replicas_forward(strategy, x, y)

    @_under_strategy
    def test_on_batch(self, x, y):
        c = self._need_compiled("test_on_batch")
        pred, y = self._predict_batch(_tensor(x, self),
                                      _tensor(y, None, _ios(self, "_flat_outputs")))
        return self._loss(c["loss"], _follow(y, pred), pred)

    @_under_strategy
    def predict_on_batch(self, x):
        return self._predict_batch(_tensor(x, self))[0]

    @_under_strategy
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose=1, callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None,
            validation_freq=1, **kwargs):
        """Train for ``epochs`` over ``x``/``y`` (arrays or Tensors, cut into batches of
        ``batch_size``, default 32, reshuffled every epoch when ``shuffle``) or over an
        iterable of ``(x, y)`` batches such as a ``tf.data.Dataset``. Shows a progress
        bar when ``verbose=1`` (one line per epoch with ``verbose=2``). Returns a
        History whose ``.history`` maps ``"loss"``, each metric and their ``"val_"``
        forms to per-epoch values."""
        c = self._need_compiled("fit")
        if kwargs:
            raise InvalidTypeError("fit(): unsupported arguments " + ", ".join(sorted(kwargs)))
        if validation_split and validation_data is None:
            if not _is_array(x) or not _is_array(y):
                raise InvalidArgumentError("validation_split needs x and y arrays or Tensors")
            x, y = _tensor(x, self), _tensor(y, None, _ios(self, "_flat_outputs"))
            n = _batch_len(x)
            cut = n - int(_pymath.floor(n * float(validation_split)))
            validation_data = (_each(lambda t: t[cut:], x), _each(lambda t: t[cut:], y))
            x, y = _each(lambda t: t[:cut], x), _each(lambda t: t[:cut], y)
        data = _Data(x, y, batch_size, shuffle, self, steps_per_epoch)
        strategy = self._replicas()
        if strategy is not None:        # every worker shuffles as worker 0 does
            data.agree = _functools.partial(_first_replicas, strategy)
        callbacks = list(callbacks or [])
        history = History()
        history.model = self
        history.params = {"epochs": epochs, "steps": data.steps, "verbose": verbose}
        self.__dict__["history"] = history
        self.__dict__["stop_training"] = False
        for cb in callbacks:
            _set_model(cb, self)
        _hook(callbacks, "on_train_begin", {})
        batch_hooks = [cb for cb in callbacks if hasattr(cb, "on_train_batch_begin")
                       or hasattr(cb, "on_train_batch_end")]
        mets = c["metrics"]
        train_step = self._train_step if strategy is None else _functools.partial(
            self._replicas_train_step, strategy)
        for epoch in range(initial_epoch, epochs):
            _hook(callbacks, "on_epoch_begin", epoch, {})
            for m in mets:
                m.reset()
            agg = _Mean()
            bar = _progress(verbose, data.steps, f"Epoch {epoch + 1}/{epochs}")
            for step, (xb, yb) in enumerate(data.epoch()):
                if batch_hooks:
                    _hook(batch_hooks, "on_train_batch_begin", step, {})
                loss, yb, pred = train_step(c, xb, yb)
                if batch_hooks:
                    _hook(batch_hooks, "on_train_batch_end", step, {"loss": loss})
                n = _batch_len(pred)
                agg.add(loss, n)
                for m in mets:
                    m.update(yb, pred)
                bar.step(lambda agg=agg: _logs(agg, mets))
            logs = _logs(agg, mets)
            if validation_data is not None and (epoch + 1) % validation_freq == 0:
                vx, vy = _split_val(validation_data)
                val = self.evaluate(vx, vy, steps=validation_steps, verbose=0,
                                    batch_size=(validation_batch_size or batch_size)
                                    if _is_array(vx) else None, return_dict=True)
                logs.update({"val_" + k: v for k, v in val.items()})
            _hook(callbacks, "on_epoch_end", epoch, logs)    # may average logs over ranks
            bar.close(logs)
            history._append(epoch, logs)
            if self.stop_training:
                break
        _hook(callbacks, "on_train_end", {})
        return history

    @_under_strategy
    def evaluate(self, x=None, y=None, batch_size=None, verbose=1, steps=None,
                 return_dict=False, callbacks=None, **kwargs):
        """Loss and metrics over the data (in inference mode): a float when there are
        no metrics, else ``[loss, metric, ...]`` (a dict with ``return_dict=True``)."""
        c = self._need_compiled("evaluate")
        if kwargs:
            raise InvalidTypeError("evaluate(): unsupported arguments " + ", ".join(sorted(kwargs)))
        data = _Data(x, y, batch_size, False, self, steps)
        mets = c["metrics"]
        for m in mets:
            m.reset()
        agg = _Mean()
        bar = _progress(verbose, data.steps, "Evaluate")
        strategy = self._replicas()
        for xb, yb in data.epoch():
            if strategy is None:
                pred = self(xb, training=False)
            else:
                pred, yb = self._replicas_forward(strategy, xb, yb)
            yb = _follow(yb, pred)
            agg.add(self._loss(c["loss"], yb, pred), _batch_len(pred))
            for m in mets:
                m.update(yb, pred)
            bar.step(lambda: _logs(agg, mets))
        logs = _logs(agg, mets)
        bar.close(logs)
        if return_dict:
            return logs
        if not mets:
            return logs["loss"]
        return [logs[k] for k in ["loss"] + [m.name for m in mets]]

    @_under_strategy
    def predict(self, x, batch_size=None, verbose=0, steps=None, callbacks=None, **kwargs):
        """The model's outputs for ``x`` (in inference mode, batch by batch), concatenated
        into one Tensor."""
        if kwargs:
            raise InvalidTypeError("predict(): unsupported arguments " + ", ".join(sorted(kwargs)))
        data = _Data(x, None, batch_size, False, self, steps, need_y=False)
        bar = _progress(verbose, data.steps, "Predict")
        outs = []
        strategy = self._replicas()
        for xb, _ in data.epoch():
            outs.append(self(xb, training=False) if strategy is None else
                        self._replicas_forward(strategy, xb)[0])
            bar.step(dict)
        bar.close({})
        if not outs:
            raise InvalidArgumentError("predict(): no data")
        if len(outs) == 1:
            return outs[0]
        first = outs[0]
        if isinstance(first, dict):                     # several outputs
            return {k: _a.concat([o[k] for o in outs], axis=0) for k in first}
        if isinstance(first, (list, tuple)):
            return [_a.concat([o[i] for o in outs], axis=0) for i in range(len(first))]
        return _a.concat(outs, axis=0)


class Network(Model):
    """The seeds' ``tfe.Network``: a Model whose layers are registered with
    ``track_layer`` (attribute assignment tracks them too)."""

    def __init__(self, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self._tracked_layers = []

    def track_layer(self, layer):
        """Register ``layer`` (its variables become this network's) and return it."""
        if not isinstance(layer, Layer):
            raise InvalidTypeError(f"track_layer() needs a Layer, got {type(layer).__name__}")
        if not any(layer is l for l in self._tracked_layers):
            self._tracked_layers.append(layer)
        return layer


class Sequential(Model):
    """A linear stack of layers: ``call`` feeds each layer's output to the next.

    When the first layer declares ``input_shape`` (or ``input_dim``), the model is
    built at once (its variables exist before the first call), as in Keras.
    """

    def __init__(self, layers=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.__dict__["_layer_list"] = []
        self.__dict__["_build_shape"] = None
        for layer in layers or []:
            self.add(layer)

    def _child_items(self):
        for i, layer in enumerate(self._layer_list):
            yield f"layer-{i}", layer
        yield from super()._child_items()

    @property
    def layers(self) -> list:
        return list(self._layer_list)

    def add(self, layer):
        if not isinstance(layer, Layer) and getattr(layer, "_keras_history", None):
            layer = layer._keras_history[0]         # tf.keras.Input(...): its InputLayer
        if not isinstance(layer, Layer):
            raise InvalidTypeError(f"Sequential.add() needs a Layer, got {type(layer).__name__}")
        if isinstance(layer, _FUNCTIONAL.get("InputLayer", ())):
            if self._layer_list:
                raise InvalidArgumentError(f"Sequential {self.name!r}: an Input/InputLayer "
                                           "can only be the first layer")
            self.__dict__["_build_shape"] = layer.batch_shape     # (not one of .layers)
            self.__dict__["_build_dtype"] = layer.output.dtype
            return
        self._layer_list.append(layer)
        bump_name_counter()
        if len(self._layer_list) == 1 and layer._batch_input_shape is not None:
            self.__dict__["_build_shape"] = layer._batch_input_shape
        if self._build_shape is not None:
            shape = [1 if d is None else int(d) for d in self._build_shape]
            self(_a.zeros(shape, dtype=self.__dict__.get("_build_dtype")
                          or self._layer_list[0].dtype))

    def get_config(self):
        """``{"name", "trainable", "dtype", "layers": [each layer's serialized config],
        "build_input_shape"}`` (Keras 3's Sequential config)."""
        ser = _saving("serialize")
        cfg = {"name": self.name, "trainable": self.trainable, "dtype": self.dtype_policy.name,
               "layers": [ser(layer) for layer in self._layer_list]}
        if self._build_shape is not None:
            cfg["build_input_shape"] = list(self._build_shape)
        return cfg

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new Sequential model from ``get_config()``'s dict (layers given as configs or
        as Layers); built when the config has ``build_input_shape``."""
        config = dict(config)
        entries = config.pop("layers", None)
        if not isinstance(entries, list):
            raise InvalidArgumentError("Sequential.from_config: the config needs 'layers', a "
                                       f"list of layer configs, got {type(entries).__name__}")
        shape = config.pop("build_input_shape", None)
        layers = [e if isinstance(e, Layer) else deserialize_layer(e, custom_objects)
                  for e in entries]
        model = cls(**config)
        if shape is not None and layers and layers[0]._batch_input_shape is None:
            layers[0].__dict__["_batch_input_shape"] = tuple(shape)
        for layer in layers:
            model.add(layer)
        return model

    # the symbolic ends, once the input shape is known (Keras 3; tapeflow.functional)
    input = property(lambda self: _functional("sequential_graph")(self)[0])
    output = property(lambda self: _functional("sequential_graph")(self)[1])
    inputs = property(lambda self: [self.input])
    outputs = property(lambda self: [self.output])
    input_shape = property(lambda self: self.input.shape)
    output_shape = property(lambda self: self.output.shape)

    def pop(self):
        if not self._layer_list:
            raise InvalidTypeError("There are no layers in the model.")
        layer = self._layer_list.pop()
        bump_name_counter()
        return layer

    def call(self, inputs, training=None):
        x = inputs
        if training is None:
            for layer in self._layer_list:
                x = layer(x)
        else:
            for layer in self._layer_list:
                x = layer(x, training=training)
        return x


# --- History and progress -----------------------------------------------------------------

class History:
    """What ``fit`` returns: ``history`` (``{"loss": [...], "accuracy": [...],
    "val_loss": [...]}``), ``epoch`` (epoch indices), ``params`` and ``model``."""

    def __init__(self):
        self.history: dict = {}
        self.epoch: list = []
        self.params: dict = {}
        self.model = None

    def _append(self, epoch, logs):
        self.epoch.append(epoch)
        for k, v in logs.items():
            self.history.setdefault(k, []).append(v)

    def __repr__(self):
        return f"<History epochs={len(self.epoch)} keys={list(self.history)}>"


def _fmt_logs(logs):
    return " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())


class _Silent:
    def step(self, logs_fn):
        pass

    def close(self, logs):
        pass


class _Printer:
    """One line per epoch; redrawn in place (at most 10 times a second) on a terminal."""

    def __init__(self, total, desc, verbose, file):
        self.total, self.desc, self.verbose, self.file = total, desc, verbose, file
        self.n = 0
        self.t0 = self.last = time.perf_counter()
        self.live = verbose == 1 and hasattr(file, "isatty") and file.isatty()

    def _line(self, logs):
        if self.total:
            done = int(30 * self.n / self.total)
            bar = f"{self.n}/{self.total} [" + "=" * done + (">" if done < 30 else "") + \
                "." * max(0, 29 - done) + "]"
        else:
            bar = f"{self.n} steps"
        s = f"{self.desc} {bar} - {time.perf_counter() - self.t0:.1f}s"
        return s + (" - " + _fmt_logs(logs) if logs else "")

    def step(self, logs_fn):
        self.n += 1
        if self.live:
            now = time.perf_counter()
            if now - self.last >= 0.1:
                self.last = now
                self.file.write("\r" + self._line(logs_fn()))
                self.file.flush()

    def close(self, logs):
        self.file.write(("\r" if self.live else "") + self._line(logs) + "\n")
        self.file.flush()


class _Tqdm:
    def __init__(self, tqdm, total, desc, file):
        self.bar = tqdm(total=total, desc=desc, unit="step", file=file, leave=True,
                        dynamic_ncols=True)
        self.last = time.perf_counter()

    def step(self, logs_fn):
        self.bar.update(1)
        now = time.perf_counter()
        if now - self.last >= 0.2:          # reading the loss waits for the device
            self.last = now
            self.bar.set_postfix({k: f"{v:.4f}" for k, v in logs_fn().items()}, refresh=False)

    def close(self, logs):
        self.bar.set_postfix({k: f"{v:.4f}" for k, v in logs.items()}, refresh=False)
        self.bar.close()


#: functions asked before a progress bar is drawn; any False keeps it silent
#: (tapeflow.distributed adds "this is rank 0": one bar per job, not one per process)
progress_gates: list = []


def _progress(verbose, total, desc):
    if not verbose or not all(gate() for gate in progress_gates):
        return _Silent()
    file = sys.stdout
    if verbose == 1:
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return _Tqdm(tqdm, total, desc, file)
    return _Printer(total, desc, verbose, file)


def _hook(callbacks, name, *args):
    for cb in callbacks:
        fn = getattr(cb, name, None)
        if fn is not None:
            fn(*args)


def _set_model(cb, model):
    fn = getattr(cb, "set_model", None)
    if fn is not None:
        fn(model)
    else:
        try:
            cb.model = model
        except AttributeError:
            pass


# --- data ---------------------------------------------------------------------------------

def _is_array(v):
    if isinstance(v, dict):             # a functional model's named inputs
        return bool(v) and all(_is_array(e) for e in v.values())
    return isinstance(v, (Tensor, Variable, np.ndarray, np.generic, list, tuple, int, float,
                          CompositeTensor))


def _ios(model, which="_flat_inputs"):
    """How many inputs (or ``"_flat_outputs"``) a functional model has; 1 for others."""
    return (len(model.__dict__.get(which, ())) or 1) if model is not None else 1


def _each(fn, v):
    """``fn`` of each entry of a model's several inputs/outputs (a list, tuple or dict)."""
    if isinstance(v, dict):
        return {k: fn(e) for k, e in v.items()}
    if isinstance(v, (list, tuple)):
        return [fn(e) for e in v]
    return fn(v)


def _tensor(v, model, n=None):
    """An array/Tensor argument as a Tensor; floating inputs in the model's dtype. A dict,
    or a list of as many arrays as a functional model has inputs (``n``, for labels its
    outputs), is converted entry by entry."""
    n = _ios(model) if n is None else n
    if isinstance(v, dict) or (n > 1 and isinstance(v, (list, tuple)) and len(v) == n):
        return _each(lambda e: _tensor(e, model, 1), v)
    if isinstance(v, Variable):
        v = v.read_value()
    if not isinstance(v, (Tensor, CompositeTensor)):
        v = convert_to_tensor(v)
        if model is not None and v.dtype.is_floating and v.dtype is not model.dtype:
            v = _m.cast(v, model.dtype)
    return v


def _follow(y, pred):
    """Labels on the predictions' device (host labels follow a model on an accelerator)."""
    if isinstance(y, dict) and isinstance(pred, dict):
        return {k: _follow(y[k], pred[k]) if k in pred else y[k] for k in y}
    if isinstance(y, (list, tuple)) and isinstance(pred, (list, tuple)):
        return [_follow(a, b) for a, b in zip(y, pred)]
    if isinstance(pred, (list, tuple, dict)):
        return y
    if isinstance(y, Tensor) and isinstance(pred, Tensor) and y._device is not pred._device:
        return y.to(pred._device)       # (a ragged or sparse prediction: labels as they are)
    return y


def _batch_len(t):
    if isinstance(t, (list, tuple, dict)):          # several inputs/outputs: the first's
        return _batch_len(next(iter(t.values())) if isinstance(t, dict) else t[0])
    s = t.shape
    return int(s[0]) if len(s) else 1


def _rows(t, s):
    """Rows ``s`` (a slice) of a batch of inputs: a Tensor, RaggedTensor or SparseTensor."""
    if not isinstance(t, _sparse.SparseTensor):
        return t[s]
    shape = [int(d) for d in t.dense_shape.numpy()]
    start = min(s.start, shape[0])
    return _sparse.slice(t, [start] + [0] * (len(shape) - 1),
                         [min(s.stop, shape[0]) - start] + shape[1:])


def _take(t, idx):
    """Rows ``idx`` (an int Tensor) of a batch of inputs, in that order."""
    if not isinstance(t, _sparse.SparseTensor):
        return _a.gather(t, _follow(idx, t))
    rows = np.asarray(idx.numpy(), np.int64)
    ind = t.indices.numpy()
    pos = np.full(int(t.dense_shape.numpy()[0]), -1, np.int64)
    pos[rows] = np.arange(len(rows))
    keep = np.nonzero(pos[ind[:, 0]] >= 0)[0]
    new = ind[keep].copy()
    new[:, 0] = pos[ind[keep, 0]]
    shape = [len(rows)] + [int(d) for d in t.dense_shape.numpy()[1:]]
    return _sparse.reorder(_sparse.SparseTensor(new, _a.gather(t.values, keep), shape))


def _split_val(v):
    if isinstance(v, tuple):
        if len(v) == 2:
            return v
        if len(v) == 3:
            return v[0], v[1]
        raise InvalidArgumentError("validation_data must be (x, y) or a dataset of (x, y) batches")
    return v, None


class _Data:
    """Batches of (x, y) Tensors from arrays/Tensors or from an iterable of batches."""

    def __init__(self, x, y, batch_size, shuffle, model, steps, need_y=True):
        self.steps_limit = steps
        self.model = model
        if x is None:
            raise InvalidArgumentError("no data: pass x (and y) or a dataset")
        if _is_array(x):
            if need_y and y is None:
                raise InvalidArgumentError("y is required with array inputs")
            self.x = _tensor(x, model)
            self.y = None if y is None else _tensor(y, None, _ios(model, "_flat_outputs"))
            self.n = _batch_len(self.x)
            if self.y is not None and _batch_len(self.y) != self.n:
                raise InvalidArgumentError(
                    f"x and y have different numbers of samples: {self.n} and "
                                 f"{_batch_len(self.y)}")
            self.bs = int(batch_size or 32)
            self.shuffle = bool(shuffle)
            self.agree = None           # under a strategy: the shuffles made the same
            self.dataset = None
            n_batches = -(-self.n // self.bs)
            self.steps = n_batches if steps is None else min(int(steps), n_batches)
        else:
            if y is not None:
                raise InvalidArgumentError("y must be None when x is a dataset (it yields (x, y))")
            if batch_size is not None:
                raise InvalidArgumentError("batch_size must be None when x is a dataset (batch the "
                                 "dataset instead)")
            self.dataset = x
            self._it = None
            try:
                n = len(x)
            except TypeError:
                n = None
            self.steps = int(steps) if steps is not None else n

    def epoch(self):
        if self.dataset is not None:
            yield from self._dataset_epoch()
            return
        x, y, n, bs = self.x, self.y, self.n, self.bs
        if self.shuffle and n > 1:
            first = x if isinstance(x, (Tensor, CompositeTensor)) else next(iter(
                x.values() if isinstance(x, dict) else x))
            while isinstance(first, CompositeTensor):      # (its values' device)
                first = first.values
            with _devs.device(first.device):
                perm = _random.shuffle(_a.range(n))
            if self.agree is not None:
                perm = self.agree(perm)
            for i in range(self.steps):
                idx = perm[i * bs:(i + 1) * bs]
                yield (_each(lambda t: _take(t, idx), x),
                       None if y is None else _each(lambda t: _take(t, idx), y))
        else:
            for i in range(self.steps):
                s = slice(i * bs, (i + 1) * bs)
                yield (_each(lambda t: _rows(t, s), x),
                       None if y is None else _each(lambda t: _rows(t, s), y))

    def _dataset_epoch(self):
        limit = self.steps_limit
        if limit is None:
            it = iter(self.dataset)
        else:                               # keep one iterator across epochs (Keras)
            if self._it is None:
                self._it = iter(self.dataset)
            it = self._it
        count = 0
        while limit is None or count < limit:
            try:
                item = next(it)
            except StopIteration:
                if limit is not None and count == 0 and it is self._it:
                    self._it = it = iter(self.dataset)
                    continue
                if limit is not None:
                    self._it = None
                break
            count += 1
            if isinstance(item, dict):
                raise InvalidArgumentError("dataset elements must be (x, y) tuples, got a dict")
            if isinstance(item, (tuple, list)):
                xb = item[0]
                yb = item[1] if len(item) > 1 else None
            else:
                xb, yb = item, None
            yield _tensor(xb, self.model), (None if yb is None else _tensor(
                yb, None, _ios(self.model, "_flat_outputs")))


# --- under a tf.distribute strategy with several replicas ----------------------------------

def _distribute(strategy, x, y):
    """A step's inputs as per-replica values: ``(x, y, global y, global rows)``. A global
    batch is split (``_split``); a distributed dataset's element (already per-replica)
    is kept, its labels gathered into the global batch's."""
    first = x
    while isinstance(first, (dict, list, tuple)):
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    if strategy.experimental_local_results(first)[0] is not first:   # per-replica
        y_all = None if y is None else _gather(strategy, y)
        return x, y, y_all, None if y_all is None else _batch_len(y_all)
    n = _batch_len(x)
    return _split(strategy, x, n), _split(strategy, y, n), y, n


def _split(strategy, v, n):
    """A global batch ``v`` (a Tensor, or a model's several inputs) of ``n`` rows as
    per-replica values: replica ``r`` (its id in the sync group) gets the ``r``-th of
    ``num_replicas_in_sync`` contiguous slices (``np.array_split``'s sizes)."""
    if v is None:
        return None
    q, extra = divmod(n, strategy.num_replicas_in_sync)

    def part(t):
        def rows(ctx):
            r = ctx.replica_id_in_sync_group
            start = r * q + min(r, extra)
            return _rows(t, slice(start, start + q + (1 if r < extra else 0)))
        return strategy.experimental_distribute_values_from_function(rows)
    return _each(part, v)


def _first_replicas(strategy, value):
    """``value`` as replica 0 (on worker 0) has it, on every worker (a SUM of it and
    zeros): all workers then shuffle alike, as the split of each global batch needs."""
    zero = _a.zeros_like(value)
    per = strategy.experimental_distribute_values_from_function(
        lambda ctx: value if ctx.replica_id_in_sync_group == 0 else zero)
    return strategy.reduce("SUM", per, axis=None)


def _gather(strategy, v):
    """Per-replica batches (or several outputs' batches) concatenated in replica order."""
    return _each(lambda t: strategy.gather(t, axis=0), v)


def _build(model, x):
    """Build an unbuilt model on one row of ``x`` in the calling thread (under the
    strategy's scope: its variables are mirrored) before the replicas run it."""
    if not model.built:
        model(_each(lambda t: _rows(t, slice(0, 1)), x), training=False)


def _replica_share(value, pred, rows, summed=False):
    """A replica's mean loss weighted by its share of the global batch's ``rows`` (a
    ``summed`` loss as it is); a replica with no rows contributes a zero still connected
    to the model's outputs."""
    n = _batch_len(pred)
    if n:
        return value if summed else value * (n / rows)
    flat = list(pred.values()) if isinstance(pred, dict) else (
        list(pred) if isinstance(pred, (list, tuple)) else [pred])
    return _m.add_n([_r.reduce_sum(_m.cast(p, "float32")) for p in flat]) * 0.0


# --- metrics and loss aggregation ------------------------------------------------------------

class _Mean:
    """A running mean kept as a Tensor (no device sync until it is read)."""

    def __init__(self):
        self.total = None
        self.count = 0

    def add(self, value, n):
        if value.ndim == 0:
            v = value * float(n)
        else:
            v = _r.reduce_sum(value)
            n = int(np.prod(value.shape))
        self.total = v if self.total is None else self.total + v
        self.count += n

    def result(self):
        if self.total is None or not self.count:
            return 0.0
        return float(self.total) / self.count


def _logs(agg, mets):
    logs = {"loss": agg.result()}
    for m in mets:
        logs[m.name] = m.result()
    return logs


class _Metric:
    """A compiled metric: a function ``fn(y_true, y_pred)`` averaged over batches, or a
    stateful object with ``update_state``/``result``/``reset_states``."""

    def __init__(self, name, fn=None, obj=None):
        self.name, self.fn, self.obj = name, fn, obj
        self.mean = _Mean()

    @classmethod
    def make(cls, m, loss_fn):
        """``m``: a name (Keras's metric functions: ``"accuracy"`` picks the one that fits
        ``loss_fn``), a metric object or a function."""
        if isinstance(m, str):
            resolved = _metrics.get_function(m, loss=loss_fn)
            if not (hasattr(resolved, "update_state") and hasattr(resolved, "result")):
                return cls(m, resolved)
            m = resolved
        if hasattr(m, "update_state") and hasattr(m, "result"):
            return cls(getattr(m, "name", type(m).__name__), obj=m)
        if callable(m):
            return cls(getattr(m, "__name__", type(m).__name__), m)
        raise InvalidTypeError(f"metric must be a name, a function or a metric object, got {m!r}")

    def reset(self):
        if self.obj is not None:
            reset = getattr(self.obj, "reset_states", None) or self.obj.reset_state
            reset()
        else:
            self.mean = _Mean()

    def update(self, y, pred):
        if self.obj is not None:
            self.obj.update_state(y, pred)
        else:
            self.mean.add(self.fn(y, pred), _batch_len(pred))

    def result(self):
        if self.obj is not None:
            return float(self.obj.result())
        return self.mean.result()
