"""Entering and leaving a recording: the ``with`` block GradientTape and
ForwardAccumulator share.

A recorder records while it is on this thread's stack of recording tapes
(:func:`tapeflow.runtime.context.push_tape`); ``_recording`` says whether it is.
Entering one that records already -- a nested ``with`` on the same object, a ``with``
in another thread while it records in this one, or inside ``tf.autodiff.stop_recording()``,
which pauses it without ending its block -- would push it twice and record every op
twice, doubling its gradients or tangents; it is refused (as TensorFlow refuses it:
"Tape is still recording") before anything changes, so the open block goes on
recording. A recorder whose block has ended may be entered again, in any thread: it
records on.

>>> import tapeflow as tf
>>> t = tf.GradientTape()
>>> with t:
...     with t:
...         pass
Traceback (most recent call last):
...
tapeflow.errors.InvalidArgumentError: This GradientTape is already recording: ...
"""

from __future__ import annotations

from threading import get_ident

from ..runtime import context as _ctx
from ..errors import InvalidArgumentError

__all__ = ["Recorder", "reentry_error"]

#: what to make instead of entering a recorder again, by class
_NEW = {"GradientTape": "tf.GradientTape()",
        "ForwardAccumulator": "tf.autodiff.ForwardAccumulator(primals, tangents)"}


class Recorder:
    """The ``with`` block of a recorder: ``__enter__`` pushes it on this thread's stack
    (refused while it records), :meth:`_pause` and :meth:`_resume` take it off and put it
    back. ``_owner`` is the thread that entered it last (for the error)."""

    _recording = False
    _owner = None

    def __enter__(self):
        if self._recording:
            raise reentry_error(self)
        _ctx.push_tape(self)
        self._recording = True
        self._owner = get_ident()
        return self

    def _pause(self):
        if self._recording:
            _ctx.pop_tape(self)
            self._recording = False

    def _resume(self):
        if not self._recording:
            _ctx.push_tape(self)
            self._recording = True


def reentry_error(recorder):
    """The error for entering ``recorder`` while it records (see the module doc)."""
    kind = type(recorder).__name__
    if any(t is recorder for t in _ctx.active_tapes()):
        where = ("its `with` block is still open in this thread; entering it again (a "
                 "nested `with` on the same object) would record every op twice and double "
                 "the result")
    elif recorder._owner == get_ident():
        where = ("its `with` block is still open in this thread, paused (by "
                 "tf.autodiff.stop_recording(), not ended): it records again after the pause")
    else:
        where = ("it is recording in another thread (its `with` block is open there); tapes "
                 "record per thread: use one tape per thread")
    return InvalidArgumentError(
        f"This {kind} is already recording: {where}. Keep using the open `with` block (it "
        f"records everything inside it), or create a new {_NEW.get(kind, kind + '(...)')} "
        "for a separate (nested) recording; a tape may be entered again only after its "
        "`with` block has ended.")
