"""``tf.debugging``: run-time checks of tensors' values (``assert_equal``, ``assert_near``,
``check_numerics``, ``Assert``, ...) and the op placement log.

Eagerly a check runs at once: it returns None when it holds and raises
InvalidArgumentError (TensorFlow's error for a failed check) naming the condition, the
first differing values and your message when it does not. Inside a :func:`tf.function`
whose arguments decide it, the check is a node of the graph that runs at every call
(through :func:`tapeflow.py_function`; a SavedModel refuses such a graph, as it refuses
every Python node). ``check_numerics`` returns its input, so it can sit in a chain.

>>> import tapeflow as tf
>>> tf.debugging.assert_equal(tf.constant([1, 2]), [1, 2])
>>> try:
...     tf.debugging.assert_less(tf.constant([1.0, 5.0]), 3.0, message="too big")
... except tf.errors.InvalidArgumentError as e:
...     print(str(e).splitlines()[0])
too big: Condition x < y did not hold element-wise: x[1] = 5.0, y[1] = 3.0 (1 of 2 elements) [in assert_less]
>>> print(tf.debugging.check_numerics(tf.constant([1.0, 2.0]), "ok").numpy())
[1. 2.]

``tf.debugging.set_log_device_placement(True)`` prints, for every op that runs, the op
and the kind of device its kernel runs on (``Executing op MatMul in device
/job:localhost/replica:0/task:0/device:CPU:0``) to stderr, as TensorFlow does; it wraps
the registered kernels as the profiler does (nothing is checked per op while it is off).
"""

from __future__ import annotations

import sys
import threading
import types

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime import registry as _reg
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .control_flow import _is_dynamic, py_function as _py_function
from .tracer import _current

__all__ = ["debugging"]


def _values(x):
    t = x.read_value() if isinstance(x, Variable) else convert_to_tensor(x)
    return t


def _run_check(check, tensors):
    """``check(*arrays)`` now (eagerly, or on values the trace already knows), or as a
    node of the trace that runs it at every call."""
    tr = _current()
    if tr is not None and any(_is_dynamic(tr, t) for t in tensors):
        def node(*ts):
            check(*[np.asarray(t.numpy()) for t in ts])
            return []
        _py_function(node, list(tensors), [])
        return None
    check(*[np.asarray(t._host()) for t in tensors])
    return None


def _rename(fn, name):
    """Name a made check as its ``tf.debugging`` function (errors say ``[in assert_less]``)."""
    fn.__name__ = fn.__qualname__ = name
    fn.__code__ = fn.__code__.replace(co_name=name, co_qualname=name)


def _at(i):
    return "[" + ", ".join(map(str, i)) + "]" if i else ""


def _prefix(message):
    return f"{message}: " if message else ""


def _compare(name, symbol, fn):
    def check(x, y, data=None, summarize=None, message=None, name=None):
        tx, ty = _values(x), _values(y)
        if (tx.dtype.name == "string") != (ty.dtype.name == "string"):
            raise InvalidTypeError(f"tf.debugging.{check.__name__}: x is {tx.dtype.name}, y "
                                   f"is {ty.dtype.name}; compare text with text, numbers with numbers")

        def run(a, b):
            try:
                ok = np.broadcast_arrays(fn(a, b), a, b)
            except ValueError:
                raise InvalidArgumentError(
                    f"{_prefix(message)}tf.debugging.{check.__name__}: shapes "
                    f"{list(a.shape)} and {list(b.shape)} do not broadcast") from None
            held, a2, b2 = ok
            if held.all():
                return
            i = tuple(int(k) for k in np.argwhere(~held)[0])
            where = _at(i)
            raise InvalidArgumentError(
                f"{_prefix(message)}Condition x {symbol} y did not hold element-wise: "
                f"x{where} = {a2[i].tolist()!r}, y{where} = {b2[i].tolist()!r}"
                + (f" ({int((~held).sum())} of {held.size} elements)" if held.size > 1 else ""))
        return _run_check(run, [tx, ty])
    _rename(check, name)
    check.__doc__ = (f"Raise InvalidArgumentError unless ``x {symbol} y`` holds for every "
                     "element (broadcast); None when it holds.")
    return check


def _sign_check(name, what, fn):
    def check(x, data=None, summarize=None, message=None, name=None):
        t = _values(x)

        def run(a):
            bad = ~fn(a)
            if bad.any():
                i = tuple(int(k) for k in np.argwhere(bad)[0])
                raise InvalidArgumentError(
                    f"{_prefix(message)}Condition x {what} did not hold element-wise: "
                    f"x{_at(i)} = {a[i].tolist()!r}")
        return _run_check(run, [t])
    _rename(check, name)
    check.__doc__ = f"Raise InvalidArgumentError unless every element is {what}."
    return check


