"""``tf.train.Example`` and its parsers (``tf.io.parse_example``), and TFRecord files
(``tf.io.TFRecordWriter``, ``tf.data.TFRecordDataset``).

Long file: one format end to end (the messages, their wire decoder, the parsers and the
record files that hold them), each part small and used by the next.

The messages (``tf.train.Example``, ``SequenceExample``, ``Features``, ``Feature``,
``BytesList``, ``FloatList``, ``Int64List``, ``FeatureList``, ``FeatureLists``) are real
protobuf classes, built on first use from a descriptor of TensorFlow's
``example.proto``/``feature.proto`` (package ``tensorflow``, same field names and
numbers, so the bytes are TensorFlow's). They need the ``protobuf`` package (the extra
``tapeflow[example]``). The parsers do not: they read the wire format themselves, so
``parse_example`` works on bytes from anywhere (a file TensorFlow wrote, a ``map`` of a
``TFRecordDataset``); inside ``tf.function`` they run as a host node at every call.

A TFRecord file is a sequence of records, each ``uint64 length``, ``uint32
masked_crc32c(length)``, ``data``, ``uint32 masked_crc32c(data)`` (little endian),
optionally GZIP or ZLIB compressed as a whole. The CRC32C is the ``crc32c`` package's
when it is installed, else a table-driven one in Python (slower, same values). A
record whose CRC does not match, or a file that ends inside a record, is a
``tf.errors.DataLossError`` naming the file and the byte offset.

>>> import os, tempfile
>>> import tapeflow as tf
>>> path = os.path.join(tempfile.mkdtemp(), "a.tfrecord")
>>> with tf.io.TFRecordWriter(path) as w:
...     w.write(b"one")
...     w.write(b"two")
>>> [r.numpy() for r in tf.data.TFRecordDataset(path)]
[b'one', b'two']
"""

from __future__ import annotations

import collections
import importlib
import math
import os
import struct
import zlib

import numpy as np

from .. import dtypes as _dt
from ..errors import (DataLossError, FailedPreconditionError, InvalidArgumentError,
                      InvalidTypeError, NotFoundError, UnimplementedError)
from ..ops.ragged import RaggedTensor
from ..ops.sparse import SparseTensor
from ..runtime import context as _ctx
from ..runtime.dispatch import constant
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..tracing.control_flow import py_function
from .dataset import int_arg, to_host
from .text import FileDataset, _compression, _open, _paths, _scalar

__all__ = ["message_class", "MESSAGES", "FixedLenFeature", "VarLenFeature", "RaggedFeature",
           "FixedLenSequenceFeature", "parse_example", "parse_single_example",
           "parse_sequence_example", "parse_single_sequence_example",
           "TFRecordWriter", "TFRecordOptions", "TFRecordCompressionType", "TFRecordDataset",
           "tf_record_iterator", "masked_crc32c", "crc32c", "frame"]

_EXTRA = "pip install 'tapeflow[example]' (or pip install protobuf)"

# --- the messages: a descriptor of TensorFlow's feature.proto and example.proto ------------

#: (message, ((field, number, type, repeated, message type or None, oneof or None), ...))
_FEATURE_PROTO = (
    ("BytesList", (("value", 1, "bytes", True, None, None),)),
    ("FloatList", (("value", 1, "float", True, None, None),)),
    ("Int64List", (("value", 1, "int64", True, None, None),)),
    ("Feature", (("bytes_list", 1, "message", False, "BytesList", "kind"),
                 ("float_list", 2, "message", False, "FloatList", "kind"),
                 ("int64_list", 3, "message", False, "Int64List", "kind"))),
    ("Features", (("feature", 1, "map", True, "Feature", None),)),
    ("FeatureList", (("feature", 1, "message", True, "Feature", None),)),
    ("FeatureLists", (("feature_list", 1, "map", True, "FeatureList", None),)),
)
_EXAMPLE_PROTO = (
    ("Example", (("features", 1, "message", False, "Features", None),)),
    ("SequenceExample", (("context", 1, "message", False, "Features", None),
                         ("feature_lists", 2, "message", False, "FeatureLists", None))),
)
#: the message names of ``tf.train``
MESSAGES = tuple(m for m, _ in _FEATURE_PROTO + _EXAMPLE_PROTO)
_CLASSES: dict = {}


def _protobuf(name):
    try:
        return importlib.import_module(f"google.protobuf.{name}")
    except ImportError as e:
        raise FailedPreconditionError(
            f"tf.train.Example and its messages are protobuf classes; the protobuf package "
            f"is not installed ({e}). Install it: {_EXTRA}. (tf.io.parse_example and "
            "TFRecord files do not need it.)") from None


def _add_message(pb2, file_proto, name, fields):
    fdp = pb2.FieldDescriptorProto
    types = {"bytes": fdp.TYPE_BYTES, "float": fdp.TYPE_FLOAT, "int64": fdp.TYPE_INT64,
             "message": fdp.TYPE_MESSAGE, "map": fdp.TYPE_MESSAGE}
    msg = file_proto.message_type.add(name=name)
    oneofs = []
    for fname, number, ftype, repeated, mtype, oneof in fields:
        f = msg.field.add(name=fname, number=number, type=types[ftype],
                          label=fdp.LABEL_REPEATED if repeated else fdp.LABEL_OPTIONAL)
        if ftype == "map":                  # map<string, mtype>: a nested entry message
            entry = msg.nested_type.add(name=fname.title().replace("_", "") + "Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=fdp.TYPE_STRING,
                            label=fdp.LABEL_OPTIONAL)
            entry.field.add(name="value", number=2, type=fdp.TYPE_MESSAGE,
                            label=fdp.LABEL_OPTIONAL, type_name=f".tensorflow.{mtype}")
            f.type_name = f".tensorflow.{name}.{entry.name}"
        elif mtype is not None:
            f.type_name = f".tensorflow.{mtype}"
        if oneof is not None:
            if oneof not in oneofs:
                oneofs.append(oneof)
                msg.oneof_decl.add(name=oneof)
            f.oneof_index = oneofs.index(oneof)


