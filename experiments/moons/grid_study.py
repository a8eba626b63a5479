"""`gelulab moons --grid [FILE]`: run (or resume) every cell of a study grid, then analyse and report it.

A cell (experiments/moons/grid.py) is one MoonsConfig and is trained by today's study machinery
(experiments/moons/study.py: plan, the resume check, train_groups), so each keeps its guarantees: paired seeds
shared by every arm and backend, the test set used once, versions recorded in every run file. Layout:

    <out>/cells/<cell id>/runs/<regime>/<dtype>/<backend>/<arm>/seed<k>.json   one file per run, as a study
    <out>/grid.json   the spec, the environment, every run's metrics (the curves stay in the run files), the
                      analysis
    <out>/report.md, heatmap_*.png, loss_curves_most_different.png          (experiments/moons/grid_report.py)

The unit of work is a cell (all its backends, arms and seeds); cells run in local worker processes or on Ray
(experiments/moons/executors.py). The worker keeps the run files' text in memory (no temporary folder, so a
killed or interrupted worker leaves nothing behind) and returns it; the driver writes them into the cell's
folder as each cell finishes, never overwriting a stored run. An interrupted grid therefore resumes from the
finished cells, and a folder whose runs were made with other settings is refused before any training (naming
the fields). --out is checked (core.plumbing.output.check_writable) and held by this run (core.plumbing.lock.hold)
before any training.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

from tqdm import tqdm

from gelulab.backends import BACKEND_NAMES, installed_backends, selected_backends
from gelulab.core.plumbing import config as gconfig
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import check_writable
from gelulab.core.plumbing.report import atomic_write_text, cpu_model, environment, write_json
from gelulab.experiments.moons import executors
from gelulab.experiments.moons import study as S
from gelulab.experiments.moons.grid import GridSpec

DEFAULT_OUT = "results/moons_grid"


def cell_dir(out_dir, cell) -> Path:
    """The results folder of one cell."""
    return Path(out_dir) / "cells" / cell.id


def train_cell(cfg_dict: dict, groups_by_backend: dict, grid_backends: tuple) -> dict:
    """The unit of work: train the given groups of one cell (every backend, canonical order) and return the run
    files' text (kept in memory: nothing is written on the worker's machine).

    cfg_dict: MoonsConfig.to_dict(); groups_by_backend: {backend: [(backend, regime, dtype, arm, seeds), ...]}
    as from study.plan; grid_backends: every backend of the grid (the grid's backends are loaded in the registry's
    order, torch before tensorflow as Keras imports them, also one this task has nothing left to train and that
    comes before one it trains: a later task of the same worker process may train it). Runs in any process
    (a local worker, a Ray worker on another machine). Returns {"files": {path relative to the cell folder:
    JSON text}, "timing": {backend: train_groups' timing}, "host": {"node", "cpu", "pid"}}.
    """
    import importlib

    trained = [b for b in BACKEND_NAMES if b in groups_by_backend]
    for b in BACKEND_NAMES[:BACKEND_NAMES.index(trained[-1])] if trained else ():
        if b in grid_backends and b not in groups_by_backend:  # loaded before the backends trained after it
            importlib.import_module(f"gelulab.backends.{b}.activations")
    files: dict = {}
    timing = {b: S.train_groups(b, cfg_dict, None, groups_by_backend[b], files=files)
              for b in BACKEND_NAMES if b in groups_by_backend}
    return {"files": dict(sorted(files.items())), "timing": timing,
            "host": {"node": platform.node(), "cpu": cpu_model(), "pid": os.getpid()}}


def store_files(root, files: dict) -> int:
    """Write a finished task's run files {path relative to root: text} under root (atomically; a stored run is
    never overwritten). Returns the number written."""
    root = Path(root)
    n = 0
    for rel, text in files.items():
        path = root / rel
        if not path.exists():
            atomic_write_text(path, text)
            n += 1
    return n


def _cost(cell, groups_by_backend) -> float:
    """A rough relative cost of a cell's task: Adam steps x dense layers x groups (for the order of the tasks)."""
    cfg = cell.config
    n_groups = sum(len(g) for g in groups_by_backend.values())
    return cfg.epochs * cfg.steps_per_epoch * (len(cfg.hidden) + 1) * n_groups


def _load_average() -> float | None:
    """The 1-minute load average (other processes competing for the cores), or None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _train_cpu(runs: dict) -> float:
    """CPU seconds of training summed over every group of every cell, from the run files' timing (a group's
    seeds share one record of it)."""
    groups = {}
    for cid, rs in runs.items():
        for r in rs:
            groups[(cid, r["backend"], r["regime"], r["dtype"], r["arm"])] = r["timing"]["group_cpu_s"]
    return float(sum(groups.values()))


def run_grid(spec: GridSpec, out_dir, backends=None, executor: str = "local", jobs: int | None = None,
             address: str | None = None, progress: bool = True) -> dict:
    """Run (or resume) every cell of `spec` and return the grid's results (runs and analysis); does not write
    the report (see write_grid_report).

    backends: names (default: the spec's, else GELULAB_BACKEND, else every installed one; numpy is skipped:
    no autodiff); executor: "local" or "ray"; jobs: worker processes or Ray CPUs (default: CPU cores);
    address: an existing Ray cluster.

    Returns {"spec", "cells": [{"id", "coords", "config"}], "backends", "skipped", "environment", "runs": {cell
    id: [run records]}, "executor", "jobs", "address", "wall_s", "trained_cells", "resumed_cells", "hosts",
    "train_cpu_s", "load_average" [start, end], "analysis"}. Raises ValueError (before any training) for a bad
    spec, backend, executor option, an unwritable out_dir (core.plumbing.output.OutputUnwritable: a path under a file, a
    read-only folder), a folder held by another run (core.plumbing.lock.FolderInUse) or a cell folder holding runs of
    other settings; BackendUnavailable for a named backend that is not installed.
    """
    from gelulab.experiments.moons import grid_report

    if not isinstance(spec, GridSpec):
        raise TypeError(f"spec: expected a GridSpec, got {type(spec).__name__}")
    out = check_writable(out_dir)
    with hold(out):
        executors.check_executor(executor, jobs, address)
        wanted = backends if backends is not None else (spec.backends or selected_backends())
        names, skipped = S.check_backends(wanted)
        if not names:
            raise ValueError(f"backends {list(wanted)}: none can train (numpy has no autodiff); expected one of "
                             f"{S.check_backends(installed_backends())[0]}")
        for name, reason in skipped.items():
            print(f"moons grid: skipping backend {name!r}: {reason}", file=sys.stderr)
        cells = spec.cells()
        plans, tasks, task_cells = {}, [], []
        for cell in cells:
            groups = S.plan(cell.config, names)
            plans[cell.id] = groups
            todo = S._groups_to_train(cell.config, cell_dir(out, cell), groups)
            if todo:
                by_backend = {}
                for g in todo:
                    by_backend.setdefault(g[0], []).append(g)
                tasks.append((cell.config.to_dict(), by_backend, tuple(names)))
                task_cells.append(cell)
        # the costliest cells first, so that the last ones to finish are short (steps x layers x groups)
        order = sorted(range(len(tasks)), key=lambda i: -_cost(task_cells[i], tasks[i][1]))
        tasks, task_cells = [tasks[i] for i in order], [task_cells[i] for i in order]
        n_runs = sum(len(g[4]) for groups in plans.values() for g in groups)
        todo_runs = sum(len(g[4]) for t in tasks for gs in t[1].values() for g in gs)
        env_vars = {"GELULAB_THREADS": gconfig.threads(), "GELULAB_DEVICE": gconfig.device()}
        hosts = {}
        load0 = _load_average()
        t0 = time.perf_counter()
        bar = tqdm(total=n_runs, initial=n_runs - todo_runs, desc=f"moons grid ({executor})", unit="run",
                   disable=not progress, dynamic_ncols=True)
        try:
            for i, result in executors.run_tasks(train_cell, tasks, executor, jobs, address, env_vars):
                cell = task_cells[i]
                store_files(cell_dir(out, cell), result["files"])
                hosts[cell.id] = result["host"]
                bar.update(sum(len(g[4]) for gs in tasks[i][1].values() for g in gs))
                bar.set_postfix_str(cell.id)
        finally:
            bar.close()
        wall = time.perf_counter() - t0
        runs = {}
        for cell in cells:
            runs[cell.id], _ = S._collect(cell.config, cell_dir(out, cell), plans[cell.id])
        results = {
            "spec": spec.to_dict(), "source": spec.source,
            "cells": [{"id": c.id, "coords": c.coords, "config": c.config.to_dict()} for c in cells],
            "backends": names, "skipped": skipped, "environment": environment(()),
            "runs": runs, "executor": executor, "address": address,  # jobs: the workers used (local: <= tasks)
            "jobs": (min(jobs or os.cpu_count() or 1, max(len(tasks), 1)) if executor == "local"
                     else jobs or os.cpu_count()),
            "wall_s": wall, "trained_cells": len(tasks), "resumed_cells": len(cells) - len(tasks), "hosts": hosts,
            "train_cpu_s": _train_cpu(runs), "load_average": [load0, _load_average()],
        }
        env = results["environment"]
        env["frameworks"] = {r["backend"]: r["versions"] for rs in runs.values() for r in rs}
        env.pop("threads_in_effect", None)  # the workers' counts and levels, from the run files; never empty
        env.pop("cpu_dispatch", None)
        env.update(S.runtime_environment([r for rs in runs.values() for r in rs]))
        results["analysis"] = grid_report.analyse_grid(spec, cells, runs, names)
        return results


def write_grid_report(results: dict, out_dir) -> dict:
    """Write report.md, grid.json and the PNGs (heatmaps, loss curves of the most different cells) into
    out_dir. Returns {name: Path}."""
    from gelulab.experiments.moons import grid_plots, grid_report

    out = Path(out_dir)
    with hold(out):
        paths = grid_plots.write_plots(results, out)
        results["plots"] = {k: p.name for k, p in paths.items()}
        paths["report"] = atomic_write_text(out / "report.md", grid_report.markdown(results))
        lean = {cid: [{k: r[k] for k in ("backend", "regime", "dtype", "arm", "seed", "metrics")} for r in rs]
                for cid, rs in results["runs"].items()}  # the curves stay in the cells' run files
        paths["json"] = write_json(out / "grid.json", {**results, "runs": lean})
        return paths
