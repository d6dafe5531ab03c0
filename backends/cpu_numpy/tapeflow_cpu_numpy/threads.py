"""The CPU backend's thread count: ``tf.config.threading.set_intra_op_parallelism_threads``.

One setting governs both thread pools an op of the CPU backend can use: the native
kernels' own workers (:mod:`.native`, ``set_num_threads``) and NumPy's BLAS when it is
OpenBLAS (the ``numpy.libs/libscipy_openblas64_*.so`` NumPy's wheel ships, or the
OpenBLAS NumPy was built against). The BLAS governed is the one NumPy's own extension
(``numpy/_core/_multiarray_umath``) links: that extension is opened through ``ctypes``
with ``RTLD_NOLOAD`` (nothing new is ever loaded) and OpenBLAS's
``*openblas*_set_num_threads*`` / ``*_get_num_threads*`` are looked up in it and its
dependencies, so another OpenBLAS in the process (SciPy's wheels bundle their own copy,
loaded by ``import scipy.linalg``) is neither set nor reported: tapeflow's kernels call
NumPy's BLAS only. No dependency on threadpoolctl. Ops run one after the other in the
calling thread, and each pool is idle while the other works, so the two pools of ``n``
threads never oversubscribe the ``n`` cores they are given.

``0`` (the default) gives both pools OpenBLAS's own count from before this module
first set it: every core, unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` said
otherwise when NumPy loaded it (then the native pool keeps to the same limit). A
setting above the machine's cores (``os.cpu_count()``) gives each pool the cores
(OpenBLAS also caps it at the count it was built for, 64 for NumPy's wheel);
``get_intra_op_parallelism_threads`` still returns the number set. Where NumPy's BLAS
is not OpenBLAS (MKL, Accelerate: :func:`numpy_blas_name` says which),
:func:`blas_threads` is None, the native pool's default is its own (every core) and
only it follows the setting (``python -m tapeflow info`` says so).

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

__all__ = ["numpy_blas_name", "blas_libraries", "blas_threads", "set_blas_threads", "apply",
           "install", "describe"]

_PREFIXES = ("scipy_openblas_", "openblas_")
_SUFFIXES = ("64_", "_64_", "")
_MODE = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_LAZY", 0)


def numpy_blas_name() -> str:
    """The BLAS NumPy was built against, as ``numpy.show_config`` names it
    (``"scipy-openblas"``, ``"openblas"``, ``"mkl"``, ``"accelerate"``...), or ``""``
    where NumPy does not say."""
    try:
        return str(np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"])
    except Exception:       # (an older NumPy: no mode="dicts"; another layout)
        info = getattr(np.__config__, "blas_ilp64_opt_info", None) or getattr(
            np.__config__, "blas_opt_info", None) or {}
        return ",".join(info.get("libraries", ())) if isinstance(info, dict) else ""


def _openblas_paths():
    """Paths of the loaded shared libraries whose name holds "openblas": from
    ``/proc/self/maps`` (Linux) and NumPy's bundled-library folders (only to name the
    library NumPy's extension resolved to)."""
    found = []
    root = os.path.dirname(np.__file__)
    for pattern in (os.path.join(root + ".libs", "*openblas*"),
                    os.path.join(root, ".dylibs", "*openblas*")):
        found += sorted(glob.glob(pattern))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            found += [p for p in (ln.rsplit(None, 1)[-1] for ln in f if "/" in ln)
                      if "openblas" in os.path.basename(p).lower()]
    except OSError:
        pass
    return list(dict.fromkeys(os.path.realpath(p) for p in found
                              if os.path.exists(os.path.realpath(p))))


def _functions(lib):
    """``(set_num_threads, get_num_threads)`` of an OpenBLAS ``lib`` (looked up in it and
    the libraries it links), or None."""
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


def _open(path):
    try:
        return ctypes.CDLL(path, mode=_MODE)
    except OSError:         # not loaded after all (a leftover file): leave it
        return None


def _numpy_openblas():
    """``(path, set_fn, get_fn)`` of the OpenBLAS NumPy's extension links, or None."""
    root = os.path.dirname(np.__file__)
    for ext in sorted(glob.glob(os.path.join(root, "_core", "_multiarray_umath.*"))
                      + glob.glob(os.path.join(root, "core", "_multiarray_umath.*"))):
        lib = None if ext.endswith(".py") else _open(ext)
        fns = None if lib is None else _functions(lib)
        if fns is None:
            continue
        addr = ctypes.cast(fns[0], ctypes.c_void_p).value
        for path in _openblas_paths():          # (the file's name, for describe)
            other = _open(path)
            theirs = None if other is None else _functions(other)
            if theirs and ctypes.cast(theirs[0], ctypes.c_void_p).value == addr:
                return (path,) + fns
        return (ext,) + fns
    return None


_libs = None        # [(path, set_fn, get_fn)] of NumPy's OpenBLAS, or []: found once
_defaults = {}      # the counts before this module first set them: "blas", "native"
_native = [None]    # the native library threads follow (install)
_installed = []     # [True] once apply observes the setting


def blas_libraries():
    """``[(path, set_num_threads, get_num_threads)]``: NumPy's OpenBLAS (the one its
    extension links, loaded with it), or ``[]`` where NumPy's BLAS is not OpenBLAS."""
    global _libs
    if _libs is None:
        found = _numpy_openblas()
        _libs = [found] if found is not None else []
    return _libs


def blas_threads():
    """The thread count of NumPy's OpenBLAS as it reports it, or None (no OpenBLAS)."""
    libs = blas_libraries()
    return int(libs[0][2]()) if libs else None


def set_blas_threads(n):
    """Set NumPy's OpenBLAS to ``n`` threads (``n >= 1``; OpenBLAS caps it at the count
    it was built for); False if NumPy's BLAS is not OpenBLAS."""
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
    n = min(n, os.cpu_count() or 1)         # (more threads than cores: the cores)
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
            + (f"({numpy_blas_name() or 'OpenBLAS'}) {blas}" if blas is not None else
               f"not governed (NumPy's BLAS, {numpy_blas_name() or 'unnamed'}, is not "
               "OpenBLAS)"))
