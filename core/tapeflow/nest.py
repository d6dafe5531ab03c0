"""Nested structures ("pytrees"): one set of rules for everything tapeflow walks.

``GradientTape.gradient`` and ``jacobian`` (sources, targets, output gradients),
``ForwardAccumulator``, ``tf.function`` (arguments and results),
``tf.vectorized_map`` and ``tf.data.Dataset`` (elements) all flatten and rebuild
structures through this module, as TensorFlow's ``tf.nest``:

* a ``dict`` (any :class:`collections.abc.Mapping`) is a structure: its values in
  **sorted key order** (an ``OrderedDict`` too; keys that cannot be sorted are an
  error), rebuilt as the same type with the original key order;
* a ``namedtuple`` is rebuilt as the same namedtuple;
* ``list`` and ``tuple`` (and their subclasses) are structures;
* everything else is a **leaf**: tensors, Variables, NumPy arrays, numbers,
  strings and ``None``.

``tf.data`` is the one place where TensorFlow reads lists differently: a list in a
dataset element is a leaf (a value to convert to one tensor, so
``Dataset.from_tensor_slices([[1, 2], [3, 4]])`` has one component). Every function
here takes ``lists_as_leaves=True`` for that mode; nothing else changes.

>>> import collections
>>> from tapeflow import nest
>>> P = collections.namedtuple("P", "w b")
>>> s = {"z": P(w=1, b=[2, 3]), "a": None}
>>> nest.flatten(s)
[None, 1, 2, 3]
>>> nest.pack_sequence_as(s, ["A", "W", "B0", "B1"])
{'z': P(w='W', b=['B0', 'B1']), 'a': 'A'}
>>> nest.map_structure(lambda x: x * 10, P(w=1, b=(2, 3)))
P(w=10, b=(20, 30))
>>> nest.flatten({"x": [1, 2]}, lists_as_leaves=True)
[[1, 2]]

This module imports nothing from tapeflow but its errors: a leaf is "anything that
is not a structure", so it never needs to know what a tensor is.
"""

from __future__ import annotations

import collections
from collections import abc as _abc

from .errors import InvalidArgumentError, InvalidTypeError

__all__ = ["flatten", "flatten_with_paths", "flatten_up_to", "pack_sequence_as",
           "map_structure", "assert_same_structure", "is_nested"]

# kinds of node (never 0, so ``_KIND.get(t) or _kind(t)`` works)
_LEAF, _LIST, _TUPLE, _NAMEDTUPLE, _MAPPING = 1, 2, 3, 4, 5

#: type -> kind, filled on first sight of a type (one dict lookup per node after that)
_KIND: dict = {type(None): _LEAF, int: _LEAF, float: _LEAF, bool: _LEAF, complex: _LEAF,
               str: _LEAF, bytes: _LEAF, list: _LIST, tuple: _TUPLE, dict: _MAPPING}


def _kind(t) -> int:
    """The kind of node of type ``t`` (cached)."""
    k = _KIND.get(t)
    if k is None:
        if issubclass(t, tuple):
            k = _NAMEDTUPLE if hasattr(t, "_fields") else _TUPLE
        elif issubclass(t, list):
            k = _LIST
        elif issubclass(t, _abc.Mapping):
            k = _MAPPING
        else:
            k = _LEAF
        _KIND[t] = k
    return k


def _is_leaf(k, lists):
    return k == _LEAF or (k == _LIST and not lists)


def _short(x, n=120) -> str:
    r = repr(x)
    return r if len(r) <= n else r[:n - 3] + "..."


def _sorted_keys(m):
    try:
        return sorted(m)
    except TypeError:
        raise InvalidTypeError(
            f"A dict in a nested structure must have sortable keys (its values are taken in "
            f"sorted key order), got keys {_short(list(m))} of types "
            f"{sorted({type(k).__name__ for k in m})}; use keys of one comparable type, "
            "e.g. all strings.") from None


