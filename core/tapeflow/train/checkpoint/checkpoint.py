"""Checkpoints: ``tf.train.Checkpoint`` (object-based), the seeds' ``tfe.Saver`` (by
variable name) and ``tfe.restore_variables_on_create``, ``tf.train.latest_checkpoint``
and ``tf.train.CheckpointManager``.

Format. A checkpoint ``<prefix>`` is two files next to each other:

* ``<prefix>.safetensors`` -- the tensors, in the `safetensors` format (a JSON
  header and raw little-endian data: loading it never runs code, unlike pickle);
* ``<prefix>.index.json`` -- the index: format and version, the data file's name,
  size and SHA-256, and one entry per tensor: ``{"dtype", "shape", "kind", "name"}``
  (object-based checkpoints key tensors by their path in the object graph,
  ``model/dense1/kernel``; optimizer slots by the path of their variable,
  ``model/dense1/kernel/.OPTIMIZER_SLOT/optimizer/m``; ``Saver`` keys by name).

A directory also holds a ``checkpoint`` state file naming the latest checkpoint in
TensorFlow's text form (``model_checkpoint_path: "ckpt-3"``), which
``latest_checkpoint(dir)`` reads.

Atomic saves: every file is written to a temporary file in the same directory,
flushed, fsynced and renamed over its final name, and the directory is fsynced; the
data file goes first, then the index, then the state file. A crash at any point leaves
the previous checkpoint complete and ``latest_checkpoint`` naming it. (Saving twice to
the same prefix alternates between two data-file names, ``<prefix>.safetensors`` and
``<prefix>.safetensors.1`` -- or ``.2``, ... when a foreign file holds one of them -- so
the old index keeps its data until the new index replaces it.)

Only its own files: a save, a re-save of a prefix, ``CheckpointManager`` and ``Saver``
rotation delete or replace only files a checkpoint wrote, recognised by name (derived
from the prefix) and by content (an index whose JSON names this format; a data file
whose safetensors header names this format and this prefix). Whatever else a stale or
planted index names -- a user's file, ``..``, an absolute path, a symbolic link -- is
left in place, and a file at one of the checkpoint's names that is not the checkpoint's
(a user's ``ckpt.index.json``, a symbolic link) makes the save fail with
``FailedPreconditionError`` instead of being replaced. ``CheckpointManager`` rotates only
its own ``<checkpoint_name>-<n>`` checkpoints. The temporary file of a killed save
(``.<name>.<pid>.<random>.tmp``) is never deleted by a later save.

Validated restores: the index is parsed, the data file's size and SHA-256 checked, the
safetensors header checked against the index, and every tensor's shape and dtype
compared with its variable -- all before the first assignment. A missing checkpoint
raises ``NotFoundError``, a truncated or corrupt one ``DataLossError``, a mismatch
``InvalidArgumentError`` naming each variable with both shapes; in every case no
variable changes.

Deferred restoration: ``Checkpoint.restore`` assigns the variables that exist and keeps
the rest pending on the deepest object of their path that exists. When that object
creates its variables it calls ``restore_deferred(obj)`` (Layers do it after
``build()``), and the pending values are assigned then; optimizer slots restore when the
optimizer creates them.

>>> import os, tempfile
>>> import tapeflow as tf
>>> x = tf.Variable(10.)
>>> checkpoint = tf.train.Checkpoint(x=x)
>>> _ = x.assign(2.)
>>> d = tempfile.mkdtemp()
>>> path = checkpoint.save(os.path.join(d, "ckpt"))
>>> os.path.basename(path), sorted(os.listdir(d))
('ckpt-1', ['checkpoint', 'ckpt-1.index.json', 'ckpt-1.safetensors'])
>>> _ = x.assign(11.)
>>> _ = checkpoint.restore(tf.train.latest_checkpoint(d))
>>> x
<tf.Variable 'Variable:0' shape=() dtype=float32, numpy=2.0>
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import threading
import weakref

import numpy as np

from ...runtime import dtypes as _dt
from ...runtime import errors as _errors
from .. import files as _files
from ...runtime import variable as _variable
from ...runtime.errors import (FailedPreconditionError, InvalidArgumentError, InvalidTypeError,
                              NotFoundError)
from ...runtime.dispatch import constant as _constant
from ...runtime.variable import Variable
from ... import runtime as _runtime_mod

__all__ = ["Checkpoint", "CheckpointManager", "CheckpointLoadStatus", "Saver",
           "latest_checkpoint", "restore_variables_on_create", "restore_deferred",
           "list_variables", "load_checkpoint", "DataLossError"]

FORMAT = "tapeflow-checkpoint"
VERSION = 1
INDEX_SUFFIX = ".index.json"
DATA_SUFFIX = ".safetensors"
#: the second data-file name, used by every second save of one prefix
ALT_DATA_SUFFIX = ".safetensors.1"
STATE_FILE = "checkpoint"
_SLOT = ".OPTIMIZER_SLOT"
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


# --- variable-creation hooks (restore_variables_on_create) ---------------------------

_suspend = threading.local()


def _hooks():
    """The list of callables the runtime runs with every new Variable."""
    return _variable._creation_hooks


@contextlib.contextmanager
def _suspend_creation_hooks():
    """Variables made inside (the Checkpoint's save counter) skip our hooks."""
    _suspend.depth = getattr(_suspend, "depth", 0) + 1
    try:
        yield
    finally:
        _suspend.depth -= 1


def _suspended():
    return getattr(_suspend, "depth", 0) > 0


# --- the object graph ----------------------------------------------------------------

def _flatten_child(name, value, out):
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _flatten_child(f"{name}/{i}", v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _flatten_child(f"{name}/{k}", v, out)
    elif value is not None:
        out.append((name, value))


def _children(obj):
    fn = getattr(obj, "_trackable_children", None)
    if fn is None or isinstance(obj, Variable):
        return []
    out = []
    for name, value in fn().items():
        _flatten_child(str(name), value, out)
    return out


def _walk(items):
    """Breadth-first over ``[(path, object)]``: ``({path: Variable}, {path: object})``;
    an object reachable twice keeps its first (shortest) path."""
    variables, objects, seen = {}, {}, set()
    queue = list(items)
    i = 0
    while i < len(queue):
        path, obj = queue[i]
        i += 1
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Variable):
            variables[path] = obj
            continue
        objects[path] = obj
        queue.extend((f"{path}/{name}", child) for name, child in _children(obj))
    return variables, objects


def _is_trackable(value):
    if isinstance(value, Variable) or hasattr(value, "_trackable_children"):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_trackable(v) for v in value)
    if isinstance(value, dict):
        return all(_is_trackable(v) for v in value.values())
    return False


