"""``tf.keras.saving``: Keras models that save and load -- the ``.keras`` file
(``model.save("m.keras")``, ``tf.keras.models.load_model("m.keras")``), weights files
(``save_weights``/``load_weights``), and the registry of your own classes
(``register_keras_serializable``, ``custom_object_scope``, ``get_custom_objects``,
``serialize_keras_object``/``deserialize_keras_object``).

The ``.keras`` file is a zip archive:

* ``metadata.json`` -- ``{"keras_version", "tapeflow_version", "date_saved", "format"}``;
* ``config.json`` -- the model as Keras 3 writes it: ``{"module", "class_name",
  "config", "registered_name", "build_config", "compile_config"}``; a Sequential model
  by its layers' configs, a subclassed model by its class (registered, or passed in
  ``custom_objects``) and ``get_config()``;
* ``model.weights.json`` + ``model.weights.bin`` -- every variable by its Keras 3 path
  (``layers/dense/vars/0``; the optimizer's state under ``optimizer/``): the JSON index
  gives each one's dtype, shape and byte range in the little-endian raw data file.

Loading never imports a module or calls anything a file names: a class is found only
among tapeflow's built-in Keras classes and the ones you registered or passed; a file
that names anything else, or whose archive, JSON or data is damaged, raises
``DataLossError`` (a damaged file) or ``NotFoundError``/``InvalidArgumentError`` naming
the file and what to do. There is no pickle and no ``eval`` (docs/keras-saving.md).

Long file: one file format end to end -- the registry and catalogue a file's names are
resolved in, (de)serialization, the weights' paths, the archive and its validation, and
the weights-only files -- as Keras keeps its ``saving_lib`` together.

>>> import os, tempfile
>>> import tapeflow as tf
>>> model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
>>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
>>> model.save(path)
>>> again = tf.keras.models.load_model(path)
>>> x = tf.ones((1, 3))
>>> bool(tf.reduce_all(again(x) == model(x)))
True
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import inspect
import io
import json
import math
import os
import re
import sys
import threading
import warnings
import zipfile
import zlib

import numpy as np

from .. import dtypes as _dt
from .. import functional as _functional
from .. import layers as _layers
from .. import losses as _losses
from .. import metrics as _metrics
from .. import models as _models
from ..errors import (DataLossError, FailedPreconditionError, InvalidArgumentError,
                      InvalidTypeError, NotFoundError, UnimplementedError)
from ..layers import initializers as _inits
from ..layers import regularizers as _regs
from ..layers.base import Layer
from ..layers.naming import snake_case
from ..runtime.dispatch import convert_to_tensor
from ..runtime.tensor import Tensor
from ..runtime.variable import Variable
from ..train import optimizers as _optimizers
from ..train.checkpoint import Checkpoint

__all__ = ["register_keras_serializable", "get_custom_objects", "custom_object_scope",
           "CustomObjectScope", "get_registered_name", "get_registered_object",
           "serialize_keras_object", "deserialize_keras_object", "save_model", "load_model",
           "save_weights", "load_weights", "model_weights"]

KERAS_VERSION = "3.15.1"        # the Keras whose format this file follows
FORMAT = "tapeflow.keras/1"
_WEIGHTS_INDEX = "model.weights.json"
_WEIGHTS_DATA = "model.weights.bin"
_MAX_JSON = 64 << 20            # a config or index larger than this is not one of ours
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
           "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128")

# --- the registry of your own classes and functions ----------------------------------------

_GLOBAL: dict = {}          # registered name ("Custom>MyModel") or plain name -> object
_NAMES: dict = {}           # id(object) -> registered name


class _Scopes(threading.local):
    def __init__(self):
        self.stack = []


_scopes = _Scopes()


def register_keras_serializable(package="Custom", name=None):
    """Decorator: register a class (or function) so ``load_model`` finds it by name.
    The registered name is ``"<package>><name>"`` (``"Custom>MyModel"``); a class needs
    ``get_config`` (every Layer has one) to be saved.

    >>> import tapeflow as tf
    >>> @tf.keras.saving.register_keras_serializable(package="Demo")
    ... class Twice(tf.keras.layers.Layer):
    ...     def call(self, x):
    ...         return 2 * x
    >>> tf.keras.saving.get_registered_name(Twice)
    'Demo>Twice'
    """
    if not isinstance(package, str) or (name is not None and not isinstance(name, str)):
        raise InvalidTypeError("register_keras_serializable(package, name): package and name "
                               f"must be strings, got {package!r}, {name!r}")

    def decorator(obj):
        if isinstance(obj, type) and not hasattr(obj, "get_config"):
            raise InvalidArgumentError(
                f"register_keras_serializable: class {obj.__name__} has no get_config(); "
                "define get_config() (and from_config()) so it can be saved")
        if not callable(obj):
            raise InvalidTypeError(f"register_keras_serializable: expected a class or a "
                                   f"function, got {type(obj).__name__}")
        key = f"{package}>{name or obj.__name__}"
        _GLOBAL[key] = obj
        _NAMES[id(obj)] = key
        return obj
    return decorator


def get_custom_objects() -> dict:
    """The global dict of registered objects (``{"Custom>MyModel": MyModel}``); adding
    ``d["MyModel"] = MyModel`` registers a class by its plain name, as in Keras."""
    return _GLOBAL


class CustomObjectScope:
    """``with custom_object_scope({"MyLayer": MyLayer}):`` -- names ``load_model`` and
    ``deserialize_keras_object`` resolve inside the block (besides the registered ones)."""

    def __init__(self, *dicts):
        for d in dicts:
            if not isinstance(d, dict):
                raise InvalidTypeError("custom_object_scope takes dicts {name: object}, got "
                                       f"{type(d).__name__}")
        self._objects = {}
        for d in dicts:
            self._objects.update(d)

    def __enter__(self):
        _scopes.stack.append(self._objects)
        return self

    def __exit__(self, *exc):
        _scopes.stack.remove(self._objects)


custom_object_scope = CustomObjectScope


def get_registered_name(obj) -> str:
    """The name ``obj`` was registered under, else its ``__name__``."""
    return _NAMES.get(id(obj), getattr(obj, "__name__", type(obj).__name__))


def get_registered_object(name, custom_objects=None, module_objects=None):
    """The object registered (or passed, or in a ``custom_object_scope``) as ``name``;
    None when there is none."""
    for table in (custom_objects or {}, *reversed(_scopes.stack), _GLOBAL, module_objects or {}):
        if name in table:
            return table[name]
    return None


# --- the catalogue of built-in classes --------------------------------------------------------

def _subclasses_in(namespace, base):
    out = {}
    for n in dir(namespace):
        obj = getattr(namespace, n, None)
        if isinstance(obj, type) and issubclass(obj, base) and not n.startswith("_"):
            out.setdefault(obj.__name__, obj)
            out.setdefault(n, obj)
    return out


_CATALOGUE: dict = {}


def _catalogue() -> dict:
    """``{module: {class name: class}}`` of the classes a file may name: tapeflow's
    built-in layers, models, initializers, regularizers, optimizers, losses and metrics."""
    if not _CATALOGUE:
        layer_classes = _subclasses_in(_layers, Layer)
        layer_classes.update(_subclasses_in(_models, Layer))
        layer_classes.update(_subclasses_in(_functional, Layer))
        _CATALOGUE.update({
            "keras.layers": layer_classes,
            "keras.initializers": _subclasses_in(_inits, _inits.Initializer),
            "keras.regularizers": _subclasses_in(_regs, _regs.Regularizer),
            "keras.optimizers": _subclasses_in(_optimizers, _optimizers.Optimizer),
            "keras.losses": _subclasses_in(_losses, _losses.Loss),
            "keras.metrics": _subclasses_in(_metrics, _metrics.Metric),
        })
    return _CATALOGUE


def _module_of(obj) -> str:
    if isinstance(obj, Layer):
        return "keras.layers" if type(obj).__module__.startswith("tapeflow.layers") else (
            "keras" if type(obj).__module__.startswith("tapeflow.") else type(obj).__module__)
    for mod, table in _catalogue().items():
        if table.get(type(obj).__name__) is type(obj):
            return mod
    return type(obj).__module__


def _resolve(spec, custom_objects, where):
    """The class (or function) a config names, from the registry, the scopes,
    ``custom_objects`` or the built-in catalogue -- never by importing anything."""
    name, registered = spec.get("class_name"), spec.get("registered_name")
    for key in (registered, name):
        if isinstance(key, str):
            obj = get_registered_object(key, custom_objects)
            if obj is not None:
                return obj
    cat = _catalogue()
    module = spec.get("module")
    tables = ([cat[module]] if module in cat else []) + list(cat.values())
    for table in tables:
        if name in table:
            return table[name]
    raise InvalidArgumentError(
        f"{where}: unknown class {name!r}"
        + (f" (registered as {registered!r})" if registered and registered != name else "")
        + ": it is neither a built-in Keras class nor a registered one. Decorate it with "
        "@tf.keras.saving.register_keras_serializable(), or pass "
        f"custom_objects={{{name!r}: {name}}} (or use tf.keras.saving.custom_object_scope)")


# --- serialization ------------------------------------------------------------------------------

def _builtin_function_name(fn):
    """The name of a tapeflow activation or loss function (``tf.nn.relu`` -> "relu")."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not str(getattr(fn, "__module__", "")).startswith("tapeflow."):
        return None
    for get in (_layers.activations.get, _losses.get):
        try:
            get(name)
        except (InvalidArgumentError, InvalidTypeError, ValueError, TypeError):
            continue
        return name
    return None


