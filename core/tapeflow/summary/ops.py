"""The summary API, as TensorFlow's summary ops module: writers (one TensorBoard event file
each), the default writer, the recording policy and the step a summary is recorded at,
and the summary ops ``scalar``, ``histogram``, ``image`` and ``flush`` that record into
the default writer (their encodings: ``_records.py``).

Writers buffer encoded events and append them to
``<logdir>/events.out.tfevents.<time>.<host>.v2`` when ``max_queue`` events are
waiting, when ``flush_millis`` have passed since the last flush, on
``flush()``, when an ``as_default()`` block ends, on ``close()``, and at exit.
The file is created, with its ``brain.Event:2`` version record, by
``create_file_writer`` itself (the seeds' ``!ls tb/`` shows it before anything
was recorded).

Each summary op records into the default writer when :func:`should_record_summaries`
holds and returns whether it recorded. They accept both spellings of their arguments:
``tf.contrib.summary.scalar(name, tensor, family=None, step=None)`` (the seeds) and
``tf.summary.scalar(name, data, step=None)`` (TF 2): a third positional argument
that is not a string (a number, tensor or Variable) is the step.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import threading
import time
import warnings
import weakref

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from . import _records
from .. import profiler as _profiler
from .. import train as _train
from ..tracing import signatures as _signatures
from ..tracing import tracer as _tracer

__all__ = ["SummaryWriter", "create_file_writer", "create_summary_file_writer",
           "create_noop_writer", "always_record_summaries", "never_record_summaries",
           "record_summaries_every_n_global_steps", "record_if", "should_record_summaries",
           "set_step", "get_step", "get_default_writer", "scalar", "histogram", "image",
           "flush"]


# --- writers ---------------------------------------------------------------------------------

def _new_event_path(logdir: str, suffix: str) -> tuple[str, object]:
    """Create (exclusively) and open a fresh event file: the seeds' name
    ``events.out.tfevents.<time>.<host><suffix>``. A second writer created in the same
    second takes the next free second, so file names keep creation order: TensorBoard
    reads a run's files in name order (a resumed run's steps come after the first's)."""
    stamp, host = int(time.time()), socket.gethostname()
    for k in range(10_000):
        path = os.path.join(logdir, f"events.out.tfevents.{stamp + k:010d}.{host}{suffix}")
        try:
            return path, open(path, "xb")
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a new event file in {logdir!r}")


def _flush_file(f, queue, lock):
    with lock:
        if queue and not f.closed:
            f.write(b"".join(queue))
            queue.clear()
        if not f.closed:
            f.flush()


def _flush_and_close(f, queue, lock):
    _flush_file(f, queue, lock)
    with lock:
        f.close()