def _gather(root):
    """``{key: (Variable, info)}`` of everything reachable from ``root``."""
    variables, objects = _walk(_children(root))
    entries = {p: (v, {"kind": "variable", "name": v.name}) for p, v in variables.items()}
    paths = {id(v): p for p, v in variables.items()}
    for opath, obj in objects.items():
        slots = getattr(obj, "_checkpoint_slots", None)
        if slots is None:
            continue
        for primary, slot_name, slot_var in slots():
            p = paths.get(id(primary))
            if p is None:        # the variable is not in this checkpoint: neither is its slot
                continue
            entries[f"{p}/{_SLOT}/{opath}/{slot_name}"] = (slot_var, {
                "kind": "slot", "name": slot_var.name, "variable": p, "optimizer": opath,
                "slot": slot_name})
    return entries


# --- files ---------------------------------------------------------------------------

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


def _host_array(var):
    a = np.asarray(var.numpy())          # (ascontiguousarray would make 0-d arrays 1-d)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _write(path, entries, kind):
    """Write the checkpoint ``path`` (data, then index). Returns ``path``."""
    path = os.fspath(path)
    directory, base = os.path.split(path)
    if not base:
        raise InvalidArgumentError(
            f"Checkpoint path {path!r} names a directory; give a file prefix "
                         "such as os.path.join(directory, 'ckpt')")
    if directory:
        os.makedirs(directory, exist_ok=True)
    index_path = path + INDEX_SUFFIX
    # Overwriting a checkpoint: the old index must be one (never replace a user's file
    # of that name), and the data goes under the other of the two data-file names, so
    # the old index keeps pointing at intact data until the new index replaces it.
    old = _existing_index(index_path)
    if old is _FOREIGN:
        raise FailedPreconditionError(
            f"Cannot write checkpoint '{path}': '{index_path}' exists and is not a tapeflow "
            "checkpoint index (a symbolic link, not a regular file, or not an index); "
            "tapeflow never replaces a file it did not write. Choose another prefix, or "
            "move that file away.")
    old_name = old[0].get("data_file") if old is not None else None
    data_name = _new_data_name(directory, base, old_name)
    arrays, tensors = {}, {}
    for key, (var, info) in entries.items():
        a = _host_array(var)
        arrays[key] = a
        tensors[key] = dict(info, dtype=var.dtype.name, shape=list(a.shape))
    # the data file says whose it is: only a file whose header names this prefix is
    # ever deleted or replaced by a later save (see _own_data_file)
    blob = _st().save(arrays, metadata={"format": FORMAT, "checkpoint": base})
    _atomic_write(os.path.join(directory, data_name), blob)
    index = {"format": FORMAT, "version": VERSION, "kind": kind, "data_file": data_name,
             "data_bytes": len(blob), "data_sha256": hashlib.sha256(blob).hexdigest(),
             "tensors": tensors}
    _atomic_write(index_path, json.dumps(index, indent=1).encode("utf-8"))
    if isinstance(old_name, str) and old_name != data_name:
        own = _own_data_file(directory, old_name, base)
        if own is not None:
            _files.unlink_same(*own)
    return path


