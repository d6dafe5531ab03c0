"""The OpenCL backend (``tapeflow-opencl``): plugin, devices, copies, dtypes, caches.

Two groups:

* tests that need only the plugin installed: it loads, and reports ``opencl``
  unavailable *with the reason* when PyOpenCL or a driver is missing (checked in a
  subprocess where PyOpenCL cannot be imported), and honours ``PYOPENCL_CTX``;
* tests that need an OpenCL device (PoCL on the CPU in CI): skipped, with the
  reason printed, where there is none.

The op-by-op comparison with NumPy for every dtype is the conformance suite
(``tests/conformance``), which runs on ``opencl:0`` automatically when it exists.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.errors import InvalidArgumentError, NotFoundError, UnimplementedError


def _status():
    try:
        from tapeflow_opencl import plugin
    except ImportError as e:
        return None, (f"tapeflow-opencl is not installed ({e}); "
                      "pip install -e 'backends/opencl[pocl]'")
    info = {p.name: p for p in tf.plugins.plugin_report()}.get("opencl")
    if info is None:
        return None, "the entry point 'opencl' was not loaded"
    if info.status != "loaded":
        return None, f"plugin 'opencl' {info.status}: {info.reason}"
    reason = plugin.unavailable_reason()
    if reason:
        return plugin, f"opencl:0 unavailable: {reason}"
    return plugin, None


PLUGIN, REASON = _status()
needs_plugin = pytest.mark.skipif(PLUGIN is None, reason=str(REASON))
needs_device = pytest.mark.skipif(REASON is not None, reason=str(REASON))

DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    for k in [k for k, v in e.items() if v is None]:
        del e[k]
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=e, timeout=120)


# --- the plugin, with or without a device ------------------------------------------------

#: the host ops that make strings of other dtypes (strings live on the host)
MAKE_STRINGS = {"AsString", "StringFormat", "UnicodeEncode"}


@needs_plugin
def test_plugin_registers_backend_and_kernels():
    from tapeflow.runtime.devices import table
    from tapeflow_opencl.backend import BACKEND
    assert BACKEND in table.backends
    assert (BACKEND.name, BACKEND.device_type) == ("opencl", "opencl")
    # every op of the standard set has an opencl kernel, but the declared ones (which the
    # conformance suite marks as known gaps) and the string ops (strings live on the host)
    missing = {op.name for op in tf.runtime.registry.OPS.values()
               if "cpu" in op.kernels and "opencl" not in op.kernels and "::" not in op.name
               and op.kernels["cpu"].dtypes != (tf.string,) and op.name not in MAKE_STRINGS}
    assert missing == PLUGIN.OPS_WITHOUT_KERNEL
    assert PLUGIN.SKIPPED == []


@needs_plugin
def test_every_kernel_has_a_name_of_its_own():
    """Tracebacks and profiles name each OpenCL kernel (issue 35): no kernel, variant
    or the kernel a wrapper wraps is a closure of a factory (``build.<locals>.k``)."""
    bad = []
    for op_name, spec in PLUGIN.kernel_table().items():
        fns = [spec.fn, *(spec.variants or {}).values()]
        while fns:
            fn = fns.pop()
            name = getattr(fn, "__qualname__", None)
            if not name or "<locals>" in name:
                bad.append(f"{op_name}: {name or repr(fn)}")
            if getattr(fn, "__wrapped__", None) is not None:
                fns.append(fn.__wrapped__)
    assert not bad, "kernels without a name of their own:\n" + "\n".join(sorted(bad))


@needs_plugin
def test_every_kernel_module_builds_kernel_specs_of_its_class():
    """The one kernel contract (issue 44): each ``k_*.py`` module's ``build(ctx)`` returns
    ``{op name: KernelSpec}`` whose kernels are documented methods of the module's one
    ``*Kernels`` class (a family's method bound with ``runtime.bind``), and the plugin
    registers exactly :func:`kernel_table` (its dtypes, variants, ``out=``...)."""
    import functools
    import importlib

    from tapeflow.plugins import KernelSpec
    ctx = PLUGIN.build_context()
    assert ctx.xp is None and ctx.device_type == "opencl" and ctx.runtime is not None
    bad, seen = [], set()
    for name in PLUGIN.KERNEL_MODULES:
        mod = importlib.import_module(f"tapeflow_opencl.{name}")
        classes = [v for k, v in vars(mod).items() if k.endswith("Kernels")
                   and isinstance(v, type) and v.__module__ == mod.__name__]
        if len(classes) != 1:
            bad.append(f"{name}: kernel classes {[c.__name__ for c in classes]}")
            continue
        for op_name, spec in mod.build(ctx).items():
            seen.add(op_name)
            fn = spec.fn if isinstance(spec, KernelSpec) else None
            fn = fn.func if isinstance(fn, functools.partial) else fn
            if getattr(fn, "__self__", None).__class__ is not classes[0]:
                bad.append(f"{name}: {op_name}: {spec!r} is not a KernelSpec of a method "
                           f"of {classes[0].__name__}")
            elif not (fn.__doc__ or "").strip():
                bad.append(f"{name}: {op_name}: {fn.__qualname__} has no docstring")
    assert not bad, "\n".join(bad)
    table = PLUGIN.kernel_table(ctx)
    assert set(table) == seen
    for op_name, spec in table.items():
        registered = tf.plugins.get_op(op_name).kernels["opencl"]
        assert registered.dtypes == spec.dtypes, op_name
        assert (registered.needs_device, registered.out, registered.fresh) == \
            (spec.needs_device, spec.out, spec.fresh), op_name
        assert set(registered.variants or {}) == set(spec.variants or {}), op_name


@needs_plugin
def test_without_pyopencl_the_plugin_loads_and_says_why(tmp_path):
    # a sitecustomize that makes `import pyopencl` fail, as on a machine without it
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['pyopencl'] = None\n")
    r = _run("""
        import tapeflow as tf
        from tapeflow_opencl import plugin
        print("REASON", plugin.unavailable_reason())
        print("DEVICES", [d.name for d in tf.list_devices()])
        print("KERNELS", sum("opencl" in op.kernels for op in tf.runtime.registry.OPS.values()))
    """, PYTHONPATH=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "REASON PyOpenCL is not installed" in r.stdout
    assert "opencl:0" not in r.stdout.split("DEVICES")[1].splitlines()[0]
    assert int(r.stdout.split("KERNELS")[1].split()[0]) >= 120
    info = subprocess.run([sys.executable, "-m", "tapeflow", "info"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert "opencl (device type 'opencl'): UNAVAILABLE: PyOpenCL is not installed" in info.stdout


@needs_device
def test_pyopencl_ctx_selects_devices():
    code = """
        import tapeflow as tf
        from tapeflow_opencl import plugin
        print(plugin.unavailable_reason(), [d.name for d in tf.list_devices()
                                            if d.type == "opencl"])
    """
    # (platform 0 may be PoCL or a GPU driver: either way one device, opencl:0)
    r = _run(code, PYOPENCL_CTX="0:0")
    assert "None ['opencl:0']" in r.stdout, r.stdout + r.stderr
    r = _run(code, PYOPENCL_CTX="7")
    assert "PYOPENCL_CTX='7' selects none" in r.stdout, r.stdout + r.stderr
    # a part of the platform's name, as PyOpenCL's own PYOPENCL_CTX takes it
    from tapeflow_opencl import runtime as rt
    name = rt.platforms()[0].name
    r = _run(code, PYOPENCL_CTX=name.split()[0].upper())
    assert "None ['opencl:0'" in r.stdout, r.stdout + r.stderr
    r = _run(code, PYOPENCL_CTX="no such platform")
    assert "selects none" in r.stdout, r.stdout + r.stderr


@needs_device
def test_a_device_whose_driver_cannot_compile_is_left_out_with_the_reason(tmp_path):
    # a probe kernel no compiler accepts fakes a driver that cannot compile for this CPU
    # (the PoCL 3.0 wheel on CPUs newer than its LLVM 14); an empty cache: no marker
    code = """
        import tapeflow_opencl.runtime as rt
        rt.PROBE_SOURCE = "__kernel void tapeflow_probe(__global float *a) { a[0] = nope(); }"
        import tapeflow as tf
        from tapeflow_opencl import plugin
        print("DEVICES", [d.name for d in tf.list_devices()])
        print("PHYSICAL", [d.name.split(":", 1)[1].lower()
                           for d in tf.config.list_physical_devices()])
        print("REASON", plugin.unavailable_reason())
    """
    r = _run(code, TAPEFLOW_CACHE_DIR=str(tmp_path), POCL_CACHE_DIR=None)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    devices = out.split("DEVICES ")[1].splitlines()[0]
    physical = out.split("PHYSICAL ")[1].splitlines()[0]
    assert "cpu:0" in devices and "opencl" not in devices          # (a GPU machine: cuda:0 too)
    assert physical == devices                                      # tf.config agrees
    reason = out.split("REASON ")[1]
    assert reason.startswith("no usable OpenCL device: ")
    assert "cannot compile or run a one-line kernel: " in reason and "nope" in reason
    assert "pip install 'tapeflow-opencl[intel]'" in reason
    assert "__kernel" not in reason                    # the compiler's error, not the source
    assert not (tmp_path / "opencl-probe").exists() or not any(
        (tmp_path / "opencl-probe").iterdir())         # a failure is not remembered
    info = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import tapeflow_opencl.runtime as rt
        rt.PROBE_SOURCE = "__kernel void tapeflow_probe(__global float *a) { a[0] = nope(); }"
        import sys
        from tapeflow.__main__ import main
        sys.exit(main(["info"]))
    """)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "TAPEFLOW_CACHE_DIR": str(tmp_path)})
    assert "opencl (device type 'opencl'): UNAVAILABLE: no usable OpenCL device" in info.stdout
    assert "opencl:0   " not in info.stdout


