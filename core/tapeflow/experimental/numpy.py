"""``tf.experimental.numpy`` (``import tapeflow.experimental.numpy as tnp``): NumPy's API on
tapeflow tensors -- :mod:`tapeflow.numpy` (the array API namespace, every function a
composition of tapeflow ops: every backend, ``GradientTape``, ``tf.function``) with
NumPy's signatures where they differ from the standard's (``tnp.ones(shape, dtype)``,
``tnp.sum(a, axis)``), NumPy's names (``dot``, ``copy``, ``concatenate``, ``ndarray``
-- ``tf.Tensor`` itself --, ``tnp.random`` ...) and
:func:`experimental_enable_numpy_behavior`, which gives tensors NumPy's methods
(``x.reshape(2, 3)``, ``x.astype``, ``x.T`` ...) and their operators NumPy's type
promotion, as TensorFlow's mode of that name does (docs/array-api.md).

Long file: one public module path of TensorFlow (``tf.experimental.numpy``), whose
parts -- NumPy's functions beyond the array API, ``tnp.random`` and the NumPy
behaviour, which uses those functions as tensor methods -- belong together.

>>> import tapeflow as tf
>>> import tapeflow.experimental.numpy as tnp
>>> x = tnp.ones([2, 3], tnp.int32)
>>> print(tnp.sum(x, 0), isinstance(x, tnp.ndarray))
tf.Tensor([2 2 2], shape=(3,), dtype=int64) True
>>> print(tnp.dot(tnp.asarray([1, 2]), tnp.asarray([3, 4])))
tf.Tensor(11, shape=(), dtype=int64)
"""

from __future__ import annotations

import builtins as _builtins
import functools as _functools
import inspect as _inspect

import numpy as _onp

from .. import dtypes as _dt
from .. import numpy as _anp
from .. import ops as _ops
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..numpy import *  # noqa: F401,F403,A004  (the array API namespace: NumPy's names)
from ..ops import linalg as _L
from ..ops import math as _M
from ..ops import random as _rnd
from ..runtime import dispatch as _dispatch
from ..runtime import registry as _reg
from ..runtime.tensor import Tensor as _Tensor
from ..runtime.variable import Variable as _Variable

#: ``tnp.ndarray``: TensorFlow's NumPy arrays are tensors
ndarray = _Tensor
bool_ = _dt.bool_
int_ = _dt.int64
float_ = _dt.float64
complex_ = _dt.complex128
inexact = _onp.inexact


# --- NumPy's signatures over the array API's ------------------------------------------------

def _numpy_args(fn, *names, name=None):
    """``fn`` called with NumPy's positional arguments: those after ``fn``'s own
    positional ones are passed as the keywords ``names`` (``tnp.ones(shape, dtype)``,
    ``tnp.sum(a, axis, dtype)``)."""
    params = _inspect.signature(fn).parameters.values()
    npos = _builtins.sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    fname = name or fn.__name__

    @_functools.wraps(fn)
    def f(*args, **kwargs):
        extra = args[npos:]
        if len(extra) > len(names):
            raise InvalidArgumentError(
                f"tnp.{fname} takes at most {npos + len(names)} positional arguments "
                f"({', '.join(names)} after the first {npos}), got {len(args)}")
        for k, v in zip(names, extra):
            if k in kwargs:
                raise InvalidArgumentError(f"tnp.{fname}: {k} given twice")
            kwargs[k] = v
        if kwargs.pop("out", None) is not None:
            raise UnimplementedError(f"tnp.{fname}: out= is not supported (tensors are "
                                     "immutable); use the returned tensor")
        return fn(*args[:npos], **kwargs)
    f.__module__ = __name__
    f.__name__ = f.__qualname__ = fname
    f.__doc__ = (f"NumPy's ``{fname}``: :func:`tapeflow.numpy.{fn.__name__}` with "
                 f"{', '.join(names)} also positional.")
    return f


