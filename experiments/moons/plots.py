"""The moons study's three PNGs, from the results dict alone (matplotlib, Agg; backend-free).

Backends whose runs are identical (report.pooled_backends: matched regime, study dtype, equal test accuracy on
every seed and losses within report.AGREEMENT_TOL) are drawn once, with a note on the figure naming them and how
far apart their training-loss trajectories are. Every interval is labelled with what it is.

loss_curves.png          per (backend group, regime) row: both arms in one axes, the training loss (solid, the
                         geometric mean over the seeds) with its band (the 95 % t-interval of the mean log loss,
                         exponentiated: positive on the log axis) and the validation loss (dashed) per epoch, log y, the
                         threshold of the epochs-to-reach measure (report.LOSS_THRESHOLD) drawn; beside it the paired
                         difference GELU form − ReLU per seed in epochs to reach that threshold, with its mean and 95 %
                         CI (report.dynamics_rows)
decision_boundaries.png  P(class 1) of the trained network of one seed over the plane, the 0.5 contour and
                         that seed's test points; one panel per (backend group, regime) x arm
test_accuracy.png        left: test accuracy per arm, one point per seed, the mean and the 95 % t-interval of the
                         mean over the seeds (core.stats.describe); right: the paired difference GELU form − ReLU
                         per seed (percentage points) with the mean, its 95 % CI (report.paired_rows, method named)
                         and the equivalence margin ±report.EQUIVALENCE_MARGIN_PP pp of `gelulab run`'s verdict
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from gelulab.core import stats
from gelulab.core.activations import ACTIVATIONS, BASELINE
from gelulab.experiments.moons.config import MoonsConfig, make_data
from gelulab.experiments.moons.report import (
    EQUIVALENCE_MARGIN_PP,
    LOSS_THRESHOLD,
    counted,
    epochs_to_loss,
    listed,
)

MARKERS = ("o", "^", "s", "D", "v", "P")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rows(results) -> list[tuple[str, str]]:
    """(backend, regime) pairs present in the study dtype, in run order."""
    dtype = results["config"]["dtype"]
    return list(dict.fromkeys((r["backend"], r["regime"]) for r in results["runs"] if r["dtype"] == dtype))


def _label(arm: str) -> str:
    return ACTIVATIONS[arm].label


def _color(arm: str) -> str:
    return ACTIVATIONS[arm].color


def _study_runs(results, backend, regime, arm) -> list:
    dtype = results["config"]["dtype"]
    runs = [r for r in results["runs"] if (r["backend"], r["regime"], r["arm"], r["dtype"]) ==
            (backend, regime, arm, dtype)]
    return sorted(runs, key=lambda r: r["seed"])


def groups(results) -> list[dict]:
    """The rows the figures draw: one per (backend group, regime), in run order. A group is the backends whose
    matched runs of the study dtype are identical (results["pooled"], report.pooled_backends); it is drawn once,
    from its first backend. Each row: {"backend": the one drawn, "label": "jax = torch" as in the report's
    tables, "regime", "members": [backends]}."""
    pooled = results.get("pooled") or []
    first = {g[0]: g for g in pooled}
    dropped = {b for g in pooled for b in g[1:]}
    out = []
    for b, regime in _rows(results):
        members = first.get(b, [b]) if regime == "matched" else [b]
        if regime == "matched" and b in dropped:
            continue
        out.append({"backend": b, "label": " = ".join(members), "regime": regime, "members": list(members)})
    return out


def pooled_note(results) -> str | None:
    """The figures' note on backends drawn once: which they are and how far apart their training-loss
    trajectories are (the agreement rows of the study dtype), or None when no backends were pooled."""
    many = [g for g in results.get("pooled") or [] if len(g) > 1]
    if not many:
        return None
    dtype = results["config"]["dtype"]
    gaps = [r["max_traj"] for r in results.get("agreement", []) if r["dtype"] == dtype]
    gap = f"within {max(gaps):.1e}" if gaps else "identical"
    return "; ".join(f"{listed(g)} give the same numbers (training-loss trajectories {gap} of each other, the same "
                     "test accuracy on every seed): drawn once" for g in many) + "."


def _row_name(g: dict) -> str:
    return f"{g['label']} ({g['regime']})"


def _log_band(c: np.ndarray):
    """The geometric mean over the rows of c (seeds x epochs, positive losses) and its 95 % interval: the
    t-interval of the mean log loss, exponentiated (as core.stats.positive_summary), which stays positive on a
    log axis however few the seeds; None for one row or a value that is not positive and finite."""
    if not np.all(np.isfinite(c)) or np.any(c <= 0):
        return c.mean(axis=0), None
    logs = np.log(c)
    mean = logs.mean(axis=0)
    n = c.shape[0]
    if n < 2:
        return np.exp(mean), None
    from scipy.stats import t

    half = t.ppf(0.975, n - 1) * logs.std(axis=0, ddof=1) / math.sqrt(n)
    return np.exp(mean), (np.exp(mean - half), np.exp(mean + half))


def _dodge(values, center: float, step: float) -> np.ndarray:
    """x positions for `values` around `center`: equal values side by side, `step` apart (a dot plot), so tied
    values (accuracies are multiples of 1 / test points) stay visible."""
    values = np.asarray(values, dtype=float)
    x = np.full(values.shape, float(center))
    keys = np.round(values, 9)
    for v in np.unique(keys):
        idx = np.flatnonzero(keys == v)
        x[idx] = center + (np.arange(idx.size) - (idx.size - 1) / 2) * step
    return x


def _step(value_lists, width: float) -> float:
    """The dodge step that fits the largest tie of any list into `width`."""
    most = max((np.unique(np.round(np.asarray(v, float), 9), return_counts=True)[1].max() for v in value_lists
                if len(v)), default=1)
    return min(width / max(most, 1), width / 6)


def _note(fig, results, extra: str | None = None) -> None:
    text = " ".join(t for t in (pooled_note(results), extra) if t)
    if text:
        import textwrap

        fig.text(0.01, 0.005, "\n".join(textwrap.wrap(text, 170)), fontsize=8.5, ha="left", va="bottom",
                 color="#333333")


def _dynamics_row(results, label, regime, arm) -> dict | None:
    return next((r for r in results.get("dynamics", []) if (r["backend"], r["regime"], r["arm"], r["metric"]) ==
                 (label, regime, arm, "epochs_to_loss")), None)


def plot_loss_curves(results, path) -> Path:
    """Both arms' mean training (band: 95 % t-interval of the mean over the seeds) and validation loss per epoch
    in one axes per (backend group, regime) (geometric means; band: the 95 % t-interval of the mean log loss), the
    threshold of the epochs-to-reach measure, and beside it the paired difference GELU form − ReLU per seed in epochs to
    reach it, its mean and 95 % CI."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    rows, arms = groups(results), list(results["config"]["arms"])
    gelu = [a for a in arms if a != BASELINE]
    has_diff = BASELINE in arms and bool(gelu)
    n = len(results["config"]["seeds"])
    fig, axes = plt.subplots(len(rows), 2 if has_diff else 1, figsize=(13 if has_diff else 8, 4.3 * len(rows) + 1.4),
                             squeeze=False, gridspec_kw={"width_ratios": [2.2, 1] if has_diff else [1]})
    for i, g in enumerate(rows):
        ax = axes[i, 0]
        epochs = None
        for arm in arms:
            runs = _study_runs(results, g["backend"], g["regime"], arm)
            if not runs:
                continue
            tr = np.array([r["curves"]["train_loss"] for r in runs])
            va = np.array([r["curves"]["val_loss"] for r in runs])
            epochs = np.arange(1, tr.shape[1] + 1)
            mean, band = _log_band(tr)
            ax.plot(epochs, mean, "-", color=_color(arm), lw=1.8)
            if band is not None:
                ax.fill_between(epochs, band[0], band[1], color=_color(arm), alpha=0.25, lw=0)
            ax.plot(epochs, _log_band(va)[0], "--", color=_color(arm), lw=1.1, alpha=0.9)
        if epochs is not None:
            ax.axhline(LOSS_THRESHOLD, color="k", ls=":", lw=1.2)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("BCE loss (nats, log scale)")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
        ax.set_title(f"{_row_name(g)}: loss per epoch, geometric mean over {counted(n, 'seed')}", fontsize=11)
        handles = [Line2D([], [], color=_color(a), lw=1.8, label=f"{_label(a)}: training loss (running mean over "
                          "the epoch)") for a in arms]
        handles += [Line2D([], [], color="gray", ls="--", lw=1.1, label="validation loss (same colours)")]
        if n > 1:
            handles += [Patch(color="gray", alpha=0.3, label=f"band: 95 % t-interval of the mean log training "
                              f"loss over {n} seeds")]
        handles += [Line2D([], [], color="k", ls=":", lw=1.2, label=f"threshold {LOSS_THRESHOLD:g} (right panel)")]
        if len(arms) <= 2:
            ax.legend(handles=handles, fontsize=8.5, loc="upper right", framealpha=0.9)
        else:  # many arms: below the axes, not over the curves
            ax.legend(handles=handles, fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
                      frameon=False)
        if not has_diff:
            continue
        ax = axes[i, 1]
        base = {r["seed"]: epochs_to_loss(r["curves"]["train_loss"]) for r in
                _study_runs(results, g["backend"], g["regime"], BASELINE)}
        diffs, left_out = {}, {}
        for arm in gelu:
            other = {r["seed"]: epochs_to_loss(r["curves"]["train_loss"]) for r in
                     _study_runs(results, g["backend"], g["regime"], arm)}
            seeds = [s for s in other if s in base and other[s] is not None and base[s] is not None]
            diffs[arm] = np.array([other[s] - base[s] for s in seeds], dtype=float)
            left = sum(1 for s in other if s in base) - len(seeds)
            if left:
                left_out[arm] = left
        why = f"an arm never\nreached {LOSS_THRESHOLD:g}"  # two lines: the note stays inside the narrow panel
        if len(left_out) == len(gelu) > 1 and len(set(left_out.values())) == 1:  # one line, not one per arm
            notes = [f"every pair: {counted(next(iter(left_out.values())), 'seed')} left out ({why})"]
        else:
            notes = [f"{_label(arm)}: {counted(n, 'seed')} left out ({why})" for arm, n in left_out.items()]
        step = _step(diffs.values(), 0.5)
        ci_label = None
        first = next((a for a in gelu if diffs[a].size), None)  # the arm whose points carry the legend's entry
        for j, arm in enumerate(gelu):
            d = diffs[arm]
            ax.scatter(_dodge(d, j, step), d, s=16, color=_color(arm), alpha=0.7, edgecolors="none",
                       label="one seed" if arm == first else None)
            row = _dynamics_row(results, g["label"], g["regime"], arm)
            if row and row.get("seeds"):
                lo, hi = row["ci_low"], row["ci_high"]
                if np.isfinite(lo) and np.isfinite(hi):
                    ci_label = f"mean and 95 % CI ({row['ci_method']})"
                    ax.errorbar(j + 0.33, row["mean_diff"], yerr=[[row["mean_diff"] - lo], [hi - row["mean_diff"]]],
                                fmt="o", color="k", ms=5, capsize=4, lw=1.5, label=ci_label if j == 0 else None)
                else:
                    ax.plot(j + 0.33, row["mean_diff"], "o", color="k", ms=5,
                            label=f"mean (no CI: {row['ci_method']})" if j == 0 else None)
        ax.axhline(0, color="gray", lw=1)
        ax.set_xticks(range(len(gelu)), [f"{_label(a)}\n− {_label(BASELINE)}" for a in gelu],
                      fontsize=10 if len(gelu) <= 2 else 7.5)
        ax.set_xlim(-0.6, len(gelu) - 0.4)
        ax.set_ylabel(f"epochs to reach training loss {LOSS_THRESHOLD:g}:\nactivation − ReLU, same seed")
        ax.set_title(f"Epochs to reach {LOSS_THRESHOLD:g}, paired by seed", fontsize=11)
        ax.grid(True, axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[1]:  # no seed reached the threshold in both arms: nothing to name
            ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
        if notes:
            ax.text(0.02, 0.98, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="top")
    fig.suptitle(f"make_moons training loss, {listed(_label(a) for a in arms)} ({results['config']['dtype']})",
                 fontsize=13)
    fig.tight_layout(rect=(0, 0.05 if pooled_note(results) else 0.0, 1, 0.97))
    _note(fig, results)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_decision_boundaries(results, path) -> Path:
    """P(class 1) over the plane for the plot seed, the 0.5 contour and the seed's test points; one row per
    (backend group, regime)."""
    plt = _plt()
    cfg = MoonsConfig.from_dict(results["config"])
    rows, arms = groups(results), cfg.arms
    keys = [(g["backend"], g["regime"]) for g in rows]
    data = make_data(cfg, cfg.plot_seed)
    acc = {(r["backend"], r["regime"], r["arm"]): r["metrics"]["test_acc"] for r in results["runs"]
           if r["seed"] == cfg.plot_seed and r["dtype"] == cfg.dtype}
    fig, axes = plt.subplots(len(rows), len(arms), figsize=(3.4 * len(arms) + 1.2, 3.0 * len(rows) + 1.0),
                             sharex=True, sharey=True, squeeze=False)
    mesh = None
    for bd in results["boundaries"]:
        if (bd["backend"], bd["regime"]) not in keys or bd["arm"] not in arms:
            continue
        ax = axes[keys.index((bd["backend"], bd["regime"])), list(arms).index(bd["arm"])]
        prob = 1.0 / (1.0 + np.exp(-np.clip(np.asarray(bd["logits"]), -50, 50)))
        mesh = ax.contourf(bd["xs"], bd["ys"], prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.55)
        ax.contour(bd["xs"], bd["ys"], prob, levels=[0.5], colors="k", linewidths=1.5)
        run_acc = acc.get((bd["backend"], bd["regime"], bd["arm"]), np.nan)
        ax.set_title(f"{_label(bd['arm'])}: test acc {100 * run_acc:.1f} %", fontsize=10)
    for i, g in enumerate(rows):
        for j in range(len(arms)):
            ax = axes[i, j]
            y = data.y_test > 0.5
            ax.scatter(data.x_test[~y, 0], data.x_test[~y, 1], s=9, c="#08306b", edgecolors="white", linewidths=0.4,
                       label="test, class 0")
            ax.scatter(data.x_test[y, 0], data.x_test[y, 1], s=9, c="#67000d", marker="s", edgecolors="white",
                       linewidths=0.4, label="test, class 1")
            if j == 0:
                ax.set_ylabel(_row_name(g), fontsize=10)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes, shrink=0.8, label="P(class 1) of the trained network")
    axes[0, 0].legend(loc="lower left", fontsize=8, framealpha=0.9)
    fig.suptitle(f"Decision boundaries (black: P = 0.5), seed {cfg.plot_seed}, with its test points", fontsize=13)
    note = pooled_note(results)
    if note:
        import textwrap

        fig.text(0.01, -0.02, "\n".join(textwrap.wrap(note, 110)), fontsize=8.5, ha="left", va="top")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def _paired_row(results, label, regime, arm) -> dict | None:
    return next((r for r in results.get("paired", []) if (r["backend"], r["regime"], r["arm"], r["metric"]) ==
                 (label, regime, arm, "test_acc")), None)


