"""The suite: the devices under test (every available device, and the well-known
ones this installation cannot use, with the reason), one :class:`Case` per test item
(kind of check x spec x device, and dtype for the forward kinds), which cases a spec
gets on a device (skips and failures known at collection included),
:func:`check_spec` (every case of one spec) and :func:`opcheck`, the one call for
plugin authors: an op (an OpSpec, an OpDef or a function built on tapeflow ops) on
every available device, with samples cast to every dtype its kernels declare and 0-d
and empty edge samples."""

from __future__ import annotations

import dataclasses
import os
import weakref

import numpy as np

from ... import plugins
from ...errors import TapeflowError
from ...runtime.devices import table
from ...runtime.registry import OPS, OpDef
from ..specs import OpSpec, Sample
from .checks import _traced_dtypes_mode, check_errors, check_forward, check_gradients, check_traced
from .samples import SkipCase, _glob, _has_nc, _missing_kernel, _tf, dtypes_under_test, samples_for


# --- the devices under test ---------------------------------------------------------------

#: device types any tapeflow installation may know of, and the distribution that
#: provides each; when absent they are reported (and their tests skipped) with the reason
KNOWN_DEVICE_TYPES = {"cuda": "tapeflow-cuda-cupy", "opencl": "tapeflow-opencl"}


def unavailable_devices() -> dict:
    """``{device name: reason}`` for devices this installation knows of but cannot use:
    devices of backends that report themselves unavailable, and the well-known
    device types (:data:`KNOWN_DEVICE_TYPES`) no loaded backend provides."""
    have = {d.type for d in table.by_name.values()}
    out = {}
    for be in table.backends:
        reason = table.unavailable.get(be.name)
        if reason and be.device_type not in have:
            out.setdefault(f"{be.device_type}:0", f"backend {be.name!r} is unavailable: {reason}")
    report = plugins.plugin_report()
    for typ, dist in KNOWN_DEVICE_TYPES.items():
        name = f"{typ}:0"
        if typ in have or name in out:
            continue
        bad = [p for p in report if p.distribution == dist and p.status != "loaded"]
        if bad:
            p = bad[0]
            out[name] = f"plugin {p.name!r} ({p.distribution} {p.version}) {p.status}: {p.reason}"
        else:
            out[name] = (f"no installed backend provides device type '{typ}' "
                         f"(pip install {dist})")
    return out


def resolve_devices(names=None) -> list:
    """``[(device name, None)]`` for usable devices and ``[(name, reason)]`` for the
    others, for the given names (``None``/``"all"``: every available device plus the
    well-known ones of :func:`unavailable_devices`, which become skips naming why). A
    name no device can have is a ``pytest.UsageError`` (``--tapeflow-device``)."""
    tf = _tf()
    if not names:
        names = ["all"]
    out, seen = [], set()
    absent = unavailable_devices()

    def add(name, reason):
        if name not in seen:
            seen.add(name)
            out.append((name, reason))

    for raw in names:
        for spec in (s.strip() for s in str(raw).split(",")):
            if not spec:
                continue
            if spec.lower() == "all":
                for d in tf.list_devices():
                    add(d.name, None)
                for name, reason in absent.items():
                    add(name, reason)
                continue
            try:
                add(tf.runtime.devices.get_device(spec).name, None)
            except TapeflowError as e:
                try:
                    name = tf.runtime.devices.canonical_name(spec)
                except TapeflowError:
                    import pytest       # (only a test session names its devices so)
                    raise pytest.UsageError(f"--tapeflow-device: {e}") from None
                reason = absent.get(name)
                if reason is None and name.startswith("gpu:"):
                    reason = f"no GPU device {name} (tapeflow.num_gpus() == {tf.num_gpus()})"
                add(name, reason or f"device {name} is not available: {e}")
    return out


#: the devices each pytest session (its config) chose, computed once per session
_CHOSEN: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def devices_under_test(config=None) -> list:
    """The devices chosen for this pytest session (``--tapeflow-device``, else the
    environment variable ``TAPEFLOW_TEST_DEVICES``, else ``all``), as
    :func:`resolve_devices` returns them; computed once per session (``config``)."""
    if config is None:
        return resolve_devices(_env_devices())
    cached = _CHOSEN.get(config)
    if cached is None:
        try:
            opt = config.getoption("tapeflow_device")
        except ValueError:
            opt = None
        cached = _CHOSEN[config] = resolve_devices(opt or _env_devices())
    return cached


