"""gelulab's formula contract (issue 3), per backend, mode, dtype and catalogue entry: special values, no overflow
near the dtype's maximum, finite gradients wherever the function is finite, and the named cases. Expected values are
the correctly rounded mpmath reference (its limits at +-inf, the sign of zero included) and mpmath values quoted in
the issue, not outputs of the code under test."""
from __future__ import annotations

import numpy as np
import pytest
from parity_shapes import call

from gelulab.core.activations import ACTIVATIONS
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.parity.reference import reference

FORMS = list(ACTIVATIONS)


def _eval(backend, key, x, dtype, order=0, mode="eager"):
    a = np.asarray(x, dtype=np.float64).astype(DTYPES[dtype].np_dtype)
    return call(backend, backend.function(key, "formula", order, mode), a, mode).astype(np.float64)


def _specials(dtype):
    top = float(DTYPES[dtype].finfo.max)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, top, -top])


def _gradient_grid(dtype):
    top = float(DTYPES[dtype].finfo.max)
    return np.concatenate([np.geomspace(1e-3, top, 400), -np.geomspace(1e-3, top, 400), [0.0, np.inf, -np.inf]])


MODES = ["eager", pytest.param("compiled", marks=[pytest.mark.slow, pytest.mark.compile])]


@pytest.fixture(params=MODES)
def mode(request, backend):
    if request.param not in backend.modes:
        pytest.skip(f"{backend.name} has no {request.param} mode")
    return request.param


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("key", FORMS)
def test_special_values(backend, mode, key, dtype):
    x = _specials(dtype)
    y = _eval(backend, key, x, dtype, mode=mode)
    want = reference(key, x.astype(DTYPES[dtype].np_dtype), dtype).astype(np.float64)
    # gelu(-0) = -0, gelu(-inf) = -0.0 (the limit), gelu(max) = max without overflow; relu(-0) = +0
    assert np.array_equal(y, want, equal_nan=True), (y, want)
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(y[num]), np.signbit(want[num])), (y, want)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("key", FORMS)
def test_gradients_finite_wherever_the_function_is(backend, mode, key, dtype):
    top = float(DTYPES[dtype].finfo.max)
    xs = _gradient_grid(dtype)
    d1 = _eval(backend, key, xs, dtype, order=1, mode=mode)
    assert np.all(np.isfinite(d1)), (mode, xs[~np.isfinite(d1)][:5])
    ends = np.array([top, np.inf, -np.inf])
    want = reference(key, ends.astype(DTYPES[dtype].np_dtype), dtype, 1).astype(np.float64)  # 1, 1, 0: the limits
    assert np.array_equal([d1[xs == e][0] for e in ends], want), want


@pytest.mark.backend_needs("float16")
@pytest.mark.parametrize("x", [148.0, 256.0])
def test_float16_tanh_gradient_is_one_at_large_x(backend, mode, x):
    # issue 3: not NaN from an overflowing x^3
    assert _eval(backend, "gelu_tanh", [x], "float16", order=1, mode=mode)[0] == 1.0


@pytest.mark.parametrize("x,value", [(-4.0, -1.2668496733247969e-4), (-8.0, -4.9767684594174273e-15),
                                     (-20.0, -5.5072482372124674e-88)])
def test_float64_exact_tail_within_1e13(backend, mode, x, value):
    # mpmath: x/2 * erfc(-x/sqrt 2) at 50 digits (issue 3: within 1e-13 relative)
    y = _eval(backend, "gelu_none", [x], "float64", mode=mode)[0]
    assert y == pytest.approx(value, rel=1e-13)


@pytest.mark.parametrize("x,value", [(-6.0, -5.91952587e-9)])
def test_float32_exact_reaches_minus_six(backend, mode, x, value):
    # issue 2: the formula reaches GELU(-6) = -5.92e-9 in float32, within 1e-5 relative
    y = _eval(backend, "gelu_none", [x], "float32", mode=mode)[0]
    assert y == pytest.approx(value, rel=1e-5)
