"""The CPU backend's thread count: ``tf.config.threading.set_intra_op_parallelism_threads``.

One setting governs both thread pools an op of the CPU backend can use: the native
kernels' own workers (:mod:`.native`, ``set_num_threads``) and NumPy's BLAS, the
OpenBLAS that NumPy's wheel ships (``numpy.libs/libscipy_openblas64_*.so``) or that
NumPy was built against. The BLAS is reached through ``ctypes`` in the copy NumPy has
already loaded (found in ``/proc/self/maps`` or NumPy's bundled-library folder and
opened with ``RTLD_NOLOAD``, so nothing new is ever loaded): its
``*openblas*_set_num_threads*`` and ``*_get_num_threads*`` functions, no dependency on
threadpoolctl. Ops run one after the other in the calling thread, and each pool is
idle while the other works, so the two pools of ``n`` threads never oversubscribe the
``n`` cores they are given.

``0`` (the default) gives both pools OpenBLAS's own count from before this module
first set it: every core, unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` said
otherwise when NumPy loaded it (then the native pool keeps to the same limit). Where
NumPy's BLAS is not OpenBLAS (Accelerate, MKL), :func:`blas_threads` is None, the native
pool's default is its own (every core) and only it follows the setting
(``python -m tapeflow info`` says so).

>>> import tapeflow as tf
>>> from tapeflow_cpu_numpy import threads
>>> tf.config.threading.set_intra_op_parallelism_threads(1)
>>> threads.blas_threads() in (1, None)      # None: NumPy's BLAS is not OpenBLAS
True
>>> tf.config.threading.set_intra_op_parallelism_threads(0)
"""

from __future__ import annotations

import ctypes
import glob
import os

import numpy as np

from tapeflow import config

__all__ = ["blas_libraries", "blas_threads", "set_blas_threads", "apply", "install",
           "describe"]

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "_64_", "")


def _loaded_paths():
    """Paths of the loaded shared libraries whose name holds "openblas", NumPy's own
    first: from ``/proc/self/maps`` (Linux) and NumPy's bundled-library folders."""
    found = []
    root = os.path.dirname(np.__file__)
    for pattern in (os.path.join(root + ".libs", "*openblas*"),
                    os.path.join(root, ".dylibs", "*openblas*")):
        found += sorted(glob.glob(pattern))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "openblas" in os.path.basename(path).lower():
                    found.append(path)
    except OSError:
        pass
    seen, out = set(), []
    for p in found:
        real = os.path.realpath(p)
        if real not in seen and os.path.exists(real):
            seen.add(real)
            out.append(real)
    return out


def _functions(lib):
    """``(set_num_threads, get_num_threads)`` of an OpenBLAS ``lib``, or None."""
    for pre in _PREFIXES:
        for suf in _SUFFIXES:
            try:
                set_fn = getattr(lib, f"{pre}set_num_threads{suf}")
                get_fn = getattr(lib, f"{pre}get_num_threads{suf}")
            except AttributeError:
                continue
            set_fn.argtypes, set_fn.restype = [ctypes.c_int], None
            get_fn.argtypes, get_fn.restype = [], ctypes.c_int
            return set_fn, get_fn
    return None


_libs = None        # [(path, set_fn, get_fn)], found once
_defaults = {}      # the counts before this module first set them: "blas", "native"
_native = [None]    # the native library threads follow (install)
_installed = []     # [True] once apply observes the setting


def blas_libraries():
    """``[(path, set_num_threads, get_num_threads)]``: the OpenBLAS libraries loaded in
    this process (NumPy's first), each opened without loading anything new."""
    global _libs
    if _libs is None:
        libs = []
        mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)
        for path in _loaded_paths():
            try:
                lib = ctypes.CDLL(path, mode=mode)
            except OSError:         # not loaded after all (a leftover file): leave it
                continue
            fns = _functions(lib)
            if fns is not None:
                libs.append((path,) + fns)
        _libs = libs
    return _libs


def blas_threads():
    """The thread count of NumPy's OpenBLAS as it reports it, or None (no OpenBLAS)."""
    libs = blas_libraries()
    return int(libs[0][2]()) if libs else None


def set_blas_threads(n):
    """Set every loaded OpenBLAS to ``n`` threads (``n >= 1``; OpenBLAS caps it at the
    count it was built for); False if there is none."""
    libs = blas_libraries()
    for _, set_fn, _ in libs:
        set_fn(min(int(n), 1 << 16))
    return bool(libs)


def apply(n):
    """Give the native kernels and the BLAS ``n`` threads each (0: their defaults); the
    observer of ``tf.config.threading.set_intra_op_parallelism_threads``."""
    lib = _native[0]
    if "blas" not in _defaults:
        # the BLAS's own count honours OPENBLAS_NUM_THREADS / OMP_NUM_THREADS: the
        # native pool's default follows it, so that "one BLAS thread" means one thread
        _defaults["blas"] = blas_threads()
        _defaults["native"] = _defaults["blas"] or (None if lib is None
                                                    else lib.get_num_threads())
    blas = n or _defaults["blas"]
    if blas:
        set_blas_threads(blas)
    if lib is not None:
        lib.set_num_threads(min(n or _defaults["native"] or os.cpu_count() or 1, 256))


def install(native=None):
    """Make the thread setting govern ``native`` (the native kernel module, or None:
    the BLAS only) and the BLAS, now and whenever it changes (the CPU backend calls it
    once, when it registers its kernels)."""
    _native[0] = native
    if not _installed:
        _installed.append(True)
        config.observe_intra_op_threads(apply)      # (calls apply with the setting now)
    else:
        apply(config.threading.get_intra_op_parallelism_threads())


def describe():
    """One line for ``python -m tapeflow info``: the setting and what each pool has."""
    lib = _native[0]
    setting = config.threading.get_intra_op_parallelism_threads()
    blas = blas_threads()
    return (f"threads: tf.config.threading intra-op = {setting or 'default (0)'}; native "
            f"kernels {'-' if lib is None else lib.get_num_threads()}; BLAS "
            + (f"(OpenBLAS) {blas}" if blas is not None else
               "not governed (NumPy's BLAS is not OpenBLAS)"))
