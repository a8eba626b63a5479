"""The floating dtypes gelulab knows, in one table.

Add a dtype here (name, numpy dtype, the wider dtype the accurate formulas compute in) and every backend,
the reference, the tolerance table and the parity suite pick it up.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    """One floating dtype.

    name: the canonical name used everywhere in gelulab ("float32", "bfloat16", ...).
    np_dtype: the numpy dtype (bfloat16 comes from ml_dtypes).
    wide: the dtype gelulab's formulas compute in internally for inputs of this dtype, where the device has it
      (float16 -> float32; bfloat16, float32, float64 -> float64). bfloat16 needs float64: it has float32's
      exponent range, so intermediates such as sigmoid(2u) in the tanh form's tail are float32 subnormals
      (flushed to zero by XLA) while the result is a normal bfloat16.
    """

    name: str
    np_dtype: np.dtype
    wide: str

    @property
    def finfo(self):
        """ml_dtypes.finfo of the dtype (eps, max, smallest normal and subnormal)."""
        return ml_dtypes.finfo(self.np_dtype)

    @property
    def bits(self) -> int:
        """Storage width in bits (16, 32, 64)."""
        return self.np_dtype.itemsize * 8


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float64", np.dtype(np.float64), "float64"),
        DType("float32", np.dtype(np.float32), "float64"),
        DType("bfloat16", np.dtype(ml_dtypes.bfloat16), "float64"),
        DType("float16", np.dtype(np.float16), "float32"),
    )
}


def get_dtype(name: str | np.dtype) -> DType:
    """Return the DType for a name ("float32") or numpy dtype.

    Raises ValueError naming the value and the accepted names.
    """
    key = np.dtype(name).name if not isinstance(name, str) else name
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[key]
