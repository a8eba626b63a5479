"""`python -m gelulab.benchmarks.identify`: time per callable of `gelulab.identify`, on the CPU.

For every case of CASES whose framework is installed (the frameworks' own GELU, ReLU and SiLU functions and
layers, transformers' activation modules, gelulab's own, and lambdas), in one process:
* the reference cache (mpmath, core.reference, at the probe points in float32 and float64), built once;
* "first": the first identify(fn) (includes the framework's first call: jax.jit tracing and compiling);
* "median": the median of --repeats further calls;
* "x call": median ÷ the median time of one plain call fn(x) on the same float32 probe array, side by side.
The target is under one second per callable. Threads: GELULAB_THREADS (default 1) for torch (set_num_threads),
jax (XLA_FLAGS, before jax is imported) and TensorFlow (intra/inter-op, before its runtime starts); recorded in
identify.json with the versions. jax_enable_x64 is left off, as a user has it: jax is probed in float32 only.

Writes identify.md (the table of the README's "Which GELU is this?" section) and identify.json into --out
(default results/bench_identify).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from gelulab.core import config
from gelulab.core.report import atomic_write_text, cpu_model, write_json

# (framework the case needs, Python expression as `gelulab identify` reads it)
CASES = (
    ("torch", "torch.nn.functional.gelu"),
    ("torch", "functools.partial(torch.nn.functional.gelu, approximate='tanh')"),
    ("torch", "torch.nn.GELU()"),
    ("torch", "torch.nn.GELU('tanh')"),
    ("torch", "torch.nn.functional.relu"),
    ("torch", "torch.nn.functional.silu"),
    ("torch", "torch.nn.SiLU()"),
    ("jax", "jax.nn.gelu"),
    ("jax", "functools.partial(jax.nn.gelu, approximate=False)"),
    ("jax", "jax.nn.relu"),
    ("jax", "jax.nn.silu"),
    ("tensorflow", "tf.nn.gelu"),
    ("tensorflow", "functools.partial(tf.nn.gelu, approximate=True)"),
    ("tensorflow", "tf.nn.relu"),
    ("tensorflow", "tf.nn.silu"),
    ("keras", "keras.activations.gelu"),
    ("keras", "functools.partial(keras.activations.gelu, approximate=True)"),
    ("keras", "keras.activations.relu"),
    ("keras", "keras.activations.silu"),
    ("keras", "keras.layers.Activation('gelu')"),
    ("transformers", "transformers.activations.GELUActivation()"),
    ("transformers", "transformers.activations.GELUActivation(use_gelu_python=True)"),
    ("transformers", "transformers.activations.GELUTanh()"),
    ("transformers", "transformers.activations.GELUTanh(use_gelu_tanh_python=True)"),
    ("transformers", "transformers.activations.NewGELUActivation()"),
    ("transformers", "transformers.activations.FastGELUActivation()"),
    ("transformers", "transformers.activations.AccurateGELUActivation()"),
    ("transformers", "transformers.activations.QuickGELUActivation()"),
    ("transformers", "transformers.activations.SiLUActivation()"),
    ("transformers", "transformers.activations.ClippedGELUActivation(-10, 10)"),
    ("torch", "lambda x: x * torch.sigmoid(1.702 * x)"),
    ("torch", "lambda x: x * torch.sigmoid(1.5 * x)"),
    ("torch", "lambda x: 0.5 * x * (1 + torch.erf(x / 2 ** 0.5))"),
    ("torch", "lambda x: x * torch.sigmoid(x)"),
    ("torch", "torch.tanh"),
    ("numpy", "gelulab.gelu"),
    ("numpy", "functools.partial(gelulab.gelu, approximate='tanh')"),
    ("torch", "gelulab.layers.torch.GELU('sigmoid')"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the identify benchmark."""
    parser.add_argument("--out", default="results/bench_identify", help="results folder")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per callable after the first (default 5)")


