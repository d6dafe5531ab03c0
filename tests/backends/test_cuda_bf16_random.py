"""The CUDA backend's bfloat16 ``StatelessRandomUniformV2`` (its bfloat16 wrapper run on
NumPy: CuPy's array API is the same): the draws TensorFlow's bfloat16 uniform gives, which
the NumPy backend gives, not the float32 draw rounded (an H200 run of the conformance suite
found the difference; docs/gpu-runs/2026-11-30-h200)."""

import numpy as np
import pytest

from tapeflow import dtypes
from tapeflow.kernels.random import RandomKernels

bf16 = pytest.importorskip("tapeflow_cuda_cupy.bf16")


@pytest.mark.parametrize("shape", [(5, 3), (1000,), (0,)])
@pytest.mark.parametrize("seed", [0, 12345, 2**62 + 7])
def test_bfloat16_uniform_matches_the_numpy_backend(shape, seed):
    k = RandomKernels(np)
    kernel = bf16.wrap("StatelessRandomUniformV2", k.stateless_uniform, np,
                       ("bfloat16", "float16", "float32", "float64"))
    state = np.array([seed, 678, 9], dtype=np.uint64)
    got = kernel(state, shape, dtype=dtypes.bfloat16)
    assert type(got) is bf16.BF16Array
    values = bf16.bits_to_float32(np, got.bits)
    expected = k.stateless_uniform(state, shape, dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(values, expected)
    assert values.size == 0 or values.max() < 1.0
    # other dtypes pass through untouched
    np.testing.assert_array_equal(kernel(state, shape, dtype=dtypes.float32),
                                  k.stateless_uniform(state, shape, dtypes.float32))
