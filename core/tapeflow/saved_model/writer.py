"""``tf.saved_model.save``: an object, its Variables and the traced graphs of its
``tf.function`` s written as a self-describing directory (the format:
docs/saved_model.md; reading it back: :mod:`.loader`).

What is written, and from where:

* the **object graph** -- the root object and everything reachable through its
  attributes (lists, tuples and dicts included): user objects (``tf.Module`` s, Keras
  layers, any object with attributes), Variables (each once, however many paths lead
  to it), and functions (``tf.function`` s found as attributes or as methods of the
  object's class, and ConcreteFunctions);
* every **concrete function** of those functions (each signature traced so far, and
  the one an ``input_signature`` names): its input leaves (paths into the call's
  ``(args, kwargs)``, TensorSpecs and Python values), its output structure and its
  graph, node by node -- ops by registered name with their attributes as plain data,
  constants (into ``constants.bin``), Variable reads and assignments (by object id),
  device copies, and the sub-graphs of ``tf.cond`` / ``tf.while_loop``;
* the **signatures** (``signatures=``): concrete functions called with keyword
  arguments and returning a dict of named outputs;
* the **Variables** in the checkpoint format (``variables/variables``).

Nothing of Python is written: a node that runs Python (``tf.py_function``, a
``custom_gradient`` function) or an attribute that is not plain data is an error at
save time naming the function and the node. Composite values (RaggedTensor,
SparseTensor) cross a function's boundary as their TypeSpec (``$typespec``: a registered
class name and its constructor's arguments, :data:`TYPE_SPECS`) and dense components.

Long file: the manifest's writer -- plain data, the object graph, functions, graphs and
signatures -- is one format, read back by :mod:`.loader`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import types

import numpy as np

from .. import nest
from ..dtypes import DType
from ..errors import InvalidArgumentError, InvalidTypeError
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..ops.composite import TypeSpec
from ..ops.ragged import RaggedTensorSpec
from ..ops.sparse import SparseTensorSpec
from ..tracing import ConcreteFunction, Function, function
from ..tracing.signatures import CompositeParts, TensorSpec
from ..train.checkpoint import Saver

__all__ = ["save", "SaveOptions", "FORMAT", "VERSION", "MANIFEST", "CONSTANTS",
           "VARIABLES_DIR", "VARIABLES_PREFIX", "encode_value", "register_type_spec",
           "TYPE_SPECS"]

FORMAT = "tapeflow-saved-model"
#: the format version this tapeflow writes (and the newest it reads)
VERSION = 1
MANIFEST = "saved_model.json"
CONSTANTS = "constants.bin"
VARIABLES_DIR = "variables"
VARIABLES_PREFIX = "variables"
#: the largest NumPy array an attribute may hold as plain data (bigger: a constant)
MAX_ATTR_ELEMENTS = 4096
#: the dtype kinds a constant may have (bool, ints, floats, complex)
CONSTANT_KINDS = "biufc"


class SaveOptions:
    """``tf.saved_model.SaveOptions``: accepted for compatibility; tapeflow's format has
    no option to set (every option TensorFlow has concerns its own graph format)."""

    def __init__(self, namespace_whitelist=None, save_debug_info=False, function_aliases=None,
                 experimental_io_device=None, experimental_variable_policy=None, **kwargs):
        self.namespace_whitelist = namespace_whitelist
        self.save_debug_info = save_debug_info
        self.function_aliases = function_aliases
        self.experimental_io_device = experimental_io_device
        self.experimental_variable_policy = experimental_variable_policy


class _Unsavable(InvalidArgumentError):
    pass


# --- composite types: the TypeSpec classes a SavedModel may name ----------------------------

#: class name -> (TypeSpec class, ``to_args(spec)``: its constructor's positional arguments
#: as plain data). The loader builds only the classes listed here, by that name, from
#: those arguments: a manifest never names code to import or call.
TYPE_SPECS: dict = {}


def _dims(shape):
    return None if shape is None else [None if d is None else int(d) for d in shape]


def register_type_spec(cls, to_args, name=None):
    """Let SavedModels hold ``cls`` (a :class:`TypeSpec` subclass): ``to_args(spec)``
    gives the constructor's positional arguments as plain data (shapes as lists, dtypes,
    numbers, strings); the loader calls ``cls(*args)`` for the name ``name`` (default:
    the class name). RaggedTensorSpec and SparseTensorSpec are registered.

    >>> from tapeflow.saved_model.writer import TYPE_SPECS
    >>> sorted(TYPE_SPECS)
    ['RaggedTensorSpec', 'SparseTensorSpec']
    """
    if not (isinstance(cls, type) and issubclass(cls, TypeSpec)) or not callable(to_args):
        raise InvalidTypeError(f"register_type_spec: needs a TypeSpec subclass and a "
                               f"function spec -> constructor arguments, got {cls!r}, "
                               f"{to_args!r}")
    TYPE_SPECS[name or cls.__name__] = (cls, to_args)
    return cls


register_type_spec(RaggedTensorSpec, lambda s: (_dims(s.shape), s.dtype, s.ragged_rank,
                                                s.row_splits_dtype))
register_type_spec(SparseTensorSpec, lambda s: (_dims(s.shape), s.dtype))


def _encode_spec(v, where):
    for name, (cls, to_args) in TYPE_SPECS.items():
        if type(v) is cls:
            return {"$typespec": [name, encode_value(tuple(to_args(v)), where)]}
    raise _Unsavable(
        f"tf.saved_model.save: {where} holds {type(v).__name__} {_short(v)}, a composite "
        "type a SavedModel cannot name yet: register it with "
        "tapeflow.saved_model.writer.register_type_spec(cls, to_args)")


# --- plain data: attributes, Python values, structures -------------------------------------

def encode_value(v, where):
    """``v`` as JSON data (tagged dicts for what JSON lacks); an error naming ``where``
    for anything that is not plain data (a callable, a tensor, an object)."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int) and type(v) is not bool:
        return int(v)
    if isinstance(v, float):
        return float(v) if np.isfinite(v) else {"$float": repr(float(v))}
    if isinstance(v, DType):
        return {"$dtype": v.name}
    if isinstance(v, np.dtype):
        return {"$npdtype": v.name}
    if isinstance(v, np.generic) and v.dtype.kind in CONSTANT_KINDS:
        return {"$scalar": [v.dtype.name, encode_value(v.item(), where)]}
    if isinstance(v, np.ndarray) and v.dtype.kind in CONSTANT_KINDS \
            and v.size <= MAX_ATTR_ELEMENTS:
        return {"$array": [v.dtype.name, list(v.shape),
                           [encode_value(x, where) for x in v.ravel().tolist()]]}
    if isinstance(v, slice):
        return {"$slice": [encode_value(v.start, where), encode_value(v.stop, where),
                           encode_value(v.step, where)]}
    if v is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(v, complex):
        return {"$complex": [v.real, v.imag]}
    if isinstance(v, TypeSpec):
        return _encode_spec(v, where)
    if type(v) is CompositeParts:                # (a composite at the function boundary)
        return {"$composite": [encode_value(v.spec, where),
                               encode_value(tuple(v.components), where)]}
    if isinstance(v, tuple):                     # (namedtuples are written as tuples)
        return {"$tuple": [encode_value(x, where) for x in v]}
    if isinstance(v, list):
        return [encode_value(x, where) for x in v]
    if isinstance(v, dict):
        return {"$dict": [[encode_value(k, where), encode_value(x, where)]
                          for k, x in v.items()]}
    raise _Unsavable(
        f"tf.saved_model.save: {where} holds {type(v).__name__} {_short(v)}, which is not "
        "plain data (numbers, strings, dtypes, shapes, slices and lists, tuples and dicts "
        "of them); a SavedModel holds no Python objects")


