"""numpy backend: float64 reference-grade arithmetic on the host, no autodiff and no compiler.

builtin: numpy/scipy has no GELU, so the builtin is the reference a numpy user writes, PyTorch OpInfo's
`reference_gelu` (x * scipy.stats.norm.cdf(x), and the numpy tanh formula), evaluated in float64 and rounded to the
input dtype (each catalogue entry's `builtins["numpy"]`). derivative: the closed-form derivatives of the catalogue
(core.numerics.formulas), in the wide dtype.
"""
from __future__ import annotations

import sys

import numpy as np
import scipy
import scipy.special
import scipy.stats

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.numerics.formulas import closed_form
from gelulab.core.parity.cpu_dispatch import numpy_level


def setup(device: str) -> None:
    """numpy runs on the host only; raises RuntimeError for another device."""
    if device != "cpu":
        raise RuntimeError(f"the numpy backend runs on the cpu only, not on {device!r}")


def apply_settings(settings) -> dict:
    """Nothing to set: numpy's elementwise code here runs on one thread, in float64 natively, without TF32.
    Returns {}."""
    return {}


def formula_scope():
    """np.errstate(invalid="ignore"): a NaN input is a value the formulas propagate (ReLU(NaN) is NaN), not an
    error, so the comparisons on it (`x <= 0` sets IEEE 754's invalid flag for NaN; numpy warns for bfloat16) print
    no RuntimeWarning. The scope is numpy's context-local error state, restored on exit."""
    return np.errstate(invalid="ignore")


def versions() -> dict:
    """{"numpy": version, "scipy": version} (version strings)."""
    return {"numpy": np.__version__, "scipy": scipy.__version__}


def cpu_dispatch() -> str:
    """numpy's highest enabled SIMD dispatch target (core.parity.cpu_dispatch.numpy_level, e.g. "x86_v4"), lowered with
    NPY_DISABLE_CPU_FEATURES."""
    return numpy_level()


def threads() -> dict:
    """Threads in effect: numpy's elementwise ufuncs and scipy.special run on one thread ({"intra_op": 1})."""
    return {"intra_op": 1}


def asarray(a: np.ndarray, device: str) -> np.ndarray:
    """numpy array (any float dtype, any shape) -> a numpy copy of the same dtype and shape (host only)."""
    return np.array(a, copy=True)


def to_numpy(x) -> np.ndarray:
    """numpy array or scalar -> numpy array, dtype and shape unchanged (no copy)."""
    return np.asarray(x)


# ArrayOps


def where(c, a, b):
    """np.where(c, a, b) (any broadcastable shapes), cast back to the dtype of the array operand (b, else a)
    so Python-scalar branches do not widen float16/bfloat16 results."""
    out = np.where(c, a, b)
    ref = b if isinstance(b, np.ndarray) else a
    return out.astype(ref.dtype, copy=False) if isinstance(ref, np.ndarray) else out


def astype(x, name: str):
    """x as a numpy array of dtype `name` ("float64", "float32", "bfloat16", "float16"); ValueError for another."""
    return np.asarray(x).astype(get_dtype(name).np_dtype)


def dtype_name(x) -> str:
    """The gelulab dtype name of x ("float64", "float32", "bfloat16", "float16")."""
    return np.asarray(x).dtype.name


def wide(name: str) -> str:
    """The dtype gelulab's formulas compute `name` in (core.numerics.dtypes DType.wide: float16 -> float32,
    bfloat16/float32/float64 -> float64)."""
    return get_dtype(name).wide


def erfc(x):
    """Complementary error function erfc(x) = 1 - erf(x), elementwise (scipy.special.erfc), x's dtype."""
    return scipy.special.erfc(x)


def exp(x):
    """Elementwise e**x (np.exp), x's dtype."""
    return np.exp(x)


def sigmoid(x):
    """Logistic sigmoid 1 / (1 + e**-x), elementwise (scipy.special.expit), x's dtype."""
    return scipy.special.expit(x)


def _in_float64(f):
    def run(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return f(x.astype(np.float64)).astype(x.dtype)

    return run


def builtin(activation):
    """The numpy user's reference for `activation` (its catalogue descriptor `builtins["numpy"]`, resolved here), in
    float64, rounded to the input dtype; None where the catalogue names none."""
    fn = activation.builtin("numpy")
    if fn is None:
        return None
    fn = _in_float64(fn)
    fn.activation = activation
    return fn


def kernel(activation):
    """gelulab's float32 kernel for a catalogue entry (backends/numpy/kernels.py), or None where there is none.
    It takes float32, bfloat16 and float16 arrays; Backend routes float64 to the formula."""
    if activation.kernel is None:
        return None
    from gelulab.backends.numpy import kernels

    return kernels.kernel(activation.key)


def derivative(fn, activation):
    """numpy has no autodiff: the derivative of any numpy implementation of `activation` is the catalogue's closed
    form, in the wide dtype, evaluated on the input clamped to the entry's `clamp` point and taking its `limits`
    beyond it, except for gelulab's kernels (impl "kernel"), which carry their own derivative kernels. One call
    raises the order by one (max 2)."""
    k = getattr(fn, "kernel", None)
    if k is not None:  # impl "kernel": the kernel's own derivative, float64 by the closed form
        d_float64 = derivative(fn.float64, activation)

        def d_kernel(x):
            return d_float64(x) if np.asarray(x).dtype == np.float64 else k.d(x)

        d_kernel.kernel = getattr(k, "d", None) and k.d
        d_kernel.float64 = d_float64
        d_kernel.order = d_float64.order
        return d_kernel
    order = getattr(fn, "order", 0) + 1
    if order > 2:
        raise ValueError(f"the numpy backend has closed-form derivatives up to order 2, not {order}")

    def d(x):
        x = np.asarray(x)
        w = x.astype(get_dtype(x.dtype).wide)
        with np.errstate(all="ignore"):
            y = closed_form(activation, sys.modules[__name__], w, order)
        return y.astype(x.dtype)

    d.order = order
    d.activation = activation
    return d


def with_derivatives(f0, f1, f2):
    """numpy has no autodiff: `derivative` takes the closed forms already, f0 unchanged (f1, f2 unused)."""
    return f0


def compile(fn):
    """numpy has no compiler: always raises ValueError."""
    raise ValueError("the numpy backend has no compiled mode")
