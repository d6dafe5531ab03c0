"""A differential test of tracing: seeded random programs run eagerly and traced,
compared value for value (issue 43).

``tf.function`` replays a graph that its passes rewrote (:mod:`tapeflow.tracing.graph_passes`),
with buffers kept from call to call (:mod:`tapeflow.tracing.concrete`), and
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

The package: this module is the test (:func:`check`, :func:`run_many`, :data:`PLANTS`);
:mod:`tapeflow.testing.tracediff.programs` draws the programs and runs their
statements with tapeflow ops (eagerly, or inside ``tf.function``: the same Python).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import numpy as np

import tapeflow as tf
from tapeflow.errors import TapeflowError
from tapeflow.runtime.devices import current_device
from tapeflow.tracing import ConcreteFunction, graph_passes
from tapeflow.tracing import concrete as memory_plan

from .programs import PASSES, Program, _config, _Env, _function, _loss, _run, describe, generate

__all__ = ["Program", "Finding", "generate", "check", "describe", "PASSES", "PLANTS",
           "run_many"]


# --- running a program eagerly and traced, and comparing: check() -------------------------

@dataclass
class Finding:
    """A disagreement between the eager run and the traced run of a program."""
    seed: int
    what: str
    detail: str
    config: str = ""

    def __str__(self):
        return (f"seed {self.seed}: {self.what}: {self.detail}\n  ({self.config}; replay: "
                f"python scripts/trace_hunt.py --replay {self.seed})")


class _Runner:
    """One run of a program (eager or traced): ``call(k)`` runs its call ``k``."""

    def __init__(self, prog, traced):
        self.prog = prog
        self.traced = traced
        self.env = env = _Env(prog, traced)
        env.index = None
        self.weights = None
        gather = bool(prog.gather_calls)

        def body(*args):
            # arguments: the tensors, the Gather's index (if any), Variables passed in
            n_args = prog.n_args
            xs = list(args[:n_args])
            rest = list(args[n_args:])
            saved_vars, saved_index = env.vars, env.index
            if gather:
                env.index = rest.pop(0)
            var_args = iter(rest)
            env.vars = [next(var_args) if a else v for v, a in zip(saved_vars, prog.var_as_arg)]
            try:
                if prog.inner_tape:
                    with tf.GradientTape() as t:
                        for x in xs:
                            t.watch(x)
                        outs = self._outs(_run(env, prog.stmts, list(xs)))
                        loss = _loss(outs)
                    srcs = xs + env.vars
                    grads = (t.gradient(loss, srcs) if loss is not None
                             else [None] * len(srcs))
                    return list(outs) + list(grads)
                return list(self._outs(_run(env, prog.stmts, list(xs))))
            finally:
                env.vars, env.index = saved_vars, saved_index
        body.__name__ = f"program{prog.seed}"
        self.fn = _function(prog, body) if traced and prog.trace_outer else body

    def _outs(self, pool):
        env = self.env
        return [env.vars[o[1]] if isinstance(o, tuple) else pool[o] for o in self.prog.outputs]

    def args(self, k):
        """The arguments of call ``k``: new tensors, the index, the Variables passed."""
        prog = self.prog
        xs = [tf.constant(a) for a in prog.calls[k]]
        if prog.gather_calls:
            xs.append(tf.constant(prog.gather_calls[k]))
        return xs + [v for v, a in zip(self.env.vars, prog.var_as_arg) if a]

    def call(self, args):
        """Run the program on ``args``: ``(outputs, gradients, error)``."""
        prog = self.prog
        xs = args[:prog.n_args]
        try:
            if prog.outer_tape == "none":
                return self._leaves(self.fn(*args)), None, None
            persistent = prog.outer_tape == "persistent"
            with tf.GradientTape(persistent=persistent) as t:
                for x in xs:
                    t.watch(x)
                outs = self._leaves(self.fn(*args))
                loss = _loss(outs, self._outer_weights(outs))
            srcs = xs + list(self.env.vars)
            if loss is None:
                return outs, [None] * len(srcs), None
            grads = list(t.gradient(loss, srcs))
            if persistent:
                grads += list(t.gradient(loss, srcs))
            return outs, grads, None
        except TapeflowError as e:
            return None, None, e

    def _outer_weights(self, outs):
        if self.weights is None:
            self.weights = [None] * len(outs)
        for k, o in enumerate(outs):
            # each output's own stream: a None gradient on one side (a zero one on the
            # other) does not shift the weights of the outputs after it
            if o is not None and self.weights[k] is None:
                rng = np.random.default_rng([self.prog.loss_weights, k])
                self.weights[k] = tf.constant(
                    rng.standard_normal(tuple(o.shape)).astype(o.dtype.np))
        return self.weights

    @staticmethod
    def _leaves(res):
        out = []
        for r in (res if isinstance(res, (list, tuple)) else [res]):
            if isinstance(r, tf.Variable):
                r = r.read_value()
            out.append(r)
        return out


@contextlib.contextmanager
def _settings(prog):
    """The class-wide switches of the traced run (the buffer plan is decided when a
    concrete function is made, the traced backward at each call)."""
    old = ConcreteFunction.buffer_plan, ConcreteFunction.traced_backward
    ConcreteFunction.buffer_plan = prog.buffer_plan
    ConcreteFunction.traced_backward = prog.traced_backward
    try:
        yield
    finally:
        ConcreteFunction.buffer_plan, ConcreteFunction.traced_backward = old


def _np(x):
    if x is None:
        return None
    return np.array(x.numpy(), copy=True)


def _tol(prog):
    return (1e-9, 1e-12) if prog.dtype == "float64" else (2e-4, 1e-6)


def _close(a, b, prog):
    """Equal shapes and dtypes, NaN and infinities in the same places, the finite values
    within the dtype's tolerance (relative to the largest of them)."""
    if a is None or b is None:
        # a gradient through tf.cond / tf.while_loop: the traced graph connects the
        # inputs of the branch not taken (zeros, as TensorFlow's graphs), eager does not
        other = b if a is None else a
        return other is None or (other.dtype.kind in "fc" and not other.any())
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    inf = np.isinf(b)
    if not np.array_equal(np.isinf(a), inf) or not np.array_equal(a[inf], b[inf]):
        return False
    fin = np.isfinite(b)
    if not fin.any():
        return True
    rtol, atol = _tol(prog)
    scale = max(1.0, float(np.max(np.abs(b[fin]))))
    return bool(np.allclose(a[fin], b[fin], rtol=rtol, atol=atol + rtol * 1e-2 * scale))


