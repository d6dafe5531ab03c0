"""``Layer``: the base of every layer and model (``tf.layers.Layer``, ``tf.keras.layers.Layer``),
and its dtype policy (``Policy``).

Long file: what every layer call goes through -- the dtype policy, attribute tracking,
variable creation and its name scopes, Keras's masks and the one ``__call__`` -- kept
together so the hot path reads in one place.

A layer creates its Variables in ``build(input_shape)``, called once, on the first
call, with the shape of the first input; ``call(inputs[, training])`` is the
computation. ``__call__`` converts the input, builds, and calls ``call`` -- passing
``training`` only when ``call`` takes it -- with nothing else on the hot path.

Attributes are tracked: assigning a Layer, a Variable, or a list/tuple/dict of them
to ``self.<name>`` makes it part of the layer, so ``variables``,
``trainable_variables`` and ``_trackable_children()`` (what ``tf.train.Checkpoint``
walks) see it. ``variables`` are ordered by creation.

>>> import tapeflow as tf
>>> class MySimpleLayer(tf.keras.layers.Layer):
...     def __init__(self, output_units):
...         super(MySimpleLayer, self).__init__()
...         self.output_units = output_units
...     def build(self, input_shape):
...         self.kernel = self.add_variable("kernel", [input_shape[-1], self.output_units])
...     def call(self, input):
...         return tf.matmul(input, self.kernel)
>>> layer = MySimpleLayer(3)
>>> layer(tf.ones([2, 5])).shape
TensorShape([2, 3])
>>> [v.shape.as_list() for v in layer.variables]
[[5, 3]]

Every layer has a **dtype policy** (``tf.keras.mixed_precision``; this module defines
it): which dtype the layer computes in and which its variables are kept in.
``"float32"`` (the default; also ``"float16"``, ``"bfloat16"``, ``"float64"``: compute
and variables in that dtype) or ``"mixed_float16"`` / ``"mixed_bfloat16"``: the layer
computes in the 16-bit type (inputs and variables are cast to it in the layer's call)
and keeps float32 variables, so small updates are not rounded away. Losses compute in
float32 (``Model.fit`` casts predictions up), and the last layer of a classifier usually
gets ``dtype="float32"`` so its softmax runs in float32, as in Keras.

>>> p = tf.keras.mixed_precision.Policy("mixed_bfloat16")
>>> p.compute_dtype, p.variable_dtype
('bfloat16', 'float32')
>>> tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
>>> layer = tf.keras.layers.Dense(2)
>>> y = layer(tf.ones((1, 3)))
>>> y.dtype, layer.kernel.dtype
(tf.bfloat16, tf.float32)
>>> tf.keras.mixed_precision.set_global_policy("float32")
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import threading
import weakref

import numpy as np

from ..errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from .. import dtypes as _dt
from ..runtime.devices import current_device
from ..runtime.dispatch import convert_to_tensor, copy_to_device
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..module import Module, name_scope
from . import activations
from . import initializers
from . import regularizers
from .naming import snake_case
from ..ops import math as _math_mod
from ..ops.composite import CompositeTensor

__all__ = ["Layer", "variable_creator_scope", "reset_uids", "unique_layer_name", "Policy",
           "global_policy", "set_global_policy", "POLICY_NAMES", "get_mask", "set_mask",
           "weight_scope"]

# --- dtype policies (tf.keras.mixed_precision) ----------------------------------------

_MIXED = {"mixed_float16": _dt.float16, "mixed_bfloat16": _dt.bfloat16}
_PLAIN = ("float32", "float16", "bfloat16", "float64")
#: every name a Policy accepts
POLICY_NAMES = tuple(_MIXED) + _PLAIN


class Policy:
    """A dtype policy: ``Policy("mixed_bfloat16")`` computes in bfloat16 with float32
    variables; a plain float dtype name uses that dtype for both. An unknown name raises
    InvalidArgumentError listing the valid ones.

    >>> Policy("mixed_float16")
    <Policy "mixed_float16">
    >>> Policy("float32").compute_dtype
    'float32'
    """

    __slots__ = ("_name", "_compute", "_variable")

    def __init__(self, name):
        if isinstance(name, Policy):
            name = name.name
        if not isinstance(name, str):
            raise InvalidTypeError("Policy name must be a string (one of "
                                   f"{', '.join(POLICY_NAMES)}), got {name!r}")
        if name in _MIXED:
            self._compute, self._variable = _MIXED[name], _dt.float32
        elif name in _PLAIN:
            self._compute = self._variable = _dt.as_dtype(name)
        else:
            raise InvalidArgumentError(
                f"Unknown dtype policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype layers compute in (a name, as in Keras)."""
        return self._compute.name

    @property
    def variable_dtype(self) -> str:
        """The dtype layers create their variables in (a name, as in Keras)."""
        return self._variable.name

    @property
    def is_mixed(self) -> bool:
        return self._compute is not self._variable

    def __eq__(self, other):
        return isinstance(other, Policy) and other._name == self._name

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f'<Policy "{self._name}">'

    def get_config(self):
        return {"name": self._name}


