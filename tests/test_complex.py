"""Complex numbers: gradients (TensorFlow's convention, dL/dx + i dL/dy for a real loss
of z = x + iy) against central finite differences, the Fourier transforms' gradients,
conversion rules, and the clear error on a device without complex kernels.

The forward values of every complex op are in the conformance suite
(tapeflow/testing/specs/math.py)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeflow as tf
import tapeflow.numpy as tnp

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))
B = RNG.standard_normal((3, 2)) + 1j * RNG.standard_normal((3, 2))


def numeric_grad(f, z, eps=1e-6):
    g = np.zeros_like(z)
    for idx in np.ndindex(z.shape):
        for unit in (1, 1j):
            zp, zm = z.copy(), z.copy()
            zp[idx] += eps * unit
            zm[idx] -= eps * unit
            g[idx] += (f(zp) - f(zm)) / (2 * eps) * unit
    return g


CASES = {
    "matmul_abs": (lambda t: tf.reduce_sum(tf.abs(tf.matmul(t, tf.constant(B)))),
                   lambda z: np.abs(z @ B).sum()),
    "exp_real": (lambda t: tf.reduce_sum(tf.math.real(tf.exp(t) * t)),
                 lambda z: np.real(np.exp(z) * z).sum()),
    "div_imag": (lambda t: tf.reduce_sum(tf.math.imag(1.0 / (t + 3.0))),
                 lambda z: np.imag(1 / (z + 3)).sum()),
    "sqrt_log": (lambda t: tf.reduce_sum(tf.abs(tf.sqrt(t) * tf.math.log(t))),
                 lambda z: np.abs(np.sqrt(z) * np.log(z)).sum()),
    "conj_prod": (lambda t: tf.math.real(tf.reduce_prod(tf.math.conj(t) * t[0, 0])),
                  lambda z: np.real(np.prod(np.conj(z) * z[0, 0]))),
    "einsum": (lambda t: tf.reduce_sum(tf.abs(tf.einsum("ij,jk->ik", t, t))),
               lambda z: np.abs(z @ z).sum()),
    "trig_pow": (lambda t: tf.reduce_mean(tf.math.real(tf.sin(t) ** 2 + tf.tanh(t) * tf.cos(t))),
                 lambda z: np.real(np.sin(z) ** 2 + np.tanh(z) * np.cos(z)).mean()),
    "complex_of_parts": (lambda t: tf.reduce_sum(tf.abs(tf.complex(tf.math.real(t) * 2.0,
                                                                   tf.math.imag(t)))),
                         lambda z: np.abs(2 * z.real + 1j * z.imag).sum()),
    "acosh_left_half_plane": (lambda t: tf.reduce_sum(tf.math.real(tf.math.acosh(t - 2.0))),
                              lambda z: np.real(np.arccosh(z - 2.0)).sum()),
    "fft2": (lambda t: tf.reduce_sum(tf.abs(tnp.fft.fftn(t, norm="ortho")) ** 3),
             lambda z: (np.abs(np.fft.fftn(z, norm="ortho")) ** 3).sum()),
    "ifft_padded": (lambda t: tf.reduce_sum(tf.math.real(tnp.fft.ifft(t, n=5) ** 2)),
                    lambda z: np.real(np.fft.ifft(z, n=5) ** 2).sum()),
    "irfft": (lambda t: tf.reduce_sum(tnp.fft.irfft(t, n=4, axis=0) ** 3),
              lambda z: (np.fft.irfft(z, n=4, axis=0) ** 3).sum()),
    "hfft": (lambda t: tf.reduce_sum(tnp.fft.hfft(t, n=5) ** 2),
             lambda z: (np.fft.hfft(z, n=5) ** 2).sum()),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_gradients_match_finite_differences(name):
    ft, fn = CASES[name]
    x = tf.Variable(A)
    with tf.GradientTape() as tape:
        y = ft(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), numeric_grad(fn, A), atol=1e-5)


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_real_transform_gradients_match_finite_differences(norm):
    a = RNG.standard_normal((4, 6))
    w = RNG.standard_normal((4, 4))

    def loss_np(x):
        return (np.abs(np.fft.rfftn(x, s=(4, 7), axes=(0, 1), norm=norm)) ** 2 * w).sum() + (
            np.fft.ihfft(x, norm=norm).imag ** 2).sum()

    v = tf.Variable(a)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.abs(tnp.fft.rfftn(v, s=(4, 7), axes=(0, 1), norm=norm)) ** 2 * w) + \
            tf.reduce_sum(tf.math.imag(tnp.fft.ihfft(v, norm=norm)) ** 2)
    eps = 1e-6
    want = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[idx] = eps
        want[idx] = (loss_np(a + e) - loss_np(a - e)) / (2 * eps)
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), want, rtol=1e-5, atol=1e-5)


def test_complex_grads_traced_match_eager():
    @tf.function
    def grad(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = tf.reduce_sum(tf.abs(tf.exp(z) * z))
        return tape.gradient(y, z)
    z = tf.constant(A)
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = tf.reduce_sum(tf.abs(tf.exp(z) * z))
    np.testing.assert_allclose(grad(z).numpy(), tape.gradient(y, z).numpy(), rtol=1e-12)


def test_pow_gradient_at_a_zero_base_is_finite():
    x = tf.constant([0j, 1 + 1j])
    y = tf.Variable([2 + 0j, 2 + 0j])
    with tf.GradientTape() as tape:
        z = tf.reduce_sum(tf.math.real(x ** y))
    g = tape.gradient(z, y).numpy()
    assert g[0] == 0 and np.isfinite(g).all()


def test_conversions_and_promotion():
    assert tf.constant(1 + 2j).dtype == tf.complex128              # TensorFlow's default
    assert (tf.constant([1.0, 2.0]) * 1j).dtype == tf.complex64    # weak scalar
    assert tf.complex(1.0, 2.0).dtype == tf.complex64
    assert tf.cast(tf.constant([1.5 - 2j]), tf.float32).numpy()[0] == 1.5   # real part
    assert tnp.result_type(tnp.float64, tnp.complex64) == tnp.complex128
    assert tnp.result_type(tnp.float32, 1j) == tnp.complex64
    assert tnp.finfo(tnp.complex64).dtype == tnp.float32
    with pytest.raises(tf.errors.InvalidArgumentError, match="complex values"):
        tf.constant([1 + 1j], dtype=tf.float32)                     # no silent coercion
    with pytest.raises(tf.errors.InvalidArgumentError, match="float32 or float64"):
        tf.complex(tf.constant([1]), tf.constant([2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="real floating"):
        tnp.fft.rfft(tnp.asarray([1 + 1j]))
