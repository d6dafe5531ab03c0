"""Running a :class:`~tapeflow.testing.tracediff.programs.Program` eagerly and traced,
and comparing the two: :func:`check`."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import numpy as np

import tapeflow as tf
from tapeflow.errors import TapeflowError
from tapeflow.runtime.devices import current_device
from tapeflow.tracing import ConcreteFunction

from .programs import _Env, _config, _function, _loss, _run, generate

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