def plot_test_accuracy(results, path) -> Path:
    """Left: test accuracy per arm, one point per seed (equal values side by side), the mean and the 95 %
    t-interval of the mean over the seeds. Right: the paired difference GELU form − ReLU per seed (percentage
    points), its mean and 95 % CI (the study's paired comparison, its method named), and the equivalence margin
    of `gelulab run`'s verdict (±EQUIVALENCE_MARGIN_PP pp)."""
    plt = _plt()
    rows, arms = groups(results), list(results["config"]["arms"])
    gelu = [a for a in arms if a != BASELINE]
    has_diff = BASELINE in arms and bool(gelu)
    n = len(results["config"]["seeds"])
    fig, axes = plt.subplots(1, 2 if has_diff else 1, figsize=(13 if has_diff else 7.5, 5.6), squeeze=False,
                             gridspec_kw={"width_ratios": [max(len(arms), 2), max(len(gelu), 1.4)] if has_diff
                                          else [1]})
    width = 0.8 / max(len(rows), 1)
    acc = {(k, arm): np.array([100 * r["metrics"]["test_acc"] for r in _study_runs(results, g["backend"],
                                                                                    g["regime"], arm)])
           for k, g in enumerate(rows) for arm in arms}
    step = _step(acc.values(), width * 0.55)
    ax = axes[0, 0]
    shown = set()  # legend labels already given
    for k, g in enumerate(rows):
        off = -0.4 + width * (k + 0.5)
        marker = MARKERS[k % len(MARKERS)]
        xs = {}
        for j, arm in enumerate(arms):
            a = acc[(k, arm)]
            if not a.size:
                continue
            xs[arm] = _dodge(a, j + off - width * 0.12, step)
            ax.scatter(xs[arm], a, s=16, color=_color(arm), marker=marker, alpha=0.75, edgecolors="none",
                       label=(f"one seed, {_row_name(g)}" if len(rows) > 1 else "one seed") if j == 0 else None)
            d = stats.describe(a)
            if np.isfinite(d["ci_low"]) and d["sd"] > 0:
                lo, hi = max(d["ci_low"], 0.0), min(d["ci_high"], 100.0)  # an accuracy lies in [0, 100] %
                cut = [f"{v:g} %" for v, c in ((0, lo != d["ci_low"]), (100, hi != d["ci_high"])) if c]
                lab = (f"mean and 95 % t-interval of the mean over {n} seeds"
                       + (f" (cut at {' and '.join(cut)})" if cut else ""))
                ax.errorbar(j + off + width * 0.42, d["mean"], yerr=[[d["mean"] - lo], [hi - d["mean"]]],
                            fmt="o", color="k", ms=5, capsize=4, lw=1.5, label=None if lab in shown else lab)
            else:
                lab = f"mean ({'one seed' if d['n'] < 2 else 'every seed equal'}: no interval)"
                ax.plot(j + off + width * 0.42, d["mean"], "o", color="k", ms=5, label=None if lab in shown else lab)
            shown.add(lab)
        if len(arms) == 2 and len(xs) == 2 and n <= 60:  # join each seed's two arms: the pairing is the design
            a0, a1 = arms
            for x0, y0, x1, y1 in zip(xs[a0], acc[(k, a0)], xs[a1], acc[(k, a1)]):
                ax.plot([x0, x1], [y0, y1], color="gray", lw=0.5, alpha=0.35, zorder=0)
    ax.set_xticks(range(len(arms)), [_label(a) for a in arms])
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Test accuracy per seed" + (" (grey lines join a seed's two arms)" if len(arms) == 2 else ""),
                 fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)
    if has_diff:
        ax = axes[0, 1]
        ax.axhspan(-EQUIVALENCE_MARGIN_PP, EQUIVALENCE_MARGIN_PP, color="#9ecae1", alpha=0.35, lw=0,
                   label=f"equivalence margin ±{EQUIVALENCE_MARGIN_PP:g} pp (gelulab run's verdict)")
        ax.axhline(0, color="gray", lw=1)
        diffs = {}
        for k, g in enumerate(rows):
            base = {r["seed"]: r["metrics"]["test_acc"] for r in _study_runs(results, g["backend"], g["regime"],
                                                                              BASELINE)}
            for arm in gelu:
                runs = _study_runs(results, g["backend"], g["regime"], arm)
                diffs[(k, arm)] = np.array([100 * (r["metrics"]["test_acc"] - base[r["seed"]]) for r in runs
                                            if r["seed"] in base])
        dstep = _step(diffs.values(), width * 0.55)
        labelled = set()
        for k, g in enumerate(rows):
            off = -0.4 + width * (k + 0.5)
            marker = MARKERS[k % len(MARKERS)]
            for jj, arm in enumerate(gelu):
                d = diffs[(k, arm)]
                if not d.size:
                    continue
                ax.scatter(_dodge(d, jj + off - width * 0.12, dstep), d, s=16, color=_color(arm), marker=marker,
                           alpha=0.75, edgecolors="none", label="one seed" if "seed" not in labelled else None)
                labelled.add("seed")
                row = _paired_row(results, g["label"], g["regime"], arm)
                if row is None:
                    continue
                mean = 100 * row["mean_diff"]
                if np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"]):
                    lab = f"mean and 95 % CI ({row['ci_method']})"
                    ax.errorbar(jj + off + width * 0.42, mean, yerr=[[mean - 100 * row["ci_low"]],
                                                                     [100 * row["ci_high"] - mean]],
                                fmt="o", color="k", ms=5, capsize=4, lw=1.5,
                                label=lab if lab not in labelled else None)
                else:
                    lab = f"mean (no CI: {row['ci_method']})"
                    ax.plot(jj + off + width * 0.42, mean, "o", color="k", ms=5,
                            label=lab if lab not in labelled else None)
                labelled.add(lab)
        ax.set_xticks(range(len(gelu)), [f"{_label(a)}\n− {_label(BASELINE)}" for a in gelu])
        ax.set_xlim(-0.6, len(gelu) - 0.4)
        ax.set_ylabel("test accuracy difference, same seed (pp)")
        ax.set_title("Paired difference: activation − ReLU", fontsize=11)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)
    fig.suptitle(f"make_moons test accuracy, {counted(n, 'seed')} ({results['config']['dtype']})"
                 + (f": {_row_name(rows[0])}" if len(rows) == 1 else ""), fontsize=13)
    fig.tight_layout(rect=(0, 0.05 if pooled_note(results) else 0.0, 1, 0.97))
    _note(fig, results)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def write_plots(results, out_dir) -> dict:
    """Write the three PNGs into out_dir; returns {name: Path}. No-op (empty dict) when there are no runs."""
    if not results["runs"]:
        return {}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return {"loss_curves": plot_loss_curves(results, out_dir / "loss_curves.png"),
            "decision_boundaries": plot_decision_boundaries(results, out_dir / "decision_boundaries.png"),
            "test_accuracy": plot_test_accuracy(results, out_dir / "test_accuracy.png")}
