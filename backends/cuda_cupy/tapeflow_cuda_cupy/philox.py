"""Philox4x64-10 on the GPU, bit for bit NumPy's ``numpy.random.Philox``.

tapeflow's random ops (``tapeflow.random``) draw the stream of ``(key, counter)``:
the 64-bit outputs of ``Philox(key=[key, 0], counter=[0, counter, 0, 0])``. NumPy
increments the 256-bit counter *before* each block, so block ``j`` (outputs
``4j .. 4j+3``) is ``philox4x64_10(ctr=[j + 1, counter, 0, 0], key=[key, 0])``.
Each GPU thread computes one block; nothing is copied from the host.

:func:`raw64` is what the shared random kernels (``tapeflow_cpu_numpy.k_random``)
call ``_raw64``; the CUDA backend runs their transforms on these words, so a seed
gives the same numbers on ``cuda:0`` as on ``cpu:0`` (uniforms and integers exactly,
normals up to the last-bit rounding of CUDA's ``log``/``cos``/``sin``).

``TAPEFLOW_CUDA_PHILOX=host`` generates the words with NumPy on the host instead and
copies them (8 bytes a word over PCIe, plus NumPy's ~1 ns a word): the same numbers,
slower; a fallback if the kernel cannot be compiled.
"""

from __future__ import annotations

import functools
import os

import numpy as np

_SOURCE = r"""
__device__ __forceinline__ void tapeflow_philox_blocks(
        unsigned long long* __restrict__ out, const long long n,
        const unsigned long long key0, const unsigned long long ctr1) {
    const long long nblocks = (n + 3) / 4;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < nblocks;
         j += (long long)gridDim.x * blockDim.x) {
        unsigned long long c0 = (unsigned long long)j + 1ULL, c1 = ctr1, c2 = 0ULL, c3 = 0ULL;
        unsigned long long k0 = key0, k1 = 0ULL;
        #pragma unroll
        for (int r = 0; r < 10; ++r) {
            if (r > 0) {
                k0 += 0x9E3779B97F4A7C15ULL;
                k1 += 0xBB67AE8584CAA73BULL;
            }
            const unsigned long long m0 = 0xD2E7470EE14C6C93ULL, m1 = 0xCA5A826395121157ULL;
            const unsigned long long hi0 = __umul64hi(m0, c0), lo0 = m0 * c0;
            const unsigned long long hi1 = __umul64hi(m1, c2), lo1 = m1 * c2;
            c0 = hi1 ^ c1 ^ k0;
            c1 = lo1;
            c2 = hi0 ^ c3 ^ k1;
            c3 = lo0;
        }
        const long long base = 4 * j;
        if (base + 3 < n) {
            out[base] = c0; out[base + 1] = c1; out[base + 2] = c2; out[base + 3] = c3;
        } else {
            out[base] = c0;
            if (base + 1 < n) out[base + 1] = c1;
            if (base + 2 < n) out[base + 2] = c2;
        }
    }
}

extern "C" __global__ void tapeflow_philox4x64_10(
        unsigned long long* __restrict__ out, const long long n,
        const unsigned long long key0, const unsigned long long ctr1) {
    tapeflow_philox_blocks(out, n, key0, ctr1);
}

// the counter read from device memory: a captured CUDA graph draws the counter written
// into that word before each launch (tapeflow.tracing.capture)
extern "C" __global__ void tapeflow_philox4x64_10_dev(
        unsigned long long* __restrict__ out, const long long n,
        const unsigned long long key0, const unsigned long long* __restrict__ ctr) {
    tapeflow_philox_blocks(out, n, key0, ctr[0]);
}
"""

_THREADS = 256
_M64 = (1 << 64) - 1


class DeviceCounter:
    """A Philox counter held on the device (``buf``: a 1-element uint64 CuPy array).
    The random kernels accept it as ``counter`` and the Philox kernel reads it there, so
    a CUDA graph that captured them draws, at each launch, the counter written into the
    buffer before it (``CudaGraphCapturer.set_counter``). ``int()`` reads it back (a
    synchronisation: the host fallback only)."""

    __slots__ = ("buf",)

    def __init__(self, buf):
        self.buf = buf

    def __index__(self):
        return int(self.buf.get()[0])

    __int__ = __index__

    def __repr__(self):
        return "<Philox counter on the device>"


