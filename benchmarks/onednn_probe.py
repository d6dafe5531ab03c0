#!/usr/bin/env python
"""oneDNN 3.x through ctypes: the prototype of an optional oneDNN-backed CPU backend,
measured by ``benchmarks/conv_kernels.py`` on the CNNs' convolution and dense shapes.

oneDNN is **not** a dependency of tapeflow, and nothing here is installed with it. To
try it, put the PyPI wheels (oneDNN 3.2, OpenMP build) in a scratch environment
outside the repository and point this module at the library::

    python3 -m venv /tmp/dnnl
    /tmp/dnnl/bin/pip install onednn-cpu-gomp onednn-devel-cpu-gomp
    TAPEFLOW_ONEDNN_LIB=/tmp/dnnl/lib/libdnnl.so.3 .venv/bin/python benchmarks/onednn_probe.py

(the wheels put ``libdnnl.so*`` in the environment's ``lib/`` and the C headers in its
``include/``; the library needs the system's ``libgomp.so.1``.) Without the library,
:func:`load` returns ``(None, why)`` and the script says why and exits 0.

What a backend would do, and this prototype does: one engine and one in-order stream;
per shape, a primitive descriptor created once with the user's layouts (NHWC input and
output, HWIO filter: ``dnnl_acdb`` / ``dnnl_cdba`` tags) or with ``dnnl_format_tag_any``
(oneDNN picks, often a blocked layout such as ``aBcd16b``), a primitive created once,
memory objects whose data handles are pointed at the NumPy arrays on every call, and
reorder primitives between the user's layouts and oneDNN's choice when they differ
(their cost is timed separately: :attr:`Prim.reorder_ms`).

>>> lib, why = load()       # doctest: +SKIP
>>> conv = lib.conv_forward((32, 28, 28, 1), (5, 5, 1, 32), (1, 1), (2, 2, 2, 2))  # doctest: +SKIP
>>> y = conv(x, w)          # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import sys
import time

import numpy as np

# enum values of oneDNN 3.2's headers (dnnl_types.h, dnnl_common_types.h), printed by a
# C program compiled against the wheel's include/ (they are ABI: stable within 3.x)
F32 = 3
TAG_ANY, TAG_AB, TAG_BA, TAG_ABCD, TAG_ACDB, TAG_CDBA = 1, 3, 14, 5, 22, 28
ENGINE_CPU = 1
STREAM_IN_ORDER = 1
FORWARD_TRAINING, FORWARD_INFERENCE = 64, 96
CONV_DIRECT, CONV_AUTO = 0x1, 0x3
Q_IMPL_INFO_STR = 8
Q_SRC, Q_DIFF_SRC, Q_WEIGHTS, Q_DIFF_WEIGHTS, Q_DST, Q_DIFF_DST = 129, 130, 131, 132, 133, 134
ARG_SRC, ARG_DST, ARG_WEIGHTS = 1, 17, 33
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS = 129, 145, 161
ARG_FROM, ARG_TO = ARG_SRC, ARG_DST
STATUS = {0: "success", 1: "out_of_memory", 2: "invalid_arguments", 3: "unimplemented",
          4: "last_impl_reached", 5: "runtime_error", 6: "not_required"}
MAX_NDIMS = 12

Dims = ctypes.c_int64 * MAX_NDIMS
P = ctypes.c_void_p


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", P)]


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                ("gpu_runtime", ctypes.c_uint)]


#: where to look for libdnnl when TAPEFLOW_ONEDNN_LIB is not set
CANDIDATES = ("/tmp/dnnl/lib/libdnnl.so.3", os.path.join(sys.prefix, "lib", "libdnnl.so.3"))


def _dims(values):
    d = Dims()
    for i, v in enumerate(values):
        d[i] = int(v)
    return d


def numpy_shape(dims, tag):
    """The row-major shape of a buffer oneDNN describes as ``dims`` with ``tag``."""
    order = {TAG_AB: (0, 1), TAG_BA: (1, 0), TAG_ABCD: (0, 1, 2, 3), TAG_ACDB: (0, 2, 3, 1),
             TAG_CDBA: (2, 3, 1, 0)}[tag]
    return tuple(int(dims[i]) for i in order)


def find_library(path=None):
    """The path of libdnnl to load: ``path`` or ``$TAPEFLOW_ONEDNN_LIB`` when given
    (None if that file does not exist: an empty value turns oneDNN off), else the
    scratch environment's, this interpreter's, or the linker's; None when none exists."""
    given = path if path is not None else os.environ.get("TAPEFLOW_ONEDNN_LIB")
    if given is not None:
        return given if given and os.path.exists(given) else None
    for p in CANDIDATES:
        if os.path.exists(p):
            return p
    return ctypes.util.find_library("dnnl")


