"""The OpenCL runtime every kernel module builds on.

* :class:`CLDevice` — one OpenCL device: its context, its single in-order queue,
  a memory pool, what it can do (``fp64``, ``fp16``) and its compiled kernels.
* Native arrays are ``pyopencl.array.Array`` (what third-party PyOpenCL code
  expects), always on their device's queue and allocated from its pool. They may be
  *views*: any non-negative byte strides and a byte ``offset`` into ``base_data``
  (reshape, transpose, slices, broadcasts cost no copy). Every kernel reads its
  inputs through :func:`layout` (element strides and offset) or makes them
  contiguous first with :func:`contiguous`. Booleans are 1-byte ``uchar`` in C.
* :func:`kernel` compiles OpenCL C once per (source, device): in memory, and on disk
  in the tapeflow cache directory (``$TAPEFLOW_CACHE_DIR``, default
  ``~/.cache/tapeflow``; ``opencl/`` for PyOpenCL's binaries, ``pocl/`` for PoCL's
  own cache unless ``POCL_CACHE_DIR`` is set).
* :func:`launch` sets arguments through typed scalar arg dtypes (0.5 µs, against
  20 µs for PyOpenCL's untyped path) and enqueues.
* :func:`elementwise` — the generated elementwise kernel: any number of inputs,
  NumPy broadcasting, arbitrary strides (dimensions merged where the layout allows,
  so contiguous inputs index linearly and 0-d inputs are read once).

PyOpenCL is imported on first use only: this module imports without it. It imports
nothing from tapeflow at module level either (importing tapeflow loads the plugins,
whose kernel modules import this one), so ``import tapeflow_opencl.runtime`` works
first.

fork(): once this process has initialised OpenCL (:func:`platforms`; importing
tapeflow does, to list the devices), a ``fork()``ed child cannot use it -- PoCL's
worker threads do not survive fork, and the child's first copy or kernel would wait
for them forever; creating a new context in the child hangs the same way. So an
``os.register_at_fork`` hook marks the child, and every entry point here
(:func:`empty`, :func:`upload`, :func:`download`, :func:`launch`, :func:`kernel`, new
devices) raises FailedPreconditionError there instead (see :func:`check_not_forked`).
CPU tensors keep working in the child; for OpenCL in workers, start them with
multiprocessing's ``'spawn'`` or ``'forkserver'`` method.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import sys
import threading

import ml_dtypes
import numpy as np


_cl = None
_cla = None
_lock = threading.RLock()

#: NumPy dtype -> OpenCL C type (bool is one byte, read as uchar; bfloat16 is its 16-bit
#: word, which only ``tapeflow_opencl.bf16``'s conversions read as a number; complex64 and
#: complex128 are (real, imaginary) pairs, ``float2``/``double2``: ``tapeflow_opencl.cplx``)
CTYPES = {
    np.dtype(np.bool_): "uchar", np.dtype(np.int8): "char", np.dtype(np.uint8): "uchar",
    np.dtype(np.int16): "short", np.dtype(np.uint16): "ushort",
    np.dtype(np.int32): "int", np.dtype(np.uint32): "uint",
    np.dtype(np.int64): "long", np.dtype(np.uint64): "ulong",
    np.dtype(np.float16): "half", np.dtype(np.float32): "float",
    np.dtype(np.float64): "double", np.dtype(ml_dtypes.bfloat16): "ushort",
    np.dtype(np.complex64): "float2", np.dtype(np.complex128): "double2",
}

#: dtypes every op family declares on ``opencl`` (float16 is not among them: PoCL and
#: most GPUs' OpenCL drivers lack cl_khr_fp16 storage+arithmetic together)
FLOATS = ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = FLOATS + INTS


def cache_dir() -> str:
    """tapeflow's cache directory (``$TAPEFLOW_CACHE_DIR`` or ``~/.cache/tapeflow``)."""
    d = os.environ.get("TAPEFLOW_CACHE_DIR")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "tapeflow")
    return d


