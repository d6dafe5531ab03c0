"""Autograd-style gradient functions on top of :class:`GradientTape`.

>>> import tapeflow as tf
>>> def square(x):
...     return tf.multiply(x, x)
>>> grad = tf.gradients_function(square)
>>> float(grad(3.)[0])
6.0
>>> gradgrad = tf.gradients_function(lambda x: grad(x)[0])
>>> float(gradgrad(3.)[0])
2.0
>>> tf.gradients_function(lambda x: gradgrad(x)[0])(3.)
[None]
"""

from __future__ import annotations

import enum
import functools
import inspect

from ..errors import InvalidArgumentError
from ..runtime.dispatch import convert_to_tensor
from ..runtime.registry import OpDef
from .tape import GradientTape
from ..ops.array_values import identity as _identity
from ..runtime import context as _ctx
from .. import nest
from ..runtime.context import stop_all_recording, tapes_active as _tapes_active
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["gradients_function", "value_and_gradients_function", "implicit_gradients",
           "implicit_value_and_gradients", "custom_gradient", "grad", "val_and_grad_function",
           "hessians", "UnconnectedGradients"]


class UnconnectedGradients(str, enum.Enum):
    """What ``GradientTape.gradient`` (and ``jacobian``) return for a source the target
    does not depend on: ``NONE`` (``None``, the default) or ``ZERO`` (zeros of the
    source's shape and dtype). A member equals its string, so ``"zero"`` works too.

    >>> import tapeflow as tf
    >>> x = tf.Variable(2.0)
    >>> with tf.GradientTape() as tape:
    ...     y = tf.constant(3.0)
    >>> print(tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """

    NONE = "none"
    ZERO = "zero"

    def __str__(self):
        return f"UnconnectedGradients.{self.name}"


def _param_indices(f, params, nargs):
    if params is None:
        return list(range(nargs))
    names = None
    out = []
    for p in params:
        if isinstance(p, int):
            out.append(p)
        else:
            if names is None:
                names = list(inspect.signature(f).parameters)
            out.append(names.index(p))
    return out


def value_and_gradients_function(f, params=None):
    """Return ``g(*args) -> (f(*args), [df/dargs])``; ``params`` (indices or names)
    limits which arguments are differentiated."""

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        idx = _param_indices(f, params, len(args))
        args = list(args)
        with GradientTape() as tape:
            for i in idx:
                a = args[i]
                if not isinstance(a, (Tensor, Variable)):
                    a = args[i] = convert_to_tensor(a)
                tape.watch(a)
            value = f(*args, **kwargs)
        if value is None:
            raise InvalidArgumentError(
                f"{getattr(f, '__name__', 'f')} returned None; gradients_function needs a "
                "function returning a tensor.")
        grads = tape.gradient(value, [args[i] for i in idx])
        return value, grads

    return decorated


def gradients_function(f, params=None):
    """Return ``g(*args) -> [df/dargs]`` (seed: ``tfe.gradients_function``).

    The derivatives of a non-scalar ``f`` are those of its sum. Arguments ``f``
    does not depend on get ``None``.
    """
    vag = value_and_gradients_function(f, params)

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        return vag(*args, **kwargs)[1]

    return decorated


val_and_grad_function = value_and_gradients_function


def grad(f, params=None):
    """Alias of :func:`gradients_function`."""
    return gradients_function(f, params)


def implicit_value_and_gradients(f):
    """Return ``g(*args) -> (value, [(gradient, variable), ...])`` over every
    trainable Variable ``f`` reads (seed: ``tfe.implicit_value_and_gradients``)."""

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        with GradientTape() as tape:
            value = f(*args, **kwargs)
        variables = tape.watched_variables()
        if not variables:
            raise InvalidArgumentError(
                f"{getattr(f, '__name__', 'f')} reads no trainable Variables; "
                "implicit_gradients needs a function of Variables (use gradients_function "
                "for functions of their arguments).")
        grads = tape.gradient(value, list(variables))
        return value, list(zip(grads, variables))

    return decorated


def implicit_gradients(f):
    """Return ``g(*args) -> [(gradient, variable), ...]`` (seed: ``tfe.implicit_gradients``).

    >>> import tapeflow as tf
    >>> x = tf.Variable(2.0)
    >>> g = tf.implicit_gradients(lambda y: (y - x ** 2) ** 2)
    >>> float(g(7.)[0][0])
    -24.0
    """
    vag = implicit_value_and_gradients(f)

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        return vag(*args, **kwargs)[1]

    return decorated


# --- custom_gradient -----------------------------------------------------------------

_CUSTOM = OpDef("CustomGradient", inputs=("*inputs",), dtype_rule="none")