ones = _numpy_args(_anp.ones, "dtype")
zeros = _numpy_args(_anp.zeros, "dtype")
empty = _numpy_args(_anp.empty, "dtype")
full = _numpy_args(_anp.full, "dtype")
ones_like = _numpy_args(_anp.ones_like, "dtype")
zeros_like = _numpy_args(_anp.zeros_like, "dtype")
full_like = _numpy_args(_anp.full_like, "dtype")
sum = _numpy_args(_anp.sum, "axis", "dtype", "out", "keepdims")  # noqa: A001
prod = _numpy_args(_anp.prod, "axis", "dtype", "out", "keepdims")
max = amax = _numpy_args(_anp.max, "axis", "out", "keepdims")  # noqa: A001
min = amin = _numpy_args(_anp.min, "axis", "out", "keepdims")  # noqa: A001
any = _numpy_args(_anp.any, "axis", "out", "keepdims")  # noqa: A001
all = _numpy_args(_anp.all, "axis", "out", "keepdims")  # noqa: A001
argmax = _numpy_args(_anp.argmax, "axis")
argmin = _numpy_args(_anp.argmin, "axis")
stack = _numpy_args(_anp.stack, "axis")
concatenate = _numpy_args(_anp.concat, "axis", name="concatenate")
flip = _numpy_args(_anp.flip, "axis")
roll = _numpy_args(_anp.roll, "axis")
repeat = _numpy_args(_anp.repeat, "axis")
take = _numpy_args(_anp.take, "axis")
sort = _numpy_args(_anp.sort, "axis")
argsort = _numpy_args(_anp.argsort, "axis")
count_nonzero = _numpy_args(_anp.count_nonzero, "axis")
empty_like = _numpy_args(_anp.empty_like, "dtype")
arange = _numpy_args(_anp.arange, "dtype")
eye = _numpy_args(_anp.eye, "k", "dtype")


def asarray(a, dtype=None, *, device=None, copy=None):
    """NumPy's ``asarray``: :func:`tapeflow.numpy.asarray` with ``dtype`` also positional
    (``tnp.asarray([1, 2], tnp.int32)``)."""
    return _anp.asarray(a, dtype=dtype, device=device, copy=copy)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """NumPy's ``linspace``: ``num`` (50 unless given) evenly spaced values from ``start``
    to ``stop`` (scalars), and the step too with ``retstep=True``."""
    if axis != 0:
        raise UnimplementedError(f"tnp.linspace: axis={axis!r} is not supported (the ends "
                                 "are scalars: use axis=0)")
    out = _anp.linspace(start, stop, num, endpoint=_builtins.bool(endpoint), dtype=dtype)
    if not retstep:
        return out
    parts = _builtins.max(int(num) - 1 if endpoint else int(num), 1)
    return out, (stop - start) / parts




def mean(a, axis=None, dtype=None, out=None, keepdims=False):
    """NumPy's ``mean``: integers are averaged in the default float."""
    x = asarray(a)  # noqa: F405
    if x.dtype.is_integer or x.dtype.is_bool:
        x = _M.cast(x, _dt.float64 if dtype is None else _dt.as_dtype(dtype))
    if out is not None:
        raise UnimplementedError("tnp.mean: out= is not supported (tensors are immutable)")
    m = _anp.mean(x, axis=axis, keepdims=_builtins.bool(keepdims))
    return m if dtype is None else _M.cast(m, _dt.as_dtype(dtype))


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """NumPy's ``std`` (``ddof``: the array API's ``correction``)."""
    return _anp.std(_float(a), axis=axis, correction=ddof, keepdims=keepdims)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """NumPy's ``var`` (``ddof``: the array API's ``correction``)."""
    return _anp.var(_float(a), axis=axis, correction=ddof, keepdims=keepdims)


def _float(a):
    x = asarray(a)  # noqa: F405
    return x if x.dtype.is_inexact else _M.cast(x, _dt.float64)


def expand_dims(a, axis):
    """NumPy's ``expand_dims``."""
    return _anp.expand_dims(asarray(a), axis=axis)  # noqa: F405


def squeeze(a, axis=None):
    """NumPy's ``squeeze``: every axis of length 1 when ``axis`` is None."""
    x = asarray(a)  # noqa: F405
    if axis is None:
        axis = tuple(i for i, d in enumerate(x.shape) if d == 1)
    return _anp.squeeze(x, axis)


def reshape(a, newshape, order="C"):
    """NumPy's ``reshape`` (``order`` "C" or "F")."""
    x = asarray(a)  # noqa: F405
    shape = (newshape,) if isinstance(newshape, (int, _onp.integer)) else tuple(newshape)
    if order == "C":
        return _anp.reshape(x, shape)
    if order != "F":
        raise InvalidArgumentError(f"tnp.reshape: order must be 'C' or 'F', got {order!r}")
    return transpose(_anp.reshape(transpose(x), shape[::-1]))


def transpose(a, axes=None):
    """NumPy's ``transpose``: the axes reversed, or permuted by ``axes``."""
    x = asarray(a)  # noqa: F405
    return _anp.permute_dims(x, tuple(range(x.ndim))[::-1] if axes is None else tuple(axes))


def swapaxes(a, axis1, axis2):
    x = asarray(a)  # noqa: F405
    perm = list(range(x.ndim))
    perm[axis1], perm[axis2] = perm[axis2], perm[axis1]
    return _anp.permute_dims(x, tuple(perm))


def ravel(a):
    """The elements of ``a`` as one row (C order)."""
    return _anp.reshape(asarray(a), (-1,))  # noqa: F405


