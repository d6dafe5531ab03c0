"""The Fourier transforms on OpenCL (:class:`FFTKernels`): ``FFT`` (complex, forward or
inverse), ``RFFT`` (real -> half spectrum) and ``IRFFT`` (half spectrum -> real), over
any axes.

Every transform is built from one 1-D complex transform over the last axis of a
contiguous ``[batch, n]`` array (:func:`fft_rows`), batched over the rows; other axes
are moved last (a strided copy) and back. The 1-D transform is, by length:

* a power of two: a radix-2 **Stockham** FFT, ``log2(n)`` passes of ``n/2`` butterflies
  per row, ping-ponging between two buffers (no bit-reversal pass: Stockham's
  autosort ordering writes each pass in place for the next one) -- all passes in one
  work-group per row, the row in local memory, where it fits (one launch), else one
  launch per pass;
* other lengths up to :data:`DIRECT_MAX`: the **direct DFT**, one work item per output
  (``n`` products each, exact table indices ``(j * k) mod n``);
* longer ones: **Bluestein's** chirp-z algorithm -- the DFT as a convolution with the
  chirp ``exp(-i pi k^2 / n)``, done with power-of-two FFTs of length ``M >= 2n - 1``.

Twiddle factors and chirps are computed on the host in float64 (exact indices: ``k^2
mod 2n``) and uploaded once per length and dtype, so complex64 transforms are accurate
to a few float32 ulps times ``log2(n)``, like pocketfft's. Unnormalised transforms are
scaled once at the end by the ``norm`` (``backward``, ``ortho``, ``forward``: NumPy's).
``IRFFT`` builds the Hermitian spectrum of length ``n`` (the input's first ``n//2 + 1``
entries, zero-padded when shorter) and takes the real part of its inverse transform,
which is what a c2r transform computes (the imaginary parts of the zero and Nyquist
entries drop out).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from tapeflow.plugins import KernelSpec

from . import cplx
from . import runtime as rt

#: longest non-power-of-two length transformed by the direct DFT (O(n^2)); above it,
#: Bluestein's algorithm (three power-of-two FFTs of length >= 2n - 1)
DIRECT_MAX = 64

#: rows whose two copies fit in half the device's local memory take one launch for every
#: pass (``stockham_local``); False forces one launch per pass (tests cover both paths)
LOCAL_ROWS = True

_I64 = np.int64


def _t(dtype):
    return cplx.PARTS[np.dtype(dtype)][0]


def _pre(dtype):
    t = _t(dtype)
    return f"#define T {t}\n#define T2 {t}2\n" + cplx.preamble(dtype)


def _mul(dtype):
    return "cmul" + cplx.PARTS[np.dtype(dtype)][1]


# --- kernel sources --------------------------------------------------------------------------

def _butterfly(dtype, src, dst, indent):
    """C lines of the radix-2 Stockham butterfly of element ``j`` (of ``h = n / 2``) in
    the pass merging sub-transforms of ``ns``: ``src[j]`` and ``src[j + h]`` (the latter
    times the twiddle, conjugated for ``inv``) into ``dst[d]`` and ``dst[d + ns]``."""
    lines = ["long k = j & (ns - 1);", "T2 w = tw[k * (h / ns)];", "if (inv) w.y = -w.y;",
             f"T2 u = {src}[j], v = {_mul(dtype)}({src}[j + h], w);",
             "long d = ((j - k) << 1) + k;", f"{dst}[d] = u + v;", f"{dst}[d + ns] = u - v;"]
    return "\n".join(" " * indent + line for line in lines)


def _stockham_src(dtype):
    """One radix-2 Stockham pass over rows of length ``n`` (``ns``: the size of the
    sub-transforms merged by this pass; ``tw``: ``exp(-2 pi i m / n)``, ``m < n/2``;
    ``sgn``: -1 forward, +1 inverse (conjugated twiddles))."""
    return _pre(dtype) + f"""