#: where a tapeflow function given as an initializer, activation or loss is looked for
#: to save it by its public name (``tf.random.normal`` -> "random.normal")
_PUBLIC_FUNCTION_SPACES = ("", "random", "nn", "math", "linalg", "keras.activations",
                           "keras.initializers", "keras.losses", "initializers")


def _namespace(path):
    """``tapeflow`` or one of its public namespaces by attribute access (never an import:
    ``tapeflow`` is loaded whenever a model is saved or loaded)."""
    ns = sys.modules.get("tapeflow")
    for part in filter(None, path.split(".")):
        ns = getattr(ns, part, None)
    return ns


def _public_function_name(fn):
    """The public path of a tapeflow function (``"random.normal"``), or None."""
    if not str(getattr(fn, "__module__", "")).startswith("tapeflow"):
        return None
    name = getattr(fn, "__name__", None)
    for space in _PUBLIC_FUNCTION_SPACES:
        ns = _namespace(space)
        if isinstance(name, str) and getattr(ns, name, None) is fn:
            return f"{space}.{name}" if space else name
    return None


#: the modules whose public functions compute on tensors (and change nothing else):
#: the only ones a file may name
_PURE_FUNCTION_MODULES = ("tapeflow.ops.", "tapeflow.layers.activations",
                          "tapeflow.layers.initializers", "tapeflow.losses")
