"""``tf.random.Generator``: TensorFlow 2's stateful random-number generator.

A Generator holds its state in a ``tf.Variable`` (int64, shape [3] for Philox: the
128-bit counter ``state[0] + 2**64 * state[1]`` and the 64-bit key ``state[2]``, as
TensorFlow lays it out). Each draw reads the state, advances the counter by 256 per
value drawn (TensorFlow's reservation) and runs a stateless Philox4x32-10 op on the
state it read, so a Generator gives TensorFlow 2.21's numbers for the same seed, and
the same numbers on every backend.

Because the state is a Variable, a Generator checkpoints and restores with
``tf.train.Checkpoint`` (it is a ``tf.Module``; its variable is ``_state_var``) and
works in ``tf.function``: a Generator captured by a traced function advances at each
call; one passed as an argument is a Python object (a trace per Generator).

>>> import tapeflow as tf
>>> g = tf.random.Generator.from_seed(1)
>>> print(g.normal([2]).numpy().round(4))
[ 0.4384 -0.5344]
>>> print(g.state.numpy())
[513   0   0]
>>> g.reset_from_seed(1)
>>> print(g.uniform([3], maxval=10, dtype=tf.int32))
tf.Tensor([4 9 3], shape=(3,), dtype=int32)

The algorithms, the state layout and what matches TensorFlow bit for bit: docs/random.md.
Where tapeflow differs: ``alg="threefry"`` raises UnimplementedError when drawing
(TensorFlow runs ThreeFry under XLA only); ``binomial`` is not implemented.

Under ``tf.distribute``, as TensorFlow: a Generator made in a strategy's ``scope()`` (or
inside its ``run``) gives each replica of ``strategy.run`` its own stream (the key mixed
with the replica's id by one Philox draw) and advances its state once per step, all
replicas drawing from the same counter; one made outside any strategy is shared, each
replica's draw advancing it in turn. Where tapeflow differs: inside a ``tf.function``
that replicas call, one trace serves every replica (and a SavedModel), so there the
replicas draw as from a generator made outside the strategy (a tf.function given to
``strategy.run`` itself is not one of those: each replica runs its Python function).
"""

from __future__ import annotations

import enum
import os
import threading

import numpy as np

from . import dtypes as _dt
from .errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from .module import Module
from .ops import array_creation as _ac
from .ops import array_gather as _ag
from .ops import array_shape as _ash
from .ops import math as _m
from .ops import random as _rnd
from .runtime import context as _ctx
from .runtime import shapes as _shapes
from .runtime.dispatch import convert_to_tensor
from .runtime.variable import Variable

__all__ = ["Algorithm", "Generator", "get_global_generator", "set_global_generator",
           "create_rng_state", "experimental"]

_M64 = (1 << 64) - 1
_STATE_SIZE = 3
#: an eager draw reads and advances a state atomically (TensorFlow's RngReadAndSkip is one op)
_ADVANCE_LOCK = threading.Lock()


class Algorithm(enum.Enum):
    """The RNG algorithms (``tf.random.Algorithm``): PHILOX is implemented."""
    PHILOX = 1
    THREEFRY = 2
    AUTO_SELECT = 3


def _alg_id(alg, fn):
    """``alg`` (None, a name, an :class:`Algorithm` or its int) -> its int."""
    if alg is None:
        return Algorithm.PHILOX.value
    if isinstance(alg, Algorithm):
        return alg.value
    if isinstance(alg, str):
        try:
            return Algorithm[alg.upper()].value
        except KeyError:
            pass
    elif isinstance(alg, (int, np.integer)) and not isinstance(alg, bool) and \
            int(alg) in (1, 2, 3):
        return int(alg)
    raise InvalidArgumentError(f"{fn}: unknown RNG algorithm {alg!r}; use 'philox', "
                               "'threefry', 'auto_select' or a tf.random.Algorithm", op=fn)


def _signed(v):
    """A 64-bit unsigned value as the int64 of the same bits."""
    v &= _M64
    return v - (1 << 64) if v >= (1 << 63) else v


