"""`python -m gelulab.benchmarks.identify`: time per callable of `gelulab.identify`, on the CPU.

For every callable the installed backends name (`backends/<name>/subjects.py`: the frameworks' own GELU, ReLU and
SiLU functions and layers, transformers' activation modules, lambdas written in a framework's operations), then
gelulab's own, in one process:
* the reference cache (mpmath, core.parity.reference, at the probe points in float32 and float64), built once;
* "first": the first identify(fn) (includes the framework's first call: jax.jit tracing and compiling);
* "median": the median of --repeats further calls;
* "x call": median ÷ the median time of one plain call fn(x) on the same float32 probe array, side by side.
The target is under one second per callable. Threads: GELULAB_THREADS (default 1), set by
`gelulab.reproducible(threads=..., x64=None, tf32=None)` before any framework computes (torch set_num_threads,
jax XLA_FLAGS, TensorFlow intra/inter-op); each backend's threads() is recorded in identify.json with the
versions. jax_enable_x64 is left off, as a user has it: jax is probed in float32 only.

Writes identify.md (the table of docs/in-your-model.md's "Which GELU is this?" section) and identify.json into --out
(default results/bench_identify).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from gelulab.backends import BACKEND_NAMES, activations_module, capabilities, installed_backends, reproducible
from gelulab.core.plumbing import config
from gelulab.core.plumbing.report import atomic_write_text, cpu_model, write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the identify benchmark."""
    parser.add_argument("--out", default="results/bench_identify", help="results folder")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per callable after the first (default 5)")


def subjects(names) -> dict:
    """{expression: callable} to time: each installed backend's own (backends/<name>/subjects.py,
    core.contracts.contract.Subjects), in the registry's order, then gelulab's own (gelulab.gelu by default, the
    framework's op, and with impl="kernel"; then the kernel of the gelulab layer of each backend whose record names a
    layers module, where the layer is a callable rather than a model: a Flax linen module is audited, with its
    variables, by identify)."""
    import gelulab
    from gelulab.api import audit

    out = {}
    for name in names:
        if "subjects" in capabilities(name).modules:
            out.update(importlib.import_module(f"gelulab.backends.{name}.subjects").subjects())
    out["gelulab.gelu"] = gelulab.gelu  # the default: the framework's own op
    out["functools.partial(gelulab.gelu, impl='kernel')"] = functools.partial(gelulab.gelu, impl="kernel")
    out["functools.partial(gelulab.gelu, approximate='tanh', impl='kernel')"] = functools.partial(
        gelulab.gelu, approximate="tanh", impl="kernel")
    for name in names:
        module = capabilities(name).layers
        if module is not None:
            layer = importlib.import_module(f"gelulab.layers.{module}").GELU("sigmoid", impl="kernel")
            if not audit.is_model(layer):
                out[f"gelulab.layers.{module}.GELU('sigmoid', impl='kernel')"] = layer
    return out


def run(args) -> int:
    """Time identify on every available case; write identify.md and identify.json; returns 0. Raises ValueError
    for --repeats < 1."""
    if args.repeats < 1:
        raise ValueError(f"--repeats={args.repeats}; expected a positive integer")
    names = installed_backends()
    # threads before any framework computes; jax_enable_x64 and TF32 left as a user has them
    reproducible(threads=config.threads(), x64=None, tf32=None, backends=names)
    threads = {name: activations_module(name).threads() for name in names}  # starts no framework runtime
    from gelulab.api import probe

    t0 = time.perf_counter()
    probe._references("float32")
    probe._references("float64")
    reference_s = time.perf_counter() - t0
    rows = []
    skipped = [name for name in BACKEND_NAMES if name not in names and "subjects" in capabilities(name).modules]
    for expression, fn in subjects(names).items():
        first = probe.identify(fn)
        times = [probe.identify(fn).seconds for _ in range(args.repeats)]
        x = probe.native(first.framework, probe.PROBE.astype(np.float32))
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
           "versions": _versions(names)}
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


def _versions(names) -> dict:
    """{package: version}: each registered backend's framework packages (its activations module's versions() where
    installed, its record's `package` "not installed" where not), then transformers' and mpmath's."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in BACKEND_NAMES:
        out.update(activations_module(name).versions() if name in names
                   else {capabilities(name).package: "not installed"})
    for package in ("transformers", "mpmath"):  # the activation modules of transformers' subjects; the reference
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
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
