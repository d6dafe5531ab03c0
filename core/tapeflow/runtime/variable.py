"""``Variable``: mutable, named, trainable state on one device.

Reads go through the dispatcher's eager context (active tapes watch them, a
``tf.function`` trace sees them); updates are atomic per Variable
(docs/concurrency.md). Operators are defined with Tensor's in
:mod:`tapeflow.ops`.

>>> import tapeflow as tf
>>> v = tf.Variable([1.0, 2.0], name="w")
>>> v.assign_add([1.0, 1.0]).numpy()
array([2., 3.], dtype=float32)
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading

import numpy as np

from . import context as _ctx
from .context import HOOKS as _HOOKS
from . import devices as _devs
from .. import dtypes as _dt
from .dispatch import constant, convert_to_tensor, copy_to_device, execute
from ..errors import InvalidArgumentError
from .registry import get_op
from .tensor import Tensor, VariableBase, speedups, wrap

__all__ = ["Variable"]

_tracing = _ctx.tracing
_tapes_active = _ctx.tapes_active
_thread = _ctx.thread_tracer
# sys.getrefcount of a Variable's value Tensor / its array inside Variable._update when
# only the Variable holds them (self._value or cur._data, the local, the call's argument)
_DONATE_T = 3
_DONATE_A = 3


def _traced_assign(var, prev):
    """A Variable assigned while a function traces: told to this thread's tracer; under a
    tape, a later read is a read of the Variable (``Variable.assign``), so the value is
    a Tensor of its own."""
    tr = _thread.tracer
    if tr is not None:
        tr.assign(var, var._value, prev)
    if _tapes_active[0]:
        var._value = wrap(var._value._data, var._value._device)


def _cast(x, dtype):
    return execute(get_op("Cast"), (x,), {"dtype": _dt.as_dtype(dtype)})


class Variable(VariableBase):
    """Mutable, named, trainable state (seed: ``tf.Variable(5., name='weight')``).

    Reads (using the Variable as an op input, ``read_value()``, ``value()``) are
    watched by active GradientTapes unless ``trainable=False`` or the tape was made
    with ``watch_accessed_variables=False``. ``assign*`` validate the new value's
    shape and dtype first and leave the Variable untouched on error; nothing is
    converted silently (a float into an integer Variable, a string, ``None`` or a
    complex value is an InvalidArgumentError; Python ints into float Variables are fine).

    Thread safety (docs/concurrency.md): ``assign``/``assign_add``/``assign_sub`` on one
    Variable are atomic with respect to each other (a per-Variable lock around the
    read-modify-write), and reads (``read_value()``, ``numpy()``, using the Variable in
    an op) see the value before or after an update, never a half-written buffer. A
    ``tf.function`` replay that assigns the Variable holds the same lock (``_lock``)
    from before its first read of it to after its last write (and the locks of the
    Variables it only reads); a replay that assigns nothing takes each read Variable's
    lock just to pick up its buffer. Every in-place update (buffer donation) holds the
    lock from its reference-count check to the end of its write.

    >>> import tapeflow as tf
    >>> v = tf.Variable(1.0)
    >>> _ = v.assign_add(2.0)
    >>> v
    <tf.Variable 'Variable:0' shape=() dtype=float32, numpy=3.0>
    """

    __array_priority__ = 100
    _uid = itertools.count()

    def __init__(self, initial_value=None, trainable=True, name=None, dtype=None,
                 shape=None, validate_shape=True, device=None, **kwargs):
        if initial_value is None:
            raise InvalidArgumentError("Variable needs an initial_value")
        if callable(initial_value):
            initial_value = initial_value()
        with _devs.device(device) if device is not None else contextlib.nullcontext():
            value = convert_to_tensor(initial_value, dtype=dtype)
            if _devs.current_device() is not None:      # (device=, or a device scope)
                value = _place(value)
        if (isinstance(initial_value, Tensor) and dtype is not None
                and value.dtype != _dt.as_dtype(dtype)):
            value = _cast(value, dtype)
        self._value = value
        # (an RLock: an update that reads the Variable while tracing re-enters it)
        self._lock = threading.RLock()
        self.trainable, self.aggregation = bool(trainable), kwargs.get("aggregation")
        self._name = (name or "Variable")
        self._id = next(Variable._uid)
        self._shape_fixed = validate_shape and shape is None
        if _HOOKS.variable_observers:
            _ctx.variable_created(self)

    # identity -----------------------------------------------------------------
    @property
    def name(self):
        return self._name if ":" in self._name else self._name + ":0"

    @property
    def dtype(self):
        return self._value.dtype

    @property
    def shape(self):
        return self._value.shape

    get_shape = shape.fget

    @property
    def ndim(self):
        return self._value.ndim

    @property
    def device(self):
        return self._value.device

    @property
    def _device(self):
        return self._value._device

    def __hash__(self):
        return id(self)

    # pickle/deepcopy: a lock is not copyable; the copy gets its own
    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # reading --------------------------------------------------------------------
    def read_value(self) -> Tensor:
        """The current value as a Tensor (watched by active tapes)."""
        lock = self._lock           # (not a buffer an in-place update is writing)
        lock.acquire()
        v = self._value
        lock.release()
        if _tracing[0] and _thread.tracer is not None:
            v = _thread.tracer.read(self, v)
        if _tapes_active[0]:
            _ctx.watch_variable_read(self, v)
        return v

    value = read_value

    def _current(self) -> Tensor:
        """The value Tensor, read under the update lock: an in-place update (buffer
        donation) never runs while a reader takes the reference, and once the reader
        holds it no update writes that buffer in place (the reference count says so)."""
        lock = self._lock
        lock.acquire()
        v = self._value
        lock.release()
        return v

    def _host(self) -> Tensor:
        """The value for a host conversion (``numpy()``, ``int()``, an index, a shape):
        while tf.function traces, a read, which the tracer refuses as it refuses a
        tensor's (the value would be frozen into the graph)."""
        return self.read_value() if _tracing[0] else self._current()

    def numpy(self):
        return self._host().numpy()

    def __array__(self, dtype=None, copy=None):
        return self._host().__array__(dtype, copy)

    def __bool__(self):
        return bool(self._host())

    def __int__(self):
        return int(self._host())

    def __float__(self):
        return float(self._host())

    def __index__(self):
        return self._host().__index__()

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        return iter(self.read_value())

    def __format__(self, spec):
        return format(self._current(), spec)

    def __repr__(self):
        # exactly the seeds' form on every device (the tensor's repr names the device)
        v = self._current()._repr_value()
        return (f"<tf.Variable '{self.name}' shape={tuple(self.shape)} dtype={self.dtype.name}"
                f", numpy={v}>")

    __str__ = __repr__

    # writing --------------------------------------------------------------------
    def _checked(self, value, op):
        """``value`` as a Tensor of this Variable's dtype, shape and device, or an
        InvalidArgumentError naming the Variable and both dtypes (nothing is coerced)."""
        cur = self._value
        dt = cur.dtype
        if isinstance(value, Variable):
            value = value.read_value()       # (traced, watched: a read, as TensorFlow's)
        refusal = _coercion_refusal(value, dt)
        if refusal is not None:
            src, advice = refusal
            raise InvalidArgumentError(
                f"Cannot {op} {_describe(value)} of dtype {src} to Variable '{self.name}' of "
                f"dtype {cur.dtype.name}: tapeflow does not convert {src.split()[0]} to "
                f"{cur.dtype.name} silently; {advice}. The variable was left unchanged.",
                op=op, device=cur._device)
        try:
            # a host value (Python number, list, NumPy array) goes straight to the
            # Variable's device, not through the default one (on a GPU machine a cpu:0
            # counter's assign_add(1) made a CUDA tensor and copied it back)
            t = (convert_to_tensor(value, dtype=dt) if isinstance(value, Tensor)
                 else constant(value, dtype=dt, device=cur._device))
        except (TypeError, ValueError) as e:
            msg = e.message if isinstance(e, InvalidArgumentError) else str(e)
            raise InvalidArgumentError(
                f"Cannot {op} {_describe(value)} to Variable '{self.name}' of dtype "
                f"{cur.dtype.name}: {msg.rstrip('.')}. The variable was left unchanged.",
                op=op, device=cur._device) from None
        if t._device is not cur._device:     # (a Variable stays on its device)
            t = copy_to_device(t, cur._device)
        if t.dtype != dt:
            raise InvalidArgumentError(
                f"Cannot {op} a {t.dtype.name} value to Variable '{self.name}' of dtype "
                f"{cur.dtype.name}; cast it first (tf.cast). The variable was left unchanged.",
                op=op, device=cur._device)
        if self._shape_fixed and t.shape != cur.shape:
            raise InvalidArgumentError(
                f"Cannot {op} a value of shape {tuple(t.shape)} to Variable '{self.name}' of "
                f"shape {tuple(cur.shape)}. The variable was left unchanged.",
                op=op, device=cur._device)
        if t._device is not cur._device:
            t = copy_to_device(t, cur._device)
        return t

    def assign(self, value, use_locking=None, name=None, read_value=True):
        """Replace the value (same dtype and shape). Returns the Variable."""
        new = self._checked(value, "assign")
        lock = self._lock          # (acquire/release: half the cost of `with` here)
        lock.acquire()
        prev = self._value
        # a tape recording: the value is a new Tensor, so a later read is a read of the
        # Variable, not the computation assigned (assignments are not differentiable;
        # TensorFlow's reads are reads of the variable's handle). While tracing, the
        # tracer's hook does the same once it has seen the value assigned.
        self._value = new if _tracing[0] or not _tapes_active[0] else wrap(new._data, new._device)
        lock.release()
        if _tracing[0]:
            _traced_assign(self, prev)
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        """Add ``delta`` (same dtype; same shape unless the Variable's shape is free)."""
        return self._update(delta, "assign_add", np.add)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        """Subtract ``delta`` (same dtype; same shape unless the Variable's shape is free)."""
        return self._update(delta, "assign_sub", np.subtract)

    def _update(self, delta, op, ufunc):
        d = self._checked(delta, op)       # (outside the lock: it may read another Variable)
        lock = self._lock                  # read-modify-write: atomic per Variable
        lock.acquire()
        try:
            cur = self._value
            arr = cur._data
            # Buffer donation (docs/decisions.md section 10): when no one but this
            # Variable can see the host buffer -- no tape, no user reference to the value,
            # no view of it -- update it in place instead of allocating a new one.
            # Otherwise (the common case inside a GradientTape) fall back to the
            # immutable update. Readers take the reference under this lock, so none can
            # pick the buffer up while it is written.
            if (not _tracing[0] and type(arr) is np.ndarray and arr.base is None
                    and arr.flags.writeable
                    and d._data.shape == arr.shape and cur._device.is_host
                    and sys.getrefcount(cur) <= _DONATE_T and sys.getrefcount(arr) <= _DONATE_A):
                ufunc(arr, d._data, out=arr)
                self._value = wrap(arr, cur._device)
                return self
            del arr
            # (on the Variable's device, whatever the device scope: it never moves)
            with _ctx.stop_all_recording(), _devs.device(cur._device):
                if _tracing[0]:             # a traced read: the update is part of the graph
                    cur = self.read_value()
                prev = self._value
                self._value = execute(get_op("Add" if op == "assign_add" else "Sub"), (cur, d))
        finally:
            lock.release()
        if _tracing[0]:
            _traced_assign(self, prev)
        return self

    # Variables behave like their value in ops; operators are defined with Tensor's
    # in tapeflow.ops.


