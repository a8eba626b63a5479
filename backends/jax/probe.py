"""identify's probe on jax (the `probe` tool module, gelulab.backends.tools): jax arrays fed to callables of jax,
flax and optax. jax is asked for in sys.modules only, never imported here."""
from __future__ import annotations

import contextlib
import sys

import numpy as np

MODULES = ("jax", "jaxlib", "flax", "optax")
ARRAY_KIND = "jax array"

# The names of jax and flax that a `gelulab identify` expression may use (experiments/identify/expression.py collects
# them from every backend's probe module): per namespace `path`, its members by name ("names", checked before anything
# is imported) and/or by kind ("kind": "function"; "ufunc", a numpy ufunc of that name; "class", a class defined in
# module "defined_in"), which a refusal calls "described"; "module", the module to import where the path is an
# attribute of one; "denied", members never accepted. Names the framework lacks fail when evaluated (AttributeError).
NAMESPACES = (
    {"path": "jax.nn", "kind": "function", "described": "functions"},
    {"path": "jax.numpy", "names": ("where", "clip"), "kind": "ufunc", "described": "numpy's ufuncs"},
    {"path": "jax.scipy.special", "kind": "function", "described": "functions"},
    {"path": "jax.lax", "names": ("abs", "add", "div", "erf", "erf_inv", "erfc", "exp", "exp2", "expm1",
                                  "integer_pow", "log", "log1p", "logistic", "max", "min", "mul", "neg", "pow",
                                  "rsqrt", "select", "sign", "sqrt", "square", "sub", "tanh")},
    {"path": "flax.linen", "names": ("celu", "elu", "gelu", "glu", "hard_sigmoid", "hard_silu", "hard_swish",
                                     "hard_tanh", "leaky_relu", "log_sigmoid", "log_softmax", "relu", "relu6", "selu",
                                     "sigmoid", "silu", "soft_sign", "softmax", "softplus", "swish", "tanh")},
)
ALIASES = {"jnp": "jax.numpy"}  # the short names of its modules an identify expression may use

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
