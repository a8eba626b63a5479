"""The activations and their first two derivatives in mpmath, each at the caller's working precision.

Each function takes an mpmath number x and an order (0: value, 1: f', 2: f'') and returns an mpmath number.
Closed forms (Hendrycks & Gimpel 2016, arXiv:1606.08415; phi the standard normal density):
* exact GELU: f = x Phi(x) = x/2 erfc(-x/sqrt 2); f' = Phi(x) + x phi(x); f'' = phi(x)(2 - x^2)  (eq. 1).
* tanh form: f = x sigma(2u), u = sqrt(2/pi)(x + 0.044715 x^3), since 1/2 (1 + tanh u) = sigma(2u)  (sec. 2);
  f' = p + 2 x p q u', f'' = 4 p q u' + 2 x p q (u'' - 2 (p - q) u'^2), p = sigma(2u), q = sigma(-2u).
* sigmoid form: f = x sigma(k x), k = 1.702  (sec. 2); f' = p + k x p q, f'' = p q (2k + k^2 x (q - p)).
* SiLU: f = x sigma(x) (Elfwing et al. 2018, eq. 1); f' = p (1 + x q), f'' = p q (2 + x (q - p)), p = sigma(x),
  q = sigma(-x).
* ReLU: max(x, 0); ReLU'(0) = 0 by the frameworks' convention (torch, jax, tf).
sigma(z) = 1/(1 + e^-z) is evaluated as e^z/(1 + e^z) for z < 0, so nothing cancels even at mpmath precision.
The constants 0.044715 and 1.702 are taken as exact decimals, as the frameworks' formulas state them.
"""
from __future__ import annotations

import mpmath


def _sigma(z):
    if z < 0:
        e = mpmath.exp(z)
        return e / (1 + e)
    return 1 / (1 + mpmath.exp(-z))


def _phi(x):
    return mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)


def relu(x, order):
    """ReLU max(x, 0) (order 0), its derivative (order 1: 1 for x > 0, else 0) or 0 (order 2).
    x: mpmath number; order: 0, 1 or 2; returns an mpmath number."""
    if order == 0:
        return x if x > 0 else mpmath.mpf(0)
    if order == 1:
        return mpmath.mpf(1) if x > 0 else mpmath.mpf(0)
    return mpmath.mpf(0)


def gelu_none(x, order):
    """Exact GELU x Phi(x) (order 0), f' (1) or f'' (2) at x, closed forms of the module docstring (eq. 1).
    x: mpmath number; order: 0, 1 or 2; returns an mpmath number at the working precision."""
    if order == 0:
        return x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))
    if order == 1:
        return mpmath.erfc(-x / mpmath.sqrt(2)) / 2 + x * _phi(x)
    return _phi(x) * (2 - x * x)


def gelu_tanh(x, order):
    """tanh-form GELU x sigma(2u) (order 0), f' (1) or f'' (2) at x (module docstring, sec. 2).
    x: mpmath number; order: 0, 1 or 2; returns an mpmath number at the working precision."""
    c, a = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf("0.044715")
    u = c * (x + a * x**3)
    p, q = _sigma(2 * u), _sigma(-2 * u)
    if order == 0:
        return x * p
    u1 = c * (1 + 3 * a * x * x)
    if order == 1:
        return p + 2 * x * p * q * u1
    u2 = 6 * a * c * x
    return 4 * p * q * u1 + 2 * x * p * q * (u2 - 2 * (p - q) * u1 * u1)


def gelu_sigmoid(x, order):
    """sigmoid-form GELU x sigma(1.702 x) (order 0), f' (1) or f'' (2) at x (module docstring, sec. 2).
    x: mpmath number; order: 0, 1 or 2; returns an mpmath number at the working precision."""
    k = mpmath.mpf("1.702")
    p, q = _sigma(k * x), _sigma(-k * x)
    if order == 0:
        return x * p
    if order == 1:
        return p + k * x * p * q
    return p * q * (2 * k + k * k * x * (q - p))


def silu(x, order):
    """SiLU x sigma(x) (order 0), f' (1) or f'' (2) at x (module docstring; Elfwing et al. 2018, eq. 1).
    x: mpmath number; order: 0, 1 or 2; returns an mpmath number at the working precision."""
    p, q = _sigma(x), _sigma(-x)
    if order == 0:
        return x * p
    if order == 1:
        return p * (1 + x * q)
    return p * q * (2 + x * (q - p))
