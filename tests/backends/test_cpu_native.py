"""The CPU backend's native kernels (``tapeflow_cpu_numpy.native``, issue 48) against a
float64 NumPy reference and the NumPy (im2col) kernels, on random shapes: the
convolution (strides, asymmetric pads, dilations, 1-3 and 5-64 channels, odd sizes,
bias and each activation), its filter gradient and matmul with transposes, each
instruction-set variant this CPU has forced in turn, on 1 and 2 threads. Results never
share memory with the inputs, inputs are never written, and bad sizes and buffers are
refused with an error (never a crash), also by the C library's own checks.

The tolerance is the float32 error bound of a sum of products: |y - ref| <= 1e-5 *
sum |a| |b| (+ the bias), which every activation (Lipschitz 1) keeps.
"""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from tapeflow import errors
from tapeflow.kernels.nn import NNKernels
from tapeflow_cpu_numpy import native

try:                                    # the C library itself, for its own checks
    from tapeflow_cpu_numpy import _cpukernels as ck
except ImportError:
    ck = None

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"native CPU kernels not in use: {native.reason()}")

ACTS = [None, "Relu", "Relu6", "LeakyRelu", "Elu"]



def windows(x, kh, kw, strides, pads, dilations):
    """The padded input's windows (n, ho, wo, kh, kw, c), float64."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = strides, pads, dilations
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    ho = (xp.shape[1] - ((kh - 1) * dh + 1)) // sh + 1
    wo = (xp.shape[2] - ((kw - 1) * dw + 1)) // sw + 1
    out = np.empty(x.shape[:1] + (ho, wo, kh, kw, x.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, j] = xp[:, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                                    j * dw:j * dw + sw * (wo - 1) + 1:sw]
    return out


def act_ref(y, act, alpha):
    if act == "Relu":
        return np.maximum(y, 0)
    if act == "Relu6":
        return np.clip(y, 0, 6)
    if act == "LeakyRelu":
        return np.where(y < 0, alpha * y, y)
    if act == "Elu":
        return np.where(y < 0, np.expm1(y), y)
    return y


def conv_ref(x, w, strides, pads, dilations, bias=None, act=None, alpha=0.2):
    """(reference, error bound) in float64."""
    win = windows(x, w.shape[0], w.shape[1], strides, pads, dilations)
    y = np.einsum("nyxijc,ijco->nyxo", win, w.astype(np.float64))
    bound = np.einsum("nyxijc,ijco->nyxo", np.abs(win), np.abs(w.astype(np.float64)))
    if bias is not None:
        y = y + bias
        bound = bound + np.abs(bias)
    return act_ref(y, act, alpha), 1e-5 * bound + 1e-6


#: the first layers' cases, always checked: few channels, padded (a padded copy of the
#: input in the forward), 9 and 25 filter entries (6-row tiles in the filter gradient)
FIXED = [((2, 9, 11, 1), (3, 3, 1, 17), (1, 1), (1, 1, 1, 1), (1, 1)),
         ((1, 12, 10, 1), (5, 5, 1, 40), (1, 1), (2, 2, 2, 2), (1, 1)),
         ((2, 8, 7, 3), (3, 3, 3, 16), (2, 1), (0, 1, 1, 0), (1, 1))]


def random_conv(rng, big=False, trial=None):
    """(x, w, strides, pads, dilations) with a valid geometry (``big``: enough work to
    use both threads; ``trial`` < len(FIXED): that fixed case)."""
    if trial is not None and trial < len(FIXED):
        xs, ws, strides, pads, dil = FIXED[trial]
        return (rng.standard_normal(xs).astype(np.float32),
                rng.standard_normal(ws).astype(np.float32), strides, pads, dil)
    while True:
        c = int(rng.choice([1, 2, 3, 5, 7, 16, 33, 64]))
        o = int(rng.choice([1, 3, 5, 16, 17, 32, 40, 64]))
        kh, kw = (int(v) for v in rng.integers(1, 4, 2))
        strides = tuple(int(v) for v in rng.integers(1, 3, 2))
        dil = tuple(int(v) for v in rng.integers(1, 3, 2))
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        n = int(rng.integers(1, 4))
        h, wd = (int(v) for v in rng.integers(3, 12, 2))
        if big:
            n, h, wd, c, o, kh, kw = 2, 19, 17, max(c, 16), max(o, 32), 3, 3
        if (kh - 1) * dil[0] + 1 <= h + pads[0] + pads[1] and \
                (kw - 1) * dil[1] + 1 <= wd + pads[2] + pads[3]:
            x = rng.standard_normal((n, h, wd, c)).astype(np.float32)
            w = rng.standard_normal((kh, kw, c, o)).astype(np.float32)
            return x, w, strides, pads, dil


def test_conv2d_matches_the_float64_reference(variant):
    rng = np.random.default_rng(len(variant[0]) * 10 + variant[1])
    for trial in range(16):
        x, w, strides, pads, dil = random_conv(rng, big=trial >= 14, trial=trial)
        act = ACTS[trial % len(ACTS)]
        alpha = float(rng.uniform(0, 1))
        bias = rng.standard_normal(w.shape[3]).astype(np.float32) if trial % 3 else None
        x0, w0 = x.copy(), w.copy()
        y = native.conv2d(x, w, strides, pads, dil, bias=bias, act=act, alpha=alpha)
        ref, tol = conv_ref(x, w, strides, pads, dil, bias, act, alpha)
        assert y.dtype == np.float32 and y.flags.c_contiguous and y.shape == ref.shape
        err = np.abs(y - ref) - tol
        assert err.max() <= 0, (x.shape, w.shape, strides, pads, dil, act, err.max())
        assert not np.shares_memory(y, x) and not np.shares_memory(y, w)
        assert np.array_equal(x, x0) and np.array_equal(w, w0)


def test_conv2d_agrees_with_the_numpy_kernels():
    """The slow twin: NNKernels(numpy).conv2d (im2col + BLAS, or Winograd)."""
    rng = np.random.default_rng(3)
    nn = NNKernels(np)
    for _ in range(6):
        x, w, strides, pads, dil = random_conv(rng)
        y = native.conv2d(x, w, strides, pads, dil)
        want = nn.conv2d(x, w, strides, [(pads[0], pads[1]), (pads[2], pads[3])], "NHWC", dil)
        _, tol = conv_ref(x, w, strides, pads, dil)
        assert np.all(np.abs(y - want) <= 2 * tol)


def filter_grad_ref(x, dy, ksize, strides, pads, dilations):
    win = windows(x, ksize[0], ksize[1], strides, pads, dilations)
    d = dy.astype(np.float64)
    return (np.einsum("nyxijc,nyxo->ijco", win, d),
            1e-5 * np.einsum("nyxijc,nyxo->ijco", np.abs(win), np.abs(d)) + 1e-6)


def test_filter_gradient_matches_the_float64_reference(variant):
    rng = np.random.default_rng(7 + variant[1])
    nn = NNKernels(np)
    for trial in range(10):
        x, w, strides, pads, dil = random_conv(rng, big=trial >= 8, trial=trial)
        ho, wo = windows(x[:1, :, :, :1], w.shape[0], w.shape[1], strides, pads,
                         dil).shape[1:3]
        dy = rng.standard_normal((x.shape[0], ho, wo, w.shape[3])).astype(np.float32)
        x0, dy0 = x.copy(), dy.copy()
        got = native.conv2d_backprop_filter(x, dy, w.shape[:2], strides, pads, dil)
        ref, tol = filter_grad_ref(x, dy, w.shape[:2], strides, pads, dil)
        assert got.shape == w.shape and got.dtype == np.float32
        assert (np.abs(got - ref) - tol).max() <= 0, (x.shape, w.shape, strides, pads, dil)
        assert not np.shares_memory(got, x) and not np.shares_memory(got, dy)
        assert np.array_equal(x, x0) and np.array_equal(dy, dy0)
        if trial == 4:                       # and the NumPy kernels' answer
            want = nn.conv2d_backprop_filter(x, dy, w.shape, strides,
                                             [(pads[0], pads[1]), (pads[2], pads[3])],
                                             "NHWC", dil)
            assert np.all(np.abs(got - want) <= 2 * tol)


def test_matmul_with_transposes(variant):
    rng = np.random.default_rng(11 + variant[1])
    shapes = [(1, 1, 1), (5, 7, 3), (13, 40, 17), (64, 33, 20), (70, 300, 130), (9, 520, 48)]
    for m, k, n in shapes:
        for ta in (False, True):
            for tb in (False, True):
                a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
                b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
                a0, b0 = a.copy(), b.copy()
                got = native.matmul(a, b, ta, tb)
                a64 = (a.T if ta else a).astype(np.float64)
                b64 = (b.T if tb else b).astype(np.float64)
                tol = 1e-5 * (np.abs(a64) @ np.abs(b64)) + 1e-6
                assert got.shape == (m, n) and got.flags.c_contiguous
                assert np.all(np.abs(got - a64 @ b64) <= tol), (m, k, n, ta, tb)
                assert not np.shares_memory(got, a) and not np.shares_memory(got, b)
                assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_matmul_of_views():
    """F-contiguous operands are read as their transposes; strided views are copied."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((30, 50)).astype(np.float32)
    want = a.astype(np.float64) @ b
    for aa, bb, ta, tb in [(np.asfortranarray(a), b, False, False),
                           (a.T, np.asfortranarray(b), True, False),
                           (a, np.ascontiguousarray(b.T).T, False, False),
                           (np.repeat(a, 2, axis=1)[:, ::2], b[::1], False, False)]:
        got = native.matmul(aa, bb, ta, tb)
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4)
        assert not np.shares_memory(got, aa) and not np.shares_memory(got, bb)


