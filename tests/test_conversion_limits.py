"""What a conversion may allocate, and what it says when it cannot (issue 30 items 2, 3
and the rank limit).

A NumPy broadcast view (zero strides) is a few bytes that become tens of GiB once
copied: the conversion measures it first and refuses with ResourceExhaustedError
naming the op, the shape, the dtype, the bytes and what to do -- never a plain
MemoryError; a view that fits stays a view on the host. Every tapeflow error names the
op or the public function that received the bad argument. A shape of rank > 64
(NumPy's limit) is refused by the core's shape checks on every device.
"""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError, ResourceExhaustedError
from tapeflow.runtime import shapes

# 16 TiB of float32 in 4 bytes of memory; 8 TiB of float64 (the 37 GiB view,
# np.broadcast_to(x, (100000, 100000)), fits a large machine: these fit none)
HUGE = np.broadcast_to(np.float32(1), (1 << 21, 1 << 21))
HUGER = np.broadcast_to(np.float64(1), (1 << 20, 1 << 20))


def _devices():
    out = ["cpu:0"]
    types = {d.type for d in tf.runtime.devices.list_devices()}
    out += [f"{t}:0" for t in ("opencl", "cuda") if t in types]
    return out


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("call, op", [
    (lambda: tf.add(HUGE, 1.0), "Add"),
    (lambda: tf.exp(HUGE), "Exp"),
    (lambda: tf.math.reduce_sum(HUGER), "Const"),
    (lambda: tf.add([HUGE, HUGE], 1.0), "Add"),
    (lambda: tf.constant(HUGE), "Const"),
    (lambda: tf.constant(HUGE, dtype=tf.float64), "Const"),
    (lambda: tf.stack(HUGE), "Pack"),
    (lambda: tf.convert_to_tensor(HUGER), "Const"),
])
def test_a_huge_broadcast_view_is_refused_before_it_is_copied(call, op, device):
    with tf.device(device):
        with pytest.raises(ResourceExhaustedError) as e:
            call()
    err = e.value
    assert err.op == op and err.device is not None
    msg = str(err)
    assert "broadcast view" in msg and "GiB" in msg and "Pass a smaller array" in msg
    assert f"[Op:{op}]" in msg
    if call.__code__.co_names[-1] == "reduce_sum":     # converted inside tf.reduce_sum
        assert "[Op:Const] [in tf.reduce_sum]" in msg


def test_the_message_names_shape_dtype_and_bytes():
    with pytest.raises(ResourceExhaustedError,
                       match=r"shape \[2097152, 2097152\] and dtype float32 .*16.00 TiB "
                             r"\(17592186044416 bytes\)"):
        tf.add(HUGE, 1.0)


def test_a_broadcast_view_that_fits_stays_a_view_on_the_host():
    src = np.arange(3, dtype=np.float32)
    view = np.broadcast_to(src, (1000, 3))
    with tf.device("cpu:0"):
        t = tf.constant(view)
        s = tf.reduce_sum(tf.add(view, 1.0), axis=0)
    assert t._data.strides[0] == 0              # no copy of the 1000 rows
    src[:] = 7                                  # and no view of the caller's array
    assert t.numpy().tolist() == [[0.0, 1.0, 2.0]] * 1000
    assert s.numpy().tolist() == [1000.0, 2000.0, 3000.0]


def test_a_broadcast_view_converted_to_another_dtype_stays_small():
    view = np.broadcast_to(np.int32(2), (4000, 4000))
    with tf.device("cpu:0"):
        t = tf.constant(view, dtype=tf.float64)
    assert t.dtype == tf.float64 and t._data.strides == (0, 0)
    assert float(tf.reduce_sum(t)) == 2.0 * 4000 * 4000


@pytest.mark.skipif("opencl:0" not in _devices(), reason="no OpenCL device")
def test_a_broadcast_view_that_fits_is_uploaded_to_a_device():
    view = np.broadcast_to(np.float32([1.0, 2.0]), (3, 2))
    with tf.device("opencl:0"):
        t = tf.add(view, 1.0)
    assert t.device == "opencl:0" and t.numpy().tolist() == [[2.0, 3.0]] * 3


