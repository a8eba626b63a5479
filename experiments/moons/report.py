"""The moons study's analysis and Markdown report, from the run records alone (backend-free).

analyse(cfg, runs) -> {summary, paired, agreement, defaults, divergence, pooled, conclusions}
  summary     per backend x regime x arm (study dtype): test accuracy (mean, sd, Wilson 95 % CI of the pooled
              test points, inside [0, 1]) and test loss (geometric mean and its log-scale 95 % CI, > 0), final
              train / validation loss, seeds won (the arm's test accuracy strictly above every other's), runs
              that diverged
  paired      per backend x regime x GELU form: the paired difference GELU form - ReLU of test accuracy and of
              test loss (core.stats.paired: a CI whose method holds at the seed count — Student t below
              core.stats.BOOTSTRAP_MIN_SEEDS seeds, BCa bootstrap from there, none from one seed —, Cohen's d_z,
              Hodges-Lehmann estimate, Wilcoxon with the smallest p the seeds allow, t-test, seeds won), both
              p-values adjusted (Benjamini-Hochberg) within each metric's family, and the verdict in words
  agreement   matched regime, per dtype x arm: how far the backends' training-loss trajectories and final
              losses are apart (max over backend pairs and seeds); in float64 it must be <= AGREEMENT_TOL
  pooled      matched regime, study dtype: the groups of backends whose runs are identical (equal test accuracy
              on every seed, losses within AGREEMENT_TOL); each group counts once in summary and paired, so
              three copies of the same numbers are not three comparisons
  divergence  every run that diverged or did not learn: a non-finite loss, a final training loss >= ln 2 (the
              loss of always predicting 1/2), or a test accuracy not above chance (one-sided binomial test)
  defaults    when both regimes ran: per backend x arm, native - matched test accuracy (paired by seed)
  dynamics    per backend x regime x GELU form (study dtype, pooled view): how fast each arm trains, paired over
              seeds: the epochs to reach a training loss of LOSS_THRESHOLD and the mean training loss over the
              epochs (the area under the loss curve / epochs), GELU form - ReLU with a 95 % CI (core.stats.paired)
markdown(results) renders them; divergence_warning(diverged) is the warning in one plain line, for the terminal.
counted, cannot_be and span write counts and ranges that read right for 1, 2 and many.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from gelulab.core import stats
from gelulab.core.activations import ACTIVATIONS, BASELINE, HEADLINE
from gelulab.core.plumbing.report import fmt, markdown_table
from gelulab.experiments.moons.config import split_sizes
from gelulab.experiments.moons.datasets import DATASETS

AGREEMENT_TOL = 1e-6  # float64 matched training losses of the backends agree within this
ACCURACY_BAR = 0.94  # every backend's mean test accuracy with ReLU and exact GELU (noise 0.2)
CHANCE_LOSS = math.log(2)  # BCE of always predicting 1/2: a trained network must do better on its training set
EQUIVALENCE_MARGIN_PP = 0.5  # the margin of `gelulab run`'s equivalence verdict (TOST), in pp of test accuracy
# The training-loss threshold of the "epochs to reach" measure. In the article's setting (2000 samples, Adam lr
# 1e-3, 100 epochs) exact GELU's training loss rests on a plateau near 0.28 for its first ~15 epochs while
# ReLU's falls from the first, and every run ends between 0.06 and 0.10 (30 seeds, 4400 steps): 0.15 lies below
# the plateau and above every run's end, so every seed of both arms reaches it; 0.1 is not reached by one GELU
# seed of 30 within the 100 epochs.
LOSS_THRESHOLD = 0.15


# ------------------------------------------------------------------------------------------------ wording


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """n with its noun, singular for 1: counted(1, "seed") -> "1 seed", counted(2, "seed") -> "2 seeds";
    `plural` where it is not noun + "s"."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def cannot_be(k: int, n: int, noun: str, what: str) -> str:
    """That k of n items cannot `what` (e.g. "be significant"), reading right for 1, 2 and many:
    "the comparison cannot be significant" (1 of 1), "neither comparison can be significant" (2 of 2), "none of
    the 5 comparisons can be significant" (all of 5), "1 of the 3 comparisons cannot be significant"."""
    if k == n == 1:
        return f"the {noun} cannot {what}"
    if k == n == 2:
        return f"neither {noun} can {what}"
    if k == n:
        return f"none of the {counted(n, noun)} can {what}"
    return f"{k} of the {counted(n, noun)} cannot {what}"


