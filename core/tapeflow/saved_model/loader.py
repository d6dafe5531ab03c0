"""``tf.saved_model.load``: a SavedModel directory (:mod:`.writer`, docs/saved_model.md)
read back, validated, and rebuilt without the Python classes that made it.

Reading is in three steps, and nothing is built before the first two pass:

1. the manifest (``saved_model.json``, bounded in size) is parsed and checked whole:
   its format and version, every object and child reference, every concrete function
   (its inputs, outputs and graph: each node's kind, op name -- registered --,
   attributes -- plain data of the kinds the op's defaults have --, input references
   -- defined before use --, constants and Variables by index); a file that fails
   any check is a :class:`~tapeflow.errors.DataLossError` naming the file and what
   is wrong;
2. ``constants.bin`` (its size and SHA-256 those of the manifest) and the Variables'
   checkpoint (validated by the checkpoint reader) are read;
3. the objects are made: Variables (on the device of the ``tf.device`` scope around
   ``load``, restored from the checkpoint), plain objects with the saved attributes,
   and functions. A restored function picks the saved concrete function whose inputs
   match the call and runs its graph through ``tf.function``: each node becomes the op
   call it records (``tf.cond`` / ``tf.while_loop`` for control flow), traced once
   per signature and replayed, so it is as fast as the original and differentiable
   (gradients reach the restored Variables).

Nothing in the files is ever executed as Python: ops are looked up by name in the
registry, attributes are decoded from tagged JSON into numbers, strings, tuples,
slices and dtypes.

Long file: the checks of every part of the format (manifest, graphs, nodes, values)
sit beside the interpreter that relies on them, so what is checked and what is run
can be read together.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import sys

import numpy as np

from .. import dtypes as _dt
from .. import nest
from ..errors import (DataLossError, InvalidArgumentError, InvalidTypeError, NotFoundError,
                      TapeflowError)
from ..runtime import devices as _devs
from ..runtime import registry as _registry
from ..runtime.dispatch import constant as _constant
from ..runtime.dispatch import convert_to_tensor, copy_to_device, execute
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..tracing import cond as _cond
from ..tracing import function as _function
from ..tracing import print_ as _print
from ..tracing import while_loop as _while_loop
from ..ops.composite import TypeSpec
from ..tracing.signatures import CompositeParts, TensorSpec
from ..tracing.signatures import expand_composites, has_composites, rebuild_composites
from ..tracing.signatures import canonical_call as _canonical_call
from ..train import files as _files
from ..train.checkpoint import Saver
from .writer import (CONSTANT_KINDS, FORMAT, MANIFEST, TYPE_SPECS, VERSION)

__all__ = ["load", "LoadOptions", "MAX_MANIFEST_BYTES", "MAX_CONSTANT_BYTES"]

#: the largest manifest read (graphs are ~200 bytes a node)
MAX_MANIFEST_BYTES = 256 << 20
#: the largest constants file read
MAX_CONSTANT_BYTES = 16 << 30
#: how deeply sub-graphs (tf.cond in tf.while_loop in ...) may nest
MAX_GRAPH_DEPTH = 64
_DEVICE_NAME = re.compile(r"^[a-z][a-z0-9_]*:[0-9]{1,4}$")
_NODE_KINDS = ("op", "const", "read", "assign", "copy", "cond", "while", "print")


class LoadOptions:
    """``tf.saved_model.LoadOptions``: accepted for compatibility (no option changes
    what tapeflow loads)."""

    def __init__(self, allow_partial_checkpoint=False, experimental_io_device=None,
                 experimental_skip_checkpoint=False, experimental_variable_policy=None,
                 **kwargs):
        self.allow_partial_checkpoint = allow_partial_checkpoint
        self.experimental_io_device = experimental_io_device
        self.experimental_skip_checkpoint = experimental_skip_checkpoint
        self.experimental_variable_policy = experimental_variable_policy


# --- plain data back ------------------------------------------------------------------------

class _Bad(Exception):
    """A check of the manifest failed (becomes a DataLossError naming the file)."""


def _need(ok, what):
    if not ok:
        raise _Bad(what)


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _np_dtype(name, where):
    _need(isinstance(name, str), f"{where}: dtype {name!r} is not a name")
    try:
        dt = np.dtype(name)
    except TypeError:
        raise _Bad(f"{where}: unknown dtype {name!r}") from None
    _need(dt.kind in CONSTANT_KINDS and dt.name == name, f"{where}: unknown dtype {name!r}")
    return dt


def decode_value(v, where, depth=0):
    """The value :func:`.writer.encode_value` wrote (tags only: never code)."""
    _need(depth < 100, f"{where}: a value nested too deeply")
    if v is None or isinstance(v, (bool, str, int, float)):
        return v
    if isinstance(v, list):
        return [decode_value(x, where, depth + 1) for x in v]
    _need(isinstance(v, dict) and len(v) == 1, f"{where}: {str(v)[:60]} is not a value")
    (tag, x), = v.items()
    if tag == "$tuple" and isinstance(x, list):
        return tuple(decode_value(y, where, depth + 1) for y in x)
    if tag == "$dict" and isinstance(x, list):
        out = {}
        for pair in x:
            _need(isinstance(pair, list) and len(pair) == 2, f"{where}: a bad dict entry")
            key = decode_value(pair[0], where, depth + 1)
            _need(isinstance(key, (str, int, float, bool, type(None), tuple)),
                  f"{where}: a dict key of an unhashable kind")
            out[key] = decode_value(pair[1], where, depth + 1)
        return out
    if tag == "$typespec":
        return _decode_spec(x, where, depth)
    if tag == "$composite" and isinstance(x, list) and len(x) == 2:
        parts = decode_value(x[1], where, depth + 1)
        _need(isinstance(parts, tuple), f"{where}: a composite value without components")
        return CompositeParts(decode_value(x[0], where, depth + 1), parts)
    if tag == "$dtype" and isinstance(x, str):
        try:
            return _dt.as_dtype(x)
        except Exception:
            raise _Bad(f"{where}: unknown dtype {x!r}") from None
    if tag == "$npdtype":
        return _np_dtype(x, where)
    if tag == "$float" and x in ("nan", "inf", "-inf"):
        return float(x)
    if tag == "$slice" and isinstance(x, list) and len(x) == 3:
        parts = [decode_value(y, where, depth + 1) for y in x]
        _need(all(p is None or _is_int(p) for p in parts), f"{where}: a slice of non-ints")
        return slice(*parts)
    if tag == "$ellipsis" and x is True:
        return Ellipsis
    if tag == "$complex" and isinstance(x, list) and len(x) == 2 and all(
            isinstance(y, (int, float)) for y in x):
        return complex(x[0], x[1])
    if tag == "$scalar" and isinstance(x, list) and len(x) == 2:
        dt = _np_dtype(x[0], where)
        return dt.type(_plain_number(x[1], where))
    if tag == "$array" and isinstance(x, list) and len(x) == 3:
        dt = _np_dtype(x[0], where)
        shape = _shape(x[1], where, unknown=False)
        data = [_plain_number(y, where) for y in x[2]] if isinstance(x[2], list) else None
        _need(data is not None and len(data) == int(np.prod(shape, dtype=np.int64)),
              f"{where}: an array whose data is not of its shape")
        return np.array(data, dtype=dt).reshape(shape)
    raise _Bad(f"{where}: unknown value tag {tag!r}")


def _decode_spec(x, where, depth):
    """A registered TypeSpec class (by name: never an import) built from plain data."""
    _need(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str),
          f"{where}: a malformed $typespec")
    name = x[0]
    if name not in TYPE_SPECS:
        raise _Bad(f"{where}: unknown composite type {name[:60]!r} (this tapeflow reads "
                   f"{', '.join(sorted(TYPE_SPECS))}; a plugin's type must be registered "
                   "with tapeflow.saved_model.writer.register_type_spec before loading)")
    args = decode_value(x[1], where, depth + 1)
    _need(isinstance(args, tuple), f"{where}: {name} arguments are not a tuple")
    try:
        return TYPE_SPECS[name][0](*args)
    except Exception as e:                      # (the class's own checks of its arguments)
        raise _Bad(f"{where}: bad {name} arguments {str(args)[:80]}: {e}") from None


def _plain_number(x, where):
    if isinstance(x, dict) and len(x) == 1 and ("$float" in x or "$complex" in x):
        return decode_value(x, where)
    _need(isinstance(x, (int, float, bool)), f"{where}: {str(x)[:40]} is not a number")
    return x


def _shape(s, where, unknown=True):
    if s is None and unknown:
        return None
    _need(isinstance(s, list) and len(s) <= 64 and all(
        (_is_int(d) and 0 <= d < 1 << 40) or (d is None and unknown) for d in s),
        f"{where}: {str(s)[:60]} is not a shape")
    return tuple(s)


def _type(t, where):
    _need(isinstance(t, list) and len(t) == 2, f"{where}: a value type is not [shape, dtype]")
    return _shape(t[0], where, unknown=False), _np_dtype(t[1], where)


# --- checking the manifest --------------------------------------------------------------------

def _category(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float, np.number)):
        return "number"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (tuple, list)):
        return "sequence"
    if isinstance(v, _dt.DType):
        return "dtype"
    return "other"


def _check_attrs(op, attrs, where):
    _need(isinstance(attrs, dict), f"{where}: attrs is not an object")
    out = {}
    for name, raw in attrs.items():
        _need(name in op.attrs, f"{where}: op {op.name} has no attribute {name!r} (it has "
                                f"{sorted(op.attrs)})")
        v = decode_value(raw, f"{where}, attribute {name!r}")
        default = op.attrs[name]
        dc, vc = _category(default), _category(v)
        if default is not _registry.REQUIRED and None not in (dc, vc) and "other" not in (
                dc, vc) and dc != vc and not (dc == "number" and vc == "bool"):
            raise _Bad(f"{where}: attribute {name!r} of op {op.name} is {type(v).__name__} "
                       f"{str(v)[:40]}, where the op takes a {dc} (like its default "
                       f"{default!r})")
        out[name] = v
    return out


class _Checker:
    """Checks a manifest (raises _Bad) and decodes what the builder needs."""

    def __init__(self, m):
        self.m = m
        objs = m.get("objects")
        _need(isinstance(objs, list) and objs, "has no object list")
        self.objects = objs
        consts = m.get("constants")
        _need(isinstance(consts, dict) and isinstance(consts.get("entries"), list),
              "has no constants table")
        self.n_constants = len(consts["entries"])
        self.const_types = []

    def object(self, i, o):
        w = f"object {i}"
        _need(isinstance(o, dict), f"{w} is not an object")
        kind = o.get("kind")
        n = len(self.objects)
        if kind == "variable":
            _need(isinstance(o.get("key"), str) and isinstance(o.get("name", ""), str)
                  and isinstance(o.get("trainable", True), bool), f"{w}: a bad variable")
            _shape(o.get("shape"), w, unknown=False)
            _np_dtype(o.get("dtype"), w)
        elif kind == "function":
            cs = o.get("concrete")
            _need(isinstance(cs, list) and all(isinstance(c, str) and c in self.m["functions"]
                                               for c in cs)
                  and isinstance(o.get("name", ""), str),
                  f"{w}: a function naming a concrete function that is not in the file")
        elif kind in ("list", "tuple"):
            ch = o.get("children")
            _need(isinstance(ch, list) and all(_is_int(c) and 0 <= c < n for c in ch),
                  f"{w}: a bad child reference")
        elif kind == "dict":
            ch = o.get("children")
            _need(isinstance(ch, list) and all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], (str, int))
                and _is_int(p[1]) and 0 <= p[1] < n for p in ch), f"{w}: a bad child reference")
        elif kind == "user_object":
            ch = o.get("children")
            _need(isinstance(ch, dict) and all(_is_int(c) and 0 <= c < n for c in ch.values()),
                  f"{w}: a bad child reference")
            _need(isinstance(o.get("class_name", ""), str), f"{w}: a bad class name")
        else:
            raise _Bad(f"{w} has unknown kind {kind!r}")

    def concrete(self, cid, f):
        w = f"concrete function {cid!r}"
        _need(isinstance(f, dict), f"{w} is not an object")
        _need(isinstance(f.get("name"), str) and isinstance(f.get("params"), list)
              and _is_int(f.get("n_args")) and isinstance(f.get("kwargs"), list)
              and isinstance(f.get("inputs"), list) and isinstance(f.get("outputs"), list),
              f"{w}: missing or malformed fields")
        g = self.graph(f.get("graph"), w, 0)
        f["_signature"] = _python_signature(f["params"], w)
        tensors = 0
        for i, item in enumerate(f["inputs"]):
            wi = f"{w}, input {i}"
            _need(isinstance(item, dict) and isinstance(item.get("path"), list) and all(
                isinstance(p, (str, int)) and not isinstance(p, bool) for p in item["path"]),
                f"{wi}: a bad path")
            kind = item.get("kind")
            if kind == "value":
                decode_value(item.get("value"), wi)
                continue
            _need(kind in ("tensor", "variable"), f"{wi}: unknown kind {kind!r}")
            shape = _shape(item.get("shape"), wi)
            dt = _np_dtype(item.get("dtype"), wi)
            _need(tensors < len(g["args"]), f"{w}: more tensor inputs than graph arguments")
            ashape, adt = g["args"][tensors]
            _need(adt == dt and (shape is None or len(shape) == len(ashape)),
                  f"{wi}: {dt.name}{shape} does not match the graph's argument "
                  f"{adt.name}{list(ashape)}")
            tensors += 1
        _need(tensors == len(g["args"]), f"{w}: {tensors} tensor inputs for "
                                         f"{len(g['args'])} graph arguments")
        decode_value(f.get("output_structure"), w)
        shapes = f.get("output_shapes")
        if shapes is not None:
            _need(isinstance(shapes, list) and len(shapes) == g["n_outputs"],
                  f"{w}: malformed output shapes")
            for sh in shapes:
                _shape(sh, w)
        for o in f["outputs"]:
            _need(isinstance(o, dict) and len(o) == 1, f"{w}: a bad output")
            if "tensor" in o:
                _need(_is_int(o["tensor"]) and 0 <= o["tensor"] < g["n_outputs"],
                      f"{w}: output {o['tensor']!r} is not one of the graph's")
            else:
                _need("value" in o, f"{w}: a bad output")
                decode_value(o["value"], w)

    def graph(self, g, where, depth):
        """Checks graph ``g``; returns its argument types and output count."""
        _need(depth <= MAX_GRAPH_DEPTH, f"{where}: sub-graphs nested too deeply")
        _need(isinstance(g, dict) and isinstance(g.get("args"), list)
              and isinstance(g.get("nodes"), list) and isinstance(g.get("outputs"), list),
              f"{where}: the graph is missing or malformed")
        where = f"{where}, graph {str(g.get('name'))[:40]!r}"
        defined = {}
        args = []
        for a in g["args"]:
            _need(isinstance(a, dict) and _is_int(a.get("id")) and a["id"] not in defined
                  and isinstance(a.get("name", ""), str), f"{where}: a bad argument")
            t = _type(a.get("type"), where)
            defined[a["id"]] = t
            args.append(t)
        for i, n in enumerate(g["nodes"]):
            self.node(n, defined, f"{where}, node {i}", depth, len(args))
        for o in g["outputs"]:
            _need(_is_int(o) and o in defined, f"{where}: output {o!r} is not a value of "
                                                "the graph")
        return {"args": args, "n_outputs": len(g["outputs"])}

    def node(self, n, defined, w, depth, n_args):
        _need(isinstance(n, dict), f"{w} is not an object")
        kind = n.get("kind")
        _need(kind in _NODE_KINDS, f"{w}: unknown node kind {kind!r}")
        ins, outs, types_ = n.get("in"), n.get("out"), n.get("types")
        _need(isinstance(ins, list) and isinstance(outs, list) and isinstance(types_, list)
              and len(types_) == len(outs), f"{w}: malformed inputs or outputs")
        for v in ins:
            _need(_is_int(v) and v in defined, f"{w}: input {v!r} is not defined before it "
                                               "(a bad input reference)")
        w = f"{w} ({n.get('op', kind)})"
        if kind == "op":
            name = n.get("op")
            _need(isinstance(name, str) and _registry.has_op(name),
                  f"{w}: unknown op {str(name)[:60]!r} (not registered in this tapeflow; "
                  "a plugin's op needs its plugin installed)")
            n["_attrs"] = _check_attrs(_registry.get_op(name), n.get("attrs", {}), w)
        elif kind == "const":
            c = n.get("constant")
            _need(_is_int(c) and 0 <= c < self.n_constants and len(outs) == 1,
                  f"{w}: constant {c!r} is not in the constants table")
            self.const_types.append((c, types_[0], w))
        elif kind in ("read", "assign"):
            _need(len(outs) == (1 if kind == "read" else 0)
                  and len(ins) == (0 if kind == "read" else 1), f"{w}: malformed")
            if "arg" in n:
                _need(_is_int(n["arg"]) and 0 <= n["arg"] < n_args, f"{w}: a bad argument")
            else:
                v = n.get("variable")
                _need(_is_int(v) and 0 <= v < len(self.objects) and isinstance(
                    self.objects[v], dict) and self.objects[v].get("kind") == "variable",
                    f"{w}: variable {v!r} is not a variable of the object graph")
        elif kind == "copy":
            _need(isinstance(n.get("device"), str) and _DEVICE_NAME.match(n["device"])
                  and len(ins) == 1 and len(outs) == 1, f"{w}: a bad device copy")
        elif kind == "print":
            self._print(n, ins, w)
        else:
            self._control_flow(n, kind, ins, outs, w, depth)
        for v, t in zip(outs, types_):
            _need(_is_int(v) and v not in defined, f"{w}: value {v!r} is defined twice")
            defined[v] = _type(t, w)

    def _print(self, n, ins, w):
        pos = n.get("positions")
        _need(isinstance(pos, list) and len(pos) == len(ins) and all(_is_int(p) for p in pos)
              and isinstance(n.get("sep"), str) and isinstance(n.get("end"), str)
              and _is_int(n.get("summarize")) and n.get("stream") in ("stdout", "stderr", None),
              f"{w}: a bad print")
        items = decode_value(n.get("items"), w)
        _need(isinstance(items, list), f"{w}: a bad print")
        leaves = nest.flatten(items)
        _need(all(0 <= p < len(leaves) and leaves[p] is None for p in pos),
              f"{w}: a bad print")
        n["_items"] = items

    def _control_flow(self, n, kind, ins, outs, w, depth):
        caps = n.get("captures")
        _need(isinstance(caps, list) and len(caps) == 2 and all(
            isinstance(c, list) and all(_is_int(i) for i in c) for c in caps),
            f"{w}: bad capture lists")
        if kind == "cond":
            br = n.get("branches")
            _need(isinstance(br, list) and len(br) == 2 and len(ins) >= 1, f"{w}: malformed")
            n_caps = len(ins) - 1
            for b, c, name in zip(br, caps, ("true branch", "false branch")):
                info = self.graph(b, f"{w}, {name}", depth + 1)
                _need(all(0 <= i < n_caps for i in c) and len(info["args"]) == len(c)
                      and info["n_outputs"] == len(outs), f"{w}: the {name} does not fit")
            return
        k, limit = n.get("n"), n.get("limit")
        _need(_is_int(k) and 0 <= k <= len(ins) and len(outs) == k
              and (limit is None or _is_int(limit)), f"{w}: malformed loop")
        n_caps = len(ins) - k
        for part, c, outs_expected in (("cond", caps[0], 1), ("body", caps[1], k)):
            info = self.graph(n.get(part), f"{w}, loop {part}", depth + 1)
            _need(all(0 <= i < n_caps for i in c) and len(info["args"]) == k + len(c)
                  and info["n_outputs"] == outs_expected, f"{w}: the loop {part} does not fit")


def _check_manifest(m):
    _need(isinstance(m, dict), "is not a JSON object")
    _need(m.get("format") == FORMAT, f"is not a tapeflow SavedModel manifest (format "
                                     f"{str(m.get('format'))[:40]!r})")
    v = m.get("version")
    _need(_is_int(v) and v >= 1, f"has a bad format version {v!r}")
    if v > VERSION:
        raise _Bad(f"was written by a newer tapeflow ({m.get('tapeflow_version')!r}, format "
                   f"version {v} > {VERSION}, the newest this tapeflow reads); upgrade "
                   "tapeflow to load it")
    _need(isinstance(m.get("functions"), dict) and isinstance(m.get("signatures"), dict),
          "has no function table or signature table")
    c = _Checker(m)
    for i, o in enumerate(c.objects):
        c.object(i, o)
    _need(c.objects[0].get("kind") in ("user_object", "function"),
          "has a root object that is neither an object nor a function")
    for cid, f in m["functions"].items():
        c.concrete(cid, f)
    for name, s in m["signatures"].items():
        _need(isinstance(s, dict) and isinstance(s.get("concrete"), str)
              and s["concrete"] in m["functions"]
              and isinstance(s.get("inputs"), list) and isinstance(s.get("outputs"), list)
              and all(isinstance(x, str) for x in s["inputs"] + s["outputs"]),
              f"signature {str(name)[:40]!r} is malformed")
        f = m["functions"][s["concrete"]]
        _need(len(s["inputs"]) == sum(1 for x in f["inputs"] if x.get("kind") != "value"),
              f"signature {name!r} names {len(s['inputs'])} inputs for another number")
    var = m.get("variables")
    _need(var is None or var == "variables/variables", f"names variables {str(var)[:60]!r}")
    return c


# --- reading the files ---------------------------------------------------------------------

def _read_constants(export_dir, m, checker):
    table = m["constants"]
    path = os.path.join(export_dir, table.get("file", ""))
    _need(table.get("file") == "constants.bin" and _is_int(table.get("bytes"))
          and 0 <= table["bytes"] <= MAX_CONSTANT_BYTES and isinstance(table.get("sha256"), str),
          "has a malformed constants table")
    try:
        blob = _files.read_regular(path, MAX_CONSTANT_BYTES, "SavedModel constants file",
                                   exact=table["bytes"])
    except FileNotFoundError:
        raise DataLossError(f"SavedModel '{export_dir}' is incomplete: its constants file "
                            f"'{path}' is missing") from None
    if hashlib.sha256(blob).hexdigest() != table["sha256"]:
        raise DataLossError(f"SavedModel '{export_dir}' is corrupt: the SHA-256 of '{path}' "
                            f"does not match {MANIFEST}")
    arrays = []
    for i, e in enumerate(table["entries"]):
        w = f"constant {i}"
        _need(isinstance(e, dict) and _is_int(e.get("offset")) and _is_int(e.get("nbytes")),
              f"{w}: malformed")
        dt = _np_dtype(e.get("dtype"), w)
        shape = _shape(e.get("shape"), w, unknown=False)
        size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        _need(e["nbytes"] == size and 0 <= e["offset"] and e["offset"] + size <= len(blob),
              f"{w}: {dt.name}{list(shape)} does not fit its {e['nbytes']} bytes at offset "
              f"{e['offset']} of {len(blob)}")
        a = np.frombuffer(blob, dtype=dt, count=size // dt.itemsize if dt.itemsize else 0,
                          offset=e["offset"]).reshape(shape)
        arrays.append(a)
    for c, t, w in checker.const_types:
        shape, dt = _type(t, w)
        _need(arrays[c].shape == shape and arrays[c].dtype == dt,
              f"{w}: constant {c} is {arrays[c].dtype.name}{list(arrays[c].shape)}, the node "
              f"declares {dt.name}{list(shape)}")
    return arrays


def _read_manifest(export_dir):
    if not isinstance(export_dir, (str, os.PathLike)):
        raise InvalidTypeError(f"tf.saved_model.load: export_dir is "
                               f"{type(export_dir).__name__}; pass a directory path")
    export_dir = os.fspath(export_dir)
    path = os.path.join(export_dir, MANIFEST)
    if not os.path.isdir(export_dir):
        raise NotFoundError(f"SavedModel directory '{export_dir}' does not exist")
    try:
        raw = _files.read_regular(path, MAX_MANIFEST_BYTES, "SavedModel manifest")
    except FileNotFoundError:
        hint = (" ('saved_model.pb' is TensorFlow's format, which tapeflow does not read: "
                "save the model again with tapeflow)"
                if os.path.exists(os.path.join(export_dir, "saved_model.pb")) else "")
        raise NotFoundError(f"'{export_dir}' is not a SavedModel: it has no {MANIFEST} "
                            f"(written by tf.saved_model.save){hint}") from None
    try:
        m = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataLossError(f"SavedModel manifest '{path}' is corrupt or truncated "
                            f"({e})") from None
    except RecursionError:
        raise DataLossError(f"SavedModel manifest '{path}' is corrupt (JSON nested too "
                            "deeply)") from None
    return export_dir, path, m


# --- the rebuilt objects -------------------------------------------------------------------

class _UserObject:
    """A restored object: the saved attributes (Variables, functions, objects, lists and
    dicts of them). Calling it calls its restored ``__call__``."""

    def __call__(self, *args, **kwargs):
        fn = self.__dict__.get("__call__")
        if fn is None:
            raise InvalidTypeError(f"this restored object ({self._class_name}) was saved "
                                   "without a __call__ tf.function")
        return fn(*args, **kwargs)

    def __repr__(self):
        return f"<restored {self._class_name} object at {id(self):#x}>"

    @property
    def variables(self):
        """Every Variable of the object and those it holds, each once (a saved
        attribute of that name comes first)."""
        return self.__dict__.get("variables", _collect(self, lambda v: True))

    @property
    def trainable_variables(self):
        return self.__dict__.get("trainable_variables", _collect(self, lambda v: v.trainable))

    @property
    def non_trainable_variables(self):
        return self.__dict__.get("non_trainable_variables",
                                 _collect(self, lambda v: not v.trainable))


def _collect(root, keep):
    out, seen, stack = [], set(), [root]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Variable):
            if keep(x):
                out.append(x)
        elif isinstance(x, _UserObject):
            stack.extend(reversed([v for k, v in vars(x).items()
                                   if k not in ("_class_name", "signatures")]))
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
    return out


def _at(args, kwargs, path):
    """The value at ``path`` in ``(args, kwargs)``; raises LookupError if none."""
    x = (args, kwargs)
    for p in path:
        if isinstance(x, dict):
            x = x[p]
        elif isinstance(x, (list, tuple)) and isinstance(p, int):
            x = x[p]
        elif type(x) is CompositeParts and p in CompositeParts._fields:
            x = getattr(x, p)
        else:
            raise LookupError(p)
    return x


def _compatible(shape, spec_shape):
    if spec_shape is None:
        return True
    return len(shape) == len(spec_shape) and all(
        s is None or s == d for s, d in zip(spec_shape, shape))


def _same_value(x, v):
    if isinstance(v, TypeSpec):                 # a composite argument's type (and shape)
        return isinstance(x, TypeSpec) and v.is_compatible_with(x) and (
            v.shape is None or x.shape is None or _compatible(tuple(x.shape), tuple(v.shape)))
    try:
        return type(x) is type(v) and bool(x == v)
    except Exception:                  # (a comparison that does not give one bool)
        return False


class _Out:
    """An output slot while :func:`_check_parts` checks the structure."""

    def __init__(self, kind, value):
        self.kind, self.value = kind, value


def _check_parts(structure, outputs, where):
    """Each composite of the output structure takes a TypeSpec (a saved value) and as many
    tensors as the spec has components (raises _Bad)."""
    if not any(isinstance(v, CompositeParts) for v in _walk(structure)):
        return
    try:
        packed = nest.pack_sequence_as(structure, [_Out(k, v) for k, v in outputs])
    except Exception:
        raise _Bad(f"concrete function {where!r}: its outputs do not fit its output "
                   "structure") from None
    for parts in (v for v in _walk(packed) if type(v) is CompositeParts):
        spec, comps = parts.spec, nest.flatten(parts.components)
        _need(isinstance(spec, _Out) and spec.kind == "py" and isinstance(spec.value, TypeSpec)
              and all(isinstance(c, _Out) and c.kind == "t" for c in comps)
              and len(comps) == len(spec.value.component_specs()),
              f"concrete function {where!r}: a returned composite without its TypeSpec "
              "and components")


def _walk(structure):
    """Every node of a decoded structure (containers and leaves)."""
    stack = [structure]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)


def _specs_of(structure):
    """``structure`` with each composite's parts shown as its TypeSpec."""
    if type(structure) is CompositeParts:
        return structure.spec
    if isinstance(structure, dict):
        return type(structure)((k, _specs_of(v)) for k, v in structure.items())
    if isinstance(structure, (list, tuple)) and not hasattr(structure, "_fields"):
        return type(structure)(_specs_of(v) for v in structure)
    return structure


