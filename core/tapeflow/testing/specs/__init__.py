"""Op test specifications for the conformance suite (PyTorch's OpInfo idea): the spec
format (:class:`OpSpec`, :class:`Sample`, :class:`ErrorSample`), the value helpers the
area modules share, and :func:`all_specs`.

Each family of ops has a module ``tapeflow.testing.specs.<area>`` (:data:`AREAS`)
defining ``SPECS: list[OpSpec]``:

``math``       the elementwise math ops (``tapeflow.math``), complex numbers and the FFTs
``array``      the creation ops (``fill``, ``range``, ``one_hot``...), the random draws
               and the shape ops (reshape, concat, pad, slicing...)
``selection``  selection and gather/scatter (``where``, ``gather``, ``scatter_nd``,
               ``clip_by_value``...), sorting, scans and search
``linalg``     the reductions (``reduce_sum``, ``argmax``...) and ``tapeflow.linalg``
``nn``         ``tf.nn``: activations, softmax, losses, convolutions, pooling, dropout

The suite runs every spec on every available device:

* forward: each :class:`Sample` for each dtype the op's kernel on that device
  declares (or ``OpSpec.dtypes``), against ``ref`` (NumPy) on the host;
* gradients: float64 samples through ``check_grads`` to ``grad_order``;
* errors: each :class:`ErrorSample` raises its error type, whose message names
  the op (``[Op:<name>]``) and the device, and matches ``ErrorSample.match`` (a
  regular expression, searched as ``pytest.raises(match=)`` does).

A sample's ``args`` are NumPy arrays (turned into tensors on the device under
test; the harness also feeds them as non-contiguous views: an offset view,
transposed, and broadcast with stride 0, see
:data:`tapeflow.testing.conformance.LAYOUTS`), or anything else (passed
unchanged: Python scalars, shapes, axes). ``kwargs`` go to both ``fn`` and
``ref``, unless ``ref_kwargs`` is given for the reference.

``samples(dtype, rng)`` receives ``dtype`` as a tapeflow ``DType`` (``tf.float32``;
``dtype.np`` is its NumPy dtype, ``dtype.is_floating`` / ``is_integer`` /
``is_bool`` its kind, and ``dtype is tf.float32`` holds) and NumPy accepts it as a
dtype while samples are drawn: ``np.ones(3, dtype)``, ``x.astype(dtype)``.

>>> import numpy as np, tapeflow as tf
>>> from tapeflow.testing import conformance
>>> spec = OpSpec(name="neg", fn=tf.negative, ref=np.negative, op="Neg",
...               samples=lambda dtype, rng: [Sample((np.arange(3, dtype=dtype),))])
>>> [s.args[0].dtype.name for s in conformance.samples_for(spec, tf.int32)]
['int32']
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tapeflow.errors import InvalidArgumentError


# --- the spec format ----------------------------------------------------------------------

@dataclass
class Sample:
    """One set of arguments for an op: ``fn(*args, **kwargs)``, compared with
    ``ref(*numpy_args, **(ref_kwargs or kwargs))``; NumPy array arguments become
    tensors on the device under test."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    #: which positional args to differentiate (default: every float ndarray arg)
    grad_argnums: tuple | None = None
    ref_kwargs: dict | None = None
    #: a short id for test names ("broadcast", "scalar", "empty", ...)
    name: str = ""


