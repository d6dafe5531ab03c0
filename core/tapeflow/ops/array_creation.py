"""Creation ops: ``fill``, ``zeros``, ``ones``, ``zeros_like``, ``ones_like``, ``range``,
``eye``, ``linspace``, ``one_hot``; and the base of the other array modules
(``array_*.py``): their argument helpers (axes, shapes, scalars, indices, the device an
op on an input runs on, the builtins that ``range`` here and ``slice`` in
:mod:`tapeflow.ops.array_slice` shadow), the scalar fill values and the dtype matching
they use. The array ops are top-level names (``tf.zeros``), and names of
:mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> print(tf.one_hot([0, 2], 3))
tf.Tensor(
[[1. 0. 0.]
 [0. 0. 1.]], shape=(2, 3), dtype=float32)
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import convert_to_tensor, execute, run
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .composite import COMPOSITE_TYPES, dispatch
from . import math as _m
from .library import batch_axis, BROADCASTING, check_fits, defop, rerun

__all__ = ['fill', 'zeros', 'ones', 'zeros_like', 'ones_like', 'range', 'eye', 'linspace',
    'one_hot']

# --- argument helpers of the array modules (no op here) ------------------------------

# `range` (here) and `slice` (array_slice) shadow the builtins: keep them under other names.
_range = builtins.range
_slice = builtins.slice
_opindex = operator.index

def _index(v):
    """``operator.index`` whose error is a tapeflow error (still a TypeError)."""
    try:
        return operator.index(v)
    except TypeError:
        raise InvalidTypeError(f"expected an integer, got {type(v).__name__} "
                               f"{_shapes.short_repr(v)}") from None
_FULL = _slice(None)
_scopes = _devs.active_scopes


def _here(x=None):
    """The device an op on ``x`` runs on (for error messages raised before dispatch)."""
    d = getattr(x, "_device", None)
    return d if d is not None else (_devs.current_device() or _devs.default_device())


def _create(op, attrs):
    """Run a creation op (no tensor input) on the scope's or the default device."""
    return run(op, (), (_scopes[0] and _devs.current_device()) or _devs.default_device(), attrs)


def _tensor(x):
    """``x`` as a Tensor (Variables are read, hence watched)."""
    return x if type(x) is Tensor else convert_to_tensor(x)


def _ndim(x):
    if isinstance(x, (Tensor, Variable)):
        return x.ndim
    try:
        return np.ndim(x)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"Cannot convert {_shapes.short_repr(x)} to a tensor: {e}",
                                   device=_here()) from None


def _prod(xs):
    n = 1
    for s in xs:
        n *= s
    return n


def _shape_tuple(shape, op="Reshape"):
    """int / list / tuple / TensorShape / 1-D int tensor or array -> a tuple of ints (at
    most 64 of them: NumPy's and the devices' limit on dimensions)."""
    try:
        if isinstance(shape, (tuple, list)):
            out = tuple(map(_opindex, shape))       # (its TypeError is reworded below)
        else:
            if isinstance(shape, (Tensor, Variable)):
                shape = shape.numpy()
            if isinstance(shape, np.ndarray):
                if shape.ndim > 1 or shape.dtype.kind not in "iu":
                    raise TypeError
                out = tuple(shape.reshape(-1).tolist())
            else:
                out = (_index(shape),)
    except TypeError:
        raise InvalidArgumentError(
            f"shape must be an integer or a list of integers, got {_shapes.short_repr(shape)}",
            op=op, device=_here()) from None
    if len(out) > _shapes.MAX_RANK:
        _shapes.check_rank(out, op, _here())
    return out


def _norm_axis1(axis, nd, op, x=None, extra=0):
    """One axis in [-(nd+extra), nd+extra) -> a non-negative int (``x``: the input,
    for the device named in errors)."""
    if type(axis) is int and 0 <= axis < nd + extra:
        return axis
    return _shapes.normalize_axis(axis, nd + extra, op, _here(x))