def create_rng_state(seed, alg):
    """The state a seed makes (``tf.random.create_rng_state``): an int64 tensor of
    shape [3]. An integer is cut into 64-bit words, lowest first; a list of integers is
    taken as the words, left-padded with zeros (or cut) to 3.

    >>> import tapeflow as tf
    >>> print(tf.random.create_rng_state(1234, "philox"))
    tf.Tensor([1234    0    0], shape=(3,), dtype=int64)
    """
    _alg_id(alg, "create_rng_state")
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seed = int(seed)
        words = [_signed(seed >> (64 * i)) for i in range(_STATE_SIZE)]
    else:
        try:
            flat = np.asarray(seed.numpy() if hasattr(seed, "numpy") else seed).reshape(-1)
        except (TypeError, ValueError) as e:
            raise InvalidTypeError(f"create_rng_state: seed must be an integer or a 1-D "
                                   f"list of integers, got {_shapes.short_repr(seed)} ({e})",
                                   op="create_rng_state") from None
        if flat.dtype.kind not in "iuO" or flat.dtype.kind == "O" and not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in flat):
            raise InvalidTypeError(f"create_rng_state: seed must be an integer or a 1-D list "
                                   f"of integers, got {_shapes.short_repr(seed)}",
                                   op="create_rng_state")
        words = [_signed(int(v)) for v in flat[:_STATE_SIZE]]
        words = [0] * (_STATE_SIZE - len(words)) + words
    return convert_to_tensor(words, dtype=_dt.int64)


def _state_tensor(state, fn):
    """A state argument as an int64 tensor of shape [3]."""
    if isinstance(state, Variable):
        state = state.read_value()
    if not hasattr(state, "dtype"):
        try:
            state = convert_to_tensor([_signed(int(v)) for v in np.asarray(state).reshape(-1)],
                                      dtype=_dt.int64)
        except (TypeError, ValueError, OverflowError):
            raise InvalidTypeError(f"{fn}: the state must be 3 integers, got "
                                   f"{_shapes.short_repr(state)}", op=fn) from None
    elif state.dtype != _dt.int64:
        state = _m.cast(state, _dt.int64)
    if tuple(state.shape) != (_STATE_SIZE,):
        raise InvalidArgumentError(f"{fn}: a Philox state has shape [3] (counter low, counter "
                                   f"high, key), got shape {list(state.shape)}", op=fn)
    return state


def _nondeterministic_state():
    return [_signed(int.from_bytes(os.urandom(8), "little")) for _ in range(_STATE_SIZE)]


def _count(shape, fn):
    n = 1
    for d in _shapes.as_shape(shape, fn):
        n *= d
    return n


#: ``fn() -> (strategy, replica context or None) or None``, appended by ``tapeflow.distribute``
#: (a layer above, never imported here): the active strategy and, inside its ``run``, the
#: replica's ``ReplicaContext`` (None in its cross-replica context)
distribute_hooks: list = []


_SHARED_LOCK = threading.Lock()


def _distribution():
    for fn in distribute_hooks:
        got = fn()
        if got is not None:
            return got
    return None


