"""Figures derived from the timed cells: throughput against the copy bandwidth, cost ratios, run-to-run ratios.

All ratios are ratios of median times per call of two cells measured in the same run (or, for `compare`, the
same cell in two runs); > 1 means the numerator is slower.
"""
from __future__ import annotations

from gelulab.benchmarks.bandwidth import cell_throughput
from gelulab.benchmarks.grid import AXES
from gelulab.core.activations import BASELINE
from gelulab.core.numerics.dtypes import get_dtype

GOOD = ("ok",)  # rows whose times enter ratios ("recompiled", "not compiled" and "error" rows do not)


def cell_key(row: dict, drop: tuple = ()) -> tuple:
    """The row's coordinates in grid.AXES order, without the axes named in `drop`."""
    return tuple(row[a] for a in AXES if a not in drop)


def reference(host: dict, devices: dict, backend: str, device: str) -> dict:
    """The copy-bandwidth reference of a cell: `host` ({"gbps", "curve"}: numpy's copy) on a CPU, else
    devices["<backend>/<device>"] (the framework's own device copy). Curve keys may be str (from JSON) or int."""
    ref = host if device == "cpu" else devices[f"{backend}/{device}"]
    return {"gbps": ref["gbps"], "curve": {int(k): v for k, v in ref["curve"].items()}}


def add_throughput(rows: list[dict], host: dict, devices: dict) -> None:
    """Add to every timed row (in place): elements_per_s, gbps (effective GB/s, bytes read + written),
    pct_copy (% of the large-array copy bandwidth of its reference, see `reference`) and pct_copy_same_size
    (% of the copy bandwidth measured at the row's own byte count; None when not measured)."""
    for row in rows:
        if "median_s" not in row:
            continue
        ref = reference(host, devices, row["backend"], row["device"])
        itemsize = get_dtype(row["dtype"]).np_dtype.itemsize
        row.update(cell_throughput(row["size"], itemsize, row["median_s"], ref["gbps"]))
        same = ref["curve"].get(row["size"] * itemsize)
        row["pct_copy_same_size"] = 100.0 * row["gbps"] / same if same else None


def _good(rows):
    return {cell_key(r): r for r in rows if r.get("status") in GOOD}


def gelu_over_relu(rows: list[dict]) -> list[dict]:
    """For every cell of an activation other than the baseline (core.activations.BASELINE, ReLU: the GELU forms and
    SiLU) with a baseline cell at the same backend, device, mode, impl, direction, dtype and size: {those axes,
    "activation": its key, "ratio": its median time / the baseline's, "gelu_s": its median, "relu_s": the
    baseline's}."""
    good = _good(rows)
    out = []
    for row in good.values():
        if row["activation"] == BASELINE:
            continue
        relu = good.get(cell_key({**row, "activation": BASELINE}))
        if relu is None:
            continue
        out.append({**{a: row[a] for a in AXES}, "ratio": row["median_s"] / relu["median_s"],
                    "gelu_s": row["median_s"], "relu_s": relu["median_s"]})
    return out


def over_builtin(rows: list[dict], impl: str) -> list[dict]:
    """For every `impl` cell with a builtin cell at the same other axes: {the axes but impl, "ratio": median
    `impl` time / median builtin time, "<impl>_s", "builtin_s"}."""
    good = _good(rows)
    out = []
    for row in good.values():
        if row["impl"] != impl:
            continue
        builtin = good.get(cell_key({**row, "impl": "builtin"}))
        if builtin is None:
            continue
        out.append({**{a: row[a] for a in AXES if a != "impl"}, "ratio": row["median_s"] / builtin["median_s"],
                    f"{impl}_s": row["median_s"], "builtin_s": builtin["median_s"]})
    return out


def formula_over_builtin(rows: list[dict]) -> list[dict]:
    """over_builtin for gelulab's formula; the goal: ratio <= 1.2 at 1e6 float32."""
    return over_builtin(rows, "formula")


def kernel_over_builtin(rows: list[dict]) -> list[dict]:
    """over_builtin for gelulab's float32 kernels: the goal is ratio <= 1.5 compiled (aim 1.2), <= 3 torch eager,
    at 1e6 float32."""
    return over_builtin(rows, "kernel")


def compare(rows_a: list[dict], rows_b: list[dict]) -> dict:
    """Cell-by-cell B / A of the median time per call, for cells timed cleanly ("ok") in both runs.

    Returns {"matched": [{axes..., "a_s", "b_s", "ratio"}] in A's order, "only_a": [keys], "only_b": [keys]}.
    """
    a, b = _good(rows_a), _good(rows_b)
    matched = [{**{ax: ra[ax] for ax in AXES}, "a_s": ra["median_s"], "b_s": b[k]["median_s"],
                "ratio": b[k]["median_s"] / ra["median_s"]} for k, ra in a.items() if k in b]
    return {"matched": matched, "only_a": [k for k in a if k not in b], "only_b": [k for k in b if k not in a]}
