"""numpy's array operations for gelulab's float32 kernels (core.numerics.kernels), and the kernels as numpy callables.

numpy has no autodiff: each kernel callable carries its derivative as the attribute `d` (value -> f' -> f''),
which backends/numpy/activations.derivative follows.
"""
from __future__ import annotations

import numpy as np

from gelulab.core.activations import get_activation
from gelulab.core.numerics import kernels as K

NAME = "numpy"


def where(c, a, b):
    """np.where(c, a, b) as float32 (Python-float branches stay float32)."""
    return np.where(c, a, b).astype(np.float32, copy=False)


def abs(x):  # the namespace mirrors the framework's name
    """|x| elementwise (np.abs)."""
    return np.abs(x)


def rint(x):
    """Round to the nearest integer, ties to even (np.rint), float32 in and out."""
    return np.rint(x)


def keep_bits(x, bits: int):
    """x with only its `bits` leading significant bits (the low 24 - bits mantissa bits cleared), float32."""
    mask = np.uint32((0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF)
    return (np.asarray(x, np.float32).view(np.uint32) & mask).view(np.float32)


def pow2(k):
    """2**k for integer-valued float32 k in [-126, 127], built from its exponent bits (exact)."""
    e = (np.asarray(k, np.float32).astype(np.int32) + 127) << 23
    return e.astype(np.int32).view(np.float32)


def bits_equal(x, u: int):
    """Whether x has the bit pattern u (elementwise)."""
    return np.asarray(x, np.float32).view(np.uint32) == np.uint32(u)


def to_float32(x):
    """x as float32 (bfloat16/float16 widen exactly)."""
    return np.asarray(x).astype(np.float32)


def from_float32(y, like):
    """y (float32) rounded once to the dtype of `like`."""
    return np.asarray(y, np.float32).astype(np.asarray(like).dtype)


def _callable(act, order: int):
    def f(x):
        x = np.asarray(x)
        if x.dtype == np.float64:
            raise TypeError("float64 is not a kernel dtype")
        fn = K.kernel_function(act, order, x.dtype.name)
        with np.errstate(all="ignore"):
            return from_float32(fn(NS, to_float32(x)), x)

    return f


class _Namespace:
    where = staticmethod(where)
    abs = staticmethod(abs)
    rint = staticmethod(rint)
    keep_bits = staticmethod(keep_bits)
    pow2 = staticmethod(pow2)
    bits_equal = staticmethod(bits_equal)


NS = _Namespace()


def kernel(key: str):
    """The float32 kernel of catalogue entry `key` as a numpy callable (float32/bfloat16/float16 in, same dtype
    out), with `.d` its derivative callable and `.d.d` the second derivative. ValueError for a key without kernel."""
    act = get_activation(key)
    K.kernel_function(act, 0)  # ValueError now for an entry without a kernel
    f0, f1, f2 = (_callable(act, o) for o in range(3))
    f1.d = f2
    f0.d = f1
    return f0
