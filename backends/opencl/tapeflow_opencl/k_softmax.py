"""Softmax-family kernels (:class:`SoftmaxKernels`): fused per-row OpenCL C kernels, and the
losses.

``Softmax``, ``LogSoftmax``, ``SoftmaxCrossEntropyWithLogits`` and
``SparseSoftmaxCrossEntropyWithLogits`` are one generated kernel each (per dtype,
number of merged row dimensions and scheme). A *row* is every element along the
softmax axis (any axis, any strides: the other dimensions are merged where the
input's, the labels' and the output's strides allow). Per row the kernel computes
the maximum (NaN-propagating), the sum of ``exp(x - max)``, then writes its
outputs, reading the input up to three times and writing no intermediate array
(softmax stores ``exp(x - max)`` in its output and divides it by the sum after):

* **one work item per row** (``row_t``) when rows are short, or there are enough of
  them to fill the device (always on CPU devices then; on GPUs when the axis is not
  the innermost in memory, so neighbouring work items read neighbouring elements);
* **one work-group per row** (``row_g``) otherwise: its work items stride along the
  row and combine the maximum, the sum and (cross entropies) the dot product with
  tree reductions in local memory.

A row whose maximum is not finite (``inf``, all ``-inf``, or NaN) gives NaN, as the
``cpu`` kernel's ``x - max`` does. The cross entropy with probability labels
broadcasts labels and logits against each other (zero strides): the softmax is
over the logits' own axis, the dot product over the broadcast axis. The sparse
cross entropy checks its labels on the device (one flag, downloaded once per call;
the labels are read back only to word the error). ``SigmoidCrossEntropyWithLogits``
is one elementwise expression, ``L2Loss`` a :func:`k_reduce.reduce` with a
sum-of-squares :class:`k_reduce.Reducer`.

``LayerNorm`` (and its backward op ``LayerNormGrad``) normalise rows too: the input is
viewed with the normalised axes last (one strided copy unless they already are the
contiguous trailing axes), then one work item per row computes the mean, the variance
and writes the row (``LayerNormGrad``: ``dx`` and each row's mean and ``1/sqrt(var +
eps)``; a second kernel, one work item per column, sums ``dgamma`` and ``dbeta`` over the
rows). float16 runs the op's composite. ``DotProductAttention`` (and its backward op) is
batched matmuls on views of the heads' layout (:func:`k_linalg.matmul_views`), the
softmax row kernel and elementwise launches for the scale, the mask and the softmax's
backward.
"""

from __future__ import annotations

import math

import numpy as np

from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

from . import runtime as rt
from .k_linalg import matmul_views
from .k_reduce import Reducer, reduce
from .runtime import FLOATS

#: kinds of row kernels: (has labels operand, writes one value per row)
_KINDS = {"softmax": (False, False), "log_softmax": (False, False),
          "xent": (True, True), "sparse": (True, True)}


def _max_comb(a, b):
    return f"((isnan({b}) || {b} > {a}) ? {b} : {a})"


def _rowred(var, init, expr, comb, count, group):
    """C code reducing ``expr`` (of ``j``) over ``j < count`` into ``T var``
    (``comb``: a function of two C expressions)."""
    if not group:
        return (f"    T {var} = {init};\n"
                f"    for (long j = 0; j < {count}; j++) {{ T v = {expr}; "
                f"{var} = {comb(var, 'v')}; }}\n")
    return (f"    T {var} = {init};\n"
            f"    for (long j = lid; j < {count}; j += WG) {{ T v = {expr}; "
            f"{var} = {comb(var, 'v')}; }}\n"
            f"    sh[lid] = {var};\n    barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int s = WG / 2; s > 0; s >>= 1) {{\n"
            f"        if (lid < s) sh[lid] = {comb('sh[lid]', 'sh[lid + s]')};\n"
            f"        barrier(CLK_LOCAL_MEM_FENCE);\n    }}\n"
            f"    {var} = sh[0];\n    barrier(CLK_LOCAL_MEM_FENCE);\n")


