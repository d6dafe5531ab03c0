"""Data-parallel training on top of the collectives, Horovod's way: every rank runs the
same model on its shard of the data, the gradients are averaged over the ranks before
they are applied, and every rank starts from rank 0's weights.
"""

from __future__ import annotations

import numpy as np

from ..autodiff.tape import GradientTape
from ..keras.callbacks import Callback
from ..runtime.dispatch import constant
from .. import nest
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..train.optimizers import Optimizer
from . import _collectives as C
from . import _world


def _source_name(s, i):
    name = getattr(s, "name", None) if isinstance(s, Variable) else None
    return name or f"source {i}"


_ENTRIES: dict = {}


def _entries(sources):
    """``[(name, shape, dtype)]`` of ``sources``, cached per list of source objects (a
    training loop passes the same Variables every step; the cache holds them, so their
    ids cannot be reused while cached)."""
    key = tuple(map(id, sources))
    hit = _ENTRIES.get(key)
    if hit is not None:
        return hit[1]
    entries = [(_source_name(s, i), tuple(int(d) for d in s.shape), s.dtype.name)
               for i, s in enumerate(sources)]
    if len(_ENTRIES) > 64:
        _ENTRIES.clear()
    _ENTRIES[key] = (list(sources), entries)
    return entries


def reduce_gradients(grads, sources, op=C.Average, bucket_bytes=None, name="gradients"):
    """Average (or ``op``) the gradients ``grads`` of ``sources`` over all ranks, fused.

    A gradient that is ``None`` on every rank stays ``None``; one that is ``None`` on
    some ranks only (a branch one rank did not take) counts as zeros there, so every
    rank gets the same result and the same buckets. One tiny allreduce agrees on that
    (and on shapes and dtypes when the world's check is on) before the buckets move.
    """
    w = _world.world()
    grads = list(grads)
    sources = list(sources)
    if len(grads) != len(sources):
        raise InvalidArgumentError(
            f"reduce_gradients: {len(grads)} gradients for {len(sources)} sources")
    C._check_op(op, "reduce_gradients")
    if w.size == 1:
        return C.grouped_allreduce(grads, op=op, name=name, bucket_bytes=bucket_bytes)
    # one tiny allreduce: the metadata check (the sources' names, shapes, dtypes) and
    # which gradients exist on any rank
    entries = _entries(sources)
    have = C.agree(w, "allreduce", entries, (op, name),
                   flags=[int(g is not None) for g in grads])
    full = []
    for i, (g, s, h) in enumerate(zip(grads, sources, have)):
        if g is None and h:
            g = constant(0, dtype=s.dtype, shape=tuple(s.shape), device=s._device.name)
        elif g is not None and not isinstance(g, Tensor):
            raise InvalidTypeError(
                f"reduce_gradients: the gradient of {_source_name(s, i)} is a "
                f"{type(g).__name__}, not a Tensor")
        full.append(g)
    return C.grouped_allreduce(full, op=op, name=name, bucket_bytes=bucket_bytes,
                               _checked=True)


class DistributedGradientTape:
    """A :class:`~tapeflow.GradientTape` whose :meth:`gradient` returns the gradients
    averaged over all ranks (Horovod's ``hvd.DistributedGradientTape``)::

        with tf.GradientTape() as tape:
            loss = loss_fn(model(x), y)
        tape = tf.distributed.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    Small gradients are packed into buffers of up to ``bucket_bytes`` (default: the
    world's, 64 MiB) and each buffer is reduced with one call (tensor fusion);
    ``bucket_bytes=0`` reduces each gradient on its own. It can also open the block:
    ``with tf.distributed.DistributedGradientTape(tf.GradientTape()) as tape:``.
    Everything else (``watch``, ``jacobian``, ...) is the wrapped tape's.
    """

    def __init__(self, tape, op=C.Average, bucket_bytes=None):
        if not isinstance(tape, GradientTape):
            raise InvalidTypeError(
                f"DistributedGradientTape wraps a tf.GradientTape, got {type(tape).__name__}")
        C._check_op(op, "DistributedGradientTape")
        self._tape = tape
        self._op = op
        self._bucket_bytes = bucket_bytes

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._tape, name)

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients="none"):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients,
                                    unconnected_gradients=unconnected_gradients)
        single = isinstance(sources, (Tensor, Variable))
        flat_src = [sources] if single else nest.flatten(sources)
        flat_g = [grads] if single else nest.flatten(grads)
        out = reduce_gradients(flat_g, flat_src, op=self._op, bucket_bytes=self._bucket_bytes)
        return out[0] if single else nest.pack_sequence_as(sources, out)


def broadcast_variables(variables, root_rank=0):
    """Give every rank ``root_rank``'s values of ``variables`` (one MPI call per dtype).
    Call it once the variables exist (after the model's first call) and after
    ``Checkpoint.restore`` on the root, so that all ranks start identical.

    >>> import tapeflow as tf
    >>> v = tf.Variable([1., 2.])
    >>> tf.distributed.broadcast_variables([v])
    >>> print(v.numpy())
    [1. 2.]
    """
    variables = list(variables)
    for i, v in enumerate(variables):
        if not isinstance(v, Variable):
            raise InvalidTypeError(
                f"broadcast_variables: entry {i} is a {type(v).__name__}, not a tf.Variable")
    w = _world.world()
    if w.size == 1 or not variables:
        C._check_root(w, root_rank, "broadcast_variables")
        return None
    values = C.grouped_broadcast([v.read_value() for v in variables], root_rank,
                                 name="variables")
    for v, value in zip(variables, values):
        v.assign(value)
    return None


