"""The moons grid's analysis and Markdown report, from the run records alone (backend-free).

analyse_grid(spec, cells, runs, backends) -> {comparisons, heatmaps, main_effects, significant, most_different,
agreement, divergence, conclusions}

comparisons   per cell x backend x regime x GELU form, for test accuracy and test loss: the paired difference
              GELU form - ReLU over the cell's seeds (core.stats.paired: mean, 95 % CI — Student t below
              core.stats.BOOTSTRAP_MIN_SEEDS seeds, BCa bootstrap from there —, Wilcoxon, paired t-test, seeds
              won). Multiple comparisons: the Wilcoxon and the t-test p-values are
              Benjamini-Hochberg adjusted (core.stats.adjust_bh, scipy.stats.false_discovery_control) over all
              cells of the grid, every backend and regime included: one family per GELU form and metric, the
              comparisons one heatmap figure shows; a difference is significant when both adjusted p-values are
              below alpha = 0.05.
heatmaps      for each GELU form (exact GELU first) and metric: one square per value of the two heatmap axes, one
              panel per combination of the other varied axes and the backend (faceted, so every square is one
              cell and carries that cell's BH-adjusted verdict). When there would be more than MAX_FACETS panels,
              the trailing facet axes are marginalised instead: a square then averages, seed by seed, the metric
              over the cells and backends it covers (so the seeds stay paired), and its tests are adjusted over
              that figure's squares.
main_effects  per varied axis and value: the same seed-by-seed average over every other axis and backend, so each
              row says what the axis value does on average over the rest of the grid (BH within the table).
significant   the comparisons with a significant difference, one row per cell x regime x form x metric with the
              backends that found it.
divergence    every run that diverged or did not learn, as the single study finds them (experiments/moons/report.py
              `divergence`), each with its cell id; grid_divergence_warning says it in one line, first among the
              conclusions.
most_different  the cells whose exact-GELU - ReLU test loss differs most surely (smallest adjusted p, then the
              largest standardised mean difference), for the loss-curve panels.
"""
from __future__ import annotations

import math
from itertools import product

import numpy as np

from gelulab.core import stats
from gelulab.core.activations import ACTIVATIONS, BASELINE, HEADLINE
from gelulab.core.plumbing.report import fmt, markdown_table
from gelulab.experiments.moons.grid import AXIS_LABELS
from gelulab.experiments.moons.report import cannot_be, counted, divergence, environment_md, span

METRICS = (("test_acc", "test accuracy", True), ("test_loss", "test loss", False))
MAX_FACETS = 16
N_MOST_DIFFERENT = 4
P_KEYS = ("w_p_bh", "t_p_bh")


def _label(arm: str) -> str:
    return ACTIVATIONS[arm].label


def gelu_arms(arms) -> list[str]:
    """The non-baseline arms, the catalogue's headline arm (exact GELU) first, then the others in catalogue order."""
    others = [a for a in ACTIVATIONS if a in arms and a != BASELINE]
    return sorted(others, key=lambda a: (a not in HEADLINE, list(ACTIVATIONS).index(a)))


def _values(runs_by_cell, cells):
    """{(cell id, backend, regime, arm, metric): {seed: value}} of the study dtype of each cell."""
    out = {}
    for cell in cells:
        for r in runs_by_cell[cell.id]:
            if r["dtype"] != cell.config.dtype:
                continue
            for metric, _, _ in METRICS:
                out.setdefault((cell.id, r["backend"], r["regime"], r["arm"], metric), {})[r["seed"]] = \
                    r["metrics"][metric]
    return out


def _add_bh(rows, alpha=stats.ALPHA) -> None:
    for key in ("w_p", "t_p"):
        for row, p in zip(rows, stats.adjust_bh([r[key] for r in rows])):
            row[f"{key}_bh"] = p
    for row in rows:
        row["kind"] = stats.classify(row, alpha, P_KEYS)


def _bounds(metric: str):
    """The range of a mean difference of `metric`: an accuracy difference lies in [-1, 1]."""
    return (-1.0, 1.0) if metric == "test_acc" else None


