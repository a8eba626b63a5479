"""`gelulab swap`: replace the exact GELU of a pretrained BERT (all-MiniLM-L6-v2) and measure the damage.

For each backend and each replacement activation (default: every other catalogue entry) every FFN activation of
the 6 layers is swapped; against the original model (exact GELU) gelulab reports the cosine between sentence
embeddings (mean, worst), the per-layer drift of the hidden states (mean token cosine, relative L2), and how well
cosine similarity still separates paraphrases from other pairs (ROC-AUC, sklearn) on the labelled pairs of
experiments/swap/data/sentence_pairs.tsv, plus the mean similarity of unrelated pairs. With --finetune, the swapped
model (default: ReLU) is distilled toward the original embeddings on sentences gelulab generates from templates,
and measured again. The transformers BertModel loaded from the same weights runs beside gelulab's encoders, its
activations replaced by gelulab.swap (experiments/swap/hf.py; --no-transformers skips it).

Writes swap.md, swap.json (with core.plumbing.report.environment) and swap_layers.png into --out (default results/swap),
checked before any model work, after the options (each bounded: sizes, steps and seed within their ranges, a
finite positive --lr). Every file of the model is verified against a sha256 manifest first
(experiments.swap.model); --model DIR runs another BERT folder (verified against its own `sha256sums`, or marked
UNVERIFIED in the report), whose files must all lie inside it (symbolic links resolved) and whose config.json
must describe a possible BERT (positive sizes, hidden size divisible by the heads, the layers the weights hold).
A fine-tune whose loss is not finite stops with one line naming the step. Each (backend, activation, stage) result is
stored as it finishes (experiments.swap.store): Ctrl-C keeps them, and the same command resumes.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from gelulab.backends import (
    BACKEND_NAMES,
    BackendUnavailable,
    capabilities,
    get_backend,
    parse_backend_list,
    reproducible,
    selected_backends,
)
from gelulab.core.activations import ACTIVATIONS, BASELINE, IMPLS, get_activation
from gelulab.core.plumbing import config
from gelulab.core.plumbing.lock import hold
from gelulab.core.plumbing.output import Interrupted, check_writable
from gelulab.core.plumbing.report import atomic_write_text, environment, markdown_table, write_json
from gelulab.experiments.swap import hf, store
from gelulab.experiments.swap import model as bert

DATA = Path(__file__).resolve().parent / "data" / "sentence_pairs.tsv"
DEFAULT_SWAPS = tuple(ACTIVATIONS)  # every catalogue entry; the model's own activation is its "original" row

# Word lists for the fine-tune sentences (written for gelulab; combined by templates, no copied corpus).
_PEOPLE = ("the teacher", "my sister", "a young farmer", "the pilot", "our neighbour", "the old fisherman",
           "a student", "the mayor", "the nurse", "two engineers", "the chef", "a tourist")
_VERBS = (("painted", "paint"), ("carried", "carry"), ("sold", "sell"), ("repaired", "repair"), ("found", "find"),
          ("cooked", "cook"), ("described", "describe"), ("photographed", "photograph"), ("ordered", "order"),
          ("cleaned", "clean"), ("borrowed", "borrow"), ("forgot", "forget"))
_OBJECTS = ("a wooden table", "the red bicycle", "fresh bread", "an old map", "the broken radio", "three letters",
            "a small boat", "the garden fence", "a bowl of soup", "the new laptop", "a pair of boots", "the tickets")
_PLACES = ("near the station", "in the village", "at the market", "behind the school", "by the river",
           "in the city centre", "at the harbour", "on the mountain", "in the kitchen", "at the airport")
_TIMES = ("yesterday", "last summer", "on Sunday", "early this morning", "after the storm", "every evening",
          "next week", "before the holidays")
_ADJECTIVES = ("expensive", "quiet", "crowded", "broken", "beautiful", "late", "cold", "noisy", "empty", "new")
_TEMPLATES = (
    lambda r: f"{_pick(r, _PEOPLE).capitalize()} {_pick(r, _VERBS)[0]} {_pick(r, _OBJECTS)} {_pick(r, _PLACES)}.",
    lambda r: f"{_pick(r, _TIMES).capitalize()}, {_pick(r, _PEOPLE)} will {_pick(r, _VERBS)[1]} "
              f"{_pick(r, _OBJECTS)}.",
    lambda r: f"Why did {_pick(r, _PEOPLE)} {_pick(r, _VERBS)[1]} {_pick(r, _OBJECTS)} {_pick(r, _TIMES)}?",
    lambda r: f"The market {_pick(r, _PLACES).split(' ', 1)[1]} was {_pick(r, _ADJECTIVES)} {_pick(r, _TIMES)}.",
    lambda r: f"{_pick(r, _OBJECTS).capitalize()} {_pick(r, _PLACES)} looked {_pick(r, _ADJECTIVES)} "
              f"to {_pick(r, _PEOPLE)}.",
    lambda r: f"If it is {_pick(r, _ADJECTIVES)} {_pick(r, _PLACES)}, {_pick(r, _PEOPLE)} will "
              f"{_pick(r, _VERBS)[1]} {_pick(r, _OBJECTS)} instead.",
)


def _pick(rng, options):
    return options[rng.integers(len(options))]


def generate_sentences(n: int, seed: int, vocabulary: Sequence[str] = ()) -> list[str]:
    """n distinct English sentences for the fine-tune, chosen with numpy's seeded RNG: from gelulab's templates and
    word lists, or, when `vocabulary` is given, half of them random sequences of 5 to 14 words drawn from it
    (they reach words the templates never use; `gelulab swap --finetune`, torch, 100 steps: held-out cosine
    0.965 with the mix vs 0.953 with templates alone). Raises ValueError for n < 1 or when 100 draws per sentence
    find fewer than n."""
    if n < 1:
        raise ValueError(f"n={n}; expected a positive number of sentences")
    rng = np.random.default_rng(seed)
    words = list(vocabulary)
    n_words = n // 2 if words else 0
    out: dict[str, None] = {}
    for _ in range(100 * n):
        if len(out) < n_words:
            out[" ".join(rng.choice(words, rng.integers(5, 15))).capitalize() + "."] = None
        else:
            out[_TEMPLATES[rng.integers(len(_TEMPLATES))](rng)] = None
        if len(out) == n:
            return list(out)
    raise ValueError(f"could not generate {n} distinct sentences (found {len(out)})")


def load_pairs(path: str | Path = DATA) -> list[tuple[str, str, str]]:
    """Sentence pairs from a TSV with header `label<TAB>sentence_a<TAB>sentence_b`; label in
    experiments.swap.model.PAIR_LABELS. Returns [(label, a, b)]. Raises ValueError naming the file and line of a
    malformed row or unknown label, or naming the file when there is no pair of some label, or it does not exist, is not
    a regular file (/dev/null, a folder) or is not UTF-8 text."""
    if not Path(path).exists():
        raise ValueError(f"--pairs {path}: no such file; expected a TSV of labelled sentence pairs")
    if not Path(path).is_file():
        raise ValueError(f"--pairs {path}: not a regular file; expected a TSV of labelled sentence pairs")
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"--pairs {path}: not UTF-8 text ({e.reason} at byte {e.start}); expected a UTF-8 TSV of "
                         "labelled sentence pairs") from None
    except OSError as e:
        raise ValueError(f"--pairs {path}: cannot read it ({e.strerror or e}); expected a TSV of labelled sentence "
                         "pairs") from None
    if not lines or lines[0].split("\t") != ["label", "sentence_a", "sentence_b"]:
        raise ValueError(f"{path}: the first line must be the header 'label<TAB>sentence_a<TAB>sentence_b'")
    pairs = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 3 or not all(c.strip() for c in cells):
            raise ValueError(f"{path}:{number}: expected 3 non-empty tab-separated cells, got {cells!r}")
        if cells[0] not in bert.PAIR_LABELS:
            raise ValueError(f"{path}:{number}: label {cells[0]!r}; expected one of {list(bert.PAIR_LABELS)}")
        pairs.append((cells[0], cells[1].strip(), cells[2].strip()))
    missing = [lab for lab in bert.PAIR_LABELS if lab not in {p[0] for p in pairs}]
    if missing:
        raise ValueError(f"{path}: no pair labelled {missing}")
    return pairs


def encoder_module(name: str):
    """The backend's `bert` module (backends/<name>/bert.py), after the backend's setup (device)."""
    get_backend(name)
    return importlib.import_module(f"gelulab.backends.{name}.bert")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `gelulab swap`."""
    parser.add_argument("--out", default="results/swap",
                        help="results folder (default results/swap); rerunning with the same folder resumes")
    parser.add_argument("--model", default=None, metavar="DIR",
                        help="another BERT folder (config.json, model.safetensors, tokenizer.json), verified "
                             "against its own sha256sums if present, else reported UNVERIFIED (default: the "
                             f"installed {bert.PACKAGE} package, verified against gelulab's manifest)")
    parser.add_argument("--backend", dest="backends", default=None,
                        help="comma-separated backends (default: GELULAB_BACKEND, else every installed one)")
    parser.add_argument("--backends", dest="backends", help=argparse.SUPPRESS)  # earlier name
    parser.add_argument("--activation", dest="activations", default=",".join(DEFAULT_SWAPS),
                        help="comma-separated catalogue keys replacing the FFN's exact GELU (default: every "
                             "catalogue entry)")
    parser.add_argument("--activations", dest="activations", help=argparse.SUPPRESS)  # earlier name
    parser.add_argument("--impl", default="formula", choices=IMPLS,
                        help="activation implementation: gelulab's formula (default), its float32 kernel or the "
                             "framework's builtin")
    parser.add_argument("--pairs", default=str(DATA), help="TSV of labelled sentence pairs")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per forward pass")
    parser.add_argument("--finetune", action="store_true", help="also run the distillation fine-tune")
    parser.add_argument("--finetune-activations", default=BASELINE,
                        help=f"swapped models to fine-tune (default {BASELINE})")
    parser.add_argument("--steps", type=int, default=100, help="fine-tune steps (default 100)")
    parser.add_argument("--lr", type=float, default=1e-4, help="Adam learning rate (default 1e-4)")
    parser.add_argument("--finetune-batch", type=int, default=16, help="sentences per fine-tune step")
    parser.add_argument("--train-sentences", type=int, default=1024, help="generated sentences to fine-tune on")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated sentences and batch order")
    parser.add_argument("--transformers", action=argparse.BooleanOptionalAction, default=True,
                        help="also swap the activations of the transformers BertModel loaded from the same weights "
                             "(gelulab.swap), beside gelulab's encoders (default on; skipped when not installed)")


