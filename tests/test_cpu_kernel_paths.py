"""The CPU backend's kernel paths (issue 48, docs/cpu-kernels.md): the native C kernels
(``tapeflow_cpu_numpy.native``, the kernels' build service ``native``) against the NumPy
path they replace (Winograd / im2col + BLAS, forced with ``plugin.use_native(False)``)
and a float64 reference, through the public API: ``tf.nn.conv2d`` and its gradients
(GradientTape), the fused convolution ``_FusedConv2D`` and ``tf.matmul``, on random
shapes (NHWC and NCHW, strides, SAME / VALID / explicit padding, dilations, odd channel
counts), each ISA variant forced in turn; the thread setting (the BLAS's count read back
from OpenBLAS itself) and what ``python -m tapeflow info`` says.

The native tests are skipped, with the library's reason, where it is not available (no
compiler at install, ``TAPEFLOW_CPU_NATIVE=0``); the thread and info tests run anyway.
"""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from math import erf

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.kernels import linalg as k_linalg
from tapeflow.ops.fused import ACTIVATIONS, fused_conv2d
from tapeflow_cpu_numpy import native, plugin, threads

SVC = plugin.native_service()
needs_native = pytest.mark.skipif(
    SVC is None, reason=f"native CPU kernels not available: {native.reason()}")

# (x NHWC shape, filter HWIO shape, strides, padding, dilations): odd sizes, 1-3 and
# 5-17 channels, strides 1-3, dilations 1-2, SAME / VALID / explicit padding
CASES = [
    ((2, 9, 7, 3), (3, 3, 3, 5), (1, 1), "SAME", (1, 1)),
    ((1, 8, 8, 1), (5, 5, 1, 16), (1, 1), "SAME", (1, 1)),
    ((3, 11, 9, 2), (3, 2, 2, 7), (2, 1), "VALID", (1, 2)),
    ((2, 10, 10, 5), (3, 3, 5, 3), (2, 2), "SAME", (1, 1)),
    ((1, 7, 12, 17), (1, 1, 17, 9), (1, 1), "VALID", (1, 1)),
    ((2, 9, 9, 4), (3, 3, 4, 6), (1, 1), [[0, 0], [2, 0], [1, 3], [0, 0]], (2, 2)),
    ((2, 13, 13, 3), (4, 4, 3, 8), (3, 3), "SAME", (1, 1)),
    ((1, 6, 5, 6), (2, 3, 6, 1), (1, 2), "VALID", (2, 1)),
]


@pytest.fixture(autouse=True)
def _restore():
    """Every test leaves the native switch, the ISA and the threads as it found them."""
    isa = native.isa() if SVC is not None else None
    yield
    plugin.use_native(True)
    if SVC is not None:
        native.set_isa(isa)
    tf.config.threading.set_intra_op_parallelism_threads(0)


@pytest.fixture
def calls(monkeypatch):
    """``{"conv2d": n, ...}``: the native calls that returned a result."""
    counts = {"conv2d": 0, "conv2d_backprop_filter": 0, "matmul": 0}
    for name in counts:
        fn = getattr(SVC, name)

        def counted(*a, _fn=fn, _name=name, **k):
            y = _fn(*a, **k)
            counts[_name] += y is not None
            return y
        monkeypatch.setattr(SVC, name, counted)
    return counts


