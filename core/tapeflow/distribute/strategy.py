"""Strategies: the base :class:`Strategy`, the default one, :class:`MirroredStrategy`
and :class:`OneDeviceStrategy`, the replica context, and the hooks that make variables
mirrored and optimizers aggregate gradients.

Long file: one concept, the strategy API: the thread-local context state every part
reads, the replica runner and its sync points, the reductions, and the strategies.

How a strategy runs ``fn`` (``strategy.run(fn, args)``): once per local replica, each
in a thread of its own under ``tf.device(replica device)`` and a
:class:`ReplicaContext`. The replicas take turns, in replica order, as TensorFlow's
MirroredStrategy's do: one runs until it reaches a sync point
(``ReplicaContext.all_reduce``, ``all_gather``, ``merge_call``, an optimizer's
``apply_gradients``) or returns, then the next one runs; when all have reached the sync
point, its merge function runs once in the caller's thread (cross-replica context) and
the replicas go on. So Python state ``fn`` touches needs no lock, a layer built lazily
inside ``fn`` is built once (by replica 0), and the result never depends on thread
timing. An exception in a replica wakes the others (they unwind) and is re-raised in
the caller; replicas that disagree on their sync points raise an error naming them.
With one local replica ``fn`` runs in the calling thread. No wait is unbounded: a
replica that ends, or runs ``strategy.replica_timeout_s`` seconds (600) without
returning or reaching the sync point the others wait at (blocked on something another
replica holds), is a clear error.

``tf.function`` and the replicas, with more than one local replica: a tf.function
given to ``run`` itself (``strategy.run(f)``) is moved around the replicas, as
TensorFlow's MirroredStrategy does: each replica runs ``f.python_function`` (eagerly, as
inside any tf.function that calls ``strategy.run``), so its sync points work. A trace is
replayed only in the context it was made in (the strategy, and inside ``run`` the local
replica, are part of a tf.function's signature: ``tracing.function_cache.key_hooks``),
so a tf.function that the replica function calls deeper down is traced by each replica
(as TensorFlow's is), not replayed from a trace made outside ``run`` (whose updates are
plain) nor in another replica; a trace made inside ``run`` is not replayed outside it.
Its trace must not reach a sync point: the tracing replica holds the function's trace
lock, which the other replicas need to get to that sync point, so that is a
FailedPreconditionError at once, not a hang (TensorFlow's traces have in-graph
collectives). Put the ``tf.function`` around ``strategy.run``, as TensorFlow's guides
do, or pass it to ``run`` itself. A tf.function without sync points works anywhere.

Variables made in ``scope()`` (``tf.Variable``, layers' weights, optimizer slots,
metrics) are :class:`~.values.MirroredVariable`: one Variable on the first local device
(inside ``scope()`` new tensors and ops go there, as inside ``tf.device``), which each
replica reads on its own device (a differentiable copy) and the optimizer updates once
per step. A replica's ``assign``/``assign_add``/``assign_sub`` of one follows the
variable's ``aggregation`` (``tf.VariableAggregation``): SUM, MEAN and
ONLY_FIRST_REPLICA make it a sync point applied once with the combined value (over all
workers); NONE, the default, keeps the updates of the first replica to make one. Arguments of ``run`` are copied to each replica's device. Multi-worker
strategies (``MultiWorkerMirroredStrategy``) set the number of workers and override
``_cross_worker_reduce`` / ``_cross_worker_gather`` / ``_sync_initial_value``;
everything else is here.

Inside ``tf.function``: ``strategy.run`` is traced as one Python node (it runs eagerly,
replicas and all, at every call of the function); ``reduce`` and ``gather`` are traced;
``next()`` of a distributed iterator made outside takes the next element at every call;
a ``for`` loop over a distributed dataset inside the function is refused (loop outside).

>>> import tapeflow as tf
>>> strategy = tf.distribute.MirroredStrategy(["cpu:0"])
>>> with strategy.scope():
...     v = tf.Variable(2.0)
>>> def step(x):
...     ctx = tf.distribute.get_replica_context()
...     return ctx.all_reduce("SUM", x * v)
>>> print(strategy.run(step, args=(tf.constant(3.0),)))
tf.Tensor(6.0, shape=(), dtype=float32)
"""

from __future__ import annotations

import contextlib
import operator
import threading
import time

from .. import dtypes as _dt
from ..errors import (DeadlineExceededError, FailedPreconditionError, InvalidArgumentError,
                      InvalidTypeError, NotFoundError, UnimplementedError)
from ..layers.base import variable_creator_scope
from ..ops import array_gather as _ag
from ..ops import math as _m
from ..ops import reductions as _red
from ..runtime import context as _ctx
from ..runtime import devices as _devs
from ..runtime.dispatch import constant, convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..tracing import Function, opaque_call
from ..tracing.function_cache import key_hooks as _trace_key_hooks
from .. import nest
from .input import DistributedDataset, InputContext, InputOptions, ValueContext
from .values import (Mirrored, MirroredVariable, PerReplica, ReduceOp, VariableAggregation,
                     as_aggregation, as_reduce_op, local_values, make_mirrored, on_device,
                     regroup, select_replica, update_hooks)

__all__ = ["Strategy", "StrategyExtended", "MirroredStrategy", "OneDeviceStrategy",
           "ReplicaContext", "get_strategy", "has_strategy", "in_cross_replica_context",
           "get_replica_context", "CrossDeviceOps", "NcclAllReduce",
           "HierarchicalCopyAllReduce", "ReductionToOneDevice", "CentralStorageStrategy",
           "active_strategy", "current_replica", "TPUStrategy", "ParameterServerStrategy",
           "aggregate_and_apply", "replicas_for_loss"]


# --- the thread-local state --------------------------------------------------------------

class _State(threading.local):
    def __init__(self):
        self.scopes = []        # strategies whose scope() this thread is in, innermost last
        self.replica = None     # this thread's ReplicaContext inside strategy.run
        self.merging = 0        # > 0 while a merge function runs (cross-replica context)


_state = _State()


def _current():
    """The strategy of this thread's context, or None."""
    if _state.replica is not None and not _state.merging:
        return _state.replica.strategy
    return _state.scopes[-1] if _state.scopes else None


def _trace_context():
    """tf.function's key hook (tracing.function_cache.key_hooks): the strategy of this
    thread's context and, inside ``strategy.run``, the local replica (None: neither), so
    a trace is replayed only in the context it was made in -- one made outside ``run``
    (plain updates) is not replayed inside it (where updates are sync points), nor one
    made inside a replica (its collectives, its share of NONE updates) elsewhere."""
    st = _state
    r = st.replica
    if r is None or st.merging:
        s = st.scopes[-1] if st.scopes else None
        return None if isinstance(s, _DefaultStrategy) else s
    return r.strategy, r._local_index


_open_scopes = [0]          # scope()s open in any thread (run's included)
_open_lock = threading.Lock()


