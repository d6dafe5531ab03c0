"""tapeflow's OpenCL backend (``tapeflow-opencl``): devices ``opencl:N`` on every OpenCL
platform (PoCL on the CPU, AMD/Intel/NVIDIA/Apple GPUs), OpenCL GPUs also ``gpu:N``.

Registered through the entry point ``tapeflow = opencl``; nothing to import by hand.
See ``backends/opencl/README.md``.
"""

__version__ = "0.1.0"

__all__ = ["contiguous", "device_of"]


def contiguous(a):
    """``a`` (a ``pyopencl.array.Array`` a kernel received) if C-contiguous, else a
    contiguous copy on the same device. For op plugins whose OpenCL kernels index
    their inputs linearly: tapeflow passes strided views (transposes, slices,
    broadcasts) to kernels without copying."""
    from .runtime import contiguous as _c
    return _c(a)


def device_of(a):
    """The backend's handle (context, queue, memory pool, fp64/fp16 flags) of the
    device whose queue ``a`` lives on."""
    from .runtime import device_of as _d
    return _d(a)