def _row_src(kind, T, L, nk, wg):
    """The row kernel of ``kind`` for float C type ``T`` (``L``: the labels' C
    type), ``nk`` merged row dimensions, work-group size ``wg`` (0: one work item
    per row)."""
    labels, _ = _KINDS[kind]
    group = wg > 0
    ops = ["x", "o"] + (["l"] if labels else [])
    params = ["__global T *out", "__global const T *x", "long xo"]
    if labels:
        params += [f"__global const {L} *lab", "long lo"]
    if kind == "sparse":
        params.append("__global int *flag")
    params += ["long M", "long n", "long nl", "long xa", "long oa", "long la"]
    params += [f"long kd{k}" for k in range(nk)]
    for p in ops:
        params += [f"long k{p}{k}" for k in range(nk)]
    idx = ["long xb = xo, ob = 0, lb = lo;" if labels else "long xb = xo, ob = 0;"]
    if nk:
        idx.append("long q = row;")
        for k in range(nk - 1, -1, -1):
            i = f"(q % kd{k})" if k else "q"
            idx.append(" ".join(f"{p}b += {i} * k{p}{k};" for p in ops)
                       + (f" q /= kd{k};" if k else ""))
    lines = [f"#define T {T}"]
    if group:
        lines += [f"#define WG {wg}",
                  "__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))"]
    else:
        lines.append("__kernel")
    lines.append(f"void row_k({', '.join(params)}) {{")
    if group:
        lines += ["    __local T sh[WG];", "    long row = get_group_id(0);",
                  "    int lid = get_local_id(0);"]
    else:
        lines += ["    long row = get_global_id(0);", "    if (row >= M) return;"]
    lines.append("    " + "\n    ".join(idx))
    body = "\n".join(lines) + "\n"
    # the logits' own row: nl elements at stride xa
    body += _rowred("m", "-INFINITY", "x[xb + j * xa]", _max_comb, "nl", group)
    nan = "(T)NAN"
    if kind in ("softmax", "log_softmax"):
        step = "j += WG" if group else "j++"
        start = "lid" if group else "0"
        body += (f"    if (!isfinite(m)) {{ for (long j = {start}; j < n; {step}) "
                 f"out[ob + j * oa] = {nan}; return; }}\n")
        if kind == "softmax":       # exp(x - m) stored once, divided by the sum after
            body += _rowred("s", "(T)0", "(out[ob + j * oa] = exp(x[xb + j * xa] - m))",
                            lambda a, b: f"({a} + {b})", "nl", group)
            w = "out[ob + j * oa] / s"
        else:
            body += _rowred("s", "(T)0", "exp(x[xb + j * xa] - m)",
                            lambda a, b: f"({a} + {b})", "nl", group)
            body += "    T ls = log(s);\n"
            w = "(x[xb + j * xa] - m) - ls"
        body += f"    for (long j = {start}; j < n; {step}) out[ob + j * oa] = {w};\n}}\n"
        return body
    # cross entropies: one loss per row, written by work item 0
    body += _rowred("s", "(T)0", "exp(x[xb + j * xa] - m)", lambda a, b: f"({a} + {b})",
                    "nl", group)
    body += "    T ls = log(s);\n"
    first = "if (lid == 0) " if group else ""
    if kind == "xent":
        # labels along the broadcast axis (n), logits at stride xa2 (0 if broadcast)
        body += "    long xa2 = (nl == n) ? xa : 0;\n"
        body += _rowred("d", "(T)0", "lab[lb + j * la] * ((x[xb + j * xa2] - m) - ls)",
                        lambda a, b: f"({a} + {b})", "n", group)
        body += f"    {first}out[row] = isfinite(m) ? -d : {nan};\n}}\n"
        return body
    body += (f"    {L} c = lab[lb];\n"
             f"    if (c < 0 || c >= nl) {{ {first}flag[0] = 1; {first}out[row] = {nan}; "
             "return; }\n"
             f"    {first}out[row] = isfinite(m) ? -((x[xb + c * xa] - m) - ls) : {nan};\n}}\n")
    return body