class SummaryWriter:
    """Writes summaries into one new event file under ``logdir``.

    Make one with :func:`create_file_writer`; make it the default for a block with
    ``with writer.as_default():`` or for the whole program with
    ``writer.set_as_default()``.
    """

    def __init__(self, logdir, max_queue=None, flush_millis=None, filename_suffix=None):
        self._logdir = os.fspath(logdir)
        os.makedirs(self._logdir, exist_ok=True)
        self._max_queue = 10 if max_queue is None else max(int(max_queue), 1)
        self._flush_secs = (120_000 if flush_millis is None else float(flush_millis)) / 1000.0
        self._path, self._file = _new_event_path(self._logdir, filename_suffix or ".v2")
        self._queue: list[bytes] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._closed = False
        # flushes and closes the file when the writer is collected or at exit
        self._finalizer = weakref.finalize(self, _flush_and_close, self._file, self._queue,
                                           self._lock)
        self._file.write(_records.frame(_records.event(time.time(),
                                                       file_version=_records.FILE_VERSION)))
        self._file.flush()

    def __repr__(self):
        return f"<SummaryWriter logdir={self._logdir!r}{' (closed)' if self._closed else ''}>"

    @property
    def logdir(self) -> str:
        return self._logdir

    @property
    def path(self) -> str:
        """The event file this writer appends to."""
        return self._path

    # --- default writer --------------------------------------------------------------------
    def as_default(self, step=None):
        """Context manager making this the default writer of the current thread; the
        block's summaries use ``step`` when given. Flushes when the block ends."""
        return _DefaultWriter(self, step)

    def set_as_default(self, step=None):
        """Make this the default writer everywhere (until another ``set_as_default``);
        an ``as_default()`` block still takes precedence inside it."""
        _State.global_writer = self
        if step is not None:
            set_step(step)

    def init(self):
        """Nothing to do (TF 1.x's initialisation op); kept for the seeds' code."""

    # --- writing -----------------------------------------------------------------------------
    def _write_summary(self, step: int, values: list[bytes]):
        if self._closed:
            raise InvalidArgumentError(f"{self!r}: the writer is closed")
        record = _records.frame(_records.event(time.time(), step,
                                               summary=_records.summary(values)))
        with self._lock:
            self._queue.append(record)
            due = (len(self._queue) >= self._max_queue
                   or time.monotonic() - self._last_flush >= self._flush_secs)
        if due:
            self.flush()

    def _write_event(self, record_bytes: bytes):
        if self._closed:
            raise InvalidArgumentError(f"{self!r}: the writer is closed")
        with self._lock:
            self._queue.append(_records.frame(record_bytes))
        self.flush()

    def flush(self):
        """Write every buffered event to the file."""
        if not self._closed:
            _flush_file(self._file, self._queue, self._lock)
            self._last_flush = time.monotonic()

    def close(self):
        """Flush and close the event file; the writer records nothing afterwards."""
        if not self._closed:
            self._finalizer()
            self._closed = True
        if _State.global_writer is self:
            _State.global_writer = None


class _NoopWriter(SummaryWriter):
    """A writer that records nothing (``create_file_writer(None)``, ``create_noop_writer``)."""

    def __init__(self):              # no file, no state
        self._closed = False

    def __repr__(self):
        return "<SummaryWriter (no-op)>"

    logdir = path = property(lambda self: None)

    def _write_summary(self, step, values):
        pass

    def flush(self):
        pass

    def close(self):
        self._closed = True


def create_file_writer(logdir, max_queue=None, flush_millis=None, filename_suffix=None,
                       name=None):
    """A :class:`SummaryWriter` for a new event file in ``logdir`` (created if needed).

    ``max_queue`` (default 10) events are buffered at most, and at most
    ``flush_millis`` (default 120000) pass between flushes while summaries are
    written. ``logdir=None`` gives a writer that records nothing.

    >>> import tempfile, tapeflow as tf
    >>> writer = tf.summary.create_file_writer(tempfile.mkdtemp())
    >>> with writer.as_default(), tf.summary.always_record_summaries():
    ...     tf.summary.scalar("loss", 0.5, step=1)
    True
    """
    if logdir is None:
        return _NoopWriter()
    return SummaryWriter(logdir, max_queue, flush_millis, filename_suffix)


create_summary_file_writer = create_file_writer   # seed 002's TF 1.x name


def create_noop_writer():
    """A writer that records nothing."""
    return _NoopWriter()


# --- per-thread state ------------------------------------------------------------------------

class _State(threading.local):
    global_writer = None          # class attributes: shared, set_as_default writes here

    def __init__(self):
        self.writers: list = []   # as_default() stack: (writer, step)
        self.policies: list = []  # recording conditions: bool or callable
        self.step = None          # set_step()


_state = _State()


class _DefaultWriter:
    def __init__(self, writer, step):
        self._writer, self._step = writer, step

    def __enter__(self):
        _state.writers.append((self._writer, self._step))
        return self._writer

    def __exit__(self, *exc):
        _state.writers.pop()
        self._writer.flush()


def get_default_writer():
    """The writer summaries go to now, or None."""
    if _state.writers:
        return _state.writers[-1][0]
    return _State.global_writer


def _current():
    """(writer, step of its as_default block) or (None, None)."""
    if _state.writers:
        return _state.writers[-1]
    w = _State.global_writer
    return (w, None) if w is not None and not w._closed else (None, None)


# --- recording policy (tf.contrib.summary semantics) --------------------------------------------

