"""gelulab's own activation formulas, written once over a minimal array namespace `xp`.

Every backend hands these functions its own `xp` (the ArrayOps Protocol, `core.contracts.contract.ArrayOps`), so the
same formula runs as numpy, jax, torch or tensorflow code and stays differentiable and compilable by that framework.

Accuracy design:
* Inputs are computed in the dtype's wider type (float16/bfloat16 -> float32, float32 -> float64) where the
  device has it, then rounded once to the input dtype: the result is within 1 ULP of the correctly rounded value.
* Exact GELU uses erfc, x*Phi(x) = x/2 * erfc(-x/sqrt(2)) (Hendrycks & Gimpel 2016, eq. 1 and footnote; jax.nn.gelu
  uses the same identity), which has no 1+erf cancellation in the negative tail.
* The tanh form uses 1/2 (1 + tanh u) = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (Hendrycks & Gimpel 2016,
  section 2), which again avoids 1+tanh cancellation.
* Each form is evaluated on an input clamped to [-T, T] and selected afterwards with `where`, so +-inf, huge
  inputs and their gradients never meet inf*0 or an overflowing x^3: f(x) = x for x > T, f(x) = -0.0 for x < -T,
  where T is past the point where the true value rounds to x (resp. underflows) in every supported dtype.
* float64 tails. Where a float64 result is still normal but a factor of it (erfc, sigmoid, exp) is below the
  smallest normal, which XLA's CPU runtime flushes to zero and numpy keeps with fewer significant bits, that factor
  is carried scaled, e^(w + 64 ln 2), and the product is multiplied by 2^-64 last: exact GELU below x = -25
  (GELU_TAIL) through the asymptotic series of Mills' ratio (Abramowitz & Stegun 26.2.12), the sigmoid forms'
  derivatives where z(x) < -600 (SIGMOID_TAIL; there sigma(z) = e^z to float64 precision), and x sigma(z) for
  |x| < 1 as x (sigma(z)) so that x/4 is never formed next to the smallest normal. The closed-form derivatives
  always take these tails; the values take them for float64 inputs only (float32 and narrower inputs are far from
  them, and their graphs stay as they were).
* Rounding next to the smallest float32 normal. XLA's convert from float64 to float32 (and bfloat16) on CPU flushes
  a value that rounds at float32's 24 bits to a subnormal: y in [t - 2^-150, t - 2^-151), t = 2^-126, which IEEE
  rounding takes to t (bfloat16: every y in [t - 2^-134, t - 2^-151), through float32; measured on jax 0.10.2 and
  TensorFlow 2.21, eager and compiled). The four GELU forms and SiLU are x/2 + O(x^2) next to 0, so x = 2^-125 -
  2^-149 gave 0 instead of t on jax and TensorFlow (bfloat16: x = 2^-125 - 2^-133). Their astype moves such values
  past +-t first (min_normal_lifted), so the convert gives +-t, as IEEE rounding of the float64 value does in numpy
  and torch.
"""
from __future__ import annotations

import math

SQRT_HALF = math.sqrt(0.5)  # 1/sqrt(2)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # sqrt(2/pi), tanh form
TANH_CUBIC = 0.044715  # tanh form cubic coefficient (Hendrycks & Gimpel 2016)
SIGMOID_SCALE = 1.702  # sigmoid form x * sigmoid(1.702 x) (Hendrycks & Gimpel 2016, section 2)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# Clamp points (each catalogue entry's `clamp`): beyond +T the function equals x to the last bit of float64, beyond
# -T it underflows to -0.0. exact: |x Phi(x)| < 5e-324 for x < -38.5;  tanh: x sigmoid(2u) underflows for x < -22;
# sigmoid: x sigmoid(1.702 x) underflows for x < -438.
CLAMP_GELU_NONE = 40.0
CLAMP_GELU_TANH = 40.0
CLAMP_GELU_SIGMOID = 500.0
# SiLU: x sigmoid(x) rounds to x for x > 37 and underflows for x < -751.8 (|x| e^x < 2.5e-324).
CLAMP_SILU = 800.0


