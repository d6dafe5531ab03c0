"""The native fused optimizer updates (``tapeflow_cpu_numpy.native.apply_adam``...,
``_c/optim.c``, issue 48) against their slow twin, ``tapeflow.kernels.optim``'s NumPy
kernels: BITWISE equal (the same float32 operations in the same order, no fused
multiply-add), on random sizes (tiny, odd, above the threading threshold), in place and
not, each instruction-set variant this CPU has forced in turn, on 1 and 2 threads.
Fresh outputs never share memory with the inputs, inputs are never written when not in
place, bad input is refused with tapeflow's errors (also by the C library's own checks),
the kernels route to the library only where it applies, and a Keras optimizer's steps
give the same weights with the library on and off.
"""

import zlib

import numpy as np
import pytest

import tapeflow as tf
from tapeflow import errors
from tapeflow.kernels.optim import OptimKernels
from tapeflow_cpu_numpy import native, plugin

try:                                    # the C library itself, for its own checks
    from tapeflow_cpu_numpy import _cpukernels as ck
except ImportError:
    ck = None

pytestmark = pytest.mark.skipif(not native.available(),
                                reason=f"native CPU kernels not in use: {native.reason()}")

NUMPY = OptimKernels(np)                # the slow twin: no native service
# above 2**16 elements the library splits the update over its threads (optim.c)
SIZES = [(1,), (7,), (3, 11), (1000,), (5, 14001)]

# name: (number of arrays in (the last: the gradient), out, coefficients, attrs);
# the slots at index in NONNEG hold non-negative values (second moments, accumulators)
UPDATES = {
    "apply_gradient_descent": (2, 1, ("lr",), {}),
    "apply_momentum": (3, 2, ("lr", "mom_lr"), {"momentum": 0.9, "use_nesterov": False}),
    "apply_momentum-nesterov": (3, 2, ("lr", "mom_lr"), {"momentum": 0.9,
                                                         "use_nesterov": True}),
    "apply_adam": (4, 3, ("lr_t",), {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-7}),
    "apply_rms_prop": (4, 3, ("lr",), {"rho": 0.9, "momentum": 0.0, "epsilon": 1e-10}),
    "apply_rms_prop-momentum": (4, 3, ("lr",), {"rho": 0.9, "momentum": 0.5,
                                                "epsilon": 1e-10}),
    "apply_centered_rms_prop": (5, 4, ("lr",), {"rho": 0.9, "momentum": 0.3,
                                                "epsilon": 1e-10}),
    "apply_keras_rms_prop": (3, 2, ("lr",), {"rho": 0.9, "epsilon": 1e-7}),
    "apply_keras_centered_rms_prop": (4, 3, ("lr",), {"rho": 0.9, "epsilon": 1e-7}),
    "apply_adagrad": (3, 2, ("lr",), {}),
}
NONNEG = {"apply_adam": (2,), "apply_rms_prop": (1,), "apply_centered_rms_prop": (2,),
          "apply_keras_rms_prop": (1,), "apply_keras_centered_rms_prop": (1,),
          "apply_adagrad": (1,)}



def case(key, shape, rng):
    """(function name, arrays, coefficients, attrs) of the update ``key`` on ``shape``."""
    name = key.split("-")[0]
    n_in, _, coef_names, attrs = UPDATES[key]
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(n_in)]
    for i in NONNEG.get(name, ()):
        arrays[i] = np.abs(arrays[i]) + np.float32(0.01)
    if name in ("apply_centered_rms_prop", "apply_keras_centered_rms_prop"):
        ms, mg = (2, 1) if name == "apply_centered_rms_prop" else (1, 2)
        arrays[ms] = arrays[ms] + arrays[mg] * arrays[mg]     # ms >= mg*mg
    coefs = [np.array(rng.uniform(1e-3, 0.1), np.float32) for _ in coef_names]
    return name, arrays, coefs, attrs


def same_bits(a, b):
    """a and b are equal bit for bit (NaN where the other is NaN)."""
    assert a.shape == b.shape and a.dtype == b.dtype == np.float32
    nan = np.isnan(a)
    assert np.array_equal(nan, np.isnan(b))
    assert np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan])


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


