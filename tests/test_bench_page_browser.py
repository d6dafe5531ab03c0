"""The published performance page in a real browser, offline.

``scripts/bench_history.py 0`` publishes the committed reference results
(``asv_bench/results/``) into a temporary directory, exactly as ``bench-history`` writes
``asv_bench/html/``; a static HTTP server on 127.0.0.1 serves it (asv's page loads its
JSON with XHR, which file:// forbids), and headless Chromium opens ``index.html`` with no
network beyond this machine (every other host name fails to resolve: tests/browser_cdp.py).
Checked, as a user would see it:

- no script or stylesheet failed to load, no console error, no uncaught exception, and the
  page did not give up ("Can not determine continental origin of swallow": asv's
  error.html, where it goes when a script from a CDN fails);
- the benchmark grid lists every ratio benchmark;
- a ratio benchmark's graph is drawn (Flot's canvas has pixels) with one series per device,
  each holding the points the published JSON has for that device (none for a device the
  reference machine lacks);
- a screenshot of the graph is saved under the test's tmp_path (its path is printed).

Chromium is driven over the DevTools protocol on a pipe (tests/browser_cdp.py, standard
library only). Which Chromium: $TAPEFLOW_CHROMIUM, /usr/bin/chromium (Debian's
``chromium`` package), or chromium, chromium-browser, google-chrome on PATH; skipped with
that reason where there is none. Takes a few seconds.
"""

import functools
import http.server
import importlib.util
import json
import re
import shutil
import threading
from pathlib import Path

import pytest
from browser_cdp import Browser, find_chromium
from test_asv_smoke import _conf

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "asv_bench" / "results"
MACHINE = "dev-2core"
GRAPHED = "bench_ratios.DispatchAddRatio.track_ratio"   # measured on cpu:0 and opencl:0
CHROMIUM, NO_CHROMIUM = find_chromium()
GAVE_UP = "location.pathname.endsWith('/error.html')"     # asv's "origin of swallow" page

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("asv") is None,
                       reason="asv is not installed (pip install asv==0.6.6 asv-runner==0.2.5)"),
    pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM or ""),
]

_spec = importlib.util.spec_from_file_location("bench_history",
                                               ROOT / "scripts" / "bench_history.py")
