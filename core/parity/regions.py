"""Named input regions per dtype, the parity suite's generators (after PyTorch OpInfo's normal/small/large/extremal
sample generators, torch/testing/_internal/opinfo/core.py).

Every region returns a 1-D numpy array of the target dtype (values exactly representable, duplicates removed,
sorted). Add a region by adding a function to REGIONS; the tests and the report pick it up.
"""
from __future__ import annotations

import math
from functools import cache

import mpmath
import numpy as np

from gelulab.core.activations import ACTIVATIONS
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.parity.reference import reference_mp


def _as(values, dtype: str) -> np.ndarray:
    dt = get_dtype(dtype).np_dtype
    a = np.asarray(values, dtype=np.float64).astype(dt)
    a = a[np.isfinite(a.astype(np.float64))] if a.size else a
    return np.unique(a)


def grid(dtype: str) -> np.ndarray:
    """A dense grid over [-10, 10]: 4001 points (spacing 0.005) rounded to the dtype."""
    return _as(np.linspace(-10.0, 10.0, 4001), dtype)


@cache
def underflow_point(key: str, dtype: str) -> float | None:
    """The x < 0 below which catalogue entry `key`'s value rounds to -0 in `dtype` (|f(x)| < smallest subnormal / 2),
    found by bisection on the mpmath reference over [-1e4, -3]; None when the entry has no vanishing negative tail
    (ReLU is 0 already at -3). float32 / float64: exact GELU about -14.4 / -38.6, the tanh form -10.8 / -21.6,
    x sigmoid(1.702 x) -63.5 / -441.4, x sigmoid(x) -108.7 / -751.8."""
    half_tiny = mpmath.mpf(float(get_dtype(dtype).finfo.smallest_subnormal)) / 2

    def small(x):
        return abs(reference_mp(key, 0, x)) < half_tiny

    lo, hi = -1e4, -3.0
    if small(hi) or not small(lo):
        return None
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if small(mid) else (lo, mid)
    return lo


def negative_tail(dtype: str) -> np.ndarray:
    """For each catalogue entry with a vanishing negative tail, 600 points (linear) from 2 % past the point where its
    true value underflows in `dtype` (underflow_point) up to -3, plus 200 points on each interval of every entry's
    `dense_tail` (exact GELU's erfc and the tanh form's sigmoid become subnormal in float64 before the result does)."""
    parts = []
    for key, act in ACTIVATIONS.items():
        u = underflow_point(key, dtype)
        if u is not None:
            parts.append(np.linspace(1.02 * u, -3.0, 600))
        parts += [np.linspace(lo, hi, 200) for lo, hi in act.dense_tail]
    return _as(np.concatenate(parts), dtype)


def min_normal_crossing(dtype: str) -> np.ndarray:
    """The inputs whose value crosses the smallest normal t, both signs: 2t and its 4 neighbours on each side. The
    GELU forms and SiLU are x/2 + O(x^2) there, so the value at the neighbour just below 2t is within a sliver of the
    halfway point between t and the largest subnormal (f(x) rounds to t for x > 0, to a subnormal for x < 0)."""
    dt = get_dtype(dtype).np_dtype
    two_t = np.array(2 * float(get_dtype(dtype).finfo.smallest_normal), dtype=dt)
    vals, lo, hi = [two_t], two_t, two_t
    for _ in range(4):
        lo, hi = np.nextafter(lo, np.array(0, dtype=dt)), np.nextafter(hi, np.array(np.inf, dtype=dt))
        vals += [lo, hi]
    mags = [float(v) for v in vals]
    return _as(mags + [-v for v in mags], dtype)


def tiny(dtype: str) -> np.ndarray:
    """Tiny |x|, both signs: 200 log-spaced magnitudes from the smallest subnormal to 1e-3, the smallest subnormal
    and normal, and the inputs whose value crosses the smallest normal (min_normal_crossing)."""
    fi = get_dtype(dtype).finfo
    lo = math.log10(float(fi.smallest_subnormal))
    mags = np.logspace(lo, -3.0, 200)
    return _as(np.concatenate([mags, -mags, [float(fi.smallest_subnormal), float(fi.smallest_normal)],
                               min_normal_crossing(dtype).astype(np.float64)]), dtype)


def large(dtype: str) -> np.ndarray:
    """Large |x| up to a tenth of the dtype's maximum: 200 log-spaced magnitudes from 10, both signs."""
    hi = math.log10(float(get_dtype(dtype).finfo.max) / 10)
    mags = np.logspace(1.0, hi, 200)
    return _as(np.concatenate([mags, -mags]), dtype)


def near_max(dtype: str) -> np.ndarray:
    """The dtype's largest finite values and their negatives: max, its 8 lower neighbours, max/2, max/4."""
    dt = get_dtype(dtype).np_dtype
    top = np.array(get_dtype(dtype).finfo.max, dtype=dt)
    vals = [top]
    for _ in range(8):
        vals.append(np.nextafter(vals[-1], np.array(0, dtype=dt)))
    vals = [float(v) for v in vals] + [float(top) / 2, float(top) / 4]
    return _as(vals + [-v for v in vals], dtype)


def specials(dtype: str) -> np.ndarray:
    """+0, -0, +inf, -inf, nan (in this order; not deduplicated, not sorted)."""
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float64).astype(get_dtype(dtype).np_dtype)


# a far-tail float32 point: torch eager returns -0.0 and compiled ~-1.65e-7 (true -8.665e-8)
FAR_TAIL_POINT = -5.533906936645508


def cases(dtype: str) -> np.ndarray:
    """Points named in the upstream fault reports and the article: -10, -8, -6, -5.5, -5, -4, -1, -0.7518 (GELU's
    minimum), 0, 1, 2, -20, 148, 256, and -5.533906936645508 repeated 64 times to fill a SIMD vector (not
    deduplicated)."""
    named = [-20.0, -10.0, -8.0, -7.0, -6.0, -5.5, -5.0, -4.0, -1.0, -0.7518, 0.0, 1.0, 2.0, 148.0, 256.0]
    a = np.asarray(named + [FAR_TAIL_POINT] * 64, dtype=np.float64).astype(get_dtype(dtype).np_dtype)
    return a[np.isfinite(a.astype(np.float64))]


REGIONS = {
    "grid": grid,
    "negative_tail": negative_tail,
    "tiny": tiny,
    "large": large,
    "near_max": near_max,
    "specials": specials,
    "cases": cases,
}


def region(name: str, dtype: str) -> np.ndarray:
    """Inputs of region `name` for `dtype`; raises ValueError for an unknown region or dtype."""
    if name not in REGIONS:
        raise ValueError(f"unknown region {name!r}; expected one of {list(REGIONS)}")
    return REGIONS[name](dtype)
