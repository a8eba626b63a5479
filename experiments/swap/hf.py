"""The real transformers BertModel in `gelulab swap`, beside gelulab's own encoders.

The packaged all-MiniLM-L6-v2 folder (experiments.swap.model.model_directory, sha256-checked by the caller) is
loaded with `transformers.BertModel.from_pretrained(dir, local_files_only=True)` (HF_HUB_OFFLINE=1: nothing is
downloaded). Its six FFN activations (`encoder.layer.i.intermediate.intermediate_act_fn`, transformers'
GELUActivation, i.e. torch.nn.functional.gelu) are replaced with `gelulab.swap(model, to=key, impl=...)`, and the
model is measured exactly as gelulab's encoders are: against the model as loaded, on the same evaluation
sentences, embeddings (mean pooling, L2-normalised) and hidden states; the fine-tune distils the swapped model's
encoder layers (embeddings frozen, eval mode: no dropout, as gelulab's encoders) toward the original embeddings
of the same generated sentences, with the same Adam settings and batches. Its rows carry the backend name
"transformers".
"""
from __future__ import annotations

import importlib.util
import os
import time

import numpy as np
from tqdm import tqdm

from gelulab.experiments.swap import model as bert

NAME = "transformers"
INSTALL_HINT = "pip install -c constraints.txt -e '.[swap,torch]'"


def unavailable() -> str | None:
    """Why the transformers BertModel cannot run here (transformers or torch missing, with the install command),
    or None."""
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed; install with: {INSTALL_HINT}" if missing else None


def load_model(directory):
    """transformers.BertModel from the packaged folder, offline, in eval mode (float32, CPU)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    return BertModel.from_pretrained(str(directory), local_files_only=True).eval()


def swapped_model(directory, key: str, impl: str, layers: int):
    """A freshly loaded model with every FFN activation replaced by gelulab's `key` (gelulab.swap); returns
    (model, records). Raises RuntimeError unless exactly `layers` activations (one per encoder layer) were
    replaced."""
    from gelulab.surgery import swap

    model = load_model(directory)
    records = swap(model, to=key, impl=impl)
    ffn = [r for r in records if r.path.endswith("intermediate.intermediate_act_fn")]
    if len(ffn) != layers or len(records) != layers:
        raise RuntimeError(f"gelulab.swap replaced {[r.path for r in records]} in the BertModel; expected the "
                           f"{layers} FFN activations")
    return model, records


def hidden_states(model, ids, mask, grad: bool = False) -> list:
    """[embedding output, layer 1 .. layer L] of the BertModel for (B, T) int ids and mask: numpy float32 arrays,
    or torch tensors with autograd when grad=True."""
    import torch

    with torch.set_grad_enabled(grad):
        out = model(input_ids=torch.as_tensor(np.asarray(ids), dtype=torch.long),
                    attention_mask=torch.as_tensor(np.asarray(mask), dtype=torch.long), output_hidden_states=True)
    return list(out.hidden_states) if grad else [h.numpy() for h in out.hidden_states]


def encode(model, pre, sentences, batch_size) -> bert.Encoded:
    """The evaluation sentences through the BertModel (experiments.swap.model.encode_sentences)."""
    return bert.encode_sentences(lambda i, m: hidden_states(model, i, m), pre.tokenizer, sentences, batch_size)


def finetune(model, ids, mask, targets, batches, lr: float, progress=None) -> list[float]:
    """Distillation as backends/torch/bert.finetune: Adam (eps=1e-8) on the encoder layers' parameters
    (embeddings and pooler frozen) minimising mean(1 - cos(embedding, target)), eval mode. ids, mask: (N, T);
    targets: (N, H) unit vectors; batches: (steps, batch) row indices. Returns the loss per step."""
    import torch
    import torch.nn.functional as F

    for p in model.parameters():
        p.requires_grad_(False)
    trainable = [p for p in model.encoder.layer.parameters()]
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.Adam(trainable, lr=lr, eps=1e-8)
    tgt = torch.as_tensor(targets)
    losses = []
    for rows in batches:
        m = torch.as_tensor(mask[rows], dtype=torch.float32)[..., None]
        h = hidden_states(model, ids[rows], mask[rows], grad=True)[-1]
        emb = F.normalize((h * m).sum(1) / m.sum(1), dim=-1)
        loss = 1.0 - (emb * tgt[torch.as_tensor(rows)]).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(1)
    for p in trainable:
        p.requires_grad_(False)
    return losses


def run(report: dict, args, pre, sentences, index, pairs, swaps, tuned, train, measure, save) -> None:
    """Add the BertModel's rows (original, each swap, each fine-tune) and its swap records to `report`, calling
    save() after each step. measure(original, encoded, index, pairs) -> the metrics dict of one row (the same
    function as for gelulab's encoders). A missing transformers or torch is recorded under report["skipped"]."""
    why = unavailable()
    if why:
        report["skipped"][NAME] = why
        return
    import torch
    import transformers

    start = time.perf_counter()
    original_model = load_model(pre.directory)
    original = encode(original_model, pre, sentences, args.batch_size)
    report["rows"].append({"backend": NAME, "activation": "gelu_none", "stage": "original", "steps": 0,
                           "seconds": time.perf_counter() - start,
                           **measure(original, original, index, pairs)})
    report[NAME] = {"version": transformers.__version__, "torch_threads": torch.get_num_threads(),
                    "model": type(original_model).__name__,
                    "original_activation": type(original_model.encoder.layer[0].intermediate.intermediate_act_fn)
                    .__qualname__, "swaps": {}}
    save()
    for key in [k for k in swaps if k != "gelu_none"]:
        start = time.perf_counter()
        model, records = swapped_model(pre.directory, key, args.impl, pre.config.layers)
        report[NAME]["swaps"][key] = [vars(r) for r in records]
        encoded = encode(model, pre, sentences, args.batch_size)
        report["rows"].append({"backend": NAME, "activation": key, "stage": "swapped", "steps": 0,
                               "seconds": time.perf_counter() - start, **measure(original, encoded, index, pairs)})
        save()
    for key in tuned:
        ids, mask = train
        targets = bert.mean_pool(hidden_states(original_model, ids, mask)[-1], mask)
        model, _ = swapped_model(pre.directory, key, args.impl, pre.config.layers)
        before = bert.mean_pool(hidden_states(model, ids, mask)[-1], mask)
        batches = bert.batch_indices(len(ids), args.finetune_batch, args.steps, args.seed)
        start = time.perf_counter()
        with tqdm(total=args.steps, desc=f"fine-tune {NAME} {key}", leave=False) as bar:
            losses = finetune(model, ids, mask, targets, batches, args.lr, progress=bar.update)
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
