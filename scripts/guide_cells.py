"""Run TensorFlow's guide notebooks cell by cell, under TensorFlow and under tapeflow, and
compare: the yardstick of issue 46 (docs/tf2-guides.md).

The notebooks are not in this repository: take them from the tensorflow/docs repository
(``site/en/guide/*.ipynb``). Each notebook's code cells run in order in one process, as
Jupyter runs them: shell (``!``) and magic (``%``) lines dropped, the value of a cell's last
expression printed with ``repr``, the cell's source registered with ``linecache`` (as
IPython does, so AutoGraph can read it). Under tapeflow, ``import tensorflow`` becomes
``import tapeflow`` and ``import keras`` becomes ``from tapeflow import keras``; nothing
else changes.

    # one notebook, in this interpreter:
    python scripts/guide_cells.py run NOTEBOOK.ipynb OUT.json [--tapeflow]
    # every notebook of a directory, under two interpreters, then the table:
    python scripts/guide_cells.py all GUIDE_DIR OUT_DIR --tf-python /path/to/tf/venv/bin/python
    python scripts/guide_cells.py compare OUT_DIR [NAME ...] [--diff]

A cell *passes* when it raises nothing; *same output* compares what it printed with
TensorFlow's after normalising what legitimately differs (object addresses, the device in
a tensor's repr, numbers to 4 significant digits, whitespace). Cells that draw random
numbers or time things print different values under both: read ``--diff``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import os
import re
import signal
import subprocess
import sys
import traceback

NOTEBOOKS = ["basics", "intro_to_modules", "function", "intro_to_graphs",
             "basic_training_loops", "checkpoint"]


def _rewrite(src, tapeflow):
    src = "\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("!", "%")))
    if tapeflow:
        src = re.sub(r"\bimport tensorflow\b", "import tapeflow", src)
        src = re.sub(r"\bfrom tensorflow\b", "from tapeflow", src)
        src = re.sub(r"^(\s*)import keras\b", r"\1from tapeflow import keras", src, flags=re.M)
        src = re.sub(r"^(\s*)from keras\b", r"\1from tapeflow.keras", src, flags=re.M)
    return src


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout("cell timed out")


def run(notebook, out_path, tapeflow, cell_timeout=180):
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    notebook, out_path = os.path.abspath(notebook), os.path.abspath(out_path)
    with open(notebook) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    work = out_path + ".work"
    os.makedirs(work, exist_ok=True)
    os.chdir(work)                      # files the notebook writes go beside the results
    signal.signal(signal.SIGALRM, _alarm)
    env = {"__name__": "__main__"}
    results = []
    for i, cell in enumerate(cells):
        src = _rewrite("".join(cell["source"]), tapeflow)
        print("cell", i, file=sys.__stderr__, flush=True)
        buf, ebuf, ok, err = io.StringIO(), io.StringIO(), True, None
        try:
            name = f"<ipython-input-{i}>"
            linecache.cache[name] = (len(src), None, [ln + "\n" for ln in src.splitlines()], name)
            tree = ast.parse(src)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            signal.alarm(cell_timeout)
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(ebuf):
                exec(compile(tree, name, "exec"), env)
                if last is not None:
                    value = eval(compile(last, name, "eval"), env)
                    if value is not None:
                        print(repr(value))
        except BaseException as e:      # noqa: BLE001 - a cell's failure is the result
            ok = False
            err = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-3:])[-1500:]
            if isinstance(e, KeyboardInterrupt):
                break
        finally:
            signal.alarm(0)
        results.append({"i": i, "ok": ok, "err": err, "out": buf.getvalue()[-3000:],
                        "stderr": ebuf.getvalue()[-1500:], "src": src[:3000]})
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)
    print(os.path.basename(notebook), sum(r["ok"] for r in results), "/", len(results))


_NUM = re.compile(r"-?\d+\.\d*(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def normalise(s):
    s = re.sub(r"0x[0-9a-f]+", "0x", s).replace("tensorflow", "tapeflow")
    s = re.sub(r", device=[a-z]+:\d+", "", s).replace("numpy=\n", "numpy=")
    s = s.replace("'UnreadVariable'", "'Variable:0'")
    s = _NUM.sub(lambda m: "%.4g" % float(m.group()), s)
    s = re.sub(r"(\d)\.(?=[\s,\]\)])", r"\1", s)
    return re.sub(r"\s+", "", s)


def compare(out_dir, names, diff=False):
    total = [0, 0, 0]
    for n in names:
        try:
            with open(os.path.join(out_dir, f"{n}.tf.json")) as f:
                tf = json.load(f)
            with open(os.path.join(out_dir, f"{n}.tapeflow.json")) as f:
                tp = {r["i"]: r for r in json.load(f)}
        except FileNotFoundError:
            continue
        good = [r for r in tf if r["ok"]]
        ok = [r for r in good if tp.get(r["i"], {}).get("ok")]
        same = [r for r in ok if normalise(r["out"]) == normalise(tp[r["i"]]["out"])]
        for k, v in enumerate((good, ok, same)):
            total[k] += len(v)
        print(f"{n:24s} TF {len(good):3d}   tapeflow {len(ok):3d} "
              f"({100 * len(ok) / max(1, len(good)):3.0f}%)   same output {len(same):3d}")
        for r in good if diff else ():
            t = tp.get(r["i"])
            if not t or not t["ok"]:
                last = (t or {}).get("err") or "not run"
                print(f"    FAIL {r['i']:3d}: {last.strip().splitlines()[-1][:160]}")
            elif normalise(r["out"]) != normalise(t["out"]):
                print(f"    DIFF {r['i']:3d}: TF {r['out'][:150]!r}\n{'':15s}tapeflow "
                      f"{t['out'][:150]!r}")
    print(f"{'total':24s} TF {total[0]:3d}   tapeflow {total[1]:3d} "
          f"({100 * total[1] / max(1, total[0]):.1f}%)   same output {total[2]:3d} "
          f"({100 * total[2] / max(1, total[0]):.1f}%)")


def run_all(guide_dir, out_dir, tf_python, names, timeout=1200):
    os.makedirs(out_dir, exist_ok=True)
    for n in names:
        nb = os.path.join(guide_dir, f"{n}.ipynb")
        jobs = [("tapeflow", [sys.executable, __file__, "run", nb,
                              os.path.join(out_dir, f"{n}.tapeflow.json"), "--tapeflow"])]
        if tf_python and not os.path.exists(os.path.join(out_dir, f"{n}.tf.json")):
            jobs.append(("tf", [tf_python, __file__, "run", nb,
                                os.path.join(out_dir, f"{n}.tf.json")]))
        for _, cmd in jobs:
            subprocess.run(cmd, timeout=timeout, stderr=subprocess.DEVNULL)


def main(argv):
    if not argv or argv[0] not in ("run", "all", "compare"):
        print(__doc__)
        return 2
    if argv[0] == "run":
        run(argv[1], argv[2], "--tapeflow" in argv)
    elif argv[0] == "compare":
        rest = [a for a in argv[2:] if a != "--diff"]
        compare(argv[1], rest or NOTEBOOKS, "--diff" in argv)
    else:
        tf_python = argv[argv.index("--tf-python") + 1] if "--tf-python" in argv else None
        names = [a for a in argv[3:] if not a.startswith("--") and a != tf_python]
        run_all(argv[1], argv[2], tf_python, names or NOTEBOOKS)
        compare(argv[2], names or NOTEBOOKS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
