"""Random tapeflow programs, run the same way on the C core and on the pure-Python path
(issue 33's differential test: ``tests/test_native_differential.py`` runs this file in
two processes and compares what they print).

A program is made of Python statements executed one at a time (``exec``) in one
namespace: tensors of float32/float64/int32 and shapes (), (3,), (2, 3); Variables
(trainable or not); operators with tensors or Python scalars (ints, floats, -0.0, nan,
True) on either side; ``tf.add``, ``tf.reduce_sum``, ``tf.matmul`` & co.; ``bool()``,
``int()``, ``float()``; tapes -- plain, persistent with two ``gradient()`` calls, nested
for a second derivative, ``watch``, ``stop_recording()``, ``watch_accessed_variables=
False``, ``assign_add`` inside a tape, ``unconnected_gradients='zero'`` -- loops on
scalar tensors (the seeds' Collatz), device scopes, forward mode, ``tf.function``, and
deliberate errors. A tape's ``with`` block is spelled ``t.__enter__()`` ...
``t.__exit__(None, None, None)`` so that each statement runs, and fails, on its own.

The program is drawn while it runs: each random choice depends on the seed and on
what earlier statements gave (a dtype, a shape, an error or not), never on anything
else, so two processes that agree draw the same program, and the first statement on
which they disagree is where their texts or outcomes part.

What a statement gave is recorded exactly: for a tensor its class, dtype, device, shape
and values (NaN, infinities and the sign of zeros spelled out), for a Python scalar its
type and ``repr``, for an error its type and message (memory addresses masked), and
every warning it raised (NumPy's "in scalar divide" read as "in divide", and no
"overflow encountered in cast": see _SCALAR and _CACHED_CAST).

By hand (``--pure`` runs the pure-Python path; the text is the program, copy-pasteable):

    python tests/native_programs.py --seed 7
    python tests/native_programs.py --seed 7 --pure

``--seeds A:B --json`` prints one JSON list for seeds A..B-1 (what the test reads);
``--expect native|pure`` exits with status 3 unless that path is the one in use;
``--plant-bug`` makes ``a - b`` of two tensors compute ``b - a`` through the C core's
operator slot (to show that the comparison catches a wrong C path).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import warnings

if __name__ == "__main__" and "--pure" in sys.argv[1:]:
    os.environ["TAPEFLOW_PURE_PYTHON"] = "1"        # read when tapeflow is imported

import numpy as np  # noqa: E402

import tapeflow as tf  # noqa: E402
from tapeflow.runtime import dispatch  # noqa: E402

DTYPES = ("float32", "float64", "int32")
SHAPES = ((), (3,), (2, 3))
FLOAT_VALUES = ("0.0", "-0.0", "0.5", "1.0", "-1.5", "2.0", "3.0", "-2.5")
SCALARS = ("0", "1", "2", "-3", "2.5", "-0.0", "0.5", "-1.5", "float('nan')", "True",
           "float('inf')", "2 ** 31", "1e300", "-129")
TAPE_SCALARS = ("1", "2", "-3", "2.5", "-0.0", "0.5", "-1.5")
OPERATORS = ("+", "-", "*", "/", "//", "%", "**", "@", "<", "==", "&", ">=", "!=", "|")
TAPE_OPERATORS = ("+", "-", "*", "/", "**", "@")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
# The C core computes float ops on two NumPy scalars with the scalars' own arithmetic
# (the same IEEE functions as the ufunc, without a ufunc call: runtime/_c/dispatch.c),
# whose warnings say "divide by zero encountered in scalar divide" where the ufunc's
# say "... in divide": the same warning, worded by the other entry point.
_SCALAR = re.compile(r"(?<=encountered )in scalar ")
# A Python scalar beside a tensor becomes a cached 0-d tensor of the tensor's dtype
# (runtime/dispatch.py _scalar_like, and the C core's own cache): NumPy warns when 1e300
# overflows float32 on the conversion, i.e. the first time only, and the two paths'
# caches hold different scalars after the same programs. Not compared.
_CACHED_CAST = "overflow encountered in cast"


# --- recording outcomes ---------------------------------------------------------------
def _number(x):
    """A float as exact JSON: its repr, with NaN, infinities and -0.0 spelled out."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x) or (x == 0.0 and math.copysign(1.0, x) < 0):
            return repr(x)
    return x


