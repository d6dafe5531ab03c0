"""Complex numbers on OpenCL: ``complex64`` is a ``float2`` buffer, ``complex128`` a
``double2`` one (``.x`` the real part, ``.y`` the imaginary part: NumPy's memory
layout, so host copies are plain byte copies), complex128 only on devices with fp64.

OpenCL C has no complex type: :func:`preamble` is a small complex library written
once for both precisions (``cmul_f``/``cmul_d``, ``cdiv_f``, ``cexp_f``, ...), and
:func:`expression` gives the OpenCL C expression of each elementwise op on complex
inputs for :func:`runtime.elementwise` (and elementwise fusion), as
``tapeflow_opencl.k_math.expression`` does for real ones. The formulas are NumPy's
where NumPy has its own (Smith's division scaled by the larger part of the divisor,
``expm1``, ``sign``, the repeated squaring of small integer powers) and the textbook
ones otherwise (``tanh`` is Kahan's, which keeps its accuracy for large real parts).
"""

from __future__ import annotations

import numpy as np

from . import runtime as rt

COMPLEX = ("complex64", "complex128")

#: complex dtype -> (component C type, suffix of the library's functions)
PARTS = {np.dtype(np.complex64): ("float", "_f"), np.dtype(np.complex128): ("double", "_d")}
#: complex dtype <-> its real (component) dtype
REAL_OF = {np.dtype(np.complex64): np.dtype(np.float32),
           np.dtype(np.complex128): np.dtype(np.float64)}
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}

