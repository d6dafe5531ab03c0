"""Shape, creation and indexing ops (``reshape``, ``zeros``, ``gather``, ``x[i]`` ...).

Public functions normalise their attributes (axes as non-negative ints, shapes as
tuples of ints, dtypes as :class:`~tapeflow.dtypes.DType`) and call ``execute``;
kernels live in the backends. Gradients are written with tapeflow ops, so they
are differentiable again.

>>> import tapeflow as tf
>>> print(tf.reshape(tf.range(6), [2, 3]))
tf.Tensor(
[[0 1 2]
 [3 4 5]], shape=(2, 3), dtype=int32)
>>> x = tf.constant([[1., 2., 3.], [4., 5., 6.]])
>>> print(x[:, ::-1][0])
tf.Tensor([3. 2. 1.], shape=(3,), dtype=float32)
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from ..runtime import devices as _devs
from ..runtime import dtypes as _dt
from ..runtime import shapes as _shapes
from ._library import (BROADCASTING, batch_axis, batch_one_axis, batch_with_shape,
                       check_fits, defop, elementwise_jvp, flag, rerun)
from ..runtime.registry import REQUIRED, Linear
from ..runtime import context as _ctx
from ..runtime.errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from ..runtime.dispatch import _run, as_tensor_list, constant, convert_to_tensor, execute
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import math as _m
from . import reductions as _r

__all__ = [
    # creation
    "fill", "zeros", "ones", "zeros_like", "ones_like", "range", "eye", "linspace", "one_hot",
    # shapes
    "reshape", "transpose", "expand_dims", "squeeze", "concat", "stack", "unstack", "split",
    "tile", "broadcast_to", "pad", "slice", "strided_slice", "shape", "size", "rank",
    # selection and indexing
    "where", "boolean_mask", "gather", "gather_nd", "scatter_nd", "unsorted_segment_sum",
    # values
    "identity", "stop_gradient", "clip_by_value", "clip_by_norm", "clip_by_global_norm",
    # sorting and scans
    "argsort", "sort", "cumsum", "cumprod", "searchsorted", "unique_all", "nonzero",
]

# This module defines `range` and `slice`: keep the builtins under other names.
_range = builtins.range
_slice = builtins.slice
_opindex = operator.index


def unbroadcast(g, shape):
    """Sum ``g`` down to ``shape`` (the inverse of NumPy broadcasting)."""
    gshape = g._data.shape
    lead = len(gshape) - len(shape)
    axes = list(_range(lead))
    for i, d in enumerate(shape):
        if d == 1 and gshape[lead + i] != 1:
            axes.append(lead + i)
    if axes:
        g = _m.reduce_sum(g, axis=axes)
    if tuple(g._data.shape) != tuple(shape):
        g = reshape(g, shape)
    return g


def _index(v):
    """``operator.index`` whose error is a tapeflow error (still a TypeError)."""
    try:
        return operator.index(v)
    except TypeError:
        raise InvalidTypeError(f"expected an integer, got {type(v).__name__} "
                               f"{_shapes._short(v)}") from None
_FULL = _slice(None)
_scopes = _devs._active_scopes


# --- helpers -------------------------------------------------------------------------

def _here(x=None):
    """The device an op on ``x`` runs on (for error messages raised before dispatch)."""
    d = getattr(x, "_device", None)
    return d if d is not None else (_devs.current_device() or _devs.default_device())


def _create(op, attrs):
    """Run a creation op (no tensor input) on the scope's or the default device."""
    return _run(op, (), (_scopes[0] and _devs.current_device()) or _devs.default_device(), attrs)


def _tensor(x):
    """``x`` as a Tensor (Variables are read, hence watched)."""
    return x if type(x) is Tensor else convert_to_tensor(x)


def _ndim(x):
    if isinstance(x, (Tensor, Variable)):
        return x.ndim
    try:
        return np.ndim(x)
    except (ValueError, TypeError) as e:
        raise InvalidArgumentError(f"Cannot convert {_shapes._short(x)} to a tensor: {e}",
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
            out = tuple(map(_index, shape))
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
            f"shape must be an integer or a list of integers, got {_shapes._short(shape)}",
            op=op, device=_here()) from None
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


def _fill_value(v, dtype, what, op, x=None):
    """A scalar fill value (``fill``'s ``value``, ``pad``'s ``constant_values``,
    ``one_hot``'s ``on_value``/``off_value``) as a Python number that ``dtype`` holds
    exactly: not a string or None, not a complex number into a real dtype (its
    imaginary part would be dropped), not 1.5 into an integer dtype. ``dtype`` None:
    the value's own. Returns ``(value, dtype)``."""
    s = _scalar_arg(v, what, op)
    if not isinstance(s, (builtins.bool, int, float, complex)):
        raise InvalidTypeError(f"{what} must be a number, got {type(s).__name__} "
                               f"{_shapes._short(s)}", op=op, device=_here(x))
    dtype = _value_dtype(v) if dtype is None else _dt.as_dtype(dtype)
    check_fits(s, dtype, what, op, x)
    return s, dtype


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


def _match_dtypes(a, b):
    """Bring two operands to one dtype (NumPy 2 promotion, Python scalars weak).

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
            v = _run(_FILL, (), dev, {"shape": (), "value": v, "dtype": target})
        else:
            v = np.asarray(v, dtype=target.np)
        out.append(v)
    return out[0], out[1]


# --- batching helpers (tf.vectorized_map): the batch is dimension 0 ---------------------
# (here because they reshape and broadcast: the rules of linalg and nn use them too)

def batch_all(ctx, inputs):
    """Every input with the batch in front (unbatched ones broadcast to it)."""
    return tuple(x if b else broadcast_to(x, (ctx.size,) + tuple(x.shape))
                 for x, b in zip(inputs, ctx.batched))


def batch_fold(x):
    """(B, N, ...) -> (B*N, ...): the batch joins an op's own batch dimension."""
    s = tuple(x.shape)
    return reshape(x, (s[0] * s[1],) + s[2:])


