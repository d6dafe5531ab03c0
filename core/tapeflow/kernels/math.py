"""Elementwise kernels, written once against an array module ``xp``.

Most kernels are the ufunc itself (no Python frame between dispatch and the
loop). Wrappers exist only where a ufunc is missing (``Rsqrt``, ``Softplus``),
where SciPy lacks a float16 loop (``Sigmoid``, ``Erf``), or for checks TF makes
and NumPy does not (integer division by zero, negative integer powers).
"""

from __future__ import annotations

import contextlib
import functools

from ..errors import InvalidArgumentError, UnimplementedError
from ..plugins import KernelSpec

FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS
BOOL = ("bool",)
COMPLEX = ("complex64", "complex128")


def scipy_special(op):
    """``scipy.special`` (the extra ``tapeflow[scipy]``): the default ``special`` service
    of a :class:`~tapeflow.plugins.BuildContext` (``special(op name) -> module`` with
    SciPy's special functions for the context's arrays; the CUDA backend passes
    ``cupyx.scipy.special``'s). Imported on the first kernel that needs it (importing
    scipy.special costs ~0.35 s). Without SciPy: UnimplementedError naming ``op`` and
    the extra."""
    try:
        import scipy.special as sp
    except ImportError as e:
        raise UnimplementedError(
            f"{op} on the NumPy backend needs SciPy's special functions, which are not "
            f"installed ({e}); install them with pip install 'tapeflow[scipy]'") from None
    return sp


