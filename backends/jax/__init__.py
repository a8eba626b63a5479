"""The JAX backend: jax.nn builtins, jax.vjp autodiff, jax.jit; flax and optax for training. Its modules implement
the Protocols of core.contract."""
from gelulab.core.contract import Capabilities

CAPABILITIES = Capabilities(
    name="jax", package="jax", extra="jax", modes=("eager", "compiled"), devices=("cpu", "gpu", "tpu"),
    autodiff=True, thread_control=("intra_op",),
    modules=("activations", "bench", "bert", "moons", "subjects"), dispatcher="xla",
)