def _paired(vals_a: dict, vals_b: dict, higher: bool, metric: str) -> dict:
    seeds = sorted(set(vals_a) & set(vals_b))
    return stats.paired([vals_a[s] for s in seeds], [vals_b[s] for s in seeds], higher_is_better=higher,
                        bounds=_bounds(metric))


def _aggregate(values, units, arm, metric, higher) -> dict:
    """Seed-by-seed mean over `units` [(cell id, backend, regime)] of arm and of ReLU, then paired."""
    per_a = [values.get((*u, arm, metric), {}) for u in units]
    per_b = [values.get((*u, BASELINE, metric), {}) for u in units]
    seeds = sorted(set.intersection(*(set(d) for d in per_a + per_b)))
    if not seeds:
        return {}
    a = [float(np.mean([d[s] for d in per_a])) for s in seeds]
    b = [float(np.mean([d[s] for d in per_b])) for s in seeds]
    return stats.paired(a, b, higher_is_better=higher, bounds=_bounds(metric))


def comparison_rows(cells, values, backends, regimes, arms) -> list[dict]:
    """Every cell x backend x regime x GELU form x metric comparison, BH-adjusted within each (GELU form,
    metric) family over all cells, backends and regimes."""
    rows = []
    for arm, (metric, _, higher) in product(arms, METRICS):
        family = []
        for cell in cells:
            for b, regime in product(backends, regimes):
                a, base = values.get((cell.id, b, regime, arm, metric)), values.get((cell.id, b, regime, BASELINE,
                                                                                    metric))
                if not a or not base:
                    continue
                family.append({"cell": cell.id, "coords": cell.coords, "backend": b, "regime": regime, "arm": arm,
                               "metric": metric, **_paired(a, base, higher, metric)})
        _add_bh(family)
        rows += family
    return rows


def _units(cells, backends, regimes):
    """[(unit (cell id, backend, regime), factors {axis: value, "backend", "regime"})]."""
    return [((c.id, b, r), {**c.coords, "backend": b, "regime": r}) for c in cells for b in backends for r in regimes]


def heatmap_figures(spec, cells, values, comparisons, backends, regimes, arms) -> list[dict]:
    """One figure per GELU form x metric: the heatmap axes, the facet axes, the marginalised axes, and per panel
    the squares {x, y, mean_diff, ci_low, ci_high, p (the larger BH-adjusted p), kind, cells}."""
    x_axis, y_axis = spec.heatmap_axes()
    factor_values = {**spec.axes, "backend": tuple(backends), "regime": tuple(regimes)}
    candidates = [a for a in spec.varied if a not in (x_axis, y_axis)]
    candidates += [a for a in ("backend", "regime") if len(factor_values[a]) > 1]
    facets, n = [], 1
    for a in candidates:
        if n * len(factor_values[a]) > MAX_FACETS:
            break
        facets.append(a)
        n *= len(factor_values[a])
    marginalised = [a for a in candidates if a not in facets]
    units = _units(cells, backends, regimes)
    by_unit = {(c["cell"], c["backend"], c["regime"], c["arm"], c["metric"]): c for c in comparisons}
    figures = []
    for arm in arms:
        for metric, _, higher in METRICS:
            panels, pooled = [], []
            for combo in product(*(factor_values[a] for a in facets)):
                fixed = dict(zip(facets, combo))
                squares = []
                for yv, xv in product(factor_values[y_axis], factor_values[x_axis]):
                    want = {**fixed, x_axis: xv, y_axis: yv}
                    members = [u for u, f in units if all(f[k] == v for k, v in want.items())]
                    if len(members) == 1:
                        res = by_unit.get((*members[0], arm, metric))
                    else:
                        res = _aggregate(values, members, arm, metric, higher) if members else None
                        if res:
                            pooled.append(res)
                    if res:
                        squares.append({"x": xv, "y": yv, "units": len(members), **{
                            k: res.get(k) for k in ("n", "mean_diff", "ci_low", "ci_high", "w_p", "t_p", "w_p_bh",
                                                    "t_p_bh", "kind", "wins", "ties", "losses")}})
                panels.append({"facet": fixed, "squares": squares})
            if pooled:  # marginalised squares: their own family, adjusted within this figure
                _add_bh(pooled)
                for panel in panels:
                    for sq in panel["squares"]:
                        if sq["units"] > 1:
                            match = pooled.pop(0)
                            sq.update({k: match[k] for k in ("w_p_bh", "t_p_bh", "kind")})
            figures.append({"arm": arm, "metric": metric, "x": x_axis, "y": y_axis,
                            "x_values": list(factor_values[x_axis]), "y_values": list(factor_values[y_axis]),
                            "facets": facets, "marginalised": marginalised, "panels": panels})
    return figures


