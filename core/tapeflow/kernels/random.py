"""Random kernels: counter-based Philox streams (see ``tapeflow.random`` for the formulas).

Each call draws raw 64-bit words from
``numpy.random.Generator(numpy.random.Philox(key=key, counter=counter << 64))`` and
maps them to values with explicit, documented formulas, so another backend that
implements Philox4x64-10 reproduces the same values from the same ``(key, counter)``.
Bits are generated on the host; the transforms are written against ``xp``.

:class:`RandomKernels`' ``stateless_*`` methods are TensorFlow 2's stateless ops (``tf.random.stateless_*``,
``tf.random.Generator``): Philox4x32-10 (:func:`philox4x32`) in uint64 vector arithmetic
on ``xp`` (the CUDA backend's ``philox32`` service computes the words in a kernel),
TensorFlow's transforms, TensorFlow 2.21's numbers (docs/random.md).
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

    The ``stateless_*`` methods are TensorFlow 2's stateless random kernels
    (``StatelessRandom*V2``): Philox4x32-10 in uint64 vector arithmetic (or the backend's
    ``philox32`` service: the CUDA kernel), the transforms of TensorFlow's
    ``random_distributions.h`` written anew. Each takes the Philox state (int64 [3]) and
    fills ``shape`` in groups (a group: the values of one counter block), so a value
    depends on its index only, as in TensorFlow. A state of shape ``[..., 3]`` (a batch of
    states: ``tf.vectorized_map``) fills ``[...] + shape``.

    >>> import numpy as np
    >>> from tapeflow import dtypes
    >>> u = RandomKernels(np).random_uniform((3,), dtypes.float32, 1, 0, 0.0, 1.0)
    >>> u.shape, u.dtype, bool(((0 <= u) & (u < 1)).all())
    ((3,), dtype('float32'), True)
    >>> k = RandomKernels(np)
    >>> k.stateless_uniform_full_int(np.array([0, 0, 0]), shape=(2,), dtype=dtypes.uint32).dtype
    dtype('uint32')
    """

    def __init__(self, xp, raw64=None, special=None, philox32=None):
        self.xp = xp
        self.raw64 = host_raw64 if raw64 is None else raw64
        self.special = scipy_special if special is None else special
        self.philox32 = philox32

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

    # --- TensorFlow 2's stateless ops (StatelessRandom*V2): Philox4x32-10 -----------------

    def block_words(self, state, blocks):
        """:func:`philox_words` (or the backend's ``philox32`` service: the CUDA kernel;
        these rounds if it fails)."""
        if self.philox32 is not None:
            try:
                return self.philox32(state, blocks)
            except Exception as e:       # (NVRTC missing or broken: the same words here)
                failed = getattr(self.philox32, "kernel_failed", None)
                if isinstance(e, MemoryError) or failed is not None and not failed(e):
                    raise                # (out of memory ...: may pass, keep the kernel)
                self.philox32 = None
        return philox_words(self.xp, state, blocks)

    def words(self, state, nblocks):
        """The ``(..., nblocks, 4)`` words of the first ``nblocks`` counter blocks."""
        return self.block_words(state, self.xp.arange(nblocks, dtype=np.uint64))

    def _philox_fill(self, state, shape, per, fn):
        """``fn(words (..., nblocks, 4)) -> (..., nblocks, per)`` values, flattened to
        ``state.shape[:-1] + shape``."""
        n = _size(shape)
        lead = tuple(state.shape[:-1])
        w = self.words(state, (n + per - 1) // per)
        return fn(w).reshape(lead + (-1,))[..., :n].reshape(lead + tuple(shape))

    def stateless_uniform(self, state, shape, dtype, device=None):
        """StatelessRandomUniformV2: [0, 1) (float32: 23 random bits, float64: 52,
        float16: 10, bfloat16: 7)."""
        npdt = np.dtype(dtype.np)
        if npdt == np.float64:
            return self._philox_fill(state, shape, 2, lambda w: self.xp.stack(
                [_unit_double(w[..., 0], w[..., 1]), _unit_double(w[..., 2], w[..., 3])],
                axis=-1))
        return self._philox_fill(state, shape, 4, lambda w: _mantissa_unit(w, npdt))

    def stateless_normal(self, state, shape, dtype, device=None):
        """StatelessRandomNormalV2: Box-Muller on word pairs (float64: on word quads)."""
        xp = self.xp
        npdt = np.dtype(dtype.np)
        if npdt == np.float64:
            return self._philox_fill(state, shape, 2, lambda w: xp.stack(
                _box_muller64(xp, w[..., 0], w[..., 1], w[..., 2], w[..., 3]), axis=-1))
        return self._philox_fill(state, shape, 4, lambda w: _normal_groups32(xp, w, npdt))

    def stateless_truncated_normal(self, state, shape, dtype, device=None):
        """StatelessTruncatedNormalV2: TF's rejection sampling. Group ``g`` (4 values;
        float64: 2) reads the words from counter block ``g * 256`` (float64: ``g * 128``)
        on, Box-Muller pairs in order, keeping values with ``|z| < 2``."""
        xp = self.xp
        npdt = np.dtype(dtype.np)
        n = _size(shape)
        lead = tuple(state.shape[:-1])
        per = 2 if npdt == np.float64 else 4
        groups = (n + per - 1) // per
        base = xp.arange(groups, dtype=np.uint64) * np.uint64(TRUNCATED_SKIP[per])
        rows_n = _size(lead) * groups            # (state, group) pairs, flattened
        out = xp.zeros((rows_n, per), dtype=np.float64 if per == 2 else np.float32)
        filled = xp.zeros(rows_n, dtype=np.int64)
        b = 0
        while rows_n and bool((filled < per).any()):
            w = self.block_words(state, base + np.uint64(b)).reshape(rows_n, 4)
            if per == 2:
                cand = [_box_muller64(xp, w[:, 0], w[:, 1], w[:, 2], w[:, 3])]
            else:
                cand = [_box_muller32(xp, w[:, 0], w[:, 1]), _box_muller32(xp, w[:, 2], w[:, 3])]
            for pair in cand:
                for z in pair:           # sin's value, then cos's
                    take = (xp.abs(z) < 2.0) & (filled < per)
                    rows = xp.nonzero(take)[0]
                    out[rows, filled[rows]] = z[rows]
                    filled = filled + take
            b += 1
        out = out.reshape(lead + (groups * per,))[..., :n]
        return out.astype(npdt).reshape(lead + tuple(shape))

    def stateless_uniform_int(self, state, shape, dtype, minval, maxval, device=None):
        """StatelessRandomUniformIntV2: ``minval + word % (maxval - minval)`` (int64: the
        word pair ``lo | hi << 32``), wrapping as TF's integer arithmetic does."""
        npdt = np.dtype(dtype.np)
        rng = np.uint64((int(maxval) - int(minval)) & ((1 << 64) - 1))
        lo = np.uint64(int(minval) & ((1 << 64) - 1))
        if npdt.itemsize == 4:
            return self._philox_fill(state, shape, 4, lambda w: (
                ((w % rng) + lo) & _M32).astype(np.uint32).view(npdt))
        return self._philox_fill(state, shape, 2, lambda w: (
            ((w[..., 0::2] | (w[..., 1::2] << _S32)) % rng) + lo).view(npdt))

    def stateless_uniform_full_int(self, state, shape, dtype, device=None):
        """StatelessRandomUniformFullIntV2: the words (64-bit: ``lo | hi << 32``)."""
        npdt = np.dtype(dtype.np)
        if npdt.itemsize == 4:
            return self._philox_fill(state, shape, 4, lambda w: w.astype(np.uint32).view(npdt))
        return self._philox_fill(state, shape, 2, lambda w: (
            w[..., 0::2] | (w[..., 1::2] << _S32)).view(npdt))

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

            "StatelessRandomUniformV2": KernelSpec(self.stateless_uniform, dtypes=floats,
                                                   needs_device=True),
            "StatelessRandomNormalV2": KernelSpec(self.stateless_normal, dtypes=floats,
                                                  needs_device=True),
            "StatelessTruncatedNormalV2": KernelSpec(self.stateless_truncated_normal,
                                                     dtypes=floats, needs_device=True),
            "StatelessRandomUniformIntV2": KernelSpec(self.stateless_uniform_int,
                                                      dtypes=("int32", "int64"),
                                                      needs_device=True),
            "StatelessRandomUniformFullIntV2": KernelSpec(
                self.stateless_uniform_full_int, dtypes=("int32", "int64", "uint32", "uint64"),
                needs_device=True),
        }


