"""Stored swap results: the resumable part of `gelulab swap`.

Each finished result — one (backend, activation, stage) row, stage "original", "swapped" or "fine-tuned" — is
written atomically to `<out>/parts/<backend>/<activation>.<stage>.json` with its key: the settings that decide its
numbers (model file digests, pairs file digest, impl, batch size; for a fine-tune also steps, lr, batch,
sentences, seed) and the versions of gelulab, numpy and the backend's packages. A rerun with the same --out
reuses the stored results; results of other settings are refused before any model work (use another --out), a
file that cannot be used (its checksum, the sha256 of its record stored in it, missing or not matching: edited or
damaged) is set aside as `*.damaged-<n>`, and results of other versions as `*.stale-<n>`; both are computed again.
"""
from __future__ import annotations

import json
from pathlib import Path

from gelulab.core.plumbing.output import set_aside
from gelulab.core.plumbing.provenance import package_versions, version_changes
from gelulab.core.plumbing.report import verify_checksum, write_json

FOLDER = "parts"
ROW_FIELDS = ("backend", "activation", "stage", "steps", "seconds", "cos_mean", "cos_worst", "drift", "auc")


def part_path(out: Path, backend: str, activation: str, stage: str) -> Path:
    """Where one result is stored."""
    return Path(out) / FOLDER / backend / f"{activation}.{stage}.json"


def versions(backend_versions: dict) -> dict:
    """The versions part of a key: gelulab, numpy and the packages named by `backend_versions`."""
    return package_versions(("numpy", *backend_versions))


def save(out: Path, backend: str, activation: str, stage: str, key: dict, versions_key: dict, row: dict,
         finetune: dict | None = None) -> Path:
    """Write one result atomically, with the sha256 of its record (core.plumbing.report.write_json checksum=True)."""
    return write_json(part_path(out, backend, activation, stage),
                      {"key": key, "versions": versions_key, "row": row, "finetune": finetune}, checksum=True)


def load(out: Path, backend: str, activation: str, stage: str, key: dict) -> tuple[str, dict | None, str]:
    """(status, record, detail): status "missing", "ok" (record: {"row", "finetune", "versions"}), "settings"
    (made with other settings; detail names them; nothing is moved), "damaged" (unreadable, incomplete, or its
    checksum missing or not matching; set aside; detail names the file, says why and where it went) or "stale" (other
    versions; set aside; detail names them)."""
    path = part_path(out, backend, activation, stage)
    if not path.exists():
        return "missing", None, ""
    try:
        if not path.is_file():  # a FIFO or a device in its place: never read (a FIFO blocks)
            raise ValueError("not a regular file")
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or not isinstance(rec.get("key"), dict):
            raise ValueError("not a swap result")  # noqa: TRY004 - a damaged file, set aside below
        norm = json.loads(json.dumps(key))
        diff = sorted(k for k in set(norm) | set(rec["key"]) if norm.get(k) != rec["key"].get(k))
        if diff:
            return "settings", None, ", ".join(f"{k}: stored {rec['key'].get(k)!r}, now {norm.get(k)!r}"
                                               for k in diff)
        row = rec.get("row")
        if not isinstance(row, dict) or any(f not in row for f in ROW_FIELDS) or \
                (row["backend"], row["activation"], row["stage"]) != (backend, activation, stage):
            raise ValueError("its row is missing, incomplete or another result's")
        if stage == "fine-tuned" and not isinstance(rec.get("finetune"), dict):
            raise ValueError("its fine-tune record is missing")
        if not isinstance(rec.get("versions"), dict):
            raise ValueError("it has no version record")  # noqa: TRY004 - a damaged file, set aside below
        problem = verify_checksum(rec)
        if problem is not None:
            raise ValueError(problem)
    except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError is a ValueError
        moved = set_aside(path, "damaged")
        return "damaged", None, f"{path} ({e}); kept as {moved.name}"
    changes = version_changes(rec["versions"], package_versions([n for n in rec["versions"] if n != "gelulab"]))
    if changes:
        set_aside(path, "stale")
        return "stale", None, ", ".join(changes)
    return "ok", rec, ""