@needs_device
def test_the_probe_passes_once_and_is_remembered(tmp_path):
    code = """
        import tapeflow as tf
        print("DEVICES", [d.name for d in tf.list_devices() if d.type == "opencl"])
    """
    r = _run(code, TAPEFLOW_CACHE_DIR=str(tmp_path), POCL_CACHE_DIR=None)
    assert r.returncode == 0 and "opencl:0" in r.stdout, r.stdout + r.stderr
    markers = list((tmp_path / "opencl-probe").iterdir())
    n = r.stdout.count("opencl:")
    assert len(markers) == n                           # one per device that passed
    from tapeflow_opencl import runtime as rt
    h = tf.runtime.devices.get_device("opencl:0").handle
    assert rt.probe(h) is None


def test_drivers_installed_by_pip_are_registered_without_root(tmp_path, monkeypatch):
    from tapeflow_opencl import runtime as rt
    prefix, system = tmp_path / "venv", tmp_path / "vendors"
    (prefix / "lib").mkdir(parents=True)
    system.mkdir()
    (system / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    monkeypatch.setenv("TAPEFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    # no pip driver in the environment: nothing to do
    assert rt.register_pip_drivers(str(prefix), str(system)) is None
    assert "OCL_ICD_VENDORS" not in os.environ
    (prefix / "lib" / "libintelocl.so").write_bytes(b"")
    d = rt.register_pip_drivers(str(prefix), str(system))
    assert os.environ["OCL_ICD_VENDORS"] == d
    files = {n: open(os.path.join(d, n)).read() for n in os.listdir(d)}
    assert files == {"tapeflow-pip-libintelocl.icd": f"{prefix}/lib/libintelocl.so\n",
                     "nvidia.icd": "libnvidia-opencl.so.1\n"}   # system drivers kept
    # the user's own choice wins
    monkeypatch.setenv("OCL_ICD_VENDORS", "/somewhere")
    assert rt.register_pip_drivers(str(prefix), str(system)) is None
    assert os.environ["OCL_ICD_VENDORS"] == "/somewhere"


# --- with a device --------------------------------------------------------------------------

@needs_device
def test_device_naming_and_gpu_alias():
    d = tf.runtime.devices.get_device("opencl:0")
    assert d.type == "opencl" and d.backend.name == "opencl"
    assert tf.runtime.devices.get_device("/device:OPENCL:0") is d
    h = d.handle
    if h.is_gpu:
        assert d in tf.runtime.devices.table.gpus
    else:   # a CPU device (PoCL) is opencl:N only
        assert d not in tf.runtime.devices.table.gpus
        assert d.gpu_index is None


@needs_device
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(dtype):
    rng = np.random.default_rng(0)
    host = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype)
    with tf.device("opencl:0"):
        t = tf.constant(host)
    assert t.device == "opencl:0"
    assert t.dtype.name == dtype
    out = t.numpy()
    assert out.dtype == host.dtype and out.shape == host.shape
    np.testing.assert_array_equal(out, host)
    back = t.cpu()
    assert back.device == "cpu:0"
    np.testing.assert_array_equal(back.numpy(), host)
    np.testing.assert_array_equal(tf.constant(host).to("opencl:0").numpy(), host)


@needs_device
def test_scalars_and_empty_arrays():
    with tf.device("opencl:0"):
        s = tf.constant(2.5)
        e = tf.zeros((0, 3))
        assert s.shape == () and float(s) == 2.5 and bool(s > 1.0)
        assert e.numpy().shape == (0, 3)
        assert (e + 1.0).numpy().shape == (0, 3)
        assert str(s * 2.0) == "tf.Tensor(5.0, shape=(), dtype=float32)"


@needs_device
def test_views_are_zero_copy_and_read_back_correctly():
    host = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    with tf.device("opencl:0"):
        t = tf.constant(host)
        v = tf.transpose(t, [2, 0, 1])[1:4, :, ::2]
        np.testing.assert_array_equal(v.numpy(), host.transpose(2, 0, 1)[1:4, :, ::2])
        np.testing.assert_array_equal((v * 2.0).numpy(), host.transpose(2, 0, 1)[1:4, :, ::2] * 2)
        # the transpose shares the buffer: no copy was made
        assert tf.transpose(t)._data.base_data is t._data.base_data


@needs_device
def test_float16_is_a_clear_unimplemented_error():
    dev = tf.runtime.devices.get_device("opencl:0")
    if dev.handle.fp16:   # (Intel's runtime: float16 is computed in float32, tests/conformance)
        pytest.skip(f"{dev.handle.cl_device.name} has cl_khr_fp16")
    x = tf.constant(np.ones(3, np.float16))
    with pytest.raises(UnimplementedError, match=r"float16 is not supported on opencl:0 .*"
                                                 r"cl_khr_fp16.*cast to float32"):
        x.to("opencl:0")
    assert "float16" in dev.backend.dtype_unsupported(dev, tf.float16)
    assert dev.backend.dtype_unsupported(dev, tf.float32) is None


_BF16_EDGES = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, -1.01171875, 3.0e38, 3.4e38,
                        np.inf, -np.inf, np.nan, -np.nan, 1e-40, -1e-45, 65504.0, 2.0 ** -133],
                       np.float32)


