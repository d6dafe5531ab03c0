"""Composite tensors -- values made of several dense tensors (``tf.RaggedTensor``,
``tf.SparseTensor``, a plugin's own) -- and the dispatch that lets the ordinary ``tf.*``
functions take them.

Two levels, as in TensorFlow:

* **Ops.** When an op's input is an object whose type defines
  ``__tapeflow_dispatch__(op, inputs, attrs)``, the runtime's general path hands it the
  whole op (the check sits where a value that is not a tensor is converted: dense tensors
  never reach it). :class:`CompositeTensor`
  implements that method: an op declared ``elementwise`` goes to the handler registered
  for the input types with :func:`dispatch_for_unary_elementwise_apis` /
  :func:`dispatch_for_binary_elementwise_apis` (a ragged tensor maps the op over its flat
  values), any other op to :meth:`CompositeTensor._dispatch_op` of the class. So
  ``tf.add``, ``tf.math.sin``, ``tf.cast``, comparisons, Tensor operators -- and every
  elementwise op a plugin declares -- take composite tensors with no change to them.
* **APIs.** Public functions that do more than run one op (``tf.reduce_sum``,
  ``tf.concat``, ``tf.gather`` ...) are *dispatch-enabled*: their first line looks the
  argument's type up in :data:`COMPOSITE_TYPES` (one set lookup, about 40 ns, for a dense
  argument) and hands a composite to :func:`dispatch`, which calls the handler registered
  for that function and those argument types with
  :func:`dispatch_for_api`. A plugin registers its own types the same way
  (``tf.experimental.dispatch_for_api``).

A composite tensor's :class:`TypeSpec` names its type, shapes and dtypes without its
values: ``tf.function`` traces per spec (input signatures take ``tf.RaggedTensorSpec``)
and ``tf.data`` batches and slices by it, both through :meth:`TypeSpec.to_components` /
:meth:`TypeSpec.from_components` (the dense tensors the value is made of).

>>> import tapeflow as tf
>>> rt = tf.ragged.constant([[1.0, 2.0], [3.0]])
>>> print(tf.add(rt, 1.0))
<tf.RaggedTensor [[2.0, 3.0], [4.0]]>
"""

from __future__ import annotations

import inspect

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.dispatch import constant
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["CompositeTensor", "TypeSpec", "dispatch_for_api", "dispatch_for_unary_elementwise_apis",
           "dispatch_for_binary_elementwise_apis", "unregister_dispatch_for", "maybe_dispatch",
           "is_composite", "any_composite", "dispatch", "type_spec_from_value"]

#: every registered composite type (subclasses of CompositeTensor add themselves); the one
#: check a dispatch-enabled function makes on its arguments
COMPOSITE_TYPES: set = set()
#: api function -> [(signature {param: type or tuple of types}, handler)]
_API = {}
#: [(x_type, handler)], [(x_type, y_type, handler)]
_UNARY = []
_BINARY = []


class TypeSpec:
    """The type of a composite value: what it is made of, without the values.

    Subclasses define :attr:`value_type`, :meth:`component_specs` (a tuple of
    ``(shape, dtype)`` of the dense components, ``None`` for an unknown dimension),
    :meth:`to_components`, :meth:`from_components` and :meth:`_serialize` (a hashable
    tuple: two specs are equal when it is)."""

    value_type = None

    def component_specs(self):
        raise NotImplementedError(f"{type(self).__name__}.component_specs")

    def to_components(self, value):
        raise NotImplementedError(f"{type(self).__name__}.to_components")

    def from_components(self, components):
        raise NotImplementedError(f"{type(self).__name__}.from_components")

    def placeholder_components(self):
        """Dense tensors of :meth:`component_specs` that form a valid value (what
        ``get_concrete_function`` traces with): zeros, an unknown size 1. A spec whose
        components constrain each other (row splits, indices) overrides it."""
        return tuple(_placeholder(shape, dtype) for shape, dtype in self.component_specs())

    def _serialize(self):
        raise NotImplementedError(f"{type(self).__name__}._serialize")

    def is_compatible_with(self, spec_or_value):
        other = spec_or_value if isinstance(spec_or_value, TypeSpec) else getattr(
            spec_or_value, "_type_spec", None)
        if type(other) is not type(self):
            return False
        mine, theirs = self.component_specs(), other.component_specs()
        return len(mine) == len(theirs) and all(
            _dims_fit(a, b) and da == db for (a, da), (b, db) in zip(mine, theirs))

    def __eq__(self, other):
        return type(other) is type(self) and self._serialize() == other._serialize()

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((type(self), self._serialize()))


