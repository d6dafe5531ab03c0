"""Conformance specs for complex numbers and the Fourier transforms.

Complex dtypes are tested here, with samples that have imaginary parts (the generic
specs draw real samples, which would say little about complex kernels). References
are NumPy's at the input's precision. Gradients of complex functions follow
TensorFlow's convention and are checked against finite differences in
``tests/test_complex.py`` (``check_grads`` perturbs real inputs only), so these specs
have ``grad_order=0``.
"""

from __future__ import annotations

import operator

import numpy as np

import tapeflow as tf
import tapeflow.numpy as tnp
from tapeflow.testing.opinfo import OpSpec, Sample

_CPLX = ("complex64", "complex128")
_REAL = ("float32", "float64")
_TOL = {"complex64": (2e-5, 2e-5), "complex128": (1e-12, 1e-12), "float32": (2e-5, 2e-5),
        "float64": (1e-12, 1e-12)}


def _z(dtype, rng, shape, lo=-2.0, hi=2.0):
    return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype.np)


def _unary(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)),), name="matrix"),
            Sample((np.array([0, 1j, -1, np.inf, np.nan + 1j], dtype.np),), name="special"),
            Sample((_z(dtype, rng, (0, 2)),), name="empty")]


def _positive(dtype, rng):           # away from the branch cut of log/sqrt
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4), 0.1, 2.0),), name="right_half")]


def _binary(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)), _z(dtype, rng, (3, 4))), name="same"),
            Sample((_z(dtype, rng, (2, 3, 1)), _z(dtype, rng, (4,))), name="broadcast")]


def _matmul(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 4)), _z(dtype, rng, (4, 2))), name="matrix"),
            Sample((_z(dtype, rng, (2, 3, 4)), _z(dtype, rng, (2, 4, 5))), name="batch")]


def _parts(dtype, rng):
    if dtype.is_complex:
        return []
    return [Sample((rng.standard_normal((3, 4)).astype(dtype.np),
                    rng.standard_normal((3, 4)).astype(dtype.np)), name="same"),
            Sample((rng.standard_normal((2, 1)).astype(dtype.np),
                    rng.standard_normal((3,)).astype(dtype.np)), name="broadcast")]


def _real_signal(dtype, rng):
    if dtype.is_complex:
        return []
    return [Sample((rng.standard_normal((3, 8)).astype(dtype.np),), name="even"),
            Sample((rng.standard_normal((2, 7)).astype(dtype.np),), {"n": 9}, name="padded")]


def _spectrum(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (3, 5)),), name="matrix"),
            Sample((_z(dtype, rng, (2, 5)),), {"n": 9}, name="odd_n"),
            Sample((_z(dtype, rng, (4, 6)),), {"axis": 0, "norm": "ortho"}, name="axis0")]


def _spectra(dtype, rng):
    if not dtype.is_complex:
        return []
    return [Sample((_z(dtype, rng, (4, 6)),), {"axes": (0, 1)}, name="2d"),
            Sample((_z(dtype, rng, (2, 3, 4)),), {"s": (5, 2), "axes": (1, 2), "norm": "forward"},
                   name="cropped_padded")]


def _np_fft(name, xp_name=None):
    f = getattr(np.fft, xp_name or name)

    def ref(x, **kw):
        out = f(x, **kw)
        single = x.dtype in (np.float32, np.complex64)
        if out.dtype.kind == "c":
            return out.astype(np.complex64 if single else np.complex128)
        return out.astype(np.float32 if single else np.float64)
    return ref


def _spec(name, fn, ref, samples, op, dtypes=_CPLX, **kw):
    return OpSpec(name, fn, ref, samples, op=op, dtypes=dtypes, grad_order=0, tol=_TOL, **kw)


SPECS = [
    _spec("complex", tf.complex, lambda re, im: re + 1j * im, _parts, "Complex", _REAL),
    _spec("math.real", tf.math.real, np.real, _unary, "Real"),
    _spec("math.imag", tf.math.imag, np.imag, _unary, "Imag"),
    _spec("math.conj", tf.math.conj, np.conj, _unary, "Conj"),
    _spec("math.angle", tf.math.angle, np.angle, _unary, "Imag"),
    _spec("complex.add", tf.add, np.add, _binary, "Add"),
    _spec("complex.subtract", tf.subtract, np.subtract, _binary, "Sub"),
    _spec("complex.multiply", operator.mul, np.multiply, _binary, "Mul"),
    _spec("complex.divide", tf.divide, np.divide, _binary, "RealDiv"),
    _spec("complex.negative", tf.negative, np.negative, _unary, "Neg"),
    _spec("complex.abs", tf.abs, np.abs, _unary, "Abs"),
    _spec("complex.sign", tf.sign, np.sign, _unary, "Sign"),
    _spec("complex.square", tf.square, np.square, _unary, "Square"),
    _spec("complex.exp", tf.exp, np.exp, _positive, "Exp"),
    _spec("complex.log", tf.math.log, np.log, _positive, "Log"),
    _spec("complex.sqrt", tf.sqrt, np.sqrt, _positive, "Sqrt"),
    _spec("complex.sin", tf.sin, np.sin, _positive, "Sin"),
    _spec("complex.tanh", tf.tanh, np.tanh, _positive, "Tanh"),
    _spec("complex.is_nan", tnp.isnan, np.isnan, _unary, "IsNan"),
    _spec("complex.matmul", tf.matmul, np.matmul, _matmul, "MatMul"),
    _spec("complex.reduce_sum", lambda x: tf.reduce_sum(x, axis=1), lambda x: x.sum(axis=1),
          _positive, "Sum"),
    _spec("complex.reduce_prod", tf.reduce_prod, np.prod, _positive, "Prod"),
    _spec("complex.reduce_mean", lambda x: tf.reduce_mean(x, axis=0), lambda x: x.mean(axis=0),
          _unary, "Mean"),
    _spec("fft.fft", tnp.fft.fft, _np_fft("fft"), _spectrum, "FFT"),
    _spec("fft.ifft", tnp.fft.ifft, _np_fft("ifft"), _spectrum, "FFT"),
    _spec("fft.fftn", tnp.fft.fftn, _np_fft("fftn"), _spectra, "FFT"),
    _spec("fft.irfft", tnp.fft.irfft, _np_fft("irfft"), _spectrum, "IRFFT"),
    _spec("fft.hfft", tnp.fft.hfft, _np_fft("hfft"), _spectrum, "IRFFT"),
    _spec("fft.rfft", tnp.fft.rfft, _np_fft("rfft"), _real_signal, "RFFT", _REAL),
    _spec("fft.ihfft", tnp.fft.ihfft, _np_fft("ihfft"), _real_signal, "RFFT", _REAL),
]
