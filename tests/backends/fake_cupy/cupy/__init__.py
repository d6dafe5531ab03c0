"""A NumPy-backed stand-in for CuPy: enough of its API to run tapeflow's CUDA backend
(``tapeflow_cuda_cupy``) on a machine without a GPU, as one fake device ``cuda:0``.

What it checks: the backend's Python layer (device listing, copies, lazy kernel
registration and rebinding, the kernel table built from the shared ``xp`` sources with
the CuPy compatibility namespace, the CUDA-specific wrappers, error messages). The raw
CUDA kernels (row kernels, Philox) run through ``tapeflow_cuda_cupy.emulate`` (the same
CUDA source compiled for the host); the fused ElementwiseKernels are replaced by NumPy
equivalents of their bodies. It checks nothing about CuPy's own numerics or kernels.

Put this directory first on ``sys.path`` (``PYTHONPATH``) to use it.
"""

import contextlib as _contextlib
import os as _os
import types as _types

import numpy as _np
from numpy import *  # noqa: F401,F403
from numpy import lib  # noqa: F401

__version__ = "0.0-fake"
FAKE = True

_pool_used = [0]
_current = [0]                  # the current device (``with cupy.cuda.Device(i):``)
_N_DEVICES = int(_os.environ.get("FAKE_CUPY_DEVICES", "1"))


class ndarray(_np.ndarray):
    """A device array: a NumPy array that must be fetched with ``get()``; like CuPy's,
    reductions and element access give 0-d arrays, not scalars."""

    def get(self, stream=None):
        return _np.array(self.view(_np.ndarray), copy=True)

    def set(self, arr, stream=None):
        self[...] = arr

    def __array_finalize__(self, obj):
        self._dev = _current[-1]

    @property
    def device(self):
        return cuda.Device(getattr(self, "_dev", 0))

    @property
    def data(self):
        return _Ptr(self)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        return super().__array_wrap__(arr, context, False)

    def __getitem__(self, key):
        return _out(super().__getitem__(key))


def _out(r):
    if isinstance(r, ndarray):
        return r
    if isinstance(r, _np.ndarray):
        return r.view(ndarray)
    if isinstance(r, _np.generic):
        return _np.asarray(r).view(ndarray)
    if isinstance(r, tuple):
        return tuple(_out(x) for x in r)
    if isinstance(r, list):
        return [_out(x) for x in r]
    return r


def _wrap(fn):
    def f(*args, **kwargs):
        return _out(fn(*args, **kwargs))
    f.__name__ = getattr(fn, "__name__", "f")
    f.__wrapped__ = fn
    return f


for _name in dir(_np):
    _obj = getattr(_np, _name)
    if (not _name.startswith("_") and callable(_obj) and not isinstance(_obj, (type, _np.ufunc))
            and _name not in ("asarray", "ndarray", "errstate", "asnumpy")):
        globals()[_name] = _wrap(_obj)
del _name, _obj


class _Ptr:
    def __init__(self, arr):
        self.arr = arr

    @property
    def ptr(self):
        """The host address of the first element (CuPy: the device address)."""
        return self.arr.__array_interface__["data"][0]

    def copy_from_device(self, src, nbytes):
        dst = self.arr.view(_np.ndarray).reshape(-1).view(_np.uint8)
        dst[:nbytes] = src.arr.view(_np.ndarray).reshape(-1).view(_np.uint8)[:nbytes]


def asarray(a, dtype=None, order=None):
    return _np.array(a, dtype=dtype, order=order, copy=True).view(ndarray)


def asnumpy(a, stream=None):
    return _np.array(a, copy=True)


class _Pool:
    def used_bytes(self):
        return 0

    def total_bytes(self):
        return 0

    def get_limit(self):
        return 0

    def free_all_blocks(self, stream=None):
        pass


_POOL = _Pool()


def get_default_memory_pool():
    return _POOL


def get_default_pinned_memory_pool():
    return _POOL


class _Device:
    def __init__(self, i=0):
        self.id = i
        self.attributes = {"MultiProcessorCount": 4}

    def __enter__(self):
        _current.append(self.id)
        return self

    def __exit__(self, *exc):
        _current.pop()
        return False

    def synchronize(self):
        pass

    def use(self):
        pass


class _OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: "
                         f"{total:,} bytes).")


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return _N_DEVICES

    @staticmethod
    def getDevice():
        return _current[-1]

    @staticmethod
    def getDeviceProperties(i):
        return {"name": b"Fake CUDA device (NumPy)", "totalGlobalMem": 16 * 2**30,
                "major": 9, "minor": 0}

    @staticmethod
    def memGetInfo():
        return 15 * 2**30, 16 * 2**30

    @staticmethod
    def deviceSynchronize():
        pass


