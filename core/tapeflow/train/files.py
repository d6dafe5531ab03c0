"""Reading files tapeflow did not write itself: checkpoints, their state files and
data sets may come from anywhere, so every read here

* opens only **regular files** -- a FIFO, a device (``/dev/zero``), a socket or a
  directory is refused on the opened descriptor (``O_NONBLOCK``, so opening a FIFO
  never blocks), with no window between a check and the open;
* reads at most a **declared size**: the caller says how many bytes the file may
  hold (from an index or a header), and a larger file is refused before it is read;
* keeps paths read from a file **inside a directory**: :func:`confine` resolves
  symbolic links and ``..`` and refuses anything that lands outside.

Errors are :class:`~tapeflow.errors.DataLossError` (a file that is not what it
claims) and :class:`~tapeflow.errors.PermissionDeniedError` (a path outside the
directory), each naming the file.

>>> import os, tempfile
>>> from tapeflow.train import files
>>> d = tempfile.mkdtemp()
>>> with open(os.path.join(d, "a"), "wb") as f:
...     _ = f.write(b"abc")
>>> files.read_regular(os.path.join(d, "a"), limit=16)
b'abc'
>>> files.confine(d, os.path.join(d, "..", "etc"), source="a state file")
Traceback (most recent call last):
...
tapeflow.errors.PermissionDeniedError: a state file names ...
"""

from __future__ import annotations

import os
import stat

from ..errors import DataLossError, PermissionDeniedError

__all__ = ["open_regular", "read_regular", "confine", "plain_name", "unlink_same"]

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_regular(path, what="file", follow_symlinks=True):
    """Open ``path`` for binary reading if it is a regular file (after symlinks;
    with ``follow_symlinks=False`` a symlink is refused, as ``OSError``);
    returns ``(file object, size in bytes)``. FileNotFoundError passes through."""
    if not follow_symlinks and os.path.islink(path):     # (and O_NOFOLLOW, where it exists)
        raise OSError(f"'{path}' is a symbolic link")
    fd = os.open(path, _FLAGS if follow_symlinks else _FLAGS | _NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else
                    "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                    "a directory" if stat.S_ISDIR(st.st_mode) else
                    "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise DataLossError(
                f"The {what} '{path}' is {kind}, not a regular file; tapeflow reads only "
                "regular files (replace it with the real file)")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f, st.st_size


def read_regular(path, limit, what="file", exact=None):
    """The bytes of the regular file ``path``, refused when it holds more than
    ``limit`` bytes (or, with ``exact``, any other number of bytes than that)."""
    f, size = open_regular(path, what)
    with f:
        if exact is not None and size != exact:
            raise DataLossError(
                f"The {what} '{path}' has {size} bytes, {exact} were declared (truncated, "
                "or replaced by another file)")
        if size > limit:
            raise DataLossError(
                f"The {what} '{path}' has {size} bytes, more than the {limit} it may hold; "
                "refusing to read it")
        data = f.read(limit + 1)           # the file may have grown since fstat
    if len(data) > limit or (exact is not None and len(data) != exact):
        raise DataLossError(f"The {what} '{path}' changed size while it was read")
    return data


def confine(directory, path, source):
    """``path`` (read from ``source``, a file) if it resolves inside ``directory``
    after symlinks and ``..``; else PermissionDeniedError naming both."""
    root = os.path.realpath(directory or ".")
    real = os.path.realpath(path)
    if os.path.commonpath([root, real]) != root:
        raise PermissionDeniedError(
            f"{source} names {path!r}, which resolves to '{real}', outside the directory "
            f"'{root}'; tapeflow never reads, overwrites or deletes files outside it. The "
            "file was tampered with or copied from elsewhere: fix or delete it.")
    return path


def plain_name(name, source):
    """``name`` (read from ``source``) if it is a plain file name: no directory part,
    not ``.`` or ``..``; else DataLossError."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name
            or "\\" in name or os.sep in name or "\0" in name):
        raise DataLossError(f"{source} names an invalid file {name!r} (a plain file name "
                            "in the same directory is expected)")
    return name


def unlink_same(path, st):
    """Delete ``path`` only if it is still the regular file (not a symlink) that
    ``st`` (an ``os.fstat`` of the file that was checked) describes: a file swapped in
    since the check is left alone. Returns whether it deleted it."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        return False
    try:
        os.unlink(path)
    except OSError:
        return False
    return True
