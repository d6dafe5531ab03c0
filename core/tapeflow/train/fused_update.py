"""The fused optimizer update: one kernel per variable and step (issue 34).

:func:`apply_fused` runs an op of :mod:`tapeflow.ops.fused` (``ApplyAdam``...) for one
Variable and its slots, and stores the results in them, with the Variables' buffer
donation rule (docs/decisions.md sections 10 and "Fused optimizer updates"):

* it returns False, changing nothing, when the op has no kernel for the Variable's
  device type and dtype (float16/bfloat16 on NumPy, a backend without the op): the
  optimizer then runs its op-by-op update;
* while a ``tf.function`` traces, the values are read with ``read_value()`` and the
  results stored with ``assign``, so the trace records the reads, the op and the
  writes exactly as it records the op-by-op update;
* eagerly, it takes the locks of the Variable and its slots (in creation order, the
  order a ``tf.function`` replay takes them) and, when every buffer is a host NumPy
  array nobody else can see (reference counts: no tape record, no user reference, no
  view), calls the kernel with ``inplace=True``: the update is written into the
  buffers. Otherwise it runs the op (new arrays) and stores its results. Readers take
  a Variable's value under its lock, so none sees a half-written buffer.

The work is split in two so that ``apply_gradients`` stays all or nothing:
:func:`prepare_fused` (the kernel, the coefficients cast and moved, the attrs: what can
fail) runs for every variable of a step before :func:`run_fused` writes the first one.

``TAPEFLOW_FUSED_OPTIMIZERS=0`` turns the fused path off for the process (read at
import); ``optimizer.fused = False`` for one optimizer.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..runtime import context as _ctx
from ..runtime.dispatch import constant as _constant
from ..runtime.dispatch import execute
from ..errors import InvalidArgumentError
from ..runtime.tensor import Tensor, wrap
from ..ops import math as _m

__all__ = ["FUSED_DEFAULT", "apply_fused", "kernel_for", "prepare_fused", "run_fused",
           "scalar_coefficient"]

#: whether optimizers use the fused kernels unless told otherwise
FUSED_DEFAULT = os.environ.get("TAPEFLOW_FUSED_OPTIMIZERS", "1").strip().lower() not in (
    "0", "false", "no", "off")

_tracing = _ctx.tracing
# sys.getrefcount of a value Tensor / its array in _donatable when only the Variable holds
# it: the Variable's _value (or the Tensor's _data), the `cur` list's entry (the
# Tensor only), and getrefcount's argument
_DONATE_T = 3
_DONATE_A = 2


def scalar_coefficient(value, var, cache, key, dev=None, dtype=None):
    """``value`` (a Python number or a 0-d Tensor) as a 0-d Tensor of ``var``'s dtype on
    its device, cached in ``cache`` per (key, device, dtype) for one step. A Python
    number converts as the op-by-op update's weak scalar does (rounded to the dtype
    once); a Tensor is cast, then moved. ``dev``, ``dtype``: ``var``'s, when known.

    A Tensor of any other shape is refused, never reshaped: the optimizer validates its
    hyperparameters before the step (``Optimizer._check_hyperparameters``), so this is
    a guard, and the fused and op-by-op updates see the same coefficient."""
    if dev is None:
        dev, dtype = var._device, var.dtype
    k = (key, dev, dtype)
    c = cache.get(k)
    if c is None:
        if isinstance(value, Tensor):
            if len(value.shape):
                raise InvalidArgumentError(
                    f"optimizer coefficient '{key or 'lr'}' must be a scalar (0-d), got "
                    f"shape {tuple(value.shape)}. No variable was updated.")
            c = value
            if c.dtype != dtype:
                c = _m.cast(c, dtype)
            if c._device is not dev:
                c = c.to(dev)
        else:
            c = _constant(value, dtype=dtype, device=dev)
        cache[k] = c
    return c


def _kernel(op, dev, dtype):
    """The kernel function of ``op`` for device ``dev`` and ``dtype``, or None."""
    entry = op.kernels.get(dev.type)
    if entry is None:
        return None
    npdt = dtype.np
    if entry.np_dtypes is not None and npdt not in entry.np_dtypes:
        return None
    if entry.variants:
        return entry.variants.get(npdt, entry.fn)
    return entry.fn


def _donatable(cur):
    """Whether every value Tensor of ``cur`` and its array are seen by nobody but its
    Variable (the rule of ``Variable._update``)."""
    getrc = sys.getrefcount
    for i in range(len(cur)):
        t = cur[i]
        if getrc(t) > _DONATE_T + 1:     # (+1: the local `t`)
            return False
        a = t._data
        ok = (type(a) is np.ndarray and a.base is None and a.flags.writeable
              and getrc(a) <= _DONATE_A + 1)
        del a, t
        if not ok:
            return False
    return True


def _step_attrs(op, attrs, cache):
    """``attrs`` with real numbers as floats (the ops' attr type), once per op and step."""
    a = cache.get(op)
    if a is None:
        a = cache[op] = {k: v if type(v) is bool else float(v) for k, v in attrs.items()}
    return a


def kernel_for(op, var):
    """The kernel of ``op`` for ``var``'s device and dtype, or None (no fused update)."""
    return _kernel(op, var._device, var.dtype)


def prepare_fused(op, var, coefs, attrs, cache, fn=None):
    """Everything the fused update ``op`` of ``var`` needs but the write: ``(fn, the
    coefficient Tensors, attrs)``, or None when the op has no kernel for the Variable
    (the caller runs the op-by-op update). ``coefs``: ``(name, value)`` pairs
    (:func:`scalar_coefficient`); ``cache``: the step's (dropped after it); ``fn``: the
    kernel when the caller looked it up. Writes nothing."""
    dev = var._device
    dtype = var.dtype
    if fn is None:
        fn = _kernel(op, dev, dtype)
        if fn is None:
            return None
    cs = [scalar_coefficient(value, var, cache, name, dev, dtype) for name, value in coefs]
    return fn, cs, _step_attrs(op, attrs, cache)


def run_fused(op, plan, var, slots, grad):
    """Write the fused update ``op`` of ``var`` and its ``slots`` (Variables) with the
    validated gradient ``grad`` and the ``plan`` of :func:`prepare_fused`. Called under
    ``stop_all_recording()``; only the kernel itself can fail here (out of memory)."""
    fn, cs, attrs = plan
    dev = var._device
    owners = (var, *slots)
    if _tracing[0]:
        outs = execute(op, (*[v.read_value() for v in owners], grad, *cs), attrs)
        for v, o in zip(owners, outs if len(owners) > 1 else (outs,)):
            v.assign(o)
        return
    locks = [v._lock for v in sorted(owners, key=_creation)]
    for lk in locks:
        lk.acquire()
    try:
        cur = [v._value for v in owners]
        if dev.is_host and _donatable(cur):
            arrays = [t._data for t in cur]
            del cur
            outs = fn(*arrays, grad._data, *[c._data for c in cs], inplace=True, **attrs)
            del arrays
            for v, a in zip(owners, outs if len(owners) > 1 else (outs,)):
                v._value = wrap(a, dev)
        else:
            outs = execute(op, (*cur, grad, *cs), attrs)
            del cur
            for v, o in zip(owners, outs if len(owners) > 1 else (outs,)):
                v._value = o
    finally:
        for lk in reversed(locks):
            lk.release()


def apply_fused(op, var, slots, grad, coefs, attrs, cache):
    """:func:`prepare_fused` then :func:`run_fused` for one variable: True when done,
    False (nothing changed) when the op has no kernel for the Variable."""
    plan = prepare_fused(op, var, coefs, attrs, cache)
    if plan is None:
        return False
    run_fused(op, plan, var, slots, grad)
    return True


def _creation(v):
    return v._id
