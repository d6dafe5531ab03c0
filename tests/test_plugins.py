"""Plugin loading: in-process registration, conflicts, and isolation of broken
plugins installed as real distributions (dist-info on sys.path, run in a subprocess)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.plugins import OpDef, hookimpl, register


def _make_dist(root, name, module_src, ep_name=None, version="1.0"):
    """Write an importable module plus a dist-info with a `tapeflow` entry point (naming
    the module's ``lib`` when it has one, else the module: the hook form)."""
    ep_name = ep_name or name
    src = textwrap.dedent(module_src)
    (root / f"{name}.py").write_text(src)
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    target = f"{name}:lib" if "lib = Library(" in src else name
    (info / "entry_points.txt").write_text(f"[tapeflow]\n{ep_name} = {target}\n")


def _run(code, root, **env):
    e = dict(os.environ)
    e["PYTHONPATH"] = str(root) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=120)


GOOD = """
import numpy as np
from tapeflow.plugins import Library

lib = Library("goodplug")
sq = lib.define("square", inputs=("x",), grad=lambda ctx, dy: dy * 2.0 * ctx.inputs[0])
lib.kernel(sq, "cpu", dtypes=("float32", "float64"))(np.square)
"""

BROKEN_IMPORT = "raise ImportError('this plugin is broken on purpose')\n"

#: (the hook form of 0.2, deprecated in 0.3: a failing hook still leaves nothing behind)
BROKEN_HOOK = """
from tapeflow.plugins import OpDef, hookimpl

@hookimpl
def tapeflow_register_ops(registry):
    registry.add_op(OpDef("brokenhook::half", inputs=("x",)))
    raise RuntimeError("hook exploded")
"""

OLD_API = """
TAPEFLOW_PLUGIN_API = 0
from tapeflow.plugins import hookimpl

@hookimpl
def tapeflow_register_ops(registry):
    pass
"""


@pytest.fixture
def site(tmp_path):
    _make_dist(tmp_path, "goodplug", GOOD)
    _make_dist(tmp_path, "brokenimport", BROKEN_IMPORT)
    _make_dist(tmp_path, "brokenhook", BROKEN_HOOK)
    _make_dist(tmp_path, "oldapi", OLD_API)
    return tmp_path


CHECK = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import tapeflow as tf
from tapeflow.plugins import plugin_report, get_op
st = {p.name: (p.status, p.reason) for p in plugin_report()}
for k in sorted(st): print("STATUS", k, st[k][0], "|", st[k][1])
for x in w: print("WARN", str(x.message).splitlines()[0])
x = tf.constant([3.0])
print("SQUARE", get_op("goodplug::square")(x).numpy().tolist())
print("ADD", (x + x).numpy().tolist())
print("HALF", "brokenhook::half" in __import__("tapeflow").runtime.registry.OPS)
"""


def test_broken_plugins_are_isolated(site):
    r = _run(CHECK, site)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "STATUS goodplug loaded" in out
    assert "STATUS brokenimport failed | ImportError at import: this plugin is broken" in out
    assert "STATUS brokenhook failed | RuntimeError: hook exploded" in out
    assert "STATUS oldapi skipped | built for tapeflow plugin API 0" in out
    assert "WARN tapeflow plugin 'brokenimport' (brokenimport 1.0) failed to import" in out
    assert "WARN tapeflow plugin 'brokenhook' (brokenhook 1.0) failed" in out
    assert "speaks API 1" in out
    assert "SQUARE [9.0]" in out and "ADD [6.0]" in out
    assert "HALF False" in out             # nothing half-registered


def test_strict_mode_reraises(site):
    r = _run("import tapeflow", site, TAPEFLOW_STRICT_PLUGINS="1")
    assert r.returncode != 0
    assert "this plugin is broken on purpose" in r.stderr or "hook exploded" in r.stderr


def test_autoload_off_and_allowlist(site):
    r = _run(CHECK.replace('print("SQUARE"', '#'), site, TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD="1")
    assert r.returncode == 0, r.stderr
    assert "STATUS goodplug skipped | TAPEFLOW_DISABLE_PLUGIN_AUTOLOAD is set" in r.stdout
    assert "STATUS cpu_numpy loaded" in r.stdout and "ADD [6.0]" in r.stdout
    r = _run(CHECK, site, TAPEFLOW_PLUGINS="goodplug")
    assert "STATUS goodplug loaded" in r.stdout
    assert "STATUS brokenimport skipped | not listed in TAPEFLOW_PLUGINS" in r.stdout
    assert "WARN" not in r.stdout


def test_conflicting_distributions(tmp_path):
    src = GOOD
    _make_dist(tmp_path, "goodplug", src)
    _make_dist(tmp_path, "copycat", src)
    r = _run(CHECK.replace('print("SQUARE"', '#'), tmp_path)
    # entry points load in name order: copycat first, so goodplug is the one refused
    assert "STATUS copycat loaded" in r.stdout
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("STATUS goodplug")][0]
    assert "failed | PluginConflictError" in line
    assert "'goodplug'" in line and "'copycat'" in line


def test_in_process_registration_and_missing_kernel():
    op = OpDef("testing::cube", inputs=("x",),
               grad=lambda ctx, dy: dy * 3.0 * ctx.inputs[0] * ctx.inputs[0])

    class Plugin:                 # the hook form of 0.2: still works in 0.3, and warns
        @hookimpl
        def tapeflow_register_ops(self, registry):
            registry.add_op(op)

        @hookimpl
        def tapeflow_register_kernels(self, registry):
            registry.add_kernel(op, "cpu", lambda x: x ** 3, dtypes=("float64",))

    with pytest.warns(DeprecationWarning, match=r"registry\.add_op.*tapeflow 0\.4"):
        info = register(Plugin(), name="cube-plugin")
    assert info.status == "loaded" and "testing::cube" in info.ops
    x = tf.constant(np.array([2.0]))
    assert op(x).numpy().tolist() == [8.0]
    g = tf.gradients_function(lambda v: op(v))(x)[0]
    assert g.numpy().tolist() == [12.0]
    with pytest.raises(tf.errors.NotFoundError) as e:
        op(tf.constant([2.0]))                       # float32: no kernel
    msg = str(e.value)
    assert "testing::cube" in msg and "float32" in msg and "dtype in [float64]" in msg
    assert "[Op:testing::cube] on cpu:0" in msg
    with pytest.raises(tf.errors.PluginConflictError, match="cube-plugin"):
        register(Plugin(), name="cube-again")


def test_kernel_errors_are_translated():
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        tf.constant(np.ones((2, 3), np.float32)) + tf.constant(np.ones((4,), np.float32))
    msg = str(e.value)
    assert "[Op:Add] on cpu:0" in msg and "float32[2, 3]" in msg and "float32[4]" in msg
