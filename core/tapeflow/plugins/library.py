"""The decorator form of the plugin API: a :class:`Library` collects one project's ops,
kernels and rules (gradient, JVP, batching, inference) in a module, and implements the
hooks that register them. ``lib.gradient``/``jvp``/``batch``/``infer`` attach a rule
as ``op.def_grad``/``def_jvp``/``def_batch``/``def_infer`` do (one way, the same
conflict check), through the plugin ``Registry``: recorded for the plugin, rolled back
if it fails. An ``elementwise=True`` op needs no JVP or batching rule (``OpDef`` derives
them), as the example's ``cube``: its kernel and its gradient are all it has.

>>> import numpy as np, tapeflow as tf
>>> from tapeflow.plugins import Library, register
>>> lib = Library("libdoc")
>>> @lib.op(elementwise=True)
... def cube(x, name=None):
...     '''x ** 3, elementwise.'''
>>> @lib.kernel(cube, "cpu", dtypes=("float32", "float64"))
... def _cube_cpu(x):
...     return x * x * x
>>> @lib.gradient(cube)
... def _cube_grad(ctx, dy):
...     x = ctx.inputs[0]
...     return dy * 3.0 * x * x
>>> info = register(lib)                 # an installed plugin names `lib` in its entry point
>>> print(cube(tf.constant([2.0])))
tf.Tensor([8.], shape=(1,), dtype=float32)
>>> print(tf.ops.libdoc.cube(tf.constant([3.0])))
tf.Tensor([27.], shape=(1,), dtype=float32)
>>> print(tf.gradients_function(cube)(tf.constant(2.0))[0])
tf.Tensor(12.0, shape=(), dtype=float32)
>>> x = tf.constant([1.0, 2.0])
>>> with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as acc:   # the derived JVP
...     y = cube(x)
>>> print(acc.jvp(y))
tf.Tensor([ 3. 12.], shape=(2,), dtype=float32)
>>> print(tf.vectorized_map(cube, tf.constant([[1.0], [2.0]])))     # Broadcasting
tf.Tensor(
[[1.]
 [8.]], shape=(2, 1), dtype=float32)
"""

from __future__ import annotations

import dis
import inspect
import linecache

from ..errors import InvalidArgumentError, InvalidTypeError, OpError
from .. import dtypes as _dt
from ..runtime import shapes as _shapes
from ..runtime.dispatch import binary, execute
from ..runtime.registry import CORE_NAMESPACE, HANDLES, REQUIRED, OpDef, attr_error
from .hookspecs import API_VERSION, hookimpl
from .manager import Registry, _manager

__all__ = ["Library"]