class _Allocation:
    """``cupy.cuda.alloc``'s MemoryPointer: host bytes kept alive with their address."""

    def __init__(self, nbytes):
        self.buf = _np.zeros(int(nbytes) or 1, _np.uint8)
        self.ptr = self.buf.__array_interface__["data"][0]


# --- streams, events, memory pools and graphs (for tapeflow_cuda_cupy.cuda_graphs) --------
# Logic checks only: a "capture" here RUNS the kernels (NumPy cannot defer them), except
# that ``copyto`` writes nothing while a stream captures (so in-place updates of Variables
# happen once, as on a GPU, where the capture runs nothing); ``Graph.launch`` runs
# nothing and counts. Values after a fake capture are therefore not meaningful: what
# this checks is which CuPy calls the capturer makes, in which order, on which stream.

_stream_stack = []
_capturing = []
calls = []                      # ("begin_capture" | "end_capture" | "launch" | ..., detail)


class _Event:
    pass


class _Stream:
    null = None
    ptr = 0                     # (the handle cuDNN is given; the legacy stream's is 0)

    def __init__(self, null=False, non_blocking=False, ptr=None):
        self.non_blocking = non_blocking
        self.is_null = null

    def __enter__(self):
        _stream_stack.append(self)
        return self

    def __exit__(self, *exc):
        _stream_stack.pop()
        return False

    def record(self, event=None):
        return _Event()

    def wait_event(self, event):
        calls.append(("wait_event", self))

    def synchronize(self):
        pass

    def begin_capture(self, mode=None):
        if self.is_null:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: the legacy stream")
        if _capturing:
            raise RuntimeError("cudaErrorIllegalState: already capturing")
        _capturing.append(self)
        calls.append(("begin_capture", self))

    def is_capturing(self):
        return len(_capturing) > 0 and _capturing[-1] is self   # (bool is NumPy's here)

    def end_capture(self):
        if not self.is_capturing():
            raise RuntimeError("cudaErrorIllegalState: not capturing")
        _capturing.pop()
        calls.append(("end_capture", self))
        return _Graph()


_NULL_STREAM = _Stream(null=True)
_Stream.null = _NULL_STREAM


def _get_current_stream(device_id=None):
    return _stream_stack[-1] if _stream_stack else _NULL_STREAM


class _Graph:
    def __init__(self):
        self.launches = 0

    def launch(self, stream=None):
        if stream is not None and _capturing:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        self.launches += 1
        calls.append(("launch", stream))


class _MemoryPool(_Pool):
    def malloc(self, nbytes):
        raise NotImplementedError("the NumPy stand-in allocates with NumPy")


_allocators = []


@_contextlib.contextmanager
def _using_allocator(allocator=None):
    _allocators.append(allocator)
    calls.append(("using_allocator", allocator))
    try:
        yield
    finally:
        _allocators.pop()


def copyto(dst, src, casting="same_kind", where=True):
    if _capturing:
        calls.append(("copyto (captured, not run)", dst.shape))
        return
    _np.copyto(dst, src, casting=casting, where=where)


# --- cuBLAS under capture -------------------------------------------------------------------
# CuPy (13, 14 and main as of 2026-08) refuses every cuBLAS call while the current stream
# captures: each wrapper in cupy_backends/cuda/libs/cublas.pyx starts with
# ``_setStream(handle)``, whose ``setStream`` raises this when
# ``runtime.streamIsCapturing(stream)``. matmul, dot, tensordot, inner, vdot and einsum
# reach cuBLAS for float and complex dtypes (integer ones use CuPy's own kernels).

_CUBLAS_REFUSAL = "calling cuBLAS API during stream capture is currently unsupported"
cublas_refusals = []            # the functions refused (for tests)


def _cublas(fn):
    def f(*args, **kwargs):
        if _get_current_stream().is_capturing() and any(
                getattr(a, "dtype", _np.dtype(int)).kind in "fc"
                              for a in args if isinstance(a, _np.ndarray)):
            cublas_refusals.append(fn.__name__)
            raise NotImplementedError(_CUBLAS_REFUSAL)
        return _out(fn(*args, **kwargs))
    f.__name__ = fn.__name__
    f.__wrapped__ = fn
    return f


matmul = _cublas(_np.matmul)
dot = _cublas(_np.dot)
tensordot = _cublas(_np.tensordot)
inner = _cublas(_np.inner)
vdot = _cublas(_np.vdot)
_np_einsum = _np.einsum


