"""The object graph of a checkpoint, and restoring values into it.

The graph: which Variables (and optimizer slots) are reachable from a root through
``_trackable_children()``, and under which path (``model/dense1/kernel``; a slot under
``<variable path>/.OPTIMIZER_SLOT/<optimizer path>/<slot name>``). Saving writes them by
path (:func:`_gather`); restoring matches the checkpoint's paths against them.

Restoring is validated, then all or nothing: every value is checked against its variable
(shape, dtype) and converted before the first assignment. ``Checkpoint.restore`` assigns
the values whose variables exist and parks the rest on the deepest existing object of
their path; ``restore_deferred(obj)`` (called by Layers after ``build()``, optimizers
after creating slots) assigns them when the variables appear -- restore on create.

Tracked containers (``tf.contrib.checkpoint``): :class:`List` and :class:`Dict` are a
list and a dict whose trackable items (Layers, Variables, optimizers, checkpointable
objects) are saved under their index or key (``cells/0/kernel``), as the plain lists
and dicts a Layer or ``tf.train.Checkpoint`` holds are; unlike those, they may also
hold other values (skipped), and a Layer's variables follow their changes.
:class:`NoDependency` wraps a value a Layer keeps out of its variables and checkpoints;
:class:`UniqueNameTracker` is a :class:`Dict` that names what it tracks uniquely.

>>> import tapeflow as tf
>>> class Stack(tf.keras.Model):
...     def __init__(self):
...         super().__init__()
...         self.blocks = tf.contrib.checkpoint.List([tf.layers.Dense(2) for _ in range(2)])
...     def call(self, x):
...         for b in self.blocks:
...             x = b(x)
...         return x
>>> m = Stack()
>>> _ = m(tf.ones((1, 3)))
>>> len(m.variables), sorted(k for k in m._trackable_children())
(4, ['blocks/0', 'blocks/1'])
"""

from __future__ import annotations

import functools
import threading
import weakref

from ... import module as _module
from ...errors import InvalidArgumentError
from ...layers.base import Layer, TrackedDict, TrackedList
from ...module import DictWrapper, ListWrapper
from ...runtime.dispatch import constant as _constant
from ...runtime.variable import Variable
from ...tracing import init_scope
from .file_format import _base_name

_SLOT = ".OPTIMIZER_SLOT"
#: a saved object's own state (``iterator/.ATTRIBUTES/ITERATOR_STATE``), TensorFlow's key
ATTRIBUTES = "/.ATTRIBUTES/"
#: how many alias hops a checkpoint path may take (a planted cycle of aliases ends there)
_MAX_ALIAS_HOPS = 32


# --- the graph: paths of variables and slots --------------------------------------------

def _add_named_children(name, value, out):
    """Append ``(path, object)`` for ``value`` and what its lists, tuples and dicts hold,
    the path extended by index or key (``layer/0``, ``opt/m``). Not tf.nest: these paths
    are the checkpoint format's names, in insertion order (the first path to an object
    reached twice is its name), which saved files depend on."""
    if isinstance(value, (List, Dict)):          # their trackable items only
        for k, v in value._trackable_children().items():
            _add_named_children(f"{name}/{k}", v, out)
    elif isinstance(value, (ListWrapper, DictWrapper)):
        out.append((name, value))     # an object: values may wait on it for its items
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _add_named_children(f"{name}/{i}", v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _add_named_children(f"{name}/{k}", v, out)
    elif value is not None:
        out.append((name, value))


def _children(obj):
    fn = getattr(obj, "_trackable_children", None)
    if fn is None or isinstance(obj, Variable):
        return []
    out = []
    for name, value in fn().items():
        _add_named_children(str(name), value, out)
    return out


def _walk(items, aliases=None):
    """Breadth-first over ``[(path, object)]``: ``({path: Variable}, {path: object})``;
    an object reachable twice keeps its first (shortest) path, and ``aliases`` (when
    given) gets ``{other path: first path}``."""
    variables, objects, first = {}, {}, {}
    queue = list(items)
    i = 0
    while i < len(queue):
        path, obj = queue[i]
        i += 1
        if id(obj) in first:
            if aliases is not None and first[id(obj)] != path:
                aliases[path] = first[id(obj)]
            continue
        first[id(obj)] = path
        if isinstance(obj, Variable):
            variables[path] = obj
            continue
        objects[path] = obj
        queue.extend((f"{path}/{name}", child) for name, child in _children(obj))
    return variables, objects


def _is_trackable(value):
    if isinstance(value, Variable) or hasattr(value, "_trackable_children") or hasattr(
            value, "_serialize_to_tensors"):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_trackable(v) for v in value)
    if isinstance(value, dict):
        return all(_is_trackable(v) for v in value.values())
    return False