@needs_device
def test_bfloat16_rounds_like_ml_dtypes_both_ways():
    """bfloat16 is 16-bit words on the device: float32 -> bfloat16 rounds to nearest even
    (ties 1 + 2**-8 down, 1 + 3 * 2**-8 up), overflows to inf, keeps NaN a NaN and
    subnormals exact; back to float32 is exact; every dtype casts both ways."""
    import ml_dtypes
    want = _BF16_EDGES.astype(ml_dtypes.bfloat16)
    with tf.device("opencl:0"):
        t = tf.cast(tf.constant(_BF16_EDGES), tf.bfloat16)
        assert t.dtype is tf.bfloat16 and t.device == "opencl:0"
        got = t.numpy()
        np.testing.assert_array_equal(got.view(np.uint16)[~np.isnan(_BF16_EDGES)],
                                      want.view(np.uint16)[~np.isnan(_BF16_EDGES)])
        assert np.isnan(got.astype(np.float32)[np.isnan(_BF16_EDGES)]).all()
        np.testing.assert_array_equal(tf.cast(t, tf.float32).numpy(), want.astype(np.float32))
        # the host's bits go up unchanged and come back unchanged
        np.testing.assert_array_equal(tf.constant(want).numpy().view(np.uint16)[:10],
                                      want.view(np.uint16)[:10])
        small = tf.constant(np.array([0, 1, -2, 3.5, 100.25], np.float32))
        for dt in ("float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                   "uint16", "uint32", "uint64", "bool"):
            src = tf.cast(tf.abs(small) if dt.startswith("uint") else small, dt)
            b = tf.cast(src, tf.bfloat16)
            np.testing.assert_array_equal(b.numpy(), src.numpy().astype(ml_dtypes.bfloat16))
            np.testing.assert_array_equal(tf.cast(b, dt).numpy(),
                                          b.numpy().astype(np.float32).astype(dt))


@needs_device
def test_bfloat16_ops_without_an_opencl_kernel_say_so():
    with tf.device("opencl:0"):
        a = tf.cast(tf.eye(3) * 2.0, tf.bfloat16)
        with pytest.raises(NotFoundError, match=r"Cholesky.*opencl.*bfloat16"):
            tf.linalg.cholesky(a)


@needs_device
def test_errors_name_op_and_device():
    with tf.device("opencl:0"):
        a = tf.ones((2, 3))
        b = tf.ones((4, 3))
        with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes.*opencl:0"):
            a + b
        with pytest.raises(InvalidArgumentError, match=r"Integer division by zero.*opencl:0"):
            tf.constant([1, 2]) // tf.constant([1, 0])


@needs_device
def test_memory_is_returned_to_the_pool():
    dev = tf.runtime.devices.get_device("opencl:0")
    gc.collect()
    before = tf.config.memory_info("opencl:0")["current"]
    with tf.device("opencl:0"):
        t = tf.ones((1024, 1024))
    during = tf.config.memory_info("opencl:0")["current"]
    assert during - before >= 4 * 1024 * 1024
    del t
    gc.collect()
    assert tf.config.memory_info("opencl:0")["current"] <= before
    dev.backend.free_cached_memory(dev)
    assert tf.config.memory_info("opencl:0")["pool_total"] >= 0


@needs_device
def test_variables_live_and_update_on_the_device():
    with tf.device("opencl:0"):
        v = tf.Variable([1.0, 2.0])
        v.assign_add([1.0, 1.0])
        v.assign_sub([0.5, 0.5])
    assert v.device == "opencl:0"
    np.testing.assert_array_equal(v.numpy(), [1.5, 2.5])


@needs_device
def test_compiled_programs_are_cached_on_disk(tmp_path):
    code = """
        import time, tapeflow as tf
        t0 = time.perf_counter()
        with tf.device("opencl:0"):
            y = tf.constant([1.0, 2.0]) * 3.0 + 1.0
            y.numpy()
        print("SECONDS", time.perf_counter() - t0)
    """
    # (this process set POCL_CACHE_DIR when it loaded PyOpenCL: the child must not inherit it)
    env = {"TAPEFLOW_CACHE_DIR": str(tmp_path), "POCL_CACHE_DIR": None}
    r = _run(code, **env)
    assert r.returncode == 0, r.stderr
    # PyOpenCL leaves caching to drivers that cache builds themselves (PoCL, NVIDIA) and
    # keeps a binary cache for the others: either way the files land in the tapeflow cache
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files, "no compiled program was cached under TAPEFLOW_CACHE_DIR"
    if "Portable Computing Language" in r.stdout + _run(
            "import pyopencl as cl; print(cl.get_platforms()[0].name)").stdout:
        assert any("pocl" in p.parts for p in files), files
    r2 = _run(code, **env)
    assert r2.returncode == 0, r2.stderr


@needs_device
def test_mixed_devices_copy_or_fail_as_the_policy_says():
    c = tf.constant([1.0, 2.0])
    with tf.device("opencl:0"):
        o = tf.constant([10.0, 20.0])
        r = o + c.to("opencl:0")
    assert r.device == "opencl:0"
    np.testing.assert_array_equal(r.numpy(), [11.0, 22.0])


@needs_device
def test_info_shows_the_device_and_full_coverage():
    r = subprocess.run([sys.executable, "-m", "tapeflow", "info", "--json"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    be = {b["name"]: b for b in data["backends"]}["opencl"]
    assert be["available"] and be["devices"][0]["name"] == "opencl:0"
    assert "fp64" in be["devices"][0]["description"]


# --- the kernel author's helpers (issue 19; docs/plugins.md section 2) ----------------------

@needs_device
def test_kernel_input_gives_offset_zero_contiguous_arrays_where_views_have_offsets():
    import pyopencl.array as cla
    from pyopencl.elementwise import ElementwiseKernel

    import tapeflow_opencl as tcl
    with tf.device("opencl:0"):
        m = tf.reshape(tf.range(12.0), [3, 4])
        rows = m[1:]                     # contiguous, starting at element 4
        cols = tf.transpose(m)[1:]       # strided, with an offset
    for t, want in ((rows, np.arange(12.0).reshape(3, 4)[1:]),
                    (cols, np.arange(12.0).reshape(3, 4).T[1:])):
        a = t._data
        assert a.offset != 0
        k = ElementwiseKernel(a.context, "float *y, const float *x", "y[i] = x[i]", "cp")
        if tcl.contiguous(a) is a:       # contiguous, yet its `.data` is refused:
            with pytest.raises(cla.ArrayHasOffsetError):     # what authors hit
                a.data
        b = tcl.kernel_input(a)
        assert b.data is not None
        assert b.offset == 0 and b.flags.c_contiguous and b.shape == a.shape
        out = tcl.empty(b)
        k(out, b, queue=b.queue)
        np.testing.assert_array_equal(out.get(), want)
    fresh = tcl.empty(rows._data, (5,), np.int32)
    assert tcl.kernel_input(fresh) is fresh
    h = tcl.device_of(fresh)
    assert h.name == "opencl:0" and h.queue is fresh.queue and h.ctx == fresh.context


# --- factorisations and data-dependent sizes (k_lapack.py, k_scan.py) -----------------------

def _orthonormal_columns(q, atol):
    eye = np.eye(q.shape[-1])
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q,
                               np.broadcast_to(eye, q.shape[:-2] + eye.shape), atol=atol)


@needs_device
@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 6, 4), (5, 5), (1, 1), (3, 0), (0, 3),
                                   (80, 6)])
