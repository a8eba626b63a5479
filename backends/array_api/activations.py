"""array-api-strict's activations module: the functions of backends/array_api/ops.py (gelulab's formulas written
once over an Array API namespace) bound to array-api-strict, this backend's record (imports array_api_strict)."""
from gelulab.backends.array_api import LIBRARY
from gelulab.backends.array_api.ops import ArrayAPIOps

globals().update(ArrayAPIOps(LIBRARY).functions())
