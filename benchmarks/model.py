"""`gelulab bench --model`: gelulab inside real models, against each model's own activation, side by side.

    gelulab bench --model [--quick] [--backend torch,tensorflow,jax] [--impl ...] [--mode eager,compiled]
                  [--threads N] [--out DIR]

Models (one module each): a transformers BertModel, the packaged all-MiniLM-L6-v2 (backends/torch/model_bench.py),
a Keras MLP (backends/tensorflow/model_bench.py, Keras on TensorFlow) and a Flax MLP (backends/jax/model_bench.py). For each model, step (forward; training step: forward, backward, Adam) and mode (eager; compiled:
torch.compile, tf.function, jax.jit), its three arms are timed side by side: "builtin" (the model's own
activation), gelulab's "kernel" (the default impl) and "formula", each a model of its own with the same weights,
with the shared timer (benchmarks/timer.py through benchmarks.runner.run_calls: first call and warm-up apart,
then interleaved blocks, medians). Ratios are arm ÷ builtin of the medians measured in the same group.
Then the first-call figures of the torch layer (benchmarks/first_call.py: fresh processes with an empty inductor
cache, with and without a C++ compiler on PATH, a new shape, a plain call after torch.func.vmap).

Threads: `gelulab.reproducible(threads=--threads or GELULAB_THREADS, default 1)` before any framework loads; the
counts in force are recorded per framework ("threads_in_effect") and printed under the table. In this process
GELULAB_KERNEL_COMPILE defaults to "wait" (as for every gelulab command), so the steady-state rows time the
kernel's compiled loop once built (its build falls in the untimed first call); the first-call processes run
under the user's own setting (unset: gelulab's default). Full sizes: BertModel batch 8 × 128 tokens, MLP
784-1024-1024-10 at batch 128, first calls at 8 × 128 × 1536 float32 (the BertModel's FFN activation), 3 fresh
processes each: several minutes on 2 cores, most of it torch.compile. --quick: batch 1 × 16, MLP 32-64-64-10 at
batch 16, short timing, one process per first-call figure, no wait for the kernel's build, and no torch.compile
rows unless --mode names compiled: a smoke test of seconds to a minute, whose figures are not for reading.

Outputs: a Markdown table on stdout and in DIR/model.md, every row (seconds per call, quartiles, first call,
compile counts), the ratios, the first-call figures, versions and threads in DIR/model.json (--out, default
results/bench). While the run is under way (after each group) and when it is interrupted, what is measured so far
goes to DIR/model.partial.json and .md ("partial": true); model.json is replaced only when a run completes. One
run at a time holds DIR (core.plumbing.lock).
"""
from __future__ import annotations

import importlib
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, replace

from gelulab.benchmarks import first_call
from gelulab.benchmarks.runner import hooks, run_calls
from gelulab.benchmarks.timer import TimerConfig
from gelulab.core.plumbing import config
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.core.plumbing.provenance import command_line
from gelulab.core.plumbing.report import atomic_write_text, environment, write_json

SCHEMA = "gelulab.bench.model/1"
IMPLS = ("builtin", "kernel", "formula")  # builtin first: the reference of every ratio
MODES = ("eager", "compiled")
DIRECTIONS = ("forward", "train step")
SUBJECT = "model_bench"  # the optional module of a backend that holds its model (backends/<name>/model_bench.py)
SUBJECTS = ("torch", "tensorflow", "jax")  # the backends with one, in the table's order
# grid filters of `gelulab bench` that have no meaning here (the models fix their dtype, sizes and activation)
NOT_HERE = ("device", "activation", "direction", "dtype", "size")


@dataclass(frozen=True)
class Sizes:
    """The sizes of one run. bert_batch × bert_seq: token ids of the BertModel; mlp_widths: the MLPs' layer
    widths (input, hidden..., classes); mlp_batch: their batch; first_shape: the first calls' input; new_shapes:
    the new shape of the first-call processes and that of the steady-state process; repeats: fresh processes
    per first-call figure; settle_s: longest wait for the kernel's compiled loop there (0: none); calls: plain calls
    per median there."""

    bert_batch: int = 8
    bert_seq: int = 128
    mlp_widths: tuple = (784, 1024, 1024, 10)
    mlp_batch: int = 128
    first_shape: tuple = (8, 128, 1536)
    new_shapes: tuple = ((4, 64, 1536), (1, 33, 1536))
    repeats: int = 3
    settle_s: float = 300.0
    calls: int = 9


FULL = Sizes()
QUICK = Sizes(bert_batch=1, bert_seq=16, mlp_widths=(32, 64, 64, 10), mlp_batch=16, first_shape=(2, 16, 64),
              new_shapes=((1, 8, 64), (1, 4, 64)), repeats=1, settle_s=0.0, calls=5)