def einsum(subscripts, *operands, **kwargs):
    if _get_current_stream().is_capturing() and len(operands) >= 2 and any(
            getattr(a, "dtype", _np.dtype(int)).kind in "fc" for a in operands):
        cublas_refusals.append("einsum")
        raise NotImplementedError(_CUBLAS_REFUSAL)
    return _out(_np_einsum(subscripts, *operands, **kwargs))


ndarray.__matmul__ = lambda self, other: matmul(self, other)
ndarray.dot = lambda self, other, out=None: dot(self, other)


class cuda:  # noqa: N801  (a namespace, as cupy.cuda)
    runtime = _Runtime
    Device = _Device
    Stream = _Stream
    Event = _Event
    Graph = _Graph
    MemoryPool = _MemoryPool
    get_current_stream = staticmethod(_get_current_stream)
    using_allocator = staticmethod(_using_allocator)
    alloc = _Allocation

    class memory:  # noqa: N801
        OutOfMemoryError = _OutOfMemoryError


_LIMIT = 8 * 2**30


def _check_size(shape, dtype):
    n = 1
    for d in (shape if isinstance(shape, tuple) else (shape,)):
        n *= int(d)
    nbytes = n * _np.dtype(dtype).itemsize
    if nbytes > _LIMIT:
        raise _OutOfMemoryError(nbytes, 0)


def full(shape, fill_value, dtype=None, order="C"):
    _check_size(shape, dtype if dtype is not None else _np.asarray(fill_value).dtype)
    return _out(_np.full(shape, fill_value, dtype=dtype, order=order))


def empty(shape, dtype=float, order="C"):
    _check_size(shape, dtype)
    return _out(_np.empty(shape, dtype=dtype, order=order))


def zeros(shape, dtype=float, order="C"):
    _check_size(shape, dtype)
    return _out(_np.zeros(shape, dtype=dtype, order=order))


def argsort(a, axis=-1, kind=None):
    return _out(_np.argsort(a, axis=axis, kind="stable"))


# --- user kernels -----------------------------------------------------------------------

def _ew_impls():
    def acc(x):
        return x.astype(_np.float32) if x.dtype == _np.float16 else x

    def sigmoid(x):
        v = acc(x)
        with _np.errstate(over="ignore"):
            e = _np.exp(-_np.abs(v))
        return _np.where(v >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)

    return {
        "relu_grad": lambda dy, x: (dy * (x > 0)).astype(dy.dtype),
        "relu6_grad": lambda dy, x: (dy * ((x > 0) & (x < 6))).astype(dy.dtype),
        "leaky_relu": lambda x, a: _np.where(x > 0, x, x * x.dtype.type(a)),
        "leaky_relu_grad": lambda dy, x, a: _np.where(x > 0, dy, dy * dy.dtype.type(a)),
        "elu": lambda x: _np.where(x > 0, x, _np.expm1(acc(_np.minimum(x, 0))).astype(x.dtype)),
        "elu_grad": lambda dy, y: _np.where(y < 0, dy * (y + 1), dy),
        "sigmoid": sigmoid,
        "rsqrt": lambda x: (1 / _np.sqrt(acc(x))).astype(x.dtype),
        "squared_difference": lambda x, y: _np.subtract(x, y) * _np.subtract(x, y),
        "nextafter_f16": lambda x, y: _np.nextafter(x.view(_np.float16),
                                                    y.view(_np.float16)).view(_np.uint16),
        "floordiv": _floordiv,
        "floormod": _np.remainder,
        "sigmoid_xent": lambda x, z: (_np.maximum(acc(x), 0) - acc(x) * acc(z)
                                      + _np.log1p(_np.exp(-_np.abs(acc(x))))).astype(x.dtype),
    }


def _floordiv(x, y):
    """k_cuda.py's floordiv body: NumPy's floor division, except that one infinite and
    one finite operand give x / y (the array API's table: inf // 3 is inf)."""
    out = _np.floor_divide(x, y)
    if out.dtype.kind == "f":
        a, b = _np.broadcast_arrays(x, y)
        one_inf = (_np.isinf(a) != _np.isinf(b)) & ~_np.isnan(a) & ~_np.isnan(b)
        with _np.errstate(all="ignore"):
            out = _np.where(one_inf, _np.true_divide(a, b), out).astype(out.dtype)
    return out


#: CuPy's ``cupyx.errstate(linalg=...)`` setting (``cupyx.linalg`` config): "ignore" by
#: default, when CuPy does not read cuSOLVER's devInfo and a failed factorisation
#: returns NaNs instead of raising
_linalg_mode = ["ignore"]


