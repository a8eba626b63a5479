"""Moons training in TensorFlow: all seeds of one arm together, weights with a leading seed axis.

matched: one tf.function(jit_compile=True) runs all epochs and minibatches (tf.range loops,
  tf.GradientTape) on the shared numpy initial weights and order, with core.contracts.training.adam_step (Kingma & Ba
  2015, Algorithm 1): Keras Adam is not used here because it adds eps to sqrt(v_t) before the bias correction.
native: what a Keras user gets: Keras Dense's default initialisers (glorot_uniform kernel, zero bias), Keras
  `fit` with shuffle=True, keras.optimizers.Adam(lr, beta_1, beta_2) with its default epsilon = 1e-7. The S
  seeds are S parallel dense stacks in one Keras model (input (n, S, 2), output (n, S) logits); the loss is
  the sum over seeds of each seed's mean BCE, so each seed's weights get that seed's gradient, and `fit` draws
  one shuffling order per arm (keras.utils.set_random_seed(first seed)), shared by the seeds of that arm.
"""
from __future__ import annotations

import logging
import os
from functools import cache

import numpy as np
import tensorflow as tf

from gelulab.backends import get_backend
from gelulab.core.contracts.training import TrainOutput, TrainSpec, adam_step

os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _bce(logits, labels):
    """Elementwise BCE on logits (tf.nn.sigmoid_cross_entropy_with_logits)."""
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)


def _forward(params, x, act):
    """params [(W (S, in, out), b (S, out)), ...]; x (S, B, in) -> logits (S, B)."""
    for k, (w, b) in enumerate(params):
        x = tf.matmul(x, w) + b[:, None, :]
        if k < len(params) - 1:
            x = act(x)
    return x[..., 0]


def _nest(flat):
    """[W0, b0, W1, b1, ...] -> [(W0, b0), (W1, b1), ...]."""
    return list(zip(flat[0::2], flat[1::2]))


def _step_function(act, lr: float, beta1: float, beta2: float, eps: float):
    """step(flat, m, v, xb, yb, w, c1, c2) -> (flat, m, v, loss): one matched-regime minibatch step of every seed.

    flat, m, v: [W0, b0, W1, b1, ...] weights (S, in, out) / biases (S, out) and their Adam moments; xb (S, B,
    2), yb (S, B), w (B,) slot weights; c1, c2: scalar bias corrections 1 - beta^t; loss (S,) = sum_i w_i BCE.
    """

    def step(flat, m, v, xb, yb, w, c1, c2):
        with tf.GradientTape() as tape:
            tape.watch(flat)
            loss = tf.reduce_sum(w * _bce(_forward(_nest(flat), xb, act), yb), axis=1)  # (S,)
            total = tf.reduce_sum(loss)
        grads = tape.gradient(total, flat)
        new = [adam_step(g, m_, v_, c1, c2, lr, beta1, beta2, eps, tf.sqrt) for g, m_, v_ in zip(grads, m, v)]
        return [p - n[0] for p, n in zip(flat, new)], [n[1] for n in new], [n[2] for n in new], loss

    return step


def bench_step(spec: TrainSpec, mode: str):
    """The benchmark's training step (benchmarks/trainstep.py): one matched-regime step of the spec's seeds on
    their first minibatch, from the shared initial weights and zero Adam moments with the bias corrections of
    t = 1 (a pure function of fixed inputs). mode "compiled": tf.function(jit_compile=True) of the step (XLA);
    "eager": the step op by op. Returns (call, fn): call() runs one step and returns the (S,) loss; fn is the
    tf.function or None. Raises ValueError for an unknown arm / impl / mode.
    """
    if mode not in ("eager", "compiled"):
        raise ValueError(f"mode={mode!r}; expected 'eager' or 'compiled'")
    dtype = {"float64": tf.float64, "float32": tf.float32}[spec.dtype]
    step = _step_function(get_backend("tensorflow").function(spec.arm, spec.impl), spec.lr, spec.beta1, spec.beta2,
                          spec.eps)
    fn = tf.function(step, jit_compile=True) if mode == "compiled" else None
    run = fn or step
    with tf.device(get_backend("tensorflow").module.tf_device()):
        t = lambda a: tf.constant(np.asarray(a), dtype=dtype)
        flat = [t(a) for wb in spec.init for a in wb]
        m = [tf.zeros_like(p) for p in flat]
        v = [tf.zeros_like(p) for p in flat]
        idx = tf.constant(spec.order[:, 0, 0])
        xb = tf.gather(t(spec.x_train), idx, batch_dims=1)
        yb = tf.gather(t(spec.y_train), idx, batch_dims=1)
        w, c1, c2 = t(spec.weights[0]), t(spec.c1[0, 0]), t(spec.c2[0, 0])
    return (lambda: run(flat, m, v, xb, yb, w, c1, c2)[3]), fn


