"""Fused elementwise groups on ``cpu:0``: the ufunc chain, written into reused buffers.

The graph pass :func:`tapeflow.tracing.graph_fusion.fuse` hands a group of elementwise ops
(an :class:`~tapeflow.tracing.graph_fusion.ElementwiseSpec`) to
``NumpyBackend.fuse_elementwise``, which returns :func:`compile_spec`'s function:
the same ufuncs the unfused kernels call, in the same order, each with ``out=`` a
buffer chosen by liveness. A value's buffer goes back to a free list after its last
reader, and the next step of that dtype writes there (a ufunc may write over an input
it reads elementwise: the step's input and output are then the same array); a buffer
that ends up holding an output is never written again. A chain of ten ops therefore
allocates one array instead of ten, and the results are bitwise those of the
unfused replay (same loops, same order).

Measured with ``benchmarks/fusion_compare.py`` (2 shared cores, NumPy 2.4.6, numexpr
2.14.2), 10 float32 ops on 1M elements, median (best) per call::

    chain   fused in-place   eager          traced, unfused   numexpr (one expression)
    arith   2.46 (1.64) ms   3.23 (2.12)    20.1 (16.8)       16.9 (11.5)
    math    2.49 (2.19) ms   3.04 (2.61)    17.2 (15.3)       37.2 (32.4)

and for the ``math`` chain alone at smaller sizes (best of 5): 16384 elements, replay
36.0 us, in place 32.8 us, numexpr 409 us; 1024 elements: 10.5, 6.4 and 31.3 us. The
in-place chain wins at every size and is exact; numexpr was 5-15x *slower* here (its
float32 transcendental functions and thread start-up on a busy 2-core machine) and
differs from NumPy in the last bit, so it is not a dependency. ("traced, unfused" is
slow because the compiled replay keeps every intermediate alive until it returns.)

Supported ops: every op declared ``elementwise`` whose ``cpu`` kernel declares ``out=``
(a ufunc: ``Add``, ``Exp``, ... of :mod:`tapeflow.kernels.math`, read from the registry,
so a new elementwise ufunc op is fused with no change here) is called with ``out=`` its
buffer; the few whose kernel is not that ufunc have their one-ufunc (or in-place
two-ufunc) form here (:func:`_ufunc_table`, :data:`_SPECIAL`); any other elementwise op
with a ``cpu`` kernel runs that kernel and its result is copied into the buffer.
"""

from __future__ import annotations

import numpy as np

from tapeflow import dtypes as tf_dtypes
from tapeflow.errors import NotFoundError, UnimplementedError
from tapeflow.kernels.math import scipy_special
from tapeflow.plugins import get_op

__all__ = ["compile_spec", "fusible_op"]

_F16 = np.dtype(np.float16)
_BF16 = tf_dtypes.bfloat16.np


def _ufunc_table():
    """The ufunc of the elementwise ops whose ``cpu`` kernel is not a ufunc declaring
    ``out=`` (the others are read from the registry: :func:`_out_kernel`)."""
    # Sign's kernel also covers CuPy's complex sign; Expm1's and Tanh's real dtypes are
    # the ufunc, without out= (their complex variants take none); fusible_op excludes
    # their complex dtypes
    t = {"Sign": np.sign, "Expm1": np.expm1, "Tanh": np.tanh}
    try:            # SciPy's ufuncs, when the extra tapeflow[scipy] is installed
        sp = scipy_special("Sigmoid")
        t.update({"Sigmoid": sp.expit, "Erf": sp.erf})
    except UnimplementedError:
        pass        # Sigmoid and Erf are then left unfused
    return t


_TABLE = None


def _table():
    global _TABLE
    if _TABLE is None:
        _TABLE = _ufunc_table()
    return _TABLE


#: ops whose unfused kernel is not the plain ufunc, with the in-place form used here
_SPECIAL = ("Relu", "ReluGrad", "Relu6", "Cast", "Rsqrt", "Softplus", "SquaredDifference",
            "Round", "Pow", "SelectV2")


