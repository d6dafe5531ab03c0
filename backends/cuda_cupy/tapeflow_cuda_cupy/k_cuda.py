"""CUDA-specific kernels: where CuPy and NumPy differ, or where one launch beats several.

``build(ctx)`` returns ``{op name: fn}`` overriding the shared kernels: ``ctx`` is the
:class:`~tapeflow.plugins.BuildContext` of the CUDA table (:mod:`.kernels`), whose
service ``cp`` is CuPy and ``shared`` the shared kernel table built against CuPy. The
declared dtypes stay those of the CPU kernel.

* **Row kernels** (one block per row, one launch): ``Softmax``, ``LogSoftmax``,
  ``SoftmaxCrossEntropyWithLogits``, ``SparseSoftmaxCrossEntropyWithLogits`` along the
  last axis; float16 is computed in float32 as on the CPU. Other axes and empty
  inputs take the shared kernel.
* **Fused elementwise** (``cupy.ElementwiseKernel``): activation gradients, ``Elu``,
  ``LeakyRelu``, ``Sigmoid``, ``Rsqrt``, ``SquaredDifference``,
  ``SigmoidCrossEntropyWithLogits`` — one launch where the shared source makes two to
  five; ``L2Loss`` is one ``ReductionKernel``.
* **Checks that read data**: ``GatherV2`` and the sparse cross-entropy count
  out-of-range indices in one reduction (one device sync); when there are any, the
  shared kernel runs and raises the CPU's exact message.
* **cuSOLVER**: ``MatrixInverse`` / ``MatrixSolve`` / ``Cholesky`` run under
  ``cupyx.errstate(linalg="raise")`` so a singular (or, for Cholesky, not positive
  definite) matrix raises like NumPy's LAPACK: CuPy's default (``linalg="ignore"``)
  never reads cuSOLVER's ``devInfo`` and returns a NaN-filled factor instead.
* **NextAfter float16** (``nextafter_f16``): NumPy's ``npy_half_nextafter`` on the
  bits; CuPy's float16 ``nextafter`` gave NaN for ``nextafter(+-inf, finite)``
  (NumPy: the largest finite half) on CuPy 14.2. Equal arguments give ``y``, as C's
  ``nextafter`` and NumPy 2.5's float16 do (``nextafter(-0., 0.)`` is ``+0.``; NumPy
  2.4's float16 loop returned ``x``).
* **Atomics**: CUDA has no atomic add for int8/int16/uint8/uint16: ``ScatterNd`` and
  ``UnsortedSegmentSum`` accumulate those in int32 and cast back (the same wrap-around
  as NumPy's ``add.at``).
* **Random**: the shared transforms of ``tapeflow.kernels.random`` are fed by the
  on-device Philox of :mod:`.philox` (the context's ``raw64`` service, :mod:`.kernels`).
"""

from __future__ import annotations

import functools

import numpy as np

from tapeflow.plugins import KernelSpec

#: ops this module overrides (statically known, so coverage needs no CuPy)
OVERRIDES = (
    "Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
    "SparseSoftmaxCrossEntropyWithLogits", "ReluGrad", "Relu6Grad", "LeakyRelu",
    "LeakyReluGrad", "Elu", "EluGrad", "Sigmoid", "Rsqrt", "SquaredDifference",
    "SigmoidCrossEntropyWithLogits", "L2Loss", "GatherV2", "MatrixInverse", "MatrixSolve",
    "ScatterNd", "UnsortedSegmentSum", "FloorDiv", "FloorMod", "Cholesky", "NextAfter",
)

_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
_SMALL_INTS = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.uint8), np.dtype(np.uint16))

# --- row kernels ----------------------------------------------------------------------

def _warp_reduce(name, step):
    """A warp reduction of the row-kernel source (``step``: one shuffle step on ``v``
    with lane offset ``o``), in :data:`_ROWS_TEMPLATE`'s ``str.format`` escaping."""
    return (f"__device__ __forceinline__ T {name}(T v) {{{{\n"
            "    #pragma unroll\n"
            f"    for (int o = 16; o > 0; o >>= 1) {step};\n"
            "    return v;\n}}\n\n")