@contextlib.contextmanager
def record_if(condition):
    """Record summaries in the block when ``condition`` (a bool, a boolean tensor, or
    a callable returning one, evaluated at each summary) is true."""
    _state.policies.append(condition)
    try:
        yield
    finally:
        _state.policies.pop()


def always_record_summaries():
    """Record every summary in the block."""
    return record_if(True)


def never_record_summaries():
    """Record no summary in the block."""
    return record_if(False)


def record_summaries_every_n_global_steps(n, global_step=None):
    """Record summaries in the block when the global step (or ``global_step``) is a
    multiple of ``n``, read at the moment each summary is written."""
    n = int(n)
    if n < 1:
        raise InvalidArgumentError(
            f"record_summaries_every_n_global_steps: n must be >= 1, got {n}")

    def every_n():
        step = _global_step() if global_step is None else global_step
        return int(step) % n == 0

    return record_if(every_n)


def should_record_summaries() -> bool:
    """Whether a summary written here and now would be recorded: a default writer
    exists and the innermost recording condition holds. As in ``tf.contrib.summary``
    (seed 002), nothing is recorded outside a ``record_*`` / ``always_record_summaries``
    block."""
    writer, _ = _current()
    return writer is not None and _policy_allows()


def _policy_allows() -> bool:
    if not _state.policies:
        return False
    cond = _state.policies[-1]
    if callable(cond):
        cond = cond()
    return bool(cond)


# --- steps -----------------------------------------------------------------------------------

def set_step(step):
    """The step summaries of this thread use when none is given (``None`` unsets it);
    without one they use the global step (``tf.train.get_or_create_global_step()``)."""
    _state.step = step


def get_step():
    """The step set by :func:`set_step`, or None."""
    return _state.step


def _global_step():
    return _train.get_or_create_global_step()


def _resolve_step(step, block_step) -> int:
    for s in (step, block_step, _state.step):
        if s is not None:
            return int(s)
    return int(_global_step())


# --- the summary ops -------------------------------------------------------------------------

_DBL_MAX = sys.float_info.max


def _tag(name, family):
    return f"{family}/{name}" if family else str(name)


def _family_or_step(family, step):
    """The contrib signature's ``family`` slot holds TF 2's ``step`` when it is not a str."""
    if family is not None and not isinstance(family, str):
        if step is not None:
            raise InvalidTypeError("summary: step given twice (positionally and as step=)")
        return None, family
    return family, step


def _recording():
    writer, block_step = _current()
    if writer is None or not _policy_allows():
        return None, None
    return writer, block_step


def _host(value) -> np.ndarray:
    """The value as a host NumPy array (Tensors and Variables on any device)."""
    return np.asarray(value)


class _GraphTrace:
    """What ``tf.summary.trace_on(graph=True)`` collects: the graphs of the functions traced
    until ``trace_export`` / ``trace_off`` (a function traced before is not traced again,
    so call a fresh one, as in TensorFlow)."""

    graphs: list = []
    on = False
    profiling = False           # trace_on started the profiler

    @classmethod
    def collect(cls, graph):
        cls.graphs.append(graph)


def trace_on(graph=True, profiler=False, profiler_outdir=None):
    """Start collecting the graphs of the ``tf.function`` traces that follow, for
    :func:`trace_export` to write where TensorBoard's graph dashboard shows them.
    ``profiler=True`` starts ``tf.profiler.experimental.start(profiler_outdir)`` too."""
    if _GraphTrace.on:
        warnings.warn("tf.summary.trace_on: a trace is already on; ignored", stacklevel=2)
        return
    _GraphTrace.on, _GraphTrace.graphs = True, []
    if graph:
        _tracer.graph_observers.append(_GraphTrace.collect)
    if profiler:
        _profiler.experimental.start(profiler_outdir or "")
        _GraphTrace.profiling = True


def trace_off():
    """Stop collecting graphs (and the profiler :func:`trace_on` started); drop them."""
    if _GraphTrace.collect in _tracer.graph_observers:
        _tracer.graph_observers.remove(_GraphTrace.collect)
    if _GraphTrace.profiling:
        _GraphTrace.profiling = False
        _profiler.experimental.stop()
    _GraphTrace.on, _GraphTrace.graphs = False, []


