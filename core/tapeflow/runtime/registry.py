"""Op signatures (:class:`OpDef`) and the kernel registry.

An op is declared once (in the core or in a plugin) and backends register
kernels for it per device type. Kernels live on the OpDef itself
(``op.kernels[device_type]``) so dispatch is one dict hit on an object it
already holds.

Kernel calling convention (every backend): ``fn(*native_inputs, **attrs)``
returning one native array, or a tuple of them for multi-output ops. Variadic
inputs (``concat``'s ``values``) arrive flattened as positional arguments.
A kernel registered with ``needs_device=True`` also receives ``device=`` (the
:class:`~tapeflow.runtime.devices.Device`), which creation and random ops need.
Kernels validate what only they can see (index ranges) and raise
``InvalidArgumentError`` without op/device: the dispatcher adds both.

Long file: the two halves of one contract -- what an op is (its signature, rules and
the rules its declaration implies) and what a kernel is (KernelSpec, lazy kernels, the
build context) -- and the one table that joins them; dispatch reads both on every call.
"""

from __future__ import annotations

import warnings

import numpy as np

from . import devices as _devs
from .. import dtypes as _dt
from . import shapes as _shapes
from ..errors import (InvalidArgumentError, InvalidTypeError, NotDifferentiableError,
                      NotFoundError, OpError, PluginConflictError, PluginOverrideWarning,
                      TapeflowError)
from .tensor import Tensor, VariableBase, speedups


#: op name -> the public functions Libraries made for it (tapeflow.plugins.library); the
#: one whose OpDef is registered under the name is the op's (two may define it, one wins)
HANDLES: dict = {}


__all__ = ["OpDef", "KernelSpec", "BuildContext", "KernelEntry", "REQUIRED", "OPS", "get_op", "GradContext", "Linear",
           "Multilinear", "BatchContext", "Broadcasting"]


class _Required:
    def __repr__(self):
        return "<required>"


REQUIRED = _Required()

#: name -> OpDef for every registered op (built-ins and plugins)
OPS: dict[str, OpDef] = {}

#: every replacement of one source's op or kernel by another's (``override=True``):
#: ``{"op", "device_type" (None for the op itself), "replaced", "by"}``, in order;
#: ``python -m tapeflow info`` lists them
OVERRIDES: list[dict] = []


def _overridden(op_name, device_type, old, new):
    """Record and warn (once per op, device type and source) that ``new`` replaced
    ``old``'s op or kernel: a plugin silently changing a built-in is a surprise."""
    entry = {"op": op_name, "device_type": device_type, "replaced": old, "by": new}
    if entry in OVERRIDES:
        return
    OVERRIDES.append(entry)
    what = f"the kernel of op '{op_name}' on device type '{device_type}'" if device_type \
        else f"op '{op_name}'"
    warnings.warn(f"{new!r} replaced {what} registered by {old!r} (override=True); "
                  "`python -m tapeflow info` lists every override", PluginOverrideWarning,
                  stacklevel=4)


def _np_keyed(variants):
    """``{dtype (any spelling): fn}`` -> ``{np.dtype: fn}`` (what dispatch looks up), or
    None for no variants."""
    return None if not variants else {_dt.as_dtype(d).np: f for d, f in variants.items()}


