"""Comparing what an op returned with its NumPy reference (device, shape, dtype,
values within the case dtype's tolerance, signed zeros), or validating it with the
spec's ``check`` for random ops."""

from __future__ import annotations

import numpy as np

from ._common import _as_list, _bf16_to_f32, _fmt, _kind, _tf
from .samples import tolerance


_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _np_case_dtype(case_dtype):
    """The NumPy dtype of a case dtype (a DType, a NumPy dtype or name), or None."""
    if case_dtype is None:
        return None
    try:
        return np.dtype(getattr(case_dtype, "np", case_dtype))
    except TypeError:
        return None


def reference_as_result(expected, result_dtype, case_dtype=None):
    """The reference's output ``expected`` as a NumPy array to compare with a result of
    ``result_dtype`` in a case of ``case_dtype``: references may be written in any
    precision and return Python values.

    * a Python value (``float``, ``int``, ``bool``, a list) has no dtype of its own: it
      takes the result's dtype when that is of the same or a wider kind (bool < int <
      float), as a Python scalar does in NumPy 2;
    * a float array (or NumPy scalar) more precise than the result, when the result has
      the dtype of the case (a float64 reference for a float32 op), is rounded to it;
    * anything else keeps its dtype, so a result of the wrong dtype or kind is reported.
    """
    rd = np.dtype(result_dtype)
    weak = not isinstance(expected, (np.ndarray, np.generic))
    exp = np.asarray(expected)
    ek, rk = _kind(exp.dtype), _kind(rd)
    if exp.dtype == rd or ek not in _KIND_ORDER or rk not in _KIND_ORDER:
        return exp
    if weak and _KIND_ORDER[ek] <= _KIND_ORDER[rk]:
        with np.errstate(all="ignore"):
            return exp.astype(rd)
    cd = _np_case_dtype(case_dtype)
    if (ek == "f" and rk == "f" and rd == cd
            and exp.dtype.itemsize > rd.itemsize):
        with np.errstate(all="ignore"):     # (beyond the dtype's range: inf, as the op)
            return exp.astype(rd)
    return exp


