"""Runtime configuration: default device, device policy, memory info.

>>> import tapeflow as tf
>>> tf.config.get_device_policy()
'explicit'
"""

from __future__ import annotations

from .errors import InvalidArgumentError
from . import devices as _devs
from .dispatch import policy as _policy

__all__ = ["set_default_device", "get_default_device", "set_device_policy", "get_device_policy",
           "silent_copies", "memory_info", "list_devices", "list_physical_devices"]

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
