"""identify's probe on numpy (the `probe` tool module, gelulab.backends.tools): numpy arrays fed to callables of
numpy and scipy."""
from __future__ import annotations

import contextlib

import numpy as np

MODULES = ("numpy", "scipy")
ARRAY_KIND = "numpy array"


def owner(fn) -> str | None:
    """None: numpy has no model or layer objects."""
    return None


def native(a: np.ndarray) -> np.ndarray:
    """A copy of `a` (the callable may write into its input)."""
    return a.copy()


def as_numpy(y) -> np.ndarray | None:
    """y itself when it is a numpy array or scalar, else None."""
    return np.asarray(y) if isinstance(y, (np.ndarray, np.generic)) else None


def context():
    """No context: numpy records no gradients."""
    return contextlib.nullcontext()


def float64_note() -> str:
    """"": numpy computes float64 as asked."""
    return ""
