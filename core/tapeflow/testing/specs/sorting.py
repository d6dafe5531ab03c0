"""Conformance specs of the sorting, scan and search ops (``tapeflow.array``):
``searchsorted``, ``unique_all``, ``nonzero``, ``cumsum``, ``cumprod``, ``argsort``
and ``sort``.

Sort samples hold distinct values (so the order, and ``argsort``'s indices, are
unique); ``searchsorted`` samples are sorted in the case dtype; scans run along every
axis, exclusive and reversed; every op gets a size-0 sample.
"""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.testing.opinfo import OpSpec, Sample

from ._values import _vals


def _scan_samples(dtype, rng):
    return [Sample((_vals(rng, (5,), dtype),), name="vector"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": 1}, name="rows"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": 0, "exclusive": True}, name="exclusive"),
            Sample((_vals(rng, (2, 3, 2), dtype),), {"axis": 1, "reverse": True},
                   name="reverse"),
            Sample((_vals(rng, (3, 4), dtype),), {"axis": -1, "exclusive": True,
                                                  "reverse": True}, name="both"),
            Sample((_vals(rng, (0, 3), dtype),), {"axis": 0}, name="empty")]


def _ref_scan(fn, fill):
    def ref(x, axis=0, exclusive=False, reverse=False):
        axis %= x.ndim
        if reverse:
            x = np.flip(x, axis)
        out = fn(x, axis=axis, dtype=x.dtype)
        if exclusive and out.shape[axis]:
            first = np.full(out.shape[:axis] + (1,) + out.shape[axis + 1:], fill, out.dtype)
            out = np.concatenate([first, np.delete(out, -1, axis=axis)], axis=axis)
        return np.flip(out, axis) if reverse else out
    return ref


def _sort_samples(dtype, rng):
    def distinct(shape):
        n = int(np.prod(shape))
        vals = rng.permutation(n).astype(np.float64) - (0 if dtype.is_unsigned else n // 2)
        return vals.reshape(shape).astype(dtype.np)
    return [Sample((distinct((6,)),), name="vector"),
            Sample((distinct((3, 4)),), {"axis": 0}, name="columns"),
            Sample((distinct((2, 3, 4)),), {"direction": "DESCENDING"}, name="descending"),
            Sample((distinct((0, 3)),), name="empty")]


def _ref_argsort(x, axis=-1, direction="ASCENDING"):
    if direction == "DESCENDING":
        return np.argsort(-x.astype(np.float64), axis=axis, kind="stable")
    return np.argsort(x, axis=axis, kind="stable")


def _ref_sort(x, axis=-1, direction="ASCENDING"):
    return np.take_along_axis(x, _ref_argsort(x, axis, direction), axis)


def _searchsorted_samples(dtype, rng):
    # sorted in the case dtype, after the cast: sorting first and casting -5..-1 to an
    # unsigned dtype wrapped them to its top and left the sequence unsorted, where
    # searchsorted is undefined (NumPy's and CuPy's binary searches then differ)
    a = np.sort(rng.integers(-5, 6, 7).astype(dtype.np))
    v = rng.integers(-7, 8, (2, 3)).astype(dtype.np)
    return [Sample((a, v), name="left"), Sample((a, v), {"side": "right"}, name="right"),
            Sample((a[:0], v), name="empty_sequence")]


def _unique_samples(dtype, rng):
    x = rng.integers(0, 4, (3, 4)).astype(dtype.np)
    out = [Sample((x,), name="typical"), Sample((x[:0],), name="empty")]
    if dtype.np.kind == "f":
        y = x.copy()
        y[0, :2] = np.nan
        out.append(Sample((y,), name="nans_distinct"))
    return out


def _ref_unique(x):
    vals, idx, inv, counts = np.unique(x.reshape(-1), return_index=True, return_inverse=True,
                                       return_counts=True, equal_nan=False)
    return vals, idx.astype(np.int64), inv.reshape(x.shape).astype(np.int64), \
        counts.astype(np.int64)


def _nonzero_samples(dtype, rng):
    x = (rng.integers(0, 3, (3, 4)) * (rng.random((3, 4)) > 0.4)).astype(dtype.np)
    return [Sample((x,), name="matrix"), Sample((x[0],), name="vector"),
            Sample((np.zeros((2, 0), dtype.np),), name="empty")]


SPECS = [
    OpSpec(name="searchsorted", fn=tf.searchsorted,
           ref=lambda a, v, side="left": np.searchsorted(a, v, side=side).astype(np.int64),
           op="SearchSorted", samples=_searchsorted_samples, grad_order=0, check_dtype=False),
    OpSpec(name="unique_all", fn=tf.unique_all, ref=_ref_unique, op="UniqueAll",
           samples=_unique_samples, grad_order=0, check_dtype=False),
    OpSpec(name="nonzero", fn=tf.nonzero, ref=lambda x: np.argwhere(x).astype(np.int64),
           op="NonZero", samples=_nonzero_samples, grad_order=0, check_dtype=False),
    OpSpec(name="cumsum", fn=tf.cumsum, ref=_ref_scan(np.cumsum, 0), op="Cumsum",
           samples=_scan_samples),
    OpSpec(name="cumprod", fn=tf.cumprod, ref=_ref_scan(np.cumprod, 1), op="Cumprod",
           samples=_scan_samples),
    OpSpec(name="argsort", fn=tf.argsort, ref=_ref_argsort, op="ArgSort", samples=_sort_samples,
           grad_order=0, check_dtype=False),
    OpSpec(name="sort", fn=tf.sort, ref=_ref_sort, op="ArgSort", samples=_sort_samples),
]