# --- which files are a checkpoint's own ----------------------------------------------
#
# A checkpoint deletes or replaces only files it wrote, recognised by name AND content:
# its index ``<prefix>.index.json`` (a regular file whose JSON says format FORMAT) and
# its data files ``<prefix>.safetensors`` / ``<prefix>.safetensors.1`` (regular files
# whose safetensors header says format FORMAT and checkpoint <prefix>). A symbolic link,
# a FIFO, a directory, a user's file, a file another prefix wrote, or whatever a stale
# or planted index names (``important.txt``, ``../x``, an absolute path) is left alone.

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


def _json_or_none(raw):
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


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


class _Loaded:
    """A checkpoint read and validated: ``tensors`` (index entries) and ``arrays``."""

    def __init__(self, path, index, arrays):
        self.path = path
        self.index = index
        self.kind = index.get("kind", "object")
        self.tensors = index["tensors"]
        self.arrays = arrays

    def by_name(self):
        """``{variable name without ':0': key}`` (names that occur once)."""
        if self.kind == "names":
            return {k: k for k in self.tensors}
        out, dup = {}, set()
        for key, meta in self.tensors.items():
            name = meta.get("name")
            if not name:
                continue
            name = _base_name(name)
            if name in out:
                dup.add(name)
            out[name] = key
        for name in dup:
            del out[name]
        return out


def _loss(path, what):
    return DataLossError(f"Checkpoint '{path}' {what}; nothing was restored.")


def _check_index(index, path):
    ok = (isinstance(index, dict) and index.get("format") == FORMAT
          and isinstance(index.get("version"), int)
          and isinstance(index.get("data_file"), str)
          and isinstance(index.get("data_bytes"), int)
          and isinstance(index.get("data_sha256"), str)
          and isinstance(index.get("tensors"), dict))
    if not ok:
        raise _loss(path, "has an index that is not a tapeflow checkpoint index (corrupt?)")
    if index["version"] > VERSION:
        raise _loss(path, f"was written by a newer tapeflow (format version "
                          f"{index['version']} > {VERSION})")
    name = index["data_file"]
    if not name or name in (".", "..") or "/" in name or "\\" in name or os.sep in name \
            or "\0" in name:
        raise _loss(path, f"has an index naming an invalid data file {name!r}")
    if index["data_bytes"] < 0:
        raise _loss(path, f"has an index declaring {index['data_bytes']} bytes of data")
    for key, meta in index["tensors"].items():
        if not (isinstance(meta, dict) and isinstance(meta.get("dtype"), str)
                and isinstance(meta.get("shape"), list)
                and all(isinstance(d, int) and d >= 0 for d in meta["shape"])):
            raise _loss(path, f"has a corrupt index entry for {key!r}")