def load(path=None):
    """``(OneDNN, None)``, or ``(None, why)`` when the library is absent or fails to load
    (a missing ``libgomp.so.1`` shows here)."""
    p = find_library(path)
    if p is None:
        given = path if path is not None else os.environ.get("TAPEFLOW_ONEDNN_LIB")
        where = f" (no file {given!r})" if given else ""
        return None, (f"oneDNN not found{where} (optional; not a tapeflow dependency): "
                      "pip install onednn-cpu-gomp into a scratch venv and set "
                      "TAPEFLOW_ONEDNN_LIB=/path/to/libdnnl.so.3")
    try:
        return OneDNN(p), None
    except (OSError, AttributeError, RuntimeError) as e:
        return None, f"oneDNN at {p} unusable: {type(e).__name__}: {e}"


class OneDNN:
    """The library, its CPU engine and one stream; factories of reusable primitives."""

    def __init__(self, path):
        self.path = path
        L = self.lib = ctypes.CDLL(path)
        sig = {
            "dnnl_engine_create": [ctypes.POINTER(P), ctypes.c_int, ctypes.c_size_t],
            "dnnl_stream_create": [ctypes.POINTER(P), P, ctypes.c_uint],
            "dnnl_stream_wait": [P],
            "dnnl_memory_desc_create_with_tag": [ctypes.POINTER(P), ctypes.c_int, Dims,
                                                 ctypes.c_int, ctypes.c_int],
            "dnnl_memory_desc_destroy": [P],
            "dnnl_memory_desc_get_size": [P],
            "dnnl_memory_desc_equal": [P, P],
            "dnnl_memory_create": [ctypes.POINTER(P), P, P, P],
            "dnnl_memory_set_data_handle": [P, P],
            "dnnl_memory_destroy": [P],
            "dnnl_convolution_forward_primitive_desc_create": [
                ctypes.POINTER(P), P, ctypes.c_int, ctypes.c_int, P, P, P, P,
                Dims, Dims, Dims, Dims, P],
            "dnnl_convolution_backward_data_primitive_desc_create": [
                ctypes.POINTER(P), P, ctypes.c_int, P, P, P, Dims, Dims, Dims, Dims, P, P],
            "dnnl_convolution_backward_weights_primitive_desc_create": [
                ctypes.POINTER(P), P, ctypes.c_int, P, P, P, P, Dims, Dims, Dims, Dims,
                P, P],
            "dnnl_matmul_primitive_desc_create": [ctypes.POINTER(P), P, P, P, P, P, P],
            "dnnl_reorder_primitive_desc_create": [ctypes.POINTER(P), P, P, P, P, P],
            "dnnl_primitive_desc_query_md": [P, ctypes.c_int, ctypes.c_int],
            "dnnl_primitive_desc_query": [P, ctypes.c_int, ctypes.c_int, P],
            "dnnl_primitive_desc_destroy": [P],
            "dnnl_primitive_create": [ctypes.POINTER(P), P],
            "dnnl_primitive_execute": [P, P, ctypes.c_int, ctypes.POINTER(ExecArg)],
            "dnnl_primitive_destroy": [P],
        }
        for name, args in sig.items():
            f = getattr(L, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        L.dnnl_primitive_desc_query_md.restype = P
        L.dnnl_memory_desc_get_size.restype = ctypes.c_size_t
        L.dnnl_version.restype = ctypes.POINTER(Version)
        L.dnnl_version.argtypes = []
        L.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
        v = L.dnnl_version().contents
        self.version = f"{v.major}.{v.minor}.{v.patch}"
        self.runtime = {1: "sequential", 2: "OpenMP", 4: "TBB", 8: "threadpool"}.get(
            v.cpu_runtime, str(v.cpu_runtime))
        self.engine, self.stream = P(), P()
        self.check(L.dnnl_engine_create(ctypes.byref(self.engine), ENGINE_CPU, 0),
                   "dnnl_engine_create")
        self.check(L.dnnl_stream_create(ctypes.byref(self.stream), self.engine,
                                        STREAM_IN_ORDER), "dnnl_stream_create")
        # the OpenMP runtime libdnnl was linked against (the one already loaded if
        # PyTorch brought its own libgomp.so.1 first: same soname, one runtime)
        try:
            self._gomp = ctypes.CDLL("libgomp.so.1")
        except OSError:
            self._gomp = None

    @staticmethod
    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed: dnnl_{STATUS.get(status, status)}")

    def set_num_threads(self, n):
        """OpenMP's thread count for the calling thread's next parallel regions."""
        if self._gomp is not None:
            self._gomp.omp_set_num_threads(int(n))

    def md(self, dims, tag):
        """A float32 memory descriptor (the caller destroys it, or hands it to a Prim)."""
        m = P()
        self.check(self.lib.dnnl_memory_desc_create_with_tag(
            ctypes.byref(m), len(dims), _dims(dims), F32, tag),
            "dnnl_memory_desc_create_with_tag")
        return m

    # -- convolution: user layouts NHWC / HWIO; oneDNN's dims are (N, C, H, W), (O, I, H, W)
    def _conv_mds(self, x_shape, w_shape, strides, pads, layout):
        n, h, w, c = x_shape
        kh, kw, _, o = w_shape
        ho = (h + pads[0] + pads[1] - kh) // strides[0] + 1
        wo = (w + pads[2] + pads[3] - kw) // strides[1] + 1
        user = {"x": ((n, c, h, w), TAG_ACDB), "w": ((o, c, kh, kw), TAG_CDBA),
                "y": ((n, o, ho, wo), TAG_ACDB)}
        mds = {k: self.md(d, TAG_ANY if layout == "any" else t) for k, (d, t) in user.items()}
        geo = (_dims(strides), _dims((0, 0)), _dims((pads[0], pads[2])),
               _dims((pads[1], pads[3])))
        return user, mds, geo, (n, ho, wo, o)

    def conv_forward(self, x_shape, w_shape, strides, pads, layout="user",
                     prop=FORWARD_TRAINING):
        """``prim(x, w) -> y`` (NHWC, HWIO -> NHWC), no bias. ``layout``: "user" (oneDNN
        computes in NHWC/HWIO) or "any" (oneDNN's choice, with reorders)."""
        user, mds, geo, y_shape = self._conv_mds(x_shape, w_shape, strides, pads, layout)
        pd = P()
        self.check(self.lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), self.engine, prop, CONV_DIRECT, mds["x"], mds["w"], None,
            mds["y"], *geo, None), "dnnl_convolution_forward_primitive_desc_create")
        args = [(ARG_SRC, Q_SRC, "x", user["x"], "in"),
                (ARG_WEIGHTS, Q_WEIGHTS, "w", user["w"], "in"),
                (ARG_DST, Q_DST, "y", user["y"], "out")]
        return Prim(self, pd, args, {"y": y_shape}, list(mds.values()))

    def conv_backward_weights(self, x_shape, w_shape, strides, pads, layout="user"):
        """``prim(x, dy) -> dw`` (NHWC, NHWC -> HWIO)."""
        user, mds, geo, y_shape = self._conv_mds(x_shape, w_shape, strides, pads, layout)
        fwd = P()
        self.check(self.lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(fwd), self.engine, FORWARD_TRAINING, CONV_DIRECT, mds["x"],
            mds["w"], None, mds["y"], *geo, None), "forward hint")
        pd = P()
        self.check(self.lib.dnnl_convolution_backward_weights_primitive_desc_create(
            ctypes.byref(pd), self.engine, CONV_DIRECT, mds["x"], mds["w"], None,
            mds["y"], *geo, fwd, None),
            "dnnl_convolution_backward_weights_primitive_desc_create")
        self.lib.dnnl_primitive_desc_destroy(fwd)
        args = [(ARG_SRC, Q_SRC, "x", user["x"], "in"),
                (ARG_DIFF_DST, Q_DIFF_DST, "dy", user["y"], "in"),
                (ARG_DIFF_WEIGHTS, Q_DIFF_WEIGHTS, "dw", user["w"], "out")]
        return Prim(self, pd, args, {"dw": tuple(w_shape)}, list(mds.values()))

    def conv_backward_data(self, x_shape, w_shape, strides, pads, layout="user"):
        """``prim(w, dy) -> dx`` (HWIO, NHWC -> NHWC)."""
        user, mds, geo, y_shape = self._conv_mds(x_shape, w_shape, strides, pads, layout)
        fwd = P()
        self.check(self.lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(fwd), self.engine, FORWARD_TRAINING, CONV_DIRECT, mds["x"],
            mds["w"], None, mds["y"], *geo, None), "forward hint")
        pd = P()
        self.check(self.lib.dnnl_convolution_backward_data_primitive_desc_create(
            ctypes.byref(pd), self.engine, CONV_DIRECT, mds["x"], mds["w"], mds["y"],
            *geo, fwd, None), "dnnl_convolution_backward_data_primitive_desc_create")
        self.lib.dnnl_primitive_desc_destroy(fwd)
        args = [(ARG_WEIGHTS, Q_WEIGHTS, "w", user["w"], "in"),
                (ARG_DIFF_DST, Q_DIFF_DST, "dy", user["y"], "in"),
                (ARG_DIFF_SRC, Q_DIFF_SRC, "dx", user["x"], "out")]
        return Prim(self, pd, args, {"dx": tuple(x_shape)}, list(mds.values()))

    def matmul(self, m, k, n, transpose_a=False, transpose_b=False):
        """``prim(a, b) -> a @ b`` for row-major 2-d float32 (``a`` stored (k, m) when
        ``transpose_a``, ``b`` stored (n, k) when ``transpose_b``)."""
        user = {"a": ((m, k), TAG_BA if transpose_a else TAG_AB),
                "b": ((k, n), TAG_BA if transpose_b else TAG_AB), "c": ((m, n), TAG_AB)}
        mds = {key: self.md(d, t) for key, (d, t) in user.items()}
        pd = P()
        self.check(self.lib.dnnl_matmul_primitive_desc_create(
            ctypes.byref(pd), self.engine, mds["a"], mds["b"], None, mds["c"], None),
            "dnnl_matmul_primitive_desc_create")
        args = [(ARG_SRC, Q_SRC, "a", user["a"], "in"),
                (ARG_WEIGHTS, Q_WEIGHTS, "b", user["b"], "in"),
                (ARG_DST, Q_DST, "c", user["c"], "out")]
        return Prim(self, pd, args, {"c": (m, n)}, list(mds.values()))


