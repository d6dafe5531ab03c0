"""Samples, dtypes and tolerances: which dtypes a spec is tested in on a device type,
its samples for a dtype (a deterministic rng per spec and dtype; bfloat16 from the
float32 samples), the tolerance of a comparison, the arguments to differentiate, and
samples of the same signature with other values (for the traced and batched checks)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ._common import _BF16, _kind, _seed, _tf
from .devices import _op_kernel


#: (rtol, atol) per result dtype when the spec gives none; integers and bools compare exactly
DEFAULT_TOL = {
    # bfloat16 keeps 8 significant bits: one rounding is 2**-9 ~ 2e-3 relative, and an op
    # computed in float32 from rounded inputs and rounded again is off by a few of those
    "bfloat16": (2e-2, 2e-2),
    "float16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-7, 1e-7),
}


def dtypes_under_test(spec, device_type):
    """``(dtypes, explicit, excluded)`` for ``spec`` on ``device_type``.

    ``explicit``: the dtypes were declared (by the kernel or the spec), so a dtype
    without samples is a gap worth showing; ``excluded``: ``{dtype name: reason}``
    for spec dtypes the kernel does not declare.
    """
    tf = _tf()
    op, entry = _op_kernel(spec, device_type)
    kdt = entry.dtypes if entry is not None else None
    excluded = {}
    if spec.dtypes is not None:
        sd = [tf.as_dtype(d) for d in spec.dtypes]
        if kdt is not None:
            for d in sd:
                if d not in kdt:
                    excluded[d.name] = (f"the {spec.op} kernel on '{device_type}' does not declare "
                                        f"{d.name}")
            sd = [d for d in sd if d in kdt]
        return sd, True, excluded
    # complex dtypes are tested by the specs that name them (samples with imaginary
    # parts and complex references: specs/complex.py), not by casting real samples
    if kdt is not None:
        return [d for d in kdt if not d.is_complex], True, excluded
    return [d for d in tf.dtypes.ALL_DTYPES if not d.is_complex], False, excluded


def samples_for(spec, dtype):
    """``spec.samples(dtype, rng)`` with a deterministic rng per (spec, dtype).

    ``dtype`` is given to the samples function as a tapeflow ``DType`` (``tf.float32``:
    ``.name``, ``.np`` its NumPy dtype, ``.is_floating``, ``.is_integer``,
    ``.is_bool``; it compares equal to its name and NumPy dtype, and ``dtype is
    tf.float32`` holds), which NumPy accepts as a dtype there: ``np.ones(3, dtype)``,
    ``x.astype(dtype)`` (``DType.dtype`` is its NumPy dtype)."""
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    rng = np.random.default_rng(_seed(spec.name, dtype.name))
    if dtype is tf.bfloat16:
        # specs write samples with NumPy's float kinds ("f"); bfloat16 is kind "V": the
        # float32 samples, rounded to bfloat16 (a ``dtype`` kwarg float32 becomes bfloat16)
        return [_to_bf16(s, tf) for s in _draw(spec, tf.float32, rng)]
    return _draw(spec, dtype, rng)


def _to_bf16(sample, tf):
    def conv(a):
        if isinstance(a, np.ndarray) and a.dtype == np.float32:
            return a.astype(_BF16)
        return tf.bfloat16 if a is tf.float32 else a
    kw = {k: conv(v) for k, v in sample.kwargs.items()}
    ref_kw = (None if sample.ref_kwargs is None else
              {k: conv(v) for k, v in sample.ref_kwargs.items()})
    return dataclasses.replace(sample, args=tuple(conv(a) for a in sample.args), kwargs=kw,
                               ref_kwargs=ref_kw)


def _draw(spec, dtype, rng):
    return list(spec.samples(dtype, rng) or [])


def tolerance(spec, case_dtype, out_dtype):
    """(rtol, atol) for a result of ``out_dtype`` in a case of ``case_dtype``, or
    ``None`` for an exact comparison.

    Float results use the tolerance of the case dtype when that is a float dtype
    (float16 inputs compare loosely even if the op returns float32), else of the
    result dtype; ``spec.tol`` overrides :data:`DEFAULT_TOL`. Integer and bool
    results compare exactly unless ``spec.tol`` names their dtype.
    """
    od = np.dtype(out_dtype)
    odn = "bool" if od.kind == "b" else od.name
    if _kind(od) == "f":
        cd = getattr(case_dtype, "name", case_dtype)
        key = cd if cd in DEFAULT_TOL else odn
        return spec.tol.get(key) or DEFAULT_TOL.get(key, (1e-5, 1e-5))
    return spec.tol.get(odn)


def _grad_argnums(sample):
    if sample.grad_argnums is not None:
        return tuple(sample.grad_argnums)
    return tuple(i for i, a in enumerate(sample.args)
                 if isinstance(a, np.ndarray) and a.dtype.kind == "f")


def _signature(x):
    """Arrays by shape and dtype, everything else by value (for matching samples)."""
    if isinstance(x, np.ndarray):
        return ("A", x.shape, x.dtype.str)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_signature(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), _signature(v)) for k, v in x.items())))
    return ("P", type(x).__name__, repr(x))


def _arrays(x):
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _arrays(v)]
    if isinstance(x, dict):
        return [a for v in x.values() for a in _arrays(v)]
    return []


def _same_values(a, b):
    return all(np.array_equal(x, y, equal_nan=_kind(x.dtype) in "fc")
               for x, y in zip(_arrays(a.args), _arrays(b.args)))


def _other_values(sample, index, first, second):
    """A sample with ``sample``'s signature (shapes, dtypes, Python arguments, kwargs)
    but other array values: from a second draw of the spec's samples (another rng
    seed; the one at the same index preferred), else another sample of the first
    draw; ``None`` when the spec has none (fixed values, empty arrays)."""
    key = (_signature(sample.args), _signature(sample.kwargs))
    ordered = ([second[index]] if index < len(second) else []) + list(second) + list(first)
    for cand in ordered:
        if cand is sample or (_signature(cand.args), _signature(cand.kwargs)) != key:
            continue
        if not _same_values(cand, sample):
            return cand
    return None
