"""Array-module-generic kernels: the public kernel library backends share.

Each module (``math``, ``reduce``, ``linalg``, ``array``, ``nn``, ``random``, ``optim``,
``nn_fused``) has ``build(ctx) -> {op name: KernelSpec}``, the one kernel contract of
every backend (docs/backends.md): ``ctx`` is a :class:`~tapeflow.plugins.BuildContext`
whose ``xp`` is the array module the kernels are written against, once, with the NumPy
API: the NumPy backend builds them with ``numpy``, the CuPy backend with its CuPy
namespace. What differs between array modules comes as the context's services, each
with the NumPy default: ``special(op) -> module`` (SciPy's special functions for those
arrays: :func:`~.math.scipy_special`, the CUDA backend's ``cupyx.scipy.special``),
``scatter_add(out, indices, values)`` (``xp.add.at``), ``raw64(n, key, counter)`` (the
random bits: :func:`~.random.host_raw64`; the GPU draws its own) and
``bfloat16_variant(fn)`` (see below). The kernels themselves are the methods of one
class per module, which holds ``xp`` (:class:`~.math.MathKernels`,
:class:`~.reduce.ReduceKernels`, :class:`~.linalg.LinalgKernels`,
:class:`~.array.ArrayKernels`, :class:`~.nn.NNKernels`, :class:`~.random.RandomKernels`,
:class:`~.optim.OptimKernels`, :class:`~.nn_fused.FusedNNKernels`): ``build(ctx)`` is
``<Class>(ctx.xp, services).table()``, where the array module's own functions
(``xp.add``) appear as they are, with no wrapper. So a kernel has its name in tracebacks
and profiles (``NNKernels.relu``) and can be called alone: ``NNKernels(numpy).relu(x)``.
A kernel takes native arrays and the op's attrs as keywords and returns native arrays.
:func:`build_all` is every module's table.

bfloat16 (``ml_dtypes.bfloat16`` in NumPy) has NumPy loops for the elementwise ufuncs
only, slow ones (about 5x a float32 round trip) that also accumulate reductions in
bfloat16: given the service ``bfloat16_variant`` (the NumPy backend passes
:func:`compute_in_float32`), :func:`build_all` adds bfloat16 to every kernel that
declares float16, run by that variant (dispatch calls it for bfloat16 only), except
the ops in :data:`BF16_NATIVE`, which only move elements and work on any dtype.

Nothing here is imported by ``import tapeflow``: a backend imports it when it
registers its kernels. SciPy (for ``Erf``, ``TruncatedNormal``) is the extra
``tapeflow[scipy]``, imported by the first kernel that needs it.

>>> import numpy as np
>>> from tapeflow import kernels
>>> from tapeflow.plugins import BuildContext
>>> table = kernels.build_all(BuildContext(np, "cpu",
...                                        bfloat16_variant=kernels.compute_in_float32))
>>> table["Add"].fn(np.array([1.0]), np.array([2.0]))
array([3.])
>>> table["Sum"].fresh, "float32" in [d.name for d in table["Sum"].dtypes]
(True, True)
>>> import ml_dtypes
>>> x = np.ones(1000, ml_dtypes.bfloat16)
>>> table["Sum"].variants[x.dtype](x, axis=None, keepdims=False)   # float32 sums
array(1000, dtype=bfloat16)
"""

from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np

from .. import dtypes as _dt
from ..plugins import KernelSpec

__all__ = ["MODULES", "BF16_NATIVE", "build_all", "compute_in_float32", "module",
           "with_bfloat16"]

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F32 = np.dtype(np.float32)

#: ops whose NumPy kernels only move or compare elements: they run on bfloat16 arrays
#: as they are (no float32 round trip)
BF16_NATIVE = frozenset({"Cast", "Reshape", "BroadcastTo", "Transpose", "ExpandDims",
                         "Squeeze", "ConcatV2", "Pack", "Unpack", "SplitV", "Tile", "Slice",
                         "StridedSlice", "GatherV2", "GatherNd", "Identity", "StopGradient",
                         "Shape", "Size", "Rank", "SelectV2", "Where", "Equal", "NotEqual",
                         "Bitcast"})

#: the kernel modules, in registration order
MODULES = ("math", "reduce", "linalg", "array", "nn", "random", "optim", "nn_fused")


def module(name):
    """The kernel module ``name`` (one of :data:`MODULES`)."""
    return importlib.import_module(f"{__name__}.{name}")


def build_all(ctx, modules=MODULES):
    """``{op name: KernelSpec}`` of every module of ``modules`` built with ``ctx`` (a
    :class:`~tapeflow.plugins.BuildContext`), bfloat16 added where the context has the
    service ``bfloat16_variant`` (:func:`with_bfloat16`)."""
    table = {}
    for name in modules:
        table.update(module(name).build(ctx))
    variant = ctx.get("bfloat16_variant")
    if variant is not None:
        table = {op: with_bfloat16(op, spec, variant) for op, spec in table.items()}
    return table


def with_bfloat16(op_name, spec, variant):
    """``spec`` (a KernelSpec or a function) declaring bfloat16 too if it declares
    float16, with ``variant(spec.fn)`` as its bfloat16 variant unless ``op_name`` is in
    :data:`BF16_NATIVE` (the other dtypes call ``fn`` with no wrapper)."""
    spec = KernelSpec.of(spec)
    names = () if spec.dtypes is None else tuple(d.name for d in spec.dtypes)
    if "float16" not in names or "bfloat16" in names:
        return spec
    variants = dict(spec.variants or {})
    if op_name not in BF16_NATIVE:
        variants[_BF16] = variant(spec.fn)
    return KernelSpec(spec.fn, ("bfloat16",) + names, spec.needs_device, spec.source,
                      spec.fresh, variants, spec.out, layouts=spec.layouts)


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
