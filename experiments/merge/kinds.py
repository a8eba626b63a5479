"""The result folders `gelulab merge` understands: how to recognise each, its experiment settings, and its rows.

KINDS maps a kind to a `Kind`: the results file it writes, a test that a loaded file is of that kind, the
experiment settings (what must be equal for two runs to be set side by side: a learning rate, a grid, the
parity filters and tolerances), the rows (one dict per measured thing, keyed by the columns of `key`) and the
values shown per run. The place to add a command's results to `gelulab merge`.

  parity  parity.json (experiments/parity/command.py): per backend x impl x activation x dtype x mode x order,
          the largest ULP error over the elements judged by ULP (normal inputs and results: each cell's
          max_ulp_normal, the figure of report.md's summary) and the regions beyond tolerance
  bench   bench.json (benchmarks/activations.py): per cell, the median seconds per call and elements/s
  moons   results.json with config and runs (experiments/moons/study.py): per backend x regime x arm, the mean
          test accuracy in % and the geometric mean test loss (as report.md shows them); per GELU form, the mean
          paired difference to ReLU (accuracy in percentage points) and its verdict
  grid    grid.json (experiments/moons/grid_study.py): per cell x backend x regime x GELU form x metric, the
          mean paired difference to ReLU (accuracy in percentage points) and its verdict
  swap    swap.json (experiments/swap/command.py): per backend x activation x stage, the embedding cosines
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One kind of results folder. file: the results file's name; detect(data) -> bool; settings(data) ->
    {field: value} (equal across merged runs); rows(data) -> [dict]; key: the row fields that identify a row;
    values: [(field, heading, format)] shown per run; description: what the rows are."""

    name: str
    file: str
    detect: Callable[[dict], bool]
    settings: Callable[[dict], dict]
    rows: Callable[[dict], list]
    key: tuple
    values: tuple
    description: str


# non-finite floats as core.plumbing.report.json_text writes them
SPECIAL = {"nan", "inf", "-inf", "infinity", "-infinity"}


def _value(v, what: str, lo: float = -math.inf, hi: float = math.inf):
    """A measured value read for the merge: a finite number in [lo, hi] as is; None for a value not recorded
    (None) or not finite (a float or its string form "nan", "inf"). Raises TypeError naming `what` for any
    other type (a string, a bool, a list...), ValueError for a finite number outside [lo, hi], so the file is set
    aside as damaged (merge.command.damage) rather than shown with a value no run can produce."""
    if v is None or (isinstance(v, str) and v.strip().lower() in SPECIAL):
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise TypeError(f"{what} is {_shown(v)}, expected a number")
    try:
        finite = math.isfinite(v)
    except OverflowError:  # an integer beyond any float: no run writes one
        raise ValueError(f"{what} is an integer of {len(str(abs(v)))} digits, expected a measured number") from None
    if not finite:
        return None
    if not lo <= v <= hi:
        span = f"of at least {lo:g}" if hi == math.inf else f"from {lo:g} to {hi:g}"
        raise ValueError(f"{what} is {v!r}, expected a number {span}")
    return v


def _shown(v, limit: int = 40) -> str:
    """repr(v), cut to `limit` characters, for a message about a damaged value."""
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."


COSINE_SLACK = 1e-6  # a cosine computed in float32 may exceed 1 by rounding


def _f(digits):
    return lambda v: "—" if v is None else (f"{v:.{digits}g}" if isinstance(v, float) else str(v))


def _pct(v):
    return "—" if v is None else f"{100 * v:.2f}"


# ------------------------------------------------------------------------------------------------- parity


def _parity_settings(d: dict) -> dict:
    cells = d.get("cells", [])
    return {
        "impls": sorted({c["impl"] for c in cells}), "activations": sorted({c["activation"] for c in cells}),
        "dtypes": sorted({c["dtype"] for c in cells}), "modes": sorted({c["mode"] for c in cells}),
        "orders": sorted({c["order"] for c in cells}), "regions": sorted({c["region"] for c in cells}),
        "tolerances": d.get("tolerances"),
    }