_DEFAULT = Policy("float32")
_global = [_DEFAULT]


def global_policy() -> Policy:
    """The policy new layers get when they are not given a ``dtype`` (``float32``
    unless :func:`set_global_policy` changed it)."""
    return _global[0]


def set_global_policy(policy):
    """Set the policy of layers created from now on: a :class:`Policy`, one of its
    names, or ``None`` (back to ``"float32"``). Existing layers keep theirs.

    >>> set_global_policy("mixed_float16"); global_policy().compute_dtype
    'float16'
    >>> set_global_policy(None); global_policy().name
    'float32'
    >>> set_global_policy("mixed_fp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidArgumentError: Unknown dtype policy 'mixed_fp16'; valid policies: ...
    """
    _global[0] = _DEFAULT if policy is None else (
        policy if isinstance(policy, Policy) else Policy(policy))


def as_policy(dtype):
    """The Policy of a layer's ``dtype=`` argument: None (the global policy), a Policy,
    a policy name, or a float dtype (variables and compute in it)."""
    if dtype is None:
        return global_policy()
    if isinstance(dtype, Policy):
        return dtype
    if isinstance(dtype, str) and dtype in _MIXED:
        return Policy(dtype)
    d = _dt.as_dtype(dtype)
    p = Policy.__new__(Policy)
    p._name, p._compute, p._variable = d.name, d, d
    return p


# --- bookkeeping shared by all layers --------------------------------------------------

#: bumped whenever any layer's set of tracked objects (or a ``trainable`` flag) changes;
#: layers cache their variable lists against it
_VERSION = [0]


def bump_name_counter():
    _VERSION[0] += 1


_NAME_UIDS: dict = {}


