"""The distributed suite runs under an MPI launcher, every rank running every test in
the same order (the collectives inside a test pair up across ranks):

    .venv/bin/mpiexec -n 2 .venv/bin/python -m pytest tests/distributed -q -p no:cacheprovider

``tests/test_distributed.py`` does that (with ``-n 2`` and ``-n 3``) from the README's
test command. Collected by a plain ``pytest`` run (one process), these tests are
skipped, with that command as the reason.
"""

import pytest

import tapeflow as tf

LAUNCHED = tf.distributed.launched_by_mpi()


def pytest_collection_modifyitems(config, items):
    if LAUNCHED:
        return
    skip = pytest.mark.skip(reason="needs an MPI launcher: tests/test_distributed.py runs "
                                   "this folder under `mpiexec -n 2` and `-n 3`")
    for item in items:
        if "tests/distributed/" in item.nodeid or item.nodeid.startswith("distributed/"):
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def world():
    if not LAUNCHED:
        yield None
        return
    tf.distributed.init(timeout=120)
    yield tf.distributed
    tf.distributed.barrier()
