"""The OpenCL :class:`~tapeflow.plugins.Backend`: devices ``opencl:N``.

Devices are numbered across every platform in PyOpenCL's order (platform, then
device), counting only those that pass :func:`.runtime.probe` (a driver that cannot
compile is left out, with its reason in ``python -m tapeflow info``). ``PYOPENCL_CTX``
(PyOpenCL's own variable: ``"0"`` = platform 0, ``"0:1"`` = device 1 of platform 0,
``"intel"`` = the platform whose name contains it) restricts the list when set. OpenCL GPUs are also
``gpu:N`` (after CUDA devices); a CPU device such as PoCL is ``opencl:N`` only.

Native arrays are ``pyopencl.array.Array`` (see :mod:`.runtime`); each device has
one in-order queue, so kernels run in the order they were issued and ``to_host``
(``.numpy()``, printing, ``bool()``) waits for the work queued before it.

In a ``fork()``ed child of a process that used OpenCL every method that would touch
the driver raises FailedPreconditionError instead of hanging (see :mod:`.runtime`).
"""

from __future__ import annotations

import os

import numpy as np

from tapeflow.errors import FailedPreconditionError, ResourceExhaustedError
from tapeflow.plugins import Backend

from . import runtime as rt


class OpenCLBackend(Backend):
    """PyOpenCL on any OpenCL device."""

    name = "opencl"
    device_type = "opencl"
    gpu_priority = 10

    def __init__(self):
        self._probe = None

    # --- availability and devices ---------------------------------------------------
    def _enumerate(self):
        """``(handles, reason or None, skipped)``, computed once: the :class:`.CLDevice`
        of every device that opened and passed :func:`.runtime.probe`, numbered
        ``opencl:0..`` without gaps; why the backend has no device (or None); and
        ``[(description, reason)]`` for the devices left out."""
        if self._probe is not None:
            return self._probe
        try:
            rt.cl()
        except ImportError as e:
            self._probe = ([], f"PyOpenCL is not installed ({e}); "
                               "pip install 'tapeflow-opencl[pocl]'", [])
            return self._probe
        try:
            platforms = rt.platforms()
        except FailedPreconditionError:
            raise                # in a fork()ed child: say so, do not call it "no platform"
        except Exception as e:   # no ICD loader / no platform
            self._probe = ([], f"no OpenCL platform found ({type(e).__name__}: {e}); install "
                               "a driver, or one for the CPU without root: pip install "
                               "'tapeflow-opencl[intel]' (or [pocl])", [])
            return self._probe
        found = []
        for p in platforms:
            try:
                found += [(p, d) for d in p.get_devices()]
            except Exception:    # a platform without devices
                continue
        sel = os.environ.get("PYOPENCL_CTX", "").strip()
        if sel:
            found = _select(platforms, found, sel)
        handles, skipped = [], []
        for p, d in found:
            what = f"{d.name.strip()} ({' '.join(p.version.split()[:4])})"
            try:
                h = rt.CLDevice(len(handles), d, p)
            except Exception as e:   # a device we cannot open is skipped, not fatal
                skipped.append((what, f"cannot be opened: {type(e).__name__}: {e}"))
                continue
            why = rt.probe(h)
            if why is not None:
                rt.forget(h)
                skipped.append((what, why))
                continue
            handles.append(h)
        reason = None
        if not handles:
            if skipped:
                reason = "no usable OpenCL device: " + "; ".join(
                    f"{w}: {r}" for w, r in skipped) + ". " + DRIVER_FIX
            else:
                reason = "no OpenCL device found" + (
                    f" (PYOPENCL_CTX={sel!r} selects none)" if sel else
                    " on any platform: install a driver, or one for the CPU without root: "
                    "pip install 'tapeflow-opencl[intel]' (or [pocl])")
        self._probe = (handles, reason, skipped)
        return self._probe

    def unavailable_reason(self):
        return self._enumerate()[1]

    def list_devices(self):
        return [{"index": h.index, "is_gpu": h.is_gpu, "description": h.describe(),
                 "handle": h} for h in self._enumerate()[0]]

    def info_notes(self):
        """A line per OpenCL device left out (it could not open, or failed the probe),
        with the reason and the fix; ``python -m tapeflow info`` prints them."""
        handles, _, skipped = self._enumerate()
        if not handles:
            return []             # (the unavailable reason says it all)
        return [f"left out: {w}: {r}. {DRIVER_FIX}" for w, r in skipped]

    # --- data movement ----------------------------------------------------------------
    def to_host(self, array, device):
        if isinstance(array, np.ndarray):
            return array
        return rt.download(array)

    def from_host(self, array, device):
        rt.check_not_forked(device.name)   # (0-d values may come from a cache)
        h = device.handle
        a = np.asarray(array)
        h.check_dtype(a.dtype, "copying a tensor to it")
        try:
            if a.ndim == 0:
                return rt.scalar(h, a, a.dtype)
            return rt.upload(h, a)
        except rt.cl().MemoryError as e:
            raise _oom(e, device, f"copying {a.nbytes:,} bytes from the host") from None

    def dtype_unsupported(self, device, dtype):
        try:
            device.handle.check_dtype(getattr(dtype, "np", dtype))
        except Exception as e:
            return str(e)
        return None

    def copy_from(self, array, src, dst):
        if src is dst:
            return array      # tensors are immutable: sharing the buffer is safe
        host = np.asarray(src.backend.to_host(array, src))
        return self.from_host(host, dst)

    # --- elementwise fusion (tapeflow.tracing.graph_fusion) ---------------------------
    def fusible_op(self, op_name, in_dtypes, attrs):
        """Whether :meth:`fuse_elementwise` can take this op (see :mod:`.fusion`)."""
        from .fusion import fusible_op
        return fusible_op(op_name, in_dtypes, attrs)

    def fuse_elementwise(self, spec):
        """One generated OpenCL kernel for a group of elementwise ops (:mod:`.fusion`)."""
        from .fusion import fuse_elementwise
        return fuse_elementwise(spec)

    # --- synchronisation and memory ---------------------------------------------------
    def synchronize(self, device):
        rt.check_not_forked(device.name)
        device.handle.queue.finish()

    def memory_info(self, device):
        """Bytes in use by live tensors (``current``), held by the memory pool
        (``pool_total``), the device's ``total`` global memory and the largest
        single buffer it allows (``max_alloc``)."""
        rt.check_not_forked(device.name)
        h = device.handle
        pool = h.pool
        cur = getattr(pool, "active_bytes", None)
        return {"current": int(cur) if cur is not None else None,
                "pool_total": int(pool.managed_bytes),
                "total": int(h.cl_device.global_mem_size),
                "max_alloc": int(h.cl_device.max_mem_alloc_size)}

    def free_cached_memory(self, device=None):
        """Give the pools' unused blocks back to the driver."""
        if rt.forked_from() is not None:
            return               # (a fork()ed child: the driver is unusable; keep them)
        for h in list(rt._BY_QUEUE.values()):
            if device is None or h is device.handle:
                h.pool.free_held()
                h.scalars.clear()


