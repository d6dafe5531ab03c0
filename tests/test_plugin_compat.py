"""Plugins across releases (issue 30, item 8): a third-party op plugin written against
tapeflow 0.1.0 -- ``tests/fixtures/old_api_plugin``: a Library whose untyped attributes
are validated by its ops' own ``check`` with its own messages, tests asserting them, and
a second entry point in the hook form -- is installed and its
own test suite runs against this tapeflow: it passes, and where a coming release will
stop accepting what the plugin does, it gets a DeprecationWarning, never a failure
(docs/plugins.md, "What the plugin API promises"): 0.3 refuses an attr of another kind
than its default's, and 0.4 removes the hook form's ``registry.add_op`` (an op is
declared with a Library: issue 44).

Installed as tests/test_new_plugin.py installs the generated skeleton -- pip, offline,
no dependencies -- but into a folder on PYTHONPATH (``--target``) instead of the shared
environment, so no other test process sees the plugin; its tests run in a subprocess,
where ``import tapeflow`` finds it through its entry point as any installed plugin."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import tapeflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "old_api_plugin"


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    env.update(extra)
    return env


def _run(args, cwd, env=None, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The fixture plugin built and installed by pip into a folder of its own; returns
    (a copy of the plugin's source tree to run its tests in, that folder)."""
    tmp = tmp_path_factory.mktemp("oldapi")
    src = tmp / "old_api_plugin"          # a copy: pip's build files stay out of the tree
    shutil.copytree(FIXTURE, src, ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info"))
    site = tmp / "site"
    r = _run(["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
              "--disable-pip-version-check", "-q", "--target", str(site), str(src)], tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    eps = (site / "tapeflow_oldapi-1.0.0.dist-info" / "entry_points.txt").read_text()
    assert "oldapi = tapeflow_oldapi.ops:lib" in eps and "oldapi_hooks =" in eps, eps
    return src, site


def _plugin_tests(installed, *pytest_args):
    src, site = installed
    env = _env(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return _run(["-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", *pytest_args], src,
                env)


def test_the_0_1_plugins_own_tests_pass(installed):
    r = _plugin_tests(installed)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # 8 device-independent tests, and soft_clip and roll_last on each CPU device (the
    # plugin has CPU kernels only: the other devices are skipped, naming why)
    cpus = [d for d in tf.config.list_devices() if d.startswith("cpu")]
    assert int(re.search(r"(\d+) passed", out).group(1)) == 8 + 2 * len(cpus), out
    assert not re.search(r"\d+ (failed|errors?)\b", out), out
    # what 0.3 will refuse is announced to the plugin's author, naming the op, the attr,
    # the value, and what to declare
    assert re.search(r"\b2 warnings\b", out), out
    assert ("DeprecationWarning: oldapi::roll_last: attr 'steps' got float 2.0, which the "
            "op's check accepts but the kind read from its default (int) does not") in out
    assert "attr_types={'steps': ...}" in out
    # ... and what 0.4 removes, at the plugin's own line, naming what to write instead
    assert ("tapeflow_oldapi/hooks.py:16: DeprecationWarning: registry.add_op(OpDef(...)) in "
            "a hook is deprecated and removed in tapeflow 0.4: declare the op with a "
            "tapeflow.plugins.Library instead, @lib.op() or lib.define(name, ...)") in out


def test_the_deprecations_are_the_only_difference_from_0_1(installed):
    """With DeprecationWarnings as errors, exactly the tests relying on what is
    deprecated fail -- the whole float as an int attr, and the hook-form op (its plugin
    is then skipped, saying why) -- every other test (the plugin's own messages, its
    check, its values and gradients through the kit) passes as it did on 0.1.0."""
    r = _plugin_tests(installed, "-W", "error::DeprecationWarning")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    assert sorted(failed) == ["tests/test_oldapi.py::test_roll_last_takes_a_whole_float_as_steps",
                              "tests/test_oldapi.py::test_the_hook_form_op"], out
    assert ("tapeflow plugin 'oldapi_hooks' (tapeflow-oldapi 1.0.0) failed and was skipped: "
            "DeprecationWarning: registry.add_op(OpDef(...)) in a hook is deprecated") in out


def test_the_fixture_is_not_collected_by_tapeflows_own_suite():
    """tapeflow's suite walks tests/ with --doctest-modules: the fixture (which imports
    its plugin, not installed there) must contribute nothing and break nothing."""
    r = _run(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
              "tests/fixtures"], ROOT)
    assert r.returncode == 5 and "no tests collected" in r.stdout, r.stdout + r.stderr


def test_the_version_is_the_one_the_distribution_declares():
    """``tapeflow.__version__`` is the installed distribution's version, which must be
    the one core/pyproject.toml declares: a version bumped without reinstalling (pip
    install -e core) fails here. 0.2.0: the first release after 0.1.0 with plugin-facing
    breaking changes (CHANGELOG.md; 0.x: a minor bump)."""
    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "core" / "pyproject.toml").read_text(),
                         re.M).group(1)          # ([project]'s: the file's only version line)
    assert tf.__version__ == declared, (
        f"tapeflow.__version__ is {tf.__version__} but core/pyproject.toml says {declared}: "
        "reinstall with `pip install -e core`")
    major, minor = (int(p) for p in tf.__version__.split(".")[:2])
    assert (major, minor) >= (0, 2)
