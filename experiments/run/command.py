"""`gelulab run`, the main job: the parity summary (eager, value and first derivative, every selected backend)
and the moons experiment (ReLU vs exact GELU, 30 paired seeds on one backend, a verdict, and how much later GELU
reaches a training loss of 0.15) into one results folder with one report that starts with the answer."""
from __future__ import annotations

import argparse
import time

from gelulab.experiments.moons.report import EQUIVALENCE_MARGIN_PP

SEEDS = 30  # paired seeds of the main study, on one backend
CHECK_SEEDS = 2  # seeds of the cross-backend check (every trainable backend: do they give the same numbers?)
MARGIN_PP = EQUIVALENCE_MARGIN_PP  # equivalence margin of the verdict, in pp of test accuracy, stated before the run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab run`, the main job."""
    parser.add_argument("--out", default="results/run", help="results folder (default results/run)")
    parser.add_argument("--seeds", type=int, default=SEEDS,
                        help=f"paired moons seeds on the first selected backend that trains (default {SEEDS}: "
                             f"enough to tell a difference of {MARGIN_PP} pp from none)")
    parser.add_argument("--epochs", type=int, default=100, help="moons epochs (default 100, the article's)")


def run(args) -> int:
    """`gelulab run`: --out checked writable and held by this run alone (core.plumbing.lock.hold; another run into it is
    refused at once, naming it) for the whole of _run_main, which does the work (see there)."""
    from gelulab.core.plumbing.lock import hold
    from gelulab.core.plumbing.output import check_writable

    with hold(check_writable(args.out)):
        return _run_main(args)


def _run_main(args) -> int:
    """`gelulab run`: the parity summary (eager, value and first derivative, every selected backend) and the
    moons experiment (ReLU vs exact GELU, matched regime, float64, paired seeds on one backend, and a short study
    of every trainable backend that checks they agree), into one results folder:
    report.md, results.json (numbers and versions), and the PNGs of both parts. Returns 0.

    Raises ValueError before any work for bad options, an unwritable --out, or a selection without a backend
    that can train (numpy alone: the moons part needs autodiff). Both parts resume: rerunning the same command
    after an interrupt skips the parity groups and moons runs already stored in --out."""
    from gelulab.backends import get_backend, selected_backends
    from gelulab.core.activations import HEADLINE
    from gelulab.core.plumbing.output import Interrupted, check_writable
    from gelulab.core.plumbing.report import atomic_write_text, environment, write_json
    from gelulab.experiments.moons import study as moons
    from gelulab.experiments.moons.config import MoonsConfig, check_seed_count
    from gelulab.experiments.moons.report import threads_text
    from gelulab.experiments.parity import command as parity

    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: expected at least 1")
    check_seed_count("--seeds", args.seeds)  # before the list of seeds is built
    cfg = MoonsConfig(seeds=tuple(range(args.seeds)), epochs=args.epochs, arms=HEADLINE)
    out = check_writable(args.out)
    names = selected_backends()
    trainable, _ = moons.check_backends(names)
    if not trainable:
        raise ValueError(f"backends {names}: the moons part of `gelulab run` needs a backend with autodiff (jax, "
                         "torch or tensorflow; numpy has none); for the numpy parity alone run `gelulab parity "
                         "--backend numpy`")
    backends = [get_backend(n) for n in names]
    t0 = time.perf_counter()
    print(f"[1/2] parity of {', '.join(names)} against mpmath (eager; value and first derivative)", flush=True)
    try:
        pdata = parity.run_parity(backends, out / "parity", modes=("eager",), orders=(0, 1))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted during parity; {parity.stored_summary(out / 'parity')}; moons not "
                          "started; run the same command again to resume") from None
    t1 = time.perf_counter()
    # the backends give the same numbers in the matched regime (float64: within 2.2e-16), so the seeds go to one
    # backend and a short study of every trainable backend checks that they still agree
    check = MoonsConfig(seeds=tuple(range(min(CHECK_SEEDS, args.seeds))), epochs=args.epochs, arms=HEADLINE)
    print(f"[2/2] moons: ReLU vs exact GELU, {len(cfg.seeds)} paired seeds x {cfg.epochs} epochs on "
          f"{trainable[0]}; {len(check.seeds)} on {', '.join(trainable)} to check that they agree", flush=True)
    try:
        results = moons.run_study(cfg, out / "moons", backends=trainable[:1])
        agreement = moons.run_study(check, out / "moons-agreement", backends=trainable) if len(trainable) > 1 else None
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted during moons; parity is complete in {out / 'parity'}, "
                          f"{moons.stored_summary(cfg, out / 'moons', trainable[:1])}; run the same command again "
                          "to resume") from None
    paths = moons.write_report(results, out / "moons")
    if agreement is not None:
        moons.write_report(agreement, out / "moons-agreement")
    t2 = time.perf_counter()
    env = environment(backends)
    counts = parity.counts_sentence(pdata)
    reused = results.get("resumed_groups", 0) or pdata.get("groups_read", 0)
    text = (
        "# gelulab run\n\n"
        + answer(cfg, results, counts, agreement)
        + f"\nCommand: `{env['command']}`; gelulab {env['gelulab']}, git commit {env['git_commit'] or 'unknown'}.\n\n"
        f"Backends: {', '.join(names)}; GELULAB_THREADS={env['threads']} (in effect: see Versions); {env['cpu']}. "
        f"Parity {t1 - t0:.0f} s, moons {t2 - t1:.0f} s"
        + (" (stored results of an earlier run were reused)" if reused else "") + ".\n\n"
        "## Parity summary\n\n"
        f"{counts} Full report: [parity/report.md](parity/report.md).\n\n"
        + pdata["summary_md"] + "\n" + root_note() + "\n"
        + "".join(f"\n![errors](parity/{p})\n" for p in pdata.get("plots", []))
        + "\n## Moons\n\n"
        + _nested((out / "moons" / "report.md").read_text()).replace("](", "](moons/")
        + "\n## Versions\n\n" + "".join(f"- {k}: {', '.join(f'{p} {v}' for p, v in vs.items())}\n"
                                       for k, vs in env["frameworks"].items())
        + (f"- threads in effect: {threads_text(env['threads_in_effect'])}\n" if env["threads_in_effect"] else "")
        + ("- CPU dispatch level: " + "; ".join(f"{k} {v}" for k, v in env["cpu_dispatch"].items() if v) + "\n"
           if any(env["cpu_dispatch"].values()) else "")
        + f"- python {env['python']}, numpy {env['numpy']}, scipy {env['scipy']}, mpmath {env['mpmath']}\n"
    )
    atomic_write_text(out / "report.md", text)
    write_json(out / "results.json", {
        "environment": env,
        "parity": {k: pdata[k] for k in ("n_flagged", "n_known", "n_upstream", "n_unreported", "n_own", "n_new",
                                         "cells")},
        "moons": {k: v for k, v in results.items() if k != "boundaries"},
        "moons_agreement": None if agreement is None else agreement.get("agreement"),
        "verdict": verdict(results),
        "seconds": {"parity": t1 - t0, "moons": t2 - t1},
    })
    print(f"report: {out / 'report.md'} ({', '.join(p.name for p in paths.values())} in {out / 'moons'})")
    return 0