def test_host_limit_follows_the_address_space_limit():
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cpu = tf.runtime.devices.get_device("cpu:0")
    shapes._LIMITS.pop(cpu, None)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 44, hard))
        assert shapes.device_memory_limit(cpu) <= 1 << 44
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        shapes._LIMITS.pop(cpu, None)


# --- every error names the op or the function -------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda: tf.zeros(2, dtype="not a dtype"), "tf.zeros"),
    (lambda: tf.cast([1.0], "float33"), "tf.cast"),
    (lambda: tf.nn.relu6(["a"]), "Relu6"),
    (lambda: tf.add(1.0, "x"), "Add"),
    (lambda: tf.raw_ops.MatrixDeterminant(input=np.array(["x", "y"]))
     if hasattr(tf, "raw_ops") else tf.runtime.registry.get_op("MatrixDeterminant")(
        np.array(["x", "y"])), "MatrixDeterminant"),
    (lambda: tf.runtime.registry.get_op("Equal")(tf.constant([1.0]), np.array([object()])),
     "Equal"),
])
def test_every_error_names_the_op_or_the_function(call, name):
    with pytest.raises(tf.errors.TapeflowError) as e:
        call()
    msg = str(e.value)
    assert f"[Op:{name}]" in msg or f"[in {name}]" in msg, msg


def test_a_conversion_error_names_the_op_not_const():
    # the op received the bad value; Const is an implementation detail
    with pytest.raises(InvalidArgumentError) as e:
        tf.add(1.0, "x")
    assert e.value.op == "Add" and "[Op:Const]" not in str(e.value)


def test_function_is_found_from_the_traceback():
    try:
        tf.ones(3, dtype="nope")
    except InvalidTypeError as e:
        assert e.function == "tf.ones" and e.op is None
        assert str(e).endswith("[in tf.ones]")
    err = InvalidTypeError("not raised")
    assert err.function is None and str(err) == "not raised"


# --- rank > 64 ----------------------------------------------------------------------------

@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("call, op", [
    (lambda: tf.fill([1] * 65, 1.0), "Fill"),
    (lambda: tf.zeros((1,) * 100), "Fill"),
    (lambda: tf.broadcast_to(1.0, [1] * 65), "BroadcastTo"),
    (lambda: tf.random.uniform([1] * 65), None),
])
def test_rank_above_64_is_refused(call, op, device):
    with tf.device(device):
        with pytest.raises(InvalidArgumentError, match="rank (65|100), more than the 64") as e:
            call()
    assert e.value.device is not None
    if op is not None:
        assert e.value.op == op


def test_check_rank_and_typed_shape_attrs():
    shapes.check_rank((1,) * 64, "Fill")
    with pytest.raises(InvalidArgumentError, match=r"rank 65.*\[Op:Fill\] on cpu:0"):
        shapes.check_rank((1,) * 65, "Fill", "cpu:0")
    with pytest.raises(InvalidArgumentError, match="rank 65"):
        shapes.as_shape([1] * 65, "Fill")


@pytest.mark.skipif("opencl:0" not in _devices(), reason="no OpenCL device")
def test_a_view_that_fits_the_host_but_not_the_device_is_refused_before_its_upload():
    view = np.broadcast_to(np.float32(1), (8000, 8000))     # 244 MiB once contiguous
    ocl = tf.runtime.devices.get_device("opencl:0")
    with tf.device("cpu:0"):
        t = tf.constant(view)                                  # a view on the host
    saved = shapes._LIMITS.get(ocl, 0)
    shapes._LIMITS[ocl] = 100 << 20                            # a device of 100 MiB
    try:
        with pytest.raises(ResourceExhaustedError, match=r"100.00 MiB") as e:
            t.to("opencl:0")
        assert e.value.op == "Copy" and e.value.device is ocl
        with tf.device("opencl:0"), pytest.raises(ResourceExhaustedError) as e:
            tf.add(view, 1.0)
        assert e.value.op == "Add" and e.value.device is ocl
    finally:
        shapes._LIMITS[ocl] = saved
