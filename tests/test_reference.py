"""The mpmath reference against independent sources: values computed independently with mpmath (quoted to 7-10
significant digits), scipy in float64 where it is accurate, mpmath's numerical differentiation, and ml_dtypes rounding.

Named values (GELU(-1), the tail values) are tables keyed by activation; every generic property runs over
the whole catalogue (core.activations.ACTIVATIONS), so a new entry is checked here without an edit."""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
import scipy.special

from gelulab.core.activations import ACTIVATIONS, get_activation
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.parity.reference import reference, reference_float, reference_mp
from gelulab.core.parity.tolerances import in_root_window


@pytest.mark.parametrize(
    "key,order,x,value",
    [  # the cases the suite must get right (float32), computed independently with mpmath
        ("gelu_none", 0, -5.0, -1.433257859e-6),
        ("gelu_none", 0, -5.5, -1.044425936e-7),
        ("gelu_none", 0, -6.0, -5.91952587e-9),
        ("gelu_none", 0, -8.0, -4.976768459e-15),
        ("gelu_none", 0, -10.0, -7.619853024e-23),
        ("gelu_none", 1, -5.0, -7.146946e-6),
        ("gelu_none", 1, -6.0, -3.546871e-8),
        ("gelu_none", 1, -7.0, -6.266323e-11),
        ("gelu_tanh", 0, -5.0, -2.291796e-7),
        ("gelu_tanh", 0, -6.0, -8.439647e-11),
        ("gelu_tanh", 0, -8.0, -3.107783e-21),
        ("gelu_tanh", 1, -5.0, -1.546362e-6),
    ],
)
def test_independent_mpmath_values(key, order, x, value):
    got = float(reference(key, np.array([x], np.float32), "float32", order)[0])
    assert got == pytest.approx(value, rel=1e-6)  # quoted to 7 to 10 significant digits


def test_article_facts():
    # GELU(-1) = -0.159, GELU(2) = 1.954, Phi(1) = 0.8413 (the article; Hendrycks & Gimpel 2016)
    assert reference_float("gelu_none", -1.0) == pytest.approx(-0.159, abs=5e-4)
    assert reference_float("gelu_none", 2.0) == pytest.approx(1.954, abs=5e-4)
    assert reference_float("gelu_none", 1.0) == pytest.approx(0.8413, abs=5e-5)
    assert reference_float("relu", -1.0) == 0.0 and reference_float("relu", 2.0) == 2.0


@pytest.mark.parametrize("x", np.linspace(-3, 3, 13))
def test_exact_gelu_matches_scipy_ndtr(x):
    # x * ndtr(x) in float64 is accurate for |x| <= 3 (PyTorch OpInfo's reference_gelu)
    assert reference_float("gelu_none", x) == pytest.approx(x * scipy.special.ndtr(x), rel=1e-14, abs=1e-300)


@pytest.mark.parametrize("key", list(ACTIVATIONS))
@pytest.mark.parametrize("x", [-7.5, -2.0, -0.75, 0.3, 1.41, 4.0])
def test_closed_form_derivatives_match_numerical_differentiation(key, x):
    with mpmath.workprec(200):
        f = lambda t: get_activation(key).mp(t, 0)
        d1 = mpmath.diff(f, mpmath.mpf(x), 1)
        d2 = mpmath.diff(f, mpmath.mpf(x), 2)
        assert abs(reference_mp(key, 1, x) - d1) <= mpmath.mpf(10) ** -30 * max(1, abs(d1))
        assert abs(reference_mp(key, 2, x) - d2) <= mpmath.mpf(10) ** -25 * max(1, abs(d2))


def test_minimum_of_gelu():
    # GELU's minimum is about -0.1700 at x about -0.7518 (so GELU is not monotonic)
    with mpmath.workprec(100):
        xmin = mpmath.findroot(lambda t: _mp_d1(t), -0.75)
        assert float(xmin) == pytest.approx(-0.7518, abs=5e-5)
        assert reference_float("gelu_none", float(xmin)) == pytest.approx(-0.1700, abs=5e-5)
    assert reference_float("gelu_none", -3.0) > reference_float("gelu_none", -0.75)


def _sign_changes(key, order, lo=-10.0, hi=10.0, n=2001):
    """The roots of the order-th derivative of `key` on [lo, hi]: brackets of sign changes on a grid of n points,
    refined with mpmath.findroot (Anderson's bracketing solver) at 100 bits."""
    mp = get_activation(key).mp
    with mpmath.workprec(100):
        xs = [mpmath.mpf(lo) + (hi - lo) * mpmath.mpf(i) / (n - 1) for i in range(n)]
        vs = [mp(x, order) for x in xs]
        return [float(mpmath.findroot(lambda t: mp(t, order), (a, b), solver="anderson"))
                for a, b, va, vb in zip(xs, xs[1:], vs, vs[1:]) if va * vb < 0]