class Library:
    """One project's ops, kernels and gradients, declared with decorators.

    Args:
        namespace: the project's name: its ops are named ``"<namespace>::<name>"``
            and appear as ``tapeflow.ops.<namespace>.<name>``.

    Register it in-process with ``tapeflow.plugins.register(lib)``, or name it in
    an entry point (``[project.entry-points.tapeflow] myproj = "myproj.ops:lib"``).
    Whatever is declared after it is registered takes effect at once.
    """

    TAPEFLOW_PLUGIN_API = API_VERSION

    def __init__(self, namespace: str):
        if not namespace.isidentifier() or namespace.startswith("_"):
            raise InvalidArgumentError(
                f"Library namespace must be a Python identifier not starting "
                             f"with '_', got {namespace!r}")
        self.namespace = namespace
        self.__name__ = namespace            # register(lib) names the plugin after it
        self.ops: list[OpDef] = []
        self._actions: list = []             # (Registry method, args, kwargs), replayed by hooks
        self._source = None                  # the registering plugin's name, once registered

    def __repr__(self):
        return f"<tapeflow.plugins.Library {self.namespace!r}: {len(self.ops)} op(s)>"

    def op(self, name=None, *, inputs=None, attrs=None, override=False, **opdef_kwargs):
        """Decorator: declare an op from a signature function; returns the op's function.

        Parameters without a default are the inputs (``*values``: one variadic
        input), parameters with a default (or keyword-only) are attributes, and
        ``name=None`` is accepted and ignored, as in every tapeflow function;
        ``inputs=`` / ``attrs=`` (``{name: default}``, ``REQUIRED`` for none) say it
        explicitly instead. ``name`` defaults to the function's name, prefixed with
        the namespace. Other keywords go to :class:`~tapeflow.plugins.OpDef`
        (``elementwise``, ``broadcast``, ``grad``, ``jvp``, ``batch``, ``infer``,
        ``composite``, ``differentiable``, ``num_outputs``, ``dtype_rule``,
        ``dtype_from``, ``check``, ``attr_types``; ``elementwise=True`` derives the JVP
        and the batching rule);
        ``override=True`` replaces another plugin's op of the same name. The returned
        function carries the OpDef as ``.op``.

        Attributes are typed from their defaults unless ``attr_types=`` is given, and
        validated before the op runs; an op with its own ``check`` and no
        ``attr_types=`` has its check run first, then the kinds read from the defaults
        (a value the check accepts but the kind does not warns: DeprecationWarning).
        """
        if callable(name):                   # bare @lib.op
            return self.op()(name)

        def deco(fn):
            if not _empty_body(fn):
                raise InvalidTypeError(f"the body of op signature {fn.__qualname__}() never runs: "
                                "leave it empty (a docstring) and register kernels with "
                                "@lib.kernel, or pass composite=")
            full = self._qualify(name or fn.__name__)
            ins, ats, kwonly = _signature(fn)
            if inputs is not None:
                ins = tuple(inputs)
            if attrs is not None:
                ats, kwonly = dict(attrs), set()
            kwonly |= {k for k, v in ats.items() if v is REQUIRED}
            inferred = "attr_types" not in opdef_kwargs
            kw = dict(opdef_kwargs, attr_types=opdef_kwargs.get("attr_types",
                                                                _attr_types_of(ats)))
            op = OpDef(full, inputs=ins, attrs=ats, doc=fn.__doc__, **kw)
            if inferred and op.check is not None:
                # the op's own check validated its attrs before tapeflow 0.2 read their
                # kinds from the defaults: it still runs first (docs/plugins.md, "What the
                # plugin API promises")
                op._attrs_after_check()
            handle = _make_function(op, kwonly, fn)
            HANDLES.setdefault(full, []).append(handle)
            self.ops.append(op)
            self._add("_add_op", op, override=override)
            return handle
        return deco

    def define(self, name, *, override=False, **opdef_kwargs) -> OpDef:
        """Declare an op whose public function you write yourself; returns its
        :class:`~tapeflow.plugins.OpDef` (call it, or pass it to
        ``tapeflow.runtime.dispatch.execute`` from your function after converting the
        arguments). Keywords are OpDef's (``inputs``, ``attrs``, ``attr_types``,
        ``elementwise``, ``grad``, ``infer``, ``check``, ...). The built-in ops are
        declared this way, by the Library ``tapeflow`` (:mod:`tapeflow.ops.library`).

        >>> from tapeflow.plugins import Library
        >>> lib = Library("defdoc")
        >>> op = lib.define("twice", inputs=("x",), attrs={"k": 2}, attr_types={"k": "int"})
        >>> op.name, op.attrs
        ('defdoc::twice', {'k': 2})
        """
        op = OpDef(self._qualify(name), **opdef_kwargs)
        self.ops.append(op)
        self._add("_add_op", op, override=override)
        return op

    def kernel(self, op, device_types, *, dtypes=None, needs_device=False, override=False,
               fresh=False, out=False):
        """Decorator: ``fn(*native_inputs, **attrs)`` is ``op``'s kernel on
        ``device_types`` (one or several), for ``dtypes`` (names; ``None``: all).
        ``fresh=True``: it returns new host arrays sharing memory with nothing and
        keeps no reference to its inputs (tf.function may then reuse their buffers).
        ``out=True``: it also takes ``out=`` an array of its result's shape and dtype and
        writes there (tf.function's buffer plan; docs/backends.md, "Output buffers")."""
        def deco(fn):
            for dt in [device_types] if isinstance(device_types, str) else device_types:
                self._add("add_kernel", _ref(op), dt, fn, dtypes=dtypes,
                          needs_device=needs_device, override=override, fresh=fresh, out=out)
            return fn
        return deco

    def kernels(self, device_type, table, *, override=False):
        """A kernel table on ``device_type``: what a kernel module's ``build(ctx)``
        returns, ``{op (name, OpDef or function): KernelSpec or function}``; the same as
        ``Registry.add_kernels``, recorded for this plugin."""
        self._add("add_kernels", device_type, {_ref(op): s for op, s in table.items()},
                  override)

    # --- an op's rules: op.def_<rule>, recorded for the plugin (the Registry) -----------
    def gradient(self, op, fn=None, *, override=False):
        """``fn(ctx, *output_grads)`` is ``op``'s gradient, written with tapeflow ops:
        ``@lib.gradient(op)`` or ``lib.gradient(op, fn)``, the same as
        ``op.def_grad(fn)``, recorded for this plugin (``override=True`` to replace an
        existing one, a built-in's). Returns ``fn`` (or the decorator)."""
        return self._rule(op, "grad", fn, override)

    def jvp(self, op, rule=None, *, override=False):
        """``op``'s forward-mode rule (``tf.autodiff.ForwardAccumulator``): a function
        ``rule(ctx, *input_tangents) -> output tangent(s)``, or
        :class:`~tapeflow.plugins.Linear` / :class:`~tapeflow.plugins.Multilinear`
        (``lib.jvp(op, Linear())``): ``op.def_jvp(rule)``, recorded for this plugin.
        Without one, an ``elementwise=True`` op's is derived from its gradient (and
        replaced by this one without ``override=True``); other ops' tangents come from
        the gradient by the double-VJP trick."""
        return self._rule(op, "jvp", rule, override)

    def batch(self, op, rule=None, *, override=False):
        """``op``'s batching rule (``tf.vectorized_map``): a function ``rule(ctx,
        *inputs) -> output(s)`` (a :class:`~tapeflow.plugins.BatchContext`), or
        :class:`~tapeflow.plugins.Broadcasting` (``lib.batch(op, Broadcasting())``):
        ``op.def_batch(rule)``, recorded for this plugin. Without one, an op declared
        ``elementwise=True`` or ``broadcast=True`` has ``Broadcasting`` (derived), other
        ops run once per example."""
        return self._rule(op, "batch", rule, override)

    def infer(self, op, fn=None, *, override=False):
        """``fn(shapes, dtypes, attrs) -> [(shape, dtype), ...]``, the shape and dtype
        inference of ``op`` (explains bad input in errors): ``op.def_infer(fn)``,
        recorded for this plugin."""
        return self._rule(op, "infer", fn, override)

    def non_differentiable(self, op):
        """Declare ``op`` non-differentiable: never recorded, no gradient flows."""
        self._add("declare_non_differentiable", _ref(op))

    def _rule(self, op, rule, fn, override):
        if fn is None:
            return lambda f: self._rule(op, rule, f, override)
        self._add("_set_rule", _ref(op), rule, fn, override=override)
        return fn

    # --- the hooks: an entry point (or register()) names the Library itself ----------
    @hookimpl
    def tapeflow_register_ops(self, registry):
        self._replay(registry, lambda m: m == "_add_op")

    @hookimpl
    def tapeflow_register_kernels(self, registry):
        self._replay(registry, lambda m: m != "_add_op")
        self._source = registry.source

    def _replay(self, registry, which):
        for method, args, kwargs in self._actions:
            if which(method):
                getattr(registry, method)(*args, **kwargs)

    def _add(self, method, *args, **kwargs):
        self._actions.append((method, args, kwargs))
        if self._source is not None and _manager.pm.is_registered(self):
            reg = Registry(self._source)     # registered already: commit this one now
            getattr(reg, method)(*args, **kwargs)
            reg._commit(_manager.plugins.get(_manager.pm.get_name(self)))

    def _qualify(self, name):
        ns, sep, short = name.rpartition("::")
        if sep and ns != self.namespace:
            raise InvalidArgumentError(f"op {name!r} is outside this Library's namespace "
                             f"{self.namespace!r}; name it {self.namespace}::{short}")
        if self.namespace == CORE_NAMESPACE:     # the built-ins keep their short names
            return short
        return f"{self.namespace}::{short}"


