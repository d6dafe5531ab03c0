"""TF 1's program scaffolding: ``tf.app.run`` (also ``tfe.run``), ``tf.app.flags`` /
``tf.flags``, and eager execution's modes (``tfe.execution_mode``, ``tfe.SYNC``,
``tfe.ASYNC``, ``tfe.async_wait``, ``tf.experimental.async_scope``).

**Flags.** A small stand-in for absl's flags (absl is not a dependency), on
:mod:`argparse`: ``DEFINE_string/integer/float/boolean/bool/enum/list/multi_string``
define flags on :data:`FLAGS`; ``FLAGS(argv)`` parses ``argv`` (``argv[0]`` is the
program) and returns the program and the arguments that are not flags. Flags are
written ``--name=value``, ``--name value`` (or with one dash); a boolean is set with
``--name`` and cleared with ``--noname`` (or ``--name=false``); ``--`` ends the flags.
Reading ``FLAGS.name`` before the flags were parsed raises
:class:`UnparsedFlagAccessError` (as absl does); an undefined flag on the command line
raises :class:`UnrecognizedFlagError` naming it, a value of the wrong type
:class:`IllegalFlagValueError`.

>>> import tapeflow as tf
>>> fl = tf.flags.FlagValues()            # (programs use tf.flags.FLAGS)
>>> _ = tf.flags.DEFINE_integer("steps", 10, "training steps", flag_values=fl)
>>> _ = tf.flags.DEFINE_boolean("fast", False, "skip checks", flag_values=fl)
>>> fl(["prog", "--steps", "3", "--fast", "data.txt"])
['prog', 'data.txt']
>>> fl.steps, fl.fast
(3, True)

**run.** ``tf.app.run(main=None, argv=None)`` parses the flags of ``argv`` (default
``sys.argv``), calls ``main`` (default: the ``main`` of the ``__main__`` module) with
the program and the arguments left over, and exits with ``sys.exit(main's return
value)``. As in TensorFlow 1, flags nobody defined are left to ``main`` (a program
that parses its own flags with argparse passes ``[sys.argv[0]] + unparsed``), and
``--help`` prints the defined flags and exits.

**Execution modes.** Devices that queue work (OpenCL's in-order command queues, CUDA's
streams) enqueue every kernel without waiting in both modes; they wait only where a
value is needed on the host (``.numpy()``, ``print``, ``bool()``), for an op whose
output shape depends on values, and for the error checks that read a flag back from
the device. ``with tfe.execution_mode(tfe.ASYNC):`` lets a backend defer those checks
(:func:`executing_async`, :func:`defer_check`; the OpenCL backend's
``tapeflow_opencl.runtime.check_flag``) to :func:`async_wait`, which waits for every
device's queue (``Backend.synchronize``: OpenCL finishes its queue, CUDA synchronises
its stream) and raises the first error a queued op left, naming the op and the device
(an error the CUDA driver reports while synchronising is raised the same way).
SYNC (the default) behaves exactly as tapeflow always has. The NumPy backend
(``cpu:0``) runs every op when it is called in both modes: there is nothing to queue
on the host. The mode is per thread; ``tfe.execution_mode(None)`` keeps the current one.

>>> with tf.execution_mode(tf.ASYNC):
...     y = tf.constant([1., 2.]) * 2.
...     tf.async_wait()
>>> print(y)
tf.Tensor([2. 4.], shape=(2,), dtype=float32)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading

from .errors import FailedPreconditionError, InvalidArgumentError, InvalidTypeError
from .runtime import devices as _devices

__all__ = ["run", "flags", "FLAGS", "FlagValues", "Error", "UnrecognizedFlagError",
           "IllegalFlagValueError", "UnparsedFlagAccessError", "DuplicateFlagError",
           "SYNC", "ASYNC", "execution_mode", "get_execution_mode", "async_wait",
           "async_clear_error", "async_scope", "experimental", "executing_async",
           "defer_check"]


# --- flags ---------------------------------------------------------------------------------

class Error(InvalidArgumentError):
    """Base class of the flag errors (absl's ``flags.Error``)."""


class UnrecognizedFlagError(Error):
    """A flag on the command line that no ``DEFINE_*`` defined."""


class IllegalFlagValueError(Error):
    """A flag's value that its type does not accept."""


class DuplicateFlagError(Error):
    """A second ``DEFINE_*`` of a flag name."""


class UnparsedFlagAccessError(FailedPreconditionError, AttributeError):
    """``FLAGS.name`` read before the command line was parsed."""


_TRUE = ("true", "t", "1", "yes", "y")
_FALSE = ("false", "f", "0", "no", "n")


def _parse_bool(text):
    if isinstance(text, bool):
        return text
    t = str(text).strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def _parse_list(text):
    if isinstance(text, (list, tuple)):
        return list(text)
    return [] if not text else [s.strip() for s in str(text).split(",")]


class _Flag:
    __slots__ = ("name", "default", "help", "kind", "parse", "choices", "multi")

    def __init__(self, name, default, help_, kind, parse, choices=None, multi=False):
        self.name, self.help, self.kind, self.parse = name, help_, kind, parse
        self.choices, self.multi = choices, multi
        self.default = self.convert(default) if default is not None else None

    def convert(self, value):
        """``value`` (a string from the command line, or a Python value) as the flag's
        type; IllegalFlagValueError naming the flag when it is not one."""
        try:
            if self.multi:
                items = value if isinstance(value, (list, tuple)) else [value]
                return [self.parse(v) for v in items]
            v = self.parse(value)
        except (TypeError, ValueError) as e:
            raise IllegalFlagValueError(
                f"flag --{self.name}={value!r}: not a valid {self.kind} ({e})") from None
        if self.choices is not None and v not in self.choices:
            raise IllegalFlagValueError(f"flag --{self.name}={value!r}: must be one of "
                                        f"{', '.join(map(str, self.choices))}")
        return v


class FlagValues:
    """The flags a program defined and their values (absl's ``FlagValues``);
    :data:`FLAGS` is the one programs use. Call it with ``argv`` to parse."""

    def __init__(self):
        d = self.__dict__
        d["_flags"] = {}
        d["_values"] = {}
        d["_parsed"] = False

    # -- definition --
    def _define(self, flag):
        if flag.name in self._flags:
            raise DuplicateFlagError(
                f"flag --{flag.name} is defined twice; define each flag once (in the module "
                "that uses it)")
        self._flags[flag.name] = flag
        self._values[flag.name] = flag.default
        return flag

    # -- values --
    def __getattr__(self, name):
        flags = self.__dict__["_flags"]
        if name not in flags:
            raise AttributeError(f"no flag --{name} is defined (defined: "
                                 f"{', '.join(sorted(flags)) or 'none'})")
        if not self.__dict__["_parsed"]:
            raise UnparsedFlagAccessError(
                f"trying to read flag --{name} before the flags were parsed: call "
                "tf.app.run(main) (or FLAGS(sys.argv)) first")
        return self.__dict__["_values"][name]

    def __setattr__(self, name, value):
        if name not in self._flags:
            raise AttributeError(f"no flag --{name} is defined; use a DEFINE_* function")
        self._values[name] = None if value is None else self._flags[name].convert(value)

    def __contains__(self, name):
        return name in self._flags

    def __iter__(self):
        return iter(self._flags)

    def __getitem__(self, name):
        return self._flags[name]

    def is_parsed(self) -> bool:
        return self._parsed

    def mark_as_parsed(self) -> None:
        self.__dict__["_parsed"] = True

    def unparse_flags(self) -> None:
        """Back to the defaults, not parsed."""
        for name, flag in self._flags.items():
            self._values[name] = flag.default
        self.__dict__["_parsed"] = False

    def flag_values_dict(self) -> dict:
        return dict(self._values)

    def get_flag_value(self, name, default):
        return self._values.get(name, default)

    # -- parsing --
    def __call__(self, argv, known_only=False):
        """Parse the flags in ``argv[1:]`` (``argv[0]`` is the program); return
        ``[argv[0]]`` and the arguments that are not flags (with the undefined flags,
        when ``known_only``). Raises UnrecognizedFlagError naming undefined flags."""
        if isinstance(argv, str) or not isinstance(argv, (list, tuple)):
            raise InvalidArgumentError(f"FLAGS(argv): argv must be a list of strings such as "
                                       f"sys.argv, got {type(argv).__name__}")
        argv = list(argv)
        if not argv:
            raise InvalidArgumentError("FLAGS(argv): argv must hold at least the program name")
        args, rest = argv[1:], []
        if "--" in args:
            i = args.index("--")
            args, rest = args[:i], args[i + 1:]
        values, extra = self._parse(self._normalise(args))
        unknown = [a for a in extra if a.startswith("-") and len(a) > 1 and not _is_number(a)]
        if unknown and not known_only:
            defined = ", ".join("--" + n for n in sorted(self._flags)) or "none"
            raise UnrecognizedFlagError(
                f"unknown command line flag{'s' if len(unknown) > 1 else ''}: "
                f"{', '.join(unknown)} (defined: {defined}); define it with "
                "tf.flags.DEFINE_*, or pass it after '--'")
        self._values.update(values)
        self.__dict__["_parsed"] = True
        return [argv[0]] + extra + rest

    def _normalise(self, args):
        """Booleans take a value only after ``=``: ``--x`` -> ``--x=true``,
        ``--nox`` -> ``--x=false`` (so ``--x file`` leaves ``file`` an argument)."""
        out = []
        for a in args:
            if a.startswith("-") and "=" not in a:
                name = a.lstrip("-")
                flag = self._flags.get(name)
                if flag is not None and flag.kind == "bool":
                    a = f"--{name}=true"
                elif name.startswith("no") and getattr(
                        self._flags.get(name[2:]), "kind", None) == "bool":
                    a = f"--{name[2:]}=false"
            elif a.startswith("-") and not a.startswith("--") and "=" in a:
                a = "-" + a                     # -x=1 -> --x=1 (absl takes one dash too)
            out.append(a)
        return out

    def _parse(self, args):
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False,
                                         prefix_chars="-")
        for name, flag in self._flags.items():
            parser.add_argument(f"--{name}", f"-{name}",
                                dest=name, type=str, default=argparse.SUPPRESS,
                                action="append" if flag.multi else "store")
        try:
            ns, extra = parser.parse_known_args(args)
        except SystemExit:            # (argparse exits on a flag without its value)
            raise IllegalFlagValueError(
                f"cannot parse the command line {args}: a flag is missing its value "
                "(write --name=value)") from None
        values = {name: self._flags[name].convert(v) for name, v in vars(ns).items()}
        return values, extra

    def help_text(self) -> str:
        lines = []
        for name in sorted(self._flags):
            f = self._flags[name]
            lines.append(f"  --{name}: {f.help or ''}\n    (default: {f.default!r})")
        return "flags:\n" + "\n".join(lines) if lines else "no flags defined"


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