def batch_unfold(y, b):
    """(B*N, ...) -> (B, N, ...)."""
    s = tuple(y.shape)
    return reshape(y, (b, s[0] // b if b else 0) + s[1:])


def batch_leading(ctx, inputs, core):
    """Inputs with identical leading (batch) dimensions, the batch first, for ops that
    need them equal: each keeps its last ``core`` dimensions."""
    inputs = batch_all(ctx, inputs)
    lead = np.broadcast_shapes(*[tuple(x.shape[1:len(x.shape) - core]) for x in inputs])
    out = []
    for x in inputs:
        s = tuple(x.shape)
        want = (s[0],) + tuple(lead) + s[len(s) - core:]
        if s != want:
            pad = len(want) - len(s)
            x = broadcast_to(reshape(x, s[:1] + (1,) * pad + s[1:]), want)
        out.append(x)
    return tuple(out)


def batch_coords(ctx, indices):
    """``indices`` (B, ..., K) with the example's index prepended: (B, ..., K+1)."""
    s = tuple(indices.shape)
    ids = np.arange(ctx.size, dtype=indices.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1))
    ids = constant(np.broadcast_to(ids, s[:-1] + (1,)).copy(), device=indices._device)
    return concat([ids, indices], axis=-1)


# --- creation ------------------------------------------------------------------------

def _check_fill_values(op, tensors, attrs, device):
    """Fill/PadV2/OneHot on every backend: their value attrs (``value``,
    ``constant_values``, ``on_value``/``off_value``) are numbers that the result's dtype
    holds exactly (a complex value into a real dtype, 2.5 into int32: refused, as the
    public functions refuse them)."""
    dt = attrs.get("dtype") or (tensors[0].dtype if op is _PAD else _dt.float32)
    for name in ("value", "constant_values", "on_value", "off_value"):
        if name in attrs:
            v = attrs[name]
            if not isinstance(v, (builtins.bool, int, float, complex, np.bool_, np.number)):
                raise InvalidTypeError(f"attr '{name}' of {op.name} must be a number, got "
                                       f"{type(v).__name__} {_shapes._short(v)}")
            check_fits(v, dt, f"attr '{name}' of {op.name}:", op.name, device=device)


def _check_fill(op, tensors, attrs, device):
    _shapes.check_shape_attr(op, tensors, attrs, device)
    _check_fill_values(op, tensors, attrs, device)


_FILL = defop("Fill", inputs=(), attrs={"shape": None, "value": 0, "dtype": None},
              dtype_from="dtype", differentiable=False, check=_check_fill,
              attr_types={"shape": "shape?"})


def fill(dims, value, dtype=None, name=None):
    """A tensor of shape ``dims`` filled with ``value`` (dtype from ``value``).

    >>> import tapeflow as tf
    >>> print(tf.fill([2], 7))
    tf.Tensor([7 7], shape=(2,), dtype=int32)
    """
    value, dt = _fill_value(value, dtype, "fill value", "Fill")
    return _create(_FILL, {"shape": _shape_tuple(dims, "Fill"), "value": value, "dtype": dt})


def zeros(shape, dtype=_dt.float32, name=None):
    """Zeros of ``shape`` (float32 by default).

    >>> import tapeflow as tf
    >>> tf.zeros([1, 1, 784]).shape
    TensorShape([1, 1, 784])
    """
    return _create(_FILL, {"shape": _shape_tuple(shape, "Fill"), "value": 0,
                           "dtype": _dt.as_dtype(dtype)})


def ones(shape, dtype=_dt.float32, name=None):
    """Ones of ``shape`` (float32 by default).

    >>> import tapeflow as tf
    >>> print(tf.ones([2], tf.int64))
    tf.Tensor([1 1], shape=(2,), dtype=int64)
    """
    return _create(_FILL, {"shape": _shape_tuple(shape, "Fill"), "value": 1,
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
        return _create(_FILL, {"shape": tuple(x._data.shape), "value": value, "dtype": dt})
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
    return _like(_ZEROS_LIKE, input, 0, dtype)


def ones_like(input, dtype=None, name=None):
    """Ones with the shape (and dtype, device) of ``input``.

    >>> import tapeflow as tf
    >>> print(tf.ones_like([1., 2.]))
    tf.Tensor([1. 1.], shape=(2,), dtype=float32)
    """
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
                                   f"{_shapes._short(v)}", op="LinSpace", device=_here())
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


# --- reshaping -----------------------------------------------------------------------

def _reshape_grad(ctx, dy):
    return execute(_RESHAPE, (dy,), {"shape": ctx.inputs[0]._data.shape})


def _reshape_infer(shapes, dtypes, attrs):
    s = tuple(shapes[0])
    new = tuple(attrs["shape"])
    n = _prod(s)
    if any(d < -1 for d in new) or new.count(-1) > 1:
        raise InvalidArgumentError(
            f"Cannot reshape a tensor of shape {s} to shape {new}: at most one dimension may "
            "be -1 and the others must be non-negative")
    known = _prod(d for d in new if d != -1)
    if -1 in new:
        if known == 0 or n % known:
            raise InvalidArgumentError(
                f"Input to reshape is a tensor of shape {s} with {n} values, but the requested "
                f"shape {new} needs a multiple of {known} values")
        new = tuple(n // known if d == -1 else d for d in new)
    elif known != n:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor of shape {s} with {n} values, but the requested "
            f"shape {new} has {known}")
    return [(new, dtypes[0])]


_RESHAPE = defop("Reshape", inputs=("x",), attrs={"shape": REQUIRED}, dtype_rule="none",
                 grad=_reshape_grad, infer=_reshape_infer,
                 attr_types={"shape": "reshape"}, jvp=Linear(), batch=batch_with_shape)


def reshape(tensor, shape, name=None):
    """Same values, new shape (one dimension may be -1).

    >>> import tapeflow as tf
    >>> tf.reshape([1, 2, 3, 4], [-1, 2]).shape
    TensorShape([2, 2])
    """
    if type(shape) is tuple or type(shape) is list:
        try:
            s = tuple(map(_opindex, shape))       # (the builtin: this is hot)
        except TypeError:
            s = _shape_tuple(shape, "Reshape")
    else:
        s = _shape_tuple(shape, "Reshape")
    if len(s) > _shapes.MAX_RANK:
        _shapes.check_rank(s, "Reshape", _here(tensor))
    if s and min(s) < -1:
        raise InvalidArgumentError(
            f"Cannot reshape to {list(s)}: sizes must be non-negative, or -1 for one size "
            "inferred from the others", op="Reshape", device=_here(tensor))
    return execute(_RESHAPE, (tensor,), {"shape": s})


def _broadcast_to_grad(ctx, dy):
    return unbroadcast(dy, tuple(ctx.inputs[0].shape))


def _broadcast_to_infer(shapes, dtypes, attrs):
    s = tuple(shapes[0])
    new = tuple(attrs["shape"])
    ok = len(s) <= len(new) and all(a == b or a == 1 for a, b in zip(s[::-1], new[::-1]))
    if not ok:
        raise InvalidArgumentError(f"Unable to broadcast tensor of shape {s} to shape {new}")
    return [(new, dtypes[0])]


_BROADCAST_TO = defop("BroadcastTo", inputs=("x",), attrs={"shape": None}, dtype_rule="none",
                      grad=_broadcast_to_grad, infer=_broadcast_to_infer,
                      check=_shapes.check_shape_attr, jvp=Linear())


@_BROADCAST_TO.def_batch
def _broadcast_to_batch(ctx, x):
    shape = tuple(ctx.attrs["shape"])
    s = tuple(x.shape)
    x = reshape(x, s[:1] + (1,) * (len(shape) - len(s) + 1) + s[1:])
    return rerun(ctx, (x,), shape=(ctx.size,) + shape)


def broadcast_to(input, shape, name=None):
    """Broadcast ``input`` to ``shape`` (NumPy rules).

    >>> import tapeflow as tf
    >>> print(tf.broadcast_to([1, 2], [2, 2]))
    tf.Tensor(
    [[1 2]
     [1 2]], shape=(2, 2), dtype=int32)
    """
    return execute(_BROADCAST_TO, (input,), {"shape": _shape_tuple(shape, "BroadcastTo")})


def _transpose_grad(ctx, dy):
    perm = ctx.attrs["perm"]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return execute(_TRANSPOSE, (dy,), {"perm": tuple(inv)})


_TRANSPOSE = defop("Transpose", inputs=("x",), attrs={"perm": None}, dtype_rule="none",
                   grad=_transpose_grad, jvp=Linear())


@_TRANSPOSE.def_batch
def _transpose_batch(ctx, x):
    perm = ctx.attrs["perm"]
    r = len(x.shape) - 1
    perm = tuple(_range(r))[::-1] if perm is None else perm
    return rerun(ctx, (x,), perm=(0,) + tuple(p + 1 for p in perm))


def transpose(a, perm=None, conjugate=False, name="transpose"):
    """Permute dimensions (``perm=None`` reverses them); ``conjugate=True`` also
    conjugates a complex tensor.

    >>> import tapeflow as tf
    >>> tf.transpose(tf.zeros([2, 3, 4]), [2, 0, 1]).shape
    TensorShape([4, 2, 3])
    """
    if conjugate is not False and flag(conjugate, "transpose: conjugate", "Transpose", a):
        return _m.conj(transpose(a, perm))
    nd = _ndim(a)
    if perm is None:
        p = tuple(_range(nd - 1, -1, -1))
    else:
        if not isinstance(perm, (list, tuple)) and len(getattr(perm, "shape", ())) != 1:
            raise InvalidTypeError(f"transpose: perm must be a list of {nd} dimensions, got "
                                   f"{_shapes._short(perm)}", op="Transpose", device=_here(a))
        p = tuple(d + nd if d < 0 else d for d in
                  (_shapes.as_index(v, "perm", "Transpose", _here(a))
                   for v in (perm.numpy().tolist() if hasattr(perm, "numpy") else
                             np.asarray(perm).tolist() if hasattr(perm, "shape") else perm)))
        if sorted(p) != list(_range(nd)):
            raise InvalidArgumentError(
                f"transpose: perm {list(p)} is not a permutation of the {nd} dimensions of "
                "the input", op="Transpose", device=_here(a))
    return execute(_TRANSPOSE, (a,), {"perm": p})


def _as_input_shape(ctx, dy):
    return execute(_RESHAPE, (dy,), {"shape": ctx.inputs[0]._data.shape})


_EXPAND_DIMS = defop("ExpandDims", inputs=("x",), attrs={"axis": 0}, dtype_rule="none",
                     grad=_as_input_shape, attr_types={"axis": "axis+1"}, jvp=Linear())


@_EXPAND_DIMS.def_batch
def _expand_dims_batch(ctx, x):
    return rerun(ctx, (x,), axis=batch_axis(ctx.attrs["axis"], len(x.shape)))


def expand_dims(input, axis, name=None):
    """Insert a dimension of size 1 at ``axis`` (``-1`` appends).

    >>> import tapeflow as tf
    >>> tf.expand_dims([1, 2], -1).shape
    TensorShape([2, 1])
    """
    a = _norm_axis1(axis, _ndim(input), "ExpandDims", input, 1)
    return execute(_EXPAND_DIMS, (input,), {"axis": a})


_SQUEEZE = defop("Squeeze", inputs=("x",), attrs={"axis": None}, dtype_rule="none",
                 grad=_as_input_shape, jvp=Linear())


@_SQUEEZE.def_batch
def _squeeze_batch(ctx, x):
    axis = ctx.attrs["axis"]
    r = len(x.shape) - 1
    if axis is None:
        axis = tuple(i for i, d in enumerate(x.shape[1:]) if d == 1)
    return rerun(ctx, (x,), axis=tuple(batch_axis(a, r) for a in axis))


def squeeze(input, axis=None, name=None, squeeze_dims=None):
    """Remove dimensions of size 1 (all of them, or those in ``axis``).

    >>> import tapeflow as tf
    >>> tf.squeeze(tf.zeros([1, 2, 1])).shape, tf.squeeze(tf.zeros([1, 2, 1]), [-1]).shape
    (TensorShape([2]), TensorShape([1, 2]))
    """
    if axis is None:
        axis = squeeze_dims
    if axis is None:
        return execute(_SQUEEZE, (input,), {"axis": None})
    x = _tensor(input)
    s = x._data.shape
    axes = (axis,) if not isinstance(axis, (list, tuple)) else axis
    out = tuple(sorted({_norm_axis1(a, len(s), "Squeeze", x) for a in axes}))
    for a in out:
        if s[a] != 1:
            raise InvalidArgumentError(
                f"Can not squeeze dim[{a}], expected a dimension of 1, got {s[a]}",
                op="Squeeze", device=x._device)
    return execute(_SQUEEZE, (x,), {"axis": out})


# --- joining and splitting -------------------------------------------------------------

def _concat_grad(ctx, dy):
    axis = ctx.attrs["axis"]
    sizes = tuple(t._data.shape[axis] for t in ctx.inputs)
    return execute(_SPLIT, (dy,), {"size_splits": sizes, "axis": axis})


def _concat_infer(shapes, dtypes, attrs):
    axis = attrs["axis"]
    s0 = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        s = tuple(s)
        if len(s) != len(s0):
            raise InvalidArgumentError(
                f"ConcatOp : Ranks of all input tensors should match: shape[0] = {list(s0)} vs. "
                f"shape[{i}] = {list(s)}")
        for d, (a, b) in enumerate(zip(s0, s)):
            if d != axis and a != b:
                raise InvalidArgumentError(
                    f"ConcatOp : Dimension {d} in both shapes must be equal: shape[0] = "
                    f"{list(s0)} vs. shape[{i}] = {list(s)}")
    out = list(s0)
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), dtypes[0])]


_CONCAT = defop("ConcatV2", inputs=("*values",), attrs={"axis": 0}, grad=_concat_grad,
                infer=_concat_infer, jvp=Linear())


@_CONCAT.def_batch
def _concat_batch(ctx, *xs):
    return rerun(ctx, batch_all(ctx, xs),
                 axis=batch_axis(ctx.attrs["axis"], len(xs[0].shape) - ctx.batched[0]))


def concat(values, axis, name="concat"):
    """Join tensors along an existing ``axis``.

    >>> import tapeflow as tf
    >>> print(tf.concat([[[1, 2]], [[3, 4]]], 0))
    tf.Tensor(
    [[1 2]
     [3 4]], shape=(2, 2), dtype=int32)
    """
    vals = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if not vals:
        raise InvalidArgumentError("concat needs at least one tensor", op="ConcatV2",
                                   device=_here())
    nd = _ndim(vals[0])
    a = _norm_axis1(axis, nd, "ConcatV2", vals[0])
    if len(vals) == 1:
        return identity(vals[0])
    return execute(_CONCAT, vals, {"axis": a})


def _stack_grad(ctx, dy):
    return execute(_UNSTACK, (dy,), {"num": len(ctx.inputs), "axis": ctx.attrs["axis"]})


