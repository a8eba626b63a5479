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
markdown(results) renders them; divergence_warning(diverged) is the warning in one plain line, for the terminal.
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
    parts = "; ".join(f"{b}/{regime}/{dtype}/{_label(arm)} {len(ds)} runs "
                      f"({', '.join(sorted({x for d in ds for x in d['kinds']}))})"
                      for (b, regime, dtype, arm), ds in list(per.items())[:6])
    return (f"WARNING: {len(diverged)} runs diverged or did not learn — {parts}{'; ...' if len(per) > 6 else ''}. "
            "Their statistics use only finite values; lower --lr or check the setup.")


def _ci_sentence(fam, f, n_seeds: int) -> str:
    """How far the CIs of a family of paired rows reach, with their method; the rows without one and why; and
    the CIs that point another way than their verdict."""
    finite = [r for r in fam if np.isfinite(r["ci_low"]) and np.isfinite(r["ci_high"])]
    missing = {}
    for r in fam:
        if r not in finite:
            missing[r["ci_method"]] = missing.get(r["ci_method"], 0) + 1
    why = "; ".join(f"{k} ({c} comparison{'' if c == 1 else 's'})" for k, c in missing.items())
    if not finite:
        return f"No CI: {why}."
    methods = ", ".join(dict.fromkeys(r["ci_method"] for r in finite))
    rule = (f"fewer than {stats.BOOTSTRAP_MIN_SEEDS} seeds" if n_seeds < stats.BOOTSTRAP_MIN_SEEDS
            else f"{stats.BOOTSTRAP_MIN_SEEDS} seeds or more")
    lo, hi = min(r["ci_low"] for r in finite), max(r["ci_high"] for r in finite)
    text = f"The 95 % CIs ({methods}: {rule}) lie within [{f(lo)}, {f(hi)}]"
    if missing:
        text += f"; no CI where {why}"
    odd = [r for r in fam if stats.ci_disagrees(r, r["kind"])]
    excl = [r for r in odd if r["kind"] not in ("higher", "lower")]
    held = [r for r in odd if r["kind"] in ("higher", "lower")]
    if excl:
        text += (f". {len(excl)} of these CIs exclude{'s' if len(excl) == 1 else ''} 0 where the verdict is not a "
                 f"significant difference: a CI covers its own comparison at 95 % and is not adjusted for the "
                 f"{len(fam)} comparison(s), while the verdict needs both the Wilcoxon and the t-test p below "
                 f"{stats.ALPHA} after Benjamini–Hochberg adjustment"
                 + (f", and the Wilcoxon test cannot get there with {_seeds(n_seeds)}"
                    if any(r["kind"] == "underpowered" for r in excl) else "") + "; read them as unconfirmed")
    if held:
        text += (f". {len(held)} CI(s) hold 0 although both adjusted tests are significant (the bootstrap and the "
                 "tests disagree there)")
    return text + "."


def conclusions(cfg, summary, paired, agreement, diverged=(), pooled=()) -> list[str]:
    """Sentences the numbers support: a warning first when runs diverged, the power limit of the seed count,
    the pooled backends, per metric how the GELU-vs-ReLU comparisons came out (the CIs with their method, and
    where a CI and its verdict point different ways), and whether the float64 matched backends agree. No nan:
    a missing interval is said in words."""
    out = []
    warning = divergence_warning(diverged)
    if warning:
        head, _, rest = warning.partition(" — ")
        out.append(f"**{head}** — {rest}")
    n = len(cfg.seeds)
    limited = [r for r in paired if r["kind"] == "underpowered"]
    if limited:
        out.append(f"With {_seeds(n)} the Wilcoxon signed-rank test cannot give a p below "
                   f"{stats.wilcoxon_min_p(n):.4g} (2 / 2^{n}: every seed one way; scipy.stats.wilcoxon, exact; "
                   "higher still where seeds tie, as tied seeds are dropped), so "
                   f"{len(limited)} of {len(paired)} comparisons cannot be significant at alpha = {stats.ALPHA} "
                   f"whatever the data; at least {stats.seeds_needed(stats.ALPHA)} seeds with non-zero differences "
                   "are needed. Their intervals and effect sizes still say how large a difference the data allow.")
    for group in pooled:
        if len(group) > 1:
            row = next((r for r in agreement if r["dtype"] == cfg.dtype), None)
            gap = f"; trajectories at most {row['max_traj']:.2g} apart" if row else ""
            out.append(f"Matched regime, {cfg.dtype}: {', '.join(group)} give identical results (equal test "
                       f"accuracy on every seed, losses within {AGREEMENT_TOL:g}{gap}, see the agreement table); "
                       f"they are reported once, as “{' = '.join(group)}”, and count as one comparison, not "
                       f"{len(group)}.")
    for metric, name, f in (("test_acc", "test accuracy", lambda v: f"{100 * v:+.2f} pp"),
                            ("test_loss", "test loss", lambda v: f"{v:+.4f}")):
        fam = [r for r in paired if r["metric"] == metric]
        if not fam:
            continue
        counts = {k: sum(r["kind"] == k for r in fam) for k in _KINDS}
        parts = ", ".join(f"{c} {_KINDS[k]}" for k, c in counts.items() if c)
        diffs = [r["mean_diff"] for r in fam]
        out.append(f"{name}, activation − ReLU over {len(fam)} paired comparisons (backend × regime × form, "
                   f"{_seeds(n)}, Wilcoxon and t-test p BH-adjusted, alpha = {stats.ALPHA}): {parts}. "
                   f"Mean differences {f(min(diffs))} to {f(max(diffs))}. {_ci_sentence(fam, f, n)}")
        out += [f"{r['backend']}/{r['regime']}: {r['verdict']}." for r in fam if r["kind"] in ("higher", "lower")]
    bar = [r for r in summary if r["arm"] in HEADLINE and np.isfinite(r["test_acc"]["mean"])]
    if bar:
        worst = min(bar, key=lambda r: r["test_acc"]["mean"])
        ok = worst["test_acc"]["mean"] >= ACCURACY_BAR
        out.append(f"{'Every' if ok else 'Not every'} backend × regime reaches mean test accuracy ≥ "
                   f"{100 * ACCURACY_BAR:g} % with ReLU and exact GELU; lowest: {worst['backend']}/"
                   f"{worst['regime']}/{_label(worst['arm'])} {100 * worst['test_acc']['mean']:.2f} %.")
    for row in agreement:
        if row["dtype"] == "float64":
            verdict = "agree" if row["within_tol"] else "DO NOT agree"
            out.append(f"float64 matched, {_label(row['arm'])}: {', '.join(row['backends'])} {verdict} within "
                       f"{AGREEMENT_TOL:g} (max |difference| of the training-loss trajectory {row['max_traj']:.2g}, "
                       f"of the final training loss {row['max_final']:.2g}, {row['seeds']} seeds).")
        else:
            out.append(f"{row['dtype']} matched, {_label(row['arm'])}: the backends drift apart by at most "
                       f"{row['max_traj']:.2g} in the training-loss trajectory ({row['seeds']} seeds).")
    return out


