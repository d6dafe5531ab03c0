"""The plugin: ops, kernels and gradients, declared with a :class:`tapeflow.plugins.Library`.

Both ops are declared ``elementwise=True``: their forward-mode rule (the gradient
rule, applied to the tangent: a diagonal Jacobian) and their batching rule
(``Broadcasting``) follow from that, so ``tf.autodiff.ForwardAccumulator`` and
``tf.vectorized_map`` need nothing more here. ``gelu_grad``'s kernels take two inputs of
one shape (they do not broadcast), so it has a batching rule of its own.

The entry point ``gelu = "tapeflow_gelu.ops:lib"`` (group ``tapeflow``) names ``lib``:
tapeflow registers it when it loads its plugins. ``import tapeflow_gelu`` imports
tapeflow first, which loads this module through the entry point; so this module
must not call tapeflow ops at import time (only inside functions).
"""

from __future__ import annotations

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError
from tapeflow.plugins import BuildContext, Library

from . import k_cpu, k_cuda, k_opencl

lib = Library("gelu")
FLOATS = ("float16", "float32", "float64")


# `approximate` takes True/False or the spellings "tanh"/"none" (checked by the kernels'
# tanh_form), so it is declared "any" instead of the bool its default would make it.
@lib.op(elementwise=True, attr_types={"approximate": "any"})
def gelu(features, approximate=False, name=None):
    """Gaussian Error Linear Unit: ``x * Phi(x)``, Phi the standard normal CDF.

    ``approximate=False`` computes it exactly, as ``x/2 * erfc(-x/sqrt(2))`` (accurate
    for x << 0, where ``1 + erf`` cancels); ``approximate=True`` uses the tanh form
    ``x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (PyTorch's ``"tanh"``/``"none"``
    are accepted too). One fused kernel on ``cpu``, ``cuda`` and ``opencl`` devices,
    float16/32/64; differentiable to any order.

    >>> import tapeflow as tf
    >>> from tapeflow_gelu import gelu
    >>> r4 = lambda y: tf.round(y * 1e4) / 1e4   # 4 decimals: the last digit depends on the CPU
    >>> print(r4(gelu(tf.constant([-1.0, 0.0, 1.0]))))
    tf.Tensor([-0.1587  0.      0.8413], shape=(3,), dtype=float32)
    >>> print(r4(tf.ops.gelu.gelu(tf.constant([-1.0, 0.0, 1.0]), approximate=True)))
    tf.Tensor([-0.1588  0.      0.8412], shape=(3,), dtype=float32)
    >>> y = gelu(tf.constant([-5.0, float("-inf")]))   # no cancellation, no -inf * 0
    >>> print(tf.round(y * 1e10) / 1e10)                # 5 significant digits
    tf.Tensor([-1.4333e-06 -0.0000e+00], shape=(2,), dtype=float32)
    """


@lib.op(elementwise=True, attr_types={"approximate": "any"})
def gelu_grad(gradients, features, approximate=False, name=None):
    """``gradients * GELU'(features)`` in one fused kernel: GELU's gradient op (like
    ``ReluGrad``), itself differentiable (its gradient is written with tapeflow ops).

    >>> import tapeflow as tf
    >>> from tapeflow_gelu import gelu_grad
    >>> y = gelu_grad(tf.ones([2]), tf.constant([0.0, 1.0]))
    >>> print(tf.round(y * 1e4) / 1e4)   # 4 decimals: the last digit depends on the CPU
    tf.Tensor([0.5    1.0833], shape=(2,), dtype=float32)
    """


for _dev, _mod in (("cpu", k_cpu), ("cuda", k_cuda), ("opencl", k_opencl)):
    lib.kernels(_dev, _mod.build(BuildContext(None, _dev)))    # one table per device type


@lib.infer(gelu)
def _gelu_infer(shapes, dtypes, attrs):
    return [(shapes[0], dtypes[0])]


@lib.infer(gelu_grad)
def _gelu_grad_infer(shapes, dtypes, attrs):
    if tuple(shapes[0]) != tuple(shapes[1]):
        raise InvalidArgumentError(f"gradients and features must have the same shape, got "
                                   f"{tuple(shapes[0])} and {tuple(shapes[1])}")
    return [(shapes[1], dtypes[1])]


@lib.gradient(gelu)
def _gelu_gradient(ctx, dy):
    return gelu_grad(dy, ctx.inputs[0], approximate=ctx.attrs["approximate"])


@lib.gradient(gelu_grad)
def _gelu_grad_gradient(ctx, ddx):
    dy, x = ctx.inputs
    approximate = ctx.attrs["approximate"]
    needs = ctx.needs or (True, True)
    d_dy = gelu_grad(ddx, x, approximate=approximate) if needs[0] else None
    d_x = ddx * dy * second_derivative(x, approximate) if needs[1] else None
    return d_dy, d_x


@lib.batch(gelu_grad)
def _gelu_grad_batch(ctx, dy, x):
    # (replaces the derived Broadcasting: the kernels refuse inputs of different shapes,
    # so an input without the batch -- x, in a Jacobian's rows of dy -- is tiled to it)
    full = (dy if ctx.batched[0] else x).shape
    dy, x = (t if b else tf.broadcast_to(t, full) for t, b in zip((dy, x), ctx.batched))
    return gelu_grad(dy, x, approximate=ctx.attrs["approximate"])


def second_derivative(x, approximate=False):
    """GELU''(x), written with tapeflow ops (so it differentiates again: third order).

    exact: ``phi(x) (2 - x^2)``; tanh, with ``s = sigmoid(z)``, ``z = 2u``,
    ``a = dz/dx``, ``b = d2z/dx2``: ``s (1 - s) (2a + x b + x a^2 (1 - 2s))``. The same
    clamps as the kernels keep ``0 * inf`` out of the far tails, where GELU'' is 0.
    """
    if not k_cpu.tanh_form(approximate):
        xc = tf.clip_by_value(x, -k_cpu.EXACT_CLAMP, k_cpu.EXACT_CLAMP)
        x2 = xc * xc
        return k_cpu.INV_SQRT_2PI * tf.exp(-0.5 * x2) * (2.0 - x2)
    xc = tf.clip_by_value(x, -k_cpu.TANH_CLAMP, k_cpu.TANH_CLAMP)
    x2 = xc * xc
    c2 = 2.0 * k_cpu.C
    z = c2 * xc * (1.0 + k_cpu.K * x2)
    s, sc = tf.sigmoid(z), tf.sigmoid(-z)
    a = c2 * (1.0 + 3.0 * k_cpu.K * x2)
    b = (6.0 * c2 * k_cpu.K) * xc
    return s * sc * (2.0 * a + xc * b + xc * a * a * (sc - s))
