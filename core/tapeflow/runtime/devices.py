"""Devices: one canonical parser, the backends' device table, the ``device()`` stack.

A device name is ``<type>:<index>`` in lower case: ``cpu:0``, ``cuda:1``,
``opencl:0``. Every spelling the seeds use is accepted and canonicalised in one
place, :func:`canonical_name`::

    "cpu", "CPU:0", "/cpu:0", "/device:CPU:0",
    "/job:localhost/replica:0/task:0/device:CPU:0"   -> "cpu:0"
    "gpu:1", "/gpu:1", "/device:GPU:1"               -> "gpu:1"

``gpu:N`` is an alias: the N-th GPU of any backend that has GPUs (CUDA devices
first, then OpenCL GPUs). An OpenCL CPU device (PoCL) is ``opencl:N`` only.

>>> canonical_name("/job:localhost/replica:0/task:0/device:CPU:0")
'cpu:0'
>>> canonical_name("/gpu:1")
'gpu:1'
"""

from __future__ import annotations

import functools
import logging
import os
import threading

from ..errors import FailedPreconditionError, InvalidArgumentError, NotFoundError

__all__ = ["Device", "DeviceName", "full_name", "Backend", "device", "canonical_name",
           "get_device", "list_devices",
           "num_gpus", "default_device", "set_default_device", "current_device"]


class Backend:
    """The backend contract (docs/backends.md): what a backend plugin provides
    (register an instance with ``tapeflow_register_backends``). Subclass and
    override: ``list_devices``, ``to_host`` and ``from_host`` are required (the
    defaults raise, saying what is missing, in tinygrad's spirit); the other methods
    are optional capabilities whose defaults mean "not supported". The core calls
    nothing else on a backend.

    Attributes:
        name: short name shown by ``python -m tapeflow info`` (``"numpy"``).
        device_type: the device type its kernels are registered for (``"cpu"``).
        gpu_priority: order among backends when numbering ``gpu:N`` (lower first).
    """

    name: str = "?"
    device_type: str = "?"
    gpu_priority: int = 100

    def unavailable_reason(self) -> str | None:
        """``None`` when usable, else a one-line reason (library missing, no driver)."""
        return None

    def list_devices(self) -> list[dict]:
        """One dict per device: ``{"index": int, "is_gpu": bool, "description": str,
        "handle": object}``. ``handle`` is whatever the backend needs later."""
        raise NotImplementedError(f"backend {self.name} must implement list_devices")

    def to_host(self, array, device: Device):
        """Native array -> ``numpy.ndarray`` (waits for pending work)."""
        raise NotImplementedError(f"backend {self.name} must implement to_host")

    def from_host(self, array, device: Device):
        """``numpy.ndarray`` -> native array on ``device``."""
        raise NotImplementedError(f"backend {self.name} must implement from_host")

    def from_dlpack(self, obj, device: Device):
        """A native array on ``device`` sharing the memory of ``obj`` (a DLPack producer
        whose ``__dlpack_device__`` is this device), without a copy. The default says
        the backend cannot; the host backend and CUDA (CuPy) implement it."""
        raise NotImplementedError(f"backend {self.name} cannot import DLPack tensors")

    def copy_from(self, array, src: Device, dst: Device):
        """Copy a native array of ``src`` (any backend) to ``dst`` (this backend).
        The default goes through the host."""
        return self.from_host(src.backend.to_host(array, src), dst)

    def synchronize(self, device: Device) -> None:
        """Block until queued work on ``device`` has finished (``tf.async_wait()`` calls
        it for every device, then raises the first check deferred in ASYNC mode: see
        :mod:`tapeflow.app`)."""

    def dtype_unsupported(self, device: Device, dtype) -> str | None:
        """Why ``device`` cannot hold tensors of ``dtype`` (a tapeflow or NumPy dtype),
        or ``None`` when it can (the default). The conformance suite skips such
        dtypes with this reason; ``from_host`` should raise UnimplementedError."""
        return None

    def memory_info(self, device: Device) -> dict:
        """``{"current": bytes_in_use, "peak": ..., "total": ...}`` where known."""
        return {}

    # --- optional capabilities (the defaults: not supported) ------------------------
    def fusible_op(self, op_name: str, in_dtypes: tuple, attrs: dict) -> bool:
        """Whether :meth:`fuse_elementwise` can compile op ``op_name`` on inputs of
        ``in_dtypes`` (NumPy dtypes) with ``attrs``; tf.function's fusion pass only
        groups such ops. The default: no op (the backend does not fuse)."""
        return False

    def fuse_elementwise(self, spec):
        """One kernel for a group of elementwise ops: ``spec`` is a
        :class:`tapeflow.tracing.graph_fusion.ElementwiseSpec`; return
        ``callable(*native_arrays) -> array | tuple``, or None to leave the group
        unfused."""
        return None

    def info_notes(self) -> list:
        """Lines ``python -m tapeflow info`` prints under this backend: how it runs some
        ops and why (the CUDA backend: cuDNN or im2col convolutions, float32 precision).
        Default: none."""
        return []

    def graph_capture(self, device: Device):
        """An object that records the kernel launches of a traced function on
        ``device`` and replays them as one unit (a CUDA graph), or ``None`` (the
        default): the backend cannot. What the object provides is documented in
        :mod:`tapeflow.tracing.capture` (``tf.config.experimental.enable_cuda_graphs``)."""
        return None


