"""Text files in ``tf.data``: ``tf.data.TextLineDataset``, ``tf.data.experimental.CsvDataset``
and ``make_csv_dataset``, and ``tf.io.decode_csv`` (the CSV parser as a function on string
tensors).

Lines and fields are ``tf.string`` tensors (bytes, on the host: docs/dtypes.md,
"Strings"). A line is what lies between two newlines (a ``\\r`` before the newline is
dropped too, as TensorFlow does), without the newline; several files are read one after
the other (or interleaved, one line from each in turn, with ``num_parallel_reads`` > 1).
``compression_type`` is ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``. Local files only.

CSV fields follow TensorFlow's rules: a field in double quotes may hold the delimiter
and doubled quotes (``"a ""b"",c"``); an empty field, or one equal to ``na_value``, takes
its column's default, and a column without one (its ``record_defaults`` entry a dtype or
an empty tensor) makes such a record an InvalidArgumentError naming the field and the
record. Column types are ``float32``, ``float64``, ``int32``, ``int64`` and ``string``.

>>> import os, tempfile
>>> import tapeflow as tf
>>> path = os.path.join(tempfile.mkdtemp(), "pets.csv")
>>> with open(path, "w") as f:
...     _ = f.write("name,legs,weight\\ncat,4,4.5\\n\\"ibis, sacred\\",2,\\n")
>>> for line in tf.data.TextLineDataset(path).skip(1):
...     print(line.numpy())
b'cat,4,4.5'
b'"ibis, sacred",2,'
>>> ds = tf.data.experimental.CsvDataset(path, [tf.string, tf.int32, 0.0], header=True)
>>> for name, legs, weight in ds:
...     print(name.numpy(), legs.numpy(), weight.numpy())
b'cat' 4 4.5
b'ibis, sacred' 2 0.0
>>> print(tf.io.decode_csv(["1,x", "2,"], [[0], ["?"]])[1])
tf.Tensor([b'x' b'?'], shape=(2,), dtype=string)
"""

from __future__ import annotations

import collections
import glob as _glob
import io as _pyio
import os
import re
import zlib

import numpy as np

from .. import dtypes as _dt
from ..errors import (FailedPreconditionError, InvalidArgumentError, InvalidTypeError,
                      NotFoundError, PermissionDeniedError, UnimplementedError)
from ..runtime import context as _ctx
from ..runtime.dispatch import constant
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..tracing.control_flow import py_function
from ..tracing.signatures import TensorSpec
from .dataset import AUTOTUNE, UNKNOWN_CARDINALITY, Dataset, int_arg, interleave, to_host

__all__ = ["TextLineDataset", "CsvDataset", "make_csv_dataset", "decode_csv"]

#: the column types of CSV data, as TensorFlow allows
_CSV_DTYPES = (_dt.float32, _dt.float64, _dt.int32, _dt.int64, _dt.string)
_INT_RE = re.compile(rb"\s*[+-]?[0-9]+\s*")
_INT_RANGE = {_dt.int32: (-2 ** 31, 2 ** 31 - 1), _dt.int64: (-2 ** 63, 2 ** 63 - 1)}
_COMPRESSIONS = ("", "GZIP", "ZLIB")


# --- file names and lines ------------------------------------------------------------------

def local_path(p, where):
    """``p`` (str, bytes, os.PathLike, ``file://``) as a local path str; remote schemes are
    refused (``tf.io.gfile`` and the file datasets share it)."""
    if isinstance(p, (bytes, np.bytes_)):
        p = os.fsdecode(bytes(p))
    if not isinstance(p, (str, os.PathLike)):
        raise InvalidTypeError(f"{where}: expected a path (a file name: str, bytes, "
                               f"os.PathLike or a string tensor), got {type(p).__name__} {p!r}")
    p = os.fspath(p)
    if "://" in p and not p.startswith("file://"):
        raise UnimplementedError(f"{where}({p!r}): only local paths are supported (no "
                                 f"{p.split('://')[0]}:// file system in tapeflow)")
    return p[len("file://"):] if p.startswith("file://") else p


