"""Bad input through the public API: one error family, raised before any kernel runs,
the same on every device, and nothing coerced silently (issue 13).

Each test here failed on the code before the fix it names: a plain TypeError or
AttributeError from NumPy internals, a silent result, or a kernel reading garbage."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.runtime import shapes
from tapeflow.runtime.registry import OPS

DEVICES = ["cpu:0"] + [d for d in ("opencl:0",) if d in [str(x) for x in tf.list_devices()]]


@pytest.fixture(params=DEVICES)
def dev(request):
    return request.param


def _raises(cls, fn, *fragments):
    with pytest.raises(cls) as info:
        fn()
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    assert isinstance(info.value, errors.TapeflowError)
    return info.value


# --- the error family ---------------------------------------------------------------

def test_type_errors_are_tapeflow_errors_and_type_errors():
    e = _raises(errors.InvalidTypeError, lambda: tf.as_dtype("str"), "'str'", "supported")
    assert isinstance(e, TypeError) and isinstance(e, errors.TapeflowError)
    assert issubclass(errors.OutOfRangeError, IndexError)
    with pytest.raises(errors.InvalidTypeError):
        tf.cast(tf.ones([2]), np.str_)


def test_einsum_equation_must_be_a_string():
    _raises(errors.InvalidArgumentError, lambda: tf.einsum(None, tf.ones([2])),
            "equation must be a string", "NoneType", "[Op:Einsum]")


@pytest.mark.parametrize("axis", [[None], None.__class__, 0.5, True, [0, "a"]])
def test_reduction_axis_must_be_integers(axis):
    if axis is None.__class__:
        axis = [object()]
    _raises(errors.InvalidArgumentError, lambda: tf.reduce_sum(tf.ones([2, 2]), axis=axis),
            "axis", "[Op:Sum]")


@pytest.mark.parametrize("fn", [tf.reduce_sum, tf.reduce_max, tf.reduce_mean, tf.reduce_any])
def test_duplicate_reduction_axes_are_an_error(fn):
    x = tf.ones([2, 3]) if fn is not tf.reduce_any else tf.ones([2, 3]) > 0
    _raises(errors.InvalidArgumentError, lambda: fn(x, axis=[0, 0]), "more than once")
    _raises(errors.InvalidArgumentError, lambda: fn(x, axis=[1, -1]), "more than once")


def test_tensordot_axes_validated():
    a = tf.ones([2, 2])
    _raises(errors.InvalidArgumentError, lambda: tf.tensordot(a, a, [[0, 0], [0, 1]]),
            "more than once")
    _raises(errors.InvalidArgumentError, lambda: tf.tensordot(a, a, True), "axes must be")
    _raises(errors.InvalidArgumentError, lambda: tf.tensordot(a, a, [[None], [0]]), "integer")
    # a 0-d integer array or tensor is an int, as in TensorFlow
    assert tf.tensordot(a, a, np.array(1)).shape == (2, 2)
    assert tf.tensordot(a, a, tf.constant(1)).shape == (2, 2)


# --- no silent coercion ----------------------------------------------------------------

@pytest.mark.parametrize("value,dtype", [(1.5, tf.int32), (2.0, tf.int64), ([1, 2.5], tf.int32),
                                         (np.float32(1), tf.uint8), (np.array([1.0]), tf.bool),
                                         (np.array([300]), tf.int8), (np.array([-1]), tf.uint8),
                                         (300, tf.int8), ("a", tf.float32), (1j, tf.float32)])
def test_constants_refuse_lossy_conversions(value, dtype):
    _raises(errors.InvalidArgumentError, lambda: tf.constant(value, dtype=dtype), dtype.name)


@pytest.mark.parametrize("value,dtype", [(3, tf.float32), (True, tf.bool), (1, tf.bool),
                                         (np.array([1, 2]), tf.uint8), ([1, 2], tf.int8)])
def test_lossless_conversions_still_work(value, dtype):
    assert tf.constant(value, dtype=dtype).dtype == dtype


def test_integer_variable_refuses_a_float():
    v = tf.Variable(7)
    with pytest.raises(errors.InvalidArgumentError, match="int32"):
        v.assign(1.5)
    assert int(v) == 7 and v.dtype == tf.int32


# --- shapes and allocations validated in the signature, on every device -----------

@pytest.mark.parametrize("make", [lambda: tf.zeros([-1, 2]), lambda: tf.fill([-1, 2], 1.),
                                  lambda: tf.ones([2, -3]), lambda: tf.random.normal([-2]),
                                  lambda: tf.eye(-2)])
def test_negative_dimensions_rejected_before_the_kernel(dev, make):
    with tf.device(dev):
        e = _raises(errors.InvalidArgumentError, make, "non-negative", dev)
    assert "TypeError" not in str(e) and "ValueError" not in str(e)


def test_negative_fill_same_error_on_every_device():
    msgs = set()
    for d in DEVICES:
        with tf.device(d):
            with pytest.raises(errors.InvalidArgumentError) as info:
                tf.zeros([-1, 2])
        msgs.add(str(info.value).replace(d, "DEV"))
    assert len(msgs) == 1, msgs


@pytest.mark.parametrize("make", [lambda: tf.zeros([2 ** 40]), lambda: tf.ones([2 ** 20, 2 ** 20]),
                                  lambda: tf.random.uniform([2 ** 40]),
                                  lambda: tf.random.normal([2 ** 62]),
                                  lambda: tf.range(2 ** 40), lambda: tf.eye(2 ** 21),
                                  lambda: tf.constant(1., shape=[2 ** 40]),
                                  lambda: tf.broadcast_to(tf.ones([2]), [2 ** 40, 2]),
                                  lambda: tf.fill([2 ** 20, 2 ** 20], 7)])
def test_huge_shapes_are_resource_exhausted_before_allocating(dev, make):
    with tf.device(dev):
        e = _raises(errors.ResourceExhaustedError, make, "bytes", dev)
    assert isinstance(e, MemoryError)
    assert "Unable to allocate" not in str(e)      # our check, not NumPy's failed malloc


def test_registry_op_called_directly_is_checked_too():
    # the checks live on the OpDef, so a direct call (as a plugin or the tracer makes)
    # cannot bypass them
    with pytest.raises(errors.InvalidArgumentError, match="non-negative"):
        OPS["Fill"](shape=(-1,), value=0, dtype=tf.float32)
    with pytest.raises(errors.ResourceExhaustedError):
        OPS["Fill"](shape=(2 ** 50,), value=0, dtype=tf.float32)
    assert OPS["Fill"].check is not None


@pytest.mark.parametrize("minval,maxval,dtype,frag", [
    (0, 2 ** 40, tf.int32, "does not fit in int32"),
    (-2 ** 63 - 1, 0, tf.int64, "does not fit in int64"),
    (5, 2, tf.int32, "minval < maxval"),
    (0.5, 3, tf.int32, "must be an integer"),
    (0, 300, tf.int8, "int32 and int64"),
])
def test_integer_random_bounds(dev, minval, maxval, dtype, frag):
    with tf.device(dev):
        _raises(errors.InvalidArgumentError,
                lambda: tf.random.uniform([3], minval=minval, maxval=maxval, dtype=dtype), frag)


def test_integer_random_bounds_checked_for_direct_op_calls(dev):
    with tf.device(dev):
        with pytest.raises(errors.InvalidArgumentError, match="does not fit"):
            OPS["RandomUniformInt"](shape=(3,), dtype=tf.int32, minval=0, maxval=2 ** 40)


# --- devices: ops follow their inputs ---------------------------------------------------

needs_opencl = pytest.mark.skipif("opencl:0" not in DEVICES, reason="no opencl:0 device")


@needs_opencl
def test_ops_follow_their_inputs_device_outside_a_scope():
    x = tf.ones([32, 64]).to("opencl:0")
    assert tf.nn.dropout(x, 0.5, seed=1).device == "opencl:0"
    assert tf.nn.dropout(x, 0.5, noise_shape=[32, 1]).device == "opencl:0"
    assert tf.keras.layers.Dropout(0.5)(x, training=True).device == "opencl:0"
    w = tf.ones([64, 8]).to("opencl:0")
    assert tf.tensordot(x, w, 1).device == "opencl:0"
    assert tf.tensordot(x, np.ones([64, 8], np.float32), 1).device == "opencl:0"
    assert tf.nn.bias_add(x, np.ones(64, np.float32)).device == "opencl:0"
    assert tf.nn.bias_add(x, [1.0] * 64).device == "opencl:0"


@needs_opencl
def test_dropout_mask_is_the_same_on_every_device():
    x = tf.ones([64])
    tf.random.set_seed(5)
    a = tf.nn.dropout(x, 0.5, seed=3).numpy()
    tf.random.set_seed(5)
    b = tf.nn.dropout(x.to("opencl:0"), 0.5, seed=3).numpy()
    np.testing.assert_array_equal(a, b)


@needs_opencl
def test_scope_mismatch_names_the_scope_and_the_inputs_device():
    x = tf.ones([32, 32]).to("opencl:0")
    with tf.device("cpu:0"):
        e = _raises(errors.DeviceMismatchError, lambda: tf.add(x, x), "all on opencl:0",
                    "tf.device('cpu:0')", ".to('cpu:0')")
    assert "opencl:0, opencl:0" not in str(e)


@pytest.mark.parametrize("name", ["MatrixInverse", "MatrixDeterminant", "LogMatrixDeterminant"])
@pytest.mark.parametrize("shape", [[2, 3], [3], [], [2, 3, 2]])
def test_lu_ops_called_directly_check_squareness_on_every_device(dev, name, shape):
    # the OpenCL kernels read out of bounds on a non-square input called past the
    # public function: the check is the op's, not the wrapper's
    with tf.device(dev):
        x = tf.ones(shape)
        _raises(errors.InvalidArgumentError, lambda: OPS[name](x), "square matrix", dev)


def test_matrix_solve_called_directly_checks_rhs(dev):
    with tf.device(dev):
        _raises(errors.InvalidArgumentError,
                lambda: OPS["MatrixSolve"](tf.eye(3), tf.ones([2, 1])), "rhs must have shape")