def clip(a, a_min, a_max):
    """NumPy's ``clip`` (``a_min``/``a_max``: None for no bound)."""
    x = asarray(a)  # noqa: F405
    return _anp.clip(x, a_min, a_max)


def array(val, dtype=None, copy=True, ndmin=0):
    """NumPy's ``array``: :func:`asarray` with a copy, at least ``ndmin`` dimensions."""
    x = _anp.asarray(val, dtype=dtype, copy=True if copy else None)
    if x.ndim < ndmin:
        x = _anp.reshape(x, (1,) * (ndmin - x.ndim) + tuple(x.shape))
    return x


def copy(a):
    """A copy of ``a`` (on the device of an enclosing ``tf.device`` scope)."""
    return _ops.identity(asarray(a))  # noqa: F405


def dot(a, b):
    """NumPy's ``dot``: products of 0-d operands, inner products of vectors, matrix
    products, and sums over the last axis of ``a`` and the second-to-last of ``b``."""
    a, b = _promoted(asarray(a), asarray(b))  # noqa: F405
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if b.ndim <= 2:
        return _anp.matmul(a, b) if a.ndim <= 2 or b.ndim == 2 else _anp.tensordot(
            a, b, axes=([a.ndim - 1], [0]))
    return _anp.tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 2]))


def _promoted(a, b):
    dt = _numpy_result(a, a.dtype, b, b.dtype)
    return _M.cast(a, dt), _M.cast(b, dt)


def outer(a, b):
    return _anp.reshape(asarray(a), (-1, 1)) * _anp.reshape(asarray(b), (1, -1))  # noqa: F405


def inner(a, b):
    return _anp.tensordot(*_promoted(asarray(a), asarray(b)), axes=([-1], [-1]))  # noqa: F405


def ndim(a):
    return asarray(a).ndim  # noqa: F405


def size(a, axis=None):
    x = asarray(a)  # noqa: F405
    return x.size if axis is None else int(x.shape[axis])


def shape(a):
    return tuple(asarray(a).shape)  # noqa: F405


def cumsum(a, axis=None, dtype=None):
    """NumPy's ``cumsum``: of the flattened array when ``axis`` is None."""
    x = asarray(a)  # noqa: F405
    return _anp.cumulative_sum(ravel(x) if axis is None else x, axis=0 if axis is None
                               else axis, dtype=dtype)


def cumprod(a, axis=None, dtype=None):
    """NumPy's ``cumprod``: of the flattened array when ``axis`` is None."""
    x = asarray(a)  # noqa: F405
    return _anp.cumulative_prod(ravel(x) if axis is None else x, axis=0 if axis is None
                                else axis, dtype=dtype)


def hstack(tup):
    xs = [asarray(t) for t in tup]  # noqa: F405
    return _anp.concat(xs, axis=0 if xs[0].ndim == 1 else 1)


def vstack(tup):
    return _anp.concat([atleast_2d(t) for t in tup], axis=0)


def atleast_1d(a):
    x = asarray(a)  # noqa: F405
    return _anp.reshape(x, (1,)) if x.ndim == 0 else x


def atleast_2d(a):
    x = asarray(a)  # noqa: F405
    return _anp.reshape(x, (1,) * (2 - x.ndim) + tuple(x.shape)) if x.ndim < 2 else x


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return _builtins.bool(all(isclose(a, b, rtol, atol, equal_nan)))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = _promoted(_float(a), _float(b))
    close = _anp.less_equal(_anp.abs(a - b), atol + rtol * _anp.abs(b))
    if equal_nan:
        close = _anp.logical_or(close, _anp.logical_and(_anp.isnan(a), _anp.isnan(b)))
    return close


def array_equal(a1, a2):
    x, y = asarray(a1), asarray(a2)  # noqa: F405
    return tuple(x.shape) == tuple(y.shape) and _builtins.bool(all(_anp.equal(*_promoted(x, y))))


def average(a, axis=None, weights=None):
    """NumPy's ``average``: the mean, or the ``weights``-weighted mean along ``axis``."""
    if weights is None:
        return mean(a, axis)
    x, w = _promoted(_float(a), _float(weights))
    if w.ndim == 1 and x.ndim > 1 and axis is not None:
        w = _anp.reshape(w, tuple(-1 if i == axis % x.ndim else 1 for i in range(x.ndim)))
    return _anp.sum(x * w, axis=axis) / _anp.sum(w * _anp.ones_like(x), axis=axis)


def identity(n, dtype=None):
    return _anp.eye(n, dtype=dtype)


def promote_types(type1, type2):
    """NumPy's promotion of two dtypes (``int32`` with ``float32`` is float64)."""
    return _dt.from_numpy(_onp.promote_types(_dt.as_dtype(type1).np, _dt.as_dtype(type2).np))


