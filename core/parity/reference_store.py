"""An on-disk store of correctly rounded references, kept between runs when GELULAB_REFERENCE_CACHE names a folder.

The mpmath reference of the parity regions takes about 17 s for every activation, dtype and order on the 2-core
reference machine; read back from this store it takes well under a second. Off unless the variable is set (the test
suite sets it; `gelulab parity` honours it too). An entry is one .npy file named by the SHA-256 of everything
the reference depends on: the activation key, the derivative order, the dtype, the input bytes, the versions of
mpmath, numpy and ml_dtypes (which round to bfloat16 and float16) and the source of the modules that compute it
(core/parity/reference.py, core/numerics/, core/activations/), so an edit to any of them misses the store instead
of reading a stale value. Writes go to a temporary file renamed into place, so
concurrent processes (pytest-xdist workers) never read half a file. A file that cannot be read is computed again.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from gelulab.core.numerics.dtypes import get_dtype

ENV = "GELULAB_REFERENCE_CACHE"
_CORE = Path(__file__).resolve().parents[1]  # gelulab/core
_SOURCES = ("parity/reference.py", "numerics", "activations")


def folder() -> Path | None:
    """The store's folder from GELULAB_REFERENCE_CACHE, or None when unset or empty (no store)."""
    v = os.environ.get(ENV, "").strip()
    return Path(v).expanduser() if v else None


@cache
def _source_digest() -> str:
    import ml_dtypes
    import mpmath

    h = hashlib.sha256(f"{mpmath.__version__}|{np.__version__}|{ml_dtypes.__version__}".encode())
    for name in _SOURCES:
        p = _CORE / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(_CORE)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def stored(compute, key: str, order: int, dtype: str, x: np.ndarray) -> np.ndarray:
    """compute(key, x, dtype, order) (core.parity.reference.reference: a numpy array of `dtype` with x's shape),
    read from the store when an entry for exactly these arguments and sources exists, else computed and written.
    Without a store (GELULAB_REFERENCE_CACHE unset) it only computes. A folder that cannot be written leaves the
    result computed and unstored; nothing else is raised beyond what compute raises."""
    where = folder()
    if where is None:
        return compute(key, x, dtype, order)
    x = np.ascontiguousarray(x)
    h = hashlib.sha256(f"{_source_digest()}|{key}|{order}|{dtype}|{x.dtype.str}|{x.shape}".encode())
    h.update(x.tobytes())
    path = where / f"{key}-d{order}-{dtype}-{h.hexdigest()[:32]}.npy"
    dt = get_dtype(dtype).np_dtype
    bits = np.dtype(f"u{dt.itemsize}")  # stored as its bits: .npy cannot name bfloat16 without pickle
    try:
        raw = np.load(path, allow_pickle=False)
        if raw.dtype == bits and raw.shape == x.shape:
            return raw.view(dt)
    except (OSError, ValueError, EOFError):  # missing, damaged or empty (a writer cut short)
        pass
    out = compute(key, x, dtype, order)
    tmp = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(out).view(bits), allow_pickle=False)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return out
