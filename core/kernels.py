"""gelulab's float32 kernels: every catalogue activation and its first two derivatives in float32 arithmetic alone,
within 1 ULP of the correctly rounded value wherever the result is a normal float32 (values and first derivatives).

Written once over a backend's kernel namespace `xp` (backends/<name>/kernels.py): the array operators + - * /,
comparisons, and `xp.where`, `xp.abs`, `xp.rint` (round half to even), `xp.keep_bits(x, b)` (x with only its b
leading significant bits, by masking the low mantissa bits) and `xp.pow2(k)` (2**k from exponent bits). Inputs are
float32 arrays (the backends widen bfloat16/float16 exactly and round the float32 result once); no float64 value is
created anywhere. Every constant is a float32 value (core/kernel_coeffs.py, fitted by core/kernel_fit.py).

How each result is made accurate (the libm techniques of CORE-MATH, SLEEF and fdlibm, restated for float32 only):
* Symmetry. Every GELU form is f(x) = x S(x) with S(x) + S(-x) = 1, so f(x) = x + f(-x) and f'(x) = 1 - f'(-x):
  only x = -a <= 0 is approximated, and the x > 0 result is x - T (resp. 1 - T) with T = -f(-x) carried as a
  float32 pair hi + lo.
* One exponential. f(-a) = -2^-n F(a) E P(a): e^-s = 2^-n E with the argument s (a^2/2, k a, 2u(a)) split exactly
  into s_hi + s_lo (a^2 from the 12-bit halves of a, bit masks, no FMA needed), the Cody-Waite reduction
  r = s - n ln2 exact for its leading part (ln2's 16-bit head times n has no rounding, Sterbenz does the rest),
  and E = (1 - r) + r^2 Q(r) kept as a pair (1 - r_hi is a Fast2Sum).
* One polynomial, one Horner chain. P is a polynomial in the Moebius variable t = (a - 3)/(a + 3) (one divide)
  shifted to the middle of its range, so its constant term (a float32 pair) dominates and the chain's rounding
  errors are scaled down; coefficients are selected with `where` (exact GELU's value has two pieces, a < 1 and
  a >= 1), never gathered.
* One rounding. The product F E P is formed exactly from 8-bit heads (three 8-bit heads multiply without
  rounding) plus the small cross terms, so the only rounding of size half an ULP is the final one.
* Flush to zero. The power 2^-n is applied as 2^(64-n) then 2^-64 after the final sum, so no intermediate is
  subnormal where the result is normal (XLA and TensorFlow flush subnormals on CPUs); tiny |x| < 2^-60 take
  x/2 directly.
* Folding. XLA reassociates chains of constants ((a + C1) - C2 becomes a + (C1 - C2)): no two constants are ever
  adjacent in an additive chain, and no magic-number rounding is used (`rint` instead).

Second derivatives are accurate to a few ULP (they are closed forms on the same exponential).
Sources: Hendrycks & Gimpel, arXiv:1606.08415 (the GELU forms); Cody & Waite 1980 (argument reduction); Dekker
1971 (exact products from split operands); Sterbenz 1974 (exact subtraction).
"""
from __future__ import annotations

from gelulab.core.kernel_coeffs import (
    CENTER, COEFFS, GELU_A0_HI, GELU_A0_LO, GELU_SPLIT_D1, GELU_SPLIT_VALUE, P0_LO,
)

# ln 2 = LN2_HI + LN2_LO, LN2_HI with 16 significant bits so n * LN2_HI is exact for n < 256
LN2_HI = float.fromhex("0x1.62e4p-1")
LN2_LO = float.fromhex("0x1.7f7d1cp-20")  # ln2 - LN2_HI rounded to float32
INV_LN2 = float.fromhex("0x1.715476p+0")
TINY = 2.0**-60  # below this |x|, f(x) = x/2 to far below an ULP
SMALLEST_NORMAL = 2.0**-126
X_TIE = float.fromhex("0x1.fffffep-126")  # the float32 0x00FFFFFF: x/2 is a tie, f(x) rounds up to 2^-126
TWO_M64 = 2.0**-64
SCALED_TIE = float.fromhex("0x1.fffffep-63")  # (1 - 2^-24) 2^-62: the scaled result just below 2^-126 * 2^64
C1_HI, C1_LO = float.fromhex("0x1.988454p-2"), float.fromhex("-0x1.857936p-27")  # 1/sqrt(2 pi) = hi + lo

# clamp points: beyond A_MAX[key][order], f(-a) (resp. f'(-a), f''(a)) rounds to -0 and f(a) = a (f'(a) = 1)
A_MAX = {"gelu_none": (14.5, 14.7, 14.7)}


