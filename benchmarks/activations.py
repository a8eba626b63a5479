"""`gelulab bench` / `python -m benchmarks.activations`: activation speed per backend against the copy bandwidth.

Times every activation of the catalogue (core.activations) in every selected backend over the grid of
benchmarks/grid.py (impl × direction × size × dtype × mode × device), with the shared timer of
benchmarks/timer.py and the framework hooks of backends/<name>/bench.py, and reports each cell as elements/s,
effective GB/s and % of the copy bandwidth measured in the same run (benchmarks/bandwidth.py), plus the
GELU ÷ ReLU, formula ÷ builtin and kernel ÷ builtin ratios (benchmarks/analysis.py).

Usage:
  python -m benchmarks.activations [filters] [--quick] [--out DIR]       (also: gelulab bench ...)
  gelulab bench compare A.json B.json          B ÷ A per cell (filters go before `compare`)
  gelulab bench --model [--quick]              real models: BertModel, Keras and Flax MLPs (benchmarks/model.py)
  filters: --backend --device --mode --activation --impl --direction --dtype --size, each repeatable or
  comma-separated (e.g. --size 1e6,1e7 --dtype float32); GELULAB_BACKEND selects backends when --backend is absent,
  GELULAB_DEVICE the device when --device is absent.

Outputs (default results/bench/): bench.json (environment: CPU, cores, threads and versions; every cell;
ratios), bench.md (tables), throughput_<backend>_<dtype>.png (log-log throughput vs size with the bandwidth line).
While a run is under way (after each backend) and when it is interrupted, its results so far go to
bench.partial.json and bench.partial.md ("partial": true): the last complete bench.json is replaced only when the
new run completes (atomically), which then removes the partial files. One run at a time holds --out
(core.plumbing.lock).

Settings: `gelulab.reproducible(threads=GELULAB_THREADS or --threads, default 1)` is called before any backend
loads (thread counts, JAX x64, no TF32), and the thread counts actually in effect are recorded per backend.
OPENBLAS_CORETYPE is left as the environment sets it (it is recorded); to benchmark without it, unset it on the
command line of that one run:
`env -u OPENBLAS_CORETYPE python -m benchmarks.activations`.

Default grid on a CPU: one cell per backend × activation × impl (builtin, formula, and kernel where the entry has
one) × direction × size (1e3..1e7) × dtype (float32, bfloat16) × mode (eager, and compiled where the backend's
record has it); docs/commands.md gives the cell counts of today's catalogue and backends and the times on the 2-core
reference machine. --quick narrows each axis not filtered to benchmarks/grid.py QUICK (the headline activations,
float32, one size) and keeps the training step, about a minute; --full adds float16 and float64 (twice the default
grid's cells); --device gpu on a machine with a GPU (sizes to 1e8).

Reading the figures: an activation allocates its output on every call; glibc malloc serves blocks over its mmap
threshold (at most 32 MiB) with fresh pages from the kernel, so at n = 1e7 float32 and above every call also pays
the page faults of its output. Measured here (torch, float32, n = 1e7): F.relu 21 ms, torch.clamp_min(out=...)
into a preallocated buffer 5.7 ms; with MALLOC_MMAP_THRESHOLD_=4294967296 in the environment F.relu took 6.1 ms.
The default run keeps the default allocator (what users get); "% copy same size" compares with a copy into a
preallocated array, so the gap at 1e7 is mostly this cost.

Training step (benchmarks/trainstep.py): after each backend's activation cells, one moons
MLP training step (2 -> 64 -> 64 -> 1, batch 32, Adam) per mode × relu / gelu_none × impl × dtype (float32,
float64 where the dtype filter selects them), timed side by side; rows in bench.json's "train_step", the
GELU ÷ ReLU ratios in ratios["train_step_gelu_over_relu"], a table in bench.md. On by default (--quick: formula
impl only); --no-train-step skips it, --train-step-only runs it without the activation cells.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from itertools import groupby
from pathlib import Path

from tqdm import tqdm

from gelulab.backends import BACKEND_NAMES
from gelulab.benchmarks import analysis, plots, report, trainstep
from gelulab.benchmarks.analysis import GOOD
from gelulab.benchmarks.bandwidth import copy_bandwidth, copy_curve, framework_copy
from gelulab.benchmarks.grid import AXES, GridSpec, spec_from_filters
from gelulab.benchmarks.runner import hooks, input_array, run_group, sync_overhead
from gelulab.benchmarks.timer import QUICK, TimerConfig
from gelulab.core.numerics.dtypes import get_dtype
from gelulab.core.plumbing import config
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.core.plumbing.provenance import command_line
from gelulab.core.plumbing.report import atomic_write_text, environment, write_json

SCHEMA = "gelulab.bench/1"
FILTERS = ("backend", "device", "mode", "activation", "impl", "direction", "dtype", "size")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the grid filters and options to `parser`, and the `compare A.json B.json` subcommand."""
    for axis in FILTERS:
        parser.add_argument(f"--{axis}", action="append", metavar="V[,V...]",
                            help=f"only these {axis} values (repeatable or comma-separated)")
    parser.add_argument("--full", action="store_true",
                        help="the whole grid: all four dtypes (default: float32 and bfloat16)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke-test grid: relu and exact GELU, float32, n=1e4, short timing (about a minute "
                             "on 2 cores: 64.5 s wall, 56 s of it timing; the default grid takes over 7 min); "
                             "with --model: small models and short timing, no torch.compile rows")
    parser.add_argument("--model", action="store_true",
                        help="gelulab in real models instead of the grid (benchmarks/model.py): a transformers "
                             "BertModel, a Keras and a Flax MLP, forward and training step, eager and compiled, "
                             "builtin vs kernel vs formula side by side, and the torch layer's first calls; "
                             "writes model.json and model.md to --out (--backend, --impl, --mode, --threads, "
                             "--seed, --min-run-s apply)")
    parser.add_argument("--subject", action="append", metavar="V[,V...]",
                        help="with --model only: which parts run (default all): bert, bert-tanh, block, mlp, "
                             "overhead, exit, first-call (benchmarks/model.py)")
    parser.add_argument("--out", default="results/bench", help="output folder (default results/bench)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads per framework (gelulab.reproducible(threads=N) before the backends load; default "
                             "GELULAB_THREADS, else 1)")
    parser.add_argument("--copy-mib", type=int, default=None,
                        help="MiB of each array of the copy-bandwidth measurement (default 1024; --quick 64)")
    parser.add_argument("--min-run-s", type=float, default=None,
                        help="least seconds of timed blocks per cell (default 0.1; --quick 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the input draws (default 0)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--no-train-step", action="store_true",
                       help="skip the moons training-step benchmark (benchmarks/trainstep.py)")
    steps.add_argument("--train-step-only", action="store_true",
                       help="run only the moons training-step benchmark, no activation cells")
    sub = parser.add_subparsers(dest="bench_command", metavar="compare", title="optional subcommand",
                                help="without it, bench runs the benchmark")
    cmp = sub.add_parser("compare", help="B ÷ A of the median time per call, cell by cell, for tracking a change",
                         argument_default=argparse.SUPPRESS, formatter_class=parser.formatter_class,
                         description="B ÷ A of the median time per call, cell by cell, of two bench results\n"
                                     "(bench's filters select the cells). Writes nothing: prints a table.\n"
                                     "Exit codes: 0 done; 1 no cell in both files; 2 a file that is not a\n"
                                     "bench result or has no sound cell, one line.")
    cmp.add_argument("a", metavar="A.json", help="bench.json of the baseline run")
    cmp.add_argument("b", metavar="B.json", help="bench.json of the run to compare")


