#!/usr/bin/env python
"""The performance regression gate: the working tree against the last commit of main,
on the ratio benchmarks (``benchmarks/ratio_cases.py``), with a significance test.

    .venv/bin/python scripts/bench_check.py --quick        # the test command's run, <= ~3 min
    .venv/bin/python scripts/bench_check.py                # more rounds, cpu:0 and opencl:0
    .venv/bin/python scripts/bench_check.py --base HEAD~3 --cases dispatch_add,mlp_step
    .venv/bin/python scripts/bench_check.py --after /tmp/other-tree   # any checkout as "after"

How it measures. The base commit (``--base``; default: the last commit of main with
uncommitted changes, else -- a clean checkout, as CI's -- the newest commit at least 6
hours older than HEAD, main before the work being submitted; see ``base_commit``) is
exported with ``git archive`` into a temporary directory, its C core built there as an
install builds it (``build_native``); each side runs in its own
process with ``PYTHONPATH`` pointing at that side's ``core/``, ``backends/*`` and
``plugins/gelu`` (the process checks that tapeflow really comes from there, else the
gate fails), and the same harness (``benchmarks/ratio_cases.py`` of the working tree).
Processes alternate before/after/after/before/... (``--pairs`` pairs), so slow drifts
of the machine hit both sides alike; inside each process every case times tapeflow and
its peer interleaved, ``--rounds`` paired rounds, giving per-round ``tapeflow / peer``
ratios. ``--quick`` (the test command's run): cpu:0, every case but the CNN against
PyTorch, 3 pairs of 9 rounds, but no more
than fits in ~165 s (at least 2 pairs: on a heavily loaded machine the third is
dropped). BLAS and OpenMP run one thread in both sides' processes (two-thread pools on a
2-core machine shared with other jobs are the largest source of noise).

The test. For each case and device the per-round ratios of all "after" processes are
compared with those of all "before" processes: ``change`` is median(after) /
median(before) - 1 and ``p`` the one-sided Mann-Whitney U test that "after" ratios are
larger. A case **regresses** when ``change > 15%`` (``--threshold``), ``p < 0.01``
(``--alpha``) *and* the median of every "after" process is above that of every
"before" process (rounds of one process are not independent: one odd process must not
pass for a regression): a real slowdown of a ratio, not a swing of the machine (which
moves tapeflow and its peer together) and not a within-noise wobble. ``change`` uses
the median of the per-process medians of each side. The gate prints every
case with before, after, change and p, and exits 1 when a case regresses and is not
accepted, 2 when a side could not run (a case that errors after but not before
counts as a failure too), else 0.

The chart. With matplotlib installed the gate also draws each compared case's per-round
ratios, before and after (a box per side, a column of dots per process; the title has
the change and the verdict, red when REGRESSED) into a PNG: ``--chart PATH``; by
default beside ``--json`` (same name, ``.png``), else
``asv_bench/html/charts/bench-check.png`` (ignored by git, beside the history's charts);
``--no-chart`` draws none. The output says where it went, or why none was drawn.

Accepting an intended regression: add one line to ``asv_bench/accepted_regressions.txt``
-- ``<case>[@<device>]  <reason>`` (the reason is required; ``#`` starts a comment) --
in the commit that causes it, so it is reviewed with the code. The gate then shows the
case as ``accepted`` and passes; once the base commit includes the change the line
matches nothing and the gate says it can go.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "benchmarks" / "ratio_cases.py"
ACCEPT_FILE = ROOT / "asv_bench" / "accepted_regressions.txt"
#: the directories a checkout puts on PYTHONPATH (those that exist)
PACKAGE_DIRS = ("core", "backends/cpu_numpy", "backends/opencl", "backends/cuda_cupy",
                "plugins/gelu")
THRESHOLD = 0.15
ALPHA = 0.01
ALL_CASES = ("dispatch_add", "dispatch_add_tape", "dispatch_grad", "mlp_step", "cnn_step",
             "function_replay", "plugin_op", "elementwise_chain")
#: --quick: what the test command runs (about 2-3 minutes on a loaded 2-core machine)
#: (no cnn_step: importing PyTorch and building the CNN cost a loaded machine ~30 s per
#: process; the test command has no PyTorch anyway; the full run and the history have it)
QUICK = {"cases": ",".join(c for c in ALL_CASES if c != "cnn_step"), "devices": "cpu:0",
         "pairs": 3, "rounds": 9, "min_time": 0.01, "budget_s": 165}
FULL = {"cases": ",".join(ALL_CASES), "devices": "cpu:0,opencl:0", "pairs": 3, "rounds": 21,
        "min_time": 0.02,
        "budget_s": None}


# --- statistics (tests/test_bench_gate.py tests these on synthetic samples) ----------------

def compare(before, after, threshold=THRESHOLD, alpha=ALPHA):
    """Compare two samples of ratios (lower is better). ``before`` and ``after`` are
    lists of per-round ratios, or lists of such lists, one per process.

    Returns ``{"before", "after"`` (medians: of the per-process medians when grouped),
    ``"change"`` (after / before - 1), ``"p"`` (one-sided Mann-Whitney U on the pooled
    rounds: after > before), ``"consistent"`` (every "after" process's median above
    every "before" process's: a slowdown seen in each process, not one odd process),
    ``"regressed"`` (change > threshold, p < alpha and consistent), ``"improved"}``."""
    from scipy.stats import mannwhitneyu

    gb = before if before and isinstance(before[0], (list, tuple)) else [before]
    ga = after if after and isinstance(after[0], (list, tuple)) else [after]
    pb = [x for g in gb for x in g]
    pa = [x for g in ga for x in g]
    mb = statistics.median(statistics.median(g) for g in gb)
    ma = statistics.median(statistics.median(g) for g in ga)
    change = ma / mb - 1.0
    p_worse = float(mannwhitneyu(pa, pb, alternative="greater").pvalue)
    p_better = float(mannwhitneyu(pa, pb, alternative="less").pvalue)
    worse_each = min(statistics.median(g) for g in ga) > max(statistics.median(g) for g in gb)
    better_each = max(statistics.median(g) for g in ga) < min(statistics.median(g) for g in gb)
    return {"before": mb, "after": ma, "change": change, "p": p_worse,
            "consistent": worse_each,
            "regressed": change > threshold and p_worse < alpha and worse_each,
            "improved": change < -threshold and p_better < alpha and better_each}


def read_accepted(path):
    """``{case or case@device: reason}`` from the accept file; ValueError naming the line
    for a line without a reason."""
    out = {}
    path = Path(path)
    if not path.is_file():
        return out
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[1].strip():
            raise ValueError(f"{path}:{n}: '{line}' has no reason: write "
                             "'<case>[@<device>]  <why this regression is intended>'")
        key = parts[0]
        if key.split("@", 1)[0] not in ALL_CASES:
            raise ValueError(f"{path}:{n}: unknown case '{key}' (cases: {', '.join(ALL_CASES)})")
        out[key] = parts[1].strip()
    return out


def judge(before, after, accepted, threshold=THRESHOLD, alpha=ALPHA):
    """Rows of the table, one per case@device present on either side, and the set of
    accept-file entries that matched a regression."""
    rows, used = [], set()
    for label in sorted(set(before) | set(after), key=_order):
        if label.startswith("_"):
            continue
        b, a = before.get(label, {}), after.get(label, {})
        row = {"case": label}
        if "ratios" in b and "ratios" in a:
            row.update(compare(b["ratios"], a["ratios"], threshold, alpha))
            row["verdict"] = ("REGRESSED" if row["regressed"] else
                              "faster" if row["improved"] else "ok")
        elif "error" in a and "error" not in b:
            row["verdict"], row["why"] = "ERROR", a["error"]
        elif "error" in a or "error" in b:
            row["verdict"], row["why"] = "error both", a.get("error") or b.get("error")
        elif "ratios" in a:
            row["verdict"], row["why"] = "new", b.get("skipped", "not measured before")
            row["after"] = statistics.median(x for g in a["ratios"] for x in g)
        else:
            row["verdict"], row["why"] = "n/a", a.get("skipped") or b.get("skipped", "")
        if row["verdict"] in ("REGRESSED", "ERROR"):
            key = label if label in accepted else label.split("@")[0]
            if key in accepted:
                row["verdict"], row["why"] = "accepted", accepted[key]
                used.add(key)
        rows.append(row)
    return rows, used


def _order(label):
    case, _, dev = label.partition("@")
    return (dev, ALL_CASES.index(case) if case in ALL_CASES else 99, case)


def format_table(rows, threshold=THRESHOLD, alpha=ALPHA):
    lines = [f"{'case@device':28s} {'before':>8s} {'after':>8s} {'change':>8s} {'p':>9s}  verdict",
             "-" * 75]
    for r in rows:
        if "change" in r:
            lines.append(f"{r['case']:28s} {r['before']:8.3f} {r['after']:8.3f} "
                         f"{r['change']:+8.1%} {r['p']:9.2g}  {r['verdict']}"
                         + (f"  ({r['why']})" if r.get("why") else ""))
        else:
            after = f"{r['after']:8.3f}" if "after" in r else f"{'-':>8s}"
            lines.append(f"{r['case']:28s} {'-':>8s} {after} {'-':>8s} {'-':>9s}  {r['verdict']}"
                         f"  {str(r.get('why', ''))[:110]}")
    lines.append(f"(ratio = tapeflow time / peer time, median of paired rounds; REGRESSED = "
                 f"change > {threshold:.0%}, one-sided Mann-Whitney p < {alpha:g} and every "
                 "after-process median above every before-process median)")
    return "\n".join(lines)


# --- running the two sides ------------------------------------------------------------------

def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


#: a clean checkout (CI's) is compared with the newest commit this much older than HEAD
PREVIOUS_MAIN_AGE_S = 6 * 3600


def base_commit(rev=None):
    """``rev``; else, with uncommitted changes, the last commit of main (``git merge-base
    HEAD main``); else -- a clean checkout, as CI's, where main *is* the change -- the
    newest commit at least 6 hours older than HEAD: main as it stood before the work
    now being submitted (work is committed to main in sessions of a few hours), so the
    gate in the test command compares the submission with what was there before it."""
    if rev:
        return git("rev-parse", "--verify", rev + "^{commit}")
    if subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"]).returncode == 0:
        head_t = int(git("log", "-1", "--format=%ct", "HEAD"))
        older = git("rev-list", "-1", f"--before={head_t - PREVIOUS_MAIN_AGE_S}", "HEAD")
        if older:
            return older
    try:
        return git("merge-base", "HEAD", "main")
    except subprocess.CalledProcessError:
        return git("rev-parse", "HEAD")


def export(rev, dest):
    """The package directories of commit ``rev`` under ``dest`` (git archive: no
    worktree bookkeeping in .git, nothing left behind)."""
    have = [d for d in PACKAGE_DIRS
            if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{d}"],
                              capture_output=True).returncode == 0]
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, *have],
                          check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
    build_native(dest)
    return dest


def importable_base(rev, base_dir, tries=30):
    """``rev`` exported in ``base_dir`` if ``import tapeflow`` works there; else the nearest
    first-parent ancestor whose tree imports (re-exported), said in a note. A commit chosen
    by age can be the middle of a refactor committed in steps, which never ran alone."""
    for _ in range(tries):
        proc = subprocess.run([sys.executable, "-c", "import tapeflow"], cwd=base_dir,
                              env=side_env(base_dir), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            return rev
        parent = git("rev-parse", "--verify", rev + "^")
        print(f"bench-check: note: base {rev[:10]} does not import "
              f"({(proc.stderr.strip().splitlines() or ['?'])[-1][:100]}); trying its parent "
              f"{parent[:10]}", flush=True)
        shutil.rmtree(base_dir)
        os.makedirs(base_dir)
        rev = parent
        export(rev, base_dir)
    return rev


def build_native(tree):
    """Build the C core of the exported tree in place, as installing it does (a commit
    with ``core/tapeflow/runtime/_c`` otherwise runs its pure-Python fallback and the
    gate compares a pure-Python base with a compiled working tree), and the CPU
    backend's native kernels where that tree has them (``backends/cpu_numpy/setup.py``).
    A failed build is reported and leaves that side on the fallback, as it would leave a
    user's install."""
    backend = Path(tree) / "backends" / "cpu_numpy"
    if (backend / "setup.py").is_file():
        proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                              cwd=str(backend), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            print(f"bench-check: note: the CPU backend's native kernels of {tree} did not "
                  "build; that side runs the NumPy kernels:\n"
                  + (proc.stdout + proc.stderr)[-1500:], flush=True)
    core = Path(tree) / "core"
    if not (core / "tapeflow" / "runtime" / "_c").is_dir() or not (core / "setup.py").is_file():
        return False
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                          cwd=str(core), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        print(f"bench-check: note: the C core of {tree} did not build; that side runs the "
              "pure-Python fallback:\n" + (proc.stdout + proc.stderr)[-1500:], flush=True)
        return False
    return True


def side_env(tree, threads=1):
    env = dict(os.environ)
    paths = [str(Path(tree) / d) for d in PACKAGE_DIRS if (Path(tree) / d).is_dir()]
    paths.append(str(HARNESS.parent))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore")
    if threads:
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(threads)
    return env


def run_side(tree, out, cases, devices, rounds, min_time, threads=1, timeout=600):
    cmd = [sys.executable, str(HARNESS), "--cases", cases, "--devices", devices,
           "--rounds", str(rounds), "--min-time", str(min_time), "--json", str(out),
           "--expect-root", str(tree)]
    proc = subprocess.run(cmd, env=side_env(tree, threads), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, cwd=str(tree))
    if proc.returncode != 0:
        raise RuntimeError(f"the benchmark process for {tree} failed ({proc.returncode}):\n"
                           + (proc.stdout + proc.stderr)[-3000:])
    return json.loads(Path(out).read_text())


def merge(into, res):
    for label, v in res.items():
        if label.startswith("_"):
            into.setdefault(label, v)
            continue
        cur = into.setdefault(label, {})
        if "ratios" in v:
            cur.setdefault("ratios", []).append(v["ratios"])     # one list per process
            cur.pop("skipped", None)
        elif "error" in v:
            cur["error"] = v["error"]
        elif "skipped" in v and "ratios" not in cur:
            cur["skipped"] = v["skipped"]


def measure_sides(before_tree, after_tree, cases, devices, pairs, rounds, min_time,
                  threads=1, log=print, budget_s=None, min_pairs=2):
    """Alternate before/after processes (ABBA...); the results of each side, one list of
    ratios per process. With ``budget_s``, stop after ``min_pairs`` pairs when one more
    pair would end past the budget (a loaded machine runs each process slower)."""
    sides = {"before": {}, "after": {}}
    trees = {"before": before_tree, "after": after_tree}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        for i in range(pairs):
            spent = time.perf_counter() - start
            if budget_s and i >= min_pairs and spent + spent / i > budget_s:
                log(f"  stopping after {i} pairs: another would pass the {budget_s:.0f} s budget")
                break
            for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
                t0 = time.perf_counter()
                res = run_side(trees[side], Path(tmp) / f"{side}{i}.json", cases, devices,
                               rounds, min_time, threads)
                merge(sides[side], res)
                log(f"  {side:6s} process {i + 1}/{pairs}: {time.perf_counter() - t0:5.1f} s")
    return sides["before"], sides["after"]


#: where the gate's chart goes without --chart or --json: beside the published history's charts
DEFAULT_CHART = ROOT / "asv_bench" / "html" / "charts" / "bench-check.png"


def chart_path(chart=None, json_path=None):
    """``--chart``; else the ``--json`` file's name with ``.png``; else DEFAULT_CHART."""
    if chart:
        return Path(chart)
    if json_path:
        return Path(json_path).with_suffix(".png")
    return DEFAULT_CHART


def write_chart(args, before, after, rows, rev):
    """The before/after chart (``scripts/bench_charts.py``), its path said in the output;
    a note instead without matplotlib or when no case was measured on both sides."""
    spec = importlib.util.spec_from_file_location("bench_charts",
                                                  Path(__file__).with_name("bench_charts.py"))
    charts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(charts)
    reason = charts.missing()
    if reason:
        print(f"bench-check: {reason}")
        return None
    path = chart_path(args.chart, args.json)
    title = f"bench-check: {args.after_rev or args.after} against {rev[:10]}"
    try:
        out = charts.gate_chart(before, after, rows, path, title=title)
    except OSError as e:
        print(f"bench-check: no chart: cannot write {path} ({e}); --chart PATH elsewhere")
        return None
    print(f"bench-check: chart of the before/after ratios: {out}" if out else
          "bench-check: no chart (no case was measured on both sides)")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help=f"the test command's budget: {QUICK}")
    ap.add_argument("--base", help="the commit to compare with (default: HEAD with uncommitted "
                    "changes, else the newest commit >= 6 h older than HEAD)")
    ap.add_argument("--after", default=str(ROOT),
                    help="the checkout measured as 'after' (default: this working tree)")
    ap.add_argument("--after-rev", help="measure this commit as 'after' (exported like the "
                    "base): --base HEAD --after-rev HEAD compares a commit with itself")
    ap.add_argument("--cases", help="comma-separated (default: every case; --quick: all "
                    "but cnn_step)")
    ap.add_argument("--devices")
    ap.add_argument("--pairs", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--min-time", type=float)
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS/OpenMP threads in both sides' processes (0: leave as is)")
    ap.add_argument("--threshold", type=float, default=THRESHOLD)
    ap.add_argument("--alpha", type=float, default=ALPHA)
    ap.add_argument("--accept-file", default=str(ACCEPT_FILE))
    ap.add_argument("--json", help="write the samples and the table's rows here")
    ap.add_argument("--chart", help="write a PNG of the before/after ratios of each case "
                    "compared here (default: beside --json as <name>.png, else "
                    f"{DEFAULT_CHART.relative_to(ROOT)}; needs matplotlib)")
    ap.add_argument("--no-chart", action="store_true", help="draw no chart")
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for k in ("cases", "devices", "pairs", "rounds", "min_time"):
        if getattr(args, k) is None:
            setattr(args, k, preset[k])
    unknown = [c for c in args.cases.split(",") if c not in ALL_CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; cases: {', '.join(ALL_CASES)}")
    try:
        accepted = read_accepted(args.accept_file)
    except ValueError as e:
        print(f"bench-check: {e}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    rev = base_commit(args.base)
    after = Path(args.after).resolve()
    what = f"commit {args.after_rev}" if args.after_rev else str(after)
    print(f"bench-check: {what} against {rev[:10]} ({git('log', '-1', '--format=%s', rev)[:60]})"
          f"\n  {args.cases.count(',') + 1} cases on {args.devices}; {args.pairs} pairs of "
          f"processes x {args.rounds} rounds; threshold {args.threshold:.0%}, "
          f"alpha {args.alpha:g}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-base-") as base_dir, \
            tempfile.TemporaryDirectory(prefix="bench-after-") as after_dir:
        export(rev, base_dir)
        if not args.base:
            rev = importable_base(rev, base_dir)
        if args.after_rev:
            after = export(base_commit(args.after_rev), Path(after_dir).resolve())
        try:
            before, after_res = measure_sides(
                Path(base_dir).resolve(), after, args.cases, args.devices, args.pairs,
                args.rounds, args.min_time, args.threads,
                log=lambda m: print(m, flush=True), budget_s=preset["budget_s"] - (
                    time.perf_counter() - t0) if preset["budget_s"] else None)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"bench-check: {e}", file=sys.stderr)
            return 2
    rows, used = judge(before, after_res, accepted, args.threshold, args.alpha)
    print(format_table(rows, args.threshold, args.alpha))
    if not args.no_chart:
        write_chart(args, before, after_res, rows, rev)
    for key in sorted(set(accepted) - used):
        print(f"note: {Path(args.accept_file).name}: '{key}' accepts no regression now "
              "(remove the line once the base commit has the change)")
    elapsed = time.perf_counter() - t0
    bad = [r["case"] for r in rows if r["verdict"] in ("REGRESSED", "ERROR")]
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"base": rev, "after": str(after), "before": before, "after_samples": after_res,
             "rows": rows, "elapsed_s": elapsed}, indent=1))
    print(f"bench-check: {'FAILED: ' + ', '.join(bad) if bad else 'ok'} "
          f"({elapsed:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
