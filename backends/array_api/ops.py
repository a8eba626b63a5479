"""gelulab's activations module written once over an Array API namespace `xp` (https://data-apis.org/array-api/),
bound per library by its record (backends/array_api/library.py): `ArrayAPIOps(library).functions()` is the
ActivationOps module of core.contracts.contract for that library (what a backend's activations.py exports).

The standard has exp but neither erfc nor a logistic sigmoid, so both are written here in its operations:
* erfc(x) for |x| < 1 as 1 - erf(|x|), erf by its series of positive terms
  erf(a) = 2/sqrt(pi) e^-a^2 sum_k (2 a^2)^k a / (1 3 ... (2k + 1)) (Abramowitz & Stegun 7.1.6), and for |x| >= 1 by
  the continued fraction erfc(a) = 2a e^-a^2 / sqrt(pi) / (2a^2 + 1 - 1*2 / (2a^2 + 5 - 3*4 / (2a^2 + 9 - ...)))
  (A&S 7.1.14, its even part), evaluated from a fixed depth; e^-a^2 is formed from a = hi + lo with hi^2 exact, so
  a^2 is not rounded; erfc(-a) = 2 - erfc(a). Within 20 ULP of the correctly rounded float64 value up to the
  underflow (at most 15 measured against mpmath on 20,000 points of [-6, 27.5], over array-api-strict), well
  inside gelulab's float64 goal.
* sigmoid(x) as 1 / (1 + e^-x) for x > 0 and e^x / (1 + e^x) otherwise (no overflow).
derivative: the catalogue's closed forms (core.numerics.formulas), as the numpy backend does; no autodiff, no
builtins (the standard has no activation functions), no kernels (the standard cannot reinterpret a float's bits as
an integer); a compiled mode only where the record names the library's jit.
"""
from __future__ import annotations

import importlib
import math
from contextlib import nullcontext

import numpy as np

from gelulab.backends.array_api.library import Library
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.formulas import closed_form
from gelulab.core.parity.cpu_dispatch import numpy_level

SERIES_TERMS = 27  # erf series for a < 1: the first term left out is below 1e-26 of the sum
FRACTION_DEPTH = 100  # continued fraction for a >= 1: within 4 ULP of float64 from a = 1 (measured)
ERFC_ZERO = 28.0  # erfc(a) underflows to 0 in float64 beyond a = 27.3; larger a take this value
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
# words naming a gelulab device in the text of a namespace's devices (__array_namespace_info__().devices())
_DEVICE_WORDS = {"cpu": ("cpu",), "gpu": ("cuda", "gpu", "rocm"), "tpu": ("tpu",)}


