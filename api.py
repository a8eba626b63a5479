"""gelulab's activations on the caller's own arrays: a torch.Tensor, a jax.Array (tracers included), a TensorFlow
tensor or variable, or a numpy array in, the same kind out.

The framework is chosen from the array's type, as einops does (einops/_backends.py): only frameworks already in
`sys.modules` are asked, so gelulab never imports a framework the caller has not imported, and nothing here changes
a framework setting. The work is done by the backend modules (`gelulab.backends.<name>.activations`): gelulab's
float32 kernel (core.kernels, `impl="kernel"`, the default: float32 arithmetic alone, within 1 ULP, with its own
derivatives) and its correctly rounded formula (core.formulas, `impl="formula"`, computed in the wider dtype) run
over that module as their array namespace, and `impl="builtin"` calls the framework's own function
(`builtin(activation)`). All are written in the framework's own ops, so the result is differentiable and compilable
there: torch.compile and autograd, jax.jit / grad / vmap, tf.function(jit_compile=True) and GradientTape.

    gelulab.gelu(x, approximate="none", impl="kernel")
    gelulab.relu(x, impl="kernel")
    gelulab.silu(x, impl="kernel")
    gelulab.apply(key, x, impl="kernel")        # any catalogue entry (core.activations.ACTIVATIONS)
    gelulab.activation(key, impl="kernel")(x)   # the same, as a one-argument callable
"""
from __future__ import annotations

import sys

import numpy as np

from gelulab.core.activations import DEFAULT_IMPL, activation_key, check_impl, get_activation
from gelulab.core.interface import implementation
from gelulab.core.dtypes import DTYPES

ACCEPTED = "a torch.Tensor, a jax.Array, a tf.Tensor or tf.Variable, or a numpy.ndarray"


def _torch(x):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return str(x.dtype).removeprefix("torch.")
    return None


def _jax(x):
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(x, (jax.Array, getattr(jax.core, "Tracer", jax.Array))):  # tracers too
        return np.dtype(x.dtype).name
    return None


def _tensorflow(x):
    tf = sys.modules.get("tensorflow")
    if tf is not None and hasattr(tf, "is_tensor") and (tf.is_tensor(x) or isinstance(x, tf.Variable)):
        return x.dtype.name
    return None


def _numpy(x):
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype.name
    return None


# Each backend's activations module, imported with a plain import statement: torch.compile (dynamo) traces an
# import statement but refuses importlib.import_module, so a first call inside torch.compile(fullgraph=True) works.
def _load_torch():
    from gelulab.backends.torch import activations

    return activations


def _load_jax():
    from gelulab.backends.jax import activations

    return activations


def _load_tensorflow():
    from gelulab.backends.tensorflow import activations

    return activations


def _load_numpy():
    from gelulab.backends.numpy import activations

    return activations


# backend name -> (f(x) -> dtype name of x when x is that framework's array, else None; loader of its backend
# module), in the order asked. A new backend adds one line here.
FRAMEWORKS = {
    "torch": (_torch, _load_torch),
    "jax": (_jax, _load_jax),
    "tensorflow": (_tensorflow, _load_tensorflow),
    "numpy": (_numpy, _load_numpy),
}


PUBLIC_NAMES = {"torch": "torch.Tensor", "jax": "jax.Array", "tensorflow": "tf.Tensor", "numpy": "numpy.ndarray"}


def framework_of(x, what: str = "gelulab") -> str:
    """The backend name ("torch", "jax", "tensorflow" or "numpy") of a native array with a floating dtype.

    x: a torch.Tensor, a jax.Array or jax tracer, a tf.Tensor / tf.Variable, or a numpy.ndarray (or numpy scalar)
    of dtype float16, bfloat16, float32 or float64. `what` names the caller in the message.
    Raises TypeError naming the type (and dtype) and what is accepted: for another type (a list, a Python float),
    and for integer, bool, complex or other non-floating dtypes.
    """
    for name, (dtype_of, _) in FRAMEWORKS.items():
        dtype = dtype_of(x)
        if dtype is None:
            continue
        if dtype not in DTYPES:
            raise TypeError(
                f"{what}: got a {PUBLIC_NAMES[name]} of dtype {dtype}; expected a floating dtype, one of "
                f"{list(DTYPES)}"
            )
        return name
    raise TypeError(f"{what}: got a {_type_name(x)}; expected {ACCEPTED} of a floating dtype ({', '.join(DTYPES)})")


