"""`gelulab moons`: ReLU against the three GELU forms on make_moons, in every selected backend, over many
seeds.

The study (issue 4): arms relu, gelu_none, gelu_tanh, gelu_sigmoid; each seed fixes the data, split, initial
weights and order, shared by every arm and backend (paired comparisons); regimes `matched` (shared numpy init
and order, one Adam formula) and `native` (each framework's defaults). The seeds of one (backend, regime,
dtype, arm) group are trained together in one call of `backends/<name>/moons.py::train`.

Robustness: every finished (backend, regime, dtype, arm, seed) run is written atomically to
`<out>/runs/<regime>/<dtype>/<backend>/<arm>/seed<k>.json`; a rerun with the same --out skips the groups whose
runs are all on disk and retrains a group with any run missing from its start, so an interrupted study resumes
with the same numbers as an uninterrupted one (a group is the unit of work: its seeds finish together). A
results folder holds runs of one configuration; runs made with other settings are refused before any training.

API for the main job:
    results = run_study(MoonsConfig(seeds=tuple(range(3))), "results/run/moons", ["jax", "torch"])
    text = markdown(results); write_report(results, out_dir) -> report.md, results.json, three PNGs
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gelulab.backends import BackendUnavailable, get_backend, installed_backends, selected_backends
from gelulab.core import config as gconfig
from gelulab.experiments.moons.config import (
    ARMS,
    REGIMES,
    TRAIN_DTYPES,
    MoonsConfig,
    decision_grid,
    evaluate,
    make_data,
    train_spec,
)
from gelulab.experiments.moons.datasets import DATASETS
from gelulab.experiments.moons.plots import write_plots
from gelulab.experiments.moons.report import analyse, markdown
from gelulab.core.report import atomic_write_text, environment, write_json

__all__ = ["NO_AUTODIFF", "MoonsConfig", "add_arguments", "markdown", "run", "run_study", "write_report"]

NO_AUTODIFF = ("numpy",)  # backends without autodiff: the moons study needs gradients, so it skips them
SKIP_REASON = "the numpy backend has no autodiff, and training needs gradients: moons skips it"
DEFAULT_OUT = "results/moons"


# --------------------------------------------------------------------------------------------------- the plan


def run_path(out_dir, backend: str, regime: str, dtype: str, arm: str, seed: int) -> Path:
    """Where one finished run is stored."""
    return Path(out_dir) / "runs" / regime / dtype / backend / arm / f"seed{seed}.json"


def plan(cfg: MoonsConfig, backends) -> list[tuple[str, str, str, str, tuple[int, ...]]]:
    """Every group of the study: (backend, regime, dtype, arm, seeds). The study dtype for each regime, plus
    the
    compare dtype (matched regime, cfg.compare_seed_list)."""
    groups = []
    for b in backends:
        for regime in cfg.regimes:
            groups += [(b, regime, cfg.dtype, arm, cfg.seeds) for arm in cfg.arms]
        if cfg.compare_seed_list:
            groups += [(b, "matched", cfg.compare_dtype, arm, cfg.compare_seed_list) for arm in cfg.arms]
    return groups


def _normalised(d: dict) -> dict:
    return json.loads(json.dumps(d))


def _groups_to_train(cfg: MoonsConfig, out_dir, groups) -> list:
    """The groups with a run missing on disk. Raises ValueError, before any training, when a stored run was
    made
    with other settings (naming the fields) or is unreadable."""
    key = _normalised(cfg.run_key())
    todo = []
    for g in groups:
        b, regime, dtype, arm, seeds = g
        missing = False
        for s in seeds:
            p = run_path(out_dir, b, regime, dtype, arm, s)
            if not p.exists():
                missing = True
                continue
            try:
                rec = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"results folder {out_dir}: cannot read {p} ({e}); delete it to retrain") from e
            diff = sorted(k for k in set(key) | set(rec.get("key", {})) if key.get(k) != rec.get("key", {}).get(k))
            if diff:
                shown = ", ".join(f"{k}: stored {rec.get('key', {}).get(k)!r}, now {key.get(k)!r}" for k in diff)
                raise ValueError(f"results folder {out_dir} holds runs made with other settings ({shown}); "
                                 "use another --out or delete the folder")
        if missing:
            todo.append(g)
    return todo


def check_backends(backends) -> tuple[list[str], dict]:
    """(backends to train, {skipped: reason}). Unknown names raise ValueError naming the valid ones; a named
    but missing framework raises BackendUnavailable with the install command. Canonical order (torch before
    tensorflow, as Keras imports them)."""
    names = list(dict.fromkeys(backends))
    for n in names:
        if n not in gconfig.BACKEND_NAMES:
            raise ValueError(f"unknown backend {n!r}; valid backends: {list(gconfig.BACKEND_NAMES)}")
    missing = [n for n in names if n not in installed_backends()]
    if missing:
        raise BackendUnavailable("; ".join(f"backend {n!r} is not installed: {gconfig.INSTALL_HINT[n]}"
                                           for n in missing))
    skipped = {n: SKIP_REASON for n in names if n in NO_AUTODIFF}
    ordered = [n for n in gconfig.BACKEND_NAMES if n in names and n not in skipped]
    return ordered, skipped


# ------------------------------------------------------------------------------------------------- training


def train_groups(backend_name: str, cfg_dict: dict, out_dir: str, groups: list, report=None) -> dict:
    """Train `groups` (from plan) of one backend and write each run's record atomically as soon as its group
    ends.

    Runs in this process or in a worker process (then cfg_dict, out_dir and groups are plain picklable
    values). report(backend, n_runs_done, label) is called after each group (progress). Returns {"startup_s":
    seconds to import and set up the framework, "groups": [(regime, dtype, arm, wall_s, cpu_s), ...]}.
    Existing run files are kept (never overwritten).
    """
    t0 = time.perf_counter()
    cfg = MoonsConfig.from_dict(cfg_dict)
    backend = get_backend(backend_name)
    module = importlib.import_module(f"gelulab.backends.{backend_name}.moons")
    versions = backend.versions()
    startup = time.perf_counter() - t0
    key = cfg.run_key()
    datasets = {}
    timings = []
    for _, regime, dtype, arm, seeds in groups:
        for s in seeds:
            if s not in datasets:
                datasets[s] = make_data(cfg, s)
        spec = train_spec(cfg, arm, regime, dtype, seeds, datasets)
        w0, c0 = time.perf_counter(), time.process_time()
        out = module.train(spec)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        timings.append((regime, dtype, arm, wall, cpu))
        metrics = evaluate(spec, out, np.stack([datasets[s].y_test for s in seeds]))
        for i, s in enumerate(seeds):
            path = run_path(out_dir, backend_name, regime, dtype, arm, s)
            if path.exists():
                continue
            rec = {
                "backend": backend_name, "regime": regime, "dtype": dtype, "arm": arm, "impl": cfg.impl, "seed": s,
                "metrics": metrics[i],
                "curves": {"train_loss": out.train_loss[i].tolist(), "val_loss": out.val_loss[i].tolist()},
                "recipe": out.recipe,
                "timing": {"group_wall_s": wall, "group_cpu_s": cpu, "group_seeds": len(seeds)},
                "versions": versions, "key": key,
            }
            if s == cfg.plot_seed and dtype == cfg.dtype:
                rec["grid_logits"] = out.logits_grid[i].tolist()
            write_json(path, rec)
        if report is not None:
            report(backend_name, len(seeds), f"{regime}/{dtype}/{arm}")
    return {"startup_s": startup, "groups": timings}


def _queue_report(queue):
    def report(backend, n, label):
        queue.put((backend, n, label))

    return report


def _worker(backend_name, cfg_dict, out_dir, groups, queue):
    """Worker-process entry: train_groups with progress sent through `queue`."""
    return train_groups(backend_name, cfg_dict, out_dir, groups, _queue_report(queue))


def _execute(cfg: MoonsConfig, out_dir, todo, totals: dict, done_counts: dict, jobs: int,
             progress: bool, executor: str = "local", address: str | None = None) -> dict:
    """Train the groups in `todo`: in this process (jobs = 1) or one worker process per backend (jobs > 1);
    with executor "ray", one Ray task per backend (experiments/moons/executors.py), the run files written here
    as each task ends."""
    by_backend = {}
    for g in todo:
        by_backend.setdefault(g[0], []).append(g)
    bars = {b: tqdm(total=totals[b], initial=done_counts[b], desc=f"moons {b:<10}", unit="run", position=i,
                    disable=not progress, leave=True, dynamic_ncols=True)
            for i, b in enumerate(totals)}

    def report(backend, n, label):
        bars[backend].update(n)
        bars[backend].set_postfix_str(label)

    timing = {}
    try:
        if executor != "local":
            from gelulab.experiments.moons import executors, grid_study

            order = list(by_backend)
            tasks = [(cfg.to_dict(), {b: by_backend[b]}, tuple(totals)) for b in order]
            env = {"GELULAB_THREADS": gconfig.threads(), "GELULAB_DEVICE": gconfig.device()}
            for i, result in executors.run_tasks(grid_study.train_cell, tasks, executor, jobs, address, env):
                grid_study.store_files(out_dir, result["files"])
                timing.update(result["timing"])
                report(order[i], sum(len(g[4]) for g in by_backend[order[i]]), "done")
        elif jobs <= 1 or len(by_backend) <= 1:
            for b, groups in by_backend.items():
                timing[b] = train_groups(b, cfg.to_dict(), str(out_dir), groups, report)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            with ctx.Manager() as manager, ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                                                max_tasks_per_child=1) as pool:
                queue = manager.Queue()
                # longest first: torch's eager steps cost the most, then tensorflow, then jax
                order = sorted(by_backend, key=lambda b: {"torch": 0, "tensorflow": 1}.get(b, 2))
                futures = {pool.submit(_worker, b, cfg.to_dict(), str(out_dir), by_backend[b], queue): b
                           for b in order}
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, timeout=0.2)
                    while not queue.empty():
                        report(*queue.get())
                    for f in finished:
                        timing[futures[f]] = f.result()
                while not queue.empty():
                    report(*queue.get())
    finally:
        for bar in bars.values():
            bar.close()
    return timing


# -------------------------------------------------------------------------------------------------- the study


def _collect(cfg: MoonsConfig, out_dir, groups) -> tuple[list, list]:
    """All run records of the plan from disk (grid logits split off into the boundaries list)."""
    runs, boundaries = [], []
    for b, regime, dtype, arm, seeds in groups:
        for s in seeds:
            rec = json.loads(run_path(out_dir, b, regime, dtype, arm, s).read_text())
            grid = rec.pop("grid_logits", None)
            rec.pop("key", None)
            runs.append(rec)
            if grid is not None:
                xs, ys, _ = decision_grid(cfg, make_data(cfg, s))
                boundaries.append({"backend": b, "regime": regime, "arm": arm, "seed": s, "xs": xs.tolist(),
                                   "ys": ys.tolist(),
                                   "logits": np.asarray(grid).reshape(len(ys), len(xs)).tolist()})
    return runs, boundaries


def run_study(config: MoonsConfig, out_dir, backends=None, jobs: int | None = None,
              progress: bool = True, executor: str = "local", address: str | None = None) -> dict:
    """Run (or resume) the moons study and return its results; does not write the report (see write_report).

    config: a MoonsConfig (validated on construction); out_dir: the results folder (runs/ inside it is the
    resumable store); backends: backend names (default: GELULAB_BACKEND, else every installed one), the numpy
    backend is skipped with a message (no autodiff); jobs: worker processes, one backend each (default: the
    number of CPU cores, at most one per backend; 1 trains in this process); progress: tqdm bars per backend;
    executor: "local" (worker processes) or "ray" (one Ray task per backend; address: an existing cluster).

    Returns a dict: config, backends, skipped {name: reason}, environment (core.report.environment), runs (one
    record per (backend, regime, dtype, arm, seed): metrics, per-epoch curves, recipe, timing, versions),
    boundaries (decision-boundary logits of the plot seed), timing per backend, wall_s, and the analysis
    (summary, paired, agreement, defaults, conclusions; see experiments.moons.report.analyse).

    Raises TypeError when config is not a MoonsConfig; ValueError (before any training) for a bad config, an
    unknown backend or a results folder holding runs of other settings; BackendUnavailable for a named backend
    that is not installed.
    """
    if not isinstance(config, MoonsConfig):
        raise TypeError(f"config: expected a MoonsConfig, got {type(config).__name__}")
    names, skipped = check_backends(selected_backends() if backends is None else backends)
    for name, reason in skipped.items():
        print(f"moons: skipping backend {name!r}: {reason}", file=sys.stderr)
    groups = plan(config, names)
    todo = _groups_to_train(config, out_dir, groups)
    totals = {b: sum(len(g[4]) for g in groups if g[0] == b) for b in names}
    done_counts = {b: sum(len(g[4]) for g in groups if g[0] == b and g not in todo) for b in names}
    if jobs is None:
        jobs = min(os.cpu_count() or 1, len(names)) or 1
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r}: expected a positive integer")
    if executor != "local" or address is not None:
        from gelulab.experiments.moons.executors import check_executor

        check_executor(executor, jobs, address)
    t0 = time.perf_counter()
    session = (_execute(config, out_dir, todo, totals, done_counts, jobs, progress, executor, address) if todo
               else {})
    wall = time.perf_counter() - t0
    runs, boundaries = _collect(config, out_dir, groups)
    results = {
        "config": config.to_dict(), "backends": names, "skipped": skipped,
        "environment": environment(()), "runs": runs, "boundaries": boundaries,
        "timing": _timing(runs, names, session), "wall_s": wall, "jobs": jobs,
        "resumed_groups": len(groups) - len(todo),
    }
    # the frameworks may have run in worker processes: their versions come from the run files
    results["environment"]["frameworks"] = {r["backend"]: r["versions"] for r in runs}
    results.update(analyse(config, runs))
    return results


def _timing(runs, names, session) -> dict:
    """Per backend: training seconds summed over its groups (wall and CPU, compile included), from the run
    files,
    and this session's framework start-up time."""
    out = {}
    for b in names:
        groups = {}
        for r in runs:
            if r["backend"] == b:
                groups[(r["regime"], r["dtype"], r["arm"])] = r["timing"]
        out[b] = {
            "train_wall_s": sum(t["group_wall_s"] for t in groups.values()),
            "train_cpu_s": sum(t["group_cpu_s"] for t in groups.values()),
            "groups": len(groups),
            "startup_s": session.get(b, {}).get("startup_s"),
        }
    return out


