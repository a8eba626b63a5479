"""The fast oracle of `gelulab verify`: correctly rounded values from a float64 evaluation with an error bound, and
mpmath (core.parity.reference) wherever that bound cannot decide the rounding.

Each activation and its first derivative are evaluated in float64 by the closed forms of its catalogue entry's
`float64` field (core.numerics.float64_forms: scipy.special.erfc and expit, which do not cancel; Hendrycks & Gimpel
2016, arXiv:1606.08415): x/2 erfc(-x/sqrt 2) and erfc(-x/sqrt 2)/2 + x phi(x) for exact GELU, x p and p + x z' p q
(p = expit(z), q = expit(-z)) for the sigmoid forms. Their relative error is taken to be at most
FLOAT64_BOUND = 2^-40, 8 times the largest error measured against mpmath on 512 spread float32 inputs per form
and order (2^-43), and `check_bound` verifies it against mpmath on a sample of every run. The float64 value v decides
the rounding to the target dtype unless the interval v (1 +- FLOAT64_BOUND) contains a rounding midpoint of that dtype
(about one input in 2^16 for float32); those inputs, every input within ROOT_WINDOW of the zero of f' (the entry's
kernel.d1_root, where p + x z' p q cancels), zeros, infinities and NaNs go to mpmath, which is correctly rounded
(core.parity.reference). Below |x| = 2^-60 the value of an entry with `half_at_zero` (f = x/2 + c x^2, c > 0: the GELU
forms and SiLU) is x/2 rounded, ties (subnormal halves) broken towards the side of the x^2 term.
"""
from __future__ import annotations

import math

import numpy as np

from gelulab.core.activations import get_activation
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.parity.reference import reference

FLOAT64_BOUND = 2.0**-40
TINY_X = 2.0**-60
ROOT_WINDOW = 2.0**-8  # |x - x0| below this goes to mpmath (x0 the zero of f')


def float64_value(key: str, order: int, x: np.ndarray) -> np.ndarray:
    """f (order 0) or f' (order 1) of catalogue entry `key` at float64 x, in float64 (NaN where undefined): the
    entry's `float64` closed form (core.numerics.float64_forms). Raises ValueError for an order other than 0 or 1 or an
    entry without a float64 closed form."""
    act = get_activation(key)
    if order not in (0, 1):
        raise ValueError(f"order {order!r}: the float64 oracle covers orders 0 and 1")
    if act.float64 is None:
        raise ValueError(f"no float64 closed form for {key!r} (its catalogue entry has float64=None)")
    with np.errstate(all="ignore"):
        return act.float64(x, order)


def _root(key: str) -> float | None:
    """x0 < 0 with f'(x0) = 0 (minus the entry's kernel d1_root, core/numerics/kernel_fit.py), None where there is
    none."""
    kern = get_activation(key).kernel
    return None if kern is None or kern.d1_root is None else -kern.d1_root


def _neighbours(r: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
    """The next representable values below and above r (arrays of `dtype`), as float64."""
    u = {2: np.uint16, 4: np.uint32}[r.dtype.itemsize]
    nbits = r.dtype.itemsize * 8
    bits = r.view(u).astype(np.int64)
    sign = bits >> (nbits - 1)
    mag = bits & ((1 << (nbits - 1)) - 1)
    key = np.where(sign == 1, -mag, mag)

    def back(k):
        m = np.abs(k)
        b = np.where(k < 0, m | (1 << (nbits - 1)), m).astype(u)
        return b.view(r.dtype).astype(np.float64)

    return back(key - 1), back(key + 1)


def expected(key: str, order: int, x: np.ndarray, dtype: str) -> tuple[np.ndarray, int]:
    """Correctly rounded f^(order)(x) in `dtype` for an array x of that dtype: (values, number sent to mpmath)."""
    dt = get_dtype(dtype).np_dtype
    x64 = x.astype(np.float64)
    v = float64_value(key, order, x64)
    r = v.astype(dt)
    r64 = r.astype(np.float64)
    lo, hi = _neighbours(r, dt)
    with np.errstate(all="ignore"):
        half_gap = np.where(v >= r64, hi - r64, r64 - lo) * 0.5
        undecided = np.abs(v - r64) >= half_gap - FLOAT64_BOUND * np.abs(v)
    undecided |= ~np.isfinite(x64) | (x64 == 0) | ~np.isfinite(v) | np.isnan(half_gap)
    x0 = _root(key) if order == 1 else None
    if x0 is not None:
        undecided |= np.abs(x64 - x0) < ROOT_WINDOW
    xnan = np.isnan(x64)
    r[xnan] = np.nan  # every form maps NaN to NaN (ReLU'(NaN) is left uncompared by the caller)
    if order == 0 and get_activation(key).half_at_zero:
        # |x| < 2^-60: f(x) = x/2 + c x^2 with c > 0 (half_at_zero), c x^2 far below an ULP of x/2, so the
        # rounding is that of x/2 except where x/2 is a tie (a subnormal half of an odd x): then the true value
        # lies just above the midpoint and rounds to the larger neighbour (up for x > 0, towards 0 for x < 0)
        small = (np.abs(x64) < TINY_X) & (x64 != 0)
        half = 0.5 * x64[small]
        rs = half.astype(dt)
        _lo_s, hi_s = _neighbours(rs, dt)
        rs64 = rs.astype(np.float64)
        tie = rs64 != half
        up = np.where(rs64 < half, hi_s, rs64)  # the larger of the two neighbours of the tie
        rs = np.where(tie, up, rs64).astype(dt)
        r[small] = rs
        undecided[small] = False
    idx = np.flatnonzero(undecided & ~xnan)
    if idx.size:
        r[idx] = reference(key, x[idx], dtype, order)
    return r, int(idx.size)


def check_bound(key: str, order: int, x: np.ndarray, n: int = 64, seed: int = 0) -> float:
    """Largest relative error of float64_value against mpmath on n sampled finite nonzero inputs of x (outside
    the root window), in units of FLOAT64_BOUND; a value >= 1 means the bound is wrong for this input set."""
    from gelulab.core.parity.reference import reference_mp

    x64 = x.astype(np.float64)
    ok = np.isfinite(x64) & (x64 != 0)
    x0 = _root(key) if order == 1 else None
    if x0 is not None:
        ok &= np.abs(x64 - x0) >= ROOT_WINDOW
    cand = x64[ok]
    if cand.size == 0:
        return 0.0
    pick = np.random.default_rng(seed).choice(cand, size=min(n, cand.size), replace=False)
    v = float64_value(key, order, pick)
    worst = 0.0
    for xi, vi in zip(pick, v):
        t = float(reference_mp(key, order, float(xi)))
        if t != 0 and math.isfinite(t) and abs(t) > 1e-300:
            worst = max(worst, abs(vi - t) / abs(t) / FLOAT64_BOUND)
    return worst