class Prim:
    """One primitive, created once, executed on NumPy arrays: inputs by the order of
    the primitive's input arguments, a fresh output (or ``out=``).

    ``layouts``: oneDNN's chosen layout of each argument ("user" when it is the
    caller's own, else its size in bytes and "reorder"); ``impl``: the implementation
    oneDNN picked (e.g. "brg:avx512_core"). ``compute_only=True`` skips the reorders
    (their inputs must have been reordered once before): the kernel's own time.
    """

    def __init__(self, dnnl, pd, args, out_shapes, mds):
        self.d, self.pd = dnnl, pd
        L = dnnl.lib
        self._owned = []
        name = ctypes.c_char_p()
        L.dnnl_primitive_desc_query(pd, Q_IMPL_INFO_STR, 0, ctypes.byref(name))
        self.impl = name.value.decode() if name.value else "?"
        self.prim = self._primitive(pd)
        self.inputs, self.outputs, self.layouts, self.shapes = [], [], {}, {}
        self.pre, self.post = [], []     # reorders (primitive, args) before/after
        exec_args = []
        for arg, query, key, (dims, tag), direction in args:
            chosen = L.dnnl_primitive_desc_query_md(pd, query, 0)
            umd = dnnl.md(dims, tag)
            mds.append(umd)
            umem = self._memory(umd, None)
            (self.inputs if direction == "in" else self.outputs).append((key, umem))
            self.shapes[key] = numpy_shape(dims, tag)
            if L.dnnl_memory_desc_equal(chosen, umd):
                self.layouts[key] = "user"
                exec_args.append((arg, umem))
                continue
            imem = self._memory(chosen, ctypes.c_void_p(-1 & (2 ** 64 - 1)))  # ALLOCATE
            size = L.dnnl_memory_desc_get_size(chosen)
            self.layouts[key] = f"reorder ({size} B)"
            src, dst = (umd, chosen) if direction == "in" else (chosen, umd)
            rpd = P()
            dnnl.check(L.dnnl_reorder_primitive_desc_create(
                ctypes.byref(rpd), src, dnnl.engine, dst, dnnl.engine, None),
                "dnnl_reorder_primitive_desc_create")
            r = self._primitive(rpd)
            L.dnnl_primitive_desc_destroy(rpd)
            pair = (umem, imem) if direction == "in" else (imem, umem)
            ra = (ExecArg * 2)(ExecArg(ARG_FROM, pair[0]), ExecArg(ARG_TO, pair[1]))
            (self.pre if direction == "in" else self.post).append((r, ra))
            exec_args.append((arg, imem))
        self.args = (ExecArg * len(exec_args))(*[ExecArg(a, m) for a, m in exec_args])
        self.out_shapes = out_shapes
        for m in mds:
            L.dnnl_memory_desc_destroy(m)

    def _primitive(self, pd):
        p = P()
        self.d.check(self.d.lib.dnnl_primitive_create(ctypes.byref(p), pd),
                     "dnnl_primitive_create")
        self._owned.append(("dnnl_primitive_destroy", p))
        return p

    def _memory(self, md, handle):
        m = P()
        self.d.check(self.d.lib.dnnl_memory_create(ctypes.byref(m), md, self.d.engine,
                                                   handle), "dnnl_memory_create")
        self._owned.append(("dnnl_memory_destroy", m))
        return m

    @property
    def reorders(self):
        return len(self.pre) + len(self.post)

    def __call__(self, *arrays, out=None, compute_only=False):
        L, stream = self.d.lib, self.d.stream
        if len(arrays) != len(self.inputs):
            raise ValueError(f"{len(self.inputs)} inputs expected, got {len(arrays)}")
        (key, omem), = self.outputs
        shape = self.out_shapes[key]
        if out is None:
            out = np.empty(shape, np.float32)
        keep = []
        for a, (k, mem) in zip(arrays, self.inputs):
            # checked before oneDNN reads through the pointer: a wrong size would be an
            # out-of-bounds read in C
            if a.shape != self.shapes[k]:
                raise ValueError(f"{k}: shape {self.shapes[k]} expected, got {a.shape}")
            if a.dtype != np.float32 or not a.flags.c_contiguous:
                a = np.ascontiguousarray(a, np.float32)
            keep.append(a)
            L.dnnl_memory_set_data_handle(mem, a.ctypes.data)
        if out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous float32 {shape}")
        L.dnnl_memory_set_data_handle(omem, out.ctypes.data)
        if not compute_only:
            for r, ra in self.pre:
                self.d.check(L.dnnl_primitive_execute(r, stream, 2, ra), "reorder")
        self.d.check(L.dnnl_primitive_execute(self.prim, stream, len(self.args), self.args),
                     "dnnl_primitive_execute")
        if not compute_only:
            for r, ra in self.post:
                self.d.check(L.dnnl_primitive_execute(r, stream, 2, ra), "reorder")
        L.dnnl_stream_wait(stream)
        return out

    def reorder_ms(self, *arrays, repeat=20):
        """Milliseconds per call spent in the reorders (0 when there are none)."""
        if not self.reorders:
            return 0.0
        self(*arrays)
        t0 = time.perf_counter()
        for _ in range(repeat):
            self(*arrays)
        full = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(repeat):
            self(*arrays, compute_only=True)
        return max(0.0, (full - (time.perf_counter() - t0)) / repeat * 1e3)

    def close(self):
        L = self.d.lib
        while self._owned:
            fn, h = self._owned.pop()
            getattr(L, fn)(h)
        if self.pd is not None:
            L.dnnl_primitive_desc_destroy(self.pd)
            self.pd = None

    def __del__(self):
        try:
            self.close()
        except Exception:   # noqa: BLE001 (interpreter shutdown: the library may be gone)
            pass