def _accuracy_row(results: dict) -> dict | None:
    """The paired GELU - ReLU test-accuracy comparison of the moons study (matched regime), or None."""
    rows = [r for r in results.get("paired", []) if r["metric"] == "test_acc" and r.get("regime") == "matched"]
    return rows[0] if rows else None


def verdict(results: dict, margin_pp: float = MARGIN_PP) -> dict:
    """The main job's verdict on test accuracy, from the paired comparison of the moons study (experiments.moons:
    Wilcoxon and t-test, core.stats): "GELU better" or "ReLU better" where that comparison is significant;
    "equivalent within ±m pp" where the two one-sided t-tests (TOST, Schuirmann 1987; margin m stated before the
    run, MARGIN_PP) both reject at 0.05, i.e. the 90 % t interval lies inside (-m, +m); else "not settled".
    Returns {"verdict", "margin_pp", "n", "mean_pp", "ci90_pp": (lo, hi), "tost_p"} (numbers None where the
    seeds give no spread)."""
    from scipy.stats import t

    row = _accuracy_row(results)
    out = {"verdict": "not settled", "margin_pp": margin_pp, "n": 0, "mean_pp": None, "ci90_pp": None,
           "tost_p": None}
    if row is None:
        return out
    n, mean, sd = row["n"], row["mean_diff"], row.get("sd_diff")
    out.update(n=n, mean_pp=100 * mean)
    if row["kind"] in ("higher", "lower"):
        out["verdict"] = "GELU better" if row["kind"] == "higher" else "ReLU better"
    if not (_finite(sd) and n > 1 and sd > 0):
        return out
    se, m = sd / n ** 0.5, margin_pp / 100
    half = t.ppf(0.95, n - 1) * se
    out["ci90_pp"] = (100 * (mean - half), 100 * (mean + half))
    out["tost_p"] = float(max(t.sf((mean + m) / se, n - 1), t.cdf((mean - m) / se, n - 1)))
    if out["verdict"] == "not settled" and out["tost_p"] < 0.05:
        out["verdict"] = f"equivalent within ±{margin_pp:g} pp"
    return out


