"""``tf.TensorArray``: a list of tensors of one dtype and element shape, written and
read by index, eagerly, inside :func:`tapeflow.function` and as a loop variable of
:func:`tapeflow.while_loop`.

A TensorArray holds its elements in one of two forms:

* **a list** of tensors (``None`` where nothing was written), eagerly and while a
  traced function runs Python code with indices it knows (a Python ``for``
  over ``range``, or a tensor that does not depend on the function's arguments): a
  write keeps the tensor itself, a read returns it, ``stack`` is one ``tf.stack``;
* **a buffer**: one tensor ``[size, *element_shape]``, when an index depends on the
  traced function's arguments (inside a traced ``tf.while_loop`` body) -- a write is
  ``tf.where(tf.range(size) == i, value, buffer)``, a read a ``tf.gather``. A traced
  ``tf.while_loop`` carries a TensorArray as its buffer (one loop variable of fixed
  shape): its element shape must be known when the loop is traced (given as
  ``element_shape``, inferred from an element written before the loop, or found by
  running the body once more while tracing, to see what it writes).

Gradients flow through every method (the list form keeps the very tensors written;
the buffer form uses differentiable ops), under a GradientTape eagerly or traced.

As in TensorFlow's eager TensorArray, ``write``, ``unstack``, ``scatter`` and
``split`` change the TensorArray and return it, so both ``ta.write(i, x)`` and the
portable ``ta = ta.write(i, x)`` (the form ``tf.function`` code needs in TensorFlow)
work. Reading an index never written gives zeros of the element shape.

Deliberate differences from TensorFlow 2.21 (docs/tensor_array.md, "TensorArray"): a
``dynamic_size`` TensorArray grows eagerly and in Python loops, but not inside a
traced ``tf.while_loop``, where loop variables keep their shape (give ``size``);
a tensor ``size`` that depends on the traced function's arguments is read once,
when tracing; ``clear_after_read`` is enforced eagerly only (as TensorFlow's traced
TensorArrays do not either).

>>> import tapeflow as tf
>>> ta = tf.TensorArray(tf.float32, size=3)
>>> for i in range(3):
...     ta = ta.write(i, tf.constant([1.0, 2.0]) * i)
>>> print(ta.stack().numpy())
[[0. 0.]
 [1. 2.]
 [2. 4.]]
>>> @tf.function
... def squares(n):
...     ta = tf.TensorArray(tf.int32, size=5)
...     def body(i, ta):
...         return i + 1, ta.write(i, i * i)
...     _, ta = tf.while_loop(lambda i, ta: i < n, body, [0, ta])
...     return ta.stack()
>>> print(squares(tf.constant(4)).numpy())
[0 1 4 9 0]
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, OutOfRangeError
from ..ops import array_creation as _create
from ..ops import array_gather as _gather
from ..ops import array_shape as _shape
from ..ops import math as _m
from ..ops.array_values import where as _where
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor, TensorShape
from ..runtime.variable import Variable
from .control_flow import _is_dynamic
from .tracer import _current

__all__ = ["TensorArray"]


def _host_value(t):
    """The value of a tensor on the host, bypassing the tracer's check (callers have
    made sure it does not depend on the traced function's arguments, or want the
    trace's own value)."""
    return np.asarray(t._device.backend.to_host(t._data, t._device))


def _specialise_on(t):
    """``t``'s static shape decides the elements: a trace where ``t`` comes from the
    arguments holds for their shapes only (a SavedModel refuses it with None dims)."""
    tr = _current()
    if tr is not None and _is_dynamic(tr, t):
        tr.specialise()


def _static_index(i, what):
    """``i`` as a Python int, or None when it is a tensor whose value depends on the
    traced function's arguments (then it must be used through graph ops)."""
    if isinstance(i, Variable):
        return None if _current() is not None else int(i.numpy())
    if isinstance(i, Tensor):
        if not i.dtype.is_integer or i._data.size != 1:
            raise InvalidArgumentError(
                f"TensorArray.{what}: the index must be an integer scalar, got "
                f"{i.dtype.name} of shape {list(i.shape)}")
        tr = _current()
        if tr is not None and _is_dynamic(tr, i):
            return None
        return int(_host_value(i).reshape(()))
    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
        raise InvalidTypeError(f"TensorArray.{what}: the index must be an int or an integer "
                               f"scalar tensor, got {type(i).__name__} {i!r}")
    return int(i)