def _gather(root, aliases=None):
    """``{key: (Variable or array, info)}`` of everything reachable from ``root``: its
    Variables, optimizer slots and objects' own state (a ``tf.data`` iterator's position,
    ``<path>/.ATTRIBUTES/ITERATOR_STATE``); ``aliases`` gets the other paths of objects
    reachable twice."""
    variables, objects = _walk(_children(root), aliases)
    entries = {p: (v, {"kind": "variable", "name": v.name}) for p, v in variables.items()}
    paths = {id(v): p for p, v in variables.items()}
    for opath, obj in objects.items():
        serialize = getattr(obj, "_serialize_to_tensors", None)
        if serialize is not None:
            for attr, value in serialize().items():
                entries[f"{opath}{ATTRIBUTES}{attr}"] = (value, {"kind": "state",
                                                                 "attribute": attr})
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


# --- tracked containers (tf.contrib.checkpoint) --------------------------------------------

def _trackable_item(v):
    return isinstance(v, Variable) or hasattr(v, "_trackable_children")


class List(TrackedList):
    """``tf.contrib.checkpoint.List``: a list whose trackable items (Layers, Variables,
    optimizers, other containers) a checkpoint saves under their index (``name/0``);
    other items are kept but not saved. As an attribute of a Layer or Model, its
    Layers' variables are the model's, and they follow appends and removals."""

    def _trackable_children(self) -> dict:
        return {str(i): v for i, v in enumerate(self) if _trackable_item(v)}

    def __repr__(self):
        return f"List({list.__repr__(self)})"

    @property
    def layers(self):
        """The Layers it holds, in order."""
        return [v for v in self if isinstance(v, Layer)]


class Dict(TrackedDict):
    """``tf.contrib.checkpoint.Dict``: a dict whose trackable values a checkpoint saves
    under their key (``name/key``; keys are made str); other values are kept but not
    saved. As an attribute of a Layer or Model, it is tracked as :class:`List` is."""

    def _trackable_children(self) -> dict:
        return {str(k): v for k, v in self.items() if _trackable_item(v)}

    def __repr__(self):
        return f"Dict({dict.__repr__(self)})"


class UniqueNameTracker(Dict):
    """``tf.contrib.checkpoint.UniqueNameTracker``: ``track(obj, base_name)`` keeps a
    trackable object under a name made unique (``base_name``, ``base_name_1`` ...), the
    name a checkpoint saves it under; returns ``obj``."""

    def track(self, trackable, base_name):
        if not _trackable_item(trackable):
            raise InvalidArgumentError(
                f"UniqueNameTracker.track: expected a trackable object (a Variable, Layer, "
                f"optimizer or checkpointable container), got {type(trackable).__name__}")
        if not isinstance(base_name, str):
            raise InvalidArgumentError(f"UniqueNameTracker.track: base_name must be a str, "
                                       f"got {base_name!r}")
        name, n = base_name, 0
        while name in self:
            n += 1
            name = f"{base_name}_{n}"
        self[name] = trackable
        return trackable


class NoDependency:
    """``tf.contrib.checkpoint.NoDependency(value)``: assigned to a Layer's attribute,
    the attribute is ``value`` itself, and the Layer neither tracks it nor saves it (a
    list of Layers kept for reference, a cache)."""

    __slots__ = ("value",)
    #: (what ``Layer.__setattr__`` looks for: it stores ``value`` untracked)
    _tapeflow_no_dependency = True

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"NoDependency({self.value!r})"


class _ContribCheckpoint:
    """``tf.contrib.checkpoint``: ``List``, ``Dict``, ``NoDependency``,
    ``UniqueNameTracker``."""

    List = List
    Dict = Dict
    NoDependency = NoDependency
    UniqueNameTracker = UniqueNameTracker

    def __repr__(self):
        return "<tf.contrib.checkpoint>"


#: ``tf.contrib.checkpoint``
contrib = _ContribCheckpoint()


# --- validated assignment ---------------------------------------------------------------

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
    # the restore happens once, now, not at every call of the graph). A restore writes
    # the value itself in any context: the plain Variable assign, never a subclass's
    # (a mirrored variable's assign inside strategy.run is a cross-replica sync point)
    with init_scope():
        values = [(var, _constant(a, dtype=var.dtype, device=var.device)) for var, a in pairs]
        for var, value in values:
            Variable.assign(var, value)


