"""The signature of a traced call: arguments flattened into leaves (with their paths,
for messages), the cache key of the leaves, and the structure to pack results into.
"""

from __future__ import annotations

import numpy as np

from ..runtime import dispatch as _dispatch_mod
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable


def _flatten(x, leaves, path, paths):
    """Nested lists/tuples/dicts -> leaves; returns a structure with ("leaf", i) slots."""
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return (type(x), [_flatten(v, leaves, f"{path}[{i}]", paths) for i, v in enumerate(x)])
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        return (dict, keys, [_flatten(x[k], leaves, f"{path}[{k!r}]", paths) for k in keys])
    leaves.append(x)
    paths.append(path)
    return ("leaf", len(leaves) - 1)


def _pack(struct, leaves):
    if struct[0] == "leaf":
        return leaves[struct[1]]
    if struct[0] is dict:
        return {k: _pack(s, leaves) for k, s in zip(struct[1], struct[2])}
    typ, items = struct
    vals = [_pack(s, leaves) for s in items]
    return typ(vals) if typ in (list, tuple) else typ(*vals)


def _arrays_to_tensors(args, kwargs):
    """NumPy arrays among the arguments become tensors (as in TensorFlow): they are
    inputs of the graph, not constants frozen into it."""
    if not any(type(a) is np.ndarray or isinstance(a, (list, tuple, dict))
               for a in (*args, *kwargs.values())):
        return args, kwargs           # (the common case, without flattening)
    leaves = []
    struct = _flatten((args, kwargs), leaves, "", [])
    if not any(isinstance(x, np.ndarray) for x in leaves):
        return args, kwargs
    constant = _dispatch_mod.constant
    leaves = [constant(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return _pack(struct, leaves)


def _leaf_key(x):
    if isinstance(x, Variable):
        return ("V", tuple(x.shape), x.dtype.name, x._device)
    if isinstance(x, Tensor):
        return ("T", tuple(x._data.shape), x._data.dtype, x._device)
    if type(x) is slice:        # (unhashable before Python 3.12)
        return ("S", x.start, x.stop, x.step)
    try:
        hash(x)
    except TypeError:
        return ("id", id(x))
    return ("P", type(x), x)


def _pretty_path(path, sig):
    # "[0][1]" (args[1]) -> the parameter's name; "[1]['k']" (kwargs) -> k
    if sig is not None and path.startswith("[0]["):
        try:
            i = int(path[4:].split("]")[0])
            params = list(sig.parameters)
            rest = path[4:].split("]", 1)[1]
            return (params[i] if i < len(params) else f"args[{i}]") + rest
        except ValueError:
            pass
    if path.startswith("[1]["):
        return path[4:].split("]", 1)[0].strip("'") + path[4:].split("]", 1)[1]
    return path
