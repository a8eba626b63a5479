"""Statistics over seeds, from scipy.stats: intervals that respect each metric's range, paired comparisons with
effect sizes, the power limit of the seed count, verdicts.

describe(values)            mean, sample sd, 95 % CI of the mean (Student t): for unbounded quantities
accuracy_summary(acc, n)    an accuracy that is a share of n test points per seed: mean, sd, and the Wilson
                            score interval of the pooled correct / total (scipy.stats.binomtest), inside [0, 1]
positive_summary(values)    a positive quantity (a loss): geometric mean and its t interval on the log scale,
                            always > 0
bootstrap_mean_ci(values)   scipy.stats.bootstrap BCa interval of the mean (percentile where BCa is undefined)
paired(a, b)                the paired difference a - b: mean, sd, a 95 % CI whose method holds at the seed count
                            (Student t below BOOTSTRAP_MIN_SEEDS, BCa bootstrap from there; none from one seed),
                            Cohen's d_z, the Hodges-Lehmann estimate, the paired t-test, the Wilcoxon signed-rank
                            test with the smallest p its seed count can reach, seeds won / tied / lost
ci_rule()                   that choice of interval in words, for reports
wilcoxon_min_p(n)           that smallest two-sided p (scipy.stats.wilcoxon, exact), and seeds_needed(alpha)
above_chance(k, n)          one-sided binomial test of k correct of n against chance (scipy.stats.binomtest)
adjust_bh(p)                Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control)
classify, verdict           the conclusion in words the numbers support, "no significant difference" and
                            "cannot be significant with this many seeds" included; ci_disagrees flags a CI that
                            excludes 0 where the verdict is not significant (or the reverse), and verdict says so

Which interval for the mean paired difference. The bootstrap resamples the observed differences, so its interval
lies within their range and, for normal data, is about z_0.975 sqrt((n-1)/n) / t_{n-1,0.975} as wide as the exact
t interval: 0.11 of it with 2 seeds (the bootstrap interval of two differences is their min and max), 0.37 with 3,
0.78 with 8, 0.91 with 20 (Hesterberg 2015, The American Statistician 69:371, "narrowness bias"). Below
BOOTSTRAP_MIN_SEEDS seeds the report therefore uses the Student t interval mean +- t_{n-1,0.975} s / sqrt(n)
(scipy.stats.ttest_rel(a, b).confidence_interval()), exact for normal differences and with the t-test's own
coverage, so that it excludes 0 exactly when the unadjusted t-test has p < 0.05; from BOOTSTRAP_MIN_SEEDS seeds
the BCa bootstrap (Efron 1987), which follows skewed differences. One seed gives no interval at all.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

ALPHA = 0.05
CONFIDENCE = 0.95


def _stats():
    """scipy.stats, imported on first use: it takes about 0.7 s, and every `gelulab` command imports this module."""
    from scipy import stats

    return stats


BOOTSTRAP_RESAMPLES = 9999  # scipy.stats.bootstrap's default
BOOTSTRAP_SEED = 0  # a fixed generator: the same report from the same runs
BOOTSTRAP_MIN_SEEDS = 20  # fewer paired seeds: the Student t interval (see the module docstring)
ONE_SEED = "one seed gives no interval"
NO_SPREAD = "every difference equal, so no spread to make an interval from"


def _values(values, name: str = "values") -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError(f"{name}: expected at least one value, got none")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: expected finite values, got {v[~np.isfinite(v)][:3].tolist()}")
    return v


def describe(values, confidence: float = CONFIDENCE) -> dict:
    """Mean, sample sd (ddof=1) and the `confidence` CI of the mean, mean +- t_{n-1} sd / sqrt(n).

    values: 1-d array-like of finite floats (one per seed). Returns {n, mean, sd, ci_low, ci_high}; with n = 1
    the sd and the interval are nan; with sd = 0 the interval is [mean, mean]. Source: scipy.stats.t.interval
    with scale = scipy.stats.sem. Raises ValueError for no or non-finite values.
    """
    v = _values(values)
    n, mean = v.size, float(np.mean(v))
    if n < 2:
        return {"n": n, "mean": mean, "sd": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    sd = float(np.std(v, ddof=1))
    if sd == 0:
        return {"n": n, "mean": mean, "sd": 0.0, "ci_low": mean, "ci_high": mean}
    lo, hi = _stats().t.interval(confidence, df=n - 1, loc=mean, scale=_stats().sem(v))
    return {"n": n, "mean": mean, "sd": sd, "ci_low": float(lo), "ci_high": float(hi)}


def accuracy_summary(accuracies, n_test: int, confidence: float = CONFIDENCE) -> dict:
    """Summary of per-seed accuracies, each a share of `n_test` test points: {n, mean, sd, correct, total,
    ci_low, ci_high, ci_method}. The interval is the Wilson score interval of the pooled proportion correct /
    total (scipy.stats.binomtest(...).proportion_ci(method="wilson"); Wilson 1927, Newcombe 1998): it lies in
    [0, 1] and reflects test-point sampling; the seed-to-seed spread is the sd. Raises ValueError for no or
    non-finite values, or values outside [0, 1]."""
    v = _values(accuracies, "accuracies")
    if np.any((v < 0) | (v > 1)):
        raise ValueError(f"accuracies: expected shares in [0, 1], got {v[(v < 0) | (v > 1)][:3].tolist()}")
    if isinstance(n_test, bool) or int(n_test) != n_test or n_test < 1:
        raise ValueError(f"n_test={n_test!r}: expected a positive number of test points")
    correct = int(np.sum(np.rint(v * n_test)))
    total = int(n_test) * v.size
    ci = _stats().binomtest(correct, total).proportion_ci(confidence, method="wilson")
    return {"n": int(v.size), "mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if v.size > 1 else math.nan,
            "correct": correct, "total": total, "ci_low": float(ci.low), "ci_high": float(ci.high),
            "ci_method": f"Wilson score interval of {correct}/{total} pooled test points"}


def positive_summary(values, confidence: float = CONFIDENCE) -> dict:
    """Summary of a positive quantity over seeds (a loss): {n, mean, sd, geo_mean, ci_low, ci_high, ci_method}.
    The interval is the t interval of the mean of log(values), exponentiated: a CI of the geometric mean, > 0
    (nan with one value; a value <= 0 leaves the interval nan). Raises ValueError for no or non-finite values."""
    v = _values(values)
    out = {"n": int(v.size), "mean": float(np.mean(v)), "sd": float(np.std(v, ddof=1)) if v.size > 1 else math.nan,
           "geo_mean": math.nan, "ci_low": math.nan, "ci_high": math.nan,
           "ci_method": "t interval of the mean log, exponentiated (geometric mean)"}
    if np.all(v > 0):
        d = describe(np.log(v), confidence)
        out.update(geo_mean=math.exp(d["mean"]), ci_low=math.exp(d["ci_low"]) if np.isfinite(d["ci_low"]) else math.nan,
                   ci_high=math.exp(d["ci_high"]) if np.isfinite(d["ci_high"]) else math.nan)
    return out


def bootstrap_mean_ci(values, confidence: float = CONFIDENCE) -> tuple[float, float, str]:
    """(low, high, method): the `confidence` bootstrap interval of the mean of `values` (1-d, finite), from
    scipy.stats.bootstrap with BOOTSTRAP_RESAMPLES resamples and a fixed generator: BCa (Efron 1987), or the
    percentile interval where BCa is undefined (too few distinct values); [v, v] when every value is v; nan with
    one value. The interval lies within [min, max] of the values, so a bounded metric's range is respected."""
    v = _values(values)
    if np.all(v == v[0]):
        return (float(v[0]), float(v[0]), "all values equal") if v.size > 1 else (math.nan, math.nan, "one value")
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scipy warns when BCa is degenerate; the percentile interval follows
            ci = _stats().bootstrap((v,), np.mean, confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                                 method=method, rng=np.random.default_rng(BOOTSTRAP_SEED)).confidence_interval
        if np.isfinite(ci.low) and np.isfinite(ci.high):
            return float(ci.low), float(ci.high), f"bootstrap {method}"
    return math.nan, math.nan, "bootstrap undefined"


