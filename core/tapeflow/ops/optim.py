"""The fused optimizer updates: one op per optimizer and variable (TensorFlow's
``ResourceApplyAdam`` family). (Being filled in, issue 34.)"""

from __future__ import annotations
