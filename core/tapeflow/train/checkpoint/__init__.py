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
  ``model/dense1/kernel/.OPTIMIZER_SLOT/optimizer/m``; an object's own state, kind
  ``"state"``, by ``<path>/.ATTRIBUTES/<name>``, a ``tf.data`` iterator's position
  ``iterator/.ATTRIBUTES/ITERATOR_STATE``; ``Saver`` keys by name), and ``aliases``,
  ``{other path: saved path}`` of objects reachable by several paths (saved once,
  restorable by each; absent when there are none, as in files written before it).

``tf.train.load_checkpoint`` / ``list_variables`` show TensorFlow's keys
(``model/dense1/kernel/.ATTRIBUTES/VARIABLE_VALUE``, ``_CHECKPOINTABLE_OBJECT_GRAPH``):
the reader translates (:class:`CheckpointReader`), so the files keep version 1's layout.

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

The package is three modules, as TensorFlow's ``checkpoint/`` package keeps a handful:

* this one         -- the user API: ``tf.train.Checkpoint`` (object-based),
  ``CheckpointManager`` (numbered checkpoints, rotation), the seeds' name-based
  ``Saver`` and ``restore_variables_on_create``;
* ``object_graph`` -- the object graph (paths of variables and slots), validated
  assignment, and restoring with deferral (``restore_deferred``, the load statuses);
* ``file_format``  -- the checkpoint on disk: names and format constants, which files
  are a checkpoint's own, atomic writes, the ``checkpoint`` state file
  (``latest_checkpoint``), writing one checkpoint and reading it validated
  (``load_checkpoint``, ``list_variables``).

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
import os
import re

import numpy as np

from ... import dtypes as _dt
from ...errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from ...module import wrap as _wrap
from ...runtime import context as _ctx
from ...runtime.variable import Variable
from .file_format import (ALT_DATA_SUFFIX, DATA_SUFFIX, FORMAT, INDEX_SUFFIX, MAX_INDEX_BYTES,
                          MAX_STATE_BYTES, STATE_FILE, VERSION, CheckpointReader, DataLossError,
                          _base_name, _check_state_file, _delete_checkpoint, _path_str, _read,
                          _read_state,
                          _write, _write_state, latest_checkpoint, list_variables,
                          load_checkpoint)
from .object_graph import (CheckpointLoadStatus, InitializationOnlyStatus, _add_named_children,
                           _assign_all, _gather, _is_trackable, _mismatch, _on_attach,
                           _raise_mismatch, _Session, restore_deferred)

__all__ = ["Checkpoint", "CheckpointManager", "CheckpointLoadStatus", "Saver",
           "latest_checkpoint", "restore_variables_on_create", "restore_deferred",
           "list_variables", "load_checkpoint", "CheckpointReader", "DataLossError"]


# --- tf.train.Checkpoint: object-based ----------------------------------------------------