def cl():
    """The ``pyopencl`` module (imported once; PoCL's cache and drivers installed by pip
    into this environment (:func:`register_pip_drivers`) set up before)."""
    global _cl, _cla
    if _cl is None:
        with _lock:
            if _cl is None:
                os.environ.setdefault("POCL_CACHE_DIR", os.path.join(cache_dir(), "pocl"))
                register_pip_drivers()
                import pyopencl
                import pyopencl.array
                import pyopencl.characterize
                import pyopencl.tools  # noqa: F401
                _cla = pyopencl.array
                _cl = pyopencl
    return _cl


#: OpenCL drivers that pip installs into an environment's ``lib/`` with an ICD file the
#: loader cannot use as shipped (Intel's CPU runtime, ``intel-opencl-rt``: its
#: ``etc/OpenCL/vendors/intel-cpu.icd`` names a build machine's path)
PIP_DRIVERS = ("libintelocl.so",)


def register_pip_drivers(prefix=None, system_dir="/etc/OpenCL/vendors"):
    """Make the OpenCL drivers installed by pip into this environment visible to the ICD
    loader, without root: when ``$OCL_ICD_VENDORS`` is unset and ``<prefix>/lib`` holds
    one of :data:`PIP_DRIVERS`, write a vendors directory (in the tapeflow cache
    directory) with an ICD file naming that library plus a copy of every system ICD file
    (``/etc/OpenCL/vendors``, which the variable replaces), and point
    ``$OCL_ICD_VENDORS`` at it. The directory's drivers come first in PyOpenCL's
    platform order. Returns that directory, or None when nothing was done (the variable
    was set by the user, or no such driver is installed). ``prefix``: the environment
    (default ``sys.prefix``)."""
    if os.environ.get("OCL_ICD_VENDORS"):
        return None
    prefix = sys.prefix if prefix is None else prefix
    libs = [os.path.join(prefix, "lib", n) for n in PIP_DRIVERS]
    libs = [p for p in libs if os.path.exists(p)]
    if not libs:
        return None
    files = {f"tapeflow-pip-{os.path.basename(p).split('.')[0]}.icd": p + "\n" for p in libs}
    try:
        for n in sorted(os.listdir(system_dir)):
            if n.endswith(".icd"):
                with open(os.path.join(system_dir, n)) as f:
                    files[n] = f.read()
    except OSError:
        pass                      # (no system drivers)
    tag = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:16]
    d = os.path.join(cache_dir(), "opencl-vendors", tag)
    if not os.path.isdir(d):      # (written once per set of drivers; atomic for xdist workers)
        tmp = f"{d}.tmp{os.getpid()}"
        os.makedirs(tmp, exist_ok=True)
        for n, text in files.items():
            with open(os.path.join(tmp, n), "w") as f:
                f.write(text)
        try:
            os.rename(tmp, d)
        except OSError:           # another process won the race: same content
            for n in os.listdir(tmp):
                os.unlink(os.path.join(tmp, n))
            os.rmdir(tmp)
    os.environ["OCL_ICD_VENDORS"] = d
    return d


def cla():
    """``pyopencl.array``."""
    if _cla is None:
        cl()
    return _cla


# --- fork() -----------------------------------------------------------------------------

#: pid of the process that initialised OpenCL through this module (None: not yet)
_init_pid = None
#: in a fork()ed child of that process: the pid OpenCL was initialised in, else None
_forked_from = None


def platforms():
    """``pyopencl.get_platforms()``; the first call initialises the OpenCL driver (PoCL
    starts its threads here), which is what a fork()ed child cannot inherit."""
    global _init_pid
    c = cl()
    if _forked_from is not None:
        raise forked_error("listing OpenCL platforms")
    if _init_pid is None:
        _init_pid = os.getpid()
    return c.get_platforms()


def _after_fork_in_child():
    global _forked_from
    if _init_pid is not None and _forked_from is None:
        _forked_from = _init_pid


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forked_from():
    """In a fork()ed child of a process that used OpenCL: that process's pid; else None."""
    return _forked_from


def check_not_forked(what=None):
    """Raise :func:`forked_error` in a fork()ed child of a process that used OpenCL."""
    if _forked_from is not None:
        raise forked_error(what)