def _paths(filenames, where):
    """``filenames`` (a path, a list of them, a string tensor or array of rank <= 1) as a
    list of str; a Dataset of file names stays one (read when the dataset is iterated)."""
    if isinstance(filenames, Dataset):
        return filenames
    if isinstance(filenames, (Tensor, Variable, np.ndarray)):
        a = to_host(filenames, where)
        if a.dtype.kind not in "OSU" or a.ndim > 1:
            raise InvalidArgumentError(
                f"{where}: filenames must be a string scalar or vector, got "
                f"{a.dtype}{list(a.shape)}")
        filenames = a.reshape(-1).tolist()
    elif not isinstance(filenames, (list, tuple)):
        filenames = [filenames]
    return [local_path(p, where) for p in filenames]


def _iter_paths(paths, where):
    if isinstance(paths, Dataset):
        for el in paths._elements():
            yield local_path(np.asarray(el).reshape(()).item(), where)
    else:
        yield from paths


def _compression(compression_type, where):
    c = compression_type
    if isinstance(c, (Tensor, np.ndarray)):
        c = np.asarray(c).reshape(()).item()
    if isinstance(c, bytes):
        c = c.decode()
    c = "" if c is None else c
    if not isinstance(c, str) or c.upper() not in _COMPRESSIONS:
        raise InvalidArgumentError(f"{where}: compression_type must be None, '', 'GZIP' or "
                                   f"'ZLIB', got {compression_type!r}")
    return c.upper()


#: compressed bytes read from a file at a time, and the decompressed bytes kept in memory
_CHUNK = 1 << 16


class _Inflate(_pyio.RawIOBase):
    """The decompressed bytes of a ZLIB (``wbits`` 15) or GZIP (31) file, read as a stream:
    a ``readinto`` never inflates more than it is asked for (``max_length``; the input left
    over waits in ``unconsumed_tail``), so memory stays bounded however well the data
    compresses. Streams one after the other (gzip members) are read as one. An empty file
    is empty; one that ends inside a stream is an EOFError. Wrap it in an
    ``io.BufferedReader`` for ``read(n)``, ``readline`` and iteration by lines."""

    def __init__(self, f, wbits):
        super().__init__()
        self._f, self._wbits = f, wbits
        self._z, self._in, self._fed = zlib.decompressobj(wbits), b"", False

    def readable(self):
        return True

    def readinto(self, b):
        n = len(b)
        while n:
            if self._z.eof:                              # a next stream, or the end
                rest = self._z.unused_data or self._f.read(_CHUNK)
                if not rest:
                    return 0
                self._z, self._in = zlib.decompressobj(self._wbits), rest
            out = self._z.decompress(self._in, n)
            self._in = self._z.unconsumed_tail
            if out:
                b[:len(out)] = out
                return len(out)
            if not self._in and not self._z.eof:
                self._in = self._f.read(_CHUNK)
                if not self._in:
                    if not self._fed:
                        return 0                         # an empty file: no data
                    raise EOFError("the compressed data ends before its end-of-stream "
                                   "marker (a truncated file)")
                self._fed = True
        return 0

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


def _open(path, compression, buffer_size, where):
    """The file at ``path`` as a binary stream of its (decompressed) bytes; NotFoundError,
    FailedPreconditionError (a directory) or PermissionDeniedError when it cannot be
    opened. Compressed data is read as it is needed (see ``_Inflate``)."""
    try:
        f = open(path, "rb", buffering=buffer_size if buffer_size and buffer_size > 0 else -1)
    except FileNotFoundError:
        raise NotFoundError(f"{where}: {path}: No such file or directory; give the path of "
                            "an existing local file") from None
    except IsADirectoryError:
        raise FailedPreconditionError(f"{where}: {path}: Is a directory; give the path of a "
                                      "file") from None
    except PermissionError:
        raise PermissionDeniedError(f"{where}: {path}: permission denied") from None
    if not compression:
        return f
    return _pyio.BufferedReader(_Inflate(f, 31 if compression == "GZIP" else 15), _CHUNK)


def _lines(path, compression, buffer_size, where):
    """The lines of a file as bytes, without their newline (nor a ``\\r`` before it)."""
    with _open(path, compression, buffer_size, where) as f:
        try:
            for line in f:
                if line.endswith(b"\n"):
                    line = line[:-1]
                    if line.endswith(b"\r"):
                        line = line[:-1]
                yield line
        except (OSError, EOFError, zlib.error) as e:    # a broken gzip stream
            raise InvalidArgumentError(f"{where}: cannot read {path} as {compression or 'text'}"
                                       f": {e}") from None