def fusible_op(op_name, in_dtypes, attrs):
    """Whether :func:`compile_spec` handles ``op_name`` on these input dtypes.

    >>> import numpy as np
    >>> f32 = np.dtype("float32")
    >>> fusible_op("Add", (f32, f32), {}), fusible_op("Elu", (f32,), {})   # ufunc, kernel
    (True, True)
    >>> fusible_op("MatMul", (f32, f32), {})                               # not elementwise
    False
    """
    dts = [np.dtype(d) for d in in_dtypes]
    if _BF16 in dts:
        return False        # NumPy's bfloat16 loops are slow: the kernels run in float32
    if any(d == _F16 for d in dts) and op_name in ("Sigmoid", "Erf"):
        return False        # the unfused kernels compute those in float32
    if op_name == "Pow":
        return all(d.kind == "f" for d in dts)   # integer powers check for negatives
    if op_name in ("Expm1", "Tanh") and any(d.kind == "c" for d in dts):
        return False        # the kernels fix the ufuncs' complex special cases
    return op_name in _table() or op_name in _SPECIAL or _kernel_of(op_name, dts) is not None


def _out_kernel(op_name, dts):
    """The registered cpu kernel of an op declared elementwise that takes ``out=`` (its
    KernelSpec's ``out``), when ``dts`` reach that kernel itself (not a variant); else
    None."""
    fn = _kernel_of(op_name, dts)
    if fn is None:
        return None
    entry = get_op(op_name).kernels["cpu"]
    if not entry.out or fn is not entry.fn:
        return None
    return fn


def _kernel_of(op_name, dts):
    """The registered cpu kernel of an op declared elementwise (a plugin's, or a
    built-in this module has no in-place form of), when it takes ``dts``; else None.
    Fused, it runs as is and its result is copied into the step's buffer: no dispatch
    per op, one Python call per step."""
    try:
        op = get_op(op_name)
    except NotFoundError:
        return None
    entry = op.kernels.get("cpu")
    if (not op.elementwise or entry is None or entry.needs_device
            or (entry.np_dtypes is not None and dts and dts[0] not in entry.np_dtypes)):
        return None
    return entry.fn if not (entry.variants and dts) else entry.variants.get(dts[0], entry.fn)


def _emit(step, args, out):
    """Run one step into ``out`` (which may be one of ``args``: elementwise in place)."""
    op = step.op
    t = _table()
    fn = t.get(op)
    if fn is not None:
        return fn(*args, out=out)
    if op == "Cast":
        np.copyto(out, args[0], casting="unsafe")
        return out
    if op == "Relu":
        return np.maximum(args[0], 0, out=out)
    if op == "ReluGrad":
        mask = args[1] > 0           # read x before out (which may be x) is written
        return np.multiply(args[0], mask, out=out)
    if op == "Relu6":
        np.maximum(args[0], 0, out=out)
        return np.minimum(out, 6, out=out)
    if op == "Rsqrt":
        np.sqrt(args[0], out=out)
        return np.reciprocal(out, out=out)
    if op == "Softplus":
        return np.logaddexp(out.dtype.type(0), args[0], out=out)
    if op == "SquaredDifference":
        np.subtract(args[0], args[1], out=out)
        return np.multiply(out, out, out=out)
    if op == "Round":
        if out.dtype.kind in "iu":
            np.copyto(out, args[0])
            return out
        return np.rint(args[0], out=out)
    if op == "Pow":
        return np.power(args[0], args[1], out=out)
    if op == "SelectV2":             # np.where(c, x, y) without a new array
        c, x, y = args
        if out is c:                 # (a bool select whose condition dies here)
            c = c.copy()
        if out is x:                 # x is already in place: bring y where c is false
            np.copyto(out, y, where=np.logical_not(c))
        else:
            np.copyto(out, y)
            np.copyto(out, x, where=c)
        return out
    raise NotImplementedError(op)


def _step_fn(s, dts=()):
    """``f(*args, out=buf)`` for one step: the ufunc itself where there is one."""
    fn = _table().get(s.op)
    if fn is not None:
        return fn
    attrs = dict(s.attrs)
    fn = None if s.op in _SPECIAL else _out_kernel(s.op, dts)
    if fn is not None and not attrs:
        return fn                    # the ufunc itself, with out=
    if fn is not None:
        def with_attrs(*args, out):
            return fn(*args, out=out, **attrs)
        return with_attrs
    if s.op not in _SPECIAL:
        kernel = _kernel_of(s.op, dts)

        def registered(*args, out):
            out[...] = kernel(*args, **attrs)
            return out
        return registered

    def special(*args, out):
        return _emit(s, list(args), out)
    return special


