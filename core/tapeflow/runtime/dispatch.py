"""The one dispatch path: convert inputs, pick the device, find the kernel, run it,
wrap the outputs, record on active tapes.

``execute(op, inputs, attrs)`` is the general entry point; ``binary`` is the
same path specialised for two operands (Tensor operators), measured because
``a + b`` is the figure users compare us by. Both end in ``run``.

Placement (docs/decisions.md section 5): inside ``with tf.device(d)`` ops run on ``d``
and host inputs are copied there; otherwise an op runs where its tensor inputs
live (an accelerator input wins over host inputs) and inputs without a device
(Python scalars, lists, NumPy arrays) go with it; with no tensor input at all
it runs on the default device. An input on another device is copied when it is
a host tensor of at most ``SMALL_HOST_ELEMENTS`` elements (the seeds' ``x * 2.0``)
or the policy is ``"silent"``/``"warn"``; else DeviceMismatchError.

Long file: the one path from a Python call to a kernel -- converting values to tensors
(``constant``), placing, promoting, running, recording -- and the methods of the classes
below it that run it; split, each half would import the other.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import devices as _devs
from .. import dtypes as _dt
from . import shapes as _shapes
from ..errors import (DeviceMismatchError, InvalidArgumentError, InvalidTypeError, OpError,
                     ResourceExhaustedError, TapeflowError)
from . import context as _ctx
from . import registry as _reg
from .registry import OpDef, get_op, kernel_not_found
from .tensor import Tensor, VariableBase as Variable, speedups, wrap

__all__ = ["execute", "convert_to_tensor", "convert_like", "as_tensor_list", "constant",
           "copy_to_device"]

active_scopes = _devs.active_scopes
_tracing = _ctx.tracing
_thread = _ctx.thread_tracer
_tapes_active = _ctx.tapes_active
record = _ctx.record
_EMPTY: dict = {}
_NOFAST: dict = {}
SMALL_HOST_ELEMENTS = 16


class _Policy:
    mode = "explicit"       # "explicit" | "silent" | "warn"
    silent_copies = 0


policy = _Policy()


# --- conversion ----------------------------------------------------------------

def _np_from_python(value, dtype, dev=None, op="Const"):
    """Host array for a Python/NumPy value; Python floats default to float32 and
    ints to int32 (int64 when they do not fit), as in the seeds.

    Nothing larger than ``dev`` (default: the host) can hold is allocated: a NumPy
    broadcast view (zero strides: ``np.broadcast_to(x, (100000, 100000))`` is a few
    bytes, 37 GiB once copied) or a list of large arrays is measured first, and
    refused with ResourceExhaustedError when its copy cannot fit. A broadcast view that
    fits stays a view: its distinct values are copied (a tensor does not change when
    the caller's array does) and broadcast again, since NumPy kernels take zero-stride
    arrays; :func:`_to_device` makes it contiguous where a device needs that."""
    tv = type(value)
    if dtype is None and (tv is float or tv is int and -2**31 <= value < 2**31):
        return np.array(value, np.float32 if tv is float else np.int32)   # tf.constant(27)
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return _np_from_numpy(value, dtype, dev, op)
    n = _array_elements(value)
    if n is not None and n > _shapes.SMALL:
        _check_conversion(value, n, dtype, dev, op)
    if dtype is not None:
        _check_lossless(value, dtype)
    try:
        a = np.array(value, dtype=None if dtype is None else dtype.np)
    except MemoryError as e:        # (measured above where it holds arrays)
        raise _exhausted(value, str(e), dev, op) from None
    except (ValueError, OverflowError, TypeError) as e:
        if isinstance(e, UnicodeError) and dtype in (None, _dt.string):
            return _np_strings(value)       # (str beside non-ASCII bytes)
        raise InvalidArgumentError(
            f"Cannot convert {_short(value)} to a tensor"
            + (f" of dtype {dtype.name}" if dtype is not None else "") + f": {e}") from None
    if dtype is None:
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        elif a.dtype == np.int64:
            if a.size == 0 or (a.min() >= -2**31 and a.max() < 2**31):
                a = a.astype(np.int32)
    return _supported(a, value)


def _supported(a, value):
    if a.dtype.kind in "USO":
        return _np_strings(value)
    if a.dtype not in _dt.FROM_NP:
        if a.dtype.kind == "f" and a.dtype.itemsize > 8:
            a = a.astype(np.float64)
        else:
            raise InvalidArgumentError(
                f"Cannot convert {_short(value)} (NumPy dtype {a.dtype}) to a tensor; supported "
                "dtypes: " + ", ".join(d.name for d in _dt.ALL_DTYPES))
    return a


def _np_strings(value):
    """``value`` (str, bytes, lists of them, a NumPy text array) as a host array of
    ``bytes`` objects, ``str`` encoded in UTF-8: a string tensor's data (docs/dtypes.md,
    "Strings"); anything else in it is an InvalidArgumentError."""
    a = np.array(value, dtype=object)
    for i, v in enumerate(flat := a.reshape(-1)):
        if type(v) is Tensor and v.dtype is _dt.string and not v._data.ndim:
            v = v._data[()]                 # ([line] in a dataset's map: a 0-d string tensor)
        if not isinstance(v, (str, bytes)):
            raise InvalidArgumentError(f"Cannot convert {_short(value)} to a tensor of dtype "
                                       f"string: it holds {type(v).__name__} {_short(v)}; give "
                                       "str or bytes, in rows of one length")
        flat[i] = v.encode() if isinstance(v, str) else bytes(v)
    return a


def _host_only(a, dev, op):
    """Strings live on the host: an error for string data ``a`` bound for another ``dev``."""
    if a.dtype.kind == "O" and not dev.is_host:
        raise InvalidArgumentError(f"a string tensor cannot be placed on {dev}: strings live "
                                   "on the host: compute on cpu:0", op=op, device=dev)


def _np_from_numpy(value, dtype, dev, op):
    """:func:`_np_from_python` for NumPy arrays and scalars: a copy (tensors are values),
    broadcast views kept as views of a copy of their distinct values."""
    if value.ndim and value.size > 1 and 0 in value.strides:
        src = value[tuple(slice(0, 1) if st == 0 else slice(None) for st in value.strides)]
        if value.size > _shapes.SMALL:
            _check_conversion(value, value.size, dtype, dev, op)
    else:
        src = None
    if dtype is not None and value.dtype != dtype.np:
        _check_lossless(value if src is None else src, dtype)
    try:
        if src is None:
            a = np.array(value, dtype=None if dtype is None else dtype.np, copy=True)
        else:
            a = np.broadcast_to(np.array(src, dtype=None if dtype is None else dtype.np,
                                         copy=True), value.shape)
    except MemoryError as e:        # a copy of an array that exists: near the host's limit
        raise _exhausted(value, str(e), dev, op) from None
    return _supported(a, value)


def _array_elements(value, depth=0):
    """The number of elements a list or tuple holding NumPy arrays converts
    to, from its first entries (ragged ones fail in NumPy anyway); None for one that holds
    only Python values (whose size is already in memory)."""
    if isinstance(value, np.ndarray):
        return value.size
    if type(value) is not list and type(value) is not tuple or not value or depth > 8:
        return None
    first = value[0]
    tv = type(first)
    if tv is float or tv is int or tv is bool or tv is complex:
        return None             # (the common case: a list of Python numbers)
    first = _array_elements(first, depth + 1)
    return None if first is None else first * len(value)


def _describe_value(value):
    if isinstance(value, np.ndarray):
        what = f"a NumPy array of shape {list(value.shape)} and dtype {value.dtype}"
        if value.ndim and 0 in value.strides:
            what += (f" (a broadcast view: zero strides, {value.strides}, "
                     f"{_shapes.format_bytes(_view_bytes(value))} in memory)")
        return what
    leaf = value
    while type(leaf) is list or type(leaf) is tuple:
        leaf = leaf[0]
    return (f"a {type(value).__name__} of {len(value)} entries holding "
            + _describe_value(leaf).replace("a NumPy array", "NumPy arrays like one", 1))


def _view_bytes(a):
    n = a.itemsize
    for d, st in zip(a.shape, a.strides):
        if st:
            n *= d
    return n


def _check_conversion(value, n, dtype, dev, op):
    """ResourceExhaustedError before converting ``value`` (``n`` elements) on ``dev``
    (the host when None) when its copy cannot fit."""
    leaf = value
    while type(leaf) is list or type(leaf) is tuple:
        leaf = leaf[0]
    itemsize = dtype.np.itemsize if dtype is not None else leaf.dtype.itemsize
    nbytes = n * itemsize
    dev = dev or _host_device()
    limit = _shapes.device_memory_limit(dev)
    if not dev.is_host:
        host = _shapes.device_memory_limit(_host_device())
        limit = host if limit is None else limit if host is None else min(limit, host)
    if limit is not None and nbytes > limit:
        raise _exhausted(value, f"its copy needs {_shapes.format_bytes(nbytes)} ({nbytes} "
                         f"bytes), more than {dev} can hold in one buffer "
                         f"({_shapes.format_bytes(limit)})", dev, op)


def _exhausted(value, detail, dev, op):
    return ResourceExhaustedError(
        f"Out of memory converting {_describe_value(value)} to a tensor: {detail}. Pass a "
        "smaller array; for a broadcast, compute on the small array and let the op broadcast "
        "it (tf.broadcast_to, or a tensor with size-1 dimensions)", op=op,
        device=dev or _host_device())


def _host_device():
    return _devs.get_device("cpu:0")


def _check_lossless(value, dtype):
    """No silent coercion (as TensorFlow): float values into integer and bool dtypes,
    complex, string and object values into any dtype, and integers outside the
    dtype's range are refused instead of truncated or wrapped."""
    tv = type(value)
    if tv is int or tv is bool or (tv is float and dtype.np.kind in "fc") or (
            tv is complex and dtype.np.kind == "c") or dtype is _dt.string:
        return                              # (a string's values: checked by _np_strings)
    kind = value.dtype.kind if isinstance(value, (np.ndarray, np.generic)) else None
    if kind is None:
        try:
            probe = np.asarray(value)
        except (ValueError, TypeError, OverflowError):
            return                          # the conversion itself reports it
        if not probe.size:
            return                          # ([] holds no value to coerce)
        kind = probe.dtype.kind
    if kind in "USOMmV" or (kind == "f" and dtype.np.kind in "iub") or (
            kind == "c" and dtype.np.kind != "c"):
        what = {"f": "floating-point", "c": "complex", "U": "string", "S": "bytes",
                "O": "non-numeric"}.get(kind, "date, time or structured")
        raise InvalidArgumentError(
            f"Cannot convert {_short(value)} to a tensor of dtype {dtype.name}: it holds "
            f"{what} values, and tapeflow does not truncate or coerce them silently. Convert "
            "it to a tensor and tf.cast it (after tf.round, if rounding is what you mean; "
            "tf.math.real for a complex value's real part).")
    if kind in "iu" and dtype.np.kind in "iu" and isinstance(value, np.ndarray) and value.size:
        info = np.iinfo(dtype.np)
        lo, hi = value.min(), value.max()
        if lo < info.min or hi > info.max:
            raise InvalidArgumentError(
                f"Cannot convert an array with values in [{lo}, {hi}] to a tensor of dtype "
                f"{dtype.name} [{info.min}, {info.max}] without overflow; use a wider dtype.")