def _short(v):
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _type_of(meta):
    shape, dt = meta[0], meta[1]
    return [[int(d) for d in shape], np.dtype(dt).name]


def _expanded(nodes):
    """The nodes, fused ones replaced by the ops they stand for."""
    for n in nodes:
        if n.kind == "fused":
            yield from _expanded(n.attrs.get("_nodes", ()))
        else:
            yield n


def _closure(fn):
    """The variables a control-flow or print node's function closes over."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, cells):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


# --- the writer --------------------------------------------------------------------------

class _Writer:
    """Collects the object graph, the concrete functions and the constants of one save."""

    def __init__(self):
        self.objects = []             # the manifest's object list
        self.ids = {}                 # id(object) -> object id
        self.keep = []                # the objects seen (pins their ids)
        self.variables = {}           # checkpoint key -> Variable
        self.concretes = {}           # id(ConcreteFunction) -> concrete id
        self.functions = {}           # concrete id -> its manifest entry
        self.blob = bytearray()
        self.constants = []
        self.keras_call = None        # the traced call of a Keras model at the root

    # objects ----------------------------------------------------------------------------
    def visit(self, obj, path):
        """The object id of ``obj`` (added with what it reaches), or None when ``obj`` is
        not something a SavedModel keeps (a number, a string, a module...)."""
        key = id(obj)
        if key in self.ids:
            return self.ids[key]
        kind = _kind_of(obj)
        if kind is None:
            return None
        oid = len(self.objects)
        self.ids[key] = oid
        self.keep.append(obj)
        node = {"kind": kind}
        self.objects.append(node)
        where = path or "the root object"
        if kind == "variable":
            ckey = _checkpoint_key(path, oid, self.variables)
            self.variables[ckey] = obj
            node.update(key=ckey, name=obj.name, dtype=obj.dtype.name,
                        shape=[int(d) for d in obj.shape], trainable=bool(obj.trainable))
        elif kind == "function":
            node["name"] = _function_name(obj, path)
            node["concrete"] = [self.concrete(cf, obj, f"{where} (a tf.function)")
                                for cf in _concrete_functions(obj)]
        elif kind == "concrete_function":
            node["kind"] = "function"
            node["name"] = obj.graph.name
            node["concrete"] = [self.concrete(obj, None, f"{where} (a ConcreteFunction)")]
        elif kind in ("list", "tuple"):
            node["children"] = [c for c in (self.visit(x, f"{path}[{i}]")
                                             for i, x in enumerate(obj)) if c is not None]
        elif kind == "dict":
            node["children"] = [[encode_value(k, where), c] for k, c in (
                (k, self.visit(x, f"{path}[{k!r}]")) for k, x in obj.items()
                if isinstance(k, (str, int))) if c is not None]
        else:
            node["class_name"] = type(obj).__name__
            node["children"] = self._children(obj, path)
        return oid

    def _children(self, obj, path):
        children = {}
        functions = _class_functions(obj)
        if "__call__" not in functions and not path:
            fn = _keras_call(obj)
            if fn is not None:                # (a Keras model: its call, traced)
                functions["__call__"] = self.keras_call = fn
        for name, fn in functions.items():
            c = self.visit(fn, _join(path, name))
            if c is not None:
                children[name] = c
        for name, value in _attributes(obj):
            if name in children:
                continue
            c = self.visit(value, _join(path, name))
            if c is not None:
                children[name] = c
        return children

    # functions ---------------------------------------------------------------------------
    def concrete(self, cf, fn, where):
        """The concrete id of ``cf`` (serialised once)."""
        key = id(cf)
        if key in self.concretes:
            return self.concretes[key]
        cid = f"cf{len(self.concretes)}"
        self.concretes[key] = cid
        self.keep.append(cf)
        g = cf.graph
        name = f"{where}, concrete function {g.name!r}"
        leaves = _input_leaves(fn, cf)
        if getattr(g, "specialised", False) and any(
                kind != "value" and (payload[0] is None or None in payload[0])
                for _, kind, payload in leaves):
            raise _Unsavable(
                f"tf.saved_model.save: {name} reads a value computed from its inputs' "
                "shapes on the host (e.g. tf.TensorArray(size=tf.shape(x)[0])), so its "
                "graph holds only for the shapes it was traced with, and its signature has "
                "None dimensions. Save it with fixed dimensions (input_signature="
                "[tf.TensorSpec([3], ...)]) or give the TensorArray a Python size")
        entry = {"name": g.name, "params": _params(fn, cf, name)}
        entry.update(_call_shape(leaves))
        entry["inputs"] = [self._input(p, kind, payload, name) for p, kind, payload in leaves]
        structure = getattr(g, "structure", None)
        entry["output_structure"] = encode_value(structure, f"{name}: its result structure")
        entry["outputs"] = [{"tensor": v} if kind == "t" else
                            {"value": encode_value(v, f"{name}: a Python value it returns")}
                            for kind, v in getattr(g, "py_outputs", [("t", 0)])]
        entry["graph"] = self.graph(g, name)
        shapes = _output_shapes(cf)
        if shapes is not None and len(shapes) == len(g.outputs):
            entry["output_shapes"] = shapes
        self.functions[cid] = entry
        return cid

    def _input(self, path, kind, payload, where):
        item = {"path": list(path), "kind": kind}
        if kind == "value":
            item["value"] = encode_value(payload, f"{where}: argument {path}")
        else:
            shape, dt = payload
            item["shape"] = None if shape is None else [None if d is None else int(d)
                                                         for d in shape]
            item["dtype"] = dt
        return item

    def graph(self, g, where):
        """The manifest form of graph ``g`` (sub-graphs included)."""
        out = {"name": g.name,
               "args": [{"id": a, "name": n, "type": _type_of(g.meta[a])}
                        for a, n in zip(g.args, list(g.arg_names) + [""] * len(g.args))],
               "nodes": [self.node(n, g, f"{where}, node {i} ({n.name})")
                         for i, n in enumerate(_expanded(g.nodes))],
               "outputs": list(g.outputs)}
        return out

    def node(self, n, g, where):
        types_ = [_type_of(g.meta[o]) for o in n.outputs]
        base = {"in": list(n.inputs), "out": list(n.outputs), "types": types_}
        k = n.kind
        if k == "op":
            if n.op is None:
                raise _Unsavable(f"tf.saved_model.save: {where} runs a kernel that is no "
                                 "registered op (a captured device graph?); turn "
                                 "tf.config.experimental.enable_cuda_graphs off to save")
            attrs = {a: encode_value(v, f"{where}: attribute {a!r}")
                     for a, v in n.attrs.items() if not a.startswith("_")}
            return dict(base, kind="op", op=n.op.name, attrs=attrs)
        if k == "const":
            return dict(base, kind="const", constant=self.constant(n.value, n.device, where))
        if k in ("read", "assign"):
            return dict(base, kind=k, **self._var_ref(n.var, where))
        if k == "copy":
            return dict(base, kind="copy", device=n.device.name)
        if k in ("cond", "while"):
            return dict(base, kind=k, **self._control_flow(n, k, where))
        if k == "print":
            return dict(base, kind="print", **_print_spec(n, where))
        raise _Unsavable(
            f"tf.saved_model.save: {where} runs Python ({n.kind} node"
            f"{' ' + n.label if n.label else ''}): a SavedModel holds no Python code. "
            "Replace tf.py_function (or the custom_gradient function) by tapeflow ops, or "
            "keep that part out of the saved functions.")

    def _var_ref(self, var, where):
        if isinstance(var, int):
            return {"arg": var}
        oid = self.visit(var, f"captured[{len(self.objects)}]")
        return {"variable": oid}

    def _control_flow(self, n, kind, where):
        c = _closure(n.fn)
        try:
            if kind == "cond":
                return {"branches": [self.graph(c["cf_t"].graph, where + ", true branch"),
                                     self.graph(c["cf_f"].graph, where + ", false branch")],
                        "captures": [list(c["idx_t"]), list(c["idx_f"])]}
            limit = c["limit"]
            return {"cond": self.graph(c["cf_c"].graph, where + ", loop condition"),
                    "body": self.graph(c["cf_b"].graph, where + ", loop body"),
                    "captures": [list(c["idx_c"]), list(c["idx_b"])], "n": int(c["n"]),
                    "limit": None if limit is None else int(limit)}
        except (KeyError, AttributeError, TypeError) as e:
            raise _Unsavable(f"tf.saved_model.save: {where}: this {kind} node does not "
                             f"expose its sub-graphs ({e!r}); tapeflow cannot save it") from None

    def constant(self, value, device, where):
        host = value if device is None or device.is_host else device.backend.to_host(value,
                                                                                      device)
        a = np.asarray(host)                 # (ascontiguousarray makes 0-d arrays 1-d)
        a = a if a.flags.c_contiguous else a.copy(order="C")
        if a.dtype.kind not in CONSTANT_KINDS:
            raise _Unsavable(f"tf.saved_model.save: {where} is a constant of dtype "
                             f"{a.dtype}, which a SavedModel cannot hold")
        # (aligned, so a reader may view the bytes in place)
        self.blob.extend(b"\0" * (-len(self.blob) % 16))
        entry = {"dtype": a.dtype.name, "shape": [int(d) for d in a.shape],
                 "offset": len(self.blob), "nbytes": int(a.nbytes)}
        self.blob.extend(a.tobytes())
        self.constants.append(entry)
        return len(self.constants) - 1

    # signatures --------------------------------------------------------------------------
    def signature(self, name, fn, output_names=None):
        cf = _signature_concrete(name, fn)
        owner = fn if isinstance(fn, Function) else None
        cid = self.concrete(cf, owner, f"signature {name!r}")
        entry = self.functions[cid]
        names = _input_names(cf, entry)
        outputs = _output_names(cf.graph, f"signature {name!r}")
        if output_names is not None and len(output_names) == len(outputs):
            outputs = [str(n) for n in output_names]
        return {"concrete": cid, "inputs": names, "outputs": outputs}


def _join(path, name):
    return f"{path}.{name}" if path else name


def _checkpoint_key(path, oid, taken):
    key = re.sub(r"[^A-Za-z0-9_.\-]", "_", path or "root") or f"variable_{oid}"
    if key in taken:
        key = f"{key}_{oid}"
    return key


def _kind_of(obj):
    if isinstance(obj, Variable):
        return "variable"
    if isinstance(obj, Function):
        return "function"
    if isinstance(obj, ConcreteFunction):
        return "concrete_function"
    if isinstance(obj, (Tensor, np.ndarray, str, bytes, int, float, complex, type(None),
                        type, types.ModuleType, types.FunctionType, types.MethodType,
                        types.BuiltinFunctionType)):
        return None
    if isinstance(obj, tuple):
        return "tuple"
    if isinstance(obj, list):
        return "list"
    if isinstance(obj, dict):
        return "dict"
    if (hasattr(obj, "__dict__") and not callable(getattr(obj, "__get__", None))
            and not type(obj).__module__.startswith(_NOT_OBJECTS)):
        return "user_object"
    return None


#: the modules whose objects are machinery, not part of a model (devices, backends,
#: locks, arrays): never walked into
_NOT_OBJECTS = ("tapeflow.runtime", "tapeflow.plugins", "tapeflow.tracing", "tapeflow_",
                "numpy", "pyopencl", "cupy", "threading", "logging", "builtins", "io",
                "weakref", "_thread", "_io")


def _attributes(obj):
    """``(name, value)`` of an object's instance attributes (names that are strings)."""
    try:
        items = list(vars(obj).items())
    except TypeError:
        return []
    return [(k, v) for k, v in items if isinstance(k, str) and not k.startswith("__")]


