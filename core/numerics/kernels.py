"""gelulab's float32 kernels: every catalogue activation and its first two derivatives in float32 arithmetic alone,
within 1 ULP of the correctly rounded value wherever the result is a normal float32 (values and first derivatives).

Written once over a backend's kernel namespace `xp` (backends/<name>/kernels.py): the array operators + - * /,
comparisons, and `xp.where`, `xp.abs`, `xp.rint` (round half to even), `xp.keep_bits(x, b)` (a head of x with at
most b significant bits and an exact remainder: its low mantissa bits masked, or Dekker's split where products are
never contracted into FMAs), `xp.pow2(k)` (2**k, exact) and `xp.bits_equal(x, u)` (x has the bit pattern u, an
int). Inputs are
float32 arrays (the backends widen bfloat16/float16 exactly and round the float32 result once); no float64 value is
created anywhere. Every constant is a float32 value (core/numerics/kernel_coeffs.py, fitted by
core/numerics/kernel_fit.py).

How each result is made accurate (the libm techniques of CORE-MATH, SLEEF and fdlibm, restated for float32 only):
* Symmetry. Every GELU form is f(x) = x S(x) with S(x) + S(-x) = 1, so f(x) = x + f(-x) and f'(x) = 1 - f'(-x):
  only x = -a <= 0 is approximated, and the x > 0 result is x - T (resp. 1 - T) with T = -f(-x) carried as a
  float32 pair hi + lo.
* One exponential. f(-a) = -2^-n F(a) E P(a): e^-s = 2^-n E with the argument s (a^2/2, k a, 2u(a)) split exactly
  into s_hi + s_lo (a^2 from the 12-bit halves of a, no FMA needed), the Cody-Waite reduction
  r = s - n ln2 exact for its leading part (ln2's 16-bit head times n has no rounding, Sterbenz does the rest),
  and E = (1 - r) + r^2 Q(r) kept as a pair (1 - r_hi is a Fast2Sum).
* One polynomial, one Horner chain (exact GELU). P is a polynomial in u = v - c, with v = a below the split
  point a = 2 (GELU_SPLIT_VALUE, GELU_SPLIT_D1) and v = 1/a above it (one divide) and c a centre inside the
  piece's range chosen by the fit, so its constant term (a float32 pair) dominates and the chain's rounding errors
  are scaled down; the two pieces' coefficients are selected with `where`, never gathered, and run through one
  Horner chain. The sigmoid forms (x sigma(z(x)): SiLU, sigmoid and tanh GELU) need no polynomial but the
  exponential's: sigma(-z) = e^-z / (1 + e^-z) by one divide and its exact remainder (12-bit heads), and near the
  zero of f' (|a - A0| < SIGMA_WINDOW) f' = (a - A0) J(a) with J a short polynomial in a - A0.
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

import struct
from collections.abc import Callable
from dataclasses import dataclass

from gelulab.core.numerics import kernel_coeffs as KC
from gelulab.core.numerics.kernel_coeffs import (
    CENTER,
    COEFFS,
    GELU_A0_HI,
    GELU_A0_LO,
    GELU_SPLIT_D1,
    GELU_SPLIT_VALUE,
    P0_LO,
    SIGMA_WINDOW,
)

# ln 2 = LN2_HI + LN2_LO, LN2_HI with 16 significant bits so n * LN2_HI is exact for n < 256
LN2_HI = float.fromhex("0x1.62e4p-1")
LN2_LO = float.fromhex("0x1.7f7d1cp-20")  # ln2 - LN2_HI rounded to float32
INV_LN2 = float.fromhex("0x1.715476p+0")
TINY = 2.0**-60  # below this |x|, f(x) = x/2 to far below an ULP
SMALLEST_NORMAL = 2.0**-126
TWO_M64 = 2.0**-64
X_TIE_BITS = 0x00FFFFFF
SCALED_TIE_BITS = 0x207FFFFF  # (1 - 2^-24) 2^-62: the scaled result just below 2^-126 * 2^64
C1_HI, C1_LO = float.fromhex("0x1.988454p-2"), float.fromhex("-0x1.857936p-27")  # 1/sqrt(2 pi) = hi + lo



@dataclass(frozen=True)
class Kernel:
    """The float32 kernels of one catalogue entry (its `kernel` field, core.activations).

    value, d1, d2: f, f', f'' as functions (xp, x) of a float32 array x over a backend's kernel namespace xp.
    a_max: (order 0, 1, 2) clamp points in |x|: beyond a_max[order], f(-a) (resp. f'(-a)) rounds to -0 in float32
      and f(a) to a (f'(a) to 1), and f''(+-a) is below the smallest normal (the kernel returns 0); None where
      nothing is clamped (ReLU).
    d1_root: A0 > 0 with f'(-A0) = 0 (the minimum of f), the float32 nearest the root (core.numerics.kernel_coeffs,
      fitted by core/numerics/kernel_fit.py); None where f' has no such zero. The fast oracle of `gelulab verify`
      sends inputs near -A0 to mpmath.
    """

    value: Callable
    d1: Callable
    d2: Callable
    a_max: tuple | None = None
    d1_root: float | None = None

    def function(self, order: int) -> Callable:
        """f (order 0), f' (1) or f'' (2); ValueError for another order."""
        if order not in (0, 1, 2):
            raise ValueError(f"order={order!r}; the kernels cover orders 0, 1 and 2")
        return (self.value, self.d1, self.d2)[order]


# exact GELU's clamp points: the fitted ranges of its value and f' polynomials (core/numerics/kernel_fit.py)
GELU_NONE_A_MAX = (14.5, 14.7, 14.7)


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
    n = xp.rint((s_hi + s_lo) * INV_LN2)  # |r| <= ln2/2 + rounding, whatever the split of s
    r_hi = s_hi - n * LN2_HI  # exact: n LN2_HI has no rounding, and Sterbenz
    r_lo = s_lo - n * LN2_LO
    e_hi = 1.0 - r_hi
    e1 = (1.0 - e_hi) - r_hi  # Fast2Sum remainder of 1 - r_hi
    r = r_hi + r_lo
    q, q_lo = _poly_pair(xp, r, COEFFS["EXP_Q"], P0_LO["EXP_Q"])
    e_lo = (e1 - r_lo) + (r * r) * (q + q_lo)
    return n, e_hi, e_lo


def _keep_const(v: float, bits: int) -> float:
    """keep_bits for a Python float: v rounded to float32, its low 24 - bits mantissa bits cleared."""
    (u,) = struct.unpack("<I", struct.pack("<f", v))
    return struct.unpack("<f", struct.pack("<I", u & ((0xFFFFFFFF << (24 - bits)) & 0xFFFFFFFF)))[0]


def _keep(xp, v, bits):
    """xp.keep_bits for arrays; for a Python float constant, a value computed once at import (_CONST_HEADS), so
    tracing compilers never see numpy."""
    if isinstance(v, float):
        return _CONST_HEADS[(v, bits)]
    return xp.keep_bits(v, bits)


def _prod3(xp, f_hi, f_lo, p_hi, p_lo, e_hi, e_lo, f_lo2=0.0):
    """F P E for three pairs, as a pair (S, S_lo): the product of the 8-bit heads is exact, the cross terms are
    below 2^-7 of it, so S = fl(head + cross) is the one rounding."""
    f8 = _keep(xp, f_hi, 8)
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
    # compared as bits: LLVM folds a float compare here away (in IEEE arithmetic the select is a no-op; under
    # flush-to-zero it is not)
    hi = xp.where(
        xp.bits_equal(xp.abs(v), SCALED_TIE_BITS), xp.where(v > 0, SMALLEST_NORMAL, -SMALLEST_NORMAL), v * TWO_M64
    )
    lo = (s_lo * scale) * TWO_M64
    return hi, lo


def _a2(xp, a):
    """a^2 / 2 as an exact head (12-bit halves of a) and a small tail."""
    ah = xp.keep_bits(a, 12)
    al = a - ah
    return (0.5 * ah) * ah, al * (0.5 * (a + ah))


def _tiny_half(xp, x):
    """x/2 for |x| < 2^-60 (f(x) = x/2 + O(x^2)); 0x00FFFFFF, whose half is a tie, gives 2^-126."""
    return xp.where(xp.bits_equal(x, X_TIE_BITS), SMALLEST_NORMAL, 0.5 * x)  # bits: see _scaled


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

    f(-a) = -2^-n E F P: for a < 2 (GELU_SPLIT_VALUE), E = e^{-(a^2 + a)/2} (with the reduction), F = a,
    P = K(a) = R(a) e^{a/2}, a polynomial in a; for a >= 2, E = e^{-a^2/2}, F = 1, P = W(a) = a R(a), a polynomial
    in 1/a; R(a) = Phi(-a) e^{a^2/2} (both P are flat: core/numerics/kernel_fit.py fits them)."""
    a = xp.abs(x)
    amax = GELU_NONE_A_MAX[0]
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
    A0 = 0.75179... the root (GELU's minimum), D2 = (R(a) - a phi(0)) / (a - A0) a polynomial in a below
    a = 2 (GELU_SPLIT_D1) and in 1/a above (pieces GELU_D2_LO, GELU_D2_HI)."""
    a = xp.abs(x)
    amax = GELU_NONE_A_MAX[1]
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
    amax = GELU_NONE_A_MAX[2]
    ac = xp.where(a > amax, amax, a)
    ah = xp.keep_bits(ac, 12)
    al = ac - ah
    sq = ah * ah  # exact
    cross = (ah + ah) * al  # exact
    n, e_hi, e_lo = exp_neg(xp, 0.5 * sq, 0.5 * (cross + al * al))
    g1, g1_err = _two_sum(2.0, -sq)  # exact (no remainder) where a^2 is in [1, 4]
    g_hi, g_err = _two_sum(g1, -cross)
    g_lo = (g_err + g1_err) - al * al
    s, s_lo = _prod3(xp, C1_HI, C1_LO, g_hi, g_lo, e_hi, e_lo)
    t_hi, _ = _scaled(xp, s, s_lo, n)
    return xp.where(a > amax, 0.0, t_hi)


# --- x sigma(z(x)) forms: SiLU (z = x), sigmoid GELU (z = 1.702 x), tanh GELU (z = 2u(x)) ---------------------

SIG_K_HI, SIG_K_LO = float.fromhex("0x1.b3ap+0"), float.fromhex("0x1.645a1cp-12")  # 1.702 = hi (12 bits) + lo
TANH_C_HI, TANH_C_LO = float.fromhex("0x1.988p+0"), float.fromhex("0x1.14cf5p-14")  # 2 sqrt(2/pi), hi 12 bits
TANH_D_HI, TANH_D_LO = float.fromhex("0x1.24p-4"), float.fromhex("0x1.13ca94p-14")  # 2 sqrt(2/pi) 0.044715, hi 10 bits


def _split(xp, v, bits):
    hi = _keep(xp, v, bits)
    return hi, v - hi


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def z_silu(xp, a):
    """z = a and a z'(a) = a, exact."""
    return (a, 0.0), (a, 0.0)


def z_sigmoid(xp, a):
    """z = 1.702 a = a z'(a) as a pair: 1.702's 12-bit head times a's 12-bit head is exact."""
    ah, al = _split(xp, a, 12)
    z = (SIG_K_HI * ah, SIG_K_HI * al + SIG_K_LO * a)
    return z, z


def z_tanh(xp, a):
    """z = 2u(a) = c a + d a^3 and a z'(a) = c a + 3 d a^3 (c = 2 sqrt(2/pi), d = 0.044715 c) as pairs whose low
    parts are below 2^-10 of the value: c a from 12-bit heads; a^3 = ah Ah + small, ah the 12-bit head of a and Ah
    the 12-bit head of ah^2 (exact), so ah Ah is exact, and its 12-bit head times d's 10-bit head is exact; the two
    heads are summed with TwoSum."""
    ah, al = _split(xp, a, 12)
    ca_hi = TANH_C_HI * ah
    ca_lo = TANH_C_HI * al + TANH_C_LO * a
    sq = ah * ah  # exact, 24 bits
    sq12, sqr = _split(xp, sq, 12)
    cube = ah * sq12  # exact, 24 bits
    c12, cr = _split(xp, cube, 12)
    # a^3 - ah sq12 = ah sqr + al ah^2 + a al (a + ah)
    rest3 = (ah * sqr + al * sq) + a * (al * (a + ah))
    d3_lo = TANH_D_HI * cr + (TANH_D_LO * cube + (TANH_D_HI + TANH_D_LO) * rest3)
    z_hi, z_err = _two_sum(ca_hi, TANH_D_HI * c12)
    w_hi, w_err = _two_sum(ca_hi, (3.0 * TANH_D_HI) * c12)
    return (z_hi, (z_err + ca_lo) + d3_lo), (w_hi, (w_err + ca_lo) + 3.0 * d3_lo)


def _prod2(xp, f_hi, f_lo, p_hi, p_lo):
    """F P for two pairs, as a pair (S, S_lo): the 12-bit heads multiply exactly, the cross terms are below 2^-11."""
    f12, fr = _split(xp, f_hi, 12)
    p12, pr = _split(xp, p_hi, 12)
    fr = fr + f_lo
    pr = pr + p_lo
    head = f12 * p12
    cross = fr * (p_hi + p_lo) + f12 * pr
    s = head + cross
    return s, (head - s) + cross


def _sigma_scaled(xp, n, e_hi, e_lo):
    """With e^-z = 2^-n E (E = e_hi + e_lo): sigma(-z) = e^-z / (1 + e^-z) = 2^-n T, returned as T (pair) and
    the denominator D = 1 + e^-z (pair) and 2^-m (m = min(n, 100)). T = E / D by one divide and the exact
    remainder E - T D (12-bit heads of T and D)."""
    e_f = e_hi + e_lo
    e_lo = (e_hi - e_f) + e_lo  # Fast2Sum: E as a normalised pair, so t_hi below is within an ULP of T
    e_hi = e_f
    m = xp.where(n > 100.0, 100.0, n)
    down = xp.pow2(-m)
    eps_hi = e_hi * down
    eps_lo = e_lo * down
    d_hi = 1.0 + eps_hi
    d_lo = ((1.0 - d_hi) + eps_hi) + eps_lo
    t_hi = e_hi / d_hi
    th, tl = _split(xp, t_hi, 12)
    dh, dl = _split(xp, d_hi, 12)
    r = (((e_hi - th * dh) - th * dl) - tl * dh) - tl * dl  # e_hi - t_hi d_hi, exact to far below 2^-24 t_hi
    r = (r + e_lo) - t_hi * d_lo
    t_lo = r * (1.0 - t_hi * down)  # r / D, with 1 / D = 1 - sigma(-z)
    return t_hi, t_lo, d_hi, d_lo, down


def _sig_value(key, zfun, amax):
    def value(xp, x):
        a = xp.abs(x)
        ac = xp.where(a > amax, amax, a)
        (z_hi, z_lo), _ = zfun(xp, ac)
        n, e_hi, e_lo = exp_neg(xp, z_hi, z_lo)
        t_hi, t_lo, *_ = _sigma_scaled(xp, n, e_hi, e_lo)
        s, s_lo = _prod2(xp, ac, 0.0, t_hi, t_lo)
        y_hi, y_lo = _scaled(xp, s, s_lo, n)
        y = xp.where(x > 0, (x - y_hi) - y_lo, -y_hi)
        y = xp.where(x < -amax, -0.0, y)
        return xp.where(a < TINY, _tiny_half(xp, x), y)

    value.__name__ = key
    value.__doc__ = (f"{key}: x sigma(z(x)) in float32 (x: float32 array), within 1 ULP where the result is normal; "
                     "f(-a) = -a sigma(-z(a)), f(a) = a + f(-a).")
    return value


def _sigma_parts(xp, x, zfun, amax):
    """What f' and f'' of a sigmoid form share: a clamped at amax, the pairs z(a) and a z'(a), e^-z = 2^-n E,
    T = sigma(-z) = 2^-n (t_hi + t_lo) with D = 1 + e^-z and 2^-m (_sigma_scaled), and g = 1 - sigma(-z) as a pair."""
    a = xp.abs(x)
    ac = xp.where(a > amax, amax, a)
    (z_hi, z_lo), w = zfun(xp, ac)
    n, e_hi, e_lo = exp_neg(xp, z_hi, z_lo)
    t_hi, t_lo, d_hi, d_lo, down = _sigma_scaled(xp, n, e_hi, e_lo)
    tu = t_hi * down
    tl = t_lo * down
    g_hi = 1.0 - tu
    g_lo = ((1.0 - g_hi) - tu) - tl
    return a, ac, w, n, (t_hi, t_lo), (d_hi, d_lo), (tu, tl), (g_hi, g_lo)


def _near_root(xp, ac, root_hi, root_lo, name, v_hi, v_lo):
    """(v_hi, v_lo) replaced, where |a - root| < SIGMA_WINDOW, by (a - root) P(a - root) with P the fitted window
    polynomial `name` (the factor that cancels next to its zero keeps its relative accuracy there)."""
    r_hi = ac - root_hi
    win = xp.abs(r_hi) < SIGMA_WINDOW
    q_hi, q_lo = _poly_pair(xp, r_hi, COEFFS[name], P0_LO[name])
    rw_hi, rw_lo = _prod2(xp, r_hi, -root_lo, q_hi, q_lo)  # a - root_hi is exact in the window (Sterbenz)
    return xp.where(win, rw_hi, v_hi), xp.where(win, rw_lo, v_lo)


def _sig_d1(key, zfun, amax):
    name = key.upper()
    a0_hi, a0_lo = getattr(KC, f"{name}_A0_HI"), getattr(KC, f"{name}_A0_LO")

    def d1(xp, x):
        # f'(-a) = e^-z J / D^2 = 2^-n T g J, g = 1/D = 1 - sigma(-z), J = D - a z'(a) (zero at f's minimum)
        _, ac, (w_hi, w_lo), n, (t_hi, t_lo), (d_hi, d_lo), _, (g_hi, g_lo) = _sigma_parts(xp, x, zfun, amax)
        j_hi, j_err = _two_sum(d_hi, -w_hi)
        j_lo = (j_err + d_lo) - w_lo
        # near the root A0 of J, J = (a - A0) J2(a - A0) with J2 a polynomial (J from E cancels there)
        j_hi, j_lo = _near_root(xp, ac, a0_hi, a0_lo, f"{name}_J2", j_hi, j_lo)
        s, s_lo = _prod3(xp, t_hi, t_lo, g_hi, g_lo, j_hi, j_lo)
        y_hi, y_lo = _scaled(xp, s, s_lo, n)
        y = xp.where(x > 0, (1.0 - y_hi) - y_lo, y_hi)
        return xp.where(x < -amax, -0.0, xp.where(x > amax, 1.0, y))

    d1.__name__ = f"{key}_d1"
    d1.__doc__ = (
        f"{key}: f'(x) in float32, within 1 ULP where normal; f'(-a) = sigma(-z) (1 - a z' sigma(z)), "
        "f'(a) = 1 - f'(-a)."
    )
    return d1


def _sig_d2(key, zfun, zpfun, amax):
    name = key.upper()
    b0_hi, b0_lo = getattr(KC, f"{name}_B0_HI"), getattr(KC, f"{name}_B0_LO")

    def d2(xp, x):
        # f'' is even: f''(-a) = T g B, T = sigma(-z), g = 1 - T, B = z' (2 - a z' (1 - 2T)) + 6 d a^2 (the last
        # term for the tanh form only); every factor is a pair, so B keeps its relative accuracy near its zeros
        a, ac, (w_hi, w_lo), n, (t_hi, t_lo), _, (tu, tl), (g_hi, g_lo) = _sigma_parts(xp, x, zfun, amax)
        h_hi = 1.0 - (tu + tu)  # 1 - 2T
        h_lo = ((1.0 - h_hi) - (tu + tu)) - (tl + tl)
        q_hi, q_lo = _prod2(xp, w_hi, w_lo, h_hi, h_lo)  # a z' (1 - 2T)
        m_hi, m_err = _two_sum(2.0, -q_hi)
        m_lo = m_err - q_lo
        (zp_hi, zp_lo), (c_hi, c_lo) = zpfun(xp, ac)
        b1_hi, b1_lo = _prod2(xp, zp_hi, zp_lo, m_hi, m_lo)
        b_hi, b_err = _two_sum(b1_hi, c_hi)
        b_lo = (b_err + b1_lo) + c_lo
        # near the zero B0 of B, B = (a - B0) B2(a - B0) with B2 a polynomial (B from T cancels there)
        b_hi, b_lo = _near_root(xp, ac, b0_hi, b0_lo, f"{name}_B2", b_hi, b_lo)
        s, s_lo = _prod3(xp, t_hi, t_lo, g_hi, g_lo, b_hi, b_lo)
        y_hi, _ = _scaled(xp, s, s_lo, n)
        return xp.where(a > amax, 0.0, y_hi)

    d2.__name__ = f"{key}_d2"
    d2.__doc__ = f"{key}: f''(x) in float32 (within a few ULP), even in x."
    return d2


def zp_silu(xp, a):
    """z'(a) = 1 and the tanh form's extra term 6 d a^2 (0 here), as pairs."""
    return (1.0, 0.0), (0.0, 0.0)


def zp_sigmoid(xp, a):
    """z'(a) = 1.702 and no extra term, as pairs."""
    return (SIG_K_HI, SIG_K_LO), (0.0, 0.0)


def zp_tanh(xp, a):
    """z'(a) = c + 3 d a^2 and 6 d a^2 as pairs: a^2 from 12-bit halves, its 12-bit head times 3d's 8-bit head
    exact, c added by TwoSum."""
    ah, al = _split(xp, a, 12)
    sq = ah * ah  # exact
    sq12, sqr = _split(xp, sq, 12)
    d3 = 3.0 * TANH_D_HI
    t3_hi = d3 * sq12  # exact
    t3_lo = d3 * sqr + (3.0 * TANH_D_LO) * sq + (3.0 * (TANH_D_HI + TANH_D_LO)) * (al * (a + ah))
    zp_hi, zp_err = _two_sum(TANH_C_HI, t3_hi)
    return (zp_hi, (zp_err + TANH_C_LO) + t3_lo), (t3_hi + t3_hi, t3_lo + t3_lo)


# --- ReLU -------------------------------------------------------------------------------------------------------


def relu(xp, x):
    """max(x, 0): +0 for x <= 0 (ReLU(-0) = +0), NaN propagates."""
    return xp.where(x <= 0, 0.0, x)


def relu_d1(xp, x):
    """ReLU'(x) = 1 for x > 0, 0 for x <= 0 (the frameworks' ReLU'(0) = 0), NaN for NaN."""
    return xp.where(x > 0, 1.0, xp.where(x <= 0, 0.0, x))


def relu_d2(xp, x):
    """ReLU''(x) = 0, NaN for NaN; computed from x so that a second-order graph stays connected to x."""
    return xp.where(x != x, x, 0.0)  # noqa: PLR0124 - NaN test (the x branch keeps the graph connected)


def sigmoid_kernel(key: str, z: Callable, zp: Callable, a_max: tuple) -> Kernel:
    """The Kernel of the x sigma(z(x)) form named `key`: z(xp, a) -> ((z, z_lo), (a z'(a), lo)) and
    zp(xp, a) -> ((z'(a), lo), (a z''(a), lo)) as float32 pairs (z_silu, z_sigmoid, z_tanh and zp_...), a_max its
    clamp points per order (see Kernel). Its fitted constants are core.numerics.kernel_coeffs' KEY_A0_HI/LO and
    KEY_B0_HI/LO (the zeros of f' and f'') and the window polynomials COEFFS["KEY_J2"], COEFFS["KEY_B2"] (KEY =
    key.upper(), the names core/numerics/kernel_fit.py gives them)."""
    a_max = tuple(a_max)
    return Kernel(_sig_value(key, z, a_max[0]), _sig_d1(key, z, a_max[1]), _sig_d2(key, z, zp, a_max[2]),
                  a_max=a_max, d1_root=getattr(KC, f"{key.upper()}_A0_HI"))


BF16_TIE_BITS = 0x00FF0000  # the bfloat16 0x00FF as float32: its half rounds up to 2^-126 in bfloat16


def kernel_function(activation, order: int, dtype: str = "float32"):
    """The float32 kernel f(xp, x) of catalogue entry `activation` (its `kernel` field; order 0, 1, 2) for inputs
    of `dtype` (float32, bfloat16, float16), whose result is then rounded once to `dtype`. For bfloat16 the value of
    an entry with `half_at_zero` (f(x) = x/2 + c x^2, c > 0) at 0x00FF, the one input whose half lies in float32's
    subnormals while its bfloat16 rounding is the normal 2^-126, is given as 2^-126 (flush-to-zero would lose it).
    Raises ValueError naming the key for an entry without a kernel, or for an order other than 0, 1, 2."""
    kern = activation.kernel
    if kern is None:
        raise ValueError(f"activation {activation.key!r} has no float32 kernel (impl 'kernel'); use impl 'formula'")
    fn = kern.function(order)
    if dtype != "bfloat16" or order != 0 or not activation.half_at_zero:
        return fn

    def bf16(xp, x):
        return xp.where(xp.bits_equal(x, BF16_TIE_BITS), SMALLEST_NORMAL, fn(xp, x))

    return bf16


_CONST_HEADS = {(v, b): _keep_const(v, b) for v in (C1_HI, SIG_K_HI, 1.0) for b in (8, 12)}
