"""Error metrics: absolute, relative, and distance in ULPs of the target dtype.

ULP distance follows the usual definition (e.g. Goldberg 1991; the array-api and XLA test utilities): map each
float to an integer so that adjacent floats differ by one (sign-magnitude bits turned into two's complement
order), then subtract. +0 and -0 are the same point; two NaNs are distance 0; NaN against a number is infinite.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gelulab.core.numerics.dtypes import get_dtype

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def _ordered(a: np.ndarray) -> np.ndarray:
    """Map floats of one dtype to int64 keys with adjacent floats one apart (+0 and -0 both map to 0)."""
    nbits = a.dtype.itemsize * 8
    bits = a.view(_UINT[a.dtype.itemsize])
    negative = (bits >> np.array(nbits - 1, dtype=bits.dtype)) == 1
    magnitude = (bits & np.array((1 << (nbits - 1)) - 1, dtype=bits.dtype)).astype(np.int64)
    return np.where(negative, -magnitude, magnitude)


def ulp_distance(actual: np.ndarray, expected: np.ndarray, dtype: str) -> np.ndarray:
    """Number of representable `dtype` values between `actual` and `expected`, elementwise.

    actual, expected: arrays of the same shape, already of (or exactly representable in) `dtype`.
    Returns float64 array (inf where exactly one side is NaN; 0 where both are NaN or equal, +0 == -0).
    Raises ValueError for an unknown dtype or mismatched shapes.
    """
    dt = get_dtype(dtype).np_dtype
    a = np.asarray(actual).astype(dt)
    e = np.asarray(expected).astype(dt)
    if a.shape != e.shape:
        raise ValueError(f"shape mismatch: actual {a.shape} vs expected {e.shape}")
    ka, ke = _ordered(a), _ordered(e)
    with np.errstate(over="ignore"):
        same_sign = (ka >= 0) == (ke >= 0)
        d = np.where(
            same_sign, np.abs(ka - ke).astype(np.float64), np.abs(ka.astype(np.float64) - ke.astype(np.float64))
        )
    an, en = np.isnan(a.astype(np.float64)), np.isnan(e.astype(np.float64))
    d = np.where(an & en, 0.0, np.where(an | en, np.inf, d))
    return d


def abs_error(actual, expected) -> np.ndarray:
    """|actual - expected| in float64, elementwise; 0 where both are equal (same infinity or both NaN)."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        d = np.abs(a - e)
    both_nan = np.isnan(a) & np.isnan(e)
    return np.where((a == e) | both_nan, 0.0, np.where(np.isnan(d), np.inf, d))


def rel_error(actual, expected) -> np.ndarray:
    """|actual - expected| / |expected| in float64; 0 where equal, inf where expected == 0 and actual differs."""
    ad = abs_error(actual, expected)
    e = np.abs(np.asarray(expected, dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(ad == 0, 0.0, np.where(e == 0, np.inf, ad / np.where(e == 0, 1.0, e)))
    return np.where(np.isinf(e) & (ad != 0), np.inf, r)


@dataclass
class ErrorSummary:
    """Worst errors of one array against its reference.

    max_ulp: largest ULP distance in the target dtype (float, inf if a NaN appears where a number was due).
    max_abs / max_rel: largest absolute / relative error (float64).
    x_at_max_ulp / x_at_max_rel: the input where each maximum occurs (first one), or None for empty input.
    n: number of points compared.
    """

    max_ulp: float
    max_abs: float
    max_rel: float
    x_at_max_ulp: float | None
    x_at_max_rel: float | None
    n: int

    def as_dict(self) -> dict:
        """Plain dict for JSON (inf written as the string 'inf' by the report writer)."""
        return asdict(self)


def summarize(x, actual, expected, dtype: str) -> ErrorSummary:
    """Compare `actual` with the correctly rounded `expected` at inputs `x` (all 1-D, same length).

    Returns an ErrorSummary. Raises ValueError on shape mismatch or unknown dtype.
    """
    x = np.asarray(x, dtype=np.float64)
    u = ulp_distance(actual, expected, dtype)
    ab = abs_error(actual, expected)
    rl = rel_error(actual, expected)
    if x.size == 0:
        return ErrorSummary(0.0, 0.0, 0.0, None, None, 0)
    iu, ir = int(np.argmax(u)), int(np.argmax(rl))
    return ErrorSummary(float(u[iu]), float(ab.max()), float(rl[ir]), float(x[iu]), float(x[ir]), int(x.size))