def _scalar_arg(v, what, op):
    """A Python scalar from a Python/NumPy scalar or a one-element tensor."""
    if isinstance(v, (Tensor, Variable)):
        v = v.numpy()
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise InvalidArgumentError(f"{what} must be a scalar, got shape {v.shape}", op=op,
                                       device=_here())
        v = v.reshape(()).item()
    elif isinstance(v, np.generic):
        v = v.item()
    elif isinstance(v, (list, tuple)):
        raise InvalidArgumentError(f"{what} must be a scalar, got {v!r}", op=op, device=_here())
    return v


def _value_dtype(v):
    """The dtype a scalar value (Python, NumPy or tensor) would have as a tensor."""
    if isinstance(v, (Tensor, Variable)):
        return v.dtype
    if isinstance(v, (np.ndarray, np.generic)):
        return _dt.from_numpy(v.dtype)
    t = type(v)
    if t is builtins.bool:
        return _dt.bool_
    if t is int:
        return _dt.int32 if -2**31 <= v < 2**31 else _dt.int64
    if t is float:
        return _dt.float32
    return convert_to_tensor(v).dtype


def _weak(v):
    t = type(v)
    if t is float or t is int or t is builtins.bool:
        return v
    return None


def _check_fill_values(op, tensors, attrs, device, dtype=None):
    """Fill/PadV2/OneHot on every backend: their value attrs (``value``,
    ``constant_values``, ``on_value``/``off_value``) are numbers that the result's dtype
    (``dtype``, else the ``dtype`` attr, else float32) holds exactly (a complex value into
    a real dtype, 2.5 into int32: refused, as the public functions refuse them)."""
    dt = dtype or attrs.get("dtype") or _dt.float32
    for name in ("value", "constant_values", "on_value", "off_value"):
        if name in attrs:
            v = attrs[name]
            if not isinstance(v, (builtins.bool, int, float, complex, np.bool_, np.number)):
                raise InvalidTypeError(f"attr '{name}' of {op.name} must be a number, got "
                                       f"{type(v).__name__} {_shapes.short_repr(v)}")
            check_fits(v, dt, f"attr '{name}' of {op.name}:", op.name, device=device)


# --- creation ------------------------------------------------------------------------

def _fill_value(v, dtype, what, op, x=None):
    """A scalar fill value (``fill``'s ``value``, ``pad``'s ``constant_values``,
    ``one_hot``'s ``on_value``/``off_value``) as a Python number that ``dtype`` holds
    exactly: not a string or None, not a complex number into a real dtype (its
    imaginary part would be dropped), not 1.5 into an integer dtype. ``dtype`` None:
    the value's own. Returns ``(value, dtype)``."""
    s = _scalar_arg(v, what, op)
    if not isinstance(s, (builtins.bool, int, float, complex)):
        raise InvalidTypeError(f"{what} must be a number, got {type(s).__name__} "
                               f"{_shapes.short_repr(s)}", op=op, device=_here(x))
    dtype = _value_dtype(v) if dtype is None else _dt.as_dtype(dtype)
    check_fits(s, dtype, what, op, x)
    return s, dtype


def _match_dtypes(a, b):
    """Bring two operands to one dtype (the tf promotion lattice of docs/dtypes.md,
    Python scalars weak).

    Tensors are cast; other values become host arrays of the target dtype, which
    the dispatcher places with the tensors."""
    ta = isinstance(a, (Tensor, Variable))
    tb = isinstance(b, (Tensor, Variable))
    if ta and tb and a.dtype is b.dtype:
        return a, b
    args = []
    for v in (a, b):
        w = None if isinstance(v, (Tensor, Variable)) else _weak(v)
        args.append(_value_dtype(v) if w is None else w)
    target = _dt.result_type(*args)
    dev = None
    for v in (a, b):
        if isinstance(v, (Tensor, Variable)):
            dev = (_scopes[0] and _devs.current_device()) or v._device
    out = []
    for v, w in zip((a, b), args):
        if isinstance(v, (Tensor, Variable)):
            if v.dtype is not target:
                v = _m.cast(v, target)
        elif dev is not None and type(w) is not _dt.DType:
            # a Python scalar: filled on the device (no synchronous host-to-device copy)
            v = run(FILL, (), dev, {"shape": (), "value": v, "dtype": target})
        else:
            v = np.asarray(v, dtype=target.np)
        out.append(v)
    return out[0], out[1]


