"""Dataset elements: their structure, and their components as host arrays or Tensors.

An element is a nested structure of tuples, namedtuples and dicts whose leaves are
components. Its structure follows :mod:`tapeflow.nest` in its ``tf.data``
mode (``lists_as_leaves=True``): a list is one component -- a value to convert to one
tensor -- as in TensorFlow, so ``from_tensor_slices([[1, 2], [3, 4]])`` slices one
2x2 tensor. Inside the pipeline a component is a host NumPy array; it becomes a
tapeflow Tensor when a ``map``/``filter`` function sees it (on ``cpu:0``, recorded on
no tape) and when the element leaves the pipeline.

>>> import numpy as np
>>> from tapeflow.data.elements import map_element, to_host
>>> el = map_element(to_host, {"x": [1, 2], "y": (3.0, 4)})
>>> el["x"].dtype.name, el["y"][0].dtype.name
('int32', 'float32')
"""

from __future__ import annotations

import numpy as np

from ..runtime import context as _ctx
from ..runtime import devices as _devs
from .. import nest
from ..runtime.dispatch import constant
from ..dtypes import as_dtype
from ..errors import InvalidArgumentError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["is_flat_tuple", "map_element", "to_host", "to_tensor", "call",
           "normalize_output"]


def is_flat_tuple(s) -> bool:
    """A plain tuple of components (the common ``(images, labels)`` element): the fast
    paths of batching and mapping."""
    return type(s) is tuple and not any(nest.is_nested(x, lists_as_leaves=True) for x in s)


def map_element(fn, element):
    """``fn`` applied to each component of ``element`` (``tf.data``'s structure rules)."""
    if type(element) is tuple and is_flat_tuple(element):
        return tuple([fn(x) for x in element])
    return nest.map_structure(fn, element, lists_as_leaves=True)


def to_host(value, what="dataset element") -> np.ndarray:
    """A host NumPy array holding ``value`` (tapeflow's dtype rules for Python values:
    floats -> float32, ints -> int32). Tensors are immutable, so a host Tensor's
    buffer is shared, not copied."""
    if isinstance(value, Tensor):
        return np.asarray(value) if value._device.is_host else value.numpy()
    if isinstance(value, Variable):
        return value.numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype.kind == "f" and a.dtype.itemsize > 8:
            a = a.astype(np.float64)
        try:
            as_dtype(a.dtype)
        except TypeError as e:
            raise InvalidArgumentError(f"{what}: {e}") from None
        return a
    return np.asarray(constant(value, device="cpu:0"))


def to_tensor(a: np.ndarray, dev):
    """A component as a Tensor on ``dev``."""
    return constant(a, device=dev)


class _HostFunctionScope:
    """Run a dataset function as TensorFlow does: ops on ``cpu:0``, recorded on no tape."""

    def __init__(self):
        self._dev = _devs.device("cpu:0")
        self._no_tape = _ctx.stop_all_recording()

    def __enter__(self):
        self._dev.__enter__()
        self._no_tape.__enter__()

    def __exit__(self, *exc):
        try:
            self._no_tape.__exit__(*exc)
        finally:
            self._dev.__exit__(*exc)


def _to_cpu_tensor(a):
    return to_tensor(a, "cpu:0")


def call(fn, element):
    """``fn(*element)`` for a plain tuple element, else ``fn(element)``; components as
    Tensors on cpu:0."""
    args = map_element(_to_cpu_tensor, element)
    with _HostFunctionScope():
        if isinstance(args, tuple) and not hasattr(type(args), "_fields"):
            return fn(*args)
        return fn(args)


def _result_to_host(value):
    return to_host(value, "map function result")


def normalize_output(value):
    """A function's result as an element: a list it returns is a tuple (TensorFlow's
    rule for dataset functions, which only applies at the top: a list inside is one
    component); components as host arrays."""
    if isinstance(value, list):
        value = tuple(value)
    return map_element(_result_to_host, value)
