"""The BERT encoder contract the backends' `bert` modules implement: the shape record and the attention mask.

Each `backends/<name>/bert.py` runs a BERT encoder (Devlin et al. 2019, arXiv:1810.04805) from numpy weights
with a given activation; what its forward pass needs from outside the framework lives here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BertConfig:
    """The encoder's shape, from config.json (transformers' BertConfig field names in brackets).

    vocab_size [vocab_size], hidden [hidden_size], layers [num_hidden_layers], heads [num_attention_heads],
    ffn [intermediate_size], max_positions [max_position_embeddings], type_vocab [type_vocab_size],
    eps [layer_norm_eps], activation: the catalogue key of `hidden_act` (core.activations.HF_ACTIVATIONS: exact GELU
    for "gelu").
    """

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    type_vocab: int
    eps: float
    activation: str

    @property
    def head_dim(self) -> int:
        """hidden // heads (32 for MiniLM-L6)."""
        return self.hidden // self.heads



def attention_bias(mask: np.ndarray) -> np.ndarray:
    """Additive attention bias (batch, 1, 1, T) float32: 0 on real keys, float32 min on padding (as transformers'
    extended attention mask), so softmax gives padded keys weight exactly 0."""
    return ((1.0 - np.asarray(mask, np.float32)) * np.finfo(np.float32).min)[:, None, None, :]