def test_what_it_does_not_handle_is_none():
    x = np.ones((1, 4, 4, 2), np.float32)
    w = np.ones((3, 3, 2, 3), np.float32)
    assert native.conv2d(x.astype(np.float64), w, (1, 1), (0, 0, 0, 0), (1, 1)) is None
    assert native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1), act="Gelu") is None
    assert native.conv2d(x[:0], w, (1, 1), (0, 0, 0, 0), (1, 1)) is None
    assert native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1),
                         bias=np.ones(3, np.float64)) is None
    assert native.matmul(np.ones((2, 3)), np.ones((3, 2))) is None
    assert native.matmul(np.ones((2, 0), np.float32), np.ones((0, 2), np.float32)) is None
    assert native.conv2d_backprop_filter(x.astype(np.float16), x, (1, 1), (1, 1),
                                         (0, 0, 0, 0), (1, 1)) is None


@pytest.mark.parametrize("call", [
    lambda x, w: native.conv2d(x, w[:, :, :1], (1, 1), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x[0], w, (1, 1), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x, w, (0, 1), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, -1, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x, w, (1, True), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (9, 1)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1), bias=np.ones(4, np.float32)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1), act="Relu", alpha="a"),
    lambda x, w: native.conv2d(x, w, 1, (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d_backprop_filter(x, np.ones((1, 3, 3, 3), np.float32), (3, 3),
                                               (1, 1), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d_backprop_filter(x, np.ones((1, 2, 2, 3), np.float32), (9, 3),
                                               (1, 1), (0, 0, 0, 0), (1, 1)),
    lambda x, w: native.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)),
    lambda x, w: native.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32),
                               transpose_a=True),
    lambda x, w: native.matmul(np.ones((2, 3, 1), np.float32), np.ones((3, 2), np.float32)),
    lambda x, w: native.set_num_threads(0),
    lambda x, w: native.set_isa("sse9"),
])
def test_bad_input_is_an_error(call):
    x = np.ones((1, 4, 4, 2), np.float32)
    w = np.ones((3, 3, 2, 3), np.float32)
    with pytest.raises(errors.InvalidArgumentError):
        call(x, w)


