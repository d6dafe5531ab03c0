"""The CPU backend's native kernels (issue 48): convolution, its filter gradient and
matmul as register-blocked SIMD GEMMs in C, over NumPy arrays.

The C extension ``tapeflow_cpu_numpy._cpukernels`` (``_c/``; its header ``cpukernels.h``
describes the design) is compiled when the backend is installed, if a C compiler is
there; without it this module says so (:func:`available` is False, :func:`reason` says
why) and tapeflow keeps its NumPy kernels. Every function here takes NumPy arrays,
checks them, and returns a fresh float32 array -- or ``None`` for what it does not
handle (another dtype, an empty array, an activation it does not know, a size, stride,
pad, dilation or window over :data:`LIMIT`, 2**24), so that the caller falls back to its
NumPy path. Nothing is ever written into an input.

- The convolution forward is an indirect GEMM in NHWC (as XNNPACK does it): one pointer
  per output pixel and filter tap to the input pixel's channels (a shared zero row for
  the padding), no im2col copy; the bias and activation are applied in registers.
- The filter gradient is a GEMM over the N*Ho*Wo pixels, in chunks, one partial sum
  per thread.
- The fused optimizer updates (:func:`apply_adam`, ... ``OPTIMIZER_UPDATES``) run in
  one pass over memory, bitwise ``tapeflow.kernels.optim``'s NumPy kernels (the same
  float32 operations in the same order, no fused multiply-add); they return the
  variable and slots, fresh or (``inplace=True``) the inputs themselves, updated.
- The micro-kernels exist for AVX-512F (8x16, 8x32), AVX2+FMA (6x16) and in portable
  C, chosen at run time; :func:`set_isa` (or ``TAPEFLOW_CPU_ISA`` at import) forces one,
  ``TAPEFLOW_CPU_NATIVE=0`` turns the library off.
- The work runs on a small persistent thread pool of its own (:func:`set_num_threads`;
  default ``os.cpu_count()``), without the GIL.

>>> import numpy as np
>>> from tapeflow_cpu_numpy import native
>>> x = np.ones((1, 4, 4, 2), np.float32)
>>> w = np.ones((3, 3, 2, 5), np.float32)
>>> y = native.conv2d(x, w, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), act="Relu")
>>> y is None or (y.shape == (1, 4, 4, 5) and float(y[0, 1, 1, 0]) == 18.0)
True

(``y`` is None where the library is not built: the caller then runs NumPy's path.)
"""

import os
import sys
import warnings

import numpy as np

try:
    from . import _cpukernels as _ck
    _REASON = ""
except ImportError as exc:          # not built: no C compiler at install
    _ck = None
    _REASON = (f"the C extension tapeflow_cpu_numpy._cpukernels is not built ({exc}); "
               "reinstall the backend with a C compiler (pip install -e backends/cpu_numpy)")

if _ck is not None and os.environ.get("TAPEFLOW_CPU_NATIVE", "").strip() == "0":
    _REASON = "turned off by the environment (TAPEFLOW_CPU_NATIVE=0)"

__all__ = ["available", "reason", "isa", "isas", "set_isa", "isa_forced", "set_num_threads",
           "get_num_threads", "conv2d", "conv2d_backprop_filter", "matmul",
           "OPTIMIZER_UPDATES", "apply_gradient_descent", "apply_momentum", "apply_adam",
           "apply_rms_prop", "apply_centered_rms_prop", "apply_keras_rms_prop",
           "apply_keras_centered_rms_prop", "apply_adagrad", "max_pool", "max_pool_grad",
           "avg_pool", "avg_pool_grad", "relu_grad"]

#: the activation names conv2d fuses, and their codes in the C library
ACTIVATIONS = {None: 0, "Relu": 1, "Relu6": 2, "LeakyRelu": 3, "Elu": 4}


def available() -> bool:
    """True when the native kernels are built and in use."""
    return _ck is not None and not _REASON


def reason() -> str:
    """Why the native kernels are not in use ("" when they are)."""
    return _REASON


def isas() -> list:
    """The instruction-set variants this CPU runs, best first (``[]`` without the
    library): among ``"avx512"``, ``"avx2"``, ``"portable"``."""
    return list(_ck.isas()) if _ck is not None else []


