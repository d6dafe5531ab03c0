"""Helpers shared by the array op modules (``array_*.py``): argument normalisation
(axes, shapes, scalars, indices), the device an op on an input runs on, and the builtins
that :mod:`tapeflow.ops.array_creation` and :mod:`tapeflow.ops.array_slice` shadow
(``range``, ``slice``). Nothing here defines an op.
"""

from __future__ import annotations

import builtins
import operator

import numpy as np

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import run, convert_to_tensor
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .library import check_fits

# This module defines `range` and `slice`: keep the builtins under other names.
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


# --- helpers -------------------------------------------------------------------------

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
