"""`gelulab parity`: the parity matrix as a report (Markdown, JSON, plots, special-value behaviour matrix).

Every cell (backend x impl x activation x dtype x mode x derivative order x region) is compared with the
correctly rounded mpmath reference (experiments.parity.engine); cells beyond tolerance are flagged and classified
by core.parity.known_faults: an upstream fault (with its link), a known fault not reported upstream, gelulab's own
formula, or NEW (no known fault). Eager is no oracle: every mode is compared with the reference.

Each measured group is stored as it finishes (experiments.parity.store), so Ctrl-C keeps what was measured and
the same command resumes. `--fail-on-new` makes the command exit 1 when a cell is beyond tolerance and matches no
known fault, so a CI job can run it on its own framework versions and devices. `--draft-faults` prints draft
known-fault rows for the NEW cells (experiments.parity.draft), for a person to check upstream before they go into
the activation's faults file (core/activations/faults/<key>.toml).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gelulab.backends import BACKEND_NAMES, capabilities, get_backend, reproducible, selected_backends
from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.contracts.interface import ORDERS
from gelulab.core.numerics.dtypes import DTYPES
from gelulab.core.parity.known_faults import KINDS, KNOWN_FAULTS
from gelulab.core.parity.reference import reference, reference_float
from gelulab.core.parity.regions import FAR_TAIL_POINT, REGIONS
from gelulab.core.parity.tolerances import (
    FORMULA_GOALS,
    TOLERANCES,
    in_root_window,
    overrides,
    overrides_for,
    tolerance,
)
from gelulab.core.plumbing import config
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.core.plumbing.report import atomic_write_text, environment, fmt, markdown_table, write_json
from gelulab.experiments.parity import store
from gelulab.experiments.parity.draft import draft_faults
from gelulab.experiments.parity.engine import check, groups, measure, results

SPECIAL_INPUTS = {"+0": 0.0, "-0": -0.0, "+inf": np.inf, "-inf": -np.inf, "nan": np.nan, "max": "max", "-max": "-max"}


def _csv(value, allowed, name):
    """Parse a comma-separated filter: None -> every allowed value; otherwise the named values, in order, without
    repeats. Raises ValueError naming the option for an empty value or a value not in `allowed`."""
    if value is None:
        return tuple(allowed)
    items = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not items:
        raise ValueError(f"--{name} {value!r} is empty; expected one or more of {list(allowed)}")
    for v in items:
        if v not in [str(a) for a in allowed]:
            raise ValueError(f"--{name} {v!r} is not valid; expected one or more of {list(allowed)}")
    return items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Filters (comma-separated lists) and the output folder."""
    parser.add_argument("--backend", help="backends (default: GELULAB_BACKEND, else all installed)")
    parser.add_argument("--dtype", help=f"dtypes, of {list(DTYPES)}")
    parser.add_argument("--mode", help="modes, of ['eager', 'compiled']")
    parser.add_argument("--device", help="cpu, gpu or tpu (default: GELULAB_DEVICE or cpu)")
    parser.add_argument("--activation", help=f"catalogue keys, of {list(ACTIVATIONS)}")
    parser.add_argument("--impl", help=f"implementations, of {list(IMPLS)}")
    parser.add_argument("--order", help="derivative orders, of 0,1,2")
    parser.add_argument("--out", default="results/parity",
                        help="output folder (default results/parity); rerunning with the same folder resumes")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--fail-on-new", action="store_true",
                        help="exit 1 when a cell is beyond tolerance and matches no known fault (for CI)")
    parser.add_argument("--draft-faults", action="store_true",
                        help="print draft known-fault rows (TOML, one per mechanism guess) for the NEW cells, each "
                             "to be checked upstream by a person before it goes into the activation's faults file "
                             "(core/activations/faults/<key>.toml)")


FLAG_LABELS = {**KINDS, "new": "NEW: no known fault", "exception": "EXCEPTION: the call raised"}


def flag_kind(row: dict) -> str | None:
    """Why a cell row is flagged: None (within tolerance), a core.parity.known_faults KINDS key ("upstream",
    "unreported", "gelulab"), "exception" (the call raised, no known fault) or "new"."""
    if row["passed"]:
        return None
    if row["known_fault"]:
        return row["known_fault"]["kind"]
    return "exception" if row["exception"] else "new"