# --- deferred restoration ---------------------------------------------------------------

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
    for i, (session, path) in enumerate(entry[1]):
        try:
            if not session.superseded:
                session.restore_subtree(obj, path)
        except BaseException:
            for s, p in entry[1][i:]:      # not restored: still pending (a retry restores)
                _register(obj, s, p)
            raise


def _valid_aliases(raw):
    """The index's ``aliases`` (``{path: path}``), or ``{}`` when absent or malformed."""
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def _object_path(key):
    """The path of the object a key belongs to: a Variable's own path, or the object of
    a state key (``it/.ATTRIBUTES/ITERATOR_STATE`` -> ``it``)."""
    return key.split(ATTRIBUTES, 1)[0]


class _Session:
    """One ``Checkpoint.restore``: the checkpoint's values and which are still unused."""

    def __init__(self, loaded, root):
        self.loaded = loaded
        self.root = root
        self.superseded = False
        tensors = loaded.tensors
        self.var_keys = {k for k, m in tensors.items() if m.get("kind", "variable") == "variable"}
        self.state_keys = {k for k, m in tensors.items() if m.get("kind") == "state"}
        self.slots_of: dict = {}
        for k, m in tensors.items():
            if m.get("kind") == "slot":
                self.slots_of.setdefault(m.get("variable"), []).append(k)
        self.aliases = _valid_aliases(loaded.index.get("aliases"))
        self.unconsumed = set(tensors)
        self.handed_off: set = set()
        self.objects: dict = {}       # path -> object seen in a walk (optimizers for slots)

    def resolve(self, path):
        """The checkpoint's key for ``path``: itself, or through the aliases of objects
        saved once but reachable by several paths (``mapped/two`` -> ``listed/1``)."""
        tensors, aliases = self.loaded.tensors, self.aliases
        for _ in range(_MAX_ALIAS_HOPS):
            if path in tensors or not aliases:
                return path
            parts = path.split("/")
            for i in range(len(parts), 0, -1):
                head = "/".join(parts[:i])
                target = aliases.get(head)
                if target is not None:
                    path = target + path[len(head):]
                    break
            else:
                return path
        return path

    def _paths_of(self, key):
        """The object path of ``key`` and its other paths (through the aliases)."""
        path = _object_path(key)
        out = [path]
        for alias, target in self.aliases.items():
            if path == target or path.startswith(target + "/"):
                out.append(alias + path[len(target):])
        return out

    def _plan_slots(self, key, var, assign, defer, errors):
        tensors, arrays = self.loaded.tensors, self.loaded.arrays
        for skey in self.slots_of.get(key, ()):
            if skey not in self.unconsumed or skey in self.handed_off:
                continue
            meta = tensors[skey]
            opt = self.objects.get(meta.get("optimizer"))
            if opt is None:
                continue
            get_slot = getattr(opt, "get_slot", None)
            slot = get_slot(var, meta.get("slot")) if get_slot is not None else None
            if slot is not None:
                err = _mismatch(skey, slot, arrays[skey], meta["dtype"])
                if err:
                    errors.append(err)
                else:
                    assign.append((slot, skey))
            elif hasattr(opt, "_defer_slot_restoration"):
                err = _mismatch(skey, var, arrays[skey], meta["dtype"])
                if err:
                    errors.append(err)
                else:
                    defer.append((opt, var, meta.get("slot"), skey))

    def _plan(self, variables, objects):
        self.objects.update(objects)
        tensors, arrays = self.loaded.tensors, self.loaded.arrays
        assign, defer, errors = [], [], []
        for path, var in variables.items():
            key = self.resolve(path)
            if key in self.var_keys and key in self.unconsumed:
                err = _mismatch(key, var, arrays[key], tensors[key]["dtype"])
                if err:
                    errors.append(err)
                else:
                    assign.append((var, key))
            self._plan_slots(key, var, assign, defer, errors)
        if errors:
            _raise_mismatch(self.loaded.path, errors)
        states = []
        if self.state_keys & self.unconsumed:
            for path, obj in objects.items():
                if not hasattr(obj, "_restore_from_tensors"):
                    continue
                head = self.resolve(path) + ATTRIBUTES
                keys = [k for k in self.state_keys & self.unconsumed if k.startswith(head)]
                if keys:
                    states.append((obj, {k[len(head):]: k for k in keys}))
        return assign, defer, states

    def apply(self, variables, objects):
        assign, defer, states = self._plan(variables, objects)
        arrays = self.loaded.arrays
        for obj, keys in states:        # every state checked before anything is assigned
            check = getattr(obj, "_check_restore_tensors", None)
            if check is not None:
                check({attr: arrays[k] for attr, k in keys.items()})
        _assign_all([(var, arrays[key]) for var, key in assign])
        for _, key in assign:
            self.unconsumed.discard(key)
        for opt, var, slot_name, key in defer:
            self.handed_off.add(key)
            opt._defer_slot_restoration(var, slot_name, arrays[key],
                                        functools.partial(self.unconsumed.discard, key))
        for obj, keys in states:
            obj._restore_from_tensors({attr: arrays[k] for attr, k in keys.items()})
            self.unconsumed.difference_update(keys.values())
        self._release_if_done()

    def _release_if_done(self):
        if not (self.unconsumed - self.handed_off):
            self.loaded.arrays = {}     # every value is in its variable: free the copy

    def register_pending(self, objects, under=None):
        """Park each unused value on the deepest existing object of its path (of each
        of its paths, when an object was saved under several)."""
        prefix = None if under is None else (under + "/" if under else "")
        for key in sorted(self.unconsumed & (self.var_keys | self.state_keys)):
            for path in self._paths_of(key):
                if prefix is not None and not path.startswith(prefix):
                    continue
                parts = path.split("/")
                target = (self.root, "")
                for i in range(len(parts) - 1, 0, -1):
                    p = "/".join(parts[:i])
                    if p in objects:
                        target = (objects[p], p)
                        break
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


