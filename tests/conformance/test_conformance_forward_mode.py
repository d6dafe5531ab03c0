"""Forward mode on every device: each differentiable spec's JVP
(``tf.autodiff.ForwardAccumulator``) against finite differences and against reverse
mode (``<J v, w> == <v, J^T w>``), on its float64 samples. One item per (spec,
device); the ops that had no JVP rule of their own (the double-VJP fallback) are
listed by ``test_every_op_has_a_jvp_rule_or_is_explained``."""

from __future__ import annotations

import functools

import pytest

import tapeflow as tf
from tapeflow.testing import conformance
from tapeflow.testing.gradcheck import check_jvp

SPECS = [s for s in conformance.collect_specs() if s.grad_order > 0]
DEVICES = [d.name for d in tf.list_devices() if d.type in ("cpu", "opencl")]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_jvp(spec, dev):
    device = tf.runtime.devices.get_device(dev)
    dts, _, _ = conformance.dtypes_under_test(spec, device.type)
    if tf.float64 not in dts or device.backend.dtype_unsupported(device, tf.float64):
        pytest.skip(f"{spec.name}: no float64 on {dev}")
    ran = 0
    for i, s in enumerate(conformance.samples_for(spec, tf.float64)):
        argnums = conformance.samples._grad_argnums(s)
        if not argnums:
            continue
        f = functools.partial(spec.fn, **s.kwargs) if s.kwargs else spec.fn
        try:
            check_jvp(f, s.args, device=dev, argnums=argnums, rtol=spec.grad_tol[0],
                      atol=spec.grad_tol[1], seed=i)
        except AssertionError as e:
            raise AssertionError(f"{spec.name} on {dev}, sample {i} {s.name!r}: {e}") from None
        ran += 1
    if not ran:
        pytest.skip(f"{spec.name} has no float64 sample with a float argument")
