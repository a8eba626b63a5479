"""gelulab: ReLU, exact GELU (x Phi(x), written with erfc), the tanh and sigmoid approximations and SiLU, in JAX,
PyTorch and TensorFlow beside each framework's builtin, checked against a correctly rounded mpmath reference.

Importing gelulab imports no framework and changes no framework setting. The public names are resolved lazily:

    get_backend(name, device=None)   the Backend of one framework (gelulab.backends)
"""
from __future__ import annotations

__version__ = "0.2.0"

_LAZY = {
    "get_backend": ("gelulab.backends", "get_backend"),
    "ACTIVATIONS": ("gelulab.core.activations", "ACTIVATIONS"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'gelulab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