# a BertModel step takes 0.1-3 s here: at least 9 blocks of one call each, interleaved, per arm
TIMER = TimerConfig(min_block_s=1e-3, min_run_s=1.0, min_blocks=9, max_blocks=200, warmup_s=0.5, warmup_calls=2)
QUICK_TIMER = TimerConfig(min_block_s=5e-4, min_run_s=0.01, min_blocks=3, max_blocks=20, warmup_s=0.0, warmup_calls=1)


def _values(option: str, given, allowed) -> tuple:
    """The values of a repeatable, comma-separated option (all of `allowed` when not given), in `allowed`'s
    order. Raises ValueError naming a value not in `allowed`."""
    if not given:
        return tuple(allowed)
    values = [v.strip() for item in given for v in item.split(",") if v.strip()]
    for v in values:
        if v not in allowed:
            raise ValueError(f"--{option} {v!r} with --model; expected one of {', '.join(allowed)}")
    return tuple(v for v in allowed if v in values)


def _backends(given) -> tuple:
    """--backend, else GELULAB_BACKEND, else every backend with a model (torch, tensorflow, jax)."""
    if given:
        return _values("backend", given, tuple(SUBJECTS))
    from gelulab.backends import requested_backends

    named = requested_backends()
    return tuple(b for b in SUBJECTS if named is None or b in named)


def options(args) -> dict:
    """The run's settings from parsed `gelulab bench` arguments: {"backends", "impls" (builtin always first),
    "modes", "sizes", "timer", "quick", "torch_compiled"}. Raises ValueError for a grid filter that does not
    apply to --model, an unknown value, or a bad --min-run-s."""
    for axis in NOT_HERE:
        if getattr(args, axis, None):
            raise ValueError(f"--{axis} does not apply to --model (the models fix it); drop it or drop --model")
    for flag in ("full", "train_step_only", "no_train_step"):
        if getattr(args, flag, False):
            raise ValueError(f"--{flag.replace('_', '-')} does not apply to --model")
    impls = _values("impl", args.impl, IMPLS)
    timer = QUICK_TIMER if args.quick else TIMER
    if args.min_run_s is not None:
        if not (isinstance(args.min_run_s, (int, float)) and args.min_run_s > 0):
            raise ValueError(f"--min-run-s={args.min_run_s!r}; expected a positive float")
        timer = replace(timer, min_run_s=args.min_run_s)
    return {"backends": _backends(args.backend), "impls": ("builtin",) + tuple(i for i in impls if i != "builtin"),
            "modes": _values("mode", args.mode, MODES), "sizes": QUICK if args.quick else FULL, "timer": timer,
            "quick": bool(args.quick), "torch_compiled": not args.quick or bool(args.mode)}


def subject(backend: str):
    """The model module of a backend (backends/<name>/model_bench.py: torch's BertModel, the Keras MLP on
    tensorflow, the Flax MLP on jax)."""
    return importlib.import_module(f"gelulab.backends.{backend}.{SUBJECT}")


def _public_api() -> dict:
    """What the model modules get from gelulab's public API (they are backend modules and do not import it):
    swap, gelulab.swap; layer(impl), gelulab's Flax exact-GELU layer."""
    from gelulab.api.surgery import swap

    def layer(impl):
        from gelulab.layers.flax import GELU

        return GELU(approximate="none", impl=impl)

    return {"swap": swap, "layer": layer}


