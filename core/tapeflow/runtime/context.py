"""The eager context: what the dispatcher consults on every op, and what the layers
above it register so that it never imports them.

* **Active tapes.** Each thread has a stack of recording tapes (``tapeflow.autodiff``
  pushes and pops them with :func:`push_tape`/:func:`pop_tape`); ``tapes_active[0]``
  counts them over all threads and is the dispatcher's only tape check, and
  :func:`record` appends an op to every tape of this thread that watches one of its
  inputs (``tapeflow.runtime._speedups`` has the same function in C). This is
  TensorFlow's eager context holding the active tapes: the tape is plain data the
  runtime fills, and ``GradientTape`` (above) plays it back.
* **The hooks.** The runtime never imports the layers above it; where it must call
  up, it calls through the one object :data:`HOOKS`, which those layers fill at
  import with the ``install_*`` functions below (the one place they are documented):

  - ``HOOKS.tracer``: whether this thread traces, and ``opaque_call`` (an object with
    :class:`Tracer`'s methods; a no-op ``Tracer`` until ``tapeflow.tracing`` installs
    its own). The ops, copies, Variable reads and assignments of a trace are reported
    to this thread's tracer itself, :data:`thread_tracer` (one call, no hook);
  - ``HOOKS.vectorize_jacobian``: ``GradientTape.jacobian(experimental_use_pfor=True)``
    (None until ``tapeflow.tracing.vectorize`` installs it);
  - ``HOOKS.array_namespace(api_version)``: ``Tensor.__array_namespace__``
    (``import tapeflow`` installs it);
  - ``HOOKS.variable_observers``: a tuple of functions called with every new
    Variable -- several are allowed (tracing, checkpoint restoration), added and
    removed with :func:`add_variable_observer`/:func:`remove_variable_observer`,
    paused in one thread by :func:`suspend_variable_observers`.

  A hook holds one function: installing a different one when one is installed raises
  :class:`~tapeflow.errors.PluginConflictError` naming the hook and both objects (as
  TensorFlow asserts when a second watched-variable resolver is set); installing the
  same one again -- a re-import, or ``importlib.reload`` of the module that defines
  it -- is a no-op.

>>> from tapeflow.runtime import context
>>> context.tapes_active[0], context.tracing[0]
(0, 0)
"""

from __future__ import annotations

import contextlib
import threading

from ..errors import InvalidTypeError, PluginConflictError

__all__ = ["tapes_active", "tracing", "record", "active_tapes", "push_tape", "pop_tape",
           "watch_variable_read", "stop_all_recording", "set_recorders", "Tracer", "HOOKS",
           "ThreadTracer", "thread_tracer",
           "Hooks", "install_tracer", "install_vectorize_jacobian", "install_array_namespace",
           "add_variable_observer", "remove_variable_observer",
           "suspend_variable_observers", "variable_created"]

_local = threading.local()
#: number of recording tapes over all threads (the dispatcher's only tape check)
tapes_active = [0]
#: number of tf.function traces in progress over all threads
tracing = [0]
_count_lock = threading.Lock()


def active_tapes() -> list:
    """This thread's recording tapes, innermost last."""
    tapes = getattr(_local, "tapes", None)
    if tapes is None:
        tapes = _local.tapes = []
    return tapes


class _Recorders(list):
    """This thread's recorders, counted in ``tapes_active`` from their making to their
    end: replaced by the next ones, or dropped with the threading.local when the thread
    ends with a tape still recording (which then no longer counts)."""

    def __init__(self, tapes):
        super().__init__(getattr(t, "_recorder", 0) or (t._watched, t._records) for t in tapes)
        with _count_lock:
            tapes_active[0] += len(self)

    def __del__(self, lock=_count_lock, count=tapes_active):
        with lock:
            count[0] -= len(self)


