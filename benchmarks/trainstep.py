"""Training-step benchmark (issue 5): one moons MLP training step per backend, eager and compiled, ReLU vs GELU.

The step is the matched regime's minibatch step of the moons study (core/moons.py; the step functions of
backends/<name>/moons.py, `bench_step`): the default MoonsConfig network 2 -> 64 -> 64 -> 1, batch 32, BCE on
logits, Adam (Kingma & Ba 2015, Algorithm 1, experiments.moons.config.adam_step) with lr 1e-3, from the shared Glorot-uniform
initial weights on the first minibatch of seed SEED's data, so every backend steps on the same numbers. One call =
forward, backward and the Adam update of every parameter. Modes: "eager" (op by op: jax un-jitted, torch eager,
TF eager) and "compiled" (jax.jit, torch.compile, tf.function(jit_compile=True)).

Cells: backend × device × mode × activation (relu, gelu_none: ReLU vs exact GELU) × impl (builtin, formula, kernel) ×
dtype (float32, float64: the moons training dtypes). The cells of one (backend, device, dtype, mode) are timed
side by side with the shared timer (benchmarks.runner.run_calls, interleaved blocks), so their GELU ÷ ReLU
ratio is fair. Rows carry the activation-benchmark axes with direction "train step" and size = the batch size
(32), and go into result["train_step"] of bench.json; times are seconds per step.
"""
from __future__ import annotations

import importlib
import importlib.util

from gelulab.benchmarks.grid import GridSpec
from gelulab.benchmarks.runner import run_calls
from gelulab.benchmarks.timer import TimerConfig
from gelulab.experiments.moons.config import TRAIN_DTYPES, MoonsConfig, make_data, train_spec

ARMS = ("relu", "gelu_none")  # ReLU vs exact GELU (x Φ(x) via erf)
SEED = 0
DIRECTION = "train step"


QUICK_IMPLS = ("formula",)  # --quick: gelulab's formula only (each torch.compile group costs seconds)


def cells(spec: GridSpec, backend: str, device: str, modes_offered, impls=None) -> list[dict]:
    """The train-step cells of `spec` for one backend and device, in run order (dtype, mode, then activation and
    impl: the cells timed side by side). The grid's activation, impl, mode and dtype filters apply; activations
    other than relu / gelu_none, dtypes other than float32 / float64 and backends without a moons module (numpy)
    have no train-step cell. impls: overrides spec.impls when given. Each cell is a dict with the grid axes (direction "train step", size = batch size).
    """
    if importlib.util.find_spec(f"gelulab.backends.{backend}.moons") is None:
        return []  # numpy: no autodiff, no training step
    batch = MoonsConfig().batch_size
    return [{"backend": backend, "device": device, "mode": mode, "activation": act, "impl": impl,
             "direction": DIRECTION, "dtype": dtype, "size": batch}
            for dtype in spec.dtypes if dtype in TRAIN_DTYPES
            for mode in spec.modes if mode in modes_offered
            for act in ARMS if act in spec.activations
            for impl in (impls or spec.impls)]


def run(backend, bench, cell_list: list[dict], config: TimerConfig, seed: int = SEED) -> list[dict]:
    """Time the train-step `cell_list` (from `cells`, one backend and device) group by group: the cells sharing
    dtype and mode side by side. Returns one row per cell (the fields of benchmarks.runner.run_group's rows:
    status, median_s, iqr_s, first_call_s, ... in seconds per step, compile counts for compiled cells).
    A step that fails gives an "error" row with its message; nothing raises."""
    if not cell_list:
        return []
    moons = importlib.import_module(f"gelulab.backends.{backend.name}.moons")
    cfg = MoonsConfig(seeds=(seed,), epochs=1)
    data = {seed: make_data(cfg, seed)}
    rows: list[dict] = []
    groups: dict[tuple, list[dict]] = {}
    for c in cell_list:
        groups.setdefault((c["dtype"], c["mode"]), []).append(c)
    for (dtype, mode), group in groups.items():
        specs = [train_spec(MoonsConfig(seeds=(seed,), epochs=1, impl=c["impl"]), c["activation"], "matched",
                            dtype, (seed,), data) for c in group]
        builders = [lambda s=s, m=mode: moons.bench_step(s, m) for s in specs]
        rows += run_calls(bench, group, builders, [mode == "compiled"] * len(group), config)
    return rows

