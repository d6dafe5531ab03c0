"""Atomic file replacement: a crash at any point leaves the old file or the new one,
never a mix (temporary file in the same directory, flush + fsync, rename, fsync of the
directory). The temporary file of a killed write (``.<name>.<pid>.<random>.tmp``) is
left in place for the user: a later write never deletes it."""

from __future__ import annotations

import contextlib
import os
import secrets

#: Test hook: called as ``_before_rename(tmp_path, final_path)`` just before each
#: atomic rename (the crash tests kill the process there).
_before_rename = None


def _fsync_dir(directory):
    try:
        fd = os.open(directory or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(final, data: bytes):
    """Write ``data`` to ``final`` atomically: temporary file in the same directory,
    flush + fsync, rename, fsync the directory."""
    directory, base = os.path.split(final)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if _before_rename is not None:
            _before_rename(tmp, final)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)
