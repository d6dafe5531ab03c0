"""The layout of ``tapeflow.testing`` (issue 35): the conformance machinery is a
package of one-concern modules whose public names are all re-exported by
``tapeflow.testing.conformance`` (the import path suites and plugins use), and the
spec modules are all collected."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pkgutil
import re

from tapeflow.testing import conformance, specs


def _modules(pkg):
    return [importlib.import_module(f"{pkg.__name__}.{m.name}")
            for m in pkgutil.iter_modules(pkg.__path__)]


def _public_names(mod):
    """Functions and classes defined in ``mod`` and its module-level constants
    (upper-case assignments), without a leading underscore."""
    names = {n for n, v in vars(mod).items()
             if (inspect.isfunction(v) or inspect.isclass(v))
             and v.__module__ == mod.__name__ and not n.startswith("_")}
    for node in ast.parse(inspect.getsource(mod)).body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, ast.Name) and e.id.isupper() and not e.id.startswith("_"):
                    names.add(e.id)
    return names


def test_conformance_is_a_package_of_modules_under_800_lines():
    mods = _modules(conformance)
    assert {m.__name__.rsplit(".", 1)[1] for m in mods} >= {"samples", "checks", "suite"}
    long = {m.__name__: n for m in mods
            if (n := len(inspect.getsource(m).splitlines())) > 800}
    assert not long, f"conformance modules over 800 lines: {long}"


def test_the_package_reexports_every_public_name_of_its_modules():
    missing = {}
    for mod in _modules(conformance):
        for name in sorted(_public_names(mod)):
            if name not in conformance.__all__ or getattr(conformance, name) is not getattr(
                    mod, name):
                missing.setdefault(mod.__name__, []).append(name)
    assert not missing, ("public names of tapeflow.testing.conformance's modules that the "
                         f"package does not re-export (add them to its __all__): {missing}")
    unresolved = [n for n in conformance.__all__ if not hasattr(conformance, n)]
    assert not unresolved, f"names in conformance.__all__ that it lacks: {unresolved}"


def test_the_names_suites_import_stay_where_they_were():
    """What tests, plugins, the CLI and docs/plugins.md import from the old module."""
    from tapeflow.testing import opcheck as top_opcheck
    from tapeflow.testing.conformance import (KNOWN_DEVICE_TYPES, ErrorSample, OpSpec,
                                              Sample, opcheck, unavailable_devices)
    from tapeflow.testing.specs import OpSpec as Spec
    assert OpSpec is Spec and Sample and ErrorSample and KNOWN_DEVICE_TYPES
    assert opcheck is top_opcheck and callable(opcheck)       # the function, not the module
    assert callable(conformance.cases) and callable(conformance.check_spec)
    assert isinstance(unavailable_devices(), dict)
    # tests/conformance/test_harness.py patches this dict in place: one object
    from tapeflow.testing.conformance import checks
    assert conformance.UNTRACEABLE is checks.UNTRACEABLE


def test_every_spec_module_is_collected():
    """``specs.all_specs`` skips an area whose module does not exist (a plugin's suite
    may lack one): a module missing from AREAS, or an AREAS entry naming no module,
    would drop its specs silently."""
    mods = {m.name for m in pkgutil.iter_modules(specs.__path__) if not m.name.startswith("_")}
    areas = set(specs.AREAS)
    assert mods == areas, (f"spec modules not in AREAS: {sorted(mods - areas)}; AREAS without "
                           f"a module: {sorted(areas - mods)}")
    per_module = [s.name for m in _modules(specs) if m.__name__.rsplit(".", 1)[1] in areas
                  for s in m.SPECS]
    assert sorted(s.name for s in specs.all_specs()) == sorted(per_module)
    # the array family, in two modules under 800 lines (was one 881-line file)
    for area, names in {"array": {"fill", "range", "one_hot", "reshape", "concat",
                                  "__getitem__", "identity"},
                        "selection": {"where", "gather", "scatter_nd", "clip_by_value",
                                      "sort", "cumsum", "searchsorted", "unique_all"}}.items():
        mod = importlib.import_module(f"tapeflow.testing.specs.{area}")
        assert names <= {s.name for s in mod.SPECS}, area
        assert len(inspect.getsource(mod).splitlines()) <= 800, area


def test_the_test_kit_cites_docs_that_exist():
    """The kit's docstrings and comments point at pages of docs/ (fuzz.py cited
    a design document the repository does not have)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    bad = []
    for path in sorted((root / "core" / "tapeflow" / "testing").rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(root)
        bad += [f"{rel}: cites {m}" for m in re.findall(r"\bDESIGN(?:\.md)?\b", text)]
        bad += [f"{rel}: cites {m}, which does not exist"
                for m in re.findall(r"\bdocs/[\w./-]+\.md\b", text) if not (root / m).is_file()]
    assert not bad, "\n".join(bad)