def _cycle(n_reads):
    n = int_arg(n_reads, "num_parallel_reads", "num_parallel_reads", 1)
    if n == AUTOTUNE:
        return 0                      # every file at once
    if n < 1:
        raise InvalidArgumentError(f"num_parallel_reads must be >= 1 or AUTOTUNE, got {n_reads}")
    return n


def _scalar(b):
    a = np.empty((), object)
    a[()] = b
    return a


class FileDataset(Dataset):
    """A dataset of the items of files (lines, records), read in order or
    ``num_parallel_reads`` at a time, one item from each in turn: ``TextLineDataset`` and
    ``TFRecordDataset``. Subclasses set ``_where`` (their name, for errors) and ``_read``
    (``(path, compression, buffer_size, where) -> iterable of bytes``)."""

    _where = "FileDataset"

    def __init__(self, filenames, compression_type=None, buffer_size=None,
                 num_parallel_reads=None, name=None):
        self._paths = _paths(filenames, self._where)
        self._compression = _compression(compression_type, self._where)
        self._buffer = int_arg(buffer_size, "buffer_size", self._where)
        self._cycle_length = _cycle(num_parallel_reads)

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        return TensorSpec((), _dt.string)

    def _file_items(self, path):
        for item in type(self)._read(path, self._compression, self._buffer, self._where):
            yield _scalar(item)

    def _elements(self):
        paths = _iter_paths(self._paths, self._where)
        if self._cycle_length == 1:
            for p in paths:
                yield from self._file_items(p)
        else:
            yield from interleave(paths, self._file_items, self._cycle_length)


class TextLineDataset(FileDataset):
    """The lines of text files, each a ``tf.string`` scalar without its newline.

    ``filenames``: a path, a list of paths, a string tensor of them or a Dataset of file
    names; files are read in order, or ``num_parallel_reads`` (> 1, or ``AUTOTUNE``: all)
    at a time, taking one line from each in turn. ``compression_type``: ``None``,
    ``"GZIP"`` or ``"ZLIB"``. A missing file is a NotFoundError when it is read, as in
    TensorFlow (the dataset may be made before the file is written).
    """

    _tf_name = "TextLineDatasetV2"
    _where = "TextLineDataset"
    _read = staticmethod(_lines)


# --- CSV records -----------------------------------------------------------------------------

def _split_quoted(line, delim, rec, where):
    """The fields of a record with quotes (TensorFlow's rules: a quoted field may hold the
    delimiter and ``""``; an unquoted one no quote)."""
    fields, i, n, d = [], 0, len(line), len(delim)
    while True:
        if line[i:i + 1] == b'"':
            buf, i = bytearray(), i + 1
            while True:
                j = line.find(b'"', i)
                if j < 0:
                    raise InvalidArgumentError(f"{where}: record {rec} has a quoted field "
                                               f"without its closing quote: {line!r}")
                buf += line[i:j]
                if line[j + 1:j + 2] == b'"':
                    buf += b'"'
                    i = j + 2
                    continue
                i = j + 1
                break
            if i < n and line[i:i + d] != delim:
                raise InvalidArgumentError(
                    f"{where}: in record {rec}, a quoted field has to end with a quote "
                    f"followed by the delimiter or the end of the record: {line!r}")
            fields.append(bytes(buf))
        else:
            j = line.find(delim, i)
            end = n if j < 0 else j
            if b'"' in line[i:end]:
                raise InvalidArgumentError(
                    f"{where}: in record {rec}, an unquoted field cannot have quotes inside "
                    f"({line!r}); quote the field, or pass use_quote_delim=False")
            fields.append(line[i:end])
            i = end
        if i >= n:
            return fields
        i += d
        if i == n:
            fields.append(b"")
            return fields


def _split(line, delim, quotes, rec, where):
    if not quotes or b'"' not in line:
        return line.split(delim)
    return _split_quoted(line, delim, rec, where)


