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
    ("train/*", "safetensors.numpy"): "only when a checkpoint is written/read",
    ("kernels/math.py", "scipy.special"): "extra tapeflow[scipy]",
    ("summary/*", "crc32c"): "extra tapeflow[tensorboard]",
    ("summary/*", "tensorboardX.proto"): "extra tapeflow[tensorboard]",
    ("summary/*", "PIL"): "extra tapeflow[tensorboard]",
    # importing mpi4py initialises MPI: only when a job of several processes starts
    ("distributed/*", "mpi4py"): "extra tapeflow[mpi]",
    ("distributed/*", "threadpoolctl"): "extra tapeflow[mpi]",
    ("distributed/*", "cupy"): "only for tensors on a cuda device",
    ("distributed/*", "cupy.cuda"): "NCCL, only for tensors on a cuda device",
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


#: the core proper (docs/architecture.md, "Before and after"): the runtime layer, the plugin loader and the tape
CORE_PROPER = ["errors.py", "dtypes.py", "runtime/*.py", "plugins/*.py", "autodiff/tape.py"]
#: 3,000 until issue 36, which moved three jobs into the runtime, each replacing copies
#: elsewhere: the one promotion lattice of tf.* and tapeflow.numpy (dtypes.py, +100), the
#: one hooks object (context.py, +75) and the one path for an op's rules (registry.py,
#: +43); docs/architecture.md, "Before and after", keeps the figures. 3,320 since issue 44:
#: the one kernel contract (KernelSpec, BuildContext, lazy kernels, add_kernels: about
#: +85, replacing each backend's own unpacking and CUDA's LazyKernel) and the rules an
#: OpDef derives from its declaration (+30, from ops/library.py), and the thread tracer
#: the runtime reports to in one call (+10, was two calls through HOOKS.tracer), less the
#: hooks inside the runtime (-15). 3,400 since issue 46: TensorFlow's soft device placement and
#: TensorFlow-shaped device lists (devices.py, config.py: +26), and the host-only string
#: dtype every layer above converts, prints and checks (dtypes.py, dispatch.py, tensor.py).
#: 3,449 since issue 47: the composite-tensor protocol -- an op's input whose type defines
#: ``__tapeflow_dispatch__`` (RaggedTensor, SparseTensor, a plugin's) takes the op (+11 in
#: dispatch.py's general path; nothing on the fast path), and two conversions TensorFlow makes
#: that were refused: ``tf.constant([], tf.int32)``, str beside non-ASCII bytes and a list of
#: 0-d string tensors (+6), and
#: errors.py's name for ``tf.image`` functions (+1), and ``Tensor.device`` as TensorFlow's full
#: device name that equals every spelling of the device (devices.py's DeviceName: +31).
#: 3,472 since issue 48: TensorFlow's ``tf.config.threading`` (config.py: +23), with the
#: observer a backend registers to apply the intra-op count to its kernels and BLAS.
#: 3,508 since issue 49: TensorFlow's logical CPU devices (``tf.config.set_logical_device_
#: configuration``: config.py +24, devices.py's table +12), the one way TensorFlow's guides
#: and users run a MirroredStrategy with several replicas on a machine without GPUs
CORE_PROPER_MAX_CODE_LINES = 3508


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



# --- the layout (issue 35): no import cycle between modules, files and functions of a
# size a maintainer can read ------------------------------------------------------------

def _module_table():
    """``{dotted module name: (path, is_package)}`` of core/tapeflow; C extensions
    (``runtime/_speedups``) count as modules."""
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    for p in PKG.rglob("*.so"):
        parts = list(p.relative_to(PKG.parent).parts)
        parts[-1] = parts[-1].split(".")[0]
        mods.setdefault(".".join(parts), (p, False))
    return mods