def _check_fill(op, tensors, attrs, device):
    _shapes.check_shape_attr(op, tensors, attrs, device)
    _check_fill_values(op, tensors, attrs, device)


FILL = defop("Fill", inputs=(), attrs={"shape": None, "value": 0, "dtype": None},
              dtype_from="dtype", differentiable=False, check=_check_fill,
              attr_types={"shape": "shape?"})


def fill(dims, value, dtype=None, name=None):
    """A tensor of shape ``dims`` filled with ``value`` (dtype from ``value``).

    >>> import tapeflow as tf
    >>> print(tf.fill([2], 7))
    tf.Tensor([7 7], shape=(2,), dtype=int32)
    """
    if type(dims) in COMPOSITE_TYPES:
        return dispatch(fill, dims, value, dtype, name)
    if isinstance(value, (str, bytes)) or getattr(value, "dtype", None) is _dt.string:
        return _string_fill(dims, value)          # (strings live on the host: issue 47)
    value, dt = _fill_value(value, dtype, "fill value", "Fill")
    return _create(FILL, {"shape": _shape_tuple(dims, "Fill"), "value": value, "dtype": dt})


def _string_fill(dims, value):
    v = value.numpy() if isinstance(value, Tensor) else value
    return convert_to_tensor(np.full(_shape_tuple(dims, "Fill"), v, dtype=object),
                             dtype=_dt.string)


def zeros(shape, dtype=_dt.float32, name=None):
    """Zeros of ``shape`` (float32 by default).

    >>> import tapeflow as tf
    >>> tf.zeros([1, 1, 784]).shape
    TensorShape([1, 1, 784])
    """
    if type(shape) in COMPOSITE_TYPES:
        return dispatch(zeros, shape, dtype, name)
    return _create(FILL, {"shape": _shape_tuple(shape, "Fill"), "value": 0,
                           "dtype": _dt.as_dtype(dtype)})


def ones(shape, dtype=_dt.float32, name=None):
    """Ones of ``shape`` (float32 by default).

    >>> import tapeflow as tf
    >>> print(tf.ones([2], tf.int64))
    tf.Tensor([1 1], shape=(2,), dtype=int64)
    """
    if type(shape) in COMPOSITE_TYPES:
        return dispatch(ones, shape, dtype, name)
    return _create(FILL, {"shape": _shape_tuple(shape, "Fill"), "value": 1,
                           "dtype": _dt.as_dtype(dtype)})


_ZEROS_LIKE = defop("ZerosLike", inputs=("x",), attrs={"dtype": None}, dtype_rule="none",
                    differentiable=False, batch=BROADCASTING)
_ONES_LIKE = defop("OnesLike", inputs=("x",), attrs={"dtype": None}, dtype_rule="none",
                   differentiable=False, batch=BROADCASTING)
_LIKE_NONE = {"dtype": None}


def _like(op, x, value, dtype):
    if _scopes[0] and _devs.current_device() is not None:
        # inside a device scope the result goes to the scope's device, not x's
        x = _tensor(x)
        dt = x.dtype if dtype is None else _dt.as_dtype(dtype)
        return _create(FILL, {"shape": tuple(x._data.shape), "value": value, "dtype": dt})
    if dtype is None:
        return execute(op, (x,), _LIKE_NONE)
    dt = _dt.as_dtype(dtype)
    return execute(op, (x,), {"dtype": None if dt is getattr(x, "dtype", None) else dt})