# float64 tails (see the module docstring)
GELU_TAIL = -25.0
SIGMOID_TAIL = -600.0
SCALE_LN = 64.0 * math.log(2.0)  # e^(w + SCALE_LN) = e^w 2^64
SCALE_DOWN = 2.0**-64
# Mills' ratio Phi(-a) / phi(a) = (1/a) sum_k (-1)^k (2k - 1)!! / a^(2k) (Abramowitz & Stegun 26.2.12); at a >= 25
# the first omitted term (k = 9) is 2.4e-18 of the sum (0.01 ULP); above x = -25 the erfc path stays, whose error grows
# like x^2 and would exceed the float64 goal of 2048 ULP from x = -35.3
MILLS_TERMS = tuple((-1) ** k * math.prod(range(1, 2 * k, 2)) for k in range(9))


def _below(xp, w, t):
    """w where w <= t, else t: the input of a tail branch, finite everywhere so that its unselected values (and
    their gradients) never hold inf or NaN."""
    return xp.where(w > t, t, w)


def _gelu_tail(xp, x, order):
    """For x <= GELU_TAIL: x Phi(x) (order 0), Phi(x) + x phi(x) (1), phi(x) (2 - x^2) (2), with Phi(x) = phi(x) M / a,
    a = -x, M = a Phi(-a) / phi(a) the Mills series; phi(x) enters as e^(SCALE_LN - x^2/2) / sqrt(2 pi) and the
    product is scaled by 2^-64 last (no subnormal factor where the result is normal)."""
    v = 1.0 / (x * x)
    m = MILLS_TERMS[-1]
    for c in reversed(MILLS_TERMS[:-1]):
        m = m * v + c
    if order == 0:
        factor = -m  # x Phi(x) = -phi(x) M
    elif order == 1:
        factor = x - m / x  # Phi + x phi = phi (x + M / a)
    else:
        factor = 2.0 - x * x
    e = xp.exp(SCALE_LN - 0.5 * (x * x))
    return (e * (INV_SQRT_2PI * factor)) * SCALE_DOWN


def _sigmoid_tail(xp, z, y, factor):
    """y, except where z <= SIGMOID_TAIL: there sigma(z) = e^z (1 - e^z + ...) is e^z to float64 precision, and
    the result e^z * factor (an array, finite for the clamped inputs) is formed as (e^(z + SCALE_LN) factor) 2^-64."""
    zt = _below(xp, z, SIGMOID_TAIL)
    return xp.where(z > SIGMOID_TAIL, y, (xp.exp(zt + SCALE_LN) * factor) * SCALE_DOWN)


def _clamped(xp, w, t):
    """w clamped to [-t, t] with `where` (NaN passes through unchanged, unlike some clip/maximum ops)."""
    return xp.where(w < -t, -t, xp.where(w > t, t, w))


def _tails(xp, w, y, t):
    """Select x beyond +t and -0.0 beyond -t; y elsewhere."""
    return xp.where(w > t, w, xp.where(w < -t, -0.0, y))


FLOAT32_TINY = 2.0**-126  # the smallest normal of float32 and bfloat16
# half the subnormal spacing of the dtypes computed in float64 and narrowed (float32 2^-149, bfloat16 2^-133)
NARROW_HALF_STEP = {"float32": 2.0**-150, "bfloat16": 2.0**-134}


def min_normal_lifted(where, y, name: str):
    """y, a float64 array (any shape) about to be converted to dtype `name` ("float32" or "bfloat16"), with the
    values that IEEE rounding takes to +-t (t = 2^-126, the smallest normal) moved past +-t by h, half the dtype's
    subnormal spacing: y in [t - h, t) becomes y + h, y in (-t, h - t] becomes y - h; every other value is
    unchanged, and so is the derivative (+-h is a constant). The converted result is then +-t where the framework's
    convert would flush it (module docstring, "Rounding next to the smallest float32 normal"); the backends whose
    convert flushes (jax, tensorflow) apply it in their astype. `where`: the framework's elementwise select
    (jnp.where, tf.where). Raises KeyError for another `name`."""
    h, t = NARROW_HALF_STEP[name], FLOAT32_TINY
    y = where(y < t, where(y >= t - h, y + h, y), y)
    return where(y > -t, where(y <= h - t, y - h, y), y)


