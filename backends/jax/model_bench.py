"""The Flax rows of `gelulab bench --model` (gelulab.benchmarks.model): an MLP of flax.linen.Dense layers on JAX.

The model: Dense(w) then the activation for each hidden width, then Dense(widths[-1]), float32 parameters from
`model.init(jax.random.key(seed), x)` (the same for every arm). Arms (impl): "builtin" calls
jax.nn.gelu(x, approximate=False) (the exact GELU; jax.nn.gelu's default is the tanh form); "default" calls
gelulab's linen layer gelulab.layers.flax.GELU(approximate="none") with no impl argument (whatever the library's
default is); "kernel" and "formula" call gelulab.layers.flax.GELU(approximate="none", impl=...). Inputs: N(0, 1)
float32 (batch, widths[0]) and integer class labels, from numpy's default_rng(seed).

forward: `model.apply(params, x)`. train step: jax.value_and_grad of the mean softmax cross-entropy on logits
(optax.softmax_cross_entropy_with_integer_labels), then optax.adam (lr 1e-3): a pure function of the parameters,
the optimizer state and the batch, returning new ones (each timed call starts from the same state). eager: those
functions called as they are (op by op); compiled: under jax.jit.
"""
from __future__ import annotations

import importlib.util

import numpy as np

BACKEND = "jax"
MODEL = "Flax MLP"
COMPILER = "jax.jit"
INSTALL_HINT = "pip install -c constraints.txt -e '.[jax]'"
LR = 1e-3
KEY = "mlp"  # the --subject value of these rows (benchmarks/model.py)
ARMS = ("builtin", "default", "kernel", "formula")
DIRECTIONS = ("forward", "train step")
LABEL = "jax.nn.gelu(approximate=False)"


def unavailable() -> str | None:
    """Why the Flax rows cannot run here (jax, flax or optax missing), or None."""
    missing = [name for name in ("jax", "flax", "optax") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed; install with: {INSTALL_HINT}" if missing else None


def describe(sizes) -> dict:
    """flax's and optax's versions, the widths and the batch."""
    import flax
    import optax

    return {"flax": flax.__version__, "optax": optax.__version__, "widths": list(sizes.mlp_widths),
            "batch": sizes.mlp_batch}


def shape_text(sizes) -> str:
    """The MLP as the table shows it ("784-1024-1024-10, batch 128")."""
    return f"{'-'.join(map(str, sizes.mlp_widths))}, batch {sizes.mlp_batch}"


def _mlp(widths, impl, layer=None):
    import flax.linen as nn
    import jax

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            act = (lambda v: jax.nn.gelu(v, approximate=False)) if impl == "builtin" else \
                layer(None if impl == "default" else impl)
            for w in widths[1:-1]:
                x = act(nn.Dense(w)(x))
            return nn.Dense(widths[-1])(x)

    return MLP()


def builder(impl: str, direction: str, mode: str, sizes, seed: int, swap=None, layer=None):
    """A zero-argument function returning (call, fn) for benchmarks.runner.run_calls: call() runs one forward
    (returns the logits) or training step (returns the new parameters, optimizer state and loss); fn is the
    jax.jit function or None. layer(impl): the activation module of the arms other than "builtin" (the benchmark
    passes gelulab's linen GELU layer, layer(None) with no impl argument; a backend module does not import
    gelulab's public API)."""
    def build():
        import jax
        import jax.numpy as jnp
        import optax

        widths = sizes.mlp_widths
        rng = np.random.default_rng(seed)
        x = jnp.asarray(rng.standard_normal((sizes.mlp_batch, widths[0])).astype(np.float32))
        y = jnp.asarray(rng.integers(0, widths[-1], sizes.mlp_batch).astype(np.int32))
        reference = _mlp(widths, "builtin")
        params = reference.init(jax.random.key(seed), x)  # the activation has no parameters: one init for all arms
        model = _mlp(widths, impl, layer)
        if direction == "forward":
            def step(p, a):
                return model.apply(p, a)
            args = (params, x)
        else:
            tx = optax.adam(LR)

            def step(p, state, a, labels):
                def loss_fn(q):
                    return optax.softmax_cross_entropy_with_integer_labels(model.apply(q, a), labels).mean()

                loss, grads = jax.value_and_grad(loss_fn)(p)
                updates, state = tx.update(grads, state, p)
                return optax.apply_updates(p, updates), state, loss
            args = (params, tx.init(params), x, y)
        fn = jax.jit(step) if mode == "compiled" else None
        run = fn or step
        return (lambda: run(*args)), fn

    return build


def models() -> list:
    """The models of this module: the Flax MLP (this module)."""
    import sys

    return [sys.modules[__name__]]


OVERHEAD = "gelulab.layers.flax.GELU().apply({}, x) − a linen module of jax.nn.gelu, outside jit"  # overhead_builders


def overhead_builders(layer, size: int = 1024):
    """Builders (run_calls) of one call outside jax.jit of gelulab's default linen layer (layer(None)).apply and
    of a linen module calling jax.nn.gelu(x, approximate=False), on a float32 array of `size` N(0, 1) values:
    (ours, the plain module's)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Plain(nn.Module):
        @nn.compact
        def __call__(self, v):
            return jax.nn.gelu(v, approximate=False)

    x = jnp.asarray(np.random.default_rng(0).standard_normal(size).astype(np.float32))
    ours, theirs = layer(None), Plain()
    return (lambda: ((lambda: ours.apply({}, x)), None)), (lambda: ((lambda: theirs.apply({}, x)), None))


# The process-exit script of `gelulab bench --model` (benchmarks.first_call.exit_once), run as a fresh process with
# its JSON arguments {"arm", "threads", "steps"}: set threads, build a small model with gelulab's default layer (arm
# "default"), the framework's own ("framework") or gelulab's kernel ("kernel"), run a few training steps, and print
# the monotonic clock (system-wide on Linux, so comparable with the parent's) as its last line.
EXIT_SCRIPT = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
if "intra_op_parallelism_threads" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                               f"intra_op_parallelism_threads={args['threads']}")
import jax, jax.numpy as jnp, optax
import flax.linen as nn
import gelulab.layers.flax as L
arm = args["arm"]
class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Dense(256)(x)
        if arm == "framework":
            h = jax.nn.gelu(h, approximate=False)
        else:
            h = (L.GELU() if arm == "default" else L.GELU(impl="kernel"))(h)
        return nn.Dense(64)(h)
model = MLP()
x = jax.random.normal(jax.random.key(0), (64, 64))
params = model.init(jax.random.key(1), x)
tx = optax.adam(1e-3)
state = tx.init(params)
@jax.jit
def step(p, s):
    loss, g = jax.value_and_grad(lambda q: jnp.mean(jnp.square(model.apply(q, x))))(p)
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s, loss
for _ in range(args["steps"]):
    params, state, loss = step(params, state)
print(json.dumps({"loss": float(loss), "t": time.monotonic()}), flush=True)
"""
EXIT_ARMS = ("default", "framework")  # the arms whose exit is measured (the kernel builds no child process here)
