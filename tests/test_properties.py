"""Hypothesis properties of the activations, per backend and implementation (derandomized in CI, see conftest):

* the odd part is the identity, f(x) - f(-x) = x, for every catalogue entry of the form x F(x) with
  F(x) + F(-x) = 1 (exact GELU: Phi; the tanh and sigmoid forms: sigma(2u) and sigma(1.702 x); ReLU: the step),
  the entries chosen by checking the identity in mpmath; ReLU's holds exactly;
* each approximation stays within its known distance of exact GELU: |tanh form - exact| <= 4.73e-4 and
  |sigmoid form - exact| <= 2.03e-2 absolutely (the maxima, computed with mpmath, are 4.7324e-4 at
  x = 2.699 and 2.03349e-2 at x = -2.2704, so the bounds are those values rounded up in their 4th digit);
* every entry is monotonic above its largest critical point (GELU's minimum at x = -0.7518), in the direction its
  derivative has there (non-decreasing for every entry today), both found with mpmath from the entry's mp form.

Every property evaluates f once per example, on one shape, LENGTH values: the values it needs (the drawn list, or
the drawn list followed by its negation) repeated cyclically, and is asserted at every position. A new shape costs a
compile (JAX's eager mode compiles every primitive once per shape and dtype, TensorFlow's kernels are XLA
computations compiled per shape), so a drawn length of its own would cost one per example; one shape costs one per
entry, implementation and dtype. Every value lies among the first 2 MAX_SIZE positions, and a list of up to 15
values lies again, whole, among the last 15: the positions past the last multiple of 16 or 32, which a vectorized
elementwise loop working in such chunks (8 or 16 float32 lanes, unrolled twice) leaves to its scalar remainder,
where short lists were evaluated when they were arrays of their own length.
"""
from __future__ import annotations

import math
from functools import cache

import mpmath
import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

from gelulab.core.activations import ACTIVATIONS, IMPLS, get_activation

DTYPES = {"float64": np.float64, "float32": np.float32}
MAX_SIZE = 64  # the longest list drawn
LENGTH = 2 * MAX_SIZE + 15  # the one shape evaluated (module docstring)


def _arrays(lo, hi, dtype):
    width = 64 if dtype == "float64" else 32
    lo, hi = (float(DTYPES[dtype](v)) for v in (lo, hi))  # hypothesis wants bounds exact in the width
    return st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=width), min_size=1,
                    max_size=MAX_SIZE)


def _f(backend, key, impl, values, dtype):
    """f at `values` (at most 2 MAX_SIZE), repeated cyclically to LENGTH values in `dtype`: (f, x) as float64
    arrays of LENGTH values, position for position."""
    a = np.resize(np.asarray(values, dtype=DTYPES[dtype]), LENGTH)
    return backend.to_numpy(backend.function(key, impl)(backend.asarray(a))).astype(np.float64), a.astype(np.float64)


def _f_both_signs(backend, key, impl, xs, dtype):
    """(f(x), f(-x), x) as float64 arrays of LENGTH values, from one call on the drawn xs followed by their
    negation: x runs over both, so each identity is asserted at x and at -x."""
    g, x = _f(backend, key, impl, list(xs) + [-v for v in xs], dtype)
    n, i = len(xs), np.arange(LENGTH)
    negated = np.where(i + n < LENGTH, i + n, i - n)  # the position of -x: half a period of 2n on
    assert np.array_equal(x[negated], -x)
    return g, g[negated], x


def _odd_part_is_identity(key) -> bool:
    """f(x) - f(-x) = x at a few points, in mpmath at 100 bits."""
    mp = get_activation(key).mp
    with mpmath.workprec(100):
        return all(abs(mp(mpmath.mpf(x), 0) - mp(mpmath.mpf(-x), 0) - x) < mpmath.mpf(10) ** -25
                   for x in (0.3, 1.7, 4.25, 9.5))


