"""The NumPy backend keeps freed host buffers in the process (tapeflow_cpu_numpy.hostmem),
says so in `python -m tapeflow info`, and TAPEFLOW_HOST_ALLOCATOR=system turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CODE = ("import tapeflow as tf; "
        "print(tf.runtime.devices.get_device('cpu:0').description.split('host memory: ')[1])")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
@pytest.mark.parametrize("setting, expected", [(None, "glibc keeps freed buffers"),
                                               ("system", "glibc defaults")])
def test_host_allocator_setting(setting, expected):
    env = {k: v for k, v in os.environ.items() if k != "TAPEFLOW_HOST_ALLOCATOR"}
    if setting is not None:
        env["TAPEFLOW_HOST_ALLOCATOR"] = setting
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(expected), r.stdout
