"""Ratio benchmarks: tapeflow's time over a peer's, measured in one process, interleaved.

Absolute times (the other modules) swing by 2x within minutes on a shared 2-core
machine; a ratio of two implementations timed in alternation, in the same process,
does not. Each ``track_ratio`` here builds one case of ``benchmarks/ratio_cases.py``
(the repository's comparison scripts: the same cases, checks and interleaving engine
as ``compare.py``, ``gpu_compare.py`` and ``scripts/bench_check.py``), times tapeflow
and its peer in paired rounds and returns the median per-round ratio ``tapeflow /
peer`` (< 1: tapeflow is faster). Parameterised by device: the published page shows
the backends side by side; a device (or peer library) this machine lacks is "n/a".

| class               | tapeflow                                  | peer                         |
|---------------------|-------------------------------------------|------------------------------|
| DispatchAddRatio     | ``a + b``, float32 (1,)                   | NumPy (CuPy on cuda:0)       |
| DispatchAddTapeRatio | the same, recorded by a GradientTape      | untaped NumPy ``a + b``      |
| DispatchGradRatio    | gradient of ``reduce_sum(x * x)``, (10,)  | NumPy forward + ``2*x``      |
| MLPStepRatio         | MLP 784-256-256-10 SGD step, batch 64     | NumPy by hand (CuPy on cuda) |
| CNNStepRatio         | the seeds' CNN Adam step, batch 32        | PyTorch eager (n/a: OpenCL)  |
| TransformerBlockRatio| a Transformer encoder block's SGD step    | PyTorch eager (cpu:0 only)   |
| LSTMStepRatio        | PTB small LSTM LM SGD step (cpu:0)        | PyTorch nn.LSTM              |
| FunctionReplayRatio  | the MLP step as a replayed tf.function    | the eager step               |
| PluginOpRatio        | the gelu plugin's op, (1,)                | built-in ``tf.tanh``, (1,)   |
| ElementwiseChainRatio| a 6-op chain on 200,000 float32           | NumPy / a hand-written PyOpenCL kernel / a CuPy ElementwiseKernel |
"""

import os
import sys

_BENCH_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "benchmarks")
if _BENCH_SCRIPTS not in sys.path:
    # the repository's benchmarks/ (scripts, not a package: ratio_cases imports its
    # siblings compare and common by name)
    sys.path.insert(0, _BENCH_SCRIPTS)

import ratio_cases  # noqa: E402

from .common import DEVICES  # noqa: E402

#: rounds per measurement and seconds per sample (asv runs each track_ once per process);
#: tests/test_asv_smoke.py shrinks them through the environment (a smoke run, no figure)
ROUNDS = int(os.environ.get("TAPEFLOW_RATIO_ROUNDS", "15"))
MIN_TIME = float(os.environ.get("TAPEFLOW_RATIO_MIN_TIME", "0.02"))


def _check_origin():
    """``scripts/bench_history.py`` runs each past commit from an export of it
    (``ASV_PYTHONPATH``) and names it in ``TAPEFLOW_EXPECT_ROOT``: a benchmark that would
    time another tapeflow (the working tree's) fails instead of recording a wrong figure."""
    root = os.environ.get("TAPEFLOW_EXPECT_ROOT")
    if not root:
        return
    root = os.path.realpath(root)
    wrong = {m: p for m, p in ratio_cases.origins().items()
             if not os.path.realpath(p).startswith(root + os.sep)}
    if wrong:
        raise RuntimeError(f"tapeflow is not imported from {root}: {wrong}")


class _RatioCase:
    """Shared set-up: build (and check) the case; NotImplementedError is asv's n/a."""

    key = None
    params = [DEVICES]
    param_names = ["device"]
    timeout = 180

    def setup(self, name):
        _check_origin()
        self.case = ratio_cases.build(self.key, name)

    def _ratio(self):
        return ratio_cases.statistics.median(
            ratio_cases.ratios(self.case, ROUNDS, MIN_TIME))


class DispatchAddRatio(_RatioCase):
    key = "dispatch_add"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class DispatchAddTapeRatio(_RatioCase):
    key = "dispatch_add_tape"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class DispatchGradRatio(_RatioCase):
    key = "dispatch_grad"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class MLPStepRatio(_RatioCase):
    key = "mlp_step"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class CNNStepRatio(_RatioCase):
    key = "cnn_step"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class TransformerBlockRatio(_RatioCase):
    key = "transformer_block"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class LSTMStepRatio(_RatioCase):
    key = "lstm_step"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class FunctionReplayRatio(_RatioCase):
    key = "function_replay"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class PluginOpRatio(_RatioCase):
    key = "plugin_op"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"


class ElementwiseChainRatio(_RatioCase):
    key = "elementwise_chain"

    def track_ratio(self, name):
        return self._ratio()
    track_ratio.unit = "ratio"
