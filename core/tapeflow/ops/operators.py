"""Tensor's and Variable's operators, defined here and nowhere else.

``+ - * / // % ** << >>`` (both directions), ``@``, the comparisons ``< <= > >= == !=``
(elementwise, TF2 semantics), unary ``- + abs() ~``, ``& | ^`` (logical for bool
tensors, bitwise for integers), and
``[]`` (NumPy-style indexing). Each dispatches to an op of the library, which is why
they live in this layer and not in ``tapeflow.runtime.tensor``: Tensor's binary
operators are the dispatcher's (``runtime.dispatch.make_binary_operator``, in C when
the extension is built); a Variable's read the Variable first (and are watched by
tapes), through the same dispatcher.

>>> import tapeflow as tf
>>> x = tf.constant([1., 4.])
>>> print(x ** 2 - 2 * x >= 0., x[1])
tf.Tensor([False  True], shape=(2,), dtype=bool) tf.Tensor(4.0, shape=(), dtype=float32)
"""

from __future__ import annotations

from ..runtime.dispatch import binary, convert_to_tensor, execute, make_binary_operator
from ..runtime.errors import TapeflowError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .array_shape import expand_dims, squeeze
from .array_slice import _getitem, _setitem
from .linalg import _MATMUL, _NN
from .math_ops import (_ADD, _BITAND, _BITOR, _BITXOR, _DIV, _EQUAL, _FLOORDIV, _GREATER,
                   _GREATER_EQUAL, _LESS, _LESS_EQUAL, _LOGICAL_AND, _LOGICAL_OR,
                   _LOGICAL_XOR, _LSHIFT, _MOD, _MUL, _NOT_EQUAL, _POW, _RSHIFT, _SUB,
                   _compare_fallback, abs, invert, logical_not, negative)

__all__: list = []


def matmul_vectors(a, b):
    """``a @ b`` with NumPy's (and the array API's) rule for 1-D operands: a vector on
    the left is a row, on the right a column, and that axis is dropped from the result
    (``tf.matmul`` itself keeps TensorFlow's "rank >= 2")."""
    if type(a) is Tensor and type(b) is Tensor and a._data.ndim > 1 and b._data.ndim > 1:
        return execute(_MATMUL, (a, b), _NN)            # the common case, no conversions
    a, b = convert_to_tensor(a), convert_to_tensor(b)
    va, vb = a._data.ndim == 1, b._data.ndim == 1
    if not (va or vb):
        return execute(_MATMUL, (a, b), _NN)
    if va:
        a = expand_dims(a, 0)
    if vb:
        b = expand_dims(b, -1)
    out = execute(_MATMUL, (a, b), _NN)
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
    return logical_not(self) if self.dtype.is_bool else invert(self)


def _install():
    # Tensor gets the dispatcher's operator methods (fast path inlined, in C when
    # built). A Variable always takes the general path (it is read, and watched,
    # there), so its methods are plain calls of ``binary``.
    def fwd(op, cls):
        if cls is Tensor:
            return make_binary_operator(op)

        def method(self, other):
            return binary(op, self, other)
        return method

    def rev(op, cls):
        if cls is Tensor:
            return make_binary_operator(op, reverse=True)

        def method(self, other):
            return binary(op, other, self)
        return method

    def comparison(op, cls):
        fast = fwd(op, cls)

        def method(self, other):
            try:
                return fast(self, other)
            except (TapeflowError, TypeError, ValueError) as e:
                return _compare_fallback(op, self, other, e)
        return method

    def logical_or_bitwise(logical, bitwise, cls, reverse=False):
        # ``& | ^``: TensorFlow's logical ops for bool tensors, the bitwise ones for
        # integers (the array API's operators)
        op_l, op_b = (rev if reverse else fwd)(logical, cls), (rev if reverse else fwd)(
            bitwise, cls)

        def method(self, other):
            return (op_l if self.dtype.is_bool else op_b)(self, other)
        return method

    table = {"add": _ADD, "sub": _SUB, "mul": _MUL, "truediv": _DIV, "floordiv": _FLOORDIV,
             "mod": _MOD, "pow": _POW, "lshift": _LSHIFT, "rshift": _RSHIFT}
    logic = {"and": (_LOGICAL_AND, _BITAND), "or": (_LOGICAL_OR, _BITOR),
             "xor": (_LOGICAL_XOR, _BITXOR)}
    # a < b is b > a: Python tries the reflected comparison itself
    compare = {"lt": _LESS, "le": _LESS_EQUAL, "gt": _GREATER, "ge": _GREATER_EQUAL}
    for cls in (Tensor, Variable):
        for name, op in table.items():
            setattr(cls, f"__{name}__", fwd(op, cls))
            setattr(cls, f"__r{name}__", rev(op, cls))
        for name, (op_l, op_b) in logic.items():
            setattr(cls, f"__{name}__", logical_or_bitwise(op_l, op_b, cls))
            setattr(cls, f"__r{name}__", logical_or_bitwise(op_l, op_b, cls, reverse=True))
        for name, op in compare.items():
            setattr(cls, f"__{name}__", fwd(op, cls))
        cls.__eq__ = comparison(_EQUAL, cls)
        cls.__ne__ = comparison(_NOT_EQUAL, cls)
        # Tensors stay hashable by identity (tape and dict keys), as in TF2's .ref()
        cls.__hash__ = cls.__dict__.get("__hash__") or object.__hash__
        cls.__neg__ = negative
        cls.__pos__ = lambda self: self
        cls.__abs__ = abs
        cls.__invert__ = _invert
        cls.__matmul__ = __matmul__
        cls.__rmatmul__ = __rmatmul__
        cls.__getitem__ = _getitem
        cls.__setitem__ = _setitem


_install()
