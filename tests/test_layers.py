"""gelulab's layers in each framework's own models: torch nn.Modules (train, state_dict save/load, torch.compile),
Keras layers (fit, model.save / keras.models.load_model, also in a fresh process), flax.linen modules and the
functions in a flax.nnx model (train under jax.jit); and the README's three-line blocks, run as written.

References: core.parity.reference (mpmath) for the layers' values; the frameworks' own layers (torch.nn.GELU's repr and
values). Training: a 4 -> 16 -> 1 MLP fitting y = sin(x1 + x2 + x3 + x4) on 64 fixed points, float32 (jax float64
needs jax_enable_x64), Adam lr 1e-2; "trains" means the loss after 30 steps is below 0.8 of the first.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import readme_blocks
from conftest import requires

from gelulab.core.activations import ACTIVATIONS
from gelulab.core.parity.reference import reference

KEYS = list(ACTIVATIONS)
RNG = np.random.default_rng(0)
XS = RNG.normal(size=(64, 4)).astype(np.float32)
YS = np.sin(XS.sum(axis=1, keepdims=True)).astype(np.float32)
GRID = np.linspace(-6.0, 6.0, 97).astype(np.float32)
STEPS = 30


def assert_trains(losses):
    assert losses[-1] < 0.8 * losses[0], f"loss {losses[0]:.4f} -> {losses[-1]:.4f}"


# --- torch -------------------------------------------------------------------------------------------------------


@pytest.fixture
def api_path(monkeypatch):
    """For a test of the layers (training, state_dict, names) rather than of the kernels' compiled loops: the torch
    kernel serves its eager calls by its float64 path (GELULAB_KERNEL_COMPILE=off; the same accuracy contract and
    autograd.Function), so the test builds no loop. The loops are judged by tests/test_parity.py, tests/test_kernels.py
    and tests/test_api.py (their gradients and torch.func transforms)."""
    monkeypatch.setenv("GELULAB_KERNEL_COMPILE", "off")


def torch_mlp(activation):
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), activation, torch.nn.Linear(16, 1))


def train_torch(model):
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.from_numpy(XS), torch.from_numpy(YS)
    losses = []
    for _ in range(STEPS):
        loss = torch.mean((model(x) - y) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def torch_round_trip(model, factory, tmp_path):
    import torch

    path = tmp_path / "model.pt"
    torch.save(model.state_dict(), path)
    again = factory()
    again.load_state_dict(torch.load(path))
    x = torch.from_numpy(XS)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x), rtol=0, atol=0)
    return again


@pytest.mark.training
@pytest.mark.usefixtures("api_path")
@pytest.mark.parametrize("key", KEYS)
def test_torch_layer_trains_and_survives_state_dict(key, tmp_path):
    requires("torch")
    from gelulab.layers.torch import layer_for

    model = torch_mlp(layer_for(key))
    assert_trains(train_torch(model))
    assert [k for k in model.state_dict() if k.startswith("1.")] == []  # the activation holds no state
    torch_round_trip(model, lambda: torch_mlp(layer_for(key)), tmp_path)


@pytest.mark.compile
@pytest.mark.training
@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
def test_torch_compile_of_the_model_gives_the_same_outputs(key, monkeypatch):
    torch = requires("torch")
    from gelulab.layers.torch import layer_for

    model = torch_mlp(layer_for(key))
    with monkeypatch.context() as m:  # the training is not compared: its eager calls build no loop
        m.setenv("GELULAB_KERNEL_COMPILE", "off")
        train_torch(model)
    x = torch.from_numpy(XS)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, fullgraph=True)(x), model(x), rtol=1e-6, atol=1e-7)


@pytest.mark.usefixtures("api_path")
def test_torch_gelu_is_a_drop_in_for_torch_nn_gelu():
    torch = requires("torch")
    from gelulab.layers.torch import GELU, ReLU

    for mode in ("none", "tanh"):
        ours, theirs = GELU(approximate=mode), torch.nn.GELU(approximate=mode)
        assert repr(ours) == repr(theirs)[:-1] + ", impl='builtin')"  # the default: torch's own op
        x = torch.from_numpy(GRID)
        np.testing.assert_array_equal(ours(x).numpy(), theirs(x).numpy())
        kernel = GELU(approximate=mode, impl="kernel")  # opt-in: within 1 ULP of the correctly rounded value
        np.testing.assert_allclose(kernel(x).numpy(), reference(f"gelu_{mode}", GRID, "float32"), rtol=1.2e-7, atol=0)
    with pytest.raises(TypeError, match="dtype torch.int64"):
        GELU()(torch.arange(3))
    assert repr(ReLU(inplace=True)) == "ReLU(impl='builtin', inplace=True)"
    x = torch.from_numpy(GRID.copy())
    out = ReLU(inplace=True)(x)
    assert out.data_ptr() == x.data_ptr() and float(x.min()) == 0.0  # in place, as torch.nn.ReLU(inplace=True)
    for bad in (True, None, "exact"):
        with pytest.raises(ValueError, match="approximate="):
            GELU(approximate=bad)
    with pytest.raises(ValueError, match="impl="):
        GELU(impl="fast")


@pytest.mark.usefixtures("api_path")
@pytest.mark.parametrize("impl", ["builtin", "kernel", "formula"])
def test_torch_inplace_relu_and_silu_backpropagate_as_torchs(impl):
    # torch.nn.ReLU / SiLU(inplace=True) on a non-leaf tensor under autograd: the same values and input gradients
    torch = requires("torch")
    from gelulab.layers.torch import ReLU, SiLU

    for ours, theirs in ((ReLU(inplace=True, impl=impl), torch.nn.ReLU(inplace=True)),
                         (SiLU(inplace=True, impl=impl), torch.nn.SiLU(inplace=True))):
        grads, outs = [], []
        for module in (ours, theirs):
            a = torch.from_numpy(GRID.copy()).requires_grad_()
            b = a * 1.0
            out = module(b)
            assert out.data_ptr() == b.data_ptr()  # in place
            out.sum().backward()
            grads.append(a.grad.numpy())
            outs.append(out.detach().numpy())
        if impl == "builtin":  # torch's own op: bit for bit
            np.testing.assert_array_equal(outs[0], outs[1])
            np.testing.assert_array_equal(grads[0], grads[1])
        else:
            np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("api_path")
def test_torchscript_builtin_is_written_from_the_catalogues_descriptor(tmp_path):
    # every entry with a torch builtin scripts as torch's own op (bit for bit after torch.jit.save / load), and a
    # new unit's descriptor scripts too: squared ReLU as an Expression, against torch.relu(x) ** 2 itself
    torch = requires("torch")
    from gelulab.core.activations._entry import Expression
    from gelulab.layers.torch import Activation, script_descriptor

    x = torch.from_numpy(GRID)
    for key, entry in ACTIVATIONS.items():
        if entry.builtins.get("torch") is None:
            continue
        layer = Activation(key, impl="builtin")
        torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Identity(), layer)), tmp_path / "m.pt")
        np.testing.assert_array_equal(torch.jit.load(tmp_path / "m.pt")(x).numpy(),
                                      entry.builtin("torch")(x).numpy(), err_msg=key)
    squared = Expression("torch.nn.functional.relu(x) ** 2", lambda r, x: r("torch.nn.functional.relu")(x) ** 2)
    np.testing.assert_array_equal(script_descriptor(squared, "squared_relu")(x).numpy(), (torch.relu(x) ** 2).numpy())
    branching = Expression("x if x > 0 else 0", lambda r, x: x if x > 0 else 0 * x)
    with pytest.raises(RuntimeError, match=r"^torch.jit.script: the torch builtin x if x > 0 else 0 cannot be "
                                           r"scripted \(TypeError: .*\); use torch.jit.trace or torch.export$"):
        script_descriptor(branching, "branching")


@pytest.mark.training
@pytest.mark.usefixtures("api_path")
def test_readme_torch_block(tmp_path):
    requires("torch")
    from gelulab.layers.torch import GELU

    model = readme_blocks.run("PyTorch")["model"]
    assert isinstance(model[1], GELU) and model[1].approximate == "tanh"
    assert_trains(train_torch(model))
    torch_round_trip(model, lambda: readme_blocks.run("PyTorch")["model"], tmp_path)


# --- Keras -------------------------------------------------------------------------------------------------------


def keras_mlp(activation):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), activation, keras.layers.Dense(1)])
    return model


def train_keras(model):
    import keras

    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    return model.fit(XS, YS, batch_size=64, epochs=STEPS, verbose=0, shuffle=False).history["loss"]


def keras_round_trip(model, tmp_path):
    import keras

    path = tmp_path / "model.keras"
    model.save(path)
    again = keras.models.load_model(path)  # no custom_objects
    np.testing.assert_array_equal(np.asarray(again.predict(XS, verbose=0)), np.asarray(model.predict(XS, verbose=0)))
    return path


@pytest.mark.training
@pytest.mark.parametrize("key", KEYS)
def test_keras_layer_trains_and_survives_save_and_load(key, tmp_path):
    requires("keras")
    from gelulab.layers.keras import layer_for

    model = keras_mlp(layer_for(key))
    assert_trains(train_keras(model))
    keras_round_trip(model, tmp_path)


@pytest.mark.training
def test_keras_layer_as_activation_argument_round_trips(tmp_path):
    keras = requires("keras")
    from gelulab.layers.keras import GELU

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation=GELU(approximate="sigmoid")),
                              keras.layers.Dense(1)])
    assert_trains(train_keras(model))
    keras_round_trip(model, tmp_path)
    config = GELU(approximate="tanh", impl="builtin", name="g").get_config()
    assert (config["approximate"], config["impl"], config["name"]) == ("tanh", "builtin", "g")
    x = GRID.reshape(1, -1)
    theirs = keras.activations.gelu(keras.ops.convert_to_tensor(x), approximate=True)  # the default: Keras' own op
    np.testing.assert_array_equal(np.asarray(GELU(approximate="tanh")(x)), np.asarray(theirs))
    np.testing.assert_allclose(np.asarray(GELU(approximate="tanh", impl="kernel")(x)).ravel(),  # opt-in: 1 ULP
                               reference("gelu_tanh", GRID, "float32"), rtol=1.2e-7, atol=0)
    with pytest.raises(ValueError, match="approximate="):
        GELU(approximate=True)


# One fresh process: load_model first without gelulab's import (as documented, Keras cannot find the class: it
# imports only its own packages' modules), then after `import gelulab.layers.keras` (it loads and predicts).
_LOAD = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    try:
        keras.models.load_model(sys.argv[1])
    except Exception as e:
        print("without the import:", type(e).__name__, repr(str(e)))  # one line
    else:
        sys.exit("load_model found the layers without gelulab.layers.keras imported")
    assert "gelulab.layers.keras" not in sys.modules
    import gelulab.layers.keras
    model = keras.models.load_model(sys.argv[1])
    np.save(sys.argv[2], np.asarray(model.predict(np.load(sys.argv[3]), verbose=0)))
""")


