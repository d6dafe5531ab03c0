"""Which devices and kernels a conformance case can use: the devices this
installation knows of but cannot use (with the reason), the kernel of a spec's op
on a device type, and why an op cannot run on a device at all."""

from __future__ import annotations

from ... import plugins
from ...runtime.devices import table
from ...runtime.registry import OPS
from ._common import SkipCase


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


def _op_kernel(spec, device_type):
    """(OpDef or None, KernelEntry or None); SkipCase when spec.op is not registered."""
    if not spec.op:
        return None, None
    op = OPS.get(spec.op)
    if op is None:
        raise SkipCase(f"op {spec.op!r} is not registered (is the plugin that defines it "
                       "loaded? see python -m tapeflow info)")
    return op, op.kernels.get(device_type)


def _missing_kernel(op, dev):
    """Why ``op`` cannot run on ``dev`` at all (no kernel for its device type and no
    composite), or None."""
    if op is None or dev.type in op.kernels or op.composite is not None:
        return None
    have = "; ".join(e.describe() for e in op.kernels.values()) or "none"
    return (f"no kernel for op {op.name} on device type '{dev.type}' and no composite "
            f"implementation (registered kernels: {have})")
