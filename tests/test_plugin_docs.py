"""docs/plugins.md cannot drift from the code (datasette's documentation tests).

* The reference section (between the GENERATED REFERENCE markers) must be exactly
  what :func:`reference` makes from the hook specifications, the ``Library``,
  ``Registry`` and ``OpDef`` signatures and docstrings, and ``tapeflow.plugins.__all__``.
  Regenerate it with ``.venv/bin/python tests/test_plugin_docs.py --update``.
* The tutorial's files (fenced blocks whose first line is ``# myproj/<path>``) are
  written to a temporary folder, built and installed with pip (no network), and
  then: ``python -m tapeflow info`` lists the plugin, the usage example runs, and the
  tutorial's own tests pass. The hook-form and conformance examples run too.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "plugins.md"
BEGIN = "<!-- BEGIN GENERATED REFERENCE -->"
END = "<!-- END GENERATED REFERENCE -->"


# --- the generated reference ---------------------------------------------------------------

def _sig(obj, drop_self=False):
    """A signature without parameter annotations (names, kinds and defaults are the
    contract), with the return annotation when there is one."""
    sig = inspect.signature(obj)
    params = [p.replace(annotation=p.empty) for p in sig.parameters.values()]
    if drop_self and params and params[0].name == "self":
        params = params[1:]
    ret = sig.return_annotation
    s = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    if ret is not inspect.Signature.empty:
        s += f" -> {ret.split('.')[-1] if isinstance(ret, str) else ret.__name__}"
    return s


def _markdown(doc):
    """A docstring as Markdown: Sphinx roles become code, ``Args:`` entries a list."""
    doc = re.sub(r":\w+:`~?([\w.]+)`", lambda m: f"``{m.group(1).split('.')[-1]}``", doc)
    out, in_args = [], False
    for line in doc.split("\n"):
        if line in ("Args:", "Returns:", "Raises:"):
            in_args = True
            out.append(f"**{line[:-1]}**\n")
        elif in_args and re.match(r"    \S", line):
            name, _, rest = line.strip().partition(": ")
            out.append(f"- ``{name}``: {rest}" if rest else f"- {line.strip()}")
        elif in_args and line.startswith("        "):
            out[-1] += " " + line.strip()
        else:
            in_args = False
            out.append(line)
    return "\n".join(out)


def _doc(obj):
    d = inspect.getdoc(obj)
    return _markdown(d) if d else "_No docstring._"


def _entry(title, obj, drop_self=False):
    return f"#### `{title}{_sig(obj, drop_self)}`\n\n{_doc(obj)}\n"


def _methods(cls, skip=()):
    return [(n, f) for n, f in vars(cls).items()
            if inspect.isfunction(f) and not n.startswith("_") and n not in skip]


def reference() -> str:
    """The reference section of docs/plugins.md, from the code."""
    import tapeflow.plugins as P
    from tapeflow.plugins import hookspecs
    hooks = [(n, f) for n, f in vars(hookspecs).items()
             if inspect.isfunction(f) and hasattr(f, "tapeflow_spec")]
    out = [f"### Hooks (`tapeflow.plugins.hookspecs`, plugin API version {hookspecs.API_VERSION})",
           "", _doc(hookspecs), ""]
    out += [_entry(n, f) for n, f in hooks]
    out += ["### `tapeflow.plugins.Library`", "",
            f"#### `Library{_sig(P.Library.__init__, True)}`", "", _doc(P.Library), ""]
    hook_names = {n for n, _ in hooks}
    out += [_entry(f"lib.{n}", f, True) for n, f in _methods(P.Library, skip=hook_names)]
    out += ["### `tapeflow.plugins.Registry` (what every hook receives)", "",
            _doc(P.Registry), ""]
    out += [_entry(f"registry.{n}", f, True) for n, f in _methods(P.Registry)]
    out += ["### `tapeflow.plugins.OpDef`", "", f"#### `OpDef{_sig(P.OpDef.__init__, True)}`",
            "", _doc(P.OpDef), ""]
    out += ["### In-process registration", "", _entry("tapeflow.plugins.register", P.register)]
    out += ["### Public names of `tapeflow.plugins`", "",
            ", ".join(f"`{n}`" for n in sorted(P.__all__)), ""]
    return "\n".join(out).rstrip() + "\n"


def _doc_text():
    return DOC.read_text()


def _section(text):
    i, j = text.index(BEGIN), text.index(END)
    return text[i + len(BEGIN):j].strip("\n") + "\n"


def update():
    text = _doc_text()
    i, j = text.index(BEGIN), text.index(END)
    DOC.write_text(text[:i + len(BEGIN)] + "\n" + reference() + text[j:])


def test_reference_matches_the_code():
    want = reference()
    got = _section(_doc_text())
    if got != want:
        import difflib
        diff = "".join(difflib.unified_diff(got.splitlines(True), want.splitlines(True),
                                            "docs/plugins.md", "generated from the code"))
        pytest.fail("docs/plugins.md's reference is out of date; run "
                    "`.venv/bin/python tests/test_plugin_docs.py --update`\n" + diff)


def test_every_hook_and_method_is_documented():
    from tapeflow.plugins import Library, Registry, hookspecs
    section = _section(_doc_text())
    names = [n for n, f in vars(hookspecs).items() if hasattr(f, "tapeflow_spec")]
    assert names and all(f"#### `{n}(" in section for n in names)
    assert all(f"#### `lib.{n}(" in section for n, _ in _methods(Library, skip=names))
    assert all(f"#### `registry.{n}(" in section for n, _ in _methods(Registry))
    # the hand-written part names the environment variables the manager reads
    import tapeflow.plugins.manager as m
    for var in re.findall(r"``(TAPEFLOW_[A-Z_]+)", m.__doc__):
        assert var in _doc_text(), var


# --- the tutorial, built and installed for real -------------------------------------------

def _files(text, prefix):
    """``{relative path: content}`` of the fenced blocks whose first line is
    ``# <prefix><path>``."""
    out = {}
    for body in re.findall(r"```[^\n]*\n(.*?)```", text, re.S):
        first = body.split("\n", 1)[0]
        m = re.fullmatch(r"# (" + re.escape(prefix) + r"\S+)", first)
        if m:
            out[m.group(1)] = body
    return out