class KernelSpec:
    """One kernel of one op on one device type: what a backend's ``build(ctx)`` returns
    for an op (``{op name: KernelSpec}``; a bare function means ``KernelSpec(fn)``) and
    what the registry keeps (``op.kernels[device_type]``). The one kernel contract of
    every backend (docs/backends.md).

    Args:
        fn: ``fn(*native_inputs, **attrs)`` -> a native array, or a tuple of them.
        dtypes: the dtypes it takes (names or DTypes; the op's key dtype, see OpDef's
            ``dtype_from``); None: any.
        needs_device: it also receives ``device=`` (creation and random ops).
        fresh: it returns new arrays sharing memory with nothing and keeps no reference
            to its inputs (tf.function's buffer reuse may recycle them).
        out: ``fn`` (and its variants) also take ``out=`` an array of the result's
            shape, dtype and device and write there (docs/backends.md, "Output
            buffers"); implies ``fresh``'s promises on inputs.
        variants: ``{dtype: fn}`` for declared dtypes that run another function
            (bfloat16 computed in float32); the others call ``fn`` with no wrapper.
        layouts: ``"strided"`` (default): it takes any array of its backend, views
            with strides and offsets included; ``"contiguous"``: the backend hands it
            C-contiguous inputs only (its ``build`` says so, the conformance suite
            checks strided inputs either way).

    ``device_type`` and ``source`` are set when it is registered; see also :meth:`lazy`.
    """

    __slots__ = ("fn", "dtypes", "np_dtypes", "needs_device", "source", "device_type",
                 "fresh", "variants", "out", "layouts")

    def __init__(self, fn, dtypes=None, needs_device=False, source=None, fresh=False,
                 variants=None, out=False, *, layouts="strided", device_type=None):
        if not callable(fn):
            raise InvalidTypeError(f"a kernel must be callable, got {fn!r}")
        if layouts not in ("strided", "contiguous"):
            raise InvalidArgumentError(f"layouts must be 'strided' or 'contiguous', got "
                                       f"{layouts!r}")
        self.fn, self.layouts = fn, layouts
        self.variants = _np_keyed(variants)
        self.fresh, self.out = bool(fresh), bool(out)
        self.device_type = device_type
        self.dtypes = None if dtypes is None else tuple(_dt.as_dtype(d) for d in dtypes)
        # np.dtype objects *and* scalar types, so `arr.dtype in np_dtypes` is one hash
        self.np_dtypes = None if dtypes is None else frozenset(
            [d.np for d in self.dtypes])
        self.needs_device = needs_device
        self.source = source
        for d, f in (self.variants or {}).items():
            if not callable(f):
                raise InvalidTypeError(f"variant {d} of kernel {fn!r} is not callable: {f!r}")
            if self.np_dtypes is not None and d not in self.np_dtypes:
                raise InvalidArgumentError(f"variant {d} of kernel {fn!r}: not one of its dtypes")

    @classmethod
    def of(cls, spec):
        """``spec`` as a KernelSpec: a KernelSpec, or a bare function."""
        return spec if isinstance(spec, KernelSpec) else cls(spec)

    @classmethod
    def lazy(cls, resolve, dtypes=None, needs_device=False, fresh=False, out=False, *,
             layouts="strided"):
        """A kernel made on its first call, by ``resolve()`` (-> a function, or a KernelSpec
        whose ``fn`` and ``variants`` are used; what dispatch needs is declared here). The
        registry then rebinds the entry to it; a ``resolve`` that raises runs again at the
        next call (docs/backends.md, "Lazy kernels")."""
        return cls(LazyKernel(resolve), dtypes, needs_device, None, fresh, None, out,
                   layouts=layouts)

    def bound(self, device_type, source):
        """This spec registered on ``device_type`` by ``source`` (a copy)."""
        new = object.__new__(KernelSpec)
        for k in KernelSpec.__slots__:
            setattr(new, k, getattr(self, k))
        new.device_type, new.source = device_type, source
        return new

    def __repr__(self):
        return f"<KernelSpec {getattr(self.fn, '__qualname__', self.fn)!r} {self.describe()}>"

    def describe(self):
        ds = "any dtype" if self.dtypes is None else "dtype in [" + ", ".join(
            d.name for d in self.dtypes) + "]"
        return f"device='{self.device_type}'; {ds}"


#: the name of :class:`KernelSpec` before tapeflow 0.3
KernelEntry = KernelSpec


class LazyKernel:
    """The ``fn`` of a :meth:`KernelSpec.lazy` entry (``op``'s ``entry``) until its first
    call, which resolves the real kernel, rebinds the entry and calls it."""

    __slots__ = ("resolve", "op", "entry", "real", "__weakref__")

    def __init__(self, resolve, op=None, entry=None, real=None):
        if not callable(resolve):
            raise InvalidTypeError(f"a lazy kernel's resolve must be callable, got {resolve!r}")
        self.resolve, self.op, self.entry, self.real = resolve, op, entry, real

    def __call__(self, *arrays, **attrs):
        real = self.real
        if real is None or (self.entry is not None and self.entry.fn is self):
            real = self.resolved()
        fn = real.fn
        if real.variants:
            k = 0 if self.op is None else self.op.dtype_from
            if type(k) is int:
                kd = arrays[k].dtype if k < len(arrays) else None
            else:
                kd = None if attrs.get(k) is None else _dt.as_dtype(attrs[k]).np
            fn = real.variants.get(kd, fn)
        return fn(*arrays, **attrs)

    def resolved(self):
        """The real kernel (a KernelSpec; resolved once), the entry rebound to it."""
        real = self.real
        if real is None:
            real = self.real = KernelSpec.of(self.resolve())
        entry, op = self.entry, self.op
        if entry is not None and entry.fn is self and op.kernels.get(entry.device_type) is entry:
            entry.fn, entry.variants = real.fn, real.variants
            refresh_fast(op, entry.device_type)
        return real

    def __repr__(self):
        return f"<lazy kernel {getattr(self.op, 'name', '')} {self.real and self.real.fn}>"


class BuildContext:
    """What a backend's ``build(ctx)`` functions receive: ``xp`` (the array module the
    kernels are written against: ``numpy``, CuPy's namespace), ``device_type``, and the
    backend's services as further attributes (``ctx.raw64``: the random bit source;
    ``ctx.shared``: the table built so far). ``ctx.get(name, default)`` reads an optional
    one.

    >>> import numpy as np
    >>> ctx = BuildContext(np, "cpu", raw64=None)
    >>> ctx.xp is np, ctx.device_type, ctx.get("shared", {})
    (True, 'cpu', {})
    """

    def __init__(self, xp, device_type, **services):
        self.xp, self.device_type = xp, device_type
        self.__dict__.update(services)

    def get(self, name, default=None):
        return self.__dict__.get(name, default)

    def __repr__(self):
        return (f"BuildContext({getattr(self.xp, '__name__', self.xp)}, {self.device_type!r}, "
                f"{sorted(k for k in self.__dict__ if k not in ('xp', 'device_type'))})")


