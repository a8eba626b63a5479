"""The moons report and `gelulab run`'s answer, from made-up run records (no training): how fast each arm trains
(epochs to a training-loss threshold, mean training loss over the epochs, paired GELU - ReLU with a 95 % CI),
sentences that read right for 1, 2 and many, the Environment block, and the figures' grouping of identical
backends. Every expected number is computed here from the hand-made curves with numpy and scipy.stats, not with
the code under test.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from gelulab.core import stats
from gelulab.core.activations import HEADLINE
from gelulab.experiments.moons import grid_report as GR
from gelulab.experiments.moons import plots as P
from gelulab.experiments.moons import report as R
from gelulab.experiments.moons import study as S
from gelulab.experiments.moons.config import MoonsConfig

EPOCHS = 30
CFG = MoonsConfig(n_samples=200, epochs=EPOCHS, seeds=tuple(range(5)), arms=HEADLINE, compare_dtype=None)


def _step_curve(reach: int | None, high: float = 0.3, low: float = 0.1, epochs: int = EPOCHS) -> list[float]:
    """A training-loss curve at `high` before epoch `reach` (1-based) and `low` from it on; never below the
    threshold when reach is None. Its first epoch at or below 0.15 is `reach` by construction."""
    e = np.arange(1, epochs + 1)
    return list(np.where(e < (reach or epochs + 1), high, low))


def _run(backend, arm, seed, curve, acc=0.9, loss=0.3, regime="matched"):
    return {"backend": backend, "regime": regime, "dtype": "float64", "arm": arm, "seed": seed,
            "metrics": {"train_loss": curve[-1], "train_acc": acc, "val_loss": loss, "val_acc": acc,
                        "test_loss": loss, "test_acc": acc},
            "curves": {"train_loss": list(curve), "val_loss": list(curve)}, "recipe": "r",
            "timing": {"group_wall_s": 1.0, "group_cpu_s": 1.0, "group_seeds": 1}, "versions": {}}


# GELU reaches 0.15 later than ReLU on every seed (its plateau), by 6, 8, 7, 9, 5 epochs
RELU_REACH = [10, 12, 11, 13, 9]
GELU_REACH = [16, 20, 18, 22, 14]


def _dynamics_study(backends=("jax",), gelu_reach=GELU_REACH):
    runs = []
    for b in backends:
        for s in CFG.seeds:
            runs.append(_run(b, "relu", s, _step_curve(RELU_REACH[s])))
            runs.append(_run(b, "gelu_none", s, _step_curve(gelu_reach[s])))
    return runs


# ------------------------------------------------------------------------------------------ training speed


def test_epochs_to_reach_and_mean_loss_of_hand_made_curves():
    assert R.epochs_to_loss(_step_curve(7)) == 7
    assert R.epochs_to_loss(_step_curve(None)) is None
    assert R.epochs_to_loss([0.5, 0.15, 0.1]) == 2  # "reach" includes equality
    assert R.epochs_to_loss([0.5, math.nan, 0.1]) is None
    # the step curve's mean by hand: (reach - 1) epochs at 0.3, the rest at 0.1
    assert R.mean_loss(_step_curve(7)) == pytest.approx((6 * 0.3 + 24 * 0.1) / 30, rel=1e-12)
    assert math.isnan(R.mean_loss([0.3, math.inf]))


def test_paired_training_speed_against_scipy():
    res = R.analyse(CFG, _dynamics_study())
    rows = {r["metric"]: r for r in res["dynamics"]}
    d = np.subtract(GELU_REACH, RELU_REACH).astype(float)  # 6, 8, 7, 9, 5
    lo, hi = sps.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sps.sem(d))  # 5 seeds: the Student t interval
    ep = rows["epochs_to_loss"]
    assert ep["mean_diff"] == pytest.approx(7.0) and ep["seeds"] == 5 and ep["ci_method"] == "Student t"
    assert (ep["ci_low"], ep["ci_high"]) == pytest.approx((lo, hi), rel=1e-9)
    assert ep["arm_median"] == 18 and ep["base_median"] == 11
    # mean training loss: each step curve's mean by hand, then the paired t interval
    mg = np.array([((g - 1) * 0.3 + (EPOCHS - g + 1) * 0.1) / EPOCHS for g in GELU_REACH])
    mr = np.array([((r - 1) * 0.3 + (EPOCHS - r + 1) * 0.1) / EPOCHS for r in RELU_REACH])
    dm = mg - mr
    lo2, hi2 = sps.t.interval(0.95, dm.size - 1, loc=dm.mean(), scale=sps.sem(dm))
    ml = rows["mean_train_loss"]
    assert ml["mean_diff"] == pytest.approx(dm.mean(), rel=1e-9)  # 7 epochs x 0.2 / 30 = +0.0467
    assert (ml["ci_low"], ml["ci_high"]) == pytest.approx((lo2, hi2), rel=1e-9)
    words = " ".join(res["conclusions"])
    assert f"Epochs to reach a training loss of {R.LOSS_THRESHOLD:g}, gelu(none) − relu: +7.0 epochs, 95 % CI " \
           f"[{lo:+.1f}, {hi:+.1f}] (Student t), paired over 5 seeds (median epoch 18 for gelu(none), 11 for relu)" \
        in words
    assert f"+{dm.mean():.4f}, 95 % CI [{lo2:+.4f}, {hi2:+.4f}] (Student t)" in words


def test_training_speed_with_twenty_seeds_uses_the_bootstrap():
    rng = np.random.default_rng(4)
    relu = rng.integers(8, 14, 24)
    gelu = relu + rng.integers(4, 10, 24)
    cfg = dataclasses.replace(CFG, seeds=tuple(range(24)))
    runs = [_run("jax", a, s, _step_curve(int(v[s]))) for a, v in (("relu", relu), ("gelu_none", gelu))
            for s in range(24)]
    row = next(r for r in R.analyse(cfg, runs)["dynamics"] if r["metric"] == "epochs_to_loss")
    d = (gelu - relu).astype(float)
    boot = sps.bootstrap((d,), np.mean, n_resamples=9999, method="BCa",
                         rng=np.random.default_rng(0)).confidence_interval
    assert row["ci_method"] == "bootstrap BCa" and row["mean_diff"] == pytest.approx(d.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((boot.low, boot.high), abs=1e-12)


def test_a_seed_that_never_reaches_the_threshold_is_left_out_and_counted():
    reach = [*GELU_REACH[:4], None]
    res = R.analyse(CFG, _dynamics_study(gelu_reach=reach))
    ep = next(r for r in res["dynamics"] if r["metric"] == "epochs_to_loss")
    d = np.subtract(GELU_REACH[:4], RELU_REACH[:4])
    assert ep["seeds"] == 4 and ep["unreached"] == {"gelu_none": 1, "relu": 0}
    assert ep["mean_diff"] == pytest.approx(d.mean())
    assert "left out: the 1 seed where gelu(none) never reached it" in " ".join(res["conclusions"])
    text = R.markdown({**res, "config": CFG.to_dict(), "runs": [], "timing": {}, "wall_s": 0, "environment": {}},
                      sections=("dynamics",))
    assert "gelu(none) never reached it on 1 seed" in text


def test_the_run_answer_states_the_training_speed_in_its_first_25_lines():
    from gelulab.experiments.run.command import answer

    res = R.analyse(CFG, _dynamics_study())
    d = np.subtract(GELU_REACH, RELU_REACH).astype(float)
    lo, hi = sps.t.interval(0.95, d.size - 1, loc=d.mean(), scale=sps.sem(d))
    head = "\n".join(answer(CFG, res, "3500 cells.").splitlines()[:25])
    assert "GELU trains more slowly at first" in head
    assert (f"epochs to reach a training loss of {R.LOSS_THRESHOLD:g}, GELU − ReLU: +7.0 epochs, 95 % CI "
            f"[{lo:+.1f}, {hi:+.1f}] (Student t), paired over 5 seeds") in head
    assert "mean training loss over the 30 epochs (the area under the loss curve ÷ 30), GELU − ReLU: +0.04" in head


# ------------------------------------------------------------------------------- 1, 2 and many in sentences


def test_counts_and_ranges_read_right_for_one_two_and_many():
    assert [R.counted(n, "seed") for n in (1, 2, 30)] == ["1 seed", "2 seeds", "30 seeds"]
    assert R.cannot_be(1, 1, "comparison", "be significant") == "the comparison cannot be significant"
    assert R.cannot_be(2, 2, "comparison", "be significant") == "neither comparison can be significant"
    assert R.cannot_be(5, 5, "comparison", "be significant") == "none of the 5 comparisons can be significant"
    assert R.cannot_be(1, 3, "comparison", "be significant") == "1 of the 3 comparisons cannot be significant"
    pp = lambda v: f"{100 * v:+.2f} pp"
    assert R.span([0.002, 0.002], pp) == "+0.20 pp"  # a range of one value is a value
    assert R.span([0.002, 0.00201], pp) == "+0.20 pp"  # the same once written
    assert R.span([-0.001, 0.002], pp) == "-0.10 pp to +0.20 pp"


_BAD = [r"\b1 (seeds|runs|comparisons|cells|workers|backends)\b", r"\(s\)", r"\b(\S+ pp) to \1",
        r"\b(-?\+?\d+\.\d+) to \1\b", r"\bover 1 paired comparisons\b", r"\b1 of 1\b", r"\b2 of 2\b", "nan"]


def _check_words(text):
    for pattern in _BAD:
        assert not re.search(pattern, text), (pattern, re.search(pattern, text).group(0), text)


def _study(backends, seeds, nudge=0.0):
    """Runs of `backends` that differ (so they are not pooled): GELU one test point better on every seed, the
    backend k's accuracies shifted by k * nudge."""
    runs = []
    for k, b in enumerate(backends):
        for s in range(seeds):
            acc = round((0.9 + 0.01 * s + k * nudge) * 300) / 300
            runs.append(_run(b, "relu", s, _step_curve(10), acc=acc, loss=0.3 - 0.01 * s - 0.001 * k))
            runs.append(_run(b, "gelu_none", s, _step_curve(16), acc=acc + 1 / 300 * (1 + s % 2),
                             loss=0.29 - 0.01 * s - 0.001 * k))
    return runs


