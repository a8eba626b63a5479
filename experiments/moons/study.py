"""The moons study behind `gelulab moons` (its command line: experiments/moons/command.py): ReLU against every
other catalogue entry on make_moons, in every selected backend, over many seeds.

The study: one arm per catalogue entry (config.ARMS; the baseline first); each seed fixes the data, split, initial
weights and order, shared by every arm and backend (paired comparisons); regimes `matched` (shared numpy init
and order, one Adam formula) and `native` (each framework's defaults). The seeds of one (backend, regime,
dtype, arm) group are trained together in one call of `backends/<name>/moons.py::train`.

Robustness: the results folder is checked before any training (core.plumbing.output.check_writable) and held by one run
at a time (core.plumbing.lock.hold: a second run into it is refused at once, naming the first); every finished
(backend, regime, dtype, arm, seed) run is written atomically, with the sha256 of its record, to
`<out>/runs/<regime>/<dtype>/<backend>/<arm>/seed<k>.json`; a rerun with the same --out skips the groups whose
runs are all on disk and retrains a group with any run missing from its start, so an interrupted study (Ctrl-C:
one line says what was kept) resumes with the same numbers as an uninterrupted one (a group is the unit of work:
its seeds finish together). A results folder holds runs of one configuration: runs made with other settings are
refused before any training. A run file that cannot be used ({}, not JSON, missing fields, a checksum
missing or not matching its contents: edited by hand or damaged) is set aside
(`seed<k>.json.damaged-<n>`, kept) and only its group retrained; runs made with other versions of gelulab, numpy,
scikit-learn or the framework are set aside (`seed<k>.json.stale-<n>`) and retrained, never mixed in.

API for the main job:
    results = run_study(MoonsConfig(seeds=tuple(range(3))), "results/run/moons", ["jax", "torch"])
    text = markdown(results); write_report(results, out_dir) -> report.md, results.json, three PNGs
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gelulab.backends import (
    BACKEND_NAMES,
    BackendUnavailable,
    capabilities,
    get_backend,
    installed_backends,
    reproducible,
    selected_backends,
)
from gelulab.core.plumbing import config as gconfig
from gelulab.core.plumbing.config import threads as env_threads
from gelulab.core.plumbing.interrupts import die_with_parent, dropped_interrupts_sent_again
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import check_writable, set_aside
from gelulab.core.plumbing.provenance import package_versions, version_changes
from gelulab.core.plumbing.report import (
    CHECKSUM_FIELD,
    atomic_write_text,
    environment,
    json_text,
    verify_checksum,
    write_json,
)
from gelulab.experiments.moons.config import (
    MoonsConfig,
    decision_grid,
    evaluate,
    make_data,
    train_spec,
)
from gelulab.experiments.moons.plots import write_plots
from gelulab.experiments.moons.report import analyse, markdown

__all__ = ["MoonsConfig", "markdown", "run_study", "write_report"]

SKIP_REASON = "the {} backend has no autodiff, and training needs gradients: moons skips it"
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


RUN_METRICS = ("train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc")
_RUN_FIELDS = ("backend", "regime", "dtype", "arm", "seed", "metrics", "curves", "recipe", "timing", "versions")


def run_versions(backend_versions: dict) -> dict:
    """The versions part of a run's resume key: gelulab, numpy, scikit-learn (data) and the backend's packages
    (the names of `backend_versions`, e.g. Backend.versions()), each read from the installed package metadata."""
    return package_versions(("numpy", "sklearn", *backend_versions))


def _number(v):
    """A stored number (write_json turns nan/inf into strings) back into a float; None if it is not one."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def _numbers(values, length=None):
    """A list of stored numbers as floats, or None when it is not one (or not of `length`)."""
    if not isinstance(values, list) or (length is not None and len(values) != length):
        return None
    out = [_number(v) for v in values]
    return None if any(v is None for v in out) else out