def _class_functions(obj):
    """``{name: bound tf.function}`` of the tf.functions defined on ``obj``'s class."""
    out = {}
    for klass in type(obj).__mro__:
        for name, attr in vars(klass).items():
            if name not in out and isinstance(attr, Function):
                out[name] = getattr(obj, name)
    return out


def _function_name(fn, path):
    return getattr(fn, "_name", None) or path.rsplit(".", 1)[-1] or "function"


def _concrete_functions(fn):
    """The concrete functions of tf.function ``fn``: those traced so far, and the one its
    ``input_signature`` names (traced now if it was not)."""
    cfs = _traced(fn)
    if getattr(fn, "input_signature", None) is not None:
        cf = fn.get_concrete_function()
        if not any(c is cf for c in cfs):
            cfs.append(cf)
    return cfs


def _output_shapes(cf):
    """The shapes of the outputs' TensorSpecs (None dimensions where a relaxed trace has
    them; None: unknown rank), or None when the concrete function has no signature."""
    outs = getattr(getattr(cf, "signature", None), "outputs", None)
    if outs is None:
        return None
    specs = [x for x in nest.flatten(outs) if hasattr(x, "placeholder_value")]
    shapes = []
    for x in specs:
        shape = x.shape
        shapes.append(None if getattr(shape, "unknown_rank", False) else
                      [None if d is None else int(d) for d in shape])
    return shapes


