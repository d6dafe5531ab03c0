"""Batching rules on every device: each spec through ``tf.vectorized_map`` against a
loop over the examples (:func:`tapeflow.testing.conformance.check_batched`), one
dtype per spec (float32 when the op has it). The built-in ops without a rule are
listed, each with its reason, by ``tapeflow.ops.batching.NO_RULE`` (and the cases a
rule leaves out by ``PARTIAL_RULE``), and a spec that
ran an op once per example must be one of them."""

from __future__ import annotations

import pytest

import tapeflow as tf
from tapeflow.ops.library import LIB
from tapeflow.ops.batching import NO_RULE, PARTIAL_RULE
from tapeflow.testing import conformance

SPECS = conformance.collect_specs()
DEVICES = [d.name for d in tf.list_devices() if d.type in ("cpu", "opencl")]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_batched(spec, dev):
    device = tf.runtime.devices.get_device(dev)
    dts, _, _ = conformance.dtypes_under_test(spec, device.type)
    if not dts:
        pytest.skip(f"{spec.name}: no dtype on {dev}")
    dt = tf.float32 if tf.float32 in dts else dts[0]
    try:
        fell_back = conformance.check_batched(spec, dev, dt)
    except conformance.SkipCase as e:
        pytest.skip(str(e))
    # a spec tf.function cannot trace (its Python reads tensor values) runs as a loop
    untraceable = conformance.untraceable_reason(spec)
    unexplained = {p for p in fell_back
                   if not (p.startswith("op ") and (p[3:] in NO_RULE or p[3:] in PARTIAL_RULE))
                   and not (p == "the function" and untraceable)}
    assert not unexplained, (
        f"{spec.name} on {dev}: {sorted(unexplained)} ran once per example; give the op a "
        "batching rule (`batch=` or `@OP.def_batch` under the op's defop) or explain it in "
        "NO_RULE (tapeflow/ops/batching.py)")


def test_every_op_has_a_batching_rule_or_is_explained():
    missing = sorted(op.name for op in LIB.ops
                     if op.batch is None and op.inputs and op.name not in NO_RULE)
    assert not missing, f"ops without a batching rule or a NO_RULE entry: {missing}"
    stale = sorted(n for n in NO_RULE if next(o for o in LIB.ops if o.name == n).batch)
    assert not stale, f"NO_RULE lists ops that have a rule: {stale}"
    ruleless = sorted(n for n in PARTIAL_RULE if not next(o for o in LIB.ops if o.name == n).batch)
    assert not ruleless, f"PARTIAL_RULE lists ops without a rule: {ruleless}"
