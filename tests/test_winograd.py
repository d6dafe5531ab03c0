"""The CPU convolution's Winograd path and the epilogue hook of ``_conv_nhwc``.

``NNKernels._conv_nhwc(..., epilogue=f)`` calls ``f`` on each contiguous NHWC output
block right after its GEMM (the fused convolution's bias/activation runs while the
block is in cache) and on the whole output of the paths that have no blocks.
"""

import numpy as np
import pytest

from tapeflow.kernels import nn as nn_kernels


def conv_ref(x, w, pads):
    """float64 NHWC cross-correlation, stride 1, ``pads`` = (top, bottom, left, right)."""
    pt, pb, pl, pr = pads
    kh, kw, _, o = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho, wo = xp.shape[1] - kh + 1, xp.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo, o))
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + ho, j:j + wo] @ w[i, j].astype(np.float64)
    return out


def test_epilogue_runs_on_each_contiguous_output_block(monkeypatch):
    # 3 KiB of columns: 2 images of 5x5x(3*3*2) float32 per block, 5 images -> 3 blocks
    monkeypatch.setattr(nn_kernels, "COLS_BYTES", 3 << 10)
    k = nn_kernels.NNKernels(np)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    seen = []

    def relu_in_place(block):
        assert block.flags.c_contiguous and block.shape[1:] == (5, 5, 4)
        seen.append(block.shape[0])
        np.maximum(block, 0, out=block)

    out = k._conv_nhwc(x, w, (1, 1), "SAME", (1, 1), epilogue=relu_in_place)
    assert len(seen) > 1 and sum(seen) == 5
    ref = np.maximum(conv_ref(x, w, (1, 1, 1, 1)), 0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    plain = k._conv_nhwc(x, w, (1, 1), "SAME", (1, 1))
    np.testing.assert_allclose(plain, conv_ref(x, w, (1, 1, 1, 1)), rtol=1e-5, atol=1e-5)