def isa() -> str:
    """The variant in use (``""`` without the library)."""
    return _ck.get_isa() if _ck is not None else ""


#: whether the user chose the variant (set_isa(name), TAPEFLOW_CPU_ISA), not the default
_FORCED = {"isa": False}


def isa_forced() -> bool:
    """True when the variant in use was chosen by the user (:func:`set_isa` with a name,
    ``TAPEFLOW_CPU_ISA``), False for the default (the best): the CPU backend routes
    work to the ``"portable"`` variant only when forced (docs/cpu-kernels.md)."""
    return _FORCED["isa"]


def set_isa(name=None):
    """Use the variant ``name`` (one of :func:`isas`), or the best one for None."""
    if _ck is None:
        return
    if name is None:
        _ck.set_isa(_ck.isas()[0])
        _FORCED["isa"] = False
        return
    if name not in _ck.isas():
        raise errors.InvalidArgumentError(
            f"set_isa: {name!r} is not a kernel variant this CPU runs; choose one of "
            f"{_ck.isas()} (or None for the best)")
    _ck.set_isa(name)
    _FORCED["isa"] = True


def set_num_threads(n):
    """Run the kernels on ``n`` threads (the caller's and ``n - 1`` workers)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= 256:
        raise errors.InvalidArgumentError(
            f"set_num_threads: the number of threads must be an int in [1, 256], got {n!r}")
    if _ck is not None:
        _ck.set_num_threads(int(n))


def get_num_threads() -> int:
    """The threads the kernels run on (1 without the library)."""
    return _ck.get_num_threads() if _ck is not None else 1


def _init():
    if _ck is None:
        return
    _ck.set_num_threads(max(1, min(os.cpu_count() or 1, 256)))
    want = os.environ.get("TAPEFLOW_CPU_ISA", "").strip()
    if want:
        if want in _ck.isas():
            _ck.set_isa(want)
            _FORCED["isa"] = True
        else:
            warnings.warn(f"the environment variable TAPEFLOW_CPU_ISA={want!r} (read when "
                          "tapeflow_cpu_numpy.native was imported) is not a kernel variant "
                          f"this CPU runs ({_ck.isas()}); using {_ck.get_isa()!r}: unset it "
                          "or choose one of those", RuntimeWarning, stacklevel=_user_level())


def _user_level():
    """The ``stacklevel`` of the first frame outside tapeflow, its backends and the
    import machinery (the user's ``import``), for a warning raised while importing."""
    frame, level = sys._getframe(2), 2          # (the caller of the warn's caller)
    while frame is not None and (frame.f_code.co_filename.startswith(_OURS)
                                 or any(f"{os.sep}{d}{os.sep}" in frame.f_code.co_filename
                                        for d in ("tapeflow", "importlib"))):
        # (warnings counts no frame of the import machinery: neither do we)
        level += not frame.f_code.co_filename.startswith("<frozen importlib")
        frame = frame.f_back
    return level if frame is not None else 1


_OURS = (os.path.dirname(__file__) + os.sep, "<frozen importlib")


_init()


#: the largest size, stride, dilation or pad the C library takes (module.c GEOM_LIMIT):
#: a geometry beyond it is left to the NumPy path (the functions return None)
LIMIT = 1 << 24


def _ints(op, name, value, count, low):
    """``value`` as a tuple of ``count`` ints >= ``low`` (an error naming ``op`` else),
    or None when one is over :data:`LIMIT` (the NumPy path's case)."""
    try:
        vals = tuple(value)
    except TypeError:
        vals = None
    if (vals is None or len(vals) != count
            or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in vals)):
        raise errors.InvalidArgumentError(
            f"{op}: {name} must be {count} ints, got {value!r}", op=op)
    if any(v < low for v in vals):
        raise errors.InvalidArgumentError(
            f"{op}: {name} must be >= {low}, got {vals}", op=op)
    return None if any(v > LIMIT for v in vals) else tuple(int(v) for v in vals)


def _geometry(op, strides, pads, dilations, *sizes):
    """``(sh, sw), (pt, pb, pl, pr), (dh, dw)`` checked, or None where one of them or of
    the spatial ``sizes`` (h, w, kh, kw) is over :data:`LIMIT`."""
    geom = (_ints(op, "strides", strides, 2, 1), _ints(op, "pads", pads, 4, 0),
            _ints(op, "dilations", dilations, 2, 1))
    return None if None in geom or max(sizes) > LIMIT else geom


