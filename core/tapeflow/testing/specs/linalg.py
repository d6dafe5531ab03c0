"""Conformance specs of the reductions (``tapeflow.reductions``: ``reduce_sum``,
``reduce_mean``, ``reduce_logsumexp``, ``argmax``...) and of ``tapeflow.linalg``
(``matmul``, ``einsum``, ``tensordot``, ``norm``, ``inv``, ``solve``, the
decompositions), against NumPy: the ops that contract axes.

Reductions run over every axis, several axes, none (``axis=None``) and negative axes,
with ``keepdims`` both ways and size-0 inputs; the linear algebra ops get batches of
well-conditioned matrices, and their decompositions are checked by reconstruction.
"""

from __future__ import annotations

import re

import numpy as np

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, UnimplementedError

from . import ErrorSample, OpSpec, Sample


# --- reductions ---------------------------------------------------------------------------

_F16 = {"float16": (1e-2, 1e-2)}


def _ax(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _reduction_values(rng, shape, dtype, kind="any"):
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
        out = [Sample((_reduction_values(rng, shape, dtype, kind),), dict(kw), name=name,
                      grad_argnums=None if single_grad or name not in _SINGLE else ())
               for shape, kw, name in _CASES]
        if empty:
            out += [Sample((_reduction_values(rng, shape, dtype, kind),), dict(kw), name=name,
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
        x = _reduction_values(rng, shape, dtype)
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


_REDUCTION_SPECS = [
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


# --- linear algebra -----------------------------------------------------------------------

_TOL = {"float16": (2e-2, 2e-2), "float32": (1e-4, 1e-5)}


def _values(rng, shape, dtype):
    if dtype.is_floating:
        return rng.uniform(-1, 1, shape).astype(dtype.np)
    lo = 0 if dtype.is_unsigned else -3
    return rng.integers(lo, 4, shape).astype(dtype.np)


def _well_conditioned(rng, shape, dtype):
    """Random square matrices (a batch of them) far from singular."""
    n = shape[-1]
    return (rng.uniform(-1, 1, shape) + 3 * np.eye(n)).astype(dtype.np)


def _exact(fn):
    """A float64 NumPy reference cast to the input dtype (exact for integers)."""
    def ref(*args, **kwargs):
        dt = next(a.dtype for a in args if isinstance(a, np.ndarray))
        arrs = [a.astype(np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a
                for a in args]
        out = fn(*arrs, **kwargs)
        if isinstance(out, tuple):
            return tuple(np.asarray(o).astype(dt) for o in out)
        return np.asarray(out).astype(dt)
    return ref


# --- matmul ---------------------------------------------------------------------------

def _ref_matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False):
    if transpose_a or adjoint_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b or adjoint_b:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def _matmul_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [
        Sample((v(1, 1), v(1, 1)), name="1x1"),
        Sample((v(2, 3), v(3, 4)), name="2d"),
        Sample((v(3, 2), v(3, 4)), {"transpose_a": True}, name="transpose_a"),
        Sample((v(2, 3), v(4, 3)), {"transpose_b": True}, name="transpose_b"),
        Sample((v(3, 2), v(4, 3)), {"transpose_a": True, "transpose_b": True}, name="both_t"),
        Sample((v(3, 2), v(4, 3)), {"adjoint_a": True, "adjoint_b": True}, name="adjoint"),
        Sample((v(5, 2, 3), v(5, 3, 4)), name="batched"),
        Sample((v(5, 3, 2), v(5, 4, 3)), {"transpose_a": True, "transpose_b": True},
               name="batched_both_t"),
        Sample((v(5, 2, 3), v(3, 4)), name="broadcast_b"),
        Sample((v(2, 3), v(5, 3, 4)), name="broadcast_a"),
        Sample((v(2, 1, 2, 3), v(3, 3, 4)), name="broadcast_both"),
        Sample((v(2, 1, 3, 2), v(3, 4, 3)), {"transpose_a": True, "transpose_b": True},
               name="broadcast_both_t"),
        Sample((v(0, 3), v(3, 4)), name="empty_rows"),
        Sample((v(2, 0), v(0, 3)), name="empty_inner"),
    ]


_MATMUL_ERRORS = [
    ErrorSample((np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)), {},
                InvalidArgumentError, re.escape("incompatible: In[0]: [2,3], In[1]: [4,5]"),
                "inner_dim"),
    ErrorSample((np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)),
                {"transpose_b": True, "transpose_a": True}, InvalidArgumentError,
                "incompatible", "inner_dim_transposed"),
    ErrorSample((np.ones((3,), np.float32), np.ones((3, 2), np.float32)), {},
                InvalidArgumentError, "rank >= 2", "vector"),
    ErrorSample((np.ones((2, 2, 3), np.float32), np.ones((3, 3, 4), np.float32)), {},
                InvalidArgumentError, "batch dimensions", "batch"),
]


# --- einsum / tensordot / trace / matrix_transpose --------------------------------------

_EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)], "matmul"),
    ("ij,jk", [(2, 3), (3, 4)], "implicit_output"),
    ("ba", [(2, 3)], "implicit_transpose"),
    ("ij->ji", [(2, 3)], "transpose"),
    ("ii->i", [(3, 3)], "diagonal"),
    ("ii", [(3, 3)], "trace"),
    ("ij->", [(2, 3)], "sum_all"),
    ("ij,j->j", [(2, 3), (3,)], "summed_in_one_operand"),
    ("i,i->", [(4,), (4,)], "dot"),
    ("i,j->ij", [(2,), (3,)], "outer"),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)], "batch_matmul"),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 4)], "ellipsis_broadcast"),
    ("ij,ij->ij", [(1, 3), (2, 3)], "size1_broadcast"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], "three_operands"),
    (" i j , j k -> i k ", [(2, 3), (3, 4)], "spaces"),
    ("ij,jk->ik", [(0, 3), (3, 2)], "empty"),
]


