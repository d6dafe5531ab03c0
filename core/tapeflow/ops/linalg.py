"""Linear algebra (``tf.linalg``): matmul, einsum, tensordot, norm, inv, solve, det.

``matmul``, ``tensordot``, ``einsum`` and ``norm`` are also top-level names
(``TOP_LEVEL``), and ``a @ b`` on Tensors and Variables is ``matmul(a, b)``.
Gradients are written with these same ops (matmul with transpose flags,
einsum with rearranged subscripts), so they are differentiable again.

>>> import tapeflow as tf
>>> print(tf.matmul([[1, 2], [3, 4]], [[4, 5], [6, 7]]))
tf.Tensor(
[[16 19]
 [36 43]], shape=(2, 2), dtype=int32)
>>> print(tf.linalg.inv([[2., 0.], [0., 4.]]))
tf.Tensor(
[[0.5  0.  ]
 [0.   0.25]], shape=(2, 2), dtype=float32)
"""

# Long file: the tf.linalg namespace -- matmul/einsum, inverse/solve/determinants,
# decompositions, FFT -- each op one declaration block beside its public function; the
# sections are independent and can become modules of an ops/linalg/ package.

from __future__ import annotations

import functools

import numpy as np

from ..runtime import shapes as _shapes
from .library import BROADCASTING, defop, flag, rerun
from ..errors import (InvalidArgumentError, InvalidTypeError, NotDifferentiableError,
                      UnimplementedError)
from ..runtime.dispatch import constant, convert_like, convert_to_tensor, execute
from ..runtime.registry import Linear, Multilinear
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from . import math as _m
from . import reductions as _r
from .array_shape import reshape
from .array_slice import pad
from .array_gather import gather as _gather
from .array_values import where as _where
from . import batching as _b

#: names that are also ``tf.<name>``
TOP_LEVEL = ["matmul", "tensordot", "einsum", "norm"]
#: TF 1's top-level names of the diagonal functions (``tf.diag_part``, ``tf.matrix_diag``)
V1_DIAG_NAMES = {"diag_part": "diag_part", "matrix_diag_part": "diag_part", "diag": "diag",
                 "matrix_diag": "diag", "matrix_set_diag": "set_diag"}
__all__ = TOP_LEVEL + ["diag_part", "diag", "set_diag", "V1_DIAG_NAMES", "band_part",
                       "tensor_diag", "tensor_diag_part",
                       "inv", "solve", "det", "slogdet", "logdet", "trace",
                       "matrix_transpose", "adjoint", "cholesky", "eigh", "svd", "qr"]


def _fmt(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _tensor(x):
    return x if type(x) is Tensor else convert_to_tensor(x)


# --- matmul ---------------------------------------------------------------------------

# One shared, read-only attrs dict per flag combination: no allocation per call.
_NN = {"transpose_a": False, "transpose_b": False}
_NT = {"transpose_a": False, "transpose_b": True}
_TN = {"transpose_a": True, "transpose_b": False}
_TT = {"transpose_a": True, "transpose_b": True}
_FLAGS = {(False, False): _NN, (False, True): _NT, (True, False): _TN, (True, True): _TT}


def _matmul_grad(ctx, dy):
    """TF's rule: every case is one matmul with transpose flags (no explicit transposes);
    broadcast batch dimensions are summed back by the core (``broadcast=True``). An
    input the tape does not need (``ctx.needs``: a first layer's data) costs nothing."""
    if not dy.dtype.is_inexact:
        return None, None
    a, b = ctx.inputs
    ta = ctx.attrs["transpose_a"]
    tb = ctx.attrs["transpose_b"]
    needs = ctx.needs
    need_a = needs is None or needs[0]
    need_b = needs is None or needs[1]
    if not ta:
        if not tb:
            ga = execute(_MATMUL, (dy, b), _NT) if need_a else None
            gb = execute(_MATMUL, (a, dy), _TN) if need_b else None
        else:
            ga = execute(_MATMUL, (dy, b), _NN) if need_a else None
            gb = execute(_MATMUL, (dy, a), _TN) if need_b else None
    elif not tb:
        ga = execute(_MATMUL, (b, dy), _NT) if need_a else None
        gb = execute(_MATMUL, (a, dy), _NN) if need_b else None
    else:
        ga = execute(_MATMUL, (b, dy), _TT) if need_a else None
        gb = execute(_MATMUL, (dy, a), _TT) if need_b else None
    return ga, gb


def _matmul_infer(shapes, dtypes, attrs):
    sa, sb = tuple(shapes[0]), tuple(shapes[1])
    if len(sa) < 2 or len(sb) < 2:
        raise InvalidArgumentError(
            f"Matrix size-incompatible: matmul needs inputs of rank >= 2, got "
            f"In[0]: {_fmt(sa)}, In[1]: {_fmt(sb)}")
    m, k = sa[-2:] if not attrs["transpose_a"] else sa[:-3:-1]
    k2, n = sb[-2:] if not attrs["transpose_b"] else sb[:-3:-1]
    if k != k2:
        flags = "".join(f", {f}=True" for f in ("transpose_a", "transpose_b") if attrs[f])
        raise InvalidArgumentError(
            f"Matrix size-incompatible: In[0]: {_fmt(sa)}, In[1]: {_fmt(sb)}{flags}")
    try:
        batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise InvalidArgumentError(
            f"Matrix size-incompatible: batch dimensions {_fmt(sa[:-2])} and {_fmt(sb[:-2])} "
            f"do not broadcast; In[0]: {_fmt(sa)}, In[1]: {_fmt(sb)}") from None
    return [(tuple(batch) + (m, n), dtypes[0])]


def _matmul_batch(ctx, a, b):
    ta, tb = ctx.attrs["transpose_a"], ctx.attrs["transpose_b"]
    if ctx.batched[0] and not ctx.batched[1] and len(a.shape) == 3 and len(b.shape) == 2 \
            and not ta:
        # (B, m, k) @ (k, n): one GEMM of (B*m, k)
        y = execute(ctx.op, (_b.batch_fold(a), b), ctx.attrs)
        return _b.batch_unfold(y, ctx.size)
    if len(a.shape) == 3 and len(b.shape) == 3 and a.shape[1 if ta else 2] == 1:
        # a batch of outer products (per-example weight gradients: x^T @ dy of one row):
        # one broadcast multiply instead of B matrix products with k = 1
        sa, sb = tuple(a.shape), tuple(b.shape)
        a = reshape(a, (sa[0], sa[2] if ta else sa[1], 1))
        b = reshape(b, (sb[0], 1, sb[1] if tb else sb[2]))
        return _m.multiply(a, b)
    a, b = _b.batch_leading(ctx, (a, b), 2)
    return execute(ctx.op, (a, b), ctx.attrs)


_MATMUL = defop("MatMul", inputs=("a", "b"), attrs=_NN, broadcast=True,
                grad=_m._holomorphic(_matmul_grad),
                infer=_matmul_infer, jvp=Multilinear(), batch=_matmul_batch)


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, name=None):
    """Matrix product of the last two dimensions, with NumPy-broadcast batch dimensions.

    Both inputs need rank >= 2. ``transpose_*``/``adjoint_*`` transpose the last two
    dimensions of an input first (the same for real dtypes) without copying it.

    >>> import tapeflow as tf
    >>> print(tf.matmul([[2.]], [[2.]]))
    tf.Tensor([[4.]], shape=(1, 1), dtype=float32)
    >>> tf.matmul(tf.ones([5, 2, 3]), tf.ones([4, 3]), transpose_b=True).shape
    TensorShape([5, 2, 4])
    """
    if transpose_a is False and transpose_b is False and adjoint_a is False \
            and adjoint_b is False:
        return execute(_MATMUL, (a, b), _NN)
    ta, tb, ja, jb = transpose_a, transpose_b, adjoint_a, adjoint_b
    if not (type(ta) is bool and type(tb) is bool and type(ja) is bool and type(jb) is bool):
        ta, tb, ja, jb = (flag(v, f"matmul: {w}", "MatMul", a) for w, v in (
            ("transpose_a", ta), ("transpose_b", tb), ("adjoint_a", ja), ("adjoint_b", jb)))
    if ja or jb:
        for t, j, s in ((ta, ja, "a"), (tb, jb, "b")):
            if t and j:
                raise InvalidArgumentError(
                    f"matmul: only one of transpose_{s} and adjoint_{s} can be True (adjoint "
                    "is the conjugate transpose)", op="MatMul",
                    device=getattr(a, "_device", None))
        if ja and _holds_complex(a):            # the adjoint conjugates
            a = _m.conj(a)
        if jb and _holds_complex(b):
            b = _m.conj(b)
    return execute(_MATMUL, (a, b), _FLAGS[ta or ja, tb or jb])