def measure(opts: dict, result: dict, seed: int = 0, progress=print, checkpoint=None) -> dict:
    """Time every group of `opts` (options()), filling `result` as it goes (so an interruption keeps what is
    measured): result["rows"] (one per arm: the axes framework, model, input, direction, mode, compiler, impl and
    run_calls' fields, seconds per call), "models" (what each model is), "threads_in_effect", "backends" (the
    Backend objects, for core.plumbing.report.environment), "skipped" ({"what", "reason"}), then "first_call"
    (first_call.measure) when torch is selected. checkpoint(): called after each group. Returns `result`."""
    from gelulab.backends import BackendUnavailable, get_backend

    sizes, timer = opts["sizes"], opts["timer"]
    for name in opts["backends"]:
        mod = subject(name)
        why = mod.unavailable()  # missing packages; imports nothing
        if why is None:
            try:  # the framework loads here, under the settings of reproducible()
                backend = get_backend(mod.BACKEND)
                why = getattr(mod, "unsupported", lambda: None)()
            except (BackendUnavailable, ImportError, RuntimeError) as e:
                why = str(e).splitlines()[0]
        if why:
            result["skipped"].append({"what": mod.MODEL, "reason": why})
            progress(f"gelulab bench --model: skipping the {mod.MODEL}: {why}")
            continue
        bench = hooks(mod.BACKEND)
        result["backends"].append(backend)
        result["threads_in_effect"][name] = bench.threads()
        result["models"][mod.MODEL] = mod.describe(sizes)
        for direction in DIRECTIONS:
            for mode in opts["modes"]:
                if mode == "compiled" and name == "torch" and not opts["torch_compiled"]:
                    result["skipped"].append({"what": f"{mod.MODEL} {direction} compiled",
                                              "reason": "--quick leaves out torch.compile (minutes); add --mode "
                                                        "compiled to include it"})
                    continue
                progress(f"… {mod.MODEL} {direction}, {mode}")
                axes = [{"framework": name, "model": mod.MODEL, "input": mod.shape_text(sizes),
                         "direction": direction, "mode": mode,
                         "compiler": mod.COMPILER if mode == "compiled" else "eager", "impl": impl}
                        for impl in opts["impls"]]
                builders = [mod.builder(impl, direction, mode, sizes, seed, **_public_api()) for impl in opts["impls"]]
                result["rows"] += run_calls(bench, axes, builders, [mode == "compiled"] * len(axes), timer)
                if checkpoint:
                    checkpoint()
    if "torch" in opts["backends"] and "torch" in result["threads_in_effect"]:
        result["first_call"] = first_call.measure(
            sizes.first_shape, sizes.new_shapes, sizes.repeats, threads=config.threads(), settle_s=sizes.settle_s,
            calls=sizes.calls, progress=lambda what: progress(f"… torch layer: {what}"))
    return result


TIMED = ("ok", "recompiled")  # statuses with a median: "recompiled" (a compile counter grew during the timed
# blocks; torch counts process-wide, so one recompile flags every arm of its group) is marked in the table


def ratios(rows: list[dict]) -> list[dict]:
    """Arm ÷ builtin of the median seconds per call, per group (framework, model, direction, mode): one dict per
    non-builtin arm with the group's axes, "impl", "ratio" (None unless both rows have a status in TIMED) and
    "status" (the arm's, or the builtin's when that one has no median)."""
    out = []
    key = ("framework", "model", "input", "direction", "mode")
    builtins = {tuple(r[k] for k in key): r for r in rows if r["impl"] == "builtin"}
    for r in rows:
        if r["impl"] == "builtin":
            continue
        base = builtins.get(tuple(r[k] for k in key))
        ok = base is not None and base["status"] in TIMED and r["status"] in TIMED
        status = r["status"] if base is None or base["status"] in TIMED else f"builtin {base['status']}"
        out.append({**{k: r[k] for k in key}, "impl": r["impl"], "status": status,
                    "ratio": r["median_s"] / base["median_s"] if ok else None})
    return out


def _threads_line(threads: dict) -> str:
    parts = []
    for name, t in threads.items():
        intra, inter = t.get("intra_op"), t.get("inter_op")
        parts.append(f"{name} {intra}" + (f" (inter-op {inter})" if inter is not None else ""))
    return ", ".join(parts)


def markdown(result: dict) -> str:
    """The Markdown report: the ratio table (one line per model, step and mode; the builtin's median in ms and its
    interquartile range in % of the median, a gauge of the machine's noise), the first-call table, the threads and
    what was skipped."""
    impls = [i for i in dict.fromkeys(r["impl"] for r in result["rows"]) if i != "builtin"]
    lines = ["| model | input | step | mode | builtin (ms) | IQR | " + " | ".join(f"{i} ÷ builtin" for i in impls)
             + " |", "|---|---|---|---|---|---|" + "---|" * len(impls)]
    by = {(q["model"], q["direction"], q["mode"], q["impl"]): q for q in result["ratios"]}
    for r in result["rows"]:
        if r["impl"] != "builtin":
            continue
        mode = "eager" if r["mode"] == "eager" else f"compiled ({r['compiler']})"
        group = [q for q in result["rows"] if all(q[k] == r[k] for k in ("model", "direction", "mode"))]
        if any(q["status"] == "recompiled" for q in group):
            mode += " †"
        ok = r["status"] in TIMED
        ms = r["median_s"] * 1e3 if ok else None
        base = (f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}") if ok else r["status"]
        spread = f"{100 * r['iqr_s'] / r['median_s']:.0f} %" if ok else ""
        cells = []
        for i in impls:
            q = by.get((r["model"], r["direction"], r["mode"], i))
            cells.append("" if q is None else f"{q['ratio']:.2f}" if q["ratio"] is not None else q["status"])
        lines.append(f"| {r['model']} ({r['framework']}) | {r['input']} | {r['direction']} | {mode} | {base} | "
                     f"{spread} | " + " | ".join(cells) + " |")
    text = ["\n".join(lines)]
    if result.get("first_call"):
        text.append(first_call.markdown(result["first_call"]))
    notes = [(f"Medians of interleaved blocks (at least {result['timer']['min_blocks']} per arm); threads: "
              f"{_threads_line(result['threads_in_effect'])}; GELULAB_KERNEL_COMPILE={result['kernel_compile']} "
              "in the timing process, the user's setting in the first-call processes.")]
    if any(r["status"] == "recompiled" for r in result["rows"]):
        notes.append("† the compiler compiled again during the timed blocks (its process-wide counters grew; "
                     "model.json has each arm's counts and per-block times); the median leaves such blocks out "
                     "when they are fewer than half.")
    notes += [f"Skipped: {s['what']}: {s['reason']}" for s in result["skipped"]]
    text.append("\n".join(notes))
    return "\n\n".join(text) + "\n"


