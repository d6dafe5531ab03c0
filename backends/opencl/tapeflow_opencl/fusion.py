"""Fused elementwise kernels on ``opencl:N``: one generated OpenCL C kernel per group.

The graph pass :func:`tapeflow.tracing.graph_fusion.fuse` hands a group of elementwise ops
(an :class:`~tapeflow.tracing.graph_fusion.ElementwiseSpec`) to
``OpenCLBackend.fuse_elementwise``, which returns a :class:`FusedKernel`. Its source
composes the *same* OpenCL C expressions the unfused kernels evaluate
(:func:`tapeflow_opencl.k_math.expression`, :func:`tapeflow_opencl.k_nn.expression`,
``SelectV2``'s ``x0 ? x1 : x2`` from ``k_array``): each step is one statement
``const T v = (T)(expr);`` with ``T`` the C type of the step's dtype (a bool is stored
as ``uchar`` ``(expr) ? 1 : 0``, as :func:`runtime.elementwise` stores it), so every
intermediate is rounded to its dtype exactly as when it went through memory, and C's
floating-point contraction (which works within one expression) cannot join two ops:
results equal the unfused chain's, bit for bit for the arithmetic ops (math library
functions may differ in the last bit where PoCL vectorises one kernel and not the
other).

Inputs are read through :func:`runtime.layout` with NumPy broadcasting and the
dimension merging of :func:`runtime.elementwise` (contiguous inputs are indexed
linearly, 0-d inputs read once, others through strides); every output is a new
contiguous array of the group's shape. One work-item per output element on a GPU,
:data:`CPU_ELEMENTS_PER_ITEM` consecutive elements on a CPU device; the plan
(kernel and scalar arguments) is cached per input layout, so a call allocates the
outputs and launches once.
"""

from __future__ import annotations

import math
import re

import numpy as np

from . import runtime as rt

__all__ = ["expression", "fusible_op", "fuse_elementwise", "kernel_source", "FusedKernel"]

_BOOL = np.dtype(np.bool_)
_NAMES = re.compile(r"\bx(\d+)\b")
_ISNAN = re.compile(r"\bisnan\((x\d+)\)")
_FABS = re.compile(r"\bfabs\((x\d+)\)")
_FABS_BITS = {"float": r"as_float(as_uint(\1) & 0x7fffffffu)",
              "double": r"as_double(as_ulong(\1) & 0x7fffffffffffffffUL)"}

#: elements per work-item on CPU devices (PoCL), whose per-work-item cost dominates a
#: fused chain of cheap ops: the 10-op ``arith`` chain of benchmarks/fusion_compare.py
#: on 1M float32 took 2.31 / 1.75 / 1.10 / 0.48 ms with 1 / 4 / 16 / 64 elements per
#: item (best of 3). GPUs keep one element per work-item (coalesced access).
CPU_ELEMENTS_PER_ITEM = 64


def _inline_builtins(expr, ct):
    """``isnan(x)`` -> ``(x != x)`` and ``fabs(x)`` -> clearing the sign bit: the same
    results bit for bit (no fast-math options are used), but PoCL calls its library
    for the builtins, which stops it vectorising the work-group loop (a fused chain
    with one ``Minimum`` ran 7x slower)."""
    expr = _ISNAN.sub(r"(\1 != \1)", expr)
    if ct in _FABS_BITS:
        expr = _FABS.sub(_FABS_BITS[ct], expr)
    return expr


def expression(op_name, dtypes, attrs=None):
    """``(expression of x0.., result dtype, preamble)`` of ``op_name`` on ``dtypes`` as
    the unfused OpenCL kernel computes it, or None.

    >>> import numpy as np
    >>> expression("ReluGrad", (np.dtype("float32"),) * 2)[0]
    'x0 * (x1 > (float)0 ? (float)1 : (float)0)'
    """
    from . import k_math, k_nn
    e = k_math.expression(op_name, dtypes, attrs)
    if e is None:
        e = k_nn.expression(op_name, dtypes, attrs)
    if e is None and op_name == "SelectV2" and len(dtypes) == 3:
        c, x, y = (np.dtype(d) for d in dtypes)
        if c == _BOOL and x == y and x.name in rt.NUMERIC + ("bool",):
            e = ("x0 ? x1 : x2", x, "")      # k_array's SelectV2 kernel
    return e


def fusible_op(op_name, in_dtypes, attrs):
    """Whether an op can be part of a fused kernel (it has an expression here)."""
    return expression(op_name, in_dtypes, attrs) is not None


def _steps_code(spec):
    """``(preamble, [statements], [output variable names])`` of ``spec``, or None."""
    n_in = len(spec.inputs)
    names = [f"x{j}" for j in range(n_in)]
    preambles = []
    lines = []
    for k, s in enumerate(spec.steps):
        dts = [spec.value_dtype(a) for a in s.args]
        e = expression(s.op, dts, s.attrs)
        if e is None:
            return None
        expr, dt, pre = e
        if np.dtype(dt) != s.dtype or s.dtype not in rt.CTYPES:
            return None
        if pre and pre not in preambles:
            preambles.append(pre)
        args = [names[a] for a in s.args]
        if dts:
            expr = _inline_builtins(expr, rt.CTYPES[dts[-1]])
        body = _NAMES.sub(lambda m, args=args: args[int(m.group(1))], expr)
        ct = rt.CTYPES[s.dtype]
        v = f"v{n_in + k}"
        names.append(v)
        val = f"(({body}) ? 1 : 0)" if s.dtype == _BOOL else f"({body})"
        lines.append(f"const {ct} {v} = ({ct}){val};   /* {s.op} */")
    return "\n".join(preambles), lines, [names[o] for o in spec.outputs]