@cache
def _matched_trainer(arm: str, impl: str, lr: float, beta1: float, beta2: float, eps: float):
    """The compiled whole-training function of the matched regime for one arm (cached: traced once per
    shapes)."""
    act = get_backend("tensorflow").function(arm, impl)
    step = _step_function(act, lr, beta1, beta2, eps)

    @tf.function(jit_compile=True, reduce_retracing=True)
    def fit(flat, x_train, y_train, x_val, y_val, order, weights, shares, c1, c2):
        flat = list(flat)
        m = [tf.zeros_like(t) for t in flat]
        v = [tf.zeros_like(t) for t in flat]
        n_epochs, n_steps = tf.shape(order)[1], tf.shape(order)[2]  # dynamic: the trace is reused across shapes
        train_loss = tf.TensorArray(x_train.dtype, size=n_epochs)
        val_loss = tf.TensorArray(x_train.dtype, size=n_epochs)
        for e in tf.range(n_epochs):
            running = tf.zeros_like(y_val[:, 0])
            for k in tf.range(n_steps):
                idx = order[:, e, k]
                flat, m, v, loss = step(flat, m, v, tf.gather(x_train, idx, batch_dims=1),
                                        tf.gather(y_train, idx, batch_dims=1), weights[k], c1[e, k], c2[e, k])
                running += shares[k] * loss
            train_loss = train_loss.write(e, running)
            val_loss = val_loss.write(e, tf.reduce_mean(_bce(_forward(_nest(flat), x_val, act), y_val), axis=1))
        return tf.transpose(train_loss.stack()), tf.transpose(val_loss.stack()), flat

    return fit


def _train_matched(spec: TrainSpec, dtype) -> TrainOutput:
    t = lambda a: tf.constant(np.asarray(a), dtype=dtype)
    fit = _matched_trainer(spec.arm, spec.impl, spec.lr, spec.beta1, spec.beta2, spec.eps)
    flat = [t(a) for wb in spec.init for a in wb]
    train_loss, val_loss, flat = fit(flat, t(spec.x_train), t(spec.y_train), t(spec.x_val), t(spec.y_val),
                                       tf.constant(spec.order), t(spec.weights), t(spec.step_shares), t(spec.c1),
                                       t(spec.c2))
    act = get_backend("tensorflow").function(spec.arm, spec.impl)
    logits = [_forward(_nest(flat), t(a), act) for a in (spec.x_train, spec.x_val, spec.x_test, spec.grid)]
    recipe = ("shared numpy Glorot-uniform init and order; core.contracts.training.adam_step (Kingma & Ba Alg. 1) "
              f"in one tf.function(jit_compile=True), eps={spec.eps:g}")
    return TrainOutput(*(a.numpy().astype(np.float64) for a in (train_loss, val_loss, *logits)), recipe=recipe)


def _keras():
    import keras

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"the native TensorFlow regime needs KERAS_BACKEND=tensorflow, not "
                           f"{keras.backend.backend()!r}")
    return keras


