"""AutoGraph: Python ``if``/``while``/``for`` on tensors inside :func:`tapeflow.function`.

Long file: the source converter and the operators its code calls belong together (one
reads the other's names); splitting them would make a module that only serves the other.

A traced function runs its Python once per signature (trace by execution), so Python
control flow on a value that depends on the arguments (``if x > 0:``) cannot pick a
branch for every later call. Before its first trace, ``tf.function`` converts the
function's source (:func:`convert`): each ``if``, ``while`` and ``for`` becomes a test,
made at trace time, of what its condition or iterable is:

* a Python value, or a tensor whose value the trace knows (a constant): the statement
  runs as Python, unchanged (outside a trace everything is Python);
* a tensor that depends on the arguments or state of the trace: ``if`` becomes
  :func:`tapeflow.cond` over the variables the statement assigns (both branches must
  give each the same structure, dtypes and shapes), ``while`` becomes
  :func:`tapeflow.while_loop` over the variables the body assigns (they keep their dtype
  and shape), ``for`` over a tensor (its first dimension), ``tf.range(...)``, a Python
  ``range`` of tensors or a ``tf.data`` dataset or iterator (an element read at every
  iteration of every call) becomes a ``while_loop`` too (as in TensorFlow, also when
  the range is a constant). ``break`` and ``continue`` become flags (an extra loop variable,
  a guard around the rest of the body), a ``return`` in an ``if`` absorbs the statements
  after it (both branches then return). ``and``/``or``/``not`` and ``a if c else b`` on
  such tensors become ``logical_and``/``logical_or``/``logical_not`` and ``cond``;
  ``assert`` becomes a check that runs at every call.

Functions the converted code calls are converted too (once, cached) when they are user
code: not tapeflow's, not the standard library's or an installed package's, not a
lambda, not marked :func:`do_not_convert`. A function whose source is unavailable runs
unconverted (one warning). :func:`to_code` shows the converted source.

>>> import tapeflow as tf
>>> @tf.function
... def collatz_steps(a):
...     n = 0
...     while a != 1:
...         if a % 2 == 0:
...             a = a // 2
...         else:
...             a = 3 * a + 1
...         n += 1
...     return n
>>> int(collatz_steps(tf.constant(6))), int(collatz_steps(tf.constant(27)))
(8, 111)
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import inspect
import os
import sys
import sysconfig
import textwrap
import types
import warnings
import weakref

import numpy as np

from .. import dtypes as _dt
from .. import nest
from ..errors import InvalidArgumentError, UnimplementedError
from ..ops import math as _m
from ..ops.array_creation import range as _tf_range, zeros_like as _zeros_like
from ..ops.array_gather import gather as _gather
from ..ops.array_shape import shape as _tf_shape
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from .control_flow import _is_composite, _is_dynamic, _same_structure, cond as _cond
from .control_flow import py_function as _py_function
from .control_flow import host_next as _host_next, while_loop as _while_loop
from .graph import Graph
from .tracer import _current, _tl, _Tracer

__all__ = ["convert", "to_graph", "to_code", "do_not_convert", "set_verbosity", "experimental"]


# --- the public API -------------------------------------------------------------------

def do_not_convert(func=None):
    """Mark ``func`` to run as written: AutoGraph leaves it (and what it calls) alone.
    Usable as a decorator, with or without parentheses.

    >>> import tapeflow as tf
    >>> @tf.autograph.experimental.do_not_convert
    ... def f(x):
    ...     return x + 1
    >>> tf.autograph.to_graph(f) is f
    True
    """
    if func is None:
        return do_not_convert
    target = getattr(func, "__func__", func)
    try:
        target.__tapeflow_do_not_convert__ = True
    except (AttributeError, TypeError):
        pass
    return func


def to_graph(entity, recursive=True, experimental_optional_features=None):
    """The converted version of the Python function ``entity`` (see the module doc):
    the function itself when there is nothing to convert or it cannot be converted.

    >>> import tapeflow as tf
    >>> def relu(x):
    ...     if x > 0:
    ...         return x
    ...     return 0.0
    >>> g = tf.autograph.to_graph(relu)
    >>> print(tf.function(g)(tf.constant(-2.0)))
    tf.Tensor(0.0, shape=(), dtype=float32)
    """
    return convert(entity, top=True)


def to_code(entity, recursive=True, experimental_optional_features=None):
    """The source AutoGraph runs for the function ``entity`` (tapeflow's own format:
    the branches of an ``if`` become functions of the variables they assign, run by
    ``ag__.if_stmt``; a loop keeps its Python form next to the ``ag__.while_stmt`` /
    ``ag__.for_stmt`` it becomes when its condition or iterable is a traced tensor).

    >>> import tapeflow as tf
    >>> def sign(x):
    ...     if x > 0:
    ...         return 1
    ...     return -1
    >>> code = tf.autograph.to_code(sign)
    >>> "ag__.if_stmt" in code and code.startswith("def sign(x):")
    True
    """
    fn = _plain_function(entity)
    if fn is None:
        raise InvalidArgumentError(f"tf.autograph.to_code: expected a Python function; got "
                                   f"{type(entity).__name__}")
    conv = _conversion(fn)
    if isinstance(conv, Exception):
        raise InvalidArgumentError(f"tf.autograph.to_code: cannot convert "
                                   f"{getattr(fn, '__qualname__', fn)}: {conv}") from None
    return conv.source


def set_verbosity(level, alsologtostdout=False):
    """Accepted for TensorFlow compatibility; tapeflow's AutoGraph logs nothing."""
    if not isinstance(level, int) or isinstance(level, bool):
        raise InvalidArgumentError(f"tf.autograph.set_verbosity: level must be an int; got "
                                   f"{type(level).__name__}")
    _VERBOSITY[0] = level


_VERBOSITY = [0]


class _Experimental:
    """``tf.autograph.experimental``."""

    do_not_convert = staticmethod(do_not_convert)