def _x_sigmoid(xp, x, z, small_x: bool = False):
    """x * sigmoid(z), evaluated through the small side of the sigmoid: x sigmoid(z) for z <= 0 and
    x - x sigmoid(-z) for z > 0. The value is the same; autodiff then differentiates sigmoid where it is tiny and
    exact, instead of sigmoid (1 - sigmoid) with 1 - sigmoid cancelling to 0, so the second derivative stays
    accurate for large positive x.

    The small side s = sigmoid(-|z|) is formed from p = sigmoid(-|z|/2), q = 1 - p as s = p^2 / (p^2 + q^2)
    (exact, since e^{-|z|/2} = p/q), and multiplied into x as ((x p) p) / (p^2 + q^2): s itself underflows in
    float64 for |z| > 708, long before x s does (sigmoid form: x < -417; tanh form: x < -21.9).
    small_x (float64 inputs): for |x| < 1, where s is near 1/2 and x p p would be x/4 next to the smallest normal,
    x s is formed as x (p^2 / (p^2 + q^2))."""
    small = xp.where(z > 0, -z, z)
    p = xp.sigmoid(0.5 * small)
    q = 1.0 - p
    xs = ((x * p) * p) / (p * p + q * q)
    if small_x:
        xs_near = x * ((p * p) / (p * p + q * q))
        xs = xp.where(x < 1.0, xp.where(x > -1.0, xs_near, xs), xs)
    return xp.where(z > 0, x - xs, xs)


def relu(xp, x):
    """ReLU(x) = max(x, 0) in the input dtype; NaN propagates, ReLU(+-0) = +0, ReLU'(0) = 0 under autodiff.

    x: array of any float dtype, any shape. Returns the same dtype and shape.
    """
    return xp.where(x <= 0, 0.0, x)


def gelu_none(xp, x):
    """Exact GELU, x Phi(x) = x/2 erfc(-x/sqrt 2), computed in the wide dtype and rounded once.

    x: array of any float dtype, any shape. Returns the same dtype and shape.
    Source: Hendrycks & Gimpel, "Gaussian Error Linear Units", arXiv:1606.08415, eq. (1).
    """
    dtype = xp.dtype_name(x)
    w = xp.astype(x, xp.wide(dtype))
    t = CLAMP_GELU_NONE
    s = _clamped(xp, w, t)
    y = 0.5 * s * xp.erfc(s * -SQRT_HALF)
    if dtype == "float64":
        y = xp.where(s > GELU_TAIL, y, _gelu_tail(xp, _below(xp, s, GELU_TAIL), 0))
    return xp.astype(_tails(xp, w, y, t), dtype)


def gelu_tanh(xp, x):
    """tanh-form GELU, x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) = x sigmoid(2u), in the wide dtype.

    x: array of any float dtype, any shape. Returns the same dtype and shape.
    Source: Hendrycks & Gimpel, arXiv:1606.08415, section 2; torch.nn.functional.gelu(approximate='tanh') doc.
    """
    dtype = xp.dtype_name(x)
    w = xp.astype(x, xp.wide(dtype))
    t = CLAMP_GELU_TANH
    s = _clamped(xp, w, t)
    u = SQRT_2_OVER_PI * (s + TANH_CUBIC * (s * s * s))
    y = _x_sigmoid(xp, s, 2.0 * u, dtype == "float64")
    return xp.astype(_tails(xp, w, y, t), dtype)


