"""Data types and promotion.

A :class:`DType` wraps a NumPy dtype; every backend stores its arrays with NumPy
dtypes (CuPy and PyOpenCL do too), so the mapping is one dict lookup.

Promotion follows NumPy 2 (NEP 50): Python scalars are *weak* and take the dtype of
the tensor they meet (``float32_tensor * 2.0`` stays float32). A Python scalar that
becomes a tensor on its own follows the seeds' convention: ``float`` -> float32,
``int`` -> int32, ``bool`` -> bool, ``complex`` -> complex128 (TensorFlow's).

>>> import tapeflow as tf
>>> tf.float32.name, tf.as_dtype("int64") is tf.int64
('float32', True)
>>> result_type(float32, 2.0) is float32
True
>>> result_type(int32, 2.5) is float64      # NumPy 2: int tensor with a weak float
True

``bfloat16`` (8 bits of mantissa, float32's exponent range) is stored in NumPy with the
``ml_dtypes`` package, as JAX and TensorFlow do. It promotes as in JAX: with float16 to
float32, with a wider float to that float, with an integer tensor to bfloat16; a weak
Python float keeps it.

>>> result_type(bfloat16, float16) is float32, result_type(bfloat16, 2.0) is bfloat16
(True, True)
"""

from __future__ import annotations

import re
import warnings

import ml_dtypes
import numpy as np

from .errors import InvalidTypeError

__all__ = [
    "DType", "as_dtype", "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "complex64", "complex128", "bool_",
    "half", "double", "ALL_DTYPES", "FLOAT_DTYPES",
    "INT_DTYPES", "COMPLEX_DTYPES", "NUMERIC_DTYPES", "result_type",
]


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _finfo(np_dtype):
    """np.finfo, or ml_dtypes.finfo for bfloat16 (NumPy's does not know it)."""
    return ml_dtypes.finfo(np_dtype) if np_dtype == _BF16 else np.finfo(np_dtype)


class DType:
    """A tensor element type (``tf.float32`` ...). Compares equal to its name and
    to the matching NumPy dtype, so ``t.dtype == "float32"`` and
    ``t.dtype == np.float32`` both work.

    Comparing with anything else is False, never an error (``tf.float32 == "a,b"``,
    ``== None``, ``== [1]``, ``== tensor``): ``__eq__`` returns a bool or
    ``NotImplemented``. The hash is the NumPy dtype's, so a DType and its NumPy dtype
    find each other in dicts and sets; a name or a scalar type (``"float32"``,
    ``np.float32``) compares equal but hashes differently, as with NumPy's own dtypes.

    >>> float32 == "a,b", float32 == None, float32 == np.dtype("float32")
    (False, False, True)
    """

    __slots__ = ("name", "np", "is_floating", "is_integer", "is_bool", "is_unsigned",
                 "is_complex", "is_inexact", "size", "_hash")

    def __init__(self, np_dtype):
        self.np = np.dtype(np_dtype)
        self.name = "bool" if self.np == np.bool_ else self.np.name
        # ml_dtypes' bfloat16 has kind "V" (a NumPy user dtype): it is a float all the same
        self.is_floating = self.np.kind == "f" or self.np == _BF16
        self.is_integer = self.np.kind in "iu"
        self.is_unsigned = self.np.kind == "u"
        self.is_bool = self.np.kind == "b"
        self.is_complex = self.np.kind == "c"
        #: floating or complex: the dtypes gradients flow through
        self.is_inexact = self.is_floating or self.is_complex
        self.size = self.np.itemsize
        self._hash = hash(self.np)

    @property
    def dtype(self):
        """The NumPy dtype. NumPy reads ``.dtype`` from objects it takes as a dtype, so a
        DType works wherever NumPy wants one: ``np.ones(3, tf.float32)``,
        ``a.astype(tf.int32)`` (what the test kit's ``samples(dtype, rng)`` receives)."""
        return self.np

    @property
    def as_numpy_dtype(self):
        """The NumPy scalar type (``np.float32``), as in TensorFlow."""
        return self.np.type

    @property
    def base_dtype(self):
        return self

    @property
    def real_dtype(self):
        """float32 for complex64, float64 for complex128, the dtype itself otherwise."""
        return _FROM_NP[self.np.type(0).real.dtype] if self.is_complex else self

    @property
    def min(self):
        if self.is_complex:
            raise TypeError(f"{self.name} has no ordering, hence no min or max")
        if self.is_bool:
            return False
        return (_finfo if self.is_floating else np.iinfo)(self.np).min

    @property
    def max(self):
        if self.is_complex:
            raise TypeError(f"{self.name} has no ordering, hence no min or max")
        if self.is_bool:
            return True
        return (_finfo if self.is_floating else np.iinfo)(self.np).max

    def __repr__(self):
        return f"tf.{self.name}"

    __str__ = __repr__

    def __eq__(self, other):
        if other is self:
            return True
        try:
            return as_dtype(other) is self
        except Exception:   # anything else (a raising __hash__ or .dtype included)
            return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return self._hash

    def __reduce__(self):
        return (as_dtype, (self.name,))


