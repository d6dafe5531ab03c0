"""The public plugin API: everything an op or backend plugin needs.

>>> from tapeflow.plugins import OpDef, Backend, hookimpl, register
>>> sorted(n for n in ("OpDef", "Backend", "hookimpl", "register", "Registry"))
['Backend', 'OpDef', 'Registry', 'hookimpl', 'register']

A plugin is a module (or object) implementing some of the hooks in
:mod:`tapeflow.plugins.hookspecs`, found through the entry-point group
``tapeflow``; ``register(obj)`` adds one in-process. See ``docs/plugins.md``.
"""

from ..devices import Backend, Device
from ..errors import PluginConflictError, PluginError
from ..registry import REQUIRED, GradContext, KernelEntry, OpDef, get_op
from .hookspecs import API_VERSION, hookimpl, hookspec
from .manager import (ENTRY_POINT_GROUP, PluginInfo, Registry, ensure_loaded, known_gaps,
                      plugin_report, register)
from .manager import _manager as plugin_manager

__all__ = ["API_VERSION", "Backend", "Device", "ENTRY_POINT_GROUP", "GradContext", "KernelEntry",
           "OpDef", "PluginConflictError", "PluginError", "PluginInfo", "REQUIRED", "Registry",
           "ensure_loaded", "get_op", "hookimpl", "hookspec", "known_gaps", "plugin_manager",
           "plugin_report", "register"]
