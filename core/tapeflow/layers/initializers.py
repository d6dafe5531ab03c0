"""Weight initializers (``tf.keras.initializers``): callables ``init(shape, dtype)``
returning a Tensor, drawn with tapeflow's random ops so ``tf.random.set_seed``
makes models reproducible.

>>> import tapeflow as tf
>>> w = tf.keras.initializers.get("glorot_uniform")([4, 6])
>>> bool(tf.reduce_max(tf.abs(w)) <= (6 / (4 + 6)) ** 0.5)
True
>>> print(tf.keras.initializers.get("zeros")([2]))
tf.Tensor([0. 0.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

import math

from ..errors import InvalidArgumentError
from .. import dtypes as _dt
from ..ops import random as _random
from ..ops.array_creation import ones as _ones
from ..ops.array_creation import zeros as _zeros
from ..runtime.dispatch import constant as _constant
from .naming import snake_case

__all__ = ["Initializer", "Zeros", "Ones", "Constant", "RandomUniform", "RandomNormal",
           "TruncatedNormal", "VarianceScaling", "GlorotUniform", "GlorotNormal", "HeUniform",
           "HeNormal", "LecunUniform", "LecunNormal", "get", "serialize",
           "zeros_initializer", "ones_initializer", "constant_initializer",
           "random_uniform_initializer", "random_normal_initializer",
           "truncated_normal_initializer", "glorot_uniform_initializer",
           "glorot_normal_initializer", "V1_NAMES"]


def _dtype(dtype):
    return _dt.float32 if dtype is None else _dt.as_dtype(dtype)


def _fans(shape):
    shape = tuple(shape)
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    receptive = 1
    for s in shape[:-2]:
        receptive *= s
    return float(shape[-2] * receptive), float(shape[-1] * receptive)


class Initializer:
    """Base class: ``__call__(shape, dtype=None)`` returns the initial Tensor."""

    def __call__(self, shape, dtype=None, **kwargs):
        raise NotImplementedError

    def get_config(self) -> dict:
        return {}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class Zeros(Initializer):
    def __call__(self, shape, dtype=None, **kwargs):
        return _zeros(list(shape), dtype=_dtype(dtype))


class Ones(Initializer):
    def __call__(self, shape, dtype=None, **kwargs):
        return _ones(list(shape), dtype=_dtype(dtype))


class Constant(Initializer):
    def __init__(self, value=0):
        self.value = value

    def __call__(self, shape, dtype=None, **kwargs):
        return _constant(self.value, dtype=_dtype(dtype), shape=list(shape))

    def get_config(self):
        return {"value": self.value}


class RandomUniform(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def __call__(self, shape, dtype=None, **kwargs):
        return _random.uniform(list(shape), self.minval, self.maxval, dtype=_dtype(dtype),
                               seed=self.seed)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=None, **kwargs):
        return _random.normal(list(shape), self.mean, self.stddev, dtype=_dtype(dtype),
                              seed=self.seed)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class TruncatedNormal(RandomNormal):
    def __call__(self, shape, dtype=None, **kwargs):
        return _random.truncated_normal(list(shape), self.mean, self.stddev,
                                        dtype=_dtype(dtype), seed=self.seed)


class VarianceScaling(Initializer):
    """Keras's VarianceScaling: ``scale / n`` variance with ``n`` the fan-in, fan-out or
    their average; ``distribution`` ``"truncated_normal"``, ``"untruncated_normal"``
    or ``"uniform"``."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        if scale <= 0:
            raise InvalidArgumentError(f"scale must be positive, got {scale}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise InvalidArgumentError(
                f"mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r}")
        if distribution == "normal":
            distribution = "truncated_normal"
        if distribution not in ("truncated_normal", "untruncated_normal", "uniform"):
            raise InvalidArgumentError(f"bad distribution {distribution!r}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def __call__(self, shape, dtype=None, **kwargs):
        fan_in, fan_out = _fans(shape)
        n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        var = self.scale / max(1.0, n)
        dt = _dtype(dtype)
        shape = list(shape)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            return _random.uniform(shape, -limit, limit, dtype=dt, seed=self.seed)
        if self.distribution == "untruncated_normal":
            return _random.normal(shape, 0.0, math.sqrt(var), dtype=dt, seed=self.seed)
        # the stddev of a unit normal truncated to [-2, 2]
        return _random.truncated_normal(shape, 0.0, math.sqrt(var) / 0.87962566103423978,
                                        dtype=dt, seed=self.seed)

    def get_config(self):
        return {"scale": self.scale, "mode": self.mode, "distribution": self.distribution,
                "seed": self.seed}


class GlorotUniform(VarianceScaling):
    """Uniform in ``+-sqrt(6 / (fan_in + fan_out))``: the default kernel initializer."""

    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "uniform", seed)

    def get_config(self):
        return {"seed": self.seed}


class GlorotNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)

    def get_config(self):
        return {"seed": self.seed}


class HeUniform(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "uniform", seed)

    def get_config(self):
        return {"seed": self.seed}


class HeNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "truncated_normal", seed)

    def get_config(self):
        return {"seed": self.seed}