@pytest.mark.training
@pytest.mark.subprocess
@pytest.mark.slow
def test_keras_model_loads_in_a_fresh_process_that_imports_the_layers(tmp_path):
    requires("keras")
    from gelulab.layers.keras import GELU

    model = keras_mlp(GELU(approximate="tanh"))
    train_keras(model)
    path = keras_round_trip(model, tmp_path)
    np.save(tmp_path / "x.npy", XS)
    args = [str(path), str(tmp_path / "y.npy"), str(tmp_path / "x.npy")]
    out = subprocess.run([sys.executable, "-c", _LOAD, *args], check=False, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    bare = [line for line in out.stdout.splitlines() if line.startswith("without the import:")]
    assert len(bare) == 1 and "GELU" in bare[0], out.stdout[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.asarray(model.predict(XS, verbose=0)))


@pytest.mark.training
def test_readme_keras_block(tmp_path):
    requires("keras")
    from gelulab.layers.keras import GELU

    model = readme_blocks.run("Keras")["model"]
    assert isinstance(model.layers[1], GELU) and model.layers[1].approximate == "tanh"
    assert_trains(train_keras(model))
    keras_round_trip(model, tmp_path)


# --- Flax --------------------------------------------------------------------------------------------------------


def train_linen(model):
    import jax
    import jax.numpy as jnp
    import optax

    params = model.init(jax.random.PRNGKey(0), XS)
    opt = optax.adam(1e-2)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply(p, XS) - YS) ** 2))(params)
        updates, state = opt.update(grads, state)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(STEPS):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    return losses