def _fresh(v):
    return v.copy() if isinstance(v, (list, dict, np.ndarray)) else v


class _Concrete:
    """One restored concrete function: the saved graph, run through ``tf.function``
    (each node the op call it records); callable with arguments that match its saved
    inputs."""

    def __init__(self, cid, f, objects, constants, device):
        self.cid = cid
        self.name = f["name"]
        self.signature = f["_signature"]
        self.n_args = f["n_args"]
        self.kwarg_names = set(f["kwargs"])
        self.inputs = []
        for item in f["inputs"]:
            path = tuple(item["path"])
            if item["kind"] == "value":
                self.inputs.append((path, "value", None, None, decode_value(item["value"],
                                                                            cid)))
            else:
                self.inputs.append((path, item["kind"], _shape(item["shape"], cid),
                                    np.dtype(item["dtype"]), None))
        self.structure = decode_value(f["output_structure"], cid)
        self.outputs = [("t", o["tensor"]) if "tensor" in o else
                        ("py", decode_value(o["value"], cid)) for o in f["outputs"]]
        _check_parts(self.structure, self.outputs, cid)
        self.graph = f["graph"]
        self._output_shapes = f.get("output_shapes")
        self._objects = objects
        self._constants = constants
        self._device = device
        self._fn = _function(self._run_flat, name=self.name)

    # matching a call ---------------------------------------------------------------------
    def match(self, args, kwargs):
        """The tensor leaves of this call if it fits the saved inputs, else None."""
        if len(args) != self.n_args or set(kwargs) != self.kwarg_names:
            return None
        if has_composites((args, kwargs)):      # (saved by their TypeSpec and components)
            args, kwargs = expand_composites((args, kwargs))
        leaves, tensor_paths = [], []
        for path, kind, shape, dt, value in self.inputs:
            try:
                x = _at(args, kwargs, path)
            except (LookupError, IndexError, TypeError):
                return None
            if kind == "value":
                if not _same_value(x, value):
                    return None
                continue
            if kind == "variable":
                if not isinstance(x, Variable):
                    return None
                t = x
            elif isinstance(x, Variable):
                t = x.read_value()
            elif isinstance(x, Tensor):
                t = x
            else:
                try:
                    t = convert_to_tensor(x, dtype=_dt.from_numpy(dt))
                except Exception:
                    return None
            if t.dtype.np != dt or not _compatible(tuple(t.shape), shape):
                return None
            leaves.append(t)
            tensor_paths.append(path)
        saved = {p for p, *_ in self.inputs}
        for p, _ in nest.flatten_with_paths((args, kwargs)):
            p = tuple(p)
            if p not in saved and not any(p[:len(s)] == s for s in tensor_paths):
                return None
        return leaves

    def describe(self):
        parts = []
        for path, kind, shape, dt, value in self.inputs:
            where = "".join(f"[{p!r}]" for p in path[1:])
            where = ("args" if path[:1] == (0,) else "kwargs") + where
            parts.append(f"{where}={value!r}" if kind == "value" else
                         f"{where}: {dt.name}{list(shape) if shape is not None else '[?]'}")
        return f"{self.name}({', '.join(parts)})"

    def __call__(self, *args, **kwargs):
        leaves = self.match(*_canonical(self.signature, args, kwargs))
        if leaves is None:
            raise InvalidArgumentError(
                f"restored concrete function {self.describe()} cannot be called with these "
                "arguments (their structure, dtypes or shapes differ from the saved ones)")
        return self.call_leaves(leaves)

    def call_flat(self, leaves):
        """The graph's output tensors for the tensor leaves ``leaves``."""
        if self._device is not None:
            with _devs.device(self._device):
                return list(self._fn(*leaves))
        return list(self._fn(*leaves))

    def call_leaves(self, leaves):
        outs = self.call_flat(leaves)
        flat = [outs[v] if kind == "t" else _fresh(v) for kind, v in self.outputs]
        if self.structure is None:
            return flat[0] if flat else None
        return rebuild_composites(nest.pack_sequence_as(self.structure, flat))

    @property
    def structured_outputs(self):
        types_ = self._output_types()
        flat = [TensorSpec(*types_[v]) if kind == "t" else v for kind, v in self.outputs]
        if self.structure is None:
            return flat[0] if flat else None
        return _specs_of(nest.pack_sequence_as(self.structure, flat))

    @property
    def structured_input_signature(self):
        args = [None] * self.n_args
        kwargs = {}
        for path, kind, shape, dt, value in self.inputs:
            leaf = value if kind == "value" else TensorSpec(shape, dt, None)
            if len(path) == 3 and path[2] == "spec" and isinstance(value, TypeSpec):
                path = path[:2]                 # (a composite argument: its TypeSpec)
            if len(path) == 2:
                if path[0] == 0:
                    args[path[1]] = leaf
                else:
                    kwargs[path[1]] = leaf
        return tuple(args), kwargs

    def _output_types(self):
        types_ = {a["id"]: a["type"] for a in self.graph["args"]}
        for n in self.graph["nodes"]:
            types_.update(zip(n["out"], n["types"]))
        out = [(tuple(types_[o][0]), types_[o][1]) for o in self.graph["outputs"]]
        if self._output_shapes is not None:
            out = [(None if s is None else tuple(s), dt)
                   for s, (_, dt) in zip(self._output_shapes, out)]
        return out

    # the interpreter (runs while tf.function traces) -------------------------------------
    def _run_flat(self, *leaves):
        return self._run(self.graph, list(leaves), list(leaves))

    def _run(self, g, leaves, vargs):
        env = {a["id"]: x for a, x in zip(g["args"], leaves)}
        for n in g["nodes"]:
            ins = [env[i] for i in n["in"]]
            outs = self._node(n, ins, vargs)
            if len(outs) != len(n["out"]):
                raise DataLossError(
                    f"SavedModel function {self.name!r}: node {n.get('op', n['kind'])} gave "
                    f"{len(outs)} outputs where the graph declares {len(n['out'])}")
            for v, t, ty in zip(n["out"], outs, n["types"]):
                if isinstance(t, (Tensor, Variable)) and t.dtype.np.name != ty[1]:
                    raise DataLossError(
                        f"SavedModel function {self.name!r}: node {n.get('op', n['kind'])} "
                        f"gave {t.dtype.name} where the graph declares {ty[1]} (the "
                        "saved graph does not fit this op)")
                env[v] = t
        return [env[o] for o in g["outputs"]]

    def _node(self, n, ins, vargs):
        k = n["kind"]
        if k == "op":
            out = execute(_registry.get_op(n["op"]), tuple(ins), dict(n["_attrs"]))
            return out if isinstance(out, tuple) else (out,)
        if k == "const":
            return (_constant(self._constants[n["constant"]]),)
        if k in ("read", "assign"):
            var = vargs[n["arg"]] if "arg" in n else self._objects[n["variable"]]
            if k == "read":
                return (var.read_value() if isinstance(var, Variable) else var,)
            var.assign(ins[0])
            return ()
        if k == "copy":
            try:
                dev = _devs.get_device(n["device"])
            except NotFoundError:
                return (ins[0],)          # (soft placement: that device is not here)
            return (copy_to_device(ins[0], dev),)
        if k == "print":
            leaves = nest.flatten(n["_items"])
            for p, t in zip(n["positions"], ins):
                leaves[p] = t
            items = nest.pack_sequence_as(n["_items"], leaves)
            stream = {"stdout": sys.stdout, "stderr": sys.stderr}.get(n["stream"])
            _print(*items, sep=n["sep"], end=n["end"], output_stream=stream,
                   summarize=n["summarize"])
            return ()
        caps_t, caps_f = n["captures"]
        if k == "cond":
            caps = ins[1:]
            gt, gf = n["branches"]
            out = _cond(ins[0], lambda: self._run(gt, [caps[i] for i in caps_t], vargs),
                        lambda: self._run(gf, [caps[i] for i in caps_f], vargs))
            return tuple(out)
        m = n["n"]
        caps = ins[m:]
        cc = [caps[i] for i in caps_t]
        cb = [caps[i] for i in caps_f]
        if m == 0:
            return ()
        out = _while_loop(lambda *vs: self._run(n["cond"], list(vs) + cc, vargs)[0],
                          lambda *vs: self._run(n["body"], list(vs) + cb, vargs),
                          list(ins[:m]), maximum_iterations=n["limit"])
        return tuple(out)


