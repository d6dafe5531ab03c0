"""scripts/gpu_check.py (issue 29), without a GPU: `check --dry-run` runs every check on
the CuPy stand-in (tests/backends/fake_cupy) through the same machinery as on a GPU
machine (subprocesses with time caps, logs, pytest's counts, the benchmarks' JSON, the
summary, the exit code), with a failing and a hanging check injected; `wheelhouse`
computes its list offline, its pip command is one pip accepts, and it downloads one
small wheel for real."""

import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gc = _module()


def _env():
    env = dict(os.environ)
    for v in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"):
        env.pop(v, None)
    return env


def _table(summary):
    """``{check: (status, the whole row)}`` from summary.md's table."""
    rows = {}
    for line in summary.splitlines():
        m = re.match(r"^\| ([\w-]+) \| (passed|failed|timeout|skipped)\b", line)
        if m:
            rows[m.group(1)] = (m.group(2), line)
    return rows


def test_dry_run_has_a_row_per_check_and_goes_on_after_a_failure_and_a_timeout(tmp_path):
    out = tmp_path / "out"
    t0 = time.monotonic()
    # the test command's form: through scripts/dev.sh (plain python3 runs the script; the
    # checks run with this interpreter)
    p = subprocess.run(["bash", str(ROOT / "scripts" / "dev.sh"), "gpu-check", str(out),
                        "--dry-run", "--python", sys.executable, "--inject", "fail,timeout"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    summary = (out / "summary.md").read_text()
    assert p.returncode == 1, p.stdout + p.stderr + summary
    rows = _table(summary)
    names = ["install", "injected-fail", "injected-timeout"] + [c[0] for c in gc.CHECKS]
    assert list(rows) == names, summary
    assert rows["injected-fail"][0] == "failed"
    assert rows["injected-timeout"][0] == "timeout", rows["injected-timeout"]
    assert rows["install"][0] == "skipped" and "dry run" in rows["install"][1]
    # every check after the injected ones ran, and none failed
    for name in ("info", "gpu-only", "dlpack", "bench-conv", "bench-graphs", "conformance",
                 "seeds"):
        assert rows[name][0] == "passed", rows[name]
    for name in ("nccl", "opencl"):          # (no NCCL on the stand-in; OpenCL may be absent)
        assert rows[name][0] in ("passed", "skipped"), rows[name]
    for name in ("gpu-only", "conformance", "seeds"):
        assert re.search(r"\d+ passed", rows[name][1]), rows[name]
    assert "(failed or timed out: injected-fail, injected-timeout)" in summary
    assert "DRY RUN" in summary and "## Targets" in summary and "## Machine" in summary
    for fig in ("conv2d forward+backward", "CNN Adam step", "CUDA graph / PyTorch eager",
                "eager / PyTorch eager", "fused elementwise chain"):
        assert fig in summary, fig
    for name in names[1:]:
        assert (out / f"{name}.log").exists(), name
    assert "an injected hanging check" in (out / "injected-timeout.log").read_text()
    assert "timed out: killed" in (out / "injected-timeout.log").read_text()
    data = json.loads((out / "gpu_compare.json").read_text())
    assert data["_meta"]["tiny"] and "tapeflow-cpu" in data["cnn32"]["median"]
    assert json.loads((out / "cuda_graphs.json").read_text())["chain"]
    assert took < 150, f"the dry run took {took:.0f} s"


def test_exit_code_is_zero_when_nothing_fails_and_only_selects(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "check", str(tmp_path), "--dry-run",
                        "--python", sys.executable, "--only", "info"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120)
    summary = (tmp_path / "summary.md").read_text()
    assert p.returncode == 0, p.stdout + p.stderr + summary
    assert list(_table(summary)) == ["install", "info"], summary
    assert "Fake CUDA device" in summary
    p = subprocess.run([sys.executable, str(SCRIPT), "check", str(tmp_path), "--dry-run",
                        "--only", "nonsense"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "unknown check" in p.stderr


def test_a_check_over_the_budget_is_skipped_and_said(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "check", str(tmp_path), "--dry-run",
                        "--python", sys.executable, "--only", "seeds", "--budget", "5"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    rows = _table((tmp_path / "summary.md").read_text())
    assert p.returncode == 0 and rows["seeds"][0] == "skipped", rows
    assert "out of time" in rows["seeds"][1]


def test_pytest_output_parsing():
    R = gc.Run
    xdist = ("FAILED tests/a.py::test_x[cuda:0] - AssertionError\n"
             "ERROR tests/b.py::test_y\n"
             "25 failed, 2141 passed, 10 skipped, 1 error, 2 xfailed in 64.40s (0:01:04)\n")
    r = gc.pytest_result([R(1, False, 64.4, xdist)], "all pass")
    assert r.status == "failed"
    assert r.failures == ["tests/a.py::test_x[cuda:0]", "tests/b.py::test_y"]
    assert r.detail == "2141 passed, 25 failed, 1 error, 10 skipped, 2 xfailed"
    ok = "==== 12 passed, 3 deselected in 2.53s ====\n"
    assert gc.pytest_result([R(0, False, 2.5, ok)]).status == "passed"
    skipped = ("SKIPPED [3] tests/t.py:12: needs a CUDA GPU (CuPy)\n"
               "3 skipped in 0.5s\n")
    r = gc.pytest_result([R(0, False, 0.5, skipped)])
    assert r.status == "skipped" and r.figure == "needs a CUDA GPU (CuPy)"
    killed = "....F.... [ 41%]\n....\n# timed out: killed after 180.0 s\n"
    r = gc.pytest_result([R(None, True, 180.0, killed)])
    assert r.status == "timeout" and "at 41%" in r.detail
    assert gc.pytest_result([R(5, False, 1, "no tests ran in 0.1s\n")]).status == "skipped"
    assert gc.pytest_result([R(4, False, 1, "ERROR: usage\n")]).status == "failed"


def test_wheelhouse_list_is_computed_offline_and_carries_nothing_the_gpu_has():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "dev.sh"), "wheelhouse", "--list"],
                       cwd=ROOT, env=dict(_env(), PIP_NO_INDEX="1"), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for name, spec, _ in gc.WHEELS:
        assert name + spec in p.stdout
        assert gc.normalize(name) not in gc.GPU_MACHINE_HAS
    for there in ("numpy", "cupy-cuda13x", "torch", "mpi4py", "nvidia-cudnn-cu13",
                  "ml-dtypes", "pytest", "scipy"):
        assert there in gc.GPU_MACHINE_HAS and f"  {there}" not in p.stdout
    # the project's dependencies are on the GPU machine or in the wheelhouse
    carried = {gc.normalize(n) for n, _, _ in gc.WHEELS}
    for dep in ("ml-dtypes", "numpy", "pluggy", "safetensors", "tqdm", "scipy", "pyopencl",
                "mako", "scikit-learn", "crc32c", "pillow", "tensorboardx", "mpi4py",
                "threadpoolctl", "nvidia-cudnn-frontend"):
        assert dep in carried or dep in gc.GPU_MACHINE_HAS, dep
    assert "--only-binary=:all:" in p.stdout and "--python-version 3.12" in p.stdout


def test_the_pip_download_command_is_one_pip_accepts(tmp_path):
    cmd = gc.pip_download_cmd(tmp_path, ["mako"], "3.12", python=sys.executable)
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("-d") + 1] == str(tmp_path) and cmd[-1] == "mako"
    plats = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--platform"]
    assert "manylinux_2_28_x86_64" in plats and "manylinux_2_17_x86_64" in plats
    helptext = subprocess.run([sys.executable, "-m", "pip", "download", "--help"],
                              capture_output=True, text=True, timeout=60).stdout
    for opt in (a.split("=")[0] for a in cmd[4:] if a.startswith("-")):
        assert opt in helptext, opt


def test_wheel_requirements_follow_markers_and_skip_extras(tmp_path):
    whl = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("demo_pkg-1.0.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: demo-pkg", "Version: 1.0",
            "Requires-Dist: numpy", "Requires-Dist: Platform_Dirs>=2.2",
            'Requires-Dist: importlib-resources; python_version < "3.9"',
            'Requires-Dist: pytest>=7; extra == "test"',
            'Requires-Dist: pywin32; sys_platform == "win32"', ""]))
    assert gc.wheel_requirements(whl, "3.12") == [("numpy", "numpy"),
                                                  ("platform-dirs", "Platform_Dirs>=2.2")]
    assert gc.wheel_project("nvidia_cudnn_frontend-1.32.0-cp312-cp312-x.whl") == \
        "nvidia-cudnn-frontend"


