"""The command-line side of the moons grid: the `gelulab moons` options --grid, --print-grid, --executor and
--address, and the run of `gelulab moons --grid [FILE]`.

The default grid (`--grid` without a file, DEFAULT_GRID in experiments/moons/grid.py; `--print-grid` prints it
as a file to edit): depth 1, 2, 4, 8 x learning rate 1e-3, 3e-3, 1e-2 x make_moons, make_circles = 24 cells,
each ReLU and the three GELU forms x 20 seeds x every selected backend (matched regime, float64, 1000 points,
width 32, batch 32, 25 epochs); GRID_TIME is its wall time measured on the 2-core reference machine with jax,
torch and tensorflow.
"""
from __future__ import annotations

import argparse
import sys

from gelulab.core.activations import ACTIVATIONS
from gelulab.experiments.moons.executors import EXECUTORS

DEFAULT_OUT = "results/moons_grid"
BUILTIN = "<built-in>"
# Measured with the four arms before SiLU joined: the built-in grid with jax, torch and tensorflow took 622-627 CPU
# seconds of training (640 with the frameworks' start-up) on the 2-core reference machine, about 5.3 minutes of its 2
# cores; with other jobs sharing them (load average 2-7) it took 911 s wall with the local executor and 902 s with Ray.
GRID_TIME = ("about 5.5 minutes of 2 free cores with four arms (640 CPU s measured); SiLU's fifth arm adds about a "
             "quarter (estimated)")
# The single-study options a grid sets in its file instead (they would be ignored otherwise): refused with --grid
_STUDY_ONLY = ("seeds", "first_seed", "arms", "impl", "regime", "dtype", "compare_dtype", "compare_seeds", "samples",
               "noise", "dataset", "val_fraction", "test_fraction", "hidden", "epochs", "batch_size", "lr", "beta1",
               "beta2", "eps")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --grid, --print-grid, --executor and --address to the `gelulab moons` parser."""
    parser.add_argument(
        "--grid", nargs="?", const=BUILTIN, default=None, metavar="FILE",
        help="run a study grid: every combination of the axes in the TOML FILE (depth, width, lr, batch_size, "
             "epochs, dataset, noise, dtype; see --print-grid), one study per cell, then heatmaps of GELU - ReLU "
             "with BH-adjusted tests. Without FILE the built-in grid: depth 1,2,4,8 x lr 1e-3,3e-3,1e-2 x "
             f"make_moons, make_circles = 24 cells, {len(ACTIVATIONS)} arms (every catalogue entry) x 20 seeds x every "
             "backend, width 32, 25 epochs: "
             f"with jax, torch and tensorflow {GRID_TIME}")
    parser.add_argument("--print-grid", action="store_true", help="print the built-in grid as a TOML file and exit")
    parser.add_argument("--executor", default="local", choices=EXECUTORS,
                        help="where the units of work (grid cells; backends of one study) run: local worker "
                             "processes (default, --jobs of them) or Ray (the extra gelulab[ray]): a local Ray "
                             "instance with --jobs CPUs, or the cluster at --address")
    parser.add_argument("--address", default=None,
                        help="an existing Ray cluster (e.g. auto, ray://head:10001) for --executor ray; its nodes "
                             "need gelulab installed")


def wants_grid(args) -> bool:
    """True when the command is a grid run (--grid) or --print-grid."""
    return args.grid is not None or args.print_grid


def _check_no_study_options(args, add_study_arguments) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    add_study_arguments(parser)
    defaults = vars(parser.parse_args([]))
    given = [k for k in _STUDY_ONLY if getattr(args, k, None) != defaults.get(k)]
    if given:
        opts = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ValueError(f"{opts}: not used with --grid; set them in the grid file (its [axes] or [base] table; "
                         "see --print-grid)")


def run(args, add_study_arguments) -> int:
    """`gelulab moons --grid [FILE]` / `--print-grid`. Returns the exit code (0; 1 when a run diverged or did not
    learn and --fail-on-divergence was given, after the report is written; the warning is on stderr either way;
    130 when interrupted, the finished cells kept). Raises ValueError (exit 2) for a bad grid file or option,
    before any training."""
    from gelulab.core.plumbing.lock import hold
    from gelulab.core.plumbing.output import check_writable
    from gelulab.experiments.moons.grid import DEFAULT_GRID, load_grid
    from gelulab.experiments.moons.grid_report import grid_divergence_warning, markdown
    from gelulab.experiments.moons.grid_study import run_grid, write_grid_report

    if args.print_grid:
        print(DEFAULT_GRID, end="")
        return 0
    _check_no_study_options(args, add_study_arguments)
    spec = load_grid(None if args.grid == BUILTIN else args.grid)
    out = DEFAULT_OUT if args.out is None else args.out
    with hold(check_writable(out)):  # one run at a time in --out, from the first cell to the report
        try:
            results = run_grid(spec, out, args.backends, args.executor, args.jobs, args.address,
                               progress=not args.no_progress)
        except KeyboardInterrupt:
            print(f"\ngelulab moons --grid: interrupted; the finished cells are stored in {out}: rerun the same "
                  "command to resume", file=sys.stderr)
            return 130
        paths = write_grid_report(results, out)
    print(markdown(results, sections=("conclusions", "significant", "timing")))
    print("\n".join(f"wrote {p}" for p in paths.values()))
    warning = grid_divergence_warning(results["analysis"]["divergence"])
    if warning:
        print(f"gelulab moons --grid: {warning}", file=sys.stderr)
    return 1 if warning and getattr(args, "fail_on_divergence", False) else 0
