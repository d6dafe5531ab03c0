"""Backends reach the core only through its public API (docs/backends.md): no
`_`-prefixed tapeflow module or name, no module of the core's layers, no other
backend. (import-linter checks the module graph; this checks the names too, and
the imports inside functions.)"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BACKENDS = {"tapeflow_cpu_numpy": ROOT / "backends/cpu_numpy/tapeflow_cpu_numpy",
            "tapeflow_cuda_cupy": ROOT / "backends/cuda_cupy/tapeflow_cuda_cupy",
            "tapeflow_opencl": ROOT / "backends/opencl/tapeflow_opencl"}
PUBLIC = {"tapeflow", "tapeflow.errors", "tapeflow.dtypes", "tapeflow.plugins",
          "tapeflow.kernels", "tapeflow.tracing.graph_fusion"}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            for a in node.names:
                yield node.lineno, node.module, a.name


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_backends_use_only_the_public_core_api(backend):
    bad = []
    for path in sorted(BACKENDS[backend].rglob("*.py")):
        for line, mod, name in _imports(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            top = mod.split(".")[0]
            if top in BACKENDS and top != backend:
                bad.append(f"{where}: imports another backend ({mod})")
            if top != "tapeflow":
                continue
            if not any(mod == p or (p != "tapeflow" and mod.startswith(p + "."))
                       for p in PUBLIC):
                bad.append(f"{where}: imports {mod}, not part of the backend API")
            if any(part.startswith("_") for part in mod.split(".")) or (
                    name is not None and name.startswith("_")):
                bad.append(f"{where}: imports a private name ({mod}.{name})")
    assert not bad, "\n".join(bad)