def _env_devices():
    env = os.environ.get("TAPEFLOW_TEST_DEVICES", "").strip()
    return [env] if env else None


# --- cases --------------------------------------------------------------------------------

class Case:
    """One test item: ``kind`` of check for ``spec`` on ``device`` (and ``dtype``)."""

    __slots__ = ("kind", "spec", "device", "dtype", "skip", "fail")

    def __init__(self, kind, spec, device, dtype=None, skip=None, fail=None):
        self.kind = kind
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.skip = skip        # reason to skip, or None
        self.fail = fail        # a failure known at collection (no kernel), or None

    @property
    def id(self):
        parts = [] if self.spec is None else [self.spec.name]
        if self.dtype is not None:
            parts.append(getattr(self.dtype, "name", str(self.dtype)))
        parts.append(self.device)
        return "-".join(parts)

    def __repr__(self):
        return f"<Case {self.kind}[{self.id}]{' skip' if self.skip else ''}>"

    def check(self):
        """Run the check (AssertionError on failure, SkipCase when not applicable)."""
        if self.skip:
            raise SkipCase(self.skip)
        if self.fail:
            raise AssertionError(self.fail)
        if self.kind == "forward":
            return check_forward(self.spec, self.device, self.dtype)
        if self.kind == "noncontiguous":
            return check_forward(self.spec, self.device, self.dtype, noncontiguous=True)
        if self.kind == "gradients":
            return check_gradients(self.spec, self.device)
        if self.kind == "errors":
            return check_errors(self.spec, self.device)
        if self.kind == "traced":
            return check_traced(self.spec, self.device, self.dtype)
        raise ValueError(f"unknown case kind {self.kind!r}")

    def run(self):
        """pytest entry: :meth:`check`, with SkipCase turned into ``pytest.skip``."""
        import pytest
        try:
            return self.check()
        except SkipCase as e:
            pytest.skip(str(e))


def _spec_skip(spec, kind, dtype_name, device_type, case_id):
    for key, reason in (spec.skip or {}).items():
        if key in (kind, dtype_name, device_type) or _glob(key).fullmatch(case_id):
            return f"skipped by spec {spec.name}: {reason}"
    return None


def cases(specs, devices, kind, missing_kernels="fail"):
    """The cases of ``kind`` for ``specs`` on ``devices``.

    ``devices``: names of available devices, or ``(name, skip_reason)`` pairs
    (an unavailable device gets one skipped case per kind). ``missing_kernels``: what a
    device type with no kernel (and no composite) for the spec's op gets: ``"fail"``
    (one failing forward case: a backend's conformance) or ``"skip"`` (one skipped case
    naming the kernels there are: :func:`opcheck` on every available device, where a
    plugin's op need not run everywhere).
    """
    tf = _tf()
    out = []
    for d in devices:
        name, reason = (d, None) if isinstance(d, str) else d
        if reason is not None:
            out.append(Case(kind, None, name, skip=f"{name} unavailable: {reason}"))
            continue
        dev = tf.runtime.devices.get_device(name)
        for spec in specs:
            out.extend(_spec_cases(spec, dev, kind, missing_kernels))
    return out


