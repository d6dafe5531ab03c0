"""The checkpoint on disk: its files and their names, which files are its own, atomic
writes, the directory's ``checkpoint`` state file, and writing and reading (validated)
one checkpoint. What goes in a checkpoint -- the object graph -- is
:mod:`.object_graph`'s; the package's docstring describes the format for users.

Own files only. A checkpoint deletes or replaces only files it wrote, recognised by name
AND content: its index ``<prefix>.index.json`` (a regular file whose JSON says format
FORMAT) and its data files ``<prefix>.safetensors`` / ``<prefix>.safetensors.1`` (regular
files whose safetensors header says format FORMAT and checkpoint <prefix>). A symbolic
link, a FIFO, a directory, a user's file, a file another prefix wrote, or whatever a
stale or planted index names (``important.txt``, ``../x``, an absolute path) is left
alone.

Atomic writes: a crash at any point leaves the old file or the new one, never a mix
(temporary file in the same directory, flush + fsync, rename, fsync of the directory).
The temporary file of a killed write (``.<name>.<pid>.<random>.tmp``) is left in place
for the user: a later write never deletes it. A save writes the data file (whose
safetensors header names the format and the prefix), then the index, each atomically; a
re-save alternates between data-file names so the old index keeps its data until the
new index replaces it.

The state file, in TensorFlow's text form (``model_checkpoint_path: "ckpt-3"``): read
with every path confined to the directory, checked before it is replaced, written
atomically; ``latest_checkpoint`` reads it.

Reading one checkpoint is validated before any variable changes: the index parsed and
checked, the data file's size and SHA-256 compared, every tensor's dtype and shape
checked against the index (then, by :mod:`.object_graph`, against its variable).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets

import numpy as np

from ... import dtypes as _dt
from ... import errors as _errors
from ...errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
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


# --- atomic file replacement ------------------------------------------------------------

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


# --- which files are a checkpoint's own -------------------------------------------------

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


# --- the directory's ``checkpoint`` state file ------------------------------------------

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


# --- writing one checkpoint -------------------------------------------------------------

def _path_str(path, what):
    """``path`` (a str or os.PathLike) as a str; anything else is an InvalidTypeError."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise _errors.InvalidTypeError(
            f"Checkpoint {what}: expected a checkpoint path prefix (a str or os.PathLike, "
            f"e.g. os.path.join(directory, 'ckpt')), got {type(path).__name__} {path!r}")
    return os.fsdecode(path)


def _host_array(var):
    a = np.asarray(var if isinstance(var, np.ndarray) else var.numpy())
    # (ascontiguousarray would make 0-d arrays 1-d)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _write(path, entries, kind, aliases=None):
    """Write the checkpoint ``path`` (data, then index). Returns ``path``. ``entries``:
    ``{key: (Variable or NumPy array, info)}``; ``aliases``: ``{path: saved path}`` of
    objects reachable by several paths (saved once, restorable by each)."""
    path = _path_str(path, "save")
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
        if a.dtype.kind == "O":
            raise InvalidArgumentError(
                f"Cannot write checkpoint '{path}': '{key}' holds strings, which the "
                "checkpoint format (safetensors: numbers) cannot hold; keep text out of "
                "Variables (nothing was written)")
        arrays[key] = a
        dtype = _dt.as_dtype(a.dtype) if isinstance(var, np.ndarray) else var.dtype
        tensors[key] = dict(info, dtype=dtype.name, shape=list(a.shape))
    # the data file says whose it is: only a file whose header names this prefix is
    # ever deleted or replaced by a later save (see _own_data_file)
    blob = _st().save(arrays, metadata={"format": FORMAT, "checkpoint": base})
    _atomic_write(os.path.join(directory, data_name), blob)
    index = {"format": FORMAT, "version": VERSION, "kind": kind, "data_file": data_name,
             "data_bytes": len(blob), "data_sha256": hashlib.sha256(blob).hexdigest(),
             "tensors": tensors}
    if aliases:
        index["aliases"] = aliases
    _atomic_write(index_path, json.dumps(index, indent=1).encode("utf-8"))
    if isinstance(old_name, str) and old_name != data_name:
        own = _own_data_file(directory, old_name, base)
        if own is not None:
            _files.unlink_same(*own)
    return path


# --- reading one checkpoint, validated ----------------------------------------------------