@pytest.mark.compile
@pytest.mark.training
@pytest.mark.parametrize("key", KEYS)
def test_flax_linen_layer_trains_under_jit(key):
    requires("flax")
    import flax.linen as nn

    from gelulab.layers.flax import Activation

    assert_trains(train_linen(nn.Sequential([nn.Dense(16), Activation(key), nn.Dense(1)])))


def test_flax_named_layers():
    requires("flax")
    import jax.numpy as jnp

    from gelulab.layers.flax import GELU, ReLU

    x = jnp.asarray(GRID)
    np.testing.assert_allclose(np.asarray(GELU(approximate="sigmoid").apply({}, x)),
                               reference("gelu_sigmoid", GRID, "float32"), rtol=1e-6, atol=0)
    np.testing.assert_array_equal(np.asarray(ReLU().apply({}, x)), reference("relu", GRID, "float32"))
    with pytest.raises(ValueError, match="approximate="):
        GELU(approximate=True)


@pytest.mark.compile
@pytest.mark.training
def test_readme_flax_blocks():
    requires("flax")
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from gelulab.layers.flax import GELU

    model = readme_blocks.run("Flax")["model"]
    assert isinstance(model.layers[1], GELU)
    assert_trains(train_linen(model))

    model = readme_blocks.run("Flax nnx")["model"]  # gelulab.gelu called inside an nnx model
    opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(XS) - YS) ** 2))(model)
        opt.update(model, grads)
        return loss

    assert_trains([float(step(model, opt)) for _ in range(STEPS)])
