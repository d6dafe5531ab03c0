"""Linear-algebra kernels, written once against an array module ``xp``.

MatMul is on the hot path of training: the no-transpose case is one ``xp.matmul``;
transposes are ``swapaxes`` views (BLAS reads them without a copy). With the build
service ``native`` (the CPU backend's C kernels, docs/cpu-kernels.md), a 2-d float32
MatMul whose shape and thread count :func:`native_matmul_pays` accepts calls
``native.matmul`` first, at call time while ``native.available()``, and NumPy's BLAS
where it returns None.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..plugins import KernelSpec

FLOATS = ("float16", "float32", "float64")
NUMERIC = FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LAPACK = ("float32", "float64")          # what xp.linalg supports
COMPLEX = ("complex64", "complex128")
_F32 = np.dtype(np.float32)

# The native GEMM's rule (docs/cpu-kernels.md has the table): measured against NumPy's
# OpenBLAS on the benchmark models' MatMuls in the forms the MatMul gradient calls them
# (x @ W, dy @ W^T with transpose_b, x^T @ dy with transpose_a), one thread: it wins
# 9-20% on x @ W and 17-48% on dy @ W^T (C^T = W dy^T, W read in place) once the
# product is large enough for the native call's ~5 us of checks to vanish; it loses
# 4-31% on x^T @ dy (K = the batch: short tiles), 5% on x @ W with a B larger than
# the caches (the tutorial CNN's 3136 x 1024 weights), 1.7-3.9x below 2^21 multiply-adds.
# Two threads: native scales 1.4-2.3x where OpenBLAS's spinning threads leave it the
# second core, yet the MLP's whole step was slower with it than with OpenBLAS: one.
#: at least this many multiply-adds (m*k*n) ...
NATIVE_MIN_MACS = 1 << 21
#: ... at most this many columns (n: 10,000 lost 1.2x) ...
NATIVE_MAX_N = 4096
#: ... B (k x n) not transposed: at most this many elements (12.8 MB lost 5%) ...
NATIVE_MAX_B = 1 << 21
#: ... and the native library on at most this many threads; on more, the products of at
#: least NATIVE_MIN_MACS_THREADED multiply-adds go native in every form: NumPy's OpenBLAS
#: threads spin for a while after each call and take the second core from the native
#: convolutions that follow (the MNIST tutorial CNN's step on 2 threads: 28.9 -> 20.4 ms
#: with its dense layer's three products native; the MLP's 64-row products, below it,
#: stay faster on OpenBLAS)
NATIVE_MAX_THREADS = 1
NATIVE_MIN_MACS_THREADED = 1 << 25


def native_matmul_pays(m, k, n, transpose_a=False, transpose_b=False, threads=1):
    """Whether a 2-d float32 ``op(a) @ op(b)``, ``(m x k) @ (k x n)``, goes to the native
    GEMM (when there is one) running on ``threads`` threads: the rule measured against
    NumPy's OpenBLAS (the constants above; docs/cpu-kernels.md). A dense layer's
    forward and input gradient go native, its weight gradient (``transpose_a``) not.

    >>> native_matmul_pays(2, 2, 2), native_matmul_pays(64, 784, 256)
    (False, True)
    >>> native_matmul_pays(64, 256, 784, transpose_b=True)     # dy @ W^T
    True
    >>> native_matmul_pays(784, 64, 256, transpose_a=True)     # x^T @ dy
    False
    >>> native_matmul_pays(64, 784, 256, threads=2), native_matmul_pays(
    ...     3136, 32, 1024, transpose_a=True, threads=2)
    (False, True)
    """
    if threads > NATIVE_MAX_THREADS:
        return m * k * n >= NATIVE_MIN_MACS_THREADED
    return (not transpose_a and n <= NATIVE_MAX_N and m * k * n >= NATIVE_MIN_MACS
            and (transpose_b or k * n <= NATIVE_MAX_B))


class LinalgKernels:
    """The linear-algebra and FFT kernels of one array module ``xp`` (NumPy or CuPy's
    namespace), one method per kernel; :meth:`table` maps op names to them.

    ``native``: the optional service of that name (see the module's docstring).

    >>> import numpy as np
    >>> LinalgKernels(np).matmul(np.eye(2), np.ones((3, 2)), False, True)
    array([[1., 1., 1.],
           [1., 1., 1.]])
    """

    def __init__(self, xp, native=None):
        self.xp = xp
        self.native = native
        self._matmul = xp.matmul          # MatMul is on the hot path: one attribute each
        self._swap = xp.swapaxes
        self._LinAlgError = getattr(xp.linalg, "LinAlgError", ArithmeticError)

    def matmul(self, a, b, transpose_a, transpose_b, out=None):
        """``a @ b`` of matrices (rank >= 2), either one transposed as a view first;
        written into ``out`` when given (tf.function's buffer plan). The native GEMM
        first where the service is set and :func:`native_matmul_pays`."""
        if self.native is not None and a.dtype == _F32 and b.dtype == _F32:
            y = self._native_matmul(a, b, transpose_a, transpose_b, out)
            if y is not None:
                return y
        if transpose_a:                       # (the method: np.swapaxes' layers cost 0.5 us)
            a = a.swapaxes(-1, -2)
        if transpose_b:
            b = b.swapaxes(-1, -2)
        if a.ndim < 2 or b.ndim < 2:          # xp.matmul would take vectors; TF does not
            raise ValueError("matmul needs inputs of rank >= 2")
        return self._matmul(a, b, out=out)

    def _native_matmul(self, a, b, transpose_a, transpose_b, out):
        """The native GEMM's ``a @ b`` (into ``out`` when given), or None: not 2-d, a
        shape the rule leaves to the BLAS, the library off or declining."""
        if a.ndim != 2 or b.ndim != 2:
            return None
        m, k = a.shape[::-1] if transpose_a else a.shape
        kb, n = b.shape[::-1] if transpose_b else b.shape
        native = self.native
        if (k != kb or not native.available()
                or not native_matmul_pays(m, k, n, transpose_a, transpose_b,
                                          native.get_num_threads())):
            return None
        y = native.matmul(a, b, transpose_a, transpose_b)
        if y is None or out is None:
            return y
        self.xp.copyto(out, y)
        return out

    def einsum(self, *operands, equation):
        """The Einstein summation ``equation`` of ``operands`` (BLAS when it pays off)."""
        big = len(operands) > 2 or (len(operands) == 2 and
                                    operands[0].size + operands[1].size > 4096)
        return self.xp.einsum(equation, *operands, optimize=big)

    def inv(self, x, adjoint):
        """The inverse of each matrix of ``x`` (of its adjoint when ``adjoint``)."""
        if adjoint:
            x = self._swap(x, -1, -2)
        try:
            return self.xp.linalg.inv(x)
        except self._LinAlgError:
            raise InvalidArgumentError("Input is not invertible.") from None

    def solve(self, a, b, adjoint):
        """The solution ``x`` of ``a @ x = b`` (of ``a``'s adjoint when ``adjoint``)."""
        if adjoint:
            a = self._swap(a, -1, -2)
        try:
            return self.xp.linalg.solve(a, b)
        except self._LinAlgError:
            raise InvalidArgumentError("Input matrix is not invertible.") from None

    def det(self, x):
        """The determinant of each matrix of ``x``."""
        return self.xp.linalg.det(x)

    def slogdet(self, x):
        """``(sign, log |det|)`` of each matrix of ``x``, in ``x``'s dtype."""
        xp = self.xp
        sign, logabs = xp.linalg.slogdet(x)
        return xp.asarray(sign, dtype=x.dtype), xp.asarray(logabs, dtype=x.dtype)

    def cholesky(self, x):
        """The lower Cholesky factor of each symmetric positive definite matrix of ``x``."""
        try:
            return self.xp.linalg.cholesky(x)
        except self._LinAlgError:
            raise InvalidArgumentError("Cholesky decomposition was not successful: the input "
                                       "is not symmetric positive definite.") from None

    def eigh(self, x):
        """``(eigenvalues, eigenvectors)`` of each self-adjoint matrix of ``x``."""
        w, v = self.xp.linalg.eigh(x)
        return w, v

    def svd(self, x, full_matrices):
        """``(u, s, vh)``: the singular value decomposition of each matrix of ``x``."""
        u, s, vh = self.xp.linalg.svd(x, full_matrices=full_matrices)
        return u, s, vh

    def svd_values(self, x):
        """The singular values of each matrix of ``x``."""
        return self.xp.linalg.svd(x, compute_uv=False)

    def _same_precision(self, out, like):
        """``out`` (complex or real) in the precision of ``like`` (single or double)."""
        xp = self.xp
        single = like.dtype in (xp.float32, xp.complex64)
        want = (xp.complex64 if single else xp.complex128) if out.dtype.kind == "c" else (
            xp.float32 if single else xp.float64)
        return out.astype(want, copy=False)

    def fft(self, x, axes, norm, inverse):
        """The complex FFT (or its inverse) over ``axes``, in ``x``'s precision."""
        f = self.xp.fft.ifftn if inverse else self.xp.fft.fftn
        return self._same_precision(f(x, axes=axes, norm=norm), x)

    def rfft(self, x, axes, norm):
        """The FFT of a real ``x`` over ``axes`` (the last halved), in ``x``'s precision."""
        return self._same_precision(self.xp.fft.rfftn(x, axes=axes, norm=norm), x)

    def irfft(self, x, axes, norm, n):
        """The inverse of :meth:`rfft`, ``n`` real values along the last axis."""
        s = [x.shape[a] for a in axes[:-1]] + [n]
        return self._same_precision(self.xp.fft.irfftn(x, s=s, axes=axes, norm=norm), x)

    def qr(self, x, full_matrices):
        """``(q, r)``: the QR decomposition of each matrix of ``x``."""
        q, r = self.xp.linalg.qr(x, mode="complete" if full_matrices else "reduced")
        return q, r

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        return {
            "Cholesky": KernelSpec(self.cholesky, dtypes=LAPACK),
            "SelfAdjointEigV2": KernelSpec(self.eigh, dtypes=LAPACK),
            "Svd": KernelSpec(self.svd, dtypes=LAPACK),
            "SvdValues": KernelSpec(self.svd_values, dtypes=LAPACK),
            "Qr": KernelSpec(self.qr, dtypes=LAPACK),
            "FFT": KernelSpec(self.fft, dtypes=COMPLEX),
            "RFFT": KernelSpec(self.rfft, dtypes=LAPACK),
            "IRFFT": KernelSpec(self.irfft, dtypes=COMPLEX),
            "MatMul": KernelSpec(self.matmul, fresh=True, out=True,
                                 dtypes=FLOATS + ("int32", "int64") + COMPLEX),
            "Einsum": KernelSpec(self.einsum, dtypes=NUMERIC + COMPLEX),
            "MatrixInverse": KernelSpec(self.inv, dtypes=LAPACK),
            "MatrixSolve": KernelSpec(self.solve, dtypes=LAPACK),
            "MatrixDeterminant": KernelSpec(self.det, dtypes=LAPACK),
            "LogMatrixDeterminant": KernelSpec(self.slogdet, dtypes=LAPACK),
        }


def build(ctx):
    """The linear-algebra kernels for ``ctx.xp`` (service ``native``, optional):
    ``{op name: KernelSpec}``."""
    return LinalgKernels(ctx.xp, ctx.get("native")).table()
