"""``tf.Module`` and ``tf.name_scope``: TensorFlow 2's container of Variables and
the prefix of the names of Variables made inside a scope.

A ``tf.Module`` finds its Variables and submodules through its attributes: a
Variable, a Module, or a list, tuple or dict (nested to any depth) holding them.
Nothing has to be registered, and ``super().__init__()`` is optional (the walk reads
the instance's attributes; ``name`` then defaults to the class name in snake case).
The walk is deterministic: attributes by name, dict keys sorted, a module's own
leaves before its submodules' (depth first), each object once, cycles skipped.

>>> import tapeflow as tf
>>> class Dense(tf.Module):
...     def __init__(self, n_in, n_out, name=None):
...         super().__init__(name=name)
...         self.w = tf.Variable(tf.ones([n_in, n_out]), name="w")
...         self.b = tf.Variable(tf.zeros([n_out]), name="b")
...     def __call__(self, x):
...         return tf.matmul(x, self.w) + self.b
>>> class Net(tf.Module):
...     def __init__(self):
...         super().__init__()
...         self.layers = [Dense(3, 2), Dense(2, 1, name="head")]
>>> net = Net()
>>> net.name, [m.name for m in net.submodules]
('net', ['dense', 'head'])
>>> [v.name for v in net.variables]
['b:0', 'w:0', 'b:0', 'w:0']
>>> net.layers
ListWrapper([<...Dense object at 0x...>, <...Dense object at 0x...>])

``tf.name_scope(name)`` prefixes the names of the Variables made inside it with
``name/`` (scopes nest; a name ending in ``/`` is absolute). A Module's
``name_scope`` is the scope of its name, fixed when it is made (inside an outer
scope, it includes that scope), and ``tf.Module.with_name_scope`` enters it around a
method.

>>> with tf.name_scope("outer"):
...     with tf.name_scope("inner") as scope:
...         v = tf.Variable(1.0, name="v")
>>> scope, v.name
('outer/inner/', 'outer/inner/v:0')
>>> m = tf.Module(name="block")
>>> with m.name_scope:
...     tf.Variable(0.0).name
'block/Variable:0'

Lists and dicts assigned to a Module's (or a ``tf.train.Checkpoint``'s) attributes
become ``ListWrapper`` / ``DictWrapper``: a list and a dict whose later changes a
checkpoint sees (an appended Variable is restored from a checkpoint restored before
it existed).

Where tapeflow differs from TensorFlow 2.21: Keras layers and models are
``tf.Module``s (as in TensorFlow 2 before Keras 3), and a Module whose ``__init__``
skipped ``super().__init__()`` still has a ``name`` and a ``name_scope`` (TensorFlow
raises AttributeError). docs/modules.md has the details.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping

from .errors import InvalidArgumentError, InvalidTypeError
from .runtime import context as _ctx
from .runtime.variable import Variable

__all__ = ["Module", "name_scope", "current_name_scope", "ListWrapper", "DictWrapper", "wrap",
           "is_trackable", "set_attach_observer", "camel_to_snake"]

# --- tf.name_scope ------------------------------------------------------------------------


class _ScopeState(threading.local):
    prefix = ""          # "outer/inner/" inside both scopes
    stack: list          # the prefixes the open scopes replaced (this thread's)

    def __init__(self):
        self.stack = []


_state = _ScopeState()
_observer_added = [False]


def current_name_scope() -> str:
    """The name prefix of this thread's open scopes (``""`` outside any)."""
    return _state.prefix


def _prefix_new_variable(var):
    """(a variable observer) A Variable made inside a scope: its name gets the prefix."""
    prefix = _state.prefix
    if prefix:
        var._name = prefix + var._name


