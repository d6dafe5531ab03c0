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