#: names that set or reset state even there (tf.random.set_seed, ...)
_STATEFUL_NAME = re.compile(r"^(set|get|use|enable|disable|reset|reseed|seed|global)_?")


def _public_function(path):
    """The tapeflow function at public ``path`` (see :func:`_public_function_name`): only
    a public (no ``_``) identifier under the listed namespaces, only a function of the
    modules that compute on tensors, never one that sets state -- a file names data, so
    loading it may call only functions of tensors."""
    space, _, name = path.rpartition(".")
    if (space not in _PUBLIC_FUNCTION_SPACES or not name.isidentifier()
            or name.startswith("_") or _STATEFUL_NAME.match(name)):
        return None
    fn = getattr(_namespace(space), name, None)
    module = str(getattr(fn, "__module__", ""))
    ok = (inspect.isfunction(fn) and module.startswith(_PURE_FUNCTION_MODULES)
          and _public_function_name(fn) is not None)
    return fn if ok else None


def _class_dict(obj, config):
    out = {"module": _module_of(obj), "class_name": type(obj).__name__, "config": config,
           "registered_name": _NAMES.get(id(type(obj)))}
    return out


def serialize_keras_object(obj):
    """A JSON-able description of ``obj``: plain values as they are, tuples as lists, a
    layer, model, optimizer, initializer, regularizer, loss or metric as ``{"module",
    "class_name", "config", "registered_name"}``, an activation by its name, a
    registered function by its registered name.

    >>> import tapeflow as tf
    >>> d = tf.keras.saving.serialize_keras_object(tf.keras.layers.Dense(3, name="d"))
    >>> d["class_name"], d["config"]["units"], d["config"]["name"]
    ('Dense', 3, 'd')
    """
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (np.bool_, np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, (list, tuple)):
        return [serialize_keras_object(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): serialize_keras_object(v) for k, v in obj.items()}
    if isinstance(obj, _dt.DType):
        return obj.name
    if isinstance(obj, (Tensor, Variable, np.ndarray)):
        arr = np.asarray(obj.numpy() if hasattr(obj, "numpy") else obj)
        return {"class_name": "__numpy__",
                "config": {"value": arr.tolist(), "dtype": str(arr.dtype)}}
    if hasattr(obj, "as_list") and hasattr(obj, "rank"):            # a TensorShape
        return None if obj.rank is None else list(obj.as_list())
    if type(obj).__name__ == "Policy" and hasattr(obj, "compute_dtype"):
        return obj.name
    return _serialize_object(obj)


def _serialize_object(obj):
    if isinstance(obj, Layer):
        out = _class_dict(obj, serialize_keras_object(obj.get_config()))
        build = obj.__dict__.get("_build_config")
        if build is not None:
            out["build_config"] = build
        return out
    if isinstance(obj, type):
        raise InvalidTypeError(f"serialize_keras_object: cannot save the class {obj.__name__} "
                               "itself; save an instance")
    registered = _NAMES.get(id(obj))
    if not hasattr(obj, "get_config") and callable(obj):
        if registered is not None:
            return {"module": getattr(obj, "__module__", None), "class_name": "function",
                    "config": registered, "registered_name": registered}
        name = _builtin_function_name(obj)
        if name is not None:
            return name
        public = _public_function_name(obj)
        if public is not None:
            return {"module": "tapeflow", "class_name": "function", "config": public,
                    "registered_name": None}
        raise InvalidArgumentError(
            f"serialize_keras_object: cannot save the function {getattr(obj, '__name__', obj)!r}: "
            "it is neither a built-in activation or loss nor a public tapeflow function. "
            "Register it with "
            "@tf.keras.saving.register_keras_serializable()")
    if hasattr(obj, "get_config"):       # (an unregistered class of yours is saved by its
        # name: loading finds it only through custom_objects)
        return _class_dict(obj, serialize_keras_object(obj.get_config()))
    raise InvalidArgumentError(
        f"serialize_keras_object: cannot save a {type(obj).__name__} ({obj!r:.60}): give it "
        "get_config() and register it with @tf.keras.saving.register_keras_serializable()")


def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
    """The object ``config`` (from :func:`serialize_keras_object`) describes. Classes are
    looked up -- never imported -- among the built-in Keras classes, the registered
    ones, a ``custom_object_scope`` and ``custom_objects``; a name found nowhere raises
    InvalidArgumentError saying how to provide it. ``safe_mode`` is accepted (nothing a
    file names is ever run, so there is nothing to switch off).

    >>> import tapeflow as tf
    >>> d = tf.keras.saving.serialize_keras_object(tf.keras.layers.Dense(3))
    >>> type(tf.keras.saving.deserialize_keras_object(d)).__name__
    'Dense'
    """
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise InvalidTypeError("deserialize_keras_object: custom_objects must be a dict "
                               f"{{name: class}}, got {type(custom_objects).__name__}")
    return _deserialize(config, custom_objects or {}, "deserialize_keras_object")