def _block_reduce(name, warp, fill):
    """A block reduction of the row-kernel source: ``warp`` within each warp, the warps'
    results through ``sh`` (``fill`` past the last warp), every thread gets the result."""
    return (f"__device__ __forceinline__ T {name}(T v, T* sh) {{{{\n"
            "    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;\n"
            f"    v = {warp}(v);\n"
            "    if (lane == 0) sh[wid] = v;\n"
            "    __syncthreads();\n"
            "    if (wid == 0) {{\n"
            f"        v = lane < nw ? sh[lane] : {fill};\n"
            f"        v = {warp}(v);\n"
            "        if (lane == 0) sh[0] = v;\n"
            "    }}\n"
            "    __syncthreads();\n"
            "    v = sh[0];\n"
            "    __syncthreads();\n"
            "    return v;\n}}\n\n")


_ROWS_TEMPLATE = (r"""
#define T {T}
#define L {L}
#define EXP {EXP}
#define LOG {LOG}
#define FMAX {FMAX}
#define NEG_INF ({NEG_INF})

""" + _warp_reduce("warp_max", "v = FMAX(v, __shfl_xor_sync(0xffffffffu, v, o))")
    + _warp_reduce("warp_sum", "v += __shfl_xor_sync(0xffffffffu, v, o)")
    + "// every thread of the block gets the result; blockDim.x is a multiple of 32\n"
    + _block_reduce("block_max", "warp_max", "NEG_INF")
    + _block_reduce("block_sum", "warp_sum", "(T)0") + r"""// max and sum(exp(x - max)) of one row
__device__ __forceinline__ void row_stats(const T* xr, const int n, T* sh, T& m, T& s) {{
    T mv = NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) mv = FMAX(mv, xr[i]);
    m = block_max(mv, sh);
    T sv = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sv += EXP(xr[i] - m);
    s = block_sum(sv, sh);
}}

extern "C" __global__ void tapeflow_softmax_rows(
        const T* __restrict__ x, T* __restrict__ y, const long long rows, const int n,
        const int log_mode) {{
    __shared__ T sh[32];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
        const T* xr = x + r * (long long)n;
        T* yr = y + r * (long long)n;
        T m, s;
        row_stats(xr, n, sh, m, s);
        if (log_mode) {{
            const T ls = LOG(s);
            for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] - m) - ls;
        }} else {{
            for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = EXP(xr[i] - m) / s;
        }}
    }}
}}

extern "C" __global__ void tapeflow_xent_rows(
        const T* __restrict__ x, const T* __restrict__ lab, T* __restrict__ loss,
        const long long rows, const int n) {{
    __shared__ T sh[32];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
        const T* xr = x + r * (long long)n;
        const T* lr = lab + r * (long long)n;
        T m, s;
        row_stats(xr, n, sh, m, s);
        const T ls = LOG(s);
        T acc = 0;
        for (int i = threadIdx.x; i < n; i += blockDim.x) acc += lr[i] * ((xr[i] - m) - ls);
        acc = block_sum(acc, sh);
        if (threadIdx.x == 0) loss[r] = -acc;
    }}
}}

extern "C" __global__ void tapeflow_sparse_xent_rows(
        const T* __restrict__ x, const L* __restrict__ labels, T* __restrict__ loss,
        const long long rows, const int n) {{
    __shared__ T sh[32];
    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {{
        const T* xr = x + r * (long long)n;
        T m, s;
        row_stats(xr, n, sh, m, s);
        if (threadIdx.x == 0) loss[r] = -((xr[labels[r]] - m) - LOG(s));
    }}
}}
""")

_ROW_TYPES = {
    _F32: dict(T="float", EXP="expf", LOG="logf", FMAX="fmaxf",
               NEG_INF="__int_as_float(0xff800000)"),
    _F64: dict(T="double", EXP="exp", LOG="log", FMAX="fmax",
               NEG_INF="__longlong_as_double(0xfff0000000000000LL)"),
}
_LABEL_TYPES = {np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}


def _threads_for(n):
    if n <= 64:
        return 32
    if n <= 256:
        return 64
    if n <= 2048:
        return 128
    if n <= 16384:
        return 256
    return 512


_MAX_GRID = 1 << 20

#: typedefs come first in CuPy's generated source (``typedef float T;``), then this
ELEMENTWISE_PREAMBLE = r"""
template<typename T> struct tapeflow_acc { typedef T type; };
template<> struct tapeflow_acc<float16> { typedef float type; };
"""