def _pow2_at_least(n):
    return 1 << max(0, int(n - 1).bit_length())


def _rows(kind, x, axis, lab=None, flag=None):
    """Run the row kernel of ``kind``; the output array."""
    dev = rt.device_of(x)
    labels, per_row = _KINDS[kind]
    if kind == "xent":
        shape = rt.broadcast_shape([x.shape, lab.shape])
    else:
        shape = x.shape
    n = shape[axis]
    nl = x.shape[axis]
    kshape = tuple(d for i, d in enumerate(shape) if i != axis)
    out_shape = kshape if per_row else shape
    out = rt.empty(dev, out_shape, x.dtype)
    M = math.prod(kshape)
    if out.size == 0:
        return out
    xs, xo = rt.broadcast_strides(x, shape)
    ostrides = rt.layout(out)[0]
    if per_row:
        os_k, oa = list(ostrides), 0
    else:
        os_k, oa = [s for i, s in enumerate(ostrides) if i != axis], ostrides[axis]
    xa = xs[axis] if nl != 1 else 0
    strides = [[s for i, s in enumerate(xs) if i != axis], os_k]
    la, lo = 0, 0
    if labels:
        if kind == "xent":
            ls, lo = rt.broadcast_strides(lab, shape)
            la = ls[axis]
            strides.append([s for i, s in enumerate(ls) if i != axis])
        else:
            ls, lo = rt.layout(lab)
            strides.append(list(ls))
    kshape_m, kstr = rt.merge_dims(kshape, strides)
    nk = len(kshape_m)
    if dev.is_gpu:
        enough = M >= dev.compute_units * 256 and xa != 1
    else:
        enough = M >= dev.compute_units * 4
    wg = 0 if (max(n, nl) <= 32 or enough) else min(256, _pow2_at_least(max(n, nl)),
                                                    1 << (dev.max_wg.bit_length() - 1))
    T = rt.CTYPES[x.dtype]
    L = rt.CTYPES[lab.dtype] if labels else None
    src = _row_src(kind, T, L, nk, wg)
    sd = [None, None, np.int64]
    args = [out.base_data, rt.buf(dev, x), xo]
    if labels:
        sd += [None, np.int64]
        args += [rt.buf(dev, lab), lo]
    if kind == "sparse":
        sd.append(None)
        args.append(flag.base_data)
    sd += [np.int64] * (6 + nk * (1 + len(strides)))
    args += [M, n, nl, xa, oa, la, *kshape_m]
    for st in kstr:
        args += list(st)
    k = rt.kernel(dev, src, "row_k", sd)
    if wg:
        rt.launch(dev, k, (M * wg,), (wg,), *args)
    else:
        rt.launch(dev, k, (M,), None, *args)
    return out


_LN_FWD = """#define T {T}
__kernel void ln_fwd(__global T *out, __global const T *x, long xo, __global const T *g,
                     long go, __global const T *b, long bo, long M, long N, T eps) {{
    long row = get_global_id(0);
    if (row >= M) return;
    __global const T *xr = x + xo + row * N;
    __global T *yr = out + row * N;
    T s = 0;
    for (long j = 0; j < N; j++) s += xr[j];
    T m = s / (T)N;
    T v = 0;
    for (long j = 0; j < N; j++) {{ T d = xr[j] - m; v += d * d; }}
    T r = (T)1 / sqrt(v / (T)N + eps);
    for (long j = 0; j < N; j++) yr[j] = (xr[j] - m) * r * g[go + j] + b[bo + j];
}}
"""

