"""The reductions' and their gradients' short paths (issue 33): ``tf.reduce_*`` with the
default arguments on a Tensor, the gradient of Sum/Mean as one BroadcastTo kernel call
(no Reshape where the reduced dy broadcasts against the input already), ``unbroadcast``
without axis normalisation, and ``_shape_tuple`` without the device lookup. Same values,
same errors as the general path; what changed is the number of ops a gradient runs,
which the profiler's events show (the op-count tests failed before: a Reshape ran before
the BroadcastTo of a leading-axes reduction's gradient, and a BroadcastTo ran where the
gradient had the input's shape already)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.ops.reductions import unbroadcast
from test_bad_input import DEVICES, _raises, dev  # noqa: F401 - dev: the device fixture


def _backward_ops(f, x, dy=None):
    """``(gradient, [names of the ops the gradient ran])`` of ``f`` at ``x``; ``dy`` (a
    Tensor, made before profiling) seeds the gradient so no seed op is counted."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    if dy is None and y.shape.rank:
        dy = tf.ones_like(y)
    with tf.profiler.profile() as prof:
        g = tape.gradient(y, x, output_gradients=None if dy is None else [dy])
    return g, [e.name for e in prof.events]


def _m(shape=(4, 3)):
    n = int(np.prod(shape))
    return np.linspace(-1.0, 2.0, n, dtype=np.float32).reshape(shape)


# --- the number of ops a gradient runs ------------------------------------------------

@pytest.mark.parametrize("shape,axis", [((10,), 0), ((10,), -1), ((10,), None),
                                        ((4, 3), 0), ((4, 3), [0, 1]), ((2, 3, 4), [0, 1])])
def test_the_sum_gradient_of_leading_axes_is_one_broadcast(dev, shape, axis):
    # before: Reshape then BroadcastTo for every axis that was not None
    with tf.device(dev):
        x = tf.constant(_m(shape))
        g, ops = _backward_ops(lambda x: tf.reduce_sum(x, axis=axis), x)
    assert ops == ["BroadcastTo"]
    np.testing.assert_array_equal(g.numpy(), np.ones(shape, np.float32))


@pytest.mark.parametrize("shape,axis", [((4, 3), 1), ((4, 3), -1), ((2, 3, 4), [0, 2]),
                                        ((2, 3, 4), 1)])
def test_the_sum_gradient_of_other_axes_reshapes_first(dev, shape, axis):
    with tf.device(dev):
        x = tf.constant(_m(shape))
        y = tf.reduce_sum(x, axis=axis)
        dy = tf.constant(np.arange(1, y.shape.num_elements() + 1, dtype=np.float32)
                         .reshape(tuple(y.shape)))
        g, ops = _backward_ops(lambda x: tf.reduce_sum(x, axis=axis), x, dy)
    assert ops == ["Reshape", "BroadcastTo"]
    keep = np.expand_dims(dy.numpy(), tuple(np.atleast_1d(axis) % len(shape)))
    np.testing.assert_array_equal(g.numpy(), np.broadcast_to(keep, shape))


@pytest.mark.parametrize("axis,keepdims", [([], False), (None, True), (0, True)])
def test_a_sum_gradient_of_the_inputs_shape_runs_no_op(dev, axis, keepdims):
    # before: a BroadcastTo to the shape dy had already
    with tf.device(dev):
        x = tf.constant(_m((1, 3)) if axis == 0 else _m((1, 1)))
        y = tf.reduce_sum(x, axis=axis, keepdims=keepdims)
        dy = tf.constant(np.full(tuple(y.shape), 3.0, np.float32))
        g, ops = _backward_ops(lambda x: tf.reduce_sum(x, axis=axis, keepdims=keepdims),
                               x, dy)
    assert ops == []
    np.testing.assert_array_equal(g.numpy(), np.full(tuple(x.shape), 3.0, np.float32))


