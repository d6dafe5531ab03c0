"""Fused convolution epilogues (issue 34): Conv2D + BiasAdd + activation as one kernel.

(Being filled in: the class holds ``xp`` like the other kernel modules.)
"""

from __future__ import annotations


class FusedNNKernels:
    """The fused convolution kernels, written once against the array module ``xp``."""

    def __init__(self, xp):
        self.xp = xp

    def table(self):
        """``{op name: spec}`` of this module (see :mod:`tapeflow.kernels`)."""
        return {}


def build(xp):
    return FusedNNKernels(xp).table()
