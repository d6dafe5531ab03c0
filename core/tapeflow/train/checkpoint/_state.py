"""The directory's ``checkpoint`` state file, in TensorFlow's text form
(``model_checkpoint_path: "ckpt-3"``): read (every path confined to the directory),
checked before it is replaced, written atomically; ``latest_checkpoint`` reads it."""

from __future__ import annotations

import json
import os
import re

from ...errors import FailedPreconditionError
from .. import files as _files
from ._atomic import _atomic_write
from ._format import INDEX_SUFFIX, MAX_STATE_BYTES, STATE_FILE, DataLossError

_STATE_LINE = re.compile(r'^\s*(\w+)\s*:\s*("(?:[^"\\]|\\.)*")\s*$')


def _read_state(directory, latest_filename=None):
    """``(latest path, [all paths])`` from ``<directory>/checkpoint``, or None."""
    fname = os.path.join(directory, latest_filename or STATE_FILE)
    try:
        text = _files.read_regular(fname, MAX_STATE_BYTES, "checkpoint state file").decode(
            "utf-8")
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, UnicodeDecodeError):
        return None
    latest, everything = None, []
    for line in text.splitlines():
        m = _STATE_LINE.match(line)
        if not m:
            continue
        try:
            value = json.loads(m.group(2))
        except ValueError:
            continue
        if not os.path.isabs(value):
            value = os.path.join(directory, value)
        # the paths are deleted by rotation and read by restores: they must stay in
        # the directory (a state file listing '../victim/ckpt-1' is refused)
        _files.confine(directory, value, f"The checkpoint state file '{fname}'")
        if m.group(1) == "model_checkpoint_path":
            latest = value
        elif m.group(1) == "all_model_checkpoint_paths":
            everything.append(value)
    if latest is None:
        return None
    return latest, everything


def _check_state_file(directory):
    """Refuse (FailedPreconditionError) to replace a ``checkpoint`` file that is not a
    checkpoint state file: a symbolic link, not a regular file, or other content."""
    fname = os.path.join(directory or ".", STATE_FILE)
    if not os.path.lexists(fname):
        return
    why = None
    try:
        raw = _files.read_regular(fname, MAX_STATE_BYTES, "checkpoint state file")
        if os.path.islink(fname):
            why = "a symbolic link"
        else:
            lines = [ln for ln in raw.decode("utf-8").splitlines() if ln.strip()]
            if not all(_STATE_LINE.match(ln) for ln in lines):
                why = "not a checkpoint state file"
    except FileNotFoundError:
        return
    except (OSError, DataLossError, UnicodeDecodeError):
        why = "not a regular file, too large or not text"
    if why is not None:
        raise FailedPreconditionError(
            f"Cannot record a checkpoint in '{fname}': that file exists and is {why}; "
            "tapeflow never replaces a file it did not write. Save into another "
            "directory, or move that file away.")


def _relative(path, directory):
    """``path`` as the state file of ``directory`` records it: its base name when it is in
    ``directory``, else as given."""
    d = os.path.dirname(path) or "."
    if os.path.abspath(d) == os.path.abspath(directory):
        return os.path.basename(path)
    return path


def _write_state(directory, latest, all_paths):
    """Record ``latest`` and ``all_paths`` in ``<directory>/checkpoint`` (atomically)."""
    directory = directory or "."
    _check_state_file(directory)
    lines = [f"model_checkpoint_path: {json.dumps(_relative(latest, directory))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(_relative(p, directory))}"
              for p in all_paths]
    _atomic_write(os.path.join(directory, STATE_FILE), ("\n".join(lines) + "\n").encode())


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the latest checkpoint saved in ``checkpoint_dir`` (from its
    ``checkpoint`` state file), or None when there is none (or its files are gone)."""
    state = _read_state(os.fspath(checkpoint_dir), latest_filename)
    if state is None:
        return None
    path = state[0]
    return path if os.path.exists(path + INDEX_SUFFIX) else None
