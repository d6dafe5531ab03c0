"""Run this backend's raw CUDA kernels on the CPU, one OS thread per CUDA thread.

The row kernels (softmax, log-softmax, both cross-entropies), the Philox kernel and the
bodies of the fused ``ElementwiseKernel`` s (:func:`elementwise`) are
plain CUDA C; their logic (block reductions through warp shuffles and shared memory,
grid-stride loops, the Philox rounds) is what could be wrong without a compile error.
This module compiles the *same source text* with the host C++ compiler, with the CUDA
built-ins defined on top of ``std::thread`` and ``std::barrier``: ``__syncthreads()`` is
a block barrier, ``__shfl_xor_sync`` exchanges through per-warp slots between two
warp barriers, ``__shared__`` memory is static (blocks run one after another), and
``__umul64hi`` is a 128-bit multiply. Tests then compare the results with NumPy, on
machines without a GPU. It checks logic and arithmetic, not timing or the compiler.

Needs a C++20 compiler (``c++``/``g++``, or ``CXX``); :func:`available` says why not.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import k_cuda, philox

_PRELUDE = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

struct tf_dim3 { unsigned x = 1, y = 1, z = 1; };
static thread_local tf_dim3 threadIdx, blockIdx;
static tf_dim3 blockDim, gridDim;
static std::barrier<>* tf_block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> tf_warp_barriers;
static unsigned long long tf_slots[1024];

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static

static inline void __syncthreads() { tf_block_barrier->arrive_and_wait(); }

template <typename V> static V __shfl_xor_sync(unsigned, V v, int o) {
    static_assert(sizeof(V) <= sizeof(unsigned long long), "shuffle of a wide type");
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    std::memcpy(&tf_slots[threadIdx.x], &v, sizeof(V));
    tf_warp_barriers[warp]->arrive_and_wait();
    V r;
    std::memcpy(&r, &tf_slots[warp * 32 + (lane ^ (unsigned)o)], sizeof(V));
    tf_warp_barriers[warp]->arrive_and_wait();
    return r;
}

static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) {
    double d; std::memcpy(&d, &i, 8); return d;
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
using std::exp; using std::log; using std::fmax;

template <class F> static void tf_launch(unsigned grid, unsigned block, F f) {
    gridDim.x = grid;
    blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b) {
        std::barrier<> bar(block);
        tf_block_barrier = &bar;
        tf_warp_barriers.clear();
        for (unsigned w = 0; w < (block + 31) / 32; ++w)
            tf_warp_barriers.emplace_back(new std::barrier<>(32));
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < block; ++t)
            ts.emplace_back([&, t, b] { threadIdx.x = t; blockIdx.x = b; f(); });
        for (auto& t : ts) t.join();
    }
}
"""

_ROWS_API = r"""
extern "C" void emu_softmax(const T* x, T* y, long long rows, int n, int log_mode,
                            unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] { tapeflow_softmax_rows(x, y, rows, n, log_mode); });
}
extern "C" void emu_xent(const T* x, const T* lab, T* loss, long long rows, int n,
                         unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] { tapeflow_xent_rows(x, lab, loss, rows, n); });
}
extern "C" void emu_sparse_xent(const T* x, const L* labels, T* loss, long long rows, int n,
                                unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] { tapeflow_sparse_xent_rows(x, labels, loss, rows, n); });
}
"""

_PHILOX_API = r"""
extern "C" void emu_philox(unsigned long long* out, long long n, unsigned long long key,
                           unsigned long long ctr, unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] { tapeflow_philox4x64_10(out, n, key, ctr); });
}
extern "C" void emu_philox_dev(unsigned long long* out, long long n, unsigned long long key,
                               const unsigned long long* ctr, unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] { tapeflow_philox4x64_10_dev(out, n, key, ctr); });
}
"""


def _compiler():
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


@functools.lru_cache(maxsize=None)
def available():
    """None when kernels can be emulated here, else the reason."""
    cxx = _compiler()
    if cxx is None:
        return "no C++ compiler (c++, g++, clang++ or $CXX)"
    try:
        _build("philox", _PRELUDE + philox._SOURCE + _PHILOX_API)
    except Exception as e:
        return f"{cxx} cannot build the emulation (C++20 <barrier> needed): {e}"
    return None


