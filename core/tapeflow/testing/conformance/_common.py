"""What every part of the conformance suite shares: :class:`SkipCase`, the lazy
``tapeflow`` import, deterministic seeds, dtype kinds (bfloat16 counted as a float),
test-id globs and the formatting of failure messages."""

from __future__ import annotations

import functools
import re
import zlib

import ml_dtypes
import numpy as np


class SkipCase(Exception):
    """Raised by a check that cannot run here; the pytest layer turns it into a skip."""


def _tf():
    """``tapeflow`` itself, imported when a check first runs (pytest loads
    :mod:`tapeflow.testing.pytest_plugin` at start-up)."""
    import tapeflow
    return tapeflow


def _seed(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _kind(np_dtype):
    """NumPy's dtype kind, with ml_dtypes' bfloat16 (kind "V") a float ("f")."""
    return "f" if np_dtype == _BF16 else np_dtype.kind


def _bf16_to_f32(a):
    """A bfloat16 array as float32 (exactly), for references: NumPy has bfloat16 loops
    for elementwise ufuncs only, and reductions there accumulate in bfloat16."""
    return a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == _BF16 else a


@functools.lru_cache(maxsize=512)
def _glob(pattern):
    """Glob with ``*`` and ``?`` only: brackets are literal, as in test ids."""
    rx = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.compile(rx)


def _describe_args(args, kwargs=None):
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{'bool' if a.dtype == np.bool_ else a.dtype.name}{list(a.shape)}")
        else:
            r = repr(a)
            parts.append(r if len(r) <= 40 else r[:37] + "...")
    s = "(" + ", ".join(parts) + ")"
    if kwargs:
        s += " " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return s


def _fmt(a):
    s = np.array2string(np.asarray(a), precision=6, threshold=40, edgeitems=3, max_line_width=100)
    s = s.replace("\n", "\n              ")
    return s if len(s) <= 800 else s[:800] + " ..."


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]