_LN_BWD = """#define T {T}
__kernel void ln_dx(__global T *dx, __global T *stats, __global const T *dy, long dyo,
                    __global const T *x, long xo, __global const T *g, long go, long M,
                    long N, T eps) {{
    long row = get_global_id(0);
    if (row >= M) return;
    __global const T *xr = x + xo + row * N;
    __global const T *dr = dy + dyo + row * N;
    __global T *out = dx + row * N;
    T s = 0;
    for (long j = 0; j < N; j++) s += xr[j];
    T m = s / (T)N;
    T v = 0;
    for (long j = 0; j < N; j++) {{ T d = xr[j] - m; v += d * d; }}
    T r = (T)1 / sqrt(v / (T)N + eps);
    stats[2 * row] = m;
    stats[2 * row + 1] = r;
    T sg = 0, sgh = 0;
    for (long j = 0; j < N; j++) {{ T gj = dr[j] * g[go + j]; sg += gj;
                                    sgh += gj * (xr[j] - m) * r; }}
    sg /= (T)N;
    sgh /= (T)N;
    for (long j = 0; j < N; j++)
        out[j] = r * (dr[j] * g[go + j] - sg - (xr[j] - m) * r * sgh);
}}

__kernel void ln_dparams(__global T *dg, __global T *db, __global const T *stats,
                         __global const T *dy, long dyo, __global const T *x, long xo,
                         long M, long N) {{
    long j = get_global_id(0);
    if (j >= N) return;
    T a = 0, c = 0;
    for (long i = 0; i < M; i++) {{
        T d = dy[dyo + i * N + j];
        a += d * (x[xo + i * N + j] - stats[2 * i]) * stats[2 * i + 1];
        c += d;
    }}
    dg[j] = a;
    db[j] = c;
}}
"""


def _ln_rows(x, axes):
    """``x`` as a contiguous array with the normalised ``axes`` last (a strided copy
    unless they are already), its element offset, ``(M, N)`` and the permutation."""
    nd = len(x.shape)
    perm = [i for i in range(nd) if i not in axes] + list(axes)
    if perm != list(range(nd)):
        st, off = rt.layout(x)
        x = rt.view(x, [x.shape[i] for i in perm], [st[i] for i in perm], off)
    x = rt.contiguous(x)
    n = math.prod(x.shape[nd - len(axes):])
    m = math.prod(x.shape) // n if n else 0
    return x, rt.layout(x)[1], (m, n), perm


def _ln_back(out, shape, perm):
    """The contiguous ``[M, N]`` result in the input's layout (``shape``)."""
    pshape = [shape[i] for i in perm]
    if perm == list(range(len(shape))):
        return rt.view(out, shape)
    cst = rt.layout(rt.view(out, pshape))[0]
    inv = [perm.index(i) for i in range(len(shape))]
    return rt.contiguous(rt.view(out, shape, [cst[i] for i in inv], 0))


def _perm(a, perm):
    """A view of ``a`` with its dimensions permuted."""
    st, off = rt.layout(a)
    return rt.view(a, [a.shape[i] for i in perm], [st[i] for i in perm], off)


def _heads_back(a):
    """``[B, H, T, D]`` as a new contiguous ``[B, T, H, D]`` array."""
    return rt.contiguous(_perm(a, [0, 2, 1, 3]))


def _c_number(v, T):
    return f"(({T}){float(v)!r})"


