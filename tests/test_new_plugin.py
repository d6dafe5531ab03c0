"""``python -m tapeflow new-plugin NAME`` (issue 19): the skeleton it writes installs
with pip, shows in ``python -m tapeflow info``, and its generated tests pass as generated
on every available device. The commands of docs/plugins.md section 1's first block, run
by hand here -- but pip installs into a folder of the test's own, on the PYTHONPATH of
its subprocesses only: installed into the shared environment, its entry point was seen
half-installed by other test processes (a doc block run with ``-W error`` failed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tapeflow.testing import skeleton


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}


def _run(args, cwd, timeout=300, site=None):
    env = _env()
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_skeleton_installs_and_its_tests_pass_on_every_device(tmp_path):
    name = f"skel{os.getpid()}"
    r = _run(["-m", "tapeflow", "new-plugin", name, "--dir", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"wrote 6 files to {tmp_path / name}" in r.stdout
    dist = f"tapeflow-skel{os.getpid()}"
    site = tmp_path / "site"
    r = _run(["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
              "--disable-pip-version-check", "-q", "--target", str(site),
              str(tmp_path / name)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run(["-m", "tapeflow", "info", "--no-smoke", "--ops", f"{name}::*"], tmp_path, site=site)
    assert r.returncode == 0, r.stderr
    assert re.search(rf"^  loaded\s+{name}\s+{dist}\s+0\.1\.0\s+1\s+2\b", r.stdout, re.M), r.stdout
    assert f"{name}::cube" in r.stdout and "_cube_grad" in r.stdout
    r = _run(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path / name)],
             tmp_path, site=site)
    assert r.returncode == 0, r.stdout + r.stderr
    import tapeflow as tf
    # (per device: two OpenCL drivers are two devices)
    ran = [d for d in tf.config.list_devices() if d.split(":")[0] in ("cpu", "opencl")]
    passed = int(re.search(r"(\d+) passed", r.stdout).group(1))
    assert passed == len(ran) + 2, r.stdout        # cube per device, attr, doctest
    # nobody else sees it: the shared environment has no such plugin
    r = _run(["-m", "tapeflow", "info", "--no-smoke", "--ops", f"{name}::*"], tmp_path)
    assert r.returncode == 0 and not re.search(rf"^  loaded\s+{name}\b", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("bad", ["Caps", "1st", "with-dash", "class", "tapeflow", ""])
def test_a_bad_name_is_refused_with_the_rule(bad, tmp_path):
    r = _run(["-m", "tapeflow", "new-plugin", bad, "--dir", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "new-plugin:" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_never_overwritten(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("x")
    r = _run(["-m", "tapeflow", "new-plugin", "mine", "--dir", str(tmp_path)], tmp_path)
    assert r.returncode == 2 and "exists" in r.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["keep.txt"]


def test_the_skeleton_files_are_valid_python_and_name_the_plugin():
    files = skeleton.files("my_ops")
    for path, text in files.items():
        if path.endswith(".py"):
            compile(text, path, "exec")
    assert 'my_ops = "tapeflow_my_ops.ops:lib"' in files["my_ops/pyproject.toml"]
    assert 'name = "tapeflow-my-ops"' in files["my_ops/pyproject.toml"]