def _count_scope(delta):
    """A strategy's ``scope()`` opened (+1) or closed (-1): the key hook is installed
    while any is open (every replica runs inside its caller's), so a tf.function called
    with no strategy anywhere pays nothing for it."""
    with _open_lock:
        _open_scopes[0] += delta
        if _open_scopes[0] == 1 and delta > 0 and _trace_context not in _trace_key_hooks:
            _trace_key_hooks.append(_trace_context)
        elif _open_scopes[0] == 0 and _trace_context in _trace_key_hooks:
            _trace_key_hooks.remove(_trace_context)


def get_strategy():
    """The strategy of the current context: inside ``strategy.scope()`` or
    ``strategy.run`` that strategy, else the default strategy (one replica, the current
    device).

    >>> import tapeflow as tf
    >>> tf.distribute.get_strategy().num_replicas_in_sync
    1
    """
    s = _current()
    return s if s is not None else _default_strategy()


def has_strategy() -> bool:
    """Whether a strategy other than the default one is active (its scope, or its run).

    >>> import tapeflow as tf
    >>> tf.distribute.has_strategy()
    False
    """
    s = _current()
    return s is not None and not isinstance(s, _DefaultStrategy)


def active_strategy():
    """The active non-default strategy, or None (the hook ``tapeflow.models`` calls)."""
    s = _current()
    return None if s is None or isinstance(s, _DefaultStrategy) else s


def current_replica():
    """``(active strategy, its ReplicaContext or None)``, or None outside any non-default
    strategy (the hook ``tapeflow.random_generator`` calls: None for the replica context
    in the strategy's cross-replica context, its scope outside ``run``)."""
    s = active_strategy()
    return None if s is None else (s, get_replica_context())


def in_cross_replica_context() -> bool:
    """True inside a strategy's ``scope()`` but outside its ``run`` (and in a merge
    function); False in a replica, and outside any strategy.

    >>> import tapeflow as tf
    >>> with tf.distribute.MirroredStrategy(["cpu:0"]).scope():
    ...     tf.distribute.in_cross_replica_context()
    True
    """
    if _state.merging:
        return True
    if _state.replica is not None:
        return False
    return bool(_state.scopes) and not isinstance(_state.scopes[-1], _DefaultStrategy)


def get_replica_context():
    """The :class:`ReplicaContext` of the calling replica; None in cross-replica context
    (a strategy's scope, outside ``run``); outside any strategy, the default strategy's
    (one replica).

    >>> import tapeflow as tf
    >>> tf.distribute.get_replica_context().num_replicas_in_sync
    1
    """
    if _state.merging:
        return None
    if _state.replica is not None:
        return _state.replica
    if _state.scopes and not isinstance(_state.scopes[-1], _DefaultStrategy):
        return None
    return _default_strategy().default_replica_context()


# --- replica context ---------------------------------------------------------------------

class _Abort(BaseException):
    """Unwinds a replica thread when another replica failed (not an Exception: a
    replica's ``except Exception`` does not swallow it)."""


class ReplicaContext:
    """The context of one replica inside ``strategy.run``
    (``tf.distribute.get_replica_context()``): its id, the replica count, and the
    sync points across the replicas (``all_reduce``, ``all_gather``, ``merge_call``).

    >>> import tapeflow as tf
    >>> ctx = tf.distribute.get_replica_context()
    >>> print(ctx.replica_id_in_sync_group)
    tf.Tensor(0, shape=(), dtype=int32)
    >>> print(ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(2.0)))
    tf.Tensor(2.0, shape=(), dtype=float32)
    """

    def __init__(self, strategy, replica_id_in_sync_group=0, local_index=0, runner=None):
        self._strategy = strategy
        self._replica_id = int(replica_id_in_sync_group)
        self._local_index = int(local_index)
        self._runner = runner

    @property
    def strategy(self):
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self):
        """This replica's id among all replicas (an int32 scalar tensor: index a Python
        list with it, e.g. ``generators[ctx.replica_id_in_sync_group]``)."""
        return constant(self._replica_id, dtype=_dt.int32, device="cpu:0")

    @property
    def devices(self) -> tuple:
        """This replica's device (a one-element tuple of its name)."""
        return (self._strategy.extended.local_devices[self._local_index],)

    def merge_call(self, merge_fn, args=(), kwargs=None):
        """Run ``merge_fn(strategy, *args, **kwargs)`` ONCE for all local replicas, in
        cross-replica context, when every replica has called ``merge_call``; an argument
        that differs between replicas arrives as a :class:`~.values.PerReplica`. Every
        replica gets the result."""
        kwargs = dict(kwargs or {})
        if self._runner is None:            # the only replica of this process: now
            _state.merging += 1
            try:
                with self._strategy._scope_device():    # (where variables are updated)
                    return merge_fn(self._strategy, *args, **kwargs)
            finally:
                _state.merging -= 1
        return self._runner.sync(self._local_index, merge_fn, args, kwargs)

    def all_reduce(self, reduce_op, value, options=None):
        """``value`` (a tensor or a nested structure of them) reduced over all replicas
        (``ReduceOp.SUM`` or ``MEAN``); every replica gets the result, on its device."""
        op = as_reduce_op(reduce_op, "ReplicaContext.all_reduce")
        flat = nest.flatten(value)
        out = self.merge_call(_merge_leaves(op), args=(self._mine(flat),))
        return nest.pack_sequence_as(value, [leaf[self._local_index] for leaf in out])

    def _mine(self, flat):
        """The leaves a merge function receives: this replica's own, as PerReplica,
        when it is the only local replica (merge_call then passes them as they are)."""
        return flat if self._runner is not None else [PerReplica([x]) for x in flat]

    def all_gather(self, value, axis, options=None):
        """The replicas' ``value`` concatenated along ``axis`` in replica order (a
        tensor or a nested structure of them); every replica gets the result."""
        flat = nest.flatten(value)

        def merge(strategy, leaves):
            return [strategy.mirrored_results(strategy.gather(x, axis)) for x in leaves]

        out = self.merge_call(merge, args=(self._mine(flat),))
        return nest.pack_sequence_as(value, [leaf[self._local_index] for leaf in out])

    def __repr__(self):
        return (f"<ReplicaContext replica {self._replica_id} of "
                f"{self.num_replicas_in_sync}>")


def _merge_leaves(op):
    def merge(strategy, leaves):
        n = len(strategy.extended.local_devices)
        return [strategy.mirrored_results(strategy.reduce_local(
            op, x if isinstance(x, PerReplica) else PerReplica([x] * n))) for x in leaves]
    return merge