def test_the_c_library_checks_its_buffers():
    """The C entry points refuse what native.py would never pass them (the last line:
    a wrong output shape, an output overlapping an input, a read-only output, another
    dtype, a non-contiguous array, not an array) with a ValueError, touching no memory."""
    x = np.ones((1, 4, 4, 2), np.float32)
    w = np.ones((3, 3, 2, 3), np.float32)
    args = (1, 1, 0, 0, 0, 0, 1, 1, 0, 0.0)
    ro = np.empty((1, 2, 2, 3), np.float32)
    ro.flags.writeable = False
    for bad in [np.empty((1, 3, 3, 3), np.float32), ro, np.empty((1, 2, 2, 3)),
                np.empty((1, 2, 4, 3), np.float32)[:, :, ::2], "out", None,
                np.empty((1, 2, 2, 0), np.float32)]:
        with pytest.raises(ValueError):
            ck.conv2d(x, w, None, bad, *args)
    with pytest.raises(ValueError):
        ck.conv2d(x, w.astype(np.float64), None, np.empty((1, 2, 2, 3), np.float32), *args)
    shared = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="shares memory"):
        ck.conv2d(shared[:32].reshape(1, 4, 4, 2), w, None, shared[20:32].reshape(1, 2, 2, 3),
                  *args)
    good = np.empty((1, 2, 2, 3), np.float32)
    with pytest.raises(ValueError):
        ck.conv2d(x, w, None, good, 1, 1, 0, 0, 0, 0, 1, 1, 9, 0.0)       # no such activation
    with pytest.raises(ValueError):
        ck.conv2d(x, w, None, good, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0.0)       # stride 0
    with pytest.raises(ValueError):
        ck.conv2d(x, w, np.ones(2, np.float32), good, *args)              # bias of 2 for 3
    with pytest.raises(ValueError):
        ck.matmul(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32),
                  np.empty((3, 3), np.float32), False, False)
    with pytest.raises(ValueError):
        ck.conv2d_backprop_filter(x, np.ones((1, 2, 2, 3), np.float32),
                                  np.empty((3, 3, 1, 3), np.float32), 1, 1, 0, 0, 0, 0, 1, 1)
    assert np.array_equal(x, np.ones_like(x)) and np.array_equal(w, np.ones_like(w))