def test_the_mean_gradient_over_all_axes_divides_then_broadcasts(dev):
    with tf.device(dev):
        x = tf.constant(_m((10,)))
        g, ops = _backward_ops(lambda x: tf.reduce_mean(x, axis=0), x)
    assert ops == ["RealDiv", "BroadcastTo"]      # before: RealDiv, Reshape, BroadcastTo
    np.testing.assert_allclose(g.numpy(), np.full((10,), 0.1, np.float32), rtol=1e-6)


def test_the_max_gradient_of_leading_axes_reshapes_nothing(dev):
    x0 = np.array([[1.0, 5.0, 2.0], [7.0, 5.0, 2.0]], np.float32)
    with tf.device(dev):
        g, ops = _backward_ops(lambda x: tf.reduce_max(x, axis=0), tf.constant(x0))
    assert "Reshape" not in ops                    # before: two (the result's and dy's)
    np.testing.assert_array_equal(g.numpy(), [[0, 0.5, 0.5], [1, 0.5, 0.5]])


# --- the same values as NumPy's, over axes, keepdims and dtypes ------------------------

AXES = [None, 0, 1, -1, 2, [0, 1], [0, 2], [1, 2], [0, 1, 2], [], (-1, 0)]


def _expected_grads(name, x, axis, keepdims):
    ax = None if axis is None else tuple(np.atleast_1d(np.asarray(axis, int)) % x.ndim)
    if name == "sum":
        return np.ones_like(x)
    if name == "mean":
        n = x.size if ax is None else int(np.prod([x.shape[a] for a in ax]))
        return np.full_like(x, 1.0 / max(n, 1))
    if name in ("max", "min"):
        r = getattr(np, name)(x, axis=ax, keepdims=True)
        mask = (x == r).astype(x.dtype)
        return mask / mask.sum(axis=ax, keepdims=True)
    if name == "logsumexp":
        r = np.log(np.sum(np.exp(x), axis=ax, keepdims=True))
        return np.exp(x - r)
    if name == "euclidean_norm":
        return x / np.sqrt(np.sum(x * x, axis=ax, keepdims=True))
    assert name == "prod"
    p = np.prod(x, axis=ax, keepdims=True)
    return p / x


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "logsumexp",
                                  "euclidean_norm"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
def test_reduction_gradients_match_numpy(name, axis, keepdims):
    x0 = np.array([[[1.0, 2.0, 0.5, 3.0], [2.5, 1.5, 1.25, 0.75], [3.0, 2.0, 1.0, 4.0]],
                   [[0.5, 4.0, 2.0, 1.0], [1.0, 3.5, 2.5, 0.25], [2.0, 0.5, 3.0, 1.5]]],
                  np.float64)
    f = getattr(tf, "reduce_" + name)
    x = tf.constant(x0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x, axis=axis, keepdims=keepdims)
        loss = tf.reduce_sum(y * tf.constant(np.arange(1.0, y.shape.num_elements() + 1)
                                             .reshape(tuple(y.shape))))
    g = tape.gradient(loss, x).numpy()
    ax = None if axis is None else tuple(np.atleast_1d(np.asarray(axis, int)) % 3)
    w = np.arange(1.0, y.shape.num_elements() + 1).reshape(tuple(y.shape))
    if not keepdims:
        w = w.reshape(np.sum(x0, axis=ax, keepdims=True).shape)
    np.testing.assert_allclose(g, _expected_grads(name, x0, axis, keepdims) * w,
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [None, 0, 1, [0, 1]])
def test_second_order_through_the_sum_gradient(axis):
    # the gradient's BroadcastTo is recorded by an outer tape: d2/dx2 sum(x^3) = 6x
    x0 = _m((3, 2)).astype(np.float64)
    x = tf.constant(x0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(x * x * x, axis=axis)
        g = inner.gradient(y, x)
        s = tf.reduce_sum(g)
    np.testing.assert_allclose(g.numpy(), 3 * x0 * x0, rtol=1e-12)
    np.testing.assert_allclose(outer.gradient(s, x).numpy(), 6 * x0, rtol=1e-12)


def test_sum_and_mean_gradients_in_a_traced_function_and_a_device_scope(dev):
    x0 = _m((4, 3))

    def grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(x * x) + tf.reduce_mean(x, axis=0)[0]
        return tape.gradient(y, x)

    expect = 2 * x0
    expect[:, 0] += 0.25
    with tf.device(dev):
        x = tf.constant(x0)
        np.testing.assert_allclose(grads(x).numpy(), expect, rtol=1e-6)
        np.testing.assert_allclose(tf.function(grads)(x).numpy(), expect, rtol=1e-6)
    np.testing.assert_allclose(grads(tf.constant(x0)).numpy(), expect, rtol=1e-6)


@pytest.mark.parametrize("xs,bs", [((4, 3), (3,)), ((4, 3), (4, 1)), ((2, 1, 3), (3,)),
                                   ((2, 4, 3), (1, 4, 1)), ((4, 3), ())])
def test_broadcast_gradients_sum_down_to_the_input(dev, xs, bs):
    a0, b0 = _m(xs), np.full(bs, 2.0, np.float32)
    with tf.device(dev):
        a, b = tf.constant(a0), tf.constant(b0)
        with tf.GradientTape() as tape:
            tape.watch(b)
            y = tf.reduce_sum((a + b) * a)
        gb = tape.gradient(y, b)
    lead = len(xs) - len(bs)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(bs)
                                      if d == 1 and xs[lead + i] != 1)
    assert tuple(gb.shape) == bs
    np.testing.assert_allclose(gb.numpy(), np.sum(a0, axis=axes).reshape(bs), rtol=1e-6)
    with tf.device(dev):
        ub = unbroadcast(tf.constant(a0), bs)
    np.testing.assert_allclose(ub.numpy(), np.sum(a0, axis=axes).reshape(bs), rtol=1e-6)


