"""The public plugin API: everything an op or backend plugin needs.

>>> from tapeflow.plugins import Library, OpDef, Backend, hookimpl, register
>>> import tapeflow.plugins
>>> sorted(n for n in ("Library", "OpDef", "Backend", "hookimpl", "register", "Registry")
...        if n in tapeflow.plugins.__all__)
['Backend', 'Library', 'OpDef', 'Registry', 'hookimpl', 'register']

Two forms. A module declares its ops with a :class:`Library` (``@lib.op``,
``@lib.kernel``, ``@lib.gradient``, ``lib.jvp``, ``lib.batch``, ``@lib.infer``,
``lib.non_differentiable``), which implements the hooks itself: an op is one
declaration (``elementwise=True`` derives its JVP and batching rule), each rule attached
to it one way (``op.def_grad``, ... which the Library's are). Or a module (or object)
implements some of the hooks in :mod:`tapeflow.plugins.hookspecs` and calls the
:class:`Registry` it is handed, as backends do to add themselves and kernels (its
``add_op`` and ``set_*`` rule methods are deprecated: docs/plugins.md, section 5).
Either is found through the entry-point group ``tapeflow``; ``register(obj)`` adds one
in-process. See ``docs/plugins.md``.
"""

from ..runtime.devices import Backend, Device
from ..errors import PluginConflictError, PluginError
from ..runtime.registry import (REQUIRED, BatchContext, Broadcasting, BuildContext, GradContext,
                                KernelEntry, KernelSpec, Linear, Multilinear, OpDef, get_op,
                                rebind_kernel)
from .hookspecs import API_VERSION, hookimpl, hookspec
from .library import Library
from .manager import (ENTRY_POINT_GROUP, PluginInfo, Registry, ensure_loaded, known_gaps,
                      plugin_report, register)
from .manager import _manager as plugin_manager

__all__ = ["API_VERSION", "Backend", "BatchContext", "Broadcasting", "BuildContext", "Device",
           "ENTRY_POINT_GROUP", "GradContext", "KernelEntry", "KernelSpec", "Library", "Linear",
           "Multilinear",
           "OpDef", "PluginConflictError", "PluginError", "PluginInfo", "REQUIRED",
           "Registry", "ensure_loaded", "get_op", "hookimpl", "hookspec", "known_gaps",
           "plugin_manager", "plugin_report", "rebind_kernel", "register"]