#: what to do about a driver that failed the probe
DRIVER_FIX = ("Fix: update that OpenCL driver (a PoCL built on an LLVM older than the "
              "processor fails so: Debian's pocl-opencl-icd >= 3.1 works), or install "
              "Intel's OpenCL CPU runtime, no root needed: pip install "
              "'tapeflow-opencl[intel]'")


def _select(platforms, found, sel):
    """PyOpenCL's ``PYOPENCL_CTX`` syntax: ``P`` or ``P:D``, several joined by ','; ``P`` is
    a platform index or, as in PyOpenCL, a case-insensitive part of its name (``intel``,
    ``portable``), ``D`` a device index."""
    keep = []
    for part in sel.split(","):
        bits = part.split(":")
        want = bits[0].strip()
        try:
            plats = [platforms[int(want)]]
        except IndexError:
            continue
        except ValueError:
            plats = [p for p in platforms if want and want.lower() in p.name.lower()]
        devs = [(p, d) for p, d in found if p in plats]
        if len(bits) > 1 and bits[1].strip():
            try:
                devs = [devs[int(bits[1])]]
            except (ValueError, IndexError):
                devs = []
        keep += [x for x in devs if x not in keep]
    return keep


def _oom(e, device, what):
    return ResourceExhaustedError(
        f"Out of memory on {device} {what}: {e}. Free tensors you no longer need (del them) "
        "or use smaller batches.", device=device)


#: the one instance the plugin registers
BACKEND = OpenCLBackend()
