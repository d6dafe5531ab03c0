"""NumPy kernels (device type ``cpu``): the reference implementation of the formulas.

Stable forms, no warnings, exact limits at the infinities:

* exact: ``GELU(x) = x/2 * erfc(-x/sqrt(2))``. ``1 + erf(x/sqrt(2))`` would cancel
  for x << 0 (erf -> -1) and lose every digit below x ~ -6 in float32; ``erfc`` keeps
  full relative precision there. Below x = -50 the result underflows to -0 in every
  dtype, so x is clamped at -50: ``GELU(-inf) = -0`` instead of ``-inf * 0 = nan``.
* tanh: ``x/2 * (1 + tanh(u)) = x * sigmoid(2u)``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``,
  with SciPy's stable ``expit``; the polynomial is evaluated on x clamped to
  [-25, 25] (beyond, sigmoid(2u) is exactly 0 or 1), so ``x^3`` never overflows.
* float16 is computed in float32 and rounded once.

:func:`build` is this module's kernel table, as every backend's kernel module gives it
(``build(ctx) -> {op name: KernelSpec}``, docs/backends.md).
"""

from __future__ import annotations

import numpy as np
from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import KernelSpec

#: SciPy's erfc and expit, bound on the first kernel call: importing scipy.special
#: costs ~0.35 s, and a plugin must not make every `import tapeflow` pay for it
erfc = expit = None


def _load_scipy():
    global erfc, expit
    from scipy.special import erfc, expit  # noqa: F811

SQRT1_2 = 0.7071067811865476       # 1/sqrt(2)
INV_SQRT_2PI = 0.3989422804014327  # 1/sqrt(2*pi)
C = 0.7978845608028654             # sqrt(2/pi)
K = 0.044715
EXACT_CLAMP = 50.0
TANH_CLAMP = 25.0
#: the dtypes the kernels take, on every device type
FLOATS = ("float16", "float32", "float64")
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


def tanh_form(approximate) -> bool:
    """The ``approximate`` attribute as a bool: True/False as in TensorFlow, or
    PyTorch's ``"tanh"``/``"none"``; anything else is an InvalidArgumentError."""
    if approximate is True or approximate is False:
        return approximate
    if isinstance(approximate, np.bool_):
        return bool(approximate)
    if approximate in ("tanh", "none"):
        return approximate == "tanh"
    raise InvalidArgumentError(f"approximate must be True or False (or 'tanh' / 'none'), "
                               f"got {approximate!r}")


def gelu(x, approximate=False):
    if erfc is None:
        _load_scipy()
    approximate = tanh_form(approximate)
    if x.dtype == _F16:
        return gelu(x.astype(_F32), approximate).astype(_F16)
    xl = np.maximum(x, -EXACT_CLAMP if not approximate else -TANH_CLAMP)
    if not approximate:
        return 0.5 * xl * erfc(xl * -SQRT1_2)
    xc = np.minimum(xl, TANH_CLAMP)
    return xl * expit((2.0 * C) * xc * (1.0 + K * xc * xc))


def gelu_grad(dy, x, approximate=False):
    """``dy * GELU'(x)``: exact ``Phi(x) + x phi(x)``; tanh ``s + 2 x u' s (1 - s)``."""
    if dy.shape != x.shape:     # as the OpenCL and CUDA kernels: no broadcasting
        raise ValueError(f"shapes {dy.shape} and {x.shape} differ")
    if erfc is None:
        _load_scipy()
    approximate = tanh_form(approximate)
    if x.dtype == _F16:
        return gelu_grad(dy.astype(_F32), x.astype(_F32), approximate).astype(_F16)
    if not approximate:
        xc = np.clip(x, -EXACT_CLAMP, EXACT_CLAMP)
        return dy * (0.5 * erfc(xc * -SQRT1_2) + xc * (INV_SQRT_2PI * np.exp(-0.5 * xc * xc)))
    xc = np.clip(x, -TANH_CLAMP, TANH_CLAMP)
    x2 = xc * xc
    z = (2.0 * C) * xc * (1.0 + K * x2)
    s = expit(z)
    return dy * (s + (2.0 * C) * xc * (1.0 + 3.0 * K * x2) * s * expit(-z))


def build(ctx):
    """``{op name: KernelSpec}``: the gelu ops' NumPy kernels (``ctx``, a
    :class:`~tapeflow.plugins.BuildContext`, is not needed: they are NumPy's)."""
    return {"gelu::gelu": KernelSpec(gelu, FLOATS),
            "gelu::gelu_grad": KernelSpec(gelu_grad, FLOATS)}
