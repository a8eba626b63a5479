"""gelulab command line: `gelulab run | parity | moons | bench | swap | identify | merge | verify | warmup`.

The only module that imports experiments and benchmarks. Each command module provides
`add_arguments(parser)` and `run(args) -> int`; `gelulab run` is the main job (parity summary + moons with a few
seeds, one results folder). Every command runs under `gelulab.reproducible(threads=GELULAB_THREADS)` (default 1
thread per framework, JAX x64 on, TF32 off), applied before any framework starts.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

# imported with this module, before main() puts its handlers in place (it imports only the standard library)
from gelulab.core.plumbing.interrupts import dropped_interrupts_sent_again, restore_handlers

COMMANDS = {
    "run": ("gelulab.experiments.run.command", "the main job: parity summary and the moons experiment, one report"),
    "parity": ("gelulab.experiments.parity.command", "forward and gradient parity against the mpmath reference"),
    "moons": ("gelulab.experiments.moons.command", "ReLU vs GELU MLPs on make_moons, many seeds, statistics and plots"),
    "bench": ("gelulab.benchmarks.activations", "activation speed per backend against the machine's copy bandwidth"),
    "swap": ("gelulab.experiments.swap.command",
             "swap GELU in a pretrained MiniLM BERT, measure the damage, fine-tune"),
    "identify": ("gelulab.experiments.identify.command",
                 "which GELU (or ReLU, SiLU) a callable computes; are two the same?"),
    "merge": ("gelulab.experiments.merge.command", "results of several machines, devices or versions side by side"),
    "verify": ("gelulab.experiments.verify.command",
               ("every float32 input (or a stride of them) through each backend's float32 kernel, against the "
                "correctly rounded value")),
    "warmup": ("gelulab.experiments.warmup.command",
               "build torch's float32 kernel loops (impl=\"kernel\") ahead, once per machine and version"),
}

# The head of each command's --help: what it does, what it writes, its exit codes (2 to 6 lines of at most 79
# characters, printed as written). A command module may add an epilog with the details.
DESCRIPTIONS = {
    "run": """\
