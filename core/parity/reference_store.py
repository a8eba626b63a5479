"""An on-disk store of correctly rounded references, kept between runs when GELULAB_REFERENCE_CACHE names a folder.

The mpmath reference of the parity regions takes about 17 s for every activation, dtype and order on the 2-core
reference machine; read back from this store it takes well under a second. Off unless the variable is set (the test
suite sets it; `gelulab parity` honours it too). An entry is one .npy file named by the SHA-256 of everything
the reference depends on: the activation key, the derivative order, the dtype, the input bytes, the versions of
mpmath, numpy and ml_dtypes (which round to bfloat16 and float16) and the source of the modules that compute it
(core/parity/reference.py, core/numerics/, core/activations/), so an edit to any of them misses the store instead
of reading a stale value. An entry is an .npz of the reference's bits, the key it was computed for (activation,
order, dtype, the inputs' dtype, shape and SHA-256, the digest of versions and sources above, the entry format) and
one SHA-256 over both, checked at every read together with the key: a damaged or edited entry, or one whose stored
key is not the key asked for (an entry copied or renamed over another's name), is named, set aside and computed
again. Entries of the earlier format, which held no key, are treated the same way. Writes go to a temporary file
renamed into place, so concurrent processes (pytest-xdist workers) never read half a file.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import zipfile
from functools import cache
from pathlib import Path

import numpy as np

from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.plumbing.output import set_aside

ENV = "GELULAB_REFERENCE_CACHE"
_CORE = Path(__file__).resolve().parents[1]  # gelulab/core
_SOURCES = ("parity/reference.py", "numerics", "activations")
FORMAT = 2  # entries hold their key since format 2; format 1 entries (bits and their SHA-256 only) are recomputed


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
    read from the store when an entry for exactly these arguments and sources exists, its content matches the
    SHA-256 stored with it and the key stored in it is this key, else computed and written. An entry whose content
    does not match (edited, damaged on disk), whose stored key is another (an entry moved over another's name), that
    holds no key (the earlier format) or that cannot be read as an entry is named in one line on stderr, set aside
    as `<name>.damaged-<n>` (core.plumbing.output.set_aside) and computed again, so a damaged store never becomes a
    measurement. Without a
    store (GELULAB_REFERENCE_CACHE unset) it only computes; a store folder that cannot be used (a file, read-only,
    full) is named in one line, once per process, and the run goes on without it. Nothing else is raised beyond
    what compute raises."""
    where = folder()
    if where is None or where in _unusable:
        return compute(key, x, dtype, order)
    x = np.ascontiguousarray(x)
    fields = {"format": FORMAT, "activation": key, "order": int(order), "dtype": dtype, "inputs_dtype": x.dtype.str,
              "inputs_shape": list(x.shape), "inputs_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
              "sources_sha256": _source_digest()}
    want = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    path = where / f"{key}-d{order}-{dtype}-{hashlib.sha256(want).hexdigest()[:32]}.npz"
    dt = get_dtype(dtype).np_dtype
    bits = np.dtype(f"u{dt.itemsize}")  # stored as its bits: .npy cannot name bfloat16 without pickle
    problem = None
    try:
        with np.load(path, allow_pickle=False) as entry:
            if "key" not in entry.files:
                raise _NoKey
            raw, held, digest = entry["bits"], entry["key"].tobytes(), entry["sha256"].tobytes().hex()
        if _digest(held, raw) != digest:
            problem = "its content does not match its SHA-256"
        elif held != want:
            problem = f"it holds the reference of another key: {_differs(held, fields)}"
        elif raw.dtype != bits or raw.shape != x.shape:
            problem = f"holds {raw.dtype} {raw.shape}, expected {bits} {x.shape}"
        else:
            return raw.view(dt)
    except FileNotFoundError:
        pass
    except (PermissionError, NotADirectoryError) as e:  # the folder itself cannot be used
        return _without(where, e, compute(key, x, dtype, order))
    except _NoKey:
        problem = "written by an earlier format that did not store its key"
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:  # not an entry (cut short, edited)
        problem = f"not a readable entry ({type(e).__name__})"
    if problem is not None:
        _set_aside(path, problem)
    out = compute(key, x, dtype, order)
    content = np.ascontiguousarray(out).view(bits)
    tmp = None
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, bits=content, key=np.frombuffer(want, np.uint8),
                     sha256=np.frombuffer(bytes.fromhex(_digest(want, content)), np.uint8))
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return _without(where, e, out)
    return out


class _NoKey(Exception):
    """An entry of format 1 (no stored key)."""


def _digest(key: bytes, raw: np.ndarray) -> str:
    """SHA-256 (hex) over an entry's stored key, its dtype and shape, and its bits: one checksum covers all of them."""
    h = hashlib.sha256(len(key).to_bytes(8, "little") + key)
    h.update(f"{raw.dtype.str}|{raw.shape}".encode())
    h.update(np.ascontiguousarray(raw).tobytes())
    return h.hexdigest()


def _differs(held: bytes, fields: dict) -> str:
    """Which fields of a stored key differ from the key asked for, for the one-line message."""
    try:
        got = json.loads(held)
        names = [k for k in fields if not isinstance(got, dict) or got.get(k) != fields[k]]
    except ValueError:
        return "its stored key is not readable"
    shown = [f"{k} {got.get(k)!r}, expected {fields[k]!r}" for k in names if not k.endswith("sha256")]
    shown += [f"{k} differs" for k in names if k.endswith("sha256")]
    return "; ".join(shown) if shown else "its stored key differs"


_unusable: set = set()  # store folders found unusable in this process (named once)


def _without(where: Path, e: OSError, out: np.ndarray) -> np.ndarray:
    """out, after naming the unusable store folder in one line (once per process: it is not tried again)."""
    _unusable.add(where)
    print(f"gelulab: {ENV}={where} cannot be used ({e.strerror or type(e).__name__}); the references are computed "
          "without it", file=sys.stderr)
    return out


def _set_aside(path: Path, problem: str) -> None:
    """Name a damaged entry in one line on stderr and rename it out of the store's way (never deleted)."""
    try:
        new = set_aside(path, "damaged")
        kept = f"set aside as {new.name}"
    except OSError as e:
        kept = f"could not be set aside ({e.strerror or type(e).__name__})"
    print(f"gelulab: reference store entry {path} is damaged ({problem}); {kept}; computed again", file=sys.stderr)