class _Runner:
    """One ``strategy.run`` over ``n`` local replicas, each in a thread; they take turns
    (see the module doc). ``turn``: the replica that may run (-1: the caller's, to
    merge or finish). Every wait ends: the replicas' when the caller stops the run (it
    always does, in ``run``'s ``finally``), the caller's when the replica whose turn it is
    arrives, fails, exits, or has run ``timeout`` seconds without reaching its next
    sync point (:class:`~tapeflow.errors.DeadlineExceededError`)."""

    def __init__(self, strategy, n, timeout):
        self.strategy = strategy
        self.n = n
        self.timeout = timeout
        self.cond = threading.Condition()
        self.turn = 0
        self.entries = [None] * n
        self.generation = 0
        self.merged = None
        self.error = None           # (replica index or None, exception)
        self.stopped = False
        self.threads = []
        self.stuck = None           # a replica that never came back (not joined)
        self.owners = {}            # id(variable) -> (local replica, variable): NONE updates

    def update_none(self, i, var):
        """Replica ``i`` updates ``var`` (aggregation NONE): NotImplemented (apply it)
        when ``i`` is the first replica of this run to update it, else ``var`` (skipped)."""
        owner = self.owners.setdefault(id(var), (i, var))[0]
        return NotImplemented if owner == i else var

    # replica side (holding self.cond where noted) ------------------------------------
    def _wait(self, ready):
        while not ready():
            if self.error is not None or self.stopped:
                raise _Abort()
            self.cond.wait(1.0)

    def _arrive(self, i, entry):
        self.entries[i] = entry
        self.turn = i + 1 if i + 1 < self.n else -1
        self.cond.notify_all()

    def replica_main(self, i, ctx, fn, args, kwargs, device):
        _state.replica = ctx
        _state.scopes = [self.strategy]
        try:
            with self.cond:
                self._wait(lambda: self.turn == i)
            with _devs.device(device):
                result = fn(*args, **kwargs)
            with self.cond:
                self._arrive(i, ("done", result))
        except _Abort:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            with self.cond:
                if self.error is None:
                    self.error = (i, e)
                self.cond.notify_all()

    def sync(self, i, merge_fn, args, kwargs):
        """Replica ``i`` reached a sync point: wait for the merge's result. Refused inside
        a trace: the tf.function being traced holds its trace lock, which the other
        replicas need to reach this point (they would wait for each other forever)."""
        if _ctx.thread_tracer.tracer is not None:
            raise FailedPreconditionError(
                f"strategy.run: local replica {i} reached a sync point "
                f"({_sync_name(merge_fn, args)})"
                f" while tracing a tf.function called inside the replica function; with "
                f"{self.n} local replicas they cannot meet inside a trace (one replica traces, "
                "the others wait for that trace). Put the tf.function around strategy.run "
                "(@tf.function def step(x): return strategy.run(fn, args=(x,))), pass it to "
                "strategy.run itself, or leave it undecorated")
        with self.cond:
            gen = self.generation
            self._arrive(i, ("sync", merge_fn, args, kwargs))
            self._wait(lambda: self.generation != gen and self.turn == i)
            return self.merged

    # caller side -------------------------------------------------------------------------
    def run(self, fn, per_replica_args):
        devices = self.strategy.extended.local_devices
        base = self.strategy.extended.worker_index * self.n
        for i in range(self.n):
            ctx = ReplicaContext(self.strategy, base + i, i, self)
            a, k = per_replica_args[i]
            t = threading.Thread(target=self.replica_main, name=f"tf.distribute replica {i}",
                                 args=(i, ctx, fn, a, k, devices[i]), daemon=True)
            self.threads.append(t)
        try:
            for t in self.threads:
                t.start()
            return self._coordinate()
        finally:
            with self.cond:
                self.stopped = True
                self.cond.notify_all()
            for i, t in enumerate(self.threads):
                if i != self.stuck:
                    t.join(timeout=30)

    def _await_caller_turn(self):
        """(Holding cond.) Wait until every replica has arrived, or fail clearly."""
        turn, since = self.turn, time.monotonic()
        while self.turn != -1 and self.error is None:
            self.cond.wait(0.25)                # (a timeout: Ctrl-C reaches the caller)
            if self.turn != turn:
                turn, since = self.turn, time.monotonic()
                continue
            if self.error is not None or turn == -1:
                break
            if not self.threads[turn].is_alive():
                raise FailedPreconditionError(
                    f"strategy.run: local replica {turn} ended without returning or reaching "
                    "a sync point")
            if self.timeout is not None and time.monotonic() - since > self.timeout:
                self.stuck = turn
                raise DeadlineExceededError(self._stuck_message(turn))

    def _stuck_message(self, turn):
        waiting = [j for j, e in enumerate(self.entries) if e is not None and e[0] == "sync"]
        at = (f"while replicas {waiting} wait at sync point "
              f"{_sync_name(*self.entries[waiting[0]][1:3])}" if waiting else
              "before any replica reached a sync point")
        return (f"strategy.run: local replica {turn} neither returned nor reached its next "
                f"sync point in {self.timeout:g} s ({type(self.strategy).__name__}."
                f"replica_timeout_s) {at}. A replica blocked on something another replica "
                "holds (a lock, a queue, an event another replica sets after its sync point) "
                "never gets there: only one replica runs at a time until a sync point. Raise "
                "replica_timeout_s if the step is just slow")

    def _coordinate(self):
        while True:
            with self.cond:
                self._await_caller_turn()
                if self.error is not None:
                    raise self.error[1]
                entries = list(self.entries)
            kinds = [e[0] for e in entries]
            if all(k == "done" for k in kinds):
                return [e[1] for e in entries]
            if any(k == "done" for k in kinds):
                done = [i for i, k in enumerate(kinds) if k == "done"]
                waiting = [i for i, k in enumerate(kinds) if k != "done"]
                raise FailedPreconditionError(
                    f"strategy.run: local replicas {done} returned while replicas {waiting} "
                    "wait at a sync point (all_reduce, merge_call, apply_gradients...): every "
                    "replica must reach the same sync points in the same order")
            _check_same_sync_point(entries)
            merge_fn = entries[0][1]
            args = regroup([e[2] for e in entries])
            kwargs = regroup([e[3] for e in entries])
            with self.strategy._scope_device():         # (where variables are updated)
                result = merge_fn(self.strategy, *args, **kwargs)
            with self.cond:
                self.merged = result
                self.entries = [None] * self.n
                self.generation += 1
                self.turn = 0
                self.cond.notify_all()


def _sync_name(merge_fn, args=None):
    """What a sync point is called in errors: the public call that made it (with its
    arguments ``args``: which update of which variable)."""
    name = getattr(merge_fn, "__qualname__", type(merge_fn).__name__)
    if name == "_update_merged" and args is not None and len(args) == 3:
        var, op = args[0], args[1]
        return f"MirroredVariable.{op} of '{getattr(var, 'name', var)}'"
    return _SYNC_NAMES.get(name, f"ReplicaContext.merge_call({name})")


_SYNC_NAMES = {"_merge_leaves.<locals>.merge": "ReplicaContext.all_reduce",
               "ReplicaContext.all_gather.<locals>.merge": "ReplicaContext.all_gather",
               "_apply_merged": "Optimizer.apply_gradients",
               "_update_merged": "MirroredVariable.assign/assign_add/assign_sub"}


