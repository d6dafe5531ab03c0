"""Plugins that misbehave (issue 13): a plugin that calls sys.exit() or raises another
BaseException while loading is skipped with a warning instead of killing
``import tapeflow``; a gradient function that returns junk is reported naming the op
and its plugin; replacing a built-in kernel warns and shows in ``tapeflow info``.

Plugins are real distributions (a dist-info with an entry point on PYTHONPATH) loaded
by a fresh interpreter, as a user's would be."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, PluginOverrideWarning
from tapeflow.plugins import Library, register
from test_plugin_api import _make_dist    # a plugin as a real distribution on PYTHONPATH


REPORT = """
import warnings
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    import tapeflow as tf
for p in tf.plugins.plugin_report():
    if p.name.startswith("bad"):
        print("STATUS", p.name, p.status, "|", p.reason)
for x in w:
    print("WARN", str(x.message).splitlines()[0])
print("ALIVE", float(tf.reduce_sum(tf.ones([3]))))
"""


def _run(root, code=REPORT, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("body,shown", [
    ("import sys\nsys.exit(3)", "SystemExit at import: 3"),
    ("raise SystemExit('bye')", "SystemExit at import: bye"),
    ("class Boom(BaseException):\n    pass\nraise Boom('custom')", "Boom at import: custom"),
    ("raise GeneratorExit()", "GeneratorExit at import"),
])
def test_base_exception_at_plugin_import_does_not_kill_tapeflow(tmp_path, body, shown):
    _make_dist(tmp_path, "badexit", body, "badexit:plugin")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"STATUS badexit failed | {shown}" in r.stdout
    assert "WARN tapeflow plugin 'badexit' (badexit 1.0) failed to import" in r.stdout
    assert "ALIVE 3.0" in r.stdout


def test_sys_exit_in_a_register_hook_does_not_kill_tapeflow(tmp_path):
    _make_dist(tmp_path, "badhook", """
        import sys
        from tapeflow.plugins import hookimpl

        @hookimpl
        def tapeflow_register_ops(registry):
            sys.exit("no")
        """, "badhook")
    r = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "STATUS badhook failed | SystemExit: no" in r.stdout
    assert "ALIVE 3.0" in r.stdout


def test_strict_plugins_still_reraise_system_exit(tmp_path):
    _make_dist(tmp_path, "badexit", "import sys\nsys.exit(7)", "badexit:plugin")
    r = _run(tmp_path, TAPEFLOW_STRICT_PLUGINS="1")
    assert r.returncode == 7 and "ALIVE" not in r.stdout


def test_keyboard_interrupt_is_never_swallowed(tmp_path):
    _make_dist(tmp_path, "badkbd", "raise KeyboardInterrupt", "badkbd:plugin")
    r = _run(tmp_path)
    assert r.returncode != 0 and "KeyboardInterrupt" in r.stderr and "ALIVE" not in r.stdout


def test_failed_plugin_shows_in_info(tmp_path):
    _make_dist(tmp_path, "badexit", "import sys\nsys.exit(3)", "badexit:plugin")
    r = _run(tmp_path, code="import tapeflow.__main__ as m, json; "
                            "print(json.dumps(m.collect(smoke=False)['plugins']))")
    assert r.returncode == 0, r.stderr
    (p,) = [p for p in json.loads(r.stdout.splitlines()[-1]) if p["name"] == "badexit"]
    assert p["status"] == "failed" and "SystemExit" in p["reason"]


# --- gradient functions that return junk ----------------------------------------------
# (plugin ops: tests/test_plugin_api.py::test_a_wrong_gradient_is_an_error_naming_the_op)

def test_custom_gradient_junk_names_the_users_function():
    @tf.custom_gradient
    def f(x):
        def my_grad(dy):
            return "nope"
        return x * 2, my_grad

    x = tf.constant(3.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    with pytest.raises(InvalidArgumentError, match=r"f\.<locals>\.my_grad\) returned str"):
        tape.gradient(y, x)


# --- overrides ---------------------------------------------------------------------------

def test_overriding_a_builtin_kernel_warns_and_shows_in_info(tmp_path):
    _make_dist(tmp_path, "overrider", """
        import numpy as np
        from tapeflow.plugins import hookimpl

        @hookimpl
        def tapeflow_register_kernels(registry):
            registry.add_kernel("Tanh", "cpu", np.tanh, override=True)
        """, "overrider")
    code = """
        import json, warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import tapeflow as tf
        print("W", [(x.category.__name__, str(x.message)) for x in w
                    if "replaced" in str(x.message)])
        import tapeflow.__main__ as m
        data = m.collect(smoke=False)
        print("J", json.dumps(data["overrides"]))
        print("T", "Overrides" in m.render(data))
    """
    r = _run(tmp_path, code=code)
    assert r.returncode == 0, r.stderr
    lines = {ln[:2]: ln[2:] for ln in r.stdout.splitlines()}
    assert "PluginOverrideWarning" in lines["W "]
    assert ("'overrider' replaced the kernel of op 'Tanh' on device type 'cpu' registered by "
            "'tapeflow-cpu-numpy'") in lines["W "]
    assert {"op": "Tanh", "device_type": "cpu", "replaced": "tapeflow-cpu-numpy",
            "by": "overrider"} in json.loads(lines["J "])
    assert lines["T "].strip() == "True"


def test_override_in_process_warns_once():
    ns = "relover"
    lib = Library(ns)

    @lib.op()
    def g(x):
        """identity"""

    lib.kernel(g, "cpu")(lambda x: x)
    register(lib)
    other = Library(ns)
    other.kernel(g, "cpu", override=True)(lambda x: x + 0)
    with pytest.warns(PluginOverrideWarning, match="replaced the kernel of op 'relover::g'"):
        register(other, name="relover_other")