def _record(runner, k):
    """Call ``k`` of ``runner``, as NumPy: outputs, gradients, the error, whether an
    argument changed, the Variables' values after it, and the returned Tensors."""
    args = runner.args(k)
    tensors = [x for x in args if not isinstance(x, tf.Variable)]    # (Variables: "vars")
    before = [_np(x) for x in tensors]
    outs, grads, err = runner.call(args)
    return {
        "outs": None if outs is None else [_np(o) for o in outs],
        "tensors": outs or [],
        "grads": None if grads is None else [_np(g) for g in grads],
        "error": None if err is None else type(err).__name__,
        "message": None if err is None else str(err).splitlines()[0][:200],
        "args_changed": any(not np.array_equal(a, _np(x), equal_nan=True)
                            for a, x in zip(before, tensors)),
        "vars": [_np(v) for v in runner.env.vars],
    }


def check(prog, coverage=None, device=None):
    """Run ``prog`` eagerly and traced (on ``device``: a device name; None: the default
    device); the list of :class:`Finding` s (empty: agree)."""
    if device is not None:
        with tf.device(device):
            return check(prog, coverage)
    findings = []
    cfg = _config(prog)

    def found(what, detail):
        findings.append(Finding(prog.seed, what, detail, cfg))
    try:
        if prog.uses_random:
            tf.random.set_seed(prog.seed)
        eager = _Runner(prog, traced=False)
        want = [_record(eager, k) for k in range(len(prog.calls))]
    except Exception as e:          # a generator bug: say so, with the seed
        found("eager run failed", f"{type(e).__name__}: {e}")
        return findings
    with _settings(prog):
        if prog.uses_random:
            tf.random.set_seed(prog.seed)
        traced = _Runner(prog, traced=True)
        got = []
        for k in range(len(prog.calls)):
            try:
                got.append(_record(traced, k))
            except Exception as e:
                found(f"call {k} raised {type(e).__name__} (eager: "
                      f"{want[k]['error'] or 'no error'})", str(e).splitlines()[0][:300]
                      if str(e) else repr(e))
                return findings
        for k, (w, g) in enumerate(zip(want, got)):
            _compare(k, w, g, prog, found)
        # nothing returned may change after it was returned
        for k, g in enumerate(got):
            for j, (t, a) in enumerate(zip(g["tensors"], g["outs"] or [])):
                if t is not None and a is not None and not np.array_equal(
                        _np(t), a, equal_nan=True):
                    found(f"output {j} of call {k} changed after later calls",
                          f"at return {a.ravel()[:4]}, now {_np(t).ravel()[:4]}")
        if prog.threads and not findings:
            _threads(prog, traced, want, found)
        if coverage is not None:
            _count(traced, coverage)
    return findings