def _spec_cases(spec, dev, kind, missing_kernels="fail"):
    tf = _tf()
    try:
        dts, explicit, excluded = dtypes_under_test(spec, dev.type)
    except SkipCase as e:
        return [Case(kind, spec, dev.name, skip=str(e))]
    res = []
    op = _tf().runtime.registry.OPS.get(spec.op) if spec.op else None
    missing = _missing_kernel(op, dev)
    if missing and missing_kernels == "skip":
        res.append(Case(kind, spec, dev.name, skip=f"{missing}: not tested on {dev.name}"))
    elif missing:
        # Nothing declared here: one failing case says so (a backend that lacks the
        # kernel on purpose declares a known gap, e.g. "*[exp-opencl:*]").
        if kind == "forward":
            res.append(Case(kind, spec, dev.name, fail=(
                f"{missing}; register one, or declare a known gap (tapeflow_known_gaps "
                "hook)")))
        elif kind in ("noncontiguous", "traced"):
            pass          # the forward case reports the missing kernel
        elif (kind == "gradients" and spec.grad_order > 0) or (kind == "errors" and spec.errors):
            res.append(Case(kind, spec, dev.name))
    elif kind in ("forward", "noncontiguous", "traced"):
        for name, why in excluded.items():
            if kind == "forward":
                res.append(Case(kind, spec, dev.name, tf.as_dtype(name), skip=why))
        for dt in dts:
            why = dev.backend.dtype_unsupported(dev, dt)
            if why:
                if kind == "forward":
                    res.append(Case(kind, spec, dev.name, dt, skip=why))
                continue
            try:
                smp = samples_for(spec, dt)
            except Exception:  # a broken spec fails its own test, not the collection
                res.append(Case(kind, spec, dev.name, dt))
                continue
            if not smp:
                if explicit and kind == "forward":
                    res.append(Case(kind, spec, dev.name, dt,
                                    skip=f"spec {spec.name} has no samples for {dt.name}, which "
                                         f"the {spec.op or 'spec'} kernel on '{dev.type}' "
                                         "declares"))
                continue
            if kind == "noncontiguous" and not any(_has_nc(s) for s in smp):
                continue
            res.append(Case(kind, spec, dev.name, dt))
    elif kind == "gradients":
        if spec.grad_order > 0:
            res.append(Case(kind, spec, dev.name))
    elif kind == "errors":
        if spec.errors:
            res.append(Case(kind, spec, dev.name))
    else:
        raise ValueError(f"unknown case kind {kind!r}")
    for c in res:
        if c.skip is None:
            c.skip = _spec_skip(spec, kind, getattr(c.dtype, "name", None), dev.type, c.id)
    if kind == "traced" and len(res) > 1 and _traced_dtypes_mode() == "one":
        run = [c for c in res if c.skip is None] or res
        res = [next((c for c in run if c.dtype == tf.float32), run[0])]
    return res


def check_spec(spec, devices=None,
               kinds=("forward", "noncontiguous", "gradients", "errors", "traced")):
    """Run every case of ``spec`` on ``devices`` (default: every available device,
    skipping, with the reason, those whose device type has no kernel for the op; a
    device named in ``devices`` without one fails); collect all failures into one
    AssertionError. Returns ``{"passed": [...], "skipped": [(case id, reason)]}``
    otherwise."""
    tf = _tf()
    missing = "skip" if devices is None else "fail"
    devices = [d.name for d in tf.list_devices()] if devices is None else list(devices)
    passed, skipped, failed = [], [], []
    for kind in kinds:
        for c in cases([spec], devices, kind, missing):
            label = f"{kind}[{c.id}]"
            try:
                c.check()
            except SkipCase as e:
                skipped.append((label, str(e)))
            except AssertionError as e:
                failed.append(f"{label}: {e}")
            except Exception as e:
                notes = "".join(f"\n  {n}" for n in getattr(e, "__notes__", ()))
                failed.append(f"{label}: raised {type(e).__name__}: {e}{notes}")
            else:
                passed.append(label)
    if failed:
        raise AssertionError(f"{len(failed)} conformance check(s) of {spec.name} failed:\n\n"
                             + "\n\n".join(failed))
    return {"passed": passed, "skipped": skipped}


# --- opcheck ------------------------------------------------------------------------------

def _values_as(a, dtype):
    """Float sample values ``a`` as integer or bool values of ``dtype`` (a DType): bool
    from ``a > 0``; integers rounded (absolute values for unsigned dtypes), NaN as 0,
    clipped to the dtype's range."""
    if dtype.is_bool:
        return a > 0
    info = np.iinfo(dtype.np)
    lo, hi = float(info.min), float(info.max)
    if int(hi) > info.max:                      # (int64: the float rounds up past the max)
        hi = float(np.nextafter(hi, 0.0))
    with np.errstate(all="ignore"):
        v = np.nan_to_num(np.asarray(a, np.float64), nan=0.0, posinf=hi, neginf=lo)
        if dtype.is_unsigned:
            v = np.abs(v)
        return np.clip(np.round(v), lo, hi).astype(dtype.np)