def read_run(path, cfg: MoonsConfig, ident: tuple) -> tuple[dict | None, str, str]:
    """Read one run file: (record, kind, problem). kind is "ok" (record usable: numbers as floats, nan/inf
    restored), "settings" (made with other settings; problem names the fields), "damaged" (not JSON, not a
    record, a field missing or malformed, another run's record, a checksum missing or not matching the record
    (core.plumbing.report.verify_checksum); problem says which) or "stale" (made with other
    versions; problem names them, record returned). ident: (backend, regime, dtype, arm, seed) of the path."""
    if not Path(path).is_file():  # a FIFO, a device or a folder in a run file's place: never read (a FIFO blocks)
        return None, "damaged", "is not a regular file"
    try:
        rec = json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        return None, "damaged", f"not JSON ({type(e).__name__}: {str(e)[:80]})"
    if not isinstance(rec, dict):
        return None, "damaged", f"holds a JSON {type(rec).__name__}, not a run record"
    if not isinstance(rec.get("key"), dict):
        return None, "damaged", "has no settings key"
    key = _normalised(cfg.run_key())
    diff = sorted(k for k in set(key) | set(rec["key"]) if key.get(k) != rec["key"].get(k))
    if diff:
        return None, "settings", ", ".join(f"{k}: stored {rec['key'].get(k)!r}, now {key.get(k)!r}" for k in diff)
    missing = [k for k in _RUN_FIELDS if k not in rec]
    if missing:
        return None, "damaged", f"lacks {', '.join(missing)}"
    if tuple(rec[k] for k in ("backend", "regime", "dtype", "arm", "seed")) != tuple(ident):
        return None, "damaged", f"holds the run {[rec[k] for k in ('backend', 'regime', 'dtype', 'arm', 'seed')]}"
    metrics = rec["metrics"] if isinstance(rec["metrics"], dict) else {}
    values = {m: _number(metrics.get(m)) for m in RUN_METRICS}
    bad = [m for m, v in values.items() if v is None]
    if bad:
        return None, "damaged", f"metrics {', '.join(bad)} missing or not numbers"
    curves = rec["curves"] if isinstance(rec["curves"], dict) else {}
    parsed = {c: _numbers(curves.get(c), cfg.epochs) for c in ("train_loss", "val_loss")}
    if any(v is None for v in parsed.values()):
        return None, "damaged", f"curves are not {cfg.epochs} numbers per loss"
    timing = rec["timing"] if isinstance(rec["timing"], dict) else {}
    if any(_number(timing.get(t)) is None for t in ("group_wall_s", "group_cpu_s")):
        return None, "damaged", "timing missing"
    if not isinstance(rec["versions"], dict) or not isinstance(rec["recipe"], str):
        return None, "damaged", "versions or recipe malformed"
    bad_sum = verify_checksum(rec)
    if bad_sum is not None:
        return None, "damaged", bad_sum
    rec = {**rec, "metrics": values, "curves": parsed}
    if "grid_logits" in rec:  # the decision-boundary plot's seed only
        grid = _numbers(rec["grid_logits"], cfg.grid_size ** 2)
        if grid is None:
            return None, "damaged", f"grid_logits are not {cfg.grid_size ** 2} numbers"
        rec["grid_logits"] = grid
    stored = rec.get("key_versions")
    if not isinstance(stored, dict):  # a run file of a gelulab that did not record versions
        return rec, "stale", "no version record"
    changes = version_changes(stored, package_versions([n for n in stored if n != "gelulab"]))
    return rec, ("stale" if changes else "ok"), ", ".join(changes)


def _groups_to_train(cfg: MoonsConfig, out_dir, groups) -> list:
    """The groups with a run missing on disk. Before any training: raises ValueError naming the fields when a
    stored run was made with other settings (nothing is moved then); sets aside (core.plumbing.output.set_aside) each
    damaged run file and the runs made with other versions, one line each on stderr, and counts their groups as
    missing."""
    todo, damaged, stale = [], [], []
    for g in groups:
        b, regime, dtype, arm, seeds = g
        missing = False
        for s in seeds:
            p = run_path(out_dir, b, regime, dtype, arm, s)
            if not p.exists():
                missing = True
                continue
            _, kind, problem = read_run(p, cfg, (b, regime, dtype, arm, s))
            if kind == "settings":
                raise ValueError(f"results folder {out_dir} holds runs made with other settings ({problem}; in "
                                 f"{p}); use another --out or delete the folder")
            if kind in ("damaged", "stale"):
                (damaged if kind == "damaged" else stale).append((p, problem))
                missing = True
        if missing:
            todo.append(g)
    for p, problem in damaged:
        moved = set_aside(p, "damaged")
        print(f"moons: {p} is damaged ({problem}); kept as {moved.name}, its group is retrained", file=sys.stderr)
    for p, _ in stale:
        set_aside(p, "stale")
    if stale:
        print(f"moons: {len(stale)} stored runs were made with other versions ({stale[0][1]}); kept as "
              f"seed<k>.json.stale-<n> and retrained, not mixed in", file=sys.stderr)
    return todo


def stored_summary(cfg: MoonsConfig, out_dir, backends) -> str:
    """"N of M runs are stored in <out>/runs" for the plan of (cfg, backends) (what an interrupt kept)."""
    groups = plan(cfg, backends)
    total = sum(len(g[4]) for g in groups)
    done = sum(run_path(out_dir, b, r, d, a, s).exists() for b, r, d, a, seeds in groups for s in seeds)
    return f"{done} of {total} moons runs are stored in {Path(out_dir) / 'runs'}"