bfloat16 = DType(_BF16)
float16 = half = DType(np.float16)
float32 = DType(np.float32)
float64 = double = DType(np.float64)
int8 = DType(np.int8)
int16 = DType(np.int16)
int32 = DType(np.int32)
int64 = DType(np.int64)
uint8 = DType(np.uint8)
uint16 = DType(np.uint16)
uint32 = DType(np.uint32)
uint64 = DType(np.uint64)
complex64 = DType(np.complex64)
complex128 = DType(np.complex128)
bool_ = DType(np.bool_)

ALL_DTYPES = (bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
              uint64, complex64, complex128, bool_)
FLOAT_DTYPES = (bfloat16, float16, float32, float64)
INT_DTYPES = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
COMPLEX_DTYPES = (complex64, complex128)
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES

# NumPy dtype -> DType. Keyed by np.dtype objects *and* scalar types so that
# `_FROM_NP[arr.dtype]` on the hot path is a single dict hit.
_FROM_NP: dict = {}
for _d in ALL_DTYPES:
    _FROM_NP[_d.np] = _d
    _FROM_NP[_d.np.type] = _d
_FROM_NAME = {d.name: d for d in ALL_DTYPES}
_FROM_NAME.update({"half": float16, "float": float32, "double": float64, "bool_": bool_,
                   "int": int32, "long": int64})
_FROM_PY = {float: float32, int: int32, bool: bool_, complex: complex128}


#: strings NumPy's dtype parser is asked about: a type code or name ("<f4", "i8",
#: "float"), never a structured spec ("f4,i4"), which it parses with eval-like rules
#: and raises ValueError/SyntaxError on
_NP_SPEC = re.compile(r"[<>=|]?[A-Za-z_][A-Za-z_0-9]*")


def as_dtype(x) -> DType:
    """Convert a DType, NumPy dtype/type, name string or Python type to a DType.

    Anything else raises InvalidTypeError (a ``TypeError``), whatever the object:
    values (arrays, NumPy scalars, tensors) are not dtypes.

    >>> as_dtype("float64") is float64, as_dtype(float) is float32
    (True, True)
    """
    if type(x) is DType:
        return x
    try:
        d = _FROM_NP.get(x) if not isinstance(x, str) else _FROM_NAME.get(x)
        if d is not None:
            return d
        if x in _FROM_PY:
            return _FROM_PY[x]
        d = None
        if (_NP_SPEC.fullmatch(x) is not None if isinstance(x, str)
                else not hasattr(x, "shape")):
            with warnings.catch_warnings():    # NumPy's deprecated aliases ("a")
                warnings.simplefilter("ignore")
                d = _FROM_NP.get(np.dtype(x))
    except Exception:  # noqa: BLE001 - unhashable, a raising .dtype, NumPy's parser
        d = None
    if d is None:
        raise InvalidTypeError(
            f"Cannot convert {_short(x)} to a tapeflow dtype; supported: "
            + ", ".join(d.name for d in ALL_DTYPES))
    return d


def _short(x):
    try:
        r = repr(x)
    except Exception:  # noqa: BLE001 - a repr that raises
        r = f"<{type(x).__name__} object>"
    return r if len(r) <= 80 else r[:77] + "..."


def from_numpy(np_dtype) -> DType:
    """DType for a NumPy dtype (hot path: one dict lookup)."""
    d = _FROM_NP.get(np_dtype)
    if d is None:
        if np_dtype == np.dtype(object) or np.dtype(np_dtype).kind in "USOV":
            raise InvalidTypeError(f"tapeflow has no dtype for NumPy dtype {np.dtype(np_dtype)}; "
                            "supported: " + ", ".join(d.name for d in ALL_DTYPES))
        return as_dtype(np_dtype)
    return d


def result_type(*args) -> DType:
    """Promote DTypes and weak Python scalars by NumPy 2 rules.

    Arguments are DTypes (strong) or Python ``bool``/``int``/``float`` values
    (weak). With only weak arguments the seeds' defaults apply (float32/int32).
    """
    strong = [a.np for a in args if type(a) is DType]
    weak = [a for a in args if type(a) is not DType]
    if not strong:
        kinds = {type(w) for w in weak}
        return (complex128 if complex in kinds else float32 if float in kinds else
                int32 if int in kinds else bool_)
    if _BF16 in strong:
        return _bf16_result_type(strong, weak)
    return _FROM_NP[np.result_type(*strong, *weak)]


def _bf16_result_type(strong, weak) -> DType:
    """JAX's lattice where bfloat16 meets another dtype: with float16 -> float32; with a
    wider float (or complex) -> that dtype; with integers and bools -> bfloat16; a weak
    Python float or int keeps bfloat16, a weak complex gives complex64. (NumPy itself
    refuses bfloat16 with float16, and would make bfloat16 with int32 a float64.)"""
    others = [d for d in strong if d != _BF16]
    floats = [d for d in others if d.kind in "fc"]
    if not floats:
        return complex64 if any(type(w) is complex for w in weak) else bfloat16
    if all(d == np.float16 for d in floats):
        floats = [np.dtype(np.float32)]
    return _FROM_NP[np.result_type(*floats, *weak)]