def _spec(args, installed=BACKEND_NAMES) -> GridSpec:
    return spec_from_filters(backends=args.backend, devices=args.device, modes=args.mode,
                             activations=args.activation, impls=args.impl, directions=args.direction,
                             dtypes=args.dtype, sizes=args.size, quick=args.quick, full=args.full,
                             installed=installed)


def _positive(name: str, value, kind=float):
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                  and math.isfinite(value) and value > 0):
        raise ValueError(f"--{name}={value!r}; expected a positive {'finite number' if kind is float else 'integer'}")
    return value


SEED_MAX = 2**32 - 1  # numpy's default_rng takes any non-negative integer; a 32-bit seed is what every run records


def check_options(args) -> None:
    """Check the numeric options of a run before anything is loaded or timed: --seed an integer in 0..2**32-1,
    --threads and --copy-mib positive integers, --min-run-s a positive finite number of seconds. Raises
    ValueError naming the option and value (one line; exit code 2 on the command line)."""
    seed = getattr(args, "seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
        raise ValueError(f"--seed={seed!r}; expected an integer from 0 to {SEED_MAX}")
    _positive("threads", getattr(args, "threads", None), int)
    _positive("copy-mib", getattr(args, "copy_mib", None), int)
    _positive("min-run-s", getattr(args, "min_run_s", None))


def timer_config(args) -> TimerConfig:
    """The TimerConfig of a run: QUICK for --quick, the default otherwise; --min-run-s overrides min_run_s."""
    base = QUICK if args.quick else TimerConfig()
    if args.min_run_s is None:
        return base
    return TimerConfig(**{**base.__dict__, "min_run_s": _positive("min-run-s", args.min_run_s)})


def new_grid_info() -> dict:
    """The empty record run_grid fills: backends used, backends skipped, threads, sync overheads, device copies."""
    return {"backends": [], "skipped": [], "threads_in_effect": {}, "sync_overhead_s": {}, "device_copy": {}}


def run_grid(spec: GridSpec, timer: TimerConfig, rows: list, info: dict | None = None, *, seed: int = 0,
             progress: bool = True, copy_bytes: int = 1 << 30, train_rows: list | None = None,
             activations: bool = True, train_impls: tuple | None = None, checkpoint=None) -> dict:
    """Run every cell of `spec`, appending each result row to `rows` and each fact to `info` (new_grid_info())
    as soon as it is known, so a caller keeps them if the run is interrupted. Returns `info`. checkpoint: called
    with no argument after each backend's cells (the command writes the results so far there).

    train_rows: when a list, each backend's training-step rows (benchmarks.trainstep) are appended to it after
    its activation cells (train_impls: its impls, default spec.impls); activations=False skips the activation
    cells (training step only).

    Devices run one after another, backends in canonical order (torch before tensorflow). A backend that is not
    installed or lacks the device is skipped with its reason (info["skipped"]), never fatal. On a GPU or TPU the
    backend's own device copy is measured first (`copy_bytes` per array, then at each size) as its reference:
    info["device_copy"]["<backend>/<device>"] = {"gbps", "nbytes", "curve"}.
    """
    from gelulab.backends import BackendUnavailable, get_backend

    info = new_grid_info() if info is None else info
    for device in spec.devices:
        for name in spec.backends:
            try:
                backend = get_backend(name, device)
                bench = hooks(name)
            except (BackendUnavailable, RuntimeError, ImportError) as e:
                info["skipped"].append({"backend": name, "device": device, "reason": str(e).splitlines()[0]})
                print(f"gelulab bench: skipping {name} on {device}: {info['skipped'][-1]['reason']}",
                      file=sys.stderr)
                continue
            # setup is idempotent; calling it again re-selects this device if another device of the same
            # framework ran since the backend was loaded (the frameworks keep the device in module state)
            backend.module.setup(device)
            info["backends"].append(backend)
            tag = f"{name}/{device}"
            info["threads_in_effect"][tag] = bench.threads()
            if device != "cpu":
                big = framework_copy(bench, backend, [copy_bytes], timer)
                info["device_copy"][tag] = {"gbps": big[copy_bytes], "nbytes": copy_bytes,
                                            "curve": framework_copy(bench, backend, _nbytes(spec, device), timer)}
            cells = tqdm(spec.cells(name, device, backend.modes) if activations else [],
                         desc=f"{name:>10} {device}", disable=not progress, leave=False, file=sys.stderr)
            _run_cells(backend, bench, cells, timer, rows, info, seed)
            if train_rows is not None:
                steps = trainstep.cells(spec, name, device, backend.modes, train_impls)
                groups = [list(g) for _, g in groupby(steps, key=lambda c: (c["dtype"], c["mode"]))]
                for group in tqdm(groups,
                                  desc=f"{name:>10} {device} train step", disable=not progress or not steps,
                                  leave=False, file=sys.stderr):
                    train_rows += trainstep.run(backend, bench, group, timer, seed)
            if checkpoint is not None:
                checkpoint()
    return info


def _run_cells(backend, bench, cells, timer: TimerConfig, rows: list, info: dict, seed: int) -> None:
    """Time `cells` of one backend (in grid order) group by group: the cells sharing dtype, size, mode and
    direction are timed side by side (runner.run_group) on one input created on the device before them."""
    tag = f"{backend.name}/{backend.device}"
    inputs: dict = {}
    for _, group in groupby(cells, key=lambda c: (c.dtype, c.size, c.mode, c.direction)):
        group = list(group)
        key = (group[0].dtype, group[0].size)
        if key not in inputs:
            inputs.clear()  # one input alive at a time (1e8 float64 is 800 MB)
            try:
                inputs[key] = bench.device_input(backend, input_array(*key, seed)), None
            except Exception as e:  # noqa: BLE001 - a dtype the device lacks: its cells record why
                inputs[key] = None, f"input: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        x, x_error = inputs[key]
        if x is None:
            rows += [{**c.as_dict(), "status": "error", "error": x_error} for c in group]
            continue
        if tag not in info["sync_overhead_s"]:
            info["sync_overhead_s"][tag] = sync_overhead(bench, x, timer)
        rows += run_group(backend, bench, group, x, timer)


def _nbytes(spec: GridSpec, device: str) -> set[int]:
    """Bytes of one input array for every (size, dtype) of the grid on `device`."""
    return {s * get_dtype(d).np_dtype.itemsize for s in spec.sizes_for(device) for d in spec.dtypes}


def build_result(rows: list, spec: GridSpec, timer: TimerConfig, grid_info: dict, bw_start: dict, bw_end: dict,
                 curve: dict, elapsed_s: float, argv: list, train_rows: list = ()) -> dict:
    """The JSON-ready result: schema, command, environment, grid, timer, copy bandwidth, cells with throughput,
    GELU ÷ ReLU and formula ÷ builtin ratios, the training-step rows ("train_step", seconds per step) and their
    GELU ÷ ReLU ratios. The host copy bandwidth used is the best of the start and end
    figures; cells on a GPU or TPU use their framework's device copy (grid_info["device_copy"])."""
    best = max(bw_start["gbps"], bw_end["gbps"])
    analysis.add_throughput(rows, {"gbps": best, "curve": curve}, grid_info["device_copy"])
    return {
        "schema": SCHEMA,
        "command": argv,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "elapsed_s": elapsed_s,
        "environment": environment(grid_info["backends"]),
        "threads_in_effect": grid_info["threads_in_effect"],
        "sync_overhead_s": grid_info["sync_overhead_s"],
        "grid": {k: list(v) if v is not None else None for k, v in spec.__dict__.items()},
        "timer": dict(timer.__dict__),
        "copy_bandwidth": {"gbps": best, "start_gbps": bw_start["gbps"], "end_gbps": bw_end["gbps"],
                           "nbytes": bw_start["nbytes"], "repeats": bw_start["repeats"],
                           "start": bw_start, "end": bw_end},
        "copy_curve_gbps": curve,
        "device_copy": grid_info["device_copy"],
        "cells": rows,
        "ratios": {"gelu_over_relu": analysis.gelu_over_relu(rows),
                   "formula_over_builtin": analysis.formula_over_builtin(rows),
                   "kernel_over_builtin": analysis.kernel_over_builtin(rows),
                   "train_step_gelu_over_relu": analysis.gelu_over_relu(list(train_rows))},
        "train_step": list(train_rows),
        "skipped": grid_info["skipped"],
    }


PARTIAL = "bench.partial"  # the results of a run not (yet) complete: bench.partial.json and .md


def write_outputs(result: dict, out: Path, with_plots: bool = True) -> list[Path]:
    """Write the result and return the paths written. A complete result (result["partial"] false): out/bench.json
    and out/bench.md, each replaced atomically, and the PNG plots (with_plots); then the partial files of this
    run are removed. A partial one (the checkpoint after each backend, an interrupted run): out/bench.partial.json
    and bench.partial.md only, so the last complete bench.json stays as it was until the new one is complete."""
    if result.get("partial"):
        return [write_json(out / f"{PARTIAL}.json", result),
                atomic_write_text(out / f"{PARTIAL}.md", report.markdown(result))]
    paths = [write_json(out / "bench.json", result), atomic_write_text(out / "bench.md", report.markdown(result))]
    if with_plots:
        paths += plots.all_plots(result, out)
    for suffix in (".json", ".md"):
        (out / f"{PARTIAL}{suffix}").unlink(missing_ok=True)
    return paths


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_on_sigterm():
    """Make SIGTERM stop the grid like Ctrl-C (the cells measured so far are written); returns the previous
    handler, or None when not in the main thread (where Python allows no handler)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)


def run(args) -> int:
    """`gelulab bench`: `compare`, or the benchmark of _run with --out checked writable and held by this run alone
    (core.plumbing.lock.hold: another run into it is refused at once, naming it) until its results are written."""
    if getattr(args, "bench_command", None) == "compare":
        return compare_command(args)
    check_options(args)
    if getattr(args, "subject", None) and not getattr(args, "model", False):
        raise ValueError("--subject applies to --model only")
    if getattr(args, "model", False):
        from gelulab.benchmarks import model

        return model.run(args)
    with hold(check_writable(args.out)):
        return _run(args)


def _run(args) -> int:
    """Run the benchmark (or `compare`) for parsed `args`; returns the exit code (0: at least one cell timed).
    Raises ValueError for a bad filter or option, or an unwritable --out, before anything is timed;
    core.plumbing.output.Interrupted on Ctrl-C or SIGTERM, after writing the cells measured (bench.partial.json, marked
    partial; the last complete bench.json is kept). The results so far are also written there after each backend,
    so a crash keeps them; bench.json is replaced only by a complete result."""
    if getattr(args, "bench_command", None) == "compare":
        return compare_command(args)
    check_options(args)
    if args.threads is not None:
        os.environ["GELULAB_THREADS"] = str(args.threads)  # recorded in the environment of the report
    from gelulab.backends import installed_backends, reproducible

    reproducible(threads=config.threads())  # before any backend loads: thread counts, x64, no TF32

    spec = _spec(args, installed_backends())
    timer = timer_config(args)
    copy_bytes = (_positive("copy-mib", args.copy_mib, int) or (64 if args.quick else 1024)) * 2**20
    out = check_writable(args.out)
    start, load_start = time.perf_counter(), os.getloadavg()
    bw_start = copy_bandwidth(copy_bytes)
    curve = copy_curve(_nbytes(spec, "cpu") if "cpu" in spec.devices and not args.train_step_only else (), timer)
    rows: list = []
    train_rows: list = []
    grid_info = new_grid_info()

    def result_so_far(bw_end, interrupted, partial):
        result = build_result(rows, spec, timer, grid_info, bw_start, bw_end, curve, time.perf_counter() - start,
                              shlex.split(command_line()), train_rows)
        result.update(interrupted=interrupted, partial=partial,
                      load_average={"start": load_start, "end": os.getloadavg()})  # 1, 5, 15 min: other work
        return result

    def checkpoint():  # after each backend: what is measured so far is on disk, whatever happens next
        write_outputs(result_so_far(bw_start, False, True), out, with_plots=False)

    interrupted = False
    previous = _stop_on_sigterm()
    try:
        run_grid(spec, timer, rows, grid_info, seed=args.seed, copy_bytes=copy_bytes,
                 train_rows=None if args.no_train_step else train_rows, activations=not args.train_step_only,
                 train_impls=trainstep.QUICK_IMPLS if args.quick and not args.impl else None, checkpoint=checkpoint)
    except KeyboardInterrupt as e:
        # no line here: the Interrupted raised once the cells are written is the command's one line
        interrupted = signal.SIGTERM if e.args == (f"signal {signal.SIGTERM}",) else signal.SIGINT
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    ok = sum(r["status"] == "ok" for r in rows + train_rows)
    result = result_so_far(bw_start if interrupted else copy_bandwidth(copy_bytes), bool(interrupted),
                           bool(interrupted) or not ok)
    if not ok and not interrupted:
        result["no_cell_timed"] = True  # never promoted to bench.json: the last complete result stays
    paths = write_outputs(result, out, with_plots=not args.no_plots and not interrupted)
    if interrupted:
        raise Interrupted(f"interrupted; the {len(rows) + len(train_rows)} cells measured are in {paths[0]} "
                          "(marked partial); bench does not resume: the same command measures every cell again, "
                          "so that all cells of one result share the machine's state", signum=int(interrupted))
    if not ok:
        errors = [r.get("error") for r in rows + train_rows if r.get("error")]
        why = f" (first error: {errors[0]})" if errors else ""
        kept = " kept as it was" if (out / "bench.json").exists() else " not written"
        print(f"gelulab bench: none of the {len(rows) + len(train_rows)} cells timed cleanly{why}; the result is in "
              f"{paths[0]} (marked partial), bench.json{kept}", file=sys.stderr)
        return 1
    dtype, sizes = report.focus(result)
    for size in sizes:
        print(report.ratio_tables(result, dtype, size))
    if train_rows:
        print(report.train_step_table(result))
    print(f"{ok}/{len(rows) + len(train_rows)} cells timed cleanly in {result['elapsed_s']:.0f} s; copy bandwidth "
          f"{result['copy_bandwidth']['gbps']:.3g} GB/s; wrote {', '.join(str(p) for p in paths[:2])} and "
          f"{len(paths) - 2} plot{'' if len(paths) == 3 else 's'}")
    return 0 if ok else 1


def load_result(path: str) -> dict:
    """A bench.json (or bench.partial.json) as a dict; raises ValueError when the file is missing, not JSON or not
    a gelulab bench result."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read benchmark result {path!r}: {e}") from e
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("cells"), list):
        raise ValueError(f"{path!r} is not a gelulab bench result (expected schema {SCHEMA!r})")
    return data