def _holds_complex(v):
    """Whether ``v`` (a tensor, an array or what converts to one) is complex."""
    d = getattr(v, "dtype", None)
    if d is not None:
        return getattr(d, "np", d).kind == "c"
    try:
        return bool(np.iscomplexobj(v))
    except Exception:               # noqa: BLE001 - the op's conversion says what is wrong
        return False


# --- einsum / tensordot ---------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_bad(equation, why):
    return InvalidArgumentError(f"einsum equation {equation!r}: {why}", op="Einsum")


@functools.lru_cache(maxsize=512)
def _parse_einsum(equation, ndims):
    """``equation`` for operands of ranks ``ndims`` -> explicit ``"ab,bc->ac"`` form:
    no spaces, an output, ellipses replaced by letters (right-aligned, as NumPy)."""
    if not isinstance(equation, str):
        raise InvalidArgumentError(
            f"einsum: the equation must be a string such as 'ij,jk->ik', got "
            f"{type(equation).__name__} {equation!r}")
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    subs = lhs.split(",")
    if len(subs) != len(ndims):
        raise _einsum_bad(equation, f"{len(subs)} operand subscript(s) for {len(ndims)} "
                                    "operand(s)")
    used = set(c for c in eq if c in _LETTERS)
    bad = set(eq) - set(_LETTERS) - set(",->.")
    if bad or "." in eq.replace("...", ""):
        raise _einsum_bad(equation, f"invalid character(s) {sorted(bad) or ['.']}; use "
                                    "letters, ',', '->' and '...'")
    free = [c for c in _LETTERS if c not in used]
    n_ell = 0
    for s, nd in zip(subs, ndims):
        n_lab = len(s.replace("...", ""))
        if "..." in s:
            n_ell = max(n_ell, nd - n_lab)
            if nd < n_lab:
                raise _einsum_bad(equation, f"subscripts {s!r} have more labels than the "
                                            f"operand's rank {nd}")
        elif n_lab != nd:
            raise _einsum_bad(equation, f"subscripts {s!r} name {n_lab} dimension(s) but the "
                                        f"operand has rank {nd}")
    if n_ell > len(free):
        raise _einsum_bad(equation, "too many dimensions under '...'")
    ell = "".join(free[:n_ell])
    full = [s.replace("...", ell[n_ell - (nd - len(s.replace("...", ""))):] if n_ell else "")
            for s, nd in zip(subs, ndims)]
    if arrow:
        if out.count("...") > 1 or any(s.count("...") > 1 for s in subs):
            raise _einsum_bad(equation, "'...' may appear once per operand")
        out = out.replace("...", ell)
        if len(set(out)) != len(out):
            raise _einsum_bad(equation, "an output label appears more than once")
        missing = set(out) - set("".join(full))
        if missing:
            raise _einsum_bad(equation, f"output label(s) {sorted(missing)} appear in no input")
    else:
        joined = "".join(s.replace("...", "") for s in subs)
        out = ell + "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    return ",".join(full) + "->" + out


def _einsum_sizes(equation, shapes):
    """label -> size (sizes of 1 broadcast); raises on a mismatch."""
    lhs, _, _ = equation.partition("->")
    sizes = {}
    for k, (s, shape) in enumerate(zip(lhs.split(","), shapes)):
        for c, d in zip(s, shape):
            prev = sizes.get(c)
            if prev is None or prev == 1:
                sizes[c] = d
            elif d != prev and d != 1:
                raise InvalidArgumentError(
                    f"einsum {equation!r}: label {c!r} has size {prev} in one operand and {d} "
                    f"in operand {k}; shapes: " + ", ".join(_fmt(s) for s in shapes))
    return sizes


def _einsum_infer(shapes, dtypes, attrs):
    eq = attrs["equation"]
    sizes = _einsum_sizes(eq, [tuple(s) for s in shapes])
    return [(tuple(sizes[c] for c in eq.partition("->")[2]), dtypes[0])]


def _einsum_grad(ctx, dy):
    """d/d operand k = einsum(dy and the other operands -> operand k's subscripts).

    Labels only operand k has (summed within it) come from a ones vector, and a label
    repeated in operand k (a diagonal) gets a fresh label tied to it by an identity
    matrix, so one einsum gives the full-shape gradient.
    """
    if not dy.dtype.is_inexact:
        return (None,) * len(ctx.inputs)
    eq = ctx.attrs["equation"]
    lhs, _, out = eq.partition("->")
    subs = lhs.split(",")
    inputs = ctx.inputs
    unused = [c for c in _LETTERS if c not in eq]
    npdt = dy.dtype.np
    dev = dy._device
    grads = []
    for k, (s, x) in enumerate(zip(subs, inputs)):
        ops = [dy] + [t for j, t in enumerate(inputs) if j != k]
        osubs = [out] + [t for j, t in enumerate(subs) if j != k]
        have = set("".join(osubs))
        shape = tuple(x.shape)
        target = []
        fresh = iter(unused)
        for c, d in zip(s, shape):
            if c not in have:                       # summed inside operand k only
                ops.append(constant(np.ones(d, npdt), device=dev))
                osubs.append(c)
                have.add(c)
                target.append(c)
            elif c in target:                       # diagonal: c repeated in operand k
                c2 = next(fresh)
                ops.append(constant(np.eye(d, dtype=npdt), device=dev))
                osubs.append(c + c2)
                target.append(c2)
            else:
                target.append(c)
        grads.append(execute(_EINSUM, tuple(ops),
                             {"equation": ",".join(osubs) + "->" + "".join(target)}))
    return tuple(grads)


def _einsum_batch(ctx, *xs):
    eq = ctx.attrs["equation"]
    ins, out = eq.split("->")
    used = set(eq)
    z = next(c for c in "zyxwvutsrqponmlkjihgfedcbaZYXWVUTSRQPONMLKJIHGFEDCBA" if c not in used)
    subs = [z + s if b else s for s, b in zip(ins.split(","), ctx.batched)]
    return rerun(ctx, xs, equation=",".join(subs) + "->" + z + out)


_EINSUM = defop("Einsum", inputs=("*inputs",), attrs={"equation": ""}, broadcast=True,
                grad=_m._holomorphic(_einsum_grad), infer=_einsum_infer,
                jvp=Multilinear(), batch=_einsum_batch)


def einsum(equation, *inputs, **kwargs):
    """Einstein summation (NumPy/TF subscripts, ``...`` and implicit outputs allowed).

    >>> import tapeflow as tf
    >>> print(tf.einsum("ij,jk->ik", [[1., 2.]], [[3.], [4.]]))
    tf.Tensor([[11.]], shape=(1, 1), dtype=float32)
    >>> print(tf.einsum("ii", [[1, 2], [3, 4]]))
    tf.Tensor(5, shape=(), dtype=int32)
    """
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) and inputs[0] and \
            isinstance(inputs[0][0], (Tensor, Variable, np.ndarray)):
        inputs = tuple(inputs[0])
    ts = tuple(_tensor(x) for x in inputs)
    if not ts:
        raise InvalidArgumentError("einsum needs at least one operand", op="Einsum")
    try:
        eq = _parse_einsum(equation, tuple(len(t._data.shape) for t in ts))
    except InvalidArgumentError as e:
        raise e.with_context("Einsum", ts[0]._device) from None
    return execute(_EINSUM, ts, {"equation": eq})


