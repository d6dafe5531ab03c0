"""tf.SparseTensor and tf.sparse (issue 47): construction and its errors, printing,
the tf.sparse functions against dense NumPy results, elementwise dispatch, and
gradients with respect to the values (checked numerically)."""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError


@pytest.fixture(autouse=True)
def _on_cpu():
    with tf.device("cpu:0"):
        yield


def _st():
    return tf.SparseTensor([[0, 0], [1, 2]], [1.0, 2.0], [3, 4])


def _dense(st):
    return tf.sparse.to_dense(st).numpy()


def test_components_dtypes_shape_and_printing():
    st = tf.sparse.SparseTensor(indices=[[0, 3], [2, 4]], values=[10, 20], dense_shape=[3, 10])
    assert st.indices.dtype is tf.int64 and st.dense_shape.dtype is tf.int64
    assert st.dtype is tf.int32 and st.shape == (3, 10)
    assert str(st) == (
        "SparseTensor(indices=tf.Tensor(\n[[0 3]\n [2 4]], shape=(2, 2), dtype=int64), "
        "values=tf.Tensor([10 20], shape=(2,), dtype=int32), "
        "dense_shape=tf.Tensor([ 3 10], shape=(2,), dtype=int64))")
    assert repr(st._type_spec) == "SparseTensorSpec(TensorShape([3, 10]), tf.int32)"
    assert repr(tf.SparseTensorSpec(None, tf.int32)) == \
        "SparseTensorSpec(TensorShape(None), tf.int32)"


@pytest.mark.parametrize("args,err", [
    (([0, 1], [1.0, 2.0], [3, 4]), InvalidArgumentError),          # indices rank 1
    (([[0, 1]], [1.0, 2.0], [3, 4]), InvalidArgumentError),        # N mismatch
    (([[0, 1, 2]], [1.0], [3, 4]), InvalidArgumentError),          # rank mismatch
    (([[0.5, 1]], [1.0], [3, 4]), InvalidTypeError),               # float indices
])
def test_construction_errors(args, err):
    with pytest.raises(err):
        tf.SparseTensor(*args)


def test_to_dense_validates_like_tensorflow():
    with pytest.raises(InvalidArgumentError, match=r"indices\[0\] = \[0,5\] is out of bounds"):
        tf.sparse.to_dense(tf.SparseTensor([[0, 5]], [1.0], [3, 4]))
    unordered = tf.SparseTensor([[1, 0], [0, 1]], [1.0, 2.0], [3, 4])
    with pytest.raises(InvalidArgumentError, match="out of order"):
        tf.sparse.to_dense(unordered)
    with pytest.raises(InvalidArgumentError, match="is repeated"):
        tf.sparse.to_dense(tf.SparseTensor([[0, 1], [0, 1]], [1.0, 2.0], [3, 4]))
    assert _dense(tf.sparse.reorder(unordered))[0, 1] == 2.0
    d = tf.sparse.to_dense(_st(), default_value=-1.0).numpy()
    assert d[0, 0] == 1.0 and d[1, 2] == 2.0 and d[2, 3] == -1.0


def test_from_dense_reshape_transpose_expand_dims():
    x = np.array([[1, 0, 0, 8], [0, 0, 0, 0], [0, 0, 3, 0]], np.int32)
    st = tf.sparse.from_dense(x)
    assert st.indices.numpy().tolist() == [[0, 0], [0, 3], [2, 2]]
    np.testing.assert_array_equal(_dense(st), x)
    np.testing.assert_array_equal(_dense(tf.sparse.reshape(st, [4, -1])), x.reshape(4, 3))
    np.testing.assert_array_equal(_dense(tf.sparse.transpose(st)), x.T)
    assert _dense(tf.sparse.expand_dims(st, 0)).shape == (1, 3, 4)
    with pytest.raises(InvalidArgumentError, match="12 dense values"):
        tf.sparse.reshape(st, [5, 3])


