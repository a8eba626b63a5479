"""The moons grid's PNGs, from the grid results alone (matplotlib, Agg; backend-free).

heatmap_<form>_<metric>.png   one per GELU form (exact first) and metric (test_acc, test_loss): panels of the
                              paired difference GELU form - ReLU over the two heatmap axes, one square per value
                              pair, its mean and 95 % CI written in it, a black frame and * where the difference
                              is significant (BH-adjusted); blue = GELU better, red = GELU worse, one colour scale
                              per figure, symmetric about 0
loss_curves_most_different.png  the cells whose exact GELU - ReLU test loss differs most surely: mean training
                              (solid) and validation (dashed) BCE per epoch of ReLU and exact GELU, band = +-1 sd
                              across seeds (first backend and regime)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gelulab.core.activations import ACTIVATIONS, BASELINE
from gelulab.experiments.moons.grid import AXIS_LABELS


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _v(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def plot_heatmap(fig_data: dict, path) -> Path:
    """One heatmap figure (a dict of analysis["heatmaps"]) as a PNG at `path`."""
    from matplotlib.patches import Rectangle

    plt = _plt()
    acc = fig_data["metric"] == "test_acc"
    scale = 100.0 if acc else 1.0
    xs, ys, facets = fig_data["x_values"], fig_data["y_values"], fig_data["facets"]
    panels = fig_data["panels"]
    ncols = len({p["facet"][facets[-1]] for p in panels}) if facets else 1
    nrows = max(1, len(panels) // ncols)
    diffs = [abs(sq["mean_diff"]) * scale for p in panels for sq in p["squares"]
             if sq["mean_diff"] is not None and np.isfinite(sq["mean_diff"])]
    vmax = max(diffs, default=0.0) or 1e-12
    cmap = "RdBu" if acc else "RdBu_r"  # blue = GELU better: higher accuracy, lower loss
    w, h = 1.3 * len(xs) + 1.3, 0.75 * len(ys) + 1.2
    fig, axes = plt.subplots(nrows, ncols, figsize=(w * ncols + 1.2, h * nrows + 1.0), squeeze=False,
                             layout="constrained")
    image = None
    for k, panel in enumerate(panels):
        ax = axes[k // ncols, k % ncols]
        grid = np.full((len(ys), len(xs)), np.nan)
        for sq in panel["squares"]:
            i, j = ys.index(sq["y"]), xs.index(sq["x"])
            d = sq["mean_diff"]
            grid[i, j] = d * scale if d is not None and np.isfinite(d) else np.nan
            sig = sq["kind"] in ("higher", "lower")
            lo, hi = (sq["ci_low"] or np.nan) * scale, (sq["ci_high"] or np.nan) * scale
            digits = 2 if acc else 3
            text = f"{grid[i, j]:+.{digits}f}{' *' if sig else ''}\n[{lo:+.{digits}f}, {hi:+.{digits}f}]"
            strong = np.isfinite(grid[i, j]) and abs(grid[i, j]) > 0.6 * vmax
            ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color="white" if strong else "black",
                    fontweight="bold" if sig else "normal")
            if sig:
                ax.add_patch(Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, ec="black", lw=2.2))
        image = ax.imshow(grid, cmap=cmap, vmin=-vmax, vmax=vmax, origin="lower", aspect="auto")
        ax.set_xticks(range(len(xs)), [_v(v) for v in xs], fontsize=8)
        ax.set_yticks(range(len(ys)), [_v(v) for v in ys], fontsize=8)
        ax.set_xlabel(AXIS_LABELS[fig_data["x"]], fontsize=8)
        ax.set_ylabel(AXIS_LABELS[fig_data["y"]], fontsize=8)
        if panel["facet"]:
            ax.set_title(", ".join(f"{AXIS_LABELS[a]} {_v(v)}" for a, v in panel["facet"].items()), fontsize=8.5)
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols, k % ncols].set_visible(False)
    unit = "percentage points" if acc else "BCE"
    label = ACTIVATIONS[fig_data["arm"]].label
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.85, label=f"{label} − ReLU, test {'accuracy' if acc else 'loss'} "
                     f"({unit}); blue: GELU better")
    title = (f"{label} − ReLU: test {'accuracy (pp)' if acc else 'loss'}, mean over seeds [95 % CI]; "
             "* and frame: significant (BH over all cells)")
    if fig_data["marginalised"]:
        title += f"\naveraged over {', '.join(AXIS_LABELS[a] for a in fig_data['marginalised'])}"
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def plot_most_different(results: dict, path) -> Path | None:
    """Loss curves of analysis["most_different"] cells: ReLU and the first GELU form, first backend and regime.
    Returns None when there is nothing to plot."""
    an = results["analysis"]
    ids = an["most_different"]
    if not ids or not an["arms"]:
        return None
    from matplotlib.ticker import MaxNLocator

    plt = _plt()
    arm = an["arms"][0]
    backend, regime = results["backends"][0], an["regimes"][0]
    cells = {c["id"]: c for c in results["cells"]}
    varied = [a for a, v in results["spec"]["axes"].items() if len(v) > 1]
    comps = {(c["cell"], c["metric"]): c for c in an["comparisons"]
             if c["arm"] == arm and c["backend"] == backend and c["regime"] == regime}
    fig, axes = plt.subplots(1, len(ids), figsize=(4.2 * len(ids), 3.8), squeeze=False)
    for ax, cid in zip(axes[0], ids):
        dtype = cells[cid]["config"]["dtype"]
        for a in (BASELINE, arm):
            rs = [r for r in results["runs"][cid] if (r["arm"], r["backend"], r["regime"], r["dtype"]) ==
                  (a, backend, regime, dtype)]
            for key, style in (("train_loss", "-"), ("val_loss", "--")):
                c = np.array([r["curves"][key] for r in rs])
                if not c.size:
                    continue
                e = np.arange(1, c.shape[1] + 1)
                mean = c.mean(axis=0)
                sd = c.std(axis=0, ddof=1) if len(c) > 1 else np.zeros_like(mean)
                ax.plot(e, mean, style, color=ACTIVATIONS[a].color, lw=1.5,
                        label=f"{ACTIVATIONS[a].label} {'train' if key == 'train_loss' else 'validation'}")
                ax.fill_between(e, np.maximum(mean - sd, 1e-4), mean + sd, color=ACTIVATIONS[a].color, alpha=0.15,
                                lw=0)
        acc, loss = comps.get((cid, "test_acc")), comps.get((cid, "test_loss"))
        where = ", ".join(f"{AXIS_LABELS[k]} {_v(cells[cid]['coords'][k])}" for k in varied) or cid
        sub = []
        if acc:
            sub.append(f"Δ test acc {100 * acc['mean_diff']:+.2f} pp")
        if loss:
            sub.append(f"Δ test loss {loss['mean_diff']:+.4f}")
        ax.set_title(f"{where}\n{', '.join(sub)}", fontsize=8.5)
        ax.set_yscale("log")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs
        ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].set_ylabel("BCE loss (mean over seeds, band ±1 sd)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Most different cells ({ACTIVATIONS[arm].label} − ReLU test loss, smallest BH-adjusted p); "
                 f"{backend}, {regime}", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.93))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def write_plots(results: dict, out_dir) -> dict:
    """Write every heatmap and the most-different loss curves into out_dir; returns {name: Path} with names
    heatmap_<form>_<metric> and loss_curves."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for f in results["analysis"]["heatmaps"]:
        name = f"heatmap_{f['arm']}_{f['metric']}"
        paths[name] = plot_heatmap(f, out / f"{name}.png")
    p = plot_most_different(results, out / "loss_curves_most_different.png")
    if p is not None:
        paths["loss_curves"] = p
    return paths