def unique_layer_name(base: str) -> str:
    """``base``, then ``base_1``, ``base_2`` ... (Keras's ``dense``, ``dense_1``)."""
    n = _NAME_UIDS.get(base, 0)
    _NAME_UIDS[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def reset_uids() -> None:
    """Restart automatic layer names (``tf.keras.backend.clear_session()``)."""
    _NAME_UIDS.clear()


_snake = snake_case     # (the name losses.py and metrics.py import)


class _Ctx(threading.local):
    training = None     # the innermost explicit `training=` of an enclosing layer call


_ctx = _Ctx()

# --- variable creation (hook for restore-on-create) -----------------------------------

_creators: list = []


@contextlib.contextmanager
def variable_creator_scope(creator):
    """Route Variables created by layers through ``creator(next_creator, **kwargs)``.

    ``kwargs`` are ``initial_value`` (a callable returning the initial Tensor),
    ``name`` (``"dense/kernel"``), ``trainable``, ``dtype``, ``shape`` and
    ``aggregation`` (``add_weight``'s, for ``tf.distribute``);
    ``next_creator(**kwargs)`` makes the Variable. The innermost scope runs first.
    This is how a checkpoint can give new layer variables their saved values.
    """
    _creators.append(creator)
    try:
        yield
    finally:
        _creators.remove(creator)


def weight_scope(name):
    """Prefix the names of the weights layers create inside it with ``name/``: it is
    ``tf.name_scope(name)`` (an LSTM layer builds its cell inside
    ``weight_scope("lstm")``, so the cell's kernel is ``lstm/lstm_cell/kernel:0``).
    Scopes nest.

    >>> import tapeflow as tf
    >>> from tapeflow.layers.base import weight_scope
    >>> layer = tf.keras.layers.Dense(1, name="inner")
    >>> with weight_scope("outer"):
    ...     layer.build([None, 2])
    >>> layer.kernel.name
    'outer/inner/kernel:0'
    """
    return name_scope(name)


# --- masks (Keras's implicit masks: Embedding(mask_zero=True), Masking) -----------------
#
# A Tensor has __slots__ (no ``_keras_mask`` attribute), so a layer's output mask lives in
# this side table: id(tensor) -> (weak reference to the tensor, mask). The entry goes when
# the tensor does. While the table is empty, Layer.__call__ does no mask work at all.

_MASKS: dict = {}


def _forget(key):
    return lambda ref: _MASKS.pop(key, None)


def set_mask(tensor, mask):
    """Attach ``mask`` (a boolean ``[batch, time]`` Tensor, or None to remove one) to
    ``tensor``, as Keras's ``tensor._keras_mask``: the next layer called on ``tensor``
    receives it."""
    if not isinstance(tensor, Tensor):
        return
    key = id(tensor)
    if mask is None:
        _MASKS.pop(key, None)
        return
    _MASKS[key] = (weakref.ref(tensor, _forget(key)), mask)


def get_mask(tensor):
    """The mask a layer attached to ``tensor`` (None if none): Keras's ``_keras_mask``.

    >>> import tapeflow as tf
    >>> from tapeflow.layers.base import get_mask
    >>> emb = tf.keras.layers.Embedding(10, 2, mask_zero=True)
    >>> y = emb(tf.constant([[3, 1, 0]]))
    >>> get_mask(y).numpy().tolist()
    [[True, True, False]]
    """
    if not _MASKS:
        return None
    if isinstance(tensor, (list, tuple)):
        masks = [get_mask(t) for t in tensor]
        return None if all(m is None for m in masks) else masks
    entry = _MASKS.get(id(tensor))
    if entry is None or entry[0]() is not tensor:
        return None
    return entry[1]


def _base_creator(initial_value=None, name=None, trainable=True, dtype=None, aggregation=None,
                  **_):
    return Variable(initial_value, name=name, trainable=trainable, dtype=dtype,
                    aggregation=aggregation)


def _chain(creator, next_creator):
    return lambda **kw: creator(next_creator, **kw)


def _make_variable(**kwargs):
    fn = _base_creator
    for c in _creators:                 # outermost first; the innermost ends up called first
        fn = _chain(c, fn)
    return fn(**kwargs)


# --- tracked containers -------------------------------------------------------------------

def _is_tracked_leaf(v):
    return isinstance(v, (Module, Variable))


def _has_trackables(seq):
    return any(_is_tracked_leaf(v) or isinstance(v, (list, tuple, dict)) and _has_trackables(
        v.values() if isinstance(v, dict) else v) for v in seq)


class TrackedList(list):
    """A list attribute of a Layer: mutating it updates the layer's variables (the base
    of ``tf.contrib.checkpoint.List``)."""


class TrackedDict(dict):
    """A dict attribute of a Layer: mutating it updates the layer's variables."""


def _bumping(base, name):
    fn = getattr(base, name)

    def method(self, *args, **kwargs):
        r = fn(self, *args, **kwargs)
        bump_name_counter()
        return r
    method.__name__ = name
    return method


for _n in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
           "__setitem__", "__delitem__", "__iadd__"):
    setattr(TrackedList, _n, _bumping(list, _n))
for _n in ("__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault"):
    setattr(TrackedDict, _n, _bumping(dict, _n))
del _n


def _wrap_container(value):
    t = type(value)
    if t is list:
        if not value or _has_trackables(value):
            return TrackedList(value)
        return None
    if t is dict:
        if not value or _has_trackables(value.values()):
            return TrackedDict(value)
        return None
    if t is tuple and _has_trackables(value):
        return value
    if isinstance(value, (TrackedList, TrackedDict)):   # (tf.contrib.checkpoint.List/Dict too)
        return value
    return None


def _items(key, value):
    """(path, Layer-or-Variable) pairs of an attribute value (containers flattened)."""
    if isinstance(value, (Module, Variable)):
        yield key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _items(f"{key}/{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _items(f"{key}/{i}", v)


_TAKES_TRAINING: dict = {}


def _takes_training(cls):
    """0: ``call`` takes no ``training``; 1: it takes one with a default (or ``**kwargs``);
    2: it requires one."""
    r = _TAKES_TRAINING.get(cls)
    if r is None:
        try:
            params = inspect.signature(cls.call).parameters
        except (TypeError, ValueError):
            r = 0
        else:
            t = params.get("training")
            if t is not None:
                # 2: `training` has no default, so call() always gets one (False if none)
                r = 2 if t.default is inspect.Parameter.empty else 1
            else:
                r = int(any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()))
        _TAKES_TRAINING[cls] = r
    return r