def _module_level_imports(mods):
    """``{module: {modules of core/tapeflow it imports when it is imported}}``: imports
    at module level (also inside ``if``/``try`` blocks), not those inside functions
    or classes' methods; ``from pkg import name`` is an edge to ``pkg.name`` where that
    is a module, else to ``pkg`` (its ``__init__`` defines the name)."""
    graph = {}
    for mod, (path, is_pkg) in mods.items():
        if path.suffix != ".py":
            graph[mod] = set()
            continue
        here = mod.split(".") if is_pkg else mod.split(".")[:-1]
        deps = set()
        stack = list(ast.parse(path.read_text()).body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    deps.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            stack.extend(ast.iter_child_nodes(node))
        graph[mod] = {d for d in deps if d in mods and d != mod}
    return graph


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan's)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_no_import_cycle_between_modules():
    graph = _module_level_imports(_module_table())
    cycles = _cycles(graph)
    detail = "\n".join(
        "  " + ", ".join(c) + "\n    " + "; ".join(f"{m} -> {', '.join(sorted(graph[m] & set(c)))}"
                                              for m in c)
        for c in cycles)
    assert not cycles, ("modules of core/tapeflow that import each other at module level "
                        "(a package's __init__ counts as a module; move what both need into "
                        f"a module below them):\n{detail}")


def test_the_cycle_check_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


#: source files of core/ and backends/ longer than this carry the reason at their top
MAX_FILE_LINES = 800
#: ...in a line of their first 40 that starts (after ``#`` or in the docstring) with this
LONG_FILE_MARK = "Long file:"
#: functions longer than this (lines, docstring included) need an entry here, with why
MAX_FUNCTION_LINES = 120
ALLOWED_LONG_FUNCTIONS: dict = {}


def _sources():
    for top in ("core", "backends"):
        for p in sorted((ROOT / top).rglob("*")):
            if (p.suffix in (".py", ".c", ".h", ".cl") and p.is_file()
                    and not any(part.endswith(".egg-info") or part == "build"
                                for part in p.relative_to(ROOT).parts)):
                yield p


def test_no_long_file_without_a_reason():
    bad = []
    for p in _sources():
        lines = p.read_text().splitlines()
        if len(lines) > MAX_FILE_LINES and not any(
                ln.strip().lstrip("#").strip().startswith(LONG_FILE_MARK) for ln in lines[:40]):
            bad.append(f"{p.relative_to(ROOT)}: {len(lines)} lines")
    assert not bad, (f"files over {MAX_FILE_LINES} lines: split them by concern, or say why "
                     f"they are one file in a line '{LONG_FILE_MARK} ...' at their top:\n"
                     + "\n".join(bad))


def test_no_long_function():
    bad = []
    for p in _sources():
        if p.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                key = f"{p.relative_to(ROOT).as_posix()}:{node.name}"
                if n > MAX_FUNCTION_LINES and key not in ALLOWED_LONG_FUNCTIONS:
                    bad.append(f"{key} (line {node.lineno}): {n} lines")
    assert not bad, (f"functions over {MAX_FUNCTION_LINES} lines: split them (or add them to "
                     "ALLOWED_LONG_FUNCTIONS with the reason):\n" + "\n".join(bad))


#: functions that wrap *any* kernel (adaptors, not kernels): their inner function is the
#: wrapper, named after the function it wraps (``functools.wraps``), with why
ALLOWED_KERNEL_WRAPPERS = {
    "core/tapeflow/kernels/__init__.py:compute_in_float32":
        "the bfloat16 variant of any float16 kernel: runs it in float32",
}


def test_no_kernel_defined_inside_a_function():
    """The kernels of tapeflow.kernels and of the backends' k_*.py modules are named,
    module-level functions or methods: none is a closure of a factory."""
    paths = sorted(PKG.joinpath("kernels").glob("*.py"))
    paths += sorted(p for p in (ROOT / "backends").rglob("k_*.py"))
    bad = []
    for p in paths:
        for fn in ast.walk(ast.parse(p.read_text())):
            key = f"{p.relative_to(ROOT).as_posix()}:{getattr(fn, 'name', '')}"
            if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and key not in ALLOWED_KERNEL_WRAPPERS):
                bad.extend(f"{p.relative_to(ROOT)}:{inner.lineno} {inner.name} inside {fn.name}"
                           for inner in ast.walk(fn) if inner is not fn
                           and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)))
    assert not bad, "kernels defined inside functions:\n" + "\n".join(bad)

