"""Shape, axis and allocation checks shared by every op signature.

One place decides what a valid shape or axis list is, so every backend sees the
same validated attrs and every bad value gets the same error (docs/errors.md,
"Where bad input is caught"): kernels never see a negative dimension, a duplicate axis or a request for
more memory than the device has.

>>> from tapeflow.runtime import shapes
>>> shapes.as_shape([2, 3], "Fill")
(2, 3)
>>> shapes.normalize_axes([-1, 0], 3, "Sum")
(0, 2)
>>> shapes.normalize_axes([0, 0], 2, "Sum")
Traceback (most recent call last):
...
tapeflow.errors.InvalidArgumentError: axis 0 is given more than once in [0, 0] [Op:Sum]
"""

from __future__ import annotations

import operator
import os

try:
    import resource
except ImportError:         # pragma: no cover - Windows
    resource = None

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, ResourceExhaustedError
from .tensor import Tensor, VariableBase

__all__ = ["as_index", "as_shape", "normalize_axis", "normalize_axes", "check_allocation",
           "check_shape_attr", "device_memory_limit", "format_bytes", "num_elements",
           "check_attrs", "check_rank", "MAX_RANK"]

#: the most dimensions a tensor may have: NumPy's limit (PyOpenCL and CuPy share it)
MAX_RANK = 64


def check_rank(shape, op, device=None):
    """InvalidArgumentError when ``shape`` has more than :data:`MAX_RANK` dimensions.

    >>> check_rank((1,) * 65, "Fill")
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidArgumentError: shape has rank 65, more than the 64 dimensions NumPy and the devices support; merge dimensions (tf.reshape) [Op:Fill]
    """
    if len(shape) > MAX_RANK:
        raise InvalidArgumentError(
            f"shape has rank {len(shape)}, more than the {MAX_RANK} dimensions NumPy and the "
            "devices support; merge dimensions (tf.reshape)", op=op, device=device)


def as_index(value, what, op, device=None) -> int:
    """``value`` as a Python int: ints, NumPy integers and one-element integer tensors
    are accepted; bools, floats, None and strings raise InvalidArgumentError."""
    if type(value) is int:
        return value
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{what} must be an integer, got the bool {value!r}",
                                   op=op, device=device)
    try:
        return operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{what} must be an integer, got {type(value).__name__} {short_repr(value)}",
            op=op, device=device) from None


def as_shape(shape, op, device=None) -> tuple:
    """int / list / tuple / TensorShape / 1-D integer tensor or array -> a tuple of
    non-negative ints (``None`` entries are refused: a concrete shape is needed)."""
    if hasattr(shape, "numpy") and not isinstance(shape, np.ndarray):
        shape = shape.numpy()
    if isinstance(shape, np.ndarray):
        if shape.ndim > 1 or (shape.size and shape.dtype.kind not in "iu"):
            raise InvalidArgumentError(
                f"shape must be a 1-D list of integers, got an array of shape {shape.shape} "
                f"and dtype {shape.dtype}", op=op, device=device)
        shape = shape.reshape(-1).tolist()
    elif not isinstance(shape, (list, tuple)):
        shape = getattr(shape, "as_list", lambda: [shape])()
        if not isinstance(shape, list):
            shape = [shape]
    check_rank(shape, op, device)
    out = tuple(as_index(d, "every dimension of shape", op, device) for d in shape)
    for d in out:
        if d < 0:
            raise InvalidArgumentError(
                f"shape must be non-negative, got {list(out)}", op=op, device=device)
    return out


def normalize_axis(axis, ndim, op, device=None) -> int:
    """One axis in ``[-ndim, ndim)`` -> a non-negative int."""
    a = as_index(axis, "axis", op, device)
    if not -ndim <= a < ndim:
        valid = f"[{-ndim}, {ndim})" if ndim else "none: the input is a scalar"
        raise InvalidArgumentError(
            f"axis {a} is out of range for a tensor of rank {ndim} (valid: {valid})",
            op=op, device=device)
    return a + ndim if a < 0 else a


def normalize_axes(axis, ndim, op, device=None):
    """``None`` / int / list / 1-D tensor of axes -> ``None`` or a sorted tuple of
    distinct non-negative axes. An axis named twice (``[0, 0]``, ``[1, -1]`` of a
    matrix) is an error, as in TensorFlow and NumPy."""
    if axis is None:
        return None
    if type(axis) is int:
        return (normalize_axis(axis, ndim, op, device),)
    if hasattr(axis, "numpy") and not isinstance(axis, np.ndarray):
        axis = axis.numpy()
    if isinstance(axis, np.ndarray):
        if axis.ndim > 1:
            raise InvalidArgumentError(
                f"axis must be an integer or a 1-D list of integers, got shape {axis.shape}",
                op=op, device=device)
        axis = axis.reshape(-1).tolist() if axis.ndim else [axis[()]]
    elif not isinstance(axis, (list, tuple)):
        axis = [axis]
    out = [normalize_axis(a, ndim, op, device) for a in axis]
    if len(set(out)) != len(out):
        dup = next(a for a in out if out.count(a) > 1)
        raise InvalidArgumentError(f"axis {dup} is given more than once in {list(axis)}",
                                   op=op, device=device)
    return tuple(sorted(out))