_LIB = """
inline @T2 cmul@S(@T2 a, @T2 b) { return (@T2)(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }
inline @T2 cdiv@S(@T2 a, @T2 b) {
    @T br = fabs(b.x), bi = fabs(b.y);
    if (br >= bi) {
        if (br == (@T)0 && bi == (@T)0) return (@T2)(a.x / br, a.y / bi);
        @T rat = b.y / b.x, scl = (@T)1 / (b.x + b.y * rat);
        return (@T2)((a.x + a.y * rat) * scl, (a.y - a.x * rat) * scl);
    }
    @T rat = b.x / b.y, scl = (@T)1 / (b.y + b.x * rat);
    return (@T2)((a.x * rat + a.y) * scl, (a.y * rat - a.x) * scl);
}
inline @T cabs@S(@T2 z) { return hypot(z.x, z.y); }
inline @T2 cmuli@S(@T2 z) { return (@T2)(-z.y, z.x); }      /* i z */
inline @T2 cdivi@S(@T2 z) { return (@T2)(z.y, -z.x); }      /* z / i = -i z */
inline @T2 csign@S(@T2 z) {
    @T a = hypot(z.x, z.y);
    if (a == (@T)0) return (@T2)((@T)0, (@T)0);
    if (isinf(a)) {
        if (isinf(z.x) && isinf(z.y)) return (@T2)((@T)NAN, (@T)NAN);
        if (isinf(z.x)) return (@T2)(z.x > (@T)0 ? (@T)1 : (@T)-1, (@T)0);
        return (@T2)((@T)0, z.y > (@T)0 ? (@T)1 : (@T)-1);
    }
    return (@T2)(z.x / a, z.y / a);
}
inline @T2 cexp@S(@T2 z) {
    if (z.y == (@T)0) return (@T2)(exp(z.x), z.y);
    @T e = exp(z.x);
    return (@T2)(e * cos(z.y), e * sin(z.y));
}
inline @T2 cexpm1@S(@T2 z) {
    @T a = sin(z.y * (@T)0.5);
    return (@T2)(expm1(z.x) * cos(z.y) - (@T)2 * a * a, exp(z.x) * sin(z.y));
}
inline @T2 clog@S(@T2 z) { return (@T2)(log(hypot(z.x, z.y)), atan2(z.y, z.x)); }
inline @T2 clog1p@S(@T2 z) {
    @T re = (fabs(z.x) + fabs(z.y) < (@T)0.5)
        ? (@T)0.5 * log1p(z.x * ((@T)2 + z.x) + z.y * z.y)
        : log(hypot((@T)1 + z.x, z.y));
    return (@T2)(re, atan2(z.y, (@T)1 + z.x));
}
inline @T2 csqrt@S(@T2 z) {
    @T x = z.x, y = z.y;
    if (x == (@T)0 && y == (@T)0) return (@T2)((@T)0, y);
    if (isinf(y)) return (@T2)((@T)INFINITY, y);
    if (isnan(x)) return (@T2)(x, x);
    if (isinf(x)) {
        if (x > (@T)0) return (@T2)(x, isnan(y) ? y : copysign((@T)0, y));
        return (@T2)(isnan(y) ? y : (@T)0, copysign((@T)INFINITY, y));
    }
    /* scaled so that |x| + hypot(x, y) cannot overflow */
    @T s = (@T)1, r = (@T)1;
    if (fabs(x) > (@T)1e30 || fabs(y) > (@T)1e30) { s = (@T)0.25; r = (@T)2; }
    x *= s; y *= s;
    @T t = sqrt((fabs(x) + hypot(x, y)) * (@T)0.5);
    if (x >= (@T)0) return (@T2)(t * r, y / ((@T)2 * t) * r);
    return (@T2)(fabs(y) / ((@T)2 * t) * r, copysign(t, y) * r);
}
inline @T2 csin@S(@T2 z) { return (@T2)(sin(z.x) * cosh(z.y), cos(z.x) * sinh(z.y)); }
inline @T2 ccos@S(@T2 z) { return (@T2)(cos(z.x) * cosh(z.y), -(sin(z.x) * sinh(z.y))); }
inline @T2 csinh@S(@T2 z) { return (@T2)(sinh(z.x) * cos(z.y), cosh(z.x) * sin(z.y)); }
inline @T2 ccosh@S(@T2 z) { return (@T2)(cosh(z.x) * cos(z.y), sinh(z.x) * sin(z.y)); }
inline @T2 ctanh@S(@T2 z) {
    @T x = z.x, y = z.y;
    if (isnan(x) && y == (@T)0) return z;
    if (fabs(x) > (@T)22) {
        @T e = exp((@T)-2 * fabs(x));
        return (@T2)(copysign((@T)1, x), (@T)4 * sin(y) * cos(y) * e);
    }
    @T t = tan(y), beta = (@T)1 + t * t, s = sinh(x), rho = sqrt((@T)1 + s * s);
    @T den = (@T)1 + beta * s * s;
    return (@T2)(beta * rho * s / den, t / den);
}
inline @T2 ctan@S(@T2 z) { return cdivi@S(ctanh@S(cmuli@S(z))); }
inline @T2 casinh@S(@T2 z) {
    /* log(z + sqrt(1 + iz) sqrt(1 - iz)) (Kahan: the product keeps the branch cuts and
       the signs of zeros that sqrt(z^2 + 1) loses) on |Re z|, the real part's sign put
       back: asinh is odd, so no cancellation for Re z < 0 */
    @T x = z.x;
    z.x = fabs(x);
    @T2 w = clog@S(z + cmul@S(csqrt@S((@T2)((@T)1 - z.y, z.x)),
                              csqrt@S((@T2)((@T)1 + z.y, -z.x))));
    return (@T2)(copysign(w.x, x), z.y == (@T)0 ? z.y : w.y);   /* (real axis: real) */
}
inline @T2 casin@S(@T2 z) { return cdivi@S(casinh@S(cmuli@S(z))); }
inline @T2 cacos@S(@T2 z) {
    @T2 w = casin@S(z);
    return (@T2)(M_PI_2@F - w.x, -w.y);
}
inline @T2 catanh@S(@T2 z) { return (clog1p@S(z) - clog1p@S(-z)) * (@T)0.5; }
inline @T2 catan@S(@T2 z) { return cdivi@S(catanh@S(cmuli@S(z))); }
inline @T2 cacosh@S(@T2 z) {
    /* log(z + sqrt(z + 1) sqrt(z - 1)) with z + 1 and z - 1 of z's imaginary part itself
       (a complex 1 + 0i would turn -0 into +0, the wrong side of the cut) */
    return clog@S(z + cmul@S(csqrt@S((@T2)(z.x + (@T)1, z.y)),
                             csqrt@S((@T2)(z.x - (@T)1, z.y))));
}
inline @T2 cpow@S(@T2 a, @T2 b) {
    if (b.x == (@T)0 && b.y == (@T)0) return (@T2)((@T)1, (@T)0);
    if (a.x == (@T)0 && a.y == (@T)0) {
        if (b.x > (@T)0 && b.y == (@T)0) return (@T2)((@T)0, (@T)0);
        return (@T2)((@T)NAN, (@T)NAN);
    }
    if (b.y == (@T)0 && b.x == rint(b.x) && fabs(b.x) <= (@T)100) {
        /* NumPy: small integer powers by repeated squaring */
        long n = (long)fabs(b.x);
        @T2 r = (@T2)((@T)1, (@T)0), p = a;
        while (n) { if (n & 1) r = cmul@S(r, p); p = cmul@S(p, p); n >>= 1; }
        return b.x < (@T)0 ? cdiv@S((@T2)((@T)1, (@T)0), r) : r;
    }
    return cexp@S(cmul@S(b, clog@S(a)));
}
"""