def main_effect_rows(spec, cells, values, backends, regimes, arms) -> list[dict]:
    """Per GELU form x metric x varied axis x value: the seed-by-seed mean over every other axis, backend and
    regime, paired; BH within each (form, metric) table."""
    units = _units(cells, backends, regimes)
    rows = []
    for arm in arms:
        for metric, _, higher in METRICS:
            family = []
            for axis in spec.varied:
                for v in spec.axes[axis]:
                    members = [u for u, f in units if f[axis] == v]
                    res = _aggregate(values, members, arm, metric, higher)
                    if res:
                        family.append({"arm": arm, "metric": metric, "axis": axis, "value": v,
                                       "cells": len({m[0] for m in members}), **res})
            _add_bh(family)
            rows += family
    return rows


def significant_rows(comparisons, varied) -> list[dict]:
    """Significant comparisons grouped over backends: one row per (cell, regime, form, metric) whose difference
    is significant in at least one backend; the numbers are those of the first such backend."""
    groups = {}
    for c in comparisons:
        if c["kind"] in ("higher", "lower"):
            groups.setdefault((c["cell"], c["regime"], c["arm"], c["metric"]), []).append(c)
    out = []
    for (_, regime, arm, metric), rows in groups.items():
        first = rows[0]
        better = (first["mean_diff"] > 0) == (metric == "test_acc")
        out.append({**first, "where": {a: first["coords"][a] for a in varied},
                    "backends": [r["backend"] for r in rows], "gelu_better": better})
    order = {m: i for i, (m, _, _) in enumerate(METRICS)}
    out.sort(key=lambda r: (order[r["metric"]], list(ACTIVATIONS).index(r["arm"]) if r["arm"] not in HEADLINE else -1,
                            max(r["w_p_bh"], r["t_p_bh"])))
    return out


def most_different(comparisons, arms, n=N_MOST_DIFFERENT) -> list[str]:
    """Cell ids of the n cells whose first-GELU-form - ReLU test loss differs most surely (first backend and
    regime): smallest max(BH-adjusted p), ties broken by the larger |mean| / sd of the paired difference."""
    if not arms or not comparisons:
        return []
    arm = arms[0]
    rows = [c for c in comparisons if c["arm"] == arm and c["metric"] == "test_loss"]
    if not rows:
        return []
    b, regime = rows[0]["backend"], rows[0]["regime"]
    rows = [c for c in rows if c["backend"] == b and c["regime"] == regime]

    def key(c):
        p = max(c["w_p_bh"], c["t_p_bh"])
        sd = c["sd_diff"]
        z = abs(c["mean_diff"]) / sd if np.isfinite(sd) and sd > 0 else 0.0
        return (p if np.isfinite(p) else math.inf, -z)

    return [c["cell"] for c in sorted(rows, key=key)[:n]]


def agreement(comparisons) -> dict:
    """How far the backends' comparisons are apart: per (cell, regime, form, metric) the spread of mean
    differences across backends, and the comparisons whose verdicts differ between backends."""
    groups = {}
    for c in comparisons:
        groups.setdefault((c["cell"], c["regime"], c["arm"], c["metric"]), []).append(c)
    spread, differ = 0.0, []
    for key, rows in groups.items():
        if len(rows) < 2:
            continue
        d = [r["mean_diff"] for r in rows]
        spread = max(spread, max(d) - min(d))
        if len({r["kind"] for r in rows}) > 1:
            differ.append({"cell": key[0], "regime": key[1], "arm": key[2], "metric": key[3],
                           "kinds": {r["backend"]: r["kind"] for r in rows}})
    return {"max_spread": spread, "verdicts_differ": differ,
            "groups": sum(len(rows) > 1 for rows in groups.values())}