class DeviceRaw64:
    """``raw64(n, key, counter) -> cupy uint64 array`` on the current device (an instance
    is the function). After the kernel failed once (NVRTC missing or broken) the words
    come from ``host_raw64`` (``state["failed"]`` holds why)."""

    def __init__(self, cp, host_raw64):
        self.cp, self.host_raw64 = cp, host_raw64
        self.kernel = cp.RawKernel(_SOURCE, "tapeflow_philox4x64_10")
        self.kernel_dev = cp.RawKernel(_SOURCE, "tapeflow_philox4x64_10_dev")
        self.state = {"failed": None}
        self.sm_count = {}

    def __call__(self, n, key, counter):
        """The first ``n`` words of the stream of ``(key, counter)`` (a device counter:
        the on-device variant of the kernel)."""
        cp = self.cp
        n = int(n)
        out = cp.empty(n, dtype=np.uint64)
        if n == 0:
            return out
        on_device = type(counter) is DeviceCounter
        if self.state["failed"] is not None:
            return on_host(cp, self.host_raw64, n, key, int(counter))
        nblocks = (n + 3) // 4
        dev = cp.cuda.runtime.getDevice()
        cap = self.sm_count.get(dev)
        if cap is None:
            cap = self.sm_count[dev] = 32 * cp.cuda.Device(dev).attributes["MultiProcessorCount"]
        grid = min((nblocks + _THREADS - 1) // _THREADS, cap)
        try:
            if on_device:
                self.kernel_dev((grid,), (_THREADS,),
                                (out, np.int64(n), np.uint64(int(key) & _M64), counter.buf))
            else:
                self.kernel((grid,), (_THREADS,), (out, np.int64(n), np.uint64(int(key) & _M64),
                                                   np.uint64(int(counter) & _M64)))
        except Exception as e:   # NVRTC missing or broken: stay correct, on the host
            if self.host_raw64 is None:
                raise
            self.state["failed"] = e
            return on_host(cp, self.host_raw64, n, key, int(counter))
        return out


def on_host(cp, host_raw64, n, key, counter):
    """The words of ``host_raw64`` (NumPy's Philox) copied to the current device."""
    return cp.asarray(host_raw64(n, key, counter))


def make_raw64(cp, host_raw64):
    """``raw64(n, key, counter) -> cupy uint64 array`` on the current device: a
    :class:`DeviceRaw64`.

    ``host_raw64`` is the CPU backend's NumPy generator, used when
    ``TAPEFLOW_CUDA_PHILOX=host`` is set or the kernel fails to compile.
    """
    mode = os.environ.get("TAPEFLOW_CUDA_PHILOX", "device").lower()
    if mode == "host" and host_raw64 is not None:
        return functools.partial(on_host, cp, host_raw64)
    return DeviceRaw64(cp, host_raw64)


def reference_raw64(n, key, counter):
    """Pure-Python Philox4x64-10 (the specification the kernel implements); slow,
    for tests."""
    out = []
    j = 0
    while len(out) < n:
        c0, c1, c2, c3 = j + 1, int(counter) & _M64, 0, 0
        k0, k1 = int(key) & _M64, 0
        for r in range(10):
            if r:
                k0 = (k0 + 0x9E3779B97F4A7C15) & _M64
                k1 = (k1 + 0xBB67AE8584CAA73B) & _M64
            p0 = 0xD2E7470EE14C6C93 * c0
            p1 = 0xCA5A826395121157 * c2
            c0, c1, c2, c3 = (p1 >> 64) ^ c1 ^ k0, p1 & _M64, (p0 >> 64) ^ c3 ^ k1, p0 & _M64
        out += [c0, c1, c2, c3]
        j += 1
    return np.array(out[:n], dtype=np.uint64)


# --- TensorFlow 2's Philox4x32-10 (the stateless ops, tf.random.Generator) -------------------
#
# The words the shared stateless kernels (``tapeflow.kernels.random.RandomKernels``)
# transform: block ``j`` of a state ``(counter low, counter high, key)`` (int64 [3]) is
# ``philox4x32_10(counter + blocks[j], key)``, four uint32 words in TensorFlow's order.
# One thread per (state, block). Written against CuPy's RawKernel API; not run in this
# project's CI (no GPU there): ``RandomKernels.block_words`` falls back to its CuPy-array version of
# the same rounds when this kernel cannot be compiled or launched.

PHILOX4X32_SOURCE = r"""
extern "C" __global__ void tapeflow_philox4x32_10(
        const long long* __restrict__ st, const unsigned long long* __restrict__ blocks,
        unsigned int* __restrict__ out, const long long nb, const long long total) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long s = i / nb, j = i % nb;
        const unsigned long long lo0 = (unsigned long long)st[3 * s];
        const unsigned long long lo = lo0 + blocks[j];
        const unsigned long long hi = (unsigned long long)st[3 * s + 1] + (lo < lo0 ? 1ULL : 0ULL);
        const unsigned long long key = (unsigned long long)st[3 * s + 2];
        unsigned int c0 = (unsigned int)lo, c1 = (unsigned int)(lo >> 32);
        unsigned int c2 = (unsigned int)hi, c3 = (unsigned int)(hi >> 32);
        unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
        #pragma unroll
        for (int r = 0; r < 10; ++r) {
            if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
            const unsigned int hi0 = __umulhi(0xD2511F53u, c0), lw0 = 0xD2511F53u * c0;
            const unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lw1 = 0xCD9E8D57u * c2;
            const unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
            c0 = n0; c1 = lw1; c2 = n2; c3 = lw0;
        }
        out[4 * i] = c0; out[4 * i + 1] = c1; out[4 * i + 2] = c2; out[4 * i + 3] = c3;
    }
}
"""


#: CuPy's errors of a kernel that cannot be built or loaded here (by name: they live in
#: modules that vary with CuPy's version): NVRTC's compile errors, NVRTC missing or
#: broken, a module the driver refuses (no binary or PTX for this GPU)
_KERNEL_FAILURES = frozenset({"CompileException", "NVRTCError", "CUDADriverError",
                              "ImportError", "OSError"})


def kernel_failed(exc):
    """Whether ``exc`` (raised by :class:`Philox32Words`) says the kernel itself cannot be
    compiled or launched on this machine, so the shared kernels should compute the words
    with array ops from now on. An out-of-memory error (CuPy's ``OutOfMemoryError`` is a
    ``MemoryError``; a CUDA error naming OUT_OF_MEMORY) and any other error are not: they
    are raised and the kernel is kept (they may pass).

    >>> kernel_failed(MemoryError("out of memory allocating 8 bytes"))
    False
    >>> kernel_failed(type("CompileException", (Exception,), {})("nvrtc: error"))
    True
    """
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out_of_memory" in text or "out of memory" in text:
        return False
    names = {c.__name__ for c in type(exc).__mro__}
    return bool(names & _KERNEL_FAILURES) or (isinstance(exc, RuntimeError) and
                                              "nvrtc" in text)


class Philox32Words:
    """``words(state, blocks)`` on the current CUDA device: the Philox4x32-10 words of
    counter blocks ``blocks`` (uint64 offsets, shape ``(nb,)``) of each state of
    ``state`` (int64 ``[..., 3]``), a uint64 CuPy array ``state.shape[:-1] + (nb, 4)``
    (the ``philox32`` service of the shared kernels; its :meth:`kernel_failed` tells them
    which errors mean the kernel cannot run here)."""

    kernel_failed = staticmethod(kernel_failed)

    def __init__(self, cp):
        self.cp = cp
        self.kernel = cp.RawKernel(PHILOX4X32_SOURCE, "tapeflow_philox4x32_10")

    def __call__(self, state, blocks):
        cp = self.cp
        st = cp.ascontiguousarray(cp.asarray(state).astype(cp.int64))
        lead = tuple(st.shape[:-1])
        st2 = st.reshape(-1, 3)
        b = cp.ascontiguousarray(cp.asarray(blocks).astype(cp.uint64).reshape(-1))
        nb = int(b.size)
        total = int(st2.shape[0]) * nb
        out = cp.empty(total * 4, dtype=cp.uint32)
        if total:
            grid = min((total + _THREADS - 1) // _THREADS, 65535)
            self.kernel((grid,), (_THREADS,), (st2, b, out, np.int64(nb), np.int64(total)))
        return out.reshape(lead + (nb, 4)).astype(cp.uint64)


def make_philox32(cp):
    """A :class:`Philox32Words` for the ``philox32`` service, or None when CuPy cannot
    make the kernel (the shared kernels then compute the rounds with CuPy arrays)."""
    try:
        return Philox32Words(cp)
    except Exception:
        return None