def _python_signature(params, where):
    """The ``inspect.Signature`` a concrete function's calls are bound to (built from
    names, kinds and plain-data defaults: no code), or None when none was saved."""
    if not params:
        return None
    out = []
    for p in params:
        _need(isinstance(p, dict) and isinstance(p.get("name"), str)
              and p["name"].isidentifier() and isinstance(p.get("kind"), str)
              and p["kind"] in _KINDS,
              f"{where}: a bad parameter {str(p)[:60]}")
        default = decode_value(p["default"], where) if "default" in p else _EMPTY
        out.append(inspect.Parameter(p["name"], _KINDS[p["kind"]], default=default))
    try:
        return inspect.Signature(out)
    except (ValueError, TypeError) as e:
        raise _Bad(f"{where}: its parameters do not make a signature ({e})") from None


_EMPTY = inspect.Parameter.empty
_P = inspect.Parameter
_KINDS = {k.name: k for k in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD, _P.VAR_POSITIONAL,
                             _P.KEYWORD_ONLY, _P.VAR_KEYWORD)}


def _canonical(sig, args, kwargs):
    """The call bound to the saved Python signature with its defaults (as the original
    tf.function bound it), or the call as given when it does not bind."""
    if sig is None:
        return args, kwargs
    c = _canonical_call(sig, args, kwargs)
    return (args, kwargs) if c is None else (c[0], c[1])


