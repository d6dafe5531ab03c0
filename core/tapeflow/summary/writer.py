"""Summary writers (one TensorBoard event file each), the default writer, the recording
policy and the step a summary is recorded at.

Writers buffer encoded events and append them to
``<logdir>/events.out.tfevents.<time>.<host>.v2`` when ``max_queue`` events are
waiting, when ``flush_millis`` have passed since the last flush, on
``flush()``, when an ``as_default()`` block ends, on ``close()``, and at exit.
The file is created, with its ``brain.Event:2`` version record, by
``create_file_writer`` itself (the seeds' ``!ls tb/`` shows it before anything
was recorded).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref

from ..errors import InvalidArgumentError
from . import _records
from .. import train as _train

__all__ = ["SummaryWriter", "create_file_writer", "create_summary_file_writer",
           "create_noop_writer", "always_record_summaries", "never_record_summaries",
           "record_summaries_every_n_global_steps", "record_if", "should_record_summaries",
           "set_step", "get_step", "get_default_writer"]


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
