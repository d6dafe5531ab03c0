"""Bad input, round 3 (issue 30, items 4 and 5): the plain Python exceptions a probe
still found in public functions and registry ops, and values coerced silently.

Each test failed on the code before its fix: an IndexError / TypeError / ValueError
from the op's own code or NumPy, or a result whose dtype silently dropped part of a
value (a complex number's imaginary part, 2.5's fraction). Every error is a tapeflow
error (a subclass of the matching built-in) whose message names the op or the
function."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.runtime.registry import OPS
from test_bad_input import DEVICES, _raises, dev  # noqa: F401 - dev: the device fixture

# --- item 4: registry ops called with the wrong number of inputs --------------------

@pytest.mark.parametrize("name,n", [
    ("MatrixInverse", 0), ("MatrixDeterminant", 0), ("LogMatrixDeterminant", 0),
    ("Cholesky", 0), ("SelfAdjointEigV2", 0), ("MatrixSolve", 0), ("MatrixSolve", 1),
    ("Cumsum", 0), ("Cumprod", 0), ("ArgSort", 0), ("SelectV2", 0), ("SelectV2", 2),
    ("SearchSorted", 1), ("SearchSorted", 3), ("SparseSoftmaxCrossEntropyWithLogits", 1),
    ("Unpack", 0),
])
def test_checked_op_called_with_the_wrong_number_of_inputs(dev, name, n):
    op = OPS[name]
    k = len(op.inputs)
    attrs = {"num": 2} if name == "Unpack" else {}
    with tf.device(dev):
        e = _raises(errors.InvalidArgumentError, lambda: op(*[tf.ones([2, 2])] * n, **attrs),
                    f"{name} takes {k} input", f"got {n}", f"[Op:{name}]", dev)
    assert all(i in str(e) for i in op.inputs)          # it says which inputs


def test_the_input_count_comes_before_the_ops_check():
    # (what the count guards: MatrixInverse's check read tensors[0])
    _raises(errors.InvalidArgumentError, lambda: OPS["MatrixInverse"](),
            "MatrixInverse takes 1 input (input), got 0")
    # the right count still reaches the op's own check
    _raises(errors.InvalidArgumentError, lambda: OPS["MatrixInverse"](tf.ones([2, 3])),
            "square", "[Op:MatrixInverse]")


# --- item 4: plain exceptions from public functions ------------------------------------

@pytest.mark.parametrize("mask", ["begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                  "shrink_axis_mask"])
@pytest.mark.parametrize("value", [None, "1", 1.5])
def test_strided_slice_masks_must_be_integers(mask, value):
    x = tf.ones([3, 3])
    _raises(errors.InvalidArgumentError,
            lambda: tf.strided_slice(x, [0, 0], [2, 2], [1, 1], **{mask: value}),
            f"strided_slice: {mask} must be an integer", "[Op:StridedSlice]")


@pytest.mark.parametrize("paddings", [[[1, 2], [1]], [[0, 1], [0]], (1, (2, 3)),
                                      [[1, 2], [3, 4, 5]]])
def test_pad_with_ragged_paddings(dev, paddings):
    with tf.device(dev):
        _raises(errors.InvalidArgumentError, lambda: tf.pad(tf.ones([2, 2]), paddings),
                "pad: paddings must be an integer array of shape [2, 2]", "[Op:PadV2]", dev)
        _raises(errors.InvalidArgumentError,
                lambda: tf.pad(tf.ones([2, 2]), paddings, mode="REFLECT"),
                "pad: paddings", "[Op:MirrorPad]")


@pytest.mark.parametrize("args,kw,frag", [
    ((2 ** 70,), {}, "limit 1180591620717411303424 does not fit in int64"),
    ((-2 ** 70, 0), {}, "start -1180591620717411303424 does not fit in int64"),
    ((0, 10, 2 ** 70), {}, "delta 1180591620717411303424 does not fit in int64"),
    ((0, 2 ** 40), {"dtype": tf.int32}, "limit 1099511627776 does not fit in int32"),
])
def test_range_bounds_that_overflow_the_dtype(args, kw, frag):
    _raises(errors.InvalidArgumentError, lambda: tf.range(*args, **kw),
            "range: " + frag, "[Op:Range]")


def test_range_bounds_within_the_dtype_still_work():
    assert tf.range(2 ** 31, 2 ** 31 + 2).dtype == tf.int64
    assert tf.range(0, 2 ** 31 - 1, 2 ** 30).numpy().tolist() == [0, 2 ** 30]


@pytest.mark.parametrize("axis", [[0, None], [None, 1], [0, 1.5], [[0], [1]], [0, "1"]])
def test_norm_axis_pair_with_a_non_integer(axis):
    _raises(errors.InvalidArgumentError, lambda: tf.norm(tf.ones([2, 2]), axis=axis),
            "norm: axis must be an integer", "[Op:EuclideanNorm]")


@pytest.mark.parametrize("alpha", [None, "x", 1j, np.complex64(1 + 1j), [0.1, 0.2], True])
def test_leaky_relu_alpha_must_be_a_real_number(dev, alpha):
    with tf.device(dev):
        _raises(errors.InvalidTypeError,
                lambda: tf.nn.leaky_relu(tf.ones([2]), alpha=alpha),
                "leaky_relu: alpha must be a real number", "[Op:LeakyRelu]", dev)


def test_leaky_relu_alpha_from_numpy_or_a_tensor():
    x = tf.constant([-2.0, 1.0])
    for alpha in (0.5, np.float32(0.5), tf.constant(0.5), np.array([0.5])):
        assert tf.nn.leaky_relu(x, alpha=alpha).numpy().tolist() == [-1.0, 1.0]


@pytest.mark.parametrize("kw", [{"rate": "x"}, {"rate": 1j}, {"rate": np.complex128(0.5j)},
                                {"rate": [0.1, 0.2]}, {"keep_prob": "x"},
                                {"keep_prob": 1 + 2j}, {"keep_prob": None, "rate": object()}])
def test_dropout_rate_must_be_a_real_number(kw):
    name = "keep_prob" if kw.get("keep_prob") is not None else "rate"
    _raises(errors.InvalidTypeError, lambda: tf.nn.dropout(tf.ones([4]), **kw),
            f"dropout: {name} must be a real number", "[Op:Dropout]")


@pytest.mark.parametrize("perm", [np.complex64(1 + 1j), np.int64(0), tf.constant(1)])
def test_transpose_perm_that_is_a_scalar(perm):
    _raises(errors.InvalidTypeError, lambda: tf.transpose(tf.ones([2, 3]), perm),
            "transpose: perm must be a list of 2 dimensions", "[Op:Transpose]")


@pytest.mark.parametrize("norm", [[1], {"a": 1}, None])
def test_fft_norm_that_is_not_a_string(norm):
    x = tf.ones([4], tf.complex64)
    _raises(errors.InvalidArgumentError,
            lambda: tf.linalg.fft_transform(x, axes=[0], norm=norm), "fft: norm must be",
            "[Op:FFT]")


# --- item 5: silent coercion -----------------------------------------------------------

def test_fill_takes_its_dtype_from_a_complex_value(dev):
    # TensorFlow: tf.fill([2], 1+2j) is complex128 (a Python complex's dtype)
    with tf.device(dev):
        if dev.startswith("opencl"):
            pytest.skip("complex tensors live on the CPU backend")
        y = tf.fill([2], 1 + 2j)
        assert y.dtype == tf.complex128 and y.numpy().tolist() == [1 + 2j, 1 + 2j]
        assert tf.fill([2], np.complex64(1j)).dtype == tf.complex64


@pytest.mark.parametrize("value", [1 + 2j, np.complex64(1j), tf.constant(2j)])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.int32, tf.bool])
def test_fill_refuses_a_complex_value_into_a_real_dtype(value, dtype):
    _raises(errors.InvalidTypeError, lambda: tf.fill([2], value, dtype=dtype),
            "fill value", "is complex", f"dtype is {dtype.name}", "imaginary part",
            "[Op:Fill]")


@pytest.mark.parametrize("value,dtype,frag", [
    (2.5, tf.int32, "2.5 is not an integer"), (float("nan"), tf.int64, "nan is not an integer"),
    (300, tf.int8, "300 does not fit in int8"), (-1, tf.uint8, "-1 does not fit in uint8"),
])
def test_fill_refuses_a_value_its_integer_dtype_cannot_hold(value, dtype, frag):
    _raises(errors.InvalidArgumentError, lambda: tf.fill([2], value, dtype=dtype),
            "fill value " + frag, "[Op:Fill]")


@pytest.mark.parametrize("value", [None, object()])
def test_fill_value_must_be_a_number(value):
    _raises(errors.InvalidTypeError, lambda: tf.fill([2], value), "fill value must be a number",
            "[Op:Fill]")


def test_fill_takes_text_as_tensorflow_does():
    # (text was refused before string tensors, issue 47)
    assert tf.fill([2], "x").numpy().tolist() == [b"x", b"x"]
    assert tf.fill([1], b"1").dtype == tf.string


def test_fill_values_that_fit_still_work():
    assert tf.fill([2], 2.0, dtype=tf.int32).numpy().tolist() == [2, 2]
    assert tf.fill([2], 7, dtype=tf.float16).dtype == tf.float16
    assert tf.fill([1], True).dtype == tf.bool


@pytest.mark.parametrize("cv", [1j, np.complex64(1 + 1j), tf.constant(1j)])
def test_pad_refuses_complex_constant_values_for_a_real_tensor(dev, cv):
    with tf.device(dev):
        _raises(errors.InvalidTypeError,
                lambda: tf.pad(tf.ones([2]), [[1, 1]], constant_values=cv),
                "pad: constant_values", "is complex", "float32", "[Op:PadV2]", dev)


def test_pad_constant_values_of_the_tensors_kind():
    y = tf.pad(tf.ones([1], tf.complex64), [[1, 0]], constant_values=1j)
    assert y.numpy().tolist() == [1j, 1 + 0j]
    _raises(errors.InvalidArgumentError,
            lambda: tf.pad(tf.constant([1, 2]), [[1, 1]], constant_values=0.5),
            "pad: constant_values 0.5 is not an integer", "int32", "[Op:PadV2]")
    assert tf.pad(tf.constant([1]), [[1, 0]], constant_values=-1.0).numpy().tolist() == [-1, 1]


@pytest.mark.parametrize("fn,name", [(tf.shape, "shape"), (tf.size, "size")])
@pytest.mark.parametrize("out_type", [tf.complex64, tf.float32, tf.bool, tf.int8])
def test_shape_and_size_out_type_is_int32_or_int64(dev, fn, name, out_type):
    op = name.capitalize()
    with tf.device(dev):
        x = tf.ones([2, 3])
        _raises(errors.InvalidTypeError, lambda: fn(x, out_type=out_type),
                f"{name}: out_type must be tf.int32 or tf.int64, got {out_type.name}",
                f"[Op:{op}]", dev)
        _raises(errors.InvalidArgumentError, lambda: OPS[op](x, out_type=out_type),
                "out_type", f"[Op:{op}]")
        assert fn(x, out_type=tf.int64).dtype == tf.int64


@pytest.mark.parametrize("kw,which", [
    ({"on_value": 1j, "dtype": tf.float32}, "on_value"),
    ({"off_value": np.complex64(1j), "dtype": tf.int32}, "off_value"),
    ({"on_value": 1.0, "off_value": 2j}, "off_value"),
])
def test_one_hot_refuses_complex_values_for_a_real_dtype(kw, which):
    _raises(errors.InvalidTypeError, lambda: tf.one_hot([0, 1], 3, **kw),
            f"one_hot: {which}", "is complex", "[Op:OneHot]")


def test_one_hot_dtype_from_a_complex_on_value():
    y = tf.one_hot([1], 2, on_value=1j)
    assert y.dtype == tf.complex128 and y.numpy().tolist() == [[0j, 1j]]
    _raises(errors.InvalidTypeError, lambda: tf.one_hot([1], 2, on_value="a"),
            "one_hot: on_value must be a number", "[Op:OneHot]")


@pytest.mark.parametrize("args,which", [
    ((tf.ones([2]), 0.0, 1j), "clip_value_max"),
    ((tf.ones([2]), np.complex64(0), 1.0), "clip_value_min"),
    ((tf.ones([2], tf.complex64), 0.0, 1.0), "t"),
])
def test_clip_by_value_refuses_complex_numbers(args, which):
    _raises(errors.InvalidTypeError, lambda: tf.clip_by_value(*args),
            f"clip_by_value: {which} is complex", "no order", "[Op:ClipByValue]")


@pytest.mark.parametrize("clip_norm", [1j, tf.constant(1 + 1j), np.complex64(2)])
def test_clip_by_norm_refuses_a_complex_clip_norm(clip_norm):
    _raises(errors.InvalidTypeError, lambda: tf.clip_by_norm(tf.ones([2]), clip_norm),
            "clip_by_norm: clip_norm must be a real number", "[Op:ClipByNorm]")
    _raises(errors.InvalidTypeError,
            lambda: tf.clip_by_global_norm([tf.ones([2])], clip_norm),
            "clip_by_global_norm: clip_norm must be a real number", "[Op:ClipByGlobalNorm]")


@pytest.mark.parametrize("fn,param,op", [
    (tf.random.normal, "mean", "RandomStandardNormal"),
    (tf.random.normal, "stddev", "RandomStandardNormal"),
    (tf.random.truncated_normal, "mean", "TruncatedNormal"),
    (tf.random.uniform, "minval", "RandomUniform"),
    (tf.random.uniform, "maxval", "RandomUniform"),
])
@pytest.mark.parametrize("value", [np.complex64(1 + 1j), tf.constant(1j), np.array([1j]),
                                   1 + 2j])
def test_random_parameters_refuse_complex_values(dev, fn, param, op, value):
    with tf.device(dev):
        _raises(errors.InvalidTypeError, lambda: fn([2], **{param: value}),
                f"random.{fn.__name__}: {param} must be real", "imaginary part",
                f"[Op:{op}]", dev)


@pytest.mark.parametrize("value", ["x", [1.0, None], np.array(["a"])])
def test_random_parameters_that_are_not_numbers_name_the_function(value):
    _raises(errors.InvalidTypeError, lambda: tf.random.normal([2], mean=value),
            "random.normal: mean must be a real number or tensor", "[Op:RandomStandardNormal]")


def test_random_parameters_as_tensors_still_work():
    y = tf.random.normal([2], mean=tf.constant([0.0, 100.0]), stddev=np.float32(0.0))
    assert y.numpy().tolist() == [0.0, 100.0]


@pytest.mark.parametrize("eps", [1 + 1j, "x", None, [1e-3, None]])
def test_batch_normalization_variance_epsilon_must_be_a_real_number(eps):
    x = tf.ones([3])
    _raises(errors.InvalidTypeError,
            lambda: tf.nn.batch_normalization(x, x, x, None, None, eps),
            "batch_normalization: variance_epsilon must be a real number",
            "[Op:BatchNormalization]")


@pytest.mark.parametrize("shift", [1j, "x", [1.0, None]])
def test_moments_shift_must_be_a_real_number(shift):
    _raises(errors.InvalidArgumentError,
            lambda: tf.nn.moments(tf.ones([2, 2]), [0], shift=shift),
            "moments: shift must be None or a real number or tensor", "[Op:Moments]")


# --- flags: a string or a complex number is no bool -------------------------------------

_M = tf.ones([2, 2])


@pytest.mark.parametrize("call,what,op", [
    (lambda v: tf.reduce_sum(_M, keepdims=v), "keepdims", "Sum"),
    (lambda v: tf.reduce_max(_M, keep_dims=v), "keepdims", "Max"),
    (lambda v: tf.math.count_nonzero(_M, keepdims=v), "count_nonzero: keepdims", "CountNonzero"),
    (lambda v: tf.math.reduce_variance(_M, keepdims=v), "reduce_variance: keepdims", "Mean"),
    (lambda v: tf.norm(_M, keepdims=v), "norm: keepdims", "EuclideanNorm"),
    (lambda v: tf.nn.moments(_M, [0], keepdims=v), "moments: keepdims", "Moments"),
    (lambda v: tf.matmul(_M, _M, transpose_a=v), "matmul: transpose_a", "MatMul"),
    (lambda v: tf.matmul(_M, _M, adjoint_b=v), "matmul: adjoint_b", "MatMul"),
    (lambda v: tf.cumsum(_M, exclusive=v), "cumsum: exclusive", "Cumsum"),
    (lambda v: tf.cumprod(_M, reverse=v), "cumprod: reverse", "Cumprod"),
    (lambda v: tf.argsort([2, 1], stable=v), "argsort: stable", "ArgSort"),
    (lambda v: tf.transpose(_M, conjugate=v), "transpose: conjugate", "Transpose"),
    (lambda v: tf.linalg.matrix_transpose(_M, conjugate=v), "matrix_transpose: conjugate",
     "Einsum"),
    (lambda v: tf.linalg.inv(_M + tf.eye(2), adjoint=v), "inv: adjoint", "MatrixInverse"),
    (lambda v: tf.linalg.solve(_M + tf.eye(2), _M, adjoint=v), "solve: adjoint", "MatrixSolve"),
    (lambda v: tf.linalg.svd(_M, compute_uv=v), "svd: compute_uv", "Svd"),
    (lambda v: tf.linalg.qr(_M, full_matrices=v), "qr: full_matrices", "Qr"),
])
@pytest.mark.parametrize("value", ["yes", 1j, 0.5, 2, [True]])
def test_flags_must_be_bools(call, what, op, value):
    _raises(errors.InvalidTypeError, lambda: call(value), f"{what} must be a bool",
            f"[Op:{op}]")


def test_flags_take_bools_numpy_bools_and_0_or_1():
    assert tf.reduce_sum(_M, keepdims=np.bool_(True)).shape == (1, 1)
    assert tf.reduce_sum(_M, keepdims=1).shape == (1, 1)
    assert tf.reduce_sum(_M, keepdims=None).shape == ()
    assert tf.cumsum([1, 2], exclusive=tf.constant(True)).numpy().tolist() == [0, 1]


def test_matmul_transpose_and_adjoint_of_one_input_together():
    _raises(errors.InvalidArgumentError,
            lambda: tf.matmul(_M, _M, transpose_b=True, adjoint_b=True),
            "matmul: only one of transpose_b and adjoint_b can be True", "[Op:MatMul]")


# --- the conjugate in an adjoint (a complex value's imaginary part was ignored) ----------

_A = np.array([[1 + 2j, 3j], [2, 1 - 1j]])


@pytest.mark.parametrize("call,ref", [
    (lambda x: tf.matmul(x, x, adjoint_a=True), lambda a: a.conj().T @ a),
    (lambda x: tf.matmul(x, x, adjoint_b=True), lambda a: a @ a.conj().T),
    (lambda x: tf.matmul(_A.tolist(), x, adjoint_a=True), lambda a: a.conj().T @ a),
    (lambda x: tf.transpose(x, conjugate=True), lambda a: a.conj().T),
    (lambda x: tf.linalg.matrix_transpose(x, conjugate=True), lambda a: a.conj().T),
    (lambda x: tf.linalg.adjoint(x), lambda a: a.conj().T),
])
def test_adjoints_conjugate_complex_inputs(call, ref):
    np.testing.assert_allclose(call(tf.constant(_A)).numpy(), ref(_A))


def test_adjoints_of_real_inputs_are_transposes():
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(tf.matmul(a, a, adjoint_b=True).numpy(), a @ a.T)
    np.testing.assert_array_equal(tf.linalg.adjoint(a).numpy(), a.T)


# --- the FFT ops called directly (the fuzzer found axes=[True] read as axis 1 on cpu:0
# and refused on opencl:0) ----------------------------------------------------------------

@pytest.mark.parametrize("op,attrs,frag", [
    ("RFFT", {"axes": [True]}, "axes must be a non-empty tuple of distinct integer axes"),
    ("RFFT", {"axes": (True,)}, "axes must be"),
    ("RFFT", {"axes": (0, -2)}, "axes must be"),
    ("RFFT", {"axes": ()}, "axes must be"),
    ("FFT", {"inverse": "yes"}, "inverse must be a bool"),
    ("FFT", {"norm": ["ortho"]}, "Invalid norm value"),
    ("IRFFT", {"n": 2.5}, "Invalid number of FFT data points"),
])
def test_fft_ops_called_directly_check_their_attrs(dev, op, attrs, frag):
    x = np.ones((2, 3), np.complex64 if op != "RFFT" else np.float32)
    with tf.device(dev):
        _raises(errors.InvalidArgumentError, lambda: OPS[op](tf.constant(x), **attrs),
                f"{op}: {frag}", f"[Op:{op}]", dev)


@pytest.mark.parametrize("op,shape", [("RFFT", (0,)), ("RFFT", (2, 0)), ("FFT", (0,))])
def test_fft_of_an_empty_axis(dev, op, shape):
    # cpu:0 refused it (NumPy), opencl:0 returned something
    x = np.zeros(shape, np.float32 if op == "RFFT" else np.complex64)
    with tf.device(dev):
        _raises(errors.InvalidArgumentError, lambda: OPS[op](tf.constant(x)),
                f"{op}: Invalid number of FFT data points (0)", f"[Op:{op}]", dev)


@pytest.mark.parametrize("call,op", [
    (lambda: tf.reshape(tf.ones([]), (1,) * 100), "Reshape"),
    (lambda: tf.reshape(tf.ones([]), [1] * 65), "Reshape"),
    (lambda: tf.broadcast_to(1.0, [1] * 65), "BroadcastTo"),
    (lambda: tf.zeros([1] * 65), "Fill"),
    (lambda: tf.tile(tf.ones([1]), [1] * 65), "Tile"),
])
def test_shapes_of_rank_over_64(dev, call, op):
    # opencl:0 raised PyOpenCL's plain ValueError for tf.reshape
    with tf.device(dev):
        _raises(errors.InvalidArgumentError, call, "rank", "64", f"[Op:{op}]", dev)


def test_jacobian_of_leaky_relu(dev):
    # vectorized_map broadcast a batch of gradients against one features tensor, and
    # LeakyReluGrad's kernels give the result the features' shape
    with tf.device(dev):
        x = tf.constant([-1.0, 2.0, 3.0])
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.nn.leaky_relu(x, 0.25)
        np.testing.assert_allclose(t.jacobian(y, x).numpy(), np.diag([0.25, 1.0, 1.0]))


# --- the fill-value ops called directly (as a plugin or the tracer calls them) -----------

@pytest.mark.parametrize("call,frag,op", [
    (lambda: OPS["Fill"](shape=(2,), value=2.5, dtype=tf.int32), "2.5 is not an integer", "Fill"),
    (lambda: OPS["Fill"](shape=(2,), value=300, dtype=tf.int8), "300 does not fit in int8",
     "Fill"),
    (lambda: OPS["Fill"](shape=(2,), value=1j, dtype=tf.float32), "is complex", "Fill"),
    (lambda: OPS["PadV2"](tf.constant([1, 2]), paddings=((1, 1),), constant_values=2.5),
     "2.5 is not an integer", "PadV2"),
    (lambda: OPS["PadV2"](tf.ones([2]), paddings=((1, 1),), constant_values=1j), "is complex",
     "PadV2"),
    (lambda: OPS["OneHot"](tf.constant([0]), depth=2, on_value=1j, off_value=0, axis=1,
                           dtype=tf.float32), "is complex", "OneHot"),
    (lambda: OPS["Fill"](shape=(2,), value="x", dtype=tf.float32), "must be a number", "Fill"),
])
def test_fill_value_ops_called_directly_refuse_what_their_dtype_cannot_hold(dev, call, frag, op):
    with tf.device(dev):
        _raises(errors.InvalidArgumentError, call, frag, f"[Op:{op}]", dev)


def test_fill_called_directly_with_a_complex_value_and_dtype():
    y = OPS["Fill"](shape=(2,), value=1 + 2j, dtype=tf.complex64)
    assert y.dtype == tf.complex64 and y.numpy().tolist() == [1 + 2j, 1 + 2j]


@pytest.mark.parametrize("op", ["Qr", "Svd"])
@pytest.mark.parametrize("value", [1j, "x", 1])
def test_full_matrices_of_the_ops_is_a_bool(op, value):
    _raises(errors.InvalidTypeError, lambda: OPS[op](tf.ones([2, 2]), full_matrices=value),
            "full_matrices", f"[Op:{op}]")


def test_an_extra_input_to_a_registry_op_is_refused_and_overwrites_nothing():
    # NumPy ufunc kernels took an extra input as out=: OPS["Neg"](a, b) wrote -a into b
    # and OPS["Add"](a, a, v) overwrote the Variable v
    a, b = tf.ones([2]), tf.zeros([2])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Neg takes 1 input \(x\), got 2"):
        OPS["Neg"](a, b)
    np.testing.assert_array_equal(b.numpy(), [0.0, 0.0])
    v = tf.Variable([5.0, 6.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Add takes 2 inputs \(x, y\), got 3"):
        OPS["Add"](a, a, v)
    np.testing.assert_array_equal(v.numpy(), [5.0, 6.0])


@pytest.mark.parametrize("device", ["cpu:0", "opencl:0"])
def test_leaky_relu_grad_and_mirror_pad_agree_across_devices(device):
    # fuzzer disagreements: LeakyReluGrad of 0-d features returned dy's shape on cpu:0
    # (opencl:0 refused), and a REFLECT pad of a 0-d tensor failed in NumPy's pad on cpu:0
    if device not in [str(d) for d in tf.list_devices()] and device != "cpu:0":
        pytest.skip(f"{device} unavailable")
    with tf.device(device):
        # (one message on every backend: CuPy's in-place product took a larger dy into a
        # 0-d result on an H200, where cpu:0 raised NumPy's broadcasting error)
        with pytest.raises(errors.InvalidArgumentError,
                           match=r"do not broadcast to the features' shape.*LeakyReluGrad"):
            OPS["LeakyReluGrad"](tf.ones([2, 3]), tf.constant(1.0))
        np.testing.assert_allclose(
            OPS["LeakyReluGrad"](tf.constant(2.0), tf.constant([1.0, -1.0])).numpy(), [2.0, 0.4])
        assert float(tf.pad(tf.constant(3.0), [], "REFLECT")) == 3.0