_TAKES_MASK: dict = {}


def _takes_mask(cls):
    """Whether ``cls.call`` takes a ``mask`` argument."""
    r = _TAKES_MASK.get(cls)
    if r is None:
        try:
            r = "mask" in inspect.signature(cls.call).parameters
        except (TypeError, ValueError):
            r = False
        _TAKES_MASK[cls] = r
    return r


_KNOWN_KWARGS = {"autocast", "dynamic", "_scope", "_reuse"}

#: set by tapeflow.functional: ``fn(layer, inputs, args, kwargs)`` records a layer called
#: on symbolic tensors (tf.keras.Input) and returns symbolic outputs, else NotImplemented
SYMBOLIC_CALL = [None]


def _holds_tensor(x):
    """Whether the list/tuple ``x`` holds a Tensor or Variable, at any depth."""
    return any(isinstance(e, (Tensor, Variable))
               or isinstance(e, (list, tuple)) and _holds_tensor(e)
               or isinstance(e, dict) and _holds_tensor(list(e.values())) for e in x)


def _annotate(exc, layer):
    """Name the layer (and each enclosing one) in an error's traceback notes."""
    add = getattr(exc, "add_note", None)        # Python 3.11+
    note = f"(while calling layer {layer.name!r} of type {type(layer).__name__})"
    if add is not None and note not in getattr(exc, "__notes__", ()):
        add(note)


# --- automatic configs (Keras 3's get_config from the constructor's arguments) ---------------

_SHAPE_KEYS = ("input_shape", "batch_input_shape", "input_dim")


def _plain(value):
    """A config value as Keras writes it: tapeflow's activation functions (``tf.nn.relu``
    too) by their names."""
    name = getattr(value, "__name__", None)
    if (isinstance(name, str) and callable(value) and not isinstance(value, type)
            and str(getattr(value, "__module__", "")).startswith("tapeflow.")):
        try:
            activations.get(name)
        except InvalidArgumentError:
            return value
        return name
    return value


