"""The framework-agnostic activation interface: one `Backend` object per framework.

A backend package `backends/<name>/` provides a module `activations` with the same names in every framework
(Keras 3 style, `keras/src/backend/<name>/nn.py`):

  NAME, MODES                       the backend's name and its execution modes ("eager", "compiled")
  setup(device, threads)            one-time framework settings (x64 in JAX, thread counts)
  asarray(a, device) / to_numpy(x)  conversion from and to numpy, dtype preserved (bfloat16 via ml_dtypes)
  builtin(activation)               the framework's own function for a catalogue entry, mode passed explicitly
                                    (None where the framework has none)
  derivative(fn, activation)        elementwise derivative of fn through the framework's autodiff (a vjp with a
                                    cotangent of ones)
  compile(fn)                       the framework's compiler (jax.jit, torch.compile, tf.function(jit_compile=True))
  versions()                        {package: version} of the framework
  and the array primitives gelulab's formulas need (`ArrayOps`): where, astype, dtype_name, wide, erfc, exp,
  sigmoid.

`Backend` wraps such a module; it is what `backends.get_backend(name)` returns.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from gelulab.core.activations import activation_key, check_impl, get_activation
from gelulab.core.dtypes import get_dtype

ORDERS = (0, 1, 2)
# The implementation Backend.relu/gelu/function use when none is named: "formula" (float64-widened, correctly
# rounded) or "kernel" (float32 only, within 1 ULP, fast); switching gelulab's default is this one line.
DEFAULT_IMPL = "formula"


@dataclass(frozen=True)
class Backend:
    """One framework behind gelulab's interface.

    name: "numpy", "jax", "torch" or "tensorflow"; device: "cpu", "gpu" or "tpu"; module: the backend's
    `activations` module. Methods take and return the framework's own arrays, so its autodiff and compilers
    apply directly.
    """

    name: str
    device: str
    module: ModuleType = field(repr=False)

    @property
    def modes(self) -> tuple[str, ...]:
        """Execution modes this backend offers: ("eager",) or ("eager", "compiled")."""
        return self.module.MODES

    def asarray(self, a: np.ndarray):
        """numpy array (float64/float32/bfloat16/float16, any shape) -> framework array of the same dtype on
        this backend's device. Raises ValueError for an unsupported dtype, AssertionError if the framework
        returned another dtype (e.g. JAX without x64)."""
        a = np.asarray(a)
        get_dtype(a.dtype)
        x = self.module.asarray(a, self.device)
        got = self.module.dtype_name(x)
        assert got == a.dtype.name, f"{self.name} turned {a.dtype.name} into {got}"
        return x

    def to_numpy(self, x) -> np.ndarray:
        """Framework array -> numpy array of the same dtype and shape (on the host)."""
        return self.module.to_numpy(x)

    def relu(self, x, impl: str = DEFAULT_IMPL):
        """ReLU(x) = max(x, 0). x: framework array, any float dtype and shape; impl: "formula", "builtin" or
        "kernel"."""
        return self.function("relu", impl)(x)

    def gelu(self, x, approximate: str = "none", impl: str = DEFAULT_IMPL):
        """GELU(x). approximate: "none" (exact x Phi(x)), "tanh" or "sigmoid" (x sigmoid(1.702 x)), an explicit
        string (bool/None raise ValueError); impl: "formula" (gelulab's correctly rounded one, computed in the
        wider dtype), "builtin" (the framework's) or "kernel" (gelulab's float32-only kernel, core.kernels).
        x: framework array, any float dtype and shape; returns the same dtype and shape."""
        return self.function(activation_key("gelu", approximate), impl)(x)

    def function(self, key: str, impl: str = DEFAULT_IMPL, order: int = 0, mode: str = "eager") -> Callable:
        """The elementwise callable for catalogue entry `key`: its value (order 0) or its order-th derivative via
        the framework's autodiff, eager or compiled.

        Raises ValueError for an unknown key, impl, order (an int 0, 1 or 2: True and 1.0 are refused) or mode
        (naming the accepted values).
        """
        act = get_activation(key)
        check_impl(impl)
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order not in ORDERS:
            raise ValueError(f"order={order!r}; expected one of {list(ORDERS)}")
        if mode not in self.modes:
            raise ValueError(f"mode={mode!r} is not offered by backend {self.name!r}; expected one of {list(self.modes)}")
        fn = self._base(act, impl)
        for _ in range(order):
            fn = self.module.derivative(fn, act)
        if mode == "compiled":
            fn = self.module.compile(fn)
        return fn

    def has_builtin(self, key: str) -> bool:
        """Whether the framework has its own function for catalogue entry `key`."""
        return self.module.builtin(get_activation(key)) is not None

    def _base(self, act, impl):
        if impl == "builtin":
            fn = self.module.builtin(act)
            if fn is None:
                raise ValueError(f"backend {self.name!r} has no builtin for {act.key!r}; use impl='formula'")
            return fn
        xp = self.module

        def formula(x):
            return act.formula(xp, x)

        formula.activation = act
        if impl == "kernel":
            return self._kernel(act, formula)
        return formula

    def _kernel(self, act, formula):
        # gelulab's float32 kernel (backends/<name>/kernels.py) for float32, bfloat16 and float16; float64 has no
        # float32 kernel and takes the formula, which computes it in float64
        k = self.module.kernel(act)
        if k is None:
            raise ValueError(f"backend {self.name!r} has no kernel for {act.key!r}; use impl='formula'")
        dtype_name = self.module.dtype_name

        def kernel(x):
            return formula(x) if dtype_name(x) == "float64" else k(x)

        kernel.activation = act
        kernel.kernel = k
        kernel.float64 = formula
        return kernel

    def versions(self) -> dict:
        """{package: version string} for the framework packages this backend uses."""
        return self.module.versions()