class OpDef:
    """The signature of an op.

    Its rules are given here or attached after, by object, each one way:
    ``op.def_grad``, ``op.def_jvp``, ``op.def_batch`` and ``op.def_infer`` (decorators
    that also take the rule itself: ``op.def_jvp(Multilinear())``; a ``Library``'s
    ``gradient``/``jvp``/``batch``/``infer`` are the same, recorded for its plugin); a
    second rule for the op is a PluginConflictError naming both sources unless
    ``override=True``. Rules that follow from the declaration are derived
    (``op.rule_sources[rule] == "derived"``): the batching rule :class:`Broadcasting` of
    an op declared ``elementwise`` or ``broadcast``, and the JVP of an elementwise
    differentiable op (its Jacobian is diagonal: the gradient rule, read when it runs,
    applied to the tangent). An explicit rule replaces a derived one without
    ``override=True``.

    Args:
        name: ``"MatMul"`` for built-ins, ``"project::name"`` for plugins.
        inputs: input names; a name starting with ``*`` is variadic (a list).
        attrs: attribute names -> defaults (``REQUIRED`` for none).
        num_outputs: an int, or ``callable(attrs, n_inputs) -> int``.
        dtype_rule: ``"same"``: inputs are promoted to one dtype (tapeflow's promotion
            lattice, docs/dtypes.md; Python scalars weak) before the kernel runs; ``"none"``: each input
            keeps its own dtype (Python scalars take the seeds' defaults).
        dtype_from: which input index (or attr name) decides the kernel's dtype.
        broadcast: the op broadcasts its inputs NumPy-style; gradients are summed
            back to each input's shape by the core (rules need not do it).
        grad: ``grad(ctx, *output_grads) -> gradient or tuple of gradients``, one
            per input (``None`` = zero), written with tapeflow ops.
        differentiable: ``False`` declares the op non-differentiable: it is never
            recorded and gradients do not flow through it.
        infer: optional ``infer(shapes, dtypes, attrs) -> [(shape, dtype), ...]``,
            used to explain bad input and by tracing.
        composite: optional ``composite(*inputs, **attrs)`` written with tapeflow
            ops; runs on any device lacking a kernel.
        check: optional ``check(op, tensors, attrs, device)`` run before every kernel
            of the op, on every backend: validates what the signature alone can
            (shapes to allocate, value ranges) and raises InvalidArgumentError or
            ResourceExhaustedError. Ops with a check never take the unchecked fast
            path.
        elementwise: the op computes each output element from the corresponding
            (broadcast) input elements alone, with one output of the broadcast shape and
            no state: tf.function's fusion pass may group it with its neighbours, and a
            backend may run its kernel inside a fused one. Its JVP and batching rule
            are derived (above): a kernel and a gradient are all it needs.
        attr_types: optional ``{attr: kind}``; calling the op (its generated function,
            or ``op(x, axis=...)``) validates its attrs against it, eagerly and when
            traced, so a kernel never sees an attr of the wrong type on any backend.
            Kinds (a trailing ``?`` also allows None): ``"any"`` (any Python value
            but a tensor or an array), ``"bool"``, ``"int"``, ``"uint"`` (a
            non-negative int), ``"float"`` (a real number, not a bool), ``"number"``
            (a real number or a bool), ``"str"``, ``"enum:A|B|C"``, ``"dtype"`` (a
            tapeflow DType), ``"axis"`` (an int in [0, rank of the first input)),
            ``"axis+1"`` (a new axis: [0, rank]), ``"axes"`` (a sorted tuple of
            distinct axes), ``"shape"`` (a tuple of non-negative ints), ``"reshape"``
            (a shape with at most one -1), ``"sizes"`` (a tuple of positive ints),
            ``"perm"`` (a permutation of the first input's dimensions),
            ``"paddings"`` (one (before, after) pair of non-negative ints per
            dimension). A Library op's attrs are typed from their defaults. The error
            names the op, the device, the attr, the value and the type expected.
            Where a ``Library.op`` has its own ``check`` and no ``attr_types=``, the
            check runs first (its messages stand) and the types read from the defaults
            are validated after it (docs/plugins.md, "What the plugin API promises").
        jvp: optional forward-mode rule (``tf.autodiff.ForwardAccumulator``):
            ``jvp(ctx, *input_tangents) -> output tangent(s)``, a :class:`Linear` or a
            :class:`Multilinear`; without one, an elementwise op's is derived from
            ``grad``, and other ops' tangents come from ``grad`` by the double-VJP
            trick (about twice the cost).
        batch: optional batching rule (``tf.vectorized_map``, ``GradientTape.jacobian``):
            :class:`Broadcasting` for an op that maps over leading dimensions, or
            ``batch(ctx, *inputs) -> output(s)`` (a :class:`BatchContext`: batched
            inputs carry the batch as dimension 0, and so must the outputs); without
            one (derived: :class:`Broadcasting` for ``elementwise``/``broadcast`` ops),
            the op runs once per example, with a warning.
    """

    __slots__ = ("name", "inputs", "attrs", "num_outputs", "dtype_rule", "dtype_from",
                 "broadcast", "grad", "jvp", "batch", "differentiable", "infer", "composite",
                 "kernels", "variadic", "source", "doc", "fast", "check", "attr_types",
                 "elementwise", "attrs_after_check", "rule_sources", "__weakref__")

    def __init__(self, name, inputs=("x",), attrs=None, num_outputs=1, dtype_rule="same",
                 dtype_from=0, broadcast=False, grad=None, differentiable=True, infer=None,
                 composite=None, doc=None, source="tapeflow", check=None, attr_types=None,
                 elementwise=False, jvp=None, batch=None):
        self.name = name
        #: batching rule for tf.vectorized_map: ``fn(ctx, *inputs) -> output(s)`` (a
        #: :class:`BatchContext`; batched inputs carry the batch as dimension 0), a
        #: :class:`Broadcasting`, or None (the op then runs once per example in a loop)
        self.batch = batch
        #: forward-mode rule: ``fn(ctx, *input_tangents) -> output tangent(s)`` (None for
        #: inputs without a tangent), a :class:`Linear` or :class:`Multilinear`, or None
        #: (tf.autodiff.ForwardAccumulator then uses the double-VJP of ``grad``)
        self.jvp = jvp
        self.elementwise = bool(elementwise)
        self.inputs = tuple(inputs)
        self.variadic = any(i.startswith("*") for i in self.inputs)
        self.attrs = dict(attrs or {})
        self.num_outputs = num_outputs
        self.dtype_rule = dtype_rule
        self.dtype_from = dtype_from
        self.broadcast = broadcast
        self.grad = grad
        self.differentiable = differentiable
        self.infer = infer
        self.composite = composite
        self.check = check
        self.attr_types = dict(attr_types or {})
        #: the attr types are validated after ``check`` (inside it, on the op's device)
        #: instead of before the op runs: see :meth:`_attrs_after_check`
        self.attrs_after_check = False
        unknown = set(self.attr_types) - set(self.attrs)
        if unknown:
            raise InvalidArgumentError(
                f"attr_types of op {name!r} name unknown attrs {sorted(unknown)}")
        self.kernels: dict[str, KernelEntry] = {}
        #: dispatch cache: device type -> {numpy dtype of input 0 -> kernel fn}, for
        #: kernels that need no device argument (see add_kernel)
        self.fast: dict[str, dict] = {}
        self.source = source
        #: rule attribute (see RULES) -> the source that attached it, for a rule attached
        #: after the op was declared (a rule given to the constructor is the op's source's),
        #: or :data:`DERIVED` for a rule that follows from the declaration (no one's: an
        #: explicit rule replaces it without ``override=True``)
        self.rule_sources: dict = {}
        if batch is None and (self.elementwise or broadcast):
            self.batch, self.rule_sources["batch"] = BROADCASTING, DERIVED
        if jvp is None and self.elementwise and differentiable:
            self.jvp, self.rule_sources["jvp"] = elementwise_jvp(self), DERIVED
        self.doc = doc

    def __repr__(self):
        return f"<OpDef {self.name}({', '.join(self.inputs)}; {', '.join(self.attrs)})>"

    def bind_call(self, inputs, attrs):
        """``op(x, y, attr=value)``'s inputs and full attrs, checked (attrs default as
        declared). Calling an OpDef runs it: ``__call__`` is defined by
        ``tapeflow.runtime.dispatch``, the dispatcher, above this module."""
        full = self.bind_attrs(attrs)
        if self.variadic and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            inputs = tuple(inputs[0])
        if len(inputs) != len(self.inputs) and not self.variadic:
            # (an extra input reached NumPy ufunc kernels as out=: OPS["Neg"](a, b)
            # overwrote b, a Variable included)
            names, k = ", ".join(self.inputs), len(self.inputs)
            raise InvalidArgumentError(
                f"{self.name} takes {k} input{'s' * (k != 1)} ({names}), got {len(inputs)}: pass "
                f"each input tensor positionally, {self.name.split('::')[-1]}({names}, **attrs)",
                op=self.name, device=_placement(inputs))
        if self.attr_types and not self.attrs_after_check:
            validate_attrs(self, inputs, full)
        return inputs, full

    def bind_attrs(self, attrs):
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise InvalidArgumentError(
                f"unknown attribute(s) {sorted(unknown)}; {self.name} takes "
                f"{sorted(self.attrs) or 'no attributes'}", op=self.name)
        full = dict(self.attrs)
        full.update(attrs)
        missing = [k for k, v in full.items() if v is REQUIRED]
        if missing:
            raise InvalidArgumentError(f"missing required attribute(s) {missing}", op=self.name)
        return full

    # --- decorators for op authors: one path (set_rule) for every rule --------------
    def def_grad(self, fn=None, *, override=False, source=None):
        """Set the gradient rule ``fn(ctx, *output_grads)``: ``@op.def_grad``, or
        ``op.def_grad(fn)``; returns ``fn``. A second rule from another source raises
        PluginConflictError unless ``override=True`` (:func:`set_rule`)."""
        return _rule_decorator(self, "grad", fn, override, source)

    def def_jvp(self, fn=None, *, override=False, source=None):
        """Set the forward-mode rule: a function ``fn(ctx, *input_tangents)``, or a rule
        object (``op.def_jvp(Multilinear())``, ``Linear((0,))``); returns it."""
        return _rule_decorator(self, "jvp", fn, override, source)

    def def_batch(self, fn=None, *, override=False, source=None):
        """Set the batching rule: a function ``fn(ctx, *inputs)`` (a
        :class:`BatchContext`), or :class:`Broadcasting`; returns it."""
        return _rule_decorator(self, "batch", fn, override, source)

    def def_infer(self, fn=None, *, override=False, source=None):
        """Set the shape/dtype inference ``fn(shapes, dtypes, attrs)``; returns it."""
        return _rule_decorator(self, "infer", fn, override, source)

    def kernel(self, device_type, dtypes=None, needs_device=False):
        """Decorator registering a kernel directly (in-process use and tests).
        Entry-point plugins use the ``tapeflow_register_kernels`` hook instead."""
        def deco(fn):
            add_kernel(self, device_type, fn, dtypes, needs_device, source="in-process")
            return fn
        return deco

    def n_outputs(self, attrs, n_inputs):
        n = self.num_outputs
        return n if type(n) is int else n(attrs, n_inputs)

    def _attrs_after_check(self):
        """(``Library.op``, for an op with its own ``check`` whose attr types the core
        read from the defaults.) The op's check runs first, so its messages stand, as
        they did before tapeflow 0.2 typed such attrs; then the types are validated:
        a tensor or an array is refused, and a value the check accepted but the type
        read from the default does not (``steps=2.0`` for ``steps=1``) reaches the
        kernel as before, with a DeprecationWarning (an error from tapeflow 0.3; the
        author declares ``attr_types=`` to accept it). A check that fails with a plain
        Python exception on an attr of the wrong type gives the core's error instead."""
        own = self.check
        if own is None or self.attrs_after_check:
            return

        def check(op, tensors, attrs, device):
            try:
                own(op, tensors, attrs, device)
            except TapeflowError:
                raise
            except Exception:
                validate_attrs(op, tensors, attrs, device)     # the core's error, if any
                raise
            _validate_after_check(op, tensors, attrs, device)
        check.__wrapped__ = own
        check.__name__ = getattr(own, "__name__", "check")
        check.__qualname__ = getattr(own, "__qualname__", "check")
        self.check = check
        self.attrs_after_check = True
        for dt in list(self.kernels):
            refresh_fast(self, dt)