def tensordot(a, b, axes, name=None):
    """Sum of products over ``axes``: an int N (last N of ``a`` with first N of ``b``)
    or a pair of axis lists. The result has ``a``'s free axes, then ``b``'s.

    >>> import tapeflow as tf
    >>> tf.tensordot(tf.ones([2, 3, 4]), tf.ones([4, 3, 5]), [[1, 2], [1, 0]]).shape
    TensorShape([2, 5])
    >>> print(tf.tensordot([1., 2.], [3., 4.], 1))
    tf.Tensor(11.0, shape=(), dtype=float32)
    """
    if isinstance(a, (Tensor, Variable)) or not isinstance(b, (Tensor, Variable)):
        a = _tensor(a)
        b = convert_like(b, a)
    else:
        b = _tensor(b)
        a = convert_like(a, b)
    sa, sb = tuple(a._data.shape), tuple(b._data.shape)
    if hasattr(axes, "numpy"):
        axes = axes.numpy()
    if isinstance(axes, np.ndarray):
        axes = axes.tolist()
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        n = int(axes)
        if not 0 <= n <= min(len(sa), len(sb)):
            raise InvalidArgumentError(
                f"tensordot: axes={n} must be in [0, {min(len(sa), len(sb))}] for shapes "
                f"{_fmt(sa)} and {_fmt(sb)}", op="Einsum", device=a._device)
        ax_a, ax_b = list(range(len(sa) - n, len(sa))), list(range(n))
    else:
        try:
            ax_a, ax_b = axes
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"tensordot: axes must be an int or a pair of axis lists, got {axes!r}",
                op="Einsum", device=a._device) from None
        ax_a = [ax_a] if not isinstance(ax_a, (list, tuple)) else list(ax_a)
        ax_b = [ax_b] if not isinstance(ax_b, (list, tuple)) else list(ax_b)
        if len(ax_a) != len(ax_b):
            raise InvalidArgumentError(
                f"tensordot: {len(ax_a)} axes of a but {len(ax_b)} axes of b ({axes!r})",
                op="Einsum", device=a._device)
        # distinct, in range, order kept (it pairs a's axes with b's)
        _shapes.normalize_axes(ax_a, len(sa), "Einsum", a._device)
        _shapes.normalize_axes(ax_b, len(sb), "Einsum", a._device)
        ax_a = [_shapes.normalize_axis(v, len(sa), "Einsum", a._device) for v in ax_a]
        ax_b = [_shapes.normalize_axis(v, len(sb), "Einsum", a._device) for v in ax_b]
    if len(sa) + len(sb) - len(ax_a) > len(_LETTERS):
        raise InvalidArgumentError("tensordot: too many dimensions", op="Einsum",
                                   device=a._device)
    for i, j in zip(ax_a, ax_b):
        if sa[i] != sb[j]:
            raise InvalidArgumentError(
                f"tensordot: size-incompatible: axis {i} of a {_fmt(sa)} has size {sa[i]}, "
                f"axis {j} of b {_fmt(sb)} has size {sb[j]}", op="Einsum", device=a._device)
    la = list(_LETTERS[:len(sa)])
    lb = list(_LETTERS[len(sa):len(sa) + len(sb)])
    for i, j in zip(ax_a, ax_b):
        lb[j] = la[i]
    out = [c for i, c in enumerate(la) if i not in ax_a] + \
        [c for j, c in enumerate(lb) if j not in ax_b]
    eq = "".join(la) + "," + "".join(lb) + "->" + "".join(out)
    return execute(_EINSUM, (a, b), {"equation": eq})


def trace(x, name=None):
    """Sum of the diagonal of the last two dimensions.

    >>> import tapeflow as tf
    >>> print(tf.linalg.trace([[1., 2.], [3., 4.]]))
    tf.Tensor(5.0, shape=(), dtype=float32)
    """
    x = _tensor(x)
    s = tuple(x._data.shape)
    if len(s) < 2:
        raise InvalidArgumentError(f"trace needs a matrix (or a batch of them), got shape "
                                   f"{_fmt(s)}", op="Einsum", device=x._device)
    if s[-1] != s[-2]:          # TensorFlow's: the sum of the main diagonal of any matrix
        k = min(s[-2:])
        x = x[..., :k, :k]
    return einsum("...ii->...", x)


def _check_k(k, fn, x):
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise InvalidTypeError(f"{fn}: k must be an int (the diagonal's offset), got "
                               f"{type(k).__name__}", op="Einsum", device=x._device)
    if k != 0:
        raise UnimplementedError(f"{fn}: only the main diagonal (k=0) is supported, got "
                                 f"k={k!r}", op="Einsum", device=x._device)


def diag_part(input, name=None, k=0, padding_value=0, align="RIGHT_LEFT"):  # noqa: A002
    """The main diagonal of the last two dimensions: ``[..., M, N]`` -> ``[..., min(M, N)]``
    (``tf.linalg.diag_part``; TF 1's ``tf.diag_part`` and ``tf.matrix_diag_part``).
    Its gradient puts the diagonal's gradient back on the diagonal.

    >>> import tapeflow as tf
    >>> print(tf.linalg.diag_part([[1., 2., 3.], [4., 5., 6.]]))
    tf.Tensor([1. 5.], shape=(2,), dtype=float32)
    """
    x = _tensor(input)
    s = tuple(x._data.shape)
    _check_k(k, "diag_part", x)
    if len(s) < 2:
        raise InvalidArgumentError(f"diag_part needs a matrix (or a batch of them), got shape "
                                   f"{_fmt(s)}", op="Einsum", device=x._device)
    if s[-1] != s[-2]:
        n = min(s[-2:])
        x = x[..., :n, :n]
    return einsum("...ii->...i", x)


def _diag_ks(k, v):
    """``diag``'s ``k`` (an int or a ``(low, high)`` pair) as ``(low, high)``."""
    ks = k.numpy().tolist() if isinstance(k, (Tensor, Variable)) else k
    if isinstance(ks, np.ndarray):
        ks = ks.tolist() if ks.size <= 2 else [None] * 3    # (a 0-d array: its number)
    ks = list(ks) if isinstance(ks, (list, tuple)) else [ks]
    if not 1 <= len(ks) <= 2 or any(isinstance(i, (bool, np.bool_)) or
                                    not isinstance(i, (int, np.integer)) for i in ks):
        raise InvalidTypeError(f"diag: k must be an int or a (low, high) pair of ints (the "
                               f"diagonals' offsets), got {k!r}", op="MatrixDiagV3",
                               device=v._device)
    lo, hi = int(ks[0]), int(ks[-1])
    if lo > hi:
        raise InvalidArgumentError(f"diag: lower diagonal index must not be greater than upper "
                                   f"diagonal index, got k={k!r}", op="MatrixDiagV3",
                                   device=v._device)
    return lo, hi