#: name -> (in_params, out_params, operation) of the fused ``cupy.ElementwiseKernel`` s;
#: ``A`` is the compute type (float for float16, else T)
ELEMENTWISE = {
    "relu_grad": ("T dy, T x", "T dx", "dx = dy * (x > (T)0 ? (T)1 : (T)0)"),
    "relu6_grad": ("T dy, T x", "T dx", "dx = dy * ((x > (T)0 && x < (T)6) ? (T)1 : (T)0)"),
    "leaky_relu": ("T x, float64 alpha", "T y", "y = x > (T)0 ? x : (T)(x * (T)alpha)"),
    "leaky_relu_grad": ("T dy, T x, float64 alpha", "T dx",
                        "dx = x > (T)0 ? dy : (T)(dy * (T)alpha)"),
    "elu": ("T x", "T y",
            "typedef tapeflow_acc<T>::type A; y = x > (T)0 ? x : (T)expm1((A)x)"),
    "elu_grad": ("T dy, T y", "T dx", "dx = y < (T)0 ? (T)(dy * (T)(y + (T)1)) : dy"),
    "sigmoid": ("T x", "T y",
                "typedef tapeflow_acc<T>::type A; A v = (A)x; "
                "if (v >= (A)0) { y = (T)((A)1 / ((A)1 + exp(-v))); } "
                "else { A e = exp(v); y = (T)(e / ((A)1 + e)); }"),
    "rsqrt": ("T x", "T y", "typedef tapeflow_acc<T>::type A; y = (T)((A)1 / sqrt((A)x))"),
    "squared_difference": ("T x, T y", "T z", "T d = x - y; z = d * d"),
    # NumPy's float floor division and modulo (npy_divmod), exactly: CuPy's own
    # floor_divide/remainder differ at infinities and signed zeros (0 // -1 is -0),
    # except where the array API's table differs from NumPy: one infinite and one finite
    # operand give a / b (inf // 3 is inf, -1 // inf is -0; NumPy: nan and -1), as on
    # cpu:0. float16 computes in float32, as NumPy does.
    "floordiv": ("T x, T y", "T z",
                 "typedef tapeflow_acc<T>::type A; A a = (A)x, b = (A)y; "
                 "bool fa = a - a == (A)0, fb = b - b == (A)0; "    # finite (not inf/nan)
                 "if (b == (A)0 || (fa != fb && a == a && b == b)) { z = (T)(a / b); } else { "
                 "A m = fmod(a, b); A d = (a - m) / b; "
                 "if (m != (A)0 && ((b < (A)0) != (m < (A)0))) d -= (A)1; "
                 "A f; if (d != (A)0) { f = floor(d); if (d - f > (A)0.5) f += (A)1; } "
                 "else { f = copysign((A)0, a / b); } z = (T)f; }"),
    "floormod": ("T x, T y", "T z",
                 "typedef tapeflow_acc<T>::type A; A a = (A)x, b = (A)y; A m = fmod(a, b); "
                 "if (b != (A)0) { if (m != (A)0) { if ((b < (A)0) != (m < (A)0)) m += b; } "
                 "else { m = copysign((A)0, b); } } z = (T)m;"),
    # NumPy's npy_half_nextafter on the float16 bits (uint16 views): CuPy's float16
    # nextafter gave NaN for nextafter(+-inf, finite) (NumPy: +-65504) on CuPy 14.2
    "nextafter_f16": ("uint16 x, uint16 y", "uint16 z",
                      "unsigned int a = x, b = y, r; "
                      "bool nan_a = (a & 0x7c00u) == 0x7c00u && (a & 0x03ffu) != 0u; "
                      "bool nan_b = (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0u; "
                      "if (nan_a || nan_b) { r = 0x7e00u; } "
                      "else if (a == b || ((a | b) & 0x7fffu) == 0u) { r = b; } "
                      "else if ((a & 0x7fffu) == 0u) { r = (b & 0x8000u) + 1u; } "
                      "else if ((a & 0x8000u) == 0u) { "
                      "r = ((short)a > (short)b) ? a - 1u : a + 1u; } "
                      "else { r = ((b & 0x8000u) == 0u || (a & 0x7fffu) > (b & 0x7fffu)) "
                      "? a - 1u : a + 1u; } "
                      "z = (unsigned short)r"),
    "sigmoid_xent": ("T x, T z", "T out",
                     "typedef tapeflow_acc<T>::type A; A xv = (A)x, zv = (A)z; "
                     "out = (T)((xv > (A)0 ? xv : (A)0) - xv * zv + log1p(exp(-fabs(xv))))"),
}

