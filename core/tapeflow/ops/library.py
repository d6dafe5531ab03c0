"""The core's op library: the built-in ops are declared with the public op API a
plugin uses, one :class:`~tapeflow.plugins.Library` named ``tapeflow`` (the core's
namespace: ``tapeflow::MatMul``, found by its short name ``MatMul`` too).

The op modules (``math``, ``array``, ...) declare each op with :func:`defop`, which
is ``LIB.define`` with the attr types of the table below; ``import tapeflow``
registers ``LIB`` like any plugin (``tapeflow.plugins.register``).

>>> from tapeflow.ops.library import LIB
>>> LIB.namespace, any(op.name == "MatMul" for op in LIB.ops)
('tapeflow', True)
"""

from __future__ import annotations

import math

import numpy as np

from ..plugins.library import Library
from ..runtime import devices as _devs
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.dispatch import execute
from ..runtime.registry import BROADCASTING, CORE_NAMESPACE, OpDef, elementwise_jvp

#: the built-in op library (registered by ``import tapeflow``)
LIB = Library(CORE_NAMESPACE)

#: (re-exported for the op modules: the shared batching rule of elementwise and
#: broadcasting ops, and the diagonal JVP of an elementwise op, which ``OpDef`` derives)
__all__ = ["LIB", "BROADCASTING", "elementwise_jvp", "defop", "batch_axis", "rerun",
           "batch_one_axis", "batch_with_shape", "real_number", "check_fits", "flag"]


#: the types of the built-in ops' attrs, by attr name (kinds: tapeflow.shapes); an op whose
#: attr of that name is of another kind says so in its defop (``attr_types=``)
ATTR_TYPES = {
    "adjoint": "bool", "approximate": "bool", "keepdims": "bool", "transpose_a": "bool",
    "full_matrices": "bool",
    "transpose_b": "bool", "alpha": "float", "mean": "float", "stddev": "float",
    "batch_dims": "int", "counter": "uint", "key": "uint", "depth": "int",
    "num_segments": "int", "num": "int", "num_rows": "int", "num_columns": "int?",
    "batch_shape": "shape", "dilations": "sizes", "strides": "sizes", "ksize": "sizes",
    "filter_sizes": "shape", "input_sizes": "shape", "orig_input_shape": "shape",
    "multiples": "shape", "shape": "shape", "perm": "perm", "paddings": "paddings",
    "data_format": "enum:NHWC|NCHW", "mode": "enum:REFLECT|SYMMETRIC", "equation": "str",
    # (fill values: checked against the op's dtype by its check, complex numbers too)
    "constant_values": "any", "on_value": "any", "off_value": "any", "value": "any",
    "start": "float", "stop": "float", "limit": "float",
    "delta": "float", "output_type": "dtype", "out_type": "dtype", "axis": "axis",
}


def _attr_types(attrs, declared):
    """The attr types of a built-in op: :data:`ATTR_TYPES` by attr name, then the op's
    own ``declared`` ones (``attr_types=`` in its :func:`defop`) on top."""
    out = {}
    for attr, default in (attrs or {}).items():
        kind = ATTR_TYPES.get(attr)
        if attr == "axis" and default is None:        # reductions: None or sorted axes
            kind = "axes?"
        if attr == "dtype":
            kind = "dtype?" if default is None else "dtype"
        if kind is not None:
            out[attr] = kind
    out.update(declared or {})
    return out


def defop(name, *, attr_types=None, **kwargs) -> OpDef:
    """Declare a built-in op: ``LIB.define`` (arguments of
    :class:`~tapeflow.plugins.OpDef`) with its attrs typed from :data:`ATTR_TYPES` by
    name, and ``attr_types=`` for this op's own exceptions (a call with the wrong number
    of inputs never reaches its ``check``: ``OpDef.__call__`` counts them).

    The rules that follow from the declaration are the OpDef's own, as for a plugin's op
    (an ``elementwise=True``/``broadcast=True`` op's batching rule :data:`BROADCASTING`,
    an elementwise op's diagonal JVP :func:`elementwise_jvp`). The op module writes every
    other rule right under the op's ``defop`` (``_MATMUL.def_jvp(Multilinear())``,
    ``@_MATMUL.def_batch``)."""
    kwargs["attr_types"] = _attr_types(kwargs.get("attrs"), attr_types)
    return LIB.define(name, **kwargs)


# --- rules shared by several op modules -------------------------------------------------

def batch_axis(a, rank):
    """Axis ``a`` of an example of rank ``rank``, in the batched tensor (a batching
    rule's helper: the batch is dimension 0)."""
    return (a % rank if rank else 0) + 1


def rerun(ctx, inputs, **changes):
    """The batching rule's op, run on ``inputs`` with attrs ``changes`` changed."""
    return execute(ctx.op, inputs, {**ctx.attrs, **changes})