def _parity_rows(d: dict) -> list:
    rows = {}
    for c in d.get("cells", []):
        k = (c["backend"], c["impl"], c["activation"], c["dtype"], c["mode"], c["order"])
        r = rows.setdefault(k, {"backend": k[0], "impl": k[1], "activation": k[2], "dtype": k[3], "mode": k[4],
                                "order": k[5], "max_ulp_normal": None, "beyond": 0, "regions": 0})
        if not isinstance(k[5], int) or isinstance(k[5], bool) or k[5] < 0:
            raise ValueError(f"a cell's order is {k[5]!r}, expected a derivative order 0, 1, 2, ...")
        r["regions"] += 1
        # the elements judged by ULP, as report.md's summary (experiments/parity/command.summary_table): results
        # below the smallest normal and special values are judged absolutely and show as regions beyond tolerance
        u = _value(c["max_ulp_normal"], "a cell's max_ulp_normal", 0)
        if u is not None:
            r["max_ulp_normal"] = u if r["max_ulp_normal"] is None else max(r["max_ulp_normal"], u)
        passed = c.get("passed", True)
        if not isinstance(passed, bool):
            raise TypeError(f"a cell's passed is {passed!r}, expected true or false")
        r["beyond"] += not passed
    return list(rows.values())


# -------------------------------------------------------------------------------------------------- bench


def _bench_settings(d: dict) -> dict:
    grid = {k: v for k, v in d.get("grid", {}).items() if k not in ("backends", "devices")}
    return {**{f"grid.{k}": v for k, v in grid.items()}, **{f"timer.{k}": v for k, v in d.get("timer", {}).items()}}


def _bench_rows(d: dict) -> list:
    keys = ("backend", "mode", "activation", "impl", "direction", "dtype", "size")
    return [{**{k: c.get(k) for k in keys}, "median_s": _positive(c.get("median_s"), "a cell's median_s"),
             "elements_per_s": _positive(c.get("elements_per_s"), "a cell's elements_per_s")}
            for c in d.get("cells", []) if c.get("status") == "ok"]


def _positive(v, what: str):
    """_value for a quantity that is positive when measured (seconds per call, elements per second)."""
    v = _value(v, what, 0)
    if v == 0:
        raise ValueError(f"{what} is 0, expected a positive number")
    return v


# -------------------------------------------------------------------------------------------------- moons


def _moons_settings(d: dict) -> dict:
    return dict(d.get("config", {}))


def _scaled(v, scale, what: str = "a value", lo: float = -math.inf, hi: float = math.inf):
    """scale × _value(v, what, lo, hi) (None stays None)."""
    v = _value(v, what, lo, hi)
    return None if v is None else scale * v


_MOONS_PAIRED = {"test_acc": ("test acc − ReLU, pp (mean paired difference)", 100.0),
                 "test_loss": ("test loss − ReLU (mean paired difference)", 1.0)}
# the range of a mean paired difference per metric: accuracies are fractions, so their difference is in [-1, 1]
_DIFF_RANGE = {"test_acc": (-1.0, 1.0)}


def _moons_rows(d: dict) -> list:
    """The moons report's own measures, under names that say what they hold: the mean test accuracy in per
    cent, the geometric mean test loss (as in report.md's summary table), and per GELU form the mean paired
    difference to ReLU (accuracy in percentage points) with its verdict."""
    rows = []
    for s in d.get("summary", []):
        rows.append({"backend": s["backend"], "regime": s["regime"], "arm": s["arm"], "measure": "test acc % (mean)",
                     "value": _scaled(s["test_acc"].get("mean"), 100.0, "a summary's test_acc mean", 0, 1),
                     "verdict": ""})
        rows.append({"backend": s["backend"], "regime": s["regime"], "arm": s["arm"],
                     "measure": "test loss (geometric mean)",
                     "value": _value(s["test_loss"].get("geo_mean"), "a summary's test_loss geo_mean", 0),
                     "verdict": ""})
    for p in d.get("paired", []):
        label, scale = _MOONS_PAIRED.get(p["metric"], (f"{p['metric']} − ReLU (mean paired difference)", 1.0))
        rows.append({"backend": p["backend"], "regime": p["regime"], "arm": p["arm"], "measure": label,
                     "value": _scaled(p["mean_diff"], scale, f"a paired {p['metric']} mean_diff",
                                      *_DIFF_RANGE.get(p["metric"], (-math.inf, math.inf))),
                     "verdict": p.get("kind", "")})
    return rows


# --------------------------------------------------------------------------------------------------- grid


