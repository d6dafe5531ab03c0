"""The conformance suite's bad-input section (issue 13): the same bad calls on the
device under test and on ``cpu:0`` (the reference) must have the same outcome --
both raise a tapeflow error of the same class, or both return the same values -- and
neither may raise a bare exception, coerce silently or change a Variable.

Runs on every device given to the suite (``--tapeflow-device``); a third-party
backend runs this same file. The calls are ``tapeflow.testing.fuzz``'s, seeded.
"""

import warnings

import pytest

from tapeflow.testing import fuzz

pytestmark = pytest.mark.tapeflow_conformance

CALLS = 1200


@pytest.mark.parametrize("seed", [7, 8])
def test_bad_input_same_outcome_as_cpu(tf_device, seed):
    calls = fuzz.generate(seed=seed, n=CALLS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = fuzz.run(calls, devices=["cpu:0", tf_device] if tf_device != "cpu:0"
                       else ["cpu:0"])
    problems = [f"{n}x {kind} {target}: {detail}\n    e.g. {example}"
                for n, kind, target, detail, example in rep.top(20)]
    assert rep.bugs() == 0, f"{tf_device}: {rep.summary()}\n" + "\n".join(problems)
