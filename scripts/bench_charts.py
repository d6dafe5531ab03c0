"""Static charts of the ratio benchmarks (PNG, matplotlib; optional): the history of each
ratio benchmark per device (``scripts/bench_history.py`` writes them beside asv's page,
``asv_bench/html/charts/``) and the before/after distributions the gate compared
(``scripts/bench_check.py --chart``). Without matplotlib every function returns ``None``
and :func:`missing` says how to get it; nothing else needs it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

INSTALL = ".venv/bin/python -m pip install matplotlib"
#: one colour per device, the same in every chart
DEVICE_COLOURS = {"cpu:0": "tab:blue", "opencl:0": "tab:orange", "cuda:0": "tab:green"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")           # files only, no display (headless machines, CI)
    import matplotlib.pyplot as plt
    return plt


def missing():
    """``None`` when matplotlib is importable, else the message to print."""
    if _pyplot() is not None:
        return None
    return f"matplotlib is not installed, so no chart was drawn ({INSTALL} to get them)"


def chart_name(benchmark):
    """``bench_ratios.MLPStepRatio.track_ratio`` -> ``MLPStepRatio.png``."""
    parts = benchmark.split(".")
    stem = parts[1] if len(parts) == 3 and parts[0] == "bench_ratios" else benchmark
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) + ".png"


def history_charts(history, out_dir):
    """One PNG per benchmark of ``history`` (``[{"name", "unit", "commits": [sha, ...],
    "devices": {device: [value or None per commit]}}]``, oldest commit first): the ratio
    over commits, one line per device with figures. Returns the paths written, or None
    without matplotlib."""
    plt = _pyplot()
    if plt is None:
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for bench in history:
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        x = list(range(len(bench["commits"])))
        drawn = 0
        for dev, values in bench["devices"].items():
            pts = [(i, v) for i, v in zip(x, values) if v is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=dev,
                    color=DEVICE_COLOURS.get(dev))
            drawn += 1
        absent = [d for d, v in bench["devices"].items() if all(y is None for y in v)]
        ax.set_xticks(x)
        ax.set_xticklabels([c[:8] for c in bench["commits"]], rotation=45, ha="right",
                           fontsize=8)
        ax.set_xlabel("commit of main (oldest first)")
        ax.set_ylabel(f"{bench.get('unit') or 'ratio'} (tapeflow / peer; lower is better)",
                      fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.8, ls=":")
        vals = [v for vs in bench["devices"].values() for v in vs if v is not None and v > 0]
        if vals and max(vals) / min(vals) > 8:
            ax.set_yscale("log")        # devices far apart (cpu:0 ~3, opencl:0 ~40)
        else:
            ax.set_ylim(bottom=0)
        ax.set_title(bench["name"] + (f"\n(no figures: {', '.join(absent)})" if absent else ""),
                     fontsize=9)
        if drawn:
            ax.legend(fontsize=8, title="device", title_fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = out_dir / chart_name(bench["name"])
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def _groups(side):
    """Per-process lists of ratios (the gate keeps one list per process)."""
    r = side.get("ratios") or []
    return [list(g) for g in r] if r and isinstance(r[0], (list, tuple)) else ([list(r)] if r
                                                                                 else [])


def gate_chart(before, after, rows, path, title=""):
    """One panel per case@device that was measured on both sides: the per-round ratios of
    each "before" and "after" process (dots, one column per process) and each side's box;
    the panel's title carries the change and the verdict (red: REGRESSED). Returns the
    path, or None without matplotlib or with nothing measured on both sides."""
    plt = _pyplot()
    if plt is None:
        return None
    cases = [r for r in rows if "change" in r]
    if not cases:
        return None
    cols = min(4, len(cases))
    nrows = math.ceil(len(cases) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.9 * nrows), dpi=100,
                             squeeze=False)
    for ax in axes.flat[len(cases):]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, cases):
        label = row["case"]
        sides = [(_groups(before.get(label, {})), "tab:blue"),       # before
                 (_groups(after.get(label, {})), "tab:red")]         # after
        for pos, (groups, colour) in enumerate(sides):
            flat = [x for g in groups for x in g]
            ax.boxplot([flat], positions=[pos], widths=0.6, showfliers=False,
                       medianprops={"color": colour})
            for k, g in enumerate(groups):
                off = (k - (len(groups) - 1) / 2) * 0.12
                ax.plot([pos + off] * len(g), g, ".", color=colour, alpha=0.6, ms=4)
        ax.set_xticks([0, 1])
        ax.set_xticklabels(["before", "after"])
        bad = row.get("verdict") == "REGRESSED"
        ax.set_title(f"{label}\n{row['change']:+.1%}, p {row['p']:.2g}: {row['verdict']}",
                     fontsize=8, color="red" if bad else "black")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle((title + "\n" if title else "") + "ratio tapeflow / peer per round "
                 "(dots: one column per process; lower is better)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