@pytest.mark.parametrize("inplace", [False, True], ids=["fresh", "inplace"])
@pytest.mark.parametrize("key", list(UPDATES))
def test_bitwise_the_numpy_kernel(key, inplace, variant):
    rng = np.random.default_rng(zlib.crc32(repr((key, inplace, variant)).encode()))
    for shape in SIZES:
        name, arrays, coefs, attrs = case(key, shape, rng)
        n_out = UPDATES[key][1]
        want = as_tuple(getattr(NUMPY, name)(*arrays, *coefs, **attrs))
        given = [a.copy() for a in arrays]
        got = as_tuple(getattr(native, name)(*given, *coefs, **attrs, inplace=inplace))
        assert len(got) == len(want) == n_out
        for g, w in zip(got, want):
            same_bits(g, w)
        if inplace:                     # the inputs themselves, updated
            assert all(g is a for g, a in zip(got, given))
            for a, b in zip(given[n_out:], arrays[n_out:]):
                same_bits(a, b)         # (the gradient: read only)
        else:                           # fresh arrays; the inputs untouched
            for a, b in zip(given, arrays):
                same_bits(a, b)
            for g in got:
                assert g.flags.c_contiguous and g.flags.writeable
                assert not any(np.shares_memory(g, a) for a in given)
                assert not any(np.shares_memory(g, h) for h in got if h is not g)


def test_python_number_coefficients_and_0d_variable():
    """Python-number coefficients round to float32 as NumPy's weak scalars do; a 0-d
    variable is updated too."""
    rng = np.random.default_rng(1)
    for shape in [(), (65,)]:
        var, m, g = (np.array(rng.standard_normal(shape), np.float32) for _ in range(3))
        v = np.array(np.abs(var) + np.float32(0.5), np.float32)
        want = NUMPY.apply_adam(var, m, v, g, 0.1234567, 0.85, 0.995, 1e-3)
        got = native.apply_adam(var, m, v, g, 0.1234567, 0.85, 0.995, 1e-3)
        assert got is not None and got[0].shape == shape
        for a, b in zip(got, want):
            same_bits(np.asarray(a), np.asarray(b))