def _type_name(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def backend_module(name: str):
    """The activations module of backend `name` (gelulab.backends.<name>.activations), imported without its
    setup(): no thread count, x64 flag or precision setting is touched. Raises KeyError for an unknown name."""
    return FRAMEWORKS[name][1]()


def apply(key: str, x, impl: str = DEFAULT_IMPL):
    """Catalogue entry `key` applied elementwise to the native array `x`; returns the same kind of array, dtype and
    shape (a tf.Variable gives a tf.Tensor).

    key: a catalogue key (core.activations.ACTIVATIONS: "relu", "gelu_none", "gelu_tanh", "gelu_sigmoid", ...);
    impl: "kernel" (default: gelulab's float32 kernel, core.kernels, within 1 ULP; float64 takes the formula),
    "formula" (gelulab's formula, core.formulas, computed in the wider dtype and rounded once) or "builtin" (the
    framework's own function). Raises ValueError for an unknown key or impl, or a framework without a builtin (or
    kernel) for `key`; TypeError for an array type or dtype that is not accepted (see framework_of).
    """
    return _apply(key, x, impl, f"gelulab.apply({key!r}, x)")


def _apply(key, x, impl, what):
    act = get_activation(key)
    check_impl(impl)
    name = framework_of(x, what)
    return implementation(backend_module(name), name, act, impl)(x)


def activation(key: str, impl: str = DEFAULT_IMPL):
    """A one-argument callable f(x) = apply(key, x, impl) for catalogue entry `key` (validated now: ValueError
    for an unknown key or impl). Usable as a framework activation, e.g. inside jax.jit or a flax.nnx model."""
    get_activation(key)
    check_impl(impl)

    def f(x):
        return _apply(key, x, impl, f"gelulab.activation({key!r})(x)")

    f.__name__ = f.__qualname__ = key
    f.__doc__ = f"gelulab activation {key!r} (impl={impl!r}) on a native array; see gelulab.apply."
    return f


def gelu(x, approximate: str = "none", impl: str = DEFAULT_IMPL):
    """GELU of a native array (torch, jax, TensorFlow or numpy), the same kind, dtype and shape out.

    approximate: "none" (exact x Phi(x) = x/2 erfc(-x/sqrt 2), Hendrycks & Gimpel 2016 eq. 1), "tanh"
    (x/2 (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))), sec. 2) or "sigmoid" (x sigmoid(1.702 x), sec. 2), an explicit
    string: a bool or None raises ValueError, because frameworks read them differently. impl: "kernel" (default),
    "formula" or "builtin" (torch.nn.functional.gelu, jax.nn.gelu, tf.nn.gelu with the mode passed explicitly).
    Raises TypeError for integer, bool or complex dtypes and for types other than the four array kinds.
    """
    return _apply(activation_key("gelu", approximate), x, impl, f"gelulab.gelu(x, approximate={approximate!r})")


def relu(x, impl: str = DEFAULT_IMPL):
    """ReLU(x) = max(x, 0) of a native array, the same kind, dtype and shape out (ReLU(NaN) = NaN, ReLU(-0) = +0).
    impl: "kernel" (default), "formula" or "builtin" (F.relu, jax.nn.relu, tf.nn.relu). Raises as gelu."""
    return _apply("relu", x, impl, "gelulab.relu(x)")


def silu(x, impl: str = DEFAULT_IMPL):
    """SiLU(x) = x sigmoid(x) (Elfwing et al. 2018, arXiv:1702.03118) of a native array, the same kind out.
    impl: "kernel" (default), "formula" or "builtin" (F.silu, jax.nn.silu, tf.nn.silu). Raises ValueError when the catalogue has no
    "silu" entry, otherwise as gelu."""
    return _apply("silu", x, impl, "gelulab.silu(x)")
