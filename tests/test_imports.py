"""``import tapeflow`` stays light (issue 14, dependencies by role): the heavy optional
libraries are imported where they are used -- SciPy by the first special-function
kernel, scikit-learn by the bundled digits data, tqdm by a progress bar, safetensors by
a checkpoint -- not by the import, with every installed plugin loaded."""

import subprocess
import sys

HEAVY = ("scipy", "sklearn", "tqdm", "safetensors", "crc32c", "tensorboardX", "google", "PIL")


def _modules_after(code):
    r = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(sorted("
                        "m for m in sys.modules if m.split('.')[0] in %r))" % (HEAVY,)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])


def test_import_tapeflow_imports_no_heavy_optional_library():
    assert _modules_after("import tapeflow") == []


def test_they_are_imported_on_first_use():
    mods = _modules_after("import tapeflow as tf\nprint(tf.sigmoid(tf.constant([0.])))")
    assert "scipy.special" in mods and "sklearn" not in mods


def test_a_checkout_named_tapeflow_in_the_working_directory_does_not_shadow_it(tmp_path):
    """Running Python from the folder that holds a checkout named ``tapeflow`` (no
    ``__init__.py``: an implicit namespace package) imports the installed tapeflow: the
    editable install is a path entry (``package-dir`` in core/pyproject.toml), and a
    regular package anywhere on ``sys.path`` beats a namespace folder, whereas
    setuptools' import hook was consulted only after it (issue 19)."""
    import tapeflow
    checkout = tmp_path / "tapeflow"
    for sub in ("core/tapeflow", "backends/cpu_numpy", "docs"):
        (checkout / sub).mkdir(parents=True)
    (checkout / "README.md").write_text("# tapeflow\n")
    code = ("import tapeflow as tf\n"
            "print(tf.__file__)\n"
            "print(float(tf.reduce_sum(tf.ones([3]))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [tapeflow.__file__, "3.0"]
    r = subprocess.run([sys.executable, "-m", "tapeflow", "info", "--no-smoke"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "cpu:0" in r.stdout, r.stderr


def test_the_editable_install_is_a_path_entry():
    """What makes the test above hold for every `pip install -e core`, not only this venv."""
    import pathlib
    import tomllib
    conf = tomllib.loads((pathlib.Path(__file__).resolve().parents[1] / "core" /
                          "pyproject.toml").read_text())
    assert conf["tool"]["setuptools"]["package-dir"] == {"": "."}