def _deserialize(config, custom_objects, where):
    if config is None or isinstance(config, (bool, int, float, str)):
        return config
    if isinstance(config, list):
        return [_deserialize(v, custom_objects, where) for v in config]
    if not isinstance(config, dict):
        raise InvalidTypeError(f"{where}: a config is made of dicts, lists, strings and "
                               f"numbers, got {type(config).__name__}")
    if "class_name" not in config:
        return {k: _deserialize(v, custom_objects, where) for k, v in config.items()}
    name, inner = config["class_name"], config.get("config", {})
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{where}: 'class_name' must be a string, got {name!r}")
    if name == "__numpy__":
        return _numpy_value(inner, where)
    if name == "__tuple__":
        return tuple(_deserialize(inner.get("value", []), custom_objects, where))
    if name == "function":
        fn = get_registered_object(inner, custom_objects) if isinstance(inner, str) else None
        if fn is None and config.get("module") == "tapeflow" and isinstance(inner, str):
            fn = _public_function(inner)
        if fn is None:
            raise InvalidArgumentError(
                f"{where}: unknown function {inner!r}: register it with "
                "@tf.keras.saving.register_keras_serializable() or pass it in custom_objects")
        return fn
    cls = _resolve(config, custom_objects, where)
    if not isinstance(inner, dict):
        raise InvalidArgumentError(f"{where}: the 'config' of {name!r} must be a dict, got "
                                   f"{type(inner).__name__}")
    return _from_config(cls, inner, custom_objects, where)


def _numpy_value(inner, where):
    if not isinstance(inner, dict) or inner.get("dtype") not in _DTYPES:
        raise InvalidArgumentError(f"{where}: a __numpy__ value needs a 'dtype' among "
                                   f"{', '.join(_DTYPES)}, got {inner!r:.80}")
    try:
        return np.asarray(inner.get("value"), dtype=_dt.as_dtype(inner["dtype"]).as_numpy_dtype)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{where}: bad __numpy__ value: {e}") from None


def _from_config(cls, inner, custom_objects, where):
    """``cls.from_config(inner)`` with nested configs made into objects first (a model's
    layers are given as configs to a ``from_config`` that takes ``custom_objects``)."""
    if not isinstance(cls, type):
        if inner:
            raise InvalidArgumentError(f"{where}: {cls!r} is a function, not a class")
        return cls
    takes_custom = _takes_custom_objects(cls)
    graph = issubclass(cls, _models.Sequential) or {"layers", "input_layers"} <= set(inner)
    if not (takes_custom and graph):     # (a graph's from_config makes its own layers)
        inner = {k: _deserialize(v, custom_objects, where) for k, v in inner.items()}
    from_config = getattr(cls, "from_config", None)
    try:
        with CustomObjectScope(custom_objects):
            if from_config is None:
                return cls(**inner)
            if takes_custom:
                return from_config(inner, custom_objects=_Resolver(custom_objects, where))
            return from_config(inner)
    except (InvalidArgumentError, InvalidTypeError):
        raise
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{where}: the config of {cls.__name__} does not fit its "
                                   f"constructor: {e}") from None


def _takes_custom_objects(cls):
    fn = getattr(cls, "from_config", None)
    if fn is None:
        return False
    try:
        return "custom_objects" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class _Resolver(dict):
    """The ``custom_objects`` a model's ``from_config`` gets while loading: the names the
    caller passed, and ``get(name)`` also finds registered and built-in classes."""

    def __init__(self, custom_objects, where):
        super().__init__(custom_objects)
        self.where = where

    def get(self, name, default=None):
        if name in self:
            return self[name]
        try:
            return _resolve({"class_name": name}, dict(self), self.where)
        except InvalidArgumentError:
            return default


def deserialize_layer(config, custom_objects=None):
    """A layer from its serialized dict (what Sequential and functional ``from_config``
    use for each layer)."""
    obj = _deserialize(config, dict(custom_objects or {}), "from_config")
    if not isinstance(obj, Layer):
        raise InvalidArgumentError(f"from_config: expected a layer config, got {config!r:.80}")
    return obj


# --- the weights of a model: Keras 3's paths --------------------------------------------------

def _name_key(name):
    return "~" + name if name.startswith("_") else name


def _is_graph_model(obj):
    return isinstance(obj, _models.Sequential) or type(obj).__name__ == "Functional" or bool(
        getattr(obj, "_is_graph_network", False))


def _layer_children(layer):
    """``[(attribute path, Layer or list of Layers), ...]`` in Keras 3's order."""
    out = []
    if _is_graph_model(layer):
        out.append(("layers", list(layer.layers)))
    children = layer._trackable_children()
    groups: dict = {}
    for key, obj in children.items():
        if not isinstance(obj, Layer):
            continue
        head, sep, _ = key.partition("/")
        if sep:
            groups.setdefault(head, []).append(obj)
        else:
            groups[key] = obj
    for key in sorted(groups, key=_name_key):
        out.append((key, groups[key]))
    return out


def _own_variables(layer):
    own = [v for v in layer._trackable_children().values() if isinstance(v, Variable)]
    return [v for v in own if v.trainable] + [v for v in own if not v.trainable]