def _rows(g, res) -> list[dict]:
    """JSON-ready cell rows of one group's {region: CellResult}, judged now (tolerances and known faults)."""
    rows = []
    for region, r in res.items():
        v = check(r)
        e = r.error
        rows.append({
            "backend": g.backend, "impl": g.impl, "activation": g.key, "dtype": g.dtype, "mode": g.mode,
            "order": g.order, "device": g.device, "region": region, "n": int(r.x.size),
            "max_ulp": None if e is None else e.max_ulp, "max_abs": None if e is None else e.max_abs,
            "max_rel": None if e is None else e.max_rel, "x_at_max_ulp": None if e is None else e.x_at_max_ulp,
            "x_at_max_rel": None if e is None else e.x_at_max_rel,
            **{f"{k}_normal": val for k, val in r.normal_range_summary(v.tol.atol).items()},
            "passed": v.passed, "n_bad": v.n_bad, "worst_x": v.worst_x,
            "cpu_dispatch": g.dispatch,
            "known_fault": None if v.fault is None else {"reason": v.fault.reason, "link": v.fault.link,
                                                          "kind": v.fault.classification,
                                                          "condition": v.fault.condition(g)},
            "overrides": [o.reason for o in overrides_for(g)], "exception": r.exception,
        })
    for row in rows:
        row["flag"] = flag_kind(row)
    return rows


def collect(backends, impls=IMPLS, keys=tuple(ACTIVATIONS), dtypes=tuple(DTYPES), modes=None, orders=ORDERS,
            progress: bool = True, out: Path | None = None):
    """Evaluate and judge every cell. Returns a list of dicts (one per cell, JSON-ready), the raw results
    {group: {region: CellResult}} for plots, and what the store did {"measured", "reused", "stale": [detail],
    "damaged": [detail]}. With `out`, each group is read from `out`/groups when stored with the current key and
    otherwise measured and stored at once (experiments.parity.store). A framework exception is recorded in its
    cells, never raised."""
    gs = groups(backends, impls, keys, dtypes, modes, orders)
    by_name = {b.name: b for b in backends}
    versions = {b.name: store.backend_versions(b) for b in backends}
    rows, raw = [], {}
    log = {"measured": 0, "reused": 0, "stale": [], "damaged": []}
    with tqdm(gs, desc="parity", unit="group", disable=not progress) as bar:  # closed (a newline) on Ctrl-C
        for g in bar:
            _collect_group(g, by_name, versions, out, log, rows, raw)
    return rows, raw, log


def _collect_group(g, by_name, versions, out, log, rows, raw) -> None:
    """Read (when stored with the current key) or measure and store one group; append its rows to `rows` and its
    CellResults to `raw`, and count what happened in `log`."""
    status, actual, exc, key = "missing", None, None, None
    if out is not None:
        key = store.group_key(versions[g.backend], g, REGIONS)
        status, actual, exc, detail = store.load(out, g, key, REGIONS)
        if status in ("stale", "damaged"):
            log[status].append(detail)
            if status == "damaged":
                print(f"gelulab parity: {detail}; measuring its group again", file=sys.stderr)
    if status == "ok":
        log["reused"] += 1
    else:
        actual, exc = measure(by_name[g.backend], g)
        log["measured"] += 1
        if out is not None:
            store.save(out, g, key, actual, exc)
    raw[g] = results(g, actual, exc)
    rows += _rows(g, raw[g])


def stored_summary(out: Path) -> str:
    """"N parity groups are stored in <out>/groups" (what an interrupted run kept)."""
    folder = Path(out) / store.FOLDER
    n = len(list(folder.glob("*.npz"))) if folder.is_dir() else 0
    return f"{n} parity groups are stored in {folder}"


def _counts(rows) -> dict:
    """Cells beyond tolerance by flag kind: {"flagged", "upstream", "unreported", "gelulab", "new",
    "exception"}."""
    c = {k: 0 for k in ("flagged", *FLAG_LABELS)}
    for r in rows:
        if r["flag"] is not None:
            c["flagged"] += 1
            c[r["flag"]] += 1
    return c


def counts_sentence(data: dict) -> str:
    """One sentence: cells, flagged cells, and how they split (upstream / unreported / gelulab's own / new)."""
    orders = data["orders"]
    return (f"{len(data['cells'])} cells ({', '.join(data['modes'])}; derivative order{'s' * (len(orders) > 1)} "
            f"{', '.join(map(str, orders))}), {data['n_flagged']} beyond tolerance: {data['n_upstream']} "
            f"upstream faults with a report, {data['n_unreported']} known faults not reported upstream, "
            f"{data['n_own']} of gelulab's own formula or kernel, {data['n_new']} new (no known fault).")