class Checkpoint:
    """Groups trackable objects (models, layers, ``tf.Module``s, optimizers, Variables,
    ``tf.data`` iterators, other Checkpoints) for saving and restoring:
    ``tf.train.Checkpoint(optimizer=opt, model=model, step=step)``.

    ``save(prefix)`` writes ``<prefix>-<n>`` (n counts saves, restored with the rest)
    and returns it; ``restore(path)`` restores it and returns a status
    (``assert_consumed()``, ``assert_existing_objects_matched()``, ``expect_partial()``);
    ``restore(None)`` (no checkpoint yet) restores nothing and returns a status whose
    checks raise. Attributes assigned later are tracked too: a list or dict becomes a
    ``ListWrapper`` / ``DictWrapper`` whose later items are saved, and whose items a
    restore made before they existed reaches (deferred restoration). Values that are not
    trackable (a number, a string) may be assigned as attributes; they are not saved.

    >>> import os, tempfile
    >>> import tapeflow as tf
    >>> ckpt = tf.train.Checkpoint()
    >>> ckpt.listed = [tf.Variable(1.0)]
    >>> ckpt.listed.append(tf.Variable(2.0))
    >>> path = ckpt.save(os.path.join(tempfile.mkdtemp(), "lists"))
    >>> fresh = tf.train.Checkpoint()
    >>> status = fresh.restore(path)
    >>> fresh.listed = []
    >>> fresh.listed
    ListWrapper([])
    >>> fresh.listed.append(tf.Variable(0.0))       # restored when it appears
    >>> float(fresh.listed[0])
    1.0
    """

    _RESERVED = ("save", "restore", "write", "read", "save_counter")

    def __init__(self, **kwargs):
        object.__setattr__(self, "_objects", {})
        object.__setattr__(self, "_save_counter", None)
        object.__setattr__(self, "_last_session", None)
        for name, value in kwargs.items():
            if not _is_trackable(value):
                raise InvalidArgumentError(
                    f"Checkpoint was expecting '{name}' to be a trackable object (a "
                    "tf.Variable, a tf.Module or Keras layer or model, an optimizer, a tf.data "
                    f"iterator, or a list or dict of them), got {type(value).__name__} "
                    f"{value!r}")
            setattr(self, name, value)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name in self._RESERVED:
            raise InvalidArgumentError(
                f"'{name}' is reserved by tf.train.Checkpoint; use another name")
        value = _wrap(value)
        if not _is_trackable(value):           # (kept, not saved, as in TensorFlow)
            self._objects.pop(name, None)
            object.__setattr__(self, name, value)
            return
        self._objects[name] = value
        object.__setattr__(self, name, value)
        _on_attach(self)

    def _trackable_children(self):
        children = dict(self._objects)
        if self._save_counter is not None:
            children["save_counter"] = self._save_counter
        return children

    @property
    def save_counter(self):
        """Number of ``save()`` calls (an int64 Variable, saved and restored)."""
        if self._save_counter is None:
            with _ctx.suspend_variable_observers():
                sc = Variable(0, trainable=False, name="save_counter", dtype=_dt.int64,
                              device="cpu:0")
            object.__setattr__(self, "_save_counter", sc)
            restore_deferred(self)
        return self._save_counter

    def write(self, file_prefix):
        """Write exactly ``file_prefix`` (no counter, no state file). Returns it."""
        aliases: dict = {}
        entries = _gather(self, aliases)
        return _write(file_prefix, entries, "object", aliases=aliases)

    def save(self, file_prefix):
        """Save to ``<file_prefix>-<save_counter>`` and record it as the directory's latest
        checkpoint. Returns the path (seed: ``checkpoint.save('./ckpt/')`` -> ``'./ckpt/-1'``)."""
        file_prefix = _path_str(file_prefix, "save")
        _check_state_file(os.path.dirname(file_prefix))
        counter = self.save_counter
        counter.assign_add(1)
        path = f"{file_prefix}-{int(counter)}"
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


# --- tf.train.CheckpointManager: numbered checkpoints, rotation -------------------------

class CheckpointManager:
    """Keeps the ``max_to_keep`` most recent checkpoints of ``checkpoint`` in
    ``directory`` (``<directory>/<checkpoint_name>-<n>``), deleting older ones."""

    def __init__(self, checkpoint, directory, max_to_keep=5, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt"):
        if not isinstance(checkpoint, Checkpoint):
            raise InvalidTypeError(
                "CheckpointManager: the first argument must be a tf.train.Checkpoint (wrap "
                f"your objects: tf.train.Checkpoint(model=...)), got {type(checkpoint).__name__}")
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
    def checkpoint(self):
        """The ``tf.train.Checkpoint`` it saves."""
        return self._checkpoint

    @property
    def checkpoints(self):
        return list(self._checkpoints)

    @property
    def latest_checkpoint(self):
        return self._checkpoints[-1] if self._checkpoints else None

    def restore_or_initialize(self):
        """Restore the latest checkpoint and return its path, or return None when there
        is none (the variables keep their initial values)."""
        latest = self.latest_checkpoint
        if latest is None:
            return None
        self._checkpoint.restore(latest)
        return latest

    def save(self, checkpoint_number=None):
        """Write ``<directory>/<checkpoint_name>-<n>`` (n: ``checkpoint_number``, else the
        checkpoint's ``save_counter``, which counts every save either way), record it as
        the latest, delete the oldest beyond ``max_to_keep``; returns the path."""
        _check_state_file(self._directory)
        counter = self._checkpoint.save_counter
        counter.assign_add(1)
        if checkpoint_number is None:
            checkpoint_number = int(counter)
        elif isinstance(checkpoint_number, bool) or not isinstance(
                checkpoint_number, (int, np.integer)) and not hasattr(checkpoint_number,
                                                                      "numpy"):
            counter.assign_sub(1)
            raise InvalidTypeError(
                "CheckpointManager.save: checkpoint_number must be an int (or an integer "
                f"Variable such as the step), got {checkpoint_number!r}")
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


# --- the seeds' name-based API: tfe.Saver, tfe.restore_variables_on_create ---------------

def _named(var_list):
    if isinstance(var_list, dict):
        items = [(_base_name(str(k)), v) for k, v in var_list.items()]
    else:
        flat = []
        _add_named_children("", list(var_list), flat)
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

    _ctx.add_variable_observer(hook)
    try:
        yield
    finally:
        _ctx.remove_variable_observer(hook)