def einsum(subscripts, *operands, **kwargs):
    """NumPy's ``einsum`` (``tf.einsum``; operands promoted as NumPy does)."""
    xs = [asarray(o) for o in operands]  # noqa: F405
    dt = _anp.result_type(*xs) if len(xs) > 1 else xs[0].dtype
    return _L.einsum(subscripts, *[_M.cast(x, dt) for x in xs])


def diagonal(a, offset=0, axis1=0, axis2=1):
    """NumPy's ``diagonal``: the diagonal of the ``axis1``/``axis2`` planes, last."""
    x = asarray(a)  # noqa: F405
    rest = [i for i in range(x.ndim) if i not in (axis1 % x.ndim, axis2 % x.ndim)]
    x = _anp.permute_dims(x, tuple(rest) + (axis1, axis2))
    x = x[..., :, offset:] if offset >= 0 else x[..., -offset:, :]
    n = _builtins.min(int(x.shape[-2]), int(x.shape[-1]))
    return _L.diag_part(x[..., :n, :n])


def trace(a, offset=0, axis1=0, axis2=1, dtype=None):
    """NumPy's ``trace``: the sums of :func:`diagonal`."""
    return _anp.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def diag(v, k=0):
    """NumPy's ``diag``: the diagonal of a matrix, or the matrix of a vector."""
    x = asarray(v)  # noqa: F405
    if x.ndim == 1:
        m = _L.diag(x)
        return m if k == 0 else _ops.pad(m, [[0, k], [k, 0]] if k > 0 else [[-k, 0], [0, -k]])
    if x.ndim != 2:
        raise InvalidArgumentError(f"tnp.diag: needs a 1-D or 2-D array, got shape "
                                   f"{tuple(x.shape)}")
    return diagonal(x, k)


def tri(N, M=None, k=0, dtype=None):  # noqa: N803 (NumPy's names)
    return _anp.asarray(_onp.tri(N, M, k), dtype=dtype or _default_float())


def pad(array, pad_width, mode="constant", constant_values=0):
    """NumPy's ``pad`` (modes "constant", "reflect", "symmetric": ``tf.pad``'s)."""
    x = asarray(array)  # noqa: F405
    widths = _onp.broadcast_to(_onp.asarray(pad_width, _onp.int64), (x.ndim, 2)).tolist()
    if mode not in ("constant", "reflect", "symmetric"):
        raise UnimplementedError(f"tnp.pad: mode {mode!r} is not implemented; use "
                                 "'constant', 'reflect' or 'symmetric'")
    return _ops.pad(x, widths, mode=mode.upper(), constant_values=constant_values)


def split(ary, indices_or_sections, axis=0):
    """NumPy's ``split``: into equal sections, or at the given indices."""
    x = asarray(ary)  # noqa: F405
    n = int(x.shape[axis])
    if isinstance(indices_or_sections, (int, _onp.integer)):
        if indices_or_sections <= 0 or n % indices_or_sections:
            raise InvalidArgumentError(
                f"tnp.split: {n} elements along axis {axis} do not split into "
                f"{indices_or_sections} equal sections (tnp.array_split does not exist "
                "yet: pass the split indices)")
        return _ops.split(x, int(indices_or_sections), axis=axis)
    bounds = [0] + [_builtins.min(_builtins.max(int(i), 0), n)
                    for i in indices_or_sections] + [n]
    sizes = [_builtins.max(b - a, 0) for a, b in zip(bounds, bounds[1:])]
    return _ops.split(x, sizes, axis=axis)


def hsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, 0 if asarray(ary).ndim == 1 else 1)  # noqa: F405


def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, 0)


def dstack(tup):
    return _anp.concat([atleast_3d(t) for t in tup], axis=2)


def atleast_3d(a):
    x = asarray(a)  # noqa: F405
    shape = {0: (1, 1, 1), 1: (1, -1, 1), 2: tuple(x.shape) + (1,)}.get(x.ndim)
    return x if shape is None else _anp.reshape(x, shape)


def append(arr, values, axis=None):
    x, v = _promoted(asarray(arr), asarray(values))  # noqa: F405
    if axis is None:
        return _anp.concat([ravel(x), ravel(v)], axis=0)
    return _anp.concat([x, v], axis=axis)


def vdot(a, b):
    """The inner product of the flattened arrays (the first conjugated)."""
    x, y = _promoted(ravel(a), ravel(b))
    return _anp.sum(_anp.conj(x) * y) if x.dtype.is_complex else _anp.sum(x * y)


