"""Log-log plots of throughput against size, one PNG per backend and dtype, with the copy-bandwidth limit drawn."""
from __future__ import annotations

from pathlib import Path

from gelulab.benchmarks.analysis import reference
from gelulab.benchmarks.grid import DIRECTIONS, MODES
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.numerics.dtypes import get_dtype


def _plt():
    """matplotlib.pyplot on the Agg backend, imported when a plot is drawn (not when the command line starts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# line style and marker per impl, the convention of the parity plots too (solid builtin, dashed formula, dotted kernel)
STYLES = {"builtin": ("-", "o"), "formula": ("--", "s"), "kernel": (":", "^")}


def throughput_plot(result: dict, backend: str, dtype: str, path: Path) -> Path | None:
    """Write `path` (PNG): elements/s against size (log-log) for one backend and dtype; one panel per direction
    (rows) and mode (columns), one line per activation (colour: the catalogue's) and impl (solid/circles builtin,
    dashed/squares formula, dotted/triangles kernel). The black dash-dot line is the large-array copy bandwidth in
    elements/s (GB/s / (2 itemsize)); the grey dash-dot line with dots the copy of the same bytes at each size.
    Returns the path, or None when no cell was timed."""
    cells = [c for c in result["cells"] if c["backend"] == backend and c["dtype"] == dtype and "median_s" in c]
    if not cells:
        return None
    itemsize = get_dtype(dtype).np_dtype.itemsize
    dirs = [d for d in DIRECTIONS if any(c["direction"] == d for c in cells)]
    modes = [m for m in MODES if any(c["mode"] == m for c in cells)]
    plt = _plt()
    fig, axes = plt.subplots(len(dirs), len(modes), figsize=(5.2 * len(modes), 3.9 * len(dirs)), squeeze=False,
                             sharex=True, sharey=True)
    ref = reference({"gbps": result["copy_bandwidth"]["gbps"], "curve": result["copy_curve_gbps"]},
                    result.get("device_copy", {}), backend, cells[0]["device"])
    limit, curve = ref["gbps"] * 1e9 / (2 * itemsize), ref["curve"]
    sizes = sorted({c["size"] for c in cells})
    same = [(s, curve[s * itemsize] * 1e9 / (2 * itemsize)) for s in sizes if s * itemsize in curve]
    for i, direction in enumerate(dirs):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            ax.axhline(limit, color="black", ls="-.", lw=1.2,
                       label=f"copy bandwidth {ref['gbps']:.3g} GB/s")
            if same:
                ax.plot(*zip(*same), color="0.55", ls="-.", marker=".", lw=1.0, label="copy, same size")
            for act in ACTIVATIONS:
                for impl, (style, marker) in STYLES.items():
                    pts = sorted((c["size"], c["elements_per_s"]) for c in cells if c["mode"] == mode
                                 and c["direction"] == direction and c["activation"] == act and c["impl"] == impl)
                    if pts:
                        ax.plot(*zip(*pts), color=ACTIVATIONS[act].color, ls=style, marker=marker, ms=3.5,
                                label=f"{ACTIVATIONS[act].label} {impl}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{direction}, {mode}", fontsize=10)
            if i == len(dirs) - 1:
                ax.set_xlabel("size (elements)")
            if j == 0:
                ax.set_ylabel("throughput (elements/s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    env = result["environment"]
    threads = f"{env['threads']} thread{'' if str(env['threads']) == '1' else 's'}"
    fig.suptitle(f"{backend} on {cells[0]['device']}, {dtype}, {threads}: throughput vs size",
                 fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def all_plots(result: dict, out_dir: Path) -> list[Path]:
    """One throughput_plot per (backend, device, dtype) in the result: out_dir/throughput_<backend>[_<device>]_
    <dtype>.png (device in the name when not cpu). Returns the paths written."""
    written = []
    for backend, device, dtype in dict.fromkeys((c["backend"], c["device"], c["dtype"]) for c in result["cells"]):
        sub = {**result, "cells": [c for c in result["cells"] if c["device"] == device]}
        tag = backend if device == "cpu" else f"{backend}_{device}"
        p = throughput_plot(sub, backend, dtype, out_dir / f"throughput_{tag}_{dtype}.png")
        if p:
            written.append(p)
    return written
