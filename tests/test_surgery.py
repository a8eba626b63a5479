"""gelulab.swap on torch module trees (torch.nn activations, transformers' BertModel built with each hidden_act)
and on Keras models (activation= arguments, Activation layers); the records; errors before any change.

References: transformers' ACT2CLS (transformers/activations.py), which names the class each `hidden_act` builds,
and the formula each class states; core.parity.reference (mpmath) for what the model computes after the swap.
"""
from __future__ import annotations

import numpy as np
import pytest
import readme_blocks
from conftest import requires

from gelulab import swap
from gelulab.core.activations import ACTIVATIONS
from gelulab.core.parity.reference import reference

# transformers hidden_act -> (the class ACT2CLS builds, the catalogue variant of its stated formula)
HF_ACTS = {
    "gelu": ("GELUActivation", "gelu_none"),
    "gelu_python": ("GELUActivation", "gelu_none"),
    "gelu_new": ("NewGELUActivation", "gelu_tanh"),
    "gelu_pytorch_tanh": ("GELUTanh", "gelu_tanh"),
    "gelu_python_tanh": ("GELUTanh", "gelu_tanh"),
    "gelu_fast": ("FastGELUActivation", "gelu_tanh"),
    "gelu_accurate": ("AccurateGELUActivation", "gelu_tanh"),
    "quick_gelu": ("QuickGELUActivation", "gelu_sigmoid"),
    "relu": ("ReLU", "relu"),
    "silu": ("SiLUActivation", "silu"),
    "swish": ("SiLU", "silu"),
}
GRID = np.linspace(-6.0, 6.0, 97).astype(np.float32)


def tiny_bert(hidden_act):
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=32, hidden_act=hidden_act)
    return transformers.BertModel(config).eval()


@pytest.mark.parametrize("hidden_act", list(HF_ACTS))
def test_transformers_bert_every_hidden_act(hidden_act):
    requires("transformers")
    import torch

    cls, variant = HF_ACTS[hidden_act]
    model = tiny_bert(hidden_act)
    ids = torch.tensor([[1, 5, 9, 2, 0]])
    with torch.no_grad():
        before = model(ids).last_hidden_state
    records = swap(model, to="gelu_tanh")
    assert [r.path for r in records] == [f"encoder.layer.{i}.intermediate.intermediate_act_fn" for i in range(3)]
    assert {(r.was, r.was_class.rsplit(".", 1)[1], r.now) for r in records} == {(variant, cls, "gelu_tanh")}
    act = model.encoder.layer[0].intermediate.intermediate_act_fn  # the default: torch's own tanh GELU
    x = torch.from_numpy(GRID)
    np.testing.assert_array_equal(act(x).numpy(), torch.nn.functional.gelu(x, approximate="tanh").numpy())
    kernel = tiny_bert(hidden_act)
    swap(kernel, to="gelu_tanh", impl="kernel")  # opt-in: within 1 ULP of the correctly rounded value
    act = kernel.encoder.layer[0].intermediate.intermediate_act_fn
    np.testing.assert_allclose(act(x).numpy(), reference("gelu_tanh", GRID, "float32"), rtol=1.2e-7, atol=0)
    if variant in ACTIVATIONS:  # to=None keeps each variant: the model computes what it did
        model = tiny_bert(hidden_act)
        kept = swap(model, impl="formula")
        assert [r.now for r in kept] == [variant] * 3
        with torch.no_grad():
            torch.testing.assert_close(model(ids).last_hidden_state, before, rtol=1e-4, atol=1e-5)


def test_clipped_gelu_is_left_alone():
    requires("transformers")
    model = tiny_bert("gelu_10")
    assert swap(model, to="relu") == []
    assert type(model.encoder.layer[0].intermediate.intermediate_act_fn).__name__ == "ClippedGELUActivation"


