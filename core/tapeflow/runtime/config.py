"""Runtime configuration: default device, device policy, memory info.

>>> import tapeflow as tf
>>> tf.config.get_device_policy()
'explicit'
"""

from __future__ import annotations

import collections as _collections
import numbers as _numbers
import os as _os
import types as _types

from ..errors import InvalidArgumentError, UnimplementedError
from . import devices as _devs
from .dispatch import policy as _policy

__all__ = ["set_default_device", "get_default_device", "set_device_policy", "get_device_policy",
           "silent_copies", "memory_info", "list_devices", "list_physical_devices",
           "list_logical_devices", "set_soft_device_placement", "get_soft_device_placement",
           "experimental", "LogicalDeviceConfiguration", "set_logical_device_configuration",
           "get_logical_device_configuration"]

set_default_device = _devs.set_default_device


def get_default_device() -> str:
    return _devs.default_device().name


def set_device_policy(mode: str) -> None:
    """``"explicit"`` (default): ops whose inputs live on different devices raise
    DeviceMismatchError, except small host tensors and host inputs inside a
    ``device()`` scope, which are copied. ``"silent"``: copy anything.
    ``"warn"``: copy and warn."""
    if mode not in ("explicit", "silent", "warn"):
        raise InvalidArgumentError(
            f"device policy must be 'explicit', 'silent' or 'warn', got {mode!r}")
    _policy.mode = mode


def get_device_policy() -> str:
    return _policy.mode


def silent_copies() -> int:
    """How many non-trivial implicit copies the device policy has made."""
    return _policy.silent_copies


def memory_info(device="cpu:0") -> dict:
    """Memory statistics of a device, as its backend reports them."""
    d = _devs.get_device(device)
    return d.backend.memory_info(d)


def list_devices():
    return [d.name for d in _devs.list_devices()]


PhysicalDevice = _collections.namedtuple("PhysicalDevice", "name device_type")
LogicalDevice = _collections.namedtuple("LogicalDevice", "name device_type")


def _typed(device_type, kind, prefix):
    ds = [d for d in _devs.list_devices() if kind is LogicalDevice or not (d.is_host and d.index)]
    if device_type is not None:
        t = device_type.lower()
        ds = [d for d in ds if d.type == t or (t == "gpu" and d.is_gpu)]
    types = [("GPU" if d.type in ("cuda", "gpu") else d.type.upper()) for d in ds]
    return [kind(f"/{prefix}:{t}:{d.index}", t) for d, t in zip(ds, types)]


def list_physical_devices(device_type=None):
    """The devices of the loaded backends, as TensorFlow's ``PhysicalDevice(name=
    '/physical_device:CPU:0', device_type='CPU')``; ``device_type`` filters ("GPU": any GPU).

    >>> import tapeflow as tf
    >>> tf.config.list_physical_devices("CPU")[0]
    PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')
    """
    return _typed(device_type, PhysicalDevice, "physical_device")


def list_logical_devices(device_type=None):
    """As :func:`list_physical_devices`, named as ``tf.device`` accepts (``/device:CPU:0``)."""
    return _typed(device_type, LogicalDevice, "device")


LogicalDeviceConfiguration = _collections.namedtuple(
    "LogicalDeviceConfiguration", "memory_limit experimental_priority experimental_device_ordinal",
    defaults=(None, None, None))
_logical = [None]       # the configurations the CPU was split into


def set_logical_device_configuration(device, logical_devices):
    """Split the physical CPU into ``len(logical_devices)`` logical devices, as TensorFlow:
    ``cpu:0`` ... ``cpu:N-1`` (``/device:CPU:i``), each a device of its own for ``tf.device``
    and ``tf.distribute.MirroredStrategy``, over the same host memory and cores. Unlike
    TensorFlow it may be called at any time (tensors already on a removed ``cpu:i`` stay
    usable). ``memory_limit`` is refused for the CPU, as TensorFlow; GPUs are not split.

    >>> import tapeflow as tf
    >>> cpu = tf.config.list_physical_devices("CPU")[0]
    >>> two = [tf.config.LogicalDeviceConfiguration()] * 2
    >>> tf.config.set_logical_device_configuration(cpu, two)
    >>> [d.name for d in tf.config.list_logical_devices("CPU")]
    ['/device:CPU:0', '/device:CPU:1']
    >>> tf.config.set_logical_device_configuration(cpu, [])       # one CPU device again
    """
    dev = _devs.get_device(getattr(device, "name", device))
    if not dev.is_host or dev.index:
        raise UnimplementedError(f"tapeflow splits only the physical CPU into logical devices, "
                                 f"not {dev.name}: use one replica per GPU (MirroredStrategy)")
    if not isinstance(logical_devices, (list, tuple)) or any(
            not isinstance(c, LogicalDeviceConfiguration) or c.memory_limit is not None
            for c in logical_devices):
        raise InvalidArgumentError("logical_devices must be a list of tf.config.LogicalDevice"
                                   "Configuration() without memory_limit (the CPU has none), "
                                   f"got {logical_devices!r}")
    _devs.table.set_logical_cpus(max(1, len(logical_devices)))
    _logical[0] = list(logical_devices)


