"""gelulab's activations on the caller's own arrays: a torch.Tensor, a jax.Array (tracers included), a TensorFlow
tensor or variable, a numpy array, or the array of any other backend of gelulab.backends in, the same kind out.

By default (impl=None) every call is the framework's own op for the variant, at no cost: torch.nn.functional.gelu
(approximate=...), jax.nn.gelu, tf.nn.gelu, ...; the sigmoid form, which no framework has, is the expression users
write there, x * sigmoid(1.702 x) (as transformers' QuickGELUActivation). What gelulab adds is one `approximate=`
string that means the same variant in every framework. gelulab's float32 kernel, within 1 ULP of the correctly
rounded value, is one word away, `impl="kernel"`, at a cost: on a CPU about 8-9x the framework's op per call, and
for torch eager calls a loop built once per machine (`gelulab warmup`; see backends/torch/kernels.py for the
figures). `impl="formula"` is gelulab's correctly rounded formula, computed in the wider dtype.

The framework is chosen from the array's type, as einops does (einops/_backends.py): each backend package of the
registry recognises its own arrays (`array_dtype`, core.contracts.contract.Package), asking only a framework already in
`sys.modules`, so gelulab never imports a framework the caller has not imported, and nothing here changes a
framework setting. The work is done by the backend modules (`gelulab.backends.<name>.activations`): the kernel
(core.numerics.kernels) and the formula (core.numerics.formulas) run over that module as their array namespace, and
`impl="builtin"` calls the framework's own function (`builtin(activation)`). All are written in the framework's own
ops, so the result is differentiable and compilable there: torch.compile and autograd, jax.jit / grad / vmap,
tf.function(jit_compile=True) and GradientTape.

    gelulab.gelu(x, approximate="none", impl=None)  # impl None: the framework's own op
    gelulab.relu(x, impl=None)
    gelulab.silu(x, impl=None)
    gelulab.apply(key, x, impl=None)        # any catalogue entry (core.activations.ACTIVATIONS)
    gelulab.activation(key, impl=None)(x)   # the same, as a one-argument callable
"""
from __future__ import annotations

from gelulab.backends import PACKAGES, REGISTRY
from gelulab.core.activations import activation_key, check_impl, get_activation
from gelulab.core.contracts.interface import default_impl, implementation
from gelulab.core.numerics.dtypes import DTYPES


