"""tapeflow-gelu: GELU (exact and tanh forms) as a tapeflow op plugin.

``gelu(features, approximate=False)`` and its fused gradient op ``gelu_grad``, with
kernels for the ``cpu``, ``cuda`` and ``opencl`` device types, registered through
the entry point ``gelu`` of the group ``tapeflow``. Also reachable as
``tapeflow.ops.gelu.gelu`` / ``tapeflow.ops.gelu.gelu_grad``.
"""

import tapeflow  # first: loading tapeflow's plugins imports .ops through the entry point

from .ops import FLOATS, gelu, gelu_grad, lib, second_derivative

__all__ = ["gelu", "gelu_grad", "lib", "second_derivative", "FLOATS"]
__version__ = "0.1.0"
