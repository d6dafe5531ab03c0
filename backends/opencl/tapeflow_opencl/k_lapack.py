"""Matrix factorisations on OpenCL (:class:`LapackKernels`): ``Cholesky``,
``SelfAdjointEigV2`` (eigh), ``Svd``, ``SvdValues`` and ``Qr``.

One work-item per matrix of the batch, working in global memory (no size limit from
private or local memory); exact algorithms chosen for accuracy, not for speed on big
matrices — the sizes the array API's users hand them (scikit-learn's PCA, Ridge and
LDA on tall data matrices with few columns) are small in the factorised dimension:

* Cholesky: the row-by-row (Cholesky–Banachiewicz) algorithm on the lower triangle
  (LAPACK's ``uplo='L'``); a non-positive pivot marks the matrix, and the host raises
  the CPU kernel's InvalidArgumentError after one small flag download.
* eigh: the cyclic Jacobi eigenvalue algorithm on the symmetric matrix the lower
  triangle defines; rotations until a sweep finds every off-diagonal element below
  ``eps * sqrt(|a_pp| |a_qq|)``; eigenvalues ascending, vectors in the columns.
* SVD: one-sided (Hestenes) Jacobi on the tall orientation (``A`` or ``A^T``):
  column pairs are rotated until every pair is orthogonal to ``eps`` relative to their
  norms (on the matrix divided by its largest magnitude, so that neither huge nor tiny
  entries overflow or underflow), then sorted
  descending. The columns a full or rank-deficient ``U`` still needs are completed by
  Gram–Schmidt (twice) against the standard basis vectors.
* QR: Householder reflections as LAPACK's ``geqrf``/``orgqr`` make them
  (``beta = -sign(alpha) * norm``, no reflection where the column below the diagonal
  is zero; on the scaled matrix, as the SVD), so ``R``'s signs match NumPy's.

Singular vectors and eigenvectors are unique only up to sign (and within repeated
values): the conformance suite compares what is unique (values, reconstructions).
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .k_scan import _input
from .runtime import FLOATS

_I64, _I32 = np.int64, np.int32

_CHOLESKY = """
__kernel void cholesky(__global {T} *L, __global const {T} *A, __global int *bad,
                       const long n) {{
    const long b = get_global_id(0);
    __global const {T} *a = A + b * n * n;
    __global {T} *l = L + b * n * n;
    int fail = 0;
    for (long j = 0; j < n; ++j) {{
        for (long i = 0; i < j; ++i) l[i * n + j] = 0;
        {T} s = a[j * n + j];
        for (long k = 0; k < j; ++k) s -= l[j * n + k] * l[j * n + k];
        if (s <= 0) {{ fail = 1; s = NAN; }}      // (NaN input: NaN out, as LAPACK's)
        const {T} d = sqrt(s);
        l[j * n + j] = d;
        for (long i = j + 1; i < n; ++i) {{
            {T} t = a[i * n + j];
            for (long k = 0; k < j; ++k) t -= l[i * n + k] * l[j * n + k];
            l[i * n + j] = t / d;
        }}
    }}
    bad[b] = fail;
}}
"""

# a Jacobi rotation's (c, s) zeroing the pair with "diagonal" app, aqq and coupling apq
_ROTATION = """
inline void rotation(const {T} app, const {T} aqq, const {T} apq, {T} *c, {T} *s) {{
    const {T} zeta = (aqq - app) / (2 * apq);
    {T} t = 1 / (fabs(zeta) + hypot(({T})1, zeta));
    if (zeta < 0) t = -t;
    *c = 1 / sqrt(1 + t * t);
    *s = t * *c;
}}
"""

_EIGH = _ROTATION + """
__kernel void eigh(__global {T} *W, __global {T} *V, __global {T} *S, __global const {T} *A,
                   const long n, const {T} eps, const int max_sweeps) {{
    const long b = get_global_id(0);
    __global const {T} *a = A + b * n * n;
    __global {T} *w = S + b * n * n, *v = V + b * n * n, *out = W + b * n;
    for (long i = 0; i < n; ++i)
        for (long j = 0; j < n; ++j) {{
            w[i * n + j] = i >= j ? a[i * n + j] : a[j * n + i];     // the lower triangle
            v[i * n + j] = i == j;
        }}
    for (int sweep = 0; sweep < max_sweeps; ++sweep) {{
        int rotated = 0;
        for (long p = 0; p < n; ++p)
            for (long q = p + 1; q < n; ++q) {{
                const {T} apq = w[p * n + q], app = w[p * n + p], aqq = w[q * n + q];
                if (apq == 0 || fabs(apq) <= eps * sqrt(fabs(app)) * sqrt(fabs(aqq)))
                    continue;
                rotated = 1;
                {T} c, s;
                rotation(app, aqq, apq, &c, &s);
                for (long k = 0; k < n; ++k) {{                 // W J
                    const {T} x = w[k * n + p], y = w[k * n + q];
                    w[k * n + p] = c * x - s * y;
                    w[k * n + q] = s * x + c * y;
                }}
                for (long k = 0; k < n; ++k) {{                 // J^T (W J)
                    const {T} x = w[p * n + k], y = w[q * n + k];
                    w[p * n + k] = c * x - s * y;
                    w[q * n + k] = s * x + c * y;
                }}
                w[p * n + q] = 0;
                w[q * n + p] = 0;
                for (long k = 0; k < n; ++k) {{                 // V J
                    const {T} x = v[k * n + p], y = v[k * n + q];
                    v[k * n + p] = c * x - s * y;
                    v[k * n + q] = s * x + c * y;
                }}
            }}
        if (!rotated) break;
    }}
    for (long i = 0; i < n; ++i) out[i] = w[i * n + i];
    for (long i = 0; i < n; ++i) {{                             // ascending, vectors along
        long best = i;
        for (long j = i + 1; j < n; ++j) if (out[j] < out[best]) best = j;
        if (best != i) {{
            const {T} t = out[i]; out[i] = out[best]; out[best] = t;
            for (long k = 0; k < n; ++k) {{
                const {T} x = v[k * n + i]; v[k * n + i] = v[k * n + best]; v[k * n + best] = x;
            }}
        }}
    }}
}}
"""

# U is m x ku (ku = n, or m for full matrices) and starts as the tall matrix itself
_SVD = _ROTATION + """
#define U(i, j) u[(i) * ku + (j)]
inline {T} coldot(__global const {T} *u, const long m, const long ku, const long p,
                  const long q) {{
    {T} acc = 0;
    for (long k = 0; k < m; ++k) acc += U(k, p) * U(k, q);
    return acc;
}}
// column j := the standard basis vector e_i minus its projection on columns < j (twice)
inline {T} residual(__global {T} *u, const long m, const long ku, const long j, const long i) {{
    for (long k = 0; k < m; ++k) U(k, j) = k == i;
    for (int pass = 0; pass < 2; ++pass)
        for (long c = 0; c < j; ++c) {{
            const {T} d = coldot(u, m, ku, c, j);
            for (long k = 0; k < m; ++k) U(k, j) -= d * U(k, c);
        }}
    return coldot(u, m, ku, j, j);
}}
__kernel void svd(__global {T} *Uo, __global {T} *So, __global {T} *Vo, __global const {T} *A,
                  const long m, const long n, const long ku, const long rs, const long cs,
                  const {T} eps, const int max_sweeps, const int want_uv) {{
    const long b = get_global_id(0);
    __global const {T} *a = A + b * m * n;
    __global {T} *u = Uo + b * m * ku, *s = So + b * n, *v = Vo + (want_uv ? b * n * n : 0);
    {T} scale = 0;                     // work on A / max|A|: no overflow or underflow
    for (long i = 0; i < m; ++i)
        for (long j = 0; j < n; ++j) scale = fmax(scale, fabs(a[i * rs + j * cs]));
    if (!(scale > 0) || isinf(scale)) scale = 1;
    for (long i = 0; i < m; ++i)
        for (long j = 0; j < n; ++j) U(i, j) = a[i * rs + j * cs] / scale;
    if (want_uv)
        for (long i = 0; i < n; ++i)
            for (long j = 0; j < n; ++j) v[i * n + j] = i == j;
    for (int sweep = 0; sweep < max_sweeps; ++sweep) {{
        int rotated = 0;
        for (long p = 0; p < n; ++p)
            for (long q = p + 1; q < n; ++q) {{
                const {T} alpha = coldot(u, m, ku, p, p), beta = coldot(u, m, ku, q, q);
                const {T} gamma = coldot(u, m, ku, p, q);
                if (gamma == 0 || fabs(gamma) <= eps * sqrt(alpha) * sqrt(beta)) continue;
                rotated = 1;
                {T} c, sn;
                rotation(alpha, beta, gamma, &c, &sn);
                for (long k = 0; k < m; ++k) {{
                    const {T} x = U(k, p), y = U(k, q);
                    U(k, p) = c * x - sn * y;
                    U(k, q) = sn * x + c * y;
                }}
                if (want_uv)
                    for (long k = 0; k < n; ++k) {{
                        const {T} x = v[k * n + p], y = v[k * n + q];
                        v[k * n + p] = c * x - sn * y;
                        v[k * n + q] = sn * x + c * y;
                    }}
            }}
        if (!rotated) break;
    }}
    for (long j = 0; j < n; ++j) s[j] = sqrt(coldot(u, m, ku, j, j));
    for (long i = 0; i < n; ++i) {{                             // descending
        long best = i;
        for (long j = i + 1; j < n; ++j) if (s[j] > s[best]) best = j;
        if (best != i) {{
            const {T} t = s[i]; s[i] = s[best]; s[best] = t;
            for (long k = 0; k < m; ++k) {{
                const {T} x = U(k, i); U(k, i) = U(k, best); U(k, best) = x;
            }}
            if (want_uv)
                for (long k = 0; k < n; ++k) {{
                    const {T} x = v[k * n + i]; v[k * n + i] = v[k * n + best]; v[k * n + best] = x;
                }}
        }}
    }}
    if (!want_uv) {{
        for (long j = 0; j < n; ++j) s[j] *= scale;
        return;
    }}
    long filled = 0;                                    // columns with a direction of their own
    while (filled < n && s[filled] > 0) {{
        const {T} r = 1 / s[filled];
        for (long k = 0; k < m; ++k) U(k, filled) *= r;
        ++filled;
    }}
    long next = 0;                                      // the next basis vector to try
    for (long j = filled; j < ku; ++j) {{
        int done = 0;
        while (next < m && !done) done = residual(u, m, ku, j, next++) > ({T})0.5;
        if (!done) {{                                   // none was long enough: the longest
            long best = 0; {T} most = -1;
            for (long i = 0; i < m; ++i) {{
                const {T} r = residual(u, m, ku, j, i);
                if (r > most) {{ most = r; best = i; }}
            }}
            residual(u, m, ku, j, best);
        }}
        const {T} r = 1 / sqrt(coldot(u, m, ku, j, j));
        for (long k = 0; k < m; ++k) U(k, j) *= r;
    }}
    for (long j = 0; j < n; ++j) s[j] *= scale;
}}
#undef U
"""

_QR = """
__kernel void qr(__global {T} *Qo, __global {T} *Ro, __global {T} *Wo, __global {T} *To,
                 __global const {T} *A, const long m, const long n, const long kq,
                 const long kr) {{
    const long b = get_global_id(0), k = min(m, n);
    __global const {T} *a = A + b * m * n;
    __global {T} *w = Wo + b * m * n, *q = Qo + b * m * kq, *r = Ro + b * kr * n,
                 *tau = To + b * k;
    {T} scale = 0;                     // work on A / max|A| (R is scaled back): no overflow
    for (long i = 0; i < m * n; ++i) scale = fmax(scale, fabs(a[i]));
    if (!(scale > 0) || isinf(scale)) scale = 1;
    for (long i = 0; i < m * n; ++i) w[i] = a[i] / scale;
    for (long j = 0; j < k; ++j) {{                     // geqrf: H_j zeroes column j below
        const {T} alpha = w[j * n + j];
        {T} xn2 = 0;
        for (long i = j + 1; i < m; ++i) xn2 += w[i * n + j] * w[i * n + j];
        if (xn2 == 0) {{ tau[j] = 0; continue; }}
        const {T} beta = -copysign(hypot(alpha, sqrt(xn2)), alpha);
        tau[j] = (beta - alpha) / beta;
        const {T} scale = 1 / (alpha - beta);
        for (long i = j + 1; i < m; ++i) w[i * n + j] *= scale;    // v (v_j = 1 implied)
        w[j * n + j] = beta;
        for (long c = j + 1; c < n; ++c) {{
            {T} d = w[j * n + c];
            for (long i = j + 1; i < m; ++i) d += w[i * n + j] * w[i * n + c];
            d *= tau[j];
            w[j * n + c] -= d;
            for (long i = j + 1; i < m; ++i) w[i * n + c] -= d * w[i * n + j];
        }}
    }}
    for (long i = 0; i < kr; ++i)
        for (long c = 0; c < n; ++c) r[i * n + c] = c >= i ? w[i * n + c] * scale : 0;
    for (long i = 0; i < m; ++i)
        for (long c = 0; c < kq; ++c) q[i * kq + c] = i == c;
    for (long j = k - 1; j >= 0; --j) {{                // orgqr: Q = H_0 ... H_{{k-1}} I
        if (tau[j] == 0) continue;
        for (long c = 0; c < kq; ++c) {{
            {T} d = q[j * kq + c];
            for (long i = j + 1; i < m; ++i) d += w[i * n + j] * q[i * kq + c];
            d *= tau[j];
            q[j * kq + c] -= d;
            for (long i = j + 1; i < m; ++i) q[i * kq + c] -= d * w[i * n + j];
        }}
    }}
}}
"""

_MAX_SWEEPS = 60


def _eps(dtype):
    return np.dtype(dtype).type(np.finfo(dtype).eps)


def _swap_last(a, bshape):
    """The contiguous transpose of the last two axes of ``a`` (shape bshape + (r, c))."""
    z = math.prod(bshape)
    r, c = a.shape[-2:]
    t = rt.contiguous(a.reshape(z, r, c).transpose((0, 2, 1)))
    return t.reshape(bshape + (c, r))


class LapackKernels:
    """The factorisation kernels (one method each; :meth:`table` maps op names to them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def cholesky(self, x):
        """Cholesky: the lower factor (a not positive definite matrix raises)."""
        dev = self.rt.device_of(x)
        n = x.shape[-1]
        out = self.rt.empty(dev, x.shape, x.dtype)
        z = math.prod(x.shape[:-2])
        if out.size == 0:
            return out
        bad = self.rt.empty(dev, (z,), np.int32)
        src = _CHOLESKY.format(T=self.rt.CTYPES[np.dtype(x.dtype)])
        kern = self.rt.kernel(dev, src, "cholesky", [None, None, None, _I64],
                              options=dev.exact_div)
        self.rt.launch(dev, kern, (z,), None, out.data, _input(x).data, bad.data, n)
        if self.rt.download(bad).any():
            raise InvalidArgumentError("Cholesky decomposition was not successful: the input "
                                       "is not symmetric positive definite.")
        return out

    def eigh(self, x):
        """SelfAdjointEigV2: eigenvalues ascending and eigenvectors (Jacobi rotations)."""
        dev = self.rt.device_of(x)
        n = x.shape[-1]
        bshape = tuple(x.shape[:-2])
        z = math.prod(bshape)
        w = self.rt.empty(dev, bshape + (n,), x.dtype)
        v = self.rt.empty(dev, x.shape, x.dtype)
        if v.size == 0:
            return w, v
        scratch = self.rt.empty(dev, x.shape, x.dtype)
        t = np.dtype(x.dtype)
        kern = self.rt.kernel(dev, _EIGH.format(T=self.rt.CTYPES[t]), "eigh",
                              [None, None, None, None, _I64, t.type, _I32], options=dev.exact_div)
        self.rt.launch(dev, kern, (z,), None, w.data, v.data, scratch.data, _input(x).data, n,
                       _eps(t), _MAX_SWEEPS)
        return w, v

    def _svd(self, x, full_matrices, want_uv):
        """The singular values, and with ``want_uv`` the vectors, of a batch of matrices."""
        dev = self.rt.device_of(x)
        m, n = x.shape[-2:]
        bshape = tuple(x.shape[:-2])
        z = math.prod(bshape)
        tall = m >= n
        mt, nt = (m, n) if tall else (n, m)          # the tall orientation: A or A^T
        ku = mt if (full_matrices and want_uv) else nt
        u = self.rt.empty(dev, bshape + (mt, ku), x.dtype)
        s = self.rt.empty(dev, bshape + (nt,), x.dtype)
        v = self.rt.empty(dev, bshape + (nt, nt) if want_uv else (0,), x.dtype)
        if z:
            t = np.dtype(x.dtype)
            rs, cs = (n, 1) if tall else (1, n)
            kern = self.rt.kernel(dev, _SVD.format(T=self.rt.CTYPES[t]), "svd",
                                  [None, None, None, None, _I64, _I64, _I64, _I64, _I64, t.type,
                                   _I32, _I32], options=dev.exact_div)
            buf = self.rt.buf
            self.rt.launch(dev, kern, (z,), None, buf(dev, u), buf(dev, s), buf(dev, v),
                           buf(dev, _input(x)), mt, nt, ku, rs, cs, _eps(t), _MAX_SWEEPS,
                           int(want_uv))
        if not want_uv:
            return s
        if tall:                                     # A = U S V^T
            return u, s, _swap_last(v, bshape)
        return v, s, _swap_last(u, bshape)           # A^T = U S V^T, so A = V S U^T

    def svd(self, x, full_matrices):
        """Svd: singular values and vectors (reduced unless ``full_matrices``)."""
        return self._svd(x, full_matrices, True)

    def svd_values(self, x):
        """SvdValues: the singular values only."""
        return self._svd(x, False, False)

    def qr(self, x, full_matrices):
        """Qr: ``q`` and ``r`` (reduced unless ``full_matrices``)."""
        dev = self.rt.device_of(x)
        m, n = x.shape[-2:]
        bshape = tuple(x.shape[:-2])
        z = math.prod(bshape)
        k = min(m, n)
        kq = m if full_matrices else k
        kr = m if full_matrices else k
        q = self.rt.empty(dev, bshape + (m, kq), x.dtype)
        r = self.rt.empty(dev, bshape + (kr, n), x.dtype)
        if z:
            work = self.rt.empty(dev, x.shape, x.dtype)
            tau = self.rt.empty(dev, bshape + (k,), x.dtype)
            kern = self.rt.kernel(dev, _QR.format(T=self.rt.CTYPES[np.dtype(x.dtype)]), "qr",
                                  [None, None, None, None, None, _I64, _I64, _I64, _I64],
                                  options=dev.exact_div)
            buf = self.rt.buf
            self.rt.launch(dev, kern, (z,), None, buf(dev, q), buf(dev, r), buf(dev, work),
                           buf(dev, tau), buf(dev, _input(x)), m, n, kq, kr)
        return q, r

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        return {
            "Cholesky": KernelSpec(self.cholesky, dtypes=FLOATS),
            "SelfAdjointEigV2": KernelSpec(self.eigh, dtypes=FLOATS),
            "Svd": KernelSpec(self.svd, dtypes=FLOATS),
            "SvdValues": KernelSpec(self.svd_values, dtypes=FLOATS),
            "Qr": KernelSpec(self.qr, dtypes=FLOATS),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return LapackKernels(ctx).table()