# --- issue 44: no private name crosses a package -----------------------------------------

def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _package_of(module):
    """``tapeflow.<sub>`` for a module of a subpackage, ``tapeflow`` for the top-level
    modules; another distribution's module (a backend, a plugin) is its own package."""
    parts = module.split(".")
    if parts[0] != "tapeflow":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 and (PKG / parts[1]).is_dir() else "tapeflow"


def _private_crossings(path, module, is_pkg, mods):
    """``(line, what)`` for each private name ``module`` (at ``path``) takes from another
    package: ``from pkg.mod import _name``, an import from a private module
    (``pkg._mod``), and ``mod._name`` read through an imported module."""
    mine = _package_of(module + ".x" if is_pkg and module != "tapeflow" else module)
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    tree = ast.parse(path.read_text())
    aliases, out = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if not target.startswith("tapeflow"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in mods:
                    aliases[a.asname or a.name] = sub
                owner = sub if sub in mods and not mods[sub][1] else target
                if _package_of(owner) == mine:
                    continue
                if _private(a.name) or any(_private(p) for p in target.split(".")):
                    out.append((node.lineno, f"from {target} import {a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tapeflow") and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr)):
            target = aliases[node.value.id]
            if _package_of(target + ".x" if mods.get(target, (0, False))[1] else target) != mine:
                out.append((node.lineno, f"{target}.{node.attr}"))
    return out


def test_no_private_name_crosses_a_package():
    """What another package needs from one has a public name (``runtime.wrap``, not
    ``runtime.tensor._wrap``): a plugin author who reads the core learns the public
    API. Checked for the core's packages and for the backends and plugins."""
    mods = _module_table()
    bad = []
    for mod, (path, is_pkg) in sorted(mods.items()):
        if path.suffix == ".py":
            bad += [f"{path.relative_to(ROOT)}:{ln}: {what}"
                    for ln, what in _private_crossings(path, mod, is_pkg, mods)]
    for path in sorted([*(ROOT / "backends").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]):
        if "egg-info" in path.parts or "build" in path.parts:
            continue
        rel = path.relative_to(ROOT)
        mod = ".".join(rel.with_suffix("").parts[2:])       # backends/<dir>/<pkg>/...
        bad += [f"{rel}:{ln}: {what}" for ln, what in
                _private_crossings(path, mod or "plugin", path.name == "__init__.py", mods)]
    assert not bad, "private names used across packages:\n" + "\n".join(bad)


def test_the_private_name_check_sees_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("from ..runtime.tensor import _wrap\nfrom ..runtime import dispatch\n"
                 "dispatch._run\nfrom ..runtime.tensor import wrap\n")
    mods = _module_table()
    found = _private_crossings(p, "tapeflow.tracing.m", False, mods)
    assert [ln for ln, _ in found] == [1, 3], found


# --- issue 44: fewer, fuller modules ------------------------------------------------------

