"""Hypothesis properties of the activations, per backend and implementation (derandomized in CI, see conftest):

* exact GELU: gelu(x) - gelu(-x) = x (x Phi(x) + x Phi(-x) = x since Phi(x) + Phi(-x) = 1); ReLU likewise, exactly;
* each approximation stays within its known distance of exact GELU: |tanh form - exact| <= 4.73e-4 and
  |sigmoid form - exact| <= 2.03e-2 absolutely (issue 3; the maxima, computed with mpmath, are 4.7324e-4 at
  x = 2.699 and 2.03349e-2 at x = -2.2704, so the bounds are those values rounded up in their 4th digit);
* GELU is increasing for x above its minimum at x = -0.7518.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from hypothesis import given
from hypothesis import strategies as st

from gelulab.core.activations import IMPLS

DTYPES = {"float64": np.float64, "float32": np.float32}


def _arrays(lo, hi, dtype):
    width = 64 if dtype == "float64" else 32
    lo, hi = (float(DTYPES[dtype](v)) for v in (lo, hi))  # hypothesis wants bounds exact in the width
    return st.lists(st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=width), min_size=1, max_size=64)


def _f(backend, key, impl, x, dtype):
    a = np.asarray(x, dtype=DTYPES[dtype])
    return backend.to_numpy(backend.function(key, impl)(backend.asarray(a))).astype(np.float64), a.astype(np.float64)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
def test_gelu_odd_part_is_identity(backend, impl, dtype):
    eps = float(np.finfo(DTYPES[dtype]).eps)
    # each side's subnormal result may round, or on XLA's flush-to-zero platforms flush, to 0
    normal = 2 * float(np.finfo(DTYPES[dtype]).smallest_normal)

    @given(_arrays(-1e4, 1e4, dtype))
    def prop(xs):
        g, x = _f(backend, "gelu_none", impl, xs, dtype)
        gm, _ = _f(backend, "gelu_none", impl, [-v for v in xs], dtype)
        # each value is within a few ULP, so the identity holds to a few eps of the operands' size
        assert np.all(np.abs(g - gm - x) <= 4 * eps * (np.abs(g) + np.abs(gm)) + normal)

    prop()


@pytest.mark.parametrize("impl", IMPLS)
def test_relu_odd_part_is_identity_exactly(backend, impl):
    @given(_arrays(-1e30, 1e30, "float32"))
    def prop(xs):
        r, x = _f(backend, "relu", impl, xs, "float32")
        rm, _ = _f(backend, "relu", impl, [-v for v in xs], "float32")
        normal = np.abs(x) >= np.finfo(np.float32).smallest_normal
        assert np.array_equal((r - rm)[normal], x[normal])
        # subnormal inputs: exact, or within the flush-to-zero slack where the platform flushes subnormals
        # (core.tolerances.OVERRIDES; measured: TensorFlow's scalar path returns relu(-1e-45) = -1e-45)
        slack = 2 * np.finfo(np.float32).smallest_normal
        assert np.all(np.abs((r - rm) - x)[~normal] <= slack)

    prop()


@pytest.mark.parametrize("key,bound", [("gelu_tanh", 4.733e-4), ("gelu_sigmoid", 2.0335e-2)])
@pytest.mark.parametrize("impl", IMPLS)
def test_approximations_stay_close_to_exact(backend, impl, key, bound):
    @given(_arrays(-50.0, 50.0, "float64"))
    def prop(xs):
        x = np.asarray(xs, dtype=np.float64)
        exact = x * scipy.special.ndtr(x)  # float64 x Phi(x), ~1e-16 |x| absolute: far below the bounds
        approx, _ = _f(backend, key, impl, xs, "float64")
        assert np.all(np.abs(approx - exact) <= bound)

    prop()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("impl", IMPLS)
def test_gelu_increasing_above_its_minimum(backend, impl, dtype):
    eps = float(np.finfo(DTYPES[dtype]).eps)

    @given(_arrays(-0.7517, 1e3, dtype))  # the minimum is at -0.751791...
    def prop(xs):
        xs = sorted(set(xs))
        g, _ = _f(backend, "gelu_none", impl, xs, dtype)
        # non-decreasing, up to a rounding step where GELU is flat next to its minimum
        assert np.all(np.diff(g) >= -2 * eps * np.abs(g[1:]))

    prop()