def test_add_concat_slice_retain_fill_and_extremes():
    a = tf.SparseTensor([[0, 2], [3, 4]], [31, 2], [4, 10])
    b = tf.SparseTensor([[0, 2], [3, 0]], [56, 38], [4, 10])
    s = tf.sparse.add(a, b)
    assert s.indices.numpy().tolist() == [[0, 2], [3, 0], [3, 4]]
    assert s.values.numpy().tolist() == [87, 38, 2]
    dense = tf.sparse.add(a, tf.ones([4, 10], tf.int32))
    assert isinstance(dense, tf.Tensor) and dense.numpy()[0, 2] == 32
    c = tf.SparseTensor([[0, 0], [2, 2]], [-1.0, 0.05], [3, 4])
    t = tf.sparse.add(tf.SparseTensor([[0, 0]], [1.0], [3, 4]), c, threshold=0.1)
    assert t.indices.numpy().tolist() == [[2, 2]]             # (only collisions are checked)
    cat = tf.sparse.concat(1, [a, b])
    np.testing.assert_array_equal(_dense(cat), np.concatenate([_dense(a), _dense(b)], 1))
    with pytest.raises(InvalidArgumentError, match="Input shapes must match"):
        tf.sparse.concat(1, [a, tf.SparseTensor([[0, 0]], [1], [2, 2])])
    sl = tf.sparse.slice(a, [0, 1], [8, 8])
    assert sl.shape == (4, 8) and sl.indices.numpy().tolist() == [[0, 1], [3, 3]]
    assert tf.sparse.slice(a, [0, 10], [4, 6]).shape == (4, 0)
    assert tf.sparse.retain(a, [True, False]).values.numpy().tolist() == [31]
    filled, empty = tf.sparse.fill_empty_rows(_st(), -1.0)
    assert filled.indices.numpy().tolist() == [[0, 0], [1, 2], [2, 0]]
    assert empty.numpy().tolist() == [False, False, True]
    other = tf.SparseTensor([[0, 0], [2, 2]], [5.0, -1.0], [3, 4])
    assert tf.sparse.maximum(_st(), other).values.numpy().tolist() == [5.0, 2.0, 0.0]
    assert tf.sparse.minimum(_st(), other).values.numpy().tolist() == [1.0, 0.0, -1.0]


def test_reductions_and_map_values():
    st = tf.SparseTensor([[0, 0], [0, 2], [1, 1]], [-1, -2, 3], [3, 3])
    assert tf.sparse.reduce_sum(st).numpy() == 0
    assert tf.sparse.reduce_sum(st, axis=1).numpy().tolist() == [-3, 3, 0]
    assert tf.sparse.reduce_sum(st, 0, keepdims=True).shape == (1, 3)
    # (reduce_max ignores the implicit zeros)
    assert tf.sparse.reduce_max(st, axis=1).numpy().tolist() == [-1, 3, 0]
    assert tf.sparse.reduce_max(tf.sparse.from_dense([-5, 0, -3])).numpy() == -3
    sp = tf.sparse.reduce_sum(st, axis=1, output_is_sparse=True)
    assert sp.indices.numpy().tolist() == [[0], [1]] and sp.values.numpy().tolist() == [-3, 3]
    plus = tf.sparse.map_values(tf.add, st, 5)
    assert plus.values.numpy().tolist() == [4, 3, 8]


def test_elementwise_dispatch():
    st = _st()
    assert (st * 2.0).values.numpy().tolist() == [2.0, 4.0]
    assert (st / 2.0).values.numpy().tolist() == [0.5, 1.0]
    rowscale = st * tf.constant([[1.0], [10.0], [100.0]])
    assert isinstance(rowscale, tf.SparseTensor) and rowscale.values.numpy().tolist() == [1.0, 20.0]
    assert tf.abs(tf.negative(st)).values.numpy().tolist() == [1.0, 2.0]
    assert tf.cast(st, tf.int32).dtype is tf.int32
    with pytest.raises(InvalidTypeError):          # (as TensorFlow: tf.sparse.add does it)
        tf.math.add(st, tf.ones([3, 4]))
    with pytest.raises(InvalidTypeError, match="implicit zeros"):
        tf.exp(st)


def test_sparse_dense_matmul_values_and_errors():
    a = tf.SparseTensor([[0, 1], [1, 0], [1, 1]], [13, 15, 17], [2, 2])
    out = tf.sparse.sparse_dense_matmul(a, tf.constant([[4], [6]]))
    assert out.numpy().tolist() == [[78], [162]]
    st, b = _st(), np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_allclose(tf.sparse.sparse_dense_matmul(st, b).numpy(), _dense(st) @ b)
    np.testing.assert_allclose(
        tf.sparse.sparse_dense_matmul(st, np.ones((3, 2), np.float32), adjoint_a=True).numpy(),
        _dense(st).T @ np.ones((3, 2)))
    np.testing.assert_allclose(tf.sparse.sparse_dense_matmul(tf.ones([2, 3]), st).numpy(),
                               np.ones((2, 3)) @ _dense(st))
    with pytest.raises(InvalidArgumentError, match="inner dimension does not match"):
        tf.sparse.sparse_dense_matmul(st, tf.ones([3, 2]))
    with pytest.raises(InvalidArgumentError, match="float64"):
        tf.sparse.sparse_dense_matmul(st, tf.ones([4, 2], tf.float64))
    with pytest.raises(InvalidTypeError):
        tf.sparse.sparse_dense_matmul(tf.ones([2, 2]), tf.ones([2, 2]))
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        tf.sparse.sparse_dense_matmul(tf.SparseTensor([[5, 0]], [1.0], [3, 4]), tf.ones([4, 2]))