def _count(runner, coverage):
    """Add what the traced run exercised to ``coverage`` (a Counter): the nodes each
    pass rewrote, planned replays, traced calls differentiated from outside."""
    fns = [runner.fn, *runner.env.fns.values()]
    for fn in fns:
        for cf in getattr(fn, "_cache", {}).values():
            for name, count in cf.passes_run:
                coverage[name] += int(count) if isinstance(count, (int, np.integer)) else 1
            run = cf._run
            coverage["memory_plan"] += getattr(run, "calls_planned", 0)
            coverage["saved_program"] += int(getattr(cf, "_saved", None) is not None)
            coverage["recompute_backward"] += int(getattr(cf, "_bwd", None) is not None)


def _compare(k, w, g, prog, found):
    if (w["error"] is None) != (g["error"] is None) or w["error"] != g["error"]:
        found(f"call {k}: error {g['error']} (eager: {w['error']})",
              f"traced: {g['message']}; eager: {w['message']}")
        return
    if g["error"] is not None:
        return
    if g["args_changed"]:
        found(f"call {k}: an argument changed", "the traced call wrote into its argument")
    for j, (a, b) in enumerate(zip(g["outs"], w["outs"])):
        if not _close(a, b, prog):
            found(f"call {k}: output {j} differs", _diff(a, b))
    if (w["grads"] is None) != (g["grads"] is None):
        found(f"call {k}: gradients", "one side has none")
    elif w["grads"] is not None:
        for j, (a, b) in enumerate(zip(g["grads"], w["grads"])):
            if not _close(a, b, prog):
                found(f"call {k}: gradient {j} differs", _diff(a, b))
    for j, (a, b) in enumerate(zip(g["vars"], w["vars"])):
        if not _close(a, b, prog):
            found(f"call {k}: Variable {j} differs after the call", _diff(a, b))


def _diff(a, b):
    if a is None or b is None:
        return (f"traced {'None' if a is None else a.shape}, "
                f"eager {'None' if b is None else b.shape}")
    if a.shape != b.shape:
        return f"shapes: traced {a.shape}, eager {b.shape}"
    return (f"traced {a.ravel()[:4]}, eager {b.ravel()[:4]} (max abs diff "
            f"{float(np.nanmax(np.abs(a.astype(np.float64) - b))) if a.size else 0:.3g})")


def _threads(prog, traced, want, found):
    """Two threads call the traced program with all the calls' arguments, several
    times each; every result must equal the eager one for its arguments."""
    errors = []
    barrier = threading.Barrier(2)
    device = current_device()               # (device scopes are per thread)

    def check_call(t, k):
        r = _record(traced, k)
        w = want[k]
        for j, (a, b) in enumerate(zip(r["outs"] or [], w["outs"] or [])):
            if not _close(a, b, prog):
                errors.append(f"thread {t}, call {k}: output {j}: {_diff(a, b)}")
        for j, (a, b) in enumerate(zip(r["grads"] or [], w["grads"] or [])):
            if not _close(a, b, prog):
                errors.append(f"thread {t}, call {k}: gradient {j}: {_diff(a, b)}")
        for j, (tt, a) in enumerate(zip(r["tensors"], r["outs"] or [])):
            if tt is not None and not np.array_equal(_np(tt), a, equal_nan=True):
                errors.append(f"thread {t}, call {k}: output {j} changed")

    def worker(t):
        try:
            with contextlib.ExitStack() as stack:
                if device is not None:
                    stack.enter_context(tf.device(device))
                barrier.wait()
                for rep in range(6):
                    for k in range(len(prog.calls))[::(1 if (t + rep) % 2 else -1)]:
                        check_call(t, k)
        except Exception as e:        # noqa: BLE001 -- reported as a finding
            errors.append(f"thread {t}: {type(e).__name__}: {e}")
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        found("threads disagree with eager", "; ".join(errors[:3]))


def run_many(seeds, coverage=None, progress=None, device=None):
    """:func:`check` each seed's program (on ``device``); the findings of all
    (``coverage``: a Counter that :func:`check` adds to; ``progress(prog, findings)``
    after each)."""
    findings = []
    for s in seeds:
        prog = generate(s)
        fs = check(prog, coverage, device)
        findings.extend(fs)
        if progress is not None:
            progress(prog, fs)
    return findings


# --- planted bugs (PLANTS) -----------------------------------------------------------------
# For each graph pass, the buffer plan and the saved forward program, a plausible wrong
# version: a context manager that installs it, which the differential test must find
# (tests/test_trace_differential.py, scripts/trace_hunt.py --plants).

#: the passes as tapeflow defines them (the plants wrap them)
_ORIGINAL = dict(graph_passes.PASSES)


