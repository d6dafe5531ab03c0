"""Equality and hashing of the public value types (issue 31; issue 30 item 7).

``DType``, ``Device``, ``TensorShape`` and ``OpDef`` are compared with arbitrary
objects by user code and by other libraries (the array API test suite compares dtypes
with arbitrary strings after every test). ``__eq__``/``__ne__`` with any object return
a bool or ``NotImplemented`` and never raise; ``==`` and ``!=`` agree; and two equal
values of the same kind hash alike (a DType also hashes as its NumPy dtype, which it
equals). A name string equals a DType or a Device without hashing like it, as with
NumPy's own dtypes: that pair is not checked.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapeflow as tf
from tapeflow.runtime import registry
from tapeflow.runtime.devices import Device, list_devices
from tapeflow.dtypes import ALL_DTYPES, DType, as_dtype
from tapeflow.runtime.tensor import TensorShape


class RaisingEq:
    """An object whose comparisons and hash raise."""

    def __eq__(self, other):
        raise RuntimeError("RaisingEq.__eq__")

    __ne__ = __eq__

    def __hash__(self):
        raise RuntimeError("RaisingEq.__hash__")


class RaisingDtypeAttr:
    """NumPy's dtype parser reads ``.dtype`` from objects: this one raises."""

    @property
    def dtype(self):
        raise ValueError("no dtype here")


class RaisingInt(int):
    """An int subclass whose comparison raises (inside a list compared with a shape)."""

    def __eq__(self, other):
        raise RuntimeError("RaisingInt.__eq__")

    __hash__ = int.__hash__


_NP_DTYPES = [np.dtype(c) for c in "?bhilqBHILQefdgFDGOSUVMm"] + [
    np.dtype("f4,i4"), np.dtype(("f4", (2,))), np.dtype("datetime64[s]")]

_PUNCT = st.text(alphabet=st.sampled_from(list(",./;'[]\\-=<>?:\"{}|_+!@#$%^&*()`~ ²")
                                          + list("fiucbS0123456789")), max_size=12)


VALUES = (list(ALL_DTYPES) + list_devices()
          + [registry.get_op(n) for n in ("Add", "MatMul", "Reshape")])
SHAPES = [TensorShape(()), TensorShape((2, 3)), TensorShape([1, 1, 784])]

def _others(values=VALUES):
    """Arbitrary objects: strings (with punctuation, NumPy's structured dtype specs),
    NumPy dtypes, types and scalars, None, tensors, arrays, lists, raising objects."""
    return st.one_of(
        st.text(max_size=20), _PUNCT,
        st.sampled_from(["float32", "f4", "<f4", "a,b", "f8,", "i4,(2)f", "(2)i", "a", ",",
                         "cpu:0", "CPU", "/device:CPU:0", "cpu:²", "opencl:0", "gpu:99",
                         "Add", "tapeflow::Add", ""]),
        st.sampled_from(_NP_DTYPES),
        st.sampled_from([np.float32, np.int64, float, int, bool, complex, object, str, type]),
        st.sampled_from([np.float32(1.5), np.int8(3), np.bool_(True), np.complex64(1j)]),
        st.none(), st.integers(), st.floats(allow_nan=True), st.complex_numbers(),
        st.binary(max_size=8),
        st.lists(st.one_of(st.integers(-3, 10), st.none(), st.text(max_size=3)), max_size=4),
        st.tuples(st.integers(0, 5), st.integers(0, 5)),
        st.builds(lambda v: tf.constant(v), st.floats(-2, 2, width=32)),
        st.builds(lambda n: np.zeros((n,), np.float32), st.integers(0, 3)),
        st.builds(RaisingEq), st.builds(RaisingDtypeAttr),
        st.builds(lambda: [RaisingInt(2), 3]), st.builds(lambda: (RaisingInt(1),)),
        st.sampled_from(values),
        st.builds(lambda: {"a": 1}), st.builds(object),
    )


def _is_well_behaved(obj):
    """Objects whose own reflected ``__eq__`` does not raise (``a == obj`` may then
    call obj.__eq__(a), which is obj's business, not the value type's)."""
    return not isinstance(obj, (RaisingEq, RaisingDtypeAttr))


def _same_kind(a, b):
    if isinstance(a, DType):
        return isinstance(b, (DType, np.dtype))
    if isinstance(a, TensorShape):
        return isinstance(b, tuple) and not any(isinstance(d, RaisingInt) for d in b)
    return type(a) is type(b)


def _check_pair(value, other):
    eq = value.__eq__(other)
    ne = value.__ne__(other)
    assert eq is NotImplemented or type(eq) is bool, (value, other, eq)
    assert ne is NotImplemented or type(ne) is bool, (value, other, ne)
    if eq is not NotImplemented and ne is not NotImplemented:
        assert ne is (not eq), (value, other)
    h = hash(value)
    assert h == hash(value)
    if _is_well_behaved(other) and not isinstance(other, (np.ndarray, np.generic, tf.Tensor)):
        # (an array, a NumPy scalar or a tensor compares elementwise from its own side)
        assert bool(value == other) is not bool(value != other), (value, other)
        if value == other and _same_kind(value, other):
            assert h == hash(other), (value, other)


@pytest.mark.parametrize("value", VALUES, ids=repr)
@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(other=_others())
def test_equality_never_raises_and_hash_is_consistent(value, other):
    _check_pair(value, other)


@settings(max_examples=300, deadline=None, database=None)
@given(value=st.sampled_from(VALUES + SHAPES), other=_others(VALUES + SHAPES))
def test_shape_equality_never_raises(value, other):
    _check_pair(value, other)


def test_dtype_equality_with_strings_numpy_cannot_parse():
    # issue 31: the array API suite compares dtypes with arbitrary strings
    for s in ["some string", ",./;'[]\\-=<>?:\"{}|_+!@#$%^&*()`~", ",", "a,b", "(2)i"]:
        assert (tf.float32 == s) is False
        assert (tf.float32 != s) is True
        with pytest.raises(tf.errors.InvalidTypeError, match="to a tapeflow dtype"):
            as_dtype(s)


def test_dtype_is_not_equal_to_values_of_that_dtype():
    # a NumPy scalar, an array or a tensor is a value, not a dtype
    assert tf.float32 != np.float32(1.5)
    assert tf.float32.__eq__(tf.constant(1.0)) is NotImplemented
    assert tf.float32.__eq__(RaisingDtypeAttr()) is NotImplemented
    assert tf.float32 == np.float32 and tf.float32 == "float32" and tf.float32 == "<f4"
    assert hash(tf.float32) == hash(np.dtype(np.float32))


def test_device_equality_with_odd_names():
    cpu = list_devices()[0]
    assert isinstance(cpu, Device) and cpu.name == "cpu:0"
    assert cpu == "cpu:0" and cpu == "/device:CPU:0"
    assert (cpu == "cpu:²") is False          # str.isdigit() is true of "²"; int() refuses it
    assert cpu.__eq__(None) is NotImplemented
    assert cpu.__ne__(3) is NotImplemented and cpu.__eq__(RaisingEq()) is NotImplemented


def test_shape_equality_with_raising_elements():
    s = TensorShape((2, 3))
    assert s == [2, 3] and s == (2, 3) and s != [2, 4] and s != "ab"
    assert s.__eq__([RaisingInt(2), 3]) is False
    assert s.__ne__("ab") is NotImplemented