def _traced(fn):
    """The concrete functions ``fn`` has traced."""
    lister = getattr(fn, "list_concrete_functions", None)
    if callable(lister):
        return list(lister())
    cache = getattr(fn, "_cache", None)
    return list(cache.values()) if isinstance(cache, dict) else []


def _spec_leaf(path, x, var):
    """``(path, kind, payload)`` of a leaf of a FunctionSignature's ``structured``."""
    if hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "placeholder_value"):
        shape = x.shape
        shape = None if getattr(shape, "unknown_rank", False) else tuple(shape)
        return path, "variable" if var else "tensor", (shape, x.dtype.name)
    return path, "value", x


def _input_leaves(fn, cf):
    """``[(path, kind, payload)]``: the leaves of the call ``cf`` was traced for (kind
    ``tensor`` / ``variable`` with ``(shape, dtype name)``, or ``value``)."""
    g = cf.graph
    var_pos = getattr(g, "var_arg_positions", set())
    sig = getattr(cf, "signature", None)
    structured = getattr(sig, "structured", None)
    if structured is not None:
        out, k = [], 0
        for path, x in nest.flatten_with_paths(structured):
            leaf = _spec_leaf(list(path), x, k in var_pos)
            if leaf[1] != "value":
                k += 1
            out.append(leaf)
        if k == len(g.args):
            return out
    return [([0, i], "variable" if i in var_pos else "tensor", _type_of(g.meta[a]))
            for i, a in enumerate(g.args)]