def test_the_script_starts_without_tapeflow():
    code = ("import sys, runpy; sys.modules['tapeflow'] = None; "
            f"sys.argv = ['gpu_check.py', 'wheelhouse', '--list']; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "pyopencl" in p.stdout, p.stderr


def test_the_wheelhouse_downloads_one_small_wheel(tmp_path):
    """The real download (the test machine has network): mako alone, whose only
    dependency (MarkupSafe) is on the GPU machine."""
    p = subprocess.run([sys.executable, str(SCRIPT), "wheelhouse", str(tmp_path),
                        "--only", "mako"], capture_output=True, text=True, timeout=180)
    out = p.stdout + p.stderr
    if p.returncode != 0 and re.search(r"NewConnectionError|Temporary failure in name "
                                       r"resolution|Network is unreachable|No route to host|"
                                       r"ProxyError|timed out", out):
        pytest.skip(f"no network: {out[-300:]}")
    assert p.returncode == 0, out
    wheels = sorted(tmp_path.glob("*.whl"))
    assert [w.name.split("-")[0].lower() for w in wheels] == ["mako"], wheels
    manifest = json.loads((tmp_path / "MANIFEST.json").read_text())
    assert list(manifest["wheels"]) == ["mako"] and manifest["python_version"] == "3.12"
    assert "MB  in all" in p.stdout
    assert not list(tmp_path.glob(".download-*"))


def test_the_gpu_doc_commands_are_the_scripts():
    """docs/gpu.md's "Verifying on a GPU machine" block: the two dev.sh commands (and the
    dry run), which dispatch to this script's subcommands, with the defaults it has (the
    tests above run them: `wheelhouse --list`, the download, `gpu-check --dry-run`)."""
    import shlex
    doc = (ROOT / "docs" / "gpu.md").read_text()
    block = re.findall(r"```sh tested-by=tests/test_gpu_check.py::"
                       r"test_the_gpu_doc_commands_are_the_scripts\n(.*?)```", doc, re.S)
    assert len(block) == 1
    cmds = [shlex.split(ln, comments=True) for ln in block[0].splitlines() if ln.strip()]
    assert cmds == [["bash", "scripts/dev.sh", "wheelhouse"],
                    ["bash", "scripts/dev.sh", "gpu-check", "gpu-check-out"],
                    ["bash", "scripts/dev.sh", "gpu-check", "--dry-run"]]
    dev = (ROOT / "scripts" / "dev.sh").read_text()
    assert 'scripts/gpu_check.py" wheelhouse "$@"' in dev
    assert 'scripts/gpu_check.py" check "$@"' in dev
    assert gc.DEFAULT_WHEELHOUSE == ROOT / ".wheelhouse"
    assert gc.DEFAULT_OUT == ROOT / "gpu-check-out"
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "/.wheelhouse/" in ignored and "/gpu-check-out/" in ignored
    # the checks and caps the page's table lists are the script's
    for name, _what, _fn, cap, _dry in gc.CHECKS:
        assert re.search(rf"^\| `{re.escape(name)}` \|.*\| {cap} s \|$", doc, re.M), name