def _sync_key(merge_fn, args):
    """What must agree between the replicas at one sync point: the merge function's code
    (each replica makes its own closure of it), and for an update its variable and op."""
    key = getattr(merge_fn, "__code__", None) or _sync_name(merge_fn)
    if getattr(merge_fn, "__qualname__", None) == "_update_merged" and len(args) == 3:
        return key, id(args[0]), args[1]
    return key


def _check_same_sync_point(entries):
    """A FailedPreconditionError naming each replica's sync point when the replicas'
    ``("sync", merge_fn, args, kwargs)`` entries are not one sync point."""
    keys = [_sync_key(e[1], e[2]) for e in entries]
    if all(k == keys[0] for k in keys[1:]):
        return
    reached = ", ".join(f"replica {i} at {_sync_name(e[1], e[2])}" for i, e in enumerate(entries))
    raise FailedPreconditionError(
        f"strategy.run: the local replicas reached different sync points ({reached}): every "
        "replica must reach the same sync points (the same update of the same variable) in "
        "the same order")


# --- variables: placement and mirroring ----------------------------------------------------

def _creation_strategy():
    """The strategy that variables made now in this thread belong to (None: plain)."""
    s = _current()
    if s is None or not s.mirrors_variables:
        return None
    return s


def _creator(next_creator, **kwargs):
    """Layers' variable creator under a scope: on the strategy's first local device."""
    s = active_strategy()
    if s is None:
        return next_creator(**kwargs)
    with _devs.device(s.variable_device):
        return next_creator(**kwargs)


def _on_variable_created(var):
    """Variable observer: a Variable made under a mirroring strategy becomes a
    MirroredVariable, with worker 0's initial value on a multi-worker strategy."""
    if not _state.scopes and _state.replica is None:
        return                              # (the common case: no strategy here)
    s = _creation_strategy()
    if s is None or type(var) is not Variable:
        return
    var.aggregation = as_aggregation(getattr(var, "aggregation", None),
                                     f"tf.Variable {var.name}: aggregation")
    if s.extended.num_workers > 1:
        with _ctx.stop_all_recording():
            var.assign(s._sync_initial_value(var.read_value()))
    make_mirrored(var, s.extended.local_devices)


_ctx.add_variable_observer(_on_variable_created)


# --- updates of mirrored variables inside strategy.run --------------------------------------

def _replica_update(var, op, value):
    """``MirroredVariable.assign*``'s hook: inside ``strategy.run`` with more than one
    replica in sync, a sync point whose merge applies the replicas' values once,
    combined by the variable's aggregation (over all workers); NotImplemented elsewhere
    (cross-replica context, a merge function, one replica in all: applied as it is).

    ``NONE`` (the default) is no sync point, as TensorFlow's (whose replicas each update
    their own copy, the first replica's being the one read outside ``run``): the
    updates of the local replica that updated the variable first in this ``run`` are
    applied, the other replicas' of it skipped; a variable each replica updates alone (a
    replica's own random generator) moves with each. Across workers NONE updates are
    not combined (TensorFlow's workers' copies diverge too): use ONLY_FIRST_REPLICA,
    SUM or MEAN for a variable every replica updates and all workers must agree on."""
    ctx = _state.replica
    if ctx is None or _state.merging or ctx.num_replicas_in_sync == 1:
        return NotImplemented
    agg = var.aggregation
    if agg is VariableAggregation.NONE:
        return ctx._runner.update_none(ctx._local_index, var) if ctx._runner else NotImplemented
    if agg is VariableAggregation.MEAN and not var.dtype.is_floating:
        raise InvalidArgumentError(
            f"{var.name}.{op} inside strategy.run: a {var.dtype.name} variable cannot "
            "aggregate with MEAN over the replicas; make it a float variable or update it "
            "in cross-replica context (outside strategy.run)")
    if isinstance(value, Variable):
        value = value.read_value()
    elif not isinstance(value, Tensor):
        value = convert_to_tensor(value, dtype=var.dtype)
    ctx.merge_call(_update_merged, args=(var, op, value))
    return var


def _update_merged(strategy, var, op, value):
    if not isinstance(var, MirroredVariable):
        raise FailedPreconditionError(
            f"strategy.run: the replicas updated different variables at one sync point "
            f"({op}); every replica must update the same variables in the same order")
    if isinstance(op, PerReplica):          # (equal names, checked by _coordinate)
        op = op.values[0]
    n = len(strategy.extended.local_devices)
    vals = local_values(value, n)
    agg = var.aggregation
    if agg is VariableAggregation.ONLY_FIRST_REPLICA:
        t = on_device(vals[0], var.device)
        if strategy.extended.num_workers > 1:        # global replica 0's: worker 0's
            t = strategy._sync_initial_value(t)
    else:
        t = on_device(vals[0], var.device)
        for x in vals[1:]:
            t = _m.add(t, on_device(x, var.device))
        t = strategy._cw_reduce(t)
        if agg is VariableAggregation.MEAN:
            t = _m.divide(t, _m.cast(constant(strategy.num_replicas_in_sync), t.dtype))
    getattr(Variable, op)(var, t)
    return var


update_hooks.append(_replica_update)


# --- the optimizer hook and the loss helpers' replica count -----------------------------------

def aggregate_and_apply(optimizer, grads_and_vars, global_step, aggregate):
    """``Optimizer.apply_gradients``' hook: inside ``strategy.run`` with more than one
    replica in sync, sum the gradients over all replicas (``aggregate``) and apply them
    once; NotImplemented elsewhere (the optimizer applies them itself)."""
    ctx = _state.replica
    if ctx is None or _state.merging or ctx.num_replicas_in_sync == 1:
        return NotImplemented
    pairs = [tuple(p) for p in grads_and_vars]
    return ctx.merge_call(_apply_merged, args=(optimizer, pairs, global_step, aggregate))


def _apply_merged(strategy, optimizer, pairs, global_step, aggregate):
    n = len(strategy.extended.local_devices)
    if not isinstance(pairs, (list, tuple)) or any(
            not isinstance(p, tuple) or len(p) != 2 for p in pairs):
        raise InvalidArgumentError(
            f"{type(optimizer).__name__}.apply_gradients under {type(strategy).__name__}: "
            "the replicas passed different lists of (gradient, variable) pairs; every "
            "replica must pass the same variables in the same order")
    out, todo = [], []
    for g, v in pairs:
        vals = [x for x in local_values(g, n) if x is not None]
        if not vals:
            out.append((None, v))
            continue
        if not aggregate:
            out.append((vals[0], v))
            continue
        total = on_device(vals[0], v.device)
        for x in vals[1:]:
            total = _m.add(total, on_device(x, v.device))
        todo.append(len(out))
        out.append((total, v))
    if todo:
        reduced = strategy._cross_worker_reduce_many(ReduceOp.SUM, [out[k][0] for k in todo])
        for k, t in zip(todo, reduced):
            out[k] = (t, out[k][1])
    return optimizer.apply_gradients(out, global_step=global_step)


