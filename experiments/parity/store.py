"""Stored parity groups: the resumable part of `gelulab parity`.

Each measured group's output (the backend's values over the group's concatenated inputs, or the exception it
raised) is written atomically to `<out>/groups/<group id>.npz` as soon as it is measured. A rerun with the same
--out reads a stored group instead of measuring it again when its key matches: gelulab's, numpy's, ml_dtypes' and
the framework's versions, the device, the framework's CPU dispatch level and the sha256 of the inputs. The judgement
(tolerances, known faults) and the reference are recomputed on every run, so they always follow the current tables. A
group stored with other versions is measured again (never mixed in); a file that cannot be read, or whose sha256 (over
its record and its output's bits, stored with them) does not match its contents, is set aside
(core.plumbing.output.set_aside) and its group measured again: a flipped bit or an edited record is never reported as
measured.
"""
from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np

from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.plumbing.output import atomic_write_bytes, set_aside
from gelulab.core.plumbing.provenance import package_versions
from gelulab.experiments.parity.engine import inputs

FOLDER = "groups"
_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def group_path(out: Path, group) -> Path:
    """Where one group's output is stored."""
    return Path(out) / FOLDER / f"{group.id}.npz"


def backend_versions(backend) -> dict:
    """gelulab, numpy and ml_dtypes versions and the backend's own (a missing optional package is recorded)."""
    try:
        own = backend.versions()
    except ImportError as e:
        own = {e.name or backend.name: "not installed"}
    return {**package_versions(("numpy", "ml_dtypes")), **own}


def group_key(versions: dict, group, regions) -> dict:
    """The key a stored group must match to be reused (see the module docstring)."""
    x, _ = inputs(group.dtype, tuple(regions))
    return {"versions": versions, "device": group.device, "cpu_dispatch": group.dispatch,
            "inputs_sha256": hashlib.sha256(x.tobytes()).hexdigest()}


def digest(meta: dict, bits: np.ndarray | None) -> str:
    """sha256 (hex) of a stored group: its JSON record without "sha256" (keys sorted) and, when it holds an output,
    the bits' dtype, shape and bytes (little-endian as stored). Changing any bit or field changes it."""
    h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    if bits is not None:
        h.update(f"|{bits.dtype.str}|{bits.shape}|".encode())
        h.update(np.ascontiguousarray(bits).tobytes())
    return h.hexdigest()


def save(out: Path, group, key: dict, actual: np.ndarray | None, exception: str | None) -> Path:
    """Write one group's output atomically (npz: the output's bits and a JSON record of key, exception and the
    sha256 of both, digest())."""
    bits = None if actual is None else np.ascontiguousarray(actual).view(_UINT[actual.dtype.itemsize])
    record = {"group": group.id, "key": key, "exception": exception}
    arrays = {"meta": np.array(json.dumps({**record, "sha256": digest(record, bits)}))}
    if bits is not None:
        arrays["bits"] = bits
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(group_path(out, group), buf.getvalue())


def load(out: Path, group, key: dict, regions) -> tuple[str, np.ndarray | None, str | None, str]:
    """Read a stored group: (status, actual, exception, detail) with status
    "missing" (no file), "ok" (actual or exception as measured), "stale" (measured with another key; detail
    names what changed) or "damaged" (unreadable, inconsistent, or its checksum missing or not matching its
    contents; the file has been set aside, detail names it, says why and where it went)."""
    path = group_path(out, group)
    if not path.exists():
        return "missing", None, None, ""
    x, _ = inputs(group.dtype, tuple(regions))
    try:
        if not path.is_file():  # a FIFO or a device in its place: never read (a FIFO blocks)
            raise ValueError("not a regular file")
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            bits = z["bits"] if "bits" in z.files else None
        if not isinstance(meta, dict) or meta.get("group") != group.id or not isinstance(meta.get("key"), dict):
            raise ValueError("not a record of this group")
        exc = meta.get("exception")
        if bits is None and not isinstance(exc, str):
            raise ValueError("holds neither an output nor an exception")
        if not isinstance(meta.get("sha256"), str):
            raise ValueError("has no checksum")  # noqa: TRY004 - a damaged file, set aside below
        if meta["sha256"] != digest(meta, bits):
            raise ValueError("its checksum does not match its contents (the file was edited or damaged)")
        actual = None
        if bits is not None:
            dtype = DTYPES[group.dtype].np_dtype
            if bits.dtype != _UINT[dtype.itemsize] or bits.shape != x.shape:
                raise ValueError(f"output of {bits.dtype}{bits.shape}, expected {x.shape[0]} values of {dtype}")
            actual = bits.view(dtype)
    except Exception as e:  # noqa: BLE001 - any unreadable file is set aside, never trusted
        moved = set_aside(path, "damaged")
        return "damaged", None, None, f"{path} ({type(e).__name__}: {e}); moved to {moved.name}"
    if meta["key"] != key:
        stored = meta["key"]
        changed = [k for k in key if stored.get(k) != key[k]]
        detail = "; ".join(
            ", ".join(f"{n} {stored.get(k, {}).get(n)} -> {v}" for n, v in key[k].items()
                      if stored.get(k, {}).get(n) != v) if k == "versions" and isinstance(stored.get(k), dict)
            else f"{k} changed" for k in changed)
        return "stale", None, None, detail
    return "ok", actual, exc, ""
