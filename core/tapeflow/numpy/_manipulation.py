"""``tapeflow.numpy``'s manipulation functions (``concat``, ``reshape``, ``stack``,
``roll`` ...) and its linear algebra in the main namespace (``matmul``, ``tensordot``,
``vecdot``)."""

from __future__ import annotations

import numpy as _np

from .. import ops as _ops
from ..ops import array as _A
from ..ops import linalg as _L
from ..ops import math as _M
from ..ops.operators import matmul_vectors as _matmul_vectors
from ..runtime.dispatch import constant as _constant
from ..errors import InvalidArgumentError
from ..runtime.tensor import Tensor as _Tensor
from ._base import _pair, _t, result_type


# --- manipulation ------------------------------------------------------------------------------

def broadcast_arrays(*arrays):
    ts = [_t(a) for a in arrays]
    shape = broadcast_shapes(*[tuple(int(d) for d in t.shape) for t in ts])
    return [_A.broadcast_to(t, shape) for t in ts]


def broadcast_shapes(*shapes):
    return tuple(_np.broadcast_shapes(*shapes))


def broadcast_to(x, /, shape):
    return _A.broadcast_to(_t(x), tuple(shape))


def concat(arrays, /, *, axis=0):
    ts = [_t(a) for a in arrays]
    if axis is None:
        ts, axis = [_A.reshape(t, [-1]) for t in ts], 0
    dt = result_type(*ts)
    return _A.concat([_t(t, dt) for t in ts], axis)


def expand_dims(x, /, axis=0):
    return _A.expand_dims(_t(x), axis)


def flip(x, /, *, axis=None):
    x = _t(x)
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    idx = [slice(None)] * x.ndim
    for a in axes:
        idx[a] = slice(None, None, -1)
    return x[tuple(idx)]


def moveaxis(x, source, destination, /):
    x = _t(x)
    n = x.ndim
    src = [int(a) % n for a in ((source,) if isinstance(source, int) else source)]
    dst = [int(a) % n for a in ((destination,) if isinstance(destination, int) else destination)]
    if len(src) != len(dst):
        raise InvalidArgumentError(f"moveaxis: {len(src)} source axes for {len(dst)} "
                                   "destinations")
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _A.transpose(x, order)


def permute_dims(x, /, axes):
    return _A.transpose(_t(x), list(axes))


def reshape(x, /, shape, *, copy=None):
    return _A.reshape(_t(x), list(shape))


def squeeze(x, /, axis):
    x = _t(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if int(x.shape[a]) != 1:
            raise InvalidArgumentError(f"squeeze: axis {a} has size {int(x.shape[a])}, not 1")
    return _A.squeeze(x, list(axes))


def stack(arrays, /, *, axis=0):
    ts = [_t(a) for a in arrays]
    dt = result_type(*ts)
    return _A.stack([_t(t, dt) for t in ts], axis=axis)


def unstack(x, /, *, axis=0):
    return tuple(_A.unstack(_t(x), axis=axis))


def tile(x, repetitions, /):
    x = _t(x)
    reps = list(repetitions)
    if len(reps) < x.ndim:
        reps = [1] * (x.ndim - len(reps)) + reps
    elif len(reps) > x.ndim:
        x = _A.reshape(x, [1] * (len(reps) - x.ndim) + [int(d) for d in x.shape])
    return _A.tile(x, reps)


def roll(x, /, shift, *, axis=None):
    x = _t(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), tuple(int(d) for d in x.shape))
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for s, a in zip(shifts, axes):
        n = int(x.shape[a])
        if n == 0:
            continue
        s %= n
        if s:
            lo = [slice(None)] * x.ndim
            hi = [slice(None)] * x.ndim
            lo[a], hi[a] = slice(n - s, None), slice(None, n - s)
            x = _A.concat([x[tuple(lo)], x[tuple(hi)]], a)
    return x


def repeat(x, repeats, /, *, axis=None):
    x = _t(x)
    if axis is None:
        x, axis = _A.reshape(x, [-1]), 0
    n = int(x.shape[axis])
    reps = _np.broadcast_to(_np.asarray(repeats.numpy() if isinstance(repeats, _Tensor)
                                        else repeats), (n,))
    idx = _np.repeat(_np.arange(n), reps)
    return _A.gather(x, _constant(idx.astype(_np.int64), device=x.device), axis=axis)


# --- linear algebra ------------------------------------------------------------------------------

def matmul(x1, x2, /):
    """Matrix product with the standard's rule for 1-D operands (a row on the left, a
    column on the right, the axis dropped) and batch broadcasting."""
    a, b = _pair(x1, x2)
    return _matmul_vectors(a, b)


def matrix_transpose(x, /):
    x = _t(x)
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return _A.transpose(x, perm)


def tensordot(x1, x2, /, *, axes=2):
    a, b = _pair(x1, x2)
    return _L.tensordot(a, b, axes)


def vecdot(x1, x2, /, *, axis=-1):
    a, b = _pair(x1, x2)
    return _ops.reductions.reduce_sum(_M.multiply(_M.conj(a), b), axis=axis)   # conj(x1)