def replicas_for_loss() -> int:
    """``tf.nn.compute_average_loss``' replica count: the current strategy's
    ``num_replicas_in_sync``; an error in cross-replica context (TensorFlow's)."""
    if has_strategy() and in_cross_replica_context():
        raise FailedPreconditionError(
            "compute_average_loss / scale_regularization_loss called in cross-replica "
            "context (a strategy's scope, outside strategy.run): call them inside the "
            "function strategy.run runs, or pass global_batch_size")
    return get_strategy().num_replicas_in_sync


# --- cross-device ops (accepted, recorded) ------------------------------------------------

class CrossDeviceOps:
    """How a MirroredStrategy reduces across its local devices. tapeflow sums on the
    first local device (the runtime copies between devices); the classes are accepted
    and recorded (``strategy.extended.cross_device_ops``)."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def __repr__(self):
        return f"{type(self).__name__}()"


class NcclAllReduce(CrossDeviceOps):
    """TensorFlow's NCCL all-reduce between GPUs (accepted, recorded)."""


class HierarchicalCopyAllReduce(CrossDeviceOps):
    """TensorFlow's hierarchical copy all-reduce (accepted, recorded)."""


class ReductionToOneDevice(CrossDeviceOps):
    """Reduce on one device, then copy back (what tapeflow does)."""


# --- strategies ------------------------------------------------------------------------------

class StrategyExtended:
    """``strategy.extended``: the devices and the worker of a strategy."""

    def __init__(self, strategy):
        self._s = strategy

    @property
    def local_devices(self) -> tuple:
        """Canonical names of this process's replica devices (``"cpu:0"``...)."""
        return self._s._devices

    @property
    def worker_devices(self) -> tuple:
        """This process's replica devices by TensorFlow's full names."""
        return tuple(str(_devs.full_name(_devs.get_device(d))) for d in self._s._devices)

    @property
    def parameter_devices(self) -> tuple:
        return self.worker_devices

    @property
    def num_workers(self) -> int:
        return self._s._num_workers

    @property
    def worker_index(self) -> int:
        return self._s._worker_index

    @property
    def cross_device_ops(self):
        return self._s._cross_device_ops

    def variable_created_in_scope(self, v) -> bool:
        """Whether ``v`` was made under this strategy's scope."""
        return isinstance(v, MirroredVariable) and (
            v.distribute_devices == self._s._devices)

    @property
    def experimental_require_static_shapes(self) -> bool:
        return False

    @property
    def should_checkpoint(self) -> bool:
        return self._s._worker_index == 0

    should_save_summary = should_checkpoint


def _canonical_device(spec, who):
    """The name of the device ``spec`` places a replica on: ``tf.device``'s rule, so
    with soft placement on (the default, as TensorFlow) a GPU this machine lacks is
    ``cpu:0`` (logged once); a name no backend makes is an error."""
    if isinstance(spec, _devs.Device):
        return spec.name
    if not isinstance(spec, str) and isinstance(getattr(spec, "name", None), str) \
            and hasattr(spec, "device_type"):
        spec = spec.name                # a tf.config.LogicalDevice (or PhysicalDevice)
    if not isinstance(spec, str):
        raise InvalidTypeError(f"{who}: a device must be a name such as 'cpu:0', '/gpu:0' or "
                               f"'/device:CPU:0', got {type(spec).__name__} {spec!r}")
    try:
        with _devs.device(spec) as dev:
            name = dev.name
    except (NotFoundError, InvalidArgumentError) as e:
        raise InvalidArgumentError(
            f"{who}: unknown device {spec!r} ({getattr(e, 'message', e)}); list the "
            "devices with tf.config.list_logical_devices()") from None
    wanted = _spelling(spec)
    if wanted != name and wanted.startswith("cpu:"):
        # (soft placement is for accelerators this machine lacks, as TensorFlow's; a
        # second CPU replica on cpu:0 would be a silent duplicate)
        raise InvalidArgumentError(
            f"{who}: device {spec!r} does not exist (the logical CPUs are "
            f"{[d.name for d in _devs.list_devices() if d.is_host]}); create logical "
            "CPUs before making the strategy: tf.config.set_logical_device_configuration("
            "tf.config.list_physical_devices('CPU')[0], "
            "[tf.config.LogicalDeviceConfiguration()] * 2)")
    return name


def _spelling(spec):
    try:
        return _devs.canonical_name(spec) if isinstance(spec, str) else spec
    except InvalidArgumentError:
        return spec