def _params(fn, cf, where):
    """The Python signature calls are bound to (``[{name, kind, default?}]``): the
    tf.function's (defaults kept when they are plain data), else the parameters of the
    concrete function's canonical call."""
    spec = getattr(fn, "function_spec", None) if fn is not None else None
    sig = getattr(spec, "signature", None)
    if sig is not None:
        out = []
        for p in sig.parameters.values():
            item = {"name": p.name, "kind": p.kind.name}
            if p.default is not p.empty:
                try:
                    item["default"] = encode_value(p.default, where)
                except _Unsavable:
                    pass                   # (calls must pass it)
            out.append(item)
        return out
    params = getattr(getattr(cf, "signature", None), "params", None) or []
    return [{"name": str(n), "kind": str(k)} for n, k in params]


def _call_shape(leaves):
    """``{"n_args": positional arguments, "kwargs": keyword names}`` of the call."""
    n, kw = 0, []
    for path, _, _ in leaves:
        if len(path) >= 2 and path[0] == 0 and isinstance(path[1], int):
            n = max(n, path[1] + 1)
        elif len(path) >= 2 and path[0] == 1 and path[1] not in kw:
            kw.append(path[1])
    return {"n_args": n, "kwargs": kw}


def _print_spec(n, where):
    """A tf.print node as data: the printed items (tensors: ``None``, filled from the
    node's inputs at ``positions`` of the flattened items), ``sep``, ``end``,
    ``summarize`` and the stream (standard output or error only)."""
    c = _closure(n.fn)
    try:
        stream = c["output_stream"]
        name = ("stdout" if stream is sys.stdout else "stderr" if stream is sys.stderr
                else None if stream is None else "?")
        if name == "?":
            raise KeyError(f"its output_stream {stream!r} is neither sys.stdout nor "
                           "sys.stderr")
        positions = [int(p) for p in c["pos"]]
        leaves = [None if i in positions else x for i, x in enumerate(c["template"])]
        items = nest.pack_sequence_as(list(c["inputs"]), leaves)
        return {"items": encode_value(items, where + ": a printed value"),
                "positions": positions, "sep": str(c["sep"]), "end": str(c["end"]),
                "summarize": int(c["summarize"]), "stream": name}
    except (KeyError, TypeError, ValueError) as e:
        raise _Unsavable(f"tf.saved_model.save: {where}: this tf.print cannot be saved "
                         f"({e})") from None


