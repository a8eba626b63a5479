"""gelulab command line: `gelulab run | parity | moons | bench | swap`.

The only module that imports experiments and benchmarks. Each command module provides
`add_arguments(parser)` and `run(args) -> int`; `gelulab run` is the main job (parity summary + moons with a few
seeds, one results folder).
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "run": ("experiments.main_job", "the main job: parity summary and the moons experiment, one report"),
    "parity": ("experiments.parity", "forward and gradient parity against the mpmath reference"),
    "moons": ("experiments.moons", "ReLU vs GELU MLPs on make_moons, many seeds, statistics and plots"),
    "bench": ("benchmarks.activations", "activation speed per backend against the machine's copy bandwidth"),
    "swap": ("experiments.swap", "swap GELU in a pretrained MiniLM BERT, measure the damage, fine-tune"),
}


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser with one subcommand per entry of COMMANDS (modules imported lazily)."""
    parser = argparse.ArgumentParser(prog="gelulab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module_name)
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            p.set_defaults(_missing=f"gelulab {name}: not built yet ({module_name})")
            continue
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gelulab` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    if getattr(args, "_missing", None):
        print(args._missing, file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except ValueError as e:  # bad configuration: a clear message, no traceback
        print(f"gelulab {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