def nextafter(x1, x2, *args, **kwargs):
    """NumPy's, except float16 at infinities as CuPy 14.2 computed it on an H100
    (``nextafter(+-inf, finite)`` gave NaN, NumPy gives +-65504): the backend must not
    reach CuPy's float16 nextafter."""
    r = _np.nextafter(x1, x2, *args, **kwargs)
    if _np.result_type(x1, x2) == _np.float16:
        x1, x2 = _np.asarray(x1), _np.asarray(x2)
        r = _np.where(_np.isinf(x1) & _np.isfinite(x2), _np.float16("nan"), r)
    return _out(_np.asarray(r))


class _Linalg(_types.ModuleType):
    """``cupy.linalg``: NumPy's, but ``solve`` keeps CuPy's restriction (equal batch
    dimensions, b of shape (..., M) or (..., M, K); no broadcasting), which the
    backend must work around; and ``cholesky`` raises for a matrix that is not
    positive definite only under ``cupyx.errstate(linalg="raise")``, as CuPy's."""

    def __getattr__(self, name):
        return getattr(_np.linalg, name)

    @staticmethod
    def cholesky(a):
        try:
            return _out(_np.linalg.cholesky(a))
        except _np.linalg.LinAlgError:
            if _linalg_mode[-1] == "raise":
                raise
            return _out(_np.full(a.shape, _np.nan, a.dtype))

    @staticmethod
    def solve(a, b):
        if not ((a.ndim == b.ndim or a.ndim == b.ndim + 1)
                and a.shape[:-1] == b.shape[:a.ndim - 1]):
            raise ValueError("a must have (..., M, M) shape and b must have (..., M) "
                             "or (..., M, K)")
        return _out(_np.linalg.solve(a, b))


linalg = _Linalg("cupy.linalg")


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name, preamble="", **kw):
        self.name = name
        self.fn = _ew_impls()[name.removeprefix("tapeflow_")]

    def __call__(self, *args):
        return _out(_np.asarray(self.fn(*args)))


class ReductionKernel:
    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr,
                 identity, name, **kw):
        self.name = name.removeprefix("tapeflow_")

    def __call__(self, *args):
        if self.name == "count_out_of_range":
            i, n = args
            return _out(_np.asarray(_np.count_nonzero((i < 0) | (i >= n)), dtype=_np.int64))
        if self.name == "l2_loss":
            (x,) = args
            return _out(_np.asarray((x * x).sum() / 2, dtype=x.dtype))
        raise NotImplementedError(self.name)


class _EmulatedFunction:
    def __init__(self, call):
        self.call = call

    def __call__(self, grid, block, args):
        for a in args:   # a raw kernel indexes memory row-major: strided input is a bug
            if isinstance(a, _np.ndarray) and not a.flags.c_contiguous:
                raise ValueError("raw kernel launched with a non-C-contiguous array")
        self.call(grid[0], block[0], args)


def _emulate():
    from tapeflow_cuda_cupy import emulate
    return emulate


class RawModule:
    """The row kernels, through the host emulation of their CUDA source."""

    def __init__(self, code, **kw):
        self.code = code

    def get_function(self, name):
        em = _emulate()
        if name == "tapeflow_softmax_rows":
            def call(g, t, a):
                x, y, rows, n, log_mode = a
                y[...] = em.softmax_rows(x.reshape(-1, int(n)), bool(log_mode),
                                         grid=g).reshape(y.shape)
        elif name == "tapeflow_xent_rows":
            def call(g, t, a):
                x, lab, loss, rows, n = a
                loss[...] = em.xent_rows(x.reshape(-1, int(n)), lab.reshape(-1, int(n)),
                                         grid=g).reshape(loss.shape)
        elif name == "tapeflow_sparse_xent_rows":
            def call(g, t, a):
                x, labels, loss, rows, n = a
                loss[...] = em.sparse_xent_rows(x.reshape(-1, int(n)), labels.reshape(-1),
                                                grid=g).reshape(loss.shape)
        else:
            raise KeyError(name)
        return _EmulatedFunction(call)


class RawKernel:
    def __init__(self, code, name, **kw):
        assert name in ("tapeflow_philox4x64_10", "tapeflow_philox4x64_10_dev") or \
            name.startswith("tapeflow_gemm_"), name
        self.name = name
        self.dev = name.endswith("_dev")

    def __call__(self, grid, block, args):
        if self.name.startswith("tapeflow_gemm_"):     # capture_gemm: strided views allowed
            calls.append(("raw kernel", self.name))
            _emulate().gemm_launch(self.name, grid[0], block[0], args)
            return
        out, n, key, ctr = args
        if self.dev:                        # (the counter's word, read at launch)
            ctr = ctr[0]
        out[...] = _emulate().philox_raw64(int(n), int(key), int(ctr), grid=grid[0],
                                           threads=block[0], device_counter=self.dev)


@_contextlib.contextmanager
def _noop(**kw):
    yield
