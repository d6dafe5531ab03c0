"""``tf.keras.backend``: the few session-level helpers that make sense eagerly."""

from __future__ import annotations

from ..layers.base import reset_uids

__all__ = ["clear_session", "floatx", "image_data_format", "epsilon"]


def clear_session() -> None:
    """Restart automatic layer names (``dense``, ``dense_1`` ... begin again)."""
    reset_uids()


def floatx() -> str:
    return "float32"


def image_data_format() -> str:
    return "channels_last"


def epsilon() -> float:
    return 1e-7