class Spy:
    """A native service that records which updates it was asked for."""

    def __init__(self, on=True):
        self.on, self.calls = on, []

    def available(self):
        return self.on

    def __getattr__(self, name):
        fn = getattr(native, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            return fn(*args, **kwargs)
        return call


def test_routing_only_where_it_applies():
    """OptimKernels asks the service for float32 C-contiguous arrays of one shape with
    float32 / Python coefficients and Python attrs; anything else runs NumPy's blocks,
    with the same result."""
    rng = np.random.default_rng(2)
    var, m, v, g = (rng.standard_normal((40, 30)).astype(np.float32) for _ in range(4))
    v = np.abs(v)
    lr = np.array(0.01, np.float32)
    spy = Spy()
    k = OptimKernels(np, spy)
    for a, b in zip(k.apply_adam(var, m, v, g, lr), NUMPY.apply_adam(var, m, v, g, lr)):
        same_bits(a, b)
    assert spy.calls == ["apply_adam"]
    others = {
        "float64": (var.astype(np.float64), m.astype(np.float64), v.astype(np.float64),
                    g.astype(np.float64), lr.astype(np.float64)),
        "strided": (var[:, ::2], m[:, ::2], v[:, ::2], g[:, ::2], lr),
        "broadcast gradient": (var, m, v, g[:1], lr),
        "float64 coefficient": (var, m, v, g, np.array(0.01)),
    }
    for what, args in others.items():
        spy.calls.clear()
        got, want = k.apply_adam(*args), NUMPY.apply_adam(*args)
        assert spy.calls == [], what
        for a, b in zip(got, want):
            assert np.array_equal(a, b), what
    spy.calls.clear()
    k.apply_adam(var, m, v, g, lr, beta1=np.float64(0.9))       # a NumPy attr: float64
    spy.on = False                                             # the service switched off
    k.apply_gradient_descent(var, g, lr)
    assert spy.calls == []
    assert OptimKernels(np, spy).native is spy


def test_inplace_over_shared_inputs_falls_back():
    """In place over inputs that share memory: the library declines (None, also its C
    check), and the kernel's NumPy order decides."""
    rng = np.random.default_rng(3)
    var, g = (rng.standard_normal(100).astype(np.float32) for _ in range(2))
    m = rng.standard_normal(100).astype(np.float32)
    v = np.abs(g)
    assert native.apply_adam(var, m, m, g, np.float32(0.1), inplace=True) is None
    assert ck.optim(2, 1, (var, g, v, g), (var, g, v), 0.1, 0.1, 0.1, 0.1, False) is False
    spy = Spy()
    a, b = var.copy(), var.copy()
    OptimKernels(np, spy).apply_gradient_descent(a, a, np.float32(0.5), inplace=True)
    NUMPY.apply_gradient_descent(b, b, np.float32(0.5), inplace=True)
    same_bits(a, b)


def test_bad_input_is_refused():
    f = np.ones(8, np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"ApplyAdam: .*shape"):
        native.apply_adam(f, f, f, np.ones(9, np.float32), np.float32(0.1))
    with pytest.raises(errors.InvalidArgumentError, match=r"ApplyAdam: .*coefficient lr_t"):
        native.apply_adam(f, f, f, f, "0.1")
    ro = np.ones(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises(errors.InvalidArgumentError, match=r"ApplyGradientDescent: .*writable"):
        native.apply_gradient_descent(ro, f, np.float32(0.1), inplace=True)
    # what the library does not handle: None (the caller's NumPy path)
    assert native.apply_adam(*(np.ones(8) for _ in range(4)), 0.1) is None
    assert native.apply_gradient_descent(np.ones(8, np.float32)[::2], f[:4], 0.1) is None
    assert native.apply_gradient_descent(np.ones(0, np.float32), f[:0], 0.1) is None
    assert native.apply_gradient_descent([1.0], [1.0], 0.1) is None


@pytest.mark.skipif(ck is None, reason="the C library is not importable")
def test_the_c_library_checks():
    f = [np.ones(16, np.float32) for _ in range(4)]
    o = [np.ones(16, np.float32) for _ in range(3)]
    s = (0.1, 0.1, 0.1, 0.1, False)
    bad = {
        "unknown update": (99, 1, tuple(f), tuple(o)),
        "takes 4 inputs": (2, 1, tuple(f[:3]), tuple(o)),
        "differ in size": (2, 1, (*f[:3], np.ones(15, np.float32)), tuple(o)),
        "shares memory with an input": (2, 1, tuple(f), (o[0], o[1], f[3])),
        "two outputs": (2, 1, tuple(f), (o[0], o[1], o[0])),
        "float32": (2, 1, (*f[:3], np.ones(16)), tuple(o)),
        "2-d": (2, 2, tuple(f), tuple(o)),
        "bad number of dimensions": (2, -1, tuple(f), tuple(o)),
    }
    for what, args in bad.items():
        with pytest.raises(ValueError, match=what):
            ck.optim(*args, *s)
    with pytest.raises(TypeError):
        ck.optim(2, 1, list(f), tuple(o), *s)


@pytest.mark.parametrize("make", [
    lambda: tf.keras.optimizers.Adam(0.01),
    lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    lambda: tf.keras.optimizers.RMSprop(0.01, centered=True),
    lambda: tf.keras.optimizers.Adagrad(0.1),
], ids=["adam", "sgd-nesterov", "rmsprop-centered", "adagrad"])
def test_keras_optimizer_same_weights_native_on_and_off(make, monkeypatch):
    """A few optimizer steps (a large variable, split over threads, and a small one)
    give bitwise the same weights with the native library on and off (and with it on,
    the updates ran in it)."""
    svc, ran = plugin.native_service(), []
    for name in native.OPTIMIZER_UPDATES:
        def spy(*args, _f=getattr(svc, name), **kwargs):
            y = _f(*args, **kwargs)
            ran.append(y is not None)
            return y
        monkeypatch.setattr(svc, name, spy)
    rng = np.random.default_rng(4)
    init = [rng.standard_normal(s).astype(np.float32) for s in [(300, 250), (7,)]]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init]
             for _ in range(3)]
    results = []
    for on in (True, False):
        before = plugin.use_native(on)
        try:
            vs = [tf.Variable(a) for a in init]
            opt = make()
            for step in grads:
                opt.apply_gradients(zip([tf.constant(g) for g in step], vs))
            results.append([v.numpy() for v in vs])
        finally:
            plugin.use_native(before)
    for a, b in zip(*results):
        same_bits(a, b)
    assert not np.array_equal(results[0][0], init[0])
    assert ran and all(ran)


