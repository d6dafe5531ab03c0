"""Plugin ops by namespace: the op ``"myproj::gelu"`` is ``tapeflow.ops.myproj.gelu``.

The attribute is the function the plugin's :class:`~tapeflow.plugins.Library` made
for the op (the very object the plugin's module exports), or the
:class:`~tapeflow.plugins.OpDef` itself for an op registered without a Library
(both are called the same way: inputs positionally, attributes as keywords).
Lookups read the op registry each time, so ops registered later show up too; in a
hot loop bind the op once (``gelu = tf.ops.myproj.gelu``). ``dir(tf.ops)`` lists
the namespaces of the loaded plugins, ``dir(tf.ops.myproj)`` their ops; a name
``"a::b::c"`` nests (``tf.ops.a.b.c``).

>>> import tapeflow as tf
>>> tf.ops.no_such_project
Traceback (most recent call last):
AttributeError: tapeflow.ops has no namespace 'no_such_project'; the loaded plugins define: ...

See :mod:`tapeflow.plugins.library` for an op defined and called both ways.
"""

from __future__ import annotations

from ..runtime import registry as _reg
# The op library: the public modules (tf.math and tf's array names re-export the modules
# that declare the ops; docs/CONVENTIONS_FOR_OPS.md shows the layout and its order).
from . import math, array, linalg, nn, random  # noqa: F401
from . import nn_fused, optim  # noqa: F401  (fused ops: issue 34)
from . import operators  # noqa: F401  (Tensor's and Variable's operators)
from . import batching  # noqa: F401  (tf.vectorized_map: the ops without a rule)

_HANDLES = _reg.HANDLES


class _Namespace:
    __slots__ = ("_prefix",)

    def __init__(self, prefix):
        self._prefix = prefix

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _lookup(f"{self._prefix}::{name}", f"tapeflow.ops.{self._prefix.replace('::', '.')}")

    def __dir__(self):
        return _children(self._prefix + "::")

    def __repr__(self):
        ops = ", ".join(_children(self._prefix + "::"))
        return f"<tapeflow.ops namespace {self._prefix!r}: {ops}>"


def _children(prefix):
    if prefix == _reg.CORE_NAMESPACE + "::":
        return sorted(n for n in _reg.OPS if "::" not in n)
    return sorted({n[len(prefix):].split("::")[0] for n in _reg.OPS if n.startswith(prefix)})


def _lookup(full, where):
    op = _reg.OPS.get(full)
    if op is None and full.startswith(_reg.CORE_NAMESPACE + "::"):
        op = _reg.OPS.get(full[len(_reg.CORE_NAMESPACE) + 2:])     # tf.ops.tapeflow.Add
    if op is not None:
        return next((h for h in _HANDLES.get(full, ()) if h.op is op), op)
    if any(n.startswith(full + "::") for n in _reg.OPS):
        return _Namespace(full)
    raise AttributeError(f"{where} has no op {full.rsplit('::', 1)[-1]!r} (no op named {full!r} "
                         "is registered; `python -m tapeflow info` lists the loaded plugins, "
                         "and the failed ones with the reason)")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    if name == _reg.CORE_NAMESPACE or any(n.startswith(name + "::") for n in _reg.OPS):
        return _Namespace(name)
    raise AttributeError(f"tapeflow.ops has no namespace {name!r}; the loaded plugins define: "
                         f"{', '.join(__dir__()) or 'none'} (`python -m tapeflow info` lists "
                         "the plugins, and the failed ones with the reason)")


def __dir__():
    return sorted({n.split("::")[0] for n in _reg.OPS if "::" in n} | {_reg.CORE_NAMESPACE})
