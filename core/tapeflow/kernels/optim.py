"""Fused optimizer updates (issue 34): one kernel per variable and step.

(Being filled in: the class holds ``xp`` like the other kernel modules.)
"""

from __future__ import annotations


class OptimKernels:
    """The fused optimizer-update kernels, written once against the array module ``xp``."""

    def __init__(self, xp):
        self.xp = xp

    def table(self):
        """``{op name: spec}`` of this module (see :mod:`tapeflow.kernels`)."""
        return {}


def build(xp):
    return OptimKernels(xp).table()