def _stack_infer(shapes, dtypes, attrs):
    s0 = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s) != s0:
            raise InvalidArgumentError(
                f"Shapes of all inputs must match: values[0].shape = {list(s0)} != "
                f"values[{i}].shape = {list(s)}")
    out = list(s0)
    out.insert(attrs["axis"], len(shapes))
    return [(tuple(out), dtypes[0])]


_STACK = defop("Pack", inputs=("*values",), attrs={"axis": 0}, grad=_stack_grad,
               infer=_stack_infer, attr_types={"axis": "axis+1"}, jvp=Linear())


@_STACK.def_batch
def _stack_batch(ctx, *xs):
    r = len(xs[0].shape) - ctx.batched[0]
    return rerun(ctx, batch_all(ctx, xs), axis=batch_axis(ctx.attrs["axis"], r + 1))


def stack(values, axis=0, name="stack"):
    """Stack tensors of one shape along a new ``axis``.

    >>> import tapeflow as tf
    >>> tf.stack([[1, 2], [3, 4], [5, 6]], axis=1).shape
    TensorShape([2, 3])
    """
    vals = as_tensor_list(values, "Pack", "stack's values")
    if not vals:
        raise InvalidArgumentError("stack needs at least one tensor", op="Pack", device=_here())
    a = _norm_axis1(axis, _ndim(vals[0]), "Pack", vals[0], 1)
    return execute(_STACK, vals, {"axis": a})


def _unstack_grad(ctx, *dys):
    return execute(_STACK, dys, {"axis": ctx.attrs["axis"]})


def _check_unstack(op, tensors, attrs, device):
    shape = tensors[0]._data.shape
    if not shape:
        raise InvalidArgumentError("Input must be at least rank 1 to unstack, got a scalar")
    if attrs["num"] != shape[attrs["axis"]]:
        raise InvalidArgumentError(
            f"num={attrs['num']} but the input has {shape[attrs['axis']]} elements along axis "
            f"{attrs['axis']} (shape {list(shape)})")


_UNSTACK = defop("Unpack", inputs=("x",), attrs={"num": None, "axis": 0}, dtype_rule="none",
                 check=_check_unstack,
                 num_outputs=lambda attrs, n: attrs["num"], grad=_unstack_grad,
                 jvp=Linear(), batch=batch_one_axis)


def unstack(value, num=None, axis=0, name="unstack"):
    """Split ``value`` along ``axis`` into a list of tensors of one rank less.

    >>> import tapeflow as tf
    >>> a, b = tf.unstack([[1, 2], [3, 4]], axis=1)
    >>> print(a)
    tf.Tensor([1 3], shape=(2,), dtype=int32)
    """
    x = _tensor(value)
    s = x._data.shape
    a = _norm_axis1(axis, len(s), "Unpack", x)
    n = s[a]
    if num is not None and _shapes.as_index(num, "num", "Unpack", x._device) != n:
        raise InvalidArgumentError(
            f"unstack: num={num} does not match dimension {a} of size {n}", op="Unpack",
            device=x._device)
    return list(execute(_UNSTACK, (x,), {"num": n, "axis": a}))


def _split_grad(ctx, *dys):
    return execute(_CONCAT, dys, {"axis": ctx.attrs["axis"]})


_SPLIT = defop("SplitV", inputs=("x",), attrs={"size_splits": None, "axis": 0},
               dtype_rule="none", num_outputs=lambda attrs, n: len(attrs["size_splits"]),
               grad=_split_grad, jvp=Linear(), batch=batch_one_axis)


