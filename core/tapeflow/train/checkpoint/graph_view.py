"""The object graph of a checkpoint: which Variables (and optimizer slots) are reachable
from a root through ``_trackable_children()``, and under which path (``model/dense1/kernel``;
a slot under ``<variable path>/.OPTIMIZER_SLOT/<optimizer path>/<slot name>``)."""

from __future__ import annotations

from ...runtime.variable import Variable

_SLOT = ".OPTIMIZER_SLOT"


def _add_named_children(name, value, out):
    """Append ``(path, object)`` for ``value`` and what its lists, tuples and dicts hold,
    the path extended by index or key (``layer/0``, ``opt/m``). Not tf.nest: these paths
    are the checkpoint format's names, in insertion order (the first path to an object
    reached twice is its name), which saved files depend on."""
    if isinstance(value, (list, tuple)):
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


def _walk(items):
    """Breadth-first over ``[(path, object)]``: ``({path: Variable}, {path: object})``;
    an object reachable twice keeps its first (shortest) path."""
    variables, objects, seen = {}, {}, set()
    queue = list(items)
    i = 0
    while i < len(queue):
        path, obj = queue[i]
        i += 1
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, Variable):
            variables[path] = obj
            continue
        objects[path] = obj
        queue.extend((f"{path}/{name}", child) for name, child in _children(obj))
    return variables, objects


def _is_trackable(value):
    if isinstance(value, Variable) or hasattr(value, "_trackable_children"):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_trackable(v) for v in value)
    if isinstance(value, dict):
        return all(_is_trackable(v) for v in value.values())
    return False


def _gather(root):
    """``{key: (Variable, info)}`` of everything reachable from ``root``."""
    variables, objects = _walk(_children(root))
    entries = {p: (v, {"kind": "variable", "name": v.name}) for p, v in variables.items()}
    paths = {id(v): p for p, v in variables.items()}
    for opath, obj in objects.items():
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
