"""The catalogue of activations: one unit module per activation, collected here.

Each unit, core/activations/<key>.py, holds everything gelulab knows of its activation in one `Activation` named
ACTIVATION (core.activations._entry): gelulab's formula (core.numerics.formulas) and its closed-form derivatives, the
mpmath reference (core.numerics.mp_forms), the float32 kernels (core.numerics.kernels; optional) and the float64 closed
forms that check them (core.numerics.float64_forms), the limits at +-inf, the clamp point of the formula, how the
reference evaluates the far tail, the roots of the derivatives, the sign-of-zero and NaN-derivative rules, each
framework's builtin (a descriptor the backend resolves, see `Call`, `TimesX`, `Expression`), the known faults of those
builtins (rows of core.parity.known_faults, kept as data in core/activations/faults/<key>.toml and read by
core.parity.fault_data), the kernel fit's description of its form (core/numerics/kernel_fit.py), the framework classes
and functions that compute it (gelulab.swap, gelulab.identify, the layers), and the traits the reports, plots and
experiments read (baseline, smooth, colour, transformers' names). A unit may define its functions itself, over the
shared helpers of those modules.

Every module of this package whose name does not start with "_" is a unit: it is imported here and its ACTIVATION
enters ACTIVATIONS, ordered by the entry's `position`. No module outside the units compares an activation's key or
op: the parity suite, the reports, the benchmarks, the experiments, swap and identify iterate over ACTIVATIONS and
read these fields, so adding an activation is adding one unit (and its faults file), with no edit elsewhere in the
code; the tests read what they expect of it from its fields and its mpmath reference. An entry without a kernel
takes its formula wherever the kernel is only the default (Activation.impl_for, core.contracts.interface.default_impl).
"""
from __future__ import annotations

import importlib
import pkgutil

from gelulab.core.activations._entry import (
    DEFAULT_IMPL,
    IMPLS,
    Activation,
    Call,
    Expression,
    TimesX,
    resolve,
)

__all__ = [
    "ACTIVATIONS",
    "BASELINE",
    "DEFAULT_IMPL",
    "GELU_MODES",
    "HEADLINE",
    "HF_ACTIVATIONS",
    "IMPLS",
    "Activation",
    "Call",
    "Expression",
    "TimesX",
    "activation_key",
    "check_impl",
    "check_mode",
    "get_activation",
    "resolve",
    "units",
]


def units() -> tuple[Activation, ...]:
    """Every unit's entry: the ACTIVATION of each module of this package whose name does not start with "_", in
    the order of their `position` (then key). Raises TypeError naming a unit module without an Activation named
    ACTIVATION, ValueError naming a key two units share."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        entry = getattr(module, "ACTIVATION", None)
        if not isinstance(entry, Activation):
            raise TypeError(f"{module.__name__} is a catalogue unit without an Activation named ACTIVATION")
        found.append(entry)
    keys = [a.key for a in found]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"catalogue keys defined by two units: {twice}")
    return tuple(sorted(found, key=lambda a: (a.position, a.key)))


ACTIVATIONS: dict[str, Activation] = {a.key: a for a in units()}

BASELINE: str = next(k for k, a in ACTIVATIONS.items() if a.baseline)  # "relu"
HEADLINE: tuple[str, ...] = tuple(k for k, a in ACTIVATIONS.items() if a.headline)  # ("relu", "gelu_none")
GELU_MODES: tuple[str, ...] = tuple(a.mode for a in ACTIVATIONS.values() if a.op == "gelu")
HF_ACTIVATIONS: dict[str, str] = {n: k for k, a in ACTIVATIONS.items() for n in a.hf_names}


def check_mode(approximate) -> str:
    """Validate a GELU mode: it must be one of the strings "none", "tanh", "sigmoid".

    A bool, None or any other value raises ValueError naming the accepted values (frameworks disagree: jax.nn.gelu
    defaults to tanh, and tf.nn.gelu(x, approximate="none") silently gives tanh because the string is truthy).
    """
    if not isinstance(approximate, str) or approximate not in GELU_MODES:
        raise ValueError(
            f"approximate={approximate!r} is not a GELU mode; expected one of {list(GELU_MODES)} "
            "(an explicit string: bools and None are refused because frameworks read them differently)"
        )
    return approximate


def check_impl(impl) -> str:
    """Validate an implementation name (one of IMPLS: "formula", "builtin", "kernel"); raises ValueError
    otherwise."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not an implementation; expected one of {list(IMPLS)}")
    return impl


def get_activation(key: str) -> Activation:
    """Catalogue entry by key; raises ValueError naming the valid keys."""
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {key!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]


def activation_key(op: str, approximate: str | None = None) -> str:
    """Catalogue key for an op and mode: ("relu", None) -> "relu", ("gelu", "tanh") -> "gelu_tanh".

    An op with modes (GELU) needs an explicit mode string (check_mode); an op without ignores `approximate`.
    Raises ValueError for an unknown op (naming the known ones) or mode."""
    entries = [a for a in ACTIVATIONS.values() if a.op == op]
    if not entries:
        ops = list(dict.fromkeys(a.op for a in ACTIVATIONS.values()))
        raise ValueError(f"unknown op {op!r}; expected one of {ops}")
    if all(a.mode is None for a in entries):
        return entries[0].key
    mode = check_mode(approximate)
    return next(a.key for a in entries if a.mode == mode)
