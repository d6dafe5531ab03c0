"""A differential test of tracing: seeded random programs run eagerly and traced,
compared value for value (issue 43).

``tf.function`` replays a graph that its passes rewrote (:mod:`tapeflow.tracing.graph_passes`),
with buffers kept from call to call (:mod:`tapeflow.tracing.memory_plan`), and
differentiates a call from outside through a program of its own
(:meth:`~tapeflow.tracing.concrete.ConcreteFunction._call_recorded`). Each of those is
an optimisation of eager execution, so eager execution is the oracle: a program must
give the same values, gradients, errors and Variable states traced as eagerly, and
nothing it returned may change afterwards.

:func:`generate` makes a :class:`Program` from a seed: straight-line code over ``n x n``
matrices, columns and scalars -- elementwise chains with broadcasting, ``MatMul``, a
``Conv2D`` with bias and activation, reductions, softmax and sparse cross-entropy,
views and reshapes (transpose, reversed columns, reshape round trips, slices joined
again), ops of a variable number of outputs (``split``, ``unstack``), reads and
assignments of Variables (captured, or passed as arguments; from values and from
other Variables),
random ops with op seeds, a ``Gather`` whose index argument goes out of range at
some call (an error both sides must raise), nested ``tf.function`` s, ``tf.cond``
and ``tf.while_loop`` with bodies of their own -- and the way to run it (also drawn
from the seed): the graph passes (any subset, or ``optimize=False``), the buffer
plan on or off, the traced or op-by-op backward of a call under a tape, which of the
outer and inner functions are traced, a ``GradientTape`` outside the call
(persistent or not) and/or inside it, several calls with different arguments, and
for programs without side effects, calls from two threads at once.

:func:`check` runs one program both ways and returns the :class:`Finding` s (an
empty list when they agree). Each finding names the seed; ``python
scripts/trace_hunt.py --replay SEED`` runs that program again and prints it.

>>> from tapeflow.testing import tracediff
>>> prog = tracediff.generate(7)
>>> tracediff.check(prog)
[]

Coverage is checked by planting bugs: :data:`PLANTS` holds, for each pass and for the
programs around them, a plausible wrong version (a read folded into a constant, an
assignment dropped, a kernel that writes into its input...); ``tests/test_trace_differential.py``
installs each and requires a sample of programs to find it.
"""

from __future__ import annotations

from .check import Finding, check, run_many
from .plants import PLANTS
from .programs import PASSES, Program, describe, generate

__all__ = ["Program", "Finding", "generate", "check", "describe", "PASSES", "PLANTS",
           "run_many"]
