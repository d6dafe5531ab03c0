"""Names of layers, losses, metrics, optimizers and initializers: Keras' snake_case of a
class name, and the object a Keras config dict describes (the ``get`` functions).

>>> from tapeflow.layers.naming import snake_case
>>> snake_case("GlorotUniform"), snake_case("BatchNormalization"), snake_case("MeanSquaredError")
('glorot_uniform', 'batch_normalization', 'mean_squared_error')
"""

from __future__ import annotations

import re

from ..errors import InvalidArgumentError

__all__ = ["snake_case", "from_config"]


def snake_case(name: str) -> str:
    """``"MeanSquaredError"`` -> ``"mean_squared_error"`` (a leading underscore becomes
    ``private``, as in Keras)."""
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()
    return "private" + s if s.startswith("_") else s


def from_config(where, identifier, lookup):
    """The object a Keras config dict ``{"class_name": ..., "config": {...}}`` describes:
    ``lookup(name, what)`` finds the class (and raises the caller's own error for an
    unknown name), which is called with the config; ``where`` names the function in
    errors (``"losses.get"``)."""
    name, config = identifier.get("class_name"), identifier.get("config", {})
    if not isinstance(name, str) or not isinstance(config, dict):
        raise InvalidArgumentError(
            f"{where}: a config dict needs 'class_name' (a str) and 'config' (a dict of "
            f"constructor arguments), got {identifier!r}")
    cls = lookup(name, f"class_name {name!r}")
    try:
        return cls(**config)
    except TypeError as e:
        raise InvalidArgumentError(
            f"{where}: config {config!r} does not fit {cls.__name__}: {e}") from None