@pytest.mark.parametrize("n_backends, seeds", [(1, 1), (1, 2), (2, 2), (3, 2), (1, 8), (3, 8)])
def test_moons_conclusions_read_right_for_one_two_and_many(n_backends, seeds):
    backends = ["jax", "torch", "tensorflow"][:n_backends]
    cfg = dataclasses.replace(CFG, seeds=tuple(range(seeds)))
    res = R.analyse(cfg, _study(backends, seeds, nudge=1 / 300))
    assert [len(g) for g in res["pooled"]] == [1] * n_backends  # they differ: one comparison per backend
    text = "\n".join(res["conclusions"])
    _check_words(text)
    n_cmp = n_backends  # per metric
    if n_cmp == 1:
        assert "one paired comparison (jax, matched regime" in text and "Mean difference " in text
    else:
        assert f"{n_cmp} paired comparisons" in text and "Mean differences " in text
    if seeds < 6:  # the Wilcoxon test cannot reach 0.05: said once, counted over both metrics
        total = 2 * n_cmp
        expected = {2: "neither comparison can be significant", 4: "none of the 4 comparisons can be significant",
                    6: "none of the 6 comparisons can be significant"}[total]
        per = "one" if n_cmp == 1 else str(n_cmp)
        assert f"{expected} at alpha = 0.05 whatever the data ({per} of test accuracy, {per} of test loss)" in text
    tables = R.markdown({**res, "config": cfg.to_dict(), "runs": [], "timing": {}, "wall_s": 0,
                         "environment": {}}, sections=("conclusions", "dynamics"))
    _check_words(tables)


