"""Fit the polynomial coefficients of gelulab's float32 kernels (core.numerics.kernels) and write them to
core/numerics/kernel_coeffs.py.

Run `python -m gelulab.core.numerics.kernel_fit` (about a minute; needs mpmath and numpy only). The target functions are
evaluated with mpmath at 60 decimal digits; each polynomial is a near-minimax fit (Lawson's iteratively reweighted
least squares on Chebyshev nodes, weighted for relative error unless stated) in float64, and its coefficients are
then rounded to float32 one at a time from the constant term upwards, refitting the higher ones after each rounding
so that they absorb the rounding error (the constant term is kept as a float32 pair, hi + lo). The report printed
gives the max relative error of each fit with its float32 coefficients, evaluated in float64.

Functions fitted (a = |x| >= 0, phi the standard normal density, R(a) = Phi(-a) e^{a^2/2}; each polynomial is in
u = v - centre, v = a or v = 1/a as stated, the centre chosen by fit_piece):
* EXP_Q(r) = (e^-r - 1 + r) / r^2 on |r| <= 0.42, absolute error of r^2 EXP_Q (the exp kernel's tail terms).
* GELU_K: K(a) = R(a) e^{a/2} for a in [0, 2] (exact GELU value below SPLIT_VALUE), v = a.
* GELU_W: W(a) = a R(a) for a in [2, 14.5] (exact GELU value above SPLIT_VALUE), v = 1/a.
* GELU_D2_LO, GELU_D2_HI: D2(a) = (R(a) - a phi(0)) / (a - A0) (exact GELU's f'(-a) / (e^{-a^2/2} (a - A0))) for a in
  [0, 2] with v = a and in [2, 14.7] with v = 1/a; A0 = 0.7517915246... the root of f'.
* <KEY>_J2, <KEY>_B2 for each x sigma(z) form of SIGMA_FORMS (the catalogue units' `sigma_form`: SiLU, sigmoid
  GELU, tanh GELU): J(a)/(a - A0) and B(a)/(a - B0) on |a - root| <= WINDOW, the factors that keep f' (J) and f'' (B)
  accurate next to their zeros A0, B0 (found by mpmath.findroot), as polynomials in a - root.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import mpmath
import numpy as np

from gelulab.core.activations import ACTIVATIONS

DPS = 60  # decimal digits of every mpmath evaluation here (mpmath.workdps: the global mpmath.mp is left alone)


def _f32(v: float) -> float:
    return float(np.float32(v))


def _mp_R(a):
    a = mpmath.mpf(a)
    return mpmath.erfc(a / mpmath.sqrt(2)) / 2 * mpmath.exp(a * a / 2)


@mpmath.workdps(DPS)
def gelu_root() -> mpmath.mpf:
    """A0: the root of exact GELU's derivative at x = -A0 (R(a) = a phi(0) e^0... i.e. Phi(-a) = a phi(a))."""
    c1 = 1 / mpmath.sqrt(2 * mpmath.pi)
    return mpmath.findroot(lambda a: _mp_R(a) - c1 * a, 0.75)


def _lawson(V, y, w0, iters=60):
    """Near-minimax least squares: coefficients c minimising max |V c - y| * w0 (Lawson's reweighting)."""
    w = np.ones(len(y))
    for _ in range(iters):
        sw = np.sqrt(w) * w0
        c, *_ = np.linalg.lstsq(V * sw[:, None], y * sw, rcond=None)
        e = np.abs(V @ c - y) * w0
        w = w * e / max(e.max(), 1e-300)
        w = w / w.sum() * len(w)
    return c


def fit_rounded(u, y, deg, w0):
    """Polynomial of degree `deg` in u for samples y, weighted error w0; coefficients rounded to float32 from the
    constant term up, refitting the higher ones after each rounding (the constant term kept as hi + lo).
    Returns (coefficients, low part of the constant term, max weighted error with the rounded coefficients)."""
    V = np.vander(u, deg + 1, increasing=True)
    resid = np.array(y, dtype=np.float64)
    out, p0_lo = [], 0.0
    for k in range(deg + 1):
        c = _lawson(V[:, k:], resid, w0)
        hi = _f32(c[0])
        if k == 0:
            p0_lo = _f32(c[0] - hi)
            resid = resid - (hi + p0_lo)
        else:
            resid = resid - hi * V[:, k]
        out.append(hi)
    return out, p0_lo, float(np.max(np.abs(resid) * w0))


