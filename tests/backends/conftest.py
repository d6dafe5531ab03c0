"""The fake CuPy used by test_cuda.py must not be imported as `cupy` by doctest collection."""

collect_ignore = ["fake_cupy"]