@contextlib.contextmanager
def _patch(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _plant_pass(name, wrong):
    @contextlib.contextmanager
    def plant():
        with _patch(graph_passes, "PASSES", {**graph_passes.PASSES, name: wrong}):
            yield
    return plant


def _simplify_wrong(graph):
    # "a view op whose input and output have the same shape, dtype and device is a no-op"
    # (true of Reshape, false of Transpose)
    orig = graph_passes.is_noop
    try:
        graph_passes.is_noop = lambda g, n: (orig(g, n) or n.op.name in ("Transpose",)
                                             and g.meta[n.inputs[0]] == g.meta[n.outputs[0]])
        return graph_passes.simplify(graph)
    finally:
        graph_passes.is_noop = orig


def _fold_wrong(graph):
    # "a Variable read is a constant": captures the value at trace time
    for n in graph.nodes:
        if n.kind == "read" and not isinstance(n.var, int):
            n.kind, n.value = "const", np.array(n.var._value._data, copy=True)
    return graph_passes.fold_constants(graph)


def _cse_wrong(graph):
    # two reads of a Variable are one value, assignments between them or not
    mapping, first, keep = {}, {}, []
    for n in graph.nodes:
        n.inputs = [mapping.get(i, i) for i in n.inputs]
        if n.kind == "read":
            key = n.var if isinstance(n.var, int) else id(n.var)
            if key in first:
                mapping[n.outputs[0]] = first[key]
                continue
            first[key] = n.outputs[0]
        keep.append(n)
    graph.nodes[:] = keep
    graph.outputs[:] = [mapping.get(o, o) for o in graph.outputs]
    return graph_passes.cse(graph)


def _dce_wrong(graph):
    # an assignment's value is used by nothing: dead
    with _patch(graph_passes, "_EFFECT_KINDS", ("print", "py")):
        return _ORIGINAL["dce"](graph)


def _conv_wrong(graph):
    # the fused convolution forgets its bias
    res = _ORIGINAL["conv"](graph)
    for n in graph.nodes:
        if n.kind == "op" and n.op is not None and n.op.name == "_FusedConv2D" \
                and len(n.inputs) >= 3:
            fn = n.fn

            def k(x, w, b, *rest, _fn=fn, **kw):
                return _fn(x, w, b * 0, *rest, **kw)
            n.fn = k
    return res


def _fuse_wrong(graph):
    # the fused kernel writes its result into its first input of the same shape
    res = _ORIGINAL["fuse"](graph)
    for n in graph.nodes:
        if n.kind == "fused":
            fn = n.fn

            def k(*arrays, _fn=fn, **kw):
                out = _fn(*arrays, **kw)
                first = out[0] if isinstance(out, tuple) else out
                for a in arrays:
                    if (isinstance(a, np.ndarray) and a.shape == first.shape
                            and a.dtype == first.dtype and a.flags.writeable):
                        a[...] = first
                        break
                return out
            k._tapeflow_fresh = True
            k._tapeflow_inplace = True
            n.fn = k
    return res


def _xent_wrong(graph):
    # the combined kernel's softmax is not normalised
    res = _ORIGINAL["xent"](graph)
    for n in graph.nodes:
        if n.kind == "fused" and n.label == "SoftmaxXent+Softmax":
            fn = n.fn

            def k(z, labels, _fn=fn, **kw):
                loss, sm = _fn(z, labels, **kw)
                return loss, sm * 1.5
            n.fn = k
    return res


def _reuse_wrong(graph):
    # the pass forgets that returned values escape (writes into a buffer it returns)
    outs = list(graph.outputs)
    graph.outputs[:] = []
    try:
        return _ORIGINAL["reuse"](graph)
    finally:
        graph.outputs[:] = outs


@contextlib.contextmanager
def _plant_plan():
    # the buffer plan gives slots to returned values too
    def candidates(graph, last):
        outs = list(graph.outputs)
        graph.outputs[:] = []
        try:
            return orig(graph, last)
        finally:
            graph.outputs[:] = outs
    orig = memory_plan.candidates
    with _patch(memory_plan, "candidates", candidates):
        yield


@contextlib.contextmanager
def _plant_saved_program():
    # the saved forward program runs the reuse pass's in-place kernels
    with _patch(graph_passes, "without_inplace", lambda nodes: list(nodes)):
        yield



#: name -> context manager installing a plausible bug the differential test must find
PLANTS = {
    "simplify": _plant_pass("simplify", _simplify_wrong),
    "fold": _plant_pass("fold", _fold_wrong),
    "cse": _plant_pass("cse", _cse_wrong),
    "dce": _plant_pass("dce", _dce_wrong),
    "conv": _plant_pass("conv", _conv_wrong),
    "fuse": _plant_pass("fuse", _fuse_wrong),
    "xent": _plant_pass("xent", _xent_wrong),
    "reuse": _plant_pass("reuse", _reuse_wrong),
    "memory_plan": _plant_plan,
    "saved_program": _plant_saved_program,
}