def forked_error(what=None):
    """The FailedPreconditionError for OpenCL use in a fork()ed child; ``what``: the
    device or action, for the message."""
    # (tapeflow is imported by now: OpenCL devices exist only through it; this module
    # imports nothing from tapeflow at module level, see the module doc)
    from tapeflow.errors import FailedPreconditionError
    return FailedPreconditionError(
        f"The OpenCL context was created in the parent process (pid {_forked_from}) and "
        f"cannot be used after fork() (this is pid {os.getpid()}"
        + (f", using {what}" if what else "") + "): the OpenCL driver's threads do not "
        "survive fork, so the call would hang. Use multiprocessing's 'spawn' or 'forkserver' "
        "start method (multiprocessing.get_context('spawn')) for workers that need OpenCL: "
        "they import tapeflow themselves and open their own context (do not put tapeflow "
        "in set_forkserver_preload). Tensors on cpu:0 work in forked children.")


# --- devices ------------------------------------------------------------------------------

class CLDevice:
    """The handle of one ``opencl:N`` device (``Device.handle``)."""

    def __init__(self, index, cl_device, platform):
        c = cl()
        if _forked_from is not None:
            raise forked_error(f"opencl:{index}")
        self.index = index
        self.name = f"opencl:{index}"
        self.cl_device = cl_device
        self.platform = platform
        self.ctx = c.Context([cl_device])
        self.queue = c.CommandQueue(self.ctx)
        self.pool = c.tools.MemoryPool(c.tools.ImmediateAllocator(self.queue))
        ext = cl_device.extensions.split()
        self.fp64 = "cl_khr_fp64" in ext or bool(getattr(cl_device, "double_fp_config", 0))
        self.fp16 = "cl_khr_fp16" in ext
        self.is_gpu = bool(cl_device.type & c.device_type.GPU)
        self.max_wg = int(cl_device.max_work_group_size)
        self.max_alloc = int(cl_device.max_mem_alloc_size)
        self.local_mem = int(cl_device.local_mem_size)
        self.compute_units = int(cl_device.max_compute_units)
        # build options for kernels whose float32 divisions must be correctly rounded (LU
        # pivots: OpenCL allows 2.5 ulp, and NVIDIA's driver takes it, so a/a != 1 there
        # and a singular matrix got a nonzero determinant), where the device offers it
        crdiv = getattr(c.device_fp_config, "CORRECTLY_ROUNDED_DIVIDE_SQRT", 0)
        self.exact_div = (("-cl-fp32-correctly-rounded-divide-sqrt",)
                          if crdiv and int(cl_device.single_fp_config) & crdiv else ())
        self.kernels: dict = {}       # (source hash, name) -> Kernel
        self.scalars: dict = {}       # 0-d uploads (immutable, shared)
        self.lock = threading.RLock()
        _BY_QUEUE[self.queue.int_ptr] = self

    def describe(self):
        d = self.cl_device
        kind = "GPU" if self.is_gpu else ("CPU" if d.type & cl().device_type.CPU else "accelerator")
        return (f"{d.name.strip()} ({kind}, {self.platform.name.strip()} "
                f"{self.platform.version.strip()}, {d.max_compute_units} compute units, "
                f"{d.global_mem_size / 2**30:.1f} GiB, fp64 {'yes' if self.fp64 else 'no'})")

    def check_dtype(self, dtype, what=None):
        """UnimplementedError (naming the device and dtype) when the device cannot
        hold or compute ``dtype``; ``what``: the action, for the message."""
        from tapeflow.errors import UnimplementedError
        dt = np.dtype(dtype)
        ctx = f" ({what})" if what else ""
        dname = self.cl_device.name.strip()
        if dt in (np.float64, np.complex128) and not self.fp64:
            raise UnimplementedError(
                f"{dt} is not supported on {self.name} ({dname}: no cl_khr_fp64){ctx}; "
                f"use {'float32' if dt == np.float64 else 'complex64'}, or a device with "
                "fp64 (PoCL has it)")
        if dt == np.float16 and not self.fp16:
            raise UnimplementedError(
                f"float16 is not supported on {self.name} ({dname}: no cl_khr_fp16){ctx}; "
                "cast to float32 first (or bfloat16, which every OpenCL device stores)")
        if dt not in CTYPES:
            raise UnimplementedError(f"{dt} is not supported on {self.name} ({dname}){ctx}")