def trace_export(name, step=None, profiler_outdir=None):
    """Write the graphs collected since :func:`trace_on` to the default writer as one
    ``GraphDef`` event (each function's nodes under its name: ``name/function/node``),
    then stop collecting. Returns whether an event was written (a default writer is
    needed, as for every summary).

    >>> import tempfile, tapeflow as tf
    >>> logdir = tempfile.mkdtemp()
    >>> tf.summary.trace_on(graph=True)
    >>> f = tf.function(lambda x: tf.nn.relu(x) * 2.0)
    >>> _ = f(tf.constant([1.0, -1.0]))
    >>> with tf.summary.create_file_writer(logdir).as_default():
    ...     tf.summary.trace_export("my_trace", step=0)
    True
    >>> [e.step for e in tf.summary.events_from_logdir(logdir) if e.graph_def]
    [0]
    """
    graphs = list(_GraphTrace.graphs)
    trace_off()
    writer, block_step = _current()
    if writer is None or isinstance(writer, _NoopWriter):
        return False
    nodes = []
    for g in graphs:
        scope = re.sub(r"[^A-Za-z0-9_.\-/]", "_", f"{name}/{g.name}")
        for n in _signatures.graph_def(g).node:
            nodes.append((f"{scope}/{n.name}", n.op,
                          [f"{scope}/{i}" for i in n.input], n.device))
    writer._write_event(_records.graph_event(time.time(), _resolve_step(step, block_step),
                                             nodes))
    return True


def scalar(name, tensor, family=None, step=None, description=None):
    """Record a scalar (any one-element value) under ``name``.

    >>> import tempfile, tapeflow as tf
    >>> writer = tf.summary.create_file_writer(tempfile.mkdtemp())
    >>> tf.summary.scalar("loss", 1.0, step=0)      # no default writer: not recorded
    False
    >>> with writer.as_default(), tf.summary.always_record_summaries():
    ...     tf.summary.scalar("loss", tf.constant(0.25), step=3)
    True
    """
    family, step = _family_or_step(family, step)
    writer, block_step = _recording()
    if writer is None:
        return False
    v = _host(tensor)
    if v.size != 1:
        raise InvalidArgumentError(f"summary.scalar {name!r}: needs a single value, got shape "
                                   f"{tuple(v.shape)}")
    value = _records.scalar_value(_tag(name, family), float(v.reshape(())))
    writer._write_summary(_resolve_step(step, block_step), [value])
    return True


# --- histograms ------------------------------------------------------------------------------

def _exponential_limits():
    """TensorFlow's default histogram bucket limits: +-1e-12 * 1.1**k up to 1e20, 0,
    and +-DBL_MAX at the ends (``tensorflow/core/lib/histogram/histogram.cc``)."""
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(_DBL_MAX)
    return np.array([-x for x in reversed(pos)] + [0.0] + pos)


_LIMITS = None


def _histogram_buckets(values: np.ndarray, buckets):
    """(bucket_limit, bucket) of a HistogramProto: TF's exponential buckets with runs
    of empty buckets collapsed into one, or ``buckets`` equal-width buckets."""
    if buckets is not None:
        k = max(int(buckets), 1)
        lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        if hi <= lo:
            hi = lo + 1.0 if values.size else 1.0
        counts, edges = np.histogram(values, bins=k, range=(lo, hi))
        return edges[1:], counts.astype(np.float64)
    global _LIMITS
    if _LIMITS is None:
        _LIMITS = _exponential_limits()
    # bucket i holds limits[i-1] <= x < limits[i]
    counts = np.bincount(np.searchsorted(_LIMITS, values, side="right"),
                         minlength=len(_LIMITS))[:len(_LIMITS)].astype(np.float64)
    empty = counts == 0
    # keep every non-empty bucket and the last bucket of each run of empty ones
    keep = ~empty | np.append(~empty[1:], True)
    limits, counts = _LIMITS[keep], counts[keep]
    if limits.size == 0:            # pragma: no cover - the last bucket is always kept
        limits, counts = np.array([_DBL_MAX]), np.array([0.0])
    return limits, counts


