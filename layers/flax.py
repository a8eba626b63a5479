"""gelulab's activations as flax.linen modules.

    from gelulab.layers.flax import GELU
    model = flax.linen.Sequential([flax.linen.Dense(16), GELU(approximate="tanh"), flax.linen.Dense(1)])

By default (impl=None) they compute with jax.nn's own op (jax.nn.gelu(approximate=...), relu, silu; the sigmoid
form as x * jax.nn.sigmoid(1.702 x)), so a model costs what it costs with jax.nn.gelu; impl="kernel" opts in to
gelulab's float32 kernel within 1 ULP (about 8-9x jax.nn's op per call on a CPU), impl="formula" to its correctly
rounded formula. They have no parameters and run under jax.jit, grad and vmap. In a flax.nnx model no layer is needed:
call the function `gelulab.gelu(x, approximate=...)` in `__call__` (it dispatches on the jax array, tracers included).
"""
from __future__ import annotations

import flax.linen as nn

from gelulab.api import apply
from gelulab.core.activations import activation_key, check_impl, check_mode, get_activation


class Activation(nn.Module):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise linen module.

    key: catalogue key; impl: None (default: "builtin", jax.nn's own function, or gelulab's formula for an entry jax
    has none for), "builtin", "kernel" (opt-in: gelulab's float32 kernel within 1 ULP, about 8-9x jax.nn's op per
    call on a CPU) or "formula". Input: a floating jax array of any
    shape (float64 only where the caller enabled jax_enable_x64); output: the same shape and dtype. Raises
    ValueError for an unknown key or impl when the module is constructed.
    """

    key: str
    impl: str | None = None

    def __post_init__(self):
        get_activation(self.key)
        if self.impl is not None:
            check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply(self.key, x, self.impl)


class GELU(nn.Module):
    """GELU: approximate "none" (exact x Phi(x), Hendrycks & Gimpel 2016 eq. 1), "tanh" (sec. 2) or "sigmoid"
    (x sigmoid(1.702 x), sec. 2), an explicit string (jax.nn.gelu's bool defaults to tanh; here a bool or None
    raises ValueError); impl None (default: jax.nn.gelu(approximate=...), x * jax.nn.sigmoid(1.702 x) for
    "sigmoid"), "builtin", "kernel" or "formula" (see Activation)."""

    approximate: str = "none"
    impl: str | None = None

    def __post_init__(self):
        check_mode(self.approximate)
        if self.impl is not None:
            check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply(activation_key("gelu", self.approximate), x, self.impl)


class ReLU(nn.Module):
    """ReLU max(x, 0); impl None (default: jax.nn.relu), "builtin", "kernel" or "formula" (see Activation)."""

    impl: str | None = None

    def __post_init__(self):
        if self.impl is not None:
            check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply("relu", x, self.impl)


class SiLU(nn.Module):
    """SiLU x sigmoid(x); impl None (default: jax.nn.silu), "builtin", "kernel" or "formula" (see Activation).
    Raises ValueError when the catalogue has no "silu" entry."""

    impl: str | None = None

    def __post_init__(self):
        get_activation("silu")
        if self.impl is not None:
            check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply("silu", x, self.impl)
