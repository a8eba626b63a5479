"""gelulab: ReLU, exact GELU (x Phi(x), written with erfc), the tanh and sigmoid approximations and SiLU, in JAX,
PyTorch and TensorFlow beside each framework's builtin, checked against a correctly rounded mpmath reference.

Importing gelulab imports no framework and changes no framework setting. The public names are resolved lazily:

    get_backend(name, device=None)   the Backend of one framework (gelulab.backends)
    gelu(x, approximate="none", impl="formula"), relu(x, impl=...), silu(x, impl=...)
                                     activations on a torch, jax, TensorFlow or numpy array, the same kind out
                                     (gelulab.api)
    apply(key, x, impl=...), activation(key, impl=...)
                                     any catalogue entry on a native array, or as a callable (gelulab.api)
    swap(model, to=None, impl=...)   replace the activation modules of a torch or Keras model (gelulab.surgery)
    identify(fn, other=None)         which GELU (or ReLU, SiLU) a callable computes (gelulab.probe)

Layers for each framework: gelulab.layers.torch, gelulab.layers.keras, gelulab.layers.flax.
"""
from __future__ import annotations

__version__ = "0.2.0"

_LAZY = {
    "get_backend": ("gelulab.backends", "get_backend"),
    "ACTIVATIONS": ("gelulab.core.activations", "ACTIVATIONS"),
    "gelu": ("gelulab.api", "gelu"),
    "relu": ("gelulab.api", "relu"),
    "silu": ("gelulab.api", "silu"),
    "apply": ("gelulab.api", "apply"),
    "activation": ("gelulab.api", "activation"),
    "swap": ("gelulab.surgery", "swap"),
    "identify": ("gelulab.probe", "identify"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'gelulab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
