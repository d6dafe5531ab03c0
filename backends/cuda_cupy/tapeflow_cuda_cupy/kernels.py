"""The CUDA kernel table, declared without CuPy and built on first use.

Declaration (:func:`declared`): every op the shared kernel modules
(:mod:`tapeflow.kernels`) define, with their dtypes and ``needs_device`` flag, plus
:data:`k_cuda.OVERRIDES` (a subset).
It needs no CuPy, so ``python -m tapeflow info`` shows the ``cuda`` coverage
everywhere.

Registration: each op gets a :class:`LazyKernel`. Its first call (only possible on a
machine where a CUDA device exists) builds the whole table once (:func:`table`):

1. every shared kernel module's ``build(xp)`` with ``xp`` the CuPy compatibility
   namespace (one source for both backends where NumPy and CuPy agree);
2. ``tapeflow.kernels.random`` built around the GPU Philox (:mod:`.philox`);
3. the CUDA-specific kernels of :mod:`.k_cuda` on top;
   ``Conv2D`` and its gradients wrapped by :mod:`.cudnn_conv` (cuDNN when enabled and
   supported, else the shared im2col kernel), and the TF32 switch applied to CuPy
   (:mod:`.precision`);
4. bfloat16 (CuPy has none): the kernels :func:`.bf16.declare` offers it for are wrapped
   to take and return :class:`.bf16.BF16Array` (uint16 bits) and compute in float32.

then rebinds the op's registered kernel to the real function
(``tapeflow.plugins.rebind_kernel``), so later calls cost nothing extra.
With more than one GPU each kernel is wrapped to run under its inputs' device
(``cupy.cuda.Device``); with one, it is not wrapped at all.
"""

from __future__ import annotations

import threading

import numpy as np

from tapeflow import kernels
from tapeflow.errors import UnimplementedError

from . import _cupy, bf16, capture_gemm, cudnn_conv, k_cuda, philox, precision

DEVICE_TYPE = "cuda"


def _module_tables(xp, builder):
    """``[(module name, {op: spec} or exception)]`` for the shared kernel modules
    (:mod:`tapeflow.kernels`)."""
    out = []
    for modname in kernels.MODULES:
        try:
            mod = kernels.module(modname)
        except ImportError as e:
            out.append((modname, e))
            continue
        try:
            out.append((modname, builder(modname, mod, xp)))
        except Exception as e:  # one module's failure must not hide the others
            out.append((modname, e))
    return out


def _spec(s):
    return s if isinstance(s, dict) else {"fn": s}


def declared() -> dict:
    """``{op name: (dtypes, needs_device)}`` of every CUDA kernel (no CuPy needed)."""
    decl = {}
    for _mod, tbl in _module_tables(np, lambda name, mod, xp: mod.build(xp)):
        if isinstance(tbl, Exception):
            continue      # the CPU plugin reports its own failure
        for op, s in tbl.items():
            s = _spec(s)
            decl[op] = (bf16.declare(op, s.get("dtypes")), bool(s.get("needs_device", False)))
    return decl


# --- the built table ---------------------------------------------------------------------

