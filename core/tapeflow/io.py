"""``tf.io`` and the file API of TensorFlow programs: ``tf.io.gfile`` (also TF 1's
``tf.gfile``).

``gfile`` works on **local paths only** (no ``gs://``, ``hdfs://`` or other remote
file systems: a path with a ``scheme://`` prefix raises UnimplementedError). Each
function has its TF 2 name and its TF 1 name: ``GFile``/``Open``/``FastGFile``,
``exists``/``Exists``, ``makedirs``/``MakeDirs``, ``mkdir``/``MkDir``,
``listdir``/``ListDirectory``, ``glob``/``Glob``, ``remove``/``Remove``,
``rmtree``/``DeleteRecursively``, ``rename``/``Rename``, ``copy``/``Copy``,
``isdir``/``IsDirectory``, ``stat``/``Stat``, ``walk``/``Walk``. Errors are
TensorFlow's: ``tf.errors.NotFoundError`` naming the path for a missing file,
``AlreadyExistsError`` (a ``FailedPreconditionError``) when a target exists,
``PermissionDeniedError``.

``GFile(name, mode)`` is a file object opened lazily (on the first read or write):
``"r"``/``"w"``/``"a"`` for text (str), with ``"b"`` for bytes; ``read(n=-1)``,
``readline()``, ``readlines()``, iteration over lines, ``write``, ``flush``,
``seek``/``tell``, ``size()``, and ``with`` closes it.

>>> import os, tempfile
>>> import tapeflow as tf
>>> d = tempfile.mkdtemp()
>>> path = os.path.join(d, "notes", "a.txt")
>>> tf.gfile.MakeDirs(os.path.dirname(path))
>>> with tf.io.gfile.GFile(path, "w") as f:
...     _ = f.write("one\\ntwo\\n")
>>> [line.strip() for line in tf.gfile.Open(path)], tf.gfile.Exists(path)
(['one', 'two'], True)
>>> tf.io.gfile.listdir(os.path.dirname(path)), tf.io.gfile.stat(path).length
(['a.txt'], 8)
>>> tf.gfile.DeleteRecursively(d)

``tf.io.decode_raw`` reads the bytes of string tensors as numbers (a string op:
:mod:`tapeflow.ops.strings`).
"""

from __future__ import annotations

import errno
import glob as _glob
import os
import shutil

from .errors import (FailedPreconditionError, InvalidArgumentError, NotFoundError,
                     PermissionDeniedError, UnimplementedError)
from .ops.strings import decode_raw  # tf.io.decode_raw (a string op: ops/strings.py)
from .data.text import decode_csv, local_path  # tf.io.decode_csv (CSV records: data/text.py)
# tf.io.parse_example and TFRecord files (data/example.py)
from .data.example import (FixedLenFeature, FixedLenSequenceFeature, RaggedFeature,
                           TFRecordCompressionType, TFRecordOptions, TFRecordWriter,
                           VarLenFeature, parse_example, parse_sequence_example,
                           parse_single_example, parse_single_sequence_example,
                           tf_record_iterator)

__all__ = ["gfile", "GFile", "AlreadyExistsError", "FileStatistics", "decode_raw",
           "decode_csv", "FixedLenFeature", "FixedLenSequenceFeature", "VarLenFeature",
           "RaggedFeature", "parse_example", "parse_single_example", "parse_sequence_example",
           "parse_single_sequence_example", "TFRecordWriter",
           "TFRecordOptions", "TFRecordCompressionType", "tf_record_iterator"]


class AlreadyExistsError(FailedPreconditionError, FileExistsError):
    """A file or directory to be made (or written over) exists already."""


class FileStatistics:
    """What ``gfile.stat`` returns: ``length`` (bytes), ``mtime_nsec``, ``is_directory``."""

    __slots__ = ("length", "mtime_nsec", "is_directory")

    def __init__(self, length, mtime_nsec, is_directory):
        self.length, self.mtime_nsec, self.is_directory = length, mtime_nsec, is_directory

    def __repr__(self):
        return (f"FileStatistics(length={self.length}, mtime_nsec={self.mtime_nsec}, "
                f"is_directory={self.is_directory})")


def _path(name, what):
    """``name`` as a local path str; remote schemes are refused (:func:`local_path`)."""
    return local_path(name, f"gfile.{what}")


def _os_error(e: OSError, what: str, path: str):
    """TensorFlow's error class for an OSError of ``what`` on ``path``."""
    msg = f"{path}; {e.strerror or e} (gfile.{what})"
    if e.errno == errno.ENOENT:
        return NotFoundError(msg)
    if e.errno == errno.EEXIST:
        return AlreadyExistsError(msg)
    if e.errno in (errno.EACCES, errno.EPERM):
        return PermissionDeniedError(msg)
    return FailedPreconditionError(msg)


