""":func:`opcheck`: one call for plugin authors, checking an op (an OpSpec, an OpDef
or a function built on tapeflow ops) on every available device, with samples cast
to every dtype its kernels declare and 0-d and empty edge samples."""

from __future__ import annotations

import dataclasses

import numpy as np

from ...runtime.registry import OPS, OpDef
from ..opinfo import OpSpec, Sample
from ._common import _tf
from .cases import check_spec


def _values_as(a, dtype):
    """Float sample values ``a`` as integer or bool values of ``dtype`` (a DType): bool
    from ``a > 0``; integers rounded (absolute values for unsigned dtypes), NaN as 0,
    clipped to the dtype's range."""
    if dtype.is_bool:
        return a > 0
    info = np.iinfo(dtype.np)
    lo, hi = float(info.min), float(info.max)
    if int(hi) > info.max:                      # (int64: the float rounds up past the max)
        hi = float(np.nextafter(hi, 0.0))
    with np.errstate(all="ignore"):
        v = np.nan_to_num(np.asarray(a, np.float64), nan=0.0, posinf=hi, neginf=lo)
        if dtype.is_unsigned:
            v = np.abs(v)
        return np.clip(np.round(v), lo, hi).astype(dtype.np)


def _fixed_samples(samples, declared=()):
    """A list of Samples (or argument tuples) -> ``samples(dtype, rng)``: float array
    arguments are cast to each float dtype, and to each integer and bool dtype in
    ``declared`` (declared by the op's kernels or by ``opcheck(dtypes=)``) with
    :func:`_values_as`; samples without float arrays run for the dtype of their first
    array. Gradients are checked in float64 only, so never for the integer and bool
    samples."""
    fixed = [s if isinstance(s, Sample) else Sample(tuple(s) if isinstance(s, (list, tuple))
                                                   else (s,)) for s in samples]
    declared = tuple(declared)

    def gen(dtype, rng):
        out = []
        for s in fixed:
            arrays = [a for a in s.args if isinstance(a, np.ndarray)]
            has_float = any(a.dtype.kind == "f" for a in arrays)
            if has_float and (dtype.is_floating or dtype in declared):
                cast = ((lambda a: a.astype(dtype.np)) if dtype.is_floating
                        else (lambda a: _values_as(a, dtype)))
                args = tuple(cast(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                             else a for a in s.args)
                out.append(dataclasses.replace(s, args=args, kwargs=dict(s.kwargs)))
            elif not has_float and arrays and arrays[0].dtype == dtype.np:
                out.append(s)
        return out

    return gen


def _declared_dtypes(op_name, dtypes):
    """The dtypes declared for the op: ``dtypes`` when given, else every dtype its
    kernels declare (those declaring "any dtype" add none)."""
    tf = _tf()
    if dtypes is not None:
        return {tf.as_dtype(d) for d in dtypes}
    opdef = OPS.get(op_name) if op_name else None
    out = set()
    for entry in (opdef.kernels.values() if opdef is not None else ()):
        out.update(entry.dtypes or ())
    return out


def _empty_shapes(shapes):
    """Shapes of size 0, one per input shape, that still broadcast together: axis 0 of
    the broadcast shape becomes 0 (inputs of lower rank, or with a 1 there that is
    broadcast, keep theirs); 0-d inputs together become ``(0,)``."""
    try:
        b = np.broadcast_shapes(*shapes)
    except ValueError:                # not broadcastable: axis 0 of each
        return [(0,) + tuple(s[1:]) for s in shapes]
    if not b:
        return [(0,)] * len(shapes)
    return [(0,) + tuple(s[1:]) if len(s) == len(b) and (s[0] == b[0] or b[0] == 1)
            else tuple(s) for s in shapes]


def edge_samples(sample, index=0):
    """A 0-d and an empty (size-0) sample derived from ``sample`` (the ``index``-th):
    every NumPy array argument becomes its first element as a 0-d array, then an
    empty array (:func:`_empty_shapes`: the inputs still broadcast together); other
    arguments and the keywords are kept. The empty sample checks no gradients. For
    ops that compute each output element from the matching input elements (see
    :func:`opcheck`'s ``edge_cases``)."""
    arrays = [a for a in sample.args if isinstance(a, np.ndarray)]
    if not arrays:
        return []
    src = f"sample {index}{f' {sample.name!r}' if sample.name else ''}"
    out = []
    if all(a.size for a in arrays):
        args = tuple(np.array(a.reshape(-1)[0]) if isinstance(a, np.ndarray) else a
                     for a in sample.args)
        out.append(dataclasses.replace(sample, args=args, name=f"0-d, from {src}"))
    shapes = iter(_empty_shapes([a.shape for a in arrays]))
    args = tuple(np.zeros(next(shapes), a.dtype) if isinstance(a, np.ndarray) else a
                 for a in sample.args)
    out.append(dataclasses.replace(sample, args=args, grad_argnums=(),
                                   name=f"empty, from {src}"))
    return out


def _with_edge_cases(gen):
    """``samples(dtype, rng)`` plus :func:`edge_samples` of its first sample."""
    def samples(dtype, rng):
        base = list(gen(dtype, rng) or [])
        return base + edge_samples(base[0]) if base else base
    samples.__name__ = getattr(gen, "__name__", "samples")
    return samples


def opcheck(spec_or_fn, samples=None, *, ref=None, check=None, errors=(), op=None, name=None,
            dtypes=None, grad_order=2, tol=None, grad_tol=(1e-4, 1e-5), devices=None,
            check_dtype=True, edge_cases=None,
            kinds=("forward", "noncontiguous", "gradients", "errors", "traced")):
    """Check an op in one call, on every available device: forward against a NumPy
    reference for every dtype, non-contiguous inputs, gradients to ``grad_order``
    (float64, finite differences), the error contract, and the op inside
    :func:`tapeflow.function` (traced, replayed, replayed with other values).

    What runs:

    * **dtypes**: every dtype the op's kernel on the device declares (``op``), or
      ``dtypes``. A list of samples is cast to each: float arrays to the float dtypes,
      and, for integer and bool dtypes the kernels (or ``dtypes``) declare, to rounded
      integers (clipped to the dtype's range, absolute values for unsigned) and to
      ``x > 0`` for bool. A ``samples`` function decides for itself: it receives each
      dtype as a tapeflow ``DType`` (``dtype.np`` is its NumPy dtype, and NumPy accepts
      the DType itself: ``np.ones(3, dtype)``) and returns ``[]`` for dtypes it has no
      samples for. Gradients are checked in float64 only, never for integer or bool.
    * **non-contiguous inputs** (:data:`LAYOUTS`), each sample with an array argument
      of rank >= 1 once per layout: an ``"offset view"`` (the data does not start at
      its buffer's first element), ``"transposed"`` (rank >= 2: memory order is not
      index order, and strided) and ``"broadcast (stride 0)"`` (axis 0 has stride 0;
      the values are the sample's first slice along axis 0 repeated, and the
      reference gets the same; not for random ops, whose ``check`` needs distinct
      values). A failure names the layout; a layout a device cannot hold is skipped.
    * **edge cases**: a 0-d and an empty (size-0) sample derived from the first sample
      of each dtype (:func:`edge_samples`), when ``edge_cases`` is True, or when it is
      None (the default) and the op is declared ``elementwise=True`` (every output
      element computed from the matching, broadcast, input elements: such an op accepts
      any shape). Ops that are only ``broadcast=True`` (MatMul broadcasts its batch
      dimensions but needs rank 2) get none unless asked.
    * **references** may compute in any precision and return any array-like: a float
      reference more precise than the case dtype (float64 for a float32 op) is rounded
      to it, Python values take the result's dtype (:func:`reference_as_result`);
      tolerances are those of the case dtype (:data:`DEFAULT_TOL`, ``tol``).
    * **errors**: each :class:`ErrorSample` must raise its error type with ``[Op:``
      and the device name in the message, and ``match``, a regular expression, found
      in it (``re.search``, as ``pytest.raises(match=)``).

    Args:
        spec_or_fn: an :class:`OpSpec` (the other arguments are then ignored, except
            ``edge_cases=True``), an :class:`~tapeflow.plugins.OpDef` (called with its
            attrs as keywords), or a function built on tapeflow ops (an op's public
            function from ``@lib.op`` carries its OpDef).
        samples: ``samples(dtype, rng) -> [Sample]`` (``dtype``: a tapeflow DType,
            ``rng``: a seeded ``numpy.random.Generator``), or a list of Samples (or of
            argument tuples), whose float arrays are cast to each dtype tested.
        ref: NumPy reference ``ref(*numpy_args, **kwargs)``; or ``check(out, *args,
            **kwargs)`` validating the (host) output of a random op.
        errors: :class:`ErrorSample` s, each must raise with ``[Op:``, the device
            name and a match of the regular expression ``match`` in the message.
        op: the op name whose kernel dtypes decide which dtypes are tested
            (default: the OpDef's name, else every dtype the samples provide).
        dtypes: dtype names to test instead of the kernels' (intersected with them).
        devices: device names (default: every available device).
        edge_cases: add 0-d and empty samples (None: when the op is elementwise).

    Returns ``{"passed": [...], "skipped": [(check, reason)]}``; raises AssertionError
    listing every failed check.

    >>> import numpy as np, tapeflow as tf
    >>> from tapeflow.testing import opcheck, Sample
    >>> report = opcheck(tf.multiply, [Sample((np.ones((2, 3)), np.arange(3.0)))], ref=np.multiply)
    >>> "gradients[multiply-cpu:0]" in report["passed"]
    True
    """
    if isinstance(spec_or_fn, OpSpec):
        spec = spec_or_fn
        if edge_cases:
            spec = dataclasses.replace(spec, samples=_with_edge_cases(spec.samples))
    else:
        fn = spec_or_fn
        if isinstance(fn, OpDef):
            op = op or fn.name
        elif isinstance(getattr(fn, "op", None), OpDef):      # a Library op function
            op = op or fn.op.name
        if samples is None:
            raise TypeError("opcheck needs samples (a list of Samples or samples(dtype, rng))")
        gen = (samples if callable(samples)
               else _fixed_samples(samples, _declared_dtypes(op, dtypes)))
        if edge_cases is None:
            opdef = OPS.get(op) if op else None
            edge_cases = bool(opdef is not None and opdef.elementwise)
        if edge_cases:
            gen = _with_edge_cases(gen)
        if ref is None and check is None:
            kinds = tuple(k for k in kinds if k not in ("forward", "noncontiguous", "traced"))
        if name is None:
            name = fn.name if isinstance(fn, OpDef) else getattr(fn, "__name__", "op")
        spec = OpSpec(name=name, fn=fn, ref=ref, samples=gen, op=op or "", dtypes=dtypes,
                      grad_order=grad_order, errors=list(errors), tol=dict(tol or {}),
                      grad_tol=tuple(grad_tol), check=check, check_dtype=check_dtype)
    return check_spec(spec, devices=devices, kinds=kinds)