def _lengths(lengths):
    """``TensorArray.split``'s lengths as a list of Python ints."""
    if isinstance(lengths, Tensor) and _current() is not None:
        _current().read_shape_value(lengths, "TensorArray.split(lengths=...)")
    a = _host_value(lengths) if isinstance(lengths, Tensor) else lengths
    try:
        a = np.asarray(a)
        if a.dtype.kind not in "iu" or a.ndim > 1:
            raise TypeError
    except (TypeError, ValueError):
        raise InvalidTypeError(f"TensorArray.split: lengths must be a vector of ints, got "
                               f"{type(lengths).__name__} {lengths!r}") from None
    return [int(x) for x in a.reshape(-1)]


def _size_of(size):
    if size is None:
        return 0
    if isinstance(size, (Tensor, Variable)):
        t = size.read_value() if isinstance(size, Variable) else size
        if not t.dtype.is_integer or t._data.size != 1:
            raise InvalidArgumentError(f"TensorArray: size must be an integer scalar, got "
                                       f"{t.dtype.name} of shape {list(t.shape)}")
        tr = _current()                       # read once, when tracing: a size from the
        if tr is not None:                    # arguments' shapes specialises the trace to
            tr.read_shape_value(t, "TensorArray(size=...)")   # them; from their data raises
        n = int(_host_value(t).reshape(()))
    elif isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise InvalidTypeError(f"TensorArray: size must be an int or an integer scalar "
                               f"tensor, got {type(size).__name__} {size!r}")
    else:
        n = int(size)
    if not 0 <= n < 2 ** 31:
        raise InvalidArgumentError(f"TensorArray: size must be in [0, 2**31), got {n}")
    return n


def _shape_of(element_shape):
    if element_shape is None:
        return None
    if hasattr(element_shape, "as_list"):
        dims = element_shape.as_list() if getattr(element_shape, "rank", 0) is not None \
            else None
        if dims is None:
            return None
        element_shape = dims
    try:
        return tuple(None if d is None else int(d) for d in element_shape)
    except (TypeError, ValueError):
        raise InvalidTypeError(f"TensorArray: element_shape must be a list of ints (None for "
                               f"an unknown dimension), got {element_shape!r}") from None


def _compatible(shape, known):
    return known is None or (len(shape) == len(known) and all(
        k is None or k == s for s, k in zip(shape, known)))


