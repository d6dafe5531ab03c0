"""The native NHWC pooling (``tapeflow_cpu_numpy.native.max_pool``, ``max_pool_grad``,
``avg_pool``, ``avg_pool_grad``; ``_c/pooling.c``) against tapeflow's NumPy kernels
(``NNKernels``), which define the semantics: the maximum's padding is -inf, its gradient
goes to each window's FIRST maximum (row-major window order, padding included), the
average divides by the count of valid elements.

Random shapes (windows 1-3, strides 1-3, VALID and SAME, odd sizes, 1-3 and 5-64
channels), integer-valued inputs so that windows hold their maximum more than once (the
tie rule), NaN and -inf windows, each ISA variant forced, on 1 and 2 threads (with shapes
large enough for the library to use its threads, and for it to split the channels of
few images). The maximum and its gradient (of integer dy), and the average, are bitwise
NumPy's; the average's gradient adds overlapping windows' shares in another order (a few
ulps). Then through the public API: ``tf.nn.max_pool2d``/``avg_pool2d`` and their
gradients with the native kernels in use and with ``plugin.use_native(False)``.
"""

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.kernels.nn import NNKernels, window_geometry
from tapeflow_cpu_numpy import native, plugin

try:                                    # the C library itself, for its own checks
    from tapeflow_cpu_numpy import _cpukernels as ck
except ImportError:
    ck = None

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"native CPU kernels not in use: {native.reason()}")

K = NNKernels(np)       # the NumPy kernels (no native service)



def pads_of(shape, ksize, strides, padding):
    """(ho, wo, (pt, pb, pl, pr)) as the NumPy kernels compute them."""
    ho, pt, pb = window_geometry(shape[1], ksize[0], strides[0], 1, padding, 0)
    wo, pl, pr = window_geometry(shape[2], ksize[1], strides[1], 1, padding, 1)
    return ho, wo, (pt, pb, pl, pr)


def cases(rng, count):
    """Random (x shape, ksize, strides, padding) with a non-empty output, then shapes
    large enough for the library's threads (pooling.c SERIAL_ELEMS_*: the gradients of
    many images; of one image of 64 channels, split into channel chunks; the forward
    ops)."""
    out = []
    while len(out) < count:
        c = int(rng.integers(1, 4)) if rng.random() < 0.4 else int(rng.integers(5, 65))
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 10)), int(rng.integers(1, 10)), c)
        ksize = tuple(int(v) for v in rng.integers(1, 4, 2))
        strides = tuple(int(v) for v in rng.integers(1, 4, 2))
        padding = str(rng.choice(["SAME", "VALID"]))
        ho, wo, _ = pads_of(shape, ksize, strides, padding)
        if ho > 0 and wo > 0:
            out.append((shape, ksize, strides, padding))
    return out + [((9, 21, 19, 37), (3, 3), (2, 2), "SAME"),
                  ((1, 40, 30, 64), (3, 2), (1, 2), "SAME"),
                  ((2, 48, 47, 40), (3, 3), (1, 1), "SAME")]


def check_all(x, dy_int, ksize, strides, padding):
    """The four native functions against the NumPy kernels on the NHWC ``x``."""
    _, _, pads = pads_of(x.shape, ksize, strides, padding)
    y0 = K.max_pool(x, ksize, strides, padding, "NHWC")
    y1 = native.max_pool(x, ksize, strides, pads)
    np.testing.assert_array_equal(y1, y0)
    dy = dy_int(y0.shape)
    g0 = K.max_pool_grad(x, y0, dy, ksize, strides, padding, "NHWC")
    g1 = native.max_pool_grad(x, y0, dy, ksize, strides, pads)
    np.testing.assert_array_equal(g1, g0)
    a0 = K.avg_pool(x, ksize, strides, padding, "NHWC")
    a1 = native.avg_pool(x, ksize, strides, pads)
    np.testing.assert_array_equal(a1, a0)
    b0 = K.avg_pool_grad(dy, x.shape, ksize, strides, padding, "NHWC")
    b1 = native.avg_pool_grad(dy, x.shape, ksize, strides, pads)
    np.testing.assert_allclose(b1, b0, rtol=2e-6, atol=1e-6)
    for r in (y1, g1, a1, b1):
        assert r.dtype == np.float32 and r.flags.c_contiguous
        assert not any(np.shares_memory(r, a) for a in (x, y0, dy))


