"""``Tensor`` (an immutable value on one device) and ``TensorShape``.

A Tensor holds a backend-native array (``numpy.ndarray`` on ``cpu:0``) and its
:class:`~tapeflow.runtime.devices.Device`. dtype and shape are read from the array, so
making a Tensor costs two slot stores: that is what keeps dispatch cheap.

Operators (``+ - * / // % ** @``, comparisons, ``[]``) are defined in one place,
:mod:`tapeflow.ops`, because they dispatch to ops of the op library (a
layer above this one); ``Variable`` is in :mod:`tapeflow.runtime.variable`.

>>> import tapeflow as tf
>>> x = tf.constant([[1, 2], [3, 4]])
>>> print(x)
tf.Tensor(
[[1 2]
 [3 4]], shape=(2, 2), dtype=int32)
>>> x.shape == (2, 2), x.shape.as_list(), x.dtype
(True, [2, 2], tf.int32)
"""

from __future__ import annotations

import os

import numpy as np

try:        # the optional C core (core/setup.py builds it when it can)
    from . import _speedups
except ImportError:
    _speedups = None

from . import context as _ctx
from .devices import full_name as _full_name
from .context import HOOKS as _HOOKS
from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError

__all__ = ["Tensor", "TensorShape", "Dimension"]


class TensorShape(tuple):
    """A tuple of ints that also speaks TensorFlow (``as_list()``, ``ndims``,
    ``num_elements()``) and compares equal to tuples and lists.

    >>> TensorShape((1, 1, 784)) == (1, 1, 784), TensorShape([2, 3]).as_list()
    (True, [2, 3])
    """

    __slots__ = ()

    def as_list(self):
        return list(self)

    @property
    def ndims(self):
        return len(self)

    rank = ndims

    @property
    def dims(self):
        """The entries as :class:`Dimension` s (TF 1's ``shape.dims[0].value``)."""
        return [self[i] for i in range(len(self))]

    def num_elements(self):
        n = 1
        for d in self:
            n *= d
        return n

    def is_fully_defined(self):
        return True

    def is_compatible_with(self, other):
        other = tuple(other)
        return len(other) == len(self) and all(o is None or o == s for s, o in zip(self, other))

    def __eq__(self, other):
        if isinstance(other, list):
            other = tuple(other)
        try:
            return tuple.__eq__(self, other)
        except Exception:  # noqa: BLE001 - an element whose own __eq__ raises: not equal
            return False

    def __ne__(self, other):
        # (not NotImplemented is False: tf.float32 != TensorShape(()) was False)
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    def __getitem__(self, item):
        r = tuple.__getitem__(self, item)
        if type(r) is int:          # an entry: TF 1's Dimension (an int with ``.value``)
            return _DIMS[r] if r < 1025 else Dimension(r)
        return TensorShape(r) if isinstance(item, slice) else r

    def __repr__(self):
        return "TensorShape(" + repr(list(self)) + ")"

    def __str__(self):
        return tuple.__repr__(tuple(self))


class Dimension(int):
    """One entry of a :class:`TensorShape`: a plain ``int`` that also answers TF 1's
    ``.value`` (``x.shape[0].value``), so programs written for TensorFlow 1 run while
    everything that takes an int (``range``, NumPy, ``%d``, ``json``, shapes and attrs
    of ops) takes it unchanged. Arithmetic on it gives plain ints. Every dimension of
    an eager tensor is known, so there is no unknown (``None``) Dimension here.

    >>> import tapeflow as tf
    >>> d = tf.zeros((2, 3)).shape[1]
    >>> d, d.value, d * 2, isinstance(d, int), list(range(d))
    (3, 3, 6, True, [0, 1, 2])
    """

    __slots__ = ()
    #: the size as a plain int (TF 1's ``Dimension.value``)
    value = property(int)


#: the Dimensions of sizes 0..1024, made once (``shape[i]`` allocates nothing for them)
_DIMS = [Dimension(i) for i in range(1025)]

_new = object.__new__
#: tf.function traces in progress (tapeflow.runtime.context); read before the tracer
_tracing = _ctx.tracing


def _check_traced(t, what):
    """Raise if ``t``'s value is needed while tf.function traces (the tracer decides)."""
    tr = _ctx.thread_tracer.tracer
    if tr is not None:
        tr.check(t, what)


class VariableBase:
    """Base of stateful objects that stand for their current value in ops
    (``tapeflow.runtime.variable.Variable``): the dispatcher calls ``read_value()``."""

    __slots__ = ()

    def read_value(self):
        raise NotImplementedError


