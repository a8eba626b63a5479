"""gelulab: ReLU, exact GELU (x Phi(x), written with erfc), the tanh and sigmoid approximations and SiLU, in JAX,
PyTorch and TensorFlow beside each framework's builtin, checked against a correctly rounded mpmath reference.

Importing gelulab imports no framework and changes no framework setting; neither does `get_backend` or any
activation call. The public names are resolved lazily:

    get_backend(name, device=None)   the Backend of one framework (gelulab.backends)
    reproducible(threads=1, *, x64=True, tf32=False, backends=None)
                                     the one call that changes framework-wide settings (threads, JAX x64,
                                     TF32 / matmul precision), as the command line and the experiments do
    capabilities(name)               a backend's capability record (modes, devices, autodiff, install extra)
    BACKEND_NAMES                    the backends gelulab knows, in canonical order
    ACTIVATIONS                      the activation catalogue (gelulab.core.activations)
    gelu(x, approximate="none", impl="kernel"), relu(x, impl=...), silu(x, impl=...)
                                     activations on a torch, jax, TensorFlow or numpy array, the same kind out
                                     (gelulab.api)
    apply(key, x, impl=...), activation(key, impl=...)
                                     any catalogue entry on a native array, or as a callable (gelulab.api)
    swap(model, to=None, impl=...)   replace the activation modules of a torch or Keras model (gelulab.api.surgery)
    identify(fn, other=None)         which GELU (or ReLU, SiLU) a callable computes (gelulab.api.probe); for a
                                     model or a model file, every activation site and what it computes
                                     (gelulab.api.audit)

Layers for each framework: gelulab.layers.torch, gelulab.layers.keras, gelulab.layers.flax. For a converter's test
suite: gelulab.testing.assert_same_activations(a, b).
"""
from __future__ import annotations

from importlib import metadata as _metadata


def _version() -> str:
    """The installed distribution's version (written once, in pyproject.toml); from a checkout that was never
    installed, pyproject.toml beside this file (the repository root is the package); else "unknown"."""
    try:
        return _metadata.version("gelulab")
    except _metadata.PackageNotFoundError:
        pass
    try:
        import tomllib
        from pathlib import Path

        return tomllib.loads((Path(__file__).parent / "pyproject.toml").read_text())["project"]["version"]
    except (ImportError, OSError, KeyError):
        return "unknown"


__version__ = _version()

_LAZY = {
    "get_backend": ("gelulab.backends", "get_backend"),
    "reproducible": ("gelulab.backends.settings", "reproducible"),
    "capabilities": ("gelulab.backends", "capabilities"),
    "BACKEND_NAMES": ("gelulab.backends", "BACKEND_NAMES"),
    "ACTIVATIONS": ("gelulab.core.activations", "ACTIVATIONS"),
    "gelu": ("gelulab.api", "gelu"),
    "relu": ("gelulab.api", "relu"),
    "silu": ("gelulab.api", "silu"),
    "apply": ("gelulab.api", "apply"),
    "activation": ("gelulab.api", "activation"),
    "swap": ("gelulab.api.surgery", "swap"),
    "identify": ("gelulab.api.probe", "identify"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'gelulab' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