def _children(x, k):
    """``[(path element, child)]`` of a structure node of kind ``k``."""
    if k == _MAPPING:
        return [(key, x[key]) for key in _sorted_keys(x)]
    if k == _NAMEDTUPLE:
        return list(zip(type(x)._fields, x))
    return list(enumerate(x))


def is_nested(x, lists_as_leaves=False) -> bool:
    """Whether ``x`` is a structure (list, tuple, namedtuple or Mapping), not a leaf.

    >>> from tapeflow import nest
    >>> nest.is_nested([1]), nest.is_nested({"a": 1}), nest.is_nested("ab"), nest.is_nested(None)
    (True, True, False, False)
    >>> nest.is_nested([1], lists_as_leaves=True)
    False
    """
    return not _is_leaf(_KIND.get(type(x)) or _kind(type(x)), not lists_as_leaves)


def _flatten_into(x, out, lists):
    k = _KIND.get(type(x)) or _kind(type(x))
    if k == _LEAF or (k == _LIST and not lists):
        out.append(x)
    elif k == _MAPPING:
        for key in _sorted_keys(x):
            _flatten_into(x[key], out, lists)
    else:
        for v in x:
            _flatten_into(v, out, lists)


def flatten(structure, lists_as_leaves=False) -> list:
    """The leaves of ``structure``, depth first; a Mapping's values in sorted key order.

    A leaf gives a one-element list (``flatten(None) == [None]``).

    >>> from tapeflow import nest
    >>> nest.flatten({"b": (1, 2), "a": [3, {"y": 4, "x": 5}]})
    [3, 5, 4, 1, 2]
    >>> nest.flatten(7)
    [7]
    """
    out: list = []
    _flatten_into(structure, out, not lists_as_leaves)
    return out


def flatten_with_paths(structure, lists_as_leaves=False) -> list:
    """``[(path, leaf)]`` in :func:`flatten`'s order; a path is the tuple of indices,
    dict keys and namedtuple field names leading to the leaf.

    >>> from tapeflow import nest
    >>> nest.flatten_with_paths({"b": [7, 8], "a": 9})
    [(('a',), 9), (('b', 0), 7), (('b', 1), 8)]
    """
    out: list = []
    _paths_into(structure, (), out, not lists_as_leaves)
    return out


def _paths_into(x, path, out, lists):
    k = _KIND.get(type(x)) or _kind(type(x))
    if k == _LEAF or (k == _LIST and not lists):
        out.append((path, x))
        return
    for p, v in _children(x, k):
        _paths_into(v, path + (p,), out, lists)


def _rebuild(like, k, values, keys=None):
    """A node of ``like``'s type holding ``values`` (a Mapping's in the sorted order of
    its keys, ``keys`` when the caller has sorted them already)."""
    t = type(like)
    if k == _LIST:
        return values if t is list else t(values)
    if k == _TUPLE:
        return tuple(values) if t is tuple else t(values)
    if k == _NAMEDTUPLE:
        return t(*values)
    by_key = dict(zip(_sorted_keys(like) if keys is None else keys, values))
    if t is dict:
        return {key: by_key[key] for key in like}
    if t is collections.defaultdict:
        return t(like.default_factory, ((key, by_key[key]) for key in like))
    return t((key, by_key[key]) for key in like)


def _pack(s, it, lists):
    k = _KIND.get(type(s)) or _kind(type(s))
    if k == _LEAF or (k == _LIST and not lists):
        return next(it)
    if k == _MAPPING:
        keys = _sorted_keys(s)
        return _rebuild(s, k, [_pack(s[key], it, lists) for key in keys], keys)
    return _rebuild(s, k, [_pack(v, it, lists) for v in s])


