"""Array API backend: gelulab's formulas over array-api-strict, which offers the standard's functions alone.

The standard has exp but neither erfc nor a logistic sigmoid, so both are written here in its operations:
* erfc(x) for |x| < 1 as 1 - erf(|x|), erf by its series of positive terms
  erf(a) = 2/sqrt(pi) e^-a^2 sum_k (2 a^2)^k a / (1 3 ... (2k + 1)) (Abramowitz & Stegun 7.1.6), and for |x| >= 1 by
  the continued fraction erfc(a) = 2a e^-a^2 / sqrt(pi) / (2a^2 + 1 - 1*2 / (2a^2 + 5 - 3*4 / (2a^2 + 9 - ...)))
  (A&S 7.1.14, its even part), evaluated from a fixed depth; e^-a^2 is formed from a = hi + lo with hi^2 exact, so
  a^2 is not rounded; erfc(-a) = 2 - erfc(a). Within 20 ULP of the correctly rounded float64 value up to the
  underflow (at most 15 measured against mpmath on 20,000 points of [-6, 27.5]), well inside gelulab's float64
  goal.
* sigmoid(x) as 1 / (1 + e^-x) for x > 0 and e^x / (1 + e^x) otherwise (no overflow).
derivative: the catalogue's closed forms (core.numerics.formulas), as the numpy backend does; no autodiff, no compiler, no
builtins, no kernels (the standard has no bit casts).
"""
from __future__ import annotations

import math
import sys
from contextlib import nullcontext

import array_api_strict as xp
import numpy as np

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.formulas import closed_form
from gelulab.core.parity.cpu_dispatch import numpy_level

_DTYPES = {"float32": xp.float32, "float64": xp.float64}
_NAMES = {v: k for k, v in _DTYPES.items()}
_CPU = xp.__array_namespace_info__().default_device()
SERIES_TERMS = 27  # erf series for a < 1: the first term left out is below 1e-26 of the sum
FRACTION_DEPTH = 100  # continued fraction for a >= 1: within 4 ULP of float64 from a = 1 (measured)
ERFC_ZERO = 28.0  # erfc(a) underflows to 0 in float64 beyond a = 27.3; larger a take this value
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def setup(device: str) -> None:
    """array-api-strict runs on the host (its CPU_DEVICE); raises RuntimeError for another device."""
    if device != "cpu":
        raise RuntimeError(f"the array_api backend runs on the cpu only, not on {device!r}")


def apply_settings(settings) -> dict:
    """Nothing to set: array-api-strict computes elementwise on one thread, in float64 natively. Returns {}."""
    return {}


def formula_scope():
    """No scope is needed (contextlib.nullcontext())."""
    return nullcontext()


def versions() -> dict:
    """{"array_api_strict": version, "array_api": the standard's version, "numpy": version} (array-api-strict
    computes with numpy)."""
    return {"array_api_strict": xp.__version__, "array_api": xp.__array_api_version__, "numpy": np.__version__}


def cpu_dispatch() -> str:
    """numpy's SIMD dispatch level (core.parity.cpu_dispatch.numpy_level): array-api-strict's functions are numpy's."""
    return numpy_level()


def threads() -> dict:
    """Threads in effect: one ({"intra_op": 1}); the elementwise functions run on one thread."""
    return {"intra_op": 1}


def asarray(a: np.ndarray, device: str):
    """numpy float32 or float64 array (any shape) -> an array_api_strict.Array copy of the same dtype and shape on
    the CPU device. ValueError naming the dtype for another (the namespace has no bfloat16 or float16)."""
    a = np.asarray(a)
    if a.dtype.name not in _DTYPES:
        raise ValueError(f"the array_api backend holds {list(_DTYPES)} arrays, not {a.dtype.name}")
    return xp.asarray(a, copy=True, device=_CPU)


def to_numpy(x) -> np.ndarray:
    """array_api_strict.Array -> a numpy copy of the same dtype and shape (by DLPack, the standard's exchange)."""
    return np.from_dlpack(x).copy()


# ArrayOps


def where(c, a, b):
    """xp.where(c, a, b) with broadcasting; a Python-scalar branch takes the other branch's dtype (the standard's
    rule; two scalar branches are refused by the namespace)."""
    return xp.where(c, a, b)