def kernel_source(spec, modes, nd, per=1):
    """The OpenCL C source of the fused kernel ``fused`` for input ``modes`` (``"c"``
    contiguous, ``"s"`` one value, ``"g"`` strided) over ``nd`` merged dimensions;
    each work-item computes ``per`` consecutive elements.

    >>> import numpy as np
    >>> from tapeflow.tracing.graph_fusion import ElementwiseSpec, Step
    >>> f32 = np.dtype("float32")
    >>> spec = ElementwiseSpec([((4,), f32), ((), f32)],
    ...                        [Step("Mul", (0, 1), {}, f32, (4,)),
    ...                         Step("Exp", (2,), {}, f32, (4,))], [3], (4,))
    >>> print(kernel_source(spec, ["c", "s"], 1))          # doctest: +NORMALIZE_WHITESPACE
    __kernel void fused(__global float *out0, __global const float *p_x0, long o_x0,
                        __global const float *p_x1, long o_x1, long n) {
        long i = get_global_id(0);
        if (i >= n) return;
        const float x0 = p_x0[o_x0 + i];
        const float x1 = p_x1[o_x1];
        const float v2 = (float)(x0 * x1);   /* Mul */
        const float v3 = (float)(exp(v2));   /* Exp */
        out0[i] = v3;
    }
    """
    code = _steps_code(spec)
    if code is None:
        raise ValueError("spec has an op without an OpenCL expression")
    preamble, lines, outs = code
    names = [f"x{j}" for j in range(len(spec.inputs))]
    in_ct = [rt.CTYPES[np.dtype(d)] for _, d in spec.inputs]
    strided = [n for n, m in zip(names, modes) if m == "g"]
    params = [f"__global {rt.CTYPES[spec.value_dtype(o)]} *out{j}"
              for j, o in enumerate(spec.outputs)]
    for n, t in zip(names, in_ct):
        params += [f"__global const {t} *p_{n}", f"long o_{n}"]
    params.append("long n")
    if strided:
        params += rt.strided_args_decl(nd, strided)
    body = []
    if strided:
        body.append("".join(f"long off_{n} = o_{n}; " for n in strided))
        body.append(rt.index_code(nd, strided).replace("\n    ", "\n"))
    for n, t, m in zip(names, in_ct, modes):
        idx = {"c": f"o_{n} + i", "s": f"o_{n}", "g": f"off_{n}"}[m]
        body.append(f"const {t} {n} = p_{n}[{idx}];")
    body += lines
    body += [f"out{j}[i] = {v};" for j, v in enumerate(outs)]
    if per == 1:
        head = "    long i = get_global_id(0);\n    if (i >= n) return;\n"
        ind = "    "
        tail = ""
    else:
        head = (f"    const long i0 = get_global_id(0) * {per};\n"
                f"    for (long i = i0; i < i0 + {per} && i < n; i++) {{\n")
        ind = "        "
        tail = "    }\n"
    return ((preamble + "\n" if preamble else "")
            + f"__kernel void fused({', '.join(params)}) {{\n" + head
            + "".join(ind + ln.replace("\n", "\n" + ind) + "\n" for ln in body)
            + tail + "}\n")


class FusedKernel:
    """``kernel(*arrays)`` evaluates the fused group on the inputs' device: one launch,
    new contiguous outputs (one array, or a tuple when the group has several)."""

    def __init__(self, spec):
        self.spec = spec
        self.shape = tuple(spec.shape)
        self.out_dtypes = [spec.value_dtype(o) for o in spec.outputs]
        self.single = len(spec.outputs) == 1
        self.plans: dict = {}

    def _plan(self, dev, arrays):
        mshape, msts, modes = rt.access_modes(self.shape, arrays)
        nd = len(mshape)
        per = 1 if dev.is_gpu else CPU_ELEMENTS_PER_ITEM
        src = kernel_source(self.spec, modes, nd, per)
        sd, tail = rt.ew_arg_layout(len(self.out_dtypes), mshape, msts, modes)
        n = math.prod(self.shape)
        return rt.kernel(dev, src, "fused", sd), n, tail, (-(-n // per),)

    def __call__(self, *arrays):
        dev = rt._BY_QUEUE[arrays[0].queue.int_ptr]
        key = (dev.index, *[(a.dtype, a.shape, a.strides) for a in arrays])
        plan = self.plans.get(key)
        if plan is None:
            if len(self.plans) > 64:
                self.plans.clear()
            plan = self.plans[key] = self._plan(dev, arrays)
        k, n, tail, gsize = plan
        outs = [rt.empty(dev, self.shape, dt) for dt in self.out_dtypes]
        if n:
            args = [o.base_data for o in outs]
            for a in arrays:
                args += [rt.buf(dev, a), a.offset // a.dtype.itemsize]
            args.append(n)
            if tail:
                args += tail
            rt.launch(dev, k, gsize, None, *args)
        return outs[0] if self.single else tuple(outs)


def fuse_elementwise(spec):
    """A :class:`FusedKernel` for ``spec``, or None when an op or dtype has no OpenCL
    expression (or the device cannot hold a dtype: float16, float64 without fp64)."""
    if _steps_code(spec) is None:
        return None
    handle = getattr(spec.device, "handle", None)
    if handle is not None:
        dts = {np.dtype(d) for _, d in spec.inputs} | {s.dtype for s in spec.steps}
        for dt in dts:
            try:
                handle.check_dtype(dt)
            except Exception:
                return None
    return FusedKernel(spec)