def _f32(op, name, a, ndim):
    """``a`` as an aligned C-contiguous float32 array, or None (not float32, empty);
    an error for another number of dimensions."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        return None
    if a.ndim != ndim:
        raise errors.InvalidArgumentError(
            f"{op}: {name} must be {ndim}-d, got shape {a.shape} ({a.dtype})", op=op)
    if a.size == 0:
        return None
    return np.require(a, np.float32, ["C", "A"])


def _extent(op, size, k, s, d, p0, p1, axis, shapes):
    eff = (k - 1) * d + 1
    if eff > size + p0 + p1:
        raise errors.InvalidArgumentError(
            f"{op}: the filter, dilated to {eff} along {axis}, is larger than the padded "
            f"input ({size} + {p0} + {p1}); {shapes}: use a smaller filter or dilation, or "
            "more padding", op=op)
    return (size + p0 + p1 - eff) // s + 1


def _run(op, fn, *args):
    try:
        fn(*args)
    except MemoryError:
        raise errors.ResourceExhaustedError(
            f"{op}: out of memory for the native kernel's buffers", op=op) from None
    except ValueError as exc:        # the C library's own checks (native.py checks first)
        raise errors.InvalidArgumentError(f"{op}: {exc}", op=op) from None


def conv2d(x, w, strides, pads, dilations, bias=None, act=None, alpha=0.2):
    """The 2-d convolution (cross-correlation) of NHWC ``x`` with HWIO ``w``, plus
    ``bias``, then ``act`` (None, "Relu", "Relu6", "LeakyRelu" with ``alpha``, "Elu"):
    a fresh (n, ho, wo, o) float32 array, or None where it does not apply.

    ``strides`` (sh, sw), ``pads`` (pt, pb, pl, pr), ``dilations`` (dh, dw);
    ho = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1, and wo the same way.
    """
    op = "Conv2D"
    if not available() or act not in ACTIVATIONS:
        return None
    x4, w4 = _f32(op, "the input", x, 4), _f32(op, "the filter", w, 4)
    b1 = None if bias is None else _f32(op, "the bias", bias, 1)
    if x4 is None or w4 is None or (bias is not None and b1 is None):
        return None
    n, h, wd, c = x4.shape
    kh, kw, wc, o = w4.shape
    geom = _geometry(op, strides, pads, dilations, h, wd, kh, kw)
    if geom is None:
        return None
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = geom
    shapes = f"input {x4.shape} float32, filter {w4.shape} float32"
    if wc != c:
        raise errors.InvalidArgumentError(
            f"{op}: the filter's input channels ({wc}) are not the input's ({c}); {shapes}: "
            "the filter must be (kh, kw, in_channels, out_channels)", op=op)
    if b1 is not None and b1.shape != (o,):
        raise errors.InvalidArgumentError(
            f"{op}: the bias has shape {b1.shape} for {o} output channels; {shapes}", op=op)
    ho = _extent(op, h, kh, sh, dh, pt, pb, "the height", shapes)
    wo = _extent(op, wd, kw, sw, dw, pl, pr, "the width", shapes)
    try:
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise errors.InvalidArgumentError(f"{op}: alpha must be a float, got {alpha!r}",
                                          op=op) from None
    out = np.empty((n, ho, wo, o), np.float32)
    _run(op, _ck.conv2d, x4, w4, b1, out, sh, sw, pt, pb, pl, pr, dh, dw, ACTIVATIONS[act],
         alpha)
    return out


def conv2d_backprop_filter(x, dy, ksize, strides, pads, dilations):
    """The gradient of :func:`conv2d` (without bias and activation) with respect to its
    filter: dw[i, j, c, o] = sum over (n, y, x) of
    x[n, y*sh + i*dh - pt, x*sw + j*dw - pl, c] * dy[n, y, x, o] (zero outside the
    image), a fresh (kh, kw, c, o) float32 array, or None where it does not apply."""
    op = "Conv2DBackpropFilter"
    if not available():
        return None
    x4, d4 = _f32(op, "the input", x, 4), _f32(op, "dy", dy, 4)
    ks = _ints(op, "ksize", ksize, 2, 1)
    geom = _geometry(op, strides, pads, dilations, *(x4.shape[1:3] if x4 is not None else ()),
                     *(ks or (LIMIT + 1,)))
    if x4 is None or d4 is None or geom is None:
        return None
    (kh, kw), ((sh, sw), (pt, pb, pl, pr), (dh, dw)) = ks, geom
    n, h, wd, c = x4.shape
    o = d4.shape[3]
    shapes = f"input {x4.shape} float32, dy {d4.shape} float32, ksize {(kh, kw)}"
    ho = _extent(op, h, kh, sh, dh, pt, pb, "the height", shapes)
    wo = _extent(op, wd, kw, sw, dw, pl, pr, "the width", shapes)
    if d4.shape[:3] != (n, ho, wo):
        raise errors.InvalidArgumentError(
            f"{op}: dy must be {(n, ho, wo, o)} for this input, filter size, strides, pads "
            f"and dilations; {shapes}", op=op)
    out = np.empty((kh, kw, c, o), np.float32)
    _run(op, _ck.conv2d_backprop_filter, x4, d4, out, sh, sw, pt, pb, pl, pr, dh, dw)
    return out


def _operand(a, transposed):
    """(C-contiguous array, transposed flag): an F-contiguous ``a`` is read as the
    C-contiguous ``a.T`` with the flag flipped (no copy)."""
    if not a.flags.c_contiguous and a.flags.f_contiguous and a.flags.aligned:
        return a.T, not transposed
    return np.require(a, np.float32, ["C", "A"]), transposed


def matmul(a, b, transpose_a=False, transpose_b=False):
    """``op(a) @ op(b)`` for 2-d float32 ``a`` and ``b`` (op: the transpose where
    asked): a fresh float32 array, or None where it does not apply."""
    op = "MatMul"
    if not available():
        return None
    a2, b2 = _f32(op, "a", a, 2), _f32(op, "b", b, 2)
    if a2 is None or b2 is None:
        return None
    ta, tb = bool(transpose_a), bool(transpose_b)
    m, k = a2.shape[::-1] if ta else a2.shape
    kb, n = b2.shape[::-1] if tb else b2.shape
    if k != kb:
        raise errors.InvalidArgumentError(
            f"{op}: the inner dimensions differ: a {a2.shape} (transpose_a={ta}) and b "
            f"{b2.shape} (transpose_b={tb}), float32: a's columns must match b's rows",
            op=op)
    a2, ta = _operand(a2, ta)
    b2, tb = _operand(b2, tb)
    out = np.empty((m, n), np.float32)
    _run(op, _ck.matmul, a2, b2, out, ta, tb)
    return out


# --- pooling (pooling.c) -------------------------------------------------------------
_POOL_KINDS = {"MaxPool": 0, "MaxPoolGrad": 1, "AvgPool": 2, "AvgPoolGrad": 3}


def _pool_geometry(op, shape, ksize, strides, pads):
    """``((kh, kw), (sh, sw), pads, (ho, wo))`` of a pooling of the NHWC ``shape``, or
    None where the library does not handle it (a pad not smaller than the window, an
    empty output, a value over :data:`LIMIT`: the NumPy kernel's cases)."""
    ks = _ints(op, "ksize", ksize, 2, 1)
    _, h, w, _ = shape
    geom = _geometry(op, strides, pads, (1, 1), h, w, *(ks or (LIMIT + 1,)))
    if geom is None:
        return None
    (kh, kw), ((sh, sw), (pt, pb, pl, pr), _) = ks, geom
    if max(pt, pb) >= kh or max(pl, pr) >= kw:
        return None
    if kh > h + pt + pb or kw > w + pl + pr:
        return None
    ho, wo = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    return (kh, kw), (sh, sw), (pt, pb, pl, pr), (ho, wo)


def _pool(op, ins, out, geom):
    (kh, kw), (sh, sw), pads, _ = geom
    _run(op, _ck.pool, _POOL_KINDS[op], tuple(ins), out, kh, kw, sh, sw, *pads)
    return out


def _pool_outputs(op, shape, arrays, ho, wo):
    """Check that each of ``arrays`` ({name: array}) is (n, ho, wo, c) for an input of
    the NHWC ``shape``."""
    n, _, _, c = shape
    for name, a in arrays.items():
        if a.shape != (n, ho, wo, c):
            raise errors.InvalidArgumentError(
                f"{op}: {name} must be {(n, ho, wo, c)} for an input {shape} and this "
                f"window, strides and padding, got {a.shape} (float32)", op=op)


def max_pool(x, ksize, strides, pads):
    """The maximum of each window of the NHWC float32 ``x`` (``ksize`` (kh, kw),
    ``strides`` (sh, sw), ``pads`` (pt, pb, pl, pr), the padding -inf; a NaN in a window
    makes its maximum NaN): a fresh (n, ho, wo, c) float32 array, ho = (h + pt + pb -
    kh) // sh + 1 (wo the same way), or None where it does not apply (another dtype, an
    empty array or output, a pad not smaller than the window).

    >>> import numpy as np
    >>> from tapeflow_cpu_numpy import native
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    >>> y = native.max_pool(x, (2, 2), (2, 2), (0, 0, 0, 0))
    >>> y is None or y[0, :, :, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    True
    """
    return _pool_forward("MaxPool", x, ksize, strides, pads)


def max_pool_grad(x, y, dy, ksize, strides, pads):
    """The gradient of :func:`max_pool`: ``dy`` routed to each window's FIRST element
    equal to ``y`` (row-major window order, the padding's -inf included: a window whose
    maximum is -inf and whose first position is padding routes nothing, nor does one
    whose maximum is NaN), summed where windows overlap -- NumPy's kernel
    (``NNKernels.max_pool_grad``) up to the order of those sums and the sign of zero
    (docs/cpu-kernels.md, "Pooling"): a fresh array of ``x``'s shape, or None."""
    op = "MaxPoolGrad"
    if not available():
        return None
    x4, y4, d4 = (_f32(op, name, a, 4) for name, a in (("x", x), ("y", y), ("dy", dy)))
    geom = None if x4 is None else _pool_geometry(op, x4.shape, ksize, strides, pads)
    if geom is None or y4 is None or d4 is None:
        return None
    _pool_outputs(op, x4.shape, {"y": y4, "dy": d4}, *geom[3])
    return _pool(op, (x4, y4, d4), np.empty(x4.shape, np.float32), geom)


def avg_pool(x, ksize, strides, pads):
    """The mean of each window's valid elements (the padding not counted) of the NHWC
    float32 ``x``, the sum divided by the count last as NumPy's kernel does: a fresh
    (n, ho, wo, c) float32 array (see :func:`max_pool`), or None."""
    return _pool_forward("AvgPool", x, ksize, strides, pads)


def _pool_forward(op, x, ksize, strides, pads):
    """:func:`max_pool` or :func:`avg_pool` (``op``): the checks, the output, the call."""
    x4 = _f32(op, "the input", x, 4) if available() else None
    geom = None if x4 is None else _pool_geometry(op, x4.shape, ksize, strides, pads)
    if geom is None:
        return None
    n, _, _, c = x4.shape
    return _pool(op, (x4,), np.empty((n, *geom[3], c), np.float32), geom)


def avg_pool_grad(dy, input_shape, ksize, strides, pads):
    """The gradient of :func:`avg_pool` for an input of the NHWC ``input_shape``: each
    window's ``dy / count`` added to its valid elements: a fresh float32 array of
    ``input_shape``, or None."""
    op = "AvgPoolGrad"
    d4 = _f32(op, "dy", dy, 4) if available() else None
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) != 4 or min(shape) < 0:
        raise errors.InvalidArgumentError(
            f"{op}: input_shape must be 4 non-negative ints (n, h, w, c), got "
            f"{input_shape!r}", op=op)
    if d4 is None or not min(shape):
        return None
    geom = _pool_geometry(op, shape, ksize, strides, pads)
    if geom is None:
        return None
    _pool_outputs(op, shape, {"dy": d4}, *geom[3])
    return _pool(op, (d4,), np.empty(shape, np.float32), geom)


