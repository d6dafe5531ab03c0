"""Bad input, round 4 (issue 43, part 5): inputs that still escaped as plain Python
errors, found by independent fuzzing on cpu:0 and opencl:0.

* ``tf.constant(tensor, shape=[None])`` (a Tensor or Variable value): ``int(None)``'s
  TypeError, ``int('a')``'s ValueError, and ``shape=[1.5]``/``[True]`` silently taken as
  ``[1]``; a scalar ``shape=2`` was refused with "'int' object is not iterable", which
  the Python-value path accepts.
* a ragged list as an index (``t[[[0, 1], [0]]]``): NumPy's ValueError ("setting an
  array element with a sequence"); ``x[key] = value`` named neither the device nor the
  dtype.
* an index of a huge shape -- an index array, or several that broadcast together --
  NumPy's ``_ArrayMemoryError`` (a plain MemoryError) while tapeflow converted it, or a
  ResourceExhaustedError that named only the internal BroadcastTo; ``x[key] = value``
  likewise.

Each is now a tapeflow error (a subclass of the matching built-in) naming the function
or op, the device, the shapes and dtypes, and what to do; a failed call changes no
Variable and leaves a recording tape usable. Huge index arrays are NumPy broadcast
views (zero strides, a few bytes), sized from the devices' limits so that every check
refuses them on any machine; the largest real allocation here is a 40 MB index.
"""

import math

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.runtime import shapes as _shapes
from tapeflow.runtime.devices import get_device
from test_bad_input import DEVICES, _raises, dev  # noqa: F401 - dev: the device fixture

#: the largest buffer any device under test (or the host) holds, None if one is unknown
_LIMITS = [_shapes.device_memory_limit(get_device(d)) for d in ["cpu:0", *DEVICES]]
LIMIT = None if None in _LIMITS else max(_LIMITS)
#: N x N elements are more than any of them holds (even as int8): 100,000 here (N x N
#: int64 positions: 74.5 GiB), more on a larger machine
N = max(100_000, math.isqrt(LIMIT or 0) + 1)
needs_limits = pytest.mark.skipif(
    LIMIT is None, reason="a device's memory limit is unknown: the checks cannot refuse")


def _size(nbytes):
    return f"{_shapes.format_bytes(nbytes)} ({nbytes} bytes)"


# --- tf.constant(value, shape=...) ----------------------------------------------------

BAD_SHAPES = [
    ([None], "got NoneType None"),
    (["a"], "got str 'a'"),
    ([1.5], "got float 1.5"),
    ([True], "got the bool True"),
    ("abc", "got str 'abc'"),
    ([[2]], "got list [2]"),
    ([-1], "shape must be non-negative, got [-1]"),
    ([np.float32(2.0)], "got float32"),
]


def _values(kind):
    """The value given to tf.constant, made on the current device, and its shape."""
    if kind == "tensor":
        return tf.constant([1.0, 2.0]), [2]
    if kind == "variable":
        return tf.Variable([1.0, 2.0]), [2]
    if kind == "tensor scalar":
        return tf.constant(1.0), []
    if kind == "list":
        return [1.0, 2.0], [2]
    return 1.0, []


@pytest.mark.parametrize("kind", ["tensor", "variable", "tensor scalar", "list", "scalar"])
@pytest.mark.parametrize("shape,why", BAD_SHAPES)
def test_constant_with_an_invalid_shape(dev, kind, shape, why):
    with tf.device(dev):
        value, vshape = _values(kind)
        before = np.array(value).copy()
        e = _raises(errors.InvalidArgumentError, lambda: tf.constant(value, shape=shape),
                    f"constant: shape={shape!r} is not a valid shape for a float32 value of "
                    f"shape {vshape}", why, "a list of non-negative integers (shape=[2, 3])",
                    "tf.TensorSpec", f"[Op:Const] on {dev}")
    assert isinstance(e, ValueError)
    assert "[in " not in str(e)                       # (not "[in as_index]")
    np.testing.assert_array_equal(np.array(value), before)


@pytest.mark.parametrize("kind", ["tensor", "variable", "tensor scalar", "scalar"])
@pytest.mark.parametrize("shape", [2, np.int64(2), [np.int64(2)], (2,), [2],
                                   tf.TensorShape([2])])
def test_constant_with_a_valid_shape_agrees_across_value_kinds(kind, shape):
    value, vshape = _values(kind)
    want = [1.0, 2.0] if vshape else [1.0, 1.0]
    t = tf.constant(value, shape=shape)
    assert t.shape == [2] and t.numpy().tolist() == want
    t = tf.constant(value, shape=tf.constant([2]))
    assert t.numpy().tolist() == want


