"""Dtype policies (``tf.keras.mixed_precision``): which dtype a layer computes in and
which its variables are kept in.

``"float32"`` (the default; also ``"float16"``, ``"bfloat16"``, ``"float64"``: compute
and variables in that dtype) or ``"mixed_float16"`` / ``"mixed_bfloat16"``: the layer
computes in the 16-bit type (inputs and variables are cast to it in the layer's call)
and keeps float32 variables, so small updates are not rounded away. Losses compute in
float32 (``Model.fit`` casts predictions up), and the last layer of a classifier usually
gets ``dtype="float32"`` so its softmax runs in float32, as in Keras.

>>> import tapeflow as tf
>>> p = tf.keras.mixed_precision.Policy("mixed_bfloat16")
>>> p.compute_dtype, p.variable_dtype
('bfloat16', 'float32')
>>> tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
>>> layer = tf.keras.layers.Dense(2)
>>> y = layer(tf.ones((1, 3)))
>>> y.dtype, layer.kernel.dtype
(tf.bfloat16, tf.float32)
>>> tf.keras.mixed_precision.set_global_policy("float32")
"""

from __future__ import annotations

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError

__all__ = ["Policy", "global_policy", "set_global_policy", "POLICY_NAMES"]

_MIXED = {"mixed_float16": _dt.float16, "mixed_bfloat16": _dt.bfloat16}
_PLAIN = ("float32", "float16", "bfloat16", "float64")
#: every name a Policy accepts
POLICY_NAMES = tuple(_MIXED) + _PLAIN


class Policy:
    """A dtype policy: ``Policy("mixed_bfloat16")`` computes in bfloat16 with float32
    variables; a plain float dtype name uses that dtype for both. An unknown name raises
    InvalidArgumentError listing the valid ones.

    >>> Policy("mixed_float16")
    <Policy "mixed_float16">
    >>> Policy("float32").compute_dtype
    'float32'
    """

    __slots__ = ("_name", "_compute", "_variable")

    def __init__(self, name):
        if isinstance(name, Policy):
            name = name.name
        if not isinstance(name, str):
            raise InvalidTypeError("Policy name must be a string (one of "
                                   f"{', '.join(POLICY_NAMES)}), got {name!r}")
        if name in _MIXED:
            self._compute, self._variable = _MIXED[name], _dt.float32
        elif name in _PLAIN:
            self._compute = self._variable = _dt.as_dtype(name)
        else:
            raise InvalidArgumentError(
                f"Unknown dtype policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}")
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def compute_dtype(self) -> str:
        """The dtype layers compute in (a name, as in Keras)."""
        return self._compute.name

    @property
    def variable_dtype(self) -> str:
        """The dtype layers create their variables in (a name, as in Keras)."""
        return self._variable.name

    @property
    def is_mixed(self) -> bool:
        return self._compute is not self._variable

    def __eq__(self, other):
        return isinstance(other, Policy) and other._name == self._name

    def __hash__(self):
        return hash(self._name)

    def __repr__(self):
        return f'<Policy "{self._name}">'

    def get_config(self):
        return {"name": self._name}


_DEFAULT = Policy("float32")
_global = [_DEFAULT]


def global_policy() -> Policy:
    """The policy new layers get when they are not given a ``dtype`` (``float32``
    unless :func:`set_global_policy` changed it)."""
    return _global[0]


def set_global_policy(policy):
    """Set the policy of layers created from now on: a :class:`Policy`, one of its
    names, or ``None`` (back to ``"float32"``). Existing layers keep theirs.

    >>> set_global_policy("mixed_float16"); global_policy().compute_dtype
    'float16'
    >>> set_global_policy(None); global_policy().name
    'float32'
    >>> set_global_policy("mixed_fp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tapeflow.errors.InvalidArgumentError: Unknown dtype policy 'mixed_fp16'; valid policies: ...
    """
    _global[0] = _DEFAULT if policy is None else (
        policy if isinstance(policy, Policy) else Policy(policy))


def as_policy(dtype):
    """The Policy of a layer's ``dtype=`` argument: None (the global policy), a Policy,
    a policy name, or a float dtype (variables and compute in it)."""
    if dtype is None:
        return global_policy()
    if isinstance(dtype, Policy):
        return dtype
    if isinstance(dtype, str) and dtype in _MIXED:
        return Policy(dtype)
    d = _dt.as_dtype(dtype)
    p = Policy.__new__(Policy)
    p._name, p._compute, p._variable = d.name, d, d
    return p
