"""tapeflow's OpenCL backend (``tapeflow-opencl``): devices ``opencl:N`` on every OpenCL
platform (PoCL on the CPU, AMD/Intel/NVIDIA/Apple GPUs), OpenCL GPUs also ``gpu:N``.

Registered through the entry point ``tapeflow = opencl``; nothing to import by hand.
See ``backends/opencl/README.md``.
"""

__version__ = "0.2.0"

from . import runtime as _rt

__all__ = ["contiguous", "device_of", "elementwise", "empty", "kernel", "kernel_input",
           "launch"]


def device_of(a):
    """The handle of the device whose queue ``a`` (a ``pyopencl.array.Array``) lives on:
    ``.ctx`` (``pyopencl.Context``), ``.queue`` (its in-order ``CommandQueue``), ``.pool``
    (the ``MemoryPool`` every tensor of the device allocates from: ``pool(nbytes)``),
    ``.fp64``/``.fp16`` (what the device computes), ``.name`` (``"opencl:0"``),
    ``.cl_device``, ``.lock`` (hold it around ``set_args`` + enqueue from threads)."""
    return _rt.device_of(a)


def contiguous(a):
    """``a`` if C-contiguous, else a contiguous copy on the same device. It may still
    start at a non-zero ``a.offset`` (a slice ``x[1:]`` is contiguous): pass
    :func:`kernel_input` to kernels that index ``a.data`` from element 0."""
    return _rt.contiguous(a)


def kernel_input(a):
    """``a`` as an array any OpenCL kernel can index linearly from its buffer's first
    element: C-contiguous with ``offset == 0`` -- ``a`` itself when it already is, else a
    copy on the same device (one kernel, no host round trip). tapeflow hands kernels
    strided views (transposes, slices with offsets, stride-0 broadcasts) without copying,
    and ``.data`` (the buffer a kernel takes) raises ``ArrayHasOffsetError`` on an offset view:
    call this on every input of a kernel that does not read ``a.offset`` and ``a.strides``.

    >>> # x = kernel_input(x); my_kernel(out, x, queue=x.queue)
    """
    if a.offset == 0:
        c = _rt.contiguous(a)
        if c.offset == 0:
            return c
    return _rt.elementwise("x0", a.dtype, a, out_shape=a.shape)


def empty(like, shape=None, dtype=None):
    """A new C-contiguous array (offset 0) from the device's memory pool, on the device
    of ``like`` (an array, or :func:`device_of`'s handle), of ``like``'s shape and dtype
    unless given. What a kernel returns."""
    dev = like if isinstance(like, _rt.CLDevice) else _rt.device_of(like)
    return _rt.empty(dev, like.shape if shape is None else shape,
                     like.dtype if dtype is None else dtype)


def elementwise(expr, out_dtype, *arrays, preamble=""):
    """Evaluate the OpenCL C expression ``expr`` of ``x0, x1, ...`` (the inputs'
    values) over the inputs' broadcast shape into a new contiguous array of
    ``out_dtype``: strides, offsets and broadcasting handled, the program built once per
    device and layout and cached. ``preamble``: helper functions ``expr`` calls. The
    simplest way to write an elementwise OpenCL kernel for tapeflow.

    >>> # elementwise("x0 * x0 * x0", x.dtype, x)           (the cube of x)
    """
    return _rt.elementwise(expr, out_dtype, *arrays, preamble=preamble)


def kernel(dev, source, name, scalar_dtypes=None, options=()):
    """The ``__kernel`` function ``name`` of the OpenCL C ``source``, compiled once per
    device (cached in memory and in PyOpenCL's on-disk cache; ``cl_khr_fp64`` enabled
    where the device has it). ``dev``: :func:`device_of`'s handle. ``scalar_dtypes``: one
    entry per argument, a NumPy dtype for scalars and ``None`` for buffers, so that
    :func:`launch` takes plain Python numbers. A compile error raises ``RuntimeError``
    with the build log and the source."""
    return _rt.kernel(dev, source, name, scalar_dtypes, options)


def launch(dev, k, global_size, local_size, *args):
    """Set ``args`` (buffers: ``array.data`` of :func:`kernel_input`/:func:`empty`
    arrays; scalars) and enqueue ``k`` on the device's queue over ``global_size`` (a
    tuple), thread-safely. Returns at once: the queue is in order, and tapeflow waits
    for it when the host reads a result."""
    return _rt.launch(dev, k, global_size, local_size, *args)
