"""The framework-agnostic activation interface: one `Backend` object per framework.

A Backend wraps a backend's `activations` module (the ActivationOps Protocol of core.contracts.contract: conversion, the
array primitives of core.numerics.formulas, builtins, autodiff, compiler, versions, threads; the same names in every
framework, Keras 3 style, `keras/src/backend/<name>/nn.py`) and its capability record
(core.contracts.contract.Capabilities: modes, devices, autodiff). It is what `gelulab.get_backend(name)` returns; using
it changes no framework-wide setting.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType

import numpy as np

from gelulab.core.activations import IMPLS, activation_key, check_impl, get_activation
from gelulab.core.contracts.contract import Capabilities
from gelulab.core.numerics.dtypes import DTYPES, get_dtype
from gelulab.core.numerics.formulas import closed_form

ORDERS = (0, 1, 2)


@dataclass(frozen=True)
class Backend:
    """One framework behind gelulab's interface.

    name: "numpy", "jax", "torch" or "tensorflow"; device: "cpu", "gpu" or "tpu"; module: the backend's
    `activations` module; capabilities: its record (backends/<name>/__init__.py). Methods take and return the
    framework's own arrays, so its autodiff and compilers apply directly.
    """

    name: str
    device: str
    module: ModuleType = field(repr=False)
    capabilities: Capabilities = field(repr=False)

    @property
    def modes(self) -> tuple[str, ...]:
        """Execution modes this backend offers, from its record: ("eager",) or ("eager", "compiled")."""
        return self.capabilities.modes

    def asarray(self, a: np.ndarray):
        """numpy array (float64/float32/bfloat16/float16, any shape) -> framework array of the same dtype on
        this backend's device. Raises ValueError for an unsupported dtype, or for float64 in JAX while
        jax_enable_x64 is off (naming the setting); AssertionError if the framework returned another dtype."""
        a = np.asarray(a)
        get_dtype(a.dtype)
        x = self.module.asarray(a, self.device)
        got = self.module.dtype_name(x)
        assert got == a.dtype.name, f"{self.name} turned {a.dtype.name} into {got}"
        return x

    def to_numpy(self, x) -> np.ndarray:
        """Framework array -> numpy array of the same dtype and shape (on the host)."""
        return self.module.to_numpy(x)

    def relu(self, x, impl: str | None = None):
        """ReLU(x) = max(x, 0). x: framework array of a float dtype of core.numerics.dtypes (float64, float32, bfloat16,
        float16), any shape; impl: "builtin", "formula" or "kernel", None for default_impl (the framework's
        builtin). Returns the same dtype
        and shape. Raises TypeError naming the dtype for an integer, bool or other non-float array (the frameworks
        disagree on what ReLU of an integer array returns: float32, float64 or int32)."""
        self.check_float(x, "relu")
        key = activation_key("relu")
        return self.function(key, default_impl(self.capabilities, key) if impl is None else impl)(x)

    def gelu(self, x, approximate: str = "none", impl: str | None = None):
        """GELU(x). approximate: "none" (exact x Phi(x)), "tanh" or "sigmoid" (x sigmoid(1.702 x)), an explicit
        string (bool/None raise ValueError); impl: "formula" (gelulab's correctly rounded one, computed in the
        wider dtype), "builtin" (the framework's) or "kernel" (gelulab's float32-only kernel, core.numerics.kernels);
        None for default_impl (the framework's builtin).
        x: framework array of a float dtype of core.numerics.dtypes, any shape; returns the same dtype and shape. Raises
        TypeError naming the dtype for a non-float array."""
        key = activation_key("gelu", approximate)
        self.check_float(x, "gelu")
        return self.function(key, default_impl(self.capabilities, key) if impl is None else impl)(x)

    def check_float(self, x, what: str = "x") -> str:
        """The gelulab dtype name of framework array `x`; raises TypeError naming its dtype unless it is one of
        core.numerics.dtypes.DTYPES (float64, float32, bfloat16, float16)."""
        try:
            return get_dtype(self.module.dtype_name(x)).name
        except (KeyError, ValueError, TypeError, AttributeError):
            dt = getattr(x, "dtype", type(x).__name__)
            shown = getattr(dt, "name", None) if not str(dt).startswith("torch.") else str(dt)
            shown = shown or str(dt).rpartition(".")[2]  # a dtype object without a name: "xp.int32" -> "int32"
            raise TypeError(f"{what}: {self.name} array of dtype {shown}; expected a floating dtype, one of "
                            f"{list(DTYPES)} (cast it first, e.g. to float32)") from None

    def function(self, key: str, impl: str | None = None, order: int = 0, mode: str = "eager") -> Callable:
        """The elementwise callable for catalogue entry `key` in implementation `impl` (None: default_impl): its
        value (order 0) or its order-th derivative via the framework's autodiff, eager or compiled.

        Raises ValueError for an unknown key, impl, order (an int 0, 1 or 2: True and 1.0 are refused) or mode
        (naming the accepted values).
        """
        act = get_activation(key)
        impl = default_impl(self.capabilities, key) if impl is None else impl
        check_impl(impl)
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order not in ORDERS:
            raise ValueError(f"order={order!r}; expected one of {list(ORDERS)}")
        if mode not in self.modes:
            raise ValueError(
                f"mode={mode!r} is not offered by backend {self.name!r}; expected one of {list(self.modes)}"
            )
        fn = self._base(act, impl)
        for _ in range(order):
            fn = self.module.derivative(fn, act)
        if mode == "compiled":
            fn = self.module.compile(fn)
        return fn

    def impls(self, key: str) -> tuple[str, ...]:
        """The implementations (of IMPLS, in its order) this backend offers for catalogue entry `key`: "formula"
        always, "builtin" where the framework has a function for it, "kernel" where the backend has kernels
        (its record) and the entry one."""
        act = get_activation(key)
        offered = {"formula": True, "builtin": self.has_builtin(key),
                   "kernel": self.capabilities.kernels and act.kernel is not None}
        return tuple(i for i in IMPLS if offered[i])

    def has_builtin(self, key: str) -> bool:
        """Whether the framework has its own function for catalogue entry `key`."""
        return self.module.builtin(get_activation(key)) is not None

    def _base(self, act, impl):
        return implementation(self.module, self.name, act, impl)

    def cpu_dispatch(self) -> str | None:
        """The CPU kernel level the framework runs at in this process (core.parity.cpu_dispatch; e.g. "avx2" for torch,
        "x86_v4" for numpy), None on a device other than the CPU or where it cannot be told. Known faults may be
        keyed by it (core.parity.known_faults)."""
        level = getattr(self.module, "cpu_dispatch", None)  # a module outside the contract may lack it
        return level() if level is not None and self.device == "cpu" else None

    def versions(self) -> dict:
        """{package: version string} for the framework packages this backend uses."""
        return self.module.versions()


def default_impl(capabilities: Capabilities, key: str) -> str:
    """The implementation an activation call without `impl` takes on the backend of `capabilities`: DEFAULT_IMPL
    ("builtin", the framework's own op) where catalogue entry `key` has a builtin there, "formula" elsewhere
    (Activation.impl_for). ValueError for an unknown key."""
    return get_activation(key).impl_for(None, capabilities.name)


def implementation(module, name: str, act, impl: str) -> Callable:
    """The value callable of catalogue entry `act` in implementation `impl`, built from backend `name`'s
    activations module: "builtin" (the framework's own function), "formula" (core.numerics.formulas inside the module's
    formula_scope, computed in the wider dtype and rounded once) or "kernel" (the float32 kernel of
    backends/<name>/kernels.py for float32, bfloat16 and float16; float64 has no float32 kernel and takes the
    formula, which computes it in float64). The formula's float64 derivatives are its closed forms
    (core.numerics.formulas.closed_form) where the backend's `with_derivatives` installs them (the XLA backends),
    autodiff elsewhere. The callable takes and returns the framework's arrays. Raises
    ValueError naming the backend and key when the framework has no builtin, or no kernel, for `act`."""
    if impl == "builtin":
        fn = module.builtin(act)
        if fn is None:
            raise ValueError(f"backend {name!r} has no builtin for {act.key!r}; use impl='formula'")
        return fn

    value = partial(act.formula, module)

    def formula(x):
        with module.formula_scope():
            if module.dtype_name(x) != "float64":
                return value(x)
            rules = module.with_derivatives(value, partial(closed_form, act, module, order=1),
                                            partial(closed_form, act, module, order=2))
            return rules(x)

    formula.activation = act
    if impl != "kernel":
        return formula
    k = module.kernel(act)
    if k is None:
        raise ValueError(f"backend {name!r} has no kernel for {act.key!r}; use impl='formula'")
    dtype_name = module.dtype_name

    def kernel(x):
        return formula(x) if dtype_name(x) == "float64" else k(x)

    kernel.activation = act
    kernel.kernel = k
    kernel.float64 = formula
    return kernel