def listed(names) -> str:
    """Names in words: "jax", "jax and torch", "jax, torch and tensorflow"."""
    names = [str(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def span(values, f) -> str:
    """The range of `values` written with the formatter f: "f(lo) to f(hi)", or one value where both ends
    read the same (a range of one value is a value)."""
    lo, hi = f(min(values)), f(max(values))
    return lo if lo == hi else f"{lo} to {hi}"


def _label(arm: str) -> str:
    return ACTIVATIONS[arm].label


def _select(runs, **kw) -> list:
    return [r for r in runs if all(r[k] == v for k, v in kw.items())]


def _by_seed(runs, metric: str) -> dict:
    """{seed: value} of the runs whose `metric` is finite."""
    return {r["seed"]: r["metrics"][metric] for r in runs if math.isfinite(r["metrics"][metric])}


def _keys(runs, field: str) -> list:
    return list(dict.fromkeys(r[field] for r in runs))


def _n_test(cfg) -> int:
    return split_sizes(cfg.n_samples, cfg.val_fraction, cfg.test_fraction)[2]


def divergence(cfg, runs, alpha: float = stats.ALPHA) -> list[dict]:
    """The runs that diverged or did not learn, each {backend, regime, dtype, arm, seed, reasons, kinds} (kinds:
    the reasons without their numbers): "non-finite
    loss" (a loss or a loss curve holds nan/inf), "final training loss X >= ln 2" (worse than always predicting
    1/2), "test accuracy X % not above chance" (one-sided binomial test of the correct test points against 1/2,
    core.stats.above_chance, at alpha). A loss or curve a record does not hold is not checked (test_acc is
    required)."""
    n_test = _n_test(cfg)
    out = []
    for r in runs:
        m, reasons, kinds = r["metrics"], [], []
        curves = r.get("curves", {})
        losses = [m.get(k) for k in ("train_loss", "val_loss", "test_loss")]
        losses = [v for v in (*losses, *curves.get("train_loss", ()), *curves.get("val_loss", ())) if v is not None]
        if not all(math.isfinite(v) for v in losses):
            reasons.append("non-finite loss")
            kinds.append("non-finite loss")
        elif m.get("train_loss") is not None and m["train_loss"] >= CHANCE_LOSS:
            reasons.append(f"final training loss {m['train_loss']:.3g} >= ln 2")
            kinds.append("final training loss >= ln 2")
        if not math.isfinite(m["test_acc"]) or not stats.above_chance(round(m["test_acc"] * n_test), n_test,
                                                                        alpha=alpha):
            reasons.append(f"test accuracy {100 * m['test_acc']:.1f} % not above chance")
            kinds.append("test accuracy not above chance")
        if reasons:
            out.append({k: r[k] for k in ("backend", "regime", "dtype", "arm", "seed")}
                       | {"reasons": reasons, "kinds": kinds})
    return out


def _identical(cfg, a: list, b: list) -> bool:
    """Whether two backends' matched runs of the study dtype are the same numbers: the same (arm, seed) runs,
    equal test accuracy, and training-loss trajectory, final training loss and test loss within AGREEMENT_TOL."""
    ka = {(r["arm"], r["seed"]): r for r in a}
    kb = {(r["arm"], r["seed"]): r for r in b}
    if set(ka) != set(kb) or not ka:
        return False
    for k, r1 in ka.items():
        r2 = kb[k]
        m1, m2 = r1["metrics"], r2["metrics"]
        if m1["test_acc"] != m2["test_acc"]:
            return False
        d = np.abs(np.subtract(r1["curves"]["train_loss"], r2["curves"]["train_loss"]))
        gaps = [float(d.max()), abs(m1["train_loss"] - m2["train_loss"]), abs(m1["test_loss"] - m2["test_loss"])]
        if not all(math.isfinite(g) and g <= AGREEMENT_TOL for g in gaps):
            return False
    return True


def pooled_backends(cfg, runs) -> list[list[str]]:
    """Matched regime, study dtype: the backends grouped by identical results (`_identical` with the group's
    first backend), in run order; a backend that matches no other is a group of its own."""
    matched = _select(runs, regime="matched", dtype=cfg.dtype)
    groups: list[list[str]] = []
    for b in _keys(matched, "backend"):
        mine = _select(matched, backend=b)
        for g in groups:
            if _identical(cfg, _select(matched, backend=g[0]), mine):
                g.append(b)
                break
        else:
            groups.append([b])
    return groups


def _pool(cfg, runs, groups) -> list:
    """The runs with each pooled group of the matched regime (study dtype) kept once, labelled "a = b = c"."""
    label = {g[0]: " = ".join(g) for g in groups if len(g) > 1}
    dropped = {b for g in groups for b in g[1:]}
    out = []
    for r in runs:
        if r["regime"] == "matched" and r["dtype"] == cfg.dtype:
            if r["backend"] in dropped:
                continue
            if r["backend"] in label:
                r = {**r, "backend": label[r["backend"]]}
        out.append(r)
    return out


def _nan_summary() -> dict:
    return {"n": 0, "mean": math.nan, "sd": math.nan, "geo_mean": math.nan, "ci_low": math.nan,
            "ci_high": math.nan}


def summary_rows(cfg, runs) -> list[dict]:
    """Per backend x regime x arm of the study dtype (runs as given: pooled or not): the test accuracy
    (core.stats.accuracy_summary: Wilson CI of the pooled test points) and test loss (core.stats.positive_summary:
    geometric mean, log-scale CI) over the runs whose values are finite, mean final train and val loss, seeds won,
    runs that diverged (see `divergence`)."""
    rows = []
    study = _select(runs, dtype=cfg.dtype)
    n_test = _n_test(cfg)
    diverged = {(d["backend"], d["regime"], d["arm"], d["seed"]) for d in divergence(cfg, study)}
    for b in _keys(study, "backend"):
        for regime in _keys(study, "regime"):
            group = _select(study, backend=b, regime=regime)
            acc = {a: _by_seed(_select(group, arm=a), "test_acc") for a in cfg.arms}
            for arm in cfg.arms:
                rs = _select(group, arm=arm)
                if not rs:
                    continue
                won = sum(1 for s, v in acc[arm].items()
                          if all(v > acc[o].get(s, -math.inf) for o in cfg.arms if o != arm))
                accs = list(acc[arm].values())
                losses = list(_by_seed(rs, "test_loss").values())
                finite = [r for r in rs if math.isfinite(r["metrics"]["train_loss"])]
                rows.append({
                    "backend": b, "regime": regime, "arm": arm, "n": len(rs),
                    "test_acc": stats.accuracy_summary(accs, n_test) if accs else _nan_summary(),
                    "test_loss": stats.positive_summary(losses) if losses else _nan_summary(),
                    "train_loss": float(np.mean([r["metrics"]["train_loss"] for r in finite])) if finite else math.nan,
                    "val_loss": float(np.mean([r["metrics"]["val_loss"] for r in finite])) if finite else math.nan,
                    "won": won, "diverged": sum((b, regime, arm, r["seed"]) in diverged for r in rs),
                })
    return rows


def paired_rows(cfg, runs, alpha: float = stats.ALPHA) -> list[dict]:
    """GELU form - ReLU per backend x regime (study dtype; runs as given: pooled or not), for test accuracy and
    test loss, over the seeds where both values are finite. Both p-values are Benjamini-Hochberg adjusted within
    each metric's family of comparisons; the verdict uses the adjusted ones."""
    if BASELINE not in cfg.arms:
        return []
    rows = []
    study = _select(runs, dtype=cfg.dtype)
    for metric, higher in (("test_acc", True), ("test_loss", False)):
        family = []
        for b in _keys(study, "backend"):
            for regime in _keys(study, "regime"):
                base = _by_seed(_select(study, backend=b, regime=regime, arm=BASELINE), metric)
                for arm in (a for a in cfg.arms if a != BASELINE):
                    other = _by_seed(_select(study, backend=b, regime=regime, arm=arm), metric)
                    seeds = sorted(set(base) & set(other))
                    if not seeds:
                        continue
                    res = stats.paired([other[s] for s in seeds], [base[s] for s in seeds], higher_is_better=higher,
                                       bounds=(-1.0, 1.0) if metric == "test_acc" else None)
                    family.append({"backend": b, "regime": regime, "arm": arm, "metric": metric, **res})
        for key in ("w_p", "t_p"):
            for row, p in zip(family, stats.adjust_bh([r[key] for r in family])):
                row[f"{key}_bh"] = p
        for row in family:
            name = "test accuracy" if row["metric"] == "test_acc" else "test loss"
            keys = ("w_p_bh", "t_p_bh")
            row["kind"] = stats.classify(row, alpha, keys)
            row["verdict"] = stats.verdict(row, _label(row["arm"]), _label(BASELINE), name, alpha, keys)
        rows += family
    return rows


def agreement_rows(cfg, runs) -> list[dict]:
    """Matched regime, per dtype x arm: max over backend pairs and common seeds of |difference| of the
    training-loss
    trajectory (all epochs, and after epochs 1, 10 and the last), the final train loss and the test loss."""
    rows = []
    matched = _select(runs, regime="matched")
    for dtype in _keys(matched, "dtype"):
        for arm in cfg.arms:
            per_b = {b: {r["seed"]: r for r in _select(matched, dtype=dtype, arm=arm, backend=b)}
                     for b in _keys(matched, "backend")}
            per_b = {b: v for b, v in per_b.items() if v}
            if len(per_b) < 2:
                continue
            seeds = sorted(set.intersection(*(set(v) for v in per_b.values())))
            if not seeds:
                continue
            n_epochs = len(next(iter(per_b.values()))[seeds[0]]["curves"]["train_loss"])
            marks = sorted({min(1, n_epochs), min(10, n_epochs), n_epochs})
            traj, at, final, test = 0.0, {m: 0.0 for m in marks}, 0.0, 0.0
            for b1, b2 in itertools.combinations(per_b, 2):
                for s in seeds:
                    r1, r2 = per_b[b1][s], per_b[b2][s]
                    d = np.abs(np.subtract(r1["curves"]["train_loss"], r2["curves"]["train_loss"]))
                    traj = max(traj, float(d.max()))
                    for m in marks:
                        at[m] = max(at[m], float(d[m - 1]))
                    final = max(final, abs(r1["metrics"]["train_loss"] - r2["metrics"]["train_loss"]))
                    test = max(test, abs(r1["metrics"]["test_loss"] - r2["metrics"]["test_loss"]))
            rows.append({"dtype": dtype, "arm": arm, "backends": list(per_b), "seeds": len(seeds),
                         "max_traj": traj, "at_epoch": {str(m): v for m, v in at.items()}, "max_final": final,
                         "max_test_loss": test,
                         "within_tol": bool(max(traj, final) <= AGREEMENT_TOL) if dtype == "float64" else None})
    return rows


def defaults_rows(cfg, runs) -> list[dict]:
    """When both regimes ran: native - matched test accuracy per backend x arm (study dtype), paired by seed.
    """
    study = _select(runs, dtype=cfg.dtype)
    if set(_keys(study, "regime")) != {"matched", "native"}:
        return []
    rows = []
    for b in _keys(study, "backend"):
        for arm in cfg.arms:
            nat = _by_seed(_select(study, backend=b, regime="native", arm=arm), "test_acc")
            mat = _by_seed(_select(study, backend=b, regime="matched", arm=arm), "test_acc")
            seeds = sorted(set(nat) & set(mat))
            if seeds:
                res = stats.paired([nat[s] for s in seeds], [mat[s] for s in seeds], bounds=(-1.0, 1.0))
                rows.append({"backend": b, "arm": arm, **res,
                             "verdict": stats.verdict(res, "native", "matched", "test accuracy")})
    return rows


_KINDS = {"higher": "significantly higher", "lower": "significantly lower", "none": "no significant difference",
          "inconclusive": "inconclusive (Wilcoxon and t-test disagree)", "same": "identical on every seed",
          "untestable": "too few seeds to test", "underpowered": "cannot be significant with these seeds"}


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def divergence_warning(diverged) -> str | None:
    """The divergence warning in one plain line (no Markdown): how many runs diverged or did not learn and
    where (at most six backend/regime/dtype/arm groups named), or None when none did."""
    if not diverged:
        return None
    per = {}
    for d in diverged:
        per.setdefault((d["backend"], d["regime"], d["dtype"], d["arm"]), []).append(d)
    parts = "; ".join(f"{b}/{regime}/{dtype}/{_label(arm)} {counted(len(ds), 'run')} "
                      f"({', '.join(sorted({x for d in ds for x in d['kinds']}))})"
                      for (b, regime, dtype, arm), ds in list(per.items())[:6])
    return (f"WARNING: {counted(len(diverged), 'run')} diverged or did not learn — {parts}"
            f"{'; ...' if len(per) > 6 else ''}. Their statistics use only finite values; lower --lr or check the "
            "setup.")


def _ci_sentence(fam, f, n_seeds: int) -> str:
    """How far the CIs of a family of paired rows reach, with their method; the rows without one and why; and
    the CIs that point another way than their verdict. Reads right for one comparison and for many."""
    finite = [r for r in fam if np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"])]
    missing = {}
    for r in fam:
        if r not in finite:
            missing[r["ci_method"]] = missing.get(r["ci_method"], 0) + 1
    why = "; ".join(f"{k} ({counted(c, 'comparison')})" for k, c in missing.items())
    if not finite:
        return f"No CI: {why}."
    methods = ", ".join(dict.fromkeys(r["ci_method"] for r in finite))
    rule = (f"fewer than {stats.BOOTSTRAP_MIN_SEEDS} seeds" if n_seeds < stats.BOOTSTRAP_MIN_SEEDS
            else f"{stats.BOOTSTRAP_MIN_SEEDS} seeds or more")
    lo, hi = min(r["ci_low"] for r in finite), max(r["ci_high"] for r in finite)
    one = len(finite) == 1
    text = (f"The 95 % CI ({methods}: {rule}) is [{f(lo)}, {f(hi)}]" if one
            else f"The 95 % CIs ({methods}: {rule}) lie within [{f(lo)}, {f(hi)}]")
    if missing:
        text += f"; no CI where {why}"
    odd = [r for r in fam if stats.ci_disagrees(r, r["kind"])]
    excl = [r for r in odd if r["kind"] not in ("higher", "lower")]
    held = [r for r in odd if r["kind"] in ("higher", "lower")]
    tests = (f"the verdict needs both the Wilcoxon and the t-test p below {stats.ALPHA}"
             + (" after Benjamini–Hochberg adjustment" if len(fam) > 1 else ""))
    if excl:
        who = ("The CI excludes 0" if one else
               f"{len(excl)} of these CIs exclude{'s' if len(excl) == 1 else ''} 0")
        cover = ("a CI covers its own comparison at 95 %" if len(fam) == 1 else
                 f"a CI covers its own comparison at 95 % and is not adjusted for the {len(fam)} comparisons")
        text += (f". {who} where the verdict is not a significant difference: {cover}, while {tests}"
                 + (f", and the Wilcoxon test cannot get there with {_seeds(n_seeds)}"
                    if any(r["kind"] == "underpowered" for r in excl) else "")
                 + f"; read {'it' if len(excl) == 1 else 'them'} as unconfirmed")
    if held:
        who = "The CI holds" if one else f"{len(held)} of these CIs hold{'s' if len(held) == 1 else ''}"
        text += (f". {who} 0 although both {'adjusted ' if len(fam) > 1 else ''}tests are significant (the "
                 "interval and the tests disagree there)")
    return text + "."


def _metric_counts(fam) -> str:
    """How a family of paired rows came out, in words: the one row's verdict, or a count per kind."""
    if len(fam) == 1:
        return _KINDS[fam[0]["kind"]]
    kinds = {r["kind"] for r in fam}
    if len(kinds) == 1:
        return f"{_KINDS[kinds.pop()]} in {'both' if len(fam) == 2 else f'all {len(fam)}'}"
    counts = {k: sum(r["kind"] == k for r in fam) for k in _KINDS}
    return ", ".join(f"{c} {_KINDS[k]}" for k, c in counts.items() if c)


def conclusions(cfg, summary, paired, agreement, diverged=(), pooled=(), dynamics=()) -> list[str]:
    """Sentences the numbers support: a warning first when runs diverged, the power limit of the seed count,
    the pooled backends, per metric how the GELU-vs-ReLU comparisons came out (the CIs with their method, and
    where a CI and its verdict point different ways), how fast each arm trains (dynamics: dynamics_sentences),
    and whether the float64 matched backends agree. No nan: a missing interval is said in words. Counts and
    ranges read right for 1, 2 and many (counted, cannot_be, span)."""
    out = []
    warning = divergence_warning(diverged)
    if warning:
        head, _, rest = warning.partition(" — ")
        out.append(f"**{head}** — {rest}")
    n = len(cfg.seeds)
    limited = [r for r in paired if r["kind"] == "underpowered"]
    metrics = list(dict.fromkeys(r["metric"] for r in paired))
    if limited:
        names = {"test_acc": "test accuracy", "test_loss": "test loss"}
        per = [sum(r["metric"] == m for r in paired) for m in metrics]
        which = ", ".join(f"{'one' if k == 1 else k} of {names[m]}" for m, k in zip(metrics, per))
        out.append(f"With {_seeds(n)} the Wilcoxon signed-rank test cannot give a p below "
                   f"{stats.wilcoxon_min_p(n):.4g} (2 / 2^{n}: every seed one way; scipy.stats.wilcoxon, exact; "
                   "higher still where seeds tie, as tied seeds are dropped), so "
                   f"{cannot_be(len(limited), len(paired), 'comparison', 'be significant')} at alpha = "
                   f"{stats.ALPHA} whatever the data ({which}); at least {stats.seeds_needed(stats.ALPHA)} seeds "
                   "with non-zero differences are needed. The intervals and effect sizes still say how large a "
                   "difference the data allow.")
    for group in pooled:
        if len(group) > 1:
            row = next((r for r in agreement if r["dtype"] == cfg.dtype), None)
            gap = f"; trajectories at most {row['max_traj']:.2g} apart" if row else ""
            out.append(f"Matched regime, {cfg.dtype}: {listed(group)} give identical results (equal test "
                       f"accuracy on every seed, losses within {AGREEMENT_TOL:g}{gap}, see the agreement table); "
                       f"they are reported once, as “{' = '.join(group)}”, and count as one comparison, not "
                       f"{len(group)}.")
    for metric, name, f in (("test_acc", "test accuracy", lambda v: f"{100 * v:+.2f} pp"),
                            ("test_loss", "test loss", lambda v: f"{v:+.4f}")):
        fam = [r for r in paired if r["metric"] == metric]
        if not fam:
            continue
        diffs = [r["mean_diff"] for r in fam]
        mean = (f"Mean difference {f(diffs[0])}." if len(fam) == 1 else
                f"Mean differences {span(diffs, f)}" + (" in each." if f(min(diffs)) == f(max(diffs)) else "."))
        if len(fam) == 1:
            r = fam[0]
            head = (f"{name[0].upper()}{name[1:]}, {_label(r['arm'])} − {_label(BASELINE)}, one paired comparison "
                    f"({r['backend']}, {r['regime']} regime, {_seeds(n)}, Wilcoxon and t-test, alpha = "
                    f"{stats.ALPHA})")
        else:
            head = (f"{name[0].upper()}{name[1:]}, activation − ReLU, {len(fam)} paired comparisons (backend × "
                    f"regime × form, {_seeds(n)}, Wilcoxon and t-test p BH-adjusted, alpha = {stats.ALPHA})")
        out.append(f"{head}: {_metric_counts(fam)}. {mean} {_ci_sentence(fam, f, n)}")
        out += [f"{r['backend']}/{r['regime']}: {r['verdict']}." for r in fam if r["kind"] in ("higher", "lower")]
    out += [d[0].upper() + d[1:] + "." for d in dynamics_sentences(dynamics, cfg.epochs)]
    bar = [r for r in summary if r["arm"] in HEADLINE and np.isfinite(r["test_acc"]["mean"])]
    if bar:
        worst = min(bar, key=lambda r: r["test_acc"]["mean"])
        ok = worst["test_acc"]["mean"] >= ACCURACY_BAR
        cells = list(dict.fromkeys((r["backend"], r["regime"]) for r in bar))
        one = len(bar) == 1
        where = "Every backend × regime" if len(cells) > 1 else f"{cells[0][0]} ({cells[0][1]})"
        where = where if ok or len(cells) == 1 else "Not every backend × regime"
        out.append(f"{where} {'reaches' if ok or len(cells) > 1 else 'does not reach'} mean test accuracy ≥ "
                   f"{100 * ACCURACY_BAR:g} % with ReLU and exact GELU; lowest: {_label(worst['arm'])} on "
                   f"{worst['backend']} ({worst['regime']}), {100 * worst['test_acc']['mean']:.2f} %."
                   if not one else
                   f"Mean test accuracy {100 * worst['test_acc']['mean']:.2f} % ({_label(worst['arm'])} on "
                   f"{worst['backend']}, {worst['regime']}), {'at or above' if ok else 'below'} "
                   f"{100 * ACCURACY_BAR:g} %.")
    for row in agreement:
        if row["dtype"] == "float64":
            verdict = "agree" if row["within_tol"] else "DO NOT agree"
            out.append(f"float64 matched, {_label(row['arm'])}: {listed(row['backends'])} {verdict} within "
                       f"{AGREEMENT_TOL:g} (max |difference| of the training-loss trajectory {row['max_traj']:.2g}, "
                       f"of the final training loss {row['max_final']:.2g}, {_seeds(row['seeds'])}).")
        else:
            out.append(f"{row['dtype']} matched, {_label(row['arm'])}: the backends drift apart by at most "
                       f"{row['max_traj']:.2g} in the training-loss trajectory ({_seeds(row['seeds'])}).")
    return out


# ------------------------------------------------------------------------------------------ training speed


def epochs_to_loss(curve, threshold: float = LOSS_THRESHOLD) -> int | None:
    """The first epoch (1-based) whose training loss is <= threshold, or None when no epoch's is (or the curve
    holds a non-finite value before it). curve: the per-epoch training loss (running mean over each epoch's
    minibatches, BCE in nats), length = epochs."""
    for e, v in enumerate(curve, start=1):
        if not math.isfinite(v):
            return None
        if v <= threshold:
            return e
    return None


def mean_loss(curve) -> float:
    """The mean training loss over the epochs: the area under the per-epoch loss curve (each epoch one unit wide)
    divided by the number of epochs, in nats; nan when a value is not finite."""
    v = np.asarray(curve, dtype=np.float64)
    return float(v.mean()) if v.size and np.all(np.isfinite(v)) else math.nan


DYNAMICS = ("epochs_to_loss", "mean_train_loss")


def dynamics_rows(cfg, runs, threshold: float = LOSS_THRESHOLD) -> list[dict]:
    """How fast each GELU form trains against ReLU, per backend x regime (study dtype; runs as given: pooled or
    not), paired over seeds (core.stats.paired(form, ReLU, higher_is_better=False): the mean difference, its 95 %
    CI — Student t below core.stats.BOOTSTRAP_MIN_SEEDS seeds, BCa bootstrap from there —, seeds won). Two
    measures, each a row {backend, regime, arm, metric, threshold, seeds, unreached, arm_mean, base_mean,
    arm_median, base_median, **paired}:
      epochs_to_loss   epochs_to_loss(train curve, threshold), over the seeds where both arms reach it;
                       unreached: {arm: seeds that never reach it} (left out of the comparison)
      mean_train_loss  mean_loss(train curve): the area under the training-loss curve / epochs (nats), over the
                       seeds where both curves are finite."""
    if BASELINE not in cfg.arms:
        return []
    rows = []
    study = _select(runs, dtype=cfg.dtype)
    for b in _keys(study, "backend"):
        for regime in _keys(study, "regime"):
            curves = {a: {r["seed"]: r["curves"]["train_loss"] for r in _select(study, backend=b, regime=regime,
                                                                               arm=a)} for a in cfg.arms}
            base = curves[BASELINE]
            for arm in (a for a in cfg.arms if a != BASELINE):
                other = curves[arm]
                common = sorted(set(base) & set(other))
                if not common:
                    continue
                for metric in DYNAMICS:
                    if metric == "epochs_to_loss":
                        va = {s: epochs_to_loss(other[s], threshold) for s in common}
                        vb = {s: epochs_to_loss(base[s], threshold) for s in common}
                        unreached = {arm: sum(v is None for v in va.values()),
                                     BASELINE: sum(v is None for v in vb.values())}
                    else:
                        va = {s: mean_loss(other[s]) for s in common}
                        vb = {s: mean_loss(base[s]) for s in common}
                        va = {s: v if math.isfinite(v) else None for s, v in va.items()}
                        vb = {s: v if math.isfinite(v) else None for s, v in vb.items()}
                        unreached = {}
                    seeds = [s for s in common if va[s] is not None and vb[s] is not None]
                    row = {"backend": b, "regime": regime, "arm": arm, "metric": metric, "threshold": threshold,
                           "seeds": len(seeds), "pairs": len(common), "unreached": unreached}
                    if seeds:
                        a_v, b_v = [float(va[s]) for s in seeds], [float(vb[s]) for s in seeds]
                        row.update(stats.paired(a_v, b_v, higher_is_better=False),
                                   arm_mean=float(np.mean(a_v)), base_mean=float(np.mean(b_v)),
                                   arm_median=float(np.median(a_v)), base_median=float(np.median(b_v)))
                    rows.append(row)
    return rows


def _num(v, digits: int) -> str:
    """A number with `digits` decimals and its sign always."""
    return f"{v:+.{digits}f}"


def _plain(v, digits: int) -> str:
    return f"{v:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{v:.0f}"


def dynamics_sentence(row: dict, epochs: int, arm_name: str | None = None, base_name: str | None = None) -> str:
    """One dynamics row (dynamics_rows) in words, lower case and without a full stop (a clause): the paired mean
    difference form − ReLU with its 95 % CI and its method, the seeds it is over, each arm's median (epochs) or
    mean (loss), and the seeds left out where an arm never reached the threshold. No nan: a missing interval is
    said in words."""
    a = arm_name or _label(row["arm"])
    b = base_name or _label(BASELINE)
    if not row.get("seeds"):
        if row["metric"] == "epochs_to_loss":
            return (f"epochs to reach a training loss of {row['threshold']:g}: no seed where both {a} and {b} reach "
                    f"it within {epochs} epochs")
        return f"mean training loss over the {epochs} epochs: no seed where both curves are finite"
    d = row["mean_diff"]
    ci = row["ci_low"], row["ci_high"]
    has_ci = all(isinstance(v, float) and math.isfinite(v) for v in ci)
    if row["metric"] == "epochs_to_loss":
        unit, digits = "epochs", 1
        lead = (f"epochs to reach a training loss of {row['threshold']:g}, {a} − {b}: "
                f"{_num(d, digits)} {unit}")
        each = (f"median epoch {_plain(row['arm_median'], 1)} for {a}, {_plain(row['base_median'], 1)} for "
                f"{b}")
    else:
        unit, digits = "nats", 4
        lead = (f"mean training loss over the {epochs} epochs (the area under the loss curve ÷ {epochs}), "
                f"{a} − {b}: {_num(d, digits)}")
        each = f"{row['arm_mean']:.4f} for {a}, {row['base_mean']:.4f} for {b}"
    ci_text = (f"95 % CI [{_num(ci[0], digits)}, {_num(ci[1], digits)}] ({row['ci_method']})" if has_ci
               else f"no CI ({row['ci_method']})")
    text = f"{lead}, {ci_text}, paired over {_seeds(row['seeds'])} ({each}"
    left = {k: v for k, v in row.get("unreached", {}).items() if v}
    if left:
        text += ("; left out: the " + " and the ".join(
            f"{counted(v, 'seed')} where {_label(k)} never reached it" for k, v in left.items()))
    return text + ")"


def dynamics_sentences(rows, epochs: int) -> list[str]:
    """Every dynamics row in words (dynamics_sentence, clauses), prefixed with its backend/regime when there are
    several."""
    keys = {(r["backend"], r["regime"]) for r in rows}
    return [(f"on {r['backend']} ({r['regime']} regime), " if len(keys) > 1 else "") + dynamics_sentence(r, epochs)
            for r in rows]


def analyse(cfg, runs) -> dict:
    """The study's statistics from its run records (see the module docstring)."""
    pooled = pooled_backends(cfg, runs)
    view = _pool(cfg, runs, pooled)
    summary = summary_rows(cfg, view)
    paired = paired_rows(cfg, view)
    agreement = agreement_rows(cfg, runs)
    diverged = divergence(cfg, runs)
    dynamics = dynamics_rows(cfg, view)
    return {"summary": summary, "paired": paired, "agreement": agreement, "defaults": defaults_rows(cfg, runs),
            "divergence": diverged, "pooled": pooled, "dynamics": dynamics,
            "conclusions": conclusions(cfg, summary, paired, agreement, diverged, pooled, dynamics)}


# ------------------------------------------------------------------------------------------------ Markdown


def _pct(v) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{100 * v:.2f}"


def _pp(v) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{100 * v:+.2f}"


def _p(v) -> str:
    return "—" if v is None or not np.isfinite(v) else (f"{v:.3f}" if v >= 1e-3 else f"{v:.1e}")


def _ci(f, r) -> str:
    """"[lo, hi]" of a paired row in the format f, or "none" when it has no interval (its CI method says why)."""
    if not (np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"])):
        return "none"
    return f"[{f(r['ci_low'])}, {f(r['ci_high'])}]"


def _loss(v) -> str:
    return "—" if v is None or not np.isfinite(v) else f"{v:.4g}"


def _summary_md(rows) -> str:
    head = ["backend", "regime", "arm", "seeds", "diverged", "test acc % mean", "sd", "95 % CI (Wilson)",
            "test loss geo. mean", "95 % CI (log scale)", "final train loss", "final val loss", "seeds won"]
    body = [[r["backend"], r["regime"], _label(r["arm"]), r["n"], r.get("diverged", 0), _pct(r["test_acc"]["mean"]),
             _pct(r["test_acc"]["sd"]), f"[{_pct(r['test_acc']['ci_low'])}, {_pct(r['test_acc']['ci_high'])}]",
             _loss(r["test_loss"]["geo_mean"]),
             f"[{_loss(r['test_loss']['ci_low'])}, {_loss(r['test_loss']['ci_high'])}]", _loss(r["train_loss"]),
             _loss(r["val_loss"]), r["won"]] for r in rows]
    return markdown_table(head, body) + (
        "\nAccuracy CI: Wilson score interval of the correct test points pooled over seeds (test-point sampling; "
        "the seed-to-seed spread is the sd). Loss: geometric mean over seeds and the t interval of the mean log "
        "loss, exponentiated.\n")


def _paired_md(rows) -> str:
    head = ["backend", "regime", "activation − ReLU", "metric", "mean diff", "95 % CI", "CI method", "d_z",
            "Hodges–Lehmann", "Wilcoxon p (BH) [min possible]", "t-test p (BH)", "won / tied / lost", "verdict"]
    body = []
    for r in rows:
        acc = r["metric"] == "test_acc"
        f = _pp if acc else (lambda v: "—" if not np.isfinite(v) else f"{v:+.4f}")
        body.append([r["backend"], r["regime"], _label(r["arm"]), "test acc (pp)" if acc else "test loss",
                     f(r["mean_diff"]), _ci(f, r), r["ci_method"],
                     "—" if not np.isfinite(r["d_z"]) else f"{r['d_z']:+.2f}", f(r["hodges_lehmann"]),
                     f"{_p(r['w_p'])} ({_p(r['w_p_bh'])}) [{_p(r['w_p_min'])}]", f"{_p(r['t_p'])} ({_p(r['t_p_bh'])})",
                     f"{r['wins']} / {r['ties']} / {r['losses']}", _KINDS[r["kind"]]])
    return markdown_table(head, body) + (
        f"\n{stats.ci_rule()}; a verdict needs both BH-adjusted p below {stats.ALPHA}, so a CI that excludes 0 "
        "beside “no significant difference” is unconfirmed. d_z: mean / sd of the paired differences (Cohen's d for "
        "paired samples); Hodges–Lehmann: median of the Walsh averages; [min possible]: the smallest two-sided "
        "Wilcoxon p these seeds can give.\n")


def _divergence_md(rows) -> str:
    head = ["backend", "regime", "dtype", "arm", "seed", "why"]
    return markdown_table(head, [[r["backend"], r["regime"], r["dtype"], _label(r["arm"]), r["seed"],
                                  "; ".join(r["reasons"])] for r in rows])


def _agreement_md(rows) -> str:
    marks = list(rows[0]["at_epoch"]) if rows else []
    head = ["dtype", "arm", "backends", "seeds", "max Δ train-loss trajectory",
            *[f"after epoch {m}" for m in marks], "max Δ final train loss", "max Δ test loss", f"≤ {AGREEMENT_TOL:g}"]
    body = [[r["dtype"], _label(r["arm"]), ", ".join(r["backends"]), r["seeds"], f"{r['max_traj']:.2e}",
             *[f"{r['at_epoch'][m]:.2e}" for m in marks], f"{r['max_final']:.2e}", f"{r['max_test_loss']:.2e}",
             "—" if r["within_tol"] is None else ("yes" if r["within_tol"] else "**NO**")] for r in rows]
    return markdown_table(head, body)


def _defaults_md(rows) -> str:
    head = ["backend", "arm", "native − matched test acc (pp)", "95 % CI", "CI method", "Wilcoxon p", "t-test p",
            "verdict"]
    body = [[r["backend"], _label(r["arm"]), _pp(r["mean_diff"]), _ci(_pp, r), r["ci_method"],
             _p(r["w_p"]), _p(r["t_p"]), _KINDS[stats.classify(r)]] for r in rows]
    return markdown_table(head, body)


def _timing_md(results) -> str:
    head = ["backend", "groups", "train wall s", "train CPU s", "start-up s (this session)"]
    body = [[b, t["groups"], fmt(t["train_wall_s"]), fmt(t["train_cpu_s"]), fmt(t["startup_s"])]
            for b, t in results["timing"].items()]
    return markdown_table(head, body)


def _seed_list(seeds) -> str:
    """"0" for one seed, "0, 1" for two, "0..29" for more."""
    seeds = list(seeds)
    return ", ".join(map(str, seeds)) if len(seeds) <= 2 else f"{seeds[0]}..{seeds[-1]}"


def _dynamics_md(results) -> str:
    rows = results.get("dynamics", [])
    epochs = results["config"]["epochs"]
    head = ["backend", "regime", "activation − ReLU", "measure", "activation", "ReLU", "mean diff", "95 % CI",
            "CI method", "seeds", "left out"]
    body = []
    for r in rows:
        ep = r["metric"] == "epochs_to_loss"
        digits = 1 if ep else 4
        name = (f"epochs to training loss ≤ {r['threshold']:g} (median)" if ep
                else f"mean training loss over {epochs} epochs")
        has = r.get("seeds") and np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"])
        body.append([r["backend"], r["regime"], _label(r["arm"]), name,
                     "—" if not r.get("seeds") else (_plain(r["arm_median"], 1) if ep else f"{r['arm_mean']:.4f}"),
                     "—" if not r.get("seeds") else (_plain(r["base_median"], 1) if ep else f"{r['base_mean']:.4f}"),
                     "—" if not r.get("seeds") else _num(r["mean_diff"], digits),
                     f"[{_num(r['ci_low'], digits)}, {_num(r['ci_high'], digits)}]" if has else "none",
                     r.get("ci_method", "—"), r.get("seeds", 0),
                     "; ".join(f"{_label(k)} never reached it on {counted(v, 'seed')}"
                               for k, v in r.get("unreached", {}).items() if v) or "—"])
    return markdown_table(head, body) + (
        f"\nHow fast each arm trains, from the training loss per epoch, paired by seed. Epochs to reach a training "
        f"loss of {LOSS_THRESHOLD:g}: in the article's setting exact GELU rests on a plateau near 0.28 for its first "
        f"~15 epochs while ReLU's loss falls from the first, and every run ends between 0.06 and 0.10, so "
        f"{LOSS_THRESHOLD:g} (below the plateau, above every run's end) is reached there by every seed of both "
        "arms; a seed where an arm never reaches it is left out and counted. Mean training loss: the area under "
        f"the per-epoch curve divided by the epochs. {stats.ci_rule()}.\n")


def _plots_md(results) -> str:
    pooled = [g for g in results.get("pooled") or [] if len(g) > 1]
    note = "".join(f" {', '.join(g)} give the same numbers and are drawn once, as “{' = '.join(g)}”." for g in pooled)
    return (
        "Loss curves: both arms in one plot, the training loss per epoch (solid; the geometric mean over the seeds, "
        "band: the 95 % t-interval of the mean log loss) and the validation loss (dashed), with the threshold "
        f"{LOSS_THRESHOLD:g} of the epochs-to-reach measure; beside it each seed's difference in epochs to reach it "
        "(activation − ReLU) with the mean and its 95 % CI." + note + "\n\n![loss curves](loss_curves.png)\n\n"
        "Test accuracy: each seed's accuracy per arm with the mean and the 95 % t-interval of the mean over the "
        "seeds; beside it each seed's paired difference activation − ReLU with the mean, its 95 % CI (method as in "
        f"the paired table) and the equivalence margin ±{EQUIVALENCE_MARGIN_PP:g} pp of `gelulab run`'s verdict."
        "\n\n![test accuracy](test_accuracy.png)\n\n"
        "Decision boundaries of one seed, with its test points.\n\n![decision boundaries](decision_boundaries.png)\n")


def _setup_md(results) -> str:
    c = results["config"]
    n_train, n_val, n_test = split_sizes(c["n_samples"], c["val_fraction"], c["test_fraction"])
    steps = -(-n_train // c["batch_size"])
    recipes = {}
    for r in results["runs"]:
        recipes.setdefault((r["backend"], r["regime"]), r["recipe"])
    env = results.get("environment", {})
    lines = [
        (f"- command: `{env.get('command')}`; gelulab {env.get('gelulab')}, git commit "
         f"{env.get('git_commit') or 'unknown'}"),
        (f"- {DATASETS[c.get('dataset', 'moons')].description}: {c['n_samples']} samples, noise {c['noise']}, "
        "stratified split train/val/test "
        f"{n_train}/{n_val}/{n_test}"
        "; the test set is evaluated once, after the last epoch (no early stopping, no model selection)."),
        (f"- MLP 2 → {' → '.join(map(str, c['hidden']))} → 1, BCE on logits; Adam lr {c['lr']:g}, "
        f"β = ({c['beta1']}, {c['beta2']}), ε = {c['eps']:g} (matched regime); batch {c['batch_size']}, "
        f"{c['epochs']} epochs = {steps * c['epochs']} steps; activations: gelulab's `{c['impl']}` implementation."),
        (f"- {_seeds(len(c['seeds']))} ({_seed_list(c['seeds'])}), dtype {c['dtype']}; each seed fixes "
         "the data, split, initial weights and order, the same for every arm and backend (paired comparisons)."),
        (f"- jobs (worker processes): {results.get('jobs')}; study wall time this session "
        f"{results['wall_s']:.1f} s; groups resumed from disk: {results.get('resumed_groups', 0)}."),
    ]
    if c.get("compare_dtype"):
        k = min(c["compare_seeds"], len(c["seeds"]))
        lines.append(f"- drift check: the first {'seed' if k == 1 else f'{k} seeds'} also trained in "
                     f"{c['compare_dtype']} (matched regime).")
    lines += [f"- {b} / {regime}: {recipe}" for (b, regime), recipe in recipes.items()]
    lines += [f"- skipped {b}: {why}" for b, why in results.get("skipped", {}).items()]
    return "\n".join(lines) + "\n"


SECTIONS = ("setup", "conclusions", "summary", "paired", "dynamics", "divergence", "agreement", "defaults", "timing",
            "plots", "environment")


def _value_text(v) -> str:
    """An environment value in words: a dict as "key value, ...", None as "unknown"."""
    if isinstance(v, dict):
        return ", ".join(f"{k} {_value_text(x)}" for k, x in v.items() if x not in (None, "", {}))
    return "unknown" if v is None else str(v)


def threads_text(threads: dict) -> str:
    """{backend: its threads() dict} in words: "torch intra_op 1, inter_op 2; jax intra_op 1, requested 1, applied
    True" (jax's XLA_FLAGS string left out: its count is intra_op)."""
    def shown(t):
        return _value_text({k: v for k, v in t.items() if k != "xla_flags"}) if isinstance(t, dict) else t

    return "; ".join(f"{b} {shown(t)}" for b, t in threads.items())


def environment_md(env: dict) -> str:
    """The Environment block: one line per key; the frameworks one line each; the threads in effect and the CPU
    dispatch level per framework on one line each (a key that holds nothing is left out, never shown empty)."""
    lines = [f"- {k}: {v}" for k, v in env.items()
             if k not in ("frameworks", "threads_in_effect", "cpu_dispatch") and v not in ({}, "", [])]
    lines += [f"- {b}: {', '.join(f'{k} {v}' for k, v in vs.items())}" for b, vs in env.get("frameworks", {}).items()]
    if env.get("threads_in_effect"):
        lines.append(f"- threads in effect: {threads_text(env['threads_in_effect'])}")
    if env.get("cpu_dispatch"):
        lines.append("- CPU dispatch level: " + "; ".join(f"{b} {_value_text(v)}"
                                                          for b, v in env["cpu_dispatch"].items()))
    return "\n".join(lines) + "\n"


def markdown(results: dict, sections=SECTIONS) -> str:
    """The report as Markdown; `sections` picks and orders parts of SECTIONS."""
    env = results.get("environment", {})
    parts = {
        "setup": ("Setup", lambda: _setup_md(results)),
        "conclusions": ("Conclusions", lambda: "\n".join(f"- {c}" for c in results["conclusions"]) + "\n"),
        "summary": ("Test accuracy and loss per backend × regime × arm", lambda: _summary_md(results["summary"])),
        "paired": ("Paired differences: activation − ReLU (same seeds)", lambda: _paired_md(results["paired"])),
        "dynamics": ("How fast each arm trains: activation − ReLU (same seeds)", lambda: _dynamics_md(results)),
        "divergence": ("Runs that diverged or did not learn", lambda: _divergence_md(results["divergence"])),
        "agreement": ("Cross-backend agreement (matched regime)", lambda: _agreement_md(results["agreement"])),
        "defaults": ("What the framework defaults change: native − matched",
                     lambda: _defaults_md(results["defaults"])),
        "timing": ("Time per backend", lambda: _timing_md(results)),
        "plots": ("Plots", lambda: _plots_md(results)),
        "environment": ("Environment", lambda: environment_md(env)),
    }
    out = ["# gelulab moons: ReLU vs GELU on make_moons\n"]
    for name in sections:
        title, render = parts[name]
        if name in ("paired", "dynamics", "agreement", "defaults", "divergence") and not results.get(name):
            continue
        if name == "plots" and not results.get("runs"):
            continue
        out.append(f"## {title}\n\n{render()}")
    return "\n".join(out)