def analyse(cfg, runs) -> dict:
    """The study's statistics from its run records (see the module docstring)."""
    pooled = pooled_backends(cfg, runs)
    view = _pool(cfg, runs, pooled)
    summary = summary_rows(cfg, view)
    paired = paired_rows(cfg, view)
    agreement = agreement_rows(cfg, runs)
    diverged = divergence(cfg, runs)
    return {"summary": summary, "paired": paired, "agreement": agreement, "defaults": defaults_rows(cfg, runs),
            "divergence": diverged, "pooled": pooled,
            "conclusions": conclusions(cfg, summary, paired, agreement, diverged, pooled)}


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
        (f"- {len(c['seeds'])} seeds ({c['seeds'][0]}..{c['seeds'][-1]}), dtype {c['dtype']}; each seed fixes "
         "the data, split, initial weights and order, the same for every arm and backend (paired comparisons)."),
        (f"- jobs (worker processes): {results.get('jobs')}; study wall time this session "
        f"{results['wall_s']:.1f} s; groups resumed from disk: {results.get('resumed_groups', 0)}."),
    ]
    if c.get("compare_dtype"):
        lines.append(f"- drift check: the first {min(c['compare_seeds'], len(c['seeds']))} seeds also trained in "
                     f"{c['compare_dtype']} (matched regime).")
    lines += [f"- {b} / {regime}: {recipe}" for (b, regime), recipe in recipes.items()]
    lines += [f"- skipped {b}: {why}" for b, why in results.get("skipped", {}).items()]
    return "\n".join(lines) + "\n"


SECTIONS = ("setup", "conclusions", "summary", "paired", "divergence", "agreement", "defaults", "timing", "plots",
            "environment")


def markdown(results: dict, sections=SECTIONS) -> str:
    """The report as Markdown; `sections` picks and orders parts of SECTIONS."""
    env = results.get("environment", {})
    parts = {
        "setup": ("Setup", lambda: _setup_md(results)),
        "conclusions": ("Conclusions", lambda: "\n".join(f"- {c}" for c in results["conclusions"]) + "\n"),
        "summary": ("Test accuracy and loss per backend × regime × arm", lambda: _summary_md(results["summary"])),
        "paired": ("Paired differences: activation − ReLU (same seeds)", lambda: _paired_md(results["paired"])),
        "divergence": ("Runs that diverged or did not learn", lambda: _divergence_md(results["divergence"])),
        "agreement": ("Cross-backend agreement (matched regime)", lambda: _agreement_md(results["agreement"])),
        "defaults": ("What the framework defaults change: native − matched",
                     lambda: _defaults_md(results["defaults"])),
        "timing": ("Time per backend", lambda: _timing_md(results)),
        "plots": ("Plots", lambda: "![loss curves](loss_curves.png)\n\n![decision boundaries]"
                  "(decision_boundaries.png)\n\n![test accuracy](test_accuracy.png)\n"),
        "environment": ("Environment", lambda: "\n".join(
            f"- {k}: {v}" for k, v in env.items() if k != "frameworks") + "\n" + "\n".join(
            f"- {b}: {', '.join(f'{k} {v}' for k, v in vs.items())}" for b, vs in env.get("frameworks", {}).items())
            + "\n"),
    }
    out = ["# gelulab moons: ReLU vs GELU on make_moons\n"]
    for name in sections:
        title, render = parts[name]
        if name in ("paired", "agreement", "defaults", "divergence") and not results.get(name):
            continue
        if name == "plots" and not results.get("runs"):
            continue
        out.append(f"## {title}\n\n{render()}")
    return "\n".join(out)