def set_recorders(tapes):
    """Store what record() reads for this thread's ``tapes`` -- each one's ``_recorder``
    (the C tape core), or its ``(_watched dict, _records list)`` pair (the Python
    protocol) -- and count them in ``tapes_active`` while they last. ``tapeflow.autodiff.
    tape`` puts ``_speedups.set_recorders`` here with the C tapes (bound while no tape
    records): the same, kept in a C thread-local, counted under the GIL."""
    _local.recorders = _Recorders(tapes)


def push_tape(tape):
    """Start recording on ``tape`` (an object with ``_watched`` and ``_records``, or with
    a ``_recorder``: see :func:`set_recorders`)."""
    tapes = active_tapes()
    tapes.append(tape)
    set_recorders(tapes)


def pop_tape(tape):
    """Stop recording on ``tape``; a no-op when it is not recording in this thread."""
    tapes = active_tapes()
    if tape in tapes:
        tapes.remove(tape)
        set_recorders(tapes)


def _record_py(op, inputs, outputs, attrs, grad_fn=None):
    """Record an op on every active tape of this thread that watches an input.

    A record is the tuple ``(op, inputs, outputs, attrs, grad_fn)``; backprop makes a
    GradContext only for records on the path to the target. Returns whether a tape
    recorded it.
    """
    try:
        recorders = _local.recorders
    except AttributeError:
        return False
    rec = None
    for w, records in recorders:
        for t in inputs:
            if id(t) in w:
                break
        else:
            continue
        if rec is None:
            rec = (op, inputs, outputs, attrs, grad_fn)
        records.append(rec)
        for o in outputs:
            w[id(o)] = o
    return rec is not None


record = _record_py


def watch_variable_read(var, value):
    """Called when a Variable is read while tapes are active."""
    for tape in active_tapes():     # (every trainable one, or the ones a tape watches)
        if (tape._watch_vars and var.trainable) or id(var) in getattr(tape, "_variables", ()):
            tape._watch_var(var, value)


@contextlib.contextmanager
def stop_all_recording():
    """Pause every tape of this thread (optimizer updates, assign_add ...)."""
    tapes = active_tapes()
    saved = list(tapes)
    if not saved:
        yield
        return
    tapes.clear()
    set_recorders(tapes)
    try:
        yield
    finally:
        tapes.extend(saved)
        set_recorders(tapes)


class ThreadTracer(threading.local):
    """This thread's innermost trace: ``thread_tracer.tracer`` is the object
    ``tapeflow.tracing`` sets while a function traces in this thread (None: no trace
    here). While ``tracing[0]`` is non-zero the runtime reports to it directly, one call
    each: ``op(op, inputs, outputs, attrs, fn, device, needs_device)`` (an op ran through
    its kernel ``fn``), ``copy(src, out, device)``, ``read(var, value) -> value``,
    ``assign(var, value, prev)`` and ``check(tensor, what)`` (``tensor``'s value is
    needed in Python: raise if it is symbolic); ``symbolic(tensor)`` is asked by ``print``
    (``(name, shape text)`` for a symbolic tensor, else None)."""

    tracer = None


#: this thread's tracer (see :class:`ThreadTracer`), which tapeflow.tracing sets
thread_tracer = ThreadTracer()


class Tracer:
    """``HOOKS.tracer``: what the layers between the runtime and ``tapeflow.tracing``
    ask of it (no-ops here); the runtime's own reports go to :data:`thread_tracer`."""

    def current(self):
        """The graph being traced in this thread, or None."""
        return None

    def opaque_call(self, fn, args):
        """Trace ``fn(*args)`` as one node that re-runs ``fn`` at every call."""
        return fn(*args)


# --- the hooks: the one way a lower layer calls up -------------------------------------

