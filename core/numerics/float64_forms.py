"""The activations and their first derivatives in float64 numpy, by closed forms that do not cancel: the fast
oracle of `gelulab verify` (experiments/verify/oracle.py), which trusts them to a relative 2^-40 and checks that
bound against mpmath on a sample of every run.

Each function takes a float64 numpy array x and an order (0: value, 1: f') and returns a float64 array (NaN where
undefined); callers silence numpy's floating-point warnings. numpy and scipy are imported at the first call, so that
the catalogue (core.activations), which names these functions, imports neither. Closed forms (Hendrycks & Gimpel
2016, arXiv:1606.08415), with scipy.special's erfc and expit (measured relative error below 2^-50):
* exact GELU: x/2 erfc(-x/sqrt 2) and erfc(-x/sqrt 2)/2 + x phi(x)  (eq. 1).
* x sigma(z(x)) forms: x p and p + x z' p q, p = expit(z), q = expit(-z); z = 1.702 x (sigmoid form),
  z = 2 sqrt(2/pi)(x + 0.044715 x^3) (tanh form, since 1/2 (1 + tanh u) = sigma(2u)), z = x (SiLU; Elfwing et al.
  2018). 1.702 and 0.044715 as the frameworks state them.
* ReLU: max(x, 0) and 1 for x > 0, else 0 (the frameworks' ReLU'(0) = 0).
"""
from __future__ import annotations

import math

SQRT_HALF = math.sqrt(0.5)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _check(order):
    if order not in (0, 1):
        raise ValueError(f"order {order!r}: the float64 closed forms cover orders 0 and 1")


def relu(x, order):
    """max(x, 0) (order 0) or its derivative 1 for x > 0, else 0 (order 1); x: float64 array."""
    import numpy as np

    _check(order)
    return np.where(x > 0, x, 0.0) if order == 0 else np.where(x > 0, 1.0, 0.0)


def gelu_none(x, order):
    """x Phi(x) = x/2 erfc(-x/sqrt 2) (order 0) or Phi(x) + x phi(x) (order 1); x: float64 array."""
    import numpy as np
    import scipy.special as sp

    _check(order)
    phi_cdf = 0.5 * sp.erfc(-x * SQRT_HALF)
    if order == 0:
        return x * phi_cdf
    return phi_cdf + x * (INV_SQRT_2PI * np.exp(-0.5 * x * x))


def _x_sigma(x, order, z, zp):
    """x sigma(z) (order 0) or p + (x z') p q (order 1); z the array z(x), zp a function giving z'(x)."""
    import scipy.special as sp

    _check(order)
    p = sp.expit(z)
    if order == 0:
        return x * p
    return p + (x * zp(x)) * (p * sp.expit(-z))


def silu(x, order):
    """x sigma(x) (order 0) or its derivative (order 1); x: float64 array."""
    import numpy as np

    return _x_sigma(x, order, x, np.ones_like)


def gelu_sigmoid(x, order):
    """x sigma(1.702 x) (order 0) or its derivative (order 1); x: float64 array."""
    import numpy as np

    return _x_sigma(x, order, 1.702 * x, lambda v: np.full_like(v, 1.702))


def gelu_tanh(x, order):
    """x sigma(2 sqrt(2/pi)(x + 0.044715 x^3)) (order 0) or its derivative (order 1); x: float64 array."""
    return _x_sigma(x, order, 2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3),
                    lambda v: 2 * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * v * v))
