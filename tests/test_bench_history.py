"""The published performance page: ``asv publish`` on the committed reference results
(``asv_bench/results/``, written by ``scripts/bench_history.py``) builds a page with a
graph per ratio benchmark holding one series per device, read back from the graphs'
JSON that asv writes under ``html/graphs/`` (what the page's JavaScript plots).

Nothing in the checkout changes: the results are copied into a temporary directory with
a copy of ``asv_bench/asv.conf.json`` pointing there, and asv's machine file goes to a
temporary HOME. No benchmark runs here (that is test_asv_smoke.py's job)."""

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_asv_smoke import _conf

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_bench"
RESULTS = ASV_DIR / "results"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("asv") is None,
    reason="asv is not installed (pip install asv==0.6.6 asv-runner==0.2.5)")

_spec = importlib.util.spec_from_file_location("bench_history",
                                               ROOT / "scripts" / "bench_history.py")
bench_history = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_history)

RATIO_CLASSES = ["DispatchAddRatio", "DispatchAddTapeRatio", "DispatchGradRatio",
                 "MLPStepRatio", "CNNStepRatio", "FunctionReplayRatio", "PluginOpRatio",
                 "ElementwiseChainRatio"]
# where the reference machine (2 cores, Intel's OpenCL CPU runtime, no GPU) has a figure
MEASURED = {"cpu:0": RATIO_CLASSES,
            "opencl:0": [c for c in RATIO_CLASSES if c != "CNNStepRatio"],   # no PyTorch
            "cuda:0": []}


def _config(tmp):
    shutil.copytree(RESULTS, tmp / "results")
    return _conf(tmp)           # the project's asv.conf.json pointed at tmp (test_asv_smoke)


def _ratio_commits():
    """Commits of the committed results that have ratio figures."""
    out = []
    for f in sorted((RESULTS / "dev-2core").glob("*.json")):
        if f.name == "machine.json":
            continue
        data = json.loads(f.read_text())
        if any(k.startswith("bench_ratios.") for k in data.get("results", {})):
            out.append(data["commit_hash"])
    return out


def test_committed_results_hold_a_ratio_history():
    commits = _ratio_commits()
    assert len(commits) >= 2, "asv_bench/results/dev-2core/ should hold ratio results of " \
        "two commits or more (scripts/bench_history.py 2)"


def test_the_published_page_has_a_graph_per_ratio_benchmark_and_device(tmp_path, monkeypatch):
    conf = _config(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    os.makedirs(tmp_path / "home")
    # the function bench_history.py publishes with
    bench_history.publish(conf, cwd=tmp_path)
    html = tmp_path / "html"
    assert (html / "index.html").is_file()
    index = json.loads((html / "index.json").read_text())

    commits = set(_ratio_commits())
    rev_of = {h: int(r) for r, h in index["revision_to_hash"].items()}
    assert all(any(h.startswith(c[:8]) for h in rev_of) for c in commits)

    for cls in RATIO_CLASSES:
        name = f"bench_ratios.{cls}.track_ratio"
        meta = index["benchmarks"][name]
        assert meta["unit"] == "ratio"
        devices = [p.strip("'") for p in meta["params"][0]]
        assert devices == ["cpu:0", "opencl:0", "cuda:0"], devices
        # graphs/<arch-..>/branch-main/<cpu-..>/machine-dev-2core/<..>/<name>.json
        graphs = [g for g in (html / "graphs").glob(f"**/{name}.json")
                  if "branch-main" in g.parts and "machine-dev-2core" in g.parts]
        assert len(graphs) == 1, f"{name}: graphs {graphs}"
        points = json.loads(graphs[0].read_text())      # [[revision, [per device]], ...]
        assert len(points) >= len(commits), f"{name}: {points}"
        for i, dev in enumerate(devices):
            series = [v[i] for _, v in points if v is not None]
            values = [x for x in series if x is not None]
            if cls in MEASURED[dev]:
                assert len(values) >= len(commits), f"{name} on {dev}: {series}"
                assert all(0 < x < 1000 for x in values), f"{name} on {dev}: {values}"
            else:
                assert not values, f"{name} on {dev} should be n/a here: {series}"
        assert (html / "graphs" / "summary" / f"{name}.json").is_file()

    # the text dump (bench_history.py --dump) shows each benchmark and device
    text = bench_history.dump(html)
    for cls in RATIO_CLASSES:
        assert f"bench_ratios.{cls}.track_ratio (ratio)" in text
    assert text.count("  cpu:0 ") == len(RATIO_CLASSES)


def test_history_runs_each_commit_from_its_own_export():
    # the selection of devices and the environment a past commit runs with
    assert bench_history.selection("bench_ratios", "cpu:0,opencl:0") == [
        "-b", "bench_ratios.*\\('cpu:0'[,)]", "-b", "bench_ratios.*\\('opencl:0'[,)]"]
    last = bench_history.commits(2)
    assert len(last) == 2
    out = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--first-parent", "-n", "2",
                          "main"], capture_output=True, text=True, check=True).stdout.split()
    assert last == list(reversed(out))