def _einsum_samples(dtype, rng):
    return [Sample((eq,) + tuple(_values(rng, s, dtype) for s in shapes), name=name)
            for eq, shapes, name in _EINSUM_CASES]


def _ref_einsum(eq, *ops):
    return np.einsum(eq, *ops)


_EINSUM_ERRORS = [
    ErrorSample(("ij,jk->ik", np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)), {},
                InvalidArgumentError, "has size 3 in one operand and 4", "size_mismatch"),
    ErrorSample(("ij,jk->ik", np.ones((2, 3), np.float32)), {}, InvalidArgumentError,
                re.escape("2 operand subscript(s) for 1 operand(s)"), "operand_count"),
    ErrorSample(("ijk->i", np.ones((2, 3), np.float32)), {}, InvalidArgumentError,
                "rank 2", "rank"),
    ErrorSample(("ij->iz", np.ones((2, 3), np.float32)), {}, InvalidArgumentError,
                "appear in no input", "output_label"),
]


def _tensordot_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [
        Sample((v(2, 3), v(3, 4), 1), name="axes1"),
        Sample((v(2, 3, 4), v(3, 4, 5), 2), name="axes2"),
        Sample((v(2, 3), v(4,), 0), name="outer"),
        Sample((v(2, 3, 4), v(4, 3, 5), [[1, 2], [1, 0]]), name="axis_lists"),
        Sample((v(2, 3), v(3, 4), [1, 0]), name="axis_ints"),
        Sample((v(2, 3, 4), v(4, 5), [[-1], [-2]]), name="negative_axes"),
        Sample((v(3,), v(3,), 1), name="dot"),
    ]


def _ref_tensordot(a, b, axes):
    return np.tensordot(a, b, axes)


_TENSORDOT_ERRORS = [
    ErrorSample((np.ones((2, 3), np.float32), np.ones((4, 5), np.float32), 1), {},
                InvalidArgumentError, "size-incompatible", "size"),
    ErrorSample((np.ones((2, 3), np.float32), np.ones((3, 5), np.float32), 3), {},
                InvalidArgumentError, "axes=3", "too_many_axes"),
]


def _square_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [Sample((v(3, 3),), name="matrix"), Sample((v(2, 4, 4),), name="batch"),
            Sample((v(1, 1),), name="1x1"), Sample((v(2, 0, 0),), name="empty")]


