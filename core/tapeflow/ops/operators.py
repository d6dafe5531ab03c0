"""Tensor's and Variable's operators, defined here and nowhere else.

``+ - * / // % ** << >>`` (both directions), ``@``, the comparisons ``< <= > >= == !=``
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

from ..runtime.dispatch import speedups, binary, convert_to_tensor, execute
from ..errors import TapeflowError
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


def _logical_or_bitwise(logical, bitwise):
    """``& | ^``: TensorFlow's logical op for bool tensors, the bitwise one for integers
    (the array API's operators), chosen by the tensor operand."""
    def operator(a, b):
        t = a if isinstance(a, (Tensor, Variable)) else b
        return binary(logical if t.dtype.is_bool else bitwise, a, b)
    return operator


def _comparison(op):
    def operator(a, b):
        try:
            return binary(op, a, b)
        except (TapeflowError, TypeError, ValueError) as e:
            return _compare_fallback(op, a, b, e)
    return operator


def _binary(op):
    def operator(a, b):
        return binary(op, a, b)
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
    unary = {"neg": negative, "pos": lambda t: t, "abs": abs, "invert": _invert}
    reflected = set(ops) - {"lt", "le", "gt", "ge", "eq", "ne"}
    for cls in (Tensor, Variable):
        if cls is Tensor and speedups is not None:
            for name, f in funcs.items():       # (direct: f is binary(op, a, b))
                speedups.set_operator(name, ops[name], f, name not in ("eq", "ne"))
            for name, f in unary.items():
                speedups.set_operator(name, None, f)
            continue
        for name, f in funcs.items():
            setattr(cls, f"__{name}__", _method(f))
            if name in reflected:
                setattr(cls, f"__r{name}__", _method(f, reverse=True))
        for name, f in unary.items():
            setattr(cls, f"__{name}__", f)
    Tensor.__getitem__ = Variable.__getitem__ = _getitem
    Tensor.__setitem__ = Variable.__setitem__ = _setitem


def _method(f, reverse=False):
    if reverse:
        def rmethod(self, other):
            return f(other, self)
        return rmethod

    def method(self, other):
        return f(self, other)
    return method


_install()