def _max(values):
    finite = [v for v in values if v is not None]
    return max(finite) if finite else None


def summary_table(rows) -> str:
    """Markdown: per backend x impl x activation x dtype, over exactly the cells that ran (every mode and
    derivative order present in `rows`, all regions): the max ULP and max relative error of each derivative order
    that ran, over the elements judged by ULP (normal inputs whose result is at least the smallest normal and the
    tolerance's absolute floor; smaller results and special values are judged absolutely, see
    core.parity.tolerances, and show in the flagged counts), and the cells beyond tolerance split by kind. An order that
    did not run has no column; a group whose every call raised shows "—"."""
    orders = sorted({r["order"] for r in rows})
    names = {0: "f", 1: "f'", 2: "f''"}
    agg: dict = {}
    for r in rows:
        a = agg.setdefault((r["backend"], r["impl"], r["activation"], r["dtype"]),
                           {"ulp": {o: [] for o in orders}, "rel": {o: [] for o in orders}, "rows": []})
        a["ulp"][r["order"]].append(r["max_ulp_normal"])
        a["rel"][r["order"]].append(r["max_rel_normal"])
        a["rows"].append(r)
    out = []
    for (b, impl, key, dt), a in agg.items():
        c = _counts(a["rows"])
        out.append([b, impl, ACTIVATIONS[key].label, dt,
                    *[v for o in orders for v in (_max(a["ulp"][o]), _max(a["rel"][o]))],
                    c["flagged"], c["upstream"], c["unreported"], c["gelulab"], c["new"] + c["exception"]])
    return markdown_table(
        ["backend", "impl", "activation", "dtype",
         *[h for o in orders for h in (f"max ULP {names[o]}", f"max rel {names[o]}")],
         "flagged", "upstream (reported)", "known, unreported", "gelulab's own", "NEW"], out)


def flagged_table(rows) -> str:
    """Markdown: every cell beyond tolerance, with its kind (upstream / known, unreported / gelulab's own /
    NEW / EXCEPTION) and its link."""
    out = []
    order = {k: i for i, k in enumerate(("new", "exception", "upstream", "unreported", "gelulab"))}
    for r in sorted((r for r in rows if r["flag"]), key=lambda r: order[r["flag"]]):
        link = r["known_fault"]["link"] if r["known_fault"] else (r["exception"] or "")
        kind = FLAG_LABELS[r["flag"]]
        if r["known_fault"] and r["known_fault"]["condition"]:
            kind += f" ({r['known_fault']['condition']})"
        out.append([r["backend"], r["impl"], ACTIVATIONS[r["activation"]].label, r["dtype"], r["mode"],
                    f"d{r['order']}", r["region"], r["n_bad"], r["worst_x"], r["max_ulp"], r["max_rel"],
                    kind, link])
    if not out:
        return "No cell beyond tolerance.\n"
    return markdown_table(["backend", "impl", "activation", "dtype", "mode", "order", "region", "bad inputs",
                           "worst x", "max ULP", "max rel", "kind", "link"], out)


def _special_inputs(dtype):
    top = float(DTYPES[dtype].finfo.max)
    return [top if v == "max" else -top if v == "-max" else v for v in SPECIAL_INPUTS.values()]


def behaviour_matrix(backends, dtypes=("float32", "float16", "bfloat16")) -> tuple[str, list]:
    """Special-value behaviour of every builtin beside gelulab's formula (eager, order 0): the output at
    +-0, +-inf, nan and +-max per backend x impl x activation x dtype, marked where it differs from the limit
    (the mpmath reference row). Returns (Markdown, JSON rows)."""
    md, js = [], []
    for dtype in dtypes:
        x = np.array(_special_inputs(dtype), dtype=np.float64).astype(DTYPES[dtype].np_dtype)
        rows = []
        for key in ACTIVATIONS:
            ref = reference(key, x, dtype).astype(np.float64)
            rows.append(["mpmath", "reference", ACTIVATIONS[key].label] + [_show(v) for v in ref])
            for b in backends:
                for impl in (i for i in IMPL_STYLES if i in IMPLS):
                    try:
                        y = b.to_numpy(b.function(key, impl)(b.asarray(x))).astype(np.float64)
                        cells = [_show(yi) + ("" if _same(yi, ri, ACTIVATIONS[key].zero_sign) else " ✗")
                                 for yi, ri in zip(y, ref)]
                    except Exception as e:  # noqa: BLE001 - shown in the matrix
                        cells = [f"error: {type(e).__name__}"] * len(x)
                    rows.append([b.name, impl, ACTIVATIONS[key].label] + cells)
                    js.append({"dtype": dtype, "backend": b.name, "impl": impl, "activation": key,
                               "outputs": dict(zip(SPECIAL_INPUTS, cells))})
        md.append(f"\n**{dtype}** (✗: differs from the mathematical limit, sign of zero included)\n\n")
        md.append(markdown_table(["backend", "impl", "activation"] + list(SPECIAL_INPUTS), rows))
    return "".join(md), js


