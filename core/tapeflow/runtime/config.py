"""Runtime configuration: default device, device policy, memory info.

>>> import tapeflow as tf
>>> tf.config.get_device_policy()
'explicit'
"""

from __future__ import annotations

import os as _os
import types as _types

from .errors import InvalidArgumentError
from . import devices as _devs
from .dispatch import policy as _policy

__all__ = ["set_default_device", "get_default_device", "set_device_policy", "get_device_policy",
           "silent_copies", "memory_info", "list_devices", "list_physical_devices",
           "experimental"]

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


def list_physical_devices(device_type=None):
    ds = _devs.list_devices()
    if device_type is not None:
        t = device_type.lower()
        ds = [d for d in ds if d.type == t or (t == "gpu" and d.is_gpu)]
    return [d.name for d in ds]


# --- CUDA graphs (tapeflow.tracing.capture) ------------------------------------------------
#: read by tf.function when it traces a signature (and by a captured replay at each call)
cuda_graphs = [_os.environ.get("TAPEFLOW_CUDA_GRAPHS", "") not in ("", "0")]


def enable_cuda_graphs(enabled: bool = True) -> None:
    """Replay ``tf.function`` s on a CUDA device as one captured CUDA graph (off by
    default; ``TAPEFLOW_CUDA_GRAPHS=1`` turns it on at start-up). Experimental: it has
    not yet run on a GPU. Signatures traced while it is on capture on their second
    call; turning it off makes them replay plainly again. See docs/backends.md."""
    cuda_graphs[0] = bool(enabled)


def cuda_graphs_enabled() -> bool:
    """Whether :func:`enable_cuda_graphs` is on."""
    return cuda_graphs[0]


#: ``tf.config.experimental``
experimental = _types.SimpleNamespace(enable_cuda_graphs=enable_cuda_graphs,
                                      cuda_graphs_enabled=cuda_graphs_enabled)