# --- the fused optimizer updates (optim.c) ----------------------------------------------
#: the update kinds of the C library (cpukernels.h OPT_*): {function name: (code, number
#: of arrays in, out)}
_UPDATES = {"apply_gradient_descent": (0, 2, 1), "apply_momentum": (1, 3, 2),
            "apply_adam": (2, 4, 3), "apply_rms_prop": (3, 4, 3),
            "apply_centered_rms_prop": (4, 5, 4), "apply_keras_rms_prop": (5, 3, 2),
            "apply_keras_centered_rms_prop": (6, 4, 3), "apply_adagrad": (7, 3, 2),
            "relu_grad": (8, 2, 1)}
_F32 = np.dtype(np.float32)
#: the names of the fused optimizer updates this module has
OPTIMIZER_UPDATES = tuple(k for k in _UPDATES if k.startswith("apply_"))


def _coef(op, name, value):
    """A coefficient as a Python float (the C library rounds it to float32 once, as
    NumPy's float32 ufuncs round a Python float)."""
    if type(value) is float:
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise errors.InvalidArgumentError(
            f"{op}: the coefficient {name} must be a real number or a 0-d array, got "
            f"{value!r}", op=op)
    return float(value)


def _update(fn, arrays, coefs, flag, inplace):
    """Run the update ``fn`` (a key of ``_UPDATES``) over ``arrays`` with the
    coefficients ``coefs`` ({name: value}, in the C library's order): its outputs (the
    first arrays themselves with ``inplace``, else fresh ones), or None (the library not
    available, an array not a C-contiguous aligned float32 ndarray, empty, or ``inplace``
    over inputs that share memory: the caller's NumPy path). Arrays of different shapes,
    or read-only ones to update in place, are an error."""
    code, n_in, n_out = _UPDATES[fn]
    if _ck is None or _REASON:
        return None
    op = "".join(p.title() for p in fn.split("_"))       # (ApplyAdam...)
    shape = getattr(arrays[0], "shape", None)
    for a in arrays:
        if not (isinstance(a, np.ndarray) and a.dtype == _F32):
            return None
        flags = a.flags
        if not (flags.c_contiguous and flags.aligned):
            return None
        if inplace and not flags.writeable and any(a is x for x in arrays[:n_out]):
            raise errors.InvalidArgumentError(
                f"{op}: an array to update in place is read-only (shape {a.shape}, "
                "float32): pass writable arrays, or inplace=False for new ones", op=op)
        if a.shape != shape:
            raise errors.InvalidArgumentError(
                f"{op}: every array must have the variable's shape {shape}, got "
                f"{[x.shape for x in arrays]} (float32): the slots and the gradient are "
                "updated element by element", op=op)
    if not arrays[0].size:
        return None
    s = [_coef(op, k, v) for k, v in coefs.items()]
    s += [0.0] * (4 - len(s))
    outs = arrays[:n_out] if inplace else tuple(np.empty_like(a) for a in arrays[:n_out])
    try:
        done = _ck.optim(code, len(shape), arrays, outs, *s, bool(flag))
    except ValueError as exc:          # (a read-only array to update in place...)
        raise errors.InvalidArgumentError(f"{op}: {exc}", op=op) from None
    if not done:                       # in place over inputs that share memory
        return None
    return outs[0] if n_out == 1 else tuple(outs)


