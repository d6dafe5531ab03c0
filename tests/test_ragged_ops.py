"""tf.ragged (ops/ragged_ops.py) and the ordinary tf.* functions on RaggedTensor:
reductions, concat/stack/tile/reverse/gather/boolean_mask/where, tf.shape's
DynamicRaggedShape, gradients through the flat values, and tf.function."""

import numpy as np
import pytest

import tapeflow as tf


def rt_int():
    return tf.ragged.constant([[2, 7, 1], [], [8, 3], [5]])


def as_list(x):
    return x.to_list() if isinstance(x, tf.RaggedTensor) else x.numpy().tolist()


# --- reductions -------------------------------------------------------------------------------

def test_reductions_along_the_ragged_axis():
    rt = rt_int()
    assert as_list(tf.reduce_sum(rt, axis=1)) == [10, 0, 11, 5]
    assert as_list(tf.reduce_max(rt, axis=-1)) == [7, np.iinfo(np.int32).min, 8, 5]
    assert as_list(tf.reduce_min(rt, axis=1)) == [1, np.iinfo(np.int32).max, 3, 5]
    assert as_list(tf.reduce_prod(rt, axis=1)) == [14, 1, 24, 5]
    assert as_list(tf.reduce_any(rt > 6, axis=1)) == [True, False, True, False]
    assert as_list(tf.reduce_all(rt > 2, axis=1)) == [False, True, True, True]
    assert tf.reduce_sum(rt, axis=1, keepdims=True).shape == (4, 1)
    mean = tf.reduce_mean(rt, axis=1)              # ints: a float64 mean, NaN for []
    assert mean.dtype == tf.float64
    np.testing.assert_allclose(mean.numpy(), [10 / 3, np.nan, 5.5, 5.0])


def test_reductions_along_axis_0_and_all():
    rt = rt_int()
    assert as_list(tf.reduce_sum(rt, axis=0)) == [15, 10, 1]
    assert as_list(tf.reduce_max(rt, axis=0)) == [8, 7, 1]
    np.testing.assert_allclose(tf.reduce_mean(rt, axis=0).numpy(), [5.0, 5.0, 1.0])
    assert int(tf.reduce_sum(rt)) == 26
    assert as_list(tf.reduce_sum(rt, axis=[0, 1])) == 26
    assert tf.math.reduce_max(rt, keepdims=True).shape == (1, 1)


def test_reductions_of_deeper_ragged_tensors():
    r3 = tf.ragged.constant([[[1, 2], [3]], [[4, 5]]])
    assert as_list(tf.reduce_sum(r3, axis=2)) == [[3, 3], [9]]
    assert as_list(tf.reduce_sum(r3, axis=1)) == [[4, 2], [4, 5]]
    assert as_list(tf.reduce_max(r3, axis=0)) == [[4, 5], [3]]
    u = tf.ragged.constant([[[1, 2], [3, 4], [5, 6]], [[7, 8]]], ragged_rank=1)
    assert as_list(tf.reduce_sum(u, axis=2)) == [[3, 7, 11], [15]]
    assert as_list(tf.reduce_sum(u, axis=1)) == [[9, 12], [7, 8]]
    assert as_list(tf.reduce_sum(u, axis=2, keepdims=True)) == [[[3], [7], [11]], [[15]]]
    f = tf.ragged.constant([[1.0, 3.0], [], [2.0]])
    np.testing.assert_allclose(tf.math.reduce_variance(f, axis=1).numpy(), [1.0, np.nan, 0.0])


def test_reduction_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of bounds"):
        tf.reduce_sum(rt_int(), axis=2)
    with pytest.raises(TypeError, match="bool"):
        tf.reduce_any(rt_int(), axis=1)


# --- concat, stack, tile, reverse ---------------------------------------------------------------

