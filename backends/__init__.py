"""Backends: one package per framework (`backends/<name>/`), each the only importer of its framework.

`get_backend(name)` imports the framework lazily, so a missing framework disables that backend alone with a
clear message. `selected_backends()` reads GELULAB_BACKEND (see core.config).
"""
from __future__ import annotations

import importlib
import importlib.util
from functools import cache

from gelulab.core import config
from gelulab.core.interface import Backend


class BackendUnavailable(RuntimeError):
    """A named backend's framework is not installed (or failed to import); the message gives the install command."""


class DeviceUnavailable(RuntimeError):
    """The requested device (GELULAB_DEVICE / --device) is absent, or the backend cannot run on it."""


@cache
def _load(name: str, device: str) -> Backend:
    if name not in config.BACKEND_NAMES:
        raise ValueError(f"unknown backend {name!r}; valid backends: {list(config.BACKEND_NAMES)}")
    try:
        module = importlib.import_module(f"gelulab.backends.{name}.activations")
    except ImportError as e:
        raise BackendUnavailable(
            f"backend {name!r} is not available ({e}); install it with: {config.INSTALL_HINT[name]}"
        ) from e
    try:
        module.setup(device, config.threads())
    except RuntimeError as e:
        raise DeviceUnavailable(" ".join(str(e).split())) from e
    return Backend(name=name, device=device, module=module)


def get_backend(name: str, device: str | None = None) -> Backend:
    """The Backend for `name` ("numpy", "jax", "torch", "tensorflow") on `device` (default: GELULAB_DEVICE or cpu).

    Raises ValueError for an unknown name or device (naming the value and listing the valid ones),
    BackendUnavailable when its framework is not installed (naming the install command), DeviceUnavailable (a
    RuntimeError) when the device is not present or the backend cannot use it.
    """
    if device is not None and device not in config.DEVICES:
        raise ValueError(f"device {device!r}; expected one of {list(config.DEVICES)} (gelulab's names: 'gpu' for "
                         "CUDA or ROCm)")
    return _load(name, device or config.device())


def installed_backends() -> list[str]:
    """Names of backends whose framework imports here, in the canonical order."""
    out = []
    for name in config.BACKEND_NAMES:
        if name == "numpy" or importlib.util.find_spec(name) is not None:
            out.append(name)
    return out


def selected_backends() -> list[str]:
    """Backends chosen by GELULAB_BACKEND (all installed ones when unset).

    Raises ValueError for an unknown name, BackendUnavailable for a named backend whose framework is missing.
    """
    names = config.requested_backends()
    if names is None:
        return installed_backends()
    missing = [n for n in names if n not in installed_backends()]
    if missing:
        raise BackendUnavailable(
            "; ".join(f"backend {n!r} is not installed: {config.INSTALL_HINT[n]}" for n in missing)
        )
    return names