def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """Split into ``num_or_size_splits`` equal parts, or parts of the given sizes
    (one size may be -1), along ``axis``.

    >>> import tapeflow as tf
    >>> [t.shape[1] for t in tf.split(tf.zeros([2, 10]), [2, -1, 3], axis=1)]
    [2, 5, 3]
    """
    x = _tensor(value)
    s = x._data.shape
    dev = x._device
    a = _norm_axis1(axis, len(s), "SplitV", x)
    n = s[a]
    k = num_or_size_splits
    if num is not None:     # TF: the number of outputs when sizes are a tensor; must agree
        num = _shapes.as_index(num, "num", "SplitV", dev)
    if isinstance(k, (Tensor, Variable, np.ndarray)):
        k = np.asarray(k)
        k = k.item() if k.ndim == 0 else k.tolist()
    if isinstance(k, (list, tuple)):
        sizes = list(_shape_tuple(k, "SplitV"))
        if sizes.count(-1) > 1 or any(z < -1 for z in sizes):
            raise InvalidArgumentError(
                f"split: sizes {sizes} may contain at most one -1 and no other negative value",
                op="SplitV", device=dev)
        if -1 in sizes:
            rest = n - (sum(sizes) + 1)
            if rest < 0:
                raise InvalidArgumentError(
                    f"split: sizes {sizes} add up to more than dimension {a} of size {n}",
                    op="SplitV", device=dev)
            sizes[sizes.index(-1)] = rest
        if sum(sizes) != n:
            raise InvalidArgumentError(
                f"Determined shape must either match input shape along split_dim exactly if "
                f"fully specified, or be less than the size of the input along split_dim if "
                f"not fully specified.  Got: {sum(sizes)} vs. {n}", op="SplitV", device=dev)
    else:
        k = _index(k)
        if k <= 0 or n % k:
            raise InvalidArgumentError(
                f"Number of ways to split should evenly divide the split dimension, but got "
                f"split_dim {a} (size = {n}) and num_split {k}", op="SplitV", device=dev)
        sizes = [n // k] * k
    if num is not None and num != len(sizes):
        raise InvalidArgumentError(f"split: num={num} but the split makes {len(sizes)} parts",
                                   op="SplitV", device=dev)
    return list(execute(_SPLIT, (x,), {"size_splits": tuple(sizes), "axis": a}))


def _tile_grad(ctx, dy):
    m = ctx.attrs["multiples"]
    s = ctx.inputs[0]._data.shape
    if all(k == 1 for k in m):
        return dy
    inter = []
    for k, d in zip(m, s):
        inter += [k, d]
    g = execute(_RESHAPE, (dy,), {"shape": tuple(inter)})
    return _r.reduce_sum(g, axis=tuple(_range(0, 2 * len(s), 2)))


def _check_tile(op, tensors, attrs, device):
    """Tile's signature check: one multiple per dimension, and a result that fits."""
    x, m = tensors[0], attrs["multiples"]
    shape = x._data.shape
    if len(m) != len(shape):
        raise InvalidArgumentError(
            f"Expected multiples argument to be a vector of length {len(shape)} but got "
            f"length {len(m)} (input shape {list(shape)})")
    for i, k in enumerate(m):
        if k < 0:
            raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {k}")
    _shapes.check_allocation(tuple(d * k for d, k in zip(shape, m)), x.dtype, device, op.name)


_TILE = defop("Tile", inputs=("x",), attrs={"multiples": None}, dtype_rule="none",
              grad=_tile_grad, check=_check_tile, jvp=Linear())


@_TILE.def_batch
def _tile_batch(ctx, x):
    return rerun(ctx, (x,), multiples=(1,) + tuple(ctx.attrs["multiples"]))


def tile(input, multiples, name=None):
    """Repeat ``input`` ``multiples[i]`` times along each dimension ``i``.

    >>> import tapeflow as tf
    >>> print(tf.tile([[1, 2]], [2, 2]))
    tf.Tensor(
    [[1 2 1 2]
     [1 2 1 2]], shape=(2, 4), dtype=int32)
    """
    return execute(_TILE, (input,), {"multiples": _shape_tuple(multiples, "Tile")})


# --- padding and slicing -----------------------------------------------------------------

def _pad_grad(ctx, dy):
    spec = tuple(_slice(b, b + n) for (b, _), n in zip(ctx.attrs["paddings"],
                                                       ctx.inputs[0]._data.shape))
    return execute(_STRIDED_SLICE, (dy,), {"spec": spec + (Ellipsis,)})


def _pad_batch(ctx, x):
    """(tf.vectorized_map) PadV2's and MirrorPad's: the batch is not padded."""
    return rerun(ctx, (x,), paddings=((0, 0),) + tuple(tuple(p) for p in ctx.attrs["paddings"]))


# (the tangent of a pad pads with zeros)
_PAD = defop("PadV2", inputs=("x",), attrs={"paddings": None, "constant_values": 0},
             dtype_rule="none", grad=_pad_grad, check=_check_fill_values,
             jvp=Linear((0,), constant_values=0), batch=_pad_batch)


def _mirror_indices(n, before, after, mode):
    """Indices into a dimension of size n that MirrorPad reads, in output order."""
    o = 0 if mode == "SYMMETRIC" else 1
    left = np.arange(before - 1 + o, o - 1, -1)
    right = np.arange(n - 1 - o, n - 1 - o - after, -1)
    return np.concatenate([left, np.arange(n), right]).astype(np.int32)


def _mirror_pad_grad(ctx, dy):
    x = ctx.inputs[0]
    mode = ctx.attrs["mode"]
    g = dy
    for axis, ((b, a), n) in enumerate(zip(ctx.attrs["paddings"], x._data.shape)):
        if b or a:
            ids = constant(_mirror_indices(n, b, a, mode), device=g._device)
            g = _segment_sum_along(g, ids, n, axis)
    return g


def _segment_sum_along(g, ids, n, axis):
    """unsorted_segment_sum along ``axis`` (ids index that axis)."""
    if axis == 0:
        return unsorted_segment_sum(g, ids, n)
    nd = g.ndim
    perm = (axis,) + tuple(_range(axis)) + tuple(_range(axis + 1, nd))
    s = unsorted_segment_sum(execute(_TRANSPOSE, (g,), {"perm": perm}), ids, n)
    inv = tuple(_range(1, axis + 1)) + (0,) + tuple(_range(axis + 1, nd))
    return execute(_TRANSPOSE, (s,), {"perm": inv})


_MIRROR_PAD = defop("MirrorPad", inputs=("x",), attrs={"paddings": None, "mode": "REFLECT"},
                    dtype_rule="none", grad=_mirror_pad_grad, jvp=Linear(), batch=_pad_batch)


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad ``tensor``: ``paddings[i] = [before, after]`` for dimension ``i``;
    ``mode`` is ``"CONSTANT"``, ``"REFLECT"`` or ``"SYMMETRIC"``.

    >>> import tapeflow as tf
    >>> print(tf.pad([1, 2, 3], [[1, 2]]))
    tf.Tensor([0 1 2 3 0 0], shape=(6,), dtype=int32)
    >>> print(tf.pad([1, 2, 3], [[2, 2]], "REFLECT"))
    tf.Tensor([3 2 1 2 3 2 1], shape=(7,), dtype=int32)
    """
    x = _tensor(tensor)
    dev = x._device
    s = x._data.shape
    m = str(mode).upper()
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise InvalidArgumentError(
            f"pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}",
            op="MirrorPad" if m != "CONSTANT" else "PadV2", device=dev)
    op = "PadV2" if m == "CONSTANT" else "MirrorPad"
    try:
        p = np.asarray(paddings.numpy() if isinstance(paddings, (Tensor, Variable))
                       else paddings)
    except (ValueError, TypeError):         # ragged: [[1, 2], [1]]
        raise InvalidArgumentError(
            f"pad: paddings must be an integer array of shape [{len(s)}, 2] (one [before, "
            f"after] pair per dimension of the input of shape {list(s)}), got "
            f"{_shapes._short(paddings)}", op=op, device=dev) from None
    if p.size == 0 and len(s) == 0:
        p = p.reshape(0, 2)
    if p.shape != (len(s), 2) or (p.size and p.dtype.kind not in "iu"):
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs: paddings must be an "
            f"integer array of shape [{len(s)}, 2], got {p.tolist()}", op=op, device=dev)
    pp = tuple((int(b), int(a)) for b, a in p.tolist())
    for i, (b, a) in enumerate(pp):
        if b < 0 or a < 0:
            raise InvalidArgumentError(f"Paddings must be non-negative: {b} {a}", op=op,
                                       device=dev)
        if m == "REFLECT" and (b or a) and (b >= s[i] or a >= s[i]):
            raise InvalidArgumentError(
                f"paddings must be less than the dimension size: {b}, {a} not less than {s[i]}",
                op=op, device=dev)
        if m == "SYMMETRIC" and (b > s[i] or a > s[i]):
            raise InvalidArgumentError(
                f"paddings must be no greater than the dimension size: {b}, {a} greater than "
                f"{s[i]}", op=op, device=dev)
    if m == "CONSTANT":
        cv = _fill_value(constant_values, x.dtype, "pad: constant_values", "PadV2", x)[0]
        return execute(_PAD, (x,), {"paddings": pp, "constant_values": cv})
    return execute(_MIRROR_PAD, (x,), {"paddings": pp, "mode": m})


def _slice_grad(ctx, dy):
    pads = tuple((b, n - b - z) for b, z, n in zip(ctx.attrs["begin"], ctx.attrs["size"],
                                                   ctx.inputs[0]._data.shape))
    return execute(_PAD, (dy,), {"paddings": pads, "constant_values": 0})


_SLICE = defop("Slice", inputs=("x",), attrs={"begin": None, "size": None}, dtype_rule="none",
               grad=_slice_grad, jvp=Linear())


@_SLICE.def_batch
def _slice_batch(ctx, x):
    return rerun(ctx, (x,), begin=(0,) + tuple(ctx.attrs["begin"]),
                 size=(ctx.size,) + tuple(ctx.attrs["size"]))


def slice(input_, begin, size, name=None):  # noqa: A001
    """The block starting at ``begin`` of shape ``size`` (``-1``: to the end).

    >>> import tapeflow as tf
    >>> print(tf.slice([[1, 2, 3], [4, 5, 6]], [0, 1], [2, -1]))
    tf.Tensor(
    [[2 3]
     [5 6]], shape=(2, 2), dtype=int32)
    """
    x = _tensor(input_)
    s = x._data.shape
    b = _shape_tuple(begin, "Slice")
    z = list(_shape_tuple(size, "Slice"))
    if len(b) != len(s) or len(z) != len(s):
        raise InvalidArgumentError(
            f"Expected begin and size arguments to be 1-D tensors of size {len(s)}, but got "
            f"shapes [{len(b)}] and [{len(z)}] instead.", op="Slice", device=x._device)
    for i, n in enumerate(s):
        if not 0 <= b[i] <= n:
            raise InvalidArgumentError(f"Expected begin[{i}] in [0, {n}], but got {b[i]}",
                                       op="Slice", device=x._device)
        if z[i] == -1:
            z[i] = n - b[i]
        if not 0 <= z[i] <= n - b[i]:
            raise InvalidArgumentError(
                f"Expected size[{i}] in [0, {n - b[i]}], but got {z[i]}", op="Slice",
                device=x._device)
    return execute(_SLICE, (x,), {"begin": b, "size": tuple(z)})


# StridedSlice's attr `spec` is a normalised NumPy basic index: a tuple of
# non-negative ints, slices (start/stop/step already clipped to the dimension, or
# slice(None) for a whole dimension) and None (new axes), always ending with
# Ellipsis (so a fully indexed tensor stays a 0-d array). Kernels return x[spec].

def _strided_slice_grad(ctx, dy):
    return execute(_STRIDED_SLICE_GRAD, (dy,), {"shape": ctx.inputs[0]._data.shape,
                                                "spec": ctx.attrs["spec"]})


def _strided_slice_grad_grad(ctx, ddy):
    return execute(_STRIDED_SLICE, (ddy,), {"spec": ctx.attrs["spec"]})


_STRIDED_SLICE = defop("StridedSlice", inputs=("x",), attrs={"spec": REQUIRED},
                       dtype_rule="none", grad=_strided_slice_grad, jvp=Linear())


@_STRIDED_SLICE.def_batch
def _strided_slice_batch(ctx, x):
    return rerun(ctx, (x,), spec=(_FULL,) + tuple(ctx.attrs["spec"]))
_STRIDED_SLICE_GRAD = defop("StridedSliceGrad", inputs=("dy",),
                            attrs={"shape": REQUIRED, "spec": REQUIRED}, dtype_rule="none",
                            grad=_strided_slice_grad_grad, jvp=Linear())


@_STRIDED_SLICE_GRAD.def_batch
def _strided_slice_grad_batch(ctx, dy):
    return rerun(ctx, (dy,), spec=(_FULL,) + tuple(ctx.attrs["spec"]),
                 shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


def _bad_index(msg, x):
    return InvalidArgumentError(msg, op="StridedSlice", device=x._device)


def _index_spec(x, key):
    """Normalise a ``__getitem__`` key for ``x``: (spec, advanced) where ``advanced``
    is None or (output axis, integer index, to_front) for one gather after the basic
    slice; ``to_front``: NumPy puts the gathered dimensions first because an int
    index and the array index are separated by a slice."""
    shape = x._data.shape
    nd = len(shape)
    consumed = 0
    for k in key:
        if k is not None and k is not Ellipsis:
            consumed += 1
    if consumed > nd:
        raise _bad_index(f"Index out of range using input dim {nd}; input has only {nd} dims "
                         f"(index {key!r})", x)
    spec = []
    adv = None
    ell = False
    d = 0   # input dimension
    o = 0   # output dimension
    kinds = []   # per entry: "i" int, "a" array, "s" slice, "n" new axis
    for k in key:
        tk = type(k)
        if tk is int or (tk is not builtins.bool and isinstance(k, np.integer)):
            n = shape[d]
            i = int(k)
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise _bad_index(f"slice index {int(k)} of dimension {d} out of bounds.", x)
            spec.append(i)
            kinds.append("i")
            d += 1
        elif tk is _slice:
            n = shape[d]
            try:
                start, stop, step = k.indices(n)
            except (TypeError, ValueError) as e:
                raise _bad_index(f"invalid slice {k!r} for dimension {d}: {e}", x) from None
            if step == 1 and start == 0 and stop >= n:
                spec.append(_FULL)
            elif len(_range(start, stop, step)) == 0:
                spec.append(_slice(0, 0, 1))    # (slice(-1, None, -2) would not be empty)
            else:
                spec.append(_slice(start, None if stop < 0 else stop, step))
            kinds.append("s")
            d += 1
            o += 1
        elif k is None:
            spec.append(None)
            kinds.append("n")
            o += 1
        elif k is Ellipsis:
            if ell:
                raise _bad_index("an index can only have a single ellipsis ('...')", x)
            ell = True
            m = nd - consumed
            spec.extend([_FULL] * m)
            kinds.extend("s" * m)
            d += m
            o += m
        else:
            if isinstance(k, Variable):
                k = k._current()
            if isinstance(k, Tensor):
                kd = k.dtype
                if not kd.is_integer:
                    raise _bad_index(
                        "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) "
                        f"and integer or boolean tensors are valid indices, got a {kd.name} "
                        "tensor", x)
                idx = k
            else:
                a = np.asarray(k)
                if a.dtype.kind == "b" or a.dtype.kind not in "iu" and a.size:
                    raise _bad_index(
                        "Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) "
                        f"and integer or boolean tensors are valid indices, got {k!r}", x)
                n = shape[d]
                a = a.astype(np.int64)
                bad = (a < -n) | (a >= n)
                if bad.any():
                    v = int(a.reshape(-1)[np.argmax(bad.reshape(-1))])
                    raise _bad_index(f"slice index {v} of dimension {d} out of bounds.", x)
                a = np.where(a < 0, a + n, a)
                idx = constant(a.astype(np.int32 if n < 2**31 else np.int64), device=x._device)
            if adv is not None:
                raise _bad_index(
                    "only one integer-array index per subscript is supported; use "
                    "tf.gather_nd for point-wise indexing with several index arrays", x)
            adv = (o, idx)
            spec.append(_FULL)
            kinds.append("a")
            d += 1
            o += 1
    spec.append(Ellipsis)
    if adv is not None:
        pos = [j for j, c in enumerate(kinds) if c in "ia"]
        front = any(c not in "ia" for c in kinds[pos[0]:pos[-1] + 1])
        adv = (adv[0], adv[1], front and adv[0] > 0)
    return tuple(spec), adv


def _is_mask(k):
    tk = type(k)
    if tk is int or tk is _slice or k is None or k is Ellipsis:
        return False
    if tk is builtins.bool or tk is np.bool_:       # a 0-d mask, as in NumPy
        return True
    if isinstance(k, (Tensor, Variable)):
        return k.dtype.is_bool
    if isinstance(k, np.ndarray):
        return k.dtype.kind == "b"
    if isinstance(k, list) and k:
        a = np.asarray(k)
        return a.dtype.kind == "b"
    return False


def _scalar_index(k):
    """0-d integer tensors and arrays index like Python ints."""
    if type(k) is int or type(k) is _slice or k is None or k is Ellipsis:
        return k
    if isinstance(k, Variable):
        k = k._current()
    if isinstance(k, Tensor):
        if k.ndim == 0 and k.dtype.is_integer:
            return int(k)
    elif isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "iu":
        return int(k)
    return k


def _getitem_slow(x, key):
    if type(key) is not tuple:
        if _is_mask(key):
            if np.ndim(key) == 0:       # x[True] is x[None], x[False] x[None][:0]
                return boolean_mask(expand_dims(x, 0), reshape(key, [1]))
            return boolean_mask(x, key)
        key = (key,)
    elif any(_is_mask(k) for k in key):
        raise _bad_index("a boolean mask must be the only index; use tf.boolean_mask", x)
    spec, adv = _index_spec(x, tuple(map(_scalar_index, key)))
    for e in spec:
        if e is not _FULL and e is not Ellipsis:
            y = execute(_STRIDED_SLICE, (x,), {"spec": spec})
            break
    else:
        y = x   # x[...], x[:], x[()]: the same immutable value
    if adv is not None:
        o, idx, front = adv
        y = gather(y, idx, axis=o)
        if front:   # NumPy's rule for separated advanced indices
            k = idx.ndim
            perm = (tuple(_range(o, o + k)) + tuple(_range(o)) + tuple(_range(o + k, y.ndim)))
            y = execute(_TRANSPOSE, (y,), {"perm": perm})
    return y


def _getitem(self, key):
    """``x[key]``: ints, slices (any step), ``...``, ``None``/``tf.newaxis``, negative
    indices, one integer list/array/tensor (gather semantics) and boolean masks.

    >>> import tapeflow as tf
    >>> x = tf.reshape(tf.range(12), [3, 4])
    >>> print(x[1, ::2])
    tf.Tensor([4 6], shape=(2,), dtype=int32)
    >>> print(x[-1, [0, 3]])
    tf.Tensor([ 8 11], shape=(2,), dtype=int32)
    """
    x = self if type(self) is Tensor else self.read_value()
    tk = type(key)
    if tk is int:
        s = x._data.shape
        if s:
            n = s[0]
            i = key + n if key < 0 else key
            if 0 <= i < n:
                return execute(_STRIDED_SLICE, (x,), {"spec": (i, Ellipsis)})
    elif tk is tuple:
        # x[i, j]: all Python ints in range
        s = x._data.shape
        if len(key) <= len(s):
            spec = []
            for k, n in zip(key, s):
                if type(k) is not int:
                    break
                i = k + n if k < 0 else k
                if not 0 <= i < n:
                    break
                spec.append(i)
            else:
                spec.append(Ellipsis)
                return execute(_STRIDED_SLICE, (x,), {"spec": tuple(spec)})
    elif tk is _slice:
        # x[a:b:c] on the first dimension
        s = x._data.shape
        if s and (key.step is None or key.step == 1):
            n = s[0]
            start, stop, _ = key.indices(n)
            if start == 0 and stop >= n:
                return x
            return execute(_STRIDED_SLICE, (x,), {"spec": (_slice(start, stop, 1), Ellipsis)})
    return _getitem_slow(x, key)


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0,
                  new_axis_mask=0, shrink_axis_mask=0, var=None, name=None):
    """TensorFlow's strided slice: ``input_[begin:end:strides]`` per dimension, with
    bit masks (``begin_mask``: ignore begin[i], ``shrink_axis_mask``: index, ...).

    >>> import tapeflow as tf
    >>> print(tf.strided_slice([[1, 2, 3], [4, 5, 6]], [0, 2], [2, 0], [1, -1]))
    tf.Tensor(
    [[3 2]
     [6 5]], shape=(2, 2), dtype=int32)
    """
    x = _tensor(input_)
    b = _shape_tuple(begin, "StridedSlice")
    e = _shape_tuple(end, "StridedSlice")
    st = (1,) * len(b) if strides is None else _shape_tuple(strides, "StridedSlice")
    begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask = (
        _shapes.as_index(m, f"strided_slice: {w}", "StridedSlice", _here(x)) for w, m in (
            ("begin_mask", begin_mask), ("end_mask", end_mask),
            ("ellipsis_mask", ellipsis_mask), ("new_axis_mask", new_axis_mask),
            ("shrink_axis_mask", shrink_axis_mask)))
    if not len(b) == len(e) == len(st):
        raise _bad_index("begin, end and strides must have the same length", x)
    key = []
    for i in _range(len(b)):
        bit = 1 << i
        if ellipsis_mask & bit:
            key.append(Ellipsis)
        elif new_axis_mask & bit:
            key.append(None)
        elif shrink_axis_mask & bit:
            key.append(b[i])
        else:
            if st[i] == 0:
                raise _bad_index(f"strides[{i}] must be non-zero", x)
            key.append(_slice(None if begin_mask & bit else b[i], None if end_mask & bit else e[i],
                              st[i]))
    return _getitem_slow(x, tuple(key))


# --- shape queries ------------------------------------------------------------------------

def _out_type(out_type, fn, x):
    """Shape's and Size's out_type: int32 or int64 (TensorFlow's; a float or complex
    count would be a silent conversion). The ops' attr type says the same to direct
    calls (its ``attr_types``)."""
    dt = _dt.as_dtype(out_type)
    if dt is not _dt.int32 and dt is not _dt.int64:
        raise InvalidTypeError(
            f"{fn}: out_type must be tf.int32 or tf.int64, got {dt.name}; tf.cast the "
            "result for another dtype", op=fn.capitalize(), device=_here(x))
    return {"out_type": dt}


def _shape_batch(ctx, x):
    """(tf.vectorized_map) Shape's, Size's and Rank's: one example's, not batched."""
    ctx.out_batched = (False,)
    return execute(ctx.op, (x[0] if ctx.size else zeros(tuple(x.shape[1:]), x.dtype),),
                   ctx.attrs)


# (out_type: a DType equals its name)
_SHAPE = defop("Shape", inputs=("x",), attrs={"out_type": _dt.int32}, dtype_rule="none",
               differentiable=False,
               attr_types={"out_type": "enum:int32|int64"}, batch=_shape_batch)
_SIZE = defop("Size", inputs=("x",), attrs={"out_type": _dt.int32}, dtype_rule="none",
              differentiable=False,
              attr_types={"out_type": "enum:int32|int64"}, batch=_shape_batch)
_RANK = defop("Rank", inputs=("x",), dtype_rule="none", differentiable=False,
              batch=_shape_batch)
_I32 = {"out_type": _dt.int32}


def shape(input, out_type=_dt.int32, name=None):
    """The shape of ``input`` as a 1-D int32 tensor (``out_type`` may be int64).

    >>> import tapeflow as tf
    >>> print(tf.shape(tf.zeros([2, 3])))
    tf.Tensor([2 3], shape=(2,), dtype=int32)
    """
    return execute(_SHAPE, (input,), _I32 if out_type is _dt.int32 else
                   _out_type(out_type, "shape", input))


def size(input, out_type=_dt.int32, name=None):
    """The number of elements of ``input`` as a scalar tensor.

    >>> import tapeflow as tf
    >>> int(tf.size(tf.zeros([2, 3])))
    6
    """
    return execute(_SIZE, (input,), _I32 if out_type is _dt.int32 else
                   _out_type(out_type, "size", input))


def rank(input, name=None):
    """The number of dimensions of ``input`` as a scalar int32 tensor.

    >>> import tapeflow as tf
    >>> int(tf.rank(tf.zeros([2, 3])))
    2
    """
    return execute(_RANK, (input,))


# --- selection ------------------------------------------------------------------------------

def _select_grad(ctx, dy):
    c = ctx.inputs[0]
    z = execute(_ZEROS_LIKE, (dy,), _LIKE_NONE)
    return None, execute(_SELECT, (c, dy, z)), execute(_SELECT, (c, z, dy))


_SELECT = defop("SelectV2", inputs=("condition", "x", "y"), dtype_rule="none", dtype_from=1,
                broadcast=True, grad=_select_grad, check=_check_select,
                elementwise=True, jvp=Linear((1, 2)))
_WHERE = defop("Where", inputs=("condition",), dtype_rule="none", differentiable=False)


def where(condition, x=None, y=None, name=None):
    """With ``x`` and ``y``: elements of ``x`` where ``condition`` is true, else of ``y``
    (all three broadcast). Alone: the coordinates of the true (non-zero) elements of
    ``condition``, an int64 tensor of shape ``[n, rank]``.

    >>> import tapeflow as tf
    >>> print(tf.where([True, False, True], [1., 2., 3.], 0.))
    tf.Tensor([1. 0. 3.], shape=(3,), dtype=float32)
    >>> print(tf.where([[True, False], [False, True]]))
    tf.Tensor(
    [[0 0]
     [1 1]], shape=(2, 2), dtype=int64)
    """
    if x is None and y is None:
        return execute(_WHERE, (condition,))
    if x is None or y is None:
        raise InvalidArgumentError("where: x and y must both be given or both be None")
    c = _tensor(condition)
    if not c.dtype.is_bool:
        raise InvalidArgumentError(
            f"where: condition must be a bool tensor when x and y are given, got "
            f"{c.dtype.name}; compare first (e.g. tf.not_equal(c, 0))", op="SelectV2",
            device=c._device)
    if not (type(x) is Tensor and type(y) is Tensor and x._data.dtype == y._data.dtype):
        x, y = _match_dtypes(x, y)
    return execute(_SELECT, (c, x, y))


where_v2 = where


def boolean_mask(tensor, mask, axis=None, name="boolean_mask"):
    """The elements (or slices) of ``tensor`` where ``mask`` is true; ``mask`` covers
    dimensions ``axis .. axis + mask.ndim`` of ``tensor``.

    >>> import tapeflow as tf
    >>> print(tf.boolean_mask([[1, 2], [3, 4], [5, 6]], [True, False, True]))
    tf.Tensor(
    [[1 2]
     [5 6]], shape=(2, 2), dtype=int32)
    """
    x = _tensor(tensor)
    m = mask if isinstance(mask, (Tensor, Variable)) else constant(mask, dtype=_dt.bool_,
                                                                    device=x._device)
    s = x._data.shape
    ms = tuple(m.shape)
    a = 0 if axis is None else _norm_axis1(axis, len(s), "Where", x)
    k = len(ms)
    if k == 0 or tuple(s[a:a + k]) != ms:
        raise InvalidArgumentError(
            f"boolean_mask: mask of shape {list(ms)} must match dimensions {a}..{a + k - 1} of "
            f"the tensor of shape {list(s)}", op="Where", device=x._device)
    if not m.dtype.is_bool:
        raise InvalidArgumentError(f"boolean_mask: mask must be bool, got {m.dtype.name}",
                                   op="Where", device=x._device)
    if k > 1:
        x = reshape(x, s[:a] + (_prod(ms),) + s[a + k:])
        m = reshape(m, (-1,))
    idx = reshape(execute(_WHERE, (m,)), (-1,))
    return gather(x, idx, axis=a)


# --- gather / scatter ---------------------------------------------------------------------

def _gather_grad(ctx, dy):
    params, indices = ctx.inputs
    if not params.dtype.is_inexact:
        return None, None
    axis = ctx.attrs["axis"]
    b = ctx.attrs["batch_dims"]
    ps = params._data.shape
    n = ps[axis]
    isz = _prod(indices._data.shape[b:])
    inner = ps[axis + 1:]
    rest = tuple(_range(3, 3 + len(inner)))
    if b == 0:
        ids = indices if indices.ndim == 1 else execute(_RESHAPE, (indices,), {"shape": (isz,)})
        if axis == 0:
            vals = execute(_RESHAPE, (dy,), {"shape": (isz,) + inner})
            return unsorted_segment_sum(vals, ids, n), None
        P = _prod(ps[:axis])
        vals = execute(_RESHAPE, (dy,), {"shape": (P, isz) + inner})
        vals = execute(_TRANSPOSE, (vals,), {"perm": (1, 0) + tuple(r - 1 for r in rest)})
        s = unsorted_segment_sum(vals, ids, n)
        s = execute(_TRANSPOSE, (s,), {"perm": (1, 0) + tuple(r - 1 for r in rest)})
        return execute(_RESHAPE, (s,), {"shape": ps}), None
    B = _prod(ps[:b])
    P = _prod(ps[b:axis])
    vals = execute(_RESHAPE, (dy,), {"shape": (B, P, isz) + inner})
    vals = execute(_TRANSPOSE, (vals,), {"perm": (0, 2, 1) + rest})
    vals = execute(_RESHAPE, (vals,), {"shape": (B * isz, P) + inner})
    with _devs.device(indices._device):
        offs = range(0, B * n, n, dtype=indices.dtype) if B else zeros((0,), indices.dtype)
    ids = _m.add(execute(_RESHAPE, (indices,), {"shape": (B, isz)}),
              execute(_RESHAPE, (offs,), {"shape": (B, 1)}))
    ids = execute(_RESHAPE, (ids,), {"shape": (B * isz,)})
    s = unsorted_segment_sum(vals, ids, B * n)
    s = execute(_RESHAPE, (s,), {"shape": (B, n, P) + inner})
    s = execute(_TRANSPOSE, (s,), {"perm": (0, 2, 1) + rest})
    return execute(_RESHAPE, (s,), {"shape": ps}), None


_GATHER = defop("GatherV2", inputs=("params", "indices"), attrs={"axis": 0, "batch_dims": 0},
                dtype_rule="none", grad=_gather_grad, jvp=Linear((0,)))


@_GATHER.def_batch
def _gather_batch(ctx, params, indices):
    axis, bd = ctx.attrs["axis"], ctx.attrs["batch_dims"]
    if ctx.batched[0] and not ctx.batched[1] and bd == 0:
        return rerun(ctx, (params, indices), axis=axis + 1)
    if ctx.batched[1] and not ctx.batched[0] and bd == 0:
        # the batch of indices lands at dimension `axis`: move it to the front
        y = rerun(ctx, (params, indices))
        if axis == 0:
            return y
        r = len(y.shape)
        return transpose(y, (axis,) + tuple(i for i in _range(r) if i != axis))
    params, indices = batch_all(ctx, (params, indices))
    return rerun(ctx, (params, indices), axis=axis + 1, batch_dims=bd + 1)
_GATHER_ATTRS0 = {"axis": 0, "batch_dims": 0}


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """Slices of ``params`` along ``axis`` at ``indices`` (an embedding lookup along 0).
    Indices outside ``[0, params.shape[axis])`` raise InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.gather([10., 20., 30.], [2, 0]))
    tf.Tensor([30. 10.], shape=(2,), dtype=float32)
    >>> print(tf.gather([[1, 2], [3, 4]], [1], axis=1))
    tf.Tensor(
    [[2]
     [4]], shape=(2, 1), dtype=int32)
    """
    if (type(batch_dims) is int and not batch_dims and (axis is None or (type(axis) is int
                                                                        and axis == 0))
            and (type(params) is Tensor or type(params) is Variable) and params.ndim):
        return execute(_GATHER, (params, indices), _GATHER_ATTRS0)
    nd = _ndim(params)
    b = _index(batch_dims)
    if b < 0:
        b += _ndim(indices)
    a = b if axis is None else _norm_axis1(axis, nd, "GatherV2", params)
    if not 0 <= b <= a or b > _ndim(indices):
        raise InvalidArgumentError(
            f"batch_dims ({batch_dims}) must be non-negative, at most the rank of indices and "
            f"at most axis ({a})", op="GatherV2", device=_here(params))
    if nd == 0:
        raise InvalidArgumentError("params must be at least 1 dimensional", op="GatherV2",
                                   device=_here(params))
    return execute(_GATHER, (params, indices), {"axis": a, "batch_dims": b})


def _gather_nd_grad(ctx, dy):
    params, indices = ctx.inputs
    if not params.dtype.is_inexact:
        return None, None
    return execute(_SCATTER_ND, (indices, dy), {"shape": params._data.shape}), None


_GATHER_ND = defop("GatherNd", inputs=("params", "indices"), dtype_rule="none",
                   grad=_gather_nd_grad, jvp=Linear((0,)))


@_GATHER_ND.def_batch
def _gather_nd_batch(ctx, params, indices):
    if not ctx.batched[0]:
        return execute(ctx.op, (params, indices), ctx.attrs)    # (B, ..., K) indices
    if not ctx.batched[1]:
        indices = broadcast_to(indices, (ctx.size,) + tuple(indices.shape))
    return execute(ctx.op, (params, batch_coords(ctx, indices)), ctx.attrs)


def gather_nd(params, indices, batch_dims=0, name=None):
    """``params[indices[..., 0], indices[..., 1], ...]``: the innermost dimension of
    ``indices`` indexes the leading dimensions of ``params``.

    >>> import tapeflow as tf
    >>> print(tf.gather_nd([[1, 2], [3, 4]], [[0, 1], [1, 0]]))
    tf.Tensor([2 3], shape=(2,), dtype=int32)
    """
    b = batch_dims if type(batch_dims) is int else _shapes.as_index(
        batch_dims, "batch_dims", "GatherNd", _here(params))
    if not b:
        return execute(_GATHER_ND, (params, indices))
    p = _tensor(params)
    ind = _tensor(indices)
    ps, ins = p._data.shape, ind._data.shape
    if b < 0 or b >= len(ins) or ps[:b] != ins[:b]:
        raise InvalidArgumentError(
            f"gather_nd: batch_dims={batch_dims} needs params.shape[:{b}] == "
            f"indices.shape[:{b}], got {list(ps)} and {list(ins)}", op="GatherNd",
            device=p._device)
    B = _prod(ps[:b])
    M = _prod(ins[b:-1])
    K = ins[-1]
    p2 = reshape(p, (B,) + ps[b:])
    i2 = reshape(ind, (B, M, K))
    with _devs.device(ind._device):
        bidx = broadcast_to(reshape(range(B, dtype=ind.dtype), (B, 1, 1)), (B, M, 1))
    out = gather_nd(p2, concat([bidx, i2], -1))
    return reshape(out, ins[:-1] + ps[b + K:])


def _scatter_nd_grad(ctx, dy):
    indices, updates = ctx.inputs
    if not updates.dtype.is_inexact:
        return None, None
    return None, execute(_GATHER_ND, (dy, indices))


_SCATTER_ND = defop("ScatterNd", inputs=("indices", "updates"), attrs={"shape": None},
                    dtype_rule="none", dtype_from=1, grad=_scatter_nd_grad, jvp=Linear((1,)))


@_SCATTER_ND.def_batch
def _scatter_nd_batch(ctx, indices, updates):
    indices, updates = batch_all(ctx, (indices, updates))
    return rerun(ctx, (batch_coords(ctx, indices), updates),
                 shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


def scatter_nd(indices, updates, shape, name=None):
    """Zeros of ``shape`` with ``updates`` added at ``indices`` (duplicates sum up).

    >>> import tapeflow as tf
    >>> print(tf.scatter_nd([[1], [3], [1]], [1., 2., 3.], [5]))
    tf.Tensor([0. 4. 0. 2. 0.], shape=(5,), dtype=float32)
    """
    s = _shape_tuple(shape, "ScatterNd")
    if any(d < 0 for d in s):
        raise InvalidArgumentError(f"scatter_nd: shape must be non-negative, got {list(s)}",
                                   op="ScatterNd", device=_here(updates))
    return execute(_SCATTER_ND, (indices, updates), {"shape": s})


def _segment_sum_grad(ctx, dy):
    data, ids = ctx.inputs
    if not data.dtype.is_inexact:
        return None, None
    n = ctx.attrs["num_segments"]
    if n == 0:
        return zeros_like(data), None
    # gather, dropping negative ids (their data was dropped in the forward pass)
    g = gather(dy, clip_by_value(ids, 0, n - 1))
    keep = _m.cast(_m.add(clip_by_value(ids, -1, 0), 1), dy.dtype)
    keep = execute(_RESHAPE, (keep,), {"shape": ids._data.shape + (1,) * (dy.ndim - 1)})
    return _m.multiply(g, keep), None


_SEGMENT_SUM = defop("UnsortedSegmentSum", inputs=("data", "segment_ids"),
                     attrs={"num_segments": None}, dtype_rule="none", grad=_segment_sum_grad,
                     jvp=Linear((0,)))


@_SEGMENT_SUM.def_batch
def _segment_sum_batch(ctx, data, ids):
    data, ids = batch_all(ctx, (data, ids))
    k = ctx.attrs["num_segments"]
    s = tuple(ids.shape)
    off = np.arange(ctx.size, dtype=ids.dtype.np).reshape((ctx.size,) + (1,) * (len(s) - 1)) * k
    off = constant(np.broadcast_to(off, s).copy(), device=ids._device)
    # a negative id drops its row: keep it negative
    ids = where(_m.less(ids, 0), ids, _m.add(ids, off))
    y = rerun(ctx, (data, ids), num_segments=ctx.size * k)
    return reshape(y, (ctx.size, k) + tuple(y.shape[1:]))


def unsorted_segment_sum(data, segment_ids, num_segments, name=None):
    """``out[i] = sum(data[j] for j where segment_ids[j] == i)`` for ``i < num_segments``
    (entries with a negative id are dropped).

    >>> import tapeflow as tf
    >>> print(tf.unsorted_segment_sum([1., 2., 3.], [1, 0, 1], 2))
    tf.Tensor([2. 4.], shape=(2,), dtype=float32)
    """
    n = _index(_scalar_arg(num_segments, "num_segments", "UnsortedSegmentSum"))
    if n < 0:
        raise InvalidArgumentError(f"num_segments must be non-negative, got {n}",
                                   op="UnsortedSegmentSum", device=_here(data))
    return execute(_SEGMENT_SUM, (data, segment_ids), {"num_segments": n})


# --- values ----------------------------------------------------------------------------------

def _identity_grad(ctx, dy):
    return dy


_IDENTITY = defop("Identity", inputs=("x",), dtype_rule="none", grad=_identity_grad,
                  jvp=Linear(), batch=BROADCASTING)


def identity(input, name=None):
    """The same value as a new tensor (recorded, so gradients flow through).

    >>> import tapeflow as tf
    >>> print(tf.identity([1, 2]))
    tf.Tensor([1 2], shape=(2,), dtype=int32)
    """
    return execute(_IDENTITY, (input,))


_STOP_GRADIENT = defop("StopGradient", inputs=("x",), dtype_rule="none", differentiable=False,
                       batch=BROADCASTING)


def stop_gradient(input, name=None):
    """The same value, treated as a constant by gradient tapes.

    >>> import tapeflow as tf
    >>> x = tf.constant(3.)
    >>> with tf.GradientTape() as t:
    ...     t.watch(x)
    ...     y = x * tf.stop_gradient(x)
    >>> float(t.gradient(y, x))
    3.0
    """
    return execute(_STOP_GRADIENT, (input,))


def _clip_grad(ctx, dy):
    t, lo, hi = ctx.inputs
    if not t.dtype.is_floating:
        return None, None, None
    z = execute(_ZEROS_LIKE, (dy,), _LIKE_NONE)
    below = _m.less(t, lo)
    above = _m.greater(t, hi)
    inside = execute(_SELECT, (below, z, execute(_SELECT, (above, z, dy))))
    return inside, execute(_SELECT, (below, dy, z)), execute(_SELECT, (above, dy, z))


_CLIP = defop("ClipByValue", inputs=("t", "clip_value_min", "clip_value_max"), broadcast=True,
              grad=_clip_grad)
_CLIP.def_jvp(elementwise_jvp(_CLIP))        # (not fusable, but a diagonal Jacobian)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """``min(max(t, clip_value_min), clip_value_max)``; the gradient passes where
    ``t`` is inside the range.

    >>> import tapeflow as tf
    >>> print(tf.clip_by_value([-2., 0.5, 3.], -1., 1.))
    tf.Tensor([-1.   0.5  1. ], shape=(3,), dtype=float32)
    """
    for what, v in (("t", t), ("clip_value_min", clip_value_min),
                    ("clip_value_max", clip_value_max)):
        if _is_complex(v):
            raise InvalidTypeError(
                f"clip_by_value: {what} is complex ({_describe(v)}): complex numbers have no "
                "order; clip the real and imaginary parts (tf.math.real, tf.math.imag) or "
                "the magnitude (tf.clip_by_norm)", op="ClipByValue", device=_here(t))
    return execute(_CLIP, (t, clip_value_min, clip_value_max))


def _is_complex(v):
    """Whether ``v`` (a scalar, an array or a tensor) holds complex numbers."""
    d = getattr(v, "dtype", None)
    if d is not None:
        return getattr(d, "np", d).kind == "c"
    return isinstance(v, complex)


def _describe(v):
    d = getattr(v, "dtype", None)
    if d is None or not hasattr(v, "shape") or isinstance(v, np.generic):
        return _shapes._short(v)
    return f"{type(v).__name__} of dtype {getattr(d, 'name', d)} and shape {list(v.shape)}"


def _real_norm(clip_norm, t, fn, op):
    """``clip_norm`` of clip_by_norm / clip_by_global_norm: refused when complex for a
    real ``t`` (casting it would drop its imaginary part)."""
    if _is_complex(clip_norm) and not (t is not None and t.dtype.is_complex):
        raise InvalidTypeError(
            f"{fn}: clip_norm must be a real number, got {_describe(clip_norm)}", op=op,
            device=_here(t))


def clip_by_norm(t, clip_norm, axes=None, name=None):
    """Rescale ``t`` so its L2 norm (over ``axes``, all by default) is at most
    ``clip_norm``: ``t * clip_norm / max(norm(t), clip_norm)``.

    >>> import tapeflow as tf
    >>> print(tf.clip_by_norm([3., 4.], 1.))
    tf.Tensor([0.6 0.8], shape=(2,), dtype=float32)
    """
    t = _tensor(t)
    _real_norm(clip_norm, t, "clip_by_norm", "ClipByNorm")
    if isinstance(clip_norm, (Tensor, Variable)) and clip_norm.dtype is not t.dtype:
        clip_norm = _m.cast(clip_norm, t.dtype)
    l2sum = _r.reduce_sum(_m.multiply(t, t), axis=axes, keepdims=True)
    pred = _m.greater(l2sum, 0)
    l2sum_safe = where(pred, l2sum, ones_like(l2sum))
    l2norm = where(pred, _m.sqrt(l2sum_safe), l2sum)
    return _m.divide(_m.multiply(t, clip_norm), _m.maximum(l2norm, clip_norm))


def _global_norm(ts):
    dt = ts[0].dtype
    total = None
    for v in ts:
        if v.dtype is not dt:
            v = _m.cast(v, dt)
        s = _r.reduce_sum(_m.multiply(v, v))
        total = s if total is None else _m.add(total, s)
    return _m.sqrt(total)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of ``t_list`` by ``clip_norm / max(global_norm, clip_norm)``,
    where ``global_norm = sqrt(sum(||t||^2))``; returns ``(list, global_norm)``.
    ``None`` entries stay ``None``.

    >>> import tapeflow as tf
    >>> ts, n = tf.clip_by_global_norm([tf.constant([3.]), tf.constant([4.])], 1.)
    >>> float(n), [round(float(t[0]), 3) for t in ts]
    (5.0, [0.6, 0.8])
    """
    ts = [None if v is None else _tensor(v)
          for v in as_tensor_list(t_list, "ClipByGlobalNorm", "t_list")]
    present = [v for v in ts if v is not None]
    if use_norm is None:
        if not present:
            raise InvalidArgumentError("clip_by_global_norm: t_list has no tensors",
                                       op="ClipByGlobalNorm", device=_here())
        use_norm = _global_norm(present)
    else:
        use_norm = _tensor(use_norm)
    _real_norm(clip_norm, use_norm, "clip_by_global_norm", "ClipByGlobalNorm")
    dt = use_norm.dtype
    if not isinstance(clip_norm, (Tensor, Variable)):
        clip_norm = constant(clip_norm, dtype=dt, device=use_norm._device)
    elif clip_norm.dtype is not dt:
        clip_norm = _m.cast(clip_norm, dt)
    scale = _m.multiply(clip_norm, _m.minimum(_m.divide(1.0, use_norm),
                                              _m.divide(1.0, clip_norm)))
    # inf or nan norms give nan (as in TF) instead of silently zeroing everything
    scale = _m.add(scale, _m.subtract(use_norm, use_norm))
    out = [None if v is None else
           _m.multiply(v, scale if v.dtype is dt else _m.cast(scale, v.dtype)) for v in ts]
    return out, use_norm