class _RestoredFunction:
    """A restored ``tf.function``: calls the saved concrete function its arguments
    match (as TensorFlow's restored functions do)."""

    def __init__(self, name, concretes):
        self.name = name
        self.concrete_functions = list(concretes)

    def get_concrete_function(self, *args, **kwargs):
        cf, _ = self._find(args, kwargs)
        return cf

    def _find(self, args, kwargs):
        for cf in self.concrete_functions:
            leaves = cf.match(*_canonical(cf.signature, args, kwargs))
            if leaves is not None:
                return cf, leaves
        saved = "; ".join(cf.describe() for cf in self.concrete_functions) or "none"
        raise InvalidArgumentError(
            f"restored function {self.name!r}: no saved concrete function matches this call "
            f"(saved signatures: {saved}). A SavedModel keeps the signatures that were "
            "traced before saving: call the function (or give it an input_signature) with "
            "these argument types before tf.saved_model.save.")

    def __call__(self, *args, **kwargs):
        cf, leaves = self._find(args, kwargs)
        return cf.call_leaves(leaves)

    def __repr__(self):
        return (f"<restored tf.function {self.name} ({len(self.concrete_functions)} concrete "
                "functions)>")


class _Signature:
    """A restored signature: called with keyword arguments (or positionally, in order)
    named by its inputs; returns a dict of named outputs."""

    def __init__(self, name, cf, inputs, outputs):
        self.name = name
        self._cf = cf
        self._input_names = list(inputs)
        self._output_names = list(outputs)
        self._specs = [(shape, dt) for _, kind, shape, dt, _ in cf.inputs if kind != "value"]

    @property
    def structured_input_signature(self):
        return (), {n: TensorSpec(s, d, n) for n, (s, d) in zip(self._input_names, self._specs)}

    @property
    def structured_outputs(self):
        types_ = self._cf._output_types()
        tensors = [v for kind, v in self._cf.outputs if kind == "t"]
        return {n: TensorSpec(*types_[v], n) for n, v in zip(self._output_names, tensors)}

    def __call__(self, *args, **kwargs):
        names = self._input_names
        if len(args) > len(names):
            raise InvalidArgumentError(f"signature {self.name!r} takes {len(names)} inputs "
                                       f"({', '.join(names)}); got {len(args)} positional")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names or k in given:
                raise InvalidArgumentError(
                    f"signature {self.name!r}: unexpected or repeated argument {k!r} (its "
                    f"inputs: {', '.join(names)})")
            given[k] = v
        missing = [n for n in names if n not in given]
        if missing:
            raise InvalidArgumentError(f"signature {self.name!r}: missing input(s) {missing}")
        leaves = []
        for n, (shape, dt) in zip(names, self._specs):
            x = given[n]
            t = x.read_value() if isinstance(x, Variable) else x if isinstance(
                x, Tensor) else convert_to_tensor(x, dtype=_dt.from_numpy(dt))
            if t.dtype.np != dt or not _compatible(tuple(t.shape), shape):
                raise InvalidArgumentError(
                    f"signature {self.name!r}: input {n!r} is {t.dtype.name}{list(t.shape)}; "
                    f"it takes {dt.name}{'[?]' if shape is None else list(shape)}")
            leaves.append(t)
        outs = self._cf.call_flat(leaves)
        tensors = [outs[v] for kind, v in self._cf.outputs if kind == "t"]
        return dict(zip(self._output_names, tensors))

    def __repr__(self):
        return f"<restored signature {self.name}({', '.join(self._input_names)})>"


