"""Fused optimizer updates (issue 34): one kernel per variable and step.

TensorFlow's ``ResourceApply*`` family (``training_ops.cc``): each kernel takes the
variable's array, its slots' arrays, the gradient and the step's coefficients (0-d
arrays of the variable's dtype: the learning rate, Adam's bias-corrected ``lr_t``) and
returns the new variable and slots. With ``inplace=True`` it writes them into the
arrays it was given (``out=``) and returns those same arrays: the optimizer passes
``inplace=True`` only when the Variable's buffer-donation rule says nobody else can
see them (docs/decisions.md, "Fused optimizer updates"). Otherwise the first ufunc
that produces each output allocates it and the inputs are left untouched.

The operations are the unfused update's (``tapeflow.train.optimizers``), in the same
order and in the variable's dtype, with at most two temporaries, so on NumPy the
result is bitwise the op-by-op one.

>>> import numpy as np
>>> k = OptimKernels(np)
>>> var, g = np.array([1.0, 2.0]), np.array([2.0, 2.0])
>>> k.apply_gradient_descent(var, g, np.array(0.5))
array([0., 1.])
>>> var                                        # not in place: unchanged
array([1., 2.])
"""

from __future__ import annotations

#: the dtypes the fused kernels declare (others, float16/bfloat16 included, take the
#: op-by-op update: a float32-computed bfloat16 variant would write into copies)
FUSED_DTYPES = ("float32", "float64")