class Linear:
    """A JVP rule: the op is linear in the inputs at ``positions`` (all when None), so an
    output's tangent is the op itself applied to the tangents there (zeros for those
    without one; the other inputs as they are), with ``attrs`` overriding attributes
    (``Linear((0,), constant_values=0)``: a pad's tangent pads with zeros)."""

    __slots__ = ("positions", "attrs")

    def __init__(self, positions=None, **attrs):
        self.positions = None if positions is None else tuple(positions)
        self.attrs = attrs


class Multilinear:
    """A JVP rule: the op is linear in each of its inputs separately (Mul, MatMul,
    Conv2D, Einsum), so ``d op(a, b) = op(da, b) + op(a, db)`` (one term per input
    with a tangent)."""

    __slots__ = ()


class Broadcasting:
    """A batching rule: the op maps over any leading dimensions of its inputs and
    broadcasts them as NumPy does (elementwise ops, softmax over the last axis, the
    linear algebra of the last two dimensions), so a batched input keeps its batch as a
    new leading dimension (aligned to the other inputs by size-1 dimensions) and an
    unbatched one is used as it is."""

    __slots__ = ()


#: the batching rule of every elementwise or broadcasting op (one object, shared), and the
#: ``OpDef.rule_sources`` of a rule derived from the declaration
BROADCASTING, DERIVED = Broadcasting(), "derived"