def _parse_field(field, dtype, default, col, rec, na_value, where):
    """One CSV field as a value of ``dtype`` (``default`` where it is empty or NA)."""
    if field == b"" or field == na_value:
        if default is None:
            raise InvalidArgumentError(
                f"{where}: field {col} is required but missing in record {rec}; give the "
                "column a default in record_defaults (a value instead of a dtype)")
        return default
    if dtype is _dt.string:
        return field
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        if _INT_RE.fullmatch(field) and lo <= int(field) <= hi:
            return int(field)
    elif b"_" not in field:
        try:
            return float(field)
        except ValueError:
            pass
    raise InvalidArgumentError(f"{where}: field {col} in record {rec} is not a valid "
                               f"{dtype.name}: {field.decode(errors='replace')}")


def _columns(record_defaults, where, dtypes_allowed):
    """``record_defaults`` as ``[(dtype, default or None)]``: each entry a dtype
    (required column, where allowed), an empty tensor (required) or a one-value tensor."""
    if isinstance(record_defaults, (Tensor, np.ndarray)) or not isinstance(
            record_defaults, (list, tuple)) or not record_defaults:
        raise InvalidTypeError(f"{where}: record_defaults must be a non-empty list with one "
                               f"entry per column, got {record_defaults!r}")
    cols = []
    for i, d in enumerate(record_defaults):
        if isinstance(d, _dt.DType) or (isinstance(d, type) and issubclass(d, np.generic)):
            if not dtypes_allowed:
                raise InvalidTypeError(
                    f"{where}: record_defaults[{i}] is the dtype {d!r}; give a tensor: [] "
                    "(an empty list, float32) for a required column, or [value] for a default")
            dt, default = _dt.as_dtype(d), None
        else:
            a = to_host(d, f"{where}: record_defaults[{i}]")
            if a.size > 1:
                raise InvalidArgumentError(
                    f"{where}: record_defaults[{i}] has {a.size} values; give one default "
                    "value per column (or none, for a required column)")
            dt = _dt.as_dtype(a.dtype)
            default = a.reshape(-1)[0] if a.size else None
            default = default.item() if isinstance(default, np.generic) else default
            if dt is _dt.string and default is not None:
                default = bytes(default)
        if dt not in _CSV_DTYPES:
            raise InvalidArgumentError(
                f"{where}: record_defaults[{i}] has dtype {dt.name}; CSV columns are "
                "float32, float64, int32, int64 or string")
        cols.append((dt, default))
    return cols


def _text_arg(v, what, where):
    if isinstance(v, bytes):
        return v
    if not isinstance(v, str):
        raise InvalidTypeError(f"{where}: {what} must be a str, got {type(v).__name__} {v!r}")
    return v.encode()


def _col_numbers(v, what, where):
    a = np.asarray(to_host(v, f"{where}: {what}"))
    if a.dtype.kind not in "iu":
        raise InvalidTypeError(f"{where}: {what} must be a list of column numbers, got "
                               f"{v!r}"[:200])
    return [int(c) for c in a.reshape(-1)]


def _select(select_cols, n, where):
    if select_cols is None:
        return None
    cols = _col_numbers(select_cols, "select_cols", where)
    if any(c < 0 for c in cols) or any(b <= a for a, b in zip(cols, cols[1:])):
        raise InvalidArgumentError(f"{where}: select_cols must be non-negative and increasing, "
                                   f"got {cols}")
    if len(cols) != n:
        raise InvalidArgumentError(f"{where}: select_cols has {len(cols)} columns but "
                                   f"record_defaults has {n}; give one default per selected "
                                   "column")
    return cols