class name_scope:
    """``tf.name_scope(name)``: Variables made inside are named ``name/<their name>``.

    ``with tf.name_scope("a") as scope:`` gives ``scope == "a/"`` (the full prefix when
    nested). A name ending in ``/`` is absolute (it replaces the enclosing scopes); an
    empty name is the root. The same object may be entered again, also from several
    threads (each thread has its own scopes). Works eagerly and inside ``tf.function``
    (it names Variables; tapeflow's traced graphs do not name their ops).

    >>> import tapeflow as tf
    >>> with tf.name_scope("a"):
    ...     with tf.name_scope("b/") as s:
    ...         pass
    >>> s
    'b/'
    >>> tf.name_scope(3)
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidArgumentError: tf.name_scope: name must be a string, got 3 (int) ...
    """

    __slots__ = ("_name",)

    def __init__(self, name):
        if not isinstance(name, str):
            raise InvalidArgumentError(
                f"tf.name_scope: name must be a string, got {name!r} ({type(name).__name__})")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __enter__(self) -> str:
        if not _observer_added[0]:
            _ctx.add_variable_observer(_prefix_new_variable)
            _observer_added[0] = True
        st = _state
        prev = st.prefix
        name = self._name
        new = name if (not name or name.endswith("/")) else f"{prev}{name}/"
        st.stack.append(prev)
        st.prefix = new
        return new

    def __exit__(self, *exc):
        st = _state
        st.prefix = st.stack.pop() if st.stack else ""
        return False


