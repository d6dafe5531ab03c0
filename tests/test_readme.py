"""Every ```python block of the README runs (docs that cannot drift)."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_block_runs(i, capsys):
    import tapeflow as tf
    src = BLOCKS[i]
    if "register(MyOps())" in src and "myproj::cube" in __import__("tapeflow").runtime.registry.OPS:
        pytest.skip("the plugin example already registered its op in this process")
    exec(compile(src, f"README block {i}", "exec"), {"tf": tf})
    out = capsys.readouterr().out
    # printed values named in the block's comments appear in the output
    for want in re.findall(r"# (tf\.Tensor\(.*?\))\s*$", src, re.M):
        assert want in out
