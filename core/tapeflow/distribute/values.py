"""Distributed values: what ``strategy.run`` returns and what variables become in a
strategy's scope.

* :class:`PerReplica` holds one value per local replica (``.values``), in replica order:
  the result of ``strategy.run``, a batch of a distributed dataset. It is a composite
  tensor, so a ``tf.function`` takes it as an argument (its components are traced).
* :class:`Mirrored` holds values that are equal on every replica.
* :class:`MirroredVariable` is a ``tf.Variable`` made under a multi-replica strategy's
  ``scope()``: ONE variable (on the strategy's first local device) that every replica
  reads, and that the optimizer updates once per step. It saves and restores as a plain
  Variable, so a checkpoint written under a strategy restores into a one-process model.

>>> import tapeflow as tf
>>> v = tf.distribute.PerReplica([tf.constant(1.0), tf.constant(2.0)])
>>> len(v.values)
2
>>> print(v)
PerReplica:{
  0: tf.Tensor(1.0, shape=(), dtype=float32),
  1: tf.Tensor(2.0, shape=(), dtype=float32)
}
"""

from __future__ import annotations

import enum

from ..errors import InvalidArgumentError, InvalidTypeError
from ..ops.composite import CompositeTensor, TypeSpec
from ..runtime import devices as _devs
from ..runtime.dispatch import convert_to_tensor, copy_to_device
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["ReduceOp", "VariableAggregation", "VariableSynchronization", "as_aggregation",
           "update_hooks", "DistributedValues", "PerReplica", "Mirrored", "MirroredVariable",
           "PerReplicaSpec", "regroup", "select_replica", "local_values", "on_device",
           "make_mirrored", "as_reduce_op"]


class ReduceOp(enum.Enum):
    """How values of the replicas combine: ``SUM`` or ``MEAN`` (the strings "SUM" and
    "MEAN" are accepted wherever a ReduceOp is).

    >>> import tapeflow as tf
    >>> tf.distribute.ReduceOp.from_variable_aggregation("MEAN")
    <ReduceOp.MEAN: 'MEAN'>
    """

    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def from_variable_aggregation(aggregation):
        """The ReduceOp of ``aggregation`` (a ReduceOp, or its name in any case)."""
        return as_reduce_op(aggregation, "ReduceOp.from_variable_aggregation")


def as_reduce_op(op, what) -> ReduceOp:
    """``op`` (a ReduceOp or "SUM"/"MEAN", any case) as a ReduceOp, else an error naming
    ``what``."""
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    raise InvalidArgumentError(f"{what}: reduce_op must be tf.distribute.ReduceOp.SUM or "
                               f"ReduceOp.MEAN (or the string 'SUM' or 'MEAN'), got {op!r}")


class VariableAggregation(enum.Enum):
    """How the replicas' updates of a mirrored variable combine (``tf.VariableAggregation``,
    given as ``tf.Variable(..., aggregation=)`` or ``add_weight(aggregation=)``; the
    names in any case are accepted too). With ``SUM``, ``MEAN`` or
    ``ONLY_FIRST_REPLICA`` an ``assign``/``assign_add``/``assign_sub`` inside
    ``strategy.run`` is a sync point that every replica must reach: the update is applied
    ONCE, with the sum of the replicas' values (over all workers), their mean, or
    replica 0's (worker 0's). ``NONE`` (the default) is no sync point: the updates of
    the first local replica to update the variable in that ``run`` are applied (see
    ``tapeflow.distribute.strategy``).

    >>> import tapeflow as tf
    >>> tf.VariableAggregation.MEAN
    <VariableAggregation.MEAN: 2>
    """

    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization(enum.Enum):
    """``tf.VariableSynchronization``: accepted and recorded (a mirrored variable has one
    value that every replica reads; its updates follow its aggregation)."""

    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


def as_aggregation(agg, what="aggregation") -> VariableAggregation:
    """``agg`` (None, a VariableAggregation, a ReduceOp, or a name in any case, Keras's
    ``"sum"``...) as a VariableAggregation, else an InvalidArgumentError."""
    if agg is None:
        return VariableAggregation.NONE
    if isinstance(agg, VariableAggregation):
        return agg
    name = agg.name if isinstance(agg, (ReduceOp, enum.Enum)) else agg
    if isinstance(name, str) and name.upper() in VariableAggregation.__members__:
        return VariableAggregation[name.upper()]
    raise InvalidArgumentError(
        f"{what} must be a tf.VariableAggregation (NONE, SUM, MEAN, ONLY_FIRST_REPLICA) or "
        f"its name, got {agg!r}")