def _build_classes():
    pb2 = _protobuf("descriptor_pb2")
    pool = _protobuf("descriptor_pool").DescriptorPool()      # a private pool: no clash
    factory = _protobuf("message_factory")
    for fname, messages, deps in (("feature.proto", _FEATURE_PROTO, []),
                                  ("example.proto", _EXAMPLE_PROTO,
                                   ["tensorflow/core/example/feature.proto"])):
        fp = pb2.FileDescriptorProto(name=f"tensorflow/core/example/{fname}",
                                     package="tensorflow", syntax="proto3", dependency=deps)
        for name, fields in messages:
            _add_message(pb2, fp, name, fields)
        pool.Add(fp)
    for name in MESSAGES:
        desc = pool.FindMessageTypeByName(f"tensorflow.{name}")
        if hasattr(factory, "GetMessageClass"):              # protobuf >= 4.21
            _CLASSES[name] = factory.GetMessageClass(desc)
        else:                                                # pragma: no cover - older
            _CLASSES[name] = factory.MessageFactory(pool).GetPrototype(desc)
        try:
            _CLASSES[name].__module__ = "tapeflow.train"     # <class 'tapeflow.train.Example'>
        except (AttributeError, TypeError):                  # pragma: no cover
            pass


def message_class(name):
    """The protobuf class ``tf.train.<name>`` (``"Example"``, ``"Feature"``, ...).

    >>> import tapeflow as tf
    >>> ex = tf.train.Example(features=tf.train.Features(feature={
    ...     "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[3]))}))
    >>> ex.SerializeToString()
    b'\\n\\x0c\\n\\n\\n\\x01n\\x12\\x05\\x1a\\x03\\n\\x01\\x03'
    """
    if name not in MESSAGES:
        raise InvalidArgumentError(f"message_class: {name!r} is not one of {MESSAGES}")
    if not _CLASSES:
        _build_classes()
    return _CLASSES[name]


# --- the feature specifications (tf.io.*Feature) -------------------------------------------

_PARSE_DTYPES = (_dt.string, _dt.int64, _dt.float32)


def _parse_dtype(dtype, what):
    try:
        dt = _dt.as_dtype(dtype)
    except Exception:
        raise InvalidTypeError(f"{what}: dtype must be tf.string, tf.int64 or tf.float32, "
                               f"got {dtype!r}") from None
    if dt not in _PARSE_DTYPES:
        raise InvalidArgumentError(f"{what}: dtype must be tf.string, tf.int64 or tf.float32 "
                                   f"(the types an Example holds), got {dt.name}")
    return dt