class OptimKernels:
    """The fused optimizer-update kernels, written once against the array module ``xp``."""

    def __init__(self, xp):
        self.xp = xp

    def table(self):
        """``{op name: spec}`` of this module (see :mod:`tapeflow.kernels`)."""
        d = FUSED_DTYPES
        return {
            "ApplyGradientDescent": {"fn": self.apply_gradient_descent, "dtypes": d},
            "ApplyMomentum": {"fn": self.apply_momentum, "dtypes": d},
            "ApplyAdam": {"fn": self.apply_adam, "dtypes": d},
            "ApplyRMSProp": {"fn": self.apply_rms_prop, "dtypes": d},
            "ApplyCenteredRMSProp": {"fn": self.apply_centered_rms_prop, "dtypes": d},
            "ApplyKerasRMSProp": {"fn": self.apply_keras_rms_prop, "dtypes": d},
            "ApplyKerasCenteredRMSProp": {"fn": self.apply_keras_centered_rms_prop,
                                          "dtypes": d},
            "ApplyAdagrad": {"fn": self.apply_adagrad, "dtypes": d},
        }

    def _out(self, a, inplace):
        """Where an output goes: ``a`` itself in place, else a new array like it (0-d
        included: a ufunc without ``out=`` returns a scalar for 0-d inputs)."""
        return a if inplace else self.xp.empty_like(a)

    def apply_gradient_descent(self, var, grad, lr, inplace=False):
        """``var -= grad * lr``."""
        xp = self.xp
        t = xp.multiply(grad, lr, out=xp.empty_like(var))
        return xp.subtract(var, t, out=self._out(var, inplace))

    def apply_momentum(self, var, accum, grad, lr, mom_lr, momentum=0.0, use_nesterov=False,
                       inplace=False):
        """``accum = accum * momentum + grad``; ``var -= accum * lr``, or with
        ``use_nesterov`` ``var -= grad * lr + accum * mom_lr`` (``mom_lr``: momentum * lr,
        computed by the optimizer as the unfused update does)."""
        xp = self.xp
        t = xp.multiply(accum, momentum, out=xp.empty_like(var))
        accum = xp.add(t, grad, out=self._out(accum, inplace))
        if use_nesterov:
            xp.multiply(grad, lr, out=t)
            u = xp.multiply(accum, mom_lr, out=xp.empty_like(var))
            xp.add(t, u, out=t)
        else:
            xp.multiply(accum, lr, out=t)
        var = xp.subtract(var, t, out=self._out(var, inplace))
        return var, accum

    def apply_adam(self, var, m, v, grad, lr_t, beta1=0.9, beta2=0.999, epsilon=1e-8,
                   inplace=False):
        """``m += (g - m) * (1 - beta1)``; ``v += (g*g - v) * (1 - beta2)``;
        ``var -= m * lr_t / (sqrt(v) + epsilon)``."""
        xp = self.xp
        t = xp.subtract(grad, m, out=xp.empty_like(var))
        xp.multiply(t, 1 - beta1, out=t)
        m = xp.add(m, t, out=self._out(m, inplace))
        xp.multiply(grad, grad, out=t)
        xp.subtract(t, v, out=t)
        xp.multiply(t, 1 - beta2, out=t)
        v = xp.add(v, t, out=self._out(v, inplace))
        xp.multiply(m, lr_t, out=t)
        d = xp.sqrt(v, out=xp.empty_like(var))
        xp.add(d, epsilon, out=d)
        xp.divide(t, d, out=t)
        var = xp.subtract(var, t, out=self._out(var, inplace))
        return var, m, v

    def _mean_square(self, ms, grad, rho, inplace):
        """``ms += (g*g - ms) * (1 - rho)`` and the temporary it used."""
        xp = self.xp
        t = xp.multiply(grad, grad, out=xp.empty_like(grad))
        xp.subtract(t, ms, out=t)
        xp.multiply(t, 1 - rho, out=t)
        return xp.add(ms, t, out=self._out(ms, inplace)), t

    def _mean_grad(self, mg, grad, rho, t, inplace):
        """``mg += (g - mg) * (1 - rho)`` (into the temporary ``t`` first)."""
        xp = self.xp
        xp.subtract(grad, mg, out=t)
        xp.multiply(t, 1 - rho, out=t)
        return xp.add(mg, t, out=self._out(mg, inplace))

    def _momentum_step(self, var, mom, grad, lr, d, t, momentum, inplace):
        """``mom = mom * momentum + g * lr / sqrt(d)`` (``momentum`` 0: the step alone);
        ``var -= mom``. ``d`` and ``t`` are temporaries (``d`` holds the denominator)."""
        xp = self.xp
        xp.sqrt(d, out=d)
        xp.multiply(grad, lr, out=t)
        xp.divide(t, d, out=t)
        if momentum:
            xp.multiply(mom, momentum, out=d)
            xp.add(d, t, out=t)
        if inplace:
            xp.copyto(mom, t)
        else:
            mom = t          # (a new array: the temporary becomes the new slot)
        var = xp.subtract(var, mom, out=self._out(var, inplace))
        return var, mom

    def apply_rms_prop(self, var, ms, mom, grad, lr, rho=0.9, momentum=0.0, epsilon=1e-10,
                       inplace=False):
        """TensorFlow 1's RMSProp: ``ms += (g*g - ms) * (1 - rho)``;
        ``mom = mom * momentum + g * lr / sqrt(ms + epsilon)``; ``var -= mom``."""
        xp = self.xp
        ms, t = self._mean_square(ms, grad, rho, inplace)
        d = xp.add(ms, epsilon, out=xp.empty_like(ms))
        var, mom = self._momentum_step(var, mom, grad, lr, d, t, momentum, inplace)
        return var, ms, mom

    def apply_centered_rms_prop(self, var, mg, ms, mom, grad, lr, rho=0.9, momentum=0.0,
                                epsilon=1e-10, inplace=False):
        """Centered RMSProp: as :meth:`apply_rms_prop` with ``mg += (g - mg) * (1 - rho)``
        and the denominator ``sqrt(ms - mg*mg + epsilon)``."""
        xp = self.xp
        ms, t = self._mean_square(ms, grad, rho, inplace)
        mg = self._mean_grad(mg, grad, rho, t, inplace)
        d = xp.multiply(mg, mg, out=xp.empty_like(mg))
        xp.subtract(ms, d, out=d)
        xp.add(d, epsilon, out=d)
        var, mom = self._momentum_step(var, mom, grad, lr, d, t, momentum, inplace)
        return var, mg, ms, mom

    def apply_keras_rms_prop(self, var, ms, grad, lr, rho=0.9, epsilon=1e-7, inplace=False):
        """Keras's RMSprop without momentum: ``ms += (g*g - ms) * (1 - rho)``;
        ``var -= g * lr / (sqrt(ms) + epsilon)``."""
        xp = self.xp
        ms, t = self._mean_square(ms, grad, rho, inplace)
        d = xp.sqrt(ms, out=xp.empty_like(ms))
        var = self._keras_step(var, grad, lr, d, t, epsilon, inplace)
        return var, ms

    def apply_keras_centered_rms_prop(self, var, ms, mg, grad, lr, rho=0.9, epsilon=1e-7,
                                      inplace=False):
        """Keras's centered RMSprop without momentum: the denominator
        ``sqrt(ms - mg*mg) + epsilon``."""
        xp = self.xp
        ms, t = self._mean_square(ms, grad, rho, inplace)
        mg = self._mean_grad(mg, grad, rho, t, inplace)
        d = xp.multiply(mg, mg, out=xp.empty_like(mg))
        xp.subtract(ms, d, out=d)
        xp.sqrt(d, out=d)
        var = self._keras_step(var, grad, lr, d, t, epsilon, inplace)
        return var, ms, mg

    def _keras_step(self, var, grad, lr, d, t, epsilon, inplace):
        """``var -= g * lr / (d + epsilon)`` (``d``, ``t``: temporaries)."""
        xp = self.xp
        xp.multiply(grad, lr, out=t)
        xp.add(d, epsilon, out=d)
        xp.divide(t, d, out=t)
        return xp.subtract(var, t, out=self._out(var, inplace))

    def apply_adagrad(self, var, accum, grad, lr, inplace=False):
        """``accum += g*g``; ``var -= g * lr / sqrt(accum)``."""
        xp = self.xp
        t = xp.multiply(grad, grad, out=xp.empty_like(grad))
        accum = xp.add(accum, t, out=self._out(accum, inplace))
        xp.multiply(grad, lr, out=t)
        d = xp.sqrt(accum, out=xp.empty_like(accum))
        xp.divide(t, d, out=t)
        var = xp.subtract(var, t, out=self._out(var, inplace))
        return var, accum


def build(xp):
    return OptimKernels(xp).table()