def _placeholder(shape, dtype):
    shape = () if shape is None else tuple(1 if d is None else d for d in shape)
    if dtype.name == "string":
        return constant(np.full(shape, b"", dtype=object))
    return constant(np.zeros(shape, dtype.np))


def _dims_fit(a, b):
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x is None or y is None or x == y for x, y in zip(a, b))


class CompositeTensor:
    """Base of the composite tensor classes; see the module doc.

    Subclasses define ``_type_spec`` (a :class:`TypeSpec`) and may override
    :meth:`_dispatch_op` for ops that are not elementwise."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        COMPOSITE_TYPES.add(cls)

    @classmethod
    def __tapeflow_dispatch__(cls, op, inputs, attrs):
        if op.elementwise:
            for fn in _elementwise_handlers(inputs):
                result = fn(_OpCall(op, attrs), *inputs)
                if result is not NotImplemented:
                    return result
        result = cls._dispatch_op(op, inputs, attrs)
        if result is NotImplemented:
            kinds = ", ".join(type(x).__name__ for x in inputs)
            raise InvalidTypeError(
                f"{op.name} does not take a {cls.__name__} here (inputs: {kinds}): convert "
                "it to a dense tensor first (.to_tensor() for a RaggedTensor, "
                "tf.sparse.to_dense for a SparseTensor), or register a handler with "
                "tf.experimental.dispatch_for_api", op=op.name)
        return result

    @classmethod
    def _dispatch_op(cls, op, inputs, attrs):
        """Run ``op`` on ``inputs``, some of which are ``cls``; NotImplemented if it can't."""
        return NotImplemented


class _OpCall:
    """The "API function" an elementwise handler receives for an op: calling it runs the
    op on dense operands (a handler calls it on the composite's components)."""

    __slots__ = ("op", "attrs")

    def __init__(self, op, attrs):
        self.op = op
        self.attrs = attrs

    def __call__(self, *inputs):
        return self.op(*inputs, **self.attrs)

    def __repr__(self):
        return f"<op {self.op.name}>"


def _fits(x, t):
    return isinstance(x, t)


def _elementwise_handlers(inputs):
    """The handlers registered for these inputs' types, the latest first (each may decline
    with NotImplemented: the next is tried)."""
    if len(inputs) == 1:
        return [fn for xt, fn in reversed(_UNARY) if _fits(inputs[0], xt)]
    if len(inputs) == 2:
        return [fn for xt, yt, fn in reversed(_BINARY)
                if _fits(inputs[0], xt) and _fits(inputs[1], yt)]
    return []


def _dispatch_type(t, where):
    """``t`` (a type a handler is registered for) as a key of :data:`COMPOSITE_TYPES`: a
    composite type; a dense type (``tf.Tensor``, ``object``) may sit beside one in a
    signature but is never a key (dense arguments must not take the dispatch path)."""
    if not isinstance(t, type):
        raise InvalidTypeError(f"{where}: expected a type (or a tuple of types), got "
                               f"{type(t).__name__} {t!r}")
    return None if t is object or issubclass(t, _DENSE) else t


#: types that are never dispatch keys: dense values take the ordinary path
_DENSE = (Tensor, Variable, np.ndarray, np.generic, int, float, complex, str, bytes, list,
          tuple, dict, type(None))


def is_composite(x) -> bool:
    """Whether ``x`` is a registered composite tensor (``tf.RaggedTensor`` ...)."""
    return type(x) in COMPOSITE_TYPES


