"""Conformance specs, one module per area of ops (see ``tapeflow.testing.opinfo``)."""

from __future__ import annotations

import importlib

#: the spec modules, by area of ops (the array family is split: creation, shapes
#: (``array``), selection and gather/scatter, sorting and scans)
AREAS = ("math", "reductions", "linalg", "creation", "array", "selection", "sorting", "nn",
         "random", "complex")


def all_specs():
    """Every OpSpec of every area module that exists."""
    out = []
    for area in AREAS:
        try:
            mod = importlib.import_module(f"tapeflow.testing.specs.{area}")
        except ModuleNotFoundError as e:
            if e.name != f"tapeflow.testing.specs.{area}":
                raise
            continue
        out.extend(mod.SPECS)
    return out
