"""The CUDA :class:`~tapeflow.plugins.Backend`: devices ``cuda:N`` (also ``gpu:N``).

Arrays are ``cupy.ndarray`` s allocated from CuPy's memory pool: a tensor's memory
goes back to the pool when the tensor is no longer referenced (``memory_info``
reports the pool's bytes in use), and CuPy returns cached blocks to the driver and
retries before it reports an allocation failure. Work is queued on CuPy's current
stream; ``to_host`` (``.numpy()``, printing, ``bool()``) waits for it. bfloat16 tensors
hold a :class:`.bf16.BF16Array` (CuPy has no bfloat16: its bits as uint16).
"""

from __future__ import annotations

import numpy as np

from tapeflow.errors import ResourceExhaustedError
from tapeflow.plugins import Backend

from . import _cupy, cudnn_conv, precision
from .bf16 import BF16, BF16Array
from .cuda_graphs import CudaGraphCapturer

#: 0-d host values uploaded at most once per device (Python scalars in ``x * 2.0``
#: become 0-d arrays; tensors are immutable, so sharing the upload is safe)
_SCALAR_CACHE_LIMIT = 4096


class CupyBackend(Backend):
    """CuPy on NVIDIA GPUs."""

    name = "cupy"
    device_type = "cuda"
    gpu_priority = 0

    def __init__(self):
        self._scalars: dict = {}
        self._multi = None

    # --- availability and devices ---------------------------------------------------
    def unavailable_reason(self):
        return _cupy.probe()[2]

    @property
    def multi_device(self) -> bool:
        """More than one GPU: kernels then enter their inputs' device context."""
        if self._multi is None:
            self._multi = _cupy.probe()[1] > 1
        return self._multi

    def list_devices(self):
        cp, n, reason = _cupy.probe()
        if reason:
            return []
        out = []
        for i in range(n):
            out.append({"index": i, "is_gpu": True, "description": _describe(cp, i),
                        "handle": cp.cuda.Device(i)})
        return out

    def info_notes(self):
        """Lines ``python -m tapeflow info`` prints under this backend: the convolution
        path (cuDNN or im2col, and why) and the float32 precision of cuBLAS."""
        cublas = precision.applied["cupy"] or f"{precision.label()} (applied when the " \
                                              "kernel table is built)"
        return [cudnn_conv.describe(), f"matmul (cuBLAS through CuPy): {cublas}"]

    # --- data movement ----------------------------------------------------------------
    def to_host(self, array, device):
        cp = _cupy.cupy()
        if type(array) is BF16Array:
            return array.get()
        if isinstance(array, cp.ndarray):
            return array.get()          # waits for the work queued before it
        return np.asarray(array)

    def from_host(self, array, device):
        cp = _cupy.cupy()
        if getattr(array, "dtype", None) == BF16:     # CuPy has no bfloat16: its bits
            return BF16Array(self.from_host(np.asarray(array).view(np.uint16), device))
        try:
            if getattr(array, "ndim", 1) == 0:
                return self._scalar(cp, array, device)
            if self.multi_device:
                with device.handle:
                    return cp.asarray(array)
            return cp.asarray(array)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise _oom(e, device, f"copying {_nbytes(array)} bytes from the host") from None

    def from_dlpack(self, obj, device):
        cp = _cupy.cupy()
        if self.multi_device:
            with device.handle:
                return cp.from_dlpack(obj)
        return cp.from_dlpack(obj)              # zero-copy (the producer's stream is synced)

    def _scalar(self, cp, array, device):
        a = np.asarray(array)
        key = (device.index, a.dtype, a.tobytes())
        hit = self._scalars.get(key)
        if hit is not None:
            return hit
        if self.multi_device:
            with device.handle:
                out = cp.asarray(a)
        else:
            out = cp.asarray(a)
        if len(self._scalars) >= _SCALAR_CACHE_LIMIT:
            self._scalars.clear()
        self._scalars[key] = out
        return out

    def copy_from(self, array, src, dst):
        cp = _cupy.cupy()
        if type(array) is BF16Array and src.backend is self:
            return array if src is dst else BF16Array(self.copy_from(array.bits, src, dst))
        try:
            if src.backend is self:
                if src is dst:
                    return array
                a = cp.ascontiguousarray(array) if not array.flags.c_contiguous else array
                with dst.handle:
                    out = cp.empty(a.shape, dtype=a.dtype)
                    if a.nbytes:
                        out.data.copy_from_device(a.data, a.nbytes)   # peer copy (UVA)
                return out
            return self.from_host(np.asarray(src.backend.to_host(array, src)), dst)
        except cp.cuda.memory.OutOfMemoryError as e:
            raise _oom(e, dst, f"copying {_nbytes(array)} bytes from {src}") from None

    # --- elementwise fusion (tapeflow.tracing.graph_fusion) ---------------------------
    def fusible_op(self, op_name, in_dtypes, attrs):
        """Whether :meth:`fuse_elementwise` can take this op (see :mod:`.fusion`)."""
        from .fusion import fusible_op
        return fusible_op(op_name, in_dtypes, attrs)

    def fuse_elementwise(self, spec):
        """One ``cupy.ElementwiseKernel`` for a group of elementwise ops (:mod:`.fusion`)."""
        from .fusion import fuse_elementwise
        return fuse_elementwise(spec, self.multi_device)

    # --- CUDA graphs (tapeflow.tracing.capture; experimental) -------------------------
    def graph_capture(self, device):
        """A :class:`.cuda_graphs.CudaGraphCapturer` for ``device`` (a new one per traced
        signature: each owns its stream and memory pool)."""
        return CudaGraphCapturer(device)

    # --- synchronisation and memory ---------------------------------------------------
    def synchronize(self, device):
        device.handle.synchronize()

    def memory_info(self, device):
        """Bytes in use by live tensors (``current``), held by CuPy's pool
        (``pool_total``), and the device's ``free`` / ``total`` memory."""
        cp = _cupy.cupy()
        pool = cp.get_default_memory_pool()
        with device.handle:
            used = pool.used_bytes()
            held = pool.total_bytes()
            free, total = cp.cuda.runtime.memGetInfo()
            limit = pool.get_limit()
        return {"current": int(used), "pool_total": int(held), "free": int(free),
                "total": int(total), "pool_limit": int(limit) or None}

    def free_cached_memory(self, device=None):
        """Give the pool's unused blocks back to the driver (``memory_info()['pool_total']``
        drops to ``current``)."""
        cp = _cupy.cupy()
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
        self._scalars.clear()


def _describe(cp, i):
    try:
        props = cp.cuda.runtime.getDeviceProperties(i)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        gib = props["totalGlobalMem"] / 2**30
        cc = f"{props['major']}.{props['minor']}"
        return f"{name}, {gib:.1f} GiB, compute capability {cc}, CuPy {cp.__version__}"
    except Exception as e:  # a description must never make the device unusable
        return f"CUDA device {i} (CuPy {cp.__version__}; properties unavailable: {e})"


def _nbytes(array):
    try:
        return f"{int(array.nbytes):,}"
    except Exception:
        return "?"


def _oom(e, device, what):
    return ResourceExhaustedError(
        f"Out of memory on {device} {what}: {e}. Free tensors you no longer need (del them) "
        "or use smaller batches.", device=device)


#: the one instance the plugin registers
BACKEND = CupyBackend()