def check_backends(backends) -> tuple[list[str], dict]:
    """(backends to train, {skipped: reason}): a backend whose capability record has no autodiff is skipped.
    Unknown names raise ValueError naming the valid ones; a named but missing framework raises
    BackendUnavailable with the install command. Canonical order (torch before tensorflow, as Keras imports
    them)."""
    names = list(dict.fromkeys(backends))
    records = {n: capabilities(n) for n in names}  # ValueError for an unknown name
    installed = installed_backends()
    missing = [n for n in names if n not in installed]
    if missing:
        raise BackendUnavailable("; ".join(f"backend {n!r} is not installed: {records[n].install_hint}"
                                           for n in missing))
    skipped = {n: SKIP_REASON.format(n) for n in names if not records[n].autodiff}
    ordered = [n for n in BACKEND_NAMES if n in names and n not in skipped]
    return ordered, skipped


# ------------------------------------------------------------------------------------------------- training


def train_groups(backend_name: str, cfg_dict: dict, out_dir: str | None, groups: list, report=None,
                 files: dict | None = None) -> dict:
    """Train `groups` (from plan) of one backend and write each run's record atomically as soon as its group
    ends (core.plumbing.report.write_json with its checksum, which read_run verifies on resume). files: a dict instead
    of out_dir (then None): each record's JSON text is put there under its path relative to the results folder
    ("runs/<regime>/<dtype>/<backend>/<arm>/seed<k>.json") and nothing is written (a grid cell's worker: no
    temporary folder to leave behind).

    Runs in this process or in a worker process (then cfg_dict, out_dir and groups are plain picklable
    values). report(backend, n_runs_done, label) is called after each group (progress). Returns {"startup_s":
    seconds to import and set up the framework, "groups": [(regime, dtype, arm, wall_s, cpu_s), ...]}.
    Existing run files are kept (never overwritten). Calls gelulab.reproducible(threads=GELULAB_THREADS) first,
    in this process (a worker process starts with the frameworks' defaults).
    """
    t0 = time.perf_counter()
    reproducible(threads=env_threads())
    cfg = MoonsConfig.from_dict(cfg_dict)
    backend = get_backend(backend_name)
    module = importlib.import_module(f"gelulab.backends.{backend_name}.moons")
    versions = backend.versions()
    key_versions = run_versions(versions)
    runtime = runtime_record(backend)
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
            path = run_path("" if files is not None else out_dir, backend_name, regime, dtype, arm, s)
            if files is None and path.exists():
                continue
            rec = {
                "backend": backend_name, "regime": regime, "dtype": dtype, "arm": arm, "impl": cfg.impl, "seed": s,
                "metrics": metrics[i],
                "curves": {"train_loss": out.train_loss[i].tolist(), "val_loss": out.val_loss[i].tolist()},
                "recipe": out.recipe,
                "timing": {"group_wall_s": wall, "group_cpu_s": cpu, "group_seeds": len(seeds)},
                "versions": versions, "key": key, "key_versions": key_versions, "runtime": runtime,
            }
            if s == cfg.plot_seed and dtype == cfg.dtype:
                rec["grid_logits"] = out.logits_grid[i].tolist()
            if files is not None:
                files[path.as_posix()] = json_text(rec, checksum=True)
            else:
                write_json(path, rec, checksum=True)
        if report is not None:
            report(backend_name, len(seeds), f"{regime}/{dtype}/{arm}")
    return {"startup_s": startup, "groups": timings}


def runtime_record(backend) -> dict:
    """What the process that trains runs with: {"threads_in_effect": the backend module's threads() (the counts
    in force after gelulab.reproducible, e.g. {"intra_op": 1, "inter_op": 1}), "cpu_dispatch": Backend.cpu_dispatch()
    (e.g. "avx512" for torch, "x86_v4" for XLA; None off the CPU or where it cannot be told)}. Stored in every run
    record (the training may run in a worker process, whose settings the main process cannot see)."""
    threads = getattr(backend.module, "threads", None)
    return {"threads_in_effect": threads() if threads is not None else None, "cpu_dispatch": backend.cpu_dispatch()}


def runtime_environment(runs) -> dict:
    """{"threads_in_effect": {backend: counts}, "cpu_dispatch": {backend: level}} from the run records' "runtime"
    (runtime_record); a backend whose records do not say (runs stored by an earlier gelulab, or a level that
    cannot be told) is left out, and a key that would be empty is left out."""
    out = {"threads_in_effect": {}, "cpu_dispatch": {}}
    for r in runs:
        rt = r.get("runtime")
        if not isinstance(rt, dict):
            continue
        for key, known in out.items():
            if rt.get(key) not in (None, {}, ""):
                known.setdefault(r["backend"], rt[key])
    return {k: v for k, v in out.items() if v}


def _queue_report(queue):
    def report(backend, n, label):
        queue.put((backend, n, label))

    return report


