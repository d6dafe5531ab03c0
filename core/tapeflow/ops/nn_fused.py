"""Fused neural-network ops: a 2-d convolution with its bias and activation as one op
(TensorFlow's ``_FusedConv2D``). (Being filled in, issue 34.)"""

from __future__ import annotations
