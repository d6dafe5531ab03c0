"""``tf.keras.datasets``: the dataset loaders of :mod:`tapeflow.datasets`, by their
Keras names (``tf.keras.datasets.mnist.load_data()``). Loaded on first use."""

from __future__ import annotations

import importlib


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        mod = importlib.import_module("tapeflow.datasets")
    except ImportError as e:
        raise AttributeError(
            f"tf.keras.datasets.{name}: tapeflow.datasets is not available ({e})") from None
    try:
        return getattr(mod, name)
    except AttributeError:
        raise AttributeError(f"tf.keras.datasets has no dataset {name!r}") from None