# --- TensorFlow 2's Philox4x32-10 (the stateless ops and tf.random.Generator) ---------------
#
# The state input is TensorFlow's Philox state, int64 [3]: a 128-bit counter
# ``state[0] + 2**64 * state[1]`` and a 64-bit key ``state[2]`` (all read as unsigned).
# Block ``b`` of a call is ``philox4x32_10(counter + b, key)``: four uint32 words. The
# transforms are TensorFlow's (``tapeflow.random``'s docstring gives the formulas).

_M32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))
#: counter blocks reserved per group of a rejection-sampled draw (TF's 256 samples per
#: output, 4 words a block)
TRUNCATED_SKIP = {4: 256, 2: 128}


def philox4x32(xp, c_lo, c_hi, key):
    """Philox4x32-10 of the 128-bit counters ``c_lo + 2**64 c_hi`` (uint64 arrays of one
    shape) under the 64-bit ``key`` (a uint64 array of shape ()): the four output words
    (uint64 arrays holding 32-bit values), in TensorFlow's order."""
    c0, c1 = c_lo & _M32, c_lo >> _S32
    c2, c3 = c_hi & _M32, c_hi >> _S32
    k0, k1 = key & _M32, key >> _S32
    m0, m1 = _PHILOX_M
    for r in range(10):
        if r:
            k0 = (k0 + _PHILOX_W[0]) & _M32
            k1 = (k1 + _PHILOX_W[1]) & _M32
        p0 = m0 * c0
        p1 = m1 * c2
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _M32, (p0 >> _S32) ^ c3 ^ k1, p0 & _M32
    return c0, c1, c2, c3


