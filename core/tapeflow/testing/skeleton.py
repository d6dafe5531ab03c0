"""``python -m tapeflow new-plugin NAME``: a plugin package to start from.

It writes ``DIR/NAME/`` with a ``pyproject.toml`` (distribution ``tapeflow-NAME``, entry
point ``NAME`` in the group ``tapeflow``), a package ``tapeflow_NAME`` declaring one op
with an attribute and a gradient, a CPU kernel (NumPy) and an OpenCL kernel (a
hand-written ``__kernel`` launched through ``tapeflow_opencl``'s helpers), and tests that
run the op through the plugin author's kit (``opcheck``) on every available device. The
generated tests pass as generated; replace the op with yours and keep them passing.

>>> import tempfile
>>> from tapeflow.testing.skeleton import write
>>> with tempfile.TemporaryDirectory() as d:
...     print(sorted(p.relative_to(d).as_posix() for p in write("demo_ops", d))[:3])
['demo_ops/README.md', 'demo_ops/pyproject.toml', 'demo_ops/tapeflow_demo_ops/__init__.py']
"""

from __future__ import annotations

import keyword
import pathlib
import re

__all__ = ["write", "files"]

_PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "tapeflow ops: {name}::cube"
requires-python = ">=3.10"
dependencies = ["tapeflow>=0.2,<0.3", "numpy>=2.0"]

[project.optional-dependencies]
# the OpenCL backend (PyOpenCL; [pocl] adds an OpenCL driver for the CPU)
opencl = ["tapeflow-opencl"]

# tapeflow finds the ops through this entry point: NAME = "module:Library object"
[project.entry-points.tapeflow]
{name} = "{pkg}.ops:lib"

