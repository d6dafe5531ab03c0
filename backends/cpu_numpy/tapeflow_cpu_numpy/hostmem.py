"""Host memory of the NumPy backend: freed buffers stay in the process.

An eager training step allocates and frees the same large arrays every step (im2col
columns, activations, gradients). With glibc's defaults every array above 128 KiB-32
MiB is a fresh ``mmap`` returned to the kernel when freed, or the top of the heap is
trimmed, so the next step pays a page fault for every 4 KiB it touches again. On the
2-core development VM that was 40% of the seeds' CNN step (28.9 ms -> 17.3 ms with
this module; ``benchmarks/profile_cnn.py``). Deep-learning frameworks avoid it with a
caching allocator (PyTorch recommends jemalloc or tcmalloc on the CPU); the same
effect here is two ``mallopt`` settings made once, when the backend registers:

* ``M_MMAP_THRESHOLD`` = 32 MiB (glibc's maximum): arrays up to that size come from
  the heap, whose freed memory is reused;
* ``M_TRIM_THRESHOLD`` = 512 MiB: up to that much freed memory stays in the process
  instead of going back to the kernel at every ``free``.

The cost: a process keeps up to 512 MiB of freed memory mapped after its peak (RSS
does not shrink back). ``TAPEFLOW_HOST_ALLOCATOR=system`` keeps glibc's defaults;
other C libraries (musl, macOS, Windows) are left alone. ``python -m tapeflow info``
says which applies (the ``cpu:0`` description).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["tune", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

_M_TRIM_THRESHOLD = -1          # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 512 << 20
_state: list = []


def tune() -> str:
    """Apply the settings once (see the module doc); returns what applies, in words."""
    if _state:
        return _state[0]
    if os.environ.get("TAPEFLOW_HOST_ALLOCATOR", "") == "system":
        what = "glibc defaults (TAPEFLOW_HOST_ALLOCATOR=system)"
    elif not sys.platform.startswith("linux"):
        what = "the system allocator"
    else:
        try:
            libc = ctypes.CDLL(None)
            _ = libc.gnu_get_libc_version      # glibc only (musl has no mallopt knobs)
            ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                  and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
        except (OSError, AttributeError):
            ok = False
        what = ("glibc keeps freed buffers (TAPEFLOW_HOST_ALLOCATOR=system: defaults)" if ok
                else "the system allocator (mallopt unavailable)")
    _state.append(what)
    return what
