"""The encodings of a TensorBoard event file: TFRecord framing, the protobuf messages,
and the PNG of an image summary.

An event file is a sequence of records, each framed as TensorFlow's record writer
frames it::

    uint64  length            (little endian)
    uint32  masked_crc32c(length bytes)
    bytes   data[length]      (one serialized ``tensorflow.Event`` protobuf)
    uint32  masked_crc32c(data)

The libraries made for it do the work (the extra ``tapeflow[tensorboard]``): the CRC32C
is the ``crc32c`` package's (C, with the CPU's CRC instruction where there is one), and
the messages are tensorboardX's compiled ``Event``/``Summary`` protobufs (the same
``.proto`` files as TensorFlow's, without TensorFlow). They are imported when the first
summary is written, not by ``import tapeflow``; without them that call fails naming the
extra. Images are encoded as PNG by Pillow (the same extra), imported when the first one
is.
"""

from __future__ import annotations

import io
import os
import struct

import numpy as np

from ..errors import DataLossError, FailedPreconditionError, InvalidArgumentError
from ..train import files as _files

_EXTRA = "pip install 'tapeflow[tensorboard]'"
_LIBS: dict = {}


def _lib(name):
    mod = _LIBS.get(name)
    if mod is None:
        try:
            if name == "crc32c":
                import crc32c as mod
            elif name == "graph":
                from tensorboardX.proto import graph_pb2 as mod
            else:
                from tensorboardX.proto import event_pb2, summary_pb2
                mod = (event_pb2, summary_pb2)
        except ImportError as e:
            raise FailedPreconditionError(
                f"writing TensorBoard summaries needs the {name} library, which is not "
                f"installed ({e}); install the summary extra: {_EXTRA}") from None
        _LIBS[name] = mod
    return mod


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``)."""
    return _lib("crc32c").crc32c(data)


def masked_crc32c(data: bytes) -> int:
    """The masked CRC TFRecord stores: rotate right by 15 bits, add a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, CRC of the length, data, CRC of the data."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


#: the longest record read: a serialized protobuf message is at most 2 GiB
MAX_RECORD_BYTES = (1 << 31) - 1


def read_records(path):
    """Yield the data of every record in a TFRecord file, checking both CRCs.

    A truncated last record (a writer still running) ends the iteration quietly; a
    CRC mismatch, or a length no record can have (over 2 GiB, e.g. ``2**62`` with a
    valid length CRC), raises ``DataLossError`` naming the file and the byte offset.
    A record is read only once the file is known to hold all of it, so a crafted
    length never allocates more than the file's size. Only regular files are read.
    """
    f, _ = _files.open_regular(path, "event file")
    with f:
        offset = 0
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != crc:
                raise DataLossError(f"{path}: corrupt record length at byte {offset}")
            if length > MAX_RECORD_BYTES:
                raise DataLossError(
                    f"{path}: the record at byte {offset} declares {length} bytes of data, "
                    f"more than a record can hold ({MAX_RECORD_BYTES}); the file is corrupt "
                    "or not an event file")
            size = os.fstat(f.fileno()).st_size
            if size - (offset + 12) < length + 4:
                return                     # not all written yet: a writer is still running
            body = f.read(length + 4)
            if len(body) < length + 4:
                return
            data, (crc,) = body[:length], struct.unpack("<I", body[length:])
            if masked_crc32c(data) != crc:
                raise DataLossError(f"{path}: corrupt record data at byte {offset}")
            offset += 12 + length + 4
            yield data


def events_from_file(path):
    """The ``Event`` messages of one event file, in order (the first is the file version).

    TensorFlow's test helper (``tf.contrib.summary.summary_test_util``): a test reads
    back what a writer wrote, ``events[1].summary.value[0].tag``, ``.simple_value``,
    ``.step``. Both CRCs of every record are checked (:func:`read_records`).
    """
    event_pb2, _ = _lib("tensorboardX")
    return [event_pb2.Event.FromString(data) for data in read_records(path)]


