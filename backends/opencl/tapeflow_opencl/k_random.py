"""Random kernels (:class:`RandomKernels`): Philox4x64-10 on the device, the same numbers
as ``cpu``.

tapeflow's random ops draw the stream of ``(key, counter)`` (see ``tapeflow.random``):
the outputs of NumPy's ``Philox(key=[key, 0], counter=[0, counter, 0, 0])``. NumPy
increments the 256-bit counter before each block, so block ``j`` (64-bit words
``raw[4j .. 4j+3]``) is ``philox4x64_10(ctr=[j + 1, counter, 0, 0], key=[key, 0])``
(the CUDA backend's ``philox.py`` derives the same). One generated kernel per
(op, dtype, affine or not): each work item computes one block and writes the
values made from its four words (8 for 32-bit outputs, which use the words' low
and high halves ``w[2i] = raw[i] & 0xffffffff``, ``w[2i+1] = raw[i] >> 32``).
Nothing is generated or transformed on the host.

The transforms are the CPU backend's (``tapeflow_cpu_numpy.k_random``) operation
for operation, in its precision, with ``FP_CONTRACT OFF`` (no fused multiply-add),
so uniforms, integers and shuffles are bit for bit ``cpu:0``'s; normals and
truncated normals match up to the last-bit rounding of the device's
``log``/``cos``/``sin`` against NumPy's (the truncated normal's inverse CDF is a
port of Cephes' ``ndtri``, SciPy's, evaluated in float64).

TensorFlow 2's stateless ops (``StatelessRandom*V2``: ``tf.random.stateless_*`` and
``tf.random.Generator``) run Philox4x32-10 on the state input read on the device, one
work item per group of values (:meth:`RandomKernels.philox_table`): the CPU's numbers
bit for bit for uniforms and integers, and for float32/float16 normals where the device
has fp64 (log/sin/cos in double, rounded, as the CPU does).

``RandomShuffle`` sorts the first ``n`` words stably on the device
(:func:`k_index.stable_argsort_u64`) and gathers the rows by that permutation, the
CPU's ``x[argsort(raw, kind="stable")]``.
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.plugins import KernelSpec

from . import bf16
from . import runtime as rt
from .k_index import gather_axis, stable_argsort_u64
from .runtime import FLOATS

ALL = rt.NUMERIC + ("bool",)

_M64 = (1 << 64) - 1
# Phi(-2) and Phi(2) - Phi(-2) for the truncated normal's inverse CDF (the CPU's values)
_PHI_M2 = 0.5 * math.erfc(2.0 / math.sqrt(2.0))
_PHI_SPAN = 1.0 - 2.0 * _PHI_M2

_PHILOX = r"""
#pragma OPENCL FP_CONTRACT OFF
inline void philox4x64_10(ulong j, ulong ctr1, ulong key0, ulong *w) {
    ulong c0 = j + 1UL, c1 = ctr1, c2 = 0UL, c3 = 0UL;
    ulong k0 = key0, k1 = 0UL;
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B97F4A7C15UL;
            k1 += 0xBB67AE8584CAA73BUL;
        }
        const ulong m0 = 0xD2E7470EE14C6C93UL, m1 = 0xCA5A826395121157UL;
        ulong hi0 = mul_hi(m0, c0), lo0 = m0 * c0;
        ulong hi1 = mul_hi(m1, c2), lo1 = m1 * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}