# --- sorting and scans (issue 18) ---------------------------------------------------------

def _cumsum_grad(ctx, dy):
    a = ctx.attrs
    return execute(_CUMSUM, (dy,), {"axis": a["axis"], "exclusive": a["exclusive"],
                                    "reverse": not a["reverse"]})


def _check_axis_attrs(op, tensors, attrs, device):
    """Cumsum/Cumprod/ArgSort on every backend: an int axis of the input, bool flags."""
    shape = tuple(tensors[0]._data.shape)
    ax = attrs.get("axis")
    n = len(shape)
    if isinstance(ax, bool) or not isinstance(ax, (int, np.integer)) or not -n <= ax < n:
        raise InvalidArgumentError(f"axis must be an int in [{-n}, {n}) for an input of shape "
                                   f"{list(shape)}, got {ax!r}", op=op.name, device=device)
    for flag in ("exclusive", "reverse", "descending"):
        if flag in attrs and not isinstance(attrs[flag], (bool, np.bool_)):
            raise InvalidTypeError(f"{flag} must be a bool, got {attrs[flag]!r}", op=op.name,
                                   device=device)


def _check_searchsorted(op, tensors, attrs, device):
    a, v = tensors
    if len(a._data.shape) != 1:
        raise InvalidArgumentError(f"sorted_sequence must be 1-D, got shape "
                                   f"{list(a._data.shape)}", op=op.name, device=device)
    if attrs.get("side") not in ("left", "right"):
        raise InvalidArgumentError(f"side must be 'left' or 'right', got {attrs.get('side')!r}",
                                   op=op.name, device=device)
    if a.dtype is not v.dtype:
        raise InvalidArgumentError(f"sorted_sequence ({a.dtype.name}) and values "
                                   f"({v.dtype.name}) must have one dtype", op=op.name,
                                   device=device)