def auto_config(layer, base):
    """``base`` updated with the arguments ``layer``'s constructor was called with
    (defaults included), its input shape as ``batch_input_shape``; ``base``'s keys the
    constructor cannot take are dropped. Raises NotImplementedError when the arguments
    cannot be named (positional-only or ``*args``)."""
    args, kwargs = layer.__dict__.get("_init_args", ((), {}))
    cls = type(layer)
    try:
        sig = inspect.signature(cls.__init__)
        bound = sig.bind(None, *args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    params = list(sig.parameters.values())[1:] if bound is not None else []
    kinds = {p.kind for p in params}
    if bound is None or inspect.Parameter.POSITIONAL_ONLY in kinds or (
            inspect.Parameter.VAR_POSITIONAL in kinds and any(
                bound.arguments.get(p.name) for p in params
                if p.kind is inspect.Parameter.VAR_POSITIONAL)):
        raise NotImplementedError(
            f"{cls.__name__}.get_config: the constructor's arguments cannot be named "
            "(positional-only or *args); define get_config() (and from_config()) to make "
            f"{cls.__name__} serializable")
    bound.apply_defaults()
    cfg = {k: v for k, v in base.items()
           if k in sig.parameters or inspect.Parameter.VAR_KEYWORD in kinds}
    for p in params:
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            cfg.update(bound.arguments.get(p.name, {}))
        elif p.kind is not inspect.Parameter.VAR_POSITIONAL and p.name not in base:
            cfg[p.name] = bound.arguments[p.name]
    for k in _SHAPE_KEYS:           # (the base class's; Embedding's input_dim is its own)
        if k not in sig.parameters:
            cfg.pop(k, None)
    if layer._batch_input_shape is not None and (
            inspect.Parameter.VAR_KEYWORD in kinds or "batch_input_shape" in sig.parameters):
        cfg["batch_input_shape"] = list(layer._batch_input_shape)
    return {k: _plain(v) for k, v in cfg.items()}


def build_config_of(inputs):
    """``{"input_shape": [...], "dtype": ...}`` of a layer's first input (a list of them
    for a list of inputs), what a loaded model is built from; None if not tensors."""
    if isinstance(inputs, (list, tuple)):
        specs = [build_config_of(x) for x in inputs]
        return None if any(s is None for s in specs) else {"inputs": specs}
    shape = getattr(inputs, "shape", None)
    dtype = getattr(inputs, "dtype", None)
    if shape is None or dtype is None:
        return None
    return {"input_shape": [None if d is None else int(d) for d in shape],
            "dtype": getattr(dtype, "name", str(dtype))}


# --- Layer ----------------------------------------------------------------------------------

class Layer(Module):
    """Base class of layers and models; a ``tf.Module`` (``name_scope``,
    ``with_name_scope``, ``_flatten``), with its own tracking, below.

    Subclasses implement ``build(input_shape)`` (optional: create Variables with
    ``add_weight``/``add_variable`` once the input's shape is known) and
    ``call(inputs[, training])``. Constructor keywords: ``trainable``, ``name``
    (default: the class name in snake case, made unique: ``dense``, ``dense_1``),
    ``dtype`` (a dtype policy or its name, e.g. ``"mixed_bfloat16"``: compute in
    bfloat16, keep float32 variables; or a dtype, for both; default: the global policy,
    ``tf.keras.mixed_precision.global_policy()``), and ``input_shape`` /
    ``batch_input_shape`` / ``input_dim`` (used by ``Sequential`` to build at once).
    """

    #: leaf layers never call other layers, so they skip the training-context push
    _leaf = False
    #: whether the layer passes a mask it receives on to its output (Keras's attribute);
    #: a layer whose ``call`` takes ``mask`` gets it either way
    supports_masking = False
    #: True on layers that make a mask of their own (Embedding(mask_zero=True), Masking):
    #: their calls always take the masked path of ``__call__``
    _makes_mask = False
    #: (tf.Module) a Module holding a layer leaves out its variables when it is frozen
    _freezable = True

    def __new__(cls, *args, **kwargs):
        # the constructor's arguments, kept for get_config (Keras 3's automatic config)
        obj = super().__new__(cls)
        obj.__dict__["_init_args"] = (args, dict(kwargs))
        return obj

    def __init__(self, trainable=True, name=None, dtype=None, input_shape=None,
                 batch_input_shape=None, input_dim=None, activity_regularizer=None, **kwargs):
        unknown = set(kwargs) - _KNOWN_KWARGS
        if unknown:
            raise InvalidTypeError(f"{type(self).__name__}: keyword argument(s) not understood: "
                            + ", ".join(sorted(unknown)))
        if activity_regularizer is not None:
            raise NotImplementedError("activity_regularizer is not supported")
        d = self.__dict__
        d["_tracked"] = {}
        d["_own_weights"] = []          # [(short name, Variable)] made by add_weight
        d["_regularizers"] = []         # [(fn, Variable)]
        d["_cache"] = None
        d["_input_device"] = None       # where host inputs are copied (the weights' device)
        d["_in_call_build"] = False
        d["built"] = False
        d["trainable"] = bool(trainable)
        d["_name"] = name if name else unique_layer_name(snake_case(type(self).__name__))
        policy = as_policy(dtype)
        d["_policy"] = policy
        d["_dtype"] = policy._variable            # of the variables
        d["_compute"] = policy._compute           # of the computation
        d["_mixed"] = policy._compute is not policy._variable
        if batch_input_shape is None and input_shape is not None:
            batch_input_shape = (None,) + tuple(input_shape)
        if batch_input_shape is None and input_dim is not None:
            batch_input_shape = (None, int(input_dim))
        d["_batch_input_shape"] = (None if batch_input_shape is None
                                   else tuple(batch_input_shape))
        d["_expects_training"] = _takes_training(type(self))
        bump_name_counter()

    # --- attribute tracking ---------------------------------------------------------------
    def __setattr__(self, name, value):
        d = self.__dict__
        tracked = d.get("_tracked")
        if tracked is None:
            if _is_tracked_leaf(value):
                raise FailedPreconditionError(
                    f"{type(self).__name__}: call super().__init__() before assigning layers "
                    "or Variables to attributes")
            object.__setattr__(self, name, value)
            return
        if _is_tracked_leaf(value):
            tracked[name] = value
            bump_name_counter()
        elif getattr(type(value), "_tapeflow_no_dependency", False):
            value = value.value           # tf.contrib.checkpoint.NoDependency: untracked
            if tracked.pop(name, None) is not None:
                bump_name_counter()
        else:
            wrapped = _wrap_container(value)
            if wrapped is not None:
                value = wrapped
                tracked[name] = value
                bump_name_counter()
            elif name in tracked:
                del tracked[name]
                bump_name_counter()
            elif name == "trainable":
                value = bool(value)
                bump_name_counter()
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        tracked = self.__dict__.get("_tracked")
        if tracked is not None and name in tracked:
            del tracked[name]
            bump_name_counter()
        object.__delattr__(self, name)

    def _child_items(self):
        """(key, Layer-or-Variable) pairs of tracked attributes; public names first."""
        tracked = self._tracked
        for key in sorted(tracked, key=lambda k: k.startswith("_")):
            yield from _items(key, tracked[key])

    def _iter_children(self):
        yield from self._own_weights
        yield from self._child_items()

    def _trackable_children(self) -> dict:
        """``{name: Variable or Layer}``: this layer's weights (by their short names,
        ``kernel``) and tracked attributes (lists as ``name/0``, ``name/1``), each object
        once. What ``tf.train.Checkpoint`` walks to name variables by path."""
        out = {}
        seen = set()
        for key, obj in self._iter_children():
            if id(obj) not in seen:
                seen.add(id(obj))
                out[key] = obj
        return out

    def _walk_items(self, key=None):
        """(``tf.Module``'s walk: ``_flatten``) the tracked children, sorted by name."""
        children = self._trackable_children()
        return [(k, children[k]) for k in sorted(children, key=key)]

    def _collect(self, out, seen, trainable):
        trainable = trainable and self.trainable
        for _, obj in self._iter_children():
            i = id(obj)
            if i in seen:
                continue
            seen.add(i)
            if isinstance(obj, Variable):
                out.append((obj, trainable))
            else:
                obj._collect(out, seen, trainable)

    def _var_pairs(self):
        c = self.__dict__["_cache"]
        if c is not None and c[0] == _VERSION[0]:
            return c[1]
        out = []
        self._collect(out, {id(self)}, True)
        out.sort(key=lambda p: getattr(p[0], "_id", 0))     # creation order (stable)
        self.__dict__["_cache"] = (_VERSION[0], out)
        return out

    # --- properties -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self):
        """The dtype of the layer's variables (``variable_dtype``, as in Keras)."""
        return self._dtype

    @property
    def dtype_policy(self):
        """The layer's :class:`~tapeflow.keras.mixed_precision.Policy`."""
        return self._policy

    @property
    def compute_dtype(self):
        """The dtype the layer computes in: its float inputs and variables are cast to it."""
        return self._compute

    @property
    def variable_dtype(self):
        return self._dtype

    def _read(self, var):
        """``var``'s value for the computation: cast to the compute dtype under a mixed
        policy (the cast is differentiable: the gradient reaches the float32 Variable)."""
        v = var.read_value()
        if self._mixed and v.dtype is self._dtype:
            return _math_mod.cast(v, self._compute)
        return v

    @property
    def variables(self) -> list:
        """Every Variable of this layer and its sublayers, in creation order."""
        return [v for v, _ in self._var_pairs()]

    weights = variables

    @property
    def trainable_variables(self) -> list:
        """The Variables an optimizer should update: trainable Variables of trainable
        layers (BatchNormalization's moving statistics are not among them)."""
        return [v for v, t in self._var_pairs() if t and v.trainable]

    trainable_weights = trainable_variables

    @property
    def non_trainable_variables(self) -> list:
        return [v for v, t in self._var_pairs() if not (t and v.trainable)]

    non_trainable_weights = non_trainable_variables

    @property
    def submodules(self) -> list:
        out, seen = [], {id(self)}

        def walk(layer):
            for _, obj in layer._iter_children():
                if isinstance(obj, Module) and id(obj) not in seen:
                    seen.add(id(obj))
                    out.append(obj)
                    walk(obj)
        walk(self)
        return out

    @property
    def losses(self) -> list:
        """Regularization losses of this layer and its sublayers (computed now)."""
        out = [fn(v) for fn, v in self._regularizers]
        for layer in self.submodules:
            out.extend(fn(v) for fn, v in getattr(layer, "_regularizers", ()))
        return out

    def count_params(self) -> int:
        return int(sum(int(np.prod(v.shape)) for v in self.variables))

    def get_weights(self) -> list:
        return [v.numpy() for v in self.variables]

    def set_weights(self, weights) -> None:
        vs = self.variables
        weights = list(weights)
        if len(weights) != len(vs):
            raise InvalidArgumentError(f"{self.name}: set_weights got {len(weights)} arrays for "
                             f"{len(vs)} variables")
        for v, w in zip(vs, weights):
            v.assign(w)

    # --- weights --------------------------------------------------------------------------
    def add_weight(self, name=None, shape=None, dtype=None, initializer=None, regularizer=None,
                   trainable=None, constraint=None, partitioner=None, use_resource=None,
                   synchronization=None, aggregation=None, **kwargs):
        """Create a Variable ``<layer name>/<name>:0`` of ``shape`` on the current device
        (the ``tf.device`` scope's, else the default device), initialised by
        ``initializer`` (a name such as ``"glorot_uniform"``/``"zeros"``, a callable
        ``(shape, dtype) -> Tensor``, or a value; default glorot_uniform for floats,
        zeros otherwise)."""
        if constraint is not None:
            raise NotImplementedError("weight constraints are not supported")
        if partitioner is not None:
            raise NotImplementedError("partitioned variables are not supported")
        name = name or f"weight_{len(self._own_weights)}"
        dt = _dt.as_dtype(dtype) if dtype is not None else self._dtype
        shp = () if shape is None else tuple(shape)
        if any(s is None for s in shp):
            raise InvalidArgumentError(f"{self.name}: the shape of weight {name!r} must be fully "
                             f"defined, got {shp}")
        shp = tuple(int(s) for s in shp)
        if initializer is None:
            initializer = "glorot_uniform" if dt.is_floating else "zeros"
        init = initializers.get(initializer)
        var = _make_variable(initial_value=lambda: init(shp, dtype=dt),
                             name=f"{self.name}/{name}",
                             trainable=True if trainable is None else bool(trainable),
                             dtype=dt, shape=shp, aggregation=aggregation)
        self._own_weights.append((name, var))
        reg = regularizers.get(regularizer)
        if reg is not None:
            self._regularizers.append((reg, var))
        bump_name_counter()
        return var

    add_variable = add_weight

    # --- calling ---------------------------------------------------------------------------
    def build(self, input_shape):
        """Create the layer's Variables; called once with the first input's shape."""
        self.__dict__["built"] = True

    def call(self, inputs, *args, **kwargs):
        return inputs

    def _convert_input(self, x):
        if isinstance(x, (Tensor, CompositeTensor)):    # (a SparseTensor, a RaggedTensor)
            return x
        if isinstance(x, Variable):
            return x.read_value()
        if isinstance(x, (list, tuple)) and _holds_tensor(x) or (
                type(x) is tuple and any(isinstance(e, np.ndarray) for e in x)):
            # a structure of tensors (spinn's list of lists of tensors, a state tuple):
            # each element converted on its own, the structure kept
            items = [self._convert_input(e) for e in x]
            return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
        if isinstance(x, dict):
            return {k: self._convert_input(v) for k, v in x.items()}
        if x is None:
            return None
        t = convert_to_tensor(x)
        if t.dtype.is_floating and t.dtype is not self._compute:
            cast = _math_mod.cast
            t = cast(t, self._compute)
        return t

    def _autocast(self, t):
        """A float Tensor input in the compute dtype: under a mixed policy any float
        input, otherwise a 16-bit float input of a wider layer (a float32 softmax after
        bfloat16 layers)."""
        dt = t.dtype
        if dt.is_floating and dt is not self._compute and (
                self._mixed or (dt.size == 2 and self._compute.is_floating)):
            return _math_mod.cast(t, self._compute)
        return t

    def _own_device(self):
        for _, v in self._own_weights:
            return v._device
        for v in self._tracked.values():
            if isinstance(v, Variable):
                return v._device
        return None

    def _build_on_call(self, inputs):
        if isinstance(inputs, Tensor):
            shape = inputs.shape
        elif isinstance(inputs, (list, tuple)):
            shape = [getattr(x, "shape", None) for x in inputs]
        else:
            shape = getattr(inputs, "shape", None)
        d = self.__dict__
        d["_in_call_build"] = True
        try:
            self.build(shape)
        finally:
            d["_in_call_build"] = False
        d["built"] = True
        d["_input_device"] = self._own_device()
        d["_build_config"] = build_config_of(inputs)      # (rebuilt from it on load)
        bump_name_counter()
        # A checkpoint restored before this layer had variables left their values pending
        # on it (tf.train.Checkpoint's deferred restoration): assign them now, before use.
        ckpt = sys.modules.get("tapeflow.train.checkpoint")
        if ckpt is not None:
            ckpt.restore_deferred(self)

    # --- config (Keras serialization) ------------------------------------------------------
    def get_config(self) -> dict:
        """The constructor arguments that rebuild this layer (``from_config``): ``name``,
        ``trainable`` and ``dtype`` (the policy's name), and -- where the class does not
        define its own ``get_config`` -- the arguments its constructor was called with
        (defaults included; activation functions by name), as Keras 3 does. A layer
        whose constructor got positional-only or ``*args`` arguments has no automatic
        config: define ``get_config``."""
        cfg = {"name": self.name, "trainable": self.trainable, "dtype": self._policy.name}
        if type(self).get_config is Layer.get_config:
            cfg = auto_config(self, cfg)
        return cfg

    @classmethod
    def from_config(cls, config):
        """A new (unbuilt) layer from ``get_config()``'s dict."""
        return cls(**config)

    # --- masks -----------------------------------------------------------------------------
    def compute_mask(self, inputs, mask=None):
        """The mask of the output (Keras): ``mask`` itself when ``supports_masking``,
        else None. Layers that make or change masks override it."""
        return mask if self.supports_masking else None

    def _call_masked(self, inputs, args, kwargs):
        """``__call__`` when some mask exists: find the input's mask (``mask=`` or the
        one attached to ``inputs``), pass it to ``call`` if it takes one, attach
        ``compute_mask``'s result to the output."""
        mask = kwargs.pop("mask", None)
        if mask is None:
            mask = get_mask(inputs)
        # (the call below comes back to __call__, which takes "mask" out again when None)
        kwargs["mask"] = mask if mask is not None and _takes_mask(type(self)) else None
        out = self.__call__(inputs, *args, _masked=True, **kwargs)
        if mask is not None or self._makes_mask:
            try:
                out_mask = self.compute_mask(inputs, mask)
            except Exception as e:
                _annotate(e, self)
                raise
            first = out[0] if isinstance(out, (list, tuple)) and out else out
            if out_mask is not None:
                set_mask(first, out_mask)
        return out

    def __call__(self, *args, **kwargs):
        try:
            if args:
                inputs = args[0]
                args = args[1:]
            else:
                inputs = kwargs.pop("inputs")
            if type(inputs) is not Tensor and SYMBOLIC_CALL[0] is not None:
                out = SYMBOLIC_CALL[0](self, inputs, args, kwargs)    # tf.keras.Input's
                if out is not NotImplemented:
                    return out
            # masks: nothing to do while no tensor carries one (the table is empty), this
            # layer makes none and none is passed; else the masked path, which comes back
            # here with `_masked=True` for the call itself
            if _MASKS or self._makes_mask or "mask" in kwargs:
                if not kwargs.pop("_masked", False):
                    return self._call_masked(inputs, args, kwargs)
                if kwargs["mask"] is None:
                    del kwargs["mask"]
            if type(inputs) is not Tensor:
                inputs = self._convert_input(inputs)
            else:
                inputs = self._autocast(inputs)
            if not self.built:
                self._build_on_call(inputs)
            dev = self._input_device
            if dev is not None and type(inputs) is Tensor:
                d = inputs._device
                # like a tf.device scope: host data follows (unless a tf.device scope, a
                # tf.distribute replica's, says where this call runs)
                if d is not dev and d.is_host and current_device() is None:
                    inputs = copy_to_device(inputs, dev)
            training = kwargs.pop("training", None)
            if training is None:
                training = _ctx.training
                if training is None or not self._expects_training:
                    if self._expects_training == 2:
                        return self.call(inputs, *args, training=False, **kwargs)
                    return self.call(inputs, *args, **kwargs)
                return self.call(inputs, *args, training=training, **kwargs)
            if self._leaf:
                if self._expects_training:
                    return self.call(inputs, *args, training=training, **kwargs)
                return self.call(inputs, *args, **kwargs)
            ctx = _ctx
            prev = ctx.training
            ctx.training = training
            try:
                if self._expects_training:
                    return self.call(inputs, *args, training=training, **kwargs)
                return self.call(inputs, *args, **kwargs)
            finally:
                ctx.training = prev
        except Exception as e:
            _annotate(e, self)
            raise

    apply = __call__

    def __repr__(self):
        return f"<{type(self).__module__}.{type(self).__name__} name={self.name!r}>"
