"""Random kernels: counter-based Philox streams (see ``tapeflow.random`` for the formulas).

Each call draws raw 64-bit words from
``numpy.random.Generator(numpy.random.Philox(key=key, counter=counter << 64))`` and
maps them to values with explicit, documented formulas, so another backend that
implements Philox4x64-10 reproduces the same values from the same ``(key, counter)``.
Bits are generated on the host; the transforms are written against ``xp``.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..plugins import KernelSpec
from .math import scipy_special

FLOATS = ("float16", "float32", "float64")

_U64 = np.uint64
_LOW_BITS = np.uint64(0xFFFFFFFF)
# Phi(-2) and Phi(2) - Phi(-2) for the truncated normal's inverse CDF
_PHI_M2 = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
_PHI_SPAN = 1.0 - 2.0 * _PHI_M2




class _Local(threading.local):
    """One Philox per thread, re-keyed per call (constructing one costs ~15 us)."""

    def __init__(self):
        self.bg = np.random.Philox(key=0)
        self.gen = np.random.Generator(self.bg)
        self.state = self.bg.state


_local = _Local()


def host_raw64(n, key, counter):
    """``n`` raw 64-bit words of the stream of ``(key, counter)`` (host NumPy array):
    ``Generator(Philox(key=key, counter=counter << 64))`` outputs."""
    loc = _local
    st = loc.state
    st["state"]["counter"] = np.array([0, counter, 0, 0], dtype=np.uint64)
    st["state"]["key"] = np.array([key, 0], dtype=np.uint64)
    st["buffer_pos"] = 4
    st["has_uint32"] = 0
    loc.bg.state = st
    if n < 4096:
        return loc.bg.random_raw(n)          # cheaper call for small draws
    return loc.gen.integers(0, 2**64, size=n, dtype=np.uint64)   # same words, faster


def _size(shape):
    """The number of elements of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


