"""``tf.experimental.numpy`` (issue 47): the module path, NumPy's signatures and names over
``tapeflow.numpy``, ``tnp.random``, and ``experimental_enable_numpy_behavior`` -- NumPy's
methods on tensors, NumPy's promotion for their operators, NumPy's default float --
undone after each test (TensorFlow cannot turn it off; tests must not leak it)."""

import numpy as np
import pytest

import tapeflow as tf
import tapeflow.experimental.numpy as tnp
from tapeflow import dtypes, errors


@pytest.fixture(autouse=True)
def _restored():
    """Each test leaves Tensor, Variable and the default dtypes as it found them."""
    before = (dict(tf.Tensor.__dict__), dict(tf.Variable.__dict__),
              dict(dtypes.DEFAULTS["array_api"]["alone"]))
    yield
    tnp._disable_numpy_behavior()
    after = (dict(tf.Tensor.__dict__), dict(tf.Variable.__dict__),
             dict(dtypes.DEFAULTS["array_api"]["alone"]))
    assert after == before
    assert (tf.constant(1) + tf.constant(2.5)).dtype == tf.float32      # tf.* rules again
    assert not hasattr(tf.constant(1), "astype")


@pytest.fixture
def numpy_behavior():
    tnp.experimental_enable_numpy_behavior()
    return tnp


def test_the_module_paths():
    assert tf.experimental.numpy is tnp
    assert callable(tf.experimental.async_scope) and callable(tf.experimental.async_clear_error)
    assert tnp.ndarray is tf.Tensor
    # the array API namespace's functions, NumPy's signatures where they differ
    assert tnp.exp is tf.numpy.exp
    x = tnp.ones([2, 3], tnp.int32)
    assert x.dtype == tf.int32
    assert tnp.sum(x, 0).numpy().tolist() == [2, 2, 2]
    assert tnp.expand_dims(x, 0).shape == (1, 2, 3)


def test_importing_changes_nothing_until_enabled():
    assert not tnp.numpy_behavior_enabled()
    assert not hasattr(tf.constant(1.0), "astype")
    assert (tf.constant(1) + tf.constant(2.5)).dtype == tf.float32   # tf.* rules
    assert tnp.asarray(1.5).dtype == tf.float32                       # the array API's


def test_numpy_methods_on_tensors(numpy_behavior):
    x = tnp.arange(24).reshape(2, 3, 4)
    assert x.T.shape == (4, 3, 2) and x.transpose((1, 0, 2)).shape == (3, 2, 4)
    assert x.reshape((4, 6)).shape == (4, 6) and x.reshape(-1).shape == (24,)
    a = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(x.reshape(4, 6, order="F").numpy(),
                                  a.reshape(4, 6, order="F"))
    assert x.astype("float32").dtype == tf.float32 and x.astype(np.int8).dtype == tf.int8
    assert x.ravel().shape == (24,) and x.flatten().shape == (24,)
    assert x.clip(3, 5).numpy().min() == 3 and x.tolist() == a.tolist()
    assert x.data is x
    assert int(x.max()) == 23 and x.min(axis=0).shape == (3, 4)
    assert x.mean().dtype == tf.float64 and float(x.mean()) == 11.5


def test_numpy_promotion_of_operators(numpy_behavior):
    c = tf.constant
    cases = [(c(1) + c(2.5), tf.float64), (c(1) + 2.5, tf.float64), (2.5 + c(1), tf.float64),
             (c(1.5) + 2.5, tf.float32), (c(1) + 1000, tf.int32),
             (c(1, tf.int32) + c(1, tf.int64), tf.int64), (c(True) + c(1), tf.int32),
             (c(1, tf.int8) + c(1, tf.uint8), tf.int16), (c(1.0) * np.float64(2), tf.float64),
             (c(1) / c(2), tf.float64), (c([[1]]) @ c([[1.5]]), tf.float64),
             (tf.Variable([1.0]) + c([1]), tf.float64)]
    for value, dtype in cases:
        assert value.dtype == dtype, (value, dtype)
    assert (c(1) < c(1.5)).numpy() and float(c(1) + c(2.2)) == pytest.approx(3.2)


def test_default_float_follows_prefer_float32():
    tnp.experimental_enable_numpy_behavior()
    assert tnp.asarray(1.0).dtype == tf.float64 and tnp.ones([2]).dtype == tf.float64
    assert tnp.add(1.0, 2.0).dtype == tf.float64 and tnp.random.randn(2).dtype == tf.float64
    tnp.experimental_enable_numpy_behavior(prefer_float32=True)
    assert tnp.asarray(1.0).dtype == tf.float32 and tnp.linspace(0, 1, 3).dtype == tf.float32
    assert tnp.asarray(1).dtype == tf.int64


