"""``tf.strings``: the ops on text, and what ``+`` means for two string tensors
(docs/dtypes.md, "Strings").

Long file: ``tf.strings`` is one namespace of TensorFlow's, and its ops share the
helpers here (the host kernels' element loops, the ragged results, the codecs).

A string tensor (dtype ``tf.string``) holds ``bytes`` on the host: its data is a NumPy
object array of ``bytes``, and a Python ``str`` is encoded in UTF-8 when it becomes a
tensor, as in TensorFlow. The ops here are declared like every built-in op, each with
its kernel beside it: kernels on the ``cpu`` device type for the dtype ``string`` only,
so the registry's dtype check refuses a number given to them, as it refuses a string
given to a numeric op (``tf.exp``), with an InvalidArgumentError naming the op. Strings
never go to another device (dispatch refuses to place one there, naming the op and the
device).

The ops that map each string to one value are declared ``elementwise``: a
``tf.RaggedTensor`` given to them is mapped over its flat values by the composite
dispatch (``tf.strings.length(ragged)``). The ops whose result has a variable number of
parts per string (``split``, ``bytes_split``, ``unicode_decode``, ``ngrams``) return
those parts flat with their row splits, and the functions here build a
``tf.RaggedTensor`` from them (a dense tensor for a scalar input, as TensorFlow does).

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
>>> print(tf.strings.split(s))
<tf.RaggedTensor [[b'Gray', b'wolf'], [b'lynx']]>
"""

from __future__ import annotations

import codecs
import functools
import re

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, OutOfRangeError
from ..runtime.dispatch import as_tensor_list, convert_to_tensor, execute
from ..runtime.registry import kernel_not_found
from . import math as _m
from .array_shape import reshape as _reshape
from .batching import NO_RULE as _NO_RULE
from .composite import is_composite as _any_composite
from .library import LIB, batch_axis, defop, rerun
from .ragged import RaggedTensor as _RaggedTensor

__all__ = ["join", "length", "upper", "lower", "strip", "substr", "split", "reduce_join",
           "regex_replace", "regex_full_match", "to_number", "string_to_number",
           "to_hash_bucket", "to_hash_bucket_fast", "to_hash_bucket_strong", "as_string", "format",
           "unicode_decode", "unicode_decode_with_offsets", "unicode_encode", "unicode_split",
           "unicode_split_with_offsets", "unicode_transcode", "bytes_split", "ngrams"]



def _is_composite(x):
    """Whether ``x`` is a RaggedTensor (the one composite tf.strings takes, as in
    TensorFlow); another composite (a SparseTensor) is refused with InvalidTypeError."""
    if isinstance(x, _RaggedTensor):
        return True
    if _any_composite(x):
        raise InvalidTypeError(f"tf.strings: a {type(x).__name__} is not supported here (as "
                               "in TensorFlow): apply the op to its values, e.g. "
                               "st.with_values(tf.strings.upper(st.values))")
    return False


#: the dtype of the kernels here: strings live on the host
_HOST, _STRING = "cpu", ("string",)
#: the dtypes ``as_string`` and ``format`` print
_PRINTABLE = tuple(d.name for d in _dt.ALL_DTYPES) + _STRING


def _text(out):
    """``out`` as an ndarray: NumPy's object loops return a bare ``bytes`` for 0-d inputs,
    and a tensor's data is an array."""
    if type(out) is np.ndarray:
        return out
    a = np.empty((), object)
    a[()] = out
    return a


def _each(fn, out_dtype, *arrays):
    """``fn`` applied to each element of ``arrays`` (broadcast): an object array of
    ``bytes`` for ``out_dtype`` None, else an array of that NumPy dtype."""
    out = np.frompyfunc(fn, len(arrays), 1)(*arrays)
    if out_dtype is None:
        return _text(out)
    return np.asarray(out, dtype=object).astype(out_dtype)


def _broadcast_infer(shapes, dtypes, attrs, dtype=_dt.string):
    try:
        return [(tuple(np.broadcast_shapes(*[tuple(s) for s in shapes])), dtype)]
    except ValueError:
        raise InvalidArgumentError(
            "Incompatible shapes: " + " vs. ".join(str(list(s)) for s in shapes)) from None


def _infer_as(dtype):
    """The shape/dtype rule of an elementwise op whose result has dtype ``dtype``
    (None: the attr ``out_type``)."""
    def infer(shapes, dtypes, attrs):
        return _broadcast_infer(shapes, dtypes, attrs, dtype or _dt.as_dtype(attrs["out_type"]))
    return infer


def _elementwise(name, dtype=_dt.string, **kw):
    """A non-differentiable elementwise string op (a ragged input maps over its flat
    values)."""
    kw.setdefault("inputs", ("input",))
    return defop(name, broadcast=True, elementwise=True, differentiable=False,
                 infer=_infer_as(dtype), **kw)


def _py_int(v, what, op, low=None):
    """``v`` as a Python int (a bool, a float or a tensor of several values is refused)."""
    if hasattr(v, "numpy") and not isinstance(v, np.ndarray):
        v = v.numpy()
    if isinstance(v, np.ndarray) and v.size == 1:
        v = v.reshape(())[()]
    if isinstance(v, np.integer):
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidTypeError(f"{what} must be an int, got {type(v).__name__} {v!r:.60}",
                               op=op)
    if low is not None and v < low:
        raise InvalidArgumentError(f"{what} must be at least {low}, got {v}", op=op)
    return v


def _tensor(x):
    """``x`` as a tensor (a RaggedTensor stays one)."""
    return x if _is_composite(x) else convert_to_tensor(x)


def _int64(a):
    return convert_to_tensor(np.asarray(a, np.int64))


def _check_splits(splits, n, what="row splits"):
    """Refuse row splits that do not partition ``n`` values (an op called directly)."""
    if (splits.ndim != 1 or splits.dtype.kind not in "iu" or not len(splits) or splits[0] != 0
            or splits[-1] != n or np.any(np.diff(splits) < 0)):
        raise InvalidArgumentError(f"{what} must be 1-D integers ascending from 0 to the {n} "
                                   f"values, got {splits.tolist()!r:.80}")


def _check_point(repl):
    """Refuse a replacement character that is no Unicode code point."""
    if not _valid_point(repl):
        raise InvalidArgumentError(f"replacement_char {repl} is not a Unicode code point (0 "
                                   "to 0x10FFFF, no surrogate)")


def _map_flat(fn, input):
    """``fn`` of a dense ``input``; of the flat values of a RaggedTensor (same rows)."""
    if _is_composite(input):
        return input.with_flat_values(fn(input.flat_values))
    return fn(input)


def _ragged_result(values, row_splits, shape):
    """The parts of each string of an input of ``shape`` (``values`` flat, one row per
    string in row-major order): a dense tensor for a scalar input, else a RaggedTensor
    whose uniform leading dimensions are those of ``shape``."""
    if not shape:
        return values
    nested, rows = [], 1
    for k in range(len(shape) - 1):
        rows *= shape[k]
        nested.append(_int64(np.arange(rows + 1) * shape[k + 1]))
    nested.append(row_splits)
    return _RaggedTensor.from_nested_row_splits(values, nested, validate=False)


