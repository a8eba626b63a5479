"""High-precision reference values with mpmath, correctly rounded to a target dtype.

Each activation is evaluated with its own formula (an approximation against its own formula, never against exact
GELU) and its first and second derivatives, in closed form, at `PRECISION_BITS` bits of working precision:
* exact GELU: f = x Phi(x) = x/2 erfc(-x/sqrt 2); f' = Phi(x) + x phi(x); f'' = phi(x)(2 - x^2)
  (Hendrycks & Gimpel 2016, eq. 1; phi the standard normal density).
* tanh form: f = x sigma(2u), u = sqrt(2/pi)(x + 0.044715 x^3); derivatives by the chain rule (core.formulas).
* sigmoid form: f = x sigma(1.702 x).
* ReLU: max(x, 0); ReLU'(0) = 0 by the frameworks' convention.
sigma(z) = 1/(1 + e^-z) is evaluated as e^z/(1 + e^z) for z < 0, so nothing cancels even at mpmath precision.

The result is rounded to the target dtype correctly (round to nearest): the float64 rounding of the mpmath value
is moved to whichever neighbour in the target dtype is nearest the mpmath value. Results are cached per
(activation, order, x) so repeated grids cost nothing.
"""
from __future__ import annotations

import math
from functools import lru_cache

import mpmath
import numpy as np

from core.dtypes import get_dtype

PRECISION_BITS = 160  # ~48 decimal digits; every reference value here is far from a rounding tie at this precision

_mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp


def _sigma(z):
    if z < 0:
        e = mpmath.exp(z)
        return e / (1 + e)
    return 1 / (1 + mpmath.exp(-z))


def _phi(x):
    return mpmath.exp(-x * x / 2) / mpmath.sqrt(2 * mpmath.pi)


def _relu(x, order):
    if order == 0:
        return x if x > 0 else mpmath.mpf(0)
    if order == 1:
        return mpmath.mpf(1) if x > 0 else mpmath.mpf(0)
    return mpmath.mpf(0)


def _gelu_none(x, order):
    if order == 0:
        return x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))
    if order == 1:
        return mpmath.erfc(-x / mpmath.sqrt(2)) / 2 + x * _phi(x)
    return _phi(x) * (2 - x * x)


def _gelu_tanh(x, order):
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


def _gelu_sigmoid(x, order):
    k = mpmath.mpf("1.702")
    p, q = _sigma(k * x), _sigma(-k * x)
    if order == 0:
        return x * p
    if order == 1:
        return p + k * x * p * q
    return p * q * (2 * k + k * k * x * (q - p))


MP_FUNCTIONS = {"relu": _relu, "gelu_none": _gelu_none, "gelu_tanh": _gelu_tanh, "gelu_sigmoid": _gelu_sigmoid}

_LIMITS = {
    # (activation key, order) -> (value at -inf, value at +inf), the mathematical limits
    "relu": {0: (0.0, math.inf), 1: (0.0, 1.0), 2: (0.0, 0.0)},
    "gelu_none": {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (0.0, 0.0)},
    "gelu_tanh": {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (0.0, 0.0)},
    "gelu_sigmoid": {0: (-0.0, math.inf), 1: (-0.0, 1.0), 2: (0.0, 0.0)},
}


def reference_mp(key: str, order: int, x: float):
    """The exact value (as an mpmath mpf, or a Python float at +-inf/nan) of activation `key`'s `order`-th derivative.

    key: catalogue key ("relu", "gelu_none", "gelu_tanh", "gelu_sigmoid"); order: 0, 1 or 2; x: a float64 value.
    Raises ValueError for an unknown key or order.
    """
    return _reference_mp(key, order, x) if x == 0 else _reference_mp_cached(key, order, x)


@lru_cache(maxsize=1_000_000)
def _reference_mp_cached(key, order, x):
    return _reference_mp(key, order, x)


def _reference_mp(key, order, x):
    if key not in MP_FUNCTIONS:
        raise ValueError(f"unknown activation {key!r}; expected one of {sorted(MP_FUNCTIONS)}")
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order!r}")
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        lo, hi = _LIMITS[key][order]
        return hi if x > 0 else lo
    with mpmath.workprec(PRECISION_BITS):
        if x == 0 and order == 0:
            return 0.0 if key == "relu" else x  # GELU(+-0) = +-0 (mpmath has no signed zero); ReLU(+-0) = +0
        if key != "relu" and abs(x) > FAR:
            return _far(x, order)
        return MP_FUNCTIONS[key](mpmath.mpf(x), order)


FAR = 1e3  # past |x| = 1000 every GELU form equals its limit to far below any dtype's resolution


def _far(x: float, order: int):
    """GELU forms for |x| > FAR, where the tail terms are below e^{-1700} (mpmath's erfc cannot take such
    arguments): f = x (1 - tiny) -> x for x > 0; f, f' and f'' are tiny negative numbers otherwise (f'' < 0 on
    both sides), which round to -0.0 in every dtype."""
    neg_tiny = -mpmath.mpf(2) ** -20000
    if x > 0 and order == 0:
        return mpmath.mpf(x)
    if x > 0 and order == 1:
        return 1 - mpmath.mpf(2) ** -20000
    return neg_tiny


def round_to_dtype(v, dtype: str):
    """Round an mpmath value (or a float) to the nearest value of `dtype`; returns a numpy scalar of that dtype."""
    dt = get_dtype(dtype).np_dtype
    if not isinstance(v, mpmath.mpf):
        return dt.type(v)
    cand = np.array(float(v)).astype(dt)  # within one ULP of the correct rounding
    if not np.isfinite(cand.astype(np.float64)):
        return cand[()]
    best, best_err = cand, abs(mpmath.mpf(float(cand)) - v)
    for direction in (-np.inf, np.inf):
        with np.errstate(over="ignore"):
            n = np.nextafter(cand, np.array(direction, dtype=dt))
        if not np.isfinite(np.float64(n)):
            continue
        err = abs(mpmath.mpf(float(n)) - v)
        if err < best_err:
            best, best_err = n, err
    out = np.array(best, dtype=dt)
    if out == 0 and v < 0:
        out = np.array(-0.0, dtype=dt)
    return out[()]


def reference(key: str, x: np.ndarray, dtype: str, order: int = 0) -> np.ndarray:
    """Correctly rounded reference of activation `key` (derivative `order`) at every element of `x`.

    key: catalogue key; x: array whose values are exactly representable in `dtype` (any shape);
    dtype: target dtype name; order: 0 (value), 1 (first derivative) or 2.
    Returns a numpy array of `dtype` with x's shape. Raises ValueError for unknown key, dtype or order.
    """
    dt = get_dtype(dtype).np_dtype
    x64 = np.asarray(x).astype(np.float64)
    out = np.empty(x64.shape, dtype=dt)
    flat = out.reshape(-1)
    for i, xi in enumerate(x64.reshape(-1)):
        xi = float(xi)
        # the caches key on ==, where 0.0 == -0.0: signed zeros bypass them
        flat[i] = round_to_dtype(_reference_mp(key, order, xi), dtype) if xi == 0 else _rounded(key, order, xi, dtype)
    return out


@lru_cache(maxsize=2_000_000)
def _rounded(key, order, x, dtype):
    return round_to_dtype(_reference_mp_cached(key, order, x), dtype)


def reference_float(key: str, x: float, order: int = 0) -> float:
    """The reference value as a Python float (float64 rounding), for quick checks and plots."""
    v = reference_mp(key, order, float(x))
    return float(v)
