"""asv's published page without network (scripts/asv_offline.py) and the static charts of
the ratio benchmarks (scripts/bench_charts.py, written by bench_history.py and
bench_check.py). Fast, no network, no browser: the vendored files against their pinned
checksums, the installed asv's real page template rewritten to the local copies, the
failure that names what a newer asv loads and nothing maps, and the charts drawn from
the committed results and from synthetic gate samples (skipped without matplotlib).
tests/test_bench_page_browser.py opens the published page in a real browser."""

import base64
import hashlib
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _load(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


offline = _load("asv_offline")
charts = _load("bench_charts")

needs_asv = pytest.mark.skipif(importlib.util.find_spec("asv") is None,
                               reason="asv is not installed (pip install asv==0.6.6 "
                                      "asv-runner==0.2.5)")
needs_mpl = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="matplotlib is not installed (optional: "
                                      ".venv/bin/python -m pip install matplotlib)")


def test_vendored_files_match_their_pinned_checksums_and_carry_licences():
    manifest = offline.check()           # every file present with its sha256
    # git must not convert line ends (three files have CRLF) or the checksums break
    assert "* -text" in (offline.VENDOR_DIR / ".gitattributes").read_text()
    for pkg in manifest["packages"]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", pkg["version"]), pkg
        assert pkg["integrity"].startswith("sha512-") and pkg["license"] == "MIT", pkg
        assert pkg["tarball"].startswith("https://registry.npmjs.org/"), pkg
        lic = pkg.get("license_file")
        if lic:
            assert "Permission is hereby granted" in (offline.VENDOR_DIR / lic["to"]).read_text()
        else:       # the licence statement is in the vendored file itself
            assert all("MIT license" in (offline.VENDOR_DIR / f["to"]).read_text()
                       for f in pkg["files"]), pkg["name"]


def test_a_changed_vendored_file_is_refused(tmp_path):
    vendor = tmp_path / "vendor"
    shutil.copytree(offline.VENDOR_DIR, vendor)
    (vendor / "jquery-3.3.1" / "jquery.min.js").write_text("alert('not jquery')")
    with pytest.raises(offline.OfflineError,
                       match=r"(?s)jquery.min.js: sha256.*asv_offline.py fetch"):
        offline.check(vendor)


@needs_asv
def test_every_cdn_load_of_the_installed_asv_page_is_mapped():
    page = offline.asv_index_html().read_text(encoding="utf-8")
    loads = offline.external_loads(page)
    urls = offline.url_map(offline.load_manifest())
    assert loads, "asv's page template loads nothing from a CDN any more? Then " \
        "scripts/asv_offline.py may not be needed; check benchmarks/README.md"
    assert [u for _, _, u in loads if u not in urls] == [], \
        "this asv's page loads URLs asv_bench/vendor/vendor.json does not map"
    # where asv pins a file by its integrity hash and the vendored file is that file,
    # it is byte for byte what the CDN serves (jQuery, orderBars, md5, Bootstrap)
    same = 0
    for tag, _, url in loads:
        m = re.search(r'integrity="(sha\d+)-([^"]+)"', tag)
        data = (offline.VENDOR_DIR / urls[url]).read_bytes()
        same += base64.b64encode(hashlib.new(m.group(1), data).digest()).decode() == m.group(2)
    assert same >= 5, same


@needs_asv
def test_the_page_is_rewritten_to_local_copies_and_otherwise_untouched(tmp_path):
    www = offline.asv_index_html().parent
    html = tmp_path / "html"
    shutil.copytree(www, html)
    done = offline.apply(html)
    assert len(done) == len(offline.external_loads((www / "index.html").read_text()))
    text = (html / "index.html").read_text()
    assert offline.external_loads(text) == []
    for _, local in done:
        assert (html / local).is_file(), local
    assert "integrity=" not in text and "crossorigin" not in text
    assert 'onerror="js_load_failure()"' in text          # asv's own failure report kept
    before = (www / "index.html").read_text().splitlines()
    after = text.splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(changed) == len(done) and all("vendor/" in b for _, b in changed)
    assert (html / "vendor" / "vendor.json").is_file()
    assert (html / "vendor" / "jquery-3.3.1" / "LICENSE.txt").is_file()
    # a second run (publishing again into the same directory) changes nothing
    assert offline.apply(html) == [] and (html / "index.html").read_text() == text