def ref_conv(x, w, strides, pads, dilations):
    """The NHWC float64 convolution written the obvious way: one GEMM per filter tap."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (pt, pb), (pl, pr) = pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    kh, kw = w.shape[:2]
    (sh, sw), (dh, dw) = strides, dilations
    ho = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((x.shape[0], ho, wo, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i * dh:i * dh + sh * (ho - 1) + 1:sh,
                    j * dw:j * dw + sw * (wo - 1) + 1:sw] @ w[i, j]
    return y


def pads_of(x_shape, w_shape, strides, padding, dilations):
    if not isinstance(padding, str):
        return tuple(tuple(p) for p in padding[1:3])
    out = []
    for i in range(2):
        size, eff = x_shape[1 + i], (w_shape[i] - 1) * dilations[i] + 1
        if padding == "VALID":
            out.append((0, 0))
            continue
        tot = max((-(-size // strides[i]) - 1) * strides[i] + eff - size, 0)
        out.append((tot // 2, tot - tot // 2))
    return tuple(out)


def close(a, ref, tol=2e-5):
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(np.asarray(a, np.float64) - ref).max()) if np.size(ref) else 0.0
    assert err <= tol * scale, (err, scale)


def conv_and_grads(x, w, dy, strides, padding, dilations, fmt):
    """``(y, dx, dw)`` of tf.nn.conv2d in ``fmt`` (arrays in NHWC / HWIO)."""
    xt = x if fmt == "NHWC" else x.transpose(0, 3, 1, 2)
    pad = padding
    if fmt == "NCHW" and not isinstance(padding, str):
        pad = [[0, 0], [0, 0]] + [list(p) for p in padding[1:3]]
    xs, ws = tf.constant(xt), tf.constant(w)
    with tf.GradientTape() as tape:
        tape.watch([xs, ws])
        y = tf.nn.conv2d(xs, ws, strides, pad, data_format=fmt, dilations=dilations)
        dyt = dy if fmt == "NHWC" else dy.transpose(0, 3, 1, 2)
        loss = tf.reduce_sum(y * tf.constant(dyt.astype(y.dtype.as_numpy_dtype)))
    dx, dw = tape.gradient(loss, [xs, ws])
    back = (lambda a: a) if fmt == "NHWC" else (lambda a: a.transpose(0, 2, 3, 1))
    return back(y.numpy()), back(dx.numpy()), dw.numpy()


def case_arrays(rng, case):
    xs, wsh, strides, padding, dil = case
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(wsh).astype(np.float32)
    ref = ref_conv(x, w, strides, pads_of(xs, wsh, strides, padding, dil), dil)
    dy = rng.standard_normal(ref.shape).astype(np.float32)
    return x, w, dy, ref


def _reference_grads(x, w, dy, case, fmt):
    """float64 gradients: the NumPy path in float64 (the native kernels are float32)."""
    _, _, strides, padding, dil = case
    return conv_and_grads(x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64),
                          strides, padding, dil, fmt)


@needs_native
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_conv2d_and_gradients_native_vs_numpy_vs_float64(fmt, calls):
    rng = np.random.default_rng(48)
    for case in CASES:
        x, w, dy, ref = case_arrays(rng, case)
        _, _, strides, padding, dil = case
        r64 = _reference_grads(x, w, dy, case, fmt)
        close(r64[0], ref, 1e-12)
        got = {}
        for on in (True, False):
            plugin.use_native(on)
            got[on] = conv_and_grads(x, w, dy, strides, padding, dil, fmt)
        for on, res in got.items():
            for what, a, r in zip(("y", "dx", "dw"), res, r64):
                assert a.dtype == np.float32 and a.shape == r.shape, (case, what)
                close(a, r, 5e-5 if what == "dw" else 2e-5)
    stride1 = sum(tuple(c[2]) == (1, 1) for c in CASES)  # (their input gradient: a conv)
    assert calls["conv2d"] == len(CASES) + stride1
    assert calls["conv2d_backprop_filter"] == len(CASES)


@needs_native
def test_use_native_false_is_the_numpy_path(calls):
    x, w, _, ref = case_arrays(np.random.default_rng(1), CASES[0])
    plugin.use_native(False)
    close(tf.nn.conv2d(x, w, 1, "SAME").numpy(), ref)
    assert calls["conv2d"] == 0 and not SVC.available()
    plugin.use_native(True)
    close(tf.nn.conv2d(x, w, 1, "SAME").numpy(), ref)
    assert calls["conv2d"] == 1


def _fused(x, w, b, case, act, alpha):
    _, _, strides, padding, dil = case
    return fused_conv2d(x, w, b, strides=strides, padding=padding, dilations=dil,
                        activation=act, leakyrelu_alpha=alpha).numpy()


def _act_ref(z, act, alpha):
    if act is None:
        return z
    return {"Relu": lambda: np.maximum(z, 0), "Relu6": lambda: np.clip(z, 0, 6),
            "LeakyRelu": lambda: np.where(z > 0, z, alpha * z),
            "Elu": lambda: np.where(z > 0, z, np.expm1(np.minimum(z, 0))),
            "GeluExact": lambda: 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2))),
            "GeluApproximate": lambda: 0.5 * z * (1 + np.tanh(
                np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))}[act]()


@needs_native
def test_fused_conv_native_epilogue_vs_numpy_vs_float64(calls):
    rng = np.random.default_rng(7)
    for k, act in enumerate((None,) + ACTIVATIONS):
        for alpha in ((0.2, -0.5, 1.5) if act == "LeakyRelu" else (0.2,)):
            case = CASES[k % len(CASES)]
            x, w, _, ref = case_arrays(rng, case)
            b = rng.standard_normal(w.shape[3]).astype(np.float32)
            want = _act_ref(ref + b, act, alpha)
            for on in (True, False):
                plugin.use_native(on)
                close(_fused(x, w, b, case, act, alpha), want)
    assert calls["conv2d"] > 0


@needs_native
def test_fused_conv_nchw_and_its_gradient_match_the_unfused_ops():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)          # NCHW
    w = rng.standard_normal((3, 3, 3, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    res = []
    for on in (True, False):
        plugin.use_native(on)
        xs, ws, bs = tf.constant(x), tf.constant(w), tf.constant(b)
        with tf.GradientTape() as tape:
            tape.watch([xs, ws, bs])
            y = fused_conv2d(xs, ws, bs, strides=1, padding="SAME", data_format="NCHW",
                             activation="Relu")
            loss = tf.reduce_sum(y * tf.sin(y))
        res.append([y.numpy()] + [g.numpy() for g in tape.gradient(loss, [xs, ws, bs])])
    for a, r in zip(*res):
        close(a, r.astype(np.float64), 5e-5)


@needs_native
def test_each_isa_variant_forced_in_turn(calls):
    rng = np.random.default_rng(9)
    arrays = [case_arrays(rng, c) for c in CASES[:4]]
    a = rng.standard_normal((37, 19)).astype(np.float32)
    bm = rng.standard_normal((19, 23)).astype(np.float32)
    assert native.isas() and native.isa() in native.isas()
    for isa in native.isas():
        native.set_isa(isa)
        assert native.isa() == isa
        for case, (x, w, dy, ref) in zip(CASES, arrays):
            _, _, strides, padding, dil = case
            y, dx, dw = conv_and_grads(x, w, dy, strides, padding, dil, "NHWC")
            close(y, ref)
        y = native.matmul(a, bm)
        assert y is not None, isa
        close(y, a.astype(np.float64) @ bm)
    assert calls["conv2d"] >= 2 * len(native.isas())


@needs_native
def test_matmul_native_vs_blas_vs_float64(calls, monkeypatch):
    rng = np.random.default_rng(10)
    shapes = [(1, 1, 1), (3, 5, 7), (64, 100, 33), (17, 129, 16), (32, 300, 65)]
    monkeypatch.setattr(k_linalg, "native_matmul_pays", lambda *a: True)   # all native
    for m, k, n in shapes:
        for ta in (False, True):
            for tb in (False, True):
                a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
                b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
                ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
                for on in (True, False):
                    plugin.use_native(on)
                    y = tf.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy()
                    assert y.shape == ref.shape and y.dtype == np.float32
                    close(y, ref)
    assert calls["matmul"] > 0
    plugin.use_native(True)
    with pytest.raises(Exception):          # mismatched inner dimensions: an error, no crash
        tf.matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))


@needs_native
@pytest.mark.parametrize("nthreads", [1, 2])
def test_matmul_follows_the_measured_rule(nthreads, calls):
    """tf.matmul goes native exactly where ``native_matmul_pays`` says, for the
    library's thread count at the call."""
    tf.config.threading.set_intra_op_parallelism_threads(nthreads)
    rng = np.random.default_rng(12)
    for m, k, n, ta, tb in [(64, 256, 256, False, False), (64, 256, 10, False, False),
                            (64, 256, 256, False, True), (256, 64, 256, True, False),
                            (16, 512, 16, True, False)]:
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
        before = calls["matmul"]
        y = tf.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy()
        want = k_linalg.native_matmul_pays(m, k, n, ta, tb, native.get_num_threads())
        assert calls["matmul"] - before == int(want), (m, k, n, ta, tb)
        close(y, (a.T if ta else a).astype(np.float64) @ (b.T if tb else b))