# --- the defaults' short path: the general path's results and errors --------------------

@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "logsumexp", "any",
                                  "all", "euclidean_norm"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.complex64])
def test_default_arguments_give_the_general_paths_result(dev, name, dtype):
    f = getattr(tf, "reduce_" + name)
    x0 = (np.arange(-3, 9).reshape(3, 4) % 5).astype(dtype)
    with tf.device(dev):
        x = tf.constant(x0)
        try:
            general = f(x, axis=[0, 1], keepdims=np.bool_(False))
        except errors.TapeflowError as e:           # (a dtype the op has no kernel for)
            _raises(type(e), lambda: f(x), str(e).split(";")[0])
            return
        short = f(x)
        listed = f(x0.tolist()) if dtype is not np.complex64 else short
    assert short.dtype == general.dtype == listed.dtype and short.shape == ()
    np.testing.assert_array_equal(short.numpy(), general.numpy())
    np.testing.assert_array_equal(listed.numpy(), general.numpy())


def test_a_variable_is_read_and_watched_by_the_defaults_path():
    v = tf.Variable(_m((2, 3)))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v)
    np.testing.assert_allclose(y.numpy(), _m((2, 3)).sum(), rtol=1e-6)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), np.ones((2, 3)))


@pytest.mark.parametrize("call,cls,frags", [
    (lambda x: tf.reduce_sum(x, axis=5), errors.InvalidArgumentError,
     ["axis 5 is out of range for a tensor of rank 2", "[Op:Sum]"]),
    (lambda x: tf.reduce_sum(x, axis=[0, -2]), errors.InvalidArgumentError,
     ["axis 0 is given more than once", "[Op:Sum]"]),
    (lambda x: tf.reduce_mean(x, keepdims="yes"), errors.InvalidTypeError,
     ["keepdims must be a bool", "[Op:Mean]"]),
    (lambda x: tf.reduce_max(x, keep_dims="yes"), errors.InvalidTypeError,
     ["keepdims must be a bool", "[Op:Max]"]),
    (lambda x: tf.reduce_sum("abc"), errors.InvalidArgumentError,      # text: a string
     ["string", "on "]),                                                   # tensor, not a number
    (lambda x: tf.reduce_sum(None), errors.InvalidArgumentError,
     ["Cannot convert None", "[in tf.reduce_sum]"]),
    (lambda x: tf.reduce_max(tf.zeros((0,))), errors.InvalidArgumentError,
     ["max of zero elements", "[Op:Max]"]),
    (lambda x: tf.reduce_sum(tf.constant([True, False])), errors.NotFoundError,
     ["No kernel for op Sum", "bool", "[Op:Sum]"]),
    (lambda x: tf.reduce_any(x), errors.NotFoundError,
     ["No kernel for op Any", "float32", "[Op:Any]"]),
])
def test_reduction_errors(dev, call, cls, frags):
    with tf.device(dev):
        x = tf.constant(_m((2, 3)))
        _raises(cls, lambda: call(x), *frags, dev)


