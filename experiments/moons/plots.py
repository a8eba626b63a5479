"""The moons study's three PNGs, from the results dict alone (matplotlib, Agg; backend-free).

loss_curves.png          mean training (running, solid) and validation (dashed) BCE per epoch, band =
                         mean +- 1 sd across seeds; a panel per (backend, regime) row x arm column, log y
decision_boundaries.png  P(class 1) of the trained network of one seed over the plane, the 0.5 contour and
                         that seed's test points; one panel per (backend, regime) x arm
test_accuracy.png        test accuracy per arm with one point per seed (colour = backend, mean and 95 % CI
                         beside), and the paired difference of each GELU form against ReLU per seed
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gelulab.core.activations import ACTIVATIONS, BASELINE
from gelulab.experiments.moons.config import MoonsConfig, make_data

COLORS = {"jax": "#1b9e77", "torch": "#d95f02", "tensorflow": "#7570b3"}
MARKERS = {"matched": "o", "native": "^"}


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


def _study_runs(results, backend, regime, arm) -> list:
    dtype = results["config"]["dtype"]
    return [r for r in results["runs"] if (r["backend"], r["regime"], r["arm"], r["dtype"]) ==
            (backend, regime, arm, dtype)]


def plot_loss_curves(results, path) -> Path:
    """Mean train/val loss per epoch with a +-1 sd band across seeds, a panel per (backend, regime) x arm."""
    plt = _plt()
    rows, arms = _rows(results), results["config"]["arms"]
    fig, axes = plt.subplots(len(rows), len(arms), figsize=(3.6 * len(arms), 2.7 * len(rows) + 0.8),
                             sharex=True, sharey=True, squeeze=False)
    for i, (b, regime) in enumerate(rows):
        for j, arm in enumerate(arms):
            ax = axes[i, j]
            runs = _study_runs(results, b, regime, arm)
            for key, style, name in (("train_loss", "-", "train (running mean over the epoch)"),
                                     ("val_loss", "--", "validation")):
                if not runs:
                    continue
                c = np.array([r["curves"][key] for r in runs])
                epochs = np.arange(1, c.shape[1] + 1)
                mean, sd = c.mean(axis=0), c.std(axis=0, ddof=1) if len(c) > 1 else np.zeros(c.shape[1])
                ax.plot(epochs, mean, style, color=COLORS.get(b, "k"), lw=1.6, label=name)
                ax.fill_between(epochs, np.maximum(mean - sd, 1e-4), mean + sd, color=COLORS.get(b, "k"),
                                alpha=0.2, lw=0)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if i == 0:
                ax.set_title(_label(arm), fontsize=12)
            if j == 0:
                ax.set_ylabel(f"{b} ({regime})\nBCE loss", fontsize=10)
            if i == len(rows) - 1:
                ax.set_xlabel("epoch")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    n = len(results["config"]["seeds"])
    fig.suptitle(f"make_moons loss curves: mean over {n} seeds, band = ±1 sd ({results['config']['dtype']})",
                 fontsize=13)
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_decision_boundaries(results, path) -> Path:
    """P(class 1) over the plane for the plot seed, the 0.5 contour and the seed's test points."""
    plt = _plt()
    cfg = MoonsConfig.from_dict(results["config"])
    rows, arms = _rows(results), cfg.arms
    data = make_data(cfg, cfg.plot_seed)
    acc = {(r["backend"], r["regime"], r["arm"]): r["metrics"]["test_acc"] for r in results["runs"]
           if r["seed"] == cfg.plot_seed and r["dtype"] == cfg.dtype}
    fig, axes = plt.subplots(len(rows), len(arms), figsize=(3.4 * len(arms), 3.0 * len(rows) + 0.6),
                             sharex=True, sharey=True, squeeze=False)
    mesh = None
    for bd in results["boundaries"]:
        if (bd["backend"], bd["regime"]) not in rows or bd["arm"] not in arms:
            continue
        ax = axes[rows.index((bd["backend"], bd["regime"])), list(arms).index(bd["arm"])]
        prob = 1.0 / (1.0 + np.exp(-np.clip(np.asarray(bd["logits"]), -50, 50)))
        mesh = ax.contourf(bd["xs"], bd["ys"], prob, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.55)
        ax.contour(bd["xs"], bd["ys"], prob, levels=[0.5], colors="k", linewidths=1.5)
        run_acc = acc.get((bd["backend"], bd["regime"], bd["arm"]), np.nan)
        ax.set_title(f"{_label(bd['arm'])}: test acc {100 * run_acc:.1f} %", fontsize=10)
    for i, (b, regime) in enumerate(rows):
        for j in range(len(arms)):
            ax = axes[i, j]
            y = data.y_test > 0.5
            ax.scatter(data.x_test[~y, 0], data.x_test[~y, 1], s=9, c="#08306b", edgecolors="white", linewidths=0.4,
                       label="test, class 0")
            ax.scatter(data.x_test[y, 0], data.x_test[y, 1], s=9, c="#67000d", marker="s", edgecolors="white",
                       linewidths=0.4, label="test, class 1")
            if j == 0:
                ax.set_ylabel(f"{b} ({regime})", fontsize=11)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes, shrink=0.8, label="P(class 1) of the trained network")
    axes[0, 0].legend(loc="lower left", fontsize=8, framealpha=0.9)
    fig.suptitle(f"Decision boundaries (black: P = 0.5), seed {cfg.plot_seed}, with its test points", fontsize=13)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def plot_test_accuracy(results, path) -> Path:
    """Left: test accuracy per arm, one point per seed, colour per backend (marker per regime), mean and the
    Wilson 95 % CI of the summary.
    Right: paired difference activation - ReLU (the baseline) per seed (percentage points)."""
    plt = _plt()
    rows, arms = _rows(results), results["config"]["arms"]
    # a pooled summary row ("jax = torch", identical backends) serves each of its backends
    summary = {(b, r["regime"], r["arm"]): r["test_acc"] for r in results["summary"] for b in r["backend"].split(" = ")}
    gelu = [a for a in arms if a != BASELINE]
    has_diff = BASELINE in arms and gelu
    fig, axes = plt.subplots(1, 2 if has_diff else 1, figsize=(13 if has_diff else 7.5, 4.8), squeeze=False,
                             gridspec_kw={"width_ratios": [len(arms), len(gelu)] if has_diff else [1]})
    rng = np.random.default_rng(0)  # jitter only
    width = 0.8 / max(len(rows), 1)
    for k, (b, regime) in enumerate(rows):
        off = -0.4 + width * (k + 0.5)
        for j, arm in enumerate(arms):
            runs = _study_runs(results, b, regime, arm)
            acc = np.array([100 * r["metrics"]["test_acc"] for r in runs])
            x = j + off + rng.uniform(-width * 0.25, width * 0.25, len(acc)) - width * 0.12
            axes[0, 0].scatter(x, acc, s=12, color=COLORS.get(b, "k"), marker=MARKERS.get(regime, "o"), alpha=0.6,
                               label=f"{b} ({regime})" if j == 0 else None)
            d = summary.get((b, regime, arm))
            if d and np.isfinite(d["ci_low"]) and np.isfinite(d["mean"]):
                axes[0, 0].errorbar(j + off + width * 0.3, 100 * d["mean"], color="k",
                                    yerr=[[100 * (d["mean"] - d["ci_low"])], [100 * (d["ci_high"] - d["mean"])]],
                                    fmt="_", markersize=10, capsize=3, lw=1.2)
            if has_diff and arm != BASELINE:
                base = {r["seed"]: r["metrics"]["test_acc"] for r in _study_runs(results, b, regime, BASELINE)}
                diff = np.array([100 * (r["metrics"]["test_acc"] - base[r["seed"]]) for r in runs
                                 if r["seed"] in base])
                jj = gelu.index(arm)
                axes[0, 1].scatter(jj + off + rng.uniform(-width * 0.3, width * 0.3, len(diff)), diff, s=12,
                                   color=COLORS.get(b, "k"), marker=MARKERS.get(regime, "o"), alpha=0.6)
                if len(diff):
                    axes[0, 1].hlines(diff.mean(), jj + off - width * 0.4, jj + off + width * 0.4, color="k", lw=1.5)
    ax = axes[0, 0]
    ax.set_xticks(range(len(arms)), [_label(a) for a in arms])
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Test accuracy, one point per seed (black: mean and 95 % CI)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(len(rows), 3), frameon=False)
    if has_diff:
        ax = axes[0, 1]
        ax.axhline(0, color="gray", lw=1)
        ax.set_xticks(range(len(gelu)), [f"{_label(a)}\n− {_label(BASELINE)}" for a in gelu])
        ax.set_ylabel("paired difference (percentage points)")
        ax.set_title("Same seed: activation − ReLU (black: mean)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(f"make_moons test accuracy, {len(results['config']['seeds'])} seeds "
                 f"({results['config']['dtype']})", fontsize=13)
    fig.tight_layout()
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
