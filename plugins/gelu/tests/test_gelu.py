"""tapeflow-gelu's tests, written with tapeflow's plugin author's kit.

``opcheck`` runs each op on every device under test (the ``tf_device`` fixture of
tapeflow's pytest plugin: ``--tapeflow-device``, default all; absent devices are
skipped with the reason) against a float64 NumPy/SciPy reference, checks gradients
numerically to second order, and checks the error contract. The GPU kernels are
also tested directly, on the array library, where CuPy or PyOpenCL finds a device.
"""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.special import ndtr

import tapeflow as tf
from tapeflow.testing import ErrorSample, Sample, check_grads, opcheck
from tapeflow_gelu import gelu, gelu_grad, k_cpu

C, K = np.sqrt(2 / np.pi), 0.044715
APPROX = [pytest.param(False, id="exact"), pytest.param(True, id="tanh")]


# --- references: float64, written independently of the kernels' formulas ---------------

def _ref_d(x, approximate):
    """GELU'(x) in float64: exact Phi + x phi; tanh form differentiated by hand."""
    x = x.astype(np.float64)
    if not approximate:
        return ndtr(x) + x * np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    t = np.tanh(C * (x + K * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * C * (1 + 3 * K * x * x)


def ref_gelu(x, approximate=False):
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if not approximate:
            y = x64 * ndtr(x64)                       # ndtr: accurate in the far tail
        else:
            y = 0.5 * x64 * (1 + np.tanh(C * (x64 + K * x64 ** 3)))
        y = np.where(np.isneginf(x64), -0.0, y)       # the limit, not -inf * 0
    return np.asarray(y.astype(x.dtype))


def ref_gelu_grad(dy, x, approximate=False):
    with np.errstate(all="ignore"):
        d = np.where(np.isinf(x), (x > 0).astype(np.float64), _ref_d(x, approximate))
        return np.asarray((dy.astype(np.float64) * d).astype(x.dtype))


# --- samples -------------------------------------------------------------------------------

EDGES = np.array([-np.inf, -1e30, -60.0, -30.0, -8.0, -1e-3, -0.0, 0.0, 1e-3, 8.0, 30.0, 1e4,
                  np.inf, np.nan])


def edges(dtype):
    with np.errstate(over="ignore"):                  # 1e30 is inf in float16
        return EDGES.astype(dtype)


def forward_samples(approximate):
    def samples(dtype, rng):
        if not dtype.is_floating:
            return []
        kw = {"approximate": approximate}
        return [Sample((np.array(0.7, dtype.np),), kw, name="scalar"),
                Sample((rng.normal(0, 3, (4, 5)).astype(dtype.np),), kw, name="matrix"),
                Sample((rng.normal(0, 3, (2, 3, 4)).astype(dtype.np),), kw, name="rank3"),
                Sample((np.zeros((0, 3), dtype.np),), kw, name="empty"),
                Sample((edges(dtype.np),), kw, name="edges")]
    return samples


def grad_samples(approximate):
    def samples(dtype, rng):
        kw = {"approximate": approximate}
        return [Sample((np.array(0.7),), kw, name="scalar"),
                Sample((rng.normal(0, 2, (3, 4)),), kw, name="matrix"),
                Sample((np.array([-12.0, -4.0, -0.5, 0.0, 0.5, 4.0, 12.0]),), kw, name="tails")]
    return samples


def grad_op_samples(approximate):
    def samples(dtype, rng):
        if not dtype.is_floating:
            return []
        kw = {"approximate": approximate}
        e = edges(dtype.np)
        return [Sample((rng.normal(size=(3, 4)).astype(dtype.np),
                        rng.normal(0, 3, (3, 4)).astype(dtype.np)), kw, name="matrix"),
                Sample((np.ones_like(e), e), kw, grad_argnums=(), name="edges")]
    return samples


def _tol(dtype_tol=(2e-3, 1e-3)):
    # float16 inputs are rounded once more than the float64 reference
    return {"float16": dtype_tol}


# --- opcheck: forward, non-contiguous, gradients to second order, errors -------------

@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_forward_and_errors(tf_device, approximate):
    errors = [
        ErrorSample((np.arange(3, dtype=np.int32),), {"approximate": approximate},
                    tf.errors.NotFoundError, r"dtype in \[float16, float32, float64\]",
                    name="int32 has no kernel"),
        ErrorSample((np.ones(3, np.float32),), {"approximate": "sigmoid"},
                    tf.errors.InvalidArgumentError, "approximate must be True or False"),
    ]
    report = opcheck(gelu, forward_samples(approximate), ref=ref_gelu, op=gelu.op.name,
                     errors=errors, tol=_tol(), devices=[tf_device],
                     kinds=("forward", "noncontiguous", "errors"))
    assert f"errors[gelu-{tf_device}]" in report["passed"]
    assert f"forward[gelu-float32-{tf_device}]" in report["passed"]


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_gradients_second_order(tf_device, approximate):
    report = opcheck(gelu, grad_samples(approximate), ref=ref_gelu, op=gelu.op.name,
                     grad_order=2, devices=[tf_device], kinds=("gradients",))
    assert report["passed"] == [f"gradients[gelu-{tf_device}]"]


@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_grad_op(tf_device, approximate):
    errors = [ErrorSample((np.ones(3, np.float32), np.ones(2, np.float32)),
                          {"approximate": approximate}, tf.errors.InvalidArgumentError,
                          "must have the same shape", name="shape mismatch")]
    report = opcheck(gelu_grad, grad_op_samples(approximate), ref=ref_gelu_grad,
                     op=gelu_grad.op.name, errors=errors, tol=_tol(), grad_order=2,
                     devices=[tf_device])
    assert f"gradients[gelu_grad-{tf_device}]" in report["passed"]


# --- beyond opcheck ------------------------------------------------------------------------

@pytest.mark.parametrize("approximate", APPROX)
def test_third_order(approximate):
    check_grads(lambda x: gelu(x, approximate=approximate),
                (np.array([-3.0, -0.7, 0.0, 0.4, 2.5]),), order=3)


@pytest.mark.parametrize("approximate", APPROX)
def test_forward_mode_and_batching_follow_from_elementwise(approximate):
    """Both ops are declared ``elementwise=True``, so their JVPs (each op's gradient rule
    applied to the tangent) and their batching rule (Broadcasting) are derived; a
    Jacobian's rows (gelu_grad with the batch in dy only) use gelu_grad's own rule.
    Nothing falls back: no double-VJP, no loop over the examples."""
    from tapeflow.autodiff.forward import FALLBACK_OPS
    from tapeflow.tracing.vectorize import recording_fallbacks
    assert (gelu.op.rule_sources["jvp"], gelu.op.rule_sources["batch"]) == ("derived",) * 2
    assert (gelu_grad.op.rule_sources["jvp"], gelu_grad.op.rule_sources["batch"]) == (
        "derived", "tapeflow-gelu")
    x = np.linspace(-3.0, 3.0, 8).reshape(2, 4)
    t, dy = np.cos(x), np.sin(3 * x)
    xt, tt, dyt = tf.constant(x), tf.constant(t), tf.constant(dy)
    with tf.autodiff.ForwardAccumulator((xt, dyt), (tt, tt)) as acc:
        y = gelu(xt, approximate=approximate)
        g = gelu_grad(dyt, xt, approximate=approximate)
    d1 = _ref_d(x, approximate)
    np.testing.assert_allclose(acc.jvp(y).numpy(), d1 * t, rtol=1e-10)
    d2 = (tf.gradients_function(lambda v: gelu_grad(tf.ones_like(v), v,
                                                    approximate=approximate))(xt)[0]).numpy()
    np.testing.assert_allclose(acc.jvp(g).numpy(), d1 * t + dy * d2 * t, rtol=1e-10)
    assert not {"gelu::gelu", "gelu::gelu_grad"} & FALLBACK_OPS
    with recording_fallbacks() as loops:
        got = tf.vectorized_map(lambda v: gelu(v, approximate=approximate), xt)
        x0 = tf.constant(x[0])
        with tf.GradientTape() as tape:
            tape.watch(x0)
            y = gelu(x0, approximate=approximate)
        jac = tape.jacobian(y, x0)
    assert not loops, loops
    np.testing.assert_allclose(got.numpy(), ref_gelu(x, approximate), rtol=1e-12)
    np.testing.assert_allclose(jac.numpy(), np.diag(d1[0]), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("approximate", APPROX)
def test_stable_in_the_tails_without_warnings(approximate):
    x = np.array([-np.inf, -1e30, -40.0, -8.0, 8.0, 1e30, np.inf], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # a NumPy warning would be an error
        t = tf.constant(x)
        y = gelu(t, approximate=approximate).numpy()
        g = tf.gradients_function(lambda v: gelu(v, approximate=approximate))(t)[0].numpy()
        gg = tf.gradients_function(
            lambda v: tf.gradients_function(lambda w: gelu(w, approximate=approximate))(v)[0])(t)
    assert y[0] == 0 and np.signbit(y[0]) and y[-1] == np.inf and y[-2] == np.float32(1e30)
    np.testing.assert_allclose(g, [0, 0, 0, 0, 1, 1, 1], rtol=0, atol=1e-12)
    assert np.all(np.isfinite(gg[0].numpy()))


def test_exact_form_keeps_relative_precision_for_negative_inputs():
    # 1 + erf(x / sqrt 2) cancels: in float32 it is 0 below x ~ -5.5, percents off at -5
    x = np.array([-5.0, -8.0, -12.0], np.float32)
    got = gelu(tf.constant(x)).numpy()
    want = x.astype(np.float64) * ndtr(x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert np.all(got < 0)


def test_attribute_spellings():
    x = tf.constant([-1.0, 0.5, 2.0])
    np.testing.assert_array_equal(gelu(x, approximate="tanh").numpy(),
                                  gelu(x, approximate=True).numpy())
    np.testing.assert_array_equal(gelu(x, approximate="none").numpy(), gelu(x).numpy())
    assert not np.array_equal(gelu(x).numpy(), gelu(x, approximate=True).numpy())


def test_registered_through_the_entry_point():
    info = {p.name: p for p in tf.plugins.plugin_report()}["gelu"]
    assert (info.status, info.distribution) == ("loaded", "tapeflow-gelu"), info
    assert set(info.ops) == {"gelu::gelu", "gelu::gelu_grad"}
    assert tf.ops.gelu.gelu is gelu and tf.ops.gelu.gelu_grad is gelu_grad
    for dev in ("cpu", "cuda", "opencl"):
        assert gelu.op.kernels[dev].source == "tapeflow-gelu"


def test_importing_the_plugin_before_tapeflow():
    # `import tapeflow_gelu` imports tapeflow, which loads tapeflow_gelu.ops through the
    # entry point while tapeflow_gelu/__init__ is still running: that must work
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEFLOW_")}
    code = ("import tapeflow_gelu, tapeflow as tf; "
            "print(tf.ops.gelu.gelu(tf.constant([1.0])).numpy().round(4), "
            "[p.status for p in tf.plugins.plugin_report() if p.name == 'gelu'])")
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.8413] ['loaded']"


# --- the GPU kernels on their array libraries, where a device exists -----------------------

def _opencl_queue():
    try:
        import pyopencl as cl
    except ImportError as e:
        pytest.skip(f"PyOpenCL is not installed ({e}); pip install 'tapeflow-gelu[opencl]'")
    try:
        ctx = cl.create_some_context(interactive=False)
        _KEEP.append(ctx)   # (Intel's OpenCL runtime invalidates a queue whose context was released)
        return cl.CommandQueue(ctx)
    except Exception as e:
        pytest.skip(f"no OpenCL device: {type(e).__name__}: {e}")


_KEEP: list = []


def _cupy():
    try:
        import cupy
        if getattr(cupy, "FAKE", False):
            raise RuntimeError(f"`import cupy` gives a stand-in for tests ({cupy.__file__})")
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no CUDA device")
    except Exception as e:
        pytest.skip(f"CuPy cannot reach a GPU here: {type(e).__name__}: {e}")
    return cupy



KERNEL_CASES = [pytest.param(dt, approximate,
                             id=f"{np.dtype(dt).name}-{'tanh' if approximate else 'exact'}")
                for dt in (np.float16, np.float32, np.float64) for approximate in (False, True)]


def _compare(got, want, dt):
    # the device's exp/erfc against NumPy's and SciPy's: a few ulp apart
    rtol = 1e-3 if dt == np.float16 else 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=0 if dt != np.float16 else 1e-4, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(want[got == 0]))


@pytest.mark.parametrize("dt,approximate", KERNEL_CASES)
def test_opencl_kernels_match_the_cpu_kernels(dt, approximate):
    q = _opencl_queue()
    import pyopencl.array as cla

    from tapeflow_gelu import k_opencl
    if dt == np.float64 and "cl_khr_fp64" not in q.device.extensions:
        pytest.skip(f"{q.device.name} has no float64")
    x = np.concatenate([edges(dt), np.linspace(-9, 9, 37, dtype=dt)])
    dy = np.linspace(-2, 2, x.size).astype(dt)
    with np.errstate(all="ignore"):
        _compare(k_opencl.gelu(cla.to_device(q, x), approximate).get(),
                 k_cpu.gelu(x, approximate), dt)
        _compare(k_opencl.gelu_grad(cla.to_device(q, dy), cla.to_device(q, x), approximate).get(),
                 k_cpu.gelu_grad(dy, x, approximate), dt)


@pytest.mark.parametrize("dt,approximate", KERNEL_CASES)
def test_cuda_kernels_match_the_cpu_kernels(dt, approximate):
    from tapeflow_gelu import k_cuda
    cp = _cupy()
    x = np.concatenate([edges(dt), np.linspace(-9, 9, 37, dtype=dt)])
    dy = np.linspace(-2, 2, x.size).astype(dt)
    with np.errstate(all="ignore"):
        _compare(cp.asnumpy(k_cuda.gelu(cp.asarray(x), approximate)),
                 k_cpu.gelu(x, approximate), dt)
        _compare(cp.asnumpy(k_cuda.gelu_grad(cp.asarray(dy), cp.asarray(x), approximate)),
                 k_cpu.gelu_grad(dy, x, approximate), dt)
        xt = cp.asarray(x[:48].reshape(6, 8)).T                  # strided input
        _compare(cp.asnumpy(k_cuda.gelu(xt, approximate)),
                 k_cpu.gelu(x[:48].reshape(6, 8).T, approximate), dt)


def test_cuda_sources_compile_with_nvrtc():
    """Without a GPU: compile the fused kernels' source as CuPy generates it, for each
    dtype, with NVRTC (needs CuPy, nvidia-cuda-nvrtc and nvidia-cuda-runtime; the CUDA
    backend's compile check supplies CuPy's compiler options and headers)."""
    cc = pytest.importorskip("tapeflow_cuda_cupy.compile_check")
    from tapeflow_gelu import k_cuda
    try:
        nvrtc = cc._nvrtc()
        opts = cc.options(cc._cupy_include(), cc._cuda_include())
    except cc.Unavailable as e:
        pytest.skip(f"NVRTC compile check unavailable here: {e}")
    failed = []
    for name, (ins, outs, body) in k_cuda.ELEMENTWISE.items():
        for dt in ("float16", "float32", "float64"):
            args, refs = [], []
            for typ, n in cc._params(ins) + cc._params(outs):
                if typ == "T":
                    const = "const " if (typ, n) in cc._params(ins) else ""
                    args.append(f"{const}T* _raw_{n}")
                    refs.append(f"{const}T &{n} = _raw_{n}[_i];")
                else:
                    args.append(f"const {cc._ctype(typ, 'T')} {n}")
            src = (f"{cc._CUPY_HEADER}{cc._decl(dt)}typedef {cc._CTYPE[dt]} T;\n"
                   f"{k_cuda.PREAMBLE}\n"
                   f'extern "C" __global__ void tapeflow_{name}({", ".join(args)}) {{\n'
                   "  const int _i = blockIdx.x * blockDim.x + threadIdx.x;\n  "
                   + "\n  ".join(refs) + f"\n  {body};\n}}\n")
            prog = nvrtc.createProgram(src, f"{name}.cu", [], [])
            try:
                nvrtc.compileProgram(prog, opts)
            except Exception as e:
                failed.append(f"{name}[{dt}]: {e}\n{nvrtc.getProgramLog(prog)}")
            finally:
                nvrtc.destroyProgram(prog)
    assert not failed, "\n".join(failed)


def test_cuda_gelu_grad_refuses_mismatched_shapes_before_launching():
    """The CUDA kernel checks shapes as the CPU and OpenCL ones do (an ElementwiseKernel
    would broadcast a 0-d gradient: on the H100 the bad-input fuzzer's
    ``gelu_grad(float32[2, 2, 3], float32[])`` returned on cuda:0 and raised on cpu:0);
    the check comes before CuPy is touched, so NumPy arrays show it here."""
    from tapeflow_gelu import k_cuda
    with pytest.raises(ValueError, match="differ"):
        k_cuda.gelu_grad(np.ones((2, 2, 3), np.float32), np.ones((), np.float32))
    with pytest.raises(ValueError, match="differ"):
        k_cuda.gelu_grad(np.ones((), np.float32), np.ones((3,), np.float32))