class LecunUniform(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_in", "uniform", seed)

    def get_config(self):
        return {"seed": self.seed}


class LecunNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_in", "truncated_normal", seed)

    def get_config(self):
        return {"seed": self.seed}


# --- TF 1's initializer names (tf.random_uniform_initializer ...) -----------------------------
# TensorFlow 1 made them with a ``dtype`` (used when a call gives none) and its own defaults
# (a unit range or deviation where Keras has 0.05).

class _V1Mixin:
    """A TF 1 initializer: ``dtype`` set when made; a call's ``partition_info`` ignored."""

    def _v1_dtype(self, dtype):
        return self.dtype if dtype is None else dtype

    def _v1_config(self, config):
        config["dtype"] = self.dtype.name
        return config


class zeros_initializer(_V1Mixin, Zeros):  # noqa: N801  (TF 1's class name)
    """``tf.zeros_initializer(dtype=tf.float32)``."""

    def __init__(self, dtype=_dt.float32):
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return Zeros.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config({})


class ones_initializer(_V1Mixin, Ones):  # noqa: N801
    """``tf.ones_initializer(dtype=tf.float32)``."""

    def __init__(self, dtype=_dt.float32):
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return Ones.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config({})


class constant_initializer(_V1Mixin, Constant):  # noqa: N801
    """``tf.constant_initializer(value=0, dtype=tf.float32)``: ``value`` a number (every
    element) or a nested list or array with as many elements as the shape."""

    def __init__(self, value=0, dtype=_dt.float32, verify_shape=False):
        super().__init__(value)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return Constant.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config({"value": self.value})


class random_uniform_initializer(_V1Mixin, RandomUniform):  # noqa: N801
    """``tf.random_uniform_initializer(minval=0, maxval=None, seed=None)``: uniform in
    ``[minval, maxval)``, ``maxval`` 1 when None (TF 1's defaults)."""

    def __init__(self, minval=0.0, maxval=None, seed=None, dtype=_dt.float32):
        super().__init__(minval, 1.0 if maxval is None else maxval, seed)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return RandomUniform.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config(super().get_config())


class random_normal_initializer(_V1Mixin, RandomNormal):  # noqa: N801
    """``tf.random_normal_initializer(mean=0.0, stddev=1.0, seed=None)``."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dt.float32):
        super().__init__(mean, stddev, seed)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return RandomNormal.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config(super().get_config())


class truncated_normal_initializer(_V1Mixin, TruncatedNormal):  # noqa: N801
    """``tf.truncated_normal_initializer(mean=0.0, stddev=1.0, seed=None)``: normal values
    more than two deviations from the mean drawn again."""

    def __init__(self, mean=0.0, stddev=1.0, seed=None, dtype=_dt.float32):
        super().__init__(mean, stddev, seed)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return TruncatedNormal.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config(super().get_config())


class glorot_uniform_initializer(_V1Mixin, GlorotUniform):  # noqa: N801
    """``tf.glorot_uniform_initializer(seed=None)`` (Xavier): uniform in
    ``+-sqrt(6 / (fan_in + fan_out))``."""

    def __init__(self, seed=None, dtype=_dt.float32):
        super().__init__(seed)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return GlorotUniform.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config(super().get_config())


class glorot_normal_initializer(_V1Mixin, GlorotNormal):  # noqa: N801
    """``tf.glorot_normal_initializer(seed=None)``: truncated normal, variance
    ``2 / (fan_in + fan_out)``."""

    def __init__(self, seed=None, dtype=_dt.float32):
        super().__init__(seed)
        self.dtype = _dt.as_dtype(dtype)

    def __call__(self, shape, dtype=None, partition_info=None, **kwargs):
        return GlorotNormal.__call__(self, shape, self._v1_dtype(dtype))

    def get_config(self):
        return self._v1_config(super().get_config())


#: TF 1's top-level initializer names (``tf.random_uniform_initializer`` ...)
V1_NAMES = ("zeros_initializer", "ones_initializer", "constant_initializer",
            "random_uniform_initializer", "random_normal_initializer",
            "truncated_normal_initializer", "glorot_uniform_initializer",
            "glorot_normal_initializer")


# Keras's lower-case aliases (tf.keras.initializers.glorot_uniform ...)
zeros = Zeros
ones = Ones
constant = Constant
uniform = random_uniform = RandomUniform
normal = random_normal = RandomNormal
truncated_normal = TruncatedNormal
variance_scaling = VarianceScaling
glorot_uniform = GlorotUniform
glorot_normal = GlorotNormal
he_uniform = HeUniform
he_normal = HeNormal
lecun_uniform = LecunUniform
lecun_normal = LecunNormal

_BY_NAME = {
    "zeros": Zeros, "zero": Zeros, "ones": Ones, "one": Ones, "constant": Constant,
    "uniform": RandomUniform, "random_uniform": RandomUniform,
    "normal": RandomNormal, "random_normal": RandomNormal,
    "truncated_normal": TruncatedNormal, "variance_scaling": VarianceScaling,
    "glorot_uniform": GlorotUniform, "glorot_normal": GlorotNormal,
    "xavier_uniform": GlorotUniform, "xavier_normal": GlorotNormal,
    "he_uniform": HeUniform, "he_normal": HeNormal,
    "lecun_uniform": LecunUniform, "lecun_normal": LecunNormal,
}


def get(identifier):
    """An initializer from a name (``"glorot_uniform"``, ``"GlorotUniform"``, ``"zeros"``
    ...), a callable (returned as is) or a value (a :class:`Constant`)."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        key = identifier
        if any(c.isupper() for c in key):
            key = snake_case(key)
        cls = _BY_NAME.get(key)
        if cls is None:
            raise InvalidArgumentError(f"Unknown initializer {identifier!r}; known: "
                             + ", ".join(sorted(_BY_NAME)))
        return cls()
    if isinstance(identifier, type) and issubclass(identifier, Initializer):
        return identifier()
    if callable(identifier):
        return identifier
    return Constant(identifier)


def serialize(initializer) -> dict:
    return {"class_name": type(initializer).__name__, "config": initializer.get_config()}