def elementwise_jvp(op):
    """The JVP of the elementwise op ``op`` from its gradient rule: a diagonal Jacobian,
    so ``d f(x) = f'(x) t`` is the (real) gradient rule applied to the tangent (one
    partial per input with a tangent, summed). It reads ``op.grad`` when it runs, so a
    gradient attached or replaced later gives the JVP too."""
    def jvp(ctx, *tangents):
        grad, parts = getattr(op.grad, "__wrapped__", op.grad), []
        if grad is None:         # (as forward mode fails through any op without a gradient)
            raise NotDifferentiableError(f"forward mode through op {op.name}: it has no JVP "
                                         "rule and no gradient to derive one", op=op.name)
        for i, t in enumerate(tangents):
            if t is not None:
                ctx.needs = tuple(j == i for j in range(len(tangents)))
                g = grad(ctx, t, *[None] * (len(ctx.outputs) - 1))
                parts.append(g[i] if isinstance(g, (tuple, list)) else g)
        parts = [g for g in parts if g is not None]
        return sum(parts[1:], parts[0]) if parts else None
    jvp.__name__ = f"{op.name}_jvp"
    return jvp


class BatchContext:
    """What a batching rule sees: ``op``, ``attrs``, ``batched`` (one bool per input:
    does it carry the batch, as its dimension 0?) and ``size`` (the batch). The rule
    returns the op's output(s) with the batch as dimension 0; a rule whose outputs do
    not depend on the batch (``Shape``) sets ``out_batched`` to a tuple of bools, and a
    rule that does not cover these inputs returns ``NotImplemented`` (the op then runs
    once per example)."""

    __slots__ = ("op", "attrs", "batched", "size", "out_batched")

    def __init__(self, op, attrs, batched, size):
        self.op = op
        self.attrs = attrs
        self.batched = batched
        self.size = size
        self.out_batched = None

    def rank(self, x, i):
        """The rank of one example of input ``i`` (``x``)."""
        return len(x.shape) - (1 if self.batched[i] else 0)