def _read(path) -> _Loaded:
    """Read and validate the whole checkpoint ``path`` (raises before any assignment)."""
    if path is None:
        raise InvalidArgumentError("No checkpoint path given (latest_checkpoint() found none?)")
    path = os.fspath(path)
    if path.endswith(INDEX_SUFFIX):
        path = path[:-len(INDEX_SUFFIX)]
    index_path = path + INDEX_SUFFIX
    try:
        raw = _files.read_regular(index_path, MAX_INDEX_BYTES, "checkpoint index")
    except (FileNotFoundError, NotADirectoryError):
        hint = ""
        if os.path.isdir(path):
            hint = (f" ('{path}' is a directory: pass tf.train.latest_checkpoint('{path}') "
                    "or a checkpoint prefix)")
        raise NotFoundError(f"Unsuccessful checkpoint restore: no checkpoint at '{path}' "
                            f"(no file '{index_path}'){hint}") from None
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _loss(path, f"has a corrupt or truncated index '{index_path}' ({e})") from None
    except RecursionError:
        # (JSON nested thousands deep: a real index nests 4 levels)
        raise _loss(path, f"has a corrupt index '{index_path}' (JSON nested too deeply to "
                          "be a checkpoint index)") from None
    _check_index(index, path)
    data_path = os.path.join(os.path.dirname(index_path), index["data_file"])
    # a data file that is a symlink out of the directory is refused, as is one that is
    # not a regular file (a FIFO would block, /dev/zero would never end) or whose size
    # is not the index's -- all before reading a byte of it
    _files.confine(os.path.dirname(index_path), data_path,
                   f"The checkpoint index '{index_path}'")
    try:
        blob = _files.read_regular(data_path, index["data_bytes"], "checkpoint data file",
                                   exact=index["data_bytes"])
    except FileNotFoundError:
        raise _loss(path, f"is incomplete: its data file '{data_path}' is missing") from None
    except DataLossError as e:
        raise _loss(path, f"is truncated or corrupt: {e.message}") from None
    if hashlib.sha256(blob).hexdigest() != index["data_sha256"]:
        raise _loss(path, f"is corrupt: the SHA-256 of '{data_path}' does not match its index")
    try:
        arrays = _st().load(blob)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise _loss(path, f"has a corrupt data file '{data_path}' ({e})") from None
    for key, meta in index["tensors"].items():
        a = arrays.get(key)
        if a is None:
            raise _loss(path, f"is corrupt: tensor {key!r} of the index is not in the data file")
        try:
            dt = _dt.as_dtype(a.dtype).name
        except Exception:
            dt = str(a.dtype)
        if dt != meta["dtype"] or list(a.shape) != meta["shape"]:
            raise _loss(path, f"is corrupt: tensor {key!r} is {dt}{list(a.shape)} in the data "
                              f"file but {meta['dtype']}{meta['shape']} in the index")
    return _Loaded(path, index, arrays)


def _mismatch(what, var, array, meta_dtype):
    """A message when ``array`` cannot be assigned to ``var``, else None."""
    vshape = tuple(var.shape)
    if getattr(var, "_shape_fixed", True) and tuple(array.shape) != vshape:
        return (f"  {what}: the checkpoint has shape {tuple(array.shape)}, the variable "
                f"'{var.name}' has shape {vshape}")
    if meta_dtype != var.dtype.name:
        return (f"  {what}: the checkpoint has dtype {meta_dtype}, the variable "
                f"'{var.name}' has dtype {var.dtype.name}")
    return None


def _raise_mismatch(path, errors):
    raise InvalidArgumentError(
        f"Checkpoint '{path}' does not match the variables it is restored into; nothing was "
        "restored:\n" + "\n".join(errors))


def _assign_all(pairs):
    """``[(Variable, numpy array)]``: convert every value first (on the variable's device),
    then assign -- a failure while converting leaves every variable unchanged."""
    values = [(var, _constant(a, dtype=var.dtype, device=var.device)) for var, a in pairs]
    for var, value in values:
        var.assign(value)


# --- the state file ------------------------------------------------------------------

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


