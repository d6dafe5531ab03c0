"""The op library: the built-in ops in this package's modules (bottom to top in
docs/CONVENTIONS_FOR_OPS.md, "The modules of ops/"), the public namespaces they make
up, and plugin ops by namespace.

This package assembles the namespaces of TensorFlow that span its modules:

* ``tf.math`` is :mod:`tapeflow.ops.math`, the elementwise math; TensorFlow's
  namespace also holds the reductions (:mod:`tapeflow.ops.reductions`) and
  ``unsorted_segment_sum`` (:mod:`tapeflow.ops.array_gather`), declared above it
  (their gradients use its ops): they join its namespace and ``__all__`` here.
* TensorFlow's top-level array names -- ``reshape``, ``zeros``, ``gather``, ``x[i]``
  ... (the ``array_*`` modules, and ``broadcast_to`` of the reductions) -- are names
  of this package (``__all__``: ``tapeflow.ops.reshape is tf.reshape``).

Public functions normalise their attributes (axes as non-negative ints, shapes as
tuples of ints, dtypes as :class:`~tapeflow.dtypes.DType`) and call ``execute``;
kernels live in the backends. Gradients are written with tapeflow ops, so they
are differentiable again.

>>> import tapeflow as tf
>>> print(tf.math.reduce_sum(tf.math.square([1., 2.])))
tf.Tensor(5.0, shape=(), dtype=float32)
>>> print(tf.ops.reshape(tf.range(6), [2, 3]))
tf.Tensor(
[[0 1 2]
 [3 4 5]], shape=(2, 3), dtype=int32)

Plugin ops by namespace: the op ``"myproj::gelu"`` is ``tapeflow.ops.myproj.gelu``.

The attribute is the function the plugin's :class:`~tapeflow.plugins.Library` made
for the op (the very object the plugin's module exports), or the
:class:`~tapeflow.plugins.OpDef` itself for an op registered without a Library
(both are called the same way: inputs positionally, attributes as keywords).
Lookups read the op registry each time, so ops registered later show up too; in a
hot loop bind the op once (``gelu = tf.ops.myproj.gelu``). ``dir(tf.ops)`` lists
the namespaces of the loaded plugins, ``dir(tf.ops.myproj)`` their ops; a name
``"a::b::c"`` nests (``tf.ops.a.b.c``).

>>> import tapeflow as tf
>>> tf.ops.no_such_project
Traceback (most recent call last):
AttributeError: tapeflow.ops has no namespace 'no_such_project'; the loaded plugins define: ...

See :mod:`tapeflow.plugins.library` for an op defined and called both ways.

**Tensor's and Variable's operators** are defined here and nowhere else (the part of
the op library that Tensor itself exposes): ``+ - * / // % ** << >>`` (both
directions), ``@``, the comparisons ``< <= > >= == !=``
(elementwise, TF2 semantics), unary ``- + abs() ~``, ``& | ^`` (logical for bool
tensors, bitwise for integers), and
``[]`` (NumPy-style indexing). Each dispatches to an op of the library, which is why
they live in this layer and not in ``tapeflow.runtime.tensor``: Tensor's operators
are the C core's number slots when it is built (``runtime/_c/tensor.c``); a
Variable's read the Variable first (and are watched by tapes), through the same
dispatcher. Tensors stay hashable by identity (tape and dict keys), as TF2's ``.ref()``.

>>> import tapeflow as tf
>>> x = tf.constant([1., 4.])
>>> print(x ** 2 - 2 * x >= 0., x[1])
tf.Tensor([False  True], shape=(2,), dtype=bool) tf.Tensor(4.0, shape=(), dtype=float32)
"""

from __future__ import annotations

from ..runtime import registry as _reg
from ..errors import InvalidTypeError, TapeflowError
from ..runtime import dispatch as _dispatch
from ..runtime.dispatch import convert_to_tensor as _convert, execute as _execute
from ..runtime.tensor import Tensor as _Tensor
from ..runtime.variable import Variable as _Variable
from .array_slice import _getitem, _setitem
from .linalg import _MATMUL, _NN
from .math import (_ADD, _BITAND, _BITOR, _BITXOR, _DIV, _EQUAL, _FLOORDIV, _GREATER,
                   _GREATER_EQUAL, _LESS, _LESS_EQUAL, _LOGICAL_AND, _LOGICAL_OR,
                   _LOGICAL_XOR, _LSHIFT, _MOD, _MUL, _NOT_EQUAL, _POW, _RSHIFT, _SUB,
                   _compare_fallback)
# The op library, bottom to top (docs/CONVENTIONS_FOR_OPS.md shows the layout and its order)
from . import (math, array_creation, array_shape, reductions, batching,  # noqa: F401
               array_values, array_gather, array_slice, array_sort, random, linalg, nn, fused)