def batch_one_axis(ctx, x):
    """Batching rule of an op on one axis (``axis`` attr) of one input: shift it."""
    return rerun(ctx, (x,), axis=batch_axis(ctx.attrs["axis"], len(x.shape) - 1))


def batch_with_shape(ctx, *inputs):
    """Batching rule of an op whose ``shape`` attr is its output's (Reshape, random
    draws): prepend the batch to it."""
    return rerun(ctx, inputs, shape=(ctx.size,) + tuple(ctx.attrs["shape"]))


# --- scalar arguments of the public functions -------------------------------------------

def _short(v):
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."


def _where(x=None):
    """The device an op on ``x`` would run on (named in errors raised before dispatch)."""
    d = getattr(x, "_device", None)
    return d if d is not None else (_devs.current_device() or _devs.default_device())


def real_number(v, what, op, x=None):
    """``v`` -- a Python or NumPy real number, or a one-element real tensor or array --
    as a Python int or float; anything else (a string, None, a complex number, a bool,
    a list) raises InvalidTypeError naming ``op`` (``what``: the argument, e.g.
    ``"leaky_relu: alpha"``; ``x``: the input, for the device named).

    >>> from tapeflow.ops.library import real_number
    >>> real_number(0.5, "leaky_relu: alpha", "LeakyRelu")
    0.5
    >>> real_number(1j, "leaky_relu: alpha", "LeakyRelu")
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidTypeError: leaky_relu: alpha must be a real number, got complex 1j ...
    """
    if hasattr(v, "numpy") and not isinstance(v, np.ndarray):
        v = v.numpy()
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise InvalidArgumentError(f"{what} must be a scalar, got an array of shape "
                                       f"{list(v.shape)}", op=op, device=_where(x))
        v = v.reshape(())[()]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InvalidTypeError(f"{what} must be a real number, got {type(v).__name__} "
                               f"{_short(v)}", op=op, device=_where(x))
    return v


def check_fits(v, dtype, what, op, x=None, device=None):
    """Refuse a scalar value ``v`` that a tensor of ``dtype`` cannot hold without
    silently losing part of it (TensorFlow's rule for ``tf.constant(v, dtype)``): a
    complex number in a real dtype (its imaginary part), a non-integral or non-finite
    float in an integer dtype, an integer outside the integer dtype's range (``x``: the
    input, or ``device``: the device named).

    >>> import tapeflow as tf
    >>> from tapeflow.ops.library import check_fits
    >>> check_fits(1 + 2j, tf.float32, "fill value", "Fill")
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidTypeError: fill value (1+2j) is complex but the result's dtype is ...
    """
    if isinstance(v, (complex, np.complexfloating)):
        if not dtype.is_complex:
            raise InvalidTypeError(
                f"{what} {_short(v)} is complex but the result's dtype is {dtype.name}: the "
                "imaginary part would be dropped; pass a complex dtype (tf.complex64) or a "
                "real value", op=op, device=device or _where(x))
        return
    if not dtype.is_integer or isinstance(v, (bool, np.bool_)):
        return
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v) or v != int(v):
            raise InvalidArgumentError(
                f"{what} {_short(v)} is not an integer but the result's dtype is "
                f"{dtype.name}; pass an integer value or a floating dtype", op=op,
                device=device or _where(x))
        v = int(v)
    if isinstance(v, (int, np.integer)):
        info = np.iinfo(dtype.np)
        if not info.min <= int(v) <= info.max:
            raise InvalidArgumentError(
                f"{what} {v} does not fit in {dtype.name} [{info.min}, {info.max}]; pass "
                "a wider dtype or a smaller value", op=op, device=device or _where(x))


def flag(v, what, op, x=None):
    """A flag (``keepdims``, ``transpose_a``, ``exclusive`` ...) as a bool: True/False,
    a NumPy bool, the ints 0 and 1 or a 0-d bool/int tensor of them, or None (False, as
    TensorFlow's reductions read ``keepdims=None``). Anything else (a string, a complex
    number, 0.5) raises InvalidTypeError naming ``op``: its truth value would be a
    silent guess.

    >>> from tapeflow.ops.library import flag
    >>> flag(1, "cumsum: exclusive", "Cumsum")
    True
    >>> flag("no", "cumsum: exclusive", "Cumsum")
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidTypeError: cumsum: exclusive must be a bool, got str 'no' [Op:Cumsum] ...
    """
    if v is None:
        return False
    u = v
    if hasattr(u, "numpy") and not isinstance(u, np.ndarray):
        u = u.numpy()
    if isinstance(u, np.ndarray) and u.ndim == 0:
        u = u[()]
    if isinstance(u, (bool, np.bool_)) or (isinstance(u, (int, np.integer)) and u in (0, 1)):
        return bool(u)
    raise InvalidTypeError(f"{what} must be a bool, got {type(v).__name__} {_short(v)}",
                           op=op, device=_where(x))
