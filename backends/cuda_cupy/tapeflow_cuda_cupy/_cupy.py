"""CuPy, imported lazily and probed once.

Nothing here imports CuPy at module import time: the plugin must load (and show its
kernel coverage) on machines without CuPy or without a GPU. :func:`probe` imports
CuPy and asks the CUDA runtime for its devices once, and remembers the answer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import types

INSTALL_HINT = "pip install -e 'backends/cuda_cupy[cuda13]'"

_lock = threading.Lock()
_probe: tuple | None = None      # (cupy module or None, device count, reason or None)


def probe():
    """``(cupy, n_devices, None)`` when CUDA is usable, else ``(cupy or None, 0, reason)``.

    Reasons: CuPy not installed (with the install command), CuPy failing to import
    (its error), the CUDA runtime's error when there is no driver or no device, or
    ``TAPEFLOW_CUDA_DISABLE`` being set.
    """
    global _probe
    if _probe is not None:
        return _probe
    with _lock:
        if _probe is None:
            _probe = _do_probe()
    return _probe


def _do_probe():
    if os.environ.get("TAPEFLOW_CUDA_DISABLE", "") not in ("", "0"):
        return None, 0, "disabled by the environment variable TAPEFLOW_CUDA_DISABLE"
    try:
        import cupy
    except ImportError as e:
        if (e.name or "").split(".")[0] == "cupy":
            return None, 0, f"CuPy is not installed ({INSTALL_HINT})"
        return None, 0, f"CuPy failed to import ({type(e).__name__}: {e}); reinstall it " \
                        f"({INSTALL_HINT})"
    except Exception as e:  # a broken install must not break tapeflow
        return None, 0, f"CuPy failed to import ({type(e).__name__}: {e})"
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError: no driver, driver too old, no device
        return cupy, 0, f"CUDA is not usable: {_cuda_error_text(e)}"
    if n <= 0:
        return cupy, 0, "the CUDA driver reports no GPU"
    return cupy, n, None


def _cuda_error_text(e):
    text = str(e) or type(e).__name__
    if "InsufficientDriver" in text or "NoDevice" in text or "no CUDA-capable" in text:
        return text + " (is an NVIDIA driver installed and a GPU visible?)"
    return text


def cupy():
    """The CuPy module (import it if needed); raises ImportError without it."""
    p = probe()
    if p[0] is not None:
        return p[0]
    import cupy as cp
    return cp


def reset_probe_for_tests():
    global _probe
    _probe = None


class _NoErrstate(contextlib.AbstractContextManager):
    """``numpy.errstate`` stand-in: CuPy never warns about division or invalid values
    (and ``cupyx.errstate(divide=...)`` raises NotImplementedError)."""

    def __init__(self, **kwargs):
        pass

    def __exit__(self, *exc):
        return False


def compat_namespace(cp):
    """A module that is CuPy plus the few NumPy names the shared kernel sources use
    and CuPy lacks (``errstate``). Built once; attribute lookups stay plain dict hits."""
    ns = types.ModuleType("cupy", cp.__doc__)
    ns.__dict__.update(vars(cp))
    ns.__name__ = "cupy"          # (MathKernels.sign tells NumPy from others by the name)
    ns.errstate = _NoErrstate
    ns.__tapeflow_compat__ = True
    return ns