class GFile:
    """A local file (``tf.io.gfile.GFile(name, mode="r")``, TF 1's ``tf.gfile.GFile``,
    ``Open`` and ``FastGFile``), opened on the first read or write."""

    def __init__(self, name, mode="r"):
        self.name = _path(name, "GFile")
        if not isinstance(mode, str) or not mode or mode.replace("b", "").replace(
                "+", "") not in ("r", "w", "a", "x"):
            raise InvalidArgumentError(f"gfile.GFile({self.name!r}): mode must be 'r', 'w', "
                                       f"'a' (with 'b' for bytes, '+'), got {mode!r}")
        self.mode = mode
        self._f = None
        if "r" in mode and not os.path.exists(self.name):       # TF checks at open
            raise NotFoundError(f"{self.name}; No such file or directory (gfile.GFile)")

    def _file(self):
        if self._f is None:
            try:
                self._f = open(self.name, self.mode,  # noqa: SIM115 - closed by close()
                               **({} if "b" in self.mode else {"encoding": "utf-8"}))
            except OSError as e:
                raise _os_error(e, "GFile", self.name) from None
        return self._f

    def read(self, n=-1):
        return self._file().read(n)

    def readline(self):
        return self._file().readline()

    def readlines(self):
        return self._file().readlines()

    def __iter__(self):
        return iter(self._file())

    def __next__(self):
        return next(self._file())

    next = __next__

    def write(self, data):
        f = self._file()
        if "b" in self.mode and isinstance(data, str):
            data = data.encode()
        elif "b" not in self.mode and isinstance(data, bytes):
            data = data.decode()
        return f.write(data)

    def flush(self):
        if self._f is not None:
            self._f.flush()

    def seek(self, offset=None, whence=0, position=None):
        return self._file().seek(position if offset is None else offset, whence)

    def tell(self):
        return self._file().tell()

    def size(self):
        """The file's length in bytes."""
        self.flush()
        return stat(self.name).length

    def seekable(self):
        return True

    def close(self):
        if self._f is not None:
            self._f.close()
            self._f = None

    @property
    def closed(self):
        return self._f is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"<gfile.GFile {self.name!r} mode={self.mode!r}>"


def exists(path) -> bool:
    """Whether a file or directory ``path`` exists."""
    return os.path.exists(_path(path, "exists"))


def isdir(path) -> bool:
    return os.path.isdir(_path(path, "isdir"))


def makedirs(path) -> None:
    """Make ``path`` and its missing parents (nothing when it is a directory already)."""
    p = _path(path, "makedirs")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as e:
        raise _os_error(e, "makedirs", p) from None


def mkdir(path) -> None:
    """Make the directory ``path``: its parent must exist, and it must not."""
    p = _path(path, "mkdir")
    try:
        os.mkdir(p)
    except OSError as e:
        raise _os_error(e, "mkdir", p) from None


def listdir(path) -> list:
    """The names in directory ``path`` (sorted; no ``.`` or ``..``)."""
    p = _path(path, "listdir")
    if not os.path.isdir(p):
        raise NotFoundError(f"{p}; not a directory or does not exist (gfile.listdir)")
    return sorted(os.listdir(p))


def glob(pattern) -> list:
    """The paths matching ``pattern`` (``*``, ``?``, ``[...]``), sorted."""
    if isinstance(pattern, (list, tuple)):
        return sorted({m for p in pattern for m in glob(p)})
    return sorted(_glob.glob(_path(pattern, "glob")))


def remove(path) -> None:
    """Delete the file ``path``."""
    p = _path(path, "remove")
    try:
        os.remove(p)
    except OSError as e:
        raise _os_error(e, "remove", p) from None


def rmtree(path) -> None:
    """Delete the directory ``path`` and everything under it."""
    p = _path(path, "rmtree")
    if not os.path.exists(p):
        raise NotFoundError(f"{p}; No such file or directory (gfile.rmtree)")
    try:
        if os.path.isdir(p):
            shutil.rmtree(p)
        else:
            os.remove(p)
    except OSError as e:
        raise _os_error(e, "rmtree", p) from None


def rename(src, dst, overwrite=False) -> None:
    """Move ``src`` to ``dst``; AlreadyExistsError when ``dst`` exists, unless
    ``overwrite``."""
    s, d = _path(src, "rename"), _path(dst, "rename")
    if not overwrite and os.path.exists(d):
        raise AlreadyExistsError(f"{d}; the target exists (gfile.rename: pass overwrite=True)")
    try:
        os.replace(s, d)
    except OSError as e:
        raise _os_error(e, "rename", s if not os.path.exists(s) else d) from None


def copy(src, dst, overwrite=False) -> None:
    """Copy the file ``src`` to ``dst``; AlreadyExistsError when ``dst`` exists, unless
    ``overwrite``."""
    s, d = _path(src, "copy"), _path(dst, "copy")
    if not overwrite and os.path.exists(d):
        raise AlreadyExistsError(f"{d}; the target exists (gfile.copy: pass overwrite=True)")
    try:
        shutil.copyfile(s, d)
    except OSError as e:
        raise _os_error(e, "copy", s if not os.path.exists(s) else d) from None


def stat(path) -> FileStatistics:
    """``FileStatistics`` of ``path`` (``length``, ``mtime_nsec``, ``is_directory``)."""
    p = _path(path, "stat")
    try:
        st = os.stat(p)
    except OSError as e:
        raise _os_error(e, "stat", p) from None
    return FileStatistics(st.st_size, st.st_mtime_ns, os.path.isdir(p))


def walk(top, topdown=True, onerror=None):
    """``(dirname, subdirectories, files)`` for every directory under ``top``, as
    ``os.walk`` (nothing for a missing ``top``)."""
    yield from os.walk(_path(top, "walk"), topdown=topdown, onerror=onerror)


class _GFileNamespace:
    """``tf.io.gfile`` and ``tf.gfile``: TF 2's names and TF 1's."""

    GFile = Open = FastGFile = GFile
    exists = Exists = staticmethod(exists)
    isdir = IsDirectory = staticmethod(isdir)
    makedirs = MakeDirs = staticmethod(makedirs)
    mkdir = MkDir = staticmethod(mkdir)
    listdir = ListDirectory = staticmethod(listdir)
    glob = Glob = staticmethod(glob)
    remove = Remove = staticmethod(remove)
    rmtree = DeleteRecursively = staticmethod(rmtree)
    rename = Rename = staticmethod(rename)
    copy = Copy = staticmethod(copy)
    stat = Stat = staticmethod(stat)
    walk = Walk = staticmethod(walk)

    def __repr__(self):
        return "<tf.io.gfile>"


gfile = _GFileNamespace()