def sigmoid_formula(xp, x):
    """expit without SciPy: ``1 / (1 + exp(-x))`` for x >= 0 and ``e / (1 + e)`` with
    ``e = exp(x)`` below, so neither side overflows."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _sigmoid_formula(xp):
    """:func:`sigmoid_formula` bound to ``xp``: the fallback ``Sigmoid`` without SciPy."""
    return functools.partial(sigmoid_formula, xp)


def complex_sign(xp, x):
    """NumPy 2's ``sign`` of a complex array (its ``CFLOAT_sign`` loop) on any ``xp``:
    ``z / |z|`` with ``|z| = hypot(re, im)`` in the input's precision and each part
    divided by that real number, 0 at 0, NaN where ``|z|`` is NaN, and at an infinite
    ``|z|``: NaN when both parts are infinite, ``(+-1, 0)`` when the real part is,
    else ``(0, +-1)`` -- also when ``|z|`` overflows with finite parts (complex64
    ``3e38 + 3e38j`` gives ``1j`` in NumPy) -- so ``inf + 0j`` is ``1`` and
    ``inf + nan j`` is ``1`` too (``hypot(inf, nan)`` is inf). A plain complex division
    ``x / |x|`` (what this did on CuPy) gives NaN for every infinite input."""
    re, im = x.real, x.imag
    a = xp.hypot(re, im)
    zero = a == 0
    safe = xp.where(zero, xp.ones_like(a), a)
    rr, ri = re / safe, im / safe                  # NaN |z| -> NaN parts
    rr = xp.where(zero, xp.zeros_like(rr), rr)
    ri = xp.where(zero, xp.zeros_like(ri), ri)
    big = xp.isinf(a)
    re_inf, im_inf = xp.isinf(re), xp.isinf(im)
    nan = xp.full_like(rr, float("nan"))
    one = xp.ones_like(rr)
    zeros = xp.zeros_like(rr)
    rr = xp.where(big & re_inf & im_inf, nan,
                  xp.where(big & re_inf, xp.where(re > 0, one, -one),
                           xp.where(big, zeros, rr)))
    ri = xp.where(big & re_inf & im_inf, nan,
                  xp.where(big & re_inf, zeros,
                           xp.where(big, xp.where(im > 0, one, -one), ri)))
    out = xp.empty(x.shape, x.dtype)
    out.real = rr
    out.imag = ri
    return out


def _check_int_divisor(x, y):
    """InvalidArgumentError for an integer division by zero (a 0-d divisor, Collatz's
    ``a % 2``, is checked without a reduction)."""
    if x.dtype.kind in "iu" and (not y if y.ndim == 0 else not y.all()):
        raise InvalidArgumentError("Integer division by zero")


def _spec(fn, dtypes=None):
    """A :class:`~tapeflow.plugins.KernelSpec`; a ufunc (NumPy's or CuPy's) also declares
    ``out``: it writes into a given array (``xp.add(a, b, out=buf)``), which
    tf.function's buffer plan and the CPU backend's elementwise fusion use
    (docs/backends.md, "Output buffers")."""
    return KernelSpec(fn, dtypes, out=type(fn).__name__ == "ufunc")


def _complex_variant(fn, method):
    """``fn`` (the array module's function) for the real dtypes, ``method`` (which adds
    the array API's complex special cases) as the complex dtypes' variant: the real
    dtypes reach the ufunc with no wrapper in front."""
    return KernelSpec(fn, FLOATS + COMPLEX, variants={c: method for c in COMPLEX})


def _num(fn):
    return _spec(fn, NUMERIC)


def _flt(fn):
    return _spec(fn, FLOATS)


def _num_c(fn):
    return _spec(fn, NUMERIC + COMPLEX)


def _flt_c(fn):
    return _spec(fn, FLOATS + COMPLEX)


def _bln(fn):
    return _spec(fn, BOOL)


class MathKernels:
    """The elementwise kernels of one array module ``xp`` (NumPy or CuPy's namespace):
    one method per kernel that is not a plain ufunc; :meth:`table` maps op names to them
    and to the ufuncs used as they are.

    ``special(op) -> module``: SciPy's special functions for these arrays (default
    :func:`scipy_special`; the CUDA backend passes ``cupyx.scipy.special``'s).

    >>> import numpy as np
    >>> k = MathKernels(np)
    >>> k.floordiv(np.array([7, -7]), np.array([2, 2]))
    array([ 3, -4])
    """

    def __init__(self, xp, special=None):
        self.xp = xp
        self.special = scipy_special if special is None else special
        # SciPy's special functions are bound on the first sigmoid/erf, not at import
        self._expit = None
        self._erf = None
        self._f16 = xp.float16
        self._f32 = xp.float32

    def cast(self, x, dtype):
        """``x`` as ``dtype`` (a tapeflow DType); complex to real keeps the real part.
        Strings and numbers do not cast (TensorFlow's tf.strings.to_number/as_string do)."""
        if (x.dtype.kind == "O") != (dtype.np.kind == "O"):
            src = "string" if x.dtype.kind == "O" else x.dtype.name
            raise UnimplementedError(f"Cast {src} to {dtype.name} is not supported: strings "
                                     "and numbers do not cast into each other")
        if x.dtype.kind == "c" and not dtype.is_complex:
            x = x.real                  # TensorFlow's cast: the real part (no warning)
        return x.astype(dtype.np)

    def sign(self, x):
        """The sign of ``x``; of a complex ``x``, ``z / |z|`` as NumPy 2 defines it."""
        xp = self.xp
        if x.dtype.kind != "c" or xp.__name__ == "numpy":    # NumPy 2: z / |z|
            return xp.sign(x)
        return complex_sign(xp, x)

    def make_complex(self, re, im):
        """The complex array ``re + im j`` (complex128 from float64, else complex64)."""
        xp = self.xp
        out = xp.empty(xp.broadcast_shapes(re.shape, im.shape),
                       xp.complex128 if re.dtype == xp.float64 else xp.complex64)
        out.real = re
        out.imag = im
        return out

    def rsqrt(self, x):
        """``1 / sqrt(x)``."""
        xp = self.xp
        return xp.reciprocal(xp.sqrt(x))

    def softplus(self, x):
        """``log(1 + exp(x))``, stably (``logaddexp(0, x)``)."""
        # = max(x, 0) + log1p(exp(-|x|)), which logaddexp computes
        return self.xp.logaddexp(x.dtype.type(0), x)

    def sigmoid(self, x):
        """``1 / (1 + exp(-x))``: SciPy's expit (float16 in float32), else the formula."""
        expit = self._expit
        if expit is None:
            try:
                expit = self.special("Sigmoid").expit
            except UnimplementedError:
                expit = functools.partial(sigmoid_formula, self.xp)
            self._expit = expit
        if x.dtype == self._f16:        # SciPy has no float16 loop
            return expit(x.astype(self._f32)).astype(self._f16)
        return expit(x)

    def erf(self, x):
        """The error function (SciPy's; float16 computed in float32)."""
        erf_ = self._erf
        if erf_ is None:
            erf_ = self._erf = self.special("Erf").erf
        if x.dtype == self._f16:
            return erf_(x.astype(self._f32)).astype(self._f16)
        return erf_(x)

    def round(self, x):
        """``x`` rounded half to even, as TensorFlow; integers as they are."""
        return x if x.dtype.kind in "iu" else self.xp.rint(x)

    def quiet(self):
        """A context with NumPy's floating-point warnings off (CuPy warns about none)."""
        errstate = getattr(self.xp, "errstate", None)
        return errstate(all="ignore") if errstate else contextlib.nullcontext()

    def floordiv(self, x, y):
        """``floor(x / y)`` with the array API's special cases for one infinite operand."""
        xp = self.xp
        _check_int_divisor(x, y)
        out = xp.floor_divide(x, y)
        if x.dtype.kind == "f":
            # the array API's special cases (and IEEE's limits of x / y): one infinite,
            # one finite operand give x / y (inf // 2 is inf, -1 // inf is -0), where
            # floor(x / y) is NaN for the first and -1 for the second in NumPy and C
            inf_x, inf_y = xp.isinf(x), xp.isinf(y)
            one_inf = (inf_x != inf_y) & ~xp.isnan(x) & ~xp.isnan(y)
            if one_inf.any():
                with self.quiet():      # x / y where both are infinite: unused NaNs
                    q = xp.true_divide(x, y)
                out = xp.where(one_inf, q, out).astype(out.dtype, copy=False)
        return out

    def expm1(self, x):
        """``exp(x) - 1``; complex with the array API's (C99 cexp's) special cases."""
        xp = self.xp
        if x.dtype.kind != "c":
            return xp.expm1(x)
        # NumPy's (and CuPy's) complex expm1 is expm1(a) cos(b) - 2 sin^2(b/2) +
        # i e^a sin(b) for every input, so inf + 0j gives inf + NaN j (inf * 0) and
        # every other infinite or NaN part NaN + NaN j. The array API's special cases
        # are exp's (C99's cexp, which NumPy follows) minus one; an imaginary part 0
        # stays that 0 (e^a sin(0) overflows to NaN for a large finite a).
        out = xp.asarray(xp.expm1(x))          # a 0-d result is a scalar: make it an array
        re, im = x.real, x.imag
        finite = xp.isfinite(re) & xp.isfinite(im)
        if not finite.all():
            with self.quiet():          # exp overflows where expm1 did: no new warning
                out = xp.asarray(xp.where(finite, out, xp.exp(x) - 1))
        zero_im = im == 0
        if zero_im.any():
            out.imag = xp.where(zero_im, im, out.imag)
            # expm1(+-0 + 0j) is +0 + 0j (NumPy's formula gives -0 for -0)
            out.real = xp.where(zero_im & (re == 0), xp.zeros_like(re), out.real)
        return out

    def tanh(self, x):
        """``tanh(x)``; complex with the array API's special cases at infinite real parts."""
        xp = self.xp
        out = xp.tanh(x)
        if x.dtype.kind != "c":
            return out
        out = xp.asarray(out)
        # the array API: tanh(+-inf + bj) is +-1 + 0j with the sign of b's zero (the
        # library's 0 * sin(2b) takes sin's sign for a large finite b, and NaN for b
        # infinite or NaN may give either sign: the standard leaves that one open)
        re, im = x.real, x.imag
        inf_re = xp.isinf(re)
        if inf_re.any():
            out.real = xp.where(inf_re, xp.sign(re), out.real)
            out.imag = xp.where(inf_re, xp.copysign(xp.zeros_like(im), im), out.imag)
        return out

    def floormod(self, x, y):
        """``x mod y`` with the sign of ``y``; integer division by zero raises."""
        _check_int_divisor(x, y)
        return self.xp.remainder(x, y)

    def power(self, x, y):
        """``x ** y``; integers to negative integer powers raise, as in TensorFlow."""
        if y.dtype.kind == "i" and (y < 0).any():
            raise InvalidArgumentError("Integers to negative integer powers are not allowed")
        return self.xp.power(x, y)

    def squared_difference(self, x, y):
        """``(x - y) ** 2``."""
        d = self.xp.subtract(x, y)
        return d * d

    def add_n(self, *xs):
        """The sum of arrays of one shape."""
        out = xs[0]
        shape = out.shape
        for i, x in enumerate(xs[1:], 1):
            if x.shape != shape:
                raise InvalidArgumentError(
                    f"AddN needs inputs of one shape: inputs[0] has shape {list(shape)} but "
                    f"inputs[{i}] has shape {list(x.shape)}")
            out = self.xp.add(out, x)
        return out

    # --- layer normalisation (ops LayerNorm, LayerNormGrad) ------------------------------
    def _ln_rows(self, x, axes):
        """``x`` as a 2-d ``[rows, n]`` array with the normalised ``axes`` last (a view
        when they are the trailing axes) and the function that puts a ``[rows, n]``
        result back in ``x``'s layout."""
        nd = x.ndim
        k = len(axes)
        if tuple(axes) == tuple(range(nd - k, nd)):
            shape = x.shape
            n = 1
            for d in shape[nd - k:]:
                n *= d
            return x.reshape(-1, n), lambda y: y.reshape(shape)
        others = [i for i in range(nd) if i not in axes]
        perm = others + list(axes)
        xt = x.transpose(perm)
        tshape = xt.shape
        n = 1
        for a in axes:
            n *= x.shape[a]
        inv = [perm.index(i) for i in range(nd)]
        return xt.reshape(-1, n), lambda y: y.reshape(tshape).transpose(inv)

    def _ln_forward_rows(self, x2, out, gamma, beta, epsilon):
        """The rows of ``x2`` normalised, scaled and shifted into ``out`` (the means and
        the row sums as matrix-vector products: BLAS, not NumPy's short-row loop)."""
        xp = self.xp
        n = x2.shape[1]
        xc = xp.subtract(x2, (x2 @ xp.full(n, 1.0 / n, x2.dtype))[:, None], out=out)
        var = xp.einsum("ij,ij->i", xc, xc) / n
        xc *= (1.0 / xp.sqrt(var + epsilon)).astype(x2.dtype, copy=False)[:, None]
        xc *= gamma
        xc += beta

    def _ln_backward_rows(self, dy2, x2, out, gamma, epsilon):
        """``dx`` of the rows into ``out``; returns these rows' ``(dgamma, dbeta)``."""
        xp = self.xp
        m, n = x2.shape
        mean_v = xp.full(n, 1.0 / n, x2.dtype)
        h = x2 - (x2 @ mean_v)[:, None]
        var = xp.einsum("ij,ij->i", h, h) / n
        r = (1.0 / xp.sqrt(var + epsilon)).astype(x2.dtype, copy=False)[:, None]
        h *= r
        dbeta = xp.ones(m, x2.dtype) @ dy2
        dgamma = xp.einsum("ij,ij->j", dy2, h)
        g = xp.multiply(dy2, gamma, out=out)
        m1 = (xp.einsum("ij,ij->i", g, h) / n).astype(x2.dtype, copy=False)[:, None]
        g -= (g @ mean_v)[:, None]
        h *= m1
        g -= h
        g *= r
        return dgamma, dbeta

    def layer_norm(self, x, gamma, beta, axes, epsilon):
        """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over ``axes`` (float16
        computed in float32)."""
        dt = x.dtype
        if dt == self._f16:
            x, gamma, beta = (a.astype(self._f32) for a in (x, gamma, beta))
        if x.size == 0:
            return self.xp.empty(x.shape, dtype=dt)
        x2, back = self._ln_rows(x, axes)
        out = self.xp.empty(x2.shape, x2.dtype)
        self._ln_forward_rows(x2, out, gamma.reshape(-1), beta.reshape(-1), epsilon)
        return back(out).astype(dt, copy=False)

    def layer_norm_grad(self, dy, x, gamma, axes, epsilon):
        """``(dx, dgamma, dbeta)`` of :meth:`layer_norm`: with ``h`` the normalised
        input, ``r = 1/sqrt(var + eps)`` and ``g = dy * gamma``,
        ``dx = r (g - mean(g) - h mean(g h))``, ``dgamma = sum(dy h)``,
        ``dbeta = sum(dy)`` (sums over the axes that are not normalised)."""
        xp = self.xp
        dt = x.dtype
        if dt == self._f16:
            dy, x, gamma = (a.astype(self._f32) for a in (dy, x, gamma))
        if x.size == 0:
            z = xp.zeros(gamma.shape, dt)
            return xp.empty(x.shape, dtype=dt), z, z.copy()
        x2, back = self._ln_rows(x, axes)
        dy2, _ = self._ln_rows(dy, axes)
        out = xp.empty(x2.shape, x2.dtype)
        dgamma, dbeta = self._ln_backward_rows(dy2, x2, out, gamma.reshape(-1), epsilon)
        return (back(out).astype(dt, copy=False), dgamma.reshape(gamma.shape).astype(dt),
                dbeta.reshape(gamma.shape).astype(dt))

    # --- dot-product attention (ops DotProductAttention, DotProductAttentionGrad) -------
    def _into(self, a, b, view):
        """``a @ b`` written into ``view`` (NumPy; another array module: assigned)."""
        if self.xp.__name__ == "numpy":
            self.xp.matmul(a, b, out=view)
        else:
            view[...] = self.xp.matmul(a, b)

    def _attend(self, query, key, value, out, weights, mask, scale, neg):
        """The work of :meth:`dot_product_attention`, written into ``out`` and
        ``weights``."""
        xp = self.xp
        s = weights
        xp.matmul(query.transpose(0, 2, 1, 3), key.transpose(0, 2, 3, 1), out=s)
        if scale != 1.0:
            s *= scale
        if mask.ndim:
            xp.copyto(s, neg, where=~mask)
        s -= s.max(axis=-1, keepdims=True)
        xp.exp(s, out=s)
        s_len = s.shape[-1]
        s *= (1.0 / (s.reshape(-1, s_len) @ xp.ones(s_len, s.dtype))).reshape(
            s.shape[:-1] + (1,))
        self._into(s, value.transpose(0, 2, 1, 3), out.transpose(0, 2, 1, 3))

    def dot_product_attention(self, query, key, value, mask, scale):
        """``(out, weights)``: ``weights = softmax(scale * q k^T)`` over the keys with
        masked scores at a large negative value, ``out = weights @ v``, in the heads'
        layout ``[B, T, H, D]`` (float16 computed in float32)."""
        xp = self.xp
        dt = query.dtype
        if dt == self._f16:
            query, key, value = (a.astype(self._f32) for a in (query, key, value))
        b, t, h, _ = query.shape
        s_len, dv = key.shape[1], value.shape[3]
        out = xp.empty((b, t, h, dv), query.dtype)
        weights = xp.empty((b, h, t, s_len), query.dtype)
        if 0 in (b, t, h, s_len):
            out[...] = 0
            return out.astype(dt), weights.astype(dt)
        self._attend(query, key, value, out, weights, mask, scale,
                     -65504.0 if dt == self._f16 else -1e9)
        return out.astype(dt, copy=False), weights.astype(dt, copy=False)

    def _attend_back(self, dout, dweights, query, key, value, weights, dq, dk, dv, mask,
                     scale):
        """The work of :meth:`dot_product_attention_grad`, written into ``dq, dk, dv``."""
        xp = self.xp
        d_h = dout.transpose(0, 2, 1, 3)
        self._into(weights.swapaxes(-1, -2), d_h, dv.transpose(0, 2, 1, 3))
        dp = xp.matmul(d_h, value.transpose(0, 2, 3, 1))
        dp += dweights
        s_len = dp.shape[-1]
        rows = (dp * weights).reshape(-1, s_len) @ xp.ones(s_len, dp.dtype)
        dp -= rows.reshape(dp.shape[:-1] + (1,))
        dp *= weights
        if mask.ndim:
            xp.copyto(dp, 0, where=~mask)
        if scale != 1.0:
            dp *= scale
        self._into(dp, key.transpose(0, 2, 1, 3), dq.transpose(0, 2, 1, 3))
        self._into(dp.swapaxes(-1, -2), query.transpose(0, 2, 1, 3), dk.transpose(0, 2, 1, 3))

    def dot_product_attention_grad(self, dout, dweights, query, key, value, weights, mask,
                                   scale):
        """``(dq, dk, dv)`` of :meth:`dot_product_attention` from its outputs' gradients
        and its weights ``P``: ``dv = P^T dout``, ``dS = P (dP - sum(dP P))`` with ``dP
        = dout v^T + dweights`` (0 where masked), ``dq = scale dS k``, ``dk = scale dS^T
        q``."""
        xp = self.xp
        dt = query.dtype
        if dt == self._f16:
            dout, dweights, query, key, value, weights = (
                a.astype(self._f32) for a in (dout, dweights, query, key, value, weights))
        dq, dk, dv = (xp.empty(a.shape, query.dtype) for a in (query, key, value))
        if 0 in query.shape[:3] or key.shape[1] == 0:
            for a in (dq, dk, dv):
                a[...] = 0
            return dq.astype(dt), dk.astype(dt), dv.astype(dt)
        self._attend_back(dout, dweights, query, key, value, weights, dq, dk, dv, mask, scale)
        return (dq.astype(dt, copy=False), dk.astype(dt, copy=False),
                dv.astype(dt, copy=False))

    def table(self):
        """``{op name: KernelSpec}`` (docs/backends.md)."""
        return {**self._arithmetic_table(), **self._unary_table(), **self._logic_table(),
                "LayerNorm": KernelSpec(self.layer_norm, FLOATS, fresh=True),
                "LayerNormGrad": KernelSpec(self.layer_norm_grad, FLOATS),
                "DotProductAttention": KernelSpec(self.dot_product_attention, FLOATS),
                "DotProductAttentionGrad": KernelSpec(self.dot_product_attention_grad,
                                                      FLOATS)}

    def _arithmetic_table(self):
        """The binary arithmetic ops and the complex parts."""
        xp = self.xp
        num, flt, num_c = _num, _flt, _num_c
        return {
            "Add": num_c(xp.add),
            "Sub": num_c(xp.subtract),
            "Mul": num_c(xp.multiply),
            "RealDiv": num_c(xp.true_divide),
            "FloorDiv": num(self.floordiv),
            "FloorMod": num(self.floormod),
            "Pow": num_c(self.power),
            "Maximum": num(xp.maximum),
            "Minimum": num(xp.minimum),
            "SquaredDifference": num(self.squared_difference),
            "Atan2": flt(xp.arctan2),
            "AddN": num_c(self.add_n),
            "Neg": num_c(xp.negative),
            "Cast": KernelSpec(self.cast),
            "Complex": KernelSpec(self.make_complex, ("float32", "float64")),
            "Real": KernelSpec(xp.real, COMPLEX),
            "Imag": KernelSpec(xp.imag, COMPLEX),
            "Conj": _spec(xp.conj, COMPLEX),
        }

    def _unary_table(self):
        """The unary functions."""
        xp = self.xp
        num, flt, num_c, flt_c = _num, _flt, _num_c, _flt_c
        return {
            "Abs": num_c(xp.absolute),
            "Sign": num_c(self.sign),
            "Square": num_c(xp.square),
            "Sqrt": flt_c(xp.sqrt),
            "Rsqrt": flt_c(self.rsqrt),
            "Exp": flt_c(xp.exp),
            "Log": flt_c(xp.log),
            "Log1p": flt_c(xp.log1p),
            "Expm1": _complex_variant(xp.expm1, self.expm1),
            "Sin": flt_c(xp.sin),
            "Cos": flt_c(xp.cos),
            "Tan": flt_c(xp.tan),
            "Tanh": _complex_variant(xp.tanh, self.tanh),
            "Sigmoid": flt(self.sigmoid),
            "Softplus": flt(self.softplus),
            "Reciprocal": flt_c(xp.reciprocal),
            "Floor": flt(xp.floor),
            "Ceil": flt(xp.ceil),
            "Round": num(self.round),
            "Erf": flt(self.erf),
            "IsNan": flt_c(xp.isnan),
            "IsFinite": flt_c(xp.isfinite),
            "IsInf": flt_c(xp.isinf),
            "Asin": flt_c(xp.arcsin),
            "Acos": flt_c(xp.arccos),
            "Atan": flt_c(xp.arctan),
            "Sinh": flt_c(xp.sinh),
            "Cosh": flt_c(xp.cosh),
            "Asinh": flt_c(xp.arcsinh),
            "Acosh": flt_c(xp.arccosh),
            "Atanh": flt_c(xp.arctanh),
            "Log2": flt_c(xp.log2),
            "Log10": flt_c(xp.log10),
            "Trunc": flt(xp.trunc),
            "Signbit": flt(xp.signbit),
            "Copysign": flt(xp.copysign),
            "Hypot": flt(xp.hypot),
            "LogAddExp": flt(xp.logaddexp),
            "NextAfter": flt(xp.nextafter),
        }

    def _logic_table(self):
        """The bitwise, comparison and logical ops."""
        xp = self.xp
        num, bln = _num, _bln
        return {
            "BitwiseAnd": _spec(xp.bitwise_and, INTS + BOOL),
            "BitwiseOr": _spec(xp.bitwise_or, INTS + BOOL),
            "BitwiseXor": _spec(xp.bitwise_xor, INTS + BOOL),
            "Invert": _spec(xp.invert, INTS + BOOL),
            "LeftShift": _spec(xp.left_shift, INTS),
            "RightShift": _spec(xp.right_shift, INTS),
            # comparison and logic
            "Equal": _spec(xp.equal),               # every dtype, bool included
            "NotEqual": _spec(xp.not_equal),
            "Less": num(xp.less),
            "LessEqual": num(xp.less_equal),
            "Greater": num(xp.greater),
            "GreaterEqual": num(xp.greater_equal),
            "LogicalAnd": bln(xp.logical_and),
            "LogicalOr": bln(xp.logical_or),
            "LogicalXor": bln(xp.logical_xor),
            "LogicalNot": bln(xp.logical_not),
        }


def build(ctx):
    """The elementwise kernels for ``ctx.xp`` (a :class:`~tapeflow.plugins.BuildContext`;
    service ``special``, see :class:`MathKernels`): ``{op name: KernelSpec}``."""
    return MathKernels(ctx.xp, ctx.get("special")).table()
