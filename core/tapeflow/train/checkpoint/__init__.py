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

The modules, one concern each (as TensorFlow's ``checkpoint/`` package):

* ``checkpoint``  -- ``tf.train.Checkpoint``, the public object-based API;
* ``management``  -- ``CheckpointManager`` (numbered checkpoints, rotation);
* ``saver``       -- the seeds' name-based ``Saver`` and ``restore_variables_on_create``;
* ``graph_view``  -- the object-graph walk (paths of variables and slots);
* ``restore``     -- restoring a graph, with deferral (``restore_deferred``);
* ``save_util``   -- writing one checkpoint (data, then index);
* ``_load``       -- reading and validating one checkpoint;
* ``_state``      -- the directory's ``checkpoint`` state file, ``latest_checkpoint``;
* ``_format``     -- names and format constants, and which files are a checkpoint's own;
* ``_atomic``     -- atomic file replacement;

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

from ._format import (ALT_DATA_SUFFIX, DATA_SUFFIX, FORMAT, INDEX_SUFFIX, MAX_INDEX_BYTES,
                      MAX_STATE_BYTES, STATE_FILE, VERSION, DataLossError)
from ._load import list_variables, load_checkpoint
from ._state import latest_checkpoint
from .checkpoint import Checkpoint
from .management import CheckpointManager
from .restore import CheckpointLoadStatus, InitializationOnlyStatus, restore_deferred
from .saver import Saver, restore_variables_on_create

__all__ = ["Checkpoint", "CheckpointManager", "CheckpointLoadStatus", "Saver",
           "latest_checkpoint", "restore_variables_on_create", "restore_deferred",
           "list_variables", "load_checkpoint", "DataLossError"]
