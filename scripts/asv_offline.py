#!/usr/bin/env python
"""asv's published page without network: its CDN scripts and styles served from the
published directory.

    .venv/bin/python scripts/asv_offline.py apply asv_bench/html   # what bench_history.py runs
    .venv/bin/python scripts/asv_offline.py check                  # the vendored files' sha256
    .venv/bin/python scripts/asv_offline.py urls                   # what asv's page loads, mapped?
    .venv/bin/python scripts/asv_offline.py fetch                  # re-create asv_bench/vendor/
                                                                   # from npm (network)

asv's ``index.html`` loads jQuery, Flot (and its orderBars plugin), stupidtable,
blueimp-md5 and Bootstrap from code.jquery.com, cdnjs and jsDelivr; without network the
page shows only "Can not determine continental origin of swallow". The copies are
committed in ``asv_bench/vendor/`` (from the npm registry, pinned in ``vendor.json`` by
version, tarball integrity and each file's sha256, with their licences), so publishing
needs no network -- on a GPU machine or a CI runner without internet as on this one.

``apply HTML_DIR`` (run by ``scripts/bench_history.py`` after ``asv publish``) checks
each vendored file's sha256, copies them (and the licences) into ``HTML_DIR/vendor/`` and
rewrites, in every page of ``HTML_DIR``, each ``<script src>``/``<link href>`` naming one
of the URLs of ``vendor.json`` to the local copy (dropping its ``integrity``,
``crossorigin`` and ``referrerpolicy`` attributes: the checksum was checked here, and a
page opened from ``file://`` would refuse a script with ``crossorigin``). Nothing else
of asv's page changes, so a newer asv's page works the same way -- unless it loads
something ``vendor.json`` does not map: then ``apply`` fails, listing those URLs and what
to do, and leaves the page as asv wrote it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR_DIR = ROOT / "asv_bench" / "vendor"
MANIFEST = "vendor.json"
#: the subdirectory of the published page the copies go to
PUBLISHED = "vendor"
#: attributes that load something, per tag; <a href> is a link a user follows, not a load
LOADS = {"script": ("src",), "link": ("href",), "img": ("src",), "iframe": ("src",),
         "source": ("src",), "embed": ("src",)}
NOT_LOADED_LINKS = {"alternate", "canonical", "author", "help", "license", "next", "prev",
                    "search", "bookmark", "external", "nofollow", "noreferrer", "tag"}
DROP_ATTRS = ("integrity", "crossorigin", "referrerpolicy")
EXTERNAL = re.compile(r"^\s*(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?//")


class OfflineError(RuntimeError):
    """The page cannot be made to work offline; the message says why and what to do."""


def load_manifest(vendor_dir=VENDOR_DIR):
    path = Path(vendor_dir) / MANIFEST
    if not path.is_file():
        raise OfflineError(f"{path} is missing: the vendored scripts of asv's page are "
                           "committed in asv_bench/vendor/ (git checkout asv_bench/vendor, or "
                           "scripts/asv_offline.py fetch to download them again)")
    return json.loads(path.read_text())


def _entries(manifest):
    """Every vendored file of the manifest (scripts, styles and licence files)."""
    for pkg in manifest["packages"]:
        for f in pkg["files"]:
            yield pkg, f
        if pkg.get("license_file"):
            yield pkg, pkg["license_file"]


def url_map(manifest):
    """``{CDN URL: path under vendor/}``."""
    return {url: f["to"] for pkg in manifest["packages"] for f in pkg["files"]
            for url in f.get("replaces", ())}


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check(vendor_dir=VENDOR_DIR):
    """Each vendored file present with its recorded sha256; OfflineError listing the rest."""
    vendor_dir = Path(vendor_dir)
    manifest = load_manifest(vendor_dir)
    bad = []
    for _, f in _entries(manifest):
        path = vendor_dir / f["to"]
        if not path.is_file():
            bad.append(f"{f['to']}: missing")
        elif sha256(path) != f["sha256"]:
            bad.append(f"{f['to']}: sha256 {sha256(path)}, vendor.json pins {f['sha256']}")
    if bad:
        raise OfflineError(f"the vendored files of asv's page in {vendor_dir} do not match "
                           f"{MANIFEST}:\n  " + "\n  ".join(bad) + "\nRestore them (git "
                           "checkout asv_bench/vendor) or download them again: "
                           ".venv/bin/python scripts/asv_offline.py fetch")
    return manifest


class _Loads(HTMLParser):
    """The start tags of a page that load something, with the attribute and its value."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found = []          # (start tag text, attribute, value)

    def handle_starttag(self, tag, attrs):
        names = LOADS.get(tag)
        if not names:
            return
        d = dict(attrs)
        if tag == "link" and set((d.get("rel") or "").lower().split()) & NOT_LOADED_LINKS:
            return
        for name in names:
            if d.get(name):
                self.found.append((self.get_starttag_text(), name, d[name]))

    handle_startendtag = handle_starttag


