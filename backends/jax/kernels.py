"""JAX glue for gelulab's float32 kernels (core.numerics.kernels): the kernel namespace over jax.numpy and jax.lax, and
each kernel as a jax.jit-compiled function with its own derivative (jax.custom_jvp), composable to second order.

`kernel(key)(x)`: x a jax.Array of float32, bfloat16 or float16 (computed in float32, rounded once); its jvp is
t * f'(x) by the f' kernel, whose own jvp is t * f''(x); jax transposes them for reverse mode, so jax.grad,
jax.jvp, jax.jacfwd, jax.hessian and jax.grad(jax.grad(...)) all run the kernels. Each
callable is wrapped in jax.jit: eager callers get one fused XLA computation, and inside a user's jit it inlines.
No global setting is changed (in particular not jax_enable_x64): every value is float32.
"""
from __future__ import annotations

from functools import cache

import jax
import jax.numpy as jnp
import numpy as np

from gelulab.backends.jax.activations import with_derivatives
from gelulab.core.activations import get_activation
from gelulab.core.numerics import kernels as K

NAME = "jax"


class _Namespace:
    """The array operations core.numerics.kernels uses, in jax.numpy / jax.lax, float32 throughout."""

    @staticmethod
    def where(c, a, b):
        return jnp.where(
            c, jnp.float32(a) if isinstance(a, float) else a, jnp.float32(b) if isinstance(b, float) else b
        )

    abs = staticmethod(jnp.abs)
    rint = staticmethod(jnp.round)  # round half to even

    @staticmethod
    def keep_bits(x, bits: int):
        mask = np.uint32((0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF)
        u = jax.lax.bitcast_convert_type(jnp.asarray(x, jnp.float32), jnp.uint32)
        return jax.lax.bitcast_convert_type(u & mask, jnp.float32)

    @staticmethod
    def bits_equal(x, u: int):
        return jax.lax.bitcast_convert_type(x, jnp.uint32) == np.uint32(u)

    @staticmethod
    def pow2(k):
        e = (jnp.asarray(k, jnp.float32).astype(jnp.int32) + 127) << 23
        return jax.lax.bitcast_convert_type(e, jnp.float32)


NS = _Namespace()


def _in_float32(act, order):
    def run(x):
        fn = K.kernel_function(act, order, x.dtype.name)
        return fn(NS, x.astype(jnp.float32)).astype(x.dtype)

    return run


@cache
def kernel(key: str):
    """The kernel of catalogue entry `key` (ValueError if none) as a jitted function with custom jvp; see module."""
    act = get_activation(key)
    K.kernel_function(act, 0)  # ValueError now for an entry without a kernel
    f0, f1, f2 = (_in_float32(act, o) for o in range(3))

    d2 = jax.jit(f2)
    f = with_derivatives(f0, f1, d2)
    fn = jax.jit(f)
    fn.derivatives = (jax.jit(f.d1), d2)
    return fn