def _walk(obj, path, out, seen):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for i, v in enumerate(_own_variables(obj)):
        out[f"{path}vars/{i}"] = v
    for key, child in _layer_children(obj):
        if isinstance(child, Layer):
            _walk(child, f"{path}{key}/", out, seen)
            continue
        used: dict = {}
        for layer in child:
            base = snake_case(type(layer).__name__)
            n = used.get(base)
            used[base] = 0 if n is None else n + 1
            _walk(layer, f"{path}{key}/{base if n is None else f'{base}_{n + 1}'}/", out, seen)


def model_weights(model, optimizer=True) -> dict:
    """``{path: Variable}`` of ``model``'s variables by Keras 3's rule (a layer's own
    variables as ``<path>/vars/<i>``, trainable first; a Sequential's layers under
    ``layers/<snake_case class name>``, ``dense``, ``dense_1``...; other sublayers under
    their attribute names), and, when ``optimizer`` and the model is compiled, the
    optimizer's state: ``optimizer/vars/<name>`` and each slot as
    ``optimizer/slots/<variable's path>/<slot>``."""
    if not isinstance(model, Layer):
        raise InvalidTypeError(f"model_weights: expected a tf.keras Model or Layer, got "
                               f"{type(model).__name__}")
    out: dict = {}
    _walk(model, "", out, set())
    opt = getattr(model, "optimizer", None) if optimizer else None
    if isinstance(opt, _optimizers.Optimizer):
        by_var = {id(v): p for p, v in out.items()}
        for name, v in opt.non_slot_variables().items():
            out[f"optimizer/vars/{name}"] = v
        for var, slot, v in opt.slot_variables():
            p = by_var.get(id(var))
            if p is not None:
                out[f"optimizer/slots/{p}/{slot}"] = v
    return out


# --- the weights file inside a .keras archive ----------------------------------------------

def _weights_blobs(weights):
    """(index JSON bytes, data bytes) of ``{path: Variable}``."""
    data = io.BytesIO()
    entries = []
    for path, v in weights.items():
        if v.dtype.name == "string":
            raise InvalidArgumentError(
                f"save: the weight {path!r} holds strings, which a .keras file cannot hold "
                "(its weights are numbers); keep text out of Variables, or save a checkpoint")
        arr = np.array(v.numpy(), order="C", copy=True)
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        entries.append({"path": path, "dtype": v.dtype.name, "shape": list(arr.shape),
                        "offset": data.tell(), "nbytes": len(raw)})
        data.write(raw)
    index = {"format": FORMAT, "data": _WEIGHTS_DATA, "size": data.tell(), "tensors": entries}
    return json.dumps(index, indent=1).encode(), data.getvalue()


def _check_entry(e, size, fname):
    ok = (isinstance(e, dict) and isinstance(e.get("path"), str) and e.get("dtype") in _DTYPES
          and isinstance(e.get("shape"), list)
          and all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40
                  for d in e["shape"])
          and all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool)
                  for k in ("offset", "nbytes")))
    if not ok:
        raise DataLossError(f"{fname}: a weights index entry is malformed: {e!r:.120}")
    np_dtype = np.dtype(_dt.as_dtype(e["dtype"]).as_numpy_dtype)
    want = math.prod(e["shape"]) * np_dtype.itemsize      # (Python ints: no overflow)
    if e["nbytes"] != want or e["offset"] < 0 or e["offset"] + want > size:
        raise DataLossError(
            f"{fname}: weight {e['path']!r} ({e['dtype']} {e['shape']}) needs {want} bytes at "
            f"offset {e['offset']}, but the data holds {size} bytes: the file is truncated or "
            "corrupt")
    return np_dtype


def _read_weights(index_bytes, data, fname):
    """``{path: ndarray}`` from the index and data, validated before anything is used."""
    index = _json(index_bytes, f"{fname}:{_WEIGHTS_INDEX}")
    if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(
            index.get("tensors"), list):
        raise DataLossError(f"{fname}: {_WEIGHTS_INDEX} is not a tapeflow weights index "
                            f"(format {FORMAT})")
    if index.get("size") != len(data):
        raise DataLossError(f"{fname}: {_WEIGHTS_DATA} holds {len(data)} bytes, the index "
                            f"says {index.get('size')}: the file is truncated or corrupt")
    out = {}
    for e in index["tensors"]:
        np_dtype = _check_entry(e, len(data), fname)
        arr = np.frombuffer(data, dtype=np_dtype.newbyteorder("<"),
                            count=int(np.prod(e["shape"], dtype=np.int64)),
                            offset=e["offset"]).astype(np_dtype).reshape(e["shape"])
        if e["path"] in out:
            raise DataLossError(f"{fname}: weight {e['path']!r} appears twice")
        out[e["path"]] = arr
    return out


def _json(raw, fname):
    if len(raw) > _MAX_JSON:
        raise DataLossError(f"{fname}: larger than {_MAX_JSON} bytes; not a Keras file")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DataLossError(f"{fname}: not valid JSON ({e})") from None
    except RecursionError:
        raise DataLossError(f"{fname}: JSON nested too deeply; not a Keras file") from None


# --- assigning loaded weights ----------------------------------------------------------------