def _num_grad(f, v, eps=1e-6):
    g = np.zeros_like(v)
    for i in range(v.size):
        d = np.zeros_like(v)
        d.flat[i] = eps
        g.flat[i] = (f(v + d) - f(v - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("path", ["matmul", "to_dense", "reduce_sum", "reduce_max", "mul"])
def test_gradients_with_respect_to_values(path):
    ind = [[0, 0], [1, 2], [2, 1]]
    w = np.linspace(-1, 1, 8).reshape(4, 2)

    def f(v):
        st = tf.SparseTensor(ind, v, [3, 4])
        if path == "matmul":
            out = tf.sparse.sparse_dense_matmul(st, w, adjoint_a=False)
        elif path == "to_dense":
            out = tf.sparse.to_dense(st) ** 2
        elif path == "reduce_sum":
            out = tf.sparse.reduce_sum(st, axis=1) ** 2
        elif path == "reduce_max":
            out = tf.sparse.reduce_max(st, axis=[0, 1], keepdims=True) ** 2
        else:
            out = (st * tf.constant(np.arange(12.0).reshape(3, 4))).values ** 2
        return tf.reduce_sum(tf.sin(out))

    v0 = np.array([0.3, -0.7, 1.1])
    vt = tf.constant(v0)
    with tf.GradientTape() as tape:
        tape.watch(vt)
        y = f(vt)
    got = tape.gradient(y, vt).numpy()
    np.testing.assert_allclose(got, _num_grad(lambda v: f(tf.constant(v)).numpy(), v0),
                               rtol=1e-5, atol=1e-7)


def test_matmul_gradient_reaches_the_dense_operand_with_adjoints():
    st = tf.SparseTensor([[0, 1], [2, 0]], tf.constant([2.0, 3.0], tf.float64), [3, 2])
    b = np.linspace(-1, 1, 6).reshape(3, 2)
    for aa, ab in ((False, True), (True, False)):
        bt = tf.constant(b)
        with tf.GradientTape() as tape:
            tape.watch(bt)
            y = tf.reduce_sum(tf.sparse.sparse_dense_matmul(st, bt, aa, ab) ** 2)
        def f(x):
            return float(tf.reduce_sum(tf.sparse.sparse_dense_matmul(
                st, tf.constant(x), aa, ab) ** 2).numpy())
        np.testing.assert_allclose(tape.gradient(y, bt).numpy(), _num_grad(f, b), rtol=1e-5)


def test_bad_arguments_raise_tapeflow_errors():
    with pytest.raises(InvalidTypeError):
        tf.sparse.to_dense(tf.ones([2]))
    with pytest.raises(InvalidArgumentError):
        tf.sparse.retain(_st(), [True])
    with pytest.raises(InvalidArgumentError):
        tf.sparse.expand_dims(_st(), 5)
    with pytest.raises(InvalidArgumentError):
        tf.sparse.transpose(_st(), [0, 0])


def test_sparse_tensor_spec_compatibility_checks_the_dense_shape():
    spec = tf.SparseTensorSpec([None, 3], tf.float32)
    assert spec.is_compatible_with(tf.SparseTensorSpec([2, 3], tf.float32))
    assert spec.is_compatible_with(tf.sparse.from_dense([[1.0, 0.0, 0.0]]))
    assert not spec.is_compatible_with(tf.SparseTensorSpec([2, 4], tf.float32))
    assert not spec.is_compatible_with(tf.SparseTensorSpec([2, 3], tf.int32))
    assert not spec.is_compatible_with(tf.SparseTensorSpec([2, 3, 1], tf.float32))
    assert not spec.is_compatible_with(tf.constant([1.0]))


def test_to_dense_validation_reports_the_first_bad_row():
    # (validated as arrays, not by a Python loop per entry: benchmarks, not timed here)
    n = 2000
    ind = np.stack(np.unravel_index(np.arange(n) * 3, (1000, 1000)), 1)
    st = tf.SparseTensor(ind, tf.ones([n]), [1000, 1000])
    assert float(tf.reduce_sum(tf.sparse.to_dense(st))) == n
    bad = ind.copy()
    bad[5], bad[9] = bad[4], [0, 1000]              # repeated row 5 before out-of-bounds row 9
    with pytest.raises(InvalidArgumentError, match=r"indices\[5\] = \[0,12\] is repeated"):
        tf.sparse.to_dense(tf.SparseTensor(bad[:20], tf.ones([20]), [1000, 1000]))
    bad[5] = [0, 15]
    with pytest.raises(InvalidArgumentError, match=r"indices\[9\] = \[0,1000\] is out of bounds"):
        tf.sparse.to_dense(tf.SparseTensor(bad[:20], tf.ones([20]), [1000, 1000]))
    bad[3] = [5, 0]
    with pytest.raises(InvalidArgumentError, match=r"indices\[4\] = \[0,12\] is out of order"):
        tf.sparse.to_dense(tf.SparseTensor(bad[:20], tf.ones([20]), [1000, 1000]))
    scalar = tf.SparseTensor(np.zeros((2, 0), np.int64), [1.0, 2.0], [])
    with pytest.raises(InvalidArgumentError, match=r"indices\[1\] = \[\] is repeated"):
        tf.sparse.to_dense(scalar)


def test_reductions_and_broadcast_products_work_from_the_entries():
    # a dense [100000, 100000] would be 37 GiB: TensorFlow computes these from the entries
    st = tf.SparseTensor([[0, 0], [7, 99999]], [1.0, 2.0], [100000, 100000])
    rows = tf.sparse.reduce_sum(st, axis=1).numpy()
    assert rows.shape == (100000,) and rows[0] == 1.0 and rows[7] == 2.0 and rows.sum() == 3.0
    cols = tf.sparse.reduce_max(st, axis=0, keepdims=True)
    assert cols.shape == (1, 100000) and cols.numpy()[0, 99999] == 2.0
    sp = tf.sparse.reduce_max(st, axis=1, output_is_sparse=True)
    assert sp.indices.numpy().tolist() == [[0], [7]] and sp.values.numpy().tolist() == [1.0, 2.0]
    assert (st * tf.range(100000.0)).values.numpy().tolist() == [0.0, 2.0 * 99999]
    assert (st / tf.fill([100000, 1], 2.0)).values.numpy().tolist() == [0.5, 1.0]
    with pytest.raises(InvalidArgumentError, match="does not broadcast"):
        _st() * tf.ones([1, 1, 4])
    # all axes reduced into a SparseTensor: one entry at the empty coordinate (as TF)
    total = tf.sparse.reduce_sum(_st(), output_is_sparse=True)
    assert total.indices.shape == (1, 0) and total.values.numpy().tolist() == [3.0]
    assert total.dense_shape.numpy().tolist() == []


def test_sparse_reduce_max_gradient_shares_ties_like_reduce_max():
    ind = [[0, 0], [0, 2], [1, 0], [1, 1], [1, 2], [2, 3]]
    v = tf.constant([2.0, 2.0, -1.0, -1.0, -3.0, np.inf])
    w = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(v)
        st = tf.SparseTensor(ind, v, [3, 4])
        y = tf.reduce_sum(tf.sparse.reduce_max(st, axis=1) * w)
        present = tf.constant(_dense(st) != 0)
        dense = tf.where(present, tf.sparse.to_dense(st), -np.inf)
        y_ref = tf.reduce_sum(tf.reduce_max(dense, axis=1) * w)
    assert y.numpy() == y_ref.numpy() == np.inf
    np.testing.assert_array_equal(tape.gradient(y, v).numpy()[:5],
                                  tape.gradient(y_ref, v).numpy()[:5])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy()[:5], [0.5, 0.5, 1.0, 1.0, 0.0])


def test_opencl_sparse_dense_matmul_walks_only_each_rows_entries():
    names = [d.name for d in tf.list_devices()]
    if "opencl:0" not in names:
        pytest.skip("no opencl:0 device")
    import time
    rng = np.random.default_rng(0)
    unsorted = np.array([[3, 1], [0, 2], [3, 0], [0, 2], [1, 4]])    # row 2 and 4 empty
    cases = [(unsorted, np.array([1, -2, 3, 4, -5]), (5, 5)),
             (np.zeros((0, 2), np.int64), np.zeros(0), (4, 3))]
    for aa, ab, (ind, v, shape), dt in [(aa, ab, c, dt) for aa in (False, True)
                                         for ab in (False, True) for c in cases
                                         for dt in (np.float32, np.int32)]:
        k = shape[0] if aa else shape[1]
        b = (rng.standard_normal((3, k) if ab else (k, 3)) * 4).astype(dt)
        res = []
        for dev in ("cpu:0", "opencl:0"):
            with tf.device(dev):
                st = tf.SparseTensor(ind, tf.constant(v.astype(dt)), shape)
                res.append(tf.sparse.sparse_dense_matmul(st, tf.constant(b), aa, ab).numpy())
        np.testing.assert_array_equal(res[1], res[0])
    # rows with many entries and many empty rows (each work item walks its own row's)
    m, nnz = 400, 4000
    ind = np.stack([rng.integers(0, m // 4, nnz), rng.integers(0, m, nnz)], 1)
    with tf.device("opencl:0"):
        st, b = tf.SparseTensor(ind, tf.ones([nnz]), [m, m]), tf.ones([m, 4])
        assert tf.sparse.sparse_dense_matmul(st, b).numpy().sum() == 4 * nnz