def cheb_nodes(lo, hi, n):
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


VARIABLES = {
    # name: (variable of a, a of the variable); "a": u = a - center (exact), "inv": u = 1/a - center (one rounding)
    "a": (lambda a: a, lambda v: v),
    "inv": (lambda a: 1 / a, lambda v: 1 / v),
}


@mpmath.workdps(DPS)
def fit_piece(fun, a_lo, a_hi, var, tol=2.0**-29, max_degree=16, n=700):
    """Fit fun(a) (mpmath function) on [a_lo, a_hi] as a polynomial in u = var(a) - center, with the smallest degree
    whose float32-coefficient fit has max relative error below `tol`.

    The centre is chosen among 21 points of the variable's range to minimise the Horner chain's error amplification,
    horner_condition (reported as `horner_cond`, units of 2^-24 relative to P)."""
    to_v, to_a = VARIABLES[var]
    v_lo, v_hi = sorted(
        (float(to_v(mpmath.mpf(a_lo))) if a_lo > 0 or var == "a" else 0.0, float(to_v(mpmath.mpf(a_hi))))
    )
    v = cheb_nodes(v_lo, v_hi, n)
    y = np.array([float(fun(to_a(mpmath.mpf(vv)))) for vv in v])
    best = None
    for frac in np.linspace(0.0, 1.0, 21):
        center = _f32(v_lo + frac * (v_hi - v_lo))
        u = v - center
        for deg in range(2, max_degree + 1):
            coeffs, p0_lo, err = fit_rounded(u, y, deg, 1 / np.abs(y))
            if err < tol:
                break
        cond = float(np.max(horner_condition(coeffs, u)))
        key = (deg, cond)
        if best is None or key < best[0]:
            best = (key, center, coeffs, p0_lo, err, cond)
    (_, center, coeffs, p0_lo, err, cond) = best
    ratio = float(np.max(np.abs(y - coeffs[0]) / np.abs(y)))
    u = v - center
    dp = np.polynomial.polynomial.polyval(u, np.array(coeffs[1:]) * np.arange(1, len(coeffs)))
    # 1/a is rounded once (relative error <= 2^-24): the polynomial passes it on as |v P'(v) / P| (units 2^-24)
    sens = float(np.max(np.abs(v * dp / y))) if var == "inv" else 0.0
    return {"var": var, "center": center, "coeffs": coeffs, "p0_lo": p0_lo, "max_rel_err": err,
            "tail_ratio": ratio, "horner_cond": cond, "variable_sensitivity": sens, "a_range": (a_lo, a_hi)}


def horner_condition(coeffs, u):
    """Bound on the float32 Horner chain's rounding error relative to P(u), in units of 2^-24:
    sum over steps of |u|^k |q_k| / |P| (q_k the running Horner values), plus the final product u Q."""
    c = np.asarray(coeffs, dtype=np.float64)
    q = np.full_like(u, c[-1])
    bound = np.zeros_like(u)
    for k in range(len(c) - 2, 0, -1):
        q = q * u + c[k]
        bound += np.abs(u) ** k * np.abs(q)
    tail = u * q
    bound += np.abs(tail)
    return bound / np.abs(c[0] + tail)


def pad_pair(lo, hi):
    """Give two pieces selected by `where` the same number of coefficients (zeros on top of the shorter)."""
    n = max(len(lo["coeffs"]), len(hi["coeffs"]))
    for f in (lo, hi):
        f["coeffs"] = list(f["coeffs"]) + [0.0] * (n - len(f["coeffs"]))