def kron(a, b):
    """NumPy's ``kron`` of two arrays of one rank."""
    x, y = _promoted(asarray(a), asarray(b))  # noqa: F405
    if x.ndim != y.ndim:
        raise InvalidArgumentError(f"tnp.kron: needs arrays of one rank, got shapes "
                                   f"{tuple(x.shape)} and {tuple(y.shape)}")
    n = x.ndim
    xe = _anp.reshape(x, tuple(d for s in x.shape for d in (s, 1)))
    ye = _anp.reshape(y, tuple(d for s in y.shape for d in (1, s)))
    return _anp.reshape(xe * ye, tuple(int(x.shape[i]) * int(y.shape[i]) for i in range(n)))


def cross(a, b):
    """The cross product of 3-vectors along the last axis."""
    x, y = _promoted(asarray(a), asarray(b))  # noqa: F405
    if x.shape[-1] != 3 or y.shape[-1] != 3:
        raise UnimplementedError("tnp.cross: only 3-vectors along the last axis")
    x0, x1, x2 = _anp.unstack(x, axis=-1)
    y0, y1, y2 = _anp.unstack(y, axis=-1)
    return _anp.stack([x1 * y2 - x2 * y1, x2 * y0 - x0 * y2, x0 * y1 - x1 * y0], axis=-1)


def rot90(m, k=1, axes=(0, 1)):
    """``m`` turned by ``k`` quarter turns from the first of ``axes`` to the second."""
    x = asarray(m)  # noqa: F405
    k %= 4
    a0, a1 = axes
    if k == 2:
        return _anp.flip(x, axis=(a0, a1))
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return _anp.permute_dims(_anp.flip(x, axis=a1), tuple(perm))
    return _anp.flip(_anp.permute_dims(x, tuple(perm)), axis=a1) if k == 3 else x


def fliplr(m):
    return _anp.flip(asarray(m), axis=1)  # noqa: F405


def flipud(m):
    return _anp.flip(asarray(m), axis=0)  # noqa: F405


def ptp(a, axis=None, keepdims=False):
    """The range (maximum minus minimum) along ``axis``."""
    return max(a, axis, keepdims=keepdims) - min(a, axis, keepdims=keepdims)  # noqa: F405


def _nan_to(a, value):
    x = asarray(a)  # noqa: F405
    return _anp.where(_anp.isnan(x), _anp.asarray(value, dtype=x.dtype), x) \
        if x.dtype.is_inexact else x


def nansum(a, axis=None, dtype=None, keepdims=False):
    return _anp.sum(_nan_to(a, 0), axis=axis, dtype=dtype, keepdims=keepdims)


def nanprod(a, axis=None, dtype=None, keepdims=False):
    return _anp.prod(_nan_to(a, 1), axis=axis, dtype=dtype, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, keepdims=False):
    x = _float(a)
    count = _anp.sum(_M.cast(_anp.logical_not(_anp.isnan(x)), x.dtype), axis=axis,
                     keepdims=keepdims)
    return nansum(x, axis, dtype, keepdims) / count


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None):
    e = _anp.linspace(start, stop, num, endpoint=endpoint, dtype=_dt.float64)
    return _M.cast(_anp.pow(_anp.asarray(base, dtype=_dt.float64), e),
                   _dt.as_dtype(dtype) if dtype else _default_float())


def geomspace(start, stop, num=50, endpoint=True, dtype=None):
    out = logspace(_onp.log10(start), _onp.log10(stop), num, endpoint, 10.0, _dt.float64)
    return _M.cast(out, _dt.as_dtype(dtype) if dtype else _default_float())


def exp2(x):
    return _anp.pow(_anp.asarray(2.0, dtype=_float(x).dtype), _float(x))


def cbrt(x):
    f = _float(x)
    return _anp.sign(f) * _anp.pow(_anp.abs(f), _anp.asarray(1.0 / 3.0, dtype=f.dtype))


def deg2rad(x):
    return _float(x) * (_onp.pi / 180.0)


def rad2deg(x):
    return _float(x) * (180.0 / _onp.pi)


def float_power(x1, x2):
    return _anp.pow(*_promoted(_M.cast(asarray(x1), _dt.float64),  # noqa: F405
                               _M.cast(asarray(x2), _dt.float64)))  # noqa: F405


