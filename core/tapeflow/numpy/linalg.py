"""``tapeflow.numpy.linalg``: the array API's linear-algebra extension (the part that
maps onto tapeflow's ops; ``docs/array-api.md`` lists the rest)."""

from __future__ import annotations

from collections import namedtuple

import numpy as _np

from .. import ops as _A
from ..ops import linalg as _L
from ..ops import math as _M
from ..ops import reductions as _R
from ..errors import InvalidArgumentError
from ._elementwise import _as_dtype, _float_input, _pair, _t, int64  # noqa: F401
from ._arrays import concat, matmul, matrix_transpose, tensordot, vecdot  # noqa: F401
from ._statistics import _accumulator  # noqa: F401

SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
QRResult = namedtuple("QRResult", ["Q", "R"])


def det(x, /):
    """Determinants of the stack of square matrices ``x``."""
    return _L.det(_float_input(x))


def inv(x, /):
    """Inverses of the stack of square matrices ``x``."""
    return _L.inv(_float_input(x))


def slogdet(x, /):
    """``(sign, log|det|)`` of each square matrix."""
    s, la = _L.slogdet(_float_input(x))
    return SlogdetResult(s, la)


def solve(x1, x2, /):
    """``X`` with ``x1 @ X == x2`` (``x2`` a stack of vectors or matrices)."""
    a, b = _pair(_float_input(x1), _float_input(x2))
    if b.ndim == 1:                         # a vector: (M,) -> (M, 1) and back
        return _L.solve(a, _A.expand_dims(b, -1))[..., 0]
    return _L.solve(a, b)


def trace(x, /, *, offset=0, dtype=None):
    """Sums along the diagonal ``offset`` of the last two axes, in ``dtype`` (by default
    ``sum``'s: int64 for signed integers, uint64 for unsigned ones, else ``x``'s)."""
    x = _t(x)
    dt = _as_dtype(dtype) or _accumulator(x.dtype)
    if dt is not None and dt is not x.dtype:
        x = _M.cast(x, dt)
    if offset:
        n, m = int(x.shape[-2]), int(x.shape[-1])
        mask = _np.eye(n, m, k=offset, dtype=_np.bool_)
        return _R.reduce_sum(_M.multiply(x, _M.cast(_t(mask), x.dtype)), axis=[-2, -1])
    return _L.trace(x)


def outer(x1, x2, /):
    """The outer product of two vectors."""
    a, b = _pair(x1, x2)
    return _M.multiply(a[:, None], b[None, :])


def cross(x1, x2, /, *, axis=-1):
    """The cross product of 3-vectors along ``axis``."""
    a, b = _pair(x1, x2)
    if int(a.shape[axis]) != 3 or int(b.shape[axis]) != 3:
        raise InvalidArgumentError(f"cross: axis {axis} must have size 3 in both inputs, got "
                                   f"{list(a.shape)} and {list(b.shape)}")

    def c(t, i):
        idx = [slice(None)] * t.ndim
        idx[axis] = slice(i, i + 1)
        return t[tuple(idx)]
    parts = [_M.subtract(_M.multiply(c(a, (i + 1) % 3), c(b, (i + 2) % 3)),
                         _M.multiply(c(a, (i + 2) % 3), c(b, (i + 1) % 3))) for i in range(3)]
    return concat(parts, axis=axis)


def matrix_power(x, n, /):
    """``x`` multiplied by itself ``n`` times (``n < 0``: of its inverse)."""
    x = _float_input(x) if n < 0 else _t(x)
    if n < 0:
        x, n = inv(x), -n
    if n == 0:
        eye = _np.broadcast_to(_np.eye(int(x.shape[-1])), tuple(int(d) for d in x.shape))
        return _t(eye.astype(x.dtype.np))
    out, base = None, x
    while n:
        if n & 1:
            out = base if out is None else matmul(out, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return out


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
    """``(sum |x|**ord) ** (1/ord)`` over ``axis`` (all by default); ``ord`` may be inf,
    -inf or 0 (the count of non-zeros)."""
    x = _float_input(x)
    ax = None if axis is None else (list(axis) if isinstance(axis, tuple) else axis)
    a = _M.abs(x)
    if ord == float("inf"):
        return _R.reduce_max(a, axis=ax, keepdims=keepdims)
    if ord == float("-inf"):
        return _R.reduce_min(a, axis=ax, keepdims=keepdims)
    if ord == 0:
        return _R.reduce_sum(_M.cast(_M.not_equal(a, 0), x.dtype), axis=ax, keepdims=keepdims)
    if ord == 2:
        return _M.sqrt(_R.reduce_sum(_M.square(a), axis=ax, keepdims=keepdims))
    if ord == 1:
        return _R.reduce_sum(a, axis=ax, keepdims=keepdims)
    return _M.pow(_R.reduce_sum(_M.pow(a, float(ord)), axis=ax, keepdims=keepdims),
                  1.0 / ord)


def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
    """Frobenius (default), 1, -1, inf or -inf norm of each matrix (the spectral and
    nuclear norms need singular values, which tapeflow does not compute yet)."""
    x = _float_input(x)
    a = _M.abs(x)
    if ord == "fro":
        return _M.sqrt(_R.reduce_sum(_M.square(a), axis=[-2, -1], keepdims=keepdims))
    if ord in (1, -1):
        s = _R.reduce_sum(a, axis=-2, keepdims=True)
        r = (_R.reduce_max if ord == 1 else _R.reduce_min)(s, axis=-1, keepdims=True)
    elif ord in (float("inf"), float("-inf")):
        s = _R.reduce_sum(a, axis=-1, keepdims=True)
        r = (_R.reduce_max if ord > 0 else _R.reduce_min)(s, axis=-2, keepdims=True)
    else:
        raise InvalidArgumentError(
            f"matrix_norm: ord={ord!r} needs singular values (not implemented); use 'fro', "
            "1, -1, inf or -inf")
    return r if keepdims else _R.reduce_sum(r, axis=[-2, -1])


def diagonal(x, /, *, offset=0):
    """The diagonal ``offset`` of the last two axes."""
    x = _t(x)
    n, m = int(x.shape[-2]), int(x.shape[-1])
    i = _np.arange(max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m)))
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    flat = rows * m + cols
    lead = [int(d) for d in x.shape[:-2]]
    return _A.gather(_A.reshape(x, lead + [n * m]), _t(flat.astype(_np.int64)), axis=x.ndim - 2)