class _Built:
    def __init__(self):
        self.fns: dict = {}            # op -> callable (final)
        self.origin: dict = {}         # op -> "shared:math" | "cuda"
        self.errors: dict = {}         # op or module -> "what failed"
        self.variants: dict = {}       # op -> (kernel for every dtype but bfloat16,
        #                                       {"bfloat16": its float32 round trip})
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
    cp = _cupy.cupy()
    xp = _cupy.compat_namespace(cp)
    b = _Built()
    host = kernels.module("random").host_raw64
    try:
        b.raw64 = philox.make_raw64(cp, host)
    except Exception as e:
        b.errors["philox"] = f"{type(e).__name__}: {e}"

    def builder(modname, mod, xp_):
        if modname == "random":
            return k_cuda.build_random(cp, xp_, mod, b.raw64)
        return mod.build(xp_)

    shared = {}
    for modname, tbl in _module_tables(xp, builder):
        if isinstance(tbl, Exception):
            b.errors[modname] = f"tapeflow.kernels.{modname}.build(cupy) failed: " \
                                f"{type(tbl).__name__}: {tbl}"
            continue
        for op, s in tbl.items():
            shared[op] = _spec(s)["fn"]
            b.origin[op] = f"shared:{modname}"
    fns = dict(shared)
    try:
        overrides = k_cuda.build(cp, xp, shared)
    except Exception as e:
        b.errors["k_cuda"] = f"k_cuda.build failed: {type(e).__name__}: {e}"
        overrides = {}
    for op, fn in overrides.items():
        fns[op] = fn
        b.origin[op] = "cuda"
    try:
        for op, fn in cudnn_conv.build(cp, fns).items():
            fns[op] = fn
            b.origin[op] = "cuda:cudnn-or-shared:nn"
    except Exception as e:  # the im2col kernels stay
        b.errors["cudnn_conv"] = f"cudnn_conv.build failed: {type(e).__name__}: {e}"
    try:    # MatMul inside a CUDA-graph capture: not cuBLAS, which CuPy refuses there
        for op, fn in capture_gemm.build(cp, fns).items():
            fns[op] = fn
    except Exception as e:  # cuBLAS stays: a capture with a MatMul then falls back
        b.errors["capture_gemm"] = f"capture_gemm.build failed: {type(e).__name__}: {e}"
    try:
        precision.install(cp)
    except Exception as e:
        b.errors["precision"] = f"applying the TF32 switch to CuPy failed: {type(e).__name__}: {e}"
    decl = declared()
    raw = fns
    fns = {op: bf16.wrap(op, fn, xp, decl.get(op, ((), False))[0]) for op, fn in raw.items()}
    from .backend import BACKEND
    if BACKEND.multi_device:
        raw = {op: _on_device(fn, decl.get(op, (None, False))[1]) for op, fn in raw.items()}
        fns = {op: _on_device(fn, decl.get(op, (None, False))[1]) for op, fn in fns.items()}
    b.fns = fns
    # bfloat16 as a variant: dispatch runs the float32 round trip for bfloat16 calls only
    # and the other dtypes reach the kernel with no wrapper in front (Cast keeps its
    # wrapper: its key dtype is the input's, the bfloat16 may be the target)
    b.variants = {op: (raw[op], {"bfloat16": fns[op]}) for op in fns
                  if op != "Cast" and fns[op] is not raw[op]}
    return b


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


def resolve(op_name):
    """The real CuPy kernel of ``op_name``; UnimplementedError saying why when none."""
    b = table()
    fn = b.fns.get(op_name)
    if fn is not None:
        return fn
    why = "; ".join(sorted(set(b.errors.values()))) or "no CUDA kernel was built for it"
    raise UnimplementedError(f"the CUDA kernel of {op_name} is unavailable: {why}")


class LazyKernel:
    """The registered kernel of one op on ``cuda`` until its first call, which resolves
    the real CuPy kernel and rebinds the registry entry to it (see the module doc)."""

    __slots__ = ("op_name", "real", "__weakref__")

    def __init__(self, op_name):
        self.op_name = op_name
        self.real = None

    def __call__(self, *args, **kwargs):
        real = self.real
        if real is None:
            real = self._resolve()
        return real(*args, **kwargs)

    def _resolve(self):
        real = resolve(self.op_name)
        self.real = real
        self._rebind(real)
        return real

    def _rebind(self, real):
        try:
            from tapeflow.plugins import rebind_kernel
            split = table().variants.get(self.op_name)
            if split is not None:
                rebind_kernel(self.op_name, DEVICE_TYPE, self, split[0], variants=split[1])
            else:
                rebind_kernel(self.op_name, DEVICE_TYPE, self, real)
        except Exception:   # the lazy object keeps forwarding: slower, still correct
            pass

    def __repr__(self):
        state = "unresolved" if self.real is None else f"-> {self.real!r}"
        return f"<tapeflow_cuda_cupy lazy kernel {self.op_name} {state}>"


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
