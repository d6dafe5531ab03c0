"""Distributed input: datasets whose elements are :class:`~.values.PerReplica` batches.

``strategy.experimental_distribute_dataset(dataset)`` takes a dataset of GLOBAL batches
(a ``tf.data.Dataset``, or any Python iterable of batches: tuples, dicts, arrays) and
splits each batch along axis 0 into ``num_replicas_in_sync`` contiguous slices (sizes
as ``np.array_split``'s when the batch does not divide evenly, so a short last batch
leaves some replicas fewer or no examples); local replica ``i`` of worker ``w`` gets
slice ``w * local_replicas + i``, placed on its device. Each worker reads the whole
dataset and keeps its own slices, so summing per-replica losses scaled by the global
batch size gives exactly the one-process mean loss.

``strategy.distribute_datasets_from_function(fn)`` calls ``fn(InputContext)`` once per
worker; its elements are per-replica batches already: each local replica takes the
next one.

>>> import tapeflow as tf
>>> strategy = tf.distribute.MirroredStrategy(["cpu:0"])
>>> ds = tf.data.Dataset.range(6).batch(3)
>>> [b.numpy().tolist() for b in strategy.experimental_distribute_dataset(ds)]
[[0, 1, 2], [3, 4, 5]]
"""

from __future__ import annotations

import enum

import numpy as np

from .. import nest
from ..errors import InvalidArgumentError, InvalidTypeError, OutOfRangeError, UnimplementedError
from ..runtime import context as _ctx
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..tracing.control_flow import host_next
from .values import PerReplica, on_device

__all__ = ["InputContext", "InputOptions", "InputReplicationMode", "ValueContext",
           "DistributedDataset", "DistributedIterator", "split_batch"]


class InputReplicationMode(enum.Enum):
    """How input pipelines map to replicas: ``PER_WORKER`` (one pipeline per worker,
    the only mode tapeflow runs) or ``PER_REPLICA`` (accepted; the pipeline is still one
    per worker)."""

    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


class InputOptions:
    """Options of a distributed dataset. ``experimental_fetch_to_device`` (default
    True): each replica's slice is copied to the replica's device; False keeps it where
    the dataset made it. The other options are accepted and recorded."""

    def __init__(self, experimental_fetch_to_device=None, experimental_replication_mode=
                 InputReplicationMode.PER_WORKER, experimental_place_dataset_on_device=False,
                 experimental_per_replica_buffer_size=1):
        self.experimental_fetch_to_device = (True if experimental_fetch_to_device is None
                                             else bool(experimental_fetch_to_device))
        self.experimental_replication_mode = InputReplicationMode(experimental_replication_mode)
        self.experimental_place_dataset_on_device = bool(experimental_place_dataset_on_device)
        self.experimental_per_replica_buffer_size = int(experimental_per_replica_buffer_size)

    def __repr__(self):
        return (f"InputOptions(experimental_fetch_to_device="
                f"{self.experimental_fetch_to_device}, experimental_replication_mode="
                f"{self.experimental_replication_mode})")


class InputContext:
    """What ``distribute_datasets_from_function``'s function is told: this worker's
    pipeline (``input_pipeline_id`` of ``num_input_pipelines``) and the replicas.

    >>> import tapeflow as tf
    >>> ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1,
    ...                                  num_replicas_in_sync=4)
    >>> ctx.get_per_replica_batch_size(64)
    16
    """

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self.num_input_pipelines = int(num_input_pipelines)
        self.input_pipeline_id = int(input_pipeline_id)
        self.num_replicas_in_sync = int(num_replicas_in_sync)

    def get_per_replica_batch_size(self, global_batch_size):
        """``global_batch_size / num_replicas_in_sync``; an error when it does not divide."""
        if global_batch_size % self.num_replicas_in_sync:
            raise InvalidArgumentError(
                f"InputContext.get_per_replica_batch_size: the global batch size "
                f"{global_batch_size} is not divisible by num_replicas_in_sync "
                f"{self.num_replicas_in_sync}")
        return global_batch_size // self.num_replicas_in_sync

    def __repr__(self):
        return (f"InputContext(num_input_pipelines={self.num_input_pipelines}, "
                f"input_pipeline_id={self.input_pipeline_id}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


class ValueContext:
    """What ``experimental_distribute_values_from_function``'s function is told: the
    replica it makes a value for."""

    def __init__(self, replica_id_in_sync_group=0, num_replicas_in_sync=1):
        self.replica_id_in_sync_group = int(replica_id_in_sync_group)
        self.num_replicas_in_sync = int(num_replicas_in_sync)

    def __repr__(self):
        return (f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


def split_batch(element, num_slices, first, count):
    """Slices ``first`` .. ``first + count - 1`` of ``num_slices`` of every tensor in the
    structure ``element``, along axis 0: a list of ``count`` structures."""
    leaves = nest.flatten(element)
    tensors = []
    for x in leaves:
        t = x if isinstance(x, Tensor) else convert_to_tensor(x)
        if t.ndim == 0:
            raise InvalidArgumentError(
                "a distributed dataset splits each batch along axis 0 over the replicas, but "
                "an element has a scalar (shape ()): batch the dataset first "
                "(dataset.batch(global_batch_size))")
        tensors.append(t)
    n = int(tensors[0].shape[0]) if tensors else 0
    for t in tensors[1:]:
        if int(t.shape[0]) != n:
            raise InvalidArgumentError(
                f"a distributed dataset's element has parts with different batch sizes "
                f"({[int(u.shape[0]) for u in tensors]}); every part must have the batch "
                "on axis 0")
    bounds = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(n), num_slices)])
    out = []
    for k in range(first, first + count):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        out.append(nest.pack_sequence_as(element, [t[lo:hi] for t in tensors]))
    return out


