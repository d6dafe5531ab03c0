"""Every command in every doc is run by a test, so the docs cannot rot.

The documents are the README, ``docs/*.md`` and the README of every backend, plugin and
the core. A fenced block whose language is a shell or Python says, after the language,
who runs it (``docs/writing-docs.md``)::

    ```python run                 this test runs it (a fresh interpreter, the repository
    ```sh run                     root as the working directory, .venv/bin/python = this
                                  interpreter); comments ``# tf.Tensor(...)`` after a
                                  Python line must appear in what it prints
    ```sh tested-by=PATH::NAME    the named test runs it, or checks it against what runs
                                  (PATH must define NAME and mention the document;
                                  ``tested-by=.ci/run``: the block is what CI runs)

A shell or Python block with neither is a failure naming the file and line: a command a
reader can copy must be one a test runs. Other blocks (``text``, ``toml``, unlabelled
output) are not commands.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND_LANGS = {"python", "py", "sh", "bash", "shell", "console"}
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.S | re.M)


def documents():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for pattern in ("core/README.md", "backends/*/README.md", "plugins/*/README.md"):
        docs += sorted(ROOT.glob(pattern))
    return [d for d in docs if d.is_file()]


def blocks():
    """``(doc, line, lang, marker, body)`` of every fenced block of every document."""
    out = []
    for doc in documents():
        text = doc.read_text()
        for m in FENCE.finditer(text):
            info = m.group(1).split()
            lang = info[0] if info else ""
            line = text.count("\n", 0, m.start()) + 1
            out.append((doc, line, lang, " ".join(info[1:]), m.group(2)))
    return out


def _where(doc, line):
    return f"{doc.relative_to(ROOT)}:{line}"


COMMANDS = [b for b in blocks() if b[2] in COMMAND_LANGS]
RUN = [b for b in COMMANDS if b[3] == "run"]
DELEGATED = [b for b in COMMANDS if b[3].startswith("tested-by=")]


def test_every_command_block_is_run_by_a_test():
    unmarked = [f"{_where(d, n)}: ```{lang} {marker}".rstrip()
                for d, n, lang, marker, _ in COMMANDS
                if marker != "run" and not marker.startswith("tested-by=")]
    assert not unmarked, (
        "fenced command blocks that no test runs (mark them `run`, or "
        "`tested-by=tests/<file>.py::<test>` and make that test run them):\n  "
        + "\n  ".join(unmarked))
    assert len(RUN) >= 10 and len(DELEGATED) >= 5      # the scan itself works


@pytest.mark.parametrize("block", DELEGATED, ids=[_where(b[0], b[1]) for b in DELEGATED])
def test_delegated_block_names_a_test_that_exists(block):
    doc, line, _, marker, body = block
    target = marker.split("=", 1)[1]
    if target == ".ci/run":
        # CI runs exactly these lines of the README's quick start
        ci = (ROOT / ".ci" / "run").read_text()
        cmds = [ln.split("#")[0].strip() for ln in body.splitlines() if ln.strip()]
        assert any(c and c in ci for c in cmds), (_where(doc, line), cmds)
        return
    path, _, name = target.partition("::")
    f = ROOT / path
    assert f.is_file(), f"{_where(doc, line)}: {path} does not exist"
    src = f.read_text()
    assert re.search(rf"^def {re.escape(name)}\(", src, re.M), \
        f"{_where(doc, line)}: {path} defines no test {name}"
    assert doc.name in src, f"{_where(doc, line)}: {path} never mentions {doc.name}"


def _runnable_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    env["PYTHONWARNINGS"] = "error::RuntimeWarning"
    return env


def _shell(body):
    """The block's commands with ``.venv/bin/python`` (and a bare ``python``) as this
    interpreter, so the block runs in the environment the tests run in."""
    py = shlex.quote(sys.executable)
    lines = []
    for ln in body.splitlines():
        ln = re.sub(r"(^|\s)(\.venv/bin/python|python3?)(?=\s)", rf"\g<1>{py}", ln)
        lines.append(ln)
    return "set -euo pipefail\n" + "\n".join(lines)


@pytest.mark.parametrize("block", RUN, ids=[_where(b[0], b[1]) for b in RUN])
def test_runnable_block_runs(block, tmp_path):
    doc, line, lang, _, body = block
    where = _where(doc, line)
    if lang in ("python", "py"):
        script = tmp_path / "block.py"
        # a document's Python blocks continue its first one: `tf` is tapeflow in every block
        script.write_text("import tapeflow as tf\n" + body)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-c", _shell(body)]
    p = subprocess.run(cmd, cwd=ROOT, env=_runnable_env(), capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, f"{where} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    if lang in ("python", "py"):
        # values the block's comments say it prints
        for want in re.findall(r"# (tf\.Tensor\(.*?\))\s*$", body, re.M):
            pattern = re.escape(want).replace(r"\.\.\.", ".*?")     # `...` elides
            assert re.search(pattern, p.stdout), \
                f"{where}: expected {want!r} in the output:\n{p.stdout}"


# --- blocks whose commands a test checks against what runs -----------------------------------

def _dev_sh_reqs(var):
    """The requirement list ``var`` (RUNTIME_REQS / TEST_REQS) of scripts/dev.sh."""
    text = (ROOT / "scripts" / "dev.sh").read_text()
    m = re.search(rf"^{var}=\((.*?)\)\s*$", text, re.S | re.M)
    assert m, var
    words = shlex.split(m.group(1).replace('$ROOT/', ''), comments=True)
    return [w for w in words]


def test_quick_start_by_hand_matches_dev_sh():
    """README.md, "What they do, by hand": the same pip requirements as scripts/dev.sh's
    `demo` and `test` (which CI runs), and the demo's two scripts exist and run in tests
    (examples/demo.py here, examples/train_cnn.py in tests/training/test_demo.py)."""
    readme = (ROOT / "README.md").read_text()
    block = next(b for d, _, _, _, b in COMMANDS
                 if d.name == "README.md" and "python3 -m venv .venv" in b)
    pip_lines = re.findall(r"pip install (.*?)(?:\s+#[^\n]*)?$",
                           block.replace("\\\n", " "), re.M)
    assert len(pip_lines) == 2, pip_lines
    assert shlex.split(pip_lines[0]) == _dev_sh_reqs("RUNTIME_REQS")
    assert shlex.split(pip_lines[1]) == _dev_sh_reqs("TEST_REQS")
    assert "examples/demo.py" in block and "examples/train_cnn.py" in block
    assert "bash scripts/dev.sh demo" in readme


def test_demo_script_runs():
    """examples/demo.py, the first half of `bash scripts/dev.sh demo`."""
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], cwd=ROOT,
                       env=_runnable_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]


def test_plugin_install_lines_name_real_distributions():
    """Every `pip install -e <path>` in a document installs a folder of this repository
    that is a distribution (has a pyproject.toml), with extras it declares."""
    import tomllib
    for doc, line, _, _, body in COMMANDS:
        for m in re.finditer(r"pip install((?: [^\n#]*)?)", body.replace("\\\n", " ")):
            for word in shlex.split(m.group(1)):
                if word.startswith("-") or "/" not in word or word.startswith(("http", ".venv", "/")):
                    continue
                path, _, extras = word.partition("[")
                proj = ROOT / path.lstrip("./") / "pyproject.toml"
                if path.startswith("./myproj") or path.startswith("myproj"):
                    continue           # the tutorial's own folder (tests/test_plugin_docs.py)
                assert proj.is_file(), f"{_where(doc, line)}: {word} is not a distribution here"
                declared = tomllib.loads(proj.read_text())["project"].get("optional-dependencies", {})
                for extra in extras.rstrip("]").split(","):
                    if extra:
                        assert extra in declared, f"{_where(doc, line)}: {path} has no extra [{extra}]"
