"""Reading one checkpoint, validated before any variable changes: the index parsed and
checked, the data file's size and SHA-256 compared, every tensor's dtype and shape
checked against the index and then against its variable."""

from __future__ import annotations

import hashlib
import json
import os

from ... import dtypes as _dt
from ...runtime.dispatch import constant as _constant
from ...errors import InvalidArgumentError, NotFoundError
from ...tracing.trace import init_scope
from .. import files as _files
from . import _format
from ._format import FORMAT, INDEX_SUFFIX, VERSION, DataLossError, _base_name, _st
from ._state import latest_checkpoint

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
        raw = _files.read_regular(index_path, _format.MAX_INDEX_BYTES, "checkpoint index")
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
    # (inside a traced function -- an optimizer's slots created at its first step --
    # the restore happens once, now, not at every call of the graph)
    with init_scope():
        values = [(var, _constant(a, dtype=var.dtype, device=var.device)) for var, a in pairs]
        for var, value in values:
            var.assign(value)


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
