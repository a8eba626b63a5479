"""Calling a backend function at the parity suite's input length, so a compiled mode compiles nothing new.

A compiled mode has static shapes (torch.compile(dynamic=False) builds and compiles another C++ kernel for each new
length, about a second each on 2 cores), so a test that judges a few points of a compiled function writes them over
the start of the parity suite's input for their dtype (experiments.parity.engine.inputs) and cuts the result back:
the graph is then the parity group's own, found in inductor's FX graph and C++ caches, which every process of the
suite shares. Eager calls take the points as they are.
"""
from __future__ import annotations

import numpy as np

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.experiments.parity.engine import inputs


def call(backend, fn, x, mode: str) -> np.ndarray:
    """fn (a callable of `backend` in `mode`, "eager" or "compiled") at the numpy array x (any shape, one of
    gelulab's dtypes), as a numpy array of x's shape and of fn's output dtype.

    In a compiled mode x is written over the start of the parity input of its dtype, which must be at least as
    long as x (ValueError naming both lengths otherwise); the other values are computed and left out."""
    x = np.asarray(x)
    if mode != "compiled":
        return backend.to_numpy(fn(backend.asarray(x)))
    full = inputs(get_dtype(x.dtype).name)[0].copy()
    if x.size > full.size:
        raise ValueError(f"{x.size} points; the parity input of {x.dtype} holds {full.size}")
    full[:x.size] = x.ravel()
    return backend.to_numpy(fn(backend.asarray(full)))[:x.size].reshape(x.shape)