#: the functions a MirroredVariable's assign/assign_add/assign_sub asks first:
#: ``hook(var, op, value)`` returns the result, or NotImplemented (then the update is
#: applied as on a plain Variable). tapeflow.distribute.strategy adds the replica one.
update_hooks: list = []


class DistributedValues:
    """Base of the values with one component per local replica (``.values``)."""

    @property
    def values(self) -> tuple:
        raise NotImplementedError

    def _repr_with(self, show):
        body = ",\n".join(f"  {i}: {show(v)}" for i, v in enumerate(self.values))
        return f"{type(self).__name__}:{{\n{body}\n}}"

    def __repr__(self):
        return self._repr_with(repr)

    def __str__(self):
        return self._repr_with(str)


class PerReplicaSpec(TypeSpec):
    """The TypeSpec of a :class:`PerReplica` of tensors: one ``(shape, dtype)`` per
    replica (a ``tf.function`` traces once per spec)."""

    def __init__(self, specs, value_type):
        self._specs = tuple(specs)
        self.value_type = value_type

    def component_specs(self):
        return self._specs

    def to_components(self, value):
        return tuple(convert_to_tensor(v) for v in value.values)

    def from_components(self, components):
        return self.value_type(tuple(components))

    def _serialize(self):
        return (self.value_type.__name__,
                tuple((tuple(s), d.name) for s, d in self._specs))


class _Components(DistributedValues, CompositeTensor):
    """A DistributedValues that is a composite tensor of its components."""

    def __init__(self, values):
        values = tuple(values)
        if not values:
            raise InvalidArgumentError(f"{type(self).__name__}: needs at least one value "
                                       "(one per local replica)")
        self._values = values

    @property
    def values(self) -> tuple:
        """The components, one per local replica, in replica order."""
        return self._values

    @property
    def _type_spec(self):
        comps = [convert_to_tensor(v) for v in self._values]
        return PerReplicaSpec([(tuple(t.shape), t.dtype) for t in comps], type(self))

    @classmethod
    def _dispatch_op(cls, op, inputs, attrs):
        raise InvalidTypeError(
            f"{op.name} does not take a {cls.__name__} (one value per replica): use it "
            "inside strategy.run (each replica gets its own value), or combine the replicas "
            "first with strategy.reduce, strategy.gather or "
            "strategy.experimental_local_results", op=op.name)


class PerReplica(_Components):
    """One value per local replica (``.values``): the result of ``strategy.run``, the
    element of a distributed dataset. Pass it to ``strategy.run`` (replica ``i`` gets
    ``values[i]``), or combine it with ``strategy.reduce`` / ``strategy.gather``."""


class Mirrored(_Components):
    """Values that are the same on every local replica, one copy per replica device."""


class MirroredVariable(Variable, DistributedValues):
    """A ``tf.Variable`` created under a multi-replica strategy's ``scope()``.

    One Variable, on the strategy's first local device; a replica that reads it inside
    ``strategy.run`` gets its value on the replica's device (a differentiable copy); the
    optimizer applies each update once. An ``assign``/``assign_add``/``assign_sub``
    inside ``strategy.run`` (more than one replica in sync) is a sync point that every
    replica must reach: the replicas' values combine by the variable's ``aggregation``
    (:class:`VariableAggregation`; over all workers) and the update is applied ONCE
    (a Keras metric's variables aggregate with SUM, so ``assign_add`` counts every
    replica's part; a BatchNormalization's moving statistics with ONLY_FIRST_REPLICA,
    replica 0's batch's, TensorFlow's figures).
    ``.values`` (and ``strategy.experimental_local_results``) gives the variable itself
    for the first local device and a copy of its value on each other one. It saves as
    one Variable: a checkpoint restores into a model built without a strategy."""

    def read_value(self):
        """The value, on the device of the innermost ``tf.device`` scope (a replica's
        device inside ``strategy.run``): a differentiable copy when the variable lives
        elsewhere (the gradient reaches the variable); else where it lives."""
        v = Variable.read_value(self)
        dev = _devs.current_device()
        return v if dev is None else copy_to_device(v, dev)

    value = read_value

    def assign(self, value, use_locking=None, name=None, read_value=True):
        return self._update_once("assign", value)

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        return self._update_once("assign_add", delta)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        return self._update_once("assign_sub", delta)

    def _update_once(self, op, value):
        for hook in update_hooks:
            out = hook(self, op, value)
            if out is not NotImplemented:
                return out
        return getattr(Variable, op)(self, value)

    @property
    def aggregation(self) -> VariableAggregation:
        """How updates made inside ``strategy.run`` combine (:class:`VariableAggregation`)."""
        return as_aggregation(self.__dict__.get("aggregation"))

    @property
    def values(self) -> tuple:
        devices = self.distribute_devices
        out = [self]
        cur = self.read_value()
        for d in devices[1:]:
            out.append(on_device(cur, d))
        return tuple(out)

    @property
    def distribute_devices(self) -> tuple:
        """The local devices of the strategy this variable was made under."""
        return getattr(self, "_distribute_devices", (self.device,))

    def __repr__(self):
        one = Variable.__repr__(self)
        n = len(self.distribute_devices)
        base = self.name[:-2] if self.name.endswith(":0") else self.name
        lines = [one] + [one.replace(f"'{self.name}'", f"'{base}/replica_{i}:0'", 1)
                         for i in range(1, n)]
        body = ",\n".join(f"  {i}: {s}" for i, s in enumerate(lines))
        return f"MirroredVariable:{{\n{body}\n}}"

    __str__ = __repr__