def zeros_like(input, dtype=None, name=None):
    """Zeros with the shape (and dtype, device) of ``input``.

    >>> import tapeflow as tf
    >>> print(tf.zeros_like([[1, 2]]))
    tf.Tensor([[0 0]], shape=(1, 2), dtype=int32)
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(zeros_like, input, dtype, name)
    return _like(_ZEROS_LIKE, input, 0, dtype)


def ones_like(input, dtype=None, name=None):
    """Ones with the shape (and dtype, device) of ``input``.

    >>> import tapeflow as tf
    >>> print(tf.ones_like([1., 2.]))
    tf.Tensor([1. 1.], shape=(2,), dtype=float32)
    """
    if type(input) in COMPOSITE_TYPES:
        return dispatch(ones_like, input, dtype, name)
    return _like(_ONES_LIKE, input, 1, dtype)


def _check_select(op, tensors, attrs, device):
    """SelectV2's condition is a bool tensor (as TensorFlow's): a float condition would
    be read as "non-zero" on one backend and refused by another."""
    if tensors[0].dtype is not _dt.bool_:
        raise InvalidArgumentError(
            f"condition must be a bool tensor, got {tensors[0].dtype.name}; compare it "
            "(x > 0) or tf.cast it to tf.bool")


def _check_range(op, tensors, attrs, device):
    """Range's signature check: finite real bounds, ``delta != 0`` pointing from
    ``start`` towards ``limit``, and a result that fits on the device."""
    start, limit, delta = attrs["start"], attrs["limit"], attrs["delta"]
    dt = attrs["dtype"] or _dt.int32
    for what, v in (("start", start), ("limit", limit), ("delta", delta)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)) \
                or isinstance(v, (complex, np.complexfloating)) or not (
                    isinstance(v, (int, np.integer)) or np.isfinite(v)):
            raise InvalidArgumentError(f"range: {what} must be a finite real number, got {v!r}")
        if dt.is_integer and isinstance(v, (int, np.integer)) and not dt.min <= v <= dt.max:
            raise InvalidArgumentError(
                f"range: {what} {v} does not fit in {dt.name} [{dt.min}, {dt.max}]; pass "
                f"{'dtype=tf.int64, ' if dt.size < 8 else ''}a float dtype or a smaller "
                "value")
    if delta == 0:
        raise InvalidArgumentError(f"Requires delta != 0: {delta}")
    if delta > 0 and start > limit:
        raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {start}/{limit}")
    if delta < 0 and start < limit:
        raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {start}/{limit}")
    n = int(np.ceil((limit - start) / delta))
    _shapes.check_allocation((n,), dt, device, op.name)


_RANGE = defop("Range", inputs=(), attrs={"start": 0, "limit": None, "delta": 1, "dtype": None},
               dtype_from="dtype", differentiable=False, check=_check_range)
_RANGE_ORDER = (_dt.int32, _dt.int64, _dt.float32, _dt.float64)


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001
    """``[start, start + delta, ...)`` up to ``limit`` (exclusive), TF semantics:
    integer arguments give int32, a float argument float32.

    >>> import tapeflow as tf
    >>> print(tf.range(5))
    tf.Tensor([0 1 2 3 4], shape=(5,), dtype=int32)
    >>> print(tf.range(1, 2, 0.25))
    tf.Tensor([1.   1.25 1.5  1.75], shape=(4,), dtype=float32)
    """
    if limit is None:
        start, limit = 0, start
    args = (start, limit, delta)
    if dtype is None:
        inferred = [_value_dtype(a) for a in args]
        dt = max(inferred, key=lambda d: _RANGE_ORDER.index(d) if d in _RANGE_ORDER else 0)
    else:
        dt = _dt.as_dtype(dtype)
    start, limit, delta = (_scalar_arg(a, "range argument", "Range") for a in args)
    return _create(_RANGE, {"start": start, "limit": limit, "delta": delta, "dtype": dt})


def _check_eye(op, tensors, attrs, device):
    """Eye's signature check: non-negative integer sizes that fit on the device."""
    r = _shapes.as_index(attrs["num_rows"], "num_rows", op.name, device)
    c = r if attrs["num_columns"] is None else _shapes.as_index(
        attrs["num_columns"], "num_columns", op.name, device)
    bs = _shapes.as_shape(attrs["batch_shape"] or (), op.name, device)
    if r < 0 or c < 0:
        raise InvalidArgumentError(
            f"eye: sizes must be non-negative, got num_rows={r}, num_columns={c}, "
            f"batch_shape={list(bs)}")
    _shapes.check_allocation(bs + (r, c), attrs["dtype"] or _dt.float32, device, op.name)