class GradContext:
    """What a gradient rule sees: ``op``, ``inputs``, ``outputs``, ``attrs``, and
    ``needs`` (one bool per input: does the tape want that input's gradient?), so a
    rule may skip work nobody uses (a first conv layer's input gradient).

    The tape's records are plain tuples: at backprop the tape allocates one GradContext
    per record it plays back (``object.__new__``, without ``__init__``), and forward mode
    one per op whose tangent it computes.
    """

    __slots__ = ("op", "inputs", "outputs", "attrs", "grad_fn", "needs")

    def __init__(self, op, inputs, outputs, attrs, grad_fn=None):
        self.op = op
        self.inputs = inputs
        self.outputs = outputs
        self.attrs = attrs
        self.grad_fn = grad_fn
        self.needs = None

    @property
    def output(self):
        return self.outputs[0]


#: the core's namespace: its ops are registered under their short names ("Add"), and
#: "tapeflow::Add" names the same op
CORE_NAMESPACE = "tapeflow"
_CORE_PREFIX = CORE_NAMESPACE + "::"


def get_op(name) -> OpDef:
    """The registered op called ``name`` (``"Add"`` or ``"tapeflow::Add"`` for a
    built-in, ``"project::name"`` for a plugin's)."""
    try:
        return OPS[name]
    except KeyError:
        if type(name) is str and name.startswith(_CORE_PREFIX) and name[10:] in OPS:
            return OPS[name[10:]]
        close = [n for n in OPS if n.lower() == str(name).lower() or n.split("::")[-1] == name]
        raise NotFoundError(
            f"No op named {name!r}" + (f"; did you mean {close}?" if close else "")) from None


def has_op(name) -> bool:
    """Whether an op called ``name`` is registered (see :func:`get_op`)."""
    return name in OPS or (type(name) is str and name.startswith(_CORE_PREFIX)
                           and name[10:] in OPS)


def add_op(op: OpDef, source=None, override=False):
    prev = OPS.get(op.name)
    if prev is not None and prev is not op and not override:
        raise PluginConflictError(
            f"Op {op.name!r} is defined by both {prev.source!r} and {source or op.source!r}. "
            "Rename one (plugin ops are namespaced 'project::name') or pass override=True.")
    if source is not None:
        op.source = source
    if prev is not None and prev is not op and prev.source != op.source:
        _overridden(op.name, None, prev.source, op.source)
    if prev is not None and prev is not op:
        op.kernels.update({k: v for k, v in prev.kernels.items() if k not in op.kernels})
    OPS[op.name] = op
    return op


#: the rules an op carries, attached by :func:`set_rule`: attribute -> what errors call it
RULES = {"grad": "gradient", "jvp": "JVP rule", "batch": "batching rule",
         "infer": "shape/dtype inference"}


#: rules that 0.2 replaced silently (``OpDef.def_grad``/``def_infer``, ``Library.infer``):
#: replacing one without ``override=True`` warns until 0.4, which refuses it
LENIENT_UNTIL_0_4 = ("grad", "infer")


