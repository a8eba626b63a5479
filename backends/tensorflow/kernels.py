"""TensorFlow glue for gelulab's float32 kernels (core.numerics.kernels): the kernel namespace over tf, and each kernel
as a tf.custom_gradient function whose gradient is the f' kernel, itself a tf.custom_gradient function with the f''
kernel, so nested GradientTapes compose to second order (and the second-order graph of ReLU stays connected).

Each kernel runs as one tf.function(jit_compile=True) XLA computation, called through one concrete function per
dtype (XLA compiles it per shape on first use; inside a caller's tf.function it is a call of that function).
bfloat16/float16 are computed in float32 and rounded once; no global TensorFlow setting is changed.
"""
from __future__ import annotations

from functools import cache

import numpy as np
import tensorflow as tf

from gelulab.backends.tensorflow.activations import with_derivatives
from gelulab.core.activations import get_activation
from gelulab.core.numerics import kernels as K

NAME = "tensorflow"


def _i32(u: int) -> int:
    return u - (1 << 32) if u >= (1 << 31) else u


def _t(v):
    return v if tf.is_tensor(v) else tf.constant(np.float32(v))


class _Namespace:
    """The array operations core.numerics.kernels uses, in TensorFlow, float32 throughout."""

    @staticmethod
    def where(c, a, b):
        a, b = _t(a), _t(b)
        return tf.where(c, a, b)

    abs = staticmethod(tf.abs)
    rint = staticmethod(tf.math.round)  # round half to even

    # TFLite builtin ops only (TFLite has RIGHT_SHIFT but no bitwise and and no left shift): the low s bits of an
    # int32 are cleared by an arithmetic right shift by s and a product by 2^s (floor(i / 2^s) 2^s, negative i too),
    # and a shift left by 23 is a product by 2^23 (it wraps as the shift does), so a Keras model holding the kernel
    # converts to TFLite and runs there. The bits are those of i - floormod(i, 2^s) in fewer ops: XLA's optimized
    # exact-GELU value kernel has 162 elementwise ops instead of 202, its loop 165 x86 instructions per 8 floats
    # instead of 187, and it takes 0.88 of the CPU time (128 x 1024 float32, one thread; measured).
    @staticmethod
    def keep_bits(x, bits: int):
        i = tf.bitcast(_t(x), tf.int32)
        s = 24 - bits
        return tf.bitcast(tf.bitwise.right_shift(i, tf.constant(s, tf.int32)) * tf.constant(1 << s, tf.int32),
                          tf.float32)

    @staticmethod
    def pow2(k):
        return tf.bitcast((tf.cast(k, tf.int32) + 127) * tf.constant(1 << 23, tf.int32), tf.float32)

    @staticmethod
    def bits_equal(x, u: int):
        return tf.equal(tf.bitcast(x, tf.int32), tf.constant(_i32(u), tf.int32))


NS = _Namespace()


_NAMES = {tf.float32: "float32", tf.bfloat16: "bfloat16", tf.float16: "float16"}


def _compiled(act, order):
    """The order-th kernel of `act` as one XLA computation: a tf.function(jit_compile=True) called through its
    concrete function for tensors of any shape of the caller's dtype (traced once per dtype; XLA compiles once per
    shape). Calling the concrete function skips the tf.function's argument matching: 76 us a call instead of
    160-200 us, measured on 8 floats."""
    @tf.function(jit_compile=True, autograph=False)  # no Python control flow on tensors (as compile())
    def run(x):
        fn = K.kernel_function(act, order, _NAMES[x.dtype])
        if x.dtype == tf.float32:
            return fn(NS, x)
        return tf.cast(fn(NS, tf.cast(x, tf.float32)), x.dtype)

    concrete = {}

    def call(x):
        fn = concrete.get(x.dtype)
        if fn is None:
            fn = concrete[x.dtype] = run.get_concrete_function(tf.TensorSpec(None, x.dtype))
        return fn(x)

    return call


@cache
def kernel(key: str):
    """The kernel of catalogue entry `key` (ValueError if none): a callable on tf tensors of float32, bfloat16 or
    float16 (any shape), differentiable to second order through its own f' and f'' kernels."""
    act = get_activation(key)
    K.kernel_function(act, 0)  # ValueError now for an entry without a kernel
    k0, k1, k2 = (_compiled(act, o) for o in range(3))
    return with_derivatives(k0, k1, k2)
