"""JAX backend: jax.nn builtins, jax.vjp autodiff, jax.jit. Float64 needs jax_enable_x64, set in setup().

builtin: jax.nn.gelu(x, approximate=False|True) (its default is approximate=True, the tanh form; gelulab always
passes it, https://docs.jax.dev/en/latest/_autosummary/jax.nn.gelu.html) and jax.nn.relu; JAX has no
sigmoid-form GELU, so its builtin is x * jax.nn.sigmoid(1.702 * x).
"""
from __future__ import annotations

import os
import re

from gelulab.core import config
from gelulab.core.dtypes import get_dtype
from gelulab.core.formulas import SIGMOID_SCALE


def _xla_threads_flags(threads: int) -> None:
    # XLA reads these once, when the CPU client starts: they must be set before the first jax computation.
    flags = os.environ.get("XLA_FLAGS", "")
    if "intra_op_parallelism_threads" not in flags:
        os.environ["XLA_FLAGS"] = (
            f"{flags} --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
            f"intra_op_parallelism_threads={threads}"
        ).strip()


_xla_threads_flags(config.threads())  # ValueError naming GELULAB_THREADS unless a positive integer

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

NAME = "jax"
MODES = ("eager", "compiled")
_PLATFORM = {"cpu": "cpu", "gpu": "gpu", "tpu": "tpu"}
_state = {"device": None}


def setup(device: str, threads: int) -> None:
    """Enable float64 (jax_enable_x64) and pick the device; raises RuntimeError when the platform is absent.
    matmul precision is set to float32 so GPU/TPU do not use reduced-precision passes."""
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    try:
        _state["device"] = jax.devices(_PLATFORM[device])[0]
    except RuntimeError as e:
        raise RuntimeError(f"jax backend: no {device!r} device ({e})") from e


def versions() -> dict:
    """{"jax", "jaxlib", "flax", "optax": version strings}. Raises ImportError without flax or optax
    (core.report.environment records it as not installed)."""
    import flax
    import jaxlib
    import optax

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__, "optax": optax.__version__}


def threads() -> dict:
    """XLA CPU threads in effect, read from XLA_FLAGS (set at import from GELULAB_THREADS):
    {"intra_op": int or None, "xla_flags": str}."""
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(r"intra_op_parallelism_threads=(\d+)", flags)
    return {"intra_op": int(m.group(1)) if m else None, "xla_flags": flags}


def jax_device():
    """The jax.Device arrays are placed on."""
    return _state["device"] or jax.devices("cpu")[0]


def asarray(a: np.ndarray, device: str):
    """numpy array (any float dtype, any shape) -> jax.Array of the same dtype and shape on the device chosen in
    setup() (`device` is that same name; placement uses jax_device())."""
    return jax.device_put(np.asarray(a), jax_device())


def to_numpy(x) -> np.ndarray:
    """jax.Array -> numpy array of the same dtype and shape, copied to the host."""
    return np.asarray(jax.device_get(x))


# ArrayOps


def where(c, a, b):
    """jnp.where(c, a, b), elementwise with broadcasting."""
    return jnp.where(c, a, b)


def astype(x, name: str):
    """x cast to dtype `name` ("float64", "float32", "bfloat16", "float16"); ValueError for another."""
    return x.astype(get_dtype(name).np_dtype)


def dtype_name(x) -> str:
    """The gelulab dtype name of a jax.Array ("float64", "float32", "bfloat16", "float16")."""
    return get_dtype(x.dtype).name


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.dtypes DType.wide), except float32 on a TPU, which has no
    float64 and stays float32."""
    if name == "float32" and jax_device().platform == "tpu":
        return "float32"  # TPUs have no float64: float32 inputs are computed in float32 there
    return get_dtype(name).wide


erfc = jax.lax.erfc
exp = jnp.exp
sigmoid = jax.nn.sigmoid

_BUILTINS = {
    "relu": jax.nn.relu,
    "gelu_none": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_sigmoid": lambda x: x * jax.nn.sigmoid(SIGMOID_SCALE * x),
}


def builtin(activation):
    """The framework's own function for a catalogue entry, or None where the framework has none."""
    return _BUILTINS.get(activation.key)


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/jax/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    from gelulab.backends.jax import kernels

    from gelulab.core.kernels import KERNELS

    return kernels.kernel(activation.key) if activation.key in KERNELS else None


def derivative(fn, activation):
    """Elementwise derivative through jax.vjp with a cotangent of ones (apply twice for f'')."""

    def d(x):
        out, vjp = jax.vjp(fn, x)
        return vjp(jnp.ones_like(out))[0]

    return d


def compile(fn):
    """jax.jit (retraces per shape and dtype)."""
    return jax.jit(fn)
