"""The ``traced`` check: every sample of a spec through :func:`tapeflow.function`
(the tracing call, a replay with the same arguments, a replay with other values of
the same signature), and the specs that cannot be traced (:data:`UNTRACEABLE`)."""

from __future__ import annotations

import os
import re

import numpy as np

from ...tracing import TracingError
from ._common import SkipCase, _as_list, _describe_args, _fmt, _glob, _kind, _seed, _tf
from .compare import _host_copies, _verify
from .devices import _missing_kernel
from .layouts import _to_device
from .samples import _arrays, _draw, _other_values, samples_for


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
    "__getitem__tensor_index": "a 0-d integer tensor used as an index is converted to a "
                               "Python int (int(k)) by Tensor.__getitem__",
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
    >>> from tapeflow.testing.opinfo import OpSpec, Sample
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
