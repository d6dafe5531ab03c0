"""The checks, each a plain function raising ``AssertionError`` (``SkipCase`` when it
cannot run here): what an op returned against its NumPy reference (device, shape,
dtype, values within the case dtype's tolerance, signed zeros; or the spec's
``check`` for random ops), then the kinds of check built on that comparison:

* ``forward`` and ``noncontiguous``: every sample on the device against the
  reference, with contiguous inputs or in each layout (:func:`check_sample`,
  :func:`check_forward`); ``gradients``: :func:`~tapeflow.testing.check_grads` in
  float64 (:func:`check_gradients`); ``errors``: the error contract of every
  :class:`~tapeflow.testing.specs.ErrorSample` (:func:`check_errors`);
* ``traced``: every sample through :func:`tapeflow.function` (the tracing call, a
  replay with the same arguments, a replay with other values of the same signature),
  and the specs that cannot be traced (:data:`UNTRACEABLE`);
* batching: :func:`tapeflow.vectorized_map` over a batch of examples against a loop
  over them (:func:`check_batched`)."""

from __future__ import annotations

import dataclasses
import functools
import os
import re

import numpy as np

from ...tracing import TracingError
from ...tracing.vectorize import recording_fallbacks
from ..gradcheck import check_grads
from .samples import (BROADCAST, LAYOUTS, SkipCase, _arrays, _as_list, _bf16_to_f32,
                      _describe_args, _draw, _fmt, _glob, _grad_argnums, _has_nc, _kind,
                      _missing_kernel, _other_values, _seed, _tf, _to_device, broadcast_values,
                      dtypes_under_test, layout_candidate, samples_for, tolerance)


# --- results against the reference --------------------------------------------------------

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


# --- the eager checks: forward, noncontiguous, gradients, errors --------------------------

def _sample_label(spec, sample, dev, dtype, index):
    label = f"sample {index}" if index is not None else "sample"
    if sample.name:
        label += f" {sample.name!r}"
    dname = getattr(dtype, "name", dtype)
    return f"{spec.name}{f' [{dname}]' if dname else ''} on {dev.name}, {label}"