#: the flags of this program (``tf.flags.FLAGS``, ``tf.app.flags.FLAGS``)
FLAGS = FlagValues()


def _definer(kind, parse):
    def define(name, default, help=None, flag_values=None, **kwargs):  # noqa: A002
        fv = FLAGS if flag_values is None else flag_values
        return fv._define(_Flag(name, default, help, kind, parse))
    define.__name__ = f"DEFINE_{kind}"
    define.__doc__ = (f"Define the {kind} flag ``--name`` with its ``default`` and ``help`` "
                      "text (on ``flag_values``, default :data:`FLAGS`).")
    return define


DEFINE_string = _definer("string", str)
DEFINE_integer = _definer("integer", int)
DEFINE_float = _definer("float", float)
DEFINE_boolean = _definer("bool", _parse_bool)
DEFINE_bool = DEFINE_boolean
DEFINE_list = _definer("list", _parse_list)


def DEFINE_enum(name, default, enum_values, help=None,  # noqa: A002,N802
                flag_values=None, **kwargs):
    """A string flag whose value must be one of ``enum_values``."""
    fv = FLAGS if flag_values is None else flag_values
    return fv._define(_Flag(name, default, help, "enum", str, choices=tuple(enum_values)))


def DEFINE_multi_string(name, default, help=None, flag_values=None, **kwargs):  # noqa: A002,N802
    """A flag given any number of times (``--f a --f b``): a list of strings."""
    fv = FLAGS if flag_values is None else flag_values
    if isinstance(default, str):
        default = [default]
    return fv._define(_Flag(name, default, help, "multi_string", str, multi=True))


