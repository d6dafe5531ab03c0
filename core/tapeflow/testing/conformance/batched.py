"""The batching check: :func:`tapeflow.vectorized_map` over a batch of examples
against a loop over them (:func:`check_batched`)."""

from __future__ import annotations

import numpy as np

from ...tracing.vectorize import recording_fallbacks
from ._common import SkipCase, _describe_args, _fmt, _seed, _tf
from .compare import _host_copies
from .layouts import _to_device
from .samples import _draw, _other_values, samples_for, tolerance


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
    >>> from tapeflow.testing.opinfo import OpSpec, Sample
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
