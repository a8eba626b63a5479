"""gelulab's activations as flax.linen modules.

    from gelulab.layers.flax import GELU
    model = flax.linen.Sequential([flax.linen.Dense(16), GELU(approximate="tanh"), flax.linen.Dense(1)])

They have no parameters and run under jax.jit, grad and vmap. In a flax.nnx model no layer is needed: call the
function `gelulab.gelu(x, approximate=...)` in `__call__` (it dispatches on the jax array, tracers included).
"""
from __future__ import annotations

import flax.linen as nn

from gelulab.api import apply
from gelulab.core.activations import DEFAULT_IMPL, activation_key, check_impl, check_mode, get_activation


class Activation(nn.Module):
    """Any catalogue entry (core.activations.ACTIVATIONS) as an elementwise linen module.

    key: catalogue key; impl: "kernel" (default), "formula" or "builtin" (jax.nn's own function). Input: a floating jax array of any
    shape (float64 only where the caller enabled jax_enable_x64); output: the same shape and dtype. Raises
    ValueError for an unknown key or impl when the module is constructed.
    """

    key: str
    impl: str = DEFAULT_IMPL

    def __post_init__(self):
        get_activation(self.key)
        check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        # the default "kernel" takes the formula for an entry without a kernel (Activation.impl_for), as the
        # torch and Keras layers do
        return apply(self.key, x, get_activation(self.key).impl_for(self.impl))


class GELU(nn.Module):
    """GELU: approximate "none" (exact x Phi(x), Hendrycks & Gimpel 2016 eq. 1), "tanh" (sec. 2) or "sigmoid"
    (x sigmoid(1.702 x), sec. 2), an explicit string (jax.nn.gelu's bool defaults to tanh; here a bool or None
    raises ValueError); impl "kernel" (default), "formula" or "builtin"."""

    approximate: str = "none"
    impl: str = DEFAULT_IMPL

    def __post_init__(self):
        check_mode(self.approximate)
        check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply(activation_key("gelu", self.approximate), x, self.impl)


class ReLU(nn.Module):
    """ReLU max(x, 0), impl "kernel" (default), "formula" or "builtin" (jax.nn.relu)."""

    impl: str = DEFAULT_IMPL

    def __post_init__(self):
        check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply("relu", x, self.impl)


class SiLU(nn.Module):
    """SiLU x sigmoid(x), impl "kernel" (default), "formula" or "builtin" (jax.nn.silu). Raises ValueError when the catalogue has no
    "silu" entry."""

    impl: str = DEFAULT_IMPL

    def __post_init__(self):
        get_activation("silu")
        check_impl(self.impl)
        super().__post_init__()

    def __call__(self, x):
        return apply("silu", x, self.impl)
