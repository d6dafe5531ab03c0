"""Array-module-generic kernels: the public kernel library backends share.

Each module (``math``, ``reduce``, ``linalg``, ``array``, ``nn``, ``random``) has
``build(xp) -> {op name: spec}``, written once against the NumPy API with ``xp`` the
array module: the NumPy backend builds them with ``numpy``, the CuPy backend with its
CuPy namespace (``random.build`` also takes the ``raw64`` bit source, so the GPU draws
its own bits). A spec is the kernel itself or a dict ``{"fn": kernel, "dtypes": names,
"needs_device": bool, "fresh": bool}`` -- the arguments of ``registry.add_kernel``
(docs/backends.md). A kernel takes native arrays and the op's attrs as keywords and
returns native arrays.

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
"""

from __future__ import annotations

import importlib

__all__ = ["MODULES", "iter_kernels", "module"]

#: the kernel modules, in registration order
MODULES = ("math", "reduce", "linalg", "array", "nn", "random")


def module(name):
    """The kernel module ``name`` (one of :data:`MODULES`)."""
    return importlib.import_module(f"{__name__}.{name}")


def iter_kernels(xp, modules=MODULES, **build_kwargs):
    """``(op name, spec dict)`` for every kernel of ``modules`` built for array module
    ``xp`` (a spec given as a bare function becomes ``{"fn": fn}``)."""
    for name in modules:
        for op_name, spec in module(name).build(xp, **build_kwargs.get(name, {})).items():
            yield op_name, spec if isinstance(spec, dict) else {"fn": spec}