def test_matches_the_numpy_kernels_with_ties(variant):
    rng = np.random.default_rng(48)
    for shape, ksize, strides, padding in cases(rng, 24):
        x = rng.integers(-3, 3, shape).astype(np.float32)      # many equal maxima
        before = x.copy()
        check_all(x, lambda s: rng.integers(-4, 5, s).astype(np.float32), ksize, strides,
                  padding)
        np.testing.assert_array_equal(x, before)               # inputs untouched


def test_matches_the_numpy_kernels_on_random_floats(variant):
    rng = np.random.default_rng(7)
    for shape, ksize, strides, padding in cases(rng, 8):
        x = rng.standard_normal(shape).astype(np.float32)
        _, _, pads = pads_of(shape, ksize, strides, padding)
        y0 = K.max_pool(x, ksize, strides, padding, "NHWC")
        np.testing.assert_array_equal(native.max_pool(x, ksize, strides, pads), y0)
        dy = rng.standard_normal(y0.shape).astype(np.float32)
        np.testing.assert_allclose(native.max_pool_grad(x, y0, dy, ksize, strides, pads),
                                   K.max_pool_grad(x, y0, dy, ksize, strides, padding, "NHWC"),
                                   rtol=2e-6, atol=1e-6)


def test_nan_and_infinite_windows(variant):
    """A NaN makes the window's maximum NaN and routes no gradient; a window of -inf
    whose first position is padding routes its gradient into the padding (dropped), as
    the NumPy kernel's padded compare does; +inf wins."""
    rng = np.random.default_rng(3)
    for c in (3, 16, 21):
        x = rng.integers(-2, 3, (2, 5, 6, c)).astype(np.float32)
        x[0, 0, 0, :2] = np.nan
        x[0, 2:4, 2:5, 1:] = -np.inf
        x[1, :, :, 0] = -np.inf
        x[1, 3, 4, -1] = np.inf
        for ksize, strides, padding in (((2, 2), (2, 2), "SAME"), ((3, 3), (1, 1), "SAME"),
                                        ((3, 2), (2, 1), "VALID")):
            check_all(x, lambda s: rng.integers(-4, 5, s).astype(np.float32), ksize, strides,
                      padding)


def test_views_and_nchw_layouts_are_copied_not_refused():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 7, 5)).astype(np.float32)
    view = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)  # nhwc()
    assert not view.flags.c_contiguous
    y = native.max_pool(x[:, ::-1], (2, 2), (1, 1), (0, 1, 0, 1))
    np.testing.assert_array_equal(y, K.max_pool(x[:, ::-1], (2, 2), (1, 1), "SAME", "NHWC"))
    _, _, pads = pads_of(x.shape, (3, 3), (2, 2), "SAME")
    np.testing.assert_array_equal(native.avg_pool(view, (3, 3), (2, 2), pads),
                                  K.avg_pool(x, (3, 3), (2, 2), "SAME", "NHWC"))