# ----------------------------------------------------------------------------------------------- in words


def _value(axis, v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def where_text(rows, spec) -> str:
    """Where a set of significant rows lies on the grid, in words: the cells themselves when few, else the axis
    values they all share and, per other axis, how many are at each value."""
    varied = spec.varied
    cells = list(dict.fromkeys(r["cell"] for r in rows))
    coords = {r["cell"]: r["coords"] for r in rows}
    if not varied:
        return "the grid's one cell"
    if len(cells) <= 4:
        return "; ".join(", ".join(f"{AXIS_LABELS[a]} {_value(a, coords[c][a])}" for a in varied) for c in cells)
    parts = []
    for a in varied:
        vals = [coords[c][a] for c in cells]
        present = [v for v in spec.axes[a] if v in vals]
        if len(present) == 1:
            parts.append(f"all at {AXIS_LABELS[a]} {_value(a, present[0])}")
        else:
            parts.append(f"{AXIS_LABELS[a]} " + ", ".join(f"{_value(a, v)} ({vals.count(v)})" for v in present))
    return "; ".join(parts)


def _power_text(rows) -> str:
    """Why comparisons of kind "underpowered" cannot be significant, in words, with the seed counts they have."""
    ns = sorted({r["n_nonzero"] for r in rows})
    n = ns[0] if len(ns) == 1 else None
    seeds = (f"{n} seed" + ("" if n == 1 else "s")) if n is not None else f"{ns[0]}–{ns[-1]} seeds"
    ps = sorted({r["w_p_min"] for r in rows})
    p_min = span(ps, lambda v: f"{v:.3g}")
    return (f"{seeds} with a non-zero difference cannot show a difference at {100 * stats.ALPHA:g} %: a difference "
            f"counts only when the Wilcoxon and the t-test agree, and the Wilcoxon signed-rank test's smallest "
            f"two-sided p with {seeds} is {p_min} (2 / 2^n, every seed one way); at least "
            f"{stats.seeds_needed(stats.ALPHA)} are needed")


def _ci_range_text(rows, fmt_d) -> str:
    """The reach of the rows' CIs with their method, or why there is none; and how many exclude 0 unconfirmed."""
    finite = [c for c in rows if np.isfinite(c["ci_low"]) and np.isfinite(c["ci_high"])]
    if not finite:
        return (("comparison has" if len(rows) == 1 else "comparisons have") + " no CI ("
                + "; ".join(dict.fromkeys(c["ci_method"] for c in rows)) + ")")
    methods = ", ".join(dict.fromkeys(c["ci_method"] for c in finite))
    lo, hi = fmt_d(min(c["ci_low"] for c in finite)), fmt_d(max(c["ci_high"] for c in finite))
    one = len(finite) == 1
    text = f"95 % CI ({methods}) is [{lo}, {hi}]" if one else f"95 % CIs ({methods}) lie within [{lo}, {hi}]"
    excl = [c for c in rows if stats.ci_disagrees(c, c["kind"])]
    if len(finite) < len(rows):
        text += f"; {len(rows) - len(finite)} without a CI (" + "; ".join(
            dict.fromkeys(c["ci_method"] for c in rows if c not in finite)) + ")"
    if excl:
        who = ("it excludes" if one else
               f"{len(excl)} of these CIs exclude{'s' if len(excl) == 1 else ''}")
        text += (f"; {who} 0 without a significant verdict: a CI covers its own comparison, unadjusted, while the "
                 "verdict needs both BH-adjusted tests")
    return text


def _mean_diffs(rows, fmt_d) -> str:
    """"mean difference X" for one row, "mean differences X to Y" for several (one value where they read the
    same)."""
    diffs = [r["mean_diff"] for r in rows]
    if len(diffs) == 1:
        return f"mean difference {fmt_d(diffs[0])}"
    return f"mean differences {span(diffs, fmt_d)}" + (" in each" if fmt_d(min(diffs)) == fmt_d(max(diffs)) else "")


def conclusions(spec, comparisons, significant, agree, backends, arms) -> list[str]:
    """Sentences the numbers support, per GELU form (exact first) and metric: how many cells show a significant
    difference each way, where they are, the range of the CIs elsewhere (with their method; CIs that exclude 0
    without a significant verdict are counted), whether the seed count could reach significance at all (said in
    words where it cannot), and whether the backends agree."""
    n_cells = len({c["cell"] for c in comparisons})
    out = []
    for arm in arms:
        for metric, name, higher in METRICS:
            fam = [c for c in comparisons if c["arm"] == arm and c["metric"] == metric]
            if not fam:
                continue
            fmt_d = (lambda v: f"{100 * v:+.2f} pp") if metric == "test_acc" else (lambda v: f"{v:+.4f}")
            total = len(fam)
            sig = [s for s in significant if s["arm"] == arm and s["metric"] == metric]
            helps = [s for s in sig if s["gelu_better"]]
            hurts = [s for s in sig if not s["gelu_better"]]
            quiet = [c for c in fam if c["kind"] not in ("higher", "lower")]
            weak = [c for c in quiet if c["kind"] == "underpowered"]
            head = (f"{_label(arm)} − ReLU, {name} ({counted(n_cells, 'cell')} × {counted(len(backends), 'backend')}"
                    f", {counted(fam[0]['n'], 'paired seed')} each; Wilcoxon and t-test, BH-adjusted over "
                    f"{'the one' if total == 1 else f'all {total}'} {name} "
                    f"{'comparison' if total == 1 else 'comparisons'}, alpha = {stats.ALPHA}): ")
            if not sig and len(weak) == total:
                out.append(head + f"no verdict is possible: {_power_text(weak)}; the "
                           f"{_ci_range_text(quiet, fmt_d)} (how large a difference these seeds leave open).")
                continue
            if not sig:
                text = f"no significant difference in any cell; the {_ci_range_text(quiet, fmt_d)}"
                if weak:
                    text += f"; {cannot_be(len(weak), total, 'comparison', 'be significant')}: {_power_text(weak)}"
                out.append(head + text + ".")
                continue
            bits = []
            if helps:
                bits.append(f"GELU helps ({'higher' if higher else 'lower'} {name}) in {counted(len(helps), 'cell')} — "
                            f"{where_text(helps, spec)}; {_mean_diffs(helps, fmt_d)}")
            if hurts:
                bits.append(f"GELU hurts ({'lower' if higher else 'higher'} {name}) in {counted(len(hurts), 'cell')} — "
                            f"{where_text(hurts, spec)}; {_mean_diffs(hurts, fmt_d)}")
            n_quiet = n_cells - len({s["cell"] for s in sig})
            bits.append(f"no significant difference in the other {'cell' if n_quiet == 1 else f'{n_quiet} cells'}"
                        + (f" ({_ci_range_text(quiet, fmt_d)})" if quiet else ""))
            if weak:
                bits.append(f"{cannot_be(len(weak), total, 'comparison', 'be significant')}: {_power_text(weak)}")
            held = [c for c in fam if c["kind"] in ("higher", "lower") and stats.ci_disagrees(c, c["kind"])]
            if held:
                bits.append(f"{counted(len(held), 'significant comparison')} "
                            f"{'has' if len(held) == 1 else 'have'} a 95 % CI that holds 0 (the bootstrap and "
                            "the tests disagree there)")
            out.append(head + "; ".join(bits) + ".")
    if len(backends) > 1 and agree["groups"]:
        if agree["verdicts_differ"]:
            out.append(f"The backends' verdicts differ in {len(agree['verdicts_differ'])} of {agree['groups']} "
                       "cell × form × metric comparisons (listed in grid.json, analysis.agreement); the mean "
                       f"differences of the backends are at most {agree['max_spread']:.2g} apart.")
        else:
            out.append(f"The {len(backends)} backends give the same verdict in every cell; their mean differences "
                       f"are at most {agree['max_spread']:.2g} apart.")
    out.append("A significant cell is a difference on this grid, these seeds and this budget (epochs, learning "
               "rate), not a general ranking of the activations; a cell without one shows only that the seeds "
               "rule out differences larger than its CI.")
    out.append(stats.ci_rule() + ".")
    return out


def grid_divergence(cells, runs_by_cell) -> list[dict]:
    """The runs of every cell that diverged or did not learn (report.divergence with the cell's config), each
    {cell, backend, regime, dtype, arm, seed, reasons, kinds}, in cell order."""
    return [{"cell": c.id, **d} for c in cells for d in divergence(c.config, runs_by_cell.get(c.id, []))]


def grid_divergence_warning(diverged) -> str | None:
    """The grid's divergence warning in one plain line (no Markdown): how many runs in how many cells diverged
    or did not learn, the first cells by name with their count and reasons; None when none did."""
    if not diverged:
        return None
    per = {}
    for d in diverged:
        per.setdefault(d["cell"], []).append(d)
    parts = "; ".join(f"{cid} {counted(len(ds), 'run')} ({', '.join(sorted({k for d in ds for k in d['kinds']}))})"
                      for cid, ds in list(per.items())[:4])
    return (f"WARNING: {counted(len(diverged), 'run')} in {len(per)} of the grid's cells diverged or did not learn "
            f"— {parts}"
            f"{'; ...' if len(per) > 4 else ''}. Their statistics use only finite values; lower lr or check the "
            "setup.")


def analyse_grid(spec, cells, runs_by_cell, backends) -> dict:
    """The grid's statistics from its run records (see the module docstring)."""
    regimes = list(dict.fromkeys(r for c in cells for r in c.config.regimes))
    arms = gelu_arms(dict.fromkeys(a for c in cells for a in c.config.arms))
    if BASELINE not in {a for c in cells for a in c.config.arms}:
        arms = []
    values = _values(runs_by_cell, cells)
    comps = comparison_rows(cells, values, backends, regimes, arms)
    sig = significant_rows(comps, spec.varied)
    agree = agreement(comps)
    diverged = grid_divergence(cells, runs_by_cell)
    warning = grid_divergence_warning(diverged)
    return {
        "arms": arms, "regimes": regimes, "comparisons": comps, "significant": sig, "agreement": agree,
        "heatmaps": heatmap_figures(spec, cells, values, comps, backends, regimes, arms),
        "main_effects": main_effect_rows(spec, cells, values, backends, regimes, arms),
        "most_different": most_different(comps, arms),
        "divergence": diverged,
        "conclusions": ([warning] if warning else []) + conclusions(spec, comps, sig, agree, backends, arms),
    }


# ------------------------------------------------------------------------------------------------ Markdown


def _d(metric, v) -> str:
    if v is None or not np.isfinite(v):
        return "—"
    return f"{100 * v:+.2f}" if metric == "test_acc" else f"{v:+.4f}"


def _p(v) -> str:
    return "—" if v is None or not np.isfinite(v) else (f"{v:.3f}" if v >= 1e-3 else f"{v:.1e}")


def _where(coords, varied) -> str:
    return ", ".join(f"{AXIS_LABELS[a]} {_value(a, coords[a])}" for a in varied) or "the one cell"


def _significant_md(rows, varied, comparisons=()) -> str:
    if not rows:
        weak = [c for c in comparisons if c["kind"] == "underpowered"]
        if comparisons and len(weak) == len(comparisons):
            return f"No cell can show a significant difference: {_power_text(weak)}.\n"
        return "No cell shows a significant difference (both BH-adjusted p-values < 0.05) in either metric.\n"
    head = ["cell", "GELU form − ReLU", "metric", "mean diff", "95 % CI", "Wilcoxon p (BH)", "t-test p (BH)",
            "won / tied / lost", "GELU", "backends"]
    body = [[_where(r["coords"], varied), _label(r["arm"]), "test acc (pp)" if r["metric"] == "test_acc"
             else "test loss", _d(r["metric"], r["mean_diff"]),
             f"[{_d(r['metric'], r['ci_low'])}, {_d(r['metric'], r['ci_high'])}]", _p(r["w_p_bh"]), _p(r["t_p_bh"]),
             f"{r['wins']} / {r['ties']} / {r['losses']}", "helps" if r["gelu_better"] else "hurts",
             ", ".join(r["backends"])] for r in rows]
    return markdown_table(head, body)


def _main_effects_md(rows, arm) -> str:
    head = ["axis", "value", "cells", "Δ test acc (pp)", "95 % CI", "p (BH)", "Δ test loss", "95 % CI", "p (BH)"]
    acc = {(r["axis"], r["value"]): r for r in rows if r["arm"] == arm and r["metric"] == "test_acc"}
    loss = {(r["axis"], r["value"]): r for r in rows if r["arm"] == arm and r["metric"] == "test_loss"}
    body = []
    for key, a in acc.items():
        lo = loss.get(key)
        row = [AXIS_LABELS[key[0]], _value(key[0], key[1]), a["cells"], _d("test_acc", a["mean_diff"]),
               f"[{_d('test_acc', a['ci_low'])}, {_d('test_acc', a['ci_high'])}]",
               _p(max(a["w_p_bh"], a["t_p_bh"]))]
        row += ([_d("test_loss", lo["mean_diff"]),
                 f"[{_d('test_loss', lo['ci_low'])}, {_d('test_loss', lo['ci_high'])}]",
                 _p(max(lo["w_p_bh"], lo["t_p_bh"]))] if lo else ["—"] * 3)
        body.append(row)
    return markdown_table(head, body)


def _divergence_md(rows) -> str:
    head = ["cell", "backend", "regime", "arm", "seed", "why"]
    return markdown_table(head, [[r["cell"], r["backend"], r["regime"], _label(r["arm"]), r["seed"],
                                  "; ".join(r["reasons"])] for r in rows])


def _setup_md(results) -> str:
    spec, an = results["spec"], results["analysis"]
    cells = results["cells"]
    base = cells[0]["config"] if cells else {}
    varied = [a for a, v in spec["axes"].items() if len(v) > 1]
    fixed = [a for a, v in spec["axes"].items() if len(v) == 1]
    seeds = base.get("seeds", [])
    lines = [
        f"- grid: {results['source']}; {len(cells)} cells = "
        + " × ".join(f"{AXIS_LABELS[a]} ({len(spec['axes'][a])})" for a in varied) + " (varied: "
        + "; ".join(f"{AXIS_LABELS[a]} {', '.join(_value(a, v) for v in spec['axes'][a])}" for a in varied)
        + "); fixed: " + ", ".join(f"{AXIS_LABELS[a]} {_value(a, spec['axes'][a][0])}" for a in fixed) + ".",
        f"- each cell: {base.get('n_samples')} points split stratified "
        f"{1 - base.get('val_fraction', 0) - base.get('test_fraction', 0):.0%}/{base.get('val_fraction', 0):.0%}/"
        f"{base.get('test_fraction', 0):.0%} (the test set evaluated once, after the last epoch), hidden layers of "
        f"the given width, Adam (β = ({base.get('beta1')}, {base.get('beta2')}), ε = {base.get('eps'):g}), "
        f"regime {', '.join(an['regimes'])}, arms {', '.join(_label(a) for a in base.get('arms', []))}, "
        f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}) shared by every arm and backend (paired)." if seeds else "",
        f"- backends: {', '.join(results['backends'])}"
        + "".join(f"; skipped {b}: {why}" for b, why in results.get("skipped", {}).items()) + ".",
        f"- executor: {results['executor']}" + (f" at {results['address']}" if results.get("address") else "")
        + f", {counted(results['jobs'], 'worker')}; this session trained {counted(results['trained_cells'], 'cell')}"
        f" and resumed {results['resumed_cells']} from disk in {results['wall_s']:.1f} s wall.",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def _heatmaps_md(results) -> str:
    an = results["analysis"]
    if not an["heatmaps"]:
        return "No heatmap (the grid has no ReLU arm to compare with).\n"
    f0 = an["heatmaps"][0]
    lines = [
        f"Each square is GELU form − ReLU (mean over the seeds, 95 % CI below it) at one value of "
        f"{AXIS_LABELS[f0['x']]} (x) and {AXIS_LABELS[f0['y']]} (y); blue = GELU better (higher accuracy, lower "
        "loss), red = GELU worse; a black frame and * mark a significant difference (both BH-adjusted p < 0.05)."
        + (f" Panels: one per {' × '.join(AXIS_LABELS[a] for a in f0['facets'])}." if f0["facets"] else "")
        + (f" Averaged over (marginalised, seed by seed): {', '.join(AXIS_LABELS[a] for a in f0['marginalised'])};"
           " those squares are tested and adjusted within their figure." if f0["marginalised"] else ""),
        "",
    ]
    plots = results.get("plots", {})
    for f in an["heatmaps"]:
        name = plots.get(f"heatmap_{f['arm']}_{f['metric']}")
        if name:
            lines.append(f"![{_label(f['arm'])} − ReLU, {f['metric']}]({name})\n")
    return "\n".join(lines) + "\n"


