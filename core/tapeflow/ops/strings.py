"""``tf.strings``: the ops on text, and what ``+`` means for two string tensors
(docs/dtypes.md, "Strings").

A string tensor (dtype ``tf.string``) holds ``bytes`` on the host: its data is a NumPy
object array of ``bytes``, and a Python ``str`` is encoded in UTF-8 when it becomes a
tensor, as in TensorFlow. The ops here are declared like every built-in op, each with
its kernel beside it: kernels on the ``cpu`` device type for the dtype ``string`` only,
so the registry's dtype check refuses a number given to them, as it refuses a string
given to a numeric op (``tf.exp``), with an InvalidArgumentError naming the op. Strings
never go to another device (dispatch refuses to place one there, naming the op and the
device).

>>> import tapeflow as tf
>>> s = tf.constant(["Gray wolf", "lynx"])
>>> print(tf.strings.upper(s))
tf.Tensor([b'GRAY WOLF' b'LYNX'], shape=(2,), dtype=string)
>>> print(tf.strings.length(s))
tf.Tensor([9 4], shape=(2,), dtype=int32)
>>> print(s + "!")
tf.Tensor([b'Gray wolf!' b'lynx!'], shape=(2,), dtype=string)
>>> print(tf.strings.join([s, "the", s], separator=" "))
tf.Tensor([b'Gray wolf the Gray wolf' b'lynx the lynx'], shape=(2,), dtype=string)
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError
from ..runtime.dispatch import as_tensor_list, execute
from ..runtime.registry import kernel_not_found
from . import math as _m
from .library import LIB, defop

__all__ = ["join", "length", "upper", "lower"]

#: the dtype of the kernels here: strings live on the host
_HOST, _STRING = "cpu", ("string",)


def _text(out):
    """``out`` as an ndarray: NumPy's object loops return a bare ``bytes`` for 0-d inputs,
    and a tensor's data is an array."""
    if type(out) is np.ndarray:
        return out
    a = np.empty((), object)
    a[()] = out
    return a


def _broadcast_infer(shapes, dtypes, attrs):
    try:
        return [(tuple(np.broadcast_shapes(*[tuple(s) for s in shapes])), _dt.string)]
    except ValueError:
        raise InvalidArgumentError(
            "Incompatible shapes: " + " vs. ".join(str(list(s)) for s in shapes)) from None


# --- join, and Add for strings -------------------------------------------------------------

_JOIN = defop("StringJoin", inputs=("*inputs",), attrs={"separator": ""},
              attr_types={"separator": "str"}, broadcast=True, differentiable=False,
              infer=_broadcast_infer)


class _Joiner:
    """``sep.join(parts)`` of one element of each input (a ufunc body)."""

    __slots__ = ("sep",)

    def __init__(self, sep):
        self.sep = sep

    def __call__(self, *parts):
        return self.sep.join(parts)


@LIB.kernel(_JOIN, _HOST, dtypes=_STRING)
def _string_join(*inputs, separator):
    """The inputs joined element by element (broadcast), ``separator`` between them."""
    return _text(np.frompyfunc(_Joiner(separator.encode()), len(inputs), 1)(*inputs))


def join(inputs, separator="", name=None):
    """The strings of ``inputs`` (a list of string tensors or Python strings, broadcast
    together) joined element by element, with ``separator`` between them.

    >>> import tapeflow as tf
    >>> print(tf.strings.join(["wolf", tf.constant(["a", "b"])], separator="-"))
    tf.Tensor([b'wolf-a' b'wolf-b'], shape=(2,), dtype=string)
    """
    inputs = as_tensor_list(inputs, "StringJoin", "tf.strings.join: inputs")
    if not inputs:
        raise InvalidArgumentError("tf.strings.join: inputs is empty; give at least one "
                                   "string tensor", op="StringJoin")
    return _JOIN(*inputs, separator=separator)


def _add_strings(x, y):
    """``Add``'s composite, which dispatch runs for the dtypes its kernels lack: two string
    tensors are concatenated (TensorFlow's Add takes strings, so ``a + b`` and ``tf.add``
    join them); any other dtype has no kernel."""
    if x._data.dtype.kind == "O" and y._data.dtype.kind == "O":
        return execute(_JOIN, (x, y), {"separator": ""})
    raise kernel_not_found(_m._ADD, x._device, x._data.dtype)


