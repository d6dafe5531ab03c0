"""tapeflow's OpenCL backend (``tapeflow-opencl``): devices ``opencl:N`` on every OpenCL
platform (PoCL on the CPU, AMD/Intel/NVIDIA/Apple GPUs), OpenCL GPUs also ``gpu:N``.

Registered through the entry point ``tapeflow = opencl``; nothing to import by hand.
See ``backends/opencl/README.md``.
"""

__version__ = "0.1.0"
