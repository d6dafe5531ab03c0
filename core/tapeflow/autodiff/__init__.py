"""Reverse-mode automatic differentiation: the tape and the gradient functions.

Above the op library (gradients are written with ops) and below tracing. The tape
is data the runtime fills through its eager context
(:mod:`tapeflow.runtime.context`); :class:`GradientTape` plays it back.

>>> import tapeflow as tf
>>> from tapeflow.autodiff import GradientTape
>>> x = tf.constant(3.0)
>>> with GradientTape() as t:
...     t.watch(x)
...     y = x * x
>>> float(t.gradient(y, x))
6.0
"""

from .tape import GradientTape, stop_all_recording, stop_recording
from .forward import ForwardAccumulator
from .functions import (custom_gradient, gradients_function, hessians, implicit_gradients,
                        implicit_value_and_gradients, val_and_grad_function,
                        value_and_gradients_function)

__all__ = ["GradientTape", "ForwardAccumulator", "stop_all_recording", "stop_recording",
           "custom_gradient",
           "gradients_function", "hessians", "implicit_gradients", "implicit_value_and_gradients",
           "val_and_grad_function", "value_and_gradients_function"]