def _fixed_samples(samples, declared=()):
    """A list of Samples (or argument tuples) -> ``samples(dtype, rng)``: float array
    arguments are cast to each float dtype, and to each integer and bool dtype in
    ``declared`` (declared by the op's kernels or by ``opcheck(dtypes=)``) with
    :func:`_values_as`; samples without float arrays run for the dtype of their first
    array. Gradients are checked in float64 only, so never for the integer and bool
    samples."""
    fixed = [s if isinstance(s, Sample) else Sample(tuple(s) if isinstance(s, (list, tuple))
                                                   else (s,)) for s in samples]
    declared = tuple(declared)

    def gen(dtype, rng):
        out = []
        for s in fixed:
            arrays = [a for a in s.args if isinstance(a, np.ndarray)]
            has_float = any(a.dtype.kind == "f" for a in arrays)
            if has_float and (dtype.is_floating or dtype in declared):
                cast = ((lambda a: a.astype(dtype.np)) if dtype.is_floating
                        else (lambda a: _values_as(a, dtype)))
                args = tuple(cast(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                             else a for a in s.args)
                out.append(dataclasses.replace(s, args=args, kwargs=dict(s.kwargs)))
            elif not has_float and arrays and arrays[0].dtype == dtype.np:
                out.append(s)
        return out

    return gen


def _declared_dtypes(op_name, dtypes):
    """The dtypes declared for the op: ``dtypes`` when given, else every dtype its
    kernels declare (those declaring "any dtype" add none)."""
    tf = _tf()
    if dtypes is not None:
        return {tf.as_dtype(d) for d in dtypes}
    opdef = OPS.get(op_name) if op_name else None
    out = set()
    for entry in (opdef.kernels.values() if opdef is not None else ()):
        out.update(entry.dtypes or ())
    return out


def _empty_shapes(shapes):
    """Shapes of size 0, one per input shape, that still broadcast together: axis 0 of
    the broadcast shape becomes 0 (inputs of lower rank, or with a 1 there that is
    broadcast, keep theirs); 0-d inputs together become ``(0,)``."""
    try:
        b = np.broadcast_shapes(*shapes)
    except ValueError:                # not broadcastable: axis 0 of each
        return [(0,) + tuple(s[1:]) for s in shapes]
    if not b:
        return [(0,)] * len(shapes)
    return [(0,) + tuple(s[1:]) if len(s) == len(b) and (s[0] == b[0] or b[0] == 1)
            else tuple(s) for s in shapes]


def edge_samples(sample, index=0):
    """A 0-d and an empty (size-0) sample derived from ``sample`` (the ``index``-th):
    every NumPy array argument becomes its first element as a 0-d array, then an
    empty array (:func:`_empty_shapes`: the inputs still broadcast together); other
    arguments and the keywords are kept. The empty sample checks no gradients. For
    ops that compute each output element from the matching input elements (see
    :func:`opcheck`'s ``edge_cases``)."""
    arrays = [a for a in sample.args if isinstance(a, np.ndarray)]
    if not arrays:
        return []
    src = f"sample {index}{f' {sample.name!r}' if sample.name else ''}"
    out = []
    if all(a.size for a in arrays):
        args = tuple(np.array(a.reshape(-1)[0]) if isinstance(a, np.ndarray) else a
                     for a in sample.args)
        out.append(dataclasses.replace(sample, args=args, name=f"0-d, from {src}"))
    shapes = iter(_empty_shapes([a.shape for a in arrays]))
    args = tuple(np.zeros(next(shapes), a.dtype) if isinstance(a, np.ndarray) else a
                 for a in sample.args)
    out.append(dataclasses.replace(sample, args=args, grad_argnums=(),
                                   name=f"empty, from {src}"))
    return out


def _with_edge_cases(gen):
    """``samples(dtype, rng)`` plus :func:`edge_samples` of its first sample."""
    def samples(dtype, rng):
        base = list(gen(dtype, rng) or [])
        return base + edge_samples(base[0]) if base else base
    samples.__name__ = getattr(gen, "__name__", "samples")
    return samples


def opcheck(spec_or_fn, samples=None, *, ref=None, check=None, errors=(), op=None, name=None,
            dtypes=None, grad_order=2, tol=None, grad_tol=(1e-4, 1e-5), devices=None,
            check_dtype=True, edge_cases=None,
            kinds=("forward", "noncontiguous", "gradients", "errors", "traced")):
    """Check an op in one call, on every available device: forward against a NumPy
    reference for every dtype, non-contiguous inputs, gradients to ``grad_order``
    (float64, finite differences), the error contract, and the op inside
    :func:`tapeflow.function` (traced, replayed, replayed with other values).

    What runs:

    * **dtypes**: every dtype the op's kernel on the device declares (``op``), or
      ``dtypes``. A list of samples is cast to each: float arrays to the float dtypes,
      and, for integer and bool dtypes the kernels (or ``dtypes``) declare, to rounded
      integers (clipped to the dtype's range, absolute values for unsigned) and to
      ``x > 0`` for bool. A ``samples`` function decides for itself: it receives each
      dtype as a tapeflow ``DType`` (``dtype.np`` is its NumPy dtype, and NumPy accepts
      the DType itself: ``np.ones(3, dtype)``) and returns ``[]`` for dtypes it has no
      samples for. Gradients are checked in float64 only, never for integer or bool.
    * **non-contiguous inputs** (:data:`LAYOUTS`), each sample with an array argument
      of rank >= 1 once per layout: an ``"offset view"`` (the data does not start at
      its buffer's first element), ``"transposed"`` (rank >= 2: memory order is not
      index order, and strided) and ``"broadcast (stride 0)"`` (axis 0 has stride 0;
      the values are the sample's first slice along axis 0 repeated, and the
      reference gets the same; not for random ops, whose ``check`` needs distinct
      values). A failure names the layout; a layout a device cannot hold is skipped.
    * **edge cases**: a 0-d and an empty (size-0) sample derived from the first sample
      of each dtype (:func:`edge_samples`), when ``edge_cases`` is True, or when it is
      None (the default) and the op is declared ``elementwise=True`` (every output
      element computed from the matching, broadcast, input elements: such an op accepts
      any shape). Ops that are only ``broadcast=True`` (MatMul broadcasts its batch
      dimensions but needs rank 2) get none unless asked.
    * **references** may compute in any precision and return any array-like: a float
      reference more precise than the case dtype (float64 for a float32 op) is rounded
      to it, Python values take the result's dtype (:func:`reference_as_result`);
      tolerances are those of the case dtype (:data:`DEFAULT_TOL`, ``tol``).
    * **errors**: each :class:`ErrorSample` must raise its error type with ``[Op:``
      and the device name in the message, and ``match``, a regular expression, found
      in it (``re.search``, as ``pytest.raises(match=)``).

    Args:
        spec_or_fn: an :class:`OpSpec` (the other arguments are then ignored, except
            ``edge_cases=True``), an :class:`~tapeflow.plugins.OpDef` (called with its
            attrs as keywords), or a function built on tapeflow ops (an op's public
            function from ``@lib.op`` carries its OpDef).
        samples: ``samples(dtype, rng) -> [Sample]`` (``dtype``: a tapeflow DType,
            ``rng``: a seeded ``numpy.random.Generator``), or a list of Samples (or of
            argument tuples), whose float arrays are cast to each dtype tested.
        ref: NumPy reference ``ref(*numpy_args, **kwargs)``; or ``check(out, *args,
            **kwargs)`` validating the (host) output of a random op.
        errors: :class:`ErrorSample` s, each must raise with ``[Op:``, the device
            name and a match of the regular expression ``match`` in the message.
        op: the op name whose kernel dtypes decide which dtypes are tested
            (default: the OpDef's name, else every dtype the samples provide).
        dtypes: dtype names to test instead of the kernels' (intersected with them).
        devices: device names (default: every available device).
        edge_cases: add 0-d and empty samples (None: when the op is elementwise).

    Returns ``{"passed": [...], "skipped": [(check, reason)]}``; raises AssertionError
    listing every failed check.

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import opcheck, Sample
    >>> report = opcheck(tf.multiply, [Sample((np.ones((2, 3)), np.arange(3.0)))], ref=np.multiply)
    >>> "gradients[multiply-cpu:0]" in report["passed"]
    True
    """
    if isinstance(spec_or_fn, OpSpec):
        spec = spec_or_fn
        if edge_cases:
            spec = dataclasses.replace(spec, samples=_with_edge_cases(spec.samples))
    else:
        fn = spec_or_fn
        if isinstance(fn, OpDef):
            op = op or fn.name
        elif isinstance(getattr(fn, "op", None), OpDef):      # a Library op function
            op = op or fn.op.name
        if samples is None:
            raise TypeError("opcheck needs samples (a list of Samples or samples(dtype, rng))")
        gen = (samples if callable(samples)
               else _fixed_samples(samples, _declared_dtypes(op, dtypes)))
        if edge_cases is None:
            opdef = OPS.get(op) if op else None
            edge_cases = bool(opdef is not None and opdef.elementwise)
        if edge_cases:
            gen = _with_edge_cases(gen)
        if ref is None and check is None:
            kinds = tuple(k for k in kinds if k not in ("forward", "noncontiguous", "traced"))
        if name is None:
            name = fn.name if isinstance(fn, OpDef) else getattr(fn, "__name__", "op")
        spec = OpSpec(name=name, fn=fn, ref=ref, samples=gen, op=op or "", dtypes=dtypes,
                      grad_order=grad_order, errors=list(errors), tol=dict(tol or {}),
                      grad_tol=tuple(grad_tol), check=check, check_dtype=check_dtype)
    return check_spec(spec, devices=devices, kinds=kinds)