def optimizer_state(optimizer, variables):
    """The optimizer's state Variables for ``variables`` (slots and step counters),
    created now where the optimizer has not made them yet."""
    if not isinstance(optimizer, Optimizer):
        raise InvalidTypeError(
            f"broadcast_optimizer_state: expected a tapeflow optimizer, got "
            f"{type(optimizer).__name__}")
    variables = [v for v in variables if isinstance(v, Variable)]
    if not variables:
        return []
    for v in variables:
        if id(v) not in optimizer._state:
            optimizer._create_slots(v)
    optimizer._create_non_slot([(None, v) for v in variables])
    return optimizer.variables()


def broadcast_optimizer_state(optimizer, variables, root_rank=0):
    """Give every rank ``root_rank``'s optimizer state (Adam's moments and step count,
    momentum buffers...) for ``variables``: after ``Checkpoint.restore`` on the root,
    the other ranks have no state yet; this creates it and copies the root's."""
    broadcast_variables(optimizer_state(optimizer, variables), root_rank)


_DIST_CLASSES = {}


def DistributedOptimizer(optimizer, op=C.Average, bucket_bytes=None):
    """``optimizer``, whose ``apply_gradients`` (and so ``minimize`` and
    ``Model.fit``) first averages the gradients over all ranks, fused. The result is
    an instance of a subclass of the optimizer's class sharing its state, so
    checkpoints and ``isinstance`` checks see the same optimizer."""
    if not isinstance(optimizer, Optimizer):
        raise InvalidTypeError(
            f"DistributedOptimizer wraps a tapeflow optimizer, got {type(optimizer).__name__}")
    C._check_op(op, "DistributedOptimizer")
    base = type(optimizer)
    if getattr(base, "_distributed", False):
        return optimizer
    cls = _DIST_CLASSES.get(base)
    if cls is None:
        def apply_gradients(self, grads_and_vars, *args, **kwargs):
            pairs = list(grads_and_vars)
            reduced = reduce_gradients([g for g, _ in pairs], [v for _, v in pairs],
                                       op=self._dist_op, bucket_bytes=self._dist_bucket)
            return base.apply_gradients(self, list(zip(reduced, (v for _, v in pairs))),
                                        *args, **kwargs)

        cls = _DIST_CLASSES[base] = type(
            base.__name__, (base,),
            {"apply_gradients": apply_gradients, "_distributed": True,
             "__module__": base.__module__,
             "__doc__": f"{base.__name__} averaging gradients over ranks first."})
    new = object.__new__(cls)
    new.__dict__ = optimizer.__dict__          # the same state, not a copy
    new.__dict__["_dist_op"] = op
    new.__dict__["_dist_bucket"] = bucket_bytes
    return new


# --- Model.fit callbacks ----------------------------------------------------------------

class BroadcastGlobalVariablesCallback(Callback):
    """``Model.fit`` callback: every rank starts from ``root_rank``'s weights and
    optimizer state. At the start of training when the model is built; otherwise
    right after the first batch (which builds it), as Horovod does."""

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank
        self._done = False

    def _broadcast(self):
        model = self.model
        variables = list(model.variables)
        if not variables:
            return
        broadcast_variables(variables, self.root_rank)
        opt = getattr(model, "optimizer", None)
        if isinstance(opt, Optimizer):
            broadcast_optimizer_state(opt, model.trainable_variables, self.root_rank)
        self._done = True

    def on_train_begin(self, logs=None):
        self._done = False
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self._done:
            self._broadcast()


class MetricAverageCallback(Callback):
    """``Model.fit`` callback: at the end of each epoch the logged metrics (loss,
    accuracy, ``val_*``) are averaged over the ranks, so that History, early stopping
    and the progress bar of rank 0 see the job's figures, not one shard's. Put it
    before the callbacks that read the logs."""

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if isinstance(v, (int, float, np.number)))
        vals = np.array([float(logs[k]) for k in keys], dtype=np.float64)
        avg = C.allreduce(constant(vals), op=C.Average, name=f"metrics of epoch {epoch}")
        for k, v in zip(keys, avg.numpy().tolist()):
            logs[k] = v


class RankZeroOnly(Callback):
    """Run ``callback`` on rank 0 only (checkpoint writers, TensorBoard writers, anything
    that writes files or prints): ``callbacks=[tf.distributed.RankZeroOnly(cb)]``."""

    def __init__(self, callback):
        super().__init__()
        self.callback = callback

    def set_model(self, model):
        super().set_model(model)
        if _world.rank() == 0 and hasattr(self.callback, "set_model"):
            self.callback.set_model(model)

    def __getattribute__(self, name):
        if name.startswith("on_") and _world.rank() == 0:
            return getattr(object.__getattribute__(self, "callback"), name, _nothing)
        if name.startswith("on_"):
            return _nothing
        return object.__getattribute__(self, name)


def _nothing(*args, **kwargs):
    return None