BIG = native.LIMIT + 1          # over the C library's limit: the NumPy path's case


@pytest.mark.parametrize("call", [
    lambda x, w: native.conv2d(x, w, (BIG, BIG), (1, 1, 1, 1), (1, 1)),
    lambda x, w: native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 2 ** 40)),
    lambda x, w: native.conv2d(x, w, (1, 1), (BIG, 0, 0, 0), (1, 1)),
    lambda x, w: native.conv2d_backprop_filter(x, np.ones((1, 1, 1, 3), np.float32), (3, 3),
                                               (BIG, BIG), (1, 1, 1, 1), (1, 1)),
    lambda x, w: native.conv2d_backprop_filter(x, np.ones((1, 4, 4, 3), np.float32), (1, 1),
                                               (1, 1), (0, 0, 0, 0), (BIG, 1)),
    lambda x, w: native.max_pool(x, (2, 2), (BIG, 1), (0, 0, 0, 0)),
    lambda x, w: native.avg_pool(x, (2, 2), (1, BIG), (0, 0, 0, 0)),
    lambda x, w: native.max_pool_grad(x, np.ones((1, 1, 3, 2), np.float32),
                                      np.ones((1, 1, 3, 2), np.float32), (2, 2), (BIG, 1),
                                      (0, 0, 0, 0)),
    lambda x, w: native.avg_pool_grad(np.ones((1, 1, 3, 2), np.float32), (1, 4, 4, 2), (2, 2),
                                      (BIG, 1), (0, 0, 0, 0)),
    lambda x, w: native.avg_pool(x, (BIG, 2), (1, 1), (0, 0, 0, 0)),
])
def test_geometry_over_the_c_limit_falls_back(call):
    """A stride, pad, dilation or window over 2**24 (module.c GEOM_LIMIT) is valid
    TensorFlow: the library leaves it to the NumPy path (None), never an error."""
    assert call(np.ones((1, 4, 4, 2), np.float32), np.ones((3, 3, 2, 3), np.float32)) is None


