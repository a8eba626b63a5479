"""`gelulab bench --model`: gelulab inside real models, against each model's own activation, side by side.

    gelulab bench --model [--quick] [--backend torch,tensorflow,jax] [--impl ...] [--mode eager,compiled]
                  [--subject bert,bert-tanh,block,mlp,overhead,exit,first-call] [--threads N] [--out DIR]

Models (one module each): a transformers BertModel, the packaged all-MiniLM-L6-v2 (backends/torch/model_bench.py),
a Keras MLP (backends/tensorflow/model_bench.py, Keras on TensorFlow) and a Flax MLP (backends/jax/model_bench.py). For
each model, step (forward; training step: forward, backward, Adam) and mode (eager; compiled: torch.compile,
tf.function, jax.jit), its arms are timed side by side: "builtin" (the framework op: the model's own activation),
"default" (gelulab's layer constructed with no impl argument, whatever the library's default is; the report names the
impl it resolves to, e.g. "default (builtin)"), gelulab's "kernel" and "formula", each a model of its own with the same
weights, with the shared timer (benchmarks/timer.py through benchmarks.runner.run_calls: first call and warm-up apart,
then interleaved blocks, medians). Ratios are arm ÷ builtin of the medians measured in the same group. Two more torch
models (backends/torch/model_bench.py): the BertModel with tanh GELU (gelulab.swap (model, to="gelu_tanh") against the
weights loaded with hidden_act="gelu_pytorch_tanh"; arms builtin, default) and a transformer-style block LayerNorm(64)
-> Linear(64, 256) -> GELU -> Linear(256, 64) on (64, 64), training step timed from its first step (each arm's first
step reported apart; arms builtin = torch.nn.GELU(), default, kernel). Then the per-call overhead of gelulab's default
layer over the framework's module (1024 float32 values: torch eager, Keras eager, Flax apply outside jit; medians of
many interleaved blocks, microseconds), the process exit (first_call.process_exit: a fresh script builds a small model,
runs a few training steps and prints a timestamp as its last line; seconds from it to the parent's wait() returning),
and the first-call figures of the torch layer (benchmarks/first_call.py: the default layer and GELU(impl="kernel")
against torch.nn.GELU, fresh processes with empty caches, with and without a C++ compiler on PATH, a new shape, a plain
call after torch.func.vmap). The report ends with the owner's bar: each default ÷ framework op ≤ 1.03, the default
layer's exit ≤ 1 s.
--subject runs only the parts named (default all).

Threads: `gelulab.reproducible(threads=--threads or GELULAB_THREADS, default 1)` before any framework loads; the
counts in force are recorded per framework ("threads_in_effect") and printed under the table. In this process
GELULAB_KERNEL_COMPILE defaults to "wait" (as for every gelulab command), so the steady-state rows time the
kernel's compiled loop once built (its build falls in the untimed first call); the first-call processes run
under the user's own setting (unset: gelulab's default). Full sizes: BertModel batch 8 × 128 tokens, MLP
784-1024-1024-10 at batch 128, first calls at 8 × 128 × 1536 float32 (the BertModel's FFN activation), 3 fresh
processes each: about 11 minutes on 2 cores (665 s in one run on a busy machine), most of it torch.compile. --quick:
batch 1 × 16, MLP 32-64-64-10 at batch 16, short timing, one process per first-call figure, no wait for the kernel's
build, and no torch.compile rows unless --mode names compiled: a smoke test of seconds to a minute, whose figures are
not for reading.

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

from gelulab.backends import REGISTRY
from gelulab.backends.tools import with_tool
from gelulab.benchmarks import first_call
from gelulab.benchmarks.runner import hooks, run_calls
from gelulab.benchmarks.timer import TimerConfig
from gelulab.core.plumbing import config
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.core.plumbing.provenance import command_line
from gelulab.core.plumbing.report import atomic_write_text, environment, write_json

SCHEMA = "gelulab.bench.model/2"
# builtin first: the reference of every ratio (the model's / framework's own op); "default": gelulab's layer with
# no impl argument (the library's default, recorded per framework in "default_impl")
IMPLS = ("builtin", "default", "kernel", "formula")
MODES = ("eager", "compiled")
DIRECTIONS = ("forward", "train step")
SUBJECT = "model_bench"  # the optional module of a backend that holds its model (backends/<name>/model_bench.py)
SUBJECTS = with_tool(SUBJECT)  # the backends with one (their record's tools), in the registry's order
# --subject: which parts run (default all): the models by their KEY (bert: the BertModel with its exact GELU;
# bert-tanh: the BertModel with tanh GELU; block: the transformer-style block; mlp: the Keras and Flax MLPs), the
# per-call overhead of the layers, the process exit, the torch layer's first calls
MODEL_KEYS = ("bert", "bert-tanh", "block", "mlp")
PARTS = MODEL_KEYS + ("overhead", "exit", "first-call")
BAR_RATIO = 1.03  # the owner's bar: each default row within 1.03x of the framework's op
BAR_EXIT_S = 1.0  # and the process exit within 1 s
# grid filters of `gelulab bench` that have no meaning here (the models fix their dtype, sizes and activation)
NOT_HERE = ("device", "activation", "direction", "dtype", "size")


@dataclass(frozen=True)
class Sizes:
    """The sizes of one run. bert_batch × bert_seq: token ids of the BertModel; mlp_widths: the MLPs' layer
    widths (input, hidden..., classes); mlp_batch: their batch; first_shape: the first calls' input; new_shapes:
    the new shape of the first-call processes and that of the steady-state process; repeats: fresh processes
    per first-call figure; settle_s: longest wait for the kernel's compiled loop there (0: none); calls: plain calls
    per median there; exit_repeats: fresh processes per process-exit figure; exit_steps: training steps of the
    script they run."""

    bert_batch: int = 8
    bert_seq: int = 128
    mlp_widths: tuple = (784, 1024, 1024, 10)
    mlp_batch: int = 128
    first_shape: tuple = (8, 128, 1536)
    new_shapes: tuple = ((4, 64, 1536), (1, 33, 1536))
    repeats: int = 3
    settle_s: float = 300.0
    calls: int = 9
    exit_repeats: int = 3
    exit_steps: int = 5


FULL = Sizes()
QUICK = Sizes(bert_batch=1, bert_seq=16, mlp_widths=(32, 64, 64, 10), mlp_batch=16, first_shape=(2, 16, 64),
              new_shapes=((1, 8, 64), (1, 4, 64)), repeats=1, settle_s=0.0, calls=5, exit_repeats=1, exit_steps=2)
# a BertModel step takes 0.1-3 s here: at least 9 blocks of one call each, interleaved, per arm
TIMER = TimerConfig(min_block_s=1e-3, min_run_s=1.0, min_blocks=9, max_blocks=200, warmup_s=0.5, warmup_calls=2)
QUICK_TIMER = TimerConfig(min_block_s=5e-4, min_run_s=0.01, min_blocks=3, max_blocks=20, warmup_s=0.0, warmup_calls=1)
# the layers' per-call overhead: calls of a few microseconds, blocks of 2 ms, many blocks
OVERHEAD_TIMER = TimerConfig(min_block_s=2e-3, min_run_s=2.0, min_blocks=51, max_blocks=2000, warmup_s=0.2,
                             warmup_calls=100)
QUICK_OVERHEAD_TIMER = TimerConfig(min_block_s=5e-4, min_run_s=0.02, min_blocks=5, max_blocks=50, warmup_s=0.0,
                                   warmup_calls=10)
OVERHEAD_SIZE = 1024  # floats per call


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
    """--backend, else GELULAB_BACKEND, else every backend with a model (SUBJECTS)."""
    if given:
        return _values("backend", given, tuple(SUBJECTS))
    from gelulab.backends import requested_backends

    named = requested_backends()
    return tuple(b for b in SUBJECTS if named is None or b in named)


def options(args) -> dict:
    """The run's settings from parsed `gelulab bench` arguments: {"backends", "impls" (builtin always first),
    "modes", "parts" (--subject), "sizes", "timer", "quick", "slow_compiled" (whether the models whose compiler
    takes minutes, SLOW_COMPILE in their module, run compiled)}. Raises ValueError for a grid
    filter that does not apply to --model, an unknown value, or a bad --min-run-s."""
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
            "modes": _values("mode", args.mode, MODES),
            "parts": _values("subject", getattr(args, "subject", None), PARTS),
            "sizes": QUICK if args.quick else FULL, "timer": timer,
            "quick": bool(args.quick), "slow_compiled": not args.quick or bool(args.mode)}


def subject(backend: str):
    """The model module of a backend (backends/<name>/model_bench.py: torch's BertModel, the Keras MLP on
    tensorflow, the Flax MLP on jax)."""
    return importlib.import_module(f"gelulab.backends.{backend}.{SUBJECT}")


def _public_api(backend: str) -> dict:
    """What the model modules get from gelulab's public API (they are backend modules and do not import it):
    swap, gelulab.swap; layer(impl), gelulab's exact-GELU layer of `backend` (torch: gelulab.layers.torch.GELU,
    tensorflow: gelulab.layers.keras.GELU, jax: gelulab.layers.flax.GELU), constructed with no impl argument when
    impl is None (the library's default)."""
    from gelulab.api.surgery import swap

    def layer(impl):
        module = importlib.import_module(f"gelulab.layers.{REGISTRY[backend].layers}")
        return module.GELU(approximate="none", **({} if impl is None else {"impl": impl}))

    return {"swap": swap, "layer": layer}


def default_impl(backend: str) -> str:
    """The impl gelulab's GELU layer computes with when constructed with no impl argument, on `backend` (the
    catalogue's default: core.contracts.interface.default_impl)."""
    from gelulab.core.activations import get_activation

    return get_activation("gelu_none").impl_for(None, backend)


def models(mod) -> list:
    """The models a backend's model module holds (its models(), else the module itself)."""
    return mod.models() if hasattr(mod, "models") else [mod]


def measure(opts: dict, result: dict, seed: int = 0, progress=print, checkpoint=None) -> dict:
    """Time every group of `opts` (options()), filling `result` as it goes (so an interruption keeps what is
    measured): result["rows"] (one per arm: the axes framework, model, input, direction, mode, compiler, impl, arm
    (its label), first_step and run_calls' fields, seconds per call), "models" (what each model is),
    "threads_in_effect", "default_impl" (per framework), "backends" (the Backend objects, for
    core.plumbing.report.environment), "skipped" ({"what", "reason"}), "overhead" (overhead(), per framework),
    "process_exit" (first_call.process_exit), then "first_call" (first_call.measure) when a selected backend's
    module has first-call figures (FIRST_CALL_SCRIPT: torch's); each part only where opts["parts"] names it.
    checkpoint(): called after each group. Returns `result`."""
    from gelulab.backends import BackendUnavailable, get_backend

    sizes, timer, parts = opts["sizes"], opts["timer"], opts.get("parts", PARTS)
    result.setdefault("default_impl", {})
    result.setdefault("overhead", [])
    for name in opts["backends"]:
        mod = subject(name)
        chosen = [m for m in models(mod) if getattr(m, "KEY", "") in parts]
        wants_first_call = hasattr(mod, "FIRST_CALL_SCRIPT") and "first-call" in parts
        if not chosen and "overhead" not in parts and not wants_first_call and "exit" not in parts:
            continue
        why = mod.unavailable()  # missing packages; imports nothing
        if why is None:
            try:  # the framework loads here, under the settings of reproducible()
                backend = get_backend(mod.BACKEND)
                why = getattr(mod, "unsupported", lambda: None)()
            except (BackendUnavailable, ImportError, RuntimeError) as e:
                why = str(e).splitlines()[0]
        if why:
            for m in chosen or [mod]:
                result["skipped"].append({"what": m.MODEL, "reason": why})
                progress(f"gelulab bench --model: skipping the {m.MODEL}: {why}")
            continue
        bench = hooks(mod.BACKEND)
        result["backends"].append(backend)
        result["threads_in_effect"][name] = bench.threads()
        result["default_impl"][name] = default_impl(name)
        api = _public_api(name)
        for m in chosen:
            result["models"][m.MODEL] = {**m.describe(sizes), "key": m.KEY, "framework_op": m.LABEL}
            arms = [i for i in opts["impls"] if i in m.ARMS]
            for direction in m.DIRECTIONS:
                for mode in opts["modes"]:
                    if mode == "compiled" and getattr(mod, "SLOW_COMPILE", False) and not opts["slow_compiled"]:
                        result["skipped"].append({"what": f"{m.MODEL} {direction} compiled",
                                                  "reason": f"--quick leaves out {m.COMPILER} (minutes); add --mode "
                                                            "compiled to include it"})
                        continue
                    progress(f"… {m.MODEL} {direction}, {mode}")
                    axes = [{"framework": name, "model": m.MODEL, "input": m.shape_text(sizes),
                             "direction": direction, "mode": mode,
                             "compiler": m.COMPILER if mode == "compiled" else "eager", "impl": impl,
                             "arm": arm_label(impl, result["default_impl"][name], m.LABEL)}
                            for impl in arms]
                    builders = [m.builder(impl, direction, mode, sizes, seed, **api) for impl in arms]
                    if hasattr(m, "prime"):  # the process's one-time costs on no arm's first step
                        if mode == "compiled":
                            bench.fresh()
                        m.prime(mode, seed)
                    group = run_calls(bench, axes, builders, [mode == "compiled"] * len(axes), timer)
                    for row in group:
                        row["first_step"] = bool(getattr(m, "first_step", False))
                    result["rows"] += group
                    if checkpoint:
                        checkpoint()
        if "overhead" in parts and hasattr(mod, "overhead_builders"):
            progress(f"… {name}: the layer's per-call overhead")
            result["overhead"].append(overhead(name, mod, bench, api, opts))
            if checkpoint:
                checkpoint()
    ran = [b for b in SUBJECTS if b in result["threads_in_effect"]]
    if "exit" in parts and ran:
        result["process_exit"] = {"repeats": sizes.exit_repeats, "steps": sizes.exit_steps,
                                  "threads": config.threads(), "rows": []}
        for name in ran:  # --quick: the default arm; else each arm of the module's EXIT_ARMS that --impl allows
            arms = ("default",) if opts["quick"] else tuple(
                a for a in subject(name).EXIT_ARMS if a in ("default", "framework") or a in opts["impls"])
            got = first_call.process_exit([name], arms, sizes.exit_repeats, config.threads(),
                                          sizes.exit_steps, progress=lambda what: progress(f"… {what}"))
            for row in got["rows"]:
                row["impl"] = result["default_impl"][name] if row["arm"] == "default" else row["arm"]
            result["process_exit"]["rows"] += got["rows"]
        if checkpoint:
            checkpoint()
    first = [b for b in first_call.first_call_backends() if b in opts["backends"] and b in result["threads_in_effect"]]
    if "first-call" in parts and first:
        result["first_call"] = first_call.measure(
            sizes.first_shape, sizes.new_shapes, sizes.repeats, threads=config.threads(), settle_s=sizes.settle_s,
            calls=sizes.calls, progress=lambda what: progress(f"… {first[0]} layer: {what}"),
            kernel="kernel" in opts["impls"], backend=first[0])
    return result


def arm_label(impl: str, default: str, op: str) -> str:
    """What an arm computes, for the report: "framework op" (the model's own activation, `op`), "default
    (builtin)" (gelulab's layer with no impl argument, computing with `default`), "kernel", "formula"."""
    return {"builtin": f"framework op: {op}", "default": f"default ({default})"}.get(impl, impl)


def overhead(name: str, mod, bench, api: dict, opts: dict) -> dict:
    """The per-call overhead of gelulab's default layer over the framework's module (mod.overhead_builders: torch
    eager, Keras eager, Flax's apply outside jit), both called on OVERHEAD_SIZE float32 values, timed side by
    side: {"framework", "what", "size", "ours" and "theirs" (run_calls rows), "overhead_us" (difference of the
    medians, microseconds), "ratio", "status"}."""
    ours, theirs = mod.overhead_builders(api["layer"], OVERHEAD_SIZE)
    timer = QUICK_OVERHEAD_TIMER if opts["quick"] else OVERHEAD_TIMER
    if opts["timer"].min_run_s != (QUICK_TIMER if opts["quick"] else TIMER).min_run_s:
        timer = replace(timer, min_run_s=min(timer.min_run_s, opts["timer"].min_run_s))
    what = mod.OVERHEAD  # what is timed, in words: "gelulab.layers.torch.GELU()(x) − torch.nn.GELU()(x)"
    axes = [{"framework": name, "arm": arm} for arm in ("default", "framework module")]
    a, b = run_calls(bench, axes, [ours, theirs], [False, False], timer)
    ok = a["status"] == "ok" and b["status"] == "ok"
    return {"framework": name, "what": what, "size": OVERHEAD_SIZE, "impl": default_impl(name),
            "status": "ok" if ok else (a.get("error") or b.get("error") or "error"),
            "ours": {k: v for k, v in a.items() if k != "samples_s"},
            "theirs": {k: v for k, v in b.items() if k != "samples_s"},
            "overhead_us": (a["median_s"] - b["median_s"]) * 1e6 if ok else None,
            "ratio": a["median_s"] / b["median_s"] if ok else None}


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


def _default_label(result: dict) -> str:
    """"default (builtin)": gelulab's layer with no impl argument and what it computes with (per framework when
    they differ)."""
    impls = dict(result.get("default_impl") or {})
    values = set(impls.values())
    if len(values) == 1:
        return f"default ({values.pop()})"
    return "default (" + ", ".join(f"{k} {v}" for k, v in impls.items()) + ")" if impls else "default"


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def bar(result: dict) -> dict:
    """The owner's bar: {"default_rows": [(label, ratio)], "worst_default": the largest default ÷ framework op
    (None without one), "ratio_ok", "exit": [(label, median s)], "worst_exit_s", "exit_ok"} (ratio_ok / exit_ok
    None where nothing was measured)."""
    rows = [(f"{q['model']} {q['direction']} {q['mode']}", q["ratio"]) for q in result.get("ratios", [])
            if q["impl"] == "default" and q["ratio"] is not None]
    worst = max((r for _, r in rows), default=None)
    exits = [(f"{r['framework']} {r['arm']}", r["median_s"]) for r in (result.get("process_exit") or {}).get("rows", [])
             if r["arm"] == "default" and "median_s" in r]
    worst_exit = max((t for _, t in exits), default=None)
    return {"default_rows": rows, "worst_default": worst, "ratio_ok": None if worst is None else worst <= BAR_RATIO,
            "exit": exits, "worst_exit_s": worst_exit,
            "exit_ok": None if worst_exit is None else worst_exit <= BAR_EXIT_S}


def markdown(result: dict) -> str:
    """The Markdown report: the ratio table (one line per model, step and mode; the framework op's median in ms
    and its interquartile range in % of the median, a gauge of the machine's noise; each arm ÷ the framework op),
    the first-step table (the models timed from their first step), the layers' per-call overhead, the process
    exit, the first-call table, the bar, the framework op of each model, the threads and what was skipped."""
    impls = [i for i in dict.fromkeys(r["impl"] for r in result["rows"]) if i != "builtin"]
    names = {"default": _default_label(result)}
    lines = ["| model | input | step | mode | framework op (ms) | IQR | "
             + " | ".join(f"{names.get(i, i)} ÷ op" for i in impls) + " |", "|---|---|---|---|---|---|"
             + "---|" * len(impls)]
    by = {(q["model"], q["direction"], q["mode"], q["impl"]): q for q in result["ratios"]}
    for r in result["rows"]:
        if r["impl"] != "builtin":
            continue
        mode = "eager" if r["mode"] == "eager" else f"compiled ({r['compiler']})"
        group = [q for q in result["rows"] if all(q[k] == r[k] for k in ("model", "direction", "mode"))]
        if any(q["status"] == "recompiled" for q in group):
            mode += " †"
        ok = r["status"] in TIMED
        base = _ms(r["median_s"]) if ok else r["status"]
        spread = f"{100 * r['iqr_s'] / r['median_s']:.0f} %" if ok else ""
        cells = []
        for i in impls:
            q = by.get((r["model"], r["direction"], r["mode"], i))
            cells.append("" if q is None else f"{q['ratio']:.2f}" if q["ratio"] is not None else q["status"])
        lines.append(f"| {r['model']} ({r['framework']}) | {r['input']} | {r['direction']} | {mode} | {base} | "
                     f"{spread} | " + " | ".join(cells) + " |")
    text = ["\n".join(lines)]
    first = [r for r in result["rows"] if r.get("first_step") and r["impl"] == "builtin"]
    if first:
        arms = [i for i in dict.fromkeys(r["impl"] for r in result["rows"] if r.get("first_step"))]
        head = ["timed from the first step", "input", "mode"] + [
            f"{'framework op' if i == 'builtin' else names.get(i, i)}: first step (ms)" for i in arms] + [
            f"{names.get(i, i)}: first ÷ op" for i in arms if i != "builtin"]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in first:
            group = {q["impl"]: q for q in result["rows"]
                     if all(q[k] == r[k] for k in ("model", "direction", "mode")) and q["status"] in TIMED}
            cells = [_ms(group[i]["first_call_s"]) if i in group else "" for i in arms]
            cells += [f"{group[i]['first_call_s'] / group['builtin']['first_call_s']:.2f}"
                      if i in group and "builtin" in group else "" for i in arms if i != "builtin"]
            mode = "eager" if r["mode"] == "eager" else f"compiled ({r['compiler']})"
            out.append(f"| {r['model']} {r['direction']} | {r['input']} | {mode} | " + " | ".join(cells) + " |")
        text.append("\n".join(out))
    if result.get("overhead"):
        out = [("| layer call, 1024 float32 | gelulab default (µs) | framework's module (µs) | overhead (µs) | "
                "ratio |"), "|---|---|---|---|---|"]
        for o in result["overhead"]:
            if o["overhead_us"] is None:
                out.append(f"| {o['what']} | {o['status']} | | | |")
                continue
            out.append(f"| {o['what']} (default: {o['impl']}) | {o['ours']['median_s'] * 1e6:.2f} | "
                       f"{o['theirs']['median_s'] * 1e6:.2f} | {o['overhead_us']:.2f} | {o['ratio']:.2f} |")
        text.append("\n".join(out))
    pe = result.get("process_exit")
    if pe and pe["rows"]:
        out = [(f"| process exit: last line to exit, a script of {pe['steps']} training steps | arm | "
                "median (s) | max (s) | whole process (s) |"), "|---|---|---|---|---|"]
        for r in pe["rows"]:
            arm = {"default": f"default ({r.get('impl')})", "framework": "framework op"}.get(r["arm"], r["arm"])
            if "error" in r:
                out.append(f"| {r['framework']} | {arm} | {r['error']} | | |")
            else:
                out.append(f"| {r['framework']} | {arm} | {r['median_s']:.3f} | {r['max_s']:.3f} | "
                           f"{r['total_s']:.2f} |")
        text.append("\n".join(out))
    if result.get("first_call"):
        text.append(first_call.markdown(result["first_call"]))
    verdict = bar(result)
    notes = []
    if verdict["ratio_ok"] is not None or verdict["exit_ok"] is not None:
        parts = []
        if verdict["ratio_ok"] is not None:
            parts.append(f"every default ÷ op ≤ {BAR_RATIO}: {'yes' if verdict['ratio_ok'] else 'no'} (worst "
                         f"{verdict['worst_default']:.3f}, {len(verdict['default_rows'])} rows)")
        if verdict["exit_ok"] is not None:
            parts.append(f"exit ≤ {BAR_EXIT_S:g} s with the default layer: {'yes' if verdict['exit_ok'] else 'no'} "
                         f"(worst median {verdict['worst_exit_s']:.2f} s)")
        notes.append("Bar: " + "; ".join(parts) + ".")
    ops = [f"{name}: {m['framework_op']}" for name, m in result.get("models", {}).items() if m.get("framework_op")]
    if ops:
        notes.append("Framework op (the reference of every ratio): " + "; ".join(ops) + ". "
                     f"{names['default']}: gelulab's layer constructed with no impl argument.")
    notes.append(f"Medians of interleaved blocks (at least {result['timer']['min_blocks']} per arm); threads: "
                 f"{_threads_line(result['threads_in_effect'])}; GELULAB_KERNEL_COMPILE={result['kernel_compile']} "
                 "in the timing process, the user's setting in the first-call and exit processes.")
    if first:
        notes.append("First step: each arm's first training step on its freshly built model, after two steps of the "
                     "same block with ReLU in that mode (compiled: compilation included; an arm whose graph equals "
                     "an earlier arm's may find it in inductor's caches).")
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
    data["bar"] = bar(result)
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
    # core.plumbing.config.KERNEL_COMPILE_ENV, as the command line (gelulab.cli) sets it
    os.environ.setdefault("GELULAB_KERNEL_COMPILE", "wait")
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
              "parts": list(opts["parts"]), "threads_in_effect": {}, "default_impl": {}, "models": {}, "rows": [],
              "overhead": [], "process_exit": None, "first_call": None, "skipped": [], "backends": [],
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
