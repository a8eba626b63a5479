"""The real transformers BertModel in `gelulab swap`, beside gelulab's own encoders.

The packaged all-MiniLM-L6-v2 folder (experiments.swap.model.model_directory, sha256-checked by the caller) is
loaded by the torch backend's hf module (backends/torch/hf.py: `transformers.BertModel.from_pretrained(dir,
local_files_only=True)`, offline). Its six FFN activations (`encoder.layer.i.intermediate.intermediate_act_fn`,
transformers' GELUActivation, i.e. torch.nn.functional.gelu) are replaced with `gelulab.swap(model, to=key,
impl=...)`, and the model is measured exactly as gelulab's encoders are: against the model as loaded, on the same
evaluation sentences, embeddings (mean pooling, L2-normalised) and hidden states; the fine-tune distils the
swapped model's encoder layers (embeddings frozen, eval mode: no dropout, as gelulab's encoders) toward the
original embeddings of the same generated sentences, with the same Adam settings and batches. Its rows carry the
backend name "transformers". This module imports no framework: it orchestrates and reports.
"""
from __future__ import annotations

import importlib
import importlib.util
import time

from tqdm import tqdm

from gelulab.backends import REGISTRY
from gelulab.experiments.swap import model as bert

NAME = "transformers"
# the backend whose hf module (core.contracts.contract.PretrainedBert) runs the BertModel: the one whose record
# lists it (torch's)
BACKEND = next(name for name, record in REGISTRY.items() if "hf" in record.modules)
INSTALL_HINT = f"pip install -c constraints.txt -e '.[swap,{REGISTRY[BACKEND].extra}]'"


