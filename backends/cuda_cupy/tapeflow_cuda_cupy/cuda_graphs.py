"""CUDA graph capture for ``tf.function`` (``CupyBackend.graph_capture``): the capturer
:mod:`tapeflow.tracing.capture` drives. EXPERIMENTAL: written against CuPy's API
(``cupy.cuda.Stream.begin_capture`` / ``end_capture`` -> ``cupy.cuda.Graph``,
``Graph.launch``). Its first GPU run (H100, CuPy 14.2, docs/gpu-runs/2026-11-26-h100)
captured nothing with a MatMul (CuPy's cuBLAS refusal, see :mod:`.capture_gemm`); the
tests run it against the NumPy stand-in in tests/backends/fake_cupy, which checks the
calls (and refuses cuBLAS under capture as CuPy does), not CUDA.

One capturer per traced signature, each with

* a dedicated stream (``Stream(non_blocking=True)``: capture cannot happen on the
  legacy default stream), on which the warm-up runs and the capture records; the
  warm-up waits for the current stream's work and the current stream waits for it
  (events);
* MatMul through :mod:`.capture_gemm` (a tapeflow GEMM kernel, not cuBLAS: CuPy
  raises ``NotImplementedError`` for any cuBLAS call on a capturing stream) during
  the warm-up and the capture, so both run the same kernels;
* a private ``cupy.cuda.MemoryPool``, the allocator (``using_allocator``) during the
  warm-up and the capture: CuPy's pool keeps free blocks per stream, so the warm-up's
  blocks, freed on the capture stream, are the ones the capture reuses, and the
  addresses the graph holds are never given to another tensor while it lives (the
  pool dies with the capturer).

Launches run on the current stream (a graph may be launched on any stream), so they
are ordered with the eager work around them, and so are the static input copies
before them and the output copies after them.
"""

from __future__ import annotations

import numpy as np

from . import _cupy, capture_gemm
from .bf16 import BF16Array
from .philox import DeviceCounter

#: ops whose CUDA kernels read a device value on the host (a synchronisation, which
#: stream capture forbids): functions using them replay without a graph
HOST_SYNC_OPS = {
    "GatherV2": "its CUDA kernel checks the indices on the host (a synchronisation)",
    "SparseSoftmaxCrossEntropyWithLogits": ("its CUDA kernel checks the labels on the host "
                                            "(a synchronisation); one-hot labels with "
                                            "softmax_cross_entropy_with_logits capture"),
}


class CudaGraphCapturer:
    """Capture and replay on one CUDA device (see the module doc)."""

    #: random ops in a captured program read their Philox counter from a device word
    #: (:class:`.philox.DeviceCounter`) written before each launch
    supports_random = True

    def __init__(self, device):
        self.device = device
        self._stream = None
        self._pool = None

    def op_unsupported(self, op_name):
        return HOST_SYNC_OPS.get(op_name)

    def _setup(self, cp):
        if self._stream is None:
            with self.device.handle:
                self._stream = cp.cuda.Stream(non_blocking=True)
                self._pool = cp.cuda.MemoryPool()
        return self._stream

    # --- buffers (outside capture: the default pool) ---------------------------------
    def device_counter(self):
        cp = _cupy.cupy()
        with self.device.handle:
            return DeviceCounter(cp.zeros(1, dtype=np.uint64))

    def set_counter(self, counter, value):
        """Write ``value`` into ``counter``'s word, ordered on the current stream before
        the launch that follows (8 bytes from the host)."""
        cp = _cupy.cupy()
        host = np.array([int(value) & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
        with self.device.handle:
            counter.buf.set(host, stream=cp.cuda.get_current_stream())

    def empty(self, shape, dtype):
        cp = _cupy.cupy()
        with self.device.handle:
            return cp.empty(shape, dtype=dtype)

    def copy(self, a):
        if type(a) is BF16Array:
            return BF16Array(self.copy(a.bits))
        with self.device.handle:
            return a.copy()

    def copy_into(self, dst, src):
        if type(dst) is BF16Array:
            dst, src = dst.bits, src.bits
        _cupy.cupy().copyto(dst, src)       # an elementwise kernel: capturable

    # --- warm-up, capture, launch -----------------------------------------------------
    def warmup(self, fn):
        cp = _cupy.cupy()
        s = self._setup(cp)
        with self.device.handle:
            cur = cp.cuda.get_current_stream()
            s.wait_event(cur.record())
            with s, cp.cuda.using_allocator(self._pool.malloc), capture_gemm.graph_mode():
                res = fn()
            cur.wait_event(s.record())
        return res

    def capture(self, fn):
        cp = _cupy.cupy()
        s = self._setup(cp)
        with self.device.handle:
            with s, cp.cuda.using_allocator(self._pool.malloc), capture_gemm.graph_mode():
                s.begin_capture()
                try:
                    res = fn()
                except BaseException:
                    try:
                        s.end_capture()         # (an invalidated capture may raise too)
                    except Exception:
                        pass
                    raise
                graph = s.end_capture()
        return graph, res

    def launch(self, graph):
        cp = _cupy.cupy()
        graph.launch(cp.cuda.get_current_stream())
