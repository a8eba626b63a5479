"""gelulab's formula contract, per backend, mode, dtype and catalogue entry: special values, no overflow
near the dtype's maximum, finite gradients wherever the correctly rounded derivative is finite, and the named cases.
Expected values are the correctly rounded mpmath reference (its limits at +-inf, the sign of zero included) and
mpmath values computed independently, not outputs of the code under test; what each entry's derivative does at the
dtype's extremes (tend to a finite limit, or overflow like relu(x)^2's 2x) is read from that reference, not assumed.
"""
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
def test_gradients_finite_wherever_the_reference_is(backend, mode, key, dtype):
    # f' is finite wherever the correctly rounded f' is (no inf * 0 or overflowing x^3 inside the formula's graph:
    # GELU' is 1 at the dtype's maximum), and where that rounds to +-inf (relu(x)^2' = 2x past half the maximum)
    # the formula gives the same infinity; at +-max and +-inf it equals the reference (the limits at +-inf)
    top = float(DTYPES[dtype].finfo.max)
    xs = _gradient_grid(dtype)
    d1 = _eval(backend, key, xs, dtype, order=1, mode=mode)
    want = reference(key, xs.astype(DTYPES[dtype].np_dtype), dtype, 1).astype(np.float64)
    finite = np.isfinite(want)
    assert np.all(np.isfinite(d1[finite])), (mode, xs[finite & ~np.isfinite(d1)][:5])
    assert np.array_equal(d1[~finite], want[~finite]), (mode, xs[~finite][:5], d1[~finite][:5])
    ends = np.array([top, -top, np.inf, -np.inf])
    assert np.array_equal([d1[xs == e][0] for e in ends], [want[xs == e][0] for e in ends]), want


@pytest.mark.backend_needs("float16")
@pytest.mark.parametrize("x", [148.0, 256.0])
def test_float16_tanh_gradient_is_one_at_large_x(backend, mode, x):
    # not NaN from an overflowing x^3
    assert _eval(backend, "gelu_tanh", [x], "float16", order=1, mode=mode)[0] == 1.0


@pytest.mark.parametrize("x,value", [(-4.0, -1.2668496733247969e-4), (-8.0, -4.9767684594174273e-15),
                                     (-20.0, -5.5072482372124674e-88)])
def test_float64_exact_tail_within_1e13(backend, mode, x, value):
    # mpmath: x/2 * erfc(-x/sqrt 2) at 50 digits (within 1e-13 relative)
    y = _eval(backend, "gelu_none", [x], "float64", mode=mode)[0]
    assert y == pytest.approx(value, rel=1e-13)


@pytest.mark.parametrize("x,value", [(-6.0, -5.91952587e-9)])
def test_float32_exact_reaches_minus_six(backend, mode, x, value):
    # the formula reaches GELU(-6) = -5.92e-9 in float32, within 1e-5 relative
    y = _eval(backend, "gelu_none", [x], "float32", mode=mode)[0]
    assert y == pytest.approx(value, rel=1e-5)