def cholesky(x, /, *, upper=False):
    """``L`` (lower, ``L @ L.mT == x``) or, with ``upper``, ``U = L.mT``."""
    ll = _L.cholesky(_float_input(x))
    return matrix_transpose(ll) if upper else ll


def eigh(x, /):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices."""
    w, v = _L.eigh(_float_input(x))
    return EighResult(w, v)


def eigvalsh(x, /):
    """Eigenvalues (ascending) of symmetric matrices."""
    return eigh(x).eigenvalues


def svd(x, /, *, full_matrices=True):
    """``U, S, Vh`` with ``x == U @ diag(S) @ Vh`` (singular values descending)."""
    s, u, v = _L.svd(_float_input(x), full_matrices=full_matrices)
    return SVDResult(u, s, matrix_transpose(v))


def svdvals(x, /):
    """Singular values, descending (differentiable)."""
    return _L.svd(_float_input(x), compute_uv=False)


def qr(x, /, *, mode="reduced"):
    """``Q, R`` with ``x == Q @ R`` (``mode``: "reduced" or "complete")."""
    if mode not in ("reduced", "complete"):
        raise InvalidArgumentError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}")
    q, r = _L.qr(_float_input(x), full_matrices=mode == "complete")
    return QRResult(q, r)


def _cutoff(s, m, n, rtol):
    eps = float(_np.finfo(s.dtype.np).eps)
    r = max(m, n) * eps if rtol is None else rtol
    return _M.multiply(_R.reduce_max(s, axis=-1, keepdims=True), r)


def pinv(x, /, *, rtol=None):
    """The Moore-Penrose pseudo-inverse (singular values below ``rtol * max`` dropped).

    A complex ``A = X + iY`` goes through the real matrix ``[[X, -Y], [Y, X]]`` (the
    SVD kernels are real): its pseudo-inverse is ``[[P, -Q], [Q, P]]`` with
    ``pinv(A) = P + iQ``, and its singular values are A's, each twice."""
    x = _float_input(x)
    m, n = int(x.shape[-2]), int(x.shape[-1])
    if x.dtype.is_complex:
        re, im = _M.real(x), _M.imag(x)
        big = concat([concat([re, _M.negative(im)], axis=-1), concat([im, re], axis=-1)],
                     axis=-2)
        p = _pinv_real(big, m, n, rtol)
        return _M.complex(p[..., :n, :m], p[..., n:, :m])
    return _pinv_real(x, m, n, rtol)


def _pinv_real(x, m, n, rtol):
    s, u, v = _L.svd(x, full_matrices=False)
    keep = _M.greater(s, _cutoff(s, m, n, rtol))
    sinv = _A.where(keep, _M.reciprocal(_A.where(keep, s, _M.add(s, 1.0))), _M.multiply(s, 0.0))
    return matmul(_M.multiply(v, sinv[..., None, :]), matrix_transpose(u))


def matrix_rank(x, /, *, rtol=None):
    """How many singular values exceed ``rtol * max(singular values)``."""
    x = _float_input(x)
    m, n = int(x.shape[-2]), int(x.shape[-1])
    s = _L.svd(x, compute_uv=False)
    return _R.reduce_sum(_M.cast(_M.greater(s, _cutoff(s, m, n, rtol)), int64), axis=-1)


def conj(x, /):
    """The complex conjugate (the 2025.12 revision's ``linalg.conj``)."""
    return _M.conj(_t(x))