def answer(cfg, results: dict, parity_counts: str, agreement: dict | None = None) -> str:
    """The report's first screen: the question, the setting (the article's), the verdict (verdict: GELU better,
    ReLU better, equivalent within the stated margin, or not settled) with the paired GELU - ReLU test-accuracy
    difference, its 95 % CI and the study's own test, what a study of these seeds can detect (80 % power,
    two-sided alpha 0.05) and, when not settled, the seeds a difference of the size seen would need and the command
    that runs them; how fast each arm trains, paired over the same seeds (experiments.moons.report.dynamics_rows:
    GELU − ReLU epochs to reach a training loss of LOSS_THRESHOLD and mean training loss over the epochs, each
    with its 95 % CI); then whether the backends agree (the short cross-backend study), the plots, and the parity
    counts in one line."""
    import math

    from scipy.stats import norm, t

    from gelulab.core import stats
    from gelulab.experiments.moons.report import dynamics_sentence

    row = _accuracy_row(results)
    v = verdict(results)
    n = len(cfg.seeds)
    seeds = f"{n} seed" + ("" if n == 1 else "s")
    backend = row["backend"] if row else "the selected backend"
    lines = ["## The question\n",
             ("Does exact GELU beat ReLU on make_moons, and how sure are we? The article's setting: two identical "
             f"MLPs (hidden layers {', '.join(map(str, cfg.hidden))}), make_moons with {cfg.n_samples} samples "
             f"(noise {cfg.noise}), Adam lr {cfg.lr}, {cfg.epochs} epochs, batch {cfg.batch_size}, paired over {seeds} "
             f"on {backend} (each seed shared by both arms), the test set used once. The verdict's equivalence "
             f"margin, stated before the run: ±{MARGIN_PP:g} pp of test accuracy.\n"),
             "## The answer\n"]
    if row is None:
        lines.append("- No paired comparison of GELU and ReLU test accuracy was made (see Moons below).")
    else:
        pp = 100 * row["mean_diff"]
        lo, hi = (100 * row["ci_low"], 100 * row["ci_high"]) if _finite(row["ci_low"], row["ci_high"]) else (None, None)
        ci = f"95 % CI [{lo:+.2f}, {hi:+.2f}] pp ({row['ci_method']})" if lo is not None else "no CI (one seed)"
        lines.append(f"- **Verdict: {v['verdict']}.** GELU − ReLU test accuracy {pp:+.2f} pp, {ci}; GELU better "
                     f"on {row['wins']}, ReLU on {row['losses']}, tied on {row['ties']} of {seeds}.")
        if v["tost_p"] is not None:
            c90 = v["ci90_pp"]
            lines.append(f"- Equivalence (TOST, margin ±{MARGIN_PP:g} pp): 90 % CI [{c90[0]:+.2f}, {c90[1]:+.2f}] "
                         f"pp, p = {v['tost_p']:.2g}" + (" (within the margin)." if v["tost_p"] < 0.05 else
                                                         " (not within the margin)."))
        kind = {"higher": "GELU significantly higher", "lower": "ReLU significantly higher",
                "none": "no significant difference", "same": "the same test accuracy on every seed",
                "inconclusive": "inconclusive (one test below 0.05, the other not)",
                "underpowered": f"the Wilcoxon test cannot reach p < 0.05 with {seeds}",
                "untestable": "no test possible"}.get(row.get("kind"), "no significant difference")
        tests = [f"{name} p = {row[key]:.2g}"
                 for name, key in (("Wilcoxon signed-rank", "w_p"), ("paired t-test", "t_p")) if _finite(row.get(key))]
        dz = [f"Cohen's d_z {row['d_z']:+.2f}"] if _finite(row.get("d_z")) else []
        detail = f" ({', '.join(tests + dz)})" if tests + dz else ""
        lines.append(f"- The paired tests on the same seeds: {kind}{detail}.")
        sd = row.get("sd_diff")
        if _finite(sd) and n > 1 and sd > 0:
            detectable = 100 * (t.ppf(0.975, n - 1) + t.ppf(0.8, n - 1)) * sd / n ** 0.5
            line = (f"- With {seeds} and the paired differences' SD ({100 * sd:.2f} pp), the smallest difference "
                    f"this study detects at 80 % power is about {detectable:.2f} pp.")
            if v["verdict"] == "not settled" and abs(row["mean_diff"]) > 0:
                need = max(stats.seeds_needed(), int(((norm.ppf(0.975) + norm.ppf(0.8)) * sd
                                                      / abs(row["mean_diff"])) ** 2) + 1)
                line += (f" A difference as large as the one seen would need about {need} seeds: "
                         f"`gelulab moons --backend {backend.split(' ')[0]} --seeds {need}`.")
            lines.append(line)
    dyn = [r for r in results.get("dynamics", []) if row and (r["backend"], r["regime"], r["arm"]) ==
           (row["backend"], row["regime"], row["arm"])]
    if dyn:
        first = dyn[0]
        lo, hi = first.get("ci_low", math.nan), first.get("ci_high", math.nan)
        gist = ("GELU trains more slowly at first" if _finite(lo) and lo > 0 else
                "GELU trains faster at first" if _finite(hi) and hi < 0 else
                "no difference in training speed is shown")
        lines.append(f"- How fast they train ({gist}; the training loss per epoch, paired by seed, "
                     "`moons/loss_curves.png`): " + "; ".join(
                         dynamics_sentence(r, cfg.epochs, "GELU", "ReLU") for r in dyn) + ".")
    if agreement is not None:
        rows = [r for r in agreement.get("agreement", []) if r.get("dtype") == "float64"]  # the matched regime
        worst = max((r["max_traj"] for r in rows), default=None)
        names = sorted({b for r in rows for b in r.get("backends", [])})
        if worst is not None and names:
            same = all(r.get("within_tol") for r in rows)
            k = len(agreement["config"]["seeds"])
            lines.append(f"- The backends ({', '.join(names)}, {k} seed{'' if k == 1 else 's'} each, "
                         f"float64) {'agree' if same else 'do not all agree'}: their loss trajectories differ by at "
                         f"most {worst:.2g}, so the seeds above were trained on one of them "
                         "([moons-agreement/report.md](moons-agreement/report.md)).")
    lines += ["", ("The plots: `moons/test_accuracy.png` (test accuracy per seed and arm, and the paired GELU − ReLU "
              "difference per seed with its 95 % CI and the equivalence margin), `moons/loss_curves.png` (both "
              "arms' training loss per epoch in one plot, and the paired difference in epochs to the threshold) and "
              "`moons/decision_boundaries.png`; their reading is under Moons. Parity, in one line: "
              f"{parity_counts}"), ""]
    return "\n".join(lines) + "\n"


