"""JAX's activation callables that gelulab.identify is measured on (core.contracts.contract.Subjects): jax.nn's GELU
(its default approximate=True, the tanh form, and approximate=False), ReLU and SiLU. With jax_enable_x64 off, as a
user has it, jax is probed in float32 only.
"""
from __future__ import annotations

import functools

import jax


def subjects() -> dict:
    """{expression: callable}, each key the Python expression `gelulab identify` evaluates to that callable."""
    return {
        "jax.nn.gelu": jax.nn.gelu,
        "functools.partial(jax.nn.gelu, approximate=False)": functools.partial(jax.nn.gelu, approximate=False),
        "jax.nn.relu": jax.nn.relu,
        "jax.nn.silu": jax.nn.silu,
    }
