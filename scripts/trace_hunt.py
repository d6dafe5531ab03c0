"""Hunt for tracing bugs: random programs run eagerly and traced (tapeflow.testing.tracediff).

    python scripts/trace_hunt.py --programs 20000 --start 0   # a long hunt (before a release)
    python scripts/trace_hunt.py --replay 1234                # one program: printed, checked
    python scripts/trace_hunt.py --plants --programs 600      # each planted bug found?

Exits 1 when a program disagrees (or, with ``--plants``, when a planted bug is not found),
printing each finding with the seed that replays it, and the coverage: how many nodes
each graph pass rewrote, planned replays, traced calls differentiated from outside.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

from tapeflow.testing import tracediff


def _hunt(seeds, top, device):
    cov = collections.Counter()
    t0 = time.perf_counter()
    shown = [0]

    def progress(prog, fs):
        for f in fs:
            if shown[0] < top:
                print(f, flush=True)
            shown[0] += 1
    findings = tracediff.run_many(seeds, cov, progress, device)
    dt = time.perf_counter() - t0
    bad = sorted({f.seed for f in findings})
    print(f"{len(seeds)} programs in {dt:.0f} s: {len(bad)} disagree"
          + (f" (seeds {bad[:20]}{' ...' if len(bad) > 20 else ''})" if bad else ""))
    print("coverage: " + ", ".join(f"{k} {v}" for k, v in sorted(cov.items())))
    return findings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=500)
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--replay", type=int, action="append", help="check this seed (repeatable)")
    ap.add_argument("--plants", action="store_true",
                    help="install each planted bug in turn; each must be found")
    ap.add_argument("--top", type=int, default=30, help="findings printed at most")
    ap.add_argument("--device", default=None, help="run the programs on this device "
                    "(opencl:0, gpu:0; default: the default device)")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    if a.replay:
        bad = 0
        for seed in a.replay:
            prog = tracediff.generate(seed)
            print(tracediff.describe(prog))
            fs = tracediff.check(prog, device=a.device)
            for f in fs:
                print(f)
            print(f"seed {seed}: {'agrees' if not fs else f'{len(fs)} finding(s)'}")
            bad += bool(fs)
        return 1 if bad else 0
    seeds = range(a.start, a.start + a.programs)
    if a.plants:
        missed = []
        for name, plant in tracediff.PLANTS.items():
            with plant():
                first = next((s for s in seeds
                              if tracediff.check(tracediff.generate(s), device=a.device)),
                             None)
            print(f"planted bug in {name}: " + (f"found by seed {first}" if first is not None
                                                else "NOT FOUND"), flush=True)
            if first is None:
                missed.append(name)
        return 1 if missed else 0
    return 1 if _hunt(seeds, a.top, a.device) else 0


if __name__ == "__main__":
    sys.exit(main())
