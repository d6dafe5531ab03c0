"""The checks of what a gradient function returned, and the errors that name it.

A gradient function (an op's rule, a plugin's, or a ``custom_gradient``) returns one
gradient per input of its op: a Tensor, ``None``, or a value convertible to the
input's dtype. Backprop (:mod:`tapeflow.autodiff.tape`) sends every result that is
not already a Tensor of the input's shape and dtype through :func:`checked_grad`; an
error names the op, the plugin that registered it and the function, so a plugin's bug
points at the plugin.
"""

from __future__ import annotations

from ..ops.reductions import unbroadcast as _unbroadcast
from ..runtime.dispatch import convert_to_tensor
from ..errors import InvalidArgumentError, TapeflowError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable

__all__ = ["checked_grad", "grad_origin", "short"]


def checked_grad(g, inp, i, op, fn):
    """A gradient function's result for input ``i`` as a Tensor of the input's shape
    (unbroadcast for a broadcasting op) and dtype, or an error naming the function."""
    if type(g) is not Tensor:
        g = _grad_tensor(g, inp, i, op, fn)
    gs, ishape = g._data.shape, inp._data.shape
    if gs != ishape:
        if not op.broadcast:
            raise InvalidArgumentError(
                f"{grad_origin(op, fn)} returned a gradient of shape {tuple(gs)} "
                f"for input {i} ({_input_name(op, i)}) of shape {tuple(ishape)}.",
                op=op.name, device=inp._device)
        g = _unbroadcast(g, ishape)
    if g._data.dtype != inp._data.dtype:
        raise InvalidArgumentError(
            f"{grad_origin(op, fn)} returned a {g.dtype.name} gradient for input "
            f"{i} ({_input_name(op, i)}) of dtype {inp.dtype.name}.",
            op=op.name, device=inp._device)
    return g


def grad_origin(op, fn):
    """``The gradient function of op 'x::y' (registered by 'dist'; mod.func)``: names
    the op, where it came from and the function, so a plugin's bug points at it."""
    fn = getattr(fn, "__wrapped__", fn)
    where = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return (f"The gradient function of op '{op.name}' (registered by {op.source!r}; "
            f"{where}.{name})")


def _input_name(op, i):
    names = op.inputs
    if i < len(names) and not names[i].startswith("*"):
        return f"'{names[i]}'"
    return f"'{names[-1].lstrip('*')}[{i - len(names) + 1}]'" if names else "?"


def _grad_tensor(g, inp, i, op, fn):
    """A gradient that is not a Tensor: Variables are read, numbers and arrays are
    converted to the input's dtype; anything else (a string, a dict) is an error
    naming the op, its plugin and the input."""
    if isinstance(g, Variable):
        return g.read_value()
    if isinstance(g, Tensor):
        return g
    try:
        return convert_to_tensor(g, dtype=inp.dtype)
    except TapeflowError as e:
        raise InvalidArgumentError(
            f"{grad_origin(op, fn)} returned {type(g).__name__} {short(g)} for input {i} "
            f"({_input_name(op, i)}), which is not convertible to a {inp.dtype.name} tensor; "
            "a gradient function returns a Tensor (or None) per input.", op=op.name,
            device=inp._device) from e


def short(v):
    """``repr(v)``, cut to 60 characters."""
    r = repr(v)
    return r if len(r) < 60 else r[:57] + "..."
