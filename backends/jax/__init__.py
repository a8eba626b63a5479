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
    # forced with XLA_FLAGS=--xla_cpu_max_isa on an Intel Xeon (AVX-512) by `make test-dispatch`
    measured_dispatch=("sse4_2", "avx2", "avx512"),
    # XLA's CPU runtime runs with flush-to-zero / denormals-are-zero (measured: jax.nn.relu(1e-40) == 0)
    flushes_subnormals=("float64", "float32", "bfloat16"),
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
