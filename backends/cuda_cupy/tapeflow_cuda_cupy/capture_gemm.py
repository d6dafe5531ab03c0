"""MatMul inside a CUDA-graph capture: a tapeflow GEMM kernel instead of cuBLAS.

Why: CuPy refuses every cuBLAS call made while the current stream captures. The check
is in ``cupy_backends/cuda/libs/cublas.pyx``: each wrapper (``sgemm``, ``gemmEx``,
``sgemmStridedBatched``, ... — what ``cupy.matmul`` / ``dot`` / ``tensordot`` /
``einsum`` reach) first calls ``_setStream(handle)`` -> ``setStream(handle, stream)``,
which raises ``NotImplementedError('calling cuBLAS API during stream capture is
currently unsupported')`` when ``runtime.streamIsCapturing(stream)`` (not on HIP).
It is unconditional: no workspace setting, environment variable or handle property
lifts it (CuPy 13 and 14, and its main branch as of 2026-08), calling the
``cupy_backends.cuda.libs.cublas`` functions directly hits the same ``_setStream``,
and CuPy has no cuBLASLt binding. The first H100 run
(docs/gpu-runs/2026-11-26-h100) therefore captured nothing that had a matmul.

What: while :func:`graph_mode` is active (the capturer's warm-up and capture of one
``tf.function`` signature, :mod:`.cuda_graphs`), ``MatMul`` on float16/32/64 runs
:data:`_SOURCE`, a shared-memory tiled GEMM launched as a ``cupy.RawKernel`` (a plain
kernel launch, which capture records). Everywhere else MatMul is cuBLAS as before.
The warm-up takes the same kernel as the capture, so the numbers a graph gives are
those of its warm-up call.

The kernel: ``C[b] = op(A[b]) @ op(B[b])`` with A, B read through element strides
(transposes and broadcast batch dimensions are views, no copy), C contiguous. A block
of 256 threads owns a ``16R x 16R`` tile of C (each thread ``R x R`` outputs at
stride 16, so loads and stores of a warp are consecutive), ``R`` in (1, 2, 4) picked
so there are enough blocks; K is walked in slices of 16 through shared memory.
float32 accumulates in float32 (strict: no TF32), float64 in float64; float16 is
widened to float32, multiplied, and rounded once (as the shared kernel's float16
matmul is computed). Complex and integer MatMul keep the shared kernel (under capture
CuPy refuses the complex ones, and the capturer falls back with that reason).
One-dimensional grid and block, so :mod:`.emulate` can run the same source on the CPU.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from tapeflow.plugins import KernelSpec

_state = threading.local()

#: the dtypes the GEMM kernel takes (float16 through float32)
DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))

_TYPES = {np.dtype(np.float32): ("float", "f32"), np.dtype(np.float64): ("double", "f64")}
_REGS = (4, 2, 1)
_THREADS = 256
_TK = 16
_MAX_GRID = 2**31 - 1

_SOURCE = r"""
#define T {T}
#define R {R}
#define TM (16 * R)
#define TK 16

extern "C" __global__ void tapeflow_gemm_{tag}_r{R}(
        const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
        int M, int N, int K, int tiles_m, int tiles_n,
        long long sab, long long sam, long long sak,
        long long sbb, long long sbk, long long sbn) {{
    __shared__ T As[TK][TM];
    __shared__ T Bs[TK][TM];
    const int t = threadIdx.x, tx = t & 15, ty = t >> 4;
    long long blk = blockIdx.x;
    const int bn = (int)(blk % tiles_n); blk /= tiles_n;
    const int bm = (int)(blk % tiles_m);
    const long long batch = blk / tiles_m;
    const int m0 = bm * TM, n0 = bn * TM;
    const T* a = A + batch * sab;
    const T* b = B + batch * sbb;
    T acc[R][R];
    #pragma unroll
    for (int i = 0; i < R; ++i) {{
        #pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = (T)0;
    }}
    for (int k0 = 0; k0 < K; k0 += TK) {{
        #pragma unroll
        for (int l = 0; l < R; ++l) {{
            const int e = t + 256 * l;
            const int ak = e % TK, am = e / TK;           /* A tile: TM rows x TK */
            const int gm = m0 + am, gk = k0 + ak;
            As[ak][am] = (gm < M && gk < K) ? a[gm * sam + gk * sak] : (T)0;
            const int bc = e % TM, bk = e / TM;           /* B tile: TK rows x TM */
            const int gk2 = k0 + bk, gn = n0 + bc;
            Bs[bk][bc] = (gk2 < K && gn < N) ? b[gk2 * sbk + gn * sbn] : (T)0;
        }}
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TK; ++kk) {{
            T av[R], bv[R];
            #pragma unroll
            for (int i = 0; i < R; ++i) av[i] = As[kk][ty + 16 * i];
            #pragma unroll
            for (int j = 0; j < R; ++j) bv[j] = Bs[kk][tx + 16 * j];
            #pragma unroll
            for (int i = 0; i < R; ++i) {{
                #pragma unroll
                for (int j = 0; j < R; ++j) acc[i][j] += av[i] * bv[j];
            }}
        }}
        __syncthreads();
    }}
    T* c = C + batch * (long long)M * N;
    #pragma unroll
    for (int i = 0; i < R; ++i) {{
        const int gm = m0 + ty + 16 * i;
        if (gm >= M) continue;
        #pragma unroll
        for (int j = 0; j < R; ++j) {{
            const int gn = n0 + tx + 16 * j;
            if (gn < N) c[(long long)gm * N + gn] = acc[i][j];
        }}
    }}
}}
"""


def source(dtype, regs):
    """The CUDA source of the GEMM kernel for ``dtype`` (float32/float64) with ``regs``
    (R) outputs per thread per dimension, and its kernel name."""
    typ, tag = _TYPES[np.dtype(dtype)]
    return _SOURCE.format(T=typ, R=regs, tag=tag), f"tapeflow_gemm_{tag}_r{regs}"


# --- when ---------------------------------------------------------------------------------

def active() -> bool:
    """Whether this thread is inside a capturer's warm-up or capture."""
    return getattr(_state, "depth", 0) > 0