def _worker(backend_name, cfg_dict, out_dir, groups, queue):
    """Worker-process entry: train_groups with progress sent through `queue`. Ctrl-C reaches the workers too:
    each returns None quietly (its finished groups are on disk) and the main process reports the interrupt."""
    try:
        with dropped_interrupts_sent_again():
            return train_groups(backend_name, cfg_dict, out_dir, groups, _queue_report(queue))
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C (terminal and main process) is moot
        return None


@contextlib.contextmanager
def _interrupts_reach_workers():
    """While training in worker processes: SIGINT or SIGTERM to the main process is passed on to the workers as
    SIGINT (each stops after its current group; its finished groups are on disk) before KeyboardInterrupt is
    raised here, so `kill -INT <pid>` stops the study as promptly as Ctrl-C in a terminal, which signals all."""
    import multiprocessing as mp

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum, frame):
        for child in mp.active_children():
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGINT)
        if callable(previous[signum]):
            previous[signum](signum, frame)  # Python's Ctrl-C handler, or the command line's SIGTERM handler
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    previous.update({s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)})
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


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
            from multiprocessing.managers import SyncManager

            ctx = mp.get_context("spawn")
            # its server process and the workers end with this one, even by SIGKILL; a loopback TCP address
            # (authenticated by the process's authkey), not a Unix socket in a pymp-* temporary folder, so a
            # killed server leaves no folder behind
            manager = SyncManager(address=("127.0.0.1", 0), ctx=ctx)
            manager.start(die_with_parent, (os.getpid(),))
            with manager, ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, max_tasks_per_child=1,
                                              initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
                queue = manager.Queue()
                # the registry's order; each worker is a process of its own, so the order only decides which
                # backends wait for a free worker when --jobs is below their number
                order = [b for b in BACKEND_NAMES if b in by_backend]
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
            path = run_path(out_dir, b, regime, dtype, arm, s)
            rec, kind, problem = read_run(path, cfg, (b, regime, dtype, arm, s))
            if kind != "ok":
                raise ValueError(f"{path}: {kind} after training ({problem}); rerun the same command")
            grid = rec.pop("grid_logits", None)
            rec.pop("key", None)
            rec.pop("key_versions", None)
            rec.pop(CHECKSUM_FIELD, None)
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

    Returns a dict: config, backends, skipped {name: reason}, environment (core.plumbing.report.environment), runs (one
    record per (backend, regime, dtype, arm, seed): metrics, per-epoch curves, recipe, timing, versions),
    boundaries (decision-boundary logits of the plot seed), timing per backend, wall_s, and the analysis
    (summary, paired, agreement, defaults, conclusions; see experiments.moons.report.analyse).

    Settings: the study runs under gelulab.reproducible(threads=GELULAB_THREADS, default 1), called here and in
    each worker process (float64 in JAX needs x64; one thread per framework).

    Raises TypeError when config is not a MoonsConfig; ValueError (before any training) for a bad config, an
    unknown backend, an unwritable out_dir (core.plumbing.output.OutputUnwritable) or a results folder holding runs of
    other settings; BackendUnavailable for a named backend that is not installed; KeyboardInterrupt on Ctrl-C,
    with every finished group on disk. Damaged run files and runs of other versions are set aside and retrained
    (see the module docstring).
    """
    if not isinstance(config, MoonsConfig):
        raise TypeError(f"config: expected a MoonsConfig, got {type(config).__name__}")
    reproducible(threads=env_threads())
    names, skipped = check_backends(selected_backends() if backends is None else backends)
    for name, reason in skipped.items():
        print(f"moons: skipping backend {name!r}: {reason}", file=sys.stderr)
    check_writable(out_dir)
    with hold(out_dir):
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
        with _interrupts_reach_workers() if jobs > 1 else contextlib.nullcontext():
            session = (_execute(config, out_dir, todo, totals, done_counts, jobs, progress, executor, address)
                       if todo else {})
        if any(v is None for v in session.values()):
            raise KeyboardInterrupt("a worker process was interrupted")  # its finished runs are on disk
        wall = time.perf_counter() - t0
        runs, boundaries = _collect(config, out_dir, groups)
        results = {
            "config": config.to_dict(), "backends": names, "skipped": skipped,
            "environment": environment(()), "runs": runs, "boundaries": boundaries,
            "timing": _timing(runs, names, session), "wall_s": wall, "jobs": jobs,
            "resumed_groups": len(groups) - len(todo),
        }
        # the frameworks may have run in worker processes: their versions, thread counts and CPU dispatch level
        # come from the run files (this process has not started them; an unknown one is left out, never empty)
        env = results["environment"]
        env["frameworks"] = {r["backend"]: r["versions"] for r in runs}
        env.pop("threads_in_effect", None)
        env.pop("cpu_dispatch", None)
        env.update(runtime_environment(runs))
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
