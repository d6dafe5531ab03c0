"""tf.random.Generator and the stateless ops: TensorFlow 2's Philox4x32-10 numbers, the
same on every backend, a state that advances in tf.function and checkpoints.

The reference values below are TensorFlow 2.21's output (CPU, Linux) for the same
calls, printed by TensorFlow itself: a reference to match, not tapeflow's own result.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tracemalloc

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, InvalidTypeError, UnimplementedError
from tapeflow.kernels.random import RandomKernels, philox_words

OPENCL = [d.name for d in tf.list_devices() if d.type == "opencl"][:1]


def _np(x):
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


# --- TensorFlow 2.21's numbers ------------------------------------------------------------

def test_generator_from_seed_matches_tensorflow():
    g = tf.random.Generator.from_seed(1)
    assert _np(g.state).tolist() == [1, 0, 0]
    # TensorFlow 2.21: Generator.from_seed(1).normal([2, 3])
    np.testing.assert_array_equal(_np(g.normal([2, 3])), np.float32(
        [[0.43842274, -0.53439844, -0.07710262], [1.5658046, -0.1012345, -0.2744976]]))
    assert _np(g.state).tolist() == [1537, 0, 0]          # TF: 256 per value drawn
    g = tf.random.Generator.from_seed(1234)
    np.testing.assert_array_equal(_np(g.normal([2, 3])), np.float32(
        [[0.9356609, 1.0854305, -0.93788373], [-0.5061547, 1.3169702, 0.7137579]]))
    assert _np(g.state).tolist() == [2770, 0, 0]
    np.testing.assert_array_equal(_np(g.uniform([3], minval=2., maxval=5.)),
                                  np.float32([3.953784, 4.7887716, 3.5262017]))
    np.testing.assert_array_equal(_np(g.uniform([4], minval=-3, maxval=9, dtype=tf.int64)),
                                  [-3, 2, -2, 3])
    full = g.uniform_full_int([3])
    assert full.dtype == tf.uint64
    assert _np(full).tolist() == [13550080746247647081, 12595002055440747698,
                                  15859094415861869136]
    np.testing.assert_array_equal(
        _np(g.truncated_normal([3], mean=2, stddev=0.5, dtype=tf.float64)),
        [1.6891108210758365, 2.375038801931171, 1.8165640176538609])
    assert _np(g.state).tolist() == [6098, 0, 0]
    parts = g.split(2)
    assert [_np(p.state).tolist() for p in parts] == [[0, 0, 5796473010014489708],
                                                      [0, 0, -8160839781151359880]]
    np.testing.assert_array_equal(_np(parts[1].normal([3])),
                                  np.float32([0.9222473, 0.19467843, -0.37798247]))


def test_stateless_ops_match_tensorflow():
    # TensorFlow 2.21: tf.random.stateless_*(..., seed=[1, 2])
    np.testing.assert_array_equal(
        _np(tf.random.stateless_normal([2, 3], seed=[1, 2])),
        np.float32([[0.5441101, 0.20738031, 0.07356432], [0.04643455, -1.3015898, -0.9538565]]))
    np.testing.assert_array_equal(
        _np(tf.random.stateless_uniform([5], seed=[1, 2], minval=-2., maxval=3.)),
        np.float32([2.220302, -1.0397733, 2.9811163, -1.198063, -0.6400491]))
    np.testing.assert_array_equal(
        _np(tf.random.stateless_uniform([5], seed=[1, 2], minval=-2., maxval=3.,
                                        dtype=tf.float16)),
        np.float16([0.71484375, -0.8232422, -1.6972656, 2.46875, -1.2822266]))
    np.testing.assert_array_equal(
        _np(tf.random.stateless_truncated_normal([5], seed=[1, 2], mean=1., stddev=3.)),
        np.float32([2.6323304, 1.6221409, 1.220693, 1.1393037, 1.5046177]))
    np.testing.assert_array_equal(
        _np(tf.random.stateless_uniform([5], seed=[1, 2], minval=3, maxval=99,
                                        dtype=tf.int32)), [79, 20, 33, 54, 22])
    assert _np(tf.random.stateless_uniform([3], seed=[1, 2], minval=None, maxval=None,
                                           dtype=tf.int64)).tolist() == [
        7464880146280614444, 1591045637757961278, -1057468755545501549]
    split = tf.random.experimental.stateless_split([1, 2], 3)
    assert split.dtype == tf.int32 and _np(split).tolist() == [
        [1105988140, 1738052849], [-335576002, 370444179], [10670227, -246211131]]
    assert _np(tf.random.experimental.stateless_fold_in([1, 2], 7)).tolist() == [1105988140, 7]
    logits = tf.math.log([[0.5, 0.5], [0.1, 0.9]])
    assert _np(tf.random.stateless_categorical(logits, 5, seed=[7, 17])).tolist() == [
        [1, 0, 1, 0, 0], [1, 1, 1, 1, 0]]


def test_raw_states_match_tensorflow_for_every_dtype():
    """TensorFlow 2.21's StatelessRandom*V2 on the state [257, 0, 0] (shape [5]: a block
    and a piece of the next)."""
    k, st = RandomKernels(np), np.array([257, 0, 0])
    np.testing.assert_array_equal(k.stateless_uniform(st, (5,), tf.float64), [
        0.1268348456285029, 0.8088745418549084, 0.5871571018109492, 0.5257018698893665,
        0.9197860457162568])
    np.testing.assert_array_equal(k.stateless_normal(st, (5,), tf.float64), [
        -1.8947122087655655, 0.7347139442168626, -0.16592619348329557, -1.0185255117154906,
        0.14666319484373716])
    np.testing.assert_array_equal(k.stateless_normal(st, (5,), tf.float16), np.float16(
        [1.626953125, 0.0413818359375, -0.1041259765625, 0.79345703125, -2.27734375]))
    np.testing.assert_array_equal(
        k.stateless_truncated_normal(st, (5,), tf.bfloat16).astype(np.float32),
        [1.625, 0.041259765625, -0.10400390625, 0.79296875, 1.6328125])
    np.testing.assert_array_equal(k.stateless_uniform_int(st, (5,), tf.int64, -3, 1000),
                                  [696, 892, 601, 882, 837])


def test_create_rng_state_and_constructors():
    assert _np(tf.random.create_rng_state(1234, "philox")).tolist() == [1234, 0, 0]
    assert _np(tf.random.create_rng_state(2**70 + 5, "philox")).tolist() == [5, 64, 0]
    assert _np(tf.random.create_rng_state([3, 4], "philox")).tolist() == [0, 3, 4]
    g = tf.random.Generator.from_key_counter(5, [1, 2], "philox")
    assert _np(g.state).tolist() == [1, 2, 5] and int(g.key) == 5 and g.algorithm == 1
    h = tf.random.Generator.from_state(g.state, tf.random.Algorithm.PHILOX)
    assert h.state is g.state
    a, b = tf.random.Generator.from_non_deterministic_state(), \
        tf.random.Generator.from_non_deterministic_state()
    assert _np(a.state).tolist() != _np(b.state).tolist()
    assert tf.random.experimental.Generator is tf.random.Generator
    g.reset([0, 0, 9])
    assert _np(g.state).tolist() == [0, 0, 9]
    g.reset_from_key_counter(3, [4, 5])
    assert _np(g.state).tolist() == [4, 5, 3]


def test_counter_carries_into_the_high_word():
    g = tf.random.Generator.from_key_counter(0, [-1, 5], "philox")     # low word 2**64 - 1
    assert _np(g.skip(1)).tolist() == [-1, 5, 0]
    assert _np(g.state).tolist() == [255, 6, 0]
    # blocks that cross the carry: the same words as counting from the next high word
    words = philox_words(np, np.array([-1, 5, 0]), np.arange(2, dtype=np.uint64))
    np.testing.assert_array_equal(words[1], philox_words(np, np.array([0, 6, 0]),
                                                         np.zeros(1, np.uint64))[0])


def test_values_depend_on_their_index_only():
    """Odd sizes split Philox's 4-word blocks: a shorter draw is a prefix of a longer one
    (TensorFlow's grouping), for every distribution."""
    for fn in (tf.random.stateless_normal, tf.random.stateless_truncated_normal,
               tf.random.stateless_uniform):
        for dt in (tf.float32, tf.float64):
            long = _np(fn([9], seed=[4, 5], dtype=dt))
            for n in (1, 3, 5):
                np.testing.assert_array_equal(_np(fn([n], seed=[4, 5], dtype=dt)), long[:n])


def test_reset_and_global_generator():
    g = tf.random.Generator.from_seed(1)
    a = _np(g.normal([]))
    g.normal([])
    g.reset_from_seed(1)
    assert _np(g.normal([])) == a
    mine = tf.random.Generator.from_seed(3)
    old = tf.random.get_global_generator()
    try:
        tf.random.set_global_generator(mine)
        assert tf.random.get_global_generator() is mine
        assert tf.random.experimental.get_global_generator() is mine
    finally:
        tf.random.set_global_generator(old)


# --- tf.function, checkpoints, vectorized_map ----------------------------------------------

def test_a_captured_generator_advances_in_tf_function():
    g = tf.random.Generator.from_seed(1)

    @tf.function
    def draw():
        return g.normal([])

    eager = tf.random.Generator.from_seed(1)
    for _ in range(3):
        assert _np(draw()) == _np(eager.normal([]))
    assert _np(g.state).tolist() == [769, 0, 0]


def test_a_generator_argument_traces_once_per_generator():
    traces = []

    @tf.function
    def draw(gen):
        traces.append(1)
        return gen.normal([])

    g1, g2 = tf.random.Generator.from_seed(1), tf.random.Generator.from_seed(2)
    draw(g1)
    draw(g2)
    second = draw(g1)
    assert len(traces) == 2
    eager = tf.random.Generator.from_seed(1)
    eager.normal([])
    assert _np(second) == _np(eager.normal([])) == np.float32(1.6272374)   # (TensorFlow's)


def test_tf_function_carries_the_counter_and_seeds_from_tensors():
    g = tf.random.Generator.from_key_counter(0, [-256, 0], "philox")

    @tf.function
    def step(seed):
        return g.skip(1), tf.random.stateless_normal([2], seed=seed)

    step(tf.constant([1, 2]))
    _, z = step(tf.constant([1, 2]))
    assert _np(g.state).tolist() == [256, 1, 0]
    np.testing.assert_array_equal(_np(z), _np(tf.random.stateless_normal([2], seed=[1, 2])))


def test_checkpoint_restores_the_stream(tmp_path):
    g = tf.random.Generator.from_seed(1)
    ckpt = tf.train.Checkpoint(generator=g)
    g.normal([])
    path = ckpt.write(str(tmp_path / "rng"))
    after = [_np(g.normal([])) for _ in range(2)]
    ckpt.restore(path)
    assert [_np(g.normal([])) for _ in range(2)] == after
    other = tf.random.Generator.from_seed(99)
    tf.train.Checkpoint(generator=other).restore(path)
    assert _np(other.normal([])) == after[0]


def test_vectorized_map_over_seeds_is_a_loop():
    seeds = tf.constant([[1, 2], [3, 4], [5, 6]], dtype=tf.int64)
    got = tf.vectorized_map(lambda s: tf.random.stateless_normal([3], seed=s), seeds)
    want = np.stack([_np(tf.random.stateless_normal([3], seed=s)) for s in _np(seeds)])
    np.testing.assert_array_equal(_np(got), want)


# --- the same numbers on every backend -----------------------------------------------------

@pytest.mark.parametrize("dev", OPENCL)
def test_same_numbers_on_cpu_and_opencl(dev):
    def draws():
        g = tf.random.Generator.from_seed(11)
        return [g.uniform([7]), g.uniform([5], minval=-4, maxval=40, dtype=tf.int32),
                g.uniform_full_int([3], dtype=tf.int64), g.normal([9]), g.truncated_normal([6]),
                tf.random.stateless_uniform([5], seed=[1, 2], dtype=tf.float64),
                tf.random.stateless_normal([7], seed=[1, 2], dtype=tf.float64),
                tf.random.stateless_truncated_normal([5], seed=[3, 4]),
                tf.random.stateless_categorical([[0.1, 0.5, 2.0]], 6, seed=[5, 6]),
                g.state.read_value()]

    with tf.device("cpu:0"):
        cpu = [_np(t) for t in draws()]
    with tf.device(dev):
        out = draws()
        assert out[0].device == dev
        dev_vals = [_np(t) for t in out]
    for a, b in zip(cpu, dev_vals):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind == "f":      # log/sin/cos are the device's: the last bits may differ
            np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(dev_vals[0], cpu[0])        # uniforms: bit for bit


def _compiler():
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


@pytest.mark.skipif(_compiler() is None, reason="no C++ compiler to run the CUDA source")
def test_cuda_philox_kernel_source_gives_the_numpy_words(tmp_path):
    """The CUDA backend's Philox4x32-10 kernel (its exact source), compiled for the host
    with the CUDA built-ins it uses defined sequentially, gives the NumPy kernel's words."""
    philox = pytest.importorskip("tapeflow_cuda_cupy.philox")
    prelude = r"""
#include <cstdint>
struct d3 { unsigned x = 0; }; static d3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __restrict__
static inline unsigned __umulhi(unsigned a, unsigned b) {
    return (unsigned)(((unsigned long long)a * b) >> 32); }
"""
    api = r"""
extern "C" void run(const long long* st, const unsigned long long* b, unsigned* out,
                    long long nb, long long total) {
    blockDim.x = 3; gridDim.x = 2;        // a grid-stride loop over 6 threads
    for (unsigned bl = 0; bl < 2; ++bl) for (unsigned t = 0; t < 3; ++t) {
        blockIdx.x = bl; threadIdx.x = t; tapeflow_philox4x32_10(st, b, out, nb, total); }
}
"""
    src = tmp_path / "philox.cpp"
    src.write_text(prelude + philox.PHILOX4X32_SOURCE + api)
    lib = tmp_path / "philox.so"
    subprocess.run([_compiler(), "-O1", "-shared", "-fPIC", str(src), "-o", str(lib)],
                   check=True, capture_output=True, timeout=120)
    run = ctypes.CDLL(str(lib)).run
    states = np.array([[-1, 5, 123456789], [7, 0, -3]], np.int64)
    blocks = np.array([0, 1, 2, 300, 2**40], np.uint64)
    out = np.zeros(states.shape[0] * blocks.size * 4, np.uint32)
    run(states.ctypes.data_as(ctypes.c_void_p), blocks.ctypes.data_as(ctypes.c_void_p),
        out.ctypes.data_as(ctypes.c_void_p), ctypes.c_longlong(blocks.size),
        ctypes.c_longlong(states.shape[0] * blocks.size))
    want = philox_words(np, states, blocks)
    np.testing.assert_array_equal(out.reshape(want.shape), want)


# --- errors ------------------------------------------------------------------------------

def test_errors_name_the_function_and_what_to_do():
    with pytest.raises(InvalidArgumentError, match="seed must be"):
        tf.random.stateless_normal([2], seed=[1, 2, 3])
    with pytest.raises(InvalidTypeError, match="seed must be"):
        tf.random.stateless_normal([2], seed="abc")
    with pytest.raises(UnimplementedError, match="ThreeFry"):
        tf.random.stateless_normal([2], seed=[1, 2], alg="threefry")
    with pytest.raises(InvalidArgumentError, match="unknown RNG algorithm"):
        tf.random.Generator.from_seed(1, alg="mersenne")
    g = tf.random.Generator.from_seed(1, alg="threefry")
    with pytest.raises(UnimplementedError, match="ThreeFry"):
        g.normal([2])
    g = tf.random.Generator.from_seed(1)
    with pytest.raises(InvalidArgumentError, match="maxval"):
        g.uniform([2], dtype=tf.int32)
    with pytest.raises(InvalidArgumentError, match="floating"):
        g.normal([2], dtype=tf.int32)
    with pytest.raises(InvalidArgumentError, match="shape \\[3\\]"):
        tf.random.Generator(state=[1, 2], alg="philox")
    with pytest.raises(UnimplementedError, match="binomial"):
        g.binomial([2], counts=[10.], probs=[0.5])
    with pytest.raises(InvalidArgumentError, match="minval < maxval"):
        tf.random.stateless_uniform([2], seed=[1, 2], minval=5, maxval=5, dtype=tf.int32)
    with pytest.raises(InvalidTypeError, match="Generator"):
        tf.random.set_global_generator("not a generator")
    assert _np(g.state).tolist() == [1, 0, 0]       # failed draws leave the state alone


def test_saved_model_keeps_the_generator_state(tmp_path):
    class Sampler(tf.Module):
        def __init__(self):
            super().__init__()
            self.g = tf.random.Generator.from_seed(0)

        @tf.function
        def __call__(self):
            return self.g.normal([])

    m = Sampler()
    m()
    tf.saved_model.save(m, str(tmp_path / "sampler"))
    want = [_np(m()) for _ in range(2)]
    loaded = tf.saved_model.load(str(tmp_path / "sampler"))
    assert [_np(loaded()) for _ in range(2)] == want
    # TensorFlow 2.21: the 2nd and 3rd draws of Generator.from_seed(0)
    assert want == [np.float32(-1.0359411), np.float32(-0.064250775)]


# --- a draw that fails leaves the state as it was; categorical's size and errors -----------

@pytest.mark.parametrize("draw", [
    lambda g: g.normal([10 ** 6, 10 ** 6]),                       # too large: refused up front
    lambda g: g.uniform([10 ** 6, 10 ** 6], maxval=3, dtype=tf.int64),
    lambda g: g.uniform_full_int([10 ** 7, 10 ** 6]),
    lambda g: g.uniform([3], minval=tf.constant([1., 2.]), maxval=5.),   # no broadcast
    lambda g: g.normal([2], mean=tf.zeros([5])),
    lambda g: g.truncated_normal([2, 3], stddev=tf.ones([4, 1, 2])),
])
def test_a_failed_draw_does_not_advance_the_generator(draw):
    g = tf.random.Generator.from_seed(1)
    with pytest.raises((InvalidArgumentError, tf.errors.ResourceExhaustedError)):
        draw(g)
    assert _np(g.state).tolist() == [1, 0, 0]
    # parameters that broadcast still draw (the result takes their shape), and advance
    assert g.normal([2], mean=tf.zeros([3, 1])).shape == (3, 2)
    assert _np(g.state).tolist() == [513, 0, 0]


def test_a_failed_draw_in_tf_function_does_not_advance_the_generator():
    g = tf.random.Generator.from_seed(1)

    @tf.function
    def f(m):
        return g.normal([2], mean=m)

    with pytest.raises(InvalidArgumentError, match="does not broadcast"):
        f(tf.zeros([5]))
    assert _np(g.state).tolist() == [1, 0, 0]
    f(tf.zeros([2]))
    assert _np(g.state).tolist() == [513, 0, 0]


def test_stateless_categorical_counts_without_a_classes_by_samples_tensor():
    # TensorFlow 2.21: stateless_categorical(log([[.1, .2, .3, .4], [.5, 0, 0, .5]]), 12,
    # seed=[7, 8]) (zero-probability classes: ties in the cdf)
    logits = np.log(np.float32([[0.1, 0.2, 0.3, 0.4], [0.5, 1e-45, 1e-45, 0.5]]))
    logits[1, 1:3] = -np.inf
    assert _np(tf.random.stateless_categorical(logits, 12, seed=[7, 8])).tolist() == [
        [2, 2, 3, 1, 1, 0, 3, 2, 1, 2, 0, 1], [3, 3, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0]]
    # memory O(batch (classes + samples)): [2, 2000] x 2000 draws without the
    # [2, 2000, 2000] comparison (8 MB of booleans, 64 MB counted in int64)
    tf.random.stateless_categorical(tf.zeros([2, 3]), 3, seed=[1, 2])     # (warm up)
    tracemalloc.start()
    try:
        s = _np(tf.random.stateless_categorical(tf.zeros([2, 2000]), 2000, seed=[1, 2]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert s.shape == (2, 2000) and 0 <= s.min() and s.max() < 2000
    assert len(np.unique(s)) > 1000                                   # spread over classes


def test_stateless_categorical_refuses_zero_classes():
    with pytest.raises(InvalidArgumentError, match="num_classes should be positive, got 0"):
        tf.random.stateless_categorical(tf.zeros([2, 0]), 3, seed=[1, 2])
    with pytest.raises(InvalidArgumentError, match="num_samples"):
        tf.random.stateless_categorical(tf.zeros([2, 3]), -1, seed=[1, 2])


class _Service:
    """A stand-in for the CUDA backend's ``philox32`` kernel that raises ``error``."""

    def __init__(self, error, kernel_failed=None):
        self.error, self.calls = error, 0
        if kernel_failed is not None:
            self.kernel_failed = kernel_failed

    def __call__(self, state, blocks):
        self.calls += 1
        raise self.error


def test_philox_kernel_is_kept_after_an_out_of_memory_error():
    from tapeflow_cuda_cupy.philox import kernel_failed
    state, blocks = np.array([1, 2, 3]), np.arange(2, dtype=np.uint64)
    oom = type("OutOfMemoryError", (MemoryError,), {})("Out of memory allocating 512 bytes")
    k = RandomKernels(np, philox32=_Service(oom, kernel_failed))
    with pytest.raises(MemoryError):
        k.block_words(state, blocks)
    assert k.philox32 is not None                       # transient: the kernel stays
    driver_oom = type("CUDADriverError", (RuntimeError,), {})("CUDA_ERROR_OUT_OF_MEMORY")
    k = RandomKernels(np, philox32=_Service(driver_oom, kernel_failed))
    with pytest.raises(RuntimeError):
        k.block_words(state, blocks)
    assert k.philox32 is not None
    # a compile failure of the kernel itself: the same words from the array rounds, for good
    compile_error = type("CompileException", (Exception,), {})("nvrtc: error: bad option")
    k = RandomKernels(np, philox32=_Service(compile_error, kernel_failed))
    np.testing.assert_array_equal(k.block_words(state, blocks),
                                  philox_words(np, state, blocks))
    assert k.philox32 is None
    assert not kernel_failed(ValueError("a bug")) and kernel_failed(
        type("NVRTCError", (Exception,), {})("NVRTC_ERROR_COMPILATION"))
