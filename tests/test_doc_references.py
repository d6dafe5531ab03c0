"""Every document the code cites is in the repository: ``docs/x.md`` (and its section,
where one is named: ``docs/decisions.md section 5`` / ``§5`` needs a heading ``## 5.``),
a ``README.md`` by path, ``CHANGELOG.md``; and no code cites a design document that
lives outside the repository (``DESIGN.md``, ``STYLE.md``: what the code relies on from
them belongs in docs/)."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: where code lives (documents are checked by tests/test_docs.py)
CODE_DIRS = ("core", "backends", "plugins", "scripts", "benchmarks", "asv_bench", "examples",
             "tests", ".ci")
CODE_SUFFIXES = {".py", ".c", ".h", ".cl", ".sh", ".toml", ".cfg", ".ini", ".json", ""}

DOC_REF = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*(?:docs/[\w./-]+?|[\w.-]*README|CHANGELOG)\.md)"
                     r"(?:\s*(?:,\s*)?(?:§\s*|section\s+)(\d+))?")
OUTSIDE = re.compile(r"\b(DESIGN|STYLE)\.md\b")

#: references to files that are not in this repository by design, with why
NOT_IN_REPO = {
    "demo_ops/README.md": "a file of the project `python -m tapeflow new-plugin` generates",
    "tests/array_api_suite/README.md": "inside the vendored suite's tarball, unpacked at test time",
}


def _code_files():
    for d in CODE_DIRS:
        base = ROOT / d
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(ROOT)
            if (p.is_file() and p.suffix in CODE_SUFFIXES and p.name != "test_doc_references.py"
                    and not any(part.endswith(".egg-info") or part in ("build", "__pycache__",
                                                                         "fixtures", ".asv")
                                for part in rel.parts)
                    and p.stat().st_size < 1_000_000):
                try:
                    yield p, p.read_text()
                except UnicodeDecodeError:
                    continue


def _exists(ref, where):
    """The cited file, looked up from the repository root, then from the citing file's
    folder upwards (``backends/opencl/README.md`` cited as ``README.md`` there)."""
    if (ROOT / ref).is_file():
        return ROOT / ref
    for folder in [where.parent, *where.parent.parents]:
        if (folder / ref).is_file():
            return folder / ref
        if folder == ROOT:
            break
    return None


def _has_section(path, n):
    return re.search(rf"^#+\s*(?:§\s*)?{n}[.\s)]", path.read_text(), re.M) is not None


def _refs():
    for path, text in _code_files():
        for i, line in enumerate(text.splitlines(), 1):
            for m in DOC_REF.finditer(line):
                yield path, i, m.group(1).lstrip("/"), m.group(2)


def test_the_scan_finds_references():
    refs = {ref for _, _, ref, _ in _refs()}
    assert {"docs/plugins.md", "docs/backends.md", "README.md"} <= refs


def test_every_cited_doc_exists():
    bad = []
    for path, line, ref, section in _refs():
        if ref in NOT_IN_REPO:
            continue
        found = _exists(ref, path)
        where = f"{path.relative_to(ROOT)}:{line}"
        if found is None:
            bad.append(f"{where}: {ref} is not in the repository")
        elif section and not _has_section(found, section):
            bad.append(f"{where}: {ref} has no section {section}")
    assert not bad, "code cites documents that do not exist:\n" + "\n".join(bad)


def test_no_code_cites_a_design_document_outside_the_repository():
    bad = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}"
           for p, text in _code_files() for i, line in enumerate(text.splitlines(), 1)
           if OUTSIDE.search(line)]
    assert not bad, ("DESIGN.md/STYLE.md are not part of this repository: cite the doc in "
                     "docs/ that says the thing (move it there if none does):\n" + "\n".join(bad))


@pytest.mark.parametrize("line,want", [
    ("see docs/plugins.md.", [("docs/plugins.md", None)]),
    ("(docs/decisions.md section 5)", [("docs/decisions.md", "5")]),
    ("docs/decisions.md, §19", [("docs/decisions.md", "19")]),
    ("backends/opencl/README.md and CHANGELOG.md", [("backends/opencl/README.md", None),
                                                    ("CHANGELOG.md", None)]),
])
def test_the_pattern(line, want):
    assert [(m.group(1), m.group(2)) for m in DOC_REF.finditer(line)] == want