# --- load ------------------------------------------------------------------------------------

def _make_variables(export_dir, m, device):
    """The Variables of the object graph, restored from ``variables/``: ``{index: var}``."""
    made, by_key = {}, {}
    for i, o in enumerate(m["objects"]):
        if o["kind"] != "variable":
            continue
        _need(o["key"] not in by_key, f"object {i}: checkpoint key {o['key']!r} is used twice")
        name = o.get("name") or "Variable"
        name = name[:-2] if name.endswith(":0") else name
        with _devs.device(device) if device is not None else _no_scope():
            var = Variable(np.zeros(o["shape"], np.dtype(o["dtype"])),
                           trainable=o.get("trainable", True), name=name)
        made[i] = var
        by_key[o["key"]] = var
    if by_key:
        _need(m.get("variables") is not None, "has Variables but no variables checkpoint")
        prefix = os.path.join(export_dir, *m["variables"].split("/"))
        try:
            Saver(by_key).restore(prefix)
        except NotFoundError as e:
            raise NotFoundError(f"SavedModel '{export_dir}': its variables could not be "
                                f"restored: {e.message}") from None
        except DataLossError as e:
            raise DataLossError(f"SavedModel '{export_dir}': its variables checkpoint is "
                                f"corrupt: {e.message}") from None
    return made