class RandomKernels:
    """The random kernels of one array module ``xp`` (NumPy or CuPy's namespace) drawing
    raw 64-bit words from ``raw64(n, key, counter)`` (default :func:`host_raw64`; the CuPy
    backend passes a Philox that runs on the GPU, so the transforms stay one source for
    both), one method per kernel; :meth:`table` maps op names to them.

    >>> import numpy as np
    >>> from tapeflow import dtypes
    >>> u = RandomKernels(np).random_uniform((3,), dtypes.float32, 1, 0, 0.0, 1.0)
    >>> u.shape, u.dtype, bool(((0 <= u) & (u < 1)).all())
    ((3,), dtype('float32'), True)
    """

    def __init__(self, xp, raw64=None, special=None):
        self.xp = xp
        self.raw64 = host_raw64 if raw64 is None else raw64
        self.special = scipy_special if special is None else special

    def _words(self, n, key, counter):
        """``n`` raw 64-bit words of ``(key, counter)``'s stream, as an ``xp`` array."""
        raw = self.raw64(n, key, counter)
        return raw if self.xp is np else self.xp.asarray(raw)

    def unit_uniform(self, n, npdt, key, counter):
        """n values in [0, 1) of dtype ``npdt`` (float16/32/64)."""
        if npdt == np.float64:
            raw = self._words(n, key, counter)
            return (raw >> _U64(11)).astype(np.float64) * (2.0 ** -53)
        words = self._words((n + 1) // 2, key, counter).view(np.uint32)[:n]
        if npdt == np.float16:
            return ((words >> np.uint32(21)).astype(np.float32) * np.float32(2.0 ** -11)
                    ).astype(np.float16)
        if npdt.itemsize == 2:      # bfloat16: 8 bits, so that rounding never reaches 1
            return ((words >> np.uint32(24)).astype(np.float32) * np.float32(2.0 ** -8)
                    ).astype(npdt)
        return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)

    def random_uniform(self, shape, dtype, key, counter, minval, maxval, device=None):
        """Uniform values in ``[minval, maxval)`` of ``dtype`` from ``(key, counter)``."""
        npdt = dtype.np
        n = _size(shape)
        u = self.unit_uniform(n, npdt, key, counter)
        if minval != 0.0 or maxval != 1.0:
            t = npdt.type
            if npdt.itemsize == 2 and npdt != np.float16:   # bfloat16: scale in float32
                u = u.astype(np.float32) * np.float32(maxval - minval) + np.float32(minval)
                u = u.astype(npdt)
            else:
                u = u * t(maxval - minval) + t(minval)
            if npdt != np.float64:
                # rounding may reach maxval in low precision: keep the interval half-open
                u = self.xp.minimum(u, self.xp.nextafter(t(maxval), t(minval)))
        return u.astype(npdt, copy=False).reshape(shape)

    def random_uniform_int(self, shape, dtype, key, counter, minval, maxval, device=None):
        """Uniform integers in ``[minval, maxval)`` of ``dtype`` from ``(key, counter)``."""
        n = _size(shape)
        rng = maxval - minval
        if dtype.np == np.int32:
            words = self._words((n + 1) // 2, key, counter).view(np.uint32)[:n]
            vals = (words % np.uint32(rng)).astype(np.int64) + minval
        else:
            raw = self._words(n, key, counter)
            vals = (raw % _U64(rng)).astype(np.int64) + minval
        return vals.astype(dtype.np, copy=False).reshape(shape)

    def standard_normal(self, n, npdt, key, counter):
        """n standard normal values (Box-Muller), float64 or float32 by ``npdt``."""
        xp = self.xp
        pairs = (n + 1) // 2
        if npdt == np.float64:
            raw = self._words(2 * pairs, key, counter)
            bits = (raw >> _U64(11)).astype(np.float64)
            u1 = (bits[0::2] + 0.5) * (2.0 ** -53)
            u2 = bits[1::2] * (2.0 ** -53)
            t = np.float64
        else:
            words = self._words(pairs, key, counter).view(np.uint32)
            bits = (words >> np.uint32(8)).astype(np.float32)
            u1 = (bits[0::2] + np.float32(0.5)) * np.float32(2.0 ** -24)
            u2 = bits[1::2] * np.float32(2.0 ** -24)
            t = np.float32
        r = xp.sqrt(t(-2.0) * xp.log(u1))
        theta = t(2.0 * math.pi) * u2
        out = xp.empty(2 * pairs, dtype=t)
        out[0::2] = r * xp.cos(theta)
        out[1::2] = r * xp.sin(theta)
        return out[:n]

    def random_normal(self, shape, dtype, key, counter, mean, stddev, device=None):
        """Normal values of ``mean`` and ``stddev`` of ``dtype`` from ``(key, counter)``."""
        npdt = dtype.np
        z = self.standard_normal(_size(shape), npdt, key, counter)
        if mean != 0.0 or stddev != 1.0:
            t = z.dtype.type
            z = z * t(stddev) + t(mean)
        return z.astype(npdt, copy=False).reshape(shape)

    def truncated_normal(self, shape, dtype, key, counter, mean, stddev, device=None):
        """Normal values within two standard deviations (inverse CDF, SciPy's ndtri)."""
        xp = self.xp
        n = _size(shape)
        raw = self._words(n, key, counter)
        u = ((raw >> _U64(11)).astype(np.float64) + 0.5) * (2.0 ** -53)
        z = self.special("TruncatedNormal").ndtri(u * _PHI_SPAN + _PHI_M2)
        z = xp.clip(z, -2.0, 2.0)
        if mean != 0.0 or stddev != 1.0:
            z = z * stddev + mean
        return z.astype(dtype.np).reshape(shape)

    def random_shuffle(self, x, key, counter, device=None):
        """``x`` with its first axis permuted by ``(key, counter)``'s stream."""
        n = x.shape[0]
        if n <= 1:
            return x
        raw = self._words(n, key, counter)
        perm = self.xp.argsort(raw, kind="stable")
        return x[perm]

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        # bfloat16 (NumPy only: ml_dtypes) draws as above, in float32 then rounded
        floats = ("bfloat16",) + FLOATS if self.xp is np else FLOATS
        return {
            "RandomStandardNormal": KernelSpec(self.random_normal, dtypes=floats,
                                               needs_device=True),
            "RandomUniform": KernelSpec(self.random_uniform, dtypes=floats,
                                        needs_device=True),
            "RandomUniformInt": KernelSpec(self.random_uniform_int, dtypes=("int32", "int64"),
                                           needs_device=True),
            "TruncatedNormal": KernelSpec(self.truncated_normal, dtypes=floats,
                                          needs_device=True),
            "RandomShuffle": KernelSpec(self.random_shuffle, dtypes=None, needs_device=True),
        }


def build(ctx):
    """The random kernels for ``ctx.xp``; services: ``raw64(n, key, counter)`` draws the
    raw 64-bit words (default :func:`host_raw64`; the CuPy backend passes a Philox that
    runs on the GPU, so the transforms stay one source for both), ``special`` (as
    :class:`~tapeflow.kernels.math.MathKernels`'; TruncatedNormal's ndtri)."""
    return RandomKernels(ctx.xp, ctx.get("raw64"), ctx.get("special")).table()