def _a(name: str) -> str:
    """name with its indefinite article ("a torch.Tensor", "an Array")."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _accepted() -> str:
    """The array types of every backend, for messages: "a numpy.ndarray, a jax.Array, ... or a tf.Tensor"."""
    names = [_a(c.array_type) for c in REGISTRY.values()]
    return ", ".join(names[:-1]) + ", or " + names[-1] if len(names) > 1 else names[0]


def framework_of(x, what: str = "gelulab") -> str:
    """The backend name (one of gelulab.backends.BACKEND_NAMES) of a native array with a floating dtype, asked of
    each backend package in the registry's order (its `array_dtype`, which consults only frameworks already
    imported).

    x: an array of a backend's framework (a torch.Tensor, a jax.Array or jax tracer, a tf.Tensor / tf.Variable, a
    numpy.ndarray or numpy scalar, ...) of dtype float16, bfloat16, float32 or float64, one its backend holds
    (Capabilities.dtypes). `what` names the caller in the message.
    Raises TypeError naming the type (and dtype) and what is accepted: for another type (a list, a Python float),
    and for integer, bool, complex or other non-floating dtypes.
    """
    known = _BACKEND_OF.get(type(x))  # the backend that took this type before is asked first
    for name, package in [*(((known, PACKAGES[known]),) if known else ()), *PACKAGES.items()]:
        dtype = package.array_dtype(x)
        if dtype is None:
            continue
        _BACKEND_OF[type(x)] = name
        if dtype not in DTYPES:
            raise TypeError(
                f"{what}: got {_a(package.CAPABILITIES.array_type)} of dtype {dtype}; expected a floating dtype, "
                f"one of {list(DTYPES)}"
            )
        return name
    raise TypeError(f"{what}: got a {_type_name(x)}; expected {_accepted()} of a floating dtype "
                    f"({', '.join(DTYPES)})")


_BACKEND_OF: dict = {}  # array type -> the backend whose package recognised it


def _type_name(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def backend_module(name: str):
    """The activations module of backend `name` (gelulab.backends.<name>.activations, by its package's
    load_activations: a plain import statement, which torch.compile traces), imported without its setup(): no
    thread count, x64 flag or precision setting is touched. Raises KeyError for an unknown name."""
    return PACKAGES[name].load_activations()


def apply(key: str, x, impl: str | None = None):
    """Catalogue entry `key` applied elementwise to the native array `x`; returns the same kind of array, dtype and
    shape (a tf.Variable gives a tf.Tensor).

    key: a catalogue key (core.activations.ACTIVATIONS: "relu", "gelu_none", "gelu_tanh", "gelu_sigmoid", ...);
    impl: None (the default) is "builtin", the framework's own function, where the entry has one on that framework,
    "formula" elsewhere (core.contracts.interface.default_impl); "kernel" (opt-in: gelulab's float32 kernel,
    core.numerics.kernels, within 1 ULP, about 8-9x the builtin per call on a CPU; float64 takes the formula);
    "formula" (gelulab's formula, core.numerics.formulas, computed in the wider dtype and rounded once).
    Raises ValueError for an unknown key or impl, or a framework without a builtin (or kernel) for `key` when that
    impl is named; TypeError for an array type or dtype that is not accepted (see framework_of).
    """
    return _apply(key, x, impl, f"gelulab.apply({key!r}, x)")


def _apply(key, x, impl, what):
    act = get_activation(key)
    if impl is not None:
        check_impl(impl)
    name = framework_of(x, what)
    if impl is None:
        impl = default_impl(REGISTRY[name], key)
    fn = _FUNCTIONS.get((name, key, impl))
    if fn is None:  # built once per framework, entry and impl: a call is then a look-up and the framework's op
        fn = _FUNCTIONS[(name, key, impl)] = implementation(backend_module(name), name, act, impl)
    return fn(x)


_FUNCTIONS: dict = {}  # (backend name, catalogue key, impl) -> the callable of core.contracts.interface.implementation


def activation(key: str, impl: str | None = None):
    """A one-argument callable f(x) = apply(key, x, impl) for catalogue entry `key` (validated now: ValueError
    for an unknown key or impl). Usable as a framework activation, e.g. inside jax.jit or a flax.nnx model."""
    get_activation(key)
    if impl is not None:
        check_impl(impl)

    def f(x):
        return _apply(key, x, impl, f"gelulab.activation({key!r})(x)")

    f.__name__ = f.__qualname__ = key
    f.__doc__ = f"gelulab activation {key!r} (impl={impl!r}) on a native array; see gelulab.apply."
    return f


def gelu(x, approximate: str = "none", impl: str | None = None):
    """GELU of a native array (torch, jax, TensorFlow, numpy or another backend's), the same kind, dtype and shape
    out.

    approximate: "none" (exact x Phi(x) = x/2 erfc(-x/sqrt 2), Hendrycks & Gimpel 2016 eq. 1), "tanh"
    (x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))), sec. 2) or "sigmoid" (x sigmoid(1.702 x), sec. 2), an explicit
    string: a bool or None raises ValueError, because frameworks read them differently. impl: None (default) or
    "builtin": the framework's own op (torch.nn.functional.gelu, jax.nn.gelu, tf.nn.gelu with the mode passed
    explicitly; x * sigmoid(1.702 x) for the sigmoid form), no cost over calling it yourself; "kernel": gelulab's
    float32 kernel within 1 ULP (opt-in, about 8-9x the builtin per call on a CPU); "formula": as in apply.
    Raises TypeError for integer, bool or complex dtypes and for types other than the backends' arrays.
    """
    return _apply(activation_key("gelu", approximate), x, impl, f"gelulab.gelu(x, approximate={approximate!r})")


def relu(x, impl: str | None = None):
    """ReLU(x) = max(x, 0) of a native array, the same kind, dtype and shape out (ReLU(NaN) = NaN, ReLU(-0) = +0).
    impl: None (default) or "builtin" (F.relu, jax.nn.relu, tf.nn.relu), "kernel" or "formula" (see apply).
    Raises as gelu."""
    return _apply("relu", x, impl, "gelulab.relu(x)")


def silu(x, impl: str | None = None):
    """SiLU(x) = x sigmoid(x) (Elfwing et al. 2018, arXiv:1702.03118) of a native array, the same kind out.
    impl: None (default) or "builtin" (F.silu, jax.nn.silu, tf.nn.silu), "kernel" or "formula" (see apply). Raises
    ValueError when the catalogue has no "silu" entry, otherwise as gelu."""
    return _apply("silu", x, impl, "gelulab.silu(x)")