def _diag_band(v, lo, hi, num_rows, num_cols, padding_value, align):
    """The matrices with the diagonals ``lo..hi`` from ``v`` (``[..., L]`` for one,
    ``[..., hi - lo + 1, L]`` for a band): a gather of ``v`` and a ``where``."""
    nd = hi - lo + 1
    if v.ndim < (1 if nd == 1 else 2) or (nd > 1 and v.shape[-2] != nd):
        raise InvalidArgumentError(
            f"diag: diagonal must be [..., L] for one diagonal and [..., {nd}, L] for the "
            f"band k=({lo}, {hi}); got shape {_fmt(v.shape)}", op="MatrixDiagV3",
            device=v._device)
    n = int(v.shape[-1])
    m_min, n_min = n - min(hi, 0), n + max(lo, 0)
    m = num_rows if num_rows != -1 else (n_min if num_cols == -1 else m_min)
    c = num_cols if num_cols != -1 else (m_min if num_rows == -1 else n_min)
    m, c = (max(m_min, n_min),) * 2 if num_rows == num_cols == -1 else (m, c)
    batch = tuple(v.shape[:-1] if nd == 1 else v.shape[:-2])
    _shapes.check_allocation(batch + (m, c), v.dtype, v._device, "MatrixDiagV3")
    _shapes.check_allocation((3, m, c), "int64", v._device, "MatrixDiagV3")   # (the indices)
    i, j = np.indices((m, c))
    d = j - i
    lens = np.minimum(m + np.minimum(d, 0), c - np.maximum(d, 0))
    band_lens = [min(m + min(e, 0), c - max(e, 0)) for e in range(lo, hi + 1)]
    if max(band_lens) != n:
        raise InvalidArgumentError(
            f"diag: the longest diagonal of k=({lo}, {hi}) in a {m}x{c} matrix has "
            f"{max(band_lens)} elements but diagonal has {n}; give num_rows/num_cols that "
            f"fit (or -1)", op="MatrixDiagV3", device=v._device)
    sup, sub = align.split("_")
    right = np.where(d >= 0, sup == "RIGHT", sub == "RIGHT")
    col = np.minimum(i, j) + np.where(right, n - lens, 0)
    keep = (d >= lo) & (d <= hi) & (col >= 0) & (col < n)
    flat = np.where(keep, (hi - d) * n + col, 0).reshape(-1)
    lead = tuple(v.shape[:-1 if nd == 1 else -2])
    vals = _gather(reshape(v, lead + (nd * n,)), constant(flat, device=v.device),
                     axis=len(lead))
    fill = constant(padding_value, v.dtype, device=v.device)
    return _where(constant(keep, device=v.device), reshape(vals, lead + (m, c)), fill)


def diag(diagonal, name=None, k=0, num_rows=-1, num_cols=-1, padding_value=0,
         align="RIGHT_LEFT"):
    """The ``[..., N, N]`` matrices with ``diagonal`` (``[..., N]``) on their main diagonal
    and zeros elsewhere (``tf.linalg.diag``; TF 1's ``tf.diag``, ``tf.matrix_diag``).
    ``k`` puts it on another diagonal (``k > 0`` above the main one), or with a
    ``(low, high)`` pair puts the rows of ``diagonal`` (``[..., high - low + 1, L]``,
    diagonal ``high`` first; ``align`` as TensorFlow's) on a band; ``num_rows`` /
    ``num_cols`` give a larger matrix, ``padding_value`` fills the rest.
    Differentiable in ``diagonal``.

    >>> import tapeflow as tf
    >>> print(tf.linalg.diag([1., 2.]))
    tf.Tensor(
    [[1. 0.]
     [0. 2.]], shape=(2, 2), dtype=float32)
    >>> print(tf.linalg.diag([1, 2], k=1))
    tf.Tensor(
    [[0 1 0]
     [0 0 2]
     [0 0 0]], shape=(3, 3), dtype=int32)
    """
    v = _tensor(diagonal)
    lo, hi = _diag_ks(k, v)
    for what, size in (("num_rows", num_rows), ("num_cols", num_cols)):
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise InvalidTypeError(f"diag: {what} must be an int, got {type(size).__name__}",
                                   op="MatrixDiagV3", device=v._device)
        if size < -1:
            raise InvalidArgumentError(f"diag: {what} must be -1 (as needed) or a size, got "
                                       f"{size}", op="MatrixDiagV3", device=v._device)
    if align not in ("RIGHT_LEFT", "LEFT_RIGHT", "LEFT_LEFT", "RIGHT_RIGHT"):
        raise InvalidArgumentError(f"diag: align must be one of RIGHT_LEFT, LEFT_RIGHT, "
                                   f"LEFT_LEFT, RIGHT_RIGHT; got {align!r}",
                                   op="MatrixDiagV3", device=v._device)
    n = v.shape[-1] if v.ndim else None
    if n is None:
        raise InvalidArgumentError(
            f"diag: diagonal must have at least one dimension, got shape {_fmt(v.shape)}",
            op="MatrixDiagV3", device=v._device)
    if lo or hi or num_rows not in (-1, n) or num_cols not in (-1, n) or padding_value != 0:
        return _diag_band(v, lo, hi, int(num_rows), int(num_cols), padding_value, align)
    if v.dtype.is_bool:
        return _m.logical_and(v[..., None, :], constant(np.eye(n, dtype=bool), device=v.device))
    return _diag(v)


def set_diag(input, diagonal, name=None, k=0, align="RIGHT_LEFT"):  # noqa: A002
    """``input`` (``[..., M, N]``) with its main diagonal replaced by ``diagonal``
    (``[..., min(M, N)]``): ``tf.linalg.set_diag`` (TF 1's ``tf.matrix_set_diag``).
    The gradient goes to ``input`` off the diagonal and to ``diagonal`` on it.

    >>> import tapeflow as tf
    >>> print(tf.linalg.set_diag(tf.ones((2, 3)), [7., 8.]))
    tf.Tensor(
    [[7. 1. 1.]
     [1. 8. 1.]], shape=(2, 3), dtype=float32)
    """
    x = _tensor(input)
    _check_k(k, "set_diag", x)
    s = tuple(x._data.shape)
    d = convert_like(diagonal, x) if not isinstance(diagonal, (Tensor, Variable)) else diagonal
    if len(s) < 2 or tuple(d.shape) != s[:-2] + (min(s[-2:]),):
        raise InvalidArgumentError(
            f"set_diag: input must be a matrix (or a batch) and diagonal its "
            f"[..., min(M, N)] diagonal; got input shape {_fmt(s)} and diagonal shape "
            f"{_fmt(d.shape)}", op="SelectV2", device=x._device)
    m, n = s[-2:]
    k_ = min(m, n)
    col = d[..., :, None]                      # [..., k, 1]: row i's value, for column i
    if m > k_:
        col = pad(col, [[0, 0]] * (len(s) - 2) + [[0, m - k_], [0, 0]])
    return _where(constant(np.eye(m, n, dtype=bool), device=x.device), col, x)


def band_part(input, num_lower, num_upper, name=None):  # noqa: A002
    """``input`` (``[..., M, N]``) with the elements outside a band around the main
    diagonal zeroed: ``num_lower`` subdiagonals and ``num_upper`` superdiagonals kept (a
    negative number keeps the whole triangle). ``band_part(x, -1, 0)`` is the lower
    triangle. Differentiable in ``input``.

    >>> import tapeflow as tf
    >>> print(tf.linalg.band_part(tf.ones((3, 3)), 0, 1))
    tf.Tensor(
    [[1. 1. 0.]
     [0. 1. 1.]
     [0. 0. 1.]], shape=(3, 3), dtype=float32)
    """
    x = _tensor(input)
    s = tuple(x._data.shape)
    lo, hi = (_shapes.as_index(v, what, "MatrixBandPart", x._device)
              for v, what in ((num_lower, "num_lower"), (num_upper, "num_upper")))
    if len(s) < 2 or lo > s[-2] or hi > s[-1]:
        raise InvalidArgumentError(
            f"band_part: input must be a matrix (or a batch of them), num_lower at most its "
            f"rows and num_upper at most its columns; got shape {_fmt(s)}, num_lower={lo}, "
            f"num_upper={hi}", op="MatrixBandPart", device=x._device)
    i, j = np.ogrid[:s[-2], :s[-1]]
    keep = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
    return _where(constant(keep, device=x.device), x, constant(0, x.dtype, device=x.device))