#: name -> (in_params, out_params, map, reduce, post_map, identity) of ``cupy.ReductionKernel`` s
REDUCTIONS = {
    "count_out_of_range": ("T i, int64 n", "int64 c", "(i < 0 || i >= n) ? 1 : 0", "a + b",
                           "c = a", "0"),
    "l2_loss": ("T x", "T y", "x * x", "a + b", "y = a / (T)2", "0"),
}


#: the shared kernels the overrides fall back to (``build`` fails without them)
_FALLBACKS = ("Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits",
              "SparseSoftmaxCrossEntropyWithLogits", "GatherV2", "FloorDiv", "FloorMod",
              "NextAfter")


def _bind(method, name, *args):
    """``method`` with ``args`` bound first, named ``name`` (a partial has no name)."""
    k = functools.partial(method, *args)
    k.__name__ = name
    k.__qualname__ = f"{method.__qualname__}[{name}]"
    return k


class CudaKernels:
    """The CUDA-specific kernels (see the module doc): one method per kernel. Holds
    CuPy (``cp``), the shared kernels they fall back to, the compiled fused kernels and
    the row-kernel modules (compiled on first use per dtype)."""

    def __init__(self, cp, shared):
        import cupyx                      # part of CuPy, on this backend only

        self.cp, self.cupyx = cp, cupyx
        self.shared = {name: shared[name] for name in _FALLBACKS}
        self.modules = {}
        self.count_out_of_range = cp.ReductionKernel(*REDUCTIONS["count_out_of_range"],
                                                     "tapeflow_count_out_of_range")
        self.ek = {name: cp.ElementwiseKernel(i, o, body, "tapeflow_" + name,
                                              preamble=ELEMENTWISE_PREAMBLE)
                   for name, (i, o, body) in ELEMENTWISE.items()}
        self.rk = {name: cp.ReductionKernel(i, o, m, r, post, ident, "tapeflow_" + name)
                   for name, (i, o, m, r, post, ident) in REDUCTIONS.items()}

    # --- helpers ----------------------------------------------------------------------
    def rows_module(self, dt, label_dt=np.dtype(np.int64)):
        """The compiled row kernels for ``dt`` and labels of ``label_dt``."""
        key = (dt, label_dt)
        mod = self.modules.get(key)
        if mod is None:
            src = _ROWS_TEMPLATE.format(L=_LABEL_TYPES[label_dt], **_ROW_TYPES[dt])
            mod = self.modules[key] = self.cp.RawModule(code=src)
        return mod

    @staticmethod
    def launch(kernel, rows, n, args):
        """Launch a row kernel: one block per row (grid capped), threads sized to ``n``."""
        threads = _threads_for(n)
        grid = int(min(rows, _MAX_GRID))
        kernel((grid,), (threads,), args)

    def as_rows(self, x):
        """Contiguous compute copy of x (float16 -> float32): (array, original dtype)."""
        dt = x.dtype
        if dt == _F16:
            return x.astype(_F32, order="C"), dt      # astype keeps strides by default
        return self.cp.ascontiguousarray(x), dt

    def any_out_of_range(self, indices, n):
        """Whether any of ``indices`` is outside ``[0, n)`` (one reduction, one sync)."""
        return indices.size != 0 and int(self.count_out_of_range(indices, np.int64(n))) != 0

    # --- softmax family ---------------------------------------------------------------
    def _softmax(self, x, axis, log_mode, fallback):
        """Softmax / LogSoftmax along the last axis in one row-kernel launch."""
        if x.ndim == 0 or axis != x.ndim - 1 or x.size == 0 or x.dtype not in (_F16, _F32, _F64):
            return fallback(x, axis=axis)
        xc, dt = self.as_rows(x)
        y = self.cp.empty(xc.shape, dtype=xc.dtype)
        n = xc.shape[-1]
        rows = xc.size // n
        k = self.rows_module(xc.dtype).get_function("tapeflow_softmax_rows")
        self.launch(k, rows, n, (xc, y, np.int64(rows), np.int32(n), np.int32(log_mode)))
        return y.astype(dt) if dt != xc.dtype else y

    def softmax(self, x, axis):
        """Softmax: one row kernel along the last axis, else the shared kernel."""
        return self._softmax(x, axis, 0, self.shared["Softmax"])

    def log_softmax(self, x, axis):
        """LogSoftmax: one row kernel along the last axis, else the shared kernel."""
        return self._softmax(x, axis, 1, self.shared["LogSoftmax"])

    def softmax_xent(self, logits, labels, axis):
        """SoftmaxCrossEntropyWithLogits: one row kernel along the last axis."""
        if (logits.ndim == 0 or axis != logits.ndim - 1 or logits.size == 0
                or labels.shape != logits.shape or labels.dtype != logits.dtype
                or logits.dtype not in (_F16, _F32, _F64)):
            return self.shared["SoftmaxCrossEntropyWithLogits"](logits, labels, axis=axis)
        cp = self.cp
        xc, dt = self.as_rows(logits)
        lc = (labels.astype(xc.dtype, order="C") if labels.dtype != xc.dtype
              else cp.ascontiguousarray(labels))
        n = xc.shape[-1]
        rows = xc.size // n
        loss = cp.empty(xc.shape[:-1], dtype=xc.dtype)
        k = self.rows_module(xc.dtype).get_function("tapeflow_xent_rows")
        self.launch(k, rows, n, (xc, lc, loss, np.int64(rows), np.int32(n)))
        return loss.astype(dt) if dt != xc.dtype else loss

    def sparse_xent(self, logits, labels):
        """SparseSoftmaxCrossEntropyWithLogits: one row kernel (bad labels: the shared
        kernel, which raises the CPU's message)."""
        if (logits.ndim == 0 or logits.size == 0 or labels.dtype not in _LABEL_TYPES
                or logits.dtype not in (_F16, _F32, _F64)
                or labels.shape != logits.shape[:-1]
                or self.any_out_of_range(labels, logits.shape[-1])):
            return self.shared["SparseSoftmaxCrossEntropyWithLogits"](logits, labels)
        cp = self.cp
        xc, dt = self.as_rows(logits)
        lc = cp.ascontiguousarray(labels)
        n = xc.shape[-1]
        rows = xc.size // n
        loss = cp.empty(xc.shape[:-1], dtype=xc.dtype)
        k = self.rows_module(xc.dtype, labels.dtype).get_function("tapeflow_sparse_xent_rows")
        self.launch(k, rows, n, (xc, lc, loss, np.int64(rows), np.int32(n)))
        return loss.astype(dt) if dt != xc.dtype else loss

    # --- gather -----------------------------------------------------------------------
    def gather(self, params, indices, axis, batch_dims):
        """GatherV2: ``cupy.take`` once one reduction found every index in range."""
        if batch_dims or indices.dtype.kind not in "iu" or params.ndim == 0 or \
                self.any_out_of_range(indices, params.shape[axis]):
            return self.shared["GatherV2"](params, indices, axis=axis, batch_dims=batch_dims)
        return self.cp.take(params, indices, axis=axis)

    # --- fused elementwise ------------------------------------------------------------
    def nextafter(self, x, y):
        """NextAfter: NumPy's float16 ``nextafter`` on the bits, else the shared kernel."""
        if x.dtype == _F16 and y.dtype == _F16:
            return self.ek["nextafter_f16"](x.view(np.uint16), y.view(np.uint16)).view(_F16)
        return self.shared["NextAfter"](x, y)

    def floordiv(self, x, y):
        """FloorDiv: NumPy's float floor division in one fused kernel."""
        if x.dtype not in (_F16, _F32, _F64) or y.dtype != x.dtype:
            # integers: CuPy agrees with NumPy (and the check)
            return self.shared["FloorDiv"](x, y)
        return self.ek["floordiv"](x, y)

    def floormod(self, x, y):
        """FloorMod: NumPy's float modulo in one fused kernel."""
        if x.dtype not in (_F16, _F32, _F64) or y.dtype != x.dtype:
            return self.shared["FloorMod"](x, y)
        return self.ek["floormod"](x, y)

    def fused(self, name, *arrays):
        """The fused elementwise kernel ``ELEMENTWISE[name]`` on ``arrays``."""
        return self.ek[name](*arrays)

    def leaky_relu(self, x, alpha):
        """LeakyRelu in one fused kernel."""
        return self.ek["leaky_relu"](x, float(alpha))

    def leaky_relu_grad(self, dy, x, alpha):
        """LeakyReluGrad in one fused kernel."""
        return self.ek["leaky_relu_grad"](dy, x, float(alpha))

    def l2_loss(self, x):
        """L2Loss: one reduction kernel (float16 summed in float32)."""
        l2_k = self.rk["l2_loss"]
        if x.dtype == _F16:
            return l2_k(x.astype(_F32)).astype(_F16)
        return l2_k(x)

    # --- linear algebra: raise on singular matrices, as LAPACK does on the CPU ---------
    def checked(self, fn, *arrays, **attrs):
        """``fn`` under ``cupyx.errstate(linalg="raise")`` (cuSOLVER's errors raised)."""
        with self.cupyx.errstate(linalg="raise"):
            return fn(*arrays, **attrs)

    def solve(self, solve, a, b, adjoint):
        """MatrixSolve with NumPy's broadcasting of the batch dimensions
        (:func:`solve_shapes`), under :meth:`checked`."""
        cp = self.cp
        with self.cupyx.errstate(linalg="raise"):
            sa, sb = solve_shapes(a.shape, b.shape)
            if sa != a.shape:
                a = cp.ascontiguousarray(cp.broadcast_to(a, sa))
            if sb != b.shape:
                b = cp.ascontiguousarray(cp.broadcast_to(b, sb))
            return solve(a, b, adjoint=adjoint)

    # --- scatter-adds: widen dtypes CUDA has no atomics for ----------------------------
    def widened(self, fn, index, *arrays, **attrs):
        """``fn`` with input ``index`` widened to int32 when CUDA has no atomic add for
        its dtype (int8/int16/uint8/uint16), the result cast back."""
        a = arrays[index]
        if a.dtype in _SMALL_INTS:
            arrays = list(arrays)
            arrays[index] = a.astype(np.int32)
            return fn(*arrays, **attrs).astype(a.dtype)
        return fn(*arrays, **attrs)