SECTIONS = ("setup", "conclusions", "divergence", "significant", "heatmaps", "main_effects", "curves", "timing",
            "environment")


def markdown(results: dict, sections=SECTIONS) -> str:
    """The grid report as Markdown; `sections` picks and orders parts of SECTIONS."""
    an = results["analysis"]
    spec_varied = [a for a, v in results["spec"]["axes"].items() if len(v) > 1]
    env = results.get("environment", {})
    plots = results.get("plots", {})
    first = an["arms"][0] if an["arms"] else None
    parts = {
        "setup": ("Setup", lambda: _setup_md(results)),
        "conclusions": ("Where GELU helps, hurts or does not matter on this grid",
                        lambda: "\n".join(f"- {c}" for c in an["conclusions"]) + "\n"),
        "divergence": ("Runs that diverged or did not learn", lambda: _divergence_md(an.get("divergence", []))),
        "significant": ("Cells with a significant difference (BH-adjusted over all cells and backends)",
                        lambda: _significant_md(an["significant"], spec_varied, an["comparisons"])),
        "heatmaps": ("Heatmaps of the paired difference", lambda: _heatmaps_md(results)),
        "main_effects": (f"Each axis on average over the rest of the grid: {_label(first) if first else ''} − ReLU",
                         lambda: ("Seed by seed, the metric is averaged over every cell and backend at that value, "
                                  "then compared paired; p (BH): the larger of the Wilcoxon and t-test p-values, "
                                  "BH-adjusted within the table.\n\n"
                                  + _main_effects_md(an["main_effects"], first)) if first else ""),
        "curves": ("Loss curves of the most different cells",
                   lambda: (f"![loss curves]({plots['loss_curves']})\n" if "loss_curves" in plots else "—\n")),
        "timing": ("Time", lambda: markdown_table(
            ["cells", "trained this session", "resumed", "executor", "workers", "wall s",
             "training CPU s (all cells, from the run files)", "load average at start / end"],
            [[len(results["cells"]), results["trained_cells"], results["resumed_cells"], results["executor"],
              results["jobs"], fmt(results["wall_s"]), fmt(results.get("train_cpu_s")),
              " / ".join(fmt(v) for v in results.get("load_average", ()))]])),
        "environment": ("Environment", lambda: environment_md(env)),
    }
    out = ["# gelulab moons grid: where does GELU differ from ReLU?\n"]
    for name in sections:
        if name == "main_effects" and (not first or not spec_varied):
            continue
        if name == "divergence" and not an.get("divergence"):
            continue
        title, render = parts[name]
        out.append(f"## {title}\n\n{render()}")
    return "\n".join(out)