#: at most this many blocks: Python's integers (a NumPy call per step costs more)
_SMALL_BLOCKS = 8


def _philox_words_small(state, blocks):
    """:func:`philox_words` for a few blocks, with Python integers (the same rounds)."""
    st = np.asarray(state).astype(np.int64).view(np.uint64)
    out = []
    m32, m64 = 0xFFFFFFFF, (1 << 64) - 1
    for row in st.reshape(-1, 3).tolist():
        key = row[2]
        for b in blocks.tolist():
            lo = (row[0] + b) & m64
            hi = (row[1] + (lo < row[0])) & m64
            c0, c1, c2, c3 = lo & m32, lo >> 32, hi & m32, hi >> 32
            k0, k1 = key & m32, key >> 32
            for r in range(10):
                if r:
                    k0, k1 = (k0 + 0x9E3779B9) & m32, (k1 + 0xBB67AE85) & m32
                p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
                c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & m32, (p0 >> 32) ^ c3 ^ k1, p0 & m32
            out.append((c0, c1, c2, c3))
    return np.array(out, dtype=np.uint64).reshape(tuple(state.shape[:-1]) + (len(blocks), 4))


def philox_words(xp, state, blocks):
    """The words of counter blocks ``blocks`` (uint64 offsets from the counter, of shape
    ``(nb,)``) of each state of ``state`` (int64 ``[..., 3]``): a uint64 array
    ``state.shape[:-1] + (nb, 4)``."""
    if xp is np and state.size // 3 * len(blocks) <= _SMALL_BLOCKS:
        return _philox_words_small(state, blocks)
    st = xp.asarray(state).astype(np.int64).view(np.uint64)
    lo0 = st[..., 0:1]
    lo = lo0 + blocks
    hi = st[..., 1:2] + (lo < lo0).astype(np.uint64)     # the carry of the 128-bit add
    return xp.stack(philox4x32(xp, lo, hi, st[..., 2:3]), axis=-1)