from . import image  # noqa: F401  (tf.image)
# tf's top-level array names (they shadow the builtins range and slice in this module)
from .array_creation import *  # noqa: F401,F403
from .array_creation import FILL  # noqa: F401  (the op of tf.fill, autodiff's seed)
from .array_shape import *  # noqa: F401,F403
from .array_values import *  # noqa: F401,F403
from .array_gather import *  # noqa: F401,F403
from .array_slice import *  # noqa: F401,F403
from .array_sort import *  # noqa: F401,F403
from .reductions import broadcast_to  # noqa: F401

__all__ = [*array_creation.__all__, *array_shape.__all__, *array_values.__all__,
           *array_gather.__all__, *array_slice.__all__, *array_sort.__all__, "broadcast_to",
           "assign", "assign_add", "assign_sub"]

# tf.math: the elementwise math of ops/math.py, with the reductions and unsorted_segment_sum
# (declared above it, their gradients use its ops)
_MATH_ABOVE = {**{n: getattr(reductions, n) for n in reductions.__all__},
               "unsorted_segment_sum": array_gather.unsorted_segment_sum}
vars(math).update(_MATH_ABOVE)
math.__all__ = [*dict.fromkeys([*math.__all__, *_MATH_ABOVE])]

_HANDLES = _reg.HANDLES


class _Namespace:
    __slots__ = ("_prefix",)

    def __init__(self, prefix):
        self._prefix = prefix

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _lookup(f"{self._prefix}::{name}", f"tapeflow.ops.{self._prefix.replace('::', '.')}")

    def __dir__(self):
        return _children(self._prefix + "::")

    def __repr__(self):
        ops = ", ".join(_children(self._prefix + "::"))
        return f"<tapeflow.ops namespace {self._prefix!r}: {ops}>"


def _children(prefix):
    if prefix == _reg.CORE_NAMESPACE + "::":
        return sorted(n for n in _reg.OPS if "::" not in n)
    return sorted({n[len(prefix):].split("::")[0] for n in _reg.OPS if n.startswith(prefix)})


def _lookup(full, where):
    op = _reg.OPS.get(full)
    if op is None and full.startswith(_reg.CORE_NAMESPACE + "::"):
        op = _reg.OPS.get(full[len(_reg.CORE_NAMESPACE) + 2:])     # tf.ops.tapeflow.Add
    if op is not None:
        return next((h for h in _HANDLES.get(full, ()) if h.op is op), op)
    if any(n.startswith(full + "::") for n in _reg.OPS):
        return _Namespace(full)
    raise AttributeError(f"{where} has no op {full.rsplit('::', 1)[-1]!r} (no op named {full!r} "
                         "is registered; `python -m tapeflow info` lists the loaded plugins, "
                         "and the failed ones with the reason)")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name == _reg.CORE_NAMESPACE or any(n.startswith(name + "::") for n in _reg.OPS):
        return _Namespace(name)
    raise AttributeError(f"tapeflow.ops has no namespace {name!r}; the loaded plugins define: "
                         f"{', '.join(__dir__()) or 'none'} (`python -m tapeflow info` lists "
                         "the plugins, and the failed ones with the reason)")


def __dir__():
    return sorted({n.split("::")[0] for n in _reg.OPS if "::" in n} | {_reg.CORE_NAMESPACE})


# --- TF 1's state ops: tf.assign(ref, value) is ref.assign(value) ---------------------------

def _ref(ref, op):
    if not isinstance(ref, _Variable):
        raise InvalidTypeError(
            f"tf.{op} updates a Variable in place; it was given a {type(ref).__name__}. "
            f"Pass the tf.Variable itself (a Tensor is immutable: compute a new one instead).")
    return ref


def assign(ref, value, validate_shape=None, use_locking=None, name=None):
    """TF 1's ``tf.assign(ref, value)``: ``ref.assign(value)``; returns the new value.

    >>> import tapeflow as tf
    >>> v = tf.Variable([1.0, 2.0])
    >>> print(tf.assign_add(v, [1.0, 1.0]), tf.assign(v, [0.0, 5.0]).numpy())
    tf.Tensor([2. 3.], shape=(2,), dtype=float32) [0. 5.]
    """
    return _ref(ref, "assign").assign(value).read_value()


def assign_add(ref, value, use_locking=None, name=None):
    """TF 1's ``tf.assign_add(ref, value)``: ``ref.assign_add(value)``; returns the new value."""
    return _ref(ref, "assign_add").assign_add(value).read_value()


def assign_sub(ref, value, use_locking=None, name=None):
    """TF 1's ``tf.assign_sub(ref, value)``: ``ref.assign_sub(value)``; returns the new value."""
    return _ref(ref, "assign_sub").assign_sub(value).read_value()