class _TensorPy:
    """The pure-Python base of :class:`Tensor` (``TAPEFLOW_PURE_PYTHON=1``, or no C
    compiler), and the reference the C base ``_speedups.TensorBase`` mirrors
    (``runtime/_c/tensor.c``): the slots, identity hash, and Python's conversions of a
    one-element tensor, which the C base falls back to for what it does not do itself
    (non-host arrays, tracing, errors)."""

    __slots__ = ("_data", "_device", "__weakref__")

    def __bool__(self):
        return _TensorPy._to_python(self, bool, "bool()")

    def __int__(self):
        return _TensorPy._to_python(self, int, "int()")

    def __float__(self):
        return _TensorPy._to_python(self, float, "float()")

    def _to_python(self, kind, what):
        """``kind(value)`` of a one-element tensor (Python control flow: cheap on the
        host); NaN or infinity into an int is an error naming the tensor and the fix."""
        if _tracing[0]:
            _check_traced(self, what)
        d = self._data
        v = self._scalar(what) if d.size != 1 or not self._device.is_host else d.reshape(())
        try:
            return kind(v)
        except (ValueError, OverflowError) as e:        # int(nan), int(inf)
            raise InvalidArgumentError(f"{what} of a {self.dtype.name} tensor holding {v}: {e}; "
                                       "check it first (tf.math.is_finite)", op=what,
                                       device=self._device) from None

    def __index__(self):
        if _tracing[0]:
            _check_traced(self, "__index__")
        if not self.dtype.is_integer:
            raise InvalidTypeError(
                f"only integer tensors can be used as an index; got {self.dtype.name}")
        return int(self._scalar("__index__"))

    def __hash__(self):
        return id(self)


#: the C core (runtime/_c), unless TAPEFLOW_PURE_PYTHON is set or it was not built
speedups = None if os.environ.get("TAPEFLOW_PURE_PYTHON", "") not in ("", "0") else _speedups