@mpmath.workdps(DPS)
def fit_exp_q(deg=5, r=0.42, n=400):
    u = cheb_nodes(-r, r, n)
    y = np.array([float((mpmath.exp(-mpmath.mpf(v)) - 1 + mpmath.mpf(v)) / mpmath.mpf(v) ** 2) for v in u])
    coeffs, p0_lo, err = fit_rounded(u, y, deg, u**2)  # absolute error of r^2 Q
    return {"coeffs": coeffs, "p0_lo": p0_lo, "max_abs_err_r2q": err, "r_range": (-r, r)}


# x sigma(z(x)) forms, by catalogue key, from each unit's `sigma_form` (core/activations/<key>.py): z(a), a z'(a),
# a z''(a) (in f'') and a starting guess for the zero B0 of B (exact decimals 1.702 and 0.044715, as the frameworks
# state them), mpmath functions evaluated at the working precision of the fits here (DPS)
SIGMA_FORMS = {k: a.sigma_form for k, a in ACTIVATIONS.items() if a.sigma_form is not None}
WINDOW = 0.0625  # |a - A0| below which f' uses the explicit root (A0: the root of J)


def _j_function(key):
    """J(a) = 1 + e^{-z(a)} - a z'(a): f'(-a) = e^{-z} J / (1 + e^{-z})^2 has the sign and the root of J."""
    zf, wf, _, _ = SIGMA_FORMS[key]
    return lambda a: 1 + mpmath.exp(-zf(mpmath.mpf(a))) - wf(mpmath.mpf(a))


def _b_function(key):
    """B(a) with f''(-a) = sigma(-z) sigma(z) B(a): B = z' (2 - a z' (1 - 2 sigma(-z))) + a z''(a) (6 d a^2 for
    the tanh form, 0 for the linear z)."""
    zf, wf, zpp, _ = SIGMA_FORMS[key]

    def b(a):
        a = mpmath.mpf(a)
        t = 1 / (1 + mpmath.exp(zf(a)))
        zp = wf(a) / a
        return zp * (2 - a * zp * (1 - 2 * t)) + zpp(a)

    return b


@mpmath.workdps(DPS)
def sigma_root(key) -> mpmath.mpf:
    """A0 > 0 with J(A0) = 0: f'(-A0) = 0, the minimum of f at x = -A0."""
    return mpmath.findroot(_j_function(key), 1.0)


@mpmath.workdps(DPS)
def fit_window(fun, h, n=300, tol=2.0**-30, max_degree=12):
    """fun(d) (mpmath) on [-h, h] as a polynomial in d (constant term a float32 pair), smallest degree below tol."""
    d = cheb_nodes(-h, h, n)
    d = d[np.abs(d) > 1e-9]
    y = np.array([float(fun(mpmath.mpf(v))) for v in d])
    for deg in range(1, max_degree + 1):
        coeffs, p0_lo, err = fit_rounded(d, y, deg, 1 / np.abs(y))
        if err < tol:
            break
    return {"var": "d", "coeffs": coeffs, "p0_lo": p0_lo, "max_rel_err": err,
            "horner_cond": float(np.max(horner_condition(coeffs, d))), "d_range": (-h, h)}


SPLIT_VALUE = 2.0  # exact GELU value: K(a) = R(a) e^{a/2} in a below, W(a) = a R(a) in 1/a above
SPLIT_D1 = 2.0  # exact GELU f': D2(a) in a below, in 1/a above