@functools.lru_cache(maxsize=None)
def _build(tag, source):
    cxx = _compiler()
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    d = os.path.join(tempfile.gettempdir(), "tapeflow_cuda_emulate")
    os.makedirs(d, exist_ok=True)
    so = os.path.join(d, f"{tag}-{h}.so")
    if not os.path.exists(so):
        src = os.path.join(d, f"{tag}-{h}.cpp")
        with open(src, "w") as f:
            f.write(source)
        tmp = so + f".{os.getpid()}.tmp"
        r = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", src,
                            "-o", tmp], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        os.replace(tmp, so)
    return ctypes.CDLL(so)


def _rows_lib(dtype, label_dtype=np.int64):
    dt, lt = np.dtype(dtype), np.dtype(label_dtype)
    src = k_cuda._ROWS_TEMPLATE.format(L=k_cuda._LABEL_TYPES[lt], **k_cuda._ROW_TYPES[dt])
    return _build(f"rows-{dt.name}-{lt.name}", _PRELUDE + src + _ROWS_API)


def _ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def _geometry(rows, n, grid):
    threads = k_cuda._threads_for(n)
    return (int(min(rows, k_cuda._MAX_GRID)) if grid is None else grid), threads


def softmax_rows(x, log_mode=False, grid=None):
    """``tapeflow_softmax_rows`` over the last axis of ``x`` (float32/float64)."""
    x = np.ascontiguousarray(x)
    n = x.shape[-1]
    rows = x.size // n
    y = np.empty_like(x)
    g, t = _geometry(rows, n, grid)
    _rows_lib(x.dtype).emu_softmax(_ptr(x), _ptr(y), ctypes.c_longlong(rows), ctypes.c_int(n),
                                   ctypes.c_int(int(log_mode)), ctypes.c_uint(g),
                                   ctypes.c_uint(t))
    return y


def xent_rows(x, labels, grid=None):
    x, labels = np.ascontiguousarray(x), np.ascontiguousarray(labels, dtype=x.dtype)
    n = x.shape[-1]
    rows = x.size // n
    loss = np.empty(x.shape[:-1], x.dtype)
    g, t = _geometry(rows, n, grid)
    _rows_lib(x.dtype).emu_xent(_ptr(x), _ptr(labels), _ptr(loss), ctypes.c_longlong(rows),
                                ctypes.c_int(n), ctypes.c_uint(g), ctypes.c_uint(t))
    return loss


def sparse_xent_rows(x, labels, grid=None):
    x, labels = np.ascontiguousarray(x), np.ascontiguousarray(labels)
    n = x.shape[-1]
    rows = x.size // n
    loss = np.empty(x.shape[:-1], x.dtype)
    g, t = _geometry(rows, n, grid)
    _rows_lib(x.dtype, labels.dtype).emu_sparse_xent(
        _ptr(x), _ptr(labels), _ptr(loss), ctypes.c_longlong(rows), ctypes.c_int(n),
        ctypes.c_uint(g), ctypes.c_uint(t))
    return loss


