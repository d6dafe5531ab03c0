#!/usr/bin/env python
"""The ratio benchmarks over the last N commits of main, recorded with asv, and the
published page.

    .venv/bin/python scripts/bench_history.py 5            # last 5 commits of main + publish
    .venv/bin/python scripts/bench_history.py 3 --devices cpu:0 --no-publish
    .venv/bin/python scripts/bench_history.py 1 --rev HEAD  # one commit (the reference run)
    .venv/bin/python scripts/bench_history.py 0 --dump      # publish what is recorded, as text
    (cd asv_bench && ../.venv/bin/asv preview)             # serve asv_bench/html/

For each commit (oldest first) the script exports the commit's ``core/``, ``backends/``
and ``plugins/`` with ``git archive`` into a temporary directory and runs ``asv run
--python=same --set-commit-hash <commit> -b bench_ratios`` in the environment asv already
has (``environment_type: existing``, the project's ``.venv``), with ``ASV_PYTHONPATH``
(asv drops ``PYTHONPATH`` and passes this one on) pointing at the export, so the
benchmark processes import that commit's tapeflow; ``TAPEFLOW_EXPECT_ROOT`` makes every
ratio benchmark check that they do (else it fails). The benchmark code itself is the
working tree's (asv always runs the current ``asv_bench/benchmarks``), as the gate does.

Why not ``asv run -E virtualenv:3.11 main~N..main``: asv would build a virtualenv and
pip-install every commit (NumPy, SciPy, PyOpenCL, PoCL, the four distributions) --
minutes per commit and PyPI on the first run; exporting the sources into the one
environment that has everything costs a second per commit and works offline. The
absolute-time benchmarks are not rerun per commit (``--bench`` to choose others).

Results go to ``asv_bench/results/<machine>/`` (the committed reference results are the
``dev-2core`` machine's: commit them after a run on the reference machine), then ``asv
publish`` writes ``asv_bench/html/`` (a graph per benchmark, one line per device);
``scripts/asv_offline.py`` then serves the page's scripts and styles from
``html/vendor/`` (asv's page loads them from CDNs; the copies are committed in
``asv_bench/vendor/``, pinned by version and sha256), so the page works without network,
and ``scripts/bench_charts.py`` draws a PNG per ratio benchmark in ``html/charts/`` (the
ratio over commits, a line per device; needs matplotlib, else skipped with a message).
BLAS/OpenMP run one thread (``--threads``), as in ``scripts/bench_check.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_bench"
PACKAGE_DIRS = ("core", "backends/cpu_numpy", "backends/opencl", "backends/cuda_cupy",
                "plugins/gelu")


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commits(n, branch="main"):
    """The last ``n`` commits of ``branch`` (first-parent), oldest first; of HEAD in a
    clone without that branch."""
    try:
        out = git("rev-list", "--first-parent", "-n", str(n), branch)
    except subprocess.CalledProcessError:
        out = git("rev-list", "--first-parent", "-n", str(n), "HEAD")
    return list(reversed(out.split()))


def export(rev, dest):
    have = [d for d in PACKAGE_DIRS
            if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{d}"],
                              capture_output=True).returncode == 0]
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, *have],
                          check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
    return [str(Path(dest) / d) for d in have]


def asv_cmd(config):
    cmd = [sys.executable, "-m", "asv"]
    return cmd + (["--config", str(config)] if config else [])


def selection(bench, devices):
    """asv -b regexes: the benchmarks ``bench`` on the parameter sets of ``devices``."""
    if not devices:
        return ["-b", bench]
    out = []
    for d in devices.split(","):
        out += ["-b", f"{bench}.*\\('{d}'[,)]"]
    return out


def run_commit(sha, machine, bench, devices, config=None, threads=1, cwd=ASV_DIR, log=print):
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        tree = Path(tmp).resolve()
        paths = export(sha, tree)
        env = dict(os.environ)
        env["ASV_PYTHONPATH"] = os.pathsep.join(paths)
        env["TAPEFLOW_EXPECT_ROOT"] = str(tree)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        if threads:
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                env[var] = str(threads)
        cmd = asv_cmd(config) + ["run", "--python=same", "--set-commit-hash", sha,
                                 "--machine", machine, "--show-stderr",
                                 *selection(bench, devices)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        out = proc.stdout + proc.stderr
        failed = proc.returncode != 0 or "Traceback (most recent call last)" in out
        log(f"  {sha[:10]} {git('log', '-1', '--format=%s', sha)[:60]}: "
            f"{'FAILED' if failed else 'ok'} ({time.perf_counter() - t0:.0f} s)")
        return failed, out


def ensure_machine(machine, config=None, cwd=ASV_DIR):
    """asv needs the machine in ~/.asv-machine.json; add it (asv machine --yes) if absent.
    Only its name is recorded (asv's default with ``--machine``): every result of the
    reference machine then carries the same parameters, and asv's page shows them as one
    configuration (a result recorded with the kernel version, CPU and RAM as well showed
    up as a second one, with no ratio benchmarks in its benchmark list)."""
    subprocess.run(asv_cmd(config) + ["machine", "--yes", "--machine", machine], cwd=cwd,
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)


def _sibling(name):
    """A module of scripts/ (this file is also loaded by path, without scripts/ on
    sys.path: tests/test_bench_history.py)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(name + ".py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def publish(config=None, cwd=ASV_DIR, machine="dev-2core", log=None):
    """``asv publish``, then the page made to work offline (``scripts/asv_offline.py``:
    asv's CDN scripts and styles served from ``html/vendor/``) and a PNG per ratio
    benchmark in ``html/charts/`` (when matplotlib is installed; else ``log`` says so).
    Returns asv's output. RuntimeError when asv fails or when asv's page loads a URL
    ``asv_bench/vendor/vendor.json`` does not map (the message lists them)."""
    proc = subprocess.run(asv_cmd(config) + ["publish"], cwd=cwd, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"asv publish failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    offline = _sibling("asv_offline")
    html = Path(cwd) / "html"
    try:
        offline.apply(html)
    except offline.OfflineError as e:
        raise RuntimeError(f"asv publish wrote {html}, but it needs network: {e}") from None
    charts(html, machine, log=log)
    return proc.stdout


def charts(html, machine="dev-2core", log=None):
    """A PNG per ratio benchmark (ratio over commits, a line per device) in
    ``html/charts/``; None (said through ``log``) without matplotlib."""
    draw = _sibling("bench_charts")
    reason = draw.missing()
    if reason:
        if log:
            log(f"bench-history: {reason}")
        return None
    out = draw.history_charts(history(html, machine), Path(html) / "charts")
    if log:
        log(f"bench-history: {len(out)} chart(s) in {Path(html) / 'charts'}")
    return out


def history(html, machine="dev-2core", prefix="bench_ratios."):
    """What the published page plots, per benchmark: ``[{"name", "unit", "graph",
    "commits": [sha, ...] (oldest first), "devices": {device: [value or None, ...]}}]``,
    read from the graphs' JSON under ``html/graphs/`` (branch main, ``machine``); a
    benchmark without a graph has no "graph" and no commits."""
    html = Path(html)
    index = json.loads((html / "index.json").read_text())
    hashes = {int(r): h for r, h in index["revision_to_hash"].items()}
    out = []
    for name, meta in sorted(index["benchmarks"].items()):
        if not name.startswith(prefix):
            continue
        devices = [p.strip("'") for p in meta["params"][0]] if meta["params"] else [""]
        bench = {"name": name, "unit": meta.get("unit"), "commits": [],
                 "devices": {d: [] for d in devices}}
        out.append(bench)
        graphs = [g for g in (html / "graphs").glob(f"**/{name}.json")
                  if "branch-main" in g.parts and f"machine-{machine}" in g.parts]
        if not graphs:
            continue
        bench["graph"] = str(graphs[0].relative_to(html))
        for rev, v in json.loads(graphs[0].read_text()):
            bench["commits"].append(hashes.get(rev, str(rev)))
            for i, dev in enumerate(devices):
                bench["devices"][dev].append(v[i] if isinstance(v, list) else v)
    return out


def dump(html, machine="dev-2core", prefix="bench_ratios."):
    """The published page as text: per ratio benchmark and device, the value at each
    commit (oldest first), read from the graphs' JSON that the page plots."""
    lines = []
    for b in history(html, machine, prefix):
        if "graph" not in b:
            lines.append(f"{b['name']}: no graph")
            continue
        lines.append(f"{b['name']} ({b['unit']}), graph {b['graph']}")
        for dev, values in b["devices"].items():
            vals = [f"{sha[:8]} " + ("n/a" if x is None else f"{x:.3f}")
                    for sha, x in zip(b["commits"], values)]
            lines.append(f"  {dev:9s} " + "   ".join(vals))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int, help="how many of main's last commits")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--rev", help="run this one commit instead of the last N")
    ap.add_argument("--machine", default="dev-2core",
                    help="asv machine name (the committed reference results: dev-2core)")
    ap.add_argument("--bench", default="bench_ratios", help="asv -b regex (default: the "
                    "ratio benchmarks)")
    ap.add_argument("--devices", help="only these devices' parameter sets, e.g. cpu:0,opencl:0")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", help="another asv.conf.json (tests use a temporary one)")
    ap.add_argument("--no-publish", action="store_true")
    ap.add_argument("--dump", action="store_true",
                    help="print the published page as text (each ratio per device and commit)")
    args = ap.parse_args(argv)
    cwd = Path(args.config).parent if args.config else ASV_DIR
    shas = [] if args.n == 0 else (
        [git("rev-parse", args.rev)] if args.rev else commits(args.n, args.branch))
    print(f"bench-history: {len(shas)} commit(s) of {args.branch}, machine {args.machine}, "
          f"benchmarks {args.bench}", flush=True)
    ensure_machine(args.machine, args.config, cwd)
    bad = []
    for sha in shas:
        failed, out = run_commit(sha, args.machine, args.bench, args.devices, args.config,
                                 args.threads, cwd, log=lambda m: print(m, flush=True))
        if failed:
            bad.append(sha[:10])
            print("\n".join(out.splitlines()[-40:]))
    if not args.no_publish:
        try:
            publish(args.config, cwd, args.machine, log=lambda m: print(m, flush=True))
        except RuntimeError as e:
            print(f"bench-history: {e}", file=sys.stderr)
            return 2
        print(f"bench-history: published {cwd / 'html'}, offline (scripts and styles in "
              f"html/vendor/); 'asv preview' in {cwd} serves it")
    if args.dump:
        print(dump(cwd / "html", args.machine))
    if bad:
        print(f"bench-history: asv reported failures for {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