def relu_grad(dy, x, out=None):
    """``dy * (x > 0)`` in one pass (the ReLU gradient; bitwise NumPy's, NaN and -0.0
    included): a fresh array, ``dy`` itself updated when ``out is dy``, or None where it
    does not apply (another dtype, a strided array, ``out`` another array than ``dy``:
    the caller's NumPy path).

    >>> import numpy as np
    >>> from tapeflow_cpu_numpy import native
    >>> g = native.relu_grad(np.float32([1, 2, 3]), np.float32([-1, 0, 5]))
    >>> g if g is not None else np.float32([0, 0, 3])       # (None: not built here)
    array([0., 0., 3.], dtype=float32)
    """
    if (out is not None and out is not dy) or getattr(dy, "shape", None) != getattr(
            x, "shape", ()):
        return None             # (into x, or broadcasting shapes: NumPy's kernel)
    return _update("relu_grad", (dy, x), {}, False, out is dy)


def apply_gradient_descent(var, grad, lr, inplace=False):
    """``var - grad * lr``: the new variable (``var`` itself, updated, with ``inplace``),
    or None where it does not apply (see :func:`apply_adam`)."""
    return _update("apply_gradient_descent", (var, grad), {"lr": lr}, False, inplace)


def apply_momentum(var, accum, grad, lr, mom_lr, momentum=0.0, use_nesterov=False,
                   inplace=False):
    """``accum = accum * momentum + grad``; ``var -= accum * lr`` (Nesterov:
    ``var -= grad * lr + accum * mom_lr``): ``(var, accum)``, or None."""
    return _update("apply_momentum", (var, accum, grad),
                   {"lr": lr, "mom_lr": mom_lr, "momentum": momentum}, use_nesterov, inplace)