__kernel void stockham(__global T2 *y, __global const T2 *x, __global const T2 *tw,
                       long n, long ns, int inv) {{
    long j = get_global_id(0), b = get_global_id(1);
    long h = n >> 1;
    if (j >= h) return;
    __global const T2 *xr = x + b * n;
    __global T2 *yr = y + b * n;
{_butterfly(dtype, "xr", "yr", 4)}
}}
"""


def _stockham_local_src(dtype):
    """Every radix-2 Stockham pass of one row in one work-group, the row in local memory
    (``buf``: ``2 n`` elements), a barrier between passes: one launch instead of
    ``log2(n)`` for the rows that fit."""
    return _pre(dtype) + f"""
__kernel void stockham_local(__global T2 *y, __global const T2 *x, __global const T2 *tw,
                             long n, int inv, __local T2 *buf) {{
    long b = get_global_id(1);
    long lid = get_local_id(0), wg = get_local_size(0);
    long h = n >> 1;
    __local T2 *a = buf, *c = buf + n, *t;
    for (long i = lid; i < n; i += wg) a[i] = x[b * n + i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long ns = 1; ns < n; ns <<= 1) {{
        for (long j = lid; j < h; j += wg) {{
{_butterfly(dtype, "a", "c", 12)}
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
        t = a; a = c; c = t;
    }}
    for (long i = lid; i < n; i += wg) y[b * n + i] = a[i];
}}
"""


def _direct_src(dtype):
    """The direct DFT: ``y[b, k] = sum_j x[b, j] tw[(j k) mod n]``."""
    return _pre(dtype) + f"""
__kernel void dft(__global T2 *y, __global const T2 *x, __global const T2 *tw, long n,
                  int inv) {{
    long k = get_global_id(0), b = get_global_id(1);
    if (k >= n) return;
    __global const T2 *xr = x + b * n;
    T2 s = (T2)((T)0, (T)0);
    long m = 0;
    for (long j = 0; j < n; j++) {{
        T2 w = tw[m];
        if (inv) w.y = -w.y;
        s += {_mul(dtype)}(xr[j], w);
        m += k; if (m >= n) m -= n;
    }}
    y[b * n + k] = s;
}}
"""


def _chirp_in_src(dtype):
    """Bluestein's first step: ``a[b, m] = x[b, m] c[m]`` for ``m < n``, 0 up to ``M``."""
    return _pre(dtype) + f"""
__kernel void chirp_in(__global T2 *a, __global const T2 *x, __global const T2 *c, long n,
                       long M) {{
    long m = get_global_id(0), b = get_global_id(1);
    if (m >= M) return;
    a[b * M + m] = m < n ? {_mul(dtype)}(x[b * n + m], c[m]) : (T2)((T)0, (T)0);
}}
"""


def _chirp_mul_src(dtype):
    """Bluestein's convolution in the frequency domain: ``a[b, m] *= f[m]``."""
    return _pre(dtype) + f"""
__kernel void chirp_mul(__global T2 *a, __global const T2 *f, long M) {{
    long m = get_global_id(0), b = get_global_id(1);
    if (m >= M) return;
    a[b * M + m] = {_mul(dtype)}(a[b * M + m], f[m]);
}}
"""


def _chirp_out_src(dtype):
    """Bluestein's last step: ``y[b, k] = a[b, k] c[k] / M`` for ``k < n``."""
    return _pre(dtype) + f"""
__kernel void chirp_out(__global T2 *y, __global const T2 *a, __global const T2 *c, long n,
                        long M, T scale) {{
    long k = get_global_id(0), b = get_global_id(1);
    if (k >= n) return;
    y[b * n + k] = {_mul(dtype)}(a[b * M + k], c[k]) * scale;
}}
"""


def _hermitian_src(dtype):
    """The full spectrum of length ``n`` from the half spectrum rows ``x[b, :m]``."""
    return _pre(dtype) + """
__kernel void hermitian(__global T2 *y, __global const T2 *x, long n, long m) {
    long k = get_global_id(0), b = get_global_id(1);
    if (k >= n) return;
    T2 v = (T2)((T)0, (T)0);
    if (k <= n / 2) { if (k < m) v = x[b * m + k]; }
    else { long j = n - k; if (j < m) { v = x[b * m + j]; v.y = -v.y; } }
    y[b * n + k] = v;
}
"""


# --- host tables ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _host_twiddles(n, np_dtype):
    """``exp(-2 pi i m / n)`` for ``m < n`` (float64 on the host, then ``np_dtype``)."""
    m = np.arange(n, dtype=np.float64)
    return np.exp(-2j * np.pi * m / n).astype(np_dtype)


@functools.lru_cache(maxsize=256)
def _host_chirp(n, inverse, np_dtype):
    """``exp(-+ i pi k^2 / n)`` (exact ``k^2 mod 2n``) and the FFT of Bluestein's filter
    of length ``M`` (the conjugate chirp, wrapped around), both of ``np_dtype``."""
    M = 1 << (2 * n - 2).bit_length()
    k = np.arange(n, dtype=np.int64)
    ang = np.pi * ((k * k) % (2 * n)).astype(np.float64) / n
    c = np.exp((1j if inverse else -1j) * ang)
    filt = np.zeros(M, np.complex128)
    filt[:n] = np.conj(c)
    filt[M - n + 1:] = np.conj(c[1:])[::-1]
    return c.astype(np_dtype), np.fft.fft(filt).astype(np_dtype), M


def _table(dev, key, make):
    """A device copy of a host table, cached on the device handle."""
    cache = dev.__dict__.setdefault("fft_tables", {})
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 256:
            cache.clear()
        hit = cache[key] = rt.upload(dev, make())
    return hit


# --- the 1-D transform --------------------------------------------------------------------------

def _launch(dev, src, name, sd, gsize, *args):
    k = rt.kernel(dev, src, name, sd)
    rt.launch(dev, k, gsize, None, *args)


def _stockham(dev, x, inverse):
    """Unnormalised radix-2 FFT of the rows of the contiguous ``[B, n]`` array ``x``
    (``n`` a power of two >= 2): a new array."""
    B, n = x.shape
    dt = x.dtype
    tw = _table(dev, ("tw", n, dt), lambda: _host_twiddles(n, dt)[:n // 2].copy())
    if LOCAL_ROWS and 2 * n * dt.itemsize <= dev.local_mem // 2:
        k = rt.kernel(dev, _stockham_local_src(dt), "stockham_local",
                      [None, None, None, _I64, np.int32, None])
        # (the kernel's own limit can be below the device's, e.g. a GPU's registers)
        kmax = k.get_work_group_info(rt.cl().kernel_work_group_info.WORK_GROUP_SIZE,
                                     dev.cl_device)
        wg = min(n // 2, 256 if dev.is_gpu else 64, dev.max_wg, int(kmax))
        wg = 1 << (wg.bit_length() - 1)
        out = rt.empty(dev, x.shape, dt)
        rt.launch(dev, k, (wg, B), (wg, 1), out.base_data, x.base_data, tw.base_data, n,
                  int(inverse), rt.cl().LocalMemory(2 * n * dt.itemsize))
        return out
    src = _stockham_src(dt)
    a, b = x, rt.empty(dev, x.shape, dt)
    spare = None
    ns = 1
    while ns < n:
        _launch(dev, src, "stockham", [None, None, None, _I64, _I64, np.int32],
                (n // 2, B), b.base_data, a.base_data, tw.base_data, n, ns, int(inverse))
        if a is x:           # (never write the input: the second buffer is new)
            if spare is None:
                spare = rt.empty(dev, x.shape, dt)
            a, b = b, spare
        else:
            a, b = b, a
        ns *= 2
    return a


def fft_rows(x, inverse=False):
    """The unnormalised DFT (``inverse``: with ``exp(+2 pi i jk / n)``) of each row of the
    contiguous complex ``[B, n]`` device array ``x``: a new ``[B, n]`` array."""
    dev = rt.device_of(x)
    B, n = x.shape
    dt = x.dtype
    if B == 0 or n <= 1:
        return rt.elementwise("x0", dt, x, out_shape=x.shape)
    if n & (n - 1) == 0:
        return _stockham(dev, x, inverse)
    out = rt.empty(dev, x.shape, dt)
    if n <= DIRECT_MAX:
        tw = _table(dev, ("tw", n, dt), lambda: _host_twiddles(n, dt))
        _launch(dev, _direct_src(dt), "dft", [None, None, None, _I64, np.int32], (n, B),
                out.base_data, x.base_data, tw.base_data, n, int(inverse))
        return out
    c_host, f_host, M = _host_chirp(n, bool(inverse), dt)
    c = _table(dev, ("chirp", n, bool(inverse), dt), lambda: c_host)
    f = _table(dev, ("filter", n, bool(inverse), dt), lambda: f_host)
    a = rt.empty(dev, (B, M), dt)
    _launch(dev, _chirp_in_src(dt), "chirp_in", [None, None, None, _I64, _I64], (M, B),
            a.base_data, x.base_data, c.base_data, n, M)
    a = _stockham(dev, a, False)
    _launch(dev, _chirp_mul_src(dt), "chirp_mul", [None, None, _I64], (M, B),
            a.base_data, f.base_data, M)
    a = _stockham(dev, a, True)
    real = cplx.REAL_OF[np.dtype(dt)]
    _launch(dev, _chirp_out_src(dt), "chirp_out", [None, None, None, _I64, _I64, real],
            (n, B), out.base_data, a.base_data, c.base_data, n, M, 1.0 / M)
    return out


# --- axes, scaling and the three ops ------------------------------------------------

def _to_rows(x, axis):
    """``(rows, shape, perm)``: ``x`` with ``axis`` moved last, as a contiguous
    ``[B, n]`` array, the moved shape and the permutation (to undo with
    :func:`_from_rows`)."""
    perm = [i for i in range(x.ndim) if i != axis] + [axis]
    st, off = rt.layout(x)
    moved = rt.view(x, tuple(x.shape[p] for p in perm), tuple(st[p] for p in perm), off)
    moved = rt.contiguous(moved)
    if moved.offset:
        moved = rt.elementwise("x0", moved.dtype, moved, out_shape=moved.shape)
    n = x.shape[axis]
    B = math.prod(moved.shape[:-1])
    return rt.view(moved, (B, n), None, 0), tuple(moved.shape), perm


def _from_rows(rows, shape, perm):
    """The ``[B, n']`` result rows back in the input's axis order (a view)."""
    moved = rt.view(rows, shape)
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    st, off = rt.layout(moved)
    return rt.view(moved, tuple(shape[i] for i in inv), tuple(st[i] for i in inv), off)


def _c2c(x, axis, inverse):
    rows, shape, perm = _to_rows(x, axis)
    return _from_rows(fft_rows(rows, inverse), shape, perm)


def _scale(norm, inverse, n):
    """The factor ``norm`` applies to an unnormalised transform over ``n`` points."""
    if norm == "ortho":
        return 1.0 / math.sqrt(n) if n else 1.0
    if (norm == "backward") == bool(inverse):
        return 1.0 / n if n else 1.0
    return 1.0


def _scaled(x, s):
    """``x`` (complex or real view) times the real ``s``: a new contiguous array."""
    dev = rt.device_of(x)
    real = cplx.REAL_OF.get(np.dtype(x.dtype), np.dtype(x.dtype))
    if s == 1.0:
        return rt.elementwise("x0", x.dtype, x, out_shape=x.shape)
    return rt.elementwise("x0 * x1", x.dtype, x, rt.scalar(dev, s, real), out_shape=x.shape)


def _empty_like(x, shape, dtype):
    return rt.empty(rt.device_of(x), shape, dtype)


_NORMS = ("backward", "ortho", "forward")


def _axes(x, axes, norm):
    """Non-negative axes (the batching rule hands negative ones); the attributes checked
    as NumPy checks them on ``cpu:0`` (ValueErrors: the dispatcher's InvalidArgumentError
    names op and device), for callers that reach the op without ``tnp.fft``'s checks."""
    if not isinstance(norm, str) or norm not in _NORMS:
        raise ValueError(f"Invalid norm value {norm!r}; should be 'backward', 'ortho' or "
                         "'forward'")
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    try:
        axes = tuple(axes)
    except TypeError:
        raise ValueError(f"axes must be a sequence of ints, got {axes!r}") from None
    if not axes or not all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                           and -x.ndim <= a < x.ndim for a in axes):
        raise ValueError(f"axes {axes!r} out of range for an input of shape {list(x.shape)}")
    return tuple(int(a) % x.ndim for a in axes)


class FFTKernels:
    """The Fourier transforms on OpenCL (see the module doc); :meth:`table` maps op names
    to them."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def fft(self, x, axes, norm, inverse):
        """FFT: the complex transform over ``axes`` (``inverse``: with
        ``exp(+2 pi i jk / n)``), scaled by ``norm``."""
        axes = _axes(x, axes, norm)
        if x.size == 0:
            return _empty_like(x, x.shape, x.dtype)
        y = x
        for ax in axes:
            y = _c2c(y, ax, inverse)
        return _scaled(y, _scale(norm, inverse, math.prod(x.shape[a] for a in axes)))

    def rfft(self, x, axes, norm):
        """RFFT: the real input's transform over ``axes``, the last one halved to
        ``n // 2 + 1`` entries."""
        axes = _axes(x, axes, norm)
        c = cplx.COMPLEX_OF[np.dtype(x.dtype)]
        last = axes[-1]
        n = x.shape[last]
        shape = tuple(n // 2 + 1 if i == last else s for i, s in enumerate(x.shape))
        if math.prod(shape) == 0 or x.size == 0:
            return _empty_like(x, shape, c)
        xc = self.rt.elementwise(cplx.cast_expr(x.dtype, c), c, x, out_shape=x.shape)
        rows, mshape, perm = _to_rows(xc, last)
        half = self.rt.view(fft_rows(rows, False), (rows.shape[0], n // 2 + 1), (n, 1), 0)
        half = self.rt.contiguous(half)
        y = _from_rows(half, mshape[:-1] + (n // 2 + 1,), perm)
        for ax in axes[:-1]:
            y = _c2c(y, ax, False)
        return _scaled(y, _scale(norm, False, math.prod(x.shape[a] for a in axes)))

    def irfft(self, x, axes, norm, n):
        """IRFFT: the real inverse of the half spectrum ``x``, ``n`` points over the last
        axis."""
        axes = _axes(x, axes, norm)
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ValueError(f"Invalid number of FFT data points ({n!r}) specified.")
        n = int(n)
        real = cplx.REAL_OF[np.dtype(x.dtype)]
        last = axes[-1]
        shape = tuple(n if i == last else s for i, s in enumerate(x.shape))
        if math.prod(shape) == 0:
            return _empty_like(x, shape, real)
        y = x
        for ax in axes[:-1]:
            y = _c2c(y, ax, True)
        dev = self.rt.device_of(x)
        rows, mshape, perm = _to_rows(y, last)
        B, m = rows.shape
        full = self.rt.empty(dev, (B, n), x.dtype)
        if m == 0:
            zero = self.rt.scalar(dev, 0, x.dtype)
            full = self.rt.elementwise("x0", x.dtype, zero, out_shape=(B, n))
        else:
            _launch(dev, _hermitian_src(x.dtype), "hermitian", [None, None, _I64, _I64], (n, B),
                    full.base_data, rows.base_data, n, m)
        res = self.rt.elementwise("x0.x", real, fft_rows(full, True))
        out = _from_rows(res, mshape[:-1] + (n,), perm)
        return _scaled(out, _scale(norm, True, math.prod(shape[a] for a in axes)))

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {
            "FFT": KernelSpec(self.fft, dtypes=cplx.COMPLEX),
            "RFFT": KernelSpec(self.rfft, dtypes=("float32", "float64")),
            "IRFFT": KernelSpec(self.irfft, dtypes=cplx.COMPLEX),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return FFTKernels(ctx).table()