@dataclass
class ErrorSample:
    """Arguments the op must reject: ``fn(*args, **kwargs)`` raises ``error`` (or a
    subclass) with a message naming the op (``[Op:``) and the device, in which the
    regular expression ``match`` is found (``re.search``, like
    ``pytest.raises(match=)``: ``re.escape`` text that holds ``[ ] ( ) . * + ?``)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    error: type = Exception
    #: regular expression searched in the message (besides the op name and device)
    match: str = ""
    name: str = ""


@dataclass
class OpSpec:
    """How to test one op: its function, a NumPy reference and samples per dtype (see
    the module docstring, and :func:`tapeflow.testing.opcheck` for one call)."""

    #: public name, e.g. "add" or "nn.relu" (used in test ids)
    name: str
    #: the tapeflow function under test
    fn: Callable
    #: NumPy reference: ref(*numpy_args, **kwargs) -> ndarray (or a tuple of them, one per
    #: output); any precision (a float64 reference for a float32 op is rounded to float32
    #: before comparing) or Python values (they take the result's dtype)
    ref: Callable
    #: samples(dtype: tapeflow DType, rng: numpy Generator) -> list[Sample]; NumPy takes
    #: the DType as a dtype there (np.ones(3, dtype)); [] means "not for this dtype"
    samples: Callable
    #: the OpDef name whose kernel dtypes decide which dtypes are tested
    op: str = ""
    #: dtypes to test instead of the kernel's declared ones (names)
    dtypes: tuple | None = None
    #: check gradients (float64) to this order; 0 = not differentiable
    grad_order: int = 2
    #: error-contract samples (run once per device)
    errors: list = field(default_factory=list)
    #: forward tolerances per dtype name {"float16": (rtol, atol)}
    tol: dict = field(default_factory=dict)
    #: gradient check tolerances (rtol, atol) in float64
    grad_tol: tuple = (1e-4, 1e-5)
    #: the op is random/non-deterministic: ref(out, *args) validates instead of comparing
    check: Callable | None = None
    #: extra free-form notes for skips: {key: reason}; the runner skips the cases whose
    #: kind ("forward", "noncontiguous", "gradients", "errors"), dtype name, device type
    #: or id glob ("*-float16-opencl:*") equals/matches a key
    skip: dict = field(default_factory=dict)
    extra: Any = None
    #: compare the result dtype with the reference's (False: values and shape only)
    check_dtype: bool = True
    #: also compare the sign of zero results (0.0 vs -0.0) with the reference's, for ops
    #: whose NumPy semantics define it (floor division and modulo)
    signed_zeros: bool = False


# --- value generators the array-family areas share (array, selection) ---------------------

#: the float dtypes, for specs of composite ops (no kernel declares their dtypes)
FLOATS = ("float16", "float32", "float64")
_F32 = np.float32


def _npd(dtype):
    return np.dtype(getattr(dtype, "np", dtype))


def _vals(rng, shape, dtype, lo=-3.0, hi=3.0):
    """Random values of ``dtype`` in ``[lo, hi]`` (bool: coin flips)."""
    d = _npd(dtype)
    if d.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if d.kind == "f":
        return np.asarray(rng.uniform(lo, hi, shape).astype(d))
    info = np.iinfo(d)
    a = rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1, shape)
    return np.asarray(a.astype(d))


def _scalar_of(dtype):
    """A Python value of the kind of ``dtype``."""
    d = _npd(dtype)
    return True if d.kind == "b" else 1.5 if d.kind == "f" else 7


def _i32(*a):
    return np.array(a if len(a) != 1 or not isinstance(a[0], list) else a[0], np.int32)


def _err(args, match, kwargs=None, name="", error=InvalidArgumentError):
    """An ErrorSample whose message contains ``match`` literally (escaped: ErrorSample.match
    is a regular expression)."""
    return ErrorSample(tuple(args), dict(kwargs or {}), error=error, match=re.escape(match),
                       name=name)


# --- the areas ---------------------------------------------------------------------------

#: the spec modules, by family of ops (see the module docstring)
AREAS = ("math", "linalg", "array", "selection", "nn")


def all_specs():
    """Every OpSpec of every area module that exists."""
    out = []
    for area in AREAS:
        try:
            mod = importlib.import_module(f"tapeflow.testing.specs.{area}")
        except ModuleNotFoundError as e:
            if e.name != f"tapeflow.testing.specs.{area}":
                raise
            continue
        out.extend(mod.SPECS)
    return out