def astype(x, name: str):
    """x as dtype `name` ("float32" or "float64"); ValueError for another."""
    if name not in _DTYPES:
        raise ValueError(f"dtype {name!r}; the array_api backend holds {list(_DTYPES)}")
    return xp.astype(x, _DTYPES[name])


def dtype_name(x) -> str:
    """The dtype name of x ("float32", "float64"; another name such as "int64" for other dtypes)."""
    return _NAMES.get(x.dtype) or str(x.dtype).rpartition(".")[2]


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide: float32, float64 -> float64)."""
    return get_dtype(name).wide


def exp(x):
    """e**x elementwise (xp.exp), x's dtype."""
    return xp.exp(x)


def sigmoid(x):
    """Logistic sigmoid 1 / (1 + e**-x) elementwise, through e^-|x| (never overflows), x's dtype."""
    e = xp.exp(xp.where(x > 0, -x, x))
    return xp.where(x > 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _exp_neg_square(a):
    """e^(-a^2) for 0 <= a <= ERFC_ZERO, with a = hi + lo and hi^2 exact: e^(-hi^2) e^(-lo (a + hi))."""
    scale = 2.0**20 if a.dtype == xp.float64 else 2.0**6  # hi has at most 25 (11) significant bits
    hi = xp.floor(a * scale) / scale
    return xp.exp(-(hi * hi)) * xp.exp(-((a - hi) * (a + hi)))


def _erf_series(a):
    """erf(a) for 0 <= a < 1 (A&S 7.1.6: positive terms, no cancellation)."""
    term, total, v = a, a, 2.0 * (a * a)
    for k in range(1, SERIES_TERMS):
        term = term * v / (2 * k + 1)
        total = total + term
    return TWO_OVER_SQRT_PI * _exp_neg_square(a) * total


def _erfc_fraction(a):
    """erfc(a) for 1 <= a <= ERFC_ZERO (A&S 7.1.14, even part of the continued fraction, FRACTION_DEPTH deep)."""
    v = 2.0 * (a * a)
    f = v + (4 * FRACTION_DEPTH + 1)
    for k in range(FRACTION_DEPTH, 0, -1):
        f = v + (4 * k - 3) - ((2 * k - 1) * (2 * k)) / f
    return (TWO_OVER_SQRT_PI * a) * _exp_neg_square(a) / f


def erfc(x):
    """Complementary error function erfc(x) = 1 - erf(x), elementwise in x's dtype (see the module docstring);
    erfc(+-0) = 1, erfc(inf) = 0, erfc(-inf) = 2, NaN for NaN."""
    a = xp.abs(x)
    small = a < 1.0
    positive = xp.where(small, 1.0 - _erf_series(xp.where(small, a, 0.5)),
                        _erfc_fraction(xp.where(small, 1.0, xp.where(a > ERFC_ZERO, ERFC_ZERO, a))))
    return xp.where(x < 0, 2.0 - positive, positive)


def builtin(activation):
    """None: the Array API standard has no activation functions."""


def kernel(activation):
    """None: gelulab's float32 kernels reinterpret float bits as integers, which the standard cannot."""


def derivative(fn, activation):
    """The array_api backend has no autodiff: the derivative of any implementation of `activation` is the
    catalogue's closed form (core.numerics.formulas.closed_form) in the wide dtype, rounded to the input's. One call raises
    the order by one (max 2; ValueError beyond)."""
    order = getattr(fn, "order", 0) + 1
    if order > 2:
        raise ValueError(f"the array_api backend has closed-form derivatives up to order 2, not {order}")
    ops = sys.modules[__name__]

    def d(x):
        dtype = dtype_name(x)
        return astype(closed_form(activation, ops, astype(x, wide(dtype)), order), dtype)

    d.order = order
    d.activation = activation
    return d


def with_derivatives(f0, f1, f2):
    """No autodiff: `derivative` takes the closed forms already, f0 unchanged (f1, f2 unused)."""
    return f0


def compile(fn):
    """The Array API standard has no compiler: always raises ValueError."""
    raise ValueError("the array_api backend has no compiled mode")
