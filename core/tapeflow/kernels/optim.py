"""Fused optimizer updates (issue 34): one kernel per variable and step.

TensorFlow's ``ResourceApply*`` family (``training_ops.cc``): each kernel takes the
variable's array, its slots' arrays, the gradient and the step's coefficients (0-d
arrays of the variable's dtype: the learning rate, Adam's bias-corrected ``lr_t``) and
returns the new variable and slots. With ``inplace=True`` it writes them into the
arrays it was given and returns those same arrays: the optimizer passes
``inplace=True`` only when the Variable's buffer-donation rule says nobody else can
see them (docs/decisions.md, "Fused optimizer updates"). Otherwise the outputs are new
arrays and the inputs are left untouched.

The operations are the unfused update's (``tapeflow.train.optimizers``), in the same
order and in the variable's dtype, as ufuncs writing into the outputs and two or
three temporaries (``out=``), so on NumPy the result is bitwise the op-by-op one. On
NumPy a large variable is updated :data:`BLOCK` elements at a time: each block's dozen
ufunc passes run in cache, and the update reads and writes each array about once
(Adam on 3.3 M parameters: 37 -> 13 ms). CuPy (the CUDA backend builds this same
class) runs each ufunc over the whole array: one launch each.

A backend may give the kernels a native library as the build service ``native`` (the
CPU backend passes ``tapeflow_cpu_numpy.native``: docs/cpu-kernels.md): a float32
update whose arrays are C-contiguous ndarrays of the variable's shape, whose
coefficients are float32 0-d arrays or Python numbers and whose attrs are Python
numbers then runs as the service's function of the kernel's name (``apply_adam``...),
while ``native.available()`` at the call: one pass over memory in C, bitwise this
module's result (the same float32 operations in the same order, no fused multiply-add).
Where the service returns None, or anything else (float64, strided, broadcast), the
NumPy blocks above run.

>>> import numpy as np
>>> k = OptimKernels(np)
>>> var, g = np.array([1.0, 2.0]), np.array([2.0, 2.0])
>>> k.apply_gradient_descent(var, g, np.array(0.5))
array([0., 1.])
>>> var                                        # not in place: unchanged
array([1., 2.])
"""

from __future__ import annotations

import numpy as np

from ..plugins import KernelSpec

#: the dtypes the fused kernels declare (others, float16/bfloat16 included, take the
#: op-by-op update: a float32-computed bfloat16 variant would write into copies)
FUSED_DTYPES = ("float32", "float64")

_F32 = np.dtype(np.float32)

#: elements per block of a NumPy update (the arrays of one block, about eight of them,
#: stay in a core's L2 cache)
BLOCK = 32768


