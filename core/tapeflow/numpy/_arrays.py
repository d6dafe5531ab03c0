"""``tapeflow.numpy``'s arrays as wholes: the creation functions (``asarray``, ``zeros``,
``arange``, ``eye``, ``from_dlpack`` ...), ``astype``, the manipulation functions
(``concat``, ``reshape``, ``stack``, ``roll`` ...) and the linear algebra of the main
namespace (``matmul``, ``tensordot``, ``vecdot``)."""

from __future__ import annotations

import builtins as _builtins
import math as _math

import numpy as _np

from .. import ops as _ops
from .. import ops as _A
from ..ops import linalg as _L
from ..ops import math as _M
from ..ops import matmul_vectors as _matmul_vectors
from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime.dispatch import constant as _constant
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..runtime.tensor import Tensor as _Tensor
from ..runtime.tensor import wrap
from ..runtime.variable import Variable as _Variable
from ._elementwise import (_as_dtype, _default_float, _pair, _scalar_dtype, _t, int64,
                           result_type)


# --- creation --------------------------------------------------------------------------------

class _on:
    """``with tf.device(device)`` when a ``device=`` keyword is given."""

    def __init__(self, device):
        self.ctx = None if device is None else _devs.device(str(device))

    def __enter__(self):
        if self.ctx is not None:
            self.ctx.__enter__()

    def __exit__(self, *exc):
        if self.ctx is not None:
            return self.ctx.__exit__(*exc)


def asarray(obj, /, *, dtype=None, device=None, copy=None):
    """A tensor from a tensor, array, nested sequence or scalar. ``copy=False`` refuses
    to copy; a tensor already of the requested dtype and device is returned as it is
    unless ``copy=True``, which gives a new tensor object (``x[key] = value`` on one
    then leaves the other as it was)."""
    dtype = _as_dtype(dtype)
    with _on(device):
        if isinstance(obj, (_Tensor, _Variable)):
            t = _t(obj)
            if dtype is not None and t.dtype is not dtype:
                if copy is False:
                    raise InvalidArgumentError(
                        f"asarray(copy=False): converting {t.dtype.name} to {dtype.name} "
                        "needs a copy")
                t = _M.cast(t, dtype)
            if device is not None and t.device != str(_devs.get_device(str(device)).name):
                if copy is False:
                    raise InvalidArgumentError("asarray(copy=False): moving to another "
                                               "device needs a copy")
                t = t.to(str(device))
            elif copy and t is obj:
                t = _A.identity(t)
            return t
        if dtype is None and not isinstance(obj, (_np.ndarray, _np.generic)):
            # Python data: the namespace's default dtypes (int64, float32 or NumPy's
            # float64: _default_float), not tapeflow.constant's int32
            kind = _np.asarray(obj).dtype.kind
            dtype = int64 if kind in "iu" else _default_float() if kind == "f" else None
        elif dtype is not None and isinstance(obj, (list, tuple)) and not _np.size(obj):
            obj = _np.empty(_np.shape(obj), dtype.np)     # [] holds no float to refuse
        return _constant(obj, dtype=dtype)


def _full(shape, value, dtype, device):
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    with _on(device):
        return _A.fill(list(shape), _constant(value, dtype=dtype))


def zeros(shape, *, dtype=None, device=None):
    return _full(shape, 0, _as_dtype(dtype) or _default_float(), device)


def ones(shape, *, dtype=None, device=None):
    return _full(shape, 1, _as_dtype(dtype) or _default_float(), device)


def empty(shape, *, dtype=None, device=None):
    """Uninitialised memory is not a thing tapeflow hands out: zeros."""
    return zeros(shape, dtype=dtype, device=device)


def full(shape, fill_value, *, dtype=None, device=None):
    dt = _as_dtype(dtype) or _scalar_dtype(fill_value)
    return _full(shape, fill_value, dt, device)


def _like(x, dtype, device):
    x = _t(x)
    return tuple(int(d) for d in x.shape), _as_dtype(dtype) or x.dtype, device or x.device


def zeros_like(x, /, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, 0, d, dev)


def ones_like(x, /, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, 1, d, dev)


def empty_like(x, /, *, dtype=None, device=None):
    return zeros_like(x, dtype=dtype, device=device)


def full_like(x, /, fill_value, *, dtype=None, device=None):
    s, d, dev = _like(x, dtype, device)
    return _full(s, fill_value, d, dev)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    """Evenly spaced values in ``[start, stop)``."""
    if stop is None:
        start, stop = 0, start
    if _builtins.any(isinstance(v, (complex, _np.complexfloating)) or not isinstance(
            v, (int, float, _np.integer, _np.floating)) for v in (start, stop, step)):
        raise InvalidTypeError(f"arange needs real numbers, got start={start!r}, "
                               f"stop={stop!r}, step={step!r}")
    dt = _as_dtype(dtype) or (_default_float() if _builtins.any(
        isinstance(v, float) for v in (start, stop, step)) else int64)
    n = _builtins.max(0, int(_math.ceil((stop - start) / step)))
    with _on(device):
        return _constant(_np.arange(n, dtype=_np.float64) * step + start, dtype=dt) \
            if dt.is_floating else _constant(start + step * _np.arange(n), dtype=dt)


