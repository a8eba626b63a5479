"""gelulab command line: `gelulab run | parity | moons | bench | swap | verify`.

The only module that imports experiments and benchmarks. Each command module provides
`add_arguments(parser)` and `run(args) -> int`; `gelulab run` is the main job (parity summary + moons with a few
seeds, one results folder).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

COMMANDS = {
    "run": ("gelulab.cli", "the main job: parity summary and the moons experiment, one report"),
    "parity": ("gelulab.experiments.parity.command", "forward and gradient parity against the mpmath reference"),
    "moons": ("gelulab.experiments.moons.study", "ReLU vs GELU MLPs on make_moons, many seeds, statistics and plots"),
    "bench": ("gelulab.benchmarks.activations", "activation speed per backend against the machine's copy bandwidth"),
    "swap": ("gelulab.experiments.swap.command", "swap GELU in a pretrained MiniLM BERT, measure the damage, fine-tune"),
    "verify": ("gelulab.experiments.verify.command",
               "every float32 input (or a stride of them) through each backend's float32 kernel, against the correctly rounded value"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab run`, the main job."""
    parser.add_argument("--out", default="results/run", help="results folder (default results/run)")
    parser.add_argument("--seeds", type=int, default=5, help="moons seeds (default 5; `gelulab moons` runs 20)")
    parser.add_argument("--epochs", type=int, default=100, help="moons epochs (default 100, the article's)")


def run(args) -> int:
    """`gelulab run`: the parity summary (eager, value and first derivative, every selected backend) and the
    moons experiment (ReLU vs exact GELU, matched regime, float64, a few seeds), into one results folder:
    report.md, results.json (numbers and versions), and the PNGs of both parts. Returns 0."""
    from gelulab.backends import get_backend, selected_backends
    from gelulab.experiments.moons.config import MoonsConfig
    from gelulab.core.report import atomic_write_text, environment, write_json
    from gelulab.experiments.moons import study as moons
    from gelulab.experiments.parity import command as parity

    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: expected at least 1")
    cfg = MoonsConfig(seeds=tuple(range(args.seeds)), epochs=args.epochs, arms=("relu", "gelu_none"))
    out = Path(args.out)
    names = selected_backends()
    backends = [get_backend(n) for n in names]
    t0 = time.perf_counter()
    print(f"[1/2] parity of {', '.join(names)} against mpmath (eager; value and first derivative)", flush=True)
    pdata = parity.run_parity(backends, out / "parity", modes=("eager",), orders=(0, 1))
    t1 = time.perf_counter()
    print(f"[2/2] moons: ReLU vs exact GELU, {len(cfg.seeds)} seeds x {cfg.epochs} epochs", flush=True)
    results = moons.run_study(cfg, out / "moons", backends=names)
    paths = moons.write_report(results, out / "moons")
    t2 = time.perf_counter()
    env = environment(backends)
    text = (
        "# gelulab run\n\n"
        f"Backends: {', '.join(names)}; GELULAB_THREADS={env['threads']} (in effect: see Versions); {env['cpu']}. "
        f"Parity {t1 - t0:.0f} s, moons {t2 - t1:.0f} s.\n\n"
        "## Parity summary\n\n"
        f"{len(pdata['cells'])} cells (eager), {pdata['n_flagged']} beyond tolerance, {pdata['n_known']} of them "
        "known upstream faults. Full report: [parity/report.md](parity/report.md).\n\n"
        + pdata["summary_md"]
        + "\n![errors](parity/errors_order0.png)\n\n## Moons\n\n"
        + _nested((out / "moons" / "report.md").read_text()).replace("](", "](moons/")
        + "\n## Versions\n\n" + "".join(f"- {k}: {v}\n" for k, v in env["frameworks"].items())
        + "".join(f"- {k} threads in effect: {v}\n" for k, v in env["threads_in_effect"].items())
        + f"- python {env['python']}, numpy {env['numpy']}, scipy {env['scipy']}, mpmath {env['mpmath']}\n"
    )
    atomic_write_text(out / "report.md", text)
    write_json(out / "results.json", {
        "environment": env, "parity": {k: pdata[k] for k in ("n_flagged", "n_known", "cells")},
        "moons": {k: v for k, v in results.items() if k != "boundaries"},
        "seconds": {"parity": t1 - t0, "moons": t2 - t1},
    })
    print(f"report: {out / 'report.md'} ({', '.join(p.name for p in paths.values())} in {out / 'moons'})")
    return 0


def _nested(markdown: str) -> str:
    """A sub-report's Markdown with every heading two levels deeper, for inclusion under a `##` section."""
    return "\n".join("##" + line if line.startswith("#") else line for line in markdown.splitlines()) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one subcommand per entry of COMMANDS (modules imported lazily)."""
    parser = argparse.ArgumentParser(prog="gelulab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module_name)
        importlib.import_module(module_name).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gelulab` console script; returns the process exit code (0 success, 2 bad
    configuration: ValueError, backends.BackendUnavailable or backends.DeviceUnavailable, printed as one line)."""
    args = build_parser().parse_args(argv)
    from gelulab.backends import BackendUnavailable, DeviceUnavailable

    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except (ValueError, BackendUnavailable, DeviceUnavailable) as e:
        # bad configuration, missing framework, absent device (backend setup): one clear line, no traceback
        print(f"gelulab {args.command}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