_SCAN_ATTRS = {"axis": 0, "exclusive": False, "reverse": False}
_CUMSUM = defop("Cumsum", inputs=("x",), attrs=_SCAN_ATTRS, grad=_cumsum_grad,
                check=_check_axis_attrs, jvp=Linear(), batch=batch_one_axis)
def _cumprod_grad(ctx, dy):
    # TensorFlow's rule: the reversed cumulative sum of dy * y, over x (inputs with a
    # zero give inf/nan there, as in TensorFlow)
    x = ctx.inputs[0]
    if not x.dtype.is_inexact:
        return None
    a = ctx.attrs
    s = execute(_CUMSUM, (_m.multiply(dy, ctx.outputs[0]),),
                {"axis": a["axis"], "exclusive": a["exclusive"], "reverse": not a["reverse"]})
    return _m.divide(s, x)


_CUMPROD = defop("Cumprod", inputs=("x",), attrs=_SCAN_ATTRS, grad=_cumprod_grad,
                 check=_check_axis_attrs, batch=batch_one_axis)
_ARGSORT = defop("ArgSort", inputs=("x",), attrs={"axis": -1, "descending": False},
                 differentiable=False, check=_check_axis_attrs, batch=batch_one_axis)


def _scan_axis(x, axis, what):
    n = len(x.shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) or not -n <= axis < n:
        raise InvalidArgumentError(f"{what}: axis must be an int in [{-n}, {n}) for a tensor of "
                                   f"shape {list(x.shape)}, got {axis!r}")
    return int(axis) % n


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running sums along ``axis`` (``exclusive``: each excludes its own element;
    ``reverse``: from the end), as ``tf.math.cumsum``.

    >>> import tapeflow as tf
    >>> print(tf.cumsum([1, 2, 3]), tf.cumsum([1, 2, 3], exclusive=True, reverse=True))
    tf.Tensor([1 3 6], shape=(3,), dtype=int32) tf.Tensor([5 3 0], shape=(3,), dtype=int32)
    """
    x = _tensor(x)
    return execute(_CUMSUM, (x,), {"axis": _scan_axis(x, axis, "cumsum"),
                                   "exclusive": flag(exclusive, "cumsum: exclusive", "Cumsum", x),
                                   "reverse": flag(reverse, "cumsum: reverse", "Cumsum", x)})


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None):
    """Running products along ``axis`` (not differentiable yet).

    >>> import tapeflow as tf
    >>> print(tf.cumprod([1, 2, 3]))
    tf.Tensor([1 2 6], shape=(3,), dtype=int32)
    """
    x = _tensor(x)
    return execute(_CUMPROD, (x,), {
        "axis": _scan_axis(x, axis, "cumprod"),
        "exclusive": flag(exclusive, "cumprod: exclusive", "Cumprod", x),
        "reverse": flag(reverse, "cumprod: reverse", "Cumprod", x)})


def argsort(values, axis=-1, direction="ASCENDING", stable=True, name=None):
    """The indices (int64) that sort ``values`` along ``axis``; always stable (equal
    elements keep their order, in both directions).

    >>> import tapeflow as tf
    >>> print(tf.argsort([3, 1, 2]), tf.argsort([1, 3, 3, 2], direction="DESCENDING"))
    tf.Tensor([1 2 0], shape=(3,), dtype=int64) tf.Tensor([1 2 3 0], shape=(4,), dtype=int64)
    """
    x = _tensor(values)
    flag(stable, "argsort: stable", "ArgSort", x)       # (always stable)
    if not isinstance(direction, str) or direction not in ("ASCENDING", "DESCENDING"):
        raise InvalidArgumentError(f"argsort: direction must be 'ASCENDING' or 'DESCENDING', "
                                   f"got {_shapes._short(direction)}", op="ArgSort",
                                   device=x._device)
    return execute(_ARGSORT, (x,), {"axis": _scan_axis(x, axis, "argsort"),
                                    "descending": direction == "DESCENDING"})


def sort(values, axis=-1, direction="ASCENDING", name=None):
    """``values`` sorted along ``axis`` (differentiable: a gather by :func:`argsort`).

    >>> import tapeflow as tf
    >>> print(tf.sort([3., 1., 2.], direction="DESCENDING"))
    tf.Tensor([3. 2. 1.], shape=(3,), dtype=float32)
    """
    x = _tensor(values)
    ax = _scan_axis(x, axis, "sort")
    idx = argsort(x, ax, direction)
    return gather(x, idx, axis=ax, batch_dims=ax) if ax == len(x.shape) - 1 else \
        transpose(sort(transpose(x, _swap_last(len(x.shape), ax)), -1, direction),
                  _swap_last(len(x.shape), ax))


def _swap_last(n, ax):
    perm = list(builtins.range(n))
    perm[ax], perm[-1] = perm[-1], perm[ax]
    return perm


# --- data-dependent shapes (not differentiable) ---------------------------------------------

_SEARCHSORTED = defop("SearchSorted", inputs=("sorted_sequence", "values"),
                      attrs={"side": "left"}, differentiable=False, check=_check_searchsorted)


@_SEARCHSORTED.def_batch
def _searchsorted_batch(ctx, seq, values):
    if ctx.batched[0]:          # the kernel takes one 1-D sequence: one per example
        return NotImplemented
    return execute(ctx.op, (seq, values), ctx.attrs)      # values of any shape
_UNIQUE = defop("UniqueAll", inputs=("x",), num_outputs=4, differentiable=False)
_NONZERO = defop("NonZero", inputs=("x",), differentiable=False)


def searchsorted(sorted_sequence, values, side="left", out_type=None, name=None):
    """Where ``values`` would go in the 1-D ascending ``sorted_sequence`` to keep it
    sorted (int64 indices); ``side="right"`` puts equal values after their equals.

    >>> import tapeflow as tf
    >>> print(tf.searchsorted([1., 2., 3.], [2., 0.5], side="right"))
    tf.Tensor([2 0], shape=(2,), dtype=int64)
    """
    a, v = _tensor(sorted_sequence), _tensor(values)
    if len(a.shape) != 1:
        raise InvalidArgumentError(f"searchsorted: sorted_sequence must be 1-D, got shape "
                                   f"{list(a.shape)}", op="SearchSorted")
    if side not in ("left", "right"):
        raise InvalidArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}",
                                   op="SearchSorted")
    if v.dtype is not a.dtype:
        v = _m.cast(v, a.dtype)
    return execute(_SEARCHSORTED, (a, v), {"side": side})


def unique_all(x, name=None):
    """``(values, indices, inverse_indices, counts)`` of the flattened ``x``: the sorted
    distinct values, where each first occurs, each element's position among them
    (shaped like ``x``) and how often each occurs; every nan is distinct.

    >>> import tapeflow as tf
    >>> v, i, inv, c = tf.unique_all([3, 1, 3, 2])
    >>> print(v, c)
    tf.Tensor([1 2 3], shape=(3,), dtype=int32) tf.Tensor([1 1 2], shape=(3,), dtype=int64)
    """
    return execute(_UNIQUE, (_tensor(x),))


def nonzero(x, name=None):
    """The indices of the non-zero elements of ``x``: an int64 ``[count, rank]`` tensor,
    row-major order (``tf.where(x)`` in TensorFlow).

    >>> import tapeflow as tf
    >>> print(tf.nonzero([[0, 1], [2, 0]]))
    tf.Tensor(
    [[0 1]
     [1 0]], shape=(2, 2), dtype=int64)
    """
    return execute(_NONZERO, (_tensor(x),))


# --- x[key] = value (the array API's __setitem__) -------------------------------------------

def _host_key(key):
    """``key`` with tensors and Variables as host NumPy arrays (positions are metadata)."""
    if isinstance(key, tuple):
        return tuple(_host_key(k) for k in key)
    if isinstance(key, Variable):
        key = key.read_value()
    if isinstance(key, Tensor):
        return key.numpy()
    return key


def _scalar_value(value, x):
    """A Python scalar stored into ``x``: converted straight to ``x``'s dtype (weakly
    typed, as the array API says), so 0 fits a uint8 tensor and a float keeps float64's
    precision (through float32, 1/3 would lose it). A kind that does not fit (a float
    into an integer tensor, a complex into a real one) keeps the default conversion,
    and the dtype check below refuses it."""
    kinds = {builtins.bool: "b", int: "biufc", float: "fc", complex: "c"}[type(value)]
    if x.dtype.np.kind not in kinds:
        return convert_to_tensor(value)
    if type(value) is int and x.dtype.is_integer:
        info = np.iinfo(x.dtype.np)
        if not info.min <= value <= info.max:
            raise InvalidArgumentError(
                f"x[key] = value: {value} does not fit a {x.dtype.name} tensor of shape "
                f"{list(x.shape)} (its range is [{info.min}, {info.max}]); use a wider "
                "dtype", device=x.device)
    return constant(value, dtype=x.dtype)


def _setitem(self, key, value):
    """``x[key] = value``: the elements ``x[key]`` selects (ints, slices, ``...``,
    ``None``, boolean masks, integer arrays; NumPy's rules, the last write wins) take
    ``value`` (broadcast, in ``x``'s dtype). A Variable is assigned; a tensor object is
    given a new buffer (other tensors, and earlier results that shared its memory, keep
    their values). Refused while this thread records a GradientTape or traces a
    tf.function: the recorded values would change under the tape.

    >>> import tapeflow as tf
    >>> x = tf.zeros([2, 3])
    >>> x[0, 1:] = 5.0
    >>> print(x)
    tf.Tensor(
    [[0. 5. 5.]
     [0. 0. 0.]], shape=(2, 3), dtype=float32)
    """
    from_var = isinstance(self, Variable)
    x = self.read_value() if from_var else self
    if not from_var and (_ctx.active_tapes() or _ctx.tracing[0]):
        raise FailedPreconditionError(
            "x[key] = value is not recorded by a GradientTape or traced by tf.function: "
            "assign to a tf.Variable (v[key] = value), or build the result with "
            "tf.where/tf.tensor_scatter_nd_update-style ops")
    shape = tuple(int(d) for d in x.shape)
    n = int(np.prod(shape, dtype=np.int64))
    try:
        pos = np.arange(n, dtype=np.int64).reshape(shape)[_host_key(key)]
    except (IndexError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"x[key] = value: index {key!r} is not valid for shape "
                                   f"{list(shape)}: {e}") from None
    pos = np.asarray(pos).reshape(-1)
    v = _scalar_value(value, x) if type(value) in (builtins.bool, int, float, complex) \
        else convert_to_tensor(value)
    if v.dtype is not x.dtype:
        if not np.can_cast(v.dtype.np, x.dtype.np, casting="same_kind") and not (
                v.dtype.is_integer and x.dtype.is_floating):
            raise InvalidTypeError(f"x[key] = value: a {v.dtype.name} value does not fit a "
                                   f"{x.dtype.name} tensor; cast it first")
        v = _m.cast(v, x.dtype)
    sel = tuple(int(d) for d in np.arange(n).reshape(shape)[_host_key(key)].shape)
    if v.device != x.device:
        v = v.to(x.device)
    v = reshape(broadcast_to(v, sel), [-1])
    if pos.size and len(np.unique(pos)) != pos.size:       # duplicates: the last write wins
        last = pos.size - 1 - np.unique(pos[::-1], return_index=True)[1]
        last.sort()
        pos = pos[last]
        v = gather(v, constant(last, device=x.device))
    mask = np.zeros(n, np.bool_)
    mask[pos] = True
    dev = x.device
    flat = reshape(x, [-1])
    if x.dtype.is_bool:                 # ScatterNd has no bool kernels: scatter as uint8
        v = _m.cast(v, _dt.uint8)
    scattered = scatter_nd(constant(pos[:, None], device=dev), v, [n])
    if x.dtype.is_bool:
        scattered = _m.cast(scattered, x.dtype)
    new = where(constant(mask, device=dev), scattered, flat)
    new = reshape(new, list(shape))
    if from_var:
        self.assign(new)
    else:
        self._data = new._data
