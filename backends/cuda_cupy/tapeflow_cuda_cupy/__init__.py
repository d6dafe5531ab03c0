"""tapeflow's CUDA backend: CuPy kernels on ``cuda:N`` (also ``gpu:N``).

Registered through the entry point ``tapeflow = cuda_cupy`` (module
:mod:`tapeflow_cuda_cupy.plugin`). Importing this package never imports CuPy; see
``README.md`` for how kernels are shared with the CPU backend.
"""

# tapeflow first: importing it loads this package's plugin module, so a submodule
# imported directly (``import tapeflow_cuda_cupy.kernels``) never sees a half-made one
import tapeflow  # noqa: F401

__version__ = "0.2.0"
