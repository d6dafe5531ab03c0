"""Linear-algebra kernels, written once against an array module ``xp``.

MatMul is on the hot path of training: the no-transpose case is one ``xp.matmul``;
transposes are ``swapaxes`` views (BLAS reads them without a copy).
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..plugins import KernelSpec

FLOATS = ("float16", "float32", "float64")
NUMERIC = FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LAPACK = ("float32", "float64")          # what xp.linalg supports
COMPLEX = ("complex64", "complex128")


class LinalgKernels:
    """The linear-algebra and FFT kernels of one array module ``xp`` (NumPy or CuPy's
    namespace), one method per kernel; :meth:`table` maps op names to them.

    >>> import numpy as np
    >>> LinalgKernels(np).matmul(np.eye(2), np.ones((3, 2)), False, True)
    array([[1., 1., 1.],
           [1., 1., 1.]])
    """

    def __init__(self, xp):
        self.xp = xp
        self._matmul = xp.matmul          # MatMul is on the hot path: one attribute each
        self._swap = xp.swapaxes
        self._LinAlgError = getattr(xp.linalg, "LinAlgError", ArithmeticError)

    def matmul(self, a, b, transpose_a, transpose_b, out=None):
        """``a @ b`` of matrices (rank >= 2), either one transposed as a view first;
        written into ``out`` when given (tf.function's buffer plan)."""
        if transpose_a:                       # (the method: np.swapaxes' layers cost 0.5 us)
            a = a.swapaxes(-1, -2)
        if transpose_b:
            b = b.swapaxes(-1, -2)
        if a.ndim < 2 or b.ndim < 2:          # xp.matmul would take vectors; TF does not
            raise ValueError("matmul needs inputs of rank >= 2")
        return self._matmul(a, b, out=out)

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
    """The linear-algebra kernels for ``ctx.xp``: ``{op name: KernelSpec}``."""
    return LinalgKernels(ctx.xp).table()