bench_history = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_history)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The published page (bench-history's publish step on a copy of the committed
    results, asv's machine file in a temporary HOME), served on 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("bench_page")
    shutil.copytree(RESULTS, tmp / "results")
    conf = _conf(tmp)
    (tmp / "home").mkdir()
    mp = pytest.MonkeyPatch()
    mp.setenv("HOME", str(tmp / "home"))
    try:
        assert bench_history.main(["0", "--config", str(conf)]) == 0
    finally:
        mp.undo()
    html = tmp / "html"
    assert (html / "index.html").is_file(), f"bench-history published nothing in {html}"
    handler = functools.partial(_Quiet, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield html, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Browser.launch(CHROMIUM, tmp_path_factory.mktemp("chromium_profile")) as b:
        yield b


def _points_per_device(html, name):
    """{device: number of points} in the published graph JSON the page plots."""
    index = json.loads((html / "index.json").read_text())
    devices = [p.strip("'") for p in index["benchmarks"][name]["params"][0]]
    graphs = [g for g in (html / "graphs").glob(f"**/{name}.json")
              if "branch-main" in g.parts and f"machine-{MACHINE}" in g.parts]
    assert len(graphs) == 1, graphs
    points = json.loads(graphs[0].read_text())
    return {d: sum(1 for _, v in points if v is not None and v[i] is not None)
            for i, d in enumerate(devices)}


# asv asks for data that need not exist, and shows an empty box where it does not, as it
# does anywhere: the grid asks for a summary graph of every benchmark it knows, also of
# those the committed history has no figure for (only the ratio benchmarks are recorded
# there); a graph page asks for the benchmark's graph under each machine configuration
# shown. Those 404s are tolerated (what the graph draws is checked against the published
# JSON instead); any script, stylesheet or page, and a ratio benchmark's summary, must load.
_NO_DATA = re.compile(r"^XHR \S+/graphs/(summary/(?!bench_ratios\.)|(?!summary/)\S+/)"
                      r"[\w.]+\.json\S*: HTTP 404$")


def _configurations_hint():
    """Why a ratio benchmark can be missing from asv's list or its graph 404: the
    committed results record the machine under more than one set of parameters (asv's
    page shows one set at a time); empty when they agree."""
    seen = {}
    for f in sorted((RESULTS / MACHINE).glob("*.json")):
        if f.name != "machine.json":
            params = json.loads(f.read_text()).get("params", {})
            seen.setdefault(json.dumps(params, sort_keys=True), []).append(f.name[:8])
    if len(seen) < 2:
        return ""
    return ("\nThe committed results record machine " + MACHINE + " under "
            f"{len(seen)} configurations, and asv's page shows one at a time: "
            + "; ".join(f"{p} in {', '.join(c)}" for p, c in seen.items())
            + ". Record them all with the same machine parameters (asv_bench/results/"
            f"{MACHINE}/*.json 'params'; `asv machine --yes --machine {MACHINE}` alone "
            "stores only the name).")


def _assert_loaded(browser, where):
    url = browser.evaluate("location.href")
    assert "error.html" not in url, (
        f"{where}: asv gave up (went to {url}: 'Can not determine continental origin of "
        f"swallow'): a script did not load.\n{browser.report()}\nThe published page must "
        "carry its scripts (asv_bench/html/vendor/, written by bench-history's publish).")
    bad = [f for f in browser.failures() if not _NO_DATA.match(f)]
    assert not bad, f"{where}: " + "\n  ".join(["failed requests / console errors:", *bad])


def test_the_benchmark_list_shows_offline(site, browser):
    html, url = site
    index = json.loads((html / "index.json").read_text())
    ratios = sorted(n for n in index["benchmarks"] if n.startswith("bench_ratios."))
    assert ratios
    browser.navigate(url + "index.html")
    shown = browser.wait_for(
        "window.jQuery && document.querySelectorAll('a.benchmark-container').length > 0"
        " && Array.from(document.querySelectorAll('a.benchmark-container'),"
        "               a => a.getAttribute('href'))",
        what="asv's benchmark grid", fail_if=GAVE_UP)
    _assert_loaded(browser, "index.html")
    missing = [n for n in ratios if f"#{n}" not in shown]
    assert not missing, f"not in the benchmark grid: {missing}; shown: {shown}"
    # the "Benchmark list" tab: a table row per benchmark, ratio ones included
    browser.navigate(url + "index.html#/summarylist")
    rows = browser.wait_for(
        "document.querySelectorAll('#summarylist-body table tbody tr').length > 0 &&"
        " document.getElementById('summarylist-body').innerText",
        what="the benchmark list (#/summarylist)", fail_if=GAVE_UP)
    _assert_loaded(browser, "index.html#/summarylist")
    assert GRAPHED.split(".")[1] in rows, (
        f"the benchmark list shows no ratio benchmark: {rows[:300]!r}...{_configurations_hint()}")


# The series Flot drew: label, points, and how many pixels of the graph's canvas have the
# series' colour (its line and points; the legend is HTML, not on the canvas).
_PLOT = """(() => {
  const plot = window.jQuery && jQuery('#main-graph').data('plot');
  if (!plot || plot.getData().length === 0) return null;
  const canvas = document.querySelector('#main-graph canvas.flot-base');
  const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  return plot.getData().map(s => {
    const c = jQuery.color.parse(s.color);
    let pixels = 0;
    for (let i = 0; i < px.length; i += 4)
      if (px[i + 3] > 200 && Math.abs(px[i] - c.r) + Math.abs(px[i + 1] - c.g)
          + Math.abs(px[i + 2] - c.b) < 30) pixels++;
    return {label: String(s.label), color: s.color, pixels: pixels,
            points: s.data.filter(p => p && p[1] !== null).length};
  });
})()"""


def test_a_ratio_graph_has_one_series_per_device(site, browser, tmp_path):
    html, url = site
    expected = _points_per_device(html, GRAPHED)
    assert sum(1 for n in expected.values() if n) >= 2, expected   # a history on 2 devices
    browser.navigate(url + "index.html#" + GRAPHED)
    shot = tmp_path / "bench_page_ratio_graph.png"
    try:
        got = browser.wait_for(_PLOT, what=f"the graph of {GRAPHED}", fail_if=GAVE_UP)
    finally:        # the artefact, whatever the page shows
        print(f"screenshot of the ratio graph page: {browser.screenshot(shot)}")
    _assert_loaded(browser, f"index.html#{GRAPHED}")
    series = got        # [{label, color, pixels, points}] per series drawn
    assert len(series) == len(expected), f"one series per device {list(expected)}: {series}"
    for dev, n in expected.items():
        mine = [s for s in series if dev in s["label"]]
        assert len(mine) == 1, f"{dev}: no single series labelled with it in {series}"
        assert mine[0]["points"] == n, (f"{dev}: {mine[0]} drawn, the JSON has {n} points"
                                        + _configurations_hint())
        if n:
            assert mine[0]["pixels"] > 50, f"{dev}: its line is not on the canvas: {mine[0]}"
    assert shot.stat().st_size > 10_000, shot
