"""Array-module-generic kernels: the public kernel library backends share.

Each module (``math``, ``reduce``, ``linalg``, ``array``, ``nn``, ``random``, ``optim``,
``nn_fused``) has
``build(xp) -> {op name: spec}``, written once against the NumPy API with ``xp`` the
array module: the NumPy backend builds them with ``numpy``, the CuPy backend with its
CuPy namespace (``random.build`` also takes the ``raw64`` bit source, so the GPU draws
its own bits). The kernels themselves are the methods of one class per module, which
holds ``xp`` (:class:`~.math.MathKernels`, :class:`~.reduce.ReduceKernels`,
:class:`~.linalg.LinalgKernels`, :class:`~.array.ArrayKernels`, :class:`~.nn.NNKernels`,
:class:`~.random.RandomKernels`): ``build(xp)`` is ``<Class>(xp).table()``, where the
array module's own functions (``xp.add``) appear as they are, with no wrapper. So a
kernel has its name in tracebacks and profiles (``NNKernels.relu``) and can be called
alone: ``NNKernels(numpy).relu(x)``. A spec is the kernel itself or a dict ``{"fn": kernel, "dtypes": names,
"needs_device": bool, "fresh": bool}`` -- the arguments of ``registry.add_kernel``
(docs/backends.md). A kernel takes native arrays and the op's attrs as keywords and
returns native arrays.

bfloat16 (``ml_dtypes.bfloat16`` in NumPy) has NumPy loops for the elementwise ufuncs
only, slow ones (about 5x a float32 round trip) that also accumulate reductions in
bfloat16: on NumPy, :func:`iter_kernels` adds bfloat16 to every kernel that declares
float16 and runs it in float32 (:func:`compute_in_float32`), except the ops in
:data:`BF16_NATIVE`, which only move elements and work on any dtype.

Nothing here is imported by ``import tapeflow``: a backend imports it when it
registers its kernels. SciPy (for ``Erf``, ``TruncatedNormal``) is the extra
``tapeflow[scipy]``, imported by the first kernel that needs it.

>>> import numpy as np
>>> from tapeflow import kernels
>>> table = dict(kernels.iter_kernels(np))
>>> table["Add"]["fn"](np.array([1.0]), np.array([2.0]))
array([3.])
>>> table["Sum"]["fresh"], "float32" in table["Sum"]["dtypes"]
(True, True)
>>> import ml_dtypes
>>> x = np.ones(1000, ml_dtypes.bfloat16)
>>> table["Sum"]["variants"]["bfloat16"](x, axis=None, keepdims=False)   # float32 sums
array(1000, dtype=bfloat16)
"""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np

from .. import dtypes as _dt

__all__ = ["MODULES", "BF16_NATIVE", "compute_in_float32", "iter_kernels", "module"]

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)

#: ops whose NumPy kernels only move or compare elements: they run on bfloat16 arrays
#: as they are (no float32 round trip)
BF16_NATIVE = frozenset({"Cast", "Reshape", "BroadcastTo", "Transpose", "ExpandDims",
                         "Squeeze", "ConcatV2", "Pack", "Unpack", "SplitV", "Tile", "Slice",
                         "StridedSlice", "GatherV2", "GatherNd", "Identity", "StopGradient",
                         "Shape", "Size", "Rank", "SelectV2", "Where", "Equal", "NotEqual"})

#: the kernel modules, in registration order
MODULES = ("math", "reduce", "linalg", "array", "nn", "random", "optim", "nn_fused")


def module(name):
    """The kernel module ``name`` (one of :data:`MODULES`)."""
    return importlib.import_module(f"{__name__}.{name}")


def iter_kernels(xp, modules=MODULES, **build_kwargs):
    """``(op name, spec dict)`` for every kernel of ``modules`` built for array module
    ``xp`` (a spec given as a bare function becomes ``{"fn": fn}``). A spec's ``real``
    is the kernel of its real dtypes where ``fn`` adds complex special cases: for NumPy
    ``real`` becomes ``fn`` and ``fn`` the complex dtypes' variant. For NumPy, a kernel
    declaring float16 also declares bfloat16, computed in float32 by its
    ``spec["variants"]["bfloat16"]`` (dispatch calls it for bfloat16 only)."""
    for name in modules:
        for op_name, spec in module(name).build(xp, **build_kwargs.get(name, {})).items():
            spec = dict(spec) if isinstance(spec, dict) else {"fn": spec}
            real = spec.pop("real", None)
            dts = spec.get("dtypes")
            if xp is np and real is not None:
                # the complex dtypes' special cases as variants: the real dtypes call
                # the NumPy function itself, no wrapper in front (CuPy's table keeps fn)
                spec["variants"] = {d: spec["fn"] for d in dts if d.startswith("complex")}
                spec["fn"] = real
            if xp is np and dts is not None and "float16" in dts and "bfloat16" not in dts:
                spec["dtypes"] = ("bfloat16",) + tuple(dts)
                if op_name not in BF16_NATIVE:
                    # a variant: the other dtypes call the NumPy kernel with no wrapper
                    spec["variants"] = {**spec.get("variants", {}),
                                        "bfloat16": compute_in_float32(spec["fn"])}
            yield op_name, spec


def _up(a):
    if type(a) is np.ndarray and a.dtype == _BF16:
        return a.astype(_F32)
    if type(a) in (list, tuple) and any(type(b) is np.ndarray and b.dtype == _BF16
                                        for b in a):
        return type(a)(_up(b) for b in a)
    return a


def _down(out):
    if type(out) is np.ndarray:
        return out.astype(_BF16) if out.dtype == _F32 else out
    if type(out) in (list, tuple):
        return type(out)(_down(o) for o in out)
    if isinstance(out, np.generic) and out.dtype == _F32:
        return np.asarray(out, _BF16)
    return out


def compute_in_float32(fn):
    """A NumPy kernel that runs ``fn`` in float32 where an input array (or a ``dtype``
    attr) is bfloat16, and rounds its float32 results to bfloat16; other calls go to
    ``fn`` unchanged (one dtype test per array argument).

    >>> import ml_dtypes
    >>> mm = compute_in_float32(np.matmul)      # NumPy has no bfloat16 matmul
    >>> mm(np.ones((2, 3), ml_dtypes.bfloat16), np.ones((3, 1), ml_dtypes.bfloat16))
    array([[3],
           [3]], dtype=bfloat16)
    """
    def kernel(*args, **attrs):
        low = False
        for a in args:
            if (type(a) is np.ndarray and a.dtype == _BF16) or (
                    type(a) in (list, tuple) and any(type(b) is np.ndarray and b.dtype == _BF16
                                                     for b in a)):
                low = True
                break
        if attrs.get("dtype") is _dt.bfloat16:
            attrs["dtype"] = _dt.float32
            low = True
        if not low:
            return fn(*args, **attrs)
        return _down(fn(*[_up(a) for a in args], **attrs))
    kernel.__name__ = kernel.__qualname__ = getattr(fn, "__name__", "kernel") + "_bf16"
    kernel.__wrapped__ = fn
    return kernel