def _horner(u, coeffs):
    q = coeffs[-1]
    for c in reversed(coeffs[1:-1]):
        q = q * u + c
    return q


def _poly_pair(xp, u, coeffs, p0_lo, u_lo=None):
    """p0 + u Q(u) as a pair (hi, lo): the constant term dominates, the tail u Q is added by Fast2Sum; u_lo, the
    rounding error of u, enters to first order."""
    q = _horner(u, coeffs)
    tq = u * q
    p0 = coeffs[0]
    hi = p0 + tq
    lo = ((p0 - hi) + tq) + p0_lo
    if u_lo is not None:
        lo = lo + q * u_lo  # Q(u), the secant slope from the centre, stands in for P'(u)
    return hi, lo


def _select(xp, cond, a, b):
    return [xp.where(cond, p, q) for p, q in zip(a, b)]


def exp_neg(xp, s_hi, s_lo):
    """e^-(s_hi + s_lo) = 2^-n (E_hi + E_lo) for s_hi >= 0 (any float32) and |s_lo| << 1.
    Returns (n, E_hi, E_lo) with E in [0.65, 1.53] and relative error below 2^-28."""
    n = xp.rint(s_hi * INV_LN2)
    r_hi = s_hi - n * LN2_HI  # exact: n LN2_HI has no rounding, and Sterbenz
    r_lo = s_lo - n * LN2_LO
    e_hi = 1.0 - r_hi
    e1 = (1.0 - e_hi) - r_hi  # Fast2Sum remainder of 1 - r_hi
    r = r_hi + r_lo
    q, q_lo = _poly_pair(xp, r, COEFFS["EXP_Q"], P0_LO["EXP_Q"])
    e_lo = (e1 - r_lo) + (r * r) * (q + q_lo)
    return n, e_hi, e_lo


def _prod3(xp, f_hi, f_lo, p_hi, p_lo, e_hi, e_lo, f_lo2=0.0):
    """F P E for three pairs, as a pair (S, S_lo): the product of the 8-bit heads is exact, the cross terms are
    below 2^-7 of it, so S = fl(head + cross) is the one rounding."""
    f8 = xp.keep_bits(f_hi, 8)
    p8 = xp.keep_bits(p_hi, 8)
    e_f = e_hi + e_lo
    e8 = xp.keep_bits(e_f, 8)
    fr = ((f_hi - f8) + f_lo) + f_lo2
    pr = (p_hi - p8) + p_lo
    er = (e_hi - e8) + e_lo
    fp8 = f8 * p8
    head = fp8 * e8
    cross = fr * ((p_hi + p_lo) * e_f) + f8 * (pr * e_f) + fp8 * er
    s = head + cross
    s_lo = (head - s) + cross
    return s, s_lo


def _scaled(xp, s, s_lo, n):
    """(s + s_lo) 2^-n as a pair (hi, lo) through 2^(64-n) and 2^-64, no subnormal intermediate; a result that is
    exactly the tie below 2^-126 rounds to 2^-126 (what round-to-nearest-even gives without flush-to-zero)."""
    scale = xp.pow2(64.0 - n)
    v = s * scale
    hi = xp.where(xp.abs(v) == SCALED_TIE, xp.where(v > 0, SMALLEST_NORMAL, -SMALLEST_NORMAL), v * TWO_M64)
    lo = (s_lo * scale) * TWO_M64
    return hi, lo


def _a2(xp, a):
    """a^2 / 2 as an exact head (12-bit halves of a) and a small tail."""
    ah = xp.keep_bits(a, 12)
    al = a - ah
    return (0.5 * ah) * ah, al * (0.5 * (a + ah))


def _tiny_half(xp, x):
    """x/2 for |x| < 2^-60 (f(x) = x/2 + O(x^2)); 0x00FFFFFF, whose half is a tie, gives 2^-126."""
    return xp.where(x == X_TIE, SMALLEST_NORMAL, 0.5 * x)


def _two_pieces(xp, low, a, inv_a, lo: str, hi: str):
    """The polynomial pair (hi, lo) of piece `lo` (variable a - centre) where `low`, else of piece `hi`
    (variable 1/a - centre): one Horner chain, coefficients selected with `where`."""
    v = xp.where(low, a, inv_a)
    c = xp.where(low, CENTER[lo], CENTER[hi])
    u = v - c
    u_lo = (-c - u) + v  # exact remainder where c >= v; 0 where v - c is exact (Sterbenz), the rest of the range
    coeffs = _select(xp, low, COEFFS[lo], COEFFS[hi])
    return _poly_pair(xp, u, coeffs, xp.where(low, P0_LO[lo], P0_LO[hi]), u_lo)


