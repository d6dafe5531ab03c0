"""Conformance specs of the reductions (``tapeflow.reductions``) against NumPy."""

from __future__ import annotations

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.testing.opinfo import ErrorSample, OpSpec, Sample

_F16 = {"float16": (1e-2, 1e-2)}


def _ax(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _values(rng, shape, dtype, kind="any"):
    """Random test data of ``dtype``; ``kind``: "any", "away0" (|x| in [0.5, 1.5]),
    "small" (integers that do not overflow in products)."""
    np_dt = dtype.np
    if dtype.is_bool:
        return rng.random(shape) > 0.5
    if dtype.is_floating:
        if kind == "away0":
            return (rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)).astype(np_dt)
        return rng.uniform(-2, 2, shape).astype(np_dt)
    lo, hi = (-2, 3) if kind == "small" else (-3, 4)
    if dtype.is_unsigned:
        lo = 0
    return rng.integers(lo, hi, shape).astype(np_dt)


#: (shape, kwargs, name) combinations shared by every reduction
_CASES = [
    ((), {}, "scalar"),
    ((), {"axis": []}, "scalar_noaxis"),
    ((5,), {}, "vector"),
    ((5,), {"axis": 0}, "vector_axis0"),
    ((5,), {"axis": -1, "keepdims": True}, "vector_keepdims"),
    ((3, 4), {}, "matrix"),
    ((3, 4), {"axis": 0}, "axis0"),
    ((3, 4), {"axis": 1, "keepdims": True}, "axis1_keepdims"),
    ((3, 4), {"axis": -1}, "axis_neg"),
    ((3, 4), {"axis": [0, 1]}, "both_axes"),
    ((3, 4), {"axis": None, "keepdims": True}, "all_keepdims"),
    ((2, 3, 4), {"axis": [0, 2]}, "3d_02"),
    ((2, 3, 4), {"axis": [-1, -3], "keepdims": True}, "3d_neg_keepdims"),
    ((2, 3, 4), {"axis": -2}, "3d_axis_neg2"),
    ((2, 3, 4), {"axis": []}, "3d_noaxis"),
    ((0, 3), {"axis": 1}, "empty_other_axis"),
]
#: the cases above that reduce one element into each result
_SINGLE = ("scalar", "scalar_noaxis", "3d_noaxis")
#: reductions over an axis of size 0 (sum -> 0, prod -> 1, mean -> nan)
_EMPTY_CASES = [
    ((0,), {}, "empty"),
    ((0, 3), {"axis": 0}, "empty_axis0"),
    ((2, 0), {"axis": -1, "keepdims": True}, "empty_keepdims"),
]


def _samples(kind="any", empty=True, empty_grad=True, single_grad=True):
    """``empty``: add reductions over size-0 axes; ``empty_grad``: finite differences
    work there (False when the result is NaN or -inf); ``single_grad``: the same for
    reductions of one element (False for the standard deviation, not differentiable
    at 0)."""
    def samples(dtype, rng):
        out = [Sample((_values(rng, shape, dtype, kind),), dict(kw), name=name,
                      grad_argnums=None if single_grad or name not in _SINGLE else ())
               for shape, kw, name in _CASES]
        if empty:
            out += [Sample((_values(rng, shape, dtype, kind),), dict(kw), name=name,
                           grad_argnums=None if empty_grad else ())
                    for shape, kw, name in _EMPTY_CASES]
        return out
    return samples


def _ref_sum(x, axis=None, keepdims=False):
    return np.sum(x, axis=_ax(axis), keepdims=keepdims, dtype=x.dtype)


def _ref_prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=_ax(axis), keepdims=keepdims, dtype=x.dtype)


def _count(shape, axis):
    if axis is None:
        return int(np.prod(shape))
    return int(np.prod([shape[a] for a in ([axis] if isinstance(axis, int) else axis)]))


def _ref_mean(x, axis=None, keepdims=False):
    s = np.sum(x.astype(np.float64), axis=_ax(axis), keepdims=keepdims)
    n = _count(x.shape, axis)
    if x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            return np.asarray(s / n).astype(x.dtype)
    if n == 0:
        return np.zeros_like(s).astype(x.dtype)
    return np.trunc(s / n).astype(x.dtype)     # integer mean truncates toward zero


def _ref_max(x, axis=None, keepdims=False):
    return np.max(x, axis=_ax(axis), keepdims=keepdims)


def _ref_min(x, axis=None, keepdims=False):
    return np.min(x, axis=_ax(axis), keepdims=keepdims)