def _env(site=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    if site is not None:
        env["PYTHONPATH"] = str(site) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _py(args, cwd, site=None, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(site), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    root = tmp_path_factory.mktemp("tutorial")
    files = _files(_doc_text(), "myproj/")
    assert set(files) == {"myproj/pyproject.toml", "myproj/tapeflow_myproj/__init__.py",
                          "myproj/tapeflow_myproj/ops.py", "myproj/tests/test_mish.py"}
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
    site = root / "site"
    r = _py(["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", "--target", str(site), str(root / "myproj")], root)
    assert r.returncode == 0, r.stdout + r.stderr
    return root, site


def test_tutorial_plugin_installs_and_shows_in_info(tutorial):
    root, site = tutorial
    r = _py(["-m", "tapeflow", "info", "--no-smoke", "--ops", "myproj::*"], root, site)
    assert r.returncode == 0, r.stderr
    row = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("  loaded  myproj ")]
    assert row and row[0][2:5] == ["tapeflow-myproj", "0.1.0", "1"], r.stdout
    cov = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("  myproj::mish")]
    assert cov and "f32,f64" in cov[0], r.stdout


def test_tutorial_usage_example_runs(tutorial):
    root, site = tutorial
    blocks = [b for b in re.findall(r"```python[^\n]*\n(.*?)```", _doc_text(), re.S)
              if "from tapeflow_myproj import mish" in b and "def test_" not in b]
    assert len(blocks) == 1
    r = _py(["-W", "error::RuntimeWarning", "-c", blocks[0]], root, site)
    assert r.returncode == 0, r.stderr
    import numpy as np
    got = [[float(v) for v in re.search(r"\[(.*?)\]", ln).group(1).split()]
           for ln in r.stdout.splitlines()]
    x = np.array([-1.0, 0.0, 2.0])
    sp, sg = np.logaddexp(0, x), 1 / (1 + np.exp(-x))
    t = np.tanh(sp)
    d1 = t + x * (1 - t * t) * sg
    d2 = 2 * (1 - t * t) * sg + x * (1 - t * t) * sg * (1 - sg) - 2 * x * t * (1 - t * t) * sg * sg
    np.testing.assert_allclose(got, [x * t, x * t, d1, d2], rtol=1e-5, atol=1e-6)