def histogram(name, tensor, family=None, step=None, buckets=None, description=None):
    """Record the distribution of the values of ``tensor`` (a HistogramProto with
    TensorFlow's default exponential buckets, or ``buckets`` equal-width ones).
    NaN or infinite values are an error, as in TensorFlow."""
    family, step = _family_or_step(family, step)
    writer, block_step = _recording()
    if writer is None:
        return False
    v = _host(tensor).astype(np.float64, copy=False).ravel()
    if v.size and not np.isfinite(v).all():
        raise InvalidArgumentError(f"summary.histogram {name!r}: NaN or infinity in the values")
    limits, counts = _histogram_buckets(v, buckets)
    if v.size:
        stats = (float(v.min()), float(v.max()), float(v.size), float(v.sum()),
                 float(np.dot(v, v)))
    else:
        stats = (_DBL_MAX, -_DBL_MAX, 0.0, 0.0, 0.0)
    value = _records.histogram_value(_tag(name, family), *stats, limits, counts)
    writer._write_summary(_resolve_step(step, block_step), [value])
    return True


# --- images ----------------------------------------------------------------------------------

def _to_uint8(img: np.ndarray, bad_color: np.ndarray) -> np.ndarray:
    """One (h, w, c) image as uint8, the way TensorFlow's image summary converts it:
    floats with no negative value are scaled so the largest is 255, others so the
    largest magnitude is 127 around 128; non-finite pixels get ``bad_color``."""
    if img.dtype == np.uint8:
        return img
    if img.dtype.kind in "iub":
        return np.clip(img, 0, 255).astype(np.uint8)
    img = img.astype(np.float32, copy=False)
    finite = np.isfinite(img).all(axis=-1)
    vals = img[finite]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 0.0)
    if lo < 0:
        m = max(abs(lo), abs(hi))
        scale, offset = (0.0 if m < 1e-6 else 127.0 / m), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    out = np.where(finite[..., None], img, 0.0) * scale + offset
    out = np.clip(out, 0, 255).astype(np.uint8)
    out[~finite] = bad_color[:img.shape[-1]]
    return out


def image(name, tensor, bad_color=None, max_images=3, family=None, step=None,
          max_outputs=None, description=None):
    """Record up to ``max_images`` (TF 2: ``max_outputs``) images of a
    ``[k, height, width, channels]`` tensor, channels 1 (grey), 3 (RGB) or 4 (RGBA),
    PNG-encoded. Tags are ``name/image`` for one image, else ``name/image/0``, ...
    uint8 values are used as they are; float values are rescaled as in TensorFlow."""
    if bad_color is not None and np.size(bad_color) == 1 and step is None:
        bad_color, step = None, bad_color          # TF 2: image(name, data, step)
    family, step = _family_or_step(family, step)
    if max_outputs is not None:
        max_images = max_outputs
    writer, block_step = _recording()
    if writer is None:
        return False
    a = _host(tensor)
    if a.ndim != 4 or a.shape[-1] not in (1, 3, 4):
        raise InvalidArgumentError(
            f"summary.image {name!r}: needs a tensor of shape [k, height, width, channels] "
            f"with channels 1, 3 or 4, got shape {tuple(a.shape)}")
    bad = np.array([255, 0, 0, 255] if bad_color is None else _host(bad_color), np.uint8)
    max_images = int(max_images)
    tag = _tag(name, family)
    values = []
    for i in range(min(max_images, a.shape[0])):
        img = _to_uint8(a[i], bad)
        h, w, c = img.shape
        t = f"{tag}/image" if max_images == 1 else f"{tag}/image/{i}"
        values.append(_records.image_value(t, h, w, c, _records.encode_png(img)))
    if values:
        writer._write_summary(_resolve_step(step, block_step), values)
    return True


def flush(writer=None, name=None):
    """Flush ``writer`` (default: the default writer) to its file."""
    writer = writer if writer is not None else get_default_writer()
    if writer is not None:
        writer.flush()