def _set_threads(threads: int) -> dict:
    """Apply `threads` to every installed framework before its first computation; returns the counts in force."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "jax" not in sys.modules and "intra_op_parallelism_threads" not in flags:
        os.environ["XLA_FLAGS"] = (f"{flags} --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
                                   f"intra_op_parallelism_threads={threads}").strip()
    out = {"XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}
    if importlib.util.find_spec("torch"):
        import torch  # before TensorFlow: importing TensorFlow first can break torch's import

        torch.set_num_threads(threads)
        out["torch"] = torch.get_num_threads()
    if importlib.util.find_spec("tensorflow"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:
            pass  # the runtime had started: the counts below are those in force
        out["tensorflow"] = {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                             "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}
    return out


def _available(need: str) -> bool:
    return importlib.util.find_spec(need) is not None


def run(args) -> int:
    """Time identify on every available case; write identify.md and identify.json; returns 0. Raises ValueError
    for --repeats < 1."""
    if args.repeats < 1:
        raise ValueError(f"--repeats={args.repeats}; expected a positive integer")
    threads = _set_threads(config.threads())
    from gelulab import probe
    from gelulab.identify_command import evaluate

    t0 = time.perf_counter()
    probe._references("float32")
    probe._references("float64")
    reference_s = time.perf_counter() - t0
    rows, skipped = [], []
    for need, expression in CASES:
        if not _available(need):
            skipped.append(expression)
            continue
        fn = evaluate(expression)
        first = probe.identify(fn)
        times = [probe.identify(fn).seconds for _ in range(args.repeats)]
        x = probe._native(first.framework, probe.PROBE.astype(np.float32))
        calls = []
        for _ in range(max(args.repeats, 5)):
            t = time.perf_counter()
            fn(x)
            calls.append(time.perf_counter() - t)
        median = statistics.median(times)
        rows.append({"expression": expression, "framework": first.framework, "variant": first.variant,
                     "distance": first.distances[first.nearest], "nearest": first.nearest,
                     "next": _next(first), "distance64": (first.distances64 or {}).get(first.nearest),
                     "note64": first.note64, "faults": [[f.name, f.detail] for f in first.faults],
                     "first_s": first.seconds, "median_s": median, "call_s": statistics.median(calls),
                     "tolerance": first.tolerance})
        print(f"{expression}: {first.variant} ({first.seconds:.3f} s first, {median:.4f} s median)", flush=True)
    env = {"python": platform.python_version(), "numpy": np.__version__, "cpu": cpu_model(),
           "cores": os.cpu_count(), "threads": config.threads(), "threads_in_effect": threads,
           "versions": _versions()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "identify.json", {"environment": env, "reference_s": reference_s, "rows": rows,
                                       "skipped": skipped, "repeats": args.repeats})
    text = markdown(rows, reference_s, env, skipped)
    atomic_write_text(out / "identify.md", text)
    print(text)
    return 0


def _next(result) -> list:
    others = sorted((d, k) for k, d in result.distances.items() if k != result.nearest)
    return [others[0][1], others[0][0]] if others else []


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "jax", "tensorflow", "keras", "transformers", "mpmath"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def markdown(rows: list, reference_s: float, env: dict, skipped: list) -> str:
    """The benchmark's table: callable, framework, variant, float32 distance to it and to the next nearest,
    float64 distance, the names of the faults seen (their measurements are in identify.json), first and median
    seconds, median ÷ one plain call."""
    lines = [
        ("| callable | probed as | variant | distance (float32) | next nearest | float64 | faults seen | "
         "first s | median s | × call |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        f64 = f"{r['distance64']:.1e}" if r["distance64"] is not None else "-"
        faults = "; ".join(name for name, _ in r["faults"]) or "-"
        variant = r["variant"] or f"none (nearest {r['nearest']})"
        lines.append(f"| `{r['expression']}` | {r['framework']} | {variant} | {r['distance']:.1e} | "
                     f"{r['next'][0]} {r['next'][1]:.1e} | {f64} | {faults} | {r['first_s']:.3f} | "
                     f"{r['median_s']:.4f} | {r['median_s'] / r['call_s']:.0f} |")
    tol = rows[0]["tolerance"] if rows else float("nan")
    return ("\n".join(lines) + "\n\n"
            f"Distance: max |f - ref| / max(1, |ref|) on the separating points; identified when <= {tol:.1e}. "
            f"Reference cache (mpmath, built once per process): {reference_s:.2f} s. CPU: {env['cpu']}, "
            f"{env['threads']} thread(s); {', '.join(f'{k} {v}' for k, v in env['versions'].items())}."
            + (f" Skipped (not installed): {', '.join(skipped)}." if skipped else "") + "\n")


def main(argv=None) -> int:
    """Entry point of `python -m gelulab.benchmarks.identify`."""
    parser = argparse.ArgumentParser(prog="python -m gelulab.benchmarks.identify", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