def test_concat():
    rt = tf.ragged.constant([[1, 2], [], [3]])
    assert as_list(tf.concat([rt, [[4, 5, 6]]], axis=0)) == [[1, 2], [], [3], [4, 5, 6]]
    assert as_list(tf.concat([tf.constant([[0], [0], [0]]), rt], axis=1)) == \
        [[0, 1, 2], [0], [0, 3]]
    assert as_list(tf.concat([rt, rt], axis=-1)) == [[1, 2, 1, 2], [], [3, 3]]
    words = tf.ragged.constant([["a"], ["b", "c"]])
    both = tf.concat([tf.fill([2, 1], "#"), words], axis=1)
    assert both.to_list() == [[b"#", b"a"], [b"#", b"b", b"c"]]
    u = tf.ragged.constant([[[1, 2]], [[3, 4], [5, 6]]], ragged_rank=1)
    assert as_list(tf.concat([u, u * 10], axis=2)) == \
        [[[1, 2, 10, 20]], [[3, 4, 30, 40], [5, 6, 50, 60]]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="numbers of rows"):
        tf.concat([rt, tf.constant([[0], [0]])], axis=1)
    with pytest.raises(TypeError, match="dtypes"):
        tf.concat([rt, tf.ragged.constant([[1.0]])], axis=0)


def test_stack_and_ragged_stack():
    rt = tf.ragged.constant([[1, 2], [3]])
    assert as_list(tf.stack([rt, rt])) == [[[1, 2], [3]], [[1, 2], [3]]]
    assert as_list(tf.stack([rt, rt], axis=1)) == [[[1, 2], [1, 2]], [[3], [3]]]
    assert as_list(tf.ragged.stack([[1, 2, 3], [4]])) == [[1, 2, 3], [4]]
    assert as_list(tf.ragged.stack([rt, [[5]]])) == [[[1, 2], [3]], [[5]]]


def test_tile_reverse_expand_dims():
    rt = tf.ragged.constant([[1, 2], [], [3]])
    assert as_list(tf.tile(rt, [2, 2])) == [[1, 2, 1, 2], [], [3, 3]] * 2
    assert as_list(tf.reverse(rt, [1])) == [[2, 1], [], [3]]
    assert as_list(tf.reverse(rt, [0])) == [[3], [], [1, 2]]
    assert as_list(tf.expand_dims(rt, 0)) == [[[1, 2], [], [3]]]
    assert as_list(tf.expand_dims(rt, 1)) == [[[1, 2]], [[]], [[3]]]
    assert as_list(tf.expand_dims(rt, -1)) == [[[1], [2]], [], [[3]]]
    assert int(tf.size(rt)) == 3 and int(tf.rank(rt)) == 2
    assert as_list(tf.zeros_like(rt)) == [[0, 0], [], [0]]
    assert as_list(tf.reshape(rt, [-1])) == [1, 2, 3]


def test_gather_nd_squeeze_split_logsumexp():
    rt = tf.ragged.constant([[3, 1, 4], [], [5, 9]])
    assert as_list(tf.gather_nd(rt, [[2, 1], [0, 0]])) == [9, 3]
    assert as_list(tf.gather_nd(rt, [[2], [0]])) == [[5, 9], [3, 1, 4]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        tf.gather_nd(rt, [[1, 0]])
    assert as_list(tf.squeeze(tf.expand_dims(rt, 1), [1])) == as_list(rt)
    assert as_list(tf.squeeze(tf.expand_dims(rt, 2), [-1])) == as_list(rt)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not squeezable"):
        tf.squeeze(tf.ragged.constant([[[1], [2, 3]]]), [2])
    parts = tf.split(rt, [1, -1])
    assert [as_list(p) for p in parts] == [[[3, 1, 4]], [[], [5, 9]]]
    f = tf.ragged.constant([[1.0, 2.0], [], [3.0]])
    lse = tf.reduce_logsumexp(f, axis=-1).numpy()
    np.testing.assert_allclose(lse, [np.log(np.e + np.e ** 2), -np.inf, 3.0], rtol=1e-6)


# --- gather, boolean_mask, where -------------------------------------------------------------

def test_gather():
    rt = tf.ragged.constant([[1, 2], [], [3, 4, 5]])
    assert as_list(tf.gather(rt, [2, 0, 2])) == [[3, 4, 5], [1, 2], [3, 4, 5]]
    assert as_list(tf.gather(rt, 2)) == [3, 4, 5]
    idx = tf.ragged.constant([[0, 2], [1]])
    assert as_list(tf.gather([10, 20, 30], idx)) == [[10, 30], [20]]
    assert as_list(tf.gather(rt, idx)) == [[[1, 2], [3, 4, 5]], [[]]]
    per_row = tf.ragged.constant([[1], [], [2, 0]])
    assert as_list(tf.gather(rt, per_row, batch_dims=1)) == [[2], [], [5, 3]]
    table = tf.reshape(tf.range(8.0), [4, 2])
    emb = tf.nn.embedding_lookup(table, tf.ragged.constant([[3], [0, 1]]))
    assert as_list(emb) == [[[6.0, 7.0]], [[0.0, 1.0], [2.0, 3.0]]]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"not in \[0, 3\)"):
        tf.gather(rt, [3])


