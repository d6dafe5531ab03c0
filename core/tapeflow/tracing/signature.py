"""The signature of a traced call: arguments flattened into leaves (with their paths,
for messages), the cache key of the leaves, and the structure to pack results into --
all by :mod:`tapeflow.nest`'s rules (namedtuples and dicts in key order kept).
"""

from __future__ import annotations

import numpy as np

from ..runtime import dispatch as _dispatch_mod
from .. import nest
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable


def _none(_):
    return None


def _skeleton(x):
    """``x`` with None for every leaf: the structure a graph keeps to pack its results
    (never the traced values themselves)."""
    return nest.map_structure(_none, x)


def _path_str(path):
    return "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path)


def _flatten_args(args, kwargs):
    """The leaves of a call's ``(args, kwargs)`` (:func:`tapeflow.nest.flatten`)
    and their paths, ``"[0][1]"`` for ``args[1]`` and ``"[1]['k']"`` for ``kwargs['k']``
    (for :func:`_pretty_path`)."""
    pairs = nest.flatten_with_paths((args, kwargs))
    return [x for _, x in pairs], [_path_str(p) for p, _ in pairs]


def _arrays_to_tensors(args, kwargs):
    """NumPy arrays among the arguments become tensors (as in TensorFlow): they are
    inputs of the graph, not constants frozen into it."""
    if not any(type(a) is np.ndarray or isinstance(a, (list, tuple, dict))
               for a in (*args, *kwargs.values())):
        return args, kwargs           # (the common case, without flattening)
    leaves = nest.flatten((args, kwargs))
    if not any(isinstance(x, np.ndarray) for x in leaves):
        return args, kwargs
    constant = _dispatch_mod.constant
    leaves = [constant(x) if isinstance(x, np.ndarray) else x for x in leaves]
    return nest.pack_sequence_as((args, kwargs), leaves)


def _leaf_key(x):
    if isinstance(x, Variable):
        # (trainable: whether tapes inside watch its reads is decided at trace time)
        return ("V", tuple(x.shape), x.dtype.name, x._device, x.trainable)
    if isinstance(x, Tensor):
        return ("T", tuple(x._data.shape), x._data.dtype, x._device)
    if type(x) is slice:        # (unhashable before Python 3.12)
        return ("S", x.start, x.stop, x.step)
    if type(x) is float:        # -0.0 == 0.0, and nan != nan: by their text
        return ("F", repr(x))
    try:
        hash(x)
    except TypeError:
        # by identity, holding the object: while the trace is cached its id is not
        # reused by another object (which would replay this one's trace)
        return ("id", _ById(x))
    return ("P", type(x), x)


class _ById:
    """An unhashable argument in a cache key: equal to itself only."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is _ById and other.obj is self.obj


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
