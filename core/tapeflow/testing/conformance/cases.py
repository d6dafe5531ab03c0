"""Cases: one :class:`Case` per test item (kind of check x spec x device, and dtype
for the forward kinds), which cases a spec gets on a device (skips and failures
known at collection included), and :func:`check_spec`, every case of one spec."""

from __future__ import annotations

from ._common import SkipCase, _glob, _tf
from .devices import _missing_kernel
from .eager import check_errors, check_forward, check_gradients
from .layouts import _has_nc
from .samples import dtypes_under_test, samples_for
from .traced import _traced_dtypes_mode, check_traced


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
