"""Name-based checkpoints, the seeds' API: ``tfe.Saver`` (a list or dict of Variables
saved and restored by name) and ``tfe.restore_variables_on_create``."""

from __future__ import annotations

import contextlib
import os

from ...runtime import context as _ctx
from ...errors import InvalidArgumentError, InvalidTypeError, NotFoundError
from ...runtime.variable import Variable
from ._format import _base_name, _delete_checkpoint
from ._load import _assign_all, _mismatch, _raise_mismatch, _read
from ._state import _check_state_file, _write_state
from .graph_view import _add_named_children
from .save_util import _write

__all__ = ["Saver", "restore_variables_on_create"]

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