"""

# Cephes ndtri (SciPy's) on the branch the truncated normal reaches (y in
# [Phi(-2), Phi(2)], so sqrt(-2 log y) < 8), in R (double where the device has fp64)
_NDTRI = r"""
inline R ndtri(R y0) {
    const R P0[5] = {-5.99633501014107895267E1, 9.80010754185999661536E1,
        -5.66762857469070293439E1, 1.39312609387279679503E1, -1.23916583867381258016E0};
    const R Q0[8] = {1.95448858338141759834E0, 4.67627912898881538453E0,
        8.63602421390890590575E1, -2.25462687854119370527E2, 2.00260212380060660359E2,
        -8.20372256168333339912E1, 1.59056225126211695515E1, -1.18331621121330003142E0};
    const R P1[9] = {4.05544892305962419923E0, 3.15251094599893866154E1,
        5.71628192246421288162E1, 4.40805073893200834700E1, 1.46849561928858024014E1,
        2.18663306850790267539E0, -1.40256079171354495875E-1, -3.50424626827848203418E-2,
        -8.57456785154685413611E-4};
    const R Q1[8] = {1.57799883256466749731E1, 4.53907635128879210584E1,
        4.13172038254672030440E1, 1.50425385692907503408E1, 2.50464946208309415979E0,
        -1.42182922854787788574E-1, -3.80806407691578277194E-2, -9.33259480895457427372E-4};
    const R P2[9] = {3.23774891776946035970E0, 6.91522889068984211695E0,
        3.93881025292474443415E0, 1.33303460815807542389E0, 2.01485389549179081538E-1,
        1.23716634817820021358E-2, 3.01581553508235416007E-4, 2.65806974686737550832E-6,
        6.23974539184983293730E-9};
    const R Q2[8] = {6.02427039364742014255E0, 3.67983563856160859403E0,
        1.37702099489081330271E0, 2.16236993594496635890E-1, 1.34204006088543189037E-2,
        3.28014464682127739104E-4, 2.89247864745380683936E-6, 6.79019408009981274425E-9};
    if (y0 == (R)0) return -INFINITY;
    if (y0 == (R)1) return INFINITY;
    if (y0 < (R)0 || y0 > (R)1) return NAN;
    int code = 1;
    R y = y0, x;
    if (y > (R)1 - (R)0.13533528323661269189) { y = (R)1 - y; code = 0; }
    if (y > (R)0.13533528323661269189) {
        y = y - (R)0.5;
        R y2 = y * y;
        R p = P0[0]; for (int i = 1; i < 5; ++i) p = p * y2 + P0[i];
        R q = y2 + Q0[0]; for (int i = 1; i < 8; ++i) q = q * y2 + Q0[i];
        x = y + y * (y2 * p / q);
        return x * (R)2.50662827463100050242E0;
    }
    x = sqrt((R)-2 * log(y));
    R x0 = x - log(x) / x;
    R z = (R)1 / x, p, q;
    if (x < (R)8) {
        p = P1[0]; for (int i = 1; i < 9; ++i) p = p * z + P1[i];
        q = z + Q1[0]; for (int i = 1; i < 8; ++i) q = q * z + Q1[i];
    } else {
        p = P2[0]; for (int i = 1; i < 9; ++i) p = p * z + P2[i];
        q = z + Q2[0]; for (int i = 1; i < 8; ++i) q = q * z + Q2[i];
    }
    x = x0 - z * p / q;
    return code ? -x : x;
}
"""


def _f32(x):
    """An OpenCL C literal of ``float32(x)`` (exact, as a hex float)."""
    return f"((float){float(np.float32(x)).hex()})"


def _f64(x):
    return f"((double){float(x).hex()})"


# Per op: (outputs per block, body). The body sees the block's words ``w[0..3]``, the
# block's first output ``base`` and ``n``, and calls EMIT(index, value).
def _body_uniform(ct, affine):
    if ct == "half":
        # the CPU's float16 recipe: 11 bits (exact in half); an affine map in float16
        # arithmetic (each product and sum rounded to half, as NumPy's float16 ops do)
        post = ("u = (float)convert_half_rte(u * sc); u = (float)convert_half_rte(u + sh); "
                "u = (isnan(u) || u < hi) ? u : hi;" if affine else "")
        return 8, (
            "for (int t = 0; t < 8; ++t) {\n"
            "        uint wd = (t & 1) ? (uint)(w[t >> 1] >> 32) : (uint)w[t >> 1];\n"
            f"        float u = (float)(wd >> 21) * 0x1p-11f; {post}\n"
            "        EMIT(base + t, u);\n    }")
    if ct == "float":
        val = "(float)(wd >> 8) * 0x1p-24f"
        post = ("u = u * sc + sh; u = (isnan(u) || u < hi) ? u : hi;" if affine else "")
        return 8, (
            "for (int t = 0; t < 8; ++t) {\n"
            "        uint wd = (t & 1) ? (uint)(w[t >> 1] >> 32) : (uint)w[t >> 1];\n"
            f"        float u = {val}; {post}\n"
            "        EMIT(base + t, u);\n    }")
    post = "u = u * sc + sh;" if affine else ""
    return 4, ("for (int t = 0; t < 4; ++t) {\n"
               f"        double u = (double)(w[t] >> 11) * 0x1p-53; {post}\n"
               "        EMIT(base + t, u);\n    }")


def _body_uniform_int(ct):
    if ct == "int":
        return 8, ("for (int t = 0; t < 8; ++t) {\n"
                   "        ulong wd = (t & 1) ? (w[t >> 1] >> 32) : (w[t >> 1] & 0xFFFFFFFFUL);\n"
                   "        EMIT(base + t, (int)(wd % rng + lo));\n    }")
    return 4, ("for (int t = 0; t < 4; ++t) EMIT(base + t, (long)(w[t] % rng + lo));")


def _body_normal(ct, affine):
    if ct in ("float", "half"):      # float16: the float32 draw, rounded once (the CPU's)
        post = "z0 = z0 * sc + sh; z1 = z1 * sc + sh;" if affine else ""
        return 8, (
            "for (int t = 0; t < 4; ++t) {\n"
            "        float b1 = (float)((uint)w[t] >> 8), b2 = (float)((uint)(w[t] >> 32) >> 8);\n"
            "        float u1 = (b1 + 0.5f) * 0x1p-24f, u2 = b2 * 0x1p-24f;\n"
            "        float r = sqrt(-2.0f * log(u1));\n"
            f"        float th = {_f32(2.0 * math.pi)} * u2;\n"
            f"        float z0 = r * cos(th), z1 = r * sin(th); {post}\n"
            "        EMIT(base + 2 * t, z0); EMIT(base + 2 * t + 1, z1);\n    }")
    post = "z0 = z0 * sc + sh; z1 = z1 * sc + sh;" if affine else ""
    return 4, (
        "for (int t = 0; t < 2; ++t) {\n"
        "        double u1 = ((double)(w[2 * t] >> 11) + 0.5) * 0x1p-53;\n"
        "        double u2 = (double)(w[2 * t + 1] >> 11) * 0x1p-53;\n"
        "        double r = sqrt(-2.0 * log(u1));\n"
        f"        double th = {_f64(2.0 * math.pi)} * u2;\n"
        f"        double z0 = r * cos(th), z1 = r * sin(th); {post}\n"
        "        EMIT(base + 2 * t, z0); EMIT(base + 2 * t + 1, z1);\n    }")


def _body_truncated(ct, affine):
    post = "z = z * sc + sh;" if affine else ""
    return 4, (
        "for (int t = 0; t < 4; ++t) {\n"
        "        R u = ((R)(w[t] >> 11) + (R)0.5) * (R)0x1p-53;\n"
        "        R z = ndtri(u * span + phim2);\n"
        f"        z = fmin(fmax(z, (R)-2), (R)2); {post}\n"
        f"        EMIT(base + t, {'z' if ct == 'half' else f'({ct})z'});\n    }}")


def _source(name, ct, per, body, extra_params, fp64, ndtri=False):
    r = "double" if fp64 else "float"
    pre = _PHILOX + (f"#define R {r}\n" + _NDTRI if ndtri else "")
    params = [f"__global {ct} *out", "long n", "ulong key", "ulong ctr"] + extra_params
    emit = "out[i] = (v)"
    if ct == "half":     # float16: one rounding to nearest even from the computed value
        pre = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + pre
        emit = "out[i] = convert_half_rte(v)"
    return (f"{pre}\n#define EMIT(i, v) if ((i) < n) {emit}\n"
            f"__kernel void {name}({', '.join(params)}) {{\n"
            f"    long j = get_global_id(0);\n    long base = j * {per};\n"
            "    if (base >= n) return;\n    ulong w[4];\n"
            "    philox4x64_10((ulong)j, ctr, key, w);\n"
            f"    {body}\n}}\n")


def _launch(dev, name, shape, npdt, key, counter, per, body, extra, extra_vals,
            ndtri=False):
    out = rt.empty(dev, shape, npdt)
    n = out.size
    if n == 0:
        return out
    ct = rt.CTYPES[np.dtype(npdt)]
    src = _source(name, ct, per, body, [f"{t} {nm}" for t, nm, _ in extra], dev.fp64, ndtri)
    sd = [None, np.int64, np.uint64, np.uint64] + [d for _, _, d in extra]
    k = rt.kernel(dev, src, name, sd)
    nblocks = (n + per - 1) // per
    rt.launch(dev, k, (nblocks,), None, out.base_data, n, int(key) & _M64,
              int(counter) & _M64, *extra_vals)
    return out


def raw_words(dev, n, key, counter):
    """The first ``n`` 64-bit words of the stream of ``(key, counter)`` (a new
    ``uint64`` device array): ``cpu``'s ``_raw64``."""
    return _launch(dev, "raw64", (n,), np.uint64, key, counter, 4,
                   "for (int t = 0; t < 4; ++t) EMIT(base + t, w[t]);", [], [])


