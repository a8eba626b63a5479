"""High-precision reference values with mpmath, correctly rounded to a target dtype.

Each activation is evaluated with its own formula (an approximation against its own formula, never against exact
GELU) and its first and second derivatives, in closed form (the catalogue entry's `mp`, core.numerics.mp_forms), at
`PRECISION_BITS` bits of working precision; at +-inf the catalogue's `limits` are returned, and beyond an entry's
`far` point (where mpmath's erfc cannot take the argument) the limit on that side, as a tiny number of its sign.

The result is rounded to the target dtype correctly (round to nearest): the float64 rounding of the mpmath value
is moved to whichever neighbour in the target dtype is nearest the mpmath value, the distances computed exactly
(mpmath.fsub(..., exact=True)), so a value just above a tie (x/2 + x^2/sqrt(2 pi) for a subnormal x) rounds up. Results
are cached per (activation, order, x) so repeated grids cost nothing.
"""
from __future__ import annotations

import math
from functools import cache, lru_cache

import mpmath
import numpy as np

from gelulab.core.activations import get_activation
from gelulab.core.numerics.dtypes import get_dtype

PRECISION_BITS = 160  # ~48 decimal digits, plus -log2|x| bits for tiny |x| (see _reference_mp)

def reference_mp(key: str, order: int, x: float):
    """The exact value (as an mpmath mpf, or a Python float at +-inf/nan) of activation `key`'s `order`-th derivative.

    key: a catalogue key (core.activations.ACTIVATIONS); order: 0, 1 or 2; x: a float64 value.
    Raises ValueError for an unknown key or order.
    """
    return _reference_mp(key, order, x) if x == 0 else _reference_mp_cached(key, order, x)


@lru_cache(maxsize=1_000_000)
def _reference_mp_cached(key, order, x):
    return _reference_mp(key, order, x)


def _reference_mp(key, order, x):
    act = get_activation(key)
    if order not in (0, 1, 2):
        raise ValueError(f"order must be 0, 1 or 2, got {order!r}")
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        lo, hi = act.limits[order]
        return hi if x > 0 else lo
    # near 0, f(x) = x/2 + x^2/sqrt(2 pi) + ...: the x^2 term decides the rounding of x/2's ties, so the working
    # precision grows with -log2|x| (1234 bits for the smallest float64 subnormal)
    extra = max(0, -math.frexp(x)[1]) if x != 0 and math.isfinite(x) else 0
    with mpmath.workprec(PRECISION_BITS + extra):
        if x == 0 and order == 0:
            # mpmath has no signed zero: f(+-0) = +-0 where the entry keeps the sign of zero (GELU), else +0 (ReLU)
            return x if act.zero_sign else 0.0
        if act.far is not None and abs(x) > act.far:
            return _far(act.limits[order], x)
        return act.mp(mpmath.mpf(x), order)


_TINY = mpmath.mpf(2) ** -20000


def _far(limits: tuple, x: float):
    """The value beyond the entry's `far` point, where every neglected term is below 2^-1400 relative (the GELU
    forms' tails are below e^{-1700} past |x| = 1000, and mpmath's erfc cannot take such arguments): the limit on x's
    side, x itself for a linear tail (f = x (1 - tiny) -> x), and a tiny number of the limit's sign for a zero limit
    (f, f' and f'' approaching 0 from below round to -0.0 in every dtype)."""
    limit = limits[1] if x > 0 else limits[0]
    if math.isinf(limit):
        return mpmath.mpf(x)
    if limit == 0:
        return _TINY if math.copysign(1.0, limit) > 0 else -_TINY
    return mpmath.mpf(limit)


def _exact_distance(candidate: float, v):
    """|candidate - v| without rounding (abs() and unary minus would round to mpmath's working precision)."""
    d = mpmath.fsub(mpmath.mpf(candidate), v, exact=True)
    return d if d >= 0 else mpmath.fneg(d, exact=True)


@cache
def _format(dtype: str):
    """(significand bits, smallest normal, largest finite as mpmath numbers, a quarter of the smallest subnormal as
    an mpmath number: a float would underflow to 0) of a dtype."""
    fi = get_dtype(dtype).finfo
    return (int(fi.nmant) + 1, mpmath.mpf(float(fi.smallest_normal)), mpmath.mpf(float(fi.max)),
            mpmath.mpf(float(fi.smallest_subnormal)) / 4)


def round_to_dtype(v, dtype: str):
    """Round an mpmath value (or a float) to the nearest value of `dtype` (ties to even); returns a numpy scalar of
    that dtype.

    In the dtype's normal range the value is rounded once to the dtype's significand bits (mpmath's round-to-nearest,
    ties to even), which is exact in float64 and so in the dtype. Far below half the smallest subnormal the result is
    a zero of v's sign. Elsewhere (subnormal results, overflow) the nearest of float(v)'s neighbours in the dtype is
    chosen by exact distances: converting through float64 first would round twice."""
    dt = get_dtype(dtype).np_dtype
    if not isinstance(v, mpmath.mpf):
        return dt.type(v)
    bits, normal, largest, quarter_subnormal = _format(dtype)
    a = mpmath.fabs(v)  # rounded at the working precision: the comparisons below keep a margin for that
    if a < quarter_subnormal:  # an exact distance to a subnormal would cost millions of bits when v is e^-100000
        return dt.type(-0.0 if v < 0 else 0.0)
    if normal * 2 <= a <= largest / 2:
        return dt.type(mpmath.libmp.to_float(mpmath.libmp.mpf_pos(v._mpf_, bits, mpmath.libmp.round_nearest)))
    cand = np.array(float(v)).astype(dt)  # within one ULP of the correct rounding
    if not np.isfinite(cand.astype(np.float64)):
        return cand[()]
    best, best_err = cand, _exact_distance(float(cand), v)
    for direction in (-np.inf, np.inf):
        with np.errstate(over="ignore"):
            n = np.nextafter(cand, np.array(direction, dtype=dt))
        if not np.isfinite(np.float64(n)):
            continue
        err = _exact_distance(float(n), v)
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
