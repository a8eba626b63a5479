"""gelulab's formulas where the value crosses the smallest normal t = 2^-126 (float32 and bfloat16).

The GELU forms and SiLU are x/2 + c x^2 (c > 0) next to 0, so at x = 2t and its neighbours the value is t, the
largest subnormal or a point a sliver away from the halfway point between them. Every backend's formula, eager and
compiled, is compared with mpmath (the functions written out here, at 400 bits) rounded to the dtype exactly, ties
to even: within 1 ULP where that value is normal; where it is subnormal, within 1 ULP or 0 on a platform that
flushes subnormals (its record's flushes_subnormals, core.parity.tolerances.overrides).
"""
from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.parity.regions import min_normal_crossing, region
from gelulab.core.parity.tolerances import overrides

KEYS = ("gelu_none", "gelu_tanh", "gelu_sigmoid", "silu")
DTYPES = ("float32", "bfloat16")
T = 2.0**-126  # the smallest normal of float32 and bfloat16
BITS = {"float32": (np.uint32, np.int64), "bfloat16": (np.uint16, np.int64)}


def _true(key: str, x: float):
    """f(x) of catalogue entry `key` by its definition, at 400 bits (the x^2 term is 2^-125 of x/2 here)."""
    with mpmath.workprec(400):
        x = mpmath.mpf(x)
        if key == "gelu_none":  # x Phi(x), Hendrycks & Gimpel 2016 eq. 1
            return x * mpmath.ncdf(x)
        if key == "gelu_tanh":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            return x / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf(0.044715) * x**3)))
        if key == "gelu_sigmoid":  # x sigmoid(1.702 x)
            return x / (1 + mpmath.exp(-mpmath.mpf(1.702) * x))
        return x / (1 + mpmath.exp(-x))  # SiLU, x sigmoid(x)


def _exact(v) -> Fraction:
    """The mpmath number v as an exact fraction (its sign, mantissa and exponent, not rounded again)."""
    sign, man, exp, _ = v._mpf_
    q = Fraction(man) * Fraction(2) ** exp
    return -q if sign else q


def _step(a: np.ndarray, dtype: str, k: int) -> np.ndarray:
    """The value k representable steps above finite a in `dtype` (monotone on the reals, through -0/+0)."""
    u, _ = BITS[dtype]
    ordinal = _ordinal(a, dtype) + k
    bits = np.where(ordinal >= 0, ordinal, (1 << (8 * np.dtype(u).itemsize - 1)) - ordinal).astype(u)
    return bits.view(get_dtype(dtype).np_dtype)


def _ordinal(a: np.ndarray, dtype: str) -> np.ndarray:
    """Consecutive integers for consecutive values of `dtype` (+0 and -0 both 0): the ULP scale."""
    u, i = BITS[dtype]
    b = np.asarray(a, dtype=get_dtype(dtype).np_dtype).view(u).astype(i)
    sign = 1 << (8 * np.dtype(u).itemsize - 1)
    return np.where(b >= sign, -(b - sign), b)


def _rounded(v, dtype: str) -> np.ndarray:
    """mpmath value v rounded to the nearest value of `dtype` (subnormals kept), ties to even, by exact distances."""
    c = np.array(float(v)).astype(get_dtype(dtype).np_dtype)
    cands = [_step(c, dtype, k) for k in (-1, 0, 1)]
    exact = _exact(v)

    def rank(a):
        return abs(Fraction(float(a)) - exact), int(np.asarray(a).view(BITS[dtype][0])) & 1

    return min(cands, key=rank)


def _flushes(backend) -> bool:
    return any(o.flush_subnormals and o.backend in (None, backend.name) and o.device in (None, backend.device)
               for o in overrides([backend.capabilities]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_crossing_inputs_are_in_the_parity_regions(dtype):
    inputs = min_normal_crossing(dtype)
    assert inputs.size == 18
    assert np.isin(inputs, region("tiny", dtype)).all()
    # x = 2t and its neighbour just below it, both signs: the inputs whose value is at or next to the halfway point
    below = {"float32": 2.0**-125 - 2.0**-149, "bfloat16": 2.0**-125 - 2.0**-133}[dtype]
    assert {2.0**-125, below, -(2.0**-125), -below} <= set(inputs.astype(np.float64).tolist())


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_reference_rounds_the_sliver_above_the_tie_to_the_smallest_normal(key, dtype):
    # f(x) = x/2 + c x^2 with c > 0: at x just below 2t, x/2 is the halfway point between the largest subnormal and
    # t, and the x^2 term takes f(x) above it for x > 0 (rounds to t) and below it for x < 0 (a subnormal)
    step = {"float32": 2.0**-149, "bfloat16": 2.0**-133}[dtype]  # the subnormal spacing
    x = 2 * T - step
    assert float(_rounded(_true(key, x), dtype)) == T
    assert float(_rounded(_true(key, -x), dtype)) == -(T - step)  # the largest subnormal


@pytest.mark.parametrize("mode", ["eager", pytest.param("compiled", marks=[pytest.mark.slow, pytest.mark.compile])])
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_formula_at_the_min_normal_crossing(backend, key, dtype, mode):
    if mode not in backend.modes:
        pytest.skip(f"backend {backend.name!r} has no {mode} mode")
    x = min_normal_crossing(dtype)
    fn = backend.function(key, "formula", 0, mode)
    y = backend.to_numpy(fn(backend.asarray(x)))
    assert y.dtype == x.dtype
    want = np.array([_rounded(_true(key, float(v)), dtype) for v in x.astype(np.float64)])
    ulps = np.abs(_ordinal(y, dtype) - _ordinal(want, dtype))
    ok = ulps <= 1
    subnormal = np.abs(want.astype(np.float64)) < T
    if _flushes(backend):
        ok |= subnormal & (y.astype(np.float64) == 0)
    bad = [(float(a), float(b), float(c)) for a, b, c in zip(x[~ok], y[~ok], want[~ok])]
    assert ok.all(), f"(x, got, correctly rounded) beyond 1 ULP: {bad}"
    at_t = np.abs(want.astype(np.float64)) == T  # a value that rounds to +-t is exactly that, on every backend
    assert at_t.sum() >= 1 and (y[at_t] == want[at_t]).all()