# --- allocation ----------------------------------------------------------------------

_LIMITS: dict = {}


def _host_memory():
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):      # pragma: no cover - non-POSIX
        return None


def device_memory_limit(device):
    """The largest single allocation ``device`` can hold, in bytes, or ``None`` when
    unknown: the backend's ``memory_info()`` ``max_alloc`` (OpenCL's per-buffer limit)
    or ``total``; the physical memory for host devices."""
    limit = _LIMITS.get(device, 0)
    if limit != 0:
        return limit
    info = {}
    try:
        info = device.backend.memory_info(device) or {}
    except Exception:           # a backend without memory statistics: no limit known
        pass
    limit = info.get("max_alloc") or info.get("total")
    if not limit and device.is_host:
        limit = _host_memory()
        if resource is not None:    # a process limited in address space (ulimit -v)
            soft = resource.getrlimit(resource.RLIMIT_AS)[0]
            if soft != resource.RLIM_INFINITY and soft > 0:
                limit = min(limit, soft) if limit else soft
    _LIMITS[device] = limit or None
    return _LIMITS[device]


def format_bytes(n) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def num_elements(shape) -> int:
    """The number of elements of a shape (1 for ``()``), as a Python int."""
    n = 1
    for d in shape:
        n *= d
    return n


def check_allocation(shape, dtype, device, op):
    """ResourceExhaustedError before allocating a ``shape`` x ``dtype`` result that
    cannot fit on ``device`` (names the bytes requested, the device and its limit)."""
    n = num_elements(shape)
    if n == 0:
        return
    nbytes = n * np.dtype(_dt.as_dtype(dtype).np).itemsize
    limit = device_memory_limit(device)
    if limit is not None and nbytes > limit:
        raise ResourceExhaustedError(
            f"Out of memory: a {_dt.as_dtype(dtype).name} tensor of shape {list(shape)} needs "
            f"{format_bytes(nbytes)} ({nbytes} bytes), more than {device} can hold in one "
            f"buffer ({format_bytes(limit)}). Use a smaller shape or batch.", op=op,
            device=device)


def check_shape_attr(op, tensors, attrs, device):
    """OpDef ``check`` for ops that make a tensor of the attr ``shape`` (creation ops,
    BroadcastTo): the shape is valid and fits on the device, with the attr ``dtype``
    (else the first input's dtype, else float32)."""
    shape = attrs.get("shape")
    if shape is None:
        return
    if hasattr(shape, "__len__") and len(shape) > MAX_RANK:
        check_rank(shape, op.name, device)
    n = 1
    try:
        for d in shape:
            if d < 0:
                break
            n *= d
        else:
            if type(shape) is tuple and n < SMALL:   # the common case: nothing to check
                return
    except TypeError:
        pass
    if type(shape) is not tuple or any(type(d) is not int or d < 0 for d in shape):
        shape = as_shape(shape, op.name, device)
    dtype = attrs.get("dtype") or (tensors[0].dtype if tensors else _dt.float32)
    check_allocation(shape, dtype, device, op.name)


#: results of fewer elements than this fit on any device (256 MiB of float64)
SMALL = 1 << 25


def short_repr(v):
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


# --- typed attrs ------------------------------------------------------------------------
#
# An op may declare the type of each attr (``OpDef(attr_types={"axis": "axes?"})``);
# ``OpDef.__call__`` and the functions a ``Library`` generates (eagerly and while
# tf.function traces alike) validate the attrs against it, so every backend's kernel
# receives attrs in their canonical form (the built-ins' public functions build
# canonical attrs themselves). A Library op's attrs are typed from their defaults
# unless it says otherwise. No attr is ever a tensor or an array.
# Kinds (a trailing ``?`` also allows None):
#   any (any Python value but a tensor or an array), bool, int, uint (a non-negative
#   int), float (a real number), number (a real number
#   or a bool), str, reshape (a tuple of non-negative ints and at most one -1),
#   enum:A|B|C, dtype, axis (0 <= axis < rank of the first input), axis+1 (a new axis:
#   0 <= axis <= rank), axes (a sorted tuple of distinct axes), shape (a tuple of
#   non-negative ints), sizes (a tuple of positive ints), perm (a permutation of the
#   first input's dimensions), paddings (one (before, after) pair of non-negative ints
#   per dimension of the first input).

_KIND_WORDS = {"any": "not a tensor or an array", "bool": "a bool", "int": "an int", "uint": "a non-negative int",
               "float": "a real number", "number": "a real number or a bool", "str": "a string",
               "dtype": "a tapeflow dtype", "axis": "an axis", "axes": "a tuple of axes",
               "shape": "a tuple of sizes"}