def _write_state(directory, latest, all_paths):
    directory = directory or "."
    _check_state_file(directory)

    def rel(p):
        d = os.path.dirname(p) or "."
        if os.path.abspath(d) == os.path.abspath(directory):
            return os.path.basename(p)
        return p

    lines = [f"model_checkpoint_path: {json.dumps(rel(latest))}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(rel(p))}" for p in all_paths]
    _atomic_write(os.path.join(directory, STATE_FILE), ("\n".join(lines) + "\n").encode())


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the latest checkpoint saved in ``checkpoint_dir`` (from its
    ``checkpoint`` state file), or None when there is none (or its files are gone)."""
    state = _read_state(os.fspath(checkpoint_dir), latest_filename)
    if state is None:
        return None
    path = state[0]
    return path if os.path.exists(path + INDEX_SUFFIX) else None


def list_variables(ckpt_dir_or_file):
    """``[(key, shape), ...]`` of a checkpoint (a prefix or a directory)."""
    loaded = load_checkpoint(ckpt_dir_or_file)
    return sorted((k, list(m["shape"])) for k, m in loaded.tensors.items())


def load_checkpoint(ckpt_dir_or_file):
    """Read and validate a checkpoint; ``.tensors`` is its index, ``.arrays`` its values."""
    path = os.fspath(ckpt_dir_or_file)
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise NotFoundError(f"No checkpoint found in directory '{path}'")
        path = latest
    return _read(path)


# --- restoring (with deferral) -------------------------------------------------------

_PENDING: dict = {}          # id(object) -> [weakref-like, [(session, path), ...]]
_pending_lock = threading.RLock()


def _register(obj, session, path):
    with _pending_lock:
        entry = _PENDING.get(id(obj))
        if entry is None or entry[0]() is not obj:
            key = id(obj)
            try:
                ref = weakref.ref(obj, lambda r, k=key: _drop(k, r))
            except TypeError:
                ref = (lambda o: (lambda: o))(obj)
            entry = _PENDING[key] = [ref, []]
        for s, p in entry[1]:
            if s is session and p == path:
                return
        entry[1].append((session, path))


def _drop(key, ref):
    with _pending_lock:
        entry = _PENDING.get(key)
        if entry is not None and entry[0] is ref:
            del _PENDING[key]


def restore_deferred(obj):
    """Assign the checkpointed values still pending for ``obj``'s variables.

    Layers call this right after ``build()`` created their variables (and before they
    are used), so ``Checkpoint.restore`` on a model that was not built yet restores it
    when it builds, as in TensorFlow. Returns at once when nothing is pending.
    """
    if not _PENDING:
        return
    with _pending_lock:
        entry = _PENDING.get(id(obj))
        if entry is None or entry[0]() is not obj:
            return
        del _PENDING[id(obj)]
    for session, path in entry[1]:
        if not session.superseded:
            session.restore_subtree(obj, path)


class _Session:
    """One ``Checkpoint.restore``: the checkpoint's values and which are still unused."""

    def __init__(self, loaded, root):
        self.loaded = loaded
        self.root = root
        self.superseded = False
        tensors = loaded.tensors
        self.var_keys = {k for k, m in tensors.items() if m.get("kind", "variable") == "variable"}
        self.slots_of: dict = {}
        for k, m in tensors.items():
            if m.get("kind") == "slot":
                self.slots_of.setdefault(m.get("variable"), []).append(k)
        self.unconsumed = set(tensors)
        self.handed_off: set = set()
        self.objects: dict = {}       # path -> object seen in a walk (optimizers for slots)

    def _plan(self, variables, objects):
        self.objects.update(objects)
        tensors, arrays = self.loaded.tensors, self.loaded.arrays
        assign, defer, errors = [], [], []
        for path, var in variables.items():
            if path in self.var_keys and path in self.unconsumed:
                err = _mismatch(path, var, arrays[path], tensors[path]["dtype"])
                if err:
                    errors.append(err)
                else:
                    assign.append((var, path))
            for key in self.slots_of.get(path, ()):
                if key not in self.unconsumed or key in self.handed_off:
                    continue
                meta = tensors[key]
                opt = self.objects.get(meta.get("optimizer"))
                if opt is None:
                    continue
                get_slot = getattr(opt, "get_slot", None)
                slot = get_slot(var, meta.get("slot")) if get_slot is not None else None
                if slot is not None:
                    err = _mismatch(key, slot, arrays[key], meta["dtype"])
                    if err:
                        errors.append(err)
                    else:
                        assign.append((slot, key))
                elif hasattr(opt, "_defer_slot_restoration"):
                    err = _mismatch(key, var, arrays[key], meta["dtype"])
                    if err:
                        errors.append(err)
                    else:
                        defer.append((opt, var, meta.get("slot"), key))
        if errors:
            _raise_mismatch(self.loaded.path, errors)
        return assign, defer

    def apply(self, variables, objects):
        assign, defer = self._plan(variables, objects)
        arrays = self.loaded.arrays
        _assign_all([(var, arrays[key]) for var, key in assign])
        for _, key in assign:
            self.unconsumed.discard(key)
        for opt, var, slot_name, key in defer:
            self.handed_off.add(key)
            opt._defer_slot_restoration(var, slot_name, arrays[key],
                                        functools.partial(self.unconsumed.discard, key))
        self._release_if_done()

    def _release_if_done(self):
        if not (self.unconsumed - self.handed_off):
            self.loaded.arrays = {}     # every value is in its variable: free the copy

    def register_pending(self, objects, under=None):
        """Park each unused variable value on the deepest existing object of its path."""
        prefix = None if under is None else (under + "/" if under else "")
        for key in sorted(self.unconsumed & self.var_keys):
            if prefix is not None and not key.startswith(prefix):
                continue
            parts = key.split("/")
            target = None
            for i in range(len(parts) - 1, 0, -1):
                p = "/".join(parts[:i])
                if p in objects:
                    target = (objects[p], p)
                    break
            if target is None:
                target = (self.root, "")
            _register(target[0], self, target[1])

    def restore_subtree(self, obj, path):
        prefix = path + "/" if path else ""
        variables, objects = _walk([(prefix + n, c) for n, c in _children(obj)])
        objects[path] = obj
        self.apply(variables, objects)
        self.register_pending(objects, under=path)

    def restore_root(self):
        if self.loaded.kind == "names":
            self._restore_by_name()
            return
        variables, objects = _walk(_children(self.root))
        objects[""] = self.root
        self.apply(variables, objects)
        self.register_pending(objects)

    def _restore_by_name(self):
        by_name = self.loaded.by_name()
        variables, _ = _walk(_children(self.root))
        tensors, arrays = self.loaded.tensors, self.loaded.arrays
        assign, errors = [], []
        for path, var in variables.items():
            key = by_name.get(_base_name(var.name))
            if key is None or key not in self.unconsumed:
                continue
            err = _mismatch(f"{path} (name {key!r})", var, arrays[key], tensors[key]["dtype"])
            if err:
                errors.append(err)
            else:
                assign.append((var, key))
        if errors:
            _raise_mismatch(self.loaded.path, errors)
        _assign_all([(var, arrays[key]) for var, key in assign])
        for _, key in assign:
            self.unconsumed.discard(key)
        self._release_if_done()