def _same(y: float, r: float, zero_sign: bool) -> bool:
    """y equals the limit r (NaN equals NaN; the sign of a zero counts where the entry's `zero_sign` says so)."""
    if np.isnan(y) or np.isnan(r):
        return bool(np.isnan(y) and np.isnan(r))
    return bool(y == r and (not zero_sign or np.signbit(y) == np.signbit(r)))


def _show(v: float) -> str:
    if np.isnan(v):
        return "nan"
    if v == 0:
        return "-0" if np.signbit(v) else "+0"
    if np.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return fmt(float(v), 4)


def tail_point_table(raw) -> str:
    """The vector-fill case: x = -5.533906936645508 repeated 64 times (float32), the value every backend, impl and mode
    returned, for each smooth activation (an activation with a tail), beside its true value."""
    rows = []
    x = float(np.float32(FAR_TAIL_POINT))
    order = list(ACTIVATIONS)
    for g, res in sorted(raw.items(), key=lambda item: order.index(item[0].key)):  # stable: backends stay in order
        if g.dtype != "float32" or g.order != 0 or not ACTIVATIONS[g.key].smooth:
            continue
        r = res["cases"]
        mask = r.x.astype(np.float64) == np.float32(FAR_TAIL_POINT)
        vals = np.unique(r.actual[mask]) if r.actual is not None else []
        rows.append([ACTIVATIONS[g.key].label, fmt(reference_float(g.key, x), 4), g.backend, g.impl, g.mode,
                     ", ".join(fmt(float(v), 4) for v in vals)])
    return (f"x = {FAR_TAIL_POINT!r} (float32) repeated 64 times\n\n"
            + markdown_table(["activation", "true value", "backend", "impl", "mode", "returned"], rows))


# Layout of the error figure, in inches (and its resolution): a grid of panels, the legend to their right.
PANEL_W, PANEL_H, LEGEND_W, HEADER_H, DPI = 4.2, 3.0, 3.6, 0.5, 90
# line style per impl (colour is per backend: backend_color)
IMPL_STYLES = {"builtin": "-", "formula": "--", "kernel": ":"}
ROOT_BAND_COLOR = "gold"  # not in tab10, the backends' palette
X_RANGE = (-30.0, 10.0)  # the x range drawn (negative tail and grid regions)
_ROOT_BAND = "|f′| ≈ 0: builtins judged absolutely\n(hollow markers, off the line): see report"
_SMALL_BAND = "results below the smallest normal:\njudged absolutely, not drawn: see report"


PLOT_CAPTION = (
    "Each panel: the largest ULP error in each bin of x, eager mode, over the inputs judged by ULP. Colour: "
    "backend; line: impl (solid builtin, dashed gelulab's formula, dotted gelulab's kernel); backends whose outputs "
    "are bit-identical are one line naming them all. Hatched grey: x where the correctly rounded result is below the "
    "smallest normal; those results are judged by absolute error (the `tolerances` in parity.json) and not drawn. "
    "Yellow (derivative plots): where f′ crosses zero; a builtin is judged there by absolute error (about one "
    "machine epsilon), so its ULP errors, large because f′ is near 0, are hollow markers off the line, and the "
    "cells above say whether they pass.")


def backend_color(name: str):
    """The colour of backend `name` in the parity plots: matplotlib's tab10 palette in the registry's order
    (backends.BACKEND_NAMES), so every backend keeps one colour however many are drawn. Raises ValueError for a
    name not in the registry."""
    import matplotlib

    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown backend {name!r}; valid backends: {list(BACKEND_NAMES)}")
    palette = matplotlib.colormaps["tab10"].colors
    return palette[BACKEND_NAMES.index(name) % len(palette)]