# (Add is declared in ops/math.py, the bottom op module, which imports no other op module:
# its composite for strings is attached here, beside the op it runs)
_m._ADD.composite = _add_strings


# --- length -------------------------------------------------------------------------------

_LENGTH = defop("StringLength", inputs=("input",), attrs={"unit": "BYTE"},
                attr_types={"unit": "enum:BYTE|UTF8_CHAR"}, broadcast=True,
                differentiable=False, infer=lambda shapes, dtypes, attrs: [(shapes[0], _dt.int32)])


def _utf8_chars(b):
    """The code points of UTF-8 text ``b``: its bytes that do not continue a character."""
    return sum(1 for c in b if c & 0xC0 != 0x80)


@LIB.kernel(_LENGTH, _HOST, dtypes=_STRING)
def _string_length(x, unit):
    """The length of each string, in bytes or in UTF-8 characters (int32)."""
    count = len if unit == "BYTE" else _utf8_chars
    return np.fromiter(map(count, x.reshape(-1)), np.int32, x.size).reshape(x.shape)


def length(input, unit="BYTE", name=None):
    """The length of each string of ``input``: in bytes (``unit="BYTE"``) or in Unicode
    characters of its UTF-8 text (``unit="UTF8_CHAR"``); int32.

    >>> import tapeflow as tf
    >>> print(tf.strings.length(["wolf", "é"]), tf.strings.length("é", unit="UTF8_CHAR"))
    tf.Tensor([4 2], shape=(2,), dtype=int32) tf.Tensor(1, shape=(), dtype=int32)
    """
    return _LENGTH(input, unit=unit)


# --- upper and lower --------------------------------------------------------------------

def _same_infer(shapes, dtypes, attrs):
    return [(shapes[0], _dt.string)]


_UPPER = defop("StringUpper", inputs=("input",), attrs={"encoding": ""},
               attr_types={"encoding": "enum:|utf-8"}, broadcast=True, differentiable=False,
               infer=_same_infer)
_LOWER = defop("StringLower", inputs=("input",), attrs={"encoding": ""},
               attr_types={"encoding": "enum:|utf-8"}, broadcast=True, differentiable=False,
               infer=_same_infer)


def _utf8_upper(b):
    return b.decode("utf-8").upper().encode("utf-8")


def _utf8_lower(b):
    return b.decode("utf-8").lower().encode("utf-8")


@LIB.kernel(_UPPER, _HOST, dtypes=_STRING)
def _string_upper(x, encoding):
    """Each string in upper case: ASCII letters only, or all of its UTF-8 text."""
    return _text(np.frompyfunc(_utf8_upper if encoding else bytes.upper, 1, 1)(x))


@LIB.kernel(_LOWER, _HOST, dtypes=_STRING)
def _string_lower(x, encoding):
    """Each string in lower case: ASCII letters only, or all of its UTF-8 text."""
    return _text(np.frompyfunc(_utf8_lower if encoding else bytes.lower, 1, 1)(x))


def upper(input, encoding="", name=None):
    """``input`` in upper case: its ASCII letters (``encoding=""``, TensorFlow's default:
    other bytes are kept), or every letter of its UTF-8 text (``encoding="utf-8"``).

    >>> import tapeflow as tf
    >>> print(tf.strings.upper("é a"))
    tf.Tensor(b'\\xc3\\xa9 A', shape=(), dtype=string)
    >>> print(tf.strings.upper("é a", encoding="utf-8"))
    tf.Tensor(b'\\xc3\\x89 A', shape=(), dtype=string)
    """
    return _UPPER(input, encoding=encoding)


def lower(input, encoding="", name=None):
    """``input`` in lower case: its ASCII letters (``encoding=""``), or every letter of its
    UTF-8 text (``encoding="utf-8"``).

    >>> import tapeflow as tf
    >>> print(tf.strings.lower(["Gray WOLF"]))
    tf.Tensor([b'gray wolf'], shape=(1,), dtype=string)
    """
    return _LOWER(input, encoding=encoding)