def _shape_arg(shape, what):
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        raise InvalidTypeError(f"{what}: shape must be a list of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"{what}: shape {dims} has a negative dimension")
    return dims


class FixedLenFeature(collections.namedtuple(
        "FixedLenFeature", ["shape", "dtype", "default_value"])):
    """A feature of ``prod(shape)`` values in every Example: a dense ``[batch] + shape``
    tensor; ``default_value`` (of ``shape``) where an Example lacks it, else it is
    required."""

    __slots__ = ()

    def __new__(cls, shape, dtype, default_value=None):
        return super().__new__(cls, _shape_arg(shape, "FixedLenFeature"),
                               _parse_dtype(dtype, "FixedLenFeature"), default_value)


class FixedLenSequenceFeature(collections.namedtuple(
        "FixedLenSequenceFeature", ["shape", "dtype", "allow_missing", "default_value"])):
    """Any number of ``shape`` items per Example: ``[batch, longest] + shape``, padded with
    ``default_value`` (0 or ``b""`` when None)."""

    __slots__ = ()

    def __new__(cls, shape, dtype, allow_missing=False, default_value=None):
        return super().__new__(cls, _shape_arg(shape, "FixedLenSequenceFeature"),
                               _parse_dtype(dtype, "FixedLenSequenceFeature"),
                               bool(allow_missing), default_value)


class VarLenFeature(collections.namedtuple("VarLenFeature", ["dtype"])):
    """Any number of values per Example: a ``tf.SparseTensor`` ``[batch, longest]``."""

    __slots__ = ()

    def __new__(cls, dtype):
        return super().__new__(cls, _parse_dtype(dtype, "VarLenFeature"))


_Partition = collections.namedtuple("_Partition", ["key"])


class RaggedFeature(collections.namedtuple(
        "RaggedFeature", ["dtype", "value_key", "partitions", "row_splits_dtype",
                          "validate"])):
    """Any number of values per Example: a ``tf.RaggedTensor`` ``[batch, (n)]`` (a dense
    vector from ``parse_single_example``). ``value_key``: the feature to read (the
    dict key when None). ``partitions``: ``RaggedFeature.RowLengths(key)``,
    ``RowSplits``, ``RowStarts``, ``RowLimits``, ``ValueRowIds`` (outermost first), each
    naming an int64 feature that splits the values further."""

    __slots__ = ()

    class RowSplits(_Partition):
        __slots__ = ()

    class RowLengths(_Partition):
        __slots__ = ()

    class RowStarts(_Partition):
        __slots__ = ()

    class RowLimits(_Partition):
        __slots__ = ()

    class ValueRowIds(_Partition):
        __slots__ = ()

    class UniformRowLength(collections.namedtuple("UniformRowLength", ["length"])):
        __slots__ = ()

    def __new__(cls, dtype, value_key=None, partitions=(), row_splits_dtype=_dt.int32,
                validate=False):
        what = "RaggedFeature"
        if value_key is not None and not isinstance(value_key, str):
            raise InvalidTypeError(f"{what}: value_key must be a str, got {value_key!r}")
        parts = tuple(partitions)
        for p in parts:
            if isinstance(p, cls.UniformRowLength):
                raise UnimplementedError(f"{what}: UniformRowLength partitions are not "
                                         "supported in tapeflow; use RowLengths")
            if not isinstance(p, _Partition) or not isinstance(p.key, str):
                raise InvalidTypeError(f"{what}: partitions must be RaggedFeature.RowSplits/"
                                       f"RowLengths/RowStarts/RowLimits/ValueRowIds, got {p!r}")
        rsd = _dt.as_dtype(row_splits_dtype)
        if rsd not in (_dt.int32, _dt.int64):
            raise InvalidArgumentError(f"{what}: row_splits_dtype must be tf.int32 or "
                                       f"tf.int64, got {rsd.name}")
        return super().__new__(cls, _parse_dtype(dtype, what), value_key, parts, rsd,
                               bool(validate))


_FEATURE_TYPES = (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, RaggedFeature)


# --- the wire format ----------------------------------------------------------------------

class _Corrupt(Exception):
    pass


def _varint(buf, pos, end):
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Corrupt
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(buf, pos, end):
    """``(number, wire type, value)`` of each field in ``buf[pos:end]``: an int for a
    varint, ``(start, stop)`` for the bytes of the others."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise _Corrupt
        if wt == 0:
            v, pos = _varint(buf, pos, end)
        else:
            n = {1: 8, 5: 4}.get(wt)
            if wt == 2:
                n, pos = _varint(buf, pos, end)
            elif n is None:                 # groups (3, 4) and 6, 7: not in an Example
                raise _Corrupt
            if pos + n > end:
                raise _Corrupt
            v = (pos, pos + n)
            pos += n
        yield num, wt, v


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _list_values(buf, kind, s, e):
    """The values of a BytesList (1), FloatList (2) or Int64List (3) in ``buf[s:e]``."""
    out = []
    for num, wt, v in _fields(buf, s, e):
        if num != 1:
            continue                                     # an unknown field: skipped
        if kind == 1 and wt == 2:
            out.append(bytes(buf[v[0]:v[1]]))
        elif kind == 2 and wt == 2:
            if (v[1] - v[0]) % 4:
                raise _Corrupt
            out.extend(np.frombuffer(bytes(buf[v[0]:v[1]]), "<f4").tolist())
        elif kind == 2 and wt == 5:
            out.append(struct.unpack("<f", bytes(buf[v[0]:v[1]]))[0])
        elif kind == 3 and wt == 2:
            p = v[0]
            while p < v[1]:
                x, p = _varint(buf, p, v[1])
                out.append(_signed(x))
        elif kind == 3 and wt == 0:
            out.append(_signed(v))
        else:
            raise _Corrupt
    return out


_KINDS = {1: _dt.string, 2: _dt.float32, 3: _dt.int64}


def _feature(buf, s, e):
    """``(dtype or None, values)`` of a Feature message: its first list, as TensorFlow's
    parser reads it (a later list in the same message, of any kind, is ignored; protobuf
    itself would merge or replace it: docs/example-records.md)."""
    for num, wt, v in _fields(buf, s, e):
        if num not in _KINDS:
            continue
        if wt != 2:
            raise _Corrupt
        return _KINDS[num], _list_values(buf, num, *v)
    return None, []


def _features_map(buf, s, e, out):
    for num, wt, v in _fields(buf, s, e):
        if num != 1:
            continue
        if wt != 2:
            raise _Corrupt
        key, feat = b"", (None, [])
        for n2, w2, v2 in _fields(buf, *v):
            if n2 in (1, 2) and w2 != 2:
                raise _Corrupt
            if n2 == 1:
                key = bytes(buf[v2[0]:v2[1]])
            elif n2 == 2:
                feat = _feature(buf, *v2)
        out[key] = feat                                  # a map: the last entry wins


def decode_example(data):
    """``{key (bytes): (dtype or None, [values])}`` of a serialized Example; InvalidArgumentError
    when the bytes are not one."""
    buf = memoryview(bytes(data))
    out = {}
    try:
        for num, wt, v in _fields(buf, 0, len(buf)):
            if num == 1:
                if wt != 2:
                    raise _Corrupt
                _features_map(buf, v[0], v[1], out)
    except _Corrupt:
        raise InvalidArgumentError(f"parse_example: could not parse example input, value: "
                                   f"{bytes(data)[:64]!r} (not a serialized tf.train.Example)"
                                   ) from None
    return out


# --- parse_example: the features of a batch of Examples as tensors --------------------------

def _to_bytes(x, where):
    if isinstance(x, (bytes, np.bytes_)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode()
    raise InvalidTypeError(f"{where}: serialized must hold strings (serialized Examples), "
                           f"got {type(x).__name__} {x!r}")


def _serialized(serialized, where, rank):
    """``serialized`` as an object array of bytes of rank ``rank``."""
    if isinstance(serialized, (Tensor, Variable)):
        if serialized.dtype is not _dt.string:
            raise InvalidArgumentError(f"{where}: serialized must be a string tensor, got "
                                       f"{serialized.dtype.name}{list(serialized.shape)}")
        a = np.asarray(to_host(serialized, where), object)
    elif isinstance(serialized, (bytes, str, np.bytes_)):
        a = _scalar(serialized)
    elif isinstance(serialized, (list, tuple, np.ndarray)):
        a = np.empty(len(serialized), object)
        for i, x in enumerate(serialized):
            a[i] = x
        if isinstance(serialized, np.ndarray):
            a = a.reshape(serialized.shape)
    else:
        raise InvalidTypeError(f"{where}: serialized must be a string tensor, bytes or a list "
                               f"of bytes, got {type(serialized).__name__}")
    if a.ndim != rank:
        raise InvalidArgumentError(
            f"{where}: serialized must be {'a scalar' if rank == 0 else 'a vector'} (one "
            f"serialized Example{'' if rank == 0 else ' per row'}), got shape {list(a.shape)}"
            + ("; use parse_example for a batch" if rank == 0 else
               "; use parse_single_example for one"))
    return [_to_bytes(x, where) for x in a.reshape(-1)]


def _check_features(features, where):
    if not isinstance(features, dict):
        raise InvalidTypeError(f"{where}: features must be a dict of feature key -> "
                               f"tf.io.FixedLenFeature/VarLenFeature/RaggedFeature, got "
                               f"{type(features).__name__}")
    if not features:
        raise InvalidArgumentError(f"{where}: features is empty: give at least one feature")
    for k, spec in features.items():
        if not isinstance(k, str) or not isinstance(spec, _FEATURE_TYPES):
            raise InvalidTypeError(
                f"{where}: features must map str keys to tf.io.FixedLenFeature, "
                f"FixedLenSequenceFeature, VarLenFeature or RaggedFeature; got {k!r}: {spec!r}")
    order = (VarLenFeature, (FixedLenFeature, FixedLenSequenceFeature), RaggedFeature)
    return [(k, s) for kinds in order for k, s in features.items() if isinstance(s, kinds)]


def _array(values, dtype, shape=None):
    if dtype is _dt.string:
        a = np.empty(len(values), object)
        a[:] = [bytes(v) for v in values] if len(values) else []
    else:
        a = np.asarray(values, dtype=dtype.as_numpy_dtype)
    return a if shape is None else a.reshape(shape)


def _lookup(ex, key, dtype, index, where):
    """The values of feature ``key`` of one Example (None when it has none)."""
    found = ex.get(key.encode())
    if found is None:
        return None
    kind, values = found
    if kind is not None and kind is not dtype:
        raise InvalidArgumentError(
            f"{where}: Name: <unknown>, Key: {key}, Index: {index}.  Data types don't match. "
            f"Data type: {kind.name} but expected type: {dtype.name}")
    return values


def _required(key, dtype, where):
    return InvalidArgumentError(f"{where}: Name: <unknown>, Feature: {key} (data type: "
                                f"{dtype.name}) is required but could not be found; give the "
                                "feature a default_value, or use allow_missing=True")


def _default(spec, n, key, where):
    if spec.default_value is None:
        return None
    d = spec.default_value
    d = to_host(d, where) if isinstance(d, (Tensor, Variable)) else d
    try:
        d = np.asarray(d, object if spec.dtype is _dt.string else spec.dtype.as_numpy_dtype)
    except (TypeError, ValueError):
        raise InvalidTypeError(f"{where}: the default_value of feature {key} must be "
                               f"{spec.dtype.name} values, got {spec.default_value!r}") from None
    if d.size != n and not (d.size == 1 and isinstance(spec, FixedLenSequenceFeature)):
        raise InvalidArgumentError(f"{where}: the default_value of feature {key} has "
                                   f"{d.size} values, its shape {spec.shape} needs {n}")
    d = d.reshape(-1)
    if spec.dtype is _dt.string:
        if not all(isinstance(x, (bytes, str, np.bytes_)) for x in d):
            raise InvalidTypeError(f"{where}: the default_value of feature {key} must be "
                                   f"strings, got {spec.default_value!r}")
        d = _array([_to_bytes(x, where) for x in d], _dt.string)
    return d


def _fixed(exs, key, spec, where):
    n, dt = math.prod(spec.shape), spec.dtype
    default = _default(spec, n, key, where)
    rows = []
    for i, ex in enumerate(exs):
        vals = _lookup(ex, key, dt, i, where)
        if vals is None:
            if default is None:
                raise _required(key, dt, where)
            rows.append(default)
        elif len(vals) != n:
            raise InvalidArgumentError(
                f"{where}: Name: <unknown>, Key: {key}, Index: {i}.  Number of {dt.name} "
                f"values != expected.  Values size: {len(vals)} but output shape: {spec.shape}")
        else:
            rows.append(_array(vals, dt))
    a = np.stack(rows) if rows else _array([], dt)
    return [a.reshape([len(exs)] + spec.shape)]


def _sequence(exs, key, spec, where):
    n, dt = math.prod(spec.shape), spec.dtype
    items = []
    for i, ex in enumerate(exs):
        vals = _lookup(ex, key, dt, i, where)
        if vals is None and not spec.allow_missing:
            raise _required(key, dt, where)
        vals = [] if vals is None else vals
        if (n == 0 and vals) or (n and len(vals) % n):
            raise InvalidArgumentError(
                f"{where}: Name: <unknown>, Key: {key}, Index: {i}.  Number of {dt.name} "
                f"values is not a multiple of the shape {spec.shape}: {len(vals)}")
        items.append(_array(vals, dt, [len(vals) // n if n else 0] + spec.shape))
    longest = max((len(a) for a in items), default=0)
    default = _default(spec, n, key, where) if spec.default_value is not None else None
    pad = (default[0] if default is not None else (b"" if dt is _dt.string else 0))
    out = np.full([len(exs), longest] + spec.shape, pad,
                  object if dt is _dt.string else dt.as_numpy_dtype)
    for i, a in enumerate(items):
        out[i, :len(a)] = a
    return [out]


def _varlen(exs, key, spec, where):
    values, indices, longest = [], [], 0
    for i, ex in enumerate(exs):
        vals = _lookup(ex, key, spec.dtype, i, where) or []
        values.extend(vals)
        indices.extend((i, j) for j in range(len(vals)))
        longest = max(longest, len(vals))
    return [np.asarray(indices, np.int64).reshape(-1, 2), _array(values, spec.dtype),
            np.asarray([len(exs), longest], np.int64)]


def _partition_lengths(kind, a, inner, key, where):
    """The row lengths a partition feature of one Example gives (``inner`` values)."""
    bad = None
    if kind is RaggedFeature.RowLengths:
        lengths = a
    elif kind is RaggedFeature.RowSplits:
        lengths = np.diff(a)
        bad = "row splits must start at 0" if not len(a) or a[0] != 0 else None
    elif kind is RaggedFeature.RowStarts:
        lengths = np.diff(np.append(a, inner))
        bad = "row starts must start at 0" if len(a) and a[0] != 0 else None
    elif kind is RaggedFeature.RowLimits:
        lengths = np.diff(np.insert(a, 0, 0))
    else:                                               # ValueRowIds
        if len(a) and (a[0] < 0 or np.any(np.diff(a) < 0)):
            bad = "value row ids must be sorted and >= 0"
        lengths = np.bincount(a, minlength=0) if len(a) and bad is None else np.zeros(0, int)
    if bad is None and (np.any(lengths < 0) or lengths.sum() != inner):
        bad = f"they split {int(lengths.sum())} values, not the {inner} there are"
    if bad:
        raise InvalidArgumentError(f"{where}: the {kind.__name__} partition of feature {key} "
                                   f"(from feature {key}) is invalid: {bad}")
    return lengths.astype(np.int64)


def _ragged(exs, key, spec, where):
    value_key = spec.value_key or key
    values, levels = [], [[] for _ in range(len(spec.partitions) + 1)]
    for i, ex in enumerate(exs):
        vals = _lookup(ex, value_key, spec.dtype, i, where) or []
        values.extend(vals)
        inner = len(vals)
        for depth in range(len(spec.partitions), 0, -1):
            p = spec.partitions[depth - 1]
            a = np.asarray(_lookup(ex, p.key, _dt.int64, i, where) or [], np.int64)
            lengths = _partition_lengths(type(p), a, inner, p.key, where)
            levels[depth].append(lengths)
            inner = len(lengths)
        levels[0].append(np.asarray([inner], np.int64))
    rsd = spec.row_splits_dtype.as_numpy_dtype
    splits = [np.concatenate([[0], np.cumsum(np.concatenate(lv) if lv else [])]).astype(rsd)
              for lv in levels]
    return [_array(values, spec.dtype)] + splits


_BUILDERS = {FixedLenFeature: _fixed, FixedLenSequenceFeature: _sequence,
             VarLenFeature: _varlen, RaggedFeature: _ragged}


def _unbatch(spec, comps):
    """The components of a batch of one as parse_single_example gives them."""
    if isinstance(spec, VarLenFeature):
        return [comps[0][:, 1:], comps[1], comps[2][1:]]
    if isinstance(spec, RaggedFeature):
        return [comps[0]] + comps[2:]
    return [comps[0][0]]


def _dtypes(spec, single):
    if isinstance(spec, VarLenFeature):
        return [_dt.int64, spec.dtype, _dt.int64]
    if isinstance(spec, RaggedFeature):
        return [spec.dtype] + [spec.row_splits_dtype] * (len(spec.partitions) + (not single))
    return [spec.dtype]


def _parse_host(data, specs, where, single):
    return _parse_host_decoded([decode_example(d) for d in data], specs, where, single)


def _parse_host_decoded(exs, specs, where, single):
    out = []
    for key, spec in specs:
        comps = _BUILDERS[type(spec)](exs, key, spec, where)
        out.extend(_unbatch(spec, comps) if single else comps)
    return out


def _assemble(specs, flat, counts):
    out, i = {}, 0
    for (key, spec), n in zip(specs, counts):
        c, i = flat[i:i + n], i + n
        if isinstance(spec, VarLenFeature):
            out[key] = SparseTensor(*c)
        elif isinstance(spec, RaggedFeature) and n > 1:
            out[key] = RaggedTensor.from_nested_row_splits(c[0], c[1:], validate=False)
        else:
            out[key] = c[0]
    return out


def _run(serialized, tout, host, single, where):
    """The tensors (of dtypes ``tout``) of the arrays ``host(list of bytes)`` gives; a host
    node run at every call when traced."""
    def tensors(s):
        arrays = host(_serialized(s, where, 0 if single else 1))
        return [constant(a, dtype=dt, device="cpu:0") for a, dt in zip(arrays, tout)]

    if (isinstance(serialized, (Tensor, Variable)) and _ctx.tracing[0]
            and _ctx.thread_tracer.tracer is not None):
        if serialized.dtype is not _dt.string:
            raise InvalidArgumentError(f"{where}: serialized must be a string tensor, got "
                                       f"{serialized.dtype.name}")
        return list(py_function(tensors, [serialized], tout))
    return tensors(serialized)


def _parse(serialized, features, single, where):
    specs = _check_features(features, where)
    dtypes = [_dtypes(spec, single) for _, spec in specs]
    flat = _run(serialized, [dt for d in dtypes for dt in d],
                lambda data: _parse_host(data, specs, where, single), single, where)
    return _assemble(specs, flat, [len(d) for d in dtypes])


def parse_example(serialized, features, example_names=None, name=None):
    """The ``features`` (a dict of key -> ``tf.io.FixedLenFeature``,
    ``FixedLenSequenceFeature``, ``VarLenFeature`` or ``RaggedFeature``) of a vector of
    serialized ``tf.train.Example`` s, batched: a dict of key -> dense ``Tensor``
    (``[batch] + shape``), ``tf.SparseTensor`` (VarLen) or ``tf.RaggedTensor``.

    >>> import tapeflow as tf
    >>> ex = tf.train.Example(features=tf.train.Features(feature={
    ...     "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))}))
    >>> out = tf.io.parse_example([ex.SerializeToString(), b""], {
    ...     "n": tf.io.RaggedFeature(tf.int64),
    ...     "x": tf.io.FixedLenFeature([], tf.float32, default_value=0.5)})
    >>> print(out["n"])
    <tf.RaggedTensor [[1, 2], []]>
    >>> print(out["x"])
    tf.Tensor([0.5 0.5], shape=(2,), dtype=float32)
    """
    return _parse(serialized, features, False, "parse_example")


def parse_single_example(serialized, features, example_names=None, name=None):
    """The ``features`` of one serialized ``tf.train.Example`` (a string scalar): as
    :func:`parse_example` without the batch dimension (a ``RaggedFeature`` without
    partitions is a dense vector)."""
    return _parse(serialized, features, True, "parse_single_example")


# --- TFRecord files ---------------------------------------------------------------------------

def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()
_CRC_LIB: list = []


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of ``data``: ``crc32c(b"123456789") == 0xE3069283``.

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    if not _CRC_LIB:
        try:
            _CRC_LIB.append(importlib.import_module("crc32c").crc32c)
        except ImportError:
            _CRC_LIB.append(None)
    if _CRC_LIB[0] is not None:
        return _CRC_LIB[0](bytes(data))
    crc, table = 0xFFFFFFFF, _CRC_TABLE
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data) -> int:
    """The masked CRC a TFRecord stores: the CRC-32C rotated right by 15 bits, plus
    ``0xA282EAD8``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data) -> bytes:
    """One TFRecord: length, CRC of the length, ``data``, CRC of the data."""
    data = bytes(data)
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


class TFRecordCompressionType:
    """``tf.io.TFRecordCompressionType``: ``NONE``, ``ZLIB``, ``GZIP``."""

    NONE, ZLIB, GZIP = 0, 1, 2


_COMPRESSION_NAMES = {0: "", 1: "ZLIB", 2: "GZIP", None: ""}


class TFRecordOptions:
    """How a TFRecord file is compressed: ``compression_type`` ``""``/``None``,
    ``"GZIP"`` or ``"ZLIB"`` (or a ``TFRecordCompressionType``), ``compression_level``
    (0-9, zlib's default when None). TensorFlow's buffer and window options are accepted
    and not used."""

    compression_type_map = {"ZLIB": 1, "GZIP": 2, "": 0}

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None,
                 output_buffer_size=None, window_bits=None, compression_level=None,
                 compression_method=None, mem_level=None, compression_strategy=None):
        if isinstance(compression_type, int) and not isinstance(compression_type, bool):
            compression_type = _COMPRESSION_NAMES.get(compression_type, compression_type)
        self.compression_type = _compression(compression_type, "TFRecordOptions")
        level = -1 if compression_level is None else int_arg(
            compression_level, "compression_level", "TFRecordOptions")
        if not -1 <= level <= 9:
            raise InvalidArgumentError(f"TFRecordOptions: compression_level must be in "
                                       f"0..9, got {compression_level}")
        self.compression_level = level

    @classmethod
    def get_compression_type_string(cls, options):
        """``"GZIP"``, ``"ZLIB"`` or ``""`` for options, a name or None."""
        if isinstance(options, TFRecordOptions):
            return options.compression_type
        return TFRecordOptions(options).compression_type

    def __repr__(self):
        return f"TFRecordOptions(compression_type={self.compression_type!r})"


class TFRecordWriter:
    """Write records (bytes) to a TFRecord file: ``write``, ``flush``, ``close``; a
    context manager. ``options``: a :class:`TFRecordOptions` or a compression name."""

    def __init__(self, path, options=None):
        if not isinstance(options, TFRecordOptions):
            options = TFRecordOptions(options)
        self.path = _paths_for_writing(path)
        self._compression = options.compression_type
        try:
            self._f = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        except FileNotFoundError:
            raise NotFoundError(f"TFRecordWriter: {self.path}: its directory does not "
                                "exist; create it first (tf.io.gfile.makedirs)") from None
        except OSError as e:
            raise FailedPreconditionError(f"TFRecordWriter: cannot write {self.path}: "
                                          f"{e.strerror or e}") from None
        self._z = None
        if self._compression:
            wbits = 31 if self._compression == "GZIP" else 15
            self._z = zlib.compressobj(options.compression_level, zlib.DEFLATED, wbits)

    def _out(self, data):
        if self._f is None:
            raise FailedPreconditionError(f"TFRecordWriter({self.path!r}) is closed")
        self._f.write(self._z.compress(data) if self._z is not None else data)

    def write(self, record):
        """Append one record (``bytes``, a ``str`` or a string scalar tensor)."""
        if isinstance(record, (Tensor, Variable)):
            record = np.asarray(to_host(record, "TFRecordWriter.write")).reshape(()).item()
        if isinstance(record, str):
            record = record.encode()
        if not isinstance(record, (bytes, bytearray, memoryview)):
            raise InvalidTypeError(f"TFRecordWriter.write: a record must be bytes, got "
                                   f"{type(record).__name__}")
        self._out(frame(record))

    def flush(self):
        """Write what is buffered to the file (a sync point of the compressed stream)."""
        if self._f is None:
            raise FailedPreconditionError(f"TFRecordWriter({self.path!r}) is closed")
        if self._z is not None:
            self._f.write(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._f.flush()

    def close(self):
        """Finish the file (and its compressed stream); closing twice does nothing."""
        if self._f is not None:
            if self._z is not None:
                self._f.write(self._z.flush())
            self._f.close()
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _paths_for_writing(path):
    if isinstance(path, (Tensor, Variable)):
        path = np.asarray(to_host(path, "TFRecordWriter")).reshape(()).item()
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidTypeError(f"TFRecordWriter: path must be a str or os.PathLike, got "
                               f"{type(path).__name__} {path!r}")
    return os.fspath(path)


#: the longest record read: a serialized protobuf message is at most 2 GiB
_MAX_RECORD = (1 << 31) - 1


def _read(f, n, path, compression, where):
    try:
        return f.read(n)
    except (zlib.error, OSError, EOFError) as e:
        raise DataLossError(f"{where}: cannot read {path} as {compression or 'TFRecord'} data "
                            f"({e}); is compression_type right?") from None


def _records(path, compression, buffer_size, where):
    """The data of each record of a TFRecord file, both CRCs checked."""
    f = _open(path, compression, buffer_size, where)    # compressed: inflated as it is read
    offset = 0
    try:
        while True:
            header = _read(f, 12, path, compression, where)
            if not header:
                return
            if len(header) < 12:
                raise DataLossError(f"{where}: truncated record at {offset} in {path}: the "
                                    "file ends inside a record")
            (n,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if crc != masked_crc32c(header[:8]) or n > _MAX_RECORD:
                raise DataLossError(f"{where}: corrupted record at {offset} in {path} (its "
                                    "length's CRC does not match): the file is damaged or "
                                    "not a TFRecord file")
            body = _read(f, n + 4, path, compression, where)
            if len(body) < n + 4:
                raise DataLossError(f"{where}: truncated record at {offset} in {path}: the "
                                    "file ends inside a record")
            if struct.unpack("<I", body[n:])[0] != masked_crc32c(body[:n]):
                raise DataLossError(f"{where}: corrupted record at {offset} in {path} (its "
                                    "data's CRC does not match)")
            offset += 16 + n
            yield body[:n]
    finally:
        f.close()


class TFRecordDataset(FileDataset):
    """The records of TFRecord files, each a ``tf.string`` scalar (a serialized
    ``tf.train.Example``, usually: ``.map`` it through ``tf.io.parse_single_example``).

    ``filenames``: a path, a list of paths, a string tensor of them or a Dataset of
    file names, read in order, or ``num_parallel_reads`` at a time taking one record from
    each in turn. ``compression_type``: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``. A
    corrupt record is a ``DataLossError`` when it is reached.
    """

    _tf_name = "TFRecordDatasetV2"
    _where = "TFRecordDataset"
    _read = staticmethod(_records)


def tf_record_iterator(path, options=None):
    """TF 1's ``tf.io.tf_record_iterator`` (``tf.compat.v1``): the records of one file
    as bytes."""
    compression = TFRecordOptions.get_compression_type_string(options)
    path = _paths(path, "tf_record_iterator")[0]
    yield from _records(path, compression, None, "tf_record_iterator")


# --- parse_sequence_example: a context and feature lists (tf.train.SequenceExample) ----------

def _feature_lists(buf, s, e, out):
    for num, wt, v in _fields(buf, s, e):                # FeatureLists: map entries
        if num != 1:
            continue
        if wt != 2:
            raise _Corrupt
        key, steps = b"", []
        for n2, w2, v2 in _fields(buf, *v):
            if n2 in (1, 2) and w2 != 2:
                raise _Corrupt
            if n2 == 1:
                key = bytes(buf[v2[0]:v2[1]])
            elif n2 == 2:                                # FeatureList: repeated Feature
                steps = []
                for n3, w3, v3 in _fields(buf, *v2):
                    if n3 == 1:
                        if w3 != 2:
                            raise _Corrupt
                        steps.append(_feature(buf, *v3))
        out[key] = steps


def decode_sequence_example(data):
    """``(context, feature lists)`` of a serialized SequenceExample: ``{key: (dtype,
    values)}`` and ``{key: [(dtype, values) per step]}``."""
    buf = memoryview(bytes(data))
    context, lists = {}, {}
    try:
        for num, wt, v in _fields(buf, 0, len(buf)):
            if num in (1, 2) and wt != 2:
                raise _Corrupt
            if num == 1:
                _features_map(buf, v[0], v[1], context)
            elif num == 2:
                _feature_lists(buf, v[0], v[1], lists)
    except _Corrupt:
        raise InvalidArgumentError(f"parse_sequence_example: could not parse example input, "
                                   f"value: {bytes(data)[:64]!r} (not a serialized "
                                   "tf.train.SequenceExample)") from None
    return context, lists


def _sequence_feature(seqs, key, spec, where):
    """The components of sequence feature ``key`` of a batch (``seqs``: the feature lists
    of each SequenceExample), and the lengths of a FixedLenSequenceFeature."""
    name = (getattr(spec, "value_key", None) or key).encode()
    steps, counts = [], []
    for lists in seqs:
        st = lists.get(name)
        if st is None and isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
            raise _required(key, spec.dtype, where)
        counts.append(len(st or ()))
        steps.extend({name: f} for f in st or ())
    n_ex, longest = len(seqs), max(counts, default=0)
    if isinstance(spec, VarLenFeature):
        idx, vals, shp = _varlen(steps, key, spec, where)
        starts = np.concatenate([[0], np.cumsum(counts)])[:-1].astype(np.int64)
        ex = np.repeat(np.arange(n_ex, dtype=np.int64), counts)[idx[:, 0]]
        idx = np.stack([ex, idx[:, 0] - starts[ex], idx[:, 1]], 1).reshape(-1, 3)
        return [idx, vals, np.asarray([n_ex, longest, shp[1]], np.int64)], None
    if isinstance(spec, RaggedFeature):
        comps = _ragged(steps, key, spec, where)
        outer = np.concatenate([[0], np.cumsum(counts)]).astype(spec.row_splits_dtype
                                                              .as_numpy_dtype)
        return [comps[0], outer] + comps[1:], None
    flat = _fixed(steps, key, FixedLenFeature(spec.shape, spec.dtype), where)[0]
    default = _default(spec, math.prod(spec.shape), key, where)
    pad = default[0] if default is not None else (b"" if spec.dtype is _dt.string else 0)
    out = np.full([n_ex, longest] + spec.shape, pad,
                  object if spec.dtype is _dt.string else spec.dtype.as_numpy_dtype)
    pos = 0
    for b, c in enumerate(counts):
        out[b, :c] = flat[pos:pos + c]
        pos += c
    return [out], np.asarray(counts, np.int64)


def _sequence_dtypes(spec, single):
    if isinstance(spec, RaggedFeature):
        return [spec.dtype] + [spec.row_splits_dtype] * (1 + (not single))
    return _dtypes(spec, single)


def _parse_sequence(serialized, context_features, sequence_features, single, where):
    ctx, seq = ([] if f is None or (isinstance(f, dict) and not f) else
                _check_features(f, where) for f in (context_features, sequence_features))
    if not ctx and not seq:
        raise InvalidArgumentError(f"{where}: give context_features or sequence_features")
    for key, spec in seq:
        if isinstance(spec, FixedLenFeature) or getattr(spec, "partitions", ()):
            raise InvalidArgumentError(
                f"{where}: sequence feature {key} must be a FixedLenSequenceFeature, "
                f"VarLenFeature or RaggedFeature without partitions, got {spec!r}")
    dense = [key for key, spec in seq if isinstance(spec, FixedLenSequenceFeature)]
    c_types = [_dtypes(spec, single) for _, spec in ctx]
    s_types = [_sequence_dtypes(spec, single) for _, spec in seq]

    def host(data):
        decoded = [decode_sequence_example(d) for d in data]
        flat = _parse_host_decoded([c for c, _ in decoded], ctx, where, single)
        lengths = []
        for key, spec in seq:
            comps, n = _sequence_feature([s for _, s in decoded], key, spec, where)
            flat.extend(_unbatch(spec, comps) if single else comps)
            if n is not None:
                lengths.append(n)
        return flat + ([] if single else lengths)

    tout = [dt for d in c_types + s_types for dt in d] + [_dt.int64] * (0 if single
                                                                        else len(dense))
    flat = _run(serialized, tout, host, single, where)
    nc = sum(len(d) for d in c_types)
    ns = sum(len(d) for d in s_types)
    context = _assemble(ctx, flat[:nc], [len(d) for d in c_types])
    lists = _assemble(seq, flat[nc:nc + ns], [len(d) for d in s_types])
    if single:
        return context, lists
    return context, lists, dict(zip(dense, flat[nc + ns:]))


def parse_sequence_example(serialized, context_features=None, sequence_features=None,
                           example_names=None, name=None):
    """The features of a vector of serialized ``tf.train.SequenceExample`` s: ``(context,
    feature_lists, lengths)``. ``context_features`` as :func:`parse_example`'s;
    ``sequence_features``: ``FixedLenSequenceFeature`` (``[batch, steps] + shape``, its
    lengths in ``lengths``), ``VarLenFeature`` (a SparseTensor ``[batch, steps, n]``) or
    ``RaggedFeature`` (``[batch, (steps), (n)]``)."""
    return _parse_sequence(serialized, context_features, sequence_features, False,
                           "parse_sequence_example")


def parse_single_sequence_example(serialized, context_features=None, sequence_features=None,
                                  example_name=None, name=None):
    """The features of one serialized ``tf.train.SequenceExample``: ``(context,
    feature_lists)``, as :func:`parse_sequence_example` without the batch dimension."""
    return _parse_sequence(serialized, context_features, sequence_features, True,
                           "parse_single_sequence_example")