def _check_api(api, where):
    if not callable(api):
        raise InvalidTypeError(f"{where}: api must be a tapeflow function, got "
                               f"{type(api).__name__} {api!r}")


def dispatch_for_api(api, *signatures):
    """Decorator: run the decorated handler instead of ``api`` when ``api`` is called with
    arguments of the types a signature names (``{"param": Type}``, or a tuple of types;
    any one of several signatures); the handler takes ``api``'s parameters. ``api`` must
    be dispatch-enabled (its docstring says so; the ``tf.*`` functions that take ragged
    or sparse tensors are).

    >>> import tapeflow as tf
    >>> class Box(tf.experimental.CompositeTensor):
    ...     def __init__(self, v):
    ...         self.v = v
    >>> @tf.experimental.dispatch_for_api(tf.reduce_sum, {"input_tensor": Box})
    ... def _box_sum(input_tensor, axis=None, keepdims=False, name=None):
    ...     return tf.reduce_sum(input_tensor.v, axis, keepdims)
    >>> print(tf.reduce_sum(Box(tf.constant([1, 2]))))
    tf.Tensor(3, shape=(), dtype=int32)
    >>> tf.experimental.unregister_dispatch_for(_box_sum)
    """
    _check_api(api, "dispatch_for_api")
    params = inspect.signature(api).parameters
    for sig in signatures:
        if not isinstance(sig, dict) or not sig:
            raise InvalidArgumentError(
                f"dispatch_for_api({api.__name__}): each signature is a non-empty dict "
                f"{{parameter: type}}, got {sig!r}")
        for name in sig:
            if name not in params:
                raise InvalidArgumentError(
                    f"dispatch_for_api({api.__name__}): {api.__name__} has no parameter "
                    f"{name!r} (its parameters: {', '.join(params)})")
    keys = []
    for sig in signatures:
        keys.append({_dispatch_type(k, "dispatch_for_api") for t in sig.values()
                     for k in (t if isinstance(t, tuple) else (t,))} - {None})
        if not keys[-1]:
            raise InvalidArgumentError(
                f"dispatch_for_api({api.__name__}): the signature {sig!r} names no type to "
                "dispatch on (a tf.experimental.CompositeTensor subclass ...), only dense ones")

    def register(handler):
        entries = _API.setdefault(api, [])
        for sig, k in zip(signatures, keys):
            entries.append((sig, handler))
            COMPOSITE_TYPES.update(k)
        return handler
    return register


def dispatch_for_unary_elementwise_apis(x_type):
    """Decorator: ``handler(api_func, x)`` runs every elementwise op (``tf.abs``,
    ``tf.math.sin``, ``tf.cast`` ...) whose one input is an ``x_type``; ``api_func(*dense)``
    runs the op on dense tensors (with its attrs)."""
    if _dispatch_type(x_type, "dispatch_for_unary_elementwise_apis") is None:
        raise InvalidArgumentError(
            f"dispatch_for_unary_elementwise_apis: {x_type!r} is a dense type: register a "
            "composite type (a tf.experimental.CompositeTensor subclass)")

    def register(handler):
        _UNARY.append((x_type, handler))
        COMPOSITE_TYPES.add(x_type)
        return handler
    return register


def dispatch_for_binary_elementwise_apis(x_type, y_type):
    """Decorator: ``handler(api_func, x, y)`` runs every binary elementwise op
    (``tf.add``, ``tf.equal`` ...) whose inputs are an ``x_type`` and a ``y_type``."""
    def register(handler):
        _BINARY.append((x_type, y_type, handler))
        return handler
    return register


def unregister_dispatch_for(handler):
    """Remove every registration of ``handler`` (by any of the ``dispatch_for_*``)."""
    found = False
    for api, entries in list(_API.items()):
        keep = [(s, h) for s, h in entries if h is not handler]
        found |= len(keep) != len(entries)
        _API[api] = keep
    for lst in (_UNARY, _BINARY):
        keep = [e for e in lst if e[-1] is not handler]
        found |= len(keep) != len(lst)
        lst[:] = keep
    if not found:
        raise InvalidArgumentError(f"unregister_dispatch_for: {handler!r} is not registered")


