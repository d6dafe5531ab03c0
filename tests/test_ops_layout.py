"""The layout of ``tapeflow.ops`` (docs/CONVENTIONS_FOR_OPS.md, "The modules of ops/"):
each op module imports only the modules below it, ``tf.math`` is the module of the
elementwise math (with the reductions and ``unsorted_segment_sum`` joined to it), and the
array names other code imports from ``tapeflow.ops`` are still there."""

import ast
import pathlib
import sys

import tapeflow as tf
import tapeflow.ops as ops
from tapeflow.ops import array_gather, batching, math, reductions

OPS_DIR = pathlib.Path(tf.__file__).parent / "ops"

#: bottom to top, as docs/CONVENTIONS_FOR_OPS.md lists them
ORDER = ["library", "composite", "math", "array_creation", "array_shape", "reductions",
         "batching", "array_values", "array_gather", "array_slice", "array_sort", "random",
         "linalg", "nn", "image", "fused", "sparse", "ragged", "ragged_ops", "strings",
         "higher_order", "__init__"]


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


def test_math_imports_no_other_op_module():
    assert _sibling_imports(OPS_DIR / "math.py") <= {"library"}


def test_the_package_defines_no_op():
    src = (OPS_DIR / "__init__.py").read_text()
    assert "defop(" not in src, "ops/__init__.py declares an op: declare it in its module"


def test_tf_math_holds_the_math_the_reductions_and_unsorted_segment_sum():
    own = {n for n in math.__all__
           if getattr(getattr(math, n), "__module__", None) == math.__name__}
    assert "exp" in own and "add" in own
    assert set(math.__all__) == own | set(reductions.__all__) | {"unsorted_segment_sum"}
    assert math.reduce_sum is reductions.reduce_sum and math.exp.__module__ == "tapeflow.ops.math"
    assert math.unsorted_segment_sum is array_gather.unsorted_segment_sum
    assert tf.math is math and sys.modules["tapeflow.math"] is math
    assert tf.math.reduce_sum is tf.reduce_sum
    from tapeflow.math import reduce_mean
    assert reduce_mean is reductions.reduce_mean


def test_tapeflow_ops_keeps_the_array_names_other_modules_import():
    # tf.* (star import of __all__) and the names the core and the tests use
    for name in ops.__all__ + ["FILL"]:
        assert hasattr(ops, name), name
    for name in ops.__all__:
        assert getattr(tf, name) is getattr(ops, name), name
    assert tf.broadcast_to is reductions.broadcast_to is ops.broadcast_to
    for name in ("batch_all", "batch_fold", "batch_unfold", "batch_leading"):
        assert callable(getattr(batching, name)), name
    x = tf.constant([[1., 2.], [3., 4.]])
    assert tf.reduce_sum(reductions.unbroadcast(tf.ones([3, 2, 2]), (1, 2))).numpy() == 12.0
    assert x[1, ::-1].numpy().tolist() == [4.0, 3.0]