class _FlagsNamespace:
    """``tf.flags`` / ``tf.app.flags``: the DEFINE functions, FLAGS and the errors."""

    FLAGS = FLAGS
    FlagValues = FlagValues
    DEFINE_string = staticmethod(DEFINE_string)
    DEFINE_integer = staticmethod(DEFINE_integer)
    DEFINE_float = staticmethod(DEFINE_float)
    DEFINE_boolean = staticmethod(DEFINE_boolean)
    DEFINE_bool = staticmethod(DEFINE_bool)
    DEFINE_list = staticmethod(DEFINE_list)
    DEFINE_enum = staticmethod(DEFINE_enum)
    DEFINE_multi_string = staticmethod(DEFINE_multi_string)
    Error = Error
    UnrecognizedFlagError = UnrecognizedFlagError
    IllegalFlagValueError = IllegalFlagValueError
    UnparsedFlagAccessError = UnparsedFlagAccessError
    DuplicateFlagError = DuplicateFlagError

    def __repr__(self):
        return "<tf.flags>"


flags = _FlagsNamespace()


# --- run -----------------------------------------------------------------------------------

def run(main=None, argv=None):
    """Parse the flags of ``argv`` (default ``sys.argv``), then
    ``sys.exit(main(remaining_argv))``; ``main`` defaults to ``__main__.main``.
    ``--help`` (or ``-h``, ``--helpfull``) prints the defined flags and exits with 0."""
    args = list(sys.argv if argv is None else argv)
    head = args[1:args.index("--")] if "--" in args else args[1:]
    if any(a in ("--help", "-h", "--helpfull", "-help") for a in head):
        print(f"usage: {args[0] if args else 'program'} [flags]\n{FLAGS.help_text()}")
        sys.exit(0)
    remaining = FLAGS(args, known_only=True)
    if main is None:
        main = getattr(sys.modules.get("__main__"), "main", None)
        if main is None:
            raise InvalidArgumentError("tf.app.run(): no main given and the __main__ module "
                                       "has no main function; pass main=your_function")
    sys.exit(main(remaining))


