"""Writing one checkpoint: the data file (safetensors, whose header names the format
and the prefix), then the index, each atomically; a re-save alternates between data-file
names so the old index keeps its data until the new index replaces it."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from ...errors import FailedPreconditionError, InvalidArgumentError
from .. import files as _files
from ._atomic import _atomic_write
from ._format import (FORMAT, INDEX_SUFFIX, VERSION, _FOREIGN, _existing_index,
                      _new_data_name, _own_data_file, _st)

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
