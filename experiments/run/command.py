"""`gelulab run`, the main job: the parity summary (eager, value and first derivative, every selected backend)
and the moons experiment (ReLU vs exact GELU, a few seeds) into one results folder with one report."""
from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab run`, the main job."""
    parser.add_argument("--out", default="results/run", help="results folder (default results/run)")
    parser.add_argument("--seeds", type=int, default=5, help="moons seeds (default 5; `gelulab moons` runs 20)")
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
    moons experiment (ReLU vs exact GELU, matched regime, float64, a few seeds), into one results folder:
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
    print(f"[2/2] moons: ReLU vs exact GELU, {len(cfg.seeds)} seeds x {cfg.epochs} epochs", flush=True)
    try:
        results = moons.run_study(cfg, out / "moons", backends=trainable)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted during moons; parity is complete in {out / 'parity'}, "
                          f"{moons.stored_summary(cfg, out / 'moons', trainable)}; run the same command again to "
                          "resume") from None
    paths = moons.write_report(results, out / "moons")
    t2 = time.perf_counter()
    env = environment(backends)
    counts = parity.counts_sentence(pdata)
    reused = results.get("resumed_groups", 0) or pdata.get("groups_read", 0)
    text = (
        "# gelulab run\n\n"
        + answer(cfg, results, counts)
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
        + "\n## Versions\n\n" + "".join(f"- {k}: {v}\n" for k, v in env["frameworks"].items())
        + "".join(f"- {k} threads in effect: {v}\n" for k, v in env["threads_in_effect"].items())
        + f"- python {env['python']}, numpy {env['numpy']}, scipy {env['scipy']}, mpmath {env['mpmath']}\n"
    )
    atomic_write_text(out / "report.md", text)
    write_json(out / "results.json", {
        "environment": env,
        "parity": {k: pdata[k] for k in ("n_flagged", "n_known", "n_upstream", "n_unreported", "n_own", "n_new",
                                         "cells")},
        "moons": {k: v for k, v in results.items() if k != "boundaries"},
        "seconds": {"parity": t1 - t0, "moons": t2 - t1},
    })
    print(f"report: {out / 'report.md'} ({', '.join(p.name for p in paths.values())} in {out / 'moons'})")
    return 0


def answer(cfg, results: dict, parity_counts: str) -> str:
    """The report's first screen: the question, the setting (the article's), the answer with its numbers (the
    paired GELU - ReLU test-accuracy difference over the seeds, its 95 % CI and the verdict of
    experiments.moons: core.stats), how many seeds a difference as large as the one seen would need (80 % power,
    two-sided alpha 0.05, normal approximation on the paired differences' SD) and the command that runs them, the
    plots, and the parity counts in one line."""
    from scipy.stats import norm, t

    from gelulab.core import stats

    rows = [r for r in results.get("paired", []) if r["metric"] == "test_acc" and r.get("regime") == "matched"]
    n = len(cfg.seeds)
    seeds = f"{n} seed" + ("" if n == 1 else "s")
    lines = ["## The question\n",
             "Does exact GELU beat ReLU on make_moons, and how sure are we? The article's setting: two identical "
             f"MLPs (hidden layers {', '.join(map(str, cfg.hidden))}), make_moons with {cfg.n_samples} samples "
             f"(noise {cfg.noise}), Adam lr {cfg.lr}, {cfg.epochs} epochs, batch {cfg.batch_size}, paired over {seeds} "
             "(each seed shared by both arms), the test set used once.\n",
             "## The answer\n"]
    for r in rows:
        pp = 100 * r["mean_diff"]
        lo, hi = (100 * r["ci_low"], 100 * r["ci_high"]) if _finite(r["ci_low"], r["ci_high"]) else (None, None)
        ci = f"95 % CI [{lo:+.2f}, {hi:+.2f}] pp ({r['ci_method']})" if lo is not None else "no CI (one seed)"
        lines.append(f"- **GELU − ReLU test accuracy {pp:+.2f} pp**, {ci}, on {r['backend']}; GELU better on "
                     f"{r['wins']}, ReLU on {r['losses']}, tied on {r['ties']} of {seeds}.")
        lines.append(f"- Verdict: {r['verdict']}.")
        sd = r.get("sd_diff")
        if _finite(sd) and n > 1 and sd > 0:
            detectable = 100 * (t.ppf(0.975, n - 1) + t.ppf(0.8, n - 1)) * sd / n ** 0.5
            line = (f"- With {seeds} and the paired differences' SD ({100 * sd:.2f} pp), the smallest difference "
                    f"this study detects at 80 % power is about {detectable:.2f} pp.")
            if abs(r["mean_diff"]) > 0:
                need = max(stats.seeds_needed(), int(((norm.ppf(0.975) + norm.ppf(0.8)) * sd / abs(r["mean_diff"]))
                                                     ** 2) + 1)
                line += (f" A difference as large as the one seen would need about {need} seeds: "
                         f"`gelulab moons --backend {r['backend'].split(' ')[0]} --seeds {need}`.")
            lines.append(line)
    if not rows:
        lines.append("- No paired comparison of GELU and ReLU test accuracy was made (see Moons below).")
    lines += ["", "The plots: `moons/test_accuracy.png` (test accuracy per arm and seed), `moons/loss_curves.png` "
              "(loss per epoch, each arm over the seeds) and `moons/decision_boundaries.png`; "
              f"their reading is under Moons. Parity, in one line: {parity_counts}", ""]
    return "\n".join(lines) + "\n"


def _finite(*values) -> bool:
    import math

    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def root_note() -> str:
    """The report's sentence on how the max ULP f′ column is judged next to f′'s zero: there an element passes on
    its absolute error (core.parity.tolerances: the float64 goal's atol_root inside the catalogue entry's root
    window for order 1), so a float64 f′ max ULP above the ULP goal is no failure by itself."""
    from gelulab.core.activations import get_activation
    from gelulab.core.parity.tolerances import FORMULA_GOALS

    goal = FORMULA_GOALS[("float64", 1)]
    (lo, hi), *_ = get_activation("gelu_none").root_windows[1]
    return (f"Max ULP f′ includes the inputs next to f′'s zero (exact GELU: x ≈ −0.7518, window [{lo}, {hi}]), "
            f"which are judged absolutely, not in ULPs (float64 formula and kernel: |error| ≤ "
            f"{goal.atol_root:.2g}), so a float64 f′ max ULP above the {goal.max_ulp}-ULP goal is a failure only "
            "where the flagged column counts it.")


def _nested(markdown: str) -> str:
    """A sub-report's Markdown with every heading two levels deeper, for inclusion under a `##` section."""
    return "\n".join("##" + line if line.startswith("#") else line for line in markdown.splitlines()) + "\n"
