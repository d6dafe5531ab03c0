"""The layout of ``tapeflow.ops`` (docs/CONVENTIONS_FOR_OPS.md, "The modules of ops/"):
each op module imports only the modules below it, the public namespaces ``array`` and
``math`` only re-export, and the names other code imports from them are still there."""

import ast
import pathlib

import tapeflow as tf
from tapeflow.ops import array, array_gather, math, math_ops, reductions

OPS_DIR = pathlib.Path(tf.__file__).parent / "ops"

#: bottom to top, as docs/CONVENTIONS_FOR_OPS.md lists them
ORDER = ["library", "math_ops", "_array_common", "array_creation", "array_shape",
         "reductions", "array_batching", "array_values", "array_join", "array_gather",
         "array_slice", "array_sort", "array", "math", "random", "linalg", "nn", "nn_fused", "optim", "operators",
         "batching", "__init__"]


def _sibling_imports(path):
    """The modules of ops/ that ``path`` imports at module level."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


def test_every_op_module_is_in_the_documented_order():
    assert sorted(p.stem for p in OPS_DIR.glob("*.py")) == sorted(ORDER)
    doc = (pathlib.Path(__file__).parents[1] / "docs" / "CONVENTIONS_FOR_OPS.md").read_text()
    for m in ORDER:
        assert f"`{m}.py`" in doc, f"docs/CONVENTIONS_FOR_OPS.md does not describe ops/{m}.py"


def test_op_modules_import_only_the_modules_below_them():
    bad = []
    for m in ORDER:
        for dep in _sibling_imports(OPS_DIR / f"{m}.py"):
            if dep in ORDER and ORDER.index(dep) >= ORDER.index(m):
                bad.append(f"ops/{m}.py imports ops/{dep}.py (above it or itself)")
    assert not bad, "\n".join(bad)


def test_math_ops_imports_no_other_op_module():
    assert _sibling_imports(OPS_DIR / "math_ops.py") <= {"library"}


def test_the_namespaces_define_no_op():
    for m in ("array", "math"):
        src = (OPS_DIR / f"{m}.py").read_text()
        assert "defop(" not in src and "\ndef " not in src, f"ops/{m}.py defines something"


def test_tf_math_holds_the_math_ops_the_reductions_and_unsorted_segment_sum():
    assert set(math.__all__) == (set(math_ops.__all__) | set(reductions.__all__)
                                 | {"unsorted_segment_sum"})
    assert math.reduce_sum is reductions.reduce_sum and math.exp is math_ops.exp
    assert math.unsorted_segment_sum is array_gather.unsorted_segment_sum
    assert tf.math.reduce_sum is tf.reduce_sum


def test_tf_array_keeps_the_names_other_modules_import():
    # tf.* (star import of __all__) and the names the core, the backends and the tests use
    for name in array.__all__ + ["unbroadcast", "batch_all", "batch_fold", "batch_unfold",
                                 "batch_leading", "batch_coords", "lin_space", "where_v2",
                                 "FILL", "_STRIDED_SLICE_GRAD", "_getitem", "_setitem"]:
        assert hasattr(array, name), name
    assert tf.broadcast_to is reductions.broadcast_to is array.broadcast_to
    assert tf.array is array
    x = tf.constant([[1., 2.], [3., 4.]])
    assert tf.reduce_sum(array.unbroadcast(tf.ones([3, 2, 2]), (1, 2))).numpy() == 12.0
    assert x[1, ::-1].numpy().tolist() == [4.0, 3.0]