def get_logical_device_configuration(device):
    """What :func:`set_logical_device_configuration` last gave ``device`` (None: not split)."""
    return _logical[0] if _devs.get_device(getattr(device, "name", device)).name == "cpu:0" \
        else None


def set_soft_device_placement(enabled: bool) -> None:
    """On (the default, as TensorFlow): ``with tf.device("GPU:0")`` on a machine without
    that device places ops on ``cpu:0`` and logs it once. Off: it raises NotFoundError."""
    _devs.soft_placement[0] = bool(enabled)


def get_soft_device_placement() -> bool:
    return _devs.soft_placement[0]


# --- numerical precision and cuDNN convolutions (tf.config.experimental) -------------------
# One block, read by accelerator backends at call time (or through the observer), so
# the core never imports a backend.

_tf32 = [False]                 # TensorFloat-32 allowed for float32 matmul/convolutions
_tf32_observers: list = []
_cudnn = [None]                 # None: the environment variable TAPEFLOW_CUDNN decides


def enable_tensor_float_32_execution(enabled: bool) -> None:
    """Allow (True) or forbid (False, the default) TensorFloat-32 for float32 matrix
    multiplications and convolutions on GPUs that have it (NVIDIA Ampere and later):
    inputs rounded to a 10-bit mantissa, about 1e-3 relative error, often several times
    faster. As ``tf.config.experimental.enable_tensor_float_32_execution``; tapeflow's
    default is strict float32. Backends are told at once (``observe_tensor_float_32``)."""
    on = bool(enabled)
    _tf32[0] = on
    for fn in list(_tf32_observers):
        fn(on)


def tensor_float_32_execution_enabled() -> bool:
    """Whether TensorFloat-32 is allowed (see ``enable_tensor_float_32_execution``)."""
    return _tf32[0]


def observe_tensor_float_32(fn) -> None:
    """For backends: call ``fn(enabled)`` now and whenever the TensorFloat-32 switch
    changes (the CUDA backend sets cuBLAS's compute type through CuPy this way)."""
    if fn not in _tf32_observers:
        _tf32_observers.append(fn)
    fn(_tf32[0])


def enable_cudnn_convolutions(enabled) -> None:
    """Route ``Conv2D`` and its gradients on CUDA devices through NVIDIA's cuDNN
    frontend (``pip install 'tapeflow-cuda-cupy[cudnn]'``) instead of im2col + GEMM
    (True, the default where the frontend is installed: on an H100 it passed the
    conformance suite and ran forward+backward at 1.01x PyTorch's time, where im2col
    took 3x), or keep im2col (False); ``None`` goes back to the environment variable
    ``TAPEFLOW_CUDNN`` (``0`` = off; unset = on).
    Cases cuDNN cannot run fall back to im2col (``python -m tapeflow info`` and the
    ``tapeflow.cuda`` debug log say which path ran)."""
    _cudnn[0] = None if enabled is None else bool(enabled)


def cudnn_convolutions_enabled() -> bool:
    """Whether convolutions on CUDA devices may use cuDNN (see ``enable_cudnn_convolutions``)."""
    if _cudnn[0] is not None:
        return _cudnn[0]
    return _os.environ.get("TAPEFLOW_CUDNN", "1").strip().lower() not in ("0", "false", "no",
                                                                         "off")


# --- CUDA graphs (tapeflow.tracing.capture) ------------------------------------------------
#: read by tf.function when it traces a signature (and by a captured replay at each call)
cuda_graphs = [_os.environ.get("TAPEFLOW_CUDA_GRAPHS", "") not in ("", "0")]


