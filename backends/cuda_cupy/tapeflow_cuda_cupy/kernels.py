"""The CUDA kernel table: declared without CuPy, built on the first call.

Declaration (:func:`declared`): every op the shared kernel modules
(:mod:`tapeflow.kernels`) define, with their dtypes and ``needs_device`` flag, plus
:data:`k_cuda.OVERRIDES` (a subset).
It needs no CuPy, so ``python -m tapeflow info`` shows the ``cuda`` coverage
everywhere.

Registration (:func:`lazy_table`): one ``registry.add_kernels("cuda", ...)`` of lazy
kernel specs (``KernelSpec.lazy``, docs/backends.md "Lazy kernels"). The first call of
any of them (only possible on a machine where a CUDA device exists) builds the whole
table once (:func:`table`, :func:`build`), with a
:class:`~tapeflow.plugins.BuildContext` whose ``xp`` is the CuPy compatibility
namespace and whose services are ``cp`` (CuPy), ``raw64`` (the GPU Philox,
:mod:`.philox`), ``special`` (``cupyx.scipy.special``), ``scatter_add`` and ``shared``
(the table built so far):

1. every shared kernel module's ``build(ctx)`` (one source for both backends where
   NumPy and CuPy agree), ``tapeflow.kernels.random`` drawing from the GPU Philox;
2. the CUDA-specific kernels of :mod:`.k_cuda` on top;
   ``Conv2D`` and its gradients wrapped by :mod:`.cudnn_conv` (cuDNN when enabled and
   supported, else the shared im2col kernel), ``MatMul`` by :mod:`.capture_gemm` (a
   GEMM CUDA-graph capture accepts), and the TF32 switch applied to CuPy
   (:mod:`.precision`);
3. bfloat16 (CuPy has none): the kernels :func:`.bf16.declare` offers it for get, as
   their bfloat16 variant, a wrapper taking and returning :class:`.bf16.BF16Array`
   (uint16 bits) and computing in float32.

The registry then rebinds the op's entry to the real function and its variants, so
later calls cost nothing extra. With more than one GPU each kernel is wrapped to run
under its inputs' device (``cupy.cuda.Device``); with one, it is not wrapped at all.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from tapeflow import kernels
from tapeflow.errors import InvalidArgumentError, UnimplementedError
from tapeflow.plugins import BuildContext, KernelSpec

from . import _cupy, bf16, capture_gemm, cudnn_conv, k_cuda, philox, precision

DEVICE_TYPE = "cuda"

#: the CUDA-specific stages of :func:`build`, in order: (module, origin of its kernels)
STAGES = ((k_cuda, "cuda"), (cudnn_conv, "cuda:cudnn-or-shared:nn"), (capture_gemm, None))


#: CUDA kernels of ops whose CPU kernel is declared beside the op (not in a shared module)
SPARSE_DTYPES = ("float16", "float32", "float64", "int32", "int64")


def sparse_dense_matmul(ctx):
    """SparseTensorDenseMatMul on CuPy (not run here: written against CuPy's API): the
    scaled rows of ``b`` scatter-added into the output rows (``cupyx.scatter_add``,
    the ``scatter_add`` service: float atomics, so the summation order may vary)."""
    cp, add_at = ctx.cp, ctx.scatter_add

    def spmm(a_indices, a_values, b, a_shape, adjoint_a, adjoint_b):
        m, k = a_shape
        rows, cols = a_indices[:, 0], a_indices[:, 1]
        if adjoint_a:
            rows, cols, m, k = cols, rows, k, m
        if rows.size and bool(cp.any((rows < 0) | (rows >= m) | (cols < 0) | (cols >= k))):
            raise InvalidArgumentError(f"a_indices are out of bounds of A's shape "
                                       f"[{a_shape[0]}, {a_shape[1]}]")
        bt = b.T if adjoint_b else b
        out = cp.zeros((m, bt.shape[1]), a_values.dtype)
        if rows.size:
            add_at(out, rows, a_values[:, None] * bt[cols])
        return out
    return spmm


def declared() -> dict:
    """``{op name: (dtypes, needs_device)}`` of every CUDA kernel (no CuPy needed): the
    shared kernel modules built with NumPy for their declarations."""
    decl = {"SparseTensorDenseMatMul": (SPARSE_DTYPES, False)}
    ctx = BuildContext(np, DEVICE_TYPE)
    for modname in kernels.MODULES:
        try:
            tbl = kernels.module(modname).build(ctx)
        except Exception:
            continue      # the CPU plugin reports its own failure
        for op, s in tbl.items():
            s = KernelSpec.of(s)
            names = None if s.dtypes is None else tuple(d.name for d in s.dtypes)
            decl[op] = (bf16.declare(op, names), bool(s.needs_device))
    return decl


def lazy_table() -> dict:
    """``{op name: KernelSpec.lazy(...)}``: what the plugin registers (no CuPy needed)."""
    return {op: KernelSpec.lazy(functools.partial(resolve, op), dtypes, needs_device)
            for op, (dtypes, needs_device) in declared().items()}


def cupy_special(op):
    """The ``special`` service: CuPy's special functions (``cupyx.scipy.special``)."""
    import cupyx.scipy.special as sp        # part of CuPy
    return sp


def build(ctx) -> dict:
    """Every CUDA kernel, ``{op name: KernelSpec}`` (steps 1-2 of the module doc), built
    with ``ctx`` (``xp`` CuPy's namespace; services ``cp``, ``raw64``, ``special``,
    ``scatter_add``; ``errors``/``origin``: dicts receiving what failed, by stage, and
    where each op's kernel comes from). ``ctx.shared`` is set to the table as it
    grows: each stage of :data:`STAGES` reads the kernels it wraps there. One module's
    failure hides none of the others."""
    errors, origin = ctx.get("errors", {}), ctx.get("origin", {})
    table = ctx.shared = {}
    for modname in kernels.MODULES:
        try:
            tbl = kernels.module(modname).build(ctx)
        except Exception as e:
            errors[modname] = (f"tapeflow.kernels.{modname}.build(ctx) failed: "
                               f"{type(e).__name__}: {e}")
            continue
        for op, s in tbl.items():
            table[op] = KernelSpec.of(s)
            origin[op] = f"shared:{modname}"
    table["SparseTensorDenseMatMul"] = KernelSpec(sparse_dense_matmul(ctx))
    origin["SparseTensorDenseMatMul"] = "cuda"
    for mod, where in STAGES:
        name = mod.__name__.rsplit(".", 1)[-1]
        try:
            stage = mod.build(ctx)
        except Exception as e:   # the shared kernels stay
            errors[name] = f"{name}.build failed: {type(e).__name__}: {e}"
            continue
        for op, fn in stage.items():
            table[op] = KernelSpec.of(fn)
            if where is not None:
                origin[op] = where
    return table


# --- the built table ---------------------------------------------------------------------

class _Built:
    def __init__(self):
        self.specs: dict = {}          # op -> KernelSpec (final: fn and variants)
        self.origin: dict = {}         # op -> "shared:math" | "cuda"
        self.errors: dict = {}         # op or module -> "what failed"
        self.raw64 = None


_lock = threading.RLock()
_built: _Built | None = None


def table() -> _Built:
    """Build (once) and return the CUDA kernel table. Needs CuPy."""
    global _built
    if _built is not None:
        return _built
    with _lock:
        if _built is None:
            _built = _build()
    return _built


def _build() -> _Built:
    import cupyx                     # part of CuPy

    cp = _cupy.cupy()
    xp = _cupy.compat_namespace(cp)
    b = _Built()
    try:
        b.raw64 = philox.make_raw64(cp, kernels.module("random").host_raw64)
    except Exception as e:
        b.errors["philox"] = f"{type(e).__name__}: {e}"
    ctx = BuildContext(xp, DEVICE_TYPE, cp=cp, raw64=b.raw64, special=cupy_special,
                       philox32=philox.make_philox32(cp),   # (TF's Philox: stateless ops)
                       scatter_add=getattr(cp.add, "at", None) or cupyx.scatter_add,
                       errors=b.errors, origin=b.origin)
    specs = build(ctx)
    try:
        precision.install(cp)
    except Exception as e:
        b.errors["precision"] = f"applying the TF32 switch to CuPy failed: {type(e).__name__}: {e}"
    decl = declared()
    from .backend import BACKEND
    multi = BACKEND.multi_device
    b.specs = {op: _finish(op, spec, xp, decl.get(op, (None, False)), multi)
               for op, spec in specs.items()}
    return b


def _finish(op, spec, xp, declaration, multi):
    """The registered kernel of ``op``: ``spec``'s function and variants, plus bfloat16
    as a variant (dispatch runs the float32 round trip for bfloat16 calls only, the
    other dtypes reach the kernel with no wrapper in front; ``Cast`` is wrapped as a
    whole: its key dtype is the input's, the bfloat16 may be the target), each under
    its inputs' device with several GPUs."""
    dtypes, needs_device = declaration
    fn, variants = spec.fn, dict(spec.variants or {})
    wrapped = bf16.wrap(op, fn, xp, dtypes)
    if op == "Cast":
        fn = wrapped
    elif wrapped is not fn:
        variants[bf16.BF16] = wrapped
    if multi:
        fn = _on_device(fn, needs_device)
        variants = {d: _on_device(f, needs_device) for d, f in variants.items()}
    return KernelSpec(fn, variants=variants or None)


def _on_device(fn, needs_device):
    """Run ``fn`` under the CUDA device of its inputs (``device=`` for creation ops)."""
    if needs_device:
        def k(*arrays, device, **attrs):
            with device.handle:
                return fn(*arrays, device=device, **attrs)
    else:
        def k(*arrays, **attrs):
            dev = getattr(arrays[0], "device", None) if arrays else None
            if dev is None:
                return fn(*arrays, **attrs)
            with dev:
                return fn(*arrays, **attrs)
    k.__name__ = getattr(fn, "__name__", "kernel")
    k.__wrapped__ = fn
    return k


def resolve(op_name) -> KernelSpec:
    """The real CuPy kernel of ``op_name`` (its lazy spec's ``resolve``); UnimplementedError
    saying why when there is none."""
    b = table()
    spec = b.specs.get(op_name)
    if spec is not None:
        return spec
    why = "; ".join(sorted(set(b.errors.values()))) or "no CUDA kernel was built for it"
    raise UnimplementedError(f"the CUDA kernel of {op_name} is unavailable: {why}")


def coverage() -> dict:
    """``{op: origin}`` — where each CUDA kernel comes from (``"shared:math"``: the
    xp-generic source in :mod:`tapeflow.kernels`; ``"cuda"``: :mod:`.k_cuda`). Without
    CuPy, from the declarations only."""
    decl = declared()
    if _cupy.probe()[0] is None:
        return {op: ("cuda" if op in k_cuda.OVERRIDES else
                     "cuda:cudnn-or-shared:nn" if op in cudnn_conv.OPS else "shared")
                for op in decl}
    b = table()
    return {op: b.origin.get(op, "missing: " + "; ".join(sorted(set(b.errors.values()))))
            for op in decl}