def _ref_logsumexp(x, axis=None, keepdims=False):
    x64 = x.astype(np.float64)
    with np.errstate(divide="ignore"):
        if x.size == 0:
            return np.log(np.sum(np.exp(x64), axis=_ax(axis), keepdims=keepdims)).astype(x.dtype)
        m = np.max(x64, axis=_ax(axis), keepdims=True)
        out = np.log(np.sum(np.exp(x64 - m), axis=_ax(axis), keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=_ax(axis))
    return out.astype(x.dtype)


def _ref_enorm(x, axis=None, keepdims=False):
    x64 = x.astype(np.float64)
    return np.sqrt(np.sum(x64 * x64, axis=_ax(axis), keepdims=keepdims)).astype(x.dtype)


def _ref_variance(x, axis=None, keepdims=False):
    return np.var(x.astype(np.float64), axis=_ax(axis), keepdims=keepdims).astype(x.dtype)


def _ref_std(x, axis=None, keepdims=False):
    return np.std(x.astype(np.float64), axis=_ax(axis), keepdims=keepdims).astype(x.dtype)


def _ref_any(x, axis=None, keepdims=False):
    return np.any(x, axis=_ax(axis), keepdims=keepdims)


def _ref_all(x, axis=None, keepdims=False):
    return np.all(x, axis=_ax(axis), keepdims=keepdims)


def _ref_count_nonzero(x, axis=None, keepdims=False):
    return np.asarray(np.count_nonzero(x, axis=_ax(axis), keepdims=keepdims), dtype=np.int64)


def _axis_errors(np_dtype=np.float32):
    x = np.ones((2, 3), np_dtype)
    return [
        ErrorSample((x,), {"axis": 2}, InvalidArgumentError, "out of range", "axis_too_big"),
        ErrorSample((x,), {"axis": -3}, InvalidArgumentError, "out of range", "axis_too_small"),
        ErrorSample((np.asarray(x[0, 0]),), {"axis": 0}, InvalidArgumentError, "out of range",
                    "axis_of_scalar"),
    ]


def _empty_errors(what):
    x = np.zeros((0, 3), np.float32)
    return [ErrorSample((x,), {"axis": 0}, InvalidArgumentError, "zero elements",
                        f"{what}_of_empty")]


def _arg_samples(dtype, rng):
    out = []
    for shape, kw, name in [((5,), {}, "vector_default_axis"), ((5,), {"axis": -1}, "vector"),
                            ((3, 4), {}, "matrix_default_axis"), ((3, 4), {"axis": 1}, "axis1"),
                            ((3, 4), {"axis": -2}, "axis_neg"),
                            ((2, 3, 4), {"axis": 1}, "3d"),
                            ((0, 3), {"axis": 1}, "empty_other_axis")]:
        x = _values(rng, shape, dtype)
        if x.size and dtype.is_integer:   # unique values: no ties to disagree on
            x = rng.permutation(np.arange(x.size)).reshape(shape).astype(dtype.np)
        out.append(Sample((x,), kw, name=name))
    x = rng.permutation(np.arange(12)).reshape(3, 4).astype(dtype.np)
    out.append(Sample((x,), {"axis": 1, "output_type": tf.int32},
                      ref_kwargs={"axis": 1, "output_type": np.int32}, name="int32_output"))
    tie = np.zeros((2, 3), dtype.np)
    out.append(Sample((tie,), {"axis": 1}, name="ties_first_index"))
    return out


def _ref_arg(npfn):
    def ref(x, axis=None, output_type=np.int64):
        return np.asarray(npfn(x, axis=0 if axis is None else axis), dtype=output_type)
    return ref


def _arg_errors():
    x = np.ones((2, 3), np.float32)
    return [ErrorSample((x,), {"axis": 2}, InvalidArgumentError, "out of range", "axis"),
            ErrorSample((np.zeros((0, 3), np.float32),), {"axis": 0}, InvalidArgumentError,
                        "zero elements", "empty")]


SPECS = [
    OpSpec("reduce_sum", tf.reduce_sum, _ref_sum, _samples(), op="Sum",
           errors=_axis_errors(), tol=_F16),
    OpSpec("reduce_mean", tf.reduce_mean, _ref_mean, _samples(empty_grad=False), op="Mean",
           errors=_axis_errors(), tol=_F16),
    OpSpec("reduce_max", tf.reduce_max, _ref_max, _samples(empty=False), op="Max",
           errors=_axis_errors() + _empty_errors("max")),
    OpSpec("reduce_min", tf.reduce_min, _ref_min, _samples(empty=False), op="Min",
           errors=_axis_errors() + _empty_errors("min")),
    OpSpec("reduce_prod", tf.reduce_prod, _ref_prod, _samples("away0"), op="Prod",
           errors=_axis_errors(), tol=_F16),
    OpSpec("reduce_logsumexp", tf.reduce_logsumexp, _ref_logsumexp, _samples(empty_grad=False),
           op="ReduceLogSumExp", errors=_axis_errors(), tol=_F16),
    OpSpec("math.reduce_euclidean_norm", tf.math.reduce_euclidean_norm, _ref_enorm,
           _samples("away0"), op="EuclideanNorm", errors=_axis_errors(), tol=_F16),
    OpSpec("math.reduce_variance", tf.math.reduce_variance, _ref_variance,
           _samples(empty=False), op="Mean", dtypes=("float16", "float32", "float64"),
           errors=_axis_errors(), tol=_F16),
    OpSpec("math.reduce_std", tf.math.reduce_std, _ref_std,
           _samples(empty=False, single_grad=False), op="Mean",
           dtypes=("float16", "float32", "float64"), errors=_axis_errors(), tol=_F16),
    OpSpec("reduce_any", tf.reduce_any, _ref_any, _samples(), op="Any", grad_order=0,
           errors=_axis_errors(np.bool_)),
    OpSpec("reduce_all", tf.reduce_all, _ref_all, _samples(), op="All", grad_order=0,
           errors=_axis_errors(np.bool_)),
    OpSpec("argmax", tf.argmax, _ref_arg(np.argmax), _arg_samples, op="ArgMax", grad_order=0,
           errors=_arg_errors()),
    OpSpec("argmin", tf.argmin, _ref_arg(np.argmin), _arg_samples, op="ArgMin", grad_order=0,
           errors=_arg_errors()),
    OpSpec("math.count_nonzero", tf.math.count_nonzero, _ref_count_nonzero, _samples(),
           op="Cast", dtypes=tuple(d.name for d in tf.dtypes.ALL_DTYPES), grad_order=0,
           errors=_axis_errors()),
]
