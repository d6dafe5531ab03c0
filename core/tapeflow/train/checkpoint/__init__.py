"""Checkpoints (a package: the module moved unchanged to ``checkpoint/checkpoint.py``,
split by concern in the next commit)."""

from .checkpoint import *  # noqa: F401,F403
from .checkpoint import (__all__, restore_deferred)  # noqa: F401
