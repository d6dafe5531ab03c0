"""The fake CuPy used by test_cuda.py must not be imported as `cupy` by doctest collection;
the ``variant`` fixture of the native CPU kernels' tests."""

import pytest

from tapeflow_cpu_numpy import native

collect_ignore = ["fake_cupy"]


@pytest.fixture(params=[(isa, nt) for isa in (native.isas() or ["none"]) for nt in (1, 2)],
                ids=lambda p: f"{p[0]}-{p[1]}t")
def variant(request):
    """Each ISA variant this CPU runs, forced, on 1 and 2 threads (restored after, the
    default choice left unforced): the native CPU kernels' tests (test_cpu_native*.py)."""
    isa, nt = request.param
    before_isa, before_nt, forced = native.isa(), native.get_num_threads(), native.isa_forced()
    native.set_isa(isa)
    native.set_num_threads(nt)
    yield isa, nt
    native.set_isa(before_isa if forced else None)
    native.set_num_threads(before_nt)
