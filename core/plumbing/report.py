"""Report plumbing shared by every command: environment record, atomic JSON/text writes, Markdown tables.

Every report records gelulab's version, git commit and command line (core.plumbing.provenance), the versions of Python,
numpy and every framework used, the framework settings asked for (gelulab.reproducible), the thread counts in
effect and the CPU, so that its numbers can be reproduced.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
from pathlib import Path

import numpy as np

from gelulab.core.plumbing import config
from gelulab.core.plumbing import settings as framework_settings
from gelulab.core.plumbing.output import atomic_write_bytes
from gelulab.core.plumbing.provenance import provenance


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment(backends=()) -> dict:
    """Provenance and machine: gelulab's version, git commit and command line (core.plumbing.provenance), python, numpy,
    scipy, mpmath, each given Backend's framework versions, cores, GELULAB_THREADS, GELULAB_DEVICE, CPU model,
    OPENBLAS_CORETYPE if set, and "settings": the arguments of the last gelulab.reproducible call ({"threads",
    "x64", "tf32"}), None when it was not called.

    "frameworks": {backend: {package: version}}; a missing optional package (ImportError in versions()) is
    recorded as {package: "not installed"}. "threads_in_effect": {backend: the dict its activations module's
    threads() returns} for backends that offer it (the count actually in force, e.g. TF's when its runtime had
    started before GELULAB_THREADS could apply). "cpu_dispatch": {backend: the CPU kernel level its framework runs
    at (Backend.cpu_dispatch), which known faults may depend on}."""
    import mpmath
    import scipy
    import sklearn

    env = {
        **provenance(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "mpmath": mpmath.__version__,
        "scikit-learn": sklearn.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": config.threads(),
        "device": config.device(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "settings": None if framework_settings.requested() is None else framework_settings.requested().as_dict(),
        "frameworks": {},
        "threads_in_effect": {},
        "cpu_dispatch": {},
    }
    for b in backends:
        try:
            env["frameworks"][b.name] = b.versions()
        except ImportError as e:  # an optional package (e.g. flax, keras) is missing: record it, keep the report
            env["frameworks"][b.name] = {e.name or b.name: "not installed"}
        env["cpu_dispatch"][b.name] = b.cpu_dispatch()
        threads = getattr(b.module, "threads", None)
        if threads is not None:
            env["threads_in_effect"][b.name] = threads()
    return env


def _clean(o):
    """Make floats JSON-safe: inf/-inf/nan become the strings "inf", "-inf", "nan"."""
    if isinstance(o, (float, np.floating)):
        f = float(o)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    return o


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically (core.plumbing.output.atomic_write_bytes); creates parent dirs.
    A crash mid-write leaves the old file (or none), never a truncated one. Returns the Path."""
    return atomic_write_bytes(path, text.encode("utf-8"))


CHECKSUM_FIELD = "sha256"


def record_digest(data: dict) -> str:
    """sha256 (hex) of a JSON record without its CHECKSUM_FIELD: over its canonical form (core.plumbing.report._clean,
    keys sorted, no whitespace, UTF-8), so re-indenting a file keeps the digest and changing any value changes it."""
    body = {k: v for k, v in _clean(data).items() if k != CHECKSUM_FIELD}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def json_text(data, checksum: bool = False) -> str:
    """`data` as indented JSON text (non-finite floats as strings, numpy scalars as numbers). checksum=True (data
    a dict): the record gets a last field "sha256", record_digest(data), which verify_checksum checks."""
    data = _clean(data)
    if checksum:
        if not isinstance(data, dict):
            raise TypeError(f"checksum: expected a dict record, got {type(data).__name__}")
        data = {**{k: v for k, v in data.items() if k != CHECKSUM_FIELD}, CHECKSUM_FIELD: record_digest(data)}
    return json.dumps(data, indent=2, sort_keys=False) + "\n"


def verify_checksum(rec: dict) -> str | None:
    """None when the record read from a file carries a CHECKSUM_FIELD equal to record_digest(rec); else the
    problem in words: "has no checksum" or "its checksum does not match its contents (the file was edited or
    damaged)"."""
    stored = rec.get(CHECKSUM_FIELD)
    if not isinstance(stored, str):
        return "has no checksum"
    if stored != record_digest(rec):
        return "its checksum does not match its contents (the file was edited or damaged)"
    return None


def write_json(path: str | os.PathLike, data, checksum: bool = False) -> Path:
    """Atomically write `data` as indented JSON (json_text: non-finite floats as strings, numpy scalars as
    numbers; checksum=True adds the record's sha256, checked on reading with verify_checksum)."""
    return atomic_write_text(path, json_text(data, checksum))


def fmt(v, digits: int = 3) -> str:
    """Format a number for a Markdown table: integers as is, floats with `digits` significant digits."""
    if v is None:
        return "—"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f) or math.isinf(f):
            return str(f)
        if f == 0:
            return "0"
        if 1e-3 <= abs(f) < 1e5:
            return f"{f:.{digits}g}"
        return f"{f:.{max(digits - 1, 1)}e}"
    return str(v)


def markdown_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table; cells formatted with fmt() and escaped (table_cell). Raises ValueError if a row has
    the wrong length."""
    for r in rows:
        if len(r) != len(headers):
            raise ValueError(f"row has {len(r)} cells, expected {len(headers)}: {r!r}")
    lines = ["| " + " | ".join(table_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(table_cell(fmt(c)) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def table_cell(text) -> str:
    """str(text) as one Markdown table cell: a pipe escaped (\\|) and a line break made a space, so a value read
    from a file (a backend name, a path) cannot end its cell or row and forge another."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