def apply_adam(var, m, v, grad, lr_t, beta1=0.9, beta2=0.999, epsilon=1e-8, inplace=False):
    """Adam's update in one pass over memory: ``m += (g - m) * (1 - beta1)``;
    ``v += (g*g - v) * (1 - beta2)``; ``var -= m * lr_t / (sqrt(v) + epsilon)``, each
    operation in float32 in this order (the coefficients rounded to float32 once), so
    bitwise ``tapeflow.kernels.optim.OptimKernels(numpy).apply_adam``'s result.

    ``var``, ``m``, ``v``, ``grad``: float32 arrays of one shape. Returns ``(var, m, v)``:
    fresh arrays (the inputs untouched), or with ``inplace=True`` the inputs themselves,
    updated; None where it does not apply (another dtype, not C-contiguous, empty, the
    library not available; ``inplace`` over arrays that share memory), so that the
    caller runs its NumPy path. Arrays of different shapes are an error.

    >>> import numpy as np
    >>> from tapeflow_cpu_numpy import native
    >>> var, m, v = (np.ones(3, np.float32) for _ in range(3))
    >>> out = native.apply_adam(var, m, v, np.ones(3, np.float32), np.float32(0.5))
    >>> out is None or [a.tolist() for a in out] == [[0.5] * 3, [1.0] * 3, [1.0] * 3]
    True
    """
    return _update("apply_adam", (var, m, v, grad),
                   {"lr_t": lr_t, "c1": 1 - beta1, "c2": 1 - beta2, "epsilon": epsilon},
                   False, inplace)


