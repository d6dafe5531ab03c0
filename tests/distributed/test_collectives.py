"""Each collective, every dtype, on cpu:0 and opencl:0, against what NumPy computes
from every rank's input (each rank can compute every rank's input: they are
functions of the rank)."""

import numpy as np
import pytest

import tapeflow as tf

D = tf.distributed
DEVICES = ["cpu:0", "opencl:0"]
DTYPES = ["float16", "float32", "float64", "int32", "int64", "uint8", "int8", "bool"]


def value(rank, shape, dtype):
    """Rank ``rank``'s input: distinct per rank, exact in every dtype."""
    n = int(np.prod(shape))
    a = (np.arange(n) % 7 + 3 * rank + 1).reshape(shape)
    if dtype == "bool":
        return (a + rank) % 2 == 0
    return a.astype(dtype)


def holds(dev, dtype):
    if dev.startswith("opencl"):
        d = tf.runtime.devices.get_device(dev)
        return not d.backend.dtype_unsupported(d, np.dtype(dtype))
    return True


def all_values(shape, dtype):
    return [value(r, shape, dtype) for r in range(D.size())]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "average", "min", "max", "product"])
def test_allreduce(dev, dtype, op):
    if not holds(dev, dtype):
        pytest.skip(f"{dev} cannot hold {dtype}")
    vals = all_values((3, 4), dtype)
    with tf.device(dev):
        x = tf.constant(vals[D.rank()])
        if dtype == "bool" and op not in ("min", "max"):
            with pytest.raises(tf.errors.InvalidArgumentError, match="bool tensor"):
                D.allreduce(x, op=op)
            return
        y = D.allreduce(x, op=op)
    assert y.device == dev and y.dtype == dtype and y.shape == (3, 4)
    stack = np.stack([v.astype(np.float64) for v in vals])
    ref = {"sum": stack.sum(0), "min": stack.min(0), "max": stack.max(0),
           "product": stack.prod(0), "average": stack.mean(0)}[op]
    if op == "average" and np.dtype(dtype).kind in "iu":
        ref = np.trunc(ref)
    if dtype == "bool":
        ref = ref.astype(bool)
    else:
        ref = ref.astype(dtype)     # wraps for small ints, as the MPI reduction does
    if op == "average" and np.dtype(dtype).kind == "f":
        tol = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-14}[dtype]
        np.testing.assert_allclose(y.numpy(), ref, rtol=tol)
    else:
        np.testing.assert_array_equal(y.numpy(), ref)


@pytest.mark.parametrize("dev", DEVICES)
def test_allreduce_scale_factors(dev):
    with tf.device(dev):
        x = tf.constant(value(D.rank(), (5,), "float32"))
        y = D.allreduce(x, op=D.Sum, prescale_factor=0.5, postscale_factor=3.0)
    ref = sum(value(r, (5,), "float64") for r in range(D.size())) * 1.5
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_allgather_with_a_different_first_dimension_per_rank(dev, dtype):
    if not holds(dev, dtype):
        pytest.skip(f"{dev} cannot hold {dtype}")
    vals = [value(r, (r + 1, 2, 3), dtype) for r in range(D.size())]
    with tf.device(dev):
        y = D.allgather(tf.constant(vals[D.rank()]))
    assert y.device == dev and y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), np.concatenate(vals))


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_from_every_root(dev, dtype):
    if not holds(dev, dtype):
        pytest.skip(f"{dev} cannot hold {dtype}")
    for root in range(D.size()):
        with tf.device(dev):
            y = D.broadcast(tf.constant(value(D.rank(), (2, 3), dtype)), root_rank=root)
        assert y.device == dev
        np.testing.assert_array_equal(y.numpy(), value(root, (2, 3), dtype))


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_alltoall_even_and_with_splits(dev, dtype):
    n, r = D.size(), D.rank()
    vals = all_values((2 * n, 3), dtype)
    with tf.device(dev):
        y = D.alltoall(tf.constant(vals[r]))
    np.testing.assert_array_equal(y.numpy(), np.concatenate([v[2 * r:2 * r + 2] for v in vals]))
    # uneven: rank s sends (s + d) % 3 rows to rank d
    def splits(s):
        return [(s + d) % 3 for d in range(n)]
    srcs = [value(s, (sum(splits(s)), 3), dtype) for s in range(n)]
    with tf.device(dev):
        y, got = D.alltoall(tf.constant(srcs[r]), splits=splits(r))
    parts = []
    for s in range(n):
        off = sum(splits(s)[:r])
        parts.append(srcs[s][off:off + splits(s)[r]])
    np.testing.assert_array_equal(y.numpy(), np.concatenate(parts))
    assert got.numpy().tolist() == [splits(s)[r] for s in range(n)]


@pytest.mark.parametrize("dev", DEVICES)
def test_fusion_buckets_on_and_off_give_the_same_result(dev):
    rng = np.random.default_rng(D.rank())
    shapes = [(7, 3), (1,), (300,), (4, 4, 4), (2,), (50, 20)]
    with tf.device(dev):
        ts = [tf.constant(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        ts.insert(2, None)
        ts.append(tf.constant(np.arange(6) + D.rank()))           # an int64 bucket too
        fused = D.grouped_allreduce(ts, bucket_bytes=64 << 20)
        small = D.grouped_allreduce(ts, bucket_bytes=1024)        # several buckets
        alone = D.grouped_allreduce(ts, bucket_bytes=0)           # one call per tensor
    assert fused[2] is None and small[2] is None and alone[2] is None
    for a, b, c, t in zip(fused, small, alone, ts):
        if t is None:
            continue
        assert a.device == dev and a.dtype == t.dtype and a.shape == t.shape
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.numpy(), c.numpy())
    ref = np.mean([np.random.default_rng(r).standard_normal((7, 3)).astype(np.float32)
                   for r in range(D.size())], axis=0)
    np.testing.assert_allclose(fused[0].numpy(), ref, rtol=1e-5, atol=1e-6)


def test_mismatched_shapes_raise_a_named_error_on_every_rank():
    shape = [2, 3 + D.rank()]
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        D.allreduce(tf.ones(shape), name="layer1/kernel")
    msg = str(e.value)
    assert "'layer1/kernel'" in msg and "rank 0 has" in msg and "rank 1 has" in msg
    assert "(2, 3)" in msg and "(2, 4)" in msg
    with pytest.raises(tf.errors.InvalidArgumentError, match="float32.*float64|float64.*float32"):
        D.allreduce(tf.ones([2], dtype="float32" if D.rank() == 0 else "float64"), name="x")
    with pytest.raises(tf.errors.InvalidArgumentError, match="differ beyond the first"):
        D.allgather(tf.ones([2, 1 + D.rank()]))
    # and the world is still usable afterwards
    assert float(D.allreduce(tf.constant(1.0), op=D.Sum)) == D.size()


def test_gradients_that_are_none_on_some_ranks_only_count_as_zeros():
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a * a) + (tf.reduce_sum(b) if D.rank() == 0 else 0.0)
    ga, gb = D.DistributedGradientTape(tape).gradient(loss, [a, b])
    np.testing.assert_allclose(ga.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(gb.numpy(), [1.0 / D.size()])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a)
    ga, gb = D.DistributedGradientTape(tape).gradient(loss, [a, b])
    assert gb is None and ga is not None