def _transpose_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [Sample((v(2, 3),), name="matrix"), Sample((v(2, 3, 4),), name="batch"),
            Sample((v(0, 3),), name="empty")]


# --- norm -----------------------------------------------------------------------------

def _ref_norm(x, ord="euclidean", axis=None, keepdims=False):
    if isinstance(axis, (list, tuple)) and len(axis) == 2:
        o = {"euclidean": "fro"}.get(ord, ord)
        return np.linalg.norm(x, ord=o, axis=tuple(axis), keepdims=keepdims)
    if axis is None:
        out = np.linalg.norm(x.reshape(-1), ord=None if ord in ("euclidean", "fro") else ord)
        return np.reshape(out, (1,) * x.ndim) if keepdims else out
    return np.linalg.norm(x, ord=None if ord in ("euclidean", "fro") else ord, axis=axis,
                          keepdims=keepdims)


def _norm_samples(dtype, rng):
    v = lambda *s: (_values(rng, s, dtype) + 0.1).astype(dtype.np)  # noqa: E731  (no zeros)
    return [
        Sample((v(4),), name="vector"),
        Sample((v(3, 4),), name="all_elements"),
        Sample((v(3, 4),), {"keepdims": True}, name="all_keepdims"),
        Sample((v(3, 4),), {"axis": 0}, name="axis0"),
        Sample((v(3, 4),), {"axis": -1, "keepdims": True}, name="axis_neg_keepdims"),
        Sample((v(5),), {"ord": 1}, name="ord1"),
        Sample((v(5),), {"ord": 2}, name="ord2"),
        Sample((v(5),), {"ord": np.inf}, name="ord_inf"),
        Sample((v(2, 5),), {"ord": 3, "axis": 1}, name="ord3"),
        Sample((v(3, 4),), {"ord": "fro", "axis": [0, 1]}, name="fro"),
        Sample((v(3, 4),), {"ord": "euclidean", "axis": [1, 0]}, name="matrix_euclidean"),
        Sample((v(2, 3, 4),), {"ord": 1, "axis": [-2, -1]}, name="matrix_ord1"),
        Sample((v(2, 3, 4),), {"ord": np.inf, "axis": (1, 2), "keepdims": True},
               name="matrix_inf_keepdims"),
        Sample((v(3, 2, 4),), {"ord": 1, "axis": [2, 0]}, name="matrix_ord1_swapped"),
    ]


_NORM_ERRORS = [
    ErrorSample((np.ones((2, 3), np.float32),), {"ord": "nuc"}, InvalidArgumentError,
                "not supported", "bad_ord"),
    ErrorSample((np.ones((2, 3, 4), np.float32),), {"axis": [0, 1, 2]}, InvalidArgumentError,
                "pair of ints", "three_axes"),
    ErrorSample((np.ones((2, 3), np.float32),), {"axis": 2}, InvalidArgumentError,
                "out of range", "axis"),
    ErrorSample((np.ones((2, 3), np.float32),), {"ord": 2, "axis": [0, 1]}, UnimplementedError,
                "not implemented", "matrix_2_norm"),
]


# --- inverse, solve, determinants -------------------------------------------------------

def _inv_samples(dtype, rng):
    w = lambda *s: _well_conditioned(rng, s, dtype)   # noqa: E731
    return [Sample((w(3, 3),), name="matrix"), Sample((w(2, 4, 4),), name="batch"),
            Sample((w(1, 1),), name="1x1"), Sample((w(3, 3),), {"adjoint": True}, name="adjoint"),
            Sample((np.zeros((0, 0), dtype.np),), name="empty")]


def _ref_inv(x, adjoint=False):
    return np.linalg.inv(np.swapaxes(x, -1, -2) if adjoint else x)


_SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)

_INV_ERRORS = [
    ErrorSample((_SINGULAR,), {}, InvalidArgumentError, "not invertible", "singular"),
    ErrorSample((np.zeros((2, 3, 3), np.float32),), {}, InvalidArgumentError, "not invertible",
                "singular_batch"),
    ErrorSample((np.ones((2, 3), np.float32),), {}, InvalidArgumentError, "square", "not_square"),
]