@needs_native
def test_results_alias_nothing_the_user_holds():
    x = np.ones((1, 4, 4, 2), np.float32)
    w = np.ones((1, 1, 2, 2), np.float32)
    y = tf.nn.conv2d(x, w, 1, "VALID")
    arr = y.numpy()
    assert not np.shares_memory(arr, x) and not np.shares_memory(arr, w)
    x[...] = 5.0
    np.testing.assert_array_equal(y.numpy(), np.full((1, 4, 4, 2), 2.0, np.float32))


def test_intra_op_threads_govern_the_blas_and_the_native_kernels():
    blas0 = threads.blas_threads()
    nat0 = native.get_num_threads() if SVC is not None else None
    for n in (1, 2, 0):
        tf.config.threading.set_intra_op_parallelism_threads(n)
        assert tf.config.threading.get_intra_op_parallelism_threads() == n
        if blas0 is not None:                # read back through OpenBLAS's own getter
            assert threads.blas_threads() == (n or blas0)
        if SVC is not None:
            assert native.get_num_threads() == (n or nat0)
    for bad in (-1, 2 ** 31, 2 ** 70, 2.0, np.float32(2), np.array([2]), "2", True, None):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"not an int in \[0, 2\*\*31\)"):
            tf.config.threading.set_intra_op_parallelism_threads(bad)
    assert tf.config.threading.get_intra_op_parallelism_threads() == 0
    tf.config.threading.set_inter_op_parallelism_threads(3)     # accepted, no effect
    assert tf.config.threading.get_inter_op_parallelism_threads() == 3
    tf.config.threading.set_inter_op_parallelism_threads(0)