def enable_cuda_graphs(enabled: bool = True) -> None:
    """Replay ``tf.function`` s on a CUDA device as one captured CUDA graph (off by
    default; ``TAPEFLOW_CUDA_GRAPHS=1`` turns it on at start-up). Experimental: its GPU
    tests passed on an H100, the conformance suite has not yet run with it on. Signatures
    traced while it is on capture on their second
    call; turning it off makes them replay plainly again. See docs/backends.md."""
    cuda_graphs[0] = bool(enabled)


def cuda_graphs_enabled() -> bool:
    """Whether :func:`enable_cuda_graphs` is on."""
    return cuda_graphs[0]


# --- threads (tf.config.threading) ------------------------------------------------------
_threads, _thread_observers = {"intra_op": 0, "inter_op": 0}, []   # 0: the default (all cores)


def _set_threads(kind, n):
    if isinstance(n, bool) or not isinstance(n, _numbers.Integral) or not 0 <= n < 1 << 31:
        raise InvalidArgumentError(f"{kind}_parallelism_threads: {n!r} is not an int in [0, 2**31)")
    _threads[kind] = n = int(n)
    for fn in list(_thread_observers) if kind == "intra_op" else ():
        fn(n)


def set_intra_op_parallelism_threads(num_threads: int) -> None:
    """How many threads one op may use (0, the default: every core), as TensorFlow's
    ``tf.config.threading.set_intra_op_parallelism_threads``, but it may be called at any
    time. The CPU backend applies it to its native kernels and to NumPy's BLAS (OpenBLAS)
    at once (backends are told through ``observe_intra_op_threads``; docs/cpu-kernels.md).

    >>> import tapeflow as tf
    >>> tf.config.threading.set_intra_op_parallelism_threads(1)
    >>> tf.config.threading.get_intra_op_parallelism_threads()
    1
    >>> tf.config.threading.set_intra_op_parallelism_threads(0)     # back to the default
    """
    _set_threads("intra_op", num_threads)


def get_intra_op_parallelism_threads() -> int:
    """The number :func:`set_intra_op_parallelism_threads` set (0: the default)."""
    return _threads["intra_op"]


def set_inter_op_parallelism_threads(num_threads: int) -> None:
    """Accepted for TensorFlow's API and remembered, with no effect: tapeflow runs each
    op in the Python thread that calls it, one after the other (no inter-op pool); run
    independent work in your own threads (docs/concurrency.md)."""
    _set_threads("inter_op", num_threads)


def get_inter_op_parallelism_threads() -> int:
    """The number :func:`set_inter_op_parallelism_threads` set (0: the default)."""
    return _threads["inter_op"]


def observe_intra_op_threads(fn) -> None:
    """For backends: call ``fn(num_threads)`` now and whenever
    :func:`set_intra_op_parallelism_threads` is called (0: the default)."""
    _thread_observers.append(fn)
    fn(_threads["intra_op"])


#: ``tf.config.threading.*``
threading = _types.SimpleNamespace(**{f.__name__: f for f in (
    set_intra_op_parallelism_threads, get_intra_op_parallelism_threads,
    set_inter_op_parallelism_threads, get_inter_op_parallelism_threads)})

#: ``tf.config.experimental.*``
experimental = _types.SimpleNamespace(
    enable_tensor_float_32_execution=enable_tensor_float_32_execution,
    tensor_float_32_execution_enabled=tensor_float_32_execution_enabled,
    enable_cudnn_convolutions=enable_cudnn_convolutions,
    cudnn_convolutions_enabled=cudnn_convolutions_enabled,
    enable_cuda_graphs=enable_cuda_graphs,
    cuda_graphs_enabled=cuda_graphs_enabled,
    set_virtual_device_configuration=set_logical_device_configuration,
    get_virtual_device_configuration=get_logical_device_configuration,
    VirtualDeviceConfiguration=LogicalDeviceConfiguration)

__all__ += ["enable_tensor_float_32_execution", "tensor_float_32_execution_enabled",
            "observe_tensor_float_32", "enable_cudnn_convolutions",
            "cudnn_convolutions_enabled", "enable_cuda_graphs", "cuda_graphs_enabled",
            "threading", "observe_intra_op_threads"]