def _solve_samples(dtype, rng):
    w = lambda *s: _well_conditioned(rng, s, dtype)   # noqa: E731
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [
        Sample((w(3, 3), v(3, 2)), name="matrix"),
        Sample((w(3, 3), v(3, 1)), {"adjoint": True}, name="adjoint"),
        Sample((w(2, 3, 3), v(2, 3, 4)), name="batch"),
        Sample((w(2, 3, 3), v(3, 4)), name="broadcast_rhs"),
        Sample((w(1, 1), v(1, 1)), name="1x1"),
    ]


def _ref_solve(a, b, adjoint=False):
    return np.linalg.solve(np.swapaxes(a, -1, -2) if adjoint else a, b)


_SOLVE_ERRORS = [
    ErrorSample((_SINGULAR, np.ones((2, 1), np.float32)), {}, InvalidArgumentError,
                "not invertible", "singular"),
    ErrorSample((np.eye(2, dtype=np.float32), np.ones((3, 1), np.float32)), {},
                InvalidArgumentError, re.escape("rhs must have shape [..., 2, K]"), "rhs_shape"),
    ErrorSample((np.ones((2, 3), np.float32), np.ones((2, 1), np.float32)), {},
                InvalidArgumentError, "square", "not_square"),
]


def _det_samples(dtype, rng):
    w = lambda *s: _well_conditioned(rng, s, dtype)   # noqa: E731
    return [Sample((w(3, 3),), name="matrix"), Sample((w(2, 4, 4),), name="batch"),
            Sample((w(1, 1),), name="1x1"), Sample((-w(2, 2),), name="negative")]


def _spd_samples(dtype, rng):
    out = []
    for shape, name in (((3, 3), "matrix"), ((2, 4, 4), "batch")):
        m = rng.uniform(-1, 1, shape)
        spd = m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])
        out.append(Sample((spd.astype(dtype.np),), name=name))
    return out


def _sym(x):
    """Symmetric decompositions read one triangle; the specs feed them (x + x^T) / 2 so
    that finite differences (which perturb every entry) see the symmetric gradient."""
    return (x + tf.linalg.matrix_transpose(x)) * 0.5


def _sym_np(x):
    return (x + np.swapaxes(x, -1, -2)) * 0.5


def _eigh_reconstruct(x):
    w, v = tf.linalg.eigh(_sym(x))
    return tf.matmul(v * w[..., None, :], v, transpose_b=True)


def _qr_reconstruct(x):
    q, r = tf.linalg.qr(x)
    return tf.matmul(q, r)


def _rect_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [Sample((v(4, 3),), name="tall"), Sample((v(2, 3, 5),), name="wide_batch"),
            Sample((v(3, 3),), name="square")]


def _ref_set_diag(x, d):
    out = np.array(x, copy=True)
    k = min(x.shape[-2:])
    out[..., np.arange(k), np.arange(k)] = d
    return out


def _ref_band_part(x, lo, hi):
    i, j = np.indices(x.shape[-2:])
    keep = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
    return np.where(keep, x, np.zeros((), x.dtype))


def _ref_tensor_diag(v):
    n = v.size
    return (np.eye(n, dtype=v.dtype) * v.reshape(-1)).reshape(v.shape + v.shape)


def _set_diag_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [Sample((v(3, 3), v(3)), name="square"), Sample((v(4, 3), v(3)), name="tall"),
            Sample((v(2, 2, 4), v(2, 2)), name="wide_batch")]


def _vector_samples(dtype, rng):
    v = lambda *s: _values(rng, s, dtype)   # noqa: E731
    return [Sample((v(3),), name="vector"), Sample((v(2, 4),), name="batch"),
            Sample((v(0),), name="empty")]


_DIAG_ERRORS = [
    ErrorSample((np.ones((3,), np.float32),), {}, InvalidArgumentError, "needs a matrix",
                "vector"),
    ErrorSample((np.ones((3, 3), np.float32),), {"k": 1}, UnimplementedError, "k=0",
                "off_diagonal"),
]