experimental = _Experimental()


# --- which functions are converted -------------------------------------------------

_TAPEFLOW_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = tuple(sorted({os.path.abspath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("purelib"),
    sysconfig.get_paths().get("platlib"), os.path.dirname(os.__file__)) if p}))
_NO_CODE = 0x20 | 0x80 | 0x200            # generators, coroutines, async generators
_LIBRARY_MODULES = ("tapeflow", "numpy", "builtins", "functools")

_FN_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # fn -> converted fn
_CODE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code -> _Conversion
_WARNED: set = set()


def _plain_function(entity):
    fn = getattr(entity, "python_function", entity)       # a tf.function
    fn = getattr(fn, "__func__", fn)                        # a bound method
    return fn if isinstance(fn, types.FunctionType) else None


def _convertible(fn, top):
    if getattr(fn, "__tapeflow_do_not_convert__", False) or fn.__code__.co_name == "<lambda>":
        return False
    if fn.__code__.co_flags & _NO_CODE or "ag__" in fn.__code__.co_freevars:
        return False                 # (a generator; code converted already: a nested def)
    path = fn.__code__.co_filename
    if path.startswith("<doctest "):
        return True
    if (getattr(fn, "__module__", None) or "").split(".")[0].startswith(_LIBRARY_MODULES):
        return False
    if path.startswith("<") and path.endswith(">"):
        return True                              # a notebook cell
    path = os.path.abspath(path)
    if path.startswith(_TAPEFLOW_DIR + os.sep):
        return False
    return top or not path.startswith(_LIBRARY_DIRS)


def convert(entity, top=False):
    """``entity`` converted (see the module doc), cached per function; ``top``: the
    function of a ``tf.function`` (converted even from an installed package), else a
    function the converted code calls (user code only). Bound methods and
    ``functools.partial`` objects convert their function."""
    if isinstance(entity, functools.partial):
        f = convert(entity.func, top)
        return entity if f is entity.func else functools.partial(f, *entity.args,
                                                                 **entity.keywords)
    if isinstance(entity, types.MethodType):
        f = convert(entity.__func__, top)
        return entity if f is entity.__func__ else types.MethodType(f, entity.__self__)
    if not isinstance(entity, types.FunctionType):
        return entity
    done = _FN_CACHE.get(entity)
    if done is not None:
        return done
    out = entity
    if _convertible(entity, top):
        conv = _conversion(entity)
        if isinstance(conv, Exception):
            if top and entity.__code__ not in _WARNED:
                _WARNED.add(entity.__code__)
                warnings.warn(f"AutoGraph could not convert {entity.__qualname__} ({conv}); it "
                              "runs as written: Python control flow on traced tensors in it "
                              "raises TracingError (use tf.cond / tf.while_loop there)",
                              RuntimeWarning, stacklevel=3)
        elif conv.changed:
            out = conv.instantiate(entity)
    _FN_CACHE[entity] = out
    return out


class _Conversion:
    """One function's converted code: ``factory`` (a code object that, called with the
    operators and placeholders for the free variables, defines the converted
    function), ``source`` (what :func:`to_code` shows), ``changed``."""

    def instantiate(self, fn):
        factory = types.FunctionType(self.factory, fn.__globals__, "ag__factory")
        inner = factory(sys.modules[__name__], *[None] * len(fn.__code__.co_freevars))
        cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
        closure = tuple(cells.get(n, c) for n, c in zip(inner.__code__.co_freevars,
                                                        inner.__closure__ or ()))
        new = types.FunctionType(inner.__code__, fn.__globals__, fn.__name__, fn.__defaults__,
                                 closure or None)
        new.__kwdefaults__ = fn.__kwdefaults__
        for attr in ("__qualname__", "__module__", "__doc__", "__annotations__"):
            setattr(new, attr, getattr(fn, attr, None))
        new.__dict__.update(fn.__dict__)
        new.__tapeflow_autograph_converted__ = True
        return new


def _conversion(fn):
    conv = _CODE_CACHE.get(fn.__code__)
    if conv is None:
        try:
            conv = _convert_source(fn)
        except (OSError, TypeError, SyntaxError, ValueError, IndentationError,
                _CannotConvert) as e:
            conv = _CannotConvert(str(e) or type(e).__name__)
        _CODE_CACHE[fn.__code__] = conv
    return conv


class _CannotConvert(Exception):
    pass


def _convert_source(fn):
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        raise _CannotConvert("its source code is not available") from None
    tree = ast.parse(textwrap.dedent(src))
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__code__.co_name:
        raise _CannotConvert("its source is not a plain `def`")
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    node.decorator_list = []
    a = node.args
    a.defaults = []                 # (the original's defaults and annotations are kept
    a.kw_defaults = [None] * len(a.kwonlyargs)       # as they are: not evaluated again)
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
        if arg is not None:
            arg.annotation = None
    node.returns = None
    owner = _owner_class(fn)
    if owner:
        _Mangle(owner).visit(node)
    conv = _Converter(os.path.basename(fn.__code__.co_filename))
    before = ast.dump(node)
    node.body = conv.function_body(node.body)
    result = _Conversion()
    result.changed = ast.dump(node) != before
    ast.fix_missing_locations(node)
    result.source = ast.unparse(node) + "\n"
    params = ["ag__"] + list(fn.__code__.co_freevars)
    factory = _def("ag__factory", params, [node, ast.Return(value=_load(node.name))])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, fn.__code__.co_filename, "exec", dont_inherit=True)
    result.factory = next(c for c in code.co_consts
                          if isinstance(c, types.CodeType) and c.co_name == "ag__factory")
    return result


def _owner_class(fn):
    """The name of the class whose body defines ``fn`` (for private-name mangling)."""
    parts = fn.__qualname__.split(".")
    for i in range(len(parts) - 2, -1, -1):       # (a function's children follow <locals>)
        if parts[i] != "<locals>" and parts[i + 1] != "<locals>":
            return parts[i].lstrip("_")
    return ""


