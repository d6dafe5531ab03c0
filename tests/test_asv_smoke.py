"""Smoke run of the asv suite (asv_bench/): every benchmark once, so a broken benchmark
fails CI instead of leaving a hole in the performance history.

Runs ``asv run --quick --python=same --dry-run --show-stderr`` in a subprocess on the
installed tapeflow (this interpreter's environment), with a copy of
``asv_bench/asv.conf.json`` whose results, html and env directories point into a
temporary directory, and a temporary HOME for asv's machine file, so nothing in the
checkout or the user's home changes. Parameter combinations for devices this machine
does not have are left out (their setup only raises NotImplementedError: "n/a"), which
saves a Python start-up and a tapeflow import each.

Two asv runs: the ``cpu:0`` combinations and the benchmarks without parameters with
``--launch-method forkserver`` (asv imports the suite once and forks a process per
combination: ~25 s instead of ~85 s, a Python start-up and a tapeflow import less per
combination) with the OpenCL drivers hidden (``OCL_ICD_VENDORS`` an empty folder) and
CUDA off, so no accelerator context exists to be forked (docs/concurrency.md); then the
combinations on the accelerators here (opencl:0, cuda:0), spawned as
asv_bench/asv.conf.json configures. Every benchmark still runs once on every device
this machine has.

asv's exit status is not enough (0 with a failed benchmark in some versions, 2 in
others), so the output is parsed too: every discovered benchmark must report a status,
and no ``failed``, timeout or traceback may appear. Needs asv (``pip install asv==0.6.6
asv-runner==0.2.5``); skipped with that reason otherwise.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_bench"
DEVICES = ["cpu:0", "opencl:0", "cuda:0"]      # as asv_bench/benchmarks/common.py

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("asv") is None or importlib.util.find_spec("asv_runner") is None,
    reason="asv is not installed (pip install asv==0.6.6 asv-runner==0.2.5; "
           "scripts/dev.sh's test dependencies include it)")

# "[ 12.50%] ··· bench_nn.Conv2D.time_conv2d      ok" (long names are shortened with ...)
STATUS = re.compile(r"^\[\s*[\d.]+%\] ··· ((?:\.\.\.)?\w+(?:\.\w+)+)\s+(\S.*?)\s*$")


def _conf(tmp):
    text = (ASV_DIR / "asv.conf.json").read_text()
    conf = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))   # asv allows // comments
    conf.update(repo=str(ROOT), benchmark_dir=str(ASV_DIR / "benchmarks"),
                results_dir=str(tmp / "results"), html_dir=str(tmp / "html"),
                env_dir=str(tmp / "env"))
    path = tmp / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path


def _available_devices():
    import tapeflow as tf

    have = []
    for name in DEVICES:
        try:
            tf.runtime.devices.get_device(name)
        except Exception:
            continue
        have.append(name)
    return have


def _asv_run(tmp_path, conf, env, tag, selection, launch_method):
    """One ``asv run --quick --dry-run`` of the benchmarks ``selection`` (``-b`` regular
    expressions) with ``launch_method``: ``(statuses, problems, output)``."""
    cmd = [sys.executable, "-m", "asv", "--config", str(conf), "run", "--quick",
           "--python=same", "--dry-run", "--show-stderr", "--machine", "asv-smoke",
           "--launch-method", launch_method]
    for regex in selection:
        cmd += ["-b", regex]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=900)
    out = proc.stdout + proc.stderr
    (tmp_path / f"asv-output-{tag}.txt").write_text(out)
    statuses = {}
    for line in out.splitlines():
        m = STATUS.match(line)
        if m:
            statuses[m.group(1)] = m.group(2)
    # a parameterised benchmark reports "ok" or "2/6 failed"; one without parameters
    # its value ("34.1±0μs") or "failed"
    bad = {k: v for k, v in statuses.items() if re.search(r"failed|timeout|error", v)}
    problems = []
    if proc.returncode != 0:
        problems.append(f"asv exited with {proc.returncode}")
    if bad:
        problems.append(f"benchmarks not ok: {bad}")
    if "Traceback (most recent call last)" in out or "asv: benchmark failed" in out:
        problems.append("a benchmark raised (traceback in the output)")
    if re.search(r"Importing benchmark suite failed|Failed to build", out):
        problems.append("the suite could not be imported")
    return statuses, [f"{tag}: {p}" for p in problems], out


def test_every_asv_benchmark_runs_once(tmp_path):
    assert (ASV_DIR / "asv.conf.json").is_file()
    conf = _conf(tmp_path)
    env = dict(os.environ)
    # The machine file goes to a temporary HOME; tapeflow's compiled-kernel cache stays
    # where it is (a cold OpenCL cache would add minutes).
    env.setdefault("TAPEFLOW_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache",
                                                      "tapeflow"))
    env["HOME"] = str(tmp_path / "home")
    # the ratio benchmarks (bench_ratios) time 2 short rounds: a smoke run, not a figure
    env.update(TAPEFLOW_RATIO_ROUNDS="2", TAPEFLOW_RATIO_MIN_TIME="0.002")
    os.makedirs(env["HOME"])
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "asv-smoke"], cwd=tmp_path, env=env,
                   check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=120)

    devices = _available_devices()
    assert "cpu:0" in devices
    t0 = time.perf_counter()
    # 1. cpu:0 and the benchmarks without parameters (no "(" in the name), forked from
    # one process that imported the suite, with no OpenCL driver to see and CUDA off
    # (an OpenCL or CUDA context does not survive a fork)
    no_opencl = tmp_path / "no-opencl-drivers"
    no_opencl.mkdir()
    cpu_env = dict(env, OCL_ICD_VENDORS=str(no_opencl), TAPEFLOW_CUDA_DISABLE="1")
    cpu_statuses, problems, out = _asv_run(
        tmp_path, conf, cpu_env, "cpu", [r"^[^(]*$", r"\('cpu:0'[,)]"], "forkserver")
    tails = ["\n".join(out.splitlines()[-60:])]
    # 2. the parameterised benchmarks on every other device here, spawned as configured
    others = [d for d in devices if d != "cpu:0"]
    other_statuses = {}
    if others:
        other_statuses, more, out = _asv_run(
            tmp_path, conf, env, "accelerators", [r"\('%s'[,)]" % re.escape(d) for d in others],
            "spawn")
        problems += more
        tails.append("\n".join(out.splitlines()[-60:]))
    elapsed = time.perf_counter() - t0

    discovered = json.loads((tmp_path / "results" / "benchmarks.json").read_text())
    names = [k for k in discovered if k != "version"]
    with_params = [k for k in names if discovered[k].get("params")]
    if not names:
        problems.append("asv discovered no benchmark")
    if len(cpu_statuses) != len(names):
        problems.append(f"{len(names)} benchmarks discovered, {len(cpu_statuses)} reported a "
                        f"status on cpu:0")
    if others and len(other_statuses) != len(with_params):
        problems.append(f"{len(with_params)} parameterised benchmarks discovered, "
                        f"{len(other_statuses)} reported a status on {', '.join(others)}")
    assert not problems, ("; ".join(problems) + "\n--- asv output (last lines) ---\n"
                          + "\n--- next run ---\n".join(tails))
    print(f"{len(names)} asv benchmarks ran once on {', '.join(devices)} in {elapsed:.0f} s")