@pytest.mark.parametrize("kind", ["tensor scalar", "variable", "scalar"])
def test_constant_with_a_huge_shape_is_resource_exhausted_in_const(dev, kind):
    with tf.device(dev):
        value = {"tensor scalar": lambda: tf.constant(1.0), "variable": lambda: tf.Variable(1.0),
                 "scalar": lambda: 1.0}[kind]()
        _raises(errors.ResourceExhaustedError,
                lambda: tf.constant(value, shape=[2 ** 40, 2 ** 40]),
                "a float32 tensor of shape [1099511627776, 1099511627776] needs",
                "bytes", f"more than {dev} can hold", "Use a smaller shape",
                f"[Op:Const] on {dev}")


# --- a ragged list as an index -------------------------------------------------------

RAGGED = [
    ([[0, 1], [0]], 0),
    ([0, [1, 2]], 0),
    (([[0, 1], [0]], 0), 0),
    ((0, [[0, 1], [0]]), 1),
    ((slice(None), [[0], [1, 2]]), 1),
    ([[True], [True, False]], 0),
]


def _ragged_part(key):
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, list):
            return k
    raise AssertionError(key)


@pytest.mark.parametrize("key,dim", RAGGED)
@pytest.mark.parametrize("holder", ["tensor", "variable"])
def test_a_ragged_list_index(dev, key, dim, holder):
    with tf.device(dev):
        x = tf.reshape(tf.range(12.0), [3, 4])
        if holder == "variable":
            x = tf.Variable(x)
        e = _raises(errors.InvalidArgumentError, lambda: x[key],
                    f"x[key]: the index {_ragged_part(key)!r} for dimension {dim} of a float32 "
                    "tensor of shape [3, 4] is a ragged list",
                    "every row the same length", "index with each row separately",
                    f"[Op:StridedSlice] on {dev}")
    assert isinstance(e, ValueError)
    assert np.asarray(x).sum() == 66.0


def test_a_ragged_list_holding_tensors_is_a_ragged_index():
    x = tf.reshape(tf.range(12.0), [3, 4])
    _raises(errors.InvalidArgumentError, lambda: x[[tf.constant(0), [1]]],
            "is a ragged list", "[Op:StridedSlice] on cpu:0")


@pytest.mark.parametrize("key,dim", RAGGED)
@pytest.mark.parametrize("holder", ["tensor", "variable"])
def test_assigning_through_a_ragged_list_index_changes_nothing(dev, key, dim, holder):
    with tf.device(dev):
        x = tf.reshape(tf.range(12.0), [3, 4])
        if holder == "variable":
            x = tf.Variable(x)

        def assign():
            x[key] = 1.0
        e = _raises(errors.InvalidArgumentError, assign,
                    f"x[key] = value: the index {_ragged_part(key)!r} (entry {dim} of the key) "
                    "is a ragged list", "for a float32 tensor of shape [3, 4]",
                    "nothing was changed", "every row the same length",
                    f"[in Tensor.__setitem__] on {dev}")
    assert isinstance(e, ValueError)
    np.testing.assert_array_equal(np.asarray(x), np.arange(12.0).reshape(3, 4))


def test_other_bad_setitem_keys_name_the_device_and_the_dtype(dev):
    with tf.device(dev):
        v = tf.Variable(tf.zeros([3, 4], tf.int32))

        def assign():
            v[[0.5]] = 1
        _raises(errors.InvalidArgumentError, assign,
                "x[key] = value: index [0.5] is not valid for shape [3, 4] (a int32 tensor)",
                "nothing was changed", f"[in Tensor.__setitem__] on {dev}")
    assert np.asarray(v).sum() == 0


# --- an index of a huge shape --------------------------------------------------------

def _huge_view(dtype=np.int64):
    return np.broadcast_to(np.zeros((), dtype), (N, N))


@needs_limits
@pytest.mark.parametrize("dtype", [np.int64, np.int8])
@pytest.mark.parametrize("where", ["alone", "first", "second"])
def test_a_huge_index_array_is_resource_exhausted(dev, dtype, where):
    with tf.device(dev):
        x = tf.reshape(tf.range(12.0), [3, 4])
    view = _huge_view(dtype)
    key, dim = {"alone": (view, 0), "first": ((view, 0), 0),
                "second": ((slice(None), view), 1)}[where]
    e = _raises(errors.ResourceExhaustedError, lambda: x[key],
                f"x[key]: the integer-array index of shape [{N}, {N}] for dimension {dim} of "
                f"a float32 tensor of shape [3, 4] needs {_size(N * N * 8)} as int64 "
                "positions, more than cpu:0 can hold in one buffer",
                "Index fewer elements at a time", f"[Op:GatherV2] on {dev}")
    assert isinstance(e, MemoryError)