def _fmt(shape):
    return "<unknown>" if shape is None else "(" + ", ".join(
        "None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class TensorArray:
    """TensorFlow's ``tf.TensorArray`` (see the module doc).

    ``TensorArray(dtype, size=0, dynamic_size=False, clear_after_read=True,
    element_shape=None, infer_shape=True)``: ``read``, ``write``, ``stack``,
    ``unstack``, ``gather``, ``scatter``, ``concat``, ``split``, ``size``, and the
    properties ``dtype``, ``element_shape``, ``dynamic_size``.

    >>> import tapeflow as tf
    >>> ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
    >>> ta = ta.unstack(tf.constant([[1.0, 2.0], [3.0, 4.0]]))
    >>> print(ta.read(1).numpy(), int(ta.size()))
    [3. 4.] 2
    """

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None,
                 tensor_array_name=None, handle=None, flow=None, infer_shape=True,
                 element_shape=None, colocate_with_first_write_call=True, name=None):
        try:
            self._dtype = _dt.as_dtype(dtype)
        except (TypeError, ValueError) as e:
            raise InvalidTypeError(f"TensorArray: dtype {dtype!r} is not a dtype ({e})") \
                from None
        n = _size_of(size)
        self._dynamic = bool(dynamic_size)
        self._clear = True if clear_after_read is None else bool(clear_after_read)
        self._infer = bool(infer_shape)
        self._eshape = _shape_of(element_shape)
        self._elems = [None] * n        # the list form (None: not written)
        self._buf = None                # the buffer form: [size, *element_shape]
        self._cleared = set()           # indices read (and cleared) eagerly

    # --- properties --------------------------------------------------------------------
    @property
    def dtype(self):
        return self._dtype

    @property
    def dynamic_size(self):
        return self._dynamic

    @property
    def element_shape(self):
        """The elements' shape, a TensorShape (None dimensions: not known yet); None
        before the first write unless given (TensorFlow: an unknown TensorShape)."""
        return None if self._eshape is None else TensorShape(self._eshape)

    def _len(self):
        return int(self._buf._data.shape[0]) if self._buf is not None else len(self._elems)

    def size(self, name=None):
        """The number of elements, an int32 scalar tensor."""
        return convert_to_tensor(self._len(), dtype=_dt.int32)

    def __repr__(self):
        return (f"<tf.TensorArray dtype={self._dtype.name} size={self._len()} "
                f"element_shape={_fmt(self._eshape)}>")

    # --- checks ------------------------------------------------------------------------
    def _value(self, value, what):
        if isinstance(value, Variable):
            value = value.read_value()
        t = value if isinstance(value, Tensor) else None
        if t is None:
            try:
                t = convert_to_tensor(value, dtype=self._dtype)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"TensorArray.{what}: cannot convert {type(value).__name__} to a "
                    f"{self._dtype.name} tensor ({e})") from None
        if t.dtype != self._dtype:
            raise InvalidArgumentError(
                f"TensorArray.{what}: the TensorArray's dtype is {self._dtype.name} but the "
                f"value written is {t.dtype.name}; cast it with tf.cast(value, "
                f"{self._dtype.name})")
        return t

    def _check_shape(self, shape, what):
        shape = tuple(int(d) for d in shape)
        if not _compatible(shape, self._eshape):
            raise InvalidArgumentError(
                f"TensorArray.{what}: incompatible shape for value {_fmt(shape)}, expected "
                f"{_fmt(self._eshape)} (the TensorArray's element shape: all elements have "
                "one shape)")
        if self._infer or self._eshape is not None:
            self._eshape = shape

    def _index(self, i, what, writing):
        """``i`` as a Python int checked against the size (None: a traced index, whose
        value while tracing is checked)."""
        k = _static_index(i, what)
        traced = k is None
        if traced:           # (the trace's value: a loop's first index, say)
            t = i._value if isinstance(i, Variable) else i
            k = int(_host_value(t).reshape(()))
        n = self._len()
        if k < 0:
            raise OutOfRangeError(f"TensorArray.{what}: index {k} is negative")
        if k >= n:
            if writing and self._dynamic and not traced and self._buf is None:
                self._elems.extend([None] * (k + 1 - n))
            elif writing and self._dynamic:
                raise OutOfRangeError(
                    f"TensorArray.write: index {k} is past the size {n} of a TensorArray "
                    "written with a traced index (in a traced tf.while_loop), where it "
                    "cannot grow: loop variables keep their shape. Create it with size= the "
                    "number of elements, or run the loop outside tf.function")
            elif writing:
                raise OutOfRangeError(
                    f"TensorArray.write: tried to write to index {k} but the array is not "
                    f"resizeable and its size is {n}; create it with dynamic_size=True or a "
                    "larger size")
            else:
                raise OutOfRangeError(
                    f"TensorArray.{what}: tried to read from index {k} but the array size "
                    f"is {n}")
        return None if traced else k

    # --- the two forms -------------------------------------------------------------------
    def _zeros(self, what):
        if self._eshape is None or any(d is None for d in self._eshape):
            raise InvalidArgumentError(
                f"TensorArray.{what}: an element was never written and the element shape "
                f"{_fmt(self._eshape)} is not fully known, so it cannot be filled with "
                "zeros; give element_shape= or write every element")
        return _create.zeros(self._eshape, dtype=self._dtype)

    def _stacked(self, what):
        """The elements as one tensor ``[size, *element_shape]``."""
        if self._buf is not None:
            return self._buf
        if not self._elems:
            if self._eshape is None or any(d is None for d in self._eshape):
                return _create.zeros((0,), dtype=self._dtype)
            return _create.zeros((0,) + self._eshape, dtype=self._dtype)
        elems = self._elems
        if all(e is None for e in elems):
            self._zeros(what)
            return _create.zeros((len(elems),) + self._eshape, dtype=self._dtype)
        if any(e is None for e in elems):
            z = self._zeros(what)
            elems = [z if e is None else e for e in elems]
        shapes = {tuple(e.shape) for e in elems}
        if len(shapes) > 1:
            raise InvalidArgumentError(
                f"TensorArray.{what}: the elements have different shapes "
                f"{sorted(shapes)}; stack needs one shape (use concat for a varying first "
                "dimension)")
        return _gather.stack(elems)

    def _to_buffer(self, what):
        """Switch to the buffer form (a traced index, or a traced loop)."""
        if self._buf is None:
            self._buf = self._stacked(what)
            self._elems = None

    def _components(self):
        """The loop-variable form: ``[buffer]`` (``tapeflow.while_loop`` carries it)."""
        self._to_buffer("while_loop")
        return [self._buf]

    def _needs_shape(self):
        """Whether it cannot become a buffer yet: no element written and the element shape
        unknown (a traced while_loop then runs the body once to see what it writes)."""
        return self._buf is None and (self._eshape is None or any(
            d is None for d in self._eshape)) and all(e is None for e in self._elems)

    def _parts(self):
        """The tensors it holds now (without changing its form)."""
        if self._buf is not None:
            return [self._buf]
        return [e for e in self._elems if e is not None]

    def _copy(self):
        ta = TensorArray.__new__(TensorArray)
        ta.__dict__.update(self.__dict__)
        ta._elems = None if self._elems is None else list(self._elems)
        ta._cleared = set(self._cleared)
        return ta

    def _learn_from(self, other):
        """Take the element shape ``other`` (the same TensorArray after a loop body ran
        once) found."""
        shape = getattr(other, "_eshape", None)
        if shape is None or any(d is None for d in shape):
            raise InvalidArgumentError(
                "while_loop: a TensorArray loop variable has no element shape and the loop "
                "body wrote no element to it, so its buffer cannot be made; give "
                "element_shape= when creating it")
        self._eshape = tuple(shape)

    def _rebuilt(self, components):
        """A TensorArray like this one holding ``components`` (from :meth:`_components`)."""
        ta = TensorArray.__new__(TensorArray)
        ta.__dict__.update(self.__dict__)
        ta._buf = components[0]
        ta._elems = None
        ta._cleared = set()
        ta._eshape = tuple(components[0].shape[1:])
        return ta

    # --- reading and writing ------------------------------------------------------------
    def write(self, index, value, name=None):
        """Write ``value`` at ``index``; returns the TensorArray (use ``ta = ta.write(...)``)."""
        t = self._value(value, "write")
        self._check_shape(t.shape, "write")
        k = self._index(index, "write", True)
        if k is not None and self._buf is None:
            self._elems[k] = t
            self._cleared.discard(k)
            return self
        self._to_buffer("write")
        n = self._len()
        idx = index if k is None else k
        mask = _m.equal(_create.range(n, dtype=_dt.int32),
                        _m.cast(convert_to_tensor(idx), _dt.int32))
        mask = _shape.reshape(mask, [n] + [1] * len(t.shape))
        self._buf = _where(mask, _shape.expand_dims(t, 0), self._buf)
        return self

    def read(self, index, name=None):
        """The element at ``index`` (zeros of the element shape if never written)."""
        k = self._index(index, "read", False)
        if k is None or self._buf is not None:
            return _gather.gather(self._stacked("read"), index if k is None else k)
        if k in self._cleared:
            raise InvalidArgumentError(
                f"TensorArray.read: could not read index {k} twice because it was cleared "
                "after a previous read (create the TensorArray with clear_after_read=False)")
        e = self._elems[k]
        if e is None:
            e = self._zeros("read")
        elif self._clear and _current() is None:
            self._cleared.add(k)
            self._elems[k] = None
        return e

    def stack(self, name=None):
        """All elements stacked into one tensor ``[size, *element_shape]``."""
        return self._stacked("stack")

    def gather(self, indices, name=None):
        """The elements at ``indices`` stacked into one tensor."""
        idx = convert_to_tensor(indices)
        return _gather.gather(self._stacked("gather"), idx)

    def unstack(self, value, name=None):
        """Write the slices of ``value`` along its first dimension as the elements."""
        t = self._value(value, "unstack")
        if len(t.shape) == 0:
            raise InvalidArgumentError("TensorArray.unstack: the value must have at least one "
                                       "dimension (its slices become the elements)")
        m = int(t.shape[0])             # (its number of elements: the trace holds for
        _specialise_on(t)               # this length only)
        n = self._len()
        if m > n and not self._dynamic:
            raise InvalidArgumentError(f"TensorArray.unstack: cannot unstack {m} tensors into a "
                                       f"TensorArray of static size {n}")
        self._check_shape(t.shape[1:], "unstack")
        if self._buf is not None:
            if m != n:
                raise InvalidArgumentError(
                    f"TensorArray.unstack: {m} elements into a TensorArray of size {n} "
                    "inside a traced loop (its size is fixed there)")
            self._buf = t
            return self
        parts = _gather.unstack(t) if m else []
        if m > n:
            self._elems.extend([None] * (m - n))
        for k, p in enumerate(parts):
            self._elems[k] = p
            self._cleared.discard(k)
        return self

    def scatter(self, indices, value, name=None):
        """Write the slices of ``value`` at ``indices`` (a vector of ints)."""
        t = self._value(value, "scatter")
        idx = convert_to_tensor(indices)
        if len(idx.shape) != 1 or idx.dtype.is_inexact:
            raise InvalidArgumentError("TensorArray.scatter: indices must be a vector of ints, "
                                       f"got {idx.dtype.name} of shape {list(idx.shape)}")
        if len(t.shape) == 0 or int(t.shape[0]) != int(idx.shape[0]):
            raise InvalidArgumentError(
                f"TensorArray.scatter: {int(idx.shape[0])} indices for a value of shape "
                f"{list(t.shape)} (one slice per index)")
        _specialise_on(t)
        parts = _gather.unstack(t) if int(t.shape[0]) else []
        for j, p in enumerate(parts):
            self.write(idx[j], p)
        return self

    def concat(self, name=None):
        """The elements concatenated along their first dimension."""
        if self._buf is not None:
            s = tuple(self._buf.shape)
            if len(s) < 2:
                raise InvalidArgumentError("TensorArray.concat: the elements must have at "
                                           "least one dimension")
            return _shape.reshape(self._buf, [s[0] * s[1]] + list(s[2:]))
        elems = self._elems
        if any(e is None for e in elems):
            z = self._zeros("concat")
            elems = [z if e is None else e for e in elems]
        if not elems:
            return _create.zeros((0,), dtype=self._dtype)
        if any(len(e.shape) == 0 for e in elems):
            raise InvalidArgumentError("TensorArray.concat: the elements must have at least "
                                       "one dimension (concat joins them along it)")
        return _gather.concat(list(elems), 0)

    def split(self, value, lengths, name=None):
        """Split ``value`` along its first dimension into pieces of ``lengths`` (one
        element each)."""
        t = self._value(value, "split")
        ls = _lengths(lengths)
        _specialise_on(t)
        if len(t.shape) == 0 or sum(ls) != int(t.shape[0]):
            raise InvalidArgumentError(
                f"TensorArray.split: lengths {ls} do not add up to the first dimension of the "
                f"value, of shape {list(t.shape)}")
        n = self._len()
        if len(ls) > n and not self._dynamic:
            raise InvalidArgumentError(f"TensorArray.split: {len(ls)} pieces into a "
                                       f"TensorArray of static size {n}")
        if self._buf is not None:
            raise InvalidArgumentError("TensorArray.split inside a traced tf.while_loop is "
                                       "not supported; split before the loop")
        if len(ls) > n:
            self._elems.extend([None] * (len(ls) - n))
        start = 0
        for k, m in enumerate(ls):
            self._elems[k] = t[start:start + m]
            start += m
        self._eshape = None if len(set(ls)) > 1 else tuple(t[0:ls[0]].shape) if ls else None
        return self

    def close(self, name=None):
        """Nothing to free (TensorFlow's ``close``)."""
        return None

    def mark_used(self):
        return None

    def identity(self):
        return self