def tensor_diag(diagonal, name=None):
    """The tensor of rank ``2k`` with ``diagonal`` (rank ``k``) on its diagonal:
    ``out[i1, ..., ik, i1, ..., ik] = diagonal[i1, ..., ik]``, zeros elsewhere.

    >>> import tapeflow as tf
    >>> print(tf.linalg.tensor_diag([1, 2]))
    tf.Tensor(
    [[1 0]
     [0 2]], shape=(2, 2), dtype=int32)
    """
    v = _tensor(diagonal)
    s = tuple(v.shape)
    if not s:
        raise InvalidArgumentError("tensor_diag: diagonal must have at least one dimension, "
                                   "got a scalar", op="Diag", device=v._device)
    return reshape(diag(reshape(v, (-1,))), s + s)


def tensor_diag_part(input, name=None):  # noqa: A002
    """The diagonal of a tensor of rank ``2k`` whose shape is ``s + s``: the rank-``k``
    ``out[i1, ..., ik] = input[i1, ..., ik, i1, ..., ik]`` (:func:`tensor_diag`'s inverse).

    >>> import tapeflow as tf
    >>> print(tf.linalg.tensor_diag_part([[1, 2], [3, 4]]))
    tf.Tensor([1 4], shape=(2,), dtype=int32)
    """
    x = _tensor(input)
    s = tuple(x.shape)
    k = len(s) // 2
    if not s or len(s) % 2 or s[:k] != s[k:]:
        raise InvalidArgumentError(f"tensor_diag_part: input must have an even rank and a "
                                   f"shape s + s, got {_fmt(s)}", op="DiagPart",
                                   device=x._device)
    n = int(np.prod(s[:k]))
    return reshape(diag_part(reshape(x, (n, n))), s[:k])


def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """Swap the last two dimensions (a view where the backend allows).

    >>> import tapeflow as tf
    >>> tf.linalg.matrix_transpose(tf.ones([2, 3, 4])).shape
    TensorShape([2, 4, 3])
    """
    t = einsum("...ij->...ji", a)
    return _m.conj(t) if flag(conjugate, "matrix_transpose: conjugate", "Einsum", a) else t


def adjoint(matrix, name=None):
    """Conjugate transpose of the last two dimensions (the transpose, for real dtypes).

    >>> import tapeflow as tf
    >>> print(tf.linalg.adjoint(tf.constant([[1 + 2j, 3j]])))
    tf.Tensor(
    [[1.-2.j]
     [0.-3.j]], shape=(2, 1), dtype=complex128)
    """
    return _m.conj(einsum("...ij->...ji", matrix))


# --- norm -----------------------------------------------------------------------------