def _signature_concrete(name, fn):
    if isinstance(fn, ConcreteFunction):
        return fn
    if isinstance(fn, Function):
        if getattr(fn, "input_signature", None) is not None:
            return fn.get_concrete_function()
        raise InvalidArgumentError(
            f"tf.saved_model.save: signature {name!r} is a tf.function without an "
            "input_signature; pass fn.get_concrete_function(tf.TensorSpec(...)) or "
            "decorate it with @tf.function(input_signature=[...])")
    raise InvalidTypeError(
        f"tf.saved_model.save: signature {name!r} is {type(fn).__name__}; a signature is a "
        "ConcreteFunction or a tf.function with an input_signature")


def _ident(s):
    s = re.sub(r"[^A-Za-z0-9_]", "_", str(s)).strip("_")
    return s or "input"


def _input_names(cf, entry):
    """The keyword names of a signature's tensor inputs (the Python parameter names, or
    the TensorSpecs' names)."""
    names = []
    structured = getattr(getattr(cf, "signature", None), "structured", None)
    specs = ([x for x in nest.flatten(structured) if hasattr(x, "placeholder_value")]
             if structured is not None else [])
    arg_names = list(cf.graph.arg_names)
    for i, item in enumerate(x for x in entry["inputs"] if x["kind"] != "value"):
        spec_name = getattr(specs[i], "name", None) if i < len(specs) else None
        base = _ident(spec_name or (arg_names[i] if i < len(arg_names) else f"input_{i}"))
        name, k = base, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names.append(name)
    return names