# --- shape arguments (_shape_tuple: the error paths it still has) -----------------------

@pytest.mark.parametrize("call,frags", [
    (lambda x: tf.broadcast_to(x, [2, "a"]),
     ["shape must be an integer or a list of integers, got [2, 'a']", "[Op:BroadcastTo]"]),
    (lambda x: tf.broadcast_to(x, [2, 3.0]),
     ["shape must be an integer or a list of integers, got [2, 3.0]", "[Op:BroadcastTo]"]),
    (lambda x: tf.broadcast_to(x, None), ["got None", "[Op:BroadcastTo]"]),
    (lambda x: tf.broadcast_to(x, [-2, 3]), ["shape must be non-negative", "[Op:BroadcastTo]"]),
    (lambda x: tf.broadcast_to(x, [4, 4]),
     ["Unable to broadcast tensor of shape (2, 3) to shape (4, 4)", "[Op:BroadcastTo]"]),
    (lambda x: tf.broadcast_to(x, [1] * 65), ["rank 65", "64", "[Op:BroadcastTo]"]),
    (lambda x: tf.reshape(x, [2.5]), ["got [2.5]", "[Op:Reshape]"]),
    (lambda x: tf.zeros(["a"]), ["got ['a']", "[Op:Fill]"]),
])
def test_shape_argument_errors(dev, call, frags):
    with tf.device(dev):
        x = tf.constant(_m((2, 3)))
        _raises(errors.InvalidArgumentError, lambda: call(x), *frags, dev)


def test_shape_arguments_of_every_integer_kind(dev):
    with tf.device(dev):
        x = tf.constant(_m((2, 3)))
        for shape in ([3, 2], (3, 2), [np.int64(3), 2], [tf.constant(3), 2],
                      np.array([3, 2]), tf.constant([3, 2]), tf.TensorShape([3, 2])):
            assert tf.reshape(x, shape).shape == (3, 2)
        np.testing.assert_array_equal(tf.broadcast_to(x[0], [2, 3]).numpy(),
                                      np.broadcast_to(_m((2, 3))[0], (2, 3)))
        assert tf.zeros(4).shape == (4,)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "prod", "logsumexp"])
@pytest.mark.parametrize("axis", [0, [0, 1], 1, None])
def test_jacobians_and_vectorized_gradients_of_reductions(name, axis):
    # a leading-axes reduction's dy is no longer reshaped to keepdims: vectorized_map's
    # broadcasting rules must still align it (pfor against the loop, and against NumPy)
    x0 = np.array([[1.0, 5.0, 2.0], [7.0, 5.0, 2.0], [0.5, 1.0, 9.0], [3.0, 3.0, 3.0]])
    f = getattr(tf, "reduce_" + name)
    x = tf.constant(x0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = f(x, axis=axis)
        z = y * y
    j = tape.jacobian(z, x).numpy()
    np.testing.assert_allclose(j, tape.jacobian(z, x, experimental_use_pfor=False).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(j.reshape(-1, x0.size).sum(axis=0).reshape(x0.shape),
                               tape.gradient(z, x).numpy(), rtol=1e-12)

    def per_example(v):
        with tf.GradientTape() as t:
            t.watch(v)
            s = tf.reduce_sum(f(v * v, axis=axis))
        return t.gradient(s, v)

    xs = np.stack([x0, x0[::-1], x0 * 0.5])
    np.testing.assert_allclose(tf.vectorized_map(per_example, tf.constant(xs)).numpy(),
                               np.stack([per_example(tf.constant(v)).numpy() for v in xs]),
                               rtol=1e-12)
