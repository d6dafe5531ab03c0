"""Gradients of the decompositions and of cumulative products against central finite
differences (float64), through losses that do not depend on the factors' free signs."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
import tapeflow.numpy as tnp

RNG = np.random.default_rng(0)


def _check(f_t, f_np, a):
    v = tf.Variable(a)
    with tf.GradientTape() as tape:
        y = f_t(v)
    got = tape.gradient(y, v).numpy()
    want = np.zeros_like(a)
    eps = 1e-6
    for idx in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[idx] = eps
        want[idx] = (f_np(a + e) - f_np(a - e)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 5, 3)])
def test_svd_values_and_vectors(shape):
    a = RNG.standard_normal(shape)
    m, n = shape[-2:]
    k = min(m, n)
    c1 = RNG.standard_normal(shape[:-2] + (m, k))
    c2 = RNG.standard_normal(shape[:-2] + (k, n))
    w = RNG.standard_normal(k)

    def f_t(x):
        u, s, vh = tnp.linalg.svd(x, full_matrices=False)
        return (tf.reduce_sum(u ** 2 * c1) + tf.reduce_sum(vh ** 2 * c2) + tf.reduce_sum(s * w)
                + tf.reduce_sum(tf.matmul(u * w, vh)))

    def f_np(x):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return (u ** 2 * c1).sum() + (vh ** 2 * c2).sum() + (s * w).sum() + ((u * w) @ vh).sum()
    _check(f_t, f_np, a)


@pytest.mark.parametrize("shape", [(5, 3), (4, 4), (2, 5, 3)])
def test_qr(shape):
    a = RNG.standard_normal(shape)
    m, n = shape[-2:]
    c1 = RNG.standard_normal(shape[:-2] + (m, n))
    c2 = RNG.standard_normal(shape[:-2] + (n, n))

    def f_t(x):
        q, r = tnp.linalg.qr(x)
        return tf.reduce_sum(q * c1) + tf.reduce_sum(r * c2)

    def f_np(x):
        q, r = np.linalg.qr(x)
        return (q * c1).sum() + (r * c2).sum()
    _check(f_t, f_np, a)


def test_undefined_decomposition_gradients_say_so():
    x = tf.Variable(RNG.standard_normal((3, 5)))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tnp.linalg.qr(x).Q)
    with pytest.raises(tf.errors.NotDifferentiableError, match="wide matrix"):
        tape.gradient(y, x)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tnp.linalg.svd(x, full_matrices=True).Vh)    # the completion
    with pytest.raises(tf.errors.NotDifferentiableError, match="full_matrices=False"):
        tape.gradient(y, x)


def test_full_svd_is_differentiable_through_what_is_defined():
    a = RNG.standard_normal((4, 3))
    w = RNG.standard_normal(3)

    def f_t(x):                          # tnp's default: full_matrices=True
        u, s, vh = tnp.linalg.svd(x)
        return tf.reduce_sum(s * w) + tf.reduce_sum(tf.matmul(u[:, :3] * s, vh))

    def f_np(x):
        u, s, vh = np.linalg.svd(x)
        return (s * w).sum() + ((u[:, :3] * s) @ vh).sum()
    _check(f_t, f_np, a)


def test_svd_gradient_keeps_its_accuracy_for_tiny_matrices():
    a = RNG.standard_normal((4, 3)) * 1e-7
    c = RNG.standard_normal((3, 3))

    def f_t(x):
        return tf.reduce_sum(tnp.linalg.svd(x, full_matrices=False).Vh ** 2 * c)

    def f_np(x):
        return (np.linalg.svd(x, full_matrices=False)[2] ** 2 * c).sum()
    v = tf.Variable(a)
    with tf.GradientTape() as tape:
        y = f_t(v)
    got = tape.gradient(y, v).numpy()
    eps = 1e-13
    want = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[idx] = eps
        want[idx] = (f_np(a + e) - f_np(a - e)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("kw", [dict(axis=1), dict(axis=0, exclusive=True),
                                dict(axis=1, reverse=True),
                                dict(axis=1, exclusive=True, reverse=True)])
def test_cumprod(kw):
    a = RNG.uniform(0.5, 2.0, (3, 4))
    c = RNG.standard_normal((3, 4))

    def ref(x, axis, exclusive=False, reverse=False):
        if reverse:
            x = np.flip(x, axis)
        out = np.cumprod(x, axis=axis)
        if exclusive:
            first = np.ones_like(np.take(out, [0], axis=axis))
            out = np.concatenate([first, np.delete(out, -1, axis=axis)], axis=axis)
        return np.flip(out, axis) if reverse else out
    _check(lambda v: tf.reduce_sum(tf.cumprod(v, **kw) * c), lambda x: (ref(x, **kw) * c).sum(),
           a)
