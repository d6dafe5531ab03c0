"""tapeflow's embedded default backend: NumPy kernels on ``cpu:0``.

Registered through the entry point ``tapeflow = cpu_numpy`` and the public plugin API
only (docs/backends.md): :mod:`.plugin` adds the :class:`~.plugin.NumpyBackend` and
registers the core's array-module-generic kernels (:mod:`tapeflow.kernels`, built with
``numpy`` by ``build(ctx)``, the CuPy backend building the same sources with CuPy) in
one ``registry.add_kernels("cpu", ...)`` call. :mod:`.fusion` compiles tf.function's
elementwise groups, :mod:`.hostmem` tunes the host allocator.
"""

__version__ = "0.2.0"