PARTIAL = "model.partial"  # the results of a run not (yet) complete: model.partial.json and .md


def _write(result: dict, out) -> list:
    """Write `result` (its "partial" says which files): a complete one to out/model.json and out/model.md, each
    replaced atomically, then this run's partial files removed; a partial one (after each group, or interrupted)
    to out/model.partial.json and .md only, so the last complete model.json stays until the new one is complete.
    Returns the paths written."""
    data = {k: v for k, v in result.items() if k != "backends"}
    data["environment"] = environment(result["backends"])
    data["ratios"] = result["ratios"] = ratios(result["rows"])
    stem = PARTIAL if result["partial"] else "model"
    paths = [write_json(out / f"{stem}.json", data), atomic_write_text(out / f"{stem}.md", markdown(result))]
    if not result["partial"]:
        for suffix in (".json", ".md"):
            (out / f"{PARTIAL}{suffix}").unlink(missing_ok=True)
    return paths


def run(args) -> int:
    """`gelulab bench --model`: measure, write DIR/model.json and DIR/model.md, print the table; returns 0 when
    every arm was timed, 1 when none was or one failed. Raises ValueError for a bad option or an unwritable --out
    before anything is timed; core.plumbing.output.Interrupted on Ctrl-C after writing what was measured (marked
    partial)."""
    opts = options(args)
    if args.threads is not None:
        if not (isinstance(args.threads, int) and args.threads > 0):
            raise ValueError(f"--threads={args.threads!r}; expected a positive int")
        os.environ["GELULAB_THREADS"] = str(args.threads)
    os.environ.setdefault("GELULAB_KERNEL_COMPILE", "wait")  # core.plumbing.config.KERNEL_COMPILE_ENV, as the command line (gelulab.cli) sets it
    from gelulab.backends import reproducible

    reproducible(threads=config.threads())  # before any framework loads: thread counts, x64, no TF32
    out = check_writable(args.out)
    with hold(out):  # one run at a time in --out (core.plumbing.lock)
        return _run(args, opts, out)


def _run(args, opts: dict, out) -> int:
    """The body of run, with --out (a Path) held."""
    start = time.perf_counter()
    result = {"schema": SCHEMA, "command": shlex.split(command_line()), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "quick": opts["quick"], "sizes": opts["sizes"].__dict__, "timer": dict(opts["timer"].__dict__),
              "kernel_compile": config.kernel_compile(), "impls": list(opts["impls"]), "modes": list(opts["modes"]),
              "threads_in_effect": {}, "models": {}, "rows": [], "first_call": None, "skipped": [], "backends": [],
              "partial": True}

    def note(text):
        print(text, file=sys.stderr, flush=True)

    try:
        measure(opts, result, seed=args.seed, progress=note, checkpoint=lambda: _write(result, out))
    except KeyboardInterrupt:
        result["elapsed_s"] = time.perf_counter() - start
        paths = _write(result, out)
        raise Interrupted(f"interrupted; the {len(result['rows'])} rows measured are in {paths[0]} (marked partial)")
    result.update(partial=False, elapsed_s=time.perf_counter() - start)
    paths = _write(result, out)
    print(markdown(result))
    ok = sum(r["status"] == "ok" for r in result["rows"])
    print(f"{ok}/{len(result['rows'])} arms timed cleanly in {result['elapsed_s']:.0f} s; wrote "
          f"{', '.join(str(p) for p in paths)}", file=sys.stderr)
    finite = all(q["ratio"] is not None and math.isfinite(q["ratio"]) for q in result["ratios"])
    return 0 if ok and all(r["status"] in TIMED for r in result["rows"]) and finite else 1
