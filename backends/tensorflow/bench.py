"""TensorFlow's benchmark hooks (the same names in every backends/<name>/bench.py; used by benchmarks/).

A tf.function call (XLA, jit_compile=True) returns before its result is computed, even on a CPU (measured here:
the next read of a 1e7-element result waited for the last call), so every timed call ends with
`tf.test.experimental.sync_devices()`, TensorFlow's documented barrier for benchmarking
(https://www.tensorflow.org/api_docs/python/tf/test/experimental/sync_devices); it does not copy the result to the
host as `.numpy()` would. `experimental_get_tracing_count()` counts a tf.function's traces, and with
jit_compile=True every trace is an XLA compilation, so a count that grows during the timed loop means it
recompiled there.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from gelulab.backends.tensorflow.activations import threads  # noqa: F401 - the bench hook, defined once


def sync(y) -> None:
    """Block until every op queued on every device is done (y is complete afterwards)."""
    tf.test.experimental.sync_devices()


def device_input(backend, a: np.ndarray):
    """`a` as a tf.Tensor placed on the backend's device, materialised before timing starts."""
    x = backend.asarray(a)
    sync(x)
    return x


def copy(x):
    """A new tensor with x's contents on x's device (DeepCopy; tf.identity may return the same buffer)."""
    return tf.raw_ops.DeepCopy(x=x)


def fresh() -> None:
    """Nothing to reset: each `Backend.function(..., mode="compiled")` is a new tf.function with its own traces."""


def compile_stats(fn) -> dict:
    """{"compiles": traces of the tf.function (experimental_get_tracing_count())}. Raises ValueError if fn is
    not a tf.function."""
    if not hasattr(fn, "experimental_get_tracing_count"):
        raise ValueError(f"{fn!r} is not a tf.function (no experimental_get_tracing_count)")
    return {"compiles": int(fn.experimental_get_tracing_count())}
