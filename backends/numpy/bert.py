"""numpy BERT encoder for experiments.swap.model's weights: inference only (numpy has no autodiff, so no fine-tune
here).

A fourth, framework-free reference for the parity tests. Architecture: Devlin et al. 2019 (arXiv:1810.04805),
post-LayerNorm, as transformers' BertModel; softmax from scipy.special. Matrix products use OpenBLAS with the
thread count limited to GELULAB_THREADS (threadpoolctl).
"""
from __future__ import annotations

import numpy as np
import scipy.special
from threadpoolctl import threadpool_limits

from gelulab.core.contracts.encoder import attention_bias
from gelulab.core.plumbing import config as gelulab_config


def to_framework(params: dict) -> dict:
    """The numpy params as they are (float32)."""
    return params


def hidden_states(p: dict, ids, mask, config, activation) -> list:
    """Hidden states [embedding output, layer 1 .. layer L], each (B, T, H) float32 numpy arrays.

    ids, mask: (B, T) integer arrays; activation: elementwise callable on numpy arrays (float32 in and out).
    """
    ids = np.asarray(ids)
    bias = attention_bias(mask)
    b, t = ids.shape

    def ln(x, g, beta):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return ((x - mu) / np.sqrt(var + np.float32(config.eps)) * g + beta).astype(np.float32)

    def heads(y):
        return y.reshape(b, t, config.heads, config.head_dim).transpose(0, 2, 1, 3)

    x = ln(p["word"][ids] + p["position"][:t] + p["token_type"][0], p["emb_ln_g"], p["emb_ln_b"])
    out = [x]
    scale = np.float32(1.0 / np.sqrt(config.head_dim))
    with threadpool_limits(gelulab_config.threads()):
        for w in p["layers"]:
            q, k, v = (heads(x @ w[f"{n}_w"] + w[f"{n}_b"]) for n in "qkv")
            probs = scipy.special.softmax((q @ k.transpose(0, 1, 3, 2)) * scale + bias, axis=-1)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, config.hidden)
            x = ln(x + ctx @ w["o_w"] + w["o_b"], w["ln1_g"], w["ln1_b"])
            x = ln(x + activation(x @ w["ff1_w"] + w["ff1_b"]) @ w["ff2_w"] + w["ff2_b"], w["ln2_g"], w["ln2_b"])
            out.append(x)
    return out


def encode(p: dict, ids, mask, config, activation) -> list:
    """hidden_states (already numpy float32)."""
    return hidden_states(p, ids, mask, config, activation)
