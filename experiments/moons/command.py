"""`gelulab moons`: the command line of the moons study (experiments/moons/study.py) and, with --grid, of the
study grid (experiments/moons/grid_cli.py): options, the configuration they give, the run and its exit code."""
from __future__ import annotations

import argparse
import os
import sys

from gelulab.backends import selected_backends
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.experiments.moons import study  # called through the module, so a test can replace its functions
from gelulab.experiments.moons.config import ARMS, REGIMES, TRAIN_DTYPES, MoonsConfig, check_seed_count
from gelulab.experiments.moons.datasets import DATASETS
from gelulab.experiments.moons.report import divergence_warning, markdown

JOBS_PER_CPU = 4  # the most worker processes per CPU core --jobs may ask for (as GELULAB_THREADS)


def _int_list(text: str) -> tuple[int, ...]:
    """Comma-separated integers ("64,64"); an empty item ("64,,64", "64,") is refused, never passed over."""
    items = text.split(",")
    empty = [i + 1 for i, v in enumerate(items) if not v.strip()]
    if empty and text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: item {empty[0]} is empty; expected comma-separated integers")
    try:
        return tuple(int(v) for v in items if v.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from e


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `gelulab moons` options; every MoonsConfig field has one (defaults: the article's setting)."""
    from gelulab.experiments.moons import grid_cli

    d = MoonsConfig()
    parser.add_argument("--out", default=None, help=f"results folder (default {study.DEFAULT_OUT}, with --grid "
                        f"{grid_cli.DEFAULT_OUT}); rerunning with the same folder resumes")
    parser.add_argument("--backend", dest="backends", type=_str_list, default=None,
                        help="comma-separated backends (default: GELULAB_BACKEND, else all installed)")
    parser.add_argument("--backends", dest="backends", type=_str_list, help=argparse.SUPPRESS)  # earlier name
    parser.add_argument("--seeds", type=int, default=len(d.seeds), help=f"number of seeds (default {len(d.seeds)})")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds are first-seed, first-seed + 1, ...")
    parser.add_argument("--arms", type=_str_list, default=d.arms, help=f"comma-separated arms, of {list(ARMS)}")
    parser.add_argument("--impl", default=d.impl,
                        help="formula (gelulab's correctly rounded path, default), builtin (the framework's) or "
                             "kernel (gelulab's float32 kernel; a float64 study computes the formula)")
    parser.add_argument("--regime", default="matched", choices=[*REGIMES, "both"],
                        help="matched (shared init/order, one Adam; default), native (framework defaults), both")
    parser.add_argument("--dtype", default=d.dtype, choices=TRAIN_DTYPES, help="dtype of the study")
    parser.add_argument("--compare-dtype", default=d.compare_dtype, choices=[*TRAIN_DTYPES, "none"],
                        help="second dtype for the cross-backend drift table (matched, first --compare-seeds seeds)")
    parser.add_argument("--compare-seeds", type=int, default=d.compare_seeds,
                        help=f"how many seeds --compare-dtype trains, at least 1 (default {d.compare_seeds})")
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
                             f"backend); with --grid one cell each (default: CPU cores); at most {JOBS_PER_CPU} x "
                             "the CPU count unless --address names a Ray cluster")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--fail-on-divergence", action="store_true",
                        help="exit 1 (after writing the report) when a run diverged or did not learn (with --grid: "
                             "a run of any cell); without it the warning is printed and the exit code is 0")
    grid_cli.add_arguments(parser)


def check_jobs(jobs, address=None) -> None:
    """Raise ValueError naming --jobs when it asks for more than JOBS_PER_CPU x os.cpu_count() workers on this
    machine (a Ray cluster at `address` brings its own CPUs and is not bounded here)."""
    limit = JOBS_PER_CPU * (os.cpu_count() or 1)
    if jobs is not None and address is None and isinstance(jobs, int) and jobs > limit:
        raise ValueError(f"--jobs {jobs}: expected at most {limit} ({JOBS_PER_CPU} per CPU core, "
                         f"{os.cpu_count() or 1} cores here)")


def config_from_args(args) -> MoonsConfig:
    """MoonsConfig from parsed CLI args; raises ValueError naming the field for a bad value."""
    if args.seeds < 1:
        raise ValueError(f"seeds: {args.seeds} seeds requested; expected at least 1")
    check_seed_count("--seeds", args.seeds)  # before the list of seeds is built
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
    train; 1: a run diverged and --fail-on-divergence was given; the warning is on stderr either way). Raises
    ValueError (bad option, unwritable --out, results of other settings) before any training and
    core.plumbing.output.Interrupted on Ctrl-C, after the finished runs are on disk. With --grid, the study grid
    (experiments/moons/grid_cli.py)."""
    from gelulab.experiments.moons import grid_cli

    check_jobs(args.jobs, args.address)
    if grid_cli.wants_grid(args):
        return grid_cli.run(args, add_arguments)
    out = study.DEFAULT_OUT if args.out is None else args.out
    cfg = config_from_args(args)
    if args.executor != "local" or args.address is not None:  # before the backends: an option error comes first
        from gelulab.experiments.moons.executors import check_executor

        check_executor(args.executor, args.jobs, args.address)
    names, _ = study.check_backends(selected_backends() if args.backends is None else args.backends)
    if not names:
        print("gelulab moons: no backend with autodiff selected (numpy is skipped); nothing to train",
              file=sys.stderr)
        return 2
    check_writable(out)
    with hold(out):
        try:
            results = study.run_study(cfg, out, names, jobs=args.jobs, progress=not args.no_progress,
                                executor=args.executor, address=args.address)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; {study.stored_summary(cfg, out, names)}; run the same command again to "
                              "resume") from None
        paths = study.write_report(results, out)
        print(markdown(results, sections=("timing", "summary")))
        print("\n".join(f"wrote {p}" for p in paths.values()))
        warning = divergence_warning(results["divergence"])
        if warning:
            print(f"gelulab moons: {warning}", file=sys.stderr)
        return 1 if warning and args.fail_on_divergence else 0
