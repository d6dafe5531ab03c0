#!/usr/bin/env python
"""Export a commit into a throwaway directory with a real ~30% slowdown of ``a + b``
planted in its dispatch path, to show that ``scripts/bench_check.py`` catches it.

    python benchmarks/plant_regression.py /tmp/planted [--rev HEAD]
    python scripts/bench_check.py --quick --base HEAD --after /tmp/planted

The plant (never committed; only in the export): the CPU kernel table's ``Add`` is
wrapped in a function that busy-waits ``TAPEFLOW_PLANTED_S`` seconds (default 0.05 us)
before calling ``np.add`` -- with the wrapper's own call, about 0.3 us on the 2-core
reference machine, +30% on ``a + b`` (1,) float32 -- and ``runtime.dispatch.execute``
(every op that the C operators do not take) busy-waits the same. Nothing else changes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WRAPPER = '''def _planted(fn):
    """PLANTED REGRESSION (benchmarks/plant_regression.py): a busy-wait before the kernel."""
    import os
    from time import perf_counter
    delay = float(os.environ.get("TAPEFLOW_PLANTED_S", "0.05e-6"))

    def slow(*args, **kw):
        end = perf_counter() + delay
        while perf_counter() < end:
            pass
        return fn(*args, **kw)
    return slow


'''

EXECUTE = '''    # PLANTED REGRESSION (benchmarks/plant_regression.py): a busy-wait
    _end = _planted_clock() + _PLANTED_S
    while _planted_clock() < _end:
        pass
'''


def plant(tree):
    math_py = Path(tree) / "core/tapeflow/kernels/math.py"
    s = math_py.read_text()
    old = '"Add": num_c(xp.add),'
    if old not in s:
        raise SystemExit(f"{math_py}: no '{old}' to plant into (the kernel table changed)")
    s = s.replace(old, '"Add": num_c(_planted(xp.add)),')
    i = s.index("\ndef ") + 1
    math_py.write_text(s[:i] + WRAPPER + s[i:])

    disp = Path(tree) / "core/tapeflow/runtime/dispatch.py"
    s = disp.read_text()
    i = s.index("def execute(op, inputs, attrs=_EMPTY):")
    j = s.index('    """\n', s.index('"""', i) + 3) + len('    """\n')
    s = s[:j] + EXECUTE + s[j:]
    s = s.replace("import os\n", "import os\nfrom time import perf_counter as _planted_clock\n"
                  "_PLANTED_S = float(os.environ.get('TAPEFLOW_PLANTED_S', '0.05e-6'))\n", 1)
    disp.write_text(s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dest", help="an empty or new directory")
    ap.add_argument("--rev", default="HEAD")
    args = ap.parse_args(argv)
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty")
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", args.rev, "core", "backends",
                           "plugins"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
    plant(dest)
    print(f"{dest}: {args.rev} with a slower a + b planted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