@needs_limits
def test_a_gather_too_large_for_the_device_is_refused_before_it_runs(dev):
    rows = 10 ** 7                                # a real index: 40 MB as int32
    cols = LIMIT // (4 * rows) + 1                # the float32 result: more than LIMIT
    with tf.device(dev):
        x = tf.ones([3, cols])
    idx = np.zeros(rows, np.int32)
    e = _raises(errors.ResourceExhaustedError, lambda: x[idx],
                f"x[key]: the integer-array index of shape [{rows}] for dimension 0: the "
                f"result, a float32 tensor of shape [{rows}, {cols}], needs "
                f"{_size(rows * cols * 4)}, more than {dev} can hold in one buffer",
                f"the input is a float32 tensor of shape [3, {cols}]", f"[Op:GatherV2] on {dev}")
    assert isinstance(e, MemoryError)
    assert x[idx[:5]].shape == [5, cols]          # a smaller index still works


@needs_limits
@pytest.mark.parametrize("as_tensors", [False, True])
@pytest.mark.parametrize("holder", ["tensor", "variable"])
def test_indices_that_broadcast_to_a_huge_shape_are_resource_exhausted(dev, as_tensors,
                                                                       holder):
    with tf.device(dev):
        x = tf.reshape(tf.range(12.0), [3, 4])
        if holder == "variable":
            x = tf.Variable(x)
        i, j = np.arange(N)[:, None] % 3, np.arange(N)[None, :] % 4
        if as_tensors:
            i, j = tf.constant(i), tf.constant(j)
        wide = "int64" if as_tensors else "int32"
        e = _raises(errors.ResourceExhaustedError, lambda: x[i, j],
                    f"x[key]: the integer-array indices of shapes [[{N}, 1], [1, {N}]] "
                    f"broadcast to shape [{N}, {N}]",
                    f"the result, a float32 tensor of shape [{N}, {N}], needs "
                    f"{_size(N * N * 4)}", f"the {wide} coordinates", f"[{N}, {N}, 2]",
                    f"more than {dev} can hold", "Index fewer points at a time",
                    f"[Op:GatherNd] on {dev}")
    assert "BroadcastTo" not in str(e)
    assert np.asarray(x).sum() == 66.0
    # a smaller index of the same kind still works
    got = x[i[:5] if not as_tensors else i[:5], j[:, :2] if not as_tensors else j[:, :2]]
    assert got.shape == [5, 2]


@needs_limits
@pytest.mark.parametrize("holder", ["tensor", "variable"])
@pytest.mark.parametrize("which", ["broadcast", "one array"])
def test_assigning_through_a_huge_index_changes_nothing(dev, holder, which):
    with tf.device(dev):
        x = tf.reshape(tf.range(12.0), [3, 4])
        if holder == "variable":
            x = tf.Variable(x)
    key = ((np.arange(N)[:, None] % 3, np.arange(N)[None, :] % 4) if which == "broadcast"
           else _huge_view())
    shown = (f"(<array of shape [{N}, 1], int64>, <array of shape [1, {N}], int64>)"
             if which == "broadcast" else f"<array of shape [{N}, {N}], int64>")

    def assign():
        x[key] = 1.0
    e = _raises(errors.ResourceExhaustedError, assign,
                "x[key] = value on a float32 tensor of shape [3, 4] with the index " + shown,
                f"broadcast to shape [{N}, {N}]", _size(N * N * 8),
                "nothing was changed", "Assign fewer elements at a time",
                f"[in Tensor.__setitem__] on {dev}")
    assert isinstance(e, MemoryError)
    np.testing.assert_array_equal(np.asarray(x), np.arange(12.0).reshape(3, 4))


@needs_limits
def test_a_tape_records_on_after_a_refused_index():
    x = tf.constant([1.0, 2.0, 3.0])
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        for bad in (lambda: x[[[0, 1], [0]]], lambda: x[np.broadcast_to(np.int64(0), (N * N,))],
                    lambda: v[np.arange(N)[:, None] % 2, np.arange(N)[None, :] % 2],
                    lambda: tf.constant(x, shape=[None])):
            with pytest.raises(errors.TapeflowError):
                bad()
        y = tf.reduce_sum(x[[0, 2]] * 2.0) + tf.reduce_sum(v[[1]])
    assert tape.gradient(y, x).numpy().tolist() == [2.0, 0.0, 2.0]
    assert tape.gradient(y, v).numpy().tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert v.numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.parametrize("value", [np.array(["2020-01-01", "2020-01-02"], "datetime64[D]"),
                                   np.array([1, 2], "timedelta64[s]"),
                                   np.array([(3.0,), (5.0,)], dtype=[("a", "f8")])])
def test_dates_times_and_structured_arrays_are_not_coerced_to_numbers(value):
    # a third probe: a datetime64 "gradient" became float32 numbers of days
    for fn in (lambda: tf.constant(value, dtype=tf.float32),
               lambda: tf.convert_to_tensor(value, dtype=tf.float32)):
        with pytest.raises(errors.InvalidArgumentError, match="date, time or structured"):
            fn()
    w = tf.Variable([1.0, 2.0])
    with pytest.raises(errors.InvalidArgumentError, match="No variable was updated"):
        tf.train.GradientDescentOptimizer(0.1).apply_gradients([(value, w)])
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])