def wilcoxon_min_p(n: int) -> float:
    """The smallest two-sided p-value the Wilcoxon signed-rank test can give with n non-zero differences: that of
    n differences all of one sign and of distinct sizes (scipy.stats.wilcoxon, exact distribution; 2 / 2^n for n
    <= 50). n = 5 gives 0.0625, so five seeds can never reach p < 0.05. 1.0 for n = 0."""
    if n < 1:
        return 1.0
    return float(_stats().wilcoxon(np.arange(1.0, n + 1.0)).pvalue)


def seeds_needed(alpha: float = ALPHA) -> int:
    """The fewest non-zero paired differences for which the Wilcoxon signed-rank test can reach p < alpha."""
    n = 1
    while wilcoxon_min_p(n) >= alpha:
        n += 1
    return n


def above_chance(correct: int, trials: int, chance: float = 0.5, alpha: float = ALPHA) -> bool:
    """Whether `correct` of `trials` is significantly above the chance rate `chance` (one-sided exact binomial
    test, scipy.stats.binomtest(alternative="greater"), p < alpha)."""
    return bool(_stats().binomtest(int(correct), int(trials), chance, alternative="greater").pvalue < alpha)


def hodges_lehmann(d) -> float:
    """The Hodges-Lehmann estimate of the centre of paired differences d: the median of the Walsh averages
    (d_i + d_j) / 2, i <= j (Hodges & Lehmann 1963; the estimate that goes with the Wilcoxon signed-rank test)."""
    v = _values(d, "d")
    i, j = np.triu_indices(v.size)
    return float(np.median((v[i] + v[j]) / 2))