def _cell_problem(cell) -> str | None:
    """Why a result cell cannot be compared (not an object, an axis missing or of the wrong type, a cell timed
    "ok" without a positive finite median_s), or None when it is sound."""
    if not isinstance(cell, dict):
        return f"not an object ({type(cell).__name__})"
    for axis in AXES:
        value = cell.get(axis)
        if axis == "size":
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                return f"size {value!r} is not a positive integer"
        elif not isinstance(value, str):
            return f"{axis} {value!r} is not a string"
    if not isinstance(cell.get("status"), str):
        return f"status {cell.get('status')!r} is not a string"
    if cell["status"] in GOOD:
        t = cell.get("median_s")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t <= 0:
            return f"median_s {t!r} is not a positive finite number of seconds"
    return None


def sound_cells(label: str, path: str, cells: list) -> tuple[list[dict], str | None]:
    """The cells of a compared input that can be compared, and one note on those set aside (None when none is):
    "<label> (<path>): set aside N of M cells that are damaged (first: cell i: <why>)". Raises ValueError when
    no cell is sound (the file cannot be compared)."""
    sound, bad = [], []
    for i, cell in enumerate(cells):
        why = _cell_problem(cell)
        if why is None:
            sound.append(cell)
        else:
            bad.append((i, why))
    if not sound:
        first = f" (first: cell {bad[0][0]}: {bad[0][1]})" if bad else ""
        raise ValueError(f"{label} ({path}) has no usable cell: {len(bad)} of {len(cells)} are damaged{first}; "
                         "rerun that benchmark")
    if not bad:
        return sound, None
    return sound, (f"{label} ({path}): set aside {len(bad)} of {len(cells)} cells that are damaged "
                   f"(first: cell {bad[0][0]}: {bad[0][1]})")


