"""The Array API backend: gelulab's formulas over array-api-strict, the reference namespace of the Python Array API
standard (https://data-apis.org/array-api/), which holds float32 and float64 and offers only the standard's
functions. No builtins (the standard has no activation functions), no autodiff (the closed-form derivatives of
core.numerics.formulas instead), no compiler, and no kernels (the standard cannot reinterpret a float's bits as an
integer). Its activations module is backends/array_api/ops.py, written once over any Array API namespace and bound
here to array-api-strict by its record (backends/array_api/library.py: another Array API library is one such
record in a folder of its own)."""
from gelulab.backends.array_api.library import Library

LIBRARY = Library(name="array_api", namespace="array_api_strict", package="array_api_strict", extra="array-api",
                  array_type="array_api_strict.Array", versions=("array_api_strict", "numpy"))
CAPABILITIES = LIBRARY.capabilities()
array_dtype = LIBRARY.array_dtype


def load_activations():
    """backends/array_api/activations.py (imports array_api_strict)."""
    from gelulab.backends.array_api import activations

    return activations