def pack_sequence_as(structure, flat_sequence, lists_as_leaves=False):
    """``flat_sequence`` (an iterable of leaves, in :func:`flatten`'s order) rebuilt
    into the shape of ``structure``: the inverse of :func:`flatten`.

    The leaves of ``structure`` are only counted, never used. Dicts and other
    Mappings come back as their own type with their key order, namedtuples as the
    same namedtuple.

    >>> import collections
    >>> from tapeflow import nest
    >>> P = collections.namedtuple("P", "w b")
    >>> nest.pack_sequence_as(P(w=0, b={"y": 0, "x": 0}), [1, 2, 3])
    P(w=1, b={'y': 3, 'x': 2})
    """
    it = iter(flat_sequence)
    try:
        out = _pack(structure, it, not lists_as_leaves)
    except StopIteration:
        out = None
        extra = False
    else:
        extra = next(it, _END) is not _END
        if not extra:
            return out
    n = len(flatten(structure, lists_as_leaves))
    given = _count(flat_sequence)
    raise InvalidArgumentError(
        f"Cannot pack {given} value(s) into a structure of {n} leaves"
        f"{' (too many values)' if extra else ''}: structure {_short(structure)}, "
        f"values {_short(flat_sequence)}. Pass exactly one value per leaf of the "
        "structure, in the order flatten(structure) gives.")


_END = object()


def _count(seq):
    try:
        return len(seq)
    except TypeError:
        return "some"


def map_structure(fn, *structures, check_types=True, lists_as_leaves=False):
    """``fn`` applied to the leaves of ``structures`` (all of the same structure, see
    :func:`assert_same_structure`), in the first structure's shape.

    >>> from tapeflow import nest
    >>> nest.map_structure(lambda a, b: a + b, {"x": [1, 2]}, {"x": [10, 20]})
    {'x': [11, 22]}
    """
    if not structures:
        raise InvalidArgumentError("map_structure needs at least one structure to map "
                                   "over, got none; call map_structure(fn, structure).")
    lists = not lists_as_leaves
    first = structures[0]
    if len(structures) == 1:
        flat: list = []
        _flatten_into(first, flat, lists)
        return _pack(first, iter([fn(x) for x in flat]), lists)
    flats = []
    for s in structures:
        if s is not first:
            _assert_same(first, s, check_types, lists, (), first, s)
        flat = []
        _flatten_into(s, flat, lists)
        flats.append(flat)
    return _pack(first, iter([fn(*xs) for xs in zip(*flats)]), lists)


def _same_type(a, b, ka, kb):
    """TensorFlow's check_types: the same type; namedtuples of one name and fields; two
    list types; two Mappings (a dict and an OrderedDict match)."""
    ta, tb = type(a), type(b)
    if ta is tb:
        return True
    if ka == kb == _NAMEDTUPLE:
        return ta.__name__ == tb.__name__ and ta._fields == tb._fields
    return ka == kb and ka in (_LIST, _MAPPING)


def _where(path):
    return "at the top level" if not path else "at path " + "".join(f"[{p!r}]" for p in path)


def _assert_same(a, b, check_types, lists, path, top_a, top_b):
    ka = _KIND.get(type(a)) or _kind(type(a))
    kb = _KIND.get(type(b)) or _kind(type(b))
    la, lb = _is_leaf(ka, lists), _is_leaf(kb, lists)
    if la and lb:
        return
    both = f"first structure {_short(top_a)}, second structure {_short(top_b)}"
    if la or lb:
        raise InvalidArgumentError(
            f"The two structures are not nested the same way {_where(path)}: "
            f"{'a leaf' if la else type(a).__name__} against "
            f"{'a leaf' if lb else type(b).__name__} ({both}). Give both the same nesting.")
    if check_types and not _same_type(a, b, ka, kb):
        raise InvalidTypeError(
            f"The two structures have different sequence types {_where(path)}: "
            f"{type(a).__name__} and {type(b).__name__} ({both}). Use the same types, or "
            "pass check_types=False to compare only the nesting.")
    if ka == kb == _MAPPING and set(a) != set(b):
        raise InvalidArgumentError(
            f"The two structures have dicts with different keys {_where(path)}: "
            f"{_short(_sorted_keys(a))} and {_short(_sorted_keys(b))} ({both}). Give both "
            "dicts the same keys.")
    ca, cb = _children(a, ka), _children(b, kb)
    if len(ca) != len(cb):
        raise InvalidArgumentError(
            f"The two structures have different lengths {_where(path)}: {len(ca)} and "
            f"{len(cb)} ({both}). Give both the same number of elements.")
    for (p, x), (_, y) in zip(ca, cb):
        _assert_same(x, y, check_types, lists, path + (p,), top_a, top_b)


