"""The pytest side: the test-function names of each kind (:data:`KINDS`), the specs
to collect, known gaps as strict xfails, and :func:`parametrize` for
``pytest_generate_tests``."""

from __future__ import annotations

from ... import plugins
from ..specs import all_specs
from ._common import _glob
from .cases import cases


#: pytest test-function name -> kind of case
KINDS = {
    "test_forward": "forward",
    "test_forward_noncontiguous": "noncontiguous",
    "test_gradients": "gradients",
    "test_errors": "errors",
    "test_traced": "traced",
}


def collect_specs(extra=()):
    """``tapeflow.testing.specs.all_specs()`` plus ``extra`` specs whose names are
    not already among them. Spec names are test ids: duplicates are an error."""
    specs = list(all_specs())
    seen = {}
    for s in specs:
        if s.name in seen:
            raise ValueError(f"two conformance specs are named {s.name!r} (ops {seen[s.name]!r} "
                             f"and {s.op!r}); spec names must be unique, they are test ids")
        seen[s.name] = s.op
    return specs + [s for s in extra if s.name not in seen]


def gap_matches(pattern, test_name):
    """Does a known-gap ``pattern`` match ``test_name`` (``test_forward[add-float16-cpu:0]``)?
    The pattern may also be given without the function name (``add-float16-*``)."""
    if _glob(pattern).fullmatch(test_name):
        return True
    if "[" in test_name and test_name.endswith("]"):
        return bool(_glob(pattern).fullmatch(test_name[test_name.index("[") + 1:-1]))
    return False


def parametrize(metafunc, specs, devices=None, known_gaps=None):
    """``pytest_generate_tests`` helper: parametrize ``conformance_case`` for the
    test functions named in :data:`KINDS`, over ``specs`` and the devices under test
    (``--tapeflow-device``, see :mod:`tapeflow.testing.pytest_plugin`). Known gaps
    become ``xfail(strict=True)``."""
    if "conformance_case" not in metafunc.fixturenames:
        return
    import pytest
    kind = KINDS.get(metafunc.function.__name__)
    if kind is None:
        raise ValueError(f"{metafunc.function.__name__}: conformance test functions must be "
                         f"named one of {sorted(KINDS)}")
    if devices is None:
        from ..pytest_plugin import devices_under_test
        devices = devices_under_test(metafunc.config)
    if known_gaps is None:
        known_gaps = plugins.known_gaps()
    params = []
    fname = metafunc.function.__name__
    for c in cases(specs, devices, kind):
        marks = [pytest.mark.tapeflow_conformance]
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        else:
            test_name = f"{fname}[{c.id}]"
            for pat, reason in known_gaps.items():
                if gap_matches(pat, test_name):
                    marks.append(pytest.mark.xfail(strict=True, reason=f"known gap: {reason}"))
                    break
        params.append(pytest.param(c, marks=marks, id=c.id))
    metafunc.parametrize("conformance_case", params)