def test_svd_and_qr_match_lapack(shape, dtype, tol):
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)
    k = min(shape[-2:])
    for full in (False, True):
        with tf.device("opencl:0"):
            s, u, v = (t.numpy() for t in tf.linalg.svd(x, full_matrices=full))
            q, r = (t.numpy() for t in tf.linalg.qr(x, full_matrices=full))
        ru, rs, rvh = np.linalg.svd(x, full_matrices=full)
        assert (u.shape, s.shape, v.shape) == (ru.shape, rs.shape, np.swapaxes(rvh, -1, -2).shape)
        np.testing.assert_allclose(s, rs, rtol=tol * 10, atol=tol * 10)
        np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ np.swapaxes(v[..., :k], -1, -2),
                                   x, atol=tol * 50)
        _orthonormal_columns(u, tol * 50)            # full U: the completed columns too
        _orthonormal_columns(v, tol * 50)
        rq, rr = np.linalg.qr(x, mode="complete" if full else "reduced")
        # Householder as LAPACK makes it: the same factors, signs included
        np.testing.assert_allclose(q, rq, atol=tol * 50)
        np.testing.assert_allclose(r, rr, atol=tol * 50)


@needs_device
def test_svd_of_rank_deficient_matrices_has_orthonormal_vectors():
    for x in (np.ones((4, 3), np.float32), np.zeros((3, 3), np.float32),
              np.outer(np.arange(1.0, 6.0), [1.0, -2.0, 0.5]).astype(np.float64)):
        with tf.device("opencl:0"):
            s, u, v = (t.numpy() for t in tf.linalg.svd(x))
        np.testing.assert_allclose(s, np.linalg.svd(x, compute_uv=False), atol=1e-5)
        _orthonormal_columns(u, 1e-5)
        _orthonormal_columns(v, 1e-5)
        np.testing.assert_allclose((u * s) @ v.T, x, atol=1e-5)