_BY_QUEUE: dict = {}


# --- the probe: a device that cannot compile is not a device ---------------------------------

#: the kernel :func:`probe` builds and runs (a module attribute: a test replaces it with
#: a broken one to fake a driver that cannot compile)
PROBE_SOURCE = ("__kernel void tapeflow_probe(__global float *a) {\n"
                "    size_t i = get_global_id(0);\n    a[i] = a[i] * 2.0f + 1.0f;\n}\n")


def forget(dev: CLDevice):
    """Drop ``dev`` (a device left out after :func:`probe`) from the queue index."""
    _BY_QUEUE.pop(dev.queue.int_ptr, None)


def _probe_marker(dev: CLDevice) -> str:
    d, p = dev.cl_device, dev.platform
    ident = "\0".join(str(x).strip() for x in (
        p.name, p.version, d.name, d.version, getattr(d, "driver_version", ""),
        PROBE_SOURCE))
    return os.path.join(cache_dir(), "opencl-probe",
                        hashlib.sha256(ident.encode()).hexdigest()[:24] + ".ok")


def probe(dev: CLDevice):
    """None when ``dev`` builds and runs a one-line kernel correctly; else the reason, in
    one line (the compiler's first error, not its whole log). A success is remembered
    in the tapeflow cache directory (keyed by platform, device, driver and the probe
    kernel), so a later process skips the build; a failure is probed again each time.

    Why: a driver that cannot compile for this processor (the PoCL 3.0 wheel's LLVM 14
    on CPUs newer than it: "unknown target CPU") still lists its device, and every op on
    it would then fail with a compiler error."""
    marker = _probe_marker(dev)
    if os.path.exists(marker):
        return None
    c = cl()
    try:
        prg = _build(c, dev, PROBE_SOURCE, [])
        host = np.arange(4, dtype=np.float32)
        buf_ = c.Buffer(dev.ctx, c.mem_flags.READ_WRITE | c.mem_flags.COPY_HOST_PTR,
                        hostbuf=host)
        prg.tapeflow_probe(dev.queue, (4,), None, buf_)
        out = np.empty_like(host)
        c.enqueue_copy(dev.queue, out, buf_, is_blocking=True)
    except Exception as e:  # any driver failure means "not usable", with its reason
        return f"cannot compile or run a one-line kernel: {_first_error(e)}"
    if not np.array_equal(out, host * 2 + 1):
        return f"a one-line kernel computed {out.tolist()} instead of {(host * 2 + 1).tolist()}"
    try:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as f:
            f.write(dev.describe() + "\n")
    except OSError:
        pass                      # (a read-only cache: probe again next time)
    return None


