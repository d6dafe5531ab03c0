"""Data types and promotion.

A :class:`DType` wraps a NumPy dtype; every backend stores its arrays with NumPy
dtypes (CuPy and PyOpenCL do too), so the mapping is one dict lookup.

Promotion is one lattice with two modes (:func:`result_type`; every rule in one table
in docs/dtypes.md). ``"tf"``, for ``tf.*`` ops and the Tensor operators, is JAX's: it
never widens to 64 bits unasked, and Python scalars are *weak*: they take the dtype of
the tensor they meet (``float32_tensor * 2.0`` stays float32, ``int32_tensor * 2.5`` is
float32). A Python scalar that becomes a tensor on its own follows the seeds'
convention: ``float`` -> float32, ``int`` -> int32, ``bool`` -> bool, ``complex`` ->
complex128 (TensorFlow's). ``"array_api"`` is ``tapeflow.numpy``'s: the standard's table,
NumPy's where the standard leaves integers with floats open.

>>> import tapeflow as tf
>>> tf.float32.name, tf.as_dtype("int64") is tf.int64
('float32', True)
>>> result_type(float32, 2.0) is float32
True
>>> result_type(int32, 2.5), result_type(int32, 2.5, mode="array_api")
(tf.float32, tf.float64)

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

from .errors import InvalidArgumentError, InvalidTypeError

__all__ = [
    "DType", "as_dtype", "bfloat16", "float16", "float32", "float64", "int8", "int16", "int32",
    "int64", "uint8", "uint16", "uint32", "uint64", "complex64", "complex128", "bool_",
    "half", "double", "string", "ALL_DTYPES", "FLOAT_DTYPES",
    "INT_DTYPES", "COMPLEX_DTYPES", "NUMERIC_DTYPES", "result_type", "join", "MODES",
    "WeakType", "WEAK_INT", "WEAK_FLOAT", "WEAK_COMPLEX",
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
        return FROM_NP[self.np.type(0).real.dtype] if self.is_complex else self

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

    def __str__(self):             # TensorFlow's print(x.dtype)
        return f"<dtype: '{self.name}'>"

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
#: text, on the host only: NumPy object arrays of ``bytes`` (docs/dtypes.md, "Strings"); not a
#: number, so in none of the tuples below and never promoted
string = DType(np.object_)
string.name = "string"

ALL_DTYPES = (bfloat16, float16, float32, float64, int8, int16, int32, int64, uint8, uint16, uint32,
              uint64, complex64, complex128, bool_)
FLOAT_DTYPES = (bfloat16, float16, float32, float64)
INT_DTYPES = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
COMPLEX_DTYPES = (complex64, complex128)
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES

# NumPy dtype -> DType. Keyed by np.dtype objects *and* scalar types so that
# `FROM_NP[arr.dtype]` on the hot path is a single dict hit.
FROM_NP: dict = {}
for _d in ALL_DTYPES:
    FROM_NP[_d.np] = _d
    FROM_NP[_d.np.type] = _d
FROM_NP[string.np] = FROM_NP[np.object_] = string
_FROM_NAME = {d.name: d for d in ALL_DTYPES}
_FROM_NAME.update({"half": float16, "float": float32, "double": float64, "bool_": bool_,
                   "int": int32, "long": int64, "string": string})
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
        d = FROM_NP.get(x) if not isinstance(x, str) else _FROM_NAME.get(x)
        if d is not None:
            return d
        if x in _FROM_PY:
            return _FROM_PY[x]
        d = None
        if (_NP_SPEC.fullmatch(x) is not None if isinstance(x, str)
                else not hasattr(x, "shape")):
            with warnings.catch_warnings():    # NumPy's deprecated aliases ("a")
                warnings.simplefilter("ignore")
                d = FROM_NP.get(np.dtype(x))
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
    d = FROM_NP.get(np_dtype)
    if d is None:
        if np_dtype == np.dtype(object) or np.dtype(np_dtype).kind in "USOV":
            raise InvalidTypeError(f"tapeflow has no dtype for NumPy dtype {np.dtype(np_dtype)}; "
                            "supported: " + ", ".join(d.name for d in ALL_DTYPES))
        return as_dtype(np_dtype)
    return d


# --- promotion: one lattice, two modes ---------------------------------------------------------
#
# docs/dtypes.md shows LATTICE, ARRAY_API_INT_TO_FLOAT, DEFAULTS and ARRAY_API_WEAK as one
# table; tests/test_dtypes.py renders it from them and fails when the page differs.

#: ``"tf"``: the ``tf.*`` ops and the Tensor operators; ``"array_api"``: ``tapeflow.numpy``
MODES = ("tf", "array_api")


class WeakType:
    """The type of a Python scalar before it meets a tensor: a node of the lattice just
    below the dtypes of its kind (``int*`` below ``uint8`` and ``int8``), so the scalar
    takes the dtype of any tensor of its kind or above (JAX's weak types)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


WEAK_INT = WeakType("int*")
WEAK_FLOAT = WeakType("float*")
WEAK_COMPLEX = WeakType("complex*")

#: Python scalar type -> its node (a Python bool is plain bool: the lattice's bottom in "tf")
_PY_NODE = {bool: bool_, int: WEAK_INT, float: WEAK_FLOAT, complex: WEAK_COMPLEX}

_AA = "array_api"
#: The lattice (JAX's): (node, the nodes just above it, the mode the row holds in, or None
#: for both). Types promote to the least node above both (their join); with no node above
#: both (``bool`` with a number in "array_api") they do not promote.
LATTICE = (
    (bool_, (WEAK_INT,), "tf"),
    (WEAK_INT, (uint8, int8), None),
    (uint8, (uint16, int16), None),
    (uint16, (uint32, int32), None),
    (uint32, (uint64, int64), None),
    (int8, (int16,), None),
    (int16, (int32,), None),
    (int32, (int64,), None),
    (uint64, (WEAK_FLOAT,), None),          # integers meet floats at float*: the float wins
    (int64, (WEAK_FLOAT,), None),
    (WEAK_FLOAT, (bfloat16, float16, WEAK_COMPLEX), None),
    (bfloat16, (float32,), None),
    (float16, (float32,), None),
    (float32, (float64, complex64), None),
    (float64, (complex128,), None),
    (WEAK_COMPLEX, (complex64,), None),
    (complex64, (complex128,), None),
)

#: "array_api": an integer dtype that meets a float or complex one first becomes the float
#: that holds it (NumPy's rule; the standard leaves integers with floats open), so
#: ``int32`` with ``float32`` is float64 there, float32 in "tf".
ARRAY_API_INT_TO_FLOAT = {
    int8: float16, uint8: float16, int16: float32, uint16: float32,
    int32: float64, uint32: float64, int64: float64, uint64: float64,
}

#: What a weak type becomes, per mode: "alone" (no tensor or dtype among the inputs:
#: ``tf.constant(1.5)``, ``tnp.asarray(1)``) and "joined" (the join with tensors was weak:
#: ``int32_tensor * 2.5``). Strong inputs alone whose join is weak (uint64 with a signed
#: integer) give float64: two 64-bit inputs, a 64-bit result.
DEFAULTS = {
    "tf": {"alone": {WEAK_INT: int32, WEAK_FLOAT: float32, WEAK_COMPLEX: complex128},
           "joined": {WEAK_INT: int32, WEAK_FLOAT: float32, WEAK_COMPLEX: complex64}},
    _AA: {"alone": {WEAK_INT: int64, WEAK_FLOAT: float32, WEAK_COMPLEX: complex64}},
}

#: "array_api" does not put Python scalars on the lattice: one of the tensors' kind or a
#: lower one takes their dtype (``int8 + 1`` is int8, ``bool + 1`` bool); one of a higher
#: kind joins as the dtype below (NEP 50's rule: ``int32 + 2.5`` is float64,
#: ``float32 + 1j`` complex64), or is that dtype where the tensors are bool.
ARRAY_API_WEAK = {
    ("bool", float): float32, ("bool", complex): complex64,
    ("int", float): float64, ("int", complex): complex128,
    ("float", complex): complex64,
}


def _kind(d):
    return "bool" if d.is_bool else "int" if d.is_integer else "float" if d.is_floating \
        else "complex"


def _least_upper_bounds(mode):
    """{(a, b): join} for every pair of nodes with one, in ``mode``'s part of LATTICE."""
    nodes = list(dict.fromkeys(n for n, _, _ in LATTICE)) + [complex128]
    covers = {n: [] for n in nodes}
    for n, up, m in LATTICE:
        if m in (None, mode):
            covers[n].extend(up)
    above = {}

    def up_set(n):
        if n not in above:
            above[n] = frozenset({n}).union(*(up_set(c) for c in covers[n]))
        return above[n]

    table = {}
    for a in nodes:
        for b in nodes:
            common = up_set(a) & up_set(b)
            least = [c for c in common if up_set(c) >= common]
            if len(least) > 1:      # (a malformed LATTICE: tests/test_dtypes.py)
                raise AssertionError(f"{mode}: {a} and {b} have two joins {least}")
            if least:
                table[a, b] = least[0]
    return table


def _build_joins():
    """{mode: {(a, b): join}}: the lattice's, with ARRAY_API_INT_TO_FLOAT applied first in
    "array_api"."""
    joins = {mode: _least_upper_bounds(mode) for mode in MODES}
    aa = joins[_AA]
    for i, f in ARRAY_API_INT_TO_FLOAT.items():
        for d in FLOAT_DTYPES + COMPLEX_DTYPES:
            aa[i, d] = aa[d, i] = aa[f, d]
    return joins


_JOINS = _build_joins()


def join(a, b, mode="tf"):
    """The least node above ``a`` and ``b`` (DTypes or weak types) in ``mode``'s lattice;
    InvalidTypeError where there is none (``bool`` with a number in "array_api")."""
    try:
        return _JOINS[mode][a, b]
    except KeyError:
        if mode not in _JOINS:
            raise InvalidArgumentError(
                f"result_type: unknown promotion mode {mode!r}; one of {MODES}") from None
        if mode == _AA:
            raise InvalidTypeError(
                f"array API: no promotion between {a.name} and {b.name} (bool mixes with "
                "bool only); convert with astype first") from None
        raise InvalidTypeError(f"result_type: no promotion between {a} and {b}") from None


def result_type(*args, mode="tf") -> DType:
    """The dtype ``args`` promote to in ``mode`` (docs/dtypes.md has every rule).

    Arguments are DTypes (or anything :func:`as_dtype` takes: strong) and Python
    ``bool``/``int``/``float``/``complex`` values (weak). ``"tf"``: JAX's lattice, which
    never widens to 64 bits unasked: ``int32`` with ``float32`` is float32, with a
    Python float float32; ``"array_api"``: the standard's table (NumPy's where the
    standard leaves integers with floats open), Python scalars by NEP 50.

    >>> result_type(int32, float32), result_type(int32, 2.5), result_type(float16, 2.0)
    (tf.float32, tf.float32, tf.float16)
    >>> result_type(int32, float32, mode="array_api"), result_type(1), result_type(1, mode="array_api")
    (tf.float64, tf.int32, tf.int64)
    """
    strong = None
    weak = []
    for a in args:
        t = type(a)
        if t is not DType:
            if t in _PY_NODE:
                weak.append(a)
                continue
            a = as_dtype(a)
        strong = a if strong is None or strong is a else join(strong, a, mode)
    if type(strong) is WeakType:            # uint64 with a signed integer
        strong = float64
    if mode == _AA and strong is not None:
        for w in weak:
            k = ARRAY_API_WEAK.get((_kind(strong), type(w)))
            if k is not None:
                strong = k if strong.is_bool else join(strong, k, mode)
        return strong
    node = strong
    for w in weak:
        n = _PY_NODE[type(w)]
        node = n if node is None else join(node, n, mode)
    if node is None:
        raise InvalidArgumentError("result_type needs at least one dtype or Python scalar")
    if type(node) is WeakType:
        node = DEFAULTS[mode]["alone" if strong is None else "joined"][node]
    return node