_SET_DIAG_ERRORS = [
    ErrorSample((np.ones((3, 3), np.float32), np.ones(2, np.float32)), {}, InvalidArgumentError,
                "diagonal shape", "bad_diag"),
]


def _ref_logdet(x):
    return np.linalg.slogdet(x)[1]


_LINALG_TOL = {"float32": (2e-4, 2e-5)}

_LINALG_SPECS = [
    OpSpec("matmul", tf.matmul, _exact(_ref_matmul), _matmul_samples, op="MatMul",
           errors=_MATMUL_ERRORS, tol=_TOL),
    OpSpec("linalg.matmul", tf.linalg.matmul, _exact(_ref_matmul), _matmul_samples, op="MatMul",
           dtypes=("float32", "float64"), tol=_TOL),
    OpSpec("einsum", tf.einsum, _exact(_ref_einsum), _einsum_samples, op="Einsum",
           errors=_EINSUM_ERRORS, tol=_TOL),
    OpSpec("tensordot", tf.tensordot, _exact(_ref_tensordot), _tensordot_samples, op="Einsum",
           errors=_TENSORDOT_ERRORS, tol=_TOL),
    OpSpec("linalg.trace", tf.linalg.trace, _exact(lambda x: np.trace(x, axis1=-2, axis2=-1)),
           _square_samples, op="Einsum", tol=_TOL),
    OpSpec("linalg.diag_part", tf.linalg.diag_part,
           lambda x: np.diagonal(x, axis1=-2, axis2=-1), _rect_samples, op="Einsum",
           errors=_DIAG_ERRORS),
    OpSpec("linalg.diag", tf.linalg.diag, lambda v: v[..., None, :] * np.eye(v.shape[-1],
                                                                             dtype=v.dtype),
           _vector_samples, op="Mul"),
    OpSpec("linalg.set_diag", tf.linalg.set_diag, _ref_set_diag, _set_diag_samples,
           op="SelectV2", errors=_SET_DIAG_ERRORS),
    # issue 47: band_part, tensor_diag, tensor_diag_part (composites)
    OpSpec("linalg.band_part", tf.linalg.band_part, _ref_band_part, lambda d, r: [
        Sample((x,) + b, name=f"{s.name}_{b[0]}_{b[1]}") for s in _rect_samples(d, r)
        for x in s.args[:1] for b in ((0, 0), (1, -1), (-1, 0))], op="SelectV2"),
    OpSpec("linalg.tensor_diag", tf.linalg.tensor_diag, _ref_tensor_diag, lambda d, r: [
        Sample((r.uniform(-2, 2, s).astype(np.dtype(d.np)),)) for s in ((3,), (2, 2))],
        op="Mul"),
    OpSpec("linalg.tensor_diag_part", tf.linalg.tensor_diag_part,
           lambda x: np.diagonal(x.reshape(6, 6)).reshape(2, 3), lambda d, r: [
               Sample((r.uniform(-2, 2, (2, 3, 2, 3)).astype(np.dtype(d.np)),))], op="Einsum"),
    OpSpec("linalg.matrix_transpose", tf.linalg.matrix_transpose,
           lambda x: np.swapaxes(x, -1, -2), _transpose_samples, op="Einsum"),
    OpSpec("norm", tf.norm, _exact(_ref_norm), _norm_samples, op="EuclideanNorm",
           errors=_NORM_ERRORS, tol=_TOL),
    OpSpec("linalg.inv", tf.linalg.inv, _exact(_ref_inv), _inv_samples, op="MatrixInverse",
           errors=_INV_ERRORS, tol=_LINALG_TOL),
    OpSpec("linalg.solve", tf.linalg.solve, _exact(_ref_solve), _solve_samples,
           op="MatrixSolve", errors=_SOLVE_ERRORS, tol=_LINALG_TOL),
    OpSpec("linalg.det", tf.linalg.det, _exact(np.linalg.det), _det_samples,
           op="MatrixDeterminant", tol=_LINALG_TOL),
    OpSpec("linalg.slogdet", tf.linalg.slogdet, _exact(lambda x: tuple(np.linalg.slogdet(x))),
           _det_samples, op="LogMatrixDeterminant", tol=_LINALG_TOL),
    OpSpec("linalg.logdet", tf.linalg.logdet, _exact(_ref_logdet), _spd_samples,
           op="LogMatrixDeterminant", tol=_LINALG_TOL),
    # decompositions: compared through what is unique (factors' signs are not)
    OpSpec("linalg.cholesky", lambda x: tf.linalg.cholesky(_sym(x)),
           _exact(lambda x: np.linalg.cholesky(_sym_np(x))), _spd_samples,
           op="Cholesky", tol=_LINALG_TOL, dtypes=("float32", "float64"),
           errors=[ErrorSample((-np.eye(2, dtype=np.float32),), {}, InvalidArgumentError,
                               "not symmetric positive definite", "not_spd")]),
    OpSpec("linalg.eigh.values", lambda x: tf.linalg.eigh(_sym(x))[0],
           _exact(lambda x: np.linalg.eigvalsh(_sym_np(x))),
           _spd_samples, op="SelfAdjointEigV2", tol=_LINALG_TOL, dtypes=("float32", "float64")),
    OpSpec("linalg.eigh.reconstruction", _eigh_reconstruct, _exact(_sym_np), _spd_samples,
           op="SelfAdjointEigV2", tol=_LINALG_TOL, dtypes=("float32", "float64")),
    OpSpec("linalg.svd.values", lambda x: tf.linalg.svd(x, compute_uv=False),
           _exact(lambda x: np.linalg.svd(x, compute_uv=False)), _rect_samples, op="SvdValues",
           tol=_LINALG_TOL, dtypes=("float32", "float64")),
    OpSpec("linalg.qr.reconstruction", _qr_reconstruct, _exact(lambda x: x), _rect_samples,
           op="Qr", tol=_LINALG_TOL, dtypes=("float32", "float64"), grad_order=0),
]