# --- Tensor's and Variable's operators (see the module doc) ------------------------------

def matmul_vectors(a, b):
    """``a @ b`` with NumPy's (and the array API's) rule for 1-D operands: a vector on
    the left is a row, on the right a column, and that axis is dropped from the result
    (``tf.matmul`` itself keeps TensorFlow's "rank >= 2")."""
    if type(a) is _Tensor and type(b) is _Tensor and a._data.ndim > 1 and b._data.ndim > 1:
        return _execute(_MATMUL, (a, b), _NN)           # the common case, no conversions
    a, b = _convert(a), _convert(b)
    va, vb = a._data.ndim == 1, b._data.ndim == 1
    if not (va or vb):
        return _execute(_MATMUL, (a, b), _NN)
    if va:
        a = expand_dims(a, 0)
    if vb:
        b = expand_dims(b, -1)
    out = _execute(_MATMUL, (a, b), _NN)
    if vb:
        out = squeeze(out, [-1])
    if va:
        out = squeeze(out, [-1 if vb else -2])
    return out


def __matmul__(self, other):
    return matmul_vectors(self, other)


def __rmatmul__(self, other):
    return matmul_vectors(other, self)


def _invert(self):
    """``~x``: logical NOT of a bool tensor (TensorFlow's), bitwise NOT of integers."""
    return math.logical_not(self) if self.dtype.is_bool else math.invert(self)


def _logical_or_bitwise(logical, bitwise):
    """``& | ^``: TensorFlow's logical op for bool tensors, the bitwise one for integers
    (the array API's operators), chosen by the tensor operand."""
    def operator(a, b):
        t = a if isinstance(a, (_Tensor, _Variable)) else b
        return _dispatch.binary(logical if t.dtype.is_bool else bitwise, a, b)
    return operator


def _comparison(op):
    def operator(a, b):
        try:
            return _dispatch.binary(op, a, b)
        except (TapeflowError, TypeError, ValueError) as e:
            return _compare_fallback(op, a, b, e)
    return operator


def _binary(op):
    def operator(a, b):
        return _dispatch.binary(op, a, b)
    return operator


def _install():
    # Each operator is one function of its operands in order, ``f(a, b)``. Tensor's are
    # the C core's number slots when it is in use (``set_operator``: the fast path of
    # ``op`` first, then ``f``); otherwise -- and always for a Variable, which is read,
    # and watched, first -- they are Python methods calling ``f``.
    ops = {"add": _ADD, "sub": _SUB, "mul": _MUL, "truediv": _DIV, "floordiv": _FLOORDIV,
           "mod": _MOD, "pow": _POW, "lshift": _LSHIFT, "rshift": _RSHIFT,
           # a < b is b > a: Python tries the reflected comparison itself
           "lt": _LESS, "le": _LESS_EQUAL, "gt": _GREATER, "ge": _GREATER_EQUAL,
           "eq": _EQUAL, "ne": _NOT_EQUAL, "and": None, "or": None, "xor": None,
           "matmul": None}
    funcs = {name: _binary(op) for name, op in ops.items() if op is not None}
    funcs.update(eq=_comparison(_EQUAL), ne=_comparison(_NOT_EQUAL), matmul=matmul_vectors,
                 **{"and": _logical_or_bitwise(_LOGICAL_AND, _BITAND),
                    "or": _logical_or_bitwise(_LOGICAL_OR, _BITOR),
                    "xor": _logical_or_bitwise(_LOGICAL_XOR, _BITXOR)})
    unary = {"neg": math.negative, "pos": lambda t: t, "abs": math.abs, "invert": _invert}
    reflected = set(ops) - {"lt", "le", "gt", "ge", "eq", "ne"}
    for cls in (_Tensor, _Variable):
        if cls is _Tensor and _dispatch.speedups is not None:
            for name, f in funcs.items():       # (direct: f is binary(op, a, b))
                _dispatch.speedups.set_operator(name, ops[name], f, name not in ("eq", "ne"))
            for name, f in unary.items():
                _dispatch.speedups.set_operator(name, None, f)
            continue
        for name, f in funcs.items():
            setattr(cls, f"__{name}__", _method(f))
            if name in reflected:
                setattr(cls, f"__r{name}__", _method(f, reverse=True))
        for name, f in unary.items():
            setattr(cls, f"__{name}__", f)
    _Tensor.__getitem__ = _Variable.__getitem__ = _getitem
    _Tensor.__setitem__ = _Variable.__setitem__ = _setitem


def _method(f, reverse=False):
    if reverse:
        def rmethod(self, other):
            return f(other, self)
        return rmethod

    def method(self, other):
        return f(self, other)
    return method


_install()