class _Parser:
    """Parses records into columns: the options of decode_csv / CsvDataset, checked."""

    def __init__(self, columns, field_delim, use_quote_delim, na_value, select_cols, where):
        self.where = where
        self.columns = columns
        self.delim = _text_arg(field_delim, "field_delim", where)
        if len(self.delim) != 1:
            raise InvalidArgumentError(f"{where}: field_delim must be one character, got "
                                       f"{field_delim!r}")
        self.quotes = bool(use_quote_delim)
        self.na = _text_arg(na_value, "na_value", where)
        self.select = _select(select_cols, len(columns), where)

    def fields(self, line, rec):
        """The selected fields of record ``line`` (bytes), checked for their number."""
        fields = _split(line, self.delim, self.quotes, rec, self.where)
        n = len(self.columns)
        if self.select is None:
            if len(fields) != n:
                raise InvalidArgumentError(f"{self.where}: expected {n} fields but record "
                                           f"{rec} has {len(fields)}: {line!r}")
            return fields
        if len(fields) <= self.select[-1]:
            raise InvalidArgumentError(
                f"{self.where}: record {rec} has {len(fields)} fields, fewer than select_cols "
                f"needs ({self.select[-1] + 1}): {line!r}")
        return [fields[c] for c in self.select]

    def parse(self, line, rec):
        fields = self.fields(line, rec)
        cols = self.select or range(len(fields))
        return [_parse_field(f, dt, default, c, rec, self.na, self.where)
                for f, (dt, default), c in zip(fields, self.columns, cols)]


def _decode(parser, records):
    """Eager decode_csv: ``records`` (a string tensor) -> one tensor per column."""
    a = to_host(records, "decode_csv: records")
    flat = a.reshape(-1)
    rows = [parser.parse(bytes(r), i) for i, r in enumerate(flat)]
    out = []
    for j, (dt, _) in enumerate(parser.columns):
        col = np.empty(len(rows), object) if dt is _dt.string else np.empty(
            len(rows), dt.as_numpy_dtype)
        for i, row in enumerate(rows):
            col[i] = row[j]
        out.append(constant(col.reshape(a.shape), dtype=dt, device="cpu:0"))
    return out


def decode_csv(records, record_defaults, field_delim=",", use_quote_delim=True, na_value="",
               select_cols=None, name=None):
    """Parse CSV ``records`` (a string tensor of any shape, one record each) into one tensor
    per column, shaped like ``records``.

    ``record_defaults``: one entry per column (per selected column with ``select_cols``):
    ``[value]`` (the column's dtype and its default for an empty or ``na_value`` field)
    or ``[]``/an empty tensor (a required float32 column; ``tf.constant([], tf.int64)``
    for another dtype). Runs on the host (strings live there); inside ``tf.function`` a
    node that parses at every call.

    >>> import tapeflow as tf
    >>> legs, name = tf.io.decode_csv(tf.constant(["4;cat", ";bird"]), [[2], [""]],
    ...                               field_delim=";")
    >>> print(legs, name.numpy())
    tf.Tensor([4 2], shape=(2,), dtype=int32) [b'cat' b'bird']
    """
    parser = _Parser(_columns(record_defaults, "decode_csv", False), field_delim,
                     use_quote_delim, na_value, select_cols, "decode_csv")
    if not isinstance(records, (Tensor, Variable)):
        records = constant(records, device="cpu:0")
    if records.dtype is not _dt.string:
        raise InvalidArgumentError(f"decode_csv: records must be a string tensor, got "
                                   f"{records.dtype.name}{list(records.shape)}")
    if _ctx.tracing[0] and _ctx.thread_tracer.tracer is not None:
        return list(py_function(lambda r: _decode(parser, r), [records],
                                [dt for dt, _ in parser.columns]))
    return _decode(parser, records)


