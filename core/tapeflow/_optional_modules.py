"""Imports the op modules (linalg, nn, random, ...) and re-exports their public names.

Kept separate so ``tapeflow/__init__`` stays a readable list of the public API.
"""

from __future__ import annotations

import importlib

__all__: list = []
_NAMES = ("linalg", "nn", "random", "creation")

for _name in _NAMES:
    try:
        _mod = importlib.import_module(f"tapeflow.{_name}")
    except ModuleNotFoundError as e:   # a module not written yet
        if e.name != f"tapeflow.{_name}":
            raise
        continue
    globals()[_name] = _mod
    for _n in getattr(_mod, "TOP_LEVEL", ()):
        globals()[_n] = getattr(_mod, _n)
        __all__.append(_n)
