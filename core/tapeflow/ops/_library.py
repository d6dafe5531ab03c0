"""The core's op library: the built-in ops are declared with the public op API a
plugin uses, one :class:`~tapeflow.plugins.Library` named ``tapeflow`` (the core's
namespace: ``tapeflow::MatMul``, found by its short name ``MatMul`` too).

The op modules (``math``, ``array``, ...) declare each op with :func:`defop`, which
is ``LIB.define`` with the attr types of the table below; ``import tapeflow``
registers ``LIB`` like any plugin (``tapeflow.plugins.register``).

>>> from tapeflow.ops._library import LIB
>>> LIB.namespace, any(op.name == "MatMul" for op in LIB.ops)
('tapeflow', True)
"""

from __future__ import annotations

from ..plugins.library import Library
from ..runtime.registry import CORE_NAMESPACE, OpDef

#: the built-in op library (registered by ``import tapeflow``)
LIB = Library(CORE_NAMESPACE)


#: the types of the built-in ops' attrs, by attr name (kinds: tapeflow.shapes)
ATTR_TYPES = {
    "adjoint": "bool", "approximate": "bool", "keepdims": "bool", "transpose_a": "bool",
    "transpose_b": "bool", "alpha": "float", "mean": "float", "stddev": "float",
    "batch_dims": "int", "counter": "uint", "key": "uint", "depth": "int",
    "num_segments": "int", "num": "int", "num_rows": "int", "num_columns": "int?",
    "batch_shape": "shape", "dilations": "sizes", "strides": "sizes", "ksize": "sizes",
    "filter_sizes": "shape", "input_sizes": "shape", "orig_input_shape": "shape",
    "multiples": "shape", "shape": "shape", "perm": "perm", "paddings": "paddings",
    "data_format": "enum:NHWC|NCHW", "mode": "enum:REFLECT|SYMMETRIC", "equation": "str",
    "constant_values": "number", "on_value": "number", "off_value": "number",
    "value": "number", "start": "float", "stop": "float", "limit": "float",
    "delta": "float", "output_type": "dtype", "out_type": "dtype", "axis": "axis",
}
#: per-op exceptions to ATTR_TYPES (None: not typed here -- the kernel checks it)
_OP_ATTR_TYPES = {
    "minval": {"RandomUniform": "float", "RandomUniformInt": "int"},
    "maxval": {"RandomUniform": "float", "RandomUniformInt": "int"},
    "axis": {"Pack": "axis+1", "ExpandDims": "axis+1", "OneHot": "axis+1"},
    "shape": {"Reshape": "reshape", "StridedSliceGrad": "shape", "Fill": "shape?",
              "BroadcastTo": "shape"},
}


def _attr_types(name, attrs):
    out = {}
    for attr, default in (attrs or {}).items():
        kind = _OP_ATTR_TYPES.get(attr, {}).get(name, ATTR_TYPES.get(attr))
        if attr == "axis" and default is None:        # reductions: None or sorted axes
            kind = _OP_ATTR_TYPES["axis"].get(name, "axes?")
        if attr == "dtype":
            kind = "dtype?" if default is None else "dtype"
        if kind is not None:
            out[attr] = kind
    return out


#: the built-in ops declared elementwise (tf.function may fuse them)
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference", "Atan2",
    "Pow", "Neg", "Abs", "Sign", "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Expm1",
    "Sin", "Cos", "Tan", "Tanh", "Sigmoid", "Softplus", "Reciprocal", "Floor", "Ceil",
    "Round", "Erf", "IsNan", "IsFinite", "IsInf", "Equal", "NotEqual", "Less", "LessEqual",
    "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalXor", "LogicalNot", "Cast",
    "SelectV2", "Relu", "ReluGrad", "Relu6", "Relu6Grad", "Elu", "EluGrad", "LeakyRelu",
    "LeakyReluGrad", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Log2",
    "Log10", "Trunc", "Signbit", "Copysign", "Hypot", "LogAddExp", "NextAfter",
})


def defop(name, **kwargs) -> OpDef:
    """Declare a built-in op: ``LIB.define`` (arguments of
    :class:`~tapeflow.plugins.OpDef`) with its attrs typed from :data:`ATTR_TYPES`
    unless ``attr_types`` is given."""
    kwargs.setdefault("attr_types", _attr_types(name, kwargs.get("attrs")))
    kwargs.setdefault("elementwise", name in ELEMENTWISE)
    return LIB.define(name, **kwargs)