def test_numpy_masks_among_other_indices(numpy_behavior):
    x = tnp.arange(24).reshape(2, 3, 4)
    a = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(x[:, (True, False, True)].numpy(), a[:, [True, False, True]])
    np.testing.assert_array_equal(x[:, [True, False, True], 1].numpy(),
                                  a[:, [True, False, True], 1])
    np.testing.assert_array_equal(x[1, (0, 0, 1), tnp.asarray([0, 1, 1])].numpy(),
                                  a[1, (0, 0, 1), [0, 1, 1]])


def test_numpy_functions_match_numpy():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    for got, want in [(tnp.dot(a, b), a.dot(b)), (tnp.dot(a[0], a[1]), a[0].dot(a[1])),
                      (tnp.dot(np.ones((2, 2, 3)), b), np.ones((2, 2, 3)).dot(b)),
                      (tnp.outer(a[0], a[1]), np.outer(a[0], a[1])),
                      (tnp.concatenate([a, a], 1), np.concatenate([a, a], 1)),
                      (tnp.cumsum(a), np.cumsum(a)), (tnp.transpose(a), a.T),
                      (tnp.vstack([a[0], a[1]]), np.vstack([a[0], a[1]])),
                      (tnp.mean(np.arange(4)), 1.5), (tnp.average(a, 1, [1.0, 0, 1.0]),
                                                      np.average(a, 1, [1.0, 0, 1.0]))]:
        np.testing.assert_allclose(np.asarray(got), want)
    assert tnp.allclose(a, a + 1e-9) and not tnp.allclose(a, a + 1)
    assert tnp.shape(a) == (2, 3) and tnp.ndim(a) == 2 and tnp.size(a) == 6
    assert tnp.promote_types(tnp.int32, tnp.float32) == tf.float64
    with tf.device("cpu:0"):
        assert tnp.copy(tf.constant([1.0])).device == "cpu:0"


def test_random_is_seeded():
    tnp.random.seed(3)
    first = (tnp.random.randn(2, 3), tnp.random.rand(4), tnp.random.randint(2, 5, size=50))
    tnp.random.seed(3)
    again = (tnp.random.randn(2, 3), tnp.random.rand(4), tnp.random.randint(2, 5, size=50))
    for x, y in zip(first, again):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert first[0].shape == (2, 3) and first[2].dtype == tf.int64
    assert 2 <= int(tnp.min(first[2])) and int(tnp.max(first[2])) < 5
    assert tnp.random.standard_normal((2,)).shape == (2,) and tnp.random.uniform().shape == ()


def test_numpy_interoperation_and_gradients(numpy_behavior):
    s = np.sum(tnp.ones([2, 3]))
    assert isinstance(s, np.float64) and float(s) == 6.0
    assert (tnp.ones([2]) + np.ones([2])).dtype == tf.float64
    w = tnp.random.randn(3, 2).astype(tnp.float32)
    with tf.GradientTape() as tape:
        tape.watch(w)
        loss = tnp.sum(tnp.square(tnp.matmul(tnp.ones([4, 3], tnp.float32), w)))
    g = tape.gradient(loss, w)
    assert isinstance(g, tnp.ndarray) and g.shape == (3, 2)


def test_bad_input():
    with pytest.raises(errors.UnimplementedError, match="WeakTensor"):
        tnp.experimental_enable_numpy_behavior(dtype_conversion_mode="all")
    with pytest.raises(errors.InvalidArgumentError, match="dtype_conversion_mode"):
        tnp.experimental_enable_numpy_behavior(dtype_conversion_mode="bogus")
    with pytest.raises(errors.InvalidTypeError, match="prefer_float32"):
        tnp.experimental_enable_numpy_behavior(prefer_float32="yes")
    with pytest.raises(errors.InvalidArgumentError, match="positional"):
        tnp.ones([2], tnp.float32, "cpu:0", 4)
    with pytest.raises(errors.UnimplementedError, match="out="):
        tnp.sum(np.ones(2), out=np.zeros(()))
    with pytest.raises(errors.InvalidArgumentError, match="order"):
        tnp.reshape(np.ones(2), (2,), order="K")
    assert not tnp.numpy_behavior_enabled()


