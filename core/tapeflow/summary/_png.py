"""A minimal PNG encoder (8-bit grey, grey+alpha, RGB, RGBA) with zlib: no Pillow."""

from __future__ import annotations

import struct
import zlib

import numpy as np

from ..runtime.errors import InvalidArgumentError

_COLOR_TYPE = {1: 0, 2: 4, 3: 2, 4: 6}     # channels -> PNG colour type


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def encode_png(image) -> bytes:
    """PNG bytes of a uint8 array of shape ``(height, width, channels)``, channels
    in 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA); ``(height, width)`` is grey.

    >>> import numpy as np
    >>> encode_png(np.zeros((2, 3, 1), np.uint8))[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    a = np.asarray(image)
    if a.ndim == 2:
        a = a[:, :, None]
    if a.ndim != 3 or a.shape[2] not in _COLOR_TYPE or a.dtype != np.uint8:
        raise InvalidArgumentError(f"encode_png needs a uint8 array (height, width, 1|2|3|4), got "
                         f"{a.dtype} {a.shape}")
    h, w, c = a.shape
    rows = np.empty((h, 1 + w * c), np.uint8)
    rows[:, 0] = 0                                  # filter type 0 (None) on every row
    rows[:, 1:] = a.reshape(h, w * c)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, _COLOR_TYPE[c], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr)
            + _chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + _chunk(b"IEND", b""))
