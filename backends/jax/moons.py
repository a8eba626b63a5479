"""Moons training in JAX: a flax.linen MLP, optax, all seeds of one arm in one jitted call.

The seeds are trained together with jax.vmap over the seed axis, and the 4400 steps (100 epochs x 44
minibatches by default) run inside lax.scan (epochs) over lax.scan (minibatches), so the whole study of one
arm is one XLA program, compiled once per (arm, impl, regime, dtype, shapes).

matched: the shared numpy initial weights and order, and core.contracts.training.adam_step (Kingma & Ba 2015,
  Algorithm 1) wrapped as an optax.GradientTransformation.
native: flax.linen.Dense's default initialisers (lecun_normal kernel, zero bias) from jax.random.key(seed),
  shuffling with jax.random.permutation, and optax.adam(lr, b1, b2) with its default eps = 1e-8.
"""
from __future__ import annotations

from functools import cache

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gelulab.backends import get_backend
from gelulab.backends.jax.activations import require_x64
from gelulab.core.contracts.training import TrainOutput, TrainSpec, adam_step


class MLP(nn.Module):
    """2 -> hidden... -> 1 logit; `act` between dense layers. Input (..., 2), output (..., ) logits."""

    hidden: tuple
    act: object
    dtype: object

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = self.act(nn.Dense(width, dtype=self.dtype, param_dtype=self.dtype)(x))
        return nn.Dense(1, dtype=self.dtype, param_dtype=self.dtype)(x)[..., 0]


def kingma_ba_adam(c1, c2, lr: float, beta1: float, beta2: float, eps: float) -> optax.GradientTransformation:
    """gelulab.core.contracts.training.adam_step as an optax transformation; c1, c2: (T,) bias corrections
    1 - beta^t, t = 1..T."""

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return jnp.zeros([], jnp.int32), zeros, zeros

    def update(grads, state, params=None):
        t, m, v = state
        out = jax.tree.map(lambda g, m_, v_: adam_step(g, m_, v_, c1[t], c2[t], lr, beta1, beta2, eps, jnp.sqrt),
                           grads, m, v)
        is_leaf = lambda x: isinstance(x, tuple)
        delta, m, v = (jax.tree.map(lambda o, i=i: o[i], out, is_leaf=is_leaf) for i in range(3))
        return jax.tree.map(jnp.negative, delta), (t + 1, m, v)

    return optax.GradientTransformation(init, update)


def _params_from_numpy(init, dtype) -> dict:
    """[(W (S, in, out), b (S, out)), ...] -> flax params with a leading seed axis."""
    return {"params": {f"Dense_{i}": {"kernel": jnp.asarray(w, dtype), "bias": jnp.asarray(b, dtype)}
                       for i, (w, b) in enumerate(init)}}


def train_step(model: MLP, tx: optax.GradientTransformation, params, state, xb, yb, w):
    """One minibatch step: loss = sum_i w_i BCE(model(xb_i), yb_i), its gradient, and tx's update.

    xb (B, 2), yb (B,), w (B,) slot weights (1/m on the m real samples); params, state: one network's flax
    params and tx's state. Returns (new params, new state, loss) with loss a scalar.
    """
    def loss_fn(p):
        return jnp.sum(w * optax.sigmoid_binary_cross_entropy(model.apply(p, xb), yb))

    loss, g = jax.value_and_grad(loss_fn)(params)
    u, state = tx.update(g, state, params)
    return optax.apply_updates(params, u), state, loss


def bench_step(spec: TrainSpec, mode: str):
    """The benchmark's training step (benchmarks/trainstep.py): one matched-regime step of the spec's first seed
    on its first minibatch, from the shared initial weights and a fresh Adam state (t = 1 every call: the step
    is a pure function of fixed inputs). mode "compiled": jax.jit of train_step; "eager": train_step op by op.
    Returns (call, fn): call() runs one step and returns (params, state, loss); fn is the jitted function
    (for benchmarks' compile counts) or None. Raises ValueError for an unknown arm / impl / mode, or for a
    float64 spec while jax_enable_x64 is off.
    """
    if mode not in ("eager", "compiled"):
        raise ValueError(f"mode={mode!r}; expected 'eager' or 'compiled'")
    if spec.dtype == "float64":
        require_x64("float64 training")
    dtype = jnp.dtype(spec.dtype)
    with jax.default_device(get_backend("jax").module.jax_device()):
        model = MLP(tuple(spec.hidden), get_backend("jax").function(spec.arm, spec.impl), dtype)
        tx = kingma_ba_adam(jnp.asarray(spec.c1.ravel(), dtype), jnp.asarray(spec.c2.ravel(), dtype), spec.lr,
                            spec.beta1, spec.beta2, spec.eps)
        params = jax.tree.map(lambda a: a[0], _params_from_numpy(spec.init, dtype))
        state = tx.init(params)
        idx = spec.order[0, 0, 0]
        xb, yb, w = (jnp.asarray(a, dtype) for a in (spec.x_train[0, idx], spec.y_train[0, idx], spec.weights[0]))
    step = lambda p, s, x, y, w_: train_step(model, tx, p, s, x, y, w_)
    fn = jax.jit(step) if mode == "compiled" else None
    run = fn or step
    return (lambda: run(params, state, xb, yb, w)), fn


