"""PyTorch BERT encoder for experiments.swap.model's numpy weights, and the distillation fine-tune (torch.optim.Adam).

Architecture: Devlin et al. 2019 (arXiv:1810.04805), post-LayerNorm, as transformers' BertModel; attention through
torch.nn.functional.scaled_dot_product_attention with the additive padding bias of
core.contracts.encoder.attention_bias. The FFN activation is any callable, e.g.
`backends.get_backend("torch").function(key, impl)`.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gelulab.backends.torch.activations import torch_device
from gelulab.core.contracts.encoder import attention_bias


def to_framework(params: dict) -> dict:
    """experiments.swap.model params (numpy float32) -> the same nested dict of float32 torch tensors (copies)."""
    dev = torch_device()
    t = {k: torch.tensor(v, device=dev) for k, v in params.items() if k != "layers"}
    t["layers"] = [{k: torch.tensor(v, device=dev) for k, v in layer.items()} for layer in params["layers"]]
    return t


def to_numpy_params(params: dict) -> dict:
    """Inverse of to_framework: numpy float32 copies."""
    out = {k: v.detach().cpu().numpy().copy() for k, v in params.items() if k != "layers"}
    out["layers"] = [{k: v.detach().cpu().numpy().copy() for k, v in layer.items()} for layer in params["layers"]]
    return out


def hidden_states(p: dict, ids, mask, config, activation) -> list:
    """Hidden states [embedding output, layer 1 .. layer L], each (B, T, H) float32 torch tensors.

    ids, mask: (B, T) integer arrays (numpy or torch); activation: elementwise callable on torch tensors.
    """
    dev = torch_device()
    ids = torch.as_tensor(np.asarray(ids), dtype=torch.long, device=dev)
    bias = torch.as_tensor(attention_bias(np.asarray(mask)), device=dev)
    b, t = ids.shape

    def ln(x, g, beta):
        return F.layer_norm(x, (config.hidden,), g, beta, config.eps)

    def split(y):  # (B, T, H) -> (B, heads, T, head_dim)
        return y.view(b, t, config.heads, config.head_dim).transpose(1, 2)

    x = ln(p["word"][ids] + p["position"][:t] + p["token_type"][0], p["emb_ln_g"], p["emb_ln_b"])
    out = [x]
    for w in p["layers"]:
        q, k, v = (split(x @ w[f"{n}_w"] + w[f"{n}_b"]) for n in "qkv")
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        ctx = ctx.transpose(1, 2).reshape(b, t, config.hidden)
        x = ln(x + ctx @ w["o_w"] + w["o_b"], w["ln1_g"], w["ln1_b"])
        ffn = activation(x @ w["ff1_w"] + w["ff1_b"]) @ w["ff2_w"] + w["ff2_b"]
        x = ln(x + ffn, w["ln2_g"], w["ln2_b"])
        out.append(x)
    return out


def encode(p: dict, ids, mask, config, activation) -> list:
    """hidden_states without autograd, as numpy float32 arrays."""
    with torch.no_grad():
        return [h.cpu().numpy() for h in hidden_states(p, ids, mask, config, activation)]


def embed(p: dict, ids, mask, config, activation):
    """Mean over real tokens of the last hidden state, L2-normalised: (B, H) float32 tensor (differentiable)."""
    m = torch.as_tensor(np.asarray(mask), dtype=torch.float32, device=torch_device())[..., None]
    h = hidden_states(p, ids, mask, config, activation)[-1]
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


def finetune(p: dict, ids, mask, targets, batches, config, activation, lr: float, progress=None):
    """Distillation: Adam (torch.optim.Adam, eps=1e-8) on the encoder layers (embeddings frozen) minimising
    mean(1 - cos(embed(batch), targets[batch])).

    ids, mask: (N, T) int32; targets: (N, H) float32 unit vectors; batches: (steps, batch) row indices.
    Updates `p` in place; returns (p, loss per step as a list of float). `progress(i)` is called after each step.
    """
    trainable = [v for layer in p["layers"] for v in layer.values()]
    for v in trainable:
        v.requires_grad_(True)
    opt = torch.optim.Adam(trainable, lr=lr, eps=1e-8)
    tgt = torch.as_tensor(targets, device=torch_device())
    losses = []
    for rows in batches:
        sel = torch.as_tensor(rows, device=torch_device())
        loss = 1.0 - (embed(p, ids[rows], mask[rows], config, activation) * tgt[sel]).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if progress:
            progress(1)
    for v in trainable:
        v.requires_grad_(False)
    return p, losses
