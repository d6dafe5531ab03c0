"""``tapeflow.numpy.fft``: the array API's Fourier transform extension.

Three tapeflow ops do the transforms (``FFT``, ``RFFT``, ``IRFFT`` over a tuple of
axes, NumPy's pocketfft on ``cpu``, cuFFT through CuPy on ``cuda``); the sizes ``n`` /
``s`` are crops and zero pads done with ordinary ops first, so every function here is
differentiable (TensorFlow's convention for complex gradients) and traceable. Real
floating inputs to the complex transforms are promoted to complex, as NumPy does.

>>> import tapeflow.numpy as tnp
>>> x = tnp.asarray([1.0, 2.0, 3.0, 4.0])
>>> print(tnp.fft.rfft(x))
tf.Tensor([10.+0.j -2.+2.j -2.+0.j], shape=(3,), dtype=complex64)
>>> print(tnp.fft.irfft(tnp.fft.rfft(x), n=4))
tf.Tensor([1. 2. 3. 4.], shape=(4,), dtype=float32)
"""

from __future__ import annotations

import numpy as _np

from .. import ops as _A
from ..ops import linalg as _L
from ..ops import math as _M
from .. import dtypes as _dt
from ..errors import InvalidArgumentError
from ._elementwise import _t
from ._arrays import asarray, roll

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_SWAP = _L.SWAP_NORM          # the other norm: "backward" <-> "forward", "ortho" stays


def _complex_input(x, what):
    x = _t(x)
    if x.dtype.is_complex:
        return x
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"fft.{what} needs a floating or complex input, got "
                                   f"{x.dtype.name}", op="FFT")
    return _M.cast(x, _dt.complex128 if x.dtype is _dt.float64 else _dt.complex64)


def _real_input(x, what):
    x = _t(x)
    if not x.dtype.is_floating:
        raise InvalidArgumentError(f"fft.{what} needs a real floating input, got "
                                   f"{x.dtype.name}", op="RFFT")
    return _M.cast(x, _dt.float32) if x.dtype is _dt.float16 else x


def _fit(x, axis, n):
    """``x`` cropped or zero-padded to length ``n`` along ``axis``."""
    size = int(x.shape[axis])
    if n < 1:
        raise InvalidArgumentError(f"fft: invalid number of points {n} along axis {axis}",
                                   op="FFT")
    if n < size:
        begin = [0] * x.ndim
        sizes = list(x.shape)
        sizes[axis] = n
        return _A.slice(x, begin, sizes)
    if n > size:
        pads = [[0, 0] for _ in range(x.ndim)]
        pads[axis][1] = n - size
        return _A.pad(x, pads)
    return x


def _axes_sizes(x, s, axes):
    if x.ndim == 0:
        raise InvalidArgumentError("fft needs an input of rank >= 1", op="FFT")
    if axes is None:
        axes = tuple(range(x.ndim - len(s), x.ndim)) if s is not None else tuple(range(x.ndim))
    bad = [a for a in axes if not -x.ndim <= int(a) < x.ndim]
    if bad:
        raise InvalidArgumentError(f"fft: axis {bad[0]} is out of range for an input of shape "
                                   f"{list(x.shape)}", op="FFT")
    axes = tuple(int(a) % x.ndim for a in axes)
    if s is None:
        s = [None] * len(axes)
    if len(s) != len(axes):
        raise InvalidArgumentError(f"fft: s {tuple(s)} and axes {axes} differ in length",
                                   op="FFT")
    return axes, [int(x.shape[a]) if n in (None, -1) else int(n) for a, n in zip(axes, s)]


def _c2c(x, s, axes, norm, inverse, what):
    x = _complex_input(x, what)
    axes, sizes = _axes_sizes(x, s, axes)
    for a, n in zip(axes, sizes):
        x = _fit(x, a, n)
    return _L.fft_transform(x, axes, norm, inverse=inverse)


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    """The one-dimensional discrete Fourier transform along ``axis``."""
    return _c2c(x, [n], (axis,), norm, False, "fft")


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    """The one-dimensional inverse discrete Fourier transform along ``axis``."""
    return _c2c(x, [n], (axis,), norm, True, "ifft")


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional discrete Fourier transform over ``axes`` (all by default)."""
    return _c2c(x, s, axes, norm, False, "fftn")


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional inverse discrete Fourier transform over ``axes``."""
    return _c2c(x, s, axes, norm, True, "ifftn")


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-dimensional transform of a real input: the last axis keeps ``n//2 + 1``
    frequencies (the others are their conjugates)."""
    x = _real_input(x, "rfftn")
    axes, sizes = _axes_sizes(x, s, axes)
    for a, n in zip(axes, sizes):
        x = _fit(x, a, n)
    return _L.fft_transform(x, axes, norm, kind="r2c")


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The one-dimensional transform of a real input (``n//2 + 1`` frequencies)."""
    return rfftn(x, s=[n], axes=(axis,), norm=norm)


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of :func:`rfftn`: a real output, ``s[-1]`` long on the last axis
    (default ``2 * (m - 1)`` for an input of ``m`` frequencies there)."""
    x = _complex_input(x, "irfftn")
    axes, sizes = _axes_sizes(x, s, axes)
    last = axes[-1]
    if s is None or s[-1] in (None, -1):
        sizes[-1] = 2 * (int(x.shape[last]) - 1)
    for a, n in zip(axes[:-1], sizes[:-1]):
        x = _fit(x, a, n)
    x = _fit(x, last, sizes[-1] // 2 + 1)
    return _L.fft_transform(x, axes, norm, kind="c2r", n=sizes[-1])


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of :func:`rfft`: a real output of length ``n``."""
    return irfftn(x, s=[n], axes=(axis,), norm=norm)


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The transform of a signal with Hermitian symmetry given by its first half: a real
    spectrum of length ``n`` (default ``2 * (m - 1)``)."""
    return irfft(_M.conj(_complex_input(x, "hfft")), n=n, axis=axis,
                 norm=_SWAP.get(norm, norm))


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of :func:`hfft` for a real input: ``n//2 + 1`` complex values."""
    return _M.conj(rfft(x, n=n, axis=axis, norm=_SWAP.get(norm, norm)))


def _freq(n, d, dtype, device, half):
    if int(n) < 1:
        raise InvalidArgumentError(f"fftfreq: n must be positive, got {n}")
    f = _np.fft.rfftfreq(int(n), d) if half else _np.fft.fftfreq(int(n), d)
    return asarray(f, dtype=dtype or _dt.float32, device=device)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of :func:`fft`'s output: ``[0, 1, ..., -2, -1] / (d n)``."""
    return _freq(n, d, dtype, device, False)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    """The sample frequencies of :func:`rfft`'s output: ``[0, 1, ..., n//2] / (d n)``."""
    return _freq(n, d, dtype, device, True)


def _shift(x, axes, sign):
    x = _t(x)
    axes = tuple(range(x.ndim)) if axes is None else tuple(
        [axes] if isinstance(axes, int) else axes)
    shifts = tuple(sign * (int(x.shape[a]) // 2) for a in axes)
    return roll(x, shifts, axis=axes)


def fftshift(x, /, *, axes=None):
    """The zero frequency moved to the centre (``roll`` by ``n // 2`` along ``axes``)."""
    return _shift(x, axes, 1)


def ifftshift(x, /, *, axes=None):
    """The inverse of :func:`fftshift`."""
    return _shift(x, axes, -1)