def test_a_load_nothing_maps_fails_naming_it_and_leaves_the_page(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    page = ('<html><head><script src="https://code.jquery.com/jquery-3.3.1.min.js" '
            'integrity="sha256-x" crossorigin="anonymous"></script>\n'
            '<script src="https://cdn.example.org/newlib@2.0/newlib.min.js"></script>\n'
            '<link rel="stylesheet" href="//cdn.example.org/new.css">\n'
            '<link rel="alternate" href="https://example.org/feed.xml">\n'
            '<a href="https://github.com/airspeed-velocity/asv/">asv</a></head></html>\n')
    (html / "index.html").write_text(page)
    with pytest.raises(offline.OfflineError) as e:
        offline.apply(html)
    msg = str(e.value)
    assert "index.html: https://cdn.example.org/newlib@2.0/newlib.min.js" in msg
    assert "index.html: //cdn.example.org/new.css" in msg
    assert "jquery" not in msg and "feed.xml" not in msg and "github" not in msg
    assert "vendor.json" in msg and "fetch --record" in msg
    assert (html / "index.html").read_text() == page and not (html / "vendor").exists()


def test_rewrite_handles_quotes_and_attribute_order():
    urls = {"https://cdn.jsdelivr.net/npm/x@1/x.js": "x-1/x.js"}
    text = ("<script crossorigin integrity='sha256-a' "
            "src='https://cdn.jsdelivr.net/npm/x@1/x.js' defer></script>")
    out, done, unmapped = offline.rewrite_page(text, urls)
    assert out == '<script src="vendor/x-1/x.js" defer></script>', out
    assert done == [("https://cdn.jsdelivr.net/npm/x@1/x.js", "vendor/x-1/x.js")]
    assert unmapped == []


@needs_mpl
def test_history_charts_of_a_synthetic_history(tmp_path):
    bench_history = _load("bench_history")
    # the shape bench_history.history() reads from the published graphs' JSON
    history = [{"name": "bench_ratios.DispatchAddRatio.track_ratio", "unit": "ratio",
                "commits": ["b6dcc6a8aa", "d9536e02bb", "0fde874ecc"],
                "devices": {"cpu:0": [3.5, 3.43, 3.6], "opencl:0": [42.8, 42.4, None],
                            "cuda:0": [None, None, None]}},
               {"name": "bench_ratios.CNNStepRatio.track_ratio", "unit": "ratio",
                "commits": [], "devices": {"cpu:0": []}}]
    out = charts.history_charts(history, tmp_path / "charts")
    assert [p.name for p in out] == ["DispatchAddRatio.png", "CNNStepRatio.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out)
    assert callable(bench_history.charts)


@needs_mpl
@needs_asv
def test_published_history_writes_a_chart_per_ratio_benchmark(tmp_path, monkeypatch):
    # what bench_history.py publish() does after asv publish, on the committed results
    bench_history = _load("bench_history")
    from test_asv_smoke import _conf
    shutil.copytree(ROOT / "asv_bench" / "results", tmp_path / "results")
    conf = _conf(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))       # asv's machine file
    (tmp_path / "home").mkdir()
    msgs = []
    bench_history.publish(conf, cwd=tmp_path, log=msgs.append)
    html = tmp_path / "html"
    assert offline.external_loads((html / "index.html").read_text()) == []
    names = {b["name"] for b in bench_history.history(html)}
    pngs = sorted(p.name for p in (html / "charts").glob("*.png"))
    assert pngs == sorted(charts.chart_name(n) for n in names) and len(pngs) == 8, pngs
    assert any("8 chart(s)" in m for m in msgs), msgs


@needs_mpl
def test_gate_chart_of_before_and_after_distributions(tmp_path):
    pytest.importorskip("scipy", reason="the gate's Mann-Whitney test needs SciPy")
    bench_check = _load("bench_check")
    before = {"dispatch_add@cpu:0": {"ratios": [[3.3, 3.4, 3.2], [3.35, 3.3, 3.4]]},
              "mlp_step@cpu:0": {"ratios": [[1.9, 2.0, 1.95], [1.92, 1.98, 1.9]]},
              "cnn_step@opencl:0": {"skipped": "PyTorch has no OpenCL device"}}
    after = {"dispatch_add@cpu:0": {"ratios": [[4.4, 4.3, 4.5], [4.35, 4.4, 4.45]]},
             "mlp_step@cpu:0": {"ratios": [[1.93, 1.97, 1.95], [1.9, 2.0, 1.96]]},
             "cnn_step@opencl:0": {"skipped": "PyTorch has no OpenCL device"}}
    rows, _ = bench_check.judge(before, after, {})
    path = charts.gate_chart(before, after, rows, tmp_path / "gate.png", title="test")
    assert path == tmp_path / "gate.png" and path.read_bytes()[:4] == b"\x89PNG"
    assert charts.gate_chart({}, {}, [], tmp_path / "none.png") is None
    # where the gate writes it: --chart, else beside --json, else beside the page's charts
    assert bench_check.chart_path("/x/c.png", "/y/g.json") == Path("/x/c.png")
    assert bench_check.chart_path(None, "/y/g.json") == Path("/y/g.png")
    assert bench_check.chart_path() == ROOT / "asv_bench" / "html" / "charts" / "bench-check.png"


def test_charts_say_what_to_install_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import fails, as if absent
    msg = charts.missing()
    assert msg and "pip install matplotlib" in msg
    assert charts.history_charts([], "/nonexistent") is None
    assert charts.gate_chart({}, {}, [], "/nonexistent/x.png") is None
