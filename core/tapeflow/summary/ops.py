"""Summary ops: ``scalar``, ``histogram``, ``image`` and ``flush``.

Each records into the default writer when :func:`should_record_summaries` holds and
returns whether it recorded. They accept both spellings of their arguments:
``tf.contrib.summary.scalar(name, tensor, family=None, step=None)`` (the seeds) and
``tf.summary.scalar(name, data, step=None)`` (TF 2): a third positional argument
that is not a string (a number, tensor or Variable) is the step.
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import InvalidArgumentError, InvalidTypeError
from . import _records
from ._png import encode_png
from .writer import _current, _policy_allows, _resolve_step, get_default_writer

__all__ = ["scalar", "histogram", "image", "flush"]

_DBL_MAX = sys.float_info.max


def _tag(name, family):
    return f"{family}/{name}" if family else str(name)


def _family_or_step(family, step):
    """The contrib signature's ``family`` slot holds TF 2's ``step`` when it is not a str."""
    if family is not None and not isinstance(family, str):
        if step is not None:
            raise InvalidTypeError("summary: step given twice (positionally and as step=)")
        return None, family
    return family, step


def _recording():
    writer, block_step = _current()
    if writer is None or not _policy_allows():
        return None, None
    return writer, block_step


def _host(value) -> np.ndarray:
    """The value as a host NumPy array (Tensors and Variables on any device)."""
    return np.asarray(value)


def scalar(name, tensor, family=None, step=None, description=None):
    """Record a scalar (any one-element value) under ``name``.

    >>> import tempfile, tapeflow as tf
    >>> writer = tf.summary.create_file_writer(tempfile.mkdtemp())
    >>> tf.summary.scalar("loss", 1.0, step=0)      # no default writer: not recorded
    False
    >>> with writer.as_default(), tf.summary.always_record_summaries():
    ...     tf.summary.scalar("loss", tf.constant(0.25), step=3)
    True
    """
    family, step = _family_or_step(family, step)
    writer, block_step = _recording()
    if writer is None:
        return False
    v = _host(tensor)
    if v.size != 1:
        raise InvalidArgumentError(f"summary.scalar {name!r}: needs a single value, got shape "
                                   f"{tuple(v.shape)}")
    value = _records.scalar_value(_tag(name, family), float(v.reshape(())))
    writer._write_summary(_resolve_step(step, block_step), [value])
    return True


# --- histograms ------------------------------------------------------------------------------

def _exponential_limits():
    """TensorFlow's default histogram bucket limits: +-1e-12 * 1.1**k up to 1e20, 0,
    and +-DBL_MAX at the ends (``tensorflow/core/lib/histogram/histogram.cc``)."""
    pos = []
    v = 1e-12
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    pos.append(_DBL_MAX)
    return np.array([-x for x in reversed(pos)] + [0.0] + pos)


_LIMITS = None


def _histogram_buckets(values: np.ndarray, buckets):
    """(bucket_limit, bucket) of a HistogramProto: TF's exponential buckets with runs
    of empty buckets collapsed into one, or ``buckets`` equal-width buckets."""
    if buckets is not None:
        k = max(int(buckets), 1)
        lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
        if hi <= lo:
            hi = lo + 1.0 if values.size else 1.0
        counts, edges = np.histogram(values, bins=k, range=(lo, hi))
        return edges[1:], counts.astype(np.float64)
    global _LIMITS
    if _LIMITS is None:
        _LIMITS = _exponential_limits()
    # bucket i holds limits[i-1] <= x < limits[i]
    counts = np.bincount(np.searchsorted(_LIMITS, values, side="right"),
                         minlength=len(_LIMITS))[:len(_LIMITS)].astype(np.float64)
    empty = counts == 0
    # keep every non-empty bucket and the last bucket of each run of empty ones
    keep = ~empty | np.append(~empty[1:], True)
    limits, counts = _LIMITS[keep], counts[keep]
    if limits.size == 0:            # pragma: no cover - the last bucket is always kept
        limits, counts = np.array([_DBL_MAX]), np.array([0.0])
    return limits, counts


def histogram(name, tensor, family=None, step=None, buckets=None, description=None):
    """Record the distribution of the values of ``tensor`` (a HistogramProto with
    TensorFlow's default exponential buckets, or ``buckets`` equal-width ones).
    NaN or infinite values are an error, as in TensorFlow."""
    family, step = _family_or_step(family, step)
    writer, block_step = _recording()
    if writer is None:
        return False
    v = _host(tensor).astype(np.float64, copy=False).ravel()
    if v.size and not np.isfinite(v).all():
        raise InvalidArgumentError(f"summary.histogram {name!r}: NaN or infinity in the values")
    limits, counts = _histogram_buckets(v, buckets)
    if v.size:
        stats = (float(v.min()), float(v.max()), float(v.size), float(v.sum()),
                 float(np.dot(v, v)))
    else:
        stats = (_DBL_MAX, -_DBL_MAX, 0.0, 0.0, 0.0)
    value = _records.histogram_value(_tag(name, family), *stats, limits, counts)
    writer._write_summary(_resolve_step(step, block_step), [value])
    return True


# --- images ----------------------------------------------------------------------------------

def _to_uint8(img: np.ndarray, bad_color: np.ndarray) -> np.ndarray:
    """One (h, w, c) image as uint8, the way TensorFlow's image summary converts it:
    floats with no negative value are scaled so the largest is 255, others so the
    largest magnitude is 127 around 128; non-finite pixels get ``bad_color``."""
    if img.dtype == np.uint8:
        return img
    if img.dtype.kind in "iub":
        return np.clip(img, 0, 255).astype(np.uint8)
    img = img.astype(np.float32, copy=False)
    finite = np.isfinite(img).all(axis=-1)
    vals = img[finite]
    lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 0.0)
    if lo < 0:
        m = max(abs(lo), abs(hi))
        scale, offset = (0.0 if m < 1e-6 else 127.0 / m), 128.0
    else:
        scale, offset = (0.0 if hi < 1e-6 else 255.0 / hi), 0.0
    out = np.where(finite[..., None], img, 0.0) * scale + offset
    out = np.clip(out, 0, 255).astype(np.uint8)
    out[~finite] = bad_color[:img.shape[-1]]
    return out


def image(name, tensor, bad_color=None, max_images=3, family=None, step=None,
          max_outputs=None, description=None):
    """Record up to ``max_images`` (TF 2: ``max_outputs``) images of a
    ``[k, height, width, channels]`` tensor, channels 1 (grey), 3 (RGB) or 4 (RGBA),
    PNG-encoded. Tags are ``name/image`` for one image, else ``name/image/0``, ...
    uint8 values are used as they are; float values are rescaled as in TensorFlow."""
    if bad_color is not None and np.size(bad_color) == 1 and step is None:
        bad_color, step = None, bad_color          # TF 2: image(name, data, step)
    family, step = _family_or_step(family, step)
    if max_outputs is not None:
        max_images = max_outputs
    writer, block_step = _recording()
    if writer is None:
        return False
    a = _host(tensor)
    if a.ndim != 4 or a.shape[-1] not in (1, 3, 4):
        raise InvalidArgumentError(
            f"summary.image {name!r}: needs a tensor of shape [k, height, width, channels] "
            f"with channels 1, 3 or 4, got shape {tuple(a.shape)}")
    bad = np.array([255, 0, 0, 255] if bad_color is None else _host(bad_color), np.uint8)
    max_images = int(max_images)
    tag = _tag(name, family)
    values = []
    for i in range(min(max_images, a.shape[0])):
        img = _to_uint8(a[i], bad)
        h, w, c = img.shape
        t = f"{tag}/image" if max_images == 1 else f"{tag}/image/{i}"
        values.append(_records.image_value(t, h, w, c, encode_png(img)))
    if values:
        writer._write_summary(_resolve_step(step, block_step), values)
    return True


def flush(writer=None, name=None):
    """Flush ``writer`` (default: the default writer) to its file."""
    writer = writer if writer is not None else get_default_writer()
    if writer is not None:
        writer.flush()