@needs_device
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-11)])
def test_cholesky_and_eigh_match_lapack(dtype, tol):
    x = np.random.default_rng(3).standard_normal((3, 6, 6)).astype(dtype)
    a = x @ np.swapaxes(x, -1, -2) + np.eye(6, dtype=dtype)
    a_lower = np.tril(a) + np.triu(np.full_like(a, 7.0), 1)    # only the lower triangle is read
    with tf.device("opencl:0"):
        chol = tf.linalg.cholesky(a_lower).numpy()
        w, v = (t.numpy() for t in tf.linalg.eigh(a_lower))
    np.testing.assert_allclose(chol, np.linalg.cholesky(a), rtol=tol, atol=tol)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=tol, atol=tol)
    np.testing.assert_allclose((v * w[..., None, :]) @ np.swapaxes(v, -1, -2), a, rtol=tol,
                               atol=tol)
    bad = np.stack([np.eye(2), -np.eye(2)]).astype(dtype)           # the second is not SPD
    with tf.device("opencl:0"), pytest.raises(InvalidArgumentError, match="positive definite"):
        tf.linalg.cholesky(bad)


@needs_device
@pytest.mark.parametrize("x", [
    np.array([3, 1, 2, 3, 1, 1], np.int32),
    np.array([np.nan, 1.0, np.nan, -0.0, 0.0, 1.0], np.float32),   # every NaN its own value
    np.random.default_rng(1).integers(0, 5, (7, 9)).astype(np.int64),
    np.random.default_rng(2).random((3, 4)) > 0.5,
    np.random.default_rng(3).integers(0, 3, (100_001,)).astype(np.uint8),   # many chunks
    np.array(5.0), np.zeros((0, 3), np.float32)], ids=lambda x: f"{x.dtype}{x.shape}")