def _first_error(e) -> str:
    """The first line of a driver error that says what is wrong (the build log's first
    ``error:`` line when there is one), shortened."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pick = next((ln for ln in lines if "error:" in ln), None) or (lines[0] if lines else
                                                                   type(e).__name__)
    return pick if len(pick) <= 300 else pick[:297] + "..."


def device_of(a) -> CLDevice:
    """The :class:`CLDevice` whose queue ``a`` lives on."""
    return _BY_QUEUE[a.queue.int_ptr]


# --- arrays -------------------------------------------------------------------------------

def _cstrides(shape, itemsize):
    st = []
    acc = itemsize
    for s in reversed(shape):
        st.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(st))


def empty(dev: CLDevice, shape, dtype) -> object:
    """A new contiguous array on ``dev``."""
    if _forked_from is not None:
        raise forked_error(dev.name)
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    nbytes = size * dtype.itemsize
    if nbytes > dev.max_alloc:        # (the dispatcher makes it a ResourceExhaustedError)
        raise MemoryError(
            f"Unable to allocate {nbytes:,} bytes for a {dtype.name} tensor of shape "
            f"{list(shape)} on {dev.name} (its largest buffer: {dev.max_alloc:,} bytes)")
    data = dev.pool(nbytes) if nbytes else None
    return cla().Array(None, shape, dtype, data=data, strides=_cstrides(shape, dtype.itemsize),
                       _fast=True, _size=size, _context=dev.ctx, _queue=dev.queue)


def view(a, shape, strides=None, offset=None, dtype=None) -> object:
    """A view of ``a``'s buffer: element ``strides`` and element ``offset``
    (defaults: C-contiguous from ``a``'s offset)."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    isz = dtype.itemsize
    shape = tuple(int(s) for s in shape)
    if strides is None:
        bstrides = _cstrides(shape, isz)
    else:
        bstrides = tuple(int(s) * isz for s in strides)
    boff = a.offset if offset is None else int(offset) * isz
    return cla().Array(None, shape, dtype, data=a.base_data, offset=boff, strides=bstrides,
                       _fast=True, _size=math.prod(shape), _context=a.context, _queue=a.queue)


def layout(a):
    """``(element strides, element offset)`` of ``a``."""
    isz = a.dtype.itemsize
    return tuple(s // isz for s in a.strides), a.offset // isz


def is_contiguous(a) -> bool:
    """C-contiguous (size-1 dimensions' strides do not matter)."""
    if a.size <= 1:
        return True
    return all(s == c for s, c, n in zip(a.strides, _cstrides(a.shape, a.dtype.itemsize),
                                         a.shape) if n != 1)


def buf(dev, a):
    """``a``'s buffer for a kernel argument (a 1-byte dummy for empty arrays)."""
    b = a.base_data
    if b is None:
        b = dev.pool(1)
    return b


def upload(dev: CLDevice, host: np.ndarray):
    """A host array -> a new contiguous device array."""
    if not host.flags.c_contiguous:
        host = np.ascontiguousarray(host)   # (never for 0-d: it would make them 1-d)
    out = empty(dev, host.shape, host.dtype)
    if host.nbytes:
        cl().enqueue_copy(dev.queue, out.base_data, host, is_blocking=False)
        # (non-blocking: the queue is in order; PyOpenCL keeps ``host`` alive until done)
    return out


def download(a) -> np.ndarray:
    """A device array -> a new host array (waits for the queue)."""
    if _forked_from is not None:
        raise forked_error(_BY_QUEUE[a.queue.int_ptr].name)
    a = contiguous(a)
    host = np.empty(a.shape, a.dtype)
    if host.nbytes:
        cl().enqueue_copy(a.queue, host, a.base_data, src_offset=a.offset, is_blocking=True)
    return host


def _flag_error(flag, ok, make_error):
    """The error ``make_error(value)`` when ``flag`` (a 1-element device array) does
    not hold ``ok``, else None (waits for the queue up to the flag)."""
    v = download(flag).reshape(-1)[0]
    return None if v == ok else make_error(v)


def check_flag(flag, ok, make_error):
    """Check a kernel's error flag: raise ``make_error(value)`` (an exception naming the
    op and the device) unless the 1-element device array ``flag`` holds ``ok``.

    Reading the flag waits for the queue. In ``tf.ASYNC`` execution mode the read is
    deferred instead (``tapeflow.app.defer_check``): ``tf.async_wait()`` finishes the
    queue, reads the flag and raises the error there, so the queue keeps running
    ahead of Python. ``make_error`` and the arrays it reads are kept alive until then.
    """
    import tapeflow                     # (nothing of tapeflow at module level: see the top)
    app = tapeflow.app                  # (tf.app: the public home of the execution mode)
    if app.executing_async():
        app.defer_check(functools.partial(_flag_error, flag, ok, make_error))
        return
    err = _flag_error(flag, ok, make_error)
    if err is not None:
        raise err


def scalar(dev: CLDevice, value, dtype):
    """A 0-d device array holding ``value`` (cached: arrays are never written)."""
    a = np.asarray(value, dtype=dtype)
    key = (a.dtype, a.tobytes())
    hit = dev.scalars.get(key)
    if hit is None:
        if len(dev.scalars) > 4096:
            dev.scalars.clear()
        hit = dev.scalars[key] = upload(dev, a.reshape(()))
    return hit


# --- programs and launches ----------------------------------------------------------------

_HEADER = ("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n")


def kernel(dev: CLDevice, source: str, name: str, scalar_dtypes=None, options=()):
    """The compiled kernel ``name`` of ``source`` on ``dev`` (cached in memory and on
    disk). ``scalar_dtypes``: PyOpenCL's ``set_scalar_arg_dtypes`` list (``None`` for
    buffer arguments), so that :func:`launch` can pass plain Python numbers. ``options``:
    OpenCL build options (e.g. ``("-cl-fp32-correctly-rounded-divide-sqrt",)``)."""
    key = (source, name, tuple(options))
    k = dev.kernels.get(key)
    if k is not None:
        return k
    if _forked_from is not None:
        raise forked_error(dev.name)
    with dev.lock:
        k = dev.kernels.get(key)
        if k is not None:
            return k
        c = cl()
        src = (_HEADER if dev.fp64 else "") + source
        try:
            prg = _build(c, dev, src, list(options))
        except c.RuntimeError as e:
            raise RuntimeError(f"OpenCL compilation of kernel {name} failed on {dev.name}: {e}\n"
                               f"--- source ---\n{src}") from None
        k = getattr(prg, name)
        if scalar_dtypes is not None:
            k.set_scalar_arg_dtypes(scalar_dtypes)
        dev.kernels[key] = k
        return k


def _build(c, dev: CLDevice, src: str, opts: list):
    """``src`` built for ``dev`` with exactly ``opts``, through the driver's own cache.

    PyOpenCL's ``Program.build`` adds ``-I <PyOpenCL's header directory>`` to every
    build, a path inside the virtual environment. Drivers that cache compiled programs
    themselves (PoCL: PyOpenCL's ``has_src_build_cache``) key that cache on the build
    options too, so every checkout's ``.venv`` (every fresh CI clone) missed a warm
    cache and recompiled all ~3200 kernels the tests use (about 1 s each on PoCL).
    tapeflow's kernels include no PyOpenCL header, so for such drivers the program is
    built through the OpenCL program object PyOpenCL wraps, with our options only;
    elsewhere (NVIDIA: no driver cache) PyOpenCL's binary cache in the tapeflow cache
    directory is used, as before. (``PYOPENCL_BUILD_OPTIONS`` is not applied on the
    first path.)"""
    from_src = getattr(getattr(c, "_cl", None), "_Program", None)
    if from_src is not None and c.characterize.has_src_build_cache(dev.cl_device):
        raw = from_src(dev.ctx, src)
        raw.build(" ".join(opts).encode(), [dev.cl_device])   # (its error has the build log)
        return c.Program(raw)
    return c.Program(dev.ctx, src).build(options=opts,
                                         cache_dir=os.path.join(cache_dir(), "opencl"))


def launch(dev: CLDevice, k, gsize, lsize, *args):
    """Set ``args`` and enqueue ``k`` over ``gsize`` (a tuple) with ``lsize`` (or None)."""
    if _forked_from is not None:
        raise forked_error(dev.name)
    with dev.lock:
        k.set_args(*args)
        cl().enqueue_nd_range_kernel(dev.queue, k, gsize, lsize)


# --- layouts: broadcasting and dimension merging ---------------------------------------------

def broadcast_shape(shapes):
    """NumPy's broadcast shape; InvalidArgumentError (TF's words) when incompatible."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    from tapeflow.errors import InvalidArgumentError
                    raise InvalidArgumentError(
                        f"Incompatible shapes: {' vs. '.join(str(list(x)) for x in shapes)}")
                out[i] = d
    return tuple(out)


def broadcast_strides(a, shape):
    """Element strides of ``a`` broadcast to ``shape`` (0 where broadcast) and offset."""
    st, off = layout(a)
    nd = len(shape)
    pad = nd - len(st)
    out = [0] * nd
    for i, (s, n) in enumerate(zip(st, a.shape)):
        out[pad + i] = 0 if n == 1 else s
    return out, off


def merge_dims(shape, strides_list):
    """Merge adjacent dimensions that every operand walks contiguously; drop size-1
    dimensions. Returns (shape, [strides per operand])."""
    dims = [i for i, n in enumerate(shape) if n != 1]
    if not dims:
        return (), [[] for _ in strides_list]
    new_shape = [shape[dims[0]]]
    new_st = [[st[dims[0]]] for st in strides_list]
    for i in dims[1:]:
        n = shape[i]
        if all(ns[-1] == st[i] * n for ns, st in zip(new_st, strides_list)):
            new_shape[-1] *= n
            for ns, st in zip(new_st, strides_list):
                ns[-1] = st[i]
        else:
            new_shape.append(n)
            for ns, st in zip(new_st, strides_list):
                ns.append(st[i])
    return tuple(new_shape), new_st


def index_code(nd, names, shape_var="d"):
    """OpenCL C computing ``off_<name>`` for each operand from the linear index ``i``
    (shape ``d0..d{nd-1}`` and strides ``s_<name>_k`` as kernel arguments)."""
    lines = ["long r = i;"]
    for k in range(nd - 1, -1, -1):
        if k > 0:
            lines.append(f"long i{k} = r % {shape_var}{k}; r /= {shape_var}{k};")
        else:
            lines.append("long i0 = r;")
        for n in names:
            lines.append(f"off_{n} += i{k} * s_{n}_{k};")
    return "\n    ".join(lines)


def strided_args_decl(nd, names, shape_var="d"):
    parts = [f"long {shape_var}{k}" for k in range(1, nd)]
    for n in names:
        parts += [f"long s_{n}_{k}" for k in range(nd)]
    return parts


# --- the generated elementwise kernel ----------------------------------------------------------

def _ew_source(expr, in_ctypes, out_ctype, modes, nd, preamble, bool_out):
    names = [f"x{j}" for j in range(len(in_ctypes))]
    strided = [n for n, m in zip(names, modes) if m == "g"]
    params = [f"__global {out_ctype} *out"]
    for n, t in zip(names, in_ctypes):
        params += [f"__global const {t} *p_{n}", f"long o_{n}"]
    params.append("long n")
    if strided:
        params += strided_args_decl(nd, strided)
    body = []
    if strided:
        body.append("    " + "".join(f"long off_{n} = o_{n}; " for n in strided))
        body.append("    " + index_code(nd, strided))
    for n, t, m in zip(names, in_ctypes, modes):
        idx = {"c": f"o_{n} + i", "s": f"o_{n}", "g": f"off_{n}"}[m]
        body.append(f"    const {t} {n} = p_{n}[{idx}];")
    val = f"(({expr}) ? 1 : 0)" if bool_out else f"({expr})"
    body.append(f"    out[i] = ({out_ctype}){val};")
    return (f"{preamble}\n__kernel void ew({', '.join(params)}) {{\n"
            f"    long i = get_global_id(0);\n    if (i >= n) return;\n"
            + "\n".join(body) + "\n}\n")


def access_modes(shape, arrays):
    """How an elementwise kernel over ``shape`` reads each of ``arrays``:
    ``(merged shape, [merged strides], modes)`` where a mode is ``"c"`` (contiguous:
    linear index), ``"s"`` (one element, broadcast) or ``"g"`` (general strides over
    the merged dimensions)."""
    sts = [broadcast_strides(a, shape)[0] for a in arrays]
    mshape, msts = merge_dims(shape, sts)
    nd = len(mshape)
    modes = []
    for st in msts:
        if all(s == 0 for s in st):
            modes.append("s")
        elif nd == 1 and st == [1]:
            modes.append("c")
        else:
            modes.append("g")
    return mshape, msts, modes


def _ew_plan(dev, expr, out_dtype, arrays, preamble, shape):
    """``(kernel, shape, n, arg tail)`` for one elementwise call (see :func:`elementwise`)."""
    mshape, msts, modes = access_modes(shape, arrays)
    nd = len(mshape)
    in_ct = [CTYPES[a.dtype] for a in arrays]
    src = _ew_source(expr, in_ct, CTYPES[out_dtype], modes, nd, preamble,
                     out_dtype == np.bool_)
    sd, tail = ew_arg_layout(1, mshape, msts, modes)
    return kernel(dev, src, "ew", sd), math.prod(shape), tail


def ew_arg_layout(n_out, mshape, msts, modes):
    """``(scalar arg dtypes, tail values)`` of a generated elementwise kernel: ``n_out``
    output buffers, a buffer and an offset per input (one per entry of ``modes``), the
    element count, then for the strided inputs (mode ``"g"``) the merged shape past
    its first dimension and their strides (the tail, from :func:`access_modes`)."""
    nd = len(mshape)
    strided = [j for j, m in enumerate(modes) if m == "g"]
    sd = [None] * n_out
    for _ in modes:
        sd += [None, np.int64]
    sd.append(np.int64)
    tail = []
    if strided:
        sd += [np.int64] * (nd - 1 + nd * len(strided))
        tail = list(mshape[1:])
        for j in strided:
            tail += list(msts[j])
    return sd, tail


#: (device, expr, dtypes, layouts, ...) -> plan; bounded, cleared when full
_PLANS: dict = {}
_PLANS_MAX = 8192


def elementwise(expr, out_dtype, *arrays, preamble="", out_shape=None):
    """Evaluate the OpenCL C expression ``expr`` of ``x0, x1, ...`` (the inputs' values,
    of their C types) over the broadcast shape of ``arrays``; a new contiguous array
    of ``out_dtype``. ``preamble``: helper functions the expression calls.

    The kernel source depends on the dtypes and on the merged layout (contiguous,
    0-d or strided per input, number of dimensions); the plan for a given (expression,
    dtypes, shapes, strides) is cached, so a repeated call only allocates and launches.

    >>> # elementwise("x0 + x1", np.float32, a, b)      (a, b on one opencl device)
    """
    dev = _BY_QUEUE[arrays[0].queue.int_ptr]
    out_dtype = np.dtype(out_dtype)
    key = (dev.index, expr, out_dtype, preamble, out_shape,
           *[(a.dtype, a.shape, a.strides) for a in arrays])
    plan = _PLANS.get(key)
    if plan is None:
        shape = out_shape if out_shape is not None else broadcast_shape(
            [a.shape for a in arrays])
        if math.prod(shape) == 0:
            return empty(dev, shape, out_dtype)
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        plan = _PLANS[key] = (*_ew_plan(dev, expr, out_dtype, arrays, preamble, shape), shape)
    k, n, tail, shape = plan
    out = empty(dev, shape, out_dtype)
    args = [out.base_data]
    for a in arrays:
        args += [a.base_data, a.offset // a.dtype.itemsize]
    args.append(n)
    if tail:
        args += tail
    launch(dev, k, (n,), None, *args)
    return out


def contiguous(a):
    """``a`` if C-contiguous, else a contiguous copy (one strided-copy kernel)."""
    if is_contiguous(a):
        return a
    return elementwise("x0", a.dtype, a, out_shape=a.shape)


def bind(method, name, *args):
    """The kernel of a family: ``method`` (a kernel class's method taking the family's
    varying parts first) with ``args`` bound, named ``name`` in tracebacks, profiles
    and the bfloat16/complex wrappers (``functools.partial`` has no name of its own)."""
    k = functools.partial(method, *args)
    k.__name__ = name
    k.__qualname__ = f"{method.__qualname__}[{name}]"
    return k


def respec(spec, **changes):
    """A copy of the kernel spec ``spec`` (a ``tapeflow.plugins.KernelSpec``) with
    ``changes``, its constructor's arguments (``fn``, ``dtypes``, ``variants``...): how
    the bfloat16, float16 and complex declarations add dtypes and variants to a kernel."""
    args = {"fn": spec.fn, "dtypes": spec.dtypes, "needs_device": spec.needs_device,
            "source": spec.source, "fresh": spec.fresh, "variants": spec.variants,
            "out": spec.out, "layouts": spec.layouts}
    args.update(changes)
    return type(spec)(**args)