@contextmanager
def graph_mode():
    """MatMul takes the GEMM kernel (not cuBLAS) in this thread while active."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


# --- geometry -----------------------------------------------------------------------------

def pick_regs(batch, m, n, enough=128):
    """R: the largest of 4, 2, 1 that still gives ``enough`` blocks (else 1)."""
    for r in _REGS:
        tile = 16 * r
        if batch * -(-m // tile) * -(-n // tile) >= enough:
            return r
    return 1


def plan(a_shape, a_strides, b_shape, b_strides, itemsize):
    """Launch parameters for ``a @ b`` (shapes ``(..., M, K)`` and ``(..., K, N)``, batch
    dimensions already broadcast and flattened to one): ``(batch, M, N, K, strides of
    A in elements (batch, row, col), strides of B)``."""
    (ba, m, k), (bb, k2, n) = a_shape, b_shape
    assert ba == bb and k == k2, (a_shape, b_shape)
    sa = tuple(s // itemsize for s in a_strides)
    sb = tuple(s // itemsize for s in b_strides)
    return ba, m, n, k, sa, sb


class Gemm:
    """The compiled GEMM kernels of one CuPy (``cp``), built on first use."""

    def __init__(self, cp):
        self.cp = cp
        self._kernels = {}
        self._lock = threading.Lock()

    def kernel(self, dtype, regs):
        key = (np.dtype(dtype), regs)
        k = self._kernels.get(key)
        if k is None:
            with self._lock:
                k = self._kernels.get(key)
                if k is None:
                    src, name = source(dtype, regs)
                    k = self.cp.RawKernel(src, name)
                    self._kernels[key] = k
        return k

    def __call__(self, a, b):
        """``a @ b`` for float16/32/64 arrays of rank >= 2 (batch dims broadcast)."""
        cp = self.cp
        dt = a.dtype
        if dt == np.float16:
            return self(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        m, k = a.shape[-2:]
        n = b.shape[-1]
        if k != b.shape[-2]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align "
                             f"({k} != {b.shape[-2]})")
        batch_shape = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        nb = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
        out = cp.empty(batch_shape + (m, n), dtype=dt)
        if out.size == 0:
            return out
        if k == 0:
            out.fill(0)
            return out
        a3, b3 = _batched(cp, a, batch_shape, nb), _batched(cp, b, batch_shape, nb)
        nb, m, n, k, sa, sb = plan(a3.shape, a3.strides, b3.shape, b3.strides, dt.itemsize)
        regs = pick_regs(nb, m, n)
        tile = 16 * regs
        tm, tn = -(-m // tile), -(-n // tile)
        blocks = nb * tm * tn
        if blocks > _MAX_GRID:
            raise ValueError(f"matmul too large for one launch ({blocks} blocks)")
        kern = self.kernel(dt, regs)
        i32, i64 = np.int32, np.int64
        kern((blocks,), (_THREADS,),
             (a3, b3, out, i32(m), i32(n), i32(k), i32(tm), i32(tn),
              i64(sa[0]), i64(sa[1]), i64(sa[2]), i64(sb[0]), i64(sb[1]), i64(sb[2])))
        return out


def _batched(cp, x, batch_shape, nb):
    """``x`` as a 3-D view ``(nb, rows, cols)`` (a copy only where the broadcast batch
    dimensions cannot be flattened into one stride)."""
    rows, cols = x.shape[-2:]
    if x.shape[:-2] != batch_shape:
        x = cp.broadcast_to(x, batch_shape + (rows, cols))
    if len(batch_shape) == 0:
        return x.reshape(1, rows, cols)
    if len(batch_shape) == 1:
        return x
    strides, shape = x.strides[:-2], x.shape[:-2]
    # one batch stride when the batch dimensions are all broadcast or C-ordered
    if all(s == 0 for s in strides):
        return cp.lib.stride_tricks.as_strided(x, (nb, rows, cols), (0,) + x.strides[-2:])
    if all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 1)):
        return cp.lib.stride_tricks.as_strided(x, (nb, rows, cols),
                                               (strides[-1],) + x.strides[-2:])
    return cp.ascontiguousarray(x).reshape(nb, rows, cols)


def wrap_matmul(cp, inner):
    """MatMul: ``inner`` (the shared kernel: cuBLAS through ``cupy.matmul``) unless a
    capturer's warm-up or capture is active, then the GEMM kernel for float dtypes."""
    gemm = Gemm(cp)
    swap = cp.swapaxes

    def matmul(a, b, transpose_a, transpose_b):
        if not getattr(_state, "depth", 0) or a.dtype not in DTYPES or b.dtype != a.dtype:
            return inner(a, b, transpose_a, transpose_b)
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError("matmul needs inputs of rank >= 2")
        if transpose_a:
            a = swap(a, -1, -2)
        if transpose_b:
            b = swap(b, -1, -2)
        return gemm(a, b)

    matmul.__name__ = "matmul"
    matmul.__wrapped__ = inner
    matmul.gemm = gemm
    return matmul


def build(ctx):
    """``{"MatMul": fn}`` wrapping the MatMul of ``ctx.shared`` (the table built so far)
    with CuPy ``ctx.cp`` (see :func:`wrap_matmul`)."""
    inner = ctx.shared.get("MatMul")
    if inner is None:
        return {}
    return {"MatMul": wrap_matmul(ctx.cp, KernelSpec.of(inner).fn)}