def _assign_all(model, arrays, fname, skip_mismatch=False):
    """Check every saved array against the model's variable at its path, then assign
    them all (nothing changes when a check fails)."""
    compiled = isinstance(getattr(model, "optimizer", None), _optimizers.Optimizer)
    if compiled and any(p.startswith("optimizer/") for p in arrays):
        model.optimizer.build(model.trainable_variables)
    target = model_weights(model, optimizer=compiled)
    model_paths = [p for p in target if not p.startswith("optimizer/")]
    saved_model_paths = [p for p in arrays if not p.startswith("optimizer/")]
    missing = [p for p in model_paths if p not in arrays]
    extra = [p for p in saved_model_paths if p not in target]
    if (missing or extra) and not skip_mismatch:
        raise InvalidArgumentError(
            f"load_weights({fname!r}): the file's weights do not match the model's: "
            + (f"the model has {missing[:5]} that the file lacks; " if missing else "")
            + (f"the file has {extra[:5]} that the model lacks; " if extra else "")
            + f"({len(saved_model_paths)} saved, {len(model_paths)} in the model). Build the "
            "model as it was when saved (same layers, built) before loading")
    plan = []
    for path, v in target.items():
        arr = arrays.get(path)
        if arr is None:
            continue
        if tuple(arr.shape) != tuple(v.shape.as_list()):
            if skip_mismatch:
                continue
            raise InvalidArgumentError(
                f"load_weights({fname!r}): weight {path!r} ({v.name}) has shape "
                f"{v.shape.as_list()} in the model and {list(arr.shape)} in the file")
        plan.append((v, arr))
    for v, arr in plan:
        v.assign(arr.astype(v.dtype.as_numpy_dtype, copy=False))


# --- building a model from its config -----------------------------------------------------

def _zeros_for(spec):
    if "inputs" in spec:
        return [_zeros_for(s) for s in spec["inputs"]]
    shape = spec.get("input_shape")
    if not isinstance(shape, list) or not all(d is None or (isinstance(d, int) and 0 <= d < 1 << 31)
                                              for d in shape):
        raise DataLossError(f"build_config: bad input_shape {shape!r:.80}")
    dtype = spec.get("dtype", "float32")
    if dtype not in _DTYPES:
        raise DataLossError(f"build_config: bad dtype {dtype!r:.40}")
    dims = [1 if d is None else d for d in shape]
    return np.zeros(dims, dtype=_dt.as_dtype(dtype).as_numpy_dtype)


def _build(model, build_config):
    """Create the model's variables as the saved one had them: call it once on zeros of
    the recorded input shape (None dimensions as 1)."""
    if model.built and model.variables or not isinstance(build_config, dict):
        return
    x = _zeros_for(build_config)
    model([convert_to_tensor(a) for a in x] if isinstance(x, list) else convert_to_tensor(x),
          training=False)


# --- .keras files ----------------------------------------------------------------------------

def _compile_config(model):
    cc = model.get_compile_config() if hasattr(model, "get_compile_config") else None
    if not cc:
        return None
    opt = model.optimizer
    if not isinstance(opt, _optimizers.Optimizer):
        warnings.warn(f"save_model: the model's optimizer ({type(opt).__name__}) is not one "
                      "tapeflow can save; the file holds the model uncompiled (compile it "
                      "again after load_model)", UserWarning, stacklevel=3)
        return None
    out = dict(cc)
    out["optimizer"] = serialize_keras_object(opt)
    out["loss"] = serialize_keras_object(cc.get("loss"))
    out["metrics"] = serialize_keras_object(cc.get("metrics"))
    return out


def save_model(model, filepath, overwrite=True, zipped=None, **kwargs):
    """Write ``model`` to ``filepath`` (it must end in ``.keras``): config, weights and,
    for a compiled model, its compile arguments and optimizer state. The file is written
    to a temporary name and renamed, so a failed save leaves no partial file."""
    if not isinstance(model, Layer):
        raise InvalidTypeError(f"save_model: expected a tf.keras Model, got {type(model).__name__}")
    filepath = _path(filepath, "save_model")
    if not filepath.endswith(".keras"):
        raise InvalidArgumentError(
            f"save_model: the file name must end in .keras, got {filepath!r} (for a "
            "SavedModel directory use tf.saved_model.save(model, path); for the weights "
            "alone model.save_weights('x.weights.h5'))")
    unknown = set(kwargs) - {"save_format", "include_optimizer", "signatures", "options"}
    if unknown:
        raise InvalidTypeError(f"save_model: unexpected arguments {sorted(unknown)}")
    if zipped is False:
        raise UnimplementedError("save_model(zipped=False) is not supported: tapeflow writes "
                                 "the .keras zip archive only")
    if not overwrite and os.path.exists(filepath):
        raise FailedPreconditionError(f"save_model: {filepath!r} exists and overwrite=False")
    config = serialize_keras_object(model)
    if kwargs.get("include_optimizer", True):
        cc = _compile_config(model)
        if cc is not None:
            config["compile_config"] = cc
    weights = model_weights(model, optimizer=kwargs.get("include_optimizer", True))
    index, data = _weights_blobs(weights)
    meta = {"keras_version": KERAS_VERSION, "tapeflow_version": _tapeflow_version(),
            "format": FORMAT,
            "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    _atomic_zip(filepath, {"metadata.json": json.dumps(meta).encode(),
                           "config.json": json.dumps(config, indent=1).encode(),
                           _WEIGHTS_INDEX: index, _WEIGHTS_DATA: data})


def _tapeflow_version():
    mod = importlib.import_module("tapeflow")
    return getattr(mod, "__version__", "unknown")