def test_unique_all_and_nonzero_match_numpy(x):
    import tapeflow.numpy as tnp
    with tf.device("opencl:0"):
        t = tnp.asarray(x)
        got = [a.numpy() for a in tnp.unique_all(t)]
        nz = [a.numpy() for a in tnp.nonzero(t)] if x.ndim else None
    want = np.unique(x.reshape(-1), return_index=True, return_inverse=True, return_counts=True,
                     equal_nan=False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.reshape(-1), np.asarray(w).reshape(-1))
    assert got[2].shape == x.shape
    if nz is not None:
        for g, w in zip(nz, np.nonzero(x)):
            np.testing.assert_array_equal(g, w)


@needs_device
@pytest.mark.parametrize("scale,dtype", [(1.0, np.float32), (1e-42, np.float32),
                                         (1e140, np.float64), (1e-300, np.float64)])
def test_factorisations_of_huge_and_tiny_matrices(scale, dtype):
    """The kernels work on A / max|A|: no overflow or underflow where LAPACK has none."""
    a = (np.array([[1e20, 2e20], [3e20, 5e20], [1e20, 0.0]]) * scale).astype(dtype)
    with tf.device("opencl:0"):
        s = tf.linalg.svd(a, compute_uv=False).numpy()
        q, r = (t.numpy() for t in tf.linalg.qr(a))
    want = np.linalg.svd(a.astype(np.float64), compute_uv=False)
    np.testing.assert_allclose(s, want, rtol=1e-5)
    np.testing.assert_allclose(r, np.linalg.qr(a.astype(np.float64))[1], rtol=1e-5,
                               atol=1e-5 * np.abs(a).max())
    np.testing.assert_allclose(q @ r, a, rtol=1e-5, atol=1e-5 * np.abs(a).max())


# --- complex numbers and the Fourier transforms -----------------------------------------------

def _cplx(rng, shape, dtype, lo=-2.0, hi=2.0):
    return (rng.uniform(lo, hi, shape) + 1j * rng.uniform(lo, hi, shape)).astype(dtype)


_CTOL = {np.complex64: 2e-5, np.complex128: 1e-12}


@needs_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_elementwise_beyond_the_conformance_specs_match_numpy(dtype):
    """The complex functions the conformance specs do not sample (float2/double2 kernels,
    tapeflow_opencl.cplx), on values off the branch cuts."""
    import tapeflow.numpy as tnp
    rng = np.random.default_rng(3)
    a = _cplx(rng, (3, 4), dtype, 0.1, 0.9)
    b = _cplx(rng, (3, 4), dtype, 0.1, 0.9)
    ops = {"cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
           "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
           "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
           "expm1": np.expm1, "log1p": np.log1p, "log2": np.log2, "log10": np.log10,
           "reciprocal": np.reciprocal}
    with tf.device("opencl:0"):
        x, y = tnp.asarray(a), tnp.asarray(b)
        for name, ref in ops.items():
            got = getattr(tnp, name)(x).numpy()
            assert got.dtype == dtype, name
            np.testing.assert_allclose(got, ref(a), rtol=_CTOL[dtype], atol=_CTOL[dtype],
                                       err_msg=name)
        np.testing.assert_allclose(tnp.pow(x, y).numpy(), a ** b, rtol=_CTOL[dtype] * 10)
        np.testing.assert_allclose(tnp.pow(x, 3 + 0j).numpy(), a ** 3, rtol=_CTOL[dtype])
        special = tnp.asarray(np.array([1, np.inf, 1j * np.nan, 2 + 1j], dtype))
        assert tnp.isfinite(special).numpy().tolist() == [True, False, False, True]
        assert tnp.isinf(special).numpy().tolist() == [False, True, False, False]
        assert (x != y).numpy().all() and not (x != x).numpy().any()
        assert (x == tnp.asarray(a)).numpy().all()
        # casts: complex -> real keeps the real part (TensorFlow's rule, as on cpu:0)
        np.testing.assert_array_equal(tf.cast(x, tf.float64).numpy(), a.real.astype(np.float64))
        np.testing.assert_array_equal(tf.cast(x, tf.bfloat16).numpy().astype(np.float32),
                                      a.real.astype(tf.bfloat16.np).astype(np.float32))
        np.testing.assert_array_equal(
            tf.cast(tf.constant([1.5, -2.0], tf.bfloat16), tf.as_dtype(dtype)).numpy(),
            np.array([1.5, -2.0], dtype))
        other = np.complex128 if dtype == np.complex64 else np.complex64
        np.testing.assert_array_equal(tf.cast(x, tf.as_dtype(other)).numpy(), a.astype(other))