def test_boolean_mask_and_where():
    rt = tf.ragged.constant([[1, 5], [], [7, 2, 9]])
    assert as_list(tf.ragged.boolean_mask(rt, rt > 4)) == [[5], [], [7, 9]]
    assert as_list(tf.ragged.boolean_mask(rt, [True, False, True])) == [[1, 5], [7, 2, 9]]
    assert as_list(tf.ragged.boolean_mask([[1, 2], [3, 4]], [[True, False], [False, True]])) \
        == [[1], [4]]
    assert as_list(tf.boolean_mask(rt, rt > 4)) == [[5], [], [7, 9]]
    assert as_list(tf.where(rt > 4, rt, 0)) == [[0, 5], [], [7, 0, 9]]
    assert as_list(tf.where(rt > 4)) == [[0, 1], [2, 0], [2, 2]]
    with pytest.raises(TypeError, match="bool"):
        tf.ragged.boolean_mask(rt, rt)


# --- tf.shape: DynamicRaggedShape ------------------------------------------------------------

def test_dynamic_ragged_shape():
    rt = tf.ragged.constant([[1], [2, 3, 4], [], [5, 6]])
    s = tf.shape(rt)
    assert repr(s) == "<DynamicRaggedShape lengths=[4, (1, 3, 0, 2)] num_row_partitions=1>"
    assert int(s[0]) == 4 and s[0].dtype == tf.int32 and s.rank == 2
    with pytest.raises(ValueError) as e:
        s[1]
    assert str(e.value) == "Index 1 is not uniform"
    assert repr(s[:1]) == "<DynamicRaggedShape lengths=[4] num_row_partitions=0>"
    assert tf.zeros(s).to_list() == [[0.0], [0.0, 0.0, 0.0], [], [0.0, 0.0]]
    assert tf.fill(s, "x").to_list() == [[b"x"], [b"x"] * 3, [], [b"x"] * 2]
    assert tf.reshape(tf.range(6), s).to_list() == [[0], [1, 2, 3], [], [4, 5]]
    shape = tf.experimental.DynamicRaggedShape(
        row_partitions=[tf.experimental.RowPartition.from_row_lengths([2, 1])],
        inner_shape=[3, 4])
    assert repr(shape) == "<DynamicRaggedShape lengths=[2, (2, 1), 4] num_row_partitions=1>"
    assert tf.ones(shape, tf.int32).to_list() == [[[1] * 4] * 2, [[1] * 4]]
    lengths = tf.experimental.DynamicRaggedShape.from_lengths([2, (0, 3), 5])
    assert lengths.static_lengths() == [2, (0, 3), 5]
    with pytest.raises(ValueError, match="Shape not consistent"):
        tf.experimental.DynamicRaggedShape.from_lengths([3, (0, 3), 5])
    p = tf.experimental.RowPartition.from_uniform_row_length(2, 6)
    assert repr(p) == "tf.RowPartition(nrows=3, uniform_row_length=2)"
    assert repr(tf.experimental.RowPartition.from_row_splits([0, 2, 5])) == \
        "tf.RowPartition(row_splits=[0 2 5])"


# --- tf.ragged.* -------------------------------------------------------------------------------