def gelu_none(xp, x):
    """Exact GELU x Phi(x) in float32 (x: float32 array); within 1 ULP of the correctly rounded value for every
    float32 x whose result is normal.

    f(-a) = -2^-n E F P: for a < 2.5, E = e^{-(a^2 + a)/2} (with the reduction), F = a, P = K(a) = R(a) e^{a/2};
    for a >= 2.5, E = e^{-a^2/2}, F = 1, P = W(a) = a R(a); R(a) = Phi(-a) e^{a^2/2} (both P are flat)."""
    a = xp.abs(x)
    amax = A_MAX["gelu_none"][0]
    ac = xp.where(a > amax, amax, a)
    low = ac < GELU_SPLIT_VALUE
    ah = xp.keep_bits(ac, 12)
    al = ac - ah
    sq = (0.5 * ah) * ah  # exact
    beta = xp.where(low, 0.5, 0.0)
    lin = beta * ah  # exact
    s_hi = sq + lin
    s_err = xp.where(sq > lin, (sq - s_hi) + lin, (lin - s_hi) + sq)  # Fast2Sum, larger operand first
    s_lo = s_err + al * ((0.5 * (ac + ah)) + beta)
    n, e_hi, e_lo = exp_neg(xp, s_hi, s_lo)
    p_hi, p_lo = _two_pieces(xp, low, ac, 1.0 / ac, "GELU_K", "GELU_W")
    f = xp.where(low, ac, 1.0)
    s, s_lo = _prod3(xp, f, 0.0, p_hi, p_lo, e_hi, e_lo)
    t_hi, t_lo = _scaled(xp, s, s_lo, n)
    y = xp.where(x > 0, (x - t_hi) - t_lo, -t_hi)
    y = xp.where(x < -amax, -0.0, y)
    return xp.where(a < TINY, _tiny_half(xp, x), y)


def gelu_none_d1(xp, x):
    """d/dx x Phi(x) = Phi(x) + x phi(x) in float32; f'(-a) = e^{-a^2/2} (a - A0) D2(a), f'(a) = 1 - f'(-a),
    A0 = 0.75179... the root (GELU's minimum), D2 = (R(a) - a phi(0)) / (a - A0) flat in [-0.67, -0.42]."""
    a = xp.abs(x)
    amax = A_MAX["gelu_none"][1]
    ac = xp.where(a > amax, amax, a)
    s_hi, s_lo = _a2(xp, ac)
    n, e_hi, e_lo = exp_neg(xp, s_hi, s_lo)
    p_hi, p_lo = _two_pieces(xp, ac < GELU_SPLIT_D1, ac, 1.0 / ac, "GELU_D2_LO", "GELU_D2_HI")
    d_hi = ac - GELU_A0_HI
    # Fast2Sum remainder of ac - A0_HI, operands ordered by size; A0_LO is added inside _prod3, never next to A0_HI
    d_lo = xp.where(ac < GELU_A0_HI, (-GELU_A0_HI - d_hi) + ac, (ac - d_hi) - GELU_A0_HI)
    s, s_lo = _prod3(xp, d_hi, d_lo, p_hi, p_lo, e_hi, e_lo, f_lo2=-GELU_A0_LO)
    t_hi, t_lo = _scaled(xp, s, s_lo, n)
    y = xp.where(x > 0, (1.0 - t_hi) - t_lo, t_hi)
    return xp.where(x < -amax, -0.0, xp.where(x > amax, 1.0, y))


def gelu_none_d2(xp, x):
    """d2/dx2 x Phi(x) = phi(x) (2 - x^2) in float32, even in x; 2 - x^2 is formed exactly from the 12-bit halves
    of |x| (so the zeros at +-sqrt 2 keep their relative accuracy) and multiplied like the other kernels."""
    a = xp.abs(x)
    amax = A_MAX["gelu_none"][2]
    ac = xp.where(a > amax, amax, a)
    ah = xp.keep_bits(ac, 12)
    al = ac - ah
    sq = ah * ah  # exact
    cross = (ah + ah) * al  # exact
    n, e_hi, e_lo = exp_neg(xp, 0.5 * sq, 0.5 * (cross + al * al))
    g1 = 2.0 - sq  # exact where a^2 is in [1, 4]
    g_hi = g1 - cross
    bb = g_hi - g1
    g_lo = ((g1 - (g_hi - bb)) + (-cross - bb)) - al * al  # TwoSum remainder, minus al^2
    s, s_lo = _prod3(xp, C1_HI, C1_LO, g_hi, g_lo, e_hi, e_lo)
    t_hi, _ = _scaled(xp, s, s_lo, n)
    return xp.where(a > amax, 0.0, t_hi)


KERNELS = {
    "gelu_none": (gelu_none, gelu_none_d1, gelu_none_d2),
}