def preamble(dtype) -> str:
    """The complex library for the complex ``dtype`` (float2 or double2 functions)."""
    t, s = PARTS[np.dtype(dtype)]
    return (_LIB.replace("@T2", t + "2").replace("@T", t).replace("@S", s)
            .replace("@F", "_F" if t == "float" else ""))


def _v2(dtype):
    return PARTS[np.dtype(dtype)][0] + "2"


#: unary complex -> complex ops: the library function (applied to x0)
_UNARY = {
    "Exp": "cexp", "Expm1": "cexpm1", "Log": "clog", "Log1p": "clog1p", "Sqrt": "csqrt",
    "Sin": "csin", "Cos": "ccos", "Tan": "ctan", "Sinh": "csinh", "Cosh": "ccosh",
    "Tanh": "ctanh", "Asin": "casin", "Acos": "cacos", "Atan": "catan", "Asinh": "casinh",
    "Acosh": "cacosh", "Atanh": "catanh", "Sign": "csign",
}
#: unary complex -> complex ops written as expressions ({s}: the library's suffix, {v}: the
#: vector type)
_UNARY_EXPR = {
    "Neg": "-x0",
    "Square": "cmul{s}(x0, x0)",
    "Reciprocal": "cdiv{s}(({v})(({t})1, ({t})0), x0)",
    "Rsqrt": "cdiv{s}(({v})(({t})1, ({t})0), csqrt{s}(x0))",
    "Log2": "clog{s}(x0) * {log2e}",
    "Log10": "clog{s}(x0) * {log10e}",
    "Conj": "({v})(x0.x, -x0.y)",
    "Identity": "x0",
}
#: binary complex -> complex ops
_BINARY = {
    "Add": "x0 + x1", "Sub": "x0 - x1", "Mul": "cmul{s}(x0, x1)", "RealDiv": "cdiv{s}(x0, x1)",
    "Pow": "cpow{s}(x0, x1)",
}
#: complex -> real (component dtype) ops
_TO_REAL = {"Real": "x0.x", "Imag": "x0.y", "Abs": "cabs{s}(x0)"}
#: complex -> bool ops
_TO_BOOL = {
    "IsNan": "isnan(x0.x) || isnan(x0.y)",
    "IsFinite": "isfinite(x0.x) && isfinite(x0.y)",
    "IsInf": "isinf(x0.x) || isinf(x0.y)",
}
_COMPARE = {"Equal": "x0.x == x1.x && x0.y == x1.y", "NotEqual": "x0.x != x1.x || x0.y != x1.y"}

#: every elementwise op with a complex kernel here, with the dtypes of its first input
OPS = (tuple(_UNARY) + tuple(_UNARY_EXPR) + tuple(_BINARY) + tuple(_TO_REAL) + tuple(_TO_BOOL)
       + tuple(_COMPARE))


#: ops whose OpenCL kernels only move, select, fill or report the shape of elements
#: (any C type): they take complex64/complex128 as they are (:func:`declare`)
NATIVE = frozenset({"Reshape", "BroadcastTo", "Transpose", "ExpandDims", "Squeeze",
                    "ConcatV2", "Pack", "Unpack", "SplitV", "Tile", "PadV2", "MirrorPad",
                    "Slice", "StridedSlice", "StridedSliceGrad", "GatherV2", "GatherNd",
                    "Identity", "StopGradient", "Shape", "Size", "Rank", "SelectV2", "Fill",
                    "ZerosLike", "OnesLike", "Eye", "RandomShuffle", "AddN", "OneHot"})

#: ops that are linear in their complex input and act on each part alone (sums of
#: selected elements): their real kernel runs on the real and the imaginary parts, and
#: the two results are joined (:func:`by_parts`), exactly as a complex sum would add them
BY_PARTS = frozenset({"ScatterNd", "UnsortedSegmentSum"})


def _part(a, which):
    real = REAL_OF[np.dtype(a.dtype)]
    return rt.elementwise(f"x0.{which}", real, a)


def by_parts(fn):
    """The complex kernel of the real kernel ``fn`` of a :data:`BY_PARTS` op: ``fn`` on
    the real parts and on the imaginary parts of its complex array arguments, the two
    results joined into one complex array."""
    def kernel(*args, **attrs):
        cx = [i for i, a in enumerate(args) if getattr(getattr(a, "dtype", None), "kind", "")
              == "c" and hasattr(a, "queue")]
        parts = []
        for which in "xy":
            a2 = list(args)
            for i in cx:
                a2[i] = _part(args[i], which)
            parts.append(fn(*a2, **attrs))
        re, im = parts
        c = COMPLEX_OF[np.dtype(re.dtype)]
        return rt.elementwise(f"({_v2(c)})(x0, x1)", c, re, im)
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel") + "_by_parts"
    kernel.__wrapped__ = fn
    return kernel