class CheckpointLoadStatus:
    """What ``Checkpoint.restore`` returns: checks on how the checkpoint matched."""

    def __init__(self, session):
        self._session = session

    def _pending(self):
        return sorted(self._session.unconsumed)

    def assert_consumed(self):
        """Every value of the checkpoint was restored and every variable of the object
        graph had a value; raises AssertionError naming what did not match."""
        pending = self._pending()
        if pending:
            raise AssertionError("Unresolved values in the checkpoint (their variables do not "
                                 f"exist yet, or are gone): {pending}")
        self.assert_existing_objects_matched()
        return self

    def assert_existing_objects_matched(self):
        """Every variable that exists now had a value in the checkpoint."""
        s = self._session
        entries = _gather(s.root)
        counter = getattr(s.root, "_save_counter", None)
        entries = {k: e for k, e in entries.items() if e[0] is not counter}
        if s.loaded.kind == "names":
            names = s.loaded.by_name()
            missing = [p for p, (v, _) in entries.items() if _base_name(v.name) not in names]
        else:
            missing = [k for k in entries if k not in s.loaded.tensors]
        if missing:
            raise AssertionError(f"Variables with no value in checkpoint "
                                 f"'{s.loaded.path}': {sorted(missing)}")
        return self

    def assert_nontrivial_match(self):
        s = self._session
        if len(s.unconsumed) == len(s.loaded.tensors):
            raise AssertionError(f"Nothing was restored from checkpoint '{s.loaded.path}'")
        return self

    def expect_partial(self):
        return self

    def run_restore_ops(self, session=None):
        """Restore now whatever matches among the variables created since."""
        self._session.restore_root()

    initialize_or_restore = run_restore_ops


class InitializationOnlyStatus:
    """``Checkpoint.restore(None)`` (no checkpoint yet): nothing to restore."""

    def assert_consumed(self):
        raise AssertionError("No checkpoint was restored (restore(None))")

    assert_existing_objects_matched = assert_consumed
    assert_nontrivial_match = assert_consumed

    def expect_partial(self):
        return self

    def run_restore_ops(self, session=None):
        pass

    initialize_or_restore = run_restore_ops