class _Mangle(ast.NodeTransformer):
    """``__x`` -> ``_Class__x``, as the compiler did inside the class body."""

    def __init__(self, owner):
        self.owner = owner

    def _m(self, name):
        if name.startswith("__") and not name.endswith("__") and self.owner:
            return f"_{self.owner}{name}"
        return name

    def visit_Name(self, node):
        node.id = self._m(node.id)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        node.attr = self._m(node.attr)
        return node

    def visit_arg(self, node):
        node.arg = self._m(node.arg)
        return node


# --- AST helpers ------------------------------------------------------------------

def _load(name):
    return ast.Name(id=name, ctx=ast.Load())


def _store(name):
    return ast.Name(id=name, ctx=ast.Store())


def _ag(attr):
    return ast.Attribute(value=_load("ag__"), attr=attr, ctx=ast.Load())


def _call(func, args, keywords=()):
    return ast.Call(func=func, args=list(args), keywords=list(keywords))


def _lambda(body):
    return ast.Lambda(args=_arguments([]), body=body)


def _arguments(names):
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names], vararg=None,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _def(name, params, body):
    return ast.FunctionDef(name=name, args=_arguments(params), body=body or [ast.Pass()],
                           decorator_list=[], returns=None, type_comment=None)


def _names_tuple(names, ctx):
    return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx()) for n in names], ctx=ctx())


def _strs(names):
    return ast.Tuple(elts=[ast.Constant(value=n) for n in names], ctx=ast.Load())


def _assign(name, value):
    return ast.Assign(targets=[_store(name)], value=value)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.While, ast.AsyncFor)