#: modules of core/tapeflow (``*.py``, packages' ``__init__`` included): 167 when issue 44 began,
#: 120 when it ended. Issue 45 adds four concepts a reader names by TensorFlow's module paths:
#: the recurrent layers (layers/recurrent.py), the attention layers (layers/attention.py),
#: ``tf.app``/``tf.flags`` (app.py) and ``tf.io``/``tf.gfile`` (io.py). Issue 46 adds TensorFlow 2's
#: objects, each a concept TensorFlow names by its own module: ``tf.Module``/``tf.name_scope``
#: (module.py), ``tf.TensorSpec`` and concrete signatures (tracing/signatures.py),
#: ``tf.TensorArray`` (tracing/tensor_array.py), AutoGraph (tracing/autograph.py),
#: ``tf.saved_model`` (saved_model/: its package, the writer, the loader), the functional Keras
#: API (functional.py), the ``.keras`` format (keras/saving.py) and ``tf.strings``
#: (ops/strings.py), and ``tf.debugging``'s run-time checks (tracing/debugging.py). Issue 47
#: adds the tensors beyond dense numbers, each a concept TensorFlow names by its own module:
#: composite tensors and their dispatch (ops/composite.py), ``tf.RaggedTensor`` and
#: ``tf.ragged`` (ops/ragged.py, ops/ragged_ops.py), ``tf.SparseTensor``/``tf.sparse``
#: (ops/sparse.py), ``tf.random.Generator`` (random_generator.py), ``tf.image``
#: (ops/image.py), the higher-order functions ``map_fn``/``scan``/``fold*``
#: (ops/higher_order.py), text and CSV datasets (data/text.py) and ``tf.experimental``
#: (experimental/: ``tf.experimental.numpy`` is a public module path), and
#: tf.train.Example and tf.io.parse_example (data/example.py). Issue 49 adds ``tf.distribute``
#: (distribute/: the package, its strategies, distributed values, distributed input, the
#: multi-worker strategy and ``tf.distribute.cluster_resolver``, each a module path of
#: TensorFlow's own).
MAX_CORE_MODULES = 152

#: modules that only import names, each a public module path of TensorFlow that users
#: import from (``from tensorflow.keras.optimizers import Adam``): the namespace is the
#: concept. Any other module that only re-exports is a shim: fold it into its package.
PUBLIC_NAMESPACES = {
    "keras/losses.py": "tf.keras.losses",
    "keras/optimizers.py": "tf.keras.optimizers",
}


def _only_reexports(path):
    """Whether the module's body is a docstring, imports, ``__all__`` and aliases."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Delete)):
            continue
        if isinstance(node, ast.Assign) and (
                isinstance(node.value, (ast.Name, ast.Attribute))
                or isinstance(node.value, (ast.List, ast.Tuple))
                and all(isinstance(e, ast.Constant) for e in node.value.elts)):
            continue
        return False
    return True


def test_the_core_has_few_full_modules():
    mods = sorted(PKG.rglob("*.py"))
    assert len(mods) <= MAX_CORE_MODULES, (
        f"core/tapeflow has {len(mods)} modules (limit {MAX_CORE_MODULES}): a module is a "
        "concept a reader can name; fold small ones into the module of their concept")


def test_no_module_only_re_exports():
    """A package's ``__init__`` may assemble its public API; any other module that only
    re-exports names is a shim (``tracing/trace.py`` was one) unless it is a public
    TensorFlow module path (:data:`PUBLIC_NAMESPACES`)."""
    shims = [p.relative_to(PKG).as_posix() for p in sorted(PKG.rglob("*.py"))
             if p.name != "__init__.py" and _only_reexports(p)]
    bad = [m for m in shims if m not in PUBLIC_NAMESPACES]
    assert not bad, f"modules that only re-export names: {bad}"
    stale = [m for m in PUBLIC_NAMESPACES if m not in shims]
    assert not stale, f"PUBLIC_NAMESPACES entries that are no longer shims: {stale}"


def test_the_reexport_check_sees_one(tmp_path):
    p = tmp_path / "shim.py"
    p.write_text('"""doc"""\nfrom .a import b, c\n__all__ = ["b", "c"]\nd = b\n')
    assert _only_reexports(p)
    p.write_text('from .a import b\n\ndef f():\n    return b\n')
    assert not _only_reexports(p)


if __name__ == "__main__":       # python tests/test_architecture.py: the line counts
    rep = core_proper_report()
    for f, (c, n) in rep.items():
        print(f"{c:6d} {n:6d}  {f}")
    print(f"{sum(c for c, _ in rep.values()):6d} {sum(n for _, n in rep.values()):6d}  total "
          "(code lines, physical lines)")