@mpmath.workdps(DPS)
def main(out: Path | None = None) -> dict:
    """Fit every kernel polynomial, print the report and write core/numerics/kernel_coeffs.py (or `out`)."""
    c1 = 1 / mpmath.sqrt(2 * mpmath.pi)
    a0 = gelu_root()

    def d2(a):
        a = mpmath.mpf(a)
        if abs(a - a0) < mpmath.mpf("1e-12"):
            a = a0 + mpmath.mpf("1e-12")
        return (_mp_R(a) - c1 * a) / (a - a0)

    consts = {}
    fits = {"EXP_Q": fit_exp_q()}
    fits["GELU_K"] = fit_piece(lambda a: _mp_R(a) * mpmath.exp(a / 2), 0.0, SPLIT_VALUE, "a")
    fits["GELU_W"] = fit_piece(lambda a: a * _mp_R(a), SPLIT_VALUE, 14.5, "inv")
    pad_pair(fits["GELU_K"], fits["GELU_W"])
    for key, (_, _, _, b0_guess) in SIGMA_FORMS.items():
        root = sigma_root(key)
        j = _j_function(key)
        fits[f"{key.upper()}_J2"] = fit_window(lambda d, j=j, r=root: j(r + d) / d, WINDOW)
        consts[f"{key.upper()}_A0_HI"] = _f32(root)
        consts[f"{key.upper()}_A0_LO"] = _f32(root - _f32(root))
        b = _b_function(key)
        b0 = mpmath.findroot(b, b0_guess)
        fits[f"{key.upper()}_B2"] = fit_window(lambda d, b=b, r=b0: b(r + d) / d, WINDOW)
        consts[f"{key.upper()}_B0_HI"] = _f32(b0)
        consts[f"{key.upper()}_B0_LO"] = _f32(b0 - _f32(b0))
    fits["GELU_D2_LO"] = fit_piece(d2, 0.0, SPLIT_D1, "a")
    fits["GELU_D2_HI"] = fit_piece(d2, SPLIT_D1, 14.7, "inv")
    pad_pair(fits["GELU_D2_LO"], fits["GELU_D2_HI"])
    for k, v in fits.items():
        print(k, {kk: vv for kk, vv in v.items() if kk != "coeffs"}, "coefficients", len(v["coeffs"]))
    a0_hi = _f32(a0)
    a0_lo = _f32(a0 - a0_hi)
    consts.update({"GELU_A0_HI": a0_hi, "GELU_A0_LO": a0_lo, "GELU_SPLIT_VALUE": SPLIT_VALUE,
                   "GELU_SPLIT_D1": SPLIT_D1, "SIGMA_WINDOW": WINDOW})
    text = _render(fits, consts)
    path = out or Path(__file__).with_name("kernel_coeffs.py")
    path.write_text(text)
    print(f"wrote {path}")
    return fits


def _hex(v: float) -> str:
    return float(v).hex()


def _render(fits, consts) -> str:
    lines = [
        '"""Polynomial coefficients of the float32 kernels (core.numerics.kernels), generated by',
        "core/numerics/kernel_fit.py.",
        "",
        "Do not edit by hand: rerun `python -m gelulab.core.numerics.kernel_fit`. Every value is exactly a",
        "float32 (written as a float.hex literal); COEFFS[name] lists the coefficients of the Horner polynomial in",
        "its variable from the constant term up, CENTER is the shift of the variable, P0_LO the low part of the",
        "constant term, and the comments give the fit's domain and max relative error (float32 coefficients,",
        "evaluated in float64).",
        '"""',
        "",
    ]
    for k, v in consts.items():
        lines.append(f"{k} = float.fromhex({_hex(v)!r})  # {v!r}")
    lines.append("")
    lines.append("COEFFS = {")
    for name, f in fits.items():
        info = {kk: vv for kk, vv in f.items() if kk not in ("coeffs",)}
        comment = textwrap.wrap(f"{name}: {info}", width=112, break_long_words=False, break_on_hyphens=False)
        lines.append(f"    # {comment[0]}")
        lines.extend(f"    #   {part}" for part in comment[1:])
        lines.append(f"    {name!r}: (")
        lines.extend(f"        float.fromhex({_hex(c)!r})," for c in f["coeffs"])
        lines.append("    ),")
    lines.append("}")
    lines.append("CENTER = {")
    for name, f in fits.items():
        if "center" in f:
            lines.append(f"    {name!r}: float.fromhex({_hex(f['center'])!r}),")
    lines.append("}")
    lines.append("P0_LO = {")
    for name, f in fits.items():
        lines.append(f"    {name!r}: float.fromhex({_hex(f['p0_lo'])!r}),")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
