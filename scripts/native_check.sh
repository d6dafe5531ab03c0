#!/usr/bin/env bash
# The native lane (issue 33; docs/native.md): checks tapeflow's optional C core
# (core/tapeflow/runtime/_c, the extension tapeflow.runtime._speedups) in three steps,
# each on a copy of core/ in a temporary directory (the working tree's .so is never
# touched, so processes running from it keep working):
#
#   1. strict build: TAPEFLOW_STRICT_BUILD=1 (-Wall -Wextra -Werror); the build must
#      produce the extension (core/setup.py marks it optional, so a failed compile is
#      only a warning there: here it is a failure);
#   2. AddressSanitizer: a TAPEFLOW_SANITIZE=address build, the C tests run against it
#      with libasan preloaded and PYTHONMALLOC=malloc (so that ASan sees every Python
#      object, not pymalloc's pools); skipped, with the reason, where ASan cannot run
#      (no libasan, or the sanitizer cannot start on this machine);
#   3. dev mode: the same tests on the strict build under `python -X dev` and
#      PYTHONMALLOC=debug (CPython's own checks of the C API's use, the allocator's
#      guard bytes, faulthandler).
#
#   bash scripts/native_check.sh          from the repository root, with .venv/ present
#   VPY=/path/to/python bash scripts/native_check.sh
#   NATIVE_TESTS="tests/test_tape.py" bash scripts/native_check.sh   (other tests)
#
# The CPU backend's native kernels (backends/cpu_numpy: tapeflow_cpu_numpy._cpukernels)
# are copied, built and tested the same way, beside the C core, in each step.
#
# Exits non-zero on any failure. ~1 min on the 2-core development machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VPY="${VPY:-$ROOT/.venv/bin/python}"
export PYOPENCL_CTX="${PYOPENCL_CTX:-intel}"
# The C paths' tests: the operators and scalars, the tape, Tensors and Variables, the
# leak and thread checks, the differential test (C vs pure Python) and any other
# tests/test_native_*.py. (test_the_pure_python_lane runs no C: deselected.)
if [ -n "${NATIVE_TESTS:-}" ]; then
    read -r -a TESTS <<<"$NATIVE_TESTS"
else
    TESTS=(tests/test_speedups.py tests/test_tape.py tests/test_tensor_variable.py
           tests/test_concurrency.py)
    [ -e tests/test_tape_watch.py ] && TESTS+=(tests/test_tape_watch.py)
    for f in tests/test_native_*.py; do [ -e "$f" ] && TESTS+=("$f"); done
    # the CPU backend's native kernels (backends/cpu_numpy/tapeflow_cpu_numpy/_c)
    for f in tests/backends/test_cpu_native*.py; do [ -e "$f" ] && TESTS+=("$f"); done
fi
# (-k "not fork": test_concurrency.py's threads, without its fork() tests: processes
# that start, not C paths)
PYTEST=(-m pytest -q -p no:xdist -p no:cacheprovider --durations=5 -k "not fork"
        --deselect tests/test_speedups.py::test_the_pure_python_lane "${TESTS[@]}")