def check_sample(spec, sample, device, dtype=None, noncontiguous=False, index=None):
    """Run one sample forward on ``device`` and compare with ``spec.ref`` (or
    validate with ``spec.check``). Raises AssertionError on a mismatch.

    ``noncontiguous``: ``False`` (contiguous inputs), ``True`` (once per layout of
    :data:`LAYOUTS` that applies to some array argument) or one layout name. Each
    layout run gives every eligible argument (:func:`layout_candidate`) that layout;
    for ``"broadcast (stride 0)"`` their values are :func:`broadcast_values` (the first
    slice along axis 0 repeated) and the reference gets the same values (the layout
    is skipped for a sample whose reference raises on them, e.g. a singular matrix,
    and for random ops validated by ``spec.check``, which need distinct values).
    Every failing layout is reported, each named (``non-contiguous inputs: offset
    view``), so the message says which layout the kernel gets wrong. Returns the number
    of runs (layouts a device cannot hold are skipped, see :func:`noncontiguous_tensor`).
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    if not noncontiguous:
        _run_sample(spec, sample, dev, dtype, index, None)
        return 1
    layouts = LAYOUTS if noncontiguous is True else (noncontiguous,)
    failures, ran = [], 0
    for layout in layouts:
        if not any(layout_candidate(a, layout) for a in sample.args):
            continue
        if layout == BROADCAST and spec.check is not None:
            # A random op's check needs the sample's distinct values (a shuffle of
            # equal rows cannot be told from no shuffle): no repeated-value layout.
            continue
        try:
            ran += _run_sample(spec, sample, dev, dtype, index, layout)
        except SkipCase:
            continue
        except AssertionError as e:
            failures.append(e)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise AssertionError(f"{len(failures)} non-contiguous layouts fail:\n"
                             + "\n".join(f"- {e}" for e in failures)) from failures[0]
    return ran


def _run_sample(spec, sample, dev, dtype, index, layout):
    """One forward run of ``sample`` with contiguous inputs (``layout=None``) or with its
    eligible array arguments in ``layout``; returns 1, or 0 when skipped."""
    tf = _tf()
    variant = ""
    if layout is not None:
        which = [str(i) for i, a in enumerate(sample.args) if layout_candidate(a, layout)]
        variant = (f" (non-contiguous inputs: {layout}; argument{'s' if len(which) > 1 else ''} "
                   f"{', '.join(which)}")
        if layout == BROADCAST:
            args = tuple(broadcast_values(a) if layout_candidate(a, layout) else a
                         for a in sample.args)
            sample = dataclasses.replace(sample, args=args)
            variant += ": the first slice along axis 0 repeated"
            if spec.check is None and not _reference_runs(spec, sample):
                return 0
        variant += ")"
    what = (f"{_sample_label(spec, sample, dev, dtype, index)}{variant} "
            f"{_describe_args(sample.args, sample.kwargs)}")
    # Edge samples (inf, nan, 0) make NumPy warn by design, in kernels and references.
    with tf.device(dev), np.errstate(all="ignore"):
        targs = _to_device(sample.args, dev, layout)
        try:
            out = spec.fn(*targs, **sample.kwargs)
        except Exception as e:
            if layout is None:
                e.add_note(f"conformance: raised by {what}")
                raise
            raise AssertionError(f"{what}: raised {type(e).__name__}: {e}") from e
    _verify(spec, sample, out, dev, dtype, what)
    return 1


def check_forward(spec, device, dtype, noncontiguous=False):
    """Every sample of ``dtype`` forward on ``device`` (see :func:`check_sample`; with
    ``noncontiguous``, the samples with an array argument some layout of
    :data:`LAYOUTS` applies to). Returns the number of samples run; raises SkipCase
    when there is nothing to run."""
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    ran = 0
    for i, s in enumerate(samples):
        if noncontiguous and not _has_nc(s):
            continue
        if check_sample(spec, s, device, dtype, noncontiguous, index=i):
            ran += 1
    if not ran:
        raise SkipCase(f"spec {spec.name} has no {dtype.name} sample with a non-empty array "
                       "argument of rank >= 1 whose non-contiguous layouts the device can hold "
                       "(nothing to make non-contiguous)")
    return ran


def check_gradients(spec, device, order=None):
    """``check_grads`` (float64) on every float64 sample, to ``spec.grad_order``."""
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    order = spec.grad_order if order is None else order
    if order <= 0:
        raise SkipCase(f"{spec.name} is not differentiable (grad_order=0)")
    dts, _, excluded = dtypes_under_test(spec, dev.type)
    why = dev.backend.dtype_unsupported(dev, tf.float64)
    if why:
        raise SkipCase(f"gradients are checked in float64: {why}")
    if tf.float64 not in dts:
        raise SkipCase(excluded.get("float64") or
                       f"float64 is not among the dtypes tested for {spec.name} on {dev.type} "
                       "(gradients are checked in float64)")
    rtol, atol = spec.grad_tol
    ran = 0
    for i, s in enumerate(samples_for(spec, tf.float64)):
        argnums = _grad_argnums(s)
        if not argnums:
            continue
        f = functools.partial(spec.fn, **s.kwargs) if s.kwargs else spec.fn
        f = _named(f, spec.name)
        try:
            check_grads(f, s.args, order=order, rtol=rtol, atol=atol, device=dev,
                        argnums=argnums, seed=_seed(spec.name, i))
        except AssertionError as e:
            raise AssertionError(f"{spec.name} on {dev.name}, sample {i}"
                                 f"{f' {s.name!r}' if s.name else ''} "
                                 f"{_describe_args(s.args, s.kwargs)}:\n{e}") from None
        ran += 1
    if not ran:
        raise SkipCase(f"spec {spec.name} has no float64 sample with a float argument to "
                       "differentiate")
    return ran


def _named(f, name):
    def g(*a):
        return f(*a)
    g.__name__ = name
    return g


def check_errors(spec, device):
    """Every :class:`ErrorSample`: the right error type, with a message naming the op
    (``[Op:``) and the device, in which the regular expression ``match`` is found
    (``re.search``, as ``pytest.raises(match=)``; ``re.escape`` literal text)."""
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    if not spec.errors:
        raise SkipCase(f"spec {spec.name} has no error samples")
    for i, err in enumerate(spec.errors):
        what = (f"{spec.name} on {dev.name}, error sample {i}"
                f"{f' {err.name!r}' if err.name else ''} {_describe_args(err.args, err.kwargs)}")
        pattern = _match_pattern(err.match, what)
        try:
            with tf.device(dev):
                targs = _to_device(err.args, dev)
                spec.fn(*targs, **err.kwargs)
        except err.error as e:
            msg = str(e)
            missing = [m for m in ("[Op:", dev.name) if m not in msg]
            if pattern is not None and not pattern.search(msg):
                missing.append(err.match)
            if missing:
                hint = ""
                if err.match in missing and err.match in msg:
                    hint = (f"\n  (match is a regular expression, and {err.match!r} appears "
                            "literally: escape it, match=re.escape(...))")
                raise AssertionError(
                    f"{what}: raised {type(e).__name__} as expected, but the message lacks "
                    f"{missing}:\n  {msg}{hint}") from None
        except Exception as e:
            raise AssertionError(f"{what}: expected {err.error.__name__}, got "
                                 f"{type(e).__name__}: {e}") from e
        else:
            raise AssertionError(f"{what}: expected {err.error.__name__} "
                                 f"(matching {err.match!r}); nothing was raised")
    return len(spec.errors)


def _match_pattern(match, what):
    """``ErrorSample.match`` compiled (None when empty); AssertionError naming the
    sample when it is not a valid regular expression."""
    if not match:
        return None
    try:
        return re.compile(match)
    except re.error as e:
        raise AssertionError(f"{what}: match={match!r} is not a valid regular expression "
                             f"({e}); it is searched with re.search, so escape literal text: "
                             "match=re.escape(...)") from None


# --- the traced check ---------------------------------------------------------------------

#: Specs whose ``fn`` cannot run inside :func:`tapeflow.function`, by spec-name glob:
#: ``{pattern: reason}``. The traced case of a listed spec still runs every sample: the
#: samples that trace must pass; when some raise ``TracingError`` the case is skipped
#: with this reason, naming them; a listed spec whose samples all trace fails, so the
#: list cannot go stale. (A third-party suite can also skip the kind for a spec with
#: ``OpSpec.skip = {"traced": reason}``.)
UNTRACEABLE: dict = {
    "linspace": "tf.linspace reads start, stop and num on the host (tensor arguments are "
                "converted with .numpy()): the output length is a Python value",
    "pad": "tf.pad reads tensor paddings on the host (.numpy()): they decide the output "
           "shape; Python/NumPy paddings trace",
}


#: Which dtypes the ``traced`` kind runs per (spec, device): ``"one"`` (float32 when
#: tested, else the first dtype under test that has samples) or ``"all"`` (every dtype
#: ``forward`` runs). Tracing exercises the function machinery, not the kernels (the
#: forward cases cover every dtype), so one dtype per spec keeps the suite's time down;
#: the environment variable ``TAPEFLOW_TRACED_DTYPES=all`` runs every dtype.
TRACED_DTYPES = "one"


def _traced_dtypes_mode():
    mode = os.environ.get("TAPEFLOW_TRACED_DTYPES", "").strip().lower() or TRACED_DTYPES
    if mode not in ("one", "all"):
        raise ValueError(f"TAPEFLOW_TRACED_DTYPES must be 'one' or 'all', not {mode!r}")
    return mode


def untraceable_reason(spec):
    """Why ``spec`` cannot be traced (:data:`UNTRACEABLE`), or None."""
    for pat, reason in UNTRACEABLE.items():
        if _glob(pat).fullmatch(spec.name):
            return reason
    return None


def _fmt_values(sample):
    return "; ".join(_fmt(a).replace("\n", " ") for a in _arrays(sample.args))[:300]


def check_traced_sample(spec, sample, device, dtype=None, index=None, other=None):
    """``spec.fn`` (with ``sample.kwargs`` bound) wrapped in :func:`tapeflow.function`,
    called three times on ``device``: (1) the tracing call, (2) the same arguments
    again, which must replay the graph without running the Python function, and
    (3) ``other``'s arguments (same signature, other values; default: ``sample``'s
    again), which must replay too. Each result is compared with ``spec.ref`` (or
    validated by ``spec.check``) as :func:`check_sample` does; afterwards the results
    of calls 1 and 2 and the input tensors must still hold their values (a replay
    must not write into buffers it returned earlier or was given).

    Raises AssertionError on a mismatch; ``TracingError`` propagates (the op's Python
    needed a tensor's value, see :data:`UNTRACEABLE`).

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import conformance
    >>> from tapeflow.testing import OpSpec, Sample
    >>> spec = OpSpec(name="square", fn=tf.square, ref=np.square, samples=None)
    >>> conformance.check_traced_sample(spec, Sample((np.arange(3.0),)), "cpu:0",
    ...                                 other=Sample((np.ones(3),)))
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    label = f"sample {index}" if index is not None else "sample"
    if sample.name:
        label += f" {sample.name!r}"
    dname = getattr(dtype, "name", dtype)
    what = (f"{spec.name}{f' [{dname}]' if dname else ''} on {dev.name}, {label} "
            f"{_describe_args(sample.args, sample.kwargs)}, in tf.function")
    traces = [0]
    kwargs = dict(sample.kwargs)

    def traced(*args):
        traces[0] += 1
        return spec.fn(*args, **kwargs)

    traced.__name__ = re.sub(r"\W", "_", spec.name)
    f = tf.function(traced)
    if other is None or other is sample:
        other, third = sample, "call 3 (replay; the spec has no other values of this signature)"
    else:
        third = "call 3 (replay, other values of the same signature)"
    steps = (("call 1 (tracing)", sample), ("call 2 (replay, same arguments)", sample),
             (third, other))
    kept = []
    with tf.device(dev), np.errstate(all="ignore"):
        for step, s in steps:
            targs = _to_device(s.args, dev)
            try:
                out = f(*targs)
            except Exception as e:
                e.add_note(f"conformance: raised by {what}, {step}")
                raise
            if traces[0] != 1:
                raise AssertionError(
                    f"{what}, {step}: the Python function ran again (trace {traces[0]}) for "
                    "arguments of a signature already traced; the call should replay the graph")
            _verify(spec, s, out, dev, dtype, f"{what}, {step}"
                    + (f", values {_fmt_values(s)}" if s is not sample else ""))
            kept.append((step, out, _host_copies(out), targs, s))
    for step, out, hosts, targs, s in kept:
        for j, (o, h) in enumerate(zip(_as_list(out), hosts)):
            if h is None:
                continue
            now = o.numpy()
            if not np.array_equal(now, h, equal_nan=_kind(h.dtype) in "fc"):
                raise AssertionError(
                    f"{what}: the result{f' {j}' if len(hosts) > 1 else ''} of {step} changed "
                    "after the later calls: a replay wrote into a buffer it had returned "
                    f"before\n  then: {_fmt(h)}\n  now:  {_fmt(now)}")
        for j, (t, a) in enumerate(zip(targs, s.args)):
            if isinstance(a, np.ndarray):
                now = t.numpy()
                if not np.array_equal(now, a, equal_nan=_kind(a.dtype) in "fc"):
                    raise AssertionError(
                        f"{what}: input {j} of {step} was modified by the traced function "
                        f"(an input buffer was reused)\n  given: {_fmt(a)}\n  now:   "
                        f"{_fmt(now)}")


#: the tracer (``tapeflow/tracing/``) and the tensor classes and eager context
#: (``tapeflow/runtime/``): frames there are not where a tensor's value was asked for
_MACHINERY = tuple(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), d) + os.sep for d in ("tracing", "runtime"))


