"""The Array API backend: gelulab's formulas over array-api-strict, the reference namespace of the Python Array API
standard (https://data-apis.org/array-api/), which holds float32 and float64 and offers only the standard's
functions. No builtins (the standard has no activation functions), no autodiff (the closed-form derivatives of
core.numerics.formulas instead), no compiler, and no kernels (the standard cannot reinterpret a float's bits as an
integer). Its modules implement the Protocols of core.contracts.contract."""
import sys

from gelulab.core.contracts.contract import Capabilities

CAPABILITIES = Capabilities(
    name="array_api", package="array_api_strict", extra="array-api", modes=("eager",), devices=("cpu",),
    autodiff=False, thread_control=(), modules=("activations",), dispatcher="numpy",
    dtypes=("float64", "float32"), array_type="array_api_strict.Array",
)


def array_dtype(x) -> str | None:
    """The dtype name of an array of array_api_strict ("float32", "int64", "bool", ...), told by the standard's
    `x.__array_namespace__()`; None for anything else or when array_api_strict is not imported."""
    xp = sys.modules.get("array_api_strict")
    namespace = getattr(x, "__array_namespace__", None)
    if xp is not None and callable(namespace) and not isinstance(x, type) and namespace() is xp:
        return str(x.dtype).rpartition(".")[2]
    return None


def load_activations():
    """backends/array_api/activations.py (imports array_api_strict)."""
    from gelulab.backends.array_api import activations

    return activations