def _output_names(g, where):
    """The names of a signature's tensor outputs: the keys of a returned dict, else
    ``output_0``, ``output_1``..."""
    structure = getattr(g, "structure", None)
    py = getattr(g, "py_outputs", [("t", 0)])
    if isinstance(structure, dict) and all(isinstance(k, str) for k in structure) and all(
            v is None for v in structure.values()):
        return [k for k, (kind, _) in zip(nest.flatten(sorted(structure)), py) if kind == "t"]
    return [f"output_{i}" for i in range(sum(1 for kind, _ in py if kind == "t"))]


def _default_signature(w, obj):
    """TensorFlow's default: with no ``signatures=``, the one tf.function of the root
    object that has an input_signature (if exactly one has) serves."""
    found = [fn for _, fn in _class_functions(obj).items()
             if getattr(fn, "input_signature", None) is not None]
    found += [v for _, v in _attributes(obj) if isinstance(v, Function)
              and getattr(v, "input_signature", None) is not None]
    found = [fn for fn in found if _valid_signature(fn.get_concrete_function())]
    return {"serving_default": found[0]} if len(found) == 1 else {}


def _valid_signature(cf):
    """A signature returns tensors only, at least one (TensorFlow's rule)."""
    py = getattr(cf.graph, "py_outputs", [])
    return bool(py) and all(kind == "t" for kind, _ in py)


def _keras_call(obj):
    """A tf.function over a built Keras layer's (or model's) ``__call__`` with the input
    signature of the input it was built with (any batch size), or None."""
    if not (callable(getattr(obj, "call", None)) and getattr(obj, "built", False)):
        return None
    getter = getattr(obj, "get_build_config", None)
    cfg = getter() if callable(getter) else vars(obj).get("_build_config")
    spec = _build_spec(cfg)
    if spec is None:
        return None
    return function(obj.__call__, name="__call__", input_signature=[spec])


def _build_spec(cfg):
    if not isinstance(cfg, dict):
        return None
    if isinstance(cfg.get("inputs"), list):
        specs = [_build_spec(c) for c in cfg["inputs"]]
        return None if any(x is None for x in specs) else specs
    shape = cfg.get("input_shape")
    if not isinstance(shape, (list, tuple)):
        return None
    shape = [None if i == 0 else d for i, d in enumerate(shape)]
    if cfg.get("sparse") or cfg.get("ragged"):     # (a functional model's sparse or ragged
        return None                                 # Input: its __call__ is not traced)
    return TensorSpec(shape, cfg.get("dtype") or "float32")


def _signatures(w, obj, signatures):
    if signatures is None and w.keras_call is not None:
        names = getattr(obj, "output_names", None)
        return {"serving_default": w.signature(
            "serving_default", w.keras_call,
            list(names) if isinstance(names, (list, tuple)) else None)}
    if signatures is None:
        return {n: w.signature(n, f) for n, f in _default_signature(w, obj).items()}
    if isinstance(signatures, (ConcreteFunction, Function)):
        signatures = {"serving_default": signatures}
    if not isinstance(signatures, dict):
        raise InvalidTypeError(
            f"tf.saved_model.save: signatures is {type(signatures).__name__}; pass a "
            "ConcreteFunction, a tf.function with an input_signature, or a dict of them")
    out = {}
    for name, fn in signatures.items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"tf.saved_model.save: signature key {name!r} is not "
                                       "a non-empty string")
        out[name] = w.signature(name, fn)
    return out