def make_mirrored(var, devices) -> None:
    """Turn the plain Variable ``var`` into a :class:`MirroredVariable` of ``devices``
    (the strategy's local devices): same object, same value."""
    var.__class__ = MirroredVariable
    var._distribute_devices = tuple(devices)


def on_device(t, device):
    """``t`` (a Tensor, Variable or array) as a Tensor on ``device`` (copied when it is
    elsewhere; the copy is differentiable)."""
    if not isinstance(t, (Tensor, Variable)):
        with _devs.device(device):
            return convert_to_tensor(t)
    return copy_to_device(t, device)


def local_values(value, n) -> tuple:
    """The ``n`` local components of ``value``: a PerReplica's values, a
    MirroredVariable's per-device values, else ``value`` ``n`` times."""
    if isinstance(value, (PerReplica, Mirrored, MirroredVariable)):
        vals = value.values
        if len(vals) != n:
            raise InvalidArgumentError(
                f"a {type(value).__name__} of {len(vals)} values where this strategy has "
                f"{n} local replicas: it comes from another strategy")
        return vals
    return (value,) * n


def select_replica(structure, i, n):
    """``structure`` with each distributed value replaced by its ``i``-th component
    (lists, tuples, namedtuples and dicts are walked; other objects are kept)."""
    if isinstance(structure, (PerReplica, Mirrored)):
        return local_values(structure, n)[i]
    if isinstance(structure, (list, tuple)) and type(structure) is not MirroredVariable:
        out = [select_replica(v, i, n) for v in structure]
        if hasattr(structure, "_fields"):
            return type(structure)(*out)
        return type(structure)(out) if type(structure) in (list, tuple) else _rebuild(
            structure, out)
    if isinstance(structure, dict):
        return type(structure)((k, select_replica(v, i, n)) for k, v in structure.items())
    return structure


def _rebuild(like, items):
    try:
        return type(like)(items)
    except TypeError:
        return list(items)


def regroup(per_replica: list, always_wrap: bool = False):
    """One structure from the replicas' structures: an object every replica returned
    (by identity) stays itself; lists, tuples and dicts of the same shape are combined
    member by member; anything else becomes a :class:`PerReplica` (with one replica and
    ``always_wrap`` False, the value itself)."""
    first = per_replica[0]
    if len(per_replica) == 1 and not always_wrap:
        return first
    if len(per_replica) > 1 and all(v is first for v in per_replica[1:]) and not \
            isinstance(first, (list, tuple, dict)):
        return first
    if isinstance(first, (list, tuple)) and not isinstance(first, Variable) and all(
            type(v) is type(first) and len(v) == len(first) for v in per_replica):
        parts = [regroup([v[k] for v in per_replica], always_wrap) for k in range(len(first))]
        if hasattr(first, "_fields"):
            return type(first)(*parts)
        return type(first)(parts) if type(first) in (list, tuple) else _rebuild(first, parts)
    if isinstance(first, dict) and all(
            isinstance(v, dict) and v.keys() == first.keys() for v in per_replica):
        return type(first)((k, regroup([v[k] for v in per_replica], always_wrap))
                           for k in first)
    if all(v is None for v in per_replica):
        return None
    return PerReplica(per_replica)
