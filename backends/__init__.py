"""Backends: one folder per framework (`backends/<name>/`), each the only importer of its framework.

The registry: every backend package (`backends/<name>/__init__.py`, the Package Protocol of core.contracts.contract: its
`Capabilities` record, the recogniser of its arrays and the loader of its activations module; it imports no
framework) in canonical order, torch before tensorflow (importing TensorFlow first can crash torch's import; Keras
imports them in this order too). BACKEND_NAMES, the install commands and gelulab.api's dispatch on an array's type
derive from it. A new backend is a folder with that `__init__.py` and the modules implementing the Protocols of
core.contracts.contract, plus one import and one entry of `_PACKAGES` below.

`get_backend(name)` imports the framework lazily, so a missing framework disables that backend alone with a clear
message; it changes no framework-wide setting (`gelulab.reproducible` does that, explicitly).
`selected_backends()` reads GELULAB_BACKEND.
"""
from __future__ import annotations

import importlib.util
import os
from functools import cache
from types import ModuleType

from gelulab.backends import array_api as _array_api
from gelulab.backends import jax as _jax
from gelulab.backends import numpy as _numpy
from gelulab.backends import tensorflow as _tensorflow
from gelulab.backends import torch as _torch
from gelulab.core.contracts.contract import Capabilities
from gelulab.core.contracts.interface import Backend
from gelulab.core.plumbing import config
from gelulab.core.plumbing import settings as _settings
from gelulab.core.plumbing.interrupts import held_interrupts

_PACKAGES = (_numpy, _jax, _torch, _tensorflow, _array_api)
_RECORDS = tuple(p.CAPABILITIES for p in _PACKAGES)
_applied: dict = {}  # backend name -> the Settings last applied to its framework
REGISTRY: dict[str, Capabilities] = {c.name: c for c in _RECORDS}
PACKAGES: dict[str, ModuleType] = {p.CAPABILITIES.name: p for p in _PACKAGES}  # name -> backends/<name>/__init__.py
BACKEND_NAMES: tuple[str, ...] = tuple(REGISTRY)
# folders of backends/ that are not backends: readers of a runtime's files for api.audit, with no Capabilities record
READER_FOLDERS: tuple[str, ...] = ("onnx",)
INSTALL_HINT: dict[str, str] = {c.name: c.install_hint for c in _RECORDS}

__all__ = ["BACKEND_NAMES", "PACKAGES", "REGISTRY", "Backend", "BackendUnavailable", "Capabilities",
           "DeviceUnavailable", "capabilities", "get_backend", "installed_backends", "parse_backend_list",
           "reproducible", "requested_backends", "selected_backends"]


class BackendUnavailable(RuntimeError):
    """A named backend's framework is not installed (or failed to import); the message gives the install command."""


class DeviceUnavailable(RuntimeError):
    """The requested device (GELULAB_DEVICE / --device) is absent, or the backend cannot run on it."""


def _unknown(name) -> ValueError:
    return ValueError(f"unknown backend {name!r}; valid backends: {list(BACKEND_NAMES)}")


def capabilities(name: str) -> Capabilities:
    """The capability record of backend `name` (no framework is imported). Raises ValueError for an unknown name,
    listing the valid ones."""
    if name not in REGISTRY:
        raise _unknown(name)
    return REGISTRY[name]


def parse_backend_list(value: str | None) -> list[str] | None:
    """Parse a GELULAB_BACKEND-style string ("torch, jax") into names, repeats dropped; None/empty -> None (meaning:
    all installed).

    Raises ValueError naming the bad entry and the valid names, or when the string names no backend (",").
    """
    if value is None or not value.strip():
        return None
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise ValueError(f"GELULAB_BACKEND={value!r} names no backend; valid backends: {list(BACKEND_NAMES)}")
    for n in names:
        if n not in REGISTRY:
            raise ValueError(f"unknown backend {n!r} in GELULAB_BACKEND={value!r}; valid backends: "
                             f"{list(BACKEND_NAMES)}")
    return list(dict.fromkeys(names))


def requested_backends() -> list[str] | None:
    """Backends named by GELULAB_BACKEND, or None when it is unset/empty (ValueError as parse_backend_list)."""
    return parse_backend_list(os.environ.get("GELULAB_BACKEND"))


def activations_module(name: str, apply: bool = True):
    """Import backend `name`'s activations module (and so its framework); with `apply`, the settings of an earlier
    `gelulab.reproducible` call are applied to it first thing, before the framework's runtime starts. Raises
    ValueError for an unknown name, BackendUnavailable when the framework does not import (naming the install
    command)."""
    caps = capabilities(name)
    with held_interrupts():  # Ctrl-C arrives after the framework's import, not inside its extension's start
        try:
            module = PACKAGES[name].load_activations()
        except ImportError as e:
            raise BackendUnavailable(f"backend {name!r} is not available ({e}); install it with: "
                                     f"{caps.install_hint}") from e
        requested = _settings.requested()
        if apply and requested is not None and _applied.get(name) != requested:
            apply_settings(name, module, requested)
    return module


def apply_settings(name: str, module, settings) -> dict:
    """Apply core.plumbing.settings.Settings to backend `name` through its activations `module`; returns what was
    set."""
    done = module.apply_settings(settings)
    _applied[name] = settings
    return done


@cache
def _load(name: str, device: str) -> Backend:
    caps = capabilities(name)
    if device not in caps.devices:
        raise DeviceUnavailable(f"backend {name!r} runs on {list(caps.devices)}, not on {device!r}")
    module = activations_module(name)
    try:
        with held_interrupts():  # the framework's runtime starts here
            module.setup(device)
    except RuntimeError as e:
        raise DeviceUnavailable(" ".join(str(e).split())) from e
    return Backend(name=name, device=device, module=module, capabilities=caps)


def get_backend(name: str, device: str | None = None) -> Backend:
    """The Backend for `name` (one of BACKEND_NAMES) on `device` (default: GELULAB_DEVICE or cpu).

    Imports the framework on first use and changes none of its global settings (threads, x64, matmul precision,
    TF32; see gelulab.reproducible). Raises ValueError for an unknown name or device (naming the value and listing
    the valid ones),
    BackendUnavailable when its framework is not installed (naming the install command), DeviceUnavailable (a
    RuntimeError) when the device is not present or the backend cannot use it.
    """
    if device is not None and device not in config.DEVICES:
        raise ValueError(f"device {device!r}; expected one of {list(config.DEVICES)} (gelulab's names: 'gpu' for "
                         "CUDA or ROCm)")
    return _load(name, device or config.device())


def installed_backends() -> list[str]:
    """Names of backends whose framework package is installed here (record's `package`), in canonical order."""
    return [c.name for c in _RECORDS if importlib.util.find_spec(c.package) is not None]


def selected_backends() -> list[str]:
    """Backends chosen by GELULAB_BACKEND (all installed ones when unset), in the order named.

    Raises ValueError for an unknown name, BackendUnavailable for a named backend whose framework is missing.
    """
    names = requested_backends()
    if names is None:
        return installed_backends()
    installed = installed_backends()
    missing = [n for n in names if n not in installed]
    if missing:
        raise BackendUnavailable(
            "; ".join(f"backend {n!r} is not installed: {REGISTRY[n].install_hint}" for n in missing)
        )
    return names


def __getattr__(name: str):
    if name == "reproducible":  # defined in backends.settings, which imports this module
        from gelulab.backends.settings import reproducible

        return reproducible
    raise AttributeError(f"module 'gelulab.backends' has no attribute {name!r}")