def test_equal_mean_differences_are_one_value():
    # three backends with equal accuracies (nudge 0) but test losses 0.001 apart: not pooled, three comparisons
    # with the same mean accuracy difference
    cfg = dataclasses.replace(CFG, seeds=tuple(range(8)))
    res = R.analyse(cfg, _study(["jax", "torch", "tensorflow"], 8))
    acc = next(c for c in res["conclusions"] if c.startswith("Test accuracy"))
    assert "3 paired comparisons" in acc and re.search(r"Mean differences \+\d\.\d\d pp in each\.", acc)
    _check_words(acc)


def test_setup_lines_name_one_seed_and_two_seeds():
    for seeds, words in (((0,), "- 1 seed (0), dtype"), ((0, 1), "- 2 seeds (0, 1), dtype"),
                         (tuple(range(30)), "- 30 seeds (0..29), dtype")):
        cfg = dataclasses.replace(CFG, seeds=seeds, compare_dtype="float32", compare_seeds=1)
        results = {"config": cfg.to_dict(), "runs": [], "environment": {}, "wall_s": 1.0, "jobs": 1}
        text = R._setup_md(results)
        assert words in text and "the first seed also trained in float32" in text


def test_grid_sentences_read_right_for_one_two_and_many():
    pp = lambda v: f"{100 * v:+.2f} pp"

    def row(mean, lo=-0.01, hi=0.01, kind="none"):
        return {"mean_diff": mean, "ci_low": lo, "ci_high": hi, "ci_method": "Student t", "kind": kind,
                "n": 3, "n_nonzero": 3, "w_p_min": 0.25, "t_p_bh": 0.5, "w_p_bh": 0.5}

    assert GR._mean_diffs([row(0.002)], pp) == "mean difference +0.20 pp"
    assert GR._mean_diffs([row(0.002), row(0.002)], pp) == "mean differences +0.20 pp in each"
    assert GR._mean_diffs([row(0.001), row(0.002), row(0.003)], pp) == "mean differences +0.10 pp to +0.30 pp"
    assert GR._ci_range_text([row(0.0)], pp).startswith("95 % CI (Student t) is [-1.00 pp, +1.00 pp]")
    assert GR._ci_range_text([row(0.0), row(0.0)], pp).startswith("95 % CIs (Student t) lie within")
    one = [{"cell": "c1", "kinds": ["non-finite loss"]}]
    assert GR.grid_divergence_warning(one).startswith("WARNING: 1 run in 1 of the grid's cells")
    assert "c1 1 run (non-finite loss)" in GR.grid_divergence_warning(one)
    two = one + [{"cell": "c2", "kinds": ["non-finite loss"]}]
    assert GR.grid_divergence_warning(two).startswith("WARNING: 2 runs in 2 of the grid's cells")