def test_a_size_over_the_c_limit_falls_back_and_the_c_check_says_why():
    """An input taller than 2**24 (np.empty: its pages are never touched) falls back;
    the C library's own check names its limit (not "larger than the padded input")."""
    x = np.empty((1, BIG, 1, 1), np.float32)
    w = np.ones((3, 1, 1, 1), np.float32)
    assert native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1)) is None
    dy = np.empty((1, BIG - 2, 1, 1), np.float32)
    assert native.conv2d_backprop_filter(x, dy, (3, 1), (1, 1), (0, 0, 0, 0), (1, 1)) is None
    assert native.max_pool(x, (3, 1), (1, 1), (0, 0, 0, 0)) is None
    with pytest.raises(ValueError, match="limit of 16777216"):
        ck.conv2d(x, w, None, dy, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0.0)
    with pytest.raises(ValueError, match=r"2\*\*24"):
        ck.conv2d(x[:, :4], w, None, dy[:, :2], BIG, 1, 0, 0, 0, 0, 1, 1, 0, 0.0)


def test_threads_and_variants_are_settable():
    before = native.get_num_threads()
    native.set_num_threads(3)
    assert native.get_num_threads() == 3
    native.set_num_threads(before)
    assert native.isa() in native.isas() and native.isas()[-1] == "portable"
    current = native.isa()
    native.set_isa(None)
    assert native.isa() == native.isas()[0]
    native.set_isa(current)


def test_environment_switches():
    """TAPEFLOW_CPU_NATIVE=0 turns the library off with the reason; TAPEFLOW_CPU_ISA
    forces a variant at import."""
    code = ("from tapeflow_cpu_numpy import native as n; "
            "print(n.available(), n.isa(), repr(n.reason()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "TAPEFLOW_CPU_NATIVE": "0"},
                         check=True).stdout
    assert out.startswith("False") and "TAPEFLOW_CPU_NATIVE=0" in out
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "TAPEFLOW_CPU_ISA": "portable"},
                         check=True).stdout
    assert out.split()[:2] == ["True", "portable"]
    user = ("import warnings; warnings.simplefilter('always')\n"
            "import tapeflow_cpu_numpy.native\n")
    err = subprocess.run([sys.executable, "-c", user], capture_output=True, text=True,
                         env={**os.environ, "TAPEFLOW_CPU_ISA": "sse9"}, check=True).stderr
    # the warning names the variable and points at the user's import, not native.py
    assert "<string>:2: RuntimeWarning: the environment variable TAPEFLOW_CPU_ISA='sse9'" in err


def test_calls_from_two_python_threads_agree():
    """The kernels run without the GIL: two Python threads calling at once (the second
    finds the pool busy and runs on its own thread) both get the right answers."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 19, 17, 16)).astype(np.float32)
    w = rng.standard_normal((3, 3, 16, 32)).astype(np.float32)
    want = native.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1))
    results, before = [], native.get_num_threads()
    native.set_num_threads(2)

    def work():
        results.append(all(np.array_equal(native.conv2d(x, w, (1, 1), (1, 1, 1, 1), (1, 1)),
                                          want) for _ in range(20)))
    try:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        native.set_num_threads(before)
    assert results == [True, True]


CHILD = """
import os, sys
import numpy as np
from tapeflow_cpu_numpy import native
native.set_num_threads(2)
x = np.ones((2, 19, 17, 16), np.float32)
w = np.ones((3, 3, 16, 32), np.float32)
y = native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1))      # the pool is running
pid = os.fork()
if pid == 0:      # the child re-creates the pool (the parent's workers are not here)
    z = native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1))
    os._exit(0 if np.array_equal(y, z) and float(z.flat[0]) == 144.0 else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
assert np.array_equal(native.conv2d(x, w, (1, 1), (0, 0, 0, 0), (1, 1)), y)
print("ok")       # and the interpreter's exit joins the workers
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_the_pool_survives_fork_and_exit():
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