#: the key TensorFlow gives a checkpoint's object graph (a serialized description; here
#: the JSON of the saved paths and aliases)
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
#: what TensorFlow appends to a Variable's path to make its key
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointReader:
    """A checkpoint read and validated (``tf.train.load_checkpoint``): ``tensors`` (its
    index entries) and ``arrays`` (its values) under tapeflow's keys, and TensorFlow's
    reader methods under TensorFlow's keys: ``get_variable_to_shape_map()``,
    ``get_variable_to_dtype_map()``, ``has_tensor(key)`` and ``get_tensor(key)``.

    TensorFlow's key of a Variable is its path and ``/.ATTRIBUTES/VARIABLE_VALUE``
    (``model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE``), of an object's state
    ``<path>/.ATTRIBUTES/<name>`` (``iterator/.ATTRIBUTES/ITERATOR_STATE``); the object
    graph is ``_CHECKPOINTABLE_OBJECT_GRAPH``. tapeflow's files key Variables by path alone
    (the format is unchanged since version 1); the reader translates, and
    ``get_tensor``/``has_tensor`` accept both spellings. A name-based checkpoint
    (``tf.train.Saver``) keys Variables by name, in both.

    >>> import os, tempfile
    >>> import tapeflow as tf
    >>> d = tempfile.mkdtemp()
    >>> _ = tf.train.Checkpoint(w=tf.Variable([1.0, 2.0])).save(os.path.join(d, "ckpt"))
    >>> reader = tf.train.load_checkpoint(d)
    >>> sorted(reader.get_variable_to_shape_map().items())
    [('_CHECKPOINTABLE_OBJECT_GRAPH', []), ('save_counter/.ATTRIBUTES/VARIABLE_VALUE', []), ('w/.ATTRIBUTES/VARIABLE_VALUE', [2])]
    >>> reader.get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE").tolist()
    [1.0, 2.0]
    """

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

    # --- TensorFlow's reader ---------------------------------------------------------------
    def tf_keys(self):
        """``{TensorFlow's key: tapeflow's key}`` (the object graph maps to None)."""
        if self.kind != "object":
            return {k: k for k in self.tensors}
        out = {OBJECT_GRAPH_KEY: None}
        for key, meta in self.tensors.items():
            out[key if meta.get("kind") == "state" else key + VALUE_SUFFIX] = key
        return out

    def _key(self, key):
        if not isinstance(key, str):
            raise _errors.InvalidTypeError(
                f"CheckpointReader: a tensor key must be a str, got {key!r}")
        keys = self.tf_keys()
        if key in keys:
            return True, keys[key]
        if key in self.tensors:
            return True, key
        return False, None

    def has_tensor(self, key):
        """Whether the checkpoint has ``key`` (TensorFlow's spelling or tapeflow's)."""
        return self._key(key)[0]

    def get_tensor(self, key):
        """The value saved under ``key``, as a NumPy array (the object graph: bytes)."""
        found, ours = self._key(key)
        if not found:
            some = sorted(self.tf_keys())[:8]
            raise NotFoundError(
                f"Key {key!r} not found in checkpoint '{self.path}'; it has "
                f"{len(self.tensors)} tensors, e.g. {some} (get_variable_to_shape_map() "
                "lists them all)")
        if ours is None:
            graph = {"paths": sorted(self.tensors), "aliases": self.index.get("aliases", {})}
            return json.dumps(graph, sort_keys=True).encode("utf-8")
        return self.arrays[ours]

    def get_variable_to_shape_map(self):
        """``{key: shape as a list}`` under TensorFlow's keys."""
        return {k: ([] if ours is None else list(self.tensors[ours]["shape"]))
                for k, ours in self.tf_keys().items()}

    def get_variable_to_dtype_map(self):
        """``{key: tf.DType}`` under TensorFlow's keys (the object graph: ``tf.string``
        where tapeflow has it, else the str ``"string"``)."""
        string = getattr(_dt, "string", "string")
        return {k: (string if ours is None else _dt.as_dtype(self.tensors[ours]["dtype"]))
                for k, ours in self.tf_keys().items()}


_Loaded = CheckpointReader


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
    path = _path_str(path, "restore")
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


def list_variables(ckpt_dir_or_file):
    """``[(key, shape), ...]`` of a checkpoint (a prefix, or a directory: its latest
    checkpoint), sorted, under TensorFlow's keys (:class:`CheckpointReader`)."""
    return sorted(load_checkpoint(ckpt_dir_or_file).get_variable_to_shape_map().items())


def load_checkpoint(ckpt_dir_or_file):
    """Read and validate a checkpoint (a prefix, or a directory: its latest checkpoint):
    a :class:`CheckpointReader`."""
    if not isinstance(ckpt_dir_or_file, (str, bytes, os.PathLike)):
        raise _errors.InvalidTypeError(
            "load_checkpoint: expected a checkpoint prefix or a directory (a str or "
            f"os.PathLike), got {type(ckpt_dir_or_file).__name__}")
    path = os.fsdecode(ckpt_dir_or_file)
    if "\0" in path:
        raise _errors.InvalidArgumentError(f"load_checkpoint: the path {path!r} holds a NUL "
                                           "byte, which no file name can")
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise NotFoundError(
                f"No checkpoint found in directory '{path}' (its 'checkpoint' state file is "
                "missing, or names a checkpoint that is gone); pass a checkpoint prefix, or "
                "save one there first")
        path = latest
    return _read(path)
