"""TensorFloat-32 on the CUDA backend: ``tf.config.experimental.enable_tensor_float_32_execution``.

The switch lives in the core (``tapeflow.config``); this module applies it to the two
libraries the backend calls:

* **cuBLAS through CuPy** (``matmul``, ``tensordot``, ``einsum``, the im2col GEMMs):
  CuPy keeps a compute type per dtype class (``cupy._core.set_compute_type``, the
  mechanism behind its ``CUPY_TF32`` environment variable). TF32 on sets float32 (and
  complex64, which shares the slot) to ``COMPUTE_TYPE_TF32``; off sets
  ``COMPUTE_TYPE_DEFAULT`` (cuBLAS's pedantic-free default math, no TF32). tapeflow's
  switch wins over ``CUPY_TF32``. Applied when the kernel table is built and on every
  change afterwards (:func:`tapeflow.config.observe_tensor_float_32`); never imports CuPy.
* **cuDNN** (:mod:`.cudnn_conv`): read at call time; it is part of each graph's key and
  float32 graphs built with TF32 off exclude the engines with the ``TENSOR_CORE`` /
  ``DOWN_CONVERT_INPUTS`` numerical notes (:func:`excluded_notes`).
"""

from __future__ import annotations

import numpy as np

import tapeflow

#: CuPy's values (``cupy._core._routines_linalg``), used where the module lacks the names
_COMPUTE_TYPE_DEFAULT = 1
_COMPUTE_TYPE_TF32 = 7

#: what the last application did (for ``python -m tapeflow info`` and tests)
applied = {"cupy": None}


def enabled() -> bool:
    return tapeflow.config.tensor_float_32_execution_enabled()


def label(dtype=np.float32, tf32=None) -> str:
    """``"strict float32"`` / ``"TF32"`` for float32, the dtype's name otherwise."""
    dt = np.dtype(dtype)
    if dt != np.float32:
        return dt.name
    return "TF32" if (enabled() if tf32 is None else tf32) else "strict float32"


def excluded_notes(cudnn, dtype, tf32):
    """The cuDNN numerical notes whose engines a float32 graph must not use when TF32
    is off (tensor-core engines compute float32 convolutions in TF32)."""
    if np.dtype(dtype) != np.float32 or tf32:
        return []
    notes = cudnn.numerical_note
    return [getattr(notes, n) for n in ("TENSOR_CORE", "DOWN_CONVERT_INPUTS") if hasattr(notes, n)]


def apply_to_cupy(cp, on) -> str:
    """Set CuPy's cuBLAS compute type for float32/complex64; returns what it did."""
    core = getattr(cp, "_core", None)
    setter = getattr(core, "set_compute_type", None)
    if setter is None:
        applied["cupy"] = "not applied: this CuPy has no cupy._core.set_compute_type"
        return applied["cupy"]
    linalg = getattr(core, "_routines_linalg", None)
    value = (getattr(linalg, "COMPUTE_TYPE_TF32", _COMPUTE_TYPE_TF32) if on
             else getattr(linalg, "COMPUTE_TYPE_DEFAULT", _COMPUTE_TYPE_DEFAULT))
    try:
        setter(np.float32, value)
    except Exception as e:  # a precision switch must never break the backend
        applied["cupy"] = f"not applied: {type(e).__name__}: {e}"
        return applied["cupy"]
    applied["cupy"] = "TF32" if on else "strict float32"
    return applied["cupy"]


def install(cp) -> None:
    """Apply the switch to CuPy now and on every change (called when the table is built)."""
    tapeflow.config.observe_tensor_float_32(lambda on: apply_to_cupy(cp, on))
