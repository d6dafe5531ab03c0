"""The statistics of the performance gate (scripts/bench_check.py), on synthetic samples:
fast and deterministic (seeded), no timing. The figures of the gate on the real machine
(false alarms on an unchanged tree, a planted slowdown caught) are in
benchmarks/README.md."""

import importlib.util
import random
from pathlib import Path

import pytest

pytest.importorskip("scipy", reason="the gate's Mann-Whitney test needs SciPy")

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_check", ROOT / "scripts" / "bench_check.py")
bench_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_check)


def noisy(rng, median, n, spread=0.08, outliers=0.15):
    """``n`` per-round ratios around ``median``: multiplicative noise of ``spread``
    (lognormal) and, with probability ``outliers``, a round hit by a neighbour (up to 3x)."""
    out = []
    for _ in range(n):
        x = median * rng.lognormvariate(0.0, spread)
        if rng.random() < outliers:
            x *= rng.uniform(1.0, 3.0)
        out.append(x)
    return out


def processes(rng, median, procs=3, rounds=9, process_sd=0.04):
    """Per-process lists: each process has its own offset (layout, placement)."""
    return [noisy(rng, median * rng.lognormvariate(0.0, process_sd), rounds)
            for _ in range(procs)]


def test_a_planted_30_percent_slowdown_is_caught():
    rng = random.Random(1)
    caught = 0
    for _ in range(20):
        r = bench_check.compare(processes(rng, 3.3), processes(rng, 3.3 * 1.3))
        assert r["change"] > 0.15
        caught += r["regressed"]
    assert caught == 20


def test_noise_with_equal_medians_is_not_flagged():
    rng = random.Random(2)
    flagged = [bench_check.compare(processes(rng, 3.3), processes(rng, 3.3))
               for _ in range(50)]
    assert not any(r["regressed"] for r in flagged)
    assert max(abs(r["change"]) for r in flagged) < 0.15


def test_a_small_real_change_is_not_a_regression():
    # 5% slower, significant with this many rounds, but under the 15% threshold
    rng = random.Random(3)
    r = bench_check.compare(processes(rng, 2.0, rounds=60, process_sd=0.0),
                            processes(rng, 2.1, rounds=60, process_sd=0.0))
    assert r["p"] < 0.01 and not r["regressed"]


def test_one_odd_process_is_not_a_regression():
    # the pooled test alone would flag it: one "after" process ran 60% slow throughout
    rng = random.Random(4)
    before = [noisy(rng, 50.0, 9, outliers=0) for _ in range(3)]
    after = [noisy(rng, 50.0, 9, outliers=0), noisy(rng, 80.0, 9, outliers=0),
             noisy(rng, 80.0, 9, outliers=0)]
    after[0] = [x * 0.9 for x in after[0]]
    r = bench_check.compare(before, after)
    assert r["change"] > 0.15 and r["p"] < 0.01
    assert not r["consistent"] and not r["regressed"]


def test_an_improvement_is_reported_not_failed():
    rng = random.Random(5)
    r = bench_check.compare(processes(rng, 3.0), processes(rng, 2.0))
    assert r["improved"] and not r["regressed"]


def _sides(before_median, after_median, label="dispatch_add@cpu:0"):
    rng = random.Random(6)
    return ({label: {"ratios": processes(rng, before_median)}},
            {label: {"ratios": processes(rng, after_median)}})


def test_judge_fails_a_regression_unless_accepted(tmp_path):
    before, after = _sides(3.0, 4.0)
    rows, used = bench_check.judge(before, after, {})
    assert [r["verdict"] for r in rows] == ["REGRESSED"]
    table = bench_check.format_table(rows)
    assert "dispatch_add@cpu:0" in table and "REGRESSED" in table

    accept = tmp_path / "accepted_regressions.txt"
    accept.write_text("# comment\n\ndispatch_add@cpu:0  the new dtype check (issue 40)\n")
    accepted = bench_check.read_accepted(accept)
    rows, used = bench_check.judge(before, after, accepted)
    assert rows[0]["verdict"] == "accepted" and "issue 40" in rows[0]["why"]
    assert used == {"dispatch_add@cpu:0"}
    # a case name without @device accepts it on every device
    rows, used = bench_check.judge(before, after, {"dispatch_add": "why"})
    assert rows[0]["verdict"] == "accepted"


def test_accept_lines_need_a_reason_and_a_known_case(tmp_path):
    accept = tmp_path / "accepted_regressions.txt"
    accept.write_text("mlp_step@cpu:0\n")
    with pytest.raises(ValueError, match="no reason"):
        bench_check.read_accepted(accept)
    accept.write_text("mlp_stepp  typo\n")
    with pytest.raises(ValueError, match="unknown case 'mlp_stepp'"):
        bench_check.read_accepted(accept)
    assert bench_check.read_accepted(tmp_path / "missing.txt") == {}
    # the committed file parses (comments only, or lines with reasons)
    bench_check.read_accepted(ROOT / "asv_bench" / "accepted_regressions.txt")


def test_a_case_that_breaks_after_fails_and_skips_stay_na():
    before = {"mlp_step@cpu:0": {"ratios": [[1.8, 1.9, 1.85]]},
              "cnn_step@opencl:0": {"skipped": "PyTorch has no OpenCL device"}}
    after = {"mlp_step@cpu:0": {"error": "InvalidArgumentError: boom"},
             "cnn_step@opencl:0": {"skipped": "PyTorch has no OpenCL device"}}
    rows, _ = bench_check.judge(before, after, {})
    verdicts = {r["case"]: r["verdict"] for r in rows}
    assert verdicts == {"mlp_step@cpu:0": "ERROR", "cnn_step@opencl:0": "n/a"}


def test_the_exported_base_runs_its_c_core(tmp_path):
    """The base commit is measured as an install runs it: with its C core built (a base
    on the pure-Python fallback made every C-core change look like a 2x speed-up and hid
    regressions of the same size)."""
    import subprocess
    import sys
    tree = bench_check.export("HEAD", tmp_path)
    assert list((tmp_path / "core" / "tapeflow" / "runtime").glob("_speedups*.so"))
    code = ("import tapeflow, tapeflow.runtime.tensor as t; "
            "print(t.speedups is not None, tapeflow.__file__)")
    out = subprocess.run([sys.executable, "-c", code], env=bench_check.side_env(tree),
                         capture_output=True, text=True, check=True, cwd=str(tmp_path)).stdout
    native, origin = out.split()
    assert native == "True" and origin.startswith(str(tmp_path))


def _common():
    spec = importlib.util.spec_from_file_location("bench_common",
                                                  ROOT / "benchmarks" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("slow_call", [None, 5, 6, 7])
def test_one_slow_calibration_sample_does_not_cut_the_repeat(slow_call):
    """A garbage collection (or a preemption) that falls into one calibration sample
    must not cut the repeat count: a fake clock, 1 us a call, one sample 20 ms late."""
    common = _common()
    now, calls = [0.0], [0]

    def run(k):
        calls[0] += 1
        now[0] += k * 1e-6 + (0.02 if calls[0] == slow_call else 0.0)

    k = common._repeat(run, lambda: None, 0.01, 1 << 20, lambda: now[0])
    assert 9000 <= k <= 11000, (slow_call, k)