@cache
def _trainer(arm: str, impl: str, regime: str, dtype: str, hidden: tuple, lr: float, beta1: float, beta2: float,
             eps: float):
    """The jitted, seed-vmapped training function of one configuration (cached: compiled once per shapes)."""
    model = MLP(hidden, get_backend("jax").function(arm, impl), jnp.dtype(dtype))

    def bce(params, x, y):
        return optax.sigmoid_binary_cross_entropy(model.apply(params, x), y)

    def fit_one(params, x_train, y_train, x_val, y_val, x_test, grid, order, weights, shares, c1, c2):
        tx = (kingma_ba_adam(c1.ravel(), c2.ravel(), lr, beta1, beta2, eps) if regime == "matched"
              else optax.adam(lr, b1=beta1, b2=beta2))

        def step(carry, batch):
            idx, w = batch
            p, s, loss = train_step(model, tx, *carry, x_train[idx], y_train[idx], w)
            return (p, s), loss

        def epoch(carry, idx_e):
            carry, loss = jax.lax.scan(step, carry, (idx_e, weights))
            return carry, (jnp.sum(shares * loss), jnp.mean(bce(carry[0], x_val, y_val)))

        (p, _), (tl, vl) = jax.lax.scan(epoch, (params, tx.init(params)), order)
        return tl, vl, *(model.apply(p, x) for x in (x_train, x_val, x_test, grid))

    return jax.jit(jax.vmap(fit_one, in_axes=(0, 0, 0, 0, 0, 0, 0, 0, None, None, None, None)))


def _native_start(spec: TrainSpec, model: MLP, dtype):
    """Flax default initial weights and jax.random.permutation orders, (S, ...) each, from
    jax.random.key(seed)."""
    n_train = spec.x_train.shape[1]
    padded = spec.steps_per_epoch * spec.batch_size
    params, orders = [], []
    for seed in spec.seeds:
        k_init, k_order = jax.random.split(jax.random.key(seed))
        params.append(model.init(k_init, jnp.zeros((1, spec.x_train.shape[2]), dtype)))
        perms = jax.vmap(lambda e, k=k_order: jax.random.permutation(jax.random.fold_in(k, e), n_train))(
            jnp.arange(spec.epochs))
        perms = jnp.pad(perms, ((0, 0), (0, padded - n_train)))
        orders.append(perms.reshape(spec.epochs, spec.steps_per_epoch, spec.batch_size).astype(jnp.int32))
    return jax.tree.map(lambda *a: jnp.stack(a), *params), jnp.stack(orders)


def train(spec: TrainSpec) -> TrainOutput:
    """Train the spec's S seeds of one arm together; returns their curves and logits (see
    core.contracts.training.TrainOutput).

    Raises ValueError for an unknown arm / impl (from the backend catalogue), or for a float64 spec while
    jax_enable_x64 is off (naming the setting).
    """
    if spec.dtype == "float64":
        require_x64("float64 training")
    with jax.default_device(get_backend("jax").module.jax_device()):
        return _train(spec)


def _train(spec: TrainSpec) -> TrainOutput:
    dtype = jnp.dtype(spec.dtype)
    fn = _trainer(spec.arm, spec.impl, spec.regime, spec.dtype, tuple(spec.hidden), spec.lr, spec.beta1,
                  spec.beta2, spec.eps)
    if spec.regime == "matched":
        params, order = _params_from_numpy(spec.init, dtype), jnp.asarray(spec.order)
        recipe = ("shared numpy Glorot-uniform init and order; core.contracts.training.adam_step (Kingma & Ba Alg. 1) "
                  f"as an optax transformation, eps={spec.eps:g}")
    else:
        model = MLP(tuple(spec.hidden), get_backend("jax").function(spec.arm, spec.impl), dtype)
        params, order = _native_start(spec, model, dtype)
        recipe = ("flax.linen.Dense default init (lecun_normal, zero bias); jax.random.permutation order; "
                  "optax.adam eps=1e-8")
    as_dtype = lambda a: jnp.asarray(a, dtype)
    data = [as_dtype(a) for a in (spec.x_train, spec.y_train, spec.x_val, spec.y_val, spec.x_test, spec.grid)]
    tables = [as_dtype(a) for a in (spec.weights, spec.step_shares, spec.c1, spec.c2)]
    out = fn(params, *data, order, *tables)
    arrays = [np.asarray(jax.device_get(a), dtype=np.float64) for a in out]
    return TrainOutput(*arrays, recipe=recipe)
