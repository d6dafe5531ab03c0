"""The exception hierarchy (docs/errors.md, "The error family").

Every error raised on behalf of an op names the op and the device, e.g.
``InvalidArgumentError: indices[0] = 3081 is not in [0, 128) [Op:GatherV2] on cpu:0``.
Each class also subclasses the matching built-in exception so that plain
``except ValueError`` code keeps working.

>>> import tapeflow as tf
>>> try:
...     tf.reshape([1, 2, 3], [2, 2])
... except tf.errors.InvalidArgumentError as e:
...     print(type(e).__name__, isinstance(e, ValueError))
InvalidArgumentError True
"""

from __future__ import annotations

__all__ = [
    "TapeflowError", "OpError", "InvalidArgumentError", "InvalidTypeError", "OutOfRangeError",
    "NotFoundError", "UnimplementedError",
    "DeviceMismatchError", "ResourceExhaustedError", "FailedPreconditionError",
    "NotDifferentiableError", "DataLossError", "PermissionDeniedError", "PluginError",
    "PluginConflictError", "PluginOverrideWarning",
]


class TapeflowError(Exception):
    """Base class of every tapeflow error."""


class OpError(TapeflowError):
    """An error raised while running an op. ``op`` and ``device`` say where.

    The message ends with ``[Op:<name>] on <device>`` once the dispatcher has
    attached the context (kernels raise without it; ``execute`` adds it). An error
    raised outside any op -- a public function refusing an argument before it runs
    one (``tf.zeros(2, dtype="x")``) -- names that function instead: ``[in tf.zeros]``.
    It is found as the error propagates, from its traceback (see :attr:`function`):
    no public function passes its name down, and raising costs nothing more.
    """

    def __init__(self, message: str, op: str | None = None, device=None):
        self.message = message
        self.op = op
        self.device = device
        super().__init__(self._format())

    @property
    def function(self) -> str | None:
        """The tapeflow function the caller called, through which this error came out
        (``tf.zeros``, ``Tensor.__getitem__``, ``Checkpoint.write``), read from the
        traceback: the innermost tapeflow frame called from outside tapeflow (user
        code, a plugin, :mod:`tapeflow.testing`). None before the error was raised."""
        return _entry_point(self.__traceback__)

    def _format(self) -> str:
        msg = self.message
        if self.op is not None:
            msg += f" [Op:{self.op}]"
        if self.op is None or self.op == "Const":
            # (Const: a conversion inside another function, tf.reduce_sum's of its input)
            fn = _entry_point(self.__traceback__)
            if fn is not None and fn not in _CONVERTERS:
                msg += f" [in {fn}]"
        if self.device is not None:
            msg += f" on {self.device}"
        return msg

    def with_context(self, op, device):
        """Attach the op and device if the raiser did not know them."""
        if self.op is None:
            self.op = op
        if self.device is None:
            self.device = device
        self.args = (self._format(),)
        return self

    def __str__(self):
        return self._format()


def _internal(frame) -> bool:
    """A frame of tapeflow's own code (its test kit and module-level code excepted:
    those call tapeflow as a user does; its comprehensions and lambdas are its own)."""
    name = frame.f_globals.get("__name__") or ""
    return ((name == "tapeflow" or name.startswith("tapeflow."))
            and not name.startswith("tapeflow.testing")
            and frame.f_code.co_name != "<module>")


#: (a module without PUBLIC_NAMES: see _entry_point)
_NO_NAMES: dict = {}

#: public functions whose own op is Const (no need to name them twice)
_CONVERTERS = {"tf.constant", "tf.convert_to_tensor", "constant", "convert_to_tensor"}

#: tapeflow modules whose functions are public under another prefix than ``tf.``
_PREFIXES = {"tapeflow.ops.nn": "tf.nn.", "tapeflow.ops.linalg": "tf.linalg.",
             "tapeflow.ops.random": "tf.random.", "tapeflow.ops.signal": "tf.signal.",
             "tapeflow.nest": "tf.nest.", "tapeflow.ops.image": "tf.image."}