def set_rule(op, rule, fn, source=None, override=False, undo=None, lenient=False):
    """Attach ``fn`` as rule ``rule`` (a key of :data:`RULES`) of ``op`` (name or OpDef),
    from ``source`` (default: the op's own). The one path of ``OpDef.def_grad``/
    ``def_jvp``/``def_batch``/``def_infer`` and of the plugin ``Registry`` (hence of
    ``Library.gradient``/``jvp``/``batch``/``infer``): a rule the op already has, from
    anyone, is replaced only with ``override=True`` (else PluginConflictError naming both
    sources and rules), but for a rule derived from the declaration (:data:`DERIVED`:
    no one's); ``fn=None`` for ``"grad"`` declares the op non-differentiable.
    ``undo``: a list that receives what :func:`undo_rules` needs to put it back.
    ``lenient``: a route that replaced silently in 0.2 (:data:`LENIENT_UNTIL_0_4`) warns
    (DeprecationWarning) instead of raising, until 0.4."""
    if isinstance(op, str):
        op = get_op(op)
    if rule not in RULES:
        raise InvalidArgumentError(f"unknown rule {rule!r} for op {op.name}; an op has the "
                                   f"rules {sorted(RULES)}", op=op.name)
    prev, had = getattr(op, rule), op.rule_sources.get(rule) or op.source
    source = source or op.source
    if prev is not None and prev is not fn and not override and had != DERIVED:
        msg = (f"Op {op.name} already has a {RULES[rule]} (from {had!r}: {_rule_name(prev)}); "
               f"{source!r} must pass override=True to replace it with {_rule_name(fn)}.")
        if not (lenient and rule in LENIENT_UNTIL_0_4):
            raise PluginConflictError(msg)
        warnings.warn(f"{msg} Replacing it without override=True is deprecated: tapeflow 0.4 "
                      "raises PluginConflictError.", DeprecationWarning, stacklevel=4)
    if undo is not None:
        undo.append((op, rule, prev, dict(op.rule_sources), op.differentiable))
    setattr(op, rule, fn)
    op.rule_sources[rule] = source
    if rule == "grad" and fn is None:
        op.differentiable = False
    return fn


def undo_rules(undo):
    """Put back the rules :func:`set_rule` replaced (a plugin that failed halfway)."""
    for op, rule, prev, sources, differentiable in reversed(undo):
        setattr(op, rule, prev)
        op.differentiable, op.rule_sources = differentiable, sources
    undo.clear()


def _rule_name(fn):
    return getattr(fn, "__name__", None) or type(fn).__name__ + "()"


def _rule_decorator(op, rule, fn, override, source):
    """``op.def_<rule>``: called with the rule, set it; else a decorator that does."""
    if fn is None:
        return lambda f: set_rule(op, rule, f, source, override, lenient=True)
    return set_rule(op, rule, fn, source, override, lenient=True)


def add_kernel(op, device_type, fn, dtypes=None, needs_device=False, source=None, override=False,
               fresh=False, variants=None, out=False):
    """Register a kernel of ``op`` (name or OpDef) on ``device_type``: ``fn`` a
    :class:`KernelSpec` (the other arguments then unused) or a function."""
    if isinstance(op, str):
        op = get_op(op)
    prev = op.kernels.get(device_type)
    if prev is not None and not override and prev.source != source:
        raise PluginConflictError(
            f"Kernel for ({op.name}, {device_type}) is registered by both {prev.source!r} and "
            f"{source!r}. Pass override=True in the second registration to replace it.")
    entry = (fn if isinstance(fn, KernelSpec) else KernelSpec(
        fn, dtypes, needs_device, None, fresh, variants, out)).bound(device_type, source)
    if type(entry.fn) is LazyKernel:          # (its own stand-in, which rebinds this entry)
        entry.fn = LazyKernel(entry.fn.resolve, op, entry, entry.fn.real)
    if prev is not None and prev.source != source:
        _overridden(op.name, device_type, prev.source, source)
    op.kernels[device_type] = entry
    refresh_fast(op, device_type)


def rebind_kernel(op, device_type, old, new, variants=None) -> bool:
    """Deprecated (:meth:`KernelSpec.lazy`): :func:`swap_kernel`, with a warning."""
    warnings.warn("tapeflow.plugins.rebind_kernel is deprecated: register a kernel made on "
                  "its first call as KernelSpec.lazy(resolve, dtypes=...), which the "
                  "registry rebinds itself (docs/backends.md, 'Lazy kernels')",
                  DeprecationWarning, stacklevel=2)
    return swap_kernel(op, device_type, old, new, variants)


def swap_kernel(op, device_type, old, new, variants=None) -> bool:
    """Replace kernel ``old`` of ``op`` (name or OpDef) on ``device_type`` by ``new`` (the
    profiler wraps kernels this way); ``variants``: ``{dtype: fn}`` for declared dtypes
    that run another function (as :func:`add_kernel`'s). Returns False, changing
    nothing, when ``old`` is no longer the registered kernel (another plugin replaced
    it)."""
    if isinstance(op, str):
        op = get_op(op)
    entry = op.kernels.get(device_type)
    if entry is None or entry.fn is not old:
        return False
    entry.fn = new
    if variants:
        entry.variants = _np_keyed(variants)
    refresh_fast(op, device_type)
    return True


class _OneAttr:
    """One attr of an op, as :func:`tapeflow.runtime.shapes.check_attrs` takes an op."""

    __slots__ = ("name", "attr_types")

    def __init__(self, name, attr, kind):
        self.name = name
        self.attr_types = {attr: kind}