def assert_same_structure(nest1, nest2, check_types=True, lists_as_leaves=False):
    """Raise unless ``nest1`` and ``nest2`` are nested the same way (leaves may differ).

    Raises :class:`~tapeflow.errors.InvalidArgumentError` (a ``ValueError``) when the
    nesting, lengths or dict keys differ, :class:`~tapeflow.errors.InvalidTypeError`
    (a ``TypeError``) when ``check_types`` and two sequences differ in type -- except
    namedtuples of the same name and fields, two list types, or two Mappings. The
    message names both structures and the path where they part.

    >>> from tapeflow import nest
    >>> nest.assert_same_structure({"a": [1, 2]}, {"a": [3, 4]})
    >>> nest.assert_same_structure([1, 2], (3, 4), check_types=False)
    >>> try:
    ...     nest.assert_same_structure([1, 2], (3, 4))
    ... except TypeError as e:
    ...     print(type(e).__name__, "--", e.message[:65])
    InvalidTypeError -- The two structures have different sequence types at the top level
    """
    _assert_same(nest1, nest2, check_types, not lists_as_leaves, (), nest1, nest2)


def flatten_up_to(shallow_structure, structure, check_types=True, lists_as_leaves=False):
    """``structure`` flattened only as deep as ``shallow_structure`` is nested: where
    the shallow structure has a leaf, the whole sub-structure of ``structure`` there is
    one element.

    >>> from tapeflow import nest
    >>> nest.flatten_up_to((0, {"a": 0}), ((1, 2), {"a": [3, 4]}))
    [(1, 2), [3, 4]]
    """
    out: list = []
    _up_to(shallow_structure, structure, out, check_types, not lists_as_leaves, (),
           shallow_structure, structure)
    return out


def _up_to(shallow, s, out, check_types, lists, path, top_a, top_b):
    ka = _KIND.get(type(shallow)) or _kind(type(shallow))
    if _is_leaf(ka, lists):
        out.append(s)
        return
    kb = _KIND.get(type(s)) or _kind(type(s))
    both = f"shallow structure {_short(top_a)}, structure {_short(top_b)}"
    if _is_leaf(kb, lists):
        raise InvalidArgumentError(
            f"The structure has a leaf {_where(path)} where the shallow structure has a "
            f"{type(shallow).__name__} ({both}). Nest the structure at least as deep as the "
            "shallow one.")
    if check_types and not _same_type(shallow, s, ka, kb):
        raise InvalidTypeError(
            f"The structures have different sequence types {_where(path)}: "
            f"{type(shallow).__name__} and {type(s).__name__} ({both}). Use the same types, "
            "or pass check_types=False.")
    if ka == _MAPPING:
        if kb != _MAPPING or not set(shallow) <= set(s):
            raise InvalidArgumentError(
                f"The structure lacks keys of the shallow structure's dict {_where(path)} "
                f"({both}). Give it every key the shallow structure has.")
        pairs = [(key, shallow[key], s[key]) for key in _sorted_keys(shallow)]
    else:
        cs = _children(s, kb)
        if len(shallow) != len(cs):
            raise InvalidArgumentError(
                f"The structures have different lengths {_where(path)}: {len(shallow)} "
                f"and {len(cs)} ({both}). Give both the same number of elements.")
        pairs = [(p, x, y) for (p, x), (_, y) in zip(_children(shallow, ka), cs)]
    for p, x, y in pairs:
        _up_to(x, y, out, check_types, lists, path + (p,), top_a, top_b)