class DistributedIterator:
    """An iterator over a distributed dataset: each ``next()`` is one step's input,
    with a :class:`~.values.PerReplica` in place of each tensor (a plain value when the
    strategy has one replica in all). ``get_next()`` is ``next()``;
    ``get_next_as_optional()`` is not provided."""

    def __init__(self, dataset):
        self._ds = dataset
        self._it = iter(dataset.source())

    def __iter__(self):
        return self

    def __next__(self):
        if _ctx.thread_tracer.tracer is None:
            return self._ds.next_from(self._it)
        # inside tf.function: a node that takes the next element at every call
        box = []

        def fetch():
            el = self._ds.next_from(self._it)
            if not box:
                box.append(el)
            return _components(el)

        _, flat = host_next(fetch, label="DistributedIterator.next")
        return _rebuild(box[0], iter(flat))

    def get_next(self):
        """The next element; OutOfRangeError at the end (TensorFlow's)."""
        try:
            return next(self)
        except StopIteration:
            raise OutOfRangeError("DistributedIterator.get_next: end of sequence") from None

    @property
    def element_spec(self):
        return None


class DistributedDataset:
    """A dataset of per-replica batches (see the module doc); iterate it with ``for``
    or ``iter``/``next`` (each ``iter`` starts from the beginning, as a tf.data
    dataset's does)."""

    def __init__(self, strategy, source, options=None, per_replica=False):
        if not hasattr(source, "__iter__"):
            raise InvalidTypeError(
                f"experimental_distribute_dataset: expected a tf.data.Dataset or an iterable "
                f"of batches, got {type(source).__name__}")
        self._strategy = strategy
        self._source = source
        self._options = options if options is not None else InputOptions()
        self._per_replica = per_replica

    def source(self):
        """The dataset (or iterable) this one distributes."""
        return self._source

    def __iter__(self):
        if _ctx.thread_tracer.tracer is not None:
            raise UnimplementedError(
                "iterating a distributed dataset inside tf.function is not supported: loop "
                "outside the function (for batch in dist_dataset: step(batch)), or make the "
                "iterator outside (it = iter(dist_dataset)) and call next(it) inside")
        return DistributedIterator(self)

    def next_from(self, it):
        """The next step's element drawn from ``it`` (an iterator of the source)."""
        s = self._strategy
        devices = s.extended.local_devices
        n_local = len(devices)
        if self._per_replica:               # distribute_datasets_from_function: one each
            parts = [next(it)]
            for _ in range(n_local - 1):
                try:
                    parts.append(next(it))
                except StopIteration:
                    raise InvalidArgumentError(
                        f"distribute_datasets_from_function: the dataset ended in the middle "
                        f"of a step ({len(parts)} of {n_local} local replicas got a batch); "
                        "repeat it or make its length a multiple of the local replica "
                        "count") from None
        else:
            parts = split_batch(next(it), s.num_replicas_in_sync,
                                s.extended.worker_index * n_local, n_local)
        if self._options.experimental_fetch_to_device:
            parts = [nest.map_structure(lambda t, d=d: on_device(t, d), p)
                     for p, d in zip(parts, devices)]
        if s.num_replicas_in_sync == 1:
            return parts[0]
        return nest.map_structure(lambda *vs: PerReplica(vs), *parts)

    def __repr__(self):
        return f"<tf.distribute.DistributedDataset of {type(self._source).__name__}>"


def _components(element):
    """The tensors of an element, each PerReplica's components in order."""
    out = []
    for x in nest.flatten(element):
        out.extend(x.values if isinstance(x, PerReplica) else [x])
    return out


def _rebuild(like, it):
    """``like``'s structure with its tensors (PerReplica components too) from ``it``."""
    leaves = [PerReplica([next(it) for _ in x.values]) if isinstance(x, PerReplica)
              else next(it) for x in nest.flatten(like)]
    return nest.pack_sequence_as(like, leaves)
