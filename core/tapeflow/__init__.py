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
                             complex64, complex128)
from .runtime.devices import device, list_devices, num_gpus
from .runtime.tensor import Dimension, Tensor, TensorShape
from .runtime.variable import Variable
from .runtime.dispatch import constant, convert_to_tensor
from .autodiff.tape import GradientTape
from .autodiff.functions import (custom_gradient, gradients_function, hessians,
                                 implicit_gradients,
                                 implicit_value_and_gradients, val_and_grad_function,
                                 value_and_gradients_function)
from .ops import math, reductions, linalg, nn, random
from .ops.math import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403  (tf's array names)
from .ops.linalg import einsum, matmul, norm, tensordot  # noqa: F401
from .ops.random import (random_normal, random_shuffle, random_uniform, set_random_seed,
                         truncated_normal)
from .runtime import config
from . import plugins, ops
from .tracing import function, defun, init_scope, py_function
from .tracing.control_flow import cond, while_loop
from .tracing.vectorize import vectorized_map
from .runtime import devices as _devices_mod

# The public module paths of TensorFlow's namespaces (``from tapeflow.errors import ...``,
# ``import tapeflow.math``): aliases of the modules in the layers, so backends and plugins
# never name a layer's internal path.
for _name, _mod in (("math", math), ("nn", nn),
                    ("linalg", linalg), ("random", random), ("config", config)):
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
    """A harmless no-op: eager execution is always on (seeds call it first)."""


enable_v2_behavior = enable_eager_execution

# Built-in ops, then the backends and plugins found through entry points.
from .ops.library import LIB as _builtin_ops  # noqa: E402
from .plugins import manager as _pm  # noqa: E402  (the module)

_pm.register_builtin(_builtin_ops, "tapeflow-builtin-ops")
_pm.ensure_loaded()

# The training stack lives in subpackages loaded on first use (import stays fast):
# tf.layers, tf.keras, tf.train, tf.losses, tf.metrics, tf.summary, tf.data, tf.datasets.
_LAZY_MODULES = ("layers", "keras", "train", "losses", "metrics", "summary", "data",
                 "datasets", "models", "profiler", "distributed", "numpy")
# The seeds' `tfe.*` names that live in those subpackages: name -> (module, attribute)
_LAZY_NAMES = {
    # tf.print: not a module global, so `print` in this module stays Python's
    "print": ("tracing", "print_"),
    "Network": ("models", "Network"),
    "Iterator": ("data", "Iterator"),
    "Saver": ("train", "Saver"),
    "restore_variables_on_create": ("train", "restore_variables_on_create"),
    "Checkpoint": ("train", "Checkpoint"),
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
    """``tf.contrib.eager`` (this package) and ``tf.contrib.summary`` as in the seeds."""

    @property
    def eager(self):
        return _sys.modules[__name__]

    @property
    def summary(self):
        return __getattr__("summary")


contrib = _Contrib()