def _plotted(res):
    """The CellResults of the drawn regions (negative tail, grid) of one group whose call returned."""
    return [res[r] for r in ("negative_tail", "grid") if r in res and res[r].actual is not None]


def _bin_max(x, values, edges):
    """Max of `values` per bin of `edges` (x outside the edges dropped); -1 where a bin holds no value."""
    bins = len(edges) - 1
    inside = (x >= edges[0]) & (x <= edges[-1])
    idx = np.clip(np.digitize(x[inside], edges) - 1, 0, bins - 1)
    out = np.full(bins, -1.0)
    np.maximum.at(out, idx, np.minimum(values[inside], 1e15))
    return out


def _spans(flags, edges):
    """[(x0, x1)] of the runs of consecutive True bins."""
    spans, start = [], None
    for i, f in enumerate(list(flags) + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            spans.append((float(edges[start]), float(edges[i])))
            start = None
    return spans


def _same_outputs(drawn):
    """The eager groups of one panel and impl, clustered by bit-identical outputs over the drawn regions: a list
    of lists of (group, results), backends in registry order."""
    clusters: list = []
    for g, res in sorted(drawn, key=lambda item: BACKEND_NAMES.index(item[0].backend)):
        bits = b"".join(p.actual.tobytes() for p in _plotted(res))
        for c in clusters:
            if c[0] == bits:
                c[1].append((g, res))
                break
        else:
            clusters.append((bits, [(g, res)]))
    return [members for _, members in clusters]


def errors_figure(raw, order: int, bins: int = 160):
    """The matplotlib Figure of plot_errors (see there); raises ValueError when `raw` has no eager result of a
    smooth activation of derivative `order`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    drawn = [(g, res) for g, res in raw.items()
             if g.order == order and g.mode == "eager" and ACTIVATIONS[g.key].smooth and _plotted(res)]
    keys = [k for k in ACTIVATIONS if any(g.key == k for g, _ in drawn)]
    dts = [d for d in DTYPES if any(g.dtype == d for g, _ in drawn)]
    if not keys:
        raise ValueError(f"plot_errors: no eager result of a smooth activation of order {order} to plot")
    fig, axes = plt.subplots(len(keys), len(dts), squeeze=False,
                             figsize=(PANEL_W * len(dts) + LEGEND_W, PANEL_H * len(keys) + HEADER_H))
    edges = np.linspace(*X_RANGE, bins + 1)
    centers = 0.5 * (edges[1:] + edges[:-1])
    lines: dict = {}  # (impl, label) -> line handle, for the legend
    bands: dict = {}  # label -> patch
    for i, key in enumerate(keys):
        for j, dtype in enumerate(dts):
            ax = axes[i][j]
            panel = [(g, res) for g, res in drawn if g.key == key and g.dtype == dtype]
            rooted = False  # some line of the panel has elements judged absolutely in a root window
            small = None  # bins holding inputs whose correctly rounded result is below the smallest normal
            for impl in (i for i in IMPL_STYLES if i in IMPLS):
                for members in _same_outputs([(g, res) for g, res in panel if g.impl == impl]):
                    g, res = members[0]
                    parts = _plotted(res)
                    tol = tolerance(g)
                    x = np.concatenate([p.x.astype(np.float64) for p in parts])
                    u = np.concatenate([p.ulp() for p in parts])
                    by_ulp = np.concatenate([p.normal_range(tol.atol) for p in parts])
                    # where f' crosses zero the tolerance's absolute floor decides (engine._elementwise_ok)
                    root = (in_root_window(key, order, x) if order > 0 and tol.atol_root > tol.atol
                            else np.zeros(x.shape, dtype=bool))
                    held = _bin_max(x, np.zeros_like(x), edges) >= 0
                    line = _bin_max(x, np.where(by_ulp & ~root, u, -1.0), edges)
                    below = held & (_bin_max(x, np.where(by_ulp, 0.0, -1.0), edges) < 0)
                    small = below if small is None else small & below
                    # bins without inputs (the tail is sampled sparsely) are left out, so the line joins across
                    # them; a bin whose inputs are all judged absolutely is NaN, so the line breaks there
                    y = np.where(line >= 0, line + 1, np.nan)
                    names = [m[0].backend for m in members]
                    label = f"{' = '.join(names)} {impl}" + (" (identical outputs)" if len(names) > 1 else "")
                    color = backend_color(names[0])
                    (h,) = ax.plot(centers[held], y[held], color=color, ls=IMPL_STYLES[impl],
                                   lw=1.5 if impl == "builtin" else 1.2, label=label, alpha=0.9)
                    lines.setdefault((impl, label), h)
                    hollow = _bin_max(x, np.where(by_ulp & root, u, -1.0), edges)
                    if (hollow >= 0).any():
                        ax.scatter(centers[hollow >= 0], hollow[hollow >= 0] + 1, s=28, marker="o",
                                   facecolors="none", edgecolors=[color], linewidths=1.2, zorder=3)
                        rooted = True
            if rooted:
                for lo, hi in ACTIVATIONS[key].root_windows.get(order, ()):
                    # a narrow window: its edges drawn too, so it shows at the scale of the whole range
                    ax.axvspan(lo, hi, facecolor=ROOT_BAND_COLOR, edgecolor=ROOT_BAND_COLOR, alpha=0.45, lw=0.8)
                    ax.annotate("|f′| ≈ 0", xy=((lo + hi) / 2, 1.0), xycoords=("data", "axes fraction"),
                                xytext=(0, -2), textcoords="offset points", ha="center", va="top", fontsize=7,
                                color="darkgoldenrod")
                bands.setdefault(_ROOT_BAND, Patch(facecolor=ROOT_BAND_COLOR, edgecolor=ROOT_BAND_COLOR, alpha=0.45))
            for lo, hi in _spans(small if small is not None else [], edges):
                ax.axvspan(lo, hi, facecolor="0.85", edgecolor="0.6", hatch="//", lw=0)
                bands.setdefault(_SMALL_BAND, Patch(facecolor="0.85", edgecolor="0.6", hatch="//"))
            ax.set_yscale("log")
            ax.set_xlim(*X_RANGE)
            lo, hi = ax.get_ylim()
            if hi < 10 * lo:  # less than a decade: plain numbers (1, 2, 3), not 2 x 10^0
                for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
                    axis(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_title(f"{ACTIVATIONS[key].label} {'value' if order == 0 else 'derivative'}, {dtype}", fontsize=9)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("1 + max ULP error in the bin")
            if i == len(keys) - 1:
                ax.set_xlabel("x")
    width = PANEL_W * len(dts) + LEGEND_W
    impl_order = list(IMPL_STYLES)
    legend = {label: h for (_, label), h in sorted(lines.items(), key=lambda kv: impl_order.index(kv[0][0]))}
    legend.update(bands)
    fig.legend(list(legend.values()), list(legend), loc="center left", bbox_to_anchor=(1 - LEGEND_W / width, 0.5),
               fontsize=7.5, frameon=False, title="colour: backend; line: impl\n"
               "solid builtin, dashed gelulab formula,\ndotted gelulab kernel", title_fontsize=7.5,
               alignment="left")
    what = "f" if order == 0 else "f′"
    fig.suptitle(f"{what}: error against the correctly rounded reference, "
                 "eager mode, bins of x", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1 - LEGEND_W / width, 1))
    return fig


def plot_errors(raw, out: Path, order: int, bins: int = 160) -> Path:
    """Write `out`/errors_order<order>.png and return its path: the largest ULP error (+1, log scale) in each of
    `bins` bins of x over [-30, 10] (the negative tail and grid regions), one panel per smooth activation
    (catalogue `smooth`: ReLU's error is 0) x dtype, eager mode; colour per backend (backend_color), line style per
    impl (solid builtin, dashed formula, dotted kernel); backends whose outputs are bit-identical are one line
    whose label names them all. Only elements judged by ULP are on the lines: where the correctly rounded result
    is below the smallest normal (or the tolerance's absolute floor) the x range is shaded and hatched and nothing
    is drawn; inside an entry's root windows of f' (|f'| ~ 0), where the tolerance's absolute floor decides
    (builtins), the x range is shaded and those elements' ULP errors are hollow markers, off the line.
    Raises ValueError when `raw` has no eager result of a smooth activation of derivative `order`."""
    import matplotlib.pyplot as plt

    fig = errors_figure(raw, order, bins)
    path = out / f"errors_order{order}.png"
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def run_parity(backends, out: Path, impls=IMPLS, keys=tuple(ACTIVATIONS), dtypes=tuple(DTYPES), modes=None,
               orders=ORDERS, plots: bool = True, progress: bool = True) -> dict:
    """Run the matrix and write report.md, parity.json and the plots into `out`; each group's measurement is
    stored in `out`/groups as it finishes and reused by a rerun (experiments.parity.store). Returns the JSON dict
    (with 'summary_md', the compact table `gelulab run` includes, and 'plots', the PNG names). Raises ValueError,
    before anything is measured or written, when the filters select no cell (see check_matrix) or `out` cannot be
    written (core.plumbing.output.OutputUnwritable); KeyboardInterrupt propagates with the measured groups on disk."""
    check_matrix(backends, impls, keys, dtypes, modes, orders)
    check_writable(out)
    with hold(out):
        out = Path(out)
        t0 = time.perf_counter()
        rows, raw, log = collect(backends, impls, keys, dtypes, modes, orders, progress, out=out)
        elapsed = time.perf_counter() - t0
        if log["stale"]:
            print(f"gelulab parity: {len(log['stale'])} stored groups were measured with other versions "
                  f"({log['stale'][0]}); measured again, not mixed in", file=sys.stderr)
        behaviour_md, behaviour_js = behaviour_matrix(
            backends, [d for d in ("float32", "float16", "bfloat16") if d in dtypes]
        )
        summary = summary_table(rows)
        flagged = flagged_table(rows)
        c = _counts(rows)
        links = sorted({r["known_fault"]["link"] for r in rows if r["flag"] == "upstream"})
        env = environment(backends)
        platform = overrides(capabilities(n) for n in BACKEND_NAMES)  # every registered backend's, as records say
        data = {
            "environment": env, "elapsed_s": elapsed, "store": log, "cells": rows, "behaviour": behaviour_js,
            "modes": sorted({r["mode"] for r in rows}), "orders": sorted({r["order"] for r in rows}),
            "tolerances": {f"{d}/d{o}": vars(t) for (d, o), t in TOLERANCES.items()},
            "formula_goals": {f"{d}/d{o}": vars(t) for (d, o), t in FORMULA_GOALS.items()},
            "overrides": [vars(o) for o in platform],
            "known_faults": [{**vars(f), "kind": f.classification} for f in KNOWN_FAULTS],
            "n_flagged": c["flagged"], "n_known": c["upstream"] + c["unreported"] + c["gelulab"],
            "n_upstream": c["upstream"], "n_unreported": c["unreported"], "n_own": c["gelulab"],
            "n_new": c["new"] + c["exception"], "summary_md": summary, "plots": [],
        }
        md = [
            "# gelulab parity report\n\n",
            f"Command: `{env['command']}`; gelulab {env['gelulab']}, git commit {env['git_commit'] or 'unknown'}.\n\n",
            (f"{counts_sentence(data)} Measured {log['measured']} groups in {elapsed:.0f} s on {env['cpu']} "
             f"(GELULAB_THREADS={env['threads']}; threads in effect under Versions), {log['reused']} groups read from "
             f"{out / store.FOLDER} (stored by an earlier run with the same versions).\n\n"),
            "Errors are against the correctly rounded mpmath reference of each form (each approximation against its "
            "own formula). ULP = units in the last place of the target dtype. Regions: "
            + ", ".join(REGIONS) + ".\n\n"
            f"## Summary ({', '.join(data['modes'])}; finite inputs, the cells that ran)\n\n", summary,
            "\n## Cells beyond tolerance\n\n", flagged,
            "\nUpstream reports: " + (", ".join(links) if links else "none") + "\n",
            "\n## Special-value behaviour (eager, value)\n", behaviour_md,
            "\n## The vector-fill case\n\n", tail_point_table(raw),
            "\n## Platform overrides applied\n\n" + "".join(f"- {o.backend}/{o.device} {o.dtypes}: {o.reason}\n"
                                                            for o in platform),
            "\n## Versions\n\n" + "".join(f"- {k}: {v}\n" for k, v in env["frameworks"].items())
            + "".join(f"- {k} threads in effect: {v}\n" for k, v in env["threads_in_effect"].items()),
            f"- python {env['python']}, numpy {env['numpy']}, scipy {env['scipy']}, mpmath {env['mpmath']}\n",
        ]
        if plots:
            plotted = [o for o in orders if o in (0, 1)
                       and any(g.order == o and g.mode == "eager" and ACTIVATIONS[g.key].smooth for g in raw)]
            paths = [plot_errors(raw, out, o) for o in plotted]
            data["plots"] = [p.name for p in paths]
            if paths:
                md.append("\n## Plots\n\n" + PLOT_CAPTION + "\n\n"
                          + "".join(f"![{p.name}]({p.name})\n" for p in paths))
        atomic_write_text(out / "report.md", "".join(md))
        write_json(out / "parity.json", data)
        return data


def check_matrix(backends, impls=IMPLS, keys=tuple(ACTIVATIONS), dtypes=tuple(DTYPES), modes=None,
                 orders=ORDERS) -> None:
    """Raise ValueError, naming the option at fault, when the filters select no cell: no backend offers a
    requested mode (e.g. --mode compiled with numpy alone), or no backend has a requested builtin."""
    offered = {b.name: list(b.modes) for b in backends}
    if modes is not None and not any(m in b.modes for b in backends for m in modes):
        raise ValueError(f"--mode {','.join(modes)}: no selected backend offers it (modes offered: {offered})")
    if groups(backends, impls, keys, dtypes, modes, orders):
        return
    if tuple(impls) == ("builtin",):
        raise ValueError(f"--impl builtin: no selected backend ({list(offered)}) has a builtin for "
                         f"{list(keys)}; add --impl formula")
    raise ValueError(f"the filters select no cell (backends {list(offered)}, impl {list(impls)}, activation "
                     f"{list(keys)}, dtype {list(dtypes)}, mode {modes}, order {list(orders)})")


def parse_filters(args) -> dict:
    """The command-line filters checked and normalised (repeats dropped) before any framework is imported:
    {"backends": names or None (GELULAB_BACKEND), "device", "impls", "keys", "dtypes", "modes" (None: each
    backend's own), "orders"}. Raises ValueError naming the option for an empty or unknown value."""
    device = config.device() if args.device is None else args.device.strip().lower()
    if device not in config.DEVICES:
        raise ValueError(f"--device {args.device!r}: expected one of {list(config.DEVICES)}")
    return {
        "backends": list(_csv(args.backend, BACKEND_NAMES, "backend")) if args.backend is not None else None,
        "device": device,
        "impls": _csv(args.impl, IMPLS, "impl"),
        "keys": _csv(args.activation, tuple(ACTIVATIONS), "activation"),
        "dtypes": _csv(args.dtype, tuple(DTYPES), "dtype"),
        "modes": _csv(args.mode, ("eager", "compiled"), "mode") if args.mode is not None else None,
        "orders": tuple(int(o) for o in _csv(args.order, ORDERS, "order")),
    }


def run(args) -> int:
    """Entry point of `gelulab parity`. Returns 0, or 1 with --fail-on-new when a cell is beyond tolerance and
    matches no known fault (flagged cells are findings, not failures of the command, unless asked).

    Raises ValueError (bad or empty filter, empty matrix, unwritable --out) before any framework is imported or
    any report is written; backends.BackendUnavailable / backends.DeviceUnavailable when a framework or the device
    is missing; core.plumbing.output.Interrupted on Ctrl-C, with the measured groups stored. Runs under
    gelulab.reproducible(threads=GELULAB_THREADS, default 1): float64 cells in JAX need x64."""
    f = parse_filters(args)
    out = check_writable(args.out)
    with hold(out):
        reproducible(threads=config.threads())
        names = f["backends"] or selected_backends()
        backends = [get_backend(n, f["device"]) for n in names]
        try:
            data = run_parity(backends, out, impls=f["impls"], keys=f["keys"], dtypes=f["dtypes"],
                              modes=f["modes"], orders=f["orders"], plots=not args.no_plots)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; {stored_summary(out)}; run the same command again to resume") from None
        print(data["summary_md"])
        print(f"{counts_sentence(data)} Report: {out / 'report.md'}")
        if getattr(args, "draft_faults", False):
            print(draft_faults(data["cells"], str(out / "parity.json")) or "gelulab parity: no NEW cell to draft")
        if args.fail_on_new and data["n_new"]:
            new = [r for r in data["cells"] if r["flag"] in ("new", "exception")]
            shown = ", ".join(f"{r['backend']}/{r['impl']}/{r['activation']}/{r['dtype']}/{r['mode']}/d{r['order']}/"
                              f"{r['region']}" for r in new[:3])
            print(f"gelulab parity: {len(new)} cells beyond tolerance match no known fault ({shown}"
                  f"{', ...' if len(new) > 3 else ''}); see {out / 'report.md'}", file=sys.stderr)
            return 1
        return 0