def _keys(text: str, what: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise ValueError(f"{what}={text!r}; expected a comma-separated list of catalogue keys")
    keys = [get_activation(k).key for k in keys]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"{what}={text!r}: {', '.join(twice)} appears twice; expected each activation once")
    return keys


# Upper bounds of the size options: far above what the study needs (the defaults: 32, 100 steps, 16, 1024
# sentences), low enough that the arrays they size (the batch order: steps x batch int64; the tokenized training
# sentences: sentences x 256 int32, twice) stay below a few hundred MB before any model memory.
MAX_BATCH = 1024
MAX_STEPS = 100_000
MAX_TRAIN_SENTENCES = 100_000
MAX_SEED = 2**32 - 1


def _check(args) -> tuple[list[str], list[str], list[str]]:
    """Validate the options before any model work (with or without --finetune); returns (backends, swaps,
    finetune activations). Raises ValueError naming the option: integers within their bounds (--batch-size and
    --finetune-batch 1..MAX_BATCH, --finetune-batch at most --train-sentences, --steps 1..MAX_STEPS,
    --train-sentences 1..MAX_TRAIN_SENTENCES, --seed 0..MAX_SEED), --lr a finite number > 0 (as moons')."""
    names = parse_backend_list(args.backends) if args.backends else None
    without = [n for n in names or () if "bert" not in capabilities(n).modules]
    if without:
        raise ValueError(f"--backend {args.backends!r}: {without} have no BERT encoder (a bert module); expected "
                         f"some of {[n for n in BACKEND_NAMES if 'bert' in capabilities(n).modules]}")
    names = names or [n for n in selected_backends() if "bert" in capabilities(n).modules]
    swaps = _keys(args.activations, "--activation")
    tuned = _keys(args.finetune_activations, "--finetune-activations") if args.finetune else []
    _bounded("--batch-size", args.batch_size, 1, MAX_BATCH)
    _bounded("--steps", args.steps, 1, MAX_STEPS)
    _bounded("--train-sentences", args.train_sentences, 1, MAX_TRAIN_SENTENCES)
    _bounded("--finetune-batch", args.finetune_batch, 1, min(MAX_BATCH, args.train_sentences),
             f" (and at most --train-sentences={args.train_sentences})")
    _bounded("--seed", args.seed, 0, MAX_SEED)
    if not (isinstance(args.lr, (int, float)) and math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr {args.lr}: expected a finite number > 0 (Adam's learning rate, default 1e-4)")
    return names, swaps, tuned


def _bounded(option: str, value, least: int, most: int, note: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise ValueError(f"{option} {value}: expected an integer from {least} to {most}{note}")


def _measure(original: bert.Encoded, encoded: bert.Encoded, index, pairs) -> dict:
    """All metrics of one model against the original, on the evaluation sentences. Raises ValueError when an
    embedding is not finite (a model whose weights diverged) or when every embedding is the same vector (an encoder
    that collapses its input: no measurement)."""
    if not np.isfinite(encoded.embeddings).all():
        raise ValueError(f"{int((~np.isfinite(encoded.embeddings)).any(axis=1).sum())} of "
                         f"{len(encoded.embeddings)} sentence embeddings are not finite (NaN or inf); the model's "
                         "weights diverged (a fine-tune with too large an --lr?); the results stored before are kept")
    e = np.asarray(encoded.embeddings)
    if len(e) > 1 and not np.ptp(e, axis=0).any():
        raise ValueError(f"all {len(e)} sentence embeddings are identical (cosine exactly 1 for every pair, zero "
                         "spread): the encoder maps every sentence alike, a failed measurement; expected distinct "
                         "embeddings (check config.json and the weights); the results stored before are kept")
    scores = bert.pair_scores(encoded.embeddings, index, pairs)
    cos = bert.embedding_cosine(original.embeddings, encoded.embeddings)
    return {"cos_mean": cos["mean"], "cos_worst": cos["worst"], "drift": bert.layer_drift(original, encoded),
            **bert.separation(scores, [p[0] for p in pairs])}


def _finetune(mod, backend, pre, key, args, train, original_fw) -> dict:
    """Distil the model with `key` toward the original embeddings (the model's own activation, pre.config.activation)
    of the generated sentences; returns {"params": fine-tuned framework params, "losses", "seconds",
    "train_cos_before"}."""
    ids, mask = train
    orig = backend.function(pre.config.activation, args.impl)
    targets = bert.mean_pool(mod.encode(original_fw, ids, mask, pre.config, orig)[-1], mask)
    act = backend.function(key, args.impl)
    before = bert.mean_pool(mod.encode(original_fw, ids, mask, pre.config, act)[-1], mask)
    batches = bert.batch_indices(len(ids), args.finetune_batch, args.steps, args.seed)
    start = time.perf_counter()
    with tqdm(total=args.steps, desc=f"fine-tune {backend.name} {key}", leave=False) as bar:
        params, losses = mod.finetune(mod.to_framework(pre.params), ids, mask, targets, batches, pre.config, act,
                                      args.lr, progress=bar.update)
    bert.check_losses(losses, f"{backend.name} {key}", args.lr)
    return {"params": params, "losses": losses, "seconds": time.perf_counter() - start,
            "train_cos_before": float(bert.cosine_rows(targets, before).mean())}


def _encode(mod, params, pre, activation, sentences, batch_size) -> bert.Encoded:
    """The evaluation sentences through one backend's encoder with `activation` in every FFN."""
    return bert.encode_sentences(lambda i, m: mod.encode(params, i, m, pre.config, activation), pre.tokenizer,
                                 sentences, batch_size)


def _row(name, key, stage, steps, seconds, metrics) -> dict:
    return {"backend": name, "activation": key, "stage": stage, "steps": steps, "seconds": seconds, **metrics}


def _plan(names, swaps, tuned, original: str) -> list[tuple[str, str, str]]:
    """Every result of the run, in report order: (backend, activation, stage)."""
    keys = [original, *(k for k in swaps if k != original)]
    return [(n, k, "original" if k == original else "swapped") for n in names for k in keys] + \
        [(n, k, "fine-tuned") for n in names for k in tuned]


def _keys_of(args, pre, pairs_digest) -> tuple[dict, dict]:
    """The settings keys of a result: (encode, fine-tune) (see experiments.swap.store)."""
    encode = {"model": pre.digests, "verified": pre.verified, "pairs_sha256": pairs_digest, "impl": args.impl,
              "batch_size": args.batch_size}
    tune = {**encode, "steps": args.steps, "lr": args.lr, "finetune_batch": args.finetune_batch,
            "train_sentences": args.train_sentences, "seed": args.seed}
    return encode, tune


def run(args) -> int:
    """Run the swap (and the fine-tune with --finetune) and write the report; returns 0, or 2 when the model
    package is missing. The options and the pairs file are checked first, then --out is checked writable and
    held by this run alone (core.plumbing.lock.hold; another run into it is refused at once, naming it) for the rest.
    Raises ValueError for bad options, an unwritable --out, a model folder or file that fails its checks
    (experiments.swap.model.load_pretrained: a link out of the folder, a manifest mismatch, an impossible
    config.json), all before any model work, for stored results of other settings in --out, and for a fine-tune
    that diverges; core.plumbing.output.Interrupted on Ctrl-C, with the finished results stored. Runs under
    gelulab.reproducible(threads=GELULAB_THREADS, default 1)."""
    names, swaps, tuned = _check(args)
    pairs = load_pairs(args.pairs)
    with hold(check_writable(args.out)):
        return _swap(args, names, swaps, tuned, pairs)


def _swap(args, names, swaps, tuned, pairs) -> int:
    """run() once the options are checked and --out is held."""
    reproducible(threads=config.threads())
    out = Path(args.out)
    try:
        pre = bert.load_pretrained(args.model)
    except bert.ModelUnavailable as e:
        print(f"gelulab swap: {e}", file=sys.stderr)
        return 2
    if not pre.verified:
        print(f"gelulab swap: UNVERIFIED model: {pre.directory} has no sha256sums manifest; its files are used "
              "unchecked", file=sys.stderr)
    encode_key, tune_key = _keys_of(args, pre, hashlib.sha256(Path(args.pairs).read_bytes()).hexdigest())
    plan = _plan(names, swaps, tuned, pre.config.activation)  # the model's own activation is the original
    stored = {}
    for name, key, stage in plan:  # before any model work: results of other settings are refused
        status, rec, detail = store.load(out, name, key, stage, tune_key if stage == "fine-tuned" else encode_key)
        if status == "settings":
            raise ValueError(f"results folder {out} holds swap results made with other settings ({detail}); use "
                             "another --out or delete the folder")
        if status in ("damaged", "stale"):
            what = f"damaged result {detail}" if status == "damaged" else f"result of other versions ({detail})"
            print(f"gelulab swap: {what}; computing it again", file=sys.stderr)
        if status == "ok":
            stored[(name, key, stage)] = rec
    try:
        report = _run(args, names, swaps, tuned, pairs, pre, out, plan, stored, encode_key, tune_key)
    except KeyboardInterrupt:
        done = sum(store.part_path(out, *p).exists() for p in plan)
        raise Interrupted(f"interrupted; {done} of {len(plan)} swap results are stored in {out / store.FOLDER}; "
                          "run the same command again to resume") from None
    print(_markdown(report))
    print(f"wrote {out}/swap.md, swap.json, swap_layers.png")
    return 0


def _run(args, names, swaps, tuned, pairs, pre, out, plan, stored, encode_key, tune_key) -> dict:
    sentences = list(dict.fromkeys(s for p in pairs for s in p[1:]))
    index = {s: i for i, s in enumerate(sentences)}
    train, overlap = None, 0
    if tuned:
        generated = generate_sentences(args.train_sentences, args.seed, bert.vocabulary_words(pre.tokenizer))
        train = bert.tokenize(pre.tokenizer, generated)
        overlap = len(set(generated) & set(sentences))
    report = {"model": {"package": bert.PACKAGE if args.model is None else None, "directory": str(pre.directory),
                        "verified": pre.verified, "manifest": str(pre.manifest) if pre.manifest else None,
                        "sha256": pre.sha256, "files": pre.digests, "config": vars(pre.config)},
              "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
              "pairs": {lab: sum(p[0] == lab for p in pairs) for lab in bert.PAIR_LABELS},
              "sentences": len(sentences), "rows": [], "finetune": {}, "skipped": {}, "resumed": len(stored)}
    if tuned:
        report["train_eval_overlap"] = overlap  # generated sentences that are also evaluation sentences
    used, stored_versions = [], {}
    with tqdm(total=len(plan), desc="swap", unit="model") as bar:  # closed (a newline) on Ctrl-C too
        _run_backends(args, names, pairs, pre, out, plan, stored, encode_key, tune_key, sentences, index, train,
                      report, used, stored_versions, bar)
    report.setdefault("environment", environment(used))
    if args.transformers:
        hf.run(report, args, pre, sentences, index, pairs, swaps, tuned, train, _measure, lambda: _write(out, report))
    _write(out, report)
    return report


def _run_backends(args, names, pairs, pre, out, plan, stored, encode_key, tune_key, sentences, index, train,
                  report, used, stored_versions, bar) -> None:
    """Each backend's results: the stored ones read, the missing ones computed and stored as they finish."""
    for name in names:
        mine = [p for p in plan if p[0] == name]
        rows = {}
        for p in mine:
            if p in stored:
                rows[p] = stored[p]["row"]
                stored_versions[name] = stored[p]["versions"]
                if p[2] == "fine-tuned":
                    report["finetune"].setdefault(name, {})[p[1]] = stored[p]["finetune"]
                bar.update(1)
        todo = [p for p in mine if p not in stored]
        if todo:
            try:
                mod, backend = encoder_module(name), get_backend(name)
            except BackendUnavailable as e:
                report["skipped"][name] = str(e)
                continue
            used.append(backend)
            versions_key = store.versions(backend.versions())
            params = mod.to_framework(pre.params)
            original = _encode(mod, params, pre, backend.function(pre.config.activation, args.impl), sentences,
                               args.batch_size)
            for p in (p for p in todo if p[2] != "fine-tuned"):
                _, key, stage = p
                bar.set_postfix_str(f"{name} {key}")
                start = time.perf_counter()
                act = backend.function(key, args.impl)
                encoded = (original if key == pre.config.activation
                           else _encode(mod, params, pre, act, sentences, args.batch_size))
                rows[p] = _row(name, key, stage, 0, time.perf_counter() - start,
                               _measure(original, encoded, index, pairs))
                store.save(out, name, key, stage, encode_key, versions_key, rows[p])
                bar.update(1)
            for p in (p for p in todo if p[2] == "fine-tuned"):
                key = p[1]
                if not capabilities(name).autodiff:
                    report["skipped"][f"finetune {name}"] = f"the {name} backend has no autodiff: no fine-tune"
                    continue
                ft = _finetune(mod, backend, pre, key, args, train, params)
                act = backend.function(key, args.impl)
                after = _encode(mod, ft["params"], pre, act, sentences, args.batch_size)
                rows[p] = _row(name, key, "fine-tuned", args.steps, ft["seconds"],
                               _measure(original, after, index, pairs))
                info = {"steps": args.steps, "lr": args.lr, "batch": args.finetune_batch, "seconds": ft["seconds"],
                        "train_cos_before": ft["train_cos_before"], "loss_first": ft["losses"][0],
                        "loss_last": ft["losses"][-1], "losses": ft["losses"]}
                report["finetune"].setdefault(name, {})[key] = info
                store.save(out, name, key, "fine-tuned", tune_key, versions_key, rows[p], info)
                bar.update(1)
        report["rows"] += [rows[p] for p in mine if p in rows]
        report["environment"] = environment(used)
        report["environment"]["frameworks"] = {**stored_versions, **report["environment"]["frameworks"]}
        _write(out, report)  # after every backend: the report so far


def _markdown(report: dict) -> str:
    """The report as Markdown: summary table and per-layer token cosine table."""
    rows = report["rows"]
    head = ["backend", "activation", "stage", "steps", "cos mean", "cos worst", "rel. L2 drift (last layer)",
            "ROC-AUC", "sim. paraphrase", "sim. same topic", "sim. unrelated"]
    table = markdown_table(head, [[r["backend"], r["activation"], r["stage"], r["steps"], f"{r['cos_mean']:.6f}",
                                   f"{r['cos_worst']:.6f}", r["drift"]["rel_l2"][-1], f"{r['auc']:.4f}",
                                   r["mean_paraphrase"], r["mean_same_topic"], r["mean_unrelated"]] for r in rows])
    n_layers = len(rows[0]["drift"]["cosine"]) if rows else 0
    layers = markdown_table(["backend", "activation", "stage"] + [f"L{k}" for k in range(n_layers)],
                            [[r["backend"], r["activation"], r["stage"],
                              *[f"{c:.6f}" for c in r["drift"]["cosine"]]] for r in rows])
    s = report["settings"]
    env = report.get("environment", {})
    text = [
        "# gelulab swap: exact GELU replaced in all-MiniLM-L6-v2\n",
        (f"Command: `{env.get('command')}`; gelulab {env.get('gelulab')}, git commit "
         f"{env.get('git_commit') or 'unknown'}.\n"),
        _model_line(report["model"]),
        (f"{report['sentences']} evaluation sentences, pairs {report['pairs']}; activation impl `{s['impl']}`; "
         f"threads {report.get('environment', {}).get('threads')}.\n"),
        ("cos = cosine between the original and the swapped sentence embedding (mean over sentences, worst = "
         "minimum); ROC-AUC: paraphrase vs same-topic + unrelated pairs by cosine similarity.\n"),
        table,
        "\nMean token cosine to the original per hidden state (L0 = embedding output, Lk = output of layer k):\n",
        layers,
    ]
    if report["finetune"]:
        text.append(f"\nFine-tune: the swapped model's encoder layers (embeddings frozen) distilled toward the "
                    f"original model's embeddings, loss 1 - cos, on {s['train_sentences']} sentences generated by "
                    f"gelulab (templates and random word sequences, seed {s['seed']}), "
                    f"{report.get('train_eval_overlap')} of them among the evaluation sentences.\n")
    for name, per in report["finetune"].items():
        for key, f in per.items():
            text.append(f"\nFine-tune {name} {key}: {f['steps']} steps, batch {f['batch']}, Adam lr {f['lr']}, "
                        f"{f['seconds']:.1f} s; loss (1 - cos) {f['loss_first']:.4f} -> {f['loss_last']:.4f}; "
                        f"training-set cosine before {f['train_cos_before']:.4f}.\n")
    text.append(hf.side_by_side(report))
    for what, why in report["skipped"].items():
        text.append(f"\nSkipped {what}: {why}\n")
    return "".join(t if t.endswith("\n") else t + "\n" for t in text)


def _model_line(model: dict) -> str:
    """The report's model sentence: verified (manifest, file count, weights digest) or a loud UNVERIFIED."""
    where = model.get("package") or model["directory"]
    if model.get("verified"):
        return (f"Model: {where} — all {len(model['files'])} files verified against {model['manifest']} "
                f"(model.safetensors sha256 {model['sha256']}).\n")
    return (f"**UNVERIFIED MODEL: {where} has no sha256sums manifest; its files were used unchecked** "
            f"(sha256 of the files read: {', '.join(f'{k} {v}' for k, v in model['files'].items())}).\n")


def _plot(report: dict, path: Path) -> None:
    """One panel per backend (2 per row): 1 - mean token cosine to the original per layer (log scale), a line per
    swapped activation (its catalogue colour and label), dashed after the fine-tune; a dotted line at float32's
    machine epsilon (the rounding floor of the comparison)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["stage"] != "original"]
    names = list(dict.fromkeys(r["backend"] for r in rows))
    if not names:
        return
    keys = list(dict.fromkeys(r["activation"] for r in rows))
    colors = {k: ACTIVATIONS[k].color for k in keys}  # the catalogue's colour, as in the benchmark plots
    ncols = min(2, len(names))
    nrows = -(-len(names) // ncols)
    legend_cols = 3 if ncols > 1 else 2
    legend_rows = -(-(len(keys) + 2) // legend_cols)  # swapped lines, one fine-tuned line, epsilon (at most)
    bottom = 0.25 * legend_rows + 0.15  # inches kept free for the legend
    height = 3.8 * nrows + 0.8 + bottom
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, height), sharey=True, squeeze=False)
    legend = {}
    for ax, name in zip(axes.ravel(), names):
        for r in (r for r in rows if r["backend"] == name):
            gap = 1.0 - np.asarray(r["drift"]["cosine"][1:])
            layer = np.arange(1, len(gap) + 1)
            tuned = r["stage"] == "fine-tuned"
            stage = f", after {r['steps']} fine-tune steps" if tuned else ", swapped"
            label = ACTIVATIONS[r["activation"]].label + stage
            (line,) = ax.plot(layer, np.maximum(gap, 1e-9), "o--" if tuned else "o-",
                              color=colors[r["activation"]], mfc="white" if tuned else None, label=label)
            legend.setdefault(label, line)
        eps = ax.axhline(np.finfo(np.float32).eps, color="0.4", ls=":", lw=1.2, label="float32 machine epsilon")
        legend.setdefault(eps.get_label(), eps)
        ax.set_yscale("log")
        ax.set_title(name)
        ax.set_xticks(layer)
        ax.grid(True, which="major", alpha=0.4)
    for ax in axes[-1]:
        ax.set_xlabel("encoder layer k (its output hidden state)")
    for ax in axes[:, 0]:
        ax.set_ylabel("1 − mean token cosine to original")
    for ax in axes.ravel()[len(names):]:
        ax.set_visible(False)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=legend_cols, frameon=False)
    fig.suptitle("all-MiniLM-L6-v2, exact GELU replaced in every FFN:\n"
                 "distance to the original model per layer (log scale, lower = closer)")
    fig.tight_layout(rect=(0, bottom / height, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write(out: Path, report: dict) -> None:
    """swap.json (atomic), swap.md and swap_layers.png into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "swap.json", report)
    atomic_write_text(out / "swap.md", _markdown(report))
    _plot(report, out / "swap_layers.png")