def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None, keep_dims=None):
    """Vector norm (``axis`` None or an int) or matrix norm (``axis`` a pair).

    ``ord``: ``'euclidean'`` (default; over all elements when ``axis`` is None),
    ``'fro'``, ``1``, ``2``, ``np.inf`` or any ``p > 0`` for vectors; ``'euclidean'``,
    ``'fro'``, ``1`` and ``np.inf`` for matrices. The Euclidean norm's gradient at 0
    is 0 (not NaN).

    >>> import tapeflow as tf
    >>> print(tf.norm([3., 4.]))
    tf.Tensor(5.0, shape=(), dtype=float32)
    >>> print(tf.norm([[1., -2.], [3., 4.]], ord=1, axis=[0, 1]))
    tf.Tensor(6.0, shape=(), dtype=float32)
    """
    x = _tensor(tensor)
    keepdims = flag(keep_dims if keep_dims is not None else keepdims, "norm: keepdims",
                    "EuclideanNorm", tensor)
    nd = len(x._data.shape)
    if hasattr(axis, "numpy"):
        axis = axis.numpy().tolist()
    if isinstance(axis, (list, tuple)) and len(axis) == 1:
        axis = _shapes.as_index(axis[0], "axis", "EuclideanNorm", x._device)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 2:
            raise InvalidArgumentError(
                f"norm: axis must be None, an int or a pair of ints, got {axis!r}",
                op="EuclideanNorm", device=x._device)
        r, c = (_r._norm_axis(_shapes.as_index(a, "norm: axis", "EuclideanNorm", x._device),
                              nd, "EuclideanNorm", x._device)[0] for a in axis)
        if r == c:
            raise InvalidArgumentError(f"norm: the two axes {axis!r} must differ",
                                       op="EuclideanNorm", device=x._device)
        if ord in ("euclidean", "fro"):
            return _r.reduce_euclidean_norm(x, axis=(r, c), keepdims=keepdims)
        if ord == 1 or ord == np.inf:
            inner, outer = (r, c) if ord == 1 else (c, r)   # 1: max column sum
            s = _r.reduce_sum(_m.abs(x), axis=inner, keepdims=True)
            out = _r.reduce_max(s, axis=outer, keepdims=True)
            if keepdims:
                return out
            shape = tuple(x.shape)
            return reshape(out, tuple(d for i, d in enumerate(shape) if i not in (r, c)))
        if ord == 2:
            raise UnimplementedError("norm: the matrix 2-norm (largest singular value) is not "
                                     "implemented; use ord='fro', 1 or np.inf",
                                     op="EuclideanNorm", device=x._device)
        raise InvalidArgumentError(
            f"norm: ord={ord!r} is not a supported matrix norm; use 'euclidean', 'fro', 1 "
            "or np.inf", op="EuclideanNorm", device=x._device)
    if axis is not None and not isinstance(axis, (int, np.integer)):
        raise InvalidArgumentError(f"norm: axis must be None, an int or a pair of ints, "
                                   f"got {axis!r}", op="EuclideanNorm", device=x._device)
    if ord in ("euclidean", "fro", 2):
        return _r.reduce_euclidean_norm(x, axis=axis, keepdims=keepdims)
    if ord == 1:
        return _r.reduce_sum(_m.abs(x), axis=axis, keepdims=keepdims)
    if ord == np.inf:
        return _r.reduce_max(_m.abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and not isinstance(ord, bool) and ord > 0:
        s = _r.reduce_sum(_m.pow(_m.abs(x), float(ord)), axis=axis, keepdims=keepdims)
        return _m.pow(s, 1.0 / ord)
    raise InvalidArgumentError(
        f"norm: ord={ord!r} is not supported; use 'euclidean', 1, 2, np.inf or a number > 0",
        op="EuclideanNorm", device=x._device)


# --- inverse, solve, determinants -----------------------------------------------------

def _square(x, opname, what="Input"):
    s = tuple(x._data.shape)
    if len(s) < 2 or s[-1] != s[-2]:
        raise InvalidArgumentError(
            f"{what} must be a square matrix (or a batch of them), got shape {_fmt(s)}",
            op=opname, device=x._device)


def _check_square(op, tensors, attrs, device):
    """Signature check of the LU-based ops (every backend): the first input is a
    square matrix or a batch of them; MatrixSolve's ``rhs`` is ``[..., M, K]``."""
    _square(tensors[0], op.name, "matrix" if len(tensors) > 1 else "Input")
    if len(tensors) > 1:
        sa, sb = tuple(tensors[0]._data.shape), tuple(tensors[1]._data.shape)
        if len(sb) < 2 or sb[-2] != sa[-1]:
            raise InvalidArgumentError(
                f"rhs must have shape [..., {sa[-1]}, K] to match matrix {_fmt(sa)}, got "
                f"{_fmt(sb)}", op=op.name, device=device)


def _inv_grad(ctx, dy):
    y = ctx.outputs[0]
    if not ctx.attrs["adjoint"]:      # d(A^-1) = -A^-T dy A^-T
        g = execute(_MATMUL, (execute(_MATMUL, (y, dy), _TN), y), _NT)
    else:                             # y = (A^T)^-1: the transpose of the rule above
        g = execute(_MATMUL, (execute(_MATMUL, (y, dy), _NT), y), _NN)
    return _m.negative(g)


_INV = defop("MatrixInverse", inputs=("input",), attrs={"adjoint": False}, grad=_inv_grad,
             check=_check_square, batch=BROADCASTING)


@_INV.def_jvp
def _inv_jvp(ctx, t):
    y = ctx.outputs[0]                 # d inv(A) = -inv(A) dA inv(A)
    ta = matrix_transpose(t) if ctx.attrs["adjoint"] else t
    return _m.negative(_mm(_mm(y, ta), y))


def inv(input, adjoint=False, name=None):
    """Inverse of a square matrix (or a batch of them). A singular input raises
    InvalidArgumentError ("Input is not invertible.").

    >>> import tapeflow as tf
    >>> print(tf.linalg.inv([[1., 1.], [0., 1.]]))
    tf.Tensor(
    [[ 1. -1.]
     [ 0.  1.]], shape=(2, 2), dtype=float32)
    """
    x = _tensor(input)
    return execute(_INV, (x,), {"adjoint": flag(adjoint, "inv: adjoint", "MatrixInverse", x)})


def _solve_grad(ctx, dy):
    a, _ = ctx.inputs
    x = ctx.outputs[0]
    adj = ctx.attrs["adjoint"]
    gb = execute(_SOLVE, (a, dy), {"adjoint": not adj})
    ga = execute(_MATMUL, (gb, x), _NT) if not adj else execute(_MATMUL, (x, gb), _NT)
    return _m.negative(ga), gb


def _solve_batch(ctx, a, rhs):
    return execute(ctx.op, _b.batch_leading(ctx, (a, rhs), 2), ctx.attrs)


_SOLVE = defop("MatrixSolve", inputs=("matrix", "rhs"), attrs={"adjoint": False},
               broadcast=True, grad=_solve_grad, check=_check_square, batch=_solve_batch)


@_SOLVE.def_jvp
def _solve_jvp(ctx, ta, tb):
    a = ctx.inputs[0]                  # x = A^-1 b: dx = A^-1 (db - dA x)
    x = ctx.outputs[0]
    rhs = tb if tb is not None else None
    if ta is not None:
        da = matrix_transpose(ta) if ctx.attrs["adjoint"] else ta
        ax = _mm(da, x)
        rhs = _m.negative(ax) if rhs is None else _m.subtract(rhs, ax)
    return solve(a, rhs, adjoint=ctx.attrs["adjoint"])


def solve(matrix, rhs, adjoint=False, name=None):
    """``X`` with ``matrix @ X = rhs`` (``matrix^T @ X = rhs`` when ``adjoint``);
    ``rhs`` is ``[..., M, K]``. A singular matrix raises InvalidArgumentError.

    >>> import tapeflow as tf
    >>> print(tf.linalg.solve([[2., 0.], [0., 4.]], [[2.], [2.]]))
    tf.Tensor(
    [[1. ]
     [0.5]], shape=(2, 1), dtype=float32)
    """
    a = _tensor(matrix)
    return execute(_SOLVE, (a, convert_like(rhs, a)),
                   {"adjoint": flag(adjoint, "solve: adjoint", "MatrixSolve", a)})


def _det_scale(x, g):
    """``g`` (one value per matrix) times ``inv(x)^T``."""
    g = reshape(g, tuple(g.shape) + (1, 1))
    return _m.multiply(g, execute(_INV, (x,), {"adjoint": True}))


def _det_grad(ctx, dy):
    return _det_scale(ctx.inputs[0], _m.multiply(dy, ctx.outputs[0]))


def _slogdet_grad(ctx, dsign, dlog):
    return _det_scale(ctx.inputs[0], dlog)


_DET = defop("MatrixDeterminant", inputs=("input",), grad=_det_grad, check=_check_square,
             batch=BROADCASTING)


def _trace_inv_times(a, t):
    """``trace(A^-1 dA)`` per matrix: ``sum(A^-T * dA)``."""
    return _r.reduce_sum(_m.multiply(matrix_transpose(inv(a)), t), axis=[-2, -1])


@_DET.def_jvp
def _det_jvp(ctx, t):
    return _m.multiply(ctx.outputs[0], _trace_inv_times(ctx.inputs[0], t))


_SLOGDET = defop("LogMatrixDeterminant", inputs=("input",), num_outputs=2,
                 grad=_slogdet_grad, check=_check_square, batch=BROADCASTING)


@_SLOGDET.def_jvp
def _slogdet_jvp(ctx, t):
    return None, _trace_inv_times(ctx.inputs[0], t)


def det(input, name=None):
    """Determinant of a square matrix (or a batch of them).

    >>> import tapeflow as tf
    >>> print(tf.linalg.det([[1., 2.], [3., 4.]]))
    tf.Tensor(-2.0, shape=(), dtype=float32)
    """
    return execute(_DET, (_tensor(input),))


def slogdet(input, name=None):
    """``(sign, log|det|)`` of a square matrix (or a batch), stable for large ones.

    >>> import tapeflow as tf
    >>> sign, logabs = tf.linalg.slogdet([[-2., 0.], [0., 1.]])
    >>> float(sign), round(float(logabs), 4)
    (-1.0, 0.6931)
    """
    return execute(_SLOGDET, (_tensor(input),))


def logdet(matrix, name=None):
    """``log(det(matrix))`` of a Hermitian positive definite matrix (or a batch).

    >>> import tapeflow as tf
    >>> round(float(tf.linalg.logdet([[2., 0.], [0., 2.]])), 4)     # log(4)
    1.3863
    """
    return slogdet(matrix)[1]


# --- decompositions (issue 18: the array API's linalg extension) -------------------------

def _mm(a, b, attrs=_NN):
    return execute(_MATMUL, (a, b), attrs)


def _tril_half(m):
    """The lower triangle of the last two axes with the diagonal halved (Cholesky's Phi)."""
    n = int(m.shape[-1])
    mask = np.tril(np.ones((n, n))) - 0.5 * np.eye(n)
    return _m.multiply(m, constant(mask.astype(m.dtype.np), device=m.device))


def _sym(g):
    return _m.multiply(_m.add(g, matrix_transpose(g)), 0.5)


def _cholesky_grad(ctx, dl):
    # A = L L^T: dA = L^-T Phi(L^T dL) L^-1, symmetrised (Murray 2016; TensorFlow's rule)
    ll = ctx.outputs[0]
    linv = inv(ll)
    middle = _tril_half(_mm(ll, dl, _TN))
    return _sym(_mm(_mm(linv, middle, _TN), linv))


def _eigh_grad(ctx, dw, dv):
    # A = V diag(w) V^T: dA = V (diag(dw) + F o (V^T dV)) V^T, F_ij = 1/(w_j - w_i), i != j
    w, v = ctx.outputs
    n = int(w.shape[-1])
    inner = None
    if dv is not None:
        eye = _eye_like(w, n)
        diff = _m.subtract(w[..., None, :], w[..., :, None])
        f = _m.multiply(_m.reciprocal(_m.add(diff, eye)), _m.subtract(1.0, eye))
        inner = _m.multiply(f, _mm(v, dv, _TN))
    if dw is not None:
        d = _diag(dw)
        inner = d if inner is None else _m.add(inner, d)
    if inner is None:
        return None
    return _sym(_mm(_mm(v, inner), v, _NT))


def _eye_like(t, n):
    return constant(np.eye(n, dtype=t.dtype.np), device=t.device)


def _diag(v):
    """``v`` (..., k) -> the (..., k, k) diagonal matrices."""
    return _m.multiply(v[..., None, :], _eye_like(v, int(v.shape[-1])))


def _safe_reciprocal(x):
    # 1/x, and 0 (not inf) at an exact 0 (repeated singular values, zero cotangents):
    # x / (x^2 + [x == 0]), with no absolute epsilon (tiny matrices keep their scale)
    return _m.divide(x, _m.add(_m.square(x), _m.cast(_m.equal(x, 0), x.dtype)))


def _right_solve_rt(x, r):
    """``x @ inv(r)^T`` for square ``r``."""
    return matrix_transpose(solve(r, matrix_transpose(x)))


def _svd_grad(ctx, du, ds, dvh):
    """The reduced SVD's gradient through values and vectors (Townsend 2016; TensorFlow's
    rule): ``A = U diag(s) V^T`` with V = vh^T. Singular values must be distinct for the
    vectors' part (repeated ones give a finite but arbitrary answer, as in TensorFlow)."""
    a = ctx.inputs[0]
    u, s, vh = ctx.outputs
    m, n = int(a.shape[-2]), int(a.shape[-1])
    if ctx.attrs["full_matrices"] and m != n:
        # the completed basis vectors are arbitrary: only a loss that ignores them has a
        # gradient (the usual case: S alone, or the first min(m, n) vectors)
        k = min(m, n)
        extra = du[..., :, k:] if m > n else dvh[..., k:, :]
        if float(_r.reduce_max(_m.abs(extra))) != 0.0:
            raise NotDifferentiableError(
                "the gradient of svd(full_matrices=True) through the completed singular "
                "vectors of a non-square matrix is not defined (any orthonormal completion "
                "is a valid factor); use full_matrices=False", op="Svd")
        u, du = u[..., :, :k], du[..., :, :k]
        vh, dvh = vh[..., :k, :], dvh[..., :k, :]
    v, gv = matrix_transpose(vh), matrix_transpose(dvh)
    gu = du
    adjoint = m > n                     # work on A^T = V S U^T: then m <= n
    if adjoint:
        u, v, gu, gv = v, u, gv, gu
        m, n = n, m
    k = int(s.shape[-1])
    s2 = _m.square(s)
    off = _m.subtract(1.0, _eye_like(s, k))
    f = _m.multiply(_safe_reciprocal(_m.subtract(s2[..., None, :], s2[..., :, None])), off)
    s_mat = _diag(s)
    f_u = _m.multiply(f, _mm(u, gu, _TN))
    f_v = _m.multiply(f, _mm(v, gv, _TN))
    inner = _m.add(_m.add(_diag(ds), _mm(_m.add(f_u, matrix_transpose(f_u)), s_mat)),
                   _mm(s_mat, _m.add(f_v, matrix_transpose(f_v))))
    g = _mm(_mm(u, inner), v, _NT)
    if m != n:                          # V has more rows than columns: its complement
        gvt_v = _mm(gv, v, _TN)
        term = _m.subtract(matrix_transpose(gv), _mm(gvt_v, v, _NT))
        g = _m.add(g, _mm(_mm(u, _diag(_safe_reciprocal(s))), term))
    return matrix_transpose(g) if adjoint else g


def _qr_grad(ctx, dq, dr):
    """The reduced QR's gradient (m >= n, or square; TensorFlow's rule)."""
    a = ctx.inputs[0]
    q, r = ctx.outputs
    m, n = int(a.shape[-2]), int(a.shape[-1])
    if m < n:
        raise NotDifferentiableError(
            f"the gradient of qr of a wide matrix ({m}x{n}: R is not square) is not "
            "implemented; differentiate the qr of its transpose", op="Qr")
    if ctx.attrs["full_matrices"] and m != n:
        raise NotDifferentiableError(
            "the gradient of qr(full_matrices=True) of a non-square matrix is not defined by "
            "the factors alone; use full_matrices=False", op="Qr")
    qdq = _mm(q, dq, _TN)
    qdq_ = _m.subtract(qdq, matrix_transpose(qdq))
    rdr = _mm(r, dr, _NT)
    rdr_ = _m.subtract(rdr, matrix_transpose(rdr))
    lower = constant(np.tril(np.ones((n, n))).astype(a.dtype.np), device=a.device)
    tril = _m.multiply(_m.add(qdq_, rdr_), lower)
    grad_a = _mm(q, _m.add(dr, _right_solve_rt(tril, r)))
    grad_b = _right_solve_rt(_m.subtract(dq, _mm(q, qdq)), r)
    return _m.add(grad_a, grad_b)


_CHOLESKY = defop("Cholesky", inputs=("input",), grad=_cholesky_grad, check=_check_square,
                  batch=BROADCASTING)


@_CHOLESKY.def_jvp
def _cholesky_jvp(ctx, t):
    ll = ctx.outputs[0]                # dL = L Phi(L^-1 dA L^-T)
    linv = inv(ll)
    return _mm(ll, _tril_half(_mm(_mm(linv, _sym(t)), linv, _NT)))


_EIGH = defop("SelfAdjointEigV2", inputs=("input",), num_outputs=2, grad=_eigh_grad,
              check=_check_square, batch=BROADCASTING)


@_EIGH.def_jvp
def _eigh_jvp(ctx, t):
    w, v = ctx.outputs                 # dw = diag(V^T dA V), dV = V (F o V^T dA V)
    n = int(w.shape[-1])
    m = _mm(_mm(v, _sym(t), _TN), v)
    eye = _eye_like(w, n)
    dw = _r.reduce_sum(_m.multiply(m, eye), axis=-1)
    diff = _m.subtract(w[..., None, :], w[..., :, None])
    f = _m.multiply(_m.reciprocal(_m.add(diff, eye)), _m.subtract(1.0, eye))
    return dw, _mm(v, _m.multiply(f, m))


_SVD = defop("Svd", inputs=("input",), attrs={"full_matrices": False}, num_outputs=3,
             grad=_svd_grad, batch=BROADCASTING)


def _svd_values_grad(ctx, ds):
    # dA = U diag(ds) V^T, with U and V from a second (reduced) decomposition
    u, _, vh = execute(_SVD, (ctx.inputs[0],), {"full_matrices": False})
    return _mm(_m.multiply(u, ds[..., None, :]), vh)


_SVD_VALUES = defop("SvdValues", inputs=("input",), grad=_svd_values_grad, batch=BROADCASTING)


@_SVD_VALUES.def_jvp
def _svd_values_jvp(ctx, t):
    u, _, vh = execute(_SVD, (ctx.inputs[0],), {"full_matrices": False})
    return _r.reduce_sum(_m.multiply(u, _mm(t, vh, _NT)), axis=-2)      # diag(U^T dA V)


_QR = defop("Qr", inputs=("input",), attrs={"full_matrices": False}, num_outputs=2,
            grad=_qr_grad, batch=BROADCASTING)


def cholesky(input, name=None):
    """The lower-triangular ``L`` with ``L @ L^T == input`` (symmetric positive
    definite; a batch of them).

    >>> import tapeflow as tf
    >>> print(tf.linalg.cholesky([[4., 2.], [2., 2.]]))
    tf.Tensor(
    [[2. 0.]
     [1. 1.]], shape=(2, 2), dtype=float32)
    """
    return execute(_CHOLESKY, (_tensor(input),))


def eigh(tensor, name=None):
    """``(eigenvalues, eigenvectors)`` of a symmetric matrix, eigenvalues ascending.

    >>> import tapeflow as tf
    >>> w, v = tf.linalg.eigh([[2., 1.], [1., 2.]])
    >>> print(w)
    tf.Tensor([1. 3.], shape=(2,), dtype=float32)
    """
    return execute(_EIGH, (_tensor(tensor),))


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """TensorFlow's order: ``(s, u, v)`` (``v``, not its transpose); ``s`` alone with
    ``compute_uv=False``.

    >>> import tapeflow as tf
    >>> s, u, v = tf.linalg.svd([[3., 0.], [0., 4.]])
    >>> print(s)
    tf.Tensor([4. 3.], shape=(2,), dtype=float32)
    """
    x = _tensor(tensor)
    full = flag(full_matrices, "svd: full_matrices", "Svd", x)
    if not flag(compute_uv, "svd: compute_uv", "Svd", x):
        return execute(_SVD_VALUES, (x,))
    u, s, vh = execute(_SVD, (x,), {"full_matrices": full})
    return s, u, matrix_transpose(vh)


def qr(input, full_matrices=False, name=None):
    """``(q, r)`` with ``q`` orthonormal columns and ``r`` upper triangular.

    >>> import tapeflow as tf
    >>> q, r = tf.linalg.qr([[1., 0.], [0., 2.]])
    >>> print(abs(r))
    tf.Tensor(
    [[1. 0.]
     [0. 2.]], shape=(2, 2), dtype=float32)
    """
    x = _tensor(input)
    return execute(_QR, (x,), {"full_matrices": flag(full_matrices, "qr: full_matrices", "Qr",
                                                      x)})


# --- discrete Fourier transforms (the array API's fft extension) ---------------------------
# Three ops over a tuple of axes; sizes ("n"/"s") are the callers' crops and zero pads
# (ordinary, differentiable slice/pad ops), so each op's gradient is one transform:
# for y = c F x (F the DFT matrix, c the norm's scale), TensorFlow's convention gives
# dx = c conj(F) dy: the inverse transform with the other norm ("backward" <-> "forward").

SWAP_NORM = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _fft_grad(ctx, dy):
    a = ctx.attrs
    return execute(_FFT, (dy,), {"axes": a["axes"], "norm": SWAP_NORM[a["norm"]],
                                 "inverse": not a["inverse"]})


def _rfft_grad(ctx, dy):
    # rfft(x) is the first n//2 + 1 entries (last axis) of fft(x) for a real x
    x = ctx.inputs[0]
    a = ctx.attrs
    last = a["axes"][-1]
    n = int(x.shape[last])
    pads = [[0, 0] for _ in range(x.ndim)]
    pads[last][1] = n - int(dy.shape[last])
    full = pad(dy, pads)
    g = execute(_FFT, (full,), {"axes": a["axes"], "norm": SWAP_NORM[a["norm"]],
                                "inverse": True})
    return _m.real(g)


def _irfft_grad(ctx, dy):
    # irfft's input is a half spectrum: entries 1 .. (n-1)//2 stand for two (themselves
    # and their conjugate), so they get twice the gradient of rfft(dy)
    a = ctx.attrs
    x = ctx.inputs[0]
    last = a["axes"][-1]
    n = a["n"]
    g = execute(_RFFT, (dy,), {"axes": a["axes"], "norm": SWAP_NORM[a["norm"]]})
    k = int(g.shape[last])
    w = np.full(k, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    shape = [1] * x.ndim
    shape[last] = k
    return _m.multiply(g, constant(w.reshape(shape).astype(x.dtype.real_dtype.np),
                                   device=g.device))


def _check_fft(op, tensors, attrs, device):
    """FFT/RFFT/IRFFT on every backend (a direct call skips fft_transform's checks):
    ``axes`` a non-empty tuple of distinct integer axes of the input, a known ``norm``,
    bool ``inverse``, a positive int ``n``."""
    shape = tuple(tensors[0]._data.shape)
    nd = len(shape)
    axes = attrs["axes"]
    if (type(axes) is not tuple or not axes or not all(
            isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))
            and -nd <= a < nd for a in axes) or len({int(a) % nd for a in axes}) != len(axes)):
        raise InvalidArgumentError(
            f"{op.name}: axes must be a non-empty tuple of distinct integer axes of the "
            f"input of shape {_fmt(shape)}, got {_shapes.short_repr(axes)}")
    if op is not _IRFFT and any(shape[a] == 0 for a in axes):
        raise InvalidArgumentError(
            f"{op.name}: Invalid number of FFT data points (0): the input of shape "
            f"{_fmt(shape)} is empty along the axes {_shapes.short_repr(axes)}")
    if not isinstance(attrs["norm"], str) or attrs["norm"] not in SWAP_NORM:
        raise InvalidArgumentError(f"{op.name}: Invalid norm value "
                                   f"{_shapes.short_repr(attrs['norm'])}: norm must be 'backward', "
                                   "'ortho' or 'forward'")
    if not isinstance(attrs.get("inverse", False), (bool, np.bool_)):
        raise InvalidArgumentError(
            f"{op.name}: inverse must be a bool, got {_shapes.short_repr(attrs['inverse'])}")
    n = attrs.get("n", 1)
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)) or n < 1:
        raise InvalidArgumentError(f"{op.name}: Invalid number of FFT data points n="
                                   f"{_shapes.short_repr(n)}: n must be a positive int")