def partial_note(label: str, path: str, result: dict) -> str | None:
    """One line saying that a compared input is partial (an interrupted run, or one still running), else None."""
    if not result.get("partial"):
        return None
    why = ("an interrupted run" if result.get("interrupted") else "a run that timed no cell cleanly"
           if result.get("no_cell_timed") else "a run not finished (or that crashed)")
    return (f"{label} ({path}) is a partial result of {why}: {len(result['cells'])} cells; the cells it lacks show as "
            f"only in the other run")


def selected(cell: dict, spec: GridSpec, devices=None) -> bool:
    """Whether a result cell lies in the filtered grid `spec` (any device when `devices` is None, any size when
    spec.sizes is None)."""
    axes = {"backend": spec.backends, "mode": spec.modes, "activation": spec.activations, "impl": spec.impls,
            "direction": spec.directions, "dtype": spec.dtypes, "device": devices, "size": spec.sizes}
    return all(values is None or cell[axis] in values for axis, values in axes.items())


def compare_command(args) -> int:
    """Print B ÷ A per cell (Markdown) for the cells that the command-line filters select (all cells without
    filters); an input that is partial (bench.partial.json, or a bench.json marked partial) is said so in one
    line on stderr and in the table's heading, and so are damaged cells, which are set aside (sound_cells).
    Returns 0, or 1 when no cell is in both files; raises ValueError for an input with no sound cell."""
    ra, rb = load_result(args.a), load_result(args.b)
    (a, damaged_a), (b, damaged_b) = sound_cells("A", args.a, ra["cells"]), sound_cells("B", args.b, rb["cells"])
    notes = [n for n in (partial_note("A", args.a, ra), partial_note("B", args.b, rb), damaged_a, damaged_b) if n]
    for note in notes:
        print(f"gelulab bench compare: {note}", file=sys.stderr)
    # only explicit filters apply here: not GELULAB_BACKEND, --quick or the default dtypes of a run
    spec = spec_from_filters(backends=args.backend or list(BACKEND_NAMES), devices=args.device,
                             modes=args.mode, activations=args.activation, impls=args.impl,
                             directions=args.direction, dtypes=args.dtype, sizes=args.size, full=True)
    devices = spec.devices if args.device else None
    cmp = analysis.compare([c for c in a if selected(c, spec, devices)], [c for c in b if selected(c, spec, devices)])
    print(report.compare_table(cmp, notes))
    return 0 if cmp["matched"] else 1


def main(argv: list[str] | None = None) -> int:
    """`python -m benchmarks.activations`: the same as `gelulab bench`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.activations", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as e:
        print(f"gelulab bench: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"gelulab bench: {e}", file=sys.stderr)
        return 128 + e.signum


if __name__ == "__main__":
    sys.exit(main())