# --- ReluGrad: the same one-pass engine (not an optimizer) -------------------------------

def _relu_case(shape, seed):
    rng = np.random.default_rng(seed)
    dy = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    flat_dy, flat_x = dy.reshape(-1), x.reshape(-1)
    flat_dy[::7] = np.nan          # NaN * 0 is NaN, as in NumPy's dy * (x > 0)
    flat_dy[::11] = np.inf
    flat_x[::5] = 0.0              # x == 0: not positive
    flat_x[::13] = np.nan          # NaN > 0 is False
    flat_dy[::3] *= -1.0           # -dy * 0 is -0.0
    return dy, x


@pytest.mark.parametrize("shape", SIZES + [(32, 9, 9, 16)])
def test_relu_grad_is_bitwise_numpys(variant, shape):
    dy, x = _relu_case(shape, zlib.crc32(repr(shape).encode()))
    with np.errstate(invalid="ignore"):
        want = dy * (x > 0)
    dy0, x0 = dy.copy(), x.copy()
    got = native.relu_grad(dy, x)
    assert got.tobytes() == want.tobytes()
    assert not np.shares_memory(got, dy) and not np.shares_memory(got, x)
    assert dy.tobytes() == dy0.tobytes() and x.tobytes() == x0.tobytes()
    into = dy.copy()
    assert native.relu_grad(into, x, out=into) is into and into.tobytes() == want.tobytes()
    assert native.relu_grad(dy, x, out=x) is None          # (into x: the NumPy kernel)
    assert native.relu_grad(dy.astype(np.float64), x) is None
    if shape[-1] > 2:                                       # (a strided view)
        assert native.relu_grad(dy[..., ::2], x[..., ::2]) is None


def test_relu_grad_through_the_tape_native_and_numpy_agree():
    x = tf.constant(np.random.default_rng(3).standard_normal((4, 9, 9, 5)), tf.float32)

    def grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.nn.relu(x) * 3.0)
        return tape.gradient(y, x).numpy()

    calls = []
    svc = plugin.native_service()
    real = svc.relu_grad
    try:
        svc.relu_grad = lambda *a: calls.append(1) or real(*a)
        plugin.use_native(True)
        got = grad()
    finally:
        svc.relu_grad = real
    plugin.use_native(False)
    try:
        want = grad()
    finally:
        plugin.use_native(True)
    assert got.tobytes() == want.tobytes()
    assert calls                                      # the native kernel really ran


def test_relu_grad_with_broadcast_shapes_falls_back():
    """Batching rules (jacobian, vectorized_map) give ReluGrad broadcasting shapes: the
    NumPy kernel runs them (the native loop is elementwise over equal shapes)."""
    assert native.relu_grad(np.ones((2, 3), np.float32), np.ones(3, np.float32)) is None
    x = tf.constant([-1.0, 2.0, 3.0])
    for on in (True, False):
        plugin.use_native(on)
        try:
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.nn.relu(x)
            jac = tape.jacobian(y, x).numpy()
            vm = tf.vectorized_map(lambda r: tf.nn.relu(r) * 2.0,
                                   tf.constant([[1.0, -2.0], [-3.0, 4.0]])).numpy()
        finally:
            plugin.use_native(True)
        np.testing.assert_array_equal(jac, np.diag([0.0, 1.0, 1.0]))
        np.testing.assert_array_equal(vm, [[2.0, 0.0], [0.0, 8.0]])