# --- tf.sparse.sparse_dense_matmul (SparseTensorDenseMatMul) ------------------------------

def _spmm(indices, values, b, a_shape, adjoint_a=False, adjoint_b=False):
    return tf.sparse.sparse_dense_matmul(tf.SparseTensor(indices, values, a_shape), b,
                                         adjoint_a=adjoint_a, adjoint_b=adjoint_b)


def _spmm_ref(indices, values, b, a_shape, adjoint_a=False, adjoint_b=False):
    a = np.zeros(a_shape, values.dtype)
    np.add.at(a, (indices[:, 0], indices[:, 1]), values)
    a = a.T if adjoint_a else a
    return a @ (b.T if adjoint_b else b)


def _spmm_samples(dtype, rng):
    ind = np.array([[0, 1], [2, 3], [1, 0], [2, 3]], np.int64)     # (a repeated entry sums)
    v = lambda *s: rng.integers(-3, 4, s).astype(dtype)  # noqa: E731
    return [Sample((ind, v(4), v(4, 2), (3, 4)), grad_argnums=(1, 2), name="plain"),
            Sample((ind, v(4), v(3, 5), (3, 4)), {"adjoint_a": True}, grad_argnums=(1, 2),
                   name="adjoint_a"),
            Sample((ind, v(4), v(2, 4), (3, 4)), {"adjoint_b": True}, grad_argnums=(1, 2),
                   name="adjoint_b"),
            Sample((np.zeros((0, 2), np.int64), v(0), v(4, 2), (3, 4)), grad_argnums=(1, 2),
                   name="empty")]


_SPARSE_SPECS = [
    OpSpec(name="sparse.sparse_dense_matmul", fn=_spmm, ref=_spmm_ref,
           op="SparseTensorDenseMatMul", samples=_spmm_samples,
           errors=[ErrorSample((np.array([[0, 1]], np.int64), np.ones(1, np.float32),
                                np.ones((3, 2), np.float32), (3, 4)), error=InvalidArgumentError,
                               match="inner dimension does not match: 4 vs. 3",
                               name="inner_dims")]),
]


SPECS = _REDUCTION_SPECS + _LINALG_SPECS + _SPARSE_SPECS
