"""Statistics a statistician would sign (core/stats.py, experiments/moons/report.py): intervals inside each metric's
range, effect sizes, the power limit of the seed count, pooling of identical backends, the divergence flag.

References: Newcombe (1998, Statistics in Medicine 17:857, Table I) for Wilson intervals; R's t.test on the
`sleep` data (Student 1908) for the paired mean difference and sd; the definitions of the Wilcoxon signed-rank
distribution (2^n equally likely sign patterns), of the Hodges-Lehmann estimate (median of Walsh averages) and of
Cohen's d_z (mean / sd of the differences).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from gelulab.core import stats
from gelulab.experiments.moons import report as R
from gelulab.experiments.moons.config import MoonsConfig

SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


@pytest.mark.parametrize("k, n, low, high", [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605)])
def test_accuracy_ci_is_wilsons_interval(k, n, low, high):
    s = stats.accuracy_summary([k / n], n)  # Newcombe 1998, Table I, method 3 (score interval)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((low, high), abs=5e-5)
    assert (s["correct"], s["total"]) == (k, n)


def test_accuracy_ci_stays_inside_0_and_1():
    acc = [1.0, 0.99, 1.0]  # three seeds near 100 %: the old t interval ran past 100 %
    t_high = stats.describe(acc)["ci_high"]
    assert t_high > 1.0
    s = stats.accuracy_summary(acc, 300)
    assert 0.98 < s["ci_low"] < s["mean"] < s["ci_high"] <= 1.0
    assert stats.accuracy_summary([1.0, 1.0], 300)["ci_high"] == 1.0
    with pytest.raises(ValueError, match=r"shares in \[0, 1\]"):
        stats.accuracy_summary([1.2], 300)


def test_loss_ci_is_on_the_log_scale_and_positive():
    losses = [0.01, 0.2, 0.05]  # the old t interval of the mean went below zero
    assert stats.describe(losses)["ci_low"] < 0
    s = stats.positive_summary(losses)
    logs = np.log(losses)
    half = sps.t.ppf(0.975, 2) * np.std(logs, ddof=1) / math.sqrt(3)
    assert s["geo_mean"] == pytest.approx(math.exp(logs.mean()), rel=1e-12)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((math.exp(logs.mean() - half), math.exp(logs.mean() + half)),
                                                        rel=1e-12)
    assert 0 < s["ci_low"] < s["geo_mean"] < s["ci_high"]


def test_paired_effect_sizes_against_r_and_the_definitions():
    r = stats.paired(SLEEP_1, SLEEP_2)
    # R: t.test(extra ~ group, data = sleep, paired = TRUE): mean difference -1.58, CI (-2.4598858, -0.7001142)
    assert (r["t_ci_low"], r["t_ci_high"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert r["d_z"] == pytest.approx(-1.58 / 1.229995, rel=1e-6)  # R: sd of the differences 1.229995
    d = np.subtract(SLEEP_1, SLEEP_2)
    walsh = [(d[i] + d[j]) / 2 for i in range(d.size) for j in range(i, d.size)]
    assert r["hodges_lehmann"] == pytest.approx(float(np.median(walsh)), abs=1e-12)
    # ten seeds: below BOOTSTRAP_MIN_SEEDS the reported CI is R's t interval, and no bootstrap is made
    assert r["ci_method"] == "Student t" and 10 < stats.BOOTSTRAP_MIN_SEEDS
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((-2.4598858, -0.7001142), abs=1e-7)
    assert math.isnan(r["boot_ci_low"]) and math.isnan(r["boot_ci_high"])


def test_bootstrap_interval_of_a_bounded_metric_stays_in_range():
    diffs = [0.0, 1 / 300, -1 / 300, 2 / 300, 1 / 300]  # accuracy differences of five seeds
    lo, hi, _ = stats.bootstrap_mean_ci(diffs)
    assert min(diffs) <= lo <= np.mean(diffs) <= hi <= max(diffs)
    assert stats.bootstrap_mean_ci([0.01, 0.01, 0.01])[:2] == (0.01, 0.01)
    assert stats.bootstrap_mean_ci([0.02, 0.03]) == stats.bootstrap_mean_ci([0.02, 0.03])  # reproducible


def _wilcoxon_min_by_enumeration(n):
    ranks = np.arange(1, n + 1)
    mean = ranks.sum() / 2
    totals = [sum(r for r, s in zip(ranks, signs) if s) for signs in itertools.product((0, 1), repeat=n)]
    return min(np.mean([abs(t - mean) >= abs(w - mean) for t in totals]) for w in totals)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 9])
def test_smallest_attainable_wilcoxon_p(n):
    assert stats.wilcoxon_min_p(n) == pytest.approx(_wilcoxon_min_by_enumeration(n), rel=1e-12)
    assert stats.wilcoxon_min_p(n) == pytest.approx(2 / 2 ** n, rel=1e-12)


def test_five_seeds_cannot_be_significant_and_the_verdict_says_so():
    assert stats.wilcoxon_min_p(5) == pytest.approx(0.0625)
    assert stats.seeds_needed(0.05) == 6
    r = stats.paired([0.95, 0.96, 0.97, 0.98, 0.99], [0.90, 0.90, 0.90, 0.90, 0.90])
    assert r["t_p"] < 0.001 and r["w_p"] == pytest.approx(0.0625)
    assert stats.classify(r) == "underpowered"
    text = stats.verdict(r, "GELU", "ReLU", "test accuracy")
    assert "cannot be significant with 5 non-zero paired differences" in text and "6 are needed" in text
    six = stats.paired([0.95, 0.96, 0.97, 0.98, 0.99, 0.97], [0.90] * 6)
    assert stats.classify(six) == "higher"


def test_above_chance_is_the_one_sided_binomial_test():
    # P(X >= 165 | n = 300, p = 1/2) = 0.0459..., P(X >= 164) = 0.0565...
    assert stats.above_chance(165, 300) and not stats.above_chance(164, 300)
    assert sps.binom.sf(164, 300, 0.5) < 0.05 < sps.binom.sf(163, 300, 0.5)


# ------------------------------------------------------------------------- the moons report: pooling, divergence

CFG = MoonsConfig(n_samples=200, epochs=3, seeds=(0, 1, 2), arms=("relu", "gelu_none"), compare_dtype=None)


def _run(backend, arm, seed, acc=0.9, loss=0.3, curve=(0.6, 0.4, 0.3)):
    return {"backend": backend, "regime": "matched", "dtype": "float64", "arm": arm, "seed": seed,
            "metrics": {"train_loss": curve[-1], "train_acc": acc, "val_loss": loss, "val_acc": acc,
                        "test_loss": loss, "test_acc": acc},
            "curves": {"train_loss": list(curve), "val_loss": list(curve)}, "recipe": "r",
            "timing": {"group_wall_s": 1.0, "group_cpu_s": 1.0, "group_seeds": 3}, "versions": {}}


def _study(backends, tweak=None):
    runs = []
    for b in backends:
        for arm in CFG.arms:
            for s in CFG.seeds:
                acc = 0.9 + 0.01 * s + (0.02 if arm == "gelu_none" else 0.0)
                r = _run(b, arm, s, acc=round(acc * 30) / 30, loss=0.3 - 0.01 * s)
                runs.append(tweak(r) if tweak else r)
    return runs


def test_identical_backends_are_pooled_and_shown_once():
    res = R.analyse(CFG, _study(["jax", "torch", "tensorflow"]))
    assert res["pooled"] == [["jax", "torch", "tensorflow"]]
    assert {r["backend"] for r in res["summary"]} == {"jax = torch = tensorflow"}
    assert len(res["summary"]) == 2 and len(res["paired"]) == 2  # one comparison per metric, not three
    assert any("count as one comparison, not 3" in c for c in res["conclusions"])
    text = R.markdown({**res, "config": CFG.to_dict(), "runs": [], "timing": {}, "wall_s": 0, "environment": {}},
                      sections=("summary", "paired"))
    assert text.count("| jax = torch = tensorflow |") == 4


def test_backends_that_differ_are_not_pooled():
    def nudge(r):
        if r["backend"] == "torch" and r["seed"] == 1 and r["arm"] == "relu":
            r = {**r, "metrics": {**r["metrics"], "test_acc": r["metrics"]["test_acc"] + 1 / 30}}
        return r

    res = R.analyse(CFG, _study(["jax", "torch"], nudge))
    assert res["pooled"] == [["jax"], ["torch"]]
    assert {r["backend"] for r in res["summary"]} == {"jax", "torch"}


def test_divergence_is_flagged():
    def explode(r):
        if r["arm"] == "relu":
            return _run(r["backend"], "relu", r["seed"], acc=0.5, loss=1e18, curve=(0.7, 1e9, 1e18))
        if r["seed"] == 0:
            return _run(r["backend"], r["arm"], 0, acc=0.9, loss=math.nan, curve=(0.7, math.nan, math.nan))
        return r

    res = R.analyse(CFG, _study(["jax"], explode))
    kinds = {(d["arm"], d["seed"]): d["kinds"] for d in res["divergence"]}
    assert kinds[("relu", 0)] == ["final training loss >= ln 2", "test accuracy not above chance"]
    assert kinds[("gelu_none", 0)] == ["non-finite loss"]
    assert ("gelu_none", 1) not in kinds
    assert res["conclusions"][0].startswith("**WARNING: 4 runs diverged or did not learn**")
    gelu = next(r for r in res["summary"] if r["arm"] == "gelu_none")
    assert gelu["diverged"] == 1 and gelu["test_loss"]["n"] == 2  # the nan loss is left out, not fatal


# ------------------------------------------------------------------ intervals and verdicts at tiny seed counts


def _t_interval_by_hand(d):
    """mean +- t_{n-1, 0.975} s / sqrt(n), from the formula (s: sample sd, ddof = 1)."""
    d = np.asarray(d, float)
    n = d.size
    half = sps.t.ppf(0.975, n - 1) * math.sqrt(np.sum((d - d.mean()) ** 2) / (n - 1)) / math.sqrt(n)
    return d.mean() - half, d.mean() + half


def test_two_seeds_get_the_t_interval_not_the_min_and_max():
    a, b = [0.90, 0.90], [0.90 + 2 / 30, 0.90 + 1 / 30]  # differences -6.67 and -3.33 pp
    d = np.subtract(a, b)
    assert stats.bootstrap_mean_ci(d)[:2] == pytest.approx((d.min(), d.max()), abs=1e-12)  # why not the bootstrap
    r = stats.paired(a, b, bounds=(-1.0, 1.0))
    lo, hi = _t_interval_by_hand(d)
    assert (lo, hi) == pytest.approx((-0.2618, 0.1618), abs=1e-4)  # about [-26, +16] pp
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((lo, hi), rel=1e-12)
    assert r["ci_method"] == "Student t"
    assert "95 % CI [-0.262, +0.162] (Student t)" in stats.verdict(r, "GELU", "ReLU", "test accuracy")
    # two equal differences: no spread, so no interval rather than one of zero width
    same = stats.paired([0.95, 0.95], [0.90, 0.90])
    assert math.isnan(same["ci_low"]) and same["ci_method"] == stats.NO_SPREAD
    assert "no CI (every difference equal" in stats.verdict(same, "GELU", "ReLU", "test accuracy")


def test_an_accuracy_interval_stays_inside_the_range_of_a_difference():
    r = stats.paired([1.0, 0.0], [0.0, 1.0], bounds=(-1.0, 1.0))  # t interval 0 +- 12.7: past +-1
    assert _t_interval_by_hand([1.0, -1.0])[1] > 12
    assert (r["ci_low"], r["ci_high"]) == (-1.0, 1.0)


def test_the_bootstrap_starts_at_its_documented_seed_count():
    rng = np.random.default_rng(3)
    for n in (stats.BOOTSTRAP_MIN_SEEDS - 1, stats.BOOTSTRAP_MIN_SEEDS):
        a, b = rng.normal(0.9, 0.01, n), rng.normal(0.9, 0.01, n)
        r = stats.paired(a, b)
        if n < stats.BOOTSTRAP_MIN_SEEDS:
            assert r["ci_method"] == "Student t"
            assert (r["ci_low"], r["ci_high"]) == pytest.approx(_t_interval_by_hand(a - b), rel=1e-12)
        else:
            boot = sps.bootstrap((a - b,), np.mean, n_resamples=stats.BOOTSTRAP_RESAMPLES, method="BCa",
                                 rng=np.random.default_rng(stats.BOOTSTRAP_SEED)).confidence_interval
            assert r["ci_method"] == "bootstrap BCa"
            assert (r["ci_low"], r["ci_high"]) == pytest.approx((boot.low, boot.high), abs=1e-12)
    # the module's reason: for normal data the bootstrap interval is z sqrt((n-1)/n) / t_{n-1} of the t
    # interval's width; from BOOTSTRAP_MIN_SEEDS seeds that is over 0.9, with 8 seeds under 0.8
    def ratio(n):
        return sps.norm.ppf(0.975) * math.sqrt((n - 1) / n) / sps.t.ppf(0.975, n - 1)

    assert ratio(stats.BOOTSTRAP_MIN_SEEDS) > 0.9 and ratio(8) < 0.8 and ratio(2) == pytest.approx(0.109, abs=1e-3)


def test_one_seed_gives_no_interval_and_no_nan_in_the_text():
    cfg = dataclasses.replace(CFG, seeds=(0,))
    runs = [r for r in _study(["jax"]) if r["seed"] == 0]
    res = R.analyse(cfg, runs)
    row = res["paired"][0]
    assert math.isnan(row["ci_low"]) and row["ci_method"] == "one seed gives no interval"
    text = R.markdown({**res, "config": cfg.to_dict(), "runs": [], "timing": {}, "wall_s": 0, "environment": {}},
                      sections=("conclusions", "summary", "paired"))
    assert "nan" not in text.lower()
    assert "No CI: one seed gives no interval (1 comparison)" in text
    assert "| none | one seed gives no interval |" in text
    assert "With 1 seed the Wilcoxon signed-rank test cannot give a p below 1 " in text  # 2 / 2^1


def test_the_smallest_sign_test_p_is_two_over_two_to_the_n():
    # two-sided sign test (and Wilcoxon): the most extreme of the 2^n equally likely sign patterns are all + and
    # all -, so the smallest p is 2 / 2^n; 6 is the first n with 2 / 2^n < 0.05
    needed = next(n for n in itertools.count(1) if 2 / 2 ** n < 0.05)
    assert needed == stats.seeds_needed(0.05)
    for n in range(1, 9):
        assert sps.binomtest(n, n, 0.5).pvalue == pytest.approx(2 / 2 ** n, rel=1e-12)
        assert stats.wilcoxon_min_p(n) == pytest.approx(2 / 2 ** n, rel=1e-12)


def test_a_ci_that_excludes_zero_without_a_significant_verdict_is_said_so():
    # eight seeds: the t-test says p < 0.05 (its interval excludes 0), the Wilcoxon does not
    d = np.array([3, 2, 4, 1, 3, 2, 5, -3]) / 300
    assert sps.ttest_1samp(d, 0).pvalue < 0.05 < sps.wilcoxon(d).pvalue
    r = stats.paired(0.9 + d, np.full(8, 0.9))
    kind = stats.classify(r)
    assert kind == "inconclusive" and stats.ci_excludes_zero(r) and stats.ci_disagrees(r, kind)
    assert "the CI excludes 0, but it covers this comparison alone" in stats.verdict(r, "a", "b", "accuracy")
    cfg = dataclasses.replace(CFG, seeds=tuple(range(8)))
    runs = [_run("jax", arm, s, acc=0.9 + (d[s] if arm == "gelu_none" else 0.0), loss=0.3) for arm in CFG.arms
            for s in range(8)]
    acc_line = next(c for c in R.analyse(cfg, runs)["conclusions"] if c.startswith("Test accuracy"))
    assert "The 95 % CI (Student t: fewer than 20 seeds) is [" in acc_line
    assert "The CI excludes 0 where the verdict is not a significant difference" in acc_line


def test_merge_columns_hold_what_they_are_named():
    from gelulab.experiments.merge.kinds import KINDS

    res = R.analyse(CFG, _study(["jax"]))
    rows = {(r["arm"], r["measure"]): r["value"] for r in KINDS["moons"].rows(res)}
    relu = [r for r in _study(["jax"]) if r["arm"] == "relu"]
    accs = [r["metrics"]["test_acc"] for r in relu]
    losses = [r["metrics"]["test_loss"] for r in relu]
    assert rows[("relu", "test acc % (mean)")] == pytest.approx(100 * np.mean(accs), rel=1e-12)
    assert rows[("relu", "test loss (geometric mean)")] == pytest.approx(math.prod(losses) ** (1 / 3), rel=1e-12)
    gelu = [r["metrics"]["test_acc"] for r in _study(["jax"]) if r["arm"] == "gelu_none"]
    assert rows[("gelu_none", "test acc − ReLU, pp (mean paired difference)")] == pytest.approx(
        100 * np.mean(np.subtract(gelu, accs)), rel=1e-9)