def _count(v, what, fn, allow_none=False):
    """``v`` checked as a non-negative int (None passes where ``allow_none``)."""
    if isinstance(v, (_Tensor, _Variable)) and v.dtype.is_integer and v.ndim == 0:
        v = int(v)
    if (v is None and allow_none) or (isinstance(v, (int, _np.integer)) and not isinstance(
            v, (bool, _np.bool_)) and v >= 0):
        return v
    raise InvalidArgumentError(f"{fn}: {what} must be a non-negative int, got {v!r}")


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    num = _count(num, "num", "linspace")
    dt = _as_dtype(dtype) or _default_float(
        complex if _builtins.any(isinstance(v, complex) for v in (start, stop)) else float)
    with _on(device):
        return _constant(_np.linspace(start, stop, num, endpoint=endpoint), dtype=dt)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    n_rows = _count(n_rows, "n_rows", "eye")
    n_cols = _count(n_cols, "n_cols", "eye", allow_none=True)
    if isinstance(k, (bool, _np.bool_)) or not isinstance(k, (int, _np.integer)):
        raise InvalidArgumentError(f"eye: k must be an int (the diagonal's offset), got {k!r}")
    dt = _as_dtype(dtype) or _default_float()
    with _on(device):
        return _constant(_np.eye(n_rows, n_cols, k=k, dtype=dt.np), dtype=dt)


def _band(x, k, lower):
    x = _t(x)
    n, m = int(x.shape[-2]), int(x.shape[-1])
    mask = _np.tril(_np.ones((n, m), _np.bool_), k) if lower else \
        _np.triu(_np.ones((n, m), _np.bool_), k)
    return _A.where(_constant(mask, device=x.device), x, zeros_like(x))


def tril(x, /, *, k=0):
    """The lower triangle (at and below diagonal ``k``) of the last two axes."""
    return _band(x, k, True)


def triu(x, /, *, k=0):
    """The upper triangle (at and above diagonal ``k``) of the last two axes."""
    return _band(x, k, False)


def meshgrid(*arrays, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    ts = [_t(a) for a in arrays]
    shape = [int(t.shape[0]) for t in ts]
    if indexing == "xy" and len(ts) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
        axis = i
        if indexing == "xy" and len(ts) > 1 and i < 2:
            axis = 1 - i
        view = [1] * len(ts)
        view[axis] = shape[axis]
        out.append(_A.broadcast_to(_A.reshape(t, view), shape))
    return out


#: DLPack device types -> tapeflow device types (kDLCPU, kDLCUDA, kDLCUDAHost)
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cpu"}


def from_dlpack(x, /, *, device=None, copy=None):
    """A tensor over ``x``'s memory through DLPack (NumPy, CuPy, PyTorch, JAX...): host
    memory becomes a ``cpu:0`` tensor, CUDA memory a ``cuda:N`` one, with no copy unless
    ``copy=True`` or ``device`` names another device. Without a copy the tensor *shares*
    the producer's memory (writes to the source show in it, as for every DLPack
    consumer); ``copy=False`` refuses to copy.

    >>> import numpy as np, tapeflow.numpy as tnp
    >>> a = np.arange(3.0)
    >>> t = tnp.from_dlpack(a)
    >>> print(t)
    tf.Tensor([0. 1. 2.], shape=(3,), dtype=float64)
    """
    if isinstance(x, (_Tensor, _Variable)) and not hasattr(_t(x)._data, "__dlpack__"):
        # a tapeflow tensor of a backend without DLPack (OpenCL), whose __dlpack__ is a
        # host copy: it stays on its device (a new tensor object over the same buffer,
        # which nothing outside tapeflow can write), or moves to ``device``
        t = _t(x)
        if device is not None and _devs.get_device(str(device)).name != t.device:
            if copy is False:
                raise InvalidArgumentError(f"from_dlpack(copy=False) cannot move "
                                           f"{_devs.get_device(str(t.device)).name} "
                                           f"memory to {device}")
            return t.to(str(device))
        return _A.identity(t)
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgumentError(f"from_dlpack needs an object with __dlpack__, got "
                                   f"{type(x).__name__}")
    kind, index = (int(v) for v in x.__dlpack_device__())
    if kind not in _DLPACK_DEVICES:
        raise UnimplementedError(f"from_dlpack: DLPack device type {kind} (index {index}) has "
                                 "no tapeflow backend; copy it to the host first")
    src = _devs.get_device(f"{_DLPACK_DEVICES[kind]}:{0 if kind == 3 else index}")
    dst = src if device is None else _devs.get_device(str(device))
    try:
        data = src.backend.from_dlpack(x, src)
    except NotImplementedError as e:
        raise UnimplementedError(f"from_dlpack on {src.name}: {e}") from None
    except (BufferError, TypeError, ValueError) as e:      # the producer's refusal
        raise InvalidArgumentError(f"from_dlpack: {type(x).__name__} cannot be imported: "
                                   f"{e}") from None
    _dt.from_numpy(data.dtype)                    # a dtype tapeflow has, or a clear error
    if dst is not src:
        if copy is False:
            raise InvalidArgumentError(f"from_dlpack(copy=False) cannot move {src.name} memory "
                                       f"to {dst.name}")
        return wrap(data, src).to(dst.name)
    return wrap(data.copy() if copy else data, src)


# --- data types --------------------------------------------------------------------------------

def astype(x, dtype, /, *, copy=True, device=None):
    x = _t(x)
    dt = _dt.as_dtype(dtype)
    if x.dtype.is_complex and not dt.is_complex:
        if not dt.is_bool:
            raise InvalidTypeError(
                f"astype: complex ({x.dtype.name}) to {dt.name} is not allowed by the standard "
                "(it would drop the imaginary part); take tnp.real(x) or tnp.abs(x) first")
        out = _M.not_equal(x, 0)                                   # nonzero, as NumPy
    else:
        out = x if x.dtype is dt else _M.cast(x, dt)
    if device is not None:
        out = out.to(str(device))
    if copy and out is x:
        out = _A.identity(x)          # a new object: x[key] = value leaves it unchanged
    return out


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