def custom_gradient(f):
    """Decorator: ``f(*args)`` returns ``(output, grad_fn)``; ``grad_fn(*dys)``
    returns one gradient (or None) per argument of ``f``.

    ``f`` runs with tapes recording, so ``grad_fn`` may reuse forward values
    (seed: ``log1pexp`` reuses ``tf.exp(x)``) and still be differentiated again.
    If ``grad_fn`` takes a ``variables`` keyword, the trainable Variables read
    inside ``f`` are passed and it must return ``(input_grads, variable_grads)``.

    >>> import tapeflow as tf
    >>> @tf.custom_gradient
    ... def log1pexp(x):
    ...     e = tf.exp(x)
    ...     def grad(dy):
    ...         return dy * (1 - 1 / (1 + e))
    ...     return tf.log(1 + e), grad
    >>> float(tf.gradients_function(log1pexp)(100.)[0])
    1.0
    """

    @functools.wraps(f)
    def decorated(*args, **kwargs):
        if _ctx.tracing[0] and not kwargs and _ctx.HOOKS.tracer.current() is not None:
            # traced: one opaque node runs this at every call, so the custom gradient is
            # recorded at replay too (its ops would otherwise be traced as plain ops)
            return _ctx.HOOKS.tracer.opaque_call(decorated, args)
        if not _tapes_active[0]:
            out, _ = f(*args, **kwargs)
            return out
        inputs = tuple(a.read_value() if isinstance(a, Variable) else
                       a if isinstance(a, Tensor) else convert_to_tensor(a) for a in args)
        with GradientTape(watch_accessed_variables=True) as vtape:
            result, grad_fn = f(*inputs, **kwargs)
        variables = [v for v in vtape.watched_variables() if v.trainable]
        # re-register the variable reads with the caller's tapes
        for v in variables:
            v.read_value()
        flat = nest.flatten(result)           # (grad_fn gets one gradient per leaf)
        with stop_all_recording():   # the custom record below is the only path back
            outs = tuple(_identity(convert_to_tensor(r)) for r in flat)
        takes_vars = "variables" in inspect.signature(grad_fn).parameters
        var_values = tuple(v._value for v in variables)
        n_in = len(inputs)

        def backward(ctx, *dys):
            if takes_vars:
                in_grads, var_grads = grad_fn(*dys, variables=variables)
            else:
                in_grads = grad_fn(*dys)
                var_grads = ()
            if not isinstance(in_grads, (list, tuple)):
                in_grads = (in_grads,)
            in_grads = tuple(in_grads)
            if len(in_grads) != n_in:
                raise InvalidArgumentError(
                    f"custom_gradient: the gradient function of {f.__name__} returned "
                    f"{len(in_grads)} gradient(s) for {n_in} input(s); return one (or None) "
                    "per argument of the decorated function.", op=f"CustomGradient:{f.__name__}")
            var_grads = tuple(var_grads or ())
            if takes_vars and len(var_grads) != len(variables):
                raise InvalidArgumentError(
                    f"custom_gradient: {f.__name__} returned {len(var_grads)} variable "
                    f"gradient(s) for {len(variables)} variable(s).",
                    op=f"CustomGradient:{f.__name__}")
            return in_grads + var_grads

        backward.__wrapped__ = grad_fn          # errors name the user's function
        _ctx.record(_CUSTOM, inputs + var_values, outs, {}, backward)
        return nest.pack_sequence_as(result, outs)

    return decorated


def hessians(f, xs, unconnected_gradients="zero"):
    """The Hessian of ``reduce_sum(f(*xs))`` with respect to each of ``xs``:
    ``[d2y/dx_i2 for x_i in xs]``, each of shape ``x_i.shape + x_i.shape`` (as
    ``tf.hessians``: the diagonal blocks; the cross terms are not computed).

    TensorFlow's ``tf.hessians(ys, xs)`` differentiates a graph; eagerly ``ys`` is a
    value, so tapeflow takes the function that computes it: ``f`` is called with
    ``xs`` (a Tensor, a Variable or a list of them). The rows of each Hessian come from
    one vectorised backward pass of the gradient (``GradientTape.jacobian``,
    reverse-over-reverse); ``docs/autodiff.md`` compares it with forward-over-reverse.

    >>> import tapeflow as tf
    >>> x = tf.constant([1.0, 2.0])
    >>> (h,) = tf.hessians(lambda x: tf.reduce_sum(x ** 3), x)
    >>> print(h)
    tf.Tensor(
    [[ 6.  0.]
     [ 0. 12.]], shape=(2, 2), dtype=float32)
    """
    if isinstance(f, (Tensor, Variable)) or not callable(f):
        raise InvalidArgumentError(
            "tf.hessians(f, xs) takes the function computing ys, not ys: eagerly a value "
            "cannot be differentiated after the fact (write tf.hessians(lambda x: "
            "loss(x), x), or use two GradientTapes)")
    single = not isinstance(xs, (list, tuple))
    xs = [xs] if single else list(xs)
    for i, x in enumerate(xs):
        if not isinstance(x, (Tensor, Variable)):
            raise InvalidArgumentError(
                f"tf.hessians: xs[{i}] is a {type(x).__name__}; pass Tensors or Variables")
    with GradientTape(persistent=True) as outer:
        for x in xs:
            outer.watch(x)
        with GradientTape() as inner:
            for x in xs:
                inner.watch(x)
            y = f(*xs)
        grads = inner.gradient(y, xs, unconnected_gradients="zero")
    return [outer.jacobian(g, x, unconnected_gradients=unconnected_gradients)
            for g, x in zip(grads, xs)]