class Strategy:
    """A distribution strategy (``tf.distribute.Strategy``): see the module doc.

    Subclasses set ``self._devices`` (this process's replica devices),
    ``self._num_workers`` and ``self._worker_index`` (through ``__init__``) and, for
    several workers, override ``_cross_worker_reduce``, ``_cross_worker_gather`` and
    ``_sync_initial_value``."""

    #: whether variables made in scope() become MirroredVariables
    mirrors_variables = True
    #: the longest ``run`` waits for the running replica to reach its next sync point or
    #: return (seconds; None: no limit): past it, a DeadlineExceededError names the replica
    replica_timeout_s = 600.0

    def __init__(self, devices, num_workers=1, worker_index=0, cross_device_ops=None):
        devices = [devices] if isinstance(devices, str) else list(devices)
        who = type(self).__name__
        if not devices:
            raise InvalidArgumentError(f"{who}: needs at least one device")
        given = [d.name if isinstance(d, _devs.Device) else _spelling(getattr(d, "name", d))
                 for d in devices]
        if len(set(given)) != len(given):
            raise InvalidArgumentError(f"{who}: a device is listed twice in {list(devices)}; "
                                       "give each device once")
        self._devices = tuple(_canonical_device(d, who) for d in devices)
        self._num_workers = int(num_workers)
        self._worker_index = int(worker_index)
        self._cross_device_ops = cross_device_ops
        self._extended = StrategyExtended(self)
        self._default_ctx = None

    # --- what multi-worker strategies override -----------------------------------------
    def _cross_worker_reduce(self, reduce_op, tensor):
        """The SUM of ``tensor`` over the workers (one worker: itself)."""
        return tensor

    def _cross_worker_reduce_many(self, reduce_op, tensors):
        """``_cross_worker_reduce`` of each tensor (a multi-worker strategy may fuse)."""
        return [self._cross_worker_reduce(reduce_op, t) for t in tensors]

    def _cross_worker_gather(self, tensor, axis):
        """The workers' ``tensor`` concatenated along ``axis`` in worker order."""
        return tensor

    def _sync_initial_value(self, value):
        """A new variable's initial value as every worker must start it (worker 0's)."""
        return value

    # --- properties ------------------------------------------------------------------------
    @property
    def num_replicas_in_sync(self) -> int:
        """The number of replicas over all workers."""
        return len(self._devices) * self._num_workers

    @property
    def extended(self) -> StrategyExtended:
        return self._extended

    @property
    def variable_device(self) -> str:
        """Where variables made in ``scope()`` live: the first local device."""
        return self._devices[0]

    @property
    def cluster_resolver(self):
        return None

    def __repr__(self):
        return (f"<tf.distribute.{type(self).__name__} devices={list(self._devices)}"
                + (f" workers={self._num_workers}" if self._num_workers > 1 else "") + ">")

    def default_replica_context(self):
        if self._default_ctx is None:
            self._default_ctx = ReplicaContext(self, 0, 0, None)
        return self._default_ctx

    # --- scope -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self):
        """Make this the current strategy: variables made inside are mirrored
        (:class:`~.values.MirroredVariable`), ``get_strategy()`` returns it. Inside, as
        inside ``tf.device(strategy.variable_device)``, new tensors and ops go to the
        variables' device (the first local device), so code in the scope computes
        where the variables live. Scopes of one strategy nest; entering another
        strategy's scope inside raises."""
        cur = _current()
        if cur is not None and cur is not self and not isinstance(cur, _DefaultStrategy) \
                and not isinstance(self, _DefaultStrategy):
            raise FailedPreconditionError(
                f"Mixing different tf.distribute.Strategy objects: {self!r} is not {cur!r}: "
                f"leave {type(cur).__name__}'s scope (or run) before entering "
                f"{type(self).__name__}'s")
        _state.scopes.append(self)
        counted = not isinstance(self, _DefaultStrategy)
        if counted:
            _count_scope(1)
        try:
            with variable_creator_scope(_creator), self._scope_device():
                yield self
        finally:
            _state.scopes.pop()
            if counted:
                _count_scope(-1)

    def _scope_device(self):
        """The device scope of ``scope()``: the variables' device."""
        return _devs.device(self.variable_device)

    # --- run ---------------------------------------------------------------------------------
    def run(self, fn, args=(), kwargs=None, options=None):
        """Run ``fn(*args, **kwargs)`` once per local replica (see the module doc): a
        :class:`~.values.PerReplica` argument gives each replica its own component.
        Returns the replicas' results, a PerReplica where they differ (a plain value
        when the strategy has one replica in all)."""
        if not callable(fn):
            raise InvalidTypeError(f"{type(self).__name__}.run: fn must be callable, got "
                                   f"{type(fn).__name__}")
        kwargs = dict(kwargs or {})
        if _state.replica is not None and not _state.merging and not isinstance(
                _state.replica.strategy, _DefaultStrategy):
            raise FailedPreconditionError(
                f"{type(self).__name__}.run called inside strategy.run (a replica "
                "context): call it from cross-replica context, outside the replica function")
        cur = _current()
        if cur is not None and cur is not self and not isinstance(cur, _DefaultStrategy):
            raise FailedPreconditionError(
                f"Mixing different tf.distribute.Strategy objects: {type(self).__name__}.run "
                f"called inside the scope of {cur!r}; call it outside that scope")
        if isinstance(fn, Function) and len(self._devices) > 1:
            # as TensorFlow's MirroredStrategy: the tf.function goes around the replicas,
            # which run its Python function (a trace inside one replica cannot meet the
            # others at a sync point; see the module doc)
            fn = fn.python_function
        if _ctx.thread_tracer.tracer is not None:
            return self._run_traced(fn, args, kwargs)
        return self._run_eager(fn, args, kwargs)

    def _run_eager(self, fn, args, kwargs):
        n = len(self._devices)
        wrap = self.num_replicas_in_sync > 1
        with contextlib.ExitStack() as stack:
            if _current() is not self:
                stack.enter_context(self.scope())
            if n == 1:
                d = self._devices[0]
                return self._run_one(fn, _place(select_replica(args, 0, 1), d),
                                     _place(select_replica(kwargs, 0, 1), d), wrap)
            per = [(_place(select_replica(args, i, n), d),
                    _place(select_replica(kwargs, i, n), d))
                   for i, d in enumerate(self._devices)]
            results = _Runner(self, n, self.replica_timeout_s).run(fn, per)
            return regroup(results, always_wrap=wrap)

    def _run_one(self, fn, args, kwargs, wrap):
        prev = _state.replica
        _state.replica = ReplicaContext(self, self._worker_index, 0, None)
        try:
            with self._replica_device():
                result = fn(*args, **kwargs)
        finally:
            _state.replica = prev
        return regroup([result], always_wrap=wrap)

    def _replica_device(self):
        return _devs.device(self._devices[0])

    def _run_traced(self, fn, args, kwargs):
        """``run`` inside a tf.function trace: one Python node that runs the replicas
        eagerly at every call of the function."""
        leaves = _flatten_dist((args, kwargs))
        pos = [k for k, x in enumerate(leaves) if isinstance(x, (Tensor, Variable))]
        box = {}

        def eager(*tensors):
            vals = list(leaves)
            for k, t in zip(pos, tensors):
                vals[k] = t
            a, kw = _unflatten_dist((args, kwargs), iter(vals))
            result = self._run_eager(fn, a, kw)
            flat = _flatten_dist(result)
            box.setdefault("structure", result)
            box.setdefault("kinds", [isinstance(x, (Tensor, Variable)) for x in flat])
            return [x for x in flat if isinstance(x, (Tensor, Variable))]

        out = opaque_call(eager, [leaves[k] for k in pos])
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        static = iter([x for x in _flatten_dist(box["structure"])
                       if not isinstance(x, (Tensor, Variable))])
        dyn = iter(out)
        flat = [next(dyn) if k else next(static) for k in box["kinds"]]
        return _unflatten_dist(box["structure"], iter(flat))

    # --- reductions ----------------------------------------------------------------------------
    def reduce_local(self, reduce_op, value, axis=None):
        """``value`` reduced over all replicas (local ones summed on the first local
        device in replica order, then over the workers); see :meth:`reduce`."""
        op = as_reduce_op(reduce_op, f"{type(self).__name__}.reduce")
        n = len(self._devices)
        dest = self._devices[0]
        distributed = isinstance(value, (PerReplica, Mirrored, MirroredVariable))
        if not distributed and op is ReduceOp.SUM and self.num_replicas_in_sync > 1:
            raise InvalidArgumentError(
                f"{type(self).__name__}.reduce: a value that is not per-replica "
                f"({type(value).__name__}) cannot be reduced with SUM over "
                f"{self.num_replicas_in_sync} replicas: pass what strategy.run returned")
        vals = local_values(value, n) if distributed else (value,)
        ts = [on_device(v, dest) for v in vals]
        if axis is not None:
            for t in ts:
                _check_axis(axis, t, f"{type(self).__name__}.reduce")
            counts = [int(t.shape[axis]) for t in ts]
            ts = [_red.reduce_sum(t, axis=axis) for t in ts]
        total = ts[0]
        for t in ts[1:]:
            total = _m.add(total, t)
        if not distributed:
            if axis is not None and op is ReduceOp.MEAN:
                return _divide(total, counts[0])
            return total
        total = self._cw_reduce(total)
        if op is ReduceOp.SUM:
            return total
        if axis is None:
            return _divide(total, self.num_replicas_in_sync)
        count = sum(counts)
        if self._num_workers > 1:
            count = int(self._cw_reduce(constant(count, dtype=_dt.int64)).numpy())
        return _divide(total, count)

    def _cw_reduce(self, t):
        if self._num_workers == 1:
            return t
        if _ctx.thread_tracer.tracer is not None:
            return opaque_call(lambda x: self._cross_worker_reduce(ReduceOp.SUM, x), [t])
        return self._cross_worker_reduce(ReduceOp.SUM, t)

    def reduce(self, reduce_op, value, axis=None):
        """``value`` (per-replica, e.g. what :meth:`run` returned; or a nested structure
        of such) reduced over ALL replicas with ``ReduceOp.SUM`` or ``MEAN``. With
        ``axis`` each replica's value is reduced along that axis first, and MEAN divides
        by the total count along it. Returns tensors on the first local device."""
        if _state.replica is not None and not _state.merging:
            raise FailedPreconditionError(
                f"{type(self).__name__}.reduce called inside strategy.run: use "
                "tf.distribute.get_replica_context().all_reduce there")
        if isinstance(value, (list, tuple, dict)):
            return nest.map_structure(lambda v: self.reduce_local(reduce_op, v, axis),
                                      value)
        return self.reduce_local(reduce_op, value, axis)

    def gather(self, value, axis):
        """The replicas' ``value`` concatenated along ``axis`` in replica order (over all
        workers), on the first local device."""
        if _state.replica is not None and not _state.merging:
            raise FailedPreconditionError(
                f"{type(self).__name__}.gather called inside strategy.run: use "
                "tf.distribute.get_replica_context().all_gather there")
        n = len(self._devices)
        ts = [on_device(v, self._devices[0]) for v in local_values(value, n)]
        local = ts[0] if len(ts) == 1 else _ag.concat(ts, axis)
        if self._num_workers == 1:
            return local
        if _ctx.thread_tracer.tracer is not None:
            return opaque_call(lambda x: self._cross_worker_gather(x, axis), [local])
        return self._cross_worker_gather(local, axis)

    def mirrored_results(self, value):
        """``value`` copied to each local device: a tuple, one per local replica."""
        return tuple(on_device(value, d) if isinstance(value, (Tensor, Variable)) else value
                     for d in self._devices)

    def experimental_local_results(self, value):
        """The local replicas' components of ``value`` as a tuple (one per local
        replica): a PerReplica's values, a MirroredVariable's per-device values; a
        nested structure gives a tuple of structures; a plain value, itself once."""
        n = len(self._devices)
        if isinstance(value, (PerReplica, Mirrored, MirroredVariable)):
            return tuple(local_values(value, n))
        leaves = _flatten_dist(value, keep=True)
        if not any(isinstance(x, (PerReplica, Mirrored, MirroredVariable)) for x in leaves):
            return (value,)
        return tuple(select_replica(value, i, n) for i in range(n))

    # --- input ---------------------------------------------------------------------------------
    def experimental_distribute_dataset(self, dataset, options=None):
        """A :class:`~.input.DistributedDataset` of ``dataset``'s global batches split
        over the replicas (see :mod:`tapeflow.distribute.input`)."""
        _check_options(options)
        return DistributedDataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """``dataset_fn(InputContext)`` (called once, for this worker) gives per-replica
        batches; each local replica takes the next one per step."""
        if not callable(dataset_fn):
            raise InvalidTypeError("distribute_datasets_from_function: dataset_fn must be "
                                   f"callable, got {type(dataset_fn).__name__}")
        _check_options(options)
        ctx = InputContext(self._num_workers, self._worker_index, self.num_replicas_in_sync)
        return DistributedDataset(self, dataset_fn(ctx), options, per_replica=True)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def experimental_distribute_values_from_function(self, value_fn):
        """A PerReplica of ``value_fn(ValueContext)`` for each local replica (on its
        device); a plain value with one replica in all."""
        vals = []
        for i, d in enumerate(self._devices):
            ctx = ValueContext(self._worker_index * len(self._devices) + i,
                               self.num_replicas_in_sync)
            with _devs.device(d):
                vals.append(value_fn(ctx))
        return regroup(vals, always_wrap=self.num_replicas_in_sync > 1)