# ------------------------------------------------------------------------------------------- Environment


def test_environment_block_has_no_empty_dict_and_names_threads_and_dispatch():
    env = {"gelulab": "0.2.0", "threads": 1, "threads_in_effect": {}, "cpu_dispatch": {},
           "frameworks": {"jax": {"jax": "0.10.2"}}}
    text = R.environment_md(env)
    assert "{}" not in text and "threads in effect" not in text and "CPU dispatch" not in text
    env.update(threads_in_effect={"torch": {"intra_op": 1, "inter_op": 1},
                                  "jax": {"intra_op": 1, "xla_flags": "--xla_cpu_multi_thread_eigen=false",
                                          "requested": 1, "applied": True}},
               cpu_dispatch={"torch": "avx512", "jax": "x86_v4"})
    text = R.environment_md(env)
    assert "- threads in effect: torch intra_op 1, inter_op 1; jax intra_op 1, requested 1, applied True" in text
    assert "- CPU dispatch level: torch avx512; jax x86_v4" in text


def test_runtime_environment_comes_from_the_run_records():
    runs = [{"backend": "torch", "runtime": {"threads_in_effect": {"intra_op": 1, "inter_op": 1},
                                             "cpu_dispatch": "avx2"}},
            {"backend": "jax", "runtime": {"threads_in_effect": {"intra_op": 1}, "cpu_dispatch": None}},
            {"backend": "tensorflow"}]  # stored by an earlier gelulab: not known, left out
    env = S.runtime_environment(runs)
    assert env == {"threads_in_effect": {"torch": {"intra_op": 1, "inter_op": 1}, "jax": {"intra_op": 1}},
                   "cpu_dispatch": {"torch": "avx2"}}
    assert S.runtime_environment([{"backend": "jax"}]) == {}  # nothing known: no key, not an empty dict


# ------------------------------------------------------------------------------------------------ figures


def test_identical_backends_are_drawn_once_with_a_note(tmp_path):
    runs = _dynamics_study(backends=("jax", "torch", "tensorflow"))
    res = R.analyse(CFG, runs)
    assert res["pooled"] == [["jax", "torch", "tensorflow"]]
    results = {**res, "config": CFG.to_dict(), "runs": runs, "boundaries": []}
    rows = P.groups(results)
    assert [(g["backend"], g["label"]) for g in rows] == [("jax", "jax = torch = tensorflow")]
    note = P.pooled_note(results)
    assert note.startswith("jax, torch and tensorflow give the same numbers (training-loss trajectories within "
                           "0.0e+00 of each other") and note.endswith("drawn once.")
    paths = P.write_plots(results, tmp_path)
    assert sorted(paths) == ["decision_boundaries", "loss_curves", "test_accuracy"]
    assert all(p.stat().st_size > 10_000 for p in paths.values())


def test_backends_that_differ_get_a_row_each_and_no_note():
    runs = _study(["jax", "torch"], 3, nudge=1 / 300)
    cfg = dataclasses.replace(CFG, seeds=(0, 1, 2))
    res = R.analyse(cfg, runs)
    results = {**res, "config": cfg.to_dict(), "runs": runs}
    assert [g["label"] for g in P.groups(results)] == ["jax", "torch"]
    assert P.pooled_note(results) is None


def test_dot_plot_puts_ties_side_by_side():
    x = P._dodge([1.0, 2.0, 1.0, 1.0], center=5.0, step=0.1)
    assert x[1] == 5.0  # a value alone sits at the centre
    assert sorted(x[[0, 2, 3]]) == pytest.approx([4.9, 5.0, 5.1])  # three ties spread one step apart
    assert stats.describe([0.9, 0.9])["sd"] == 0  # every seed equal: the figure draws no interval then