def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0."""
    f = _float(x)
    safe = _anp.where(_anp.equal(f, 0), _anp.ones_like(f), f) * _onp.pi
    return _anp.where(_anp.equal(f, 0), _anp.ones_like(f), _anp.sin(safe) / safe)


def isposinf(x):
    f = asarray(x)  # noqa: F405
    return _anp.logical_and(_anp.isinf(f), _anp.greater(f, 0))


def isneginf(x):
    f = asarray(x)  # noqa: F405
    return _anp.logical_and(_anp.isinf(f), _anp.less(f, 0))


def isscalar(num):
    return isinstance(num, (int, float, complex, str, bytes, _onp.generic)) or (
        isinstance(num, _Tensor) and num.ndim == 0)


def iscomplexobj(x):
    return asarray(x).dtype.is_complex  # noqa: F405


def isrealobj(x):
    return not iscomplexobj(x)


def select(condlist, choicelist, default=0):
    """The element of the first choice whose condition holds, else ``default``."""
    out = asarray(default)  # noqa: F405
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        c = asarray(choice)  # noqa: F405
        out, c = _promoted(out, c)
        out = _anp.where(asarray(cond), c, out)  # noqa: F405
    return out


def heaviside(x1, x2):
    x, h0 = _promoted(_float(x1), _float(x2))
    return _anp.where(_anp.less(x, 0), _anp.zeros_like(x),
                      _anp.where(_anp.greater(x, 0), _anp.ones_like(x), h0 + 0 * x))


def polyval(p, x):
    """The polynomial with coefficients ``p`` (highest power first) at ``x`` (Horner)."""
    out = None
    for c in p:
        out = asarray(c) if out is None else out * x + c  # noqa: F405
    return out if out is not None else zeros_like(asarray(x))  # noqa: F405


def divmod(x1, x2):  # noqa: A001
    return floor_divide(x1, x2), remainder(x1, x2)  # noqa: F405


def ix_(*args):
    """Open meshes of the 1-D index arrays: broadcastable against each other."""
    n = len(args)
    return tuple(_anp.reshape(asarray(a), (1,) * i + (-1,) + (1,) * (n - i - 1))  # noqa: F405
                 for i, a in enumerate(args))


def diag_indices(n, ndim=2):
    return (_anp.arange(n),) * ndim


# NumPy's other names for the array API's functions
absolute = fabs = abs  # noqa: F405
arccos, arccosh, arcsin, arcsinh = acos, acosh, asin, asinh  # noqa: F405
arctan, arctan2, arctanh = atan, atan2, atanh  # noqa: F405
power, true_divide, mod, around = pow, divide, remainder, round  # noqa: F405
bitwise_not, conjugate = bitwise_invert, conj  # noqa: F405
asanyarray = ascontiguousarray = asarray  # noqa: F405


# --- tnp.random ------------------------------------------------------------------------------

class _Random:
    """``tnp.random``: NumPy's legacy random functions on tapeflow's random ops (seeded by
    :meth:`seed`, which is ``tf.random.set_seed``; the numbers are tapeflow's, not
    NumPy's or TensorFlow's)."""

    @staticmethod
    def seed(s):
        _rnd.set_seed(s)

    @staticmethod
    def randn(*size):
        return _rnd.normal(size, dtype=_default_float())

    @staticmethod
    def standard_normal(size=None):
        return _Random.randn(*_size(size))

    @staticmethod
    def rand(*size):
        return _rnd.uniform(size, dtype=_default_float())

    @staticmethod
    def random(size=None):
        return _Random.rand(*_size(size))

    @staticmethod
    def uniform(low=0.0, high=1.0, size=None):
        return _rnd.uniform(_size(size), minval=low, maxval=high, dtype=_default_float())

    @staticmethod
    def randint(low, high=None, size=None, dtype=_onp.int64):
        if high is None:
            low, high = 0, low
        return _rnd.uniform(_size(size), minval=low, maxval=high, dtype=_dt.as_dtype(dtype))

    def __repr__(self):
        return "<module 'tapeflow.experimental.numpy.random'>"


def _size(size):
    return () if size is None else (size,) if isinstance(size, (int, _onp.integer)) \
        else tuple(size)


def _default_float():
    return _dt.DEFAULTS["array_api"]["alone"][_dt.WEAK_FLOAT]


random = _Random()


# --- NumPy behaviour -----------------------------------------------------------------------

def _numpy_result(a, da, b, db):
    """The dtype NumPy promotes ``a`` (of dtype ``da``, None for a Python scalar) and
    ``b`` to: NEP 50 (a Python int next to an int32 tensor stays int32, a Python float
    next to it is float64); tapeflow's "array_api" lattice where NumPy has no rule
    (``bfloat16``)."""
    try:
        return _dt.from_numpy(_onp.result_type(a if da is None else da.np,
                                               b if db is None else db.np))
    except (TypeError, ValueError):
        return _dt.result_type(a if da is None else da, b if db is None else db,
                               mode="array_api")


def _operand_dtype(x):
    if isinstance(x, (_Tensor, _Variable)):
        return x.dtype
    if isinstance(x, (_builtins.bool, int, float, complex)):
        return None
    if isinstance(x, (_onp.ndarray, _onp.generic)):
        return _dt.from_numpy(x.dtype)
    return _dt.from_numpy(_onp.asarray(x).dtype)


def _as_operand(x, dx, target, like):
    """``x`` as a tensor of ``target`` (the other operand ``like`` a Tensor)."""
    if dx is target:
        return x
    if isinstance(x, (_Tensor, _Variable)):
        return _M.cast(x, target)
    if dx is None and isinstance(like, _Tensor) and like.dtype is target:
        try:
            return _dispatch.scalar_like(x, like)
        except OverflowError:           # (NumPy 1's wrap-around: int8 + 300)
            pass
    return _anp.asarray(_onp.asarray(x).astype(target.np), dtype=target)


def _promote(a, b):
    da, db = _operand_dtype(a), _operand_dtype(b)
    if da is db and da is not None:
        return a, b
    target = _numpy_result(a, da, b, db)
    ca = _as_operand(a, da, target, b)
    return ca, _as_operand(b, db, target, ca)


def _numpy_operator(op):
    """A Tensor operator promoting as NumPy does, then running ``op`` (None: ``@``)."""
    if op is None:
        def operator(a, b):
            return _ops.matmul_vectors(*_promote(a, b))
    else:
        def operator(a, b):
            a, b = _promote(a, b)
            return _dispatch.binary(op, a, b)
    return operator


#: the Tensor operators NumPy behaviour promotes (``==``/``!=`` and the bitwise ones keep
#: tapeflow's rules): slot name -> op name (None: ``@``)
_OPERATORS = {"add": "Add", "sub": "Sub", "mul": "Mul", "truediv": "RealDiv",
              "floordiv": "FloorDiv", "mod": "FloorMod", "pow": "Pow", "lt": "Less",
              "le": "LessEqual", "gt": "Greater", "ge": "GreaterEqual", "matmul": None}
_REFLECTED = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul")


def _reflect(f):
    def rmethod(self, other):
        return f(other, self)
    return rmethod


def _method(f):
    def method(self, other):
        return f(self, other)
    return method


def _T(self):
    """The tensor with its axes reversed (NumPy's ``x.T``, any rank)."""
    return transpose(self)


def _reshape(self, *shape, order="C"):
    """NumPy's ``x.reshape(2, 3)`` / ``x.reshape((2, 3))``."""
    if len(shape) == 1 and not isinstance(shape[0], (int, _onp.integer)):
        shape = shape[0]
    return reshape(self, shape, order)


def _transpose(self, *axes):
    if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, _onp.integer))):
        axes = axes[0]
    return transpose(self, axes or None)