def ci_rule() -> str:
    """The interval method of `paired` in words, for the footnote of a report."""
    return (f"95 % CI of the mean paired difference: the Student t interval (scipy.stats.ttest_rel) below "
            f"{BOOTSTRAP_MIN_SEEDS} seeds, where a bootstrap interval is too narrow (a bootstrap interval of 2 "
            f"seeds would be just their min and max); the scipy.stats.bootstrap BCa interval from "
            f"{BOOTSTRAP_MIN_SEEDS} seeds "
            "(percentile where BCa is undefined); no interval from one seed. Each CI covers its own comparison "
            "and is not adjusted for multiple comparisons")


def _clip(lo: float, hi: float, bounds) -> tuple[float, float]:
    if bounds is None or not (np.isfinite(lo) and np.isfinite(hi)):
        return lo, hi
    return max(lo, bounds[0]), min(hi, bounds[1])


def paired(a, b, higher_is_better: bool = True, confidence: float = CONFIDENCE, bounds=None) -> dict:
    """Paired comparison of a and b over the same seeds (a[i] and b[i] share seed i): d = a - b.

    Returns {n, mean_diff, sd_diff, ci_low, ci_high, ci_method, t_ci_low, t_ci_high, boot_ci_low, boot_ci_high,
    d_z, hodges_lehmann, t_stat, t_p, w_stat, w_p, w_p_min, n_nonzero, wins, ties, losses}: ci_* is the interval
    of the mean difference whose method holds at n (see the module docstring): the t interval t_ci_* below
    BOOTSTRAP_MIN_SEEDS seeds, the bootstrap boot_ci_* (bootstrap_mean_ci: BCa, within the observed differences)
    from there; nan with one seed (ci_method ONE_SEED) and when every difference is the same (ci_method
    NO_SPREAD: a zero-width interval would overstate); boot_ci_* is computed from BOOTSTRAP_MIN_SEEDS seeds only
    (nan below). t_ci_* is the
    interval of scipy.stats.ttest_rel(a, b); d_z = mean / sd of d (Cohen's d for paired samples);
    hodges_lehmann the median of the Walsh averages; t_p from the paired t-test; w_p from scipy.stats.wilcoxon(a,
    b) (two-sided, zero differences dropped, the exact distribution when n <= 50 and there are no ties, else the
    normal approximation); w_p_min = wilcoxon_min_p(n_nonzero), the smallest w_p these seeds could give;
    wins/ties/losses count seeds where a is better / equal / worse (better = higher when higher_is_better, else
    lower). bounds: (low, high) the mean difference cannot leave (e.g. (-1, 1) for accuracies): the intervals are
    clipped to it. Tests that are undefined (n < 2, all d equal) give nan, except that all-zero differences give
    p = 1 (nothing to detect). Raises ValueError when a and b differ in length or hold no or non-finite values.
    """
    a, b = _values(a, "a"), _values(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired: a has {a.size} values and b has {b.size}; expected one pair per seed")
    d = a - b
    better = d if higher_is_better else -d
    sd = float(np.std(d, ddof=1)) if d.size > 1 else math.nan
    n_nonzero = int(np.sum(d != 0))
    out = {"n": int(d.size), "mean_diff": float(np.mean(d)), "sd_diff": sd,
           "wins": int(np.sum(better > 0)), "ties": int(np.sum(d == 0)), "losses": int(np.sum(better < 0)),
           "ci_low": math.nan, "ci_high": math.nan, "ci_method": ONE_SEED,
           "t_ci_low": math.nan, "t_ci_high": math.nan, "boot_ci_low": math.nan, "boot_ci_high": math.nan,
           "d_z": float(np.mean(d)) / sd if sd and np.isfinite(sd) else math.nan,
           "hodges_lehmann": hodges_lehmann(d), "t_stat": math.nan, "t_p": math.nan,
           "w_stat": math.nan, "w_p": math.nan, "n_nonzero": n_nonzero, "w_p_min": wilcoxon_min_p(n_nonzero)}
    if d.size < 2:
        if np.all(d == 0):
            out.update(t_p=1.0, w_p=1.0)
        return out
    if np.all(d == d[0]):  # no spread: sd = 0, the t statistic is 0/0 (all zero) or infinite; a zero-width
        out["ci_method"] = NO_SPREAD  # interval would claim a certainty these seeds do not give
        if d[0] == 0:
            out.update(t_p=1.0, w_p=1.0)
            return out
    else:
        t = _stats().ttest_rel(a, b)
        lo, hi = _clip(*(float(v) for v in t.confidence_interval(confidence)), bounds)
        out.update(t_stat=float(t.statistic), t_p=float(t.pvalue), t_ci_low=lo, t_ci_high=hi)
        if d.size < BOOTSTRAP_MIN_SEEDS:
            out.update(ci_low=lo, ci_high=hi, ci_method="Student t")
        else:
            blo, bhi, method = bootstrap_mean_ci(d, confidence)
            blo, bhi = _clip(blo, bhi, bounds)
            out.update(boot_ci_low=blo, boot_ci_high=bhi, ci_low=blo, ci_high=bhi, ci_method=method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scipy warns when zeros/ties force the normal approximation
        w = _stats().wilcoxon(a, b)
    out.update(w_stat=float(w.statistic), w_p=float(w.pvalue))
    return out


def adjust_bh(pvalues) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate) of a family of tests; nan entries stay nan
    and
    are left out of the family. Source: scipy.stats.false_discovery_control(method="bh")."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = _stats().false_discovery_control(p[ok], method="bh")
    return out.tolist()


def classify(result: dict, alpha: float = ALPHA, p_keys=("w_p", "t_p")) -> str:
    """The category of a `paired` result: "same" (every difference 0), "underpowered" (the Wilcoxon test cannot
    reach alpha with these seeds: w_p_min >= alpha), "untestable" (a p is nan), "higher" or "lower" (a
    significantly above / below b: every p in p_keys below alpha), "none" (no p below alpha: no significant
    difference) or "inconclusive" (the tests disagree)."""
    if result["ties"] == result["n"]:
        return "same"
    if result.get("w_p_min", 0.0) >= alpha and any(k.startswith("w_p") for k in p_keys):
        return "underpowered"
    ps = [result[k] for k in p_keys]
    if not all(np.isfinite(p) for p in ps):
        return "untestable"
    if all(p < alpha for p in ps):
        return "higher" if result["mean_diff"] > 0 else "lower"
    return "none" if all(p >= alpha for p in ps) else "inconclusive"


def ci_excludes_zero(result: dict) -> bool:
    """Whether the `paired` result's CI (ci_low, ci_high) is finite and lies entirely on one side of 0."""
    lo, hi = result["ci_low"], result["ci_high"]
    return bool(np.isfinite(lo) and np.isfinite(hi) and (lo > 0 or hi < 0))


def ci_disagrees(result: dict, kind: str) -> bool:
    """Whether the CI and the verdict `kind` (classify) point different ways: a CI that excludes 0 for a
    comparison that is not significant, or a significant one whose CI holds 0. The CI covers one comparison at
    95 % on its own; the verdict needs the Wilcoxon and the t-test p (adjusted for multiple comparisons where the
    keys are) below alpha, so the two can differ."""
    if kind == "same":
        return False
    return ci_excludes_zero(result) != (kind in ("higher", "lower"))


def ci_text(result: dict, fmt=lambda v: f"{v:+.3g}") -> str:
    """The CI of a `paired` result in words: "95 % CI [lo, hi] (method)", or why there is none (one seed)."""
    lo, hi = result["ci_low"], result["ci_high"]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return f"no CI ({result.get('ci_method', 'undefined')})"
    return f"95 % CI [{fmt(lo)}, {fmt(hi)}] ({result.get('ci_method', '')})"


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def verdict(result: dict, a: str, b: str, metric: str, alpha: float = ALPHA, p_keys=("w_p", "t_p")) -> str:
    """The conclusion of a `paired` result in words, e.g. "no significant difference in ... between a and b".

    Significant only when the Wilcoxon and the paired t-test p (result[p_keys], e.g. BH-adjusted ones) are
    both below alpha; when one is and the other is not, the result is called inconclusive; when the seed count
    cannot let the Wilcoxon test reach alpha, it says so instead of "no significant difference". The sentence
    gives the mean difference's 95 % CI with its method (or says there is none: one seed) and Cohen's d_z, so a
    "no significant difference" also says how large an effect the data rule out; where the CI and the verdict
    point different ways (ci_disagrees) the sentence says so and why.
    """
    dz = result.get("d_z", math.nan)
    ci = (f"mean {metric} difference {result['mean_diff']:+.3g}, {ci_text(result)}"
          + (f", d_z {dz:+.2f}" if np.isfinite(dz) else "") + f", n = {_seeds(result['n'])}")
    kind = classify(result, alpha, p_keys)
    if ci_disagrees(result, kind):
        adjusted = any(k.endswith("_bh") for k in p_keys)
        tests = "the Wilcoxon and t-test p" + (" after Benjamini-Hochberg adjustment" if adjusted else "")
        if kind in ("higher", "lower"):
            ci += f"; the CI holds 0 although {tests} are below {alpha}"
        else:
            ci += (f"; the CI excludes 0, but it covers this comparison alone{' (unadjusted)' if adjusted else ''} "
                   f"and the verdict needs {tests} below {alpha}")
    if kind == "same":
        return f"{a} and {b} give the same {metric} on every seed"
    if kind == "underpowered":
        m = result["n_nonzero"]
        return (f"{a} against {b} cannot be significant with {m} non-zero paired difference{'' if m == 1 else 's'} "
                f"(the smallest Wilcoxon p they allow is {result['w_p_min']:.3g} >= {alpha}; "
                f"{seeds_needed(alpha)} are needed) ({ci})")
    if kind == "untestable":
        return f"too few seeds to test {a} against {b} ({ci})"
    if kind in ("higher", "lower"):
        return f"{a} has significantly {kind} {metric} than {b} ({ci})"
    if kind == "none":
        return f"no significant difference in {metric} between {a} and {b} ({ci})"
    pw, pt = (result[k] for k in p_keys)
    return (f"inconclusive: the Wilcoxon (p = {pw:.3g}) and t-test (p = {pt:.3g}) disagree at alpha = {alpha} "
            f"for {a} against {b} ({ci})")
