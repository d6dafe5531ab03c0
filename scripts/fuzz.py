"""Run tapeflow's bad-input fuzzer (tapeflow.testing.fuzz) and print the counts.

    .venv/bin/python scripts/fuzz.py --calls 20000 --seed 0 --devices cpu:0,opencl:0

The calls run in chunks, each in a fresh interpreter with a time limit, so an
interpreter crash (a signal) or a hang is counted instead of ending the run. The
distinct findings (grouped by outcome, op and first line of the message, most
frequent first) are printed and, with ``--out FILE``, written as JSON; then the summary
and the one-line table (calls, crashes, plain exceptions, MemoryError, unnamed errors,
silent coercions, Variables changed, device disagreements). The exit status is 1 when
any of those is non-zero, so the script is a CI gate (``scripts/dev.sh`` runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from tapeflow.testing import fuzz
seed, n, start, stop, devices, out = sys.argv[1:7]
import tapeflow as tf
have = {d.name for d in tf.runtime.devices.list_devices()}
devices = devices.split(",")
skipped = [d for d in devices if d not in have]
calls = fuzz.generate(seed=int(seed), n=int(n))[int(start):int(stop)]
rep = fuzz.run(calls, devices=[d for d in devices if d in have] or ["cpu:0"])
with open(out, "w") as f:
    json.dump(dict(rep.to_json(), skipped=skipped), f)
"""


def _limit(gib):
    if not gib:
        return None
    n = int(gib * (1 << 30))

    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    return set_limit


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--devices", default="cpu:0")
    p.add_argument("--chunk", type=int, default=2000, help="calls per subprocess")
    p.add_argument("--timeout", type=float, default=300, help="seconds per chunk")
    p.add_argument("--top", type=int, default=60)
    p.add_argument("--memory-limit", type=float, default=8.0,
                   help="GiB of address space per chunk (RLIMIT_AS; 0: none): a bad value that "
                   "slips past the allocation checks then fails with MemoryError, counted, "
                   "instead of the kernel's OOM killer ending the chunk or a neighbour")
    p.add_argument("--out", help="write the report as JSON here")
    args = p.parse_args(argv)

    from tapeflow.testing.fuzz import Report
    total = Report()
    skipped = set()
    with tempfile.TemporaryDirectory() as tmp:
        for start in range(0, args.calls, args.chunk):
            stop = min(start + args.chunk, args.calls)
            out = os.path.join(tmp, f"{start}.json")
            cmd = [sys.executable, "-c", CHILD, str(args.seed), str(args.calls), str(start),
                   str(stop), args.devices, out]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                   preexec_fn=_limit(args.memory_limit))
            except subprocess.TimeoutExpired:
                total.hangs += 1
                total.calls += stop - start
                print(f"chunk {start}-{stop}: hung past {args.timeout} s", file=sys.stderr)
                continue
            if r.returncode != 0 or not os.path.exists(out):
                total.crashes += 1
                total.calls += stop - start
                print(f"chunk {start}-{stop}: exit {r.returncode}\n{r.stderr[-2000:]}",
                      file=sys.stderr)
                continue
            with open(out) as f:
                data = json.load(f)
            part = Report(calls=data["calls"], counts=data["counts"],
                          disagreements=data["disagreements"], crashes=data["crashes"],
                          hangs=data["hangs"])
            part.findings = {tuple(row[:3]): row[3:] for row in data["findings"]}
            total.merge(part)
            skipped.update(data.get("skipped", ()))
    for n, kind, target, detail, example in total.top(args.top):
        print(f"{n:5d}  {kind:<22} {target:<40} {detail[:100]}\n       e.g. {example[:150]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(total.to_json(), f, indent=1)
    if skipped:
        print(f"devices not available here, not fuzzed: {', '.join(sorted(skipped))}")
    print(f"seed {args.seed}, devices {args.devices}: {total.summary()}")
    print(total.table())
    bugs = total.bugs()
    print(f"fuzz: {'FAIL' if bugs else 'ok'}: {bugs} bug(s) in {total.calls} calls")
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