def maybe_dispatch(api, args, kwargs):
    """The handler's result for ``api(*args, **kwargs)`` where a registered signature
    matches the arguments, else NotImplemented. A dispatch-enabled function calls it only
    when an argument's type is in :data:`COMPOSITE_TYPES` (lists of them count: ``concat``)."""
    entries = _API.get(api)
    if not entries:
        return NotImplemented
    bound = None
    for sig, handler in reversed(entries):
        if bound is None:
            try:
                params = inspect.signature(api).parameters
                bound = inspect.signature(api).bind(*args, **kwargs).arguments
            except TypeError:
                return NotImplemented
        if all(_matches(bound.get(name), t) for name, t in sig.items()):
            result = handler(**_arguments_for(handler, api, params, bound))
            if result is not NotImplemented:
                return result
    return NotImplemented


def _arguments_for(handler, api, params, bound):
    """``bound`` (``api``'s arguments by name) as ``handler`` takes them: by keyword; an
    argument ``handler`` does not declare is left out where it holds ``api``'s default
    (a handler may declare fewer parameters than the API), else it is an error."""
    hp = inspect.signature(handler).parameters
    if any(p.kind is p.VAR_KEYWORD for p in hp.values()):
        return dict(bound)
    out = {}
    for name, value in bound.items():
        if name in hp:
            out[name] = value
        elif value is not params[name].default:
            raise InvalidArgumentError(
                f"the handler {getattr(handler, '__qualname__', handler)} registered for "
                f"tf.{api.__name__} does not take the argument {name}={value!r}: declare "
                f"{api.__name__}'s parameters in the handler")
    return out


def _matches(value, t):
    if isinstance(value, (list, tuple)) and value and not isinstance(t, type(None)):
        return any(isinstance(v, t) for v in value)
    return isinstance(value, t)


def any_composite(*values) -> bool:
    """Whether any of ``values`` (or an element of a list/tuple among them) is a
    registered composite type: the check dispatch-enabled functions make."""
    for v in values:
        tv = type(v)
        if tv in COMPOSITE_TYPES:
            return True
        if (tv is list or tv is tuple) and any(type(e) in COMPOSITE_TYPES for e in v):
            return True
    return False


def dispatch(api, *args, **kwargs):
    """``api(*args, **kwargs)`` by its registered handler; a clear InvalidTypeError naming
    the function and the argument types where none takes them. A dispatch-enabled
    function's first lines::

        if type(x) in COMPOSITE_TYPES:  # (a dense argument: one set lookup)
            return dispatch(reduce_sum, x, axis, keepdims, name)

    (:func:`any_composite` for an argument that may be a list of them: ``concat``.)
    """
    result = maybe_dispatch(api, args, kwargs)
    if result is NotImplemented:
        kinds = ", ".join(type(a).__name__ for a in (*args, *kwargs.values()) if a is not None)
        raise InvalidTypeError(
            f"tf.{getattr(api, '__name__', api)} does not take these arguments ({kinds}): "
            "convert composite tensors to dense ones first (.to_tensor() for a "
            "RaggedTensor, tf.sparse.to_dense for a SparseTensor), or register a handler "
            "with tf.experimental.dispatch_for_api")
    return result


def type_spec_from_value(value):
    """The :class:`TypeSpec` of a composite tensor (``tf.type_spec_from_value``); for a
    dense tensor, see ``tf.TensorSpec.from_tensor``.

    >>> import tapeflow as tf
    >>> tf.type_spec_from_value(tf.sparse.from_dense([[0, 1]]))
    SparseTensorSpec(TensorShape([1, 2]), tf.int32)
    """
    spec = getattr(value, "_type_spec", None) if isinstance(value, CompositeTensor) else None
    if not isinstance(spec, TypeSpec):
        raise InvalidTypeError(f"tf.type_spec_from_value: {type(value).__name__} is not a "
                               "composite tensor (RaggedTensor, SparseTensor, ...); for a "
                               "tensor use tf.TensorSpec.from_tensor")
    return spec
