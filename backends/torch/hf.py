"""The transformers BertModel on torch (core.contracts.contract.PretrainedBert), as `gelulab swap` runs it beside
gelulab's own encoders.

A folder of pretrained BERT weights (config.json, model.safetensors; experiments/swap packages all-MiniLM-L6-v2)
is loaded with `transformers.BertModel.from_pretrained(dir, local_files_only=True)` with HF_HUB_OFFLINE=1:
nothing is downloaded. The models are float32 on the CPU in eval mode (no dropout), as gelulab's encoders.
transformers is an optional dependency (the `swap` extra) imported on first use, so this module imports with
torch alone.
"""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F


def load(directory):
    """transformers.BertModel from the folder `directory`, offline, in eval mode (float32, CPU). Raises OSError
    when the folder lacks the model files, ImportError when transformers is not installed."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import BertModel
    from transformers.utils import logging

    logging.disable_progress_bar()
    return BertModel.from_pretrained(str(directory), local_files_only=True).eval()


def describe(model) -> dict:
    """{"version": transformers.__version__, "torch_threads": torch.get_num_threads(), "model": the model's class
    name, "activation": the qualified class name of layer 0's FFN activation
    (encoder.layer.0.intermediate.intermediate_act_fn; transformers' GELUActivation as loaded)}."""
    import transformers

    return {"version": transformers.__version__, "torch_threads": torch.get_num_threads(),
            "model": type(model).__name__,
            "activation": type(model.encoder.layer[0].intermediate.intermediate_act_fn).__qualname__}


def _forward(model, ids, mask, grad: bool) -> list:
    with torch.set_grad_enabled(grad):
        out = model(input_ids=torch.as_tensor(np.asarray(ids), dtype=torch.long),
                    attention_mask=torch.as_tensor(np.asarray(mask), dtype=torch.long), output_hidden_states=True)
    return list(out.hidden_states)


def hidden_states(model, ids, mask) -> list:
    """[embedding output, layer 1 .. layer L] of the BertModel for (B, T) int ids and 0/1 mask: numpy float32
    (B, T, H) arrays, computed without autograd."""
    return [h.numpy() for h in _forward(model, ids, mask, grad=False)]


def finetune(model, ids, mask, targets, batches, lr: float, progress=None) -> list[float]:
    """Distillation as backends/torch/bert.finetune, in place on `model`: Adam (eps=1e-8) on the encoder layers'
    parameters (embeddings and pooler frozen) minimising mean(1 - cos(embedding, target)), the embedding being the
    mask-weighted mean of the last hidden state, L2-normalised; eval mode (no dropout).

    ids, mask: (N, T) int arrays; targets: (N, H) float32 unit vectors; batches: (steps, batch) row indices;
    lr: Adam's learning rate; progress: called with 1 after each step. Returns the loss per step. Every parameter
    is left with requires_grad False."""
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = list(model.encoder.layer.parameters())
    for p in trainable:
        p.requires_grad_(True)
    opt = torch.optim.Adam(trainable, lr=lr, eps=1e-8)
    tgt = torch.as_tensor(targets)
    losses = []
    try:
        for rows in batches:
            m = torch.as_tensor(mask[rows], dtype=torch.float32)[..., None]
            h = _forward(model, ids[rows], mask[rows], grad=True)[-1]
            emb = F.normalize((h * m).sum(1) / m.sum(1), dim=-1)
            loss = 1.0 - (emb * tgt[torch.as_tensor(rows)]).sum(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if progress:
                progress(1)
    finally:
        for p in trainable:
            p.requires_grad_(False)
    return losses
