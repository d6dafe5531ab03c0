"""docs/backends.md is the whole backend contract: its fourth backend, written from
that page alone, runs, and the conformance suite's forward checks pass on it. (It runs
in a subprocess: registering a backend is for the life of the process.)"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import tapeflow as tf

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "backends.md"

CONFORMANCE = """
from tapeflow.testing import conformance
specs = {s.name: s for s in conformance.collect_specs()}
for name in ("add", "multiply", "exp"):
    for dt in (tf.float32, tf.float64):
        conformance.check_forward(specs[name], "ref:0", dt)
print("conformance ok")
try:
    tf.reduce_sum(y)
except tf.errors.NotFoundError as e:
    assert "ref" in str(e) and "cpu" in str(e), e
    print("no kernel: NotFoundError")
"""


def test_the_fourth_backend_of_the_docs_passes_conformance():
    blocks = re.findall(r"```python[^\n]*\n(.*?)```", DOC.read_text(), re.S)
    (block,) = [b for b in blocks if "add_backend" in b]     # the fourth backend's
    r = subprocess.run([sys.executable, "-c", block + CONFORMANCE], capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split("\n")[:3] == [
        "/job:localhost/replica:0/task:0/device:REF:0 [1.     3.7183]", "conformance ok",
        "no kernel: NotFoundError"], r.stdout


def test_the_backend_class_is_the_documented_contract():
    documented = set(re.findall(r"^\| `(\w+)(?:\(|`)", DOC.read_text(), re.M))
    public = {n for n, v in vars(tf.plugins.Backend).items()
              if not n.startswith("_") and (callable(v) or isinstance(v, (str, int)))}
    assert public == documented, (public ^ documented)