def events_from_logdir(logdir):
    """The events of the one event file in ``logdir`` (:func:`events_from_file`)."""
    names = sorted(os.listdir(logdir)) if os.path.isdir(logdir) else None
    if not names or len(names) != 1:
        raise InvalidArgumentError(
            f"events_from_logdir: {logdir!r} must hold exactly one event file; it holds "
            f"{'no directory' if names is None else names}. Read one file with events_from_file.")
    return events_from_file(os.path.join(logdir, names[0]))


# --- the messages ----------------------------------------------------------------------------

FILE_VERSION = "brain.Event:2"


def event(wall_time: float, step: int = 0, *, file_version: str | None = None,
          summary=None) -> bytes:
    """A serialized ``Event`` (``summary``: a ``Summary`` message from :func:`summary`)."""
    event_pb2, _ = _lib("tensorboardX")
    e = event_pb2.Event(wall_time=wall_time, step=int(step))
    if file_version is not None:
        e.file_version = file_version
    if summary is not None:
        e.summary.CopyFrom(summary)
    return e.SerializeToString()


def graph_event(wall_time: float, step: int, nodes) -> bytes:
    """A serialized ``Event`` whose ``graph_def`` is a ``GraphDef`` of ``nodes``
    (``(name, op, inputs, device)``): what TensorBoard's graph dashboard draws."""
    event_pb2, _ = _lib("tensorboardX")
    graph_pb2 = _lib("graph")
    g = graph_pb2.GraphDef()
    for name, op, inputs, device in nodes:
        n = g.node.add()
        n.name, n.op, n.device = name, op, device
        n.input.extend(inputs)
    e = event_pb2.Event(wall_time=wall_time, step=int(step))
    e.graph_def = g.SerializeToString()
    return e.SerializeToString()


def summary(values):
    """A ``Summary`` message holding the ``Summary.Value`` messages ``values``."""
    _, summary_pb2 = _lib("tensorboardX")
    return summary_pb2.Summary(value=list(values))


def scalar_value(tag: str, value: float):
    """``Summary.Value(tag, simple_value)``."""
    _, summary_pb2 = _lib("tensorboardX")
    return summary_pb2.Summary.Value(tag=tag, simple_value=value)


def histogram_value(tag: str, vmin, vmax, num, vsum, vsum_squares, limits, counts):
    """``Summary.Value(tag, histo=HistogramProto(...))``."""
    _, summary_pb2 = _lib("tensorboardX")
    histo = summary_pb2.HistogramProto(min=vmin, max=vmax, num=num, sum=vsum,
                                       sum_squares=vsum_squares,
                                       bucket_limit=[float(x) for x in limits],
                                       bucket=[float(x) for x in counts])
    return summary_pb2.Summary.Value(tag=tag, histo=histo)


def image_value(tag: str, height: int, width: int, channels: int, png: bytes):
    """``Summary.Value(tag, image=Image(height, width, colorspace, encoded PNG))``."""
    _, summary_pb2 = _lib("tensorboardX")
    image = summary_pb2.Summary.Image(height=height, width=width, colorspace=channels,
                                      encoded_image_string=png)
    return summary_pb2.Summary.Value(tag=tag, image=image)


# --- PNG (image summaries) -----------------------------------------------------------------

_CHANNELS = (1, 2, 3, 4)            # grey, grey + alpha, RGB, RGBA


def encode_png(image) -> bytes:
    """PNG bytes of a uint8 array of shape ``(height, width, channels)``, channels
    in 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA); ``(height, width)`` is grey.

    >>> import numpy as np
    >>> encode_png(np.zeros((2, 3, 1), np.uint8))[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    a = np.asarray(image)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in _CHANNELS)) or a.dtype != np.uint8:
        raise InvalidArgumentError(f"encode_png needs a uint8 array (height, width, 1|2|3|4), "
                                   f"got {a.dtype} {np.shape(image)}")
    try:
        from PIL import Image
    except ImportError as e:
        raise FailedPreconditionError(
            f"image summaries are encoded by Pillow, which is not installed ({e}); install "
            "the summary extra: pip install 'tapeflow[tensorboard]'") from None
    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(a)).save(out, format="PNG")
    return out.getvalue()
