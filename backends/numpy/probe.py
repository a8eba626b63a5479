"""identify's probe on numpy (the `probe` tool module, gelulab.backends.tools): numpy arrays fed to callables of
numpy and scipy."""
from __future__ import annotations

import contextlib

import numpy as np

MODULES = ("numpy", "scipy")
ARRAY_KIND = "numpy array"

# The names of numpy and scipy that a `gelulab identify` expression may use (experiments/identify/expression.py
# collects them from every backend's probe module): per namespace `path`, its members by name ("names", checked before
# anything is imported) and/or by kind ("kind": "function"; "ufunc", a numpy ufunc of that name; "class", a class
# defined in module "defined_in"), which a refusal calls "described"; "module", the module to import where the path is
# an attribute of one; "denied", members never accepted. Names the framework lacks fail when evaluated
# (AttributeError).
NAMESPACES = (
    {"path": "numpy", "names": ("where", "clip"), "kind": "ufunc", "described": "ufuncs"},
    {"path": "scipy.special", "kind": "function", "described": "functions"},
    {"path": "scipy.stats.norm", "names": ("cdf", "logcdf", "pdf", "sf"), "module": "scipy.stats"},
)
ALIASES = {"np": "numpy"}  # the short names of its modules an identify expression may use


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