def _where(e):
    """`` (in file.py:12 fn)``: the innermost frame of ``e``'s traceback outside the
    tracer and the tensor classes (:data:`_MACHINERY`: where a tensor's value was asked
    for)."""
    where = ""
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not os.path.abspath(code.co_filename).startswith(_MACHINERY):
            where = f" (in {os.path.basename(code.co_filename)}:{tb.tb_lineno} {code.co_name})"
        tb = tb.tb_next
    return where


def check_traced(spec, device, dtype):
    """Every sample of ``dtype`` through :func:`tapeflow.function` on ``device`` (see
    :func:`check_traced_sample`; the third call takes the values of a second draw of
    the samples, with another rng seed).

    An unlisted spec raising ``TracingError`` fails, naming :data:`UNTRACEABLE`. For a
    listed spec every sample still runs: those that trace must pass, and if some
    raise ``TracingError`` the case is skipped (SkipCase naming the reason, those
    samples and where the value was needed); if none does, it fails (stale entry).
    """
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    missing = _missing_kernel(tf.runtime.registry.OPS.get(spec.op) if spec.op else None,
                              tf.runtime.devices.get_device(device))
    if missing:
        raise SkipCase(f"{missing}: not traced on {device}")
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    rng = np.random.default_rng(_seed(spec.name, dtype.name, "traced"))
    second = _draw(spec, dtype, rng)
    reason = untraceable_reason(spec)
    untraced = []
    for i, s in enumerate(samples):
        try:
            check_traced_sample(spec, s, device, dtype, index=i,
                                other=_other_values(s, i, samples, second))
        except TracingError as e:
            label = f"sample {i}{f' {s.name!r}' if s.name else ''}"
            if not reason:
                raise AssertionError(
                    f"{spec.name} [{dtype.name}] on {device}, {label}: cannot be traced by "
                    f"tf.function{_where(e)}: {e}\n(if that is by design, list the spec in "
                    "tapeflow.testing.conformance.UNTRACEABLE with the reason)") from None
            untraced.append(f"{label}{_where(e)}")
    if reason and not untraced:
        raise AssertionError(
            f"{spec.name} is listed in conformance.UNTRACEABLE ({reason}) but every sample "
            f"traced and replayed correctly on {device}: remove it from the list")
    if untraced:
        raise SkipCase(f"{spec.name} cannot be traced (conformance.UNTRACEABLE): {reason}; "
                       f"TracingError for {', '.join(untraced)}; the other "
                       f"{len(samples) - len(untraced)} sample(s) passed")
    return len(samples)