def gelu_sigmoid(xp, x):
    """sigmoid-form GELU, x sigmoid(1.702 x), in the wide dtype and rounded once.

    x: array of any float dtype, any shape. Returns the same dtype and shape.
    Source: Hendrycks & Gimpel, arXiv:1606.08415, section 2.
    """
    dtype = xp.dtype_name(x)
    w = xp.astype(x, xp.wide(dtype))
    t = CLAMP_GELU_SIGMOID
    s = _clamped(xp, w, t)
    y = _x_sigmoid(xp, s, SIGMOID_SCALE * s, dtype == "float64")
    return xp.astype(_tails(xp, w, y, t), dtype)


def silu(xp, x):
    """SiLU (Swish-1), x sigmoid(x), in the wide dtype through the small side of the sigmoid, rounded once.

    x: array of any float dtype, any shape. Returns the same dtype and shape.
    Source: Elfwing, Uchibe & Doya 2018, "Sigmoid-weighted linear units", arXiv:1702.03118, eq. 1; Ramachandran,
    Zoph & Le 2017, "Searching for activation functions" (Swish with beta = 1), arXiv:1710.05941; Hendrycks & Gimpel
    2016 name it SiLU; torch.nn.functional.silu, jax.nn.silu, tf.nn.silu.
    """
    dtype = xp.dtype_name(x)
    w = xp.astype(x, xp.wide(dtype))
    t = CLAMP_SILU
    s = _clamped(xp, w, t)
    y = _x_sigmoid(xp, s, s, dtype == "float64")
    return xp.astype(_tails(xp, w, y, t), dtype)


def closed_form(act, xp, w, order: int):
    """f' (order 1) or f'' (order 2) of catalogue entry `act` by its closed form (act.d1, act.d2: the functions
    below) on w, an array of the dtype it is computed in (any shape; xp its backend's ArrayOps), clamped to
    act.clamp like the formulas (_clamped) and taking act.limits beyond it; NaN for NaN. Returns w's dtype and shape.
    Raises ValueError for another order."""
    if order not in (1, 2):
        raise ValueError(f"order={order!r}; the closed forms are f' (1) and f'' (2)")
    closed = act.d1 if order == 1 else act.d2
    t = act.clamp
    if t is None:
        y = closed(xp, w)
    else:
        lo, hi = act.limits[order]
        y = closed(xp, _clamped(xp, w, t))
        y = xp.where(w > t, hi, xp.where(w < -t, lo, y))
    return xp.where(w != w, w, y)  # noqa: PLR0124 - NaN test


# Closed-form derivatives: numpy's derivatives (it has no autodiff) and the float64 formula's derivative rules on the
# XLA backends (core.contracts.interface.implementation). Each takes and returns the wide dtype.


def relu_d1(xp, x):
    """ReLU'(x) = 1 for x > 0 else 0 (the convention of torch, jax and tf: ReLU'(0) = 0)."""
    return xp.where(x > 0, 1.0, xp.where(x <= 0, 0.0, x))


def relu_d2(xp, x):
    """ReLU''(x) = 0 (NaN for NaN input)."""
    return xp.where(x != x, x, 0.0)  # noqa: PLR0124 - NaN test


def gelu_none_d1(xp, x):
    """d/dx x Phi(x) = Phi(x) + x phi(x); below GELU_TAIL through the scaled Mills series (_gelu_tail)."""
    y = 0.5 * xp.erfc(x * -SQRT_HALF) + x * INV_SQRT_2PI * xp.exp(-0.5 * x * x)
    return xp.where(x > GELU_TAIL, y, _gelu_tail(xp, _below(xp, x, GELU_TAIL), 1))


def gelu_none_d2(xp, x):
    """d2/dx2 x Phi(x) = phi(x) (2 - x^2); below GELU_TAIL with phi scaled (_gelu_tail)."""
    y = INV_SQRT_2PI * xp.exp(-0.5 * x * x) * (2.0 - x * x)
    return xp.where(x > GELU_TAIL, y, _gelu_tail(xp, _below(xp, x, GELU_TAIL), 2))


