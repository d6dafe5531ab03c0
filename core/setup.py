"""Build hook for the optional C fast path (everything else is in pyproject.toml).

`tapeflow.runtime._speedups` is optional: if it cannot be compiled (no compiler, no
Python headers), installation continues and tapeflow uses the pure-Python path.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tapeflow.runtime._speedups", ["tapeflow/runtime/_speedups.c"],
                             optional=True)])