def test_ragged_range_and_segment_ids():
    assert as_list(tf.ragged.range([3, 0, 2])) == [[0, 1, 2], [], [0, 1]]
    assert as_list(tf.ragged.range([1, 10], 4, [1, -3])) == [[1, 2, 3], [10, 7]]
    r = tf.ragged.range([0.5], [2.0], 0.5)
    assert r.dtype == tf.float32 and as_list(r) == [[0.5, 1.0, 1.5]]
    assert tf.ragged.range([2], row_splits_dtype=tf.int32).row_splits.dtype == tf.int32
    with pytest.raises(tf.errors.InvalidArgumentError, match="delta != 0"):
        tf.ragged.range([3], [4], 0)
    ids = tf.ragged.row_splits_to_segment_ids([0, 2, 2, 5])
    assert ids.dtype == tf.int64 and as_list(ids) == [0, 0, 2, 2, 2]
    assert as_list(tf.ragged.segment_ids_to_row_splits([0, 0, 2])) == [0, 2, 2, 3]
    assert as_list(tf.ragged.segment_ids_to_row_splits([0, 0, 2], num_segments=4)) == \
        [0, 2, 2, 3, 3]
    with pytest.raises(tf.errors.InvalidArgumentError, match="never decrease"):
        tf.ragged.row_splits_to_segment_ids([0, 3, 1])


def test_map_flat_values_and_partitions():
    rt = tf.ragged.constant([[1, 2], [], [3]])
    assert as_list(tf.ragged.map_flat_values(lambda x: x * 10 + 1, rt)) == [[11, 21], [], [31]]
    assert as_list(tf.ragged.map_flat_values(tf.math.multiply, rt, y=rt)) == [[1, 4], [], [9]]
    assert as_list(tf.ragged.map_flat_values(tf.add, tf.constant([1]), 2)) == [3]
    with pytest.raises(tf.errors.InvalidArgumentError, match="number of values"):
        tf.ragged.map_flat_values(lambda x: x[:1], rt)
    with pytest.raises(tf.errors.InvalidArgumentError, match="different numbers"):
        tf.ragged.map_flat_values(tf.add, rt, tf.ragged.constant([[1]]))
    parts = tf.ragged.stack_dynamic_partitions([10, 20, 30, 40], [1, 0, 1, 1], 3)
    assert as_list(parts) == [[20], [10, 30, 40], []]


# --- gradients and tf.function ------------------------------------------------------------------

def _numeric_grad(f, v, eps=1e-6):
    g = np.zeros_like(v)
    for i in range(v.size):
        up, dn = v.copy(), v.copy()
        up[i] += eps
        dn[i] -= eps
        g[i] = (f(up) - f(dn)) / (2 * eps)
    return g