def _atomic_zip(filepath, members):
    d = os.path.dirname(os.path.abspath(filepath))
    tmp = os.path.join(d, f".{os.path.basename(filepath)}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
            for name, blob in members.items():
                z.writestr(name, blob)
        os.replace(tmp, filepath)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise FailedPreconditionError(f"save_model: cannot write {filepath!r}: {e}") from None
        raise


def _path(filepath, where):
    if isinstance(filepath, os.PathLike):
        filepath = os.fspath(filepath)
    if not isinstance(filepath, str):
        raise InvalidTypeError(f"{where}: expected a file path (str), got "
                               f"{type(filepath).__name__}")
    return filepath


def _open_keras(filepath, where):
    """``{member: bytes}`` of a .keras archive, checked."""
    if not os.path.exists(filepath):
        raise NotFoundError(f"{where}: no such file {filepath!r}; pass the path of a .keras "
                            "file written by model.save()")
    try:
        with zipfile.ZipFile(filepath) as z:
            names = set(z.namelist())
            need = {"config.json", "metadata.json"}
            if not need <= names:
                raise DataLossError(f"{where}: {filepath!r} lacks {sorted(need - names)}: not "
                                    "a .keras file, or a damaged one")
            out = {}
            for n in ("config.json", "metadata.json", _WEIGHTS_INDEX, _WEIGHTS_DATA,
                      "model.weights.h5"):
                if n in names:
                    _check_member(z.getinfo(n), filepath, where)
                    out[n] = z.read(n)
            return out
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, NotImplementedError,
            zlib.error) as e:
        raise DataLossError(f"{where}: {filepath!r} is not a valid .keras (zip) file: "
                            f"{e}") from None
    except OSError as e:
        raise DataLossError(f"{where}: cannot read {filepath!r}: {e}") from None


def _check_member(info, filepath, where):
    """Refuse, before inflating it, a member larger than a Keras file's (the JSON ones)
    or compressed more than any real weights are (a zip bomb)."""
    limit = _MAX_JSON if info.filename.endswith(".json") else 1 << 40
    bomb = info.compress_type != zipfile.ZIP_STORED and info.file_size > \
        200 * info.compress_size + (1 << 20)
    if info.file_size > limit or bomb:
        raise DataLossError(
            f"{where}: {filepath!r}: member {info.filename} declares {info.file_size} bytes "
            f"({info.compress_size} compressed): not a Keras file, or a damaged one")


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):  # noqa: A002
    """The model saved in ``filepath`` (a ``.keras`` file): rebuilt from its config
    (your classes found through registration, ``custom_objects`` or a
    ``custom_object_scope``), its weights assigned, and -- with ``compile=True`` and a
    model saved compiled -- compiled again with its optimizer's state restored, so
    training continues where it stopped."""
    filepath = _path(filepath, "load_model")
    if custom_objects is not None and not isinstance(custom_objects, dict):
        raise InvalidTypeError("load_model: custom_objects must be a dict {name: class}, got "
                               f"{type(custom_objects).__name__}")
    if not filepath.endswith(".keras") and not os.path.isdir(filepath):
        raise InvalidArgumentError(
            f"load_model: file format not supported: {filepath!r}. tapeflow loads .keras "
            "files (model.save('m.keras')); a SavedModel directory loads with "
            "tf.saved_model.load(path)")
    if os.path.isdir(filepath):
        raise InvalidArgumentError(
            f"load_model: {filepath!r} is a directory; Keras 3's load_model reads .keras "
            "files only -- load a SavedModel with tf.saved_model.load(path)")
    members = _open_keras(filepath, "load_model")
    where = f"load_model({filepath!r})"
    if "model.weights.h5" in members and _WEIGHTS_INDEX not in members:
        raise UnimplementedError(
            f"{where}: the file was written by Keras (its weights are model.weights.h5); "
            "tapeflow reads the .keras files it writes. Save the weights in Keras with "
            "model.save_weights('x.weights.h5') and load them here with model.load_weights()")
    config = _json(members["config.json"], f"{filepath}:config.json")
    _json(members["metadata.json"], f"{filepath}:metadata.json")
    if not isinstance(config, dict) or not isinstance(config.get("class_name"), str):
        raise DataLossError(f"load_model: {filepath!r}: config.json does not describe a model")
    model = _deserialize(config, dict(custom_objects or {}), where)
    if not isinstance(model, Layer):
        raise InvalidArgumentError(f"{where}: the file describes a {type(model).__name__}, "
                                   "not a model")
    _build(model, config.get("build_config"))
    cc = config.get("compile_config")
    if compile and isinstance(cc, dict) and hasattr(model, "compile"):
        _compile_from(model, cc, dict(custom_objects or {}), where)
    if _WEIGHTS_INDEX in members:
        arrays = _read_weights(members[_WEIGHTS_INDEX], members.get(_WEIGHTS_DATA, b""), filepath)
        _assign_all(model, arrays, filepath)
    return model


def _compile_from(model, cc, custom_objects, where):
    opt = cc.get("optimizer")
    opt = _deserialize(opt, custom_objects, where) if opt is not None else "rmsprop"
    loss = _deserialize(cc.get("loss"), custom_objects, where)
    metrics = _deserialize(cc.get("metrics"), custom_objects, where)
    if loss is None:
        return
    model.compile(optimizer=opt, loss=loss, metrics=metrics)


# --- weights files ------------------------------------------------------------------------