def _astype(self, dtype):
    return _M.cast(self, _dt.as_dtype(dtype))


def _tolist(self):
    return self.numpy().tolist()


def _data(self):
    return self


#: the methods and properties NumPy behaviour gives Tensor (TensorFlow's set)
_METHODS = {
    "T": property(_T), "data": property(_data), "reshape": _reshape, "astype": _astype,
    "ravel": ravel, "flatten": ravel, "clip": clip, "transpose": _transpose,
    "tolist": _tolist, "max": max, "min": min, "mean": mean,  # noqa: F405
}


class _Behaviour:
    """What :func:`experimental_enable_numpy_behavior` changed, to put it back
    (:func:`_disable_numpy_behavior`, for tests)."""

    enabled = False
    saved: dict = {}
    defaults = None


def _bool_mask_as_indices(k):
    """A boolean mask among other indices as its integer indices (NumPy's rule: a mask
    is its ``nonzero()``); anything else as it is."""
    if isinstance(k, (list, tuple)) and k and _builtins.all(
            isinstance(v, (_builtins.bool, _onp.bool_)) for v in k):
        return _onp.nonzero(_onp.asarray(k))
    if isinstance(k, _onp.ndarray) and k.dtype == _onp.bool_:
        return _onp.nonzero(k)
    if isinstance(k, _Tensor) and k.dtype.is_bool:
        return _onp.nonzero(k.numpy())
    return (k,)


def _numpy_getitem(getitem):
    """``x[key]`` with NumPy's boolean masks among other indices (``x[:, [True, False]]``)."""
    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) > 1:
            key = tuple(i for k in key for i in _bool_mask_as_indices(k))
        elif isinstance(key, list) and key and _builtins.all(isinstance(v, (_builtins.bool, _onp.bool_)) for v in key):
            key = _onp.asarray(key)
        return getitem(self, key)
    return __getitem__


def _set_operators(fns):
    """Bind Tensor's and Variable's promoting operators (``fns``: slot -> function, None
    to put back the saved ones)."""
    speed = _dispatch.speedups
    for slot, opname in _OPERATORS.items():
        op = None if opname is None else _reg.get_op(opname)
        if speed is not None:
            if fns is None:
                speed.set_operator(slot, op, _ops.matmul_vectors if op is None else
                                   _functools.partial(_dispatch.binary, op), op is not None)
            else:
                speed.set_operator(slot, op, fns[slot], False)
        names = [f"__{slot}__"] + ([f"__r{slot}__"] if slot in _REFLECTED else [])
        for cls in ((_Variable,) if speed is not None else (_Tensor, _Variable)):
            for n, make in zip(names, (_method, _reflect)):
                key = (cls, n)
                if fns is None:
                    setattr(cls, n, _Behaviour.saved.pop(key))
                else:
                    _Behaviour.saved.setdefault(key, cls.__dict__[n])
                    setattr(cls, n, make(fns[slot]))


