"""JAX's benchmark hooks (the same names in every backends/<name>/bench.py; used by benchmarks/).

JAX dispatches asynchronously: a call returns before its result is computed, so every timed call ends with
`jax.block_until_ready` (JAX docs, "Benchmarking JAX code", https://docs.jax.dev/en/latest/benchmarking.html).
A jax.jit function keeps one compiled executable per input signature in its own cache; `_cache_size()` counts
them, so a count that grows during the timed loop means it recompiled there.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from gelulab.backends.jax.activations import threads  # noqa: F401 - the bench hook, defined once


def sync(y) -> None:
    """Block until y (an array or a pytree of arrays) is computed on its device."""
    jax.block_until_ready(y)


def device_input(backend, a: np.ndarray):
    """`a` as a jax.Array on the backend's device, transferred before timing starts."""
    x = backend.asarray(a)
    jax.block_until_ready(x)
    return x


def copy(x):
    """A new device buffer with x's contents (jnp.array(copy=True): a device-to-device copy)."""
    return jnp.array(x, copy=True)


def fresh() -> None:
    """Nothing to reset: each `Backend.function(..., mode="compiled")` is a new jax.jit object with its own cache."""


def compile_stats(fn) -> dict:
    """{"compiles": executables in the jitted function's cache (jax.jit's `_cache_size()`)}.
    Raises ValueError if fn is not a jax.jit function."""
    if not hasattr(fn, "_cache_size"):
        raise ValueError(f"{fn!r} is not a jax.jit function (no _cache_size)")
    return {"compiles": int(fn._cache_size())}