class Checkpoint:
    """Groups trackable objects (models, layers, optimizers, Variables) for saving
    and restoring: ``tf.train.Checkpoint(optimizer=opt, model=model, step=step)``.

    ``save(prefix)`` writes ``<prefix>-<n>`` (n counts saves, restored with the rest)
    and returns it; ``restore(path)`` restores it (``None``: nothing, for a first run).
    """

    _RESERVED = ("save", "restore", "write", "read", "save_counter")

    def __init__(self, **kwargs):
        object.__setattr__(self, "_objects", {})
        object.__setattr__(self, "_save_counter", None)
        object.__setattr__(self, "_last_session", None)
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name in self._RESERVED:
            raise InvalidArgumentError(
                f"'{name}' is reserved by tf.train.Checkpoint; use another name")
        if not _is_trackable(value):
            raise InvalidArgumentError(
                f"Checkpoint was expecting a trackable object for '{name}' (a tf.Variable, or "
                f"an object with _trackable_children(): model, layer, optimizer), got "
                f"{type(value).__name__} {value!r}")
        self._objects[name] = value
        object.__setattr__(self, name, value)

    def _trackable_children(self):
        children = dict(self._objects)
        if self._save_counter is not None:
            children["save_counter"] = self._save_counter
        return children

    @property
    def save_counter(self):
        """Number of ``save()`` calls (an int64 Variable, saved and restored)."""
        if self._save_counter is None:
            dtypes = _runtime_mod.dtypes
            with _suspend_creation_hooks():
                sc = Variable(0, trainable=False, name="save_counter", dtype=dtypes.int64,
                              device="cpu:0")
            object.__setattr__(self, "_save_counter", sc)
            restore_deferred(self)
        return self._save_counter

    def write(self, file_prefix):
        """Write exactly ``file_prefix`` (no counter, no state file). Returns it."""
        return _write(file_prefix, _gather(self), "object")

    def save(self, file_prefix):
        """Save to ``<file_prefix>-<save_counter>`` and record it as the directory's latest
        checkpoint. Returns the path (seed: ``checkpoint.save('./ckpt/')`` -> ``'./ckpt/-1'``)."""
        _check_state_file(os.path.dirname(os.fspath(file_prefix)))
        counter = self.save_counter
        counter.assign_add(1)
        path = f"{os.fspath(file_prefix)}-{int(counter)}"
        try:
            self.write(path)
        except BaseException:
            counter.assign_sub(1)
            raise
        _write_state(os.path.dirname(path), path, [path])
        return path

    def restore(self, save_path):
        """Restore from ``save_path`` (validated first; nothing changes on error).
        Values whose variables do not exist yet are restored when they are created.
        ``save_path=None`` does nothing (no checkpoint yet)."""
        if save_path is None:
            return InitializationOnlyStatus()
        loaded = _read(save_path)
        self.save_counter      # noqa: B018  (exists before matching, so it is restored)
        session = _Session(loaded, self)
        old = self._last_session
        session.restore_root()
        if old is not None:
            old.superseded = True
        object.__setattr__(self, "_last_session", session)
        return CheckpointLoadStatus(session)

    read = restore