def philox_raw64(n, key, counter, grid=None, threads=philox._THREADS, device_counter=False):
    """``tapeflow_philox4x64_10``: ``n`` words of the stream of ``(key, counter)``
    (``device_counter``: through ``tapeflow_philox4x64_10_dev``, the counter read from
    memory)."""
    out = np.zeros(n, np.uint64)
    nblocks = (n + 3) // 4
    g = grid if grid is not None else max(1, (nblocks + threads - 1) // threads)
    lib = _build("philox", _PRELUDE + philox._SOURCE + _PHILOX_API)
    k = ctypes.c_ulonglong(int(key) & (2**64 - 1))
    if device_counter:
        word = np.array([int(counter) & (2**64 - 1)], np.uint64)
        lib.emu_philox_dev(_ptr(out), ctypes.c_longlong(n), k, _ptr(word), ctypes.c_uint(g),
                           ctypes.c_uint(threads))
        return out
    lib.emu_philox(_ptr(out), ctypes.c_longlong(n), k,
                   ctypes.c_ulonglong(int(counter) & (2**64 - 1)), ctypes.c_uint(g),
                   ctypes.c_uint(threads))
    return out


#: CuPy's names of the scalar types an ElementwiseKernel's parameters may use
_EW_TYPES = {"float16": "_Float16", "float32": "float", "float64": "double",
             "int32": "int", "int64": "long long", "uint16": "unsigned short"}


def _ew_param(p):
    typ, name = p.split()
    return typ, name


def elementwise(name, *arrays):
    """Run the body of ``k_cuda.ELEMENTWISE[name]`` (the source CuPy compiles into an
    ``ElementwiseKernel``) over ``arrays`` (same shape; ``T`` from the first), compiled
    for the host with ``float16`` as ``_Float16``: one loop iteration per CUDA thread.
    Returns the output array."""
    in_params, out_params, body = k_cuda.ELEMENTWISE[name]
    ins = [_ew_param(p) for p in in_params.split(",")]
    (out_typ, out_name), = [_ew_param(p) for p in out_params.split(",")]
    arrays = [np.ascontiguousarray(a) for a in arrays]
    t = arrays[0].dtype
    n = arrays[0].size
    args, loads = [], []
    for i, (typ, pname) in enumerate(ins):
        ct = "T" if typ == "T" else _EW_TYPES[typ]
        args.append(f"const {ct}* in{i}")
        loads.append(f"{ct} {pname} = in{i}[i];")
    oct_ = "T" if out_typ == "T" else _EW_TYPES[out_typ]
    src = ("#include <cmath>\n#include <cstdint>\ntypedef _Float16 float16;\n"
           f"typedef {_EW_TYPES[t.name]} T;\nusing std::fmod; using std::floor; "
           "using std::copysign; using std::exp; using std::log1p; using std::sqrt; "
           "using std::expm1; using std::fabs;\n" + k_cuda.ELEMENTWISE_PREAMBLE
           + f'extern "C" void emu_ew({", ".join(args)}, {oct_}* out, long long n) {{\n'
           f"  for (long long i = 0; i < n; ++i) {{ {' '.join(loads)} {oct_} {out_name}; "
           f"{{ {body}; }} out[i] = {out_name}; }}\n}}\n")
    lib = _build(f"ew-{name}-{t.name}", src)
    out = np.empty(arrays[0].shape, t if out_typ == "T" else np.dtype(out_typ))
    lib.emu_ew(*[_ptr(a) for a in arrays], _ptr(out), ctypes.c_longlong(n))
    return out


_GEMM_API = r"""
extern "C" void emu_gemm(const T* a, const T* b, T* c, int m, int n, int k, int tm, int tn,
                         long long sab, long long sam, long long sak, long long sbb,
                         long long sbk, long long sbn, unsigned grid, unsigned block) {
    tf_launch(grid, block, [&] {
        KERNEL(a, b, c, m, n, k, tm, tn, sab, sam, sak, sbb, sbk, sbn);
    });
}
"""


def gemm_launch(name, grid, block, args):
    """Launch ``capture_gemm``'s kernel ``name`` (``tapeflow_gemm_<f32|f64>_r<R>``) with
    CuPy ``RawKernel`` arguments ``args`` on host arrays (strided views allowed: the
    kernel takes element strides)."""
    from . import capture_gemm
    a, b, c, *scalars = args
    tag, regs = name.split("_")[2], int(name.split("_r")[-1])
    dt = {"f32": np.float32, "f64": np.float64}[tag]
    src, kname = capture_gemm.source(dt, regs)
    lib = _build(kname, _PRELUDE + src + f"#define KERNEL {kname}\n" + _GEMM_API)
    m, n, k, tm, tn, sab, sam, sak, sbb, sbk, sbn = (int(v) for v in scalars)
    assert a.dtype == dt and b.dtype == dt and c.dtype == dt and c.flags.c_contiguous
    lib.emu_gemm(_ptr(a), _ptr(b), _ptr(c), ctypes.c_int(m), ctypes.c_int(n),
                 ctypes.c_int(k), ctypes.c_int(tm), ctypes.c_int(tn),
                 *(ctypes.c_longlong(v) for v in (sab, sam, sak, sbb, sbk, sbn)),
                 ctypes.c_uint(int(grid)), ctypes.c_uint(int(block)))