def test_gradients_flow_through_the_flat_values():
    splits = [0, 2, 2, 5]
    v0 = np.array([0.5, -1.0, 2.0, 0.25, 1.5])
    weights = tf.constant([[1.0, 2.0], [0.0, -1.0], [0.5, 4.0]], tf.float64)

    def loss(values):
        rt = tf.RaggedTensor.from_row_splits(values, splits)
        both = tf.concat([rt, rt * rt], axis=1)
        picked = tf.gather(both, [2, 0])
        row = tf.reduce_sum(picked, axis=1) * tf.constant([1.0, 3.0], tf.float64)
        peak = tf.reduce_max(rt, axis=1)
        mean = tf.reduce_mean(tf.ragged.map_flat_values(tf.math.sin, rt), axis=1)
        return (tf.reduce_sum(row) + tf.reduce_sum(peak * weights[:, 0])
                + tf.reduce_sum(tf.where(tf.math.is_nan(mean), tf.zeros_like(mean), mean)))

    x = tf.constant(v0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loss(x)
    got = tape.gradient(y, x).numpy()
    want = _numeric_grad(lambda v: float(loss(tf.constant(v))), v0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_inside_tf_function():
    @tf.function(input_signature=[tf.RaggedTensorSpec(shape=[None, None], dtype=tf.int32)])
    def peaks(rt):
        return tf.reduce_max(rt, axis=-1), tf.reduce_sum(rt, axis=1)

    top, total = peaks(tf.ragged.constant([[4, 9], [1], [3, 3, 8]]))
    assert as_list(top) == [9, 1, 8] and as_list(total) == [13, 1, 14]
    top, _ = peaks(tf.ragged.constant([[2], [7, 5], [6]]))       # same shapes, new values
    assert as_list(top) == [2, 7, 6]

    @tf.function
    def mirror(x):
        return tf.concat([x, tf.reverse(x, [1])], 1)

    assert as_list(mirror(tf.ragged.constant([[1, 2], [3]]))) == [[1, 2, 2, 1], [3, 3]]
    assert as_list(mirror(tf.ragged.constant([[4], [5, 6]]))) == [[4, 4], [5, 6, 6, 5]]


def test_keras_embedding_and_lstm_take_ragged_ids():
    tf.random.set_seed(1)
    emb, lstm = tf.keras.layers.Embedding(10, 4), tf.keras.layers.LSTM(3)
    ids = tf.ragged.constant([[1, 2, 5], [3]], dtype=tf.int64)
    vectors = emb(ids)
    assert isinstance(vectors, tf.RaggedTensor) and vectors.shape.as_list() == [2, None, 4]
    out = lstm(vectors)                   # padded and masked: row 1 is its one step
    alone = lstm(emb(tf.constant([[3]], tf.int64)))
    np.testing.assert_allclose(out.numpy()[1], alone.numpy()[0], atol=1e-6)
    model = tf.keras.Sequential([tf.keras.Input(shape=[None], dtype=tf.int64, ragged=True),
                                 emb, lstm, tf.keras.layers.Dense(1)])
    assert model(ids).shape == (2, 1)


def test_keras_fit_takes_a_ragged_batch_and_learns():
    x = tf.ragged.constant([[1, 2], [3], [4, 5, 6], [7]])
    y = tf.constant([[1.0], [0.0], [1.0], [0.0]])
    tf.random.set_seed(0)
    m = tf.keras.Sequential([tf.keras.Input(shape=[None], ragged=True, dtype=tf.int32),
                             tf.keras.layers.Embedding(10, 4), tf.keras.layers.LSTM(3),
                             tf.keras.layers.Dense(1)])
    m.compile(loss="mse", optimizer=tf.keras.optimizers.SGD(0.5))
    losses = m.fit(x, y, epochs=4, verbose=0).history["loss"]
    assert losses[-1] < losses[0]
    assert m.predict(x, verbose=0).shape == (4, 1)


def test_identity_clip_and_add_n_take_ragged_tensors():
    rt = tf.ragged.constant([[1.0, 2.0], [3.0]])
    assert tf.identity(rt).to_list() == [[1.0, 2.0], [3.0]]
    assert tf.clip_by_value(rt, 1.5, 2.5).to_list() == [[1.5, 2.0], [2.5]]
    assert tf.add_n([rt, rt * 2.0]).to_list() == [[3.0, 6.0], [9.0]]
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.add_n([rt, tf.ragged.constant([[1.0], [2.0, 3.0]])])


def test_ragged_stack_of_2d_dense_tensors_is_ragged():
    out = tf.ragged.stack([tf.constant([[1, 2]]), tf.constant([[5, 6], [7, 8]])])
    assert isinstance(out, tf.RaggedTensor) and out.shape.as_list() == [2, None, None]
    assert out.to_list() == [[[1, 2]], [[5, 6], [7, 8]]]


def test_int_index_into_a_uniform_inner_dimension():
    u = tf.RaggedTensor.from_uniform_row_length(tf.range(6), 2)
    assert u[:, 0].numpy().tolist() == [0, 2, 4]
    assert u[1:, -1].numpy().tolist() == [3, 5]
    with pytest.raises(tf.errors.InvalidArgumentError):
        u[:, 2]
    with pytest.raises(tf.errors.InvalidArgumentError, match="inner ragged"):
        tf.ragged.constant([[1, 2], [3]])[:, 0]


def test_uniform_row_length_survives_tf_function():
    u = tf.RaggedTensor.from_uniform_row_length(tf.range(6.0), 2)
    out = tf.function(lambda x: x * 2.0)(u)
    assert out.shape.as_list() == [3, 2] and int(out.uniform_row_length) == 2