class CsvDataset(Dataset):
    """The records of CSV files, each a tuple of scalars (one per column, or per
    ``select_cols`` column; ``exclude_cols`` drops columns instead).

    ``record_defaults``: per column a dtype (a required column: an empty field is an
    InvalidArgumentError), or a value or ``[value]`` (the column's dtype and default).
    ``header=True`` skips the first line of each file. Files as for
    :class:`TextLineDataset`.
    """

    _tf_name = "CsvDatasetV2"

    def __init__(self, filenames, record_defaults, compression_type=None, buffer_size=None,
                 header=False, field_delim=",", use_quote_delim=True, na_value="",
                 select_cols=None, exclude_cols=None, name=None):
        where = "CsvDataset"
        if select_cols is not None and exclude_cols is not None:
            raise InvalidArgumentError(f"{where}: give select_cols or exclude_cols, not both")
        self._parser = _Parser(_columns(record_defaults, where, True), field_delim,
                               use_quote_delim, na_value, select_cols, where)
        self._exclude = None if exclude_cols is None else set(
            _col_numbers(exclude_cols, "exclude_cols", where))
        self._paths = _paths(filenames, where)
        self._compression = _compression(compression_type, where)
        self._buffer = int_arg(buffer_size, "buffer_size", where)
        self._header = bool(header)
        self._cycle_length = 1
        self._ignore_errors = False

    def _cardinality(self):
        return UNKNOWN_CARDINALITY

    def _element_spec(self):
        return tuple(TensorSpec((), dt) for dt, _ in self._parser.columns)

    def _file_records(self, path):
        parser, types = self._parser, [dt.as_numpy_dtype for dt, _ in self._parser.columns]
        lines = _lines(path, self._compression, self._buffer, "CsvDataset")
        if self._header:
            next(lines, None)
        for rec, line in enumerate(lines):
            try:
                if self._exclude is not None:
                    n = len(_split(line, parser.delim, parser.quotes, rec, parser.where))
                    parser.select = [c for c in range(n) if c not in self._exclude]
                    if len(parser.select) != len(types):
                        raise InvalidArgumentError(
                            f"CsvDataset: record {rec} of {path} has {n} fields: without "
                            f"exclude_cols, {len(parser.select)}, where record_defaults has "
                            f"{len(types)}")
                values = parser.parse(line, rec)
            except InvalidArgumentError:
                if self._ignore_errors:
                    continue
                raise
            yield tuple(_scalar(v) if t is object else np.array(v, t)
                        for v, t in zip(values, types))

    def _elements(self):
        paths = _iter_paths(self._paths, "CsvDataset")
        if self._cycle_length == 1:
            for p in paths:
                yield from self._file_records(p)
        else:
            yield from interleave(paths, self._file_records, self._cycle_length)


# --- make_csv_dataset ------------------------------------------------------------------------

def _glob_files(file_pattern, where):
    patterns = file_pattern if isinstance(file_pattern, (list, tuple)) else [file_pattern]
    files = []
    for p in patterns:
        p = local_path(p, where)
        files.extend(sorted(_glob.glob(p)))
    if not files:
        raise NotFoundError(f"{where}: no files match {file_pattern!r}")
    return files


def _infer_type(field, na, current):
    """The least general CSV type (int32, int64, float32, string) that holds ``field`` and
    every field seen before (``current``), as TensorFlow infers column types."""
    if field == b"" or field == na:
        return current
    order = (_dt.int32, _dt.int64, _dt.float32, _dt.string)
    for dt in order[order.index(current):]:
        if dt is _dt.string:
            return dt
        try:
            _parse_field(field, dt, 0, 0, 0, na, "")
            return dt
        except InvalidArgumentError:
            continue
    return _dt.string


def _inferred_defaults(files, parser, n_cols, header, n_rows):
    types = [_dt.int32] * n_cols
    seen = 0
    for path in files:
        lines = _lines(path, "", None, "make_csv_dataset")
        if header:
            next(lines, None)
        for rec, line in enumerate(lines):
            if seen >= n_rows:
                return types
            seen += 1
            for j, f in enumerate(parser.fields(line, rec)):
                types[j] = _infer_type(f, parser.na, types[j])
    return types


_ZERO = {_dt.int32: 0, _dt.int64: 0, _dt.float32: 0.0, _dt.float64: 0.0, _dt.string: b""}


def _column_names(files, column_names, header, field_delim, use_quote_delim):
    where = "make_csv_dataset"
    if column_names is None:
        if not header:
            raise InvalidArgumentError(f"{where}: give column_names when the files have no "
                                       "header (header=False)")
        first = next(_lines(files[0], "", None, where), b"")
        names = [f.decode() for f in _split(first, _text_arg(field_delim, "field_delim", where),
                                            use_quote_delim, 0, where)]
    else:
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in column_names]
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"{where}: column names must be unique, got {names}")
    return names


def _selected(select_columns, names):
    where = "make_csv_dataset"
    if select_columns is None:
        return list(range(len(names)))
    sel = list(select_columns)
    if all(isinstance(c, (int, np.integer)) for c in sel):
        idx = sorted(int(c) for c in sel)
        if idx and not 0 <= idx[0] <= idx[-1] < len(names):
            raise InvalidArgumentError(f"{where}: select_columns {sel} out of range for "
                                       f"{len(names)} columns")
        return idx
    missing = [c for c in sel if c not in names]
    if missing:
        raise InvalidArgumentError(f"{where}: select_columns {missing} are not columns of the "
                                   f"files; the columns are {names}")
    return sorted(names.index(c) for c in sel)