@needs_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_tensors_move_like_on_the_cpu(dtype):
    """Reshapes, transposes, slices, gathers, pads, fills, eye, scatters, cumulative sums...
    of float2/double2 buffers give cpu:0's results bit for bit."""
    import tapeflow.numpy as tnp
    rng = np.random.default_rng(4)
    a = _cplx(rng, (3, 4), dtype)
    a[0, 1] = 0
    res = {}
    for dev in ("cpu:0", "opencl:0"):
        with tf.device(dev):
            x = tf.constant(a)
            r = [tf.reshape(x, [4, 3]), tf.transpose(x), tf.concat([x, x], 1), tf.stack([x, x]),
                 *tf.unstack(x), *tf.split(x, 2, axis=1), tf.tile(x, [2, 1]),
                 tf.pad(x, [[1, 0], [0, 2]]), x[1:, ::2], tf.gather(x, [2, 0]),
                 tf.gather_nd(x, [[1, 2]]),
                 tf.where(tf.constant([True, False, True, True]), x, tf.zeros_like(x)),
                 tf.ones_like(x), tf.eye(3, dtype=tf.as_dtype(dtype)),
                 tf.fill([2], tf.constant(1 + 2j, dtype=tf.as_dtype(dtype))),
                 tf.broadcast_to(x[0], [2, 4]), tf.squeeze(tf.expand_dims(x, 0)),
                 # sums of selected elements, on each part (cplx.BY_PARTS), and Where
                 tf.math.add_n([x, x, x]), tnp.cumulative_sum(x, axis=1),
                 tf.math.unsorted_segment_sum(x, [0, 1, 0], 2),
                 tf.scatter_nd([[1], [0]], x[:2], [3, 4]), tf.where(x),
                 tf.one_hot([0, 2], 3, on_value=tf.constant(1 + 2j, x.dtype),
                            off_value=tf.constant(0j, x.dtype), dtype=x.dtype)]
            res[dev] = [t.numpy() for t in r]
    for i, (want, got) in enumerate(zip(res["cpu:0"], res["opencl:0"])):
        assert got.dtype == want.dtype and got.shape == want.shape, i
        np.testing.assert_array_equal(got, want, err_msg=str(i))


@needs_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_reductions_and_products_of_many_elements(dtype):
    """Sums, means and products long enough for the work-group and two-pass reductions,
    cumulative products, and matmul/einsum beyond the specs' small samples."""
    import tapeflow.numpy as tnp
    rng = np.random.default_rng(5)
    a = _cplx(rng, (40, 3000), dtype)
    m = _cplx(rng, (2, 30, 40), dtype)
    tol = _CTOL[dtype] * 10
    with tf.device("opencl:0"):
        x = tf.constant(a)
        np.testing.assert_allclose(tf.reduce_sum(x).numpy(), a.sum(), rtol=tol)
        np.testing.assert_allclose(tf.reduce_sum(x, axis=0).numpy(), a.sum(0), rtol=tol)
        np.testing.assert_allclose(tf.reduce_mean(x, axis=1).numpy(), a.mean(1), rtol=tol)
        p = a[:, :8] / np.abs(a[:, :8])
        np.testing.assert_allclose(tf.reduce_prod(tf.constant(p)).numpy(), p.prod(), rtol=tol)
        np.testing.assert_allclose(tnp.cumulative_prod(tf.constant(p), axis=1).numpy(),
                                   np.cumprod(p, axis=1), rtol=tol)
        np.testing.assert_allclose(tf.matmul(tf.constant(m), x[:, :50]).numpy(),
                                   m @ a[:, :50], rtol=tol, atol=tol)
        np.testing.assert_allclose(tf.einsum("bij,jk->bik", tf.constant(m), x[:, :5]).numpy(),
                                   np.einsum("bij,jk->bik", m, a[:, :5]), rtol=tol, atol=tol)


@needs_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("n,local", [(1, True), (2, True), (7, True), (16, True), (60, True),
                                     (64, True), (97, True), (1000, True), (1024, True),
                                     (2, False), (1024, False), (1000, False)])
def test_fft_lengths_match_pocketfft(dtype, n, local, monkeypatch):
    """Every path of the 1-D transform (tapeflow_opencl.k_fft): radix-2 Stockham (powers
    of two; in local memory, and one launch per pass as for rows too long for it), the
    direct DFT (other lengths up to DIRECT_MAX) and Bluestein (longer ones), forward and
    inverse, real-to-complex and back."""
    import tapeflow.numpy as tnp
    from tapeflow_opencl import k_fft
    assert k_fft.DIRECT_MAX < 97
    monkeypatch.setattr(k_fft, "LOCAL_ROWS", local)
    rng = np.random.default_rng(n)
    a = _cplx(rng, (3, n), dtype)
    r = a.real.copy()
    tol = 40 * np.finfo(r.dtype).eps * max(1.0, np.log2(n))
    with tf.device("opencl:0"):
        x, xr = tnp.asarray(a), tnp.asarray(r)
        for got, want in [(tnp.fft.fft(x), np.fft.fft(a)), (tnp.fft.ifft(x), np.fft.ifft(a)),
                          (tnp.fft.rfft(xr), np.fft.rfft(r)),
                          (tnp.fft.irfft(x, n=2 * n - 1), np.fft.irfft(a, n=2 * n - 1)),
                          (tnp.fft.irfft(x, n=n + 2), np.fft.irfft(a, n=n + 2)),
                          (tnp.fft.fft(x, norm="ortho"), np.fft.fft(a, norm="ortho"))]:
            got = got.numpy()
            assert got.shape == want.shape
            assert got.dtype == (dtype if want.dtype.kind == "c" else r.dtype)
            err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
            assert err < tol, (n, err)


