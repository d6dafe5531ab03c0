"""``tf.train.Checkpoint``: object-based saving and restoring (see the package's
docstring for the format and the guarantees)."""

from __future__ import annotations

import os

from ...runtime import context as _ctx
from ... import dtypes as _dt
from ...errors import InvalidArgumentError
from ...runtime.variable import Variable
from ._load import _read
from ._state import _check_state_file, _write_state
from .graph_view import _gather, _is_trackable
from .restore import CheckpointLoadStatus, InitializationOnlyStatus, _Session, restore_deferred
from .save_util import _write

__all__ = ["Checkpoint"]

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
            with _ctx.suspend_variable_observers():
                sc = Variable(0, trainable=False, name="save_counter", dtype=_dt.int64,
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