def test_more_numpy_names_match_numpy():
    a, v, w = np.arange(12.0).reshape(3, 4), np.array([1.0, -2.0, 3.0]), np.array([0.5, 4, -1])
    pairs = [
        (tnp.einsum("ij,kj->ik", a, a), np.einsum("ij,kj->ik", a, a)),
        (tnp.diagonal(a, 1), np.diagonal(a, 1)), (tnp.trace(a, -1), np.trace(a, -1)),
        (tnp.diag(v, 1), np.diag(v, 1)), (tnp.diag(a, -1), np.diag(a, -1)),
        (tnp.tri(3, 4, 1), np.tri(3, 4, 1)),
        (tnp.pad(a, ((0, 1), (2, 0)), "reflect"), np.pad(a, ((0, 1), (2, 0)), "reflect")),
        (tnp.split(a, [1, 5], 1)[1], np.split(a, [1, 5], 1)[1]),
        (tnp.dstack([a, a]), np.dstack([a, a])), (tnp.append(a, v), np.append(a, v)),
        (tnp.vdot(v, w), np.vdot(v, w)), (tnp.kron(a[:2, :2], a[:2]), np.kron(a[:2, :2], a[:2])),
        (tnp.cross(v, w), np.cross(v, w)), (tnp.rot90(a), np.rot90(a)),
        (tnp.rot90(a, 3), np.rot90(a, 3)), (tnp.ptp(a, 0), np.ptp(a, 0)),
        (tnp.nanmean(np.array([[1, np.nan], [2, 4]]), 0), [1.5, 4.0]),
        (tnp.geomspace(1, 1000, 4), np.geomspace(1, 1000, 4)),
        (tnp.sinc(np.array([0.0, 0.5])), np.sinc([0.0, 0.5])),
        (tnp.select([v > 0, v < 0], [v, -10 * v], 7), np.select([v > 0, v < 0], [v, -10 * v], 7)),
        (tnp.heaviside(np.array([-1.0, 0, 2]), 0.5), np.heaviside([-1.0, 0, 2], 0.5)),
        (tnp.polyval([1, 2, 3], v), np.polyval([1, 2, 3], v)),
        (tnp.ix_(np.array([0, 2]), np.array([1, 3]))[1], np.ix_([0, 2], [1, 3])[1]),
    ]
    for i, (got, want) in enumerate(pairs):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, err_msg=str(i))
    with pytest.raises(errors.InvalidArgumentError, match="equal sections"):
        tnp.split(a, 3, 1)
    with pytest.raises(errors.UnimplementedError, match="mode"):
        tnp.pad(a, 1, "edge")


def test_numpy_signatures_take_a_positional_dtype():
    assert tnp.asarray([1], tnp.int32).dtype == tf.int32
    assert tnp.asanyarray([1], tnp.int64).dtype == tf.int64
    assert tnp.array([1], tnp.int8, True, 2).shape == (1, 1)
    assert tnp.zeros(2, tnp.int32).dtype == tnp.ones(2, tnp.int32).dtype == tf.int32
    assert tnp.empty(2, tnp.int32).dtype == tnp.empty_like([1.], tnp.int32).dtype == tf.int32
    assert tnp.full(2, 3, tnp.int8).numpy().tolist() == [3, 3]
    assert tnp.arange(0, 6, 2, tnp.int64).numpy().tolist() == [0, 2, 4]
    assert tnp.arange(3, dtype=tnp.int64).dtype == tf.int64
    assert tnp.eye(2, 3, 1, tnp.int32).numpy().tolist() == np.eye(2, 3, 1).tolist()
    x, step = tnp.linspace(0, 1, 5, True, True, tnp.float32)
    assert x.dtype == tf.float32 and step == 0.25 and x.numpy()[-1] == 1.0
    assert tnp.linspace(0, 1).shape == (50,)
    assert tnp.linspace(0., 1., 4, False).numpy().tolist() == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(errors.UnimplementedError):
        tnp.linspace(0, 1, 3, axis=1)


def test_only_operators_and_tnp_functions_promote_numpy_style(numpy_behavior):
    i, f32 = tf.constant([1]), tf.constant([2.5])
    assert (i + 2.5).dtype == (i + f32).dtype == tf.float64            # operators: NumPy's
    assert tnp.add(i, f32).dtype == tnp.concatenate([i, f32]).dtype == tf.float64
    # tf.* functions keep tapeflow's rules (TensorFlow's refuse mixed dtypes here)
    assert tf.add(i, 2.5).dtype == tf.add(i, f32).dtype == tf.float32
    assert tf.concat([i, f32], 0).dtype == tf.multiply(i, f32).dtype == tf.float32
    assert tf.matmul(tf.ones([2, 2]), tf.ones([2, 2], tf.float64)).dtype == tf.float64


def test_bad_counts_raise_tapeflow_errors():
    for bad in (lambda: tnp.linspace(0, 1, "x"), lambda: tnp.linspace(0, 1, -3),
                lambda: tnp.eye(2, 2, 1.5), lambda: tnp.eye(-1)):
        with pytest.raises(errors.InvalidArgumentError):
            bad()
    assert tnp.linspace(0, 1, tf.constant(3)).shape == (3,)