def test_tutorial_tests_pass_on_every_device(tutorial):
    root, site = tutorial
    r = _py(["-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "myproj/tests"], root, site)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\b[1-9]\d* passed", r.stdout), r.stdout


def test_hook_form_example_runs(tmp_path):
    """Section 3's hook-form plugin (kernels for an op another plugin's Library
    declares) runs, and uses nothing deprecated."""
    block = next(b for b in re.findall(r"```python[^\n]*\n(.*?)```", _doc_text(), re.S)
                 if "def tapeflow_register_kernels" in b and "# cube_kernels.py" in b)
    (tmp_path / "cube_kernels.py").write_text(block)
    code = ("import tapeflow as tf, cube_kernels\n"
            "from tapeflow.plugins import Library, register\n"
            "lib = Library('myproj')\n"
            "cube = lib.define('cube', inputs=('x',),\n"
            "                  grad=lambda ctx, dy: dy * 3.0 * ctx.inputs[0] ** 2)\n"
            "register(lib)\n"
            "register(cube_kernels)\n"
            "x = tf.constant([2.0], device='cpu:0')\n"
            "print(cube(x).numpy(), tf.gradients_function(cube)(x)[0].numpy())")
    r = _py(["-W", "error::DeprecationWarning", "-c", code], tmp_path, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["[8.]", "[12.]"]


def test_conformance_example_runs_against_a_device(tmp_path):
    files = _files(_doc_text(), "backend_tests/")
    assert set(files) == {"backend_tests/test_conformance.py"}
    (tmp_path / "backend_tests").mkdir()
    (tmp_path / "backend_tests" / "test_conformance.py").write_text(
        files["backend_tests/test_conformance.py"])
    r = _py(["-m", "pytest", "-q", "-p", "no:cacheprovider", "backend_tests",
             "--tapeflow-device", "cpu:0", "-k", "add-float32 or gradients and mul"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\b([2-9]|[1-9]\d+) passed", r.stdout), r.stdout   # (two or more)


def test_known_gaps_example_declares_gaps(tmp_path):
    """Section 3's `tapeflow_known_gaps` example: registered, its patterns are known gaps
    and they match the test ids they are written for."""
    block = next(b for b in re.findall(r"```python[^\n]*\n(.*?)```", _doc_text(), re.S)
                 if "def tapeflow_known_gaps" in b)
    (tmp_path / "gaps.py").write_text("from tapeflow.plugins import hookimpl\n" + block)
    code = ("import tapeflow as tf, gaps, json\n"
            "from tapeflow.testing import conformance\n"
            "tf.plugins.register(gaps)\n"
            "known = tf.plugins.known_gaps()\n"
            "ids = ['test_forward[erf-float16-mydev:0]', 'test_gradients[matrix_inverse-float64-mydev:1]',\n"
            "       'test_forward[erf-float32-mydev:0]']\n"
            "print(json.dumps([[p for p in known if conformance.gap_matches(p, i)] for i in ids]))")
    r = _py(["-c", code], tmp_path, tmp_path)
    assert r.returncode == 0, r.stderr
    import json
    got = json.loads(r.stdout)
    assert got[0] == ["test_forward[erf-float16-mydev:*]"] and got[1] == ["*[matrix_inverse-*-mydev:*]"]
    assert got[2] == []


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
        print(f"updated the reference in {DOC}")
    else:
        print(textwrap.dedent(__doc__))
        sys.exit(2)