def _on_attach(obj):
    """(``tf.Module``'s attach observer) ``obj`` got an attribute or item: assign what a
    restore left pending on it."""
    if _PENDING:
        restore_deferred(obj)


_module.set_attach_observer(_on_attach)


# --- what Checkpoint.restore returns ----------------------------------------------------

class CheckpointLoadStatus:
    """What ``Checkpoint.restore`` returns: checks on how the checkpoint matched. Each
    check returns the status (so they chain) or raises AssertionError naming what did
    not match."""

    def __init__(self, session):
        self._session = session

    def _pending(self):
        return sorted(self._session.unconsumed)

    def assert_consumed(self):
        """Every value of the checkpoint was restored and every variable of the object
        graph had a value; raises AssertionError naming what did not match."""
        pending = self._pending()
        if pending:
            raise AssertionError(
                "Unresolved values in the checkpoint (their variables do not exist yet, or "
                f"are gone): {pending}. Create them (build the model, take an optimizer "
                "step) before this check, or use assert_existing_objects_matched()")
        self.assert_existing_objects_matched()
        return self

    def assert_existing_objects_matched(self):
        """Every variable (and saved object state) that exists now had a value in the
        checkpoint."""
        s = self._session
        entries = _gather(s.root)
        counter = getattr(s.root, "_save_counter", None)
        entries = {k: e for k, e in entries.items() if e[0] is not counter}
        if s.loaded.kind == "names":
            names = s.loaded.by_name()
            missing = [p for p, (v, _) in entries.items() if _base_name(v.name) not in names]
        else:
            missing = [k for k in entries if s.resolve(k) not in s.loaded.tensors]
        if missing:
            raise AssertionError(
                f"Objects with no value in checkpoint '{s.loaded.path}': {sorted(missing)}. "
                "They were added or renamed since it was saved; use expect_partial() if "
                "that is intended")
        return self

    def assert_nontrivial_match(self):
        """Something of the checkpoint was restored."""
        s = self._session
        if len(s.unconsumed) == len(s.loaded.tensors):
            raise AssertionError(f"Nothing was restored from checkpoint '{s.loaded.path}': "
                                 "none of its paths names an object of this one")
        return self

    def expect_partial(self):
        """Say that a partial restore is intended (tapeflow never warns about one)."""
        return self

    def run_restore_ops(self, session=None):
        """Restore now whatever matches among the variables created since."""
        self._session.restore_root()

    initialize_or_restore = run_restore_ops


_NOTHING = ("No checkpoint specified (save_path=None): nothing is being restored. "
            "Pass a checkpoint prefix (tf.train.latest_checkpoint(directory) is None when "
            "the directory has none)")


class InitializationOnlyStatus:
    """``Checkpoint.restore(None)`` (no checkpoint yet): the checks raise AssertionError,
    as in TensorFlow, since nothing was restored; ``initialize_or_restore()`` does nothing
    (variables are initialized when made) and ``expect_partial()`` returns the status."""

    def assert_consumed(self):
        raise AssertionError(_NOTHING)

    assert_existing_objects_matched = assert_consumed
    assert_nontrivial_match = assert_consumed

    def expect_partial(self):
        return self

    def run_restore_ops(self, session=None):
        raise AssertionError("No checkpoint specified (save_path=None), so there is nothing "
                             "to restore; call initialize_or_restore() for a first run")

    def initialize_or_restore(self, session=None):
        return None