def _place(structure, device):
    """``structure`` with each Tensor copied to ``device`` (a replica's arguments: the
    runtime moves only host tensors into a device scope by itself)."""
    if isinstance(structure, Tensor):
        return on_device(structure, device)
    if isinstance(structure, (list, tuple)) and not isinstance(structure, Variable):
        parts = [_place(v, device) for v in structure]
        if hasattr(structure, "_fields"):
            return type(structure)(*parts)
        return type(structure)(parts) if type(structure) in (list, tuple) else structure
    if isinstance(structure, dict):
        return type(structure)((k, _place(v, device)) for k, v in structure.items())
    return structure


def _check_options(options):
    if options is not None and not isinstance(options, InputOptions):
        raise InvalidTypeError(f"options must be a tf.distribute.InputOptions, got "
                               f"{type(options).__name__}")


def _divide(total, count):
    """A MEAN's division; an integer total gives float64, as TensorFlow's (3 / 2 = 1.5)."""
    if total.dtype.is_integer or total.dtype is _dt.bool_:
        total = _m.cast(total, _dt.float64)
    return _m.divide(total, _m.cast(constant(count), total.dtype))


def _check_axis(axis, t, who):
    """An InvalidArgumentError unless ``axis`` is an axis of the replica value ``t``."""
    try:
        ok = -t.ndim <= operator.index(axis) < t.ndim
    except TypeError:
        ok = False
    if not ok:
        valid = (f"give an axis in [{-t.ndim}, {t.ndim}), or axis=None" if t.ndim else
                 "a scalar has no axis: give axis=None")
        raise InvalidArgumentError(
            f"{who}: axis {axis!r} is out of range for a replica value of rank {t.ndim} "
            f"(shape {tuple(t.shape)}): {valid}")


def _flatten_dist(structure, keep=False):
    """Leaves of ``structure`` (lists, tuples, dicts walked; a PerReplica's components
    are leaves unless ``keep``)."""
    out = []

    def walk(x):
        if isinstance(x, (PerReplica, Mirrored)) and not keep:
            out.extend(x.values)
        elif isinstance(x, (list, tuple)) and not isinstance(x, Variable):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        else:
            out.append(x)

    walk(structure)
    return out


def _unflatten_dist(like, it):
    """The inverse of :func:`_flatten_dist`: ``like``'s structure from the iterator."""
    if isinstance(like, (PerReplica, Mirrored)):
        return type(like)([next(it) for _ in like.values])
    if isinstance(like, (list, tuple)) and not isinstance(like, Variable):
        parts = [_unflatten_dist(v, it) for v in like]
        if hasattr(like, "_fields"):
            return type(like)(*parts)
        return type(like)(parts)
    if isinstance(like, dict):
        return type(like)((k, _unflatten_dist(v, it)) for k, v in like.items())
    return next(it)