def _mantissa_unit(w, npdt):
    """TF's uniform in [0, 1) from one 32-bit word: its low mantissa bits over 2**-bits
    (float32: 23, float16: 10, bfloat16: 7)."""
    if npdt == np.float32:
        return (w & np.uint64(0x7FFFFF)).astype(np.float32) * np.float32(2.0 ** -23)
    if npdt == np.float16:
        return ((w & np.uint64(0x3FF)).astype(np.float32) * np.float32(2.0 ** -10)
                ).astype(np.float16)
    return ((w & np.uint64(0x7F)).astype(np.float32) * np.float32(2.0 ** -7)).astype(npdt)


def _unit_double(hi, lo):
    """TF's uniform float64 in [0, 1) from two words: 20 bits of ``hi``, 32 of ``lo``."""
    man = ((hi & np.uint64(0xFFFFF)) << _S32) | lo
    return man.astype(np.float64) * (2.0 ** -52)


def _box_muller32(xp, x0, x1):
    """TF's BoxMullerFloat on word arrays ``x0``, ``x1``: ``(sin, cos)`` outputs, each
    step rounded to float32 as TF's float code does (log/sin/cos evaluated in float64
    and rounded: the correctly rounded float32 value)."""
    f32 = np.float32
    u1 = xp.maximum(_mantissa_unit(x0, np.float32), f32(1.0e-7))
    v1 = (_mantissa_unit(x1, np.float32).astype(np.float64) * (2.0 * math.pi)).astype(f32)
    lg = xp.log(u1.astype(np.float64)).astype(f32)
    u2 = xp.sqrt((f32(-2.0) * lg).astype(np.float64)).astype(f32)
    v = v1.astype(np.float64)
    return xp.sin(v).astype(f32) * u2, xp.cos(v).astype(f32) * u2


def _box_muller64(xp, x0, x1, x2, x3):
    """TF's BoxMullerDouble: ``(sin, cos)`` outputs from four words."""
    u1 = xp.maximum(_unit_double(x0, x1), 1.0e-7)
    v1 = (2.0 * math.pi) * _unit_double(x2, x3)
    u2 = xp.sqrt(-2.0 * xp.log(u1))
    return xp.sin(v1) * u2, xp.cos(v1) * u2


def _normal_groups32(xp, w, npdt):
    """A block's 4 normals (float32 Box-Muller on word pairs 0-1, 2-3: sin's, then
    cos's value of each), in ``npdt``."""
    s, c = _box_muller32(xp, w[..., 0::2], w[..., 1::2])
    return _interleave(xp, s, c).astype(npdt)


def _interleave(xp, a, b):
    """``[a0, b0, a1, b1, ...]`` along the last axis."""
    return xp.stack([a, b], axis=-1).reshape(a.shape[:-1] + (2 * a.shape[-1],))


def build(ctx):
    """The random kernels for ``ctx.xp``; services: ``raw64(n, key, counter)`` draws the
    raw 64-bit words (default :func:`host_raw64`; the CuPy backend passes a Philox that
    runs on the GPU, so the transforms stay one source for both), ``special`` (as
    :class:`~tapeflow.kernels.math.MathKernels`'; TruncatedNormal's ndtri), ``philox32``
    (the Philox4x32-10 words of the stateless ops: :meth:`RandomKernels.block_words`)."""
    return RandomKernels(ctx.xp, ctx.get("raw64"), ctx.get("special"),
                         ctx.get("philox32")).table()