say() { printf '==> native: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

[ -x "$VPY" ] || fail "no Python at $VPY (run scripts/dev.sh install-test, or set VPY)"
CC_BIN="${CC:-cc}"
command -v "$CC_BIN" >/dev/null 2>&1 || fail "no C compiler ($CC_BIN): the C core cannot be built here"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/tapeflow-native.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
T0=$SECONDS

# build NAME [ENV=VALUE...]: a copy of core/ (sources only: no build/, .so, caches)
# in $TMP/NAME/core, built in place with the environment given; the same for the CPU
# backend's native kernels (backends/cpu_numpy, where it has its setup.py)
BACKEND=backends/cpu_numpy
[ -f "$BACKEND/setup.py" ] || BACKEND=""
build() {
    local name="$1"
    shift
    mkdir -p "$TMP/$name"
    tar -C "$ROOT" --exclude=build --exclude='*.so' --exclude=__pycache__ \
        --exclude='*.egg-info' -cf - core ${BACKEND:+"$BACKEND"} | tar -C "$TMP/$name" -xf -
    if [ -n "$BACKEND" ] && ! { (cd "$TMP/$name/$BACKEND" && env "$@" "$VPY" setup.py build_ext \
            --inplace --force) >"$TMP/$name-backend.log" 2>&1 \
            && ls "$TMP/$name/$BACKEND"/tapeflow_cpu_numpy/_cpukernels*.so >/dev/null 2>&1; }; then
        grep -E "error|warning" "$TMP/$name-backend.log" >&2 || tail -n 30 "$TMP/$name-backend.log" >&2
        return 1
    fi
    if ! (cd "$TMP/$name/core" && env "$@" "$VPY" setup.py build_ext --inplace --force) \
            >"$TMP/$name.log" 2>&1; then
        cat "$TMP/$name.log" >&2
        return 1
    fi
    if ! ls "$TMP/$name"/core/tapeflow/runtime/_speedups*.so >/dev/null 2>&1; then
        grep -E "error|warning" "$TMP/$name.log" >&2 || tail -n 30 "$TMP/$name.log" >&2
        return 1
    fi
}

# check_import DIR [ENV...]: tapeflow and its C core are imported from DIR, and in use
check_import() {
    local dir="$1"
    shift
    env PYTHONPATH="$dir" "$@" "$VPY" -c '
import sys, tapeflow
from tapeflow.runtime import dispatch
sp = dispatch.speedups
assert sp is not None, "the C core is not in use"
for f in (tapeflow.__file__, sp.__file__):
    assert f.startswith(sys.argv[1]), f"{f} is not under {sys.argv[1]}"
print(sp.__file__)' "$dir"
}

# check_backend DIR [ENV...]: the CPU backend's native kernels come from DIR, in use
check_backend() {
    [ -n "$BACKEND" ] || return 0
    local dir="$1"
    shift
    env "$@" "$VPY" -c '
import sys
from tapeflow_cpu_numpy import _cpukernels, native
assert native.available(), native.reason()
assert _cpukernels.__file__.startswith(sys.argv[1]), f"{_cpukernels.__file__} is not under {sys.argv[1]}"' "$dir"
}

say "1/3 strict build (TAPEFLOW_STRICT_BUILD=1: -Wall -Wextra -Werror) of a copy of core/"
build strict TAPEFLOW_STRICT_BUILD=1 || fail "the strict build (warnings are errors) failed"
check_import "$TMP/strict/core" >/dev/null || fail "the strict build does not import"
say "strict build: ok ($((SECONDS - T0)) s)"

ASAN_LIB="$("$CC_BIN" -print-file-name=libasan.so 2>/dev/null || true)"
asan_reason=""
if [ -z "$ASAN_LIB" ] || [ ! -e "$ASAN_LIB" ]; then
    asan_reason="no libasan.so for $CC_BIN ($CC_BIN -print-file-name=libasan.so: '${ASAN_LIB}')"
elif ! probe=$(env LD_PRELOAD="$ASAN_LIB" ASAN_OPTIONS=detect_leaks=0 "$VPY" -c pass 2>&1); then
    asan_reason="the sanitizer does not start here: $(printf '%s' "$probe" | tail -n 1)"
fi
if [ -n "$asan_reason" ]; then
    say "2/3 AddressSanitizer SKIPPED: $asan_reason; step 3 (dev mode) still runs"
else
    T1=$SECONDS
    say "2/3 AddressSanitizer build (TAPEFLOW_SANITIZE=address) and ${TESTS[*]}"
    build asan TAPEFLOW_STRICT_BUILD=1 TAPEFLOW_SANITIZE=address \
        || fail "the AddressSanitizer build failed"
    # detect_leaks=0: CPython itself leaves memory at exit (not tapeflow's); what ASan
    # checks here is every read and write of the C code (overflows, use after free)
    # libstdc++ preloaded too: ASan's interceptor of C++ exceptions (__cxa_throw) binds
    # at start, and PyOpenCL throws them (without it, ASan aborts at the first one)
    PRELOAD="$ASAN_LIB"
    CXX_LIB="$("$CC_BIN" -print-file-name=libstdc++.so 2>/dev/null || true)"
    [ -n "$CXX_LIB" ] && [ -e "$CXX_LIB" ] && PRELOAD="$ASAN_LIB $CXX_LIB"
    ASAN_ENV=(PYTHONPATH="$TMP/asan/core${BACKEND:+:$TMP/asan/$BACKEND}" LD_PRELOAD="$PRELOAD" PYTHONMALLOC=malloc
              ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:log_path=$TMP/asan-report")
    # (log_path: pytest captures file descriptor 2, and a process ASan stops loses what
    # was captured; the reports of the test processes and their subprocesses are in
    # $TMP/asan-report.PID, printed on failure)
    so=$(check_import "$TMP/asan/core" "${ASAN_ENV[@]}") || fail "the ASan build does not import"
    say "tapeflow from $TMP/asan/core ($(basename "$so"), ASan)"
    check_backend "$TMP/asan" "${ASAN_ENV[@]}" || fail "the ASan build's CPU kernels are not in use"
    if ! env "${ASAN_ENV[@]}" "$VPY" "${PYTEST[@]}"; then
        for f in "$TMP"/asan-report.*; do [ -e "$f" ] && { say "AddressSanitizer report $f:"; cat "$f" >&2; }; done
        fail "tests under AddressSanitizer"
    fi
    for f in "$TMP"/asan-report.*; do           # (a report from a process whose failure was caught)
        [ -e "$f" ] && { cat "$f" >&2; fail "AddressSanitizer reported an error: $f"; }
    done
    say "AddressSanitizer: ok ($((SECONDS - T1)) s)"
fi

T2=$SECONDS
say "3/3 python -X dev, PYTHONMALLOC=debug, strict build: ${TESTS[*]}"
# (PYTHONDEVMODE=1 as well as -X dev: the tests' subprocesses run in dev mode too)
DEV_ENV=(PYTHONPATH="$TMP/strict/core${BACKEND:+:$TMP/strict/$BACKEND}" PYTHONMALLOC=debug PYTHONDEVMODE=1 PYTHONFAULTHANDLER=1)
so=$(check_import "$TMP/strict/core" "${DEV_ENV[@]}") || fail "the strict build does not import"
say "tapeflow from $TMP/strict/core ($(basename "$so"))"
check_backend "$TMP/strict" "${DEV_ENV[@]}" || fail "the strict build's CPU kernels are not in use"
DEV_PYTEST=("${PYTEST[@]}")
if [ -z "$asan_reason" ] && [ -z "${NATIVE_TESTS:-}" ] && [ -e tests/test_native_differential.py ]; then
    # (the differential test's random programs ran under ASan, which sees more: here it
    # would double the lane's time for little)
    DEV_PYTEST+=(--deselect tests/test_native_differential.py)
    say "(tests/test_native_differential.py ran under ASan: not again here)"
fi
env "${DEV_ENV[@]}" "$VPY" -X dev "${DEV_PYTEST[@]}" || fail "tests under python -X dev and PYTHONMALLOC=debug"
say "dev mode: ok ($((SECONDS - T2)) s)"
say "passed in $((SECONDS - T0)) s${asan_reason:+ (AddressSanitizer skipped: $asan_reason)}"