class Generator(Module):
    """A random-number generator with its state in a Variable (``tf.random.Generator``).

    Make one with :meth:`from_seed`, :meth:`from_non_deterministic_state`,
    :meth:`from_key_counter` or :meth:`from_state`; draw with :meth:`normal`,
    :meth:`uniform`, :meth:`truncated_normal`, :meth:`uniform_full_int`.

    >>> import tapeflow as tf
    >>> g = tf.random.Generator.from_seed(7)
    >>> a = g.normal([3])
    >>> g.reset_from_seed(7)
    >>> bool((g.normal([3]).numpy() == a.numpy()).all())
    True
    """

    def __init__(self, copy_from=None, state=None, alg=None):
        super().__init__(name="generator")
        if copy_from is not None:
            if state is not None or alg is not None:
                raise InvalidArgumentError("Generator: give copy_from, or state and alg, "
                                           "not both", op="Generator")
            state, alg = copy_from.state.read_value(), copy_from.algorithm
        elif state is None or alg is None:
            raise InvalidArgumentError("Generator: state and alg must be given together "
                                       "(or use Generator.from_seed(seed))", op="Generator")
        self._alg = _alg_id(alg, "Generator")
        if isinstance(state, Variable):
            _state_tensor(state, "Generator")
            self._state_var = state
        else:
            self._state_var = Variable(_state_tensor(state, "Generator"), trainable=False,
                                       name="StateVar", dtype=_dt.int64)
        # made under a strategy: per-replica streams; made inside a replica: its own
        dist = _distribution()
        self._strategy, self._own = (dist[0], dist[1] is not None) if dist else (None, False)
        self._shared = ([], {})     # this step's states read, each replica's draws so far

    # --- constructors -------------------------------------------------------------------
    @classmethod
    def from_seed(cls, seed, alg=None):
        """A generator whose state is :func:`create_rng_state` of ``seed``."""
        return cls(state=create_rng_state(seed, "philox" if alg is None else alg),
                   alg=Algorithm.PHILOX if alg is None else alg)

    @classmethod
    def from_non_deterministic_state(cls, alg=None):
        """A generator with a state from the operating system's entropy."""
        return cls(state=_nondeterministic_state(), alg=Algorithm.PHILOX if alg is None else alg)

    @classmethod
    def from_key_counter(cls, key, counter, alg):
        """A generator with state ``counter + [key]`` (``counter``: 2 integers)."""
        return cls(state=_key_counter_state(key, counter, "from_key_counter"), alg=alg)

    @classmethod
    def from_state(cls, state, alg):
        """A generator with ``state`` (3 integers, or a Variable it then uses)."""
        return cls(state=state, alg=alg)

    # --- state --------------------------------------------------------------------------
    @property
    def state(self):
        """The state Variable (int64 [3]: counter low, counter high, key)."""
        return self._state_var

    @property
    def algorithm(self):
        """The algorithm's id (1: Philox)."""
        return self._alg

    @property
    def key(self):
        """The key part of the state (a scalar int64 tensor)."""
        return self._state_var.read_value()[-1]

    def reset(self, state):
        """Set the state to ``state`` (3 integers)."""
        self._state_var.assign(_state_tensor(state, "Generator.reset"))

    def reset_from_seed(self, seed):
        """Set the state to :func:`create_rng_state` of ``seed``."""
        self._state_var.assign(create_rng_state(seed, self._alg))

    def reset_from_key_counter(self, key, counter):
        """Set the state to ``counter + [key]``."""
        self._state_var.assign(_key_counter_state(key, counter, "reset_from_key_counter"))

    def skip(self, delta):
        """Advance the counter as ``delta`` values drawn would; returns the state before."""
        n = _shapes.as_index(delta, "delta", "Generator.skip")
        if n < 0:
            raise InvalidArgumentError(f"Generator.skip: delta must be >= 0, got {n}",
                                       op="Generator.skip")
        return self._advance(n, "Generator.skip")

    def _delta(self, n, fn):
        """The counter increment of ``n`` values (checked: the algorithm, its size)."""
        if self._alg == Algorithm.THREEFRY.value:
            raise UnimplementedError(f"{fn}: the ThreeFry algorithm is not supported "
                                     "(TensorFlow runs it under XLA only); use "
                                     "alg='philox'", op=fn)
        d = n * _rnd.SAMPLES_PER_OUTPUT
        if d >= 1 << 63:
            raise InvalidArgumentError(f"{fn}: {n} values in one draw is too many",
                                       op=fn)
        return d

    def _advance(self, n, fn, later=None):
        """Read the state and advance its 128-bit counter by ``256 n`` (ops: works in
        tf.function); the state read. Traced, with a list ``later``, the new state is
        appended to it instead of assigned (the caller assigns it once its draw is
        made, so a draw that fails when the function runs leaves the state as it was)."""
        d = self._delta(n, fn)
        if _ctx.thread_tracer.tracer is None:       # eagerly: the 128-bit add on the host
            with _ADVANCE_LOCK:
                old = [int(v) for v in self._state_var.numpy()]
                lo = (old[0] & _M64) + d
                new = [_signed(lo), _signed((old[1] & _M64) + (lo >> 64)), old[2]]
                self._state_var.assign(convert_to_tensor(new, dtype=_dt.int64))
            return convert_to_tensor(old, dtype=_dt.int64)
        old = self._state_var.read_value()
        bumped = _m.add(old, convert_to_tensor([d, 0, 0], dtype=_dt.int64))
        lo, lo2 = old[0:1], bumped[0:1]
        # the low word wrapped past 2**64 (unsigned) exactly when it went from negative
        # to non-negative (d < 2**63): carry one into the high word
        carry = _m.cast(_m.logical_and(_m.less(lo, 0), _m.greater_equal(lo2, 0)), _dt.int64)
        zero = _ac.zeros([1], _dt.int64)
        new = _m.add(bumped, _ag.concat([zero, carry, zero], 0))
        if later is None:
            self._state_var.assign(new)
        else:
            later.append(new)
        return old

    def _draw(self, shape, fn, run):
        """``run(state)`` with ``state`` a function that reads and advances the state
        (called by ``run`` only once the draw's arguments are checked: a draw that raises
        leaves the state as it was)."""
        n = _count(shape, fn)
        self._delta(n, fn)
        if (self._strategy is not None and _ctx.thread_tracer.tracer is None
                and self._replica() is not None):
            return run(lambda: self._replica_state(n, fn))
        later = []
        out = run(lambda: self._advance(n, fn, later))
        for new in later:               # traced: the state moves after the draw
            self._state_var.assign(new)
        return out

    def _replica(self):
        """The ReplicaContext when drawing inside ``run`` of this generator's strategy."""
        dist = _distribution()
        return dist[1] if dist is not None and dist[0] is self._strategy else None

    def _replica_state(self, n, fn):
        """The state a replica draws with: the key mixed with the replica's id as
        TensorFlow does, and, unless the generator is this replica's own, the counter
        shared: the k-th draw of every local replica in a step reads the same state, which
        advances once (no wait: the replicas take turns)."""
        ctx = self._replica()
        rid = _ash.reshape(_m.cast(ctx.replica_id_in_sync_group, _dt.int64), [1])
        if self._own:
            old = self._advance(n, fn)
        else:
            with _SHARED_LOCK:
                olds, drawn = self._shared
                k = drawn.get(int(rid[0]), 0)
                if k == len(olds):
                    olds.append(self._advance(n, fn))
                old, drawn[int(rid[0])] = olds[k], k + 1
                if len(drawn) == len(ctx.strategy.extended.local_devices) and all(
                        c == len(olds) for c in drawn.values()):
                    olds.clear()            # every replica drew as often: the step is over
                    drawn.clear()
        mix = _ag.concat([rid, _ac.zeros([1], _dt.int64), old[2:3]], 0)
        key = _rnd.uniform_from_state(mix, [1], None, None, _dt.int64, fn)
        return _ag.concat([old[0:2], key], 0)

    # --- distributions ------------------------------------------------------------------
    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
        """Normal values (TensorFlow's Box-Muller on Philox4x32-10)."""
        fn = "Generator.normal"
        return self._draw(shape, fn, lambda st: _rnd.normal_from_state(
            st, shape, mean, stddev, dtype, fn))

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=_dt.float32, name=None):
        """Normal values within two standard deviations (TensorFlow's rejection sampling)."""
        fn = "Generator.truncated_normal"
        return self._draw(shape, fn, lambda st: _rnd.normal_from_state(
            st, shape, mean, stddev, dtype, fn, truncated=True))

    def uniform(self, shape, minval=0, maxval=None, dtype=_dt.float32, name=None):
        """Uniform values in ``[minval, maxval)``; integer dtypes need both bounds, or
        both None for the full range."""
        dt = _dt.as_dtype(dtype)
        if dt.is_integer and (minval is None) != (maxval is None) and not (
                minval == 0 and maxval is None):
            raise InvalidArgumentError(
                f"Generator.uniform: for integer dtype {dt.name}, minval and maxval must be "
                "both None or both set", op="Generator.uniform")
        if dt.is_integer and maxval is None:
            raise InvalidArgumentError(
                f"Generator.uniform: must specify maxval for integer dtype {dt.name} (or "
                "minval=maxval=None for the full range)", op="Generator.uniform")
        return self._draw(shape, "Generator.uniform", lambda st: _rnd.uniform_from_state(
            st, shape, minval, maxval, dt, "Generator.uniform"))

    def uniform_full_int(self, shape, dtype=_dt.uint64, name=None):
        """Integers over the whole range of ``dtype`` (int32, int64, uint32, uint64)."""
        if not _dt.as_dtype(dtype).is_integer:
            raise InvalidArgumentError(
                f"Generator.uniform_full_int: dtype must be int32, int64, uint32 or uint64, "
                f"got {_dt.as_dtype(dtype).name}", op="Generator.uniform_full_int")
        fn = "Generator.uniform_full_int"
        return self._draw(shape, fn, lambda st: _rnd.uniform_from_state(
            st, shape, None, None, dtype, fn))

    def binomial(self, shape, counts, probs, dtype=_dt.int32, name=None):
        """Not implemented in tapeflow (TensorFlow's binomial sampler is not ported)."""
        raise UnimplementedError("Generator.binomial is not implemented in tapeflow; draw "
                                 "uniforms with Generator.uniform and count successes",
                                 op="Generator.binomial")

    # --- new generators and seeds -------------------------------------------------------
    def make_seeds(self, count=1):
        """``[2, count]`` int64 seeds for the stateless ops (new keys, then zeros)."""
        keys = self.uniform_full_int([count], _dt.int64)
        return _ag.stack([keys, _ac.zeros_like(keys)])

    def split(self, count=1):
        """``count`` new, independent generators (their keys drawn from this one)."""
        count = _shapes.as_index(count, "count", "Generator.split")
        keys = self.uniform_full_int([count], _dt.int64)
        zeros = _ac.zeros([2], _dt.int64)
        return [Generator(state=_ag.concat([zeros, keys[i:i + 1]], 0), alg=self._alg)
                for i in range(count)]

    def __repr__(self):
        return f"<tapeflow.random.Generator object at {hex(id(self))}>"


