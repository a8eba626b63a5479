"""ULP distance and error metrics against hand-checkable IEEE 754 facts (numpy.nextafter, finfo)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from gelulab.core.numerics.metrics import abs_error, rel_error, summarize, ulp_distance

DTS = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@pytest.mark.parametrize("dtype", list(DTS))
def test_neighbours_are_one_ulp_apart(dtype):
    dt = DTS[dtype]
    xs = np.array([1.0, -3.5, 1e-3, 100.0], dtype=dt)
    up = np.nextafter(xs, np.array(np.inf, dtype=dt))
    assert np.all(ulp_distance(xs, up, dtype) == 1)
    up5 = xs
    for _ in range(5):
        up5 = np.nextafter(up5, np.array(np.inf, dtype=dt))
    assert np.all(ulp_distance(up5, xs, dtype) == 5)


@pytest.mark.parametrize("dtype", list(DTS))
def test_zero_crossing_and_specials(dtype):
    dt = DTS[dtype]
    tiny = ml_dtypes.finfo(dt).smallest_subnormal
    a = np.array([0.0, tiny, np.nan, np.nan, np.inf, np.inf], dtype=dt)
    b = np.array([-0.0, -tiny, np.nan, 1.0, np.inf, ml_dtypes.finfo(dt).max], dtype=dt)
    d = ulp_distance(a, b, dtype)
    assert d[0] == 0 and d[1] == 2 and d[2] == 0 and d[3] == np.inf and d[4] == 0 and d[5] == 1


def test_abs_rel_and_summary():
    assert abs_error([1.0, np.inf], [1.5, np.inf]).tolist() == [0.5, 0.0]
    assert rel_error([1.0, 1.0, 0.0], [2.0, 0.0, 0.0]).tolist() == [0.5, np.inf, 0.0]
    s = summarize([1.0, 2.0], np.array([1.0, 2.0000002], np.float32), np.array([1.0, 2.0], np.float32), "float32")
    assert s.max_ulp == 1 and s.x_at_max_ulp == 2.0 and s.n == 2


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        ulp_distance(np.zeros(2), np.zeros(3), "float64")