def _attr_types_of(attrs):
    """Attr kinds read from the defaults (``k=2``: an int, ``approximate=False``: a
    bool, ``mode="a"``: a str, ``dtype=tf.float32``: a dtype); attrs defaulting to
    None or REQUIRED are ``"any"`` (any Python value, never a tensor or an array) unless
    ``attr_types=`` says what they are."""
    out = {}
    for k, v in attrs.items():
        if v is None or v is REQUIRED:
            out[k] = "any"
        elif type(v) is bool:
            out[k] = "bool"
        elif type(v) is int:
            out[k] = "int"
        elif type(v) is float:
            out[k] = "float"
        elif type(v) is str:
            out[k] = "str"
        elif isinstance(v, _dt.DType):
            out[k] = "dtype"
    return out


def _ref(op):
    """What a Registry method takes: the OpDef of a handle, an OpDef, or an op name."""
    return getattr(op, "op", op)


def _empty_body(fn):
    ins = [(i.opname, i.argval) for i in dis.get_instructions(fn)
           if i.opname not in ("RESUME", "NOP", "CACHE")]
    return ins in ([("LOAD_CONST", None), ("RETURN_VALUE", None)], [("RETURN_CONST", None)])


def _signature(fn):
    """``(inputs, attrs, keyword-only attr names)`` read from ``fn``'s parameters."""
    ins, ats, kwonly = [], {}, set()
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            raise InvalidTypeError(f"{fn.__qualname__}: an op signature cannot take **{p.name}")
        if p.name == "name" and p.default is None:
            continue
        if p.kind is p.VAR_POSITIONAL:
            ins.append("*" + p.name)
        elif p.default is p.empty and p.kind is not p.KEYWORD_ONLY:
            ins.append(p.name)
        else:
            ats[p.name] = REQUIRED if p.default is p.empty else p.default
            if p.kind is p.KEYWORD_ONLY:
                kwonly.add(p.name)
    return tuple(ins), ats, kwonly