class Hooks:
    """The functions the runtime calls in the layers above it (see the module doc).

    Read them as attributes (``HOOKS.tracer.current()``); set them only with
    the ``install_*`` functions, which refuse to replace one installed function by
    another.
    """

    __slots__ = ("tracer", "vectorize_jacobian", "array_namespace", "variable_observers")

    def __init__(self):
        self.tracer = _NO_TRACER
        self.vectorize_jacobian = None
        self.array_namespace = None
        self.variable_observers = ()

    def __repr__(self):
        return "Hooks(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


_NO_TRACER = Tracer()
#: the one hooks object (see the module doc for each attribute)
HOOKS = Hooks()
_hooks_lock = threading.Lock()


def _key(obj):
    """What makes two hook objects "the same": identity, or -- for a module reloaded
    with ``importlib.reload`` -- the same module and qualified name (of the function,
    or of the class of an instance such as a tracer). A lambda or a function made
    inside another is only ever itself."""
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    qualname = getattr(named, "__qualname__", None)
    if not isinstance(qualname, str) or "<" in qualname:
        return (id(obj),)
    return (getattr(named, "__module__", None), qualname)


def _install(name, fn, unset=None):
    if fn is None or not callable(fn) and name != "tracer":
        raise InvalidTypeError(f"install_{name}: expected a callable, got {fn!r}")
    with _hooks_lock:
        cur = getattr(HOOKS, name)
        if cur is not unset and cur is not fn and _key(cur) != _key(fn):
            raise PluginConflictError(
                f"HOOKS.{name} is already installed ({cur!r}); refusing to replace it with "
                f"{fn!r}. One function serves each hook: extend the installed one "
                f"instead of installing a second")
        setattr(HOOKS, name, fn)


def install_tracer(tracer: Tracer) -> None:
    """Install the tracer (an object with the methods of :class:`Tracer`) the dispatcher
    and the tensor classes report to while ``tracing[0]`` is non-zero."""
    if not isinstance(tracer, Tracer):
        raise InvalidTypeError(f"install_tracer: expected an instance of a "
                               f"tapeflow.runtime.context.Tracer subclass, got {tracer!r}")
    _install("tracer", tracer, unset=_NO_TRACER)


def install_vectorize_jacobian(fn) -> None:
    """Install the vectorized Jacobian rows function of ``jacobian(experimental_use_pfor=True)``."""
    _install("vectorize_jacobian", fn)


def install_array_namespace(fn) -> None:
    """Install ``fn(api_version)`` returning the array-API namespace of Tensors."""
    _install("array_namespace", fn)


def add_variable_observer(fn) -> None:
    """Call ``fn(variable)`` with every new Variable (after its value is set). Adding one
    already added is a no-op; a module-level function from a reloaded module replaces
    its old version (a function made per call, such as a closure, is its own observer)."""
    if not callable(fn):
        raise InvalidTypeError(f"add_variable_observer: expected a callable, got {fn!r}")
    with _hooks_lock:
        obs = HOOKS.variable_observers
        if any(o is fn for o in obs):
            return
        key = _key(fn)
        obs = tuple(o for o in obs if _key(o) != key)     # (a reloaded module's old one)
        HOOKS.variable_observers = obs + (fn,)


def remove_variable_observer(fn) -> None:
    """Stop calling ``fn``; a no-op when it is not an observer."""
    with _hooks_lock:
        HOOKS.variable_observers = tuple(o for o in HOOKS.variable_observers if o is not fn)


_suspended = threading.local()


@contextlib.contextmanager
def suspend_variable_observers():
    """Variables made inside, in this thread, are not reported to any observer (a
    Checkpoint's own ``save_counter``, made while restoring)."""
    _suspended.depth = getattr(_suspended, "depth", 0) + 1
    try:
        yield
    finally:
        _suspended.depth -= 1


def variable_created(var) -> None:
    """Report a new Variable to every observer (the Variable constructor calls this
    when ``HOOKS.variable_observers`` is not empty)."""
    if getattr(_suspended, "depth", 0):
        return
    for fn in HOOKS.variable_observers:
        fn(var)