#: op name -> the ``ELEMENTWISE`` kernel it is, as it is (same arguments)
_FUSED = {"ReluGrad": "relu_grad", "Relu6Grad": "relu6_grad", "Elu": "elu",
          "EluGrad": "elu_grad", "Sigmoid": "sigmoid", "Rsqrt": "rsqrt",
          "SquaredDifference": "squared_difference",
          "SigmoidCrossEntropyWithLogits": "sigmoid_xent"}


def build(ctx):
    """The CUDA-specific kernels (see the module doc): ``{op name: fn}``, built with
    ``ctx.cp`` over ``ctx.shared`` (``{op: KernelSpec or fn}``)."""
    shared = {op: KernelSpec.of(s).fn for op, s in ctx.shared.items()}
    k = CudaKernels(ctx.cp, shared)
    out = {
        "Softmax": k.softmax,
        "LogSoftmax": k.log_softmax,
        "SoftmaxCrossEntropyWithLogits": k.softmax_xent,
        "SparseSoftmaxCrossEntropyWithLogits": k.sparse_xent,
        "GatherV2": k.gather,
        "LeakyRelu": k.leaky_relu,
        "LeakyReluGrad": k.leaky_relu_grad,
        "L2Loss": k.l2_loss,
        "FloorDiv": k.floordiv,
        "FloorMod": k.floormod,
        "NextAfter": k.nextafter,
    }
    out.update({op: _bind(k.fused, name, name) for op, name in _FUSED.items()})
    for op in ("MatrixInverse", "Cholesky"):
        if op in shared:
            out[op] = _bind(k.checked, getattr(shared[op], "__name__", "linalg"), shared[op])
    if "MatrixSolve" in shared:
        out["MatrixSolve"] = _bind(k.solve, "solve", shared["MatrixSolve"])
    for op, index in (("ScatterNd", 1), ("UnsortedSegmentSum", 0)):
        if op in shared:
            out[op] = _bind(k.widened, getattr(shared[op], "__name__", "scatter"), shared[op],
                            index)
    # an override only replaces an op the shared table has (same declaration)
    return {name: fn for name, fn in out.items() if name in shared}


def solve_shapes(a_shape, b_shape):
    """The shapes ``a`` (..., M, M) and ``b`` (..., M, K) of ``solve(a, b)`` are
    broadcast to before cuSOLVER, which (in CuPy) wants equal batch dimensions; NumPy
    and the CPU broadcast them (the op's signature has already checked M).

    >>> solve_shapes((2, 3, 3), (3, 4))
    ((2, 3, 3), (2, 3, 4))
    >>> solve_shapes((3, 3), (5, 3, 1))
    ((5, 3, 3), (5, 3, 1))
    """
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    return batch + a_shape[-2:], batch + b_shape[-2:]