def external_loads(page_text):
    """``[(start tag, attribute, URL)]`` of what a page loads from another host."""
    parser = _Loads()
    parser.feed(page_text)
    parser.close()
    return [t for t in parser.found if EXTERNAL.match(t[2])]


def _rewrite_tag(tag_text, attr, local):
    out = re.sub(r'(\s%s\s*=\s*)(["\']).*?\2' % attr, lambda m: f'{m.group(1)}"{local}"',
                 tag_text, count=1, flags=re.S)
    for name in DROP_ATTRS:
        out = re.sub(r'\s+%s(\s*=\s*(["\']).*?\2|\s*=\s*[^\s>]+)?(?=[\s/>])' % name, "",
                     out, flags=re.S | re.I)
    return out


def rewrite_page(text, urls, prefix=PUBLISHED):
    """``(new text, [(URL, local path)], [unmapped URLs])`` for one page."""
    done, unmapped = [], []
    for tag_text, attr, url in external_loads(text):
        key = url.strip()
        if key not in urls:
            unmapped.append(key)
            continue
        local = f"{prefix}/{urls[key]}"
        text = text.replace(tag_text, _rewrite_tag(tag_text, attr, local))
        done.append((key, local))
    return text, done, unmapped


def apply(html_dir, vendor_dir=VENDOR_DIR):
    """Make the published page at ``html_dir`` load nothing from the network: copy the
    vendored files into ``html_dir/vendor/`` and point its pages at them. Returns
    ``[(URL, local path)]``; OfflineError (the pages untouched) when a page loads a URL
    ``vendor.json`` does not map, or a vendored file fails its checksum."""
    html_dir, vendor_dir = Path(html_dir), Path(vendor_dir)
    pages = sorted(html_dir.glob("*.html"))
    if not pages:
        raise OfflineError(f"no page in {html_dir}: run asv publish first")
    manifest = check(vendor_dir)
    urls = url_map(manifest)
    new, done, unmapped = {}, [], []
    for page in pages:
        text, d, u = rewrite_page(page.read_text(encoding="utf-8"), urls)
        new[page] = text
        done += d
        unmapped += [f"{page.name}: {url}" for url in u]
    if unmapped:
        raise OfflineError(
            "asv's published page loads what asv_bench/vendor/vendor.json does not map "
            f"(asv changed what its page loads? vendor.json was made for asv "
            f"{manifest.get('asv')}):\n  " + "\n  ".join(unmapped) + "\nAdd each to "
            "vendor.json -- an npm package at a pinned version, the file and the URL it "
            "replaces, its licence -- then run '.venv/bin/python scripts/asv_offline.py "
            "fetch --record' to download it and record its checksums (benchmarks/README.md, "
            "'The page offline'). The page is left as asv wrote it (it needs network).")
    dest = html_dir / PUBLISHED
    if dest.is_dir():
        shutil.rmtree(dest)         # no stale copy of an older vendor.json
    for _, f in _entries(manifest):
        (dest / f["to"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(vendor_dir / f["to"], dest / f["to"])
    shutil.copyfile(vendor_dir / MANIFEST, dest / MANIFEST)
    for page, text in new.items():
        page.write_text(text, encoding="utf-8")
    return done


# --- fetch: re-create asv_bench/vendor/ from the registry (the only step with network) --------

def _sri(data, algo="sha512"):
    return f"{algo}-" + base64.b64encode(hashlib.new(algo, data).digest()).decode()


def _download(pkg, tmp):
    """The package's tarball bytes, by ``npm pack`` (npm's cache and configuration) or,
    without npm, from the tarball URL of vendor.json."""
    spec = f"{pkg['name']}@{pkg['version']}"
    if shutil.which("npm"):
        proc = subprocess.run(["npm", "pack", spec, "--silent", "--pack-destination", tmp],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            name = proc.stdout.strip().splitlines()[-1]
            return (Path(tmp) / name).read_bytes()
        print(f"asv-offline: npm pack {spec} failed ({proc.stderr.strip()[-300:]}); "
              f"downloading {pkg['tarball']}", file=sys.stderr)
    with urllib.request.urlopen(pkg["tarball"], timeout=60) as r:
        return r.read()


def fetch(vendor_dir=VENDOR_DIR, record=False):
    """Download each package of vendor.json, check the tarball's integrity (npm's sha512)
    and extract the listed files; their sha256 must match vendor.json (``record``: write
    the sha256 of files that have none yet, for a newly added entry)."""
    vendor_dir = Path(vendor_dir)
    manifest = load_manifest(vendor_dir)
    changed = False
    with tempfile.TemporaryDirectory(prefix="asv-vendor-") as tmp:
        for pkg in manifest["packages"]:
            data = _download(pkg, tmp)
            if pkg.get("integrity") and _sri(data) != pkg["integrity"]:
                raise OfflineError(f"{pkg['name']}@{pkg['version']}: the tarball's integrity "
                                   f"is {_sri(data)}, vendor.json pins {pkg['integrity']}")
            if not pkg.get("integrity"):
                if not record:
                    raise OfflineError(f"{pkg['name']}: no integrity in vendor.json (--record)")
                pkg["integrity"], changed = _sri(data), True
            tgz = Path(tmp) / "pkg.tgz"
            tgz.write_bytes(data)
            with tarfile.open(tgz) as tar:
                for f in pkg["files"] + ([pkg["license_file"]] if pkg.get("license_file")
                                         else []):
                    blob = tar.extractfile(f["from"]).read()
                    got = hashlib.sha256(blob).hexdigest()
                    if f.get("sha256") and got != f["sha256"]:
                        raise OfflineError(f"{pkg['name']}: {f['from']} has sha256 {got}, "
                                           f"vendor.json pins {f['sha256']}")
                    if not f.get("sha256"):
                        if not record:
                            raise OfflineError(f"{f['to']}: no sha256 in vendor.json (--record)")
                        f["sha256"], changed = got, True
                    (vendor_dir / f["to"]).parent.mkdir(parents=True, exist_ok=True)
                    (vendor_dir / f["to"]).write_bytes(blob)
            print(f"asv-offline: {pkg['name']}@{pkg['version']}: {len(pkg['files'])} file(s) ok")
    if changed:
        (vendor_dir / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"asv-offline: recorded new checksums in {vendor_dir / MANIFEST}")
    return manifest


def asv_index_html():
    """The page template of the installed asv."""
    import asv
    return Path(asv.__file__).parent / "www" / "index.html"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("apply", help="vendor the scripts into a published page")
    p.add_argument("html_dir")
    sub.add_parser("check", help="check the vendored files' sha256 (no network)")
    sub.add_parser("urls", help="what the installed asv's page loads, and where it maps")
    p = sub.add_parser("fetch", help="download the vendored files again (npm registry)")
    p.add_argument("--record", action="store_true",
                   help="record checksums missing from vendor.json (a new entry)")
    ap.add_argument("--vendor-dir", default=str(VENDOR_DIR))
    args = ap.parse_args(argv)
    try:
        if args.cmd == "apply":
            for url, local in apply(args.html_dir, args.vendor_dir):
                print(f"asv-offline: {url} -> {local}")
        elif args.cmd == "check":
            m = check(args.vendor_dir)
            print(f"asv-offline: {sum(1 for _ in _entries(m))} vendored files match "
                  f"{MANIFEST}")
        elif args.cmd == "urls":
            urls = url_map(load_manifest(args.vendor_dir))
            page = asv_index_html()
            missing = 0
            for _, _, url in external_loads(page.read_text(encoding="utf-8")):
                missing += url not in urls
                print(f"{url}\n    -> {urls.get(url, 'NOT MAPPED')}")
            return 1 if missing else 0
        else:
            fetch(args.vendor_dir, args.record)
    except OfflineError as e:
        print(f"asv-offline: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
