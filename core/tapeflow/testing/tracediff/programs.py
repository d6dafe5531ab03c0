"""Random programs for the differential test of tracing: what :func:`generate` draws
from a seed (:class:`Program`: statements and the way to run them), :func:`describe`,
and the interpreter that runs a program's statements with tapeflow ops (eagerly, or
inside ``tf.function`` -- the same Python either way)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import tapeflow as tf
from tapeflow.tracing import graph_passes

#: the passes a program may run, in the order tf.function runs them
PASSES = tuple(graph_passes.PASSES)

_UNARY = ("tanh", "sigmoid", "sin", "abs", "neg", "relu", "square", "softplus", "exp_t")
_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
_VIEWS = ("transpose", "reverse", "reshape", "split_concat", "identity", "stop_gradient",
          "expand_squeeze")
_ACTS = (None, "relu", "relu6")


# --- programs ----------------------------------------------------------------------------------

@dataclass
class Program:
    """One generated program and the way to run it (both drawn from ``seed``)."""
    seed: int
    n: int
    dtype: str
    n_args: int
    var_init: list                   # numpy arrays
    var_as_arg: list                 # bool per Variable: passed as an argument
    stmts: list
    outputs: list                    # pool indices (or ("var", j))
    subs: dict                       # name -> (n_in, stmts, outputs) of nested functions
    consts: list                     # numpy arrays captured by the program
    calls: list                      # [[arg arrays], ...]
    gather_calls: list               # [index array or None] per call
    gather_outs: list                # pool indices of the Gathers' results (returned)
    loss_weights: int                # seed of the loss weights
    # how to run it
    passes: tuple | None = None
    optimize: bool = True
    buffer_plan: bool = True
    traced_backward: bool = True
    trace_outer: bool = True
    trace_inner: bool = True
    outer_tape: str = "none"         # "none", "tape", "persistent"
    inner_tape: bool = False
    threads: bool = False
    uses_random: bool = False
    assigns: bool = False


class _Gen:
    """Draws statements over a pool of value tags: "m" (n x n), "c" (n x 1), "s" ()."""

    def __init__(self, rng, prog, depth):
        self.rng = rng
        self.prog = prog
        self.depth = depth

    def pick(self, tags, pool, recent=True):
        idx = [i for i, t in enumerate(pool) if t in tags]
        if not idx:
            return None
        if recent and self.rng.random() < 0.6:
            idx = idx[-3:]
        return int(self.rng.choice(idx))

    def body(self, pool, n_stmts, allow_assign=True, allow_calls=True):
        """Append ``n_stmts`` statements; returns ``(stmts, pool)``."""
        rng, prog = self.rng, self.prog
        stmts = []
        pool = list(pool)
        kinds = ["un", "un", "bin", "bin", "bin", "cbin", "mm", "mm", "red", "view", "view",
                 "softmax", "conv", "xent", "read", "gather", "pieces"]
        if allow_assign and prog.var_init:
            kinds += ["assign", "assign", "vassign"]
        if self.depth < 2:
            kinds += ["cond", "while"]
            if allow_calls:
                kinds += ["call", "call"]
        if self.depth == 0:
            kinds += ["rand"]
        for _ in range(n_stmts):
            kind = str(rng.choice(kinds))
            st = self._stmt(kind, pool, allow_assign)
            if st is None:
                continue
            stmt, tag = st
            stmts.append(stmt)
            if tag is not None:
                for t in (tag if isinstance(tag, list) else [tag]):
                    pool.append(t)
            if stmt[0] == "gather":
                # returned: a Gather nothing reads is dead code, which a traced function
                # drops (as TensorFlow's), and with it the error eager execution raises
                prog.gather_outs.append(len(pool) - 1)
        return stmts, pool

    def _operand(self, pool, tags):
        """A pool index, or a Variable (``("var", j)``)."""
        prog, rng = self.prog, self.rng
        if "m" in tags and prog.var_init and rng.random() < 0.15:
            return ("var", int(rng.integers(len(prog.var_init))))
        return self.pick(tags, pool)

    def _const(self, shape):
        prog = self.prog
        prog.consts.append(self.rng.standard_normal(shape).astype(prog.dtype))
        return len(prog.consts) - 1

    def _stmt(self, kind, pool, allow_assign):
        rng, prog = self.rng, self.prog
        n = prog.n
        if kind == "un":
            a = self.pick("mcs", pool)
            return ("un", str(rng.choice(_UNARY)), a), pool[a]
        if kind == "bin":
            a = self._operand(pool, "mcs")
            ta = "m" if isinstance(a, tuple) else pool[a]
            b = self._operand(pool, {"m": "mcs", "c": "cs", "s": "s"}[ta])
            tb = "m" if isinstance(b, tuple) else pool[b]
            if rng.random() < 0.5:
                a, b, ta, tb = b, a, tb, ta
            tag = "m" if "m" in (ta, tb) else "c" if "c" in (ta, tb) else "s"
            return ("bin", str(rng.choice(_BINARY)), a, b), tag
        if kind == "cbin":             # a captured constant: a Python float or a tensor
            a = self.pick("mcs", pool)
            r = rng.random()
            if r < 0.5:
                return ("cbin", str(rng.choice(_BINARY)), a,
                        float(np.round(rng.standard_normal(), 3))), pool[a]
            if pool[a] == "s":
                return None
            shape = (n,) if r < 0.8 else (n, n)
            return ("cbin", str(rng.choice(_BINARY)), a, ("c", self._const(shape))), "m"
        if kind == "mm":
            a, b = self._operand(pool, "m"), self._operand(pool, "m")
            if a is None or b is None:
                return None
            return ("mm", a, b, bool(rng.random() < 0.2), bool(rng.random() < 0.2)), "m"
        if kind == "red":
            a = self.pick("mc", pool)
            if a is None:
                return None
            op = str(rng.choice(("sum", "mean", "max")))
            if pool[a] == "m" and rng.random() < 0.7:
                return ("red", op, a, True), "c"
            return ("red", op, a, False), "s"
        if kind == "softmax":
            a = self.pick("m", pool)
            return (("softmax", a), "m") if a is not None else None
        if kind == "view":
            a = self.pick("m", pool)
            return (("view", str(rng.choice(_VIEWS)), a), "m") if a is not None else None
        if kind == "conv":
            a = self.pick("m", pool)
            if a is None:
                return None
            w = self._const((3, 3, 1, 1))
            bias = self._const((1,)) if rng.random() < 0.8 else None
            return ("conv", a, w, bias, _ACTS[int(rng.integers(len(_ACTS)))]), "m"
        if kind == "xent":
            a = self.pick("m", pool)
            if a is None:
                return None
            prog.consts.append(rng.integers(0, n, size=n).astype(np.int32))
            return ("xent", a, len(prog.consts) - 1), "c"
        if kind == "pieces":           # ops of a variable number of outputs (one, or n)
            a = self.pick("m", pool)
            if a is None:
                return None
            how = str(rng.choice(("split1", "split", "unstack")))
            return ("pieces", how, a), "m"
        if kind == "vassign":          # a Variable assigned from a Variable (maybe itself)
            k = len(prog.var_init)
            prog.assigns = True
            return ("vassign", int(rng.integers(k)), int(rng.integers(k))), None
        if kind == "read":
            if not prog.var_init:
                return None
            return ("read", int(rng.integers(len(prog.var_init)))), "m"
        if kind == "assign":
            a = self.pick("mcs", pool)
            how = str(rng.choice(("assign", "assign_add", "assign_sub")))
            prog.assigns = True
            return ("assign", int(rng.integers(len(prog.var_init))), a, how), None
        if kind == "gather":
            a = self.pick("m", pool)
            if a is None or self.depth > 0:
                return None
            prog.gather_calls = prog.gather_calls or [True]
            return ("gather", a), "m"
        if kind == "rand":
            prog.uses_random = True
            return ("rand", int(rng.integers(1, 1000))), "m"
        if kind == "cond":
            a = self.pick("mc", pool)
            ins = [self.pick("m", pool, recent=False) for _ in range(int(rng.integers(1, 3)))]
            if a is None or None in ins:
                return None
            sub = _Gen(rng, prog, self.depth + 1)
            branches = []
            for _ in range(2):
                stmts, p = sub.body(["m"] * len(ins), int(rng.integers(1, 4)),
                                    allow_assign=allow_assign and rng.random() < 0.3,
                                    allow_calls=False)
                branches.append((stmts, self._last_m(p)))
            return ("cond", a, ins, branches), "m"
        if kind == "while":
            a = self.pick("m", pool)
            if a is None:
                return None
            sub = _Gen(rng, prog, self.depth + 1)
            stmts, p = sub.body(["m"], int(rng.integers(1, 4)), allow_assign=False,
                                allow_calls=False)
            return ("while", a, int(rng.integers(1, 4)), (stmts, self._last_m(p))), "m"
        if kind == "call":
            ins = [self.pick("m", pool) for _ in range(int(rng.integers(1, 3)))]
            if None in ins:
                return None
            name = f"inner{len(prog.subs)}"
            prog.subs[name] = None          # (taken: a call inside gets the next name)
            sub = _Gen(rng, prog, self.depth + 1)
            stmts, p = sub.body(["m"] * len(ins), int(rng.integers(2, 6)),
                                allow_assign=allow_assign)
            outs = [i for i, t in enumerate(p) if t == "m" and i >= len(ins)][-2:] or [0]
            prog.subs[name] = (len(ins), stmts, outs)
            return ("call", name, ins), ["m"] * len(outs)
        return None

    @staticmethod
    def _last_m(pool):
        return max(i for i, t in enumerate(pool) if t == "m")


def generate(seed, n_stmts=None):
    """The :class:`Program` of ``seed`` (statements and the way to run them)."""
    rng = np.random.default_rng([43, seed])
    n = int(rng.choice([2, 3, 4]))
    dtype = "float64" if rng.random() < 0.7 else "float32"
    n_args = int(rng.integers(1, 3))
    n_vars = int(rng.integers(0, 3))
    prog = Program(seed=seed, n=n, dtype=dtype, n_args=n_args,
                   var_init=[(rng.standard_normal((n, n)) * 0.5).astype(dtype)
                             for _ in range(n_vars)],
                   var_as_arg=[bool(rng.random() < 0.3) for _ in range(n_vars)],
                   stmts=[], outputs=[], subs={}, consts=[], calls=[], gather_calls=[],
                   gather_outs=[],
                   loss_weights=int(rng.integers(1 << 30)))
    gen = _Gen(rng, prog, 0)
    stmts, pool = gen.body(["m"] * n_args, n_stmts or int(rng.integers(3, 14)))
    prog.stmts = stmts
    k = int(rng.integers(1, 4))
    later = list(range(n_args, len(pool))) or list(range(len(pool)))
    outs = [int(rng.choice(later[-4:])) if rng.random() < 0.7 else int(rng.choice(later))
            for _ in range(k)]
    if prog.var_init and rng.random() < 0.15:
        outs = outs + [("var", int(rng.integers(len(prog.var_init))))]
    prog.outputs = outs + [g for g in prog.gather_outs if g not in outs]
    n_calls = int(rng.integers(2, 5))
    prog.calls = [[(rng.standard_normal((n, n))).astype(dtype) for _ in range(n_args)]
                  for _ in range(n_calls)]
    if prog.gather_calls:
        bad = int(rng.integers(n_calls)) if rng.random() < 0.5 else None
        prog.gather_calls = [
            (rng.integers(0, n, size=n) if c != bad else
             np.array([0] * (n - 1) + [n + 3])).astype(np.int32) for c in range(n_calls)]
    # how to run it
    r = rng.random()
    if r < 0.25:
        prog.passes = None
    elif r < 0.32:
        prog.optimize = False
    else:
        prog.passes = tuple(p for p in PASSES if rng.random() < 0.5)
    prog.buffer_plan = bool(rng.random() < 0.7)
    prog.traced_backward = bool(rng.random() < 0.75)
    r = rng.random()
    prog.trace_outer, prog.trace_inner = (True, True) if r < 0.6 else (
        (False, True) if r < 0.85 else (True, False))
    prog.outer_tape = str(rng.choice(["none", "tape", "tape", "persistent"]))
    prog.inner_tape = bool(rng.random() < 0.3)
    prog.threads = (not prog.assigns and not prog.uses_random and not prog.gather_calls
                    and rng.random() < 0.3)
    return prog


def describe(prog):
    """The program as readable pseudo-code (what ``--replay`` prints)."""
    lines = [f"program {prog.seed}: n={prog.n} {prog.dtype}, {prog.n_args} argument(s), "
             f"{len(prog.var_init)} Variable(s) (as arguments: {prog.var_as_arg})"]

    def dump(stmts, indent, base):
        k = base
        for st in stmts:
            lines.append(f"{' ' * indent}{_fmt(st, k)}")
            if st[0] == "cond":
                for name, (sub, out) in zip(("true", "false"), st[3]):
                    lines.append(f"{' ' * (indent + 2)}{name}: (returns %{out})")
                    dump(sub, indent + 4, len(st[2]))
            elif st[0] == "while":
                lines.append(f"{' ' * (indent + 2)}body: (returns %{st[3][1]})")
                dump(st[3][0], indent + 4, 1)
            k += 1 if st[0] not in ("assign", "call") else 0
    for name, (n_in, sub, outs) in prog.subs.items():
        lines.append(f"def {name}(%0..%{n_in - 1}):  returns {outs}")
        dump(sub, 2, n_in)
    lines.append("body:")
    dump(prog.stmts, 2, prog.n_args)
    lines.append(f"return {prog.outputs}")
    lines.append(_config(prog))
    return "\n".join(lines)


def _fmt(st, k):
    return f"{st[0]} " + ", ".join(str(x) for x in st[1:] if not isinstance(x, list)
                                   or st[0] not in ("cond",))


def _config(prog):
    p = ("optimize=False" if not prog.optimize else
         "passes=default" if prog.passes is None else f"passes={prog.passes}")
    return (f"{p}, buffer_plan={prog.buffer_plan}, traced_backward={prog.traced_backward}, "
            f"traced outer/inner={prog.trace_outer}/{prog.trace_inner}, outer tape="
            f"{prog.outer_tape}, inner tape={prog.inner_tape}, threads={prog.threads}, "
            f"{len(prog.calls)} calls")


# --- running a program ----------------------------------------------------------------------

class _Env:
    """What one run of a program sees: its Variables, constants and nested functions."""

    def __init__(self, prog, traced):
        self.prog = prog
        self.traced = traced
        self.vars = [tf.Variable(v.copy()) for v in prog.var_init]
        self.consts = [tf.constant(c) for c in prog.consts]
        self.fns = {}
        for name, (_, stmts, outs) in prog.subs.items():
            self.fns[name] = self._inner(name, stmts, outs)

    def _inner(self, name, stmts, outs):
        def inner(*xs):
            pool = _run(self, stmts, list(xs))
            res = [pool[o] for o in outs]
            return res[0] if len(res) == 1 else tuple(res)
        inner.__name__ = name
        if self.traced and self.prog.trace_inner:
            return _function(self.prog, inner)
        return inner


def _function(prog, fn):
    if not prog.optimize:
        return tf.function(fn, optimize=False)
    return tf.function(fn, passes=prog.passes)


def _unary(name, x):
    if name == "tanh":
        return tf.tanh(x)
    if name == "sigmoid":
        return tf.sigmoid(x)
    if name == "sin":
        return tf.sin(x)
    if name == "abs":
        return tf.abs(x)
    if name == "neg":
        return -x
    if name == "relu":
        return tf.nn.relu(x)
    if name == "square":
        return tf.tanh(x) * x          # bounded growth
    if name == "softplus":
        return tf.nn.softplus(x)
    return tf.exp(tf.tanh(x))          # "exp_t"


def _binary(name, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return a / (b * b + 1.0)
    if name == "maximum":
        return tf.maximum(a, b)
    return tf.minimum(a, b)


def _view(name, x, n):
    if name == "transpose":
        return tf.transpose(x)
    if name == "reverse":
        return x[:, ::-1]
    if name == "reshape":
        return tf.reshape(tf.reshape(x, [-1]) * 1.0, [n, n])
    if name == "split_concat":
        return tf.concat([x[1:], x[:1]], axis=0)
    if name == "identity":
        return tf.identity(x)
    if name == "stop_gradient":
        return tf.stop_gradient(x) + x
    return tf.squeeze(tf.expand_dims(x, 0), 0)


def _branch(env, stmts, ins, out):
    """A ``tf.cond`` branch: ``stmts`` over the inputs ``ins``, returning ``out``."""
    return lambda: _run(env, stmts, list(ins))[out]


def _loop_body(env, stmts, out):
    """A ``tf.while_loop`` body: ``stmts`` over the loop value, returning ``out``."""
    def body(i, x):
        return i + 1, _run(env, stmts, [x])[out]
    return body


def _run(env, stmts, pool):
    prog = env.prog
    n = prog.n
    V = env.vars

    def val(a):
        return V[a[1]] if isinstance(a, tuple) else pool[a]
    for st in stmts:
        k = st[0]
        if k == "un":
            pool.append(_unary(st[1], pool[st[2]]))
        elif k == "bin":
            pool.append(_binary(st[1], val(st[2]), val(st[3])))
        elif k == "cbin":
            c = st[3]
            pool.append(_binary(st[1], pool[st[2]], env.consts[c[1]] if isinstance(c, tuple)
                                else c))
        elif k == "mm":
            pool.append(tf.matmul(val(st[1]), val(st[2]), transpose_a=st[3],
                                  transpose_b=st[4]))
        elif k == "red":
            fn = {"sum": tf.reduce_sum, "mean": tf.reduce_mean, "max": tf.reduce_max}[st[1]]
            x = pool[st[2]]
            pool.append(fn(x, axis=1, keepdims=True) if st[3] else fn(x))
        elif k == "softmax":
            pool.append(tf.nn.softmax(pool[st[1]]))
        elif k == "view":
            pool.append(_view(st[1], pool[st[2]], n))
        elif k == "conv":
            x = tf.reshape(pool[st[1]], [1, n, n, 1])
            y = tf.nn.conv2d(x, env.consts[st[2]], 1, "SAME")
            if st[3] is not None:
                y = tf.nn.bias_add(y, env.consts[st[3]])
            if st[4] == "relu":
                y = tf.nn.relu(y)
            elif st[4] == "relu6":
                y = tf.nn.relu6(y)
            pool.append(tf.reshape(y, [n, n]))
        elif k == "xent":
            loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=env.consts[st[2]], logits=pool[st[1]])
            pool.append(tf.reshape(loss, [n, 1]))
        elif k == "read":
            pool.append(V[st[1]].read_value())
        elif k == "assign":
            var, x = V[st[1]], pool[st[2]]
            x = tf.broadcast_to(tf.tanh(x), [n, n])
            if st[3] == "assign":
                var.assign(x)
            elif st[3] == "assign_add":
                var.assign_add(x * 0.5)
            else:
                var.assign_sub(x * 0.25)
        elif k == "pieces":
            x = pool[st[2]]
            if st[1] == "split1":
                pool.append(tf.split(x, 1, axis=1)[0] * 1.5)
            elif st[1] == "split":
                pool.append(tf.concat(tf.split(x, n, axis=1)[::-1], axis=1))
            else:
                pool.append(tf.stack(tf.unstack(x)[::-1]))
        elif k == "vassign":
            V[st[1]].assign(V[st[2]])
        elif k == "gather":
            pool.append(tf.gather(pool[st[1]], env.index))
        elif k == "rand":
            pool.append(tf.random.uniform([n, n], seed=st[1], dtype=pool[0].dtype))
        elif k == "cond":
            pred = tf.reduce_sum(pool[st[1]]) > 0
            ins = [pool[i] for i in st[2]]
            (ts, to), (fs, fo) = st[3]
            pool.append(tf.cond(pred, _branch(env, ts, ins, to), _branch(env, fs, ins, fo)))
        elif k == "while":
            iters, (bs, bo) = st[2], st[3]
            _, y = tf.while_loop(lambda i, x, _k=iters: i < _k, _loop_body(env, bs, bo),
                                 (tf.constant(0), pool[st[1]]))
            pool.append(y)
        elif k == "call":
            res = env.fns[st[1]](*[pool[i] for i in st[2]])
            pool.extend(res if isinstance(res, tuple) else [res])
        else:                                       # pragma: no cover
            raise AssertionError(f"unknown statement {st}")
    return pool


def _loss(outs, weights=None):
    """A scalar of the floating outputs: ``sum(o * w)`` with fixed random weights
    (``weights``), or ``sum(tanh(o)) * (k + 1)`` (inside a function, where the weights'
    shapes are not known yet)."""
    total = None
    for k, o in enumerate(outs):
        if o is None or not o.dtype.is_floating:
            continue
        t = (tf.reduce_sum(o * weights[k]) if weights is not None
             else tf.reduce_sum(tf.tanh(o)) * float(k + 1))
        total = t if total is None else total + t
    return total
