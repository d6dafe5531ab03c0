"""Build hook for the optional native CPU kernels (everything else is in pyproject.toml).

``tapeflow_cpu_numpy._cpukernels`` (``tapeflow_cpu_numpy/_c``: convolution, its filter
gradient and matmul as register-blocked SIMD GEMMs, issue 48) is optional: if it cannot
be compiled (no compiler, no Python headers), installation continues and the backend
runs its NumPy kernels (``tapeflow_cpu_numpy.native.reason()`` says why).
TAPEFLOW_STRICT_BUILD=1 (CI's native lane) makes every warning an error, and
TAPEFLOW_SANITIZE=address builds it with AddressSanitizer (docs/native.md). The SIMD
variants are chosen per function (``__attribute__((target(...)))``) and at run time, so
no flag here ties the build to the building machine's CPU.
"""

import os

from setuptools import Extension, setup

C_DIR = "tapeflow_cpu_numpy/_c"
SOURCES = [f"{C_DIR}/{name}.c" for name in ("module", "ops", "ukernels", "pool", "optim",
                                                "pooling")]
flags = ["-O3", "-pthread", "-Wall", "-Wextra", "-Wno-unused-parameter",
         "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
link = ["-pthread"]
if os.environ.get("TAPEFLOW_STRICT_BUILD", "") not in ("", "0"):
    flags.append("-Werror")
if os.environ.get("TAPEFLOW_SANITIZE"):
    flags += [f"-fsanitize={os.environ['TAPEFLOW_SANITIZE']}", "-fno-omit-frame-pointer", "-O1"]
    link += [f"-fsanitize={os.environ['TAPEFLOW_SANITIZE']}"]

setup(ext_modules=[Extension("tapeflow_cpu_numpy._cpukernels", SOURCES, include_dirs=[C_DIR],
                             depends=[f"{C_DIR}/cpukernels.h"], extra_compile_args=flags,
                             extra_link_args=link, libraries=["m"], optional=True)])
