"""The eager context: what the dispatcher consults on every op, and what the layers
above it register so that it never imports them.

* **Active tapes.** Each thread has a stack of recording tapes (``tapeflow.autodiff``
  pushes and pops them with :func:`push_tape`/:func:`pop_tape`); ``tapes_active[0]``
  counts them over all threads and is the dispatcher's only tape check, and
  :func:`record` appends an op to every tape of this thread that watches one of its
  inputs (``tapeflow.runtime._speedups`` has the same function in C). This is
  TensorFlow's eager context holding the active tapes: the tape is plain data the
  runtime fills, and ``GradientTape`` (above) plays it back.
* **The tracer.** ``tracing[0]`` counts active ``tf.function`` traces; while it is
  non-zero the dispatcher and Tensor report ops, copies, reads and assignments to
  the observer ``tracer`` that ``tapeflow.tracing`` installs with
  :func:`set_tracer` (an object with the methods of :class:`Tracer`).

>>> from tapeflow.runtime import context
>>> context.tapes_active[0], context.tracing[0]
(0, 0)
"""

from __future__ import annotations

import contextlib
import threading

__all__ = ["tapes_active", "tracing", "record", "active_tapes", "push_tape", "pop_tape",
           "watch_variable_read", "stop_all_recording", "sync_recorders", "set_tracer", "Tracer"]

_local = threading.local()
#: number of recording tapes over all threads (the dispatcher's only tape check)
tapes_active = [0]
#: number of tf.function traces in progress over all threads
tracing = [0]
_count_lock = threading.Lock()


def active_tapes() -> list:
    """This thread's recording tapes, innermost last."""
    tapes = getattr(_local, "tapes", None)
    if tapes is None:
        tapes = _local.tapes = []
    return tapes


def sync_recorders():
    # this thread's recorders, [(watched dict, records list), ...]: what record() reads
    _local.recorders = [(t._watched, t._records) for t in active_tapes()]


def _add(n):
    with _count_lock:
        tapes_active[0] += n
    sync_recorders()


def push_tape(tape):
    """Start recording on ``tape`` (an object with ``_watched`` and ``_records``)."""
    active_tapes().append(tape)
    _add(1)


def pop_tape(tape):
    """Stop recording on ``tape``; a no-op when it is not recording in this thread."""
    tapes = active_tapes()
    if tape in tapes:
        tapes.remove(tape)
        _add(-1)


def _record_py(op, inputs, outputs, attrs, grad_fn=None):
    """Record an op on every active tape of this thread that watches an input.

    A record is the tuple ``(op, inputs, outputs, attrs, grad_fn)``; backprop makes a
    GradContext only for records on the path to the target. Returns the record, or
    None when no tape watched an input.
    """
    try:
        recorders = _local.recorders
    except AttributeError:
        return None
    rec = None
    for w, records in recorders:
        for t in inputs:
            if id(t) in w:
                break
        else:
            continue
        if rec is None:
            rec = (op, inputs, outputs, attrs, grad_fn)
        records.append(rec)
        for o in outputs:
            w[id(o)] = o
    return rec


record = _record_py


def watch_variable_read(var, value):
    """Called when a trainable Variable is read while tapes are active."""
    for tape in active_tapes():
        if tape._watch_vars:
            tape._watch_var(var, value)


@contextlib.contextmanager
def stop_all_recording():
    """Pause every tape of this thread (optimizer updates, assign_add ...)."""
    tapes = active_tapes()
    saved = list(tapes)
    if not saved:
        yield
        return
    tapes.clear()
    _add(-len(saved))
    try:
        yield
    finally:
        tapes.extend(saved)
        _add(len(saved))


class Tracer:
    """The observer interface ``tapeflow.tracing`` implements (no-ops here)."""

    def current(self):
        """The graph being traced in this thread, or None."""
        return None

    def trace_op(self, op, inputs, outputs, attrs, fn, device, needs_device):
        """An op ran (through its kernel ``fn``) while tracing."""

    def trace_copy(self, src, out, device):
        """A tensor was copied to ``device`` while tracing."""

    def trace_check(self, tensor, what):
        """``tensor``'s value is needed in Python (``what``): raise if it is symbolic."""

    def trace_read(self, var, value):
        """A Variable was read while tracing."""

    def trace_assign(self, var, value):
        """A Variable was assigned while tracing."""

    def opaque_call(self, fn, args):
        """Trace ``fn(*args)`` as one node that re-runs ``fn`` at every call."""
        return fn(*args)


#: the installed tracer (tapeflow.tracing replaces it at import)
tracer = Tracer()


def set_tracer(t: Tracer) -> None:
    """Install the tracer the dispatcher reports to while ``tracing[0]`` is non-zero."""
    global tracer
    tracer = t
