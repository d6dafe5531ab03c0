"""tapeflow's embedded default backend: NumPy kernels on ``cpu:0``.

Registered through the entry point ``tapeflow = cpu_numpy`` and the public
plugin API only. Kernel modules (``k_*.py``) are written against an array
module ``xp`` (``build(xp)``) so the CuPy backend can reuse them where NumPy and
CuPy agree.
"""

__version__ = "0.2.0"