ODD_IDENTITY = [k for k in ACTIVATIONS if _odd_part_is_identity(k)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("key", ODD_IDENTITY)
def test_odd_part_is_identity(backend, key, impl, dtype):
    eps = float(np.finfo(DTYPES[dtype]).eps)
    # each side's subnormal result may round, or on XLA's flush-to-zero platforms flush, to 0
    normal = 2 * float(np.finfo(DTYPES[dtype]).smallest_normal)

    @given(_arrays(-1e4, 1e4, dtype))
    def prop(xs):
        g, gm, x = _f_both_signs(backend, key, impl, xs, dtype)
        # each value is within a few ULP, so the identity holds to a few eps of the operands' size
        assert np.all(np.abs(g - gm - x) <= 4 * eps * (np.abs(g) + np.abs(gm)) + normal)

    prop()


@pytest.mark.parametrize("impl", IMPLS)
def test_relu_odd_part_is_identity_exactly(backend, impl):
    @given(_arrays(-1e30, 1e30, "float32"))
    def prop(xs):
        r, rm, x = _f_both_signs(backend, "relu", impl, xs, "float32")
        normal = np.abs(x) >= np.finfo(np.float32).smallest_normal
        assert np.array_equal((r - rm)[normal], x[normal])
        # subnormal inputs: exact, or within the flush-to-zero slack where the platform flushes subnormals
        # (its record's flushes_subnormals, core.parity.tolerances.overrides; measured: TensorFlow's scalar path
        # returns relu(-1e-45) = -1e-45)
        slack = 2 * np.finfo(np.float32).smallest_normal
        assert np.all(np.abs((r - rm) - x)[~normal] <= slack)

    prop()


@pytest.mark.parametrize("key,bound", [("gelu_tanh", 4.733e-4), ("gelu_sigmoid", 2.0335e-2)])
@pytest.mark.parametrize("impl", IMPLS)
def test_approximations_stay_close_to_exact(backend, impl, key, bound):
    @given(_arrays(-50.0, 50.0, "float64"))
    def prop(xs):
        approx, x = _f(backend, key, impl, xs, "float64")
        exact = x * scipy.special.ndtr(x)  # float64 x Phi(x), ~1e-16 |x| absolute: far below the bounds
        assert np.all(np.abs(approx - exact) <= bound)

    prop()


@cache
def _largest_critical_point(key) -> float:
    """The largest root of f' on [-10, 10] (mpmath: a sign change on a grid, refined by findroot), rounded up in
    the 4th decimal; -1e3 where f' never changes sign (ReLU)."""
    mp = get_activation(key).mp
    with mpmath.workprec(100):
        xs = [mpmath.mpf(-10) + mpmath.mpf(i) / 100 for i in range(2001)]
        vs = [mp(x, 1) for x in xs]
        roots = [mpmath.findroot(lambda t: mp(t, 1), (a, b), solver="anderson")
                 for a, b, va, vb in zip(xs, xs[1:], vs, vs[1:]) if va * vb < 0]
    return math.ceil(float(max(roots)) * 1e4) / 1e4 if roots else -1e3


def _direction_above(key) -> int:
    """+1 where f' > 0 at x = 10 (beyond the largest critical point found on [-10, 10]), -1 where f' < 0 there."""
    d = get_activation(key).mp(mpmath.mpf(10), 1)
    assert d != 0, f"{key}: f'(10) = 0, no direction"
    return 1 if d > 0 else -1


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("key", list(ACTIVATIONS))
def test_monotonic_above_the_largest_critical_point(backend, key, impl, dtype):
    eps = float(np.finfo(DTYPES[dtype]).eps)
    sign = _direction_above(key)

    @given(_arrays(_largest_critical_point(key), 1e3, dtype))  # exact GELU: the minimum is at -0.751791...
    def prop(xs):
        xs = sorted(set(xs))
        g, x = _f(backend, key, impl, xs, dtype)
        rises = np.diff(x) > 0  # the neighbours within one repetition of the sorted values, not where it starts over
        # monotonic, up to a rounding step where the entry is flat next to its critical point, and up to the
        # flush-to-zero slack for subnormals (core.parity.tolerances.overrides; measured: TensorFlow's
        # relu(-2.2e-313) = -2.2e-313 in float64 once XLA has run, beside relu(-0.5) = 0)
        slack = 2 * float(np.finfo(DTYPES[dtype]).smallest_normal)
        assert np.all((sign * np.diff(g) >= -2 * eps * np.abs(g[1:]) - slack)[rises])

    prop()