class CheckpointManager:
    """Keeps the ``max_to_keep`` most recent checkpoints of ``checkpoint`` in
    ``directory`` (``<directory>/<checkpoint_name>-<n>``), deleting older ones."""

    def __init__(self, checkpoint, directory, max_to_keep=5, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt"):
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._prefix = os.path.join(self._directory, checkpoint_name)
        state = _read_state(self._directory)
        self._checkpoints = []
        if state is not None:
            paths = state[1] or [state[0]]
            # only this manager's own checkpoints (<checkpoint_name>-<n> in its directory)
            # are rotated: any other path the state file lists is left alone
            self._checkpoints = [p for p in paths if self._manages(p)
                                 and os.path.exists(p + INDEX_SUFFIX)]

    def _manages(self, path):
        directory, base = os.path.split(path)
        own = re.fullmatch(re.escape(os.path.basename(self._prefix)) + r"-\d+", base)
        return own is not None and (os.path.realpath(directory or ".")
                                    == os.path.realpath(self._directory or "."))

    @property
    def directory(self):
        return self._directory

    @property
    def checkpoints(self):
        return list(self._checkpoints)

    @property
    def latest_checkpoint(self):
        return self._checkpoints[-1] if self._checkpoints else None

    def save(self, checkpoint_number=None):
        _check_state_file(self._directory)
        if checkpoint_number is None:
            counter = self._checkpoint.save_counter
            counter.assign_add(1)
            checkpoint_number = int(counter)
        path = f"{self._prefix}-{int(checkpoint_number)}"
        self._checkpoint.write(path)
        self._checkpoints = [p for p in self._checkpoints if p != path] + [path]
        doomed = []
        if self._max_to_keep is not None and len(self._checkpoints) > self._max_to_keep:
            doomed = self._checkpoints[:-self._max_to_keep]
            self._checkpoints = self._checkpoints[-self._max_to_keep:]
        _write_state(self._directory, path, self._checkpoints)
        for p in doomed:
            _delete_checkpoint(p)
        return path


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


# --- name-based: the seeds' tfe.Saver and restore_variables_on_create ----------------

def _named(var_list):
    if isinstance(var_list, dict):
        items = [(_base_name(str(k)), v) for k, v in var_list.items()]
    else:
        flat = []
        _flatten_child("", list(var_list), flat)
        items = [(_base_name(v.name), v) for _, v in flat]
    out = {}
    for name, var in items:
        if not isinstance(var, Variable):
            raise InvalidTypeError(f"Saver: {var!r} is not a tf.Variable")
        if name in out and out[name] is not var:
            raise InvalidArgumentError(
                f"Saver: at least two variables have the same name: {name!r}. Give them "
                "distinct names (tf.Variable(..., name=...)) or pass a dict {name: variable}.")
        out[name] = var
    return out


class Saver:
    """Saves and restores a list of Variables by name (seed: ``tfe.Saver([x, y])``).

    >>> import os, tempfile
    >>> import tapeflow as tf
    >>> x = tf.Variable(10., name='x'); y = tf.Variable(5., name='y')
    >>> saver = tf.Saver([x, y])
    >>> _ = x.assign(2.)
    >>> prefix = os.path.join(tempfile.mkdtemp(), 'ckpt')
    >>> saver.save(prefix) == prefix
    True
    >>> _ = x.assign(11.)
    >>> float(x + y)
    16.0
    >>> saver.restore(prefix)
    >>> float(x + y)
    7.0
    """

    def __init__(self, var_list, max_to_keep=5):
        self._vars = _named(var_list)
        self._max_to_keep = max_to_keep
        self._last = []

    @property
    def last_checkpoints(self):
        return list(self._last)

    def save(self, file_prefix, global_step=None, sess=None):
        """Write ``file_prefix`` (``<file_prefix>-<global_step>`` when given) and record it
        as the directory's latest checkpoint. Returns the path."""
        path = os.fspath(file_prefix)
        if global_step is not None:
            path = f"{path}-{int(global_step)}"
        _check_state_file(os.path.dirname(path))
        _write(path, {n: (v, {"kind": "variable", "name": v.name})
                      for n, v in self._vars.items()}, "names")
        self._last = [p for p in self._last if p != path] + [path]
        doomed = []
        if self._max_to_keep and len(self._last) > self._max_to_keep:
            doomed, self._last = self._last[:-self._max_to_keep], self._last[-self._max_to_keep:]
        _write_state(os.path.dirname(path), path, self._last)
        for p in doomed:
            _delete_checkpoint(p)
        return path

    def restore(self, file_prefix, sess=None):
        """Restore every variable from ``file_prefix``: all are checked (present, same
        shape and dtype) before any is assigned."""
        loaded = _read(file_prefix)
        by_name = loaded.by_name()
        missing = [n for n in self._vars if n not in by_name]
        if missing:
            have = sorted(by_name)
            raise NotFoundError(
                f"Key(s) {missing} not found in checkpoint '{loaded.path}' (it has "
                f"{have[:20]}{' ...' if len(have) > 20 else ''}); nothing was restored")
        errors, pairs = [], []
        for name, var in self._vars.items():
            key = by_name[name]
            err = _mismatch(name, var, loaded.arrays[key], loaded.tensors[key]["dtype"])
            if err:
                errors.append(err)
            else:
                pairs.append((var, loaded.arrays[key]))
        if errors:
            _raise_mismatch(loaded.path, errors)
        _assign_all(pairs)


@contextlib.contextmanager
def restore_variables_on_create(save_path, map_func=None):
    """Variables created inside take their value from the checkpoint ``save_path``,
    looked up by name (``map_func(name)`` maps a variable's name to the checkpoint's).
    ``save_path=None`` (no checkpoint yet) does nothing. A variable whose name is not in
    the checkpoint raises NotFoundError; a shape mismatch InvalidArgumentError.
    """
    if save_path is None:
        yield
        return
    if map_func is not None and not callable(map_func):
        raise InvalidArgumentError("map_func must be callable")
    loaded = _read(save_path)
    by_name = loaded.by_name()

    def hook(var):
        if _suspended():
            return
        name = _base_name(var.name)
        wanted = map_func(name) if map_func is not None else name
        key = by_name.get(wanted)
        if key is None:
            raise NotFoundError(
                f"Variable '{name}' was created inside restore_variables_on_create but "
                f"'{wanted}' is not in checkpoint '{loaded.path}'")
        err = _mismatch(wanted, var, loaded.arrays[key], loaded.tensors[key]["dtype"])
        if err:
            _raise_mismatch(loaded.path, [err])
        _assign_all([(var, loaded.arrays[key])])

    hooks = _hooks()
    hooks.append(hook)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            hooks.remove(hook)