def unavailable() -> str | None:
    """Why the transformers BertModel cannot run here (transformers or torch missing, with the install command),
    or None."""
    missing = [name for name in (REGISTRY[BACKEND].package, NAME) if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed; install with: {INSTALL_HINT}" if missing else None


def backend_module():
    """The hf module of BACKEND, backends/<name>/hf.py (imports its framework, torch; transformers on first
    use)."""
    return importlib.import_module(f"gelulab.backends.{BACKEND}.hf")


def swapped_model(directory, key: str, impl: str, layers: int):
    """A freshly loaded BertModel with every FFN activation replaced by gelulab's `key` (gelulab.swap); returns
    (model, records). Raises RuntimeError unless exactly `layers` activations (one per encoder layer) were
    replaced."""
    from gelulab.api.surgery import swap

    model = backend_module().load(directory)
    records = swap(model, to=key, impl=impl)
    ffn = [r for r in records if r.path.endswith("intermediate.intermediate_act_fn")]
    if len(ffn) != layers or len(records) != layers:
        raise RuntimeError(f"gelulab.swap replaced {[r.path for r in records]} in the BertModel; expected the "
                           f"{layers} FFN activations")
    return model, records


def encode(model, pre, sentences, batch_size) -> bert.Encoded:
    """The evaluation sentences through the BertModel (experiments.swap.model.encode_sentences)."""
    hf = backend_module()
    return bert.encode_sentences(lambda i, m: hf.hidden_states(model, i, m), pre.tokenizer, sentences, batch_size)


def run(report: dict, args, pre, sentences, index, pairs, swaps, tuned, train, measure, save) -> None:
    """Add the BertModel's rows (original, each swap, each fine-tune) and its swap records to `report`, calling
    save() after each step. measure(original, encoded, index, pairs) -> the metrics dict of one row (the same
    function as for gelulab's encoders). A missing transformers or torch is recorded under report["skipped"];
    a fine-tune whose loss is not finite raises ValueError (experiments.swap.model.check_losses)."""
    why = unavailable()
    if why:
        report["skipped"][NAME] = why
        return
    hf = backend_module()
    start = time.perf_counter()
    original_model = hf.load(pre.directory)
    original = encode(original_model, pre, sentences, args.batch_size)
    report["rows"].append({"backend": NAME, "activation": pre.config.activation, "stage": "original", "steps": 0,
                           "seconds": time.perf_counter() - start,
                           **measure(original, original, index, pairs)})
    info = hf.describe(original_model)
    report[NAME] = {"version": info["version"], "torch_threads": info["torch_threads"], "model": info["model"],
                    "original_activation": info["activation"], "swaps": {}}
    save()
    for key in [k for k in swaps if k != pre.config.activation]:
        start = time.perf_counter()
        model, records = swapped_model(pre.directory, key, args.impl, pre.config.layers)
        report[NAME]["swaps"][key] = [vars(r) for r in records]
        encoded = encode(model, pre, sentences, args.batch_size)
        report["rows"].append({"backend": NAME, "activation": key, "stage": "swapped", "steps": 0,
                               "seconds": time.perf_counter() - start, **measure(original, encoded, index, pairs)})
        save()
    for key in tuned:
        ids, mask = train
        targets = bert.mean_pool(hf.hidden_states(original_model, ids, mask)[-1], mask)
        model, _ = swapped_model(pre.directory, key, args.impl, pre.config.layers)
        before = bert.mean_pool(hf.hidden_states(model, ids, mask)[-1], mask)
        batches = bert.batch_indices(len(ids), args.finetune_batch, args.steps, args.seed)
        start = time.perf_counter()
        with tqdm(total=args.steps, desc=f"fine-tune {NAME} {key}", leave=False) as bar:
            losses = hf.finetune(model, ids, mask, targets, batches, args.lr, progress=bar.update)
        bert.check_losses(losses, f"{NAME} {key}", args.lr)
        seconds = time.perf_counter() - start
        after = encode(model, pre, sentences, args.batch_size)
        report["rows"].append({"backend": NAME, "activation": key, "stage": "fine-tuned", "steps": args.steps,
                               "seconds": seconds, **measure(original, after, index, pairs)})
        report["finetune"].setdefault(NAME, {})[key] = {
            "steps": args.steps, "lr": args.lr, "batch": args.finetune_batch, "seconds": seconds,
            "train_cos_before": float(bert.cosine_rows(targets, before).mean()), "loss_first": losses[0],
            "loss_last": losses[-1], "losses": losses}
        save()


def side_by_side(report: dict) -> str:
    """Markdown: per activation and stage, the embedding cosine to the original (mean) and the last layer's
    relative L2 drift of every encoder (gelulab's per backend, and the transformers BertModel) side by side;
    "" when the report has no transformers row."""
    rows = report["rows"]
    names = list(dict.fromkeys(r["backend"] for r in rows))
    if NAME not in names:
        return ""
    cells = {(r["backend"], r["activation"], r["stage"]): r for r in rows}
    groups = list(dict.fromkeys((r["activation"], r["stage"]) for r in rows if r["stage"] != "original"))
    head = "| activation | stage | " + " | ".join(f"{n} cos / drift" for n in names) + " |"
    lines = [head, "|---|---|" + "---|" * len(names)]
    for key, stage in groups:
        values = []
        for n in names:
            r = cells.get((n, key, stage))
            values.append(f"{r['cos_mean']:.6f} / {r['drift']['rel_l2'][-1]:.4f}" if r else "-")
        lines.append(f"| {key} | {stage} | " + " | ".join(values) + " |")
    swaps = report.get(NAME, {}).get("swaps", {})
    first = next(iter(swaps.values()), [])
    paths = ", ".join(f"`{r['path']}`" for r in first)
    return ("\nThe transformers BertModel (transformers " + report.get(NAME, {}).get("version", "?")
            + f", its FFN activation {report.get(NAME, {}).get('original_activation', '?')} replaced by "
            f"`gelulab.swap`: {len(first)} activations, {paths}) beside gelulab's encoders; each cell: "
            "mean embedding cosine to that encoder's original / relative L2 drift of the last hidden state.\n\n"
            + "\n".join(lines) + "\n")
