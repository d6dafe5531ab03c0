"""``tf.train``: optimizers, the global step, and checkpoints.

Optimizers (TensorFlow 1 names and math): ``GradientDescentOptimizer``,
``MomentumOptimizer``, ``AdamOptimizer``, ``RMSPropOptimizer``, ``AdagradOptimizer``;
Keras names for ``tf.keras.optimizers``: ``SGD``, ``Adam``, ``RMSprop``, ``Adagrad``
(``get_optimizer("adam")`` builds one from a name). The global step:
``get_or_create_global_step()`` (``reset_global_step()`` forgets it, for tests).
Checkpoints: ``Checkpoint``, ``CheckpointManager``, ``latest_checkpoint``, ``Saver``,
``restore_variables_on_create`` (safetensors + a JSON index, atomic saves, validated
restores: see :mod:`tapeflow.train.checkpoint`).

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

from .checkpoint import (Checkpoint, CheckpointLoadStatus, CheckpointManager, DataLossError, Saver,
                         latest_checkpoint, list_variables, load_checkpoint, restore_deferred,
                         restore_variables_on_create)
from .optimizers import (SGD, Adagrad, AdagradOptimizer, Adam, AdamOptimizer,
                         GradientDescentOptimizer, MomentumOptimizer, Optimizer, RMSprop,
                         RMSPropOptimizer, create_global_step, get_global_step, get_optimizer,
                         get_or_create_global_step, reset_global_step)

__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdamOptimizer",
           "RMSPropOptimizer", "AdagradOptimizer", "SGD", "Adam", "RMSprop", "Adagrad",
           "get_optimizer", "get_or_create_global_step", "get_global_step",
           "create_global_step", "reset_global_step", "Checkpoint", "CheckpointManager",
           "CheckpointLoadStatus", "latest_checkpoint", "list_variables", "load_checkpoint",
           "Saver", "restore_variables_on_create", "restore_deferred", "DataLossError"]