# --- self-check: oneDNN's results against NumPy on the CNNs' shapes ----------------------

def _conv_ref(x, w, pads):
    """float64 NHWC/HWIO stride-1 convolution (reference)."""
    kh, kw, c, o = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pads[0], pads[1]), (pads[2], pads[3]), (0, 0)))
    n, h, wd, _ = xp.shape
    ho, wo = h - kh + 1, wd - kw + 1
    y = np.zeros((n, ho, wo, o))
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i:i + ho, j:j + wo, :] @ w[i, j].astype(np.float64)
    return y


def self_check(d, verbose=True):
    """Forward, backward-data and backward-weights of a small padded convolution in both
    layouts, and a transposed matmul, against float64 references; raises on mismatch."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 7, 6, 3), dtype=np.float32)
    w = rng.standard_normal((3, 3, 3, 5), dtype=np.float32)
    pads = (1, 1, 1, 1)
    y_ref = _conv_ref(x, w, pads)
    dy = rng.standard_normal(y_ref.shape, dtype=np.float32)
    # dw[i, j] = sum over pixels of x_pad window (i, j) outer dy
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    dw_ref = np.stack([np.stack([np.einsum("nhwc,nhwo->co", xp[:, i:i + 7, j:j + 6], dy)
                                 for j in range(3)]) for i in range(3)])
    # dx: the transposed convolution = correlation of dy padded by k-1-p with flipped w
    dx_ref = _conv_ref(dy, np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2)),
                       (1, 1, 1, 1))
    for layout in ("user", "any"):
        got = {
            "forward": (d.conv_forward(x.shape, w.shape, (1, 1), pads, layout)(x, w), y_ref),
            "backward_data": (d.conv_backward_data(x.shape, w.shape, (1, 1), pads, layout)(
                w, dy), dx_ref),
            "backward_weights": (d.conv_backward_weights(x.shape, w.shape, (1, 1), pads,
                                                         layout)(x, dy), dw_ref),
        }
        for what, (g, ref) in got.items():
            err = np.abs(g - ref).max() / max(1.0, np.abs(ref).max())
            if not err < 1e-4:
                raise AssertionError(f"oneDNN {what} ({layout}) differs: {err:.2e}")
    a = rng.standard_normal((9, 4), dtype=np.float32)   # stored (k, m): a.T is (4, 9)
    b = rng.standard_normal((5, 9), dtype=np.float32)   # stored (n, k)
    c = d.matmul(4, 9, 5, transpose_a=True, transpose_b=True)(a, b)
    if not np.allclose(c, a.T @ b.T, rtol=1e-4, atol=1e-4):
        raise AssertionError("oneDNN matmul differs")
    if verbose:
        print("self-check: forward, backward data/weights (user and 'any' layouts) and "
              "matmul agree with float64 NumPy")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="path of libdnnl.so.3 (default: $TAPEFLOW_ONEDNN_LIB, ...)")
    args = ap.parse_args(argv)
    d, why = load(args.lib)
    if d is None:
        print(f"skipped: {why}")
        return 0
    isa = d.lib.dnnl_get_effective_cpu_isa()
    print(f"oneDNN {d.version} ({d.runtime} runtime) from {d.path}; effective ISA code {isa}")
    self_check(d)
    for shape in (((32, 28, 28, 1), (5, 5, 1, 32), (2, 2, 2, 2)),
                  ((32, 14, 14, 32), (5, 5, 32, 64), (2, 2, 2, 2))):
        for layout in ("user", "any"):
            for kind, make in (("fwd", d.conv_forward), ("bwd_w", d.conv_backward_weights),
                               ("bwd_d", d.conv_backward_data)):
                p = make(shape[0], shape[1], (1, 1), shape[2], layout)
                print(f"  {kind:5} x{shape[0]} w{shape[1]} {layout:4}: {p.impl:24} "
                      f"layouts {p.layouts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