def _tanh_parts(xp, x):
    u1 = SQRT_2_OVER_PI * (1.0 + 3.0 * TANH_CUBIC * x * x)  # u'
    u = SQRT_2_OVER_PI * (x + TANH_CUBIC * x * x * x)
    return xp.sigmoid(2.0 * u), xp.sigmoid(-2.0 * u), u1, 2.0 * u


# The sigmoid forms' tails (_sigmoid_tail): with sigma(z) sigma(-z) -> e^z and sigma(-z) - sigma(z) -> 1,
# f' = e^z (1 + x z') and f'' = e^z (2 z' + x z'' + x z'^2).


def gelu_tanh_d1(xp, x):
    """d/dx x sigma(2u) = sigma(2u) + 2 x sigma(2u) sigma(-2u) u'; e^z (1 + 2 x u') where z = 2u < SIGMOID_TAIL."""
    p, q, u1, z = _tanh_parts(xp, x)
    return _sigmoid_tail(xp, z, p + 2.0 * x * p * q * u1, 1.0 + 2.0 * x * u1)


def gelu_tanh_d2(xp, x):
    """d2/dx2 x sigma(2u) = 4 p q u' + 2 x p q (u'' - 2 (p - q) u'^2), p = sigma(2u), q = 1 - p;
    e^z (4 u' + 2 x u'' + 4 x u'^2) where z = 2u < SIGMOID_TAIL."""
    p, q, u1, z = _tanh_parts(xp, x)
    u2 = SQRT_2_OVER_PI * 6.0 * TANH_CUBIC * x
    y = 4.0 * p * q * u1 + 2.0 * x * p * q * (u2 - 2.0 * (p - q) * u1 * u1)
    return _sigmoid_tail(xp, z, y, 4.0 * u1 + 2.0 * x * (u2 + 2.0 * u1 * u1))


def gelu_sigmoid_d1(xp, x):
    """d/dx x sigma(kx) = p + k x p q, p = sigma(kx), q = sigma(-kx), k = 1.702; e^z (1 + k x) where z = kx <
    SIGMOID_TAIL."""
    k = SIGMOID_SCALE
    p, q = xp.sigmoid(k * x), xp.sigmoid(-k * x)
    return _sigmoid_tail(xp, k * x, p + k * x * p * q, 1.0 + k * x)


def gelu_sigmoid_d2(xp, x):
    """d2/dx2 x sigma(kx) = p q (2k + k^2 x (q - p)); e^z (2k + k^2 x) where z = kx < SIGMOID_TAIL."""
    k = SIGMOID_SCALE
    p, q = xp.sigmoid(k * x), xp.sigmoid(-k * x)
    return _sigmoid_tail(xp, k * x, p * q * (2.0 * k + k * k * x * (q - p)), 2.0 * k + k * k * x)


def silu_d1(xp, x):
    """d/dx x sigma(x) = sigma(x) (1 + x (1 - sigma(x))) = sigma(x) (1 + x sigma(-x)), the product with sigma(x)
    formed through the small side of the sigmoid (no subnormal sigma(x) where f' is still normal, x ~ -710);
    e^x (1 + x) where x < SIGMOID_TAIL."""
    return _sigmoid_tail(xp, x, _x_sigmoid(xp, 1.0 + x * xp.sigmoid(-x), x), 1.0 + x)


def silu_d2(xp, x):
    """d2/dx2 x sigma(x) = sigma(x) sigma(-x) (2 + x (1 - 2 sigma(x))); the tiny factor sigma(-|x|) is applied last
    through the small side of the sigmoid, the other factor being sigma(|x|) (2 + x (sigma(-x) - sigma(x)));
    e^x (2 + x) where x < SIGMOID_TAIL."""
    neg = xp.where(x > 0, -x, x)  # -|x|
    y = _x_sigmoid(xp, xp.sigmoid(-neg) * (2.0 + x * (xp.sigmoid(-x) - xp.sigmoid(x))), neg)
    return _sigmoid_tail(xp, x, y, 2.0 + x)