@needs_device
def test_fft_over_several_and_negative_axes_of_strided_views():
    import tapeflow.numpy as tnp
    rng = np.random.default_rng(6)
    a = _cplx(rng, (6, 5, 8), np.complex128)
    with tf.device("opencl:0"):
        x = tnp.asarray(a)
        v = tf.transpose(x, [2, 0, 1])[1:]               # a strided view with an offset
        av = np.transpose(a, [2, 0, 1])[1:]
        np.testing.assert_allclose(tnp.fft.fftn(v, axes=(0, -1)).numpy(),
                                   np.fft.fftn(av, axes=(0, -1)), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tnp.fft.irfftn(v, s=(4, 9), axes=(-2, 0)).numpy(),
                                   np.fft.irfftn(av, s=(4, 9), axes=(-2, 0)),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tnp.fft.rfftn(tf.math.real(v), axes=(1, 2),
                                                 norm="forward").numpy(),
                                   np.fft.rfftn(av.real, axes=(1, 2), norm="forward"),
                                   rtol=1e-12, atol=1e-12)


@needs_device
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_inverse_functions_on_their_branch_cuts(dtype):
    """The side of a cut is the sign of the zero part (C99, NumPy): asin(2 + 0j) is
    pi/2 + 1.317j and asin(2 - 0j) pi/2 - 1.317j; acosh(-2 - 0j) is 1.317 - pi j. A
    complex 1 + 0i added to z turned -0 into +0 (the fuzzer found asin on cpu and
    opencl disagreeing); large parts must not overflow z * z in complex64."""
    import tapeflow.numpy as tnp
    vals = [complex(a, b) for a in (-0.0, 0.0, -2.0, 2.0, 0.5, -1.5, 3e5)
            for b in (-0.0, 0.0, -2.0, 2.0, 0.5, 7e5)]
    a = np.array(vals, dtype)
    tol = _CTOL[dtype] * 10
    with tf.device("opencl:0"):
        x = tnp.asarray(a)
        for name, ref in {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
                          "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
                          "sqrt": np.sqrt, "log": np.log}.items():
            np.testing.assert_allclose(getattr(tnp, name)(x).numpy(), ref(a), rtol=tol,
                                       atol=tol, err_msg=name)


@needs_device
@pytest.mark.parametrize("attrs,match", [({"norm": "sideways"}, "Invalid norm value"),
                                         ({"axes": (5,)}, "axes"), ({"n": 0}, "FFT data points")])
def test_fft_ops_reject_bad_attributes_as_on_the_cpu(attrs, match):
    """Called without tnp.fft's checks (the bad-input fuzzer does), the OpenCL transforms
    refuse what NumPy refuses on cpu:0, instead of computing something."""
    from tapeflow.runtime.dispatch import execute
    from tapeflow.runtime.registry import OPS
    op = "IRFFT" if "n" in attrs else "RFFT"
    full = dict({"axes": (-1,), "norm": "backward"}, **({"n": 4} if op == "IRFFT" else {}))
    full.update(attrs)
    for dev in ("cpu:0", "opencl:0"):
        with tf.device(dev):
            x = tf.ones([2, 3], tf.complex64 if op == "IRFFT" else tf.float32)
            with pytest.raises(InvalidArgumentError):
                execute(OPS[op], (x,), full)
    with tf.device("opencl:0"), pytest.raises(InvalidArgumentError, match=match):
        execute(OPS[op], (tf.ones([2, 3], tf.complex64 if op == "IRFFT" else tf.float32),),
                full)


@needs_device
def test_leaky_relu_grad_takes_the_features_shape_as_on_the_cpu():
    """The bad-input fuzzer's case: gradients that do not broadcast to the features'
    shape are refused on both devices (cpu:0's kernel multiplies in place)."""
    from tapeflow.runtime.dispatch import execute
    from tapeflow.runtime.registry import OPS
    for dev in ("cpu:0", "opencl:0"):
        with tf.device(dev):
            dy, x = tf.ones([2, 2, 3]), tf.constant([-1.0, 0.5, 2.0])
            with pytest.raises(InvalidArgumentError):
                execute(OPS["LeakyReluGrad"], (dy, x), {"alpha": 0.2})
            got = execute(OPS["LeakyReluGrad"], (x, dy), {"alpha": 0.2}).numpy()
            np.testing.assert_allclose(got, np.broadcast_to([-1.0, 0.5, 2.0], (2, 2, 3)))


@needs_device
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_orders_nan_last_as_numpy(side):
    # the bad-input fuzzer found SearchSorted(a, nan) 0 on OpenCL and len(a) on the CPU
    a = np.array([1.0, 2.0, np.inf, np.nan], np.float32)
    v = np.array([np.nan, 0.5, 2.0, np.inf, -np.inf], np.float32)
    with tf.device("opencl:0"):
        got = tf.searchsorted(tf.constant(a), tf.constant(v), side=side).numpy()
    np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
    with tf.device("opencl:0"):
        ints = tf.searchsorted(tf.constant([1, 3, 3, 7]), tf.constant([3, 0, 9]), side=side)
    np.testing.assert_array_equal(ints.numpy(), np.searchsorted([1, 3, 3, 7], [3, 0, 9],
                                                                  side=side))