class _DefaultStrategy(Strategy):
    """The strategy outside any scope: one replica on the current device; ``run`` calls
    the function, variables are plain."""

    mirrors_variables = False

    def __init__(self):
        super().__init__([_devs.default_device().name])

    @property
    def _devices(self):
        """The current device: the innermost ``tf.device`` scope's, else the default
        device (looked up at each use: ``tf.config.set_default_device`` moves it)."""
        return ((_devs.current_device() or _devs.default_device()).name,)

    @_devices.setter
    def _devices(self, devices):
        pass                            # (Strategy.__init__'s; the property decides)

    def _replica_device(self):
        return contextlib.nullcontext()

    def _scope_device(self):
        return contextlib.nullcontext()

    def run(self, fn, args=(), kwargs=None, options=None):
        return fn(*args, **dict(kwargs or {}))

    def reduce(self, reduce_op, value, axis=None):
        """As TensorFlow's default strategy: with ``axis=None`` a value that is not
        distributed comes back unchanged (a Python float stays one)."""
        as_reduce_op(reduce_op, "Strategy.reduce")
        if axis is None and not any(isinstance(x, (PerReplica, Mirrored, MirroredVariable))
                                    for x in _flatten_dist(value, keep=True)):
            return value
        return super().reduce(reduce_op, value, axis)


_DEFAULT = []


def _default_strategy():
    if not _DEFAULT:
        _DEFAULT.append(_DefaultStrategy())
    return _DEFAULT[0]


class OneDeviceStrategy(Strategy):
    """One replica on ``device``: ``run`` places the function's ops there, variables made
    in ``scope()`` live there, datasets' batches are copied there.

    >>> import tapeflow as tf
    >>> s = tf.distribute.OneDeviceStrategy("/cpu:0")
    >>> with s.scope():
    ...     v = tf.Variable(1.0)
    >>> print(s.run(lambda: v * 2))
    tf.Tensor(2.0, shape=(), dtype=float32)
    """

    def __init__(self, device):
        super().__init__([device])


def _default_devices():
    """``MirroredStrategy()``'s devices, as TensorFlow's: every GPU, else every logical
    CPU (``cpu:0`` ... ``cpu:N-1`` after ``tf.config.set_logical_device_configuration``)."""
    devices = _devs.list_devices()
    return [d.name for d in devices if d.is_gpu] or [d.name for d in devices if d.is_host]


class MirroredStrategy(Strategy):
    """Synchronous training on the local devices of this process, one replica each:
    variables made in ``scope()`` are mirrored, ``run`` runs the step on every replica,
    gradients are summed over the replicas and applied once.

    ``devices=None`` takes every GPU there is (``cuda:0``...), else every logical CPU
    (``["cpu:0"]``, or ``cpu:0`` ... ``cpu:N-1`` after
    ``tf.config.set_logical_device_configuration``), as TensorFlow does; name devices
    explicitly to use others, e.g. ``["cpu:0", "opencl:0"]``. TensorFlow's spellings
    (``"/gpu:0"``, ``"/device:CPU:0"``) and ``tf.config.list_logical_devices()``'s
    objects are accepted; an unknown device is an InvalidArgumentError listing the ones
    there are, and so is a logical CPU not created (``"cpu:1"`` without
    ``tf.config.set_logical_device_configuration``; a missing GPU soft-places on
    ``cpu:0``, as TensorFlow's). ``cross_device_ops``
    (``NcclAllReduce()``...) is accepted and recorded: the replicas' values are summed on
    the first local device.

    >>> import tapeflow as tf
    >>> strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    >>> strategy.num_replicas_in_sync
    1
    >>> strategy.extended.worker_devices
    ('/job:localhost/replica:0/task:0/device:CPU:0',)
    """

    def __init__(self, devices=None, cross_device_ops=None):
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise InvalidTypeError(
                f"MirroredStrategy: cross_device_ops must be a tf.distribute.CrossDeviceOps "
                f"(NcclAllReduce(), HierarchicalCopyAllReduce(), ReductionToOneDevice()), "
                f"got {type(cross_device_ops).__name__}")
        super().__init__(_default_devices() if devices is None else devices,
                         cross_device_ops=cross_device_ops)


class CentralStorageStrategy(MirroredStrategy):
    """``tf.distribute.experimental.CentralStorageStrategy``: replicas on
    ``compute_devices`` (default as :class:`MirroredStrategy`'s ``devices=None``),
    variables on ``parameter_device`` (default ``cpu:0``). tapeflow's MirroredStrategy
    already keeps one copy of each variable; this one only places it.

    >>> import tapeflow as tf
    >>> s = tf.distribute.experimental.CentralStorageStrategy(["cpu:0"])
    >>> s.variable_device
    'cpu:0'
    """

    def __init__(self, compute_devices=None, parameter_device=None):
        super().__init__(compute_devices)
        self._parameter_device = _canonical_device(
            "cpu:0" if parameter_device is None else parameter_device,
            "CentralStorageStrategy")

    @property
    def variable_device(self) -> str:
        return self._parameter_device


class _Unavailable(Strategy):
    """A TensorFlow strategy tapeflow has no hardware or runtime for: the name exists (an
    import, ``hasattr`` or ``isinstance`` check works), constructing it is an
    UnimplementedError saying what to use instead."""

    _instead = ""

    def __init__(self, *args, **kwargs):
        raise UnimplementedError(f"tf.distribute.{type(self).__name__} is not available in "
                                 f"tapeflow: {self._instead}")


class TPUStrategy(_Unavailable):
    """``tf.distribute.TPUStrategy`` (and ``experimental.TPUStrategy``): tapeflow has no
    TPU backend, so constructing one raises UnimplementedError.

    >>> import tapeflow as tf
    >>> try:
    ...     tf.distribute.TPUStrategy()
    ... except tf.errors.UnimplementedError as e:
    ...     print(str(e)[:45])
    tf.distribute.TPUStrategy is not available in
    """

    _instead = ("there is no TPU backend; use tf.distribute.MirroredStrategy() for this "
                "machine's GPUs (or logical CPUs), MultiWorkerMirroredStrategy for several "
                "processes")


class ParameterServerStrategy(_Unavailable):
    """``tf.distribute.ParameterServerStrategy`` (and ``experimental.``): asynchronous
    training with parameter servers is not implemented; constructing one raises
    UnimplementedError.

    >>> import tapeflow as tf
    >>> hasattr(tf.distribute.experimental, "ParameterServerStrategy")
    True
    >>> try:
    ...     tf.distribute.experimental.ParameterServerStrategy(None)
    ... except tf.errors.UnimplementedError as e:
    ...     print(str(e)[:46])
    tf.distribute.ParameterServerStrategy is not a
    """

    _instead = ("asynchronous parameter-server training is not implemented; train "
                "synchronously with tf.distribute.MultiWorkerMirroredStrategy (one replica "
                "per process of an MPI job) or MirroredStrategy (the local devices)")
