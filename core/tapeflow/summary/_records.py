"""TFRecord framing and the few protobuf messages of a TensorBoard event file.

An event file is a sequence of records, each framed as TensorFlow's record writer
frames it::

    uint64  length            (little endian)
    uint32  masked_crc32c(length bytes)
    bytes   data[length]      (one serialized ``tensorflow.Event`` protobuf)
    uint32  masked_crc32c(data)

The messages are encoded by hand (the wire format is small and stable), so writing
summaries needs neither TensorFlow nor the protobuf runtime. Field numbers are those
of ``tensorflow/core/util/event.proto`` and ``tensorflow/core/framework/summary.proto``.
"""

from __future__ import annotations

import struct

import numpy as np

from ..runtime.errors import InvalidArgumentError

# --- CRC32C (Castagnoli), table driven ------------------------------------------------

def _make_table():
    poly = 0x82F63B78            # reversed 0x1EDC6F41
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``)."""
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC TFRecord stores: rotate right by 15 bits, add a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    """One TFRecord: length, CRC of the length, data, CRC of the data."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


def read_records(path):
    """Yield the data of every record in a TFRecord file, checking both CRCs.

    A truncated last record (a writer still running) ends the iteration quietly;
    a CRC mismatch raises ``ValueError`` naming the file and the byte offset.
    """
    with open(path, "rb") as f:
        offset = 0
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != crc:
                raise InvalidArgumentError(f"{path}: corrupt record length at byte {offset}")
            body = f.read(length + 4)
            if len(body) < length + 4:
                return
            data, (crc,) = body[:length], struct.unpack("<I", body[length:])
            if masked_crc32c(data) != crc:
                raise InvalidArgumentError(f"{path}: corrupt record data at byte {offset}")
            offset += 12 + length + 4
            yield data


# --- protobuf wire format ------------------------------------------------------------------

def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF          # negative int64 -> two's complement, 10 bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def f_varint(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(int(value))


def f_double(field: int, value: float) -> bytes:
    return _key(field, 1) + struct.pack("<d", value)


def f_float(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def f_bytes(field: int, value: bytes) -> bytes:
    return _key(field, 2) + _varint(len(value)) + value


def f_packed_doubles(field: int, values) -> bytes:
    return f_bytes(field, np.ascontiguousarray(values, dtype="<f8").tobytes())


# --- the messages ----------------------------------------------------------------------------

FILE_VERSION = "brain.Event:2"


def event(wall_time: float, step: int = 0, *, file_version: str | None = None,
          summary: bytes | None = None) -> bytes:
    """``Event{wall_time=1, step=2, file_version=3 | summary=5}``."""
    out = f_double(1, wall_time)
    if step:
        out += f_varint(2, step)
    if file_version is not None:
        out += f_bytes(3, file_version.encode())
    if summary is not None:
        out += f_bytes(5, summary)
    return out


def summary(values) -> bytes:
    """``Summary{repeated Value value=1}`` from encoded ``Value`` messages."""
    return b"".join(f_bytes(1, v) for v in values)


def scalar_value(tag: str, value: float) -> bytes:
    """``Summary.Value{tag=1, simple_value=2}``."""
    return f_bytes(1, tag.encode()) + f_float(2, value)


def histogram_value(tag: str, vmin, vmax, num, vsum, vsum_squares, limits, counts) -> bytes:
    """``Summary.Value{tag=1, histo=5: HistogramProto{min=1, max=2, num=3, sum=4,
    sum_squares=5, bucket_limit=6 (packed), bucket=7 (packed)}}``."""
    histo = (f_double(1, vmin) + f_double(2, vmax) + f_double(3, num) + f_double(4, vsum)
             + f_double(5, vsum_squares) + f_packed_doubles(6, limits)
             + f_packed_doubles(7, counts))
    return f_bytes(1, tag.encode()) + f_bytes(5, histo)


def image_value(tag: str, height: int, width: int, channels: int, png: bytes) -> bytes:
    """``Summary.Value{tag=1, image=4: Image{height=1, width=2, colorspace=3,
    encoded_image_string=4}}``."""
    image = f_varint(1, height) + f_varint(2, width) + f_varint(3, channels) + f_bytes(4, png)
    return f_bytes(1, tag.encode()) + f_bytes(4, image)