def _grid_settings(d: dict) -> dict:
    spec = d.get("spec", {})
    return {"axes": spec.get("axes"), "base": spec.get("base"), "heatmap": spec.get("heatmap")}


_GRID_METRICS = {"test_acc": ("test acc, pp", 100.0), "test_loss": ("test loss", 1.0)}


def _grid_rows(d: dict) -> list:
    """Per comparison of the grid report: the mean paired difference GELU form − ReLU, test accuracy in
    percentage points (as in the grid report), test loss as is, and the verdict."""
    rows = []
    for c in d.get("analysis", {}).get("comparisons", []):
        label, scale = _GRID_METRICS.get(c["metric"], (c["metric"], 1.0))
        rows.append({"cell": c["cell"], "backend": c["backend"], "regime": c["regime"], "arm": c["arm"],
                     "metric": label, "kind": c.get("kind", ""),
                     "mean_diff": _scaled(c["mean_diff"], scale, f"a comparison's {c['metric']} mean_diff",
                                          *_DIFF_RANGE.get(c["metric"], (-math.inf, math.inf)))})
    return rows


# --------------------------------------------------------------------------------------------------- swap

_SWAP_WHERE = ("out", "backends", "pairs")  # where the run ran and what it wrote, not what it measured


def _swap_settings(d: dict) -> dict:
    s = {k: v for k, v in d.get("settings", {}).items() if k not in _SWAP_WHERE}
    return {**s, "model.sha256": d.get("model", {}).get("sha256"), "pairs": d.get("pairs")}


def _swap_rows(d: dict) -> list:
    return [{"backend": r["backend"], "activation": r["activation"], "stage": r["stage"],
             "cos_mean": _cosine(r.get("cos_mean"), "a row's cos_mean"),
             "cos_worst": _cosine(r.get("cos_worst"), "a row's cos_worst")} for r in d.get("rows", [])]


def _cosine(v, what: str):
    """_value for a cosine: in [-1, 1] up to float rounding (COSINE_SLACK)."""
    return _value(v, what, -1 - COSINE_SLACK, 1 + COSINE_SLACK)


KINDS = {k.name: k for k in (
    Kind("parity", "parity.json", lambda d: "cells" in d and "tolerances" in d, _parity_settings, _parity_rows,
         ("backend", "impl", "activation", "dtype", "mode", "order"),
         (("max_ulp_normal", "max ULP (normal inputs)", _f(3)), ("beyond", "regions beyond tolerance", _f(3))),
         "largest ULP error over the elements judged by ULP (normal inputs whose result is at least the smallest "
         "normal and the tolerance's absolute floor, as in report.md's summary; smaller results and special values "
         "are judged absolutely and count in the regions beyond tolerance), and how many regions are beyond "
         "tolerance"),
    Kind("bench", "bench.json", lambda d: "cells" in d and "timer" in d, _bench_settings, _bench_rows,
         ("backend", "mode", "activation", "impl", "direction", "dtype", "size"),
         (("median_s", "median s per call", _f(3)),),
         "median seconds per call (lower is faster); the ratio to the first run beside it"),
    Kind("moons", "results.json", lambda d: "config" in d and "runs" in d, _moons_settings, _moons_rows,
         ("backend", "regime", "arm", "measure"), (("value", "value", _f(4)), ("verdict", "verdict", str)),
         "mean test accuracy (%) and geometric mean test loss per arm; the mean paired difference of each GELU "
         "form to ReLU (accuracy in pp) and its verdict"),
    Kind("grid", "grid.json", lambda d: "spec" in d and "analysis" in d, _grid_settings, _grid_rows,
         ("cell", "backend", "regime", "arm", "metric"), (("mean_diff", "GELU − ReLU (mean paired difference)", _f(3)),
                                                          ("kind", "verdict", str)),
         "per cell, the paired difference GELU form − ReLU and its verdict (BH-adjusted within each run)"),
    Kind("swap", "swap.json", lambda d: "rows" in d and "model" in d, _swap_settings, _swap_rows,
         ("backend", "activation", "stage"), (("cos_mean", "mean cosine", _f(6)), ("cos_worst", "worst cosine",
                                                                                  _f(6))),
         "mean and worst token cosine of each swapped (or fine-tuned) model to the original"),
)}
FILES = {k.file for k in KINDS.values()}