class Device:
    """One device of one backend. Compare by identity or by name."""

    __slots__ = ("name", "type", "index", "backend", "handle", "is_gpu", "gpu_index",
                 "description", "is_host", "__weakref__")

    def __init__(self, type_, index, backend, handle=None, is_gpu=False, description=""):
        self.type = type_
        self.index = index
        self.name = f"{type_}:{index}"
        self.backend = backend
        self.handle = handle
        self.is_gpu = is_gpu
        self.gpu_index = None
        self.description = description
        self.is_host = type_ == "cpu"

    def __repr__(self):
        return self.name

    __str__ = __repr__

    def __eq__(self, other):
        # never raises: a bool, or NotImplemented for what is neither a Device nor a
        # string. The hash is the identity's, so ``d == "cpu:0"`` does not imply equal
        # hashes (a dict keyed by devices is looked up with devices).
        if isinstance(other, Device):
            return other is self
        if isinstance(other, str):
            try:
                return get_device(other) is self
            except Exception:  # noqa: BLE001 - not a device name (or a str subclass that raises)
                return False
        return NotImplemented

    # identity hash, C-level: devices key the dispatch caches on the hot path
    __hash__ = object.__hash__


class DeviceName(str):
    """``Tensor.device``: TensorFlow's full name of the device
    (``/job:localhost/replica:0/task:0/device:CPU:0``; the N-th GPU's ends ``GPU:N``), equal
    to every other spelling of that device: ``x.device == "cpu:0"`` holds, as
    ``x.device.endswith("CPU:0")`` does in TensorFlow. Its hash is the canonical name's."""

    def __eq__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        a = _resolve(self)
        return a is not None and a == _resolve(other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        d = _resolve(self)
        return hash(d.name if isinstance(d, Device) else d)


def _resolve(spec):
    """The Device a name names, else its canonical spelling (None: not a device name)."""
    spec = str(spec)        # (a DeviceName as a plain str: the caches below hash it)
    try:
        return get_device(spec)
    except (NotFoundError, InvalidArgumentError):
        try:
            return canonical_name(spec)
        except InvalidArgumentError:
            return None


_FULL_NAMES = {}


def full_name(dev) -> DeviceName:
    """TensorFlow's full name of ``dev`` (a :class:`DeviceName`)."""
    n = _FULL_NAMES.get(dev)
    if n is None:
        kind, i = ("GPU", dev.gpu_index) if dev.gpu_index is not None else (dev.type.upper(),
                                                                            dev.index)
        n = _FULL_NAMES[dev] = DeviceName(f"/job:localhost/replica:0/task:0/device:{kind}:{i}")
    return n


@functools.lru_cache(maxsize=256)
def canonical_name(spec: str) -> str:
    """Canonical ``type:index`` for any accepted spelling (see the module doc)."""
    s = spec.strip()
    low = s.lower()
    if "device:" in low:
        low = low[low.rindex("device:") + len("device:"):]
    low = low.strip("/")
    parts = low.split(":")
    if len(parts) == 1 and parts[0]:
        return f"{parts[0]}:0"
    # isascii: str.isdigit() is also true of "²", which int() refuses
    if len(parts) == 2 and parts[0] and parts[1].isascii() and parts[1].isdigit():
        return f"{parts[0]}:{int(parts[1])}"
    raise InvalidArgumentError(
        f"Cannot parse device name {spec!r}: expected 'cpu:0', 'gpu:1', 'cuda:0', "
        "'opencl:0', '/gpu:0', '/device:GPU:0' or '/job:localhost/replica:0/task:0/device:CPU:0'")


class _Table:
    """The devices the loaded backends provide (rebuilt when backends change)."""

    def __init__(self):
        self.backends: list[Backend] = []
        self.by_name: dict[str, Device] = {}
        self.gpus: list[Device] = []
        self.unavailable: dict[str, str] = {}   # backend name -> reason
        self.default: Device | None = None
        self.user_default: str | None = os.environ.get("TAPEFLOW_DEFAULT_DEVICE") or None
        self.logical_cpus = 1       # tf.config.set_logical_device_configuration

    def rebuild(self, backends):
        self.backends = list(backends)
        self.by_name.clear()
        self.gpus = []
        self.unavailable.clear()
        for be in sorted(self.backends, key=lambda b: b.gpu_priority):
            try:
                reason = be.unavailable_reason()
                infos = [] if reason else be.list_devices()
            except Exception as e:  # a backend that cannot even probe is unavailable
                reason, infos = f"{type(e).__name__}: {e}", []
            if reason:
                self.unavailable[be.name] = reason
                continue
            if not infos:
                self.unavailable[be.name] = "no devices found"
            for info in infos:
                d = Device(be.device_type, info["index"], be, info.get("handle"),
                           info.get("is_gpu", False), info.get("description", ""))
                self.by_name[d.name] = d
                if d.is_gpu:
                    d.gpu_index = len(self.gpus)
                    self.gpus.append(d)
        self.default = None
        self.set_logical_cpus(self.logical_cpus)

    def set_logical_cpus(self, n):
        """``cpu:1`` ... ``cpu:n-1``: TensorFlow's logical CPU devices, each a Device of the
        host backend over the same memory (a copy between them shares the array)."""
        host = self.by_name.get("cpu:0")
        for i in range(1, max(n, self.logical_cpus)):
            d = self.by_name.pop(f"cpu:{i}", None)
            if i < n and host is not None:
                if d is None or d.backend is not host.backend:
                    d = Device("cpu", i, host.backend, host.handle, False,
                               f"logical CPU device {i} of cpu:0")
                self.by_name[d.name] = d
        self.logical_cpus = n


table = _Table()


def _describe_available() -> str:
    have = ", ".join(sorted(table.by_name)) or "none"
    msg = f"Available devices: {have}" + (f" (gpu:0..gpu:{len(table.gpus) - 1} alias "
                                          + ", ".join(g.name for g in table.gpus) + ")"
                                          if table.gpus else "")
    if table.unavailable:
        msg += ". Unavailable backends: " + "; ".join(
            f"{k}: {v}" for k, v in sorted(table.unavailable.items()))
    return msg


def get_device(spec) -> Device:
    """Resolve a name or Device to a :class:`Device`; a clear NotFoundError otherwise."""
    if type(spec) is Device:
        return spec
    name = canonical_name(spec)
    d = table.by_name.get(name)
    if d is not None:
        return d
    typ, idx = name.split(":")
    if typ == "gpu" and int(idx) < len(table.gpus):
        return table.gpus[int(idx)]
    raise NotFoundError(f"Device {spec!r} ({name}) does not exist. " + _describe_available())


def list_devices() -> list[Device]:
    """Every usable device, CPU first."""
    return sorted(table.by_name.values(), key=lambda d: (not d.is_host, d.type, d.index))


def num_gpus() -> int:
    """Number of GPU devices over all backends (``gpu:0`` ... ``gpu:N-1``)."""
    return len(table.gpus)


def default_device() -> Device:
    """Where new tensors go outside a ``device()`` scope: the user's choice
    (``TAPEFLOW_DEFAULT_DEVICE`` or :func:`set_default_device`), else the first
    GPU, else ``cpu:0``."""
    d = table.default
    if d is None:
        if table.user_default:
            d = get_device(table.user_default)
        elif table.gpus:
            d = table.gpus[0]
        elif "cpu:0" in table.by_name:
            d = table.by_name["cpu:0"]
        else:
            raise FailedPreconditionError("No device is available. " + _describe_available())
        table.default = d
    return d


def set_default_device(spec) -> None:
    """Change the default device (``None`` restores the automatic choice)."""
    if spec is not None:
        get_device(spec)  # validate now, not at the first op
        spec = canonical_name(spec) if isinstance(spec, str) else spec.name
    table.user_default = spec
    table.default = None


# --- the device() scope ----------------------------------------------------------
# `active_scopes[0]` counts open scopes in all threads: dispatch reads this module
# global (a few ns) and touches the thread-local stack only when it is non-zero.
_local = threading.local()
active_scopes = [0]
soft_placement = [True]     # a missing device in device() means cpu:0 (as TensorFlow)
_SOFT_KINDS = frozenset({"cpu", "gpu", "cuda", "opencl", "tpu"})
_softened: set = set()      # the specs already logged
_scope_lock = threading.Lock()


def current_device() -> Device | None:
    """The innermost ``device()`` scope of this thread, or None."""
    if not active_scopes[0]:
        return None
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


class device:
    """Context manager placing new ops on a device (seed: ``with tf.device("/gpu:0")``).

    Inside the scope, ops run on that device; host (CPU) inputs are copied there
    (counted by ``tapeflow.config.silent_copies()``). ``device(None)`` clears the
    placement for its body.

    >>> import tapeflow as tf
    >>> with tf.device("/cpu:0"):
    ...     x = tf.constant([1.0, 2.0])
    >>> x.device
    '/job:localhost/replica:0/task:0/device:CPU:0'
    >>> x.device == "cpu:0"
    True
    """

    def __init__(self, spec):
        try:
            self._device = None if spec is None else get_device(spec)
        except NotFoundError:       # soft placement (tf.config.set_soft_device_placement)
            kind = canonical_name(spec).split(":")[0] if isinstance(spec, str) else None
            if (not soft_placement[0] or "cpu:0" not in table.by_name or kind not in
                    _SOFT_KINDS | {b.device_type for b in table.backends}):
                raise               # (a kind of device nobody makes: a typo, say so)
            self._device = table.by_name["cpu:0"]
            if spec not in _softened and not _softened.add(spec):    # (said once)
                logging.getLogger("tapeflow").warning(
                    "device %r does not exist: ops placed on cpu:0 (soft placement; "
                    "tf.config.set_soft_device_placement(False) raises instead)", spec)

    def __enter__(self):
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self._device)
        with _scope_lock:
            active_scopes[0] += 1
        return self._device

    def __exit__(self, *exc):
        _local.stack.pop()
        with _scope_lock:
            active_scopes[0] -= 1
        return False