def _walk_local(nodes, into_loops=True):
    """The nodes under ``nodes`` that belong to this scope (nested functions, classes,
    lambdas and comprehensions are not entered; loops only with ``into_loops``)."""
    stack = list(nodes)[::-1]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, _SCOPES) or (not into_loops and isinstance(n, _LOOPS)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _assigned(stmts):
    """The variables ``stmts`` assign, in order (not the names of nested functions,
    classes or imports; not AutoGraph's temporaries, except its loop flags)."""
    out = []
    for n in _walk_local(stmts):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in out:
            if not n.id.startswith("ag__") or n.id.startswith(("ag__brk", "ag__cont")):
                out.append(n.id)
    return out


def _definitely(stmts):
    """The variables assigned on every path through ``stmts`` (that does not return)."""
    out = set()
    for s in stmts:
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            if getattr(s, "value", None) is not None:
                out.update(_assigned([s]))
        elif isinstance(s, ast.If):
            b, o = _definitely(s.body), _definitely(s.orelse)
            if _always_returns(s.body):
                out |= o
            elif _always_returns(s.orelse):
                out |= b
            else:
                out |= b & o
        elif isinstance(s, ast.With):
            out |= _definitely(s.body)
    return out


def _loads(stmts):
    out = {}
    for n in _walk_local(stmts):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out[n.id] = out.get(n.id, 0) + 1
    return out


def _has_return(stmts):
    return any(isinstance(n, ast.Return) for n in _walk_local(stmts))


def _jumps(stmts):
    """``{"break", "continue"}`` that leave the loop whose body is ``stmts``."""
    return {"break" if isinstance(n, ast.Break) else "continue"
            for n in _walk_local(stmts, into_loops=False)
            if isinstance(n, (ast.Break, ast.Continue))}


def _always_returns(stmts):
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _always_returns(last.body) and _always_returns(
        last.orelse)


def _fold_returns(stmts):
    """Move the statements after an ``if`` that returns on some path into it (into each
    branch that does not return), so an ``if`` either returns on every path or never."""
    for i, s in enumerate(stmts):
        if isinstance(s, ast.If) and _has_return([s]):
            rest = stmts[i + 1:]
            if rest:
                if not _always_returns(s.body):
                    s.body = s.body + copy.deepcopy(rest)
                if not _always_returns(s.orelse):
                    s.orelse = s.orelse + copy.deepcopy(rest)
            s.body = _fold_returns(s.body)
            s.orelse = _fold_returns(s.orelse)
            return stmts[:i] + [s]
    return stmts


# --- the converter ----------------------------------------------------------------

class _Converter:
    """Rewrites one function's statements (see the module doc); ``ag__`` names the
    operators (this module) in the converted code, ``ag__<kind><n>`` its temporaries."""

    def __init__(self, filename):
        self.filename = filename
        self.n = 0
        self.loads = []        # per function being converted: {name: times it is read}

    def fresh(self):
        self.n += 1
        return self.n

    def where(self, node):
        return f"{self.filename}:{getattr(node, 'lineno', '?')}"

    def function_body(self, body):
        self.loads.append(_loads(body))
        try:
            if _has_return(body) and not _always_returns(body):
                body = body + [ast.Return(value=None)]
            return self.stmts(_fold_returns(body))
        finally:
            self.loads.pop()

    def live(self, s, names):
        """The keyword naming the variables of ``names`` read outside loop ``s``."""
        inside = _loads([s])
        out = [n for n in names if self.loads and self.loads[-1].get(n, 0) > inside.get(n, 0)]
        return [ast.keyword(arg="live", value=_strs(out))] if out else []

    def stmts(self, stmts):
        out = []
        for s in stmts:
            r = self.stmt(s)
            out.extend(r if isinstance(r, list) else [r])
        return out

    def stmt(self, s):
        if isinstance(s, ast.If):
            return self.if_(s)
        if isinstance(s, ast.While):
            return self.while_(s)
        if isinstance(s, ast.For):
            return self.for_(s)
        if isinstance(s, ast.FunctionDef):
            if not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await))
                       for n in _walk_local(s.body)):
                s.body = self.function_body(s.body)
            return s
        if isinstance(s, (ast.AsyncFunctionDef, ast.ClassDef, ast.AsyncFor, ast.AsyncWith)):
            return s
        if isinstance(s, ast.Assert):
            msg = ast.Constant(value=None) if s.msg is None else _lambda(s.msg)
            call = _call(_ag("assert_"), [self.expr(s.test), self.expr(msg),
                                          ast.Constant(value=self.where(s))])
            return ast.copy_location(ast.Expr(value=call), s)
        for field in ("body", "orelse", "finalbody"):
            value = getattr(s, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(s, field, self.stmts(value))
        for h in getattr(s, "handlers", ()):
            h.body = self.stmts(h.body)
        return _Exprs(s).visit(s)

    def expr(self, e):
        return _Exprs(None).visit(e)

    # if ---------------------------------------------------------------------------
    def if_(self, s):
        """One form for both cases: the branches become functions of the variables they
        assign, and ``ag__.if_stmt`` runs one of them (a Python condition) or makes a
        ``cond`` of both (a traced tensor). An ``if`` with a ``return`` on some paths only
        or a ``break``/``continue`` stays a Python statement (on a traced tensor it
        raises UnimplementedError)."""
        k = self.fresh()
        c = f"ag__cond{k}"
        head = ast.copy_location(_assign(c, self.expr(s.test)), s)
        body, orelse = s.body, s.orelse
        returns = _always_returns(body) and _always_returns(orelse)
        why = None
        if _jumps(body + orelse):
            why = ("`break`/`continue` in an `if` whose condition is a traced tensor, in a "
                   "loop over Python values, is not supported")
        elif _has_return(body + orelse) and not returns:
            why = ("a `return` in an `if` whose condition is a traced tensor must end every "
                   "branch of it")
        if why is not None:
            py = ast.If(test=_load(c), body=self.stmts(body), orelse=self.stmts(orelse))
            top = ast.If(test=_call(_ag("symbolic"), [_load(c)]),
                         body=[self.unsupported(s, why)], orelse=[py])
            return [head, ast.copy_location(top, s)]
        names = _assigned(body + orelse)
        both = sorted(_definitely(body) & _definitely(orelse))
        tail = [] if returns else [ast.Return(value=_names_tuple(names, ast.Load))]
        t = _def(f"ag__if_true{k}", names, self.stmts(body) + tail)
        f = _def(f"ag__if_false{k}", names, self.stmts(orelse) + copy.deepcopy(tail))
        call = _call(_ag("if_stmt"), [_load(c), _load(t.name), _load(f.name), self.init(names),
                                      _strs(names), _strs(both),
                                      ast.Constant(value=self.where(s))],
                     [ast.keyword(arg="returns", value=ast.Constant(value=returns))]
                     if returns else [])
        if returns:
            last = ast.Return(value=call)
        elif names:
            last = ast.Assign(targets=[_names_tuple(names, ast.Store)], value=call)
        else:
            last = ast.Expr(value=call)
        return [head] + [ast.copy_location(n, s) for n in (t, f, last)]

    def init(self, names):
        return ast.Tuple(elts=[_call(_ag("ld"), [_lambda(_load(n)), ast.Constant(value=n)])
                               for n in names], ctx=ast.Load())

    def unsupported(self, s, why):
        return ast.Expr(value=_call(_ag("unsupported"), [ast.Constant(
            value=f"{why} (at {self.where(s)})")]))

    # loops ----------------------------------------------------------------------------
    def lower_jumps(self, stmts, k, used):
        """``break``/``continue`` of this loop as flags, the statements after one guarded
        by ``if not flag``; ``used`` collects the kinds found."""
        out = []
        for i, s in enumerate(stmts):
            if isinstance(s, (ast.Break, ast.Continue)):
                kind = "brk" if isinstance(s, ast.Break) else "cont"
                used.add(kind)
                out.append(ast.copy_location(_assign(f"ag__{kind}{k}",
                                                     ast.Constant(value=True)), s))
                return out
            kinds = _jumps([s])
            if not kinds:
                out.append(s)
                continue
            if isinstance(s, ast.If):
                s.body = self.lower_jumps(s.body, k, used)
                s.orelse = self.lower_jumps(s.orelse, k, used)
            elif isinstance(s, ast.With):
                s.body = self.lower_jumps(s.body, k, used)
            else:
                raise _CannotLower()
            out.append(s)
            rest = stmts[i + 1:]
            if rest:
                flags = [_load(f"ag__{'brk' if j == 'break' else 'cont'}{k}")
                         for j in sorted(kinds)]
                test = flags[0] if len(flags) == 1 else ast.BoolOp(op=ast.Or(), values=flags)
                out.append(ast.copy_location(ast.If(
                    test=ast.UnaryOp(op=ast.Not(), operand=test),
                    body=self.lower_jumps(rest, k, used), orelse=[]), rest[0]))
            return out
        return out

    def loop_body(self, s, k):
        """(statements of the body for a traced loop, flags used) or a reason why not."""
        body = copy.deepcopy(s.body)
        if _has_return(body):
            return None, ("a `return` inside a loop whose condition or iterable is a traced "
                          "tensor is not supported (set a variable and `break`)")
        used = set()
        try:
            body = self.lower_jumps(body, k, used)
        except _CannotLower:
            return None, ("`break`/`continue` inside `try` in a loop over traced tensors "
                          "is not supported")
        if "cont" in used:
            body = [_assign(f"ag__cont{k}", ast.Constant(value=False))] + body
        return (body, used), None

    def loop_end(self, s, k, used, names, call):
        out = []
        if "brk" in used:
            out.append(_assign(f"ag__brk{k}", ast.Constant(value=False)))
        out.append(ast.Assign(targets=[_names_tuple(names, ast.Store)], value=call)
                   if names else ast.Expr(value=call))
        if s.orelse:
            orelse = copy.deepcopy(s.orelse)
            if "brk" in used:
                orelse = [ast.copy_location(ast.If(test=ast.UnaryOp(
                    op=ast.Not(), operand=_load(f"ag__brk{k}")), body=orelse, orelse=[]),
                    s.orelse[0])]
            out.extend(self.stmts(orelse))
        return [ast.copy_location(o, s) for o in out]

    def while_(self, s):
        k = self.fresh()
        lp = f"ag__loop{k}"
        test = _call(ast.Attribute(value=_load(lp), attr="test", ctx=ast.Load()),
                     [self.expr(copy.deepcopy(s.test))])
        orelse = self.stmts(copy.deepcopy(s.orelse))
        if orelse:
            orelse = [ast.If(test=ast.UnaryOp(op=ast.Not(), operand=ast.Attribute(
                value=_load(lp), attr="symbolic", ctx=ast.Load())), body=orelse, orelse=[])]
        py = ast.While(test=test, body=self.stmts(copy.deepcopy(s.body)), orelse=orelse)
        tensor = ast.If(test=ast.Attribute(value=_load(lp), attr="symbolic", ctx=ast.Load()),
                        body=self.while_tensor(s, k), orelse=[])
        return [ast.copy_location(n, s) for n in
                (_assign(lp, _call(_ag("WhileTest"), [])), py, tensor)]

    def while_tensor(self, s, k):
        got, why = self.loop_body(s, k)
        if got is None:
            return [self.unsupported(s, why)]
        body, used = got
        names = _assigned(body)
        test = copy.deepcopy(s.test)
        if "brk" in used:
            test = ast.BoolOp(op=ast.And(), values=[
                ast.UnaryOp(op=ast.Not(), operand=_load(f"ag__brk{k}")), test])
        tdef = _def(f"ag__test{k}", names, [ast.Return(value=self.expr(test))])
        bdef = _def(f"ag__body{k}", names, self.stmts(body) + [
            ast.Return(value=_names_tuple(names, ast.Load))])
        call = _call(_ag("while_stmt"), [_load(tdef.name), _load(bdef.name), self.init(names),
                                         _strs(names), ast.Constant(value=self.where(s))],
                     self.live(s, names))
        return [tdef, bdef] + self.loop_end(s, k, used, names, call)

    def for_(self, s):
        k = self.fresh()
        it = f"ag__iter{k}"
        src = s.iter
        if isinstance(src, ast.Call) and not any(isinstance(a, ast.Starred) for a in src.args) \
                and ((isinstance(src.func, ast.Name) and src.func.id == "range") or (
                    isinstance(src.func, ast.Attribute) and src.func.attr == "range")):
            src = _call(_ag("range_"), [src.func] + src.args, src.keywords)
        py = ast.For(target=s.target, iter=_load(it), body=self.stmts(copy.deepcopy(s.body)),
                     orelse=self.stmts(copy.deepcopy(s.orelse)), type_comment=None)
        top = ast.If(test=_call(_ag("symbolic_iter"), [_load(it)]), body=self.for_tensor(s, k, it),
                     orelse=[py])
        return [ast.copy_location(_assign(it, self.expr(src)), s), ast.copy_location(top, s)]

    def for_tensor(self, s, k, it):
        got, why = self.loop_body(s, k)
        if got is None:
            return [self.unsupported(s, why)]
        body, used = got
        target = copy.deepcopy(s.target)
        names = _assigned([ast.Assign(targets=[target], value=ast.Constant(value=None))])
        names += [n for n in _assigned(body) if n not in names]
        item = f"ag__item{k}"
        bdef = _def(f"ag__body{k}", [item] + names, [
            ast.Assign(targets=[target], value=_load(item))] + self.stmts(body) + [
            ast.Return(value=_names_tuple(names, ast.Load))])
        brk = ast.Constant(value=f"ag__brk{k}" if "brk" in used else None)
        call = _call(_ag("for_stmt"), [_load(it), _load(bdef.name), self.init(names),
                                       _strs(names), ast.Constant(value=self.where(s)), brk],
                     self.live(s, names))
        return [bdef] + self.loop_end(s, k, used, names, call)


class _CannotLower(Exception):
    pass


_DIRECT = frozenset(dir(builtins))


class _Exprs(ast.NodeTransformer):
    """The expressions of one statement (not its nested statements): ``and``/``or``/
    ``not``, ``a if c else b`` and calls become operator calls."""

    def __init__(self, root):
        self.root = root

    def visit(self, node):
        if isinstance(node, ast.stmt) and node is not self.root:
            return node
        return super().visit(node)

    @staticmethod
    def _plain(node):
        # (lambdas would change where a walrus binds, and a yield's function)
        return not any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await))
                       for n in ast.walk(node))

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if not self._plain(node):
            return node
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        return ast.copy_location(_call(_ag(fn), [_lambda(v) for v in node.values]), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call(_ag("not_"), [node.operand]), node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        if not self._plain(node):
            return node
        return ast.copy_location(_call(_ag("if_exp"), [
            node.test, _lambda(node.body), _lambda(node.orelse)]), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and (f.id in _DIRECT or f.id.startswith("ag__")):
            return node
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                f.value.id.startswith("ag__"):
            return node
        return ast.copy_location(ast.Call(func=_ag("call"), args=[f] + node.args,
                                          keywords=node.keywords), node)


# --- the operators the converted code calls ---------------------------------------------
# (outside a trace, and for Python values, each is the Python statement it replaces)

class Undefined:
    """The value of a variable that a traced ``if`` or loop leaves undefined: using it
    raises an error that says why."""

    __slots__ = ("name", "why")

    def __init__(self, name, why=None):
        self.name = name
        self.why = why

    def _fail(self, *args, **kwargs):
        raise InvalidArgumentError(self.why or f"'{self.name}' is used before it is defined")

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        self._fail()

    def __repr__(self):
        return f"<undefined {self.name!r}>"

    __bool__ = __iter__ = __len__ = __call__ = __getitem__ = __index__ = __int__ = _fail
    __float__ = __array__ = __neg__ = __abs__ = __invert__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _fail
    __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = _fail
    __rpow__ = __matmul__ = __rmatmul__ = __lt__ = __le__ = __gt__ = __ge__ = _fail


def ld(read, name):
    """The value of a variable (``read``: a lambda that reads it), or
    :class:`Undefined` when it has none yet."""
    try:
        return read()
    except NameError:
        return Undefined(name)


def symbolic(x):
    """Whether ``x`` is a tensor whose value the current trace does not know (it
    depends on the arguments or state): control flow on it becomes a graph node."""
    if type(x) is bool or _current() is None:
        return False
    return isinstance(x, (Tensor, Variable)) and _is_dynamic(_current(), x)


def unsupported(message):
    raise UnimplementedError(message)


def call(f, /, *args, **kwargs):
    """``f(*args, **kwargs)``, ``f`` converted first when it is user code."""
    if type(f) is types.FunctionType or type(f) is types.MethodType:
        f = convert(f)
    return f(*args, **kwargs)


def not_(x):
    return _m.logical_not(x) if symbolic(x) else not x


def and_(*operands):
    v = operands[0]()
    for f in operands[1:]:
        if symbolic(v):
            v = _m.logical_and(v, f())
        elif not v:
            return v
        else:
            v = f()
    return v


def or_(*operands):
    v = operands[0]()
    for f in operands[1:]:
        if symbolic(v):
            v = _m.logical_or(v, f())
        elif v:
            return v
        else:
            v = f()
    return v


def if_exp(test, body, orelse):
    if symbolic(test):
        return _cond(test, body, orelse)
    return body() if test else orelse()


def assert_(test, message, where):
    if not symbolic(test):
        if not test:
            raise AssertionError(message()) if message is not None else AssertionError()
        return
    text = f"assertion failed at {where}"
    if message is not None:
        text += f": {message()}"

    def check(t):
        if not bool(t.numpy()):
            raise InvalidArgumentError(text)
        return []
    _py_function(check, [test], [])


def _described(v):
    leaves = nest.flatten(v)
    if len(leaves) == 1 and leaves[0] is v:
        return _leaf_desc(v)
    return f"{type(v).__name__} of ({', '.join(_leaf_desc(x) for x in leaves)})"


def _leaf_desc(x):
    if isinstance(x, (Tensor, Variable)):
        return f"{x.dtype.name}{list(x.shape)}"
    if isinstance(x, Undefined):
        return "undefined"
    return f"{type(x).__name__} {x!r}"[:60]


def if_stmt(pred, true_fn, false_fn, init, names, both, where, returns=False):
    """``if pred:``, its branches functions of the variables they assign (``names``,
    values ``init`` before the ``if``; ``both``: those both branches surely assign):
    the taken one called for a Python ``pred``; :func:`tapeflow.cond` of both for a
    traced tensor. Returns the variables' values after it (or, ``returns``: what the
    taken branch returns)."""
    if not symbolic(pred):
        return (true_fn if pred else false_fn)(*init)
    if len(pred.shape) and int(np.prod(pred.shape)) != 1:
        raise InvalidArgumentError(
            f"the condition of the `if` at {where} is a tensor of shape {list(pred.shape)}; "
            "a condition must be a scalar (reduce it: tf.reduce_all, tf.reduce_any)")
    seen = {}
    if returns:
        def branch(fn, key):
            def run():
                seen[key] = fn(*init)
                return seen[key]
            return run
        kept = ()
    else:
        kept = [i for i, n in enumerate(names)
                if not isinstance(init[i], Undefined) or n in both]

        def branch(fn, key):
            def run():
                out = fn(*init)
                vals = tuple(out[i] for i in kept)
                seen[key] = vals
                for i, v in zip(kept, vals):
                    if isinstance(v, Undefined):
                        raise InvalidArgumentError(
                            f"'{names[i]}' must be defined in the {key} branch of the `if` "
                            f"at {where} (its condition is a traced tensor)")
                return vals
            return run
    try:
        res = _cond(pred, branch(true_fn, "true"), branch(false_fn, "false"))
    except InvalidArgumentError as e:
        if "same structure" not in str(e) or len(seen) < 2:
            raise
        raise InvalidArgumentError(_branch_mismatch(seen, names, kept, where)) from None
    if returns:
        return res
    out = list(init)
    for i, n in enumerate(names):
        if isinstance(init[i], Undefined):
            out[i] = Undefined(n, f"'{n}' is assigned in only one branch of the `if` at {where}, "
                                  "whose condition is a traced tensor: define it before the "
                                  "`if` or in both branches")
    for i, v in zip(kept, res):
        out[i] = v
    return tuple(out)


def _branch_mismatch(seen, names, kept, where):
    t, f = seen["true"], seen["false"]
    what = "the value returned"
    if kept:
        for j, i in enumerate(kept):
            if _described(t[j]) != _described(f[j]) or not _same_structure(t[j], f[j]):
                what, t, f = f"'{names[i]}'", t[j], f[j]
                break
    return (f"{what} must have the same type, structure, dtype and shape in both branches of "
            f"the `if` at {where} (its condition is a traced tensor): {_described(t)} in the "
            f"true branch, {_described(f)} in the false branch")




class WhileTest:
    """The condition of a ``while`` loop run as Python: ``test(value)`` is ``value``,
    or False after noting (``symbolic``) that it is a traced tensor; the loop then
    continues as a traced ``while_loop`` from the current values."""

    __slots__ = ("symbolic",)

    def __init__(self):
        self.symbolic = False

    def test(self, value):
        if symbolic(value):
            self.symbolic = True
            return False
        return value


class _LoopVars:
    """The variables of a traced loop: those defined before it are loop variables (their
    leaves are the ``while_loop``'s), the others are :class:`Undefined` in the body.
    ``live``: those read outside the loop; one that holds something other than tensors
    and is not (a string, None ...) keeps its value: the body sees it, and what the body
    assigns to it is dropped (as TensorFlow, whose liveness analysis leaves it out)."""

    def __init__(self, init, names, where, what, live=()):
        self.names, self.where, self.what, self.live = names, where, what, live
        self.undef = [Undefined(n, f"'{n}' must be defined before the {what} at {where}: its "
                                   "condition or iterable is a traced tensor, so the variables "
                                   "the loop assigns are loop variables")
                      for n in names]
        self._setup(list(init))

    def _setup(self, init):
        self.init = init
        self.fixed = {i: v for i, v in enumerate(init) if not isinstance(v, Undefined)
                      and self.names[i] not in self.live and not _tensor_like(v)}
        self.carried = [i for i, v in enumerate(init)
                        if not isinstance(v, Undefined) and i not in self.fixed]
        self.structs = [init[i] for i in self.carried]
        self.leaves = []
        for i in self.carried:
            for x in nest.flatten(init[i]):
                self.leaves.append(self._leaf(x, self.names[i], "before"))

    def define_live(self, run):
        """Variables first assigned in the loop and used after it (``live``) start as
        zeros of what one iteration gives them (as TensorFlow): ``run(args)`` runs the
        body once, speculatively (its effects are put back), to learn that."""
        todo = [i for i, n in enumerate(self.names)
                if n in self.live and isinstance(self.init[i], Undefined)]
        if not todo:
            return
        out = _probe(lambda: run(self.args(self.leaves)))
        if out is None:
            return
        init = list(self.init)
        for i in todo:
            leaves = nest.flatten(out[i])
            if leaves and all(isinstance(x, Tensor) for x in leaves):
                init[i] = nest.pack_sequence_as(out[i], [convert_to_tensor(
                    np.zeros(tuple(x.shape), x.dtype.as_numpy_dtype)) for x in leaves])
        self._setup(init)

    def _leaf(self, x, name, when):
        if isinstance(x, (Tensor, Variable)) or _is_composite(x):     # (a TensorArray)
            return x
        if isinstance(x, (bool, int, float, complex)) or type(x).__module__ == "numpy":
            return convert_to_tensor(x)
        raise InvalidArgumentError(
            f"'{name}' is {_leaf_desc(x)} {when} the {self.what} at {self.where}: the variables "
            "a loop over traced tensors assigns are loop variables and must hold tensors or "
            "Python numbers (nested in tuples, lists or dicts)")

    def args(self, leaves):
        vals = nest.pack_sequence_as(self.structs, list(leaves)) if self.structs else []
        out = list(self.undef)
        for i, v in self.fixed.items():
            out[i] = v
        for i, v in zip(self.carried, vals):
            out[i] = v
        return out

    def outputs(self, out, leaves):
        """The body's results (one per name) as leaves, checked against ``leaves``."""
        res = []
        for j, i in enumerate(self.carried):
            v, name = out[i], self.names[i]
            if not _same_structure(v, self.structs[j]):
                raise InvalidArgumentError(
                    f"'{name}' is {_described(self.structs[j])} before the {self.what} at "
                    f"{self.where} and {_described(v)} after one iteration: a loop variable "
                    "keeps its structure")
            res.extend((name, self._leaf(x, name, "after one iteration of"))
                       for x in nest.flatten(v))
        new = []
        for (name, o), x in zip(res, leaves):
            if _is_composite(o) or _is_composite(x):
                new.append(o)             # (while_loop checks those)
                continue
            if o.dtype != x.dtype:
                raise InvalidArgumentError(
                    f"'{name}' has dtype {x.dtype.name} before the {self.what} at {self.where} "
                    f"and {o.dtype.name} after one iteration: a loop variable keeps its dtype "
                    "(cast it before the loop)")
            if tuple(o.shape) != tuple(x.shape):
                raise InvalidArgumentError(
                    f"'{name}' has shape {list(x.shape)} before the {self.what} at "
                    f"{self.where} and shape {list(o.shape)} after one iteration: inside "
                    "tf.function a loop variable keeps its shape")
            new.append(o)
        return new

    def result(self, leaves):
        out = self.args(leaves)
        for i, n in enumerate(self.names):
            if i not in self.carried and i not in self.fixed:
                out[i] = Undefined(n, f"'{n}' is assigned in the {self.what} at {self.where} "
                                      "but was not defined before it: its condition or "
                                      "iterable is a traced tensor, so define the variable "
                                      "before the loop")
        return tuple(out)


def _tensor_like(v):
    return all(isinstance(x, (Tensor, Variable, bool, int, float, complex)) or _is_composite(x)
               or type(x).__module__ == "numpy" for x in nest.flatten(v))


def _probe(fn):
    """``fn()`` under a throw-away tracer (its Variable assignments put back); None if
    it raises (the real trace then says why)."""
    tr = _current()
    probe = _Tracer(Graph("probe"), tr)
    probe.speculative = True
    _tl.tracer = probe
    try:
        return fn()
    except Exception:       # noqa: BLE001 (the loop itself reports it)
        return None
    finally:
        _tl.tracer = tr
        for var in probe.assigned.values():
            var._value = probe.var_before[id(var)]


def while_stmt(test, body, init, names, where, live=()):
    """``while test:`` whose test is a traced tensor: :func:`tapeflow.while_loop` over
    the variables the body assigns (``names``, values ``init``); returns their values
    after the loop."""
    lv = _LoopVars(init, names, where, "while loop", live)
    lv.define_live(lambda args: body(*args))

    def cond_fn(*leaves):
        return test(*lv.args(leaves))

    def body_fn(*leaves):
        return lv.outputs(body(*lv.args(leaves)), leaves)
    res = _while_loop(cond_fn, body_fn, list(lv.leaves))
    return lv.result(res)


class _Range:
    """``tf.range(...)`` / ``range(...)`` of a ``for`` loop that becomes a traced loop
    (not built as a tensor: the loop counts)."""

    def __init__(self, func, args, kwargs):
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("name", None)
        vals = list(args) + [kwargs[k] for k in ("start", "limit", "delta") if k in kwargs]
        if len(vals) == 1:
            vals = [0] + vals
        if len(vals) == 2:
            vals.append(1)
        if len(vals) != 3:
            raise InvalidArgumentError(f"range: expected 1 to 3 arguments; got {len(vals)}")
        ts = [convert_to_tensor(v) for v in vals]
        if dtype is None:
            floats = [t.dtype for t in ts if t.dtype.is_floating]
            dtype = floats[0] if floats else (
                _dt.int64 if any(t.dtype == _dt.int64 for t in ts) else _dt.int32)
        self.start, self.limit, self.delta = [_m.cast(t, dtype) for t in ts]


def range_(func, *args, **kwargs):
    """``func(*args, **kwargs)`` (``tf.range`` or ``range``) as the iterable of a ``for``:
    in a trace, a :class:`_Range` when it is ``tf.range`` or has tensor arguments."""
    if _current() is not None and (func is _tf_range or (func is builtins.range and any(
            symbolic(a) for a in list(args) + list(kwargs.values())))):
        return _Range(func, args, dict(kwargs))
    return func(*args, **kwargs)


def symbolic_iter(x):
    """Whether ``for`` over ``x`` becomes a traced loop: a tensor, range, ``tf.data``
    dataset or iterator in a trace."""
    return isinstance(x, _Range) or (_current() is not None and (
        isinstance(x, (Tensor, Variable)) or _source_kind(x) is not None))


def _source_kind(x):
    """"iterator" (a ``tf.data`` iterator: ``next_with_flag``), "dataset" (iterable,
    with ``cardinality``) or None."""
    t = type(x)
    if callable(getattr(t, "next_with_flag", None)):
        return "iterator"
    if callable(getattr(t, "cardinality", None)) and callable(getattr(t, "__iter__", None)):
        return "dataset"
    return None


def _for_elements(source, kind, body, lv, names, brk):
    """``for x in source`` over a ``tf.data`` dataset or iterator in a trace: a
    ``while_loop`` whose loop variables are a has-more flag, the element and the
    variables the body assigns; each element is read by a node at every call
    (:func:`~tapeflow.tracing.control_flow.host_next`). A dataset is iterated from its
    start at every call, an iterator from where it is."""
    state = [source if kind == "iterator" else None]
    pending, last = [], [None]
    outer = _current()

    def fetch():
        el = pending.pop() if pending else next(state[0])
        last[0] = el
        return el

    def fetch_first():
        if kind == "dataset":
            state[0] = iter(source)
        return fetch()
    try:
        has, el = _host_next(fetch_first, "IteratorGetNextAsOptional", strict=False)
    except StopIteration:                       # nothing to iterate (now, at trace time)
        return lv.result(list(lv.leaves))
    ne = len(nest.flatten(el))
    structure = el
    stop = None if brk is None else names.index(brk)
    lv.define_live(lambda args: body(el, *args))

    def cond_fn(flag, *rest):
        if stop is None:
            return flag
        return _m.logical_and(flag, _m.logical_not(lv.args(rest[ne:])[stop]))

    def fetch_next():
        out = _host_next(fetch, "IteratorGetNextAsOptional", strict=False)
        if _current() is not outer:
            pending.append(last[0])   # (read to trace the body: the loop reads it again)
        return out

    def body_fn(flag, *rest):
        item = nest.pack_sequence_as(structure, list(rest[:ne]))
        new = lv.outputs(body(item, *lv.args(rest[ne:])), rest[ne:])
        if stop is None:
            flag2, el2 = fetch_next()
        else:                         # after a break the source keeps its next element
            flag2, el2 = _cond(lv.args(new)[stop], lambda: (
                convert_to_tensor(False), nest.map_structure(_zeros_like, item)), fetch_next)
        return [flag2] + nest.flatten(el2) + new
    res = _while_loop(cond_fn, body_fn, [has] + nest.flatten(el) + list(lv.leaves),
                      _traced=True)
    return lv.result(res[1 + ne:])


def for_stmt(iterable, body, init, names, where, brk=None, live=()):
    """``for x in iterable:`` over a traced tensor (its first dimension) or range: a
    :func:`tapeflow.while_loop` over a counter and the variables the body assigns;
    ``brk``: the name of the loop's break flag, if any."""
    lv = _LoopVars(init, names, where, "for loop", live)
    kind = None if isinstance(iterable, (_Range, Tensor, Variable)) else _source_kind(iterable)
    if kind is not None:
        return _for_elements(iterable, kind, body, lv, names, brk)
    if isinstance(iterable, _Range):
        c0, delta, limit = iterable.start, iterable.delta, iterable.limit
        if symbolic(delta):
            def more(c):
                return _m.logical_or(_m.logical_and(delta > 0, c < limit),
                                     _m.logical_and(delta < 0, c > limit))
        else:
            up = bool(delta.numpy() > 0)

            def more(c):
                return c < limit if up else c > limit

        def item(c):
            return c
    else:
        t = iterable.read_value() if isinstance(iterable, Variable) else iterable
        if len(t.shape) == 0:
            raise InvalidArgumentError(f"for loop at {where}: cannot iterate over a scalar "
                                       "tensor")
        n = _tf_shape(t)[0]     # in the graph: a replay for another length (a relaxed
        c0, delta = convert_to_tensor(0), 1     # or loaded function) loops that many times

        def more(c):
            return c < n

        def item(c):
            return _gather(t, c)
    stop = None if brk is None else names.index(brk)
    lv.define_live(lambda args: body(item(c0), *args))

    def cond_fn(c, *leaves):
        m = more(c)
        if stop is not None:
            m = _m.logical_and(m, _m.logical_not(lv.args(leaves)[stop]))
        return m

    def body_fn(c, *leaves):
        out = body(item(c), *lv.args(leaves))
        return [c + delta] + lv.outputs(out, leaves)
    res = _while_loop(cond_fn, body_fn, [c0] + list(lv.leaves), _traced=True)
    return lv.result(res[1:])
