"""The checkpoint's files: names, format constants, and which files are its own.

A checkpoint deletes or replaces only files it wrote, recognised by name AND content:
its index ``<prefix>.index.json`` (a regular file whose JSON says format FORMAT) and
its data files ``<prefix>.safetensors`` / ``<prefix>.safetensors.1`` (regular files
whose safetensors header says format FORMAT and checkpoint <prefix>). A symbolic link,
a FIFO, a directory, a user's file, a file another prefix wrote, or whatever a stale
or planted index names (``important.txt``, ``../x``, an absolute path) is left alone.
"""

from __future__ import annotations

import json
import os
import re

from ... import errors as _errors
from ...errors import FailedPreconditionError
from .. import files as _files

FORMAT = "tapeflow-checkpoint"
VERSION = 1
INDEX_SUFFIX = ".index.json"
DATA_SUFFIX = ".safetensors"
#: the second data-file name, used by every second save of one prefix
ALT_DATA_SUFFIX = ".safetensors.1"
STATE_FILE = "checkpoint"
#: the largest index and state file read (a real index is ~150 bytes per tensor)
MAX_INDEX_BYTES = 64 << 20
MAX_STATE_BYTES = 1 << 20


DataLossError = _errors.DataLossError


def _st():
    try:
        import safetensors.numpy as st
    except ImportError as e:      # pragma: no cover - a declared dependency
        raise ImportError("tapeflow checkpoints need the 'safetensors' package "
                          "(pip install 'safetensors>=0.4')") from e
    return st


def _base_name(name):
    head, sep, tail = name.rpartition(":")
    return head if sep and tail.isdigit() else name


def _json_or_none(raw):
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


_FOREIGN = "foreign"
#: how many data-file names a prefix may try when others are taken by foreign files
_MAX_DATA_NAMES = 8
#: the largest safetensors header read to check whose a data file is
_MAX_HEADER_BYTES = 100 << 20


def _data_names(base):
    """The data-file names of prefix ``base``: ``<base>.safetensors``, then
    ``<base>.safetensors.1``, ``.2``, ... (a re-save takes the first one that is not the
    current index's and is free or the checkpoint's own). No other prefix can own one
    of them: what follows the last ``.safetensors`` fixes the prefix (the name
    ``<prefix>.1.safetensors`` used before issue 30 was also the first data file of
    the prefix ``<prefix>.1``)."""
    return [base + DATA_SUFFIX] + [f"{base}{ALT_DATA_SUFFIX[:-1]}{i}"
                                   for i in range(1, _MAX_DATA_NAMES)]


def _is_data_name(name, base):
    if name == base + DATA_SUFFIX:
        return True
    head = base + DATA_SUFFIX + "."
    return name.startswith(head) and re.fullmatch(r"[1-9][0-9]{0,2}", name[len(head):]) is not None


def _existing_index(index_path):
    """What is at ``index_path``: None (nothing), ``(index dict, os.stat_result)`` for a
    tapeflow checkpoint index (a regular file, not a symbolic link, whose JSON names
    our format), else ``_FOREIGN``."""
    if not os.path.lexists(index_path):
        return None
    try:
        f, size = _files.open_regular(index_path, "checkpoint index", follow_symlinks=False)
    except FileNotFoundError:
        return None
    except (OSError, DataLossError):
        return _FOREIGN
    with f:
        st = os.fstat(f.fileno())
        if size > MAX_INDEX_BYTES:
            return _FOREIGN
        raw = f.read(MAX_INDEX_BYTES + 1)
    index = _json_or_none(raw)
    if not (isinstance(index, dict) and index.get("format") == FORMAT):
        return _FOREIGN
    return index, st


def _own_data_file(directory, name, base):
    """``(path, os.stat_result)`` when ``name`` is a data file the checkpoint ``base``
    wrote -- one of its two names, a regular file (not a symbolic link) whose
    safetensors header says ``{"format": FORMAT, "checkpoint": base}`` -- else None."""
    if not isinstance(name, str) or not _is_data_name(name, base):
        return None
    path = os.path.join(directory, name)
    try:
        f, size = _files.open_regular(path, "checkpoint data file", follow_symlinks=False)
    except (OSError, DataLossError):
        return None
    with f:
        st = os.fstat(f.fileno())
        head = f.read(8)
        if len(head) < 8:
            return None
        n = int.from_bytes(head, "little")
        if n > min(size - 8, _MAX_HEADER_BYTES):
            return None
        header = _json_or_none(f.read(n))
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not (isinstance(meta, dict) and meta.get("format") == FORMAT
            and meta.get("checkpoint") == base):
        return None
    return path, st


def _new_data_name(directory, base, old_name):
    """The data-file name for a new save of ``base``: one of its two names, not the one
    the current index uses, and free or holding this checkpoint's own old data."""
    for name in _data_names(base):
        if name == old_name:
            continue
        path = os.path.join(directory, name)
        if not os.path.lexists(path) or _own_data_file(directory, name, base) is not None:
            return name
    raise FailedPreconditionError(
        f"Cannot write checkpoint '{os.path.join(directory, base)}': its data-file names "
        f"'{base}{DATA_SUFFIX}' and '{base}{ALT_DATA_SUFFIX[:-1]}1' to "
        f"'...{_MAX_DATA_NAMES - 1}' in '{directory or '.'}' are all taken by files that are "
        "not this checkpoint's data (symbolic links, or other files); tapeflow never "
        "replaces a file it did not write. Choose another prefix, or move those files away.")


def _delete_checkpoint(path):
    """Delete the checkpoint ``path``: its index if it is a tapeflow index, then the
    data file that index names if it is this checkpoint's own (by name and header).
    Anything else -- a symbolic link, a user's file, a file the index names elsewhere
    -- is left in place."""
    directory, base = os.path.split(path)
    old = _existing_index(path + INDEX_SUFFIX)
    if old is None or old is _FOREIGN:
        return
    index, st = old
    own = _own_data_file(directory, index.get("data_file"), base)
    _files.unlink_same(path + INDEX_SUFFIX, st)
    if own is not None:
        _files.unlink_same(*own)