def where_complex(fn, c):
    """``Where`` (the coordinates of non-zero elements) of a complex array ``c``: ``fn``
    (the real kernel) on the bool array "either part is non-zero"."""
    return fn(rt.elementwise("x0.x != 0 || x0.y != 0", np.bool_, c))


def declare(op_name, spec):
    """``spec`` (a ``KernelSpec`` of a kernel module's table) with complex64/complex128
    added to its dtypes where the op takes complex on OpenCL beyond the kernels that
    declare it themselves: the ops of :data:`NATIVE` as they are, those of
    :data:`BY_PARTS` and ``Where`` through variants; else ``spec`` unchanged."""
    dts = spec.dtypes
    if dts is None or any(d.name == "complex64" for d in dts):
        return spec
    if op_name in NATIVE:
        return rt.respec(spec, dtypes=dts + COMPLEX)
    if op_name in BY_PARTS or op_name == "Where":
        fn = (by_parts(spec.fn) if op_name in BY_PARTS else
              rt.bind(where_complex, "where_complex", spec.fn))
        variants = dict(spec.variants or {})
        variants.update({np.dtype(c): fn for c in COMPLEX})
        return rt.respec(spec, dtypes=dts + COMPLEX, variants=variants)
    return spec


def cast_expr(src, to):
    """OpenCL C converting ``x0`` (of the dtype ``src``) to ``to`` where either is
    complex, as the ``cpu`` backend casts: complex -> real or bool takes the real part
    (TensorFlow's rule), real -> complex gets a zero imaginary part."""
    src, to = np.dtype(src), np.dtype(to)
    if src.kind == "c" and to.kind == "c":
        return f"convert_{_v2(to)}(x0)"
    if src.kind == "c":
        return "x0.x != 0" if to == np.bool_ else "x0.x"
    t = PARTS[to][0]
    return f"({t}2)(({t})x0, ({t})0)"


def expression(op_name, dtypes, attrs=None):
    """``(OpenCL C expression, result dtype, preamble)`` of the elementwise op
    ``op_name`` on complex inputs of ``dtypes`` (all the same complex dtype; for
    ``Complex``, two equal real dtypes; for ``Cast``, complex on either side), or None."""
    dts = tuple(np.dtype(d) for d in dtypes)
    if not dts:
        return None
    x = dts[0]
    if op_name == "Cast":
        if len(dts) != 1 or attrs is None or "dtype" not in attrs:
            return None
        to = np.dtype(getattr(attrs["dtype"], "np", attrs["dtype"]))
        if x.kind != "c" and to.kind != "c":
            return None
        if to == x:
            return "x0", x, ""
        ok = {np.dtype(d) for d in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                    "uint16", "uint32", "uint64", "float32", "float64",
                                    "complex64", "complex128")}
        if x not in ok or to not in ok:
            return None
        return cast_expr(x, to), to, ""
    if op_name == "Complex":
        if len(dts) == 2 and dts[0] == dts[1] and dts[0] in COMPLEX_OF:
            c = COMPLEX_OF[dts[0]]
            return f"({_v2(c)})(x0, x1)", c, ""
        return None
    if x not in PARTS or any(d != x for d in dts):
        return None
    t, s = PARTS[x]
    f = "_F" if t == "float" else ""
    fmt = {"s": s, "v": t + "2", "t": t, "log2e": "M_LOG2E" + f, "log10e": "M_LOG10E" + f}
    pre = preamble(x)
    if len(dts) == 1:
        if op_name in _UNARY:
            return f"{_UNARY[op_name]}{s}(x0)", x, pre
        if op_name in _UNARY_EXPR:
            return _UNARY_EXPR[op_name].format(**fmt), x, pre
        if op_name in _TO_REAL:
            return _TO_REAL[op_name].format(**fmt), REAL_OF[x], pre
        if op_name in _TO_BOOL:
            return _TO_BOOL[op_name], np.dtype(np.bool_), ""
    if len(dts) == 2:
        if op_name in _BINARY:
            return _BINARY[op_name].format(**fmt), x, pre
        if op_name in _COMPARE:
            return _COMPARE[op_name], np.dtype(np.bool_), ""
    return None