def _coercion_refusal(value, dtype):
    """``(source dtype, advice)`` when ``value`` must not be converted into a Variable
    of ``dtype``, else None. TensorFlow's rule: no float into an integer or bool
    Variable, no number into a bool Variable, nothing complex, textual or None
    anywhere; Python ints stay weak (fine in float Variables), bools are bools."""
    tv = type(value)
    origin = ""
    if tv is float:
        if dtype.is_floating:               # (the common cases first: no more work)
            return None
        kind, src, origin = "f", "float32", " (a Python float)"
    elif tv is Tensor:
        if value._data.dtype == dtype.np:
            return None
        kind, src = value._data.dtype.kind, value.dtype.name
    elif tv is int:
        if not dtype.is_bool:
            return None
        kind, src, origin = "i", "int", " (a Python int)"
    elif tv is bool:
        return None
    elif isinstance(value, Tensor):
        if value.dtype == dtype:
            return None
        kind, src = value._data.dtype.kind, value.dtype.name
    elif isinstance(value, (np.ndarray, np.generic)):
        vd = value.dtype
        if vd == dtype.np:                  # (the common case: no string work)
            return None
        kind = vd.kind
        if kind in "fiu" and dtype.is_floating:
            return None
        src = str(vd)
    elif value is None:
        return "NoneType", "pass a number, an array or a tensor"
    elif isinstance(value, (str, bytes, bytearray)):
        kind, src = "U", ""
    elif tv is complex:
        kind, src, origin = "c", "complex128", " (a Python complex)"
    elif tv is list or tv is tuple:
        try:
            a = np.asarray(value)
        except (ValueError, TypeError, OverflowError):
            return None                     # ragged etc.: the conversion reports it
        kind, src, origin = a.dtype.kind, str(a.dtype), f" (a Python {tv.__name__})"
    else:
        return None                         # anything else: convert_to_tensor decides
    if kind in "US" and dtype is not _dt.string:
        return "string" + origin, "strings are never converted to numbers"
    if kind == "O":
        return "object" + origin, "pass numbers only"
    if kind == "c":
        return (src + origin,
                "take tf.math.real or tf.abs of it first, if that is what you mean")
    if kind == "f" and not dtype.is_floating:
        return src + origin, ("tf.cast it first (after tf.round, if rounding is what you "
                              "mean)" if not dtype.is_bool else "compare it (x != 0) instead")
    if kind in "iu" and dtype.is_bool:
        return src + origin, "compare it (x != 0) instead"
    if isinstance(value, Tensor):
        return src, "tf.cast it first"
    return None


def _describe(value):
    """A short description of an assigned value for error messages."""
    if isinstance(value, Tensor):
        return f"a tensor of shape {tuple(value.shape)} on {value._device}"
    if isinstance(value, np.ndarray) and value.ndim:
        return f"an array of shape {value.shape}"
    r = repr(value)
    return r if len(r) < 60 else r[:57] + "..."


def _place(t: Tensor) -> Tensor:
    dev = _devs.current_device()
    if dev is not None and t._device is not dev:
        return copy_to_device(t, dev)
    return t


if speedups is not None:     # (the C core's fast paths read Variable operands: read_value())
    speedups.bind_variable(Variable)