The main job: the parity summary (eager, f and f', every selected backend) and
the moons study (ReLU vs exact GELU, paired seeds on one backend: a verdict on
test accuracy, and how many epochs later GELU reaches a training loss of 0.15).
Writes report.md (it starts with the answer), results.json and the PNGs of both
parts into --out (default results/run); the same command resumes.
Exit codes: 0 done; 2 bad input, one line; 130 Ctrl-C, finished results kept.""",
    "parity": """\
Every backend x impl x activation x dtype x mode x derivative order x input
region against the correctly rounded mpmath reference; cells beyond tolerance
are flagged and matched with known faults. Writes report.md, parity.json and
errors_order0/1.png into --out (default results/parity); reruns resume.
Exit codes: 0 done (flagged cells are findings); 1 with --fail-on-new, a cell
matches no known fault; 2 bad input, one line; 130 Ctrl-C, groups kept.""",
    "moons": """\
ReLU vs GELU MLPs trained on make_moons over many seeds: accuracy and loss with
confidence intervals, paired tests and plots; --grid runs a grid of studies.
Writes report.md, results.json, three PNGs and runs/ (one file per seed) into
--out (default results/moons); rerunning into the same folder resumes.
Exit codes: 0 done; 1 with --fail-on-divergence, a run diverged; 2 bad input
or nothing to train, one line; 130 Ctrl-C, finished runs kept.""",
    "bench": """\
Time each activation per backend, impl, mode, direction, dtype and size against
the machine's copy bandwidth; --model times gelulab inside real models instead.
Writes bench.json, bench.md and throughput_*.png (--model: model.json, model.md)
into --out (default results/bench); `compare A.json B.json` prints B / A.
Exit codes: 0 done; 1 no cell timed (compare: no cell in both files); 2 bad
input, one line; 130 Ctrl-C, the cells measured kept in bench.partial.json.""",
    "swap": """\
Replace the exact GELU in every FFN of a pretrained MiniLM BERT by each other
activation and measure the damage: embedding cosines, per-layer drift and
paraphrase ROC-AUC; --finetune distils the swapped model and measures again.
Writes swap.md, swap.json and swap_layers.png into --out (default results/swap);
rerunning into the same folder resumes.
Exit codes: 0 done; 2 bad input or no model package, one line; 130 Ctrl-C.""",
    "identify": """\
Which GELU (or ReLU, SiLU) a callable computes, or every activation site of a
model file; with B, whether A and B are the same variant, site by site.
Writes nothing: prints the answer (--json: as JSON).
Exit codes: 0 done (with B: the same variant); 1 A and B differ; 2 a refused
expression or model, one line.""",
    "merge": """\
Results of parity, bench, moons (and moons grids) and swap made on different
machines, devices or versions, side by side, grouped by kind and folder.
Writes merge.md and merge.json into --out (default results/merge); a damaged
results file is set aside and named, never changed.
Exit codes: 0 done; 2 a missing folder, runs of different settings or nothing
usable to merge, one line.""",
    "verify": """\
Every float32 bit pattern (--exhaustive) or every N-th (--stride N) through
each backend's float32 kernel, f and f', against the correctly rounded value,
and every bfloat16 and float16 bit pattern. Writes chunks.jsonl, summary.json
and report.md into --out (default results/verify); reruns resume.
Exit codes: 0 every normal result within 1 ULP and the special values right;
1 otherwise; 2 bad input, one line; 130 Ctrl-C, finished chunks kept.""",
    "warmup": """\
Build torch's float32 kernel loops (impl="kernel", opt-in) ahead, in child
processes, so later processes run them from the first call; the default impl
needs none. Writes one file per kernel into GELULAB_KERNEL_CACHE (default
~/.cache/gelulab/torch-kernels); a kernel already built is loaded, not rebuilt.
Exit codes: 0 done; 2 an unknown activation or one without a kernel, one line;
130 Ctrl-C.""",
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The subcommands' help formatter: the description and epilog printed as written (DESCRIPTIONS), and a
    subcommand that is optional shown in brackets in the usage line (`[compare ...]`), as optional things are."""

    def _format_args(self, action, default_metavar):
        text = super()._format_args(action, default_metavar)
        if action.nargs == argparse.PARSER and not action.required:
            return f"[{text}]"
        return text


class UsageError(SystemExit):
    """An option or argument argparse refused; already printed as one line. A SystemExit with code 2, so code that
    parses with build_parser() sees argparse's usual exit."""

    def __init__(self):
        super().__init__(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line on stderr, `<prog>: error: <message>; see <prog> --help`
    (prog: "gelulab" or "gelulab <command>"), without the usage block, raising UsageError (exit code 2).
    Subparsers made by add_subparsers are of this class too; an unrecognised option is reported by the
    subcommand it was given to."""

    def error(self, message: str):
        """Print `message` as one line naming this parser's command and raise UsageError."""
        self._print_message(f"{self.prog}: error: {' '.join(message.split())}; see {self.prog} --help\n",
                            sys.stderr)
        raise UsageError()

    def parse_args(self, args=None, namespace=None):
        """argparse's parse_args; unrecognised arguments are an error of the command they were given to (the one
        whose name comes before them: `gelulab --bogus moons` is gelulab's, `gelulab moons --bogus` is moons')."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            argv = list(sys.argv[1:] if args is None else args)
            self._blamed(parsed, argv, extra).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def _blamed(self, parsed, argv: list, extra: list) -> argparse.ArgumentParser:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                name = getattr(parsed, action.dest, None) or ""
                chosen = action.choices.get(name)
                if chosen is None or name not in argv:
                    return self
                i = argv.index(name)
                if any(a in argv[:i] for a in extra):
                    return self
                rest = argv[i + 1:]
                return chosen._blamed(parsed, rest, extra) if isinstance(chosen, OneLineParser) else chosen
        return self


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (OneLineParser: an error is one line, exit code 2) with one subcommand per entry of
    COMMANDS (modules imported lazily), its --help headed by DESCRIPTIONS; every subcommand takes --verbose."""
    parser = OneLineParser(prog="gelulab", description=DESCRIPTION, epilog=EXIT_CODES, allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=DESCRIPTIONS[name], formatter_class=HelpFormatter,
                           allow_abbrev=False)  # `--seed 3` is not `--seeds 3`
        p.set_defaults(_module=module_name)
        p.add_argument("--verbose", action="store_true",
                       help="keep the frameworks' start-up log lines (dropped by default) and show the traceback "
                            "of an unexpected file-system error")
        importlib.import_module(module_name).add_arguments(p)
    return parser


DESCRIPTION = """gelulab command line. In your own model (Python: gelulab.gelu, the layers of gelulab.layers.torch,
keras and flax, gelulab.swap) gelulab computes with the framework's own op by default, at no cost; impl="kernel" opts
in to gelulab's float32 kernel within 1 ULP (about 8-9x the framework's op per call on a CPU). The commands below
measure every impl side by side."""

EXIT_CODES = """exit codes: 0 done; 1 a check failed (parity --fail-on-new found a new fault, bench timed no cell, moons
--fail-on-divergence found a run that diverged);
2 bad input or configuration, printed as one line naming the value (nothing computed is lost); 130 stopped by
Ctrl-C (143 by SIGTERM) after keeping every finished result: the same command resumes"""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gelulab` console script; returns the process exit code (see EXIT_CODES).

    An option argparse refuses is one line (OneLineParser), exit code 2. Bad configuration (ValueError,
    backends.BackendUnavailable, backends.DeviceUnavailable), file-system errors (OSError) and a MemoryError are
    printed as one line. Ctrl-C (SIGINT, also where the process inherited it ignored) and SIGTERM end the command
    after its finished results are on disk, with one line saying what was kept; a framework's import holds them
    until it has finished (core.plumbing.interrupts). The handlers are put in place before anything else this
    function does (any import, the parsing) and the caller's are put back on return; an interrupt from then on,
    also while they are put in place or back, is the one line and 128 + the signal.
    What comes before this function (Python's start-up, the import of gelulab and of this module) follows
    Python's rules: a SIGINT with its default action ends the process, one that the process inherited ignored is
    lost. Unless --verbose, the frameworks' start-up log lines are dropped from stderr
    (core.plumbing.output.quiet_frameworks). Before the command runs, the framework settings of the experiments are
    applied: gelulab.reproducible(threads=GELULAB_THREADS); importing gelulab as a library changes nothing."""
    import signal

    state = {"signum": signal.SIGINT, "command": "gelulab", "started": False}
    args = None
    try:
        with _interrupt_handlers(state):
            try:
                from gelulab.core.plumbing.output import quiet_frameworks
                from gelulab.core.plumbing.provenance import set_command

                argv = sys.argv[1:] if argv is None else list(argv)
                # the commands measure the compiled kernels themselves: built on first use, not in the background
                os.environ.setdefault("GELULAB_KERNEL_COMPILE", "wait")  # core.plumbing.config.KERNEL_COMPILE_ENV
                try:
                    args = build_parser().parse_args(argv)
                except UsageError as e:  # printed as one line by OneLineParser.error
                    return int(e.code)
                state["command"] = f"gelulab {args.command}"
                set_command(["gelulab", *argv])
                with contextlib.nullcontext() if args.verbose else quiet_frameworks():
                    return _dispatch(args, state)
            except KeyboardInterrupt:  # while importing, parsing, or starting or closing the log filter
                print(f"{state['command']}: {_interrupted(args, state)}", file=sys.stderr)
                return 128 + int(state["signum"])
    except KeyboardInterrupt:  # while the handlers were put in place or back
        print(f"{state['command']}: {_interrupted(args, state)}", file=sys.stderr)
        return 128 + int(state["signum"])


def _interrupted(args, state: dict) -> str:
    """What an interrupted command kept, as the end of its one line."""
    if not state["started"]:
        return "interrupted before the command started; nothing was written"
    out = getattr(args, "out", None)
    return f"interrupted; {f'finished results are kept in {out}' if out else 'nothing was being written'}"


@contextlib.contextmanager
def _interrupt_handlers(state: dict | None = None):
    """Within the block (main thread only): SIGINT raises KeyboardInterrupt, even where the process inherited it
    ignored (a shell ignores it in the commands a script starts in the background), and SIGTERM raises it too, so
    every command keeps its finished results on Ctrl-C, `kill -INT` and `kill -TERM` alike; one that Python drops
    (raised in a gc callback) is sent again (core.plumbing.interrupts). Yields `state` (a new dict when None), whose
    "signum" is the last signal received (SIGINT until one arrives), "command" the line's prefix and "started"
    whether the command's work had begun. The hook that sends a dropped interrupt again goes in first, then the
    handlers, before any further import of gelulab's, so a KeyboardInterrupt may come from entering the block too. The
    caller's handlers are put back; one installed outside Python (signal.getsignal gives None) is left as it is, since
    it could not be put back."""
    import signal
    import threading

    if state is None:
        state = {"signum": signal.SIGINT, "command": "gelulab", "started": False}

    def on_sigterm(signum, frame):
        state["signum"] = signum
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    ours = {signal.SIGTERM: on_sigterm, signal.SIGINT: signal.default_int_handler}
    # The hook that sends a dropped KeyboardInterrupt again is in place before the handlers, so no interrupt can
    # land where Python drops it (an import's module-lock callback, a gc callback) with nothing to send it again.
    with dropped_interrupts_sent_again():
        # a handler installed outside Python (getsignal gives None) cannot be put back, so it is left in place
        previous = {s: signal.signal(s, h) for s, h in ours.items() if signal.getsignal(s) is not None}
        try:
            yield state
        finally:
            restore_handlers(list(previous.items()))


def _dispatch(args, state: dict) -> int:
    import signal

    from gelulab.backends import BackendUnavailable, DeviceUnavailable, reproducible, selected_backends
    from gelulab.core.plumbing import config
    from gelulab.core.plumbing.output import Interrupted

    name, state["started"] = state["command"], True
    try:
        config.check_environment()  # every variable a command depends on, the same answer in every command
        selected_backends()  # GELULAB_BACKEND
        module = importlib.import_module(args._module)
        reproducible(threads=config.threads())
        return int(module.run(args) or 0)
    except Interrupted as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 128 + int(e.signum if e.signum != signal.SIGINT else state["signum"])
    except KeyboardInterrupt:
        print(f"{name}: {_interrupted(args, state)}", file=sys.stderr)
        return 128 + int(state["signum"])
    except (ValueError, BackendUnavailable, DeviceUnavailable) as e:
        # bad configuration, missing framework, absent device (backend setup): one clear line, no traceback
        print(f"{name}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    except OSError as e:
        if args.verbose:
            raise
        print(f"{name}: error: {' '.join(str(e).split())} (rerun with --verbose for the traceback)",
              file=sys.stderr)
        return 2
    except MemoryError as e:
        # sizes are checked against the machine's memory before work starts; this is what slipped past them
        if args.verbose:
            raise
        detail = " ".join(str(e).split())
        print(f"{name}: error: out of memory{f' ({detail})' if detail else ''}; the finished results are kept; "
              "choose smaller sizes (rerun with --verbose for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