def _finite(*values) -> bool:
    import math

    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def root_note() -> str:
    """The report's sentence on how the max ULP f′ column is judged next to f′'s zero: there an element passes on
    its absolute error (core.parity.tolerances: the float64 goal's atol_root inside the catalogue entry's root
    window for order 1), so a float64 f′ max ULP above the ULP goal is no failure by itself."""
    from gelulab.backends import REGISTRY
    from gelulab.core.activations import get_activation
    from gelulab.core.parity.tolerances import FORMULA_GOALS
    from gelulab.experiments.moons.report import listed

    goal = FORMULA_GOALS[("float64", 1)]
    (lo, hi), *_ = get_activation("gelu_none").root_windows[1]
    flushing = listed([c.name for c in REGISTRY.values() if c.flushes_subnormals]) or "a backend"
    return (f"Max ULP f′ includes the inputs next to f′'s zero (exact GELU: x ≈ −0.7518, window [{lo}, {hi}]), "
            f"which are judged absolutely, not in ULPs (float64 formula and kernel: |error| ≤ "
            f"{goal.atol_root:.2g}), so a float64 f′ max ULP above the {goal.max_ulp}-ULP goal is a failure only "
            "where the flagged column counts it. Likewise max ULP f and max rel f include results below the "
            f"smallest normal, judged absolutely: on {flushing}, whose CPU runtime flushes subnormals to "
            "zero (parity/report.md, platform overrides), a max rel f of 1 is such a result flushed to 0, not a "
            "failure.")


def _nested(markdown: str) -> str:
    """A sub-report's Markdown with every heading two levels deeper, for inclusion under a `##` section."""
    return "\n".join("##" + line if line.startswith("#") else line for line in markdown.splitlines()) + "\n"
