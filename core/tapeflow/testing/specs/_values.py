"""Value generators the array-family spec modules share (``creation``, ``array``,
``selection``, ``sorting``): random values of a dtype, Python scalars of its kind,
int32 index arrays and error samples with literal messages. A private module: not an
area of :data:`tapeflow.testing.specs.AREAS`, it holds no specs."""

from __future__ import annotations

import re

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.testing.opinfo import ErrorSample


#: the float dtypes, for specs of composite ops (no kernel declares their dtypes)
FLOATS = ("float16", "float32", "float64")
_F32 = np.float32


def _npd(dtype):
    return np.dtype(getattr(dtype, "np", dtype))


def _vals(rng, shape, dtype, lo=-3.0, hi=3.0):
    """Random values of ``dtype`` in ``[lo, hi]`` (bool: coin flips)."""
    d = _npd(dtype)
    if d.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if d.kind == "f":
        return np.asarray(rng.uniform(lo, hi, shape).astype(d))
    info = np.iinfo(d)
    a = rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, shape)
    return np.asarray(a.astype(d))


def _scalar_of(dtype):
    """A Python value of the kind of ``dtype``."""
    d = _npd(dtype)
    return True if d.kind == "b" else 1.5 if d.kind == "f" else 7


def _i32(*a):
    return np.array(a if len(a) != 1 or not isinstance(a[0], list) else a[0], np.int32)


def _err(args, match, kwargs=None, name="", error=InvalidArgumentError):
    """An ErrorSample whose message contains ``match`` literally (escaped: ErrorSample.match
    is a regular expression)."""
    return ErrorSample(tuple(args), dict(kwargs or {}), error=error, match=re.escape(match),
                       name=name)
