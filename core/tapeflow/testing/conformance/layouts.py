"""Tensors on the device under test, contiguous or in one of the non-contiguous
:data:`LAYOUTS` (an offset view, transposed and strided, broadcast with stride 0),
built the way the device's own view ops build them."""

from __future__ import annotations

import numpy as np

from ...runtime.tensor import wrap
from ._common import SkipCase, _kind, _tf


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