def _fft_batch(ctx, x):
    # the axes, counted from the end, skip the batch
    r = len(x.shape) - 1
    return rerun(ctx, (x,), axes=tuple(a - r if a >= 0 else a for a in ctx.attrs["axes"]))


_FFT = defop("FFT", inputs=("x",), attrs={"axes": (-1,), "norm": "backward", "inverse": False},
             grad=_fft_grad, check=_check_fft, jvp=Linear(), batch=_fft_batch)
_RFFT = defop("RFFT", inputs=("x",), attrs={"axes": (-1,), "norm": "backward"},
              grad=_rfft_grad, check=_check_fft, jvp=Linear(), batch=_fft_batch)
_IRFFT = defop("IRFFT", inputs=("x",), attrs={"axes": (-1,), "norm": "backward", "n": 0},
               grad=_irfft_grad, check=_check_fft, jvp=Linear(), batch=_fft_batch)


def fft_transform(x, axes, norm="backward", inverse=False, kind="c2c", n=None):
    """The transform ``kind`` ("c2c", "r2c", "c2r") of ``x`` over ``axes`` (sizes
    already cropped/padded; for "c2r", ``n`` is the output's length on the last axis).
    The building block of ``tapeflow.numpy.fft``."""
    x = _tensor(x)
    if kind not in ("c2c", "r2c", "c2r"):
        raise InvalidArgumentError(f"fft: kind must be 'c2c', 'r2c' or 'c2r', got {kind!r}",
                                   op="FFT")
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    if not isinstance(axes, (list, tuple)) or not all(
            isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in axes):
        raise InvalidArgumentError(f"fft: axes must be a sequence of ints, got {axes!r}",
                                   op="FFT")
    if x.ndim == 0 or any(not -x.ndim <= a < x.ndim for a in axes):
        raise InvalidArgumentError(f"fft: axes {tuple(axes)} out of range for an input of "
                                   f"shape {list(x.shape)}", op="FFT")
    axes = tuple(int(a) % x.ndim for a in axes)
    if kind == "c2r" and (not isinstance(n, (int, np.integer)) or isinstance(n, bool)
                          or n < 1):
        raise InvalidArgumentError(f"irfft: n must be a positive int, got {n!r}", op="IRFFT")
    if not isinstance(norm, str) or norm not in SWAP_NORM:
        raise InvalidArgumentError(f"fft: norm must be 'backward', 'ortho' or 'forward', got "
                                   f"{norm!r}", op="FFT")
    if len(set(axes)) != len(axes) or not axes:
        raise InvalidArgumentError(f"fft: axes must be distinct and not empty, got {axes}",
                                   op="FFT")
    if kind == "r2c":
        if x.dtype.is_complex:
            raise InvalidArgumentError(f"rfft needs a real input, got {x.dtype.name}", op="RFFT")
        return execute(_RFFT, (x,), {"axes": axes, "norm": norm})
    if not x.dtype.is_complex:
        raise InvalidArgumentError(f"fft needs a complex input, got {x.dtype.name}",
                                   op="FFT" if kind == "c2c" else "IRFFT")
    if kind == "c2r":
        return execute(_IRFFT, (x,), {"axes": axes, "norm": norm, "n": int(n)})
    return execute(_FFT, (x,), {"axes": axes, "norm": norm,
                                "inverse": flag(inverse, "fft: inverse", "FFT", x)})
