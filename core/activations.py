"""The catalogue of activations: the one place to add a new activation.

An `Activation` names the op ("relu" or "gelu"), its GELU mode, gelulab's formula (core.formulas), its closed-form
derivatives (used only where a backend has no autodiff), its mpmath reference (core.mp_forms) and its limits at
+-inf. Each backend maps the key to its framework's builtin where one exists (`_BUILTINS` in
backends/<name>/activations.py); a backend without one has no builtin cells. The parity suite, the reports and the experiments iterate
over `ACTIVATIONS`, so a new entry here is covered everywhere without test edits.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gelulab.core import formulas, mp_forms

GELU_MODES = ("none", "tanh", "sigmoid")
IMPLS = ("formula", "builtin", "kernel")


@dataclass(frozen=True)
class Activation:
    """One catalogue entry.

    key: unique id, also the reference key ("gelu_tanh").
    op: "relu" or "gelu"; mode: the GELU `approximate` string, or None for ReLU.
    formula: f(xp, x) -> array, gelulab's implementation over a backend's ArrayOps.
    d1, d2: closed-form derivatives f(xp, x) in the wide dtype (for backends without autodiff).
    mp: f(x, order) in mpmath, the high-precision reference of the value and its first two derivatives.
    limits: {order: (limit at -inf, limit at +inf)}, the reference at infinite inputs (-0.0 where approached
      from below).
    source: where the formula comes from (paper / framework doc).
    """

    key: str
    op: str
    mode: str | None
    formula: Callable
    d1: Callable
    d2: Callable
    mp: Callable
    limits: dict
    source: str

    @property
    def label(self) -> str:
        """Human-readable name: 'relu', 'gelu(none)', 'gelu(tanh)', 'gelu(sigmoid)'."""
        return self.op if self.mode is None else f"{self.op}({self.mode})"


_GELU_LIMITS = {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (0.0, 0.0)}  # f, f', f'' at -inf and +inf

ACTIVATIONS: dict[str, Activation] = {
    a.key: a
    for a in (
        Activation("relu", "relu", None, formulas.relu, formulas.relu_d1, formulas.relu_d2, mp_forms.relu,
                   {0: (0.0, math.inf), 1: (0.0, 1.0), 2: (0.0, 0.0)}, "max(x, 0); Nair & Hinton 2010"),
        Activation("gelu_none", "gelu", "none", formulas.gelu_none, formulas.gelu_none_d1, formulas.gelu_none_d2,
                   mp_forms.gelu_none, _GELU_LIMITS, "x Phi(x) = x/2 erfc(-x/sqrt 2); Hendrycks & Gimpel 2016, eq. 1"),
        Activation("gelu_tanh", "gelu", "tanh", formulas.gelu_tanh, formulas.gelu_tanh_d1, formulas.gelu_tanh_d2,
                   mp_forms.gelu_tanh, _GELU_LIMITS,
                   "x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))); Hendrycks & Gimpel 2016, sec. 2"),
        Activation("gelu_sigmoid", "gelu", "sigmoid", formulas.gelu_sigmoid, formulas.gelu_sigmoid_d1,
                   formulas.gelu_sigmoid_d2, mp_forms.gelu_sigmoid, _GELU_LIMITS,
                   "x sigmoid(1.702 x); Hendrycks & Gimpel 2016, sec. 2"),
    )
}


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
    """Validate an implementation name ("formula" or "builtin"); raises ValueError otherwise."""
    if impl not in IMPLS:
        raise ValueError(f"impl={impl!r} is not an implementation; expected one of {list(IMPLS)}")
    return impl


def get_activation(key: str) -> Activation:
    """Catalogue entry by key; raises ValueError naming the valid keys."""
    if key not in ACTIVATIONS:
        raise ValueError(f"unknown activation {key!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[key]


def activation_key(op: str, approximate: str | None = None) -> str:
    """Catalogue key for an op and mode: ("relu", None) -> "relu", ("gelu", "tanh") -> "gelu_tanh"."""
    if op == "relu":
        return "relu"
    if op == "gelu":
        return f"gelu_{check_mode(approximate)}"
    raise ValueError(f"unknown op {op!r}; expected 'relu' or 'gelu'")
