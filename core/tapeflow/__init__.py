"""tapeflow: an eager-execution tensor runtime with a tape for gradients.

``import tapeflow as tf`` gives the seeds' API (TensorFlow eager): ops run when
called, ``tf.GradientTape`` and ``tf.gradients_function`` differentiate, and
``with tf.device(...)`` picks NumPy (CPU), CuPy (CUDA) or OpenCL backends.

>>> import tapeflow as tf
>>> x = [[2.]]
>>> print(tf.matmul(x, x))
tf.Tensor([[4.]], shape=(1, 1), dtype=float32)
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import types as _types

from . import nest
from . import dtypes, errors
from .dtypes import (DType, as_dtype, bfloat16, bool_, double, float16, float32, float64,
                             half, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
                             complex64, complex128, string)
from .runtime.devices import device, list_devices, num_gpus
from .runtime.tensor import Dimension, Tensor, TensorShape
from .runtime.variable import Variable
from .runtime.dispatch import constant, convert_to_tensor
from .autodiff.tape import GradientTape
from .autodiff.functions import (UnconnectedGradients, custom_gradient, gradients_function,
                                 hessians, implicit_gradients,
                                 implicit_value_and_gradients, val_and_grad_function,
                                 value_and_gradients_function)
from .ops import math, reductions, linalg, nn, random, strings
from .ops.strings import as_string  # noqa: F401  (tf.as_string, as tf.strings.as_string)
from .ops import image
from .ops import sparse  # tf.sparse
from .ops.sparse import SparseTensor, SparseTensorSpec
from .ops.math import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403  (tf's array names)
from .ops.linalg import einsum, matmul, norm, tensordot  # noqa: F401
from .ops.random import (random_normal, random_shuffle, random_uniform, set_random_seed,
                         truncated_normal)
from . import random_generator as _random_generator
_random_generator.install(random)   # tf.random.Generator, get_global_generator, experimental
from .runtime import config
from . import plugins, ops
from .tracing import function, defun, init_scope, py_function
from .tracing.control_flow import cond, while_loop
from .tracing import autograph  # tf.autograph: to_code, to_graph, do_not_convert
from .tracing.tensor_array import TensorArray
from .tracing.debugging import debugging  # tf.debugging: run-time checks, placement log
from .tracing.vectorize import vectorized_map
from .ops.higher_order import foldl, foldr, map_fn, scan
from .tracing.signatures import TensorSpec
from .ops.ragged import RaggedTensor, RaggedTensorSpec  # tf.RaggedTensor (issue 47)
from .ops.composite import type_spec_from_value  # noqa: F401  (tf.type_spec_from_value)
from .ops import ragged_ops as ragged  # tf.ragged; ragged tf.* handlers (issue 47)
from .tracing.function_cache import types, functions_run_eagerly, run_functions_eagerly
config.run_functions_eagerly = run_functions_eagerly      # (tf.config's, from the tracing layer)
config.functions_run_eagerly = functions_run_eagerly
del functions_run_eagerly, run_functions_eagerly
from .runtime import devices as _devices_mod

# The public module paths of TensorFlow's namespaces (``from tapeflow.errors import ...``,
# ``import tapeflow.math``): aliases of the modules in the layers, so backends and plugins
# never name a layer's internal path.
for _name, _mod in (("math", math), ("nn", nn),
                    ("linalg", linalg), ("random", random), ("strings", strings),
                    ("image", image),
                    ("sparse", sparse), ("ragged", ragged), ("config", config)):
    _sys.modules.setdefault(f"{__name__}.{_name}", _mod)
del _name, _mod

bool = bool_  # noqa: A001  (tf.bool)
newaxis = None

from .plugins.manager import version as _v  # noqa: E402

__version__ = _v()


def executing_eagerly() -> bool:
    """Always True: tapeflow only executes eagerly."""
    return True


def enable_eager_execution(config=None, device_policy=None, execution_mode=None):  # noqa: F811
    """Eager execution is always on; this TF 1 call (seeds and TF 1 programs make it
    first) gives TF 1's meaning to the arguments TF 2 changed: ``tf.nn.dropout(x, 0.8)``
    keeps 80% (TF 1's ``keep_prob``) where TF 2 drops 80% (``rate``). Keyword calls
    are the same in both. :func:`enable_v2_behavior` restores TF 2's."""
    nn.use_tf1_conventions(True)


def enable_v2_behavior():
    """TF 2's meaning of the arguments TF 2 changed (the default; see
    :func:`enable_eager_execution`)."""
    nn.use_tf1_conventions(False)

# Built-in ops, then the backends and plugins found through entry points.
from .ops.library import LIB as _builtin_ops  # noqa: E402
from .plugins import manager as _pm  # noqa: E402  (the module)

_pm.register_builtin(_builtin_ops, "tapeflow-builtin-ops")
_pm.ensure_loaded()

# The training stack lives in subpackages loaded on first use (import stays fast):
# tf.layers, tf.keras, tf.train, tf.losses, tf.metrics, tf.summary, tf.data, tf.datasets.
_LAZY_MODULES = ("layers", "keras", "train", "losses", "metrics", "summary", "data",
                 "datasets", "models", "profiler", "distributed", "distribute", "numpy",
                 "app", "io", "saved_model", "experimental")
# The seeds' `tfe.*` names that live in those subpackages: name -> (module, attribute)
_LAZY_NAMES = {
    # tf.print: not a module global, so `print` in this module stays Python's
    "print": ("tracing", "print_"),
    "Network": ("models", "Network"),
    # tf.Variable(aggregation=...)'s names (updates inside tf.distribute's strategy.run)
    "VariableAggregation": ("distribute.values", "VariableAggregation"),
    "VariableSynchronization": ("distribute.values", "VariableSynchronization"),
    "Iterator": ("data", "Iterator"),
    "Saver": ("train", "Saver"),
    "restore_variables_on_create": ("train", "restore_variables_on_create"),
    "Checkpoint": ("train", "Checkpoint"),
    # TensorFlow 2's tf.Module and tf.name_scope (tapeflow.module)
    "Module": ("module", "Module"),
    "name_scope": ("module", "name_scope"),
    # TF 1's program scaffolding (tapeflow.app, tapeflow.io): tf.flags, tfe.run, tf.gfile,
    # the execution modes; and TF 1's initializer names (tf.random_uniform_initializer ...)
    "flags": ("app", "flags"),
    "run": ("app", "run"),
    "execution_mode": ("app", "execution_mode"),
    "SYNC": ("app", "SYNC"),
    "ASYNC": ("app", "ASYNC"),
    "async_wait": ("app", "async_wait"),
    "async_clear_error": ("app", "async_clear_error"),
    "gfile": ("io", "gfile"),
    "decode_csv": ("io", "decode_csv"),
    # TF 1's string names (rnn_colorbot's input pipeline): tf.string_split gives a SparseTensor
    "string_split": ("ops.strings", "string_split"),
    "string_to_number": ("ops.strings", "to_number"),
    "decode_raw": ("ops.strings", "decode_raw"),
    **{_n: ("layers.initializers", _n) for _n in (
        "zeros_initializer", "ones_initializer", "constant_initializer",
        "random_uniform_initializer", "random_normal_initializer",
        "truncated_normal_initializer", "glorot_uniform_initializer",
        "glorot_normal_initializer")},
    # TF 1's diagonal names: tf.diag_part, tf.matrix_diag_part, tf.diag, tf.matrix_diag ...
    "diag_part": ("ops.linalg", "diag_part"),
    "matrix_diag_part": ("ops.linalg", "diag_part"),
    "diag": ("ops.linalg", "diag"),
    "matrix_diag": ("ops.linalg", "diag"),
    "matrix_set_diag": ("ops.linalg", "set_diag"),
}


def _array_namespace(api_version=None):
    """Tensor.__array_namespace__: tapeflow.numpy, imported on first use."""
    return _importlib.import_module(f"{__name__}.numpy")._check_version(api_version)


from .runtime import context as _context  # noqa: E402

_context.install_array_namespace(_array_namespace)


#: namespaces that are a subpackage under another name: tf.test is tapeflow.testing
_LAZY_ALIASES = {"test": "testing"}


def __getattr__(name):
    if name in _LAZY_MODULES or name in _LAZY_ALIASES:
        mod = _importlib.import_module(f"{__name__}.{_LAZY_ALIASES.get(name, name)}")
        globals()[name] = mod
        return mod
    if name in _LAZY_NAMES:
        modname, attr = _LAZY_NAMES[name]
        value = getattr(_importlib.import_module(f"{__name__}.{modname}"), attr)
        if name != "print":          # (never a global: it would shadow print() here)
            globals()[name] = value
        return value
    raise AttributeError(f"module 'tapeflow' has no attribute {name!r}")


class _Contrib:
    """``tf.contrib.eager`` (this package) and ``tf.contrib.summary`` as in the seeds.

    ``tf.contrib`` exists only in TF 1: a program that uses it is a TF 1 program, and
    gets TF 1's meaning of the arguments TF 2 changed, as after
    :func:`enable_eager_execution` (``tf.nn.dropout(x, keep_prob)``; docs/tf1-programs.md).
    """

    def __getattribute__(self, name):
        if not name.startswith("__"):
            nn.use_tf1_conventions(True)
        return object.__getattribute__(self, name)

    @property
    def eager(self):
        return _sys.modules[__name__]

    @property
    def summary(self):
        return __getattr__("summary")

    @property
    def checkpoint(self):
        """``tf.contrib.checkpoint``: ``List``, ``Dict``, ``NoDependency``."""
        return _importlib.import_module(f"{__name__}.train.checkpoint.object_graph").contrib

    @property
    def rnn(self):
        """``tf.contrib.rnn``: TF 1's cells (``LSTMBlockCell`` ...) and ``static_rnn``."""
        return _importlib.import_module(f"{__name__}.layers.recurrent").contrib_rnn


contrib = _Contrib()

# tf.nn's recurrent names (tf.nn.rnn_cell, tf.nn.dynamic_rnn ...) live in the training
# stack (tapeflow.layers.recurrent), above tf.nn's module: this package, above both,
# resolves them on first use through the module's __getattr__ (PEP 562).
_NN_RECURRENT = ("rnn_cell", "dynamic_rnn", "static_rnn", "bidirectional_dynamic_rnn")
_nn_getattr_before = nn.__dict__.get("__getattr__")


def _nn_getattr(name):
    if name in _NN_RECURRENT:
        value = getattr(_importlib.import_module(f"{__name__}.layers.recurrent"), name)
        setattr(nn, name, value)
        return value
    if _nn_getattr_before is not None:
        return _nn_getattr_before(name)
    raise AttributeError(f"module 'tapeflow.nn' has no attribute {name!r}")


nn.__getattr__ = _nn_getattr