def _h5py(where):
    try:
        return importlib.import_module("h5py")
    except ImportError:
        raise UnimplementedError(
            f"{where}: .weights.h5 files need h5py, which is not installed: pip install "
            "'tapeflow[h5]' (or pip install h5py). Without it, save the weights in "
            "tapeflow's checkpoint format: model.save_weights('path/ckpt') (no suffix)") from None


def save_weights(model, filepath, overwrite=True, save_format=None, options=None):
    """``model.save_weights``: ``*.weights.h5`` -> HDF5 with Keras 3's layout (needs
    h5py); any other name -> a tapeflow checkpoint at that prefix (``tf.train.Checkpoint``
    files; the TF 2 Keras 2 form)."""
    filepath = _path(filepath, "save_weights")
    if save_format not in (None, "h5", "tf"):
        raise InvalidArgumentError(f"save_weights: save_format must be 'h5', 'tf' or None, "
                                   f"got {save_format!r}")
    if not overwrite and os.path.exists(filepath):
        raise FailedPreconditionError(f"save_weights: {filepath!r} exists and overwrite=False")
    if filepath.endswith(".keras"):
        raise InvalidArgumentError("save_weights: a .keras file holds the whole model: use "
                                   "model.save('m.keras'), or name the weights file "
                                   "'x.weights.h5'")
    if filepath.endswith(".h5") or save_format == "h5":
        if not filepath.endswith(".weights.h5"):
            raise InvalidArgumentError(f"save_weights: an HDF5 weights file name must end in "
                                       f".weights.h5, got {filepath!r}")
        _write_h5(model, filepath)
        return
    Checkpoint(model=model, **_opt_dep(model)).write(filepath)


def _opt_dep(model):
    opt = getattr(model, "optimizer", None)
    return {"optimizer": opt} if isinstance(opt, _optimizers.Optimizer) else {}


def _write_h5(model, filepath):
    h5py = _h5py("save_weights")
    weights = model_weights(model)
    tmp = f"{filepath}.{os.getpid()}.tmp"
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            for path, v in weights.items():
                group, _, leaf = path.rpartition("/")
                g = f.require_group(group) if group else f
                arr = v.numpy()
                if v.dtype.name == "bfloat16":
                    g.create_dataset(leaf, data=arr.astype(np.float32)).attrs["dtype"] = "bfloat16"
                else:
                    g.create_dataset(leaf, data=arr)
        os.replace(tmp, filepath)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _read_h5(filepath):
    h5py = _h5py("load_weights")
    out = {}
    try:
        with h5py.File(filepath, "r") as f:
            def visit(name, obj):
                if isinstance(obj, h5py.Dataset):
                    if obj.dtype.kind not in "biufc" or obj.size > (1 << 36):
                        raise DataLossError(f"load_weights: {filepath!r}: dataset {name!r} "
                                            f"({obj.dtype}, shape {obj.shape}) is not a weight")
                    arr = obj[()]
                    if obj.attrs.get("dtype") == "bfloat16":
                        arr = arr.astype(_dt.bfloat16.as_numpy_dtype)
                    out[name] = np.asarray(arr)
            f.visititems(visit)
    except OSError as e:
        raise DataLossError(f"load_weights: {filepath!r} is not a readable HDF5 file: {e}") \
            from None
    return out


def load_weights(model, filepath, skip_mismatch=False, by_name=False, options=None):
    """``model.load_weights``: from a ``.weights.h5`` file, a ``.keras`` file, or a
    checkpoint prefix written by ``save_weights``. Every array is checked against its
    variable before any is assigned."""
    filepath = _path(filepath, "load_weights")
    if by_name:
        raise UnimplementedError("load_weights(by_name=True) is not supported (Keras 3 has "
                                 "no by_name either): weights load by their paths")
    if filepath.endswith(".keras"):
        members = _open_keras(filepath, "load_weights")
        if _WEIGHTS_INDEX not in members:
            raise DataLossError(f"load_weights: {filepath!r} holds no {_WEIGHTS_INDEX}")
        arrays = _read_weights(members[_WEIGHTS_INDEX], members.get(_WEIGHTS_DATA, b""),
                               filepath)
        _assign_all(model, arrays, filepath, skip_mismatch)
        return None
    if filepath.endswith(".h5"):
        if not os.path.exists(filepath):
            raise NotFoundError(f"load_weights: no such file {filepath!r}")
        _assign_all(model, _read_h5(filepath), filepath, skip_mismatch)
        return None
    return Checkpoint(model=model, **_opt_dep(model)).read(filepath)


#: ``tf.keras.utils``'s names for the registry (``tf.keras.utils.register_keras_serializable``)
class _Utils:
    register_keras_serializable = staticmethod(register_keras_serializable)
    get_custom_objects = staticmethod(get_custom_objects)
    custom_object_scope = CustomObjectScope
    CustomObjectScope = CustomObjectScope
    get_registered_name = staticmethod(get_registered_name)
    get_registered_object = staticmethod(get_registered_object)
    serialize_keras_object = staticmethod(serialize_keras_object)
    deserialize_keras_object = staticmethod(deserialize_keras_object)


utils = _Utils()

_models.register_saving(save_model=save_model, load_model=load_model,
                        save_weights=save_weights, load_weights=load_weights,
                        deserialize_layer=deserialize_layer, serialize=serialize_keras_object)
