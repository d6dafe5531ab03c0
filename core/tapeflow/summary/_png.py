"""PNG encoding of image summaries, by Pillow (the extra ``tapeflow[tensorboard]``)."""

from __future__ import annotations

import io

import numpy as np

from ..errors import FailedPreconditionError, InvalidArgumentError

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
