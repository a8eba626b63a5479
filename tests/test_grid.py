"""The moons study grid: the grid file and its cells, the data sets, the analysis (paired differences with
Benjamini-Hochberg control, heatmap squares, words) checked against scipy on known numbers, a small grid trained
for real (each cell's numbers equal a plain study of the same configuration; resume; refusal of other settings),
and the Ray executor against the local one (the same stored numbers)."""
from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.datasets import make_circles

from gelulab import cli as gelulab
from gelulab.backends import selected_backends
from gelulab.core import stats
from gelulab.experiments.moons import config as M
from gelulab.experiments.moons import grid as G
from gelulab.experiments.moons import grid_report as R
from gelulab.experiments.moons import grid_study as GS
from gelulab.experiments.moons import study as S
from gelulab.experiments.moons.datasets import DATASETS


def _trainable():
    """The selected backends that can train, the cheapest for these small cells first: torch trains the matched
    regime eagerly, while jax and tensorflow compile each (arm, seed count) group before its first step."""
    names, _ = S.check_backends(selected_backends())
    if not names:
        pytest.skip("no selected backend can train (numpy has no autodiff)")
    return sorted(names, key=lambda n: n != "torch")


# --------------------------------------------------------------------------------------- the grid and its cells


def test_default_grid_cells():
    spec = G.load_grid()
    cells = spec.cells()
    assert spec.varied == ["depth", "lr", "dataset"] and len(cells) == 4 * 3 * 2
    assert {c.config.hidden for c in cells} == {(32,), (32,) * 2, (32,) * 4, (32,) * 8}
    assert {c.config.lr for c in cells} == {0.001, 0.003, 0.01}
    assert {c.config.dataset for c in cells} == {"moons", "circles"}
    # today's arms and seeds in every cell: the same 20 seeds, so every arm and backend of a cell is paired
    assert all(c.config.seeds == tuple(range(20)) and c.config.arms == M.ARMS for c in cells)
    assert len({c.id for c in cells}) == len(cells)
    # apart from the axes, every cell is the same configuration
    keys = [{k: v for k, v in c.config.to_dict().items() if k not in ("hidden", "lr", "dataset")} for c in cells]
    assert all(k == keys[0] for k in keys)
    assert spec.heatmap_axes() == ("depth", "lr")


def test_print_grid_is_the_default_grid(capsys):
    assert gelulab.main(["moons", "--print-grid"]) == 0
    printed = G.parse_grid(capsys.readouterr().out)
    assert [c.id for c in printed.cells()] == [c.id for c in G.load_grid().cells()]


