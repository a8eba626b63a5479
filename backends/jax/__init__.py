"""The JAX backend: jax.nn builtins, jax.vjp autodiff, jax.jit; flax and optax for training. Its modules implement
the Protocols of core.contracts.contract."""
import sys

import numpy as np

from gelulab.core.contracts.contract import Capabilities

CAPABILITIES = Capabilities(
    name="jax", package="jax", extra="jax", modes=("eager", "compiled"), devices=("cpu", "gpu", "tpu"),
    autodiff=True, thread_control=("intra_op",),
    modules=("activations", "kernels", "bench", "bert", "moons", "subjects"), dispatcher="xla",
    dtypes=("float64", "float32", "bfloat16", "float16"), array_type="jax.Array",
    tools=("probe", "audit", "model_bench"), layers="flax",
)


def array_dtype(x) -> str | None:
    """The dtype name of a jax.Array or a jax tracer (inside jit, grad, vmap), None for anything else or when jax
    is not imported."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, (jax.Array, getattr(jax.core, "Tracer", jax.Array))):
        return np.dtype(x.dtype).name
    return None


def load_activations():
    """backends/jax/activations.py (imports jax)."""
    from gelulab.backends.jax import activations

    return activations