def apply_rms_prop(var, ms, mom, grad, lr, rho=0.9, momentum=0.0, epsilon=1e-10,
                   inplace=False):
    """TensorFlow 1's RMSProp (``OptimKernels.apply_rms_prop``): ``(var, ms, mom)``, or
    None."""
    return _update("apply_rms_prop", (var, ms, mom, grad),
                   {"lr": lr, "c": 1 - rho, "momentum": momentum, "epsilon": epsilon},
                   bool(momentum), inplace)


def apply_centered_rms_prop(var, mg, ms, mom, grad, lr, rho=0.9, momentum=0.0,
                            epsilon=1e-10, inplace=False):
    """Centered RMSProp (``OptimKernels.apply_centered_rms_prop``): ``(var, mg, ms,
    mom)``, or None."""
    return _update("apply_centered_rms_prop", (var, mg, ms, mom, grad),
                   {"lr": lr, "c": 1 - rho, "momentum": momentum, "epsilon": epsilon},
                   bool(momentum), inplace)


def apply_keras_rms_prop(var, ms, grad, lr, rho=0.9, epsilon=1e-7, inplace=False):
    """Keras's RMSprop without momentum (``OptimKernels.apply_keras_rms_prop``):
    ``(var, ms)``, or None."""
    return _update("apply_keras_rms_prop", (var, ms, grad),
                   {"lr": lr, "c": 1 - rho, "epsilon": epsilon}, False, inplace)


def apply_keras_centered_rms_prop(var, ms, mg, grad, lr, rho=0.9, epsilon=1e-7,
                                  inplace=False):
    """Keras's centered RMSprop without momentum
    (``OptimKernels.apply_keras_centered_rms_prop``): ``(var, ms, mg)``, or None."""
    return _update("apply_keras_centered_rms_prop", (var, ms, mg, grad),
                   {"lr": lr, "c": 1 - rho, "epsilon": epsilon}, False, inplace)


def apply_adagrad(var, accum, grad, lr, inplace=False):
    """``accum += g*g``; ``var -= g * lr / sqrt(accum)``: ``(var, accum)``, or None."""
    return _update("apply_adagrad", (var, accum, grad), {"lr": lr}, False, inplace)


# (last: importing tapeflow loads its plugins, and the CPU backend's plugin asks this
# module available() while it registers; a user who imports this module before
# tapeflow comes back here from that import with every name above already defined)
from tapeflow import errors  # noqa: E402
