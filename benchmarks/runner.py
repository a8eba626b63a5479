"""Run the cells of one backend on one device with the shared timer; one result row per cell.

The framework-specific parts (synchronisation, inputs on the device, compiler caches, compilation counts) come
from `backends/<name>/bench.py`, loaded by `hooks(name)`; everything else is the same code for every framework.
"""
from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np

from gelulab.benchmarks.grid import ORDER, Cell
from gelulab.benchmarks.timer import TimerConfig, measure, timed_blocks, warm_up
from gelulab.core.numerics.dtypes import get_dtype

INPUT_SCALE = 3.0  # inputs ~ N(0, 3^2): both tails of GELU and its clamp-free middle are exercised


def hooks(name: str) -> ModuleType:
    """The benchmark hooks module `backends.<name>.bench` (imports that framework)."""
    return importlib.import_module(f"gelulab.backends.{name}.bench")


def input_array(dtype: str, size: int, seed: int = 0) -> np.ndarray:
    """Host input: `size` draws of N(0, INPUT_SCALE^2) from numpy's default_rng(seed), rounded to `dtype`.
    Shape (size,). Raises ValueError for an unknown dtype."""
    np_dtype = get_dtype(dtype).np_dtype
    return (np.random.default_rng(seed).standard_normal(size) * INPUT_SCALE).astype(np_dtype)


def sync_overhead(bench: ModuleType, x, config: TimerConfig) -> float:
    """Seconds one `bench.sync` of an already computed array costs (part of every timed call of that backend)."""
    return measure(lambda: x, bench.sync, config).median_s


def _message(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def run_group(backend, bench: ModuleType, cells: list[Cell], x, config: TimerConfig) -> list[dict]:
    """Time cells that share one input side by side (interleaved blocks, benchmarks.timer.timed_blocks); each
    cell times `backend.function(cell.activation, cell.impl, ORDER[cell.direction], cell.mode)(x)`.

    backend: the Backend (core.contracts.interface); bench: its hooks module; x: the input already on the device; cells:
    same backend, device, mode, dtype and size (the runner groups them so, with one direction per group).
    Returns one row per cell: its axes, "status" ("ok"; "recompiled" when a compilation counter grew during the
    timed rounds; "not compiled" when a compiled cell's first call compiled nothing; "error" with "error":
    message), the Timing fields (seconds per call), and for compiled cells "compile_stats" (snapshots
    "before_first_call", "after_warmup", "before_timing", "after_timing"), "compiles_before_timing" (compilations
    during the cell's own first call and warm-up) and "recompiles_in_timed_loop" (torch counts compilations
    process-wide, so there a recompile flags every cell of the group). A failing cell never raises (e.g. a dtype
    a framework has no kernel for); its message is kept and the other cells go on.
    """
    builders = [lambda c=c: _activation_call(backend, c, x) for c in cells]
    return run_calls(bench, [c.as_dict() for c in cells], builders, [c.mode == "compiled" for c in cells], config)


def _activation_call(backend, cell: Cell, x):
    fn = backend.function(cell.activation, cell.impl, ORDER[cell.direction], cell.mode)
    return (lambda: fn(x)), fn


def run_calls(bench: ModuleType, axes: list[dict], builders: list, compiled: list[bool],
              config: TimerConfig) -> list[dict]:
    """Time several callables side by side (interleaved blocks, benchmarks.timer.timed_blocks); the shared body
    of run_group and of the training-step benchmark (benchmarks/trainstep.py).

    axes[i]: the coordinates of row i; builders[i]() returns (call, fn): `call()` runs the operation once on
    inputs already on the device and returns its result (synchronised with bench.sync), `fn` is what
    bench.compile_stats counts compilations of; compiled[i]: whether that callable is compiled. Returns one row
    per callable, as documented in run_group. A builder or call that raises gives an "error" row, never raises.
    """
    if any(compiled):
        bench.fresh()
    rows = [{**a, "status": "ok"} for a in axes]
    live = []  # (index, call, warm, probe, stats before first call, stats after warm-up)
    for i, build in enumerate(builders):
        try:
            call, fn = build()
            probe = (lambda fn=fn: bench.compile_stats(fn)) if compiled[i] else None
            before_first = probe() if probe else None
            warm = warm_up(call, bench.sync, config)
            live.append((i, call, warm, probe, before_first, probe() if probe else None))
        except Exception as e:  # noqa: BLE001 - one unsupported cell must not stop the grid
            rows[i].update(status="error", error=_message(e))
    try:
        timings = timed_blocks([v[1] for v in live], [v[2] for v in live], bench.sync, config,
                               probes=[v[3] or (lambda: None) for v in live])
    except Exception as e:  # noqa: BLE001
        for v in live:
            rows[v[0]].update(status="error", error=_message(e))
        return rows
    for (i, _, _, probe, before_first, after_warm), timing in zip(live, timings):
        row = rows[i]
        row.update(timing.as_dict())
        del row["probe_before"], row["probe_after"]
        if probe:
            row["compile_stats"] = {"before_first_call": before_first, "after_warmup": after_warm,
                                    "before_timing": timing.probe_before, "after_timing": timing.probe_after}
            row["compiles_before_timing"] = after_warm["compiles"] - before_first["compiles"]
            row["recompiles_in_timed_loop"] = counter_growth(timing.probe_before, timing.probe_after)
            if row["compiles_before_timing"] < 1:
                row["status"] = "not compiled"
            elif row["recompiles_in_timed_loop"]:
                row["status"] = "recompiled"
    return rows


def run_cell(backend, bench: ModuleType, cell: Cell, x, config: TimerConfig) -> dict:
    """Time one cell alone: run_group with a single cell; returns its row."""
    return run_group(backend, bench, [cell], x, config)[0]


def counter_growth(before: dict, after: dict) -> int:
    """How much the compilation counters grew between two compile_stats() snapshots (sum over all counters, so
    for torch a frame dynamo converted or a graph break counts as well as a compiled graph)."""
    return sum((after[k] or 0) - (before[k] or 0) for k in before)