def _key_counter_state(key, counter, fn):
    k = convert_to_tensor(key) if not hasattr(key, "dtype") else key
    if not k.dtype.is_integer:
        raise InvalidTypeError(f"{fn}: key must be an integer, got dtype {k.dtype.name}",
                               op=fn)
    c = counter if hasattr(counter, "dtype") else None
    if c is None:
        try:
            c = convert_to_tensor([_signed(int(v)) for v in np.asarray(counter).reshape(-1)],
                                  dtype=_dt.int64)
        except (TypeError, ValueError, OverflowError):
            raise InvalidTypeError(f"{fn}: counter must be 2 integers, got "
                                   f"{_shapes.short_repr(counter)}", op=fn) from None
    if k.ndim != 0 or tuple(c.shape) != (2,):
        raise InvalidArgumentError(f"{fn}: key must be a scalar and counter a vector of 2, got "
                                   f"shapes {list(k.shape)} and {list(c.shape)}", op=fn)
    return _ag.concat([_m.cast(c, _dt.int64), _ash.reshape(_m.cast(k, _dt.int64), [1])], 0)


class _Global:
    generator = None


def get_global_generator():
    """The global generator (``tf.random.get_global_generator``), made from a
    non-deterministic state on first use."""
    if _Global.generator is None:
        _Global.generator = Generator.from_non_deterministic_state()
    return _Global.generator


def set_global_generator(generator):
    """Replace the global generator (``tf.random.set_global_generator``)."""
    if not isinstance(generator, Generator):
        raise InvalidTypeError(f"set_global_generator: expected a tf.random.Generator, got "
                               f"{type(generator).__name__}", op="set_global_generator")
    _Global.generator = generator


class _Experimental:
    """``tf.random.experimental``: the names TensorFlow keeps there too."""
    Algorithm = Algorithm
    Generator = Generator
    get_global_generator = staticmethod(get_global_generator)
    set_global_generator = staticmethod(set_global_generator)
    create_rng_state = staticmethod(create_rng_state)
    stateless_split = staticmethod(_rnd.stateless_split)
    stateless_fold_in = staticmethod(_rnd.stateless_fold_in)

    def __repr__(self):
        return "<module 'tapeflow.random.experimental'>"


#: ``tf.random.experimental``
experimental = _Experimental()


def install(namespace):
    """Put the Generator's names into the ``tf.random`` namespace (``namespace``: the
    module tapeflow exposes as ``tf.random``)."""
    for name in ("Algorithm", "Generator", "get_global_generator", "set_global_generator",
                 "create_rng_state", "experimental"):
        setattr(namespace, name, globals()[name])