def _make_function(op, kwonly, fn):
    """The op's public function, generated: ``fn``'s name and signature (inputs, then
    attributes with their defaults, then ``name=None``) and a body of one call,
    ``execute(op, (x,), {attrs})`` (``binary(op, x, y)`` for two inputs and no
    attributes), which is what a built-in's public function is: no wrapper frame.
    It closes over the OpDef and the dispatcher, and lives in ``fn``'s module."""
    names = [i.lstrip("*") for i in op.inputs]
    if op.variadic and len(names) > 1:
        raise InvalidTypeError(f"op {op.name}: a variadic input must be the op's only input")
    for n in names + list(op.attrs):
        if not n.isidentifier() or n.startswith("_"):
            raise InvalidArgumentError(
                f"op {op.name}: input/attribute name {n!r} is not a plain identifier")
    kw = [k for k in op.attrs if k in kwonly]
    params = list(op.inputs) + [f"{k}=_tf_a_{k}" for k in op.attrs if k not in kwonly]
    params += (["*"] if kw and not op.variadic else []) + [
        k if op.attrs[k] is REQUIRED else f"{k}=_tf_a_{k}" for k in kw]
    params += [] if "name" in names or "name" in op.attrs else ["name=None"]
    check = ""
    if len(names) == 2 and not op.attrs and not op.variadic and op.num_outputs == 1:
        call = f"_tf_binary(_tf_op, {names[0]}, {names[1]})"
    else:
        args = names[0] if op.variadic else "(" + "".join(n + ", " for n in names) + ")"
        attrs = ", {" + ", ".join(f"{k!r}: {k}" for k in op.attrs) + "}" if op.attrs else ""
        call = f"_tf_execute(_tf_op, {args}{attrs})"
        if op.attr_types and not op.attrs_after_check:
            # typed attrs: checked here, eagerly and when traced alike; the error path
            # adds the device and what to do (try costs nothing until it raises)
            check = (f"try:\n            _tf_check(_tf_op, {args}{attrs})\n        "
                     f"except _tf_OpError as _tf_e:\n            raise _tf_attr_error("
                     f"_tf_op, {args}{attrs}, _tf_e) from None\n        ")
    defaults = {f"_tf_a_{k}": v for k, v in op.attrs.items() if v is not REQUIRED}
    src = (f"def _factory(_tf_op, _tf_execute, _tf_binary, _tf_check, _tf_OpError, "
           f"_tf_attr_error, {', '.join(defaults)}):\n"
           f"    def {fn.__name__}({', '.join(params)}):\n        {check}return {call}\n"
           f"    return {fn.__name__}\n")
    filename = f"<tapeflow op {op.name}>"          # tracebacks show the generated line
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns: dict = {}
    exec(compile(src, filename, "exec"), ns)
    inner = ns["_factory"](op, execute, binary, _shapes.check_attrs, OpError, attr_error,
                           **defaults)
    # rebuilt in the plugin module's globals, so doctest and inspect see it as the module's
    f = type(inner)(inner.__code__, fn.__globals__, fn.__name__, inner.__defaults__,
                    inner.__closure__)
    f.__kwdefaults__ = inner.__kwdefaults__
    f.__qualname__, f.__module__, f.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    f.op = op
    return f
