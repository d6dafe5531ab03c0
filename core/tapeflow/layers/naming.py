"""Names of layers, losses, metrics and initializers: Keras' snake_case of a class name.

>>> from tapeflow.layers.naming import snake_case
>>> snake_case("GlorotUniform"), snake_case("BatchNormalization"), snake_case("MeanSquaredError")
('glorot_uniform', 'batch_normalization', 'mean_squared_error')
"""

from __future__ import annotations

import re

__all__ = ["snake_case"]


def snake_case(name: str) -> str:
    """``"MeanSquaredError"`` -> ``"mean_squared_error"`` (a leading underscore becomes
    ``private``, as in Keras)."""
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()
    return "private" + s if s.startswith("_") else s
