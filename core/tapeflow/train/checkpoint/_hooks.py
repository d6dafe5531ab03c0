"""The one place the checkpoint reaches the runtime's variable-creation hooks
(``restore_variables_on_create`` observes every new Variable; the Checkpoint's own save
counter is made with the hooks suspended). Only :func:`_hooks` knows the mechanism."""

from __future__ import annotations

import contextlib
import threading

from ...runtime import variable as _variable

_suspend = threading.local()


def _hooks():
    """The list of callables the runtime runs with every new Variable."""
    return _variable._creation_hooks


@contextlib.contextmanager
def _suspend_creation_hooks():
    """Variables made inside (the Checkpoint's save counter) skip our hooks."""
    _suspend.depth = getattr(_suspend, "depth", 0) + 1
    try:
        yield
    finally:
        _suspend.depth -= 1


def _suspended():
    return getattr(_suspend, "depth", 0) > 0