def _atomic_write(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _version():
    mod = sys.modules.get("tapeflow")
    return str(getattr(mod, "__version__", "unknown"))


def save(obj, export_dir, signatures=None, options=None):
    """Write ``obj`` -- its Variables, the traced graphs of its tf.functions and
    ``signatures`` -- as a SavedModel directory ``export_dir``, which
    :func:`tapeflow.saved_model.load` reads back without the Python class of ``obj``.

    >>> import os, tempfile
    >>> import tapeflow as tf
    >>> class Scale:
    ...     def __init__(self):
    ...         self.v = tf.Variable(2.0)
    ...     @tf.function
    ...     def __call__(self, x):
    ...         return x * self.v
    >>> m = Scale()
    >>> _ = m(tf.constant(3.0))               # traced: this signature is saved
    >>> path = os.path.join(tempfile.mkdtemp(), "scale")
    >>> tf.saved_model.save(m, path)
    >>> sorted(os.listdir(path))
    ['constants.bin', 'saved_model.json', 'variables']
    >>> print(tf.saved_model.load(path)(tf.constant(4.0)))
    tf.Tensor(8.0, shape=(), dtype=float32)
    """
    if not isinstance(export_dir, (str, os.PathLike)):
        raise InvalidTypeError(f"tf.saved_model.save: export_dir is "
                               f"{type(export_dir).__name__}; pass a directory path")
    if options is not None and not isinstance(options, SaveOptions):
        raise InvalidTypeError("tf.saved_model.save: options must be a "
                               f"tf.saved_model.SaveOptions, not {type(options).__name__}")
    export_dir = os.fspath(export_dir)
    # tracing an input_signature runs the function (trace by execution): its Variable
    # assignments are put back after the save, as TensorFlow's graph tracing assigns none
    before = [(v, v.read_value()) for v in _reachable_variables(obj)]
    try:
        _save(obj, export_dir, signatures, before)
    finally:
        _put_back(before)


def _put_back(before):
    for v, value in before:
        v.assign(value)


def _reachable_variables(obj):
    out, seen, stack = [], set(), [obj]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        kind = _kind_of(x)
        if kind == "variable":
            out.append(x)
        elif kind in ("list", "tuple"):
            stack.extend(x)
        elif kind == "dict":
            stack.extend(x.values())
        elif kind == "user_object":
            stack.extend(v for _, v in _attributes(x))
        elif kind == "function":
            for cf in _traced(x):
                stack.extend(getattr(cf.graph, "captured_variables", ()))
    return out


def _save(obj, export_dir, signatures, before):
    w = _Writer()
    if w.visit(obj, "") != 0 or w.objects[0]["kind"] not in ("user_object", "function"):
        raise InvalidTypeError(
            f"tf.saved_model.save: cannot save {type(obj).__name__} {_short(obj)}; save an "
            "object with attributes (a tf.Module, a Keras model) or a tf.function")
    sigs = _signatures(w, obj, signatures)
    _put_back(before)                 # (before the Variables are written)
    os.makedirs(export_dir, exist_ok=True)
    blob = bytes(w.blob)
    manifest = {"format": FORMAT, "version": VERSION, "tapeflow_version": _version(),
                "objects": w.objects, "functions": w.functions, "signatures": sigs,
                "constants": {"file": CONSTANTS, "bytes": len(blob),
                              "sha256": hashlib.sha256(blob).hexdigest(),
                              "entries": w.constants},
                "variables": (f"{VARIABLES_DIR}/{VARIABLES_PREFIX}" if w.variables
                              else None)}
    if w.variables:
        Saver(dict(w.variables), max_to_keep=1).save(
            os.path.join(export_dir, VARIABLES_DIR, VARIABLES_PREFIX))
    else:
        os.makedirs(os.path.join(export_dir, VARIABLES_DIR), exist_ok=True)
    _atomic_write(os.path.join(export_dir, CONSTANTS), blob)
    _atomic_write(os.path.join(export_dir, MANIFEST),
                  json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8"))
