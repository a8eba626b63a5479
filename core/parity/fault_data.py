"""Known-fault rows as data: each catalogue unit's faults file, core/activations/faults/<key>.toml, read into
core.parity.known_faults.KnownFault rows (the unit's `known_faults`).

A faults file holds two kinds of table (TOML 1.0, read with the standard library's tomllib):

* `[mechanism.NAME]`: one mechanism of this unit: `reason` (one line, however it is wrapped in the file), `link`
  (the upstream issue or PR, or where none exists the closest one and a note) and, where the link alone would
  mislead, `kind` (one of core.parity.known_faults.KINDS).
* `[[fault]]`: one row, the cells where a mechanism shows: `mechanism` (a NAME of this file, or a mechanism shared
  by several activations and defined in core.parity.known_faults: INF_GRAD, INF_VALUE, INF_VALUE_torch,
  NUMPY_REF, OVERFLOW_GRAD), `backend`, `orders`, `regions`, `dtypes`, `modes` (lists), and optionally `impl`
  ("builtin" unless named), `dispatch` (the CPU dispatch levels where it occurs) and `varies` (where it was seen,
  when no forcible setting decides it); see core.parity.known_faults.KnownFault.

A unit whose builtins have no known fault has no faults file and does not call `load`. `gelulab parity --draft-faults`
drafts both kinds of table for the NEW cells of a run (experiments.parity.draft).
"""
from __future__ import annotations

import tomllib
from importlib import resources

from gelulab.core.parity import known_faults

PACKAGE = "gelulab.core.activations"  # the faults files: <that package>/faults/<key>.toml
SHARED = ("INF_GRAD", "INF_VALUE", "INF_VALUE_torch", "NUMPY_REF", "OVERFLOW_GRAD")
MECHANISM_KEYS = {"reason", "link", "kind"}
ROW_KEYS = {"mechanism", "backend", "orders", "regions", "dtypes", "modes"}
OPTIONAL_ROW_KEYS = {"impl", "dispatch", "varies"}


def path(key: str):
    """The faults file of catalogue unit `key` (an importlib.resources Traversable; it may not exist)."""
    return resources.files(PACKAGE) / "faults" / f"{key}.toml"


def load(key: str) -> tuple[known_faults.KnownFault, ...]:
    """The known-fault rows of catalogue unit `key`, in the order of its faults file (core/activations/faults/
    <key>.toml). Raises FileNotFoundError naming the file where it is missing (an installation without the package
    data), ValueError naming it for a file that is not TOML or a table that is not a mechanism or row as the module
    docstring describes."""
    source = path(key)
    if not source.is_file():
        raise FileNotFoundError(f"the known faults of catalogue unit {key!r} are missing: no file {source}")
    return parse(source.read_text(encoding="utf-8"), f"core/activations/faults/{key}.toml")


def parse(text: str, name: str = "<faults>") -> tuple[known_faults.KnownFault, ...]:
    """The rows of a faults file's text (module docstring); `name` names it in errors. Raises ValueError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{name} is not TOML: {e}") from None
    extra = set(data) - {"mechanism", "fault"}
    if extra:
        raise ValueError(f"{name}: unknown tables {sorted(extra)}; expected [mechanism.NAME] and [[fault]]")
    mechanisms = {}
    for mname, m in data.get("mechanism", {}).items():
        if not isinstance(m, dict) or set(m) - MECHANISM_KEYS or not {"reason", "link"} <= set(m):
            raise ValueError(f"{name}: mechanism {mname!r} must have reason and link (and optionally kind), "
                             f"got {sorted(m) if isinstance(m, dict) else m!r}")
        mechanisms[mname] = (m["reason"], m["link"], *([m["kind"]] if "kind" in m else []))
    rows = []
    for i, row in enumerate(data.get("fault", []), start=1):
        missing, unknown = ROW_KEYS - set(row), set(row) - ROW_KEYS - OPTIONAL_ROW_KEYS
        if missing or unknown:
            raise ValueError(f"{name}: fault row {i} lacks {sorted(missing)} or has unknown keys {sorted(unknown)}")
        rows.append(known_faults.fault(
            _mechanism(row["mechanism"], mechanisms, name, i), row["backend"], tuple(row["orders"]),
            tuple(row["regions"]), tuple(row["dtypes"]), tuple(row["modes"]), impl=row.get("impl", "builtin"),
            dispatch=tuple(row["dispatch"]) if "dispatch" in row else None, varies=row.get("varies")))
    return tuple(rows)


def _mechanism(mname: str, mechanisms: dict, name: str, i: int) -> tuple:
    if mname in mechanisms:
        return mechanisms[mname]
    if mname in SHARED:
        return getattr(known_faults, mname)
    raise ValueError(f"{name}: fault row {i} names mechanism {mname!r}, which is neither a [mechanism] of the "
                     f"file nor a shared one {list(SHARED)}")