[tool.setuptools.packages.find]
include = ["{pkg}*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

_README = '''\
# {dist}

A tapeflow plugin: the op `{name}::cube` (`scale * x**3`, with its gradient), with
kernels for `cpu` (NumPy) and `opencl` (OpenCL C). Written by
`python -m tapeflow new-plugin {name}`; see tapeflow's `docs/plugins.md`.

    python -m pip install -e .                        # into the environment that has tapeflow
    python -m tapeflow info --ops '{name}::*'         # loaded, its kernels per device
    python -m pytest                                  # the kit's checks on every device

- `{pkg}/ops.py`: the op's signature (`@lib.op()`), its gradient and the CPU kernel.
- `{pkg}/k_opencl.py`: the OpenCL kernel (PyOpenCL is imported only when it runs,
  so the plugin loads where OpenCL is absent).
- `tests/test_{name}.py`: `tapeflow.testing.opcheck` against a NumPy reference, for
  every dtype the kernels declare, with offset/transposed/broadcast views, 0-d and
  empty inputs, gradients to second order, and the error contract.

To add an op: declare it in `ops.py`, register a kernel per device type, write its
gradient with tapeflow ops (so it works on every device and differentiates again), and
add an `opcheck` test. CUDA: a kernel for `"cuda"` receives `cupy.ndarray`s (import
CuPy inside the kernel function).
'''

_INIT = '''\
"""{dist}: tapeflow ops (``{name}::cube``)."""

import tapeflow  # noqa: F401  (first: loading tapeflow's plugins imports .ops through the entry point)

from .ops import cube, lib

__all__ = ["cube", "lib"]
'''

_OPS = '''\
"""The ops of {dist}: signatures, gradients and the CPU kernels."""

import tapeflow as tf
from tapeflow.plugins import Library

from . import k_opencl

lib = Library("{name}")        # ops are named "{name}::<name>", also tf.ops.{name}.<name>


@lib.op(elementwise=True)     # each output element from its input element alone
def cube(x, scale=1.0, name=None):
    """``scale * x**3``, elementwise.

    ``scale`` is an attribute (a Python float: typed from its default, checked before
    any kernel runs).

    >>> import tapeflow as tf
    >>> from {pkg} import cube
    >>> print(cube(tf.constant([1.0, 2.0]), scale=0.5))
    tf.Tensor([0.5 4. ], shape=(2,), dtype=float32)
    """


@lib.gradient(cube)
def _cube_grad(ctx, dy):
    # written with tapeflow ops: runs on every device, and differentiates again
    x = ctx.inputs[0]
    return dy * (3.0 * ctx.attrs["scale"]) * x * x


@lib.kernel(cube, "cpu", dtypes=("float32", "float64"))
def _cube_cpu(x, scale):
    # NumPy arrays in (possibly strided views), a new array out; never write into x
    return (x * x * x * x.dtype.type(scale)).astype(x.dtype, copy=False)


lib.kernel(cube, "opencl", dtypes=("float32", "float64"))(k_opencl.cube)
'''

_K_OPENCL = '''\
"""OpenCL kernels (device type ``opencl``): a hand-written ``__kernel`` per op.

The inputs are ``pyopencl.array.Array``s as tapeflow holds them -- possibly strided
views with an offset -- so each goes through ``tapeflow_opencl.kernel_input`` (a
contiguous, offset-0 array; a copy only when needed) before the kernel indexes it.
PyOpenCL and tapeflow_opencl are imported when a kernel runs, not when the plugin loads.
"""

import numpy as np

CUBE = """
__kernel void cube(__global {{T}} *out, __global const {{T}} *x, {{T}} scale, long n) {{{{
    long i = get_global_id(0);
    if (i < n) out[i] = x[i] * x[i] * x[i] * scale;
}}}}
"""


def cube(x, scale):
    import tapeflow_opencl as tcl

    x = tcl.kernel_input(x)
    out = tcl.empty(x)                 # x's shape and dtype, from the device's memory pool
    if out.size:                       # an empty output launches nothing
        dev = tcl.device_of(x)         # .ctx, .queue, .pool, .fp64, ...
        t = "double" if x.dtype == np.float64 else "float"
        k = tcl.kernel(dev, CUBE.format(T=t), "cube",     # compiled once per device, cached
                       scalar_dtypes=[None, None, x.dtype, np.int64])
        tcl.launch(dev, k, (out.size,), None, out.data, x.data, scale, out.size)
    return out
'''

_TEST = '''\
"""{name}::cube through tapeflow's plugin author's kit, on every device under test
(``--tapeflow-device``; devices absent here are skipped with the reason)."""

import doctest

import numpy as np
import pytest

import tapeflow as tf
from tapeflow.testing import ErrorSample, Sample, opcheck
from {pkg} import cube, ops


def ref(x, scale=1.0):
    return scale * x ** 3


def samples(dtype, rng):
    """Samples for one dtype: ``dtype`` is a tapeflow DType (NumPy accepts it as a
    dtype), ``rng`` a seeded NumPy Generator. The kit adds offset, transposed and
    broadcast views of them, and 0-d and empty inputs (the op is elementwise)."""
    return [Sample((rng.uniform(-2, 2, (3, 4)).astype(dtype),)),
            Sample((rng.uniform(-2, 2, (5,)).astype(dtype),), {{"scale": 0.5}}, name="scale")]


def test_cube(tf_device):
    if tf_device.split(":")[0] not in cube.op.kernels:
        pytest.skip(f"{dist} has no kernel for {{tf_device}}")
    opcheck(cube, samples, ref=ref, op=cube.op.name, grad_order=2, devices=[tf_device],
            errors=[ErrorSample((np.arange(3, dtype=np.int32),), error=tf.errors.NotFoundError,
                                match=r"dtype in \\[float32, float64\\]")])


def test_scale_must_be_a_number():
    with pytest.raises(tf.errors.InvalidTypeError, match="attr 'scale' .* must be a real number"):
        cube(tf.constant([1.0]), scale="2")


def test_docstring_examples_run():
    assert doctest.testmod(ops).failed == 0
'''


def files(name: str) -> dict:
    """``{relative path: content}`` of the skeleton of plugin ``name``."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        raise ValueError(f"plugin name {name!r}: use lowercase letters, digits and '_', "
                         "starting with a letter (it becomes the op namespace, the entry "
                         "point and the package tapeflow_<name>)")
    if name == "tapeflow":
        raise ValueError("plugin name 'tapeflow' is the core's own namespace")
    fmt = {"name": name, "pkg": f"tapeflow_{name}", "dist": "tapeflow-" + name.replace("_", "-")}
    pkg = fmt["pkg"]
    return {
        f"{name}/pyproject.toml": _PYPROJECT.format(**fmt),
        f"{name}/README.md": _README.format(**fmt),
        f"{name}/{pkg}/__init__.py": _INIT.format(**fmt),
        f"{name}/{pkg}/ops.py": _OPS.format(**fmt),
        f"{name}/{pkg}/k_opencl.py": _K_OPENCL.format(**fmt),
        f"{name}/tests/test_{name}.py": _TEST.format(**fmt),
    }


def write(name: str, directory=".") -> list:
    """Write the skeleton of plugin ``name`` into ``directory/name``; the paths written.
    Refuses to write into an existing folder (nothing is overwritten)."""
    out = pathlib.Path(directory)
    content = files(name)
    target = out / name
    if target.exists():
        raise FileExistsError(f"{target} exists: choose another name or --dir")
    written = []
    for rel, text in content.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)
    return written