# --- execution modes -------------------------------------------------------------------------

#: ops run, and every check they make is done, before they return (the default)
SYNC = 0
#: devices that queue work may defer the checks they would wait for to :func:`async_wait`
ASYNC = 1


class _ExecutionState(threading.local):
    mode = SYNC


_state = _ExecutionState()
_deferred: list = []
_deferred_lock = threading.Lock()


def executing_async() -> bool:
    """Whether this thread runs in ASYNC mode. For backends: a backend whose device
    queues work asks this before deferring a check it would otherwise wait for (an
    error flag read back from the device) with :func:`defer_check`. Nothing on the
    dispatch path reads the mode, so SYNC costs nothing."""
    return _state.mode == ASYNC


def defer_check(check) -> None:
    """For backends, in ASYNC mode: keep ``check`` (a callable returning an exception
    naming the op and the device, or None when all is well) until :func:`async_wait`,
    which calls it after every device finished its queue."""
    with _deferred_lock:
        _deferred.append(check)


def get_execution_mode() -> int:
    """This thread's execution mode: :data:`SYNC` or :data:`ASYNC`."""
    return _state.mode


@contextlib.contextmanager
def execution_mode(mode):
    """Run the body in ``mode`` (:data:`SYNC` or :data:`ASYNC`; ``None``: keep this
    thread's mode), in this thread; the mode before it comes back on exit."""
    if mode is None:
        yield
        return
    if isinstance(mode, bool) or mode not in (SYNC, ASYNC):
        raise InvalidTypeError(f"execution_mode: expected tf.SYNC ({SYNC}) or tf.ASYNC "
                               f"({ASYNC}) or None, got {mode!r}")
    prev = _state.mode
    _state.mode = mode
    try:
        yield
    finally:
        _state.mode = prev


def _take_deferred_error():
    """Run and forget the deferred checks, in order; the first error one found."""
    with _deferred_lock:
        checks = _deferred[:]
        _deferred.clear()
    first = None
    for check in checks:
        try:
            err = check()
        except Exception as e:  # noqa: BLE001 - a failing check reports its error
            err = e
        if first is None and err is not None:
            first = err
    return first


def async_wait() -> None:
    """Wait until every device has run the work queued on it, then raise the first
    error an op left while running asynchronously (and forget the others).

    Every device tapeflow has opened is synchronised (OpenCL: its queue is finished;
    CUDA: its stream synchronised; the host: nothing to wait for)."""
    first = None
    for dev in _devices.list_devices():
        try:
            dev.backend.synchronize(dev)
        except Exception as e:  # noqa: BLE001 - wait for every device, raise the first error
            first = first or e
    err = _take_deferred_error()
    if first is None:
        first = err
    if first is not None:
        raise first


def async_clear_error() -> None:
    """Forget the checks deferred while running asynchronously, and so the errors they
    would raise (the deferred checks are the process's, as TensorFlow's are its
    context's; the mode is per thread)."""
    with _deferred_lock:
        _deferred.clear()


@contextlib.contextmanager
def async_scope():
    """``tf.experimental.async_scope()``: ops inside run in ASYNC mode; on exit, wait for
    every device and raise an error a queued op left (an error the body raised itself
    propagates, the queued ones forgotten)."""
    with execution_mode(ASYNC):
        try:
            yield
        except BaseException:
            async_clear_error()
            raise
    async_wait()


class _Experimental:
    """``tf.experimental``: ``async_scope``, ``async_clear_error``."""

    async_scope = staticmethod(async_scope)
    async_clear_error = staticmethod(async_clear_error)

    def __repr__(self):
        return "<tf.experimental>"


experimental = _Experimental()
