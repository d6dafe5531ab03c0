"""``tf.train``: optimizers, the global step, and checkpoints.

Optimizers (TensorFlow 1 names and math, :mod:`.optimizers`): ``GradientDescentOptimizer``,
``MomentumOptimizer``, ``AdamOptimizer``, ``RMSPropOptimizer``, ``AdagradOptimizer``;
Keras names for ``tf.keras.optimizers``: ``SGD``, ``Adam``, ``RMSprop``, ``Adagrad``
(``get_optimizer("adam")`` builds one from a name). The global step (defined here):
``get_or_create_global_step()`` (``reset_global_step()`` forgets it, for tests).
Checkpoints: ``Checkpoint``, ``CheckpointManager``, ``latest_checkpoint``, ``Saver``,
``restore_variables_on_create`` (safetensors + a JSON index, atomic saves, validated
restores: see :mod:`tapeflow.train.checkpoint`). :mod:`.files` reads files tapeflow did
not write (checkpoints, data sets, event files) safely.

>>> import tapeflow as tf
>>> x = tf.Variable(3.0)
>>> opt = tf.train.AdamOptimizer(learning_rate=0.1)
>>> for _ in range(3):
...     opt.minimize(lambda: x * x)
>>> round(float(x), 2)
2.7
>>> [v.name for v in opt.variables()]
['beta1_power:0', 'beta2_power:0', 'Variable/Adam:0', 'Variable/Adam_1:0']
"""

from __future__ import annotations

import threading

from .. import dtypes as _dt
from ..errors import InvalidArgumentError
from ..data import example as _example  # tf.train.Example & co. (data/example.py)
from ..runtime.variable import Variable
from .checkpoint import (Checkpoint, CheckpointLoadStatus, CheckpointManager, DataLossError, Saver,
                         latest_checkpoint, list_variables, load_checkpoint, restore_deferred,
                         restore_variables_on_create)
from .optimizers import (SGD, Adagrad, AdagradOptimizer, Adam, AdamOptimizer,
                         GradientDescentOptimizer, MomentumOptimizer, Optimizer, RMSprop,
                         RMSPropOptimizer, get_optimizer)

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "RMSPropOptimizer", "AdagradOptimizer", "SGD", "Adam", "RMSprop", "Adagrad",
           "get_optimizer", "get_or_create_global_step", "get_global_step",
           "create_global_step", "reset_global_step", "Checkpoint", "CheckpointManager",
           "CheckpointLoadStatus", "latest_checkpoint", "list_variables", "load_checkpoint",
           "Saver", "restore_variables_on_create", "restore_deferred", "DataLossError"]


# --- the global step: one int64 counter Variable per process, TensorFlow 1's
# tf.train.get_or_create_global_step() (apply_gradients(..., global_step=) increments it;
# the summary writer reads it) ------------------------------------------------------------

_global_step = None
_gs_lock = threading.Lock()


def get_global_step(graph=None):
    """The process's global step Variable, or None before it was created."""
    return _global_step


def create_global_step(graph=None):
    """Create the global step (an int64, non-trainable Variable named ``global_step``
    on the host, value 0); raises ValueError if it already exists."""
    global _global_step
    with _gs_lock:
        if _global_step is not None:
            raise InvalidArgumentError('"global_step" already exists.')
        _global_step = Variable(0, trainable=False, name="global_step", dtype=_dt.int64,
                                device="cpu:0")
        return _global_step


def get_or_create_global_step(graph=None):
    """The one global step of this process (created at 0 on first call).

    >>> import tapeflow as tf
    >>> tf.train.reset_global_step()
    >>> step = tf.train.get_or_create_global_step()
    >>> step is tf.train.get_or_create_global_step(), step.dtype, int(step)
    (True, tf.int64, 0)
    """
    gs = _global_step
    if gs is not None:
        return gs
    try:
        return create_global_step()
    except ValueError:
        return _global_step


def reset_global_step():
    """Forget the global step, so the next ``get_or_create_global_step()`` makes a new
    one at 0 (for tests, and for several independent runs in one process). Objects that
    already hold the old Variable keep it."""
    global _global_step
    with _gs_lock:
        _global_step = None


def __getattr__(name):
    """``tf.train.Example``, ``Features``, ``Feature``, ``BytesList``, ``FloatList``,
    ``Int64List``, ``SequenceExample``, ``FeatureList(s)``: protobuf classes built on
    first use (they need the protobuf package: data/example.py)."""
    if name in _example.MESSAGES:
        return _example.message_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
