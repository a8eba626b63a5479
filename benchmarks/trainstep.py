"""Training-step benchmark: one moons MLP training step per backend, eager and compiled, ReLU vs GELU.

The step is the matched-regime minibatch step of the moons experiment (the `bench_step` of each
backends/<name>/moons.py): the network 2 -> 64 -> 64 -> 1, batch 32, BCE on logits, Adam (Kingma & Ba 2015,
Algorithm 1, core.contracts.training.adam_step) with lr 1e-3, from shared Glorot-uniform initial weights on the first
minibatch of make_moons data drawn for seed SEED, so every backend steps on the same numbers. The spec is built
here from core.contracts.training's builders (the benchmark does not depend on the experiment's configuration). One call
= forward, backward and the Adam update of every parameter. Modes: "eager" (op by op: jax un-jitted, torch eager,
TF eager) and "compiled" (jax.jit, torch.compile, tf.function(jit_compile=True)).

Cells: backend × device × mode × activation (relu, gelu_none: ReLU vs exact GELU) × impl (builtin, formula, kernel) ×
dtype (float32, float64: the moons training dtypes). The cells of one (backend, device, dtype, mode) are timed
side by side with the shared timer (benchmarks.runner.run_calls, interleaved blocks), so their GELU ÷ ReLU
ratio is fair. Rows carry the activation-benchmark axes with direction "train step" and size = the batch size
(32), and go into result["train_step"] of bench.json; times are seconds per step. Backends without autodiff
(their capability record says so: numpy) have no training step.
"""
from __future__ import annotations

import importlib

import numpy as np

from gelulab.backends import capabilities
from gelulab.benchmarks.grid import GridSpec
from gelulab.benchmarks.runner import run_calls
from gelulab.benchmarks.timer import TimerConfig
from gelulab.core.activations import HEADLINE
from gelulab.core.contracts import training
from gelulab.core.contracts.training import TRAIN_DTYPES, TrainSpec

ARMS = HEADLINE  # the catalogue's headline pair: ReLU vs exact GELU (x Φ(x) via erfc)
SEED = 0
DIRECTION = "train step"
# The moons experiment's default network and optimiser: 2 -> 64 -> 64 -> 1, batch 32, Adam (lr, beta1, beta2, eps)
N_TRAIN, NOISE, HIDDEN, BATCH = 1400, 0.2, (64, 64), 32
LR, BETA1, BETA2, EPS = 1e-3, 0.9, 0.999, 1e-8


QUICK_IMPLS = ("formula",)  # --quick: gelulab's formula only (each torch.compile group costs seconds)


def cells(spec: GridSpec, backend: str, device: str, modes_offered, impls=None) -> list[dict]:
    """The train-step cells of `spec` for one backend and device, in run order (dtype, mode, then activation and
    impl: the cells timed side by side). The grid's activation, impl, mode and dtype filters apply; activations
    other than relu / gelu_none, dtypes other than float32 / float64 and backends whose capability record has no
    autodiff (numpy) have no train-step cell. impls: overrides spec.impls when given. Each cell is a dict with the
    grid axes (direction "train step", size = batch size).
    """
    if not capabilities(backend).autodiff:
        return []  # no autodiff, no training step
    return [{"backend": backend, "device": device, "mode": mode, "activation": act, "impl": impl,
             "direction": DIRECTION, "dtype": dtype, "size": BATCH}
            for dtype in spec.dtypes if dtype in TRAIN_DTYPES
            for mode in spec.modes if mode in modes_offered
            for act in ARMS if act in spec.activations
            for impl in (impls or spec.impls)]


def step_spec(arm: str, impl: str, dtype: str, seed: int = SEED) -> TrainSpec:
    """The TrainSpec of one benchmark step: one seed, one epoch, matched regime. Data: sklearn make_moons(N_TRAIN,
    noise=NOISE) with random_state from the seed's first SeedSequence stream; initial weights (Glorot uniform) and
    the minibatch order from its second and third. x_val, x_test and grid are empty (a step does not evaluate).
    Raises ValueError for a dtype other than float32 / float64."""
    from sklearn.datasets import make_moons

    if dtype not in TRAIN_DTYPES:
        raise ValueError(f"dtype={dtype!r}; expected one of {list(TRAIN_DTYPES)}")
    data, init, order = np.random.SeedSequence(seed).spawn(3)
    x, y = make_moons(n_samples=N_TRAIN, noise=NOISE, random_state=int(data.generate_state(1)[0]))
    weights = training.batch_weights(N_TRAIN, BATCH)
    c1, c2 = training.adam_bias_corrections(BETA1, BETA2, 1, weights.shape[0])
    empty = np.zeros((1, 0, 2))
    return TrainSpec(
        arm=arm, impl=impl, regime="matched", dtype=dtype, hidden=HIDDEN, epochs=1, batch_size=BATCH, lr=LR,
        beta1=BETA1, beta2=BETA2, eps=EPS, seeds=(seed,), x_train=x[None].astype(np.float64),
        y_train=y[None].astype(np.float64), x_val=empty, y_val=np.zeros((1, 0)), x_test=empty, grid=empty,
        init=[(w[None], b[None]) for w, b in training.glorot_uniform(training.layer_sizes(2, HIDDEN), init)],
        order=training.epoch_orders(N_TRAIN, 1, BATCH, order)[None], weights=weights, c1=c1, c2=c2,
    )


def run(backend, bench, cell_list: list[dict], config: TimerConfig, seed: int = SEED) -> list[dict]:
    """Time the train-step `cell_list` (from `cells`, one backend and device) group by group: the cells sharing
    dtype and mode side by side. Returns one row per cell (the fields of benchmarks.runner.run_group's rows:
    status, median_s, iqr_s, first_call_s, ... in seconds per step, compile counts for compiled cells).
    A step that fails gives an "error" row with its message; nothing raises."""
    if not cell_list:
        return []
    moons = importlib.import_module(f"gelulab.backends.{backend.name}.moons")
    rows: list[dict] = []
    groups: dict[tuple, list[dict]] = {}
    for c in cell_list:
        groups.setdefault((c["dtype"], c["mode"]), []).append(c)
    for (dtype, mode), group in groups.items():
        specs = [step_spec(c["activation"], c["impl"], dtype, seed) for c in group]
        builders = [lambda s=s, m=mode: moons.bench_step(s, m) for s in specs]
        rows += run_calls(bench, group, builders, [mode == "compiled"] * len(group), config)
    return rows