def test_what_it_does_not_handle_is_none():
    x = np.ones((1, 4, 4, 2), np.float32)
    y = np.ones((1, 2, 2, 2), np.float32)
    assert native.max_pool(x.astype(np.float64), (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.max_pool(x.astype(np.int32), (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.max_pool(x[:0], (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.max_pool(x, (2, 2), (2, 2), (2, 0, 0, 0)) is None     # pad >= window
    assert native.max_pool(x, (5, 1), (1, 1), (0, 0, 0, 0)) is None     # empty output
    assert native.avg_pool(x.astype(np.float16), (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.max_pool_grad(x, y.astype(np.float64), y, (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.avg_pool_grad(y.astype(np.float64), x.shape, (2, 2), (2, 2), (0, 0, 0, 0)) is None
    assert native.avg_pool_grad(y, (0, 4, 4, 2), (2, 2), (2, 2), (0, 0, 0, 0)) is None


X4, Y2 = np.ones((1, 4, 4, 2), np.float32), np.ones((1, 2, 2, 2), np.float32)


@pytest.mark.parametrize("call", [
    lambda: native.max_pool(X4[0], (2, 2), (2, 2), (0, 0, 0, 0)),           # 3-d
    lambda: native.max_pool(X4, (2,), (2, 2), (0, 0, 0, 0)),
    lambda: native.max_pool(X4, (0, 2), (2, 2), (0, 0, 0, 0)),
    lambda: native.max_pool(X4, (2, 2), (2, 0), (0, 0, 0, 0)),
    lambda: native.max_pool(X4, (2, 2), (2, 2), (0, -1, 0, 0)),
    lambda: native.max_pool(X4, (2, 2.0), (2, 2), (0, 0, 0, 0)),
    lambda: native.max_pool_grad(X4, Y2[:, :1], Y2, (2, 2), (2, 2), (0, 0, 0, 0)),
    lambda: native.max_pool_grad(X4, Y2, Y2[..., :1], (2, 2), (2, 2), (0, 0, 0, 0)),
    lambda: native.avg_pool(X4, (2, 2), (2, 2), (0, 0, 0)),
    lambda: native.avg_pool_grad(Y2, (1, 4, 4), (2, 2), (2, 2), (0, 0, 0, 0)),
    lambda: native.avg_pool_grad(Y2, (1, 5, 5, 2), (2, 2), (1, 1), (0, 0, 0, 0)),
    lambda: native.avg_pool_grad(Y2, "abcd", (2, 2), (2, 2), (0, 0, 0, 0)),
], ids=lambda f: "")
def test_bad_input_is_an_error(call):
    with pytest.raises(errors.InvalidArgumentError, match="Pool"):
        call()


@pytest.mark.skipif(ck is None, reason="the C library is not built")
def test_the_c_library_checks_its_buffers():
    """What native.py never passes is refused by the C entry point (never a crash)."""
    x, y = X4.copy(), Y2.copy()
    geo = (2, 2, 2, 2, 0, 0, 0, 0)
    bad = [
        lambda: ck.pool(4, (x,), np.empty_like(y), *geo),                  # unknown kind
        lambda: ck.pool(1, (x,), np.empty_like(x), *geo),                  # 1 input of 3
        lambda: ck.pool(0, (x,), np.empty((1, 2, 3, 2), np.float32), *geo),  # out shape
        lambda: ck.pool(0, (x,), np.empty_like(y), 2, 2, 2, 2, 2, 0, 0, 0),  # pad >= window
        lambda: ck.pool(0, (x,), np.empty_like(y), 2, 0, 2, 2, 0, 0, 0, 0),  # window 0
        lambda: ck.pool(0, (x.astype(np.float64),), np.empty_like(y), *geo),
        lambda: ck.pool(0, (x,), y.astype(np.float64), *geo),
        lambda: ck.pool(0, (x,), np.empty_like(y)[..., ::2], *geo),        # not contiguous
        lambda: ck.pool(1, (x, y, y), x, *geo),                            # out is x
        lambda: ck.pool(1, (x, y, y[:, :1]), np.empty_like(x), *geo),      # dy shape
        lambda: ck.pool(3, (y,), np.empty((1, 6, 4, 2), np.float32), *geo),  # dx shape
        lambda: ck.pool(0, (x,), np.empty_like(y).view(np.uint8), *geo),
        lambda: ck.pool(0, [x], np.empty_like(y), *geo),                   # not a tuple
    ]
    for call in bad:
        with pytest.raises((ValueError, TypeError)):
            call()
    ro = np.empty_like(y)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        ck.pool(0, (x,), ro, *geo)


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls of the native service's pooling functions."""
    svc = plugin.native_service()
    calls = []
    for name in ("max_pool", "max_pool_grad", "avg_pool", "avg_pool_grad"):
        def counted(*args, _name=name, _fn=getattr(svc, name)):
            calls.append(_name)
            return _fn(*args)
        monkeypatch.setattr(svc, name, counted)
    return calls


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
def test_public_api_native_against_numpy(spy, data_format):
    rng = np.random.default_rng(11)
    shape = (2, 7, 9, 5) if data_format == "NHWC" else (2, 5, 7, 9)
    x = tf.constant(rng.integers(-2, 3, shape).astype(np.float32))

    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.nn.max_pool2d(x, 3, 2, "SAME", data_format=data_format)
            z = tf.nn.avg_pool2d(x, 2, 1, "VALID", data_format=data_format)
            loss = tf.reduce_sum(y * y) + tf.reduce_sum(z * z)
        return y.numpy(), z.numpy(), tape.gradient(loss, x).numpy()

    fast = step()
    assert sorted(set(spy)) == ["avg_pool", "avg_pool_grad", "max_pool", "max_pool_grad"]
    before = plugin.use_native(False)
    try:
        del spy[:]
        slow = step()
        assert spy == []
    finally:
        plugin.use_native(before)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