def _flat_rows(fn, input):
    """``fn(flat_1d_strings) -> (values, row_splits)`` over ``input`` (dense: its strings
    flattened; ragged: its flat values), as a dense tensor or a RaggedTensor."""
    x = _tensor(input)
    if _is_composite(x):
        return x.with_flat_values(_flat_rows(fn, x.flat_values))
    shape = tuple(x.shape)
    values, splits = fn(_reshape(x, [-1]) if len(shape) != 1 else x)
    return _ragged_result(values, splits, shape)


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
    together) joined element by element, with ``separator`` between them. Ragged inputs
    of one row partition join over their flat values.

    >>> import tapeflow as tf
    >>> print(tf.strings.join(["wolf", tf.constant(["a", "b"])], separator="-"))
    tf.Tensor([b'wolf-a' b'wolf-b'], shape=(2,), dtype=string)
    """
    inputs = as_tensor_list(inputs, "StringJoin", "tf.strings.join: inputs")
    if not inputs:
        raise InvalidArgumentError("tf.strings.join: inputs is empty; give at least one "
                                   "string tensor", op="StringJoin")
    ragged = [x for x in inputs if _is_composite(x)]
    if ragged:
        flat = [x.flat_values if _is_composite(x) else x for x in inputs]
        return ragged[0].with_flat_values(_JOIN(*flat, separator=separator))
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


# --- length, upper, lower, strip ----------------------------------------------------------

_LENGTH = _elementwise("StringLength", _dt.int32, attrs={"unit": "BYTE"},
                       attr_types={"unit": "enum:BYTE|UTF8_CHAR"})


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
    return _map_flat(lambda x: _LENGTH(x, unit=unit), input)


_UPPER = _elementwise("StringUpper", attrs={"encoding": ""},
                      attr_types={"encoding": "enum:|utf-8"})
_LOWER = _elementwise("StringLower", attrs={"encoding": ""},
                      attr_types={"encoding": "enum:|utf-8"})


def _utf8_upper(b):
    return b.decode("utf-8").upper().encode("utf-8")


def _utf8_lower(b):
    return b.decode("utf-8").lower().encode("utf-8")


@LIB.kernel(_UPPER, _HOST, dtypes=_STRING)
def _string_upper(x, encoding):
    """Each string in upper case: ASCII letters only, or all of its UTF-8 text."""
    return _each(_utf8_upper if encoding else bytes.upper, None, x)


@LIB.kernel(_LOWER, _HOST, dtypes=_STRING)
def _string_lower(x, encoding):
    """Each string in lower case: ASCII letters only, or all of its UTF-8 text."""
    return _each(_utf8_lower if encoding else bytes.lower, None, x)


def upper(input, encoding="", name=None):
    """``input`` in upper case: its ASCII letters (``encoding=""``, TensorFlow's default:
    other bytes are kept), or every letter of its UTF-8 text (``encoding="utf-8"``).

    >>> import tapeflow as tf
    >>> print(tf.strings.upper("é a"))
    tf.Tensor(b'\\xc3\\xa9 A', shape=(), dtype=string)
    >>> print(tf.strings.upper("é a", encoding="utf-8"))
    tf.Tensor(b'\\xc3\\x89 A', shape=(), dtype=string)
    """
    return _map_flat(lambda x: _UPPER(x, encoding=encoding), input)


def lower(input, encoding="", name=None):
    """``input`` in lower case: its ASCII letters (``encoding=""``), or every letter of its
    UTF-8 text (``encoding="utf-8"``).

    >>> import tapeflow as tf
    >>> print(tf.strings.lower(["Gray WOLF"]))
    tf.Tensor([b'gray wolf'], shape=(1,), dtype=string)
    """
    return _map_flat(lambda x: _LOWER(x, encoding=encoding), input)


_STRIP = _elementwise("StringStrip")


@LIB.kernel(_STRIP, _HOST, dtypes=_STRING)
def _string_strip(x):
    """Each string without its leading and trailing ASCII whitespace."""
    return _each(bytes.strip, None, x)


def strip(input, name=None):
    """Each string of ``input`` without its leading and trailing ASCII whitespace
    (space, tab, newline, carriage return, vertical tab, form feed).

    >>> import tapeflow as tf
    >>> print(tf.strings.strip(["  wolf \\n", "lynx"]))
    tf.Tensor([b'wolf' b'lynx'], shape=(2,), dtype=string)
    """
    return _map_flat(_STRIP, input)


# --- substr -------------------------------------------------------------------------------

_SUBSTR = defop("Substr", inputs=("input", "pos", "len"), attrs={"unit": "BYTE"},
                attr_types={"unit": "enum:BYTE|UTF8_CHAR"}, dtype_rule="none",
                broadcast=True, differentiable=False, infer=_broadcast_infer)


def _char_starts(b):
    """The byte offsets of the UTF-8 characters of ``b``, and ``len(b)`` last."""
    return [i for i, c in enumerate(b) if c & 0xC0 != 0x80] + [len(b)]


@LIB.kernel(_SUBSTR, _HOST, dtypes=_STRING)
def _substr(x, pos, n, unit):
    """``x[pos:pos + len]`` of each string (broadcast), in bytes or UTF-8 characters."""
    if pos.dtype.kind not in "iu" or n.dtype.kind not in "iu":
        raise InvalidArgumentError(f"pos and len must be integers, got {pos.dtype} and "
                                   f"{n.dtype}")
    if pos.shape != n.shape:
        raise InvalidArgumentError(f"pos and len should have the same shape, got: "
                                   f"{list(pos.shape)} vs. {list(n.shape)}")
    x, pos, n = np.broadcast_arrays(x, pos, n)
    out = np.empty(x.shape, object)
    flat = out.reshape(-1)
    for i, (s, p, k) in enumerate(zip(x.flat, pos.flat, n.flat)):
        starts = _char_starts(s) if unit == "UTF8_CHAR" else None
        size = len(s) if starts is None else len(starts) - 1
        p, k = int(p), int(k)
        if p > size or p < -size:
            text = f" {s!r}" if starts is None else ""
            raise InvalidArgumentError(f"pos {p} out of range for string{text} at index {i}")
        p = p + size if p < 0 else p
        end = size if k < 0 else min(p + k, size)
        flat[i] = s[p:end] if starts is None else s[starts[p]:starts[end]]
    return out


def substr(input, pos, len, unit="BYTE", name=None):
    """The substring of each string of ``input`` that starts at ``pos`` and is ``len``
    long (cut at the string's end), counted in bytes (``unit="BYTE"``) or in UTF-8
    characters (``unit="UTF8_CHAR"``). A negative ``pos`` counts from the end; a ``pos``
    beyond the string is an InvalidArgumentError. ``pos`` and ``len`` (ints) have one
    shape, which broadcasts with ``input``'s; a ragged ``input`` takes scalars.

    >>> import tapeflow as tf
    >>> print(tf.strings.substr(["wolf", "lynx"], 1, 2))
    tf.Tensor([b'ol' b'yn'], shape=(2,), dtype=string)
    >>> print(tf.strings.substr("héllo", 1, 2, unit="UTF8_CHAR").numpy().decode())
    él
    """
    x = _tensor(input)
    if _is_composite(x):
        return x.with_flat_values(_SUBSTR(x.flat_values, pos, len, unit=unit))
    return _SUBSTR(x, pos, len, unit=unit)


# --- split, bytes_split --------------------------------------------------------------------

_SPLIT = defop("StringSplit", inputs=("input",), attrs={"sep": "", "maxsplit": -1},
               attr_types={"sep": "str", "maxsplit": "int"}, num_outputs=2,
               differentiable=False)
_BYTES_SPLIT = defop("StringBytesSplit", inputs=("input",), num_outputs=2,
                     differentiable=False)


def _rows(parts, out_dtype=object):
    """The flat values and int64 row splits of a list of lists."""
    splits = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=splits[1:])
    values = np.empty(int(splits[-1]), out_dtype)
    values[:] = [v for p in parts for v in p]
    return values, splits


@LIB.kernel(_SPLIT, _HOST, dtypes=_STRING)
def _string_split(x, sep, maxsplit):
    """The parts of each string of the 1-D ``x`` between ``sep`` (runs of whitespace for
    ``""``), at most ``maxsplit`` splits (-1: all): flat values and row splits."""
    sep, maxsplit = _encoded(sep) or None, maxsplit if 0 <= maxsplit < 2 ** 62 else -1
    return _rows([s.split(sep, maxsplit) for s in x.reshape(-1)])


@LIB.kernel(_BYTES_SPLIT, _HOST, dtypes=_STRING)
def _bytes_split(x):
    """The bytes of each string of the 1-D ``x``: flat values and row splits."""
    return _rows([[s[i:i + 1] for i in range(len(s))] for s in x.reshape(-1)])


def split(input, sep=None, maxsplit=-1, name=None):
    """The parts of each string of ``input`` between the separator ``sep`` (``None`` or
    ``""``: runs of whitespace, ignoring it at both ends), with at most ``maxsplit``
    splits (-1: no limit). A scalar gives a 1-D tensor of its parts; a tensor of rank
    ``r`` (or a RaggedTensor) gives a RaggedTensor of rank ``r + 1``.

    >>> import tapeflow as tf
    >>> print(tf.strings.split("Gray wolf"))
    tf.Tensor([b'Gray' b'wolf'], shape=(2,), dtype=string)
    >>> print(tf.strings.split(["a,b,c", "d"], sep=",", maxsplit=1))
    <tf.RaggedTensor [[b'a', b'b,c'], [b'd']]>
    """
    sep = "" if sep is None else _pattern(sep, "StringSplit")
    maxsplit = _py_int(maxsplit, "tf.strings.split: maxsplit", "StringSplit")
    return _flat_rows(lambda x: _SPLIT(x, sep=sep, maxsplit=maxsplit), input)


def string_split(source, delimiter=" ", skip_empty=True, sep=None, result_type="SparseTensor",
                 name=None):
    """TensorFlow 1's ``tf.string_split``: each string of the 1-D ``source`` split at every
    character of ``delimiter`` (``""``: into its bytes), empty parts dropped unless
    ``skip_empty=False``; a ``tf.SparseTensor`` of shape ``[len(source), most parts]``
    (``result_type="RaggedTensor"``: a RaggedTensor). ``sep`` is a synonym of
    ``delimiter``. TensorFlow 2's :func:`split` splits at a whole separator instead.

    >>> import tapeflow as tf
    >>> st = tf.string_split(["a,b,,c", "d"], ",")
    >>> print(st.values.numpy().tolist(), st.dense_shape.numpy().tolist())
    [b'a', b'b', b'c', b'd'] [2, 3]
    """
    delimiter = _pattern(delimiter if sep is None else sep, "StringSplit")
    if result_type not in ("SparseTensor", "RaggedTensor"):
        raise InvalidArgumentError(f"tf.string_split: result_type must be 'SparseTensor' or "
                                   f"'RaggedTensor', got {result_type!r}")
    x = convert_to_tensor(source)
    if x.dtype is not _dt.string or len(x.shape) != 1:
        raise InvalidArgumentError(
            f"tf.string_split: source must be a 1-D string tensor, got {x.dtype.name} of shape "
            f"{list(x.shape)}")
    cut = re.compile(b"[" + re.escape(delimiter.encode("utf-8", "surrogateescape")) + b"]"
                     ) if delimiter else None
    parts, splits = [], [0]
    for s in x.numpy().tolist():
        row = [s[i:i + 1] for i in range(len(s))] if cut is None else cut.split(s)
        parts.extend(p for p in row if p or not skip_empty)
        splits.append(len(parts))
    values = np.empty(len(parts), dtype=object)
    values[:] = parts
    rt = _RaggedTensor.from_row_splits(convert_to_tensor(values, _dt.string),
                                       convert_to_tensor(np.array(splits, np.int64)),
                                       validate=False)
    return rt if result_type == "RaggedTensor" else rt.to_sparse()


def bytes_split(input, name=None):
    """The bytes of each string of ``input``, each a string: a 1-D tensor for a scalar,
    a RaggedTensor of one more dimension otherwise.

    >>> import tapeflow as tf
    >>> print(tf.strings.bytes_split("lynx"))
    tf.Tensor([b'l' b'y' b'n' b'x'], shape=(4,), dtype=string)
    """
    return _flat_rows(_BYTES_SPLIT, input)


# --- reduce_join -------------------------------------------------------------------------

_REDUCE_JOIN = defop("ReduceJoin", inputs=("inputs",),
                     attrs={"axis": (), "keepdims": False, "separator": ""},
                     attr_types={"axis": "any", "separator": "str"}, differentiable=False)


@LIB.kernel(_REDUCE_JOIN, _HOST, dtypes=_STRING)
def _reduce_join(x, axis, keepdims, separator):
    """The strings along ``axis`` joined (the last axis listed varies slowest)."""
    if (not isinstance(axis, tuple) or len(set(axis)) != len(axis)
            or not all(type(a) is int and 0 <= a < x.ndim for a in axis)):
        raise InvalidArgumentError(f"axis must be distinct dimensions of the rank-{x.ndim} "
                                   f"input, got {axis!r:.60}")
    kept = [d for d in range(x.ndim) if d not in axis]
    n = int(np.prod([x.shape[d] for d in axis], dtype=np.int64))
    t = np.transpose(x, kept + list(reversed(axis))).reshape(
        [x.shape[d] for d in kept] + [n])
    sep, out = separator.encode(), np.empty(t.shape[:-1], object)
    for idx in np.ndindex(out.shape):
        out[idx] = sep.join(t[idx])
    if keepdims:
        out = out.reshape([1 if d in axis else x.shape[d] for d in range(x.ndim)])
    return out


@_REDUCE_JOIN.def_batch
def _batch_reduce_join(ctx, x):
    rank = len(x.shape) - 1
    return rerun(ctx, (x,), axis=tuple(batch_axis(a, rank) for a in ctx.attrs["axis"]))


def reduce_join(inputs, axis=None, keepdims=False, separator="", name=None):
    """The strings of ``inputs`` joined along ``axis`` (an int or a list; None: all, in
    row-major order), with ``separator`` between them; ``keepdims`` keeps the joined
    dimensions with size 1. With several axes, the last one listed varies slowest.

    >>> import tapeflow as tf
    >>> x = tf.constant([["a", "b"], ["c", "d"]])
    >>> print(tf.strings.reduce_join(x, axis=1, separator="-"))
    tf.Tensor([b'a-b' b'c-d'], shape=(2,), dtype=string)
    >>> print(tf.strings.reduce_join(x))
    tf.Tensor(b'abcd', shape=(), dtype=string)
    """
    x = _tensor(inputs)
    if _is_composite(x):
        raise InvalidTypeError("tf.strings.reduce_join does not take a RaggedTensor: "
                               "convert it with .to_tensor() first", op="ReduceJoin")
    rank = len(x.shape)
    if axis is None:
        axes = tuple(range(rank - 1, -1, -1))
    else:
        axes = []
        for a in (axis if isinstance(axis, (list, tuple)) else [axis]):
            a = _py_int(a, "tf.strings.reduce_join: axis", "ReduceJoin")
            if not -rank <= a < rank:
                raise OutOfRangeError(f"Invalid reduction dimension {a} for input with "
                                      f"{rank} dimension(s)", op="ReduceJoin")
            if a % rank in axes:
                raise InvalidArgumentError(f"Duplicate reduction dimension {a}",
                                           op="ReduceJoin")
            axes.append(a % rank)
        axes = tuple(axes)
    return _REDUCE_JOIN(x, axis=axes, keepdims=keepdims, separator=separator)


# --- regular expressions ------------------------------------------------------------------

_REGEX_REPLACE = _elementwise(
    "StaticRegexReplace", attrs={"pattern": "", "rewrite": "", "replace_global": True},
    attr_types={"pattern": "str", "rewrite": "str", "replace_global": "bool"})
_REGEX_FULL_MATCH = _elementwise("StaticRegexFullMatch", _dt.bool_, attrs={"pattern": ""},
                                 attr_types={"pattern": "str"})


@functools.lru_cache(maxsize=64)
def _regex(pattern):
    """``pattern`` compiled (ASCII classes, as RE2's ``\\w``, ``\\d``, ``\\s``)."""
    try:
        return re.compile(pattern, re.ASCII)
    except re.error as e:
        raise InvalidArgumentError(f"Invalid pattern: {pattern}, error: {e}") from None


@functools.lru_cache(maxsize=64)
def _rewrite(rewrite):
    """RE2's rewrite string (``\\0``..``\\9`` a group, ``\\\\`` a backslash) as the
    parts of a replacement: text, or group numbers."""
    parts, i = [], 0
    while i < len(rewrite):
        c = rewrite[i]
        if c == "\\":
            nxt = rewrite[i + 1:i + 2]
            if not (nxt.isdigit() or nxt == "\\"):
                raise InvalidArgumentError(f"Invalid rewrite pattern {rewrite!r}: a backslash "
                                           "is followed by a digit (a group) or a backslash")
            parts.append(int(nxt) if nxt.isdigit() else "\\")
            i += 2
        else:
            parts.append(c)
            i += 1
    return tuple(parts)


def _decoded(b):
    return b.decode("utf-8", "surrogateescape")


def _encoded(s):
    return s.encode("utf-8", "surrogateescape")


@LIB.kernel(_REGEX_REPLACE, _HOST, dtypes=_STRING)
def _regex_replace(x, pattern, rewrite, replace_global):
    rx, parts = _regex(pattern), _rewrite(rewrite)
    bad = [p for p in parts if type(p) is int and p > rx.groups]
    if bad:
        raise InvalidArgumentError(f"Invalid rewrite pattern {rewrite!r}: group {bad[0]} of a "
                                   f"pattern with {rx.groups} group(s)")

    def repl(m):
        return "".join(p if type(p) is str else (m.group(p) or "") for p in parts)
    if replace_global:
        return _each(lambda b: _encoded(_replace_all(rx, repl, _decoded(b))), None, x)
    return _each(lambda b: _encoded(rx.sub(repl, _decoded(b), 1)), None, x)


def _replace_all(rx, repl, s):
    """Every match of ``rx`` in ``s`` replaced, as RE2's GlobalReplace does: an empty
    match right after the previous match is skipped (Python's ``re.sub`` takes it)."""
    out, start, last, i = [], 0, -1, 0
    while i <= len(s):
        m = rx.search(s, i)
        if m is None:
            break
        a, b = m.span()
        if a == b == last:
            i = a + 1
            continue
        out += [s[start:a], repl(m)]
        start = last = b
        i = b if b > a else b + 1
    out.append(s[start:])
    return "".join(out)


@LIB.kernel(_REGEX_FULL_MATCH, _HOST, dtypes=_STRING)
def _regex_full_match(x, pattern):
    rx = _regex(pattern)
    return _each(lambda b: rx.fullmatch(_decoded(b)) is not None, np.bool_, x)


def regex_replace(input, pattern, rewrite, replace_global=True, name=None):
    """Each match of the regular expression ``pattern`` in the strings of ``input``
    replaced by ``rewrite`` (``\\0`` the match, ``\\1``..``\\9`` its groups, ``\\\\`` a
    backslash); only the first match with ``replace_global=False``. Patterns are RE2's
    common syntax run by Python's ``re`` on the UTF-8 text (docs/dtypes.md, "Strings").

    >>> import tapeflow as tf
    >>> print(tf.strings.regex_replace("key=value", r"(\\w+)=(\\w+)", r"\\2=\\1"))
    tf.Tensor(b'value=key', shape=(), dtype=string)
    """
    op = "StaticRegexReplace"
    attrs = dict(pattern=_pattern(pattern, op), rewrite=_pattern(rewrite, op),
                 replace_global=replace_global)
    return _map_flat(lambda x: _REGEX_REPLACE(x, **attrs), input)


def regex_full_match(input, pattern, name=None):
    """Whether each string of ``input`` matches the regular expression ``pattern`` whole
    (a bool tensor); the syntax is as :func:`regex_replace`'s.

    >>> import tapeflow as tf
    >>> print(tf.strings.regex_full_match(["wolf", "wolves"], "wol[a-z]"))
    tf.Tensor([ True False], shape=(2,), dtype=bool)
    """
    op = "StaticRegexFullMatch"
    pattern = _pattern(pattern, op)
    return _map_flat(lambda x: _REGEX_FULL_MATCH(x, pattern=pattern), input)


def _pattern(p, op):
    """Text (a pattern, a separator ...) given as str, bytes or a scalar string tensor, as
    a str (bytes that are not UTF-8 kept as surrogate escapes)."""
    if hasattr(p, "numpy") and getattr(p, "dtype", None) is _dt.string and not p.shape:
        p = p.numpy()
    if isinstance(p, bytes):
        p = p.decode("utf-8", "surrogateescape")
    if not isinstance(p, str):
        raise InvalidTypeError(f"expected text (a str, bytes or a scalar string tensor), got "
                               f"{type(p).__name__} {p!r:.60}", op=op)
    return p


# --- to_number, as_string ---------------------------------------------------------------

_NUMBER_TYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
_TO_NUMBER = _elementwise("StringToNumber", None, inputs=("string_tensor",),
                          attrs={"out_type": _dt.float32},
                          attr_types={"out_type": "enum:" + "|".join(_NUMBER_TYPES)})


def _parse_number(b, integer):
    """The number written in ``b``: an int (base 10) or a float (``inf``, ``nan``,
    exponents, hexadecimal ``0x``), whitespace around it allowed; None when it is none."""
    s = b.decode("utf-8", "replace").strip()
    if not s or "_" in s or not s.isascii():
        return None
    try:
        if integer:
            return int(s, 10)
        body = s.lstrip("+-")
        return float.fromhex(s) if body[:2].lower() == "0x" else float(s)
    except ValueError:
        return None


@LIB.kernel(_TO_NUMBER, _HOST, dtypes=_STRING)
def _string_to_number(x, out_type):
    out_type = _dt.as_dtype(out_type)
    np_type = np.dtype(out_type.as_numpy_dtype)
    integer = out_type.is_integer
    info = np.iinfo(np_type) if integer else None
    out = np.empty(x.shape, np_type)
    flat = out.reshape(-1)
    with np.errstate(over="ignore"):                 # (1e40 is inf in float32)
        for i, b in enumerate(x.reshape(-1)):
            v = _parse_number(b, integer)
            if v is None or (integer and not info.min <= v <= info.max):
                raise InvalidArgumentError("StringToNumberOp could not correctly convert "
                                           "string: " + b.decode("utf-8", "replace"))
            flat[i] = v
    return out


def to_number(string_tensor, out_type=_dt.float32, name=None):
    """The numbers written in the strings of ``string_tensor``, as ``out_type`` (float32,
    float64, int32, int64, uint32 or uint64); a string that is not one is an
    InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.strings.to_number(["1", "2.5", "-1e3"]))
    tf.Tensor([    1.      2.5 -1000. ], shape=(3,), dtype=float32)
    >>> print(tf.strings.to_number(["7", " 42"], out_type=tf.int64))
    tf.Tensor([ 7 42], shape=(2,), dtype=int64)
    """
    try:
        out_type = _dt.as_dtype(out_type)
    except (TypeError, ValueError, InvalidArgumentError):
        raise InvalidTypeError(f"tf.strings.to_number: out_type must be a dtype, got "
                               f"{out_type!r:.60}", op="StringToNumber") from None
    if out_type.name not in _NUMBER_TYPES:
        raise InvalidArgumentError(f"Value for attr 'out_type' of {out_type.name} is not in "
                                   "the list of allowed values: float, double, int32, int64, "
                                   "uint32, uint64", op="StringToNumber")
    return _map_flat(lambda x: _TO_NUMBER(x, out_type=out_type.name), string_tensor)


string_to_number = to_number

_AS_STRING = _elementwise(
    "AsString", attrs={"precision": -1, "scientific": False, "shortest": False, "width": -1,
                       "fill": ""},
    attr_types={"precision": "int", "scientific": "bool", "shortest": "bool", "width": "int",
                "fill": "str"})


#: the widest ``as_string`` field (each element is a string that long)
_MAX_WIDTH = 1 << 16


def _as_string_format(dtype, precision, scientific, shortest, width, fill):
    """The printf format of one value of ``dtype`` (TensorFlow's AsString)."""
    if len(fill) > 1 or fill not in ("", " ", "0", "-", "+", "#"):
        raise InvalidArgumentError(f'Fill argument not supported: "{fill}"')
    if scientific and shortest:
        raise InvalidArgumentError("Cannot select both scientific and shortest notation")
    if max(width, precision) > _MAX_WIDTH:
        raise InvalidArgumentError(f"width {width} or precision {precision} is over "
                                   f"{_MAX_WIDTH} characters")
    floating = dtype.kind in "fc" or dtype.name == "bfloat16"
    if not floating and (precision > -1 or scientific or shortest):
        what = "precision" if precision > -1 else "scientific" if scientific else "shortest"
        raise InvalidArgumentError(f"{what} not supported for datatype {dtype.name}")
    spec = "%" + fill.strip() + (str(width) if width > -1 else "")
    if not floating:
        return spec + ("d" if dtype.kind in "iu" else "s")
    return spec + (f".{precision}" if precision > -1 else "") + (
        "e" if scientific else "g" if shortest else "f")


@LIB.kernel(_AS_STRING, _HOST, dtypes=_PRINTABLE)
def _as_string(x, precision, scientific, shortest, width, fill):
    fmt = _as_string_format(x.dtype, precision, scientific, shortest, width, fill)
    kind = x.dtype.kind
    if kind == "c":
        one = lambda v: f"({fmt % v.real},{fmt % v.imag})"          # noqa: E731
    elif kind == "b":
        one = lambda v: fmt % ("true" if v else "false")             # noqa: E731
    elif kind == "O":
        one = lambda v: fmt % _decoded(v)                            # noqa: E731
    elif kind in "iu":
        one = lambda v: fmt % int(v)                                 # noqa: E731
    else:
        one = lambda v: fmt % float(v)                               # noqa: E731
    return _each(lambda v: _encoded(one(v)), None, x)


def as_string(input, precision=-1, scientific=False, shortest=False, width=-1, fill="",
              name=None):
    """Each number of ``input`` as text: floats with ``precision`` digits after the point
    (-1: six), in ``scientific`` notation or the ``shortest`` of the two; every value
    padded to ``width`` characters with ``fill`` (``"0"``; ``"-"`` pads on the right);
    bools as ``true``/``false``.

    >>> import tapeflow as tf
    >>> print(tf.strings.as_string([1.5, 2.0], precision=2))
    tf.Tensor([b'1.50' b'2.00'], shape=(2,), dtype=string)
    >>> print(tf.strings.as_string([7, 42], width=4, fill="0"))
    tf.Tensor([b'0007' b'0042'], shape=(2,), dtype=string)
    """
    attrs = dict(precision=precision, scientific=scientific, shortest=shortest, width=width,
                 fill=fill)
    return _map_flat(lambda x: _AS_STRING(x, **attrs), input)


# --- hashing ----------------------------------------------------------------------------

_M64 = (1 << 64) - 1
_K0, _K1, _K2 = 0xc3a5c85c97cb3127, 0xb492b66fbe98f273, 0x9ae16a3b2f90404f


def _rot(v, s):
    return ((v >> s) | (v << (64 - s))) & _M64


def _u64(b, i):
    return int.from_bytes(b[i:i + 8], "little")


def _mix(v):
    return v ^ (v >> 47)


def _hash16(u, v, mul):
    a = _mix(((u ^ v) * mul) & _M64)
    b = _mix(((v ^ a) * mul) & _M64)
    return (b * mul) & _M64


def _hash_short(s, n):
    """FarmHash's 64-bit fingerprint of at most 64 bytes."""
    mul = _K2 + n * 2
    if n > 32:
        a, b = (_u64(s, 0) * _K2) & _M64, _u64(s, 8)
        c, d = (_u64(s, n - 8) * mul) & _M64, (_u64(s, n - 16) * _K2) & _M64
        y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
        z = _hash16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
        e, f = (_u64(s, 16) * mul) & _M64, _u64(s, 24)
        g, h = ((y + _u64(s, n - 32)) * mul) & _M64, ((z + _u64(s, n - 24)) * mul) & _M64
        return _hash16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64,
                       (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)
    if n > 16:
        a, b = (_u64(s, 0) * _K1) & _M64, _u64(s, 8)
        c, d = (_u64(s, n - 8) * mul) & _M64, (_u64(s, n - 16) * _K2) & _M64
        return _hash16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                       (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    if n >= 8:
        a, b = (_u64(s, 0) + _K2) & _M64, _u64(s, n - 8)
        return _hash16((_rot(b, 37) * mul + a) & _M64, ((_rot(a, 25) + b) * mul) & _M64, mul)
    if n >= 4:
        a = int.from_bytes(s[:4], "little")
        return _hash16(n + (a << 3), int.from_bytes(s[n - 4:n], "little"), mul)
    if n:
        y, z = s[0] + (s[n >> 1] << 8), n + (s[n - 1] << 2)
        return (_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
    return _K2


def _weak32(s, i, a, b):
    w, x, y, z = _u64(s, i), _u64(s, i + 8), _u64(s, i + 16), _u64(s, i + 24)
    a = (a + w) & _M64
    b, c = _rot((b + a + z) & _M64, 21), a
    a = (a + x + y) & _M64
    return (a + z) & _M64, (b + _rot(a, 44) + c) & _M64


def _fingerprint64(s):
    """FarmHash's ``Fingerprint64`` of the bytes ``s`` (TensorFlow's ``tf.fingerprint``
    and ``to_hash_bucket_fast``): a stable 64-bit hash, the same on every platform."""
    n = len(s)
    if n <= 64:
        return _hash_short(s, n)
    x, y = 81, (81 * _K1 + 113) & _M64
    z, v, w = (_mix((y * _K2 + 113) & _M64) * _K2) & _M64, (0, 0), (0, 0)
    x = (x * _K2 + _u64(s, 0)) & _M64
    for i in range(0, ((n - 1) // 64) * 64, 64):
        x = (_rot((x + y + v[0] + _u64(s, i + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _u64(s, i + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _u64(s, i + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(s, i, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _u64(s, i + 16)) & _M64)
        z, x = x, z
    mul, i = _K1 + ((z & 0xff) << 1), n - 64
    w0 = (w[0] + ((n - 1) & 63)) & _M64
    v0 = (v[0] + w0) & _M64
    w, v = ((w0 + v0) & _M64, w[1]), (v0, v[1])
    x = (_rot((x + y + v[0] + _u64(s, i + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v[1] + _u64(s, i + 48)) & _M64, 42) * mul) & _M64
    x ^= (w[1] * 9) & _M64
    y = (y + v[0] * 9 + _u64(s, i + 40)) & _M64
    z = (_rot((z + w[0]) & _M64, 33) * mul) & _M64
    v = _weak32(s, i, (v[1] * mul) & _M64, (x + w[0]) & _M64)
    w = _weak32(s, i + 32, (z + w[1]) & _M64, (y + _u64(s, i + 16)) & _M64)
    z, x = x, z
    return _hash16((_hash16(v[0], w[0], mul) + _mix(y) * _K0 + z) & _M64,
                   (_hash16(v[1], w[1], mul) + x) & _M64, mul)


def _rotl(v, s):
    return ((v << s) | (v >> (64 - s))) & _M64


def _sip_rounds(v, k):
    v0, v1, v2, v3 = v
    for _ in range(k):
        v0 = (v0 + v1) & _M64
        v1 = _rotl(v1, 13) ^ v0
        v0 = _rotl(v0, 32)
        v2 = (v2 + v3) & _M64
        v3 = _rotl(v3, 16) ^ v2
        v0 = (v0 + v3) & _M64
        v3 = _rotl(v3, 21) ^ v0
        v2 = (v2 + v1) & _M64
        v1 = _rotl(v1, 17) ^ v2
        v2 = _rotl(v2, 32)
    return [v0, v1, v2, v3]


def _siphash(k0, k1, s):
    """SipHash-2-4 of the bytes ``s`` under the 128-bit key ``(k0, k1)`` (TensorFlow's
    ``to_hash_bucket_strong``)."""
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d,
         k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573]
    n = len(s)
    tail = n - n % 8
    words = [_u64(s, i) for i in range(0, tail, 8)]
    words.append(int.from_bytes(s[tail:], "little") | ((n & 0xff) << 56))
    for m in words:
        v[3] ^= m
        v = _sip_rounds(v, 2)
        v[0] ^= m
    v[2] ^= 0xff
    v = _sip_rounds(v, 4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


_HASH_FAST = _elementwise("StringToHashBucketFast", _dt.int64, attrs={"num_buckets": 1},
                          attr_types={"num_buckets": "int"})
_HASH_STRONG = _elementwise("StringToHashBucketStrong", _dt.int64,
                            attrs={"num_buckets": 1, "key": (0, 0)},
                            attr_types={"num_buckets": "int", "key": "any"})


def _check_buckets(num_buckets):
    if num_buckets < 1:
        raise InvalidArgumentError(f"num_buckets must be at least 1, got {num_buckets}")


@LIB.kernel(_HASH_FAST, _HOST, dtypes=_STRING)
def _hash_bucket_fast(x, num_buckets):
    _check_buckets(num_buckets)
    return _each(lambda b: _fingerprint64(b) % num_buckets, np.int64, x)


@LIB.kernel(_HASH_STRONG, _HOST, dtypes=_STRING)
def _hash_bucket_strong(x, num_buckets, key):
    _check_buckets(num_buckets)
    if not (isinstance(key, tuple) and len(key) == 2
            and all(type(k) is int and 0 <= k <= _M64 for k in key)):
        raise InvalidArgumentError(f"key must be two unsigned 64-bit ints, got {key!r:.60}")
    k0, k1 = key
    return _each(lambda b: _siphash(k0, k1, b) % num_buckets, np.int64, x)


def _buckets(num_buckets, op):
    return _py_int(num_buckets, f"{op}: num_buckets", op, low=1)


def to_hash_bucket_fast(input, num_buckets, name=None):
    """Each string of ``input`` hashed into one of ``num_buckets`` buckets (int64): its
    FarmHash ``Fingerprint64`` modulo ``num_buckets``, TensorFlow's hash, so the buckets
    are TensorFlow's, on every platform and in every run.

    >>> import tapeflow as tf
    >>> print(tf.strings.to_hash_bucket_fast(["wolf", "lynx", "owl"], 5))
    tf.Tensor([2 3 4], shape=(3,), dtype=int64)
    """
    op = "StringToHashBucketFast"
    n = _buckets(num_buckets, op)
    return _map_flat(lambda x: _HASH_FAST(x, num_buckets=n), input)


def to_hash_bucket(string_tensor, num_buckets, name=None):
    """TensorFlow's legacy ``to_hash_bucket``: here :func:`to_hash_bucket_fast`'s
    buckets. TensorFlow's legacy hash is not stable across its builds and platforms, so
    tapeflow does not reproduce it: the bucket numbers differ from TensorFlow's (use
    ``to_hash_bucket_fast`` in both for the same buckets).

    >>> import tapeflow as tf
    >>> print(tf.strings.to_hash_bucket(["wolf", "lynx", "owl"], 5))
    tf.Tensor([2 3 4], shape=(3,), dtype=int64)
    """
    return to_hash_bucket_fast(string_tensor, num_buckets)


def to_hash_bucket_strong(input, num_buckets, key, name=None):
    """Each string of ``input`` hashed into one of ``num_buckets`` buckets with the keyed
    hash SipHash-2-4 (``key``: two unsigned 64-bit ints), as TensorFlow does: slower
    than :func:`to_hash_bucket_fast`, and hard to collide without the key.

    >>> import tapeflow as tf
    >>> print(tf.strings.to_hash_bucket_strong(["wolf", "lynx"], 5, [7, 11]))
    tf.Tensor([2 4], shape=(2,), dtype=int64)
    """
    op = "StringToHashBucketStrong"
    if not isinstance(key, (list, tuple)) or len(key) != 2:
        raise InvalidArgumentError(f"{op}: key must be a list of two ints, got {key!r:.60}",
                                   op=op)
    key = tuple(_py_int(k, f"{op}: key", op, low=0) & _M64 for k in key)
    n = _buckets(num_buckets, op)
    return _map_flat(lambda x: _HASH_STRONG(x, num_buckets=n, key=key), input)


# --- format ------------------------------------------------------------------------------

_FORMAT = defop("StringFormat", inputs=("*inputs",), dtype_rule="none",
                attrs={"template": "%s", "placeholder": "%s", "summarize": 3},
                attr_types={"template": "str", "placeholder": "str", "summarize": "int"},
                differentiable=False, infer=lambda shapes, dtypes, attrs: [((), _dt.string)])


def _float_text(v, digits):
    """TensorFlow's text of a float: the shorter of 6 (float64: 15) significant digits
    when they give the value back, else 9 (17)."""
    short, full, cast = (6, 9, np.float32) if digits == 32 else (15, 17, float)
    v = cast(v)
    text = "%.*g" % (short, v)
    return text if v != v or cast(text) == v else "%.*g" % (full, v)


def _value_text(a):
    """How TensorFlow prints one element of an array like ``a``."""
    kind = a.dtype.kind
    if kind == "f" or a.dtype.name == "bfloat16":
        digits = 64 if a.dtype.itemsize == 8 else 32
        return lambda v: _float_text(v, digits)
    if kind == "b":
        return lambda v: "1" if v else "0"
    if kind == "O":
        return lambda v: '"' + _decoded(_c_escape(v)) + '"'
    if kind == "c":
        return lambda v: "?"                          # (as TensorFlow prints a complex)
    return lambda v: str(int(v))


_ESCAPES = {ord("\n"): b"\\n", ord("\r"): b"\\r", ord("\t"): b"\\t", ord("\\"): b"\\\\",
            ord('"'): b'\\"', ord("'"): b"\\'"}


def _c_escape(b):
    """``b`` with quotes, backslashes and control bytes escaped as C does (bytes of
    UTF-8 text kept)."""
    return b"".join(_ESCAPES.get(c) or (b"\\%03o" % c if c < 0x20 or c == 0x7F else
                                        bytes((c,))) for c in b)


def _array_text(a, depth, summarize, one):
    """``a`` (rank >= 1) as TensorFlow prints it, ``summarize`` items at each end of a
    dimension (-1: all)."""
    n = a.shape[0]
    idx = (list(range(summarize)) + [None] + list(range(n - summarize, n))
           if 0 <= summarize and n > 2 * summarize else range(n))
    if a.ndim == 1:
        return "[" + " ".join("..." if i is None else one(a[i]) for i in idx) + "]"
    gap = "\n" * (a.ndim - 1) + " " * (depth + 1)
    return "[" + gap.join("..." if i is None else _array_text(a[i], depth + 1, summarize, one)
                          for i in idx) + "]"


def _tensor_text(a, summarize):
    one = _value_text(a)
    return one(a[()]) if a.ndim == 0 else _array_text(a, 0, summarize, one)


@LIB.kernel(_FORMAT, _HOST)
def _string_format(*inputs, template, placeholder, summarize):
    if not placeholder:
        raise InvalidArgumentError("placeholder is empty: give the text that marks a tensor")
    pieces = template.split(placeholder)
    if len(pieces) - 1 != len(inputs):
        raise InvalidArgumentError(f"{len(inputs)} tensors given for a template with "
                                   f"{len(pieces) - 1} placeholders {placeholder!r}")
    out = [pieces[0]]
    for a, piece in zip(inputs, pieces[1:]):
        out += [_tensor_text(a, summarize), piece]
    return _text(_encoded("".join(out)))


def format(template, inputs, placeholder="{}", summarize=3, name=None):
    """``template`` with each ``placeholder`` replaced by one tensor of ``inputs`` (a
    tensor or a list) printed as TensorFlow prints it (``summarize`` items at each end of
    a dimension, -1: all): a scalar string.

    >>> import tapeflow as tf
    >>> print(tf.strings.format("x={} y={}", [tf.constant([1, 2]), tf.constant(0.5)]))
    tf.Tensor(b'x=[1 2] y=0.5', shape=(), dtype=string)
    >>> print(tf.strings.format("{}", tf.range(10), summarize=2).numpy())
    b'[0 1 ... 8 9]'
    """
    if not isinstance(inputs, (list, tuple)):
        inputs = [inputs]
    inputs = [_tensor(x) for x in inputs]
    template = _pattern(template, "StringFormat")
    if placeholder == "" or not isinstance(placeholder, str):
        raise InvalidArgumentError(f"tf.strings.format: placeholder must be a non-empty str, "
                                   f"got {placeholder!r:.60}", op="StringFormat")
    if len(template.split(placeholder)) - 1 != len(inputs):
        raise InvalidArgumentError(
            f"The template expects {len(template.split(placeholder)) - 1} tensors, but the "
            f"inputs only has {len(inputs)}: give one tensor per placeholder {placeholder!r}",
            op="StringFormat")
    summarize = _py_int(summarize, "tf.strings.format: summarize", "StringFormat")
    if not inputs:
        return convert_to_tensor(template)
    return _FORMAT(*inputs, template=template, placeholder=placeholder, summarize=summarize)


# --- Unicode --------------------------------------------------------------------------------

_ERRORS = "enum:replace|ignore|strict"
_DECODE = defop("UnicodeDecodeWithOffsets", inputs=("input",), num_outputs=3,
                attrs={"input_encoding": "UTF-8", "errors": "replace",
                       "replacement_char": 0xFFFD, "replace_control_characters": False},
                attr_types={"input_encoding": "str", "errors": _ERRORS,
                            "replacement_char": "int", "replace_control_characters": "bool"},
                differentiable=False)
_ENCODE = defop("UnicodeEncode", inputs=("input_values", "input_splits"), dtype_rule="none",
                attrs={"output_encoding": "UTF-8", "errors": "replace",
                       "replacement_char": 0xFFFD},
                attr_types={"output_encoding": "str", "errors": _ERRORS,
                            "replacement_char": "int"}, differentiable=False)
_TRANSCODE = _elementwise(
    "UnicodeTranscode", attrs={"input_encoding": "UTF-8", "output_encoding": "UTF-8",
                               "errors": "replace", "replacement_char": 0xFFFD,
                               "replace_control_characters": False},
    attr_types={"input_encoding": "str", "output_encoding": "str", "errors": _ERRORS,
                "replacement_char": "int", "replace_control_characters": "bool"})

_BAD_TEXT = "tapeflow.strings.bad_text"


def _mark_bad_text(e):
    """A codec error handler: each undecodable run becomes one lone surrogate (which no
    strict decoder returns) carrying the run's length in bytes."""
    return chr(0xDC00 + min(e.end - e.start, 0xFF)), e.end


codecs.register_error(_BAD_TEXT, _mark_bad_text)


@functools.lru_cache(maxsize=32)
def _codec(name, op):
    """The Python codec of the encoding TensorFlow names ``name`` (``UTF-8``,
    ``UTF-16-BE``, ``UTF-32-BE``, ...)."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise InvalidArgumentError(f"Could not create converter for encoding: {name} "
                                   "(give UTF-8, UTF-16-BE or UTF-32-BE)", op=op) from None


def _char_bytes(codec):
    """The number of bytes of one code point in ``codec``."""
    if codec == "utf-8":
        return lambda o: 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4
    if codec in ("utf-16-be", "utf-16-le"):
        return lambda o: 2 if o < 0x10000 else 4
    return lambda o: len(chr(o).encode(codec))


def _decode_one(b, codec, errors, repl, control, width):
    """The code points of ``b`` and the byte offset each starts at."""
    points, offsets, at = [], [], 0
    for ch in b.decode(codec, _BAD_TEXT):
        o = ord(ch)
        if 0xDC00 <= o <= 0xDCFF:                      # an undecodable run
            n, o = o - 0xDC00, repl
            if errors == "strict":
                raise InvalidArgumentError("Invalid formatting on input string")
            if errors == "ignore":
                at += n
                continue
        else:
            n = width(o)
            if control and o < 0x20:
                o = repl
        points.append(o)
        offsets.append(at)
        at += n
    return points, offsets


@LIB.kernel(_DECODE, _HOST, dtypes=_STRING)
def _unicode_decode(x, input_encoding, errors, replacement_char, replace_control_characters):
    codec = _codec(input_encoding, "UnicodeDecodeWithOffsets")
    width = _char_bytes(codec)
    _check_point(replacement_char)
    rows = [_decode_one(b, codec, errors, replacement_char, replace_control_characters, width)
            for b in x.reshape(-1)]
    points, splits = _rows([r[0] for r in rows], np.int32)
    return points, splits, _rows([r[1] for r in rows], np.int64)[0]


def _valid_point(o):
    return 0 <= o <= 0x10FFFF and not 0xD800 <= o <= 0xDFFF


def _encode_row(points, codec, errors, repl):
    chars = []
    for o in points:
        if not _valid_point(o):
            if errors == "strict":
                raise InvalidArgumentError("Code point is out of range for Unicode, or is a "
                                           "surrogate.")
            if errors == "ignore":
                continue
            o = repl
        chars.append(chr(o))
    return "".join(chars).encode(codec)


@LIB.kernel(_ENCODE, _HOST, dtypes=("int32",))
def _unicode_encode(values, splits, output_encoding, errors, replacement_char):
    codec = _codec(output_encoding, "UnicodeEncode")
    _check_point(replacement_char)
    if values.ndim != 1:
        raise InvalidArgumentError(f"input_values must be 1-D, got shape {list(values.shape)}")
    _check_splits(splits, len(values), "input_splits")
    out = np.empty(len(splits) - 1, object)
    out[:] = [_encode_row(values[a:b].tolist(), codec, errors, replacement_char)
              for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())]
    return out


@LIB.kernel(_TRANSCODE, _HOST, dtypes=_STRING)
def _unicode_transcode(x, input_encoding, output_encoding, errors, replacement_char,
                       replace_control_characters):
    codec_in = _codec(input_encoding, "UnicodeTranscode")
    codec_out, width = _codec(output_encoding, "UnicodeTranscode"), _char_bytes(codec_in)
    _check_point(replacement_char)
    return _each(lambda b: _encode_row(
        _decode_one(b, codec_in, errors, replacement_char, replace_control_characters,
                    width)[0], codec_out, errors, replacement_char), None, x)


def _check_replacement(replacement_char, op):
    repl = _py_int(replacement_char, f"{op}: replacement_char", op)
    if not _valid_point(repl):
        raise InvalidArgumentError(f"{op}: replacement_char {repl} is not a Unicode code "
                                   "point (0 to 0x10FFFF, no surrogate)", op=op)
    return repl


def _decoded_rows(input, input_encoding, errors, replacement_char,
                  replace_control_characters, part):
    """``unicode_decode``'s output ``part`` (0: code points, 2: offsets)."""
    repl = _check_replacement(replacement_char, "UnicodeDecodeWithOffsets")

    def run(x):
        out = _DECODE(x, input_encoding=input_encoding, errors=errors, replacement_char=repl,
                      replace_control_characters=replace_control_characters)
        return out[part], out[1]
    return _flat_rows(run, input)


def unicode_decode(input, input_encoding, errors="replace", replacement_char=65533,
                   replace_control_characters=False, name=None):
    """The Unicode code points (int32) of each string of ``input`` in ``input_encoding``
    (``"UTF-8"``, ``"UTF-16-BE"``, ``"UTF-32-BE"``...): a 1-D tensor for a scalar, a
    RaggedTensor of one more dimension otherwise. Bytes that do not decode become
    ``replacement_char`` (``errors="replace"``), are dropped (``"ignore"``) or raise
    InvalidArgumentError (``"strict"``); ``replace_control_characters`` replaces
    U+0000..U+001F too.

    >>> import tapeflow as tf
    >>> print(tf.strings.unicode_decode("né", "UTF-8"))
    tf.Tensor([110 233], shape=(2,), dtype=int32)
    >>> print(tf.strings.unicode_decode([b"a", b"\\xffb"], "UTF-8"))
    <tf.RaggedTensor [[97], [65533, 98]]>
    """
    return _decoded_rows(input, input_encoding, errors, replacement_char,
                         replace_control_characters, 0)


def unicode_decode_with_offsets(input, input_encoding, errors="replace",
                                replacement_char=65533, replace_control_characters=False,
                                name=None):
    """:func:`unicode_decode`'s code points, and the byte offset (int64) at which each
    starts in its string, shaped alike.

    >>> import tapeflow as tf
    >>> chars, starts = tf.strings.unicode_decode_with_offsets("né!", "UTF-8")
    >>> print(chars.numpy(), starts.numpy())
    [110 233  33] [0 1 3]
    """
    return (unicode_decode(input, input_encoding, errors, replacement_char,
                           replace_control_characters),
            _decoded_rows(input, input_encoding, errors, replacement_char,
                          replace_control_characters, 2))


def unicode_encode(input, output_encoding, errors="replace", replacement_char=65533,
                   name=None):
    """The strings of the Unicode code points (int32) in the last dimension of ``input``
    (a tensor of rank >= 1, or a RaggedTensor), encoded in ``output_encoding``: one rank
    less. Values that are no code point become ``replacement_char``
    (``errors="replace"``), are dropped (``"ignore"``) or raise (``"strict"``).

    >>> import tapeflow as tf
    >>> print(tf.strings.unicode_encode([[110, 233], [97, 98]], "UTF-8"))
    tf.Tensor([b'n\\xc3\\xa9' b'ab'], shape=(2,), dtype=string)
    """
    op = "UnicodeEncode"
    repl = _check_replacement(replacement_char, op)
    attrs = dict(output_encoding=output_encoding, errors=errors, replacement_char=repl)
    x = _tensor(input)
    if _is_composite(x):
        if _is_composite(x.values) or len(x.values.shape) != 1:
            return x.with_values(unicode_encode(x.values, output_encoding, errors, repl))
        return _ENCODE(x.values, x.row_splits, **attrs)
    shape = tuple(x.shape)
    if not shape:
        raise InvalidArgumentError("unicode_encode: input's rank must be at least 1 (a "
                                   "scalar is one code point: give [c])", op=op)
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    splits = _int64(np.arange(rows + 1) * shape[-1])
    out = _ENCODE(_reshape(x, [-1]), splits, **attrs)
    return out[0] if len(shape) == 1 else _reshape(out, list(shape[:-1]))


def unicode_transcode(input, input_encoding, output_encoding, errors="replace",
                      replacement_char=65533, replace_control_characters=False, name=None):
    """Each string of ``input`` decoded from ``input_encoding`` and encoded in
    ``output_encoding`` (undecodable bytes handled as :func:`unicode_decode` does).

    >>> import tapeflow as tf
    >>> print(tf.strings.unicode_transcode("né", "UTF-8", "UTF-16-BE"))
    tf.Tensor(b'\\x00n\\x00\\xe9', shape=(), dtype=string)
    """
    repl = _check_replacement(replacement_char, "UnicodeTranscode")
    attrs = dict(input_encoding=input_encoding, output_encoding=output_encoding,
                 errors=errors, replacement_char=repl,
                 replace_control_characters=replace_control_characters)
    return _map_flat(lambda x: _TRANSCODE(x, **attrs), input)


def _split_chars(input, input_encoding, errors, replacement_char, offsets):
    repl = _check_replacement(replacement_char, "UnicodeDecodeWithOffsets")

    def run(x):
        points, splits, starts = _DECODE(x, input_encoding=input_encoding, errors=errors,
                                         replacement_char=repl)
        one = _int64(np.arange(int(points.shape[0]) + 1))
        chars = _ENCODE(points, one, output_encoding=input_encoding, errors=errors,
                        replacement_char=repl)
        return (starts if offsets else chars), splits
    return _flat_rows(run, input)


def unicode_split(input, input_encoding, errors="replace", replacement_char=65533,
                  name=None):
    """The characters of each string of ``input`` (in ``input_encoding``), each a
    string: a 1-D tensor for a scalar, a RaggedTensor of one more dimension otherwise.

    >>> import tapeflow as tf
    >>> print(tf.strings.unicode_split("né", "UTF-8"))
    tf.Tensor([b'n' b'\\xc3\\xa9'], shape=(2,), dtype=string)
    """
    return _split_chars(input, input_encoding, errors, replacement_char, False)


def unicode_split_with_offsets(input, input_encoding, errors="replace",
                               replacement_char=65533, name=None):
    """:func:`unicode_split`'s characters and the byte offset (int64) of each."""
    return (_split_chars(input, input_encoding, errors, replacement_char, False),
            _split_chars(input, input_encoding, errors, replacement_char, True))


# --- ngrams -------------------------------------------------------------------------------

_NGRAMS = defop("StringNGrams", inputs=("data", "data_splits"), dtype_rule="none",
                num_outputs=2, differentiable=False,
                attrs={"separator": " ", "ngram_widths": (1,), "left_pad": "",
                       "right_pad": "", "pad_width": 0, "preserve_short_sequences": False},
                attr_types={"separator": "str", "ngram_widths": "any", "left_pad": "str",
                            "right_pad": "str", "pad_width": "int",
                            "preserve_short_sequences": "bool"})


def _ngrams_row(row, widths, sep, left, right, pad_width, preserve):
    out = []
    for w in widths:
        pad = min(w - 1 if pad_width < 0 else pad_width, w - 1)
        seq = [left] * pad + row + [right] * pad
        out += [sep.join(seq[i:i + w]) for i in range(len(seq) - w + 1)]
    if not out and preserve and row:
        pad = max(pad_width, 0)
        out.append(sep.join([left] * pad + row + [right] * pad))
    return out


@LIB.kernel(_NGRAMS, _HOST, dtypes=_STRING)
def _string_ngrams(data, splits, separator, ngram_widths, left_pad, right_pad, pad_width,
                   preserve_short_sequences):
    if not (isinstance(ngram_widths, tuple) and ngram_widths
            and all(type(w) is int and w > 0 for w in ngram_widths)):
        raise InvalidArgumentError(f"ngram_widths must be positive ints, got "
                                   f"{ngram_widths!r:.60}")
    if data.ndim != 1:
        raise InvalidArgumentError(f"data must be 1-D, got shape {list(data.shape)}")
    _check_splits(splits, len(data), "data_splits")
    sep, left, right = separator.encode(), left_pad.encode(), right_pad.encode()
    items = data.tolist()
    return _rows([_ngrams_row(items[a:b], ngram_widths, sep, left, right, pad_width,
                              preserve_short_sequences)
                  for a, b in zip(splits[:-1].tolist(), splits[1:].tolist())])


def ngrams(data, ngram_width, separator=" ", pad_values=None, padding_width=None,
           preserve_short_sequences=False, name=None):
    """The n-grams of the last dimension of ``data`` (strings), for each width of
    ``ngram_width`` (an int or a list): ``n`` neighbours joined by ``separator``.
    ``pad_values`` (a string, or a (left, right) pair) pads each sequence with
    ``padding_width`` of them at each end (None: ``width - 1``);
    ``preserve_short_sequences`` gives a sequence too short for any n-gram one, made of
    all of it, padded.

    >>> import tapeflow as tf
    >>> print(tf.strings.ngrams(["a", "b", "c"], 2))
    tf.Tensor([b'a b' b'b c'], shape=(2,), dtype=string)
    >>> print(tf.strings.ngrams(["a", "b"], 2, separator="", pad_values="#"))
    tf.Tensor([b'#a' b'ab' b'b#'], shape=(3,), dtype=string)
    """
    op = "StringNGrams"
    widths = ngram_width if isinstance(ngram_width, (list, tuple)) else [ngram_width]
    widths = tuple(_py_int(w, "tf.strings.ngrams: ngram_width", op, low=1) for w in widths)
    if pad_values is None:
        left = right = ""
        pad = 0
    else:
        left, right = (pad_values if isinstance(pad_values, (list, tuple))
                       and len(pad_values) == 2 else (pad_values, pad_values))
        left, right = _pattern(left, op), _pattern(right, op)
        pad = -1 if padding_width is None else _py_int(
            padding_width, "tf.strings.ngrams: padding_width", op, low=1)
    attrs = dict(separator=separator, ngram_widths=widths, left_pad=left, right_pad=right,
                 pad_width=pad, preserve_short_sequences=preserve_short_sequences)
    x = _tensor(data)
    if _is_composite(x):
        if _is_composite(x.values) or len(x.values.shape) != 1:
            return x.with_values(ngrams(x.values, ngram_width, separator, pad_values,
                                        padding_width, preserve_short_sequences))
        values, splits = _NGRAMS(x.values, x.row_splits, **attrs)
        return _RaggedTensor.from_row_splits(values, splits, validate=False)
    shape = tuple(x.shape)
    if not shape:
        raise InvalidArgumentError("tf.strings.ngrams: data must have rank >= 1, got a scalar",
                                   op=op)
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    values, splits = _NGRAMS(_reshape(x, [-1]), _int64(np.arange(rows + 1) * shape[-1]),
                             **attrs)
    counts = np.diff(splits.numpy())
    if len(set(counts.tolist())) > 1:
        return _RaggedTensor.from_row_splits(values, splits, validate=False)
    return _reshape(values, list(shape[:-1]) + [int(counts[0]) if rows else 0])


# --- decode_raw (tf.io) ---------------------------------------------------------------------

_RAW_TYPES = ("float16", "float32", "float64", "int32", "uint16", "uint8", "int16", "int8",
              "int64", "complex64", "complex128", "bool", "bfloat16")
_DECODE_RAW = defop("DecodeRaw", inputs=("bytes",),
                    attrs={"out_type": _dt.uint8, "little_endian": True, "fixed_length": 0},
                    attr_types={"out_type": "enum:" + "|".join(_RAW_TYPES),
                                "little_endian": "bool", "fixed_length": "int"},
                    differentiable=False)


@LIB.kernel(_DECODE_RAW, _HOST, dtypes=_STRING)
def _decode_raw(x, out_type, little_endian, fixed_length):
    np_type = np.dtype(_dt.as_dtype(out_type).as_numpy_dtype)
    size = np_type.itemsize
    if fixed_length < 0:
        raise InvalidArgumentError(f"fixed_length must be at least 0 (0: none), got "
                                   f"{fixed_length}")
    flat = x.reshape(-1)
    if fixed_length:
        if fixed_length % size:
            raise InvalidArgumentError(f"fixed_length {fixed_length} is not a multiple of "
                                       f"{size}, the size of {out_type}")
        flat = [b[:fixed_length].ljust(fixed_length, b"\0") for b in flat]
        n = fixed_length
    else:
        n = len(flat[0]) if len(flat) else 0
        if n % size:
            raise InvalidArgumentError(f"Input to DecodeRaw has length {n} that is not a "
                                       f"multiple of {size}, the size of {out_type}")
        for i, b in enumerate(flat):
            if len(b) != n:
                raise InvalidArgumentError(f"DecodeRaw requires input strings to all be the "
                                           f"same size, but element {i} has size {n} != "
                                           f"{len(b)}")
    raw = np.frombuffer(b"".join(flat), np.uint8)
    if np_type.kind == "b":
        out = raw != 0
    else:
        order = "<" if little_endian else ">"
        if np_type.name == "bfloat16":
            out = raw.view(order + "u2").astype(np.uint16).view(np_type)
        else:
            out = raw.view(np_type.newbyteorder(order)).astype(np_type)
    return out.reshape(x.shape + (n // size,))


@_DECODE_RAW.def_infer
def _decode_raw_infer(shapes, dtypes, attrs):
    return [(tuple(shapes[0]) + (None,), _dt.as_dtype(attrs["out_type"]))]


def decode_raw(input_bytes, out_type, little_endian=True, fixed_length=None, name=None):
    """``tf.io.decode_raw``: the bytes of each string of ``input_bytes`` read as numbers
    of ``out_type`` (little- or big-endian), in a new last dimension. The strings have one
    length, a multiple of the dtype's size; with ``fixed_length``, each is cut or padded
    with zeros to that many bytes.

    >>> import tapeflow as tf
    >>> print(tf.io.decode_raw(tf.constant("Duck"), tf.uint8))
    tf.Tensor([ 68 117  99 107], shape=(4,), dtype=uint8)
    """
    op = "DecodeRaw"
    try:
        out_type = _dt.as_dtype(out_type)
    except (TypeError, ValueError, InvalidArgumentError):
        raise InvalidTypeError(f"tf.io.decode_raw: out_type must be a dtype, got "
                               f"{out_type!r:.60}", op=op) from None
    if out_type.name not in _RAW_TYPES:
        raise InvalidArgumentError(f"Value for attr 'out_type' of {out_type.name} is not in the "
                                   f"list of allowed values: {', '.join(_RAW_TYPES)}", op=op)
    fixed = 0 if fixed_length is None else _py_int(
        fixed_length, "tf.io.decode_raw: fixed_length", op, low=1)
    return _DECODE_RAW(input_bytes, out_type=out_type.name, little_endian=little_endian,
                       fixed_length=fixed)


# The ops whose outputs are ragged across examples have no batching rule
# (tf.vectorized_map runs them once per example); DecodeRaw maps over leading dimensions.
@_DECODE_RAW.def_batch
def _batch_decode_raw(ctx, x):
    return rerun(ctx, (x,))



_NO_RULE.update({name: "its outputs' shapes depend on the strings (ragged across examples)"
                for name in ("StringSplit", "StringBytesSplit", "UnicodeDecodeWithOffsets",
                             "UnicodeEncode", "StringNGrams")})
_NO_RULE["StringFormat"] = "it prints whole tensors into one string"
