"""Hook specifications: what a tapeflow plugin may implement.

Every hook receives a :class:`~tapeflow.plugins.Registry` bound to the calling
plugin; additions are buffered and committed only if the hook returns without
raising, so a failing plugin leaves nothing half-registered.

Hooks are called in this order for every plugin: ``tapeflow_register_ops``,
``tapeflow_register_backends``, ``tapeflow_register_kernels``. Implement any
subset, with ``@tapeflow.plugins.hookimpl``. Specs evolve only by adding
arguments; an implementation may accept fewer.

The plugin API version is :data:`API_VERSION`. A plugin module may declare
``TAPEFLOW_PLUGIN_API = <int>``; a different major version is skipped with a
warning naming both versions.
"""

from __future__ import annotations

import pluggy

#: The plugin API version this tapeflow speaks.
API_VERSION = 1

hookspec = pluggy.HookspecMarker("tapeflow")
hookimpl = pluggy.HookimplMarker("tapeflow")


@hookspec
def tapeflow_register_ops(registry) -> None:
    """Declare ops: a :class:`~tapeflow.plugins.Library` implements this hook for its
    ``@lib.op`` / ``lib.define`` ops (the one way to declare an op;
    ``registry.add_op(OpDef(...))`` in a hook of your own is deprecated, removed in
    tapeflow 0.4). Called first, for every plugin, so kernels of any plugin may target
    ops of any other. Names of plugin ops are namespaced ``"project::name"``; defining
    an existing name raises PluginConflictError unless ``override=True``.
    """


@hookspec
def tapeflow_register_backends(registry) -> None:
    """Add backends with ``registry.add_backend(backend)``.

    Implement in backend plugins. ``backend`` is a
    :class:`tapeflow.plugins.Backend` subclass instance: device type, device
    listing, host/device copies, synchronisation, memory statistics, and the
    reason it is unavailable (library or driver missing) when it is.
    """


@hookspec
def tapeflow_register_kernels(registry) -> None:
    """Add kernels with ``registry.add_kernel(op_name, device_type, fn, dtypes=...)``.

    Implement in backend and op plugins. ``fn(*native_inputs, **attrs)`` returns a
    native array (or a tuple for multi-output ops). Registering a kernel for an
    (op, device type) pair that another plugin already covers raises
    PluginConflictError unless ``override=True``.
    """


@hookspec
def tapeflow_known_gaps() -> dict:
    """Return ``{test id pattern: reason}`` for conformance tests this plugin is
    known to fail; the suite marks them strict expected failures."""