# --- names ----------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def camel_to_snake(name: str) -> str:
    """``"MyModule"`` -> ``"my_module"``, ``"HTTPServer2"`` -> ``"http_server2"``."""
    s = re.sub(r"(.)([A-Z][a-z0-9]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def _check_name(name, cls):
    if not isinstance(name, str):
        raise InvalidTypeError(
            f"{cls.__name__}: a module name must be a string, got {name!r} "
            f"({type(name).__name__})")
    if not _IDENTIFIER.match(name):
        raise InvalidArgumentError(
            f"{cls.__name__}: {name!r} is not a valid module name: module names must be "
            "valid Python identifiers (letters, digits and '_', not starting with a digit), "
            "e.g. 'dense_1'")
    return name


# --- tracked containers -----------------------------------------------------------------------

#: ``fn(obj)``, called when a Module, a ListWrapper or a DictWrapper gets a new attribute or
#: item (tf.train.Checkpoint sets it: values of a checkpoint restored before the object
#: existed are assigned then -- deferred restoration). None until checkpoints are imported.
_attach_observer = [None]


def set_attach_observer(fn) -> None:
    """Install the function called with an object that got a new attribute or item."""
    _attach_observer[0] = fn


def _attached(obj):
    fn = _attach_observer[0]
    if fn is not None:
        fn(obj)


def is_trackable(value) -> bool:
    """Whether a checkpoint saves something of ``value``: a Variable, an object with
    checkpointed children or state (a Module, a layer, an optimizer, a ``tf.data``
    iterator, a ``tf.train.Checkpoint``), or a list, tuple or dict holding one."""
    if isinstance(value, Variable) or hasattr(value, "_trackable_children") or hasattr(
            value, "_serialize_to_tensors"):
        return True
    if isinstance(value, (list, tuple)):
        return any(is_trackable(v) for v in value)
    if isinstance(value, dict):
        return any(is_trackable(v) for v in value.values())
    return False


def wrap(value):
    """A plain list or dict as the tracked ``ListWrapper`` / ``DictWrapper`` (other values,
    and lists and dicts already wrapped, as they are)."""
    t = type(value)
    if t is list:
        return ListWrapper(value)
    if t is dict:
        return DictWrapper(value)
    return value


class ListWrapper(list):
    """A list attribute of a ``tf.Module`` or ``tf.train.Checkpoint`` (TensorFlow's
    ``ListWrapper``): a list whose trackable items a checkpoint saves under their index
    (``name/0``), and whose later items a pending restore reaches. Lists and dicts in it
    are wrapped too."""

    def __init__(self, items=()):
        super().__init__(wrap(v) for v in items)

    def append(self, value):
        list.append(self, wrap(value))
        _attached(self)

    def _trackable_children(self) -> dict:
        return {str(i): v for i, v in enumerate(self) if is_trackable(v)}

    def __repr__(self):
        return f"ListWrapper({list.__repr__(self)})"

    def __reduce_ex__(self, protocol):         # (copied and pickled as a plain list)
        return list, (list(self),)


class DictWrapper(dict):
    """A dict attribute of a ``tf.Module`` or ``tf.train.Checkpoint`` (TensorFlow's
    ``_DictWrapper``): trackable values are saved under their key (``name/key``)."""

    def __init__(self, items=()):
        super().__init__((k, wrap(v)) for k, v in dict(items).items())

    def __setitem__(self, key, value):
        dict.__setitem__(self, key, wrap(value))
        _attached(self)

    def _trackable_children(self) -> dict:
        return {str(k): v for k, v in self.items() if is_trackable(v)}

    def __repr__(self):
        return f"DictWrapper({dict.__repr__(self)})"

    def __reduce_ex__(self, protocol):
        return dict, (dict(self),)


def _notifying(base, name):
    fn = getattr(base, name)

    def method(self, *args, **kwargs):
        r = fn(self, *args, **kwargs)
        _attached(self)
        return r
    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


for _n in ("extend", "insert", "__setitem__", "__iadd__"):
    setattr(ListWrapper, _n, _notifying(list, _n))
for _n in ("update", "setdefault"):
    setattr(DictWrapper, _n, _notifying(dict, _n))
del _n


# --- the attribute walk -----------------------------------------------------------------------

def _leaves(value, path, out, open_containers):
    """Append ``(path, leaf)`` for ``value``: lists and tuples by index (namedtuples by
    field), mappings by sorted key; anything else is a leaf. A container inside itself
    is skipped."""
    if isinstance(value, (list, tuple, Mapping)):
        if id(value) in open_containers:
            return
        open_containers.add(id(value))
        if isinstance(value, Mapping):
            keys = list(value.keys())
            try:
                keys = sorted(keys)
            except TypeError:
                pass
            for k in keys:
                _leaves(value[k], path + (k,), out, open_containers)
        else:
            fields = getattr(value, "_fields", None) if isinstance(value, tuple) else None
            for i, v in enumerate(value):
                _leaves(v, path + ((fields[i] if fields else i),), out, open_containers)
        open_containers.discard(id(value))
    else:
        out.append((path, value))


def _walk(module, recursive, predicate, key, with_path, path, seen, stack):
    """TensorFlow's module walk: this module's leaves first (attributes in ``key`` order),
    then each submodule's, depth first. Without paths, each object is yielded once; a
    module met again inside itself is not entered again."""
    if id(module) in stack:
        recursive = False
    submodules = []
    for name, value in module._walk_items(key):
        leaves = []
        _leaves(value, (name,), leaves, set())
        for leaf_path, leaf in leaves:
            if not with_path:
                if id(leaf) in seen:
                    continue
                seen.add(id(leaf))
            if predicate(leaf):
                yield (path + leaf_path, leaf) if with_path else leaf
            if recursive and isinstance(leaf, Module):
                submodules.append((path + leaf_path, leaf))
    stack.append(id(module))
    for sub_path, sub in submodules:
        yield from _walk(sub, recursive, predicate, key, with_path, sub_path, seen, stack)
    stack.pop()


def _is_variable(x):
    return isinstance(x, Variable)


def _is_module(x):
    return isinstance(x, Module)


# --- tf.Module ---------------------------------------------------------------------------------

class Module:
    """``tf.Module``: a named container of Variables and other Modules, found through its
    attributes (see the module docstring). ``name`` defaults to the class name in snake
    case (``MyModule`` -> ``my_module``) and must be a valid Python identifier.

    >>> import tapeflow as tf
    >>> class Scale(tf.Module):
    ...     def __init__(self):                  # (no super().__init__(): still works)
    ...         self.k = tf.Variable(2.0)
    ...         self.frozen = tf.Variable(1.0, trainable=False)
    ...     @tf.Module.with_name_scope
    ...     def __call__(self, x):
    ...         return x * self.k
    >>> s = Scale()
    >>> s.name, len(s.variables), len(s.trainable_variables), len(s.non_trainable_variables)
    ('scale', 2, 1, 1)
    >>> float(s(3.0))
    6.0
    >>> tf.Module(name="2fast")
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidArgumentError: Module: '2fast' is not a valid module name: \
module names must be valid Python identifiers (letters, digits and '_', not starting with \
a digit), e.g. 'dense_1' ...
    """

    #: attributes the walk and checkpoints skip (the module's own bookkeeping)
    _TF_MODULE_IGNORED_PROPERTIES = frozenset(("_name", "_scope_name", "_name_scope"))
    #: whether ``trainable = False`` freezes the module's variables (Keras layers)
    _freezable = False

    def __init__(self, name=None):
        cls = type(self)
        name = camel_to_snake(cls.__name__) if name is None else _check_name(name, cls)
        d = self.__dict__
        d["_name"] = name
        d["_scope_name"] = f"{_state.prefix}{name}/"     # (fixed now, as in TensorFlow)

    def __setattr__(self, name, value):
        object.__setattr__(self, name, wrap(value))
        _attached(self)

    # --- names -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The module's name (given, or the class name in snake case)."""
        name = self.__dict__.get("_name")
        if name is None:                 # (__init__ not called)
            name = self.__dict__["_name"] = camel_to_snake(type(self).__name__)
        return name

    @property
    def name_scope(self) -> name_scope:
        """The ``tf.name_scope`` of this module (``with self.name_scope:``)."""
        d = self.__dict__
        scope = d.get("_name_scope")
        if scope is None:
            full = d.get("_scope_name") or f"{_state.prefix}{self.name}/"
            scope = d["_name_scope"] = name_scope(full)
        return scope

    @classmethod
    def with_name_scope(cls, method):
        """Decorator: ``method`` runs inside ``self.name_scope`` (Variables it makes are
        named ``<module name>/...``)."""
        @functools.wraps(method)
        def method_with_name_scope(self, *args, **kwargs):
            with self.name_scope:
                return method(self, *args, **kwargs)
        return method_with_name_scope

    # --- the walk ----------------------------------------------------------------------------
    def _walk_items(self, key=None):
        """``(attribute name, value)`` pairs the walk visits, sorted (by ``key``)."""
        ignored = type(self)._TF_MODULE_IGNORED_PROPERTIES
        d = vars(self)
        return [(k, d[k]) for k in sorted(d, key=key) if k not in ignored]

    def _flatten(self, recursive=True, predicate=None, attribute_traversal_key=None,
                 with_path=False, expand_composites=False):
        """Iterate what the module holds (``predicate(x)`` true; default: everything),
        walking its attributes and, with ``recursive``, its submodules'. With
        ``with_path``, yields ``(path, x)`` where path is the tuple of attribute names,
        indices and keys that lead to ``x`` (then an object reached twice comes twice)."""
        if predicate is None:
            predicate = _always
        elif not callable(predicate):
            raise InvalidTypeError(f"Module._flatten: predicate must be callable, got "
                                   f"{predicate!r}")
        return _walk(self, recursive, predicate, attribute_traversal_key, with_path, (),
                     {id(self)}, [])

    @property
    def variables(self) -> tuple:
        """Every Variable of this module and its submodules (each once), in walk order."""
        return tuple(self._flatten(predicate=_is_variable))

    @property
    def trainable_variables(self) -> tuple:
        """The trainable Variables (``trainable=True``; not those of frozen Keras layers)."""
        frozen = {id(v) for m in self._flatten(predicate=_is_frozen_layer) for v in m.variables}
        return tuple(v for v in self.variables if v.trainable and id(v) not in frozen)

    @property
    def non_trainable_variables(self) -> tuple:
        trainable = {id(v) for v in self.trainable_variables}
        return tuple(v for v in self.variables if id(v) not in trainable)

    @property
    def submodules(self) -> tuple:
        """Every Module reachable from this one (not itself), each once, in walk order."""
        return tuple(self._flatten(predicate=_is_module))

    # --- what checkpoints and Keras layers see ----------------------------------------------
    def _trackable_children(self) -> dict:
        """``{attribute: value}`` a ``tf.train.Checkpoint`` saves (Variables, Modules and
        other trackable objects, and containers holding them), in assignment order."""
        ignored = type(self)._TF_MODULE_IGNORED_PROPERTIES
        return {k: v for k, v in vars(self).items() if k not in ignored and (
            isinstance(v, (ListWrapper, DictWrapper)) or is_trackable(v))}

    def _iter_children(self):
        """``(path, Variable or Module)`` directly in this module's attributes (what a
        Keras layer holding this module walks)."""
        for path, obj in self._flatten(recursive=False, predicate=_is_tracked_child,
                                       with_path=True):
            yield "/".join(str(p) for p in path), obj

    def _collect(self, out, seen, trainable):
        """Append ``(Variable, trainable)`` for this module's Variables not in ``seen``."""
        train = {id(v) for v in self.trainable_variables} if trainable else ()
        for v in self.variables:
            if id(v) not in seen:
                seen.add(id(v))
                out.append((v, id(v) in train))


def _always(x):
    return True


def _is_tracked_child(x):
    return isinstance(x, (Variable, Module))


def _is_frozen_layer(x):
    return isinstance(x, Module) and x._freezable and x.__dict__.get("trainable") is False