def test_grid_file_axes_and_base(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('backends = ["jax"]\n[base]\nseeds = [3, 5]\nn_samples = 400\n'
                    "[axes]\ndepth = [1, 8]\nwidth = [8]\nnoise = [0, 0.1]\ndtype = ['float32']\n")
    spec = G.load_grid(path)
    cells = spec.cells()
    assert spec.backends == ("jax",) and len(cells) == 4
    assert {c.config.hidden for c in cells} == {(8,), (8,) * 8}
    assert {c.config.noise for c in cells} == {0.0, 0.1}  # an integer noise is the float it means
    assert all(c.config.seeds == (3, 5) and c.config.n_samples == 400 and c.config.dtype == "float32"
               for c in cells)
    assert "depth8-width8-lr0.001-batch32-epochs25-moons-noise0.0-float32" in {c.id for c in cells}


@pytest.mark.parametrize("text,named", [
    ("[axes]\nheight = [1]\n", "height"),
    ("[axes]\ndepth = [0]\n", "depth"),
    ("[axes]\nlr = [-0.1]\n", "lr"),
    ("[axes]\ndataset = ['spirals']\n", "dataset"),
    ("[axes]\ndepth = [1, 1]\n", "depth"),
    ("[axes]\nbatch_size = [5000]\n", "batch_size"),
    ("[base]\nhidden = [4]\n", "hidden"),
    ("[base]\nlearning_rate = 0.1\n", "learning_rate"),
    ("[report]\nheatmap = ['depth', 'colour']\n", "heatmap"),
    ("grid = 3\n", "grid"),
    ("[axes\n", "TOML"),
])
def test_bad_grid_file_is_one_line_exit_2_before_training(tmp_path, monkeypatch, capsys, text, named):
    path = tmp_path / "g.toml"
    path.write_text(text)
    monkeypatch.setattr(GS, "train_cell", lambda *a, **k: pytest.fail("training started"))
    assert gelulab.main(["moons", "--grid", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and str(path) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_study_options_with_grid_are_refused(tmp_path, capsys):
    assert gelulab.main(["moons", "--grid", "--lr", "0.1", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--lr" in capsys.readouterr().err
    assert gelulab.main(["moons", "--address", "auto", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--address" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _run_record(cell, seed, train_loss, test_acc, arm="relu"):
    """A run record as the study stores it (the fields report.divergence reads)."""
    m = {"train_loss": train_loss, "val_loss": 0.3, "test_loss": 0.3, "test_acc": test_acc}
    return {"backend": "torch", "regime": "matched", "dtype": cell.config.dtype, "arm": arm, "seed": seed,
            "metrics": m, "curves": {"train_loss": [0.6, train_loss], "val_loss": [0.6, 0.3]}}


def test_grid_divergence_names_the_cells_and_runs():
    spec = G.parse_grid("[base]\nseeds = 2\narms = ['relu', 'gelu_none']\n[axes]\ndepth = [1, 2]\n")
    c1, c2 = spec.cells()
    runs = {c1.id: [_run_record(c1, 0, 0.1, 0.95), _run_record(c1, 1, 0.1, 0.95)],
            c2.id: [_run_record(c2, 0, float("nan"), 0.95), _run_record(c2, 1, 0.1, 0.5)]}  # two bad runs
    diverged = R.grid_divergence(spec.cells(), runs)
    assert [(d["cell"], d["seed"], d["kinds"]) for d in diverged] == [
        (c2.id, 0, ["non-finite loss"]), (c2.id, 1, ["test accuracy not above chance"])]
    line = R.grid_divergence_warning(diverged)
    assert line.startswith("WARNING: 2 runs in 1 of the grid's cells diverged or did not learn") and c2.id in line
    assert "\n" not in line and R.grid_divergence_warning([]) is None


@pytest.mark.parametrize("fail, code", [(False, 0), (True, 1)])
def test_grid_divergence_is_warned_and_fails_on_request(tmp_path, monkeypatch, capsys, fail, code):
    diverged = [{"cell": "depth1-x", "backend": "torch", "regime": "matched", "dtype": "float64", "arm": "relu",
                 "seed": 0, "reasons": ["non-finite loss"], "kinds": ["non-finite loss"]}]
    written = []
    monkeypatch.setattr(GS, "run_grid", lambda *a, **k: {"analysis": {"divergence": diverged}})
    monkeypatch.setattr(GS, "write_grid_report", lambda results, out: written.append(out) or {})
    monkeypatch.setattr(R, "markdown", lambda results, sections=(): "report")
    argv = ["moons", "--grid", "--out", str(tmp_path / "o"), "--no-progress"]
    assert gelulab.main(argv + ["--fail-on-divergence"] * fail) == code
    err = capsys.readouterr().err.strip().splitlines()
    expected = ("gelulab moons --grid: WARNING: 1 run in 1 of the grid's cells diverged or did not learn — "
                "depth1-x 1 run (non-finite loss). Their statistics use only finite values; lower lr or check the "
                "setup.")
    assert written and err == [expected]


def test_grid_divergence_section_in_the_report():
    row = {"cell": "depth1-x", "backend": "torch", "regime": "matched", "dtype": "float64", "arm": "relu", "seed": 3,
           "reasons": ["non-finite loss"], "kinds": ["non-finite loss"]}
    text = R._divergence_md([row])
    assert "depth1-x" in text and "non-finite loss" in text and "| 3 |" in text


@pytest.mark.parametrize("value", ["9223372036854775807", "11", "0", "-0.1", "inf", "nan"])
def test_grid_lr_is_bounded_as_the_study_is(value):
    with pytest.raises(ValueError, match=r"\[axes\] lr\[0\] = \S+: expected a finite number with 0 < lr <= 10$"):
        G.parse_grid(f"[axes]\nlr = [{value}]\n")
    assert G.parse_grid("[axes]\nlr = [10]\n").axes["lr"] == (10.0,)  # the bound itself is accepted


def test_a_grid_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "g.toml"
    data = b"[axes]\ndepth = [1]\n# \xff\n"
    path.write_bytes(data)
    at = data.index(b"\xff")  # the offset of the byte that is not UTF-8, from the input itself
    with pytest.raises(ValueError, match=rf"^grid file {path}: not UTF-8 text \(invalid start byte at byte {at}\)"):
        G.load_grid(path)


# ------------------------------------------------------------------------------------------------ data sets


def test_circles_data_is_make_circles_split_stratified():
    cfg = M.MoonsConfig(dataset="circles", n_samples=1000)
    d = M.make_data(cfg, 4)
    x_all, _ = make_circles(n_samples=1000, noise=0.2, factor=0.5, random_state=M.seed_streams(4).data)
    got = np.concatenate([d.x_train, d.x_val, d.x_test])
    assert np.array_equal(np.sort(got, axis=0), np.sort(x_all, axis=0))  # disjoint and complete
    for y, n in ((d.y_train, 700), (d.y_val, 150), (d.y_test, 150)):
        assert y.shape == (n,) and y.sum() == n // 2  # make_circles draws n // 2 per class; stratified
    # the default data set is still make_moons (the study's numbers are unchanged)
    assert M.MoonsConfig().dataset == "moons" and set(DATASETS) >= {"moons", "circles"}


# ------------------------------------------------------------- the analysis, on runs of known numbers


def _fake_runs(cells, backends, effect, sd=0.01, seeds=range(20)):
    """Run records: ReLU's test_acc = 0.9 + noise, test_loss = 0.3 + noise; a GELU arm's is ReLU's + effect(cell)
    (loss: - effect) + a symmetric seed pattern (+0.003, -0.003, +0.006, -0.006, ...: mean 0, no direction)."""
    rng = np.random.default_rng(7)
    pattern = {s: 0.003 * (1 + s // 2) * (1 if s % 2 == 0 else -1) for s in seeds}
    runs = {}
    for c in cells:
        runs[c.id] = []
        for b in backends:
            base = {s: (0.9 + rng.normal(0, sd), 0.3 + rng.normal(0, sd)) for s in seeds}
            for arm in c.config.arms:
                shift = 0.0 if arm == "relu" else effect(c)
                for s in seeds:
                    wiggle = 0.0 if arm == "relu" else pattern[s]
                    acc, loss = base[s][0] + shift + wiggle, base[s][1] - shift + wiggle
                    runs[c.id].append({"backend": b, "regime": "matched", "dtype": c.config.dtype, "arm": arm,
                                       "seed": s, "metrics": {"test_acc": acc, "test_loss": loss},
                                       "curves": {"train_loss": [0.6, loss], "val_loss": [0.6, loss]}})
    return runs


def _small_spec(**axes):
    return G.GridSpec(axes={"depth": [1, 2], "lr": [0.001, 0.01], **axes}, base={"seeds": 20}, heatmap=("depth", "lr"))


def test_paired_differences_and_bh_against_scipy():
    spec = _small_spec()
    cells = spec.cells()
    target = "depth2-width32-lr0.01-batch32-epochs25-moons-noise0.2-float64"
    runs = _fake_runs(cells, ["jax", "torch"], lambda c: 0.05 if c.id == target else 0.0)
    an = R.analyse_grid(spec, cells, runs, ["jax", "torch"])
    assert an["arms"][0] == "gelu_none" and set(an["arms"]) == set(M.ARMS) - {"relu"}  # exact GELU first
    for arm in an["arms"]:
        for metric, higher in (("test_acc", True), ("test_loss", False)):
            fam = [c for c in an["comparisons"] if c["arm"] == arm and c["metric"] == metric]
            assert len(fam) == len(cells) * 2  # one family: every cell and backend
            raw_w, raw_t = [], []
            for c in fam:
                rs = runs[c["cell"]]
                a = [r["metrics"][metric] for r in sorted(rs, key=lambda r: r["seed"])
                     if (r["backend"], r["arm"]) == (c["backend"], arm)]
                b = [r["metrics"][metric] for r in sorted(rs, key=lambda r: r["seed"])
                     if (r["backend"], r["arm"]) == (c["backend"], "relu")]
                t = sps.ttest_rel(a, b)
                assert c["mean_diff"] == pytest.approx(np.mean(np.subtract(a, b)), abs=1e-15)
                assert (c["t_ci_low"], c["t_ci_high"]) == pytest.approx(tuple(t.confidence_interval()), abs=1e-12)
                assert c["ci_low"] <= c["mean_diff"] <= c["ci_high"]  # the bootstrap interval holds the mean
                assert c["t_p"] == pytest.approx(t.pvalue, rel=1e-12)
                assert c["w_p"] == pytest.approx(sps.wilcoxon(a, b).pvalue, rel=1e-12)
                raw_w.append(c["w_p"])
                raw_t.append(c["t_p"])
            np.testing.assert_allclose([c["w_p_bh"] for c in fam], sps.false_discovery_control(raw_w), rtol=1e-12)
            np.testing.assert_allclose([c["t_p_bh"] for c in fam], sps.false_discovery_control(raw_t), rtol=1e-12)
            expected = {(c["cell"], c["backend"]) for c, pw, pt in zip(fam, sps.false_discovery_control(raw_w),
                                                                       sps.false_discovery_control(raw_t))
                        if pw < 0.05 and pt < 0.05}
            assert expected == {(target, "jax"), (target, "torch")}
            sig = [s for s in an["significant"] if s["arm"] == arm and s["metric"] == metric]
            assert [s["cell"] for s in sig] == [target] and sig[0]["backends"] == ["jax", "torch"]
            assert sig[0]["gelu_better"]  # higher accuracy, lower loss
    words = " ".join(an["conclusions"])
    assert "GELU helps" in words and "hidden layers 2, learning rate 0.01" in words and "GELU hurts" not in words
    assert "no significant difference in the other 3 cells" in words
    assert an["most_different"][0] == target


def test_no_difference_is_an_answer():
    spec = _small_spec()
    cells = spec.cells()
    an = R.analyse_grid(spec, cells, _fake_runs(cells, ["jax"], lambda c: 0.0), ["jax"])
    assert an["significant"] == []
    assert sum("no significant difference in any cell" in c for c in an["conclusions"]) == 2 * len(an["arms"])


def test_three_seeds_say_that_no_difference_can_be_shown():
    spec = G.GridSpec(axes={"depth": [1, 2], "lr": [0.001, 0.01]}, base={"seeds": 3}, heatmap=("depth", "lr"))
    cells = spec.cells()
    # a large effect on every seed: the t-test alone could call it, the Wilcoxon cannot with 3 seeds
    an = R.analyse_grid(spec, cells, _fake_runs(cells, ["jax"], lambda c: 0.05, seeds=range(3)), ["jax"])
    p_min = 2 / 2 ** 3  # two-sided: all three differences one way, 2 of the 2^3 equally likely sign patterns
    needed = next(n for n in range(1, 50) if 2 / 2 ** n < 0.05)
    assert an["significant"] == [] and {c["kind"] for c in an["comparisons"]} == {"underpowered"}
    for line in an["conclusions"][:2 * len(an["arms"])]:
        assert "no significant difference" not in line
        assert "3 seeds with a non-zero difference cannot show a difference at 5 %" in line
        assert f"smallest two-sided p with 3 seeds is {p_min:.3g}" in line and f"at least {needed} are needed" in line
        assert "(Student t)" in line
    text = R._significant_md(an["significant"], spec.varied, an["comparisons"])
    assert text.startswith("No cell can show a significant difference: 3 seeds")


def test_heatmap_squares_facets_and_marginalised_axes():
    # 2 x 2 heatmap squares; facets width (3) x data set (2) = 6 panels; noise (3) would make 18 > MAX_FACETS,
    # so noise is averaged over, seed by seed
    # one GELU form (the figures of every form are built alike): a quarter of the comparisons to bootstrap
    arms = {"seeds": 20, "arms": ["relu", "gelu_none"]}
    spec = dataclasses.replace(_small_spec(width=[16, 32, 64], dataset=["moons", "circles"], noise=[0.1, 0.2, 0.3]),
                               base=arms)
    cells = spec.cells()
    runs = _fake_runs(cells, ["jax"], lambda c: 0.01 * c.coords["noise"] * c.coords["depth"])
    an = R.analyse_grid(spec, cells, runs, ["jax"])
    fig = an["heatmaps"][0]
    assert (fig["arm"], fig["metric"], fig["x"], fig["y"]) == ("gelu_none", "test_acc", "depth", "lr")
    assert fig["facets"] == ["width", "dataset"] and fig["marginalised"] == ["noise"] and len(fig["panels"]) == 6
    panel = next(p for p in fig["panels"] if p["facet"] == {"width": 64, "dataset": "circles"})
    sq = next(s for s in panel["squares"] if (s["x"], s["y"]) == (2, 0.01))
    members = [c for c in cells if (c.coords["width"], c.coords["dataset"], c.coords["depth"], c.coords["lr"]) ==
               (64, "circles", 2, 0.01)]
    assert sq["units"] == len(members) == 3

    def per_seed(arm):
        return np.mean([[r["metrics"]["test_acc"] for r in sorted(runs[c.id], key=lambda r: r["seed"])
                         if r["arm"] == arm] for c in members], axis=0)

    a, b = per_seed("gelu_none"), per_seed("relu")
    assert sq["mean_diff"] == pytest.approx(np.mean(a - b), abs=1e-15)
    boot = sps.bootstrap((a - b,), np.mean, n_resamples=stats.BOOTSTRAP_RESAMPLES, method="BCa",
                         rng=np.random.default_rng(stats.BOOTSTRAP_SEED)).confidence_interval
    assert (sq["ci_low"], sq["ci_high"]) == pytest.approx((boot.low, boot.high), abs=1e-12)
    # without the noise axis every square is one cell, with that cell's own (grid-wide BH) verdict
    spec2 = dataclasses.replace(_small_spec(width=[16, 32, 64], dataset=["moons", "circles"]), base=arms)
    cells2 = spec2.cells()
    an2 = R.analyse_grid(spec2, cells2, _fake_runs(cells2, ["jax"], lambda c: 0.0), ["jax"])
    f2 = an2["heatmaps"][0]
    assert f2["marginalised"] == [] and all(s["units"] == 1 for p in f2["panels"] for s in p["squares"])
    comps = {(c["coords"]["depth"], c["coords"]["lr"], c["coords"]["width"], c["coords"]["dataset"]): c
             for c in an2["comparisons"] if (c["arm"], c["metric"]) == ("gelu_none", "test_acc")}
    for p in f2["panels"]:
        for s in p["squares"]:
            c = comps[(s["x"], s["y"], p["facet"]["width"], p["facet"]["dataset"])]
            assert (s["mean_diff"], s["w_p_bh"], s["kind"]) == (c["mean_diff"], c["w_p_bh"], c["kind"])


# -------------------------------------------------------------------------- a small grid, trained for real

SMALL_GRID = """
[base]
seeds = 3
n_samples = 200
arms = ["relu", "gelu_none"]
[axes]
depth = [1, 2]
dataset = ["moons", "circles"]
lr = [0.01]
epochs = [4]
"""


@pytest.fixture(scope="module")
def small_grid(tmp_path_factory):
    backend = _trainable()[0]
    out = tmp_path_factory.mktemp("grid")
    spec = G.parse_grid(SMALL_GRID)
    return spec, backend, out, GS.run_grid(spec, out, [backend], jobs=1, progress=False)


@pytest.mark.training
@pytest.mark.slow
def test_each_cell_is_the_plain_study_of_its_config(small_grid, tmp_path):
    spec, backend, _, results = small_grid
    assert results["trained_cells"] == 4 and results["resumed_cells"] == 0
    for cell in spec.cells()[::3]:  # two of the four cells: a moons and a circles one
        plain = S.run_study(cell.config, tmp_path / cell.id, [backend], jobs=1, progress=False)
        mine = {(r["arm"], r["seed"]): (r["metrics"], r["curves"], r["versions"]) for r in results["runs"][cell.id]}
        theirs = {(r["arm"], r["seed"]): (r["metrics"], r["curves"], r["versions"]) for r in plain["runs"]}
        assert mine == theirs and len(mine) == 2 * 3


@pytest.mark.training
@pytest.mark.slow
def test_grid_report_files(small_grid, tmp_path):
    _, backend, _, results = small_grid
    paths = GS.write_grid_report(results, tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert saved["spec"]["axes"]["depth"] == [1, 2] and saved["environment"]["frameworks"][backend]
    assert len(saved["analysis"]["comparisons"]) == 4 * 2  # 4 cells x 1 GELU form x 2 metrics
    text = paths["report"].read_text()
    for heading in ("Where GELU helps, hurts or does not matter", "Cells with a significant difference",
                    "Heatmaps of the paired difference", "Loss curves of the most different cells"):
        assert heading in text
    for name in ("heatmap_gelu_none_test_acc", "heatmap_gelu_none_test_loss", "loss_curves"):
        assert paths[name].stat().st_size > 10_000 and f"]({paths[name].name})" in text


@pytest.mark.training
@pytest.mark.slow
def test_grid_resumes_a_lost_cell_and_refuses_other_settings(small_grid, tmp_path, monkeypatch):
    spec, backend, out, results = small_grid
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    lost = spec.cells()[1]
    for p in (copy / "cells" / lost.id).rglob("seed2.json"):
        p.unlink()
    again = GS.run_grid(spec, copy, [backend], jobs=8, progress=False)
    assert again["trained_cells"] == 1 and again["resumed_cells"] == 3
    assert again["jobs"] == 1  # one cell to train: one worker used, not the 8 asked for

    def numbers(res):
        return {c: sorted((r["arm"], r["seed"], json.dumps(r["metrics"]), json.dumps(r["curves"])) for r in rs)
                for c, rs in res["runs"].items()}

    assert numbers(again) == numbers(results)
    other = dataclasses.replace(spec, base={**spec.base, "n_samples": 300})
    monkeypatch.setattr(GS, "train_cell", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(ValueError, match="n_samples"):
        GS.run_grid(other, copy, [backend], jobs=1, progress=False)


@pytest.mark.training
@pytest.mark.slow
def test_ray_and_local_executors_store_the_same_numbers(tmp_path, monkeypatch):
    ray_module = pytest.importorskip("ray", reason="Ray is the optional extra gelulab[ray]")
    backend = _trainable()[0]
    spec = G.parse_grid(SMALL_GRID.replace("depth = [1, 2]", "depth = [1]"))
    # one worker each: the local cells in this process, both Ray tasks on the one worker of a 1-CPU instance (its
    # start-up and one framework import are the cost; the numbers do not depend on how many run at once)
    local = GS.run_grid(spec, tmp_path / "local", [backend], executor="local", jobs=1, progress=False)
    # The grid starts its own Ray instance; the plain study below runs on that same instance (an executor leaves
    # running an instance it did not start), so Ray and its worker's framework start once
    try:
        with monkeypatch.context() as keep:
            keep.setattr(ray_module, "shutdown", lambda *a, **k: None)
            ray = GS.run_grid(spec, tmp_path / "ray", [backend], executor="ray", jobs=1, progress=False)
        assert ray_module.is_initialized()
        _plain_study_on_ray_stores_what_the_local_one_stores(spec, backend, tmp_path)
        assert ray_module.is_initialized()  # not shut down by the study that found it running
    finally:
        ray_module.shutdown()
    assert ray["trained_cells"] == local["trained_cells"] == 2
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("seed*.json"))
    assert len(files) == 2 * 2 * 3
    for rel in files:
        a, b = (json.loads((tmp_path / d / rel).read_text()) for d in ("local", "ray"))
        a.pop("timing"), b.pop("timing"), a.pop("sha256"), b.pop("sha256")  # the checksum covers the timing
        assert a == b, rel  # number for number: metrics, curves, logits, versions, key
    assert {h["pid"] for h in ray["hosts"].values()}.isdisjoint({h["pid"] for h in local["hosts"].values()})
    assert math.isfinite(ray["wall_s"])


def _plain_study_on_ray_stores_what_the_local_one_stores(spec, backend, tmp_path):
    """A plain study on Ray (one task per backend) stores what the local study stores."""
    cfg = spec.cells()[0].config
    plain = {}
    for executor in ("local", "ray"):
        S.run_study(cfg, tmp_path / f"plain_{executor}", [backend], jobs=1, progress=False, executor=executor)
        plain[executor] = {p.relative_to(tmp_path / f"plain_{executor}"): json.loads(p.read_text())
                           for p in (tmp_path / f"plain_{executor}").rglob("seed*.json")}
        for rec in plain[executor].values():
            rec.pop("timing"), rec.pop("sha256")  # the checksum covers the timing
    assert plain["local"] == plain["ray"] and len(plain["ray"]) == 2 * 3
