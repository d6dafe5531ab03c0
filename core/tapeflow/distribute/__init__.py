"""``tf.distribute``: TensorFlow 2's distribution strategies.

* :class:`MirroredStrategy`: one replica per local device of this process (GPUs, or
  e.g. ``["cpu:0", "opencl:0"]``), variables mirrored, gradients summed over the
  replicas and applied once.
* ``MultiWorkerMirroredStrategy``: one replica per process of an MPI job, on the
  collectives of :mod:`tapeflow.distributed`.
* :class:`OneDeviceStrategy`, ``experimental.CentralStorageStrategy`` and the default
  strategy (what :func:`get_strategy` returns outside any scope: one replica).

A custom training loop, the same program on one device and on several::

    strategy = tf.distribute.MirroredStrategy(["cpu:0", "opencl:0"])
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        optimizer = tf.keras.optimizers.SGD(0.1)
    dist_ds = strategy.experimental_distribute_dataset(dataset)   # global batches

    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_sum((model(x) - y) ** 2, axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for x, y in dist_ds:
        losses = strategy.run(step, args=(x, y))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

How the replicas run, and what differs from TensorFlow: :mod:`.strategy`; the values:
:mod:`.values`; the input: :mod:`.input`.

>>> import tapeflow as tf
>>> strategy = tf.distribute.MirroredStrategy(["cpu:0"])
>>> with strategy.scope():
...     tf.distribute.get_strategy() is strategy
True
>>> per_replica = strategy.run(lambda: tf.constant([1.0, 2.0]))
>>> print(strategy.reduce("SUM", per_replica, axis=0))
tf.Tensor(3.0, shape=(), dtype=float32)
"""

from __future__ import annotations

from .. import models as _models
from .. import random_generator as _rg
from ..ops import nn as _nn
from ..train import optimizers as _optimizers
from . import cluster_resolver
from .input import (DistributedDataset, DistributedIterator, InputContext, InputOptions,
                    InputReplicationMode, ValueContext)
from .strategy import (CentralStorageStrategy, CrossDeviceOps, HierarchicalCopyAllReduce,
                       MirroredStrategy, NcclAllReduce, OneDeviceStrategy, ReductionToOneDevice,
                       ParameterServerStrategy, ReplicaContext, Strategy, StrategyExtended,
                       TPUStrategy, active_strategy, aggregate_and_apply, current_replica,
                       get_replica_context, get_strategy, has_strategy,
                       in_cross_replica_context, replicas_for_loss)
from .values import DistributedValues, Mirrored, MirroredVariable, PerReplica, ReduceOp
from .multi_worker import (CollectiveCommunication, CommunicationImplementation,
                           CommunicationOptions, ExperimentalMultiWorkerMirroredStrategy,
                           MultiWorkerMirroredStrategy)

__all__ = ["Strategy", "StrategyExtended", "MirroredStrategy", "OneDeviceStrategy",
           "ReduceOp", "get_strategy", "has_strategy", "in_cross_replica_context",
           "get_replica_context", "ReplicaContext", "InputContext", "InputOptions",
           "InputReplicationMode", "DistributedValues", "PerReplica", "Mirrored",
           "MirroredVariable", "DistributedDataset", "DistributedIterator",
           "CrossDeviceOps", "NcclAllReduce", "HierarchicalCopyAllReduce",
           "ReductionToOneDevice", "MultiWorkerMirroredStrategy", "cluster_resolver",
           "TPUStrategy", "ParameterServerStrategy", "experimental"]


class _Experimental:
    """``tf.distribute.experimental``: the names TensorFlow keeps there."""

    PerReplica = PerReplica
    ValueContext = ValueContext
    CentralStorageStrategy = CentralStorageStrategy
    MultiWorkerMirroredStrategy = ExperimentalMultiWorkerMirroredStrategy
    CommunicationOptions = CommunicationOptions
    CommunicationImplementation = CommunicationImplementation
    CollectiveCommunication = CollectiveCommunication
    TPUStrategy = TPUStrategy
    ParameterServerStrategy = ParameterServerStrategy

    def __repr__(self):
        return "<module 'tapeflow.distribute.experimental'>"


#: ``tf.distribute.experimental``
experimental = _Experimental()

# the hooks of the layers below, which never import this one
for _hooks, _fn in ((_models.strategy_hooks, active_strategy),
                    (_optimizers.aggregation_hooks, aggregate_and_apply),
                    (_nn.replicas_in_sync_hooks, replicas_for_loss),
                    (_rg.distribute_hooks, current_replica)):
    if _fn not in _hooks:
        _hooks.append(_fn)
del _hooks, _fn
