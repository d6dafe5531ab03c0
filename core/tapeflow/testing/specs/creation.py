"""Conformance specs of the creation ops (``tapeflow.array``): ``fill``, ``zeros``,
``ones``, ``zeros_like``, ``ones_like``, ``range``, ``eye``, ``linspace``,
``one_hot``.

Each op gets a typical sample, a 0-d or size-0 one where it applies, and every dtype
its kernel declares (the ``dtype`` argument follows the case dtype). Error samples pin
the TensorFlow-style messages (``Requires delta != 0``, ``Requires num >= 0``...).
These ops have no gradient (``grad_order=0``).
"""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.testing.opinfo import OpSpec, Sample

from ._values import _err, _i32, _npd, _scalar_of, _vals


def _fill_samples(dtype, rng):
    v = _scalar_of(dtype)
    out = [Sample(((2, 3), v), {"dtype": dtype}, name="typical"),
           Sample(((), v), {"dtype": dtype}, name="scalar"),
           Sample(((0, 4), v), {"dtype": dtype}, name="empty")]
    if dtype is tf.int32:
        out.append(Sample(((2,), 7), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample(((2, 1), 2.5), name="inferred_float32"))
    return out


def _fill_ref(dims, value, dtype=None):
    if dtype is None:
        dtype = np.float32 if isinstance(value, float) else np.int32
    return np.full(dims, value, dtype=_npd(dtype))


def _const_samples(dtype, rng):
    return [Sample(((2, 3),), {"dtype": dtype}, name="typical"),
            Sample(((),), {"dtype": dtype}, name="scalar"),
            Sample(([0, 4],), {"dtype": dtype}, name="empty")]


def _like_samples(dtype, rng):
    out = [Sample((_vals(rng, (2, 3), dtype),), name="typical"),
           Sample((_vals(rng, (), dtype),), name="scalar"),
           Sample((_vals(rng, (0, 3), dtype),), name="empty")]
    if dtype is not tf.float64:
        out.append(Sample((_vals(rng, (2,), dtype),), {"dtype": tf.float64}, name="cast_dtype"))
    return out


def _like_ref(fill):
    def ref(x, dtype=None):
        return np.full(x.shape, fill, dtype=x.dtype if dtype is None else _npd(dtype))
    return ref


def _range_samples(dtype, rng):
    out = [Sample((0, 10, 3), {"dtype": dtype}, name="typical"),
           Sample((5, -2, -2), {"dtype": dtype}, name="negative_delta"),
           Sample((3, 3, 1), {"dtype": dtype}, name="empty"),
           Sample((7,), {"dtype": dtype}, name="limit_only")]
    if dtype.is_floating:
        out.append(Sample((0.5, 2.0, 0.25), {"dtype": dtype}, name="fractional"))
    if dtype is tf.int32:
        out.append(Sample((5,), name="inferred_int32"))
    if dtype is tf.float32:
        out.append(Sample((1, 2, 0.25), name="inferred_float32"))
    return out


def _range_ref(start, limit=None, delta=1, dtype=None):
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        dtype = np.float32 if any(isinstance(v, float) for v in (start, limit, delta)) \
            else np.int32
    return np.arange(start, limit, delta, dtype=_npd(dtype))


def _eye_samples(dtype, rng):
    return [Sample((3,), {"dtype": dtype}, name="square"),
            Sample((2, 4), {"dtype": dtype}, name="wide"),
            Sample((3, 2, [2]), {"dtype": dtype}, name="batch"),
            Sample((0,), {"dtype": dtype}, name="empty")]


def _eye_ref(num_rows, num_columns=None, batch_shape=None, dtype=tf.float32):
    e = np.eye(num_rows, num_columns, dtype=_npd(dtype))
    return np.broadcast_to(e, tuple(batch_shape or ()) + e.shape)


def _linspace_samples(dtype, rng):
    d = _npd(dtype)
    return [Sample((np.asarray(0.0, d), 1.0, 5), name="typical"),
            Sample((np.asarray(2.0, d), -1.0, 4), name="decreasing"),
            Sample((np.asarray(1.5, d), 3.0, 1), name="one"),
            Sample((np.asarray(0.0, d), 1.0, 0), name="empty")]


def _linspace_ref(start, stop, num):
    return np.linspace(start, stop, num, dtype=start.dtype)


def _one_hot_samples(dtype, rng):
    d = _npd(dtype)
    on, off = ((True, False) if d.kind == "b" else (2.5, -1.0) if d.kind == "f" else (3, 1))
    ind = _i32([0, 2, -1, 5, 1])
    return [Sample((ind, 3), {"dtype": dtype}, name="typical"),
            Sample((ind.reshape(5, 1), 4), {"dtype": dtype, "on_value": on, "off_value": off,
                                            "axis": 0}, name="axis0"),
            Sample((ind.reshape(1, 5).astype(np.int64), 3),
                   {"dtype": dtype, "axis": 1}, name="axis1_int64"),
            Sample((np.array(1, np.int32), 3), {"dtype": dtype}, name="scalar"),
            Sample((np.zeros((0,), np.int32), 3), {"dtype": dtype}, name="empty")]


def _one_hot_ref(indices, depth, on_value=None, off_value=None, axis=None, dtype=None):
    d = _npd(dtype or np.float32)
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on).astype(d), np.asarray(off).astype(d)).astype(d)
    if axis not in (None, -1):
        out = np.moveaxis(out, -1, axis)
    return out


SPECS = [
    OpSpec(name="fill", fn=tf.fill, ref=_fill_ref, op="Fill", samples=_fill_samples,
           grad_order=0,
           errors=[_err(((2,), [1, 2]), "fill value must be a scalar", name="non_scalar")]),
    OpSpec(name="zeros", fn=tf.zeros, ref=lambda shape, dtype: np.zeros(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0,
           errors=[_err(((2, None),), "shape must be", name="bad_shape")]),
    OpSpec(name="ones", fn=tf.ones, ref=lambda shape, dtype: np.ones(shape, _npd(dtype)),
           op="Fill", samples=_const_samples, grad_order=0),
    OpSpec(name="zeros_like", fn=tf.zeros_like, ref=_like_ref(0), op="ZerosLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="ones_like", fn=tf.ones_like, ref=_like_ref(1), op="OnesLike",
           samples=_like_samples, grad_order=0),
    OpSpec(name="range", fn=tf.range, ref=_range_ref, op="Range", samples=_range_samples,
           grad_order=0,
           errors=[_err((0, 5, 0), "Requires delta != 0", name="zero_delta"),
                   _err((5, 0, 1), "Requires start <= limit when delta > 0", name="direction")]),
    OpSpec(name="eye", fn=tf.eye, ref=_eye_ref, op="Eye", samples=_eye_samples, grad_order=0,
           errors=[_err((-1,), "non-negative", name="negative")]),
    OpSpec(name="linspace", fn=tf.linspace, ref=_linspace_ref, op="LinSpace",
           samples=_linspace_samples, grad_order=0,
           errors=[_err((0.0, 1.0, -1), "Requires num >= 0", name="negative_num")]),
    OpSpec(name="one_hot", fn=tf.one_hot, ref=_one_hot_ref, op="OneHot",
           samples=_one_hot_samples, grad_order=0,
           errors=[_err((_i32([0, 1]), 3), "axis 3 is out of range", {"axis": 3},
                        name="bad_axis")]),
]