def _generate(plan, n_in, slot_dtype, shape, out_vals, arg_dtypes, out_slots, full=None):
    """Straight-line Python for the plan (no per-call interpretation: a fused chain of
    two ufuncs must cost two ufunc calls, as in hand-written NumPy). ``out=``: the
    outputs' arrays (one array, or a tuple for several), written into instead of new
    ones (tf.function's buffer plan). ``full``: an input of the group's shape when
    traced, whose shape at the call is the buffers' (a value of data-dependent shape,
    ``tf.boolean_mask``'s, has another length at each call); None: ``shape``."""
    ns = {"empty": np.empty, "shape": shape}
    lines = [f"def run({''.join(f'v{i}, ' for i in range(n_in))}out=None):",
             f"    shape = v{full}.shape" if full is not None else "    pass",
             "    if out is None:"]
    for j, d in enumerate(slot_dtype):
        ns[f"d{j}"] = d
        if j in out_slots:
            lines.append(f"        b{j} = empty(shape, d{j})")
    if len(out_slots) == 1:
        lines += ["    else:", f"        b{out_slots[0]} = out"]
    else:
        lines += ["    else:", "        " + "".join(f"b{j}, " for j in out_slots) + "= out"]
    for j in range(len(slot_dtype)):
        if j not in out_slots:
            lines.append(f"    b{j} = empty(shape, d{j})")
    for k, (s, args, slot) in enumerate(plan):
        ns[f"f{k}"] = _step_fn(s, [np.dtype(d) for d in arg_dtypes[k]])
        lines.append(f"    v{n_in + k} = f{k}({', '.join(f'v{a}' for a in args)}, out=b{slot})")
    if len(out_vals) == 1:
        lines.append(f"    return v{out_vals[0]}")
    else:
        lines.append("    return (" + "".join(f"v{o}, " for o in out_vals) + ")")
    exec(compile("\n".join(lines) + "\n", "<tapeflow fused NumPy chain>", "exec"), ns)
    return ns["run"]


def compile_spec(spec):
    """A function ``run(*arrays)`` evaluating ``spec`` (see the module doc), or None.

    >>> import numpy as np
    >>> from tapeflow.tracing.graph_fusion import ElementwiseSpec, Step
    >>> f32 = np.dtype("float32")
    >>> spec = ElementwiseSpec([((3,), f32), ((), f32)],
    ...                        [Step("Mul", (0, 1), {}, f32, (3,)),
    ...                         Step("Add", (2, 1), {}, f32, (3,))], [3], (3,))
    >>> compile_spec(spec)(np.arange(3, dtype=f32), np.float32(2))
    array([2., 4., 6.], dtype=float32)
    """
    for s in spec.steps:
        dts = [spec.value_dtype(a) for a in s.args]
        if not fusible_op(s.op, dts, s.attrs):
            return None
    n_in = len(spec.inputs)
    last = spec.last_uses()
    outputs = set(spec.outputs)
    shape = tuple(spec.shape)
    # a static plan: for each step, which buffer slot it writes; slots are allocated
    # per call (np.empty), so buffers returned from one call are never touched again
    slot_dtype = []
    free: dict = {}                   # dtype -> [slot]
    slot_of: dict = {}                # value -> slot
    plan = []
    for k, s in enumerate(spec.steps):
        v = n_in + k
        # inputs that die here free their slots first: the step may write over them
        for a in set(s.args):
            if a >= n_in and last.get(a) == k and a not in outputs:
                free.setdefault(slot_dtype[slot_of[a]], []).append(slot_of[a])
        pool = free.get(s.dtype)
        if pool:
            slot = pool.pop()
        else:
            slot = len(slot_dtype)
            slot_dtype.append(s.dtype)
        slot_of[v] = slot
        plan.append((s, tuple(s.args), slot))
        if v not in outputs and last.get(v) is None:      # unused (dce normally drops it)
            free.setdefault(s.dtype, []).append(slot)
    out_vals = list(spec.outputs)
    arg_dtypes = [[spec.value_dtype(a) for a in s.args] for s in spec.steps]
    out_slots = [slot_of[v] for v in out_vals]
    full = next((j for j, (s, _) in enumerate(spec.inputs) if tuple(s) == shape), None)
    run = _generate(plan, n_in, slot_dtype, shape, out_vals, arg_dtypes, out_slots, full)
    # for the buffer-reuse pass: the outputs are new arrays that share memory with
    # nothing, and the inputs are only read; for the buffer plan: ``out=`` is taken
    # (never one of the inputs: an output's slot is written before the last read)
    run._tapeflow_fresh = True
    run._tapeflow_inplace = True
    run._tapeflow_out = True
    return run
