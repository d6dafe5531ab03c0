"""``tf.train.CheckpointManager``: numbered checkpoints in one directory, the oldest
deleted past ``max_to_keep`` -- only its own ``<checkpoint_name>-<n>`` ones."""

from __future__ import annotations

import os
import re

from ._format import INDEX_SUFFIX, _delete_checkpoint
from ._state import _check_state_file, _read_state, _write_state

__all__ = ["CheckpointManager"]

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
