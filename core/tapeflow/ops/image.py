"""``tf.image``: resizing, flips and rotations, crops and pads, colour adjustments and
dtype conversion of images: 3-D ``[height, width, channels]`` tensors or 4-D
``[batch, height, width, channels]`` batches of them (NHWC), as in TensorFlow 2.

Every function is a composite of the array and linear-algebra ops, so it runs on every
backend and differentiates through them: ``resize`` multiplies by per-axis interpolation
matrices (bilinear, area, bicubic; built on the host from the sizes alone) or gathers
(nearest), with TensorFlow 2's half-pixel centres (``antialias=False``). One op is
declared here, ``AdjustContrastv2`` (``adjust_contrast``): a composite recorded as one op
that has no gradient, as in TensorFlow (its gradient raises a LookupError).

>>> import tapeflow as tf
>>> img = tf.reshape(tf.range(4.), [2, 2, 1])
>>> print(tf.image.resize(img, [4, 4])[..., 0])
tf.Tensor(
[[0.   0.25 0.75 1.  ]
 [0.5  0.75 1.25 1.5 ]
 [1.5  1.75 2.25 2.5 ]
 [2.   2.25 2.75 3.  ]], shape=(4, 4), dtype=float32)
>>> print(tf.image.flip_left_right(img)[..., 0])
tf.Tensor(
[[1. 0.]
 [3. 2.]], shape=(2, 2), dtype=float32)

Deliberate differences from TensorFlow 2.21:

* ``random_flip_*``, ``random_brightness`` and ``random_contrast`` draw from tapeflow's
  random streams: the same seed gives the same flips on every tapeflow backend, but not
  the flips TensorFlow draws.
* ``resize``'s ``antialias=True`` and the methods ``lanczos3``, ``lanczos5``,
  ``gaussian`` and ``mitchellcubic`` (TensorFlow's scale-and-translate kernels) raise
  UnimplementedError.
* ``resize(method="area")`` is differentiable (TensorFlow's ResizeArea has no gradient).
* Values agree with TensorFlow's to float32 rounding (interpolation is a matrix product
  here, a per-pixel blend there); ``bicubic`` reproduces TensorFlow's 1024-entry
  coefficient table.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dt
from ..errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from ..runtime import context as _ctx
from ..runtime import shapes as _shapes
from ..runtime.dispatch import constant, convert_to_tensor, execute
from ..runtime.tensor import Tensor
from . import math as _m
from . import reductions as _r
from .reductions import broadcast_to
from .library import defop
from .array_creation import _tensor
from .array_shape import expand_dims, reshape, transpose as _transpose
from .array_values import clip_by_value, where
from .array_gather import concat, gather, tile
from .array_slice import pad, reverse
from . import random as _random
from .linalg import einsum

__all__ = ["resize", "ResizeMethod", "resize_with_pad", "resize_with_crop_or_pad",
           "flip_left_right", "flip_up_down", "random_flip_left_right", "random_flip_up_down",
           "rot90", "transpose", "crop_to_bounding_box", "pad_to_bounding_box", "central_crop",
           "adjust_brightness", "adjust_contrast", "random_brightness", "random_contrast",
           "adjust_gamma", "rgb_to_grayscale", "grayscale_to_rgb", "rgb_to_hsv", "hsv_to_rgb",
           "adjust_saturation", "convert_image_dtype", "per_image_standardization"]


def _image(image, fn, ranks=(3, 4)):
    """``image`` as a tensor of one of ``ranks`` (TensorFlow's error otherwise)."""
    t = _tensor(image)
    if len(t.shape) not in ranks:
        raise InvalidArgumentError(
            f"{fn}: 'image' must be 3-D [height, width, channels] or 4-D [batch, height, "
            f"width, channels], got shape {list(t.shape)}", device=t._device)
    return t


def _hw(t):
    """``(height, width)`` of an image or a batch."""
    return t.shape[-3], t.shape[-2]


# --- resize ------------------------------------------------------------------------------

class ResizeMethod:
    """The names of ``resize``'s methods (``tf.image.ResizeMethod.BILINEAR``...)."""

    BILINEAR = "bilinear"
    NEAREST_NEIGHBOR = "nearest"
    BICUBIC = "bicubic"
    AREA = "area"
    LANCZOS3 = "lanczos3"
    LANCZOS5 = "lanczos5"
    GAUSSIAN = "gaussian"
    MITCHELLCUBIC = "mitchellcubic"


def _bilinear_weights(n_in, n_out):
    """``(n_out, n_in)`` bilinear interpolation matrix, half-pixel centres."""
    src = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * np.float32(n_in / n_out) \
        - np.float32(0.5)
    f = np.floor(src)
    lo = np.maximum(f, 0).astype(np.int64)
    hi = np.minimum(np.ceil(src), n_in - 1).astype(np.int64)
    frac = (src - f).astype(np.float64)
    w = np.zeros((n_out, n_in))
    rows = np.arange(n_out)
    np.add.at(w, (rows, lo), 1 - frac)
    np.add.at(w, (rows, hi), frac)
    return w


def _area_weights(n_in, n_out):
    """``(n_out, n_in)``: each output pixel the mean of the input span it covers."""
    scale = n_in / n_out
    start = np.arange(n_out)[:, None] * scale
    i = np.arange(n_in)[None, :]
    overlap = np.clip(np.minimum(i + 1, start + scale) - np.maximum(i, start), 0, None)
    return overlap / scale


def _cubic(t, a=-0.5):
    t = np.abs(t)
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def _bicubic_weights(n_in, n_out):
    """``(n_out, n_in)`` Keys cubic (a = -0.5) interpolation, half-pixel centres, the
    taps outside the image dropped and the rest renormalised; the fraction rounded to
    1/1024 as TensorFlow's coefficient table does."""
    src = (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * np.float32(n_in / n_out) \
        - np.float32(0.5)
    f = np.floor(src)
    d = np.rint((src - f) * 1024) / 1024
    w = np.zeros((n_out, n_in))
    taps = [(f + k).astype(np.int64) for k in (-1, 0, 1, 2)]
    ws = [_cubic(1 + d), _cubic(d), _cubic(1 - d), _cubic(2 - d)]
    ws = [np.where((i >= 0) & (i < n_in), x, 0.0) for i, x in zip(taps, ws)]
    total = sum(ws)
    rows = np.arange(n_out)
    for i, x in zip(taps, ws):
        np.add.at(w, (rows, np.clip(i, 0, n_in - 1)), x / total)
    return w


def _nearest_index(n_in, n_out):
    scale = np.float32(n_in / n_out)
    src = np.floor((np.arange(n_out, dtype=np.float32) + np.float32(0.5)) * scale)
    return np.clip(src, 0, n_in - 1).astype(np.int64)


_WEIGHTS = {"bilinear": _bilinear_weights, "area": _area_weights, "bicubic": _bicubic_weights}


def _resize_axis(x, axis, n_out, method):
    n_in = x.shape[axis]
    if n_in == n_out and method != "area":
        return x
    if method == "nearest":
        return gather(x, constant(_nearest_index(n_in, n_out), device=x.device), axis=axis)
    w = constant(_WEIGHTS[method](n_in, n_out).astype(x.dtype.np), device=x.device)
    if axis == x.ndim - 3:
        return einsum("oh,...hwc->...owc", w, x)
    return einsum("ow,...wc->...oc", w, x)


def _target_size(size, fn, t):
    try:
        s = np.asarray(size.numpy() if isinstance(size, Tensor) else size)
        if s.shape != (2,) or s.dtype.kind not in "iu":
            raise ValueError
        h, w = (int(d) for d in s)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{fn}: size must be a 1-D int32 tensor of 2 elements "
                                   f"[new_height, new_width], got {_shapes.short_repr(size)}",
                                   device=t._device) from None
    if h <= 0 or w <= 0:
        raise InvalidArgumentError(f"{fn}: size must be positive, got [{h}, {w}]",
                                   device=t._device)
    return h, w


def resize(images, size, method=ResizeMethod.BILINEAR, preserve_aspect_ratio=False,
           antialias=False, name=None):
    """``images`` (3-D or 4-D) resized to ``size`` ``[new_height, new_width]`` by
    ``method``: ``"bilinear"`` (default), ``"nearest"``, ``"area"`` or ``"bicubic"``,
    with half-pixel centres as TensorFlow 2's ``tf.image.resize``. The result is float32
    except for ``"nearest"``, which keeps the dtype. ``preserve_aspect_ratio`` fits the
    image inside ``size``. Differentiable in ``images``.

    >>> import tapeflow as tf
    >>> img = tf.reshape(tf.range(16.), [4, 4, 1])
    >>> print(tf.image.resize(img, [2, 2], method="area")[..., 0])
    tf.Tensor(
    [[ 2.5  4.5]
     [10.5 12.5]], shape=(2, 2), dtype=float32)
    >>> print(tf.image.resize(img, [2, 2], method="nearest")[..., 0])
    tf.Tensor(
    [[ 5.  7.]
     [13. 15.]], shape=(2, 2), dtype=float32)
    """
    t = _image(images, "resize")
    m = method.lower() if isinstance(method, str) else method
    if m not in ("bilinear", "nearest", "area", "bicubic"):
        if m in ("lanczos3", "lanczos5", "gaussian", "mitchellcubic"):
            raise UnimplementedError(f"resize: method {m!r} is not implemented in tapeflow; "
                                     "use bilinear, nearest, area or bicubic")
        raise InvalidArgumentError(f"resize: method must be one of 'bilinear', 'nearest', "
                                   f"'area', 'bicubic', got {_shapes.short_repr(method)}")
    if antialias:
        raise UnimplementedError("resize: antialias=True is not implemented in tapeflow; "
                                 "pass antialias=False (TensorFlow's default)")
    h, w = _target_size(size, "resize", t)
    if preserve_aspect_ratio:
        ih, iw = _hw(t)
        scale = min(h / ih, w / iw)
        h, w = max(int(round(ih * scale)), 1), max(int(round(iw * scale)), 1)
    if m != "nearest" and t.dtype is not _dt.float32:
        t = _m.cast(t, _dt.float32)
    nd = len(t.shape)
    return _resize_axis(_resize_axis(t, nd - 3, h, m), nd - 2, w, m)


def resize_with_pad(image, target_height, target_width, method=ResizeMethod.BILINEAR,
                    antialias=False):
    """``image`` resized to fit ``[target_height, target_width]`` keeping its aspect
    ratio, then zero-padded (centred) to exactly that size.

    >>> import tapeflow as tf
    >>> print(tf.image.resize_with_pad(tf.ones([2, 4, 1]), 4, 4)[..., 0])
    tf.Tensor(
    [[0. 0. 0. 0.]
     [1. 1. 1. 1.]
     [1. 1. 1. 1.]
     [0. 0. 0. 0.]], shape=(4, 4), dtype=float32)
    """
    t = _image(image, "resize_with_pad")
    th, tw = _target_size([target_height, target_width], "resize_with_pad", t)
    ih, iw = _hw(t)
    ratio = max(iw / tw, ih / th)
    rh, rw = int(np.floor(ih / ratio)), int(np.floor(iw / ratio))
    out = resize(t, [rh, rw], method=method, antialias=antialias)
    # (the offsets centre the unrounded size, as TensorFlow's do)
    ph, pw = (max(int(np.floor((tgt - n / ratio) / 2)), 0) for tgt, n in ((th, ih), (tw, iw)))
    return pad_to_bounding_box(out, ph, pw, th, tw)


def resize_with_crop_or_pad(image, target_height, target_width):
    """``image`` centrally cropped and/or zero-padded to ``[target_height, target_width]``.

    >>> import tapeflow as tf
    >>> print(tf.image.resize_with_crop_or_pad(tf.ones([1, 3, 1]), 3, 1)[..., 0])
    tf.Tensor(
    [[0.]
     [1.]
     [0.]], shape=(3, 1), dtype=float32)
    """
    t = _image(image, "resize_with_crop_or_pad")
    th, tw = _target_size([target_height, target_width], "resize_with_crop_or_pad", t)
    ih, iw = _hw(t)
    dh, dw = th - ih, tw - iw
    t = crop_to_bounding_box(t, max(-dh // 2, 0), max(-dw // 2, 0), min(th, ih), min(tw, iw))
    return pad_to_bounding_box(t, max(dh // 2, 0), max(dw // 2, 0), th, tw)


# --- flips, rotations, crops -------------------------------------------------------------

def flip_left_right(image):
    """``image`` mirrored horizontally (its width axis reversed).

    >>> import tapeflow as tf
    >>> print(tf.image.flip_left_right([[[1], [2]]])[..., 0])
    tf.Tensor([[2 1]], shape=(1, 2), dtype=int32)
    """
    t = _image(image, "flip_left_right")
    return reverse(t, [len(t.shape) - 2])


def flip_up_down(image):
    """``image`` mirrored vertically (its height axis reversed).

    >>> import tapeflow as tf
    >>> print(tf.image.flip_up_down([[[1]], [[2]]])[..., 0])
    tf.Tensor(
    [[2]
     [1]], shape=(2, 1), dtype=int32)
    """
    t = _image(image, "flip_up_down")
    return reverse(t, [len(t.shape) - 3])


def _random_flip(image, seed, axis_from_end, fn):
    t = _image(image, fn)
    flipped = reverse(t, [len(t.shape) - axis_from_end])
    n = t.shape[0] if len(t.shape) == 4 else None
    coin = _random.uniform([] if n is None else [n], seed=seed)
    coin = _m.less(coin, 0.5)
    if n is not None:
        coin = reshape(coin, (n, 1, 1, 1))
    return where(coin, flipped, t)


def random_flip_left_right(image, seed=None):
    """Each image mirrored horizontally with probability 1/2 (one draw per image of a
    batch; tapeflow's random stream, see the module notes).

    >>> import tapeflow as tf
    >>> tf.image.random_flip_left_right(tf.ones([2, 2, 1]), seed=1).shape
    TensorShape([2, 2, 1])
    """
    return _random_flip(image, seed, 2, "random_flip_left_right")


def random_flip_up_down(image, seed=None):
    """Each image mirrored vertically with probability 1/2 (one draw per image).

    >>> import tapeflow as tf
    >>> tf.image.random_flip_up_down(tf.ones([2, 2, 1]), seed=1).shape
    TensorShape([2, 2, 1])
    """
    return _random_flip(image, seed, 3, "random_flip_up_down")


def _hw_perm(nd):
    return list(range(nd - 3)) + [nd - 2, nd - 3, nd - 1]


def transpose(image, name=None):
    """``image`` with height and width swapped.

    >>> import tapeflow as tf
    >>> tf.image.transpose(tf.zeros([2, 3, 1])).shape
    TensorShape([3, 2, 1])
    """
    t = _image(image, "transpose")
    return _transpose(t, _hw_perm(len(t.shape)))


def rot90(image, k=1, name=None):
    """``image`` rotated counter-clockwise by ``k`` quarter turns.

    >>> import tapeflow as tf
    >>> print(tf.image.rot90([[[1], [2]], [[3], [4]]])[..., 0])
    tf.Tensor(
    [[2 4]
     [1 3]], shape=(2, 2), dtype=int32)
    """
    t = _image(image, "rot90")
    k = _shapes.as_index(k, "k", "rot90", t._device) % 4
    nd = len(t.shape)
    if k == 1:
        return _transpose(reverse(t, [nd - 2]), _hw_perm(nd))
    if k == 2:
        return reverse(t, [nd - 3, nd - 2])
    if k == 3:
        return reverse(_transpose(t, _hw_perm(nd)), [nd - 2])
    return t


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """The ``[target_height, target_width]`` window of ``image`` whose top-left corner is
    at ``(offset_height, offset_width)``.

    >>> import tapeflow as tf
    >>> img = tf.reshape(tf.range(9), [3, 3, 1])
    >>> print(tf.image.crop_to_bounding_box(img, 1, 1, 2, 2)[..., 0])
    tf.Tensor(
    [[4 5]
     [7 8]], shape=(2, 2), dtype=int32)
    """
    t = _image(image, "crop_to_bounding_box")
    oh, ow, th, tw = (_shapes.as_index(v, n, "crop_to_bounding_box", t._device) for v, n in (
        (offset_height, "offset_height"), (offset_width, "offset_width"),
        (target_height, "target_height"), (target_width, "target_width")))
    ih, iw = _hw(t)
    if oh < 0 or ow < 0 or th <= 0 or tw <= 0 or oh + th > ih or ow + tw > iw:
        raise InvalidArgumentError(
            f"crop_to_bounding_box: the box (offset {oh}, {ow}, size {th}, {tw}) must lie "
            f"inside the {ih}x{iw} image, with non-negative offsets and a positive size",
            device=t._device)
    return t[..., oh:oh + th, ow:ow + tw, :]


def pad_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """``image`` zero-padded to ``[target_height, target_width]``, its top-left corner at
    ``(offset_height, offset_width)``.

    >>> import tapeflow as tf
    >>> print(tf.image.pad_to_bounding_box(tf.ones([1, 1, 1]), 1, 0, 2, 2)[..., 0])
    tf.Tensor(
    [[0. 0.]
     [1. 0.]], shape=(2, 2), dtype=float32)
    """
    t = _image(image, "pad_to_bounding_box")
    oh, ow, th, tw = (_shapes.as_index(v, n, "pad_to_bounding_box", t._device) for v, n in (
        (offset_height, "offset_height"), (offset_width, "offset_width"),
        (target_height, "target_height"), (target_width, "target_width")))
    ih, iw = _hw(t)
    if oh < 0 or ow < 0 or oh + ih > th or ow + iw > tw:
        raise InvalidArgumentError(
            f"pad_to_bounding_box: the {ih}x{iw} image at offset ({oh}, {ow}) must fit "
            f"inside the {th}x{tw} target, with non-negative offsets", device=t._device)
    lead = [[0, 0]] * (len(t.shape) - 3)
    return pad(t, lead + [[oh, th - ih - oh], [ow, tw - iw - ow], [0, 0]])


def central_crop(image, central_fraction):
    """The central ``central_fraction`` (in (0, 1]) of ``image``'s height and width.

    >>> import tapeflow as tf
    >>> tf.image.central_crop(tf.zeros([4, 8, 3]), 0.5).shape
    TensorShape([2, 4, 3])
    """
    t = _image(image, "central_crop")
    f = central_fraction
    if isinstance(f, bool) or not isinstance(f, (int, float, np.floating, np.integer)) \
            or not 0.0 < f <= 1.0:
        raise InvalidArgumentError(f"central_crop: central_fraction must be within (0, 1], "
                                   f"got {_shapes.short_repr(f)}", device=t._device)
    if f == 1.0:
        return t
    ih, iw = _hw(t)
    sh, sw = int((ih - ih * f) / 2), int((iw - iw * f) / 2)
    return t[..., sh:ih - sh, sw:iw - sw, :]


# --- dtype conversion and colour ---------------------------------------------------------

def _saturate_cast(x, dtype):
    lo, hi = dtype.min, dtype.max
    if x.dtype.is_floating:
        # the representable bounds in x's dtype that do not overflow the target
        flo, fhi = np.array([lo, hi], dtype=x.dtype.np)
        if float(fhi) > hi:
            fhi = np.nextafter(fhi, np.array(0, x.dtype.np))
        if float(flo) < lo:
            flo = np.nextafter(flo, np.array(0, x.dtype.np))
        return _m.cast(clip_by_value(x, flo.item(), fhi.item()), dtype)
    if x.dtype.min < lo or x.dtype.max > hi:
        x = clip_by_value(x, max(lo, x.dtype.min), min(hi, x.dtype.max))
    return _m.cast(x, dtype)


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """``image`` converted to ``dtype``, rescaling as TensorFlow does: floats hold [0, 1],
    integers [0, MAX] of their dtype. Integer to float multiplies by 1/MAX; float to
    integer multiplies by MAX + 0.5 and truncates; integer to integer shifts by the ratio
    of the ranges. ``saturate`` clips to the target's range before casting (else values
    outside it wrap, as a cast does).

    >>> import tapeflow as tf
    >>> print(tf.image.convert_image_dtype(tf.constant([0, 255], tf.uint8), tf.float32))
    tf.Tensor([0. 1.], shape=(2,), dtype=float32)
    >>> print(tf.image.convert_image_dtype([0.0, 0.5, 1.0], tf.uint8))
    tf.Tensor([  0 127 255], shape=(3,), dtype=uint8)
    """
    t = _tensor(image)
    dt = _dt.as_dtype(dtype)
    for d in (t.dtype, dt):
        if not (d.is_integer or d.is_floating):
            raise InvalidTypeError(f"convert_image_dtype: image and dtype must be integer or "
                                   f"floating-point, got {t.dtype.name} to {dt.name}",
                                   device=t._device)
    if t.dtype is dt:
        return t
    if t.dtype.is_integer and dt.is_integer:
        if t.dtype.max > dt.max:
            scaled = _m.floordiv(t, (t.dtype.max + 1) // (dt.max + 1))
            return _saturate_cast(scaled, dt) if saturate else _m.cast(scaled, dt)
        c = _saturate_cast(t, dt) if saturate else _m.cast(t, dt)
        return _m.multiply(c, constant((dt.max + 1) // (t.dtype.max + 1), dt, device=t.device))
    if t.dtype.is_floating and dt.is_floating:
        return _m.cast(t, dt)
    if t.dtype.is_integer:
        return _m.multiply(_m.cast(t, dt), 1.0 / t.dtype.max)
    scaled = _m.multiply(t, dt.max + 0.5)
    return _saturate_cast(scaled, dt) if saturate else _m.cast(scaled, dt)


def _as_float(t):
    """``t`` as float16/float32 for the colour functions (others through
    convert_image_dtype to float32), and how to go back."""
    if t.dtype in (_dt.float16, _dt.float32):
        return t, lambda y: y
    return (convert_image_dtype(t, _dt.float32),
            lambda y: convert_image_dtype(y, t.dtype, saturate=True))


def _real_factor(value, dtype, what):
    """A real parameter of an adjustment as ``dtype``: a number or a real tensor, cast; a
    complex one refused (a cast would drop its imaginary part silently)."""
    t = value if isinstance(value, Tensor) else convert_to_tensor(value)
    if t.dtype.is_complex:
        raise InvalidArgumentError(f"{what} must be real, got a {t.dtype.name} value; take "
                                   "tf.math.real of it if its real part is what you mean")
    return _m.cast(t, dtype)


def adjust_brightness(image, delta):
    """``image + delta`` (integer images through float32 and back, saturating).

    >>> import tapeflow as tf
    >>> print(tf.image.adjust_brightness([[[0.25]]], 0.5))
    tf.Tensor([[[0.75]]], shape=(1, 1, 1), dtype=float32)
    """
    t = _tensor(image)
    f, back = _as_float(t)
    return back(_m.add(f, _real_factor(delta, f.dtype, "adjust_brightness: delta")))


def _contrast_composite(images, contrast_factor):
    with _ctx.stop_all_recording():
        mean = _r.reduce_mean(images, axis=[-3, -2], keepdims=True)
        out = _m.add(_m.multiply(_m.subtract(images, mean), contrast_factor), mean)
    if _ctx.tapes_active[0]:
        _ctx.record(_ADJUST_CONTRAST, (images, contrast_factor), (out,), {})
    return out


#: TensorFlow's op: recorded as one op without a gradient (``tape.gradient`` through it
#: raises NotDifferentiableError, a LookupError, as TensorFlow's does)
_ADJUST_CONTRAST = defop("AdjustContrastv2", inputs=("images", "contrast_factor"),
                         dtype_rule="none", composite=_contrast_composite)


@_ADJUST_CONTRAST.def_batch
def _contrast_batch(ctx, images, factor):
    if ctx.batched[1]:          # one factor per example: broadcast over its image
        if not ctx.batched[0]:
            images = broadcast_to(images, (ctx.size,) + tuple(images.shape))
        factor = reshape(factor, (ctx.size,) + (1,) * (len(images.shape) - 1))
    return execute(ctx.op, (images, factor))


def adjust_contrast(images, contrast_factor):
    """Each channel of each image moved away from (factor > 1) or towards its mean over
    height and width: ``(x - mean) * contrast_factor + mean``. Not differentiable (as in
    TensorFlow).

    >>> import tapeflow as tf
    >>> print(tf.image.adjust_contrast([[[1.0], [3.0]]], 2.0)[..., 0])
    tf.Tensor([[0. 4.]], shape=(1, 2), dtype=float32)
    """
    t = _image(images, "adjust_contrast", ranks=tuple(range(3, 9)))
    f, back = _as_float(t)
    return back(execute(_ADJUST_CONTRAST, (f, convert_to_tensor(contrast_factor, f.dtype))))


def _number(v, what):
    """A real Python number (or a 0-d real tensor's value) as a float."""
    if isinstance(v, Tensor) and not v.shape and (v.dtype.is_floating or v.dtype.is_integer):
        v = v.numpy().item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer,
                                                             np.floating)):
        raise InvalidTypeError(f"{what} must be a real number, got {_shapes.short_repr(v)}")
    return float(v)


def random_brightness(image, max_delta, seed=None):
    """:func:`adjust_brightness` by a delta drawn uniformly from
    ``[-max_delta, max_delta)``.

    >>> import tapeflow as tf
    >>> tf.image.random_brightness(tf.zeros([2, 2, 1]), 0.1, seed=3).shape
    TensorShape([2, 2, 1])
    """
    max_delta = _number(max_delta, "random_brightness: max_delta")
    if max_delta < 0:
        raise InvalidArgumentError(f"random_brightness: max_delta must be non-negative, got "
                                   f"{max_delta}")
    return adjust_brightness(image, _random.uniform([], -max_delta, max_delta, seed=seed))


def random_contrast(image, lower, upper, seed=None):
    """:func:`adjust_contrast` by a factor drawn uniformly from ``[lower, upper)``.

    >>> import tapeflow as tf
    >>> tf.image.random_contrast(tf.zeros([2, 2, 1]), 0.5, 1.5, seed=3).shape
    TensorShape([2, 2, 1])
    """
    lower = _number(lower, "random_contrast: lower")
    upper = _number(upper, "random_contrast: upper")
    if not 0 <= lower < upper:
        raise InvalidArgumentError(f"random_contrast: need 0 <= lower < upper, got {lower}, "
                                   f"{upper}")
    return adjust_contrast(image, _random.uniform([], lower, upper, seed=seed))


def adjust_gamma(image, gamma=1, gain=1):
    """``gain * image ** gamma`` (integer images through float32 and back).

    >>> import tapeflow as tf
    >>> print(tf.image.adjust_gamma([[[0.25]]], 0.5))
    tf.Tensor([[[0.5]]], shape=(1, 1, 1), dtype=float32)
    """
    t = _tensor(image)
    f, back = _as_float(t)
    if (isinstance(gamma, (int, float)) and gamma < 0):
        raise InvalidArgumentError(f"adjust_gamma: gamma must be non-negative, got {gamma}")
    gamma = _real_factor(gamma, f.dtype, "adjust_gamma: gamma")
    return back(_m.multiply(gain, _m.pow(f, gamma)))


_GRAY = (0.2989, 0.5870, 0.1140)


def rgb_to_grayscale(images, name=None):
    """The luma of RGB ``images`` (last dimension 3): ``0.2989 R + 0.5870 G + 0.1140 B``,
    a last dimension of 1, in the images' dtype.

    >>> import tapeflow as tf
    >>> print(tf.image.rgb_to_grayscale(tf.constant([[[10, 200, 30]]], tf.uint8)))
    tf.Tensor([[[124]]], shape=(1, 1, 1), dtype=uint8)
    """
    t = _tensor(images)
    if not t.shape or t.shape[-1] != 3:
        raise InvalidArgumentError(f"rgb_to_grayscale: the last dimension must be 3 (RGB), "
                                   f"got shape {list(t.shape)}", device=t._device)
    f = convert_image_dtype(t, _dt.float32)
    w = constant(np.array(_GRAY, np.float32), device=t.device)
    gray = _r.reduce_sum(_m.multiply(f, w), axis=-1, keepdims=True)
    return convert_image_dtype(gray, t.dtype)


def grayscale_to_rgb(images, name=None):
    """Grayscale ``images`` (last dimension 1) repeated into 3 channels.

    >>> import tapeflow as tf
    >>> print(tf.image.grayscale_to_rgb([[[0.5]]]))
    tf.Tensor([[[0.5 0.5 0.5]]], shape=(1, 1, 3), dtype=float32)
    """
    t = _tensor(images)
    if len(t.shape) < 2 or t.shape[-1] != 1:
        raise InvalidArgumentError(f"grayscale_to_rgb: the last dimension must be 1, got shape "
                                   f"{list(t.shape)}", device=t._device)
    return tile(t, [1] * (len(t.shape) - 1) + [3])


def rgb_to_hsv(images, name=None):
    """RGB (floats in [0, 1], last dimension 3) to hue, saturation, value, each in [0, 1].

    >>> import tapeflow as tf
    >>> print(tf.image.rgb_to_hsv([[[1.0, 0.5, 0.0]]]))
    tf.Tensor([[[0.08333334 1.         1.        ]]], shape=(1, 1, 3), dtype=float32)
    """
    t = _tensor(images)
    if not t.shape or t.shape[-1] != 3 or not t.dtype.is_floating:
        raise InvalidArgumentError(f"rgb_to_hsv: images must be floats with a last dimension "
                                   f"of 3, got {t.dtype.name} of shape {list(t.shape)}",
                                   device=t._device)
    r, g, b = (t[..., i] for i in range(3))
    v = _r.reduce_max(t, axis=-1)
    rng = _m.subtract(v, _r.reduce_min(t, axis=-1))
    zero = _m.equal(v, 0)
    s = where(zero, 0.0, _m.divide(rng, where(zero, 1.0, v)))
    flat = _m.equal(rng, 0)
    d = where(flat, 1.0, rng)
    h = where(_m.equal(v, r), _m.divide(_m.subtract(g, b), d),
              where(_m.equal(v, g), _m.add(_m.divide(_m.subtract(b, r), d), 2.0),
                    _m.add(_m.divide(_m.subtract(r, g), d), 4.0)))
    h = _m.divide(h, 6.0)
    h = where(flat, 0.0, where(_m.less(h, 0), _m.add(h, 1.0), h))
    return concat([expand_dims(h, -1), expand_dims(s, -1), expand_dims(v, -1)], -1)


def hsv_to_rgb(images, name=None):
    """Hue, saturation, value (each in [0, 1], last dimension 3) to RGB.

    >>> import tapeflow as tf
    >>> print(tf.image.hsv_to_rgb([[[0.5, 1.0, 1.0]]]))
    tf.Tensor([[[0. 1. 1.]]], shape=(1, 1, 3), dtype=float32)
    """
    t = _tensor(images)
    if not t.shape or t.shape[-1] != 3 or not t.dtype.is_floating:
        raise InvalidArgumentError(f"hsv_to_rgb: images must be floats with a last dimension "
                                   f"of 3, got {t.dtype.name} of shape {list(t.shape)}",
                                   device=t._device)
    h, s, v = (t[..., i] for i in range(3))
    c = _m.multiply(s, v)
    dh = _m.multiply(h, 6.0)
    out = []
    for n in (5.0, 3.0, 1.0):           # R, G, B: v - c * clip(min(k, 4 - k), 0, 1)
        k = _m.mod(_m.add(dh, n), 6.0)
        w = clip_by_value(_m.minimum(k, _m.subtract(4.0, k)), 0.0, 1.0)
        out.append(expand_dims(_m.subtract(v, _m.multiply(c, w)), -1))
    return concat(out, -1)


def adjust_saturation(image, saturation_factor, name=None):
    """``image`` (RGB) with its saturation multiplied by ``saturation_factor`` (clipped to
    [0, 1]), through HSV; integer images through float32 and back.

    >>> import tapeflow as tf
    >>> print(tf.image.adjust_saturation([[[1.0, 0.5, 0.0]]], 0.0))
    tf.Tensor([[[1. 1. 1.]]], shape=(1, 1, 3), dtype=float32)
    """
    t = _tensor(image)
    f, back = _as_float(t)
    hsv = rgb_to_hsv(f)
    factor = _real_factor(saturation_factor, f.dtype, "adjust_saturation: saturation_factor")
    s = clip_by_value(_m.multiply(hsv[..., 1], factor), 0.0, 1.0)
    hsv = concat([hsv[..., :1], expand_dims(s, -1), hsv[..., 2:]], -1)
    return back(hsv_to_rgb(hsv))


def per_image_standardization(image):
    """Each image scaled to mean 0 and variance 1 over its pixels and channels:
    ``(x - mean) / max(stddev, 1 / sqrt(N))``, in float32 (as TensorFlow, for every input
    dtype).

    >>> import tapeflow as tf
    >>> print(tf.image.per_image_standardization([[[1.0], [3.0]]])[..., 0])
    tf.Tensor([[-1.  1.]], shape=(1, 2), dtype=float32)
    """
    t = _image(image, "per_image_standardization", ranks=tuple(range(3, 9)))
    if t.dtype is not _dt.float32:
        t = _m.cast(t, _dt.float32)
    n = int(np.prod(t.shape[-3:]))
    axes = [-3, -2, -1]
    mean = _r.reduce_mean(t, axis=axes, keepdims=True)
    std = _r.reduce_std(t, axis=axes, keepdims=True)
    std = _m.maximum(std, _m.cast(1.0 / np.sqrt(max(n, 1)), t.dtype))
    return _m.divide(_m.subtract(t, mean), std)
