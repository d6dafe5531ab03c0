"""The core's own ops, registered through the same plugin API a third party uses.

Op modules declare their signatures with :func:`defop`; this plugin's
``tapeflow_register_ops`` hook adds them all to the registry at import.
"""

from __future__ import annotations

from .plugins.hookspecs import hookimpl
from .registry import OpDef

#: every OpDef the core declares, in declaration order
BUILTIN_OPS: list[OpDef] = []


def defop(name, **kwargs) -> OpDef:
    """Declare a built-in op (same arguments as :class:`~tapeflow.plugins.OpDef`)."""
    op = OpDef(name, source="tapeflow", **kwargs)
    BUILTIN_OPS.append(op)
    return op


@hookimpl
def tapeflow_register_ops(registry):
    for op in BUILTIN_OPS:
        registry.add_op(op)