def experimental_enable_numpy_behavior(prefer_float32=False, dtype_conversion_mode="legacy"):
    """NumPy's behaviour for tensors, for the rest of the process (as TensorFlow's):

    - tensors get NumPy's methods and properties: ``x.T`` (every axis reversed),
      ``x.reshape(2, 3)``, ``x.astype(dtype)``, ``x.ravel()``, ``x.flatten()``,
      ``x.clip(lo, hi)``, ``x.transpose()``, ``x.tolist()``, ``x.max()``, ``x.min()``,
      ``x.mean()``, ``x.data``; and NumPy's boolean masks among other indices;
    - the arithmetic and ordering operators (``+ - * / // % ** < <= > >= @``) promote
      mixed dtypes as NumPy does (``int32 + float32`` is float64; a Python float next to
      an int32 tensor float64), and so do this module's functions (``tnp.add``,
      ``tnp.concatenate``); the functions of ``tf.*`` (``tf.add``, ``tf.matmul``,
      ``tf.concat``) keep tapeflow's rules (``int32`` with ``float32`` is float32; with
      NumPy behaviour on, TensorFlow's refuse mixed dtypes);
    - ``tnp``'s default float (``tnp.ones``, ``tnp.asarray(1.)``, ``tnp.random``) is
      NumPy's float64, or float32 with ``prefer_float32=True``.

    ``dtype_conversion_mode``: "legacy" (the only mode tapeflow implements).

    >>> import tapeflow as tf
    >>> import tapeflow.experimental.numpy as tnp
    >>> tnp.experimental_enable_numpy_behavior()
    >>> x = tf.constant([[1, 2, 3]])
    >>> print(x.T.shape, x.reshape(3).astype("float32"), (x + 2.5).dtype.name)
    (3, 1) tf.Tensor([1. 2. 3.], shape=(3,), dtype=float32) float64
    >>> tnp._disable_numpy_behavior()      # (tests only: TensorFlow cannot turn it off)
    """
    if dtype_conversion_mode != "legacy":
        if dtype_conversion_mode in ("all", "safe", "off"):
            raise UnimplementedError(
                f"experimental_enable_numpy_behavior: dtype_conversion_mode="
                f"{dtype_conversion_mode!r} (TensorFlow's WeakTensor modes) is not "
                "implemented; use 'legacy'")
        raise InvalidArgumentError(
            f"experimental_enable_numpy_behavior: dtype_conversion_mode must be 'legacy', "
            f"got {dtype_conversion_mode!r}")
    if not isinstance(prefer_float32, (_builtins.bool, _onp.bool_)):
        raise InvalidTypeError(f"experimental_enable_numpy_behavior: prefer_float32 must "
                               f"be a bool, got {type(prefer_float32).__name__}")
    alone = _dt.DEFAULTS["array_api"]["alone"]
    if _Behaviour.defaults is None:
        _Behaviour.defaults = dict(alone)
    alone[_dt.WEAK_FLOAT] = _dt.float32 if prefer_float32 else _dt.float64
    alone[_dt.WEAK_COMPLEX] = _dt.complex64 if prefer_float32 else _dt.complex128
    if _Behaviour.enabled:
        return
    _Behaviour.enabled = True
    methods = dict(_METHODS, __getitem__=_numpy_getitem(_Tensor.__getitem__))
    for n, v in methods.items():
        _Behaviour.saved[(_Tensor, n)] = _Tensor.__dict__.get(n, _Behaviour)
        setattr(_Tensor, n, v)
    _set_operators({slot: _numpy_operator(None if n is None else _reg.get_op(n))
                    for slot, n in _OPERATORS.items()})


def _disable_numpy_behavior():
    """Undo :func:`experimental_enable_numpy_behavior` (for tests: TensorFlow has no
    way back)."""
    if not _Behaviour.enabled:
        return
    _set_operators(None)
    for (cls, n), v in list(_Behaviour.saved.items()):
        if v is _Behaviour:
            delattr(cls, n)
        else:
            setattr(cls, n, v)
    _Behaviour.saved.clear()
    _dt.DEFAULTS["array_api"]["alone"].update(_Behaviour.defaults)
    _Behaviour.defaults = None
    _Behaviour.enabled = False


def numpy_behavior_enabled():
    """Whether :func:`experimental_enable_numpy_behavior` was called."""
    return _Behaviour.enabled