# --- the batching check -------------------------------------------------------------------

def check_batched(spec, device, dtype):
    """:func:`tapeflow.vectorized_map` against a loop, for every sample of ``dtype`` with
    an array argument, on ``device``: the batch is three examples (the sample, the
    values of a second draw of the same signature, the sample again), first with every
    array argument batched, then (for several) with only the first, then only the last
    batched (the others the sample's, shared by the examples). Results (values, dtype,
    shape) must equal ``stack([spec.fn(*example) for example in batch])``.

    Returns the set of what ran once per example instead of through a batching rule
    (``"op Where"``; ``"the function"`` when the op's Python needs tensor values),
    which the caller checks against the ops' declared rules. Random specs are skipped:
    each example draws its own numbers, which a loop cannot reproduce.

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import conformance
    >>> from tapeflow.testing import OpSpec, Sample
    >>> spec = OpSpec(name="add", fn=tf.add, ref=np.add,
    ...               samples=lambda dt, rng: [Sample((np.arange(3.0), np.ones(3)))])
    >>> conformance.check_batched(spec, "cpu:0", tf.float64)
    set()
    """
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    dev = tf.runtime.devices.get_device(device)
    if spec.check is not None:
        raise SkipCase(f"{spec.name} is random: each example draws its own numbers")
    samples = samples_for(spec, dtype)
    if not samples:
        raise SkipCase(f"spec {spec.name} has no samples for dtype {dtype.name}")
    second = _draw(spec, dtype, np.random.default_rng(_seed(spec.name, dtype.name, "batch")))
    fell_back = set()
    ran = 0
    for i, s in enumerate(samples):
        pos = [j for j, a in enumerate(s.args) if isinstance(a, np.ndarray)]
        if not pos:
            continue
        other = _other_values(s, i, samples, second) or s
        modes = [tuple(pos)] + ([(pos[0],), (pos[-1],)] if len(pos) > 1 else [])
        for batched in modes:
            what = (f"{spec.name} [{dtype.name}] on {dev.name}, sample {i}"
                    f"{f' {s.name!r}' if s.name else ''} {_describe_args(s.args, s.kwargs)}, "
                    f"tf.vectorized_map over argument(s) {list(batched)}")
            parts = _check_batch(spec, s, other, batched, dev, dtype, what)
            if parts is not None:
                fell_back |= parts
                ran += 1
    if not ran:
        raise SkipCase(f"{spec.name} has no {dtype.name} sample with an array argument")
    return fell_back


