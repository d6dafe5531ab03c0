"""tapeflow's CUDA backend: CuPy kernels on ``cuda:N`` (also ``gpu:N``).

Registered through the entry point ``tapeflow = cuda_cupy`` (module
:mod:`tapeflow_cuda_cupy.plugin`). Importing this package never imports CuPy; see
``README.md`` for how kernels are shared with the CPU backend.
"""

__version__ = "0.1.0"