class _no_scope:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _build(m, objects, concretes):
    """Make the objects of the object graph (``objects`` holds the Variables)."""
    objs = m["objects"]
    for i, o in enumerate(objs):
        kind = o["kind"]
        if i in objects:
            continue
        if kind == "user_object":
            obj = _UserObject()
            obj.__dict__["_class_name"] = o.get("class_name") or "object"
            objects[i] = obj
        elif kind == "function":
            objects[i] = _RestoredFunction(o.get("name") or "function",
                                           [concretes[c] for c in o["concrete"]])
        elif kind == "list":
            objects[i] = []
        elif kind == "dict":
            objects[i] = {}
    resolving = set()

    def get(i):
        if i in objects:
            return objects[i]
        _need(i not in resolving, f"object {i}: a tuple that contains itself")
        resolving.add(i)
        objects[i] = tuple(get(c) for c in objs[i]["children"])
        return objects[i]
    for i, o in enumerate(objs):
        kind = o["kind"]
        if kind == "user_object":
            for name, c in o["children"].items():
                objects[i].__dict__[name] = get(c)
        elif kind == "list":
            objects[i].extend(get(c) for c in o["children"])
        elif kind == "dict":
            for k, c in o["children"]:
                objects[i][k] = get(c)
        elif kind == "tuple":
            get(i)
    return objects[0]


