"""Build hook for the optional C core (everything else is in pyproject.toml).

`tapeflow.runtime._speedups` is optional: if it cannot be compiled (no compiler, no
Python headers), installation continues and tapeflow uses the pure-Python path.
TAPEFLOW_STRICT_BUILD=1 (CI's native lane) makes every warning an error, and
TAPEFLOW_SANITIZE=address builds it with AddressSanitizer (docs/native.md).
"""

import os

from setuptools import Extension, setup

C_DIR = "tapeflow/runtime/_c"
SOURCES = [f"{C_DIR}/{name}.c" for name in ("module", "tensor", "dispatch", "tape")]
flags = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers",
         "-Wno-cast-function-type"]
link = []
if os.environ.get("TAPEFLOW_STRICT_BUILD", "") not in ("", "0"):
    flags.append("-Werror")
if os.environ.get("TAPEFLOW_SANITIZE"):
    flags += [f"-fsanitize={os.environ['TAPEFLOW_SANITIZE']}", "-fno-omit-frame-pointer", "-O1"]
    link += [f"-fsanitize={os.environ['TAPEFLOW_SANITIZE']}"]

setup(ext_modules=[Extension("tapeflow.runtime._speedups", SOURCES, include_dirs=[C_DIR],
                             depends=[f"{C_DIR}/speedups.h"], extra_compile_args=flags,
                             extra_link_args=link, optional=True)])
