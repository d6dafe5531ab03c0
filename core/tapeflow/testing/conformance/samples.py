"""What a conformance case runs, and what every part of the suite shares:

* the helpers: :class:`SkipCase`, the lazy ``tapeflow`` import, deterministic seeds,
  dtype kinds (bfloat16 counted as a float), test-id globs, the formatting of failure
  messages;
* the kernel of a spec's op on a device type, and the dtypes a spec is tested in there
  (:func:`dtypes_under_test`);
* its samples for a dtype (:func:`samples_for`: a deterministic rng per spec and dtype;
  bfloat16 from the float32 samples), the tolerance of a comparison
  (:func:`tolerance`), the arguments to differentiate, and samples of the same
  signature with other values (for the traced and batched checks);
* the samples' arrays as tensors on the device under test: contiguous, or in one of
  the non-contiguous :data:`LAYOUTS` (an offset view, transposed and strided, broadcast
  with stride 0), built the way the device's own view ops build them
  (:func:`noncontiguous_tensor`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import zlib

import ml_dtypes
import numpy as np

from ...runtime.registry import OPS
from ...runtime.tensor import wrap


# --- shared by every part of the suite ----------------------------------------------------

class SkipCase(Exception):
    """Raised by a check that cannot run here; the pytest layer turns it into a skip."""


def _tf():
    """``tapeflow`` itself, imported when a check first runs (pytest loads
    :mod:`tapeflow.testing.pytest_plugin` at start-up)."""
    import tapeflow
    return tapeflow


def _seed(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode())


_BF16 = np.dtype(ml_dtypes.bfloat16)


def _kind(np_dtype):
    """NumPy's dtype kind, with ml_dtypes' bfloat16 (kind "V") a float ("f")."""
    return "f" if np_dtype == _BF16 else np_dtype.kind


def _bf16_to_f32(a):
    """A bfloat16 array as float32 (exactly), for references: NumPy has bfloat16 loops
    for elementwise ufuncs only, and reductions there accumulate in bfloat16."""
    return a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == _BF16 else a


@functools.lru_cache(maxsize=512)
def _glob(pattern):
    """Glob with ``*`` and ``?`` only: brackets are literal, as in test ids."""
    rx = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.compile(rx)


def _describe_args(args, kwargs=None):
    parts = []
    for a in args:
        if isinstance(a, np.ndarray):
            parts.append(f"{'bool' if a.dtype == np.bool_ else a.dtype.name}{list(a.shape)}")
        else:
            r = repr(a)
            parts.append(r if len(r) <= 40 else r[:37] + "...")
    s = "(" + ", ".join(parts) + ")"
    if kwargs:
        s += " " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    return s


def _fmt(a):
    s = np.array2string(np.asarray(a), precision=6, threshold=40, edgeitems=3, max_line_width=100)
    s = s.replace("\n", "\n              ")
    return s if len(s) <= 800 else s[:800] + " ..."


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


# --- the kernel of a spec's op ------------------------------------------------------------

def _op_kernel(spec, device_type):
    """(OpDef or None, its kernel on ``device_type`` or None); SkipCase when ``spec.op``
    is not registered."""
    if not spec.op:
        return None, None
    op = OPS.get(spec.op)
    if op is None:
        raise SkipCase(f"op {spec.op!r} is not registered (is the plugin that defines it "
                       "loaded? see python -m tapeflow info)")
    return op, op.kernels.get(device_type)


def _missing_kernel(op, dev):
    """Why ``op`` cannot run on ``dev`` at all (no kernel for its device type and no
    composite), or None."""
    if op is None or dev.type in op.kernels or op.composite is not None:
        return None
    have = "; ".join(e.describe() for e in op.kernels.values()) or "none"
    return (f"no kernel for op {op.name} on device type '{dev.type}' and no composite "
            f"implementation (registered kernels: {have})")


# --- dtypes, samples and tolerances -------------------------------------------------------

#: (rtol, atol) per result dtype when the spec gives none; integers and bools compare exactly
DEFAULT_TOL = {
    # bfloat16 keeps 8 significant bits: one rounding is 2**-9 ~ 2e-3 relative, and an op
    # computed in float32 from rounded inputs and rounded again is off by a few of those
    "bfloat16": (2e-2, 2e-2),
    "float16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-5),
    "float64": (1e-7, 1e-7),
}


def dtypes_under_test(spec, device_type):
    """``(dtypes, explicit, excluded)`` for ``spec`` on ``device_type``.

    ``explicit``: the dtypes were declared (by the kernel or the spec), so a dtype
    without samples is a gap worth showing; ``excluded``: ``{dtype name: reason}``
    for spec dtypes the kernel does not declare.
    """
    tf = _tf()
    op, entry = _op_kernel(spec, device_type)
    kdt = entry.dtypes if entry is not None else None
    excluded = {}
    if spec.dtypes is not None:
        sd = [tf.as_dtype(d) for d in spec.dtypes]
        if kdt is not None:
            for d in sd:
                if d not in kdt:
                    excluded[d.name] = (f"the {spec.op} kernel on '{device_type}' does not declare "
                                        f"{d.name}")
            sd = [d for d in sd if d in kdt]
        return sd, True, excluded
    # complex dtypes are tested by the specs that name them (samples with imaginary
    # parts and complex references: specs/math.py), not by casting real samples
    if kdt is not None:
        return [d for d in kdt if not d.is_complex], True, excluded
    return [d for d in tf.dtypes.ALL_DTYPES if not d.is_complex], False, excluded


def samples_for(spec, dtype):
    """``spec.samples(dtype, rng)`` with a deterministic rng per (spec, dtype).

    ``dtype`` is given to the samples function as a tapeflow ``DType`` (``tf.float32``:
    ``.name``, ``.np`` its NumPy dtype, ``.is_floating``, ``.is_integer``,
    ``.is_bool``; it compares equal to its name and NumPy dtype, and ``dtype is
    tf.float32`` holds), which NumPy accepts as a dtype there: ``np.ones(3, dtype)``,
    ``x.astype(dtype)`` (``DType.dtype`` is its NumPy dtype)."""
    tf = _tf()
    dtype = tf.as_dtype(dtype)
    rng = np.random.default_rng(_seed(spec.name, dtype.name))
    if dtype is tf.bfloat16:
        # specs write samples with NumPy's float kinds ("f"); bfloat16 is kind "V": the
        # float32 samples, rounded to bfloat16 (a ``dtype`` kwarg float32 becomes bfloat16)
        return [_to_bf16(s, tf) for s in _draw(spec, tf.float32, rng)]
    return _draw(spec, dtype, rng)


def _to_bf16(sample, tf):
    def conv(a):
        if isinstance(a, np.ndarray) and a.dtype == np.float32:
            return a.astype(_BF16)
        return tf.bfloat16 if a is tf.float32 else a
    kw = {k: conv(v) for k, v in sample.kwargs.items()}
    ref_kw = (None if sample.ref_kwargs is None else
              {k: conv(v) for k, v in sample.ref_kwargs.items()})
    return dataclasses.replace(sample, args=tuple(conv(a) for a in sample.args), kwargs=kw,
                               ref_kwargs=ref_kw)


def _draw(spec, dtype, rng):
    return list(spec.samples(dtype, rng) or [])


def tolerance(spec, case_dtype, out_dtype):
    """(rtol, atol) for a result of ``out_dtype`` in a case of ``case_dtype``, or
    ``None`` for an exact comparison.

    Float results use the tolerance of the case dtype when that is a float dtype
    (float16 inputs compare loosely even if the op returns float32), else of the
    result dtype; ``spec.tol`` overrides :data:`DEFAULT_TOL`. Integer and bool
    results compare exactly unless ``spec.tol`` names their dtype.
    """
    od = np.dtype(out_dtype)
    odn = "bool" if od.kind == "b" else od.name
    if _kind(od) == "f":
        cd = getattr(case_dtype, "name", case_dtype)
        key = cd if cd in DEFAULT_TOL else odn
        return spec.tol.get(key) or DEFAULT_TOL.get(key, (1e-5, 1e-5))
    return spec.tol.get(odn)


def _grad_argnums(sample):
    if sample.grad_argnums is not None:
        return tuple(sample.grad_argnums)
    return tuple(i for i, a in enumerate(sample.args)
                 if isinstance(a, np.ndarray) and a.dtype.kind == "f")


def _signature(x):
    """Arrays by shape and dtype, everything else by value (for matching samples)."""
    if isinstance(x, np.ndarray):
        return ("A", x.shape, x.dtype.str)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_signature(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((repr(k), _signature(v)) for k, v in x.items())))
    return ("P", type(x).__name__, repr(x))


def _arrays(x):
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _arrays(v)]
    if isinstance(x, dict):
        return [a for v in x.values() for a in _arrays(v)]
    return []


def _same_values(a, b):
    return all(np.array_equal(x, y, equal_nan=_kind(x.dtype) in "fc")
               for x, y in zip(_arrays(a.args), _arrays(b.args)))


def _other_values(sample, index, first, second):
    """A sample with ``sample``'s signature (shapes, dtypes, Python arguments, kwargs)
    but other array values: from a second draw of the spec's samples (another rng
    seed; the one at the same index preferred), else another sample of the first
    draw; ``None`` when the spec has none (fixed values, empty arrays)."""
    key = (_signature(sample.args), _signature(sample.kwargs))
    ordered = ([second[index]] if index < len(second) else []) + list(second) + list(first)
    for cand in ordered:
        if cand is sample or (_signature(cand.args), _signature(cand.kwargs)) != key:
            continue
        if not _same_values(cand, sample):
            return cand
    return None


# --- tensors on the device: contiguous and the non-contiguous layouts ---------------------

#: the layouts the ``noncontiguous`` checks feed a kernel, by the names failure messages
#: use: each runs the sample once with every eligible array argument in that layout
#: (see :func:`noncontiguous_tensor` and :func:`layout_candidate`)
OFFSET, TRANSPOSED, BROADCAST = "offset view", "transposed", "broadcast (stride 0)"


LAYOUTS = (OFFSET, TRANSPOSED, BROADCAST)


def layout_candidate(a, layout) -> bool:
    """Whether the sample argument ``a`` is given in ``layout`` by the non-contiguous checks:
    a non-empty NumPy array of rank >= 1 (``"offset view"``), rank >= 2
    (``"transposed"``), or whose first axis is at least 2 long (``"broadcast (stride 0)"``:
    that axis gets stride 0)."""
    if not isinstance(a, np.ndarray) or a.ndim == 0 or a.size == 0:
        return False
    if layout == TRANSPOSED:
        return a.ndim >= 2
    if layout == BROADCAST:
        return a.shape[0] >= 2
    if layout == OFFSET:
        return True
    raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")


def _nc_candidate(a):
    return any(layout_candidate(a, lay) for lay in LAYOUTS)


def _has_nc(sample):
    return any(_nc_candidate(a) for a in sample.args)


def broadcast_values(x):
    """``x``'s first slice along axis 0 repeated along that axis: the values a stride-0
    view of ``x``'s shape can hold (what the ``"broadcast (stride 0)"`` layout feeds,
    and what the reference then gets)."""
    return np.broadcast_to(x[:1], x.shape)


def _filler(dtype):
    """What fills the part of an offset view's buffer before the view: a value that makes
    a kernel reading it (ignoring the offset) visibly wrong."""
    if _kind(dtype) in "fc":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _native_layout(a):
    """``(byte strides, byte offset into its buffer)`` of a backend-native array, each
    None where it cannot be read: NumPy and CuPy arrays, ``pyopencl.array.Array``."""
    strides = getattr(a, "strides", None)
    strides = tuple(int(s) for s in strides) if strides is not None else None
    offset = None
    if isinstance(a, np.ndarray):
        root = a
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    elif hasattr(a, "base_data") and hasattr(a, "offset"):        # pyopencl.array.Array
        offset = int(a.offset)
    elif hasattr(getattr(a, "data", None), "mem"):                # cupy.ndarray
        offset = int(a.data.ptr) - int(a.data.mem.ptr)
    return strides, offset


def _lacks_layout(data, shape, itemsize, layout):
    """Why the native array ``data`` (of ``shape``) is not in ``layout``, or None
    (None too where its layout cannot be read)."""
    strides, offset = _native_layout(data)
    if layout == OFFSET and offset is not None and offset <= 0:
        return "the view starts at element 0 of its buffer (slicing made a copy?)"
    if layout == BROADCAST and strides is not None and strides[0] != 0:
        return f"axis 0 has stride {strides[0]}, not 0 (broadcast_to made a copy?)"
    if layout == TRANSPOSED and strides is not None:
        c = [itemsize] * len(shape)
        for k in range(len(shape) - 2, -1, -1):
            c[k] = c[k + 1] * shape[k + 1]
        if all(s == cs or n == 1 for s, cs, n in zip(strides, c, shape)):
            return "the result is C-contiguous (transpose made a copy?)"
    return None


def noncontiguous_tensor(x, device, via_ops=None, layout=TRANSPOSED):
    """A tensor equal to ``x`` whose data is a view in ``layout`` (:data:`LAYOUTS`):

    ``"transposed"`` (rank >= 2)
        memory order differs from index order (the last two axes swapped) and strided
        (every other element of a buffer twice as long);
    ``"offset view"`` (rank >= 1)
        C-contiguous, starting at element ``prod(x.shape[1:])`` of a buffer one row
        longer (``buf[1:]``; on OpenCL the ``pyopencl.array.Array`` has a non-zero
        ``offset``, on CUDA the pointer is past the allocation's start); the row
        before holds NaN (floats) or the dtype's maximum, so a kernel that reads the
        buffer from its start gets wrong values;
    ``"broadcast (stride 0)"`` (rank >= 1)
        ``x[:1]`` broadcast along axis 0 (stride 0): ``x`` must be
        :func:`broadcast_values` of something (equal along axis 0).

    On the host the view is wrapped directly (``np.broadcast_to`` for stride 0); on
    other devices (or with ``via_ops=True``) it is built with tapeflow ops on the
    device (slicing, ``tf.transpose``, ``tf.broadcast_to``) and its values are
    checked. Raises SkipCase when the device's ops return a copy instead of a view
    of that layout (the backend cannot hold it, so its kernels never see it).
    """
    tf = _tf()
    dev = tf.runtime.devices.get_device(device)
    x = np.asarray(x)
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    if x.ndim < (2 if layout == TRANSPOSED else 1):
        raise ValueError(f"a {layout} needs an array of rank >= "
                         f"{2 if layout == TRANSPOSED else 1}, got shape {x.shape}")
    if layout == BROADCAST and not np.array_equal(x, broadcast_values(x),
                                                  equal_nan=_kind(x.dtype) in "fc"):
        raise ValueError("a stride-0 view holds its first slice along axis 0 repeated: "
                         "pass broadcast_values(x)")
    if via_ops is None:
        via_ops = not dev.is_host
    if layout == TRANSPOSED:
        xs = np.swapaxes(x, -1, -2)
        host = np.zeros(xs.shape[:-1] + (2 * xs.shape[-1],), dtype=x.dtype)
        host[..., ::2] = xs
    elif layout == OFFSET:
        host = np.full((x.shape[0] + 1,) + x.shape[1:], _filler(x.dtype), dtype=x.dtype)
        host[1:] = x
    else:
        host = np.ascontiguousarray(x[:1])
    if not via_ops:
        if layout == TRANSPOSED:
            view = np.swapaxes(host[..., ::2], -1, -2)
        elif layout == OFFSET:
            view = host[1:]
        else:
            view = np.broadcast_to(host, x.shape)
        return wrap(view, dev)
    transpose = getattr(tf, "transpose", None)
    broadcast_to = getattr(tf, "broadcast_to", None)
    if transpose is None or broadcast_to is None or not hasattr(tf.Tensor, "__getitem__"):
        raise SkipCase(f"cannot build non-contiguous tensors on {dev}: needs tf.transpose, "
                       "tf.broadcast_to and Tensor slicing")
    with tf.device(dev):
        base = tf.constant(host, device=dev)
        if layout == TRANSPOSED:
            perm = list(range(x.ndim))
            perm[-1], perm[-2] = perm[-2], perm[-1]
            t = transpose(base[..., ::2], perm)
        elif layout == OFFSET:
            t = base[1:]
        else:
            t = broadcast_to(base, x.shape)
    got = t.numpy()
    if got.shape != x.shape or not np.array_equal(got, x, equal_nan=_kind(x.dtype) in "fc"):
        raise AssertionError(f"building a non-contiguous tensor ({layout}) on {dev} with "
                             f"tapeflow ops gave wrong values (shape {got.shape}, expected "
                             f"{x.shape}); see the slicing/transpose/broadcast_to conformance "
                             "tests")
    why = _lacks_layout(t._data, x.shape, x.dtype.itemsize, layout)
    if why:
        # The backend's view ops copy, so none of its tensors has this layout and its
        # kernels never receive one: nothing to test.
        raise SkipCase(f"{dev} cannot hold a {layout} tensor: {why}")
    return t


def _to_device(args, dev, layout=None):
    """The sample's NumPy arrays as tensors on ``dev`` (other arguments unchanged); with
    a ``layout``, every argument eligible for it (:func:`layout_candidate`) in that
    layout (:func:`noncontiguous_tensor`)."""
    tf = _tf()
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            if layout and layout_candidate(a, layout):
                out.append(noncontiguous_tensor(a, dev, layout=layout))
            else:
                out.append(tf.constant(a, device=dev))
        else:
            out.append(a)
    return out