def _compare_one(actual, expected, spec, case_dtype, dev, what):
    """Compare one output tensor with the reference's: device, shape, dtype (after
    :func:`reference_as_result`), values within :func:`tolerance` of the case dtype."""
    tf = _tf()
    if isinstance(actual, tf.Variable):
        actual = actual.read_value()
    if not isinstance(actual, tf.Tensor):
        raise AssertionError(f"{what}: returned a {type(actual).__name__}, expected a tf.Tensor")
    if actual.device != dev.name:
        raise AssertionError(f"{what}: the result is on {actual.device}, expected {dev.name}")
    got = actual.numpy()
    if case_dtype is None:
        case_dtype = got.dtype
    exp = reference_as_result(expected, got.dtype, case_dtype)
    if got.shape != exp.shape:
        raise AssertionError(f"{what}: result shape {got.shape} != reference shape {exp.shape}")
    if spec.check_dtype and got.dtype != exp.dtype:
        raise AssertionError(f"{what}: result dtype {tf.dtypes.from_numpy(got.dtype).name} != "
                             f"reference dtype {exp.dtype.name} (a more precise float reference "
                             "is rounded to the case dtype, Python values take the result's; "
                             "set check_dtype=False in the spec only if the reference cannot "
                             "produce the right dtype)")
    if spec.signed_zeros and _kind(exp.dtype) == "f":
        zero = (exp == 0) & (got.astype(exp.dtype) == 0)
        bad = zero & (np.signbit(got) != np.signbit(exp))
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
            raise AssertionError(
                f"{what}: the sign of a zero result differs from the NumPy reference "
                f"({int(bad.sum())} element(s), first at index {first})\n"
                f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")
    tol = tolerance(spec, case_dtype, got.dtype)
    if tol is None:
        if _kind(exp.dtype) in "fc":
            ok = np.array_equal(got.astype(exp.dtype), exp, equal_nan=True)
        else:
            ok = np.array_equal(got, exp)
        if ok:
            return
        bad = got != exp if got.shape else np.array(got != exp)
        idx = np.argwhere(bad)
        first = tuple(int(i) for i in idx[0]) if idx.size else ()
        raise AssertionError(
            f"{what}: result differs from the NumPy reference (exact comparison)\n"
            f"  mismatched elements: {int(np.sum(bad))} / {bad.size}, first at index {first}\n"
            f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")
    rtol, atol = tol
    g64 = got.astype(np.float64)
    e64 = exp.astype(np.float64)
    close = np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g64 - e64)
        diff = np.where(close, 0.0, np.where(np.isnan(diff), np.inf, diff))
        rel = diff / np.maximum(np.abs(e64), np.finfo(np.float64).tiny)
    ia = np.unravel_index(np.argmax(diff), diff.shape) if diff.ndim else ()
    ir = np.unravel_index(np.argmax(rel), rel.shape) if rel.ndim else ()
    raise AssertionError(
        f"{what}: result differs from the NumPy reference\n"
        f"  mismatched elements: {int(np.sum(~close))} / {close.size}; "
        f"max abs err {float(diff[ia]):.4g} at index {tuple(int(i) for i in ia)}, "
        f"max rel err {float(rel[ir]):.4g} at index {tuple(int(i) for i in ir)} "
        f"(rtol={rtol:g}, atol={atol:g})\n"
        f"  actual:   {_fmt(got)}\n  expected: {_fmt(exp)}")


def _verify(spec, sample, out, dev, dtype, what):
    """Compare ``out`` (what ``spec.fn`` returned for ``sample`` on ``dev``) with
    ``spec.ref``, or validate it with ``spec.check`` for random ops.

    The reference may return one array-like for one output (a NumPy array of any
    dtype, a Python scalar or list: see :func:`reference_as_result`), or a list/tuple
    with one entry per output when the op returns several."""
    tf = _tf()
    np_args = [a.copy() if isinstance(a, np.ndarray) else a for a in sample.args]
    if spec.check is not None:
        outs = _as_list(out)
        for k, o in enumerate(outs):
            if not isinstance(o, (tf.Tensor, tf.Variable)):
                raise AssertionError(f"{what}: output {k} is a {type(o).__name__}, expected "
                                     "a tf.Tensor")
            if o.device != dev.name:
                raise AssertionError(f"{what}: output {k} is on {o.device}, expected {dev.name}")
        host = tuple(o.numpy() for o in outs) if isinstance(out, (list, tuple)) else out.numpy()
        try:
            with tf.device(dev), np.errstate(all="ignore"):   # its own draws: same device
                ok = spec.check(host, *np_args, **sample.kwargs)
        except AssertionError as e:
            raise AssertionError(f"{what}: spec.check failed: {e}") from None
        if ok is False:
            raise AssertionError(f"{what}: spec.check returned False for {_fmt(host)}")
        return
    ref_kwargs = sample.kwargs if sample.ref_kwargs is None else sample.ref_kwargs
    with np.errstate(all="ignore"):
        expected = spec.ref(*[_bf16_to_f32(a) for a in np_args], **ref_kwargs)
    multi = isinstance(out, (list, tuple))
    if not multi and isinstance(expected, (list, tuple)) and _one_array(expected):
        expected = np.asarray(expected)        # a list for one output: its values
    outs, exps = _as_list(out), _as_list(expected)
    if multi != isinstance(expected, (list, tuple)) or len(outs) != len(exps):
        raise AssertionError(f"{what}: returned {len(outs)} output(s) "
                             f"({type(out).__name__}); the reference returned {len(exps)} "
                             f"({type(expected).__name__})")
    for k, (o, e) in enumerate(zip(outs, exps)):
        _compare_one(o, e, spec, dtype, dev, what + (f" output {k}" if multi else ""))


def _one_array(values):
    """Whether a list/tuple the reference returned holds the values of one output:
    Python numbers (or lists of them) making a numeric, not ragged, array. A tuple of
    NumPy arrays stands for several outputs."""
    if any(isinstance(v, np.ndarray) for v in values):
        return False
    try:
        a = np.asarray(values)
    except ValueError:
        return False
    return a.dtype.kind in _KIND_ORDER


def _reference_runs(spec, sample):
    """Whether ``spec.ref`` accepts ``sample`` (values made for a layout may be outside
    the op's domain, e.g. a singular matrix, where the reference raises)."""
    np_args = [_bf16_to_f32(a.copy()) if isinstance(a, np.ndarray) else a
               for a in sample.args]
    ref_kwargs = sample.kwargs if sample.ref_kwargs is None else sample.ref_kwargs
    try:
        with np.errstate(all="ignore"):
            spec.ref(*np_args, **ref_kwargs)
    except Exception:
        return False
    return True


def _host_copies(out):
    tf = _tf()
    return [o.numpy() if isinstance(o, (tf.Tensor, tf.Variable)) else None
            for o in _as_list(out)]