def _check_batch(spec, s, other, batched, dev, dtype, what):
    """``tf.vectorized_map`` of ``spec.fn`` over the examples ``(s, other, s)``, the
    arguments ``batched`` taken from each example and the others from ``s``, against the
    loop over them. Returns what ran once per example (:func:`recording_fallbacks`), or
    None when the examples were refused: by the op (its error samples) or, for results
    of different shapes, by ``vectorized_map``."""
    tf = _tf()
    exs = [[(e.args[j] if j in batched else s.args[j]) for j in range(len(s.args))]
           for e in (s, other, s)]
    with tf.device(dev), np.errstate(all="ignore"):
        try:
            expected = [_host_copies(spec.fn(*_to_device(a, dev), **s.kwargs)) for a in exs]
        except Exception:
            return None                 # the op refuses these values: an error sample
        ragged = any(len({getattr(e[k], "shape", None) for e in expected}) > 1
                     for k in range(len(expected[0])))
        fixed = _to_device(s.args, dev)
        elems = tuple(tf.constant(np.stack([a[j] for a in exs]), device=dev) for j in batched)

        def fn(xs):
            args = list(fixed)
            for j, x in zip(batched, xs):
                args[j] = x
            return spec.fn(*args, **s.kwargs)
        with recording_fallbacks() as parts:
            try:
                out = tf.vectorized_map(fn, elems, warn=False)
            except tf.errors.InvalidArgumentError as e:
                if ragged and "different shapes" in str(e):
                    return None         # the examples' results differ in shape: refused
                e.add_note(f"conformance: raised by {what}")
                raise
            except Exception as e:
                e.add_note(f"conformance: raised by {what}")
                raise
    if ragged:
        raise AssertionError(f"{what}: the examples' results differ in shape, but "
                             "vectorized_map did not refuse them")
    _compare_batch(spec, dtype, what, _host_copies(out), expected)
    return parts


def _compare_batch(spec, dtype, what, got, expected):
    """The outputs of ``vectorized_map`` (host copies) against the loop's, stacked:
    dtype, shape, then values within the case dtype's tolerance."""
    if len(got) != len(expected[0]):
        raise AssertionError(f"{what}: {len(got)} output(s), the loop gives "
                             f"{len(expected[0])}")
    for k, g in enumerate(got):
        want = np.stack([e[k] for e in expected])
        label = f"{what}, output {k}" if len(got) > 1 else what
        if g.dtype != want.dtype or g.shape != want.shape:
            raise AssertionError(
                f"{label}: {g.dtype}{list(g.shape)}, the loop gives "
                f"{want.dtype}{list(want.shape)}")
        tol = tolerance(spec, dtype, g.dtype)
        ok = (np.array_equal(g, want, equal_nan=g.dtype.kind in "fc") if tol is None
              else np.allclose(g, want, rtol=tol[0], atol=tol[1], equal_nan=True))
        if not ok:
            raise AssertionError(f"{label}: values differ from the loop's\n  "
                                 f"vectorized: {_fmt(g)}\n  loop:       {_fmt(want)}")
