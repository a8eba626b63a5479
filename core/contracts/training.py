"""The training contract every backend's trainer implements: what `train(spec)` gets and returns, and the one
Adam update formula they share.

`TrainSpec` carries numpy arrays (data, initial weights, minibatch order, Adam bias corrections) so that every
backend trains on the same numbers; the builders of those arrays (`layer_sizes`, `glorot_uniform`, `epoch_orders`,
`batch_weights`, `adam_bias_corrections`) are functions of plain arguments, shared by the moons experiment and the
training-step benchmark; `TrainOutput` is what a trainer returns; `adam_step` is written once over any array type
(Kingma & Ba 2015, Algorithm 1); `bce_with_logits` and `accuracy` evaluate a trained network in float64 from its
logits.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

TRAIN_DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class TrainSpec:
    """What a backend's `train(spec)` gets: one arm, one regime, one dtype, S seeds trained together.

    Arrays are numpy, float64 unless said (backends cast to `dtype`): x_train (S, n_train, 2), y_train (S,
    n_train), x_val (S, n_val, 2), y_val (S, n_val), x_test (S, n_test, 2), grid (S, G, 2): decision-boundary
    points; init: [(W (S, fan_in, fan_out), b (S, fan_out)), ...] matched-regime initial weights; order: (S,
    epochs, steps, batch) int32 matched-regime minibatch indices; weights: (steps, batch) slot weights; c1,
    c2: (epochs, steps) Adam bias corrections 1 - beta^t. The native regime ignores init and order (the
    framework's own initialiser and shuffling, seeded by `seeds`).
    """

    arm: str
    impl: str
    regime: str
    dtype: str
    hidden: tuple[int, ...]
    epochs: int
    batch_size: int
    lr: float
    beta1: float
    beta2: float
    eps: float
    seeds: tuple[int, ...]
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    grid: np.ndarray
    init: list = field(repr=False)
    order: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)
    c1: np.ndarray = field(repr=False)
    c2: np.ndarray = field(repr=False)

    @property
    def n_seeds(self) -> int:
        """S, the number of seeds trained together."""
        return len(self.seeds)

    @property
    def steps_per_epoch(self) -> int:
        """Minibatches per epoch."""
        return self.weights.shape[0]

    @property
    def step_shares(self) -> np.ndarray:
        """(steps,) float64: each minibatch's share of the train set, m_k / n_train, so that sum_k share_k *
        loss_k
        is the mean per-sample training loss seen during an epoch."""
        m = (self.weights > 0).sum(axis=1)
        return m / m.sum()


def layer_sizes(n_in: int, hidden, n_out: int = 1) -> list[tuple[int, int]]:
    """[(fan_in, fan_out), ...] of an MLP's dense layers n_in -> hidden... -> n_out. layer_sizes(2, (64, 64)) ->
    [(2, 64), (64, 64), (64, 1)]."""
    return list(itertools.pairwise([n_in, *hidden, n_out]))


def glorot_uniform(sizes, seed: np.random.SeedSequence | int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Initial weights [(W (fan_in, fan_out), b (fan_out,)), ...] float64 for the layer `sizes` (layer_sizes).

    W ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010, eq. 16; Keras Dense's default kernel
    initialiser), b = 0, drawn layer by layer from numpy.random.default_rng(seed), so every backend loads the same
    numbers.
    """
    rng = np.random.default_rng(seed)
    out = []
    for fan_in, fan_out in sizes:
        a = math.sqrt(6.0 / (fan_in + fan_out))
        out.append((rng.uniform(-a, a, size=(fan_in, fan_out)), np.zeros(fan_out)))
    return out


def steps_per_epoch(n_train: int, batch_size: int) -> int:
    """ceil(n_train / batch_size): minibatches per epoch, the last one partial when it does not divide."""
    return -(-n_train // batch_size)


def epoch_orders(n_train: int, epochs: int, batch_size: int, seed: np.random.SeedSequence | int) -> np.ndarray:
    """Minibatch indices (epochs, steps_per_epoch, batch_size) int32.

    Epoch e visits a fresh permutation of range(n_train) (numpy Generator.permutation, one generator from `seed`
    for all epochs), cut into minibatches in that order; the last minibatch is padded with index 0, whose weight
    is 0 (see batch_weights).
    """
    rng = np.random.default_rng(seed)
    steps = steps_per_epoch(n_train, batch_size)
    out = np.zeros((epochs, steps * batch_size), dtype=np.int32)
    for e in range(epochs):
        out[e, :n_train] = rng.permutation(n_train)
    return out.reshape(epochs, steps, batch_size)


def batch_weights(n_train: int, batch_size: int) -> np.ndarray:
    """(steps_per_epoch, batch_size) float64 weights of each minibatch slot in the loss: 1/m for the m real samples
    of a minibatch, 0 for padding, so sum(w * loss) is the minibatch mean loss (BCE mean reduction)."""
    steps = steps_per_epoch(n_train, batch_size)
    w = np.zeros(steps * batch_size)
    w[:n_train] = 1.0
    w = w.reshape(steps, batch_size)
    return w / w.sum(axis=1, keepdims=True)


def adam_bias_corrections(beta1: float, beta2: float, epochs: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(1 - beta1^t, 1 - beta2^t) for t = 1 .. epochs * steps, float64 arrays of shape (epochs, steps): computed
    once in numpy and handed to every backend (cast to the run dtype), so all use the same numbers."""
    t = np.arange(1, epochs * steps + 1, dtype=np.float64)
    return (1.0 - beta1 ** t).reshape(epochs, steps), (1.0 - beta2 ** t).reshape(epochs, steps)


def adam_step(grad, m, v, c1, c2, lr: float, beta1: float, beta2: float, eps: float, sqrt):
    """One Adam step, the single update formula of the matched regime; any array type with + - * / works.

    Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1:
        m_t = beta1 m_{t-1} + (1 - beta1) g_t
        v_t = beta2 v_{t-1} + (1 - beta2) g_t^2
        m_hat = m_t / (1 - beta1^t),  v_hat = v_t / (1 - beta2^t)
        theta_t = theta_{t-1} - delta,  delta = lr m_hat / (sqrt(v_hat) + eps)
    c1 = 1 - beta1^t and c2 = 1 - beta2^t come from adam_bias_corrections. torch.optim.Adam and optax.adam
    place eps the same way; Keras Adam adds eps to sqrt(v_t) before the bias correction ("epsilon hat", Kingma
    & Ba section 2), which is why the matched regime does not use it. grad, m, v: arrays of one shape and
    dtype; sqrt: the framework's elementwise square root. Returns (delta, m_t, v_t); the caller applies
    theta_t = theta_{t-1} - delta.
    """
    m = beta1 * m + (1.0 - beta1) * grad
    v = beta2 * v + (1.0 - beta2) * (grad * grad)
    return lr * (m / c1) / (sqrt(v / c2) + eps), m, v


def bce_with_logits(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean binary cross-entropy of logits z against labels y in {0, 1}, in float64, along the last axis.

    Stable form max(z, 0) - z y + log1p(exp(-|z|)) (the form of torch's BCEWithLogitsLoss and
    tf.nn.sigmoid_cross_entropy_with_logits docs). z, y: (..., n). Returns (...,).
    """
    z = np.asarray(z, dtype=np.float64)
    return np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))), axis=-1)


def accuracy(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Share of correct predictions (logit > 0 means class 1) along the last axis. z, y: (..., n). Returns
    (...,)."""
    return np.mean((np.asarray(z) > 0) == (np.asarray(y) > 0.5), axis=-1)


@dataclass(frozen=True)
class TrainOutput:
    """What a backend's `train(spec)` returns, as numpy float64 arrays over the S seeds of the spec.

    train_loss: (S, epochs) mean training BCE over each epoch's minibatches (sum_k share_k * loss_k, the
    running loss frameworks print), in the run dtype; val_loss: (S, epochs) mean BCE on the validation set
    after each epoch, in the run dtype; logits_train (S, n_train), logits_val (S, n_val), logits_test (S,
    n_test), logits_grid (S, G): the trained networks' logits (the test set's only use); recipe: how the
    backend initialised, ordered and optimised, in words (for the report).
    """

    train_loss: np.ndarray
    val_loss: np.ndarray
    logits_train: np.ndarray
    logits_val: np.ndarray
    logits_test: np.ndarray
    logits_grid: np.ndarray
    recipe: str
