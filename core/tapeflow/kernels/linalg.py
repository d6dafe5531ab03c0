"""Linear-algebra kernels, written once against an array module ``xp``.

MatMul is on the hot path of training: the no-transpose case is one ``xp.matmul``;
transposes are ``swapaxes`` views (BLAS reads them without a copy).
"""

from __future__ import annotations

from ..runtime.errors import InvalidArgumentError

FLOATS = ("float16", "float32", "float64")
NUMERIC = FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
LAPACK = ("float32", "float64")          # what xp.linalg supports
COMPLEX = ("complex64", "complex128")


def build(xp):
    matmul_ = xp.matmul
    swap = xp.swapaxes
    LinAlgError = getattr(xp.linalg, "LinAlgError", ArithmeticError)

    def matmul(a, b, transpose_a, transpose_b):
        if transpose_a:
            a = swap(a, -1, -2)
        if transpose_b:
            b = swap(b, -1, -2)
        if a.ndim < 2 or b.ndim < 2:          # xp.matmul would take vectors; TF does not
            raise ValueError("matmul needs inputs of rank >= 2")
        return matmul_(a, b)

    def einsum(*operands, equation):
        big = len(operands) > 2 or (len(operands) == 2 and
                                    operands[0].size + operands[1].size > 4096)
        return xp.einsum(equation, *operands, optimize=big)   # BLAS when it pays off

    def inv(x, adjoint):
        if adjoint:
            x = swap(x, -1, -2)
        try:
            return xp.linalg.inv(x)
        except LinAlgError:
            raise InvalidArgumentError("Input is not invertible.") from None

    def solve(a, b, adjoint):
        if adjoint:
            a = swap(a, -1, -2)
        try:
            return xp.linalg.solve(a, b)
        except LinAlgError:
            raise InvalidArgumentError("Input matrix is not invertible.") from None

    def det(x):
        return xp.linalg.det(x)

    def slogdet(x):
        sign, logabs = xp.linalg.slogdet(x)
        return xp.asarray(sign, dtype=x.dtype), xp.asarray(logabs, dtype=x.dtype)

    def cholesky(x):
        try:
            return xp.linalg.cholesky(x)
        except LinAlgError:
            raise InvalidArgumentError("Cholesky decomposition was not successful: the input "
                                       "is not symmetric positive definite.") from None

    def eigh(x):
        w, v = xp.linalg.eigh(x)
        return w, v

    def svd(x, full_matrices):
        u, s, vh = xp.linalg.svd(x, full_matrices=full_matrices)
        return u, s, vh

    def _same_precision(out, like):
        single = like.dtype in (xp.float32, xp.complex64)
        want = (xp.complex64 if single else xp.complex128) if out.dtype.kind == "c" else (
            xp.float32 if single else xp.float64)
        return out.astype(want, copy=False)

    def fft(x, axes, norm, inverse):
        f = xp.fft.ifftn if inverse else xp.fft.fftn
        return _same_precision(f(x, axes=axes, norm=norm), x)

    def rfft(x, axes, norm):
        return _same_precision(xp.fft.rfftn(x, axes=axes, norm=norm), x)

    def irfft(x, axes, norm, n):
        s = [x.shape[a] for a in axes[:-1]] + [n]
        return _same_precision(xp.fft.irfftn(x, s=s, axes=axes, norm=norm), x)

    def qr(x, full_matrices):
        q, r = xp.linalg.qr(x, mode="complete" if full_matrices else "reduced")
        return q, r

    return {
        "Cholesky": {"fn": cholesky, "dtypes": LAPACK},
        "SelfAdjointEigV2": {"fn": eigh, "dtypes": LAPACK},
        "Svd": {"fn": svd, "dtypes": LAPACK},
        "SvdValues": {"fn": lambda x: xp.linalg.svd(x, compute_uv=False), "dtypes": LAPACK},
        "Qr": {"fn": qr, "dtypes": LAPACK},
        "FFT": {"fn": fft, "dtypes": COMPLEX},
        "RFFT": {"fn": rfft, "dtypes": LAPACK},
        "IRFFT": {"fn": irfft, "dtypes": COMPLEX},
        "MatMul": {"fn": matmul, "fresh": True, "dtypes": FLOATS + ("int32", "int64") + COMPLEX},
        "Einsum": {"fn": einsum, "dtypes": NUMERIC + COMPLEX},
        "MatrixInverse": {"fn": inv, "dtypes": LAPACK},
        "MatrixSolve": {"fn": solve, "dtypes": LAPACK},
        "MatrixDeterminant": {"fn": det, "dtypes": LAPACK},
        "LogMatrixDeterminant": {"fn": slogdet, "dtypes": LAPACK},
    }
