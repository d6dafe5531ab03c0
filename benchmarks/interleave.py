"""Interleaved timing shared by the device benchmarks (``gpu_compare.py``,
``opencl_compare.py``).

:func:`measure` warms every implementation up, calibrates an inner repeat so one
sample lasts ``min_time``, then takes ``rounds`` rounds; each round times every
implementation once, in an order that rotates from round to round, with ``sync()``
(the device's queue drained) before the clock starts and before it stops. It fills
``case.times[impl]`` (seconds per unit) and ``case.ratios[other]`` (per-round
``other / ref`` time ratios: > 1 means ``ref`` is faster).

``settle_s`` (default 0): before each sample, sleep that long, so
the thread pools of the implementation timed just before (OpenBLAS and OpenMP workers
spin for a while after a call) are idle and do not steal the cores. The ratio
benchmarks (``ratio_cases.py``: asv's ``bench_ratios`` and ``scripts/bench_check.py``)
time through this function too.

``clock`` (default ``time.perf_counter``, wall time): what the samples are read from.
The ratio benchmarks pass ``time.process_time`` for work that runs on this machine's
CPUs (cpu:0, OpenCL on a CPU): the process's CPU time, all its threads, does not count
the time the process waits while other jobs hold the cores, the largest noise on a
shared machine. Wall time stays right for a GPU (the host waits, the device works).
"""

from __future__ import annotations

import time


def measure(case, sync, rounds, min_time, ref, per_run=1, max_repeat=1 << 14, settle_s=0.0,
            clock=time.perf_counter):
    """Time ``case.impls`` (``{name: run(n)}``, ``run(n)`` does ``n`` units)."""
    impls = list(case.impls)
    for name in impls:                      # warm-up: compile kernels, fill caches
        case.impls[name](per_run)
        sync()
    first = ref if ref in impls else impls[0]
    k = 1
    while True:
        t0 = clock()
        case.impls[first](per_run * k)
        sync()
        if clock() - t0 >= min_time or k >= max_repeat:
            break
        k *= 2
    n = per_run * k
    case.times = {name: [] for name in impls}
    for r in range(rounds):
        order = impls[r % len(impls):] + impls[:r % len(impls)]
        this = {}
        for name in order:
            if settle_s:
                time.sleep(settle_s)
            sync()
            t0 = clock()
            case.impls[name](n)
            sync()
            this[name] = (clock() - t0) / n
            case.times[name].append(this[name])
        if ref in this:
            for name, v in this.items():
                if name != ref:
                    case.ratios.setdefault(name, []).append(v / this[ref])
