"""Issue 47's dense ops: tf.tensor_scatter_nd_* (values, duplicates, gradients, errors),
tf.unique / unique_with_counts, tf.bitcast, tf.reverse / reverse_sequence / roll,
tf.meshgrid, tf.linalg.band_part / tensor_diag / tensor_diag_part and
tf.UnconnectedGradients (the conformance specs run them on every backend; these pin
TensorFlow's behaviour in the cases they do not)."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError


def test_tensor_scatter_family_values():
    t = tf.constant([[-2, -7, 0], [-9, 0, 1], [0, -3, -8]])
    idx = [[0, 2], [1, 1], [2, 0]]
    assert tf.tensor_scatter_nd_add(t, idx, [6, 5, 4]).numpy().tolist() == \
        [[-2, -7, 6], [-9, 5, 1], [4, -3, -8]]
    assert tf.tensor_scatter_nd_sub(t, idx, [1, 1, 1]).numpy().tolist() == \
        [[-2, -7, -1], [-9, -1, 1], [-1, -3, -8]]
    assert tf.tensor_scatter_nd_min(t, idx, [-6, 5, -4]).numpy().tolist() == \
        [[-2, -7, -6], [-9, 0, 1], [-4, -3, -8]]
    assert tf.tensor_scatter_nd_max(t, idx, [6, -5, 4]).numpy().tolist() == \
        [[-2, -7, 6], [-9, 0, 1], [4, -3, -8]]
    # duplicates: update keeps the last (TensorFlow's CPU), add sums, min/max reduce
    z = tf.zeros([4])
    assert tf.tensor_scatter_nd_update(z, [[1], [2], [1]], [1., 2., 3.]).numpy().tolist() == \
        [0, 3, 2, 0]
    assert tf.tensor_scatter_nd_add(z, [[1], [1]], [1., 2.]).numpy().tolist() == [0, 3, 0, 0]
    assert tf.tensor_scatter_nd_max(z, [[1], [1], [3]], [5., 7., -1.]).numpy().tolist() == \
        [0, 7, 0, 0]
    # whole rows, bool tensors
    rows = tf.tensor_scatter_nd_update(tf.zeros([3, 2]), [[2]], [[5., 6.]])
    assert rows.numpy().tolist() == [[0, 0], [0, 0], [5, 6]]
    b = tf.tensor_scatter_nd_update(tf.constant([False, False]), [[1]], [True])
    assert b.dtype is tf.bool and b.numpy().tolist() == [False, True]


def test_tensor_scatter_gradients_follow_tensorflow():
    t, u = tf.Variable([1., 2., 3., 4.]), tf.Variable([10., 20.])
    w = tf.constant([1., 2., 3., 4.])
    for fn, dt, du in ((tf.tensor_scatter_nd_update, [1, 0, 3, 0], [2, 4]),
                       (tf.tensor_scatter_nd_add, [1, 2, 3, 4], [2, 4]),
                       (tf.tensor_scatter_nd_sub, [1, 2, 3, 4], [-2, -4]),
                       (tf.tensor_scatter_nd_max, [1, 0, 3, 0], [2, 4]),
                       (tf.tensor_scatter_nd_min, [1, 2, 3, 4], [0, 0])):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(fn(t, [[1], [3]], u) * w)
        gt, gu = tape.gradient(y, [t, u])
        assert gt.numpy().tolist() == dt and gu.numpy().tolist() == du, fn.__name__


def test_tensor_scatter_errors_name_the_op():
    with pytest.raises(InvalidArgumentError,
                       match=r"indices\[0\] = \[5, 0\] does not index into shape \[3,3\] "
                             r"\[Op:TensorScatterUpdate\]"):
        tf.tensor_scatter_nd_update(tf.zeros([3, 3]), [[5, 0]], [1.])
    with pytest.raises(InvalidArgumentError, match="TensorScatterMin"):
        tf.tensor_scatter_nd_min(tf.zeros([3]), [[-1]], [1.])
    with pytest.raises(InvalidArgumentError, match="Outer dimensions of indices and update"):
        tf.tensor_scatter_nd_add(tf.zeros([3]), [[0]], [1., 2.])
    with pytest.raises(InvalidArgumentError, match="Inner dimensions of output shape"):
        tf.tensor_scatter_nd_sub(tf.zeros([3, 2]), [[0]], [[1.]])
    with pytest.raises(InvalidTypeError, match="indices must be an integer tensor"):
        tf.tensor_scatter_nd_update(tf.zeros([3]), [[0.]], [1.])
    with pytest.raises(InvalidTypeError, match="real number tensor"):
        tf.tensor_scatter_nd_max(tf.constant([True]), [[0]], [True])


def test_unique_in_order_of_first_occurrence():
    y, idx = tf.unique([1, 1, 2, 4, 4, 4, 7, 8, 8])
    assert y.numpy().tolist() == [1, 2, 4, 7, 8]
    assert idx.dtype is tf.int32 and idx.numpy().tolist() == [0, 0, 1, 2, 2, 2, 3, 4, 4]
    r = tf.unique_with_counts([3., 1., 1., 2., 3.], out_idx=tf.int64)
    assert type(r).__name__ == "UniqueWithCounts"
    assert r.y.numpy().tolist() == [3, 1, 2] and r.idx.numpy().tolist() == [0, 1, 1, 2, 0]
    assert r.count.dtype is tf.int64 and r.count.numpy().tolist() == [2, 2, 1]
    assert repr(tf.unique([5])).startswith("Unique(y=<tf.Tensor")
    with pytest.raises(InvalidArgumentError, match="unique expects a 1D vector"):
        tf.unique([[1, 2]])
    with pytest.raises(InvalidTypeError, match="out_idx must be int32 or int64"):
        tf.unique([1], out_idx=tf.float32)


def test_bitcast_shapes_as_tensorflow():
    x = tf.constant([1.0, 2.0])
    assert tf.bitcast(x, tf.int32).numpy().tolist() == [1065353216, 1073741824]
    assert tf.bitcast(x, tf.uint8).numpy().tolist() == [[0, 0, 128, 63], [0, 0, 0, 64]]
    pair = tf.constant([[1, 2], [3, 4]], tf.int16)
    assert tf.bitcast(pair, tf.int32).numpy().tolist() == [131073, 262147]
    assert tf.bitcast(tf.constant(1.0), tf.uint8).shape == (4,)
    assert tf.bitcast(x[::-1], tf.int32).numpy().tolist() == [1073741824, 1065353216]
    bf = tf.constant([1.0, 2.0], tf.bfloat16)                 # its own bits, not float32's
    assert tf.bitcast(bf, tf.int16).numpy().tolist() == [16256, 16384]
    with pytest.raises(InvalidArgumentError, match="the last dimension must be 2"):
        tf.bitcast(tf.constant([1, 2, 3], tf.int16), tf.int32)
    with pytest.raises(InvalidTypeError, match="bool and string"):
        tf.bitcast(x, tf.bool)


def test_reverse_roll_reverse_sequence_meshgrid():
    x = tf.constant([[1, 2, 3], [4, 5, 6]])
    assert tf.reverse(x, [-1]).numpy().tolist() == [[3, 2, 1], [6, 5, 4]]
    assert tf.reverse(x, [0, 1]).numpy().tolist() == [[6, 5, 4], [3, 2, 1]]
    with pytest.raises(InvalidArgumentError, match=r"'axis'\[0\] = 2 is out of valid range"):
        tf.reverse(x, [2])
    with pytest.raises(InvalidArgumentError, match="axis 0 specified more than once"):
        tf.reverse(x, [0, -2])
    assert tf.roll(x, [1, -1], [0, 1]).numpy().tolist() == [[5, 6, 4], [2, 3, 1]]
    seq = tf.reverse_sequence(tf.reshape(tf.range(8), [2, 4]), [2, 3], seq_axis=1)
    assert seq.numpy().tolist() == [[1, 0, 2, 3], [6, 5, 4, 7]]
    X, Y = tf.meshgrid([1, 2, 3], [4, 5])
    assert X.numpy().tolist() == [[1, 2, 3], [1, 2, 3]] and Y.shape == (2, 3)
    X, Y = tf.meshgrid([1, 2, 3], [4, 5], indexing="ij")
    assert X.shape == (3, 2) and Y.numpy().tolist() == [[4, 5]] * 3
    with pytest.raises(InvalidArgumentError, match="indexing must be 'xy' or 'ij'"):
        tf.meshgrid([1], indexing="x")


def test_band_part_and_tensor_diag():
    m = tf.reshape(tf.range(16), [4, 4])
    assert tf.linalg.band_part(m, 1, -1).numpy().tolist() == \
        [[0, 1, 2, 3], [4, 5, 6, 7], [0, 9, 10, 11], [0, 0, 14, 15]]
    assert tf.linalg.band_part([[1., np.inf], [2., 3.]], 0, 0).numpy().tolist() == \
        [[1, 0], [0, 3]]
    assert tf.linalg.tensor_diag([1, 2]).numpy().tolist() == [[1, 0], [0, 2]]
    assert tf.linalg.tensor_diag([[1, 2], [3, 4]]).shape == (2, 2, 2, 2)
    assert tf.linalg.tensor_diag_part(m).numpy().tolist() == [0, 5, 10, 15]
    with pytest.raises(InvalidArgumentError, match="num_lower at most its rows"):
        tf.linalg.band_part(m, 5, 0)


def test_unconnected_gradients_zero():
    x, y = tf.Variable([2., 2.]), tf.Variable(3.)
    with tf.GradientTape(persistent=True) as tape:
        z = y ** 2
    assert tape.gradient(z, x) is None
    for how in (tf.UnconnectedGradients.ZERO, "zero"):
        assert tape.gradient(z, x, unconnected_gradients=how).numpy().tolist() == [0, 0]
    assert str(tf.UnconnectedGradients.NONE) == "UnconnectedGradients.NONE"
    assert [u.value for u in tf.UnconnectedGradients] == ["none", "zero"]


def test_cuda_bitcast_keeps_bfloat16_bits_with_numpy_as_xp():
    """The CUDA backend's Bitcast for bfloat16 (its 16-bit words, never a float32 round
    trip), written against an array module, run here with NumPy for CuPy."""
    bf16 = pytest.importorskip("tapeflow_cuda_cupy.bf16")
    from tapeflow.kernels.array import ArrayKernels
    dts = bf16.declare("Bitcast", ("float16", "float32", "int16"))
    kernel = bf16.wrap("Bitcast", ArrayKernels(np, None).bitcast, np, dts)
    words = bf16.BF16Array(np.array([16256, 16384], np.uint16))
    assert kernel(words, tf.int16).tolist() == [16256, 16384]
    assert kernel(words, tf.uint8).tolist() == [[128, 63], [0, 64]]
    back = kernel(np.array([16256], np.int16), tf.bfloat16)
    assert type(back) is bf16.BF16Array and back.bits.tolist() == [16256]
    assert kernel(np.array([1.0], np.float32), tf.int32).tolist() == [1065353216]


def test_reverse_sequence_checks_its_lengths_as_tensorflow():
    x = tf.constant([[1, 2, 3], [4, 5, 6]])
    assert tf.reverse_sequence(x, [3, 0], seq_axis=1).numpy().tolist() == [[3, 2, 1],
                                                                           [4, 5, 6]]
    with pytest.raises(InvalidArgumentError, match=r"seq_lens\(1\) < 0"):
        tf.reverse_sequence(x, [3, -2], seq_axis=1)
    with pytest.raises(InvalidArgumentError, match=r"seq_lens\(0\) > input.dims\(1\)"):
        tf.reverse_sequence(x, [4, 1], seq_axis=1)
    with pytest.raises(InvalidTypeError, match="int32 or int64"):
        tf.reverse_sequence(x, [1.5, 1.0], seq_axis=1)


def test_unique_and_scatter_update_on_strings():
    y, idx = tf.unique(tf.constant(["b", "a", "b"]))
    assert y.dtype == tf.string and y.numpy().tolist() == [b"b", b"a"]
    assert idx.dtype == tf.int32 and idx.numpy().tolist() == [0, 1, 0]
    y, idx, count = tf.unique_with_counts(["x", "y", "y", "z", "x"], out_idx=tf.int64)
    assert y.numpy().tolist() == [b"x", b"y", b"z"]
    assert idx.numpy().tolist() == [0, 1, 1, 2, 0] and count.numpy().tolist() == [2, 2, 1]
    assert idx.dtype == count.dtype == tf.int64
    t = tf.constant([["a", "b"], ["c", "d"]])
    out = tf.tensor_scatter_nd_update(t, [[1], [1], [0, 0][:1]], [["p", "q"], ["y", "z"],
                                                                  ["m", "n"]])
    assert out.numpy().tolist() == [[b"m", b"n"], [b"y", b"z"]]     # the last one wins
    assert tf.tensor_scatter_nd_update(t, [[0, 1]], ["w"]).numpy().tolist() == \
        [[b"a", b"w"], [b"c", b"d"]]
    with pytest.raises(InvalidArgumentError, match="does not index into"):
        tf.tensor_scatter_nd_update(tf.constant(["a", "b"]), [[2]], ["z"])


def test_scatter_max_min_ignore_nan_updates_as_tensorflow():
    nan = float("nan")
    for ups in ([nan, 5.], [5., nan]):
        assert tf.tensor_scatter_nd_max([1., 2.], [[0], [0]], ups).numpy().tolist() == [5., 2.]
        assert tf.tensor_scatter_nd_min([1., 2.], [[0], [0]],
                                        [-u for u in ups]).numpy().tolist() == [-5., 2.]
    assert tf.tensor_scatter_nd_max([1., 2.], [[0]], [nan]).numpy().tolist() == [1., 2.]
    assert np.isnan(tf.tensor_scatter_nd_max([nan, 2.], [[0]], [5.]).numpy()[0])
    assert np.isnan(tf.tensor_scatter_nd_min([nan, 2.], [[0]], [0.]).numpy()[0])


def test_linalg_diag_off_the_main_diagonal():
    assert tf.linalg.diag([1, 2], k=1).numpy().tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    assert tf.linalg.diag([1, 2], k=-1, num_rows=4, padding_value=9).numpy().tolist() == \
        [[9, 9], [1, 9], [9, 2], [9, 9]]
    assert tf.linalg.diag([1, 2], k=1, num_cols=4).numpy().tolist() == [[0, 1, 0, 0],
                                                                         [0, 0, 2, 0]]
    assert tf.linalg.diag([[1, 2], [3, 4]], k=(0, 1)).numpy().tolist() == [[3, 2], [0, 4]]
    v = tf.Variable([[1., 2.], [3., 4.]])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.linalg.diag(v, k=1) * tf.reshape(tf.range(9.), (3, 3)))
    assert tape.gradient(y, v).numpy().tolist() == [[1., 5.], [1., 5.]]
    with pytest.raises(InvalidArgumentError, match="longest diagonal"):
        tf.linalg.diag([1, 2], k=1, num_rows=5, num_cols=5)
    with pytest.raises(InvalidTypeError):
        tf.linalg.diag([1, 2], k=1.5)
    assert tf.strings.to_hash_bucket(["a", "b"], 10).numpy().tolist() == \
        tf.strings.to_hash_bucket_fast(["a", "b"], 10).numpy().tolist()


def test_linalg_diag_takes_numpy_offsets_and_refuses_arrays_of_them_without_reading_them():
    assert tf.linalg.diag(tf.ones([3]), k=np.array(1, np.uint8)).shape == (4, 4)
    huge = np.broadcast_to(np.int32(1), (524288, 1048576))      # (a view: never copied)
    with pytest.raises(tf.errors.InvalidTypeError, match="k must be an int"):
        tf.linalg.diag(tf.ones([2, 3]), k=huge)


def test_reverse_refuses_ragged_and_huge_axis_lists_clearly():
    x = tf.ones([2, 2, 3])
    for bad in ([[1, 2], [3]], np.broadcast_to(np.int64(1), (2**40,))):
        with pytest.raises(InvalidArgumentError, match="1-D list of ints"):
            tf.reverse(x, bad)
    with pytest.raises(InvalidArgumentError, match="specified more than once"):
        tf.reverse(x, [0, 1, 2, 0])


def test_linalg_diag_refuses_a_result_too_large_before_building_its_indices():
    with pytest.raises(tf.errors.ResourceExhaustedError, match="MatrixDiagV3"):
        tf.linalg.diag(tf.ones([3]), num_rows=2**40)


def test_roll_refuses_ragged_axis_lists_with_its_own_error():
    # the fuzzer (seeds 1, 2) found NumPy's ValueError for a ragged nested axis list
    for shift, axis in (([1, 2], [[1, 2], [3]]), (1.0, [[1, 1], [2]])):
        with pytest.raises(tf.errors.InvalidArgumentError, match="roll: shift and axis"):
            tf.roll(tf.ones([2, 2, 3]), shift, axis)