class Tensor(speedups.TensorBase if speedups is not None else _TensorPy):
    """An immutable multi-dimensional value on one device.

    Build tensors with ``tf.constant`` / ``tf.convert_to_tensor`` or any op; read
    them back with ``.numpy()`` (a host copy; waits for the device). One-element
    tensors convert with ``bool()``, ``int()``, ``float()`` and ``operator.index``
    so Python control flow works, as in the seeds' Collatz loop.
    """

    __slots__ = ()

    # Let NumPy defer to our reflected operators (np_array * tensor -> tensor).
    __array_priority__ = 100

    # --- basic properties ----------------------------------------------------
    @property
    def dtype(self) -> _dt.DType:
        return _dt.FROM_NP[self._data.dtype]

    @property
    def shape(self) -> TensorShape:
        return TensorShape(self._data.shape)

    def get_shape(self) -> TensorShape:
        return TensorShape(self._data.shape)

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def device(self) -> str:
        """TensorFlow's full device name, equal to its short spellings (``x.device ==
        "cpu:0"``): a :class:`~tapeflow.runtime.devices.DeviceName`."""
        return _full_name(self._device)

    @property
    def size(self) -> int:
        n = 1
        for d in self._data.shape:
            n *= d
        return n

    def __len__(self):
        s = self._data.shape
        if not s:
            raise InvalidTypeError("len() of a 0-d tensor (scalar); use .numpy() or float()")
        return s[0]

    # --- host conversion -----------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (a copy on the host; waits for the device); a 0-d
        tensor's is a NumPy scalar (``np.float32(3.0)``; a string's is its bytes)."""
        if _tracing[0]:
            _check_traced(self, ".numpy()")
        dev = self._device
        if dev.is_host:         # a 0-d value is a NumPy scalar (np.float32(3.0)), as in TF
            d = self._data
            return d[()] if not d.shape else np.array(d, copy=True)
        a = np.asarray(dev.backend.to_host(self._data, dev))
        return a[()] if not a.shape else a

    def _host(self):
        """Host array without a defensive copy (read-only use inside tapeflow)."""
        dev = self._device
        if dev.is_host:
            return np.asarray(self._data)
        return np.asarray(dev.backend.to_host(self._data, dev))

    def __array__(self, dtype=None, copy=None):
        if _tracing[0]:
            _check_traced(self, "np.asarray()")
        a = self._host()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        if copy:
            return np.array(a, copy=True)
        if a is self._data and isinstance(a, np.ndarray):
            a = a.view()
            a.flags.writeable = False   # NumPy cannot write through to an immutable Tensor
        return a

    # --- the array API standard (tapeflow.numpy lives above the runtime: a hook) ---
    def __array_namespace__(self, /, *, api_version=None):
        """``tapeflow.numpy``, the array API namespace of tensors (revision 2024.12).

        >>> import tapeflow as tf
        >>> tf.constant([1.0]).__array_namespace__().__name__
        'tapeflow.numpy'
        """
        return _HOOKS.array_namespace(api_version)

    @property
    def mT(self) -> Tensor:
        """The matrix transpose of the last two axes (the array API's ``x.mT``)."""
        return _HOOKS.array_namespace(None).matrix_transpose(self)

    @property
    def T(self) -> Tensor:
        """The transpose of a 2-D tensor (the array API's ``x.T``; use ``mT`` or
        ``tf.transpose`` for other ranks)."""
        if len(self._data.shape) != 2:
            raise InvalidArgumentError(
                f"Tensor.T is the transpose of a 2-D tensor (the array API's rule); this "
                f"one has shape {list(self._data.shape)}: use .mT or tf.transpose(x, perm)")
        return _HOOKS.array_namespace(None).matrix_transpose(self)

    def to_device(self, device, /, *, stream=None) -> Tensor:
        """This tensor on ``device`` (the array API's name for :meth:`to`)."""
        return self.to(device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """DLPack export with the array API's (2023.12) keywords. Host and CUDA
        tensors export their memory; a backend without DLPack (OpenCL) exports a host
        copy, or raises BufferError for ``copy=False``. Keywords left at None are not
        passed on (older producers, NumPy < 2.1 included, do not know them)."""
        data = self._data
        if not hasattr(data, "__dlpack__"):
            if copy is False:
                raise BufferError(
                    f"a tensor on {self._device} cannot be exported without a copy (its "
                    "backend has no DLPack); pass copy=None or copy=True for a host copy")
            data = self._host()
            stream = None                               # a host array takes no stream
        kwargs = {k: v for k, v in (("stream", stream), ("max_version", max_version),
                                    ("dl_device", dl_device), ("copy", copy))
                  if v is not None}
        return data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        data = self._data
        if not hasattr(data, "__dlpack_device__"):
            return (1, 0)                   # kDLCPU: what __dlpack__ exports (a host copy)
        return data.__dlpack_device__()

    def _scalar(self, what):
        if self.size != 1:
            raise InvalidArgumentError(
                f"{what} of a tensor needs exactly one element; this one has shape "
                f"{tuple(self.shape)} ({self.size} elements). Reduce it first "
                "(tf.reduce_any / tf.reduce_all / tf.reduce_sum) or index one element.",
                op=what, device=self._device)
        return self._host().reshape(()).item()

    def __complex__(self):
        return complex(self._scalar("complex()"))

    def __format__(self, spec):
        # As TensorFlow 2: "{}".format(t) formats the value (seed: "hello, [[4.]]").
        if spec and self.size == 1:
            return format(self._scalar("format()"), spec)
        a = self._host()
        if a.ndim == 0:
            return format(a.reshape(())[()], spec)
        return format(a, spec)

    def __iter__(self):
        n = len(self)
        for i in range(n):
            yield self[i]

    # --- device movement -----------------------------------------------------
    # (``to``, and ``__reduce__`` for pickling, run the dispatcher: they are defined by
    # ``tapeflow.runtime.dispatch``, above this module)
    def cpu(self) -> Tensor:
        return self.to("cpu:0")

    def gpu(self, index: int = 0) -> Tensor:
        return self.to(f"gpu:{index}")

    # --- printing ------------------------------------------------------------
    def _value_str(self):
        a = self._host()
        if a.ndim:
            return np.array2string(np.asarray(a), separator=" ")
        return str(a.reshape(())[()])

    def _suffix(self):
        # No device here: the seeds' printed output must not change when the default
        # device is a GPU. repr() names the device.
        return f"shape={tuple(self._data.shape)}, dtype={self.dtype.name}"

    def __str__(self):
        if _ctx.tracing[0] and _ctx.thread_tracer.tracer is not None:    # TF's symbolic form
            sym = _ctx.thread_tracer.tracer.symbolic(self)
            if sym is not None:
                return f'Tensor("{sym[0]}", shape={sym[1]}, dtype={self.dtype.name})'
        v = self._value_str()
        if "\n" in v:
            return f"tf.Tensor(\n{v}, {self._suffix()})"
        return f"tf.Tensor({v}, {self._suffix()})"

    def _repr_value(self):
        a = self._host()
        if a.ndim == 0:
            return self._value_str()
        return repr(np.asarray(a))

    def __repr__(self):
        if _ctx.tracing[0] and _ctx.thread_tracer.tracer is not None:
            sym = _ctx.thread_tracer.tracer.symbolic(self)
            if sym is not None:
                return f"<tf.Tensor '{sym[0]}' shape={sym[1]} dtype={self.dtype.name}>"
        return (f"<tf.Tensor: shape={tuple(self._data.shape)}, dtype={self.dtype.name}, "
                f"device={self._device.name}, numpy={self._repr_value()}>")


def wrap(data, device) -> Tensor:
    """Make a Tensor from a native array (no checks; hot path; ``_speedups.wrap``)."""
    t = _new(Tensor)
    t._data = data
    t._device = device
    return t


if speedups is not None:
    speedups.bind_tensor(Tensor)
    for _name in ("bool", "int", "float", "index"):
        speedups.set_operator(_name, None, getattr(_TensorPy, f"__{_name}__"))
    wrap = speedups.wrap    # noqa: F811 - the same function, in C
