"""numpy's benchmark hooks (the same names in every backends/<name>/bench.py; used by benchmarks/).

numpy computes on the host and returns when the result is written, so there is nothing to synchronise; it has no
compiler, so nothing can recompile. Its elementwise ufuncs and scipy.special functions run on one thread.
"""
from __future__ import annotations

import numpy as np

from gelulab.backends.numpy.activations import threads  # noqa: F401 - the bench hook, defined once


def sync(y) -> None:
    """Nothing to wait for: a numpy call returns with its result computed."""


def device_input(backend, a: np.ndarray):
    """The benchmark input on the backend's device (the host), computed before timing starts."""
    return backend.asarray(a)


def copy(x):
    """A new array with x's contents (the reference copy on this device)."""
    return np.copy(x)


def fresh() -> None:
    """Nothing to reset: numpy keeps no compilation cache."""


def compile_stats(fn) -> dict:
    """numpy has no compiled mode: {"compiles": None}."""
    return {"compiles": None}