def _f16_as_f32(v):
    """``v`` rounded to float16, as a float32."""
    return np.float32(np.float16(v))


def _affine_args(npdt, scale, shift, hi=None):
    """Kernel parameters of ``u * scale + shift`` in the output precision (the CPU
    casts the Python-float parameters to the dtype first)."""
    if npdt in (np.float16, np.float32):
        # float16: the CPU computes in float16, so the parameters are rounded to float16
        # (exact as floats)
        f = _f16_as_f32 if npdt == np.float16 else np.float32
        ex = [("float", "sc", np.float32), ("float", "sh", np.float32)]
        vals = [f(scale), f(shift)]
        if hi is not None:
            ex.append(("float", "hi", np.float32))
            vals.append(np.float32(hi))
        return ex, vals
    return [("double", "sc", np.float64), ("double", "sh", np.float64)], \
        [float(scale), float(shift)]


class RandomKernels:
    """The random kernels (one method each; :meth:`table` maps op names to them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def _draw(self, device, dtype, what, affine, body):
        """``(dev, npdt, per, body)`` of a float draw: the OpenCL device of the op's
        ``device`` argument (``dtype`` checked on it) and ``body(ctype, affine)``."""
        dev = device.handle
        npdt = np.dtype(dtype.np)
        dev.check_dtype(npdt, what)
        return (dev, npdt) + body(self.rt.CTYPES[npdt], affine)

    def random_uniform(self, shape, dtype, key, counter, minval, maxval, device=None):
        """RandomUniform on ``[minval, maxval)``: one Philox block per work item."""
        affine = minval != 0.0 or maxval != 1.0
        dev, npdt, per, body = self._draw(device, dtype, "RandomUniform", affine, _body_uniform)
        extra, vals = [], []
        if affine:
            hi = None
            if npdt in (np.float16, np.float32):
                t = npdt.type
                hi = np.nextafter(t(maxval), t(minval))
            extra, vals = _affine_args(npdt, maxval - minval, minval, hi)
        return _launch(dev, "uniform", shape, npdt, key, counter, per, body, extra, vals)

    def random_uniform_int(self, shape, dtype, key, counter, minval, maxval, device=None):
        """RandomUniformInt on ``[minval, maxval)``: the CPU's integer recipe."""
        dev = device.handle
        npdt = np.dtype(dtype.np)
        per, body = _body_uniform_int(self.rt.CTYPES[npdt])
        rng = (int(maxval) - int(minval)) & _M64
        return _launch(dev, "uniform_int", shape, npdt, key, counter, per, body,
                       [("ulong", "rng", np.uint64), ("ulong", "lo", np.uint64)],
                       [rng, int(minval) & _M64])

    def random_normal(self, shape, dtype, key, counter, mean, stddev, device=None):
        """RandomStandardNormal: ``mean + stddev * z`` (Box-Muller)."""
        affine = mean != 0.0 or stddev != 1.0
        dev, npdt, per, body = self._draw(device, dtype, "RandomStandardNormal", affine,
                                          _body_normal)
        # (float16: the float32 draw and affine map, rounded once, as the CPU does)
        adt = np.dtype(np.float32) if npdt == np.float16 else npdt
        extra, vals = _affine_args(adt, stddev, mean) if affine else ([], [])
        return _launch(dev, "normal", shape, npdt, key, counter, per, body, extra, vals)

    def truncated_normal(self, shape, dtype, key, counter, mean, stddev, device=None):
        """TruncatedNormal within two standard deviations (inverse CDF)."""
        affine = mean != 0.0 or stddev != 1.0
        dev, npdt, per, body = self._draw(device, dtype, "TruncatedNormal", affine,
                                          _body_truncated)
        rdt = np.float64 if dev.fp64 else np.float32
        r = "double" if dev.fp64 else "float"
        extra = [(r, "span", rdt), (r, "phim2", rdt)]
        vals = [rdt(_PHI_SPAN), rdt(_PHI_M2)]
        if affine:     # in R: the CPU applies mean/stddev in float64, then casts
            extra += [(r, "sc", rdt), (r, "sh", rdt)]
            vals += [rdt(stddev), rdt(mean)]
        return _launch(dev, "truncated", shape, npdt, key, counter, per, body, extra, vals,
                       ndtri=True)

    def random_shuffle(self, x, key, counter, device=None):
        """RandomShuffle: rows gathered by a stable device sort of random words."""
        n = x.shape[0]
        if n <= 1:
            return x
        dev = self.rt.device_of(x)
        _, perm = stable_argsort_u64(raw_words(dev, n, key, counter))
        return gather_axis(x, perm, 0, 0, check=False)

    def _philox(self, op, state, shape, dtype, device, extra=()):
        rt = self.rt
        dev = device.handle
        npdt = np.dtype(dtype.np)
        low = npdt == bf16.BF16           # bfloat16: a float32 draw, rounded (exact for
        if low:                           # uniforms: 7 bits)
            npdt = np.dtype(np.float32)
        dev.check_dtype(npdt, f"Stateless {op}")
        lead = tuple(state.shape[:-1])        # a batch of states: one draw each
        out = rt.empty(dev, lead + tuple(shape), npdt)
        n = math.prod(shape)
        if out.size == 0:
            return bf16.from_float32(out) if low else out
        st = rt.contiguous(state)
        src, per = _philox_source(op, rt.CTYPES[npdt], dev.fp64, low)
        sd = [None, np.int64, None, np.int64, np.int64] + [np.uint64] * len(extra)
        k = rt.kernel(dev, src, f"philox_{op}", sd)
        groups = (n + per - 1) // per
        rt.launch(dev, k, (groups * math.prod(lead),), None, out.base_data, n,
                  rt.buf(dev, st), st.offset // 8, groups, *extra)
        return bf16.from_float32(out) if low else out

    def stateless_uniform(self, state, shape, dtype, device=None):
        """StatelessRandomUniformV2."""
        return self._philox("uniform", state, shape, dtype, device)

    def stateless_normal(self, state, shape, dtype, device=None):
        """StatelessRandomNormalV2."""
        return self._philox("normal", state, shape, dtype, device)

    def stateless_truncated_normal(self, state, shape, dtype, device=None):
        """StatelessTruncatedNormalV2."""
        return self._philox("truncated", state, shape, dtype, device)

    def stateless_uniform_int(self, state, shape, dtype, minval, maxval, device=None):
        """StatelessRandomUniformIntV2."""
        return self._philox("uniform_int", state, shape, dtype, device,
                         (np.uint64((int(maxval) - int(minval)) & _M64),
                          np.uint64(int(minval) & _M64)))

    def stateless_uniform_full_int(self, state, shape, dtype, device=None):
        """StatelessRandomUniformFullIntV2."""
        return self._philox("full_int", state, shape, dtype, device)

    def philox_table(self):
        """``{op name: KernelSpec}`` of the stateless ops."""
        f16 = ("bfloat16", "float16") + FLOATS
        return {
            "StatelessRandomUniformV2": KernelSpec(self.stateless_uniform, dtypes=f16,
                                                   needs_device=True),
            "StatelessRandomNormalV2": KernelSpec(self.stateless_normal, dtypes=f16,
                                                  needs_device=True),
            "StatelessTruncatedNormalV2": KernelSpec(self.stateless_truncated_normal, dtypes=f16,
                                                     needs_device=True),
            "StatelessRandomUniformIntV2": KernelSpec(self.stateless_uniform_int,
                                                      dtypes=("int32", "int64"),
                                                      needs_device=True),
            "StatelessRandomUniformFullIntV2": KernelSpec(
                self.stateless_uniform_full_int, dtypes=("int32", "int64", "uint32", "uint64"),
                needs_device=True),
        }

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        # float16 (devices with cl_khr_fp16): the CPU backend's float16 recipes
        f16 = ("float16",) + FLOATS
        return {
            "RandomStandardNormal": KernelSpec(self.random_normal, dtypes=f16,
                                               needs_device=True),
            "RandomUniform": KernelSpec(self.random_uniform, dtypes=f16, needs_device=True),
            "RandomUniformInt": KernelSpec(self.random_uniform_int, dtypes=("int32", "int64"),
                                           needs_device=True),
            "TruncatedNormal": KernelSpec(self.truncated_normal, dtypes=f16, needs_device=True),
            "RandomShuffle": KernelSpec(self.random_shuffle, dtypes=ALL, needs_device=True),
        }



# --- TensorFlow 2's Philox4x32-10 (the stateless ops; tapeflow.random's docstring) ----------
#
# One work item per group: the values one counter block makes (4 for 32-bit outputs, 2
# for 64-bit ones); a truncated normal's group reads blocks from ``g * 256`` (float64:
# ``g * 128``) on until it has kept its values, as the CPU's kernel does. The state (int64
# [3]: counter low, counter high, key) is read on the device. The float transforms are
# the CPU's: log/sin/cos evaluated in double and rounded to float where the device has
# fp64 (the CPU's numbers, up to the device's double rounding), in float otherwise.

_PHILOX32 = r"""
#pragma OPENCL FP_CONTRACT OFF
inline void philox_block(__global const long *st, ulong b, uint *w) {
    ulong lo0 = (ulong)st[0], lo = lo0 + b, hi = (ulong)st[1] + (lo < lo0 ? 1UL : 0UL);
    ulong key = (ulong)st[2];
    uint c0 = (uint)lo, c1 = (uint)(lo >> 32), c2 = (uint)hi, c3 = (uint)(hi >> 32);
    uint k0 = (uint)key, k1 = (uint)(key >> 32);
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        uint hi0 = mul_hi(0xD2511F53u, c0), lo0w = 0xD2511F53u * c0;
        uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1w = 0xCD9E8D57u * c2;
        uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1w; c2 = n2; c3 = lo0w;
    }
    w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}
inline float unit_f(uint x) { return (float)(x & 0x7FFFFFu) * 0x1p-23f; }
"""

_BOX_MULLER_F = {True: r"""
inline void box_muller_f(uint x0, uint x1, float *f0, float *f1) {
    float u1 = fmax(unit_f(x0), 1.0e-7f);
    float v1 = (float)((double)unit_f(x1) * %(two_pi)s);
    float lg = (float)log((double)u1);
    float u2 = (float)sqrt((double)(-2.0f * lg));
    *f0 = (float)sin((double)v1) * u2; *f1 = (float)cos((double)v1) * u2;
}
""", False: r"""
inline void box_muller_f(uint x0, uint x1, float *f0, float *f1) {
    float u1 = fmax(unit_f(x0), 1.0e-7f);
    float v1 = unit_f(x1) * %(two_pi_f)s;
    float u2 = sqrt(-2.0f * log(u1));
    *f0 = sin(v1) * u2; *f1 = cos(v1) * u2;
}
"""}

_BOX_MULLER_D = r"""
inline double unit_d(uint hi, uint lo) {
    return (double)(((ulong)(hi & 0xFFFFFu) << 32) | (ulong)lo) * 0x1p-52;
}
inline void box_muller_d(uint *w, double *d0, double *d1) {
    double u1 = fmax(unit_d(w[0], w[1]), 1.0e-7);
    double v1 = %(two_pi)s * unit_d(w[2], w[3]);
    double u2 = sqrt(-2.0 * log(u1));
    *d0 = sin(v1) * u2; *d1 = cos(v1) * u2;
}
"""


def _philox_body(op, ct, bf16=False):
    """``(values per group, body)``: the body sees ``w[4]`` (the group's first block),
    ``g`` (the group), ``base`` (its first output) and calls EMIT(index, value)
    (``bf16``: float values of a bfloat16 draw, rounded afterwards)."""
    wide = ct in ("double", "long", "ulong")
    if op == "uniform":
        if ct == "double":
            return 2, "EMIT(base, unit_d(w[0], w[1])); EMIT(base + 1, unit_d(w[2], w[3]));"
        mask, scale = ("0x3FFu", "0x1p-10f") if ct == "half" else \
            ("0x7Fu", "0x1p-7f") if bf16 else ("0x7FFFFFu", "0x1p-23f")
        return 4, f"for (int t = 0; t < 4; ++t) EMIT(base + t, (float)(w[t] & {mask}) * {scale});"
    if op == "normal":
        if ct == "double":
            return 2, "double a, b; box_muller_d(w, &a, &b); EMIT(base, a); EMIT(base + 1, b);"
        return 4, ("float a, b; box_muller_f(w[0], w[1], &a, &b); EMIT(base, a); "
                   "EMIT(base + 1, b); box_muller_f(w[2], w[3], &a, &b); EMIT(base + 2, a); "
                   "EMIT(base + 3, b);")
    if op == "truncated":
        per = 2 if ct == "double" else 4
        draw = ("double z[2]; box_muller_d(w, &z[0], &z[1]);\n"
                "            for (int i = 0; i < 2; ++i) KEEP(z[i]);" if per == 2 else
                "float z[4]; box_muller_f(w[0], w[1], &z[0], &z[1]); "
                "box_muller_f(w[2], w[3], &z[2], &z[3]);\n"
                "            for (int i = 0; i < 4; ++i) KEEP(z[i]);")
        return per, (
            f"ulong blk = (ulong)g * {256 if per == 4 else 128}UL; int kept = 0;\n"
            "        #define KEEP(v) if (kept < PER && fabs(v) < LIM) "
            "{ EMIT(base + kept, v); ++kept; }\n"
            "        while (kept < PER) {\n"
            "            philox_block(st, blk++, w);\n"
            f"            {draw}\n        }}")
    if op == "uniform_int":
        if wide:
            return 2, ("for (int t = 0; t < 2; ++t) EMIT(base + t, (long)((((ulong)w[2 * t] | "
                       "((ulong)w[2 * t + 1] << 32)) % rng) + lo));")
        return 4, "for (int t = 0; t < 4; ++t) EMIT(base + t, (int)((uint)lo + w[t] % (uint)rng));"
    if wide:       # full-range integers
        return 2, (f"for (int t = 0; t < 2; ++t) EMIT(base + t, ({ct})((ulong)w[2 * t] | "
                   "((ulong)w[2 * t + 1] << 32)));")
    return 4, f"for (int t = 0; t < 4; ++t) EMIT(base + t, ({ct})w[t]);"


def _philox_source(op, ct, fp64, bf16=False):
    per, body = _philox_body(op, ct, bf16)
    pre = _PHILOX32
    if ct == "double":
        pre += _BOX_MULLER_D % {"two_pi": _f64(2.0 * math.pi)}
    elif op in ("normal", "truncated"):
        pre += _BOX_MULLER_F[fp64] % {"two_pi": _f64(2.0 * math.pi),
                                      "two_pi_f": _f32(2.0 * math.pi)}
    emit = "out[i] = (v)"
    if ct == "half":
        pre = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + pre
        emit = "out[i] = convert_half_rte(v)"
    extra = ", ulong rng, ulong lo" if op == "uniform_int" else ""
    lim = "2.0" if ct == "double" else "2.0f"
    return (f"{pre}\n#define PER {per}\n#define LIM {lim}\n#define EMIT(i, v) if ((i) < n) {emit}\n"
            f"__kernel void philox_{op}(__global {ct} *out, long n, __global const long *st, "
            f"long st_off, long ngroups{extra}) {{\n"
            "    long s = get_global_id(0) / ngroups, g = get_global_id(0) % ngroups;\n"
            "    long base = g * PER;\n"
            "    if (base >= n) return;\n    st += st_off + 3 * s;\n    out += s * n;\n"
            "    uint w[4];\n"
            "    philox_block(st, (ulong)g, w);\n"
            f"    {body}\n}}\n"), per


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    k = RandomKernels(ctx)
    return {**k.table(), **k.philox_table()}