def write_report(results: dict, out_dir) -> dict:
    """Write report.md, results.json (every run's metrics and curves, the analysis, the environment) and the
    three PNGs into out_dir. Returns {name: Path}."""
    out_dir = Path(out_dir)
    paths = {"report": atomic_write_text(out_dir / "report.md", markdown(results))}
    paths["json"] = write_json(out_dir / "results.json", {k: v for k, v in results.items() if k != "boundaries"})
    paths.update(write_plots(results, out_dir))
    return paths


# ---------------------------------------------------------------------------------------------------- the CLI


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from e


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `gelulab moons` options; every MoonsConfig field has one (defaults: the article's setting)."""
    from gelulab.experiments.moons import grid_cli

    d = MoonsConfig()
    parser.add_argument("--out", default=None, help=f"results folder (default {DEFAULT_OUT}, with --grid "
                        f"{grid_cli.DEFAULT_OUT}); rerunning with the same folder resumes")
    parser.add_argument("--backends", type=_str_list, default=None,
                        help="comma-separated backends (default: GELULAB_BACKEND, else all installed)")
    parser.add_argument("--seeds", type=int, default=len(d.seeds), help=f"number of seeds (default {len(d.seeds)})")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--arms", type=_str_list, default=d.arms, help=f"comma-separated arms, of {list(ARMS)}")
    parser.add_argument("--impl", default=d.impl, help="formula (gelulab's, default) or builtin (the framework's)")
    parser.add_argument("--regime", default="matched", choices=[*REGIMES, "both"],
                        help="matched (shared init/order, one Adam; default), native (framework defaults), both")
    parser.add_argument("--dtype", default=d.dtype, choices=TRAIN_DTYPES, help="dtype of the study")
    parser.add_argument("--compare-dtype", default=d.compare_dtype, choices=[*TRAIN_DTYPES, "none"],
                        help="second dtype for the cross-backend drift table (matched, first --compare-seeds seeds)")
    parser.add_argument("--compare-seeds", type=int, default=d.compare_seeds)
    parser.add_argument("--samples", type=int, default=d.n_samples, help="make_moons n_samples")
    parser.add_argument("--noise", type=float, default=d.noise, help="make_moons noise (std)")
    parser.add_argument("--dataset", default=d.dataset, choices=list(DATASETS),
                        help="the data set drawn (default moons: make_moons; circles: make_circles)")
    parser.add_argument("--val-fraction", type=float, default=d.val_fraction)
    parser.add_argument("--test-fraction", type=float, default=d.test_fraction)
    parser.add_argument("--hidden", type=_int_list, default=d.hidden,
                        help="comma-separated hidden widths; the depth is their count (default 64,64)")
    parser.add_argument("--epochs", type=int, default=d.epochs)
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--beta1", type=float, default=d.beta1)
    parser.add_argument("--beta2", type=float, default=d.beta2)
    parser.add_argument("--eps", type=float, default=d.eps, help="Adam epsilon of the matched regime")
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes (or Ray CPUs), one backend each (default: CPU cores, at most one per "
                             "backend); with --grid one cell each (default: CPU cores)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    grid_cli.add_arguments(parser)


def config_from_args(args) -> MoonsConfig:
    """MoonsConfig from parsed CLI args; raises ValueError naming the field for a bad value."""
    if args.seeds < 1:
        raise ValueError(f"seeds: {args.seeds} seeds requested; expected at least 1")
    return MoonsConfig(
        n_samples=args.samples, noise=args.noise, dataset=args.dataset, val_fraction=args.val_fraction,
        test_fraction=args.test_fraction,
        hidden=args.hidden, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, beta1=args.beta1,
        beta2=args.beta2, eps=args.eps, seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
        arms=args.arms, impl=args.impl, regimes=REGIMES if args.regime == "both" else (args.regime,),
        dtype=args.dtype, compare_dtype=None if args.compare_dtype == "none" else args.compare_dtype,
        compare_seeds=args.compare_seeds,
    )


def run(args) -> int:
    """`gelulab moons`: run or resume the study, write the report; returns the exit code (2: nothing to
    train)."""
    from gelulab.experiments.moons import grid_cli

    if grid_cli.wants_grid(args):
        return grid_cli.run(args, add_arguments)
    out = DEFAULT_OUT if args.out is None else args.out
    cfg = config_from_args(args)
    names, _ = check_backends(selected_backends() if args.backends is None else args.backends)
    if not names:
        print("gelulab moons: no backend with autodiff selected (numpy is skipped); nothing to train",
              file=sys.stderr)
        return 2
    results = run_study(cfg, out, names, jobs=args.jobs, progress=not args.no_progress, executor=args.executor,
                        address=args.address)
    paths = write_report(results, out)
    print(markdown(results, sections=("timing", "summary")))
    print("\n".join(f"wrote {p}" for p in paths.values()))
    return 0
