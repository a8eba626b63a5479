"""The Keras rows of `gelulab bench --model` (gelulab.benchmarks.model): an MLP of keras.layers.Dense layers on
Keras' TensorFlow backend.

The model: keras.Sequential([Input(widths[0]), Dense(w, activation="gelu") for each hidden width, Dense(widths[-1])])
(keras.activations.gelu's default is the exact GELU, approximate=False), float32. Arms (impl): "builtin" is that
model; "default" the same MLP with gelulab's Keras GELU layer, constructed with no impl argument (whatever the
library's default is), as each Dense's activation; "kernel" and "formula" are copies with its weights after
`gelulab.swap(model, impl=...)` (each Dense's activation becomes gelulab's Keras GELU layer); every arm's weights are
the same draws (numpy's default_rng(seed): N(0, 1/fan_in) matrices, zero biases). Inputs: N(0, 1) float32 (batch,
widths[0]) and integer class labels, from numpy's default_rng(seed).

forward: `model(x, training=False)`. train step: a tf.GradientTape step, softmax cross-entropy on logits
(keras.losses.SparseCategoricalCrossentropy(from_logits=True)), keras.optimizers.Adam (lr 1e-3) applied to the
trainable variables. compiled: the same function under tf.function (graph mode without XLA, which is what
Keras' own compile() uses on a machine with CPUs only: its jit_compile="auto" turns XLA off there).
"""
from __future__ import annotations

import importlib.util

import numpy as np

BACKEND = "tensorflow"
MODEL = "Keras MLP"
COMPILER = "tf.function"
INSTALL_HINT = "pip install -c constraints.txt -e '.[tensorflow]'"
LR = 1e-3
KEY = "mlp"  # the --subject value of these rows (benchmarks/model.py)
ARMS = ("builtin", "default", "kernel", "formula")
DIRECTIONS = ("forward", "train step")
LABEL = "keras.activations.gelu (Dense(activation='gelu'))"


def unavailable() -> str | None:
    """Why the Keras rows cannot run here (keras or tensorflow not installed; nothing is imported), or None."""
    missing = [name for name in ("tensorflow", "keras") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed; install with: {INSTALL_HINT}" if missing else None


def unsupported() -> str | None:
    """Why the Keras rows cannot run with the frameworks loaded (Keras on another backend than TensorFlow), or
    None. Imports keras (after gelulab has loaded TensorFlow with its settings)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return (f"Keras runs on its {keras.backend.backend()!r} backend; the Keras MLP rows need "
                "KERAS_BACKEND=tensorflow")
    return None


def describe(sizes) -> dict:
    """keras' version and backend, the widths and the batch."""
    import keras

    return {"keras": keras.__version__, "keras_backend": keras.backend.backend(), "widths": list(sizes.mlp_widths),
            "batch": sizes.mlp_batch}


def shape_text(sizes) -> str:
    """The MLP as the table shows it ("784-1024-1024-10, batch 128")."""
    return f"{'-'.join(map(str, sizes.mlp_widths))}, batch {sizes.mlp_batch}"


def _mlp(widths, activation="gelu"):
    import keras

    return keras.Sequential([keras.Input((widths[0],)),
                             *[keras.layers.Dense(w, activation=activation() if callable(activation) else activation)
                               for w in widths[1:-1]],
                             keras.layers.Dense(widths[-1])])


def builder(impl: str, direction: str, mode: str, sizes, seed: int, swap=None, layer=None):
    """A zero-argument function returning (call, fn) for benchmarks.runner.run_calls: call() runs one forward
    (returns the logits) or training step (returns the loss); fn is the tf.function or None. Raises RuntimeError when
    the swap replaced nothing. swap(model, impl=...): gelulab.swap; layer(impl): gelulab's Keras GELU (layer(None): no
    impl argument); both passed by the benchmark (a backend module does not import gelulab's public API)."""
    def build():
        import keras
        import tensorflow as tf

        widths = sizes.mlp_widths
        rng = np.random.default_rng(seed)
        model = _mlp(widths, (lambda: layer(None)) if impl == "default" else "gelu")
        model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * np.float32(1 / np.sqrt(w.shape[0]))
                           if w.ndim == 2 else np.zeros(w.shape, np.float32) for w in model.get_weights()])
        if impl not in ("builtin", "default") and not swap(model, impl=impl):
            raise RuntimeError("gelulab.swap found no activation to replace in the Keras MLP")
        x = tf.constant(rng.standard_normal((sizes.mlp_batch, widths[0])).astype(np.float32))
        y = tf.constant(rng.integers(0, widths[-1], sizes.mlp_batch))
        if direction == "forward":
            def step():
                return model(x, training=False)
        else:
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            opt = keras.optimizers.Adam(LR)
            opt.build(model.trainable_variables)

            def step():
                with tf.GradientTape() as tape:
                    loss = loss_fn(y, model(x, training=True))
                grads = tape.gradient(loss, model.trainable_variables)
                opt.apply(grads, model.trainable_variables)
                return loss
        fn = tf.function(step, jit_compile=False) if mode == "compiled" else None
        return (fn or step), fn

    return build


def models() -> list:
    """The models of this module: the Keras MLP (this module)."""
    import sys

    return [sys.modules[__name__]]


OVERHEAD = "gelulab.layers.keras.GELU()(x) − keras.layers.Activation('gelu')(x), eager"  # overhead_builders


def overhead_builders(layer, size: int = 1024):
    """Builders (run_calls) of one eager call of gelulab's default Keras layer (layer(None)) and of
    keras.layers.Activation("gelu") on a float32 tensor of `size` N(0, 1) values: (ours, Keras')."""
    import keras
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(0).standard_normal(size).astype(np.float32))
    ours, theirs = layer(None), keras.layers.Activation("gelu")
    ours(x), theirs(x)  # built
    return (lambda: ((lambda: ours(x)), None)), (lambda: ((lambda: theirs(x)), None))


# The process-exit script of `gelulab bench --model` (benchmarks.first_call.exit_once), run as a fresh process with
# its JSON arguments {"arm", "threads", "steps"}: set threads, build a small model with gelulab's default layer (arm
# "default"), the framework's own ("framework") or gelulab's kernel ("kernel"), run a few training steps, and print
# the monotonic clock (system-wide on Linux, so comparable with the parent's) as its last line.
EXIT_SCRIPT = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(args["threads"])
tf.config.threading.set_inter_op_parallelism_threads(args["threads"])
import keras
import gelulab.layers.keras as L
act = {"default": lambda: L.GELU(), "framework": lambda: "gelu", "kernel": lambda: L.GELU(impl="kernel")}[args["arm"]]
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation=act()), keras.layers.Dense(64)])
opt = keras.optimizers.Adam(1e-3)
x = tf.random.normal((64, 64))
for _ in range(args["steps"]):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True)))
    opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
print(json.dumps({"loss": float(loss), "t": time.monotonic()}), flush=True)
"""
EXIT_ARMS = ("default", "framework")  # the arms whose exit is measured (the kernel builds no child process here)