def _entry_point(tb):
    """The public name of the innermost tapeflow frame entered from outside tapeflow
    in traceback ``tb`` (and the frames calling its first frame), or None."""
    if tb is None:
        return None
    frames = []
    f = tb.tb_frame.f_back
    while f is not None and len(frames) < 200:        # the callers of the catching frame
        frames.append(f)
        f = f.f_back
    frames.reverse()
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    entry, outside = None, False
    for f in frames:
        inside = _internal(f)
        if inside and outside:
            entry = f
        outside = not inside
    if entry is None:
        return None
    code = entry.f_code
    qual = getattr(code, "co_qualname", code.co_name)
    # (a module names its functions installed under another name in PUBLIC_NAMES:
    # ops.array_slice's _getitem is Tensor.__getitem__)
    qual = entry.f_globals.get("PUBLIC_NAMES", _NO_NAMES).get(qual, qual)
    if qual == "OpDef.__call__":                      # an op called directly: its name
        name = getattr(entry.f_locals.get("self"), "name", None)
        return name if isinstance(name, str) else qual
    module = entry.f_globals.get("__name__") or ""
    if "." not in qual and (module.startswith("tapeflow.ops.") or module in _PREFIXES):
        return _PREFIXES.get(module, "tf.") + qual
    return qual


class InvalidArgumentError(OpError, ValueError):
    """Bad input: shapes, dtypes, attribute values or index ranges."""


class InvalidTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong kind: a string where a number is needed, an unknown
    dtype, an object that is not a Tensor, Variable or layer. Also a ``TypeError``,
    which is what Python code (and TensorFlow) raises for these."""


class OutOfRangeError(OpError, IndexError):
    """An index or iteration past the end (a dataset iterator that is exhausted, an
    index beyond a dimension). Also an ``IndexError``."""


class NotFoundError(OpError, LookupError):
    """No kernel (or device, or op) with that name; the message lists what exists."""


class UnimplementedError(OpError, NotImplementedError):
    """The device cannot do this (e.g. float64 without fp64 support)."""


class DeviceMismatchError(InvalidArgumentError):
    """Inputs of one op live on different devices and the policy forbids a copy."""


class ResourceExhaustedError(OpError, MemoryError):
    """Out of device memory; the message has the request size and the device."""


class FailedPreconditionError(OpError, RuntimeError):
    """The system is not in a state to run this (e.g. an unavailable device)."""


class NotDifferentiableError(OpError, LookupError):
    """A gradient was requested through an op that has no gradient rule."""


class DataLossError(OpError, ValueError):
    """Unrecoverable data loss or corruption (a truncated or corrupt checkpoint file, a
    file that is not what it claims to be). Also a ``ValueError``."""


class PermissionDeniedError(OpError, PermissionError):
    """A path read from a file (a checkpoint's state file or index) leads outside the
    directory it belongs to: refused, nothing is read, overwritten or deleted there."""


class DeadlineExceededError(OpError, TimeoutError):
    """An operation waited longer than its deadline (a collective whose peers did not
    join: one rank died, diverged or is stuck). Also a ``TimeoutError``."""


class PluginError(TapeflowError, RuntimeError):
    """A plugin failed to load or register."""


class PluginConflictError(PluginError):
    """Two plugins registered the same op or (op, device type) kernel."""


class PluginOverrideWarning(UserWarning):
    """A plugin replaced an op or kernel another source registered (``override=True``)."""


# Tracebacks and reprs name the public module (``tapeflow.errors.InvalidArgumentError``),
# which ``import tapeflow`` makes an alias of this one; pickling finds the classes there.
for _cls in list(globals().values()):
    if isinstance(_cls, type) and _cls.__module__ == __name__:
        _cls.__module__ = "tapeflow.errors"
del _cls