@pytest.mark.parametrize("key", list(ACTIVATIONS))
@pytest.mark.parametrize("order", [1, 2])
def test_every_root_of_a_derivative_lies_in_a_root_window(key, order):
    # relative error means nothing where f' or f'' crosses zero: the tolerance's absolute floor applies inside the
    # root windows, so every root (found in mpmath, not taken from the catalogue) must lie inside one, with room
    for root in _sign_changes(key, order):
        assert in_root_window(key, order, np.array([root - 0.05, root, root + 0.05])).all(), (key, order, root)


def _mp_d1(t):
    return get_activation("gelu_none").mp(t, 1)


def _half_slope_at_zero(key) -> bool:
    """f(x) = x/2 + c x^2 + O(x^3) with c > 0, read from the mp form: f(0) = 0, f'(0) = 1/2 and f''(0) > 0."""
    mp = get_activation(key).mp
    with mpmath.workprec(100):
        z = mpmath.mpf(0)
        return mp(z, 0) == 0 and mp(z, 1) == mpmath.mpf(1) / 2 and mp(z, 2) > 0


HALF_SLOPE = [k for k in ACTIVATIONS if _half_slope_at_zero(k)]  # every GELU form and x sigmoid(x); not ReLU


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
@pytest.mark.parametrize("key", HALF_SLOPE)
def test_rounding_at_subnormal_ties(dtype, key):
    # For an odd multiple x of the smallest subnormal s, x/2 is a tie between two representable values. Every entry
    # with f(x) = x/2 + c x^2 + O(x^3), c > 0 (Phi(x) > 1/2, sigmoid(kx) > 1/2 for x > 0) has as its correctly
    # rounded f(x) the upper neighbour x/2 + s/2 for x > 0, and x/2 + s/2 (towards zero) for x < 0.
    s = float(get_dtype(dtype).finfo.smallest_subnormal)
    k = np.array([1, 3, 5, 7, -1, -3, -5])
    xs = k * s
    got = reference(key, xs.astype(get_dtype(dtype).np_dtype), dtype).astype(np.float64)
    want = ((k + 1) // 2) * s  # x/2 + s/2, in whole multiples of s (s/2 itself is not representable)
    assert np.array_equal(got, want), (got, want)


@pytest.mark.parametrize("key", list(ACTIVATIONS))
@pytest.mark.parametrize("order", [0, 1, 2])
def test_limits_at_infinity_agree_with_the_mp_form(key, order):
    # the reference returns the catalogue's limits at +-inf: they must be what the mp form tends to. At |x| = 60
    # every term that decays is below e^-50 (the slowest, x sigmoid(x), is 60 e^-60), so a finite limit L must be
    # within 1e-20 of f(+-60), and a zero value limit carries the sign of the side it is approached from
    # (GELU(-inf) = -0.0). An infinite limit, at any order, needs f of its sign and growing without bound: |f|
    # at least doubles from |x| = 60 to 600 (x grows 10-fold, relu(x)^2 100-fold; a function levelling off or
    # growing like log x does not). Where the entry has a `far` point, beyond which the reference returns x
    # itself for an infinite limit, f(x)/x must tend to 1 there.
    act = get_activation(key)
    with mpmath.workprec(200):
        for side, limit in zip((-1, 1), act.limits[order]):
            v = act.mp(mpmath.mpf(60 * side), order)
            if math.isinf(limit):
                w = act.mp(mpmath.mpf(600 * side), order)
                assert v * limit > 0 and w * limit > 0 and abs(w) >= 2 * abs(v), (side, v, w)
                if act.far is not None:
                    far = act.mp(mpmath.mpf(act.far * side), order)
                    assert abs(v / (60 * side) - 1) < 1e-20 and abs(far / (act.far * side) - 1) < 1e-20, (side, v)
            else:
                # a limit is declared as a float: within half its ULP of the exact value (0.01 is not a binary
                # fraction), and within 1e-20 of f(+-60)
                assert abs(v - limit) < 1e-20 + math.ulp(limit) / 2, (side, v, limit)
                if order == 0 and limit == 0 and v != 0:
                    assert math.copysign(1, limit) == (1 if v > 0 else -1), (side, v, limit)


def test_signed_zero_and_limits():
    out = reference("gelu_none", np.array([0.0, -0.0, np.inf, -np.inf, np.nan]), "float32")
    assert [math.copysign(1, v) for v in out[:2].astype(float)] == [1.0, -1.0]
    assert out[2] == np.inf and out[3] == 0 and np.signbit(out[3]) and np.isnan(out[4])


def test_unknown_key_and_order_raise():
    with pytest.raises(ValueError, match="unknown activation"):
        reference_mp("gelu_erf", 0, 1.0)
    with pytest.raises(ValueError, match="order"):
        reference_mp("gelu_none", 3, 1.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float64"])
def test_reference_store_gives_back_what_mpmath_computed_and_recomputes_a_damaged_entry(tmp_path, monkeypatch, dtype):
    from gelulab.core.parity import reference_store

    monkeypatch.setenv(reference_store.ENV, str(tmp_path))
    dt = get_dtype(dtype).np_dtype
    x = np.array([-0.0, -0.7518, -5.0, 1e-30, 2.0], dtype=np.float64).astype(dt)
    calls = []

    def counted(*args):
        calls.append(args)
        return reference(*args)

    want = reference("gelu_none", x, dtype, 1)  # computed by mpmath here, without the store
    first = reference_store.stored(counted, "gelu_none", 1, dtype, x)
    again = reference_store.stored(counted, "gelu_none", 1, dtype, x)
    assert len(calls) == 1 and again.dtype == dt
    for got in (first, again):
        assert np.array_equal(got.view(f"u{dt.itemsize}"), want.view(f"u{dt.itemsize}"))  # bit for bit, signed zero
    other = reference_store.stored(counted, "gelu_none", 0, dtype, x)  # another order is another entry
    assert len(calls) == 2 and np.array_equal(other, reference("gelu_none", x, dtype, 0))
    (entry,) = [p for p in tmp_path.iterdir() if "-d1-" in p.name]
    entry.write_bytes(b"not an array")
    assert np.array_equal(reference_store.stored(counted, "gelu_none", 1, dtype, x), want) and len(calls) == 3
    entry.write_bytes(b"")  # a writer cut short
    assert np.array_equal(reference_store.stored(counted, "gelu_none", 1, dtype, x), want) and len(calls) == 4
    monkeypatch.delenv(reference_store.ENV)
    reference_store.stored(counted, "gelu_none", 1, dtype, x)
    assert len(calls) == 5  # no store without the variable


def test_a_store_entry_with_two_values_changed_is_named_set_aside_and_computed_again(tmp_path, monkeypatch, capsys):
    """The damage a checksum alone catches: two values of an entry changed, its dtype and shape kept (a parity run
    read such an entry as a 9.8e8-ULP 'new fault'). The entry is named in one line on stderr, set aside as
    <name>.damaged-1, and the reference computed again by mpmath equals the undamaged one bit for bit."""
    from gelulab.core.parity import reference_store

    monkeypatch.setenv(reference_store.ENV, str(tmp_path))
    x = np.linspace(-6.0, 6.0, 64).astype(np.float32)
    want = reference("gelu_none", x, "float32", 0)
    reference_store.stored(reference, "gelu_none", 0, "float32", x)
    (entry,) = tmp_path.glob("*.npz")
    with np.load(entry) as e:
        bits, key, digest = e["bits"].copy(), e["key"], e["sha256"]
    bits[[3, 40]] ^= 0x00400000  # two values changed, same dtype, shape and key, the old checksum kept
    with open(entry, "wb") as f:
        np.savez(f, bits=bits, key=key, sha256=digest)
    capsys.readouterr()
    got = reference_store.stored(reference, "gelu_none", 0, "float32", x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"gelulab: reference store entry {entry} is damaged (its content does not match its SHA-256); "
                    f"set aside as {entry.name}.damaged-1; computed again")
    assert (tmp_path / f"{entry.name}.damaged-1").exists() and entry.exists()  # kept, and stored again


def test_a_store_folder_that_is_a_file_is_one_line_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    from gelulab.core.parity import reference_store

    blocked = tmp_path / "store"
    blocked.write_text("a file, not a folder\n")
    monkeypatch.setenv(reference_store.ENV, str(blocked))
    monkeypatch.setattr(reference_store, "_unusable", set())
    x = np.array([-1.0, 2.0], np.float32)
    for _ in range(2):
        got = reference_store.stored(reference, "gelu_none", 0, "float32", x)
        assert np.array_equal(got, reference("gelu_none", x, "float32", 0))
    (line,) = capsys.readouterr().err.splitlines()  # once per process
    assert line.startswith(f"gelulab: GELULAB_REFERENCE_CACHE={blocked} cannot be used (") and "without it" in line