def load(export_dir, tags=None, options=None):
    """Read the SavedModel in ``export_dir`` (written by :func:`tapeflow.saved_model.save`)
    and return its root object, rebuilt without the Python class that made it: its
    Variables restored (on the device of the ``tf.device`` scope around the call),
    its tf.functions callable with the signatures that were saved, its ``signatures``
    a dict of functions taking keyword arguments and returning dicts.

    A file that is not what the writer writes raises DataLossError naming the file and
    what is wrong; nothing in it runs as Python.

    >>> import os, tempfile
    >>> import tapeflow as tf
    >>> class Adder:
    ...     def __init__(self):
    ...         self.total = tf.Variable(0.0)
    ...     @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    ...     def add(self, x):
    ...         self.total.assign_add(x)
    ...         return {"total": self.total.read_value()}
    >>> path = os.path.join(tempfile.mkdtemp(), "adder")
    >>> tf.saved_model.save(Adder(), path)
    >>> restored = tf.saved_model.load(path)
    >>> list(restored.signatures)
    ['serving_default']
    >>> print(restored.signatures["serving_default"](x=tf.constant(2.0))["total"])
    tf.Tensor(2.0, shape=(), dtype=float32)
    >>> float(restored.total.numpy())
    2.0
    """
    if options is not None and not isinstance(options, LoadOptions):
        raise InvalidTypeError("tf.saved_model.load: options must be a "
                               f"tf.saved_model.LoadOptions, not {type(options).__name__}")
    export_dir, mpath, m = _read_manifest(export_dir)
    device = _devs.current_device()
    try:
        checker = _check_manifest(m)
        constants = [np.array(a) for a in _read_constants(export_dir, m, checker)]
        objects = _make_variables(export_dir, m, device)
        concretes = {cid: _Concrete(cid, f, objects, constants, device)
                     for cid, f in m["functions"].items()}
        root = _build(m, objects, concretes)
    except _Bad as e:
        raise DataLossError(f"SavedModel manifest '{mpath}': {e}; nothing was loaded "
                            "(the file is corrupt, truncated, or was not written by "
                            "tf.saved_model.save)") from None
    except TapeflowError:
        raise
    except (TypeError, KeyError, ValueError, AttributeError, IndexError,
            RecursionError) as e:            # (a shape of damage no check above foresaw)
        raise DataLossError(f"SavedModel manifest '{mpath}' is malformed "
                            f"({type(e).__name__}: {e}); nothing was loaded") from None
    sigs = {name: _Signature(name, concretes[s["concrete"]], s["inputs"], s["outputs"])
            for name, s in m["signatures"].items()}
    if isinstance(root, _UserObject):
        root.__dict__["signatures"] = sigs
    else:
        root.signatures = sigs
    root.__dict__["tapeflow_version"] = m.get("tapeflow_version")
    return root