def assert_near(x, y, rtol=None, atol=None, data=None, summarize=None, message=None,
                name=None):
    """Raise unless ``|x - y| <= atol + rtol * |y|`` everywhere (defaults: 10 times the
    dtype's epsilon for both, as TensorFlow)."""
    tx, ty = _values(x), _values(y)
    eps = float(np.finfo(tx.dtype.as_numpy_dtype).eps) if tx.dtype.is_floating else 0.0
    rt = 10 * eps if rtol is None else float(rtol)
    at = 10 * eps if atol is None else float(atol)

    def run(a, b):
        held = np.abs(a - b) <= at + rt * np.abs(b)
        if not np.all(held):
            i = tuple(int(k) for k in np.argwhere(~np.broadcast_to(held, np.broadcast(
                a, b).shape))[0])
            a2, b2 = np.broadcast_arrays(a, b)
            raise InvalidArgumentError(
                f"{_prefix(message)}x and y not equal to tolerance rtol = {rt}, atol = {at}: "
                f"x{_at(i)} = {a2[i].tolist()!r}, y{_at(i)} = {b2[i].tolist()!r}")
    return _run_check(run, [tx, ty])


def assert_rank(x, rank, message=None, name=None):
    """Raise unless ``x`` has rank ``rank`` (checked now: ranks are static)."""
    t = _values(x)
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        raise InvalidTypeError(f"tf.debugging.assert_rank: rank must be an int, got "
                               f"{type(rank).__name__} {rank!r:.40}")
    if len(t.shape) != int(rank):
        raise InvalidArgumentError(f"{_prefix(message)}tensor must have rank {int(rank)}; "
                                   f"it has shape {list(t.shape)} (rank {len(t.shape)})")


def assert_type(tensor, tf_type, message=None, name=None):
    """Raise InvalidTypeError unless ``tensor`` has dtype ``tf_type`` (checked now)."""
    t = _values(tensor)
    if t.dtype != tf_type:
        raise InvalidTypeError(f"{_prefix(message)}tensor must be of type "
                               f"{getattr(tf_type, 'name', tf_type)}, it is {t.dtype.name}")


def check_numerics(tensor, message, name=None):
    """``tensor`` itself, after checking it holds no NaN and no infinity (raising
    InvalidArgumentError naming ``message`` and what was found)."""
    t = _values(tensor)
    if not t.dtype.is_floating:
        raise InvalidTypeError(f"tf.debugging.check_numerics: needs a floating tensor, got "
                               f"{t.dtype.name}")

    def run(a):
        if not np.all(np.isfinite(a)):
            kind = "NaN" if np.isnan(a).any() else "Inf"
            raise InvalidArgumentError(f"{message} : Tensor had {kind} values")
    _run_check(run, [t])
    return tensor


def Assert(condition, data, summarize=None, name=None):  # noqa: N802 - TensorFlow's name
    """Raise InvalidArgumentError listing ``data`` unless every element of ``condition``
    is true."""
    c = _values(condition)
    items = [_values(d) if isinstance(d, (Tensor, Variable)) else d for d in data]

    def run(a):
        if not np.all(a):
            shown = [np.array2string(np.asarray(d._host() if isinstance(d, Tensor) else d),
                                     threshold=summarize or 3) for d in items]
            raise InvalidArgumentError("assertion failed: [" + "] [".join(shown) + "]")
    return _run_check(run, [c])


# --- the placement log -----------------------------------------------------------------

_log = {"on": False, "saved": []}
_log_lock = threading.Lock()


def _logged(op, device_type, fn):
    where = f"/job:localhost/replica:0/task:0/device:{device_type.upper()}:0"

    def kernel(*args, **kwargs):
        print(f"Executing op {op.name} in device {where}", file=sys.stderr)
        return fn(*args, **kwargs)
    kernel.__wrapped__ = fn
    return kernel


def set_log_device_placement(enabled):
    """Print every op that runs and its device kind to stderr (True), or stop (False)."""
    with _log_lock:
        if bool(enabled) == _log["on"]:
            return
        if enabled:
            for op in list(_reg.OPS.values()):
                for device_type, entry in list(op.kernels.items()):
                    fn = entry.fn
                    new = _logged(op, device_type, fn)
                    if _reg.swap_kernel(op, device_type, fn, new):
                        _log["saved"].append((op, device_type, new, fn))
        else:
            for op, device_type, new, fn in reversed(_log["saved"]):
                _reg.swap_kernel(op, device_type, new, fn)
            _log["saved"].clear()
        _log["on"] = bool(enabled)


def get_log_device_placement():
    return _log["on"]


#: ``tf.debugging``
debugging = types.SimpleNamespace(
    assert_equal=_compare("assert_equal", "==", np.equal),
    assert_none_equal=_compare("assert_none_equal", "!=", np.not_equal),
    assert_less=_compare("assert_less", "<", np.less),
    assert_less_equal=_compare("assert_less_equal", "<=", np.less_equal),
    assert_greater=_compare("assert_greater", ">", np.greater),
    assert_greater_equal=_compare("assert_greater_equal", ">=", np.greater_equal),
    assert_positive=_sign_check("assert_positive", "> 0", lambda a: a > 0),
    assert_negative=_sign_check("assert_negative", "< 0", lambda a: a < 0),
    assert_non_negative=_sign_check("assert_non_negative", ">= 0", lambda a: a >= 0),
    assert_non_positive=_sign_check("assert_non_positive", "<= 0", lambda a: a <= 0),
    assert_near=assert_near, assert_rank=assert_rank, assert_type=assert_type,
    check_numerics=check_numerics, Assert=Assert,
    set_log_device_placement=set_log_device_placement,
    get_log_device_placement=get_log_device_placement)