def _fail_type(op, name, want, v):
    raise InvalidTypeError(
        f"attr '{name}' of {op} must be {want}, got {type(v).__name__} {short_repr(v)}", op=op)


def _fail_value(op, name, want, v):
    raise InvalidArgumentError(f"attr '{name}' of {op} must be {want}, got {short_repr(v)}", op=op)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v):
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_))


def _int_tuple(op, name, v, want, minimum):
    if type(v) is not tuple or not all(_is_int(d) for d in v):
        _fail_type(op, name, f"a tuple of ints ({want})", v)
    if any(d < minimum for d in v):
        _fail_value(op, name, want, v)


def _check_attr(op, name, kind, v, rank):
    if kind.endswith("?"):
        if v is None:
            return
        kind = kind[:-1]
    if isinstance(v, (Tensor, VariableBase, np.ndarray)):
        got = (f"{type(v).__name__} of dtype {getattr(v.dtype, 'name', v.dtype)} and shape "
               f"{list(v.shape)}")
        raise InvalidTypeError(
            f"attr '{name}' of {op} must be a Python value ({_KIND_WORDS.get(kind, kind)}), "
            f"got a {got}: attrs are part of the op's signature, the same at every call of a "
            "traced function; pass a Python value (float(t) / t.numpy().tolist() if it must "
            "come from a tensor), or make it an input of the op", op=op)
    if kind == "any":
        return
    if kind == "bool":
        if not isinstance(v, (bool, np.bool_)):
            _fail_type(op, name, "a bool", v)
    elif kind == "int":
        if not _is_int(v):
            _fail_type(op, name, "an int", v)
    elif kind == "uint":
        if not _is_int(v):
            _fail_type(op, name, "a non-negative int", v)
        if v < 0:
            _fail_value(op, name, "a non-negative int", v)
    elif kind == "float":
        if not _is_real(v):
            _fail_type(op, name, "a real number", v)
    elif kind == "number":
        if not (_is_real(v) or isinstance(v, (bool, np.bool_))):
            _fail_type(op, name, "a real number or a bool", v)
    elif kind == "str":
        if not isinstance(v, str):
            _fail_type(op, name, "a string", v)
    elif kind.startswith("enum:"):
        allowed = kind[5:].split("|")
        if v not in allowed:
            _fail_value(op, name, "one of " + ", ".join(repr(a) for a in allowed), v)
    elif kind == "dtype":
        if not isinstance(v, _dt.DType):
            _fail_type(op, name, "a tapeflow dtype (tf.float32, ...)", v)
    elif kind in ("axis", "axis+1"):
        if not _is_int(v):
            _fail_type(op, name, "an int", v)
        n = None if rank is None else rank + (kind == "axis+1")
        if n is not None and not 0 <= v < n:
            _fail_value(op, name, f"an axis in [0, {n}) (normalised: no negative axes)", v)
    elif kind == "axes":
        _int_tuple(op, name, v, "sorted, distinct, non-negative axes", 0)
        if list(v) != sorted(set(v)) or (rank is not None and any(a >= rank for a in v)):
            _fail_value(op, name, f"a sorted tuple of distinct axes in [0, {rank})", v)
    elif kind == "shape":
        _int_tuple(op, name, v, "non-negative sizes", 0)
        check_rank(v, op)
    elif kind == "reshape":
        _int_tuple(op, name, v, "non-negative sizes, or -1 once", -1)
        check_rank(v, op)
        if v.count(-1) > 1:
            _fail_value(op, name, "non-negative sizes with at most one -1", v)
    elif kind == "sizes":
        _int_tuple(op, name, v, "positive sizes", 1)
    elif kind == "perm":
        _int_tuple(op, name, v, "a permutation", 0)
        if rank is not None and sorted(v) != list(range(rank)):
            _fail_value(op, name, f"a permutation of range({rank})", v)
    elif kind == "paddings":
        if (type(v) is not tuple or not all(type(p) is tuple and len(p) == 2
                                            and all(_is_int(q) and q >= 0 for q in p)
                                            for p in v)):
            _fail_type(op, name, "a tuple of (before, after) pairs of non-negative ints", v)
        if rank is not None and len(v) != rank:
            _fail_value(op, name, f"{rank} (before, after) pairs, one per dimension", v)
    else:                                                # pragma: no cover - a typo
        raise ValueError(f"unknown attr kind {kind!r} for attr {name!r} of {op}")


def check_attrs(op, inputs, attrs):
    """Validate ``attrs`` of ``op`` against ``op.attr_types`` (see above)."""
    rank = None
    if inputs:
        x = inputs[0]
        try:
            rank = len(x.shape) if hasattr(x, "shape") else int(np.ndim(x))
        except (TypeError, ValueError):
            rank = None
    for name, kind in op.attr_types.items():
        _check_attr(op.name, name, kind, attrs.get(name), rank)