def _placement(inputs):
    """The device an op called with ``inputs`` runs on, as dispatch places it: the
    innermost device scope, else the inputs' device (an accelerator's before the
    host's), else the default device; None if that cannot be said."""
    try:
        dev = _devs.current_device()
        if dev is not None:
            return dev
        for x in inputs if isinstance(inputs, (list, tuple)) else (inputs,):
            d = getattr(x, "_device", None) if isinstance(x, (Tensor, VariableBase)) else None
            if d is not None and (dev is None or (dev.is_host and not d.is_host)):
                dev = d
        return dev if dev is not None else _devs.default_device()
    except Exception:                 # (an error message must not fail to be made)
        return None


def _attr_ok(op, name, kind, inputs, value):
    try:
        _shapes.check_attrs(_OneAttr(op.name, name, kind), inputs, {name: value})
    except OpError:
        return False
    return True


def attr_error(op, inputs, attrs, error, device=None):
    """``error``, raised by the attr validation of ``op``, completed with the device the
    op runs on (``device``, or where dispatch would place it) and what to do."""
    if not isinstance(inputs, (list, tuple)):
        inputs = (inputs,)
    elif op.variadic and len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    for name, kind in op.attr_types.items():
        v = attrs.get(name)
        if _attr_ok(op, name, kind, inputs, v):
            continue
        if not isinstance(v, (Tensor, VariableBase, np.ndarray)):  # (that one says what to do)
            default = op.attrs.get(name)
            error.message += f"; pass such a value as {name}"
            if default is not None and default is not REQUIRED and _attr_ok(
                    op, name, kind, inputs, default):
                error.message += f" (the default is {default!r})"
        break
    return error.with_context(op.name, device if device is not None else _placement(inputs))


def validate_attrs(op, inputs, attrs, device=None):
    """Validate ``attrs`` against ``op.attr_types`` (see OpDef): the error names the op,
    the device, the attr, the value received, the kind expected and what to do."""
    try:
        _shapes.check_attrs(op, inputs, attrs)
    except OpError as e:
        raise attr_error(op, inputs, attrs, e, device) from None


def _validate_after_check(op, tensors, attrs, device):
    """The attr validation of an op whose own check ran first (see
    ``OpDef._attrs_after_check``): tensors and arrays are errors; a value of another
    kind than its default's, which the check accepted, warns."""
    for name, kind in op.attr_types.items():
        one = _OneAttr(op.name, name, kind)
        try:
            _shapes.check_attrs(one, tensors, attrs)
        except OpError as e:
            v = attrs.get(name)
            if isinstance(v, (Tensor, VariableBase, np.ndarray)):
                raise attr_error(op, tensors, attrs, e, device) from None
            warnings.warn(
                f"{op.name}: attr '{name}' got {type(v).__name__} {v!r}, which the op's check "
                f"accepts but the kind read from its default ({kind}) does not. tapeflow 0.3 "
                f"refuses it: its author declares attr_types={{{name!r}: ...}} (\"any\" "
                "to keep the check in charge; docs/plugins.md, \"What the plugin API "
                f"promises\") [Op:{op.name}] on {device}", DeprecationWarning,
                stacklevel=6)        # (the op's caller: check, _run, execute, the op's function)


def refresh_fast(op, device_type):
    """Rebuild ``op.fast[device_type]``: the dtype -> fn table the hot path reads."""
    entry = op.kernels.get(device_type)
    if speedups is not None:
        speedups.kernels_changed()           # (the C core's cache of kernels)
    if (entry is None or entry.needs_device or op.dtype_from != 0 or op.variadic
            or op.check is not None):
        op.fast.pop(device_type, None)
        return
    dts = entry.dtypes if entry.dtypes is not None else _dt.ALL_DTYPES
    var = entry.variants or {}
    op.fast[device_type] = {d.np: var.get(d.np, entry.fn) for d in dts}


def kernel_not_found(op: OpDef, device, dtype) -> NotFoundError:
    regs = "; ".join(e.describe() for e in op.kernels.values()) or "none"
    dname = _dt.as_dtype(dtype).name
    own = op.kernels.get(device.type)
    if own is not None and own.dtypes and (dname == "string") != (_dt.string in own.dtypes):
        # strings and numbers never convert: a type error as in TensorFlow, not a missing kernel
        return InvalidArgumentError(f"Value for attr 'T' of {dname} is not in the list of allowed "
                                    f"values: {', '.join(d.name for d in own.dtypes)} (tf.strings "
                                    "has the ops on text)", op=op.name, device=device)
    hint = ("" if op.kernels else " The op has no kernels: is the backend that provides it "
            "installed and loaded (python -m tapeflow info)?")
    return NotFoundError(
        f"No kernel for op {op.name} on device type '{device.type}' with dtype {dname}. "
        f"Registered kernels: {regs}.{hint}", op=op.name, device=device)