def test_intra_op_threads_take_integral_numbers_and_clamp_at_the_cores():
    """Any integral number (numpy's too) up to 2**31 - 1, as TensorFlow's int32; get
    returns what was set; each pool gets at most the machine's cores."""
    cores = os.cpu_count() or 1
    blas0 = threads.blas_threads()
    for n in (np.int64(2), 2 ** 31 - 1):
        tf.config.threading.set_intra_op_parallelism_threads(n)
        got = tf.config.threading.get_intra_op_parallelism_threads()
        assert got == n and type(got) is int
        if SVC is not None:
            assert native.get_num_threads() == min(int(n), cores, 256)
        if blas0 is not None:        # (OpenBLAS caps it at its own build count too)
            assert threads.blas_threads() <= min(int(n), cores)


def test_the_blas_governed_is_numpys_own():
    """The OpenBLAS set and reported is the one NumPy's extension links: NumPy says its
    BLAS is OpenBLAS, and the library is not SciPy's bundled copy (loaded here if SciPy
    is installed); where NumPy's BLAS is not OpenBLAS, info says it is not governed."""
    try:
        import scipy.linalg  # noqa: F401  (SciPy's wheels load their own OpenBLAS)
    except ImportError:
        pass
    libs = threads.blas_libraries()
    if libs:
        assert "openblas" in threads.numpy_blas_name().lower() or not threads.numpy_blas_name()
        assert "scipy.libs" not in libs[0][0]
        assert f"({threads.numpy_blas_name() or 'OpenBLAS'}) " in threads.describe()
    else:
        assert "not governed" in threads.describe()


@needs_native
def test_native_falls_back_for_geometry_over_its_limit():
    """A stride over 2**24 (valid TensorFlow) runs on the NumPy path, same result."""
    x = np.random.default_rng(5).standard_normal((1, 5, 5, 3)).astype(np.float32)
    w = np.random.default_rng(6).standard_normal((3, 3, 3, 4)).astype(np.float32)
    out = []
    for nat in (True, False):
        plugin.use_native(nat)
        out.append(tf.nn.conv2d(x, w, [1, 2 ** 25, 2 ** 25, 1], "SAME").numpy())
        out.append(tf.nn.max_pool2d(x, 2, 2 ** 25, "SAME").numpy())
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[1], out[3])


@needs_native
def test_one_thread_and_two_agree():
    x, w, _, ref = case_arrays(np.random.default_rng(11), CASES[3])
    out = []
    for n in (1, 2):
        tf.config.threading.set_intra_op_parallelism_threads(n)
        out.append(tf.nn.conv2d(x, w, 2, "SAME").numpy())
    close(out[0], ref)
    close(out[1], out[0].astype(np.float64), 1e-6)


def test_blas_is_found_in_the_loaded_numpy():
    libs = threads.blas_libraries()
    if not libs:
        pytest.skip("NumPy's BLAS is not OpenBLAS here")
    assert "openblas" in os.path.basename(libs[0][0]).lower()


def test_info_says_whether_the_native_kernels_are_in_use():
    notes = plugin.native_notes()
    if SVC is not None:
        assert notes[0].startswith(f"native CPU kernels: in use, ISA {native.isa()}")
        plugin.use_native(False)
        assert "use_native(False)" in plugin.native_notes()[0]
    else:
        assert notes[0].startswith("native CPU kernels: not in use: ")
    assert notes[1].startswith("threads: ")
    be = next(d.backend for d in tf.runtime.devices.list_devices() if d.type == "cpu")
    assert be.info_notes()[1].startswith("threads: ")


def test_info_with_the_environment_switch_off_names_the_reason():
    env = dict(os.environ, TAPEFLOW_CPU_NATIVE="0")
    code = "from tapeflow_cpu_numpy import plugin; print(plugin.native_notes()[0])"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("native CPU kernels: not in use: "), r.stdout
    assert "TAPEFLOW_CPU_NATIVE" in r.stdout or SVC is None, r.stdout


@pytest.mark.parametrize("mod", [plugin, threads])
def test_backend_docstring_examples(mod):
    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.failed == 0 and res.attempted > 0
