"""The runtime: the bottom layer of tapeflow (docs/architecture.md).

dtypes, devices and the backend contract, ``Tensor`` and ``Variable``, the kernel
registry, the one dispatch function, the eager context (active tapes, the tracer
observer) and the error family. Nothing here imports a layer above it: the op
library, autodiff and tracing register what the runtime calls
(:mod:`tapeflow.runtime.context`).

>>> from tapeflow.runtime import Tensor, Variable, dispatch
>>> dispatch.execute.__name__
'execute'
"""

from .. import errors, dtypes
from . import context, devices, shapes, tensor, registry, dispatch, variable
from . import config
from .tensor import Tensor, TensorShape
from .variable import Variable

__all__ = ["errors", "dtypes", "context", "devices", "shapes", "tensor", "registry", "dispatch",
           "variable", "config", "Tensor", "TensorShape", "Variable"]
