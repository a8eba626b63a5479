"""The article's facts, per backend, implementation and mode (DEVELOPERS.md "Known facts"; Hendrycks & Gimpel 2016):
GELU(-1) = -0.159, GELU(2) = 1.954, Phi(1) = 0.8413, ReLU(-1) = 0, ReLU(2) = 2, GELU's minimum -0.1700 at
x = -0.7518 (so GELU is not monotonic), GELU'(0) = 1/2, ReLU'(0) = 0. Beside these named facts, every catalogue
entry's formula must equal the correctly rounded mpmath reference at a few points, value and derivatives, in every
mode (float32: within 4 ULP, gelulab's goal, except next to a root of the derivative, inside the entry's root
windows, where relative error means nothing; the builtins are judged with their known faults by the parity suite)."""
from __future__ import annotations

import numpy as np
import pytest
from parity_shapes import call

from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.parity.reference import reference
from gelulab.core.parity.tolerances import in_root_window


def _run(backend, key, x, impl, order=0, mode="eager"):
    return call(backend, backend.function(key, impl, order, mode), np.asarray(x, np.float64), mode)


def _modes(backend):
    return backend.modes


@pytest.mark.parametrize("impl", IMPLS)
def test_values(backend, impl):
    for mode in _modes(backend):
        g = _run(backend, "gelu_none", [-1.0, 2.0, 1.0], impl, mode=mode)
        assert g[0] == pytest.approx(-0.159, abs=5e-4)
        assert g[1] == pytest.approx(1.954, abs=5e-4)
        assert g[2] == pytest.approx(0.8413, abs=5e-5)  # GELU(1) = 1 * Phi(1)
        r = _run(backend, "relu", [-1.0, 2.0], impl, mode=mode)
        assert r.tolist() == [0.0, 2.0]


@pytest.mark.parametrize("impl", IMPLS)
def test_minimum_and_non_monotonic(backend, impl):
    xs = np.linspace(-1.5, 0.0, 150001)
    g = _run(backend, "gelu_none", xs, impl)
    i = int(np.argmin(g))
    assert xs[i] == pytest.approx(-0.7518, abs=1e-4)
    assert g[i] == pytest.approx(-0.1700, abs=5e-5)
    assert _run(backend, "gelu_none", [-3.0], impl)[0] > g[i]  # falls, then rises: not monotonic


@pytest.mark.parametrize("impl", IMPLS)
def test_derivatives_at_zero(backend, impl):
    for mode in _modes(backend):
        assert _run(backend, "gelu_none", [0.0], impl, order=1, mode=mode)[0] == 0.5
        assert _run(backend, "relu", [0.0, 2.0], impl, order=1, mode=mode).tolist() == [0.0, 1.0]  # one compile


POINTS = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0])


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("key", list(ACTIVATIONS))
def test_every_formula_matches_the_reference_at_named_points(backend, key, order):
    want = reference(key, POINTS.astype(np.float32), "float32", order).astype(np.float64)
    # next to a root of f' or f'' relative error means nothing: those points are left out (GELU's and SiLU's roots
    # lie between these points; another entry's may not)
    judged = ~in_root_window(key, order, POINTS) if order > 0 else np.ones(POINTS.size, bool)
    assert judged.sum() >= POINTS.size - 2, (key, order, POINTS[~judged])
    for mode in _modes(backend):
        fn = backend.function(key, "formula", order, mode)
        got = call(backend, fn, POINTS.astype(np.float32), mode).astype(np.float64)
        # 4 float32 ULP are at most 4 * 2^-23 relative
        np.testing.assert_allclose(got[judged], want[judged], rtol=4 * 2.0**-23, atol=0,
                                   err_msg=f"{key} d{order} {mode}")