class SoftmaxKernels:
    """The row kernels (one method each; :meth:`table` maps op names to them)."""

    def __init__(self, ctx):
        self.rt = ctx.runtime

    def softmax(self, x, axis):
        """Softmax along ``axis``: one row-kernel launch."""
        return _rows("softmax", x, axis)

    def log_softmax(self, x, axis):
        """LogSoftmax along ``axis``: one row-kernel launch."""
        return _rows("log_softmax", x, axis)

    def softmax_xent(self, logits, labels, axis):
        """SoftmaxCrossEntropyWithLogits along ``axis``: one row-kernel launch."""
        return _rows("xent", logits, axis, labels)

    def sparse_xent(self, logits, labels):
        """SparseSoftmaxCrossEntropyWithLogits: labels checked in the same launch."""
        dev = self.rt.device_of(logits)
        nc = logits.shape[-1]
        if labels.size == 0:
            return self.rt.empty(dev, labels.shape, logits.dtype)
        flag = self.rt.upload(dev, np.zeros(1, np.int32))
        out = _rows("sparse", logits, logits.ndim - 1, labels, flag)
        if nc == 0 or self.rt.download(flag)[0]:
            vals = self.rt.download(labels).ravel()
            lo, hi = int(vals.min()), int(vals.max())
            bad = lo if lo < 0 else hi
            shown = " ".join(str(int(v)) for v in vals[:32]) + (" ..." if vals.size > 32
                                                                 else "")
            raise InvalidArgumentError(
                f"Received a label value of {bad} which is outside the valid range of "
                f"[0, {nc}).  Label values: {shown}")
        return out

    def sigmoid_xent(self, x, z):
        """SigmoidCrossEntropyWithLogits: one elementwise expression."""
        return self.rt.elementwise("(x0 > 0 ? x0 : 0) - x0 * x1 + log1p(exp(-fabs(x0)))", x.dtype,
                                   x, z)

    def l2_loss(self, x):
        """L2Loss: a sum-of-squares reduction, halved."""
        ct = self.rt.CTYPES[x.dtype]
        red = Reducer(ct, "0", "v * v", "a + b", f"a * ({ct})0.5")
        return reduce(x, None, False, red)

    def layer_norm(self, x, gamma, beta, axes, epsilon):
        """LayerNorm over ``axes``: one work item per row (after at most one copy)."""
        dev = rt.device_of(x)
        shape = tuple(x.shape)
        xc, xo, (m, n), perm = _ln_rows(x, axes)
        out = rt.empty(dev, (m, n), x.dtype)
        if m * n:
            g, b = rt.contiguous(gamma), rt.contiguous(beta)
            T = rt.CTYPES[x.dtype]
            k = rt.kernel(dev, _LN_FWD.format(T=T), "ln_fwd",
                          [None, None, np.int64, None, np.int64, None, np.int64, np.int64,
                           np.int64, x.dtype.type])
            rt.launch(dev, k, (m,), None, out.base_data, rt.buf(dev, xc), xo, rt.buf(dev, g),
                      rt.layout(g)[1], rt.buf(dev, b), rt.layout(b)[1], m, n, epsilon)
        return _ln_back(out, shape, perm)

    def layer_norm_grad(self, dy, x, gamma, axes, epsilon):
        """LayerNormGrad: ``dx`` and the row statistics in one launch (one work item per
        row), ``dgamma`` and ``dbeta`` in a second (one work item per column)."""
        dev = rt.device_of(x)
        shape = tuple(x.shape)
        xc, xo, (m, n), perm = _ln_rows(x, axes)
        dyc, dyo, _, _ = _ln_rows(dy, axes)
        dx = rt.empty(dev, (m, n), x.dtype)
        pshape = tuple(gamma.shape)
        if not m * n:
            zeros = np.zeros(pshape, x.dtype)
            return _ln_back(dx, shape, perm), rt.upload(dev, zeros), rt.upload(dev, zeros)
        g = rt.contiguous(gamma)
        stats = rt.empty(dev, (m, 2), x.dtype)
        dg, db = rt.empty(dev, pshape, x.dtype), rt.empty(dev, pshape, x.dtype)
        src = _LN_BWD.format(T=rt.CTYPES[x.dtype])
        k = rt.kernel(dev, src, "ln_dx", [None, None, None, np.int64, None, np.int64, None,
                                          np.int64, np.int64, np.int64, x.dtype.type])
        rt.launch(dev, k, (m,), None, dx.base_data, stats.base_data, rt.buf(dev, dyc), dyo,
                  rt.buf(dev, xc), xo, rt.buf(dev, g), rt.layout(g)[1], m, n, epsilon)
        k2 = rt.kernel(dev, src, "ln_dparams", [None, None, None, None, np.int64, None,
                                                np.int64, np.int64, np.int64])
        rt.launch(dev, k2, (n,), None, dg.base_data, db.base_data, stats.base_data,
                  rt.buf(dev, dyc), dyo, rt.buf(dev, xc), xo, m, n)
        return _ln_back(dx, shape, perm), dg, db

    def dot_product_attention(self, query, key, value, mask, scale):
        """DotProductAttention: two batched matmuls on the heads' views, the scaled and
        masked scores in one elementwise launch, the softmax in one row launch."""
        dev = rt.device_of(query)
        b, t, h, _ = query.shape
        s_len, dv, dt = key.shape[1], value.shape[3], query.dtype
        if 0 in (b, t, h, s_len):
            return (rt.upload(dev, np.zeros((b, t, h, dv), dt)),
                    rt.upload(dev, np.zeros((b, h, t, s_len), dt)))
        s = matmul_views(_perm(query, [0, 2, 1, 3]), _perm(key, [0, 2, 3, 1]))
        T = rt.CTYPES[dt]
        if mask.ndim:
            s = rt.elementwise(f"x1 ? x0 * {_c_number(scale, T)} : {_c_number(-1e9, T)}", dt,
                               s, mask)
        elif scale != 1.0:
            s = rt.elementwise(f"x0 * {_c_number(scale, T)}", dt, s)
        p = _rows("softmax", s, 3)
        return _heads_back(matmul_views(p, _perm(value, [0, 2, 1, 3]))), p

    def dot_product_attention_grad(self, dout, dweights, query, key, value, weights, mask,
                                   scale):
        """DotProductAttentionGrad: four batched matmuls on the heads' views, the
        softmax's backward in two elementwise launches and a matrix-vector product."""
        dev = rt.device_of(query)
        b, t, h, _ = query.shape
        s_len, dt = key.shape[1], query.dtype
        if 0 in (b, t, h, s_len):
            return tuple(rt.upload(dev, np.zeros(a.shape, dt)) for a in (query, key, value))
        d_h = _perm(dout, [0, 2, 1, 3])
        dv = matmul_views(_perm(weights, [0, 1, 3, 2]), d_h)
        dp = rt.elementwise("x0 + x1", dt, matmul_views(d_h, _perm(value, [0, 2, 3, 1])),
                            dweights)
        rows = matmul_views(rt.elementwise("x0 * x1", dt, dp, weights),
                            rt.upload(dev, np.ones((s_len, 1), dt)))
        T = rt.CTYPES[dt]
        sc = _c_number(scale, T)
        if mask.ndim:
            ds = rt.elementwise(f"x3 ? (x0 - x1) * x2 * {sc} : ({T})0", dt, dp, rows, weights,
                                mask)
        else:
            ds = rt.elementwise(f"(x0 - x1) * x2 * {sc}", dt, dp, rows, weights)
        dq = matmul_views(ds, _perm(key, [0, 2, 1, 3]))
        dk = matmul_views(_perm(ds, [0, 1, 3, 2]), _perm(query, [0, 2, 1, 3]))
        return _heads_back(dq), _heads_back(dk), _heads_back(dv)

    def table(self):
        """``{op name: KernelSpec}`` of this module's kernels."""
        f = FLOATS
        return {
            "DotProductAttention": KernelSpec(self.dot_product_attention, dtypes=f),
            "DotProductAttentionGrad": KernelSpec(self.dot_product_attention_grad, dtypes=f),
            "LayerNorm": KernelSpec(self.layer_norm, dtypes=f),
            "LayerNormGrad": KernelSpec(self.layer_norm_grad, dtypes=f),
            "Softmax": KernelSpec(self.softmax, dtypes=f),
            "LogSoftmax": KernelSpec(self.log_softmax, dtypes=f),
            "SoftmaxCrossEntropyWithLogits": KernelSpec(self.softmax_xent, dtypes=f),
            "SparseSoftmaxCrossEntropyWithLogits": KernelSpec(self.sparse_xent, dtypes=f),
            "SigmoidCrossEntropyWithLogits": KernelSpec(self.sigmoid_xent, dtypes=f),
            "L2Loss": KernelSpec(self.l2_loss, dtypes=f),
        }


def build(ctx):
    """The OpenCL kernels of this module: ``{op name: KernelSpec}`` (``ctx``: the
    backend's :class:`~tapeflow.plugins.BuildContext`, ``ctx.runtime`` the runtime)."""
    return SoftmaxKernels(ctx).table()