def _values(v):
    return [_values(e) for e in v] if isinstance(v, list) else _number(v)


def encode(value):
    """What a statement gave, as JSON that two processes can compare exactly."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (tf.Tensor, tf.Variable)):
        a = value.numpy()
        return {"class": type(value).__name__, "dtype": value.dtype.name,
                "device": str(value.device), "shape": list(a.shape),
                "values": _values(a.tolist())}
    if isinstance(value, (bool, int, float)):
        return {"py": type(value).__name__, "repr": repr(value)}
    return {"other": type(value).__name__, "repr": _ADDRESS.sub("0x?", repr(value))}


class Program:
    """One seeded random program, drawn and run statement by statement."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.ns = {"tf": tf}
        self.steps = []            # [source, outcome] per statement
        self.pool = []             # names of the tensors and Variables made so far
        self.count = 0

    # --- running ----------------------------------------------------------------------
    def run(self, src, name=None, result=None):
        """Execute one statement (``name = src`` when name is given; ``src`` itself,
        possibly a loop, that binds ``result`` otherwise) and record it (``name`` or
        ``result``). Returns whether it raised nothing."""
        text = f"{name} = {src}" if name else src
        name = name or result
        outcome = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(text, self.ns)
                outcome["value"] = encode(self.ns.get(name)) if name else None
            except Exception as e:      # the error is an outcome to compare
                if name:
                    self.ns.pop(name, None)
                outcome["error"] = [type(e).__name__, _ADDRESS.sub("0x?", str(e))]
        caught = [[w.category.__name__, _SCALAR.sub("in ", str(w.message))] for w in caught
                  if str(w.message) != _CACHED_CAST]
        if caught:
            outcome["warnings"] = caught
        self.steps.append([text, outcome])
        ok = "error" not in outcome
        if ok and name and isinstance(self.ns.get(name), (tf.Tensor, tf.Variable)):
            self.pool.append(name)
        return ok

    def fresh(self, prefix="x"):
        self.count += 1
        return f"{prefix}{self.count}"

    def meta(self, name):
        v = self.ns[name]
        return v.dtype.name, tuple(v.shape)

    # --- drawing operands -------------------------------------------------------------
    def tensors(self, floats=False):
        names = [n for n in self.pool if n in self.ns]
        if floats:
            names = [n for n in names if self.meta(n)[0] in ("float32", "float64")]
        return names

    def constant(self, dtype, shape):
        r = self.rng
        n = int(np.prod(shape)) if shape else 1
        vals = [str(r.randint(-4, 4)) if dtype == "int32" else r.choice(FLOAT_VALUES)
                for _ in range(n)]
        if shape == ():
            body = vals[0]
        elif len(shape) == 1:
            body = "[" + ", ".join(vals) + "]"
        else:
            rows = [vals[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]
            body = "[" + ", ".join("[" + ", ".join(row) + "]" for row in rows) + "]"
        return f"tf.constant({body}, dtype=tf.{dtype})"

    def partner(self, a, floats=False, matmul=False):
        """A second tensor for ``a``: mostly one of the same dtype whose shape fits."""
        names = self.tensors(floats) or [a]
        da, sa = self.meta(a)

        def fits(n):
            d, s = self.meta(n)
            if d != da:
                return False
            if matmul:
                return len(sa) >= 1 and len(s) >= 1 and s[0] == sa[-1]
            try:
                np.broadcast_shapes(sa, s)
                return True
            except ValueError:
                return False
        good = [n for n in names if fits(n)]
        if good and self.rng.random() < 0.85:
            return self.rng.choice(good)
        return self.rng.choice(names)

    # --- one statement ----------------------------------------------------------------
    def op_expr(self, floats=False, first=None):
        """An expression of a random op over the pool (floats: differentiable ones)."""
        r = self.rng
        names = self.tensors(floats)
        if not names:
            return None
        a = first if first is not None else r.choice(names)
        kind = r.random()
        if kind < 0.5:
            op = r.choice(TAPE_OPERATORS if floats else OPERATORS)
            if op == "@" and r.random() < 0.8:        # NumPy's @ needs rank >= 1
                a = r.choice([n for n in names if self.meta(n)[1]] or [a])
            if op in ("&", "|") and r.random() < 0.8:        # bitwise on ints, logical on bools
                a = r.choice([n for n in names if self.meta(n)[0] in ("int32", "bool")] or [a])
            if op != "@" and r.random() < 0.3:
                s = r.choice(TAPE_SCALARS if floats else SCALARS)
                return f"{a} {op} {s}" if r.random() < 0.5 else f"{s} {op} {a}"
            b = self.partner(a, floats, matmul=(op == "@"))
            return f"{a} {op} {b}"
        if kind < 0.6:
            return r.choice([f"-{a}", f"abs({a})"] + ([f"{a}[0]", f"{a}[..., 1:]"]
                                                     if self.meta(a)[1] else [f"+{a}"]))
        fn = r.choice(["add", "multiply", "reduce_sum", "exp", "reshape", "matmul"]
                      + ([] if floats else ["equal"]))
        if fn in ("add", "multiply", "equal"):
            return f"tf.{fn}({a}, {self.partner(a, floats)})"
        if fn == "reduce_sum":
            return r.choice([f"tf.reduce_sum({a})", f"tf.reduce_sum({a}, axis=0)"])
        if fn == "exp":
            return f"tf.exp({a} * 0.5)" if floats else f"tf.exp({a})"
        if fn == "reshape":
            size = int(np.prod(self.meta(a)[1]))
            fit = {1: ["[]", "[1, 1]"], 3: ["[3, 1]", "[1, 3]"], 6: ["[3, 2]", "[6]"]}.get(size)
            shapes = fit if fit and r.random() < 0.8 else ["[-1]", "[2, 3]", "[1, -1]"]
            return f"tf.reshape({a}, {r.choice(shapes)})"
        matrices = [n for n in names if len(self.meta(n)[1]) == 2]
        if not matrices or r.random() < 0.2:      # a column times a row
            return f"tf.matmul(tf.reshape({a}, [-1, 1]), tf.reshape({a}, [1, -1]))"
        a = r.choice(matrices)
        rows = [n for n in matrices if self.meta(n)[1][1] == self.meta(a)[1][1]]
        if rows and r.random() < 0.5:
            return f"tf.matmul({a}, {r.choice(rows)}, transpose_b=True)"
        cols = [n for n in matrices if self.meta(n)[1][0] == self.meta(a)[1][1]]
        b = r.choice(cols) if cols else f"tf.transpose({a})"
        return f"tf.matmul({a}, {b})"

    def op_step(self, floats=False, first=None):
        expr = self.op_expr(floats, first)
        if expr is not None:
            self.run(expr, self.fresh())

    def conversion(self):
        names = self.tensors()
        one = [n for n in names if int(np.prod(self.meta(n)[1])) == 1]
        pick = self.rng.choice(one if one and self.rng.random() < 0.8 else names)
        self.run(f"{self.rng.choice(['bool', 'int', 'float'])}({pick})", self.fresh("c"))

    def deliberate_error(self):
        r = self.rng
        names = self.tensors()
        a = r.choice(names)
        d = self.meta(a)[0]
        other = "float32" if d == "int32" else "int32"
        self.run(r.choice([
            f"tf.add({a}, tf.zeros([2], dtype=tf.{d}))",            # shapes
            f"{a} * tf.ones([4, 1, 5], dtype=tf.{d})[:, :, :2]",
            f"tf.add({a}, tf.ones([3], dtype=tf.{other}))",          # dtypes
            f"{a} + tf.ones([], dtype=tf.{other})",
            f"bool(tf.ones([3], dtype=tf.{d}))",                     # bool() of 3 elements
            f"tf.matmul({a}, tf.ones([5, 7], dtype=tf.{d}))",
            f"{a} + 'a string'",
        ]), self.fresh("e"))

    # --- blocks ---------------------------------------------------------------------
    def setup(self):
        r = self.rng
        for _ in range(r.randint(3, 5)):
            d, s = r.choice(DTYPES), r.choice(SHAPES)
            self.run(self.constant(d, s), self.fresh())
        for _ in range(r.randint(1, 2)):
            d, s = r.choice(("float32", "float64")), r.choice(SHAPES)
            trainable = "" if r.random() < 0.7 else ", trainable=False"
            self.run(f"tf.Variable({self.constant(d, s)}{trainable})", self.fresh("w"))

    def variables(self):
        return [n for n in self.pool if n.startswith("w")]

    def tape_block(self):
        """One tape: watch, ops, maybe stop_recording and Variable updates, gradients."""
        r = self.rng
        t = self.fresh("tape")
        persistent = r.random() < 0.4
        watch_vars = r.random() < 0.75
        args = [a for a, on in (("persistent=True", persistent),
                                ("watch_accessed_variables=False", not watch_vars)) if on]
        self.run(f"tf.GradientTape({', '.join(args)})", t)
        self.run(f"{t}.__enter__()")
        floats = self.tensors(floats=True)
        watched = r.sample(floats, min(len(floats), r.randint(1, 2)))
        if not watch_vars and self.variables() and r.random() < 0.5:
            watched.append(r.choice(self.variables()))
        if r.random() < 0.1:                # watching any tensor, an int32 or bool one too
            watched += r.sample(self.tensors(), 1)
        for name in watched:
            self.run(f"{t}.watch({name})")
        made = []
        for i in range(r.randint(2, 5)):
            self.tape_extras(t, i)
            before = len(self.pool)
            self.op_step(floats=r.random() < 0.85,
                         first=r.choice(watched) if watched and i == 0 else None)
            made += self.pool[before:]
        made = [n for n in made if self.meta(n)[0] in ("float32", "float64")] or watched
        ys = [self.fresh("y") for _ in range(2 if persistent else 1)]
        for y in ys:
            self.run(f"tf.reduce_sum({r.choice(made or self.tensors())})", y)
        if persistent and r.random() < 0.2:          # a gradient taken while recording
            self.run(f"{t}.gradient({ys[0]}, {r.choice(watched or self.tensors())})",
                     self.fresh("g"))
        self.run(f"{t}.__exit__(None, None, None)")
        self.gradients(t, ys, watched, persistent)
        if persistent and r.random() < 0.2:          # a persistent tape entered again
            self.run(f"{t}.__enter__()")
            y = self.fresh("y")
            self.run(f"tf.reduce_sum({r.choice(made or self.tensors())} * 3.0)", y)
            self.run(f"{t}.__exit__(None, None, None)")
            self.run(f"{t}.gradient({y}, [{', '.join(watched or self.tensors()[:1])}])",
                     self.fresh("g"))

    def tape_extras(self, t, i):
        """What may happen inside a tape besides its ops: stop_recording(), a Variable
        update, a conversion, an error, results dropped at once."""
        r = self.rng
        if i == 1 and r.random() < 0.25:
            s = self.fresh("stop")
            self.run(f"{t}.stop_recording()", s)
            self.run(f"{s}.__enter__()")
            self.op_step(floats=True)
            self.run(f"{s}.__exit__(None, None, None)")
        if self.variables() and r.random() < 0.2:
            v = r.choice(self.variables())
            how = r.choice(["assign_add", "assign_add", "assign_sub", "assign"])
            self.run(f"{v}.{how}({self.constant(*self.meta(v))})", self.fresh("a"))
        if r.random() < 0.08:
            self.conversion()
        if r.random() < 0.08:
            self.deliberate_error()
        for _ in range(r.randint(0, 2) if r.random() < 0.3 else 0):
            expr = self.op_expr(floats=True)    # a result nobody keeps: freed at once,
            if expr is not None:                # and its memory reused by the next one
                self.run(expr)

    def gradients(self, t, ys, watched, persistent):
        r = self.rng
        if r.random() < 0.2:
            self.run(f"{t}.watched_variables()", self.fresh("wv"))
        sources = list(dict.fromkeys(watched + self.variables()[:r.randint(0, 2)]
                                     + r.sample(self.tensors(), 1)))
        calls = ys + ([ys[0]] if not persistent and r.random() < 0.3 else [])
        for k, y in enumerate(calls):
            extra = ", unconnected_gradients='zero'" if r.random() < 0.3 else ""
            if r.random() < 0.15 and y in self.ns:
                extra += f", output_gradients={self.constant(self.meta(y)[0], ())}"
            srcs = r.sample(sources, r.randint(1, len(sources)))
            if r.random() < 0.1:
                srcs.append(srcs[0])                    # the same source twice
            target = f"[{', '.join(srcs)}]" if k or r.random() < 0.7 else srcs[0]
            if persistent and len(ys) > 1 and r.random() < 0.2:
                y, extra = f"[{', '.join(ys)}]", ""      # several targets: summed
            self.run(f"{t}.gradient({y}, {target}{extra})", self.fresh("g"))
        if persistent and r.random() < 0.15:
            self.run(f"{t}.reset()")
            self.run(f"{t}.gradient({ys[0]}, {watched[0] if watched else sources[0]})",
                     self.fresh("g"))

    def nested_block(self):
        """A second derivative: the inner tape's gradient, taken inside the outer one."""
        r = self.rng
        floats = self.tensors(floats=True)
        if not floats:
            return
        x = r.choice(floats)
        outer, inner = self.fresh("outer"), self.fresh("inner")
        for t in (outer, inner):
            self.run("tf.GradientTape()", t)
            self.run(f"{t}.__enter__()")
            self.run(f"{t}.watch({x})")
        h = self.fresh("h")
        self.run(r.choice([f"{x} * {x}", f"tf.exp({x} * 0.5)", f"{x} ** 3", f"{x} * {x} * {x}"]),
                 h)
        for _ in range(r.randint(0, 2)):
            self.op_step(floats=True, first=h if h in self.ns else None)
        y = self.fresh("y")
        last = self.pool[-1] if self.meta(self.pool[-1])[0] != "int32" else x
        self.run(f"tf.reduce_sum({last})", y)
        self.run(f"{inner}.__exit__(None, None, None)")
        g = self.fresh("g")
        self.run(f"{inner}.gradient({y}, {x})", g)
        self.run(f"{outer}.__exit__(None, None, None)")
        self.run(f"{outer}.gradient({g}, {x})", self.fresh("gg"))

    def loop_block(self):
        """Python control flow on scalar tensors: the seeds' Collatz loop, or a float
        recurrence (maybe on a tape): the C core's cached scalars and NumPy scalars."""
        r = self.rng
        n, k = self.fresh("n"), self.fresh("k")
        if r.random() < 0.4:
            self.run(f"{n} = tf.constant({r.randint(1, 30)}, dtype=tf.int32)\n"
                     f"{k} = 0\n"
                     f"while bool({n} != 1) and {k} < 40:\n"
                     f"    {n} = {n} // 2 if bool({n} % 2 == 0) else 3 * {n} + 1\n"
                     f"    {k} += 1\n"
                     f"{n} = ({n}, {k})", result=n)
            return
        x = self.fresh()
        self.run(self.constant(r.choice(("float32", "float64")), ()), x)
        taped = r.random() < 0.5
        t = self.fresh("tape")
        if taped:
            self.run("tf.GradientTape()", t)
            self.run(f"{t}.__enter__()")
            self.run(f"{t}.watch({x})")
        ops = [f"{r.choice(TAPE_OPERATORS[:5])} {r.choice(TAPE_SCALARS)}" for _ in range(3)]
        self.run(f"{n} = {x}\n"
                 f"for {k} in range({r.randint(2, 12)}):\n"
                 f"    {n} = ({n} {ops[0]}) {ops[1]} if bool({n} < {r.choice(TAPE_SCALARS)})"
                 f" else {n} {ops[2]}", result=n)
        if taped:
            self.run(f"{t}.__exit__(None, None, None)")
            self.run(f"{t}.gradient({n}, {x})", self.fresh("g"))

    def device_block(self):
        """Ops inside ``tf.device('cpu:0')``: the C operators leave scopes to Python."""
        d = self.fresh("scope")
        self.run("tf.device('cpu:0')", d)
        self.run(f"{d}.__enter__()")
        for _ in range(self.rng.randint(1, 3)):
            self.op_step()
        self.run(f"{d}.__exit__(None, None, None)")

    def forward_block(self):
        """Forward mode: a ForwardAccumulator observes the same ops (runtime/context.py)."""
        r = self.rng
        floats = self.tensors(floats=True)
        if not floats:
            return
        x = r.choice(floats)
        acc = self.fresh("acc")
        self.run(f"tf.autodiff.ForwardAccumulator({x}, {self.constant(*self.meta(x))})", acc)
        self.run(f"{acc}.__enter__()")
        for i in range(r.randint(1, 3)):
            self.op_step(floats=True, first=x if i == 0 else None)
        self.run(f"{acc}.__exit__(None, None, None)")
        self.run(f"{acc}.jvp({self.pool[-1]})", self.fresh("jvp"))

    def function_block(self):
        """tf.function: the same ops traced (the C core honours the tracing counter),
        called twice, and once on a tape."""
        r = self.rng
        floats = self.tensors(floats=True)
        if not floats:
            return
        a = r.choice(floats)
        b = self.partner(a, floats=True)
        o1, o2 = r.choice(TAPE_OPERATORS[:5]), r.choice(TAPE_OPERATORS[:5])
        f = self.fresh("f")
        self.run(f"tf.function(lambda a, b: (a {o1} b) {o2} {r.choice(TAPE_SCALARS)})", f)
        self.run(f"{f}({a}, {b})", self.fresh())
        self.run(f"{f}({a}, {b})", self.fresh())
        t = self.fresh("tape")
        self.run("tf.GradientTape()", t)
        self.run(f"{t}.__enter__()")
        self.run(f"{t}.watch({a})")
        y = self.fresh("y")
        self.run(f"tf.reduce_sum({f}({a}, {b}))", y)
        self.run(f"{t}.__exit__(None, None, None)")
        self.run(f"{t}.gradient({y}, [{a}, {b}])", self.fresh("g"))

    def generate(self):
        r = self.rng
        self.setup()
        for _ in range(r.randint(3, 5)):
            block = r.random()
            if block < 0.35:
                for _ in range(r.randint(2, 5)):
                    self.op_step()
            elif block < 0.6:
                self.tape_block()
            elif block < 0.75:
                self.nested_block()
            elif block < 0.82:
                self.loop_block()
            elif block < 0.85:
                self.device_block()
            elif block < 0.88:
                self.forward_block()
            elif block < 0.91:
                self.function_block()
            elif block < 0.95:
                self.conversion()
            else:
                self.deliberate_error()
        return {"seed": self.seed, "steps": self.steps}


def run_seed(seed):
    """The program of ``seed``: ``{"seed", "steps": [[statement, outcome], ...]}``."""
    return Program(seed).generate()


def plant_bug():
    """``a - b`` of two tensors computes ``b - a`` through the C core's operator slot."""
    sub = tf.subtract

    def swapped(a, b):
        if isinstance(a, tf.Tensor) and isinstance(b, tf.Tensor):
            return sub(b, a)
        return sub(a, b)
    dispatch.speedups.set_operator("sub", None, swapped)


def path():
    return "native" if dispatch.speedups is not None else "pure"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, help="print one program and what each step gave")
    p.add_argument("--seeds", help="A:B -- seeds A..B-1, with --json")
    p.add_argument("--json", action="store_true", help="one JSON list on stdout")
    p.add_argument("--pure", action="store_true", help="the pure-Python path")
    p.add_argument("--expect", choices=("native", "pure"))
    p.add_argument("--plant-bug", action="store_true")
    a = p.parse_args(argv)
    if a.expect and path() != a.expect:
        print(f"expected the {a.expect} path, but the {path()} path is in use", file=sys.stderr)
        return 3
    if a.plant_bug:
        if dispatch.speedups is None:
            print("--plant-bug needs the C core", file=sys.stderr)
            return 2
        plant_bug()
    if a.seed is not None:
        prog = run_seed(a.seed)
        print(f"# seed {a.seed}, {path()} path")
        for text, outcome in prog["steps"]:
            print(text)
            print("    #", json.dumps(outcome))
        return 0
    lo, hi = (int(x) for x in (a.seeds or "0:100").split(":"))
    json.dump([run_seed(s) for s in range(lo, hi)], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
