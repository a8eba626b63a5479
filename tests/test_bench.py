"""Tests of the activation benchmark: the timer's method, the grid filters, the bandwidth arithmetic, the
no-recompilation check per backend, and a --quick run that must write valid output. No test asserts a speed."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from gelulab.backends import BACKEND_NAMES, capabilities, get_backend
from gelulab.benchmarks import activations as bench_cli
from gelulab.benchmarks import analysis, trainstep
from gelulab.benchmarks.bandwidth import cell_throughput, framework_copy, traffic_bytes
from gelulab.benchmarks.grid import AXES, CPU_SIZES, Cell, parse_size, spec_from_filters
from gelulab.benchmarks.runner import counter_growth, hooks, input_array, run_cell
from gelulab.benchmarks.timer import QUICK, TimerConfig, measure, timed_blocks, warm_up
from gelulab.core.activations import ACTIVATIONS, IMPLS
from gelulab.core.numerics.dtypes import get_dtype

# ---------------------------------------------------------------------------------------------------- the timer


class FakeClock:
    """A clock that advances only when the timed call runs: each call takes `durations(phase, index)` seconds."""

    def __init__(self, warm: float, timed: list[float]):
        self.now, self.warm, self.timed, self.phase = 0.0, warm, timed, "warm"
        self.calls = self.syncs = 0
        self.timed_calls = 0

    def __call__(self) -> float:
        return self.now

    def call(self):
        self.calls += 1
        if self.phase == "warm":
            self.now += self.warm
        else:  # one block per entry of `timed` (1 call per block when warm >= min_block_s)
            self.now += self.timed[self.timed_calls]
            self.timed_calls += 1
        return self.calls

    def sync(self, y):
        assert y == self.calls, "sync must follow each call, on that call's result"
        self.syncs += 1

    def probe(self):
        self.phase = "timed"
        return self.calls


def test_timer_median_iqr_and_phases_follow_the_documented_method():
    # 7 blocks of 1 call; per-call times chosen so the quartiles are easy by hand (linear interpolation):
    # sorted 1..7 ms -> median 4 ms, q25 at position 1.5 -> 2.5 ms, q75 at 4.5 -> 5.5 ms.
    timed = [5e-3, 1e-3, 7e-3, 3e-3, 2e-3, 6e-3, 4e-3]
    clock = FakeClock(warm=1e-3, timed=timed)
    config = TimerConfig(min_block_s=1e-3, min_run_s=1e-3, min_blocks=7, max_blocks=7, warmup_s=0.0,
                         warmup_calls=1)
    t = measure(clock.call, clock.sync, config, clock=clock, probe=clock.probe)
    assert t.median_s == pytest.approx(4e-3)
    assert t.q25_s == pytest.approx(2.5e-3) and t.q75_s == pytest.approx(5.5e-3)
    assert t.iqr_s == pytest.approx(3e-3) and t.min_s == pytest.approx(1e-3)
    assert t.blocks == 7 and t.calls_per_block == 1
    assert t.samples_s == pytest.approx(timed)
    assert t.first_call_s == pytest.approx(1e-3)
    # the first call, one calibration call (1 ms already reaches min_block_s), then the timed blocks
    assert t.probe_before == 2 and t.probe_after == 9
    assert clock.syncs == clock.calls == 9


def test_timer_calibration_doubles_calls_until_a_block_is_long_enough():
    # 0.1 ms per call, blocks of >= 1 ms: 1, 2, 4, 8 calls are too short, 16 calls (1.6 ms) are enough.
    # Timed blocks continue until 5 blocks and 10 ms: ceil(10 / 1.6) = 7 blocks.
    clock = FakeClock(warm=1e-4, timed=[1e-4] * 1000)
    config = TimerConfig(min_block_s=1e-3, min_run_s=1e-2, min_blocks=5, max_blocks=100, warmup_s=0.0,
                         warmup_calls=1)
    t = measure(clock.call, clock.sync, config, clock=clock, probe=clock.probe)
    assert t.calls_per_block == 16
    assert t.blocks == 7
    assert t.median_s == pytest.approx(1e-4)
    assert t.timed_s == pytest.approx(7 * 16 * 1e-4)
    assert t.probe_before == 1 + (1 + 2 + 4 + 8 + 16)


def test_timed_blocks_interleave_the_callables_round_by_round():
    # A takes 1 ms per call, B 2 ms; one call per block (min_block_s = 1 ms). Each round times one block of each,
    # starting one further along: A B | B A | A B. Both get min_blocks = 3 blocks, their own medians.
    log, now = [], [0.0]

    def timed(name, seconds):
        def call():
            log.append(name)
            now[0] += seconds
        return call

    calls = [timed("A", 1e-3), timed("B", 2e-3)]
    config = TimerConfig(min_block_s=1e-3, min_run_s=1e-3, min_blocks=3, max_blocks=3, warmup_s=0.0,
                         warmup_calls=1)
    warms = [warm_up(c, config=config, clock=lambda: now[0]) for c in calls]
    log.clear()
    a, b = timed_blocks(calls, warms, config=config, clock=lambda: now[0])
    assert log == ["A", "B", "B", "A", "A", "B"]
    assert a.median_s == pytest.approx(1e-3) and b.median_s == pytest.approx(2e-3)
    assert a.blocks == b.blocks == 3
    assert a.first_call_s == pytest.approx(1e-3) and b.first_call_s == pytest.approx(2e-3)


@pytest.mark.parametrize("field,value", [("min_block_s", 0), ("min_run_s", -1.0), ("min_blocks", 0),
                                         ("max_blocks", 2), ("warmup_calls", -1), ("min_run_s", math.nan)])
def test_timer_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        TimerConfig(**{field: value})


# ---------------------------------------------------------------------------------------------------- the grid


def test_full_cpu_grid_is_the_issue_grid(monkeypatch):
    monkeypatch.delenv("GELULAB_BACKEND", raising=False)
    monkeypatch.delenv("GELULAB_DEVICE", raising=False)
    assert spec_from_filters().dtypes == ("float32", "bfloat16")  # the default keeps the two ML dtypes
    spec = spec_from_filters(full=True)
    # every backend with the timer's hooks, in the registry's order
    assert spec.backends == tuple(n for n in BACKEND_NAMES if "bench" in capabilities(n).modules)
    assert spec.devices == ("cpu",)
    assert spec.sizes_for("cpu") == (10**3, 10**4, 10**5, 10**6, 10**7)
    assert spec.sizes_for("gpu")[-1] == 10**8
    # every catalogue activation x every impl it has (no kernel cells for an entry without one) x 2 directions x
    # 5 sizes x 4 dtypes x 2 modes
    n = sum(len(IMPLS) - (a.kernel is None) for a in ACTIVATIONS.values())
    assert len(spec.cells("jax", "cpu", ("eager", "compiled"))) == n * 2 * 5 * 4 * 2
    assert len(spec.cells("numpy", "cpu", ("eager",))) == n * 2 * 5 * 4
    assert set(spec.activations) == set(ACTIVATIONS)


def test_filters_select_axes_and_read_gelulab_backend(monkeypatch):
    monkeypatch.setenv("GELULAB_BACKEND", "tensorflow,jax")
    spec = spec_from_filters(sizes=["1e6,1000", "10**4"], dtypes=["float32"], modes=["compiled"],
                             activations=["gelu_tanh", "relu"], impls=["builtin"], directions=["forward"])
    assert spec.backends == ("jax", "tensorflow")  # canonical order, whatever the order given
    assert spec.sizes == (1000, 10000, 10**6)
    assert spec.activations == ("relu", "gelu_tanh")
    cells = spec.cells("jax", "cpu", ("eager", "compiled"))
    assert len(cells) == 3 * 2
    assert {c.mode for c in cells} == {"compiled"}
    assert spec_from_filters(backends=["torch"]).backends == ("torch",)  # --backend wins over GELULAB_BACKEND


def test_quick_narrows_only_axes_not_filtered(monkeypatch):
    monkeypatch.delenv("GELULAB_BACKEND", raising=False)
    spec = spec_from_filters(quick=True, dtypes=["float16"])
    assert spec.dtypes == ("float16",)
    assert spec.activations == ("relu", "gelu_none") and spec.sizes == (10**4,)
    # the quick grid: relu, gelu_none x every impl x 2 directions x float32 x n = 1e4 x both modes
    quick = spec_from_filters(quick=True)
    assert quick.impls == IMPLS and quick.directions == ("forward", "forward+backward")
    assert quick.dtypes == ("float32",) and quick.modes == ("eager", "compiled")
    assert len(quick.cells("jax", "cpu", ("eager", "compiled"))) == 2 * len(IMPLS) * 2 * 2
    assert spec_from_filters(quick=True, directions=["forward"]).directions == ("forward",)


@pytest.mark.parametrize("kwargs,bad", [
    ({"activations": ["gelu"]}, "'gelu'"), ({"impls": ["fast"]}, "'fast'"), ({"dtypes": ["float8"]}, "'float8'"),
    ({"modes": ["jit"]}, "'jit'"), ({"directions": ["backward"]}, "'backward'"), ({"devices": ["cuda"]}, "'cuda'"),
    ({"backends": ["mxnet"]}, "'mxnet'"), ({"sizes": ["0"]}, "'0'"), ({"sizes": ["1.5"]}, "'1.5'"),
    ({"sizes": ["abc"]}, "'abc'"), ({"sizes": ["-1e3"]}, "'-1e3'")])
def test_bad_filter_values_raise_a_clear_error(kwargs, bad):
    with pytest.raises(ValueError, match=bad):
        spec_from_filters(**kwargs)


def test_quick_and_full_together_are_refused():
    with pytest.raises(ValueError, match="--quick and --full"):
        spec_from_filters(quick=True, full=True)


def test_parse_size_forms():
    assert parse_size("1e6") == parse_size("1000000") == parse_size("10**6") == 10**6


def test_bad_option_fails_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    assert bench_cli.main(["--size", "1e-3", "--out", str(out)]) == 2
    assert "'1e-3'" in capsys.readouterr().err
    assert not out.exists()


def test_gelulab_parser_accepts_filters_and_compare():
    from gelulab import cli as gelulab

    parser = gelulab.build_parser()
    a = parser.parse_args(["bench", "--size", "1e6", "--dtype", "float32,float16", "--quick"])
    assert a.size == ["1e6"] and a.dtype == ["float32,float16"] and a.quick and a.bench_command is None
    b = parser.parse_args(["bench", "--backend", "torch", "compare", "A.json", "B.json"])
    assert (b.bench_command, b.a, b.b, b.backend) == ("compare", "A.json", "B.json", ["torch"])


def test_train_step_cells_follow_the_grid_filters():
    import argparse

    spec = spec_from_filters(backends=["torch"], activations=["gelu_none", "gelu_tanh"], dtypes=["float64", "float16"],
                             modes=["compiled"])
    cells = trainstep.cells(spec, "torch", "cpu", ("eager", "compiled"))
    # gelu_tanh and float16 have no train-step cell; relu is filtered out; every impl by default
    assert [(c["activation"], c["impl"], c["dtype"], c["mode"]) for c in cells] == [
        ("gelu_none", impl, "float64", "compiled") for impl in IMPLS]
    assert trainstep.cells(spec_from_filters(), "numpy", "cpu", ("eager",)) == []
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    assert parser.parse_args(["--train-step-only"]).train_step_only
    with pytest.raises(SystemExit):  # argparse: the two flags exclude each other
        parser.parse_args(["--train-step-only", "--no-train-step"])


# ---------------------------------------------------------------------------------------------------- bandwidth


def test_throughput_arithmetic():
    # 1e6 float32 elements in 1 ms: read 4 MB + write 4 MB = 8 MB per call -> 8 GB/s; 1e9 elements/s.
    assert traffic_bytes(10**6, 4) == 8_000_000
    f = cell_throughput(10**6, 4, 1e-3, copy_gbps=16.0)
    assert f["elements_per_s"] == pytest.approx(1e9)
    assert f["gbps"] == pytest.approx(8.0)
    assert f["pct_copy"] == pytest.approx(50.0)
    with pytest.raises(ValueError, match="seconds"):
        cell_throughput(10, 4, 0.0, 1.0)


def test_accelerator_cells_use_their_framework_device_copy_as_reference():
    # 1e6 float32 in 1 ms = 8 GB/s: 50 % of a 16 GB/s host copy, 2 % of a 400 GB/s device copy.
    rows = [{**Cell(b, d, "eager", "relu", "builtin", "forward", "float32", 10**6).as_dict(), "median_s": 1e-3}
            for b, d in (("torch", "cpu"), ("torch", "gpu"))]
    host = {"gbps": 16.0, "curve": {4_000_000: 32.0}}
    devices = {"torch/gpu": {"gbps": 400.0, "curve": {"4000000": 80.0}}}  # keys as JSON gives them back
    analysis.add_throughput(rows, host, devices)
    assert rows[0]["pct_copy"] == pytest.approx(50.0) and rows[0]["pct_copy_same_size"] == pytest.approx(25.0)
    assert rows[1]["pct_copy"] == pytest.approx(2.0) and rows[1]["pct_copy_same_size"] == pytest.approx(10.0)


@pytest.mark.backend_needs("bench")  # the benchmarks' hooks
def test_framework_copy_hook_copies_and_gives_a_bandwidth(backend):
    """The device-copy reference used on a GPU/TPU, run here on the CPU: bench.copy returns the same values in a
    new buffer, and framework_copy turns its best time into a positive finite GB/s."""
    import numpy as np

    bench = hooks(backend.name)
    a = input_array("float16", 1000)
    x = bench.device_input(backend, a)
    y = bench.copy(x)
    bench.sync(y)
    assert y is not x
    np.testing.assert_array_equal(backend.to_numpy(y), a)
    gbps = framework_copy(bench, backend, [2000], QUICK)[2000]
    assert math.isfinite(gbps) and gbps > 0


# ------------------------------------------------------------------------------------- recompilation, per backend


def test_input_array_is_seeded_and_typed():
    a, b = input_array("bfloat16", 100, seed=3), input_array("bfloat16", 100, seed=3)
    assert a.dtype == get_dtype("bfloat16").np_dtype and a.shape == (100,)
    assert (a.view("int16") == b.view("int16")).all()


@pytest.mark.compile
@pytest.mark.slow
def test_compiled_mode_does_not_recompile_in_the_timed_loop(backend):
    if "compiled" not in backend.modes:
        pytest.skip(f"{backend.name} has no compiled mode, so nothing can recompile")
    bench = hooks(backend.name)
    x = bench.device_input(backend, input_array("float32", 1000))
    for direction in ("forward", "forward+backward"):
        cell = Cell(backend.name, backend.device, "compiled", "gelu_none", "formula", direction, "float32", 1000)
        row = run_cell(backend, bench, cell, x, QUICK)
        assert row["status"] == "ok", row
        assert row["compiles_before_timing"] >= 1  # the first call compiled
        assert row["recompiles_in_timed_loop"] == 0
        assert row["blocks"] >= QUICK.min_blocks

    # The counter is live: the same compiled function on a new shape compiles again, on the old shape it does not.
    bench.fresh()
    fn = backend.function("gelu_none", "formula", 0, "compiled")
    bench.sync(fn(x))
    s1 = bench.compile_stats(fn)
    bench.sync(fn(x))
    assert counter_growth(s1, bench.compile_stats(fn)) == 0
    bench.sync(fn(bench.device_input(backend, input_array("float32", 1001))))
    assert counter_growth(s1, bench.compile_stats(fn)) >= 1


def test_run_cell_flags_a_recompile_inside_the_timed_loop():
    counter = {"n": 0}

    def fn(x):
        counter["n"] += 1  # "compiles" on every call, as a function retraced per call would
        return x

    fake_backend = SimpleNamespace(function=lambda key, impl, order, mode: fn)
    fake_bench = SimpleNamespace(sync=lambda y: None, fresh=lambda: None,
                                 compile_stats=lambda f: {"compiles": counter["n"]})
    cell = Cell("jax", "cpu", "compiled", "relu", "builtin", "forward", "float32", 10)
    row = run_cell(fake_backend, fake_bench, cell, 1.0, QUICK)
    assert row["status"] == "recompiled" and row["recompiles_in_timed_loop"] >= QUICK.min_blocks


def test_run_cell_keeps_going_after_an_error():
    def fn(x):
        raise TypeError("no kernel for this dtype")

    fake_backend = SimpleNamespace(function=lambda key, impl, order, mode: fn)
    fake_bench = SimpleNamespace(sync=lambda y: None, fresh=lambda: None, compile_stats=lambda f: {"compiles": 0})
    cell = Cell("torch", "cpu", "eager", "relu", "builtin", "forward", "float16", 10)
    row = run_cell(fake_backend, fake_bench, cell, 1.0, QUICK)
    assert row["status"] == "error" and "no kernel for this dtype" in row["error"]


# ------------------------------------------------------------------------------------------- the --quick run


# The --quick run the output tests read: every selected backend, both modes, every impl, relu and gelu_none, and
# the training step, in the forward direction (forward+backward cells are timed by the same runner code, and per
# backend in test_compiled_mode_does_not_recompile_in_the_timed_loop) with an 8 MiB copy reference. The torch
# kernel's eager calls take its float64 path (GELULAB_KERNEL_COMPILE=off) instead of building an inductor loop
# per entry and order (14 s each here); that loop is tested in tests/test_kernels.py and test_torch_eager.py.
# The quick grid's own axes are test_quick_narrows_only_axes_not_filtered's.
QUICK_RUN = ["--quick", "--device", "cpu", "--direction", "forward", "--copy-mib", "8"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GELULAB_KERNEL_COMPILE", "off")
        code = bench_cli.main([*QUICK_RUN, "--out", str(out)])
    return code, out


def _close(a, b):
    return a == pytest.approx(b, rel=1e-12)


def _check_timed_row(r: dict) -> None:
    """A cleanly timed row: all axes, finite positive times (s), ordered quartiles, enough blocks, and for a
    compiled row a first call that compiled and no recompilation in the timed loop."""
    assert r["status"] == "ok", r
    assert set(AXES) <= set(r)
    for k in ("median_s", "q25_s", "q75_s", "min_s", "first_call_s"):
        assert math.isfinite(r[k]) and r[k] > 0, (k, r)
    assert r["q25_s"] <= r["median_s"] <= r["q75_s"]
    assert r["blocks"] >= QUICK.min_blocks
    if r["mode"] == "compiled":
        assert r["recompiles_in_timed_loop"] == 0 and r["compiles_before_timing"] >= 1


def _check_gelu_over_relu(ratios: list[dict], rows: list[dict]) -> None:
    """One GELU ÷ ReLU entry per GELU row (the quick grids have gelu_none only), each the ratio of the medians."""
    by_key = {tuple(r[a] for a in AXES): r for r in rows}
    assert len(ratios) == len(rows) // 2
    for e in ratios:
        relu = by_key[tuple("relu" if a == "activation" else e[a] for a in AXES)]
        assert e["activation"] == "gelu_none"
        assert _close(e["ratio"], by_key[tuple(e[a] for a in AXES)]["median_s"] / relu["median_s"])


@pytest.mark.slow
def test_quick_run_writes_valid_output(quick_run):
    from gelulab.backends import selected_backends

    code, out = quick_run
    assert code == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["schema"] == bench_cli.SCHEMA
    env = result["environment"]
    assert env["cpu"] and env["cores"] >= 1 and env["threads"] >= 1
    assert set(env["frameworks"]) == {n for n in selected_backends() if "bench" in capabilities(n).modules}
    bw = result["copy_bandwidth"]["gbps"]
    assert math.isfinite(bw) and bw > 0
    cells = result["cells"]
    # quick grid, forward: relu, gelu_none x every impl, float32, n = 1e4, per mode the backend offers
    timed = [n for n in selected_backends() if "bench" in capabilities(n).modules]
    expected = sum(2 * len(IMPLS) * len(capabilities(name).modes) for name in timed)
    assert len(cells) == expected
    for c in cells:
        _check_timed_row(c)
        assert _close(c["elements_per_s"], c["size"] / c["median_s"])
        assert _close(c["gbps"], 2 * c["size"] * 4 / c["median_s"] / 1e9)  # float32: 4 bytes read + 4 written
        assert _close(c["pct_copy"], 100 * c["gbps"] / bw)
    by_key = {tuple(c[a] for a in AXES): c for c in cells}
    for impl in ("formula", "kernel"):
        fb = result["ratios"][f"{impl}_over_builtin"]
        assert len(fb) == len(cells) // len(IMPLS)
        for r in fb:
            f = by_key[tuple(impl if a == "impl" else r[a] for a in AXES)]
            b = by_key[tuple("builtin" if a == "impl" else r[a] for a in AXES)]
            assert _close(r["ratio"], f["median_s"] / b["median_s"])
    _check_gelu_over_relu(result["ratios"]["gelu_over_relu"], cells)
    md = (out / "bench.md").read_text()
    assert "formula ÷ builtin" in md and "kernel ÷ builtin" in md and "GELU ÷ ReLU" in md
    for name in timed:
        png = out / f"throughput_{name}_float32.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------- the training step


def _reference_first_loss(spec) -> float:
    """sum_i w_i BCE of the MLP with ReLU at the shared initial weights on the first minibatch, in float64 numpy
    (the loss the first step differentiates; BCE from experiments.moons.config.bce_with_logits' formula via
    numpy.logaddexp)."""
    import numpy as np

    idx = spec.order[0, 0, 0]
    x, y, w = spec.x_train[0, idx], spec.y_train[0, idx], spec.weights[0]
    for k, (wk, bk) in enumerate(spec.init):
        x = x @ wk[0].astype(np.float64) + bk[0]
        if k < len(spec.init) - 1:
            x = np.maximum(x, 0.0)
    z = x[:, 0]
    return float(np.sum(w * (np.logaddexp(0.0, z) - y * z)))


@pytest.mark.compile
@pytest.mark.training
@pytest.mark.slow
def test_compiled_train_step_does_not_recompile_in_the_timed_loop(backend, quick_run):
    cells = trainstep.cells(spec_from_filters(quick=True), backend.name, backend.device, ("compiled",),
                            impls=("formula",))
    if not cells:
        pytest.skip(f"{backend.name} has no training step (no autodiff, no compiled mode)")
    assert [c["activation"] for c in cells] == ["relu", "gelu_none"]
    # these cells, timed with QUICK, are the quick run's compiled training-step rows on the CPU: read from it
    _, out = quick_run
    rows = [r for r in json.loads((out / "bench.json").read_text())["train_step"]
            if r["backend"] == backend.name and r["device"] == backend.device and r["mode"] == "compiled"]
    if backend.device != "cpu":  # GELULAB_DEVICE=gpu / tpu: the quick run timed the CPU, time them here
        rows = trainstep.run(backend, hooks(backend.name), cells, QUICK)
    assert [{k: r[k] for k in cells[0]} for r in rows] == cells  # the same cells, in the same order
    for row in rows:
        assert row["status"] == "ok", row
        assert row["compiles_before_timing"] >= 1  # the first call compiled
        assert row["recompiles_in_timed_loop"] == 0
        assert row["blocks"] >= QUICK.min_blocks


@pytest.mark.training
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_train_step_computes_the_moons_loss_on_the_shared_batch(backend, mode):
    import importlib

    import numpy as np

    from gelulab.experiments.moons.config import MoonsConfig, make_data, train_spec

    if not backend.capabilities.autodiff:
        pytest.skip(f"{backend.name} has no autodiff, so no training step")
    cfg = MoonsConfig(seeds=(0,), epochs=1)
    spec = train_spec(cfg, "relu", "matched", "float64", (0,), {0: make_data(cfg, 0)})
    call, fn = importlib.import_module(f"gelulab.backends.{backend.name}.moons").bench_step(spec, mode)
    assert (fn is None) == (mode == "eager")
    out = call()
    loss = out[2] if backend.name == "jax" else out  # jax: (params, state, loss); torch, tf: loss (S,)
    got = np.ravel(backend.to_numpy(loss))
    assert got.shape == (1,) and got[0] == pytest.approx(_reference_first_loss(spec), rel=1e-12)


@pytest.mark.training
@pytest.mark.slow
def test_quick_run_writes_train_step_rows(quick_run):
    from gelulab.backends import selected_backends

    _, out = quick_run
    result = json.loads((out / "bench.json").read_text())
    steps = result["train_step"]
    # quick: relu, gelu_none x formula x float32 x 2 modes per backend with a training step (not numpy)
    with_step = [n for n in selected_backends() if capabilities(n).autodiff and "bench" in capabilities(n).modules]
    assert sorted({r["backend"] for r in steps}) == sorted(with_step) and len(steps) == 4 * len(with_step)
    for r in steps:
        _check_timed_row(r)
        assert r["direction"] == trainstep.DIRECTION and r["size"] == 32  # moons batch size
        assert (r["impl"], r["dtype"]) == ("formula", "float32")
    _check_gelu_over_relu(result["ratios"]["train_step_gelu_over_relu"], steps)
    assert "Training step" in (out / "bench.md").read_text()


# ---------------------------------------------------------------------------------------------------- compare


def _result_file(path, cells):
    path.write_text(json.dumps({"schema": bench_cli.SCHEMA, "cells": cells}))
    return str(path)


def _cell(backend, act, median, dtype="float32"):
    return {**Cell(backend, "cpu", "eager", act, "builtin", "forward", dtype, 1000).as_dict(),
            "status": "ok", "median_s": median}


def test_compare_prints_b_over_a_per_cell(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GELULAB_BACKEND", "numpy")  # selects what a run runs, not what compare reads
    a = [_cell("jax", "relu", 2e-6), _cell("jax", "gelu_none", 4e-6, "float64"), _cell("torch", "relu", 1e-6)]
    b = [_cell("jax", "relu", 3e-6), _cell("jax", "gelu_none", 2e-6, "float64"), _cell("numpy", "relu", 1e-6)]
    cmp = analysis.compare(a, b)
    assert [m["ratio"] for m in cmp["matched"]] == pytest.approx([1.5, 0.5])
    assert len(cmp["only_a"]) == len(cmp["only_b"]) == 1
    fa, fb = _result_file(tmp_path / "a.json", a), _result_file(tmp_path / "b.json", b)
    assert bench_cli.main(["compare", fa, fb]) == 0
    text = capsys.readouterr().out
    assert "B ÷ A" in text and "| 1.5 |" in text and "| 0.5 |" in text and "2 cells in both runs" in text
    assert "Geometric mean of B ÷ A: 0.866" in text  # sqrt(1.5 * 0.5) = 0.8660
    assert bench_cli.main(["--activation", "relu", "compare", fa, fb]) == 0
    text = capsys.readouterr().out
    assert "| 1.5 |" in text and "| 0.5 |" not in text


def test_compare_refuses_a_file_that_is_not_a_bench_result(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"cells": []}))
    assert bench_cli.main(["compare", str(other), str(other)]) == 2
    assert "not a gelulab bench result" in capsys.readouterr().err


@pytest.mark.parametrize("b_cells, set_aside", [
    ([None, 5, _cell("jax", "relu", 3e-6)], 2),
    ([_cell("jax", "relu", 3e-6), _cell("jax", "gelu_none", "fast", "float64")], 1),
    ([_cell("jax", "relu", 3e-6), _cell("jax", "gelu_none", -1e-5, "float64")], 1),
    ([_cell("jax", "relu", 3e-6), _cell("jax", "gelu_none", 0, "float64")], 1),
    ([_cell("jax", "relu", 3e-6), _cell("jax", "gelu_none", float("nan"), "float64")], 1),
])
def test_compare_sets_damaged_cells_aside_naming_the_file(tmp_path, capsys, b_cells, set_aside):
    a = [_cell("jax", "relu", 2e-6), _cell("jax", "gelu_none", 4e-6, "float64")]
    fa, fb = _result_file(tmp_path / "a.json", a), _result_file(tmp_path / "b.json", b_cells)
    assert bench_cli.main(["compare", fa, fb]) == 0
    out, err = capsys.readouterr()
    assert f"gelulab bench compare: B ({fb}): set aside {set_aside} of {len(b_cells)} cells that are damaged" in err
    assert "1 cells in both runs" in out and "Geometric mean of B ÷ A: 1.5." in out  # 3e-6 / 2e-6, the sound cell


@pytest.mark.parametrize("b_cells", [[None, 5], [_cell("jax", "relu", -1e-5)], [_cell("jax", "relu", 0)],
                                     [_cell("jax", "relu", "fast")]])
def test_compare_refuses_a_file_without_a_sound_cell_in_one_line(tmp_path, capsys, b_cells):
    fa = _result_file(tmp_path / "a.json", [_cell("jax", "relu", 2e-6)])
    fb = _result_file(tmp_path / "b.json", b_cells)
    assert bench_cli.main(["compare", fa, fb]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"gelulab bench: error: B ({fb}) has no usable cell: {len(b_cells)} of {len(b_cells)} "
                          "are damaged")


@pytest.mark.parametrize("option, value", [("--seed", "-1"), ("--seed", str(2**32)), ("--min-run-s", "inf"),
                                           ("--min-run-s", "nan"), ("--threads", "0"), ("--copy-mib", "-1")])
def test_a_bad_numeric_option_is_refused_before_any_work_and_keeps_the_last_result(tmp_path, capsys, option,
                                                                                   value):
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text("the last complete result\n")
    argv = ["--quick", "--backend", "numpy", "--no-plots", "--no-train-step", option, value, "--out", str(out)]
    assert bench_cli.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    shown = float(value) if option == "--min-run-s" else int(value)  # as argparse parsed it
    assert len(err) == 1 and err[0].startswith(f"gelulab bench: error: {option}={shown!r}; expected")
    assert sorted(p.name for p in out.iterdir()) == ["bench.json"]
    assert (out / "bench.json").read_text() == "the last complete result\n"


def test_a_run_whose_cells_all_fail_never_replaces_the_complete_result(tmp_path, capsys, monkeypatch):
    def no_input(dtype, size, seed=0):
        raise ValueError("no input today")

    monkeypatch.setattr(bench_cli, "input_array", no_input)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").write_text("the last complete result\n")
    argv = ["--quick", "--backend", "numpy", "--no-plots", "--no-train-step", "--copy-mib", "1", "--out", str(out)]
    assert bench_cli.main(argv) == 1
    assert (out / "bench.json").read_text() == "the last complete result\n"
    kept = json.loads((out / "bench.partial.json").read_text())
    assert kept["partial"] and kept["no_cell_timed"] and kept["cells"]
    assert all(c["status"] == "error" and "no input today" in c["error"] for c in kept["cells"])
    err = capsys.readouterr().err
    assert (f"gelulab bench: none of the {len(kept['cells'])} cells timed cleanly (first error: input: ValueError: "
            f"no input today); the result is in {out / 'bench.partial.json'} (marked partial), bench.json kept as "
            "it was") in err


# ---------------------------------------------------------------------------------------------------- devices


@pytest.mark.backend_needs("bench")  # the benchmarks' hooks
def test_device_flag_skips_backends_without_that_device(backend_name, tmp_path):
    """--device gpu reaches every backend's setup; on a machine without a GPU each backend is skipped with its
    reason and nothing is lost (on a machine with one, its cells run there)."""
    spec = spec_from_filters(backends=[backend_name], devices=["gpu"], sizes=["1e3"], activations=["relu"],
                             impls=["builtin"], directions=["forward"], dtypes=["float32"], modes=["eager"])
    rows: list = []
    try:
        info = bench_cli.run_grid(spec, QUICK, rows, progress=False)
    finally:  # the framework's module state points at the gpu if it had one: back to the cpu for other tests
        get_backend(backend_name).module.setup("cpu")
    if info["skipped"]:
        assert rows == [] and info["skipped"][0]["backend"] == backend_name
        assert info["skipped"][0]["device"] == "gpu" and info["skipped"][0]["reason"]
    else:
        assert rows and all(r["device"] == "gpu" and r["status"] == "ok" for r in rows)


def test_cpu_sizes_span_the_issue_range():
    assert CPU_SIZES[0] == 10**3 and CPU_SIZES[-1] == 10**7
