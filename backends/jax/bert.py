"""JAX BERT encoder for experiments.swap.model's numpy weights, and the distillation fine-tune (optax.adam under
jax.jit).

Architecture: Devlin et al. 2019 (arXiv:1810.04805), post-LayerNorm, as transformers' BertModel; attention through
jax.nn.dot_product_attention (layout B, T, heads, head_dim) with a boolean padding mask, LayerNorm through
jax.nn.standardize. The FFN activation is any callable, e.g. `backends.get_backend("jax").function(key, impl)`.
Every array here is given float32 explicitly, so the encoder is the same with jax_enable_x64 on or off.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from gelulab.backends.jax.activations import jax_device


def to_framework(params: dict) -> dict:
    """experiments.swap.model params (numpy float32) -> the same pytree of float32 jax arrays on the backend's
    device."""
    return jax.device_put(jax.tree.map(lambda a: np.asarray(a, np.float32), params), jax_device())


def to_numpy_params(params: dict) -> dict:
    """Inverse of to_framework: numpy float32 copies."""
    return jax.tree.map(lambda a: np.array(a, np.float32), params)


def hidden_states(p: dict, ids, mask, config, activation) -> list:
    """Hidden states [embedding output, layer 1 .. layer L], each (B, T, H) float32 jax arrays.

    ids, mask: (B, T) integer arrays; activation: elementwise callable on jax arrays.
    """
    ids = jnp.asarray(ids, jnp.int32)
    keep = jnp.asarray(mask, jnp.int32)[:, None, None, :] > 0  # (B, 1, 1, T): which keys are real
    b, t = ids.shape

    def ln(x, g, beta):
        return jax.nn.standardize(x, axis=-1, epsilon=config.eps) * g + beta

    x = ln(p["word"][ids] + p["position"][:t] + p["token_type"][0], p["emb_ln_g"], p["emb_ln_b"])
    out = [x]
    for w in p["layers"]:
        q, k, v = ((x @ w[f"{n}_w"] + w[f"{n}_b"]).reshape(b, t, config.heads, config.head_dim) for n in "qkv")
        ctx = jax.nn.dot_product_attention(q, k, v, mask=keep).reshape(b, t, config.hidden)
        x = ln(x + ctx @ w["o_w"] + w["o_b"], w["ln1_g"], w["ln1_b"])
        x = ln(x + activation(x @ w["ff1_w"] + w["ff1_b"]) @ w["ff2_w"] + w["ff2_b"], w["ln2_g"], w["ln2_b"])
        out.append(x)
    return out


def encode(p: dict, ids, mask, config, activation) -> list:
    """hidden_states as numpy float32 arrays."""
    return [np.asarray(h) for h in hidden_states(p, ids, mask, config, activation)]


def embed(p: dict, ids, mask, config, activation):
    """Mean over real tokens of the last hidden state, L2-normalised: (B, H) float32 (differentiable)."""
    m = jnp.asarray(mask, jnp.float32)[..., None]
    mean = (hidden_states(p, ids, mask, config, activation)[-1] * m).sum(1) / m.sum(1)
    return mean / jnp.linalg.norm(mean, axis=-1, keepdims=True)


def finetune(p: dict, ids, mask, targets, batches, config, activation, lr: float, progress=None):
    """Distillation: optax.adam(lr, eps=1e-8) on the encoder layers (embeddings frozen) minimising
    mean(1 - cos(embed(batch), targets[batch])), one jitted step per batch.

    ids, mask: (N, T) int32; targets: (N, H) float32 unit vectors; batches: (steps, batch) row indices.
    Returns (updated params, loss per step as a list of float). `progress(i)` is called after each step.
    """
    frozen = {k: v for k, v in p.items() if k != "layers"}
    opt = optax.adam(lr, eps=1e-8)

    def loss_fn(layers, ids_b, mask_b, tgt_b):
        e = embed({**frozen, "layers": layers}, ids_b, mask_b, config, activation)
        return 1.0 - jnp.mean(jnp.sum(e * tgt_b, axis=-1))

    @jax.jit
    def step(layers, state, ids_b, mask_b, tgt_b):
        loss, grads = jax.value_and_grad(loss_fn)(layers, ids_b, mask_b, tgt_b)
        updates, state = opt.update(grads, state, layers)
        return optax.apply_updates(layers, updates), state, loss

    # committed to the device like the params: otherwise the step's outputs differ in placement from its first
    # inputs and jax.jit compiles the step a second time
    layers, state, losses = p["layers"], jax.device_put(opt.init(p["layers"]), jax_device()), []
    for rows in batches:
        layers, state, loss = step(layers, state, ids[rows], mask[rows], targets[rows])
        losses.append(float(loss))
        if progress:
            progress(1)
    return {**frozen, "layers": layers}, losses
