"""identify's probe on jax (the `probe` tool module, gelulab.backends.tools): jax arrays fed to callables of jax,
flax and optax. jax is asked for in sys.modules only, never imported here."""
from __future__ import annotations

import contextlib
import sys

import numpy as np

MODULES = ("jax", "jaxlib", "flax", "optax")
ARRAY_KIND = "jax array"
# class names of jax's function objects (jax.jit's wrappers): functions, not models (api.audit.is_model)
FUNCTION_TYPES = ("PjitFunction", "CompiledFunction")


def owner(fn) -> str | None:
    """None: a Flax module is called through its apply, a function like any other."""
    return None


def native(a: np.ndarray):
    """A jax array of `a`'s dtype and shape on jax's default device (float64 only with jax_enable_x64)."""
    return sys.modules["jax"].numpy.asarray(a)


def as_numpy(y) -> np.ndarray | None:
    """A jax array as a numpy array, None for anything else."""
    jax = sys.modules.get("jax")
    if jax is None or not isinstance(y, jax.Array):
        return None
    return np.asarray(y)


def context():
    """No context: jax records no gradients outside its transformations."""
    return contextlib.nullcontext()


def float64_note() -> str:
    """Why a float64 probe is not computed in float64: jax_enable_x64 off (identify leaves it as the caller set
    it); "" when it is on."""
    if sys.modules["jax"].config.read("jax_enable_x64"):
        return ""
    return "jax computes float64 only with jax_enable_x64, which identify leaves as the caller set it"
