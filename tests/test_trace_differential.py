"""The differential test of tracing (issue 43): seeded random programs run eagerly and
traced -- every subset of the graph passes, the buffer plan on and off, the traced and
the op-by-op backward, tapes inside and outside, several calls, two threads -- must
agree value for value (``tapeflow.testing.tracediff``).

The sample here is the CI's; ``python scripts/trace_hunt.py --programs 20000`` is the
long hunt run before a release (docs/tracing-invariants.md). A disagreement prints the
seed; ``python scripts/trace_hunt.py --replay SEED`` prints the program and runs it.
The generator's reach is checked by planting a plausible bug in each pass (and in the
buffer plan and the saved forward program): the sample must find every one.
"""

import collections
import warnings

import pytest

import tapeflow as tf
from tapeflow.testing import tracediff

#: the CI sample: CHUNKS x CHUNK programs on the default device (seeds 0, 1, ...)
CHUNK = 250
CHUNKS = 12
#: programs on opencl:0 (the OpenCL backend's kernels and fusion under tracing)
OPENCL_PROGRAMS = 150
#: a plant must be found among the first this many seeds
PLANT_SEEDS = 1000


def _run(seeds, device=None, coverage=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tracediff.run_many(seeds, coverage, device=device)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_programs_agree_traced_and_eager(chunk):
    cov = collections.Counter()
    findings = _run(range(chunk * CHUNK, (chunk + 1) * CHUNK), coverage=cov)
    assert not findings, "\n".join(str(f) for f in findings[:10])
    if chunk == 0:
        # the sample exercises every pass, the buffer plan and both backward programs
        # of a traced call under a tape
        for name in (*tracediff.PASSES, "memory_plan", "saved_program",
                     "recompute_backward"):
            assert cov[name] > 0, (name, dict(cov))


@pytest.mark.parametrize("chunk", range(2))
def test_random_programs_agree_on_opencl(chunk, tf_device_opencl):
    n = OPENCL_PROGRAMS // 2
    findings = _run(range(50000 + chunk * n, 50000 + (chunk + 1) * n), device="opencl:0")
    assert not findings, "\n".join(str(f) for f in findings[:10])


@pytest.fixture
def tf_device_opencl():
    if not any(str(d) == "opencl:0" for d in tf.config.list_devices()):
        pytest.skip("no opencl:0 device (the OpenCL backend or a driver is missing)")
    return "opencl:0"


@pytest.mark.parametrize("name", sorted(tracediff.PLANTS))
def test_a_planted_bug_is_found_with_the_seed_to_replay(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tracediff.PLANTS[name]():
            for seed in range(PLANT_SEEDS):
                findings = tracediff.check(tracediff.generate(seed))
                if findings:
                    break
            else:
                pytest.fail(f"the planted bug in {name} was not found in {PLANT_SEEDS} "
                            "programs: the generator no longer reaches what it breaks")
        # and without the plant, the same program agrees
        assert tracediff.check(tracediff.generate(seed)) == []
    assert f"--replay {seed}" in str(findings[0]) and f"seed {seed}" in str(findings[0])


def test_programs_are_reproducible_from_their_seed():
    a, b = tracediff.generate(1234), tracediff.generate(1234)
    assert tracediff.describe(a) == tracediff.describe(b)
    assert tracediff.describe(a) != tracediff.describe(tracediff.generate(1235))
    assert "program 1234" in tracediff.describe(a)
