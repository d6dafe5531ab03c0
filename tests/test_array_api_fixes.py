"""What the array API standard's own suite (scripts/array_api_suite.py, issue 31) found in
tapeflow.numpy and the Tensor object, each pinned here so the project's tests keep it
without the vendored suite: floor division's and complex expm1/tanh's special cases,
the shift operators, indexing with 0-d masks, x[key] = value of bool tensors and of
Python scalars, copies that are new objects, the accumulation dtypes of sum/prod/
trace/the cumulative functions, creation of empty unsigned arrays, the complex
pseudo-inverse, the DLPack signature and the per-device dtype list.
"""

import inspect
import math
import os
import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

import tapeflow as tf
import tapeflow.numpy as tnp

inf, nan = math.inf, math.nan
DEVICES = ["cpu:0", "opencl:0"]

def _same(got, want):
    """Equal values, NaN where NaN, and the sign of every zero."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    for g, w in zip(got.reshape(-1), want.reshape(-1)):
        for a, b in ((g.real, w.real), (g.imag, w.imag)):
            if math.isnan(b):
                assert math.isnan(a), (got, want)
            else:
                assert a == b and math.copysign(1, a) == math.copysign(1, b), (got, want)


# --- floor division: the standard's table for infinite operands ---------------------------

FLOORDIV_CASES = [  # x1, x2, x1 // x2 (the array API's special cases)
    (inf, 2.0, inf), (inf, -2.0, -inf), (-inf, 2.0, -inf), (-inf, -2.0, inf),
    (1.0, inf, 0.0), (1.0, -inf, -0.0), (-1.0, inf, -0.0), (-1.0, -inf, 0.0),
    (0.0, inf, 0.0), (-0.0, inf, -0.0), (inf, inf, nan), (inf, 0.0, inf),
    (7.0, 2.0, 3.0), (-7.0, 2.0, -4.0), (nan, inf, nan), (inf, nan, nan),
]


@pytest.mark.parametrize("dev", ["cpu:0", "opencl:0"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_floor_divide_special_cases(dev, dtype):
    a, b, want = (np.array(c, dtype) for c in zip(*FLOORDIV_CASES))
    with np.errstate(all="ignore"), tf.device(dev):
        x1, x2 = tnp.asarray(a), tnp.asarray(b)
        got_fn = tnp.floor_divide(x1, x2).numpy()
        got_op = (x1 // x2).numpy()
        y = tnp.asarray(a)
        y //= x2
        got_iop = y.numpy()
    for got in (got_fn, got_op, got_iop):
        _same(got, want)


def test_floor_divide_of_integers_is_unchanged():
    x = tnp.asarray([7, -7, 0], dtype=tnp.int32)
    assert (x // 2).numpy().tolist() == [3, -4, 0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="division by zero"):
        tnp.floor_divide(x, tnp.asarray(0, dtype=tnp.int32))


# --- complex expm1 and tanh ------------------------------------------------------------------

EXPM1_CASES = [  # z, expm1(z) (the standard's table; -1 + 0j where it says "-1 + 0j")
    (complex(0.0, 0.0), complex(0.0, 0.0)), (complex(-0.0, 0.0), complex(0.0, 0.0)),
    (complex(inf, 0.0), complex(inf, 0.0)), (complex(-inf, inf), complex(-1.0, 0.0)),
    (complex(-inf, nan), complex(-1.0, 0.0)), (complex(nan, 0.0), complex(nan, 0.0)),
    (complex(1.0, inf), complex(nan, nan)), (complex(nan, 1.0), complex(nan, nan)),
    (complex(1000.0, 0.0), complex(inf, 0.0)), (complex(1000.0, -0.0), complex(inf, -0.0)),
]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_expm1_special_cases(dtype):
    z = np.array([c[0] for c in EXPM1_CASES], dtype)
    with np.errstate(all="ignore"):
        got = tnp.expm1(tnp.asarray(z)).numpy()
        _same(got, np.array([c[1] for c in EXPM1_CASES], dtype))
        # +inf + yj: inf * cis(y) (infinite parts, their signs cos y's and sin y's)
        got = tnp.expm1(tnp.asarray(np.array([complex(inf, 2.0)], dtype))).numpy()
        # 0-d inputs (a NumPy scalar result inside the kernel)
        zero_d = complex(tnp.expm1(tnp.asarray(np.array(complex(inf, 0), dtype))))
    assert got[0].real == -inf and got[0].imag == inf
    assert got.dtype == dtype
    assert zero_d == complex(inf, 0)
    w = np.array([0.5 + 0.25j, -1e-8 + 1e-8j], dtype)
    np.testing.assert_allclose(tnp.expm1(tnp.asarray(w)).numpy(), np.expm1(w),
                               rtol=1e-6 if dtype == "complex64" else 1e-14)


def test_complex_tanh_at_infinite_real_part():
    z = np.array([complex(inf, 1.0), complex(inf, 1e300), complex(inf, -2.0),
                  complex(-inf, 3.0), complex(inf, inf), complex(inf, nan)])
    with np.errstate(all="ignore"):
        got = tnp.tanh(tnp.asarray(z)).numpy()
    assert got.real.tolist() == [1.0, 1.0, 1.0, -1.0, 1.0, 1.0]
    assert got.imag.tolist() == [0.0] * 6
    assert [math.copysign(1, v) for v in got.imag[:4]] == [1.0, 1.0, -1.0, 1.0]
    assert complex(tnp.tanh(tnp.asarray(np.complex128(complex(inf, 1.0))))) == 1.0


def test_traced_complex_expm1_keeps_the_special_cases():
    """tf.function's elementwise fusion on cpu:0 runs the kernel, not NumPy's ufunc."""
    z = tnp.asarray(np.array([complex(inf, 0.0), complex(-inf, nan)]))

    @tf.function
    def f(z):
        return tnp.tanh(tnp.expm1(z) * 1.0) + tnp.expm1(z)

    with np.errstate(all="ignore"):
        eager = (tnp.tanh(tnp.expm1(z) * 1.0) + tnp.expm1(z)).numpy()
        traced = f(z).numpy()
    _same(traced, eager)
    _same(eager, np.array([complex(inf, 0.0), complex(-1.7615941559557649, 0.0)]))


# --- the shift operators -----------------------------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES)
def test_shift_operators(dev):
    with tf.device(dev):
        x = tnp.asarray([1, 2, -8], dtype=tnp.int16)
        assert (x << 2).numpy().tolist() == [4, 8, -32]
        assert (x >> 1).numpy().tolist() == [0, 1, -4]
        assert (x << tnp.asarray([0, 1, 2], dtype=tnp.int16)).numpy().tolist() == [1, 4, -32]
        assert (3 << tnp.asarray([1, 2])).numpy().tolist() == [6, 12]       # reflected
        assert (64 >> tnp.asarray([1, 2])).numpy().tolist() == [32, 16]
        y = x
        y <<= 1
        assert y.numpy().tolist() == [2, 4, -16] and x.numpy().tolist() == [1, 2, -8]
        y >>= 2
        assert y.numpy().tolist() == [0, 1, -4]
        v = tf.Variable([1, 2])
        assert (v << 1).numpy().tolist() == [2, 4] and (8 >> v).numpy().tolist() == [4, 2]
    for name in ("__lshift__", "__rshift__", "__rlshift__", "__rrshift__"):
        assert hasattr(tf.Tensor, name) and hasattr(tf.Variable, name)
    with pytest.raises(tf.errors.TapeflowError):
        tnp.asarray([1.0]) << 1                     # floats do not shift


@pytest.mark.parametrize("dev", DEVICES)
def test_bitwise_operators_on_integers_and_logical_on_bools(dev):
    with tf.device(dev):
        a = tnp.asarray([6, 3], dtype=tnp.int8)
        assert (a & 3).numpy().tolist() == [2, 3] and (5 & a).numpy().tolist() == [4, 1]
        assert (a | 8).numpy().tolist() == [14, 11] and (a ^ 1).numpy().tolist() == [7, 2]
        assert (~a).numpy().tolist() == [-7, -4]
        y = a
        y &= tnp.asarray([2, 2], dtype=tnp.int8)
        assert y.numpy().tolist() == [2, 2]
        b = tnp.asarray([True, False])
        assert (~b).numpy().tolist() == [False, True] and (b & True).numpy().tolist() == [
            True, False]
        assert (True ^ b).numpy().tolist() == [False, True] and (b | b).dtype == tnp.bool
        v = tf.Variable([6, 3])
        assert (v & 2).numpy().tolist() == [2, 2] and (~v).numpy().tolist() == [-7, -4]
    with pytest.raises(tf.errors.TapeflowError):
        tnp.asarray([1.0]) & tnp.asarray([1.0])     # floats have neither


def test_take_counts_negative_indices_from_the_end():
    x = tnp.asarray([1, 2, 3])
    assert tnp.take(x, tnp.asarray([0, -1, -3])).numpy().tolist() == [1, 3, 1]
    m = tnp.asarray([[1, 2], [3, 4]])
    assert tnp.take(m, tnp.asarray([-1]), axis=1).numpy().tolist() == [[2], [4]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="-4 is not in"):
        tnp.take(x, tnp.asarray([-4]))


# --- indexing and x[key] = value -----------------------------------------------------------

@pytest.mark.parametrize("dev", DEVICES)
def test_zero_d_boolean_masks_index_like_numpy(dev):
    with tf.device(dev):
        x = tnp.asarray(3.0)
        assert x[tnp.asarray(False)].shape == (0,)
        assert x[tnp.asarray(True)].numpy().tolist() == [3.0]
        m = tnp.asarray([[1, 2]])
        assert m[tnp.asarray(True)].shape == np.asarray([[1, 2]])[np.True_].shape == (1, 1, 2)
        assert m[np.False_].shape == (0, 1, 2)


@pytest.mark.parametrize("dev", DEVICES)
def test_setitem_of_bool_tensors(dev):
    with tf.device(dev):
        x = tnp.asarray(False)
        x[()] = True
        assert x.numpy().tolist() is True and x.dtype == tnp.bool
        y = tnp.asarray([True, False, False])
        y[tnp.asarray([False, True, False])] = True
        assert y.numpy().tolist() == [True, True, False] and y.dtype == tnp.bool
        z = tnp.asarray([], dtype=tnp.bool)
        z[tnp.asarray([], dtype=tnp.bool)] = False
        assert z.shape == (0,)


@pytest.mark.parametrize("dev", DEVICES)
def test_setitem_of_python_scalars_uses_the_tensors_dtype(dev):
    with tf.device(dev):
        u = tnp.asarray([1, 2], dtype=tnp.uint8)
        u[0] = 0                                    # was an int32 value: refused
        u[1] = 255
        assert u.numpy().tolist() == [0, 255] and u.dtype == tnp.uint8
        d = tnp.asarray([0.0], dtype=tnp.float64)
        d[0] = 1 / 3                                # was rounded through float32
        assert d.numpy()[0] == 1 / 3
        f = tnp.asarray([1.0, 2.0])
        f[1] = 7                                    # an int into a float tensor
        assert f.numpy().tolist() == [1.0, 7.0] and f.dtype == tnp.float32
        with pytest.raises(tf.errors.InvalidArgumentError, match="300 does not fit a uint8"):
            u[0] = 300
        with pytest.raises(tf.errors.InvalidTypeError, match="does not fit a uint8"):
            u[0] = 1.5


def test_copies_are_new_objects():
    x = tnp.asarray([1, 2])
    for y in (tnp.asarray(x, copy=True), tnp.astype(x, tnp.int64, copy=True)):
        assert y is not x
    y = tnp.asarray(x, copy=True)
    z = tnp.astype(x, x.dtype)                      # copy=True is astype's default
    x[0] = 5
    assert y.numpy().tolist() == [1, 2] and z.numpy().tolist() == [1, 2]
    assert tnp.asarray(x) is x and tnp.astype(x, x.dtype, copy=False) is x
    assert x.numpy().tolist() == [5, 2]


# --- accumulation dtypes ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype, want", [("uint8", "uint64"), ("uint32", "uint64"),
                                         ("int8", "int64"), ("float32", "float32"),
                                         ("complex64", "complex64")])
def test_sums_and_products_accumulate_in_the_default_dtypes(dtype, want):
    x = tnp.asarray(np.array([[1, 2], [3, 4]], dtype))
    assert tnp.sum(x).dtype.name == want and tnp.prod(x).dtype.name == want
    assert tnp.linalg.trace(x).dtype.name == want
    assert int(tnp.linalg.trace(x).numpy().real) == 5
    c = tnp.cumulative_sum(x, axis=1, include_initial=True)
    assert c.dtype.name == want and c.numpy().real.tolist() == [[0, 1, 3], [0, 3, 7]]
    p = tnp.cumulative_prod(x, axis=0, include_initial=True)
    assert p.dtype.name == want and p.numpy().real.tolist() == [[1, 1], [1, 2], [3, 8]]
    assert tnp.sum(x, dtype=tnp.float64).dtype == tnp.float64
    assert tnp.linalg.trace(x, dtype=tnp.float64).dtype == tnp.float64


def test_cumulative_functions_of_complex_values():
    z = tnp.asarray(np.array([1 + 1j, 2j, -1], np.complex64))
    np.testing.assert_allclose(tnp.cumulative_sum(z).numpy(), np.cumsum(z.numpy()))
    np.testing.assert_allclose(tnp.cumulative_prod(z).numpy(), np.cumprod(z.numpy()))
    e = tnp.cumulative_sum(tnp.asarray(np.zeros(0, np.complex128)), include_initial=True)
    assert e.numpy().tolist() == [0j] and e.dtype == tnp.complex128


# --- creation -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "int16", "bool", "float64"])
def test_empty_creation_in_every_dtype(dtype):
    dt = getattr(tnp, dtype)
    assert tnp.asarray([], dtype=dt).dtype == dt and tnp.asarray([[]], dtype=dt).shape == (1, 0)
    assert tnp.eye(0, dtype=dt).shape == (0, 0) and tnp.eye(0, dtype=dt).dtype == dt
    assert tnp.eye(2, 3, k=1, dtype=dt).numpy().tolist() == np.eye(2, 3, k=1, dtype=dtype).tolist()
    if dtype != "bool":
        assert tnp.arange(0, 0, 1, dtype=dt).shape == (0,)


# --- linalg.pinv of complex matrices -----------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [("complex64", 2e-5), ("complex128", 1e-12)])
def test_pinv_of_complex_matrices(dtype, tol):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((2, 3, 4)) + 1j * rng.standard_normal((2, 3, 4))).astype(dtype)
    a[1, 2] = a[1, 0] * (1 - 2j)                    # a rank-deficient one too
    got = tnp.linalg.pinv(tnp.asarray(a))
    assert got.dtype.name == dtype and got.shape == (2, 4, 3)
    # the full-rank one as NumPy's (whose default cutoff, 1e-15, would keep the rounding
    # noise singular value of the rank-deficient complex64 one; the standard's drops it)
    np.testing.assert_allclose(got.numpy()[0], np.linalg.pinv(a[0]), atol=tol * 10,
                               rtol=tol * 10)
    p = got.numpy().astype(np.complex128)           # the Moore-Penrose conditions
    np.testing.assert_allclose(a @ p @ a, a, atol=tol * 10)
    np.testing.assert_allclose(p @ a @ p, p, atol=tol * 10)
    np.testing.assert_allclose(a @ p, np.conj(np.swapaxes(a @ p, -1, -2)), atol=tol * 10)


# --- DLPack and the info object ---------------------------------------------------------------

def test_dlpack_signature_is_the_standards():
    sig = inspect.signature(tf.Tensor.__dlpack__)
    params = list(sig.parameters.values())[1:]
    assert [(p.name, p.kind, p.default) for p in params] == [
        (n, inspect.Parameter.KEYWORD_ONLY, None)
        for n in ("stream", "max_version", "dl_device", "copy")]
    x = tnp.asarray([1.0, 2.0])
    assert np.from_dlpack(x).tolist() == [1.0, 2.0]
    assert x.__dlpack__(stream=None, max_version=(1, 0), copy=None) is not None
    with pytest.raises(TypeError):
        x.__dlpack__(None)                          # keyword-only, as the standard says


def test_info_dtypes_per_device():
    info = tnp.__array_namespace_info__()
    every = info.dtypes()
    assert "float64" in every and "complex128" in every and "float16" not in every
    for dev in info.devices():
        for name, dt in info.dtypes(device=dev).items():
            assert every[name] is dt
            with tf.device(dev):                    # each listed dtype can be created there
                assert tnp.zeros(2, dtype=dt).dtype is dt
    assert info.dtypes(device="cpu:0") == every


def test_from_dlpack_of_an_opencl_tensor_stays_on_its_device():
    """OpenCL has no DLPack (its __dlpack__ is a host copy): from_dlpack of a tapeflow
    opencl tensor keeps it there, as the standard says a same-device import does."""
    with tf.device("opencl:0"):
        x = tnp.asarray([1.0, 2.0])
    y = tnp.from_dlpack(x)
    assert y.device == "opencl:0" and y is not x and y.numpy().tolist() == [1.0, 2.0]
    assert tnp.from_dlpack(x, device="opencl:0", copy=False).device == "opencl:0"
    z = tnp.from_dlpack(x, device="cpu:0")
    assert z.device == "cpu:0" and z.numpy().tolist() == [1.0, 2.0]
    with pytest.raises(tf.errors.InvalidArgumentError, match="cannot move opencl:0"):
        tnp.from_dlpack(x, device="cpu:0", copy=False)
    x[0] = 5.0                                      # y is a value of its own
    assert y.numpy().tolist() == [1.0, 2.0]


# --- the standard's suite: its runner and its expected-failure lists ---------------------------

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _documented_suite_commands():
    """The commands of docs/array-api.md's block that runs the standard's suite."""
    text = (ROOT / "docs" / "array-api.md").read_text()
    m = re.search(r"```sh tested-by=tests/test_array_api_fixes.py::"
                  r"test_the_documented_suite_commands_run\n(.*?)```", text, re.S)
    assert m, "docs/array-api.md lost the block with the suite's commands"
    return [ln for ln in m.group(1).splitlines() if ln.strip()]


def test_the_documented_suite_commands_run(tmp_path):
    """Each command of the page, on a small part of the suite (so the test takes seconds;
    the whole suite is scripts/dev.sh's own step): it unpacks the archive, runs the
    suite's tests on the named device and exits 0."""
    cmds = _documented_suite_commands()
    assert any("--device opencl:0" in c for c in cmds) and len(cmds) == 2
    for cmd in cmds:
        env = {k: v for k, v in os.environ.items() if k != "TAPEFLOW_DEFAULT_DEVICE"}
        words = shlex.split(cmd)
        while "=" in words[0]:                      # VAR=value prefixes
            k, v = words.pop(0).split("=", 1)
            env[k] = v
        assert words[:2] == [".venv/bin/python", "scripts/array_api_suite.py"], cmd
        run = subprocess.run(
            [sys.executable, *words[1:], "--max-examples", "1", "-n", "0",
             "--build-dir", str(tmp_path), "--", "array_api_tests/test_has_names.py",
             "-k", "shift or floor_divide"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-3000:]
        assert re.search(r"\b[1-9]\d* passed\b", out) and " failed" not in out, out[-3000:]
        device = "opencl:0" if "opencl" in cmd else "cpu:0"
        assert f"array API suite on {device}: pytest exit status 0" in out


@pytest.mark.parametrize("kind", ["cpu", "opencl"])
def test_each_expected_failure_says_why(kind):
    """tests/array_api_suite/xfails-<kind>.txt: the suite reads every line that is not a
    comment as a test id, so a reason must be a comment line above its ids."""
    lines = (ROOT / "tests" / "array_api_suite" / f"xfails-{kind}.txt").read_text()
    lines = lines.splitlines()
    assert lines and lines[0].startswith("#")
    for i, ln in enumerate(lines):
        if ln.strip() and not ln.startswith("#"):
            assert ln.startswith("array_api_tests/test_") and "#" not in ln, ln
            above = [p for p in lines[:i] if not p.startswith("array_api_tests/")]
            assert above and above[-1].startswith("#"), ln


def test_the_documented_strict_comparison_is_the_runners_settings():
    """docs/array-api.md compares with array-api-strict through the suite the runner
    unpacks, at the runner's settings (the numbers are comparable only then)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("array_api_suite",
                                                  ROOT / "scripts" / "array_api_suite.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    text = (ROOT / "docs" / "array-api.md").read_text()
    m = re.search(r"```sh tested-by=tests/test_array_api_fixes.py::"
                  r"test_the_documented_strict_comparison_is_the_runners_settings\n(.*?)```",
                  text, re.S)
    assert m
    block = m.group(1)
    assert f"build/array_api_suite/{runner.ARCHIVE.name.removesuffix('.tar.gz')}/" in block
    assert runner.ARCHIVE.is_file()
    source = (ROOT / "scripts" / "array_api_suite.py").read_text()
    for flag in ("--hypothesis-seed=0", "--hypothesis-disable-deadline"):
        assert flag in block and flag in source
    assert "--max-examples=5" in block and 'p.add_argument("--max-examples", type=int, ' \
        'default=5' in source
    assert "ARRAY_API_TESTS_MODULE=array_api_strict" in block


def test_operators_promote_by_the_tf_lattice_and_functions_by_the_standards():
    """One lattice, two modes (docs/dtypes.md): ``a + b`` is a ``tf.*`` op (int32 with
    float32 is float32), ``tnp.add`` the namespace's (NumPy's float64 where the standard
    leaves it open); within a kind they agree."""
    import tapeflow.numpy as tnp
    i = tnp.asarray([1, 2], dtype=tnp.int32)
    f = tnp.asarray([0.5, 1.5], dtype=tnp.float32)
    assert (i + f).dtype == tnp.float32 and tnp.add(i, f).dtype == tnp.float64
    assert (i * 2.5).dtype == tnp.float32 and tnp.multiply(i, 2.5).dtype == tnp.float64
    np.testing.assert_array_equal(tnp.add(i, f).numpy(), [1.5, 3.5])
    u = tnp.asarray([1], dtype=tnp.uint8)
    assert (u + tnp.asarray([1], dtype=tnp.int8)).dtype == tnp.int16
    assert tnp.add(u, tnp.asarray([1], dtype=tnp.int8)).dtype == tnp.int16


def test_namespace_modules_do_not_import_the_package():
    """tapeflow.numpy is split by concern; linalg and fft import the modules they use,
    not the package that imports them."""
    import tapeflow.numpy as tnp
    for mod in (tnp.linalg, tnp.fft, *(sys.modules[f"tapeflow.numpy.{m}"] for m in (
            "_elementwise", "_arrays", "_statistics"))):
        src = pathlib.Path(mod.__file__).read_text()
        assert not re.search(r"^from \. import", src, re.M), mod.__name__
