"""The architecture of docs/architecture.md, enforced: layers import only downwards
(import-linter's contracts in the root pyproject.toml), no function-local imports
in the core except the listed ones, and the core proper stays small."""

from __future__ import annotations

import ast
import io
import pathlib
import shutil
import subprocess
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "core" / "tapeflow"

#: function-local imports the core may keep, by file (relative to core/tapeflow) and
#: imported module, with the reason. Anything else is a cycle in disguise.
ALLOWED_LOCAL_IMPORTS = {
    # optional dependencies, imported on first use (import tapeflow stays light)
    ("datasets.py", "sklearn.datasets"): "extra tapeflow[datasets]",
    ("models.py", "tqdm"): "progress bars, only when fit() draws one",
    ("train/checkpoint.py", "safetensors.numpy"): "only when a checkpoint is written/read",
    # tf.keras is a facade over tapeflow.models (it imports models); compile() resolves
    # names ("adam", "mse", "accuracy") through it when it runs
    ("models.py", ".keras"): "facade above models",
    ("kernels/math.py", "scipy.special"): "extra tapeflow[scipy]",
    ("kernels/math.py", "cupyx.scipy.special"): "part of CuPy, on the CUDA backend only",
    ("kernels/array.py", "cupyx"): "part of CuPy, on the CUDA backend only",
    ("summary/_records.py", "crc32c"): "extra tapeflow[tensorboard]",
    ("summary/_records.py", "tensorboardX.proto"): "extra tapeflow[tensorboard]",
    ("summary/_png.py", "PIL"): "extra tapeflow[tensorboard]",
    # importing mpi4py initialises MPI: only when a job of several processes starts
    ("distributed/_world.py", "mpi4py"): "extra tapeflow[mpi]",
    ("distributed/_world.py", "threadpoolctl"): "extra tapeflow[mpi]",
    ("distributed/_collectives.py", "cupy"): "only for tensors on a cuda device",
    ("distributed/_collectives.py", "cupy.cuda"): "NCCL, only for tensors on a cuda device",
    # the CLI and the pytest plugin import tapeflow only when they run: pytest loads the
    # plugin at start-up, before a test session sets TAPEFLOW_* variables
    ("__main__.py", "*"): "CLI",
    ("testing/*", "*"): "pytest plugin loaded at pytest start-up",
}


def _local_imports():
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    out.append((rel, "." * node.level + (node.module or ""), node.lineno))
                elif isinstance(node, ast.Import):
                    out.extend((rel, a.name, node.lineno) for a in node.names)
    return out


def _allowed(rel, mod):
    for (f, m) in ALLOWED_LOCAL_IMPORTS:
        if (f == rel or (f.endswith("/*") and rel.startswith(f[:-1]))) and m in ("*", mod):
            return True
    return False


def test_no_function_local_imports_in_the_core():
    bad = [f"core/tapeflow/{rel}:{line}: import of {mod} inside a function"
           for rel, mod, line in _local_imports() if not _allowed(rel, mod)]
    assert not bad, ("function-local imports hide import cycles; import at module level "
                     "(or register an observer in the lower layer):\n" + "\n".join(bad))


def test_allowed_local_imports_are_not_stale():
    found = {(rel, mod) for rel, mod, _ in _local_imports()}
    stale = [k for k in ALLOWED_LOCAL_IMPORTS if "*" not in k[0] + k[1] and k not in found]
    assert not stale, f"entries of ALLOWED_LOCAL_IMPORTS no longer needed: {stale}"


def code_lines(path: pathlib.Path) -> int:
    """Lines that hold code: not blank, not only a comment, not a docstring."""
    src = path.read_text()
    doc = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                doc.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in skip:
            lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in doc)
    return len(lines)


#: the core proper (DESIGN.md, issue 14): the runtime layer, the plugin loader and the tape
CORE_PROPER = ["runtime/*.py", "plugins/*.py", "autodiff/tape.py"]
CORE_PROPER_MAX_CODE_LINES = 3000


def core_proper_report():
    files = sorted(p for pat in CORE_PROPER for p in PKG.glob(pat))
    return {p.relative_to(PKG).as_posix(): (code_lines(p), len(p.read_text().splitlines()))
            for p in files}


def test_the_core_proper_stays_small():
    report = core_proper_report()
    total = sum(c for c, _ in report.values())
    detail = "\n".join(f"{c:6d} {n:6d}  {f}" for f, (c, n) in report.items())
    assert total <= CORE_PROPER_MAX_CODE_LINES, (
        f"the core proper has {total} lines of code (limit {CORE_PROPER_MAX_CODE_LINES}); "
        f"move what is not runtime into a layer above it.\n  code  lines  file\n{detail}")


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    if exe is None:
        pytest.fail("import-linter is not installed: `bash scripts/dev.sh install-test` "
                    "installs it (core's [test] extra)")
    r = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]


if __name__ == "__main__":       # python tests/test_architecture.py: the line counts
    rep = core_proper_report()
    for f, (c, n) in rep.items():
        print(f"{c:6d} {n:6d}  {f}")
    print(f"{sum(c for c, _ in rep.values()):6d} {sum(n for _, n in rep.values()):6d}  total "
          "(code lines, physical lines)")