class _ToDict(Dataset):
    """Batches of CSV columns as ``(OrderedDict of features, label)`` (or the dict)."""

    _tf_name = "_MapDataset"

    def __init__(self, input_dataset, names, label):
        self._input, self._names, self._label = input_dataset, names, label

    def _cardinality(self):
        return self._input._cardinality()

    def _pack(self, columns):
        feats = collections.OrderedDict(zip(self._names, columns))
        if self._label is None:
            return feats
        label = feats.pop(self._label)
        return feats, label

    def _element_spec(self):
        return self._pack(self._input.element_spec)

    def _elements(self):
        for el in self._input._elements():
            yield self._pack(el)


def make_csv_dataset(file_pattern, batch_size, column_names=None, column_defaults=None,
                     label_name=None, select_columns=None, field_delim=",",
                     use_quote_delim=True, na_value="", header=True, num_epochs=None,
                     shuffle=True, shuffle_buffer_size=10000, shuffle_seed=None,
                     prefetch_buffer_size=None, num_parallel_reads=None, sloppy=False,
                     num_rows_for_inference=100, compression_type=None, ignore_errors=False,
                     encoding="utf-8"):
    """Batches of CSV records as ``OrderedDict``s of columns (``(features, label)`` with
    ``label_name``), from the files matching ``file_pattern`` (a glob, or a list).

    Column names come from the first file's header (or ``column_names``); column types
    from ``column_defaults`` (a value or a dtype per selected column) or inferred from
    the first ``num_rows_for_inference`` records as TensorFlow does (int32, then int64,
    float32, string; an empty field then reads as 0 or ``b""``). ``num_epochs=None``
    repeats forever (and drops the last short batch); ``shuffle`` shuffles the files
    and the records (``shuffle_seed``); ``ignore_errors`` skips records that do not parse.
    """
    where = "make_csv_dataset"
    if int_arg(batch_size, "batch_size", where, required=True) < 1:
        raise InvalidArgumentError(f"{where}: batch_size must be a positive int, got "
                                   f"{batch_size!r}")
    files = _glob_files(file_pattern, where)
    names = _column_names(files, column_names, header, field_delim, use_quote_delim)
    cols = _selected(select_columns, names)
    sel_names = [names[c] for c in cols]
    if label_name is not None and label_name not in sel_names:
        raise InvalidArgumentError(f"{where}: label_name {label_name!r} must be one of the "
                                   f"columns: {sel_names}")
    select = None if len(cols) == len(names) else cols
    if column_defaults is None:
        probe = _Parser([(_dt.string, b"")] * len(cols), field_delim, use_quote_delim,
                        na_value, select, where)
        types = _inferred_defaults(files, probe, len(cols), header,
                                   int_arg(num_rows_for_inference, "num_rows_for_inference",
                                            where))
        column_defaults = [_ZERO[t] if t is not _dt.string else "" for t in types]
        column_defaults = [constant(d, dtype=t, device="cpu:0")
                           for d, t in zip(column_defaults, types)]
    elif len(column_defaults) != len(cols):
        raise InvalidArgumentError(f"{where}: column_defaults has {len(column_defaults)} "
                                   f"entries for {len(cols)} columns {sel_names}")
    files_ds = Dataset.from_tensor_slices(np.array([f.encode() for f in files], object))
    if shuffle:
        files_ds = files_ds.shuffle(len(files), shuffle_seed)
    ds = CsvDataset(files_ds, list(column_defaults), compression_type=compression_type,
                    header=header, field_delim=field_delim, use_quote_delim=use_quote_delim,
                    na_value=na_value, select_cols=select)
    ds._cycle_length = _cycle(num_parallel_reads)
    ds._ignore_errors = bool(ignore_errors)
    if shuffle:
        ds = ds.shuffle(int_arg(shuffle_buffer_size, "shuffle_buffer_size", where),
                        shuffle_seed)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    ds = _ToDict(ds.batch(batch_size, drop_remainder=num_epochs is None), sel_names, label_name)
    return ds.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)

