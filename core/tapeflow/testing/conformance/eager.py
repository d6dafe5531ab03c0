"""The eager checks: ``forward`` and ``noncontiguous`` (every sample on the device
against the reference, with contiguous inputs or in each layout), ``gradients``
(:func:`~tapeflow.testing.check_grads` in float64) and ``errors`` (the error
contract of every :class:`~tapeflow.testing.opinfo.ErrorSample`)."""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

from ..gradcheck import check_grads
from ._common import SkipCase, _describe_args, _seed, _tf
from .compare import _reference_runs, _verify
from .layouts import BROADCAST, LAYOUTS, _has_nc, _to_device, broadcast_values, layout_candidate
from .samples import _grad_argnums, dtypes_under_test, samples_for


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
