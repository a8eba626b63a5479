"""Statistics over seeds, all from scipy.stats: summaries with t intervals, paired comparisons, verdicts.

describe(values)      mean, sample standard deviation, 95 % CI of the mean (Student t, n - 1 degrees of
                      freedom)
paired(a, b)          the paired difference a - b: mean, sd, 95 % CI (scipy's ttest_rel interval), the paired
                      t-test, the Wilcoxon signed-rank test, and seeds won / tied / lost
adjust_bh(p)          Benjamini-Hochberg adjusted p-values (scipy.stats.false_discovery_control)
classify, verdict     the conclusion in words the numbers support, "no significant difference" included
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

ALPHA = 0.05
CONFIDENCE = 0.95


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
    lo, hi = stats.t.interval(confidence, df=n - 1, loc=mean, scale=stats.sem(v))
    return {"n": n, "mean": mean, "sd": sd, "ci_low": float(lo), "ci_high": float(hi)}


def paired(a, b, higher_is_better: bool = True, confidence: float = CONFIDENCE) -> dict:
    """Paired comparison of a and b over the same seeds (a[i] and b[i] share seed i): d = a - b.

    Returns {n, mean_diff, sd_diff, ci_low, ci_high, t_stat, t_p, w_stat, w_p, wins, ties, losses}: the CI is
    scipy.stats.ttest_rel(a, b).confidence_interval(confidence); t_p from the paired t-test; w_p from
    scipy.stats.wilcoxon(a, b) (two-sided, zero differences dropped, the exact distribution when n <= 50 and
    there are no ties, else the normal approximation); wins/ties/losses count seeds where a is better / equal
    / worse (better = higher when higher_is_better, else lower). Tests that are undefined (n < 2, all d equal)
    give nan, except that all-zero differences give p = 1 (nothing to detect). Raises ValueError when a and b
    differ in length or hold no or non-finite values.
    """
    a, b = _values(a, "a"), _values(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"paired: a has {a.size} values and b has {b.size}; expected one pair per seed")
    d = a - b
    better = d if higher_is_better else -d
    out = {"n": int(d.size), "mean_diff": float(np.mean(d)),
           "sd_diff": float(np.std(d, ddof=1)) if d.size > 1 else math.nan,
           "wins": int(np.sum(better > 0)), "ties": int(np.sum(d == 0)), "losses": int(np.sum(better < 0)),
           "ci_low": math.nan, "ci_high": math.nan, "t_stat": math.nan, "t_p": math.nan,
           "w_stat": math.nan, "w_p": math.nan}
    if np.all(d == 0):
        out.update(ci_low=0.0, ci_high=0.0, t_p=1.0, w_p=1.0)
        return out
    if d.size < 2:
        return out
    if np.all(d == d[0]):  # constant non-zero difference: sd = 0, the t statistic is infinite
        out.update(ci_low=float(d[0]), ci_high=float(d[0]))
    else:
        t = stats.ttest_rel(a, b)
        ci = t.confidence_interval(confidence)
        out.update(t_stat=float(t.statistic), t_p=float(t.pvalue), ci_low=float(ci.low), ci_high=float(ci.high))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scipy warns when zeros/ties force the normal approximation
        w = stats.wilcoxon(a, b)
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
        out[ok] = stats.false_discovery_control(p[ok], method="bh")
    return out.tolist()


def classify(result: dict, alpha: float = ALPHA, p_keys=("w_p", "t_p")) -> str:
    """The category of a `paired` result: "same" (every difference 0), "untestable" (a p is nan), "higher" or
    "lower" (a significantly above / below b: every p in p_keys below alpha), "none" (no p below alpha: no
    significant difference) or "inconclusive" (the tests disagree)."""
    if result["ties"] == result["n"]:
        return "same"
    ps = [result[k] for k in p_keys]
    if not all(np.isfinite(p) for p in ps):
        return "untestable"
    if all(p < alpha for p in ps):
        return "higher" if result["mean_diff"] > 0 else "lower"
    return "none" if all(p >= alpha for p in ps) else "inconclusive"


def verdict(result: dict, a: str, b: str, metric: str, alpha: float = ALPHA, p_keys=("w_p", "t_p")) -> str:
    """The conclusion of a `paired` result in words, e.g. "no significant difference in ... between a and b".

    Significant only when the Wilcoxon and the paired t-test p (result[p_keys], e.g. BH-adjusted ones) are
    both below alpha; when one is and the other is not, the result is called inconclusive. The sentence gives
    the mean difference's 95 % CI, so a "no significant difference" also says how large an effect the data
    rule out.
    """
    lo, hi = result["ci_low"], result["ci_high"]
    ci = (f"mean {metric} difference {result['mean_diff']:+.3g}, 95 % CI [{lo:+.3g}, {hi:+.3g}], "
          f"n = {result['n']} seeds")
    kind = classify(result, alpha, p_keys)
    if kind == "same":
        return f"{a} and {b} give the same {metric} on every seed"
    if kind == "untestable":
        return f"too few seeds to test {a} against {b} ({ci})"
    if kind in ("higher", "lower"):
        return f"{a} has significantly {kind} {metric} than {b} ({ci})"
    if kind == "none":
        return f"no significant difference in {metric} between {a} and {b} ({ci})"
    pw, pt = (result[k] for k in p_keys)
    return (f"inconclusive: the Wilcoxon (p = {pw:.3g}) and t-test (p = {pt:.3g}) disagree at alpha = {alpha} "
            f"for {a} against {b} ({ci})")