def _short(v):
    r = repr(v)
    return r if len(r) < 80 else r[:77] + "..."


def _to_device(host_array, dev, op="Const"):
    """Upload a host array to ``dev`` (the host keeps it, views included); a broadcast
    view is made contiguous first, after checking that it fits on ``dev``."""
    if dev.is_host:
        return host_array
    _host_only(host_array, dev, op)
    if not host_array.flags.c_contiguous:   # (ascontiguousarray would make 0-d arrays 1-d)
        if host_array.size > _shapes.SMALL:
            _check_conversion(host_array, host_array.size, None, dev, op)
        try:
            host_array = np.ascontiguousarray(host_array)
        except MemoryError as e:
            raise _exhausted(host_array, str(e), dev, op) from None
    try:
        return dev.backend.from_host(host_array, dev)
    except OpError as e:        # (a dtype the device cannot hold: UnimplementedError)
        raise e.with_context(op, dev) from None


def constant(value, dtype=None, shape=None, name=None, device=None) -> Tensor:
    """A tensor holding ``value`` (Python scalars/lists, NumPy arrays, Tensors).

    >>> import tapeflow as tf
    >>> print(tf.constant([[1., 2.]]))
    tf.Tensor([[1. 2.]], shape=(1, 2), dtype=float32)
    >>> tf.constant(0, shape=[2, 2]).shape
    TensorShape([2, 2])
    """
    dt = None if dtype is None else _dt.as_dtype(dtype)
    if isinstance(value, Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        t = value
        if dt is not None and t.dtype is not dt:
            t = execute(get_op("Cast"), (t,), {"dtype": dt})
        if shape is not None:
            shape = _const_shape(shape, t.dtype, t._data.shape, t._device)
            n = _shapes.num_elements(shape)
            if t.size != n:
                _shapes.check_allocation(shape, t.dtype, t._device, "Const")
            t = execute(get_op("Reshape" if t.size == n else "BroadcastTo"),
                        (t,), {"shape": shape})
        if device is not None:
            t = copy_to_device(t, device)
        return t
    dev = (_devs.get_device(device) if device is not None else
           _devs.current_device() or _devs.default_device())
    try:
        a = _np_from_python(value, dt, dev)
    except OpError as e:
        raise e.with_context("Const", dev) from None
    if a.dtype.kind == "O" and device is None and _devs.current_device() is None:
        dev = _host_device()        # (strings live on the host, whatever the default device)
    if shape is not None:
        shape = _const_shape(shape, _dt.from_numpy(a.dtype), a.shape, dev)
        if a.size == _shapes.num_elements(shape):
            a = a.reshape(shape)
        elif a.size == 1:
            _shapes.check_allocation(shape, _dt.from_numpy(a.dtype), dev, "Const")
            a = np.broadcast_to(a.reshape(()), shape).copy()
        else:
            raise InvalidArgumentError(
                f"constant: value of shape {a.shape} ({a.size} elements) cannot be reshaped or "
                f"broadcast to shape {shape}", op="Const", device=dev)
    return wrap(_to_device(a, dev), dev)


def _const_shape(shape, dtype, value_shape, dev):
    """``constant``'s ``shape=`` as a tuple of non-negative ints; refused with the value's
    dtype and shape and what to give instead (``tf.constant(x, shape=[None])``)."""
    try:
        return _shapes.as_shape(shape, "Const", dev)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(
            f"constant: shape={_shapes.short_repr(shape)} is not a valid shape for a {dtype.name} "
            f"value of shape {list(value_shape)}: {e.message}. Give a list of non-negative "
            "integers (shape=[2, 3]); None is for tf.TensorSpec", op="Const", device=dev) from None


def convert_to_tensor(value, dtype=None, name=None, dtype_hint=None, preferred_dtype=None):
    """Tensors pass through (checked against ``dtype``), Variables are read (and
    watched), everything else becomes a :func:`constant`.

    >>> import tapeflow as tf
    >>> tf.convert_to_tensor(3).dtype, tf.convert_to_tensor(3.0).dtype
    (tf.int32, tf.float32)
    """
    if isinstance(value, Variable):
        value = value.read_value()
    if isinstance(value, Tensor):
        if dtype is not None and value.dtype != dtype:
            raise InvalidArgumentError(
                f"convert_to_tensor: tensor has dtype {value.dtype.name}, requested "
                f"{_dt.as_dtype(dtype).name}; use tf.cast to change it.")
        return value
    if dtype is None and (dtype_hint or preferred_dtype) is not None:
        try:
            return constant(value, dtype=dtype_hint or preferred_dtype)
        except (InvalidArgumentError, TypeError, ValueError):
            pass
    return constant(value, dtype=dtype)


def convert_like(value, like, dtype=None):
    """``value`` as a Tensor that follows ``like`` (a Tensor): Tensors and Variables
    are converted as by :func:`convert_to_tensor`; Python and NumPy values go to the
    active device scope, else to ``like``'s device -- as the dispatcher places them.
    Public functions use it for arguments they must inspect before the op runs
    (``bias_add``'s bias), so that an op on an accelerator tensor does not create its
    other operands on the default device.

    >>> import tapeflow as tf
    >>> from tapeflow.runtime.dispatch import convert_like
    >>> x = tf.constant([1., 2.])
    >>> convert_like([3, 4], x, dtype=x.dtype).dtype
    tf.float32
    """
    if isinstance(value, (Tensor, Variable)):
        return convert_to_tensor(value, dtype=dtype)
    return constant(value, dtype=dtype, device=_devs.current_device() or like._device)


def as_tensor_list(values, op, what="values"):
    """``values`` (a list or tuple of tensors, or one tensor or array to split along
    its first dimension) as a tuple, for ops that take a list (``stack``, ``add_n``);
    anything else -- a number, a string, bytes, None -- is an InvalidTypeError."""
    if isinstance(values, (list, tuple)):
        return tuple(values)
    if isinstance(values, (Tensor, Variable, np.ndarray)) and len(values.shape) >= 1:
        if isinstance(values, np.ndarray) and values.size > _shapes.SMALL:
            # (a broadcast view: its rows, converted one by one, add up to all of it)
            dev = _devs.current_device() or _devs.default_device()
            try:
                _check_conversion(values, values.size, None, dev, op)
            except ResourceExhaustedError as e:
                raise e.with_context(op, dev) from None
        return tuple(values)
    raise InvalidTypeError(
        f"{what} must be a list of tensors, got {type(values).__name__} {_short(values)}",
        op=op, device=_devs.current_device() or _devs.default_device())


# --- device movement -------------------------------------------------------------

def _copy_grad(ctx, dy):
    return copy_to_device(dy, ctx.inputs[0]._device)


def copy_to_device(t: Tensor, device, op="Copy") -> Tensor:
    """Copy a tensor to ``device`` (differentiable: the gradient is copied back); ``op``:
    the op it is an input of, for errors."""
    dev = _devs.get_device(device)
    if isinstance(t, Variable):
        t = t.read_value()
    src = t._device
    if src is dev:
        return t
    _host_only(t._data, dev, op)
    if src.is_host and t._data.size > _shapes.SMALL and not t._data.flags.c_contiguous:
        _check_conversion(t._data, t._data.size, None, dev, "Copy")   # (a broadcast view)
    if src.backend is dev.backend:
        data = dev.backend.copy_from(t._data, src, dev)
    elif dev.is_host:
        data = np.array(src.backend.to_host(t._data, src), copy=True)
    else:
        data = dev.backend.copy_from(t._data, src, dev)
    out = wrap(data, dev)
    if _tracing[0]:
        tr = _thread.tracer
        if tr is not None:
            tr.copy(t, out, dev)
    if _tapes_active[0]:
        record(COPY, (t,), (out,), _EMPTY, None)
    return out


# --- dispatch --------------------------------------------------------------------

def _weak(value):
    """Python bool/int/float (or a list of them) -> a representative weak scalar,
    else None (the value is strong: Tensor, NumPy array or NumPy scalar)."""
    tv = type(value)
    if tv is float or tv is int or tv is bool or tv is complex:
        return value
    if tv is list or tv is tuple:
        n = _array_elements(value)
        if n is not None and n > _shapes.SMALL:
            return None         # (a list of large arrays: measured by the conversion)
        try:
            a = np.asarray(value)
        except (ValueError, MemoryError):
            return None
        if a.dtype.kind == "f" and a.dtype != object:
            return 0.0
        if a.dtype.kind in "iu":
            return 0
        if a.dtype.kind == "b":
            return False
        if a.dtype.kind == "c":
            return 0j
    return None


def _execute_py(op, inputs, attrs=_EMPTY):
    """Run ``op`` on ``inputs`` (a tuple) with complete ``attrs``; returns a Tensor
    or a tuple of Tensors (``execute``: the C core's fast path falls back to this).

    The one fast path: when every input is a Tensor on one device with one dtype --
    outside a device scope, or on the scope's device (the seeds' training loops run
    under ``with tf.device("/gpu:0")``; placement has nothing to do then), and no
    tracer is recording (tf.function and vectorized_map count as a scope) -- and the op
    has a fast kernel for it (``op.fast``: filled by the registry for kernels that need
    no device argument and ops without a ``check``), one dict lookup finds the kernel,
    and the result is wrapped and recorded on the active tapes here. Everything else --
    conversion, promotion, placement, checks, composites, several outputs, tracing --
    goes through ``_prepare`` and ``run``.
    """
    if inputs:
        first = inputs[0]
        if type(first) is Tensor and (not active_scopes[0] or (
                not _tracing[0] and first._device is _devs.current_device())):
            dev = first._device
            dt = first._data.dtype
            if len(inputs) == 1:
                second = None
            else:
                second = inputs[1]
                if (len(inputs) > 2 or type(second) is not Tensor or second._device is not dev
                        or second._data.dtype != dt):
                    # no fast kernel call; still no conversion when every input is a
                    # Tensor on this device (of one dtype, unless the op takes mixed ones)
                    for x in inputs:
                        if type(x) is not Tensor or x._device is not dev or (
                                x._data.dtype != dt and op.dtype_rule == "same"):
                            break
                    else:
                        return run(op, inputs, dev, attrs)
                    return _general(op, inputs, attrs)
            fn = op.fast.get(dev.type, _NOFAST).get(dt)
            if fn is None or op.num_outputs != 1:
                return run(op, inputs, dev, attrs)
            try:
                if second is None:
                    out = fn(first._data, **attrs) if attrs else fn(first._data)
                else:
                    out = (fn(first._data, second._data, **attrs) if attrs
                           else fn(first._data, second._data))
            except Exception as e:
                raise translate_error(e, op, dev, inputs, attrs) from None
            t = wrap(out, dev)
            if _tapes_active[0] and op.differentiable:
                record(op, inputs, (t,), attrs)
            return t
    return _general(op, inputs, attrs)


def _binary_py(op, a, b):
    """``execute(op, (a, b))`` for Tensor operators and two-operand functions, the path
    users time (``a + b``): ``binary``, which the C core (``runtime/_c/dispatch.c``)
    replaces with its fast path falling back to this function. A Python
    scalar next to a Tensor becomes a cached 0-d tensor of the Tensor's dtype when NumPy
    2's weak-scalar rule keeps that dtype (the seeds' ``x * 2.0``, Collatz's ``a % 2``).
    Inside a device scope this path is taken when the Tensor operands are on the
    scope's device (the C operators leave scopes to this function)."""
    if not active_scopes[0] or _on_scope_device(a, b):
        ta = type(a)
        tb = type(b)
        if ta is Tensor:
            if tb is not Tensor:
                if not ((tb is float or tb is int) and _keeps_dtype(b, tb, a)):
                    return _general(op, (a, b), _EMPTY)
                b = scalar_like(b, a)
        elif tb is Tensor and (ta is float or ta is int) and _keeps_dtype(a, ta, b):
            a = scalar_like(a, b)
        else:
            return _general(op, (a, b), _EMPTY)
        dev = a._device
        x = a._data
        dt = x.dtype
        y = b._data
        if b._device is dev and (y.dtype is dt or y.dtype == dt):
            fn = op.fast.get(dev.type, _NOFAST).get(dt)
            if fn is None:
                return run(op, (a, b), dev, _EMPTY)
            try:
                out = fn(x, y)
            except Exception as e:
                raise translate_error(e, op, dev, (a, b), _EMPTY) from None
            t = wrap(out, dev)
            if _tapes_active[0] and op.differentiable:
                record(op, (a, b), (t,), _EMPTY)
            return t
    return _general(op, (a, b), _EMPTY)


def _on_scope_device(a, b):
    """Whether the Tensor operands of ``a``, ``b`` (one at least) are on the device of
    this thread's innermost device scope."""
    if _tracing[0]:             # (tracers count as a scope: their hook is on the slow path)
        return False
    scope = _devs.current_device()
    ta = type(a) is Tensor
    tb = type(b) is Tensor
    return ((ta or tb) and (not ta or a._device is scope) and (not tb or b._device is scope))


def _keeps_dtype(value, tv, like):
    """Whether Python scalar ``value`` (of type ``tv``) next to ``like`` keeps its dtype."""
    k = like._data.dtype.kind
    return k == "f" or k == "c" or (        # (callers pass Python floats and ints only)
        tv is int and k in "iu" and -128 <= value <= 127 and (value >= 0 or k == "i"))


_SCALARS: dict = {}


def scalar_like(value, like):
    """A 0-d tensor of ``like``'s dtype and device holding a Python scalar (cached:
    tensors are immutable, and loops reuse the same few constants)."""
    dev = like._device
    dt = like._data.dtype
    tv = type(value)
    # 0.0 == -0.0 (and hash alike): key zeros by their text, so -0.0 keeps its sign
    key = (value, tv, dt, dev) if value or tv is not float else (repr(value), tv, dt, dev)
    t = _SCALARS.get(key)
    if t is None:
        a = np.array(value, dtype=dt)
        # (on the host a NumPy scalar, as NumPy's ops on 0-d arrays return)
        t = wrap(a[()] if dev.is_host else dev.backend.from_host(a, dev), dev)
        if len(_SCALARS) > 512:
            _SCALARS.clear()
        _SCALARS[key] = t
    return t


def _scalar_or_none(value, like):
    """The cached 0-d tensor for Python scalar ``value`` next to Tensor ``like`` when it
    keeps ``like``'s dtype, else None (the C operators' cache asks this on a miss)."""
    tv = type(value)
    if (tv is float or tv is int) and _keeps_dtype(value, tv, like):
        return scalar_like(value, like)
    return None


class CompositeInput(Exception):
    """Raised by :func:`_prepare` for an input whose type defines ``__tapeflow_dispatch__``."""


def _general(op, inputs, attrs):
    """The general path: :func:`_prepare`, then :func:`run`. An input that is a composite
    tensor (``tf.RaggedTensor``, ``tf.SparseTensor``, a plugin's: its type defines
    ``__tapeflow_dispatch__(op, inputs, attrs)``) takes the whole op instead."""
    try:
        tensors, dev = _prepare(op, inputs)
    except CompositeInput as c:
        return type(c.args[0]).__tapeflow_dispatch__(op, inputs, attrs)
    return run(op, tensors, dev, attrs)


def _prepare(op, inputs):
    """The general path: convert, promote, place. Returns (tensors, device)."""
    if op.variadic and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    scope = _devs.current_device()
    if scope is None and inputs and type(inputs[0]) is Tensor:
        # Tensors on one device, of one dtype where the op promotes: nothing to do (the
        # path of every op while tf.function or vectorized_map traces)
        dev = inputs[0]._device
        dt = inputs[0]._data.dtype
        for x in inputs:
            if type(x) is not Tensor or x._device is not dev or (
                    x._data.dtype != dt and op.dtype_rule == "same"):
                break
        else:
            return tuple(inputs), dev
    vals = []
    strong = []
    weak = []
    tensor_dev = None
    for x in inputs:
        if isinstance(x, Variable):
            x = x.read_value()   # watched by active tapes
        if isinstance(x, Tensor):
            strong.append(x.dtype)
            d = x._device
            if tensor_dev is None or (tensor_dev.is_host and not d.is_host):
                tensor_dev = d
        elif op.dtype_rule == "same":
            w = _weak(x)
            if w is None:
                try:
                    if isinstance(x, (np.ndarray, np.generic)):
                        strong.append(_dt.from_numpy(x.dtype))
                    elif hasattr(type(x), "__tapeflow_dispatch__"):
                        raise CompositeInput(x)
                    else:       # (a list of NumPy arrays, a string: what does it hold?)
                        strong.append(_dt.from_numpy(_np_from_python(x, None, None,
                                                                     op.name).dtype))
                except OpError as e:
                    raise e.with_context(op.name, scope or _host_device()) from None
            else:
                weak.append(w)
        vals.append(x)
    dev = scope or tensor_dev or _devs.current_device() or _devs.default_device()
    target = None
    if op.dtype_rule == "same" and (strong or weak):
        if strong and all(s is strong[0] for s in strong) and not weak:
            target = strong[0]
        else:
            try:
                target = _dt.result_type(*strong, *weak)
            except (TypeError, OverflowError) as e:
                raise InvalidArgumentError(
                    f"Cannot promote input dtypes {[s.name for s in strong]} with Python "
                    f"values {weak}: {getattr(e, 'message', e)}", op=op.name, device=dev) from None
    if target is _dt.string and scope is None and tensor_dev is None:
        dev = _host_device()        # (Python strings alone: the host, as constant() does)
    out = []
    for x in vals:
        if isinstance(x, Tensor):
            if target is not None and x._data.dtype != target.np:
                x = execute(get_op("Cast"), (x,), {"dtype": target})
            if x._device is not dev:
                x = _move(op, x, dev, scope is not None, inputs)
        else:
            if hasattr(type(x), "__tapeflow_dispatch__"):
                raise CompositeInput(x)
            try:
                a = _np_from_python(x, target, dev, op.name)
            except OpError as e:
                raise e.with_context(op.name, dev) from None
            if target is not None and a.dtype != target.np:
                a = a.astype(target.np)
            x = wrap(_to_device(a, dev, op.name), dev)
        out.append(x)
    return tuple(out), dev


def _move(op, x, dev, in_scope, inputs):
    small = x._device.is_host and (x.size <= SMALL_HOST_ELEMENTS or dev.is_host)
    mode = policy.mode
    if small or (in_scope and x._device.is_host) or mode != "explicit":
        if not small:
            policy.silent_copies += 1
            if mode == "warn":
                warnings.warn(f"{op.name}: copying an input of shape {tuple(x.shape)} from "
                              f"{x._device} to {dev}", stacklevel=4)
        return copy_to_device(x, dev, op.name)
    devs = {v._device for v in inputs if isinstance(v, Tensor)}
    if in_scope and len(devs) == 1:
        (src,) = devs
        raise DeviceMismatchError(
            f"Inputs of {op.name} are all on {src}, but the active `with tf.device('{dev}')` "
            f"scope places the op on {dev}. Copy them with .to('{dev}'), run the op outside "
            f"the scope (it then runs on {src}), or allow copies with "
            "tf.config.set_device_policy('silent').", op=op.name, device=dev)
    desc = ", ".join(f"{getattr(v, 'device', 'host')}:{tuple(getattr(v, 'shape', ()))}"
                     for v in inputs)
    raise DeviceMismatchError(
        f"Inputs of {op.name} are on different devices (device:shape = {desc}). "
        f"Move them with .to('{dev}') / .cpu() / .gpu(), run the op inside "
        f"`with tf.device('{dev}')`, or allow copies with "
        "tf.config.set_device_policy('silent').", op=op.name, device=dev)


def run(op, tensors, dev, attrs):
    if op.check is not None:
        try:
            op.check(op, tensors, attrs, dev)
        except OpError as e:
            raise e.with_context(op.name, dev) from None
    entry = op.kernels.get(dev.type)
    if entry is None:
        if op.composite is not None:
            return op.composite(*tensors, **attrs)
        raise kernel_not_found(op, dev, _key_dtype(op, tensors, attrs))
    fn = entry.fn
    if entry.np_dtypes is not None or entry.variants is not None:
        kd = _key_dtype(op, tensors, attrs)
        if entry.np_dtypes is not None and kd not in entry.np_dtypes:
            if op.composite is not None:
                return op.composite(*tensors, **attrs)
            raise kernel_not_found(op, dev, kd)
        if entry.variants is not None:      # (declared dtypes that run another function)
            fn = entry.variants.get(kd, fn)
    arrays = [t._data for t in tensors]
    try:
        if entry.needs_device:
            out = fn(*arrays, device=dev, **attrs)
        elif attrs:
            out = fn(*arrays, **attrs)
        else:
            out = fn(*arrays)
    except Exception as e:
        raise translate_error(e, op, dev, tensors, attrs) from None
    if op.num_outputs == 1:
        res = wrap(out, dev)
        if _tracing[0] and _thread.tracer is not None:
            _thread.tracer.op(op, tensors, (res,), attrs, fn, dev, entry.needs_device)
        if _tapes_active[0] and op.differentiable and tensors:
            record(op, tensors, (res,), attrs)
        return res
    outs = tuple(wrap(o, dev) for o in out)
    if _tracing[0] and _thread.tracer is not None:
        _thread.tracer.op(op, tensors, outs, attrs, fn, dev, entry.needs_device)
    if _tapes_active[0] and op.differentiable and tensors:
        record(op, tensors, outs, attrs)
    return outs


def _key_dtype(op, tensors, attrs):
    k = op.dtype_from
    if type(k) is int:
        if k < len(tensors):
            return tensors[k]._data.dtype
        return np.dtype(np.float32)
    d = attrs.get(k)
    return np.dtype(np.float32) if d is None else _dt.as_dtype(d).np


def describe_inputs(tensors, attrs=None):
    parts = []
    for t in tensors:
        parts.append(f"{t.dtype.name}{list(t._data.shape)}")
    s = "inputs: (" + ", ".join(parts) + ")"
    if attrs:
        s += ", attrs: {" + ", ".join(f"{k}={_short(v)}" for k, v in attrs.items()
                                      if k != "device") + "}"
    return s


def translate_error(e, op, dev, tensors, attrs):
    """Turn whatever a kernel raised into a tapeflow error naming op and device."""
    if isinstance(e, OpError):
        return e.with_context(op.name, dev)
    if isinstance(e, TapeflowError):
        return e
    if isinstance(e, MemoryError):
        # backends' OOM errors (numpy's, cupy's OutOfMemoryError) subclass MemoryError
        # and name the requested size; keep their text
        detail = str(e) or "allocation failed"
        return ResourceExhaustedError(
            f"Out of memory: {detail}; {describe_inputs(tensors, attrs)}. Free "
            "tensors you no longer need (del them) or use smaller batches.",
            op=op.name, device=dev)
    err = InvalidArgumentError(
        f"{type(e).__name__}: {e}; {describe_inputs(tensors, attrs)}", op=op.name, device=dev)
    if op.infer is not None:
        try:
            op.infer([t.shape for t in tensors], [t.dtype for t in tensors], attrs)
        except InvalidArgumentError as ie:
            err = InvalidArgumentError(f"{ie.message}; {describe_inputs(tensors, attrs)}",
                                       op=op.name, device=dev)
        except Exception:
            pass
    err.__cause__ = e
    return err


# The device-copy op: recorded so gradients flow back across devices.
def _copy_jvp(ctx, t):
    return copy_to_device(t, ctx.outputs[0]._device)


COPY = OpDef("Copy", inputs=("x",), grad=_copy_grad, jvp=_copy_jvp)


binary = _binary_py
execute = _execute_py


def _load_speedups():
    """Bind the C core's fast paths (``runtime/_c``; ``runtime.tensor`` decided whether
    it is in use): ``binary``, ``execute``, ``context.record`` (``tapeflow.ops``
    binds the Tensor operators)."""
    global record, binary, execute
    if speedups is None:
        return None
    speedups.init(active_scopes, _tapes_active, _tracing, _ctx._local, _binary_py, _scalar_or_none,
             np, _execute_py, _ctx)
    record = _ctx.record = speedups.record
    binary = speedups.binary
    execute = speedups.execute
    return speedups


speedups = _load_speedups()


# --- the methods of the classes below that run the dispatcher -------------------------
# Calling an OpDef, Tensor.to and unpickling a Tensor run ops: the classes sit below this
# module, so their methods that need it are defined here and bound to the classes at import
# (as tapeflow.ops binds the Tensor operators), with no hook in between.

def _call_op(self, *inputs, **attrs):
    """Run the op: ``op(x, y, attr=value)`` (attrs default as declared)."""
    inputs, full = self.bind_call(inputs, attrs)
    return execute(self, inputs, full)


def _tensor_to(self, device) -> Tensor:
    """Copy to ``device`` (name or Device); returns self when already there."""
    return copy_to_device(self, device)


def rebuild_tensor(value, device_name):
    """A pickled Tensor, unpickled: ``value`` on the device named ``device_name``."""
    return constant(value, device=device_name)


def _tensor_reduce(self):
    return (rebuild_tensor, (self.numpy(), self._device.name))


OpDef.__call__ = _call_op
Tensor.to, Tensor.__reduce__ = _tensor_to, _tensor_reduce