class ArrayAPIOps:
    """The ActivationOps of core.contracts.contract over one library's Array API namespace (imported here: raises
    ImportError where the library is not installed). Methods are the module's functions."""

    def __init__(self, library: Library):
        self.library = library
        self.xp = library.xp()
        self._dtypes = {name: getattr(self.xp, name) for name in library.dtypes}
        self._devices: dict = {}

    def functions(self) -> dict:
        """{name: bound method} of every public method: the names of an activations module (globals().update)."""
        return {n: getattr(self, n) for n in dir(type(self)) if not n.startswith("_") and n != "functions"}

    # set-up and reports

    def setup(self, device: str) -> None:
        """Select `device` (one of the record's devices; "cpu" is the namespace's default device). RuntimeError
        for another device, or one the namespace does not list."""
        self._device(device)

    def _device(self, name: str):
        if name not in self._devices:
            if name not in self.library.devices:
                raise RuntimeError(f"the {self.library.name} backend runs on {list(self.library.devices)}, "
                                   f"not on {name!r}")
            info = getattr(self.xp, "__array_namespace_info__", None)
            if info is None:
                self._devices[name] = None  # the library's only device
            elif name == "cpu":
                self._devices[name] = info().default_device()
            else:
                found = [d for d in info().devices() if any(w in str(d).lower() for w in _DEVICE_WORDS[name])]
                if not found:
                    raise RuntimeError(f"the {self.library.name} backend finds no {name!r} device among "
                                       f"{list(info().devices())}")
                self._devices[name] = found[0]
        return self._devices[name]

    def apply_settings(self, settings) -> dict:
        """Nothing to set: the elementwise functions run on one thread, in float64 natively. Returns {}."""
        return {}

    def formula_scope(self):
        """No scope is needed (contextlib.nullcontext())."""
        return nullcontext()

    def versions(self) -> dict:
        """{module: version} of the record's `versions` modules, and {"array_api": the standard's version the
        namespace implements}."""
        found = {m: str(importlib.import_module(m).__version__) for m in self.library.versions}
        return {**found, "array_api": str(getattr(self.xp, "__array_api_version__", "unknown"))}

    def cpu_dispatch(self) -> str | None:
        """numpy's SIMD dispatch level (core.parity.cpu_dispatch.numpy_level) for a library computing with numpy
        (the record's dispatcher), None otherwise."""
        return numpy_level() if self.library.dispatcher == "numpy" else None

    def threads(self) -> dict:
        """Threads in effect: one ({"intra_op": 1}); the elementwise functions run on one thread."""
        return {"intra_op": 1}

    # conversion

    def asarray(self, a: np.ndarray, device: str):
        """numpy array (any shape) of one of the record's dtypes -> the library's array, a copy of the same dtype
        and shape on `device`. ValueError naming the dtype for another."""
        a = np.asarray(a)
        if a.dtype.name not in self._dtypes:
            raise ValueError(f"the {self.library.name} backend holds {list(self._dtypes)} arrays, not {a.dtype.name}")
        return self.xp.asarray(a, copy=True, device=self._device(device))

    def to_numpy(self, x) -> np.ndarray:
        """The library's array (computed first where the library is lazy) -> a numpy copy of the same dtype and
        shape, by DLPack (the standard's exchange)."""
        if self.library.compute:
            x = getattr(x, self.library.compute)()
        if isinstance(x, (np.ndarray, np.generic)):
            return np.array(x, copy=True)
        return np.from_dlpack(x).copy()

    # ArrayOps

    def where(self, c, a, b):
        """xp.where(c, a, b) with broadcasting; a Python-scalar branch takes the other branch's dtype (the
        standard's rule; two scalar branches are refused by the namespace)."""
        return self.xp.where(c, a, b)

    def astype(self, x, name: str):
        """x as dtype `name`, one of the record's dtypes; ValueError for another."""
        if name not in self._dtypes:
            raise ValueError(f"dtype {name!r}; the {self.library.name} backend holds {list(self._dtypes)}")
        return self.xp.astype(x, self._dtypes[name])

    def dtype_name(self, x) -> str:
        """The dtype name of x ("float32", "float64"; another name such as "int64" for other dtypes)."""
        return str(x.dtype).rpartition(".")[2]

    def wide(self, name: str) -> str:
        """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide: float32 -> float64)."""
        return get_dtype(name).wide

    def exp(self, x):
        """e**x elementwise (xp.exp), x's dtype."""
        return self.xp.exp(x)

    def sigmoid(self, x):
        """Logistic sigmoid 1 / (1 + e**-x) elementwise, through e^-|x| (never overflows), x's dtype."""
        e = self.xp.exp(self.xp.where(x > 0, -x, x))
        return self.xp.where(x > 0, 1.0 / (1.0 + e), e / (1.0 + e))

    def _exp_neg_square(self, a):
        """e^(-a^2) for 0 <= a <= ERFC_ZERO, with a = hi + lo and hi^2 exact: e^(-hi^2) e^(-lo (a + hi))."""
        scale = 2.0**20 if self.dtype_name(a) == "float64" else 2.0**6  # hi has at most 25 (11) significant bits
        hi = self.xp.floor(a * scale) / scale
        return self.xp.exp(-(hi * hi)) * self.xp.exp(-((a - hi) * (a + hi)))

    def _erf_series(self, a):
        """erf(a) for 0 <= a < 1 (A&S 7.1.6: positive terms, no cancellation)."""
        term, total, v = a, a, 2.0 * (a * a)
        for k in range(1, SERIES_TERMS):
            term = term * v / (2 * k + 1)
            total = total + term
        return TWO_OVER_SQRT_PI * self._exp_neg_square(a) * total

    def _erfc_fraction(self, a):
        """erfc(a) for 1 <= a <= ERFC_ZERO (A&S 7.1.14, even part of the continued fraction, FRACTION_DEPTH deep)."""
        v = 2.0 * (a * a)
        f = v + (4 * FRACTION_DEPTH + 1)
        for k in range(FRACTION_DEPTH, 0, -1):
            f = v + (4 * k - 3) - ((2 * k - 1) * (2 * k)) / f
        return (TWO_OVER_SQRT_PI * a) * self._exp_neg_square(a) / f

    def erfc(self, x):
        """Complementary error function erfc(x) = 1 - erf(x), elementwise in x's dtype (see the module docstring);
        erfc(+-0) = 1, erfc(inf) = 0, erfc(-inf) = 2, NaN for NaN."""
        xp = self.xp
        a = xp.abs(x)
        small = a < 1.0
        positive = xp.where(small, 1.0 - self._erf_series(xp.where(small, a, 0.5)),
                            self._erfc_fraction(xp.where(small, 1.0, xp.where(a > ERFC_ZERO, ERFC_ZERO, a))))
        return xp.where(x < 0, 2.0 - positive, positive)

    # implementations

    def builtin(self, activation):
        """None: the Array API standard has no activation functions."""

    def kernel(self, activation):
        """None: gelulab's float32 kernels reinterpret float bits as integers, which the standard cannot."""

    def derivative(self, fn, activation):
        """No autodiff: the derivative of any implementation of `activation` is the catalogue's closed form
        (core.numerics.formulas.closed_form) in the wide dtype, rounded to the input's. One call raises the order
        by one (max 2; ValueError beyond)."""
        order = getattr(fn, "order", 0) + 1
        if order > 2:
            raise ValueError(f"the {self.library.name} backend has closed-form derivatives up to order 2, "
                             f"not {order}")

        def d(x):
            dtype = self.dtype_name(x)
            return self.astype(closed_form(activation, self, self.astype(x, self.wide(dtype)), order), dtype)

        d.order = order
        d.activation = activation
        return d

    def with_derivatives(self, f0, f1, f2):
        """No autodiff: `derivative` takes the closed forms already, f0 unchanged (f1, f2 unused)."""
        return f0

    def compile(self, fn):
        """fn compiled by the library's jit (the record's `jit`); ValueError where the library has none."""
        if self.library.jit is None:
            raise ValueError(f"the {self.library.name} backend has no compiled mode")
        module, _, name = self.library.jit.rpartition(".")
        return getattr(importlib.import_module(module), name)(fn)
