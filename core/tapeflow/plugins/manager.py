"""Plugin loading: pluggy manager, entry points, isolation, environment controls.

Environment variables (read when ``tapeflow`` is imported):

``TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD=1``
    Load only the built-ins: the core's ops and the default entry points in
    :data:`DEFAULT_ENTRY_POINTS` (the embedded NumPy backend).
``TAPEFLOW_PLUGINS=a,b``
    Load only these entry points (plus the built-ins).
``TAPEFLOW_STRICT_PLUGINS=1``
    Re-raise a plugin's failure instead of skipping it with a warning.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import traceback
import warnings
from dataclasses import dataclass, field

import pluggy

from ..runtime import devices as _devs
from ..runtime import registry as _reg
from ..errors import InvalidTypeError, PluginError
from . import hookspecs

ENTRY_POINT_GROUP = "tapeflow"
#: Entry-point names loaded even with autoload disabled: the embedded default
#: backend. The core refers to it only by this entry-point name, never imports it.
DEFAULT_ENTRY_POINTS = ("cpu_numpy",)
_HOOK_ORDER = ("tapeflow_register_ops", "tapeflow_register_backends", "tapeflow_register_kernels")


@dataclass
class PluginInfo:
    name: str
    distribution: str = "?"
    version: str = "?"
    status: str = "loaded"            # loaded | failed | skipped
    reason: str = ""
    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    backends: list = field(default_factory=list)
    #: (op name, rule) for each rule it attached (``"grad"``, ``"jvp"``, ``"batch"``, ``"infer"``)
    rules: list = field(default_factory=list)


class Registry:
    """Handed to every hook; buffers what one plugin adds, committed on success."""

    def __init__(self, source: str):
        self.source = source
        self._ops: list = []
        self._kernels: list = []
        self._backends: list = []
        self._rules: list = []

    def add_op(self, op: _reg.OpDef, override: bool = False) -> _reg.OpDef:
        """Declare an op (an :class:`~tapeflow.plugins.OpDef`). Deprecated, removed in
        tapeflow 0.4: declare it with a :class:`~tapeflow.plugins.Library` (``@lib.op()``
        or ``lib.define(name, ...)``), the one declaration of an op and its rules."""
        warnings.warn("registry.add_op(OpDef(...)) in a hook is deprecated and removed in "
                      "tapeflow 0.4: declare the op with a tapeflow.plugins.Library instead, "
                      "@lib.op() or lib.define(name, ...) (docs/plugins.md, section 5)",
                      DeprecationWarning, stacklevel=2)
        return self._add_op(op, override)

    def _add_op(self, op, override=False):
        if not isinstance(op, _reg.OpDef):
            raise InvalidTypeError(f"add_op expects an OpDef, got {type(op).__name__}")
        self._ops.append((op, override))
        return op

    def add_kernels(self, device_type: str, table, override=False, missing="error"):
        """Register the kernels of ``device_type``: ``table`` is what a backend's
        ``build(ctx)`` returns, ``{op name (or OpDef): KernelSpec or function}``.
        ``missing="skip"``: entries for ops no loaded plugin declares are left out and
        returned (a backend may carry kernels for optional ops); ``"error"``: they
        fail the plugin (NotFoundError naming the op). Returns the skipped names."""
        if missing not in ("error", "skip"):
            raise InvalidTypeError(f"missing must be 'error' or 'skip', got {missing!r}")
        skipped, mine = [], {o.name for o, _ in self._ops}    # (ops this plugin declares)
        for op, spec in table.items():
            if missing == "skip" and isinstance(op, str) and not (
                    _reg.has_op(op) or op in mine):
                skipped.append(op)
                continue
            try:
                spec = _reg.KernelSpec.of(spec)
            except InvalidTypeError as e:
                raise InvalidTypeError(f"kernel for {op} on {device_type}: {e.message}") from None
            self._kernels.append((op, device_type, spec, override))
        return skipped

    def add_kernel(self, op, device_type: str, fn, dtypes=None, needs_device=False,
                   override=False, fresh=False, variants=None, out=False):
        """One kernel: ``add_kernels(device_type, {op: KernelSpec(fn, dtypes, ...)})``."""
        if not callable(fn):
            raise InvalidTypeError(f"kernel for {op} on {device_type} is not callable: {fn!r}")
        self._kernels.append((op, device_type, _reg.KernelSpec(
            fn, dtypes, needs_device, None, fresh, variants, out), override))

    def add_backend(self, backend: _devs.Backend):
        """Add a :class:`~tapeflow.plugins.Backend`."""
        if not isinstance(backend, _devs.Backend):
            raise InvalidTypeError(
                f"add_backend expects a tapeflow.plugins.Backend, got {backend!r}")
        self._backends.append(backend)

    def set_rule(self, op, rule, fn, override=False):
        """Attach ``fn`` as rule ``rule`` of ``op`` (name or OpDef): ``"grad"``, ``"jvp"``,
        ``"batch"`` or ``"infer"``. Deprecated, removed in tapeflow 0.4: attach it to the
        op, ``op.def_<rule>(fn)`` (``lib.gradient``/``jvp``/``batch``/``infer`` in a
        Library)."""
        self._set_rule(op, rule, fn, override, "set_rule")

    def set_gradient(self, op, fn, override=False):
        """Deprecated, removed in tapeflow 0.4: ``op.def_grad(fn)``."""
        self._set_rule(op, "grad", fn, override, "set_gradient")

    def set_jvp(self, op, fn, override=False):
        """Deprecated, removed in tapeflow 0.4: ``op.def_jvp(fn)``."""
        self._set_rule(op, "jvp", fn, override, "set_jvp")

    def set_batch(self, op, fn, override=False):
        """Deprecated, removed in tapeflow 0.4: ``op.def_batch(fn)``."""
        self._set_rule(op, "batch", fn, override, "set_batch")

    def set_infer(self, op, fn, override=False):
        """Deprecated, removed in tapeflow 0.4: ``op.def_infer(fn)``."""
        self._set_rule(op, "infer", fn, override, "set_infer")

    def declare_non_differentiable(self, op):
        """Declare ``op`` non-differentiable: never recorded, no gradient flows."""
        self._set_rule(op, "grad", None, True)

    def _set_rule(self, op, rule, fn, override=False, deprecated=None):
        """(Library's path, which does not warn; ``deprecated``: the spelling called. An
        unknown ``rule`` fails the plugin when it is committed: ``registry.set_rule``.)"""
        if deprecated:
            new = (f"{f'get_op({op!r})' if isinstance(op, str) else 'op'}.def_{rule}(fn"
                   f"{', override=True' if override else ''}) (in a Library: lib."
                   f"{'gradient' if rule == 'grad' else rule}(op, fn))")
            warnings.warn(f"registry.{deprecated}() is deprecated and removed in tapeflow 0.4: "
                          f"attach the rule to the op instead, {new}; docs/plugins.md, "
                          "section 5", DeprecationWarning, stacklevel=3)
        self._rules.append((op, rule, fn, override))

    def _commit(self, info: PluginInfo | None):
        added_ops = []
        undo = []        # (opdef, device type, previous kernel)
        rules_undo = []  # what registry.undo_rules puts back
        try:
            for op, override in self._ops:
                _reg.add_op(op, source=self.source, override=override)
                added_ops.append(op)
            for op, dt, spec, override in self._kernels:
                opdef = _reg.get_op(op) if isinstance(op, str) else op
                undo.append((opdef, dt, opdef.kernels.get(dt)))
                _reg.add_kernel(opdef, dt, spec, source=self.source, override=override)
                if info is not None:
                    info.kernels.append((opdef.name, dt))
            for op, rule, fn, override in self._rules:
                opdef = _reg.get_op(op) if isinstance(op, str) else op
                _reg.set_rule(opdef, rule, fn, self.source, override, rules_undo,
                              lenient=rule == "infer")
                if info is not None:
                    info.rules.append((opdef.name, rule))
        except BaseException:
            # roll back: nothing half-registered, existing ops exactly as they were
            _reg.undo_rules(rules_undo)
            for opdef, dt, prev in reversed(undo):
                if prev is None:
                    opdef.kernels.pop(dt, None)
                else:
                    opdef.kernels[dt] = prev
                _reg.refresh_fast(opdef, dt)
            for op in added_ops:
                if _reg.OPS.get(op.name) is op:
                    del _reg.OPS[op.name]
            if info is not None:
                info.kernels.clear()
                info.rules.clear()
            raise
        if info is not None:
            info.ops += [op.name for op in added_ops]
        if self._backends:
            _manager.backends.extend(self._backends)
            if info is not None:
                info.backends += [b.name for b in self._backends]
            _devs.table.rebuild(_manager.backends)


class _Manager:
    def __init__(self):
        self.pm = pluggy.PluginManager("tapeflow")
        self.pm.add_hookspecs(hookspecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.backends: list = []
        self.loaded = False

    # one plugin, all hooks, isolated
    def _run_plugin(self, obj, info: PluginInfo, strict: bool):
        reg = Registry(info.distribution if info.distribution != "?" else info.name)
        try:
            api = getattr(obj, "TAPEFLOW_PLUGIN_API", hookspecs.API_VERSION)
            if api != hookspecs.API_VERSION:
                info.status = "skipped"
                info.reason = (f"built for tapeflow plugin API {api}; this tapeflow speaks "
                               f"API {hookspecs.API_VERSION}")
                warnings.warn(f"tapeflow plugin {info.name!r} ({info.distribution} "
                              f"{info.version}) skipped: {info.reason}", RuntimeWarning,
                              stacklevel=3)
                return
            name = self.pm.register(obj, name=info.name)
            if name is None:
                raise PluginError(f"plugin {info.name!r} is already registered")
            for hook in _HOOK_ORDER:
                fn = getattr(obj, hook, None)
                if fn is not None:
                    fn(registry=reg)
            reg._commit(info)
            info.status = "loaded"
        except KeyboardInterrupt:
            raise
        except BaseException as e:    # SystemExit too: a plugin must not end the program
            try:
                self.pm.unregister(obj)
            except Exception:
                pass
            info.status = "failed"
            info.reason = f"{type(e).__name__}: {e}"
            if strict:
                raise
            warnings.warn(
                f"tapeflow plugin {info.name!r} ({info.distribution} {info.version}) failed "
                f"and was skipped: {info.reason}\n{_short_tb(e)}", RuntimeWarning, stacklevel=3)
        finally:
            self.plugins[info.name] = info

    def load_entry_points(self):
        disable = os.environ.get("TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")
        allow = {s.strip() for s in os.environ.get("TAPEFLOW_PLUGINS", "").split(",") if s.strip()}
        strict = os.environ.get("TAPEFLOW_STRICT_PLUGINS", "") not in ("", "0")
        eps = sorted(md.entry_points(group=ENTRY_POINT_GROUP),
                     key=lambda ep: (ep.name not in DEFAULT_ENTRY_POINTS, ep.name))
        seen = set()
        for ep in eps:
            if ep.name in seen:
                continue
            seen.add(ep.name)
            builtin = ep.name in DEFAULT_ENTRY_POINTS
            dist = ep.dist.name if ep.dist is not None else "?"
            ver = ep.dist.version if ep.dist is not None else "?"
            info = PluginInfo(ep.name, dist, ver)
            if not builtin and (disable or (allow and ep.name not in allow)):
                info.status = "skipped"
                info.reason = ("TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD is set" if disable
                               else "not listed in TAPEFLOW_PLUGINS")
                self.plugins[ep.name] = info
                continue
            try:
                obj = ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as e:    # sys.exit() at import must not kill tapeflow
                info.status = "failed"
                info.reason = f"{type(e).__name__} at import: {e}"
                self.plugins[ep.name] = info
                if strict:
                    raise
                warnings.warn(f"tapeflow plugin {ep.name!r} ({dist} {ver}) failed to import "
                              f"and was skipped: {info.reason}\n{_short_tb(e)}", RuntimeWarning,
                              stacklevel=2)
                continue
            self._run_plugin(obj, info, strict)
        self.loaded = True


def _short_tb(e):
    tb = traceback.extract_tb(e.__traceback__)[-3:]
    return "".join(traceback.format_list(tb)).rstrip()


_manager = _Manager()
manager = _manager


def register(obj, name: str | None = None, strict: bool = True):
    """Register a plugin object in-process (notebooks, tests): its hooks run now.

    Errors are raised (``strict=True``) rather than warned, since the caller is
    right there to see them.
    """
    name = name or getattr(obj, "__name__", None) or type(obj).__name__
    info = PluginInfo(name, distribution=f"<in-process {name}>", version="-")
    _manager._run_plugin(obj, info, strict)
    return info


def register_builtin(obj, name):
    info = PluginInfo(name, distribution="tapeflow", version=version())
    _manager._run_plugin(obj, info, strict=True)


def ensure_loaded():
    if not _manager.loaded:
        _manager.load_entry_points()


def known_gaps() -> dict:
    gaps = {}
    for res in _manager.pm.hook.tapeflow_known_gaps():
        if res:
            gaps.update(res)
    return gaps


def plugin_report() -> list[PluginInfo]:
    return list(_manager.plugins.values())


def version():
    try:
        return md.version("tapeflow")
    except md.PackageNotFoundError:
        return "0+unknown"