def _train_native(spec: TrainSpec, dtype) -> TrainOutput:
    keras = _keras()
    act = get_backend("tensorflow").function(spec.arm, spec.impl)
    n_seeds = spec.n_seeds
    widths = [*spec.hidden, 1]

    class SeedBatchedDense(keras.layers.Layer):
        """S Keras Dense layers side by side: (n, S, fan_in) -> (n, S, units); each seed's kernel from Keras
        Dense's default initialiser glorot_uniform (seeded by the seed and the layer index), bias zeros."""

        def __init__(self, units: int, layer: int, **kw):
            super().__init__(dtype=spec.dtype, **kw)
            self.units, self.layer = units, layer

        def build(self, input_shape):
            fan_in = input_shape[-1]
            kernels = np.stack([
                keras.ops.convert_to_numpy(keras.initializers.GlorotUniform(seed=seed * 1000 + self.layer)(
                    (fan_in, self.units), dtype=spec.dtype)) for seed in spec.seeds])
            self.kernel = self.add_weight(shape=kernels.shape, initializer=keras.initializers.Constant(kernels),
                                          name="kernel")
            self.bias = self.add_weight(shape=(n_seeds, self.units), initializer="zeros", name="bias")

        def call(self, x):
            return tf.einsum("nsi,sio->nso", x, self.kernel) + self.bias

    keras.utils.set_random_seed(spec.seeds[0])
    inputs = keras.Input((n_seeds, spec.x_train.shape[2]), dtype=spec.dtype)
    h = inputs
    for i, w in enumerate(widths):
        h = SeedBatchedDense(w, i)(h)
        if i < len(widths) - 1:
            h = keras.layers.Activation(act, dtype=spec.dtype)(h)
    model = keras.Model(inputs, keras.layers.Reshape((n_seeds,), dtype=spec.dtype)(h))

    def loss(y_true, y_pred):  # (n, S) -> (n,): sum over seeds; Keras then averages over the minibatch
        return tf.reduce_sum(_bce(y_pred, tf.cast(y_true, y_pred.dtype)), axis=-1)

    def seed_bce(s):  # (n, S) -> (n,): seed s's per-sample BCE; its Mean over an epoch is the running loss
        return lambda y, z: _bce(tf.cast(z[:, s], spec.dtype), tf.cast(y[:, s], spec.dtype))

    metrics = [keras.metrics.MeanMetricWrapper(seed_bce(s), name=f"bce{s}", dtype=spec.dtype)
               for s in range(n_seeds)]
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=spec.lr, beta_1=spec.beta1, beta_2=spec.beta2),
                  loss=loss, metrics=metrics, steps_per_execution=spec.steps_per_epoch)
    seed_major = lambda a: np.swapaxes(np.asarray(a), 0, 1)  # (S, n, ...) -> (n, S, ...)
    hist = model.fit(seed_major(spec.x_train), seed_major(spec.y_train), batch_size=spec.batch_size,
                     epochs=spec.epochs, shuffle=True, verbose=0,
                     validation_data=(seed_major(spec.x_val), seed_major(spec.y_val))).history
    train_loss = np.array([hist[f"bce{s}"] for s in range(n_seeds)])
    val_loss = np.array([hist[f"val_bce{s}"] for s in range(n_seeds)])
    logits = [seed_major(model.predict(seed_major(a), batch_size=4096, verbose=0))
              for a in (spec.x_train, spec.x_val, spec.x_test, spec.grid)]
    recipe = ("Keras Dense default init (glorot_uniform, zero bias); Keras fit shuffle; keras.optimizers.Adam "
              "epsilon=1e-7 (eps added to sqrt(v) before bias correction)")
    return TrainOutput(train_loss, val_loss, *(np.asarray(a, np.float64) for a in logits), recipe=recipe)


def train(spec: TrainSpec) -> TrainOutput:
    """Train the spec's S seeds of one arm together; returns their curves and logits (see
    core.contracts.training.TrainOutput).

    Raises ValueError for an unknown arm / impl (from the backend catalogue), RuntimeError when Keras runs on
    another backend than TensorFlow (native regime).
    """
    dtype = {"float64": tf.float64, "float32": tf.float32}[spec.dtype]
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    # one tf.function per arm and dtype is by design; TF's "triggered tf.function retracing" hint does not
    # apply
    tf_log.setLevel(logging.ERROR)
    try:
        with tf.device(get_backend("tensorflow").module.tf_device()):
            return _train_matched(spec, dtype) if spec.regime == "matched" else _train_native(spec, dtype)
    finally:
        tf_log.setLevel(level)