def test_torch_tree_mapping_only_and_records():
    torch = requires("torch")
    from gelulab.layers.torch import GELU, ReLU

    inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU("tanh"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), inner, torch.nn.GELU(), torch.nn.Tanh())
    records = swap(model, to={"gelu_tanh": "gelu_none", "relu": "gelu_sigmoid"}, only=["gelu_tanh", "relu"])
    assert [(r.path, r.was, r.now) for r in records] == [("1", "relu", "gelu_sigmoid"),
                                                         ("2.1", "gelu_tanh", "gelu_none")]
    assert records[1].was_class == "torch.nn.modules.activation.GELU"
    assert records[1].now_class == "gelulab.layers.torch.GELU(approximate='none', impl='builtin')"
    assert isinstance(model[1], GELU) and model[1].approximate == "sigmoid"
    assert type(model[3]) is torch.nn.GELU and type(model[4]) is torch.nn.Tanh  # not selected / not an activation
    again = swap(model, to="relu", impl="builtin")  # gelulab's own layers are recognised too
    assert [(r.path, r.was) for r in again] == [("1", "gelu_sigmoid"), ("2.1", "gelu_none"), ("3", "gelu_none")]
    assert all(isinstance(m, ReLU) and m.impl == "builtin" for m in (model[1], model[2][1], model[3]))


def test_bad_target_changes_nothing():
    torch = requires("torch")
    model = torch.nn.Sequential(torch.nn.GELU(), torch.nn.ReLU())
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        swap(model, to="swish")
    with pytest.raises(ValueError, match="impl="):
        swap(model, to="relu", impl="fast")
    assert [type(m) for m in model] == [torch.nn.GELU, torch.nn.ReLU]
    with pytest.raises(ValueError, match=r"name what to change: to=.*or impl="):
        swap(model)  # neither a variant nor an impl: nothing would change
    assert [type(m) for m in model] == [torch.nn.GELU, torch.nn.ReLU]
    with pytest.raises(TypeError, match="expected a torch.nn.Module or a keras"):
        swap(object(), impl="kernel")


def test_keras_model_activations_and_save_load(tmp_path):
    keras = requires("keras")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    h = keras.layers.Dense(8, activation="gelu", name="d1")(inputs)
    h = keras.layers.Activation("relu", name="act")(h)
    h = keras.layers.Dense(8, activation="tanh", name="d2")(h)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(h))
    records = swap(model, to="gelu_tanh")
    assert [(r.path, r.was, r.was_class, r.now) for r in records] == [
        ("d1.activation", "gelu_none", "keras.activations.gelu", "gelu_tanh"),
        ("act.activation", "relu", "keras.activations.relu", "gelu_tanh")]
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    d1 = model.get_layer("d1")
    pre = np.asarray(x @ np.asarray(d1.kernel) + np.asarray(d1.bias), np.float32)
    np.testing.assert_allclose(np.asarray(d1(x)), reference("gelu_tanh", pre, "float32"), rtol=1e-5, atol=1e-7)
    y = np.asarray(model.predict(x, verbose=0))
    model.save(tmp_path / "m.keras")
    np.testing.assert_array_equal(np.asarray(keras.models.load_model(tmp_path / "m.keras").predict(x, verbose=0)), y)


def test_readme_swap_block():
    requires("transformers")
    namespace = readme_blocks.run("Swap")
    assert len(namespace["records"]) == 2


def test_unknown_keys_in_only_or_a_mapping_are_refused_and_a_string_only_is_one_key():
    # docs/in-your-model.md: "Unknown keys raise ValueError before anything is replaced"
    torch = requires("torch")
    model = torch.nn.Sequential(torch.nn.GELU(), torch.nn.ReLU())
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        swap(model, to="relu", only=["gelu"])
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        swap(model, to={"gelu": "relu"})
    assert [type(m) for m in model] == [torch.nn.GELU, torch.nn.ReLU]
    records = swap(model, to="silu", only="gelu_none")  # one key, not the letters g, e, l, ...
    assert [(r.path, r.was, r.now) for r in records] == [("0", "gelu_none", "silu")]
