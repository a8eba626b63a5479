"""TensorFlow BERT encoder for experiments.swap.model's numpy weights, and the distillation fine-tune (Keras Adam,
tf.function).

Architecture: Devlin et al. 2019 (arXiv:1810.04805), post-LayerNorm, as transformers' BertModel; attention written
with tf.einsum and an additive padding bias, LayerNorm with tf.nn.moments.
The FFN activation is any callable, e.g. `backends.get_backend("tensorflow").function(key, impl)`.
"""
from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from gelulab.backends.tensorflow.activations import tf_device


def to_framework(params: dict) -> dict:
    """experiments.swap.model params (numpy float32) -> the same nested dict with float32 tf.Variables for the encoder
    layers (trainable) and float32 constants for the embeddings, on the backend's device."""
    with tf.device(tf_device()):
        t = {k: tf.constant(v, tf.float32) for k, v in params.items() if k != "layers"}
        t["layers"] = [{k: tf.Variable(v, dtype=tf.float32, name=f"l{i}_{k}") for k, v in layer.items()}
                       for i, layer in enumerate(params["layers"])]
    return t


def to_numpy_params(params: dict) -> dict:
    """Inverse of to_framework: numpy float32 copies."""
    out = {k: v.numpy().copy() for k, v in params.items() if k != "layers"}
    out["layers"] = [{k: v.numpy().copy() for k, v in layer.items()} for layer in params["layers"]]
    return out


def _layer_norm(x, g, b, eps):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * g + b


def hidden_states(p: dict, ids, mask, config, activation) -> list:
    """Hidden states [embedding output, layer 1 .. layer L], each (B, T, H) float32 tf tensors.

    ids, mask: (B, T) integer arrays (numpy or tf); activation: elementwise callable on tf tensors.
    """
    ids = tf.convert_to_tensor(ids, tf.int32)
    # additive padding bias (B, 1, 1, T), as core.contracts.encoder.attention_bias: 0 on real keys, float32 min on
    # padding
    bias = (1.0 - tf.cast(mask, tf.float32))[:, None, None, :] * np.finfo(np.float32).min
    b, t = tf.shape(ids)[0], tf.shape(ids)[1]
    x = tf.gather(p["word"], ids) + p["position"][:t] + p["token_type"][0]
    x = _layer_norm(x, p["emb_ln_g"], p["emb_ln_b"], config.eps)
    out = [x]
    scale = 1.0 / math.sqrt(config.head_dim)
    for w in p["layers"]:
        q, k, v = (tf.reshape(tf.einsum("bth,hk->btk", x, w[f"{n}_w"]) + w[f"{n}_b"],
                              [b, t, config.heads, config.head_dim]) for n in "qkv")
        probs = tf.nn.softmax(tf.einsum("bqnd,bknd->bnqk", q, k) * scale + bias, axis=-1)
        ctx = tf.reshape(tf.einsum("bnqk,bknd->bqnd", probs, v), [b, t, config.hidden])
        x = _layer_norm(x + tf.einsum("bth,hk->btk", ctx, w["o_w"]) + w["o_b"], w["ln1_g"], w["ln1_b"], config.eps)
        inner = activation(tf.einsum("bth,hf->btf", x, w["ff1_w"]) + w["ff1_b"])
        x = _layer_norm(x + tf.einsum("btf,fh->bth", inner, w["ff2_w"]) + w["ff2_b"], w["ln2_g"], w["ln2_b"],
                        config.eps)
        out.append(x)
    return out


def encode(p: dict, ids, mask, config, activation) -> list:
    """hidden_states as numpy float32 arrays."""
    return [h.numpy() for h in hidden_states(p, ids, mask, config, activation)]


def embed(p: dict, ids, mask, config, activation):
    """Mean over real tokens of the last hidden state, L2-normalised: (B, H) float32 (differentiable)."""
    m = tf.cast(mask, tf.float32)[..., None]
    h = hidden_states(p, ids, mask, config, activation)[-1]
    return tf.math.l2_normalize(tf.reduce_sum(h * m, 1) / tf.reduce_sum(m, 1), axis=-1)


def finetune(p: dict, ids, mask, targets, batches, config, activation, lr: float, progress=None):
    """Distillation: keras.optimizers.Adam(lr, epsilon=1e-8) on the encoder layers (embeddings frozen) minimising
    mean(1 - cos(embed(batch), targets[batch])), one tf.function step per batch.

    ids, mask: (N, T) int32; targets: (N, H) float32 unit vectors; batches: (steps, batch) row indices.
    Updates the layer Variables of `p` in place; returns (p, loss per step as a list of float).
    `progress(i)` is called after each step.
    """
    variables = [v for layer in p["layers"] for v in layer.values()]
    opt = keras.optimizers.Adam(learning_rate=lr, epsilon=1e-8)

    @tf.function(reduce_retracing=True)
    def step(ids_b, mask_b, tgt_b):
        with tf.GradientTape() as tape:
            e = embed(p, ids_b, mask_b, config, activation)
            loss = 1.0 - tf.reduce_mean(tf.reduce_sum(e * tgt_b, axis=-1))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    losses = []
    for rows in batches:
        losses.append(float(step(ids[rows], mask[rows], targets[rows])))
        if progress:
            progress(1)
    return p, losses