class OptimKernels:
    """The fused optimizer-update kernels, written once against the array module ``xp``.

    Each public kernel allocates its outputs (or takes its inputs as outputs in place)
    and runs a ``_*_block`` method over the arrays, or over blocks of their flattened
    views; a block method takes the inputs, the outputs (which may be the same arrays),
    the temporaries and the scalars, and never reads an input after its output was
    written.

    ``native``: the optional service of that name (see the module's docstring); None:
    the NumPy (or CuPy) path only."""

    def __init__(self, xp, native=None):
        self.xp = xp
        self.block = BLOCK if xp is np else None
        self.native = native if xp is np else None

    def table(self):
        """``{op name: KernelSpec}`` of this module (see :mod:`tapeflow.kernels`)."""
        d = FUSED_DTYPES
        return {
            "ApplyGradientDescent": KernelSpec(self.apply_gradient_descent, dtypes=d),
            "ApplyMomentum": KernelSpec(self.apply_momentum, dtypes=d),
            "ApplyAdam": KernelSpec(self.apply_adam, dtypes=d),
            "ApplyRMSProp": KernelSpec(self.apply_rms_prop, dtypes=d),
            "ApplyCenteredRMSProp": KernelSpec(self.apply_centered_rms_prop, dtypes=d),
            "ApplyKerasRMSProp": KernelSpec(self.apply_keras_rms_prop, dtypes=d),
            "ApplyKerasCenteredRMSProp": KernelSpec(self.apply_keras_centered_rms_prop,
                                                    dtypes=d),
            "ApplyAdagrad": KernelSpec(self.apply_adagrad, dtypes=d),
        }

    # --- the drivers --------------------------------------------------------------------
    def _native(self, name, arrays, coefs, inplace, **attrs):
        """The service ``native``'s update ``name`` (its outputs, as :meth:`_run`'s), or
        None where it does not apply: no service or not available now, not all of
        ``arrays`` C-contiguous float32 ndarrays of the variable's shape, a coefficient
        not a float32 0-d array or Python number, an attr not a Python number (NumPy
        would compute those in float64), or the service's own None."""
        native = self.native
        if native is None or not native.available():
            return None
        shape = arrays[0].shape
        for a in arrays:
            if (type(a) is not np.ndarray or a.dtype != _F32 or a.shape != shape
                    or not a.flags.c_contiguous):
                return None
        for c in coefs:
            if not (_py_number(c) or (isinstance(c, (np.ndarray, np.generic))
                                      and c.dtype == _F32 and c.ndim == 0)):
                return None
        if not all(_py_number(x) for x in attrs.values()):
            return None
        return getattr(native, name)(*arrays, *coefs, inplace=inplace, **attrs)

    def _run(self, block_fn, ins, n_outs, n_temps, scalars, inplace):
        """Outputs for the first ``n_outs`` of ``ins`` (themselves in place, else new
        arrays), then ``block_fn(*ins, *outs, *temps, *scalars)`` over the whole arrays
        or over blocks of :attr:`block` elements of their flattened views (NumPy, all
        C-contiguous). Returns the outputs (one array for one output)."""
        xp = self.xp
        outs = list(ins[:n_outs]) if inplace else [xp.empty_like(a) for a in ins[:n_outs]]
        var = ins[0]
        size = var.size
        blk = self.block
        if blk is None or size <= blk or not all(
                a.flags.c_contiguous for a in (*ins, *outs)):
            temps = [xp.empty_like(var) for _ in range(n_temps)]
            block_fn(*ins, *outs, *temps, *scalars)
        else:
            flat = [a.reshape(-1) for a in (*ins, *outs)]
            temps = [xp.empty(blk, var.dtype) for _ in range(n_temps)]
            for s in range(0, size, blk):
                e = min(s + blk, size)
                tt = temps if e - s == blk else [t[:e - s] for t in temps]
                block_fn(*[a[s:e] for a in flat], *tt, *scalars)
        return outs[0] if n_outs == 1 else tuple(outs)

    # --- the kernels --------------------------------------------------------------------
    def apply_gradient_descent(self, var, grad, lr, inplace=False):
        """``var -= grad * lr``."""
        y = self._native("apply_gradient_descent", (var, grad), (lr,), inplace)
        if y is not None:
            return y
        return self._run(self._gradient_descent_block, (var, grad), 1, 1, (lr,), inplace)

    def _gradient_descent_block(self, var, grad, ovar, t, lr):
        """One block of :meth:`apply_gradient_descent`."""
        xp = self.xp
        xp.multiply(grad, lr, out=t)
        xp.subtract(var, t, out=ovar)

    def apply_momentum(self, var, accum, grad, lr, mom_lr, momentum=0.0, use_nesterov=False,
                       inplace=False):
        """``accum = accum * momentum + grad``; ``var -= accum * lr``, or with
        ``use_nesterov`` ``var -= grad * lr + accum * mom_lr`` (``mom_lr``: momentum * lr,
        computed by the optimizer as the unfused update does)."""
        y = self._native("apply_momentum", (var, accum, grad), (lr, mom_lr), inplace,
                         momentum=momentum, use_nesterov=use_nesterov)
        if y is not None:
            return y
        return self._run(self._momentum_block, (var, accum, grad), 2, 2,
                         (lr, mom_lr, momentum, use_nesterov), inplace)

    def _momentum_block(self, var, accum, grad, ovar, oaccum, t, u, lr, mom_lr, momentum,
                        use_nesterov):
        """One block of :meth:`apply_momentum`."""
        xp = self.xp
        xp.multiply(accum, momentum, out=t)
        xp.add(t, grad, out=oaccum)
        if use_nesterov:
            xp.multiply(grad, lr, out=t)
            xp.multiply(oaccum, mom_lr, out=u)
            xp.add(t, u, out=t)
        else:
            xp.multiply(oaccum, lr, out=t)
        xp.subtract(var, t, out=ovar)

    def apply_adam(self, var, m, v, grad, lr_t, beta1=0.9, beta2=0.999, epsilon=1e-8,
                   inplace=False):
        """``m += (g - m) * (1 - beta1)``; ``v += (g*g - v) * (1 - beta2)``;
        ``var -= m * lr_t / (sqrt(v) + epsilon)``."""
        y = self._native("apply_adam", (var, m, v, grad), (lr_t,), inplace, beta1=beta1,
                         beta2=beta2, epsilon=epsilon)
        if y is not None:
            return y
        return self._run(self._adam_block, (var, m, v, grad), 3, 2,
                         (lr_t, 1 - beta1, 1 - beta2, epsilon), inplace)

    def _adam_block(self, var, m, v, grad, ovar, om, ov, t, d, lr_t, c1, c2, epsilon):
        """One block of :meth:`apply_adam` (``c1``, ``c2``: 1 - beta1, 1 - beta2)."""
        xp = self.xp
        xp.subtract(grad, m, out=t)
        xp.multiply(t, c1, out=t)
        xp.add(m, t, out=om)
        xp.multiply(grad, grad, out=t)
        xp.subtract(t, v, out=t)
        xp.multiply(t, c2, out=t)
        xp.add(v, t, out=ov)
        xp.multiply(om, lr_t, out=t)
        xp.sqrt(ov, out=d)
        xp.add(d, epsilon, out=d)
        xp.divide(t, d, out=t)
        xp.subtract(var, t, out=ovar)

    def _mean_square(self, ms, grad, oms, t, c):
        """``ms += (g*g - ms) * c`` (``c``: 1 - rho) through the temporary ``t``."""
        xp = self.xp
        xp.multiply(grad, grad, out=t)
        xp.subtract(t, ms, out=t)
        xp.multiply(t, c, out=t)
        xp.add(ms, t, out=oms)

    def _mean_grad(self, mg, grad, omg, t, c):
        """``mg += (g - mg) * c`` through the temporary ``t``."""
        xp = self.xp
        xp.subtract(grad, mg, out=t)
        xp.multiply(t, c, out=t)
        xp.add(mg, t, out=omg)

    def _momentum_step(self, var, mom, grad, ovar, omom, d, t, lr, momentum):
        """``mom = mom * momentum + g * lr / sqrt(d)`` (``momentum`` 0: the step alone);
        ``var -= mom``. ``d`` holds the denominator; ``d`` and ``t`` are temporaries."""
        xp = self.xp
        xp.sqrt(d, out=d)
        xp.multiply(grad, lr, out=t)
        if momentum:
            xp.divide(t, d, out=t)
            xp.multiply(mom, momentum, out=d)
            xp.add(d, t, out=omom)
        else:
            xp.divide(t, d, out=omom)
        xp.subtract(var, omom, out=ovar)

    def apply_rms_prop(self, var, ms, mom, grad, lr, rho=0.9, momentum=0.0, epsilon=1e-10,
                       inplace=False):
        """TensorFlow 1's RMSProp: ``ms += (g*g - ms) * (1 - rho)``;
        ``mom = mom * momentum + g * lr / sqrt(ms + epsilon)``; ``var -= mom``."""
        y = self._native("apply_rms_prop", (var, ms, mom, grad), (lr,), inplace, rho=rho,
                         momentum=momentum, epsilon=epsilon)
        if y is not None:
            return y
        return self._run(self._rms_prop_block, (var, ms, mom, grad), 3, 2,
                         (lr, 1 - rho, momentum, epsilon), inplace)

    def _rms_prop_block(self, var, ms, mom, grad, ovar, oms, omom, t, d, lr, c, momentum,
                        epsilon):
        """One block of :meth:`apply_rms_prop`."""
        self._mean_square(ms, grad, oms, t, c)
        self.xp.add(oms, epsilon, out=d)
        self._momentum_step(var, mom, grad, ovar, omom, d, t, lr, momentum)

    def apply_centered_rms_prop(self, var, mg, ms, mom, grad, lr, rho=0.9, momentum=0.0,
                                epsilon=1e-10, inplace=False):
        """Centered RMSProp: as :meth:`apply_rms_prop` with ``mg += (g - mg) * (1 - rho)``
        and the denominator ``sqrt(ms - mg*mg + epsilon)``."""
        y = self._native("apply_centered_rms_prop", (var, mg, ms, mom, grad), (lr,), inplace,
                         rho=rho, momentum=momentum, epsilon=epsilon)
        if y is not None:
            return y
        return self._run(self._centered_rms_prop_block, (var, mg, ms, mom, grad), 4, 2,
                         (lr, 1 - rho, momentum, epsilon), inplace)

    def _centered_rms_prop_block(self, var, mg, ms, mom, grad, ovar, omg, oms, omom, t, d, lr,
                                 c, momentum, epsilon):
        """One block of :meth:`apply_centered_rms_prop`."""
        xp = self.xp
        self._mean_square(ms, grad, oms, t, c)
        self._mean_grad(mg, grad, omg, t, c)
        xp.multiply(omg, omg, out=d)
        xp.subtract(oms, d, out=d)
        xp.add(d, epsilon, out=d)
        self._momentum_step(var, mom, grad, ovar, omom, d, t, lr, momentum)

    def apply_keras_rms_prop(self, var, ms, grad, lr, rho=0.9, epsilon=1e-7, inplace=False):
        """Keras's RMSprop without momentum: ``ms += (g*g - ms) * (1 - rho)``;
        ``var -= g * lr / (sqrt(ms) + epsilon)``."""
        y = self._native("apply_keras_rms_prop", (var, ms, grad), (lr,), inplace, rho=rho,
                         epsilon=epsilon)
        if y is not None:
            return y
        return self._run(self._keras_rms_prop_block, (var, ms, grad), 2, 2,
                         (lr, 1 - rho, epsilon), inplace)

    def _keras_rms_prop_block(self, var, ms, grad, ovar, oms, t, d, lr, c, epsilon):
        """One block of :meth:`apply_keras_rms_prop`."""
        self._mean_square(ms, grad, oms, t, c)
        self.xp.sqrt(oms, out=d)
        self._keras_step(var, grad, ovar, d, t, lr, epsilon)

    def apply_keras_centered_rms_prop(self, var, ms, mg, grad, lr, rho=0.9, epsilon=1e-7,
                                      inplace=False):
        """Keras's centered RMSprop without momentum: the denominator
        ``sqrt(ms - mg*mg) + epsilon``."""
        y = self._native("apply_keras_centered_rms_prop", (var, ms, mg, grad), (lr,), inplace,
                         rho=rho, epsilon=epsilon)
        if y is not None:
            return y
        return self._run(self._keras_centered_rms_prop_block, (var, ms, mg, grad), 3, 2,
                         (lr, 1 - rho, epsilon), inplace)

    def _keras_centered_rms_prop_block(self, var, ms, mg, grad, ovar, oms, omg, t, d, lr, c,
                                       epsilon):
        """One block of :meth:`apply_keras_centered_rms_prop`."""
        xp = self.xp
        self._mean_square(ms, grad, oms, t, c)
        self._mean_grad(mg, grad, omg, t, c)
        xp.multiply(omg, omg, out=d)
        xp.subtract(oms, d, out=d)
        xp.sqrt(d, out=d)
        self._keras_step(var, grad, ovar, d, t, lr, epsilon)

    def _keras_step(self, var, grad, ovar, d, t, lr, epsilon):
        """``var -= g * lr / (d + epsilon)`` (``d``, ``t``: temporaries)."""
        xp = self.xp
        xp.multiply(grad, lr, out=t)
        xp.add(d, epsilon, out=d)
        xp.divide(t, d, out=t)
        xp.subtract(var, t, out=ovar)

    def apply_adagrad(self, var, accum, grad, lr, inplace=False):
        """``accum += g*g``; ``var -= g * lr / sqrt(accum)``."""
        y = self._native("apply_adagrad", (var, accum, grad), (lr,), inplace)
        if y is not None:
            return y
        return self._run(self._adagrad_block, (var, accum, grad), 2, 2, (lr,), inplace)

    def _adagrad_block(self, var, accum, grad, ovar, oaccum, t, d, lr):
        """One block of :meth:`apply_adagrad`."""
        xp = self.xp
        xp.multiply(grad, grad, out=t)
        xp.add(accum, t, out=oaccum)
        xp.multiply(grad, lr, out=t)
        xp.sqrt(oaccum, out=d)
        xp.divide(t, d, out=t)
        xp.subtract(var, t, out=ovar)


def _py_number(x):
    """Whether ``x`` is a Python bool, int or float (NumPy's weak scalars: float32
    arithmetic with a float32 array)."""
    return type(x) in (bool, int, float)


def build(ctx):
    """The fused optimizer-update kernels for ``ctx.xp`` (service ``native``, optional):
    ``{op name: KernelSpec}``."""
    return OptimKernels(ctx.xp, ctx.get("native")).table()
