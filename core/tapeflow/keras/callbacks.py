"""``tf.keras.callbacks``: ``Callback`` (the hooks ``fit`` calls), ``History`` and
``EarlyStopping`` / ``LambdaCallback``."""

from __future__ import annotations

from ..models import History

__all__ = ["Callback", "History", "LambdaCallback", "EarlyStopping"]


class Callback:
    """Override any of ``on_train_begin(logs)``, ``on_epoch_begin(epoch, logs)``,
    ``on_train_batch_begin(batch, logs)``, ``on_train_batch_end(batch, logs)``,
    ``on_epoch_end(epoch, logs)``, ``on_train_end(logs)``; ``self.model`` is the model.
    ``on_epoch_end`` may change ``logs`` in place: History records what it holds after
    every callback ran."""

    model = None

    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs=None):
        pass

    def on_train_end(self, logs=None):
        pass

    def on_epoch_begin(self, epoch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        pass

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, **kwargs):
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end)):
            if fn is not None:
                setattr(self, name, fn)


class EarlyStopping(Callback):
    """Stop ``fit`` when ``monitor`` (default ``val_loss``) stops improving for
    ``patience`` epochs."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, mode="auto",
                 restore_best_weights=False, **kwargs):
        self.monitor, self.min_delta, self.patience = monitor, abs(min_delta), patience
        if mode == "auto":
            mode = "max" if "acc" in monitor else "min"
        self.sign = 1.0 if mode == "min" else -1.0
        self.restore_best_weights = restore_best_weights
        self.best = None
        self.wait = 0
        self.best_weights = None
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None):
        self.best, self.wait, self.best_weights = None, 0, None

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        if self.best is None or self.sign * (value - self.best) < -self.min_delta:
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)
