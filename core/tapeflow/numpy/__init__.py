"""``tapeflow.numpy``: the Python array API standard (revision 2024.12) on tapeflow
tensors, every function a composition of tapeflow ops, so everything here runs on
every backend, is recorded by ``GradientTape`` and traced by ``tf.function``.

>>> import tapeflow as tf
>>> import tapeflow.numpy as tnp
>>> x = tnp.asarray([1.0, 2.0, 3.0])
>>> s = tnp.sum(tnp.exp(x - tnp.max(x)))
>>> print(tnp.round(s * 1e4) / 1e4)     # 4 decimals: exp's last digit depends on the CPU
tf.Tensor(1.5032, shape=(), dtype=float32)
>>> x.__array_namespace__() is tnp
True

Work in progress (issue 18): ``docs/array-api.md`` lists what is implemented, what is
not yet, and the deviations (complex numbers have no OpenCL kernels; binary
operators on ``Tensor`` promote by the ``tf.*`` rules, where ``int32`` with ``float32``
is float32, while the functions here promote as the standard says, NumPy's float64
where it leaves that open: both modes of one lattice, docs/dtypes.md).
"""

from __future__ import annotations

import sys as _sys

from ..runtime import devices as _devs
from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError  # noqa: F401
# the namespace, one module per concern (its public names are the standard's)
from ._elementwise import (  # noqa: F401, A004 (bool, abs, all ... are the standard's names)
    bool, can_cast, complex128, complex64, e, finfo, float16, float32, float64, iinfo, inf,
    int16, int32, int64, int8, isdtype, nan, newaxis, pi, result_type, uint16, uint32,
    uint64, uint8, _ALL, __array_api_version__,
    abs, acos, acosh, add, asin, asinh, atan, atan2, atanh, bitwise_and, bitwise_invert,
    bitwise_left_shift, bitwise_or, bitwise_right_shift, bitwise_xor, ceil, clip, conj,
    copysign, cos, cosh, divide, equal, exp, expm1, floor, floor_divide, greater,
    greater_equal, hypot, imag, isfinite, isinf, isnan, less, less_equal, log, log10,
    log1p, log2, logaddexp, logical_and, logical_not, logical_or, logical_xor, maximum,
    minimum, multiply, negative, nextafter, not_equal, positive, pow, real, reciprocal,
    remainder, round, sign, signbit, sin, sinh, sqrt, square, subtract, tan, tanh, trunc,
)
from ._arrays import (  # noqa: F401, A004 (bool, abs, all ... are the standard's names)
    arange, asarray, astype, empty, empty_like, eye, from_dlpack, full, full_like,
    linspace, meshgrid, ones, ones_like, tril, triu, zeros, zeros_like,
    broadcast_arrays, broadcast_shapes, broadcast_to, concat, expand_dims, flip, matmul,
    matrix_transpose, moveaxis, permute_dims, repeat, reshape, roll, squeeze, stack,
    tensordot, tile, unstack, vecdot,
)
from ._statistics import (  # noqa: F401, A004 (bool, abs, all ... are the standard's names)
    UniqueAllResult, UniqueCountsResult, UniqueInverseResult, all, any, argmax, argmin,
    argsort, count_nonzero, cumulative_prod, cumulative_sum, diff, isin, max, mean, min,
    nonzero, prod, searchsorted, sort, std, sum, take, take_along_axis, unique_all,
    unique_counts, unique_inverse, unique_values, var, where,
)


# --- the namespace's info object -------------------------------------------------------------

class _NamespaceInfo:
    """``__array_namespace_info__()``: capabilities, devices and dtypes."""

    def capabilities(self):
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": 64}

    def default_device(self):
        return str(_devs.current_device() or _devs.default_device())

    def devices(self):
        return [d.name for d in _devs.list_devices()] if hasattr(_devs, "list_devices") \
            else [self.default_device()]

    def default_dtypes(self, *, device=None):
        alone = _dt.DEFAULTS["array_api"]["alone"]     # (those of result_type(1.0) ...)
        return {"real floating": alone[_dt.WEAK_FLOAT],
                "complex floating": alone[_dt.WEAK_COMPLEX],
                "integral": alone[_dt.WEAK_INT], "indexing": int64}

    def dtypes(self, *, device=None, kind=None):
        out = {d.name: d for d in _ALL if d is not float16}
        if device is not None:      # those the device's backend stores
            dev = _devs.get_device(str(device))
            out = {k: v for k, v in out.items()
                   if dev.backend.dtype_unsupported(dev, v) is None}
        if kind is None:
            return out
        return {k: v for k, v in out.items() if isdtype(v, kind)}


def __array_namespace_info__():
    return _NamespaceInfo()


def _check_version(api_version):
    """This module, for ``Tensor.__array_namespace__(api_version=...)``."""
    if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
        raise UnimplementedError(f"tapeflow.numpy implements the array API 2024.12, not "
                                 f"{api_version!r}")
    return _sys.modules[__name__]


from . import fft, linalg  # noqa: E402,F401  (the extensions: they use the modules above)