_EYE = defop("Eye", inputs=(), attrs={"num_rows": None, "num_columns": None,
                                      "batch_shape": (), "dtype": None},
             dtype_from="dtype", differentiable=False, check=_check_eye)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dt.float32, name=None):
    """Identity matrix (or a batch of them) of shape ``batch_shape + [rows, cols]``.

    >>> import tapeflow as tf
    >>> print(tf.eye(2))
    tf.Tensor(
    [[1. 0.]
     [0. 1.]], shape=(2, 2), dtype=float32)
    """
    r = _shapes.as_index(num_rows, "num_rows", "Eye", _here())
    c = r if num_columns is None else _shapes.as_index(num_columns, "num_columns", "Eye", _here())
    bs = () if batch_shape is None else _shapes.as_shape(batch_shape, "Eye", _here())
    return _create(_EYE, {"num_rows": r, "num_columns": c, "batch_shape": bs,
                          "dtype": _dt.as_dtype(dtype)})


_LINSPACE = defop("LinSpace", inputs=(), attrs={"start": None, "stop": None, "num": None,
                                                "dtype": None},
                  dtype_from="dtype", differentiable=False)


def linspace(start, stop, num, name=None, axis=0):
    """``num`` evenly spaced values from ``start`` to ``stop`` (both included).

    >>> import tapeflow as tf
    >>> print(tf.linspace(0., 1., 5))
    tf.Tensor([0.   0.25 0.5  0.75 1.  ], shape=(5,), dtype=float32)
    """
    dt = _value_dtype(start)
    if not dt.is_floating:
        dt = _dt.float32
    n = _shapes.as_index(_scalar_arg(num, "num", "LinSpace"), "num", "LinSpace", _here())
    if n < 0:
        raise InvalidArgumentError(f"Requires num >= 0: {n}", op="LinSpace", device=_here())
    _shapes.normalize_axis(axis, 1, "LinSpace", _here())      # scalar bounds: one axis
    bounds = []
    for what, v in (("start", start), ("stop", stop)):
        v = _scalar_arg(v, what, "LinSpace")
        if isinstance(v, (bool, complex)) or not isinstance(v, (int, float)):
            raise InvalidTypeError(f"linspace: {what} must be a real number, got "
                                   f"{_shapes.short_repr(v)}", op="LinSpace", device=_here())
        bounds.append(float(v))
    return _create(_LINSPACE, {"start": bounds[0], "stop": bounds[1], "num": n, "dtype": dt})


lin_space = linspace

_ONE_HOT = defop("OneHot", inputs=("indices",), attrs={"depth": None, "on_value": 1,
                                                       "off_value": 0, "axis": -1, "dtype": None},
                 dtype_rule="none", dtype_from="dtype", differentiable=False,
                 check=_check_fill_values, attr_types={"axis": "axis+1"})


@_ONE_HOT.def_batch
def _one_hot_batch(ctx, x):
    r = len(x.shape) - 1
    a = ctx.attrs["axis"]
    return rerun(ctx, (x,), axis=-1 if a == -1 else batch_axis(a, r + 1))


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """One-hot vectors: ``on_value`` where ``indices == i``, else ``off_value``, along a
    new axis of size ``depth`` (out-of-range and negative indices give all ``off_value``).

    >>> import tapeflow as tf
    >>> print(tf.one_hot([0, 2], 3))
    tf.Tensor(
    [[1. 0. 0.]
     [0. 0. 1.]], shape=(2, 3), dtype=float32)
    """
    on, off, dt = 1, 0, dtype
    if on_value is not None:
        on, dt = _fill_value(on_value, dt, "one_hot: on_value", "OneHot", indices)
    if off_value is not None:
        off, dt = _fill_value(off_value, dt, "one_hot: off_value", "OneHot", indices)
    dt = _dt.float32 if dt is None else _dt.as_dtype(dt)
    nd = _ndim(indices)
    a = nd if axis is None or (type(axis) is int and axis == -1) else _norm_axis1(
        axis, nd, "OneHot", indices, 1)
    d = _index(_scalar_arg(depth, "depth", "OneHot"))
    if d < 0:
        raise InvalidArgumentError(f"depth must be non-negative, got {d}", op="OneHot",
                                   device=_here(indices))
    return execute(_ONE_HOT, (indices,), {"depth": d, "on_value": on, "off_value": off,
                                          "axis": a, "dtype": dt})
