"""The conformance suite (a package: this commit only moves the module into it)."""

from .eager import *  # noqa: F401,F403
from .eager import ErrorSample, OpSpec, Sample, _grad_argnums, _native_layout  # noqa: F401
from .eager import __all__  # noqa: F401
