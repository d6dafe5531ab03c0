"""The native CPU kernels' thread pool under stress (issue 48): thousands of small but
parallel calls (just over the library's 200,000 multiply-add threshold, so each one
publishes a job to the pool) on 2 threads, from the main thread and from 3 Python
threads at once (the kernels run without the GIL: calls that find the pool busy run on
their own thread), every result checked against NumPy. The work runs in a child
process with a deadline, and the child arms faulthandler too: a lost wake-up (a hang)
fails the test within seconds, with every thread's Python stack, instead of hanging
the suite. And the portable variant's routing rule: the service leaves work to NumPy
on a CPU whose best variant is "portable", unless the user forced it.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from tapeflow_cpu_numpy import native, plugin

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"native CPU kernels not in use: {native.reason()}")

STRESS = textwrap.dedent("""
    import faulthandler, sys, threading
    import numpy as np
    from tapeflow_cpu_numpy import native

    faulthandler.dump_traceback_later(DEADLINE, exit=True)   # a hang: stacks, exit 1
    native.set_num_threads(2)
    rng = np.random.default_rng(0)
    # (m, k, n, transpose_a, transpose_b): 200k-300k multiply-adds, a few tasks each
    SHAPES = [(24, 64, 140, False, False), (8, 200, 130, False, True),
              (64, 40, 82, True, False), (17, 33, 400, False, False),
              (130, 48, 36, False, True), (40, 96, 56, True, True)]

    def case(m, k, n, ta, tb):
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
        bound = 1e-5 * (np.abs(a.T if ta else a).astype(np.float64)
                        @ np.abs(b.T if tb else b).astype(np.float64)) + 1e-6
        return a, b, ta, tb, ref, bound

    failures = []

    def work(cases, calls):
        for i in range(calls):
            a, b, ta, tb, ref, bound = cases[i % len(cases)]
            y = native.matmul(a, b, ta, tb)
            if y is None or y.shape != ref.shape or not (np.abs(y - ref) <= bound).all():
                failures.append((i, a.shape, b.shape, ta, tb))
                return

    per_thread = [[case(*s) for s in SHAPES] for _ in range(4)]
    threads = [threading.Thread(target=work, args=(per_thread[t], CALLS))
               for t in range(1, 4)]
    for t in threads:
        t.start()
    work(per_thread[0], CALLS)          # the main thread at the same time
    for t in threads:
        t.join()
    work(per_thread[0], CALLS // 2)     # and alone: every call uses the pool's worker
    faulthandler.cancel_dump_traceback_later()
    print("calls", 4 * CALLS + CALLS // 2, "failures", failures)
    sys.exit(1 if failures else 0)
""")


def test_many_small_parallel_calls_from_four_threads_neither_hang_nor_err():
    calls, deadline = 800, 15
    code = STRESS.replace("DEADLINE", str(deadline)).replace("CALLS", str(calls))
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=deadline + 10, env=dict(os.environ))
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the native pool hung (no exit in {deadline + 10} s): {exc.stdout} "
                    f"{exc.stderr}")
    assert proc.returncode == 0, (
        f"exit {proc.returncode} (a hang dumps every thread's stack after {deadline} s)\n"
        f"{proc.stdout}\n{proc.stderr}")
    assert "failures []" in proc.stdout


def test_the_pool_after_fork_in_a_busy_process():
    """A child forked while other Python threads keep the pool busy gets a fresh pool
    (its parallel calls neither hang nor err); the parent's pool keeps working."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork() on this platform")
    code = textwrap.dedent("""
        import faulthandler, os, threading
        import numpy as np
        from tapeflow_cpu_numpy import native
        faulthandler.dump_traceback_later(15, exit=True)
        native.set_num_threads(2)
        a = np.ones((24, 64), np.float32); b = np.ones((64, 140), np.float32)
        stop = threading.Event()
        def spin():
            while not stop.is_set():
                assert (native.matmul(a, b) == 64).all()
        t = threading.Thread(target=spin); t.start()
        codes = []
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                ok = all((native.matmul(a, b) == 64).all() for _ in range(50))
                os._exit(0 if ok else 3)
            codes.append(os.waitpid(pid, 0)[1])
        stop.set(); t.join()
        assert all((native.matmul(a, b) == 64).all() for _ in range(50))
        print("children", codes)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "children [0, 0, 0, 0, 0]" in proc.stdout


@pytest.fixture
def restore_isa():
    before, forced = native.isa(), native.isa_forced()
    yield
    native.set_isa(before if forced else None)


def test_portable_runs_only_where_the_user_forced_it(restore_isa):
    """The portable variant (4-8 GFLOP/s) is slower than NumPy's BLAS: the service is
    not in use where it is the best variant left unforced, and is where it was forced
    (TAPEFLOW_CPU_ISA=portable or set_isa("portable")); the routing asks at each op."""
    svc = plugin.native_service()
    best = native.isas()[0]
    native.set_isa(None)
    assert not native.isa_forced()
    assert svc.available() == (best != "portable")
    assert plugin.native_routing(best, forced=False) == (best != "portable")
    assert not plugin.native_routing("portable", forced=False)
    assert plugin.native_routing("portable", forced=True)
    native.set_isa("portable")                      # forced by the user: native runs
    assert native.isa_forced() and native.isa() == "portable"
    assert svc.available()
    assert any("portable" in line and "forced" in line for line in plugin.native_notes())


def test_a_cpu_whose_best_is_portable_keeps_numpy(monkeypatch):
    """On a CPU without AVX2 (simulated: the library reports "portable" as its best,
    unforced) the service is not in use, the MatMul and convolution kernels run NumPy,
    and ``python -m tapeflow info``'s line says why and how to force it."""
    import numpy as np

    import tapeflow as tf
    monkeypatch.setattr(native, "isa", lambda: "portable")
    monkeypatch.setattr(native, "isa_forced", lambda: False)
    svc = plugin.native_service()
    assert not svc.available()
    notes = plugin.native_notes()
    assert "not in use" in notes[0] and "portable" in notes[0] and "forces it" in notes[0]
    calls = []
    monkeypatch.setattr(svc, "matmul", lambda *a: calls.append(a))
    monkeypatch.setattr(svc, "conv2d", lambda *a, **k: calls.append(a))
    a = np.ones((64, 784), np.float32)
    b = np.ones((784, 256), np.float32)
    before = native.get_num_threads()
    native.set_num_threads(1)             # (where the MatMul rule sends this one native)
    try:
        assert float(tf.matmul(a, b).numpy()[0, 0]) == 784.0
    finally:
        native.set_num_threads(before)
    x = np.ones((1, 8, 8, 4), np.float32)
    w = np.ones((3, 3, 4, 8), np.float32)
    assert float(tf.nn.conv2d(x, w, 1, "VALID").numpy()[0, 0, 0, 0]) == 36.0
    assert calls == []
    monkeypatch.setattr(native, "isa_forced", lambda: True)   # forced: native again
    assert svc.available()
