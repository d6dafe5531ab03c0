"""Restoring an object graph, with deferral: ``Checkpoint.restore`` assigns the values
whose variables exist and parks the rest on the deepest existing object of their path;
``restore_deferred(obj)`` (called by Layers after ``build()``, optimizers after creating
slots) assigns them when the variables appear."""

from __future__ import annotations

import functools
import threading
import weakref

from ._format import _base_name
from ._load import _assign_all, _mismatch, _raise_mismatch
from .graph_view import _children, _gather, _walk

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
